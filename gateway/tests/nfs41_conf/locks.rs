//! Byte-range locks (RFC 8881 §9): LOCK (§18.10), LOCKT (§18.11), LOCKU (§18.12),
//! TEST_STATEID (§18.48), FREE_STATEID (§18.38), and RELEASE_LOCKOWNER, which an
//! NFSv4.1 server must not implement (§17's table: MNI).

use crate::nfs4_client::*;
use crate::{on_file, open_file, third, Gw41};

/// LOCK's outcome: the lock stateid, or the status and (for NFS4ERR_DENIED) the
/// LOCK4denied.
fn lock_res(res: &Res) -> Result<[u8; 16], (u32, Option<Denied>)> {
    let (st, mut r) = third(res, OP_LOCK);
    match st {
        NFS4_OK => Ok(read_stateid(&mut r)),
        NFS4ERR_DENIED => Err((st, Some(read_denied(&mut r)))),
        _ => Err((st, None)),
    }
}

fn lockt(
    c: &mut Tcp41,
    fh: &[u8],
    kind: u32,
    off: u64,
    len: u64,
    owner: &[u8],
) -> Result<(), (u32, Option<Denied>)> {
    let id = c.clientid;
    let (_, res) = on_file(c, fh, |o| o.lockt(kind, off, len, id, owner));
    let (st, mut r) = third(&res, OP_LOCKT);
    match st {
        NFS4_OK => Ok(()),
        NFS4ERR_DENIED => Err((st, Some(read_denied(&mut r)))),
        _ => Err((st, None)),
    }
}

fn denied(
    offset: u64,
    length: u64,
    kind: u32,
    clientid: u64,
    owner: &[u8],
) -> Result<(), (u32, Option<Denied>)> {
    Err((
        NFS4ERR_DENIED,
        Some(Denied {
            offset,
            length,
            kind,
            clientid,
            owner: owner.to_vec(),
        }),
    ))
}

/// Two clients on one file. §18.10.4: a conflicting LOCK (and LOCKT, §18.11) is
/// NFS4ERR_DENIED with the holder's offset, length, type and owner; read locks
/// share, a write lock excludes both. §18.12.3: LOCKU of the middle of a range
/// splits it. §18.2.3: CLOSE while the owner holds locks is
/// NFS4ERR_LOCKS_HELD; §18.38.3: FREE_STATEID of a lock stateid with locks too,
/// without it succeeds. §18.10.3: a WRITE_LT under a read-only open is
/// NFS4ERR_OPENMODE.
#[test]
fn conflicts_splits_types_and_release() {
    let gw = Gw41::start("");
    let mut a = gw.client(b"conf-lock-a");
    let mut b = gw.client(b"conf-lock-b");
    let (sa, fh) = open_file(&mut a, b"oa", b"lk", ACCESS_BOTH, DENY_NONE, true).unwrap();
    let (sb, _) = open_file(&mut b, b"ob", b"lk", ACCESS_BOTH, DENY_NONE, false).unwrap();
    let (ida, idb) = (a.clientid, b.clientid);
    let (_, res) = on_file(&mut a, &fh, |o| {
        o.lock_new(WRITE_LT, 0, 100, &sa, ida, b"LA")
    });
    let la = lock_res(&res).unwrap();
    assert_eq!(seqid_of(&la), 1);
    assert_ne!(la[4..], sa[4..], "a lock stateid of its own");
    let (_, res) = on_file(&mut b, &fh, |o| {
        o.lock_new(READ_LT, 50, 10, &sb, idb, b"LB")
    });
    assert_eq!(
        lock_res(&res).map(|_| ()),
        denied(0, 100, WRITE_LT, ida, b"LA")
    );
    assert_eq!(
        lockt(&mut b, &fh, READ_LT, 99, 1, b"LB"),
        denied(0, 100, WRITE_LT, ida, b"LA")
    );
    assert_eq!(lockt(&mut b, &fh, WRITE_LT, 100, 5, b"LB"), Ok(()));
    // The owner's own range never conflicts with itself.
    assert_eq!(lockt(&mut a, &fh, WRITE_LT, 0, 100, b"LA"), Ok(()));
    // Split [0,100) into [0,40) and [60,100).
    let (_, res) = on_file(&mut a, &fh, |o| o.locku(WRITE_LT, &la, 40, 20));
    let (st, mut r) = third(&res, OP_LOCKU);
    assert_eq!(st, NFS4_OK);
    let la2 = read_stateid(&mut r);
    assert_eq!((seqid_of(&la2), &la2[4..]), (2, &la[4..]));
    assert_eq!(lockt(&mut b, &fh, WRITE_LT, 40, 20, b"LB"), Ok(()));
    assert_eq!(
        lockt(&mut b, &fh, WRITE_LT, 30, 20, b"LB"),
        denied(0, 40, WRITE_LT, ida, b"LA")
    );
    assert_eq!(
        lockt(&mut b, &fh, READ_LT, 55, 10, b"LB"),
        denied(60, 40, WRITE_LT, ida, b"LA")
    );
    let (_, res) = on_file(&mut b, &fh, |o| {
        o.lock_new(WRITE_LT, 45, 10, &sb, idb, b"LB")
    });
    let lb = lock_res(&res).unwrap();
    // The old lock stateid seqid is NFS4ERR_OLD_STATEID (§8.2.2).
    let (_, res) = on_file(&mut a, &fh, |o| o.lock_old(WRITE_LT, 200, 1, &la));
    assert_eq!(lock_res(&res), Err((NFS4ERR_OLD_STATEID, None)));
    // Read locks share: a downgrades [60,100) to READ_LT; b's read lock fits in it.
    let (_, res) = on_file(&mut a, &fh, |o| o.lock_old(READ_LT, 60, 40, &la2));
    let la3 = lock_res(&res).unwrap();
    let (_, res) = on_file(&mut b, &fh, |o| o.lock_old(READ_LT, 70, 10, &lb));
    let lb2 = lock_res(&res).unwrap();
    assert_eq!(
        lockt(&mut b, &fh, WRITE_LT, 65, 1, b"other"),
        denied(60, 40, READ_LT, ida, b"LA")
    );
    // CLOSE and FREE_STATEID with locks held.
    let (_, res) = on_file(&mut a, &fh, |o| o.close(&sa));
    assert_eq!(third(&res, OP_CLOSE).0, NFS4ERR_LOCKS_HELD);
    let (st, _) = a.seq_run(|o| o.free_stateid(&la3));
    assert_eq!(st, NFS4ERR_LOCKS_HELD);
    // TEST_STATEID (§18.48): a's open and lock stateids OK, b's, bad ones not.
    let (st, res) = a.seq_run(|o| o.test_stateid(&[sa, la3, lb2, [9; 16]]));
    assert_eq!(st, NFS4_OK);
    let mut r = after_seq(&res);
    assert_eq!(expect_op(&mut r, OP_TEST_STATEID), NFS4_OK);
    let codes: Vec<u32> = (0..r.u32().unwrap()).map(|_| r.u32().unwrap()).collect();
    assert_eq!(
        codes,
        [NFS4_OK, NFS4_OK, NFS4ERR_BAD_STATEID, NFS4ERR_BAD_STATEID]
    );
    // Unlock everything: FREE_STATEID then CLOSE succeed; b may now lock [0, 40).
    let (_, res) = on_file(&mut a, &fh, |o| o.locku(READ_LT, &la3, 0, u64::MAX));
    let (st, mut r) = third(&res, OP_LOCKU);
    assert_eq!(st, NFS4_OK);
    let la4 = read_stateid(&mut r);
    let (st, _) = a.seq_run(|o| o.free_stateid(&la4));
    assert_eq!(st, NFS4_OK);
    let (_, res) = on_file(&mut a, &fh, |o| o.close(&sa));
    assert_eq!(third(&res, OP_CLOSE).0, NFS4_OK);
    let (_, res) = on_file(&mut b, &fh, |o| o.lock_old(WRITE_LT, 0, 40, &lb2));
    assert!(lock_res(&res).is_ok());
    // A WRITE_LT under a read-only open.
    let (sr, _) = open_file(&mut a, b"ro", b"lk", ACCESS_READ, DENY_NONE, false).unwrap();
    let (_, res) = on_file(&mut a, &fh, |o| {
        o.lock_new(WRITE_LT, 500, 1, &sr, ida, b"LR")
    });
    assert_eq!(lock_res(&res), Err((NFS4ERR_OPENMODE, None)));
}

/// §18.10.3: LOCK naming an open stateid that was closed is NFS4ERR_BAD_STATEID; a
/// zero length or a range past 2^64 - 1 is NFS4ERR_INVAL (§18.10.4);
/// RELEASE_LOCKOWNER is not an NFSv4.1 operation (§17: MNI): NFS4ERR_NOTSUPP.
#[test]
fn closed_opens_bad_ranges_and_release_lockowner() {
    let gw = Gw41::start("");
    let mut a = gw.client(b"conf-lock-closed");
    let id = a.clientid;
    let (s, fh) = open_file(&mut a, b"o", b"lc", ACCESS_BOTH, DENY_NONE, true).unwrap();
    let (_, res) = on_file(&mut a, &fh, |o| o.lock_new(WRITE_LT, 0, 0, &s, id, b"L"));
    assert_eq!(lock_res(&res), Err((NFS4ERR_INVAL, None)));
    let (_, res) = on_file(&mut a, &fh, |o| {
        o.lock_new(WRITE_LT, u64::MAX, 2, &s, id, b"L")
    });
    assert_eq!(lock_res(&res), Err((NFS4ERR_INVAL, None)));
    let (_, res) = on_file(&mut a, &fh, |o| o.close(&s));
    assert_eq!(third(&res, OP_CLOSE).0, NFS4_OK);
    let (_, res) = on_file(&mut a, &fh, |o| o.lock_new(WRITE_LT, 0, 10, &s, id, b"L"));
    assert_eq!(lock_res(&res), Err((NFS4ERR_BAD_STATEID, None)));
    let (st, res) = a.seq_run(|o| o.release_lockowner(id, b"L"));
    assert_eq!(st, NFS4ERR_NOTSUPP);
    let mut r = after_seq(&res);
    assert_eq!(expect_op(&mut r, OP_RELEASE_LOCKOWNER), NFS4ERR_NOTSUPP);
}

/// In NFSv4.1 the seqid arguments of OPEN, CLOSE, LOCK (open_seqid, lock_seqid) and
/// LOCKU may be any value and the server ignores them: SEQUENCE gives exactly-once
/// semantics (RFC 8881 §18.16.3, §18.2.3, §18.10.3, §18.12.3).
#[test]
fn seqid_arguments_are_ignored() {
    let gw = Gw41::start("");
    let mut a = gw.client(b"conf-lock-seqid");
    let id = a.clientid;
    let (st, res) = a.seq_run(|o| {
        o.putrootfh()
            .raw(|w| {
                w.u32(OP_OPEN)?;
                w.u32(0xdead_beef)?; // seqid
                w.u32(ACCESS_BOTH | WANT_NO_DELEG)?;
                w.u32(DENY_NONE)?;
                w.u64(id)?;
                w.opaque_var(b"o")?;
                w.u32(1)?; // OPEN4_CREATE
                w.u32(0)?; // UNCHECKED4
                w.u32(0)?;
                w.u32(0)?;
                w.u32(0)?; // CLAIM_NULL
                w.opaque_var(b"seqids")
            })
            .getfh()
    });
    assert_eq!(st, NFS4_OK);
    let mut r = after_seq(&res);
    expect_op(&mut r, OP_PUTROOTFH);
    expect_op(&mut r, OP_OPEN);
    let s = parse_open_ok(&mut r).stateid;
    expect_op(&mut r, OP_GETFH);
    let fh = r.opaque_var(128).unwrap().to_vec();
    // LOCK by a new lock owner with open_seqid and lock_seqid set.
    let (_, res) = on_file(&mut a, &fh, |o| {
        o.raw(|w| {
            w.u32(OP_LOCK)?;
            w.u32(WRITE_LT)?;
            w.bool(false)?;
            w.u64(0)?;
            w.u64(10)?;
            w.bool(true)?;
            w.u32(77)?; // open_seqid
            w.opaque_fixed(&s)?;
            w.u32(99)?; // lock_seqid
            w.u64(id)?;
            w.opaque_var(b"L")
        })
    });
    let l = lock_res(&res).unwrap();
    // LOCK by the existing owner with another lock_seqid; LOCKU with a seqid.
    let (_, res) = on_file(&mut a, &fh, |o| {
        o.raw(|w| {
            w.u32(OP_LOCK)?;
            w.u32(WRITE_LT)?;
            w.bool(false)?;
            w.u64(20)?;
            w.u64(10)?;
            w.bool(false)?;
            w.opaque_fixed(&l)?;
            w.u32(12345) // lock_seqid
        })
    });
    let l2 = lock_res(&res).unwrap();
    let (_, res) = on_file(&mut a, &fh, |o| {
        o.raw(|w| {
            w.u32(OP_LOCKU)?;
            w.u32(WRITE_LT)?;
            w.u32(4242)?; // seqid
            w.opaque_fixed(&l2)?;
            w.u64(0)?;
            w.u64(u64::MAX)
        })
    });
    assert_eq!(third(&res, OP_LOCKU).0, NFS4_OK);
    let (_, res) = on_file(&mut a, &fh, |o| {
        o.raw(|w| {
            w.u32(OP_CLOSE)?;
            w.u32(31337)?; // seqid
            w.opaque_fixed(&s)
        })
    });
    assert_eq!(third(&res, OP_CLOSE).0, NFS4_OK);
}
