//! `stall_reclaim` on the responder transport (`super::reclaim`), over `soft` in one
//! thread: peers that keep to their credits and reply budget but never take their
//! replies (on `soft` a Send completes when the peer polls) hold the large buffers;
//! they are left alone while nobody starves (`send_timeout` is long here), closed once
//! an allocation is starved and they took nothing for the stall window — never before
//! that window — and every buffer comes back; a peer that takes its replies slowly but
//! steadily keeps its connection throughout.

use super::cb_tests::{cb_record, establish, events, null_call, Calls, Peer};
use super::timeout_tests::{addr, answer_large, large_free, take_calls};
use super::*;
use crate::fabric::soft::SoftFabric;
use crate::mem::{ClassSpec, HugePolicy};
use std::time::{Duration, Instant};

const LARGE: usize = 8;
const BAD: usize = 3;
/// Large replies each bad peer is sent and never takes.
const PER_BAD: usize = 2;
pub(super) const STALL: Duration = Duration::from_millis(300);

/// A server whose only way to close anybody within a test is the reclaim (read and
/// send timeouts far beyond it), with `large` 1 MiB buffers; shared with the Read
/// side's tests.
pub(super) fn server(large: usize) -> (RdmaServer, Pools) {
    let pools = Pools::new(
        &[
            ClassSpec {
                size: 8192,
                count: 256,
            },
            ClassSpec {
                size: 1 << 20,
                count: large,
            },
        ],
        HugePolicy::Off,
    )
    .unwrap();
    let opts = ServerOptions {
        credits: 8,
        min_credits: 8,
        max_connections: 8,
        // Far beyond the test: only the reclaim may close anybody.
        read_timeout: Duration::from_secs(300),
        send_timeout: Duration::from_secs(300),
        stall_reclaim: STALL,
        ..ServerOptions::default()
    };
    let fabric = Box::new(SoftFabric::new().unwrap());
    let s = RdmaServer::new(fabric, pools.clone(), opts, addr()).unwrap();
    (s, pools)
}

/// A peer taking its replies slowly but steadily: one large reply outstanding at a
/// time, taken (polled) every `every`, the next call sent right after.
struct Steady {
    p: Peer,
    xid: u32,
    last: Instant,
    /// Its call waiting for a large buffer to answer it with.
    pending: Option<(CallRef, Buf)>,
}

impl Steady {
    const EVERY: Duration = Duration::from_millis(100);

    fn new(s: &mut RdmaServer) -> Steady {
        let mut p = Peer::connect(s);
        p.send(&null_call(500));
        Steady {
            p,
            xid: 501,
            last: Instant::now(),
            pending: None,
        }
    }

    /// One turn: take the replies and send the next call when due; answer a call
    /// once a large buffer is free (its previous reply's, back with its completion).
    fn turn(&mut self, s: &mut RdmaServer, pools: &Pools) {
        if self.last.elapsed() >= Self::EVERY {
            self.p.poll();
            self.p.send(&null_call(self.xid));
            self.xid += 1;
            self.last = Instant::now();
        }
        let mut calls = Calls::new();
        s.poll(&mut |r, _, rec, _: &[Reduced], _| calls.push((r, rec)));
        if let Some(c) = calls.pop() {
            assert!(
                calls.is_empty() && self.pending.is_none(),
                "one call at a time"
            );
            self.pending = Some(c);
        }
        if self.pending.is_some() && large_free(pools) > 0 {
            answer_large(s, pools, self.pending.take().unwrap());
        }
    }
}

/// Connects a peer, has it send `PER_BAD` calls and answers each with a large buffer;
/// the peer is never polled again. The first one gets a callback too.
fn bad_peers(s: &mut RdmaServer, pools: &Pools) -> (Vec<Peer>, ConnId) {
    let mut peers = Vec::new();
    let mut cb_conn = None;
    for b in 0..BAD {
        let mut p = if b == 0 {
            let (p, id) = establish(s, pools);
            cb_conn = Some(id);
            p
        } else {
            Peer::connect(s)
        };
        for x in 0..PER_BAD as u32 {
            p.send(&null_call(10 + 10 * b as u32 + x));
        }
        let mut calls = Calls::new();
        take_calls(s, &mut calls, PER_BAD);
        for c in calls.drain(..) {
            answer_large(s, pools, c);
        }
        peers.push(p);
    }
    let id = cb_conn.expect("set");
    s.send_callback(id, &cb_record(71, 64)).unwrap();
    (peers, id)
}

#[test]
fn peers_that_never_take_their_replies_are_reclaimed_only_while_a_neighbour_starves() {
    let (mut s, pools) = server(LARGE);
    let (bad, cb_conn) = bad_peers(&mut s, &pools);
    assert_eq!(large_free(&pools), LARGE - BAD * PER_BAD);
    let mut steady = Steady::new(&mut s);
    // Nobody starves (one large buffer stays free, the steady peer cycles its own):
    // the peers that take nothing are left alone for many stall windows.
    let quiet = Instant::now();
    while quiet.elapsed() < 4 * STALL {
        steady.turn(&mut s, &pools);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(s.stats().send_reclaimed, 0, "{:?}", s.stats());
    assert_eq!(s.connections(), BAD + 1);
    // A neighbour starves: the spare large buffer is taken and a further allocation
    // of the class finds it empty, again and again.
    let spare = pools.alloc(1 << 20).expect("the spare large buffer");
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.stats().send_reclaimed < BAD as u64 || s.connections() > 1 {
        assert!(Instant::now() < deadline, "not reclaimed: {:?}", s.stats());
        drop(pools.alloc(1 << 20));
        steady.turn(&mut s, &pools);
        std::thread::sleep(Duration::from_millis(1));
    }
    // The steady peer keeps its connection while starvation goes on.
    let more = Instant::now();
    let got = steady.p.got.len();
    while more.elapsed() < 4 * STALL {
        drop(pools.alloc(1 << 20));
        steady.turn(&mut s, &pools);
        std::thread::sleep(Duration::from_millis(1));
    }
    let st = s.stats();
    assert_eq!(
        (st.send_reclaimed, st.send_timeouts, st.disconnects),
        (BAD as u64, 0, BAD as u64),
        "{st:?}"
    );
    assert_eq!(s.connections(), 1, "the steady peer is kept");
    assert!(steady.p.got.len() > got, "the steady peer is served on");
    // The callback the reclaimed peer never took is reported lost.
    assert_eq!(st.cb_lost, 1);
    let ev = events(&mut s);
    assert_eq!(ev.len(), 1);
    assert_eq!((ev[0].0, ev[0].1, ev[0].3), (cb_conn, 71, "lost"));
    // Every large buffer of the reclaimed peers is back; with the spare and the
    // steady peer's last reply given back too, every buffer of the pools.
    drop(spare);
    let deadline = Instant::now() + Duration::from_secs(5);
    while steady.pending.is_some() || large_free(&pools) < LARGE {
        assert!(
            Instant::now() < deadline,
            "large buffers held: {}",
            LARGE - large_free(&pools)
        );
        if let Some(c) = steady.pending.take() {
            answer_large(&mut s, &pools, c);
        }
        steady.p.poll();
        s.poll(&mut |_, _, _, _: &[Reduced], _| {});
    }
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
fn a_starved_reactor_waits_the_stall_window_before_reclaiming() {
    // The class is exhausted from the start: the peer's replies are closed for
    // taking nothing only once they have been outstanding for the window.
    let (mut s, pools) = server(2);
    let mut p = Peer::connect(&mut s);
    p.send(&null_call(1));
    p.send(&null_call(2));
    let mut calls = Calls::new();
    take_calls(&mut s, &mut calls, 2);
    for c in calls.drain(..) {
        answer_large(&mut s, &pools, c);
    }
    let posted = Instant::now();
    let deadline = posted + Duration::from_secs(10);
    while s.connections() > 0 {
        assert!(Instant::now() < deadline, "never closed: {:?}", s.stats());
        assert!(pools.alloc(1 << 20).is_none() || s.stats().send_reclaimed == 1);
        s.poll(&mut |_, _, _, _: &[Reduced], _| {});
        std::thread::sleep(Duration::from_millis(1));
    }
    let took = posted.elapsed();
    assert!(took >= STALL, "reclaimed early: {took:?}");
    let st = s.stats();
    assert_eq!((st.send_reclaimed, st.send_timeouts), (1, 0), "{st:?}");
    assert_eq!(pools.in_use(), 0);
    drop(p);
}
