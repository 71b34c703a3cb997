//! The RPC-over-RDMA responder transport one reactor polls: connections accepted
//! through the fabric's CM, Receives posted from the reactor's pools, calls reassembled
//! (RDMA Read straight into a pool buffer) and handed to the caller as contiguous RPC
//! records, replies sent as RDMA Writes (straight from the reply's pool buffer) plus
//! one Send. The protocol decisions are `crate::rpcrdma::responder`'s; this module
//! only moves bytes and keeps buffers accounted.
//!
//! Ownership: everything here belongs to one reactor thread. Buffers: every posted
//! Receive, every pulled call and every reply in flight is a pool `Buf` owned by a
//! connection slot until its completion (success or flush) comes back, so a
//! disconnect at any point returns every buffer to its pool.
//!
//! Per-call states (SPDK style): Free → Pulling (RDMA Reads outstanding) → Executing
//! (the caller has the record) → Queued (reply waits for send-queue room) → Sending
//! (Writes + Send posted) → Free.
//!
//! Reverse direction (RFC 8167, `crate::rpcrdma::reverse`): every completed Receive is
//! classified by `msg_type` before it may take a call slot (R8167-20). A callback
//! (`send_callback`) takes a slot of the connection's callback table (its own XID
//! space, R8167-01): Free → Awaiting+Sending (one extra Receive posted, then the Send
//! from a pool buffer holding header + record) → Awaiting (Send completed, buffer
//! back) → Free when its REPLY or RDMA_ERROR is matched by XID (`Reply`/`Error`
//! outcome) or the connection is gone (`Lost`). Receives kept posted: the forward
//! credits plus one per callback awaiting a reply (R8167-08); forward grants never
//! count the extra ones (R8167-02). Extra Receives are reserved in the admission
//! budget at accept.

use super::admit::{Admission, Throttle, Verdict};
use super::reclaim::{Drain, RECLAIM_HELD, RECLAIM_PROGRESS};
use super::reply_budget::{reply_charge, ReplyBudget};
use super::timeouts::{self, SendWatch, Sweep};
use crate::fabric::{
    access, CmEvent, Completion, ConnRequest, Fabric, Mr, Op, PostError, Qp, QpCaps, SendWr, Sge,
    WcOpcode, WcStatus,
};
use crate::mem::{Buf, Pools};
use crate::rpcrdma::privdata::{self, PrivData};
use crate::rpcrdma::responder::{
    self, Config, DdpList, Piece, Received, Reduced, Responder, MAX_INLINE,
};
use crate::rpcrdma::reverse::{self, Inbound, Refused, MAX_CALLBACKS};
use crate::rpcrdma::wire::{self, Chunks, ErrBody, Limits, Segment};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// `[rdma]` settings the transport needs.
#[derive(Debug, Clone, Copy)]
pub struct ServerOptions {
    /// Credits granted per connection (Receives posted per connection) when the
    /// reactor's receive budget allows it (see `super::admit`).
    pub credits: u32,
    /// Fewest credits a connection is accepted with when buffers are short; below
    /// that it is refused.
    pub min_credits: u32,
    /// Inline threshold we advertise both ways (RFC 8797): our Receive buffer size and
    /// the largest Send we post.
    pub inline_size: usize,
    /// Advertise the R bit (we may reply with Send-With-Invalidate).
    pub remote_invalidate: bool,
    pub max_connections: usize,
    /// RDMA Reads we keep outstanding per connection (also bounded by the peer).
    pub read_depth: u8,
    pub limits: Limits,
    /// Largest reassembled call (clamped to the largest pool buffer).
    pub max_call: usize,
    /// A connection with RDMA Reads outstanding and none completed for this long is
    /// closed (a peer that stops answering Reads must not hold buffers forever).
    pub read_timeout: Duration,
    /// A connection with Sends (replies, callbacks) outstanding and none completed for
    /// this long is closed: a peer that never takes its replies must not keep its
    /// reply budget of buffers, and its connection, for ever (see `super::timeouts`).
    pub send_timeout: Duration,
    /// Reply bytes a connection may have in production or awaiting Send completion
    /// before its next calls wait, received, for its replies to complete. A call is
    /// charged the chunks it offers for its reply (write chunks plus reply chunk, at
    /// most the largest pool buffer): what its reply buffer may hold until its Send
    /// completes. Credits alone would let a peer that never completes its replies
    /// hold up to `credits` large buffers (Standards: a client must not pin shared
    /// buffers by reading nothing).
    pub max_reply_bytes: usize,
    /// While some allocation is starved, a connection whose outstanding Sends hold at
    /// least `RECLAIM_HELD` bytes and whose peer completed less than
    /// `RECLAIM_PROGRESS` bytes of them in this long is closed (`super::reclaim`); so
    /// is one whose calls waiting for their RDMA Reads hold that much and whose peer
    /// answered less than that of our Reads.
    pub stall_reclaim: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            credits: 128,
            min_credits: 8,
            inline_size: 4096,
            remote_invalidate: true,
            max_connections: 64,
            read_depth: 16,
            limits: Limits::default(),
            max_call: 1024 * 1024 + 4096,
            read_timeout: Duration::from_secs(30),
            send_timeout: Duration::from_secs(30),
            max_reply_bytes: 8 << 20,
            stall_reclaim: Duration::from_millis(1000),
        }
    }
}

/// Receives each reassembled call: its reference, the peer, the RPC record and the
/// reduced items (for the upper layer's DDP-eligibility check).
/// The last argument is the room of the call's first write chunk, when it has one: a
/// READ result up to that size may be sent from elsewhere with
/// [`RdmaServer::reply_external`].
pub type OnCall<'a> = dyn FnMut(CallRef, SocketAddr, Buf, &[Reduced], Option<u64>) + 'a;

/// A piece of registered memory outside the reply holding DDP-eligible result data
/// (a cache page), and the caller's tag for it, handed back by
/// [`RdmaServer::take_released`] once the RDMA Write from it is complete (or will
/// never happen).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtSeg {
    pub addr: u64,
    pub len: u32,
    pub lkey: u32,
    pub tag: u64,
}

/// Names one call handed to the caller; give it back with the reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallRef {
    slot: u32,
    gen: u32,
    call: u16,
}

impl CallRef {
    /// The connection this call arrived on.
    pub fn conn(&self) -> ConnId {
        ConnId {
            slot: self.slot,
            gen: self.gen,
        }
    }
}

/// Names one connection for as long as it lives: a later connection in the same slot
/// has another generation, so a stale `ConnId` never reaches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnId {
    slot: u32,
    gen: u32,
}

impl ConnId {
    /// A connection id from its parts (tests, and tables keyed by connection).
    pub fn from_raw(slot: u32, gen: u32) -> ConnId {
        ConnId { slot, gen }
    }
}

/// Why [`RdmaServer::send_callback`] did not send a callback. Nothing was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallbackError {
    /// The connection is gone or closing: the caller waits for the client to bind
    /// another (RFC 8167 §5.4: the server never connects, R8167-17).
    Gone,
    /// Larger than the client's receive inline threshold: callbacks are Short only
    /// (no reverse chunks, R8167-05/13/14).
    TooLarge,
    /// As many callbacks outstanding as the client grants reverse credits (RFC 8167
    /// §4.1, R8167-02): try again after a callback reply.
    NoCredit,
    /// No buffer, Receive or send-queue room right now: try again.
    Busy,
}

/// What became of one callback sent with [`RdmaServer::send_callback`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallbackOutcome<'a> {
    /// Its RPC reply (starting at the XID).
    Reply(&'a [u8]),
    /// The client answered with an RDMA_ERROR carrying the callback's XID (R8167-16).
    Error,
    /// The connection dropped while it was outstanding (R8167-17: resend on the
    /// connection the client binds next, or time out).
    Lost,
}

/// Counters (reactor-owned, copied out on request).
#[derive(Debug, Clone, Copy, Default)]
pub struct RdmaStats {
    pub accepted: u64,
    /// Connection requests refused, for any reason (the two below and accept errors).
    pub rejected: u64,
    /// Refused because `max_connections` were live.
    pub refused_full: u64,
    /// Refused because the receive budget could not give even `min_credits`.
    pub refused_no_buffers: u64,
    /// Accepted with fewer credits than configured (receive budget short).
    pub credits_reduced: u64,
    /// Connections closed because their peer left RDMA Reads unanswered.
    pub read_timeouts: u64,
    /// Connections closed because their peer completed none of their outstanding
    /// Sends for `send_timeout`.
    pub send_timeouts: u64,
    /// Calls held back because their connection's replies in production or awaiting
    /// Send completion reached `max_reply_bytes`.
    pub reply_budget_holds: u64,
    /// Connections closed because, while an allocation was starved, their outstanding
    /// Sends held `RECLAIM_HELD` bytes or more and their peer completed less than
    /// `RECLAIM_PROGRESS` bytes of them in `stall_reclaim` (`super::reclaim`).
    pub send_reclaimed: u64,
    /// Connections closed because, while an allocation was starved, the reassembly
    /// buffers of their calls with RDMA Reads outstanding held `RECLAIM_HELD` bytes
    /// or more and their peer answered less than `RECLAIM_PROGRESS` bytes of Reads in
    /// `stall_reclaim` (`super::reclaim`).
    pub read_reclaimed: u64,
    pub disconnects: u64,
    pub calls: u64,
    pub replies: u64,
    pub errors_sent: u64,
    pub dropped: u64,
    pub rdma_reads: u64,
    pub rdma_writes: u64,
    pub remote_invalidations: u64,
    /// Times a Receive could not be re-posted for lack of a buffer.
    pub recv_starved: u64,
    /// Calls parked waiting for a reassembly buffer.
    pub parked: u64,
    /// Callbacks sent (RFC 8167 reverse-direction calls).
    pub cb_sent: u64,
    /// Callback replies matched by XID.
    pub cb_replies: u64,
    /// REPLYs matching no outstanding callback, dropped (R8167-20).
    pub cb_unmatched: u64,
    /// Callbacks answered with an RDMA_ERROR (R8167-16).
    pub cb_errors: u64,
    /// Callbacks outstanding when their connection was lost (R8167-17).
    pub cb_lost: u64,
}

const BATCH: usize = 64;
/// Most external data pieces one reply may carry (64 KiB of 4 KiB pages, unaligned).
pub const MAX_EXT: usize = 17;
/// Bytes per call slot in a connection's header slab: enough for a header echoing a
/// write chunk and a reply chunk of a few segments; larger headers use a pool buffer.
const HDR_SLOT: usize = 256;
/// Writes per posted chain (longer plans are posted as several chains, in order).
const MAX_CHAIN: usize = 64;
/// XIDs whose RDMA Read failed, remembered per peer (R8166-75).
const FAILED_XIDS: usize = 64;
/// Reassembly buffers one connection may hold while its RDMA Reads are outstanding
/// (issue 15): a peer that never answers Reads (or answers slowly) holds at most this
/// many large buffers; its further chunked calls wait parked on their Receive.
pub const MAX_PULLING: u32 = 8;

const KIND_RECV: u64 = 1;
const KIND_READ: u64 = 2;
const KIND_SEND: u64 = 3;
const KIND_WRITE: u64 = 4;
/// A callback's Send (idx = its slot in the connection's callback table).
const KIND_CB_SEND: u64 = 5;
/// Callback outcomes and closed connections kept for `take_callback_events` /
/// `take_closed`; past this the oldest is dropped (the caller times callbacks out).
const MAX_CB_EVENTS: usize = 4096;

fn wr_id(kind: u64, slot: u32, idx: u32) -> u64 {
    kind << 56 | (slot as u64) << 32 | idx as u64
}

fn wr_parts(id: u64) -> (u64, u32, u32) {
    (id >> 56, (id >> 32) as u32 & 0x00ff_ffff, id as u32)
}

/// Which of our work requests a `wr_id` names. Verbs defines a completion's opcode
/// only when its status is success, so a failed work request is named from our own
/// bookkeeping (the kind in its `wr_id`), never from `Completion::opcode` (on rxe a
/// failed RDMA Read reads as `Send`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WrKind {
    Receive,
    RdmaRead,
    /// A reply's Send (or Send-With-Invalidate), posted after its RDMA Writes.
    ReplySend,
    /// One RDMA Write of a reply (unsignaled: it completes only with an error).
    RdmaWrite,
    /// A callback's Send (RFC 8167).
    CallbackSend,
    /// No work request of ours has this kind.
    Unknown,
}

impl WrKind {
    fn of(wr_id: u64) -> WrKind {
        match wr_parts(wr_id).0 {
            KIND_RECV => WrKind::Receive,
            KIND_READ => WrKind::RdmaRead,
            KIND_SEND => WrKind::ReplySend,
            KIND_WRITE => WrKind::RdmaWrite,
            KIND_CB_SEND => WrKind::CallbackSend,
            _ => WrKind::Unknown,
        }
    }

    /// As logged.
    fn name(self) -> &'static str {
        match self {
            WrKind::Receive => "Receive",
            WrKind::RdmaRead => "RDMA Read",
            WrKind::ReplySend => "Send (reply)",
            WrKind::RdmaWrite => "RDMA Write",
            WrKind::CallbackSend => "Send (callback)",
            WrKind::Unknown => "unknown",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    /// Waiting for a reassembly buffer (the Receive buffer is kept).
    NeedBuffer,
    Pulling,
    Executing,
    Queued,
    Sending,
}

struct CallSlot {
    state: State,
    xid: u32,
    long: bool,
    chunks: Chunks,
    recv: Option<Buf>,
    record: Option<Buf>,
    pulls_left: u32,
    reduced: Vec<Reduced>,
    reply: Option<Buf>,
    /// Where the reply's DDP-eligible results lie (RFC 8267 §4, §6.4.1).
    ddp: DdpList,
    /// An RDMA_ERROR to send instead of a reply.
    error: Option<(u32, ErrBody)>,
    hdr: Option<Buf>,
    /// Send-queue entries the posted reply holds (its Writes and its Send).
    cost: u32,
    /// Result data outside the reply (see `reply_external`), released with the call.
    ext: Vec<ExtSeg>,
    /// Reply bytes this call is charged in its connection's `budget` (see `deliver`).
    charge: usize,
    /// Bytes its posted reply carries (Writes and Send), for the connection's `sends`.
    sent: usize,
    /// Memory its posted reply holds until its Send completes (the connection's
    /// `drain`): the reply buffer's capacity, a pool header, external data.
    held: usize,
    /// Capacity of its reassembly buffer while its RDMA Reads are outstanding (the
    /// connection's `pull`), else 0.
    pull_held: usize,
}

struct Conn {
    qp: Qp,
    /// Receives this connection keeps posted and reserved from the budget.
    credits: u32,
    /// Reply headers, one `HDR_SLOT` per call slot, registered once at accept (no pool
    /// traffic per reply).
    hdr_slab: Box<[u8]>,
    hdr_mr: Mr,
    peer: SocketAddr,
    responder: Responder,
    /// Largest Send we may post (reply inline threshold).
    send_limit: usize,
    recv_size: usize,
    remote_invalidate: bool,
    read_depth: u32,
    recvs: Vec<Option<Buf>>,
    free_recvs: Vec<u32>,
    posted: u32,
    calls: Vec<CallSlot>,
    free_calls: Vec<u16>,
    reads_out: u32,
    /// Calls holding a reassembly buffer with Reads still to complete (<= MAX_PULLING).
    pulling: u32,
    /// When a Read last completed, or was posted with none outstanding.
    read_progress: Instant,
    read_queue: VecDeque<(u16, Segment, usize)>,
    /// Signaled Sends outstanding and their progress (`send_timeout`).
    sends: SendWatch,
    /// Memory outstanding Sends hold and what the peer took (`stall_reclaim`).
    drain: Drain,
    /// Reassembly buffers with RDMA Reads outstanding and the bytes our Reads
    /// completed (`stall_reclaim`, the Read side).
    pull: Drain,
    sq_used: u32,
    sq_max: u32,
    reply_queue: VecDeque<u16>,
    parked: VecDeque<u16>,
    /// Reply bytes charged and calls held (`max_reply_bytes`, see `super::reply_budget`).
    budget: ReplyBudget,
    closing: bool,
    /// Callbacks outstanding (RFC 8167) and the client's reverse grant.
    cb: reverse::Table,
    /// Each callback slot's Send buffer, until its Send completes.
    cb_bufs: [Option<Buf>; MAX_CALLBACKS as usize],
    /// Extra Receives reserved in the admission budget for callback replies.
    cb_extra: u32,
}

impl Conn {
    /// Receives to keep posted: the forward credits plus one per callback awaiting its
    /// reply (RFC 8167 §4.3.2, R8167-08).
    fn recv_target(&self) -> u32 {
        self.credits.saturating_add(self.cb.outstanding())
    }

    /// Receives available to forward calls, for the grant (R8167-02: callback
    /// Receives are accounted separately).
    fn forward_posted(&self) -> u32 {
        self.posted.saturating_sub(self.cb.outstanding())
    }
}

/// What became of a callback, kept until `take_callback_events`.
enum CbEvent {
    Reply(Vec<u8>),
    Error,
    Lost,
}

/// Appends to a queue the caller drains, dropping the oldest entry past
/// `MAX_CB_EVENTS` (a caller that never drains must not grow it without bound).
fn push_bounded<T>(q: &mut VecDeque<T>, v: T) {
    if q.len() >= MAX_CB_EVENTS {
        q.pop_front();
    }
    q.push_back(v);
}

/// The responder transport. See the module docs.
pub struct RdmaServer {
    fabric: Box<dyn Fabric>,
    mr: Mr,
    pools: Pools,
    opts: ServerOptions,
    ours: PrivData,
    conns: Vec<Option<Conn>>,
    gens: Vec<u32>,
    free: Vec<u32>,
    by_qp: HashMap<Qp, u32>,
    live: usize,
    dirty: Vec<u32>,
    cq: Vec<Completion>,
    failed: VecDeque<(IpAddr, u32)>,
    /// Tags of external data whose use is over (see `take_released`).
    released: Vec<u64>,
    /// Registrations of caller memory (`register_region`), removed at drop.
    extra_mrs: Vec<Mr>,
    stats: RdmaStats,
    local: SocketAddr,
    /// Receive buffers reserved by connections (see `super::admit`).
    admission: Admission,
    /// Refusal log lines, at most one a second.
    refusals: Throttle,
    /// When connections are next checked for timeouts (`super::timeouts`).
    sweep: Sweep,
    /// `Pools::exhausted_total` at the last sweep (the starvation signal).
    exhausted_seen: u64,
    /// Reclaim log lines, at most one a second (a sweep may close many).
    reclaims: Throttle,
    /// Callback outcomes not yet taken (bounded, `MAX_CB_EVENTS`).
    cb_events: VecDeque<(ConnId, u32, CbEvent)>,
    /// Connections closed since the last `take_closed` (bounded likewise).
    closed: VecDeque<ConnId>,
    /// Told the number of live connections each time it changes (see
    /// `publish_connections`).
    on_live: Option<Box<OnConnections>>,
}

/// Receives the number of live connections (see [`RdmaServer::publish_connections`]).
pub type OnConnections = dyn FnMut(usize) + Send;

impl RdmaServer {
    /// Registers the reactor's whole pool region with the fabric once (docs/architecture.md §3) and
    /// listens on `addr`.
    pub fn new(
        mut fabric: Box<dyn Fabric>,
        pools: Pools,
        mut opts: ServerOptions,
        addr: SocketAddr,
    ) -> io::Result<RdmaServer> {
        let (base, len) = pools.region();
        // SAFETY: the region lives as long as `pools`, which this server keeps until
        // it is dropped (after the fabric, see `Drop`).
        let mr = unsafe { fabric.register(base, len, access::LOCAL_WRITE)? };
        opts.credits = opts.credits.clamp(1, 4096);
        opts.inline_size = opts
            .inline_size
            .clamp(wire::DEFAULT_INLINE, privdata::MAX_SIZE);
        opts.max_call = opts.max_call.min(pools.max_buf());
        opts.min_credits = opts.min_credits.clamp(1, opts.credits);
        // Receives come from the smallest class that holds the inline size.
        let recv_class = pools
            .stats()
            .iter()
            .find(|c| c.size >= opts.inline_size)
            .map_or(0, |c| c.count);
        let admission = Admission::new(recv_class, opts.min_credits, opts.max_connections);
        fabric.listen(addr)?;
        let exhausted_seen = pools.exhausted_total();
        let ours = PrivData {
            send_size: opts.inline_size,
            recv_size: opts.inline_size,
            remote_invalidate: opts.remote_invalidate,
        };
        Ok(RdmaServer {
            fabric,
            mr,
            pools,
            ours,
            conns: Vec::new(),
            gens: Vec::new(),
            free: Vec::new(),
            by_qp: HashMap::new(),
            live: 0,
            dirty: Vec::with_capacity(opts.max_connections),
            cq: vec![
                Completion {
                    wr_id: 0,
                    qp: Qp(0),
                    status: WcStatus::Success,
                    opcode: WcOpcode::Recv,
                    byte_len: 0,
                    invalidated: None,
                    vendor_err: 0,
                };
                BATCH
            ],
            failed: VecDeque::with_capacity(FAILED_XIDS),
            released: Vec::with_capacity(256),
            extra_mrs: Vec::new(),
            stats: RdmaStats::default(),
            local: addr,
            admission,
            refusals: Throttle::new(Duration::from_secs(1)),
            sweep: Sweep::new(&[opts.read_timeout, opts.send_timeout, opts.stall_reclaim]),
            exhausted_seen,
            reclaims: Throttle::new(Duration::from_secs(1)),
            cb_events: VecDeque::new(),
            closed: VecDeque::new(),
            on_live: None,
            opts,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Registers more local memory (a reactor's cache pages) so replies can be sent
    /// from it with [`RdmaServer::reply_external`]; returns its lkey.
    ///
    /// # Safety
    /// The memory must stay valid until this server is dropped.
    pub unsafe fn register_region(&mut self, base: *mut u8, len: usize) -> io::Result<u32> {
        // SAFETY: forwarded to the caller.
        let mr = unsafe { self.fabric.register(base, len, access::LOCAL_WRITE)? };
        self.extra_mrs.push(mr);
        Ok(mr.lkey)
    }

    /// Hands every tag whose external data is no longer in use to `f`.
    pub fn take_released(&mut self, f: &mut dyn FnMut(u64)) {
        for t in self.released.drain(..) {
            f(t);
        }
    }

    pub fn provider(&self) -> &'static str {
        self.fabric.name()
    }

    /// Live connections: accepted and not yet gone (`Disconnected` taken), whatever
    /// they are doing — idle, pulling, executing, sending, closing.
    pub fn connections(&self) -> usize {
        self.live
    }

    /// Hands `f` the number of live connections now and again at every accept and
    /// every connection gone, on the polling thread, so a gauge made from it is exact
    /// at any time: it does not depend on which passes its owner publishes on.
    pub fn publish_connections(&mut self, mut f: Box<OnConnections>) {
        f(self.live);
        self.on_live = Some(f);
    }

    /// `live` changed: tell the publisher.
    fn live_changed(&mut self) {
        if let Some(f) = self.on_live.as_mut() {
            f(self.live);
        }
    }

    pub fn stats(&self) -> RdmaStats {
        self.stats
    }

    pub fn options(&self) -> &ServerOptions {
        &self.opts
    }

    /// For adaptive idle: see `Fabric::wait_fd`.
    pub fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        self.fabric.wait_fd()
    }

    /// Before waiting: `false` if work is pending here or in the fabric. An idle
    /// reactor polls seldom, so the timeout sweep is also taken here (see
    /// `super::timeouts`); a connection it closes is work (its flushes and
    /// `Disconnected` are to be taken).
    pub fn arm(&mut self) -> bool {
        if let Some(now) = self.sweep.due() {
            if self.sweep_timeouts(now) > 0 {
                return false;
            }
        }
        if !self.dirty.is_empty() {
            return false;
        }
        self.fabric.arm()
    }

    /// One pass: connection events, completions (calls reassembled and handed to
    /// `on_call(call, peer, record, reduced)`), re-posted Receives and queued work.
    /// Returns units of work done.
    pub fn poll(&mut self, on_call: &mut OnCall) -> usize {
        let mut work = 0;
        while let Some(ev) = self.fabric.poll_cm() {
            work += 1;
            self.on_cm(ev, on_call);
        }
        work += self.poll_cq(on_call);
        work += self.pump(on_call);
        if let Some(now) = self.sweep.tick() {
            self.sweep_timeouts(now);
        }
        work
    }

    /// Closes connections whose peer answered none of their outstanding RDMA Reads
    /// for `read_timeout`, completed none of their outstanding Sends for
    /// `send_timeout`, or, while an allocation is starved, took too little of what
    /// their outstanding Sends hold, or answered too few Reads of the calls whose
    /// reassembly buffers they hold, in `stall_reclaim` (their buffers come back with
    /// the flushes; see `super::timeouts`, `super::reclaim`).
    fn sweep_timeouts(&mut self, now: Instant) -> usize {
        let starved = self.starved();
        let stalled_since = now.checked_sub(self.opts.stall_reclaim);
        let mut closed = 0;
        for slot in 0..self.conns.len() as u32 {
            let Some(c) = self.conns[slot as usize].as_mut() else {
                continue;
            };
            if c.closing {
                continue;
            }
            c.drain.note(now);
            c.pull.note(now);
            if timeouts::reads_stalled(c.reads_out, c.read_progress, now, self.opts.read_timeout) {
                tracing::warn!(peer = %c.peer, reads = c.reads_out, timeout = ?self.opts.read_timeout,
                    "rdma: peer left RDMA Reads unanswered; closing the connection");
                self.stats.read_timeouts += 1;
            } else if c.sends.stalled(now, self.opts.send_timeout) {
                let (sends, bytes) = c.sends.outstanding();
                tracing::warn!(peer = %c.peer, sends, bytes, timeout = ?self.opts.send_timeout,
                    "rdma: peer completed none of its replies (rdma.send_timeout_s); closing the connection");
                self.stats.send_timeouts += 1;
            } else if starved && stalled_since.is_some_and(|t| c.drain.undrained(t)) {
                self.stats.send_reclaimed += 1;
                if let Some(quiet) = self.reclaims.ready(now) {
                    let (sends, _) = c.sends.outstanding();
                    let stalled_for = c.drain.since().map_or(self.opts.stall_reclaim, |t| {
                        now.saturating_duration_since(t)
                    });
                    tracing::warn!(peer = %c.peer, sends, held = c.drain.held(), ?stalled_for, not_logged = quiet,
                        "rdma: outstanding replies hold {RECLAIM_HELD} bytes or more of shared buffers and the \
                         peer completed less than {RECLAIM_PROGRESS} bytes of them while buffers are short \
                         (rdma.stall_reclaim_ms); closing the connection to reclaim them");
                }
            } else if starved && stalled_since.is_some_and(|t| c.pull.undrained(t)) {
                self.stats.read_reclaimed += 1;
                if let Some(quiet) = self.reclaims.ready(now) {
                    let stalled_for = c.pull.since().map_or(self.opts.stall_reclaim, |t| {
                        now.saturating_duration_since(t)
                    });
                    tracing::warn!(peer = %c.peer, reads = c.reads_out, held = c.pull.held(), ?stalled_for, not_logged = quiet,
                        "rdma: calls waiting for their RDMA Reads hold {RECLAIM_HELD} bytes or more of shared \
                         buffers and the peer answered less than {RECLAIM_PROGRESS} bytes of Reads while buffers \
                         are short (rdma.stall_reclaim_ms); closing the connection to reclaim them");
                }
            } else {
                continue;
            }
            self.close(slot);
            closed += 1;
        }
        closed
    }

    /// Whether some allocation of this reactor was starved since the last sweep: a
    /// pool class found empty (by either transport: they share the pools) or a call
    /// of ours parked for a reassembly buffer.
    fn starved(&mut self) -> bool {
        let exhausted = self.pools.exhausted_total();
        let grew = exhausted != self.exhausted_seen;
        self.exhausted_seen = exhausted;
        grew || self
            .conns
            .iter()
            .flatten()
            .any(|c| !c.closing && !c.parked.is_empty())
    }

    fn poll_cq(&mut self, on_call: &mut OnCall) -> usize {
        let mut total = 0;
        loop {
            let mut cq = std::mem::take(&mut self.cq);
            let n = self.fabric.poll_cq(&mut cq);
            for c in &cq[..n] {
                self.on_completion(*c, on_call);
            }
            self.cq = cq;
            total += n;
            if n < BATCH {
                return total;
            }
        }
    }

    fn on_cm(&mut self, ev: CmEvent, on_call: &mut OnCall) {
        match ev {
            CmEvent::ConnectRequest(req) => self.on_request(req),
            CmEvent::Established {
                qp,
                initiator_depth,
                ..
            } => {
                if let Some(&slot) = self.by_qp.get(&qp) {
                    if let Some(c) = self.conns[slot as usize].as_mut() {
                        c.read_depth =
                            (initiator_depth as u32).clamp(1, self.opts.read_depth.max(1) as u32);
                        tracing::debug!(peer = %c.peer, read_depth = c.read_depth, "rdma: connection established");
                    }
                }
            }
            CmEvent::Rejected { .. } => {}
            CmEvent::Disconnected { qp } => {
                // Every flush of this QP is queued before the event: take them first so
                // each buffer is returned by its own completion.
                self.poll_cq(on_call);
                // The QP is destroyed before its connection's buffers go back to the
                // pool: should a device not have flushed everything (the provider
                // reports the disconnect after `DRAIN_TIMEOUT` anyway), no work request
                // can still DMA into a buffer that another call is then given.
                self.fabric.release(qp);
                if let Some(slot) = self.by_qp.remove(&qp) {
                    self.drop_conn(slot);
                }
            }
        }
    }

    /// Accepts a connection: RFC 8797 thresholds from the peer's private data (1024
    /// each way without it, R8797-01/07), Receives posted before the first grant can
    /// reach the client (R8166-28).
    fn on_request(&mut self, req: ConnRequest) {
        // R8167-08: the extra Receives of callback replies are reserved with the grant.
        let extra = MAX_CALLBACKS;
        let credits = match self
            .admission
            .admit_with(self.live, self.opts.credits, extra)
        {
            Verdict::Grant(g) => g,
            refusal => {
                self.refuse(&req, refusal);
                return;
            }
        };
        if credits < self.opts.credits {
            self.stats.credits_reduced += 1;
            tracing::debug!(peer = %req.peer, credits, configured = self.opts.credits,
                "rdma: receive budget short; granting fewer credits");
        }
        let peer = privdata::decode(req.private_data.as_bytes());
        let t = privdata::thresholds(&self.ours, &peer);
        let caps = QpCaps {
            max_send_wr: (credits * 4).max(2 * MAX_CHAIN as u32),
            max_recv_wr: credits + extra,
            // The header and up to MAX_INLINE reply pieces in one Send (RFC 8267
            // §6.4.1: a COMPOUND's results written into several chunks leave holes).
            max_sge: (1 + MAX_INLINE as u32).max(4),
            initiator_depth: self.opts.read_depth.max(1),
            responder_resources: 1,
        };
        let ours = privdata::encode(&self.ours);
        let qp = match self.fabric.accept(req.id, &caps, &ours) {
            Ok(qp) => qp,
            Err(e) => {
                tracing::warn!(peer = %req.peer, "rdma: accept failed: {e}");
                self.stats.rejected += 1;
                self.admission.release(credits + extra);
                return;
            }
        };
        let cfg = Config {
            credits,
            max_call: self.opts.max_call,
            limits: self.opts.limits,
        };
        let responder = Responder::new(cfg);
        let ncalls = credits as usize + 16;
        let mut hdr_slab = vec![0u8; ncalls * HDR_SLOT].into_boxed_slice();
        // SAFETY: the slab is owned by the connection, whose drop deregisters it first
        // (`drop_conn`); a boxed slice never moves.
        let hdr_mr = match unsafe {
            self.fabric
                .register(hdr_slab.as_mut_ptr(), hdr_slab.len(), access::LOCAL_WRITE)
        } {
            Ok(mr) => mr,
            Err(e) => {
                tracing::warn!(peer = %req.peer, "rdma: registering reply headers failed: {e}");
                self.admission.release(credits + extra);
                self.fabric.disconnect(qp);
                return;
            }
        };
        let calls = (0..ncalls)
            .map(|_| CallSlot {
                state: State::Free,
                xid: 0,
                long: false,
                chunks: responder.new_chunks(),
                recv: None,
                record: None,
                pulls_left: 0,
                reduced: Vec::with_capacity(self.opts.limits.max_read_segments),
                reply: None,
                ddp: DdpList::new(),
                error: None,
                hdr: None,
                cost: 0,
                ext: Vec::with_capacity(MAX_EXT),
                charge: 0,
                sent: 0,
                held: 0,
                pull_held: 0,
            })
            .collect();
        let conn = Conn {
            qp,
            credits,
            hdr_slab,
            hdr_mr,
            peer: req.peer,
            responder,
            send_limit: t.send,
            recv_size: self.opts.inline_size,
            remote_invalidate: t.remote_invalidate,
            read_depth: 1,
            recvs: (0..credits + extra).map(|_| None).collect(),
            free_recvs: (0..credits + extra).rev().collect(),
            posted: 0,
            calls,
            free_calls: (0..ncalls as u16).rev().collect(),
            reads_out: 0,
            pulling: 0,
            read_progress: Instant::now(),
            read_queue: VecDeque::with_capacity(64),
            sends: SendWatch::default(),
            drain: Drain::default(),
            pull: Drain::default(),
            sq_used: 0,
            sq_max: caps.max_send_wr,
            reply_queue: VecDeque::with_capacity(ncalls),
            parked: VecDeque::new(),
            budget: ReplyBudget::new(self.opts.max_reply_bytes),
            closing: false,
            cb: reverse::Table::new(MAX_CALLBACKS),
            cb_bufs: Default::default(),
            cb_extra: extra,
        };
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.conns.push(None);
                self.gens.push(0);
                (self.conns.len() - 1) as u32
            }
        };
        self.conns[slot as usize] = Some(conn);
        self.by_qp.insert(qp, slot);
        self.live += 1;
        self.live_changed();
        self.stats.accepted += 1;
        self.refill(slot);
        let c = self.conns[slot as usize].as_ref().expect("just set");
        if c.posted == 0 {
            tracing::warn!(peer = %req.peer, "rdma: no buffers for Receives; dropping the connection");
            self.fabric.disconnect(qp);
        }
        tracing::info!(
            peer = %req.peer,
            send = t.send,
            recv = t.recv,
            remote_invalidate = t.remote_invalidate,
            credits = c.posted,
            "rdma: accepted connection"
        );
    }

    /// Refuses a connection request (RDMA-CM reject): counted, and logged at most once
    /// a second with the number of refusals not logged.
    fn refuse(&mut self, req: &ConnRequest, why: Verdict) {
        self.stats.rejected += 1;
        let reason = match why {
            Verdict::Full => {
                self.stats.refused_full += 1;
                "rdma.max_connections reached"
            }
            _ => {
                self.stats.refused_no_buffers += 1;
                "receive budget cannot give rdma.min_credits (raise the [pools] count of the rdma.inline_size class, or lower rdma.credits / rdma.max_connections)"
            }
        };
        if let Some(held) = self.refusals.ready(Instant::now()) {
            tracing::warn!(peer = %req.peer, live = self.live,
                reserved = self.admission.reserved(), budget = self.admission.budget(),
                not_logged = held, "rdma: connection refused: {reason}");
        }
        self.fabric.reject(req.id);
    }

    /// Posts Receives until the connection has `credits` of them plus one per callback
    /// awaiting its reply (R8167-08), or buffers run out.
    fn refill(&mut self, slot: u32) {
        let Some(c) = self.conns[slot as usize].as_mut() else {
            return;
        };
        if c.closing {
            return;
        }
        while c.posted < c.recv_target() {
            let Some(&idx) = c.free_recvs.last() else {
                return;
            };
            let Some(buf) = self.pools.alloc(c.recv_size) else {
                self.stats.recv_starved += 1;
                mark(&mut self.dirty, slot);
                return;
            };
            let sge = Sge {
                addr: buf.addr(),
                len: c.recv_size as u32,
                lkey: self.mr.lkey,
            };
            match self
                .fabric
                .post_recv(c.qp, wr_id(KIND_RECV, slot, idx), sge)
            {
                Ok(()) => {
                    c.free_recvs.pop();
                    c.recvs[idx as usize] = Some(buf);
                    c.posted += 1;
                }
                Err(e) => {
                    tracing::debug!(peer = %c.peer, "rdma: post_recv failed: {e}");
                    return;
                }
            }
        }
    }

    fn on_completion(&mut self, wc: Completion, on_call: &mut OnCall) {
        let (kind, slot, idx) = wr_parts(wc.wr_id);
        let Some(c) = self.conns.get_mut(slot as usize).and_then(|c| c.as_mut()) else {
            return;
        };
        if c.qp != wc.qp {
            // A late completion of the QP that held this slot before (verbs reports
            // `Disconnected` after `DRAIN_TIMEOUT` even if flushes are still missing):
            // it must not release this connection's call of the same index. Each
            // buffer comes back once, by its own connection's completion or drop.
            return;
        }
        let ok = wc.status == WcStatus::Success;
        if !ok && wc.status != WcStatus::Flushed {
            // The opcode of an error completion is undefined (verbs): the kind comes
            // from our wr_id; the vendor error is the device's own diagnosis.
            tracing::warn!(peer = %c.peer, status = ?wc.status, wr = WrKind::of(wc.wr_id).name(),
                vendor_err = wc.vendor_err, "rdma: work request failed; closing the connection");
            if kind == KIND_READ {
                // R8166-75: answer a retransmission of this call with ERR_CHUNK.
                if let Some(call) = c.calls.get(idx as usize) {
                    if self.failed.len() == FAILED_XIDS {
                        self.failed.pop_front();
                    }
                    self.failed.push_back((c.peer.ip(), call.xid));
                }
            }
            self.close(slot);
        }
        let Some(c) = self.conns[slot as usize].as_mut() else {
            return;
        };
        match kind {
            KIND_RECV => {
                let Some(mut buf) = c.recvs.get_mut(idx as usize).and_then(|b| b.take()) else {
                    return;
                };
                c.posted -= 1;
                c.free_recvs.push(idx);
                if !ok {
                    return;
                }
                buf.set_len((wc.byte_len as usize).min(buf.capacity()));
                // R8167-20: direction first, so a REPLY never takes a call slot, and a
                // matched reply's extra Receive is not re-posted (R8167-08).
                match reverse::classify(&buf) {
                    Inbound::Forward => {
                        self.refill(slot);
                        self.on_receive(slot, buf, on_call);
                    }
                    rev => {
                        self.on_reverse(slot, &buf, rev);
                        self.refill(slot);
                    }
                }
            }
            KIND_CB_SEND => {
                c.sq_used = c.sq_used.saturating_sub(1);
                if let Some(b) = c.cb_bufs.get_mut(idx as usize).and_then(|b| b.take()) {
                    c.sends.completed(b.len());
                    c.drain.completed(b.capacity(), ok);
                }
                c.cb.sent(idx as usize);
                mark(&mut self.dirty, slot);
            }
            KIND_READ => {
                c.reads_out = c.reads_out.saturating_sub(1);
                c.sq_used = c.sq_used.saturating_sub(1);
                let Some(call) = c.calls.get_mut(idx as usize) else {
                    return;
                };
                if call.state != State::Pulling {
                    return;
                }
                if !ok {
                    release_call(c, idx as u16, &mut self.released);
                    return;
                }
                let Some(left) = call.pulls_left.checked_sub(1) else {
                    return; // no Read of this call is outstanding: stale
                };
                call.pulls_left = left;
                c.read_progress = Instant::now();
                // Progress for the Read-side reclaim: the bytes this Read brought
                // (verbs and soft report them for RDMA Reads).
                c.pull.took(wc.byte_len as usize);
                mark(&mut self.dirty, slot);
                if left == 0 {
                    c.pulling = c.pulling.saturating_sub(1);
                    c.pull.released(std::mem::take(&mut call.pull_held));
                    self.deliver(slot, idx as u16, on_call);
                }
            }
            KIND_SEND => {
                let Some(call) = c.calls.get_mut(idx as usize) else {
                    return;
                };
                if call.state != State::Sending {
                    return;
                }
                let cost = call.cost;
                c.sq_used = c.sq_used.saturating_sub(cost);
                c.sends.completed(call.sent);
                c.drain.completed(call.held, ok);
                release_call(c, idx as u16, &mut self.released);
                mark(&mut self.dirty, slot);
            }
            _ => {}
        }
    }

    /// One received message: RDMA_ERROR, drop, or a call (RFC 8166 §4.5, §3.4.5).
    fn on_receive(&mut self, slot: u32, buf: Buf, on_call: &mut OnCall) {
        let c = self.conns[slot as usize].as_mut().expect("live connection");
        let Some(idx) = c.free_calls.pop() else {
            tracing::warn!(peer = %c.peer, "rdma: client exceeded its credits by more than the slack; closing the connection");
            self.close(slot);
            return;
        };
        c.calls[idx as usize].state = State::NeedBuffer;
        c.calls[idx as usize].recv = Some(buf);
        self.start_call(slot, idx, on_call);
    }

    /// Classifies the call's Receive and starts reassembly. Re-run for parked calls.
    fn start_call(&mut self, slot: u32, idx: u16, on_call: &mut OnCall) {
        let c = self.conns[slot as usize].as_mut().expect("live connection");
        let call = &mut c.calls[idx as usize];
        let recv = call.recv.as_ref().expect("parked call keeps its Receive");
        let verdict = c.responder.receive(recv, &mut call.chunks);
        match verdict {
            Received::Drop(why) => {
                tracing::debug!(peer = %c.peer, "rdma: dropping message: {why}");
                self.stats.dropped += 1;
                release_call(c, idx, &mut self.released);
            }
            Received::Error { xid, vers, body } => {
                tracing::debug!(peer = %c.peer, xid, ?body, "rdma: answering RDMA_ERROR");
                call.recv = None;
                call.error = Some((vers, body));
                call.xid = xid;
                call.state = State::Queued;
                c.reply_queue.push_back(idx);
                mark(&mut self.dirty, slot);
            }
            Received::Call(info) => {
                call.xid = info.xid;
                call.long = info.long;
                let key = (c.peer.ip(), info.xid);
                if let Some(at) = self.failed.iter().position(|k| *k == key) {
                    // Answered once, then forgotten: another client on the same host
                    // reusing the XID later must not get a stale ERR_CHUNK.
                    self.failed.remove(at);
                    call.recv = None;
                    call.error = Some((wire::VERSION, ErrBody::Chunk));
                    call.state = State::Queued;
                    c.reply_queue.push_back(idx);
                    mark(&mut self.dirty, slot);
                    return;
                }
                call.reduced.clear();
                call.reduced.extend_from_slice(c.responder.reduced());
                if !info.pulls {
                    // Zero copy: the record is the Receive buffer after the header.
                    let mut rec = call.recv.take().expect("checked");
                    let Some(&Piece::Inline { from, len, .. }) = c.responder.pieces().first()
                    else {
                        unreachable!("a call without pulls is one inline piece");
                    };
                    rec.advance(from);
                    rec.set_len(len);
                    call.record = Some(rec);
                    call.state = State::Pulling;
                    call.pulls_left = 0;
                    self.stats.calls += 1;
                    self.deliver(slot, idx, on_call);
                    return;
                }
                let rec = if c.pulling < MAX_PULLING {
                    self.pools.alloc(info.total_len)
                } else {
                    None
                };
                let Some(mut rec) = rec else {
                    self.stats.parked += 1;
                    call.state = State::NeedBuffer;
                    c.parked.push_back(idx);
                    mark(&mut self.dirty, slot);
                    return;
                };
                rec.set_len(info.total_len);
                let recv = call.recv.take().expect("checked");
                let mut pulls = 0;
                for p in c.responder.pieces() {
                    match *p {
                        Piece::Inline { from, len, to } => {
                            rec[to..to + len].copy_from_slice(&recv[from..from + len])
                        }
                        Piece::Zero { to, len } => rec[to..to + len].fill(0),
                        Piece::Pull { seg, to } => {
                            if seg.length > 0 {
                                c.read_queue.push_back((idx, seg, to));
                                pulls += 1;
                            }
                        }
                    }
                }
                call.record = Some(rec);
                call.state = State::Pulling;
                call.pulls_left = pulls;
                self.stats.calls += 1;
                if pulls == 0 {
                    self.deliver(slot, idx, on_call);
                } else {
                    c.pulling += 1;
                    let cap = call.record.as_ref().map_or(0, |r| r.capacity());
                    call.pull_held = cap;
                    c.pull.posted(cap);
                    mark(&mut self.dirty, slot);
                }
            }
        }
    }

    /// Hands a reassembled call to the caller. Rule (Standards: no pinned shared
    /// buffers): a call whose reply may need a buffer (`reply_charge`) is held while
    /// its connection's replies in production or awaiting Send completion reach
    /// `max_reply_bytes` (`super::reply_budget`).
    fn deliver(&mut self, slot: u32, idx: u16, on_call: &mut OnCall) {
        let max_buf = self.pools.max_buf();
        let c = self.conns[slot as usize].as_mut().expect("live connection");
        let call = &mut c.calls[idx as usize];
        let charge = reply_charge(&call.chunks, max_buf);
        if !c.budget.admit(idx, charge) {
            self.stats.reply_budget_holds += 1;
            return;
        }
        call.charge = charge;
        let rec = call.record.take().expect("pulled record");
        if call.long && !Responder::check_long_xid(call.xid, &rec) {
            // R8166-03 for Long calls.
            call.error = Some((wire::VERSION, ErrBody::Chunk));
            call.state = State::Queued;
            c.reply_queue.push_back(idx);
            mark(&mut self.dirty, slot);
            return;
        }
        call.state = State::Executing;
        let r = CallRef {
            slot,
            gen: self.gens[slot as usize],
            call: idx,
        };
        let room = Responder::first_write_chunk_room(&call.chunks);
        on_call(r, c.peer, rec, &call.reduced, room);
    }

    /// The caller's reply to `call`: `reply` is the whole RPC reply; `ddp` the data
    /// bytes of its DDP-eligible results (RFC 8267: READ data, READLINK path): one
    /// range or none for NFSv3, one entry per READ-class operation for an NFSv4
    /// COMPOUND (§6.4.1, paired with the write chunks in order).
    /// A reply for a connection that is gone is dropped.
    pub fn reply(&mut self, call: CallRef, reply: Buf, ddp: impl Into<DdpList>) {
        let ddp = ddp.into();
        let Some(c) = self.live_conn(call) else {
            return;
        };
        let slot = &mut c.calls[call.call as usize];
        if slot.state != State::Executing {
            debug_assert!(false, "reply for a call not executing");
            return;
        }
        slot.reply = Some(reply);
        slot.ddp = ddp;
        slot.state = State::Queued;
        c.reply_queue.push_back(call.call);
        mark(&mut self.dirty, call.slot);
    }

    /// The reply to a READ-like call whose result data lives outside `reply` (which
    /// ends with the result's length word): `data` (at most [`MAX_EXT`] pieces, in
    /// order, registered memory) goes by RDMA Write straight into the call's first
    /// write chunk, which must have room for it (see [`OnCall`]). Each piece's tag comes
    /// back through [`RdmaServer::take_released`] when the Writes are done, the
    /// connection is gone, or the reply was dropped.
    pub fn reply_external(&mut self, call: CallRef, reply: Buf, data: &[ExtSeg]) {
        debug_assert!(data.len() <= MAX_EXT);
        if !self.is_live(call) {
            self.released.extend(data.iter().map(|d| d.tag));
            return;
        }
        let c = self.conns[call.slot as usize].as_mut().expect("live");
        let slot = &mut c.calls[call.call as usize];
        if slot.state != State::Executing || data.len() > MAX_EXT {
            debug_assert!(false, "reply for a call not executing");
            self.released.extend(data.iter().map(|d| d.tag));
            return;
        }
        slot.ext.clear();
        slot.ext.extend_from_slice(data);
        slot.reply = Some(reply);
        slot.ddp = DdpList::new();
        slot.state = State::Queued;
        c.reply_queue.push_back(call.call);
        mark(&mut self.dirty, call.slot);
    }

    /// Hands over the connections that closed since the last call (a session's back
    /// channel bound to one must be forgotten).
    pub fn take_closed(&mut self, f: &mut dyn FnMut(ConnId)) {
        while let Some(id) = self.closed.pop_front() {
            f(id);
        }
    }

    /// The caller will not answer `call` (an RPC it drops): free its slot.
    pub fn no_reply(&mut self, call: CallRef) {
        if self.is_live(call) {
            let c = self.conns[call.slot as usize].as_mut().expect("live");
            if c.calls[call.call as usize].state == State::Executing {
                release_call(c, call.call, &mut self.released);
                if c.budget.has_held() {
                    mark(&mut self.dirty, call.slot);
                }
            }
        }
    }

    /// Closes the connection `call` arrived on (the caller could not serve the call,
    /// e.g. it panicked): the call is released and its buffers come back with the
    /// flush completions, like any disconnect.
    pub fn close_call_conn(&mut self, call: CallRef) {
        self.no_reply(call);
        if self.gens.get(call.slot as usize) == Some(&call.gen) {
            self.close(call.slot);
        }
    }

    fn is_live(&self, call: CallRef) -> bool {
        self.gens.get(call.slot as usize) == Some(&call.gen)
            && self.conns[call.slot as usize]
                .as_ref()
                .is_some_and(|c| !c.closing)
    }

    fn live_conn(&mut self, call: CallRef) -> Option<&mut Conn> {
        if self.gens.get(call.slot as usize) != Some(&call.gen) {
            return None;
        }
        self.conns[call.slot as usize]
            .as_mut()
            .filter(|c| !c.closing)
    }

    /// Issues queued RDMA Reads, sends queued replies, re-posts Receives and retries
    /// parked calls, for connections that have such work.
    fn pump(&mut self, on_call: &mut OnCall) -> usize {
        if self.dirty.is_empty() {
            return 0;
        }
        let mut work = 0;
        let dirty = std::mem::take(&mut self.dirty);
        for &slot in &dirty {
            if self.conns[slot as usize].is_none() {
                continue;
            }
            self.refill(slot);
            work += self.issue_reads(slot);
            work += self.send_replies(slot);
            work += self.retry_parked(slot, on_call);
            work += self.deliver_held(slot, on_call);
        }
        let mut dirty = dirty;
        dirty.retain(|&s| {
            self.conns[s as usize].as_ref().is_some_and(|c| {
                !c.closing
                    && (!c.reply_queue.is_empty()
                        || !c.parked.is_empty()
                        || (!c.read_queue.is_empty() && c.reads_out < c.read_depth)
                        || c.budget.ready()
                        || c.posted < c.recv_target())
            })
        });
        for s in dirty {
            mark(&mut self.dirty, s);
        }
        work
    }

    /// Delivers held calls (see `deliver`) while the connection's budget allows.
    fn deliver_held(&mut self, slot: u32, on_call: &mut OnCall) -> usize {
        let mut n = 0;
        while let Some(c) = self.conns[slot as usize].as_mut() {
            if c.closing {
                break;
            }
            let Some(idx) = c.budget.next_held() else {
                break;
            };
            self.deliver(slot, idx, on_call);
            n += 1;
        }
        n
    }

    fn retry_parked(&mut self, slot: u32, on_call: &mut OnCall) -> usize {
        let mut n = 0;
        while let Some(idx) = self.conns[slot as usize]
            .as_mut()
            .and_then(|c| c.parked.pop_front())
        {
            self.start_call(slot, idx, on_call);
            n += 1;
            let c = self.conns[slot as usize].as_ref().expect("live");
            if c.calls[idx as usize].state == State::NeedBuffer {
                break; // still no buffer: it is back on the parked list
            }
        }
        n
    }

    /// RDMA Reads into the call's record, at most `read_depth` outstanding (the
    /// negotiated depth; RFC 8166 §3.4.5 pulls, SPDK-style park on the depth limit).
    fn issue_reads(&mut self, slot: u32) -> usize {
        let c = self.conns[slot as usize].as_mut().expect("live");
        let mut n = 0;
        while c.reads_out < c.read_depth && c.sq_used < c.sq_max {
            let Some((idx, seg, to)) = c.read_queue.pop_front() else {
                break;
            };
            let call = &c.calls[idx as usize];
            let Some(rec) = call.record.as_ref() else {
                continue;
            };
            let sge = Sge {
                addr: rec.addr() + to as u64,
                len: seg.length,
                lkey: self.mr.lkey,
            };
            let wr = SendWr {
                wr_id: wr_id(KIND_READ, slot, idx as u32),
                op: Op::Read {
                    remote_addr: seg.offset,
                    rkey: seg.handle,
                },
                sges: std::slice::from_ref(&sge),
                signaled: true,
            };
            if c.reads_out == 0 {
                c.read_progress = Instant::now();
            }
            if let Err(e) = self.fabric.post_send(c.qp, &[wr]) {
                tracing::warn!(peer = %c.peer, "rdma: posting an RDMA Read failed: {e}; closing");
                self.close(slot);
                return n;
            }
            c.reads_out += 1;
            c.sq_used += 1;
            self.stats.rdma_reads += 1;
            n += 1;
        }
        n
    }

    /// Sends queued replies while the send queue has room for their work requests.
    fn send_replies(&mut self, slot: u32) -> usize {
        let mut n = 0;
        loop {
            let c = self.conns[slot as usize].as_mut().expect("live");
            let Some(&idx) = c.reply_queue.front() else {
                return n;
            };
            match self.send_one(slot, idx) {
                Sent::Done => {
                    let c = self.conns[slot as usize].as_mut().expect("live");
                    c.reply_queue.pop_front();
                    n += 1;
                }
                Sent::Wait => return n,
                Sent::Closed => return n,
            }
        }
    }

    fn send_one(&mut self, slot: u32, idx: u16) -> Sent {
        let c = self.conns[slot as usize].as_mut().expect("live");
        let grant = c.responder.grant(c.forward_posted());
        let call = &mut c.calls[idx as usize];
        let hdr_cap = wire::FIXED_WORDS + call.chunks.encoded_len() + 16;
        if hdr_cap > HDR_SLOT && call.hdr.is_none() {
            match self.pools.alloc(hdr_cap) {
                Some(b) => call.hdr = Some(b),
                None => return Sent::Wait,
            }
        }
        let mut pool_hdr = call.hdr.take();
        let (hdr, hdr_addr, hdr_lkey): (&mut [u8], u64, u32) = match pool_hdr.as_mut() {
            Some(b) => {
                let a = b.addr();
                (b.spare_mut(), a, self.mr.lkey)
            }
            None => {
                let at = idx as usize * HDR_SLOT;
                let h = &mut c.hdr_slab[at..at + HDR_SLOT];
                let a = h.as_ptr() as u64;
                (h, a, c.hdr_mr.lkey)
            }
        };
        let hdr_len: usize;
        let mut sges = [Sge {
            addr: 0,
            len: 0,
            lkey: 0,
        }; MAX_CHAIN + 1 + MAX_INLINE];
        let mut ops: [Option<Op>; MAX_CHAIN] = [None; MAX_CHAIN];
        let mut nwrites = 0usize;
        let mut send_sges = 1usize;
        let mut invalidate = None;
        if let Some((vers, body)) = call.error {
            hdr_len = responder::encode_error(hdr, call.xid, vers, grant, body);
            self.stats.errors_sent += 1;
        } else {
            let reply = call.reply.as_ref().expect("queued reply");
            let planned = if call.ext.is_empty() {
                c.responder.plan_reply_list(
                    call.xid,
                    grant,
                    &call.chunks,
                    reply,
                    &call.ddp,
                    c.send_limit,
                    c.remote_invalidate,
                    &mut *hdr,
                )
            } else {
                let len = call.ext.iter().map(|d| d.len as usize).sum();
                c.responder.plan_reply_external(
                    call.xid,
                    grant,
                    &call.chunks,
                    reply,
                    len,
                    c.send_limit,
                    c.remote_invalidate,
                    &mut *hdr,
                )
            };
            match planned {
                Ok(plan) if plan.writes.len() + call.ext.len() <= MAX_CHAIN => {
                    for w in plan.writes.iter() {
                        if !w.external {
                            sges[nwrites] = Sge {
                                addr: reply.addr() + w.src.start as u64,
                                len: w.src.len() as u32,
                                lkey: self.mr.lkey,
                            };
                            ops[nwrites] = Some(Op::Write {
                                remote_addr: w.remote_offset,
                                rkey: w.handle,
                            });
                            nwrites += 1;
                            continue;
                        }
                        // Split the Write where the external pieces meet.
                        let mut base = 0usize;
                        for d in &call.ext {
                            let piece = base..base + d.len as usize;
                            base = piece.end;
                            let from = piece.start.max(w.src.start);
                            let to = piece.end.min(w.src.end);
                            if from >= to {
                                continue;
                            }
                            sges[nwrites] = Sge {
                                addr: d.addr + (from - piece.start) as u64,
                                len: (to - from) as u32,
                                lkey: d.lkey,
                            };
                            ops[nwrites] = Some(Op::Write {
                                remote_addr: w
                                    .remote_offset
                                    .saturating_add((from - w.src.start) as u64),
                                rkey: w.handle,
                            });
                            nwrites += 1;
                        }
                    }
                    hdr_len = plan.header_len;
                    for r in plan.inline.iter().filter(|r| !r.is_empty()) {
                        sges[nwrites + send_sges] = Sge {
                            addr: reply.addr() + r.start as u64,
                            len: r.len() as u32,
                            lkey: self.mr.lkey,
                        };
                        send_sges += 1;
                    }
                    invalidate = plan.invalidate;
                }
                _ => {
                    // R8166-44 / RFC 8267 §3.1: the reply does not fit what the client
                    // provided: ERR_CHUNK, never an over-size Send or a write past a
                    // segment.
                    tracing::debug!(peer = %c.peer, xid = call.xid, "rdma: reply resource overrun; answering ERR_CHUNK");
                    hdr_len = responder::encode_error(
                        hdr,
                        call.xid,
                        wire::VERSION,
                        grant,
                        ErrBody::Chunk,
                    );
                    call.reply = None;
                    call.ddp = DdpList::new();
                    call.error = Some((wire::VERSION, ErrBody::Chunk));
                    self.stats.errors_sent += 1;
                }
            }
        }
        let cost = 1 + nwrites as u32;
        if c.sq_used + cost > c.sq_max {
            call.hdr = pool_hdr;
            return Sent::Wait;
        }
        sges[nwrites] = Sge {
            addr: hdr_addr,
            len: hdr_len as u32,
            lkey: hdr_lkey,
        };
        let total: usize = sges[nwrites..nwrites + send_sges]
            .iter()
            .map(|s| s.len as usize)
            .sum();
        let written: usize = sges[..nwrites].iter().map(|s| s.len as usize).sum();
        debug_assert!(
            total <= c.send_limit.max(wire::MIN_HEADER),
            "R8166-35: a Send never exceeds the threshold"
        );
        let send_op = match invalidate {
            Some(rkey) => {
                self.stats.remote_invalidations += 1;
                Op::SendWithInv { rkey }
            }
            None => Op::Send,
        };
        let mut wrs = [SendWr {
            wr_id: 0,
            op: Op::Send,
            sges: &[],
            signaled: false,
        }; MAX_CHAIN + 1];
        for k in 0..nwrites {
            wrs[k] = SendWr {
                wr_id: wr_id(KIND_WRITE, slot, idx as u32),
                op: ops[k].expect("set above"),
                sges: &sges[k..k + 1],
                signaled: false,
            };
        }
        wrs[nwrites] = SendWr {
            wr_id: wr_id(KIND_SEND, slot, idx as u32),
            op: send_op,
            sges: &sges[nwrites..nwrites + send_sges],
            signaled: true,
        };
        call.hdr = pool_hdr;
        call.state = State::Sending;
        call.cost = cost;
        call.sent = written + total;
        call.held = call.reply.as_ref().map_or(0, |b| b.capacity())
            + call.hdr.as_ref().map_or(0, |b| b.capacity())
            + call.ext.iter().map(|d| d.len as usize).sum::<usize>();
        self.stats.rdma_writes += nwrites as u64;
        self.stats.replies += 1;
        if let Err(e) = self.fabric.post_send(c.qp, &wrs[..nwrites + 1]) {
            // R8166-74: a reply that cannot be posted closes the connection, which
            // tells the client it is lost.
            tracing::warn!(peer = %c.peer, "rdma: posting a reply failed: {e}; closing");
            self.close(slot);
            return Sent::Closed;
        }
        c.sq_used += cost;
        c.sends.posted(call.sent);
        c.drain.posted(call.held);
        Sent::Done
    }

    /// Starts closing a connection; buffers come back with the flush completions and
    /// the slot is freed at `Disconnected`.
    fn close(&mut self, slot: u32) {
        if let Some(c) = self.conns[slot as usize].as_mut() {
            if !c.closing {
                c.closing = true;
                self.fabric.disconnect(c.qp);
            }
        }
    }

    fn drop_conn(&mut self, slot: u32) {
        if let Some(mut c) = self.conns[slot as usize].take() {
            self.fabric.deregister(&c.hdr_mr);
            self.admission.release(c.credits + c.cb_extra);
            // R8167-17: callbacks outstanding are lost with the connection; the caller
            // resends them on the connection the client binds next (or times out).
            let id = ConnId {
                slot,
                gen: self.gens[slot as usize],
            };
            let (events, stats) = (&mut self.cb_events, &mut self.stats);
            c.cb.drain_lost(&mut |xid| {
                stats.cb_lost += 1;
                push_bounded(events, (id, xid, CbEvent::Lost));
            });
            push_bounded(&mut self.closed, id);
            for call in c.calls.iter_mut() {
                self.released.extend(call.ext.drain(..).map(|d| d.tag));
            }
            self.gens[slot as usize] = self.gens[slot as usize].wrapping_add(1);
            self.free.push(slot);
            self.live -= 1;
            self.live_changed();
            self.stats.disconnects += 1;
        }
    }
}

enum Sent {
    Done,
    Wait,
    Closed,
}

fn release_call(c: &mut Conn, idx: u16, released: &mut Vec<u64>) {
    let call = &mut c.calls[idx as usize];
    c.budget.release(call.charge);
    call.charge = 0;
    if call.state == State::Pulling && call.pulls_left > 0 {
        c.pulling = c.pulling.saturating_sub(1);
    }
    c.pull.released(std::mem::take(&mut call.pull_held));
    released.extend(call.ext.drain(..).map(|d| d.tag));
    call.state = State::Free;
    call.recv = None;
    call.record = None;
    call.reply = None;
    call.ddp = DdpList::new();
    call.error = None;
    call.hdr = None;
    call.pulls_left = 0;
    c.free_calls.push(idx);
}

fn mark(dirty: &mut Vec<u32>, slot: u32) {
    if !dirty.contains(&slot) {
        dirty.push(slot);
    }
}

impl Drop for RdmaServer {
    fn drop(&mut self) {
        for c in self.conns.iter().flatten() {
            self.fabric.disconnect(c.qp);
        }
        self.fabric.deregister(&self.mr);
        for mr in &self.extra_mrs {
            self.fabric.deregister(mr);
        }
    }
}

// RFC 8167 callbacks (reverse direction): a second `impl RdmaServer` block.
#[path = "server_callbacks.rs"]
mod callbacks;

#[cfg(test)]
#[path = "server_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "server_cb_tests.rs"]
mod cb_tests;

#[cfg(test)]
#[path = "server_timeout_tests.rs"]
mod timeout_tests;

#[cfg(test)]
#[path = "server_reclaim_tests.rs"]
mod reclaim_tests;

#[cfg(test)]
#[path = "server_read_reclaim_tests.rs"]
mod read_reclaim_tests;
