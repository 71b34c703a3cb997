//! `send_timeout` on the responder transport, over `soft` in one thread: a peer that
//! keeps to its credits but never takes its replies (on `soft` a Send completes when
//! the peer polls) is disconnected, counted, and every buffer its replies held comes
//! back; a peer that takes them slowly but steadily stays connected.

use super::cb_tests::{answer, cb_record, establish, events, null_call, Calls, Peer};
use super::*;
use crate::fabric::soft::SoftFabric;
use crate::mem::{ClassSpec, HugePolicy};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

pub(super) fn addr() -> SocketAddr {
    // Unique per process and per test (see `server_tests::addr`); own port range.
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    let ip = std::net::Ipv4Addr::new(127, (pid >> 16) as u8, (pid >> 8) as u8, pid as u8);
    SocketAddr::new(ip.into(), 56000 + n)
}

const LARGE: usize = 4;

fn server(send_timeout: Duration) -> (RdmaServer, Pools) {
    let pools = Pools::new(
        &[
            ClassSpec {
                size: 8192,
                count: 256,
            },
            ClassSpec {
                size: 1 << 20,
                count: LARGE,
            },
        ],
        HugePolicy::Off,
    )
    .unwrap();
    let opts = ServerOptions {
        credits: 8,
        min_credits: 8,
        max_connections: 4,
        send_timeout,
        ..ServerOptions::default()
    };
    let fabric = Box::new(SoftFabric::new().unwrap());
    let s = RdmaServer::new(fabric, pools.clone(), opts, addr()).unwrap();
    (s, pools)
}

pub(super) fn large_free(pools: &Pools) -> usize {
    pools.stats().last().map_or(0, |c| c.free)
}

/// Polls the server only (the peer is never polled here) until `n` calls arrived.
pub(super) fn take_calls(s: &mut RdmaServer, calls: &mut Calls, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while calls.len() < n {
        assert!(
            Instant::now() < deadline,
            "{} calls, {:?}",
            calls.len(),
            s.stats()
        );
        s.poll(&mut |r, _, rec, _: &[Reduced], _| calls.push((r, rec)));
    }
}

/// Answers a call with a reply whose buffer is a large one (as a READ's would be).
pub(super) fn answer_large(s: &mut RdmaServer, pools: &Pools, (call, rec): (CallRef, Buf)) {
    let xid = u32::from_be_bytes(rec[..4].try_into().unwrap());
    let mut b = pools.alloc(1 << 20).expect("a large buffer");
    b.set_len(24);
    b[..24].fill(0);
    b[..4].copy_from_slice(&xid.to_be_bytes());
    b[4..8].copy_from_slice(&1u32.to_be_bytes());
    s.reply(call, b, None);
}

#[test]
fn a_peer_that_never_takes_its_replies_is_closed_after_the_send_timeout() {
    let timeout = Duration::from_millis(300);
    let (mut s, pools) = server(timeout);
    let mut p = Peer::connect(&mut s);
    for x in 0..LARGE as u32 {
        p.send(&null_call(10 + x));
    }
    let mut calls = Calls::new();
    take_calls(&mut s, &mut calls, LARGE);
    for c in calls.drain(..) {
        answer_large(&mut s, &pools, c);
    }
    let posted = Instant::now();
    // `p` is never polled again: the replies' Sends never complete, and every large
    // buffer of the reactor is held by them.
    for _ in 0..100 {
        s.poll(&mut |_, _, _, _: &[Reduced], _| {});
    }
    assert_eq!(large_free(&pools), 0, "the replies hold the large buffers");
    assert_eq!(s.stats().replies, LARGE as u64);
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.stats().send_timeouts == 0 {
        assert!(
            Instant::now() < deadline,
            "never timed out: {:?}",
            s.stats()
        );
        s.poll(&mut |_, _, _, _: &[Reduced], _| {});
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        posted.elapsed() >= timeout,
        "closed early: {:?}",
        posted.elapsed()
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.connections() > 0 {
        assert!(Instant::now() < deadline, "never disconnected");
        s.poll(&mut |_, _, _, _: &[Reduced], _| {});
    }
    // Each reply's buffer came back once, with its Send's flush: nothing held, and
    // the pool can hand out every large buffer again.
    assert_eq!(pools.in_use(), 0);
    assert_eq!(large_free(&pools), LARGE);
    let st = s.stats();
    assert_eq!(
        (st.send_timeouts, st.read_timeouts, st.disconnects),
        (1, 0, 1)
    );
    // A new client is served.
    let mut q = Peer::connect(&mut s);
    q.send(&null_call(99));
    take_calls(&mut s, &mut calls, 1);
    answer(&mut s, &pools, calls.pop().unwrap());
    let deadline = Instant::now() + Duration::from_secs(5);
    while q.got.is_empty() {
        assert!(Instant::now() < deadline, "no reply to the new client");
        s.poll(&mut |_, _, _, _: &[Reduced], _| {});
        q.poll();
    }
    drop(p);
}

/// An idle reactor polls only between sleeps (every `engine.idle_sleep_us`, 10 ms by
/// default), so counting 256 polls would stretch the sweep to seconds: the sweep is
/// also taken in `arm`, before each sleep.
#[test]
fn an_idle_reactor_still_times_out_a_peer_that_never_takes_its_replies() {
    let timeout = Duration::from_millis(300);
    let (mut s, pools) = server(timeout);
    let mut p = Peer::connect(&mut s);
    p.send(&null_call(7));
    let mut calls = Calls::new();
    take_calls(&mut s, &mut calls, 1);
    answer(&mut s, &pools, calls.pop().unwrap());
    let posted = Instant::now();
    // The reactor's idle loop: arm, sleep 20 ms, poll (50 polls a second).
    let deadline = posted + Duration::from_secs(10);
    while s.connections() > 0 {
        assert!(Instant::now() < deadline, "never closed: {:?}", s.stats());
        if s.arm() {
            std::thread::sleep(Duration::from_millis(20));
        }
        s.poll(&mut |_, _, _, _: &[Reduced], _| {});
    }
    let took = posted.elapsed();
    assert_eq!(s.stats().send_timeouts, 1);
    assert!(took >= timeout, "closed early: {took:?}");
    // 256 idle polls alone would take over 5 s.
    assert!(
        took < Duration::from_secs(3),
        "the idle sweep took {took:?}"
    );
    assert_eq!(pools.in_use(), 0);
    drop(p);
}

#[test]
fn a_peer_that_takes_its_replies_slowly_but_steadily_stays_connected() {
    // Replies stay outstanding for 150 ms at a time, always some of them, for 3 s:
    // ten timeouts' worth with Sends outstanding, but never one without progress.
    let timeout = Duration::from_millis(300);
    let (mut s, pools) = server(timeout);
    let mut p = Peer::connect(&mut s);
    let mut calls = Calls::new();
    let start = Instant::now();
    let mut xid = 100;
    let mut last_peer_poll = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        if last_peer_poll.elapsed() >= Duration::from_millis(150) || xid == 100 {
            p.poll();
            for _ in 0..2 {
                p.send(&null_call(xid));
                xid += 1;
            }
            last_peer_poll = Instant::now();
        }
        s.poll(&mut |r, _, rec, _: &[Reduced], _| calls.push((r, rec)));
        for c in calls.drain(..) {
            answer(&mut s, &pools, c);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    p.poll();
    let st = s.stats();
    assert_eq!(st.send_timeouts, 0, "{st:?}");
    assert_eq!(s.connections(), 1);
    assert!(st.replies >= 30, "{st:?}");
    assert!(p.got.len() >= 30, "{} replies taken", p.got.len());
}

#[test]
fn a_callback_the_peer_never_takes_times_out_its_connection_and_is_lost() {
    let timeout = Duration::from_millis(300);
    let (mut s, pools) = server(timeout);
    let (p, id) = establish(&mut s, &pools);
    s.send_callback(id, &cb_record(71, 64)).unwrap();
    // `p` is never polled again: the callback's Send never completes.
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.connections() > 0 {
        assert!(Instant::now() < deadline, "never closed: {:?}", s.stats());
        s.poll(&mut |_, _, _, _: &[Reduced], _| {});
        std::thread::sleep(Duration::from_millis(1));
    }
    let st = s.stats();
    assert_eq!((st.send_timeouts, st.cb_lost), (1, 1), "{st:?}");
    let ev = events(&mut s);
    assert_eq!(ev.len(), 1);
    assert_eq!((ev[0].0, ev[0].1, ev[0].3), (id, 71, "lost"));
    assert_eq!(pools.in_use(), 0);
    assert_eq!(s.admission.reserved(), 0);
    drop(p);
}
