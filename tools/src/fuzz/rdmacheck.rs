//! Campaign `rdma`'s data check, run every [`EVERY`] messages between the hostile
//! ones: on a fresh connection, a FILE_SYNC WRITE whose data the gateway pulls through
//! a two-segment read chunk, then a READ of it pushed through a two-segment write
//! chunk, must return the bytes written (no lost or misplaced data while hostile peers
//! come and go). The file lives in the canary's directory, whose handle the
//! generators never get.

use super::rdmapeer::{Area, Event, Peer};
use super::rng::Rng;
use super::wire::{self, call_record, Cred, Dec, Enc, NFS_PROG};
use engine::rpcrdma::wire::{self as rw, Chunks, Header, Limits, Segment};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Messages between two data checks.
pub const EVERY: usize = 500;
/// Sizes cycled through: odd ones cross the segment split and the XDR pad.
const SIZES: [usize; 6] = [1, 4095, 8195, 65_543, 300_001, 1 << 20];

fn header(xid: u32, reads: &[(u32, Segment)], write: Option<&[Segment]>) -> Vec<u8> {
    let mut e = Enc::default();
    e.u32(xid).u32(1).u32(16).u32(rw::RDMA_MSG);
    for (pos, s) in reads {
        e.u32(1).u32(*pos).u32(s.handle).u32(s.length).u64(s.offset);
    }
    e.u32(0);
    if let Some(segs) = write {
        e.u32(1).u32(segs.len() as u32);
        for s in segs {
            e.u32(s.handle).u32(s.length).u64(s.offset);
        }
    }
    e.u32(0).u32(0);
    e.0
}

/// `len` bytes at `at` as two segments of peer `p`.
fn two(p: &Peer, at: (u64, usize), len: usize) -> [Segment; 2] {
    let first = (len / 2) & !3;
    let s = |off: usize, n: usize| Segment {
        handle: p.mr.rkey,
        length: n as u32,
        offset: at.0 + off as u64,
    };
    [s(0, first), s(first, len - first)]
}

/// The reply to `xid`: its header's write chunk (if any) and the RPC result body.
fn reply(p: &mut Peer, xid: u32, timeout: Duration) -> Result<(Vec<Segment>, Vec<u8>), String> {
    loop {
        match p.recv(timeout) {
            Event::Msg(m) => {
                let lim = Limits::default();
                let mut ch = Chunks::with_limits(&lim);
                let Ok(Header::Msg { fixed, payload_at }) = rw::decode(&m, &lim, &mut ch) else {
                    return Err(format!(
                        "not an RDMA_MSG reply: {}",
                        super::campaign::hex(&m)
                    ));
                };
                if fixed.xid != xid {
                    continue;
                }
                let segs = if ch.write_chunks.is_empty() {
                    Vec::new()
                } else {
                    ch.write_chunk(0).to_vec()
                };
                let rep = wire::parse_reply(&m[payload_at..]).ok_or("not an RPC reply")?;
                if rep.accept != Some(0) {
                    return Err(format!("accept_stat {:?}", rep.accept));
                }
                return Ok((segs, rep.body.to_vec()));
            }
            Event::Closed => return Err("connection closed".into()),
            Event::Timeout => return Err(format!("no reply within {timeout:?}")),
        }
    }
}

/// One WRITE + READ round trip of `round`'s size and seeded data at a fresh offset.
pub fn write_read(
    addr: SocketAddr,
    fh: &[u8],
    seed: u64,
    round: usize,
    timeout: Duration,
) -> Result<(), String> {
    // Refused while the gateway is at `rdma.max_connections` (a flood): the refusal is
    // right, and the reaped flood must make room within the timeout.
    let end = Instant::now() + timeout;
    let mut p = loop {
        match Peer::connect(addr, &[], timeout) {
            Ok(p) => break p,
            Err(e) if e == "rejected" && Instant::now() < end => {
                std::thread::sleep(Duration::from_millis(100))
            }
            Err(e) => return Err(format!("connect: {e}")),
        }
    };
    let n = SIZES[round % SIZES.len()];
    let data = Rng::new(seed ^ round as u64).bytes(n);
    let offset = (round as u64) * 512 * 1024 + (round as u64 % 7);
    // WRITE3args: fh, offset, count, FILE_SYNC, data (length inline, bytes in the chunk).
    let mut a = Enc::default();
    a.var(fh).u64(offset).u32(n as u32).u32(2).u32(n as u32);
    let xid = 0x7772_0000 | (round as u32 & 0xffff);
    let body = call_record(xid, NFS_PROG, 3, 7, &Cred::root(), &a.0);
    p.fill(Area::Source, 0, &data);
    let pos = (body.len() - 4) as u32;
    let reads: Vec<(u32, Segment)> = two(&p, p.area(Area::Source), n)
        .iter()
        .map(|s| (pos, *s))
        .collect();
    let mut m = header(xid, &reads, None);
    m.extend_from_slice(&body[4..]);
    if !p.send(&m) {
        return Err("WRITE not sent".into());
    }
    let (_, res) = reply(&mut p, xid, timeout).map_err(|e| format!("WRITE of {n} bytes: {e}"))?;
    let mut d = Dec::new(&res);
    if d.u32() != Some(0) {
        return Err(format!(
            "WRITE of {n} bytes at {offset}: status {:?}",
            Dec::new(&res).u32()
        ));
    }
    // READ3args, the result pushed into a write chunk.
    let mut a = Enc::default();
    a.var(fh).u64(offset).u32(n as u32);
    let xid = xid | 0x8000;
    let body = call_record(xid, NFS_PROG, 3, 6, &Cred::root(), &a.0);
    p.fill(Area::Sink, 0, &vec![0u8; n]);
    let segs = two(&p, p.area(Area::Sink), (n + 3) & !3);
    let mut m = header(xid, &[], Some(&segs));
    m.extend_from_slice(&body[4..]);
    if !p.send(&m) {
        return Err("READ not sent".into());
    }
    let (got, res) = reply(&mut p, xid, timeout).map_err(|e| format!("READ of {n} bytes: {e}"))?;
    if Dec::new(&res).u32() != Some(0) {
        return Err(format!(
            "READ of {n} bytes at {offset}: status {:?}",
            Dec::new(&res).u32()
        ));
    }
    let returned: u64 = got.iter().map(|s| s.length as u64).sum();
    if returned < n as u64 {
        return Err(format!(
            "READ of {n} bytes returned {returned} in its write chunk"
        ));
    }
    let back = p.read(Area::Sink, 0, n);
    if back != data.as_slice() {
        let at = back.iter().zip(&data).position(|(x, y)| x != y);
        return Err(format!(
            "READ of {n} bytes at {offset} differs from the WRITE at byte {at:?}"
        ));
    }
    Ok(())
}

/// A peer of the flood: connected, its WRITEs sent, never polled again.
pub struct Flooder(#[allow(dead_code)] Peer);

/// Halfway through campaign `rdma`: `n` connections (past `rdma.max_connections` when
/// `n` > 64: those are refused) each send 1-4 FILE_SYNC WRITEs of 1 MiB whose data sits
/// in read chunks, and never poll again, so the gateway's RDMA Reads stay unanswered
/// and each connection holds its reassembly buffers (up to 8 large ones) until
/// `rdma.read_timeout_s` reaps it. Returns the peers (dropping them disconnects) and
/// how many connections were refused.
pub fn flood(
    addr: SocketAddr,
    fh: &[u8],
    r: &mut Rng,
    n: usize,
    timeout: Duration,
) -> (Vec<Flooder>, usize) {
    let mut out = Vec::with_capacity(n);
    let mut refused = 0;
    for k in 0..n {
        let Ok(mut p) = Peer::connect(addr, &[], timeout) else {
            refused += 1;
            continue;
        };
        let len = 1 << 20;
        let (src, _) = p.area(Area::Source);
        for w in 0..1 + r.below(4) {
            let mut a = Enc::default();
            let offset = (k * 4 + w) as u64 * len as u64;
            a.var(fh).u64(offset).u32(len as u32).u32(2).u32(len as u32);
            let xid = 0x666c_0000 | ((k * 4 + w) as u32);
            let body = call_record(xid, NFS_PROG, 3, 7, &Cred::root(), &a.0);
            let pos = (body.len() - 4) as u32;
            let seg = Segment {
                handle: p.mr.rkey,
                length: len as u32,
                offset: src,
            };
            let mut m = header(xid, &[(pos, seg)], None);
            m.extend_from_slice(&body[4..]);
            p.send(&m);
        }
        out.push(Flooder(p));
    }
    (out, refused)
}
