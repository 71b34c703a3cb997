//! Campaign `rdma`'s generator: RPC-over-RDMA v1 messages (RFC 8166 §4) around the
//! NFSv3/MOUNT calls of campaign 1, with hostile transport headers and chunk lists.
//! Headers are encoded here word by word (not with the engine's encoder) so that list
//! discriminators and segment counts can lie. Each message says what the gateway must
//! do with it: answer it or close the connection (a header we built correctly), or
//! anything but hang or crash (the NULL probe that follows it tells).

use super::rdmapeer::Area;
use super::rng::Rng;
use super::structured::Call;
use super::wire::{call_record, Dec, Enc, NFS_PROG};
use engine::rpcrdma::wire::{Segment, RDMA_DONE, RDMA_ERROR, RDMA_MSG, RDMA_MSGP, RDMA_NOMSG};

/// What the generator knows of the peer a message goes to.
#[derive(Debug, Clone, Copy)]
pub struct PeerView {
    pub rkey: u32,
    pub source: (u64, usize),
    pub sink: (u64, usize),
    pub reply: (u64, usize),
    /// Largest message the gateway's Receives take (its inline threshold for us).
    pub inline: usize,
    /// Credits the gateway granted last.
    pub grant: u32,
}

/// The chunks a message offers the gateway to write into (a reply may use at most these).
#[derive(Debug, Clone, Default)]
pub struct Offer {
    pub writes: Vec<Vec<Segment>>,
    pub reply: Option<Vec<Segment>>,
}

/// One RPC-over-RDMA message and what goes with it.
#[derive(Debug, Clone)]
pub struct Msg {
    pub label: String,
    pub xid: u32,
    pub bytes: Vec<u8>,
    /// Bytes to place in the peer's areas before sending (WRITE data, Long calls).
    pub fills: Vec<(Area, usize, Vec<u8>)>,
    pub offer: Offer,
    /// Built as RFC 8166 says (version 1, MSG/NOMSG, lists true): the gateway must
    /// answer it (an RPC reply or RDMA_ERROR) or close the connection.
    pub must_answer: bool,
    pub call: Option<Call>,
}

/// What the peer does around a message (docs/fuzzing.md "Campaign 4: rdma").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    Normal,
    /// Sends this many messages back to back, past the credits granted.
    Burst(usize),
    /// Disconnects right after sending (RDMA Reads of its chunks outstanding).
    Disconnect,
    /// Deregisters its memory right after sending (the rkeys the gateway got die).
    Revoke,
    /// Never polls again: its replies and the gateway's RDMA Writes are never taken.
    Abandon,
    /// A new connection with hostile RFC 8797 private data.
    Reconnect,
}

const CREDITS: &[u32] = &[1, 1, 2, 16, 32, 0, 128, 65535, u32::MAX];
const BAD_VERS: &[u32] = &[0, 2, u32::MAX];
const BAD_PROCS: &[u32] = &[RDMA_MSGP, RDMA_DONE, RDMA_ERROR, 5, 0x100, u32::MAX];

/// Header-level lies, drawn for 1 message in 4.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lie {
    None,
    Vers,
    Proc,
    /// A list discriminator that is neither 0 nor 1.
    Discriminator,
    /// A write/reply chunk's segment count that differs from the segments sent.
    SegCount,
    /// The message cut inside its header.
    Truncate,
    /// Far more list entries than the gateway's limits (32 read segments, 4 write
    /// chunks, 32 segments a chunk).
    Many,
}

pub struct RdmaGen {
    pub rng: Rng,
    n: usize,
}

fn seg_bytes(e: &mut Enc, s: &Segment) {
    e.u32(s.handle).u32(s.length).u64(s.offset);
}

impl RdmaGen {
    pub fn new(seed: u64) -> RdmaGen {
        RdmaGen {
            rng: Rng::new(seed ^ 0x7264_6d61),
            n: 0,
        }
    }

    pub fn act(&mut self) -> Act {
        match self.rng.below(400) {
            0..=3 => Act::Burst(0),
            4..=7 => Act::Disconnect,
            8..=11 => Act::Revoke,
            12..=13 => Act::Abandon,
            14..=21 => Act::Reconnect,
            _ => Act::Normal,
        }
    }

    /// RFC 8797 private data for a new connection: usually none or a true one, else
    /// a wrong identifier, another version, extreme sizes, short or long garbage.
    pub fn private_data(&mut self) -> Vec<u8> {
        let r = &mut self.rng;
        let mut good = vec![0xf6, 0xab, 0x0e, 0x18, 1, 0, 3, 3];
        match r.below(12) {
            0..=3 => Vec::new(),
            4..=5 => {
                good[5] = r.u32() as u8;
                good[6] = *r.pick(&[0, 0, 3, 63, 255]);
                good[7] = *r.pick(&[0, 0, 3, 7, 63, 255]);
                good
            }
            6 => {
                good[r.below(4)] ^= 1 << r.below(8);
                good
            }
            7 => {
                good[4] = *r.pick(&[0, 2, 255]);
                good
            }
            8 => good[..r.below(8)].to_vec(),
            9 => {
                // The identifier further in, after other bytes (R8797-09).
                let n = 1 + r.below(40);
                let mut v = r.bytes(n);
                v.extend_from_slice(&good);
                v.truncate(56);
                v
            }
            _ => {
                let n = 1 + r.below(56);
                r.bytes(n)
            }
        }
    }

    /// A hostile version of `s` (1 in 8): another rkey, a length beyond the area, an
    /// offset near 2^64 or outside the registration, or overlapping another segment.
    fn spoil(&mut self, s: &mut Segment, v: &PeerView, area: (u64, usize)) {
        let r = &mut self.rng;
        if !r.chance(1, 8) {
            return;
        }
        match r.below(9) {
            0 => s.handle ^= 1 << r.below(32),
            1 => s.handle = *r.pick(&[0, u32::MAX, v.rkey.wrapping_add(1)]),
            2 => s.length = *r.pick(&[0, 1, 0x7fff_ffff, u32::MAX, area.1 as u32 + 1]),
            3 => s.offset = *r.pick(&[0, u64::MAX, u64::MAX - 4095, 1 << 63]),
            4 => s.offset = area.0 + area.1 as u64 - (s.length as u64 / 2), // runs past the area
            5 => s.offset = v.source.0.wrapping_sub(1 << 20), // before the registration
            6 => s.offset = area.0 + (r.below(64) as u64),    // misaligned, overlapping
            7 => s.offset = s.offset.wrapping_add(u64::MAX - (s.length as u64) / 2),
            _ => s.offset = r.next_u64(),
        }
    }

    /// `len` bytes at `area` as segments (1 in 8 spoiled each).
    fn segments(&mut self, v: &PeerView, area: (u64, usize), len: usize) -> Vec<Segment> {
        let len = len.min(area.1);
        // Usually 1-4 segments; 1 in 10 many small ones (up to the gateway's 32 per
        // chunk, sometimes one more), so data is scattered and gathered at odd edges.
        let n = if len >= 256 && self.rng.chance(1, 10) {
            5 + self.rng.below(29)
        } else {
            1 + self.rng.below(if len >= 4096 { 4 } else { 1 })
        };
        let mut out = Vec::with_capacity(n);
        let mut at = 0usize;
        for k in 0..n {
            let part = if k + 1 == n { len - at } else { (len / n) & !3 };
            let mut s = Segment {
                handle: v.rkey,
                length: part as u32,
                offset: area.0 + at as u64,
            };
            self.spoil(&mut s, v, area);
            out.push(s);
            at += part;
        }
        out
    }

    /// The next message for `call` (campaign 1's generator) on a peer seen as `v`.
    pub fn message(&mut self, call: Call, xid: u32, v: &PeerView) -> Msg {
        self.n += 1;
        let rec = call_record(
            xid, call.prog, call.vers, call.proc_, &call.cred, &call.args,
        );
        let mut body = rec[4..].to_vec();
        let label = format!("RDMA {}", call.label());
        let mut fills = Vec::new();
        let mut reads: Vec<(u32, Segment)> = Vec::new();
        let mut offer = Offer::default();
        let nfs3 = call.prog == NFS_PROG && call.vers == 3;
        // WRITE data is DDP-eligible (RFC 8267 §4.1.2): it goes in a read chunk at
        // its XDR position, its length word stays inline.
        if nfs3 && call.proc_ == 7 && !self.rng.chance(1, 10) {
            if let Some((data_at, len)) = write_data_at(&call.args) {
                let hdr_len = body.len() - call.args.len();
                let pos = hdr_len + data_at;
                let mut data = body.split_off(pos);
                // The chunk carries the data without its XDR pad (RFC 8166 §3.4.5).
                data.truncate(len);
                let mut pos = pos as u32;
                if self.rng.chance(1, 10) {
                    pos = *self
                        .rng
                        .pick(&[pos + 1, pos + 2, pos - 4, 3, 1, u32::MAX, 1 << 31]);
                }
                let segs = self.segments(v, v.source, data.len());
                fills.push((Area::Source, 0, data));
                for s in segs {
                    reads.push((pos, s));
                }
            }
        }
        // READ and READLINK results are DDP-eligible: a write chunk for them (1 in 6
        // too small, none, or several).
        if nfs3 && matches!(call.proc_, 5 | 6) {
            let want = if call.proc_ == 6 {
                read_count(&call.args).unwrap_or(4096).min(v.sink.1 as u32) as usize
            } else {
                4096
            };
            let r = &mut self.rng;
            let (chunks, len) = match r.below(12) {
                0 => (0, 0),
                1 => (1, want / 2),
                2 => (1, *r.pick(&[0, 1, 3, 4, 100])),
                3 => (2 + r.below(5), want),
                _ => (1, (want + 3) & !3),
            };
            for _ in 0..chunks {
                let segs = self.segments(v, v.sink, len);
                offer.writes.push(segs);
            }
        } else if self.rng.chance(1, 30) {
            // A write chunk the call has no use for.
            let segs = self.segments(v, v.sink, 4096);
            offer.writes.push(segs);
        }
        // NFSv4.1 COMPOUNDs (RFC 8267 §5: the gateway walks their arguments to match
        // read chunks with WRITE data and pairs write chunks with READ results): a
        // read chunk at an aligned place inside the arguments, at an odd place or at
        // their end, and 0-3 write chunks.
        if call.prog == NFS_PROG && call.vers == 4 {
            let r = &mut self.rng;
            if r.chance(1, 2) {
                let hdr_len = body.len() - call.args.len();
                let pos = match r.below(4) {
                    0 => body.len(),
                    1 => hdr_len + 1 + 2 * r.below(call.args.len().max(1)),
                    _ => hdr_len + 4 * r.below(call.args.len() / 4 + 1),
                } as u32;
                let len = *r.pick(&[0usize, 1, 4, 100, 4096, 65536]);
                let data = r.bytes(len);
                let segs = self.segments(v, v.source, data.len());
                fills.push((Area::Source, 0, data));
                for s in segs {
                    reads.push((pos, s));
                }
            }
            for _ in 0..self.rng.below(4) {
                let len = *self.rng.pick(&[0usize, 100, 4096, 1 << 20]);
                let segs = self.segments(v, v.sink, len);
                offer.writes.push(segs);
            }
        }
        // A reply chunk, always for listings, sometimes for anything; some too small.
        let listing = nfs3 && matches!(call.proc_, 16 | 17);
        if (listing && !self.rng.chance(1, 4)) || self.rng.chance(1, 6) {
            let len = *self
                .rng
                .pick(&[0, 16, 100, 1024, 4096, 8192, 65536, 256 << 10]);
            let segs = self.segments(v, v.reply, len);
            offer.reply = Some(segs);
        }
        // A Long call (RFC 8166 §3.5.3: position-zero read chunk, RDMA_NOMSG) when the
        // call is too big to go inline, and 1 in 12 otherwise.
        let hdr_guess = 28 + 24 * reads.len() + 200;
        let long = body.len() + hdr_guess > v.inline || self.rng.chance(1, 12);
        let proc_ = if long { RDMA_NOMSG } else { RDMA_MSG };
        if long {
            let at = fills.first().map_or(0, |f| (f.2.len() + 4095) & !4095);
            let mut s = Segment {
                handle: v.rkey,
                length: body.len() as u32,
                offset: v.source.0 + at as u64,
            };
            if self.rng.chance(1, 10) {
                s.length = *self.rng.pick(&[0, 4, s.length - 4, s.length + 4, u32::MAX]);
            }
            self.spoil(&mut s, v, v.source);
            fills.push((Area::Source, at, std::mem::take(&mut body)));
            reads.insert(0, (0, s));
        }
        let lie = if self.rng.chance(1, 4) {
            *self.rng.pick(&[
                Lie::Vers,
                Lie::Proc,
                Lie::Discriminator,
                Lie::SegCount,
                Lie::Truncate,
                Lie::Many,
            ])
        } else {
            Lie::None
        };
        let mut bytes = self.encode(xid, proc_, &reads, &mut offer, lie, v);
        bytes.extend_from_slice(&body);
        if lie == Lie::Truncate {
            let n = self.rng.below(bytes.len().min(28 + 24 * reads.len() + 40));
            bytes.truncate(n);
        }
        Msg {
            label: format!(
                "{label}{}{}",
                if long { " long" } else { "" },
                lie_name(lie)
            ),
            xid,
            bytes,
            fills,
            offer,
            must_answer: lie == Lie::None,
            call: Some(call),
        }
    }

    /// Header bytes: xid, vers, credits, proc, then the three lists (RFC 8166 §4.3).
    fn encode(
        &mut self,
        xid: u32,
        proc_: u32,
        reads: &[(u32, Segment)],
        offer: &mut Offer,
        lie: Lie,
        v: &PeerView,
    ) -> Vec<u8> {
        let r = &mut self.rng;
        let mut e = Enc::default();
        let vers = if lie == Lie::Vers {
            *r.pick(BAD_VERS)
        } else {
            1
        };
        let proc_ = if lie == Lie::Proc {
            *r.pick(BAD_PROCS)
        } else {
            proc_
        };
        // Credits asked for: usually what was granted, else the edges (0, 1, huge).
        let credit = if r.chance(1, 2) {
            v.grant
        } else {
            *r.pick(CREDITS)
        };
        e.u32(xid).u32(vers).u32(credit).u32(proc_);
        // Which discriminator (counting every one written) lies.
        let liar = if lie == Lie::Discriminator {
            r.below(1 + reads.len() + offer.writes.len() + 3)
        } else {
            usize::MAX
        };
        let bad_disc = *r.pick(&[2, 3, 0x100, u32::MAX]);
        let mut k = 0usize;
        let mut disc = |e: &mut Enc, d: u32| {
            e.u32(if k == liar { bad_disc } else { d });
            k += 1;
        };
        let many = if lie == Lie::Many {
            33 + r.below(100)
        } else {
            0
        };
        for (pos, s) in reads {
            disc(&mut e, 1);
            e.u32(*pos);
            seg_bytes(&mut e, s);
        }
        for i in 0..if many > 0 && r.chance(1, 3) { many } else { 0 } {
            disc(&mut e, 1);
            e.u32(4 * i as u32);
            seg_bytes(
                &mut e,
                &Segment {
                    handle: v.rkey,
                    length: 4,
                    offset: v.source.0,
                },
            );
        }
        disc(&mut e, 0);
        let seg_lie = if lie == Lie::SegCount {
            r.below(offer.writes.len() + 1)
        } else {
            usize::MAX
        };
        let count_lie = *r.pick(&[0u32, 1, 2, 33, 0xffff, u32::MAX]);
        if many > 0 && r.chance(1, 2) {
            // Many write chunks, or one with many segments.
            let segs = if r.chance(1, 2) { 1 } else { many.min(64) };
            let chunks = if segs == 1 { many.min(64) } else { 1 };
            let seg = Segment {
                handle: v.rkey,
                length: 64,
                offset: v.sink.0,
            };
            offer.writes = vec![vec![seg; segs]; chunks];
        }
        for (i, segs) in offer.writes.iter().enumerate() {
            disc(&mut e, 1);
            let n = if i == seg_lie {
                count_lie
            } else {
                segs.len() as u32
            };
            e.u32(n);
            for s in segs {
                seg_bytes(&mut e, s);
            }
        }
        disc(&mut e, 0);
        match &offer.reply {
            Some(segs) => {
                disc(&mut e, 1);
                let n = if seg_lie == offer.writes.len() {
                    count_lie
                } else {
                    segs.len() as u32
                };
                e.u32(n);
                for s in segs {
                    seg_bytes(&mut e, s);
                }
            }
            None => disc(&mut e, 0),
        }
        e.0
    }

    /// A message that is not a call: an RPC REPLY for an XID the gateway never used
    /// (RFC 8167 backward direction), RDMA_DONE/RDMA_ERROR from the client, or bytes
    /// that do not make a header.
    pub fn stray(&mut self, xid: u32) -> Msg {
        let r = &mut self.rng;
        let mut e = Enc::default();
        let label;
        match r.below(4) {
            0 | 1 => {
                label = "RDMA callback REPLY, unknown xid";
                e.u32(xid).u32(1).u32(*r.pick(CREDITS)).u32(RDMA_MSG);
                e.u32(0).u32(0).u32(0);
                // RPC reply: accepted, AUTH_NONE verifier, then SUCCESS or garbage.
                e.u32(r.u32())
                    .u32(1)
                    .u32(0)
                    .u32(0)
                    .u32(0)
                    .u32(*r.pick(&[0, 1, 5, 99]));
                let n = 4 * r.below(8);
                let tail = r.bytes(n);
                e.0.extend_from_slice(&tail);
            }
            2 => {
                label = "RDMA_ERROR from the client";
                e.u32(xid).u32(1).u32(1).u32(RDMA_ERROR);
                e.u32(*r.pick(&[1, 2, 3, u32::MAX]));
                if r.chance(1, 2) {
                    e.u32(1).u32(1);
                }
            }
            _ => {
                label = "RDMA short or garbage";
                e.u32(xid);
                let n = r.below(64);
                let b = r.bytes(n);
                e.0.extend_from_slice(&b);
            }
        }
        Msg {
            label: label.into(),
            xid,
            bytes: e.0,
            fills: Vec::new(),
            offer: Offer::default(),
            must_answer: false,
            call: None,
        }
    }

    /// How many messages a burst sends: past the grant by 1 to 8 (or a short burst).
    pub fn burst_len(&mut self, grant: u32) -> usize {
        if self.rng.chance(1, 2) {
            2 + self.rng.below(6)
        } else {
            grant as usize + 1 + self.rng.below(8)
        }
    }
}

fn lie_name(l: Lie) -> &'static str {
    match l {
        Lie::None => "",
        Lie::Vers => " (bad vers)",
        Lie::Proc => " (bad proc)",
        Lie::Discriminator => " (lying discriminator)",
        Lie::SegCount => " (lying segment count)",
        Lie::Truncate => " (truncated header)",
        Lie::Many => " (too many entries)",
    }
}

/// Where a WRITE3args' data (after its length word) starts in `args` and its length,
/// if it parses.
fn write_data_at(args: &[u8]) -> Option<(usize, usize)> {
    let mut d = Dec::new(args);
    d.var(1 << 16)?;
    d.skip(16)?;
    let len = d.u32()? as usize;
    let at = args.len() - d.rest().len();
    // Only when the data is the rest of the call (its length true, padded).
    (d.rest().len() == (len + 3) & !3).then_some((at, len))
}

/// READ3args' count.
fn read_count(args: &[u8]) -> Option<u32> {
    let mut d = Dec::new(args);
    d.var(1 << 16)?;
    d.skip(8)?;
    d.u32()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz::structured::Gen;
    use engine::rpcrdma::wire::{decode, Chunks, DecodeError, Header, Limits};

    fn view() -> PeerView {
        PeerView {
            rkey: 0x1234,
            source: (0x10_0000, (1 << 20) + 8192),
            sink: (0x30_0000, (1 << 20) + 8192),
            reply: (0x50_0000, 256 << 10),
            inline: 1024,
            grant: 16,
        }
    }

    fn messages(seed: u64, n: usize) -> Vec<Msg> {
        let mut calls = Gen::new(seed, vec![vec![7; 28]], vec![vec![8; 28]], vec![]);
        let mut g = RdmaGen::new(seed);
        (0..n)
            .map(|i| g.message(calls.next(i), i as u32, &view()))
            .collect()
    }

    #[test]
    fn same_seed_same_messages() {
        let a = messages(5, 300);
        let b = messages(5, 300);
        assert!(a
            .iter()
            .zip(&b)
            .all(|(x, y)| x.bytes == y.bytes && x.fills == y.fills));
    }

    /// A message built true (no lie) decodes with the engine's own decoder, offers
    /// what it says, carries a Long call as a position-zero chunk and keeps WRITE data
    /// out of the inline part; the lies are drawn too.
    #[test]
    fn true_messages_decode_and_lies_occur() {
        let lim = Limits {
            max_read_segments: 1024,
            max_write_chunks: 1024,
            max_chunk_segments: 1024,
            max_chunk_bytes: u64::MAX,
        };
        let (mut truthful, mut lies, mut long) = (0, 0, 0);
        for m in messages(11, 3000) {
            let mut ch = Chunks::with_limits(&lim);
            let h = decode(&m.bytes, &lim, &mut ch);
            if !m.must_answer {
                lies += 1;
                continue;
            }
            // A spoiled segment may run past 2^64 (the decoder refuses it: ERR_CHUNK).
            let Ok(Header::Msg { fixed, payload_at }) = h else {
                assert!(
                    matches!(h, Err(DecodeError::Chunks(_))),
                    "{}: {h:?}",
                    m.label
                );
                continue;
            };
            truthful += 1;
            assert_eq!((fixed.xid, fixed.vers), (m.xid, 1), "{}", m.label);
            assert_eq!(ch.write_chunks.len(), m.offer.writes.len(), "{}", m.label);
            assert_eq!(
                ch.reply_segs.len(),
                m.offer.reply.as_ref().map_or(0, Vec::len)
            );
            if fixed.proc_ == RDMA_NOMSG {
                long += 1;
                assert_eq!(
                    payload_at,
                    m.bytes.len(),
                    "a Long call has no inline payload"
                );
                assert_eq!(ch.reads[0].position, 0);
            } else {
                assert!(
                    m.bytes.len() <= 1024 + 400,
                    "{}: {} bytes inline",
                    m.label,
                    m.bytes.len()
                );
            }
        }
        assert!(
            truthful > 1500 && lies > 300 && long > 100,
            "{truthful} {lies} {long}"
        );
    }

    #[test]
    fn private_data_covers_the_cases() {
        let mut g = RdmaGen::new(1);
        let all: Vec<Vec<u8>> = (0..500).map(|_| g.private_data()).collect();
        assert!(all.iter().any(Vec::is_empty));
        assert!(all
            .iter()
            .any(|p| p.len() == 8 && p[..5] == [0xf6, 0xab, 0x0e, 0x18, 1]));
        assert!(all
            .iter()
            .any(|p| p.len() == 8 && p[4] != 1 && p[..4] == [0xf6, 0xab, 0x0e, 0x18]));
        assert!(all.iter().all(|p| p.len() <= 56));
    }
}
