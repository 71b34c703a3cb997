//! The RPC-over-RDMA version 1 transport header (RFC 8166 §4.1–4.3, §4.7): codec only.
//!
//! Decoding fills a caller-owned [`Chunks`] whose vectors were sized once from
//! [`Limits`]; every count is checked against its limit *before* anything is stored,
//! and every read against the received length, so a hostile header costs no allocation
//! and cannot overrun (R8166-12). Policy (what to answer) lives in `responder` and
//! `requester`; this module only says what the bytes are.

use crate::xdr::{XdrError, XdrReader, XdrResult, XdrWriter};

/// `rdma_vers` of this protocol (RFC 8166 §4.2.2).
pub const VERSION: u32 = 1;
/// `rdma_proc` values (RFC 8166 §4.2.4).
pub const RDMA_MSG: u32 = 0;
pub const RDMA_NOMSG: u32 = 1;
pub const RDMA_MSGP: u32 = 2;
pub const RDMA_DONE: u32 = 3;
pub const RDMA_ERROR: u32 = 4;
/// `rpc_rdma_errcode` values (RFC 8166 §4.2.4).
pub const ERR_VERS: u32 = 1;
pub const ERR_CHUNK: u32 = 2;

/// Smallest RDMA_MSG/RDMA_NOMSG header: four fixed words and three empty lists.
pub const MIN_HEADER: usize = 28;
/// The four fixed words every version shares (RFC 8166 §7).
pub const FIXED_WORDS: usize = 16;
/// Bytes of an ERR_CHUNK message; an ERR_VERS message is [`MIN_HEADER`].
pub const ERR_CHUNK_LEN: usize = 20;
/// Inline threshold both sides assume without RFC 8797 private data (RFC 8166 §3.3.2).
pub const DEFAULT_INLINE: usize = 1024;

/// One RDMA segment: a registered piece of the requester's memory (16 bytes on the wire).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Segment {
    pub handle: u32,
    pub length: u32,
    pub offset: u64,
}

/// One entry of the read list (20 bytes on the wire).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadSegment {
    pub position: u32,
    pub seg: Segment,
}

/// Hard limits applied while decoding, before any storage is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Read-list entries per message (all chunks together).
    pub max_read_segments: usize,
    /// Write chunks per message.
    pub max_write_chunks: usize,
    /// Segments per write chunk and in the reply chunk.
    pub max_chunk_segments: usize,
    /// Bytes one chunk may describe (sum of its segment lengths).
    pub max_chunk_bytes: u64,
}

impl Default for Limits {
    /// RFC 8267 §6.4.2 says a server must accept a PZRC plus one read chunk, one write
    /// chunk and 16 segments per chunk; we accept twice that so every Linux client
    /// layout fits, and cap a chunk at 2 MiB + 64 KiB (a 1 MiB I/O plus headroom).
    fn default() -> Self {
        Limits {
            max_read_segments: 32,
            max_write_chunks: 4,
            max_chunk_segments: 32,
            max_chunk_bytes: 2 * 1024 * 1024 + 64 * 1024,
        }
    }
}

/// The three chunk lists of an RDMA_MSG/RDMA_NOMSG header, in reusable storage.
///
/// Write chunks are stored flat: chunk `i` is `write_segs[write_chunks[i].0 ..][.. write_chunks[i].1]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chunks {
    pub reads: Vec<ReadSegment>,
    pub write_segs: Vec<Segment>,
    /// (first segment index, segment count) per write chunk, in list order.
    pub write_chunks: Vec<(u16, u16)>,
    pub reply: Option<()>,
    pub reply_segs: Vec<Segment>,
}

impl Chunks {
    /// Storage for headers within `limits`: decoding never grows it.
    pub fn with_limits(l: &Limits) -> Chunks {
        Chunks {
            reads: Vec::with_capacity(l.max_read_segments),
            write_segs: Vec::with_capacity(l.max_write_chunks * l.max_chunk_segments),
            write_chunks: Vec::with_capacity(l.max_write_chunks),
            reply: None,
            reply_segs: Vec::with_capacity(l.max_chunk_segments),
        }
    }

    pub fn clear(&mut self) {
        self.reads.clear();
        self.write_segs.clear();
        self.write_chunks.clear();
        self.reply = None;
        self.reply_segs.clear();
    }

    /// Write chunk `i`'s segments.
    pub fn write_chunk(&self, i: usize) -> &[Segment] {
        let (at, n) = self.write_chunks[i];
        &self.write_segs[at as usize..at as usize + n as usize]
    }

    /// The reply chunk's segments, if one was given.
    pub fn reply_chunk(&self) -> Option<&[Segment]> {
        self.reply.map(|_| &self.reply_segs[..])
    }

    pub fn is_empty(&self) -> bool {
        self.reads.is_empty() && self.write_chunks.is_empty() && self.reply.is_none()
    }

    /// Appends a write chunk (encoder side).
    pub fn push_write_chunk(&mut self, segs: &[Segment]) {
        let at = self.write_segs.len() as u16;
        self.write_segs.extend_from_slice(segs);
        self.write_chunks.push((at, segs.len() as u16));
    }

    /// Sets the reply chunk (encoder side).
    pub fn set_reply_chunk(&mut self, segs: &[Segment]) {
        self.reply = Some(());
        self.reply_segs.clear();
        self.reply_segs.extend_from_slice(segs);
    }

    /// Bytes the header encoding of these lists takes (RFC 8166 §4.7 arithmetic).
    pub fn encoded_len(&self) -> usize {
        let reads = 24 * self.reads.len() + 4;
        let writes = self
            .write_chunks
            .iter()
            .map(|&(_, n)| 8 + 16 * n as usize)
            .sum::<usize>()
            + 4;
        let reply = match self.reply {
            Some(()) => 8 + 16 * self.reply_segs.len(),
            None => 4,
        };
        reads + writes + reply
    }
}

/// Total bytes described by `segs` (saturating; decoded chunks are far below).
pub fn chunk_len(segs: &[Segment]) -> u64 {
    segs.iter()
        .fold(0u64, |t, s| t.saturating_add(s.length as u64))
}

/// The fixed words of any header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fixed {
    pub xid: u32,
    pub vers: u32,
    pub credit: u32,
    pub proc_: u32,
}

/// A decoded header (the chunk lists go to the caller's [`Chunks`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// RDMA_MSG or RDMA_NOMSG with its lists decoded; the payload (RDMA_MSG) starts at
    /// `payload_at`.
    Msg { fixed: Fixed, payload_at: usize },
    /// RDMA_ERROR with a decodable body.
    Error { fixed: Fixed, err: ErrBody },
}

/// RDMA_ERROR bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrBody {
    Vers { low: u32, high: u32 },
    Chunk,
}

/// Why a header did not decode. Each arm keeps what a responder needs to answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// Fewer than the 16 fixed bytes: nothing is trustworthy.
    Short,
    /// `rdma_vers` is not 1 (the fixed words are valid for every version).
    Version(Fixed),
    /// `rdma_proc` is RDMA_MSGP, RDMA_DONE or unknown.
    Proc(Fixed),
    /// Chunk lists truncated, over a limit, or malformed; or an RDMA_ERROR body that
    /// does not decode.
    Chunks(Fixed),
}

fn bad(_: XdrError) {}

/// Decodes one received header. `rdma_vers` is checked before `rdma_proc`, except that
/// RDMA_ERROR (fixed across versions) is recognised first. Messages shorter than the 16
/// fixed bytes are `Short`; size floors beyond that are the caller's policy.
pub fn decode(buf: &[u8], limits: &Limits, out: &mut Chunks) -> Result<Header, DecodeError> {
    out.clear();
    let mut r = XdrReader::new(buf);
    let fixed = match (r.u32(), r.u32(), r.u32(), r.u32()) {
        (Ok(xid), Ok(vers), Ok(credit), Ok(proc_)) => Fixed {
            xid,
            vers,
            credit,
            proc_,
        },
        _ => return Err(DecodeError::Short),
    };
    if fixed.proc_ == RDMA_ERROR {
        let err = decode_error_body(&mut r).map_err(|_| DecodeError::Chunks(fixed))?;
        return Ok(Header::Error { fixed, err });
    }
    if fixed.vers != VERSION {
        return Err(DecodeError::Version(fixed));
    }
    if fixed.proc_ != RDMA_MSG && fixed.proc_ != RDMA_NOMSG {
        return Err(DecodeError::Proc(fixed));
    }
    decode_lists(&mut r, limits, out).map_err(|_| DecodeError::Chunks(fixed))?;
    Ok(Header::Msg {
        fixed,
        payload_at: r.position(),
    })
}

/// Where the payload of an RDMA_MSG starts, found by walking its three chunk lists
/// without storing them (RFC 8167 §2, docs/architecture.md §9 rule 5: the direction of a message is the
/// `msg_type` of its payload, looked up before any per-call state is taken). `None`
/// when the lists run past `buf` (the full decoder then answers the message).
/// Allocation-free; bounded by `buf.len()`.
pub fn msg_payload_at(buf: &[u8]) -> Option<usize> {
    let mut r = XdrReader::new(buf);
    r.skip(16).ok()?;
    // Read list: position + segment (handle, length, offset) per entry.
    while r.bool().ok()? {
        r.skip(20).ok()?;
    }
    // Write list: counted chunks of 16-byte segments.
    while r.bool().ok()? {
        let n = r.u32().ok()? as usize;
        r.skip(n.checked_mul(16)?).ok()?;
    }
    if r.bool().ok()? {
        let n = r.u32().ok()? as usize;
        r.skip(n.checked_mul(16)?).ok()?;
    }
    Some(r.position())
}

fn decode_error_body(r: &mut XdrReader) -> XdrResult<ErrBody> {
    match r.u32()? {
        ERR_VERS => Ok(ErrBody::Vers {
            low: r.u32()?,
            high: r.u32()?,
        }),
        ERR_CHUNK => Ok(ErrBody::Chunk),
        _ => Err(XdrError::BadValue),
    }
}

/// One segment. A segment whose last byte would lie past 2^64 - 1 (offset + length - 1
/// overflows) names no memory any requester can register: malformed, so the caller
/// answers ERR_CHUNK (RFC 8166 §4.5.2), and every later `offset + n` (n < length) is
/// known not to overflow.
fn segment(r: &mut XdrReader) -> XdrResult<Segment> {
    let s = Segment {
        handle: r.u32()?,
        length: r.u32()?,
        offset: r.u64()?,
    };
    if s.length > 0 && s.offset.checked_add(s.length as u64 - 1).is_none() {
        return Err(XdrError::BadValue);
    }
    Ok(s)
}

/// Segments of one counted chunk, limit checked before the loop.
fn counted_segments(r: &mut XdrReader, l: &Limits, into: &mut Vec<Segment>) -> Result<usize, ()> {
    let n = r.u32().map_err(bad)? as usize;
    if n > l.max_chunk_segments || n.saturating_mul(16) > r.remaining() {
        return Err(());
    }
    let mut total = 0u64;
    for _ in 0..n {
        let s = segment(r).map_err(bad)?;
        total = total.saturating_add(s.length as u64);
        into.push(s);
    }
    if total > l.max_chunk_bytes {
        return Err(());
    }
    Ok(n)
}

fn decode_lists(r: &mut XdrReader, l: &Limits, out: &mut Chunks) -> Result<(), ()> {
    // Read list: 1 PHLOO ... 0. Segments sharing a position form one chunk.
    let mut per_position = 0u64;
    let mut last_pos = None;
    while r.bool().map_err(bad)? {
        if out.reads.len() == l.max_read_segments {
            return Err(());
        }
        let position = r.u32().map_err(bad)?;
        let seg = segment(r).map_err(bad)?;
        if last_pos != Some(position) {
            per_position = 0;
            last_pos = Some(position);
        }
        per_position = per_position.saturating_add(seg.length as u64);
        if per_position > l.max_chunk_bytes {
            return Err(());
        }
        out.reads.push(ReadSegment { position, seg });
    }
    // Write list: 1 chunk 1 chunk ... 0.
    while r.bool().map_err(bad)? {
        if out.write_chunks.len() == l.max_write_chunks {
            return Err(());
        }
        let at = out.write_segs.len();
        let n = counted_segments(r, l, &mut out.write_segs)?;
        out.write_chunks.push((at as u16, n as u16));
    }
    // Reply chunk: optional counted chunk.
    if r.bool().map_err(bad)? {
        counted_segments(r, l, &mut out.reply_segs)?;
        out.reply = Some(());
    }
    Ok(())
}

fn put_segment(w: &mut XdrWriter, s: &Segment) -> XdrResult<()> {
    w.u32(s.handle)?;
    w.u32(s.length)?;
    w.u64(s.offset)
}

/// Encodes an RDMA_MSG/RDMA_NOMSG header with `chunks`; returns the bytes written (the
/// payload, for RDMA_MSG, follows at that offset).
pub fn encode_msg(w: &mut XdrWriter, fixed: Fixed, chunks: &Chunks) -> XdrResult<usize> {
    debug_assert!(fixed.proc_ == RDMA_MSG || fixed.proc_ == RDMA_NOMSG);
    debug_assert_eq!(fixed.vers, VERSION, "R8166-01: we only emit version 1");
    let start = w.position();
    w.u32(fixed.xid)?;
    w.u32(fixed.vers)?;
    w.u32(fixed.credit)?;
    w.u32(fixed.proc_)?;
    for rs in &chunks.reads {
        w.u32(1)?;
        w.u32(rs.position)?;
        put_segment(w, &rs.seg)?;
    }
    w.u32(0)?;
    for i in 0..chunks.write_chunks.len() {
        w.u32(1)?;
        let segs = chunks.write_chunk(i);
        w.u32(segs.len() as u32)?;
        for s in segs {
            put_segment(w, s)?;
        }
    }
    w.u32(0)?;
    match chunks.reply_chunk() {
        Some(segs) => {
            w.u32(1)?;
            w.u32(segs.len() as u32)?;
            for s in segs {
                put_segment(w, s)?;
            }
        }
        None => w.u32(0)?,
    }
    Ok(w.position() - start)
}

/// Encodes RDMA_ERROR: `xid` and `vers` copied from the failing message (RFC 8166
/// §4.5), `credit` the current grant. ERR_VERS advertises 1..1.
pub fn encode_error(
    w: &mut XdrWriter,
    xid: u32,
    vers: u32,
    credit: u32,
    err: ErrBody,
) -> XdrResult<usize> {
    let start = w.position();
    w.u32(xid)?;
    w.u32(vers)?;
    w.u32(credit)?;
    w.u32(RDMA_ERROR)?;
    match err {
        ErrBody::Vers { low, high } => {
            w.u32(ERR_VERS)?;
            w.u32(low)?;
            w.u32(high)?;
        }
        ErrBody::Chunk => w.u32(ERR_CHUNK)?,
    }
    Ok(w.position() - start)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn digest_example_b_write_with_read_chunk() {
        let b = hex(
            "1a2b3c4e 00000001 00000020 00000000 00000001 00000048 00001234 00001389
             00007f00 12340000 00000000 00000000 00000000 1a2b3c4e",
        );
        let mut c = Chunks::with_limits(&Limits::default());
        let h = decode(&b, &Limits::default(), &mut c).unwrap();
        let Header::Msg { fixed, payload_at } = h else {
            panic!()
        };
        assert_eq!(fixed.xid, 0x1a2b3c4e);
        assert_eq!(fixed.credit, 32);
        assert_eq!(payload_at, 52);
        assert_eq!(c.reads.len(), 1);
        assert_eq!(c.reads[0].position, 72);
        assert_eq!(c.reads[0].seg.handle, 0x1234);
        assert_eq!(c.reads[0].seg.length, 5001);
        assert_eq!(c.reads[0].seg.offset, 0x00007f0012340000);
        // Round trip.
        let mut out = [0u8; 64];
        let mut w = XdrWriter::new(&mut out);
        let n = encode_msg(&mut w, fixed, &c).unwrap();
        assert_eq!(n, 52);
        assert_eq!(n, 16 + c.encoded_len());
        assert_eq!(&out[..52], &b[..52]);
    }

    #[test]
    fn r8166_77_full_64_bit_offsets_round_trip() {
        let mut c = Chunks::default();
        let seg = Segment {
            handle: 0xffff_fffe,
            length: 8192,
            offset: 0xffff_ffff_0000_1000,
        };
        c.push_write_chunk(&[seg]);
        let fixed = Fixed {
            xid: 1,
            vers: 1,
            credit: 1,
            proc_: RDMA_MSG,
        };
        let mut out = [0u8; 128];
        let n = encode_msg(&mut XdrWriter::new(&mut out), fixed, &c).unwrap();
        let mut d = Chunks::with_limits(&Limits::default());
        decode(&out[..n], &Limits::default(), &mut d).unwrap();
        assert_eq!(d.write_chunk(0), &[seg]);
    }

    #[test]
    fn r8166_12_huge_segment_count_is_refused_without_allocation() {
        // 60 bytes: fixed words, empty read list, write chunk claiming 0x7fffffff segments.
        let mut b = hex("00000009 00000001 00000020 00000000 00000000 00000001 7fffffff");
        b.resize(60, 0);
        let l = Limits::default();
        let mut c = Chunks::with_limits(&l);
        let cap = c.write_segs.capacity();
        assert!(matches!(decode(&b, &l, &mut c), Err(DecodeError::Chunks(f)) if f.xid == 9));
        assert_eq!(c.write_segs.capacity(), cap);
    }

    #[test]
    fn every_truncation_of_a_valid_header_is_an_error_not_a_panic() {
        let b = hex(
            "1a2b3c4f 00000001 00000020 00000000 00000000 00000001 00000001 0000abcd
             00002000 00007f00 56780000 00000000 00000001 00000001 00000002 00000003
             00000000 00000004",
        );
        let l = Limits::default();
        let mut c = Chunks::with_limits(&l);
        assert!(decode(&b, &l, &mut c).is_ok());
        for n in 0..b.len() {
            assert!(decode(&b[..n], &l, &mut c).is_err(), "prefix {n} decoded");
        }
    }

    #[test]
    fn error_bodies_encode_as_the_digest_examples() {
        let mut out = [0u8; 32];
        let n = encode_error(
            &mut XdrWriter::new(&mut out),
            0x1a2b3c50,
            2,
            0x40,
            ErrBody::Vers { low: 1, high: 1 },
        )
        .unwrap();
        assert_eq!(
            &out[..n],
            &hex("1a2b3c50 00000002 00000040 00000004 00000001 00000001 00000001")[..]
        );
        let n = encode_error(
            &mut XdrWriter::new(&mut out),
            0x1a2b3c51,
            1,
            0x40,
            ErrBody::Chunk,
        )
        .unwrap();
        assert_eq!(
            &out[..n],
            &hex("1a2b3c51 00000001 00000040 00000004 00000002")[..]
        );
    }
}
