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
//!
//! Layout: this file holds the connection and call-slot state (`Conn`, `CallSlot`,
//! `State`), the `wr_id` encoding, the `RdmaServer` fields, construction, accessors
//! and the `poll`/`arm` entry points; `impl RdmaServer` continues in `server_cm.rs`
//! (CM events, accept/refuse, close/drop), `server_recv.rs` (Receives, reassembly,
//! handoff), `server_reply.rs` (replies, Writes + Send), `server_completions.rs`
//! (completion dispatch, pump), `server_sweep.rs` (timeouts, reclaim) and
//! `server_callbacks.rs` (RFC 8167); the public types are in `server_types.rs`.

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

pub use types::{
    CallRef, CallbackError, CallbackOutcome, ConnId, ExtSeg, OnCall, RdmaStats, ServerOptions,
};

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
/// Reassembly buffers one connection may hold while its RDMA Reads are outstanding:
/// a peer that never answers Reads (or answers slowly) holds at most this
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
    /// Pools registered with `register_pools`, kept mapped while registered.
    extra_pools: Vec<Pools>,
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
            extra_pools: Vec::new(),
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

    /// Registers a pool's region (a reactor's cache pages) like `register_region`,
    /// keeping a handle on the pools so the region stays mapped as long as this
    /// server may read it, whatever order the caller drops things in.
    pub fn register_pools(&mut self, pools: &Pools) -> io::Result<u32> {
        let (base, len) = pools.region();
        // SAFETY: the region lives as long as any handle on `pools`; this server
        // keeps one until it is dropped (`extra_pools`, after the fabric deregistered).
        let lkey = unsafe { self.register_region(base, len)? };
        self.extra_pools.push(pools.clone());
        Ok(lkey)
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

    /// `poll` returning its calls as events (quinn-proto's shape) instead of lending
    /// them to a callback: each reassembled call is appended to `out`, and the server
    /// is free again, so the caller answers them with `reply`/`reply_external`/
    /// `no_reply` and posts those replies with `flush_calls` in the same pass. The
    /// reduced items of a call are `reduced(call)`; the first write chunk's room is
    /// `Delivered::write_room`.
    pub fn poll_calls(&mut self, out: &mut Vec<Delivered>) -> usize {
        self.poll(&mut |call, peer, record, _, write_room| {
            out.push(Delivered {
                call,
                peer,
                record,
                write_room,
            })
        })
    }

    /// Posts the replies queued since the last pump (RDMA Writes and Sends, within
    /// send-queue room; what does not fit stays queued on its connection and goes at
    /// the next pump, as every Send does) and re-posts Receives. Calls this makes
    /// deliverable (held by the reply budget, parked for a buffer) are appended to
    /// `out`, like `poll_calls`'.
    pub fn flush_calls(&mut self, out: &mut Vec<Delivered>) -> usize {
        self.pump(&mut |call, peer, record, _, write_room| {
            out.push(Delivered {
                call,
                peer,
                record,
                write_room,
            })
        })
    }

    /// The reduced items of a call delivered and not yet answered (for the upper
    /// layer's DDP-eligibility check, RFC 8166 §3.4.5); empty for any other.
    pub fn reduced(&self, call: CallRef) -> &[Reduced] {
        if !self.is_live(call) {
            return &[];
        }
        let c = self.conns[call.slot as usize].as_ref().expect("live");
        let slot = &c.calls[call.call as usize];
        if slot.state == State::Executing {
            &slot.reduced
        } else {
            &[]
        }
    }
}

/// A call `poll_calls` delivered: its name (give it back with the reply), the peer,
/// the RPC record, and the room of its first write chunk when it has one (a READ
/// result up to that size may go by `reply_external`).
#[derive(Debug)]
pub struct Delivered {
    pub call: CallRef,
    pub peer: SocketAddr,
    pub record: Buf,
    pub write_room: Option<u64>,
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

// The public types (options, call and connection names, callback results, counters):
#[path = "server_types.rs"]
mod types;
// The rest of `impl RdmaServer`, one file per concern (each says what it holds).
// Connection setup/teardown and CM events:
#[path = "server_cm.rs"]
mod cm;
// The Receive path, reassembly by RDMA Read and the handoff to the caller:
#[path = "server_recv.rs"]
mod recv;
// The caller's replies and the Send/RDMA Write path:
#[path = "server_reply.rs"]
mod reply;
// Completion polling and the per-connection pump:
#[path = "server_completions.rs"]
mod completions;
// Read/Send timeouts and the starvation reclaim:
#[path = "server_sweep.rs"]
mod sweep;
// RFC 8167 callbacks (reverse direction):
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
