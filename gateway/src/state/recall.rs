//! The callback state machine (RFC 8881 §2.10.3.1, §10.2, §20; docs/architecture.md
//! §8 "Callbacks"): CB_NULL probes and CB_RECALLs, their XIDs (a table of our own,
//! separate from forward XIDs), back-channel slot 0 sequence ids per session,
//! timeouts and retries. Sans-IO and sans-protocol: `RecallTable::step` takes replies
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

use super::backchannel::{CallbackWire, CbCall, CbSec, RecallAnswer, RecallReply};
use super::delegations::Delegations;
use super::layouts::Layouts;
use super::BackChannelInfo;
use crate::conn::{ConnKind, ConnRef};
use crate::stats::callbacks::CallbackResult;
use crate::stats::Transport;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// No reply within this long: the callback timed out (retried on the bound channel).
pub const CB_TIMEOUT: Duration = Duration::from_secs(5);
/// Delay before resending after NFS4ERR_DELAY, an RPC error or no back channel.
pub const RETRY: Duration = Duration::from_secs(2);
/// CB_RECALL answered BAD_STATEID/BADHANDLE (the client has not seen the OPEN reply
/// yet — knfsd retries the same race): resent this many times, then left to the lease.
const BAD_STATEID_RETRIES: u8 = 2;
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
    /// (CB_GETATTR: `recall_getattr.rs`).
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

/// The two queues of callbacks the table sends and resends under one set of rules.
#[derive(Debug, Clone, Copy)]
enum Queue {
    /// CB_RECALLs of delegations, by delegation stateid.
    Recalls,
    /// CB_OFFLOADs of finished asynchronous COPYs, by copy stateid.
    Offloads,
    /// CB_LAYOUTRECALLs of pNFS layouts, by layout stateid (`layouts_recall.rs`).
    Layouts,
    /// CB_GETATTRs to write delegations' holders, by delegation stateid.
    Getattrs,
    /// CB_NOTIFY_DEVICEIDs of deleted device ids, by notice (`recall_notify.rs`).
    Notices,
}

#[derive(Debug, Clone, Copy)]
enum What {
    Probe(u64),
    Recall {
        other: [u8; 12],
        session: [u8; 16],
    },
    /// A CB_OFFLOAD for the asynchronous COPY `other` (`offload::Offloads`).
    Offload {
        other: [u8; 12],
        session: [u8; 16],
    },
    /// A CB_LAYOUTRECALL of the layout `other` (`layouts::Layouts`).
    LayoutRecall {
        other: [u8; 12],
        session: [u8; 16],
    },
    /// A CB_GETATTR to the holder of the write delegation `other`.
    Getattr {
        other: [u8; 12],
        session: [u8; 16],
    },
    /// A CB_NOTIFY_DEVICEID of the layout table's notice `other`.
    Notify {
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
    bad_stateid: u8,
    /// The XID of the last CB_RECALL sent while no reply to it came back (it timed
    /// out, or the transport reported it failed or lost): the resend is a
    /// retransmission and reuses it (RFC 8167 §5.4, R8167-17 "same XID"). Cleared by
    /// any reply (the next attempt is a new call).
    retransmit: Option<u32>,
}

impl Task {
    /// A task to try at `now`.
    fn due(now: Instant) -> Task {
        Task {
            next_try: now,
            in_flight: false,
            bad_stateid: 0,
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
    tasks: HashMap<[u8; 12], Task>,
    /// CB_OFFLOADs to send, by copy stateid (same retry rules as recalls).
    offloads: HashMap<[u8; 12], Task>,
    /// CB_LAYOUTRECALLs to send, by layout stateid (same rules again).
    layout_tasks: HashMap<[u8; 12], Task>,
    /// Layouts the client answered NFS4ERR_NOMATCHING_LAYOUT for: forgotten by the
    /// next `step_layouts` (which has the layout table).
    layouts_gone: Vec<[u8; 12]>,
    /// CB_GETATTRs to send, by delegation stateid (never resent: a failure recalls).
    getattr_tasks: HashMap<[u8; 12], Task>,
    /// CB_NOTIFY_DEVICEIDs to send, by the layout table's notice key.
    notice_tasks: HashMap<[u8; 12], Task>,
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
            tasks: HashMap::new(),
            offloads: HashMap::new(),
            layout_tasks: HashMap::new(),
            layouts_gone: Vec::new(),
            getattr_tasks: HashMap::new(),
            notice_tasks: HashMap::new(),
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
        self.tasks.len()
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
    /// revoke what the lease ran out on, and (re)send due recalls on each client's
    /// current back channel (`lookup`, i.e. `Clients::lookup_backchannel`), each
    /// callback made and read by `wire`.
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
                    if self.tasks.len() < MAX_JOBS {
                        self.tasks.entry(other).or_insert(Task::due(now));
                    }
                }
                Job::Getattr(other) => self.queue_getattr(dl, other, now),
            }
        }
        while let Some(other) = dl.offloads.take_finished() {
            if self.offloads.len() < MAX_JOBS {
                self.offloads.entry(other).or_insert(Task::due(now));
            }
        }
        dl.offloads.expire(now);
        dl.revoke_overdue(now);
        self.send_getattrs(wire, dl, lookup, now, &mut out);
        self.send_due(wire, dl, lookup, now, &mut out);
        self.send_offloads(wire, dl, lookup, now, &mut out);
        out
    }

    /// When the next step is due (for the thread's sleep): the earliest retry or
    /// timeout, at most `max` from now.
    pub fn next_due(&self, now: Instant, max: Duration) -> Duration {
        let mut due = now + max;
        let all = self.tasks.values().chain(self.offloads.values());
        let all = all.chain(self.getattr_tasks.values());
        let all = all.chain(self.notice_tasks.values());
        for t in all.chain(self.layout_tasks.values()) {
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

    fn send_due(
        &mut self,
        wire: &dyn CallbackWire,
        dl: &Delegations,
        lookup: &dyn Fn(u64) -> Option<BackChannelInfo>,
        now: Instant,
        out: &mut Vec<Outcall>,
    ) {
        for other in self.due(Queue::Recalls, now) {
            let Some((clientid, stateid, fh)) = dl.recall_target(&other) else {
                self.tasks.remove(&other);
                continue;
            };
            let Some(info) = lookup(clientid) else {
                // No back channel bound now: try again later; the lease ends it.
                self.retry(&other, now + RETRY);
                continue;
            };
            let Some(seqid) = self.claim_slot(info.session) else {
                continue;
            };
            let call = CbCall::Recall {
                session: info.session,
                minor: info.minor,
                seqid,
                stateid,
                fh: &fh,
            };
            let what = What::Recall {
                other,
                session: info.session,
            };
            match self.post(Queue::Recalls, other, &call, what, &info, wire, dl, now, out) {
                Some(via) => dl.recall_sent(&other, via),
                None => tracing::warn!(
                    clientid,
                    max = info.max_request,
                    "CB_RECALL does not fit the back channel; the delegation will be revoked after the lease"
                ),
            }
        }
    }

    /// The entries of queue `q` due at `now` (not in flight, their time come).
    fn due(&self, q: Queue, now: Instant) -> Vec<[u8; 12]> {
        let tasks = match q {
            Queue::Recalls => &self.tasks,
            Queue::Offloads => &self.offloads,
            Queue::Layouts => &self.layout_tasks,
            Queue::Getattrs => &self.getattr_tasks,
            Queue::Notices => &self.notice_tasks,
        };
        tasks
            .iter()
            .filter(|(_, t)| !t.in_flight && t.next_try <= now)
            .map(|(o, _)| *o)
            .collect()
    }

    /// Encodes `call` (on the back channel slot just claimed) and queues it for
    /// `info`'s connection as `what`, the task `other` of queue `q` marked in flight.
    /// A retransmission keeps its XID (unless, improbably, it is in use again).
    /// `None` when the call does not fit the back channel: the slot is freed and the
    /// task dropped (the caller says what that means for the client).
    #[allow(clippy::too_many_arguments)]
    fn post(
        &mut self,
        q: Queue,
        other: [u8; 12],
        call: &CbCall,
        what: What,
        info: &BackChannelInfo,
        wire: &dyn CallbackWire,
        dl: &Delegations,
        now: Instant,
        out: &mut Vec<Outcall>,
    ) -> Option<Transport> {
        let again = match q {
            Queue::Recalls => self.tasks.get(&other),
            Queue::Offloads => self.offloads.get(&other),
            Queue::Layouts => self.layout_tasks.get(&other),
            Queue::Getattrs => self.getattr_tasks.get(&other),
            Queue::Notices => self.notice_tasks.get(&other),
        }
        .and_then(|t| t.retransmit);
        let xid = match again {
            Some(x) if !self.pending.contains_key(&x) => x,
            _ => self.xid(),
        };
        let sec = self.secs.get(&info.session);
        let tasks = match q {
            Queue::Recalls => &mut self.tasks,
            Queue::Offloads => &mut self.offloads,
            Queue::Layouts => &mut self.layout_tasks,
            Queue::Getattrs => &mut self.getattr_tasks,
            Queue::Notices => &mut self.notice_tasks,
        };
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

    fn retry(&mut self, other: &[u8; 12], at: Instant) {
        retry_in(&mut self.tasks, other, at);
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

    /// Sends the due CB_OFFLOADs (RFC 7862 §16.1) of finished asynchronous COPYs on
    /// each client's current back channel; one the client cannot be reached for is
    /// retried until `offload::KEEP_FINISHED` forgets the copy.
    fn send_offloads(
        &mut self,
        wire: &dyn CallbackWire,
        dl: &Delegations,
        lookup: &dyn Fn(u64) -> Option<BackChannelInfo>,
        now: Instant,
        out: &mut Vec<Outcall>,
    ) {
        for other in self.due(Queue::Offloads, now) {
            let Some(n) = dl.offloads.notice(&other) else {
                self.offloads.remove(&other);
                continue;
            };
            let Some(info) = lookup(n.clientid) else {
                retry_in(&mut self.offloads, &other, now + RETRY);
                continue;
            };
            let Some(seqid) = self.claim_slot(info.session) else {
                continue;
            };
            let call = CbCall::Offload {
                session: info.session,
                seqid,
                stateid: n.stateid,
                fh: &n.fh,
                outcome: n.outcome,
            };
            let what = What::Offload {
                other,
                session: info.session,
            };
            if self
                .post(
                    Queue::Offloads,
                    other,
                    &call,
                    what,
                    &info,
                    wire,
                    dl,
                    now,
                    out,
                )
                .is_none()
            {
                tracing::warn!(
                    clientid = n.clientid,
                    "CB_OFFLOAD does not fit the back channel; the client must ask OFFLOAD_STATUS"
                );
            }
        }
    }

    /// The client's answer to CB_OFFLOAD: once CB_SEQUENCE went through, the client
    /// has the result (whatever CB_OFFLOAD itself answered, it is not sent again);
    /// otherwise the callback is resent as a recall would be.
    fn on_offload_reply(
        &mut self,
        dl: &Delegations,
        other: [u8; 12],
        session: [u8; 16],
        reply: RecallReply,
        now: Instant,
    ) {
        if let Some(t) = self.offloads.get_mut(&other) {
            t.retransmit = None;
        }
        match reply {
            RecallReply::Sequenced(answer) => {
                self.free_slot(&session, true);
                if answer != RecallAnswer::Accepted {
                    tracing::info!(?answer, "CB_OFFLOAD answered with an error");
                }
                self.offloads.remove(&other);
                dl.offloads.told(&other);
            }
            RecallReply::SeqUncached => {
                self.free_slot(&session, true);
                self.offloads.remove(&other);
                dl.offloads.told(&other);
            }
            RecallReply::SeqMisordered => {
                self.free_slot(&session, true);
                retry_in(&mut self.offloads, &other, now + RETRY);
            }
            RecallReply::NoAnswer | RecallReply::SeqFailed => {
                self.free_slot(&session, false);
                retry_in(&mut self.offloads, &other, now + RETRY);
            }
        }
    }

    fn free_slot(&mut self, session: &[u8; 16], advance: bool) {
        if let Some(s) = self.slots.get_mut(session) {
            s.busy = false;
            if advance {
                s.seqid = s.seqid.wrapping_add(1).max(1);
            }
        }
    }

    /// Callbacks without a reply for `CB_TIMEOUT`: a probe marks the back channel
    /// down; a recall is resent at once on whatever channel is bound (same slot
    /// sequence id: if the client did process it, it answers as a replay).
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
            match p.what {
                What::Probe(clientid) => dl.set_callback_up(clientid, false),
                What::Recall { other, session } => {
                    self.free_slot(&session, false);
                    self.retry(&other, now);
                }
                What::Offload { other, session } => {
                    self.free_slot(&session, false);
                    retry_in(&mut self.offloads, &other, now);
                }
                What::LayoutRecall { other, session } => {
                    self.free_slot(&session, false);
                    retry_in(&mut self.layout_tasks, &other, now);
                }
                What::Getattr { other, session } => {
                    self.free_slot(&session, false);
                    self.getattr_failed(dl, other, now);
                }
                What::Notify { other, session } => {
                    self.free_slot(&session, false);
                    self.notice_failed(&other, now);
                }
            }
        }
    }

    /// A callback the RDMA transport reports failed (RFC 8167 §5.4: RDMA_ERROR for
    /// it, R8167-16, or its connection lost, R8167-17): a probe marks the back channel
    /// down (the client sees CB_PATH_DOWN and binds another, which probes again); a
    /// recall frees its slot without advancing it (the client may not have seen it)
    /// and is resent after `RETRY` on the back channel bound by then. Unknown XIDs
    /// (already answered or timed out) are ignored.
    fn on_failure(&mut self, dl: &Delegations, xid: u32, now: Instant) {
        let Some(p) = self.pending.remove(&xid) else {
            return;
        };
        dl.stats().callback(p.via, CallbackResult::Failed);
        match p.what {
            What::Probe(clientid) => dl.set_callback_up(clientid, false),
            What::Recall { other, session } => {
                self.free_slot(&session, false);
                self.retry(&other, now + RETRY);
            }
            What::Offload { other, session } => {
                self.free_slot(&session, false);
                retry_in(&mut self.offloads, &other, now + RETRY);
            }
            What::LayoutRecall { other, session } => {
                self.free_slot(&session, false);
                retry_in(&mut self.layout_tasks, &other, now + RETRY);
            }
            What::Getattr { other, session } => {
                self.free_slot(&session, false);
                self.getattr_failed(dl, other, now);
            }
            What::Notify { other, session } => {
                self.free_slot(&session, false);
                self.notice_failed(&other, now + RETRY);
            }
        }
    }

    /// A REPLY matched by XID (RFC 8881 §20.9.3 for CB_SEQUENCE, §20.2.3 CB_RECALL).
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
        match p.what {
            What::Probe(clientid) => {
                let ok = wire.probe_ok(rec);
                if !ok {
                    tracing::info!(
                        clientid,
                        "CB_NULL probe failed; no delegations for this client"
                    );
                }
                dl.set_callback_up(clientid, ok);
            }
            What::Recall { other, session } => {
                self.on_recall_reply(dl, other, session, wire.recall_reply(rec), p.via, now)
            }
            What::Offload { other, session } => {
                self.on_offload_reply(dl, other, session, wire.recall_reply(rec), now)
            }
            What::LayoutRecall { other, session } => {
                self.on_layout_reply(other, session, wire.recall_reply(rec), now)
            }
            What::Getattr { other, session } => {
                self.on_getattr_reply(dl, other, session, wire.getattr_reply(rec), now)
            }
            What::Notify { other, session } => {
                self.on_notify_reply(other, session, wire.recall_reply(rec), now)
            }
        }
    }

    fn on_recall_reply(
        &mut self,
        dl: &Delegations,
        other: [u8; 12],
        session: [u8; 16],
        reply: RecallReply,
        via: Transport,
        now: Instant,
    ) {
        // A reply came: whatever is sent next for this recall is a new call.
        if let Some(t) = self.tasks.get_mut(&other) {
            t.retransmit = None;
        }
        let answer = match reply {
            RecallReply::Sequenced(a) => {
                self.free_slot(&session, true);
                a
            }
            // The client processed our previous request on this slot and has no
            // cached reply: the sequence moves on, and the recall got there.
            RecallReply::SeqUncached => {
                self.free_slot(&session, true);
                dl.recall_answered(via);
                self.tasks.remove(&other);
                return;
            }
            // Out of step with the client's slot: move on by one and resend.
            RecallReply::SeqMisordered => {
                self.free_slot(&session, true);
                self.retry(&other, now + RETRY);
                return;
            }
            RecallReply::NoAnswer | RecallReply::SeqFailed => {
                self.free_slot(&session, false);
                self.retry(&other, now + RETRY);
                return;
            }
        };
        self.on_recall_answer(dl, other, answer, via, now);
    }

    /// CB_RECALL's answer (RFC 8881 §20.2.3), once CB_SEQUENCE succeeded.
    fn on_recall_answer(
        &mut self,
        dl: &Delegations,
        other: [u8; 12],
        answer: RecallAnswer,
        via: Transport,
        now: Instant,
    ) {
        match answer {
            RecallAnswer::Accepted => {
                dl.recall_answered(via);
                self.tasks.remove(&other);
            }
            RecallAnswer::Unknown => {
                let again = self.tasks.get_mut(&other).is_some_and(|t| {
                    t.bad_stateid += 1;
                    t.bad_stateid <= BAD_STATEID_RETRIES
                });
                if again {
                    self.retry(&other, now + RETRY);
                } else {
                    self.tasks.remove(&other);
                }
            }
            RecallAnswer::Later => self.retry(&other, now + RETRY),
            RecallAnswer::Refused(st) => {
                tracing::info!(
                    st,
                    "CB_RECALL refused; the delegation will be revoked after the lease"
                );
                self.tasks.remove(&other);
            }
        }
    }
}

/// CB_LAYOUTRECALL (RFC 8881 §20.3): the layout table's recalls sent, resent and ended
/// by the same rules as CB_RECALL's; the layout table decides when one ends by
/// revocation (`Layouts::revoke_overdue`, a lease after the recall began).
impl RecallTable {
    /// Layout recalls being driven.
    pub fn layout_recalls(&self) -> usize {
        self.layout_tasks.len()
    }

    /// One pass for layouts, after `step` (which matched the replies): takes the
    /// recalls `layouts` began, forgets the layouts clients said they do not hold,
    /// revokes what the lease ran out on, and sends the due CB_LAYOUTRECALLs on each
    /// client's current back channel.
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
            if self.layout_tasks.len() < MAX_JOBS {
                self.layout_tasks.entry(other).or_insert(Task::due(now));
            }
        }
        for other in std::mem::take(&mut self.layouts_gone) {
            layouts.forget(&other);
        }
        layouts.revoke_overdue(now, dl.lease());
        for other in self.due(Queue::Layouts, now) {
            self.send_layout_recall(wire, dl, layouts, lookup, other, now, &mut out);
        }
        self.step_notices(wire, dl, layouts, lookup, now, &mut out);
        out
    }

    #[allow(clippy::too_many_arguments)]
    fn send_layout_recall(
        &mut self,
        wire: &dyn CallbackWire,
        dl: &Delegations,
        layouts: &Layouts,
        lookup: &dyn Fn(u64) -> Option<BackChannelInfo>,
        other: [u8; 12],
        now: Instant,
        out: &mut Vec<Outcall>,
    ) {
        let Some((clientid, stateid, fh)) = layouts.recall_target(&other) else {
            self.layout_tasks.remove(&other);
            return;
        };
        let Some(info) = lookup(clientid) else {
            // No back channel bound now: again later; the lease ends it.
            retry_in(&mut self.layout_tasks, &other, now + RETRY);
            return;
        };
        let Some(seqid) = self.claim_slot(info.session) else {
            return;
        };
        let call = CbCall::LayoutRecall {
            session: info.session,
            minor: info.minor,
            seqid,
            stateid,
            fh: &fh,
        };
        let what = What::LayoutRecall {
            other,
            session: info.session,
        };
        let q = Queue::Layouts;
        if self
            .post(q, other, &call, what, &info, wire, dl, now, out)
            .is_none()
        {
            tracing::warn!(
                clientid,
                "CB_LAYOUTRECALL does not fit the back channel; the layout will be revoked after the lease"
            );
        }
    }

    /// The client's answer to CB_LAYOUTRECALL (RFC 8881 §20.3.3): NFS4_OK, it will
    /// LAYOUTRETURN; NFS4ERR_NOMATCHING_LAYOUT, it holds none (forgotten here);
    /// NFS4ERR_DELAY, or a stateid it has not seen yet (a LAYOUTGET reply still on the
    /// way), resent; anything else is left to the lease.
    fn on_layout_reply(
        &mut self,
        other: [u8; 12],
        session: [u8; 16],
        reply: RecallReply,
        now: Instant,
    ) {
        if let Some(t) = self.layout_tasks.get_mut(&other) {
            t.retransmit = None;
        }
        let answer = match reply {
            RecallReply::Sequenced(a) => a,
            RecallReply::SeqUncached => RecallAnswer::Accepted,
            RecallReply::SeqMisordered => {
                self.free_slot(&session, true);
                return retry_in(&mut self.layout_tasks, &other, now + RETRY);
            }
            RecallReply::NoAnswer | RecallReply::SeqFailed => {
                self.free_slot(&session, false);
                return retry_in(&mut self.layout_tasks, &other, now + RETRY);
            }
        };
        self.free_slot(&session, true);
        match answer {
            RecallAnswer::Accepted => {
                self.layout_tasks.remove(&other);
            }
            RecallAnswer::Refused(NOMATCHING_LAYOUT) => {
                self.layout_tasks.remove(&other);
                self.layouts_gone.push(other);
            }
            RecallAnswer::Unknown => {
                let again = self.layout_tasks.get_mut(&other).is_some_and(|t| {
                    t.bad_stateid += 1;
                    t.bad_stateid <= BAD_STATEID_RETRIES
                });
                if again {
                    retry_in(&mut self.layout_tasks, &other, now + RETRY);
                } else {
                    self.layout_tasks.remove(&other);
                }
            }
            RecallAnswer::Later => retry_in(&mut self.layout_tasks, &other, now + RETRY),
            RecallAnswer::Refused(st) => {
                tracing::info!(
                    st,
                    "CB_LAYOUTRECALL refused; the layout will be revoked after the lease"
                );
                self.layout_tasks.remove(&other);
            }
        }
    }
}

/// NFS4ERR_NOMATCHING_LAYOUT (RFC 8881 §15.1.5.5), as a recall answer carries it.
const NOMATCHING_LAYOUT: u32 = 10060;

/// Marks the task `other` of `tasks` not in flight, to be tried at `at`.
fn retry_in(tasks: &mut HashMap<[u8; 12], Task>, other: &[u8; 12], at: Instant) {
    if let Some(t) = tasks.get_mut(other) {
        t.in_flight = false;
        t.next_try = at;
    }
}

#[path = "recall_getattr.rs"]
mod getattr;
#[path = "recall_notify.rs"]
mod notify;

#[cfg(test)]
#[path = "recall_tests.rs"]
mod tests;
