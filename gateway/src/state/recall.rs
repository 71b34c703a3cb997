//! The callback state machine (RFC 8881 §2.10.3.1, §10.2, §20; docs/architecture.md
//! §8 "Callbacks"): CB_NULL probes and every other callback (CB_RECALL,
//! CB_LAYOUTRECALL, CB_OFFLOAD, CB_GETATTR, CB_NOTIFY_DEVICEID: `recall_kinds.rs`),
//! their XIDs (a table of our own, separate from forward XIDs), back-channel slot 0
//! sequence ids per session, timeouts and retries — one path for all kinds, each
//! kind's failures decided by its `Policy`. Sans-IO and sans-protocol: `RecallTable::step` takes replies
//! and time and returns the records to send, made and read by a `CallbackWire`
//! (`backchannel.rs`; `nfs4::callback` is the codec, and its `RecallDriver` pairs the
//! two); the callback thread (`server/callbacks.rs`) owns the driver and moves the
//! records to the reactor that owns each connection.
//!
//! A recall is kept per delegation, not per connection: every attempt looks up the
//! client's currently bound back channel, so a callback outstanding when its
//! connection drops is resent on the connection the client binds next, and one the
//! client never answers ends with the revocation after the lease
//! (`Delegations::revoke_overdue`).

use super::backchannel::{CallbackWire, CbAttrs, CbCall, CbSec, RecallAnswer, RecallReply};
use super::delegations::Delegations;
use super::layouts::Layouts;
use super::BackChannelInfo;
use crate::conn::{ConnKind, ConnRef};
use crate::stats::callbacks::CallbackResult;
use crate::stats::Transport;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[path = "recall_kinds.rs"]
mod kinds;
#[cfg(test)]
use kinds::BAD_STATEID_RETRIES;
use kinds::{Event, Kind, Next, Tables};

/// No reply within this long: the callback timed out (retried on the bound channel).
pub const CB_TIMEOUT: Duration = Duration::from_secs(5);
/// Delay before resending after NFS4ERR_DELAY, an RPC error or no back channel.
pub const RETRY: Duration = Duration::from_secs(2);
/// Jobs waiting for the callback thread, callbacks in flight, sessions whose slot
/// sequence we track, recalls in progress: each at most this many.
const MAX_JOBS: usize = 4096;
const MAX_PENDING: usize = 4096;
const MAX_SESSIONS: usize = 4096;

/// Work for the callback thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Job {
    /// Probe a back channel; `Some(sec)` (re)sets the session's callback security.
    Probe(u64, BackChannelInfo, Option<Option<CbSec>>),
    Recall([u8; 12]),
    /// Ask the holder of the write delegation `other` for its size and change
    /// (CB_GETATTR: `recall_kinds.rs`).
    Getattr([u8; 12]),
}

/// The queue of jobs and the callback thread's wake-up (shared: workers push, the
/// callback thread pops; a short Mutex, never held across anything but a push/pop).
#[derive(Default)]
pub(crate) struct Inbox {
    jobs: Mutex<VecDeque<Job>>,
    /// Set once at start; reactors unpark it without taking a lock.
    thread: std::sync::OnceLock<std::thread::Thread>,
}

impl Inbox {
    /// Queues a job and wakes the callback thread. Over `MAX_JOBS` the job is dropped
    /// with a log line (a recall then ends by revocation after the lease).
    pub fn push(&self, job: Job) {
        {
            let mut q = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
            if q.len() >= MAX_JOBS {
                tracing::warn!(?job, "callback queue full; dropping a callback job");
                return;
            }
            q.push_back(job);
        }
        self.wake();
    }

    pub fn pop(&self) -> Option<Job> {
        self.jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front()
    }

    /// Registers the thread `wake` unparks.
    pub fn set_thread(&self, t: std::thread::Thread) {
        let _ = self.thread.set(t);
    }

    /// The callback thread, for a thread that finishes work it must hear of (an
    /// asynchronous COPY) to wake it.
    pub fn waker(&self) -> Option<std::thread::Thread> {
        self.thread.get().cloned()
    }

    pub fn wake(&self) {
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }
}

/// A record for a reactor to send on a connection (no record mark).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcall {
    pub conn: ConnRef,
    pub record: Vec<u8>,
}

#[derive(Debug, Clone, Copy)]
enum What {
    Probe(u64),
    /// A callback of `kind` for its task `other`, on slot 0 of `session`.
    Cb {
        kind: Kind,
        other: [u8; 12],
        session: [u8; 16],
    },
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    what: What,
    sent: Instant,
    /// The back channel's transport (the metrics' `transport` label).
    via: Transport,
}

/// The transport of a back-channel connection.
pub fn transport_of(conn: &ConnRef) -> Transport {
    match conn.kind {
        ConnKind::Tcp(_) => Transport::Tcp,
        ConnKind::Rdma(_) => Transport::Rdma,
    }
}

/// Back-channel slot 0 of one session (RFC 8881 §2.10.6.1: one request per slot at a
/// time; the sequence id starts at 1 and goes up by one per new request).
#[derive(Debug, Clone, Copy)]
struct Slot {
    seqid: u32,
    busy: bool,
}

#[derive(Debug, Clone, Copy)]
struct Task {
    next_try: Instant,
    in_flight: bool,
    /// What the kind's `Policy` counts: lost attempts or BAD_STATEID answers.
    strikes: u8,
    /// The XID of the last call sent while no reply to it came back (it timed out,
    /// or the transport reported it failed or lost): the resend is a retransmission
    /// and reuses it (RFC 8167 §5.4, R8167-17 "same XID"). Cleared by any reply (the
    /// next attempt is a new call).
    retransmit: Option<u32>,
}

impl Task {
    /// A task to try at `now`.
    fn due(now: Instant) -> Task {
        Task {
            next_try: now,
            in_flight: false,
            strikes: 0,
            retransmit: None,
        }
    }
}

/// The callback table (owned by the callback thread alone).
pub struct RecallTable {
    pending: HashMap<u32, Pending>,
    next_xid: u32,
    slots: HashMap<[u8; 16], Slot>,
    /// The callback security of each session (from its last probe).
    secs: HashMap<[u8; 16], CbSec>,
    /// The callbacks being driven, one queue per kind (`Kind::index`), by the key
    /// the kind's table gives them.
    queues: [HashMap<[u8; 12], Task>; Kind::COUNT],
    /// Layouts the client answered NFS4ERR_NOMATCHING_LAYOUT for: forgotten by the
    /// next `step_layouts` (which has the layout table).
    layouts_gone: Vec<[u8; 12]>,
    /// Notices told or given up on: dropped from the layout table by the next
    /// `step_layouts`.
    notices_done: Vec<[u8; 12]>,
}

impl Default for RecallTable {
    fn default() -> Self {
        // Start callback XIDs away from small numbers clients use for forward calls
        // (they are a separate table anyway: only replies on our back channel match).
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| {
                d.subsec_nanos() ^ (d.as_secs() as u32).rotate_left(16)
            });
        RecallTable {
            pending: HashMap::new(),
            next_xid: seed | 1,
            slots: HashMap::new(),
            secs: HashMap::new(),
            queues: Default::default(),
            layouts_gone: Vec::new(),
            notices_done: Vec::new(),
        }
    }
}

impl RecallTable {
    /// Callbacks awaiting a reply.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// Recalls still being driven.
    pub fn recalls(&self) -> usize {
        self.queues[Kind::Recall.index()].len()
    }

    fn xid(&mut self) -> u32 {
        loop {
            let x = self.next_xid;
            self.next_xid = self.next_xid.wrapping_add(1);
            if !self.pending.contains_key(&x) {
                return x;
            }
        }
    }

    /// One pass: match replies and failures, expire callbacks past `CB_TIMEOUT`, take new jobs,
    /// revoke what the lease ran out on, and (re)send due callbacks of the delegation
    /// table (CB_GETATTR, CB_RECALL, CB_OFFLOAD) on each client's current back channel
    /// (`lookup`, i.e. `Clients::lookup_backchannel`), each callback made and read by
    /// `wire`.
    pub fn step(
        &mut self,
        wire: &dyn CallbackWire,
        dl: &Delegations,
        lookup: &dyn Fn(u64) -> Option<BackChannelInfo>,
        now: Instant,
    ) -> Vec<Outcall> {
        let mut out = Vec::new();
        while let Some((xid, rec, via)) = dl.pop_reply() {
            self.on_reply(wire, dl, xid, &rec, via, now);
        }
        while let Some(xid) = dl.pop_failure() {
            self.on_failure(dl, xid, now);
        }
        self.expire(dl, now);
        while let Some(job) = dl.inbox.pop() {
            match job {
                Job::Probe(clientid, info, sec) => {
                    if let Some(sec) = sec {
                        self.set_sec(info.session, sec);
                    }
                    self.send_probe(wire, dl, clientid, info, now, &mut out)
                }
                Job::Recall(other) => {
                    self.enqueue(Kind::Recall, other, now);
                }
                Job::Getattr(other) => self.queue_getattr(dl, other, now),
            }
        }
        while let Some(other) = dl.offloads.take_finished() {
            self.enqueue(Kind::Offload, other, now);
        }
        dl.offloads.expire(now);
        dl.revoke_overdue(now);
        let t = Tables { dl, layouts: None };
        for kind in [Kind::Getattr, Kind::Recall, Kind::Offload] {
            self.send(kind, wire, t, lookup, now, &mut out);
        }
        out
    }

    /// One pass for layouts, after `step` (which matched the replies): takes the
    /// recalls `layouts` began (CB_LAYOUTRECALL, RFC 8881 §20.3) and the device id
    /// deletions it lets go (CB_NOTIFY_DEVICEID, §20.12), forgets the layouts clients
    /// said they do not hold and the notices told or given up, revokes what the lease
    /// ran out on (`Layouts::revoke_overdue`), and sends the due ones on each client's
    /// current back channel.
    pub fn step_layouts(
        &mut self,
        wire: &dyn CallbackWire,
        dl: &Delegations,
        layouts: &Layouts,
        lookup: &dyn Fn(u64) -> Option<BackChannelInfo>,
        now: Instant,
    ) -> Vec<Outcall> {
        let mut out = Vec::new();
        for other in layouts.take_recalls() {
            self.enqueue(Kind::LayoutRecall, other, now);
        }
        for other in std::mem::take(&mut self.layouts_gone) {
            layouts.forget(&other);
        }
        layouts.revoke_overdue(now, dl.lease());
        let t = Tables {
            dl,
            layouts: Some(layouts),
        };
        self.send(Kind::LayoutRecall, wire, t, lookup, now, &mut out);
        for key in std::mem::take(&mut self.notices_done) {
            layouts.notified(&key);
        }
        for key in layouts.take_notices() {
            if !self.enqueue(Kind::Notify, key, now) {
                layouts.notified(&key);
            }
        }
        self.send(Kind::Notify, wire, t, lookup, now, &mut out);
        out
    }

    /// When the next step is due (for the thread's sleep): the earliest retry or
    /// timeout, at most `max` from now.
    pub fn next_due(&self, now: Instant, max: Duration) -> Duration {
        let mut due = now + max;
        for t in self.queues.iter().flat_map(|q| q.values()) {
            if t.in_flight {
                continue;
            }
            due = due.min(t.next_try);
        }
        for p in self.pending.values() {
            due = due.min(p.sent + CB_TIMEOUT);
        }
        due.saturating_duration_since(now)
    }

    /// Remembers (or forgets) a session's callback security, bounded.
    fn set_sec(&mut self, session: [u8; 16], sec: Option<CbSec>) {
        match sec {
            None => {
                self.secs.remove(&session);
            }
            Some(s) => {
                if self.secs.len() >= MAX_SESSIONS && !self.secs.contains_key(&session) {
                    self.secs.clear();
                }
                self.secs.insert(session, s);
            }
        }
    }

    fn send_probe(
        &mut self,
        wire: &dyn CallbackWire,
        dl: &Delegations,
        clientid: u64,
        info: BackChannelInfo,
        now: Instant,
        out: &mut Vec<Outcall>,
    ) {
        if self.pending.len() >= MAX_PENDING {
            return;
        }
        let xid = self.xid();
        let sec = self.secs.get(&info.session);
        match wire.encode(xid, info.cb_program, &CbCall::Null, info.max_request, sec) {
            Some(record) => {
                let via = transport_of(&info.conn);
                self.pending.insert(
                    xid,
                    Pending {
                        what: What::Probe(clientid),
                        sent: now,
                        via,
                    },
                );
                dl.stats().callback(via, CallbackResult::Sent);
                out.push(Outcall {
                    conn: info.conn,
                    record,
                });
            }
            None => tracing::warn!(
                clientid,
                max = info.max_request,
                "back channel too small for CB_NULL"
            ),
        }
    }

    /// Sends the due callbacks of `kind`, each on its client's current back channel;
    /// one waits while its session's slot is busy.
    fn send(
        &mut self,
        kind: Kind,
        wire: &dyn CallbackWire,
        t: Tables,
        lookup: &dyn Fn(u64) -> Option<BackChannelInfo>,
        now: Instant,
        out: &mut Vec<Outcall>,
    ) {
        for other in self.due(kind, now) {
            let Some((clientid, body)) = t.target(kind, &other) else {
                self.queues[kind.index()].remove(&other);
                continue;
            };
            let Some(info) = lookup(clientid) else {
                // No back channel bound now: a lost attempt (the next binding, or
                // the kind's end, takes over).
                self.settle(kind, other, Event::Lost(now + RETRY), t.dl, None, now);
                continue;
            };
            let Some(seqid) = self.claim_slot(info.session) else {
                continue;
            };
            let call = body.call(&info, seqid);
            match self.post(kind, other, &call, &info, wire, t.dl, now, out) {
                Some(via) if kind == Kind::Recall => t.dl.recall_sent(&other, via),
                Some(_) => {}
                None => {
                    tracing::warn!(
                        clientid,
                        max = info.max_request,
                        "{} does not fit the back channel; {}",
                        kind.name(),
                        kind.end()
                    );
                    self.give_up(kind, other, t.dl, now);
                }
            }
        }
    }

    /// The entries of `kind`'s queue due at `now` (not in flight, their time come).
    fn due(&self, kind: Kind, now: Instant) -> Vec<[u8; 12]> {
        self.queues[kind.index()]
            .iter()
            .filter(|(_, t)| !t.in_flight && t.next_try <= now)
            .map(|(o, _)| *o)
            .collect()
    }

    /// Encodes `call` (on the back channel slot just claimed) and queues it for
    /// `info`'s connection, the task `other` of `kind` marked in flight. A
    /// retransmission keeps its XID (unless, improbably, it is in use again). `None`
    /// when the call does not fit the back channel: the slot is freed and the task
    /// dropped (the caller gives it up).
    #[allow(clippy::too_many_arguments)]
    fn post(
        &mut self,
        kind: Kind,
        other: [u8; 12],
        call: &CbCall,
        info: &BackChannelInfo,
        wire: &dyn CallbackWire,
        dl: &Delegations,
        now: Instant,
        out: &mut Vec<Outcall>,
    ) -> Option<Transport> {
        let again = self.queues[kind.index()]
            .get(&other)
            .and_then(|t| t.retransmit);
        let xid = match again {
            Some(x) if !self.pending.contains_key(&x) => x,
            _ => self.xid(),
        };
        let sec = self.secs.get(&info.session);
        let tasks = &mut self.queues[kind.index()];
        let Some(record) = wire.encode(xid, info.cb_program, call, info.max_request, sec) else {
            tasks.remove(&other);
            self.free_slot(&info.session, false);
            return None;
        };
        if let Some(t) = tasks.get_mut(&other) {
            t.in_flight = true;
            t.retransmit = Some(xid);
        }
        let via = transport_of(&info.conn);
        let what = What::Cb {
            kind,
            other,
            session: info.session,
        };
        let sent = Pending {
            what,
            sent: now,
            via,
        };
        self.pending.insert(xid, sent);
        dl.stats().callback(via, CallbackResult::Sent);
        out.push(Outcall {
            conn: info.conn,
            record,
        });
        Some(via)
    }

    /// Slot 0 of `session`'s back channel for a new callback: its sequence id, or
    /// `None` while a callback is outstanding on it or too many are in flight.
    fn claim_slot(&mut self, session: [u8; 16]) -> Option<u32> {
        if self.slots.len() >= MAX_SESSIONS && !self.slots.contains_key(&session) {
            self.slots.retain(|_, s| s.busy);
        }
        let slot = self.slots.entry(session).or_insert(Slot {
            seqid: 1,
            busy: false,
        });
        if slot.busy || self.pending.len() >= MAX_PENDING {
            return None;
        }
        slot.busy = true;
        Some(slot.seqid)
    }

    fn free_slot(&mut self, session: &[u8; 16], advance: bool) {
        if let Some(s) = self.slots.get_mut(session) {
            s.busy = false;
            if advance {
                s.seqid = s.seqid.wrapping_add(1).max(1);
            }
        }
    }

    /// What `event` means for `kind`'s callback `other`, by the kind's `Policy`:
    /// resent, ended as delivered (`via`: the transport that carried the answer;
    /// `attrs`: a CB_GETATTR's), or given up.
    fn settle(
        &mut self,
        kind: Kind,
        other: [u8; 12],
        event: Event,
        dl: &Delegations,
        answer: Option<(Transport, Option<CbAttrs>)>,
        now: Instant,
    ) {
        let mut none = 0;
        let task = self.queues[kind.index()].get_mut(&other);
        let strikes = task.map_or(&mut none, |t| &mut t.strikes);
        match kind.decide(strikes, event, now) {
            Next::Resend(at) => {
                if let Some(t) = self.queues[kind.index()].get_mut(&other) {
                    t.in_flight = false;
                    t.next_try = at;
                }
            }
            Next::Done => {
                let said = match event {
                    Event::Answered(a) => a,
                    _ => RecallAnswer::Accepted,
                };
                let (via, attrs) = answer.unwrap_or((Transport::Tcp, None));
                self.done(kind, other, dl, via, said, attrs, now)
            }
            Next::GiveUp => {
                tracing::info!(?event, "{} given up; {}", kind.name(), kind.end());
                self.give_up(kind, other, dl, now)
            }
        }
    }

    /// Callbacks without a reply for `CB_TIMEOUT`: a probe marks the back channel
    /// down; any other is a lost attempt, resent at once on whatever channel is bound
    /// (same slot sequence id: if the client did process it, it answers as a replay).
    fn expire(&mut self, dl: &Delegations, now: Instant) {
        let late: Vec<u32> = self
            .pending
            .iter()
            .filter(|(_, p)| now.saturating_duration_since(p.sent) >= CB_TIMEOUT)
            .map(|(x, _)| *x)
            .collect();
        for xid in late {
            let Some(p) = self.pending.remove(&xid) else {
                continue;
            };
            dl.stats().callback(p.via, CallbackResult::TimedOut);
            self.lost(dl, p.what, now, now);
        }
    }

    /// A callback the RDMA transport reports failed (RFC 8167 §5.4: RDMA_ERROR for
    /// it, R8167-16, or its connection lost, R8167-17): a probe marks the back channel
    /// down (the client sees CB_PATH_DOWN and binds another, which probes again); any
    /// other frees its slot without advancing it (the client may not have seen it)
    /// and is a lost attempt, resent after `RETRY` on the back channel bound by then.
    /// Unknown XIDs (already answered or timed out) are ignored.
    fn on_failure(&mut self, dl: &Delegations, xid: u32, now: Instant) {
        let Some(p) = self.pending.remove(&xid) else {
            return;
        };
        dl.stats().callback(p.via, CallbackResult::Failed);
        self.lost(dl, p.what, now, now + RETRY);
    }

    /// `what` went unanswered: a probe marks the back channel down; a callback's slot
    /// is freed as it was and the attempt is lost (a resend goes at `at`).
    fn lost(&mut self, dl: &Delegations, what: What, now: Instant, at: Instant) {
        match what {
            What::Probe(clientid) => dl.set_callback_up(clientid, false),
            What::Cb {
                kind,
                other,
                session,
            } => {
                self.free_slot(&session, false);
                self.settle(kind, other, Event::Lost(at), dl, None, now);
            }
        }
    }

    /// A REPLY matched by XID (RFC 8881 §20.9.3 for CB_SEQUENCE; the operation's
    /// status after it: §20.2.3 CB_RECALL, §20.3.3 CB_LAYOUTRECALL, §20.1.3
    /// CB_GETATTR, §20.12.3 CB_NOTIFY_DEVICEID, RFC 7862 §16.1.3 CB_OFFLOAD).
    fn on_reply(
        &mut self,
        wire: &dyn CallbackWire,
        dl: &Delegations,
        xid: u32,
        rec: &[u8],
        via: Transport,
        now: Instant,
    ) {
        let Some(p) = self.pending.remove(&xid) else {
            dl.stats().callback(via, CallbackResult::Unmatched);
            tracing::debug!(xid, "dropping a callback reply that matches nothing");
            return;
        };
        dl.stats().callback(p.via, CallbackResult::Replied);
        let (kind, other, session) = match p.what {
            What::Probe(clientid) => {
                let ok = wire.probe_ok(rec);
                if !ok {
                    tracing::info!(
                        clientid,
                        "CB_NULL probe failed; no delegations for this client"
                    );
                }
                return dl.set_callback_up(clientid, ok);
            }
            What::Cb {
                kind,
                other,
                session,
            } => (kind, other, session),
        };
        let (reply, attrs) = match kind {
            Kind::Getattr => wire.getattr_reply(rec),
            _ => (wire.recall_reply(rec), None),
        };
        // A reply came: whatever is sent next for this callback is a new call.
        if let Some(t) = self.queues[kind.index()].get_mut(&other) {
            t.retransmit = None;
        }
        // The slot moved on unless the client did not process the call.
        let advance = !matches!(reply, RecallReply::NoAnswer | RecallReply::SeqFailed);
        self.free_slot(&session, advance);
        let event = match reply {
            RecallReply::NoAnswer | RecallReply::SeqFailed => Event::Lost(now + RETRY),
            RecallReply::SeqMisordered => Event::Misordered,
            // The client processed our previous request on this slot and has no
            // cached reply: the call got there.
            RecallReply::SeqUncached => Event::Answered(RecallAnswer::Accepted),
            RecallReply::Sequenced(a) => Event::Answered(a),
        };
        self.settle(kind, other, event, dl, Some((p.via, attrs)), now);
    }
}

#[cfg(test)]
#[path = "recall_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "recall_getattr_tests.rs"]
mod getattr_tests;
