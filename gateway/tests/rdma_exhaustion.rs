//! Resource exhaustion, RDMA side: no set of RPC-over-RDMA clients can take a reactor's buffers
//! from TCP, replies or each other. Each connection's Receives are reserved from a
//! per-reactor receive budget at accept (fewer credits, down to `rdma.min_credits`,
//! when it is short; a reject below that), `rdma.max_connections` is a clean
//! RDMA-CM reject, and 64 RDMA connections plus 1,000 TCP connections working at once
//! on one reactor leave every pool buffer back afterwards.

mod common;

use common::*;
use engine::rpc;
use engine::rpcrdma::wire::{Chunks, ReadSegment, Segment};
use engine::xdr::XdrReader;
use std::net::TcpStream;
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// Receives of many connections at the configured 128 credits would hold every small
/// buffer after eight connections (8 x 128 = 1024) and starve the reactor. With the
/// budget, sixteen connections are all accepted and served, their grants together stay
/// within 3/4 of the class, and TCP and a new RDMA client are still answered.
#[test]
fn receives_of_many_rdma_connections_never_starve_tcp_or_a_new_client() {
    let gw = Gw::start(&GwOpts::default());
    let mut conns = Vec::new();
    for _ in 0..16 {
        conns.push(Raw::connect(gw.rdma));
    }
    let mut granted = 0u64;
    for (i, raw) in conns.iter_mut().enumerate() {
        let (grant, _) = call_inline(raw, 10 + i as u32, NFS, 0, &[]);
        assert!((1..=128).contains(&grant), "grant {grant}");
        granted += grant as u64;
    }
    assert!(
        granted <= 1024 * 3 / 4,
        "grants {granted} exceed the receive budget"
    );
    assert!(
        gw.in_use() <= 1024 * 3 / 4,
        "{} buffers held by idle connections",
        gw.in_use()
    );
    tcp_null_ok(gw.tcp_addr(), 5);
    null_ok(gw.rdma);
    drop(conns);
    gw.assert_buffers_back(Duration::from_secs(10));
}

/// A budget that cannot give even `rdma.min_credits` to one more connection refuses it
/// with a reject (not an accepted connection without Receives); after a disconnect the
/// reservation is back and a new connection is accepted.
#[test]
fn a_connection_the_receive_budget_cannot_hold_is_rejected_and_the_budget_comes_back() {
    // 64 small buffers: budget 48, floor 8 plus 2 Receives reserved for callback
    // replies (R8167-08) → at most 4 connections at 8 credits (64 connections
    // allowed, so each gets the floor).
    let gw = Gw::start(&GwOpts {
        small: 64,
        ..GwOpts::default()
    });
    let mut conns = Vec::new();
    for _ in 0..4 {
        conns.push(Raw::connect(gw.rdma));
    }
    for (i, raw) in conns.iter_mut().enumerate() {
        let (grant, _) = call_inline(raw, 10 + i as u32, NFS, 0, &[]);
        assert_eq!(grant, 8);
    }
    assert_eq!(Raw::try_connect(gw.rdma).err().as_deref(), Some("rejected"));
    tcp_null_ok(gw.tcp_addr(), 5);
    conns.pop();
    let mut again = retry_connect(&gw);
    call_inline(&mut again, 99, NFS, 0, &[]);
    drop(again);
    drop(conns);
    gw.assert_buffers_back(Duration::from_secs(10));
}

/// `rdma.max_connections`: the next request is rejected (RDMA-CM reject, a log line
/// and a counter), the live ones are served on, and a slot freed by a disconnect is
/// usable again.
#[test]
fn rdma_max_connections_is_a_clean_reject_and_a_freed_slot_is_reused() {
    let gw = Gw::start(&GwOpts {
        max_connections: 3,
        ..GwOpts::default()
    });
    let mut conns: Vec<Raw> = (0..3).map(|_| Raw::connect(gw.rdma)).collect();
    for _ in 0..3 {
        assert_eq!(Raw::try_connect(gw.rdma).err().as_deref(), Some("rejected"));
    }
    for (i, raw) in conns.iter_mut().enumerate() {
        call_inline(raw, 20 + i as u32, NFS, 0, &[]);
    }
    conns.remove(0);
    let mut again = retry_connect(&gw);
    call_inline(&mut again, 30, NFS, 0, &[]);
    drop(again);
    drop(conns);
    gw.assert_buffers_back(Duration::from_secs(10));
}

/// A peer that sends chunked WRITEs and then never answers the gateway's RDMA Reads
/// holds at most `MAX_PULLING` (8) reassembly buffers: without that cap its 100 calls
/// would hold every 64 KiB and 1 MiB buffer of the reactor and a good client's chunked
/// WRITE would wait forever. Everything returns once the peer is gone.
#[test]
fn a_peer_that_never_answers_rdma_reads_cannot_hold_every_reassembly_buffer() {
    const LEN: usize = 60 * 1024;
    let gw = Gw::start(&GwOpts::default());
    let mut good = Raw::connect(gw.rdma);
    let root = mount(&mut good);
    let fh = create(&mut good, 2, &root, "stall");
    let mut bad = Raw::connect(gw.rdma);
    let (addr, _) = bad.scratch(0);
    for x in 0..100u32 {
        let mut a = Vec::new();
        xdr_opaque(&mut a, &fh);
        a.extend(0u64.to_be_bytes());
        a.extend((LEN as u32).to_be_bytes());
        a.extend(0u32.to_be_bytes());
        a.extend((LEN as u32).to_be_bytes());
        let call = rpc_call(1000 + x, NFS, 7, &a);
        let mut c = Chunks::default();
        c.reads.push(ReadSegment {
            position: call.len() as u32,
            seg: Segment {
                handle: bad.mr.rkey,
                length: LEN as u32,
                offset: addr,
            },
        });
        assert!(bad.send(&msg(1000 + x, &c, &call)));
    }
    // `bad` never polls again, so its Reads are never answered.
    std::thread::sleep(Duration::from_millis(300));
    let data: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
    assert_eq!(write_chunked(&mut good, 3, &fh, &data), 0, "WRITE ok");
    assert_eq!(read_chunked(&mut good, 4, &fh, 4096), data[..4096]);
    tcp_null_ok(gw.tcp_addr(), 5);
    drop(bad);
    drop(good);
    gw.assert_buffers_back(Duration::from_secs(10));
}

/// The gateway notices a disconnect at its next poll: retry a rejected connect a few
/// times.
fn retry_connect(gw: &Gw) -> Raw {
    for _ in 0..100 {
        if let Ok(r) = Raw::try_connect(gw.rdma) {
            return r;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("the freed slot never became usable");
}

/// CREATE (UNCHECKED) name in dir → file handle.
fn create(raw: &mut Raw, xid: u32, dir: &[u8], name: &str) -> Vec<u8> {
    let mut a = Vec::new();
    xdr_opaque(&mut a, dir);
    xdr_opaque(&mut a, name.as_bytes());
    a.extend(0u32.to_be_bytes()); // UNCHECKED
    a.extend([0u8; 4 * 6]); // sattr3: nothing set
    let (_, res) = call_inline(raw, xid, NFS, 8, &a);
    let mut r = XdrReader::new(&res);
    assert_eq!(r.u32().unwrap(), 0, "CREATE ok");
    assert!(r.bool().unwrap(), "handle follows");
    r.opaque_var(64).unwrap().to_vec()
}

/// WRITE `data` at 0 through a read chunk (scratch 0); the reply's nfsstat3.
fn write_chunked(raw: &mut Raw, xid: u32, fh: &[u8], data: &[u8]) -> u32 {
    let (addr, s) = raw.scratch(0);
    s[..data.len()].copy_from_slice(data);
    let mut a = Vec::new();
    xdr_opaque(&mut a, fh);
    a.extend(0u64.to_be_bytes());
    a.extend((data.len() as u32).to_be_bytes());
    a.extend(2u32.to_be_bytes()); // FILE_SYNC
    a.extend((data.len() as u32).to_be_bytes());
    let call = rpc_call(xid, NFS, 7, &a);
    let mut c = Chunks::default();
    c.reads.push(ReadSegment {
        position: call.len() as u32,
        seg: Segment {
            handle: raw.mr.rkey,
            length: data.len() as u32,
            offset: addr,
        },
    });
    assert!(raw.send(&msg(xid, &c, &call)));
    let m = raw.recv(Duration::from_secs(20)).expect("a WRITE reply");
    let (_, payload) = parse(&m).expect("decodes");
    let (_, st, at) = rpc::decode_reply(&payload).unwrap();
    assert_eq!(st, rpc::ReplyStatus::Accepted(rpc::Accept::Success));
    u32::from_be_bytes(payload[at..at + 4].try_into().unwrap())
}

/// READ `len` at 0 with a one-segment write chunk in scratch 1; the bytes read.
fn read_chunked(raw: &mut Raw, xid: u32, fh: &[u8], len: usize) -> Vec<u8> {
    let (addr, s) = raw.scratch(1);
    s.fill(0xee);
    let mut c = Chunks::default();
    c.push_write_chunk(&[Segment {
        handle: raw.mr.rkey,
        length: len as u32,
        offset: addr,
    }]);
    let mut a = Vec::new();
    xdr_opaque(&mut a, fh);
    a.extend(0u64.to_be_bytes());
    a.extend((len as u32).to_be_bytes());
    assert!(raw.send(&msg(xid, &c, &rpc_call(xid, NFS, 6, &a))));
    let m = raw.recv(Duration::from_secs(20)).expect("a READ reply");
    let (_, payload) = parse(&m).expect("decodes");
    let (_, st, at) = rpc::decode_reply(&payload).unwrap();
    assert_eq!(st, rpc::ReplyStatus::Accepted(rpc::Accept::Success));
    assert_eq!(&payload[at..at + 4], &[0, 0, 0, 0], "READ ok");
    raw.scratch(1).1[..len].to_vec()
}

const RDMA_CONNS: usize = 64;
const TCP_THREADS: usize = 4;
const TCP_PER_THREAD: usize = 250;
const ROUNDS: usize = 8;

/// 64 soft-RDMA connections on one reactor (default credits and pools, so the budget
/// shrinks most grants to the floor) each doing NULL, GETATTR, a chunked WRITE and a
/// chunked READ (verified) at the same time as 1,000 TCP connections doing NULL and
/// GETATTR; then everything closes and every pool buffer is back.
#[test]
fn sixty_four_rdma_and_a_thousand_tcp_connections_at_once_then_every_buffer_is_back() {
    raise_nofile(4096);
    let gw = Gw::start(&GwOpts {
        tcp_max_connections: 1100,
        ..GwOpts::default()
    });
    let root = {
        let mut raw = Raw::connect(gw.rdma);
        mount(&mut raw)
    };
    gw.assert_buffers_back(Duration::from_secs(10));
    let start = Arc::new(Barrier::new(RDMA_CONNS + TCP_THREADS));
    let mut joins = Vec::new();
    for k in 0..RDMA_CONNS {
        let (addr, root, start) = (gw.rdma, root.clone(), start.clone());
        joins.push(std::thread::spawn(move || {
            let mut raw = Raw::connect(addr);
            let fh = create(&mut raw, 2, &root, &format!("f{k}"));
            start.wait();
            let mut getattr = Vec::new();
            xdr_opaque(&mut getattr, &root);
            for round in 0..ROUNDS as u32 {
                let x = 100 + round * 10;
                call_inline(&mut raw, x, NFS, 0, &[]);
                let (_, res) = call_inline(&mut raw, x + 1, NFS, 1, &getattr);
                assert_eq!(&res[..4], &[0, 0, 0, 0], "GETATTR ok");
                let data: Vec<u8> = (0..4096)
                    .map(|i| (i as u8) ^ (k as u8) ^ (round as u8))
                    .collect();
                assert_eq!(write_chunked(&mut raw, x + 2, &fh, &data), 0, "WRITE ok");
                assert_eq!(read_chunked(&mut raw, x + 3, &fh, 4096), data);
            }
        }));
    }
    for t in 0..TCP_THREADS {
        let (addr, root, start) = (gw.tcp_addr(), root.clone(), start.clone());
        joins.push(std::thread::spawn(move || {
            let mut streams: Vec<TcpStream> = (0..TCP_PER_THREAD)
                .map(|_| {
                    let s = TcpStream::connect(addr).expect("TCP connect");
                    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                    s
                })
                .collect();
            start.wait();
            let mut getattr = Vec::new();
            xdr_opaque(&mut getattr, &root);
            for (i, s) in streams.iter_mut().enumerate() {
                let xid = (t * TCP_PER_THREAD + i) as u32 * 2 + 1;
                for (x, proc_, args) in [(xid, 0, &[][..]), (xid + 1, 1, &getattr[..])] {
                    let reply = tcp_call(s, &rpc_call(x, NFS, proc_, args))
                        .unwrap_or_else(|e| panic!("TCP connection {i} of thread {t}: {e}"));
                    let (rx, st, at) = rpc::decode_reply(&reply).unwrap();
                    assert_eq!(
                        (rx, st),
                        (x, rpc::ReplyStatus::Accepted(rpc::Accept::Success))
                    );
                    if proc_ == 1 {
                        assert_eq!(&reply[at..at + 4], &[0, 0, 0, 0], "GETATTR ok");
                    }
                }
            }
        }));
    }
    for j in joins {
        j.join().expect("a client thread failed");
    }
    gw.assert_buffers_back(Duration::from_secs(20));
    null_ok(gw.rdma);
    tcp_null_ok(gw.tcp_addr(), 7);
    gw.assert_buffers_back(Duration::from_secs(10));
}

/// The RDMA side of "a client must not pin shared buffers by reading nothing": a peer
/// keeps to its credits (16 granted here), sends that many READs of 1 MiB (write
/// chunks of 1 MiB) and then never polls its queues, so on `soft` none of the replies'
/// RDMA Writes and Sends completes. Each READ reply holds a large buffer until its Send
/// completes; with credits the only bound (before the reply budget) the peer held all
/// 12 large buffers and a TCP client's 1 MiB READ came back short (64 KiB). With
/// `rdma.max_reply_mib` (8) it holds eight, the TCP READ is full, and every buffer
/// comes back when the peer goes.
#[test]
fn a_peer_that_never_completes_its_replies_does_not_pin_the_large_buffers() {
    let gw = Gw::start(&GwOpts {
        large: 12,
        ..GwOpts::default()
    });
    let mut good = Raw::connect(gw.rdma);
    let fh = big_file(&mut good);
    let mut bad = Raw::connect(gw.rdma);
    let grant = pin_with_reads(&mut bad, &fh);
    // `bad` never polls again: its replies' Writes and Sends never complete.
    std::thread::sleep(Duration::from_millis(500));
    let held = large_held(&gw);
    let count = tcp_read_mib(&gw, &fh);
    assert_eq!(
        count, MIB,
        "a TCP READ of 1 MiB answered {count} bytes while the RDMA peer ({grant} credits) holds {held} large buffers"
    );
    assert!(held <= 9, "the RDMA peer holds {held} large buffers");
    drop(bad);
    drop(good);
    gw.assert_buffers_back(Duration::from_secs(10));
}

/// `rdma.send_timeout_s` (1 s here): the peer of the test above, which keeps its
/// reply budget of large buffers for as long as it stays connected without it, is
/// disconnected once none of its replies completed for the timeout; the counter moves,
/// every large buffer is back, and a TCP client's 1 MiB READ and the other RDMA
/// client's READ are served in full.
#[test]
fn a_peer_that_never_completes_its_replies_is_closed_after_the_send_timeout() {
    let gw = Gw::start(&GwOpts {
        large: 12,
        rdma_extra: "send_timeout_s = 1".into(),
        ..GwOpts::default()
    });
    let mut good = Raw::connect(gw.rdma);
    let fh = big_file(&mut good);
    let mut bad = Raw::connect(gw.rdma);
    let start = std::time::Instant::now();
    pin_with_reads(&mut bad, &fh);
    std::thread::sleep(Duration::from_millis(300));
    let held = large_held(&gw);
    assert!(held >= 8, "the peer's replies hold {held} large buffers");
    let src = gw.server.as_ref().unwrap().stats_source();
    let k = gateway::stats::counters::GUARDS
        .iter()
        .position(|g| (g.0, g.1) == ("rdma", "send_timeout"))
        .expect("the rdma send_timeout guard");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while src.reactors[0].stats.guard(k) == 0 || large_held(&gw) > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "not closed: send_timeout counter {}, {} large buffers held",
            src.reactors[0].stats.guard(k),
            large_held(&gw)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(start.elapsed() >= Duration::from_secs(1), "closed early");
    assert_eq!(src.reactors[0].stats.guard(k), 1);
    assert_eq!(
        tcp_read_mib(&gw, &fh),
        MIB,
        "a TCP READ of 1 MiB after the close"
    );
    assert_eq!(read_chunked(&mut good, 20, &fh, 4096), vec![0u8; 4096]);
    drop(bad);
    drop(good);
    gw.assert_buffers_back(Duration::from_secs(10));
}

/// `rdma.stall_reclaim_ms` (default 1 s) with the default 30 s send timeout: eight
/// peers each pipeline their credits' worth of 1 MiB READs and never poll, so their
/// replies (each within its `rdma.max_reply_mib`) hold every large buffer of the
/// reactor, and without the reclaim a TCP client's and a good RDMA client's 1 MiB
/// READs come back short (64 KiB) until `rdma.send_timeout_s`. Their short READs find
/// the large class empty: that starvation closes the peers that took nothing for the
/// stall window (the peers' own READs beyond the large buffers find the class empty
/// too), and both READs are full and byte-exact again within seconds
/// (generous margins: the machine may be loaded); the counter `send_reclaimed` moved,
/// `send_timeout` did not, and every buffer is back afterwards.
#[test]
fn peers_that_never_take_their_replies_are_reclaimed_when_a_neighbour_starves() {
    const BAD: usize = 8;
    let gw = Gw::start(&GwOpts {
        large: 48,
        ..GwOpts::default()
    });
    let mut good = Raw::connect_big(gw.rdma, MIB as usize);
    let fh = big_file(&mut good);
    let data: Vec<u8> = (0..MIB as usize)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[0])
        .collect();
    tcp_write(&gw, &fh, 5 << 20, &data);
    assert_eq!(tcp_read(&gw, &fh, 5 << 20), data, "before the peers");
    assert_eq!(
        rdma_read_mib(&mut good, 5, &fh, 5 << 20),
        data,
        "before the peers"
    );
    let mut bad: Vec<Raw> = (0..BAD).map(|_| Raw::connect(gw.rdma)).collect();
    for b in bad.iter_mut() {
        pin_with_reads(b, &fh);
    }
    // The peers never poll again: none of their replies' Writes and Sends completes.
    let src = gw.server.as_ref().unwrap().stats_source();
    let guard = |reason: &str| {
        let k = gateway::stats::counters::GUARDS
            .iter()
            .position(|g| (g.0, g.1) == ("rdma", reason))
            .expect("an rdma guard");
        src.reactors[0].stats.guard(k)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while large_held(&gw) < 48 {
        assert!(
            std::time::Instant::now() < deadline,
            "the peers hold only {} large buffers",
            large_held(&gw)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Every large buffer is held: the peers' own further READs already find the class
    // empty (they are answered short), and so do ours until the reclaim.
    let starved = std::time::Instant::now();
    let deadline = starved + Duration::from_secs(20);
    let mut xid = 100;
    loop {
        let tcp = tcp_read(&gw, &fh, 5 << 20);
        xid += 1;
        let rdma = rdma_read_mib(&mut good, xid, &fh, 5 << 20);
        if tcp == data && rdma == data {
            break;
        }
        assert!(
            tcp.len() < data.len() || tcp == data,
            "a TCP READ returned wrong bytes"
        );
        assert!(
            rdma.len() < data.len() || rdma == data,
            "an RDMA READ returned wrong bytes"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "READs still short ({} TCP, {} RDMA bytes) after {:?}: send_reclaimed {}",
            tcp.len(),
            rdma.len(),
            starved.elapsed(),
            guard("send_reclaimed")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = starved.elapsed();
    assert!(
        guard("send_reclaimed") >= 1,
        "the reclaim counter did not move"
    );
    assert_eq!(
        guard("send_timeout"),
        0,
        "closed by the send timeout, not the reclaim"
    );
    assert!(
        took < Duration::from_secs(20),
        "full READs again only after {took:?}"
    );
    drop(bad);
    drop(good);
    gw.assert_buffers_back(Duration::from_secs(10));
}

/// The Read side of `rdma.stall_reclaim_ms` (default 1 s) with the default 30 s read
/// timeout: three peers each send `MAX_PULLING` (8) 1 MiB WRITEs whose data is in
/// read chunks and never poll, so on `soft` none of the gateway's RDMA Reads is
/// answered and their reassembly buffers hold all 24 large buffers of the reactor.
/// A good client's 1 MiB WRITE then finds the large class empty; without the reclaim
/// it waited for `rdma.read_timeout_s` (the fuzz campaign's "flood" measured up to
/// about three read timeouts). The starvation closes the peers that answered nothing
/// for the stall window, and the WRITE is answered within seconds (generous margins:
/// the machine may be loaded), byte-exact; the counter `read_reclaimed` moved,
/// `read_timeout` did not, and every buffer is back afterwards.
#[test]
fn peers_that_never_answer_rdma_reads_are_reclaimed_when_a_neighbours_write_starves() {
    const BAD: usize = 3;
    const PULLING: u32 = 8;
    let gw = Gw::start(&GwOpts {
        large: 24,
        ..GwOpts::default()
    });
    let mut good = Raw::connect_big(gw.rdma, MIB as usize);
    let fh = big_file(&mut good);
    let src = gw.server.as_ref().unwrap().stats_source();
    let guard = |reason: &str| {
        let k = gateway::stats::counters::GUARDS
            .iter()
            .position(|g| (g.0, g.1) == ("rdma", reason))
            .expect("an rdma guard");
        src.reactors[0].stats.guard(k)
    };
    let mut bad: Vec<Raw> = (0..BAD)
        .map(|_| Raw::connect_big(gw.rdma, MIB as usize))
        .collect();
    for (b, raw) in bad.iter_mut().enumerate() {
        for x in 0..PULLING {
            let xid = 3000 + 100 * b as u32 + x;
            let (call, c) = write_mib_call(raw, xid, &fh, u64::from(x) << 20);
            assert!(raw.send(&msg(xid, &c, &call)));
        }
    }
    // The peers never poll again: none of the gateway's Reads is answered.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while large_held(&gw) < 24 {
        assert!(
            std::time::Instant::now() < deadline,
            "the peers hold only {} large buffers",
            large_held(&gw)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let data: Vec<u8> = (0..MIB as usize)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[1])
        .collect();
    let start = std::time::Instant::now();
    let (call, c) = write_mib_call(&mut good, 10, &fh, 8 << 20);
    good.big().1.copy_from_slice(&data);
    assert!(good.send(&msg(10, &c, &call)));
    let m = good.recv(Duration::from_secs(15)).unwrap_or_else(|| {
        panic!(
            "no WRITE reply after {:?}: read_reclaimed {}, read_timeout {}, {} large buffers held",
            start.elapsed(),
            guard("read_reclaimed"),
            guard("read_timeout"),
            large_held(&gw)
        )
    });
    let took = start.elapsed();
    let (_, payload) = parse(&m).expect("decodes");
    let (rx, st, at) = rpc::decode_reply(&payload).unwrap();
    assert_eq!(
        (rx, st),
        (10, rpc::ReplyStatus::Accepted(rpc::Accept::Success))
    );
    assert_eq!(&payload[at..at + 4], &[0, 0, 0, 0], "WRITE ok");
    assert!(
        guard("read_reclaimed") >= 1,
        "the reclaim counter did not move"
    );
    assert_eq!(guard("read_timeout"), 0, "closed by the read timeout");
    assert!(
        took < Duration::from_secs(15),
        "WRITE answered after {took:?}"
    );
    assert_eq!(
        rdma_read_mib(&mut good, 11, &fh, 8 << 20),
        data,
        "the WRITE's bytes"
    );
    drop(bad);
    drop(good);
    gw.assert_buffers_back(Duration::from_secs(10));
}

/// A 1 MiB WRITE (FILE_SYNC) at `off` whose data is `raw`'s big area, as a read
/// chunk: the RPC call and its chunk lists.
fn write_mib_call(raw: &mut Raw, xid: u32, fh: &[u8], off: u64) -> (Vec<u8>, Chunks) {
    let (addr, area) = raw.big();
    assert!(area.len() >= MIB as usize, "made with Raw::connect_big");
    let mut a = Vec::new();
    xdr_opaque(&mut a, fh);
    a.extend(off.to_be_bytes());
    a.extend(MIB.to_be_bytes());
    a.extend(2u32.to_be_bytes()); // FILE_SYNC
    a.extend(MIB.to_be_bytes());
    let call = rpc_call(xid, NFS, 7, &a);
    let mut c = Chunks::default();
    c.reads.push(ReadSegment {
        position: call.len() as u32,
        seg: Segment {
            handle: raw.mr.rkey,
            length: MIB,
            offset: addr,
        },
    });
    (call, c)
}

/// WRITE (FILE_SYNC) `data` at `off` over TCP, in 512 KiB pieces (a record fits a
/// large buffer).
fn tcp_write(gw: &Gw, fh: &[u8], off: u64, data: &[u8]) {
    let mut s = gw.connect_tcp();
    for (k, piece) in data.chunks(512 * 1024).enumerate() {
        let mut a = Vec::new();
        xdr_opaque(&mut a, fh);
        a.extend((off + (k * 512 * 1024) as u64).to_be_bytes());
        a.extend((piece.len() as u32).to_be_bytes());
        a.extend(2u32.to_be_bytes()); // FILE_SYNC
        xdr_opaque(&mut a, piece);
        let r = tcp_call(&mut s, &rpc_call(50 + k as u32, NFS, 7, &a)).unwrap();
        let (_, st, at) = rpc::decode_reply(&r).unwrap();
        assert_eq!(st, rpc::ReplyStatus::Accepted(rpc::Accept::Success));
        assert_eq!(&r[at..at + 4], &[0, 0, 0, 0], "WRITE ok");
    }
}

/// A 1 MiB READ at `off` over TCP; the bytes it returned.
fn tcp_read(gw: &Gw, fh: &[u8], off: u64) -> Vec<u8> {
    let mut s = gw.connect_tcp();
    let mut a = Vec::new();
    xdr_opaque(&mut a, fh);
    a.extend(off.to_be_bytes());
    a.extend(MIB.to_be_bytes());
    let r = tcp_call(&mut s, &rpc_call(9, NFS, 6, &a)).unwrap();
    let (_, st, at) = rpc::decode_reply(&r).unwrap();
    assert_eq!(st, rpc::ReplyStatus::Accepted(rpc::Accept::Success));
    let mut x = XdrReader::new(&r[at..]);
    assert_eq!(x.u32().unwrap(), 0, "READ ok");
    if x.bool().unwrap() {
        x.skip(84).unwrap(); // fattr3
    }
    x.u32().unwrap(); // count
    x.bool().unwrap(); // eof
    x.opaque_var(MIB as usize).unwrap().to_vec()
}

/// A 1 MiB READ at `off` with a one-segment write chunk over `raw`'s big area; the
/// bytes it returned (the count's worth of the chunk).
fn rdma_read_mib(raw: &mut Raw, xid: u32, fh: &[u8], off: u64) -> Vec<u8> {
    let (addr, area) = raw.big();
    assert!(area.len() >= MIB as usize, "made with Raw::connect_big");
    area.fill(0xee);
    let mut c = Chunks::default();
    c.push_write_chunk(&[Segment {
        handle: raw.mr.rkey,
        length: MIB,
        offset: addr,
    }]);
    let mut a = Vec::new();
    xdr_opaque(&mut a, fh);
    a.extend(off.to_be_bytes());
    a.extend(MIB.to_be_bytes());
    assert!(raw.send(&msg(xid, &c, &rpc_call(xid, NFS, 6, &a))));
    let m = raw.recv(Duration::from_secs(20)).expect("a READ reply");
    let (_, payload) = parse(&m).expect("decodes");
    let (rx, st, at) = rpc::decode_reply(&payload).unwrap();
    assert_eq!(
        (rx, st),
        (xid, rpc::ReplyStatus::Accepted(rpc::Accept::Success))
    );
    let mut x = XdrReader::new(&payload[at..]);
    assert_eq!(x.u32().unwrap(), 0, "READ ok");
    if x.bool().unwrap() {
        x.skip(84).unwrap(); // fattr3
    }
    let count = x.u32().unwrap() as usize;
    raw.big().1[..count.min(MIB as usize)].to_vec()
}

const MIB: u32 = 1 << 20;

/// MOUNT, CREATE "big" and SETATTR its size to 64 MiB (sparse: READs return zeros of
/// the full count); its file handle.
fn big_file(good: &mut Raw) -> Vec<u8> {
    let root = mount(good);
    let fh = create(good, 2, &root, "big");
    let mut a = Vec::new();
    xdr_opaque(&mut a, &fh);
    a.extend([0u8; 12]); // mode, uid, gid: not set
    a.extend(1u32.to_be_bytes());
    a.extend((64u64 << 20).to_be_bytes());
    a.extend([0u8; 8]); // atime, mtime: DONT_CHANGE
    a.extend(0u32.to_be_bytes()); // no guard
    let (_, res) = call_inline(good, 3, NFS, 2, &a);
    assert_eq!(&res[..4], &[0, 0, 0, 0], "SETATTR ok");
    fh
}

/// The RDMA side of "a client must not pin shared buffers by reading nothing": `bad`
/// keeps to its credits (a peer exceeding them is disconnected) and sends that many
/// READs of 1 MiB (write chunks of 1 MiB), then never polls its queues, so on `soft`
/// none of the replies' RDMA Writes and Sends completes. Returns its grant.
fn pin_with_reads(bad: &mut Raw, fh: &[u8]) -> u32 {
    let (grant, _) = call_inline(bad, 4, NFS, 0, &[]);
    let (addr, _) = bad.scratch(0);
    for x in 0..grant.min(64) {
        let mut c = Chunks::default();
        c.push_write_chunk(&[Segment {
            handle: bad.mr.rkey,
            length: MIB,
            offset: addr,
        }]);
        let mut a = Vec::new();
        xdr_opaque(&mut a, fh);
        a.extend((u64::from(x) << 20).to_be_bytes());
        a.extend(MIB.to_be_bytes());
        assert!(bad.send(&msg(2000 + x, &c, &rpc_call(2000 + x, NFS, 6, &a))));
    }
    grant
}

/// Large (1 MiB) buffers of reactor 0 not free.
fn large_held(gw: &Gw) -> usize {
    let src = gw.server.as_ref().unwrap().stats_source();
    src.reactors[0]
        .pools
        .stats()
        .last()
        .map_or(0, |c| c.count - c.free)
}

/// A 1 MiB READ at 5 MiB over TCP; the count it returned.
fn tcp_read_mib(gw: &Gw, fh: &[u8]) -> u32 {
    let mut s = gw.connect_tcp();
    let mut a = Vec::new();
    xdr_opaque(&mut a, fh);
    a.extend((5u64 << 20).to_be_bytes());
    a.extend(MIB.to_be_bytes());
    let r = tcp_call(&mut s, &rpc_call(9, NFS, 6, &a)).unwrap();
    let (_, st, at) = rpc::decode_reply(&r).unwrap();
    assert_eq!(st, rpc::ReplyStatus::Accepted(rpc::Accept::Success));
    let mut x = XdrReader::new(&r[at..]);
    assert_eq!(x.u32().unwrap(), 0, "READ ok");
    if x.bool().unwrap() {
        x.skip(84).unwrap(); // fattr3
    }
    x.u32().unwrap()
}
