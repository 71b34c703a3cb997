//! Resource exhaustion by hostile or broken clients: record marks that
//! announce more than is sent, stalled partial records, clients that never read their
//! replies, pipelined calls whose replies are still being produced, connection floods.
//! Each test would hang or fail on a transport that lets
//! one client hold the pools.

use super::*;
use std::sync::mpsc;

/// Pools shaped like the gateway's (8 KiB / 64 KiB / 1 MiB + 4 KiB), small counts.
fn gw_pools(small: usize, medium: usize, large: usize) -> Pools {
    Pools::new(
        &[
            ClassSpec {
                size: 8192,
                count: small,
            },
            ClassSpec {
                size: 65536,
                count: medium,
            },
            ClassSpec {
                size: (1 << 20) + 4096,
                count: large,
            },
        ],
        HugePolicy::Off,
    )
    .unwrap()
}

fn large_free(p: &Pools) -> usize {
    p.stats().last().map_or(0, |c| c.free)
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A 1 MiB record mark followed by `n` body bytes (the record is never finished).
fn partial_1mib(n: usize) -> Vec<u8> {
    let mut w = record::mark(1 << 20).to_vec();
    w.extend(vec![0x5a; n]);
    w
}

#[test]
fn record_marks_alone_pin_no_pool_buffers() {
    // The slowloris measurement: 200 connections each announce a 1 MiB record and
    // send 4 bytes of it. Only 4 large buffers exist; a good client's 1 MiB records
    // must still be answered, and the announcements hold no pool memory at all.
    let p = gw_pools(64, 8, 4);
    let o = TcpOptions {
        max_connections: 300,
        ..opts()
    };
    let srv = Server::start(o, p.clone(), echo_reversed(p.clone()));
    let mut attackers: Vec<StdStream> = (0..200)
        .map(|_| {
            let mut s = connect(srv.addr);
            s.write_all(&partial_1mib(4)).unwrap();
            s
        })
        .collect();
    srv.wait_conns(200);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(p.in_use(), 0, "record marks pinned pool buffers");
    let mut good = connect(srv.addr);
    round_trip(&mut good, 0, &[(1 << 20) - 4, 1 << 19, 1000], 1);
    round_trip(&mut good, 10, &[(1 << 20) - 4], 3);
    // The attackers are still connected (nothing timed out) and still hold nothing
    // (the last reply's buffer returns just after its bytes were written).
    wait_until("the reply buffers back", || p.in_use() == 0);
    assert_eq!(srv.conns.load(Ordering::Relaxed), 201);
    attackers.clear();
    drop(good);
    let st = srv.finish();
    assert_eq!(st.reclaimed, 0);
}

#[test]
fn pool_memory_grows_with_bytes_received() {
    // 40 KiB of a 1 MiB record justify at most a 64 KiB buffer (the rest is not in
    // the socket); sending more of it moves the record into a large buffer.
    let p = gw_pools(16, 4, 2);
    let srv = Server::start(opts(), p.clone(), echo_reversed(p.clone()));
    let mut s = connect(srv.addr);
    s.write_all(&partial_1mib(40 << 10)).unwrap();
    wait_until("a medium buffer", || p.stats()[1].free == 3);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(large_free(&p), 2, "a large buffer before 64 KiB arrived");
    assert_eq!(p.in_use(), 1);
    s.write_all(&vec![0x5a; 100 << 10]).unwrap();
    wait_until("a large buffer", || large_free(&p) == 1);
    wait_until("the medium buffer back", || p.stats()[1].free == 4);
    // Finish the record: it is echoed intact.
    let rest = (1 << 20) - (140 << 10);
    s.write_all(&vec![0x5a; rest]).unwrap();
    let r = read_reply(&mut s).unwrap();
    assert_eq!(r.len(), 1 << 20);
    assert!(r.iter().all(|&b| b == 0x5a));
    drop(s);
    srv.finish();
}

#[test]
fn stalled_holders_are_reclaimed_when_a_client_starves() {
    // Four connections each send 100 KiB of a 1 MiB record and stop: they hold all
    // four large buffers. A good client's 1 MiB record parks; after stall_reclaim
    // the stalled holders are closed and the good client is answered.
    let p = gw_pools(16, 4, 4);
    let o = TcpOptions {
        stall_reclaim: Duration::from_millis(300),
        ..opts()
    };
    let srv = Server::start(o, p.clone(), echo_reversed(p.clone()));
    let mut holders: Vec<StdStream> = (0..4)
        .map(|_| {
            let mut s = connect(srv.addr);
            s.write_all(&partial_1mib(100 << 10)).unwrap();
            s
        })
        .collect();
    wait_until("the holders to take every large buffer", || {
        large_free(&p) == 0
    });
    // Holders that keep no one waiting are left alone.
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(srv.conns.load(Ordering::Relaxed), 4);
    let mut good = connect(srv.addr);
    round_trip(&mut good, 0, &[(1 << 20) - 4, (1 << 20) - 4], 1);
    for h in &mut holders {
        expect_closed(h);
    }
    drop(good);
    let st = srv.finish();
    assert_eq!(st.reclaimed, 4, "{st:?}");
    assert!(st.parks > 0, "{st:?}");
}

#[test]
fn stalled_partial_record_times_out_and_returns_its_buffer() {
    let p = gw_pools(16, 4, 2);
    let o = TcpOptions {
        record_timeout: Duration::from_millis(300),
        ..opts()
    };
    let srv = Server::start(o, p.clone(), echo_reversed(p.clone()));
    let mut s = connect(srv.addr);
    s.write_all(&partial_1mib(200 << 10)).unwrap();
    wait_until("a large buffer", || large_free(&p) == 1);
    let start = Instant::now();
    expect_closed(&mut s);
    assert!(start.elapsed() >= Duration::from_millis(100));
    // Closed by the server, not the client: the buffer is back while `s` is open.
    wait_until("the buffer back", || p.in_use() == 0);
    drop(s);
    let st = srv.finish();
    assert_eq!(st.timeouts, 1);
}

#[test]
fn client_that_never_reads_is_closed_after_the_send_timeout() {
    // The client pipelines 64 KiB calls and never reads. Its queued replies stop the
    // reading of its calls at max_queued, and with no write progress for
    // send_timeout the connection is closed and every buffer returns.
    let p = gw_pools(64, 64, 2);
    let o = TcpOptions {
        send_timeout: Duration::from_millis(500),
        max_queued: 256 << 10,
        ..opts()
    };
    let srv = Server::start(o, p.clone(), echo_reversed(p.clone()));
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(16 * 1024).unwrap();
    sock.connect(&srv.addr.into()).unwrap();
    let s: StdStream = sock.into();
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let call = encode(&body(1, 60_000), 1);
        let mut sent = 0;
        for _ in 0..400 {
            if w.write_all(&call).is_err() {
                break;
            }
            sent += 1;
        }
        sent
    });
    srv.wait_conns(1);
    srv.wait_conns(0);
    let sent = writer.join().unwrap();
    wait_until("every buffer back", || p.in_use() == 0);
    drop(s);
    let st = srv.finish();
    assert_eq!(st.send_timeouts, 1, "{st:?}");
    assert!(st.output_stalls > 0, "{st:?}");
    // Reading stopped: far fewer calls were taken than the client tried to send.
    assert!(st.records_in < 400, "{st:?} (client sent {sent})");
}

#[test]
fn slow_but_reading_client_is_not_timed_out() {
    // Replies pile up past max_queued while the client reads slowly; each read is
    // write progress, so the send timeout never fires and every reply arrives.
    let p = gw_pools(64, 64, 2);
    let o = TcpOptions {
        send_timeout: Duration::from_millis(300),
        max_queued: 128 << 10,
        ..opts()
    };
    let srv = Server::start(o, p.clone(), echo_reversed(p.clone()));
    let mut s = connect(srv.addr);
    let n = 40u32;
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        for i in 0..n {
            w.write_all(&encode(&body(i, 60_000), 1)).unwrap();
        }
    });
    for _ in 0..n {
        std::thread::sleep(Duration::from_millis(20));
        let r = read_reply(&mut s).unwrap();
        assert_eq!(r.len(), 60_000);
    }
    writer.join().unwrap();
    drop(s);
    let st = srv.finish();
    assert_eq!(st.send_timeouts, 0, "{st:?}");
    assert_eq!(st.records_in, n as u64);
}

#[test]
fn connection_flood_beyond_the_limit_is_refused_at_once() {
    let p = gw_pools(16, 1, 1);
    let o = TcpOptions {
        max_connections: 3,
        stall_reclaim: Duration::from_secs(60),
        ..opts()
    };
    let srv = Server::start(o, p.clone(), echo_reversed(p.clone()));
    let mut kept: Vec<StdStream> = (0..3).map(|_| connect(srv.addr)).collect();
    srv.wait_conns(3);
    // Connections that sent something within `stall_reclaim` never give way (see
    // `idle_connections_give_way_to_newcomers_at_the_limit`): all are refused.
    for _ in 0..30 {
        let mut c = connect(srv.addr);
        expect_closed(&mut c);
    }
    for (i, k) in kept.iter_mut().enumerate() {
        round_trip(k, i as u32 * 10, &[10, 20], 1);
    }
    kept.clear();
    let st = srv.finish();
    assert_eq!(st.refused, 30);
    assert_eq!(st.accepted, 3);
    assert_eq!(st.evicted, 0);
}

/// At `max_connections`, connections that hold their slot without using it give way
/// (knfsd closes its oldest idle connection): the one silent longest goes, the
/// newcomer is served; connections used within `stall_reclaim` are kept, so the next
/// newcomer is refused.
#[test]
fn idle_connections_give_way_to_newcomers_at_the_limit() {
    let p = gw_pools(16, 1, 1);
    let o = TcpOptions {
        max_connections: 3,
        stall_reclaim: Duration::from_millis(1000),
        ..opts()
    };
    let srv = Server::start(o, p.clone(), echo_reversed(p.clone()));
    let mut oldest = connect(srv.addr);
    srv.wait_conns(1);
    let mut busy: Vec<StdStream> = (0..2).map(|_| connect(srv.addr)).collect();
    srv.wait_conns(3);
    std::thread::sleep(Duration::from_millis(1200));
    for (i, b) in busy.iter_mut().enumerate() {
        round_trip(b, i as u32 * 10, &[10], 1);
    }
    let mut fresh = connect(srv.addr);
    round_trip(&mut fresh, 100, &[10, 2000], 1);
    expect_closed(&mut oldest);
    let mut late = connect(srv.addr);
    expect_closed(&mut late);
    for (i, b) in busy.iter_mut().enumerate() {
        round_trip(b, 200 + i as u32 * 10, &[10], 1);
    }
    drop((busy, fresh));
    let st = srv.finish();
    assert_eq!((st.evicted, st.refused), (1, 1), "{st:?}");
}

/// A connection stalled in the middle of a record (part of it sent, nothing more
/// for `stall_reclaim`) gives way before an idle one, even a longer idle one.
#[test]
fn a_stalled_partial_record_gives_way_first() {
    let p = gw_pools(16, 1, 1);
    let o = TcpOptions {
        max_connections: 2,
        stall_reclaim: Duration::from_millis(200),
        ..opts()
    };
    let srv = Server::start(o, p.clone(), echo_reversed(p.clone()));
    let mut idle = connect(srv.addr);
    srv.wait_conns(1);
    let mut stalled = connect(srv.addr);
    stalled.write_all(&partial_1mib(100)).unwrap();
    srv.wait_conns(2);
    std::thread::sleep(Duration::from_millis(300));
    let mut fresh = connect(srv.addr);
    round_trip(&mut fresh, 0, &[10], 1);
    expect_closed(&mut stalled);
    round_trip(&mut idle, 10, &[10], 1);
    drop((idle, fresh));
    let st = srv.finish();
    assert_eq!((st.evicted, st.refused), (1, 0), "{st:?}");
}

#[test]
fn a_thousand_connections_work_and_leave_nothing_behind() {
    // 1,000 concurrent connections on one transport, each doing a few calls, then all
    // closed: every pool buffer and connection slot is released.
    let p = gw_pools(1100, 16, 2);
    let o = TcpOptions {
        max_connections: 1100,
        ..opts()
    };
    let srv = Server::start(o, p.clone(), echo_reversed(p.clone()));
    let mut conns: Vec<StdStream> = (0..1000).map(|_| connect(srv.addr)).collect();
    srv.wait_conns(1000);
    for (i, c) in conns.iter_mut().enumerate() {
        c.write_all(&encode(&body(i as u32, 100), 1)).unwrap();
    }
    for (i, c) in conns.iter_mut().enumerate() {
        assert_eq!(read_reply(c).unwrap(), body(i as u32, 100));
    }
    for (i, c) in conns.iter_mut().enumerate().step_by(10) {
        round_trip(c, 1_000_000 + i as u32 * 4, &[8000, 20_000, 300], 2);
    }
    conns.clear();
    let st = srv.finish();
    assert_eq!(st.accepted, 1000);
    assert_eq!(st.records_in, 1000 + 300);
}

/// What the test tells the server thread to do with the oldest held records.
enum Cmd {
    /// Answer `n` with a small reply, dropping their charges first (or not: their
    /// charges live on, as a call's would while something still holds it).
    Send { n: usize, release: bool },
    /// Answer `n` with no reply, dropping their charges first.
    NoReply { n: usize },
    /// Drop the charges kept by `Send { release: false }`, answering nothing.
    Forget,
}

/// A server that charges `charge` reply bytes per record, holds every record until
/// told, and counts the records delivered so far.
fn holding_server(
    o: TcpOptions,
    p: &Pools,
    charge: usize,
) -> (Server, mpsc::Sender<Cmd>, Arc<AtomicUsize>) {
    let (tx, rx) = mpsc::channel::<Cmd>();
    let delivered = Arc::new(AtomicUsize::new(0));
    let d2 = delivered.clone();
    let pools = p.clone();
    let mut answered = 0;
    let mut kept = Vec::new();
    let srv = Server::start_charging(
        o,
        p.clone(),
        move |_| charge,
        move |t, held, charges| {
            held.sort_by_key(|h| h.2);
            while let Ok(cmd) = rx.try_recv() {
                let (n, reply, release) = match cmd {
                    Cmd::Send { n, release } => (n, true, release),
                    Cmd::NoReply { n } => (n, false, true),
                    Cmd::Forget => {
                        kept.clear();
                        continue;
                    }
                };
                for (c, b, _) in held.drain(..n.min(held.len())) {
                    if release {
                        uncharge(charges, c);
                    } else if let Some(i) = charges.iter().position(|(k, _)| *k == c) {
                        kept.push(charges.remove(i));
                    }
                    if reply {
                        let mut r = pools.alloc(8).unwrap();
                        r.spare_mut()[4..8].copy_from_slice(&b[..4]);
                        r.set_len(8);
                        t.send(c, r);
                    } else {
                        t.no_reply(c);
                    }
                    answered += 1;
                }
            }
            d2.store(answered + held.len(), Ordering::Relaxed);
        },
    );
    (srv, tx, delivered)
}

fn settled(delivered: &AtomicUsize, want: usize) {
    wait_until(&format!("{want} records delivered"), || {
        delivered.load(Ordering::Relaxed) >= want
    });
    // The budget holds: nothing more arrives while it is used up.
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        delivered.load(Ordering::Relaxed),
        want,
        "read past the reply budget"
    );
}

#[test]
fn reserved_reply_bytes_stop_reading_until_released() {
    // Standards: a client must not pin shared buffers by reading nothing. It pipelines
    // 64 calls whose replies each reserve 1 MiB and reads nothing: only max_queued
    // (4 MiB) worth are taken, not max_inflight (64), however few replies are queued.
    // Each charge dropped (before a reply or a no-reply) lets exactly one more in; a
    // charge that lives on holds the budget whatever is answered, until it is dropped
    // anywhere (the sweep reads the connection again); a close leaks nothing.
    let p = gw_pools(128, 4, 2);
    let o = TcpOptions {
        max_queued: 4 << 20,
        ..opts()
    };
    let (srv, tx, delivered) = holding_server(o, &p, 1 << 20);
    let mut s = connect(srv.addr);
    let wire: Vec<u8> = (0..64).flat_map(|i| encode(&body(i, 16), 1)).collect();
    s.write_all(&wire).unwrap();
    settled(&delivered, 4);
    // Released and answered: one more call each.
    tx.send(Cmd::Send {
        n: 2,
        release: true,
    })
    .unwrap();
    settled(&delivered, 6);
    for want in [0u32, 1] {
        let r = read_reply(&mut s).unwrap();
        assert_eq!(r, want.to_be_bytes());
    }
    tx.send(Cmd::NoReply { n: 2 }).unwrap();
    settled(&delivered, 8);
    // Answered while their charges live on: the budget stays used, even with nothing
    // in flight; dropped away from any send, the charges give it back and the
    // connection is read again (four more).
    tx.send(Cmd::Send {
        n: 3,
        release: false,
    })
    .unwrap();
    settled(&delivered, 8);
    tx.send(Cmd::Send {
        n: 1,
        release: false,
    })
    .unwrap();
    settled(&delivered, 8);
    tx.send(Cmd::Forget).unwrap();
    settled(&delivered, 12);
    for want in [4u32, 5, 6, 7] {
        assert_eq!(read_reply(&mut s).unwrap(), want.to_be_bytes());
    }
    // Closed by the client with four calls held (a stalled connection is not read,
    // so the close is seen once they are answered): nothing is left behind.
    drop(s);
    tx.send(Cmd::Send {
        n: 4,
        release: true,
    })
    .unwrap();
    srv.wait_conns(0);
    wait_until("every buffer back", || p.in_use() == 0);
    let st = srv.finish();
    assert!(st.reply_budget_stalls >= 4, "{st:?}");
    assert_eq!(st.output_stalls, 0, "{st:?}");
    assert_eq!(st.records_in, 12, "{st:?}");
}

#[test]
fn reservations_made_outside_poll_gate_reading_too() {
    // A record classified after the poll that delivered it (the gateway's parked
    // calls) is charged through `charge`; the next record waits until the charge is
    // dropped.
    let p = gw_pools(64, 2, 1);
    let o = TcpOptions {
        max_queued: 1 << 20,
        ..opts()
    };
    let (tx, rx) = mpsc::channel::<()>();
    let delivered = Arc::new(AtomicUsize::new(0));
    let d2 = delivered.clone();
    let mut first = None;
    let mut charge = None;
    let srv = Server::start(o, p.clone(), move |t, held| {
        if let (None, Some((c, _, _))) = (first, held.first()) {
            charge = t.charge(*c, 1 << 20);
            assert_eq!(t.budget_used(*c), 1 << 20);
            first = Some(*c);
        }
        if rx.try_recv().is_ok() {
            drop(charge.take());
        }
        d2.fetch_max(held.len(), Ordering::Relaxed);
        if held.len() == 2 {
            for (c, _, _) in held.drain(..) {
                t.no_reply(c);
            }
        }
    });
    let mut s = connect(srv.addr);
    s.write_all(&encode(&body(0, 16), 1)).unwrap();
    settled(&delivered, 1);
    s.write_all(&encode(&body(1, 16), 1)).unwrap();
    settled(&delivered, 1);
    tx.send(()).unwrap();
    wait_until("the second record", || {
        delivered.load(Ordering::Relaxed) == 2
    });
    drop(s);
    let st = srv.finish();
    assert_eq!(st.records_in, 2);
    assert_eq!(st.reply_budget_stalls, 1, "{st:?}");
}

/// A "READ" call: the reply carries `len` bytes after the id.
fn read_call(id: u32, len: u32) -> Vec<u8> {
    let mut b = id.to_be_bytes().to_vec();
    b.extend(len.to_be_bytes());
    encode(&b, 1)
}

/// The reply bytes a `read_call` reserves while it is answered (the gateway's
/// `reply_want`): its record mark, id and data.
fn read_charge(b: &Buf) -> usize {
    8 + u32::from_be_bytes(b[4..8].try_into().unwrap()) as usize
}

/// Answers each `read_call` like the gateway answers a READ: a reply buffer for the
/// whole count, or (that class exhausted) a short reply in a 64 KiB buffer; with no
/// buffer at all the call waits for the next pass.
fn reader(pools: Pools) -> impl FnMut(&mut TcpTransport, &mut Held, &mut Charges) + Send {
    move |t, held, charges| {
        let mut keep = Vec::new();
        for (c, b, at) in held.drain(..) {
            let id = u32::from_be_bytes(b[..4].try_into().unwrap());
            let want = read_charge(&b);
            let Some(mut r) = pools.alloc(want).or_else(|| pools.alloc(GROW_STEP)) else {
                keep.push((c, b, at));
                continue;
            };
            let n = want.min(r.capacity()) - 8;
            r.spare_mut()[4..8].copy_from_slice(&id.to_be_bytes());
            for (i, x) in r.spare_mut()[8..8 + n].iter_mut().enumerate() {
                *x = (i as u32).wrapping_add(id) as u8;
            }
            r.set_len(8 + n);
            uncharge(charges, c);
            t.send(c, r);
        }
        *held = keep;
    }
}

/// A connection with a `rcvbuf`-byte receive buffer (a small one takes few reply bytes
/// off the server) and `calls` READs of `len` bytes pipelined on it.
fn reader_conn(addr: SocketAddr, rcvbuf: usize, first: u32, calls: u32, len: u32) -> StdStream {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(rcvbuf).unwrap();
    sock.connect(&addr.into()).unwrap();
    let mut s: StdStream = sock.into();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let wire: Vec<u8> = (first..first + calls)
        .flat_map(|i| read_call(i, len))
        .collect();
    s.write_all(&wire).unwrap();
    s
}

#[test]
fn connections_that_never_read_are_reclaimed_when_a_client_starves() {
    // Standards: no starved neighbour. Each connection's replies stay within
    // max_queued (2 MiB here: two large buffers), but three such connections take all
    // six large buffers: two never read, one opens its window a few bytes at a time.
    // Until a neighbour starves they are left alone (send_timeout is for them). A
    // good client's 1 MiB READs then come back short (64 KiB): that starvation closes
    // the three after stall_reclaim, long before send_timeout, and the good client
    // gets full replies. A connection reading 60 KiB replies slowly but steadily all
    // along (its queue holds medium buffers) keeps its connection and every reply.
    let p = gw_pools(64, 48, 6);
    let o = TcpOptions {
        stall_reclaim: Duration::from_millis(300),
        max_queued: 2 << 20,
        ..opts()
    };
    let srv = Server::start_charging(o, p.clone(), read_charge, reader(p.clone()));
    let mut hostile: Vec<StdStream> = (0..2)
        .map(|k| reader_conn(srv.addr, 4096, k * 100, 6, 1 << 20))
        .collect();
    wait_until("the hostile connections to fill their budgets", || {
        large_free(&p) == 2
    });
    // The trickler reads 16 bytes every 50 ms: a window update now and then, far
    // below RECLAIM_PROGRESS per stall_reclaim. Once told, it reads what is left
    // quickly and says whether the server closed its connection.
    let mut t = reader_conn(srv.addr, 4096, 200, 6, 1 << 20);
    let told = Arc::new(AtomicBool::new(false));
    let told2 = told.clone();
    let trickler = std::thread::spawn(move || {
        let mut b = vec![0u8; 1 << 16];
        let mut got = 0usize;
        loop {
            let quick = told2.load(Ordering::Relaxed);
            if !quick {
                std::thread::sleep(Duration::from_millis(50));
            }
            match t.read(&mut b[..if quick { 1 << 16 } else { 16 }]) {
                Ok(0) => return (got, true),
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return (got, true),
                Err(_) => return (got, false),
                Ok(n) => got += n,
            }
        }
    });
    wait_until("every large buffer taken", || large_free(&p) == 0);
    // The steady reader keeps 200 calls for 60 KiB replies outstanding (more than the
    // kernel's socket buffers hold, so its queue holds up to max_queued of medium
    // buffers) and every 100 ms reads what arrived (up to 256 KiB): it drains steadily,
    // in bursts, until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let len = 60u32 << 10;
    let mut steady = reader_conn(srv.addr, 128 << 10, 300, 200, len);
    let steady = std::thread::spawn(move || {
        let mut buf = vec![0u8; 256 << 10];
        let mut pending: Vec<u8> = Vec::new();
        let (mut replies, mut next) = (0u32, 500u32);
        while !stop2.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
            let n = steady
                .read(&mut buf)
                .expect("the steady reader's connection");
            assert!(n > 0, "the steady reader's connection was closed");
            pending.extend_from_slice(&buf[..n]);
            while pending.len() >= 4 {
                let mark = u32::from_be_bytes(pending[..4].try_into().unwrap());
                let l = (mark & !record::LAST_FRAGMENT) as usize;
                if pending.len() < 4 + l {
                    break;
                }
                assert_eq!(pending[4..8], (300 + replies).to_be_bytes());
                assert_eq!(l, 4 + len as usize);
                pending.drain(..4 + l);
                replies += 1;
                // One more call for each reply read: the pipeline stays as deep.
                steady.write_all(&read_call(next, len)).unwrap();
                next += 1;
            }
        }
        (steady, replies)
    });
    wait_until("the steady reader's queue to hold medium buffers", || {
        p.stats()[1].free <= 46
    });
    // Nobody starves yet: the connections that read nothing are left alone.
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(srv.conns.load(Ordering::Relaxed), 4);

    let mut good = connect(srv.addr);
    let start = Instant::now();
    let mut short = 0;
    for i in 0.. {
        good.write_all(&read_call(1000 + i, 1 << 20)).unwrap();
        let r = read_reply(&mut good).unwrap();
        assert_eq!(r[..4], (1000 + i).to_be_bytes());
        if r.len() == 4 + (1 << 20) {
            assert!(r[4..]
                .iter()
                .enumerate()
                .all(|(k, &x)| x == (k as u32).wrapping_add(1000 + i) as u8));
            break;
        }
        short += 1;
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "replies still short after {:?}",
            start.elapsed()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(short > 0, "the good client never starved");
    for h in &mut hostile {
        expect_closed(h);
    }
    told.store(true, Ordering::Relaxed);
    let (trickled, closed) = trickler.join().unwrap();
    assert!(
        trickled > 0 && closed,
        "trickler: {trickled} bytes, closed: {closed}"
    );
    // The steady reader kept its connection and its replies all along.
    stop.store(true, Ordering::Relaxed);
    let (steady, replies) = steady.join().unwrap();
    assert!(replies >= 10, "the steady reader got {replies} replies");
    drop((hostile, steady, good));
    let st = srv.finish();
    assert_eq!(st.send_reclaimed, 3, "{st:?}");
    assert_eq!(st.send_timeouts, 0, "{st:?}");
    assert_eq!(st.reclaimed, 0, "{st:?}");
}
