//! `stall_reclaim` on the Read side of the responder transport (`super::reclaim`),
//! over `soft` in one thread: peers that send chunked calls and never answer our
//! RDMA Reads (on `soft` the Read is answered when the peer polls) hold a large
//! reassembly buffer per call; they are left alone while nobody starves
//! (`read_timeout` is far beyond the test), closed once an allocation is starved and
//! they answered nothing for the stall window — never before that window — and every
//! buffer comes back; a peer that answers its Reads slowly but steadily keeps its
//! connection throughout.

use super::reclaim_tests::{server, STALL};
use super::timeout_tests::large_free;
use super::*;
use crate::fabric::soft::SoftFabric;
use crate::rpcrdma::wire::{Chunks, Fixed, ReadSegment};
use crate::xdr::XdrWriter;
use std::time::{Duration, Instant};

const LARGE: usize = 8;
const BAD: usize = 3;
/// Chunked calls each bad peer sends (each holds a large buffer while its Read waits).
const PER_BAD: usize = 2;
/// Bytes each call has us pull (one read chunk): the record takes a large buffer.
const CHUNK: usize = 128 * 1024;
/// Send slots of a peer, one message each, before the chunk data.
const SLOT: usize = 1024;
const SLOTS: usize = 16;
const DATA: usize = SLOT * SLOTS;

/// A requester over a raw `soft` QP whose calls carry `CHUNK` bytes in a read chunk
/// of its registered memory; it answers our Reads only when polled.
struct Puller {
    f: SoftFabric,
    qp: Qp,
    mr: Mr,
    next: usize,
    // Dropped after `f` (field order), so the registration never outlives it.
    _mem: Vec<u8>,
}

impl Puller {
    fn connect(s: &mut RdmaServer) -> Puller {
        let mut mem = vec![0x5a; DATA + CHUNK];
        let mut f = SoftFabric::new().unwrap();
        // SAFETY: `mem` is kept in the Puller and dropped after `f`.
        let mr = unsafe {
            f.register(
                mem.as_mut_ptr(),
                mem.len(),
                access::LOCAL_WRITE | access::REMOTE_READ,
            )
            .unwrap()
        };
        let qp = f.connect(s.local_addr(), &QpCaps::default(), &[]).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            s.poll(&mut |_, _, _, _: &[Reduced], _| {});
            match f.poll_cm() {
                Some(CmEvent::Established { .. }) => break,
                Some(e) => panic!("connect: {e:?}"),
                None => assert!(Instant::now() < deadline, "no answer to a connect"),
            }
        }
        Puller {
            f,
            qp,
            mr,
            next: 0,
            _mem: mem,
        }
    }

    /// Sends a chunked call `xid`: a 40-byte RPC CALL inline, `CHUNK` bytes to pull.
    fn call(&mut self, xid: u32) {
        let k = self.next % SLOTS;
        self.next += 1;
        let mut c = Chunks::default();
        c.reads.push(ReadSegment {
            position: 40,
            seg: Segment {
                handle: self.mr.rkey,
                length: CHUNK as u32,
                offset: self.mr.addr + DATA as u64,
            },
        });
        let fixed = Fixed {
            xid,
            vers: 1,
            credit: 8,
            proc_: wire::RDMA_MSG,
        };
        let at = self.mr.addr + (k * SLOT) as u64;
        let mut msg = [0u8; SLOT];
        let n = wire::encode_msg(&mut XdrWriter::new(&mut msg[..]), fixed, &c).unwrap();
        for (i, w) in [xid, 0, 2, 100003, 3, 7, 0, 0, 0, 0].iter().enumerate() {
            msg[n + 4 * i..n + 4 * i + 4].copy_from_slice(&w.to_be_bytes());
        }
        // SAFETY: slot `k` of the registered area; its previous Send went out (each
        // peer here has fewer messages in flight than slots).
        unsafe { std::ptr::copy_nonoverlapping(msg.as_ptr(), at as *mut u8, n + 40) };
        let sge = Sge {
            addr: at,
            len: (n + 40) as u32,
            lkey: self.mr.lkey,
        };
        let wr = SendWr {
            wr_id: k as u64,
            op: Op::Send,
            sges: std::slice::from_ref(&sge),
            signaled: true,
        };
        self.f.post_send(self.qp, &[wr]).unwrap();
    }

    /// Answers the Reads waiting for us (and drops our Send completions).
    fn poll(&mut self) {
        let mut cq = [Completion {
            wr_id: 0,
            qp: Qp(0),
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: 0,
            invalidated: None,
            vendor_err: 0,
        }; 16];
        while self.f.poll_cq(&mut cq) > 0 {}
    }
}

/// A peer answering its Reads slowly but steadily: one chunked call always
/// outstanding, its Reads answered every `EVERY` (so it holds a large buffer with
/// Reads outstanding most of the time), the next call sent once one is delivered.
struct Steady {
    p: Puller,
    xid: u32,
    last: Instant,
    delivered: usize,
}

impl Steady {
    const EVERY: Duration = Duration::from_millis(100);

    fn new(s: &mut RdmaServer) -> Steady {
        let mut p = Puller::connect(s);
        p.call(500);
        Steady {
            p,
            xid: 501,
            last: Instant::now(),
            delivered: 0,
        }
    }

    /// One turn: answer the Reads when due; a delivered call is dropped unanswered
    /// (its large buffer comes back) and the next one sent.
    fn turn(&mut self, s: &mut RdmaServer) {
        if self.last.elapsed() >= Self::EVERY {
            self.p.poll();
            self.last = Instant::now();
        }
        let mut calls = Vec::new();
        s.poll(&mut |r, _, rec, _: &[Reduced], _| calls.push((r, rec)));
        for (call, rec) in calls {
            assert_eq!(rec.len(), 40 + CHUNK, "the whole chunk was pulled");
            drop(rec);
            s.no_reply(call);
            self.delivered += 1;
            self.p.call(self.xid);
            self.xid += 1;
        }
    }
}

/// Polls the server until `n` more large buffers are in use than `before`.
fn until_held(s: &mut RdmaServer, pools: &Pools, before: usize, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while before - large_free(pools) < n {
        assert!(Instant::now() < deadline, "{:?}", s.stats());
        s.poll(&mut |_, _, _, _: &[Reduced], _| panic!("no call completes its Reads"));
    }
}

/// Connects `BAD` peers, each sending `PER_BAD` chunked calls, never polled again:
/// each call holds a large buffer with its Read outstanding.
fn bad_peers(s: &mut RdmaServer, pools: &Pools) -> Vec<Puller> {
    let mut peers = Vec::new();
    for b in 0..BAD {
        let free = large_free(pools);
        let mut p = Puller::connect(s);
        for x in 0..PER_BAD as u32 {
            p.call(10 + 10 * b as u32 + x);
        }
        until_held(s, pools, free, PER_BAD);
        peers.push(p);
    }
    peers
}

#[test]
fn peers_that_never_answer_our_reads_are_reclaimed_only_while_a_neighbour_starves() {
    let (mut s, pools) = server(LARGE);
    let bad = bad_peers(&mut s, &pools);
    assert_eq!(large_free(&pools), LARGE - BAD * PER_BAD);
    let mut steady = Steady::new(&mut s);
    // Nobody starves (one large buffer stays free, the steady peer cycles its own):
    // the peers that answer nothing are left alone for many stall windows.
    let quiet = Instant::now();
    while quiet.elapsed() < 4 * STALL {
        steady.turn(&mut s);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(s.stats().read_reclaimed, 0, "{:?}", s.stats());
    assert_eq!(s.connections(), BAD + 1);
    assert!(steady.delivered >= 3, "the steady peer is served");
    // A neighbour starves: the spare large buffer is taken and a further allocation
    // of the class finds it empty, again and again.
    let spare = pools.alloc(1 << 20).expect("the spare large buffer");
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.stats().read_reclaimed < BAD as u64 || s.connections() > 1 {
        assert!(Instant::now() < deadline, "not reclaimed: {:?}", s.stats());
        drop(pools.alloc(1 << 20));
        steady.turn(&mut s);
        std::thread::sleep(Duration::from_millis(1));
    }
    // The steady peer keeps its connection while starvation goes on.
    let more = Instant::now();
    let delivered = steady.delivered;
    while more.elapsed() < 4 * STALL {
        drop(pools.alloc(1 << 20));
        steady.turn(&mut s);
        std::thread::sleep(Duration::from_millis(1));
    }
    let st = s.stats();
    assert_eq!(
        (
            st.read_reclaimed,
            st.read_timeouts,
            st.send_reclaimed,
            st.disconnects
        ),
        (BAD as u64, 0, 0, BAD as u64),
        "{st:?}"
    );
    assert_eq!(s.connections(), 1, "the steady peer is kept");
    assert!(steady.delivered > delivered, "the steady peer is served on");
    // Every large buffer of the reclaimed peers is back; with the spare and the
    // steady peer's call, every buffer of the pools.
    drop(spare);
    drop(steady);
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.connections() > 0 {
        assert!(Instant::now() < deadline, "never disconnected");
        s.poll(&mut |_, _, _, _: &[Reduced], _| {});
    }
    assert_eq!(pools.in_use(), 0);
    assert_eq!(s.admission.reserved(), 0);
    drop(bad);
}

#[test]
fn a_starved_reactor_waits_the_stall_window_before_reclaiming_a_reader() {
    // The class is exhausted from the start: the peer whose Reads are never answered
    // is closed only once its buffers have waited for the window.
    let (mut s, pools) = server(2);
    let posted = Instant::now();
    let mut p = Puller::connect(&mut s);
    p.call(1);
    p.call(2);
    until_held(&mut s, &pools, 2, 2);
    let deadline = posted + Duration::from_secs(10);
    while s.connections() > 0 {
        assert!(Instant::now() < deadline, "never closed: {:?}", s.stats());
        assert!(pools.alloc(1 << 20).is_none() || s.stats().read_reclaimed == 1);
        s.poll(&mut |_, _, _, _: &[Reduced], _| {});
        std::thread::sleep(Duration::from_millis(1));
    }
    let took = posted.elapsed();
    assert!(took >= STALL, "reclaimed early: {took:?}");
    let st = s.stats();
    assert_eq!((st.read_reclaimed, st.read_timeouts), (1, 0), "{st:?}");
    assert_eq!(pools.in_use(), 0);
    drop(p);
}
