//! The `fs` backend: a directory of objects on local disk, the embedded default.
//!
//! Object key = path relative to the root ("a/b/c" is `root/a/b/c`); a directory
//! marker "a/b/" is the real directory `root/a/b`, and putting "a/b/c" creates the
//! parent directories. User metadata lives in extended attributes `user.nfsgw.<name>`.
//!
//! Safety: keys are checked ([`check_key`]) and every path is walked component by
//! component with `openat(O_NOFOLLOW)` from the root's descriptor, so a key never
//! escapes the root, even through a symlink planted inside it. Objects are regular
//! files and directories only: symlinks, fifos and devices in the tree are invisible.
//!
//! Durability: `put` writes a temporary file (named `.nfsgw-tmp.*`, never listed and
//! never a valid key), fsyncs it, renames it into place and fsyncs the directory.

use super::*;
use std::ffi::{CStr, CString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const XATTR_PREFIX: &str = "user.nfsgw.";

pub struct FsBackend {
    root: PathBuf,
    root_fd: OwnedFd,
    identity: String,
}

fn cstr(s: &str) -> BResult<CString> {
    CString::new(s).map_err(|_| BackendError::Permanent(format!("NUL in name {s:?}")))
}

fn last_err() -> io::Error {
    io::Error::last_os_error()
}

fn map_io(err: io::Error, what: &str, key: &str) -> BackendError {
    match err.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) | Some(libc::ELOOP) => BackendError::NotFound,
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => BackendError::NoSpace,
        Some(libc::EEXIST) => BackendError::AlreadyExists,
        Some(libc::EAGAIN) | Some(libc::EINTR) | Some(libc::ETIMEDOUT) => {
            BackendError::Retryable(format!("{what} {key:?}: {err}"))
        }
        _ => BackendError::Permanent(format!("{what} {key:?}: {err}")),
    }
}

/// The entry vanished or is not an object (raced with a delete, or a symlink).
fn is_gone(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT) | Some(libc::ENOTDIR) | Some(libc::ELOOP)
    )
}

fn openat(dir: RawFd, name: &CStr, flags: i32, mode: libc::mode_t) -> io::Result<OwnedFd> {
    loop {
        // SAFETY: name is a valid C string; the returned fd is owned by us.
        let fd = unsafe {
            libc::openat(
                dir,
                name.as_ptr(),
                flags | libc::O_CLOEXEC | libc::O_NOFOLLOW,
                mode as libc::c_uint,
            )
        };
        if fd >= 0 {
            // SAFETY: fd was just returned by openat.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        let e = last_err();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    // SAFETY: st is plain data filled by the kernel.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(last_err());
    }
    Ok(st)
}

fn lstatat(dir: RawFd, name: &CStr) -> io::Result<libc::stat> {
    // SAFETY: as above.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } != 0 {
        return Err(last_err());
    }
    Ok(st)
}

fn is_dir(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFDIR
}

fn is_reg(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFREG
}

fn fsync_fd(fd: RawFd) -> io::Result<()> {
    // SAFETY: plain syscall on a descriptor we own.
    if unsafe { libc::fsync(fd) } != 0 {
        return Err(last_err());
    }
    Ok(())
}

/// Reads the user.nfsgw.* attributes of an open file.
fn get_xattrs(fd: RawFd) -> io::Result<UserMeta> {
    let mut names = vec![0u8; 1024];
    loop {
        // SAFETY: the buffer is valid for its length.
        let n = unsafe { libc::flistxattr(fd, names.as_mut_ptr().cast(), names.len()) };
        if n >= 0 {
            names.truncate(n as usize);
            break;
        }
        let e = last_err();
        if e.raw_os_error() == Some(libc::ERANGE) {
            names.resize(names.len() * 4, 0);
            continue;
        }
        if e.raw_os_error() == Some(libc::ENOTSUP) {
            return Ok(UserMeta::new());
        }
        return Err(e);
    }
    let mut meta = UserMeta::new();
    for raw in names.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let Ok(name) = std::str::from_utf8(raw) else {
            continue;
        };
        let Some(short) = name.strip_prefix(XATTR_PREFIX) else {
            continue;
        };
        let cname = CString::new(raw).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        let mut val = vec![0u8; 256];
        loop {
            // SAFETY: the buffer is valid for its length.
            let n =
                unsafe { libc::fgetxattr(fd, cname.as_ptr(), val.as_mut_ptr().cast(), val.len()) };
            if n >= 0 {
                val.truncate(n as usize);
                break;
            }
            let e = last_err();
            match e.raw_os_error() {
                Some(libc::ERANGE) => val.resize(val.len() * 4, 0),
                Some(libc::ENODATA) => {
                    val.clear();
                    break;
                }
                _ => return Err(e),
            }
        }
        meta.insert(
            short.to_string(),
            String::from_utf8_lossy(&val).into_owned(),
        );
    }
    Ok(meta)
}

/// Replaces the user.nfsgw.* attributes of an open file with `meta`.
fn set_xattrs(fd: RawFd, meta: &UserMeta) -> io::Result<()> {
    let old = get_xattrs(fd)?;
    for name in old.keys().filter(|k| !meta.contains_key(*k)) {
        let c = CString::new(format!("{XATTR_PREFIX}{name}"))
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: valid C string.
        if unsafe { libc::fremovexattr(fd, c.as_ptr()) } != 0 {
            let e = last_err();
            if e.raw_os_error() != Some(libc::ENODATA) {
                return Err(e);
            }
        }
    }
    for (name, val) in meta {
        if old.get(name) == Some(val) {
            continue;
        }
        if name.is_empty() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let c = CString::new(format!("{XATTR_PREFIX}{name}"))
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: valid C string and value buffer.
        if unsafe { libc::fsetxattr(fd, c.as_ptr(), val.as_ptr().cast(), val.len(), 0) } != 0 {
            return Err(last_err());
        }
    }
    Ok(())
}

fn temp_name() -> String {
    format!("{TEMP_PREFIX}{:016x}", rand::random::<u64>())
}

fn mtime_ns(st: &libc::stat) -> u64 {
    (st.st_mtime.max(0) as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(st.st_mtime_nsec.max(0) as u64)
}

/// An object's metadata. Objects that carry no ownership metadata (put there by other
/// tools) show their on-disk mode, owner and group, so an operator can grant access
/// with plain chmod/chown on `backend.root`.
fn object_meta(key: &str, st: &libc::stat, mut user: UserMeta) -> ObjectMeta {
    user.entry("mode".into())
        .or_insert_with(|| format!("{:o}", st.st_mode));
    user.entry("uid".into())
        .or_insert_with(|| st.st_uid.to_string());
    user.entry("gid".into())
        .or_insert_with(|| st.st_gid.to_string());
    let size = if is_dir(st) {
        0
    } else {
        st.st_size.max(0) as u64
    };
    let m = mtime_ns(st);
    ObjectMeta {
        key: key.to_string(),
        size,
        mtime_ns: m,
        etag: format!("{m:x}-{size:x}"),
        user,
    }
}

/// A key split into its parent components, its last name, and whether it is a
/// directory marker.
struct Split<'a> {
    parents: Vec<&'a str>,
    last: &'a str,
    dir: bool,
}

fn split(key: &str) -> BResult<Split<'_>> {
    check_key(key)?;
    let dir = key.ends_with('/');
    let body = key.strip_suffix('/').unwrap_or(key);
    let mut parents: Vec<&str> = body.split('/').collect();
    let last = parents.pop().unwrap_or_default();
    Ok(Split { parents, last, dir })
}

/// Directory entries of an open directory: (name, is_dir), regular files and
/// directories only, temp files and non-UTF-8 names skipped.
fn read_dir_fd(dir: RawFd) -> io::Result<Vec<(String, bool)>> {
    // SAFETY: dup gives a descriptor that fdopendir takes over; closedir closes it.
    let fd = unsafe { libc::fcntl(dir, libc::F_DUPFD_CLOEXEC, 0) };
    if fd < 0 {
        return Err(last_err());
    }
    let dp = unsafe { libc::fdopendir(fd) };
    if dp.is_null() {
        let e = last_err();
        unsafe { libc::close(fd) };
        return Err(e);
    }
    // fdopendir shares the file offset with the original descriptor: start over.
    unsafe { libc::rewinddir(dp) };
    let mut out = Vec::new();
    let result = loop {
        // SAFETY: errno is thread-local; readdir returns a pointer valid until the next call.
        unsafe { *libc::__errno_location() = 0 };
        let ent = unsafe { libc::readdir(dp) };
        if ent.is_null() {
            let e = last_err();
            break if e.raw_os_error().unwrap_or(0) != 0 {
                Err(e)
            } else {
                Ok(())
            };
        }
        let ent = unsafe { &*ent };
        let name = unsafe { CStr::from_ptr(ent.d_name.as_ptr()) };
        let bytes = name.to_bytes();
        if bytes == b"." || bytes == b".." {
            continue;
        }
        let Ok(s) = std::str::from_utf8(bytes) else {
            continue;
        };
        if s.starts_with(TEMP_PREFIX) {
            continue;
        }
        let d = match ent.d_type {
            libc::DT_DIR => true,
            libc::DT_REG => false,
            libc::DT_UNKNOWN => match lstatat(dir, name) {
                Ok(st) if is_dir(&st) => true,
                Ok(st) if is_reg(&st) => false,
                _ => continue,
            },
            _ => continue,
        };
        out.push((s.to_string(), d));
    };
    unsafe { libc::closedir(dp) };
    result.map(|_| out)
}

enum Item {
    Obj(ObjectMeta),
    Prefix(String),
}

impl Item {
    fn key(&self) -> &str {
        match self {
            Item::Obj(o) => &o.key,
            Item::Prefix(p) => p,
        }
    }
}

impl FsBackend {
    /// Opens (creating if missing) a directory of objects. Fails when the filesystem
    /// refuses user extended attributes, which hold the object metadata.
    pub fn open(root: &Path) -> anyhow::Result<FsBackend> {
        use anyhow::Context;
        std::fs::create_dir_all(root).with_context(|| {
            format!(
                "backend.root {}: cannot create the directory",
                root.display()
            )
        })?;
        let root = root
            .canonicalize()
            .with_context(|| format!("backend.root {}: cannot resolve", root.display()))?;
        let croot = CString::new(root.as_os_str().as_encoded_bytes())
            .with_context(|| format!("backend.root {}: NUL in path", root.display()))?;
        // SAFETY: valid C string; the fd is owned below.
        let fd = unsafe {
            libc::open(
                croot.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(last_err())
                .with_context(|| format!("backend.root {}: cannot open", root.display()));
        }
        let root_fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // Probe user xattrs.
        let probe = CString::new(temp_name()).expect("no NUL");
        let pf = openat(
            root_fd.as_raw_fd(),
            &probe,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
            0o600,
        )
        .with_context(|| format!("backend.root {}: cannot create files there", root.display()))?;
        let mut meta = UserMeta::new();
        meta.insert("probe".into(), "1".into());
        let res = set_xattrs(pf.as_raw_fd(), &meta);
        drop(pf);
        // SAFETY: valid C string.
        unsafe { libc::unlinkat(root_fd.as_raw_fd(), probe.as_ptr(), 0) };
        if let Err(e) = res {
            anyhow::bail!(
                "backend.root {}: the filesystem refuses user extended attributes ({e}), which \
                 hold object metadata (user.nfsgw.*); put backend.root on a filesystem that \
                 supports them (ext4, xfs, btrfs; tmpfs from Linux 6.6) or remount it with \
                 `-o user_xattr`",
                root.display()
            );
        }
        let identity = format!("fs:{}", root.display());
        Ok(FsBackend {
            root,
            root_fd,
            identity,
        })
    }

    /// The root directory of the objects.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Opens the directory reached by `comps` from the root. With `create`, missing
    /// directories are made (and their parents fsynced).
    fn walk(&self, comps: &[&str], create: bool, key: &str) -> BResult<Option<OwnedFd>> {
        let mut cur: Option<OwnedFd> = None;
        for c in comps {
            let name = cstr(c)?;
            let at = cur
                .as_ref()
                .map_or(self.root_fd.as_raw_fd(), |f| f.as_raw_fd());
            let next = match openat(at, &name, libc::O_RDONLY | libc::O_DIRECTORY, 0) {
                Ok(fd) => fd,
                Err(e) if create && e.raw_os_error() == Some(libc::ENOENT) => {
                    // SAFETY: valid C string.
                    if unsafe { libc::mkdirat(at, name.as_ptr(), 0o755) } != 0 {
                        let e = last_err();
                        if e.raw_os_error() != Some(libc::EEXIST) {
                            return Err(map_io(e, "mkdir", key));
                        }
                    } else {
                        fsync_fd(at).map_err(|e| map_io(e, "fsync", key))?;
                    }
                    openat(at, &name, libc::O_RDONLY | libc::O_DIRECTORY, 0)
                        .map_err(|e| map_io(e, "open", key))?
                }
                Err(e) => return Err(map_io(e, "open", key)),
            };
            cur = Some(next);
        }
        Ok(cur)
    }

    fn raw(&self, fd: &Option<OwnedFd>) -> RawFd {
        fd.as_ref()
            .map_or(self.root_fd.as_raw_fd(), |f| f.as_raw_fd())
    }

    /// Opens an existing object (a regular file, or a directory for a marker key).
    fn open_obj(&self, key: &str, flags: i32) -> BResult<(File, libc::stat)> {
        let sp = split(key)?;
        let parent = self.walk(&sp.parents, false, key)?;
        let name = cstr(sp.last)?;
        let flags = if sp.dir {
            libc::O_RDONLY | libc::O_DIRECTORY
        } else {
            flags | libc::O_NONBLOCK
        };
        let fd =
            openat(self.raw(&parent), &name, flags, 0).map_err(|e| match e.raw_os_error() {
                Some(libc::EISDIR) => BackendError::NotFound,
                _ => map_io(e, "open", key),
            })?;
        let st = fstat(fd.as_raw_fd()).map_err(|e| map_io(e, "stat", key))?;
        if (sp.dir && !is_dir(&st)) || (!sp.dir && !is_reg(&st)) {
            return Err(BackendError::NotFound);
        }
        Ok((File::from(fd), st))
    }

    fn meta_of_open(&self, key: &str, f: &File, st: &libc::stat) -> BResult<ObjectMeta> {
        let user = get_xattrs(f.as_raw_fd()).map_err(|e| map_io(e, "getxattr", key))?;
        Ok(object_meta(key, st, user))
    }

    /// Writes a new file's content durably to a temp file in `parent` and moves it
    /// into place as `last`.
    fn install(
        &self,
        parent: RawFd,
        last: &str,
        key: &str,
        fill: &mut dyn FnMut(&mut File) -> io::Result<()>,
        meta: &UserMeta,
        if_absent: bool,
    ) -> BResult<ObjectMeta> {
        let tmp = CString::new(temp_name()).expect("no NUL");
        let fd = openat(
            parent,
            &tmp,
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL,
            0o644,
        )
        .map_err(|e| map_io(e, "create", key))?;
        let mut f = File::from(fd);
        let unlink_tmp = || unsafe { libc::unlinkat(parent, tmp.as_ptr(), 0) };
        let res = (|| -> BResult<ObjectMeta> {
            fill(&mut f).map_err(|e| map_io(e, "write", key))?;
            set_xattrs(f.as_raw_fd(), meta).map_err(|e| map_io(e, "setxattr", key))?;
            f.sync_all().map_err(|e| map_io(e, "fsync", key))?;
            let st = fstat(f.as_raw_fd()).map_err(|e| map_io(e, "stat", key))?;
            let name = cstr(last)?;
            // SAFETY: valid C strings and directory descriptors.
            if if_absent {
                if unsafe { libc::linkat(parent, tmp.as_ptr(), parent, name.as_ptr(), 0) } != 0 {
                    return Err(map_io(last_err(), "link", key));
                }
                unlink_tmp();
            } else if unsafe { libc::renameat(parent, tmp.as_ptr(), parent, name.as_ptr()) } != 0 {
                let e = last_err();
                return Err(match e.raw_os_error() {
                    Some(libc::EISDIR) | Some(libc::ENOTEMPTY) => BackendError::AlreadyExists,
                    _ => map_io(e, "rename", key),
                });
            }
            fsync_fd(parent).map_err(|e| map_io(e, "fsync", key))?;
            Ok(object_meta(key, &st, meta.clone()))
        })();
        if res.is_err() {
            unlink_tmp();
        }
        res
    }

    fn put_dir(&self, key: &str, meta: &UserMeta, if_absent: bool) -> BResult<ObjectMeta> {
        let sp = split(key)?;
        let parent = self.walk(&sp.parents, true, key)?;
        let at = self.raw(&parent);
        let name = cstr(sp.last)?;
        // SAFETY: valid C string.
        if unsafe { libc::mkdirat(at, name.as_ptr(), 0o755) } != 0 {
            let e = last_err();
            if e.raw_os_error() != Some(libc::EEXIST) || if_absent {
                return Err(map_io(e, "mkdir", key));
            }
        }
        let (f, _) = self.open_obj(key, libc::O_RDONLY)?;
        set_xattrs(f.as_raw_fd(), meta).map_err(|e| map_io(e, "setxattr", key))?;
        f.sync_all().map_err(|e| map_io(e, "fsync", key))?;
        fsync_fd(at).map_err(|e| map_io(e, "fsync", key))?;
        let st = fstat(f.as_raw_fd()).map_err(|e| map_io(e, "stat", key))?;
        Ok(object_meta(key, &st, meta.clone()))
    }

    #[allow(clippy::too_many_arguments)]
    fn visit(
        &self,
        dir: RawFd,
        dir_key: &str,
        name_prefix: &str,
        rolled: bool,
        start_after: Option<&str>,
        limit: usize,
        out: &mut Vec<Item>,
    ) -> BResult<()> {
        let mut ents = read_dir_fd(dir).map_err(|e| map_io(e, "readdir", dir_key))?;
        ents.retain(|(n, _)| n.starts_with(name_prefix));
        let mut ents: Vec<(String, bool)> = ents
            .into_iter()
            .map(|(n, d)| {
                (
                    if d {
                        format!("{dir_key}{n}/")
                    } else {
                        format!("{dir_key}{n}")
                    },
                    d,
                )
            })
            .collect();
        ents.sort_unstable();
        for (key, d) in ents {
            if out.len() >= limit {
                return Ok(());
            }
            let after = start_after.is_none_or(|s| key.as_str() > s);
            if d {
                if rolled {
                    if after {
                        out.push(Item::Prefix(key));
                    }
                    continue;
                }
                if let Some(s) = start_after {
                    if s > key.as_str() && !s.starts_with(key.as_str()) {
                        continue;
                    }
                }
                let name = cstr(&key[dir_key.len()..key.len() - 1])?;
                let sub = match openat(dir, &name, libc::O_RDONLY | libc::O_DIRECTORY, 0) {
                    Ok(f) => f,
                    Err(e) if is_gone(&e) => continue,
                    Err(e) => return Err(map_io(e, "open", &key)),
                };
                if after {
                    let f = File::from(sub.try_clone().map_err(|e| map_io(e, "dup", &key))?);
                    let st = fstat(f.as_raw_fd()).map_err(|e| map_io(e, "stat", &key))?;
                    out.push(Item::Obj(self.meta_of_open(&key, &f, &st)?));
                }
                self.visit(sub.as_raw_fd(), &key, "", false, start_after, limit, out)?;
            } else if after {
                let name = cstr(&key[dir_key.len()..])?;
                let f = match openat(dir, &name, libc::O_RDONLY | libc::O_NONBLOCK, 0) {
                    Ok(f) => File::from(f),
                    Err(e) if is_gone(&e) => continue,
                    Err(e) => return Err(map_io(e, "open", &key)),
                };
                let st = fstat(f.as_raw_fd()).map_err(|e| map_io(e, "stat", &key))?;
                if !is_reg(&st) {
                    continue;
                }
                out.push(Item::Obj(self.meta_of_open(&key, &f, &st)?));
            }
        }
        Ok(())
    }
}

struct FsUpload {
    parent: Option<OwnedFd>,
    root: RawFd,
    tmp: CString,
    last: String,
    key: String,
    meta: UserMeta,
    file: Option<File>,
}

impl FsUpload {
    fn at(&self) -> RawFd {
        self.parent.as_ref().map_or(self.root, |f| f.as_raw_fd())
    }
}

impl Drop for FsUpload {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            // SAFETY: valid C string and directory descriptor.
            unsafe { libc::unlinkat(self.at(), self.tmp.as_ptr(), 0) };
        }
    }
}

impl Upload for FsUpload {
    fn put_part(&mut self, data: &[u8]) -> BResult<()> {
        let f = self
            .file
            .as_mut()
            .ok_or_else(|| BackendError::Permanent("upload finished".into()))?;
        f.write_all(data).map_err(|e| map_io(e, "write", &self.key))
    }

    fn complete(mut self: Box<Self>) -> BResult<ObjectMeta> {
        let f = self
            .file
            .take()
            .ok_or_else(|| BackendError::Permanent("upload finished".into()))?;
        let at = self.at();
        let key = self.key.clone();
        let res = (|| {
            set_xattrs(f.as_raw_fd(), &self.meta).map_err(|e| map_io(e, "setxattr", &key))?;
            f.sync_all().map_err(|e| map_io(e, "fsync", &key))?;
            let st = fstat(f.as_raw_fd()).map_err(|e| map_io(e, "stat", &key))?;
            let name = cstr(&self.last)?;
            // SAFETY: valid C strings and descriptors.
            if unsafe { libc::renameat(at, self.tmp.as_ptr(), at, name.as_ptr()) } != 0 {
                return Err(map_io(last_err(), "rename", &key));
            }
            fsync_fd(at).map_err(|e| map_io(e, "fsync", &key))?;
            Ok(object_meta(&key, &st, self.meta.clone()))
        })();
        if res.is_err() {
            // SAFETY: as above.
            unsafe { libc::unlinkat(at, self.tmp.as_ptr(), 0) };
        }
        res
    }

    fn abort(self: Box<Self>) {
        // Drop unlinks the temp file.
    }
}

impl Backend for FsBackend {
    fn name(&self) -> &'static str {
        "fs"
    }

    fn identity(&self) -> String {
        self.identity.clone()
    }

    fn head(&self, key: &str) -> BResult<ObjectMeta> {
        if key.is_empty() {
            // The store root is a real directory here: it carries metadata too.
            let fd = self.root_fd.as_raw_fd();
            let st = fstat(fd).map_err(|e| map_io(e, "stat", key))?;
            let user = get_xattrs(fd).map_err(|e| map_io(e, "getxattr", key))?;
            return Ok(object_meta(key, &st, user));
        }
        let (f, st) = self.open_obj(key, libc::O_RDONLY)?;
        self.meta_of_open(key, &f, &st)
    }

    fn get_range(&self, key: &str, offset: u64, dst: &mut [u8]) -> BResult<usize> {
        let (f, st) = self.open_obj(key, libc::O_RDONLY)?;
        if is_dir(&st) {
            return Ok(0);
        }
        let mut done = 0;
        while done < dst.len() {
            match f.read_at(&mut dst[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(map_io(e, "read", key)),
            }
        }
        Ok(done)
    }

    fn put(&self, key: &str, data: &[u8], meta: &UserMeta, if_absent: bool) -> BResult<ObjectMeta> {
        let sp = split(key)?;
        if sp.dir {
            if !data.is_empty() {
                return Err(BackendError::Permanent(format!(
                    "directory marker {key:?} with data"
                )));
            }
            return self.put_dir(key, meta, if_absent);
        }
        let parent = self.walk(&sp.parents, true, key)?;
        self.install(
            self.raw(&parent),
            sp.last,
            key,
            &mut |f| f.write_all(data),
            meta,
            if_absent,
        )
    }

    fn multipart(&self, key: &str, meta: &UserMeta) -> BResult<Box<dyn Upload>> {
        let sp = split(key)?;
        if sp.dir {
            return Err(BackendError::Permanent(format!(
                "multipart upload of a directory marker {key:?}"
            )));
        }
        let parent = self.walk(&sp.parents, true, key)?;
        let tmp = CString::new(temp_name()).expect("no NUL");
        let fd = openat(
            self.raw(&parent),
            &tmp,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
            0o644,
        )
        .map_err(|e| map_io(e, "create", key))?;
        Ok(Box::new(FsUpload {
            parent,
            root: self.root_fd.as_raw_fd(),
            tmp,
            last: sp.last.to_string(),
            key: key.to_string(),
            meta: meta.clone(),
            file: Some(File::from(fd)),
        }))
    }

    fn list(
        &self,
        prefix: &str,
        delimiter: Option<char>,
        start_after: Option<&str>,
        max: usize,
    ) -> BResult<ListPage> {
        check_prefix(prefix)?;
        let rolled = match delimiter {
            None => false,
            Some('/') => true,
            Some(d) => {
                return Err(BackendError::Permanent(format!(
                    "unsupported delimiter {d:?}"
                )))
            }
        };
        let max = max.max(1);
        let (dir_key, name_prefix) = match prefix.rfind('/') {
            Some(i) => (&prefix[..=i], &prefix[i + 1..]),
            None => ("", prefix),
        };
        let comps: Vec<&str> = dir_key.split('/').filter(|c| !c.is_empty()).collect();
        let dir = match self.walk(&comps, false, prefix) {
            Ok(d) => d,
            Err(BackendError::NotFound) => return Ok(ListPage::default()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        // The marker of the listed directory itself is part of the listing, as in S3.
        if !dir_key.is_empty() && name_prefix.is_empty() && start_after.is_none_or(|s| s < dir_key)
        {
            let f = File::from(
                dir.as_ref()
                    .expect("non-root")
                    .try_clone()
                    .map_err(|e| map_io(e, "dup", dir_key))?,
            );
            let st = fstat(f.as_raw_fd()).map_err(|e| map_io(e, "stat", dir_key))?;
            out.push(Item::Obj(self.meta_of_open(dir_key, &f, &st)?));
        }
        self.visit(
            self.raw(&dir),
            dir_key,
            name_prefix,
            rolled,
            start_after,
            max + 1,
            &mut out,
        )?;
        let mut page = ListPage::default();
        if out.len() > max {
            out.truncate(max);
            page.next = out.last().map(|i| i.key().to_string());
        }
        for item in out {
            match item {
                Item::Obj(o) => page.objects.push(o),
                Item::Prefix(p) => page.prefixes.push(p),
            }
        }
        Ok(page)
    }

    fn copy(&self, from: &str, to: &str) -> BResult<()> {
        let (mut src, st) = self.open_obj(from, libc::O_RDONLY)?;
        let meta = get_xattrs(src.as_raw_fd()).map_err(|e| map_io(e, "getxattr", from))?;
        let dsp = split(to)?;
        if is_dir(&st) || dsp.dir {
            if !(is_dir(&st) && dsp.dir) {
                return Err(BackendError::Permanent(format!(
                    "copy {from:?} -> {to:?}: kind mismatch"
                )));
            }
            return self.put_dir(to, &meta, false).map(|_| ());
        }
        let parent = self.walk(&dsp.parents, true, to)?;
        self.install(
            self.raw(&parent),
            dsp.last,
            to,
            &mut |f| io::copy(&mut src, f).map(|_| ()),
            &meta,
            false,
        )
        .map(|_| ())
    }

    fn delete(&self, key: &str) -> BResult<()> {
        let sp = split(key)?;
        let parent = self.walk(&sp.parents, false, key)?;
        let at = self.raw(&parent);
        let name = cstr(sp.last)?;
        let st = lstatat(at, &name).map_err(|e| map_io(e, "stat", key))?;
        if (sp.dir && !is_dir(&st)) || (!sp.dir && !is_reg(&st)) {
            return Err(BackendError::NotFound);
        }
        let flags = if sp.dir { libc::AT_REMOVEDIR } else { 0 };
        // SAFETY: valid C string.
        if unsafe { libc::unlinkat(at, name.as_ptr(), flags) } != 0 {
            let e = last_err();
            return Err(match e.raw_os_error() {
                Some(libc::ENOTEMPTY) | Some(libc::EEXIST) => {
                    BackendError::Permanent(format!("delete {key:?}: directory not empty"))
                }
                _ => map_io(e, "delete", key),
            });
        }
        fsync_fd(at).map_err(|e| map_io(e, "fsync", key))
    }

    fn set_meta(&self, key: &str, meta: &UserMeta) -> BResult<()> {
        if key.is_empty() {
            let fd = self.root_fd.as_raw_fd();
            set_xattrs(fd, meta).map_err(|e| map_io(e, "setxattr", key))?;
            return fsync_fd(fd).map_err(|e| map_io(e, "fsync", key));
        }
        let (f, _) = self.open_obj(key, libc::O_RDONLY)?;
        set_xattrs(f.as_raw_fd(), meta).map_err(|e| map_io(e, "setxattr", key))?;
        f.sync_all().map_err(|e| map_io(e, "fsync", key))
    }

    fn capacity(&self) -> BResult<(u64, u64, u64, u64)> {
        // SAFETY: plain data filled by the kernel.
        let mut sv: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstatvfs(self.root_fd.as_raw_fd(), &mut sv) } != 0 {
            return Err(map_io(last_err(), "statvfs", ""));
        }
        let bs = sv.f_frsize as u64;
        Ok((
            (sv.f_blocks as u64).saturating_mul(bs),
            (sv.f_bavail as u64).saturating_mul(bs),
            sv.f_files as u64,
            sv.f_favail as u64,
        ))
    }

    fn random_write(&self) -> Option<&dyn RandomWrite> {
        Some(self)
    }

    fn rename(&self, from: &str, to: &str) -> BResult<()> {
        let fsp = split(from)?;
        let tsp = split(to)?;
        if from == to {
            return Ok(());
        }
        if fsp.dir != tsp.dir {
            return Err(BackendError::Permanent(format!(
                "rename {from:?} -> {to:?}: mixing a directory and a file"
            )));
        }
        if fsp.dir && to.starts_with(from) {
            return Err(BackendError::Permanent(format!(
                "rename {from:?} into itself"
            )));
        }
        let fp = self.walk(&fsp.parents, false, from)?;
        let fname = cstr(fsp.last)?;
        let st = lstatat(self.raw(&fp), &fname).map_err(|e| map_io(e, "stat", from))?;
        if (fsp.dir && !is_dir(&st)) || (!fsp.dir && !is_reg(&st)) {
            return Err(BackendError::NotFound);
        }
        let tp = self.walk(&tsp.parents, true, to)?;
        let tname = cstr(tsp.last)?;
        // SAFETY: valid C strings and descriptors.
        if unsafe { libc::renameat(self.raw(&fp), fname.as_ptr(), self.raw(&tp), tname.as_ptr()) }
            != 0
        {
            let e = last_err();
            return Err(match e.raw_os_error() {
                Some(libc::ENOTEMPTY) | Some(libc::EEXIST) => {
                    BackendError::Permanent(format!("rename {from:?} -> {to:?}: target not empty"))
                }
                _ => map_io(e, "rename", from),
            });
        }
        fsync_fd(self.raw(&tp)).map_err(|e| map_io(e, "fsync", to))?;
        fsync_fd(self.raw(&fp)).map_err(|e| map_io(e, "fsync", from))
    }
}

impl RandomWrite for FsBackend {
    fn write_at(&self, key: &str, offset: u64, data: &[u8]) -> BResult<()> {
        let (f, _) = self.open_obj(key, libc::O_WRONLY)?;
        f.write_all_at(data, offset)
            .map_err(|e| map_io(e, "write", key))
    }

    fn set_size(&self, key: &str, size: u64) -> BResult<()> {
        let (f, _) = self.open_obj(key, libc::O_WRONLY)?;
        f.set_len(size).map_err(|e| map_io(e, "truncate", key))
    }

    fn sync(&self, key: &str) -> BResult<()> {
        let (f, _) = self.open_obj(key, libc::O_RDONLY)?;
        f.sync_all().map_err(|e| map_io(e, "fsync", key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conformance() {
        let dir = tempfile::tempdir().unwrap();
        let b = FsBackend::open(&dir.path().join("objects")).unwrap();
        crate::backend::conformance::run(&b);
        // Directory markers are real directories; files are where the key says.
        assert!(dir.path().join("objects/d").is_dir());
        assert_eq!(
            std::fs::read(dir.path().join("objects/a/b/file")).unwrap(),
            b"hello world"
        );
    }

    #[test]
    fn symlinks_do_not_escape() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), b"s").unwrap();
        let b = FsBackend::open(&dir.path().join("objects")).unwrap();
        std::os::unix::fs::symlink(&outside, dir.path().join("objects/link")).unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), dir.path().join("objects/flink"))
            .unwrap();
        assert_eq!(b.head("link/secret"), Err(BackendError::NotFound));
        assert_eq!(b.head("flink"), Err(BackendError::NotFound));
        assert!(b.put("link/new", b"x", &UserMeta::new(), false).is_err());
        assert!(!outside.join("new").exists());
        assert!(b.list("", None, None, 100).unwrap().objects.is_empty());
        assert!(b.list("link/", None, None, 100).unwrap().objects.is_empty());
        assert_eq!(b.delete("flink"), Err(BackendError::NotFound));
        assert!(outside.join("secret").exists());
    }
}
