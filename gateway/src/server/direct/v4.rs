//! NFSv4.1 data I/O on the reactor's ring: `SEQUENCE, PUTFH, READ`,
//! `SEQUENCE, PUTFH, WRITE [, GETATTR]` and `SEQUENCE, PUTFH, COMMIT` of a
//! file in the reactor's file table, run as the NFSv3 calls of `direct` are (same
//! entry, admission and permission checks, same I/O, same file-model bookkeeping),
//! answered with the COMPOUND4res a worker would write (`nfs4::fast_io`, reached
//! through `front::V4_PATHS`: the session, stateid and delegation checks, the slot
//! claim, the reply cache).
//!
//! A call is taken only when every check passes; then its slot is claimed and stays
//! busy until the reply is queued (a retransmission meanwhile: NFS4ERR_DELAY). An
//! I/O that fails, or a reply that cannot be built, gives the slot back untouched
//! (`front::V4Started` abandons it when dropped) and the call goes to a worker, which
//! answers it as new — for a WRITE after redoing it, as `direct` does for NFSv3.
//!
//! A FILE_SYNC4 (DATA_SYNC4) WRITE links an `fsync` (`fdatasync`) between the write
//! and its statx, as `Direct::write` does for NFSv3: the reply is built only once
//! the write was whole, the sync succeeded and the statx ran (each result checked,
//! `fault::write_outcome`), so a stable WRITE is never answered before its data is
//! durable.
//!
//! The entry checks, the WRITE chain, COMMIT's sync and the bookkeeping around them
//! (generation bumps before submit and before the reply, the staged set,
//! statx-derived post attributes) are NFSv3's (`write.rs`); this module adds the v4
//! decoding, the slot claim and the v4 reply.

use super::write::{CommitStart, WriteArgs};
use super::{base_of, fault, Base, Direct, Failure, Finished, Job, Op, Pending, MARK};
use crate::cache::{self, Fill, FillData};
use crate::front::{
    V4Bitmap as Bitmap, V4IoCall as IoCall, V4IoOp as IoOp, V4Started as Started,
    V4Target as Target, V4_IO_GETATTR_MAX as GETATTR_MAX, V4_IO_HEAD_MAX as HEAD_MAX,
    V4_PATHS as V4,
};
use crate::fs::access::check_read;
use engine::mem::{Buf, Pools};
use engine::rpc::{self, Accept};
use engine::xdr::XdrWriter;

/// WRITE4resok (count, committed, verifier) and COMMIT4resok (verifier) bytes.
const WRITE_TAIL: usize = 16;
const COMMIT_TAIL: usize = 8;

/// What a v4 call in flight keeps besides its `Pending`: its slot, and for WRITE and
/// COMMIT the reply built at submit time (WRITE's GETATTR is appended on completion).
pub(super) struct V4 {
    started: Started,
    /// WRITE/COMMIT: the reply so far; READ's reply is its `Op::Read` buffer.
    reply: Option<Buf>,
    /// A trailing GETATTR's bitmap, and where the handle is in the call's record.
    getattr: Option<(Bitmap, usize, usize)>,
}

impl Direct {
    /// Takes a `SEQUENCE, PUTFH, READ|WRITE|COMMIT` COMPOUND when this reactor can run
    /// it itself; otherwise hands the job back untouched (no slot claimed).
    pub(super) fn compound(&mut self, job: Job, pools: &Pools) -> Result<(), Job> {
        let c = match (&job.plan, job.record.get(job.args_at..)) {
            (Some(plan), Some(args)) => (V4.io_call)(args, plan),
            _ => None,
        };
        let Some(c) = c else {
            return Err(job);
        };
        match c.op {
            IoOp::Read { .. } => self.read4(job, &c, pools),
            IoOp::Write { .. } if self.ring.writes() => self.write4(job, &c, pools),
            IoOp::Commit { .. } if self.ring.writes() => self.commit4(job, &c, pools),
            _ => Err(job),
        }
    }

    fn read4(&mut self, job: Job, c: &IoCall, pools: &Pools) -> Result<(), Job> {
        let Some((base, reply, offset, want, at, started)) = self.prepare_read4(&job, c, pools)
        else {
            return Err(job);
        };
        // `started` is dropped on `Err`: the slot is given back for the worker.
        let slot = self.start_read(job, base, reply, offset, want, at)?;
        self.v4[slot as usize] = Some(V4 {
            started,
            reply: None,
            getattr: None,
        });
        Ok(())
    }

    /// READ's checks (as `Direct::prepare_read`, then `V4_PATHS.io_start`) and the reply
    /// up to the data: (entry, reply, offset, bytes to read, positions of -, eof,
    /// length and data, the claimed slot).
    #[allow(clippy::type_complexity)]
    fn prepare_read4(
        &self,
        job: &Job,
        c: &IoCall,
        pools: &Pools,
    ) -> Option<(Base, Buf, u64, usize, [usize; 4], Started)> {
        let IoOp::Read { offset, count, .. } = c.op else {
            return None;
        };
        let args = job.record.get(job.args_at..)?;
        let fh = args.get(c.fh.clone())?;
        let a = self.admitted(job, fh)?;
        check_read(a.hit.attr, &a.caller).ok()?;
        // As `io_ops::read` (its reply buffer has room for MAX_IO) and `prepare_read`.
        let want = crate::outcome::read_want(a.hit.attr.size, offset, count);
        let pad = want.next_multiple_of(4);
        let mut reply = pools.alloc(MARK + HEAD_MAX + 8 + pad)?;
        let mut w = XdrWriter::at(reply.spare_mut(), MARK);
        rpc::write_accepted(&mut w, job.header.xid, Accept::Success).ok()?;
        let t = Target {
            attr: a.hit.attr,
            tail_max: 8 + pad,
        };
        let base = base_of(&a, fh)?;
        let started = (V4.io_start)(&self.shared.state, c, args, &t, &mut w)?;
        let eof_at = w.reserve_u32().ok()?;
        let len_at = w.reserve_u32().ok()?;
        let data_at = w.position();
        w.reserve_opaque_fixed(want).ok()?;
        Some((
            base,
            reply,
            offset,
            want,
            [0, eof_at, len_at, data_at],
            started,
        ))
    }

    fn write4(&mut self, job: Job, c: &IoCall, pools: &Pools) -> Result<(), Job> {
        let IoOp::Write {
            offset,
            stable,
            data: (data_at, count),
            getattr,
            ..
        } = c.op
        else {
            return Err(job);
        };
        let Some((base, reply, started, verf)) = self.check_write4(&job, c, pools) else {
            return Err(job);
        };
        let fh = (job.args_at + c.fh.start, job.args_at + c.fh.end);
        let w = WriteArgs {
            offset,
            count,
            data_at: job.args_at + data_at,
            stable,
            verf,
        };
        // `started` is dropped on `Err`: the slot is given back for the worker.
        let slot = self.start_write(job, base, w)?;
        self.v4[slot as usize] = Some(V4 {
            started,
            reply: Some(reply),
            getattr: getattr.map(|b| (b, fh.0, fh.1)),
        });
        Ok(())
    }

    /// WRITE's checks in `io_ops::write`'s order (entry and caller as
    /// `Direct::check_write`; then `V4_PATHS.io_start`: stateid, size, delegations) and
    /// the reply up to its GETATTR.
    #[allow(clippy::type_complexity)]
    fn check_write4(
        &self,
        job: &Job,
        c: &IoCall,
        pools: &Pools,
    ) -> Option<(Base, Buf, Started, [u8; 8])> {
        let IoOp::Write {
            offset,
            data: (_, count),
            getattr,
            ..
        } = c.op
        else {
            return None;
        };
        let args = job.record.get(job.args_at..)?;
        let fh = args.get(c.fh.clone())?;
        let a = self.admit_write(job, fh, offset, count)?;
        let extra = if getattr.is_some() { GETATTR_MAX } else { 0 };
        let mut reply = pools.alloc(MARK + HEAD_MAX + WRITE_TAIL + extra)?;
        let mut w = XdrWriter::at(reply.spare_mut(), MARK);
        rpc::write_accepted(&mut w, job.header.xid, Accept::Success).ok()?;
        let t = Target {
            attr: a.hit.attr,
            tail_max: WRITE_TAIL + extra,
        };
        let base = base_of(&a, fh)?;
        let started = (V4.io_start)(&self.shared.state, c, args, &t, &mut w)?;
        let IoOp::Write { stable, .. } = c.op else {
            return None;
        };
        // Read before the write is submitted (`FileModel::write_verifier`).
        let verf = self.shared.model.write_verifier();
        (V4.put_write_ok)(&mut w, count, stable, &verf).ok()?;
        let n = w.position();
        reply.set_len(n);
        Some((base, reply, started, verf))
    }

    fn commit4(&mut self, job: Job, c: &IoCall, pools: &Pools) -> Result<(), Job> {
        let Some((base, reply, started)) = self.check_commit4(&job, c, pools) else {
            return Err(job);
        };
        let v4 = V4 {
            started,
            reply: Some(reply),
            getattr: None,
        };
        let p = Pending {
            job,
            base,
            op: Op::Commit,
        };
        match self.start_commit(p)? {
            CommitStart::Parked(slot) => self.v4[slot as usize] = Some(v4),
            CommitStart::Durable(p) => {
                let f = self.reply4(p, v4);
                self.done_now.push(f);
            }
        }
        Ok(())
    }

    fn check_commit4(&self, job: &Job, c: &IoCall, pools: &Pools) -> Option<(Base, Buf, Started)> {
        let args = job.record.get(job.args_at..)?;
        let fh = args.get(c.fh.clone())?;
        let a = self.admitted(job, fh)?;
        let mut reply = pools.alloc(MARK + HEAD_MAX + COMMIT_TAIL)?;
        let mut w = XdrWriter::at(reply.spare_mut(), MARK);
        rpc::write_accepted(&mut w, job.header.xid, Accept::Success).ok()?;
        let t = Target {
            attr: a.hit.attr,
            tail_max: COMMIT_TAIL,
        };
        let base = base_of(&a, fh)?;
        let started = (V4.io_start)(&self.shared.state, c, args, &t, &mut w)?;
        // A placeholder: `finish4` writes the verifier read after the sync.
        w.opaque_fixed(&[0; 8]).ok()?;
        let n = w.position();
        reply.set_len(n);
        Some((base, reply, started))
    }

    /// A v4 call's completion (`Direct::finish` of a slot with a `V4`).
    pub(super) fn finish4(
        &mut self,
        p: Pending,
        v4: V4,
        slot: usize,
        result: i32,
        _pools: &Pools,
    ) -> Finished {
        match p.op {
            Op::Read { .. } => self.finish_read4(p, v4, result),
            Op::Write { .. } => self.finish_write4(p, v4, slot),
            // Never parked with a `V4` (revalidations and spliced READs are v3
            // `Direct` work); were one, the worker answers the call (the claim is
            // abandoned when `v4` drops).
            Op::Revalidate { .. } | Op::Splice { .. } => Finished::Fallback(p.job),
            Op::Commit => {
                if !self.settle_commit(&p, result) {
                    return Finished::Fallback(p.job);
                }
                self.reply4(p, v4)
            }
        }
    }

    fn finish_read4(&mut self, p: Pending, v4: V4, result: i32) -> Finished {
        let Pending { job, base, op } = p;
        let Op::Read {
            mut reply,
            offset,
            want,
            at: [_, eof_at, len_at, data_at],
        } = op
        else {
            unreachable!("finish_read4 of a read");
        };
        if result < 0 {
            self.faults.note(Failure::Read(fault::errno(result)));
            return Finished::Fallback(job);
        }
        let got = (result as usize).min(want);
        // As the file model says it (`FileModel::read`): short means the end.
        let eof = crate::outcome::read_eof(base.attr.size, offset, want, got);
        let end = data_at + want.next_multiple_of(4);
        let mut w = XdrWriter::at(&mut reply.spare_mut()[..end], end);
        w.patch_u32(eof_at, eof as u32);
        w.patch_u32(len_at, got as u32);
        w.truncate_opaque(data_at, got);
        let len = w.position();
        reply.set_len(len);
        let res_at = v4.started.res_at.min(len);
        let data = data_at..data_at + got;
        // The slot keeps where the data lie with the bytes, for a replay.
        let cached = data.start.checked_sub(res_at).map(|at| at..at + got);
        (V4.io_finish)(v4.started, &reply[res_at..len], cached);
        let fill = (self.cache_pages && got > 0 && want <= cache::MAX_CACHED_READ).then(|| Fill {
            fh: base.fh,
            export: base.export,
            attr: base.attr,
            stamp: base.stamp,
            data: Some(FillData::InReply {
                offset,
                at: data_at,
                len: got,
            }),
            exact: false,
        });
        Finished::Reply(job, reply, fill, Some(data))
    }

    fn finish_write4(&mut self, p: Pending, v4: V4, slot: usize) -> Finished {
        // As `Direct::finish_write`: only a whole write, synced if stable, with its
        // statx answers (the reply, built at submit time, carries the verifier).
        let Ok(post) = self.settle_write(&p, slot) else {
            return Finished::Fallback(p.job);
        };
        let V4 {
            started,
            reply,
            getattr,
        } = v4;
        let Some(mut reply) = reply else {
            return Finished::Fallback(p.job);
        };
        if let Some((want, fh_from, fh_to)) = getattr {
            // The post-write attributes: without them (a whole-second mtime, see
            // `attr_after`) a worker writes again and answers with the model's.
            let Some(post) = post else {
                return Finished::Fallback(p.job);
            };
            let at = reply.len();
            // No further than the bound `io_start` checked against the session's
            // ca_maxresponsesize (the pool may have handed out a larger buffer).
            let room = (MARK + HEAD_MAX + WRITE_TAIL + GETATTR_MAX).min(reply.spare_mut().len());
            let mut w = XdrWriter::at(&mut reply.spare_mut()[..room], at);
            let fh = &p.job.record[fh_from..fh_to];
            if (V4.put_getattr)(&mut w, &want, &post, fh).is_err() {
                return Finished::Fallback(p.job);
            }
            let n = w.position();
            reply.set_len(n);
        }
        self.reply4_with(p, started, reply)
    }

    /// Sends a COMMIT reply built at submit time, with the write verifier (its last
    /// 8 bytes) read now: after the sync, so a failed sync anywhere before it shows
    /// as a new verifier (`FileModel::write_verifier`).
    fn reply4(&mut self, p: Pending, v4: V4) -> Finished {
        let Some(mut reply) = v4.reply else {
            return Finished::Fallback(p.job);
        };
        let n = reply.len();
        let verf = self.shared.model.write_verifier();
        match n
            .checked_sub(8)
            .and_then(|at| reply.spare_mut().get_mut(at..n))
        {
            Some(tail) => tail.copy_from_slice(&verf),
            None => return Finished::Fallback(p.job),
        }
        self.reply4_with(p, v4.started, reply)
    }

    fn reply4_with(&mut self, p: Pending, started: Started, reply: Buf) -> Finished {
        let res_at = started.res_at.min(reply.len());
        (V4.io_finish)(started, &reply[res_at..], None);
        Finished::Reply(p.job, reply, None, None)
    }
}
