//! Running the two campaigns against a gateway: one call (or mutated record) at a time,
//! with reconnects, each outcome checked at once (a reply must be a well-formed RPC
//! reply; a call with a complete framing must be answered or its connection closed
//! within the call timeout; the process must still run and its log must not have
//! gained a `panicked` line), so a failure names the call that caused it.

use super::gateway::Gateway;
use super::mutate::{self, Framing};
use super::structured::{returned_handle, Call, Gen};
use super::wire::{self, call_record, Cred, Got, NFS_PROG};
use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The gateway's default `tcp.max_record` (the effective limit is lower, the largest
/// pool buffer): records beyond it must be refused at their record mark.
pub const MAX_RECORD: usize = (1 << 20) + 64 * 1024;
/// The `tcp.record_timeout_s` of the campaign's config ([`super::gateway`]).
pub const RECORD_TIMEOUT: Duration = Duration::from_secs(2);
/// Hex shown per call in a failure report (the seed reproduces the rest).
const HEX_SHOWN: usize = 4096;
/// Connections left holding a partial record at once (the server reaps them after
/// `tcp.record_timeout_s`).
const MAX_DANGLING: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Structured,
    Mutate,
    V4,
    Rdma,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Structured => "structured",
            Kind::Mutate => "mutate",
            Kind::V4 => "v4",
            Kind::Rdma => "rdma",
        }
    }
}

/// What a campaign saw.
#[derive(Default, Debug)]
pub struct Tally {
    pub calls: usize,
    pub replies: usize,
    pub closes: usize,
    pub held: usize,
    /// Replies by accept_stat (or "denied"), then NFS/MOUNT status 0 vs other.
    pub by_stat: BTreeMap<String, usize>,
    /// Per procedure: calls sent and calls answered with status 0 (structured only).
    pub by_proc: BTreeMap<String, (usize, usize)>,
}

/// One sent record, kept for the failure report.
struct Sent {
    index: usize,
    label: String,
    bytes: Vec<u8>,
}

pub fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len().min(HEX_SHOWN) * 2 + 32);
    for x in b.iter().take(HEX_SHOWN) {
        let _ = write!(s, "{x:02x}");
    }
    if b.len() > HEX_SHOWN {
        let _ = write!(s, "... ({} bytes in all)", b.len());
    }
    s
}

pub struct Campaign<'a> {
    pub kind: Kind,
    pub seed: u64,
    pub calls: usize,
    pub deadline: Option<Instant>,
    pub timeout: Duration,
    pub gw: &'a mut Gateway,
    pub gen: Gen,
    history: VecDeque<Sent>,
    xid: u32,
    pub tally: Tally,
}

impl<'a> Campaign<'a> {
    pub fn new(
        kind: Kind,
        seed: u64,
        calls: usize,
        timeout: Duration,
        gw: &'a mut Gateway,
        gen: Gen,
    ) -> Self {
        Campaign {
            kind,
            seed,
            calls,
            deadline: None,
            timeout,
            gw,
            gen,
            history: VecDeque::new(),
            xid: (seed as u32) << 8,
            tally: Tally::default(),
        }
    }

    /// The failure report: seed, the call (hex), the calls before it, the log's tail.
    pub(super) fn fail(&self, reason: &str) -> anyhow::Error {
        let mut s = String::new();
        let last = self.history.back();
        let _ = writeln!(
            s,
            "FUZZ FAILURE: seed {} campaign {} call #{}{}",
            self.seed,
            self.kind.name(),
            last.map_or(0, |c| c.index),
            last.map(|c| format!(" ({})", c.label)).unwrap_or_default()
        );
        let _ = writeln!(s, "reason: {reason}");
        if let Some(c) = last {
            let _ = writeln!(s, "call (hex, record mark first): {}", hex(&c.bytes));
        }
        for c in self.history.iter().rev().skip(1) {
            let _ = writeln!(s, "earlier #{} ({}): {}", c.index, c.label, hex(&c.bytes));
        }
        let _ = writeln!(s, "gateway log (last lines):\n{}", self.gw.log_tail(30));
        let _ = write!(
            s,
            "reproduce: nfsgw-tools fuzz --seed {} --campaign {} --calls {}",
            self.seed,
            self.kind.name(),
            last.map_or(1, |c| c.index + 1)
        );
        anyhow::anyhow!(s)
    }

    pub(super) fn remember(&mut self, index: usize, label: String, bytes: Vec<u8>) {
        if self.history.len() == 4 {
            self.history.pop_front();
        }
        self.history.push_back(Sent {
            index,
            label,
            bytes,
        });
    }

    pub(super) fn next_xid(&mut self) -> u32 {
        self.xid = self.xid.wrapping_add(1);
        self.xid
    }

    /// After each call: the process runs and its log gained no panic.
    pub(super) fn check_process(&mut self) -> anyhow::Result<()> {
        if let Some(st) = self.gw.exited() {
            return Err(self.fail(&format!("gateway exited ({st})")));
        }
        let p = self.gw.new_panics();
        if !p.is_empty() {
            return Err(self.fail(&format!("gateway log: {}", p.join(" | "))));
        }
        Ok(())
    }

    pub(super) fn connect(&self) -> anyhow::Result<TcpStream> {
        let s = TcpStream::connect(&self.gw.addr)
            .map_err(|e| self.fail(&format!("cannot connect to the gateway: {e}")))?;
        s.set_nodelay(true)?;
        Ok(s)
    }

    pub(super) fn done(&self, i: usize) -> bool {
        match self.deadline {
            Some(d) => i >= self.calls || Instant::now() >= d,
            None => i >= self.calls,
        }
    }

    pub(super) fn count_reply(&mut self, call: &Call, rep: &wire::Reply) {
        let key = match rep.accept {
            None => "denied".to_string(),
            Some(0) => {
                let st = wire::Dec::new(rep.body).u32().unwrap_or(u32::MAX);
                // Procedures whose result has no status: NULL, MOUNT DUMP/UMNT/UMNTALL/EXPORT.
                let no_status =
                    call.proc_ == 0 || (call.prog == super::wire::MOUNT_PROG && call.proc_ >= 2);
                if st == 0 || no_status {
                    self.tally.by_proc.entry(call.label()).or_default().1 += 1;
                    "success".to_string()
                } else {
                    format!("status {st}")
                }
            }
            Some(a) => format!("accept_stat {a}"),
        };
        *self.tally.by_stat.entry(key).or_default() += 1;
    }

    /// Waits for the replies to every call in `pending` on `s` (in any order). Replies
    /// to other xids must still be well-formed. `Ok(true)` = all answered, `Ok(false)` =
    /// closed first; no answer in time is a failure. Returned handles are learned in
    /// the order the calls were sent, not the order the replies came in, so a seed's
    /// sequence does not depend on the server's timing.
    fn await_replies(
        &mut self,
        s: &mut TcpStream,
        pending: &[(u32, Option<Call>)],
    ) -> anyhow::Result<bool> {
        let deadline = Instant::now() + self.timeout;
        let mut left: Vec<usize> = (0..pending.len()).collect();
        let mut learned: Vec<(usize, Vec<u8>, bool)> = Vec::new();
        let mut all = true;
        while !left.is_empty() {
            let got = wire::read_record(s, deadline).map_err(|e| self.fail(&e.to_string()))?;
            match got {
                Got::Closed => {
                    self.tally.closes += 1;
                    all = false;
                    break;
                }
                Got::Timeout => {
                    let xids: Vec<String> = left
                        .iter()
                        .map(|&k| format!("{:#x}", pending[k].0))
                        .collect();
                    return Err(self.fail(&format!(
                        "no reply to xid {} and no close within {:?}",
                        xids.join(", "),
                        self.timeout
                    )));
                }
                Got::Reply(rec) => {
                    let Some(rep) = wire::parse_reply(&rec) else {
                        return Err(self.fail(&format!("malformed reply record: {}", hex(&rec))));
                    };
                    let Some(at) = left.iter().position(|&k| pending[k].0 == rep.xid) else {
                        continue;
                    };
                    let k = left.swap_remove(at);
                    self.tally.replies += 1;
                    let Some(c) = &pending[k].1 else {
                        continue;
                    };
                    if rep.accept == Some(0) {
                        if let Some(why) = super::semantics::violation(c, rep.body) {
                            return Err(self.fail(&format!("reply breaks RFC 1813: {why}")));
                        }
                    }
                    self.count_reply(c, &rep);
                    if c.prog == NFS_PROG && c.vers == 3 && rep.accept == Some(0) {
                        if let Some(fh) = returned_handle(c.proc_, rep.body) {
                            learned.push((k, fh, c.proc_ == 9));
                        }
                    }
                }
            }
        }
        learned.sort_by_key(|l| l.0);
        for (_, fh, dir) in learned {
            self.gen.learn(&fh, dir);
        }
        Ok(all)
    }

    /// Campaign 1: each generated call is sent whole and must be answered or closed.
    /// One time in 40 a burst of calls goes out back to back before any reply is read
    /// (2-16 calls; one burst in 8 has 64-128, past `tcp.max_inflight` so the server
    /// must stop reading and resume; in flight together, parked on workers, answered
    /// out of order), and
    /// one time in 50 (when the calls change nothing) the connection is reset right
    /// after they are sent (the replies have nowhere to go; their buffers must still
    /// come back).
    pub fn run_structured(&mut self, rng: &mut super::rng::Rng) -> anyhow::Result<()> {
        let mut conn: Option<TcpStream> = None;
        let mut i = 0;
        while !self.done(i) {
            let burst = match rng.below(320) {
                0 => 64 + rng.below(65),
                1..=7 => 2 + rng.below(15),
                _ => 1,
            };
            let mut s = match conn.take() {
                Some(s) => s,
                None => self.connect()?,
            };
            let mut sent = Vec::with_capacity(burst);
            let mut open = true;
            for _ in 0..burst {
                if self.done(i) {
                    break;
                }
                let call = self.gen.next(i);
                let xid = self.next_xid();
                let rec = call_record(
                    xid, call.prog, call.vers, call.proc_, &call.cred, &call.args,
                );
                let label = call.label();
                self.tally.by_proc.entry(label.clone()).or_default().0 += 1;
                self.remember(i, label, rec.clone());
                self.tally.calls += 1;
                i += 1;
                open = open && wire::send(&mut s, &rec)?;
                sent.push((xid, Some(call)));
            }
            // Only calls that change nothing are cut off, so whether the server got to
            // run them does not change what later calls find.
            let harmless = sent
                .iter()
                .all(|(_, c)| c.as_ref().is_some_and(Call::changes_nothing));
            if open && rng.chance(1, 50) && harmless {
                reset(s);
                self.check_process()?;
                continue;
            }
            if open && self.await_replies(&mut s, &sent)? {
                conn = Some(s);
            }
            self.check_process()?;
        }
        Ok(())
    }

    /// Campaign 2: each generated call is mutated. A complete framing is followed by a
    /// NULL probe on the same connection, which must be answered (or the connection
    /// closed); an incomplete one is closed at once or left dangling for a while.
    pub fn run_mutate(&mut self, rng: &mut super::rng::Rng) -> anyhow::Result<()> {
        let mut conn: Option<TcpStream> = None;
        let mut dangling: VecDeque<TcpStream> = VecDeque::new();
        let mut i = 0;
        while !self.done(i) {
            if i == self.calls / 2 {
                self.flood(rng, i)?;
            }
            let call = self.gen.next(i);
            let xid = self.next_xid();
            let base = call_record(
                xid, call.prog, call.vers, call.proc_, &call.cred, &call.args,
            );
            let bytes = mutate::mutate(rng, &base);
            let label = format!("mutated {}", call.label());
            self.tally.by_proc.entry(call.label()).or_default().0 += 1;
            self.remember(i, label, bytes.clone());
            self.tally.calls += 1;
            let mut s = match conn.take() {
                Some(s) => s,
                None => self.connect()?,
            };
            match mutate::framing(&bytes, MAX_RECORD) {
                Framing::Complete => {
                    let probe = self.next_xid();
                    let null = call_record(probe, NFS_PROG, 3, 0, &Cred::None, &[]);
                    let sent = if rng.chance(1, 2) {
                        let mut both = bytes;
                        both.extend_from_slice(&null);
                        wire::send(&mut s, &both)?
                    } else {
                        wire::send(&mut s, &bytes)? && wire::send(&mut s, &null)?
                    };
                    if sent && self.await_replies(&mut s, &[(probe, None)])? {
                        conn = Some(s);
                    }
                }
                Framing::TooLong => {
                    // Refused at the record mark: the connection must close.
                    if wire::send(&mut s, &bytes)? {
                        self.await_close(&mut s, "a record mark beyond tcp.max_record")?;
                    }
                }
                Framing::Incomplete => {
                    self.tally.held += 1;
                    if wire::send(&mut s, &bytes)? && rng.chance(1, 8) {
                        if dangling.len() == MAX_DANGLING {
                            dangling.pop_front();
                        }
                        dangling.push_back(s);
                    }
                }
            }
            self.check_process()?;
            i += 1;
        }
        // Connections left holding a partial record must be closed by the server once
        // tcp.record_timeout_s has passed.
        for mut s in dangling {
            self.await_close(&mut s, "a connection holding a partial record")?;
        }
        Ok(())
    }

    /// Buffer exhaustion, once per mutation campaign (halfway): 128-256 connections each
    /// announce a record of 8 KiB to 1 MiB + 4 KiB and send only part of it, so each
    /// holds a record buffer (more 1 MiB ones than the default pools' large class has).
    /// Meanwhile a fresh client's NULL, MNT and GETATTR must be answered, and its 1 MiB
    /// WRITE (which needs a large buffer) must complete within the call timeout: the
    /// server reaps the flood after `tcp.record_timeout_s`. Then they all close.
    fn flood(&mut self, rng: &mut super::rng::Rng, index: usize) -> anyhow::Result<()> {
        let n = 128 + rng.below(129);
        let mut held = Vec::with_capacity(n);
        let mut all = Vec::new();
        for _ in 0..n {
            let len = *rng.pick(&[
                8192u32,
                65536,
                1 << 20,
                1 << 20,
                1 << 20,
                (1 << 20) + 4096 - 64,
            ]);
            let part = rng.below((len as usize / 2).min(64 * 1024));
            let mut b = (len | super::wire::LAST_FRAG).to_be_bytes().to_vec();
            b.extend(rng.bytes(part));
            all.extend_from_slice(&b[..b.len().min(64)]);
            let mut s = self.connect()?;
            if wire::send(&mut s, &b)? {
                held.push(s);
            }
        }
        self.remember(
            index,
            format!("flood: {n} connections holding partial records (first 64 bytes of each)"),
            all,
        );
        // Give the reactor a moment to read every record mark before counting.
        std::thread::sleep(Duration::from_millis(200));
        if let Ok(m) = self.gw.scrape() {
            println!(
                "fuzz: flood: {} connections holding partial records, pool buffers in use {}, class-empty allocations so far {}",
                held.len(),
                m.sum("nfsgw_pool_buffers_in_use", &[]),
                m.sum("nfsgw_pool_exhausted_total", &[])
            );
        }
        let name = format!("zz-flood-{}-{index}", self.seed);
        let probe = || -> anyhow::Result<()> {
            let mut c = super::client::Client::connect(&self.gw.addr, self.timeout)?;
            c.null()?;
            let root = c.mount()?;
            c.getattr(&root)?;
            // A 1 MiB WRITE needs a large buffer: it may park until the server reaps
            // the flood (tcp.record_timeout_s), but must then complete.
            let f = c.create(&root, name.as_bytes())?;
            c.write(&f, 0, &vec![0xf1; 1 << 20])?;
            c.remove(&root, name.as_bytes())
        };
        if let Err(e) = probe() {
            return Err(self.fail(&format!(
                "a well-behaved client was not served while {} connections held partial records: {e:#}",
                held.len()
            )));
        }
        self.check_process()?;
        drop(held);
        Ok(())
    }

    /// Reads (and drops) whatever the server still sends on `s` until it closes; no
    /// close within the record timeout plus the call timeout is a failure.
    pub(super) fn await_close(&mut self, s: &mut TcpStream, what: &str) -> anyhow::Result<()> {
        let deadline = Instant::now() + RECORD_TIMEOUT + self.timeout;
        loop {
            match wire::read_record(s, deadline).map_err(|e| self.fail(&e.to_string()))? {
                Got::Closed => {
                    self.tally.closes += 1;
                    return Ok(());
                }
                Got::Reply(_) => {}
                Got::Timeout => {
                    return Err(self.fail(&format!(
                        "{what}: not closed by the server within {:?}",
                        RECORD_TIMEOUT + self.timeout
                    )))
                }
            }
        }
    }
}

/// Closes `s` with a reset (SO_LINGER 0) instead of an orderly shutdown.
fn reset(s: TcpStream) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a socket we own, with a valid `linger` and its exact size.
    unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&s),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    drop(s);
}
