//! Campaign 2: byte mutations of valid calls. A record from the structured generator
//! gets 1-4 mutations (bit flips, interesting bytes, inserts, deletes, truncation,
//! 32-bit words set to extreme lengths, duplicated ranges) in its body or in its
//! record-marking header (extreme lengths, a cleared last-fragment bit, the body split
//! into many fragments). [`framing`] then says what the server must do with the bytes:
//! a complete framing must be answered or closed, an incomplete one may be held.

use super::rng::Rng;
use super::wire::LAST_FRAG;

/// 32-bit values that break length fields.
const WORDS: &[u32] = &[
    0,
    1,
    3,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    0xffff_fffc,
    0x0010_0000,
    0x0010_1001,
];
const BYTES: &[u8] = &[0, 1, 0x7f, 0x80, 0xff];

/// Mutates a record (`rec` = record mark + body). The result may be framed any way.
pub fn mutate(r: &mut Rng, rec: &[u8]) -> Vec<u8> {
    let mut body = rec.get(4..).unwrap_or_default().to_vec();
    for _ in 0..1 + r.below(4) {
        body_mutation(r, &mut body);
    }
    // Most records are re-framed correctly so the mutation reaches the RPC and NFS
    // decoders; the rest get a hostile record mark.
    match r.below(10) {
        0 => {
            // One fragment whose length is a lie.
            let len = body.len() as u32;
            let lie = match r.below(5) {
                0 => len.wrapping_add(1),
                1 => len.saturating_sub(1),
                2 => 0,
                3 => 0x7fff_ffff,
                _ => (1 << 20) + 64 * 1024 + 1,
            };
            let mut out = (lie | LAST_FRAG).to_be_bytes().to_vec();
            out.extend_from_slice(&body);
            out
        }
        1 => {
            // No last-fragment bit: the server must wait for (or refuse) more.
            let mut out = (body.len() as u32).to_be_bytes().to_vec();
            out.extend_from_slice(&body);
            out
        }
        2 => split(r, &body),
        3 => {
            // Leading zero-length fragments, then the record.
            let mut out = Vec::new();
            for _ in 0..1 + r.below(3) {
                out.extend_from_slice(&0u32.to_be_bytes());
            }
            out.extend_from_slice(&(body.len() as u32 | LAST_FRAG).to_be_bytes());
            out.extend_from_slice(&body);
            out
        }
        _ => {
            let mut out = (body.len() as u32 | LAST_FRAG).to_be_bytes().to_vec();
            out.extend_from_slice(&body);
            out
        }
    }
}

/// The body as several fragments of random sizes (a valid framing).
fn split(r: &mut Rng, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        let n = (1 + r.below(64)).min(body.len() - at);
        let last = at + n == body.len();
        let mark = n as u32 | if last { LAST_FRAG } else { 0 };
        out.extend_from_slice(&mark.to_be_bytes());
        out.extend_from_slice(&body[at..at + n]);
        at += n;
        if last {
            return out;
        }
    }
}

fn body_mutation(r: &mut Rng, b: &mut Vec<u8>) {
    let len = b.len();
    match r.below(8) {
        0 if len > 0 => {
            let i = r.below(len);
            b[i] ^= 1 << r.below(8);
        }
        1 if len > 0 => {
            let i = r.below(len);
            b[i] = *r.pick(BYTES);
        }
        2 => {
            let i = r.below(len + 1);
            let n = 1 + r.below(16);
            let ins = r.bytes(n);
            b.splice(i..i, ins);
        }
        3 if len > 0 => {
            let i = r.below(len);
            let n = (1 + r.below(16)).min(len - i);
            b.drain(i..i + n);
        }
        4 => b.truncate(r.below(len + 1)),
        5 | 6 if len >= 4 => {
            // An aligned word (where XDR keeps every length) set to an extreme.
            let i = r.below(len / 4) * 4;
            let w = match r.below(3) {
                0 => (len as u32).wrapping_add(r.below(9) as u32).wrapping_sub(4),
                _ => *r.pick(WORDS),
            };
            b[i..i + 4].copy_from_slice(&w.to_be_bytes());
        }
        _ if len > 0 => {
            let i = r.below(len);
            let n = (1 + r.below(32)).min(len - i);
            let dup = b[i..i + n].to_vec();
            b.splice(i..i, dup);
        }
        _ => b.push(0),
    }
}

/// What the framing of bytes sent on a fresh connection obliges the server to do.
#[derive(Debug, PartialEq, Eq)]
pub enum Framing {
    /// Every byte belongs to a complete record: each must be answered, dropped or the
    /// connection closed, and a call after them must then be answered or closed.
    Complete,
    /// A record is unfinished: the server may hold the connection until
    /// `tcp.record_timeout_s`, then must close it.
    Incomplete,
    /// A record's fragments add up to more than `max_record`: the server must close
    /// the connection without waiting for the rest.
    TooLong,
}

/// Walks the record marks of `bytes` (RFC 5531 §11).
pub fn framing(bytes: &[u8], max_record: usize) -> Framing {
    let mut at = 0usize;
    let mut rec = 0usize;
    while at < bytes.len() {
        let Some(h) = bytes.get(at..at + 4) else {
            return Framing::Incomplete;
        };
        let h = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        let n = (h & !LAST_FRAG) as usize;
        at += 4;
        rec = rec.saturating_add(n);
        if rec > max_record {
            return Framing::TooLong;
        }
        if bytes.len() - at < n {
            return Framing::Incomplete;
        }
        at += n;
        if h & LAST_FRAG != 0 {
            rec = 0;
        } else if at == bytes.len() {
            return Framing::Incomplete;
        }
    }
    Framing::Complete
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(body: &[u8]) -> Vec<u8> {
        let mut r = (body.len() as u32 | LAST_FRAG).to_be_bytes().to_vec();
        r.extend_from_slice(body);
        r
    }

    #[test]
    fn framing_walk() {
        assert_eq!(framing(&rec(&[1; 8]), 100), Framing::Complete);
        assert_eq!(framing(&rec(&[1; 200]), 100), Framing::TooLong);
        assert_eq!(framing(&[0x80, 0, 0, 200], 100), Framing::TooLong);
        let mut two = rec(&[1; 8]);
        two.extend(rec(&[]));
        assert_eq!(framing(&two, 100), Framing::Complete);
        assert_eq!(framing(&[0, 0, 0, 4, 1, 2, 3, 4], 100), Framing::Incomplete);
        assert_eq!(framing(&[0x80, 0, 0, 9, 1], 100), Framing::Incomplete);
        assert_eq!(framing(&[0x80, 0], 100), Framing::Incomplete);
        let mut r = Rng::new(4);
        for _ in 0..50 {
            assert_eq!(framing(&split(&mut r, &[7; 300]), 1000), Framing::Complete);
        }
    }

    #[test]
    fn mutations_change_the_record_and_are_seeded() {
        let base = rec(&[0x11; 120]);
        let a: Vec<Vec<u8>> = {
            let mut r = Rng::new(2);
            (0..100).map(|_| mutate(&mut r, &base)).collect()
        };
        let mut r = Rng::new(2);
        let b: Vec<Vec<u8>> = (0..100).map(|_| mutate(&mut r, &base)).collect();
        assert_eq!(a, b);
        assert!(a.iter().filter(|m| **m != base).count() > 90);
        assert!(a.iter().any(|m| framing(m, 1 << 20) == Framing::Incomplete));
        assert!(a.iter().any(|m| framing(m, 1 << 20) == Framing::TooLong));
    }
}
