//! The file model over a backend.
//!
//! Mapping: a file is the object with the same key (export prefix + path); a
//! directory is a key prefix "dir/" with a zero-byte marker object (the `fs` backend
//! makes it a real directory); a directory that has children but no marker (S3 written
//! by other tools) exists too. The export root is the export prefix ("" = the whole
//! store). A symlink is an object with mode S_IFLNK whose content is the target.
//! Attribute metadata: see [`attrs`]. Handles and the handle table: see [`handles`].
//!
//! Names are raw bytes on the wire but keys are UTF-8: a non-UTF-8 name cannot be
//! created (`Inval`) and is never found (`NoEnt`). Names containing '/' or NUL, and
//! names starting with ".nfsgw-tmp." (backend temporaries) or ".nfsgw-orphan." (open
//! files removed, kept until their last close: see [`orphans`]) or ".nfsgw-inode."
//! (files with more than one name: see [`links`]) are `Inval`; names
//! longer than 255 bytes are `NameTooLong`.
//!
//! Writes go through the backend's `RandomWrite`: UNSTABLE writes are staged in the
//! object (the key is remembered as dirty) and made durable by COMMIT; DATA_SYNC and
//! FILE_SYNC writes sync before returning and report FILE_SYNC. A backend without
//! `RandomWrite` gets `NotSupp` for writes for now.
//!
//! Syncs in flight: a COMMIT (or stable WRITE) takes its key out of the dirty set
//! when its sync starts and counts the key in `syncing` until the sync ends. A second
//! COMMIT that finds the key not dirty but still syncing syncs again itself (an
//! `fdatasync` covers every write made before it was called): answering it at once
//! would promise durability the first sync has not delivered yet. See `begin_sync`.
//!
//! Readdir: streamed a page at a time, cookies that survive changes to the
//! directory; see [`listing`].
//!
//! Special files (MKNOD, RFC 1813 §3.3.11, RFC 8881 §18.4): empty objects whose stored
//! mode carries the fifo/socket/device type, and for devices an "rdev" (see
//! [`attrs`]), on every backend. They are renamed, removed and handled like files; READ,
//! WRITE and a size change on them are `Inval` (knfsd: nfsd_mode_check's
//! nfserr_wrong_type, which NFSv3 reports as NFS3ERR_INVAL).
//!
//! Directory link counts are 2 + subdirectories, counted once and cached (see
//! [`nlink`]).
//!
//! Change attribute (RFC 8881 §5.8.1.4, `Attr::change`): ctime in nanoseconds since
//! the epoch (0 for a ctime before 1970), kept moving forward per file (see
//! [`change`]). Every change the model makes moves ctime: a data write or size change
//! shows the object's new modification time (nanosecond clocks on `fs` and `memory`),
//! SETATTR stores ctime = now, and a namespace change in a directory moves its ctime
//! to the change time, strictly later than the last one (see `dirs`). On s3 the object
//! time has whole seconds and the ETag picks the sub-second part, so two rewrites
//! within one second give raw values in no particular order: `change` turns every new
//! raw value into a later answer. Monotonic within one run of the gateway only: after
//! a restart (or on another gateway on the same bucket) values start again from ctime,
//! so the gateway does not claim NFS4_CHANGE_TYPE_IS_MONOTONIC_INCR.
//!
//! Locks (table, dirty set, caches) are held only for in-memory work, never across
//! backend I/O.

mod attrs;
mod change;
mod dirs;
mod gone;
mod handles;
mod links;
mod listing;
mod mac_key;
mod nlink;
mod observe;
mod orphans;
mod v42;

/// Export and file id of a handle, unauthenticated (see `handles::peek`).
#[inline]
pub(super) fn peek_handle(fh: &[u8]) -> Option<(u16, u64)> {
    handles::peek(fh)
}

use super::*;
use crate::backend::{BackendError, ListPage, ObjectMeta, RandomWrite, UserMeta, TEMP_PREFIX};
use attrs::*;
use dirs::DirChanges;
use handles::HandleTable;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;

const CLEAN_CACHE: usize = 65536;
/// Directories whose change state is tracked (see `dirs`).
const DIR_CHANGES: usize = 65536;
/// Files whose change attribute is kept moving forward (see `change`).
const CHANGE_GUARD: usize = 65536;
/// Directories whose subdirectory count is cached (see `nlink`).
const NLINK_CACHE: usize = 65536;
/// Most entries a listing store looks at to count a directory's subdirectories.
const NLINK_COUNT_LIMIT: usize = 10_000;
/// Largest file size and write end (FSINFO maxfilesize): sizes and offsets are u64 on
/// the wire, but backends and clients work in signed 64-bit offsets.
pub(super) const MAX_FILE_SIZE: u64 = i64::MAX as u64;

pub(super) struct Inner {
    backend: Arc<dyn Backend>,
    /// Export id -> key prefix. A SIGHUP reload adds exports (`add_exports`); a
    /// removed export keeps its entry (the server's export table refuses its calls).
    /// Prefixes are interned as `&'static str` so a lookup borrows nothing from the
    /// swapped map; they are bounded by the distinct prefixes ever configured.
    exports: arc_swap::ArcSwap<HashMap<u16, &'static str>>,
    interned: Mutex<HashSet<&'static str>>,
    table: HandleTable,
    mac_key: [u8; 32],
    /// The key version-1 handles are checked with: `mac_key` on a store of this gateway
    /// alone; on a shared one, the key of `state.dir` from before `backend.shared` was
    /// switched on, if any (`mac_key::earlier_local`), so the handles this gateway gave
    /// out then still resolve here.
    v1_key: Option<[u8; 32]>,
    /// writeverf3 (read as big-endian bytes): random per run, moved on by every
    /// failed sync (`reset_write_verifier`).
    wverf: std::sync::atomic::AtomicU64,
    fsid: u64,
    start_ns: u64,
    /// Keys with UNSTABLE writes not yet synced.
    dirty: Mutex<HashSet<String>>,
    /// Keys with a sync in flight, and how many (taken under `dirty`'s lock, after
    /// it: `begin_sync`).
    syncing: Mutex<HashMap<String, u32>>,
    /// Regular files known to carry no explicit mtime/ctime: writes skip the HEAD.
    clean: Mutex<HashSet<String>>,
    /// Per-directory change counters and times (by directory fileid).
    dir_changes: DirChanges,
    /// Per-directory subdirectory counts (by directory fileid).
    subdirs: nlink::SubdirCounts,
    /// Last change attributes answered (by fileid).
    changes: change::ChangeGuard,
    /// Recently listed pages, to resume listings from their cookies (`listing`).
    cursors: listing::Cursors,
    memo: listing::PageMemo,
    /// Shared store (s3, `fs` with `backend.shared`): version-2 handles, MAC key from
    /// the store.
    shared: bool,
    /// File ids whose key this gateway recorded in the store's id index.
    indexed: Mutex<HashSet<u64>>,
    /// Keys removed here a moment ago: listings confirm them (`gone`).
    gone: gone::RecentlyGone,
    /// Told which file ids each namespace change touches (`observe`).
    observer: observe::Observer,
    /// Removed files kept while NFSv4 opens hold them (`orphans`).
    orphans: orphans::Orphans,
    /// Held while a hard link count changes (`links`): LINK and the REMOVE or
    /// RENAME of a link name read, change and store it.
    links: Mutex<()>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// A handle's bytes (at most `FH_MAX`: a version-1 handle, or a shared one whose
/// suffix `handles::SUFFIX_MAX` bounds) as a `FileHandle`.
fn handle_of(b: &[u8]) -> FileHandle {
    let mut fh = FileHandle {
        len: b.len() as u8,
        bytes: [0; FH_MAX],
    };
    fh.bytes[..b.len()].copy_from_slice(b);
    fh
}

fn is_dir_key(key: &str) -> bool {
    key.is_empty() || key.ends_with('/')
}

/// Checks a name for creation. "." and ".." are left to the caller.
fn check_name(name: &[u8]) -> FsResult<&str> {
    if name.len() > 255 {
        return Err(Status::NameTooLong);
    }
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(Status::Inval);
    }
    let s = std::str::from_utf8(name).map_err(|_| Status::Inval)?;
    if s.starts_with(TEMP_PREFIX)
        || s.starts_with(orphans::ORPHAN_PREFIX)
        || s.starts_with(links::INODE_PREFIX)
    {
        return Err(Status::Inval);
    }
    Ok(s)
}

/// Untrusted attribute values (sattr3 from the wire): a size past the largest file is
/// FBIG; a time whose nanoseconds are not below 10^9 is not a time (INVAL) and would
/// be stored as a different one.
fn check_set(set: &SetAttr) -> FsResult<()> {
    if set.size.is_some_and(|s| s > MAX_FILE_SIZE) {
        return Err(Status::FBig);
    }
    for t in [set.atime, set.mtime] {
        if let SetTime::Client(t) = t {
            // i64::MIN seconds has no decimal negation (see `attrs::fmt_time`).
            if t.nsec >= 1_000_000_000 || t.sec == i64::MIN {
                return Err(Status::Inval);
            }
        }
    }
    Ok(())
}

fn verf_hex(v: &[u8; 8]) -> String {
    v.iter().map(|b| format!("{b:02x}")).collect()
}

/// What a name in a directory is.
enum Found {
    File(ObjectMeta),
    /// A directory, with its marker's (or a synthetic) metadata.
    Dir(ObjectMeta),
}

impl Inner {
    pub fn open(
        backend: Arc<dyn Backend>,
        state_dir: &Path,
        exports: &[ExportRoot],
        handle_cache_entries: usize,
    ) -> anyhow::Result<Inner> {
        use anyhow::Context;
        std::fs::create_dir_all(state_dir)
            .with_context(|| format!("state.dir {}: cannot create", state_dir.display()))?;
        let shared = backend.shared().is_some();
        let mac_key = mac_key::obtain(&backend, state_dir)?;
        let v1_key = match shared {
            false => Some(mac_key),
            true => mac_key::earlier_local(&backend, state_dir),
        };
        let table = HandleTable::open_with(state_dir, handle_cache_entries, u64::MAX)?;
        let id = blake3::hash(backend.identity().as_bytes());
        let fsid = u64::from_le_bytes(id.as_bytes()[..8].try_into().expect("8 bytes"));
        let inner = Inner {
            backend,
            exports: arc_swap::ArcSwap::from_pointee(HashMap::new()),
            interned: Mutex::new(HashSet::new()),
            table,
            mac_key,
            v1_key,
            wverf: std::sync::atomic::AtomicU64::new(rand::random()),
            fsid,
            start_ns: now_ns(),
            dirty: Mutex::new(HashSet::new()),
            syncing: Mutex::new(HashMap::new()),
            clean: Mutex::new(HashSet::new()),
            dir_changes: DirChanges::new(DIR_CHANGES),
            subdirs: nlink::SubdirCounts::new(NLINK_CACHE),
            changes: change::ChangeGuard::new(CHANGE_GUARD),
            cursors: listing::Cursors::default(),
            memo: listing::PageMemo::default(),
            shared,
            indexed: Mutex::new(HashSet::new()),
            gone: Default::default(),
            observer: Default::default(),
            orphans: orphans::Orphans::new(state_dir),
            links: Mutex::new(()),
        };
        inner.add_exports(exports)?;
        inner.adopt_orphans()?;
        Ok(inner)
    }

    /// Adds (or re-points) export roots: at open and on a SIGHUP reload. An export
    /// root that is not in the store yet is created as a directory.
    pub fn add_exports(&self, exports: &[ExportRoot]) -> anyhow::Result<()> {
        for e in exports {
            anyhow::ensure!(
                e.prefix.is_empty() || e.prefix.ends_with('/'),
                "export prefix {:?} must end with '/'",
                e.prefix
            );
        }
        let mut map = HashMap::clone(&self.exports.load());
        {
            let mut interned = lock(&self.interned);
            for e in exports {
                let p = match interned.get(e.prefix.as_str()) {
                    Some(p) => *p,
                    None => {
                        let p: &'static str = Box::leak(e.prefix.clone().into_boxed_str());
                        interned.insert(p);
                        p
                    }
                };
                map.insert(e.id, p);
            }
        }
        self.exports.store(Arc::new(map));
        for e in exports {
            if e.prefix.is_empty() {
                continue;
            }
            match self.dir_meta(&e.prefix) {
                Ok(Some(_)) => {}
                Ok(None) => {
                    let mut m = UserMeta::new();
                    m.insert(M_MODE.into(), fmt_mode(S_IFDIR | 0o755));
                    match self.backend.put(&e.prefix, b"", &m, true) {
                        Ok(_) | Err(BackendError::AlreadyExists) => {}
                        Err(err) => {
                            tracing::warn!(prefix = %e.prefix, error = %err, "cannot create the export root")
                        }
                    }
                }
                Err(st) => {
                    tracing::warn!(prefix = %e.prefix, status = ?st, "cannot check the export root")
                }
            }
        }
        Ok(())
    }

    fn berr(&self, e: BackendError, key: &str) -> Status {
        match e {
            BackendError::NotFound => Status::NoEnt,
            BackendError::AlreadyExists => Status::Exist,
            BackendError::NoSpace => Status::NoSpc,
            BackendError::ReadOnly => Status::Rofs,
            BackendError::TooLarge => Status::FBig,
            BackendError::Unsupported => Status::NotSupp,
            BackendError::Retryable(msg) => {
                tracing::debug!(key, msg, "backend busy");
                Status::Jukebox
            }
            // The lost writes are dropped and the verifier moved (`Backend::lost_writes`):
            // the call itself is retried over what the store holds.
            BackendError::Lost(msg) => {
                tracing::debug!(key, msg, "staged writes lost; call retried");
                Status::Jukebox
            }
            BackendError::Permanent(msg) => {
                tracing::warn!(key, msg, "backend error");
                Status::Io
            }
        }
    }

    /// Like `berr` for operations on a node itself: a vanished object is `Stale`.
    fn nerr(&self, e: BackendError, key: &str) -> Status {
        match e {
            BackendError::NotFound => Status::Stale,
            e => self.berr(e, key),
        }
    }

    fn prefix(&self, export: u16) -> Option<&'static str> {
        self.exports.load().get(&export).copied()
    }

    fn synthetic_dir(&self, key: &str) -> ObjectMeta {
        ObjectMeta {
            key: key.to_string(),
            size: 0,
            mtime_ns: self.start_ns,
            etag: String::new(),
            user: UserMeta::new(),
        }
    }

    /// The marker (or a synthetic one) of directory `key` ("" or ending in '/').
    fn dir_meta(&self, key: &str) -> FsResult<Option<ObjectMeta>> {
        if key.is_empty() {
            // Stores whose root is an object (fs) keep its metadata; others synthesize.
            return Ok(Some(
                self.backend
                    .head(key)
                    .unwrap_or_else(|_| self.synthetic_dir(key)),
            ));
        }
        match self.backend.head(key) {
            Ok(m) => Ok(Some(m)),
            // No marker: a directory only while an object under it exists (made by
            // another S3 tool), confirmed by HEAD, not by a listing alone (see
            // `has_children`: a just-removed directory must not linger as implicit).
            Err(BackendError::NotFound) => {
                Ok(self.object_under(key)?.then(|| self.synthetic_dir(key)))
            }
            Err(e) => Err(self.berr(e, key)),
        }
    }

    fn file_meta(&self, key: &str) -> FsResult<Option<ObjectMeta>> {
        match self.backend.head(key) {
            Ok(m) => Ok(Some(m)),
            Err(BackendError::NotFound) => Ok(None),
            Err(e) => Err(self.berr(e, key)),
        }
    }

    fn meta(&self, key: &str) -> FsResult<Option<ObjectMeta>> {
        if is_dir_key(key) {
            self.dir_meta(key)
        } else {
            self.file_meta(key)
        }
    }

    /// What `name` (a child key without the trailing '/') is, if anything. A new name
    /// (CREATE, or the LOOKUP before it) costs the store's one probe when it has one
    /// (`Backend::surely_absent`), not two HEADs and a listing.
    fn find(&self, child: &str) -> FsResult<Option<Found>> {
        if self
            .backend
            .surely_absent(child)
            .map_err(|e| self.berr(e, child))?
        {
            return Ok(None);
        }
        self.look(child)
    }

    /// `find` for a name the caller expects to be new (CREATE, MKDIR, SYMLINK,
    /// MKNOD, LINK): the store's probe for a new name (`Backend::probe_absent`: on
    /// S3 one listing, where `find` costs two HEADs and a listing), then `find`'s
    /// look when it says "perhaps".
    fn find_new(&self, child: &str) -> FsResult<Option<Found>> {
        if self
            .backend
            .probe_absent(child)
            .map_err(|e| self.berr(e, child))?
        {
            return Ok(None);
        }
        self.look(child)
    }

    /// The file at `child`, else the directory: HEADs (cached), and a listing for a
    /// directory without a marker.
    fn look(&self, child: &str) -> FsResult<Option<Found>> {
        if let Some(m) = self.file_meta(child)? {
            return Ok(Some(Found::File(m)));
        }
        Ok(self.dir_meta(&format!("{child}/"))?.map(Found::Dir))
    }

    fn node(&self, export: u16, key: &str) -> Node {
        Node {
            export,
            fileid: self.file_id(key),
            key: key.to_string(),
        }
    }

    /// The file id of `key`: for a hard-linked file's inode the id its name carries
    /// (`links`), else the table's, assigned at first sight.
    fn file_id(&self, key: &str) -> u64 {
        match links::inode_id(key) {
            Some(id) => self.adopt_inode(key, id),
            None => self.table.assign(key).0,
        }
    }

    fn parent_key(&self, export: u16, key: &str) -> String {
        let root = self.prefix(export).unwrap_or("");
        if key == root || key.is_empty() {
            return key.to_string();
        }
        let body = key.strip_suffix('/').unwrap_or(key);
        let p = match body.rfind('/') {
            Some(i) => body[..=i].to_string(),
            None => String::new(),
        };
        if p.len() < root.len() {
            root.to_string()
        } else {
            p
        }
    }

    /// A namespace change in a directory: its cookie verifier, mtime and ctime move.
    fn bump(&self, dir_fileid: u64) {
        self.dir_changes.bump(dir_fileid, now_ns());
    }

    fn bump_key(&self, dir_key: &str) {
        let (id, _) = self.table.assign(dir_key);
        self.bump(id);
    }

    /// The cookie verifier of a directory (RFC 1813 §3.3.16, RFC 8881 §18.23): fixed per
    /// directory and handle key, so it survives changes and restarts as the cookies do
    /// (`listing.rs`), and a keyed hash, so a client cannot name another directory's.
    fn cookie_verf(&self, dir_fileid: u64) -> [u8; 8] {
        let mut h = blake3::Hasher::new_keyed(&self.mac_key);
        h.update(b"readdir cookie verifier");
        h.update(&dir_fileid.to_le_bytes());
        let mut v = [0u8; 8];
        v.copy_from_slice(&h.finalize().as_bytes()[..8]);
        if v == [0; 8] {
            v[0] = 1;
        }
        v
    }

    /// A resumed listing's verifier must be the directory's (or zero, which clients
    /// that do not keep verifiers send): anything else is a cookie this server never
    /// issued for it (NFS3ERR_BAD_COOKIE, NFS4ERR_NOT_SAME).
    fn check_cookie_verf(&self, dir_fileid: u64, cookie: u64, verf: [u8; 8]) -> FsResult<()> {
        if cookie != 0 && verf != [0; 8] && verf != self.cookie_verf(dir_fileid) {
            return Err(Status::BadCookie);
        }
        Ok(())
    }

    fn attr(&self, fileid: u64, key: &str, m: &ObjectMeta) -> Attr {
        let dir = is_dir_key(key);
        let full = mode(&m.user);
        let kind = if dir {
            FileKind::Dir
        } else {
            // A stored directory type on a file key is not a directory.
            match kind_of(full) {
                FileKind::Dir => FileKind::Reg,
                k => k,
            }
        };
        let perm = full.map_or(if dir { 0o755 } else { 0o644 }, |f| f & 0o7777);
        let size = match kind {
            FileKind::Dir => 4096,
            k if k.is_special() => 0,
            _ => m.size,
        };
        // A directory's times also move with the changes the gateway made in it, so
        // clients revalidate their caches even where the store keeps no directory time.
        let change = if dir {
            self.dir_changes.get(fileid)
        } else {
            dirs::Change::default()
        };
        let mut extra = change.count % 1_000_000_000;
        // Stores with whole-second times (S3's Last-Modified): the ETag decides the
        // sub-second part, so a same-size rewrite within one second still changes
        // mtime/ctime, and caches (ours, other gateways', clients') revalidate.
        if m.mtime_ns.is_multiple_of(1_000_000_000) && !m.etag.is_empty() {
            let h = blake3::hash(m.etag.as_bytes());
            let h = u64::from_le_bytes(h.as_bytes()[..8].try_into().expect("8 bytes"));
            extra += h % 1_000_000_000;
        }
        let obj = from_ns(m.mtime_ns.saturating_add(extra));
        let (uid, gid) = (id(&m.user, M_UID), id(&m.user, M_GID));
        let (mt, ct, at) = (
            time(&m.user, M_MTIME),
            time(&m.user, M_CTIME),
            time(&m.user, M_ATIME),
        );
        report_unparsed(
            key,
            &m.user,
            &[
                (M_MODE, full.is_some()),
                (M_UID, uid.is_some()),
                (M_GID, gid.is_some()),
                (M_MTIME, mt.is_some()),
                (M_ATIME, at.is_some()),
                (M_CTIME, ct.is_some()),
            ],
        );
        // POSIX: entry changes mark the directory's mtime and ctime (see `dirs`).
        // (No change recorded: nothing to raise them to, also for times before 1970.)
        let raise = |t: NfsTime| match change.at_ns {
            0 => t,
            ns => t.max(from_ns(ns)),
        };
        let mtime = raise(mt.unwrap_or(obj));
        let ctime = raise(ct.unwrap_or(obj));
        Attr {
            kind,
            mode: perm,
            // An orphan has no name left (knfsd: nlink 0 while an open holds it).
            nlink: if dir {
                self.dir_nlink(fileid, key)
            } else if orphans::is_orphan_key(key) {
                0
            } else if links::is_inode_key(key) {
                links::nlink_of(&m.user)
            } else {
                1
            },
            uid: uid.unwrap_or(0),
            gid: gid.unwrap_or(0),
            size,
            used: size.div_ceil(4096).saturating_mul(4096),
            rdev: if matches!(kind, FileKind::Chr | FileKind::Blk) {
                rdev(&m.user)
            } else {
                (0, 0)
            },
            fsid: self.fsid,
            fileid,
            atime: at.unwrap_or(mtime),
            mtime,
            ctime,
            change: self.changes.observe(fileid, ctime.as_ns_clamped()),
        }
    }

    /// Link count of directory `key` (see `nlink`): cached, else counted (a failed
    /// count shows 2 and is retried next time).
    fn dir_nlink(&self, fileid: u64, key: &str) -> u32 {
        if let Some(n) = self.subdirs.get(fileid) {
            return nlink::dir_nlink(n);
        }
        match self.backend.count_subdirs(key, NLINK_COUNT_LIMIT) {
            Ok(n) => {
                self.subdirs.put(fileid, n);
                nlink::dir_nlink(n)
            }
            Err(e) => {
                tracing::debug!(key, error = %e, "cannot count subdirectories");
                2
            }
        }
    }

    fn dir_of(&self, dir: &Node) -> FsResult<()> {
        if is_dir_key(&dir.key) {
            Ok(())
        } else {
            Err(Status::NotDir)
        }
    }

    fn new_meta(&self, kind: u32, default_perm: u32, set: &SetAttr, owner: Owner) -> UserMeta {
        let mut m = UserMeta::new();
        m.insert(
            M_MODE.into(),
            fmt_mode(kind | set.mode.map_or(default_perm, |p| p & 0o7777)),
        );
        m.insert(M_UID.into(), set.uid.unwrap_or(owner.uid).to_string());
        m.insert(M_GID.into(), set.gid.unwrap_or(owner.gid).to_string());
        for (name, t) in [(M_ATIME, set.atime), (M_MTIME, set.mtime)] {
            if let SetTime::Client(t) = t {
                m.insert(name.into(), fmt_time(t));
            }
        }
        if self.shared {
            let id = rand::random::<u32>().max(1);
            m.insert(M_ID.into(), format!("{id:08x}"));
        }
        m
    }

    /// A new object appeared at `key`: drop any stale mapping so it gets a fresh
    /// generation, then map it. The unmapped id (an object removed behind the
    /// gateway's back had it) is reported now, the change being done; the caller's
    /// `changing` reports the parent and the new id once the whole call is done.
    fn fresh_node(&self, export: u16, key: &str, parent: &Node) -> Node {
        let (old, (fileid, _)) = self.table.renew(key);
        self.observer.touched(&old);
        self.bump(parent.fileid);
        if let Some(name) = key.strip_prefix(parent.key.as_str()) {
            self.cursors
                .made(parent.fileid, listing::entry_cookie(fileid), name);
        }
        Node {
            export,
            fileid,
            key: key.to_string(),
        }
    }

    /// Runs the namespace change `f` between two reports of the file ids `ids` to the
    /// observer (`observe`): before `f` touches the store, and after it (on success
    /// and failure alike: a failed change may have done part of its work). Ids only
    /// `f` learns (what the handle table unmapped or moved) `f` reports itself once
    /// its change is done.
    ///
    /// Why no stale cache entry answers after the reply (cache.rs's rule: a reader
    /// snapshots the stamp before it reads; the reactor caches only under an
    /// unchanged stamp): every id is bumped after the change and before this returns,
    /// hence before the reply. An entry filled under a stamp taken before that bump
    /// fails the stamp check from then on; a stamp taken after it belongs to a read
    /// that began after the change and saw its result (a removed object's handle is
    /// already unmapped: STALE). The bump before the change keeps what is read while
    /// the change runs from being cached even until then, as for WRITE.
    ///
    /// Data and attribute changes (`write`, `setattr`, `commit`) go through here too,
    /// with their one file: whichever front end or thread runs them (an NFSv3 or
    /// NFSv4.1 procedure, an operation anywhere in a COMPOUND, a truncating OPEN or
    /// CREATE), the caches learn of exactly what executed.
    fn changing<T>(&self, ids: &[Option<u64>], f: impl FnOnce() -> FsResult<T>) -> FsResult<T> {
        ids.iter().flatten().for_each(|id| self.observer.file(*id));
        // Reported again on the way out even if `f` panics (the worker answers
        // SYSTEM_ERR and lives on): part of the change may have been made.
        let _after = observe::Again(&self.observer, ids);
        f()
    }

    /// Reports the directory entries `names` (directory id, name) to the observer
    /// now, and again when the returned guard drops: held across a change of what
    /// they refer to (as `changing` reports ids), so the reactors' cached LOOKUPs of
    /// exactly these names stop answering (`crate::cache`'s name rule). A CREATE's
    /// reply teaches its name only when the name's stamp moved by exactly these two
    /// reports (`server::worker`).
    fn naming<'a>(&'a self, names: &'a [(u64, &'a [u8])]) -> observe::AgainNames<'a> {
        names.iter().for_each(|(d, n)| self.observer.name(*d, n));
        observe::AgainNames(&self.observer, names)
    }

    /// `changing` for one file's data or attributes.
    fn changing_file<T>(&self, node: &Node, f: impl FnOnce() -> FsResult<T>) -> FsResult<T> {
        self.changing(&[Some(node.fileid)], f)
    }

    /// `changing` for a call that makes (or finds) an object: its id is reported
    /// too, after everything the call did to it (a size set after the create).
    fn making(&self, ids: &[Option<u64>], f: impl FnOnce() -> FsResult<Node>) -> FsResult<Node> {
        let r = self.changing(ids, f);
        if let Ok(n) = &r {
            self.observer.file(n.fileid);
        }
        r
    }

    /// See `FileModel::observe_changes`.
    pub fn observe_changes(&self, o: Arc<dyn ChangeObserver>) {
        self.observer.set(o)
    }

    /// See `FileModel::note_change`.
    pub fn note_change(&self, fileid: u64) {
        self.observer.file(fileid)
    }

    /// `FileModel::fresh_data`: the store's cache first, then the reactors' (a bump
    /// of the file's stamp, so a fill read before it is refused), then the note that
    /// lets the reactors answer this generation again.
    pub fn fresh_data(&self, node: &Node, gen: u16) -> bool {
        if self.observer.data_seen(node.fileid, gen) {
            return false;
        }
        self.backend.forget_cached(&node.key);
        self.observer.file(node.fileid);
        self.observer.note_data(node.fileid, gen);
        true
    }

    // ---- handles -------------------------------------------------------------------

    /// The largest file this export's store can hold (FSINFO `maxfilesize`).
    pub fn max_file_size(&self) -> u64 {
        self.backend.max_file_size().min(MAX_FILE_SIZE)
    }

    /// The run's verifier, moved on by each failed sync and by each loss of staged
    /// writes the backend reports (`Backend::lost_writes`, counted on whichever path
    /// found it: a COMMIT, the s3 idle flusher, a rename).
    pub fn write_verifier(&self) -> [u8; 8] {
        self.wverf
            .load(std::sync::atomic::Ordering::Acquire)
            .wrapping_add(self.backend.lost_writes())
            .to_be_bytes()
    }

    /// A sync failed: UNSTABLE data acknowledged before it may be lost even if a
    /// later sync succeeds (the kernel reports a writeback error once per open
    /// file, and marks the failed pages clean), so the verifier moves on and clients
    /// resend every WRITE not yet committed under the new one (RFC 1813 §3.3.7, as
    /// knfsd resets its verifier on a failed COMMIT or write-back).
    pub fn reset_write_verifier(&self) {
        let old = self.wverf.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        tracing::warn!(
            old = format_args!("{old:016x}"),
            "a sync failed: write verifier changed (clients resend uncommitted WRITEs)"
        );
    }

    pub fn root(&self, export: u16) -> FsResult<Node> {
        let p = self.prefix(export).ok_or(Status::NoEnt)?;
        Ok(self.node(export, p))
    }

    pub fn handle(&self, node: &Node) -> FileHandle {
        if !self.shared {
            // A cached mapping: its MAC is kept beside it (`HandleTable::local_handle`).
            let cached =
                self.table
                    .local_handle(&self.mac_key, node.export, node.fileid, &node.key);
            if let Some(b) = cached {
                return handle_of(&b);
            }
        }
        let (id, gen) = match self.table.get(node.fileid) {
            Some((k, g)) if k == node.key => (node.fileid, g),
            _ => self.table.assign(&node.key),
        };
        let b = if self.shared {
            let (inc, origin) = self.incarnation_of(node);
            let named = origin.as_deref().unwrap_or(&node.key);
            let suffix = self.suffix(node, named, id);
            handles::encode_shared(&self.mac_key, node.export, id, inc, suffix)
        } else {
            handles::encode(&self.mac_key, node.export, id, gen).to_vec()
        };
        handle_of(&b)
    }

    /// The incarnation of the object behind `node` (0: none, gone, or unknown now;
    /// metadata reads are cached by the backend, so this rarely costs a request) and,
    /// for a hard-linked file's inode, the key the file had when first linked, which
    /// its handles name (`links`: the handle made before the LINK is the one after).
    fn incarnation_of(&self, node: &Node) -> (u32, Option<String>) {
        if Some(node.key.as_str()) == self.prefix(node.export) {
            return (0, None);
        }
        let Ok(m) = self.backend.head(&node.key) else {
            return (0, None);
        };
        let origin = match links::is_inode_key(&node.key) {
            true => links::origin(&m.user).map(str::to_string),
            false => None,
        };
        (incarnation(&m.user), origin)
    }

    /// The key `named` (`node`'s, or the name a linked file's handles carry) below
    /// the export root when it fits a shared handle ("" = the root); otherwise a
    /// single NUL (never part of a key), and `node`'s key goes into the store's id
    /// index (once per file id and start).
    fn suffix<'a>(&self, node: &Node, named: &'a str, id: u64) -> &'a [u8] {
        let root = self.prefix(node.export).unwrap_or("");
        let rel = named.strip_prefix(root).map(str::as_bytes);
        if let Some(rel) = rel.filter(|r| r.len() <= handles::SUFFIX_MAX) {
            return rel;
        }
        if !lock(&self.indexed).contains(&id) {
            let st = self.backend.shared().expect("shared store");
            match st.put_id(id, &node.key) {
                Ok(()) => {
                    lock(&self.indexed).insert(id);
                }
                // The handle still works here (local table); other gateways answer
                // STALE for it until a later handle of this file is indexed.
                Err(e) => tracing::warn!(key = node.key, error = %e, "handle id index: put failed"),
            }
        }
        b"\0"
    }

    pub fn resolve(&self, fh: &[u8]) -> FsResult<Node> {
        self.resolve_meta(fh).map(|(node, _)| node)
    }

    /// `resolve`, and the node's attributes from the metadata it read to prove the
    /// object exists: one store HEAD (on `fs` one `fstat`) for both, not two. The
    /// attributes are those a `getattr` issued at the same instant would give.
    pub fn resolve_attr(&self, fh: &[u8]) -> FsResult<(Node, Attr)> {
        match self.resolve_meta(fh)? {
            (node, Some(m)) => {
                let a = self.attr(node.fileid, &node.key, &m);
                Ok((node, a))
            }
            // An export root is not read to resolve it.
            (node, None) => {
                let a = self.getattr(&node)?;
                Ok((node, a))
            }
        }
    }

    /// `resolve`, with the metadata it read of the node's key (none for an export
    /// root, which needs no check).
    fn resolve_meta(&self, fh: &[u8]) -> FsResult<(Node, Option<ObjectMeta>)> {
        let (export, fileid, key, inc) = if self.shared && !handles::is_local(fh) {
            self.resolve_shared(fh)?
        } else {
            let k = self.v1_key.as_ref().ok_or(Status::BadHandle)?;
            let (export, fileid, gen) = handles::decode(k, fh).ok_or(Status::BadHandle)?;
            let (key, g) = self.table.get(fileid).ok_or(Status::Stale)?;
            if g != gen {
                return Err(Status::Stale);
            }
            (export, fileid, key, None)
        };
        let root = self.prefix(export).ok_or(Status::Stale)?;
        if !key.starts_with(root) {
            return Err(Status::Stale);
        }
        let mut key = key;
        if key != root {
            let mut m = self.meta(&key)?;
            // A file hard-linked since the table last saw it (`links`): its inode.
            if m.as_ref().is_none_or(|m| links::link_target(m).is_some()) {
                if let Some((ikey, im)) = self.linked_since(&key, fileid, m.as_ref())? {
                    (key, m) = (ikey, Some(im));
                } else if m.is_some() {
                    return Err(Status::Stale); // a name of another linked file
                }
            }
            match m {
                None => {
                    // Gone behind our back: forget it so a new object there gets a new
                    // generation, and drop what the reactors cached of it (its handles
                    // are STALE from now on).
                    let t = self.table.forget(&key);
                    self.observer.touched(&t);
                    return Err(Status::Stale);
                }
                // Shared stores: a removed and re-created name is another file.
                Some(m) if inc.is_some_and(|i| i != incarnation(&m.user)) => {
                    return Err(Status::Stale)
                }
                Some(m) => {
                    let node = Node {
                        export,
                        fileid,
                        key,
                    };
                    return Ok((node, Some(m)));
                }
            }
        }
        let node = Node {
            export,
            fileid,
            key,
        };
        Ok((node, None))
    }

    /// A version-2 handle: the local table first (it follows renames made here), then
    /// the key the handle carries, then the store's id index (handles made by another
    /// gateway on the same store).
    fn resolve_shared(&self, fh: &[u8]) -> FsResult<(u16, u64, String, Option<u32>)> {
        let h = handles::decode_shared(&self.mac_key, fh).ok_or(Status::BadHandle)?;
        let (export, fileid, suffix) = (h.export, h.fileid, h.suffix);
        let inc = Some(h.incarnation);
        if let Some((key, _)) = self.table.get(fileid) {
            return Ok((export, fileid, key, inc));
        }
        let root = self.prefix(export).ok_or(Status::Stale)?;
        let key = if suffix == b"\0" {
            let st = self.backend.shared().expect("shared store");
            match st.get_id(fileid) {
                Ok(k) => k,
                Err(BackendError::NotFound) => return Err(Status::Stale),
                Err(e) => return Err(self.berr(e, "id index")),
            }
        } else {
            let rel = std::str::from_utf8(&suffix).map_err(|_| Status::BadHandle)?;
            format!("{root}{rel}")
        };
        // The id must be the one this key derives (else: a collision re-hash here).
        let id = self.file_id(&key);
        if id != fileid {
            return Err(Status::Stale);
        }
        Ok((export, fileid, key, inc))
    }

    // ---- attributes ----------------------------------------------------------------

    pub fn getattr(&self, node: &Node) -> FsResult<Attr> {
        let m = self.meta(&node.key)?.ok_or(Status::Stale)?;
        Ok(self.attr(node.fileid, &node.key, &m))
    }

    /// Applies `set`, reported to the observer as a change of `node`'s file
    /// (`changing`): mode, owner and times move the cached attributes, a size its
    /// data too.
    pub fn setattr(&self, node: &Node, set: &SetAttr) -> FsResult<()> {
        check_set(set)?;
        self.changing_file(node, || self.set_attrs(node, set))
    }

    fn set_attrs(&self, node: &Node, set: &SetAttr) -> FsResult<()> {
        let key = node.key.as_str();
        let m = self.meta(key)?.ok_or(Status::Stale)?;
        let dir = is_dir_key(key);
        let cur = self.attr(node.fileid, key, &m);
        lock(&self.clean).remove(key);
        let mut user = m.user.clone();
        let mut changed = false;
        if let Some(size) = set.size {
            if dir {
                return Err(Status::IsDir);
            }
            if cur.kind != FileKind::Reg {
                return Err(Status::Inval);
            }
            let rw = self.backend.random_write().ok_or(Status::NotSupp)?;
            if size != m.size {
                rw.set_size(key, size).map_err(|e| self.nerr(e, key))?;
                let mut synced = rw.sync(key);
                if matches!(synced, Err(BackendError::Lost(_))) {
                    // Staged writes the store lost went with the new size: a SETATTR
                    // is not resent, so the size is set again over the store's object.
                    synced = rw.set_size(key, size).and_then(|_| rw.sync(key));
                }
                synced.map_err(|e| self.nerr(e, key))?;
                // The object's own modification time now speaks for mtime and ctime.
                changed |= user.remove(M_MTIME).is_some();
                changed |= user.remove(M_CTIME).is_some();
            }
        }
        let kind_bits = type_bits(cur.kind);
        let mut attrs_changed = false;
        if let Some(p) = set.mode {
            user.insert(M_MODE.into(), fmt_mode(kind_bits | (p & 0o7777)));
            attrs_changed = true;
        }
        if let Some(u) = set.uid {
            user.insert(M_UID.into(), u.to_string());
            attrs_changed = true;
        }
        if let Some(g) = set.gid {
            user.insert(M_GID.into(), g.to_string());
            attrs_changed = true;
        }
        let now = NfsTime::now();
        for (name, t) in [(M_ATIME, set.atime), (M_MTIME, set.mtime)] {
            match t {
                SetTime::DontChange => {}
                SetTime::ServerTime => {
                    user.insert(name.into(), fmt_time(now));
                    attrs_changed = true;
                }
                SetTime::Client(t) => {
                    user.insert(name.into(), fmt_time(t));
                    attrs_changed = true;
                }
            }
        }
        if attrs_changed {
            user.insert(M_CTIME.into(), fmt_time(now));
            changed = true;
        }
        if !changed {
            return Ok(());
        }
        // A directory's last entry change becomes its stored mtime (see `dirs`).
        let settle = dir && self.dir_changes.get(node.fileid).at_ns != 0;
        if settle && set.mtime == SetTime::DontChange {
            user.insert(M_MTIME.into(), fmt_time(cur.mtime));
        }
        let r = self.store_meta(key, dir, set, &user);
        if settle && r.is_ok() {
            self.dir_changes.settle(node.fileid);
        }
        r
    }

    /// Writes the metadata of `key` (SETATTR's last step).
    fn store_meta(&self, key: &str, dir: bool, set: &SetAttr, user: &UserMeta) -> FsResult<()> {
        if key.is_empty() {
            // The store root carries metadata only where the store has a root object.
            return match self.backend.set_meta(key, user) {
                Ok(()) => Ok(()),
                Err(_) if set.mode.is_some() || set.uid.is_some() || set.gid.is_some() => {
                    Err(Status::Perm)
                }
                Err(_) => Ok(()),
            };
        }
        match self.backend.set_meta(key, user) {
            Ok(()) => Ok(()),
            // A directory without a marker: make one.
            Err(BackendError::NotFound) if dir => match self.backend.put(key, b"", user, true) {
                Ok(_) => Ok(()),
                Err(BackendError::AlreadyExists) => self
                    .backend
                    .set_meta(key, user)
                    .map_err(|e| self.nerr(e, key)),
                Err(e) => Err(self.nerr(e, key)),
            },
            Err(e) => Err(self.nerr(e, key)),
        }
    }

    // ---- names ---------------------------------------------------------------------

    pub fn lookup(&self, dir: &Node, name: &[u8]) -> FsResult<Node> {
        self.lookup_meta(dir, name).map(|(node, _)| node)
    }

    /// `lookup`, and the found node's attributes from the metadata the look-up read:
    /// one store HEAD (on `fs` one `fstat`) for both, where `lookup` then `getattr`
    /// read it twice. The attributes are those a `getattr` at the same instant gives.
    pub fn lookup_attr(&self, dir: &Node, name: &[u8]) -> FsResult<(Node, Attr)> {
        match self.lookup_meta(dir, name)? {
            (node, Some(m)) => {
                let a = self.attr(node.fileid, &node.key, &m);
                Ok((node, a))
            }
            (node, None) => {
                let a = self.getattr(&node)?;
                Ok((node, a))
            }
        }
    }

    /// `lookup`, with the metadata of the found node's key when the look-up read it
    /// ("." and ".." are not read; a link's inode is).
    fn lookup_meta(&self, dir: &Node, name: &[u8]) -> FsResult<(Node, Option<ObjectMeta>)> {
        self.dir_of(dir)?;
        match name {
            b"." => return Ok((dir.clone(), None)),
            b".." => {
                let p = self.parent_key(dir.export, &dir.key);
                return Ok((self.node(dir.export, &p), None));
            }
            _ => {}
        }
        let name = match check_name(name) {
            Ok(n) => n,
            Err(Status::NameTooLong) => return Err(Status::NameTooLong),
            Err(_) => return Err(Status::NoEnt),
        };
        let child = format!("{}{name}", dir.key);
        match self.find(&child)? {
            Some(Found::File(m)) => self.named_node_meta(dir.export, &child, m),
            Some(Found::Dir(m)) => Ok((self.node(dir.export, &format!("{child}/")), Some(m))),
            None => Err(Status::NoEnt),
        }
    }

    pub fn readlink(&self, node: &Node) -> FsResult<Vec<u8>> {
        if is_dir_key(&node.key) {
            return Err(Status::Inval);
        }
        let m = self.file_meta(&node.key)?.ok_or(Status::Stale)?;
        if mode(&m.user).is_none_or(|f| f & S_IFMT != S_IFLNK) {
            return Err(Status::Inval);
        }
        let mut buf = vec![0u8; m.size.min(64 * 1024) as usize];
        let n = self
            .backend
            .get_range(&node.key, 0, &mut buf)
            .map_err(|e| self.nerr(e, &node.key))?;
        buf.truncate(n);
        Ok(buf)
    }

    // ---- data ----------------------------------------------------------------------

    pub fn data_root(&self) -> Option<Arc<std::os::fd::OwnedFd>> {
        self.backend.data_root()
    }

    pub fn data_file(&self, node: &Node) -> Option<DataFile> {
        if is_dir_key(&node.key) {
            return None;
        }
        let (file, writable) = self.backend.data_file(&node.key)?;
        let clean = lock(&self.clean).contains(&node.key);
        let m = self.file_meta(&node.key).ok()??;
        Some(DataFile {
            file,
            writable,
            clean,
            atime_set: m.user.contains_key(M_ATIME),
        })
    }

    /// A COMMIT's first step: whether it must sync `key` — the key has staged data
    /// (taken out of the dirty set now), or another sync of it is still in flight
    /// (whose completion this COMMIT must not assume). When true, the sync is counted
    /// in flight until `end_sync`. `always`: the caller syncs anyway (a stable WRITE).
    pub fn begin_sync(&self, key: &str, always: bool) -> bool {
        let mut d = lock(&self.dirty);
        let staged = d.remove(key);
        let mut s = lock(&self.syncing);
        if !(staged || always || s.contains_key(key)) {
            return false;
        }
        *s.entry(key.to_string()).or_insert(0) += 1;
        true
    }

    /// Ends a sync `begin_sync` counted; a failed one leaves the key dirty (a later
    /// COMMIT syncs again).
    pub fn end_sync(&self, key: &str, ok: bool) {
        let mut d = lock(&self.dirty);
        if !ok && !d.contains(key) {
            d.insert(key.to_string());
        }
        let mut s = lock(&self.syncing);
        if let Some(n) = s.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                s.remove(key);
            }
        }
    }

    pub fn mark_dirty(&self, key: &str) {
        let mut d = lock(&self.dirty);
        if !d.contains(key) {
            d.insert(key.to_string());
        }
    }

    pub fn read(&self, node: &Node, offset: u64, dst: &mut [u8]) -> FsResult<(usize, bool)> {
        if is_dir_key(&node.key) {
            return Err(Status::IsDir);
        }
        let m = self.file_meta(&node.key)?.ok_or(Status::Stale)?;
        // Symlinks and special files have no data to read (see the module doc).
        if kind_of(mode(&m.user)) != FileKind::Reg {
            return Err(Status::Inval);
        }
        if offset >= m.size || dst.is_empty() {
            return Ok((0, offset >= m.size));
        }
        let want = ((m.size - offset).min(dst.len() as u64)) as usize;
        let n = self
            .backend
            .get_range(&node.key, offset, &mut dst[..want])
            .map_err(|e| self.nerr(e, &node.key))?;
        Ok((n, n < want || offset + n as u64 >= m.size))
    }

    /// Writes `data` at `offset`, reported to the observer as a change of `node`'s
    /// file (`changing`).
    pub fn write(&self, node: &Node, offset: u64, data: &[u8], stable: Stable) -> FsResult<Stable> {
        let key = node.key.as_str();
        if is_dir_key(key) {
            return Err(Status::IsDir);
        }
        let rw = self.backend.random_write().ok_or(Status::NotSupp)?;
        if offset
            .checked_add(data.len() as u64)
            .is_none_or(|e| e > i64::MAX as u64)
        {
            return Err(Status::FBig);
        }
        self.changing_file(node, || self.write_data(node, rw, offset, data, stable))
    }

    fn write_data(
        &self,
        node: &Node,
        rw: &dyn RandomWrite,
        offset: u64,
        data: &[u8],
        stable: Stable,
    ) -> FsResult<Stable> {
        let key = node.key.as_str();
        if !lock(&self.clean).contains(key) {
            let m = self.file_meta(key)?.ok_or(Status::Stale)?;
            if mode(&m.user).is_some_and(|f| f & S_IFMT != S_IFREG) {
                return Err(Status::Inval);
            }
            if m.user.contains_key(M_MTIME) || m.user.contains_key(M_CTIME) {
                let mut user = m.user.clone();
                user.remove(M_MTIME);
                user.remove(M_CTIME);
                self.backend
                    .set_meta(key, &user)
                    .map_err(|e| self.nerr(e, key))?;
            }
            let mut c = lock(&self.clean);
            if c.len() >= CLEAN_CACHE {
                c.clear();
            }
            c.insert(key.to_string());
        }
        rw.write_at(key, offset, data)
            .map_err(|e| self.nerr(e, key))?;
        if stable == Stable::Unstable {
            lock(&self.dirty).insert(key.to_string());
            return Ok(Stable::Unstable);
        }
        self.begin_sync(key, true);
        let mut synced = rw.sync(key);
        if matches!(synced, Err(BackendError::Lost(_))) {
            // The store lost the staged writes, this one's data with them (the others
            // are resent by their clients: the verifier moved). A stable WRITE answers
            // only once its data is durable, so it is written again over what the
            // store holds, once (RFC 1813 §3.3.7: FILE_SYNC means committed).
            synced = rw.write_at(key, offset, data).and_then(|_| rw.sync(key));
        }
        self.synced(key, &synced);
        synced.map_err(|e| self.nerr(e, key))?;
        Ok(Stable::FileSync)
    }

    pub fn commit(&self, node: &Node) -> FsResult<()> {
        let key = node.key.as_str();
        let Some(rw) = self.backend.random_write() else {
            return Ok(());
        };
        if !self.begin_sync(key, false) {
            return Ok(());
        }
        // Staged data becomes the store's object: on s3 an upload, whose object
        // times and size the attributes then come from (`changing`).
        self.changing_file(node, || self.sync_staged(key, rw))
    }

    fn sync_staged(&self, key: &str, rw: &dyn RandomWrite) -> FsResult<()> {
        let synced = match rw.sync(key) {
            // The store lost staged writes (s3: the multipart upload was aborted behind
            // us): they are dropped and the write verifier has moved on, so COMMIT
            // answers OK with the new one and clients resend every WRITE they have not
            // seen committed (RFC 1813 §3.3.21, RFC 8881 §18.32.3), rather than an
            // error the application would see as EIO for data it can still resend.
            Err(BackendError::Lost(_)) => Ok(()),
            r => r,
        };
        self.synced(key, &synced);
        synced.map_err(|e| self.nerr(e, key))
    }

    /// Ends a sync with its outcome. A failure the backend does not call
    /// retryable may have lost staged data (a local file system drops the pages
    /// whose write-back failed and reports it once): the write verifier moves on. A
    /// retryable one (the s3 backend's store trouble) keeps the data staged for the
    /// next COMMIT, so the verifier stays. A loss the backend reported (`Lost`) has
    /// moved it already (`Backend::lost_writes`).
    fn synced(&self, key: &str, synced: &Result<(), BackendError>) {
        self.end_sync(key, synced.is_ok());
        if synced
            .as_ref()
            .is_err_and(|e| !matches!(e, BackendError::Retryable(_) | BackendError::Lost(_)))
        {
            self.reset_write_verifier();
        }
    }

    pub fn flush_all(&self) -> FsResult<()> {
        let keys: Vec<String> = lock(&self.dirty).drain().collect();
        let mut result = Ok(());
        if let Some(rw) = self.backend.random_write() {
            for k in keys {
                match rw.sync(&k) {
                    // Lost: dropped and logged by the backend; the verifier moves at the next start.
                    Ok(()) | Err(BackendError::NotFound) | Err(BackendError::Lost(_)) => {}
                    Err(e) => {
                        lock(&self.dirty).insert(k.clone());
                        if result.is_ok() {
                            result = Err(self.berr(e, &k));
                        }
                    }
                }
            }
        }
        if let Err(e) = self.table.sync() {
            tracing::warn!(error = %e, "handle table: fsync failed");
            if result.is_ok() {
                result = Err(Status::Io);
            }
        }
        result
    }

    // ---- namespace -----------------------------------------------------------------

    fn create_name<'a>(&self, dir: &Node, name: &'a [u8]) -> FsResult<&'a str> {
        self.dir_of(dir)?;
        if name == b"." || name == b".." {
            return Err(Status::Exist);
        }
        check_name(name)
    }

    pub fn create(
        &self,
        dir: &Node,
        name: &[u8],
        how: &CreateMode,
        owner: Owner,
    ) -> FsResult<Node> {
        self.create_checked(dir, name, how, owner, &|_| Ok(()))
    }

    /// `create`, asking `may_truncate` before an UNCHECKED create with a size
    /// truncates a file already at the name (the caller's permission rule, RFC 1813
    /// §3.3.8): decided on the file this call found, with no LOOKUP of its own
    /// before (which cost every new name a second probe).
    pub fn create_checked(
        &self,
        dir: &Node,
        name: &[u8],
        how: &CreateMode,
        owner: Owner,
        may_truncate: &dyn Fn(&Node) -> FsResult<()>,
    ) -> FsResult<Node> {
        let name = self.create_name(dir, name)?;
        let key = format!("{}{name}", dir.key);
        let (set, verf) = match how {
            CreateMode::Unchecked(s) | CreateMode::Guarded(s) => (*s, None),
            CreateMode::Exclusive(v) => (SetAttr::default(), Some(verf_hex(v))),
            CreateMode::Exclusive41(v, s) => (*s, Some(verf_hex(v))),
        };
        check_set(&set)?;
        // The parent's entries change. The object at the name needs no report of its
        // own here (and so no lookup of its id): a file already there is truncated
        // only through `setattr`, which reports it before and after, and a stale
        // mapping a new file replaces is reported by `fresh_node` once unmapped;
        // `making` reports the new or found object after the call.
        let names = [(dir.fileid, name.as_bytes())];
        let _named = self.naming(&names);
        self.making(&[Some(dir.fileid)], || {
            self.create_at(dir, &key, how, (&set, verf), owner, may_truncate)
        })
    }

    fn create_at(
        &self,
        dir: &Node,
        key: &str,
        how: &CreateMode,
        (set, verf): (&SetAttr, Option<String>),
        owner: Owner,
        may_truncate: &dyn Fn(&Node) -> FsResult<()>,
    ) -> FsResult<Node> {
        let (key, set) = (key.to_string(), *set);
        // Where a refused put says that something holds the name, a new name needs
        // no look first: one walk of the parents, not two (docs/performance.md
        // "Create and remove beside nfs-ganesha").
        if self.backend.put_if_absent_refuses_dirs() {
            if let Some(node) = self.put_new(dir, &key, &set, &verf, owner)? {
                return Ok(node);
            }
        }
        for attempt in 0..2 {
            // A lost race (the second attempt) looks at what won it.
            let found = match attempt {
                0 => self.find_new(&key)?,
                _ => self.find(&key)?,
            };
            match found {
                Some(Found::Dir(_)) => return Err(Status::Exist),
                Some(Found::File(m)) => {
                    return match how {
                        CreateMode::Guarded(_) => Err(Status::Exist),
                        // RFC 8881 §18.16.3 (EXCLUSIVE4_1), RFC 1813 §3.3.8: the same
                        // verifier is a retransmission of the call that created it.
                        CreateMode::Exclusive(_) | CreateMode::Exclusive41(..) => {
                            if m.user.get(M_VERF) == verf.as_ref() {
                                Ok(self.node(dir.export, &key))
                            } else {
                                Err(Status::Exist)
                            }
                        }
                        CreateMode::Unchecked(s) => {
                            if mode(&m.user).is_some_and(|f| f & S_IFMT != S_IFREG) {
                                return Err(Status::Exist);
                            }
                            let node = self.named_node(dir.export, &key, &m)?;
                            if let Some(size) = s.size {
                                may_truncate(&node)?;
                                self.setattr(
                                    &node,
                                    &SetAttr {
                                        size: Some(size),
                                        ..Default::default()
                                    },
                                )?;
                            }
                            Ok(node)
                        }
                    };
                }
                None => {}
            }
            match self.put_new(dir, &key, &set, &verf, owner)? {
                Some(node) => return Ok(node),
                // Lost a race with another creator: judge the existing file.
                None if attempt == 0 => continue,
                None => return Err(Status::Exist),
            }
        }
        Err(Status::Exist)
    }

    /// Creates regular file `key` in `dir` if nothing holds its name; `None` when
    /// something does (the backend's `AlreadyExists`).
    fn put_new(
        &self,
        dir: &Node,
        key: &str,
        set: &SetAttr,
        verf: &Option<String>,
        owner: Owner,
    ) -> FsResult<Option<Node>> {
        let mut meta = self.new_meta(S_IFREG, 0o644, set, owner);
        if let Some(v) = verf {
            meta.insert(M_VERF.into(), v.clone());
        }
        match self.backend.put(key, b"", &meta, true) {
            Ok(_) => {
                let node = self.fresh_node(dir.export, key, dir);
                if let Some(size) = set.size.filter(|s| *s > 0) {
                    self.setattr(
                        &node,
                        &SetAttr {
                            size: Some(size),
                            ..Default::default()
                        },
                    )?;
                }
                Ok(Some(node))
            }
            Err(BackendError::AlreadyExists) => Ok(None),
            Err(e) => Err(self.berr(e, key)),
        }
    }

    pub fn mkdir(&self, dir: &Node, name: &[u8], set: &SetAttr, owner: Owner) -> FsResult<Node> {
        let name = self.create_name(dir, name)?;
        check_set(set)?;
        let key = format!("{}{name}", dir.key);
        let names = [(dir.fileid, name.as_bytes())];
        let _named = self.naming(&names);
        self.making(&[Some(dir.fileid)], || {
            // Where the put itself refuses a taken name, file or directory, in the
            // step that makes it (`put_if_absent_refuses_dirs`: mkdirat's EEXIST), no
            // look first: one walk of the parents, not two.
            if !self.backend.put_if_absent_refuses_dirs() && self.find_new(&key)?.is_some() {
                return Err(Status::Exist);
            }
            let dkey = format!("{key}/");
            let meta = self.new_meta(S_IFDIR, 0o755, set, owner);
            self.backend
                .put(&dkey, b"", &meta, true)
                .map_err(|e| self.berr(e, &dkey))?;
            let node = self.fresh_node(dir.export, &dkey, dir);
            // The parent has one more subdirectory; the new one has none.
            self.subdirs.adjust(dir.fileid, 1);
            self.subdirs.put(node.fileid, Some(0));
            Ok(node)
        })
    }

    /// MKNOD (RFC 1813 §3.3.11; NFSv4 CREATE of NF4BLK/NF4CHR/NF4SOCK/NF4FIFO, RFC 8881
    /// §18.4): an empty object with the special type in its mode and, for devices,
    /// `rdev` (ignored for fifos and sockets). Other kinds → `BadType`. A size in `set`
    /// is ignored (special files have none). Permission (who may make devices) is the
    /// caller's policy.
    pub fn mknod(
        &self,
        dir: &Node,
        name: &[u8],
        kind: FileKind,
        rdev: (u32, u32),
        set: &SetAttr,
        owner: Owner,
    ) -> FsResult<Node> {
        if !kind.is_special() {
            return Err(Status::BadType);
        }
        let name = self.create_name(dir, name)?;
        let set = SetAttr { size: None, ..*set };
        check_set(&set)?;
        let key = format!("{}{name}", dir.key);
        let names = [(dir.fileid, name.as_bytes())];
        let _named = self.naming(&names);
        self.making(&[Some(dir.fileid)], || {
            if self.find_new(&key)?.is_some() {
                return Err(Status::Exist);
            }
            let mut meta = self.new_meta(type_bits(kind), 0o644, &set, owner);
            if matches!(kind, FileKind::Chr | FileKind::Blk) {
                meta.insert(M_RDEV.into(), makedev(rdev.0, rdev.1).to_string());
            }
            self.backend
                .put(&key, b"", &meta, true)
                .map_err(|e| self.berr(e, &key))?;
            Ok(self.fresh_node(dir.export, &key, dir))
        })
    }

    pub fn symlink(
        &self,
        dir: &Node,
        name: &[u8],
        target: &[u8],
        set: &SetAttr,
        owner: Owner,
    ) -> FsResult<Node> {
        let name = self.create_name(dir, name)?;
        check_set(set)?;
        if target.is_empty() || target.len() > 4096 {
            return Err(Status::Inval);
        }
        let key = format!("{}{name}", dir.key);
        let names = [(dir.fileid, name.as_bytes())];
        let _named = self.naming(&names);
        self.making(&[Some(dir.fileid)], || {
            if self.find_new(&key)?.is_some() {
                return Err(Status::Exist);
            }
            let meta = self.new_meta(
                S_IFLNK,
                0o777,
                &SetAttr {
                    mode: Some(0o777),
                    ..*set
                },
                owner,
            );
            self.backend
                .put(&key, target, &meta, true)
                .map_err(|e| self.berr(e, &key))?;
            Ok(self.fresh_node(dir.export, &key, dir))
        })
    }

    /// Unmaps a removed file; what it unmapped is reported to the observer.
    fn forget_file(&self, key: &str) {
        let t = self.table.forget(key);
        self.observer.touched(&t);
        lock(&self.dirty).remove(key);
        lock(&self.clean).remove(key);
    }

    /// The key of an existing entry to remove from `dir`: "." and ".." are invalid,
    /// and a name no object can have does not exist.
    fn victim_key(&self, dir: &Node, name: &[u8]) -> FsResult<String> {
        self.dir_of(dir)?;
        if name == b"." || name == b".." {
            return Err(Status::Inval);
        }
        let name = check_name(name).map_err(|e| {
            if e == Status::NameTooLong {
                e
            } else {
                Status::NoEnt
            }
        })?;
        Ok(format!("{}{name}", dir.key))
    }

    pub fn remove(&self, dir: &Node, name: &[u8]) -> FsResult<()> {
        let key = self.victim_key(dir, name)?;
        // The parent, and the victim: its handles turn STALE (a name of a linked
        // file reports its inode itself: `links`).
        let ids = [Some(dir.fileid), self.table.id_of(&key)];
        let names = [(dir.fileid, name)];
        let _named = self.naming(&names);
        self.changing(&ids, || match self.find(&key)? {
            None => Err(Status::NoEnt),
            Some(Found::Dir(_)) => Err(Status::IsDir),
            Some(Found::File(m)) => {
                if let Some(ikey) = links::link_target(&m) {
                    // One name of a linked file: its inode loses a link (`links`).
                    self.backend.delete(&key).map_err(|e| self.berr(e, &key))?;
                    self.forget_file(&key);
                    self.inode_changed(ikey, || self.unlink_inode(ikey))?;
                } else if !self.orphan_if_open(&key)? {
                    // Open over NFSv4: kept, nameless, until its last close (`orphans`).
                    self.backend.delete(&key).map_err(|e| self.berr(e, &key))?;
                    self.forget_file(&key);
                }
                self.gone.note(&key);
                self.bump(dir.fileid);
                Ok(())
            }
        })
    }

    /// True when directory `dkey` has children that a HEAD still finds.
    ///
    /// A listing alone is not proof: a replicated store may list an object that it
    /// has already deleted. Garage, for one, filters each replica's range before it
    /// merges them, so a replica that has not yet applied a DELETE still lists the
    /// object while a HEAD (a merged read) answers "not found". RMDIR must not say
    /// NOTEMPTY for such a ghost, so each listed child is confirmed; anything not
    /// settled within a few pages counts as a child (NOTEMPTY is the safe answer).
    fn has_children(&self, dkey: &str) -> FsResult<bool> {
        const PAGE: usize = 16;
        const MAX_PAGES: usize = 4;
        let mut after: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let p: ListPage = self
                .backend
                .list(dkey, Some('/'), after.as_deref(), PAGE)
                .map_err(|e| self.berr(e, dkey))?;
            for o in p.objects.iter().filter(|o| o.key != dkey) {
                if self.still_there(&o.key)? {
                    return Ok(true);
                }
            }
            for sub in p.prefixes.iter().filter(|s| *s != dkey) {
                if self.prefix_still_there(sub)? {
                    return Ok(true);
                }
            }
            match p.next {
                Some(n) => after = Some(n),
                None => return Ok(false),
            }
        }
        Ok(true)
    }

    /// A listed key, confirmed by a HEAD (see `has_children`).
    fn still_there(&self, key: &str) -> FsResult<bool> {
        match self.backend.head(key) {
            Ok(_) => Ok(true),
            Err(BackendError::NotFound) => Ok(false),
            Err(e) => Err(self.berr(e, key)),
        }
    }

    /// A listed object or sub-prefix, confirmed.
    fn listed_still_there(&self, key: &str, is_prefix: bool) -> FsResult<bool> {
        if is_prefix {
            self.prefix_still_there(key)
        } else {
            self.still_there(key)
        }
    }

    /// A listed sub-prefix is real when its directory marker or one object under it
    /// is confirmed.
    fn prefix_still_there(&self, prefix: &str) -> FsResult<bool> {
        Ok(self.still_there(prefix)? || self.object_under(prefix)?)
    }

    /// True when some object under `prefix` is confirmed by a HEAD; more objects than
    /// one page, none confirmed, is taken as true (they cannot all be ghosts).
    fn object_under(&self, prefix: &str) -> FsResult<bool> {
        let p = self
            .backend
            .list(prefix, None, None, 16)
            .map_err(|e| self.berr(e, prefix))?;
        for o in &p.objects {
            if self.still_there(&o.key)? {
                return Ok(true);
            }
        }
        Ok(p.next.is_some())
    }

    pub fn rmdir(&self, dir: &Node, name: &[u8]) -> FsResult<()> {
        let key = self.victim_key(dir, name)?;
        let ids = [Some(dir.fileid), self.table.id_of(&format!("{key}/"))];
        let names = [(dir.fileid, name)];
        let _named = self.naming(&names);
        self.changing(&ids, || self.rmdir_at(dir, &key))
    }

    fn rmdir_at(&self, dir: &Node, key: &str) -> FsResult<()> {
        // Where the store's delete refuses a non-empty directory and a file in the
        // step that removes (`delete_empty_dir`: rmdir(2)'s ENOTEMPTY and ENOTDIR),
        // delete first: no listing to prove emptiness, no HEADs to tell a file from a
        // directory. Any refusal takes the checked path below, which names it (NOENT,
        // NOTDIR, NOTEMPTY) as before.
        let dkey = format!("{key}/");
        if let Some(Ok(())) = self.backend.delete_empty_dir(&dkey) {
            self.removed_dir(dir, &dkey);
            return Ok(());
        }
        self.rmdir_checked(dir, key)
    }

    /// What a removed directory `dkey` leaves to do: its handles and any mapping under
    /// it go stale, its parent's entries and link count change.
    fn removed_dir(&self, dir: &Node, dkey: &str) {
        self.gone.note(dkey);
        // The directory's id, and any mapping left under it (objects removed
        // behind the gateway's back).
        let t = self.table.forget_prefix(dkey);
        self.observer.touched(&t);
        self.bump(dir.fileid);
        self.subdirs.adjust(dir.fileid, -1);
    }

    /// RMDIR that looks before it deletes: what the name is, and that no child is
    /// left (confirmed, `has_children`).
    fn rmdir_checked(&self, dir: &Node, key: &str) -> FsResult<()> {
        match self.find(key)? {
            None => Err(Status::NoEnt),
            Some(Found::File(_)) => Err(Status::NotDir),
            Some(Found::Dir(_)) => {
                let dkey = format!("{key}/");
                if self.has_children(&dkey)? {
                    return Err(Status::NotEmpty);
                }
                match self.backend.delete(&dkey) {
                    Ok(()) | Err(BackendError::NotFound) => {}
                    Err(e) => {
                        return Err(if self.has_children(&dkey).unwrap_or(false) {
                            Status::NotEmpty
                        } else {
                            self.berr(e, &dkey)
                        })
                    }
                }
                self.removed_dir(dir, &dkey);
                Ok(())
            }
        }
    }

    pub fn rename(&self, from: &Node, from_name: &[u8], to: &Node, to_name: &[u8]) -> FsResult<()> {
        self.dir_of(from)?;
        self.dir_of(to)?;
        if from.export != to.export {
            return Err(Status::XDev);
        }
        for n in [from_name, to_name] {
            if n == b"." || n == b".." {
                return Err(Status::Inval);
            }
        }
        let fname = check_name(from_name).map_err(|e| {
            if e == Status::NameTooLong {
                e
            } else {
                Status::NoEnt
            }
        })?;
        let tname = check_name(to_name)?;
        let src = format!("{}{fname}", from.key);
        let dst = format!("{}{tname}", to.key);
        let found_src = self.find(&src)?;
        let (skey, tkey, src_dir) = match &found_src {
            None => return Err(Status::NoEnt),
            Some(Found::File(_)) => (src.clone(), dst.clone(), false),
            Some(Found::Dir(_)) => (format!("{src}/"), format!("{dst}/"), true),
        };
        if skey == tkey {
            return Ok(());
        }
        if src_dir && tkey.starts_with(&skey) {
            return Err(Status::Inval);
        }
        let found_dst = self.find(&dst)?;
        // Two names of one file (`links`): POSIX rename(2) does nothing.
        let dst_file = Self::file_of(&dst, &found_dst);
        if !src_dir && dst_file.is_some() && dst_file == Self::file_of(&src, &found_src) {
            return Ok(());
        }
        let dst_inode = match &found_dst {
            Some(Found::File(m)) => links::link_target(m).map(str::to_string),
            _ => None,
        };
        let replaces_dir = matches!(found_dst, Some(Found::Dir(_)));
        let replaces_file = matches!(found_dst, Some(Found::File(_)));
        match (found_dst, src_dir) {
            (None, _) => {}
            (Some(Found::Dir(_)), false) => return Err(Status::IsDir),
            (Some(Found::File(_)), true) => return Err(Status::NotDir),
            (Some(Found::File(_)), false) => {}
            (Some(Found::Dir(_)), true) => {
                if self.has_children(&tkey)? {
                    return Err(Status::NotEmpty);
                }
            }
        }
        // Both parents (entries, times, link counts), the object moved (its id
        // stays, its ctime moves; a store that renames by copying gives it new
        // times) and the one it replaces (unmapped: STALE). A directory's
        // descendants keep their ids under new keys (copied objects on such
        // stores): `table.rename` names them, reported after the change.
        let ids = [
            Some(from.fileid),
            Some(to.fileid),
            self.table.id_of(&skey),
            self.table.id_of(&tkey),
        ];
        // Both names: the source no longer refers to the object, the target does.
        let names = [(from.fileid, from_name), (to.fileid, to_name)];
        let _named = self.naming(&names);
        self.changing(&ids, || {
            // The file replaced, when open over NFSv4, is kept until its last close
            // (`orphans`); the rename then finds its name free.
            if replaces_file {
                self.orphan_if_open(&tkey)?;
            }
            self.rename_keys(from, to, &skey, &tkey, src_dir, replaces_dir)?;
            // A replaced link name: its inode lost a link.
            match &dst_inode {
                Some(ikey) => self.inode_changed(ikey, || self.unlink_inode(ikey)),
                None => Ok(()),
            }
        })
    }

    /// Staged writes stay in the objects when `skey` (a file, or a directory ending
    /// in '/') moves to `tkey`: remember them under their new keys. A file key moves
    /// only itself (not "f2" beside "f").
    fn move_dirty(&self, skey: &str, tkey: &str) {
        let under = |k: &str| {
            if skey.ends_with('/') {
                k.starts_with(skey)
            } else {
                k == skey
            }
        };
        let mut d = lock(&self.dirty);
        let moved: Vec<String> = d.iter().filter(|k| under(k)).cloned().collect();
        for k in moved {
            d.remove(&k);
            d.insert(format!("{tkey}{}", &k[skey.len()..]));
        }
        // A sync in flight under the old name: a COMMIT under the new one must
        // not take it as done, so the new name is dirty (it syncs itself).
        let s = lock(&self.syncing);
        for k in s.keys().filter(|k| under(k)) {
            d.insert(format!("{tkey}{}", &k[skey.len()..]));
        }
    }

    /// The change of `rename`, its checks passed.
    fn rename_keys(
        &self,
        from: &Node,
        to: &Node,
        skey: &str,
        tkey: &str,
        src_dir: bool,
        replaces_dir: bool,
    ) -> FsResult<()> {
        self.move_dirty(skey, tkey);
        lock(&self.clean).clear();
        if let Err(e) = self.backend.rename(skey, tkey) {
            if src_dir {
                // A store that renames by copying may have copied or deleted part of
                // the tree: which descendants changed is unknown.
                self.observer.all();
            }
            return Err(match e {
                BackendError::Permanent(ref m) if m.contains("not empty") => Status::NotEmpty,
                e => self.berr(e, skey),
            });
        }
        self.gone.note(skey);
        let moved = self.table.rename(skey, tkey);
        self.observer.touched(&moved);
        self.bump(from.fileid);
        self.bump(to.fileid);
        if src_dir {
            // Its ".." changed.
            self.bump_key(tkey);
            // Link counts: the source parent lost a subdirectory, the target parent
            // gained one unless it replaced an (empty) directory there.
            if from.fileid != to.fileid {
                self.subdirs.adjust(from.fileid, -1);
                if !replaces_dir {
                    self.subdirs.adjust(to.fileid, 1);
                }
            } else if replaces_dir {
                self.subdirs.adjust(from.fileid, -1);
            }
        }
        Ok(())
    }

    // ---- directories ---------------------------------------------------------------

    // Listings (readdir, readdir_plus, warm_children): see `listing`.

    pub fn fsstat(&self, _node: &Node) -> FsResult<FsStat> {
        let (t, f, tf, ff) = self.backend.capacity().map_err(|e| self.berr(e, ""))?;
        Ok(FsStat {
            tbytes: t,
            fbytes: f,
            abytes: f,
            tfiles: tf,
            ffiles: ff,
            afiles: ff,
        })
    }
}

#[cfg(test)]
mod tests;
