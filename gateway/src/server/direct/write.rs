//! WRITE and COMMIT on the reactor's ring: the parts NFSv3 (`Direct::write`,
//! `Direct::commit`) and NFSv4.1 (`v4.rs`) share — the entry checks, the chain
//! queued (write → fsync|fdatasync → statx), the file-model bookkeeping around it,
//! and the settling of its results. Each version keeps only its decoding and its
//! reply.
//!
//! Rules, both versions:
//! - durability: a stable WRITE is answered only once its write was whole and its
//!   sync succeeded, each result checked (`fault::write_outcome`); an UNSTABLE one
//!   joins the model's staged set before its reply, so a COMMIT after that reply
//!   syncs it; a COMMIT is answered only after its `fdatasync` completed;
//! - caches (README "The read cache"): the file's generation moves before the write
//!   is submitted and again before its reply can reach the client, so no READ racing
//!   with the change is cached;
//! - a failed sync moves the write verifier on (`Direct::failed`), so a COMMIT can
//!   never vouch for UNSTABLE data the kernel dropped.

use super::{
    attr_after, fault, Admitted, Base, Direct, Failure, Job, Op, Pending, DATA_SYNC, MAX_END,
    SYNC_BIT, UNSTABLE,
};
use crate::fs::access::{check_writable, check_write, mode_after_write};
use crate::fs::Attr;
use crate::uring::{FileRef, StableSync};
use std::os::fd::AsRawFd;

/// A WRITE's arguments once decoded (either version).
pub(super) struct WriteArgs {
    pub offset: u64,
    pub count: u32,
    /// Where the data starts in the call's record (`count` bytes are there: checked
    /// by the decoder, `Direct::check_write` or `fast_io::parse`).
    pub data_at: usize,
    /// stable_how (`stable_how4` has the same values).
    pub stable: u32,
    /// The write verifier read before the write is submitted (the reply's).
    pub verf: [u8; 8],
}

/// How a COMMIT started. (The call goes back by value, as `Err(job)` does: boxing
/// it would allocate per call.)
#[allow(clippy::large_enum_variant)]
pub(super) enum CommitStart {
    /// Nothing staged and no sync in flight: durable already (as the model's own
    /// commit answers); answer now.
    Durable(Pending),
    /// Its `fdatasync` is queued for this slot.
    Parked(u32),
}

impl Direct {
    /// The checks every ring WRITE passes, in the workers' order (NFSv3
    /// `nfs3::procs` WRITE, NFSv4.1 `io_ops::write`): the entry and the caller's
    /// export, an entry the model may write to, write access, no set-id bits to clear
    /// (a SETATTR first: the worker's), and an end the store can hold. `None`: the
    /// worker answers, with the exact error.
    pub(super) fn admit_write<'a>(
        &'a self,
        job: &Job,
        fh: &[u8],
        offset: u64,
        count: u32,
    ) -> Option<Admitted<'a>> {
        let a = self.admitted(job, fh)?;
        if !a.hit.data.writable || !a.hit.data.clean {
            return None;
        }
        check_writable(&a.caller).ok()?;
        check_write(a.hit.attr, &a.caller).ok()?;
        if mode_after_write(a.hit.attr, &a.caller).is_some() {
            return None;
        }
        offset
            .checked_add(u64::from(count))
            .filter(|&e| e <= MAX_END)?;
        Some(a)
    }

    /// Queues `job`'s WRITE on the ring and parks it: counts the write in the file
    /// table, bumps the file's generation before the change runs, submits the chain
    /// (`submit_write`). Returns its slot, or the job (for a worker) when nothing
    /// was queued — the table as before, the caches having only forgotten the file.
    pub(super) fn start_write(&mut self, job: Job, base: Base, w: WriteArgs) -> Result<u32, Job> {
        let fd = FileRef {
            fd: base._file.as_raw_fd(),
            fixed: base.fixed,
        };
        let slot = *self.free.last().expect("checked non-empty");
        let Some(id) = self.files.begin_write(&base.fh) else {
            return Err(job);
        };
        let op = Op::Write {
            count: w.count,
            stable: w.stable,
            id,
            wrote: None,
            synced: (w.stable == UNSTABLE).then_some(0),
            stat: None,
            verf: w.verf,
        };
        let p = Pending { job, base, op };
        self.shared.gens.bump_file(p.base.attr.fileid);
        let src = p.job.record[w.data_at..].as_ptr();
        // SAFETY: `src` is `count` bytes of the call's record (`WriteArgs::data_at`),
        // kept in `pending[slot]` with the file until every completion is reaped, and
        // the ring is dropped (waiting for them) before `pending`; statx slot `slot`
        // is this pending entry's own.
        let queued = unsafe { self.submit_write(fd, src, w.count, w.offset, w.stable, slot) };
        if !queued {
            self.files.end_write(&p.base.fh, id, None);
            self.shared.gens.bump_file(p.base.attr.fileid);
            return Err(p.job);
        }
        self.park(slot, p);
        Ok(slot)
    }

    /// Queues a WRITE's chain for `pending[slot]`: the write, then for a stable one
    /// the `fsync` (`fdatasync` for DATA_SYNC), then the statx of the
    /// post-operation attributes (the kernel cancels what follows a failed or short
    /// write, not what follows a failed sync: `settle_write` checks every result).
    /// Tags: `slot * 2` the write, `slot * 2 + 1` the statx (into statx slot
    /// `slot`), `SYNC_BIT | slot` the sync.
    ///
    /// # Safety
    /// `src` is `count` readable bytes (the call's record) kept, with the file, in
    /// `pending[slot]` until every completion is reaped; the ring is dropped
    /// (waiting for them) before `pending`.
    unsafe fn submit_write(
        &mut self,
        fd: FileRef,
        src: *const u8,
        count: u32,
        offset: u64,
        stable: u32,
        slot: u32,
    ) -> bool {
        let (write_tag, stat_tag) = (u64::from(slot) * 2, u64::from(slot) * 2 + 1);
        // SAFETY: the caller's contract; statx slot `slot` is this entry's own.
        unsafe {
            if stable == UNSTABLE {
                self.ring.write_then_statx(
                    fd,
                    src,
                    count,
                    offset,
                    write_tag,
                    slot as usize,
                    stat_tag,
                )
            } else {
                let sync = StableSync {
                    datasync: stable == DATA_SYNC,
                    tag: SYNC_BIT | u64::from(slot),
                };
                self.ring.write_sync_statx(
                    fd,
                    src,
                    count,
                    offset,
                    write_tag,
                    sync,
                    slot as usize,
                    stat_tag,
                )
            }
        }
    }

    /// Settles a WRITE whose results (write, sync, statx) are all in: the write
    /// counts only whole, a stable one only synced. A good UNSTABLE write is staged
    /// before its reply; the file table learns the post-write attributes; the
    /// generation moves again. Returns those attributes (`None` when statx gave none
    /// the model would say: `attr_after`), or `Err` after noting the failure: a
    /// worker then writes the data again and answers.
    pub(super) fn settle_write(&mut self, p: &Pending, slot: usize) -> Result<Option<Attr>, ()> {
        let &Op::Write {
            count,
            stable,
            id,
            wrote,
            synced,
            stat,
            ..
        } = &p.op
        else {
            unreachable!("settle_write of a write");
        };
        let failed = fault::write_outcome(
            count,
            [wrote, synced, stat].map(|r| r.unwrap_or(-libc::EIO)),
        );
        let ok = failed.is_none();
        if ok && stable == UNSTABLE {
            self.shared.model.mark_dirty(&p.base.key);
        }
        let post = if ok {
            self.ring.statx(slot).and_then(|st| attr_after(&p.base, st))
        } else {
            None
        };
        self.files.end_write(&p.base.fh, id, post);
        self.shared.gens.bump_file(p.base.attr.fileid);
        match failed {
            Some(f) => {
                self.failed(f);
                Err(())
            }
            None => Ok(post),
        }
    }

    /// Starts a COMMIT: takes the file's key out of the staged set and queues its
    /// `fdatasync` (the reply waits for the completion), or says it is durable
    /// already. `Err`: nothing queued, the key staged again, for a worker.
    pub(super) fn start_commit(&mut self, p: Pending) -> Result<CommitStart, Job> {
        if !self.shared.model.begin_sync(&p.base.key) {
            return Ok(CommitStart::Durable(p));
        }
        let fd = FileRef {
            fd: p.base._file.as_raw_fd(),
            fixed: p.base.fixed,
        };
        let slot = *self.free.last().expect("checked non-empty");
        // SAFETY: the file is kept in `pending[slot]` until the completion is reaped.
        if !unsafe { self.ring.fdatasync(fd, u64::from(slot) * 2) } {
            self.shared.model.end_sync(&p.base.key, false);
            return Err(p.job);
        }
        self.park(slot, p);
        Ok(CommitStart::Parked(slot))
    }

    /// Settles a COMMIT's `fdatasync`: the staged set learns whether it took; a
    /// failure is noted (the verifier moves on) and `false` sends the call to a
    /// worker. The reply's verifier is read after this.
    pub(super) fn settle_commit(&mut self, p: &Pending, result: i32) -> bool {
        let ok = result >= 0;
        if !ok {
            self.failed(Failure::Commit(fault::errno(result)));
        }
        self.shared.model.end_sync(&p.base.key, ok);
        ok
    }
}
