//! The load: one pinned thread drives several connections, each with up to `qd` calls
//! in flight, issuing ops from the mix (closed loop: as soon as a slot frees; open loop:
//! on each connection's [`Schedule`]) and recording every completion in the thread's
//! own [`Stats`]. Once a second the thread hands its interval stats to the main thread
//! (live line, interval log).

use crate::calls::{self, Call};
use crate::client::{bench_cred, first_xid};
use crate::fileset::{BlockSet, FileSet};
use crate::pattern::Pattern;
use crate::pipe::{Pipe, SubmitFail};
use crate::schedule::{interval_of, latency_ns, Schedule};
use crate::stats::Stats;
use crate::transport::Target;
use crate::workload::{Kind, Mix, Op};
use engine::rpc::Cred;
use std::collections::{HashMap, VecDeque};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

/// What every load thread shares (read-only).
pub struct Plan<'a> {
    pub target: &'a Target,
    pub mix: &'a Mix,
    pub files: &'a FileSet,
    pub bs: u32,
    pub qd: usize,
    /// Check every byte read against the pattern.
    pub verify: bool,
    /// Write the pattern (not arbitrary bytes): with `--verify`, or when the mix also
    /// reads, so what is read stays verifiable.
    pub write_pattern: bool,
    /// Remember written blocks to read them back at the end.
    pub track_writes: bool,
    /// Ops per second per connection (open loop), or closed loop.
    pub rate_per_conn: Option<f64>,
    /// The process id, to make CREATE names unique across concurrent bench runs.
    pub pid: u32,
    /// Connections in the whole run (sequential streams split the set between them).
    pub conns: usize,
}

/// Where connection `index` of `conns` starts its sequential streams: each gets its
/// own contiguous share of the file set (as fio's offset_increment), so streams do not
/// read or write the same blocks.
pub fn seq_start(index: usize, conns: usize, files: usize, blocks: u64) -> (usize, u64) {
    let total = files.max(1) as u128 * blocks.max(1) as u128;
    let p = (index as u128 * total / conns.max(1) as u128) as u64;
    ((p / blocks.max(1)) as usize, p % blocks.max(1))
}

/// When the load runs, fixed once every connection is up.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    pub start: Instant,
    /// End of the warm-up: recording starts.
    pub t0: Instant,
    /// No new op starts after this (duration mode).
    pub end: Option<Instant>,
}

/// One second of one thread's results.
pub struct Interval {
    pub thread: usize,
    pub index: u64,
    pub stats: Stats,
}

/// Messages from load threads to the main thread.
pub enum Report {
    Interval(Interval),
    /// The thread is done; its last call completed at the given time.
    Done(usize, Instant),
}

/// What one thread did.
pub struct ThreadResult {
    pub stats: Stats,
    pub written: BlockSet,
    /// When its last call completed (or failed).
    pub finished: Instant,
}

/// One call in flight.
struct Slot {
    kind: Kind,
    file: usize,
    off: u64,
    len: u32,
    /// Latency is measured from here: the intended send time (open loop) or the actual
    /// one (closed loop).
    from: Instant,
    recorded: bool,
    /// The name a CREATE made (its REMOVE follows).
    name: Option<String>,
}

/// A REMOVE owed for a completed CREATE.
struct Followup {
    name: String,
    due: Instant,
    recorded: bool,
}

struct ConnState {
    pipe: Box<dyn Pipe>,
    index: usize,
    alive: bool,
    inflight: HashMap<u32, Slot>,
    xid: u32,
    rng: u64,
    /// Next (file, block) of the sequential read and write streams.
    seq_read: (usize, u64),
    seq_write: (usize, u64),
    schedule: Option<Schedule>,
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
}

/// How long a connection with calls in flight may go without any reply.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// Everything a completion updates, apart from its connection.
struct Acc<'p> {
    plan: &'p Plan<'p>,
    clock: Clock,
    thread: usize,
    stats: Stats,
    interval: Stats,
    interval_index: u64,
    written: BlockSet,
    payload: Vec<u8>,
    cred: Cred,
    reports: &'p Sender<Report>,
    complaints: u32,
    last_completion: Instant,
}

/// Configuration of one thread.
pub struct ThreadSpec {
    pub thread: usize,
    pub core: Option<core_affinity::CoreId>,
    /// Global indices of its connections and their `--ops` budgets.
    pub conns: Vec<(usize, Option<u64>)>,
}

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

impl Acc<'_> {
    fn complain(&mut self, msg: impl FnOnce() -> String) {
        if self.complaints < 5 {
            eprintln!("bench: {}", msg());
        }
        self.complaints += 1;
    }

    /// Sends finished intervals up to (not including) `upto`.
    fn roll_intervals(&mut self, upto: u64) {
        while self.interval_index < upto {
            let stats = std::mem::take(&mut self.interval);
            let _ = self.reports.send(Report::Interval(Interval {
                thread: self.thread,
                index: self.interval_index,
                stats,
            }));
            self.interval_index += 1;
        }
    }

    /// Records one completed call.
    fn record(&mut self, slot: &Slot, done: Instant, outcome: Outcome) {
        self.last_completion = done;
        if !slot.recorded {
            return;
        }
        let idx = interval_of(self.clock.t0, done);
        self.roll_intervals(idx);
        let lat = latency_ns(slot.from, done);
        for s in [&mut self.stats, &mut self.interval] {
            let s = s.kind(slot.kind);
            s.record(lat);
            s.bytes += outcome.bytes;
            s.errors += outcome.failed as u64;
            s.verified_bytes += outcome.verified;
            s.verify_failures += outcome.bad as u64;
        }
    }

    /// Judges one reply.
    fn complete(&mut self, c: &mut ConnCore, xid: u32, reply: Result<&[u8], String>) {
        let done = Instant::now();
        let Some(slot) = c.inflight.remove(&xid) else {
            self.complain(|| format!("reply to unknown xid {xid}"));
            return;
        };
        let body =
            reply.and_then(|rec| calls::results(rec).map_err(|e| format!("call {xid}: {e}")));
        let mut o = Outcome::default();
        match body {
            Err(e) => {
                o.failed = true;
                self.complain(|| format!("{} failed: {e}", slot.kind.name()));
            }
            Ok(body) => match slot.kind {
                Kind::Read => match calls::parse_read(body) {
                    Ok(data) => {
                        o.bytes = data.len() as u64;
                        if self.plan.verify {
                            self.check_read(&slot, data, &mut o);
                        }
                    }
                    Err(e) => {
                        o.failed = true;
                        self.complain(|| format!("read: {e}"));
                    }
                },
                Kind::Null => {}
                k => {
                    let st = calls::status(body);
                    if st != 0 {
                        o.failed = true;
                        self.complain(|| format!("{} failed: nfsstat3 {st}", k.name()));
                    } else if k == Kind::Write {
                        o.bytes = slot.len as u64;
                        if self.plan.track_writes {
                            let block = slot.off / self.plan.bs as u64;
                            self.written.insert(slot.file, block);
                        }
                    } else if k == Kind::Create {
                        if let Some(name) = slot.name.clone() {
                            c.followups.push_back(Followup {
                                name,
                                due: done,
                                recorded: slot.recorded,
                            });
                        }
                    }
                }
            },
        }
        self.record(&slot, done, o);
    }

    fn check_read(&mut self, slot: &Slot, data: &[u8], o: &mut Outcome) {
        let files = self.plan.files;
        let want = (slot.len as u64).min(files.size.saturating_sub(slot.off)) as usize;
        let pat = Pattern::for_file(slot.file as u64);
        match pat.first_mismatch(slot.off, data) {
            None if data.len() >= want => o.verified = data.len() as u64,
            at => {
                o.bad = true;
                let name = &files.names[slot.file];
                let (off, got) = (slot.off, data.len());
                self.complain(|| match at {
                    Some(at) => format!(
                        "VERIFY FAILED: {name} read at {off}+{want}: first wrong byte at offset {at}"
                    ),
                    None => format!(
                        "VERIFY FAILED: {name} read at {off}+{want}: only {got} bytes returned"
                    ),
                });
            }
        }
    }
}

#[derive(Default)]
struct Outcome {
    bytes: u64,
    failed: bool,
    verified: u64,
    bad: bool,
}

/// The parts of a connection a completion touches (split from the pipe, which is
/// borrowed while it delivers replies).
struct ConnCore {
    inflight: HashMap<u32, Slot>,
    followups: VecDeque<Followup>,
}

impl ConnState {
    fn done(&self, clock: &Clock, now: Instant) -> bool {
        !self.alive
            || (self.stopping(clock, now)
                && self.followups.is_empty()
                && self.pending.is_none()
                && self.inflight.is_empty())
    }

    /// No new op starts (follow-up REMOVEs still do). In open loop the end is judged by
    /// intended send times: every op scheduled before the end is sent, however late,
    /// so a server that is behind when time runs out still gets its backlog counted.
    fn stopping(&self, clock: &Clock, now: Instant) -> bool {
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

    /// Picks and encodes the next call into `out`. `None`: nothing to send now.
    fn next_call(
        &mut self,
        acc: &mut Acc,
        now: Instant,
    ) -> anyhow::Result<Option<(u32, usize, Slot)>> {
        let plan = acc.plan;
        let files = plan.files;
        let open = self.schedule.is_some();
        let (op, from, recorded, name) = if let Some(f) = self.followups.pop_front() {
            let from = if open { f.due } else { now };
            (None, from, f.recorded, Some(f.name))
        } else {
            if self.stopping(&acc.clock, now) {
                return Ok(None);
            }
            let from = match self.schedule.as_mut() {
                Some(s) => match s.due(now) {
                    Some(t) => t,
                    None => return Ok(None),
                },
                None => now,
            };
            let recorded = from >= acc.clock.t0;
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
        };
        let rnd_file = |rng: &mut u64| (xorshift(rng) % nfiles as u64) as usize;
        let seq = |cur: &mut (usize, u64)| {
            let at = *cur;
            cur.1 += 1;
            if cur.1 >= blocks {
                *cur = ((cur.0 + 1) % nfiles, 0);
            }
            at
        };
        self.xid = self.xid.wrapping_add(1);
        let xid = self.xid;
        let cred = acc.cred;
        let out = &mut self.out;
        let n = match op {
            None => {
                let name = name.unwrap_or_default();
                let n = calls::encode(out, xid, &cred, &Call::Remove(&files.dir, &name))?;
                slot.name = Some(name);
                n
            }
            Some(op) => {
                slot.kind = op.kinds()[0];
                match op {
                    Op::Null => calls::encode(out, xid, &cred, &Call::Null)?,
                    Op::Getattr | Op::Lookup => {
                        slot.file = rnd_file(&mut self.rng);
                        let call = if op == Op::Getattr {
                            Call::Getattr(&files.handles[slot.file])
                        } else {
                            Call::Lookup(&files.dir, &files.names[slot.file])
                        };
                        calls::encode(out, xid, &cred, &call)?
                    }
                    Op::Readdirplus => {
                        calls::encode(out, xid, &cred, &Call::Readdirplus(&files.dir))?
                    }
                    Op::Createremove => {
                        self.creates += 1;
                        let name =
                            format!(".bench-cr-{}-{}-{}", plan.pid, self.index, self.creates);
                        let n = calls::encode(out, xid, &cred, &Call::Create(&files.dir, &name))?;
                        slot.name = Some(name);
                        n
                    }
                    Op::Randread | Op::Seqread | Op::Randwrite | Op::Seqwrite => {
                        let (file, block) = match op {
                            Op::Seqread => seq(&mut self.seq_read),
                            Op::Seqwrite => seq(&mut self.seq_write),
                            _ => (rnd_file(&mut self.rng), xorshift(&mut self.rng) % blocks),
                        };
                        slot.file = file;
                        slot.off = block * bs;
                        slot.len = plan.bs;
                        let fh = &files.handles[file];
                        if op.reads() {
                            calls::encode(out, xid, &cred, &Call::Read(fh, slot.off, plan.bs))?
                        } else {
                            let data = &mut acc.payload[..plan.bs as usize];
                            if plan.write_pattern {
                                Pattern::for_file(file as u64).fill(slot.off, data);
                            }
                            calls::encode(out, xid, &cred, &Call::Write(fh, slot.off, data))?
                        }
                    }
                }
            }
        };
        Ok(Some((xid, n, slot)))
    }

    /// Sends what can be sent now; returns how many calls went out.
    fn issue(&mut self, acc: &mut Acc) -> usize {
        let mut sent = 0;
        while self.alive && self.inflight.len() < acc.plan.qd {
            let now = Instant::now();
            let (xid, n, slot) = match self.pending.take() {
                Some(p) => p,
                None => match self.next_call(acc, now) {
                    Ok(Some(c)) => c,
                    Ok(None) => break,
                    Err(e) => {
                        self.fail(acc, format!("encoding a call: {e:#}"));
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
                    acc.complain(|| format!("{} could not be sent: {why}", slot.kind.name()));
                    let o = Outcome {
                        failed: true,
                        ..Outcome::default()
                    };
                    acc.record(&slot, Instant::now(), o);
                }
                Err(SubmitFail::Conn(e)) => {
                    self.inflight.insert(xid, slot);
                    self.fail(acc, format!("connection lost: {e}"));
                }
            }
        }
        sent
    }

    /// Takes the replies that are in; returns how many.
    fn poll(&mut self, acc: &mut Acc) -> usize {
        if !self.alive {
            return 0;
        }
        let mut core = ConnCore {
            inflight: std::mem::take(&mut self.inflight),
            followups: std::mem::take(&mut self.followups),
        };
        let r = self
            .pipe
            .poll(&mut |xid, reply| acc.complete(&mut core, xid, reply));
        self.inflight = core.inflight;
        self.followups = core.followups;
        match r {
            Ok(0) => {
                if !self.inflight.is_empty() && self.last_reply.elapsed() > REPLY_TIMEOUT {
                    self.fail(acc, format!("no reply for {REPLY_TIMEOUT:?}"));
                }
                0
            }
            Ok(n) => {
                self.last_reply = Instant::now();
                n
            }
            Err(e) => {
                self.fail(acc, format!("connection lost: {e}"));
                0
            }
        }
    }

    /// The connection is broken: every call on it counts as failed.
    fn fail(&mut self, acc: &mut Acc, why: String) {
        let idx = self.index;
        acc.complain(|| format!("connection {idx}: {why}"));
        self.alive = false;
        let now = Instant::now();
        let lost: Vec<Slot> = self
            .inflight
            .drain()
            .map(|(_, s)| s)
            .chain(self.pending.take().map(|p| p.2))
            .collect();
        for s in lost {
            let o = Outcome {
                failed: true,
                ..Outcome::default()
            };
            acc.record(&s, now, o);
        }
        self.followups.clear();
    }
}

/// Blocks until a TCP connection has something to read (or room to write), at most
/// `timeout`. Returns false when the connections cannot be waited on (RDMA).
fn wait_readable(conns: &[ConnState], timeout: Duration) -> bool {
    let mut fds = Vec::with_capacity(conns.len());
    for c in conns.iter().filter(|c| c.alive) {
        let Some((fd, write)) = c.pipe.wait_fd() else {
            return false;
        };
        let mut events = libc::POLLIN;
        if write {
            events |= libc::POLLOUT;
        }
        fds.push(libc::pollfd {
            fd,
            events,
            revents: 0,
        });
    }
    let ms = timeout.as_millis().clamp(0, 100) as libc::c_int;
    // SAFETY: `fds` is a valid array of `fds.len()` pollfd structs for the whole call.
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    true
}

/// Connects a thread's connections (before the clock starts).
pub fn connect(plan: &Plan, spec: &ThreadSpec) -> anyhow::Result<Vec<Box<dyn Pipe>>> {
    if let Some(core) = spec.core {
        core_affinity::set_for_current(core);
    }
    spec.conns
        .iter()
        .map(|_| plan.target.connect_pipe(plan.qd))
        .collect()
}

/// Runs one thread's connections until they are done.
pub fn run_thread(
    plan: &Plan,
    spec: &ThreadSpec,
    pipes: Vec<Box<dyn Pipe>>,
    clock: Clock,
    reports: &Sender<Report>,
) -> ThreadResult {
    let files = plan.files;
    let mut conns: Vec<ConnState> = pipes
        .into_iter()
        .zip(&spec.conns)
        .map(|(pipe, &(index, budget))| ConnState {
            pipe,
            index,
            alive: true,
            inflight: HashMap::with_capacity(plan.qd),
            xid: first_xid(),
            rng: 0x9e37_79b9_7f4a_7c15 ^ ((index as u64 + 1) << 17) ^ plan.pid as u64,
            seq_read: seq_start(index, plan.conns, files.len(), files.blocks(plan.bs)),
            seq_write: seq_start(index, plan.conns, files.len(), files.blocks(plan.bs)),
            schedule: plan.rate_per_conn.map(|r| Schedule::new(clock.start, r)),
            followups: VecDeque::new(),
            pending: None,
            budget,
            creates: 0,
            out: vec![0u8; plan.bs as usize + 4096],
            last_reply: clock.start,
        })
        .collect();
    let writes = plan.mix.any(Op::writes);
    let mut acc = Acc {
        plan,
        clock,
        thread: spec.thread,
        stats: Stats::default(),
        interval: Stats::default(),
        interval_index: 0,
        written: if plan.track_writes {
            BlockSet::new(files.len(), files.blocks(plan.bs))
        } else {
            BlockSet::default()
        },
        payload: vec![0x5a; if writes { plan.bs as usize } else { 0 }],
        cred: bench_cred(),
        reports,
        complaints: 0,
        last_completion: clock.start,
    };
    let mut idle = 0u32;
    loop {
        let now = Instant::now();
        if conns.iter().all(|c| c.done(&clock, now)) {
            break;
        }
        let mut progress = 0;
        for c in conns.iter_mut() {
            progress += c.issue(&mut acc);
            progress += c.poll(&mut acc);
        }
        if now >= clock.t0 {
            acc.roll_intervals(interval_of(clock.t0, now));
        }
        if progress > 0 {
            idle = 0;
            continue;
        }
        idle += 1;
        // Nothing moved: sleep in poll(2) on TCP until a reply, the next scheduled send
        // or the next interval boundary; RDMA completion queues are spun on, yielding
        // now and then.
        let mut wake = now + Duration::from_millis(100);
        for c in &conns {
            if let (Some(s), true) = (&c.schedule, c.inflight.len() < plan.qd) {
                wake = wake.min(s.next_at());
            }
        }
        if let Some(e) = clock.end {
            if e > now {
                wake = wake.min(e);
            }
        }
        let next_tick = clock.t0 + Duration::from_secs(interval_of(clock.t0, now) + 1);
        wake = wake.min(next_tick.max(clock.t0));
        if idle > 64
            && !wait_readable(&conns, wake.saturating_duration_since(now))
            && idle.is_multiple_of(1024)
        {
            std::thread::yield_now();
        }
    }
    let finished = acc.last_completion.max(clock.t0);
    // The last, partial interval.
    let last = interval_of(clock.t0, finished);
    acc.roll_intervals(last + 1);
    ThreadResult {
        stats: acc.stats,
        written: acc.written,
        finished,
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
