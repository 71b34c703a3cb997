//! The file model: NFS-shaped files and directories over an object-store backend.
//!
//! Runs only on backend worker threads (every method may block on storage). It offers
//! mechanism, not policy: permission checks (the policy is [`access`], which the model
//! calls only in the NFSv4.2 operations, [`v42`], that take the caller), export access and squashing are done by the protocol layers, which
//! also gather wcc data around each call.
//!
//! API CONTRACT (filled in by the fs implementation; signatures are fixed):

pub mod access;
pub mod types;
pub mod v42;

pub use types::*;

use crate::audit::{self, Change};
use crate::backend::Backend;
use std::path::Path;
use std::sync::Arc;

/// Maximum NFSv3 file handle size (RFC 1813 NFS3_FHSIZE). The model's handles fit in
/// it, so one handle serves both front ends.
pub const FH_MAX: usize = 64;
/// The most names a file can have (`link`): PATHCONF linkmax and fattr4 maxlink; one
/// LINK more is `MLink` (NFS3ERR_MLINK, NFS4ERR_MLINK). Ext4's limit.
pub const LINK_MAX: u32 = 65_000;

/// Maximum NFSv4 file handle size (RFC 8881 NFS4_FHSIZE). `resolve` accepts any
/// length up to this (and beyond): anything that is not one of our handles is
/// `BadHandle`.
pub const FH4_MAX: usize = 128;

/// An encoded NFSv3 file handle (opaque to clients).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileHandle {
    pub len: u8,
    pub bytes: [u8; FH_MAX],
}

impl FileHandle {
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

/// Export identity inside the model: its index in the config list and the backend
/// key prefix it serves ("" for the whole store, else "a/b/").
#[derive(Debug, Clone)]
pub struct ExportRoot {
    pub id: u16,
    pub prefix: String,
}

/// A READDIRPLUS page: the entries, and each one's node, attributes and handle
/// (`None` when they cannot be read now). `FileModel::readdir_plus` hands it out
/// shared (`Arc`): identical calls at once get the one page listed for them all,
/// handles made once.
pub type PlusPage = (DirPage, Vec<Option<(Node, Attr, FileHandle)>>);

/// A resolved file: which export it was reached through, its file id and its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub export: u16,
    pub fileid: u64,
    /// Backend key ("" = store root; directories end with '/').
    pub key: String,
}

/// A regular file's local data file (`FileModel::data_file`).
#[derive(Clone)]
pub struct DataFile {
    pub file: Arc<std::fs::File>,
    /// Open for writing too.
    pub writable: bool,
    /// The gateway already dropped the object's stored mtime/ctime (its first WRITE
    /// does): the object's own modification time speaks for both, so a write's new
    /// attributes follow from a stat of the file.
    pub clean: bool,
    /// An explicit atime is stored (else atime follows mtime).
    pub atime_set: bool,
}

/// Told which files a change may make a cache wrong about (the reactors' read cache
/// and io_uring file table: `crate::cache::Generations` implements it): every write,
/// SETATTR, syncing COMMIT and namespace change the model executes. The model calls
/// it for the ids it can name before it changes the store and for every id it
/// touched after, before the call returns (`imp::observe`).
pub trait ChangeObserver: Send + Sync {
    /// What is cached about `fileid` may be wrong from now on.
    fn file(&self, fileid: u64);
    /// What is cached about any file may be wrong (the change cannot name them).
    fn all(&self);
    /// Changes reported so far, of any file, including those the observer learns
    /// elsewhere (a reactor's own io_uring writes); `None`: not counted (the model
    /// then counts its own reports). A listing page is reused only while this has
    /// not moved (`imp::listing`).
    fn changes(&self) -> Option<u64> {
        None
    }
    /// Keeps (`held`) or stops keeping every cache from answering for and learning
    /// `fileid` (a write delegation is out on it: `state::delegations`) for every
    /// caller but NFSv4.1 client `client`, the holder. Holds nest.
    fn hold(&self, _fileid: u64, _client: u64, _held: bool) {}
    /// What directory entry `name` of directory `dir` (a file id) refers to may
    /// change (or just changed): a create, remove, rename (both names) or link of
    /// it. The reactors' name caches answer LOOKUP by entry (`crate::cache`'s
    /// `cache_names`): a new name elsewhere in the directory leaves them answering.
    fn name(&self, _dir: u64, _name: &[u8]) {}
    /// Whether this gateway already dropped what it cached of `fileid` for pNFS data
    /// generation `gen` (`crate::fence`); false when not tracked (a drop each time).
    fn data_seen(&self, _fileid: u64, _gen: u16) -> bool {
        false
    }
    /// Notes that `fileid`'s caches were dropped for data generation `gen`.
    fn note_data(&self, _fileid: u64, _gen: u16) {}
}

/// Which files have NFSv4 opens (the server's open table implements it): a REMOVE or
/// RENAME that would delete such a file keeps it, nameless, until `FileModel::release`
/// (RFC 8881 §18.25/§18.26; `imp::orphans`).
pub trait OpenFiles: Send + Sync {
    /// Whether some NFSv4 open stateid holds `fileid`.
    fn is_open(&self, fileid: u64) -> bool;
}

/// The file service. A handle: clones share one model (an asynchronous COPY runs on a
/// thread of its own after its reply: RFC 7862 §15.2.3).
#[derive(Clone)]
pub struct FileModel {
    inner: Arc<imp::Inner>,
}

mod imp;

impl FileModel {
    /// Opens the model: loads or creates the handle key and handle table under
    /// `state_dir`, and picks a fresh write verifier (it changes at every start).
    pub fn open(
        backend: Arc<dyn Backend>,
        state_dir: &Path,
        exports: &[ExportRoot],
    ) -> anyhow::Result<FileModel> {
        Self::open_with(
            backend,
            state_dir,
            exports,
            crate::config::DEFAULT_HANDLE_CACHE_ENTRIES,
        )
    }

    /// `open` with `handle_cache_entries` handle-table entries kept in memory
    /// (`state.handle_cache_entries`).
    pub fn open_with(
        backend: Arc<dyn Backend>,
        state_dir: &Path,
        exports: &[ExportRoot],
        handle_cache_entries: usize,
    ) -> anyhow::Result<FileModel> {
        Ok(FileModel {
            inner: Arc::new(imp::Inner::open(
                backend,
                state_dir,
                exports,
                handle_cache_entries,
            )?),
        })
    }

    /// Installs the observer of namespace changes (once; the server does it at start).
    pub fn observe_changes(&self, o: Arc<dyn ChangeObserver>) {
        self.inner.observe_changes(o)
    }

    /// Installs the query of which files have NFSv4 opens (once; the server does it at
    /// start). Without it every REMOVE deletes at once.
    pub fn track_opens(&self, o: Arc<dyn OpenFiles>) {
        self.inner.track_opens(o)
    }

    /// The last NFSv4 open of `fileid` went (CLOSE, client state purged): a file
    /// removed while open is deleted now. Cheap when it was not removed.
    pub fn release(&self, fileid: u64) {
        self.inner.release(fileid)
    }

    /// Whether a file removed while open stays until its last close and, after a
    /// restart, through the NFSv4 grace period (OPEN4_RESULT_PRESERVE_UNLINKED; see
    /// `imp::orphans`): true on stores that outlive the process.
    pub fn preserves_unlinked(&self, node: &Node) -> bool {
        self.inner.preserves_unlinked(&node.key)
    }

    /// The NFSv4 grace period is over: deletes the files removed while open that no
    /// open holds any more (those a previous run kept for reclaims nobody made).
    /// Returns how many.
    pub fn release_unopened_orphans(&self) -> usize {
        self.inner.release_unopened()
    }

    /// Reports a change of `fileid` the caller makes through this model but which the
    /// call's own bookkeeping cannot name (an NFSv4 OPEN that truncates a file it
    /// reached by name): call it before the change and again after it.
    pub fn note_change(&self, fileid: u64) {
        self.inner.note_change(fileid)
    }

    /// A pNFS layout's call of verified data generation `gen` (`crate::fence`): when
    /// this gateway has not seen `gen` for the file, everything it cached of it (the
    /// store's HEAD and read-ahead, the reactors' attributes and pages) is dropped
    /// before the call goes on, so the call reads what the store has now: data another
    /// data server committed before the metadata server moved the generation.
    /// Whether it dropped.
    pub fn fresh_data(&self, node: &Node, gen: u16) -> bool {
        self.inner.fresh_data(node, gen)
    }

    /// Export and file id carried by a handle, WITHOUT authenticating it. For cache
    /// keys and invalidation only: never use it to reach a file (use `resolve`).
    #[inline]
    pub fn peek_handle(fh: &[u8]) -> Option<(u16, u64)> {
        imp::peek_handle(fh)
    }

    /// writeverf3: random per run, changed by every failed sync. A WRITE reply
    /// carries the value read before its data was written, a COMMIT reply the
    /// value read after its sync (so a failure in between always shows).
    pub fn write_verifier(&self) -> [u8; 8] {
        self.inner.write_verifier()
    }

    /// A reactor's own sync failed (a stable WRITE chain's, a COMMIT's `fdatasync`):
    /// moves the verifier on (see `imp::Inner::reset_write_verifier`).
    pub fn reset_write_verifier(&self) {
        self.inner.reset_write_verifier()
    }

    /// The largest file the store can hold (FSINFO `maxfilesize`).
    pub fn max_file_size(&self) -> u64 {
        self.inner.max_file_size()
    }

    /// Adds export roots after open (SIGHUP reload): their ids resolve from now on,
    /// and a root missing from the store is created. Existing ids are re-pointed.
    pub fn add_exports(&self, exports: &[ExportRoot]) -> anyhow::Result<()> {
        self.inner.add_exports(exports)
    }

    /// The root directory of an export (MNT).
    pub fn root(&self, export: u16) -> FsResult<Node> {
        self.inner.root(export)
    }

    /// Encodes a handle for `node`: export id, file id, generation and a keyed MAC.
    pub fn handle(&self, node: &Node) -> FileHandle {
        self.inner.handle(node)
    }

    /// Decodes and authenticates a handle. Malformed or forged → `BadHandle`; a file
    /// id that no longer resolves to an existing object → `Stale`. Never another file.
    pub fn resolve(&self, fh: &[u8]) -> FsResult<Node> {
        self.inner.resolve(fh)
    }

    /// `resolve` then `getattr`, reading the object's metadata once: the metadata
    /// that proves the handle's object exists gives its attributes (a worker's
    /// GETATTR or LOOKUP makes one store HEAD for its object, not two).
    pub fn resolve_attr(&self, fh: &[u8]) -> FsResult<(Node, Attr)> {
        self.inner.resolve_attr(fh)
    }

    pub fn getattr(&self, node: &Node) -> FsResult<Attr> {
        self.inner.getattr(node)
    }

    /// Applies `set`. Size changes truncate or extend (zero-filled).
    pub fn setattr(&self, node: &Node, set: &SetAttr) -> FsResult<()> {
        self.inner.setattr(node, set)?;
        if audit::active() {
            let fh = self.handle(node);
            audit::changed(Change::SetAttr { node, set, fh });
        }
        Ok(())
    }

    /// Looks `name` up in `dir`; "." is `dir`, ".." its parent (the export root's
    /// parent is itself). `NotDir` when `dir` is not a directory.
    pub fn lookup(&self, dir: &Node, name: &[u8]) -> FsResult<Node> {
        self.inner.lookup(dir, name)
    }

    /// `lookup` then `getattr` of what it found, reading its metadata once (the
    /// look-up's own read gives the attributes).
    pub fn lookup_attr(&self, dir: &Node, name: &[u8]) -> FsResult<(Node, Attr)> {
        self.inner.lookup_attr(dir, name)
    }

    pub fn readlink(&self, node: &Node) -> FsResult<Vec<u8>> {
        self.inner.readlink(node)
    }

    /// Reads up to `dst.len()` bytes at `offset` into `dst` (staged, uncommitted data
    /// included). Returns bytes read and whether the end of file was reached.
    pub fn read(&self, node: &Node, offset: u64, dst: &mut [u8]) -> FsResult<(usize, bool)> {
        self.inner.read(node, offset, dst)
    }

    /// The open local file behind a regular file's data (the `fs` backend), for
    /// the I/O a reactor submits itself (`backend.io = "uring"`): `None` elsewhere.
    pub fn data_file(&self, node: &Node) -> Option<DataFile> {
        self.inner.data_file(node)
    }

    /// The directory the keys of `data_file`'s files are paths under (see
    /// `Backend::data_root`): `None` but for the `fs` backend.
    pub fn data_root(&self) -> Option<Arc<std::os::fd::OwnedFd>> {
        self.inner.data_root()
    }

    /// COMMIT's first step, for a reactor that syncs the file itself: whether it
    /// must sync `key` (staged UNSTABLE data, now its to sync, or another sync of the
    /// key still in flight). When true, it must call `end_sync` once the sync ended
    /// (or was never submitted: `ok = false`).
    pub fn begin_sync(&self, key: &str) -> bool {
        self.inner.begin_sync(key, false)
    }

    /// Ends a sync `begin_sync` started; a failed one leaves the key dirty.
    pub fn end_sync(&self, key: &str, ok: bool) {
        self.inner.end_sync(key, ok)
    }

    /// Records staged (UNSTABLE) data of `key` written by a reactor itself: COMMIT
    /// and shutdown sync it.
    pub fn mark_dirty(&self, key: &str) {
        self.inner.mark_dirty(key)
    }

    /// Writes `data` at `offset`. Returns how it was committed: `Unstable` data is
    /// staged; `DataSync`/`FileSync` return only once durable in the backend.
    pub fn write(&self, node: &Node, offset: u64, data: &[u8], stable: Stable) -> FsResult<Stable> {
        self.inner.write(node, offset, data, stable)
    }

    /// Creates a regular file. Guarded on an existing name → `Exist`; Unchecked on an
    /// existing file applies the size in the sattr (truncate) and returns it;
    /// Exclusive/Exclusive41 on an existing file created with the same verifier return
    /// it (a retransmission), with another verifier → `Exist`.
    pub fn create(
        &self,
        dir: &Node,
        name: &[u8],
        how: &CreateMode,
        owner: Owner,
    ) -> FsResult<Node> {
        let n = self.inner.create(dir, name, how, owner)?;
        self.audit_new("create", dir, name, &n);
        Ok(n)
    }

    /// `create`, with `may_truncate` asked before an UNCHECKED create with a size
    /// truncates an existing file (NFSv3's write permission on it): no LOOKUP first.
    pub fn create_checked(
        &self,
        dir: &Node,
        name: &[u8],
        how: &CreateMode,
        owner: Owner,
        may_truncate: &dyn Fn(&Node) -> FsResult<()>,
    ) -> FsResult<Node> {
        let n = self
            .inner
            .create_checked(dir, name, how, owner, may_truncate)?;
        self.audit_new("create", dir, name, &n);
        Ok(n)
    }

    pub fn mkdir(&self, dir: &Node, name: &[u8], set: &SetAttr, owner: Owner) -> FsResult<Node> {
        let n = self.inner.mkdir(dir, name, set, owner)?;
        self.audit_new("mkdir", dir, name, &n);
        Ok(n)
    }

    pub fn symlink(
        &self,
        dir: &Node,
        name: &[u8],
        target: &[u8],
        set: &SetAttr,
        owner: Owner,
    ) -> FsResult<Node> {
        let n = self.inner.symlink(dir, name, target, set, owner)?;
        self.audit_new("symlink", dir, name, &n);
        Ok(n)
    }

    /// Creates a special file (MKNOD; NFSv4 CREATE of a device, socket or fifo):
    /// `kind` Fifo, Sock, Chr or Blk (others → `BadType`), `rdev` (major, minor) kept
    /// for Chr and Blk. Stored as an empty object with its type and device number in
    /// the object metadata, as s3fs does. Guarded: an existing name → `Exist`. Who may
    /// create devices is the caller's policy (NFSv3: root only).
    pub fn mknod(
        &self,
        dir: &Node,
        name: &[u8],
        kind: FileKind,
        rdev: (u32, u32),
        set: &SetAttr,
        owner: Owner,
    ) -> FsResult<Node> {
        let n = self.inner.mknod(dir, name, kind, rdev, set, owner)?;
        self.audit_new("mknod", dir, name, &n);
        Ok(n)
    }

    /// Gives the non-directory `file` the new name `name` in `dir` (LINK): the same
    /// file, handle and file id under both names, `nlink` counting them (see
    /// `imp::links`). A directory → `IsDir`, another export → `XDev`, a name taken →
    /// `Exist`, names checked as for `create`. Returns `file`'s node after the change.
    pub fn link(&self, file: &Node, dir: &Node, name: &[u8]) -> FsResult<Node> {
        let n = self.inner.link(file, dir, name)?;
        self.audit_new("link", dir, name, &n);
        Ok(n)
    }

    /// Removes a non-directory (`IsDir` for a directory).
    pub fn remove(&self, dir: &Node, name: &[u8]) -> FsResult<()> {
        self.inner.remove(dir, name)?;
        self.audit_gone("remove", dir, name);
        Ok(())
    }

    /// Removes an empty directory (`NotEmpty`, `NotDir`).
    pub fn rmdir(&self, dir: &Node, name: &[u8]) -> FsResult<()> {
        self.inner.rmdir(dir, name)?;
        self.audit_gone("rmdir", dir, name);
        Ok(())
    }

    /// Renames; existing targets are replaced per POSIX rules. Handles of the moved
    /// object (and, for a directory, everything under it) keep working.
    pub fn rename(&self, from: &Node, from_name: &[u8], to: &Node, to_name: &[u8]) -> FsResult<()> {
        self.inner.rename(from, from_name, to, to_name)?;
        if audit::active() {
            let fh = self.handle(from);
            audit::changed(Change::Rename {
                from,
                from_name,
                to,
                to_name,
                fh,
            });
        }
        Ok(())
    }

    /// The audit line of a new object (`crate::audit`; nothing while the log is off).
    fn audit_new(&self, what: &'static str, dir: &Node, name: &[u8], new: &Node) {
        if audit::active() {
            let fh = self.handle(new);
            audit::changed(Change::Create {
                what,
                dir,
                name,
                fh,
            });
        }
    }

    /// The audit line of a removed name; the handle is the directory's.
    fn audit_gone(&self, what: &'static str, dir: &Node, name: &[u8]) {
        if audit::active() {
            let fh = self.handle(dir);
            audit::changed(Change::Remove {
                what,
                dir,
                name,
                fh,
            });
        }
    }

    /// Lists `dir` from `cookie` (0 = start), at most `max` entries, "." and ".."
    /// first, one backend page at a time. A cookie stays valid across changes to the
    /// directory; one the model cannot resume from → `BadCookie` (`verf` is not
    /// checked: see `imp::listing`).
    pub fn readdir(&self, dir: &Node, cookie: u64, verf: [u8; 8], max: usize) -> FsResult<DirPage> {
        self.inner.readdir(dir, cookie, verf, max)
    }

    /// When `dir` holds no entry: its cookie verifier and the node its ".." shows,
    /// the start of its listing as `readdir_plus` from cookie 0 would give it (the
    /// reactor's run of a new directory, `cache_dirs::Listings::start_empty`);
    /// `None` when it holds any.
    pub fn empty_start(&self, dir: &Node) -> FsResult<Option<([u8; 8], Node)>> {
        self.inner.empty_start(dir)
    }

    /// `readdir` with each entry's node and attributes (`None` when it cannot be
    /// read now), taken from the same listing where the store allows: READDIRPLUS.
    pub fn readdir_plus(
        &self,
        dir: &Node,
        cookie: u64,
        verf: [u8; 8],
        max: usize,
    ) -> FsResult<Arc<PlusPage>> {
        self.inner.readdir_plus(dir, cookie, verf, max)
    }

    /// Entries a READDIRPLUS-class page should list when its reply shows about
    /// `page` (listing ahead for the reactor's runs where the store allows).
    pub fn plus_count(&self, page: usize) -> usize {
        self.inner.plus_count(page)
    }

    /// A hint before READDIRPLUS looks up each of `names` in `dir`.
    pub fn warm_children(&self, dir: &Node, names: &[&[u8]]) {
        self.inner.warm_children(dir, names)
    }

    /// Makes all staged data of `node` durable in the backend.
    pub fn commit(&self, node: &Node) -> FsResult<()> {
        self.inner.commit(node)
    }

    pub fn fsstat(&self, node: &Node) -> FsResult<FsStat> {
        self.inner.fsstat(node)
    }

    /// Makes everything staged durable (clean shutdown).
    pub fn flush_all(&self) -> FsResult<()> {
        self.inner.flush_all()
    }
}
