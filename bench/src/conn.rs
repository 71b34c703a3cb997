//! One connection of a load thread: which call it sends next (the mix, the file set,
//! the sequential streams, the open-loop schedule, REMOVEs owed for CREATEs), sending it
//! when a queue slot and the transport allow, taking replies in, and failing cleanly
//! when the transport breaks or the server stops answering.

use crate::client::first_xid;
use crate::driver::{Clock, Plan};
use crate::jukebox::Tries;
use crate::nfs4::{self, slots::Slots, SessionId};
use crate::pipe::{Pipe, SubmitFail};
use crate::recorder::{Outcome, Recorder};
use crate::schedule::Schedule;
use crate::workload::{Kind, Op};
use nfs_wire::v3call::{self, Call};
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Where connection `index` of `conns` starts its sequential streams: each gets its
/// own contiguous share of the file set (as fio's offset_increment), so streams do not
/// read or write the same blocks.
pub fn seq_start(index: usize, conns: usize, files: usize, blocks: u64) -> (usize, u64) {
    let total = files.max(1) as u128 * blocks.max(1) as u128;
    let p = (index as u128 * total / conns.max(1) as u128) as u64;
    ((p / blocks.max(1)) as usize, p % blocks.max(1))
}

/// xorshift64: a tiny per-connection generator, plenty for picking ops and blocks
/// (no cross-thread state, no syscalls).
pub fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// One call in flight.
pub struct Slot {
    pub kind: Kind,
    pub file: usize,
    pub off: u64,
    pub len: u32,
    /// Latency is measured from here: the intended send time (open loop) or the actual
    /// one (closed loop).
    pub from: Instant,
    pub recorded: bool,
    /// The name a CREATE made (its REMOVE follows).
    pub name: Option<String>,
    /// NFSv4.1: the session slot and sequence id the call went out on.
    pub seq4: Option<(u32, u32)>,
    /// Resends after NFS3ERR_JUKEBOX / NFS4ERR_DELAY (`jukebox.rs`).
    pub tries: Tries,
}

/// A REMOVE owed for a completed CREATE, or an RMDIR for a MKDIR.
pub struct Followup {
    /// `Kind::Remove` or `Kind::Rmdir`.
    pub kind: Kind,
    pub name: String,
    pub due: Instant,
    pub recorded: bool,
}

/// One connection's state; the thread loop reads `alive`, `inflight` and `schedule`
/// to decide how long it may sleep.
pub struct ConnState {
    pub pipe: Box<dyn Pipe>,
    index: usize,
    pub alive: bool,
    pub inflight: HashMap<u32, Slot>,
    xid: u32,
    rng: u64,
    /// Next (file, block) of the sequential read and write streams.
    seq_read: (usize, u64),
    seq_write: (usize, u64),
    pub schedule: Option<Schedule>,
    followups: VecDeque<Followup>,
    /// A call encoded in `out` that the pipe had no room for yet.
    pending: Option<(u32, usize, Slot)>,
    /// Recorded ops this connection may still start (`--ops`).
    budget: Option<u64>,
    creates: u64,
    out: Vec<u8>,
    /// When a reply last arrived (or the first call went out): a server that stops
    /// answering fails the connection after [`REPLY_TIMEOUT`] instead of hanging bench.
    last_reply: Instant,
    /// NFSv4.1: this connection's session (one per connection, its slot table below).
    session: Option<SessionId>,
    slots: Slots,
    /// Calls to resend (NFS3ERR_JUKEBOX / NFS4ERR_DELAY), each when its time comes.
    retries: VecDeque<(Instant, Slot)>,
}

/// How long a connection with calls in flight may go without any reply.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// The parts of a connection a completion touches (split from the pipe, which is
/// borrowed while it delivers replies).
pub struct ConnCore {
    pub inflight: HashMap<u32, Slot>,
    pub followups: VecDeque<Followup>,
    pub slots: Slots,
    pub retries: VecDeque<(Instant, Slot)>,
}

impl ConnState {
    pub fn new(
        plan: &Plan,
        clock: &Clock,
        pipe: Box<dyn Pipe>,
        index: usize,
        budget: Option<u64>,
    ) -> ConnState {
        let files = plan.files;
        let start = seq_start(index, plan.conns, files.len(), files.blocks(plan.bs));
        let v4 = plan.v4.as_ref().and_then(|v| v.conns.get(index));
        ConnState {
            pipe,
            index,
            alive: true,
            inflight: HashMap::with_capacity(plan.qd),
            xid: first_xid(),
            // xorshift never leaves 0: keep the seed odd.
            rng: (0x9e37_79b9_7f4a_7c15 ^ ((index as u64 + 1) << 17) ^ plan.pid as u64) | 1,
            seq_read: start,
            seq_write: start,
            schedule: plan.rate_per_conn.map(|r| Schedule::new(clock.start, r)),
            followups: VecDeque::new(),
            pending: None,
            budget,
            creates: 0,
            out: vec![0u8; plan.bs as usize + 4096],
            last_reply: clock.start,
            session: v4.map(|c| c.session),
            slots: v4.map_or_else(Slots::default, |c| Slots::range(c.base, c.slots, c.highest)),
            retries: VecDeque::new(),
        }
    }

    pub fn done(&self, clock: &Clock, now: Instant) -> bool {
        !self.alive
            || (self.stopping(clock, now)
                && self.followups.is_empty()
                && self.retries.is_empty()
                && self.pending.is_none()
                && self.inflight.is_empty())
    }

    /// No new op starts (follow-up REMOVEs still do). In open loop the end is judged by
    /// intended send times: every op scheduled before the end is sent, however late,
    /// so a server that is behind when time runs out still gets its backlog counted.
    pub fn stopping(&self, clock: &Clock, now: Instant) -> bool {
        if self.budget == Some(0) {
            return true;
        }
        let Some(end) = clock.end else {
            return false;
        };
        match &self.schedule {
            Some(s) => s.next_at() >= end,
            None => now >= end,
        }
    }

    /// When the first call waiting for a resend is due.
    pub fn next_retry(&self) -> Option<Instant> {
        self.retries.front().map(|r| r.0)
    }

    /// Picks and encodes the next call into `out`. `None`: nothing to send now.
    pub fn next_call(
        &mut self,
        rec: &mut Recorder,
        now: Instant,
    ) -> anyhow::Result<Option<(u32, usize, Slot)>> {
        let plan = rec.plan;
        let files = plan.files;
        if self.retries.front().is_some_and(|r| r.0 <= now) {
            if let Some((_, slot)) = self.retries.pop_front() {
                return self.encode_retry(rec, slot).map(Some);
            }
        }
        let open = self.schedule.is_some();
        let (op, from, recorded, name) = if let Some(f) = self.followups.pop_front() {
            let from = if open { f.due } else { now };
            (None, from, f.recorded, Some((f.kind, f.name)))
        } else {
            if self.stopping(&rec.clock, now) {
                return Ok(None);
            }
            let from = match self.schedule.as_mut() {
                Some(s) => match s.due(now) {
                    Some(t) => t,
                    None => return Ok(None),
                },
                None => now,
            };
            let recorded = from >= rec.clock.t0;
            let op = plan.mix.pick(xorshift(&mut self.rng));
            if recorded {
                if let Some(b) = self.budget.as_mut() {
                    *b = b.saturating_sub(op.kinds().len() as u64);
                }
            }
            (Some(op), from, recorded, None)
        };
        let blocks = files.blocks(plan.bs);
        let nfiles = files.len().max(1);
        let bs = plan.bs as u64;
        let mut slot = Slot {
            kind: Kind::Remove,
            file: 0,
            off: 0,
            len: 0,
            from,
            recorded,
            name: None,
            seq4: None,
            tries: Tries::default(),
        };
        let rnd_file = |rng: &mut u64| (xorshift(rng) % nfiles as u64) as usize;
        // The next block of the stream with a piece at this connection's server:
        // every block, unless the set's files are striped (`--pnfs`, `FileSet::piece`);
        // a file with none is stepped over (at most once round the set).
        let seq = |cur: &mut (usize, u64)| {
            for _ in 0..=nfiles {
                if let Some(b) = files.next_block(cur.0, plan.bs, blocks, cur.1) {
                    cur.1 = b;
                    break;
                }
                *cur = ((cur.0 + 1) % nfiles, 0);
            }
            let at = *cur;
            cur.1 += 1;
            if cur.1 >= blocks {
                *cur = ((cur.0 + 1) % nfiles, 0);
            }
            at
        };
        self.xid = self.xid.wrapping_add(1);
        let xid = self.xid;
        let cred = rec.cred;
        let out = &mut self.out;
        let mut v4 = V4Enc {
            session: self.session,
            slots: &mut self.slots,
            last: None,
        };
        let n = match op {
            None => {
                let (kind, name) = name.unwrap_or((Kind::Remove, String::new()));
                let call = if kind == Kind::Rmdir {
                    Call::Rmdir(&files.dir, &name)
                } else {
                    Call::Remove(&files.dir, &name)
                };
                let n = v4.encode(plan, out, xid, &cred, slot.file, &call)?;
                slot.kind = kind;
                slot.name = Some(name);
                n
            }
            Some(op) => {
                slot.kind = op.kinds()[0];
                match op {
                    Op::Null => v4.encode(plan, out, xid, &cred, slot.file, &Call::Null)?,
                    // Run by `copy.rs`, never by the load loop.
                    Op::Copy => anyhow::bail!("copy is not a load op"),
                    Op::Getattr | Op::Lookup => {
                        slot.file = rnd_file(&mut self.rng);
                        let call = if op == Op::Getattr {
                            Call::Getattr(&files.handles[slot.file])
                        } else {
                            Call::Lookup(&files.dir, &files.names[slot.file])
                        };
                        v4.encode(plan, out, xid, &cred, slot.file, &call)?
                    }
                    Op::Readdirplus => v4.encode(
                        plan,
                        out,
                        xid,
                        &cred,
                        slot.file,
                        &Call::Readdirplus(&files.dir),
                    )?,
                    Op::Createremove | Op::Mkdirrmdir => {
                        self.creates += 1;
                        let tag = if op == Op::Mkdirrmdir { "md" } else { "cr" };
                        let name =
                            format!(".bench-{tag}-{}-{}-{}", plan.pid, self.index, self.creates);
                        let call = if op == Op::Mkdirrmdir {
                            Call::Mkdir(&files.dir, &name)
                        } else {
                            Call::Create(&files.dir, &name)
                        };
                        let n = v4.encode(plan, out, xid, &cred, slot.file, &call)?;
                        slot.name = Some(name);
                        n
                    }
                    Op::Randread | Op::Seqread | Op::Randwrite | Op::Seqwrite => {
                        let (file, block) = match op {
                            Op::Seqread => seq(&mut self.seq_read),
                            Op::Seqwrite => seq(&mut self.seq_write),
                            _ => {
                                let f = rnd_file(&mut self.rng);
                                let r = xorshift(&mut self.rng);
                                (f, files.pick_block(f, plan.bs, blocks, r))
                            }
                        };
                        // A block that crosses a stripe unit sends this server only
                        // its part (RFC 8435 §6: the other part is another's).
                        let (off, len) = files
                            .piece(file, plan.bs, block)
                            .unwrap_or((block * bs, plan.bs));
                        slot.file = file;
                        slot.off = off;
                        slot.len = len;
                        let fh = &files.handles[file];
                        if op.reads() {
                            v4.encode(
                                plan,
                                out,
                                xid,
                                &cred,
                                slot.file,
                                &Call::Read(fh, slot.off, slot.len),
                            )?
                        } else {
                            let data = &mut rec.payload[..slot.len as usize];
                            if plan.write_pattern {
                                files.pattern(file).fill(slot.off, data);
                            }
                            v4.encode(
                                plan,
                                out,
                                xid,
                                &cred,
                                slot.file,
                                &Call::Write(fh, slot.off, data),
                            )?
                        }
                    }
                }
            }
        };
        slot.seq4 = v4.last;
        Ok(Some((xid, n, slot)))
    }

    /// Re-encodes a call the server answered NFS3ERR_JUKEBOX / NFS4ERR_DELAY (same op,
    /// same file and offset; a new xid, and for NFSv4.1 a new slot and sequence id).
    fn encode_retry(
        &mut self,
        rec: &mut Recorder,
        mut slot: Slot,
    ) -> anyhow::Result<(u32, usize, Slot)> {
        let plan = rec.plan;
        let files = plan.files;
        self.xid = self.xid.wrapping_add(1);
        let xid = self.xid;
        let cred = rec.cred;
        let mut v4 = V4Enc {
            session: self.session,
            slots: &mut self.slots,
            last: None,
        };
        let name = slot.name.as_deref().unwrap_or_default();
        let fh = files.handles.get(slot.file).map_or(&[][..], |h| &h[..]);
        // Only writes carry a payload (reads have none: `payload` is empty then).
        let n = match slot.kind {
            Kind::Write => (slot.len as usize).min(rec.payload.len()),
            _ => 0,
        };
        let data = &mut rec.payload[..n];
        if slot.kind == Kind::Write && plan.write_pattern {
            files.pattern(slot.file).fill(slot.off, data);
        }
        let call = match slot.kind {
            Kind::Null => Call::Null,
            Kind::Getattr => Call::Getattr(fh),
            Kind::Lookup => Call::Lookup(&files.dir, &files.names[slot.file]),
            Kind::Readdirplus => Call::Readdirplus(&files.dir),
            Kind::Create => Call::Create(&files.dir, name),
            Kind::Remove => Call::Remove(&files.dir, name),
            Kind::Mkdir => Call::Mkdir(&files.dir, name),
            Kind::Rmdir => Call::Rmdir(&files.dir, name),
            Kind::Read => Call::Read(fh, slot.off, slot.len),
            Kind::Write => Call::Write(fh, slot.off, data),
        };
        let n = v4.encode(plan, &mut self.out, xid, &cred, slot.file, &call)?;
        slot.seq4 = v4.last;
        Ok((xid, n, slot))
    }

    /// Sends what can be sent now; returns how many calls went out.
    pub fn issue(&mut self, rec: &mut Recorder) -> usize {
        let mut sent = 0;
        // A call waiting to be resent keeps its place in the queue depth (as a kernel
        // client's sleeping RPC does): a JUKEBOX window must not pile up new calls.
        while self.alive
            && (self.inflight.len() + self.retries.len() < rec.plan.qd
                || self.next_retry().is_some_and(|t| t <= Instant::now())
                || self.pending.is_some())
        {
            let now = Instant::now();
            let (xid, n, slot) = match self.pending.take() {
                Some(p) => p,
                None => match self.next_call(rec, now) {
                    Ok(Some(c)) => c,
                    Ok(None) => break,
                    Err(e) => {
                        self.fail(rec, format!("encoding a call: {e:#}"));
                        break;
                    }
                },
            };
            match self.pipe.try_submit(&self.out[4..n]) {
                Ok(true) => {
                    if self.inflight.is_empty() {
                        self.last_reply = Instant::now();
                    }
                    self.inflight.insert(xid, slot);
                    sent += 1;
                }
                Ok(false) => {
                    self.pending = Some((xid, n, slot));
                    break;
                }
                Err(SubmitFail::Call(why)) => {
                    if let Some((s, q)) = slot.seq4 {
                        self.slots.release(s, q, false);
                    }
                    rec.complain(|| format!("{} could not be sent: {why}", slot.kind.name()));
                    let o = Outcome {
                        failed: true,
                        ..Outcome::default()
                    };
                    rec.record(&slot, Instant::now(), o);
                }
                Err(SubmitFail::Conn(e)) => {
                    self.inflight.insert(xid, slot);
                    self.fail(rec, format!("connection lost: {e}"));
                }
            }
        }
        sent
    }

    /// Takes the replies that are in; returns how many.
    pub fn poll(&mut self, rec: &mut Recorder) -> usize {
        if !self.alive {
            return 0;
        }
        let mut core = ConnCore {
            inflight: std::mem::take(&mut self.inflight),
            followups: std::mem::take(&mut self.followups),
            slots: std::mem::take(&mut self.slots),
            retries: std::mem::take(&mut self.retries),
        };
        let r = self
            .pipe
            .poll(&mut |xid, reply| rec.complete(&mut core, xid, reply));
        self.inflight = core.inflight;
        self.followups = core.followups;
        self.slots = core.slots;
        self.retries = core.retries;
        match r {
            Ok(0) => {
                if !self.inflight.is_empty() && self.last_reply.elapsed() > REPLY_TIMEOUT {
                    self.fail(rec, format!("no reply for {REPLY_TIMEOUT:?}"));
                }
                0
            }
            Ok(n) => {
                self.last_reply = Instant::now();
                n
            }
            Err(e) => {
                self.fail(rec, format!("connection lost: {e}"));
                0
            }
        }
    }

    /// The connection is broken: every call on it counts as failed.
    pub fn fail(&mut self, rec: &mut Recorder, why: String) {
        let idx = self.index;
        rec.complain(|| format!("connection {idx}: {why}"));
        self.alive = false;
        let now = Instant::now();
        let lost: Vec<Slot> = self
            .inflight
            .drain()
            .map(|(_, s)| s)
            .chain(self.pending.take().map(|p| p.2))
            .chain(self.retries.drain(..).map(|r| r.1))
            .collect();
        for s in lost {
            let o = Outcome {
                failed: true,
                ..Outcome::default()
            };
            rec.record(&s, now, o);
        }
        self.followups.clear();
    }
}

/// Encodes a call as the connection's protocol wants it: NFSv3 as it is, NFSv4.1 as
/// SEQUENCE (a free slot of the connection's session) + PUTFH + the op.
struct V4Enc<'s> {
    session: Option<SessionId>,
    slots: &'s mut Slots,
    /// The slot and sequence id the last NFSv4.1 call took.
    last: Option<(u32, u32)>,
}

impl V4Enc<'_> {
    fn encode(
        &mut self,
        plan: &Plan,
        out: &mut [u8],
        xid: u32,
        cred: &engine::rpc::Cred,
        file: usize,
        call: &Call,
    ) -> anyhow::Result<usize> {
        let (Some(session), Some(v4)) = (self.session, plan.v4.as_ref()) else {
            // `--pnfs`: the file's layout's ids at its data server.
            let cred = plan.files.creds.get(file).unwrap_or(cred);
            return Ok(v3call::encode(out, xid, cred, call)?);
        };
        if matches!(call, Call::Null) {
            return nfs4::encode_null(out, xid, cred);
        }
        let (slot, seqid) = self
            .slots
            .take()
            .ok_or_else(|| anyhow::anyhow!("no free session slot"))?;
        self.last = Some((slot, seqid));
        let ctx = nfs4::Ctx {
            seq: nfs4::Seq {
                session,
                slot,
                seqid,
                highest: self.slots.highest(),
            },
            stateid: plan.files.stateids.get(file).copied().unwrap_or_default(),
            clientid: v4.clientid,
            owner: v4.owner,
        };
        let r = nfs4::encode_call(out, xid, cred, &ctx, call);
        if r.is_err() {
            self.slots.release(slot, seqid, false);
            self.last = None;
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_streams_split_the_set() {
        assert_eq!(seq_start(0, 1, 1, 100), (0, 0));
        assert_eq!(seq_start(1, 4, 1, 100), (0, 25));
        assert_eq!(seq_start(3, 4, 2, 100), (1, 50));
        assert_eq!(seq_start(2, 3, 3, 1), (2, 0));
        assert_eq!(seq_start(5, 8, 0, 0), (0, 0));
    }
}
