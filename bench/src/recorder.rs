//! Judging replies and recording them: a thread's [`Stats`] (whole run and current
//! second), the written-block set for read-back, and `--verify`'s byte checks.

use crate::conn::{ConnCore, Followup, Slot};
use crate::driver::{Clock, Interval, Plan, Report};
use crate::fileset::BlockSet;
use crate::jukebox::JUKEBOX;
use crate::nfs4;
use crate::schedule::{interval_of, latency_ns};
use crate::stats::Stats;
use crate::workload::{Kind, Op};
use engine::rpc::Cred;
use nfs_wire::v3call;
use std::sync::mpsc::Sender;
use std::time::Instant;

/// A thread's results so far, and what judging a reply needs: everything a completion
/// updates apart from its connection.
pub struct Recorder<'p> {
    pub plan: &'p Plan<'p>,
    pub clock: Clock,
    pub thread: usize,
    pub stats: Stats,
    pub interval: Stats,
    pub interval_index: u64,
    pub written: BlockSet,
    pub payload: Vec<u8>,
    pub cred: Cred,
    pub reports: &'p Sender<Report>,
    pub complaints: u32,
    pub last_completion: Instant,
}

impl<'p> Recorder<'p> {
    pub fn new(
        plan: &'p Plan<'p>,
        clock: Clock,
        thread: usize,
        reports: &'p Sender<Report>,
    ) -> Recorder<'p> {
        let files = plan.files;
        let writes = plan.mix.any(Op::writes);
        Recorder {
            plan,
            clock,
            thread,
            stats: Stats::default(),
            interval: Stats::default(),
            interval_index: 0,
            written: if plan.track_writes {
                BlockSet::new(files.len(), files.blocks(plan.bs))
            } else {
                BlockSet::default()
            },
            payload: vec![0x5a; if writes { plan.bs as usize } else { 0 }],
            cred: crate::client::bench_cred(),
            reports,
            complaints: 0,
            last_completion: clock.start,
        }
    }

    /// Reports a problem on stderr: the first few in full (a failing server would
    /// otherwise flood the terminal), the rest only counted (see [`Self::finish`]).
    pub fn complain(&mut self, msg: impl FnOnce() -> String) {
        if self.complaints < SHOWN_COMPLAINTS {
            eprintln!("bench: {}", msg());
        }
        self.complaints += 1;
    }

    /// Says how many problems were not shown.
    pub fn finish(&self) {
        if self.complaints > SHOWN_COMPLAINTS {
            eprintln!(
                "bench: thread {}: {} more problem(s) not shown",
                self.thread,
                self.complaints - SHOWN_COMPLAINTS
            );
        }
    }

    /// Sends finished intervals up to (not including) `upto`.
    pub fn roll_intervals(&mut self, upto: u64) {
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
    pub fn record(&mut self, slot: &Slot, done: Instant, outcome: Outcome) {
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
    pub fn complete(&mut self, c: &mut ConnCore, xid: u32, reply: Result<&[u8], String>) {
        if self.plan.v4.is_some() {
            return self.complete4(c, xid, reply);
        }
        let done = Instant::now();
        let Some(slot) = c.inflight.remove(&xid) else {
            self.complain(|| format!("reply to unknown xid {xid}"));
            return;
        };
        let body =
            reply.and_then(|rec| v3call::results(rec).map_err(|e| format!("call {xid}: {e}")));
        let mut o = Outcome::default();
        let later =
            matches!(&body, Ok(b) if slot.kind != Kind::Null && v3call::status(b) == JUKEBOX);
        let slot = match later {
            true => match self.resend_later(c, slot, done) {
                Ok(()) => return,
                Err(slot) => slot,
            },
            false => slot,
        };
        if later {
            o.failed = true;
            let why = self.plan.retry.gave_up(slot.kind.name());
            self.complain(|| why);
            self.record(&slot, done, o);
            return;
        }
        match body {
            Err(e) => {
                o.failed = true;
                self.complain(|| format!("{} failed: {e}", slot.kind.name()));
            }
            Ok(body) => match slot.kind {
                Kind::Read => match v3call::parse_read(body) {
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
                    let st = v3call::status(body);
                    if st != 0 {
                        o.failed = true;
                        self.complain(|| format!("{} failed: nfsstat3 {st}", k.name()));
                    } else if k == Kind::Write {
                        o.bytes = slot.len as u64;
                        if self.plan.track_writes {
                            let block = slot.off / self.plan.bs as u64;
                            self.written.insert(slot.file, block);
                        }
                    } else if let Some(kind) = k.followed_by() {
                        if let Some(name) = slot.name.clone() {
                            c.followups.push_back(Followup {
                                kind,
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

    /// Judges one NFSv4.1 reply: frees its session slot (advancing the slot's sequence
    /// id when the server processed the SEQUENCE, RFC 8881 §2.10.6.1), resends it after
    /// NFS4ERR_DELAY (at most [`MAX_TRIES`] times), else records it as
    /// [`Self::complete`] does for NFSv3.
    fn complete4(&mut self, c: &mut ConnCore, xid: u32, reply: Result<&[u8], String>) {
        let done = Instant::now();
        let Some(mut slot) = c.inflight.remove(&xid) else {
            self.complain(|| format!("reply to unknown xid {xid}"));
            return;
        };
        let body =
            reply.and_then(|rec| v3call::results(rec).map_err(|e| format!("call {xid}: {e}")));
        let decoded = match (&body, slot.kind) {
            (Err(e), _) => Err(e.clone()),
            (Ok(_), Kind::Null) => Ok(None),
            (Ok(b), _) => nfs4::reply::decode(b).map(Some),
        };
        if let Some((s, q)) = slot.seq4.take() {
            let processed = matches!(&decoded, Ok(Some(d)) if d.seq_done);
            c.slots.release(s, q, processed);
        }
        let mut o = Outcome::default();
        match decoded {
            Err(e) => {
                o.failed = true;
                self.complain(|| format!("{} failed: {e}", slot.kind.name()));
            }
            Ok(None) => {}
            Ok(Some(d)) if d.status == nfs4::status::DELAY => {
                let Err(s) = self.resend_later(c, slot, done) else {
                    return;
                };
                o.failed = true;
                let why = self.plan.retry.gave_up(s.kind.name());
                self.complain(|| why);
                slot = s;
            }
            Ok(Some(d)) if !d.ok() => {
                o.failed = true;
                let (st, opn) = (d.status, d.failed_op);
                self.complain(|| {
                    format!(
                        "{} failed: {} (op {opn})",
                        slot.kind.name(),
                        nfs4::reply::status_name(st)
                    )
                });
            }
            Ok(Some(d)) => match slot.kind {
                Kind::Read => {
                    let data = d.data.unwrap_or_default();
                    o.bytes = data.len() as u64;
                    if self.plan.verify {
                        self.check_read(&slot, data, &mut o);
                    }
                }
                Kind::Write => {
                    o.bytes = slot.len as u64;
                    if self.plan.track_writes {
                        let block = slot.off / self.plan.bs as u64;
                        self.written.insert(slot.file, block);
                    }
                }
                Kind::Create | Kind::Mkdir => {
                    if let (Some(name), Some(kind)) = (slot.name.clone(), slot.kind.followed_by()) {
                        c.followups.push_back(Followup {
                            kind,
                            name,
                            due: done,
                            recorded: slot.recorded,
                        });
                    }
                }
                _ => {}
            },
        }
        self.record(&slot, done, o);
    }

    /// Queues a call answered JUKEBOX / DELAY for a resend after its pause, counted;
    /// gives it back (`Err`) when `--jukebox-timeout` has passed since its first such
    /// answer.
    fn resend_later(&mut self, c: &mut ConnCore, mut slot: Slot, now: Instant) -> Result<(), Slot> {
        let Some(pause) = slot.tries.next(&self.plan.retry, now) else {
            return Err(slot);
        };
        if slot.recorded {
            for s in [&mut self.stats, &mut self.interval] {
                s.kind(slot.kind).jukebox += 1;
            }
        }
        // Pauses grow per call, so a later call may be due first: keep the queue in
        // due order (it holds at most the calls in flight).
        let due = now + pause;
        let at = c.retries.partition_point(|r| r.0 <= due);
        c.retries.insert(at, (due, slot));
        Ok(())
    }

    fn check_read(&mut self, slot: &Slot, data: &[u8], o: &mut Outcome) {
        let files = self.plan.files;
        let want = (slot.len as u64).min(files.size.saturating_sub(slot.off)) as usize;
        let pat = files.pattern(slot.file);
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

/// How many problems a thread prints in full.
const SHOWN_COMPLAINTS: u32 = 5;

/// What one completed call did, beyond its latency.
#[derive(Default)]
pub struct Outcome {
    pub bytes: u64,
    pub failed: bool,
    pub verified: u64,
    pub bad: bool,
}
