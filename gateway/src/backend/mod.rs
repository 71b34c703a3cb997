//! The object-store backend interface and its implementations.
//!
//! A backend is an object store: ranged get, put, multipart put, head, list with
//! prefix and delimiter, copy, delete. Calls block and run only on backend worker
//! threads, never on a reactor. Keys are '/'-separated paths; a key ending in '/' is a
//! directory marker (a zero-byte object that makes an empty directory exist).
//!
//! `RandomWrite` is an optional capability for stores that can update an object in
//! place (a local directory, memory); the file model stages UNSTABLE writes through it
//! and makes them durable with `sync`.

pub mod extents;
pub mod fs;
pub mod gate;
pub mod memory;
pub mod meta_xattr;
pub mod pending;
pub mod s3;
pub mod timed;

use std::collections::BTreeMap;

/// Object user metadata (S3 `x-amz-meta-*` without the prefix): mode, uid, gid,
/// mtime, ... using the names s3fs and rclone use.
pub type UserMeta = BTreeMap<String, String>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    pub key: String,
    pub size: u64,
    /// Last modification, nanoseconds since the epoch.
    pub mtime_ns: u64,
    pub etag: String,
    pub user: UserMeta,
}

/// One page of a listing. With a delimiter, keys sharing a next path component are
/// rolled up into `prefixes` (each ending in the delimiter).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListPage {
    pub objects: Vec<ObjectMeta>,
    pub prefixes: Vec<String>,
    /// Pass as `start_after` to continue; `None` at the end.
    pub next: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendError {
    NotFound,
    /// A conditional put found the key present.
    AlreadyExists,
    /// Out of space or quota.
    NoSpace,
    /// Past the store's largest file (EFBIG, e.g. ext4's 16 TiB): NFS3ERR_FBIG /
    /// NFS4ERR_FBIG, the error RFC 1813 §3.3.7 and RFC 8881 §18.32 give a WRITE
    /// beyond what the server can store (found by `nfsgw-tools fuzz --campaign v4`).
    TooLarge,
    /// The store refuses changes (a read-only file system): NFS3ERR_ROFS.
    ReadOnly,
    /// Worth retrying later (throttling, timeouts, 5xx): NFS3ERR_JUKEBOX.
    Retryable(String),
    /// Will not succeed on retry: NFS3ERR_IO.
    Permanent(String),
    /// Staged, uncommitted writes the store lost (s3: a multipart upload aborted
    /// behind the gateway). The backend has dropped them and moved `lost_writes` on,
    /// which moves the write verifier: a COMMIT answers OK with it and clients resend
    /// (RFC 1813 §3.3.21); anything else answers NFS3ERR_JUKEBOX and is retried.
    Lost(String),
    /// This store cannot do the operation (an NFSv4.2 operation it has no way to
    /// represent, docs/nfs42.md): NFS4ERR_NOTSUPP.
    Unsupported,
}

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BackendError::NotFound => f.write_str("object not found"),
            BackendError::AlreadyExists => f.write_str("object already exists"),
            BackendError::NoSpace => f.write_str("no space left in backend"),
            BackendError::ReadOnly => f.write_str("backend is read-only"),
            BackendError::TooLarge => f.write_str("file too large for the backend"),
            BackendError::Retryable(s) => write!(f, "temporary backend failure: {s}"),
            BackendError::Permanent(s) => write!(f, "backend failure: {s}"),
            BackendError::Lost(s) => write!(f, "uncommitted writes lost by the store: {s}"),
            BackendError::Unsupported => f.write_str("not supported by this store"),
        }
    }
}

impl std::error::Error for BackendError {}

pub type BResult<T> = Result<T, BackendError>;

/// An in-progress multipart upload.
pub trait Upload: Send {
    /// Appends the next part (parts are written in order).
    fn put_part(&mut self, data: &[u8]) -> BResult<()>;
    /// Makes the object visible with all parts, durably.
    fn complete(self: Box<Self>) -> BResult<ObjectMeta>;
    /// Discards the parts.
    fn abort(self: Box<Self>);
}

pub trait Backend: Send + Sync {
    /// Short name for logs ("fs", "memory").
    fn name(&self) -> &'static str;

    fn head(&self, key: &str) -> BResult<ObjectMeta>;

    /// The largest object this store can hold (FSINFO `maxfilesize`): larger sizes are
    /// refused (NOSPC) instead of failing half-way.
    fn max_file_size(&self) -> u64 {
        i64::MAX as u64
    }

    /// How many times this backend dropped staged, uncommitted writes its store lost
    /// (`BackendError::Lost`). Part of the write verifier, so each loss moves it on
    /// whichever path found it (a COMMIT, the idle flusher, a rename).
    fn lost_writes(&self) -> u64 {
        0
    }

    /// Under `[ha]`: every request that changes the store is sent only while `gate`
    /// admits it (docs/ha.md "Lease and clocks"). Stores whose calls the gateway
    /// cannot time out (`fs`) or that cannot be shared (`memory`) ignore it.
    fn gate_writes(&self, _gate: std::sync::Arc<gate::Gate>) {}

    /// Reads from `offset` into `dst`; returns bytes read (short at end of object).
    fn get_range(&self, key: &str, offset: u64, dst: &mut [u8]) -> BResult<usize>;

    /// Creates or replaces an object durably. With `if_absent`, fails with
    /// `AlreadyExists` when the key exists (conditional put).
    fn put(&self, key: &str, data: &[u8], meta: &UserMeta, if_absent: bool) -> BResult<ObjectMeta>;

    fn multipart(&self, key: &str, meta: &UserMeta) -> BResult<Box<dyn Upload>>;

    /// Lists keys starting with `prefix`, in key order, after `start_after`.
    fn list(
        &self,
        prefix: &str,
        delimiter: Option<char>,
        start_after: Option<&str>,
        max: usize,
    ) -> BResult<ListPage>;

    /// Whether the objects `list` returns carry the same metadata a `head` of each
    /// would (the `fs` and `memory` stores; S3 listings carry no user metadata), so a
    /// READDIRPLUS page can take its attributes from the listing.
    fn list_meta_complete(&self) -> bool {
        false
    }

    /// Whether `put` with `if_absent` refuses every name that holds anything — a
    /// directory `name/` too — in the same atomic step that creates (the `fs`
    /// backend: one directory entry per name, `RENAME_NOREPLACE`). A creator may then
    /// put first and look only when refused. False where a file `name` and a
    /// directory `name/` are different keys (S3, memory): there the caller looks first.
    fn put_if_absent_refuses_dirs(&self) -> bool {
        false
    }

    /// Deletes the directory `dkey` (`name/`) only if it is empty, in one atomic step
    /// that refuses anything else: `Some(Err(..))` when it is not empty (`Permanent`)
    /// or not a directory (`NotFound`), and then changes nothing (the `fs` backend:
    /// `unlinkat(AT_REMOVEDIR)`, ENOTEMPTY and ENOTDIR). RMDIR may then delete first
    /// and list only when refused, instead of a listing (and a HEAD per listed child)
    /// to prove emptiness before every delete. Unlike `delete`, a refusal reads
    /// nothing and cleans nothing: a refused RMDIR of a big directory costs one system
    /// call, and another gateway's temporaries in it are left alone.
    /// `None` where a marker is an object like any other (S3, memory): deleting it
    /// would leave the children behind, so the caller lists first.
    fn delete_empty_dir(&self, _dkey: &str) -> Option<BResult<()>> {
        None
    }

    /// Whether directory `dkey` (`name/`, or "" for the root) holds no entry at all,
    /// told by one look at the directory itself: `Some(Ok(true))` only when nothing is
    /// in it — not even a name its listing would hide — so a caller that would have
    /// listed one entry to prove emptiness (`Inner::empty_start`, the reactor's run of
    /// a new directory) may trust it; `Some(Ok(false))` when anything is. The `fs`
    /// backend: one readdir, no read of the directory's own metadata (its marker, which
    /// a listing includes) and no look at each entry.
    /// S3: `Some(Ok(true))` of a directory this gateway just made, whose new name's
    /// probe (or the LOOKUP's listing of `name/` before it) found nothing under it
    /// and below which it made nothing since
    /// (`backend/s3/known.rs`, "Bare directories"), else `None`.
    /// `None` where the store cannot tell so (memory, and S3 otherwise: a marker is
    /// an object like any other and children are keys under it): the caller lists.
    fn dir_is_empty(&self, _dkey: &str) -> Option<BResult<bool>> {
        None
    }

    /// Calls `f` with every name in directory `dkey` (`name/`, or "" for the root) —
    /// each entry's key without `dkey` and without a directory's '/', and whether it
    /// is a directory — in key order, when the store holds them all already and a
    /// look at the directory made during this call shows them current: then
    /// `Some(Ok(()))`. `None` (having called `f` for nothing) where it cannot tell
    /// so without listing: the caller does without (`cache_dirs` renews a listing
    /// past `ATTR_TTL` only when the names are proven the same). The `fs` backend:
    /// the directory's window (`backend/fs/list.rs`), used while the directory's
    /// times are those it was scanned under, and one `fstat`.
    fn each_dir_name(&self, _dkey: &str, _f: &mut dyn FnMut(&str, bool)) -> Option<BResult<()>> {
        None
    }

    /// True when the store can tell in one step that nothing is at `name` (a key
    /// without the trailing '/'): no object `name`, no marker `name/` and no object
    /// under `name/`. False means "perhaps": the caller asks `head` and `list` (the
    /// default). CREATE and LOOKUP of a new name then skip the two failed HEADs and
    /// the listing that an implicit directory needs (`fs` backend: one `lstat`).
    fn surely_absent(&self, _name: &str) -> BResult<bool> {
        Ok(false)
    }

    /// `surely_absent` for a caller that expects `name` to be new (CREATE, MKDIR,
    /// SYMLINK, MKNOD, LINK): the store may spend one request to say so, where the
    /// look-up otherwise costs more (S3: one listing instead of two HEADs and a
    /// listing). False still means "perhaps".
    fn probe_absent(&self, name: &str) -> BResult<bool> {
        self.surely_absent(name)
    }

    /// How many subdirectories directory `dir` ("" or ending in '/') has — its child
    /// prefixes, with or without a marker — or `None` when counting through listings
    /// would look at more than `limit` entries. A missing directory has none. The
    /// default pages through delimiter listings; stores with a cheaper way (the `fs`
    /// backend: one readdir, no per-entry metadata) override it and may ignore `limit`.
    fn count_subdirs(&self, dir: &str, limit: usize) -> BResult<Option<u64>> {
        let (mut seen, mut dirs) = (0usize, 0u64);
        let mut after: Option<String> = None;
        loop {
            let page = self.list(dir, Some('/'), after.as_deref(), 1000)?;
            seen = seen.saturating_add(page.objects.len() + page.prefixes.len());
            if seen > limit {
                return Ok(None);
            }
            dirs = dirs.saturating_add(page.prefixes.iter().filter(|p| *p != dir).count() as u64);
            match page.next {
                Some(n) => after = Some(n),
                None => return Ok(Some(dirs)),
            }
        }
    }

    /// Server-side copy, metadata included.
    fn copy(&self, from: &str, to: &str) -> BResult<()>;

    /// Deletes; deleting a missing key is `NotFound`.
    fn delete(&self, key: &str) -> BResult<()>;

    /// Replaces the user metadata of an existing object (S3: copy onto itself).
    fn set_meta(&self, key: &str, meta: &UserMeta) -> BResult<()>;

    /// Total and free bytes and objects, when the store knows them.
    fn capacity(&self) -> BResult<(u64, u64, u64, u64)>;

    /// In-place updates, if this store supports them.
    fn random_write(&self) -> Option<&dyn RandomWrite> {
        None
    }

    /// The open local file holding regular object `key`'s bytes (staged writes
    /// included) and whether it is open for writing, for a reactor that does the
    /// data I/O through io_uring (`backend.io`); `None` when this store has no such
    /// file.
    fn data_file(&self, _key: &str) -> Option<(std::sync::Arc<std::fs::File>, bool)> {
        None
    }

    /// The directory `data_file`'s keys are paths under (the `fs` backend's root),
    /// for a reactor that checks what a key's path names itself (a `statx` on its
    /// ring revalidating an open file); `None` elsewhere.
    fn data_root(&self) -> Option<std::sync::Arc<std::os::fd::OwnedFd>> {
        None
    }

    /// A hint: `head` will soon be called for each of `keys` (a READDIRPLUS page);
    /// stores with slow metadata may fetch them concurrently now. Errors are ignored.
    fn warm(&self, _keys: &[String]) {}

    /// Another gateway may have changed `key` (a pNFS layout of a data generation this
    /// gateway has not seen: `crate::fence`): forget what is cached of it (s3: the
    /// HEAD and read-ahead; fs: the open object), so the next call reads the store.
    /// Not a store call.
    fn forget_cached(&self, _key: &str) {}

    /// A hint (IO_ADVISE): how `key` will be read. `true` when the store acts on it
    /// (s3: its read-ahead for the key raised or turned off); the default acts on
    /// none. Not a store call; errors cannot happen.
    fn advise(&self, _key: &str, _how: ReadAdvice) -> bool {
        false
    }

    /// For stores several gateways serve at once (s3): state they share so that
    /// every gateway derives and accepts the same file handles.
    fn shared(&self) -> Option<&dyn SharedState> {
        None
    }

    /// Conditional writes of small objects of the gateway's own (`[ha]`: the identity
    /// lease and recovery record, docs/ha.md "Fencing"), where this store has them.
    fn cas(&self) -> Option<&dyn Cas> {
        None
    }

    /// A string that identifies this store (backend name plus its location), used to
    /// derive a stable fsid. Two gateways over the same store give the same string.
    fn identity(&self) -> String {
        self.name().to_string()
    }

    /// Where the next data (`data`) or hole at or after `offset` starts in regular
    /// object `key`, `None` when there is none before the end (RFC 7862 §15.11; every
    /// object has a virtual hole at its end). The default knows no holes: all data.
    fn seek(&self, key: &str, offset: u64, data: bool) -> BResult<Option<u64>> {
        let size = self.head(key)?.size;
        Ok(match (offset < size, data) {
            (false, _) => None,
            (true, true) => Some(offset),
            (true, false) => Some(size),
        })
    }

    /// Reserves `[offset, offset + len)` (RFC 7862 §15.1, ALLOCATE), extending the
    /// object (with zeros) when the range ends past it. Not durable until `sync`.
    fn allocate(&self, _key: &str, _offset: u64, _len: u64) -> BResult<()> {
        Err(BackendError::Unsupported)
    }

    /// Punches a hole (RFC 7862 §15.4, DEALLOCATE): the range reads as zeros after,
    /// the size does not change. Not durable until `sync`.
    fn deallocate(&self, _key: &str, _offset: u64, _len: u64) -> BResult<()> {
        Err(BackendError::Unsupported)
    }

    /// Copies `count` bytes of `src` at `src_off` to `dst` at `dst_off` inside the
    /// store (RFC 7862 §15.2): no byte through the gateway. Ranges are checked by the
    /// caller. Returns the bytes copied; not durable until `sync` where the store has
    /// `RandomWrite`.
    fn copy_range(&self, _src: &str, _s: u64, _dst: &str, _d: u64, _count: u64) -> BResult<u64> {
        Err(BackendError::Unsupported)
    }

    /// `copy_range` sharing the blocks where the store can (RFC 7862 §15.13, CLONE:
    /// all of it or nothing). Ranges and alignment are checked by the caller.
    fn clone_range(&self, _src: &str, _s: u64, _dst: &str, _d: u64, _count: u64) -> BResult<()> {
        Err(BackendError::Unsupported)
    }

    /// The alignment CLONE needs (the `clone_blksize` attribute, RFC 7862 §12.2.1).
    fn clone_block(&self) -> u64 {
        1
    }

    /// The largest extended attribute value this store keeps (0: no xattrs).
    fn xattr_max_value(&self) -> usize {
        0
    }

    /// The longest extended attribute name this store keeps (at most 255 bytes).
    fn xattr_max_name(&self) -> usize {
        255
    }

    /// Extended attribute `name` of `key` (RFC 8276), `None` when it has none.
    fn xattr_get(&self, _key: &str, _name: &[u8]) -> BResult<Option<Vec<u8>>> {
        Err(BackendError::Unsupported)
    }

    /// Sets `name` per `how`: `AlreadyExists` for `Create` over an existing one, `Ok(false)`
    /// for `Replace` of a missing one; `TooLarge` past the store's limits.
    fn xattr_set(&self, _key: &str, _name: &[u8], _val: &[u8], _how: XattrSet) -> BResult<bool> {
        Err(BackendError::Unsupported)
    }

    /// Every extended attribute name of `key`, sorted.
    fn xattr_list(&self, _key: &str) -> BResult<Vec<Vec<u8>>> {
        Err(BackendError::Unsupported)
    }

    /// Removes `name`; `Ok(false)` when there was none.
    fn xattr_remove(&self, _key: &str, _name: &[u8]) -> BResult<bool> {
        Err(BackendError::Unsupported)
    }

    /// Renames an object, or with both keys ending in '/' a whole directory prefix
    /// (every key under `from` moves under `to`, the marker included). An existing
    /// target object is replaced; a directory target must not exist or be empty (its
    /// marker alone). The default is copy + delete per object: correct but costly,
    /// and not atomic; stores that can do better (the `fs` backend: rename(2), atomic
    /// for whole directories) override it.
    fn rename(&self, from: &str, to: &str) -> BResult<()> {
        rename_by_copy(self, from, to)
    }
}

/// `Backend::rename`'s default: copy + delete per object (a directory's every key,
/// gathered first), for stores without a rename of their own.
pub fn rename_by_copy<B: Backend + ?Sized>(b: &B, from: &str, to: &str) -> BResult<()> {
    if from == to {
        return Ok(());
    }
    if from.ends_with('/') != to.ends_with('/') {
        return Err(BackendError::Permanent(format!(
            "rename {from:?} -> {to:?}: mixing a directory and a file"
        )));
    }
    if !from.ends_with('/') {
        b.copy(from, to)?;
        return b.delete(from);
    }
    // Directory: gather every key first (the listing must not see our copies).
    let mut keys = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = b.list(from, None, after.as_deref(), 1000)?;
        keys.extend(page.objects.into_iter().map(|o| o.key));
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    // Nothing under `from`, not even its marker: no such directory (a concurrent
    // rename of it finished first).
    if keys.is_empty() {
        return Err(BackendError::NotFound);
    }
    // An empty target directory is replaced: drop its marker.
    match b.delete(to) {
        Ok(()) | Err(BackendError::NotFound) => {}
        Err(e) => return Err(e),
    }
    for k in &keys {
        b.copy(k, &format!("{to}{}", &k[from.len()..]))?;
    }
    // Children before their markers (reverse key order puts "a/b" before "a/").
    for k in keys.iter().rev() {
        match b.delete(k) {
            Ok(()) | Err(BackendError::NotFound) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// How a file will be read next (IO_ADVISE, RFC 7862 §15.5), as far as a store's
/// read-ahead can use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadAdvice {
    /// No advice (IO_ADVISE4_NORMAL): the store's own guess again.
    Normal,
    /// Read front to back, or soon (SEQUENTIAL, WILLNEED): read ahead from the first
    /// read, deeper than an unadvised reader gets.
    Ahead,
    /// Read at random, or not again (RANDOM, DONTNEED): no read-ahead, each read
    /// fetches what it asks and nothing more.
    NoAhead,
}

/// How an extended attribute is set (RFC 8276 §8.4.1, setxattr_option4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XattrSet {
    /// Only a new one (else `AlreadyExists`).
    Create,
    /// Only an existing one.
    Replace,
    Either,
}

/// Gateway state kept in a shared store, next to the data (under names starting with
/// [`TEMP_PREFIX`], so never listed).
pub trait SharedState: Send + Sync {
    /// The store-wide handle MAC key, created by the first gateway that needs it.
    fn mac_key(&self) -> BResult<[u8; 32]>;
    /// Records `key` as the object named by `fileid` (for handles too short to
    /// carry their key). Idempotent.
    fn put_id(&self, fileid: u64, key: &str) -> BResult<()>;
    /// The key recorded for `fileid`.
    fn get_id(&self, fileid: u64) -> BResult<String>;
}

/// Small objects of the gateway's own (names outside every client's key space) read
/// with a version and written only if that version is still current: what `[ha]`'s
/// fencing stands on (docs/ha.md "Fencing"). Each store states how it keeps the
/// guarantee; `ha::probe` checks it at start.
///
/// Freshness pNFS fencing relies on (`fence.rs`, `fence_epoch.rs`): a `cas_put`
/// that succeeds was made against the current version (so its value was the
/// store's current one when it succeeded), and a `cas_get` begun after a `cas_put`
/// returned answers that value or a later one, except that a read may now and then answer an older
/// value (a lagging replica, a retried request landing elsewhere) as long as a
/// read begun after that one returned does not repeat it: a data server follows a
/// lower value only when two such reads agree (a data server with nothing cached
/// for the file takes its one read). A store that can answer the same stale value
/// twice in a row can let a fenced layout's ids be taken again.
pub trait Cas: Send + Sync {
    /// The object's bytes and version, `None` when it does not exist.
    fn cas_get(&self, name: &str) -> BResult<Option<(Vec<u8>, String)>>;
    /// Writes `data` if the object's version is `expect` (`None`: only if it does not
    /// exist) and returns the new version. A failed condition is `AlreadyExists` and
    /// changes nothing; of two writers expecting one version, at most one succeeds.
    fn cas_put(&self, name: &str, data: &[u8], expect: Option<&str>) -> BResult<String>;
}

/// In-place object updates for stores that can do them.
pub trait RandomWrite: Send + Sync {
    /// Writes `data` at `offset`, extending the object (zero-filled) as needed. Not
    /// durable until `sync`.
    fn write_at(&self, key: &str, offset: u64, data: &[u8]) -> BResult<()>;
    /// Sets the object size (truncate or zero-extend). Not durable until `sync`.
    fn set_size(&self, key: &str, size: u64) -> BResult<()>;
    /// Makes every earlier `write_at`/`set_size` on `key` durable.
    fn sync(&self, key: &str) -> BResult<()>;
}

/// Names starting with this are a backend's own temporary files: never listed, never
/// a valid key component.
pub const TEMP_PREFIX: &str = ".nfsgw-tmp.";

/// Checks that `key` is a valid object key: non-empty '/'-separated components (a
/// trailing '/' marks a directory), none of them empty, ".", "..", containing NUL or
/// starting with [`TEMP_PREFIX`]. Hostile keys are `Permanent` errors.
pub fn check_key(key: &str) -> BResult<()> {
    let body = key.strip_suffix('/').unwrap_or(key);
    if body.is_empty() {
        return Err(BackendError::Permanent(format!("invalid key {key:?}")));
    }
    for c in body.split('/') {
        check_component(c).map_err(|_| BackendError::Permanent(format!("invalid key {key:?}")))?;
    }
    Ok(())
}

/// Checks a listing prefix: "" or a key prefix whose complete components are valid
/// (the last, partial component may be any non-hostile start of a name).
pub fn check_prefix(prefix: &str) -> BResult<()> {
    if prefix.is_empty() {
        return Ok(());
    }
    let bad = || BackendError::Permanent(format!("invalid prefix {prefix:?}"));
    let mut parts: Vec<&str> = prefix.split('/').collect();
    let last = parts.pop().unwrap_or("");
    for c in parts {
        check_component(c).map_err(|_| bad())?;
    }
    if last.contains('\0') || last == "." || last == ".." {
        return Err(bad());
    }
    Ok(())
}

fn check_component(c: &str) -> Result<(), ()> {
    if c.is_empty() || c == "." || c == ".." || c.contains('\0') || c.starts_with(TEMP_PREFIX) {
        return Err(());
    }
    Ok(())
}

/// The behaviour every backend must show, run against each implementation.
#[cfg(test)]
pub(crate) mod conformance {
    use super::*;

    fn meta(pairs: &[(&str, &str)]) -> UserMeta {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn keys(p: &ListPage) -> Vec<&str> {
        p.objects.iter().map(|o| o.key.as_str()).collect()
    }

    fn all_keys(
        b: &dyn Backend,
        prefix: &str,
        delim: Option<char>,
        max: usize,
    ) -> (Vec<String>, Vec<String>) {
        let (mut objs, mut prefixes) = (Vec::new(), Vec::new());
        let mut after: Option<String> = None;
        loop {
            let p = b.list(prefix, delim, after.as_deref(), max).unwrap();
            assert!(p.objects.len() + p.prefixes.len() <= max);
            objs.extend(p.objects.iter().map(|o| o.key.clone()));
            prefixes.extend(p.prefixes.iter().cloned());
            match p.next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        (objs, prefixes)
    }

    /// `Cas`: create only if absent, replace only the current version, a stale
    /// version refused without a change; two names are independent.
    pub(crate) fn cas(c: &dyn Cas) {
        assert_eq!(c.cas_get("ha/x/lease"), Ok(None));
        let v1 = c.cas_put("ha/x/lease", b"one", None).unwrap();
        assert_eq!(
            c.cas_put("ha/x/lease", b"again", None),
            Err(BackendError::AlreadyExists)
        );
        assert_eq!(
            c.cas_get("ha/x/lease"),
            Ok(Some((b"one".to_vec(), v1.clone())))
        );
        let v2 = c.cas_put("ha/x/lease", b"two", Some(&v1)).unwrap();
        assert_ne!(v1, v2);
        assert_eq!(
            c.cas_put("ha/x/lease", b"stale", Some(&v1)),
            Err(BackendError::AlreadyExists)
        );
        let mut v = v2;
        for i in 0..5 {
            v = c
                .cas_put("ha/x/lease", format!("n{i}").as_bytes(), Some(&v))
                .unwrap();
        }
        assert_eq!(
            c.cas_get("ha/x/lease"),
            Ok(Some((b"n4".to_vec(), v.clone())))
        );
        // Old versions pruned or not, a create still finds the object present.
        assert_eq!(
            c.cas_put("ha/x/lease", b"x", None),
            Err(BackendError::AlreadyExists)
        );
        assert_eq!(c.cas_get("ha/x/record"), Ok(None));
        assert!(c.cas_put("ha/x/record", b"r", Some(&v)).is_err());
        c.cas_put("ha/x/record", b"r", None).unwrap();
    }

    pub(crate) fn run(b: &dyn Backend) {
        // put / head / get_range
        let m = meta(&[("mode", "100644"), ("uid", "7")]);
        let o = b.put("a/b/file", b"hello world", &m, false).unwrap();
        assert_eq!(o.size, 11);
        let h = b.head("a/b/file").unwrap();
        assert_eq!(h.size, 11);
        // Stores may add defaults (fs shows on-disk ownership) but keep what was put.
        assert!(
            m.iter().all(|(k, v)| h.user.get(k) == Some(v)),
            "{:?}",
            h.user
        );
        assert!(h.mtime_ns > 0);
        assert!(!h.etag.is_empty());
        let mut buf = [0u8; 5];
        assert_eq!(b.get_range("a/b/file", 6, &mut buf).unwrap(), 5);
        assert_eq!(&buf, b"world");
        assert_eq!(b.get_range("a/b/file", 9, &mut buf).unwrap(), 2);
        assert_eq!(b.get_range("a/b/file", 100, &mut buf).unwrap(), 0);
        assert_eq!(b.head("a/b/nope"), Err(BackendError::NotFound));
        assert_eq!(b.head("a/b/file/"), Err(BackendError::NotFound));

        // directory markers
        b.put("d/", b"", &meta(&[("mode", "40755")]), false)
            .unwrap();
        let h = b.head("d/").unwrap();
        assert_eq!(h.size, 0);
        assert_eq!(h.user.get("mode").map(String::as_str), Some("40755"));
        assert_eq!(
            b.put("d/", b"", &UserMeta::new(), true),
            Err(BackendError::AlreadyExists)
        );

        // conditional put
        assert_eq!(
            b.put("a/b/file", b"x", &UserMeta::new(), true).unwrap_err(),
            BackendError::AlreadyExists
        );
        assert_eq!(b.head("a/b/file").unwrap().size, 11);
        b.put("a/b/new", b"x", &UserMeta::new(), true).unwrap();
        b.put("a/b/new", b"yy", &UserMeta::new(), false).unwrap();
        assert_eq!(b.head("a/b/new").unwrap().size, 2);

        // listing with delimiter and pagination
        for i in 0..25 {
            b.put(&format!("l/f{i:02}"), b"", &UserMeta::new(), false)
                .unwrap();
        }
        b.put("l/sub/x", b"1", &UserMeta::new(), false).unwrap();
        b.put("l/sub/y/z", b"1", &UserMeta::new(), false).unwrap();
        b.put("l/sub-", b"1", &UserMeta::new(), false).unwrap();
        let (objs, prefixes) = all_keys(b, "l/", Some('/'), 7);
        let mut want: Vec<String> = (0..25).map(|i| format!("l/f{i:02}")).collect();
        want.push("l/sub-".into());
        let objs: Vec<String> = objs.into_iter().filter(|k| k != "l/").collect();
        assert_eq!(objs, want);
        assert_eq!(prefixes, vec!["l/sub/".to_string()]);
        let p = b.list("l/sub/", Some('/'), None, 100).unwrap();
        let ks: Vec<&str> = keys(&p).into_iter().filter(|k| *k != "l/sub/").collect();
        assert_eq!(ks, vec!["l/sub/x"]);
        assert_eq!(p.prefixes, vec!["l/sub/y/".to_string()]);
        // recursive, in key order, paginated
        let (objs, prefixes) = all_keys(b, "l/s", None, 2);
        assert!(prefixes.is_empty());
        let objs: Vec<String> = objs.into_iter().filter(|k| !k.ends_with('/')).collect();
        assert_eq!(objs, vec!["l/sub-", "l/sub/x", "l/sub/y/z"]);
        let (all, _) = all_keys(b, "", None, 3);
        let mut sorted = all.clone();
        sorted.sort();
        assert_eq!(all, sorted);
        assert!(all.contains(&"l/sub/y/z".to_string()));
        assert_eq!(
            b.list("zz/", Some('/'), None, 10).unwrap(),
            ListPage::default()
        );
        assert_eq!(b.count_subdirs("l/", 1000), Ok(Some(1)));
        assert_eq!(b.count_subdirs("l/sub/", 1000), Ok(Some(1)));
        assert_eq!(b.count_subdirs("l/sub/y/", 1000), Ok(Some(0)));
        assert_eq!(b.count_subdirs("zz/", 1000), Ok(Some(0)));
        assert!(matches!(b.count_subdirs("l/", 5), Ok(None | Some(1))));
        let p = b.list("l/f0", Some('/'), Some("l/f05"), 100).unwrap();
        assert_eq!(keys(&p), vec!["l/f06", "l/f07", "l/f08", "l/f09"]);

        // copy, set_meta, delete
        b.copy("a/b/file", "c/copied").unwrap();
        let h = b.head("c/copied").unwrap();
        assert_eq!(h.size, 11);
        assert!(m.iter().all(|(k, v)| h.user.get(k) == Some(v)));
        let m2 = meta(&[("mode", "100600")]);
        b.set_meta("c/copied", &m2).unwrap();
        let u2 = b.head("c/copied").unwrap().user;
        assert!(m2.iter().all(|(k, v)| u2.get(k) == Some(v)));
        assert_eq!(b.set_meta("c/none", &m2), Err(BackendError::NotFound));
        b.delete("c/copied").unwrap();
        assert_eq!(b.delete("c/copied"), Err(BackendError::NotFound));
        assert_eq!(b.head("c/copied"), Err(BackendError::NotFound));

        // multipart
        let mut up = b.multipart("mp/big", &m).unwrap();
        up.put_part(b"part1-").unwrap();
        up.put_part(b"part2").unwrap();
        assert_eq!(b.head("mp/big"), Err(BackendError::NotFound));
        let o = up.complete().unwrap();
        assert_eq!(o.size, 11);
        let mut buf = [0u8; 11];
        b.get_range("mp/big", 0, &mut buf).unwrap();
        assert_eq!(&buf, b"part1-part2");
        let mut up = b.multipart("mp/aborted", &m).unwrap();
        up.put_part(b"x").unwrap();
        up.abort();
        assert_eq!(b.head("mp/aborted"), Err(BackendError::NotFound));
        let p = b.list("mp/", None, None, 100).unwrap();
        assert!(keys(&p).iter().all(|k| !k.contains(TEMP_PREFIX)));

        // rename: file, then a whole directory
        b.rename("a/b/new", "a/b/renamed").unwrap();
        assert_eq!(b.head("a/b/new"), Err(BackendError::NotFound));
        assert_eq!(b.head("a/b/renamed").unwrap().size, 2);
        b.put("r/", b"", &UserMeta::new(), false).unwrap();
        b.put("r/one", b"1", &UserMeta::new(), false).unwrap();
        b.put("r/s/", b"", &UserMeta::new(), false).unwrap();
        b.put("r/s/two", b"22", &UserMeta::new(), false).unwrap();
        b.rename("r/", "q/r2/").unwrap();
        assert_eq!(b.head("r/one"), Err(BackendError::NotFound));
        assert_eq!(b.head("q/r2/one").unwrap().size, 1);
        assert_eq!(b.head("q/r2/s/two").unwrap().size, 2);
        assert!(b.head("q/r2/s/").is_ok());

        // random writes
        if let Some(rw) = b.random_write() {
            b.put("w/f", b"abc", &UserMeta::new(), false).unwrap();
            rw.write_at("w/f", 5, b"xy").unwrap();
            rw.sync("w/f").unwrap();
            let mut buf = [9u8; 7];
            assert_eq!(b.get_range("w/f", 0, &mut buf).unwrap(), 7);
            assert_eq!(&buf, b"abc\0\0xy");
            rw.set_size("w/f", 2).unwrap();
            assert_eq!(b.head("w/f").unwrap().size, 2);
            rw.set_size("w/f", 10).unwrap();
            assert_eq!(b.head("w/f").unwrap().size, 10);
            assert_eq!(rw.write_at("w/none", 0, b"x"), Err(BackendError::NotFound));
        }

        // hostile keys
        for bad in [
            "",
            "/",
            "/abs",
            "a//b",
            "a/./b",
            "a/../../etc/passwd",
            "..",
            "../x",
            "a/\0b",
            ".nfsgw-tmp.x",
            "d/.nfsgw-tmp.1",
        ] {
            // "" is the store root: it has metadata but is not an object to write.
            assert!(
                bad.is_empty() || matches!(b.head(bad), Err(BackendError::Permanent(_))),
                "{bad:?}"
            );
            assert!(
                matches!(
                    b.put(bad, b"x", &UserMeta::new(), false),
                    Err(BackendError::Permanent(_))
                ),
                "{bad:?}"
            );
            assert!(
                matches!(b.delete(bad), Err(BackendError::Permanent(_))),
                "{bad:?}"
            );
        }
        assert!(b.list("../", None, None, 10).is_err());

        let (t, f, _, _) = b.capacity().unwrap();
        assert!(t >= f);
    }
}
