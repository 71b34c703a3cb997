//! The load: one pinned thread drives several connections, each with up to `qd` calls
//! in flight, issuing ops from the mix (closed loop: as soon as a slot frees; open loop:
//! on each connection's [`Schedule`]) and recording every completion in the thread's
//! own [`Stats`]. Once a second the thread hands its interval stats to the main thread
//! (live line, interval log).

use crate::conn::ConnState;
use crate::fileset::{BlockSet, FileSet};
use crate::pipe::Pipe;
use crate::recorder::Recorder;
use crate::schedule::interval_of;
use crate::stats::Stats;
use crate::transport::Target;
use crate::workload::Mix;
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
    /// NFSv4.1 (`--nfs 4.1`): the sessions and owner the load uses; `None`: NFSv3.
    pub v4: Option<V4Plan<'a>>,
    /// Resending calls answered JUKEBOX / DELAY (`--jukebox-timeout`).
    pub retry: crate::jukebox::Policy,
}

/// What NFSv4.1 load connections use: each connection's session and slot range (by
/// global connection index), the client id and the open owner of CREATEs.
pub struct V4Plan<'a> {
    pub conns: &'a [crate::nfs4::setup::ConnSession],
    pub clientid: u64,
    pub owner: &'a [u8],
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
    /// The thread is done: its index, when its last call completed, and its last
    /// (partial) second, if it got that far.
    Done(usize, Instant, Option<Interval>),
}

/// What one thread did.
pub struct ThreadResult {
    pub stats: Stats,
    pub written: BlockSet,
    /// When its last call completed (or failed).
    pub finished: Instant,
    /// Its last, usually partial, second: sent with [`Report::Done`] rather than as an
    /// [`Interval`], so the main thread knows every `Interval` is a whole second.
    pub last_second: Option<Interval>,
}

/// Configuration of one thread.
pub struct ThreadSpec {
    pub thread: usize,
    pub core: Option<core_affinity::CoreId>,
    /// Global indices of its connections and their `--ops` budgets.
    pub conns: Vec<(usize, Option<u64>)>,
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
        if !core_affinity::set_for_current(core) {
            eprintln!(
                "bench: thread {} could not be pinned to core {} (runs unpinned)",
                spec.thread, core.id
            );
        }
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
    let mut conns: Vec<ConnState> = pipes
        .into_iter()
        .zip(&spec.conns)
        .map(|(pipe, &(index, budget))| ConnState::new(plan, &clock, pipe, index, budget))
        .collect();
    let mut rec = Recorder::new(plan, clock, spec.thread, reports);
    let mut idle = 0u32;
    loop {
        let now = Instant::now();
        if conns.iter().all(|c| c.done(&clock, now)) {
            break;
        }
        let mut progress = 0;
        for c in conns.iter_mut() {
            progress += c.issue(&mut rec);
            progress += c.poll(&mut rec);
        }
        if now >= clock.t0 {
            rec.roll_intervals(interval_of(clock.t0, now));
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
            if let Some(t) = c.next_retry() {
                wake = wake.min(t);
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
    let finished = rec.last_completion.max(clock.t0);
    // The last, partial interval.
    rec.finish();
    rec.roll_intervals(interval_of(clock.t0, finished));
    let last_second = Some(Interval {
        thread: spec.thread,
        index: rec.interval_index,
        stats: std::mem::take(&mut rec.interval),
    });
    ThreadResult {
        stats: rec.stats,
        written: rec.written,
        finished,
        last_second,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipe::{OnReply, SubmitFail};
    use crate::workload::{Kind, Op};
    use std::collections::VecDeque;
    use std::io;

    /// A server in memory: answers every call with an accepted reply whose body is
    /// NFS3_OK, immediately, except that calls arriving before `stall_until` are all
    /// answered at `stall_until` (a server that freezes, then recovers).
    struct FakeServer {
        stall_until: Instant,
        queue: VecDeque<(u32, Instant)>,
    }

    impl Pipe for FakeServer {
        fn try_submit(&mut self, call: &[u8]) -> Result<bool, SubmitFail> {
            let xid = crate::pipe::xid_of(call).expect("a call has an xid");
            self.queue
                .push_back((xid, Instant::now().max(self.stall_until)));
            Ok(true)
        }

        fn poll(&mut self, on_reply: &mut OnReply) -> io::Result<usize> {
            let now = Instant::now();
            let mut n = 0;
            while let Some(&(xid, at)) = self.queue.front() {
                if at > now {
                    break;
                }
                self.queue.pop_front();
                // xid, REPLY, MSG_ACCEPTED, verifier AUTH_NONE (flavor, length), SUCCESS,
                // then the results: nfsstat3 NFS3_OK.
                let mut rec = Vec::new();
                for w in [xid, 1, 0, 0, 0, 0, 0] {
                    rec.extend_from_slice(&w.to_be_bytes());
                }
                on_reply(xid, Ok(&rec));
                n += 1;
            }
            Ok(n)
        }

        fn in_flight(&self) -> usize {
            self.queue.len()
        }
    }

    fn files() -> FileSet {
        FileSet {
            dir: vec![1; 8],
            names: vec!["f".into()],
            handles: vec![vec![2; 8]],
            size: 1 << 20,
            stateids: Vec::new(),
            seeds: Vec::new(),
            creds: Vec::new(),
            stripes: Vec::new(),
        }
    }

    /// Runs one connection against a server stalled for the first 100 ms of a 300 ms
    /// run.
    fn stalled_run(mix: &Mix, rate: Option<f64>, qd: usize) -> Stats {
        let target = Target::Tcp("unused".into());
        let files = files();
        let plan = Plan {
            target: &target,
            mix,
            files: &files,
            bs: 4096,
            qd,
            verify: false,
            write_pattern: false,
            track_writes: false,
            rate_per_conn: rate,
            pid: 1,
            conns: 1,
            v4: None,
            retry: crate::jukebox::Policy::default(),
        };
        let start = Instant::now();
        let clock = Clock {
            start,
            t0: start,
            end: Some(start + Duration::from_millis(300)),
        };
        let server = FakeServer {
            stall_until: start + Duration::from_millis(100),
            queue: VecDeque::new(),
        };
        let spec = ThreadSpec {
            thread: 0,
            core: None,
            conns: vec![(0, None)],
        };
        let (tx, _rx) = std::sync::mpsc::channel();
        run_thread(&plan, &spec, vec![Box::new(server)], clock, &tx).stats
    }

    const MS: u64 = 1_000_000;

    #[test]
    fn open_loop_counts_the_stall_for_every_op_that_should_have_been_sent() {
        let mix = Mix::single(Op::Getattr);
        // 1000 ops/s, 4 in flight: during the 100 ms stall 4 calls go out, the other
        // ~96 wait for a slot. Measured from their intended send times, the ops meant
        // for the stall's first half (and more, while the backlog drains) waited 50 ms
        // or more.
        let open = stalled_run(&mix, Some(1000.0), 4);
        let g = open.get(Kind::Getattr).unwrap();
        assert!((290..=310).contains(&g.ops), "{}", g.ops);
        let slow = g.hist.count_between(50 * MS, u64::MAX);
        assert!(slow >= 45, "{slow} ops >= 50 ms");
        assert!(g.hist.max() >= 95 * MS, "{}", g.hist.max());
        // Closed loop, same stall: only the 4 calls in flight saw it (a few more may if
        // this test thread itself is descheduled on a busy machine: 4 per pause).
        let closed = stalled_run(&mix, None, 4);
        let g = closed.get(Kind::Getattr).unwrap();
        // (more than the open loop's ~300 on a quiet machine; a loaded one gets fewer)
        assert!(g.ops > 50, "{}", g.ops);
        let slow = g.hist.count_between(50 * MS, u64::MAX);
        assert!(slow <= 16, "{slow} ops >= 50 ms in closed loop");
    }

    /// An NFSv4.1 server in memory with one session: checks every SEQUENCE (the slot is
    /// within the table, not in use, and carries its last sequence id + 1; otherwise
    /// it answers NFS4ERR_SEQ_MISORDERED), answers every third call NFS4ERR_DELAY
    /// after processing its SEQUENCE, the rest NFS4_OK (READ with `count` bytes).
    struct FakeV4 {
        slots: Vec<u32>,
        busy: Vec<bool>,
        calls: u32,
        delays: std::sync::Arc<std::sync::atomic::AtomicU32>,
        /// (slot, xid, reply); an empty reply is an RDMA_ERROR for that call.
        queue: VecDeque<(u32, u32, Vec<u8>)>,
        /// Every n-th valid call fails at the transport (an RPC-over-RDMA ERR_CHUNK:
        /// nothing processed, RFC 8166 §4.5); 0: never.
        err_every: u32,
        seen: u32,
        errors: u32,
    }

    fn be(ws: &[u32]) -> Vec<u8> {
        ws.iter().flat_map(|w| w.to_be_bytes()).collect()
    }

    impl FakeV4 {
        fn answer(&mut self, call: &[u8]) -> Option<(u32, Vec<u8>, Option<u32>)> {
            let (h, off) = engine::rpc::decode_call(call).ok()?;
            let mut rep = be(&[h.xid, 1, 0, 0, 0, 0]);
            if h.proc_ == 0 {
                return Some((h.xid, rep, None));
            }
            let mut r = engine::xdr::XdrReader::new(&call[off..]);
            r.opaque_var(64).ok()?;
            assert_eq!(r.u32().ok()?, 1, "minor version");
            let _n = r.u32().ok()?;
            assert_eq!(r.u32().ok()?, 53, "SEQUENCE first");
            assert_eq!(r.opaque_fixed(16).ok()?, &[1u8; 16]);
            let (seqid, slot) = (r.u32().ok()?, r.u32().ok()?);
            let ok = (slot as usize) < self.slots.len()
                && !self.busy[slot as usize]
                && seqid == self.slots[slot as usize].wrapping_add(1);
            if !ok {
                rep.extend(be(&[10063, 0, 1, 53, 10063]));
                return Some((h.xid, rep, None));
            }
            self.seen += 1;
            if self.err_every > 0 && self.seen.is_multiple_of(self.err_every) {
                self.errors += 1;
                return Some((h.xid, Vec::new(), None));
            }
            self.slots[slot as usize] = seqid;
            self.busy[slot as usize] = true;
            self.calls += 1;
            r.skip(8).ok()?; // highest, cachethis
            assert_eq!(r.u32().ok()?, 22, "PUTFH second");
            r.opaque_var(128).ok()?;
            let opnum = r.u32().ok()?;
            let seq_ok = |rep: &mut Vec<u8>| {
                rep.extend(be(&[53, 0]));
                rep.extend([1u8; 16]);
                rep.extend(be(&[seqid, slot, 63, 63, 0, 22, 0]));
            };
            if self.calls.is_multiple_of(3) {
                self.delays
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                rep.extend(be(&[10008, 0, 3]));
                seq_ok(&mut rep);
                rep.extend(be(&[opnum, 10008]));
                return Some((h.xid, rep, Some(slot)));
            }
            rep.extend(be(&[0, 0, 3]));
            seq_ok(&mut rep);
            match opnum {
                25 => {
                    r.skip(16 + 8).ok()?;
                    let count = r.u32().ok()?;
                    rep.extend(be(&[25, 0, 0, count]));
                    rep.extend(vec![0u8; count.div_ceil(4) as usize * 4]);
                }
                38 => rep.extend(be(&[38, 0, 4096, 0, 0, 0])),
                9 => rep.extend(be(&[9, 0, 1, 16, 8, 0, 1 << 20])),
                other => panic!("unexpected op {other}"),
            }
            Some((h.xid, rep, Some(slot)))
        }
    }

    impl Pipe for FakeV4 {
        fn try_submit(&mut self, call: &[u8]) -> Result<bool, SubmitFail> {
            let Some((xid, rep, slot)) = self.answer(call) else {
                return Err(SubmitFail::Call("undecodable".into()));
            };
            // Replies go out in reverse order of arrival within a poll (slots are
            // freed out of order); the slot stays busy until its reply is delivered.
            self.queue.push_front((slot.unwrap_or(u32::MAX), xid, rep));
            Ok(true)
        }

        fn poll(&mut self, on_reply: &mut OnReply) -> io::Result<usize> {
            let mut n = 0;
            while let Some((slot, xid, rep)) = self.queue.pop_front() {
                if let Some(b) = self.busy.get_mut(slot as usize) {
                    *b = false;
                }
                if rep.is_empty() {
                    on_reply(xid, Err("RPC-over-RDMA: ERR_CHUNK".into()));
                } else {
                    on_reply(xid, Ok(&rep));
                }
                n += 1;
            }
            Ok(n)
        }

        fn in_flight(&self) -> usize {
            self.queue.len()
        }
    }

    /// Runs the NFSv4.1 load against [`FakeV4`] for 300 ms; returns the stats and the
    /// calls the fake failed at the transport.
    fn run_v4(err_every: u32) -> (crate::stats::Stats, u32, u32) {
        let target = Target::Tcp("unused".into());
        let mut files = files();
        files.stateids = vec![crate::nfs4::Stateid::default()];
        let mix = Mix::parse("randread:1,randwrite:1,getattr:1").unwrap();
        let sessions = [crate::nfs4::setup::ConnSession {
            session: [1u8; 16],
            base: 0,
            slots: 4,
            highest: 3,
        }];
        let qd = 4;
        let plan = Plan {
            target: &target,
            mix: &mix,
            files: &files,
            bs: 4096,
            qd,
            verify: false,
            write_pattern: false,
            track_writes: false,
            rate_per_conn: None,
            pid: 1,
            conns: 1,
            v4: Some(V4Plan {
                conns: &sessions,
                clientid: 1,
                owner: b"o",
            }),
            // Short pauses: the fake answers every third call DELAY.
            retry: crate::jukebox::Policy {
                first: Duration::from_millis(1),
                max: Duration::from_millis(10),
                timeout: Duration::from_secs(10),
            },
        };
        let start = Instant::now();
        let clock = Clock {
            start,
            t0: start,
            end: Some(start + Duration::from_millis(1000)),
        };
        let delays = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let server = FakeV4 {
            slots: vec![0; qd],
            busy: vec![false; qd],
            calls: 0,
            delays: std::sync::Arc::clone(&delays),
            queue: VecDeque::new(),
            err_every,
            seen: 0,
            errors: 0,
        };
        let errors = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let server = Counting {
            inner: server,
            errors: std::sync::Arc::clone(&errors),
        };
        let spec = ThreadSpec {
            thread: 0,
            core: None,
            conns: vec![(0, None)],
        };
        let (tx, _rx) = std::sync::mpsc::channel();
        let st = run_thread(&plan, &spec, vec![Box::new(server)], clock, &tx).stats;
        let delays = delays.load(std::sync::atomic::Ordering::Relaxed);
        (
            st,
            delays,
            errors.load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// Publishes the fake's transport-error count when dropped.
    struct Counting {
        inner: FakeV4,
        errors: std::sync::Arc<std::sync::atomic::AtomicU32>,
    }

    impl Drop for Counting {
        fn drop(&mut self) {
            self.errors
                .store(self.inner.errors, std::sync::atomic::Ordering::Relaxed);
        }
    }

    impl Pipe for Counting {
        fn try_submit(&mut self, call: &[u8]) -> Result<bool, SubmitFail> {
            self.inner.try_submit(call)
        }
        fn poll(&mut self, on_reply: &mut OnReply) -> io::Result<usize> {
            self.inner.poll(on_reply)
        }
        fn in_flight(&self) -> usize {
            self.inner.in_flight()
        }
    }

    #[test]
    fn nfs41_calls_use_each_slot_in_sequence_and_are_resent_after_delay() {
        let (st, delays, _) = run_v4(0);
        let t = st.total();
        // One second of an in-memory fake: hundreds of ops on a quiet machine, tens on
        // one at load 12 (CI beside builds); 30 is enough to cross every slot's resend.
        assert!(t.ops > 30, "{} ops", t.ops);
        // Every call answered DELAY was resent and then succeeded: no errors, and no
        // SEQ_MISORDERED (which would be errors too).
        assert_eq!(t.errors, 0);
        assert!(st.get(Kind::Read).unwrap().bytes > 0);
        assert!(
            delays as u64 * 2 >= t.ops / 2,
            "{delays} DELAYs for {} ops",
            t.ops
        );
    }

    /// R8267-31/33 (RFC 8267 §6.6, §6.7.2): a COMPOUND that ends in an RDMA_ERROR
    /// fails once (not resent, R8267-27) and its session slot is reusable: the next
    /// call on it carries the same sequence id (the SEQUENCE was never processed), so
    /// the server sees no SEQ_MISORDERED (which would count as more errors).
    #[test]
    fn r8267_31_33_rdma_error_fails_the_call_once_and_its_slot_is_reused() {
        let (st, _, errors) = run_v4(7);
        let t = st.total();
        assert!(t.ops > 30 && errors > 2, "{} ops, {errors} errors", t.ops);
        assert_eq!(t.errors, errors as u64);
    }

    #[test]
    fn createremove_removes_every_name_it_created() {
        let mix = Mix::single(Op::Createremove);
        let st = stalled_run(&mix, Some(500.0), 8);
        let (c, r) = (st.get(Kind::Create).unwrap(), st.get(Kind::Remove).unwrap());
        assert!(
            c.ops > 50 && c.ops == r.ops,
            "{} creates, {} removes",
            c.ops,
            r.ops
        );
        assert_eq!((c.errors, r.errors), (0, 0));
    }

    #[test]
    fn mkdirrmdir_removes_every_directory_it_made() {
        let mix = Mix::single(Op::Mkdirrmdir);
        let st = stalled_run(&mix, Some(500.0), 8);
        let (m, r) = (st.get(Kind::Mkdir).unwrap(), st.get(Kind::Rmdir).unwrap());
        assert!(
            m.ops > 50 && m.ops == r.ops,
            "{} mkdirs, {} rmdirs",
            m.ops,
            r.ops
        );
        assert_eq!((m.errors, r.errors), (0, 0));
        assert!(st.get(Kind::Create).is_none() && st.get(Kind::Remove).is_none());
    }
}
