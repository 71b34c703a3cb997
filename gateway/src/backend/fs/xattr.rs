//! Object user metadata in extended attributes `user.nfsgw.<name>`.
//!
//! Rule (hostile values): the attributes on disk may have been written by anything
//! with access to `backend.root`, so a value is taken only when it is sane; a value
//! that is empty, longer than [`MAX_VALUE`], not printable ASCII, or not of its
//! name's syntax ("mode", "uid", "gid": digits; "mtime", "atime", "ctime": a number,
//! negative before 1970, or an RFC 3339 time) is ignored with a (rate-limited) log line, so the on-disk
//! stat values show through. A bad value never fails a GETATTR or a listing.

use super::sys;
use super::UserMeta;
use std::ffi::CString;
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

pub const XATTR_PREFIX: &str = "user.nfsgw.";

/// Longest value taken. The gateway writes values of a few dozen bytes, and S3 allows
/// 2 KiB of user metadata in all.
pub const MAX_VALUE: usize = 1024;
/// The kernel's limit on a file's attribute name list (XATTR_LIST_MAX).
const MAX_LIST: usize = 65536;

/// Why a stored value is not taken, if it is not.
pub fn reject(name: &str, val: &[u8]) -> Option<&'static str> {
    if val.is_empty() {
        return Some("empty");
    }
    if val.len() > MAX_VALUE {
        return Some("too long");
    }
    if !val.iter().all(|b| (0x20..0x7f).contains(b)) {
        return Some("not printable ASCII");
    }
    let digits = |v: &[u8]| v.iter().all(u8::is_ascii_digit);
    match name {
        "mode" | "uid" | "gid" if !(val.len() <= 20 && digits(val)) => Some("not a number"),
        "mtime" | "atime" | "ctime"
            if !(val.len() <= 64
                && (val[0].is_ascii_digit()
                    || (val[0] == b'-' && val.get(1).is_some_and(u8::is_ascii_digit)))
                && val.iter().all(|b| b"0123456789.:+-TZtz".contains(b))) =>
        {
            Some("not a time")
        }
        _ => None,
    }
}

/// What a later read of `meta`, once stored, shows: the sane values only (so the
/// metadata a write returns or caches is what a re-read gives).
pub fn sane(meta: &UserMeta) -> UserMeta {
    meta.iter()
        .filter(|(k, v)| !k.is_empty() && reject(k, v.as_bytes()).is_none())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Logs an ignored value: at most one line a second, the rest counted.
fn log_ignored(name: &str, why: &str, val: &[u8]) {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static SKIPPED: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let next = NEXT.load(Ordering::Relaxed);
    if now < next
        || NEXT
            .compare_exchange(
                next,
                now.saturating_add(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_err()
    {
        SKIPPED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let shown = String::from_utf8_lossy(&val[..val.len().min(64)]).into_owned();
    tracing::warn!(
        "fs backend: ignoring extended attribute {XATTR_PREFIX}{name} ({why}): {shown:?}; \
         the on-disk value shows through ({} more ignored since the last line)",
        SKIPPED.swap(0, Ordering::Relaxed)
    );
}

/// The full names of the user.nfsgw.* attributes of an open file (ENOTSUP: none).
fn names(fd: BorrowedFd<'_>) -> io::Result<Vec<Vec<u8>>> {
    names_with(fd, XATTR_PREFIX)
}

/// The full names of an open file's attributes starting with `prefix`.
fn names_with(fd: BorrowedFd<'_>, prefix: &str) -> io::Result<Vec<Vec<u8>>> {
    let mut buf = vec![0u8; 1024];
    let n = loop {
        match sys::flistxattr(fd, &mut buf) {
            Ok(n) => break n,
            Err(e) if e.raw_os_error() == Some(libc::ERANGE) && buf.len() < MAX_LIST => {
                buf.resize((buf.len() * 4).min(MAX_LIST), 0);
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOTSUP) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        }
    };
    buf.truncate(n);
    Ok(buf
        .split(|b| *b == 0)
        .filter(|n| n.starts_with(prefix.as_bytes()))
        .map(<[u8]>::to_vec)
        .collect())
}

/// One value, `None` when it vanished meanwhile or is longer than [`MAX_VALUE`].
fn value(fd: BorrowedFd<'_>, name: &CString) -> io::Result<Option<Vec<u8>>> {
    let mut val = vec![0u8; 256];
    loop {
        match sys::fgetxattr(fd, name, &mut val) {
            Ok(n) => {
                val.truncate(n);
                return Ok(Some(val));
            }
            Err(e) => match e.raw_os_error() {
                Some(libc::ERANGE) if val.len() <= MAX_VALUE => val.resize(MAX_VALUE + 1, 0),
                Some(libc::ERANGE) | Some(libc::E2BIG) => return Ok(None),
                Some(libc::ENODATA) => return Ok(None),
                _ => return Err(e),
            },
        }
    }
}

/// Reads the user.nfsgw.* attributes of an open file, sane values only.
pub fn get(fd: BorrowedFd<'_>) -> io::Result<UserMeta> {
    let mut meta = UserMeta::new();
    for raw in names(fd)? {
        let short = &raw[XATTR_PREFIX.len()..];
        let Ok(short) = std::str::from_utf8(short) else {
            log_ignored(&String::from_utf8_lossy(short), "name not UTF-8", b"");
            continue;
        };
        if short.is_empty() {
            continue;
        }
        let cname = CString::new(raw.clone()).map_err(|_| io::ErrorKind::InvalidData)?;
        let Some(val) = value(fd, &cname)? else {
            log_ignored(short, "too long or gone", b"");
            continue;
        };
        match reject(short, &val) {
            Some(why) => log_ignored(short, why, &val),
            // Printable ASCII (checked), so valid UTF-8.
            None => {
                meta.insert(
                    short.to_string(),
                    String::from_utf8_lossy(&val).into_owned(),
                );
            }
        }
    }
    Ok(meta)
}

/// Replaces the user.nfsgw.* attributes of an open file with `meta`: attributes not
/// in `meta` are removed (ignored, malformed ones too), changed ones written.
pub fn set(fd: BorrowedFd<'_>, meta: &UserMeta) -> io::Result<()> {
    let old = get(fd)?;
    let einval = || io::Error::from_raw_os_error(libc::EINVAL);
    for raw in names(fd)? {
        let short = std::str::from_utf8(&raw[XATTR_PREFIX.len()..]).ok();
        if short.is_some_and(|s| meta.contains_key(s)) {
            continue;
        }
        let c = CString::new(raw).map_err(|_| einval())?;
        match sys::fremovexattr(fd, &c) {
            Err(e) if e.raw_os_error() != Some(libc::ENODATA) => return Err(e),
            _ => {}
        }
    }
    for (name, val) in meta {
        if old.get(name) == Some(val) {
            continue;
        }
        if name.is_empty() {
            return Err(einval());
        }
        let c = CString::new(format!("{XATTR_PREFIX}{name}")).map_err(|_| einval())?;
        sys::fsetxattr(fd, &c, val.as_bytes())?;
    }
    Ok(())
}

/// Writes `meta` on a file this process has just created (`O_EXCL`, not yet named):
/// it has no user.nfsgw.* attribute to compare with or remove, so nothing is read
/// first (`set` lists and reads them: two `flistxattr` per new object for nothing).
pub fn set_fresh(fd: BorrowedFd<'_>, meta: &UserMeta) -> io::Result<()> {
    let einval = || io::Error::from_raw_os_error(libc::EINVAL);
    for (name, val) in meta {
        if name.is_empty() {
            return Err(einval());
        }
        let c = CString::new(format!("{XATTR_PREFIX}{name}")).map_err(|_| einval())?;
        sys::fsetxattr(fd, &c, val.as_bytes())?;
    }
    Ok(())
}

/// Clients' extended attributes (RFC 8276) are `user.nfsgw-x.<name>`: outside
/// [`XATTR_PREFIX`] (whose names `set` owns and rewrites), so no client name can
/// reach the gateway's metadata, and apart from attributes other local tools set.
pub const CLIENT_PREFIX: &str = "user.nfsgw-x.";
/// The kernel's limits: a whole attribute name (XATTR_NAME_MAX) and a value
/// (XATTR_SIZE_MAX; a file system may refuse less: ext4 keeps a value in one block).
pub const CLIENT_MAX_NAME: usize = 255 - CLIENT_PREFIX.len();
pub const CLIENT_MAX_VALUE: usize = 65536;

fn client_name(name: &[u8]) -> io::Result<CString> {
    let mut full = CLIENT_PREFIX.as_bytes().to_vec();
    full.extend_from_slice(name);
    CString::new(full).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// A client attribute's value, `None` when there is none.
pub fn client_get(fd: BorrowedFd<'_>, name: &[u8]) -> io::Result<Option<Vec<u8>>> {
    let c = client_name(name)?;
    let mut val = vec![0u8; CLIENT_MAX_VALUE];
    match sys::fgetxattr(fd, &c, &mut val) {
        Ok(n) => {
            val.truncate(n);
            Ok(Some(val))
        }
        Err(e) if e.raw_os_error() == Some(libc::ENODATA) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Sets a client attribute (XATTR_CREATE/XATTR_REPLACE per `how`): `Ok(false)` when
/// `Replace` found none; EEXIST when `Create` found one.
pub fn client_set(
    fd: BorrowedFd<'_>,
    name: &[u8],
    val: &[u8],
    how: crate::backend::XattrSet,
) -> io::Result<bool> {
    use crate::backend::XattrSet;
    let flags = match how {
        XattrSet::Create => libc::XATTR_CREATE,
        XattrSet::Replace => libc::XATTR_REPLACE,
        XattrSet::Either => 0,
    };
    match sys::fsetxattr_flags(fd, &client_name(name)?, val, flags) {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENODATA) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The client attribute names of an open file, sorted.
pub fn client_list(fd: BorrowedFd<'_>) -> io::Result<Vec<Vec<u8>>> {
    let mut v: Vec<Vec<u8>> = names_with(fd, CLIENT_PREFIX)?
        .into_iter()
        .map(|n| n[CLIENT_PREFIX.len()..].to_vec())
        .filter(|n| !n.is_empty())
        .collect();
    v.sort();
    Ok(v)
}

/// Removes a client attribute: `Ok(false)` when there was none.
pub fn client_remove(fd: BorrowedFd<'_>, name: &[u8]) -> io::Result<bool> {
    match sys::fremovexattr(fd, &client_name(name)?) {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENODATA) => Ok(false),
        Err(e) => Err(e),
    }
}
