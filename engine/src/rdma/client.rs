//! The requester (client) side of RPC-over-RDMA at the I/O edge: one connection over
//! any [`Fabric`], driving the sans-IO [`crate::rpcrdma::requester`] core. Built for
//! `bench` (a pipelined load generator) and for tests; not the zero-copy side.
//!
//! # Memory
//! One anonymous mapping is allocated at connect and registered once with LOCAL_WRITE
//! (Send gather and Receive buffers). It holds `credits` Receive buffers of the
//! advertised receive size and `credits` call slots; a slot is
//! `[header | call | reply area | write area | tail]`:
//! - the call (up to `max_io` + the send size) is copied into the slot (the one copy per
//!   call); the Send gathers the header and the call's inline parts from there, and a
//!   read chunk / PZRC is a registration of the item / the whole call in place;
//! - the write area (`max_io`) receives a write chunk, the reply area (at least the
//!   receive size and `max_reply_chunk`) a Reply chunk;
//! - the reply area sits right before the write area, so a reply whose eligible result
//!   was written into the write chunk is rebuilt contiguously without copying the bulk
//!   data: the reduced reply up to the item's length word is copied to end where the
//!   data starts, the XDR pad and whatever follows the item go into the tail.
//!
//! Chunk memory is registered per RPC, with the least remote access it needs
//! (REMOTE_READ for read chunks, REMOTE_WRITE | LOCAL_WRITE for write and Reply chunks),
//! as late as possible (in [`RdmaClient::submit`]) and deregistered, which invalidates
//! it, as soon as the reply or RDMA_ERROR arrives or the connection dies, and always
//! before any reply byte is handed out (R8166-57, 72, 84). An abandoned call keeps its
//! registrations until then (see [`RdmaClient::abandon`]); its memory is never handed
//! out.
//! Because every advertised rkey belongs to exactly one RPC, our RFC 8797 private data
//! sets the R bit (remote invalidation is safe, R8797-15); a Receive that reports an
//! invalidated rkey is counted, and the MR is deregistered anyway (the trait's
//! `deregister` is idempotent and is what releases the registration).
//!
//! # Protocol duties kept here
//! Receives are posted before the connection is even established and reposted before
//! the next call can be sent (R8166-29); credits start at one per connection and follow
//! the grants of matched replies (R8166-25..27, 31); nothing is ever sent except calls
//! (RDMA_MSG / RDMA_NOMSG) and, for callbacks, their replies and ERR_CHUNK (see
//! below): bad or unexpected messages are dropped and their Receive reposted
//! (R8166-15/16); an RDMA_ERROR fails its call permanently and nothing is
//! retransmitted (R8166-18). One connection per client: after a disconnect every
//! pending call fails with [`RpcRdmaError::Disconnected`] and a new client must be
//! connected (credits restart at one, thresholds are renegotiated).
//!
//! # Callbacks (RFC 8167 reverse direction, docs/architecture.md §9 rule 5)
//! With `backchannel_credits` = B > 0, B more Receives are posted at connect, before
//! `Established` (R8167-06: Receives >= reverse grant + forward calls in flight). A
//! reconnect is a new `RdmaClient`, which again posts all of them before anything can
//! arrive or be sent, so the reverse Receives are in place before the new connection is
//! bound to a backchannel (R8167-07). A received callback (RDMA_MSG, RPC msg_type CALL,
//! xid == rdma_xid) is copied into one of 2·B callback buffers and its Receive is
//! reposted at once (so before its reply is sent); it never touches forward slots or
//! credits (R8167-01/02/04). [`RdmaClient::take_callbacks`] hands it over and
//! [`RdmaClient::reply_callback`] answers it with a Short RDMA_MSG carrying our reverse
//! grant (R8167-11/12). A callback with any chunk list is answered ERR_CHUNK (no
//! reverse chunks here, R8167-15); one over the grant, a duplicate XID, or any callback
//! when B = 0 is dropped and counted.
//!
//! Steady state allocates nothing per RPC: slots, segment storage and completion
//! batches are sized at connect. XIDs are assigned by the client (the first word of
//! each submitted call is overwritten) and name their slot.

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use memmap2::MmapMut;

use crate::fabric::{
    access, CmEvent, Completion, Fabric, Mr, Op, PostError, Qp, QpCaps, SendWr, Sge, WcOpcode,
    WcStatus,
};
use crate::rpcrdma::privdata::{self, PrivData, Thresholds};
use crate::rpcrdma::requester::{
    self, CallClass, CallShape, CallbackHeader, ChunkSegments, Credits, Offered, PayloadAt,
    PlanError, Received, ReplyHeader, ReplyLayout, ResultAt, MAX_CREDITS,
};
use crate::rpcrdma::wire::{self, Chunks, ErrBody, Limits, Segment};
use crate::xdr::{padded, XdrWriter};

pub use crate::rpcrdma::requester::RpcRdmaError;

/// The callback [`RdmaClient::poll`] delivers finished calls to: the XID and the rebuilt
/// RPC reply (borrowed for the call only) or why the call failed.
pub type OnReply<'a> = dyn FnMut(u32, Result<&[u8], RpcRdmaError>) + 'a;

/// Largest reverse grant (callbacks held at once).
pub const MAX_BC_CREDITS: u32 = 64;
/// Bytes reserved for the transport header of a call (one segment per chunk needs at
/// most 100).
const HDR_ROOM: usize = 256;
/// Completions taken per `poll_cq`.
const CQ_BATCH: usize = 32;
/// XID bits naming the slot (enough for [`MAX_CREDITS`]).
const SLOT_BITS: u32 = 10;
const SLOT_MASK: u32 = (1 << SLOT_BITS) - 1;
const TAG_RECV: u64 = 1 << 32;
const TAG_SEND: u64 = 2 << 32;
const TAG_CB_SEND: u64 = 3 << 32;

/// State of one callback buffer (RFC 8167).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CbState {
    Free,
    /// Received, not yet handed over; `len` bytes of RPC call copied.
    Received {
        len: usize,
    },
    /// Handed over by `take_callbacks`, awaiting `reply_callback`.
    Taken,
    /// Reply (or ERR_CHUNK) posted; waits for its Send completion.
    Sending,
}

#[derive(Debug, Clone, Copy)]
struct CbSlot {
    state: CbState,
    xid: u32,
}

const fn align64(n: usize) -> usize {
    (n + 63) & !63
}

/// Settings of one client connection.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Credits requested, and so the most calls in flight and Receives posted
    /// (1..=1024).
    pub credits: u32,
    /// Send size advertised in our RFC 8797 private data (1 KiB..256 KiB).
    pub inline_send: usize,
    /// Receive size advertised (and allocated per Receive buffer).
    pub inline_recv: usize,
    /// Largest DDP argument or result (WRITE/READ size) per call: sizes the call and
    /// write areas of each slot.
    pub max_io: usize,
    /// Largest Reply chunk (Long reply) per call.
    pub max_reply_chunk: usize,
    /// How long [`RdmaClient::connect`] waits for `Established`.
    pub connect_timeout: Duration,
    /// Limits applied when decoding reply headers.
    pub limits: Limits,
    /// Set the RFC 8797 R bit (all our rkeys are per-RPC, so this is safe).
    pub remote_invalidate: bool,
    /// RFC 8167 reverse credits: callbacks we accept at once (Receives posted for them
    /// beyond `credits`, R8167-06), and the grant our callback replies carry
    /// (R8167-12). 0: no back channel (a callback is dropped and counted).
    pub backchannel_credits: u32,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            credits: 32,
            inline_send: 4096,
            inline_recv: 4096,
            max_io: 1 << 20,
            max_reply_chunk: 64 << 10,
            connect_timeout: Duration::from_secs(5),
            limits: Limits::default(),
            remote_invalidate: true,
            backchannel_credits: 0,
        }
    }
}

/// Why [`RdmaClient::submit`] did not send a call. Nothing is in flight for it.
#[derive(Debug)]
pub enum SubmitError {
    /// No credit or no free slot: poll for replies first (R8166-25).
    Busy,
    /// The connection is gone.
    Disconnected,
    /// The call, its write chunk or its Reply chunk exceeds this client's buffers
    /// (`max_io`, `max_reply_chunk`).
    TooLarge,
    /// The call cannot be put on the wire (bad shape, over the transport limits).
    Plan(PlanError),
    /// Registering chunk memory failed.
    Register(io::Error),
    /// Posting the Send failed.
    Post(PostError),
    /// [`RdmaClient::reply_callback`]: no callback with this XID awaits a reply.
    NoSuchCallback,
}

impl std::fmt::Display for SubmitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SubmitError::Busy => f.write_str("no credit or slot free"),
            SubmitError::Disconnected => f.write_str("not connected"),
            SubmitError::TooLarge => f.write_str("call exceeds the client's buffers"),
            SubmitError::Plan(e) => write!(f, "cannot encode call: {e}"),
            SubmitError::Register(e) => write!(f, "registering chunk memory: {e}"),
            SubmitError::Post(e) => write!(f, "posting the Send: {e}"),
            SubmitError::NoSuchCallback => f.write_str("no such callback awaits a reply"),
        }
    }
}

impl std::error::Error for SubmitError {}

/// Why [`RdmaClient::call`] failed.
#[derive(Debug)]
pub enum CallError {
    Submit(SubmitError),
    Rpc(RpcRdmaError),
    Io(io::Error),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Submit(e) => e.fmt(f),
            CallError::Rpc(e) => e.fmt(f),
            CallError::Io(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for CallError {}

/// Counters of one client.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ClientStats {
    pub short_calls: u64,
    pub chunked_calls: u64,
    pub long_calls: u64,
    pub write_chunks: u64,
    pub reply_chunks: u64,
    /// Replies delivered (successfully rebuilt).
    pub replies: u64,
    /// RDMA_ERROR answers.
    pub rdma_errors: u64,
    /// Replies that broke a rule and failed their call.
    pub bad_replies: u64,
    /// Messages dropped: malformed, obsolete, unknown proc, not a reply.
    pub discarded: u64,
    /// Callbacks accepted (RFC 8167).
    pub callbacks: u64,
    /// Callback replies sent.
    pub callback_replies: u64,
    /// Callbacks dropped: no back channel, over the reverse grant, duplicate XID.
    pub callbacks_dropped: u64,
    /// Callbacks answered RDMA_ERROR / ERR_CHUNK (they carried chunks, R8167-15).
    pub callback_chunk_errors: u64,
    /// Replies and errors for no pending XID.
    pub unknown_xid: u64,
    /// Replies to abandoned calls, and replies `call` received for other XIDs.
    pub orphaned: u64,
    /// Receives that came with Send-With-Invalidate of one of the call's rkeys.
    pub remote_invalidations: u64,
    /// ... of an rkey that did not belong to the matched call.
    pub foreign_invalidations: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    Free,
    /// Sent, waiting for the reply.
    Pending,
    /// The caller gave up; the credit stays taken until the reply arrives.
    Abandoned,
    /// Reply handled; waits for its Send completion before reuse.
    Answered,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    state: SlotState,
    xid: u32,
    send_done: bool,
    read_mr: Option<Mr>,
    write_mr: Option<Mr>,
    reply_mr: Option<Mr>,
    result: ResultAt,
}

impl Slot {
    const FREE: Slot = Slot {
        state: SlotState::Free,
        xid: 0,
        send_done: true,
        read_mr: None,
        write_mr: None,
        reply_mr: None,
        result: ResultAt::Last,
    };
}

/// Byte offsets of the region.
#[derive(Debug, Clone, Copy)]
struct Layout {
    recv_size: usize,
    /// Receives: one per forward credit plus the reverse credits (R8167-06).
    nrecv: usize,
    slots_base: usize,
    slot_size: usize,
    call_off: usize,
    call_room: usize,
    reply_off: usize,
    reply_room: usize,
    write_off: usize,
    write_room: usize,
    /// Callback buffers: `[call copy (recv_size) | reply (send_room)]` each.
    cb_base: usize,
    ncb: usize,
    cb_size: usize,
}

impl Layout {
    fn new(o: &ClientOptions, slots: usize) -> Layout {
        let recv_size = align64(o.inline_recv);
        let call_room = align64(o.max_io + o.inline_send);
        // The reply area doubles as the prefix room for in-place reassembly, so it
        // must hold any reduced reply (inline or from the Reply chunk).
        let reply_room = align64(o.inline_recv.max(o.max_reply_chunk));
        let write_room = align64(o.max_io);
        let tail_room = reply_room + 64;
        let call_off = HDR_ROOM;
        let reply_off = call_off + call_room;
        let write_off = reply_off + reply_room;
        let bc = o.backchannel_credits as usize;
        let nrecv = slots + bc;
        let slot_size = write_off + write_room + tail_room;
        let slots_base = recv_size * nrecv;
        Layout {
            recv_size,
            nrecv,
            slots_base,
            slot_size,
            call_off,
            call_room,
            reply_off,
            reply_room,
            write_off,
            write_room,
            cb_base: slots_base + slot_size * slots,
            ncb: 2 * bc,
            cb_size: recv_size + align64(o.inline_send),
        }
    }

    fn len(&self) -> usize {
        self.cb_base + self.cb_size * self.ncb
    }

    fn cb(&self, i: usize) -> usize {
        self.cb_base + i * self.cb_size
    }

    fn recv(&self, i: usize) -> usize {
        i * self.recv_size
    }

    fn slot(&self, s: usize) -> usize {
        self.slots_base + s * self.slot_size
    }
}

/// One RPC-over-RDMA requester connection. See the module docs.
pub struct RdmaClient {
    // Field order matters: the fabric (and its registrations of `region`) is dropped
    // before the region is unmapped.
    fabric: Box<dyn Fabric>,
    qp: Qp,
    /// `qp` was created (and must be released).
    has_qp: bool,
    connected: bool,
    credits: Credits,
    thresholds: Thresholds,
    limits: Limits,
    max_io: usize,
    region_mr: Option<Mr>,
    layout: Layout,
    slots: Vec<Slot>,
    free: Vec<u16>,
    seq: u32,
    dec: Chunks,
    enc: Chunks,
    cqe: [Completion; CQ_BATCH],
    failed: Vec<u32>,
    /// Our reverse grant (0: no back channel).
    bc_credits: u32,
    cbs: Vec<CbSlot>,
    /// Received callbacks not yet handed over, in arrival order.
    cb_queue: std::collections::VecDeque<u16>,
    live_mrs: usize,
    stats: ClientStats,
    region: MmapMut,
}

fn other(msg: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

impl RdmaClient {
    /// Connects to an RPC-over-RDMA responder at `addr` (RFC 8166 §3.3, RFC 8797).
    ///
    /// Allocates and registers the buffer region, starts the connection offering our
    /// private data (send/receive sizes, R bit), posts every Receive at once — before
    /// anything can be sent (R8166-29) — and polls until `Established` (or
    /// `opts.connect_timeout`), whose private data sets the thresholds (R8797-06/07).
    pub fn connect(
        fabric: Box<dyn Fabric>,
        addr: SocketAddr,
        opts: ClientOptions,
    ) -> io::Result<RdmaClient> {
        if opts.credits == 0 || opts.credits > MAX_CREDITS {
            return Err(other("credits must be 1..=1024"));
        }
        let sizes = wire::DEFAULT_INLINE..=privdata::MAX_SIZE;
        if !sizes.contains(&opts.inline_send) || !sizes.contains(&opts.inline_recv) {
            return Err(other("inline sizes must be 1 KiB..=256 KiB"));
        }
        if opts.max_io == 0 || opts.max_io > u32::MAX as usize / 2 {
            return Err(other("max_io out of range"));
        }
        if opts.backchannel_credits > MAX_BC_CREDITS {
            return Err(other("backchannel_credits must be 0..=64"));
        }
        let slots = opts.credits as usize;
        let layout = Layout::new(&opts, slots);
        let region = MmapMut::map_anon(layout.len())?;
        let ours = PrivData {
            send_size: opts.inline_send,
            recv_size: opts.inline_recv,
            remote_invalidate: opts.remote_invalidate,
        };
        let mut c = RdmaClient {
            fabric,
            qp: Qp(0),
            has_qp: false,
            connected: false,
            credits: Credits::new(opts.credits),
            thresholds: privdata::thresholds(&ours, &PrivData::ABSENT),
            limits: opts.limits,
            max_io: opts.max_io,
            region_mr: None,
            layout,
            slots: vec![Slot::FREE; slots],
            free: (0..slots as u16).rev().collect(),
            seq: initial_seq(),
            dec: Chunks::with_limits(&opts.limits),
            enc: Chunks::with_limits(&Limits::default()),
            cqe: [Completion {
                wr_id: 0,
                qp: Qp(0),
                status: WcStatus::Success,
                opcode: WcOpcode::Recv,
                byte_len: 0,
                invalidated: None,
                vendor_err: 0,
            }; CQ_BATCH],
            failed: Vec::with_capacity(slots),
            bc_credits: opts.backchannel_credits,
            cbs: vec![
                CbSlot {
                    state: CbState::Free,
                    xid: 0
                };
                layout.ncb
            ],
            cb_queue: std::collections::VecDeque::with_capacity(layout.ncb),
            live_mrs: 0,
            stats: ClientStats::default(),
            region,
        };
        let base = c.region.as_mut_ptr();
        let len = c.region.len();
        // SAFETY: the region is a private anonymous mapping owned by `c`; it stays mapped
        // until `c` is dropped, and `c`'s Drop deregisters this MR (and the fabric, a field
        // declared before `region`, is dropped before the mapping goes away).
        let mr = unsafe { c.fabric.register(base, len, access::LOCAL_WRITE)? };
        c.region_mr = Some(mr);
        let bc = opts.backchannel_credits;
        let caps = QpCaps {
            max_send_wr: opts.credits + 2 * bc + 8,
            max_recv_wr: opts.credits + bc + 8,
            max_sge: 4,
            ..QpCaps::default()
        };
        c.qp = c.fabric.connect(addr, &caps, &privdata::encode(&ours))?;
        c.has_qp = true;
        c.connected = true;
        for i in 0..layout.nrecv {
            c.post_recv(i)
                .map_err(|e| io::Error::new(io::ErrorKind::ConnectionAborted, e))?;
        }
        let deadline = Instant::now() + opts.connect_timeout;
        loop {
            while let Some(ev) = c.fabric.poll_cm() {
                match ev {
                    CmEvent::Established {
                        qp, private_data, ..
                    } if qp == c.qp => {
                        let peer = privdata::decode(private_data.as_bytes());
                        c.thresholds = privdata::thresholds(&ours, &peer);
                        return Ok(c);
                    }
                    CmEvent::Rejected { qp } if qp == c.qp => {
                        c.connected = false;
                        return Err(io::ErrorKind::ConnectionRefused.into());
                    }
                    CmEvent::Disconnected { qp } if qp == c.qp => {
                        c.connected = false;
                        return Err(io::ErrorKind::ConnectionAborted.into());
                    }
                    _ => {}
                }
            }
            if Instant::now() >= deadline {
                return Err(io::ErrorKind::TimedOut.into());
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    }

    /// Calls sent and not yet answered (abandoned ones included: their credit is only
    /// returned by their reply).
    pub fn in_flight(&self) -> u32 {
        self.credits.in_flight()
    }

    /// Calls that may be outstanding now (1 until the first reply, R8166-27).
    pub fn credit_limit(&self) -> u32 {
        self.credits.limit()
    }

    /// The connection's inline thresholds (RFC 8797 §4.2).
    pub fn thresholds(&self) -> Thresholds {
        self.thresholds
    }

    /// Whether the connection is up.
    pub fn is_connected(&self) -> bool {
        self.connected
    }

    /// Per-RPC chunk registrations currently live.
    pub fn chunk_registrations(&self) -> usize {
        self.live_mrs
    }

    pub fn stats(&self) -> ClientStats {
        self.stats
    }

    /// The queue pair (for provider-specific fault injection in tests).
    pub fn qp(&self) -> Qp {
        self.qp
    }

    /// The fabric, e.g. for [`Fabric::wait_fd`] / [`Fabric::arm`] (adaptive idle).
    /// Posting or deregistering on the client's queue pair or memory breaks it.
    pub fn fabric_mut(&mut self) -> &mut dyn Fabric {
        &mut *self.fabric
    }

    /// Hands over the callbacks (RFC 8167 reverse calls: RDMA_MSG, three empty chunk
    /// lists, RPC msg_type CALL) received since the last call: XID and RPC call record.
    /// Answer each with [`RdmaClient::reply_callback`].
    pub fn take_callbacks(&mut self, f: &mut dyn FnMut(u32, &[u8])) {
        while let Some(i) = self.cb_queue.pop_front() {
            let i = usize::from(i);
            let CbState::Received { len } = self.cbs[i].state else {
                continue;
            };
            self.cbs[i].state = CbState::Taken;
            let at = self.layout.cb(i);
            f(self.cbs[i].xid, &self.region[at..at + len]);
        }
    }

    /// Answers callback `xid` with the RPC reply `record` (starting at the XID, which
    /// is overwritten with `xid`; msg_type must be REPLY): a Short RDMA_MSG with
    /// `rdma_vers` 1, `rdma_xid` = `xid`, `rdma_credit` = our reverse grant and three
    /// empty chunk lists (RFC 8167 §5.2, R8167-11/12). Its Receive was reposted when the
    /// callback arrived, before this reply. A reply over the forward-call inline
    /// threshold (= the reverse-reply threshold, since both directions share the same
    /// Receive buffers) is `TooLarge` and the callback stays unanswered.
    pub fn reply_callback(&mut self, xid: u32, record: &[u8]) -> Result<(), SubmitError> {
        if !self.connected {
            return Err(SubmitError::Disconnected);
        }
        let Some(i) = self
            .cbs
            .iter()
            .position(|c| c.state == CbState::Taken && c.xid == xid)
        else {
            return Err(SubmitError::NoSuchCallback);
        };
        if record.len() < 8 || record[4..8] != crate::rpc::MSG_REPLY.to_be_bytes() {
            return Err(SubmitError::Plan(PlanError::BadCall));
        }
        let total = wire::MIN_HEADER.saturating_add(record.len());
        if total > self.thresholds.send || total > self.layout.cb_size - self.layout.recv_size {
            return Err(SubmitError::TooLarge);
        }
        let fixed = wire::Fixed {
            xid,
            vers: wire::VERSION,
            credit: self.bc_credits,
            proc_: wire::RDMA_MSG,
        };
        let at = self.layout.cb(i) + self.layout.recv_size;
        let buf = &mut self.region[at..at + total];
        let n = wire::encode_msg(&mut XdrWriter::new(buf), fixed, &Chunks::default())
            .map_err(|_| SubmitError::TooLarge)?;
        buf[n..n + record.len()].copy_from_slice(record);
        buf[n..n + 4].copy_from_slice(&xid.to_be_bytes());
        self.post_cb_send(i, total)?;
        self.stats.callback_replies += 1;
        Ok(())
    }

    /// Posts callback buffer `i`'s reply area (`len` bytes) as one Send.
    fn post_cb_send(&mut self, i: usize, len: usize) -> Result<(), SubmitError> {
        let sge = [self.sge(self.layout.cb(i) + self.layout.recv_size, len)];
        let wr = SendWr {
            wr_id: TAG_CB_SEND | i as u64,
            op: Op::Send,
            sges: &sge,
            signaled: true,
        };
        self.fabric
            .post_send(self.qp, &[wr])
            .map_err(SubmitError::Post)?;
        self.cbs[i].state = CbState::Sending;
        Ok(())
    }

    /// A received callback (RFC 8167 §4), its message at `at..at + len` of
    /// the region. Never touches forward slots or credits (R8167-02/04).
    fn on_callback(&mut self, at: usize, len: usize, cb: CallbackHeader) {
        let outstanding = self
            .cbs
            .iter()
            .filter(|c| matches!(c.state, CbState::Received { .. } | CbState::Taken))
            .count();
        let dup = self.cbs.iter().any(|c| {
            matches!(c.state, CbState::Received { .. } | CbState::Taken) && c.xid == cb.xid
        });
        let free = self.cbs.iter().position(|c| c.state == CbState::Free);
        let (Some(i), false, true) = (free, dup, outstanding < self.bc_credits as usize) else {
            // No back channel, over our grant, or a duplicate (R8167-06 bounds us).
            self.stats.callbacks_dropped += 1;
            return;
        };
        self.cbs[i].xid = cb.xid;
        if cb.chunked {
            // No reverse chunks here: ERR_CHUNK with the callback's XID (R8167-15).
            let dst = self.layout.cb(i) + self.layout.recv_size;
            let mut w = XdrWriter::new(&mut self.region[dst..dst + wire::ERR_CHUNK_LEN]);
            let sent = wire::encode_error(&mut w, cb.xid, cb.vers, self.bc_credits, ErrBody::Chunk)
                .ok()
                .and_then(|n| self.post_cb_send(i, n).ok());
            if sent.is_some() {
                self.stats.callback_chunk_errors += 1;
            } else {
                self.stats.callbacks_dropped += 1;
            }
            return;
        }
        let Some(payload) = len.checked_sub(cb.payload_at).filter(|&n| n >= 8) else {
            self.stats.callbacks_dropped += 1;
            return;
        };
        let dst = self.layout.cb(i);
        let src = at + cb.payload_at;
        self.region.copy_within(src..src + payload, dst);
        self.cbs[i].state = CbState::Received { len: payload };
        self.cb_queue.push_back(i as u16);
        self.stats.callbacks += 1;
    }

    /// Largest call `submit` accepts.
    pub fn max_call(&self) -> usize {
        self.layout.call_room
    }

    fn next_xid(&mut self, slot: usize) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        (self.seq << SLOT_BITS) | slot as u32
    }

    fn lookup(&self, xid: u32) -> Option<usize> {
        let s = (xid & SLOT_MASK) as usize;
        let slot = self.slots.get(s)?;
        let live = matches!(slot.state, SlotState::Pending | SlotState::Abandoned);
        (live && slot.xid == xid).then_some(s)
    }

    fn sge(&self, off: usize, len: usize) -> Sge {
        Sge {
            addr: self.region.as_ptr() as u64 + off as u64,
            len: len as u32,
            lkey: self.region_mr.map_or(0, |m| m.lkey),
        }
    }

    fn post_recv(&mut self, i: usize) -> Result<(), PostError> {
        let sge = self.sge(self.layout.recv(i), self.layout.recv_size);
        self.fabric.post_recv(self.qp, TAG_RECV | i as u64, sge)
    }

    /// Registers `len` bytes at `off` of the region for remote access.
    fn register(&mut self, off: usize, len: usize, acc: u32) -> io::Result<Mr> {
        let ptr = self.region[off..off + len].as_mut_ptr();
        // SAFETY: `off..off + len` lies in the region (the slice above is bounds checked),
        // which outlives every registration: this MR is deregistered when its RPC ends, on
        // disconnect, or in Drop, all before the mapping is unmapped. While it is
        // registered the client does not read or write these bytes (the slot is busy).
        let mr = unsafe { self.fabric.register(ptr, len, acc)? };
        self.live_mrs += 1;
        Ok(mr)
    }

    /// Invalidates and removes every chunk registration of slot `s` (R8166-57, 72, 84).
    fn release_mrs(&mut self, s: usize) {
        let slot = &mut self.slots[s];
        for mr in [
            slot.read_mr.take(),
            slot.write_mr.take(),
            slot.reply_mr.take(),
        ]
        .into_iter()
        .flatten()
        {
            self.fabric.deregister(&mr);
            self.live_mrs -= 1;
        }
    }

    fn free_slot(&mut self, s: usize) {
        self.slots[s].state = SlotState::Free;
        self.free.push(s as u16);
    }

    /// Sends one call (RFC 8166 §3.5).
    ///
    /// `call` is the encoded RPC call starting at its XID; the client overwrites the XID
    /// with its own and returns it. `shape` says what is DDP-eligible and how big the
    /// reply can be. Fails with [`SubmitError::Busy`] when no credit (R8166-25/27) or
    /// slot is free: poll first. The call is copied into its slot; chunk memory is
    /// registered for this RPC only; the Send is header + inline parts of the copy.
    pub fn submit(&mut self, call: &[u8], shape: &CallShape) -> Result<u32, SubmitError> {
        if !self.connected {
            return Err(SubmitError::Disconnected);
        }
        if !self.credits.can_send() {
            return Err(SubmitError::Busy);
        }
        if call.len() > self.layout.call_room
            || shape.write_chunk.unwrap_or(0) as usize > self.max_io
        {
            return Err(SubmitError::TooLarge);
        }
        if call.len() < 4 {
            return Err(SubmitError::Plan(PlanError::BadCall));
        }
        let Some(s) = self.free.pop().map(usize::from) else {
            return Err(SubmitError::Busy);
        };
        match self.send_in_slot(s, call, shape) {
            Ok(xid) => Ok(xid),
            Err(e) => {
                self.release_mrs(s);
                self.free_slot(s);
                Err(e)
            }
        }
    }

    fn send_in_slot(
        &mut self,
        s: usize,
        call: &[u8],
        shape: &CallShape,
    ) -> Result<u32, SubmitError> {
        let l = self.layout;
        let base = l.slot(s);
        let xid = self.next_xid(s);
        let call_at = base + l.call_off;
        {
            let dst = &mut self.region[call_at..call_at + call.len()];
            dst.copy_from_slice(call);
            dst[..4].copy_from_slice(&xid.to_be_bytes());
        }
        let plan = requester::plan(
            &self.region[call_at..call_at + call.len()],
            shape,
            &self.thresholds,
            &self.limits,
        )
        .map_err(SubmitError::Plan)?;
        if plan.reply_len as usize > l.reply_room {
            return Err(SubmitError::TooLarge);
        }
        let mut read = None;
        let mut write = None;
        let mut reply = None;
        if let Some(r) = &plan.read {
            let mr = self
                .register(
                    call_at + r.source.start,
                    r.source.len(),
                    access::REMOTE_READ,
                )
                .map_err(SubmitError::Register)?;
            self.slots[s].read_mr = Some(mr);
            read = Some(seg_of(&mr));
        }
        let rw = access::REMOTE_WRITE | access::LOCAL_WRITE;
        if plan.write_len > 0 {
            let mr = self
                .register(base + l.write_off, plan.write_len as usize, rw)
                .map_err(SubmitError::Register)?;
            self.slots[s].write_mr = Some(mr);
            write = Some(seg_of(&mr));
        }
        if plan.reply_len > 0 {
            let mr = self
                .register(base + l.reply_off, plan.reply_len as usize, rw)
                .map_err(SubmitError::Register)?;
            self.slots[s].reply_mr = Some(mr);
            reply = Some(seg_of(&mr));
        }
        let segs = ChunkSegments {
            read: read.as_slice(),
            write: write.as_slice(),
            reply: reply.as_slice(),
        };
        let hlen = requester::encode_header(
            &plan,
            self.credits.requested(),
            &segs,
            &mut self.enc,
            &mut self.region[base..base + HDR_ROOM],
        )
        .map_err(SubmitError::Plan)?;
        let [a, b] = plan.inline_ranges();
        let mut sges = [self.sge(base, hlen); 3];
        let mut n = 1;
        for r in [a, b] {
            if !r.is_empty() {
                sges[n] = self.sge(call_at + r.start, r.len());
                n += 1;
            }
        }
        let wr = SendWr {
            wr_id: TAG_SEND | s as u64,
            op: Op::Send,
            sges: &sges[..n],
            signaled: true,
        };
        self.fabric
            .post_send(self.qp, &[wr])
            .map_err(SubmitError::Post)?;
        let took = self.credits.on_send();
        debug_assert!(took, "credit checked before");
        let slot = &mut self.slots[s];
        slot.state = SlotState::Pending;
        slot.xid = xid;
        slot.send_done = false;
        slot.result = shape.result;
        let st = &mut self.stats;
        match plan.class {
            CallClass::Short => st.short_calls += 1,
            CallClass::Chunked => st.chunked_calls += 1,
            CallClass::Long => st.long_calls += 1,
        }
        st.write_chunks += (plan.write_len > 0) as u64;
        st.reply_chunks += (plan.reply_len > 0) as u64;
        Ok(xid)
    }

    /// Gives up on a pending call (after a timeout, say): nothing of it will be
    /// delivered. Its credit stays taken and its chunk registrations stay in place until
    /// its reply (or RDMA_ERROR) arrives or the connection goes, and are invalidated
    /// then (R8166-72): the registered memory belongs to the slot, is never handed to
    /// the caller and is not reused before that, while invalidating early would turn a
    /// late RDMA Write or Send-With-Invalidate from the responder into a connection
    /// loss. To give up on a hung responder altogether, [`RdmaClient::disconnect`].
    /// Returns whether `xid` was pending.
    pub fn abandon(&mut self, xid: u32) -> bool {
        match self.lookup(xid) {
            Some(s) if self.slots[s].state == SlotState::Pending => {
                self.slots[s].state = SlotState::Abandoned;
                true
            }
            _ => false,
        }
    }

    /// Tears the connection down: every pending call fails with
    /// [`RpcRdmaError::Disconnected`] at the next [`RdmaClient::poll`].
    pub fn disconnect(&mut self) {
        if self.connected {
            self.fabric.disconnect(self.qp);
            self.on_disconnect();
        }
    }

    /// Connection lost: invalidate everything, fail pending calls (delivered by
    /// `poll`), never repost.
    fn on_disconnect(&mut self) {
        if !self.connected {
            return;
        }
        self.connected = false;
        for s in 0..self.slots.len() {
            self.release_mrs(s);
            if self.slots[s].state == SlotState::Pending {
                self.failed.push(self.slots[s].xid);
            }
            self.slots[s].state = SlotState::Free;
        }
        self.free.clear();
        self.credits.reset();
        for cb in &mut self.cbs {
            cb.state = CbState::Free;
        }
        self.cb_queue.clear();
    }

    /// Processes completions and connection events and delivers finished calls to
    /// `on_reply(xid, result)`: the rebuilt RPC reply (valid only during the callback)
    /// or why the call failed. Returns how many calls finished; `Err(NotConnected)` once
    /// the connection is gone and everything has been delivered.
    pub fn poll(&mut self, on_reply: &mut OnReply) -> io::Result<usize> {
        let was_connected = self.connected;
        let mut done = 0;
        while let Some(ev) = self.fabric.poll_cm() {
            if let CmEvent::Disconnected { qp } = ev {
                if qp == self.qp {
                    self.on_disconnect();
                }
            }
        }
        loop {
            let n = self.fabric.poll_cq(&mut self.cqe);
            for i in 0..n {
                let c = self.cqe[i];
                if c.qp != self.qp {
                    continue;
                }
                done += self.on_completion(c, on_reply);
            }
            if n < CQ_BATCH {
                break;
            }
        }
        for xid in self.failed.drain(..) {
            on_reply(xid, Err(RpcRdmaError::Disconnected));
            done += 1;
        }
        if done == 0 && !was_connected && !self.connected {
            return Err(io::ErrorKind::NotConnected.into());
        }
        Ok(done)
    }

    fn on_completion(&mut self, c: Completion, on_reply: &mut OnReply) -> usize {
        if c.status != WcStatus::Success {
            // Flushes after a disconnect, or the error that breaks the connection.
            if self.connected {
                self.fabric.disconnect(self.qp);
                self.on_disconnect();
            }
            return 0;
        }
        let idx = (c.wr_id & 0xffff_ffff) as usize;
        match (c.wr_id & !0xffff_ffff, c.opcode) {
            (TAG_SEND, _) if idx < self.slots.len() => {
                let slot = &mut self.slots[idx];
                slot.send_done = true;
                if slot.state == SlotState::Answered {
                    self.free_slot(idx);
                }
                0
            }
            (TAG_CB_SEND, _) if idx < self.cbs.len() => {
                self.cbs[idx].state = CbState::Free;
                0
            }
            (TAG_RECV, WcOpcode::Recv) if idx < self.layout.nrecv => {
                let n = self.on_recv(idx, c, on_reply);
                if self.connected && self.post_recv(idx).is_err() {
                    self.fabric.disconnect(self.qp);
                    self.on_disconnect();
                }
                n
            }
            _ => 0,
        }
    }

    /// One received message (RFC 8166 §4.5, requester side).
    fn on_recv(&mut self, idx: usize, c: Completion, on_reply: &mut OnReply) -> usize {
        let l = self.layout;
        let at = l.recv(idx);
        let len = (c.byte_len as usize).min(l.recv_size);
        let received = requester::classify(&self.region[at..at + len], &self.limits, &mut self.dec);
        let (xid, credit) = match received {
            Received::Discard(_) => {
                self.stats.discarded += 1;
                return 0;
            }
            Received::Error { xid, credit, .. } => (xid, credit),
            Received::Reply(h) => (h.xid, h.credit),
            Received::Callback(cb) => {
                self.on_callback(at, len, cb);
                return 0;
            }
        };
        let Some(s) = self.lookup(xid) else {
            // Its grant is ignored too: nothing says it is ours (R8167-04).
            self.stats.unknown_xid += 1;
            return 0;
        };
        if let Some(rkey) = c.invalidated {
            let slot = &self.slots[s];
            let ours = [slot.read_mr, slot.write_mr, slot.reply_mr]
                .iter()
                .flatten()
                .any(|m| m.rkey == rkey);
            if ours {
                self.stats.remote_invalidations += 1;
            } else {
                self.stats.foreign_invalidations += 1;
            }
        }
        // Invalidate before anything of the reply is looked at (R8166-72).
        let write_seg = self.slots[s].write_mr.map(|m| seg_of(&m));
        let reply_seg = self.slots[s].reply_mr.map(|m| seg_of(&m));
        self.release_mrs(s);
        self.credits.on_reply(credit);
        let abandoned = self.slots[s].state == SlotState::Abandoned;
        self.slots[s].state = SlotState::Answered;
        let result = self.slots[s].result;
        if self.slots[s].send_done {
            self.free_slot(s);
        }
        if abandoned {
            self.stats.orphaned += 1;
            return 0;
        }
        let hdr = match received {
            Received::Error { err, .. } => {
                self.stats.rdma_errors += 1;
                let e = match err {
                    ErrBody::Chunk => RpcRdmaError::Chunk,
                    ErrBody::Vers { low, high } => RpcRdmaError::Vers { low, high },
                };
                on_reply(xid, Err(e));
                return 1;
            }
            Received::Reply(h) => h,
            Received::Discard(_) | Received::Callback(_) => return 0,
        };
        let offered = Offered {
            write: write_seg.as_ref().map(std::slice::from_ref),
            reply: reply_seg.as_ref().map(std::slice::from_ref),
            result,
        };
        let (rx, slots) = self.region.split_at_mut(l.slots_base);
        let msg = &rx[at..at + len];
        let slot_mem = &mut slots[s * l.slot_size..(s + 1) * l.slot_size];
        match deliver(&l, &hdr, &self.dec, msg, &offered, slot_mem) {
            Ok(bytes) => {
                self.stats.replies += 1;
                on_reply(xid, Ok(bytes));
            }
            Err(e) => {
                self.stats.bad_replies += 1;
                on_reply(xid, Err(e));
            }
        }
        1
    }

    /// Sends one call and waits for its reply (polling, up to `timeout`). Replies to
    /// other calls submitted earlier that arrive meanwhile are consumed and dropped
    /// (counted as orphaned): do not mix with pipelined `submit`/`poll` use. A call that
    /// times out is abandoned ([`RdmaClient::abandon`]).
    pub fn call(
        &mut self,
        call: &[u8],
        shape: &CallShape,
        timeout: Duration,
    ) -> Result<Vec<u8>, CallError> {
        let deadline = Instant::now() + timeout;
        let mut orphans = 0u64;
        let xid = loop {
            match self.submit(call, shape) {
                Ok(x) => break x,
                Err(SubmitError::Busy) => {
                    self.poll(&mut |_, _| orphans += 1).map_err(CallError::Io)?;
                    if Instant::now() >= deadline {
                        self.stats.orphaned += orphans;
                        return Err(CallError::Submit(SubmitError::Busy));
                    }
                    std::thread::yield_now();
                }
                Err(e) => return Err(CallError::Submit(e)),
            }
        };
        let mut out: Option<Result<Vec<u8>, RpcRdmaError>> = None;
        loop {
            let r = self.poll(&mut |x, r| {
                if x == xid {
                    out = Some(r.map(<[u8]>::to_vec));
                } else {
                    orphans += 1;
                }
            });
            if let Some(res) = out.take() {
                self.stats.orphaned += orphans;
                return res.map_err(CallError::Rpc);
            }
            if let Err(e) = r {
                self.stats.orphaned += orphans;
                return Err(CallError::Io(e));
            }
            if Instant::now() >= deadline {
                self.stats.orphaned += orphans;
                self.abandon(xid);
                return Err(CallError::Rpc(RpcRdmaError::TimedOut));
            }
            std::thread::yield_now();
        }
    }
}

impl Drop for RdmaClient {
    fn drop(&mut self) {
        for s in 0..self.slots.len() {
            self.release_mrs(s);
        }
        if self.has_qp {
            // Disconnects if still up and flushes the posted Receives.
            self.fabric.release(self.qp);
        }
        if let Some(mr) = self.region_mr.take() {
            self.fabric.deregister(&mr);
        }
    }
}

fn seg_of(mr: &Mr) -> Segment {
    Segment {
        handle: mr.rkey,
        length: mr.len as u32,
        offset: mr.addr,
    }
}

fn initial_seq() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (t ^ (t >> 29)) as u32
}

/// Validates a reply (registrations already gone) and rebuilds it, in place where the
/// layout allows: see the module docs. `slot` is the slot's memory.
fn deliver<'a>(
    l: &Layout,
    hdr: &ReplyHeader,
    chunks: &Chunks,
    msg: &'a [u8],
    offered: &Offered,
    slot: &'a mut [u8],
) -> Result<&'a [u8], RpcRdmaError> {
    let reply_area = &slot[l.reply_off..l.reply_off + l.reply_room];
    let layout: ReplyLayout = requester::check_reply(hdr, chunks, msg, offered, reply_area)?;
    let Some(sp) = layout.splice else {
        return Ok(match layout.payload {
            PayloadAt::Inline(r) => &msg[r],
            PayloadAt::ReplyChunk(n) => &slot[l.reply_off..l.reply_off + n],
        });
    };
    let reduced_len = layout.reduced_len();
    let tail_len = reduced_len - sp.at;
    let w0 = l.write_off;
    let data_end = w0 + padded(sp.len);
    // The checks in `check_reply` bound these by the offered sizes; a broken layout is
    // a failed call, never a panic.
    if sp.at > l.reply_room || sp.len > l.write_room || data_end + tail_len > slot.len() {
        return Err(RpcRdmaError::LengthMismatch);
    }
    // Tail first: for a Long reply its source is in the reply area, which the prefix
    // move below may overwrite.
    match &layout.payload {
        PayloadAt::Inline(r) => {
            slot[data_end..data_end + tail_len].copy_from_slice(&msg[r.start + sp.at..r.end]);
        }
        PayloadAt::ReplyChunk(_) => {
            let src = l.reply_off + sp.at;
            slot.copy_within(src..src + tail_len, data_end);
        }
    }
    slot[w0 + sp.len..data_end].fill(0);
    match &layout.payload {
        PayloadAt::Inline(r) => {
            slot[w0 - sp.at..w0].copy_from_slice(&msg[r.start..r.start + sp.at]);
        }
        PayloadAt::ReplyChunk(_) => {
            slot.copy_within(l.reply_off..l.reply_off + sp.at, w0 - sp.at);
        }
    }
    Ok(&slot[w0 - sp.at..data_end + tail_len])
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
