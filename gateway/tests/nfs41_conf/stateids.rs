//! Stateids (RFC 8881 §8.2): seqid rules (§8.2.2), special stateids (§8.2.3), the
//! current stateid (§16.2.3.1.2).

use crate::nfs4_client::*;
use crate::{on_file, open_file, third, Gw41};

/// A WRITE of one byte with `sid` on `fh`: its status.
fn write_with(c: &mut Tcp41, fh: &[u8], sid: &[u8; 16]) -> u32 {
    let (_, res) = on_file(c, fh, |o| o.write(sid, 0, b"w"));
    third(&res, OP_WRITE).0
}

fn read_with(c: &mut Tcp41, fh: &[u8], sid: &[u8; 16]) -> u32 {
    let (_, res) = on_file(c, fh, |o| o.read(sid, 0, 1));
    third(&res, OP_READ).0
}

/// §8.2.2: an upgrade bumps the seqid; the previous one is NFS4ERR_OLD_STATEID, one
/// not yet given out NFS4ERR_BAD_STATEID, 0 means "the current one". Another
/// `other`, another client's stateid, or a stateid of another file are
/// NFS4ERR_BAD_STATEID (§8.2.4: stateids belong to one client and one file).
#[test]
fn seqid_rules_and_foreign_stateids() {
    let gw = Gw41::start("");
    let mut a = gw.client(b"conf-sid-a");
    let (s1, fh) = open_file(&mut a, b"o", b"sid", ACCESS_READ, DENY_NONE, true).unwrap();
    assert_eq!(seqid_of(&s1), 1);
    let (s2, fh2) = open_file(&mut a, b"o", b"sid", ACCESS_WRITE, DENY_NONE, false).unwrap();
    assert_eq!(
        (seqid_of(&s2), &s2[4..]),
        (2, &s1[4..]),
        "same stateid, next seqid"
    );
    assert_eq!(fh2, fh);
    assert_eq!(write_with(&mut a, &fh, &s1), NFS4ERR_OLD_STATEID);
    assert_eq!(
        write_with(&mut a, &fh, &with_seqid(&s1, 3)),
        NFS4ERR_BAD_STATEID
    );
    assert_eq!(write_with(&mut a, &fh, &with_seqid(&s1, 0)), NFS4_OK);
    assert_eq!(write_with(&mut a, &fh, &s2), NFS4_OK);
    let mut forged = s2;
    forged[15] ^= 0x80;
    assert_eq!(write_with(&mut a, &fh, &forged), NFS4ERR_BAD_STATEID);
    // Another client presenting a's stateid.
    let mut b = gw.client(b"conf-sid-b");
    assert_eq!(write_with(&mut b, &fh, &s2), NFS4ERR_BAD_STATEID);
    assert_eq!(read_with(&mut b, &fh, &s2), NFS4ERR_BAD_STATEID);
    // a's stateid on another file.
    let (_, other) = open_file(&mut a, b"o", b"sid2", ACCESS_READ, DENY_NONE, true).unwrap();
    assert_eq!(write_with(&mut a, &other, &s2), NFS4ERR_BAD_STATEID);
}

/// §8.2.3: the anonymous stateid (all zero) and READ bypass stateid (all ones) do I/O
/// without an open, subject to share reservations: a WRITE with either against
/// another client's DENY_WRITE, or an anonymous READ against DENY_READ, is
/// NFS4ERR_LOCKED (§9.7; READ §18.22.3, WRITE §18.32.3).
/// A zero `other` with a seqid other than 0 (anonymous) or 1 (current) is no special
/// stateid: NFS4ERR_BAD_STATEID.
#[test]
fn special_stateids_and_share_reservations() {
    let gw = Gw41::start("");
    let mut a = gw.client(b"conf-special-a");
    let mut b = gw.client(b"conf-special-b");
    let (_, fh) = open_file(&mut a, b"o", b"sp", ACCESS_BOTH, DENY_NONE, true).unwrap();
    assert_eq!(write_with(&mut b, &fh, &ANONYMOUS), NFS4_OK);
    assert_eq!(write_with(&mut b, &fh, &BYPASS), NFS4_OK);
    assert_eq!(read_with(&mut b, &fh, &ANONYMOUS), NFS4_OK);
    assert_eq!(read_with(&mut b, &fh, &BYPASS), NFS4_OK);
    assert_eq!(
        read_with(&mut b, &fh, &with_seqid(&ANONYMOUS, 5)),
        NFS4ERR_BAD_STATEID
    );
    assert_eq!(
        read_with(&mut b, &fh, &with_seqid(&BYPASS, 0)),
        NFS4ERR_BAD_STATEID
    );
    // a denies both: special-stateid I/O of b is LOCKED; a's own open still works.
    let (s, _) = open_file(&mut a, b"o", b"sp", ACCESS_BOTH, DENY_BOTH, false).unwrap();
    const NFS4ERR_LOCKED: u32 = 10012;
    assert_eq!(write_with(&mut b, &fh, &ANONYMOUS), NFS4ERR_LOCKED);
    assert_eq!(write_with(&mut b, &fh, &BYPASS), NFS4ERR_LOCKED);
    assert_eq!(read_with(&mut b, &fh, &ANONYMOUS), NFS4ERR_LOCKED);
    assert_eq!(write_with(&mut a, &fh, &s), NFS4_OK);
    // Once that open is closed, b may write again.
    let (_, res) = on_file(&mut a, &fh, |o| o.close(&s));
    assert_eq!(third(&res, OP_CLOSE).0, NFS4_OK);
    assert_eq!(write_with(&mut b, &fh, &ANONYMOUS), NFS4_OK);
}

/// §16.2.3.1.2: within one COMPOUND the current stateid (seqid 1, other zero) stands
/// for the stateid the last operation returned: OPEN, then WRITE and CLOSE with it.
/// A COMPOUND that has no current stateid yet gets NFS4ERR_BAD_STATEID for it; CLOSE
/// leaves the stateid unusable (§18.2.4).
#[test]
fn current_stateid_within_a_compound() {
    let gw = Gw41::start("");
    let mut a = gw.client(b"conf-current");
    let clientid = a.clientid;
    let (st, res) = a.seq_run(|o| {
        o.putrootfh()
            .open(
                clientid,
                b"o",
                ACCESS_BOTH | WANT_NO_DELEG,
                DENY_NONE,
                How::Unchecked,
                Claim::Null(b"cur"),
            )
            .write(&CURRENT, 0, b"abc")
            .getfh()
            .close(&CURRENT)
    });
    assert_eq!(st, NFS4_OK);
    let mut r = after_seq(&res);
    expect_op(&mut r, OP_PUTROOTFH);
    assert_eq!(expect_op(&mut r, OP_OPEN), NFS4_OK);
    let opened = parse_open_ok(&mut r);
    assert_eq!(expect_op(&mut r, OP_WRITE), NFS4_OK);
    assert_eq!(r.u32().unwrap(), 3, "count");
    r.skip(4 + 8).unwrap();
    assert_eq!(expect_op(&mut r, OP_GETFH), NFS4_OK);
    let fh = r.opaque_var(128).unwrap().to_vec();
    assert_eq!(expect_op(&mut r, OP_CLOSE), NFS4_OK);
    let _closed = read_stateid(&mut r);
    assert_eq!(r.remaining(), 0);
    // The open is gone: its stateid is bad now.
    assert_eq!(
        write_with(&mut a, &fh, &opened.stateid),
        NFS4ERR_BAD_STATEID
    );
    // No operation set a current stateid in this COMPOUND.
    assert_eq!(write_with(&mut a, &fh, &CURRENT), NFS4ERR_BAD_STATEID);
    assert_eq!(read_with(&mut a, &fh, &ANONYMOUS), NFS4_OK);
}
