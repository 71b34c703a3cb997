//! The vocabulary shared by the file model (`fs`) and the NFS procedures (`nfs3`):
//! status codes, attributes, attribute changes, create modes, directory pages.
//! Plain data; no I/O.

/// What a file-model operation can fail with, in the model's own words. Each front end
/// maps it with one explicit table (`nfs3::status::nfsstat3`, RFC 1813 §2.6;
/// `nfs4::status::from_fs`, RFC 8881 §15.1). The variants carry no wire numbers: a
/// cast would give a meaningless ordinal, and `tests/arch/check.py` refuses one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    Perm,
    NoEnt,
    Io,
    NxIo,
    Acces,
    Exist,
    XDev,
    NoDev,
    NotDir,
    IsDir,
    Inval,
    FBig,
    NoSpc,
    Rofs,
    MLink,
    NameTooLong,
    NotEmpty,
    DQuot,
    Stale,
    Remote,
    BadHandle,
    NotSync,
    BadCookie,
    NotSupp,
    TooSmall,
    ServerFault,
    BadType,
    Jukebox,
    /// No such extended attribute (RFC 8276 §8.1, NFS4ERR_NOXATTR).
    NoXattr,
    /// An extended attribute too large for the store (RFC 8276 §8.1,
    /// NFS4ERR_XATTR2BIG).
    Xattr2Big,
}

pub type FsResult<T> = Result<T, Status>;

/// ftype3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum FileKind {
    Reg = 1,
    Dir = 2,
    Blk = 3,
    Chr = 4,
    Lnk = 5,
    Sock = 6,
    Fifo = 7,
}

impl FileKind {
    /// ftype3 (RFC 1813 §2.5) or nfs_ftype4 (RFC 8881 §3.2: NF4REG = 1 ... NF4FIFO = 7,
    /// the same numbers) → kind.
    pub fn from_u32(v: u32) -> Option<FileKind> {
        Some(match v {
            1 => FileKind::Reg,
            2 => FileKind::Dir,
            3 => FileKind::Blk,
            4 => FileKind::Chr,
            5 => FileKind::Lnk,
            6 => FileKind::Sock,
            7 => FileKind::Fifo,
            _ => return None,
        })
    }

    /// A special file (MKNOD): block or character device, socket, fifo.
    pub fn is_special(self) -> bool {
        matches!(
            self,
            FileKind::Blk | FileKind::Chr | FileKind::Sock | FileKind::Fifo
        )
    }
}

/// A point in time: seconds since the epoch (signed, as NFSv4's nfstime4 `int64
/// seconds`, RFC 8881 §3.3.1) and nanoseconds (always below 10^9, also for times
/// before 1970: -0.5 s is `{ sec: -1, nsec: 500_000_000 }`). NFSv3's nfstime3 carries
/// uint32 seconds: its codec clamps to 0..=u32::MAX when encoding (so a time before 1970
/// or after 2106 set through NFSv4 reads back as 1970 or 2106 over NFSv3), and what it
/// decodes is always in that range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct NfsTime {
    pub sec: i64,
    pub nsec: u32,
}

impl NfsTime {
    pub fn now() -> NfsTime {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        NfsTime {
            sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            nsec: d.subsec_nanos(),
        }
    }

    /// Seconds clamped to nfstime3's uint32 (RFC 1813 §2.5).
    pub fn sec_u32(self) -> u32 {
        self.sec.clamp(0, u32::MAX as i64) as u32
    }

    /// Nanoseconds since the epoch, clamped to 0..=u64::MAX (times before 1970 → 0).
    pub fn as_ns_clamped(self) -> u64 {
        if self.sec < 0 {
            return 0;
        }
        (self.sec as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::from(self.nsec))
    }
}

/// fattr3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr {
    pub kind: FileKind,
    /// Permission bits only (0o7777).
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub used: u64,
    pub rdev: (u32, u32),
    pub fsid: u64,
    pub fileid: u64,
    pub atime: NfsTime,
    pub mtime: NfsTime,
    pub ctime: NfsTime,
    /// The NFSv4 change attribute (RFC 8881 §5.8.1.4): moves forward with every data or
    /// metadata change the file model makes (see `fs::imp` "Change attribute").
    pub change: u64,
}

/// wcc_attr: the pre-operation attributes of weak cache consistency data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WccAttr {
    pub size: u64,
    pub mtime: NfsTime,
    pub ctime: NfsTime,
}

impl From<&Attr> for WccAttr {
    fn from(a: &Attr) -> Self {
        WccAttr {
            size: a.size,
            mtime: a.mtime,
            ctime: a.ctime,
        }
    }
}

/// set_atime / set_mtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SetTime {
    #[default]
    DontChange,
    ServerTime,
    Client(NfsTime),
}

/// sattr3: each field `None`/`DontChange` leaves the attribute as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: SetTime,
    pub mtime: SetTime,
}

/// createhow3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateMode {
    Unchecked(SetAttr),
    Guarded(SetAttr),
    /// The 8-byte createverf3; stored with the file so a retransmitted CREATE with the
    /// same verifier succeeds and a different one gets NFS3ERR_EXIST.
    Exclusive([u8; 8]),
    /// NFSv4.1 EXCLUSIVE4_1 (RFC 8881 §18.16.3): the verifier is stored as for
    /// `Exclusive`, and the attributes are applied when the file is created. A
    /// retransmission with the same verifier succeeds and returns the file (attributes
    /// not applied again); another verifier on an existing name → `Exist`.
    Exclusive41([u8; 8], SetAttr),
}

/// stable_how.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u32)]
pub enum Stable {
    Unstable = 0,
    DataSync = 1,
    FileSync = 2,
}

/// Owner given to a newly created object (the caller after squashing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
}

/// One directory entry as the file model lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub fileid: u64,
    /// Cookie that resumes the listing *after* this entry.
    pub cookie: u64,
}

/// A page of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirPage {
    /// cookieverf3 for this listing; clients send it back with later cookies.
    pub verf: [u8; 8],
    pub entries: Vec<DirEntry>,
    /// True when `entries` reaches the end of the directory.
    pub eof: bool,
    /// When the listing began to read the directory: what it shows is at most this
    /// old, however long the page is then shared (`FileModel::readdir_plus`'s memo)
    /// — the reactor's listings count their `ATTR_TTL` from it (`cache_dirs`).
    pub at: std::time::Instant,
    /// Every name of the directory, as a digest (`NamesDigest`), from a look that
    /// began at `NamesSeen::at` — only in a page from the listing's start (cookie 0)
    /// and only where the store can tell cheaply that the names are all there and
    /// current (`Backend::each_dir_name`: the `fs` backend's window). The reactor
    /// keeps a complete listing of the directory answering past `ATTR_TTL` when its
    /// names are these (`cache_dirs::Listings::fill`).
    pub names: Option<NamesSeen>,
}

/// A directory's names seen at once (`DirPage::names`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamesSeen {
    /// When the look began: the names are current at least from then.
    pub at: std::time::Instant,
    pub digest: u64,
}

/// A digest of a directory's names in the listing's order, each with whether it is a
/// directory (a directory's key ends in '/', which orders it): equal digests mean the
/// same names, in the same kinds, but for a chance of 2^-64. Keyed with a random key
/// drawn once per process (SipHash), so no one outside can choose names whose
/// digests collide; both sides of a comparison run in this process.
pub struct NamesDigest {
    h: std::hash::DefaultHasher,
    n: u64,
}

impl NamesDigest {
    pub fn new() -> NamesDigest {
        use std::hash::BuildHasher;
        static KEY: std::sync::OnceLock<std::hash::RandomState> = std::sync::OnceLock::new();
        NamesDigest {
            h: KEY.get_or_init(std::hash::RandomState::new).build_hasher(),
            n: 0,
        }
    }

    pub fn add(&mut self, name: &[u8], dir: bool) {
        use std::hash::Hasher;
        self.h.write_usize(name.len());
        self.h.write(name);
        self.h.write_u8(u8::from(dir));
        self.n += 1;
    }

    pub fn finish(mut self) -> u64 {
        use std::hash::Hasher;
        self.h.write_u64(self.n);
        self.h.finish()
    }
}

impl Default for NamesDigest {
    fn default() -> Self {
        Self::new()
    }
}

/// FSSTAT results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FsStat {
    pub tbytes: u64,
    pub fbytes: u64,
    pub abytes: u64,
    pub tfiles: u64,
    pub ffiles: u64,
    pub afiles: u64,
}
