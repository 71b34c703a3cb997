//! Tests of the soft provider: the trait's semantics, error paths, faults, idle/wake,
//! and a second process.

use super::*;
use crate::fabric::{access, ConnRequest, Op, PrivateData, WcOpcode, WcStatus};
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::mpsc;

const TIMEOUT: Duration = Duration::from_secs(10);
const RW: u32 = access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ;
const LW: u32 = access::LOCAL_WRITE;

/// A listen address no other test (or concurrent run of this binary) uses.
fn test_addr() -> SocketAddr {
    static PORT: AtomicU16 = AtomicU16::new(1000);
    let pid = std::process::id();
    let ip = Ipv4Addr::new(127, (pid >> 16) as u8, (pid >> 8) as u8, pid as u8);
    SocketAddr::new(ip.into(), PORT.fetch_add(1, Ordering::Relaxed))
}

const NO_WC: Completion = Completion {
    wr_id: 0,
    qp: Qp(0),
    status: WcStatus::Success,
    opcode: WcOpcode::Recv,
    byte_len: 0,
    invalidated: None,
    vendor_err: 0,
};

/// A fabric plus what its polls returned so far.
struct Node {
    f: SoftFabric,
    wcs: Vec<Completion>,
    evs: Vec<CmEvent>,
}

impl Node {
    fn new() -> Node {
        Node::with(SoftOptions::default())
    }

    fn with(opts: SoftOptions) -> Node {
        Node {
            f: SoftFabric::with_options(opts).unwrap(),
            wcs: Vec::new(),
            evs: Vec::new(),
        }
    }

    /// Events first, then completions: flushes queued with a `Disconnected` are
    /// collected in the same call.
    fn poll(&mut self) {
        while let Some(e) = self.f.poll_cm() {
            self.evs.push(e);
        }
        let mut out = [NO_WC; 16];
        loop {
            let n = self.f.poll_cq(&mut out);
            self.wcs.extend_from_slice(&out[..n]);
            if n < out.len() {
                break;
            }
        }
    }

    fn has_wc(&self, wr_id: u64) -> bool {
        self.wcs.iter().any(|c| c.wr_id == wr_id)
    }

    /// The one completion of `wr_id` (asserting there is exactly one).
    fn wc(&mut self, wr_id: u64) -> Completion {
        let all: Vec<_> = self
            .wcs
            .iter()
            .filter(|c| c.wr_id == wr_id)
            .copied()
            .collect();
        assert_eq!(all.len(), 1, "completions of wr {wr_id}: {all:?}");
        self.wcs.retain(|c| c.wr_id != wr_id);
        all[0]
    }

    fn disconnects(&self, qp: Qp) -> usize {
        let is = |e: &&CmEvent| matches!(e, CmEvent::Disconnected { qp: q } if *q == qp);
        self.evs.iter().filter(is).count()
    }

    fn established(&self, qp: Qp) -> Option<(PrivateData, u8)> {
        self.evs.iter().find_map(|e| match *e {
            CmEvent::Established {
                qp: q,
                private_data,
                initiator_depth,
            } if q == qp => Some((private_data, initiator_depth)),
            _ => None,
        })
    }

    fn take_request(&mut self) -> Option<ConnRequest> {
        let i = self
            .evs
            .iter()
            .position(|e| matches!(e, CmEvent::ConnectRequest(_)))?;
        match self.evs.remove(i) {
            CmEvent::ConnectRequest(r) => Some(r),
            _ => None,
        }
    }
}

/// Polls both nodes until `done` holds (panics after `TIMEOUT`).
fn spin(a: &mut Node, b: &mut Node, mut done: impl FnMut(&mut Node, &mut Node) -> bool) {
    let t0 = Instant::now();
    loop {
        a.poll();
        b.poll();
        if done(a, b) {
            return;
        }
        assert!(
            t0.elapsed() < TIMEOUT,
            "timed out; a: {:?} {:?}; b: {:?} {:?}",
            a.wcs,
            a.evs,
            b.wcs,
            b.evs
        );
    }
}

fn spin1(a: &mut Node, mut done: impl FnMut(&mut Node) -> bool) {
    let t0 = Instant::now();
    loop {
        a.poll();
        if done(a) {
            return;
        }
        assert!(t0.elapsed() < TIMEOUT, "timed out; {:?} {:?}", a.wcs, a.evs);
    }
}

/// Two connected nodes: `a` connected to `b`.
struct Pair {
    a: Node,
    b: Node,
    qa: Qp,
    qb: Qp,
}

fn pair() -> Pair {
    pair_with(SoftOptions::default(), QpCaps::default())
}

fn pair_with(opts: SoftOptions, caps: QpCaps) -> Pair {
    let addr = test_addr();
    let mut a = Node::with(opts.clone());
    let mut b = Node::with(opts);
    b.f.listen(addr).unwrap();
    let qa = a.f.connect(addr, &caps, b"req").unwrap();
    let mut qb = None;
    spin(&mut a, &mut b, |a, b| {
        if let Some(r) = b.take_request() {
            qb = Some(b.f.accept(r.id, &caps, b"acc").unwrap());
        }
        qb.is_some_and(|qb| b.established(qb).is_some()) && a.established(qa).is_some()
    });
    a.evs.clear();
    b.evs.clear();
    Pair {
        a,
        b,
        qa,
        qb: qb.unwrap(),
    }
}

/// Registered test memory: `len` bytes inside `guard` canary bytes (0xEE) each side.
struct Region {
    buf: Vec<u8>,
    mr: Mr,
    off: usize,
}

const CANARY: u8 = 0xEE;

fn region(f: &mut SoftFabric, len: usize, acc: u32) -> Region {
    guarded(f, len, acc, 0)
}

fn guarded(f: &mut SoftFabric, len: usize, acc: u32, guard: usize) -> Region {
    let mut buf = vec![CANARY; len + 2 * guard];
    // SAFETY: the Vec's heap buffer outlives every use by the fabric in these tests
    // (it is never reallocated; fabrics only touch it during polls made by the test).
    let mr = unsafe { f.register(buf.as_mut_ptr().add(guard), len, acc) }.unwrap();
    Region {
        buf,
        mr,
        off: guard,
    }
}

impl Region {
    fn sge(&self, off: usize, len: usize) -> Sge {
        Sge {
            addr: self.mr.addr + off as u64,
            len: len as u32,
            lkey: self.mr.lkey,
        }
    }

    fn all(&self) -> Sge {
        self.sge(0, self.mr.len as usize)
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[self.off..self.off + self.mr.len as usize]
    }

    fn fill(&mut self, bytes: &[u8]) {
        let off = self.off;
        self.buf[off..off + bytes.len()].copy_from_slice(bytes);
    }

    fn guards_intact(&self) -> bool {
        let end = self.off + self.mr.len as usize;
        self.buf[..self.off]
            .iter()
            .chain(&self.buf[end..])
            .all(|&b| b == CANARY)
    }

    fn write_op(&self) -> Op {
        Op::Write {
            remote_addr: self.mr.addr,
            rkey: self.mr.rkey,
        }
    }

    fn read_op(&self) -> Op {
        Op::Read {
            remote_addr: self.mr.addr,
            rkey: self.mr.rkey,
        }
    }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

fn wr(wr_id: u64, op: Op, sges: &[Sge], signaled: bool) -> SendWr<'_> {
    SendWr {
        wr_id,
        op,
        sges,
        signaled,
    }
}

fn caps(initiator_depth: u8, responder_resources: u8) -> QpCaps {
    QpCaps {
        initiator_depth,
        responder_resources,
        ..QpCaps::default()
    }
}

// ---- connection management ----

#[test]
fn connect_accept_across_threads_with_private_data() {
    let addr = test_addr();
    let mut server = SoftFabric::new().unwrap();
    server.listen(addr).unwrap();
    let t = std::thread::spawn(move || {
        let t0 = Instant::now();
        let mut qp = None;
        loop {
            match server.poll_cm() {
                Some(CmEvent::ConnectRequest(r)) => {
                    assert_eq!(r.private_data.as_bytes(), b"from the client");
                    assert_eq!(r.peer.ip(), IpAddr::V4(Ipv4Addr::LOCALHOST));
                    assert_eq!((r.initiator_depth, r.responder_resources), (4, 8));
                    qp = Some(
                        server
                            .accept(r.id, &caps(6, 2), b"from the server")
                            .unwrap(),
                    );
                }
                Some(CmEvent::Established {
                    qp: q,
                    private_data,
                    initiator_depth,
                }) => {
                    assert_eq!(Some(q), qp);
                    assert!(private_data.as_bytes().is_empty());
                    // min(our 6, the client's responder_resources 8)
                    assert_eq!(initiator_depth, 6);
                    return server;
                }
                Some(e) => panic!("unexpected {e:?}"),
                None => assert!(t0.elapsed() < TIMEOUT),
            }
        }
    });
    let mut client = Node::new();
    let qp = client
        .f
        .connect(addr, &caps(4, 8), b"from the client")
        .unwrap();
    spin1(&mut client, |c| c.established(qp).is_some());
    let (pd, depth) = client.established(qp).unwrap();
    assert_eq!(pd.as_bytes(), b"from the server");
    // min(our 4, the server's responder_resources 2)
    assert_eq!(depth, 2);
    let _server = t.join().unwrap();
}

#[test]
fn rejected_when_nobody_listens_and_when_refused() {
    let mut a = Node::new();
    let qp =
        a.f.connect(test_addr(), &QpCaps::default(), b"anyone?")
            .unwrap();
    let r = region(&mut a.f, 64, LW);
    a.f.post_recv(qp, 7, r.all()).unwrap();
    spin1(&mut a, |a| {
        a.evs
            .iter()
            .any(|e| matches!(e, CmEvent::Rejected { qp: q } if *q == qp))
    });
    assert_eq!(a.wc(7).status, WcStatus::Flushed);
    assert_eq!(a.disconnects(qp), 0);
    assert_eq!(a.f.post_recv(qp, 8, r.all()), Err(PostError::NotConnected));
    a.f.release(qp);

    let addr = test_addr();
    let mut b = Node::new();
    b.f.listen(addr).unwrap();
    let qp = a.f.connect(addr, &QpCaps::default(), b"let me in").unwrap();
    spin(&mut a, &mut b, |a, b| {
        if let Some(r) = b.take_request() {
            assert_eq!(r.private_data.as_bytes(), b"let me in");
            b.f.reject(r.id);
        }
        a.evs
            .iter()
            .any(|e| matches!(e, CmEvent::Rejected { qp: q } if *q == qp))
    });
    assert!(b.evs.is_empty(), "{:?}", b.evs);
}

#[test]
fn listeners_on_one_address_share_connections() {
    let addr = test_addr();
    let mut s1 = Node::new();
    let mut s2 = Node::new();
    s1.f.listen(addr).unwrap();
    s2.f.listen(addr).unwrap();
    s2.f.listen(addr).unwrap();
    let mut c = Node::new();
    let qps: Vec<Qp> = (0..4)
        .map(|_| c.f.connect(addr, &QpCaps::default(), b"").unwrap())
        .collect();
    let t0 = Instant::now();
    while !qps.iter().all(|&q| c.established(q).is_some()) {
        for s in [&mut s1, &mut s2] {
            s.poll();
            while let Some(r) = s.take_request() {
                s.f.accept(r.id, &QpCaps::default(), b"").unwrap();
            }
        }
        c.poll();
        assert!(t0.elapsed() < TIMEOUT);
    }
}

#[test]
fn posts_while_connecting_go_out_once_established() {
    let addr = test_addr();
    let mut a = Node::new();
    let mut b = Node::new();
    b.f.listen(addr).unwrap();
    let qa = a.f.connect(addr, &QpCaps::default(), b"").unwrap();
    let mut src = region(&mut a.f, 16, 0);
    src.fill(b"early bird......");
    a.f.post_send(qa, &[wr(1, Op::Send, &[src.all()], true)])
        .unwrap();
    let dst = region(&mut b.f, 64, LW);
    let mut qb = None;
    spin(&mut a, &mut b, |a, b| {
        if let Some(r) = b.take_request() {
            let q = b.f.accept(r.id, &QpCaps::default(), b"").unwrap();
            b.f.post_recv(q, 2, dst.all()).unwrap();
            qb = Some(q);
        }
        a.has_wc(1) && b.has_wc(2)
    });
    assert_eq!(a.wc(1).status, WcStatus::Success);
    assert_eq!(b.wc(2).byte_len, 16);
    assert_eq!(&dst.bytes()[..16], b"early bird......");
}

#[test]
fn a_fabric_can_connect_to_itself() {
    let addr = test_addr();
    let mut n = Node::new();
    n.f.listen(addr).unwrap();
    let qa = n.f.connect(addr, &QpCaps::default(), b"me").unwrap();
    let mut qb = None;
    spin1(&mut n, |n| {
        if let Some(r) = n.take_request() {
            qb = Some(n.f.accept(r.id, &QpCaps::default(), b"me too").unwrap());
        }
        qb.is_some_and(|qb| n.established(qb).is_some()) && n.established(qa).is_some()
    });
    let mut mem = region(&mut n.f, 4096, RW);
    mem.fill(&pattern(8, 2048));
    let (src, dst) = ([mem.sge(0, 2048)], mem.sge(2048, 2048));
    n.f.post_recv(qb.unwrap(), 1, dst).unwrap();
    n.f.post_send(qa, &[wr(2, Op::Send, &src, true)]).unwrap();
    spin1(&mut n, |n| n.has_wc(1) && n.has_wc(2));
    assert_eq!(mem.bytes()[2048..], pattern(8, 2048)[..]);
}

// ---- send / receive ----

#[test]
fn send_recv_with_gather_lists_and_signaling() {
    let mut p = pair();
    let mut src = region(&mut p.a.f, 4096, 0);
    src.fill(&pattern(3, 4096));
    let dst = region(&mut p.b.f, 4096, LW);
    for i in 0..4 {
        p.b.f
            .post_recv(p.qb, 100 + i, dst.sge(i as usize * 1024, 1024))
            .unwrap();
    }
    let g1 = [src.sge(0, 10), src.sge(100, 20), src.sge(500, 30)];
    let g2 = [src.sge(1000, 1)];
    let g3 = [src.sge(2000, 1000), src.sge(3000, 24)];
    let chain = [
        wr(1, Op::Send, &g1, true),
        wr(2, Op::Send, &g2, false),
        wr(3, Op::Send, &g3, true),
    ];
    p.a.f.post_send(p.qa, &chain).unwrap();
    spin(&mut p.a, &mut p.b, |a, b| a.has_wc(3) && b.has_wc(102));
    let s = pattern(3, 4096);
    let expect1: Vec<u8> = [&s[0..10], &s[100..120], &s[500..530]].concat();
    let r1 = p.b.wc(100);
    assert_eq!(
        (r1.status, r1.opcode, r1.byte_len, r1.qp),
        (WcStatus::Success, WcOpcode::Recv, 60, p.qb)
    );
    assert_eq!(&dst.bytes()[..60], &expect1[..]);
    assert_eq!(p.b.wc(101).byte_len, 1);
    assert_eq!(dst.bytes()[1024], s[1000]);
    assert_eq!(p.b.wc(102).byte_len, 1024);
    assert_eq!(
        &dst.bytes()[2048..3072],
        &[&s[2000..3000], &s[3000..3024]].concat()[..]
    );
    let c1 = p.a.wc(1);
    assert_eq!(
        (c1.status, c1.opcode, c1.qp),
        (WcStatus::Success, WcOpcode::Send, p.qa)
    );
    assert_eq!(p.a.wc(3).status, WcStatus::Success);
    for _ in 0..100 {
        p.a.poll();
    }
    assert!(!p.a.has_wc(2), "unsignaled send completed");
}

#[test]
fn large_send_is_split_and_reassembled() {
    let opts = SoftOptions {
        ring_bytes: 64 << 10,
        max_frame_payload: 8 << 10,
        ..SoftOptions::default()
    };
    let mut p = pair_with(opts, QpCaps::default());
    let mut src = region(&mut p.a.f, 300_000, 0);
    src.fill(&pattern(9, 300_000));
    let dst = region(&mut p.b.f, 300_000, LW);
    p.b.f.post_recv(p.qb, 1, dst.all()).unwrap();
    p.a.f
        .post_send(p.qa, &[wr(1, Op::Send, &[src.all()], true)])
        .unwrap();
    spin(&mut p.a, &mut p.b, |a, b| a.has_wc(1) && b.has_wc(1));
    assert_eq!(p.b.wc(1).byte_len, 300_000);
    assert_eq!(dst.bytes(), &pattern(9, 300_000)[..]);
}

#[test]
fn write_then_send_delivers_written_bytes_first() {
    let mut p = pair();
    let target = region(&mut p.b.f, 64 << 10, RW);
    let rbuf = region(&mut p.b.f, 256, LW);
    p.b.f.post_recv(p.qb, 1, rbuf.all()).unwrap();
    let mut src = region(&mut p.a.f, 64 << 10, 0);
    src.fill(&pattern(5, 64 << 10));
    let (all, head) = ([src.all()], [src.sge(0, 16)]);
    let chain = [
        wr(1, target.write_op(), &all, false),
        wr(2, Op::Send, &head, true),
    ];
    p.a.f.post_send(p.qa, &chain).unwrap();
    let t0 = Instant::now();
    while !p.b.has_wc(1) {
        p.b.poll();
        assert!(t0.elapsed() < TIMEOUT);
    }
    // Checked at the first poll that showed the Recv.
    assert_eq!(target.bytes(), &pattern(5, 64 << 10)[..]);
    spin(&mut p.a, &mut p.b, |a, _| a.has_wc(2));
    assert!(!p.a.has_wc(1));
}

// ---- RDMA Read / Write ----

#[test]
fn read_and_write_larger_than_the_ring() {
    let opts = SoftOptions {
        ring_bytes: 256 << 10,
        ..SoftOptions::default()
    };
    let mut p = pair_with(opts, QpCaps::default());
    for (i, size) in [1usize << 20, 3 << 20].into_iter().enumerate() {
        let mut remote = region(&mut p.b.f, size, RW);
        remote.fill(&pattern(1, size));
        let mut local = region(&mut p.a.f, size, LW);
        let half = size / 2;
        let scatter = [local.sge(0, half), local.sge(half, size - half)];
        let id = 10 * i as u64;
        p.a.f
            .post_send(p.qa, &[wr(id, remote.read_op(), &scatter, true)])
            .unwrap();
        spin(&mut p.a, &mut p.b, |a, _| a.has_wc(id));
        let c = p.a.wc(id);
        assert_eq!(
            (c.status, c.opcode, c.byte_len),
            (WcStatus::Success, WcOpcode::Read, size as u32)
        );
        assert!(local.bytes() == remote.bytes(), "read data differs");

        local.fill(&pattern(2, size));
        p.a.f
            .post_send(p.qa, &[wr(id + 1, remote.write_op(), &[local.all()], true)])
            .unwrap();
        spin(&mut p.a, &mut p.b, |a, _| a.has_wc(id + 1));
        let c = p.a.wc(id + 1);
        assert_eq!((c.status, c.opcode), (WcStatus::Success, WcOpcode::Write));
        assert!(
            remote.bytes() == &pattern(2, size)[..],
            "written data differs"
        );
    }
}

#[test]
fn reads_beyond_the_negotiated_depth_queue_locally() {
    let mut p = pair_with(SoftOptions::default(), caps(1, 1));
    let mut remote = region(&mut p.b.f, 4096, RW);
    remote.fill(&pattern(4, 4096));
    let local = region(&mut p.a.f, 4096, LW);
    let reads: Vec<[Sge; 1]> = (0..4).map(|i| [local.sge(i * 1024, 1024)]).collect();
    let op = |i: usize| Op::Read {
        remote_addr: remote.mr.addr + i as u64 * 1024,
        rkey: remote.mr.rkey,
    };
    let chain: Vec<SendWr> = (0..4)
        .map(|i| wr(i as u64, op(i), &reads[i], true))
        .collect();
    p.a.f.post_send(p.qa, &chain).unwrap();
    spin(&mut p.a, &mut p.b, |a, _| (0..4).all(|i| a.has_wc(i)));
    assert_eq!(
        p.a.wcs.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
    assert!(p.a.wcs.iter().all(|c| c.status == WcStatus::Success));
    assert_eq!(local.bytes(), remote.bytes());
}

#[test]
fn a_read_response_completes_earlier_unsignaled_writes() {
    let caps = QpCaps {
        max_send_wr: 2,
        ..QpCaps::default()
    };
    let mut p = pair_with(SoftOptions::default(), caps);
    let remote = region(&mut p.b.f, 4096, RW);
    let local = region(&mut p.a.f, 4096, LW);
    let (w, r) = ([local.sge(0, 100)], [local.sge(2048, 100)]);
    let chain = [
        wr(1, remote.write_op(), &w, false),
        wr(2, remote.read_op(), &r, true),
    ];
    p.a.f.post_send(p.qa, &chain).unwrap();
    spin(&mut p.a, &mut p.b, |a, _| a.has_wc(2));
    assert_eq!(p.a.wc(2).status, WcStatus::Success);
    assert!(!p.a.has_wc(1));
    // Both slots are free again: the Write retired without an Ack of its own.
    p.a.f.post_send(p.qa, &chain).unwrap();
    spin(&mut p.a, &mut p.b, |a, _| a.has_wc(2));
}

#[test]
fn zero_length_operations() {
    let mut p = pair();
    let remote = region(&mut p.b.f, 64, RW);
    let dst = region(&mut p.b.f, 64, LW);
    p.b.f.post_recv(p.qb, 1, dst.all()).unwrap();
    let bogus = Op::Write {
        remote_addr: 0,
        rkey: 0,
    };
    let chain = [
        wr(1, bogus, &[], true),
        wr(2, remote.read_op(), &[], true),
        wr(3, Op::Send, &[], true),
    ];
    p.a.f.post_send(p.qa, &chain).unwrap();
    spin(&mut p.a, &mut p.b, |a, b| a.has_wc(3) && b.has_wc(1));
    for id in 1..=3 {
        let c = p.a.wc(id);
        assert_eq!((c.status, c.byte_len), (WcStatus::Success, 0), "wr {id}");
    }
    assert_eq!(p.b.wc(1).byte_len, 0);
}

#[test]
fn simultaneous_large_transfers_both_ways_through_small_rings() {
    let opts = SoftOptions {
        ring_bytes: 16 << 10,
        ..SoftOptions::default()
    };
    let mut p = pair_with(opts, QpCaps::default());
    let size = 1 << 20;
    let mut nodes = [(&mut p.a, p.qa), (&mut p.b, p.qb)];
    let mut mems = Vec::new();
    for (i, (n, _)) in nodes.iter_mut().enumerate() {
        let mut exposed = region(&mut n.f, size, RW);
        exposed.fill(&pattern(i as u8, size));
        let mut out = region(&mut n.f, size, LW);
        out.fill(&vec![0; size]);
        let inn = region(&mut n.f, size, LW);
        mems.push((exposed, out, inn));
    }
    for i in 0..2 {
        let peer = &mems[1 - i].0;
        let ops = [peer.write_op(), peer.read_op()];
        let (out, inn) = (&mems[i].1, &mems[i].2);
        let (o, n) = ([out.all()], [inn.all()]);
        let (node, qp) = &mut nodes[i];
        node.f
            .post_send(*qp, &[wr(1, ops[0], &o, true), wr(2, ops[1], &n, true)])
            .unwrap();
    }
    spin(&mut p.a, &mut p.b, |a, b| a.has_wc(2) && b.has_wc(2));
    for (i, n) in [&mut p.a, &mut p.b].into_iter().enumerate() {
        assert_eq!(n.wc(1).status, WcStatus::Success);
        assert_eq!(n.wc(2).status, WcStatus::Success);
        // What we read is the peer's region, possibly already overwritten by our Write
        // (zeros): each byte is one or the other.
        let theirs = pattern(1 - i as u8, size);
        let read = mems[i].2.bytes();
        assert!(read.iter().zip(&theirs).all(|(&r, &t)| r == t || r == 0));
    }
    assert!(
        mems[0].0.bytes().iter().all(|&b| b == 0),
        "b's write into a"
    );
    assert!(
        mems[1].0.bytes().iter().all(|&b| b == 0),
        "a's write into b"
    );
}

#[test]
fn remote_access_violations_fail_and_touch_nothing() {
    #[derive(Debug, Clone, Copy)]
    enum Case {
        BadRkey,
        OutOfBounds,
        WriteWithoutRemoteWrite,
        ReadWithoutRemoteRead,
    }
    for case in [
        Case::BadRkey,
        Case::OutOfBounds,
        Case::WriteWithoutRemoteWrite,
        Case::ReadWithoutRemoteRead,
    ] {
        let mut p = pair();
        let acc = match case {
            Case::WriteWithoutRemoteWrite => access::REMOTE_READ,
            Case::ReadWithoutRemoteRead => LW | access::REMOTE_WRITE,
            _ => RW,
        };
        let target = guarded(&mut p.b.f, 4096, acc, 4096);
        let mut src = region(&mut p.a.f, 8192, LW);
        src.fill(&[0x11; 8192]);
        let (mut addr, mut rkey) = (target.mr.addr, target.mr.rkey);
        let mut len = 4096;
        match case {
            Case::BadRkey => rkey ^= 0x5a5a,
            Case::OutOfBounds => (addr, len) = (addr + 4000, 200),
            _ => {}
        }
        let op = match case {
            Case::ReadWithoutRemoteRead => Op::Read {
                remote_addr: addr,
                rkey,
            },
            Case::BadRkey | Case::OutOfBounds => Op::Write {
                remote_addr: addr,
                rkey,
            },
            Case::WriteWithoutRemoteWrite => Op::Write {
                remote_addr: addr,
                rkey,
            },
        };
        let sg = [src.sge(0, len)];
        let tail = [src.sge(0, 8)];
        let rbuf = region(&mut p.a.f, 64, LW);
        p.a.f.post_recv(p.qa, 11, rbuf.all()).unwrap();
        p.a.f
            .post_send(
                p.qa,
                &[wr(9, op, &sg, false), wr(10, Op::Send, &tail, true)],
            )
            .unwrap();
        spin(&mut p.a, &mut p.b, |a, b| {
            a.disconnects(p.qa) == 1 && b.disconnects(p.qb) == 1
        });
        assert_eq!(p.a.wc(9).status, WcStatus::RemoteAccess, "{case:?}");
        assert_eq!(p.a.wc(10).status, WcStatus::Flushed, "{case:?}");
        assert_eq!(p.a.wc(11).status, WcStatus::Flushed, "{case:?}");
        assert!(
            target.guards_intact() && target.bytes().iter().all(|&b| b == CANARY),
            "{case:?}"
        );
        assert!(
            src.bytes().iter().all(|&b| b == 0x11),
            "{case:?}: read scattered data"
        );
        assert_eq!(
            p.a.f.post_send(p.qa, &[wr(12, Op::Send, &tail, true)]),
            Err(PostError::NotConnected)
        );
    }
}

#[test]
fn rkey_of_another_fabric_is_invalid() {
    let mut p = pair();
    let mut c = Node::new();
    let foreign = region(&mut c.f, 4096, RW);
    let _own = region(&mut p.b.f, 4096, RW);
    let src = region(&mut p.a.f, 4096, 0);
    p.a.f
        .post_send(p.qa, &[wr(1, foreign.write_op(), &[src.all()], true)])
        .unwrap();
    spin(&mut p.a, &mut p.b, |a, b| {
        a.has_wc(1) && b.disconnects(p.qb) == 1
    });
    assert_eq!(p.a.wc(1).status, WcStatus::RemoteAccess);
}

#[test]
fn send_without_receive_breaks_both_sides() {
    let mut p = pair();
    let src = region(&mut p.a.f, 64, 0);
    let spare = region(&mut p.a.f, 64, LW);
    p.a.f.post_recv(p.qa, 5, spare.all()).unwrap();
    // Unsignaled: errors are reported anyway.
    p.a.f
        .post_send(p.qa, &[wr(1, Op::Send, &[src.all()], false)])
        .unwrap();
    spin(&mut p.a, &mut p.b, |a, b| {
        a.disconnects(p.qa) == 1 && b.disconnects(p.qb) == 1
    });
    assert_eq!(p.a.wc(1).status, WcStatus::ReceiverNotReady);
    assert_eq!(p.a.wc(5).status, WcStatus::Flushed);
    assert_eq!((p.b.f.stats().rnr_sent, p.a.f.stats().rnr_received), (1, 1));
}

#[test]
fn send_longer_than_receive_breaks_both_sides() {
    let mut p = pair();
    let src = region(&mut p.a.f, 64, 0);
    let dst = region(&mut p.b.f, 64, LW);
    p.b.f.post_recv(p.qb, 5, dst.sge(0, 16)).unwrap();
    p.b.f.post_recv(p.qb, 6, dst.sge(16, 16)).unwrap();
    p.a.f
        .post_send(p.qa, &[wr(1, Op::Send, &[src.sge(0, 32)], true)])
        .unwrap();
    spin(&mut p.a, &mut p.b, |a, b| {
        a.disconnects(p.qa) == 1 && b.disconnects(p.qb) == 1
    });
    assert_eq!(p.a.wc(1).status, WcStatus::RemoteInvalidRequest);
    assert_eq!(p.b.wc(5).status, WcStatus::LocalLength);
    assert_eq!(p.b.wc(6).status, WcStatus::Flushed);
}

#[test]
fn disconnect_flushes_every_request_once_then_reports() {
    let mut p = pair();
    let remote = region(&mut p.b.f, 8192, RW);
    let bufs = region(&mut p.a.f, 16 << 10, LW);
    for i in 0..4 {
        p.a.f
            .post_recv(p.qa, i, bufs.sge(i as usize * 1024, 1024))
            .unwrap();
    }
    let r1 = [bufs.sge(4096, 4096)];
    let r2 = [bufs.sge(8192, 4096)];
    let w = [bufs.sge(12288, 100)];
    let chain = [
        wr(10, remote.read_op(), &r1, true),
        wr(11, remote.read_op(), &r2, false),
        wr(12, remote.write_op(), &w, true),
    ];
    p.a.f.post_send(p.qa, &chain).unwrap();
    let theirs = region(&mut p.b.f, 64, LW);
    p.b.f.post_recv(p.qb, 20, theirs.all()).unwrap();
    // b never polls before the disconnect: nothing can complete.
    p.a.f.disconnect(p.qa);
    p.a.f.disconnect(p.qa);
    spin1(&mut p.a, |a| a.disconnects(p.qa) > 0);
    for _ in 0..100 {
        p.a.poll();
    }
    for id in [0, 1, 2, 3, 10, 11, 12] {
        let c = p.a.wc(id);
        assert_eq!((c.status, c.qp), (WcStatus::Flushed, p.qa), "wr {id}");
    }
    assert!(p.a.wcs.is_empty(), "{:?}", p.a.wcs);
    assert_eq!(p.a.disconnects(p.qa), 1);
    assert_eq!(
        p.a.f.post_recv(p.qa, 30, bufs.all()),
        Err(PostError::NotConnected)
    );
    assert_eq!(
        p.a.f.post_send(p.qa, &[wr(31, Op::Send, &w, true)]),
        Err(PostError::NotConnected)
    );
    assert_eq!(p.a.f.stats().flushed, 7);
    p.a.f.release(p.qa);
    assert_eq!(
        p.a.f.post_recv(p.qa, 32, bufs.all()),
        Err(PostError::NotConnected)
    );

    spin1(&mut p.b, |b| b.disconnects(p.qb) == 1);
    assert_eq!(p.b.wc(20).status, WcStatus::Flushed);
}

#[test]
fn dropping_a_fabric_disconnects_its_peers() {
    let Pair { a, mut b, qb, .. } = pair();
    let dst = region(&mut b.f, 64, LW);
    b.f.post_recv(qb, 1, dst.all()).unwrap();
    drop(a);
    spin1(&mut b, |b| b.disconnects(qb) == 1);
    assert_eq!(b.wc(1).status, WcStatus::Flushed);
}

#[test]
fn send_with_invalidate_revokes_the_receivers_region() {
    let mut p = pair();
    let exposed = region(&mut p.b.f, 4096, RW);
    let rbuf = region(&mut p.b.f, 64, LW);
    p.b.f.post_recv(p.qb, 1, rbuf.all()).unwrap();
    let src = region(&mut p.a.f, 4096, 0);
    let inv = Op::SendWithInv {
        rkey: exposed.mr.rkey,
    };
    p.a.f
        .post_send(p.qa, &[wr(1, inv, &[src.sge(0, 8)], true)])
        .unwrap();
    spin(&mut p.a, &mut p.b, |a, b| a.has_wc(1) && b.has_wc(1));
    let r = p.b.wc(1);
    assert_eq!(
        (r.status, r.invalidated),
        (WcStatus::Success, Some(exposed.mr.rkey))
    );
    assert_eq!(p.a.wc(1).status, WcStatus::Success);
    p.b.f.deregister(&exposed.mr); // idempotent after a remote invalidation
    p.a.f
        .post_send(p.qa, &[wr(2, exposed.write_op(), &[src.all()], true)])
        .unwrap();
    spin(&mut p.a, &mut p.b, |a, b| {
        a.has_wc(2) && b.disconnects(p.qb) == 1
    });
    assert_eq!(p.a.wc(2).status, WcStatus::RemoteAccess);
}

#[test]
fn send_with_invalidate_of_unknown_rkey_fails() {
    let mut p = pair();
    let rbuf = region(&mut p.b.f, 64, LW);
    p.b.f.post_recv(p.qb, 1, rbuf.all()).unwrap();
    let src = region(&mut p.a.f, 64, 0);
    let inv = Op::SendWithInv { rkey: 0x1234_5678 };
    p.a.f
        .post_send(p.qa, &[wr(1, inv, &[src.all()], true)])
        .unwrap();
    spin(&mut p.a, &mut p.b, |a, b| {
        a.disconnects(p.qa) == 1 && b.disconnects(p.qb) == 1
    });
    assert_eq!(p.a.wc(1).status, WcStatus::RemoteInvalidRequest);
    assert_eq!(p.b.wc(1).status, WcStatus::LocalProtection);
}

#[test]
fn post_limits_and_local_validation() {
    let caps = QpCaps {
        max_send_wr: 4,
        max_recv_wr: 2,
        max_sge: 2,
        ..QpCaps::default()
    };
    let mut p = pair_with(SoftOptions::default(), caps);
    let rw = region(&mut p.a.f, 4096, LW);
    let ro = region(&mut p.a.f, 4096, 0);
    let (qa, f) = (p.qa, &mut p.a.f);
    assert_eq!(
        f.post_recv(qa, 1, ro.all()),
        Err(PostError::Invalid),
        "receive needs LOCAL_WRITE"
    );
    let mut outside = rw.all();
    outside.len += 1;
    assert_eq!(f.post_recv(qa, 1, outside), Err(PostError::Invalid));
    let mut bad_key = rw.all();
    bad_key.lkey ^= 1;
    assert_eq!(f.post_recv(qa, 1, bad_key), Err(PostError::Invalid));
    f.post_recv(qa, 1, rw.sge(0, 8)).unwrap();
    f.post_recv(qa, 2, rw.sge(8, 8)).unwrap();
    assert_eq!(f.post_recv(qa, 3, rw.sge(16, 8)), Err(PostError::QueueFull));

    let three = [rw.sge(0, 1), rw.sge(1, 1), rw.sge(2, 1)];
    let remote = Op::Read {
        remote_addr: 0,
        rkey: 0,
    };
    assert_eq!(
        f.post_send(qa, &[wr(1, Op::Send, &three, true)]),
        Err(PostError::Invalid)
    );
    assert_eq!(
        f.post_send(qa, &[wr(1, remote, &[ro.all()], true)]),
        Err(PostError::Invalid),
        "read needs LOCAL_WRITE"
    );
    let one = [ro.sge(0, 8)];
    let five: Vec<SendWr> = (0..5).map(|i| wr(i, Op::Send, &one, true)).collect();
    assert_eq!(f.post_send(qa, &five), Err(PostError::QueueFull));
    // A bad element anywhere refuses the whole chain.
    let bad = [outside];
    let chain = [wr(1, Op::Send, &one, true), wr(2, Op::Send, &bad, true)];
    assert_eq!(f.post_send(qa, &chain), Err(PostError::Invalid));
    assert_eq!(
        f.post_send(Qp(12345), &chain[..1]),
        Err(PostError::NotConnected)
    );
    assert_eq!(p.b.f.stats().frames_received, 0);
    for _ in 0..50 {
        p.a.poll();
        p.b.poll();
    }
    assert_eq!(
        p.b.f.stats().frames_received,
        0,
        "a refused chain sent something"
    );
    assert!(p.a.wcs.is_empty());
}

// ---- faults ----

#[test]
fn dropped_send_is_detected_at_the_next_request() {
    let mut p = pair();
    let src = region(&mut p.a.f, 64, 0);
    let dst = region(&mut p.b.f, 256, LW);
    for i in 0..3 {
        p.b.f
            .post_recv(p.qb, i, dst.sge(i as usize * 64, 64))
            .unwrap();
    }
    p.a.f.faults(p.qa).unwrap().drop_next(FrameKind::Send, 1);
    let g = [src.all()];
    p.a.f.post_send(p.qa, &[wr(1, Op::Send, &g, true)]).unwrap();
    for _ in 0..50 {
        p.a.poll();
        p.b.poll();
    }
    assert!(p.b.wcs.is_empty() && !p.a.has_wc(1), "dropped send arrived");
    p.a.f.post_send(p.qa, &[wr(2, Op::Send, &g, true)]).unwrap();
    spin(&mut p.a, &mut p.b, |a, b| {
        a.disconnects(p.qa) == 1 && b.disconnects(p.qb) == 1
    });
    assert_eq!(p.a.wc(1).status, WcStatus::Fatal);
    assert_eq!(p.a.wc(2).status, WcStatus::Flushed);
    assert!((0..3).all(|i| p.b.wc(i).status == WcStatus::Flushed));
    assert_eq!(p.a.f.stats().dropped, 1);
}

#[test]
fn dropped_read_response_fails_the_read() {
    let opts = SoftOptions {
        max_frame_payload: 16 << 10,
        ..SoftOptions::default()
    };
    let mut p = pair_with(opts, QpCaps::default());
    let remote = region(&mut p.b.f, 64 << 10, RW);
    let local = region(&mut p.a.f, 64 << 10, LW);
    p.b.f.faults(p.qb).unwrap().drop_read_responses = 1;
    p.a.f
        .post_send(p.qa, &[wr(1, remote.read_op(), &[local.all()], false)])
        .unwrap();
    spin(&mut p.a, &mut p.b, |a, b| {
        a.disconnects(p.qa) == 1 && b.disconnects(p.qb) == 1
    });
    assert_eq!(p.a.wc(1).status, WcStatus::Fatal);
}

#[test]
fn delayed_frames_arrive_late_and_in_order() {
    let mut p = pair();
    let mut src = region(&mut p.a.f, 64, 0);
    src.fill(b"first...second..");
    let dst = region(&mut p.b.f, 64, LW);
    p.b.f.post_recv(p.qb, 1, dst.sge(0, 8)).unwrap();
    p.b.f.post_recv(p.qb, 2, dst.sge(8, 8)).unwrap();
    let delay = Duration::from_millis(30);
    p.a.f.faults(p.qa).unwrap().delay = delay;
    let t0 = Instant::now();
    p.a.f
        .post_send(p.qa, &[wr(1, Op::Send, &[src.sge(0, 8)], true)])
        .unwrap();
    p.a.f
        .post_send(p.qa, &[wr(2, Op::Send, &[src.sge(8, 8)], true)])
        .unwrap();
    spin(&mut p.a, &mut p.b, |_, b| b.has_wc(1));
    assert!(t0.elapsed() >= delay);
    spin(&mut p.a, &mut p.b, |a, b| a.has_wc(2) && b.has_wc(2));
    assert_eq!(&dst.bytes()[..16], b"first...second..");
}

#[test]
fn cable_pull_in_the_middle_of_a_large_write() {
    let opts = SoftOptions {
        ring_bytes: 256 << 10,
        ..SoftOptions::default()
    };
    let size = 1 << 20;
    for by_bytes in [false, true] {
        let mut p = pair_with(opts.clone(), QpCaps::default());
        let target = region(&mut p.b.f, size, RW);
        let mut src = region(&mut p.a.f, size, LW);
        src.fill(&pattern(7, size));
        p.a.f.post_recv(p.qa, 2, src.sge(0, 64)).unwrap();
        let faults = p.a.f.faults(p.qa).unwrap();
        if by_bytes {
            faults.disconnect_after_bytes = Some(300 << 10);
        } else {
            faults.disconnect_after_frames = Some(5);
        }
        let all = [src.all()];
        p.a.f
            .post_send(p.qa, &[wr(1, target.write_op(), &all, true)])
            .unwrap();
        spin(&mut p.a, &mut p.b, |a, b| {
            a.disconnects(p.qa) == 1 && b.disconnects(p.qb) == 1
        });
        assert_eq!(p.a.wc(1).status, WcStatus::Flushed);
        assert_eq!(p.a.wc(2).status, WcStatus::Flushed);
        let sent = p.a.f.stats();
        if by_bytes {
            assert!(sent.bytes_sent >= 300 << 10 && sent.bytes_sent < (300 << 10) + (64 << 10));
        } else {
            assert_eq!(sent.frames_sent, 5);
        }
        // The peer took in every frame published before the cable went.
        let written = p.b.f.stats().bytes_received as usize;
        assert_eq!(written as u64, sent.bytes_sent);
        assert!(written > 0 && written < size, "written {written}");
        assert!(target.bytes()[..written] == pattern(7, size)[..written]);
        assert!(target.bytes()[written..].iter().all(|&b| b == CANARY));
    }
}

#[test]
fn hostile_frames_break_only_their_connection() {
    let mut bystander = pair();
    for (kind, len) in [(0xffu8, 0u32), (1, 1 << 30), (4, 0)] {
        let Pair {
            mut a,
            mut b,
            qa,
            qb,
        } = pair();
        // Write a forged frame straight into a's outbound ring.
        let conn = a.f.slots[(qa.0 & 0xffff) as usize].conn.as_mut().unwrap();
        let link = conn.link.as_mut().unwrap();
        let mut h = wire::Hdr::new(wire::Kind::Send, 0);
        (h.kind, h.len, h.total) = (kind, len, len);
        link.tx_write(0, &h.encode());
        link.tx_commit(wire::HDR as u64);
        spin1(&mut b, |b| b.disconnects(qb) == 1);
        assert_eq!(b.f.stats().protocol_errors, 1, "kind {kind} len {len}");
        spin1(&mut a, |a| a.disconnects(qa) == 1);
    }
    let q = &mut bystander;
    let src = region(&mut q.a.f, 8, 0);
    let dst = region(&mut q.b.f, 8, LW);
    q.b.f.post_recv(q.qb, 1, dst.all()).unwrap();
    q.a.f
        .post_send(q.qa, &[wr(1, Op::Send, &[src.all()], true)])
        .unwrap();
    spin(&mut q.a, &mut q.b, |a, b| a.has_wc(1) && b.has_wc(1));
}

#[test]
fn frame_headers_from_the_peer_are_checked() {
    use wire::{Hdr, Kind, HDR};
    let ok = Hdr {
        len: 10,
        offset: 90,
        total: 100,
        ..Hdr::new(Kind::Write, 7)
    };
    let (kind, h) = Hdr::decode(&ok.encode()).unwrap();
    assert_eq!(
        (kind, h.seq, h.len, h.offset, h.total),
        (Kind::Write, 7, 10, 90, 100)
    );
    let past_end = Hdr { offset: 95, ..ok };
    assert!(Hdr::decode(&past_end.encode()).is_err());
    let wrapping = Hdr {
        offset: u32::MAX,
        total: u32::MAX,
        ..ok
    };
    assert!(Hdr::decode(&wrapping.encode()).is_err());
    let flags = Hdr { flags: 0x80, ..ok };
    assert!(Hdr::decode(&flags.encode()).is_err());
    let payload_on_ack = Hdr {
        len: 1,
        ..Hdr::new(Kind::Ack, 0)
    };
    assert!(Hdr::decode(&payload_on_ack.encode()).is_err());
    for kind in [0u8, 7, 255] {
        let mut b = [0u8; HDR];
        b[0] = kind;
        assert!(Hdr::decode(&b).is_err());
    }
    assert!(wire::ConnectMsg::decode(&[0xff; wire::REQ_LEN]).is_none());
    assert!(wire::AcceptMsg::decode(&[0xff; wire::ACC_LEN]).is_none());
}

#[test]
fn keys_are_distinct_and_deregistration_is_idempotent() {
    let mut f = SoftFabric::new().unwrap();
    let mut buf = vec![0u8; 4096];
    let mut keys = std::collections::HashSet::new();
    let mut mrs = Vec::new();
    for _ in 0..1000 {
        // SAFETY: `buf` outlives the fabric's use of it (no connections exist).
        let mr = unsafe { f.register(buf.as_mut_ptr(), 4096, RW) }.unwrap();
        assert!(keys.insert(mr.lkey) && keys.insert(mr.rkey));
        mrs.push(mr);
    }
    for mr in &mrs {
        f.deregister(mr);
        f.deregister(mr);
    }
    // SAFETY: as above.
    let bad = unsafe { f.register(buf.as_mut_ptr(), 16, access::REMOTE_WRITE) };
    assert_eq!(bad.unwrap_err().kind(), io::ErrorKind::InvalidInput);
}

// ---- idle / wake ----

#[test]
fn arm_and_wait_fd_wake_on_a_peer_send() {
    let Pair {
        mut a,
        mut b,
        qa,
        qb,
    } = pair();
    let dst = region(&mut b.f, 64, LW);
    b.f.post_recv(qb, 1, dst.all()).unwrap();
    b.f.post_recv(qb, 2, dst.all()).unwrap();
    let src = region(&mut a.f, 64, 0);

    // Input already pending: arm refuses.
    a.f.post_send(qa, &[wr(1, Op::Send, &[src.sge(0, 8)], true)])
        .unwrap();
    assert!(!b.f.arm());
    spin(&mut a, &mut b, |a, b| a.has_wc(1) && b.has_wc(1));

    let (armed_tx, armed_rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        let mut poll = Poll::new().unwrap();
        let fd = b.f.wait_fd().unwrap();
        poll.registry()
            .register(&mut SourceFd(&fd), Token(0), Interest::READABLE)
            .unwrap();
        let mut events = Events::with_capacity(4);
        let t0 = Instant::now();
        while !b.f.arm() {
            b.poll();
            assert!(t0.elapsed() < TIMEOUT);
        }
        armed_tx.send(()).unwrap();
        poll.poll(&mut events, Some(Duration::from_secs(5)))
            .unwrap();
        let woke = Instant::now();
        assert!(!events.is_empty(), "not woken");
        spin1(&mut b, |b| b.has_wc(2));
        (woke, b)
    });
    armed_rx.recv().unwrap();
    std::thread::sleep(Duration::from_millis(5));
    let sent = Instant::now();
    a.f.post_send(qa, &[wr(2, Op::Send, &[src.sge(0, 8)], true)])
        .unwrap();
    let (woke, b) = t.join().unwrap();
    let latency = woke.saturating_duration_since(sent);
    assert!(latency < Duration::from_secs(1), "woken after {latency:?}");
    assert!(a.f.stats().doorbells >= 1);
    drop(b);
}

// ---- throughput sanity ----

/// Adaptive idle as a reactor does it: spin a little, then yield the CPU (the peer
/// thread may need it), then arm and wait on `wait_fd`.
struct Idle {
    poll: Poll,
    events: Events,
    empty: u32,
}

impl Idle {
    fn new(f: &SoftFabric) -> Idle {
        let poll = Poll::new().unwrap();
        let fd = f.wait_fd().unwrap();
        poll.registry()
            .register(&mut SourceFd(&fd), Token(0), Interest::READABLE)
            .unwrap();
        Idle {
            poll,
            events: Events::with_capacity(4),
            empty: 0,
        }
    }

    fn after_poll(&mut self, f: &mut SoftFabric, work: usize) {
        if work > 0 {
            self.empty = 0;
            return;
        }
        self.empty += 1;
        if self.empty > 50 {
            std::thread::yield_now();
        }
        if self.empty >= 2000 && f.arm() {
            self.poll
                .poll(&mut self.events, Some(Duration::from_millis(10)))
                .unwrap();
        }
    }
}

#[test]
fn ping_pong_100k_small_sends() {
    const N: usize = 100_000;
    const DEPTH: usize = 16;
    let Pair { a, b, qa, qb } = pair();
    let echo = |mut n: Node, qp: Qp, start: bool| {
        move || {
            let rbuf = region(&mut n.f, DEPTH * 64, LW);
            let sbuf = region(&mut n.f, 64, 0);
            for i in 0..DEPTH {
                n.f.post_recv(qp, i as u64, rbuf.sge(i * 64, 64)).unwrap();
            }
            let msg = [sbuf.sge(0, 8)];
            let send = [wr(0, Op::Send, &msg, false)];
            if start {
                n.f.post_send(qp, &send).unwrap();
            }
            let mut out = [NO_WC; 32];
            // A stall is no completion for 20 s (not a total time: two spinning
            // threads on a loaded 2-core host may take minutes, yet never stall).
            let (mut got, t0) = (0, Instant::now());
            let mut last = t0;
            let mut idle = Idle::new(&n.f);
            while got < N {
                let k = n.f.poll_cq(&mut out);
                idle.after_poll(&mut n.f, k);
                for c in &out[..k] {
                    assert_eq!(
                        (c.status, c.opcode),
                        (WcStatus::Success, WcOpcode::Recv),
                        "{c:?}"
                    );
                    n.f.post_recv(qp, c.wr_id, rbuf.sge(c.wr_id as usize * 64, 64))
                        .unwrap();
                    got += 1;
                    if got < N || !start {
                        n.f.post_send(qp, &send).unwrap();
                    }
                }
                if k > 0 {
                    last = Instant::now();
                }
                assert!(last.elapsed() < Duration::from_secs(20), "stalled at {got}");
            }
            (n, t0.elapsed())
        }
    };
    let server = std::thread::spawn(echo(b, qb, false));
    let client = std::thread::spawn(echo(a, qa, true));
    let (a, took) = client.join().unwrap();
    let (b, _) = server.join().unwrap();
    eprintln!(
        "soft fabric ping-pong: {N} round trips in {took:?} ({:.0} round trips/s, {} doorbells)",
        N as f64 / took.as_secs_f64(),
        a.f.stats().doorbells + b.f.stats().doorbells,
    );
}

// ---- a second process ----

const CHILD_ENV: &str = "NFSGW_SOFT_TEST_CHILD_ADDR";
const MEM: usize = 64 << 10;

/// The child's side of `cross_process_data_and_peer_death` (runs only when spawned).
#[test]
#[ignore = "child role of cross_process_data_and_peer_death"]
fn cross_process_child() {
    let Ok(addr) = std::env::var(CHILD_ENV) else {
        return;
    };
    let addr: SocketAddr = addr.parse().unwrap();
    let mut c = Node::new();
    // The parent owns the address: another process can't listen on it.
    let in_use = c.f.listen(addr).map_err(|e| e.kind()) == Err(io::ErrorKind::AddrInUse);
    let qp = c.f.connect(addr, &QpCaps::default(), b"child").unwrap();
    let mut mem = region(&mut c.f, MEM, RW);
    mem.fill(&pattern(1, MEM));
    let rbuf = region(&mut c.f, 256, LW);
    let mut sbuf = region(&mut c.f, 256, 0);
    c.f.post_recv(qp, 100, rbuf.sge(0, 128)).unwrap();
    c.f.post_recv(qp, 101, rbuf.sge(128, 128)).unwrap();
    spin1(&mut c, |c| c.established(qp).is_some());
    assert_eq!(c.established(qp).unwrap().0.as_bytes(), b"parent");
    let mut hello = Vec::new();
    hello.extend_from_slice(&mem.mr.addr.to_ne_bytes());
    hello.extend_from_slice(&mem.mr.rkey.to_ne_bytes());
    sbuf.fill(&hello);
    c.f.post_send(qp, &[wr(1, Op::Send, &[sbuf.sge(0, 12)], true)])
        .unwrap();
    // The parent reads our memory, overwrites it, then asks us to check.
    spin1(&mut c, |c| c.has_wc(1) && c.has_wc(100));
    let ok = mem.bytes() == &pattern(2, MEM)[..];
    sbuf.fill(&[u8::from(ok), u8::from(in_use)]);
    c.f.post_send(qp, &[wr(2, Op::Send, &[sbuf.sge(0, 2)], true)])
        .unwrap();
    // Serve until the parent kills us; exit without disconnecting if it never does.
    let t0 = Instant::now();
    while t0.elapsed() < TIMEOUT {
        c.poll();
    }
    std::process::exit(3);
}

#[test]
fn cross_process_data_and_peer_death() {
    let addr = test_addr();
    let mut p = Node::new();
    p.f.listen(addr).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "fabric::soft::tests::cross_process_child",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_ENV, addr.to_string())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // Polls until `done`, failing fast if the child died.
    let wait =
        |p: &mut Node, child: &mut std::process::Child, done: &mut dyn FnMut(&mut Node) -> bool| {
            let t0 = Instant::now();
            loop {
                p.poll();
                if done(p) {
                    return;
                }
                if let Ok(Some(st)) = child.try_wait() {
                    panic!("child exited early: {st}; {:?} {:?}", p.wcs, p.evs);
                }
                assert!(t0.elapsed() < TIMEOUT, "timed out: {:?} {:?}", p.wcs, p.evs);
            }
        };
    let rbuf = region(&mut p.f, 1024, LW);
    let mut qp = None;
    wait(&mut p, &mut child, &mut |p| {
        if let Some(r) = p.take_request() {
            assert_eq!(r.private_data.as_bytes(), b"child");
            let q = p.f.accept(r.id, &QpCaps::default(), b"parent").unwrap();
            for i in 0..4 {
                p.f.post_recv(q, i, rbuf.sge(i as usize * 256, 256))
                    .unwrap();
            }
            qp = Some(q);
        }
        qp.is_some() && p.has_wc(0)
    });
    let qp = qp.unwrap();
    assert_eq!(p.wc(0).byte_len, 12);
    let b = rbuf.bytes();
    let raddr = u64::from_ne_bytes(b[0..8].try_into().unwrap());
    let rkey = u32::from_ne_bytes(b[8..12].try_into().unwrap());
    let mut local = region(&mut p.f, MEM, LW);
    let read = Op::Read {
        remote_addr: raddr,
        rkey,
    };
    p.f.post_send(qp, &[wr(10, read, &[local.all()], true)])
        .unwrap();
    wait(&mut p, &mut child, &mut |p| p.has_wc(10));
    assert_eq!(p.wc(10).status, WcStatus::Success);
    assert!(
        local.bytes() == &pattern(1, MEM)[..],
        "read from the child differs"
    );
    local.fill(&pattern(2, MEM));
    let write = Op::Write {
        remote_addr: raddr,
        rkey,
    };
    let ask = [local.sge(0, 4)];
    p.f.post_send(
        qp,
        &[
            wr(11, write, &[local.all()], false),
            wr(12, Op::Send, &ask, true),
        ],
    )
    .unwrap();
    wait(&mut p, &mut child, &mut |p| p.has_wc(1));
    assert_eq!(p.wc(1).byte_len, 2);
    assert_eq!(
        &rbuf.bytes()[256..258],
        &[1, 1],
        "child saw the write / AddrInUse"
    );
    assert_eq!(p.wc(12).status, WcStatus::Success);

    // The child dies without disconnecting: everything outstanding comes back.
    p.f.post_send(qp, &[wr(13, Op::Send, &ask, true)])
        .unwrap_or(());
    child.kill().unwrap();
    child.wait().unwrap();
    spin1(&mut p, |p| p.disconnects(qp) == 1);
    for _ in 0..10 {
        p.poll();
    }
    for id in [2, 3] {
        assert_eq!(p.wc(id).status, WcStatus::Flushed);
    }
    let last = p.wc(13).status;
    assert!(
        matches!(
            last,
            WcStatus::Flushed | WcStatus::Success | WcStatus::ReceiverNotReady
        ),
        "{last:?}"
    );
    assert!(p.wcs.is_empty(), "{:?}", p.wcs);
}
