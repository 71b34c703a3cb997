//! NFSv4.1 over RPC-over-RDMA with its back channel on the same connection (RFC 8267
//! §6, RFC 8167): an in-process gateway (memory backend, `soft` provider) and a v4.1
//! client on `engine::rdma::client::RdmaClient` offering reverse credits. A read
//! delegation granted over RDMA is recalled by a CB_RECALL sent over RDMA when an
//! NFSv3 client writes the file over TCP; the metrics say so (transport="rdma").
//! Fault injection: the connection drops with the recall outstanding (R8167-17), one
//! reverse credit, callback replies while every forward credit is in use (R8167-08),
//! and a session without a back channel (R8167-19/21).

mod common;
#[path = "common/nfs4_client.rs"]
mod nfs4_client;

use common::{Gw, GwOpts};
use engine::xdr::XdrReader;
use nfs4_client::*;
use std::time::{Duration, Instant};

fn callbacks(result: &str) -> String {
    format!("nfsgw_callbacks_total{{transport=\"rdma\",result=\"{result}\"}}")
}

fn recalls(result: &str) -> String {
    format!("nfsgw_delegation_recalls_total{{transport=\"rdma\",result=\"{result}\"}}")
}

fn wait_metric(gw: &Gw, series: &str, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = gw.metric(series);
        if got >= want {
            return;
        }
        assert!(Instant::now() < deadline, "{series} = {got}, wanted {want}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A gateway, a file written over NFSv3/TCP, and a v4.1 RDMA client with a session
/// whose back channel is its connection (CB_NULL probe answered).
struct Setup {
    gw: Gw,
    v3: V3,
    fh3: Vec<u8>,
    c: V41,
    clientid: u64,
    sid: [u8; 16],
    seq: u32,
}

const NAME: &[u8] = b"shared.txt";

fn setup(credits: u32, bc: u32) -> Setup {
    let gw = Gw::start(&GwOpts::default());
    let mut v3 = V3::connect(gw.tcp_addr());
    let root = v3.mount_root();
    let fh3 = v3.create(&root, NAME);
    assert_eq!(v3.write(&fh3, b"old data"), 0);
    let mut c = V41::connect(gw.rdma, credits, bc);
    let (clientid, sid, flags) = c.session(b"rdma-client", CONN_BACK_CHAN, bc.max(1));
    assert_eq!(
        flags & CONN_BACK_CHAN,
        CONN_BACK_CHAN,
        "back channel granted"
    );
    // R8167: the probe comes over the same RDMA connection as a reverse call.
    let (x, rec) = c
        .next_callback(Duration::from_secs(5))
        .expect("a CB_NULL probe over RDMA");
    assert_eq!(c.answer(x, &rec), None, "CB_NULL");
    wait_metric(&gw, &callbacks("replied"), 1);
    let mut s = Setup {
        gw,
        v3,
        fh3,
        c,
        clientid,
        sid,
        seq: 1,
    };
    let res = s.compound(Ops::new().reclaim_complete());
    assert_eq!(res.status, NFS4_OK, "RECLAIM_COMPLETE");
    s
}

impl Setup {
    /// SEQUENCE + `ops`.
    fn compound(&mut self, ops: Ops) -> Res {
        let mut all = Ops::new().sequence(self.sid, self.seq);
        self.seq += 1;
        all = append(all, ops);
        self.c.compound(&all)
    }

    /// OPEN for reading: (open stateid, delegation stateid, v4 file handle).
    fn open(&mut self) -> (Opened, Vec<u8>) {
        let clientid = self.clientid;
        // The probe's answer is processed by the callback thread: a first OPEN may
        // race it and get no delegation; retry a few times.
        for _ in 0..50 {
            let res = self.compound(
                Ops::new()
                    .putrootfh()
                    .open_read(clientid, b"owner-1", NAME)
                    .getfh(),
            );
            assert_eq!(res.status, NFS4_OK, "OPEN");
            let mut r = res.reader();
            skip_sequence_ok_op(&mut r);
            assert_eq!(expect_op(&mut r, OP_PUTROOTFH), NFS4_OK);
            assert_eq!(expect_op(&mut r, OP_OPEN), NFS4_OK);
            let o = parse_open_ok(&mut r);
            assert_eq!(expect_op(&mut r, OP_GETFH), NFS4_OK);
            let fh = r.opaque_var(128).unwrap().to_vec();
            if o.deleg.is_some() {
                return (o, fh);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("no read delegation granted over RDMA");
    }

    /// PUTROOTFH, LOOKUP `name`, GETFH: the file's handle.
    fn lookup(&mut self, name: &[u8]) -> Vec<u8> {
        let res = self.compound(Ops::new().putrootfh().lookup(name).getfh());
        assert_eq!(res.status, NFS4_OK, "LOOKUP");
        let mut r = res.reader();
        skip_sequence_ok_op(&mut r);
        for op in [OP_PUTROOTFH, OP_LOOKUP, OP_GETFH] {
            assert_eq!(expect_op(&mut r, op), NFS4_OK);
        }
        r.opaque_var(128).unwrap().to_vec()
    }

    fn delegreturn(&mut self, fh: &[u8], deleg: &[u8; 16]) {
        let res = self.compound(Ops::new().putfh(fh).delegreturn(deleg));
        assert_eq!(res.status, NFS4_OK, "DELEGRETURN");
    }

    fn read(&mut self, fh: &[u8], stateid: &[u8; 16]) -> Vec<u8> {
        let res = self.compound(Ops::new().putfh(fh).read(stateid, 0, 64));
        assert_eq!(res.status, NFS4_OK, "READ");
        let mut r = res.reader();
        skip_sequence_ok_op(&mut r);
        assert_eq!(expect_op(&mut r, OP_PUTFH), NFS4_OK);
        assert_eq!(expect_op(&mut r, OP_READ), NFS4_OK);
        r.bool().unwrap();
        r.opaque_var(64).unwrap().to_vec()
    }

    /// Waits for the CB_RECALL of `deleg` (answering CB_NULL probes met meanwhile).
    fn expect_recall(&mut self, deleg: &[u8; 16], wait: Duration) -> (u32, CbRecall) {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let (x, rec) = self.c.next_callback(left).expect("a CB_RECALL over RDMA");
            match decode_callback(&rec) {
                (_, None) => {
                    self.c.answer(x, &rec);
                }
                (_, Some(cb)) => {
                    assert_eq!(&cb.stateid, deleg, "CB_RECALL names the delegation");
                    assert_eq!(cb.session, self.sid, "CB_SEQUENCE names the session");
                    return (x, cb);
                }
            }
        }
    }
}

fn append(a: Ops, b: Ops) -> Ops {
    a.append(b)
}

fn skip_sequence_ok_op(r: &mut XdrReader) -> u32 {
    assert_eq!(expect_op(r, OP_SEQUENCE), NFS4_OK);
    skip_sequence_ok(r)
}

/// The recall end to end over RDMA with `bc` reverse credits.
fn recall_flow(bc: u32) {
    let mut s = setup(8, bc);
    let (opened, fh) = s.open();
    let deleg = opened.deleg.unwrap();
    // The v3 writer must wait while the recall goes out over RDMA.
    assert_eq!(s.v3.write(&s.fh3, b"new data"), NFS3ERR_JUKEBOX);
    let (x, cb) = s.expect_recall(&deleg, Duration::from_secs(5));
    assert_eq!(cb.seqid, 1, "first back-channel slot sequence id");
    let rec = callback_reply(x, Some(&cb));
    s.c.c.reply_callback(x, &rec).expect("callback reply");
    wait_metric(&s.gw, &recalls("answered"), 1);
    s.delegreturn(&fh, &deleg);
    assert_eq!(
        s.v3.write(&s.fh3, b"new data"),
        0,
        "WRITE after DELEGRETURN"
    );
    assert_eq!(
        s.read(&fh, &opened.stateid),
        b"new data",
        "v4.1 READ sees it"
    );
    // The operator's view: both callbacks (CB_NULL, CB_COMPOUND) went out and were
    // answered over RDMA; the recall was sent, answered and returned over RDMA.
    assert_eq!(s.gw.metric(&callbacks("sent")), 2);
    assert_eq!(s.gw.metric(&callbacks("replied")), 2);
    assert_eq!(s.gw.metric(&recalls("sent")), 1);
    assert_eq!(s.gw.metric(&recalls("answered")), 1);
    assert_eq!(s.gw.metric(&recalls("returned")), 1);
    assert_eq!(
        s.gw.metric("nfsgw_callbacks_total{transport=\"tcp\",result=\"sent\"}"),
        0,
        "nothing over TCP"
    );
}

/// CB_NULL and CB_RECALL over the client's RDMA connection; NFSv3 WRITE gets JUKEBOX
/// until DELEGRETURN; the v4.1 READ sees the write; metrics say transport="rdma".
#[test]
fn r8167_cb_recall_over_rdma_while_v3_write_waits() {
    recall_flow(2);
}

/// A client granting one reverse credit: CB_NULL, then CB_RECALL, one at a time.
#[test]
fn r8167_02_one_reverse_credit() {
    recall_flow(1);
}

/// R8167-02: with one reverse credit and a CB_NULL probe outstanding, the CB_RECALL
/// waits in the reactor (NoCredit) and goes out once the probe is answered; the client
/// never sees two callbacks at once.
#[test]
fn r8167_02_second_callback_waits_for_the_reverse_credit() {
    let mut s = setup(8, 1);
    let (opened, fh) = s.open();
    let deleg = opened.deleg.unwrap();
    // BACKCHANNEL_CTL: a new probe goes out; leave it unanswered.
    let res = s.compound(Ops::new().backchannel_ctl());
    assert_eq!(res.status, NFS4_OK, "BACKCHANNEL_CTL");
    let (px, probe) =
        s.c.next_callback(Duration::from_secs(5))
            .expect("the CB_NULL probe");
    assert_eq!(decode_callback(&probe).1, None);
    assert_eq!(s.v3.write(&s.fh3, b"new data"), NFS3ERR_JUKEBOX);
    assert!(
        s.c.next_callback(Duration::from_millis(300)).is_none(),
        "no second callback beyond the one reverse credit"
    );
    s.c.answer(px, &probe);
    // Well before the callback timeout (5 s) would resend it: it waited, not dropped.
    let (x, cb) = s.expect_recall(&deleg, Duration::from_secs(2));
    let rec = callback_reply(x, Some(&cb));
    s.c.c.reply_callback(x, &rec).expect("callback reply");
    wait_metric(&s.gw, &recalls("answered"), 1);
    s.delegreturn(&fh, &deleg);
    assert_eq!(s.v3.write(&s.fh3, b"new data"), 0);
    assert_eq!(s.c.c.stats().callbacks_dropped, 0, "nothing over the grant");
}

/// R8167-17: the connection drops with the CB_RECALL outstanding. The gateway never
/// connects back: the session reports CB_PATH_DOWN until the client's new connection
/// does BIND_CONN_TO_SESSION (as Linux does on reconnect); then the probe and the
/// recall are resent there and answered.
#[test]
fn r8167_17_recall_resent_after_reconnect_and_bind_conn() {
    let mut s = setup(8, 2);
    let root = s.v3.mount_root();
    s.v3.create(&root, b"other.txt");
    let (opened, fh) = s.open();
    let deleg = opened.deleg.unwrap();
    assert_eq!(s.v3.write(&s.fh3, b"new data"), NFS3ERR_JUKEBOX);
    let (first_xid, first) = s.expect_recall(&deleg, Duration::from_secs(5));
    // Drop it unanswered: disconnect and reconnect.
    s.c.c.disconnect();
    let _ = s.c.c.poll(&mut |_, _| {});
    s.c = V41::connect(s.gw.rdma, 8, 2);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let res = s.compound(Ops::new());
        assert_eq!(res.status, NFS4_OK, "SEQUENCE on the new connection");
        let flags = skip_sequence_ok_op(&mut res.reader());
        if flags & SEQ4_STATUS_CB_PATH_DOWN != 0 {
            break;
        }
        assert!(Instant::now() < deadline, "CB_PATH_DOWN never reported");
        std::thread::sleep(Duration::from_millis(10));
    }
    // No back channel now: no new delegation either.
    let clientid = s.clientid;
    let res = s.compound(
        Ops::new()
            .putrootfh()
            .open_read(clientid, b"owner-2", b"other.txt"),
    );
    assert_eq!(res.status, NFS4_OK);
    let mut r = res.reader();
    skip_sequence_ok_op(&mut r);
    assert_eq!(expect_op(&mut r, OP_PUTROOTFH), NFS4_OK);
    assert_eq!(expect_op(&mut r, OP_OPEN), NFS4_OK);
    assert!(
        parse_open_ok(&mut r).deleg.is_none(),
        "no delegation while path down"
    );
    let res =
        s.c.compound(&Ops::new().bind_conn(s.sid, CDFC4_BACK_OR_BOTH));
    assert_eq!(res.status, NFS4_OK, "BIND_CONN_TO_SESSION");
    let (x, second) = s.expect_recall(&deleg, Duration::from_secs(15));
    assert_eq!(
        second.seqid, first.seqid,
        "resent with the same slot sequence id"
    );
    assert_eq!(x, first_xid, "a retransmission: same XID (R8167-17)");
    let rec = callback_reply(x, Some(&second));
    s.c.c.reply_callback(x, &rec).expect("callback reply");
    wait_metric(&s.gw, &recalls("answered"), 1);
    let res = s.compound(Ops::new());
    let flags = skip_sequence_ok_op(&mut res.reader());
    assert_eq!(flags & SEQ4_STATUS_CB_PATH_DOWN, 0, "back channel up again");
    s.delegreturn(&fh, &deleg);
    assert_eq!(s.v3.write(&s.fh3, b"new data"), 0);
    let lost = s.gw.metric(&callbacks("failed")) + s.gw.metric(&callbacks("timed_out"));
    assert!(lost >= 1, "the first CB_RECALL counted failed or timed out");
}

/// R8167-08: the client answers a CB_RECALL while every forward credit is in use;
/// the reply still lands (the gateway posted a Receive for it) and the forward calls
/// all complete.
#[test]
fn r8167_08_callback_reply_under_full_forward_load() {
    let credits = 4;
    let mut s = setup(credits, 2);
    let (opened, fh) = s.open();
    let deleg = opened.deleg.unwrap();
    assert_eq!(s.v3.write(&s.fh3, b"new data"), NFS3ERR_JUKEBOX);
    let null = s.c.record(0, &[]);
    let shape = engine::rpcrdma::requester::CallShape::new(1024);
    let mut outstanding = 0u32;
    let mut answered = 0u32;
    let fill = |c: &mut V41, outstanding: &mut u32| {
        while c.c.submit(&null, &shape).is_ok() {
            *outstanding += 1;
        }
    };
    fill(&mut s.c, &mut outstanding);
    assert_eq!(
        s.c.c.in_flight(),
        s.c.c.credit_limit(),
        "all credits in use"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let cb = loop {
        let _ = s.c.c.poll(&mut |_, r| {
            r.expect("NULL reply");
            answered += 1;
        });
        s.c.collect();
        if let Some((x, rec)) = s.c.callbacks.pop_front() {
            break (x, rec);
        }
        assert!(Instant::now() < deadline, "no CB_RECALL");
    };
    outstanding -= answered;
    fill(&mut s.c, &mut outstanding);
    assert_eq!(s.c.c.in_flight(), s.c.c.credit_limit(), "still full");
    let what = s.c.answer(cb.0, &cb.1).expect("a CB_RECALL");
    assert_eq!(what.stateid, deleg);
    wait_metric(&s.gw, &recalls("answered"), 1);
    // Drain the forward calls: every one is answered.
    let mut done = 0u32;
    while done < outstanding {
        let _ = s.c.c.poll(&mut |_, r| {
            r.expect("NULL reply");
            done += 1;
        });
        assert!(Instant::now() < deadline, "forward calls lost");
    }
    s.delegreturn(&fh, &deleg);
    assert_eq!(s.v3.write(&s.fh3, b"new data"), 0);
}

/// R8167-19/21: a session created without CONN_BACK_CHAN gets the flag cleared and no
/// delegation; nothing is ever sent on its connection; a v3 WRITE goes straight on.
#[test]
fn r8167_21_no_back_channel_no_delegation() {
    let gw = Gw::start(&GwOpts::default());
    let mut v3 = V3::connect(gw.tcp_addr());
    let root = v3.mount_root();
    let fh3 = v3.create(&root, NAME);
    let mut c = V41::connect(gw.rdma, 8, 2);
    let (clientid, sid, flags) = c.session(b"no-back", 0, 1);
    assert_eq!(flags & CONN_BACK_CHAN, 0);
    let mut ops = Ops::new().sequence(sid, 1).reclaim_complete();
    assert_eq!(c.compound(&ops).status, NFS4_OK);
    ops = Ops::new()
        .sequence(sid, 2)
        .putrootfh()
        .open_read(clientid, b"o", NAME);
    let res = c.compound(&ops);
    assert_eq!(res.status, NFS4_OK);
    let mut r = res.reader();
    let seq_flags = skip_sequence_ok_op(&mut r);
    assert_eq!(
        seq_flags & SEQ4_STATUS_CB_PATH_DOWN,
        0,
        "no back channel asked"
    );
    assert_eq!(expect_op(&mut r, OP_PUTROOTFH), NFS4_OK);
    assert_eq!(expect_op(&mut r, OP_OPEN), NFS4_OK);
    assert!(parse_open_ok(&mut r).deleg.is_none(), "no delegation");
    assert_eq!(v3.write(&fh3, b"data"), 0, "no recall to wait for");
    assert!(
        c.next_callback(Duration::from_millis(300)).is_none(),
        "no callback on a connection not bound (R8167-19)"
    );
    assert_eq!(gw.metric(&callbacks("sent")), 0);
}

/// NFSv4.2's asynchronous COPY over RPC-over-RDMA: the copy's result comes back as a
/// CB_OFFLOAD (RFC 7862 §16.1) reverse call on the client's RDMA connection (RFC 8167),
/// naming the copy stateid the COPY reply gave and the destination; the bytes are there.
#[test]
fn r8167_cb_offload_over_rdma_after_an_asynchronous_copy() {
    let mut s = setup(8, 2);
    s.c.minor = 2;
    let root = s.v3.mount_root();
    s.v3.create(&root, b"copy-dst");
    let src = s.lookup(NAME);
    let dst = s.lookup(b"copy-dst");
    // The source becomes 2 MiB: "old data" and zeros.
    let res = s.compound(Ops::new().putfh(&src).allocate(&[0; 16], 0, 2 << 20));
    assert_eq!(res.status, NFS4_OK, "ALLOCATE");
    let range = nfs_wire::v4op::CopyRange {
        src_stateid: [0; 16],
        dst_stateid: [0; 16],
        src_offset: 0,
        dst_offset: 0,
        count: 0,
    };
    let res = s.compound(
        Ops::new()
            .putfh(&src)
            .savefh()
            .putfh(&dst)
            .copy(&range, false),
    );
    assert_eq!(res.status, NFS4_OK, "COPY");
    let mut r = res.reader();
    skip_sequence_ok_op(&mut r);
    for op in [OP_PUTFH, OP_SAVEFH, OP_PUTFH, OP_COPY] {
        assert_eq!(expect_op(&mut r, op), NFS4_OK);
    }
    assert_eq!(
        r.u32().unwrap(),
        1,
        "a callback id: the copy runs after the reply"
    );
    let id: [u8; 16] = r.opaque_fixed(16).unwrap().try_into().unwrap();
    let (x, rec) =
        s.c.next_callback(Duration::from_secs(10))
            .expect("CB_OFFLOAD over RDMA");
    let (rx, cb) = nfs_wire::v4cb::decode_offload(&rec).unwrap();
    assert_eq!(rx, x);
    assert_eq!((cb.stateid, cb.session, &cb.fh), (id, s.sid, &dst));
    assert_eq!((cb.status, cb.count), (NFS4_OK, 2 << 20));
    s.c.c
        .reply_callback(x, &nfs_wire::v4cb::offload_reply(x, &cb))
        .expect("callback reply");
    wait_metric(&s.gw, &callbacks("replied"), 2);
    assert_eq!(&s.read(&dst, &[0; 16])[..8], b"old data");
}
