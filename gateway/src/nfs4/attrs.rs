//! fattr4 (RFC 8881 §5): attribute bitmaps, encoding of the attributes this server
//! supports, and decoding of the settable ones (SETATTR, CREATE, OPEN).

use super::status::*;
use crate::fs::{FileKind, FsStat, NfsTime, SetAttr, SetTime};
use engine::xdr::{XdrReader, XdrResult, XdrWriter};
use std::borrow::Cow;

pub const SUPPORTED_ATTRS: u32 = 0;
pub const TYPE: u32 = 1;
pub const FH_EXPIRE_TYPE: u32 = 2;
pub const CHANGE: u32 = 3;
pub const SIZE: u32 = 4;
pub const LINK_SUPPORT: u32 = 5;
pub const SYMLINK_SUPPORT: u32 = 6;
pub const NAMED_ATTR: u32 = 7;
pub const FSID: u32 = 8;
pub const UNIQUE_HANDLES: u32 = 9;
pub const LEASE_TIME: u32 = 10;
pub const RDATTR_ERROR: u32 = 11;
pub const ACLSUPPORT: u32 = 13;
pub const CANSETTIME: u32 = 15;
pub const CASE_INSENSITIVE: u32 = 16;
pub const CASE_PRESERVING: u32 = 17;
pub const CHOWN_RESTRICTED: u32 = 18;
pub const FILEHANDLE: u32 = 19;
pub const FILEID: u32 = 20;
pub const FILES_AVAIL: u32 = 21;
pub const FILES_FREE: u32 = 22;
pub const FILES_TOTAL: u32 = 23;
pub const HOMOGENEOUS: u32 = 26;
pub const MAXFILESIZE: u32 = 27;
pub const MAXLINK: u32 = 28;
pub const MAXNAME: u32 = 29;
pub const MAXREAD: u32 = 30;
pub const MAXWRITE: u32 = 31;
pub const MODE: u32 = 33;
pub const NO_TRUNC: u32 = 34;
pub const NUMLINKS: u32 = 35;
pub const OWNER: u32 = 36;
pub const OWNER_GROUP: u32 = 37;
pub const RAWDEV: u32 = 41;
pub const SPACE_AVAIL: u32 = 42;
pub const SPACE_FREE: u32 = 43;
pub const SPACE_TOTAL: u32 = 44;
pub const SPACE_USED: u32 = 45;
pub const TIME_ACCESS: u32 = 47;
pub const TIME_ACCESS_SET: u32 = 48;
pub const TIME_DELTA: u32 = 51;
pub const TIME_METADATA: u32 = 52;
pub const TIME_MODIFY: u32 = 53;
pub const TIME_MODIFY_SET: u32 = 54;
pub const MOUNTED_ON_FILEID: u32 = 55;
pub const FS_LAYOUT_TYPES: u32 = 62;
pub const LAYOUT_TYPES: u32 = 64;
pub const LAYOUT_BLKSIZE: u32 = 65;
pub const SUPPATTR_EXCLCREAT: u32 = 75;
// NFSv4.2 (RFC 7862 §12.2, RFC 8276 §8.2): minor version 2 only.
pub const CLONE_BLKSIZE: u32 = 77;
pub const XATTR_SUPPORT: u32 = 82;
// RFC 9754 §6.1, §4.1: the delegated times and what OPEN supports (minor version 2).
pub const TIME_DELEG_ACCESS: u32 = nfs_wire::delstid::FATTR4_TIME_DELEG_ACCESS;
pub const TIME_DELEG_MODIFY: u32 = nfs_wire::delstid::FATTR4_TIME_DELEG_MODIFY;
pub const OPEN_ARGUMENTS: u32 = nfs_wire::delstid::FATTR4_OPEN_ARGUMENTS;

/// Largest READ/WRITE (MAXREAD/MAXWRITE).
pub const MAX_IO: u64 = crate::limits::MAX_IO as u64;
/// Largest file size and write end (as NFSv3: offsets are signed 64-bit for clients).
pub const MAX_FILE_SIZE: u64 = i64::MAX as u64;
/// Longest name component (MAXNAME).
pub const NAME_MAX: u32 = 255;

/// An attribute bitmap (bitmap4); this server knows attributes below 96.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bitmap(pub [u32; 3]);

impl Bitmap {
    pub const fn of(bits: &[u32]) -> Bitmap {
        let mut m = [0u32; 3];
        let mut i = 0;
        while i < bits.len() {
            m[(bits[i] / 32) as usize] |= 1 << (bits[i] % 32);
            i += 1;
        }
        Bitmap(m)
    }

    pub fn has(&self, bit: u32) -> bool {
        bit < 96 && self.0[(bit / 32) as usize] & (1 << (bit % 32)) != 0
    }

    pub fn and(&self, o: &Bitmap) -> Bitmap {
        Bitmap([self.0[0] & o.0[0], self.0[1] & o.0[1], self.0[2] & o.0[2]])
    }

    pub fn or(&self, o: &Bitmap) -> Bitmap {
        let mut m = self.0;
        for (a, b) in m.iter_mut().zip(o.0) {
            *a |= b;
        }
        Bitmap(m)
    }
    pub fn minus(&self, o: &Bitmap) -> Bitmap {
        Bitmap([
            self.0[0] & !o.0[0],
            self.0[1] & !o.0[1],
            self.0[2] & !o.0[2],
        ])
    }

    pub fn is_empty(&self) -> bool {
        self.0 == [0; 3]
    }

    /// The attributes set, in ascending order: one step per set bit, not per
    /// possible attribute (every fattr4 of a READDIR page walks its bitmap).
    pub fn bits(&self) -> impl Iterator<Item = u32> + '_ {
        (0u32..).zip(self.0).flat_map(|(i, mut word)| {
            std::iter::from_fn(move || {
                let b = (word != 0).then(|| word.trailing_zeros())?;
                word &= word - 1;
                Some(i * 32 + b)
            })
        })
    }
}

/// Every attribute GETATTR can return (RFC 8881 §5.6, §5.7: the mandatory ones and
/// those the Linux client asks for).
pub const SUPPORTED: Bitmap = Bitmap::of(&[
    SUPPORTED_ATTRS,
    TYPE,
    FH_EXPIRE_TYPE,
    CHANGE,
    SIZE,
    LINK_SUPPORT,
    SYMLINK_SUPPORT,
    NAMED_ATTR,
    FSID,
    UNIQUE_HANDLES,
    LEASE_TIME,
    RDATTR_ERROR,
    ACLSUPPORT,
    CANSETTIME,
    CASE_INSENSITIVE,
    CASE_PRESERVING,
    CHOWN_RESTRICTED,
    FILEHANDLE,
    FILEID,
    FILES_AVAIL,
    FILES_FREE,
    FILES_TOTAL,
    HOMOGENEOUS,
    MAXFILESIZE,
    MAXLINK,
    MAXNAME,
    MAXREAD,
    MAXWRITE,
    MODE,
    NO_TRUNC,
    NUMLINKS,
    OWNER,
    OWNER_GROUP,
    RAWDEV,
    SPACE_AVAIL,
    SPACE_FREE,
    SPACE_TOTAL,
    SPACE_USED,
    TIME_ACCESS,
    TIME_ACCESS_SET,
    TIME_DELTA,
    TIME_METADATA,
    TIME_MODIFY,
    TIME_MODIFY_SET,
    MOUNTED_ON_FILEID,
    FS_LAYOUT_TYPES,
    SUPPATTR_EXCLCREAT,
]);

/// What NFSv4.2 adds to [`SUPPORTED`] (RFC 7862 §12.2.1, RFC 8276 §8.2, RFC 9754
/// §6.1 and §4.1).
pub const SUPPORTED_V42_ONLY: Bitmap = Bitmap::of(&[
    CLONE_BLKSIZE,
    XATTR_SUPPORT,
    TIME_DELEG_ACCESS,
    TIME_DELEG_MODIFY,
    OPEN_ARGUMENTS,
]);

/// The delegated times (RFC 9754 §6.1): settable in a 4.2 SETATTR only, and only by
/// the holder of a `*_ATTRS_DELEG` delegation (`nfs4::deleg_times`).
pub const DELEG_TIMES: Bitmap = Bitmap::of(&[TIME_DELEG_ACCESS, TIME_DELEG_MODIFY]);

/// open_arguments (RFC 9754 §4.1): what this server's OPEN takes. Every access and
/// deny; the wants it acts on (ANY_DELEG, NO_DELEG, CANCEL, and RFC 9754's two; the
/// SIGNAL/PUSH flags are accepted but never acted on, so not offered); the claims
/// that can succeed (CLAIM_DELEGATE_PREV and CLAIM_DELEG_PREV_FH always fail here:
/// delegations are not kept across restarts); every create mode.
pub fn open_arguments() -> nfs_wire::delstid::OpenArguments {
    use nfs_wire::delstid::*;
    OpenArguments {
        share_access: bit(OPEN_ARGS_SHARE_ACCESS_READ)
            | bit(OPEN_ARGS_SHARE_ACCESS_WRITE)
            | bit(OPEN_ARGS_SHARE_ACCESS_BOTH),
        share_deny: bit(OPEN_ARGS_SHARE_DENY_NONE)
            | bit(OPEN_ARGS_SHARE_DENY_READ)
            | bit(OPEN_ARGS_SHARE_DENY_WRITE)
            | bit(OPEN_ARGS_SHARE_DENY_BOTH),
        share_access_want: bit(OPEN_ARGS_SHARE_ACCESS_WANT_ANY_DELEG)
            | bit(OPEN_ARGS_SHARE_ACCESS_WANT_NO_DELEG)
            | bit(OPEN_ARGS_SHARE_ACCESS_WANT_CANCEL)
            | bit(OPEN_ARGS_SHARE_ACCESS_WANT_DELEG_TIMESTAMPS)
            | bit(OPEN_ARGS_SHARE_ACCESS_WANT_OPEN_XOR_DELEGATION),
        open_claim: bit(OPEN_ARGS_OPEN_CLAIM_NULL)
            | bit(OPEN_ARGS_OPEN_CLAIM_PREVIOUS)
            | bit(OPEN_ARGS_OPEN_CLAIM_DELEGATE_CUR)
            | bit(OPEN_ARGS_OPEN_CLAIM_FH)
            | bit(OPEN_ARGS_OPEN_CLAIM_DELEG_CUR_FH),
        create_mode: bit(OPEN_ARGS_CREATEMODE_UNCHECKED4)
            | bit(OPEN_ARGS_CREATE_MODE_GUARDED)
            | bit(OPEN_ARGS_CREATEMODE_EXCLUSIVE4)
            | bit(OPEN_ARGS_CREATE_MODE_EXCLUSIVE4_1),
    }
}

/// What a pNFS metadata server adds to the supported attributes (RFC 8881 §5.12):
/// only then, as knfsd (a client that sees them supported looks for layouts).
pub const SUPPORTED_PNFS_ONLY: Bitmap = Bitmap::of(&[LAYOUT_TYPES, LAYOUT_BLKSIZE]);

/// Every attribute some minor version or role supports: what the reactor's fast
/// paths must not drop from a GETATTR they answer (they encode 4.1's set: a 4.2
/// client's FSINFO asking `xattr_support` goes to a worker, or the client would
/// think xattrs absent; so do the pNFS attributes).
pub const SUPPORTED_ANY: Bitmap = Bitmap([
    SUPPORTED.0[0] | SUPPORTED_V42_ONLY.0[0] | SUPPORTED_PNFS_ONLY.0[0],
    SUPPORTED.0[1] | SUPPORTED_V42_ONLY.0[1] | SUPPORTED_PNFS_ONLY.0[1],
    SUPPORTED.0[2] | SUPPORTED_V42_ONLY.0[2] | SUPPORTED_PNFS_ONLY.0[2],
]);

/// Attributes a client may set (SETATTR, CREATE, OPEN createattrs).
pub const WRITABLE: Bitmap = Bitmap::of(&[
    SIZE,
    MODE,
    OWNER,
    OWNER_GROUP,
    TIME_ACCESS_SET,
    TIME_MODIFY_SET,
]);

/// Write-only attributes: GETATTR/VERIFY of them is NFS4ERR_INVAL (RFC 8881 §5.5).
pub const WRITE_ONLY: Bitmap = Bitmap::of(&[TIME_ACCESS_SET, TIME_MODIFY_SET]);

/// Attributes an EXCLUSIVE4_1 create may carry (SUPPATTR_EXCLCREAT).
pub const EXCLCREAT: Bitmap = Bitmap::of(&[SIZE, MODE, OWNER, OWNER_GROUP]);

/// Needs `FileModel::fsstat`.
pub const FSSTAT_ATTRS: Bitmap = Bitmap::of(&[
    FILES_AVAIL,
    FILES_FREE,
    FILES_TOTAL,
    SPACE_AVAIL,
    SPACE_FREE,
    SPACE_TOTAL,
]);

/// Decodes a bitmap4; words beyond the third must be zero (unknown attributes: the
/// caller sees them as `extra`).
pub fn get_bitmap(r: &mut XdrReader) -> XdrResult<(Bitmap, bool)> {
    let n = r.u32()?;
    if n > 8 {
        return Err(engine::xdr::XdrError::Short);
    }
    let mut b = Bitmap::default();
    let mut extra = false;
    for i in 0..n as usize {
        let v = r.u32()?;
        if i < 3 {
            b.0[i] = v;
        } else if v != 0 {
            extra = true;
        }
    }
    Ok((b, extra))
}

pub fn put_bitmap(w: &mut XdrWriter, b: &Bitmap) -> XdrResult<()> {
    let n = b.0.iter().rposition(|&v| v != 0).map_or(0, |i| i + 1);
    w.u32(n as u32)?;
    for v in &b.0[..n] {
        w.u32(*v)?;
    }
    Ok(())
}

/// Everything an object's attributes are encoded from. The handle is borrowed where
/// the caller has it (the reactor's cached GETATTR: no allocation per call).
#[derive(Debug, Clone)]
pub struct Obj<'a> {
    pub kind: FileKind,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub used: u64,
    pub rdev: (u32, u32),
    pub fsid: (u64, u64),
    pub fileid: u64,
    pub mounted_on_fileid: u64,
    pub atime: NfsTime,
    pub mtime: NfsTime,
    pub ctime: NfsTime,
    pub change: u64,
    pub fh: Cow<'a, [u8]>,
}

impl<'a> Obj<'a> {
    /// From the file model's attributes.
    pub fn from_attr(a: &crate::fs::Attr, fh: impl Into<Cow<'a, [u8]>>) -> Obj<'a> {
        Obj {
            kind: a.kind,
            mode: a.mode & 0o7777,
            nlink: a.nlink,
            uid: a.uid,
            gid: a.gid,
            size: a.size,
            used: a.used,
            rdev: a.rdev,
            fsid: (a.fsid, 0),
            fileid: a.fileid,
            mounted_on_fileid: a.fileid,
            atime: a.atime,
            mtime: a.mtime,
            ctime: a.ctime,
            change: change_of(a),
            fh: fh.into(),
        }
    }
}

/// The change attribute (RFC 8881 §5.8.1.4) from ctime, until the file model keeps a
/// change counter: every modification moves ctime.
pub fn change_of(a: &crate::fs::Attr) -> u64 {
    ((a.ctime.sec as u64) << 32) | a.ctime.nsec as u64
}

/// Server-wide values of some attributes.
#[derive(Debug, Clone, Copy)]
pub struct Env {
    pub lease_s: u32,
    pub max_file_size: u64,
    pub fsstat: Option<FsStat>,
    /// In an NFSv4.2 COMPOUND: its attributes are supported too.
    pub v42: Option<V42Env>,
    /// As a pNFS metadata server: the layout_blksize (RFC 8881 §5.12.5, the
    /// stripe unit). `None`: no layout types are offered (empty lists).
    pub pnfs_blksize: Option<u32>,
}

/// The NFSv4.2 attributes' server-wide values.
#[derive(Debug, Clone, Copy)]
pub struct V42Env {
    /// clone_blksize (`FileModel::clone_block`).
    pub clone_blksize: u32,
}

impl Env {
    /// The attributes supported in this COMPOUND's minor version.
    pub fn supported(&self) -> Bitmap {
        let s = match self.v42 {
            Some(_) => SUPPORTED.or(&SUPPORTED_V42_ONLY),
            None => SUPPORTED,
        };
        match self.pnfs_blksize {
            Some(_) => s.or(&SUPPORTED_PNFS_ONLY),
            None => s,
        }
    }
}

/// A layouttype4<> of LAYOUT4_FLEX_FILES (4), or empty.
fn put_layout_types(w: &mut XdrWriter, flexfiles: bool) -> XdrResult<()> {
    if flexfiles {
        w.u32(1)?;
        w.u32(4)
    } else {
        w.u32(0)
    }
}

/// An owner or owner_group as the decimal id string (RFC 8881 §5.9: the numeric form
/// an AUTH_SYS client maps back), written from the stack: a GETATTR of a Linux client
/// asks for both, and the reactor answers it (no allocation on that path).
pub fn put_id(w: &mut XdrWriter, id: u32) -> XdrResult<()> {
    let mut digits = [0u8; 10]; // u32::MAX has 10 digits
    let mut at = digits.len();
    let mut n = id;
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    w.string(&digits[at..])
}

fn put_time(w: &mut XdrWriter, t: NfsTime) -> XdrResult<()> {
    w.i64(t.sec)?;
    w.u32(t.nsec)
}

/// Encodes fattr4 for the attributes of `want` this server supports; returns what
/// it encoded (RFC 8881 §18.7.3: unsupported ones are silently left out).
pub fn put_fattr(w: &mut XdrWriter, want: &Bitmap, o: &Obj, env: &Env) -> XdrResult<Bitmap> {
    let supported = env.supported();
    let mut got = want.and(&supported).minus(&WRITE_ONLY);
    if env.fsstat.is_none() {
        got = got.minus(&FSSTAT_ATTRS);
    }
    put_bitmap(w, &got)?;
    let len_at = w.reserve_u32()?;
    let start = w.position();
    let st = env.fsstat.unwrap_or_default();
    for bit in got.bits() {
        match bit {
            SUPPORTED_ATTRS => put_bitmap(w, &supported)?,
            TYPE => w.u32(o.kind as u32)?,
            FH_EXPIRE_TYPE => w.u32(0)?, // FH4_PERSISTENT
            CHANGE => w.u64(o.change)?,
            SIZE => w.u64(o.size)?,
            // LINK makes hard links (RFC 8881 §5.8.1.5; `fs::imp::links`).
            LINK_SUPPORT => w.bool(true)?,
            SYMLINK_SUPPORT => w.bool(true)?,
            NAMED_ATTR => w.bool(false)?,
            FSID => {
                w.u64(o.fsid.0)?;
                w.u64(o.fsid.1)?;
            }
            UNIQUE_HANDLES => w.bool(true)?,
            LEASE_TIME => w.u32(env.lease_s)?,
            RDATTR_ERROR => NFS4_OK.put(w)?,
            ACLSUPPORT => w.u32(0)?,
            CANSETTIME | CASE_PRESERVING | CHOWN_RESTRICTED | HOMOGENEOUS | NO_TRUNC => {
                w.bool(true)?
            }
            CASE_INSENSITIVE => w.bool(false)?,
            FILEHANDLE => w.opaque_var(&o.fh)?,
            FILEID => w.u64(o.fileid)?,
            FILES_AVAIL => w.u64(st.afiles)?,
            FILES_FREE => w.u64(st.ffiles)?,
            FILES_TOTAL => w.u64(st.tfiles)?,
            MAXFILESIZE => w.u64(env.max_file_size)?,
            MAXLINK => w.u32(crate::fs::LINK_MAX)?,
            MAXNAME => w.u32(NAME_MAX)?,
            MAXREAD | MAXWRITE => w.u64(MAX_IO)?,
            MODE => w.u32(o.mode)?,
            NUMLINKS => w.u32(o.nlink)?,
            OWNER => put_id(w, o.uid)?,
            OWNER_GROUP => put_id(w, o.gid)?,
            RAWDEV => {
                w.u32(o.rdev.0)?;
                w.u32(o.rdev.1)?;
            }
            SPACE_AVAIL => w.u64(st.abytes)?,
            SPACE_FREE => w.u64(st.fbytes)?,
            SPACE_TOTAL => w.u64(st.tbytes)?,
            SPACE_USED => w.u64(o.used)?,
            TIME_ACCESS => put_time(w, o.atime)?,
            TIME_DELTA => put_time(w, NfsTime { sec: 0, nsec: 1 })?,
            TIME_METADATA => put_time(w, o.ctime)?,
            TIME_MODIFY => put_time(w, o.mtime)?,
            MOUNTED_ON_FILEID => w.u64(o.mounted_on_fileid)?,
            // fs_layout_types (§5.12.2) and, for a regular file, layout_types
            // (§5.12.4): flexible files (RFC 8435) when pNFS is on, else none.
            FS_LAYOUT_TYPES => put_layout_types(w, env.pnfs_blksize.is_some())?,
            LAYOUT_TYPES => {
                put_layout_types(w, env.pnfs_blksize.is_some() && o.kind == FileKind::Reg)?
            }
            LAYOUT_BLKSIZE => w.u32(env.pnfs_blksize.unwrap_or(0))?,
            SUPPATTR_EXCLCREAT => put_bitmap(w, &EXCLCREAT)?,
            CLONE_BLKSIZE => w.u32(env.v42.map_or(0, |v| v.clone_blksize))?,
            XATTR_SUPPORT => w.bool(true)?,
            // Read back, the delegated times are the file's (RFC 9754 §6.1: what a
            // holder set with SETATTR is in the file).
            TIME_DELEG_ACCESS => put_time(w, o.atime)?,
            TIME_DELEG_MODIFY => put_time(w, o.mtime)?,
            OPEN_ARGUMENTS => w.opaque_fixed(&open_arguments().encode())?,
            _ => {}
        }
    }
    let len = w.position() - start;
    w.patch_u32(len_at, len as u32);
    Ok(got)
}

/// A decoded settable fattr4: what to change and which attributes were given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NewAttrs {
    pub set: SetAttr,
    pub given: Bitmap,
    /// time_deleg_access / time_deleg_modify (RFC 9754 §6.1; a 4.2 SETATTR only):
    /// the holder's times, valid nfstime4s, vetted by `nfs4::deleg_times`.
    pub deleg_atime: Option<NfsTime>,
    pub deleg_mtime: Option<NfsTime>,
}

/// Decodes a fattr4 of settable attributes (RFC 8881 §18.30.3): unsupported
/// attributes → NFS4ERR_ATTRNOTSUPP, read-only ones → NFS4ERR_INVAL, owners that are
/// not numeric ids → NFS4ERR_BADOWNER, malformed → NFS4ERR_BADXDR.
pub fn get_new_attrs(r: &mut XdrReader) -> Result<NewAttrs, Nfsstat4> {
    get_new_attrs_in(r, false)
}

/// `get_new_attrs` for SETATTR in a COMPOUND of minor version 2 (`v42`): 4.2's
/// attributes are supported, and the delegated times (RFC 9754 §6.1) settable; in
/// 4.1 they are unknown attributes (NFS4ERR_ATTRNOTSUPP).
pub fn get_new_attrs_in(r: &mut XdrReader, v42: bool) -> Result<NewAttrs, Nfsstat4> {
    let (bits, extra) = get_bitmap(r).map_err(|_| NFS4ERR_BADXDR)?;
    let list = r.opaque_var(64 << 10).map_err(|_| NFS4ERR_BADXDR)?;
    let (supported, writable) = if v42 {
        (SUPPORTED.or(&SUPPORTED_V42_ONLY), WRITABLE.or(&DELEG_TIMES))
    } else {
        (SUPPORTED, WRITABLE)
    };
    if extra || !bits.minus(&supported).is_empty() {
        return Err(NFS4ERR_ATTRNOTSUPP);
    }
    if !bits.minus(&writable).is_empty() {
        return Err(NFS4ERR_INVAL);
    }
    let (mut deleg_atime, mut deleg_mtime) = (None, None);
    let mut lr = XdrReader::new(list);
    let mut set = SetAttr::default();
    let bad = |_| NFS4ERR_BADXDR;
    for bit in bits.bits() {
        match bit {
            SIZE => set.size = Some(lr.u64().map_err(bad)?),
            MODE => {
                let m = lr.u32().map_err(bad)?;
                if m & !0o7777 != 0 {
                    return Err(NFS4ERR_INVAL);
                }
                set.mode = Some(m);
            }
            OWNER => set.uid = Some(parse_id(lr.string(1024).map_err(bad)?)?),
            OWNER_GROUP => set.gid = Some(parse_id(lr.string(1024).map_err(bad)?)?),
            TIME_ACCESS_SET => set.atime = get_settime(&mut lr)?,
            TIME_MODIFY_SET => set.mtime = get_settime(&mut lr)?,
            TIME_DELEG_ACCESS => deleg_atime = Some(get_nfstime(&mut lr)?),
            TIME_DELEG_MODIFY => deleg_mtime = Some(get_nfstime(&mut lr)?),
            _ => return Err(NFS4ERR_ATTRNOTSUPP),
        }
    }
    if lr.remaining() != 0 {
        return Err(NFS4ERR_BADXDR);
    }
    Ok(NewAttrs {
        set,
        given: bits,
        deleg_atime,
        deleg_mtime,
    })
}

/// A bare nfstime4 (RFC 8881 §3.3.1): nanoseconds of 10^9 or more, and the one
/// seconds value the file model cannot store (`i64::MIN`), are NFS4ERR_INVAL.
fn get_nfstime(r: &mut XdrReader) -> Result<NfsTime, Nfsstat4> {
    let b = r.opaque_fixed(12).map_err(|_| NFS4ERR_BADXDR)?;
    let (sec, nsec) = nfs_wire::delstid::decode_time(b).ok_or(NFS4ERR_BADXDR)?;
    if !nfs_wire::delstid::time_valid(sec, nsec) || sec == i64::MIN {
        return Err(NFS4ERR_INVAL);
    }
    Ok(NfsTime { sec, nsec })
}

/// An owner or group string: a numeric id (RFC 8881 §5.9 allows the stringified id
/// when no name mapping is in use). Names are not mapped: NFS4ERR_BADOWNER.
fn parse_id(s: &[u8]) -> Result<u32, Nfsstat4> {
    let s = std::str::from_utf8(s).map_err(|_| NFS4ERR_INVAL)?;
    if s.is_empty() || s.len() > 10 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(NFS4ERR_BADOWNER);
    }
    s.parse::<u32>().map_err(|_| NFS4ERR_BADOWNER)
}

/// settime4: SET_TO_SERVER_TIME4 (0) or SET_TO_CLIENT_TIME4 (1) with an nfstime4.
/// Its seconds are int64 (RFC 8881 §3.3.1), before 1970 and after 2106 too: the file
/// model stores every value but `i64::MIN` (`NfsTime`), which is INVAL as nseconds
/// of 10^9 or more are.
fn get_settime(r: &mut XdrReader) -> Result<SetTime, Nfsstat4> {
    match r.u32().map_err(|_| NFS4ERR_BADXDR)? {
        0 => Ok(SetTime::ServerTime),
        1 => {
            let sec = r.i64().map_err(|_| NFS4ERR_BADXDR)?;
            let nsec = r.u32().map_err(|_| NFS4ERR_BADXDR)?;
            if nsec >= 1_000_000_000 || sec == i64::MIN {
                return Err(NFS4ERR_INVAL);
            }
            Ok(SetTime::Client(NfsTime { sec, nsec }))
        }
        _ => Err(NFS4ERR_BADXDR),
    }
}

/// A fattr4 as given (VERIFY/NVERIFY compare it byte for byte with ours).
pub fn get_raw_fattr<'a>(r: &mut XdrReader<'a>) -> Result<(Bitmap, &'a [u8]), Nfsstat4> {
    let (bits, extra) = get_bitmap(r).map_err(|_| NFS4ERR_BADXDR)?;
    let list = r.opaque_var(64 << 10).map_err(|_| NFS4ERR_BADXDR)?;
    if extra || !bits.minus(&SUPPORTED).is_empty() {
        return Err(NFS4ERR_ATTRNOTSUPP);
    }
    if bits.has(RDATTR_ERROR) || !bits.and(&WRITE_ONLY).is_empty() {
        return Err(NFS4ERR_INVAL);
    }
    Ok((bits, list))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj() -> Obj<'static> {
        Obj {
            kind: FileKind::Reg,
            mode: 0o644,
            nlink: 1,
            uid: 1000,
            gid: 100,
            size: 5,
            used: 8,
            rdev: (0, 0),
            fsid: (3, 0),
            fileid: 42,
            mounted_on_fileid: 42,
            atime: NfsTime { sec: 1, nsec: 2 },
            mtime: NfsTime { sec: 3, nsec: 4 },
            ctime: NfsTime { sec: 5, nsec: 6 },
            change: 7,
            fh: vec![9; 31].into(),
        }
    }

    const ENV: Env = Env {
        lease_s: 90,
        max_file_size: 1 << 40,
        fsstat: None,
        v42: None,
        pnfs_blksize: None,
    };

    #[test]
    fn owner_ids_are_decimal_strings_at_every_width() {
        for id in [0u32, 7, 10, 1000, 65_534, u32::MAX] {
            let mut buf = [0u8; 32];
            let mut w = XdrWriter::new(&mut buf);
            put_id(&mut w, id).unwrap();
            let mut want = [0u8; 32];
            let mut e = XdrWriter::new(&mut want);
            e.string(id.to_string().as_bytes()).unwrap();
            assert_eq!(w.written(), e.written(), "id {id}");
        }
    }

    #[test]
    fn encode_selected_attributes_in_bit_order() {
        let mut buf = [0u8; 512];
        let mut w = XdrWriter::new(&mut buf);
        // SIZE, TYPE, OWNER, an unsupported bit (ACL 12), a write-only one and a
        // fsstat one without fsstat: only TYPE, SIZE and OWNER come back.
        let want = Bitmap::of(&[SIZE, TYPE, OWNER, 12, TIME_MODIFY_SET, SPACE_FREE]);
        let got = put_fattr(&mut w, &want, &obj(), &ENV).unwrap();
        assert_eq!(got, Bitmap::of(&[TYPE, SIZE, OWNER]));
        let mut r = XdrReader::new(w.written());
        let (b, _) = get_bitmap(&mut r).unwrap();
        assert_eq!(b, got);
        let list = r.opaque_var(1000).unwrap();
        let mut l = XdrReader::new(list);
        assert_eq!(l.u32().unwrap(), FileKind::Reg as u32);
        assert_eq!(l.u64().unwrap(), 5);
        assert_eq!(l.string(100).unwrap(), b"1000");
        assert_eq!(l.remaining(), 0);
    }

    fn encode_new(bits: &[u32], body: impl FnOnce(&mut XdrWriter)) -> Vec<u8> {
        let mut lb = [0u8; 256];
        let mut lw = XdrWriter::new(&mut lb);
        body(&mut lw);
        let list = lw.written().to_vec();
        let mut buf = [0u8; 512];
        let mut w = XdrWriter::new(&mut buf);
        put_bitmap(&mut w, &Bitmap::of(bits)).unwrap();
        w.opaque_var(&list).unwrap();
        w.written().to_vec()
    }

    #[test]
    fn decode_settable_attributes_and_errors() {
        let b = encode_new(&[SIZE, MODE, OWNER, TIME_MODIFY_SET], |w| {
            w.u64(10).unwrap();
            w.u32(0o600).unwrap();
            w.string(b"1234").unwrap();
            w.u32(1).unwrap();
            w.i64(77).unwrap();
            w.u32(5).unwrap();
        });
        let n = get_new_attrs(&mut XdrReader::new(&b)).unwrap();
        assert_eq!(n.set.size, Some(10));
        assert_eq!(n.set.mode, Some(0o600));
        assert_eq!(n.set.uid, Some(1234));
        assert_eq!(n.set.mtime, SetTime::Client(NfsTime { sec: 77, nsec: 5 }));
        // Names are not mapped.
        let b = encode_new(&[OWNER], |w| w.string(b"bob@example").unwrap());
        assert_eq!(
            get_new_attrs(&mut XdrReader::new(&b)),
            Err(NFS4ERR_BADOWNER)
        );
        // A read-only attribute.
        let b = encode_new(&[TYPE], |w| w.u32(1).unwrap());
        assert_eq!(get_new_attrs(&mut XdrReader::new(&b)), Err(NFS4ERR_INVAL));
        // An unsupported one (ACL).
        let b = encode_new(&[12], |w| w.u32(0).unwrap());
        assert_eq!(
            get_new_attrs(&mut XdrReader::new(&b)),
            Err(NFS4ERR_ATTRNOTSUPP)
        );
        // Short attribute list, and trailing garbage.
        let b = encode_new(&[SIZE], |w| w.u32(1).unwrap());
        assert_eq!(get_new_attrs(&mut XdrReader::new(&b)), Err(NFS4ERR_BADXDR));
        let b = encode_new(&[MODE], |w| w.u64(1).unwrap());
        assert_eq!(get_new_attrs(&mut XdrReader::new(&b)), Err(NFS4ERR_BADXDR));
        // A nanosecond count out of range.
        let b = encode_new(&[TIME_ACCESS_SET], |w| {
            w.u32(1).unwrap();
            w.i64(1).unwrap();
            w.u32(2_000_000_000).unwrap();
        });
        assert_eq!(get_new_attrs(&mut XdrReader::new(&b)), Err(NFS4ERR_INVAL));
    }

    /// pjdfstest utimensat/09.t: nfstime4 seconds are int64 (RFC 8881 §3.3.1), so
    /// 2^32, 2^33 and before 1970 are times; only i64::MIN (no stored form) is not.
    #[test]
    fn client_times_beyond_u32_seconds() {
        let set = |sec: i64| {
            let b = encode_new(&[TIME_ACCESS_SET, TIME_MODIFY_SET], |w| {
                for _ in 0..2 {
                    w.u32(1).unwrap();
                    w.i64(sec).unwrap();
                    w.u32(999_999_999).unwrap();
                }
            });
            get_new_attrs(&mut XdrReader::new(&b)).map(|n| (n.set.atime, n.set.mtime))
        };
        for sec in [1 << 32, 1 << 33, -1, -(1 << 33), i64::MAX, i64::MIN + 1] {
            let t = SetTime::Client(NfsTime {
                sec,
                nsec: 999_999_999,
            });
            assert_eq!(set(sec), Ok((t, t)), "{sec}");
        }
        assert_eq!(set(i64::MIN), Err(NFS4ERR_INVAL));
    }

    /// `bits` lists exactly the set attributes, ascending, whatever the words hold.
    #[test]
    fn bits_are_the_set_attributes_in_order() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..200 {
            let mut b = Bitmap::default();
            for w in &mut b.0 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *w = (x as u32) & (x >> 32) as u32;
            }
            let naive: Vec<u32> = (0..96).filter(|i| b.has(*i)).collect();
            assert_eq!(b.bits().collect::<Vec<_>>(), naive);
        }
        assert_eq!(Bitmap([u32::MAX; 3]).bits().count(), 96);
        assert_eq!(Bitmap::default().bits().count(), 0);
    }
}
