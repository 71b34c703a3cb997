//! OPEN's permission rules through `serve` (bytes in, bytes out) as a user that is
//! not root: no NFSv3 owner override (pjdfstest open/06.t), except for the file the
//! OPEN creates (POSIX open(O_CREAT|O_WRONLY, 0444)).

use super::*;
use crate::fs::{CreateMode, Owner, SetAttr};

const USER: u32 = 1000;

/// `call` with the AUTH_SYS identity USER:USER.
fn call_as_user(h: &H, ops: &[Op]) -> (Nfsstat4, Vec<u8>) {
    let mut buf = vec![0u8; 1 << 20];
    let c = Ctx {
        cred: Cred::Sys(AuthSys::new(USER, USER, &[])),
        ..ctx(h)
    };
    let args = compound_args(b"t", 1, ops);
    let mut w = XdrWriter::new(&mut buf);
    assert_eq!(serve(&c, &h.state, 1, &args, &mut w), Outcome::Done);
    let n = w.position();
    buf.truncate(n);
    (Nfsstat4::decode(&mut XdrReader::new(&buf)).unwrap(), buf)
}

/// OPEN4args, CLAIM_NULL `name`: `access` (1 read, 2 write), no delegation wanted,
/// and `create` = the createhow4 bytes after opentype OPEN4_CREATE (None: NOCREATE).
fn open_op(
    clientid: u64,
    owner: &'static [u8],
    access: u32,
    name: &'static [u8],
    create: Option<Vec<u8>>,
) -> Op {
    Box::new(move |w: &mut XdrWriter| {
        w.u32(OP_OPEN)?;
        w.u32(0)?;
        w.u32(access | 0x400)?; // OPEN4_SHARE_ACCESS_WANT_NO_DELEG
        w.u32(0)?;
        w.u64(clientid)?;
        w.opaque_var(owner)?;
        match &create {
            None => w.u32(0)?,
            Some(how) => {
                w.u32(1)?;
                w.opaque_fixed(how)?;
            }
        }
        w.u32(0)?; // CLAIM_NULL
        w.opaque_var(name)
    })
}

/// createhow4 GUARDED4 with fattr4 { mode }.
fn guarded_mode(mode: u32) -> Vec<u8> {
    let mut b = vec![0u8; 64];
    let mut w = XdrWriter::new(&mut b);
    w.u32(1).unwrap(); // GUARDED4
    attrs::put_bitmap(&mut w, &attrs::Bitmap::of(&[attrs::MODE])).unwrap();
    w.opaque_var(&mode.to_be_bytes()).unwrap();
    let n = w.position();
    b.truncate(n);
    b
}

/// The OPEN's status after SEQUENCE, PUTROOTFH, LOOKUP "d".
fn open_status(rep: &[u8]) -> Nfsstat4 {
    let v = first_statuses(rep, 3);
    assert_eq!(v.len(), 3, "{v:?}");
    let mut r = results(rep);
    r.skip(8 + 16 + 20 + 8 + 8).unwrap();
    assert_eq!(r.u32().unwrap(), OP_OPEN);
    Nfsstat4::decode(&mut r).unwrap()
}

#[test]
fn open_by_the_owner_checks_the_mode_but_not_for_the_creator() {
    let h = harness();
    let root = h.model.root(0).unwrap();
    let dir = h
        .model
        .mkdir(
            &root,
            b"d",
            &SetAttr {
                mode: Some(0o777),
                ..SetAttr::default()
            },
            Owner { uid: 0, gid: 0 },
        )
        .unwrap();
    for (name, mode) in [(&b"w477"[..], 0o477), (b"w177", 0o177), (b"w077", 0o077)] {
        h.model
            .create(
                &dir,
                name,
                &CreateMode::Guarded(SetAttr {
                    mode: Some(mode),
                    ..SetAttr::default()
                }),
                Owner {
                    uid: USER,
                    gid: USER,
                },
            )
            .unwrap();
    }
    let (clientid, sid) = session(&h, b"client-perm");
    // RECLAIM_COMPLETE: before it, non-reclaim OPENs get NFS4ERR_GRACE (§18.51.3).
    let done: Op = Box::new(|w: &mut XdrWriter| {
        w.u32(OP_RECLAIM_COMPLETE)?;
        w.bool(false)
    });
    assert_eq!(call(&h, &[sequence(sid, 1, 0), done]).0, NFS4_OK);
    let mut seq = 1;
    let mut open =
        |access: u32, owner: &'static [u8], name: &'static [u8], create: Option<Vec<u8>>| {
            seq += 1;
            let ops = [
                sequence(sid, seq, 0),
                op0(OP_PUTROOTFH),
                named(OP_LOOKUP, b"d"),
                open_op(clientid, owner, access, name, create),
            ];
            open_status(&call_as_user(&h, &ops).1)
        };
    for name in [&b"w477"[..], b"w177", b"w077"] {
        assert_eq!(open(2, b"o1", name, None), NFS4ERR_ACCESS, "{name:?}");
    }
    assert_eq!(open(1, b"o1", b"w077", None), NFS4ERR_ACCESS);
    assert_eq!(open(1, b"o1", b"w477", None), NFS4_OK);
    // The creator: GUARDED4, mode 0444, share WRITE.
    assert_eq!(open(2, b"o2", b"new", Some(guarded_mode(0o444))), NFS4_OK);
    let f = h.model.lookup(&dir, b"new").unwrap();
    let a = h.model.getattr(&f).unwrap();
    assert_eq!((a.mode & 0o777, a.uid), (0o444, USER));
    // Then an OPEN of it for writing is checked.
    assert_eq!(open(2, b"o3", b"new", None), NFS4ERR_ACCESS);
}
