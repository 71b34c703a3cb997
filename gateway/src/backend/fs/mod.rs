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
//! never a valid key), fsyncs it, renames it into place (a new object with
//! `RENAME_NOREPLACE`) and fsyncs the directory — a fsync other workers' concurrent
//! changes of that directory may share ([`dirsync`], group commit).
//!
//! Open-object cache: objects that were looked up stay open (see [`ObjCache`]), so a
//! HEAD is one `fstat` on the cached descriptor and a ranged read one `pread`. The
//! user metadata is cached with the inode's ctime and re-read when the ctime moves. An
//! unlinked inode (`st_nlink == 0`) is dropped at once; otherwise the key's path is
//! re-walked at most every [`REVALIDATE`] (and the metadata re-read), so a rename done
//! behind the gateway's back goes unnoticed for at most that long, like an NFS client's
//! attribute cache. Every change the gateway makes itself updates or drops the cached
//! entries it touches before returning.
//!
//! System calls: every raw `libc` call is in [`sys`], a set of safe wrappers and the
//! backend's only `unsafe` (enforced: the rest of the backend denies `unsafe_code`).
//!
//! Several gateways on one directory (`backend.shared`): the handle key and id index
//! they share live in the directory, see [`shared`].
#![deny(unsafe_code)]

use super::*;
use std::collections::HashMap;
use std::ffi::CString;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod cas;
mod dirsync;
mod fanout;
mod flush;
mod list;
mod maxsize;
pub mod remote;
mod shared;
#[cfg(test)]
mod shared_tests;
mod space;
mod sys;
#[cfg(test)]
mod tests;
mod xattr;

use sys::{fstat, lstatat, openat};

/// How long a cached object is trusted without re-walking its path.
const REVALIDATE: Duration = Duration::from_secs(1);
const CACHE_SHARDS: usize = 16;
/// Most objects kept open (lowered when the descriptor limit is small).
const CACHE_MAX: usize = 4096;

pub struct FsBackend {
    root: PathBuf,
    /// Shared with uploads in progress, which may outlive a borrow of the backend.
    root_fd: Arc<OwnedFd>,
    identity: String,
    cache: Arc<ObjCache>,
    /// Object metadata (xattr) reads so far: what the tests count.
    meta_reads: Arc<AtomicU64>,
    /// Directory scans by listings so far (`list`): what the tests count.
    dir_scans: Arc<AtomicU64>,
    /// `backend.shared`: the handle key and id index several gateways share ([`shared`]).
    shared: Option<Arc<shared::Shared>>,
    /// Directory fsyncs shared by concurrent changes (`dirsync`).
    dir_syncs: Arc<dirsync::DirSyncs>,
    /// Per directory or one log force (`flush`, `backend.fs.flush`).
    flush: Arc<flush::Flush>,
    /// Listing pages' metadata reads shared with idle threads (`fanout`).
    fanout: Arc<fanout::Fanout>,
    /// The largest file the root's file system holds (`maxsize`): the
    /// `maxfilesize` the front ends advertise.
    max_size: u64,
}

/// An open object.
#[derive(Clone)]
struct Entry {
    file: Arc<File>,
    dir: bool,
    /// Opened for writing too.
    writable: bool,
    dev: u64,
    ino: u64,
    /// The ctime `user` was read under.
    ctime: (i64, i64),
    /// `user` was read after a stat showing `ctime` at least `list::SETTLE` old: any
    /// later change moves the ctime past it, so while the inode's ctime is `ctime`,
    /// `user` is current and revalidation needs no re-read (`list::settled_ctime`).
    /// False when `ctime` was recorded without reading `user` (our own writes).
    settled: bool,
    user: Arc<UserMeta>,
    /// When the key's path was last seen to name this inode.
    validated: Instant,
}

/// Open objects by key: sharded maps, bounded, locks held for map work only.
struct ObjCache {
    shards: Vec<Mutex<HashMap<String, Entry>>>,
    per_shard: usize,
    /// Bumped by every invalidation. A lookup that walked a path before an
    /// invalidation may not insert what it found (it may be what was just renamed or
    /// replaced).
    epoch: AtomicU64,
    /// Listing windows (`list`), dropped with every change in their directory.
    windows: list::Windows,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ObjCache {
    fn new(max: usize) -> ObjCache {
        ObjCache {
            shards: (0..CACHE_SHARDS)
                .map(|_| Mutex::new(HashMap::new()))
                .collect(),
            per_shard: (max / CACHE_SHARDS).max(1),
            epoch: AtomicU64::new(0),
            windows: list::Windows::default(),
        }
    }

    fn shard(&self, key: &str) -> &Mutex<HashMap<String, Entry>> {
        // FNV-1a: keys are short and this is on every call.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in key.as_bytes() {
            h = (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
        &self.shards[(h % CACHE_SHARDS as u64) as usize]
    }

    fn get(&self, key: &str) -> Option<Entry> {
        lock(self.shard(key)).get(key).cloned()
    }

    fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Inserts what a lookup that started at `epoch` found, unless something was
    /// invalidated since.
    fn insert(&self, key: &str, e: Entry, epoch: u64) {
        let mut m = lock(self.shard(key));
        if self.epoch.load(Ordering::SeqCst) != epoch {
            return;
        }
        let evicted = if m.len() >= self.per_shard && !m.contains_key(key) {
            // Evict the entry validated longest ago: hot entries are revalidated
            // every REVALIDATE, so this is close to least recently used.
            m.iter()
                .min_by_key(|(_, v)| v.validated)
                .map(|(k, _)| k.clone())
                .and_then(|old| m.remove(&old))
        } else {
            None
        };
        let replaced = m.insert(key.to_string(), e);
        // Dropped entries close their descriptors once the lock is released.
        drop(m);
        drop((evicted, replaced));
    }

    /// Updates the entry of `key` if it is still the one holding `file`.
    fn update(&self, key: &str, file: &Arc<File>, f: impl FnOnce(&mut Entry)) {
        if let Some(e) = lock(self.shard(key)).get_mut(key) {
            if Arc::ptr_eq(&e.file, file) {
                f(e);
            }
        }
    }

    /// Drops the entry of `key` if it is still the one holding `file`.
    fn remove_if(&self, key: &str, file: &Arc<File>) {
        let mut m = lock(self.shard(key));
        if m.get(key).is_some_and(|e| Arc::ptr_eq(&e.file, file)) {
            let old = m.remove(key);
            drop(m);
            drop(old);
        }
    }

    /// Updates the entry of `key` if it is still open on the inode (dev, ino): for a
    /// directory changed through another descriptor of it.
    fn update_inode(&self, key: &str, dev: u64, ino: u64, f: impl FnOnce(&mut Entry)) {
        if let Some(e) = lock(self.shard(key)).get_mut(key) {
            if e.dev == dev && e.ino == ino {
                f(e);
            }
        }
    }

    /// `invalidate`, then caches `e`, the object the gateway itself just put at `key`
    /// (so the HEAD of its reply attributes opens and reads nothing), unless another
    /// invalidation came since `epoch`, taken before the change: what `key` names
    /// then is not known.
    fn replace(&self, key: &str, e: Entry, epoch: u64) {
        let prev = self.epoch.fetch_add(1, Ordering::SeqCst);
        let old = lock(self.shard(key)).remove(key);
        drop(old);
        self.windows.invalidate(list::dir_of(key));
        if prev == epoch {
            self.insert(key, e, prev.wrapping_add(1));
        }
    }

    /// Forgets `key`. Call after the change on disk.
    fn invalidate(&self, key: &str) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        let old = lock(self.shard(key)).remove(key);
        drop(old);
        self.windows.invalidate(list::dir_of(key));
    }

    /// Forgets every key starting with `prefix`. Call after the change on disk.
    fn invalidate_prefix(&self, prefix: &str) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        self.windows.invalidate_prefix(prefix);
        self.windows.invalidate(list::dir_of(prefix));
        for s in &self.shards {
            let mut gone = Vec::new();
            lock(s).retain(|k, v| {
                if k.starts_with(prefix) {
                    gone.push(v.file.clone());
                    false
                } else {
                    true
                }
            });
            // Descriptors are closed here, outside the lock.
            drop(gone);
        }
    }
}

fn ctime_of(st: &libc::stat) -> (i64, i64) {
    (st.st_ctime, st.st_ctime_nsec)
}

/// The soft limit on open descriptors.
fn fd_limit() -> usize {
    sys::nofile_limit().map_or(1024, |n| usize::try_from(n).unwrap_or(usize::MAX))
}

fn cstr(s: &str) -> BResult<CString> {
    CString::new(s).map_err(|_| BackendError::Permanent(format!("NUL in name {s:?}")))
}

fn map_io(err: io::Error, what: &str, key: &str) -> BackendError {
    match err.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) | Some(libc::ELOOP) => BackendError::NotFound,
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => BackendError::NoSpace,
        Some(libc::EROFS) => BackendError::ReadOnly,
        Some(libc::EFBIG) => BackendError::TooLarge,
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

fn is_dir(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFDIR
}

fn is_reg(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFREG
}

/// The largest file offset + 1 (`off_t` is an i64).
const MAX_END: u64 = i64::MAX as u64;

fn efbig() -> io::Error {
    io::Error::from_raw_os_error(libc::EFBIG)
}

/// Rule (hostile offsets): `offset + len` of a caller's read or write, or `err` when it
/// does not fit in a u64 (EINVAL for reads, EFBIG for writes), never a wrapped sum.
/// An offset past [`MAX_END`] is EINVAL too, as pread/pwrite would say.
fn max_end(offset: u64, len: usize, err: i32) -> io::Result<u64> {
    if offset > MAX_END {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    offset
        .checked_add(len as u64)
        .ok_or_else(|| io::Error::from_raw_os_error(err))
}

/// How `install` gave a temp file its name.
enum Published {
    /// Renamed: the descriptor's path is the object's name.
    Moved,
    /// Linked, the temp name unlinked: the descriptor's path is gone.
    Linked,
}

/// Gives temp file `tmp` the name `name` unless something has it (EEXIST): one
/// `renameat2(RENAME_NOREPLACE)`, or where the file system refuses the flag (EINVAL;
/// ENOSYS before Linux 3.15) `linkat`, which fails on an existing name too, and
/// `unlinkat` of the temp name.
fn publish_new(dir: BorrowedFd<'_>, tmp: &CString, name: &CString) -> io::Result<Published> {
    match sys::rename_noreplace(dir, tmp, dir, name) {
        Ok(()) => Ok(Published::Moved),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOSYS)) => {
            sys::linkat(dir, tmp, dir, name)?;
            // Best effort: a leftover temp file is never listed.
            let _ = sys::unlinkat(dir, tmp, 0);
            Ok(Published::Linked)
        }
        Err(e) => Err(e),
    }
}

/// `.nfsgw-tmp.<run>.<random>`: the run part tells this process's temporaries (a put
/// in flight) from those a killed earlier run left behind (garbage).
fn temp_name() -> String {
    format!("{}{:016x}", run_temp_prefix(), rand::random::<u64>())
}

/// The temporary-name prefix of this process: `.nfsgw-tmp.<run nonce>.`.
fn run_temp_prefix() -> &'static str {
    static PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PREFIX.get_or_init(|| format!("{TEMP_PREFIX}{:08x}.", rand::random::<u32>()))
}

/// Rule: a directory the client sees as empty is removable. Temporaries are never
/// listed, so a put killed mid-way (kill -9, crash) leaves one that would make RMDIR
/// fail forever; those of earlier runs are garbage and go first. Returns how many.
fn remove_stale_temps(dir: BorrowedFd<'_>) -> io::Result<usize> {
    let mut stream = sys::Dir::open(dir)?;
    let mut stale = Vec::new();
    stream.each(|name, _| {
        if name.starts_with(TEMP_PREFIX.as_bytes())
            && !name.starts_with(run_temp_prefix().as_bytes())
        {
            stale.push(name.to_vec());
        }
    })?;
    for name in &stale {
        if let Ok(c) = std::ffi::CString::new(name.clone()) {
            sys::unlinkat(dir, &c, 0)?;
        }
    }
    Ok(stale.len())
}

fn mtime_ns(st: &libc::stat) -> u64 {
    (st.st_mtime.max(0) as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(st.st_mtime_nsec.max(0) as u64)
}

/// An object's metadata. Objects that carry no ownership metadata (put there by other
/// tools) show their on-disk mode, owner and group, so an operator can grant access
/// with plain chmod/chown on `backend.root`.
/// (Every HEAD makes one: the defaults are looked up before a key is allocated for
/// them, and the ETag is written without the formatting machinery.)
fn object_meta(key: &str, st: &libc::stat, mut user: UserMeta) -> ObjectMeta {
    if !user.contains_key("mode") {
        user.insert("mode".into(), format!("{:o}", st.st_mode));
    }
    if !user.contains_key("uid") {
        user.insert("uid".into(), st.st_uid.to_string());
    }
    if !user.contains_key("gid") {
        user.insert("gid".into(), st.st_gid.to_string());
    }
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
        etag: etag(m, size),
        user,
    }
}

/// `format!("{mtime_ns:x}-{size:x}")`: what changes with the content's time or size.
fn etag(mtime_ns: u64, size: u64) -> String {
    fn hex(s: &mut String, v: u64) {
        let digits = (64 - v.leading_zeros()).max(1).div_ceil(4);
        for i in (0..digits).rev() {
            let d = ((v >> (i * 4)) & 0xf) as u32;
            s.push(char::from_digit(d, 16).expect("a nibble is a hex digit"));
        }
    }
    let mut s = String::with_capacity(33);
    hex(&mut s, mtime_ns);
    s.push('-');
    hex(&mut s, size);
    s
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

/// Directory entries of an open directory: (name, is_dir), as [`list::each_entry`]
/// gives them.
fn read_dir_fd(dir: BorrowedFd<'_>) -> io::Result<Vec<(String, bool)>> {
    let mut out = Vec::new();
    list::each_entry(dir, |n, d| out.push((n.to_string(), d)))?;
    Ok(out)
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
        Self::open_with(root, false)
    }

    /// `open`, and with `shared` the state several gateways on `root` share (see
    /// [`shared`]): made or read now, durable before any handle is given out.
    pub fn open_with(root: &Path, shared: bool) -> anyhow::Result<FsBackend> {
        Self::open_configured(root, shared, crate::config::FlushMode::Auto)
    }

    /// `open_with`, flushing namespace changes as `flush` says (`backend.fs.flush`,
    /// decided against what the root's file system is: [`flush`]).
    pub fn open_configured(
        root: &Path,
        shared: bool,
        flush: crate::config::FlushMode,
    ) -> anyhow::Result<FsBackend> {
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
        let root_fd = sys::open_dir(&croot)
            .with_context(|| format!("backend.root {}: cannot open", root.display()))?;
        // Probe user xattrs.
        let probe = CString::new(temp_name()).expect("no NUL");
        let pf = openat(
            root_fd.as_fd(),
            &probe,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
            0o600,
        )
        .with_context(|| format!("backend.root {}: cannot create files there", root.display()))?;
        let pf = File::from(pf);
        let mut meta = UserMeta::new();
        meta.insert("probe".into(), "1".into());
        let res = xattr::set(pf.as_fd(), &meta);
        // The same scratch file, once it is known to be usable: the file system's
        // largest file (ext4: 16 TiB - 4 KiB).
        let max_size = res.is_ok().then(|| {
            maxsize::probe(&pf, MAX_END).unwrap_or_else(|| {
                tracing::warn!(
                    "backend.root {}: could not find the largest file size; advertising {MAX_END}",
                    root.display()
                );
                MAX_END
            })
        });
        drop(pf);
        // Best effort: a leftover probe is a temp file, never listed.
        let _ = sys::unlinkat(root_fd.as_fd(), &probe, 0);
        if let Err(e) = res {
            anyhow::bail!(
                "backend.root {}: the filesystem refuses user extended attributes ({e}), which \
                 hold object metadata (user.nfsgw.*); put backend.root on a filesystem that \
                 supports them (ext4, xfs, btrfs; tmpfs from Linux 6.6) or remount it with \
                 `-o user_xattr`",
                root.display()
            );
        }
        let max_size = max_size.unwrap_or(MAX_END);
        let identity = format!("fs:{}", root.display());
        let shared = Self::open_shared(&root, shared)?;
        let flush = flush::Flush::open(&root, root_fd.as_fd(), flush)?;
        // Keep most descriptors for the clients' connections.
        let max = (fd_limit() / 4).clamp(CACHE_SHARDS, CACHE_MAX);
        Ok(FsBackend {
            root,
            root_fd: Arc::new(root_fd),
            identity,
            cache: Arc::new(ObjCache::new(max)),
            meta_reads: Arc::default(),
            dir_scans: Arc::default(),
            shared: shared.map(Arc::new),
            dir_syncs: Arc::default(),
            flush: Arc::new(flush),
            fanout: Arc::new(fanout::Fanout::per_core()),
            max_size,
        })
    }

    fn open_shared(root: &Path, on: bool) -> anyhow::Result<Option<shared::Shared>> {
        if on {
            return shared::Shared::open(root).map(Some);
        }
        if shared::present(root) {
            tracing::warn!(
                "backend.root {} holds a shared handle key ({}/): other gateways serve it with backend.shared = true, or this one did; with it off here, their handles (and any this gateway gave out while shared) are NFS3ERR_BADHANDLE here, and this gateway's are at theirs",
                root.display(),
                shared::DIR
            );
        }
        Ok(None)
    }

    /// Another handle on this backend, for a listing's helper threads (`fanout`):
    /// every field is shared (the caches, counters and descriptors), none copied.
    fn handle(&self) -> FsBackend {
        FsBackend {
            root: self.root.clone(),
            root_fd: self.root_fd.clone(),
            identity: self.identity.clone(),
            cache: self.cache.clone(),
            meta_reads: self.meta_reads.clone(),
            dir_scans: self.dir_scans.clone(),
            shared: self.shared.clone(),
            dir_syncs: self.dir_syncs.clone(),
            flush: self.flush.clone(),
            fanout: self.fanout.clone(),
            max_size: self.max_size,
        }
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
            let at = self.at(&cur);
            let next = match openat(at, &name, libc::O_RDONLY | libc::O_DIRECTORY, 0) {
                Ok(fd) => fd,
                Err(e) if create && e.raw_os_error() == Some(libc::ENOENT) => {
                    match sys::mkdirat(at, &name, 0o755) {
                        Err(e) if e.raw_os_error() != Some(libc::EEXIST) => {
                            return Err(map_io(e, "mkdir", key));
                        }
                        // Made here, or just now by a racing worker whose fsync
                        // may not have run yet (EEXIST): either way the entry is
                        // made durable before a name under it is answered.
                        Ok(()) | Err(_) => self
                            .flush
                            .fsync_dir(at)
                            .map_err(|e| map_io(e, "fsync", key))?,
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

    /// The directory `fd` (from [`Self::walk`]), the root when it is `None`.
    fn at<'a>(&'a self, fd: &'a Option<OwnedFd>) -> BorrowedFd<'a> {
        fd.as_ref().unwrap_or(&self.root_fd).as_fd()
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
        let fd = openat(self.at(&parent), &name, flags, 0).map_err(|e| match e.raw_os_error() {
            Some(libc::EISDIR) => BackendError::NotFound,
            _ => map_io(e, "open", key),
        })?;
        let st = fstat(fd.as_fd()).map_err(|e| map_io(e, "stat", key))?;
        if (sp.dir && !is_dir(&st)) || (!sp.dir && !is_reg(&st)) {
            return Err(BackendError::NotFound);
        }
        Ok((File::from(fd), st))
    }

    /// The user metadata of the object open as `fd`.
    fn read_meta(&self, fd: BorrowedFd<'_>, key: &str) -> BResult<UserMeta> {
        self.meta_reads.fetch_add(1, Ordering::Relaxed);
        xattr::get(fd).map_err(|e| map_io(e, "getxattr", key))
    }

    /// Object metadata reads so far.
    #[cfg(test)]
    fn meta_reads(&self) -> u64 {
        self.meta_reads.load(Ordering::Relaxed)
    }

    /// This thread's system calls into the store since the last take (`sys::calls`),
    /// for the file model's tests of what a call costs.
    #[cfg(test)]
    pub(crate) fn take_calls() -> std::collections::BTreeMap<&'static str, u32> {
        sys::calls::take()
    }

    /// Directory scans by listings so far.
    #[cfg(test)]
    pub(crate) fn dir_scans(&self) -> u64 {
        self.dir_scans.load(Ordering::Relaxed)
    }

    fn meta_of_open(&self, key: &str, f: &File, st: &libc::stat) -> BResult<ObjectMeta> {
        let user = self.read_meta(f.as_fd(), key)?;
        Ok(object_meta(key, st, user))
    }

    /// Opens `key` for the cache: the root's own descriptor for "", directories
    /// read-only, files read-write when `write` (else read-only).
    fn open_entry(&self, key: &str, write: bool) -> BResult<Entry> {
        let (file, st) = if key.is_empty() {
            let f = self
                .root_fd
                .try_clone()
                .map_err(|e| map_io(e, "dup", key))?;
            let st = fstat(f.as_fd()).map_err(|e| map_io(e, "stat", key))?;
            (File::from(f), st)
        } else {
            self.open_obj(key, if write { libc::O_RDWR } else { libc::O_RDONLY })?
        };
        // Judged before the read (`Entry::settled`).
        let settled = list::settled_ctime(ctime_of(&st));
        let user = self.read_meta(file.as_fd(), key)?;
        Ok(Entry {
            file: Arc::new(file),
            dir: is_dir(&st),
            writable: write && is_reg(&st),
            dev: st.st_dev,
            ino: st.st_ino,
            ctime: ctime_of(&st),
            settled,
            user: Arc::new(user),
            validated: Instant::now(),
        })
    }

    /// The stat of what `key`'s path names now, if that is still `e`'s inode, and the
    /// instant the proof dates from: now after a walk from the root, but the parent's
    /// own validation when the name was checked in a cached parent (a parent renamed
    /// away since still finds the child), so trust never stretches past REVALIDATE
    /// from a walk, however deep the key.
    fn still_named(&self, key: &str, e: &Entry) -> BResult<Option<(libc::stat, Instant)>> {
        let now = Instant::now();
        if key.is_empty() {
            return fstat(e.file.as_fd())
                .map(|st| Some((st, now)))
                .map_err(|err| map_io(err, "stat", key));
        }
        let sp = split(key)?;
        let name = cstr(sp.last)?;
        // The parent open in the cache and seen at its key within REVALIDATE (the
        // trust `entry` gives any cached object): the name is checked in it, one
        // `lstatat` where a walk costs an `openat` and a `close` per level.
        let cached = self.validated_parent(key, &sp);
        let walked = match cached {
            Some(_) => None,
            None => match self.walk(&sp.parents, false, key) {
                Ok(p) => p,
                Err(BackendError::NotFound) => return Ok(None),
                Err(err) => return Err(err),
            },
        };
        let (at, since) = match &cached {
            Some((p, validated)) => (p.as_fd(), *validated),
            None => (self.at(&walked), now),
        };
        match lstatat(at, &name) {
            Ok(st) if st.st_dev == e.dev && st.st_ino == e.ino => Ok(Some((st, since))),
            Ok(_) => Ok(None),
            Err(err) if is_gone(&err) => Ok(None),
            Err(err) => Err(map_io(err, "stat", key)),
        }
    }

    /// The open directory holding `key`'s last name when the cache has it validated
    /// (its key seen naming it less than REVALIDATE ago); `None` for a key in the
    /// root (no walk to save) or a parent not cached or due for revalidation. With
    /// it, when the parent was last validated.
    fn validated_parent(&self, key: &str, sp: &Split) -> Option<(Arc<File>, Instant)> {
        if sp.parents.is_empty() {
            return None;
        }
        let body = key.strip_suffix('/').unwrap_or(key);
        let parent = &body[..body.len() - sp.last.len()];
        let p = self.cache.get(parent)?;
        (p.dir && p.validated.elapsed() < REVALIDATE).then_some((p.file, p.validated))
    }

    /// The open object behind `key` and, with `fresh`, its current stat with `user`
    /// current for it. Without `fresh` the entry may be up to REVALIDATE old.
    fn entry(&self, key: &str, fresh: bool) -> BResult<(Entry, Option<libc::stat>)> {
        if let Some(e) = self.cache.get(key) {
            if e.validated.elapsed() < REVALIDATE {
                if !fresh {
                    return Ok((e, None));
                }
                if let Some((e, st)) = self.stat_fresh(key, e)? {
                    return Ok((e, Some(st)));
                }
            } else if let Some((st, since)) = self.still_named(key, &e)? {
                let e = self.refresh(key, e, &st, Some(since))?;
                return Ok((e, Some(st)));
            } else {
                self.cache.remove_if(key, &e.file);
            }
        }
        let epoch = self.cache.epoch();
        let e = self.open_entry(key, false)?;
        let st = fstat(e.file.as_fd()).map_err(|err| map_io(err, "stat", key))?;
        self.cache.insert(key, e.clone(), epoch);
        Ok((e, Some(st)))
    }

    /// Cached entry `e` of `key`, validated less than REVALIDATE ago, with a stat of
    /// its inode taken now (its metadata re-read if its ctime moved, `refresh`);
    /// `None`, and out of the cache, when the inode was unlinked behind our back.
    fn stat_fresh(&self, key: &str, mut e: Entry) -> BResult<Option<(Entry, libc::stat)>> {
        let st = fstat(e.file.as_fd()).map_err(|err| map_io(err, "stat", key))?;
        if st.st_nlink != 0 || key.is_empty() {
            if ctime_of(&st) != e.ctime {
                // Changed since: the metadata may have too.
                e = self.refresh(key, e, &st, None)?;
            }
            return Ok(Some((e, st)));
        }
        self.cache.remove_if(key, &e.file);
        Ok(None)
    }

    /// Cached entry `e` of `key` brought up to `st`, a stat of its inode taken just
    /// now: its metadata re-read unless `e` read it under a settled ctime that `st`
    /// still shows (`Entry::settled`; a ctime only as fine as the clock tick could
    /// otherwise hide a change made in the same tick as the last read), and with
    /// `validated`, marked as named by its key since that instant.
    fn refresh(
        &self,
        key: &str,
        mut e: Entry,
        st: &libc::stat,
        validated: Option<Instant>,
    ) -> BResult<Entry> {
        let ctime = ctime_of(st);
        if !(e.settled && e.ctime == ctime) {
            // Judged before the read (`Entry::settled`).
            e.settled = list::settled_ctime(ctime);
            e.user = Arc::new(self.read_meta(e.file.as_fd(), key)?);
            e.ctime = ctime;
        }
        if let Some(at) = validated {
            e.validated = at;
        }
        let (settled, user, validated) = (e.settled, e.user.clone(), e.validated);
        self.cache.update(key, &e.file, |c| {
            c.ctime = ctime;
            c.settled = settled;
            c.user = user;
            c.validated = validated;
        });
        Ok(e)
    }

    /// A cached entry of regular file `key` open for writing.
    fn writable_entry(&self, key: &str) -> BResult<Entry> {
        let (e, _) = self.entry(key, false)?;
        if e.writable || e.dir {
            return Ok(e);
        }
        let epoch = self.cache.epoch();
        let w = self.open_entry(key, true)?;
        self.cache.insert(key, w.clone(), epoch);
        Ok(w)
    }

    /// Writes a new file's content durably to a temp file in `parent` and moves it
    /// into place as `last` (the directory entry is not synced yet: the caller's
    /// `sync_entries`). Returns its metadata and, for the open-object cache, the
    /// file as an entry: open read-write, with the stat taken after the move (which
    /// moved its ctime) and the metadata it was given.
    ///
    /// System calls (docs/performance.md, "Create and remove system calls"): openat,
    /// the data, one fsetxattr per metadata value (a fresh file has none to read or
    /// remove), with `sync_file` fsync (the inode and its attributes before any name
    /// points at it; not needed for an empty file where the log orders it: `flush`),
    /// one rename — `if_absent` by `RENAME_NOREPLACE`, which moves the name the
    /// descriptor was opened under, so the entry keeps it — and one fstat.
    #[allow(clippy::too_many_arguments)]
    fn install(
        &self,
        parent: BorrowedFd<'_>,
        last: &str,
        key: &str,
        fill: &mut dyn FnMut(&mut File) -> io::Result<()>,
        meta: &UserMeta,
        if_absent: bool,
        sync_file: bool,
    ) -> BResult<(ObjectMeta, Option<Entry>)> {
        let tmp = CString::new(temp_name()).expect("no NUL");
        let fd = openat(
            parent,
            &tmp,
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL,
            0o644,
        )
        .map_err(|e| map_io(e, "create", key))?;
        let mut f = File::from(fd);
        // Best effort: a leftover temp file is never listed.
        let unlink_tmp = || {
            let _ = sys::unlinkat(parent, &tmp, 0);
        };
        let res = (|| -> BResult<Published> {
            fill(&mut f).map_err(|e| map_io(e, "write", key))?;
            xattr::set_fresh(f.as_fd(), meta).map_err(|e| map_io(e, "setxattr", key))?;
            if sync_file {
                self.flush
                    .new_file(f.as_fd())
                    .map_err(|e| map_io(e, "fsync", key))?;
            }
            let name = cstr(last)?;
            if if_absent {
                return publish_new(parent, &tmp, &name).map_err(|e| map_io(e, "link", key));
            }
            sys::renameat(parent, &tmp, parent, &name).map_err(|e| match e.raw_os_error() {
                Some(libc::EISDIR) | Some(libc::ENOTEMPTY) => BackendError::AlreadyExists,
                _ => map_io(e, "rename", key),
            })?;
            Ok(Published::Moved)
        })();
        let how = match res {
            Ok(how) => how,
            Err(e) => {
                unlink_tmp();
                return Err(e);
            }
        };
        let st = fstat(f.as_fd()).map_err(|e| map_io(e, "stat", key))?;
        let user = xattr::sane(meta);
        let f = match how {
            Published::Moved => Some(f),
            // The descriptor's name was unlinked: the entry holds the object open by
            // its own name, since a descriptor's path is what /proc, FUSE and other
            // path-keyed file systems go by. Not the same inode any more (replaced
            // meanwhile by another writer): no entry, `put` forgets the key instead.
            Published::Linked => cstr(last)
                .ok()
                .and_then(|name| openat(parent, &name, libc::O_RDWR, 0).ok())
                .map(File::from)
                .filter(|g| {
                    fstat(g.as_fd()).is_ok_and(|s| s.st_ino == st.st_ino && s.st_dev == st.st_dev)
                }),
        };
        let Some(f) = f else {
            return Ok((object_meta(key, &st, user), None));
        };
        let entry = Entry {
            file: Arc::new(f),
            dir: false,
            writable: true,
            dev: st.st_dev,
            ino: st.st_ino,
            ctime: ctime_of(&st),
            settled: false,
            user: Arc::new(user.clone()),
            validated: Instant::now(),
        };
        Ok((object_meta(key, &st, user), Some(entry)))
    }

    /// Makes our own change of the entries of directory `dir_key` (open as `dir`)
    /// durable: records its new ctime (`note_entries_change`), then fsyncs it — or
    /// waits for a fsync of it another worker started after this change, which
    /// covers it too (`dirsync`: group commit of concurrent creates and removes). On
    /// a journaled file system, a log force shared with changes in every directory
    /// (`flush`).
    fn sync_entries(&self, dir_key: &str, dir: BorrowedFd<'_>, key: &str) -> BResult<()> {
        let st = fstat(dir).map_err(|e| map_io(e, "stat", key))?;
        self.sync_entries_st(dir_key, dir, &st, key)
    }

    /// `sync_entries` with the directory's stat `st`, taken after the change.
    fn sync_entries_st(
        &self,
        dir_key: &str,
        dir: BorrowedFd<'_>,
        st: &libc::stat,
        key: &str,
    ) -> BResult<()> {
        self.note_entries_change(dir_key, st);
        self.flush
            .entries(&self.dir_syncs, dir, st)
            .map_err(|e| map_io(e, "fsync", key))
    }

    /// Our own change of the entries of directory `dir_key` (its stat `st`, taken after
    /// the change) moved its ctime but not its metadata: as `own_change` does for a
    /// file's data, record the new ctime so the next `head` of the directory does not
    /// re-read its xattrs.
    fn note_entries_change(&self, dir_key: &str, st: &libc::stat) {
        let now = ctime_of(st);
        self.cache.update_inode(dir_key, st.st_dev, st.st_ino, |c| {
            if c.ctime < now {
                c.ctime = now;
                c.settled = false;
            }
        });
    }

    /// MKDIR's put (and a copied directory's). System calls (docs/performance.md,
    /// "Mkdir and rmdir"): the parents' walk, mkdirat, one openat of the new directory
    /// in the parent just walked (not a second walk), one fsetxattr per metadata
    /// value, one fstat of the parent (its device decides the new directory's own
    /// fsync, its ctime is our own change: `sync_entries_st`), the flush, one fstat of
    /// the new directory — which stays open in the cache with the metadata it was
    /// given, so the reply's attributes cost one fstat, not a walk and the xattr reads.
    fn put_dir(&self, key: &str, meta: &UserMeta, if_absent: bool) -> BResult<ObjectMeta> {
        let sp = split(key)?;
        let parent = self.walk(&sp.parents, true, key)?;
        let at = self.at(&parent);
        let name = cstr(sp.last)?;
        let epoch = self.cache.epoch();
        let made = match sys::mkdirat(at, &name, 0o755) {
            Ok(()) => true,
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) && !if_absent => false,
            Err(e) => return Err(map_io(e, "mkdir", key)),
        };
        let res = (|| -> BResult<(File, libc::stat)> {
            let f = File::from(
                openat(at, &name, libc::O_RDONLY | libc::O_DIRECTORY, 0)
                    .map_err(|e| map_io(e, "open", key))?,
            );
            xattr::set_fresh(f.as_fd(), meta).map_err(|e| map_io(e, "setxattr", key))?;
            let pst = fstat(at).map_err(|e| map_io(e, "stat", key))?;
            // The new directory's inode before its name, unless the log orders them
            // (`flush`: a directory holds no data blocks outside the log).
            if self.flush.new_empty_file_needs_sync_on(pst.st_dev) {
                self.flush
                    .new_file(f.as_fd())
                    .map_err(|e| map_io(e, "fsync", key))?;
            }
            self.sync_entries_st(list::dir_of(key), at, &pst, key)?;
            let st = fstat(f.as_fd()).map_err(|e| map_io(e, "stat", key))?;
            Ok((f, st))
        })();
        let user = xattr::sane(meta);
        match res {
            // Made here: its metadata is exactly what was just written.
            Ok((f, st)) if made => {
                let entry = Entry {
                    file: Arc::new(f),
                    dir: true,
                    writable: false,
                    dev: st.st_dev,
                    ino: st.st_ino,
                    ctime: ctime_of(&st),
                    settled: false,
                    user: Arc::new(user.clone()),
                    validated: Instant::now(),
                };
                self.cache.replace(key, entry, epoch);
                Ok(object_meta(key, &st, user))
            }
            // An existing directory may hold more metadata than was written: read
            // again next time.
            Ok((_, st)) => {
                self.cache.invalidate(key);
                Ok(object_meta(key, &st, user))
            }
            Err(e) => {
                self.cache.invalidate(key);
                Err(e)
            }
        }
    }

    /// `dir_is_empty` for the fs backend.
    fn holds_nothing(&self, dkey: &str) -> BResult<bool> {
        if !dkey.is_empty() {
            if !dkey.ends_with('/') {
                return Err(BackendError::Permanent(format!(
                    "dir_is_empty {dkey:?}: not a directory key"
                )));
            }
            check_key(dkey)?;
        }
        let comps: Vec<&str> = dkey.split('/').filter(|c| !c.is_empty()).collect();
        let dir = self.walk(&comps, false, dkey)?;
        let mut stream = sys::Dir::open(self.at(&dir)).map_err(|e| map_io(e, "open", dkey))?;
        let any = stream
            .has_entries()
            .map_err(|e| map_io(e, "readdir", dkey))?;
        Ok(!any)
    }

    #[allow(clippy::too_many_arguments)]
    fn visit(
        &self,
        dir: BorrowedFd<'_>,
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
                    let st = fstat(f.as_fd()).map_err(|e| map_io(e, "stat", &key))?;
                    out.push(Item::Obj(self.meta_of_open(&key, &f, &st)?));
                }
                self.visit(sub.as_fd(), &key, "", false, start_after, limit, out)?;
            } else if after {
                let name = cstr(&key[dir_key.len()..])?;
                let f = match openat(dir, &name, libc::O_RDONLY | libc::O_NONBLOCK, 0) {
                    Ok(f) => File::from(f),
                    Err(e) if is_gone(&e) => continue,
                    Err(e) => return Err(map_io(e, "open", &key)),
                };
                let st = fstat(f.as_fd()).map_err(|e| map_io(e, "stat", &key))?;
                if !is_reg(&st) {
                    continue;
                }
                out.push(Item::Obj(self.meta_of_open(&key, &f, &st)?));
            }
        }
        Ok(())
    }

    /// `delete`; `clear_temps`: a directory refused as not empty is read for the
    /// temporaries a killed earlier run left (never listed) and deleted again if
    /// there were any. Only the checked RMDIR path asks for that, after a listing
    /// found the directory empty: `delete_empty_dir` does not (a refused RMDIR of a
    /// big directory would read all of it, and could remove the temporaries of a
    /// put another gateway on a shared root has in flight there).
    fn delete_clearing(&self, key: &str, clear_temps: bool) -> BResult<()> {
        let sp = split(key)?;
        let parent = self.walk(&sp.parents, false, key)?;
        let at = self.at(&parent);
        let name = cstr(sp.last)?;
        // A file is looked at first: unlinkat would remove a symlink or a fifo, which
        // are no objects here. A directory needs no look: `AT_REMOVEDIR` refuses
        // anything else (ENOTDIR, a symlink included: `NotFound`).
        if !sp.dir {
            let st = lstatat(at, &name).map_err(|e| map_io(e, "stat", key))?;
            if !is_reg(&st) {
                return Err(BackendError::NotFound);
            }
        }
        let flags = if sp.dir { libc::AT_REMOVEDIR } else { 0 };
        let mut res = sys::unlinkat(at, &name, flags);
        if clear_temps
            && sp.dir
            && matches!(&res, Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY))
        {
            let fd = sys::openat(
                at,
                &name,
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                0,
            )
            .map_err(|e| map_io(e, "open", key))?;
            if remove_stale_temps(fd.as_fd()).map_err(|e| map_io(e, "clean", key))? > 0 {
                tracing::info!(key, "removed temporaries left by an earlier run");
                res = sys::unlinkat(at, &name, flags);
            }
        }
        if let Err(e) = res {
            return Err(match e.raw_os_error() {
                Some(libc::ENOTEMPTY) | Some(libc::EEXIST) => {
                    BackendError::Permanent(format!("delete {key:?}: directory not empty"))
                }
                _ => map_io(e, "delete", key),
            });
        }
        if sp.dir {
            self.cache.invalidate_prefix(key);
        } else {
            self.cache.invalidate(key);
        }
        self.sync_entries(list::dir_of(key), at, key)
    }
}

struct FsUpload {
    cache: Arc<ObjCache>,
    /// The directory the temp file is in.
    dir: Arc<OwnedFd>,
    tmp: CString,
    last: String,
    key: String,
    meta: UserMeta,
    file: Option<File>,
}

impl FsUpload {
    fn at(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }
}

impl Drop for FsUpload {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            // Best effort: a leftover temp file is never listed.
            let _ = sys::unlinkat(self.at(), &self.tmp, 0);
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
            xattr::set(f.as_fd(), &self.meta).map_err(|e| map_io(e, "setxattr", &key))?;
            f.sync_all().map_err(|e| map_io(e, "fsync", &key))?;
            let st = fstat(f.as_fd()).map_err(|e| map_io(e, "stat", &key))?;
            let name = cstr(&self.last)?;
            sys::renameat(at, &self.tmp, at, &name).map_err(|e| map_io(e, "rename", &key))?;
            self.cache.invalidate(&key);
            sys::fsync(at).map_err(|e| map_io(e, "fsync", &key))?;
            Ok(object_meta(&key, &st, xattr::sane(&self.meta)))
        })();
        if res.is_err() {
            let _ = sys::unlinkat(at, &self.tmp, 0);
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

    fn forget_cached(&self, key: &str) {
        self.cache.invalidate(key);
    }

    fn max_file_size(&self) -> u64 {
        self.max_size
    }

    fn identity(&self) -> String {
        self.identity.clone()
    }

    /// Listed objects are read as `head` reads them.
    fn list_meta_complete(&self) -> bool {
        true
    }

    /// A name is one directory entry, file or directory: `put` with `if_absent`
    /// refuses it (the `lstat` in `put`, then `RENAME_NOREPLACE`).
    fn put_if_absent_refuses_dirs(&self) -> bool {
        true
    }

    /// `unlinkat(AT_REMOVEDIR)` removes only an empty directory (ENOTEMPTY) and only
    /// a directory (ENOTDIR, `NotFound`). A directory holding only temporaries a
    /// killed earlier run left is refused here too: the caller's checked path lists
    /// it (empty: temporaries are never listed) and `delete` clears them.
    fn delete_empty_dir(&self, dkey: &str) -> Option<BResult<()>> {
        if !dkey.ends_with('/') {
            return Some(Err(BackendError::Permanent(format!(
                "delete_empty_dir {dkey:?}: not a directory key"
            ))));
        }
        Some(self.delete_clearing(dkey, false))
    }

    /// One readdir of the directory, reached by one walk of its own components: empty
    /// when it holds nothing but "." and "..". A temporary (never listed) counts as an
    /// entry, so "empty" is never said of a directory whose listing could show
    /// anything; it stops at the first entry, so a big directory costs one
    /// `getdents64`. A listing of one entry (`list`) would also read the directory's
    /// own xattrs for its marker (docs/performance.md, "Mkdir and rmdir, second pass").
    fn dir_is_empty(&self, dkey: &str) -> Option<BResult<bool>> {
        Some(self.holds_nothing(dkey))
    }

    fn each_dir_name(&self, dkey: &str, f: &mut dyn FnMut(&str, bool)) -> Option<BResult<()>> {
        self.window_names(dkey, f).transpose()
    }

    /// A name here is a file or a directory, never both, and a directory is real
    /// (no implicit ones): a name the cache does not hold and `lstat` does not find
    /// has nothing at it or under it. Anything else (a cached key, a symlink, an
    /// error) says "perhaps", and `head` decides as before.
    fn surely_absent(&self, name: &str) -> BResult<bool> {
        if name.is_empty() || name.ends_with('/') || self.cache.get(name).is_some() {
            return Ok(false);
        }
        let Ok(sp) = split(name) else {
            return Ok(false);
        };
        let parent = match self.walk(&sp.parents, false, name) {
            Ok(p) => p,
            Err(BackendError::NotFound) => return Ok(true),
            Err(_) => return Ok(false),
        };
        let Ok(last) = cstr(sp.last) else {
            return Ok(false);
        };
        Ok(matches!(lstatat(self.at(&parent), &last), Err(e) if is_gone(&e)))
    }

    fn head(&self, key: &str) -> BResult<ObjectMeta> {
        // "" is the store root, a real directory here: it carries metadata too.
        if !key.is_empty() {
            check_key(key)?;
        }
        let (e, st) = self.entry(key, true)?;
        let st = st.expect("fresh entry has a stat");
        Ok(object_meta(key, &st, (*e.user).clone()))
    }

    fn get_range(&self, key: &str, offset: u64, dst: &mut [u8]) -> BResult<usize> {
        check_key(key)?;
        let (e, _) = self.entry(key, false)?;
        if e.dir {
            return Ok(0);
        }
        let f = &e.file;
        // No file extends past i64::MAX: reading stops there (end of file).
        let end = max_end(offset, dst.len(), libc::EINVAL)
            .map_err(|e| map_io(e, "read", key))?
            .min(MAX_END);
        let dst = &mut dst[..usize::try_from(end - offset).unwrap_or(usize::MAX)];
        let mut done = 0;
        while done < dst.len() {
            // In range: offset + done < end <= i64::MAX.
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
        if if_absent {
            // A creator puts before it looks (`put_if_absent_refuses_dirs`): a name
            // already taken costs this one probe, not a temp file and its fsync.
            // `RENAME_NOREPLACE` still decides a race.
            let name = cstr(sp.last)?;
            match lstatat(self.at(&parent), &name) {
                Ok(_) => return Err(BackendError::AlreadyExists),
                Err(e) if is_gone(&e) => {}
                Err(e) => return Err(map_io(e, "stat", key)),
            }
        }
        let epoch = self.cache.epoch();
        // An empty new file needs no fsync of its own where the log orders its inode
        // before its name (`flush`); one with data keeps it (data is not in the log).
        let sync_file = !data.is_empty() || self.flush.new_empty_file_needs_sync(self.at(&parent));
        let res = self.install(
            self.at(&parent),
            sp.last,
            key,
            &mut |f| f.write_all(data),
            meta,
            if_absent,
            sync_file,
        );
        let synced = res.and_then(|(m, e)| {
            self.sync_entries(list::dir_of(key), self.at(&parent), key)?;
            Ok((m, e))
        });
        match synced {
            Ok((m, e)) => {
                match e {
                    Some(e) => self.cache.replace(key, e, epoch),
                    None => self.cache.invalidate(key),
                }
                Ok(m)
            }
            Err(e) => {
                self.cache.invalidate(key);
                Err(e)
            }
        }
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
            self.at(&parent),
            &tmp,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
            0o644,
        )
        .map_err(|e| map_io(e, "create", key))?;
        Ok(Box::new(FsUpload {
            cache: self.cache.clone(),
            dir: parent.map_or_else(|| self.root_fd.clone(), Arc::new),
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
            let st = fstat(f.as_fd()).map_err(|e| map_io(e, "stat", dir_key))?;
            out.push(Item::Obj(self.meta_of_open(dir_key, &f, &st)?));
        }
        let mut page = ListPage::default();
        if rolled {
            // One directory, one page: `list` (module docs).
            page.next = self.visit_rolled(
                self.at(&dir),
                dir_key,
                name_prefix,
                start_after,
                max,
                &mut out,
            )?;
        } else {
            self.visit(
                self.at(&dir),
                dir_key,
                name_prefix,
                rolled,
                start_after,
                max + 1,
                &mut out,
            )?;
            if out.len() > max {
                out.truncate(max);
                page.next = out.last().map(|i| i.key().to_string());
            }
        }
        for item in out {
            match item {
                Item::Obj(o) => page.objects.push(o),
                Item::Prefix(p) => page.prefixes.push(p),
            }
        }
        Ok(page)
    }

    /// One readdir of the real directory (entry types from d_type): no per-entry open
    /// or xattr read, so `limit` is not needed.
    fn count_subdirs(&self, dir: &str, _limit: usize) -> BResult<Option<u64>> {
        if !dir.is_empty() {
            check_key(dir)?;
        }
        let comps: Vec<&str> = dir.split('/').filter(|c| !c.is_empty()).collect();
        let fd = match self.walk(&comps, false, dir) {
            Ok(d) => d,
            Err(BackendError::NotFound) => return Ok(Some(0)),
            Err(e) => return Err(e),
        };
        let ents = read_dir_fd(self.at(&fd)).map_err(|e| map_io(e, "readdir", dir))?;
        Ok(Some(ents.iter().filter(|(_, d)| *d).count() as u64))
    }

    fn copy(&self, from: &str, to: &str) -> BResult<()> {
        let (mut src, st) = self.open_obj(from, libc::O_RDONLY)?;
        let meta = xattr::get(src.as_fd()).map_err(|e| map_io(e, "getxattr", from))?;
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
        let res = self
            .install(
                self.at(&parent),
                dsp.last,
                to,
                &mut |f| io::copy(&mut src, f).map(|_| ()),
                &meta,
                false,
                true,
            )
            .and_then(|_| self.sync_entries(list::dir_of(to), self.at(&parent), to));
        self.cache.invalidate(to);
        res
    }

    fn delete(&self, key: &str) -> BResult<()> {
        self.delete_clearing(key, true)
    }

    fn set_meta(&self, key: &str, meta: &UserMeta) -> BResult<()> {
        if !key.is_empty() {
            check_key(key)?;
        }
        // Fresh: an object unlinked behind our back is NotFound, not updated.
        let (e, _) = self.entry(key, true)?;
        let fd = e.file.as_fd();
        if let Err(err) = xattr::set(fd, meta) {
            // Partly applied, maybe: read it all again next time.
            self.cache.invalidate(key);
            return Err(map_io(err, "setxattr", key));
        }
        match fstat(fd) {
            Ok(st) => self.cache.update(key, &e.file, |c| {
                c.ctime = ctime_of(&st);
                c.settled = false;
                c.user = Arc::new(xattr::sane(meta));
            }),
            Err(_) => self.cache.invalidate(key),
        }
        sys::fsync(fd).map_err(|err| map_io(err, "fsync", key))
    }

    fn capacity(&self) -> BResult<(u64, u64, u64, u64)> {
        let sv = sys::fstatvfs(self.root_fd.as_fd()).map_err(|e| map_io(e, "statvfs", ""))?;
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

    fn shared(&self) -> Option<&dyn SharedState> {
        self.shared.as_deref().map(|s| s as &dyn SharedState)
    }

    fn cas(&self) -> Option<&dyn Cas> {
        self.shared.as_deref().map(|s| s as &dyn Cas)
    }

    fn data_root(&self) -> Option<Arc<OwnedFd>> {
        Some(self.root_fd.clone())
    }

    fn data_file(&self, key: &str) -> Option<(Arc<File>, bool)> {
        check_key(key).ok()?;
        let (e, _) = self.entry(key, false).ok()?;
        (!e.dir).then_some((e.file, e.writable))
    }

    // NFSv4.2 operations: `space.rs`.
    fn seek(&self, key: &str, offset: u64, data: bool) -> BResult<Option<u64>> {
        self.seek_impl(key, offset, data)
    }
    fn allocate(&self, key: &str, offset: u64, len: u64) -> BResult<()> {
        self.allocate_impl(key, offset, len)
    }
    fn deallocate(&self, key: &str, offset: u64, len: u64) -> BResult<()> {
        self.deallocate_impl(key, offset, len)
    }
    fn copy_range(&self, src: &str, s: u64, dst: &str, d: u64, count: u64) -> BResult<u64> {
        self.copy_range_impl(src, s, dst, d, count)
    }
    fn clone_range(&self, src: &str, s: u64, dst: &str, d: u64, count: u64) -> BResult<()> {
        self.clone_range_impl(src, s, dst, d, count)
    }
    fn clone_block(&self) -> u64 {
        self.clone_block_impl()
    }
    fn xattr_max_name(&self) -> usize {
        xattr::CLIENT_MAX_NAME
    }
    fn xattr_max_value(&self) -> usize {
        xattr::CLIENT_MAX_VALUE
    }
    fn xattr_get(&self, key: &str, name: &[u8]) -> BResult<Option<Vec<u8>>> {
        self.xattr_get_impl(key, name)
    }
    fn xattr_set(&self, key: &str, name: &[u8], val: &[u8], how: XattrSet) -> BResult<bool> {
        self.xattr_set_impl(key, name, val, how)
    }
    fn xattr_list(&self, key: &str) -> BResult<Vec<Vec<u8>>> {
        self.xattr_list_impl(key)
    }
    fn xattr_remove(&self, key: &str, name: &[u8]) -> BResult<bool> {
        self.xattr_remove_impl(key, name)
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
        let st = lstatat(self.at(&fp), &fname).map_err(|e| map_io(e, "stat", from))?;
        if (fsp.dir && !is_dir(&st)) || (!fsp.dir && !is_reg(&st)) {
            return Err(BackendError::NotFound);
        }
        let tp = self.walk(&tsp.parents, true, to)?;
        let tname = cstr(tsp.last)?;
        if let Err(e) = sys::renameat(self.at(&fp), &fname, self.at(&tp), &tname) {
            return Err(match e.raw_os_error() {
                Some(libc::ENOTEMPTY) | Some(libc::EEXIST) => {
                    BackendError::Permanent(format!("rename {from:?} -> {to:?}: target not empty"))
                }
                _ => map_io(e, "rename", from),
            });
        }
        if fsp.dir {
            self.cache.invalidate_prefix(from);
            self.cache.invalidate_prefix(to);
        } else {
            self.cache.invalidate(from);
            self.cache.invalidate(to);
        }
        // Both directories' entries: one log force on a journaled file system (`flush`).
        self.flush
            .two(self.at(&tp), self.at(&fp))
            .map_err(|e| map_io(e, "fsync", to))
    }
}

impl FsBackend {
    /// Runs `op` on `key` open for writing: the cached descriptor, or where the file
    /// cannot be opened read-write, a write-only one of its own.
    /// Our own data write moved the inode's ctime but not its metadata: record the new
    /// ctime so the next `head` does not re-read the xattrs (concurrent writes to one
    /// file each move it forward). The gateway's own metadata changes update the
    /// entry directly; an outside metadata change racing with a write is caught by
    /// the periodic revalidation (REVALIDATE), as any outside change is.
    fn own_change(&self, key: &str, e: &Entry) {
        if let Ok(st) = fstat(e.file.as_fd()) {
            let now = ctime_of(&st);
            self.cache.update(key, &e.file, |c| {
                if c.ctime < now {
                    c.ctime = now;
                    c.settled = false;
                }
            });
        }
    }

    fn with_writable<T>(&self, key: &str, op: impl Fn(&File) -> io::Result<T>) -> BResult<T> {
        check_key(key)?;
        match self.writable_entry(key) {
            Ok(e) => op(&e.file).inspect(|_| self.own_change(key, &e)),
            Err(BackendError::Permanent(_)) => {
                let (f, _) = self.open_obj(key, libc::O_WRONLY)?;
                op(&f)
            }
            Err(e) => return Err(e),
        }
        .map_err(|e| map_io(e, "write", key))
    }
}

impl RandomWrite for FsBackend {
    fn write_at(&self, key: &str, offset: u64, data: &[u8]) -> BResult<()> {
        let end = max_end(offset, data.len(), libc::EFBIG).map_err(|e| map_io(e, "write", key))?;
        if end > MAX_END {
            return Err(map_io(efbig(), "write", key));
        }
        self.with_writable(key, |f| f.write_all_at(data, offset))
    }

    fn set_size(&self, key: &str, size: u64) -> BResult<()> {
        if size > MAX_END {
            return Err(map_io(efbig(), "truncate", key));
        }
        self.with_writable(key, |f| f.set_len(size))
    }

    fn sync(&self, key: &str) -> BResult<()> {
        check_key(key)?;
        let (e, _) = self.entry(key, false)?;
        self.flush
            .data(e.file.as_fd(), e.dev)
            .map_err(|err| map_io(err, "fsync", key))
    }
}
