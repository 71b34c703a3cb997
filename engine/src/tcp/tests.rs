//! Loopback tests: a server thread polls the transport; clients use blocking std sockets.

use super::*;
use crate::mem::{ClassSpec, HugePolicy};
use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::TcpStream as StdStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;

pub(super) type Held = Vec<(ConnId, Buf, Instant)>;
/// The reply-budget charges of held records, in delivery order (`start_charging`).
pub(super) type Charges = Vec<(ConnId, Charge)>;

/// Gives back the oldest charge `c`'s records hold (drops it).
pub(super) fn uncharge(charges: &mut Charges, c: ConnId) {
    if let Some(i) = charges.iter().position(|(k, _)| *k == c) {
        drop(charges.remove(i));
    }
}

pub(super) fn pools(small: usize, mid: usize, big: usize) -> Pools {
    let mut specs = vec![ClassSpec {
        size: 4096,
        count: small,
    }];
    if mid > 0 {
        specs.push(ClassSpec {
            size: 65536,
            count: mid,
        });
    }
    if big > 0 {
        specs.push(ClassSpec {
            size: 1 << 20,
            count: big,
        });
    }
    Pools::new(&specs, HugePolicy::Off).unwrap()
}

pub(super) fn opts() -> TcpOptions {
    TcpOptions {
        max_record: 1 << 20,
        max_connections: 128,
        max_inflight: 64,
        record_timeout: Duration::from_secs(10),
        ..TcpOptions::default()
    }
}

/// A server thread owning the transport. `handler` sees every held record each pass
/// and answers (removes) those it wants.
pub(super) struct Server {
    pub(super) addr: SocketAddr,
    pools: Pools,
    stop: Arc<AtomicBool>,
    conns: Arc<AtomicUsize>,
    join: Option<JoinHandle<TcpStats>>,
}

impl Server {
    pub(super) fn start<H>(o: TcpOptions, pools: Pools, handler: H) -> Server
    where
        H: FnMut(&mut TcpTransport, &mut Held) + Send + 'static,
    {
        let mut handler = handler;
        Self::start_charging(o, pools, |_| 0, move |t, held, _| handler(t, held))
    }

    /// Like `start`; `charge` says the reply bytes each delivered record reserves,
    /// and the handler sees the charges (dropping one gives its bytes back).
    pub(super) fn start_charging<C, H>(
        o: TcpOptions,
        pools: Pools,
        mut charge: C,
        mut handler: H,
    ) -> Server
    where
        C: FnMut(&Buf) -> usize + Send + 'static,
        H: FnMut(&mut TcpTransport, &mut Held, &mut Charges) + Send + 'static,
    {
        let mut t = TcpTransport::bind("127.0.0.1:0".parse().unwrap(), o, pools.clone()).unwrap();
        let addr = t.local_addr();
        let stop = Arc::new(AtomicBool::new(false));
        let conns = Arc::new(AtomicUsize::new(0));
        let (s2, c2) = (stop.clone(), conns.clone());
        let join = std::thread::spawn(move || {
            let mut held: Held = Vec::new();
            let mut charges: Charges = Vec::new();
            while !s2.load(Ordering::Relaxed) {
                t.poll(
                    Some(Duration::from_millis(2)),
                    &mut |c, _peer, b, budget| {
                        if let Some(ch) = budget.charge(charge(&b)) {
                            charges.push((c, ch));
                        }
                        held.push((c, b, Instant::now()));
                    },
                );
                handler(&mut t, &mut held, &mut charges);
                c2.store(t.connections(), Ordering::Relaxed);
            }
            drop((held, charges));
            t.stats()
        });
        Server {
            addr,
            pools,
            stop,
            conns,
            join: Some(join),
        }
    }

    pub(super) fn wait_conns(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.conns.load(Ordering::Relaxed) != n {
            assert!(
                Instant::now() < deadline,
                "server kept {} connections",
                self.conns.load(Ordering::Relaxed)
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Waits for every connection to be gone, stops, and checks nothing leaked.
    pub(super) fn finish(mut self) -> TcpStats {
        self.wait_conns(0);
        self.stop.store(true, Ordering::Relaxed);
        let stats = self.join.take().unwrap().join().unwrap();
        assert_eq!(self.pools.in_use(), 0, "buffers leaked");
        stats
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

/// Turns a request into its echo reply: the same body after 4 reserved bytes, in the
/// same buffer when it fits, else in a new one. Pools exhausted: the request comes back.
fn try_echo(pools: &Pools, mut b: Buf) -> Result<Buf, Buf> {
    let len = b.len();
    if len + 4 <= b.capacity() {
        b.spare_mut().copy_within(0..len, 4);
        b.set_len(len + 4);
        return Ok(b);
    }
    let Some(mut r) = pools.alloc(len + 4) else {
        return Err(b);
    };
    r.spare_mut()[4..len + 4].copy_from_slice(&b);
    r.set_len(len + 4);
    Ok(r)
}

pub(super) fn echo_reply(pools: &Pools, b: Buf) -> Buf {
    try_echo(pools, b).expect("reply buffer")
}

/// Answers everything held, newest first (replies out of order); a request whose
/// reply buffer is not available yet stays held.
fn echo_reversed(pools: Pools) -> impl FnMut(&mut TcpTransport, &mut Held) + Send {
    move |t, held| {
        let mut keep = Vec::new();
        while let Some((c, b, at)) = held.pop() {
            match try_echo(&pools, b) {
                Ok(r) => t.send(c, r),
                Err(b) => keep.push((c, b, at)),
            }
        }
        held.extend(keep.into_iter().rev());
    }
}

/// Answers records only once they are `age` old.
fn echo_after(pools: Pools, age: Duration) -> impl FnMut(&mut TcpTransport, &mut Held) + Send {
    move |t, held| {
        let now = Instant::now();
        let (ripe, keep): (Held, Held) = held.drain(..).partition(|(_, _, at)| now - *at >= age);
        *held = keep;
        for (c, b, _) in ripe {
            t.send(c, echo_reply(&pools, b));
        }
    }
}

fn connect(addr: SocketAddr) -> StdStream {
    let s = StdStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// A record body starting with its id.
pub(super) fn body(id: u32, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len.max(4))
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(id) as u8)
        .collect();
    v[..4].copy_from_slice(&id.to_be_bytes());
    v.truncate(len.max(4));
    v
}

/// Encodes `body` as `frags` fragments (a zero-length one in the middle when frags > 2).
pub(super) fn encode(body: &[u8], frags: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let per = body.len().div_ceil(frags.max(1)).max(1);
    let mut chunks: Vec<&[u8]> = body.chunks(per).collect();
    if frags > 2 {
        chunks.insert(1, &[]);
    }
    if chunks.is_empty() {
        chunks.push(&[]);
    }
    let n = chunks.len();
    for (i, c) in chunks.into_iter().enumerate() {
        let last = if i + 1 == n { record::LAST_FRAGMENT } else { 0 };
        out.extend_from_slice(&(last | c.len() as u32).to_be_bytes());
        out.extend_from_slice(c);
    }
    out
}

/// Reads one reply record (single fragment, as the transport sends).
pub(super) fn read_reply(s: &mut StdStream) -> io::Result<Vec<u8>> {
    let mut m = [0u8; 4];
    s.read_exact(&mut m)?;
    let w = u32::from_be_bytes(m);
    assert!(
        w & record::LAST_FRAGMENT != 0,
        "replies are single fragments"
    );
    let mut b = vec![0u8; (w & !record::LAST_FRAGMENT) as usize];
    s.read_exact(&mut b)?;
    Ok(b)
}

/// The server closed the connection: EOF or reset, within the read timeout.
fn expect_closed(s: &mut StdStream) {
    let mut b = [0u8; 64];
    loop {
        match s.read(&mut b) {
            Ok(0) => return,
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return,
            Err(e) => panic!("expected the server to close, got {e}"),
        }
    }
}

/// Sends `n` records pipelined, then checks every reply arrives (in any order).
fn round_trip(s: &mut StdStream, base: u32, sizes: &[usize], frags: usize) {
    let mut want = HashMap::new();
    let mut wire = Vec::new();
    for (i, &len) in sizes.iter().enumerate() {
        let id = base + i as u32;
        let b = body(id, len);
        wire.extend(encode(&b, frags));
        want.insert(id, b);
    }
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || w.write_all(&wire).unwrap());
    for _ in 0..sizes.len() {
        let r = read_reply(s).unwrap();
        let id = u32::from_be_bytes(r[..4].try_into().unwrap());
        assert_eq!(want.remove(&id).as_deref(), Some(&r[..]), "reply {id}");
    }
    writer.join().unwrap();
    assert!(want.is_empty());
}

#[test]
fn echo_pipelined_with_multi_fragment_records() {
    let p = pools(256, 32, 4);
    let srv = Server::start(opts(), p.clone(), echo_reversed(p.clone()));
    let mut s = connect(srv.addr);
    let sizes: Vec<usize> = (0..200)
        .map(|i| [4, 5, 100, 3000, 4092, 5000, 20000][i % 7])
        .collect();
    round_trip(&mut s, 0, &sizes, 1);
    round_trip(&mut s, 1000, &sizes, 3);
    round_trip(&mut s, 2000, &sizes[..50], 7);
    drop(s);
    let st = srv.finish();
    assert_eq!(st.records_in, 450);
    assert_eq!(st.replies_out, 450);
    assert_eq!(st.accepted, 1);
}

#[test]
fn large_records_are_read_directly_and_echoed() {
    let p = pools(64, 8, 4);
    let srv = Server::start(opts(), p.clone(), echo_reversed(p.clone()));
    let mut s = connect(srv.addr);
    // The largest record plus its reply mark fills a 1 MiB buffer exactly.
    round_trip(
        &mut s,
        0,
        &[(1 << 20) - 4, 1_000_000, 100, 300_000, 8192, 9000],
        1,
    );
    round_trip(&mut s, 100, &[1_000_000, 70_000], 4);
    drop(s);
    let st = srv.finish();
    assert_eq!(st.records_in, 8);
    assert!(st.bytes_direct > 3_000_000, "{st:?}");
}

#[test]
fn zero_length_record_is_delivered() {
    let p = pools(16, 0, 0);
    let seen = Arc::new(AtomicUsize::new(usize::MAX));
    let seen2 = seen.clone();
    let p2 = p.clone();
    let srv = Server::start(opts(), p.clone(), move |t, held| {
        for (c, b, _) in held.drain(..) {
            seen2.store(b.len(), Ordering::Relaxed);
            t.send(c, echo_reply(&p2, b));
        }
    });
    let mut s = connect(srv.addr);
    s.write_all(&[0x80, 0, 0, 0]).unwrap();
    assert_eq!(read_reply(&mut s).unwrap(), Vec::<u8>::new());
    assert_eq!(seen.load(Ordering::Relaxed), 0);
    drop(s);
    srv.finish();
}

#[test]
fn oversized_record_closes_only_that_connection() {
    let p = pools(64, 8, 0);
    let o = TcpOptions {
        max_record: 8192,
        ..opts()
    };
    let srv = Server::start(o, p.clone(), echo_reversed(p.clone()));
    let mut good = connect(srv.addr);
    let mut bad = connect(srv.addr);
    round_trip(&mut good, 0, &[10, 8192], 1);
    // Announce 8193 bytes in two fragments: closed at the second header.
    let mut wire = (4096u32).to_be_bytes().to_vec();
    wire.extend(vec![1u8; 4096]);
    wire.extend((record::LAST_FRAGMENT | 4097).to_be_bytes());
    bad.write_all(&wire).unwrap();
    expect_closed(&mut bad);
    round_trip(&mut good, 10, &[10, 20, 30], 2);
    // A garbage mark on a fresh connection is rejected at once.
    let mut bad2 = connect(srv.addr);
    bad2.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    expect_closed(&mut bad2);
    round_trip(&mut good, 20, &[10], 1);
    drop(good);
    let st = srv.finish();
    assert_eq!(st.oversize, 2);
}

#[test]
fn stalled_partial_record_times_out_while_others_work() {
    let p = pools(64, 0, 0);
    let o = TcpOptions {
        record_timeout: Duration::from_millis(200),
        ..opts()
    };
    let srv = Server::start(o, p.clone(), echo_reversed(p.clone()));
    let mut good = connect(srv.addr);
    let mut idle = connect(srv.addr);
    let mut stalled = connect(srv.addr);
    let mut half_mark = connect(srv.addr);
    let start = Instant::now();
    stalled.write_all(&[0x80, 0, 0, 100, 1, 2, 3]).unwrap();
    half_mark.write_all(&[0x80, 0]).unwrap();
    // Keep the good connection busy past the timeout.
    for i in 0..8 {
        round_trip(&mut good, i * 10, &[50, 60], 1);
        std::thread::sleep(Duration::from_millis(40));
    }
    expect_closed(&mut stalled);
    expect_closed(&mut half_mark);
    assert!(start.elapsed() >= Duration::from_millis(200));
    // The idle connection (no partial record) and the busy one survive.
    round_trip(&mut idle, 100, &[10], 1);
    round_trip(&mut good, 200, &[10], 1);
    drop((good, idle));
    let st = srv.finish();
    assert_eq!(st.timeouts, 2);
}

#[test]
fn pool_exhaustion_parks_and_resumes() {
    // Three 4 KiB buffers in all; the server holds each record 30 ms, so the
    // connection must park and resume several times. Replies reuse request buffers.
    let p = pools(3, 0, 0);
    let srv = Server::start(
        opts(),
        p.clone(),
        echo_after(p.clone(), Duration::from_millis(30)),
    );
    let mut s = connect(srv.addr);
    let sizes = vec![100; 12];
    round_trip(&mut s, 0, &sizes, 1);
    round_trip(&mut s, 100, &sizes, 2);
    drop(s);
    let st = srv.finish();
    assert!(st.parks > 0, "{st:?}");
    assert_eq!(st.records_in, 24);
}

#[test]
fn backpressure_caps_records_in_flight() {
    let p = pools(64, 0, 0);
    let o = TcpOptions {
        max_inflight: 2,
        ..opts()
    };
    let max_seen = Arc::new(AtomicUsize::new(0));
    let m2 = max_seen.clone();
    let mut inner = echo_after(p.clone(), Duration::from_millis(20));
    let srv = Server::start(o, p.clone(), move |t, held| {
        m2.fetch_max(held.len(), Ordering::Relaxed);
        inner(t, held);
    });
    let mut s = connect(srv.addr);
    round_trip(&mut s, 0, &[64; 10], 1);
    drop(s);
    let st = srv.finish();
    assert_eq!(max_seen.load(Ordering::Relaxed), 2);
    assert!(st.backpressured > 0);
}

#[test]
fn fifty_concurrent_connections() {
    let p = pools(512, 16, 0);
    let srv = Server::start(opts(), p.clone(), echo_reversed(p.clone()));
    let addr = srv.addr;
    let clients: Vec<_> = (0..50u32)
        .map(|k| {
            std::thread::spawn(move || {
                let mut s = connect(addr);
                let sizes: Vec<usize> = (0..20)
                    .map(|i| 8 + (i * 397 + k as usize * 13) % 6000)
                    .collect();
                round_trip(&mut s, k * 1000, &sizes, 1 + (k as usize % 3));
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    let st = srv.finish();
    assert_eq!(st.accepted, 50);
    assert_eq!(st.records_in, 1000);
}

#[test]
fn connections_beyond_the_limit_are_closed() {
    let p = pools(16, 0, 0);
    let o = TcpOptions {
        max_connections: 2,
        // Idle connections give way only after this long (`evict_for`).
        stall_reclaim: Duration::from_secs(60),
        ..opts()
    };
    let srv = Server::start(o, p.clone(), echo_reversed(p.clone()));
    let mut a = connect(srv.addr);
    let mut b = connect(srv.addr);
    srv.wait_conns(2);
    let mut c = connect(srv.addr);
    expect_closed(&mut c);
    round_trip(&mut a, 0, &[10], 1);
    round_trip(&mut b, 10, &[10], 1);
    drop((a, b));
    let st = srv.finish();
    assert_eq!(st.refused, 1);
}

#[test]
fn a_slot_whose_peer_hung_up_is_not_a_reason_to_refuse() {
    // The reactor learns of two hang-ups and a new connection in the same poll, with
    // the table full: the newcomer gets a slot of a departed peer, not a refusal.
    let p = pools(16, 0, 0);
    let o = TcpOptions {
        max_connections: 2,
        ..opts()
    };
    let mut t = TcpTransport::bind("127.0.0.1:0".parse().unwrap(), o, p.clone()).unwrap();
    let addr = t.local_addr();
    let mut none = |_: ConnId, _: SocketAddr, _: Buf, _: &Budget| {};
    let (a, b) = (connect(addr), connect(addr));
    let deadline = Instant::now() + Duration::from_secs(10);
    while t.connections() < 2 {
        assert!(Instant::now() < deadline, "never accepted both");
        t.poll(Some(Duration::from_millis(2)), &mut none);
    }
    drop((a, b));
    std::thread::sleep(Duration::from_millis(50));
    let c = connect(addr);
    std::thread::sleep(Duration::from_millis(50));
    t.poll(Some(Duration::ZERO), &mut none);
    assert_eq!(
        t.stats().refused,
        0,
        "a newcomer refused while the table held hung-up peers"
    );
    assert_eq!(t.connections(), 1);
    drop(c);
    while t.connections() > 0 {
        assert!(
            Instant::now() < deadline,
            "the newcomer's close was never seen"
        );
        t.poll(Some(Duration::from_millis(2)), &mut none);
    }
    assert_eq!(p.in_use(), 0);
}

#[test]
fn replies_to_closed_connections_are_dropped() {
    // The first connection's record is answered only after it closed and a new
    // connection took the same slot: the stale reply must be dropped, not delivered
    // to the newcomer (whose round_trip rejects unknown ids).
    let p = pools(16, 0, 0);
    let p2 = p.clone();
    let mut stale: Option<ConnId> = None;
    let mut stale_buf: Option<Buf> = None;
    let srv = Server::start(opts(), p.clone(), move |t, held| {
        for (c, b, _) in held.drain(..) {
            match stale {
                None => {
                    stale = Some(c);
                    stale_buf = Some(b);
                    continue;
                }
                Some(old) if old != c => {
                    assert_eq!(old.slot, c.slot, "slot reused");
                    assert_ne!(old.gen, c.gen);
                    if let Some(sb) = stale_buf.take() {
                        t.send(old, echo_reply(&p2, sb));
                        t.no_reply(old);
                        t.close(old);
                    }
                }
                Some(_) => {}
            }
            t.send(c, echo_reply(&p2, b));
        }
    });
    let mut s = connect(srv.addr);
    s.write_all(&encode(&body(7, 10), 1)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while srv.pools.in_use() == 0 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(s);
    srv.wait_conns(0);
    let mut s2 = connect(srv.addr);
    round_trip(&mut s2, 100, &[10, 20], 1);
    drop(s2);
    srv.finish();
}

#[test]
fn no_reply_and_close_by_caller() {
    let p = pools(16, 0, 0);
    let p2 = p.clone();
    let srv = Server::start(opts(), p.clone(), move |t, held| {
        for (c, b, _) in held.drain(..) {
            match b.first() {
                Some(0) => t.no_reply(c),
                Some(1) => t.close(c),
                _ => t.send(c, echo_reply(&p2, b)),
            }
        }
    });
    let mut s = connect(srv.addr);
    let mut silent = body(0, 8);
    silent[0] = 0;
    s.write_all(&encode(&silent, 1)).unwrap();
    round_trip(&mut s, 0x0200_0000, &[8], 1);
    let mut kill = body(0, 8);
    kill[0] = 1;
    s.write_all(&encode(&kill, 1)).unwrap();
    expect_closed(&mut s);
    srv.finish();
}

#[test]
fn slow_reader_gets_everything_via_queued_vectored_writes() {
    // 12 MB of replies pile up while the client does not read (more than loopback
    // socket buffers hold): the transport must queue them and flush on writability
    // without losing or reordering bytes.
    let p = pools(64, 0, 12);
    let srv = Server::start(opts(), p.clone(), echo_reversed(p.clone()));
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(16 * 1024).unwrap();
    sock.connect(&srv.addr.into()).unwrap();
    let mut s: StdStream = sock.into();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let n = 12;
    let mut wire = Vec::new();
    for i in 0..n {
        wire.extend(encode(&body(i, 1_000_000), 1));
    }
    s.write_all(&wire).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let mut got = HashSet::new();
    for _ in 0..n {
        let r = read_reply(&mut s).unwrap();
        let id = u32::from_be_bytes(r[..4].try_into().unwrap());
        assert!(r == body(id, 1_000_000), "reply {id} corrupted");
        got.insert(id);
    }
    assert_eq!(got.len(), n as usize);
    drop(s);
    let st = srv.finish();
    assert!(st.write_blocks > 0, "{st:?}");
}

#[test]
fn deferred_replies_leave_in_one_vectored_write() {
    // The client sends 20 records in one write; the server defers every reply of a
    // pass and flushes once: fewer write calls than replies.
    let p = pools(64, 0, 0);
    let p2 = p.clone();
    let srv = Server::start(opts(), p.clone(), move |t, held| {
        if held.len() < 20 {
            return;
        }
        let before = t.stats().writes;
        for (c, b, _) in held.drain(..) {
            t.send_deferred(c, echo_reply(&p2, b));
        }
        assert_eq!(t.stats().writes, before);
        t.flush();
        assert_eq!(t.stats().writes, before + 1);
    });
    let mut s = connect(srv.addr);
    round_trip(&mut s, 0, &[100; 20], 1);
    drop(s);
    srv.finish();
}

#[test]
fn unflushed_deferred_replies_go_out_on_the_next_poll() {
    let p = pools(64, 0, 0);
    let p2 = p.clone();
    let srv = Server::start(opts(), p.clone(), move |t, held| {
        for (c, b, _) in held.drain(..) {
            t.send_deferred(c, echo_reply(&p2, b));
        }
    });
    let mut s = connect(srv.addr);
    round_trip(&mut s, 0, &[100, 200, 300], 2);
    drop(s);
    srv.finish();
}

#[test]
fn waker_interrupts_a_blocking_poll() {
    let p = pools(4, 0, 0);
    let mut t = TcpTransport::bind("127.0.0.1:0".parse().unwrap(), opts(), p).unwrap();
    let w = t.waker();
    let h = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        w.wake().unwrap();
    });
    let start = Instant::now();
    t.poll(Some(Duration::from_secs(10)), &mut |_, _, _, _| {});
    assert!(start.elapsed() < Duration::from_secs(5));
    h.join().unwrap();
}

#[test]
fn two_transports_share_a_port() {
    let p = pools(8, 0, 0);
    let a = TcpTransport::bind("127.0.0.1:0".parse().unwrap(), opts(), p.clone()).unwrap();
    let b = TcpTransport::bind(a.local_addr(), opts(), p).unwrap();
    assert_eq!(a.local_addr(), b.local_addr());
}

#[path = "exhaustion_tests.rs"]
mod exhaustion;

/// Backchannel (RFC 8881 §2.10.3.1): a CALL the server originates on a client's
/// connection goes out in order after the reply queued before it, leaves the in-flight
/// accounting alone (with `max_inflight` 1 a call counted as a record would stall the
/// connection), and the client's REPLY
/// comes back as an ordinary record the caller answers with `no_reply`. A call for a
/// closed connection is refused.
#[test]
fn server_originated_call_and_its_reply() {
    let p = pools(16, 0, 0);
    let p2 = p.clone();
    let (tx, rx) = std::sync::mpsc::channel::<(Vec<u8>, bool)>();
    let o = TcpOptions {
        max_inflight: 1,
        ..opts()
    };
    let srv = Server::start(o, p.clone(), move |t, held| {
        for (c, b, _) in held.drain(..) {
            match b.first() {
                Some(2) => {
                    t.send(c, echo_reply(&p2, b));
                    let mut call = p2.alloc(64).unwrap();
                    call.spare_mut()[4..12].copy_from_slice(b"CBCALL!!");
                    call.set_len(12);
                    let sent = t.send_call(c, call);
                    tx.send((b"sent".to_vec(), sent)).unwrap();
                }
                Some(3) => {
                    tx.send((b.to_vec(), true)).unwrap();
                    t.no_reply(c);
                    // A stale id (another slot generation) is refused.
                    let stale = ConnId {
                        slot: c.slot,
                        gen: c.gen.wrapping_add(1),
                    };
                    let mut gone = p2.alloc(64).unwrap();
                    gone.set_len(8);
                    tx.send((b"stale".to_vec(), t.send_call(stale, gone)))
                        .unwrap();
                }
                _ => t.send(c, echo_reply(&p2, b)),
            }
        }
    });
    let mut s = connect(srv.addr);
    let mut trigger = body(0, 8);
    trigger[0] = 2;
    s.write_all(&encode(&trigger, 1)).unwrap();
    assert_eq!(read_reply(&mut s).unwrap(), trigger, "the reply first");
    assert_eq!(read_reply(&mut s).unwrap(), b"CBCALL!!", "then the call");
    let (what, sent) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!((&what[..], sent), (&b"sent"[..], true));
    let mut answer = body(0, 12);
    answer[0] = 3;
    s.write_all(&encode(&answer, 1)).unwrap();
    let (got, _) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(got, answer, "the client's reply is delivered as a record");
    let (what, sent) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!((&what[..], sent), (&b"stale"[..], false));
    // In-flight accounting still balanced: calls keep flowing one at a time.
    for i in 0..5 {
        round_trip(&mut s, 0x0400_0000 + i, &[16], 1);
    }
    drop(s);
    let st = srv.finish();
    assert_eq!(st.calls_out, 1);
    assert_eq!(st.replies_out, 6);
}

/// `take_closed` reports every closed connection once, with the id its records
/// carried (a session's back channel bound to it is then forgotten by the gateway).
#[test]
fn take_closed_reports_each_closed_connection_once() {
    let p = pools(16, 0, 0);
    let seen = Arc::new(std::sync::Mutex::new(Vec::<(ConnId, bool)>::new()));
    let s2 = seen.clone();
    let srv = Server::start(opts(), p.clone(), move |t, held| {
        for (c, b, _) in held.drain(..) {
            s2.lock().unwrap().push((c, false));
            let reply = echo_reply(&p, b);
            t.send(c, reply);
        }
        t.take_closed(&mut |c| s2.lock().unwrap().push((c, true)));
    });
    let mut a = connect(srv.addr);
    let mut b = connect(srv.addr);
    round_trip(&mut a, 0, &[8], 1);
    round_trip(&mut b, 10, &[8], 1);
    drop(a);
    srv.wait_conns(1);
    round_trip(&mut b, 20, &[8], 1);
    drop(b);
    srv.finish();
    let v = seen.lock().unwrap().clone();
    let calls: HashSet<ConnId> = v.iter().filter(|(_, c)| !c).map(|(id, _)| *id).collect();
    let closed: Vec<ConnId> = v.iter().filter(|(_, c)| *c).map(|(id, _)| *id).collect();
    assert_eq!(calls.len(), 2, "two connections");
    assert_eq!(closed.len(), 2, "each close reported once: {closed:?}");
    assert_eq!(
        closed.iter().collect::<HashSet<_>>(),
        calls.iter().collect()
    );
}

/// Memory the external-data test borrows pieces from: a fixed pattern.
fn ext_memory() -> Vec<u8> {
    (0..65536u32)
        .map(|i| (i.wrapping_mul(131) >> 3) as u8)
        .collect()
}

/// `ext_memory` in a buffer of its own pools (to lend to the transport).
fn ext_pages() -> (Pools, Buf) {
    let p = Pools::new(
        &[ClassSpec {
            size: 65536,
            count: 1,
        }],
        HugePolicy::Off,
    )
    .unwrap();
    let mut b = p.alloc(65536).unwrap();
    b.spare_mut()[..65536].copy_from_slice(&ext_memory());
    b.set_len(65536);
    (p, b)
}

/// The pieces (offset into `ext_memory`, length) of the external reply to record `id`:
/// uneven lengths, so some replies need XDR padding.
fn ext_pieces(id: u32) -> [(usize, usize); 3] {
    let id = id as usize;
    [
        ((id * 7) % 1000, 16384),
        (20000 + id % 13, 1000 + id % 5),
        (30000, 12001 + id % 3),
    ]
}

/// Mixed replies: even ids are echoed from one buffer, odd ids go out as a header
/// (id, length word) plus three borrowed pieces and padding. Each handed-back list is
/// counted in `released`, its tag checked against what was sent.
fn ext_server(
    p: Pools,
    released: Arc<AtomicUsize>,
) -> impl FnMut(&mut TcpTransport, &mut Held) + Send {
    let (pages, mem) = ext_pages();
    let mut lent = false;
    move |t, held| {
        if !std::mem::replace(&mut lent, true) {
            t.lend_pages(&pages);
        }
        t.take_released(&mut |list| {
            assert!(list.as_slice().iter().all(|s| s.tag == list.segs[0].tag));
            released.fetch_add(1, Ordering::SeqCst);
        });
        for (c, b, _) in held.drain(..) {
            let id = u32::from_be_bytes(b[..4].try_into().unwrap());
            if id.is_multiple_of(2) {
                t.send_deferred(c, echo_reply(&p, b));
                continue;
            }
            let mut list = Box::new(ExtList::EMPTY);
            for (i, (off, len)) in ext_pieces(id).into_iter().enumerate() {
                list.segs[i] = ExtSeg {
                    addr: mem[off..].as_ptr() as u64,
                    len: len as u32,
                    lkey: 0,
                    tag: u64::from(id),
                };
            }
            list.n = 3;
            let mut head = p.alloc(12).unwrap();
            head.spare_mut()[4..8].copy_from_slice(&id.to_be_bytes());
            head.spare_mut()[8..12].copy_from_slice(&(list.data_len() as u32).to_be_bytes());
            head.set_len(12);
            drop(b);
            // `mem` stays in this handler and is never written (its bytes unchanged).
            t.send_external(c, head, list);
        }
    }
}

/// What the client expects for record `id` from `ext_server`.
fn ext_expected(id: u32) -> Vec<u8> {
    if id.is_multiple_of(2) {
        return body(id, 8);
    }
    let mem = ext_memory();
    let mut v = id.to_be_bytes().to_vec();
    let data: Vec<u8> = ext_pieces(id)
        .iter()
        .flat_map(|&(off, len)| mem[off..off + len].to_vec())
        .collect();
    v.extend((data.len() as u32).to_be_bytes());
    v.extend(&data);
    v.resize(v.len() + (4 - data.len() % 4) % 4, 0);
    v
}

#[test]
fn external_data_survives_partial_writes_and_is_released_after_it() {
    // 800 replies, half with borrowed data (~29 KiB each, 11 MB in all), pile up while the client
    // does not read: writes end mid-header, mid-piece and mid-padding. Every byte must
    // arrive in order, and no borrowed list may be handed back before its bytes left.
    let p = pools(1024, 0, 0);
    let released = Arc::new(AtomicUsize::new(0));
    let mut o = opts();
    o.max_inflight = 1024;
    o.max_queued = 64 << 20;
    let srv = Server::start(o, p.clone(), ext_server(p.clone(), released.clone()));
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(16 * 1024).unwrap();
    sock.connect(&srv.addr.into()).unwrap();
    let mut s: StdStream = sock.into();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let n = 800u32;
    let mut wire = Vec::new();
    for id in 0..n {
        wire.extend(encode(&body(id, 8), 1));
    }
    s.write_all(&wire).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let early = released.load(Ordering::SeqCst);
    assert!(early < (n / 2) as usize, "released before sent: {early}");
    for id in 0..n {
        let r = read_reply(&mut s).unwrap();
        assert!(r == ext_expected(id), "reply {id} differs");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while released.load(Ordering::SeqCst) < (n / 2) as usize {
        assert!(Instant::now() < deadline, "lists not handed back");
        std::thread::sleep(Duration::from_millis(2));
    }
    // A client that closes with borrowed replies still queued: they come back too.
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(16 * 1024).unwrap();
    sock.connect(&srv.addr.into()).unwrap();
    let mut s2: StdStream = sock.into();
    s2.write_all(&wire).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(s2);
    let deadline = Instant::now() + Duration::from_secs(10);
    while released.load(Ordering::SeqCst) < n as usize {
        assert!(
            Instant::now() < deadline,
            "lists of a closed connection not handed back"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    drop(s);
    let st = srv.finish();
    assert!(st.write_blocks > 0, "{st:?}");
}

#[test]
fn external_data_outside_lent_memory_is_refused() {
    // `send_external` is safe: it reads only memory of pools lent with `lend_pages`
    // (their handle keeps it mapped). A list with a piece elsewhere (memory the
    // transport holds no handle on, or running past a lent region's end) is never
    // read: it comes back at once and its record counts as answered.
    let p = pools(16, 0, 0);
    let refused = Arc::new(AtomicUsize::new(0));
    let r2 = refused.clone();
    let pp = p.clone();
    let (pages, lent_mem) = ext_pages();
    let outside = ext_memory();
    let mut lent = false;
    let srv = Server::start(opts(), p.clone(), move |t, held| {
        if !std::mem::replace(&mut lent, true) {
            t.lend_pages(&pages);
        }
        for (c, b, _) in held.drain(..) {
            let id = u32::from_be_bytes(b[..4].try_into().unwrap());
            let (addr, len) = match id {
                0 => (outside.as_ptr() as u64, 64),
                1 => (lent_mem.as_ptr() as u64 + 65536 - 10, 20),
                _ => {
                    t.send(c, echo_reply(&pp, b));
                    continue;
                }
            };
            let mut list = Box::new(ExtList::EMPTY);
            list.segs[0] = ExtSeg {
                addr,
                len,
                lkey: 0,
                tag: u64::from(id),
            };
            list.n = 1;
            let mut head = pp.alloc(12).unwrap();
            head.set_len(12);
            t.send_external(c, head, list);
        }
        t.take_released(&mut |_| {
            r2.fetch_add(1, Ordering::SeqCst);
        });
    });
    let mut s = connect(srv.addr);
    let wire: Vec<u8> = (0..3).flat_map(|id| encode(&body(id, 8), 1)).collect();
    s.write_all(&wire).unwrap();
    // Only the third record's reply arrives; the two refused lists came back.
    assert_eq!(read_reply(&mut s).unwrap(), body(2, 8));
    let deadline = Instant::now() + Duration::from_secs(10);
    while refused.load(Ordering::SeqCst) < 2 {
        assert!(Instant::now() < deadline, "refused lists not handed back");
        std::thread::sleep(Duration::from_millis(2));
    }
    drop(s);
    let st = srv.finish();
    assert_eq!(st.replies_out, 1, "{st:?}");
}
