//! Runs one phase on one connection: the phase's ops, up to the connection's depth in
//! flight, each op one or more calls in a row (an NFSv3 create is CREATE then WRITE; a
//! listing is READDIRPLUS pages, cookie after cookie). The protocol ([`Proto`]) says
//! what each step sends and what its reply means; this keeps the queue, the resends
//! after JUKEBOX/DELAY, and the latency of each op from its first call to its last
//! reply (of each page, for listings).

use super::plan::Phase;
use crate::jukebox::Tries;
use crate::stats::OpStats;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// One op: a name in a directory (a listing's name is the directory's, for messages).
#[derive(Clone, Debug)]
pub struct Work {
    pub dir: Vec<u8>,
    pub name: String,
}

/// An op's progress between its calls.
#[derive(Debug, Default)]
pub struct OpState {
    /// Calls answered so far (pages, for listings).
    pub step: u32,
    /// The handle an earlier step got (the file for WRITE and READ, the new directory).
    pub fh: Vec<u8>,
    /// Listings: where the next page starts, and the names so far.
    pub cookie: u64,
    pub verf: [u8; 8],
    pub names: Vec<Vec<u8>>,
    /// Payload bytes moved.
    pub bytes: u64,
    pub tries: Tries,
    /// NFSv4.1: the slot the call in flight took.
    pub seq: Option<crate::nfs4::Seq>,
}

/// What a reply means for its op.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Send the op's next call.
    Next,
    /// A listing page is in (recorded as one op); send the next page's call.
    Page,
    /// The server said "later" (NFS3ERR_JUKEBOX, NFS4ERR_DELAY): resend after this.
    Later(Duration),
    Done,
    /// The op failed: the server's error, or a reply that does not decode.
    Failed(String),
    /// The op worked but `--verify` found it wrong.
    Wrong(String),
}

/// One connection's protocol.
pub trait Proto: Send {
    /// Calls it may have in flight.
    fn depth(&self) -> usize;
    /// Sends the op's next call; returns its xid.
    fn send(&mut self, phase: Phase, w: &Work, st: &mut OpState) -> anyhow::Result<u32>;
    /// The next reply: its xid and procedure results (or why the call failed).
    fn recv(&mut self) -> anyhow::Result<(u32, anyhow::Result<Vec<u8>>)>;
    /// Takes an op's reply.
    fn reply(
        &mut self,
        phase: Phase,
        w: &Work,
        st: &mut OpState,
        body: anyhow::Result<Vec<u8>>,
    ) -> Step;
    /// Resends after JUKEBOX/DELAY so far.
    fn jukebox(&self) -> u64;
    /// Ends the connection's protocol state (NFSv4.1: its session and client).
    fn finish(self: Box<Self>) -> anyhow::Result<()> {
        Ok(())
    }
}

/// Messages kept per phase and connection (the counts are always whole).
const KEEP: usize = 10;

/// What a phase did on one connection.
#[derive(Debug, Default)]
pub struct PhaseOut {
    pub stats: OpStats,
    /// Per op: the handle it got (mkdir) and the names it listed (readdir).
    pub handles: Vec<Vec<u8>>,
    pub listings: Vec<Vec<Vec<u8>>>,
    /// The first failures and verify problems.
    pub errors: Vec<String>,
    pub wrong: Vec<String>,
}

impl PhaseOut {
    fn new(n: usize) -> PhaseOut {
        PhaseOut {
            handles: vec![Vec::new(); n],
            listings: vec![Vec::new(); n],
            ..PhaseOut::default()
        }
    }

    fn finish(&mut self, i: usize, st: OpState, step: Step, from: Instant) {
        self.stats.record(from.elapsed().as_nanos() as u64);
        self.stats.bytes += st.bytes;
        match step {
            Step::Failed(e) => {
                self.stats.errors += 1;
                if self.errors.len() < KEEP {
                    self.errors.push(e);
                }
            }
            Step::Wrong(e) => {
                self.stats.verify_failures += 1;
                if self.wrong.len() < KEEP {
                    self.wrong.push(e);
                }
            }
            _ => {
                self.handles[i] = st.fh;
                self.listings[i] = st.names;
            }
        }
    }
}

/// An op in flight: its index, when it (or its current page) started, its state.
type Flight = (usize, Instant, OpState);

/// Runs `works` as `phase` on `p`. An error means the connection is broken.
pub fn run_phase(p: &mut dyn Proto, phase: Phase, works: &[Work]) -> anyhow::Result<PhaseOut> {
    let mut out = PhaseOut::new(works.len());
    let juke0 = p.jukebox();
    let mut next = 0;
    let mut inflight: HashMap<u32, Flight> = HashMap::new();
    let mut later: Vec<(Instant, Flight)> = Vec::new();
    loop {
        while inflight.len() < p.depth().max(1) {
            let now = Instant::now();
            let f = if let Some(k) = later.iter().position(|(at, _)| *at <= now) {
                later.swap_remove(k).1
            } else if next < works.len() {
                next += 1;
                (next - 1, now, OpState::default())
            } else {
                break;
            };
            let (i, from, mut st) = f;
            let xid = p.send(phase, &works[i], &mut st)?;
            inflight.insert(xid, (i, from, st));
        }
        if inflight.is_empty() {
            let Some(at) = later.iter().map(|(at, _)| *at).min() else {
                break;
            };
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
            continue;
        }
        let (xid, body) = p.recv()?;
        let (i, from, mut st) = inflight
            .remove(&xid)
            .ok_or_else(|| anyhow::anyhow!("reply with unknown xid {xid}"))?;
        match p.reply(phase, &works[i], &mut st, body) {
            Step::Next => {
                st.step += 1;
                let xid = p.send(phase, &works[i], &mut st)?;
                inflight.insert(xid, (i, from, st));
            }
            Step::Page => {
                st.step += 1;
                out.stats.record(from.elapsed().as_nanos() as u64);
                let xid = p.send(phase, &works[i], &mut st)?;
                inflight.insert(xid, (i, Instant::now(), st));
            }
            Step::Later(d) => later.push((Instant::now() + d, (i, from, st))),
            done => out.finish(i, st, done, from),
        }
    }
    out.stats.jukebox = p.jukebox() - juke0;
    Ok(out)
}

/// After a "later" answer: the pause before resending, or the op's failure when
/// `--jukebox-timeout` has run out.
pub fn later(st: &mut OpState, policy: &crate::jukebox::Policy, what: &str) -> Step {
    match st.tries.next(policy, Instant::now()) {
        Some(d) => Step::Later(d),
        None => Step::Failed(policy.gave_up(what)),
    }
}
