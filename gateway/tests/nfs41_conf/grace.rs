//! Server restart, grace period and reclaims (RFC 8881 §8.4.2, §8.4.2.1, §18.51):
//! the gateway is shut down and started again on the same data and state
//! directories. Clients of the previous run may reclaim (OPEN CLAIM_PREVIOUS, LOCK
//! with reclaim) during the grace period, in which new state is NFS4ERR_GRACE; a
//! client's RECLAIM_COMPLETE ends its reclaims (NFS4ERR_NO_GRACE after it,
//! NFS4ERR_COMPLETE_ALREADY for a second one), and the grace period ends once every
//! client of the previous run sent it.

use crate::nfs4_client::*;
use crate::{on_file, open_file, third, Gw41};
use std::time::{Duration, Instant};

/// OPEN CLAIM_PREVIOUS of `fh` (§18.16.1): the open stateid or the status.
fn reclaim_open(c: &mut Tcp41, fh: &[u8]) -> Result<[u8; 16], u32> {
    let id = c.clientid;
    let (_, res) = on_file(c, fh, |o| {
        o.open(
            id,
            b"o",
            ACCESS_BOTH,
            DENY_NONE,
            How::NoCreate,
            Claim::Previous(OPEN_DELEGATE_NONE),
        )
    });
    let (st, mut r) = third(&res, OP_OPEN);
    if st != NFS4_OK {
        return Err(st);
    }
    Ok(parse_open_ok(&mut r).stateid)
}

fn reclaim_complete(c: &mut Tcp41) -> u32 {
    let (st, res) = c.seq_run(|o| o.reclaim_complete());
    let mut r = after_seq(&res);
    assert_eq!(expect_op(&mut r, OP_RECLAIM_COMPLETE), st);
    st
}

fn plain_open(c: &mut Tcp41, name: &[u8], create: bool) -> Result<(), u32> {
    open_file(c, b"o", name, ACCESS_READ, DENY_NONE, create).map(|_| ())
}

#[test]
fn restart_reclaims_in_grace_and_reclaim_complete() {
    // A long grace period that must end early: every client of the first run sends
    // RECLAIM_COMPLETE (a test that waited for it to run out would take 60 s).
    let mut gw = Gw41::start("grace_time_s = 60");
    let (fh, old_sid, old_id) = {
        let mut a = gw.client(b"conf-grace-a");
        let _b = gw.client(b"conf-grace-b");
        let (s, fh) = open_file(&mut a, b"o", b"gf", ACCESS_BOTH, DENY_NONE, true).unwrap();
        let id = a.clientid;
        let (_, res) = on_file(&mut a, &fh, |o| {
            o.write(&s, 0, b"before")
                .lock_new(WRITE_LT, 0, 10, &s, id, b"L")
        });
        assert_eq!(res.status, NFS4_OK);
        (fh, a.sid, id)
    };
    gw.restart();
    let mut a = Tcp41::connect(gw.addr);
    // §8.4.2: the previous run's session and client ID are gone.
    let res = a.compound(&Ops::new().sequence(old_sid, 100));
    assert_eq!(res.status, NFS4ERR_BADSESSION);
    let res = a.compound(&Ops::new().create_session_tcp(old_id, 1, 0, 4));
    assert_eq!(res.status, NFS4ERR_STALE_CLIENTID);
    a.session(b"conf-grace-a", 0);
    // New state waits for the grace period to end.
    assert_eq!(plain_open(&mut a, b"gf", false), Err(NFS4ERR_GRACE));
    assert_eq!(plain_open(&mut a, b"new", true), Err(NFS4ERR_GRACE));
    // Reclaims: the open, then the lock, which conflicts with others again.
    let s = reclaim_open(&mut a, &fh).unwrap();
    let id = a.clientid;
    let (_, res) = on_file(&mut a, &fh, |o| o.lock_reclaim(0, 10, &s, id, b"L"));
    assert_eq!(third(&res, OP_LOCK).0, NFS4_OK);
    let (_, res) = on_file(&mut a, &fh, |o| o.lock_new(WRITE_LT, 20, 1, &s, id, b"L2"));
    assert_eq!(
        third(&res, OP_LOCK).0,
        NFS4ERR_GRACE,
        "a new lock waits too"
    );
    // §18.51.3: once; reclaims after it are NFS4ERR_NO_GRACE.
    assert_eq!(reclaim_complete(&mut a), NFS4_OK);
    assert_eq!(reclaim_complete(&mut a), NFS4ERR_COMPLETE_ALREADY);
    assert_eq!(reclaim_open(&mut a, &fh), Err(NFS4ERR_NO_GRACE));
    // b has not finished: the grace period goes on for everyone.
    assert_eq!(plain_open(&mut a, b"gf", false), Err(NFS4ERR_GRACE));
    // A client the previous run did not know has nothing to reclaim: its reclaim
    // matches no state of the previous instance (§15.1.9.4 NFS4ERR_RECLAIM_BAD, as
    // knfsd answers it).
    let mut c = Tcp41::connect(gw.addr);
    c.session(b"conf-grace-new", 0);
    assert_eq!(reclaim_open(&mut c, &fh), Err(NFS4ERR_RECLAIM_BAD));
    // b completes: the grace period is over, new opens go through.
    let mut b = Tcp41::connect(gw.addr);
    b.session(b"conf-grace-b", 0);
    assert_eq!(reclaim_complete(&mut b), NFS4_OK);
    assert_eq!(plain_open(&mut a, b"gf", false), Ok(()));
    assert_eq!(reclaim_open(&mut b, &fh), Err(NFS4ERR_NO_GRACE));
    // The reclaimed lock is held, and the reclaimed open (upgraded by the OPEN above:
    // seqid 0 for its current seqid, §8.2.2) writes.
    let bid = b.clientid;
    let (_, res) = on_file(&mut b, &fh, |o| o.lockt(READ_LT, 5, 1, bid, b"M"));
    let (st, mut r) = third(&res, OP_LOCKT);
    assert_eq!(st, NFS4ERR_DENIED);
    let d = read_denied(&mut r);
    assert_eq!((d.offset, d.length, d.owner), (0, 10, b"L".to_vec()));
    let s0 = with_seqid(&s, 0);
    let (_, res) = on_file(&mut a, &fh, |o| o.write(&s0, 0, b"after!").read(&s0, 0, 6));
    assert_eq!(res.status, NFS4_OK);
    let mut r = after_seq(&res);
    expect_op(&mut r, OP_PUTFH);
    assert_eq!(expect_op(&mut r, OP_WRITE), NFS4_OK);
    r.skip(4 + 4 + 8).unwrap();
    assert_eq!(expect_op(&mut r, OP_READ), NFS4_OK);
    r.u32().unwrap();
    assert_eq!(r.opaque_var(16).unwrap(), b"after!");
}

/// OPEN CLAIM_PREVIOUS of `fh` with the delegation type held before (§18.16.3
/// delegate_type), on a client whose back channel answers: the open, tried again while
/// the gateway has not yet seen the back channel's answer to its probe (a reclaim by
/// the same open-owner again only upgrades it).
fn reclaim_deleg(c: &mut Tcp41, fh: &[u8], access: u32, kind: u32) -> Opened {
    let id = c.clientid;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, res) = on_file(c, fh, |o| {
            o.open(
                id,
                b"o",
                access,
                DENY_NONE,
                How::NoCreate,
                Claim::Previous(kind),
            )
        });
        let (st, mut r) = third(&res, OP_OPEN);
        assert_eq!(st, NFS4_OK, "OPEN CLAIM_PREVIOUS({kind})");
        let opened = parse_open_ok(&mut r);
        if opened.deleg.is_some() || Instant::now() > deadline {
            return opened;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A delegation held before a restart (or a takeover: the same grace period, the
/// same code) is reclaimed by OPEN CLAIM_PREVIOUS with its delegation type (RFC 8881
/// §10.2.1, §18.16.3), read and write alike; the reclaimed delegations are real:
/// another client's conflicting OPEN after the grace period recalls them
/// (NFS4ERR_DELAY, CB_RECALL naming the reclaimed stateid) until DELEGRETURN.
#[test]
fn delegations_are_reclaimed_after_a_restart() {
    let mut gw = Gw41::start("grace_time_s = 60\nwrite_delegations = true");
    let (fh_r, fh_w) = {
        let mut a = gw.client(b"conf-grace-deleg");
        let mut fhs = Vec::new();
        for name in [b"dr", b"dw"] {
            let (s, fh) = open_file(&mut a, b"w", name, ACCESS_BOTH, DENY_NONE, true).unwrap();
            let (_, res) = on_file(&mut a, &fh, |o| o.write(&s, 0, b"held").close(&s));
            assert_eq!(res.status, NFS4_OK);
            fhs.push(fh);
        }
        (fhs[0].clone(), fhs[1].clone())
    };
    gw.restart();
    let mut a = Tcp41::connect(gw.addr);
    a.session(b"conf-grace-deleg", CONN_BACK_CHAN);
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.cb_nulls == 0 {
        assert!(a.next_callback(Duration::from_millis(50)).is_none());
        assert!(Instant::now() < deadline, "no CB_NULL probe");
    }
    let read = reclaim_deleg(&mut a, &fh_r, ACCESS_READ, OPEN_DELEGATE_READ);
    let read_deleg = read.deleg.expect("the read delegation reclaimed");
    assert!(!read.write, "a read delegation, as held");
    let write = reclaim_deleg(&mut a, &fh_w, ACCESS_BOTH, OPEN_DELEGATE_WRITE);
    let write_deleg = write.deleg.expect("the write delegation reclaimed");
    assert!(write.write, "a write delegation, as held");
    // A reclaim that names no delegation gets none.
    let none = reclaim_deleg_once(&mut a, &fh_r);
    assert_eq!(none, None);
    assert_eq!(reclaim_complete(&mut a), NFS4_OK);
    // After the grace period, a writer of the read-delegated file and a reader of the
    // write-delegated one each wait while the holder is asked to return it.
    let mut w = gw.client(b"conf-grace-deleg-other");
    for (fh, name, access, deleg) in [
        (&fh_r, b"dr", ACCESS_WRITE, read_deleg),
        (&fh_w, b"dw", ACCESS_READ, write_deleg),
    ] {
        let other = |w: &mut Tcp41| open_file(w, b"x", name, access, DENY_NONE, false);
        assert_eq!(other(&mut w).map(|_| ()), Err(NFS4ERR_DELAY));
        let rec = a.next_callback(Duration::from_secs(10)).expect("CB_RECALL");
        assert_eq!(a.answer(&rec).stateid, deleg, "the reclaimed delegation");
        let (_, res) = on_file(&mut a, fh, |o| o.delegreturn(&deleg));
        assert_eq!(third(&res, OP_DELEGRETURN).0, NFS4_OK);
        assert!(other(&mut w).is_ok(), "it opens once returned");
    }
}

/// OPEN CLAIM_PREVIOUS(OPEN_DELEGATE_NONE) by another open-owner: its delegation.
fn reclaim_deleg_once(c: &mut Tcp41, fh: &[u8]) -> Option<[u8; 16]> {
    let id = c.clientid;
    let (_, res) = on_file(c, fh, |o| {
        o.open(
            id,
            b"o2",
            ACCESS_READ,
            DENY_NONE,
            How::NoCreate,
            Claim::Previous(OPEN_DELEGATE_NONE),
        )
    });
    let (st, mut r) = third(&res, OP_OPEN);
    assert_eq!(st, NFS4_OK);
    parse_open_ok(&mut r).deleg
}
