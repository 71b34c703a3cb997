//! The responder (server) side of RPC-over-RDMA v1, sans-IO.
//!
//! [`Responder::receive`] classifies one received message into a silent drop, an
//! RDMA_ERROR to send, or a call with a reassembly plan (which bytes come from the
//! Receive buffer, which are pulled by RDMA Read, where zero padding goes).
//! [`Responder::plan_reply`] turns an RPC reply plus the call's chunk lists into RDMA
//! Writes and one Send. The transport (`crate::rdma::server`) performs them.
//!
//! Parse order (RFC 8166 §4.5, docs/architecture.md §9 rule 4; as Linux does): length → RDMA_ERROR → version → proc →
//! chunk lists → position checks → RPC xid; then the upper layer checks that reduced
//! items are DDP-eligible (GARBAGE_ARGS otherwise, RFC 8166 §6.1).

pub use super::ddp::{DdpList, Inline, MAX_DDP, MAX_INLINE};
use super::wire::{
    self, Chunks, DecodeError, ErrBody, Fixed, Header, Limits, ReadSegment, Segment,
};
use crate::xdr::{padded, XdrWriter};
use std::ops::Range;

/// Responder settings for one connection.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Credits we grant when enough Receives are posted (never 0 on the wire).
    pub credits: u32,
    /// Largest reassembled call we accept; larger read chunks get ERR_CHUNK before any
    /// RDMA Read is issued (RFC 8166 §8.1.4, R8166-76).
    pub max_call: usize,
    pub limits: Limits,
}

/// What to do with one received message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// Discard silently; the reason is for the log and counters.
    Drop(&'static str),
    /// Answer with an RDMA_ERROR ([`encode_error`]); the call is not executed.
    Error { xid: u32, vers: u32, body: ErrBody },
    /// A call to reassemble (see [`Responder::pieces`]) and execute.
    Call(CallInfo),
}

/// A call that passed the transport checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallInfo {
    pub xid: u32,
    /// Credits the requester asked for.
    pub requested: u32,
    /// RDMA_NOMSG: the whole payload is in the position-zero read chunk.
    pub long: bool,
    /// Length of the reassembled (unreduced) RPC message.
    pub total_len: usize,
    /// Whether anything must be pulled by RDMA Read.
    pub pulls: bool,
}

/// One step of reassembling a call into a contiguous buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece {
    /// Copy `len` bytes from the Receive buffer at `from` to `to`.
    Inline { from: usize, len: usize, to: usize },
    /// RDMA Read `seg` into the buffer at `to`.
    Pull { seg: Segment, to: usize },
    /// Zero `len` bytes at `to` (XDR padding the requester left out).
    Zero { to: usize, len: usize },
}

/// A reduced argument item in the reassembled call: where its bytes start and how many
/// the requester sent (for the upper layer's eligibility and length checks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reduced {
    pub position: u32,
    pub len: u32,
}

/// Why a reply cannot be sent as planned: answer ERR_CHUNK instead (RFC 8267 §3.1
/// reply resource overrun, R8166-44). Nothing was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overrun;

/// One RDMA Write of a reply plan: `src` bytes of the reply into a requester segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WritePlan {
    /// Bytes of the reply, or with `external` of the caller's separate data stream.
    pub src: Range<usize>,
    pub external: bool,
    pub handle: u32,
    pub remote_offset: u64,
}

/// How to send one reply: the header (in the caller's buffer), the RDMA Writes to post
/// first, then one Send gathering the header and `inline` pieces of the reply (at most
/// [`MAX_INLINE`]: one more than the results placed in write chunks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyPlan {
    pub header_len: usize,
    pub writes: Vec<WritePlan>,
    pub inline: Inline,
    /// Send-With-Invalidate this rkey (RFC 8797 §4.1), if allowed.
    pub invalidate: Option<u32>,
}

/// Per-connection responder state: settings and reusable scratch (no allocation per
/// message once constructed).
pub struct Responder {
    cfg: Config,
    pieces: Vec<Piece>,
    reduced: Vec<Reduced>,
    echo: Chunks,
    plan: ReplyPlan,
}

impl Responder {
    pub fn new(cfg: Config) -> Responder {
        assert!(cfg.credits >= 1, "a grant of 0 deadlocks the requester");
        let l = cfg.limits;
        Responder {
            cfg,
            pieces: Vec::with_capacity(2 * l.max_read_segments + 2),
            reduced: Vec::with_capacity(l.max_read_segments),
            echo: Chunks::with_limits(&l),
            plan: ReplyPlan {
                header_len: 0,
                writes: Vec::with_capacity(l.max_write_chunks * l.max_chunk_segments + 4),
                inline: Inline::new(),
                invalidate: None,
            },
        }
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Storage for one call's chunk lists, sized to the limits.
    pub fn new_chunks(&self) -> Chunks {
        Chunks::with_limits(&self.cfg.limits)
    }

    /// The grant to put in a reply: our configured credits, but never more than the
    /// Receives actually posted (RFC 8166 §3.3.1: Receives first, R8166-28), and never
    /// 0 even while the receive queue is exhausted (R8166-24).
    pub fn grant(&self, posted_receives: u32) -> u32 {
        self.cfg.credits.min(posted_receives).max(1)
    }

    /// Classifies one received message (`msg` = the bytes the Receive completed with),
    /// decoding its chunk lists into `chunks`. On `Call`, [`Responder::pieces`] and
    /// [`Responder::reduced`] describe the reassembly.
    pub fn receive(&mut self, msg: &[u8], chunks: &mut Chunks) -> Received {
        self.pieces.clear();
        self.reduced.clear();
        // R8166-04: below the 28-byte minimum nothing (not even the XID) is trusted.
        if msg.len() < wire::MIN_HEADER {
            return Received::Drop("message shorter than 28 bytes");
        }
        let (fixed, payload_at) = match wire::decode(msg, &self.cfg.limits, chunks) {
            Ok(Header::Msg { fixed, payload_at }) => (fixed, payload_at),
            // R8166-14: a forward responder never answers an error with an error; one
            // answering a callback was matched before (`super::reverse`, R8167-16).
            Ok(Header::Error { .. }) => return Received::Drop("RDMA_ERROR from a requester"),
            Err(DecodeError::Short) => return Received::Drop("short header"),
            Err(DecodeError::Chunks(f)) if f.proc_ == wire::RDMA_ERROR => {
                return Received::Drop("undecodable RDMA_ERROR")
            }
            // R8166-06/07: any other version gets ERR_VERS, xid and vers echoed.
            Err(DecodeError::Version(f)) => {
                return err(
                    f,
                    ErrBody::Vers {
                        low: wire::VERSION,
                        high: wire::VERSION,
                    },
                )
            }
            // R8166-23: RDMA_DONE is discarded silently.
            Err(DecodeError::Proc(f)) if f.proc_ == wire::RDMA_DONE => {
                return Received::Drop("RDMA_DONE")
            }
            // R8166-09/20: RDMA_MSGP and unknown procedures get ERR_CHUNK.
            Err(DecodeError::Proc(f)) => return err(f, ErrBody::Chunk),
            // R8166-11/12, R8267-25: lists truncated or over our limits.
            Err(DecodeError::Chunks(f)) => return err(f, ErrBody::Chunk),
        };
        let long = fixed.proc_ == wire::RDMA_NOMSG;
        let inline = if long {
            // R8166-10: a Long call must carry its payload somewhere.
            if chunks.reads.first().map(|r| r.position) != Some(0) {
                return err(fixed, ErrBody::Chunk);
            }
            0..0
        } else {
            payload_at..msg.len()
        };
        if !long {
            let payload = &msg[inline.clone()];
            // R8166-03: rdma_xid must equal the RPC XID (checked for Long calls after
            // the pull, see `check_long_xid`).
            if payload.len() < 8 || payload[..4] != fixed.xid.to_be_bytes() {
                return err(fixed, ErrBody::Chunk);
            }
            // R8167-20: a REPLY can only answer a callback. The transport classifies
            // messages first (`super::reverse::classify`) and never hands us one; a
            // REPLY reaching here (a caller without a callback table) is dropped.
            if payload[4..8] == 1u32.to_be_bytes() {
                return Received::Drop("RPC reply with no callback outstanding");
            }
        }
        match self.plan_reassembly(msg, inline, chunks, long) {
            Ok(total_len) => {
                let pulls = self.pieces.iter().any(|p| matches!(p, Piece::Pull { .. }));
                Received::Call(CallInfo {
                    xid: fixed.xid,
                    requested: fixed.credit,
                    long,
                    total_len,
                    pulls,
                })
            }
            Err(()) => err(fixed, ErrBody::Chunk),
        }
    }

    /// The reassembly steps of the last `Call`, in order.
    pub fn pieces(&self) -> &[Piece] {
        &self.pieces
    }

    /// The reduced argument items of the last `Call`, ascending by position.
    pub fn reduced(&self) -> &[Reduced] {
        &self.reduced
    }

    /// RFC 8166 §3.4.5 rebuild: source bytes up to each chunk's position, the chunk's
    /// segments in list order, zero padding to 4, then the rest. Positions are in the
    /// reassembled stream; they must be multiples of 4 (R8166-49), ascending, grouped,
    /// and reachable from the source bytes (R8166-50); the total must fit `max_call`
    /// (R8166-76). The source is the Receive buffer's payload, or for a Long call the
    /// position-zero read chunk (R8166-40): then the stream is pulled piecewise around
    /// the other read chunks (RFC 8267 §6.4.2, R8267-24: PZRC + one more read chunk).
    fn plan_reassembly(
        &mut self,
        msg: &[u8],
        inline: Range<usize>,
        chunks: &Chunks,
        long: bool,
    ) -> Result<usize, ()> {
        let reads = &chunks.reads;
        let mut i = 0;
        let src = if long {
            let mut len = 0usize;
            while i < reads.len() && reads[i].position == 0 {
                len = len.checked_add(reads[i].seg.length as usize).ok_or(())?;
                i += 1;
            }
            // R8166-40: the PZRC is a complete XDR stream.
            if !len.is_multiple_of(4) || len < 8 || len > self.cfg.max_call {
                return Err(());
            }
            Source::Pzrc(&reads[..i], len)
        } else {
            Source::Inline(inline.clone())
        };
        let src_len = src.len();
        let mut out = 0usize;
        let mut cur = 0usize;
        while i < reads.len() {
            let position = reads[i].position;
            if !position.is_multiple_of(4) || (position as usize) < out || position == 0 {
                return Err(());
            }
            let n = position as usize - out;
            if cur.checked_add(n).is_none_or(|end| end > src_len) {
                return Err(());
            }
            src.copy(&mut self.pieces, cur, n, out);
            cur += n;
            out += n;
            let mut len = 0usize;
            while i < reads.len() && reads[i].position == position {
                self.pieces.push(Piece::Pull {
                    seg: reads[i].seg,
                    to: out + len,
                });
                len = len.checked_add(reads[i].seg.length as usize).ok_or(())?;
                if len > self.cfg.max_call {
                    return Err(());
                }
                i += 1;
            }
            if len == 0 || len > self.cfg.max_call {
                return Err(());
            }
            out += len;
            let pad = padded(len) - len;
            if pad > 0 {
                self.pieces.push(Piece::Zero { to: out, len: pad });
                out += pad;
            }
            self.reduced.push(Reduced {
                position,
                len: len as u32,
            });
            if out > self.cfg.max_call {
                return Err(());
            }
        }
        let rest = src_len - cur;
        src.copy(&mut self.pieces, cur, rest, out);
        out = out.checked_add(rest).ok_or(())?;
        debug_assert!(msg.len() >= inline.end);
        if out > self.cfg.max_call {
            return Err(());
        }
        Ok(out)
    }

    /// R8166-03 for Long calls: after the PZRC arrived, its XID must be the header's.
    pub fn check_long_xid(xid: u32, payload: &[u8]) -> bool {
        payload.len() >= 8 && payload[..4] == xid.to_be_bytes()
    }

    /// Plans the reply to a call whose chunk lists are `call`.
    ///
    /// `reply` is the whole RPC reply; `ddp` the data bytes of its DDP-eligible result
    /// (its XDR pad follows it in `reply`), if the reply has one. `send_limit` is the
    /// reply inline threshold; `remote_invalidate` whether both peers set R. The header
    /// goes into `hdr`.
    ///
    /// Rules: the eligible item goes by RDMA Write into the first write chunk when that
    /// chunk has segments (mandatory, RFC 8166 §4.3.2; R8166-67), filling segments in
    /// order, exact length, no pad (R8166-64/65/66); an empty chunk (count 0) means
    /// inline (R8166-71); chunks left over come back unused: count kept, lengths 0
    /// (R8166-68; RFC 8267 §6.4.1 says "empty", RFC 8166 §4.3.2 "unused": an unused
    /// chunk decodes as empty either way, docs/architecture.md §9 rule 3). Every write
    /// chunk is echoed with its handles and offsets (R8166-63). The reduced reply goes Short when it fits (`RDMA_MSG`, a
    /// provided Reply chunk echoed with zero lengths, R8166-43), else into the Reply
    /// chunk (`RDMA_NOMSG`, R8166-39/42), else it is an [`Overrun`] (R8166-44).
    #[allow(clippy::too_many_arguments)]
    pub fn plan_reply(
        &mut self,
        xid: u32,
        grant: u32,
        call: &Chunks,
        reply: &[u8],
        ddp: Option<Range<usize>>,
        send_limit: usize,
        remote_invalidate: bool,
        hdr: &mut [u8],
    ) -> Result<&ReplyPlan, Overrun> {
        let ddp = DdpList::from(ddp);
        self.plan(
            xid,
            grant,
            call,
            reply,
            Ddp::List(&ddp),
            send_limit,
            remote_invalidate,
            hdr,
        )
    }

    /// Like [`Responder::plan_reply`], for a reply with several DDP-eligible results
    /// (an NFSv4 COMPOUND, RFC 8267 §6.4.1): entry k of `ddp` pairs with write chunk k.
    /// A non-empty chunk gets its result's data by RDMA Write (R8267-18); an empty
    /// chunk (count 0) leaves the result inline (R8267-19); a result without data comes
    /// back as its chunk with zero lengths (R8267-21); results beyond the write list go
    /// inline (R8267-20, R8267-22). The inline rest is Short when it fits, else in the
    /// Reply chunk, else an [`Overrun`] (R8267-07).
    #[allow(clippy::too_many_arguments)]
    pub fn plan_reply_list(
        &mut self,
        xid: u32,
        grant: u32,
        call: &Chunks,
        reply: &[u8],
        ddp: &DdpList,
        send_limit: usize,
        remote_invalidate: bool,
        hdr: &mut [u8],
    ) -> Result<&ReplyPlan, Overrun> {
        self.plan(
            xid,
            grant,
            call,
            reply,
            Ddp::List(ddp),
            send_limit,
            remote_invalidate,
            hdr,
        )
    }

    /// Like [`Responder::plan_reply`], for a reply whose DDP-eligible data is not in
    /// `reply` but in a separate stream of `data_len` bytes (cache pages: RDMA Write
    /// straight from where the data lives). `reply` ends with the item's length word.
    /// The first write chunk must have room for the data; otherwise (and for a reply
    /// that would need the Reply chunk) this is an [`Overrun`] and the caller sends the
    /// data the ordinary way.
    #[allow(clippy::too_many_arguments)]
    pub fn plan_reply_external(
        &mut self,
        xid: u32,
        grant: u32,
        call: &Chunks,
        reply: &[u8],
        data_len: usize,
        send_limit: usize,
        remote_invalidate: bool,
        hdr: &mut [u8],
    ) -> Result<&ReplyPlan, Overrun> {
        self.plan(
            xid,
            grant,
            call,
            reply,
            Ddp::External(data_len),
            send_limit,
            remote_invalidate,
            hdr,
        )
    }

    /// The room of the first write chunk, if it has segments: what a READ result may
    /// be written into (RFC 8267 §4: the one eligible result of an NFSv3 reply).
    pub fn first_write_chunk_room(call: &Chunks) -> Option<u64> {
        match call.write_chunks.first() {
            Some(&(_, n)) if n > 0 => Some(wire::chunk_len(call.write_chunk(0))),
            _ => None,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn plan(
        &mut self,
        xid: u32,
        grant: u32,
        call: &Chunks,
        reply: &[u8],
        ddp: Ddp,
        send_limit: usize,
        remote_invalidate: bool,
        hdr: &mut [u8],
    ) -> Result<&ReplyPlan, Overrun> {
        let echo = &mut self.echo;
        echo.clear();
        for i in 0..call.write_chunks.len() {
            let segs = call.write_chunk(i);
            let at = echo.write_segs.len() as u16;
            echo.write_segs
                .extend(segs.iter().map(|s| Segment { length: 0, ..*s }));
            echo.write_chunks.push((at, segs.len() as u16));
        }
        if let Some(segs) = call.reply_chunk() {
            echo.reply = Some(());
            echo.reply_segs
                .extend(segs.iter().map(|s| Segment { length: 0, ..*s }));
        }
        let plan = &mut self.plan;
        plan.writes.clear();
        plan.inline.clear();
        let external = matches!(ddp, Ddp::External(_));
        match ddp {
            Ddp::List(list) => place_results(call, reply, list, echo, plan)?,
            Ddp::External(len) => {
                // The data stream goes into the first write chunk, which must have
                // segments and room; the whole `reply` stays inline.
                let Some(&(at, n)) = echo.write_chunks.first().filter(|&&(_, n)| n > 0) else {
                    return Err(Overrun);
                };
                if len as u64 > wire::chunk_len(call.write_chunk(0)) {
                    return Err(Overrun);
                }
                let segs = &mut echo.write_segs[at as usize..(at + n) as usize];
                let all = 0..len;
                scatter(
                    std::slice::from_ref(&all),
                    call.write_chunk(0),
                    segs,
                    &mut plan.writes,
                    true,
                );
                plan.inline.push(0..reply.len());
            }
        }

        let reduced_len = plan.inline.total();
        let mut fixed = Fixed {
            xid,
            vers: wire::VERSION,
            credit: grant.max(1),
            proc_: wire::RDMA_MSG,
        };
        let header_len = wire::FIXED_WORDS + echo.encoded_len();
        if header_len + reduced_len > send_limit {
            // Long reply: the reduced payload goes into the Reply chunk.
            let Some(segs) = call.reply_chunk().filter(|_| !external) else {
                return Err(Overrun);
            };
            if wire::chunk_len(segs) < reduced_len as u64 {
                return Err(Overrun);
            }
            scatter(
                plan.inline.as_slice(),
                segs,
                &mut echo.reply_segs,
                &mut plan.writes,
                false,
            );
            plan.inline.clear();
            fixed.proc_ = wire::RDMA_NOMSG;
            if header_len > send_limit {
                return Err(Overrun);
            }
        }
        let n = wire::encode_msg(&mut XdrWriter::new(hdr), fixed, echo).map_err(|_| Overrun)?;
        debug_assert_eq!(n, header_len);
        plan.header_len = n;
        plan.invalidate = if remote_invalidate {
            single_rkey(call)
        } else {
            None
        };
        Ok(&self.plan)
    }
}

/// Where a reply's DDP-eligible data is.
enum Ddp<'a> {
    /// Inside the reply buffer, one entry per READ-class result.
    List(&'a DdpList),
    /// In a separate stream of this many bytes (for the first write chunk).
    External(usize),
}

/// RFC 8267 §6.4.1 pairing: result k goes into write chunk k when that
/// chunk has segments (RFC 8166 §4.3.2, R8166-67), exact length, no pad
/// (R8166-64/65/66); everything else stays in `plan.inline`, in order, around the
/// holes the written results leave (their XDR pad is dropped with them). Chunks that
/// get nothing keep their zero lengths (R8166-68, R8267-21). Results must be ascending
/// and inside `reply`; a result larger than its chunk, or more holes than
/// [`MAX_DDP`], is an [`Overrun`].
fn place_results(
    call: &Chunks,
    reply: &[u8],
    list: &DdpList,
    echo: &mut Chunks,
    plan: &mut ReplyPlan,
) -> Result<(), Overrun> {
    let mut cursor = 0usize;
    for k in 0..list.len().min(call.write_chunks.len()) {
        let Some(Some(data)) = list.get(k) else {
            continue; // no eligible item: the chunk comes back empty
        };
        let (at, n) = echo.write_chunks[k];
        if n == 0 {
            continue; // R8166-71: an empty chunk means inline
        }
        if data.start < cursor || data.end > reply.len() {
            debug_assert!(false, "DDP results out of order or outside the reply");
            return Err(Overrun);
        }
        let room = wire::chunk_len(call.write_chunk(k));
        if data.len() as u64 > room {
            return Err(Overrun);
        }
        let segs = &mut echo.write_segs[at as usize..(at + n) as usize];
        scatter(
            std::slice::from_ref(&data),
            call.write_chunk(k),
            segs,
            &mut plan.writes,
            false,
        );
        if !plan.inline.push(cursor..data.start) {
            return Err(Overrun);
        }
        cursor = (data.end + padded(data.len()) - data.len()).min(reply.len());
    }
    if !plan.inline.push(cursor..reply.len()) {
        return Err(Overrun);
    }
    Ok(())
}

/// Where the non-chunk bytes of a call come from.
enum Source<'a> {
    /// This range of the Receive buffer.
    Inline(Range<usize>),
    /// The position-zero read chunk (its segments, their total length).
    Pzrc(&'a [ReadSegment], usize),
}

impl Source<'_> {
    fn len(&self) -> usize {
        match self {
            Source::Inline(r) => r.len(),
            Source::Pzrc(_, n) => *n,
        }
    }

    /// Plans copying `len` source bytes from offset `from` to `to` of the record: one
    /// Inline piece, or RDMA Reads of the PZRC segments' sub-ranges. The caller checked
    /// `from + len <= self.len()`.
    fn copy(&self, pieces: &mut Vec<Piece>, from: usize, len: usize, to: usize) {
        if len == 0 {
            return;
        }
        match self {
            Source::Inline(r) => pieces.push(Piece::Inline {
                from: r.start + from,
                len,
                to,
            }),
            Source::Pzrc(segs, _) => {
                let (end, mut base, mut to) = (from + len, 0usize, to);
                for s in segs.iter() {
                    let seg_end = base + s.seg.length as usize;
                    let (a, b) = (from.max(base), end.min(seg_end));
                    if a < b {
                        pieces.push(Piece::Pull {
                            seg: Segment {
                                handle: s.seg.handle,
                                length: (b - a) as u32,
                                // No overflow: `wire` refuses segments whose offset +
                                // length does.
                                offset: s.seg.offset.saturating_add((a - base) as u64),
                            },
                            to,
                        });
                        to += b - a;
                    }
                    base = seg_end;
                }
            }
        }
    }
}

fn err(f: Fixed, body: ErrBody) -> Received {
    Received::Error {
        xid: f.xid,
        vers: f.vers,
        body,
    }
}

/// Scatters the byte ranges `src` (in order, as one stream) over the segments `dst`
/// (in order), recording the Writes and the bytes each echoed segment received.
fn scatter(
    src: &[Range<usize>],
    dst: &[Segment],
    echo: &mut [Segment],
    out: &mut Vec<WritePlan>,
    external: bool,
) {
    let mut seg = 0usize;
    let mut used = 0u32;
    for r in src {
        let mut at = r.start;
        while at < r.end {
            while seg < dst.len() && used == dst[seg].length {
                seg += 1;
                used = 0;
            }
            let Some(d) = dst.get(seg) else {
                debug_assert!(false, "scatter: caller checked the room");
                return;
            };
            let n = (d.length.saturating_sub(used) as usize).min(r.end - at);
            out.push(WritePlan {
                src: at..at + n,
                external,
                handle: d.handle,
                // No overflow: `wire` refuses segments whose offset + length does.
                remote_offset: d.offset.saturating_add(used as u64),
            });
            used += n as u32;
            echo[seg].length = used;
            at += n;
        }
    }
}

/// R8797-13 policy (as current Linux servers): invalidate remotely only when every
/// segment of the call's chunk lists carries one and the same rkey.
fn single_rkey(call: &Chunks) -> Option<u32> {
    let mut handles = call
        .reads
        .iter()
        .map(|r| r.seg.handle)
        .chain(call.write_segs.iter().map(|s| s.handle))
        .chain(call.reply_chunk().unwrap_or(&[]).iter().map(|s| s.handle));
    let first = handles.next()?;
    handles.all(|h| h == first).then_some(first)
}

/// Encodes an RDMA_ERROR answering `Received::Error` with our grant (never 0, R8166-08).
pub fn encode_error(hdr: &mut [u8], xid: u32, vers: u32, grant: u32, body: ErrBody) -> usize {
    wire::encode_error(&mut XdrWriter::new(hdr), xid, vers, grant.max(1), body)
        .expect("error headers are at most 28 bytes; callers pass at least that")
}

#[cfg(test)]
#[path = "responder_tests.rs"]
mod tests;
