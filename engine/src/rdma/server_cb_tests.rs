//! RFC 8167 on the responder transport, end to end over `soft` in one thread: a raw
//! requester QP sends forward calls, receives callbacks and answers them (or not),
//! while the server's callback outcomes, counters and Receives are checked.

use super::*;
use crate::fabric::soft::SoftFabric;
use crate::mem::{ClassSpec, HugePolicy};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

fn addr() -> SocketAddr {
    // Unique per process (the soft provider names its listener after the address) and
    // per test: tests run in parallel, and two sharing an address would reach each
    // other's servers. Each test module has its own port range.
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    let ip = std::net::Ipv4Addr::new(127, (pid >> 16) as u8, (pid >> 8) as u8, pid as u8);
    SocketAddr::new(ip.into(), 40000 + n)
}

const CREDITS: u32 = 8;
const CB_PROG: u32 = 0x4000_0000;

fn server() -> (RdmaServer, Pools) {
    let pools = Pools::new(
        &[
            ClassSpec {
                size: 8192,
                count: 256,
            },
            ClassSpec {
                size: 1 << 20,
                count: 2,
            },
        ],
        HugePolicy::Off,
    )
    .unwrap();
    let opts = ServerOptions {
        credits: CREDITS,
        min_credits: CREDITS,
        max_connections: 4,
        ..ServerOptions::default()
    };
    let fabric = Box::new(SoftFabric::new().unwrap());
    let s = RdmaServer::new(fabric, pools.clone(), opts, addr()).unwrap();
    (s, pools)
}

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

fn word(b: &[u8], i: usize) -> u32 {
    u32::from_be_bytes(b[4 * i..4 * i + 4].try_into().unwrap())
}

/// A forward NULL call: 7-word RDMA_MSG header, then the RPC CALL.
pub(super) fn null_call(xid: u32) -> Vec<u8> {
    words(&[
        xid, 1, CREDITS, 0, 0, 0, 0, xid, 0, 2, 100003, 3, 0, 0, 0, 0, 0,
    ])
}

/// A callback record (RPC CALL of the NFSv4 callback program) of `len` bytes.
pub(super) fn cb_record(xid: u32, len: usize) -> Vec<u8> {
    let mut r = words(&[xid, 0, 2, CB_PROG, 1, 1, 0, 0, 0, 0]);
    r.resize(len.max(r.len()), 0xab);
    r
}

/// The requester's answer to callback `xid`, granting `credit` reverse credits.
fn cb_reply(xid: u32, credit: u32) -> Vec<u8> {
    words(&[xid, 1, credit, 0, 0, 0, 0, xid, 1, 0, 0, 0, 0, 0, 0])
}

const SLOT: usize = 4096;
const RECVS: usize = 32;
const SENDS: usize = 32;

/// A requester driven by hand over a raw `soft` QP.
pub(super) struct Peer {
    f: SoftFabric,
    qp: Qp,
    mr: Mr,
    /// Messages received, in order.
    pub(super) got: Vec<Vec<u8>>,
    /// Statuses of its Sends' completions.
    sent: Vec<WcStatus>,
    next: usize,
    // Dropped after `f` (field order), so the registration never outlives it.
    _mem: Vec<u8>,
}

impl Peer {
    pub(super) fn connect(s: &mut RdmaServer) -> Peer {
        let mut mem = vec![0u8; (RECVS + SENDS) * SLOT];
        let mut f = SoftFabric::new().unwrap();
        // SAFETY: `mem` is kept in the Peer and dropped after `f`.
        let mr = unsafe {
            f.register(mem.as_mut_ptr(), mem.len(), access::LOCAL_WRITE)
                .unwrap()
        };
        let qp = f.connect(s.local_addr(), &QpCaps::default(), &[]).unwrap();
        for i in 0..RECVS {
            let sge = Sge {
                addr: mr.addr + (i * SLOT) as u64,
                len: SLOT as u32,
                lkey: mr.lkey,
            };
            f.post_recv(qp, i as u64, sge).unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            poll(s);
            match f.poll_cm() {
                Some(CmEvent::Established { .. }) => break,
                Some(e) => panic!("connect: {e:?}"),
                None => assert!(Instant::now() < deadline, "no answer to a connect"),
            }
        }
        Peer {
            f,
            qp,
            mr,
            got: Vec::new(),
            sent: Vec::new(),
            next: 0,
            _mem: mem,
        }
    }

    pub(super) fn send(&mut self, msg: &[u8]) {
        let k = RECVS + self.next % SENDS;
        self.next += 1;
        let at = self.mr.addr + (k * SLOT) as u64;
        // SAFETY: slot `k` of the registered area; nothing else uses it now.
        unsafe { std::ptr::copy_nonoverlapping(msg.as_ptr(), at as *mut u8, msg.len()) };
        let sge = Sge {
            addr: at,
            len: msg.len() as u32,
            lkey: self.mr.lkey,
        };
        let wr = SendWr {
            wr_id: 1000 + k as u64,
            op: Op::Send,
            sges: std::slice::from_ref(&sge),
            signaled: true,
        };
        self.f.post_send(self.qp, &[wr]).unwrap();
    }

    /// Takes completions: received messages are recorded and their Receive reposted.
    pub(super) fn poll(&mut self) {
        let mut cq = [Completion {
            wr_id: 0,
            qp: Qp(0),
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: 0,
            invalidated: None,
            vendor_err: 0,
        }; 16];
        let n = self.f.poll_cq(&mut cq);
        for c in &cq[..n] {
            if c.opcode == WcOpcode::Recv || c.wr_id < 1000 {
                if c.status != WcStatus::Success {
                    continue;
                }
                let at = self.mr.addr + c.wr_id * SLOT as u64;
                // SAFETY: the Receive's own slot, completed.
                let b = unsafe { std::slice::from_raw_parts(at as *const u8, c.byte_len as usize) };
                self.got.push(b.to_vec());
                let sge = Sge {
                    addr: at,
                    len: SLOT as u32,
                    lkey: self.mr.lkey,
                };
                self.f.post_recv(self.qp, c.wr_id, sge).unwrap();
            } else {
                self.sent.push(c.status);
            }
        }
    }
}

fn poll(s: &mut RdmaServer) {
    s.poll(&mut |_, _, _, _: &[Reduced], _| {});
}

/// Calls delivered by the server and not yet answered.
pub(super) type Calls = Vec<(CallRef, Buf)>;

/// Polls both sides until `done` holds.
fn run(
    s: &mut RdmaServer,
    p: &mut Peer,
    calls: &mut Calls,
    done: &mut dyn FnMut(&Peer, &Calls) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done(p, calls) {
        assert!(
            Instant::now() < deadline,
            "stuck: got {} messages, {} calls, {:?}",
            p.got.len(),
            calls.len(),
            s.stats()
        );
        s.poll(&mut |r, _, rec, _: &[Reduced], _| calls.push((r, rec)));
        p.poll();
    }
}

/// Answers a delivered forward call with an accepted, successful empty reply.
pub(super) fn answer(s: &mut RdmaServer, pools: &Pools, (call, rec): (CallRef, Buf)) {
    let xid = word(&rec, 0);
    let mut b = pools.alloc(24).unwrap();
    b.set_len(24);
    b.copy_from_slice(&words(&[xid, 1, 0, 0, 0, 0]));
    s.reply(call, b, None);
}

pub(super) fn events(s: &mut RdmaServer) -> Vec<Event> {
    let mut v = Vec::new();
    s.take_callback_events(&mut |id, xid, o| {
        v.push(match o {
            CallbackOutcome::Reply(r) => (id, xid, Some(r.to_vec()), "reply"),
            CallbackOutcome::Error => (id, xid, None, "error"),
            CallbackOutcome::Lost => (id, xid, None, "lost"),
        })
    });
    v
}

/// Polls both sides until `n` callback outcomes were taken.
type Event = (ConnId, u32, Option<Vec<u8>>, &'static str);

fn wait_events(s: &mut RdmaServer, p: &mut Peer, n: usize) -> Vec<Event> {
    wait_events_calls(s, p, &mut Calls::new(), n)
}

/// As `wait_events`, keeping the calls delivered meanwhile.
fn wait_events_calls(s: &mut RdmaServer, p: &mut Peer, calls: &mut Calls, n: usize) -> Vec<Event> {
    let mut ev = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while ev.len() < n {
        assert!(Instant::now() < deadline, "events: {ev:?}, {:?}", s.stats());
        s.poll(&mut |r, _, rec, _: &[Reduced], _| calls.push((r, rec)));
        p.poll();
        ev.extend(events(s));
    }
    ev
}

/// Connects and runs one NULL call through, returning the connection's id.
pub(super) fn establish(s: &mut RdmaServer, pools: &Pools) -> (Peer, ConnId) {
    let mut p = Peer::connect(s);
    let mut calls = Calls::new();
    p.send(&null_call(1));
    run(s, &mut p, &mut calls, &mut |_, c| c.len() == 1);
    let (call, rec) = calls.pop().unwrap();
    let id = call.conn();
    answer(s, pools, (call, rec));
    run(s, &mut p, &mut calls, &mut |p, _| p.got.len() == 1);
    p.got.clear();
    (p, id)
}

#[test]
fn r8167_09_r8167_10_r8167_14_callback_header_bytes_on_the_wire() {
    let (mut s, pools) = server();
    let (mut p, id) = establish(&mut s, &pools);
    let rec = cb_record(0x5151, 100);
    s.send_callback(id, &rec).unwrap();
    run(&mut s, &mut p, &mut Calls::new(), &mut |p, _| {
        p.got.len() == 1
    });
    let m = &p.got[0];
    assert_eq!(m.len(), 28 + rec.len());
    // rdma_xid = RPC xid, vers 1, rdma_credit = 2 reverse credits requested, RDMA_MSG,
    // three empty chunk lists; then the record unchanged (msg_type CALL).
    assert_eq!(&m[..28], &words(&[0x5151, 1, 2, 0, 0, 0, 0])[..]);
    assert_eq!(&m[28..], &rec[..]);
    assert_eq!(s.stats().cb_sent, 1);
}

#[test]
fn r8167_01_forward_xid_and_callback_xid_equal_both_complete() {
    let (mut s, pools) = server();
    let (mut p, id) = establish(&mut s, &pools);
    let mut calls = Calls::new();
    p.send(&null_call(77));
    run(&mut s, &mut p, &mut calls, &mut |_, c| c.len() == 1);
    s.send_callback(id, &cb_record(77, 64)).unwrap();
    run(&mut s, &mut p, &mut calls, &mut |p, _| p.got.len() == 1);
    let reply = cb_reply(77, 2);
    p.send(&reply);
    let ev = wait_events(&mut s, &mut p, 1);
    assert_eq!(ev.len(), 1);
    assert_eq!((ev[0].0, ev[0].1, ev[0].3), (id, 77, "reply"));
    assert_eq!(
        ev[0].2.as_deref(),
        Some(&reply[28..]),
        "the RPC reply from its XID"
    );
    // The forward call 77 is still executing and completes on its own.
    assert_eq!(calls.len(), 1);
    answer(&mut s, &pools, calls.pop().unwrap());
    run(&mut s, &mut p, &mut calls, &mut |p, _| p.got.len() == 2);
    let fwd = &p.got[1];
    assert_eq!((word(fwd, 0), word(fwd, 3), word(fwd, 7)), (77, 0, 77));
    assert_eq!(word(fwd, 8), 1, "msg_type REPLY");
    let st = s.stats();
    assert_eq!((st.calls, st.cb_replies, st.cb_unmatched), (2, 1, 0));
}

#[test]
fn r8167_02_reverse_grant_one_throttles_callbacks_not_forward_calls() {
    let (mut s, pools) = server();
    let (mut p, id) = establish(&mut s, &pools);
    let mut calls = Calls::new();
    s.send_callback(id, &cb_record(500, 64)).unwrap();
    assert_eq!(
        s.send_callback(id, &cb_record(501, 64)),
        Err(CallbackError::NoCredit),
        "grant 1 until the first callback reply"
    );
    // Forward calls flow while the callback is outstanding, at the full forward grant.
    for x in 10..10 + CREDITS {
        p.send(&null_call(x));
    }
    run(&mut s, &mut p, &mut calls, &mut |_, c| {
        c.len() == CREDITS as usize
    });
    for c in std::mem::take(&mut calls) {
        answer(&mut s, &pools, c);
    }
    run(&mut s, &mut p, &mut calls, &mut |p, _| {
        p.got.len() == 1 + CREDITS as usize
    });
    let fwd: Vec<_> = p.got.iter().filter(|m| word(m, 0) != 500).collect();
    assert_eq!(fwd.len(), CREDITS as usize);
    assert!(
        fwd.iter().all(|m| word(m, 2) == CREDITS),
        "R8167-02: forward grant does not count the callback's Receive"
    );
    assert_eq!(
        s.send_callback(id, &cb_record(501, 64)),
        Err(CallbackError::NoCredit)
    );
    p.send(&cb_reply(500, 2));
    assert_eq!(wait_events(&mut s, &mut p, 1)[0].1, 500);
    s.send_callback(id, &cb_record(501, 64)).unwrap();
    s.send_callback(id, &cb_record(502, 64))
        .expect("R8167-03: the client's grant of 2 is honoured");
    assert_eq!(
        s.send_callback(id, &cb_record(503, 64)),
        Err(CallbackError::NoCredit)
    );
}

#[test]
fn r8167_03_reverse_grant_follows_the_latest_reply_clamped_to_what_we_asked() {
    let (mut s, pools) = server();
    let (mut p, id) = establish(&mut s, &pools);
    // A grant of 100 counts as our 2; a later grant of 0 as 1 (never 0).
    s.send_callback(id, &cb_record(1, 64)).unwrap();
    run(&mut s, &mut p, &mut Calls::new(), &mut |p, _| {
        p.got.len() == 1
    });
    p.send(&cb_reply(1, 100));
    wait_events(&mut s, &mut p, 1);
    s.send_callback(id, &cb_record(2, 64)).unwrap();
    s.send_callback(id, &cb_record(3, 64)).unwrap();
    assert_eq!(
        s.send_callback(id, &cb_record(4, 64)),
        Err(CallbackError::NoCredit)
    );
    run(&mut s, &mut p, &mut Calls::new(), &mut |p, _| {
        p.got.len() == 3
    });
    p.send(&cb_reply(2, 0));
    p.send(&cb_reply(3, 0));
    wait_events(&mut s, &mut p, 2);
    s.send_callback(id, &cb_record(4, 64)).unwrap();
    assert_eq!(
        s.send_callback(id, &cb_record(5, 64)),
        Err(CallbackError::NoCredit)
    );
}

#[test]
fn r8167_05_callback_larger_than_the_clients_inline_threshold_is_refused() {
    let (mut s, pools) = server();
    let (mut p, id) = establish(&mut s, &pools);
    // No private data from the peer: its receive threshold is 1024 (R8797-01).
    assert_eq!(
        s.send_callback(id, &cb_record(9, 1024 - 28 + 4)),
        Err(CallbackError::TooLarge)
    );
    assert_eq!(s.stats().cb_sent, 0, "nothing sent");
    s.send_callback(id, &cb_record(9, 1024 - 28)).unwrap();
    run(&mut s, &mut p, &mut Calls::new(), &mut |p, _| {
        p.got.len() == 1
    });
    assert_eq!(p.got[0].len(), 1024);
    // Not an RPC CALL: cannot be framed as a callback.
    assert_eq!(
        s.send_callback(id, &cb_reply(10, 1)[28..]),
        Err(CallbackError::TooLarge)
    );
}

#[test]
fn r8167_08_callback_reply_under_full_forward_load_meets_no_rnr() {
    let (mut s, pools) = server();
    let (mut p, id) = establish(&mut s, &pools);
    let mut calls = Calls::new();
    s.send_callback(id, &cb_record(42, 64)).unwrap();
    run(&mut s, &mut p, &mut calls, &mut |p, _| p.got.len() == 1);
    // The server is not polled while the requester uses every forward credit and
    // answers the callback: CREDITS + 1 Sends meet CREDITS + 1 posted Receives.
    for x in 100..100 + CREDITS {
        p.send(&null_call(x));
    }
    p.send(&cb_reply(42, 2));
    for _ in 0..50 {
        p.poll();
    }
    let ev = wait_events_calls(&mut s, &mut p, &mut calls, 1);
    assert_eq!((ev[0].1, ev[0].3), (42, "reply"));
    run(&mut s, &mut p, &mut calls, &mut |p, c| {
        c.len() == CREDITS as usize && p.sent.len() == 2 + CREDITS as usize
    });
    assert!(
        p.sent.iter().all(|&st| st == WcStatus::Success),
        "a Send met receive-not-ready: {:?}",
        p.sent
    );
    assert_eq!(s.stats().disconnects, 0);
    assert_eq!(s.connections(), 1);
    // The consumed extra Receive is not re-posted: forward credits only again.
    let c = s.conns[id.slot as usize].as_ref().unwrap();
    assert_eq!(c.recv_target(), CREDITS);
    assert_eq!(c.posted, CREDITS);
}

#[test]
fn r8167_16_rdma_error_for_a_callback_fails_it_and_an_unmatched_one_is_dropped() {
    let (mut s, pools) = server();
    let (mut p, id) = establish(&mut s, &pools);
    s.send_callback(id, &cb_record(61, 64)).unwrap();
    run(&mut s, &mut p, &mut Calls::new(), &mut |p, _| {
        p.got.len() == 1
    });
    p.send(&words(&[62, 1, 1, wire::RDMA_ERROR, wire::ERR_CHUNK]));
    p.send(&words(&[61, 1, 1, wire::RDMA_ERROR, wire::ERR_CHUNK]));
    let ev = wait_events(&mut s, &mut p, 1);
    assert_eq!((ev[0].0, ev[0].1, ev[0].3), (id, 61, "error"));
    let st = s.stats();
    assert_eq!((st.cb_errors, st.dropped, st.errors_sent), (1, 1, 0));
    // Its reverse credit is back; the connection still serves forward calls.
    s.send_callback(id, &cb_record(63, 64)).unwrap();
    let mut calls = Calls::new();
    p.send(&null_call(5));
    run(&mut s, &mut p, &mut calls, &mut |_, c| c.len() == 1);
}

#[test]
fn r8167_17_disconnect_with_a_callback_outstanding_is_lost_and_closed_once() {
    let (mut s, pools) = server();
    let (mut p, id) = establish(&mut s, &pools);
    s.send_callback(id, &cb_record(71, 64)).unwrap();
    run(&mut s, &mut p, &mut Calls::new(), &mut |p, _| {
        p.got.len() == 1
    });
    assert_eq!(
        s.admission.reserved(),
        (CREDITS + MAX_CALLBACKS) as usize,
        "R8167-08: callback Receives reserved at accept"
    );
    drop(p);
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.connections() != 0 {
        assert!(Instant::now() < deadline);
        poll(&mut s);
    }
    let ev = events(&mut s);
    assert_eq!(ev.len(), 1);
    assert_eq!((ev[0].0, ev[0].1, ev[0].3), (id, 71, "lost"));
    let mut closed = Vec::new();
    s.take_closed(&mut |c| closed.push(c));
    s.take_closed(&mut |c| closed.push(c));
    assert_eq!(closed, [id]);
    assert_eq!(s.stats().cb_lost, 1);
    assert_eq!(
        s.send_callback(id, &cb_record(71, 64)),
        Err(CallbackError::Gone),
        "the server never connects"
    );
    assert_eq!(s.admission.reserved(), 0, "extra Receives released");
    assert_eq!(pools.in_use(), 0);
    // A new connection in the same slot is another ConnId.
    let (_p2, id2) = establish(&mut s, &pools);
    assert_ne!(id2, id);
    assert_eq!(
        s.send_callback(id, &cb_record(72, 64)),
        Err(CallbackError::Gone)
    );
}

#[test]
fn r8167_20_stray_reply_is_dropped_counted_and_the_connection_stays_up() {
    let (mut s, pools) = server();
    let (mut p, id) = establish(&mut s, &pools);
    // With nothing outstanding, and with a callback outstanding under another XID.
    p.send(&cb_reply(555, 2));
    s.send_callback(id, &cb_record(556, 64)).unwrap();
    p.send(&cb_reply(557, 2));
    let mut calls = Calls::new();
    p.send(&null_call(3));
    run(&mut s, &mut p, &mut calls, &mut |_, c| c.len() == 1);
    let st = s.stats();
    assert_eq!((st.cb_unmatched, st.cb_replies, st.calls), (2, 0, 2));
    assert!(events(&mut s).is_empty());
    // R8167-04: the stray grant of 2 changed nothing.
    assert_eq!(
        s.send_callback(id, &cb_record(558, 64)),
        Err(CallbackError::NoCredit)
    );
    answer(&mut s, &pools, calls.pop().unwrap());
    run(&mut s, &mut p, &mut calls, &mut |p, _| {
        p.got.iter().any(|m| word(m, 0) == 3)
    });
    assert_eq!(s.connections(), 1);
}

#[test]
fn r8167_20_a_callback_reply_needs_no_call_slot_when_every_slot_is_executing() {
    let (mut s, pools) = server();
    let (mut p, id) = establish(&mut s, &pools);
    let mut calls = Calls::new();
    s.send_callback(id, &cb_record(90, 64)).unwrap();
    run(&mut s, &mut p, &mut calls, &mut |p, _| p.got.len() == 1);
    // Fill every call slot (credits + slack) with calls the server keeps executing.
    let slots = s.conns[id.slot as usize].as_ref().unwrap().calls.len();
    let mut x = 200;
    while calls.len() < slots {
        let n = (slots - calls.len()).min(CREDITS as usize);
        for _ in 0..n {
            p.send(&null_call(x));
            x += 1;
        }
        let want = calls.len() + n;
        run(&mut s, &mut p, &mut calls, &mut |_, c| c.len() == want);
    }
    assert!(s.conns[id.slot as usize]
        .as_ref()
        .unwrap()
        .free_calls
        .is_empty());
    p.send(&cb_reply(90, 1));
    p.send(&cb_reply(91, 1));
    let ev = wait_events_calls(&mut s, &mut p, &mut calls, 1);
    assert_eq!((ev[0].1, ev[0].3), (90, "reply"));
    run(&mut s, &mut p, &mut calls, &mut |_, _| true);
    for _ in 0..100 {
        poll(&mut s);
        p.poll();
    }
    let st = s.stats();
    assert_eq!((st.cb_replies, st.cb_unmatched, st.disconnects), (1, 1, 0));
    assert_eq!(s.connections(), 1, "not closed for exceeding its credits");
}

/// The engine's own requester (`RdmaClient`, reverse direction on) against this
/// server, the server on its own thread: every forward call with procedure 1 makes the
/// server send a callback with the same XID (R8167-01) before answering it; the client
/// keeps all its forward credits in use while it answers the callbacks (R8167-08), and
/// the server's reverse grant starts at 1 then follows the client's (R8167-02/03).
#[test]
fn r8167_01_r8167_08_engine_client_answers_callbacks_under_full_forward_load() {
    use super::super::client::{ClientOptions, RdmaClient};
    use crate::rpc::{self, Accept, Cred};
    use crate::rpcrdma::requester::CallShape;
    use crate::xdr::XdrWriter;
    use std::sync::atomic::AtomicBool;
    use std::sync::{mpsc, Arc};

    let stop = Arc::new(AtomicBool::new(false));
    let (addr_tx, addr_rx) = mpsc::channel();
    let stop2 = stop.clone();
    let srv = std::thread::spawn(move || {
        let (mut s, pools) = server();
        addr_tx.send(s.local_addr()).unwrap();
        let mut calls = Calls::new();
        let mut pending: VecDeque<(ConnId, u32)> = VecDeque::new();
        let mut events_seen = Vec::new();
        let mut refusals = 0u32;
        while !stop2.load(Ordering::Relaxed) {
            s.poll(&mut |r, _, rec, _: &[Reduced], _| calls.push((r, rec)));
            for (call, rec) in std::mem::take(&mut calls) {
                if word(&rec, 5) == 1 {
                    pending.push_back((call.conn(), word(&rec, 0)));
                }
                answer(&mut s, &pools, (call, rec));
            }
            while let Some(&(id, xid)) = pending.front() {
                match s.send_callback(id, &cb_record(xid, 120)) {
                    Ok(()) => {
                        pending.pop_front();
                    }
                    Err(CallbackError::NoCredit | CallbackError::Busy) => {
                        refusals += 1;
                        break;
                    }
                    Err(e) => panic!("callback {xid}: {e:?}"),
                }
            }
            events_seen.extend(events(&mut s));
        }
        (s.stats(), events_seen, refusals)
    });
    let addr = addr_rx.recv().unwrap();
    let mut c = RdmaClient::connect(
        Box::new(SoftFabric::new().unwrap()),
        addr,
        ClientOptions {
            credits: 4,
            backchannel_credits: 2,
            ..ClientOptions::default()
        },
    )
    .unwrap();
    let call = |proc_: u32| {
        let mut b = vec![0u8; 64];
        let mut w = XdrWriter::new(&mut b);
        rpc::write_call(&mut w, 0, 0x2000_0042, 1, proc_, &Cred::None).unwrap();
        let n = w.position();
        b.truncate(n);
        b
    };
    let t = Duration::from_secs(5);
    // Forward credits ramp up to the server's grant.
    c.call(&call(0), &CallShape::new(64), t).unwrap();
    let mut fwd = Vec::new();
    let mut done = Vec::new();
    let mut answered = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    for _round in 0..4 {
        while c.in_flight() < c.credit_limit() {
            fwd.push(c.submit(&call(1), &CallShape::new(64)).unwrap());
        }
        let want = fwd.len();
        while (done.len() < want || answered.len() < want) && Instant::now() < deadline {
            c.poll(&mut |x, r| done.push((x, r.is_ok()))).unwrap();
            let mut cbs = Vec::new();
            c.take_callbacks(&mut |x, rec| cbs.push((x, rec.to_vec())));
            for (x, rec) in cbs {
                assert_eq!(rec, cb_record(x, 120), "the record arrives unchanged");
                let mut b = vec![0u8; 64];
                let mut w = XdrWriter::new(&mut b);
                rpc::write_accepted(&mut w, x, Accept::Success).unwrap();
                let n = w.position();
                c.reply_callback(x, &b[..n]).unwrap();
                answered.push(x);
            }
            std::thread::yield_now();
        }
    }
    assert!(c.is_connected());
    assert_eq!(done.len(), fwd.len(), "forward: {done:?}");
    assert!(done.iter().all(|&(_, ok)| ok));
    answered.sort();
    let mut want = fwd.clone();
    want.sort();
    assert_eq!(answered, want, "one callback per forward call, same XIDs");
    let cst = c.stats();
    assert_eq!(
        (cst.callbacks_dropped, cst.callback_replies),
        (0, fwd.len() as u64)
    );
    // Let the last replies land, then stop the server.
    let settle = Instant::now() + Duration::from_millis(300);
    while Instant::now() < settle {
        c.poll(&mut |_, _| {}).unwrap();
        std::thread::yield_now();
    }
    stop.store(true, Ordering::Relaxed);
    let (st, ev, _refusals) = srv.join().unwrap();
    assert_eq!(st.cb_sent, fwd.len() as u64);
    assert_eq!(
        (st.cb_replies, st.cb_unmatched, st.cb_lost),
        (fwd.len() as u64, 0, 0)
    );
    assert_eq!(st.disconnects, 0);
    let mut got: Vec<u32> = ev.iter().map(|e| e.1).collect();
    got.sort();
    assert_eq!(got, want);
    assert!(ev
        .iter()
        .all(|e| e.3 == "reply" && e.2.as_ref().is_some_and(|r| word(r, 0) == e.1)));
    drop(c);
}

/// The event-returning poll: a call taken with `poll_calls`, answered, then
/// `flush_calls` posts its Send at once; the peer gets the reply with no further
/// `poll` of the server (the reactor answers RDMA calls in the pass that took them).
#[test]
fn poll_calls_reply_is_posted_by_flush_calls_in_the_same_pass() {
    let (mut s, pools) = server();
    let (mut p, _) = establish(&mut s, &pools);
    p.send(&null_call(9));
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.is_empty() {
        assert!(Instant::now() < deadline, "no call delivered");
        s.poll_calls(&mut got);
    }
    let d = got.pop().unwrap();
    assert!(s.reduced(d.call).is_empty(), "a NULL call reduces nothing");
    assert_eq!(d.write_room, None);
    answer(&mut s, &pools, (d.call, d.record));
    s.flush_calls(&mut got);
    assert!(got.is_empty());
    let deadline = Instant::now() + Duration::from_secs(5);
    while p.got.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the reply was not posted by flush_calls"
        );
        p.poll();
    }
    assert_eq!(word(&p.got[0], 0), 9);
}
