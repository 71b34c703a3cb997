//! NFSv4 permission rules from bytes over the file model: OPEN checks the mode bits
//! of its share access (RFC 8881 §18.16.3) with no NFSv3 owner override, except for
//! the file this OPEN created; READ, WRITE and SETATTR(size) under the open's stateid
//! do not check again, under a special stateid they check the mode bits.

use super::*;
use crate::nfs4::file_ops::{read, setattr, write};

const USER: u32 = 1000;

/// A regular file `name` owned by USER with `mode`, in a directory USER may write.
fn user_file(h: &H, name: &[u8], mode: u32) -> Node {
    let dir = h.model.root(0).unwrap();
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
        .unwrap()
}

fn chmod(h: &H, f: &Node, mode: u32) {
    let set = SetAttr {
        mode: Some(mode),
        ..SetAttr::default()
    };
    h.model.setattr(f, &set).unwrap();
}

/// OPEN CLAIM_FH of `f` with `access` (1 read, 2 write, 3 both): status, stateid.
fn open_fh(c: &mut Compound, f: &Node, access: u32, owner: &[u8]) -> (Nfsstat4, Stateid) {
    put(c, f);
    let (st, r) = call(
        c,
        open,
        &open_head(access | NO_DELEG, 0, owner).u32(0).u32(4),
    );
    let sid = if st == NFS4_OK {
        sid_at(&r, 4)
    } else {
        Stateid::INVALID
    };
    (st, sid)
}

fn write_with(c: &mut Compound, f: &Node, sid: &Stateid) -> Nfsstat4 {
    put(c, f);
    let b = B::default().sid(sid).u64(0).u32(2).opaque(b"x");
    call(c, write, &b).0
}

fn read_with(c: &mut Compound, f: &Node, sid: &Stateid) -> Nfsstat4 {
    put(c, f);
    let b = B::default().sid(sid).u64(0).u32(10);
    call(c, read, &b).0
}

fn truncate_with(c: &mut Compound, f: &Node, sid: &Stateid) -> Nfsstat4 {
    put(c, f);
    call(c, setattr, &size_attr(B::default().sid(sid), 0)).0
}

/// pjdfstest open/06.t over NFSv4.1: the owner of 0477, 0177 or 0077 may not open
/// for writing; of 0277 or 0077 not for reading (0377 and 0177 have x: a read-only
/// OPEN is how a client execs, knfsd's NFSD_MAY_READ_IF_EXEC; ACCESS4 still denies
/// READ, which the Linux client checks itself); read+write needs r and w.
#[test]
fn open_checks_the_mode_bits_without_owner_override() {
    let h = harness();
    let user = ctx(&h, USER);
    let mut c = compound(&user, &h.state, 5);
    let cases: [(u32, [Nfsstat4; 3]); 6] = [
        (0o477, [NFS4_OK, NFS4ERR_ACCESS, NFS4ERR_ACCESS]),
        (0o177, [NFS4_OK, NFS4ERR_ACCESS, NFS4ERR_ACCESS]),
        (0o077, [NFS4ERR_ACCESS, NFS4ERR_ACCESS, NFS4ERR_ACCESS]),
        (0o377, [NFS4_OK, NFS4_OK, NFS4ERR_ACCESS]),
        (0o277, [NFS4ERR_ACCESS, NFS4_OK, NFS4ERR_ACCESS]),
        (0o677, [NFS4_OK, NFS4_OK, NFS4_OK]),
    ];
    for (mode, want) in cases {
        let f = user_file(&h, format!("f{mode:o}").as_bytes(), mode);
        for (access, want) in [1, 2, 3].into_iter().zip(want) {
            let got = open_fh(&mut c, &f, access, format!("o{mode}{access}").as_bytes()).0;
            assert_eq!(got, want, "mode {mode:o} access {access}");
        }
    }
}

/// POSIX open(O_CREAT|O_WRONLY, 0444) succeeds for its creator: the OPEN that
/// creates the file is not checked against the mode it gave it; the next OPEN is,
/// and so is an UNCHECKED4 create that finds the file.
#[test]
fn the_creator_opens_what_it_made_whatever_the_mode() {
    let h = harness();
    let admin = ctx(&h, 0);
    let mut c0 = compound(&admin, &h.state, 4);
    let root_dir = root(&mut c0);
    let dir = h
        .model
        .mkdir(
            &root_dir,
            b"d",
            &SetAttr {
                mode: Some(0o777),
                ..SetAttr::default()
            },
            Owner { uid: 0, gid: 0 },
        )
        .unwrap();
    let user = ctx(&h, USER);
    let mut c = compound(&user, &h.state, 5);
    put(&mut c, &dir);
    let how = mode_attr(B::default().u32(1), 0o444);
    let b = open_head(2 | NO_DELEG, 0, b"w")
        .u32(1)
        .raw(&how.0)
        .u32(0)
        .opaque(b"ro");
    let (st, r) = call(&mut c, open, &b);
    assert_eq!(st, NFS4_OK, "GUARDED create, mode 0444, share WRITE");
    let sid = sid_at(&r, 4);
    let Some(CurrentFh::File { node: f, .. }) = c.cfh.clone() else {
        panic!("no file")
    };
    assert_eq!(h.model.getattr(&f).unwrap().mode & 0o777, 0o444);
    // The open it made writes.
    assert_eq!(write_with(&mut c, &f, &sid), NFS4_OK);
    // Another OPEN of the existing file for writing is checked.
    assert_eq!(open_fh(&mut c, &f, 2, b"w2").0, NFS4ERR_ACCESS);
    // UNCHECKED4 finding the file: not created by this OPEN, checked.
    put(&mut c, &dir);
    let how = mode_attr(B::default().u32(0), 0o444);
    let b = open_head(2 | NO_DELEG, 0, b"w3")
        .u32(1)
        .raw(&how.0)
        .u32(0)
        .opaque(b"ro");
    assert_eq!(call(&mut c, open, &b).0, NFS4ERR_ACCESS);
}

/// I/O under an open stateid is not checked again (a chmod after the OPEN does not
/// revoke it, as for a local descriptor); under the anonymous stateid it is, with no
/// owner override; a READ through an open for WRITE only is checked.
#[test]
fn io_checks_the_mode_only_without_an_open() {
    let h = harness();
    let user = ctx(&h, USER);
    let mut c = compound(&user, &h.state, 5);
    let f = user_file(&h, b"f", 0o644);
    let (st, rw) = open_fh(&mut c, &f, 3, b"rw");
    assert_eq!(st, NFS4_OK);
    let (st, wo) = open_fh(&mut c, &f, 2, b"wo");
    assert_eq!(st, NFS4_OK);
    chmod(&h, &f, 0o000);
    let anon = Stateid::ANONYMOUS;
    assert_eq!(write_with(&mut c, &f, &rw), NFS4_OK);
    assert_eq!(read_with(&mut c, &f, &rw), NFS4_OK);
    assert_eq!(write_with(&mut c, &f, &wo), NFS4_OK);
    assert_eq!(read_with(&mut c, &f, &wo), NFS4ERR_ACCESS);
    assert_eq!(write_with(&mut c, &f, &anon), NFS4ERR_ACCESS);
    assert_eq!(read_with(&mut c, &f, &anon), NFS4ERR_ACCESS);
    assert_eq!(read_with(&mut c, &f, &Stateid::BYPASS), NFS4ERR_ACCESS);
    chmod(&h, &f, 0o600);
    assert_eq!(write_with(&mut c, &f, &anon), NFS4_OK);
    assert_eq!(read_with(&mut c, &f, &anon), NFS4_OK);
    // Someone else with the anonymous stateid: the mode bits of "other".
    let other = ctx(&h, 2000);
    let mut c2 = compound(&other, &h.state, 6);
    assert_eq!(read_with(&mut c2, &f, &anon), NFS4ERR_ACCESS);
}

/// SETATTR(size): ftruncate(2) of an open for writing needs nothing more; truncate(2)
/// (the anonymous stateid) needs w, for the owner too (knfsd; POSIX truncate).
#[test]
fn truncate_needs_write_permission_or_a_write_open() {
    let h = harness();
    let user = ctx(&h, USER);
    let mut c = compound(&user, &h.state, 5);
    let f = user_file(&h, b"f", 0o644);
    let (st, w) = open_fh(&mut c, &f, 2, b"w");
    assert_eq!(st, NFS4_OK);
    chmod(&h, &f, 0o444);
    assert_eq!(truncate_with(&mut c, &f, &w), NFS4_OK);
    assert_eq!(
        truncate_with(&mut c, &f, &Stateid::ANONYMOUS),
        NFS4ERR_ACCESS
    );
    chmod(&h, &f, 0o644);
    assert_eq!(truncate_with(&mut c, &f, &Stateid::ANONYMOUS), NFS4_OK);
    // chmod by the owner needs no write permission at all.
    chmod(&h, &f, 0o444);
    put(&mut c, &f);
    let b = mode_attr(B::default().sid(&Stateid::ANONYMOUS), 0o400);
    assert_eq!(call(&mut c, setattr, &b).0, NFS4_OK);
}
