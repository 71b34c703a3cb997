//! A deterministic byte-mutation fuzz campaign of RPC-over-RDMA transport
//! headers against the real gateway (in-process, `soft` provider, one reactor).
//!
//! Seeds are valid calls (NULL, GETATTR, READ with a write chunk, WRITE with a read
//! chunk, a Long call with a Reply chunk) built on each connection's own registration;
//! a seeded xorshift mutates them (bit flips, interesting values in header words,
//! truncation, insertion and removal of words) and they are sent over a few
//! connections, reconnecting whenever the gateway closes one. Afterwards the gateway
//! must answer a good client over RDMA and TCP, every pool buffer must be back once
//! the connections are gone, and no thread may have panicked.
//!
//! CI mode: up to 6,000 messages or 40 s. Long mode (nights):
//! `NFSGW_FUZZ_DURATION_S=3600 cargo test --release -p gateway --test rdma_fuzz`
//! runs for that many seconds with no message cap; `NFSGW_FUZZ_SEED=<u64>` replays a
//! campaign (the seed is printed).

mod common;

use common::*;
use engine::rpcrdma::wire::{self, Chunks, ReadSegment, Segment};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const CONNS: usize = 3;
const CI_MESSAGES: u64 = 6000;
const CI_SECONDS: u64 = 40;
/// Values that sit on boundaries of the header's counts, lengths and offsets.
const INTERESTING: [u32; 16] = [
    0,
    1,
    2,
    3,
    4,
    16,
    17,
    28,
    0x7f,
    4096,
    1 << 20,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_fffe,
    0xffff_ffff,
    0xffff_0000,
];

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Valid calls for `raw`'s registration: the file `fh` has 4 KiB of data; scratch 2
/// holds the Long call's payload.
fn seeds(raw: &mut Raw, root: &[u8], fh: &[u8]) -> Vec<Vec<u8>> {
    let rkey = raw.mr.rkey;
    let (data_at, _) = raw.scratch(0);
    let (sink_at, _) = raw.scratch(1);
    let mut out = Vec::new();
    // NULL and GETATTR, inline.
    out.push(msg(1, &Chunks::default(), &rpc_call(1, NFS, 0, &[])));
    let mut getattr = Vec::new();
    xdr_opaque(&mut getattr, root);
    out.push(msg(2, &Chunks::default(), &rpc_call(2, NFS, 1, &getattr)));
    // READ 4096 at 0 into a two-segment write chunk.
    let mut read = Vec::new();
    xdr_opaque(&mut read, fh);
    read.extend(0u64.to_be_bytes());
    read.extend(4096u32.to_be_bytes());
    let mut c = Chunks::default();
    let seg = |offset, length| Segment {
        handle: rkey,
        length,
        offset,
    };
    c.push_write_chunk(&[seg(sink_at, 1024), seg(sink_at + 1024, 3072)]);
    out.push(msg(3, &c, &rpc_call(3, NFS, 6, &read)));
    // WRITE 512 bytes at 4096 through a read chunk.
    let mut write = Vec::new();
    xdr_opaque(&mut write, fh);
    write.extend(4096u64.to_be_bytes());
    write.extend(512u32.to_be_bytes());
    write.extend(0u32.to_be_bytes()); // UNSTABLE
    write.extend(512u32.to_be_bytes());
    let call = rpc_call(4, NFS, 7, &write);
    let mut c = Chunks::default();
    c.reads.push(ReadSegment {
        position: call.len() as u32,
        seg: seg(data_at, 512),
    });
    out.push(msg(4, &c, &call));
    // Long call: GETATTR as a position-zero read chunk, with a Reply chunk.
    let long = rpc_call(5, NFS, 1, &getattr);
    let (long_at, s) = raw.scratch(2);
    s[..long.len()].copy_from_slice(&long);
    let mut c = Chunks::default();
    c.reads.push(ReadSegment {
        position: 0,
        seg: seg(long_at, long.len() as u32),
    });
    c.set_reply_chunk(&[seg(sink_at + 8192, 4096)]);
    out.push(header(5, wire::RDMA_NOMSG, &c));
    out
}

/// One to three mutations of `m`, mostly inside its transport header (`hdr` bytes).
fn mutate(rng: &mut Rng, m: &mut Vec<u8>, hdr: usize) {
    for _ in 0..1 + rng.below(3) {
        let span = if rng.below(10) < 8 { hdr } else { m.len() }.max(4);
        match rng.below(6) {
            0 => {
                // Flip bits of a few bytes.
                for _ in 0..1 + rng.below(4) {
                    if m.is_empty() {
                        break;
                    }
                    let i = rng.below(span.min(m.len()));
                    m[i] ^= 1 << rng.below(8);
                }
            }
            1 | 2 => {
                // An interesting (or random) value in an aligned word.
                let w = rng.below(span / 4) * 4;
                if w + 4 <= m.len() {
                    let v = if rng.below(4) == 0 {
                        rng.next() as u32
                    } else {
                        INTERESTING[rng.below(INTERESTING.len())]
                    };
                    m[w..w + 4].copy_from_slice(&v.to_be_bytes());
                }
            }
            3 => {
                let n = rng.below(m.len() + 1);
                m.truncate(n);
            }
            4 => {
                // Insert 1-6 words (random or copied from the header).
                let at = (rng.below(span / 4) * 4).min(m.len());
                let words: Vec<u8> = (0..4 * (1 + rng.below(6)))
                    .map(|_| rng.next() as u8)
                    .collect();
                m.splice(at..at, words);
            }
            _ => {
                // Remove 1-3 words.
                let at = rng.below(span / 4) * 4;
                let end = (at + 4 * (1 + rng.below(3))).min(m.len());
                if at < end {
                    m.drain(at..end);
                }
            }
        }
    }
}

/// Header length of a seed (for aiming mutations): where its RPC payload starts.
fn header_len(m: &[u8]) -> usize {
    let mut c = Chunks::with_limits(&wire::Limits::default());
    match wire::decode(m, &wire::Limits::default(), &mut c) {
        Ok(wire::Header::Msg { payload_at, .. }) => payload_at,
        _ => m.len(),
    }
}

struct Peer {
    raw: Raw,
    seeds: Vec<Vec<u8>>,
}

fn open_peer(gw: &Gw, root: &[u8], fh: &[u8]) -> Peer {
    for _ in 0..200 {
        if let Ok(mut raw) = Raw::try_connect(gw.rdma) {
            let seeds = seeds(&mut raw, root, fh);
            return Peer { raw, seeds };
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the gateway stopped accepting RDMA connections");
}

#[derive(Debug, Default)]
struct Tally {
    sent: u64,
    replies: u64,
    errors: u64,
    reconnects: u64,
}

#[test]
fn rdma_header_fuzz_campaign_never_stops_the_gateway_nor_leaks_a_buffer() {
    count_panics();
    let seed = env_u64("NFSGW_FUZZ_SEED").unwrap_or(0x9e37_79b9_7f4a_7c15);
    let long = env_u64("NFSGW_FUZZ_DURATION_S");
    let (max_messages, duration) = match long {
        Some(s) => (u64::MAX, Duration::from_secs(s)),
        None => (CI_MESSAGES, Duration::from_secs(CI_SECONDS)),
    };
    eprintln!("rdma fuzz: seed {seed:#x}, up to {max_messages} messages / {duration:?}");
    let gw = Gw::start(&GwOpts {
        credits: 32,
        ..GwOpts::default()
    });
    let (root, fh) = {
        let mut raw = Raw::connect(gw.rdma);
        let root = mount(&mut raw);
        let mut a = Vec::new();
        xdr_opaque(&mut a, &root);
        xdr_opaque(&mut a, b"fuzz");
        a.extend(0u32.to_be_bytes());
        a.extend([0u8; 24]);
        let (_, res) = call_inline(&mut raw, 2, NFS, 8, &a);
        assert_eq!(&res[..8], &[0, 0, 0, 0, 0, 0, 0, 1], "CREATE ok");
        let fh = res[12..12 + u32::from_be_bytes(res[8..12].try_into().unwrap()) as usize].to_vec();
        (root, fh)
    };
    let mut rng = Rng(seed | 1);
    let mut peers: Vec<Peer> = (0..CONNS).map(|_| open_peer(&gw, &root, &fh)).collect();
    // The READ seed needs data in the file: send the WRITE seed unmutated first.
    {
        let p = &mut peers[0];
        let w = p.seeds[3].clone();
        assert!(p.raw.send(&w));
        assert!(p.raw.recv(Duration::from_secs(10)).is_some(), "WRITE seed");
    }
    let mut t = Tally::default();
    let start = Instant::now();
    while t.sent < max_messages && start.elapsed() < duration {
        let k = rng.below(CONNS);
        if peers[k].raw.disconnected {
            peers[k] = open_peer(&gw, &root, &fh);
            t.reconnects += 1;
        }
        let p = &mut peers[k];
        let mut m = p.seeds[rng.below(p.seeds.len())].clone();
        // One in ten goes out intact: the connection must still serve good calls.
        if rng.below(10) != 0 {
            let hdr = header_len(&m);
            mutate(&mut rng, &mut m, hdr);
        }
        if !p.raw.send(&m) {
            p.raw.disconnected = true;
            continue;
        }
        t.sent += 1;
        // Collect what comes back (polling also serves the gateway's RDMA Reads).
        while let Some(r) = p.raw.recv(Duration::from_millis(2)) {
            t.replies += 1;
            if r.len() >= 16 && r[12..16] == wire::RDMA_ERROR.to_be_bytes() {
                t.errors += 1;
            }
        }
        if t.sent % 1000 == 0 {
            null_ok(gw.rdma);
            assert_eq!(PANICS.load(Ordering::SeqCst), 0, "a thread panicked");
        }
    }
    eprintln!("rdma fuzz: {t:?} in {:?}", start.elapsed());
    assert!(
        t.sent >= 1000.min(max_messages),
        "campaign too short: {t:?}"
    );
    assert!(
        t.errors > 0,
        "no mutation ever reached the header checks: {t:?}"
    );
    assert!(t.replies > t.errors, "no good call answered: {t:?}");
    drop(peers);
    null_ok(gw.rdma);
    tcp_null_ok(gw.tcp_addr(), 3);
    gw.assert_buffers_back(Duration::from_secs(20));
    assert_eq!(PANICS.load(Ordering::SeqCst), 0, "a thread panicked");
}
