//! OPEN, share reservations and their changes: RFC 8881 §9.7 (share reservations),
//! §18.16 (OPEN), §18.18 (OPEN_DOWNGRADE), §18.2 (CLOSE).

use crate::nfs4_client::*;
use crate::{on_file, open_file, third, Gw41};

/// The special invalid stateid (§8.2.3): seqid NFS4_UINT32_MAX, other zero, which
/// CLOSE returns (§18.2.4).
const INVALID: [u8; 16] = [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];

fn downgrade(
    c: &mut Tcp41,
    fh: &[u8],
    sid: &[u8; 16],
    access: u32,
    deny: u32,
) -> Result<[u8; 16], u32> {
    let (_, res) = on_file(c, fh, |o| o.open_downgrade(sid, access, deny));
    let (st, mut r) = third(&res, OP_OPEN_DOWNGRADE);
    if st != NFS4_OK {
        return Err(st);
    }
    Ok(read_stateid(&mut r))
}

fn close(c: &mut Tcp41, fh: &[u8], sid: &[u8; 16]) -> Result<[u8; 16], u32> {
    let (_, res) = on_file(c, fh, |o| o.close(sid));
    let (st, mut r) = third(&res, OP_CLOSE);
    if st != NFS4_OK {
        return Err(st);
    }
    Ok(read_stateid(&mut r))
}

/// §9.7: an OPEN whose access another owner denies, or whose deny conflicts with
/// another owner's access, is NFS4ERR_SHARE_DENIED — between clients and between two
/// owners of one client. OPEN_DOWNGRADE (§18.18.3) to modes the owner opened lifts
/// the deny; to modes it never opened it is NFS4ERR_INVAL.
#[test]
fn deny_modes_conflict_and_downgrade_lifts_them() {
    let gw = Gw41::start("");
    let mut a = gw.client(b"conf-share-a");
    let mut b = gw.client(b"conf-share-b");
    let (s0, fh) = open_file(&mut a, b"oa", b"share", ACCESS_READ, DENY_NONE, true).unwrap();
    let (sa, _) = open_file(&mut a, b"oa", b"share", ACCESS_BOTH, DENY_WRITE, false).unwrap();
    assert_eq!((seqid_of(&sa), &sa[4..]), (2, &s0[4..]));
    let want = Err(NFS4ERR_SHARE_DENIED);
    let open = |c: &mut Tcp41, owner: &[u8], access, deny| {
        open_file(c, owner, b"share", access, deny, false).map(|_| ())
    };
    assert_eq!(
        open(&mut b, b"ob", ACCESS_WRITE, DENY_NONE),
        want,
        "access vs deny"
    );
    assert_eq!(
        open(&mut b, b"ob", ACCESS_READ, DENY_READ),
        want,
        "deny vs access"
    );
    assert_eq!(
        open(&mut a, b"oa2", ACCESS_WRITE, DENY_NONE),
        want,
        "another owner"
    );
    let (sb, _) = open_file(&mut b, b"ob", b"share", ACCESS_READ, DENY_NONE, false).unwrap();
    // Downgrades to modes never opened; then to READ/DENY_NONE, opened first.
    assert_eq!(
        downgrade(&mut a, &fh, &sa, ACCESS_WRITE, DENY_NONE),
        Err(NFS4ERR_INVAL)
    );
    assert_eq!(
        downgrade(&mut a, &fh, &sa, ACCESS_READ, DENY_READ),
        Err(NFS4ERR_INVAL)
    );
    let sa2 = downgrade(&mut a, &fh, &sa, ACCESS_READ, DENY_NONE).unwrap();
    assert_eq!((seqid_of(&sa2), &sa2[4..]), (3, &sa[4..]));
    assert_eq!(
        downgrade(&mut a, &fh, &sa, ACCESS_READ, DENY_NONE),
        Err(NFS4ERR_OLD_STATEID)
    );
    let (sb2, _) = open_file(&mut b, b"ob", b"share", ACCESS_WRITE, DENY_NONE, false).unwrap();
    assert_eq!(sb2[4..], sb[4..], "an upgrade keeps the stateid");
    // b holds READ|WRITE now: a may no longer deny either.
    assert_eq!(open(&mut a, b"oa3", ACCESS_READ, DENY_WRITE), want);
    assert_eq!(close(&mut b, &fh, &sb2), Ok(INVALID));
    assert_eq!(open(&mut a, b"oa3", ACCESS_READ, DENY_WRITE), Ok(()));
}

/// §9.7 / §18.16.3: a second OPEN by the same owner upgrades the open to the union of
/// both (same `other`, seqid + 1); OPEN_DOWNGRADE back to one of the modes opened
/// works, to the other one too; CLOSE returns the invalid stateid and the stateid is
/// then NFS4ERR_BAD_STATEID (§18.2.4), CLOSE again too.
#[test]
fn upgrade_downgrade_and_close() {
    let gw = Gw41::start("");
    let mut a = gw.client(b"conf-upgrade");
    let (s1, fh) = open_file(&mut a, b"o", b"up", ACCESS_READ, DENY_NONE, true).unwrap();
    let (s2, _) = open_file(&mut a, b"o", b"up", ACCESS_WRITE, DENY_READ, false).unwrap();
    assert_eq!((seqid_of(&s2), &s2[4..]), (2, &s1[4..]));
    // Now READ|WRITE, DENY_READ: another owner may not read.
    let denied = open_file(&mut a, b"p", b"up", ACCESS_READ, DENY_NONE, false);
    assert_eq!(denied.map(|_| ()), Err(NFS4ERR_SHARE_DENIED));
    let s3 = downgrade(&mut a, &fh, &s2, ACCESS_READ, DENY_NONE).unwrap();
    assert_eq!(seqid_of(&s3), 3);
    // READ only now: a WRITE with the open stateid is NFS4ERR_OPENMODE (§18.32.3).
    let (_, res) = on_file(&mut a, &fh, |o| o.write(&s3, 0, b"x"));
    assert_eq!(third(&res, OP_WRITE).0, NFS4ERR_OPENMODE);
    assert!(open_file(&mut a, b"p", b"up", ACCESS_READ, DENY_NONE, false).is_ok());
    assert_eq!(close(&mut a, &fh, &s3), Ok(INVALID));
    assert_eq!(close(&mut a, &fh, &s3), Err(NFS4ERR_BAD_STATEID));
    let (_, res) = on_file(&mut a, &fh, |o| o.read(&s3, 0, 1));
    assert_eq!(third(&res, OP_READ).0, NFS4ERR_BAD_STATEID);
}

/// §18.16.3: OPEN of a directory is NFS4ERR_ISDIR, of a symbolic link
/// NFS4ERR_SYMLINK, of a missing name without create NFS4ERR_NOENT; CLAIM_FH opens
/// the current filehandle (§18.16.1); GUARDED4 on an existing name is
/// NFS4ERR_EXIST; EXCLUSIVE4_1 with the verifier of the create that made the file is
/// a replay and succeeds, with another verifier NFS4ERR_EXIST (§18.16.4).
#[test]
fn open_claims_types_and_exclusive_create() {
    let gw = Gw41::start("");
    let mut a = gw.client(b"conf-claims");
    let (st, _) = a.seq_run(|o| {
        o.putrootfh()
            .create_obj(b"dir", None)
            .putrootfh()
            .create_obj(b"link", Some(b"dir"))
    });
    assert_eq!(st, NFS4_OK);
    let open = |a: &mut Tcp41, name: &[u8]| {
        open_file(a, b"o", name, ACCESS_READ, DENY_NONE, false).map(|_| ())
    };
    assert_eq!(open(&mut a, b"dir"), Err(NFS4ERR_ISDIR));
    assert_eq!(open(&mut a, b"link"), Err(NFS4ERR_SYMLINK));
    assert_eq!(open(&mut a, b"missing"), Err(NFS4ERR_NOENT));
    // EXCLUSIVE4_1: create, replay, another verifier.
    let clientid = a.clientid;
    let excl = |a: &mut Tcp41, verf: &[u8; 8]| {
        let (_, res) = a.seq_run(|o| {
            o.putrootfh()
                .open(
                    clientid,
                    b"x",
                    ACCESS_BOTH | WANT_NO_DELEG,
                    DENY_NONE,
                    How::Exclusive41(*verf),
                    Claim::Null(b"excl"),
                )
                .getfh()
        });
        let mut r = after_seq(&res);
        expect_op(&mut r, OP_PUTROOTFH);
        match expect_op(&mut r, OP_OPEN) {
            NFS4_OK => {
                parse_open_ok(&mut r);
                expect_op(&mut r, OP_GETFH);
                Ok(r.opaque_var(128).unwrap().to_vec())
            }
            st => Err(st),
        }
    };
    let fh = excl(&mut a, b"verifie1").unwrap();
    assert_eq!(
        excl(&mut a, b"verifie1"),
        Ok(fh.clone()),
        "a replay of the create"
    );
    assert_eq!(excl(&mut a, b"verifie2"), Err(NFS4ERR_EXIST));
    let (_, res) = a.seq_run(|o| {
        o.putrootfh().open(
            clientid,
            b"x",
            ACCESS_READ | WANT_NO_DELEG,
            DENY_NONE,
            How::Guarded,
            Claim::Null(b"excl"),
        )
    });
    assert_eq!(res.status, NFS4ERR_EXIST);
    // CLAIM_FH of the file, and of the directory.
    let (_, res) = on_file(&mut a, &fh, |o| {
        o.open(
            clientid,
            b"y",
            ACCESS_READ | WANT_NO_DELEG,
            DENY_NONE,
            How::NoCreate,
            Claim::Fh,
        )
        .getfh()
    });
    let (st, mut r) = (res.status, after_seq(&res));
    assert_eq!(st, NFS4_OK);
    expect_op(&mut r, OP_PUTFH);
    expect_op(&mut r, OP_OPEN);
    assert_eq!(seqid_of(&parse_open_ok(&mut r).stateid), 1);
    expect_op(&mut r, OP_GETFH);
    assert_eq!(r.opaque_var(128).unwrap(), &fh[..]);
    let (_, res) = a.seq_run(|o| {
        o.putrootfh().lookup(b"dir").open(
            clientid,
            b"y",
            ACCESS_READ | WANT_NO_DELEG,
            DENY_NONE,
            How::NoCreate,
            Claim::Fh,
        )
    });
    assert_eq!(res.status, NFS4ERR_ISDIR);
}
