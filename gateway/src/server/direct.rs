//! Reactor-side data I/O (`backend.io = "uring"`, issue 12): an NFSv3 READ of a file a
//! worker authenticated before is read by the reactor that owns the call, through
//! its io_uring, straight into the reply's pool buffer; the reply goes out from the
//! poll pass that reaps the completion. No worker thread is involved.
//!
//! Which calls: NFSv3 READ whose handle has a current entry in the reactor's file
//! table (`uring::files`: filled from workers' GETATTR/READ replies, valid under the
//! read cache's stamp rule and TTL). Export admission and read permission are checked
//! on every call, as the worker checks them. Anything else — an unknown, stale or
//! expired handle, a caller the checks refuse (the worker answers the exact error), a
//! full ring, no reply buffer, a failed read — goes to a worker as before, with its
//! record untouched (the job is kept until its read completes).
//!
//! The reply carries the attributes the entry holds (at most `ATTR_TTL` old, as a
//! cached GETATTR's); eof is computed from their size. A read that raced with a
//! gateway change to the file is answered (NFS allows either order for concurrent
//! calls) but not cached: the cache fill checks the stamp.

use super::dispatch::{Job, MARK};
use super::Shared;
use crate::cache::{self, FhKey, Fill, FillData, Stamp};
use crate::export::admit;
use crate::fs::{Attr, FileKind};
use crate::nfs3::access::check_read;
use crate::nfs3::proto::put_post_op_attr;
use crate::nfs3::{NFS_PROGRAM, NFS_V3};
use crate::uring::files::{Files, Opened};
use crate::uring::{Completion, Uring};
use engine::mem::{Buf, Pools};
use engine::rpc::{self, Accept};
use engine::xdr::{XdrReader, XdrWriter};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::Arc;

const READ: u32 = 6;
/// Reply room before the data: RPC accepted header (24 bytes), status, post_op_attr
/// (4 + 84), count, eof and the data's length.
const READ_REPLY_HEAD: usize = 24 + 4 + 88 + 4 + 4 + 4;

/// A read in flight: the call (kept to hand to a worker if the read fails), its
/// reply buffer being filled, and what the reply and the cache fill need.
struct Pending {
    job: Job,
    reply: Buf,
    /// Keeps the descriptor open while the kernel reads it.
    _file: Arc<File>,
    fh: FhKey,
    export: u16,
    attr: Attr,
    stamp: Stamp,
    offset: u64,
    want: usize,
    count_at: usize,
    eof_at: usize,
    len_at: usize,
    data_at: usize,
}

/// What a reaped completion turned into.
pub(crate) enum Finished {
    /// Send this reply (and learn `fill` into the read cache first).
    Reply(Job, Buf, Option<Fill>),
    /// The read failed: run the call on a worker.
    Fallback(Job),
}

/// One reactor's direct data path.
pub(crate) struct Direct {
    /// First field: dropped first, and its drop waits for every read in flight, so
    /// no reply buffer in `pending` is released while the kernel may write it.
    ring: Uring,
    pending: Vec<Option<Pending>>,
    free: Vec<u32>,
    files: Files,
    reaped: Vec<Completion>,
    shared: Arc<Shared>,
    /// Whether reactors cache pages (small reads are then learned).
    cache_pages: bool,
}

impl Direct {
    /// The direct path over a reactor's ring (set up over its pool region).
    pub fn new(ring: Uring, shared: Arc<Shared>) -> Direct {
        let n = crate::uring::ENTRIES as usize;
        Direct {
            ring,
            pending: (0..n).map(|_| None).collect(),
            free: (0..n as u32).rev().collect(),
            files: Files::default(),
            reaped: Vec::with_capacity(n),
            cache_pages: shared.cache_pages,
            shared,
        }
    }

    /// Learns a file a worker opened for a GETATTR/READ.
    pub fn learn(&mut self, o: Opened) {
        self.files.insert(&self.shared.gens, o);
    }

    /// Takes an NFSv3 READ when this reactor can read it itself; otherwise hands the
    /// job back untouched (for a worker).
    pub fn try_read(&mut self, job: Job, pools: &Pools) -> Result<(), Job> {
        let h = &job.header;
        if h.prog != NFS_PROGRAM || h.vers != NFS_V3 || h.proc_ != READ || self.free.is_empty() {
            return Err(job);
        }
        match self.prepare(&job, pools) {
            Some(p) => self.submit(job, p),
            None => Err(job),
        }
    }

    /// The checks and the reply head of a READ: `None` sends it to a worker.
    fn prepare(&self, job: &Job, pools: &Pools) -> Option<Prepared> {
        let mut r = XdrReader::new(job.record.get(job.args_at..)?);
        let fh = r.opaque_var(crate::fs::FH_MAX).ok()?;
        let offset = r.u64().ok()?;
        let count = r.u32().ok()?;
        let hit = self.files.get(&self.shared.gens, fh)?;
        let export = self.shared.exports.get(hit.export)?;
        let caller = admit(export, job.peer.ip(), &job.header.cred).ok()?;
        if hit.attr.kind != FileKind::Reg || check_read(hit.attr, &caller).is_err() {
            return None;
        }
        let n = (count as usize).min(crate::nfs3::MAX_IO);
        let want = if offset >= hit.attr.size {
            0
        } else {
            n.min(usize::try_from(hit.attr.size - offset).unwrap_or(usize::MAX))
        };
        let mut reply = pools.alloc(MARK + READ_REPLY_HEAD + want + 4)?;
        let mut w = XdrWriter::at(reply.spare_mut(), MARK);
        rpc::write_accepted(&mut w, job.header.xid, Accept::Success).ok()?;
        w.u32(0).ok()?;
        put_post_op_attr(&mut w, Some(hit.attr)).ok()?;
        let count_at = w.reserve_u32().ok()?;
        let eof_at = w.reserve_u32().ok()?;
        let len_at = w.reserve_u32().ok()?;
        let data_at = w.position();
        // Room for the data and its padding (zeroed now; the read overwrites the data).
        w.reserve_opaque_fixed(want).ok()?;
        Some(Prepared {
            reply,
            file: hit.file.clone(),
            fh: FhKey::new(fh)?,
            export: hit.export,
            attr: *hit.attr,
            stamp: hit.stamp,
            offset,
            want,
            at: [count_at, eof_at, len_at, data_at],
        })
    }

    fn submit(&mut self, job: Job, p: Prepared) -> Result<(), Job> {
        let Prepared {
            mut reply,
            file,
            fh,
            export,
            attr,
            stamp,
            offset,
            want,
            at: [count_at, eof_at, len_at, data_at],
        } = p;
        let slot = *self.free.last().expect("checked non-empty");
        if want > 0 {
            let dst = reply.spare_mut()[data_at..data_at + want].as_mut_ptr();
            // SAFETY: `dst` is `want` bytes of `reply`, a pool buffer kept in
            // `pending[slot]` (never touched) until this read's completion is reaped;
            // `file` is kept there too, so the descriptor stays open; and the ring is
            // dropped (waiting for the read) before `pending`.
            let queued =
                unsafe { self.ring.read(file.as_raw_fd(), dst, want as u32, offset, u64::from(slot)) };
            if !queued {
                return Err(job);
            }
        }
        self.free.pop();
        self.pending[slot as usize] = Some(Pending {
            job,
            reply,
            _file: file,
            fh,
            export,
            attr,
            stamp,
            offset,
            want,
            count_at,
            eof_at,
            len_at,
            data_at,
        });
        if want == 0 {
            // Nothing to read (at or past the end, or count 0): answered this pass.
            self.reaped.push(Completion {
                tag: u64::from(slot),
                result: 0,
            });
        }
        Ok(())
    }

    /// Submits what this pass queued (one system call), reaps completions and turns
    /// them into replies (or fallbacks) for `out`. Returns the completions handled.
    pub fn poll(&mut self, out: &mut Vec<Finished>) -> usize {
        self.ring.submit();
        self.ring.reap(&mut self.reaped);
        let n = self.reaped.len();
        for c in std::mem::take(&mut self.reaped) {
            let Some(p) = self
                .pending
                .get_mut(c.tag as usize)
                .and_then(Option::take)
            else {
                tracing::error!(tag = c.tag, "io_uring: completion for no pending read");
                continue;
            };
            self.free.push(c.tag as u32);
            out.push(self.finish(p, c.result));
        }
        n
    }

    fn finish(&self, p: Pending, result: i32) -> Finished {
        let Pending {
            job,
            mut reply,
            fh,
            export,
            attr,
            stamp,
            offset,
            want,
            count_at,
            eof_at,
            len_at,
            data_at,
            ..
        } = p;
        if result < 0 {
            tracing::debug!(err = -result, "io_uring read failed; a worker retries it");
            return Finished::Fallback(job);
        }
        let got = (result as usize).min(want);
        // As the file model says it: short means the end was reached.
        let eof = got < want || offset.saturating_add(got as u64) >= attr.size;
        let end = data_at + want + (4 - want % 4) % 4;
        let mut w = XdrWriter::at(&mut reply.spare_mut()[..end], end);
        w.patch_u32(count_at, got as u32);
        w.patch_u32(eof_at, eof as u32);
        w.patch_u32(len_at, got as u32);
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
        Finished::Reply(job, reply, fill)
    }
}

/// A READ's reply head and what its read needs.
struct Prepared {
    reply: Buf,
    file: Arc<File>,
    fh: FhKey,
    export: u16,
    attr: Attr,
    stamp: Stamp,
    offset: u64,
    want: usize,
    /// count, eof, data length, data positions in `reply`.
    at: [usize; 4],
}
