//! Reactor-side data I/O (`backend.io = "uring"`): NFSv3 READ, UNSTABLE
//! WRITE and COMMIT of a file a worker authenticated before are submitted by the
//! reactor that owns the call, through its io_uring, and answered from the poll pass
//! that reaps the completion. No worker thread is involved.
//!
//! Which calls: those whose handle has a current entry in the reactor's file table
//! (`uring::files`: learned from workers' GETATTR/READ/WRITE replies, valid under the
//! read cache's stamp rule and TTL). Export admission and permissions are checked on
//! every call as the worker checks them (an expired entry is revalidated first, see
//! below). Anything else — an unknown or stale handle, a file changed behind the
//! gateway's back, a caller the checks refuse (the worker answers the exact error), a write
//! that must clear set-id bits, a live NFSv4 delegation,
//! a file whose stored mtime the gateway has not dropped yet (its first WRITE does),
//! a full ring, no buffer, a failed operation — goes to a worker as before, with its
//! record untouched (the job is kept until its I/O completes).
//!
//! READ: data read straight into the reply's pool buffer; the reply carries the
//! entry's attributes (at most `ATTR_TTL` old, as a cached GETATTR's). A read that
//! raced with a gateway change is answered (NFS allows either order for concurrent
//! calls) but not cached: the cache fill checks the stamp.
//!
//! WRITE (UNSTABLE): as the worker path does it — the file's generation is bumped
//! before the write is submitted and again before the reply is queued (README "The
//! read cache"), the data goes from the receive buffer (no copy), the key joins the
//! model's staged set (COMMIT and shutdown sync it). The post-operation attributes
//! come from a statx linked after the write: size, and mtime = ctime (= atime unless
//! one is stored) as the file model derives them for an object whose own time
//! speaks. When the stamp after the two bumps is exactly the one before plus two, no
//! other change raced and the entry stays valid under it.
//!
//! WRITE (FILE_SYNC, DATA_SYNC): the same, with an `fsync` (`fdatasync` for
//! DATA_SYNC) linked between the write and the statx; the reply is built only from
//! the completions of all three: the write whole, the sync successful, the statx
//! done — each result checked, as the kernel does not cancel the statx after a
//! failed fsync (`fault`; durability: a stable WRITE is never answered before its
//! data is in the backend). It leaves the model's staged set alone: UNSTABLE data staged
//! before may or may not be covered by this sync (it races with other reactors'
//! writes), so a later COMMIT still syncs it; that costs a sync, never data.
//!
//! GETATTR: answered from the entry (and learned into the read cache), as a worker
//! would answer it from the same attributes; the read cache's own revalidation
//! GETATTRs (stale-while-revalidate) come here first too and only teach the cache.
//!
//! Expired entries: a call whose entry is past `ATTR_TTL` but otherwise
//! current is held while one `statx` of the key's path runs on the ring
//! (`uring::files`, "Revalidation"); an unchanged file renews the entry and the call
//! is taken again, a changed one drops the entry and the call goes to a worker.
//!
//! READ over TCP, large (`SPLICE_MIN`): the range is spliced from the file into a
//! pipe through the ring (`uring::pipes`; on io-wq, so a page-cache miss never
//! blocks the reactor) and the transport splices the pipe into the socket: the
//! page-cache pages are referenced, never copied through user space. The reply is
//! the same as above. Such replies never fill the read cache (no byte of them passes
//! through the gateway's memory). The pages are referenced, so a WRITE landing after
//! the splice and before the client's receive may show in the reply, as with knfsd's
//! splice reads: NFS promises no atomicity between concurrent calls.
//!
//! COMMIT: takes the key out of the staged set and `fdatasync`s the file through the
//! ring; the reply leaves only after the completion (durability is a promise). A
//! failed sync puts the key back and lets a worker answer. COMMIT changes nothing the
//! caches hold, so it bumps no generation here.

// A call the reactor cannot take is handed back by value (`Err(job)`) to go to a
// worker, as it came: boxing it would allocate per call on the hot path.
#![allow(clippy::result_large_err)]

/// Failed ring I/O: its kinds, counter and rate-limited log lines (`fault.rs`).
mod fault;
/// NFSv4.1 READ/WRITE/COMMIT COMPOUNDs on the same ring (`v4.rs`).
mod v4;
/// WRITE and COMMIT, the parts both versions share (`write.rs`).
mod write;

use super::dispatch::{Job, MARK};
use super::Shared;
use crate::cache::{self, FhKey, Fill, FillData, Stamp};
use crate::export::{admit, Caller};
use crate::front::V3_REPLIES as V3;
use crate::fs::access::check_read;
use crate::fs::{Attr, FileKind, NfsTime};
use crate::outcome::{read_eof, read_want, CommitDone, ReadSlots, WriteDone};
use crate::uring::files::{unchanged, Files, Hit, Opened, Validator};
use crate::uring::fixed::FixedSlots;
use crate::uring::pipes::{self, Pipes};
use crate::uring::{Completion, FileRef, Uring};
use engine::mem::{Buf, Pools};
use engine::rpc::{self, Accept};
use engine::tcp::Pipe;
use engine::xdr::{XdrReader, XdrWriter};
use fault::Failure;
use nfs_wire::{NFS_PROGRAM, NFS_V3};
use std::ffi::CStr;
use std::fs::File;
use std::ops::Range;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use write::{CommitStart, WriteArgs};

use nfs_wire::nfs3::{
    DATA_SYNC, FILE_SYNC, NFSPROC3_COMMIT as COMMIT, NFSPROC3_GETATTR as GETATTR,
    NFSPROC3_READ as READ, NFSPROC3_WRITE as WRITE, UNSTABLE,
};
/// Marks the tag of a stable write's sync completion: `SYNC_BIT | slot`, never one
/// of a slot's other tags (`slot * 2`, `slot * 2 + 1`: slots are few). The sync's
/// own result says whether it succeeded: the kernel does not cancel the statx
/// linked after a failed fsync (IOSQE_IO_LINK breaks on a failed or short write,
/// not on a failed IORING_OP_FSYNC: `uring::tests::a_failed_sync_does_not_cancel_its_statx`).
const SYNC_BIT: u64 = 1 << 63;
/// Reply room before READ data: RPC accepted header (24 bytes), status, post_op_attr
/// (4 + 84), count, eof and the data's length.
const READ_REPLY_HEAD: usize = 24 + 4 + 88 + 4 + 4 + 4;
/// WRITE and COMMIT replies: header, status, wcc_data (4 + 24, 4 + 84), count,
/// committed, verifier.
const WCC_REPLY: usize = 24 + 4 + 28 + 88 + 4 + 4 + 8;
/// GETATTR replies: header, status, fattr3.
const GETATTR_REPLY: usize = 24 + 4 + 84;
/// READs of at least this many bytes are offloaded to io_uring's io-wq threads
/// (`Uring::set_offload_min`): a cached 1 MiB read copied inline costs the
/// reactor ~100 µs of its one core, and the reactor was the bottleneck of 1 MiB
/// sequential reads; the hand-off to a worker thread (a wake-up and a completion
/// posted from another core, some µs) only pays for itself on large copies. 4 KiB
/// reads stay inline, where they win (QD32 4 KiB is several times nfs-ganesha).
/// 64 KiB: the read cache's largest READ (`cache::MAX_CACHED_READ`); below it the
/// copy is a few µs.
pub const OFFLOAD_MIN: u32 = 64 * 1024;
/// TCP READs of at least this many bytes are spliced (no copy; see the module docs):
/// below it a copy costs less than the two splices and the pipe hand-offs, and it
/// is where `OFFLOAD_MIN` moves copies off the reactor too.
pub const SPLICE_MIN: u32 = OFFLOAD_MIN;
/// Largest file end a write may reach (the store's limit: an `off_t`).
const MAX_END: u64 = i64::MAX as u64;

/// What an operation in flight does.
enum Op {
    /// The reply being filled: file offset, bytes asked of the file, and the
    /// positions of count, eof, data length and data in `reply`.
    Read {
        reply: Buf,
        offset: u64,
        want: usize,
        at: [usize; 4],
    },
    /// The file-table entry it counted its bumps in, the stable_how asked (and
    /// answered), and the results (write, sync, statx) as they are reaped; an
    /// UNSTABLE write has no sync (`synced` starts at `Some(0)`).
    Write {
        count: u32,
        stable: u32,
        id: u64,
        wrote: Option<i32>,
        synced: Option<i32>,
        stat: Option<i32>,
        /// The write verifier read before the write was submitted (its reply's:
        /// a sync failing meanwhile moves the model's on, see `FileModel::write_verifier`).
        verf: [u8; 8],
    },
    Commit,
    /// A `statx` of the entry's path (kept alive here until it completes).
    Revalidate {
        id: u64,
        path: Arc<CStr>,
        validator: Validator,
    },
    /// A READ whose data is being spliced into `pipe`: the reply's head (up to the
    /// data's length word), file offset, bytes asked of the file, positions as above.
    Splice {
        head: Buf,
        pipe: Pipe,
        offset: u64,
        want: usize,
        at: [usize; 4],
    },
}

/// An operation in flight: the call (kept to hand to a worker if the I/O fails), the
/// open file (kept open until the kernel is done with it) and the entry it used.
struct Pending {
    job: Job,
    base: Base,
    op: Op,
}

/// What an operation keeps of the entry it used.
struct Base {
    _file: Arc<File>,
    fh: FhKey,
    export: u16,
    attr: Attr,
    stamp: Stamp,
    key: Arc<str>,
    atime_set: bool,
    /// The entry's registered-table slot (operations name it instead of `_file`'s
    /// descriptor; held in `fixed` while this operation is queued or in flight).
    fixed: Option<u32>,
}

/// What a reaped completion turned into (kept in a reused vector: its size costs
/// no allocation).
#[allow(clippy::large_enum_variant)]
pub(crate) enum Finished {
    /// Send this reply (and learn `fill` into the read cache first); a READ's
    /// outcome says where its data lie in the reply buffer, for the transport to
    /// place them in a write chunk (RFC 8267 §4, §6.4.1) without reading the reply.
    Reply(Job, Buf, Option<Fill>, Option<Range<usize>>),
    /// The I/O failed: run the call on a worker.
    Fallback(Job),
    /// Learn these attributes into the read cache (a revalidation GETATTR, whose
    /// call was answered already).
    Learned(Fill),
    /// Send this reply head and then the data in the pipe (TCP only, `send_pipe`).
    ReplyPipe(Job, Buf, Pipe),
}

/// One reactor's direct data path.
pub(crate) struct Direct {
    /// First field: dropped first, and its drop waits for every operation in
    /// flight, so no buffer in `pending` is released while the kernel may use it.
    ring: Uring,
    /// Indexed by slot; a completion's tag is `slot * 2` (+ 1 for a write's statx).
    pending: Vec<Option<Pending>>,
    free: Vec<u32>,
    files: Files,
    reaped: Vec<Completion>,
    shared: Arc<Shared>,
    /// Whether reactors cache pages (small reads are then learned).
    cache_pages: bool,
    /// Calls answered without I/O (COMMIT with nothing staged), sent with this
    /// pass's completions.
    done_now: Vec<Finished>,
    /// Per `pending` slot: the NFSv4.1 part of a COMPOUND in flight (`v4::V4`).
    v4: Vec<Option<v4::V4>>,
    /// The backend's root, the directory entries' paths are under (revalidation).
    root: Option<Arc<OwnedFd>>,
    /// Calls whose entry a `statx` just renewed, taken again after the reaping.
    retake: Vec<Job>,
    /// The ring's registered file table: which slots are free, in use, retiring.
    fixed: FixedSlots,
    /// Slots of entries that left the table, being emptied (reused vector).
    retired: Vec<u32>,
    /// Pipes for spliced TCP READ replies; `None`: every READ fills a pool buffer.
    pipes: Option<Pipes>,
    /// Failed operations: counted, and logged once a second per kind.
    faults: fault::Faults,
}

/// The checks every call makes: the entry, and the caller admitted to its export.
struct Admitted<'a> {
    hit: Hit<'a>,
    caller: Caller,
}

impl Direct {
    /// The direct path over a reactor's ring (set up over its pool region).
    pub fn new(mut ring: Uring, shared: Arc<Shared>) -> Direct {
        let n = crate::uring::ENTRIES as usize / 2;
        ring.set_offload_min(OFFLOAD_MIN);
        Direct {
            pending: (0..n).map(|_| None).collect(),
            free: (0..n as u32).rev().collect(),
            files: Files::default(),
            reaped: Vec::with_capacity(2 * n),
            cache_pages: shared.cache_pages,
            root: shared.model.data_root(),
            shared,
            done_now: Vec::with_capacity(n),
            v4: (0..n).map(|_| None).collect(),
            retake: Vec::with_capacity(n),
            fixed: FixedSlots::new(ring.file_slots()),
            retired: Vec::new(),
            ring,
            pipes: None,
            faults: fault::Faults::default(),
        }
    }

    /// Splices large TCP READ replies when `on` (`backend.splice`) and the kernel
    /// has SPLICE and pipes of the largest READ's size (see `uring::pipes`).
    pub fn with_pipes(mut self, on: bool) -> Direct {
        if on && self.ring.splices() {
            self.pipes = Pipes::open(pipes::PIPES, crate::limits::MAX_IO);
        } else if on {
            tracing::info!("TCP READ replies: pool-buffer copies (io_uring without SPLICE)");
        }
        self
    }

    /// Takes back a pipe the TCP transport is done with.
    pub fn put_pipe(&mut self, p: Pipe) {
        match self.pipes.as_mut() {
            Some(pool) => pool.put(p),
            None => drop(p),
        }
    }

    /// Whether a large copy may be in flight on the ring (see `Uring::bulk`).
    pub fn bulk(&self) -> bool {
        self.ring.bulk()
    }

    /// Whether the reactor may sleep now (see `Uring::may_sleep`).
    pub fn may_sleep(&mut self) -> bool {
        self.done_now.is_empty() && self.ring.may_sleep()
    }

    /// Closes the files of expired or stale entries (see `Files::sweep`).
    pub fn sweep(&mut self) {
        self.files.sweep(&self.shared.gens);
        self.empty_retired();
    }

    /// Learns a file a worker opened for a GETATTR/READ/WRITE, and installs it in
    /// the ring's registered file table when a slot is free (one system call per
    /// learning, none per operation).
    pub fn learn(&mut self, o: Opened) {
        let fh = o.fh;
        self.files.insert(&self.shared.gens, o);
        if let Some(fd) = self.files.unregistered(&fh) {
            if let Some(i) = self.fixed.alloc() {
                if !(self.ring.set_file(i, fd) && self.files.set_fixed(&fh, i)) {
                    self.ring.clear_file(i);
                    self.fixed.cleared(i);
                }
            }
        }
        self.empty_retired();
    }

    /// Empties the registered slots of entries that left the table, each once no
    /// operation names it (`uring::fixed`); the others when their last one ends.
    fn empty_retired(&mut self) {
        // Called every pass; files retire rarely.
        if !self.files.has_retired() {
            return;
        }
        self.files.take_retired(&mut self.retired);
        for i in self.retired.drain(..) {
            if self.fixed.retire(i) {
                self.ring.clear_file(i);
                self.fixed.cleared(i);
            }
        }
    }

    /// Takes an NFSv3 GETATTR, READ, WRITE or COMMIT when this reactor can run it
    /// itself, revalidating an expired entry first; otherwise hands the job back
    /// untouched (for a worker).
    pub fn try_take(&mut self, job: Job, pools: &Pools) -> Result<(), Job> {
        let h = &job.header;
        if h.prog == NFS_PROGRAM && h.vers == crate::nfs4::NFS_V4 && h.proc_ == 1 {
            if self.free.is_empty() {
                return Err(job);
            }
            return self.compound(job, pools);
        }
        if h.prog != NFS_PROGRAM || h.vers != NFS_V3 {
            return Err(job);
        }
        match self.take(job, pools) {
            Ok(()) => Ok(()),
            Err(job) => self.revalidate(job),
        }
    }

    /// `try_take` for a current entry.
    fn take(&mut self, job: Job, pools: &Pools) -> Result<(), Job> {
        if self.free.is_empty() {
            return Err(job);
        }
        match job.header.proc_ {
            GETATTR => self.getattr(job, pools),
            READ => self.read(job, pools),
            WRITE if self.ring.writes() => self.write(job),
            COMMIT if self.ring.writes() => self.commit(job, pools),
            _ => Err(job),
        }
    }

    /// The handle's current entry and the caller admitted to its export.
    fn admitted<'a>(&'a self, job: &Job, fh: &[u8]) -> Option<Admitted<'a>> {
        let hit = self.files.get(&self.shared.gens, fh)?;
        let exports = self.shared.exports.load();
        let export = exports.get(hit.export)?;
        let caller = admit(export, job.peer.ip(), &job.header.cred).ok()?;
        if hit.attr.kind != FileKind::Reg {
            return None;
        }
        // A pNFS layout's credentials: judged here while the epoch is cached, else
        // (and when refused) by a worker (`crate::fence`).
        let fence = self.shared.fence.as_deref();
        let caller = crate::fence::admit_cached(fence, &job.header.cred, caller, hit.attr)??;
        // A data generation not yet dropped for: a worker drops the caches first.
        if !self.shared.gens.data_ok(hit.attr.fileid, &job.header.cred) {
            return None;
        }
        Some(Admitted { hit, caller })
    }

    fn read(&mut self, job: Job, pools: &Pools) -> Result<(), Job> {
        let job = match self.read_spliced(job, pools) {
            Ok(()) => return Ok(()),
            Err(job) => job,
        };
        let Some((base, reply, offset, want, at)) = self.prepare_read(&job, pools, false) else {
            return Err(job);
        };
        self.start_read(job, base, reply, offset, want, at)
            .map(|_| ())
    }

    /// Queues a READ of `want` bytes at `offset` into `reply` at `at[3]` (both
    /// versions) and parks the call; returns its slot, or the job when nothing was
    /// queued. Nothing to read (at or past the end, or count 0) is answered in this
    /// pass, with no I/O.
    fn start_read(
        &mut self,
        job: Job,
        base: Base,
        mut reply: Buf,
        offset: u64,
        want: usize,
        at: [usize; 4],
    ) -> Result<u32, Job> {
        let fd = FileRef {
            fd: base._file.as_raw_fd(),
            fixed: base.fixed,
        };
        let slot = *self.free.last().expect("checked non-empty");
        if want > 0 {
            let dst = reply.spare_mut()[at[3]..at[3] + want].as_mut_ptr();
            // SAFETY: `dst` is `want` bytes of `reply`, a pool buffer kept in
            // `pending[slot]` (never touched) until this read's completion is reaped;
            // the file is kept there too, so the descriptor stays open; and the ring
            // is dropped (waiting for the read) before `pending`.
            let queued = unsafe {
                self.ring
                    .read(fd, dst, want as u32, offset, u64::from(slot) * 2)
            };
            if !queued {
                return Err(job);
            }
        }
        let op = Op::Read {
            reply,
            offset,
            want,
            at,
        };
        self.park(slot, Pending { job, base, op });
        if want == 0 {
            self.reaped.push(Completion {
                tag: u64::from(slot) * 2,
                result: 0,
            });
        }
        Ok(slot)
    }

    /// A large READ over TCP, spliced (module docs): `Err` hands the job back for the
    /// pool-buffer path (not TCP, small, no pipe for this connection, nothing to read,
    /// or whatever `prepare_read` refuses).
    fn read_spliced(&mut self, job: Job, pools: &Pools) -> Result<(), Job> {
        let Some(conn) = job.conn.tcp_conn() else {
            return Err(job);
        };
        let Some(pool) = self.pipes.as_mut() else {
            return Err(job);
        };
        // A peek at offset and count: small READs leave at once.
        let peek = job.record.get(job.args_at..).and_then(|a| {
            let mut r = XdrReader::new(a);
            r.opaque_var(crate::fs::FH_MAX).ok()?;
            Some((r.u64().ok()?, r.u32().ok()?))
        });
        let Some((offset, count)) = peek.filter(|&(_, c)| c >= SPLICE_MIN) else {
            return Err(job);
        };
        let most = (count as usize).min(crate::limits::MAX_IO);
        let Some(pipe) = pool.take(conn, offset, most) else {
            return Err(job);
        };
        let Some((base, head, offset, want, at)) = self.prepare_read(&job, pools, true) else {
            self.put_pipe(pipe);
            return Err(job);
        };
        if want == 0 {
            // At or past the end: the pool-buffer path answers it with no I/O.
            self.put_pipe(pipe);
            return Err(job);
        }
        let slot = *self.free.last().expect("checked non-empty");
        // SAFETY: the file and the pipe are kept in `pending[slot]` until this
        // completion is reaped, and the ring is dropped (waiting for it) first.
        let queued = unsafe {
            self.ring.splice(
                base._file.as_raw_fd(),
                offset,
                pipe.write_fd(),
                want as u32,
                u64::from(slot) * 2,
            )
        };
        if !queued {
            self.put_pipe(pipe);
            return Err(job);
        }
        let op = Op::Splice {
            head,
            pipe,
            offset,
            want,
            at,
        };
        self.park(slot, Pending { job, base, op });
        Ok(())
    }

    /// READ's checks and reply head: (entry, reply, offset, bytes to read, positions
    /// of count, eof, length and data). `head_only`: the buffer ends at the data's
    /// length word (the data is spliced).
    #[allow(clippy::type_complexity)]
    fn prepare_read(
        &self,
        job: &Job,
        pools: &Pools,
        head_only: bool,
    ) -> Option<(Base, Buf, u64, usize, [usize; 4])> {
        let mut r = XdrReader::new(job.record.get(job.args_at..)?);
        let fh = r.opaque_var(crate::fs::FH_MAX).ok()?;
        let offset = r.u64().ok()?;
        let count = r.u32().ok()?;
        let a = self.admitted(job, fh)?;
        check_read(a.hit.attr, &a.caller).ok()?;
        let want = read_want(a.hit.attr.size, offset, count);
        let room = if head_only { 0 } else { want + 4 };
        let mut reply = pools.alloc(MARK + READ_REPLY_HEAD + room)?;
        let mut w = XdrWriter::at(reply.spare_mut(), MARK);
        rpc::write_accepted(&mut w, job.header.xid, Accept::Success).ok()?;
        let slots = (V3.read_slots)(&mut w, a.hit.attr).ok()?;
        let data_at = w.position();
        if !head_only {
            // Room for the data and its padding (zeroed now; the read overwrites it).
            w.reserve_opaque_fixed(want).ok()?;
        }
        Some((
            base_of(&a, fh)?,
            reply,
            offset,
            want,
            [slots.count_at, slots.eof_at, slots.len_at, data_at],
        ))
    }

    fn write(&mut self, job: Job) -> Result<(), Job> {
        let Some((base, args)) = self.check_write(&job) else {
            return Err(job);
        };
        self.start_write(job, base, args).map(|_| ())
    }

    /// WRITE's decoding and checks (`admit_write`), or `None` for a worker.
    fn check_write(&self, job: &Job) -> Option<(Base, WriteArgs)> {
        if self.shared.state.delegations.any_live() {
            // v3 writes may have to recall a delegation (server::v3_recall).
            return None;
        }
        let args = job.record.get(job.args_at..)?;
        let mut r = XdrReader::new(args);
        let fh = r.opaque_var(crate::fs::FH_MAX).ok()?;
        let offset = r.u64().ok()?;
        let count = r.u32().ok()?;
        let stable = r.u32().ok()?;
        if stable > FILE_SYNC {
            // Not a stable_how: the worker answers the decoding error.
            return None;
        }
        let len = r.u32().ok()?;
        let data_at = job.args_at + r.position();
        if count == 0 || len < count || args.len() - r.position() < count as usize {
            return None;
        }
        let a = self.admit_write(job, fh, offset, count)?;
        let w = WriteArgs {
            offset,
            count,
            data_at,
            stable,
            verf: self.shared.model.write_verifier(),
        };
        Some((base_of(&a, fh)?, w))
    }

    fn commit(&mut self, job: Job, pools: &Pools) -> Result<(), Job> {
        let Some(base) = job
            .record
            .get(job.args_at..)
            .and_then(|args| XdrReader::new(args).opaque_var(crate::fs::FH_MAX).ok())
            .and_then(|fh| base_of(&self.admitted(&job, fh)?, fh))
        else {
            return Err(job);
        };
        let p = Pending {
            job,
            base,
            op: Op::Commit,
        };
        match self.start_commit(p)? {
            CommitStart::Parked(_) => Ok(()),
            CommitStart::Durable(p) => {
                match wcc_reply(pools, &p, None, self.shared.model.write_verifier()) {
                    Some(b) => {
                        self.done_now.push(Finished::Reply(p.job, b, None, None));
                        Ok(())
                    }
                    None => Err(p.job),
                }
            }
        }
    }

    fn getattr(&mut self, job: Job, pools: &Pools) -> Result<(), Job> {
        let Some(fh) = job
            .record
            .get(job.args_at..)
            .and_then(|args| XdrReader::new(args).opaque_var(crate::fs::FH_MAX).ok())
        else {
            return Err(job);
        };
        let fill = if job.revalidate {
            // No reply: admission is checked on every cache hit.
            let Some(hit) = self.files.get(&self.shared.gens, fh) else {
                return Err(job);
            };
            fill_of(fh, hit.export, hit.attr, hit.stamp)
        } else {
            let Some(a) = self.admitted(&job, fh) else {
                return Err(job);
            };
            fill_of(fh, a.hit.export, a.hit.attr, a.hit.stamp)
        };
        let Some(fill) = fill else {
            return Err(job);
        };
        if job.revalidate {
            self.done_now.push(Finished::Learned(fill));
            return Ok(());
        }
        match getattr_reply(pools, &job, &fill.attr) {
            Some(b) => {
                self.done_now
                    .push(Finished::Reply(job, b, Some(fill), None));
                Ok(())
            }
            None => Err(job),
        }
    }

    /// A call whose entry is expired but may be revalidated: one `statx` of the
    /// key's path, the call held until it completes (`finish_revalidate`).
    fn revalidate(&mut self, job: Job) -> Result<(), Job> {
        // Only calls `take` runs: any other would be renewed for nothing and still
        // go to a worker.
        // `writes()` also says the kernel has STATX.
        let takes =
            self.ring.writes() && matches!(job.header.proc_, GETATTR | READ | WRITE | COMMIT);
        if !takes {
            return Err(job);
        }
        let (Some(root), Some(&slot)) = (self.root.as_ref(), self.free.last()) else {
            return Err(job);
        };
        let dirfd = root.as_raw_fd();
        let Some((fh, e)) = job
            .record
            .get(job.args_at..)
            .and_then(|args| XdrReader::new(args).opaque_var(crate::fs::FH_MAX).ok())
            .and_then(|fh| Some((FhKey::new(fh)?, self.files.expired(&self.shared.gens, fh)?)))
        else {
            return Err(job);
        };
        let base = Base {
            _file: e.data.file,
            fh,
            export: e.export,
            attr: e.attr,
            stamp: e.stamp,
            key: e.key,
            atime_set: e.data.atime_set,
            // The statx names the path: no registered file.
            fixed: None,
        };
        let op = Op::Revalidate {
            id: e.id,
            path: e.path,
            validator: e.validator,
        };
        let p = Pending { job, base, op };
        let Op::Revalidate { path, .. } = &p.op else {
            unreachable!("built above");
        };
        // SAFETY: the root descriptor is held by `self.root` for the ring's life and
        // the path by `pending[slot]` until the completion is reaped (the ring is
        // dropped, waiting for it, before both); statx slot `slot` is this pending
        // entry's own.
        if !unsafe {
            self.ring
                .statx_path(dirfd, path.as_ptr(), slot as usize, u64::from(slot) * 2)
        } {
            return Err(p.job);
        }
        self.park(slot, p);
        Ok(())
    }

    /// A revalidation's `statx` completed: an unchanged file renews the entry and
    /// the call is taken again (after this pass's reaping); anything else drops the
    /// entry and sends the call to a worker.
    fn finish_revalidate(&mut self, p: Pending, slot: usize, result: i32) -> Option<Finished> {
        let Op::Revalidate { id, validator, .. } = p.op else {
            unreachable!("finish_revalidate of a revalidation");
        };
        let same = result == 0
            && self
                .ring
                .statx(slot)
                .is_some_and(|st| unchanged(&validator, p.base.attr.size, st));
        crate::stats::revalidations::count(same);
        if same {
            self.files.renew(&p.base.fh, id);
            self.retake.push(p.job);
            return None;
        }
        self.files.forget(&p.base.fh, id);
        Some(Finished::Fallback(p.job))
    }

    /// A ring operation failed: counted and logged; a failed sync (a stable WRITE's
    /// or a COMMIT's) also moves the write verifier on: what it lost may include
    /// other WRITEs' staged data, and the worker's retry may well sync without an
    /// error (the kernel reports a write-back error once).
    fn failed(&mut self, f: Failure) {
        if matches!(f, Failure::Sync(_) | Failure::Commit(_)) {
            self.shared.model.reset_write_verifier();
        }
        self.faults.note(f);
    }

    fn park(&mut self, slot: u32, p: Pending) {
        if let Some(i) = p.base.fixed {
            self.fixed.hold(i);
        }
        self.free.pop();
        self.pending[slot as usize] = Some(p);
    }

    /// Submits what this pass queued (one system call), reaps completions and turns
    /// them into replies (or fallbacks) for `out`. Returns the completions handled.
    pub fn poll(&mut self, out: &mut Vec<Finished>, pools: &Pools) -> usize {
        out.append(&mut self.done_now);
        self.ring.submit();
        self.ring.reap(&mut self.reaped);
        let n = self.reaped.len();
        if n == 0 {
            // Nothing reaped, so nothing to retake or to append (`done_now` was
            // taken above); files may still have retired (an eviction by `learn`).
            self.empty_retired();
            return 0;
        }
        let mut reaped = std::mem::take(&mut self.reaped);
        for c in reaped.drain(..) {
            let is_sync = c.tag & SYNC_BIT != 0;
            let slot = if is_sync {
                (c.tag & !SYNC_BIT) as usize
            } else {
                (c.tag / 2) as usize
            };
            let Some(p) = self.pending.get_mut(slot).and_then(Option::as_mut) else {
                tracing::error!(tag = c.tag, "io_uring: completion for nothing pending");
                continue;
            };
            if let Op::Write {
                wrote,
                synced,
                stat,
                ..
            } = &mut p.op
            {
                // Finished once all its completions are in (any order): a stable
                // write's sync result is one of them.
                if is_sync {
                    *synced = Some(c.result);
                } else if c.tag % 2 == 0 {
                    *wrote = Some(c.result);
                } else {
                    *stat = Some(c.result);
                }
                if wrote.is_none() || synced.is_none() || stat.is_none() {
                    continue;
                }
            } else if is_sync {
                tracing::error!(tag = c.tag, "io_uring: sync completion for no write");
                continue;
            }
            let p = self.pending[slot].take().expect("present above");
            if let Some(i) = p.base.fixed.filter(|&i| self.fixed.release(i)) {
                self.ring.clear_file(i);
                self.fixed.cleared(i);
            }
            self.free.push(slot as u32);
            out.extend(self.finish(p, slot, c.result, pools));
        }
        self.reaped = reaped;
        while let Some(job) = self.retake.pop() {
            if let Err(job) = self.take(job, pools) {
                out.push(Finished::Fallback(job));
            }
        }
        out.append(&mut self.done_now);
        self.empty_retired();
        n
    }

    fn finish(&mut self, p: Pending, slot: usize, result: i32, pools: &Pools) -> Option<Finished> {
        if let Some(v4) = self.v4.get_mut(slot).and_then(Option::take) {
            return Some(self.finish4(p, v4, slot, result, pools));
        }
        Some(match p.op {
            Op::Read { .. } => self.finish_read(p, result),
            Op::Splice { .. } => self.finish_splice(p, result),
            Op::Write { .. } => self.finish_write(p, slot, pools),
            Op::Revalidate { .. } => return self.finish_revalidate(p, slot, result),
            Op::Commit => {
                if !self.settle_commit(&p, result) {
                    return Some(Finished::Fallback(p.job));
                }
                // Read after the sync: a failure before it shows as a new verifier.
                match wcc_reply(pools, &p, None, self.shared.model.write_verifier()) {
                    Some(b) => Finished::Reply(p.job, b, None, None),
                    // Durable already: the worker's COMMIT finds nothing staged.
                    None => Finished::Fallback(p.job),
                }
            }
        })
    }

    fn finish_read(&mut self, p: Pending, result: i32) -> Finished {
        let Pending { job, base, op } = p;
        let Base {
            fh,
            export,
            attr,
            stamp,
            ..
        } = base;
        let Op::Read {
            mut reply,
            offset,
            want,
            at: [count_at, eof_at, len_at, data_at],
        } = op
        else {
            unreachable!("finish_read of a read");
        };
        let slots = ReadSlots {
            count_at,
            eof_at,
            len_at,
        };
        if result < 0 {
            self.faults.note(Failure::Read(fault::errno(result)));
            return Finished::Fallback(job);
        }
        let got = (result as usize).min(want);
        let eof = read_eof(attr.size, offset, want, got);
        let end = data_at + want + (4 - want % 4) % 4;
        let mut w = XdrWriter::at(&mut reply.spare_mut()[..end], end);
        (V3.patch_read)(&mut w, &slots, got, eof);
        w.truncate_opaque(data_at, got);
        let len = w.position();
        reply.set_len(len);
        let fill = (self.cache_pages && got > 0 && want <= cache::MAX_CACHED_READ).then(|| Fill {
            fh,
            export,
            attr,
            stamp,
            data: Some(FillData::InReply {
                offset,
                at: data_at,
                len: got,
            }),
            exact: false,
        });
        Finished::Reply(job, reply, fill, Some(data_at..data_at + got))
    }

    /// A spliced READ's completion: the head gets count and eof as `finish_read`
    /// writes them; the pipe goes with it to the transport. Never fills the cache.
    fn finish_splice(&mut self, p: Pending, result: i32) -> Finished {
        let Pending { job, base, op } = p;
        let Op::Splice {
            mut head,
            mut pipe,
            offset,
            want,
            at: [count_at, eof_at, len_at, data_at],
        } = op
        else {
            unreachable!("finish_splice of a splice");
        };
        let slots = ReadSlots {
            count_at,
            eof_at,
            len_at,
        };
        if result < 0 {
            self.faults.note(Failure::Splice(fault::errno(result)));
            // What the pipe holds is unknown: a fresh one takes its place.
            if let Some(pool) = self.pipes.as_mut() {
                pool.replace(pipe);
            }
            return Finished::Fallback(job);
        }
        let got = (result as usize).min(want);
        pipe.set_filled(got);
        // A splice may stop short of the end (it moves what the pipe takes at once):
        // a short READ without eof is legal and the client asks for the rest;
        // nothing at all means the end was reached (a file shortened elsewhere).
        let eof = got == 0 || offset.saturating_add(got as u64) >= base.attr.size;
        let mut w = XdrWriter::at(&mut head.spare_mut()[..data_at], data_at);
        (V3.patch_read)(&mut w, &slots, got, eof);
        head.set_len(data_at);
        if got == 0 {
            self.put_pipe(pipe);
            return Finished::Reply(job, head, None, None);
        }
        Finished::ReplyPipe(job, head, pipe)
    }

    fn finish_write(&mut self, p: Pending, slot: usize, pools: &Pools) -> Finished {
        let Op::Write {
            count,
            stable,
            verf,
            ..
        } = p.op
        else {
            unreachable!("finish_write of a write");
        };
        let Ok(post) = self.settle_write(&p, slot) else {
            return Finished::Fallback(p.job);
        };
        match wcc_reply(pools, &p, Some((post, count, stable)), verf) {
            Some(b) => Finished::Reply(p.job, b, None, None),
            // The data is written and staged: a worker writes it again and answers.
            None => Finished::Fallback(p.job),
        }
    }
}

/// What an answer from the entry teaches the read cache: its attributes under its
/// stamp (decoded-fattr3 precision, as a worker's NFSv3 reply teaches).
fn fill_of(fh: &[u8], export: u16, attr: &Attr, stamp: Stamp) -> Option<Fill> {
    Some(Fill {
        fh: FhKey::new(fh)?,
        export,
        attr: *attr,
        stamp,
        data: None,
        exact: false,
    })
}

/// GETATTR3resok: status and the attributes.
fn getattr_reply(pools: &Pools, job: &Job, attr: &Attr) -> Option<Buf> {
    let mut b = pools.alloc(MARK + GETATTR_REPLY)?;
    let mut w = XdrWriter::at(b.spare_mut(), MARK);
    rpc::write_accepted(&mut w, job.header.xid, Accept::Success).ok()?;
    (V3.getattr_ok)(&mut w, attr).ok()?;
    let n = w.position();
    b.set_len(n);
    Some(b)
}

/// What an operation keeps of the admitted entry for `fh`.
fn base_of(a: &Admitted, fh: &[u8]) -> Option<Base> {
    Some(Base {
        _file: a.hit.data.file.clone(),
        fh: FhKey::new(fh)?,
        export: a.hit.export,
        attr: *a.hit.attr,
        stamp: a.hit.stamp,
        key: a.hit.key.clone(),
        atime_set: a.hit.data.atime_set,
        fixed: a.hit.fixed,
    })
}

/// The attributes after a write, as the file model derives them for an object whose
/// own modification time speaks (`DataFile::clean`): size from the file, mtime =
/// ctime = its mtime, atime too unless one is stored. `None` for a whole-second
/// mtime (the model then mixes in a hash of the ETag; a worker's GETATTR says it).
fn attr_after(p: &Base, st: &libc::statx) -> Option<Attr> {
    // The model's time is the object's mtime in ns since 1970 (`object_meta`).
    if st.stx_mtime.tv_nsec == 0 || st.stx_mtime.tv_sec < 0 || st.stx_mtime.tv_nsec >= 1_000_000_000
    {
        return None;
    }
    let t = NfsTime {
        sec: st.stx_mtime.tv_sec,
        nsec: st.stx_mtime.tv_nsec,
    };
    let mut a = p.attr;
    a.size = st.stx_size;
    a.used = a.size.div_ceil(4096).saturating_mul(4096);
    a.mtime = t;
    a.ctime = t;
    if !p.atime_set {
        a.atime = t;
    }
    Some(a)
}

/// WRITE3resok / COMMIT3resok: status, wcc_data (the entry's attributes before,
/// `post` after; COMMIT changes none), then for a WRITE the count and how it was
/// committed (as asked: a stable one was synced as asked), and the write verifier.
fn wcc_reply(
    pools: &Pools,
    p: &Pending,
    write: Option<(Option<Attr>, u32, u32)>,
    verf: [u8; 8],
) -> Option<Buf> {
    let mut b = pools.alloc(MARK + WCC_REPLY)?;
    let mut w = XdrWriter::at(b.spare_mut(), MARK);
    rpc::write_accepted(&mut w, p.job.header.xid, Accept::Success).ok()?;
    let before = p.base.attr;
    match write {
        Some((after, count, committed)) => (V3.write_ok)(
            &mut w,
            &WriteDone {
                before,
                after,
                count,
                committed,
                verf,
            },
        ),
        None => (V3.commit_ok)(&mut w, &CommitDone { attr: before, verf }),
    }
    .ok()?;
    let n = w.position();
    b.set_len(n);
    Some(b)
}
