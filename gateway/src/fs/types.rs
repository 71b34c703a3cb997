//! The vocabulary shared by the file model (`fs`) and the NFS procedures (`nfs3`):
//! status codes, attributes, attribute changes, create modes, directory pages.
//! Plain data; no I/O.

/// nfsstat3 (RFC 1813 §2.6). The file model speaks it directly so no error is lost in
/// translation between layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Status {
    Ok = 0,
    Perm = 1,
    NoEnt = 2,
    Io = 5,
    NxIo = 6,
    Acces = 13,
    Exist = 17,
    XDev = 18,
    NoDev = 19,
    NotDir = 20,
    IsDir = 21,
    Inval = 22,
    FBig = 27,
    NoSpc = 28,
    Rofs = 30,
    MLink = 31,
    NameTooLong = 63,
    NotEmpty = 66,
    DQuot = 69,
    Stale = 70,
    Remote = 71,
    BadHandle = 10001,
    NotSync = 10002,
    BadCookie = 10003,
    NotSupp = 10004,
    TooSmall = 10005,
    ServerFault = 10006,
    BadType = 10007,
    Jukebox = 10008,
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

/// nfstime3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct NfsTime {
    pub sec: u32,
    pub nsec: u32,
}

impl NfsTime {
    pub fn now() -> NfsTime {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        NfsTime {
            sec: d.as_secs() as u32,
            nsec: d.subsec_nanos(),
        }
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
