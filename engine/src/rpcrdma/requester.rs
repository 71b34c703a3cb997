//! The requester (client) side of RPC-over-RDMA version 1 as a sans-IO core: credit
//! accounting, call building (Short / Chunked / Long) and reply validation and
//! reassembly. No fabric and no I/O: bytes and the caller's memory descriptions in,
//! headers, gather lists and reassembly instructions out. `crate::rdma::client` drives
//! it over a `crate::fabric::Fabric`.
//!
//! # Flow of one RPC
//! 1. [`Credits::can_send`] (R8166-25/27).
//! 2. [`plan`] decides the message class and what memory must be registered: the read
//!    chunk source (a range of the call), the write chunk and the reply chunk sizes
//!    (RFC 8166 §3.5).
//! 3. The caller registers those areas and hands their [`Segment`]s to
//!    [`encode_header`], then posts one Send gathering the header and
//!    [`CallPlan::inline_parts`] (slices of the call, no copy), then
//!    [`Credits::on_send`].
//! 4. Every received message goes through [`classify`]; messages that are not a
//!    usable reply, RDMA_ERROR or callback are [`Received::Discard`]ed without any
//!    answer (RFC 8166 §4.5: a requester never sends RDMA_ERROR for a reply,
//!    R8166-15). A [`Received::Callback`] (RFC 8167 reverse call, docs/architecture.md §9 rule 5) is the
//!    caller's to accept or answer with ERR_CHUNK (R8167-15).
//! 5. A reply whose XID is pending goes through [`check_reply`] (after the caller has
//!    invalidated the call's registrations, R8166-72) which validates the echoed chunks
//!    against what the call [`Offered`] and returns a [`ReplyLayout`]; [`assemble`]
//!    (or the caller, in place) rebuilds the RPC reply. [`Credits::on_reply`] takes the
//!    grant.
//!
//! # Reply reassembly assumptions
//! A call offers at most one write chunk, for one DDP-eligible result item (enough for
//! NFSv3 READ / READLINK and for an NFSv4 COMPOUND with one READ-class op). Where the
//! item sits in the reply is said by [`ResultAt`]:
//! - [`ResultAt::Last`] (default): the item is the last XDR item of the reply (NFSv3
//!   READ3resok.data, READLINK3resok.data). When the echoed write chunk carries data,
//!   the reduced payload must end with the item's length word and that word must equal
//!   the bytes written (else [`RpcRdmaError::LengthMismatch`], R8166-54/60); the data
//!   and its XDR pad are appended. When the chunk comes back unused nothing can be
//!   checked without the ULP (R8166-61 needs [`ResultAt::Locate`]).
//! - [`ResultAt::Locate`]: a ULP function finds the item's length word in the reduced
//!   reply (or says the reply's union arm carries no item). Then data written although
//!   no item exists fails with [`RpcRdmaError::NotEligible`] (R8166-60), an item inline
//!   although a non-empty write chunk was offered fails with
//!   [`RpcRdmaError::InlineDespiteChunk`] (R8166-61), and the data is spliced right
//!   after the length word, with whatever follows the item moved behind data and pad.
//!
//! The write chunk's data is taken contiguously from the start of the caller's write
//! buffer: the segments the caller registered must be consecutive pieces of that buffer
//! in list order, and the responder must fill segment 0 first (RFC 8166 §3.4.6); an
//! echo whose lengths leave a hole fails the RPC. A Long call puts the whole, unreduced
//! call in the Position-Zero Read chunk (no extra read chunks inside a Long call).

use std::ops::Range;

use super::privdata::Thresholds;
use super::wire::{
    self, chunk_len, Chunks, DecodeError, ErrBody, Fixed, Header, Limits, ReadSegment, Segment,
};
use crate::rpc::{MSG_CALL, MSG_REPLY};
use crate::xdr::{pad_len, padded, XdrWriter};

/// Most credits a requester asks for (and so the largest grant it honours).
pub const MAX_CREDITS: u32 = 1024;
/// Segments per chunk a requester emits: the limit every server must accept
/// (RFC 8267 §6.4.2, R8267-23).
pub const MAX_SEGMENTS: usize = 16;
/// Fixed words plus three empty chunk lists.
const EMPTY_HEADER: usize = wire::MIN_HEADER;
/// Bytes one read segment adds to a header (`1 P H L OO`).
const READ_SEG_BYTES: usize = 24;

fn word(b: &[u8], at: usize) -> Option<u32> {
    let w = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

// ---------------------------------------------------------------------------------
// Credits
// ---------------------------------------------------------------------------------

/// Forward-channel credit accounting of one connection (RFC 8166 §3.3.1, §3.3.3).
///
/// Calls in flight never exceed [`Credits::limit`] = min(requested, latest grant)
/// (R8166-25); before the first valid reply the limit is one (R8166-27); a grant is
/// clamped to `[1, requested]` so a grant of 0 cannot deadlock and a wild value cannot
/// overrun our receive buffers (R8166-31); a lowered grant applies from the next send
/// (R8166-26). Only replies matched to a pending call carry a usable grant: the caller
/// must not feed grants of discarded messages (R8167-04).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Credits {
    requested: u32,
    grant: Option<u32>,
    in_flight: u32,
}

impl Credits {
    /// A fresh connection asking for `requested` credits (clamped to
    /// `[1, MAX_CREDITS]`); one call may be sent until a reply arrives (R8166-27).
    pub fn new(requested: u32) -> Credits {
        Credits {
            requested: requested.clamp(1, MAX_CREDITS),
            grant: None,
            in_flight: 0,
        }
    }

    /// The value for `rdma_credit` in our calls (RFC 8166 §3.3.1).
    pub fn requested(&self) -> u32 {
        self.requested
    }

    /// The latest (clamped) grant, `None` before the first valid reply.
    pub fn grant(&self) -> Option<u32> {
        self.grant
    }

    /// Calls that may be outstanding now: 1 before the first reply (R8166-27), then
    /// min(requested, latest grant) (R8166-25).
    pub fn limit(&self) -> u32 {
        match self.grant {
            None => 1,
            Some(g) => g.min(self.requested),
        }
    }

    /// Calls sent and not yet answered.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Whether one more call may be sent (R8166-25).
    pub fn can_send(&self) -> bool {
        self.in_flight < self.limit()
    }

    /// Accounts one sent call. Returns `false`, changing nothing, when no credit is
    /// available: the caller must not send (R8166-25).
    pub fn on_send(&mut self) -> bool {
        if !self.can_send() {
            return false;
        }
        self.in_flight += 1;
        true
    }

    /// Accounts the reply (or RDMA_ERROR) to one pending call carrying `grant`: one call
    /// fewer in flight, and the grant, clamped to `[1, requested]`, becomes the latest
    /// (R8166-26, 31). Lowering below the calls in flight is fine: no new call goes out
    /// until enough replies came back.
    pub fn on_reply(&mut self, grant: u32) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.grant = Some(grant.clamp(1, self.requested));
    }

    /// A call that will never be answered on this connection stops counting (only for
    /// connection loss; an abandoned call keeps its credit until its reply arrives).
    pub fn forget(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// Connection (re-)established: back to one credit and nothing in flight
    /// (RFC 8166 §3.3.3).
    pub fn reset(&mut self) {
        self.grant = None;
        self.in_flight = 0;
    }
}

// ---------------------------------------------------------------------------------
// Call building
// ---------------------------------------------------------------------------------

/// Where the DDP-eligible result item sits in a (reduced) reply. See the module docs.
#[derive(Debug, Clone, Copy, Default)]
pub enum ResultAt {
    /// The item is the last XDR item of the reply (NFSv3 READ and READLINK).
    #[default]
    Last,
    /// ULP parser: given the reduced RPC reply (starting at its XID), the offset of the
    /// item's length word, or `None` when the reply's union arm carries no item (an
    /// error status, say). Must not panic on any input.
    Locate(fn(&[u8]) -> Option<usize>),
}

/// What the ULP knows about one call, for [`plan`] (RFC 8166 §3.5, RFC 8267 §3–4).
#[derive(Debug, Clone, Default)]
pub struct CallShape {
    /// Byte range in the call of a DDP-eligible argument's data: after its 4-byte
    /// length word (which must equal the range length), its XDR pad follows it in the
    /// call. `None` (or an empty range): nothing may be reduced.
    pub reduce: Option<Range<usize>>,
    /// Largest DDP-eligible result in bytes (e.g. NFSv3 READ `count`), without pad room
    /// (R8166-62). `None` or `Some(0)`: no write chunk, results come inline.
    pub write_chunk: Option<u32>,
    /// Largest possible whole RPC reply (header, verifier, results with the eligible
    /// item inline and padded), per the ULB (RFC 8267 §3). Each union arm without the
    /// item must fit in `max_reply - padded(write_chunk)`.
    pub max_reply: usize,
    /// Where the eligible result item is in the reply.
    pub result: ResultAt,
}

impl CallShape {
    /// A call with nothing DDP-eligible whose reply is at most `max_reply` bytes.
    pub fn new(max_reply: usize) -> CallShape {
        CallShape {
            max_reply,
            ..CallShape::default()
        }
    }

    /// Marks `data` (bytes after a length word) as the reducible argument.
    pub fn with_reduce(mut self, data: Range<usize>) -> CallShape {
        self.reduce = Some(data);
        self
    }

    /// Asks for a write chunk of `max_item` bytes for the eligible result.
    pub fn with_write_chunk(mut self, max_item: u32) -> CallShape {
        self.write_chunk = Some(max_item);
        self
    }

    /// Says where the eligible result is.
    pub fn with_result(mut self, at: ResultAt) -> CallShape {
        self.result = at;
        self
    }
}

/// Message size classes (RFC 8166 §3.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallClass {
    /// RDMA_MSG with the whole call inline.
    Short,
    /// RDMA_MSG with the eligible argument reduced into a read chunk.
    Chunked,
    /// RDMA_NOMSG with the whole call in a Position-Zero Read chunk.
    Long,
}

/// The read chunk of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadChunkPlan {
    /// Offset of the item in the unreduced payload, a multiple of 4 (R8166-46); 0 for
    /// the PZRC (R8166-37).
    pub position: u32,
    /// Bytes of the call the responder pulls: the item without its pad (R8166-51) or,
    /// for a Long call, the whole call (a complete XDR stream, R8166-40). The caller
    /// registers exactly these bytes for REMOTE_READ.
    pub source: Range<usize>,
}

/// What [`plan`] decided for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallPlan {
    /// The XID (word 0 of the call), also `rdma_xid` (R8166-02).
    pub xid: u32,
    pub class: CallClass,
    /// The read chunk (Chunked) or PZRC (Long).
    pub read: Option<ReadChunkPlan>,
    /// Bytes of the write chunk to register for REMOTE_WRITE (0: none).
    pub write_len: u32,
    /// Bytes of the reply chunk to register for REMOTE_WRITE (0: none).
    pub reply_len: u32,
    inline: [Range<usize>; 2],
    send_limit: usize,
    header_len: usize,
}

/// Why a call cannot be planned or its header encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanError {
    /// The call is shorter than an XID or not a whole number of XDR words (R8166-40).
    BadCall,
    /// `reduce` is not 4-aligned, runs past the call, or is not preceded by a length
    /// word equal to its length (R8166-54).
    BadReduce,
    /// A chunk exceeds the size limit, or even the Long-call header does not fit the
    /// call threshold.
    TooLarge,
    /// The segments given to [`encode_header`] do not match the plan (missing, extra,
    /// wrong total length, or more than [`MAX_SEGMENTS`]); or with them the Send would
    /// exceed the call threshold.
    Segments,
    /// The header output buffer is too small.
    HeaderBuffer,
}

impl std::fmt::Display for PlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            PlanError::BadCall => "RPC call is not a whole XDR message",
            PlanError::BadReduce => "reducible range does not name an XDR opaque's data",
            PlanError::TooLarge => "call or chunk exceeds the transport limits",
            PlanError::Segments => "segments do not match the call plan",
            PlanError::HeaderBuffer => "header buffer too small",
        };
        f.write_str(s)
    }
}

impl std::error::Error for PlanError {}

/// Header bytes of a write list with one one-segment chunk (or none).
fn write_list_bytes(present: bool) -> usize {
    if present {
        8 + 16
    } else {
        0
    }
}

/// Decides how one call goes on the wire (RFC 8166 §3.5.2–3.5.3, §4.3).
///
/// - Write chunk: present iff `shape.write_chunk` is non-zero, sized exactly to the
///   largest result, no pad room (R8166-62).
/// - Reply chunk: present iff the reply header (with the echoed write chunk) plus the
///   largest reduced reply can exceed the reply threshold, sized to that reduced reply
///   rounded up to XDR words (R8166-41).
/// - Class: Short when header + call fit the call threshold; else Chunked when the
///   reducible argument, reduced, makes it fit (position = its offset in the unreduced
///   payload, R8166-46; chunk length without pad, R8166-51; item and pad removed from
///   the inline payload, R8166-53; its length word stays inline, R8166-54); else Long:
///   RDMA_NOMSG with the whole call in a Position-Zero Read chunk (R8166-36/37).
///
/// Header sizes assume one segment per chunk (one registration per area); the
/// [`encode_header`] check catches callers that use more.
pub fn plan(
    call: &[u8],
    shape: &CallShape,
    t: &Thresholds,
    limits: &Limits,
) -> Result<CallPlan, PlanError> {
    if call.len() < 4 || !call.len().is_multiple_of(4) || call.len() > u32::MAX as usize {
        return Err(PlanError::BadCall);
    }
    let xid = word(call, 0).ok_or(PlanError::BadCall)?;
    let reduce = match &shape.reduce {
        Some(r) if !r.is_empty() => {
            let ok = r.start >= 4
                && r.start.is_multiple_of(4)
                && r.end <= call.len()
                && padded(r.end) <= call.len()
                && word(call, r.start - 4) == Some((r.end - r.start) as u32);
            if !ok {
                return Err(PlanError::BadReduce);
            }
            Some(r.clone())
        }
        Some(r) if r.start > call.len() => return Err(PlanError::BadReduce),
        _ => None,
    };
    let max_chunk = limits.max_chunk_bytes;
    let write_len = shape.write_chunk.unwrap_or(0);
    if write_len as u64 > max_chunk {
        return Err(PlanError::TooLarge);
    }
    let wlist = write_list_bytes(write_len > 0);
    // Largest reply with the eligible item (and its pad) reduced away.
    let reduced_reply = shape.max_reply.saturating_sub(padded(write_len as usize));
    let reply_len = if EMPTY_HEADER + wlist + reduced_reply > t.recv {
        let n = padded(reduced_reply);
        if n as u64 > max_chunk {
            return Err(PlanError::TooLarge);
        }
        n
    } else {
        0
    };
    let rchunk = if reply_len > 0 { 8 + 16 } else { 0 };
    let base = EMPTY_HEADER + wlist + rchunk;
    let send = t.send;
    let (class, read, inline, header_len) = if base + call.len() <= send {
        (CallClass::Short, None, [0..call.len(), 0..0], base)
    } else if let Some(r) = reduce.filter(|r| {
        base + READ_SEG_BYTES + call.len() - padded(r.end) + r.start <= send
            && (r.len() as u64) <= max_chunk
    }) {
        let inline = [0..r.start, padded(r.end)..call.len()];
        let read = ReadChunkPlan {
            position: r.start as u32,
            source: r,
        };
        (
            CallClass::Chunked,
            Some(read),
            inline,
            base + READ_SEG_BYTES,
        )
    } else {
        if base + READ_SEG_BYTES > send || call.len() as u64 > max_chunk {
            return Err(PlanError::TooLarge);
        }
        let read = ReadChunkPlan {
            position: 0,
            source: 0..call.len(),
        };
        (
            CallClass::Long,
            Some(read),
            [0..0, 0..0],
            base + READ_SEG_BYTES,
        )
    };
    Ok(CallPlan {
        xid,
        class,
        read,
        write_len,
        reply_len: reply_len as u32,
        inline,
        send_limit: send,
        header_len,
    })
}

impl CallPlan {
    /// The inline payload as slices of the call, in order, to gather after the header
    /// (no copy). Empty slices are to be skipped: Short → `[call, []]`, Chunked →
    /// `[before the item, after its pad]` (R8166-53), Long → `[[], []]`.
    pub fn inline_parts<'a>(&self, call: &'a [u8]) -> [&'a [u8]; 2] {
        [&call[self.inline[0].clone()], &call[self.inline[1].clone()]]
    }

    /// The same as [`CallPlan::inline_parts`], as byte ranges of the call.
    pub fn inline_ranges(&self) -> [Range<usize>; 2] {
        self.inline.clone()
    }

    /// Bytes of inline payload.
    pub fn inline_len(&self) -> usize {
        self.inline[0].len() + self.inline[1].len()
    }

    /// Header bytes with one segment per chunk.
    pub fn header_len(&self) -> usize {
        self.header_len
    }

    /// Bytes of the Send (header with one segment per chunk plus inline payload); never
    /// more than the call threshold.
    pub fn send_len(&self) -> usize {
        self.header_len + self.inline_len()
    }

    /// `rdma_proc` of the call: RDMA_NOMSG for Long, else RDMA_MSG. Never RDMA_MSGP,
    /// RDMA_DONE or RDMA_ERROR (R8166-15/19/22).
    pub fn proc_(&self) -> u32 {
        match self.class {
            CallClass::Long => wire::RDMA_NOMSG,
            _ => wire::RDMA_MSG,
        }
    }
}

/// The caller's registrations for a planned call: the segments of each chunk, in list
/// order, covering consecutive pieces of the area [`CallPlan`] named.
#[derive(Debug, Clone, Copy, Default)]
pub struct ChunkSegments<'a> {
    /// Read chunk / PZRC (positions are filled in from the plan).
    pub read: &'a [Segment],
    pub write: &'a [Segment],
    pub reply: &'a [Segment],
}

fn segs_match(segs: &[Segment], want: u64) -> bool {
    if want == 0 {
        segs.is_empty()
    } else {
        !segs.is_empty() && segs.len() <= MAX_SEGMENTS && chunk_len(segs) == want
    }
}

/// Encodes the call's transport header into `out` (RFC 8166 §4.2–4.3) and returns its
/// length; the Send is this header followed by [`CallPlan::inline_parts`].
///
/// `rdma_vers` = 1 (R8166-01), `rdma_xid` = the call's XID (R8166-02), `rdma_credit`
/// = `credits_requested`, `rdma_proc` = RDMA_MSG or RDMA_NOMSG only (R8166-15/19/22).
/// Every read segment carries the plan's position: one position per chunk (R8166-47),
/// 0 for a PZRC (R8166-37). Checks that the segments cover exactly the planned areas,
/// at most [`MAX_SEGMENTS`] each (R8267-23), and that the Send still fits the call
/// threshold. `scratch` is reusable storage (e.g. `Chunks::with_limits`): nothing is
/// allocated when its capacity suffices.
pub fn encode_header(
    plan: &CallPlan,
    credits_requested: u32,
    segs: &ChunkSegments,
    scratch: &mut Chunks,
    out: &mut [u8],
) -> Result<usize, PlanError> {
    let read_want = plan.read.as_ref().map_or(0, |r| r.source.len() as u64);
    if !segs_match(segs.read, read_want)
        || !segs_match(segs.write, plan.write_len as u64)
        || !segs_match(segs.reply, plan.reply_len as u64)
    {
        return Err(PlanError::Segments);
    }
    scratch.clear();
    if let Some(r) = &plan.read {
        for s in segs.read {
            scratch.reads.push(ReadSegment {
                position: r.position,
                seg: *s,
            });
        }
    }
    if !segs.write.is_empty() {
        scratch.push_write_chunk(segs.write);
    }
    if !segs.reply.is_empty() {
        scratch.set_reply_chunk(segs.reply);
    }
    if wire::FIXED_WORDS + scratch.encoded_len() + plan.inline_len() > plan.send_limit {
        return Err(PlanError::Segments);
    }
    let fixed = Fixed {
        xid: plan.xid,
        vers: wire::VERSION,
        credit: credits_requested,
        proc_: plan.proc_(),
    };
    wire::encode_msg(&mut XdrWriter::new(out), fixed, scratch).map_err(|_| PlanError::HeaderBuffer)
}

// ---------------------------------------------------------------------------------
// Replies
// ---------------------------------------------------------------------------------

/// Why a received message was dropped without any answer (RFC 8166 §4.5, §4.6; a
/// requester never answers a reply, R8166-15/16).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discard {
    /// Under 28 bytes and not an RDMA_ERROR, or under the 16 fixed bytes (R8166-05).
    Short,
    /// `rdma_vers` is not 1.
    Version,
    /// RDMA_MSGP or RDMA_DONE (R8166-21, 23).
    Obsolete,
    /// `rdma_proc` unknown.
    UnknownProc,
    /// Chunk lists truncated, over a limit or malformed, a read list in a reply, an
    /// RDMA_NOMSG without a Reply chunk, or an undecodable RDMA_ERROR body (R8166-16/17).
    Malformed,
    /// RDMA_MSG whose RPC XID differs from `rdma_xid`, or whose payload is too short.
    XidMismatch,
    /// RDMA_MSG whose RPC msg_type is neither CALL nor REPLY.
    NotAReply,
    /// No pending call has this XID (the caller's verdict).
    UnknownXid,
}

/// A received RDMA_MSG / RDMA_NOMSG that passed [`classify`]; its chunk lists are in
/// the caller's [`Chunks`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyHeader {
    pub xid: u32,
    /// The responder's grant (for [`Credits::on_reply`] once matched).
    pub credit: u32,
    /// RDMA_NOMSG: the payload is in the Reply chunk.
    pub nomsg: bool,
    /// Where the inline payload starts (RDMA_MSG).
    pub payload_at: usize,
}

/// A received reverse-direction call (RFC 8167 §4.1): the peer's
/// callback, matched against the callback table, never against forward XIDs
/// (R8167-01); its `rdma_credit` is the peer's requested reverse credit and never
/// touches forward credit state (R8167-02/04).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallbackHeader {
    pub xid: u32,
    pub vers: u32,
    pub credit: u32,
    /// Some chunk list is non-empty (or an RDMA_NOMSG carrying a Position-Zero Read
    /// chunk): a reverse responder without reverse-chunk support answers ERR_CHUNK
    /// (R8167-15).
    pub chunked: bool,
    /// Where the inline RPC call starts (RDMA_MSG).
    pub payload_at: usize,
}

/// What a received message is, before it is matched to a pending call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    Reply(ReplyHeader),
    /// A callback (reverse-direction RPC call, RFC 8167).
    Callback(CallbackHeader),
    /// A decodable RDMA_ERROR: the pending call with this XID completes with a permanent
    /// error (R8166-18); unknown XIDs are dropped.
    Error {
        xid: u32,
        credit: u32,
        err: ErrBody,
    },
    Discard(Discard),
}

/// First look at a received message (RFC 8166 §4.5, §4.6; an RDMA_ERROR is accepted
/// from its 20-byte ERR_CHUNK form, below the 28-byte floor of other messages). Never
/// panics; never asks for an answer to be sent.
///
/// - fewer than 28 bytes and not an RDMA_ERROR → discard (R8166-05); an ERR_CHUNK needs
///   its 20 bytes, an ERR_VERS its 28;
/// - RDMA_ERROR with an undecodable body → discard (R8166-17); else [`Received::Error`];
/// - `rdma_vers` ≠ 1, RDMA_MSGP, RDMA_DONE, unknown procs → discard (R8166-21/23);
/// - malformed chunk lists, a non-empty read list (replies never carry one, R8166-45),
///   RDMA_NOMSG without a Reply chunk, RDMA_MSG whose payload XID differs or which is
///   not an RPC reply → discard (R8166-16).
pub fn classify(msg: &[u8], limits: &Limits, chunks: &mut Chunks) -> Received {
    chunks.clear();
    let proc_ = word(msg, 12);
    if msg.len() < wire::MIN_HEADER && proc_ != Some(wire::RDMA_ERROR) {
        return Received::Discard(Discard::Short);
    }
    match wire::decode(msg, limits, chunks) {
        Err(DecodeError::Short) => Received::Discard(Discard::Short),
        Err(DecodeError::Version(_)) => Received::Discard(Discard::Version),
        Err(DecodeError::Proc(f)) if f.proc_ == wire::RDMA_MSGP || f.proc_ == wire::RDMA_DONE => {
            Received::Discard(Discard::Obsolete)
        }
        Err(DecodeError::Proc(_)) => Received::Discard(Discard::UnknownProc),
        Err(DecodeError::Chunks(_)) => Received::Discard(Discard::Malformed),
        Ok(Header::Error { fixed, err }) => {
            if fixed.vers != wire::VERSION {
                // We only ever send version 1, so a legitimate error echoes 1.
                return Received::Discard(Discard::Version);
            }
            Received::Error {
                xid: fixed.xid,
                credit: fixed.credit,
                err,
            }
        }
        Ok(Header::Msg { fixed, payload_at }) => {
            let nomsg = fixed.proc_ == wire::RDMA_NOMSG;
            // Direction (RFC 8167 §2, docs/architecture.md §9 rule 5): an RDMA_MSG whose RPC msg_type is CALL with
            // xid == rdma_xid is a callback; so is an RDMA_NOMSG with a read list
            // (a Long callback: replies never carry read lists).
            let p = msg.get(payload_at..).unwrap_or(&[]);
            let is_call = if nomsg {
                !chunks.reads.is_empty()
            } else {
                word(p, 0) == Some(fixed.xid) && word(p, 4) == Some(MSG_CALL)
            };
            if is_call {
                return Received::Callback(CallbackHeader {
                    xid: fixed.xid,
                    vers: fixed.vers,
                    credit: fixed.credit,
                    chunked: !chunks.is_empty(),
                    payload_at,
                });
            }
            if !chunks.reads.is_empty() {
                return Received::Discard(Discard::Malformed);
            }
            if nomsg {
                if chunks.reply.is_none() {
                    return Received::Discard(Discard::Malformed);
                }
            } else {
                match (word(p, 0), word(p, 4)) {
                    (Some(x), Some(_)) if x != fixed.xid => {
                        return Received::Discard(Discard::XidMismatch)
                    }
                    (Some(_), Some(MSG_REPLY)) => {}
                    (Some(_), Some(_)) => return Received::Discard(Discard::NotAReply),
                    _ => return Received::Discard(Discard::XidMismatch),
                }
            }
            Received::Reply(ReplyHeader {
                xid: fixed.xid,
                credit: fixed.credit,
                nomsg,
                payload_at,
            })
        }
    }
}

/// The chunks a pending call advertised, as registered (handles, lengths, offsets).
#[derive(Debug, Clone, Copy, Default)]
pub struct Offered<'a> {
    pub write: Option<&'a [Segment]>,
    pub reply: Option<&'a [Segment]>,
    pub result: ResultAt,
}

/// A call that ended without a usable reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RpcRdmaError {
    /// The responder answered RDMA_ERROR / ERR_VERS (R8166-18).
    Vers { low: u32, high: u32 },
    /// The responder answered RDMA_ERROR / ERR_CHUNK (R8166-18, R8267-27).
    Chunk,
    /// The echoed write list differs from the one offered: other chunk count, handles
    /// or offsets, a length above the original, or a hole (RFC 8166 §3.4.6).
    WriteEcho,
    /// The echoed Reply chunk differs from the one offered, a Reply chunk came back
    /// although none was offered, or an RDMA_MSG also wrote data into the Reply chunk.
    ReplyEcho,
    /// RDMA_NOMSG although no Reply chunk was offered, or without its echo.
    NoReplyChunk,
    /// The Reply chunk content is not a whole RPC reply with this XID (R8166-40).
    BadReplyChunk,
    /// Data came in the write chunk although the reply has no eligible item there
    /// (R8166-60).
    NotEligible,
    /// The eligible result came inline although a non-empty write chunk was offered
    /// (R8166-61).
    InlineDespiteChunk,
    /// The item's length word differs from the bytes written (R8166-54, 60).
    LengthMismatch,
    /// The connection was lost before the reply (not permanent: the ULP may retransmit
    /// on a new connection, RFC 8166 §4.5.4).
    Disconnected,
    /// Abandoned by the caller after a timeout (its registrations are invalidated).
    TimedOut,
}

impl RpcRdmaError {
    /// Permanent errors must not be answered by resending the identical request
    /// (R8166-18): everything but connection loss and timeouts.
    pub fn is_permanent(&self) -> bool {
        !matches!(self, RpcRdmaError::Disconnected | RpcRdmaError::TimedOut)
    }
}

impl std::fmt::Display for RpcRdmaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RpcRdmaError::Vers { low, high } => {
                write!(f, "responder sent ERR_VERS (supports {low}..{high})")
            }
            RpcRdmaError::Chunk => f.write_str("responder sent ERR_CHUNK"),
            RpcRdmaError::WriteEcho => f.write_str("reply's write list does not echo ours"),
            RpcRdmaError::ReplyEcho => f.write_str("reply's Reply chunk does not echo ours"),
            RpcRdmaError::NoReplyChunk => f.write_str("RDMA_NOMSG reply without our Reply chunk"),
            RpcRdmaError::BadReplyChunk => f.write_str("Reply chunk holds no valid RPC reply"),
            RpcRdmaError::NotEligible => f.write_str("data in write chunk for no eligible item"),
            RpcRdmaError::InlineDespiteChunk => {
                f.write_str("eligible result inline although a write chunk was offered")
            }
            RpcRdmaError::LengthMismatch => {
                f.write_str("result length word differs from bytes written")
            }
            RpcRdmaError::Disconnected => f.write_str("connection lost"),
            RpcRdmaError::TimedOut => f.write_str("timed out"),
        }
    }
}

impl std::error::Error for RpcRdmaError {}

/// Where the reduced reply is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayloadAt {
    /// RDMA_MSG: this range of the received message.
    Inline(Range<usize>),
    /// RDMA_NOMSG: the first `n` bytes of the Reply chunk buffer.
    ReplyChunk(usize),
}

/// Data to insert from the write chunk buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Splice {
    /// Offset in the reduced reply right after the item's length word.
    pub at: usize,
    /// Bytes taken from the start of the write chunk buffer; `pad_len(len)` zero bytes
    /// follow them in the rebuilt reply.
    pub len: usize,
}

/// How to rebuild a validated reply: `reduced[..at] ++ write[..len] ++ pad ++
/// reduced[at..]`, or just `reduced` without a splice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyLayout {
    pub payload: PayloadAt,
    pub splice: Option<Splice>,
}

impl ReplyLayout {
    /// The reduced reply (the inline payload or the Reply chunk content).
    pub fn reduced<'a>(&self, msg: &'a [u8], reply_buf: &'a [u8]) -> &'a [u8] {
        match &self.payload {
            PayloadAt::Inline(r) => &msg[r.clone()],
            PayloadAt::ReplyChunk(n) => &reply_buf[..*n],
        }
    }

    /// Bytes of the reduced reply.
    pub fn reduced_len(&self) -> usize {
        match &self.payload {
            PayloadAt::Inline(r) => r.len(),
            PayloadAt::ReplyChunk(n) => *n,
        }
    }

    /// Bytes of the rebuilt RPC reply.
    pub fn total_len(&self) -> usize {
        self.reduced_len() + self.splice.map_or(0, |s| padded(s.len))
    }
}

/// Total of an echoed chunk checked against the offered one: same segment count,
/// handles and offsets, each length at most the original, data contiguous from segment
/// 0 (RFC 8166 §3.4.6, §4.3.2–4.3.3). An empty echo (count 0) means nothing was
/// written (RFC 8267 §6.4.1's "empty" chunk; docs/architecture.md §9 rule 3).
fn echo_total(offered: &[Segment], echo: &[Segment]) -> Option<usize> {
    if echo.is_empty() {
        return Some(0);
    }
    if echo.len() != offered.len() {
        return None;
    }
    let mut total = 0usize;
    let mut short = false;
    for (o, e) in offered.iter().zip(echo) {
        if e.handle != o.handle || e.offset != o.offset || e.length > o.length {
            return None;
        }
        if short && e.length != 0 {
            return None;
        }
        short = e.length < o.length;
        total += e.length as usize;
    }
    Some(total)
}

/// Validates a reply to a pending call against the chunks that call offered and says
/// how to rebuild the RPC reply (RFC 8166 §3.4.6, §3.5.3, §4.3.2–4.3.3, §6.1).
///
/// Call it only after the call's registrations are invalidated (R8166-72): it reads
/// `reply_buf`, the caller's Reply chunk memory (RDMA_NOMSG). Errors are permanent for
/// that RPC (never retransmitted): the write list must echo the offered write chunk
/// (count, handles, offsets kept; lengths ≤ the originals; contiguous), a Reply chunk
/// must echo the offered one, an RDMA_NOMSG needs it and reads its content (a whole
/// XDR reply with this XID, R8166-40), and the eligible item must agree with the data
/// written per [`ResultAt`] (R8166-54/60/61).
pub fn check_reply(
    hdr: &ReplyHeader,
    chunks: &Chunks,
    msg: &[u8],
    offered: &Offered,
    reply_buf: &[u8],
) -> Result<ReplyLayout, RpcRdmaError> {
    // Write list echo.
    let written = match offered.write {
        None => {
            if !chunks.write_chunks.is_empty() {
                return Err(RpcRdmaError::WriteEcho);
            }
            0
        }
        Some(off) => {
            if chunks.write_chunks.len() != 1 {
                return Err(RpcRdmaError::WriteEcho);
            }
            echo_total(off, chunks.write_chunk(0)).ok_or(RpcRdmaError::WriteEcho)?
        }
    };
    // Reply chunk echo.
    let in_reply_chunk = match (offered.reply, chunks.reply_chunk()) {
        (None, None) => 0,
        (None, Some(_)) => return Err(RpcRdmaError::ReplyEcho),
        // An RDMA_MSG that omits the echo is tolerated: the reply is inline anyway.
        (Some(_), None) => 0,
        (Some(off), Some(echo)) => echo_total(off, echo).ok_or(RpcRdmaError::ReplyEcho)?,
    };
    let payload = if hdr.nomsg {
        if offered.reply.is_none() || chunks.reply.is_none() {
            return Err(RpcRdmaError::NoReplyChunk);
        }
        let n = in_reply_chunk;
        let p = reply_buf.get(..n).ok_or(RpcRdmaError::BadReplyChunk)?;
        if n < 8
            || !n.is_multiple_of(4)
            || word(p, 0) != Some(hdr.xid)
            || word(p, 4) != Some(MSG_REPLY)
        {
            return Err(RpcRdmaError::BadReplyChunk);
        }
        PayloadAt::ReplyChunk(n)
    } else {
        if in_reply_chunk != 0 {
            return Err(RpcRdmaError::ReplyEcho);
        }
        if hdr.payload_at > msg.len() {
            return Err(RpcRdmaError::BadReplyChunk);
        }
        PayloadAt::Inline(hdr.payload_at..msg.len())
    };
    let mut layout = ReplyLayout {
        payload,
        splice: None,
    };
    let reduced = layout.reduced(msg, reply_buf);
    let item_offered = offered.write.is_some_and(|s| chunk_len(s) > 0);
    let splice_at = match offered.result {
        ResultAt::Last => {
            if written == 0 {
                None
            } else {
                let at = reduced.len();
                let lw = at.checked_sub(4).and_then(|o| word(reduced, o));
                if lw != Some(written as u32) {
                    return Err(RpcRdmaError::LengthMismatch);
                }
                Some(at)
            }
        }
        ResultAt::Locate(f) => match f(reduced) {
            None if written > 0 => return Err(RpcRdmaError::NotEligible),
            None => None,
            Some(off) => {
                let lw = if off.is_multiple_of(4) {
                    word(reduced, off)
                } else {
                    None
                };
                let Some(lw) = lw else {
                    return Err(RpcRdmaError::NotEligible);
                };
                if !item_offered {
                    // Result inline as asked (no or an empty write chunk).
                    None
                } else if lw as usize == written {
                    (written > 0).then_some(off + 4)
                } else if written == 0 {
                    return Err(RpcRdmaError::InlineDespiteChunk);
                } else {
                    return Err(RpcRdmaError::LengthMismatch);
                }
            }
        },
    };
    layout.splice = splice_at.map(|at| Splice { at, len: written });
    Ok(layout)
}

/// Rebuilds the RPC reply into `out` (which must hold [`ReplyLayout::total_len`]
/// bytes): the reduced reply with the write chunk's data and a zero XDR pad inserted
/// after the item's length word (RFC 8166 §3.4.6). Returns the length, or
/// `None` when `out` or `write_buf` is too small. Only the written bytes of the write
/// buffer are used: the rest may have been scribbled on and is never exposed (R8166-70).
pub fn assemble(
    layout: &ReplyLayout,
    msg: &[u8],
    reply_buf: &[u8],
    write_buf: &[u8],
    out: &mut [u8],
) -> Option<usize> {
    let reduced = layout.reduced(msg, reply_buf);
    let total = layout.total_len();
    let out = out.get_mut(..total)?;
    match layout.splice {
        None => out.copy_from_slice(reduced),
        Some(s) => {
            let data = write_buf.get(..s.len)?;
            let (head, rest) = out.split_at_mut(s.at);
            head.copy_from_slice(reduced.get(..s.at)?);
            let (mid, tail) = rest.split_at_mut(padded(s.len));
            mid[..s.len].copy_from_slice(data);
            mid[s.len..].fill(0);
            debug_assert_eq!(mid.len() - s.len, pad_len(s.len));
            tail.copy_from_slice(&reduced[s.at..]);
        }
    }
    Some(total)
}

#[cfg(test)]
#[path = "requester_tests.rs"]
mod tests;
