//! Delegations (RFC 8881 §10.2, §10.4): a read delegation granted on OPEN to a client
//! with a working back channel (§2.10.3.1, this TCP connection), recalled by CB_RECALL
//! (§20.2) when another client OPENs the file for writing, which waits with
//! NFS4ERR_DELAY (§10.4.2) until DELEGRETURN (§18.6). The NFSv3-writer recall is in
//! tests/e2e/test_deleg.py and gateway/tests/nfs4_rdma.rs; this is the v4 one.

use crate::nfs4_client::*;
use crate::{on_file, open_file, third, Gw41};
use std::time::{Duration, Instant};

/// A client whose session has this connection as its back channel, once it answered
/// the gateway's CB_NULL probe (§2.10.3.1: what the gateway waits for before it
/// grants a delegation).
pub fn with_back_channel(gw: &Gw41, owner: &[u8]) -> Tcp41 {
    let mut c = Tcp41::connect(gw.addr);
    c.session(owner, CONN_BACK_CHAN);
    let (st, _) = c.seq_run(|o| o.reclaim_complete());
    assert_eq!(st, NFS4_OK);
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.cb_nulls == 0 {
        assert!(c.next_callback(Duration::from_millis(50)).is_none());
        assert!(Instant::now() < deadline, "no CB_NULL probe");
    }
    c
}

/// OPEN for reading with no delegation preference: (open stateid, delegation).
fn open_read(c: &mut Tcp41, name: &[u8]) -> Opened {
    let id = c.clientid;
    let (st, res) = c.seq_run(|o| {
        o.putrootfh().open(
            id,
            b"r",
            ACCESS_READ,
            DENY_NONE,
            How::NoCreate,
            Claim::Null(name),
        )
    });
    assert_eq!(st, NFS4_OK);
    let mut r = after_seq(&res);
    expect_op(&mut r, OP_PUTROOTFH);
    expect_op(&mut r, OP_OPEN);
    parse_open_ok(&mut r)
}

#[test]
fn read_delegation_recalled_by_another_clients_write_open() {
    let gw = Gw41::start("");
    // The holder writes the file first (another client's write open would keep the
    // file from delegations for a while: the gateway's policy, §10.4 leaves it open).
    let mut a = with_back_channel(&gw, b"conf-deleg-holder");
    let (s, fh) = open_file(&mut a, b"w", b"dg", ACCESS_BOTH, DENY_NONE, true).unwrap();
    let (_, res) = on_file(&mut a, &fh, |o| o.write(&s, 0, b"data").close(&s));
    assert_eq!(res.status, NFS4_OK);
    // The probe's answer reaches the gateway's callback thread asynchronously: a
    // read open without a delegation is closed and tried again, for a while.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (opened, deleg) = loop {
        let opened = open_read(&mut a, b"dg");
        if let Some(d) = opened.deleg {
            break (opened, d);
        }
        let (_, res) = on_file(&mut a, &fh, |o| o.close(&opened.stateid));
        assert_eq!(res.status, NFS4_OK);
        assert!(Instant::now() < deadline, "no read delegation (§10.4)");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut w = gw.client(b"conf-deleg-writer");
    assert_ne!(deleg[4..], opened.stateid[4..]);
    // Another reader does not conflict: no recall, its OPEN succeeds.
    let mut r = gw.client(b"conf-deleg-reader");
    assert!(open_file(&mut r, b"r", b"dg", ACCESS_READ, DENY_NONE, false).is_ok());
    assert!(
        a.next_callback(Duration::from_millis(300)).is_none(),
        "no recall for a reader"
    );
    // A writer does: NFS4ERR_DELAY while the delegation is recalled.
    let write_open = |w: &mut Tcp41| open_file(w, b"w", b"dg", ACCESS_WRITE, DENY_NONE, false);
    assert_eq!(write_open(&mut w).map(|_| ()), Err(NFS4ERR_DELAY));
    let rec = a.next_callback(Duration::from_secs(10)).expect("CB_RECALL");
    let recall = a.answer(&rec);
    assert_eq!(recall.stateid, deleg, "CB_RECALL names the delegation");
    assert_eq!(
        recall.session, a.sid,
        "CB_SEQUENCE names the holder's session"
    );
    // Still recalled, not yet returned: the writer still waits.
    assert_eq!(write_open(&mut w).map(|_| ()), Err(NFS4ERR_DELAY));
    let (_, res) = on_file(&mut a, &fh, |o| o.delegreturn(&deleg));
    assert_eq!(third(&res, OP_DELEGRETURN).0, NFS4_OK);
    let (_, res) = on_file(&mut a, &fh, |o| o.delegreturn(&deleg));
    assert_eq!(third(&res, OP_DELEGRETURN).0, NFS4ERR_BAD_STATEID);
    assert!(
        write_open(&mut w).is_ok(),
        "the writer opens once it was returned"
    );
    // The holder's open survives its delegation.
    let (_, res) = on_file(&mut a, &fh, |o| o.read(&opened.stateid, 0, 4));
    let (st, mut rd) = third(&res, OP_READ);
    assert_eq!(st, NFS4_OK);
    rd.u32().unwrap();
    assert_eq!(rd.opaque_var(16).unwrap(), b"data");
}
