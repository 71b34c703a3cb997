//! LINK (RFC 8881 §18.9): the saved filehandle's file gets a new name in the current
//! filehandle's directory. One file under every name: the same filehandle and fileid
//! (§5.8.2.10 unique_handles, §5.8.2.17 fileid), numlinks counting its names
//! (§5.8.2.20), its data through any name; a REMOVE takes one name (§18.25.4). The
//! refusals of §18.9.4: a directory source NFS4ERR_ISDIR, a taken name
//! NFS4ERR_EXIST, another file system NFS4ERR_XDEV, a current filehandle that is not
//! a directory NFS4ERR_NOTDIR, no saved filehandle NFS4ERR_NOFILEHANDLE. Filehandles
//! are persistent (§4.2.2, FH4_PERSISTENT): the same one across a restart.

use crate::nfs4_client::*;
use crate::{on_file, open_file, third, Gw41};
use nfs_wire::nfs4args::FILE_SYNC4;

/// fattr4 attribute numbers (RFC 8881 §5.8): bit n of bitmap word n / 32.
const LINK_SUPPORT: u32 = 5;
const FILEID: u32 = 20;
const NUMLINKS: u32 = 35;

/// A second export, nested at "/b": another file system for NFS4ERR_XDEV.
const EXPORT_B: &str = "[[exports]]\npath = \"/b\"\nclients = [\"0.0.0.0/0\"]\nsquash = \"none\"\n";

const DATA: &[u8] = b"one file, many names";

/// GETATTR fileid and numlinks of `fh`.
fn ids(c: &mut Tcp41, fh: &[u8]) -> (u64, u32) {
    let bits = [1 << FILEID, 1 << (NUMLINKS - 32)];
    let (st, res) = on_file(c, fh, |o| o.getattr(&bits));
    assert_eq!(st, NFS4_OK, "GETATTR");
    let (_, mut r) = third(&res, OP_GETATTR);
    let got = [r.u32().unwrap(), r.u32().unwrap(), r.u32().unwrap()];
    assert_eq!(got, [2, bits[0], bits[1]], "bitmap");
    assert_eq!(r.u32().unwrap(), 12, "fattr4 length");
    (r.u64().unwrap(), r.u32().unwrap())
}

/// SEQUENCE, PUTFH `file`, SAVEFH, PUTFH `dir`, LINK `name`: LINK's status. On
/// success the directory's change_info4 (§18.9.2) moved.
fn link(c: &mut Tcp41, file: &[u8], dir: &[u8], name: &[u8]) -> u32 {
    let (st, res) = c.seq_run(|o| o.putfh(file).savefh().putfh(dir).link(name));
    let mut r = after_seq(&res);
    assert_eq!(expect_op(&mut r, OP_PUTFH), NFS4_OK);
    assert_eq!(expect_op(&mut r, OP_SAVEFH), NFS4_OK);
    assert_eq!(expect_op(&mut r, OP_PUTFH), NFS4_OK);
    let lst = expect_op(&mut r, OP_LINK);
    assert_eq!(lst, st, "the COMPOUND's status is LINK's");
    if lst == NFS4_OK {
        let _atomic = r.bool().unwrap();
        let (before, after) = (r.u64().unwrap(), r.u64().unwrap());
        assert_ne!(before, after, "the directory changed");
    }
    lst
}

/// PUTROOTFH, LOOKUP each of `path`, GETFH: the handle, or the first failure.
fn lookup(c: &mut Tcp41, path: &[&str]) -> Result<Vec<u8>, u32> {
    let (st, res) = c.seq_run(|o| {
        path.iter()
            .fold(o.putrootfh(), |o, n| o.lookup(n.as_bytes()))
            .getfh()
    });
    if st != NFS4_OK {
        return Err(st);
    }
    let mut r = after_seq(&res);
    assert_eq!(expect_op(&mut r, OP_PUTROOTFH), NFS4_OK);
    for _ in path {
        assert_eq!(expect_op(&mut r, OP_LOOKUP), NFS4_OK);
    }
    assert_eq!(expect_op(&mut r, OP_GETFH), NFS4_OK);
    Ok(r.opaque_var(128).unwrap().to_vec())
}

/// REMOVE `name` from the directory `dir`: its status.
fn remove(c: &mut Tcp41, dir: &[u8], name: &[u8]) -> u32 {
    c.seq_run(|o| o.putfh(dir).remove(name)).0
}

/// READ of the whole file under the anonymous stateid.
fn read(c: &mut Tcp41, fh: &[u8]) -> Vec<u8> {
    let (st, res) = on_file(c, fh, |o| o.read(&ANONYMOUS, 0, 4096));
    assert_eq!(st, NFS4_OK, "READ");
    let (_, mut r) = third(&res, OP_READ);
    assert!(r.bool().unwrap(), "eof");
    r.opaque_var(4096).unwrap().to_vec()
}

/// A file "f" holding DATA, written FILE_SYNC and closed: its handle.
fn new_file(c: &mut Tcp41, name: &[u8]) -> Vec<u8> {
    let (sid, fh) = open_file(c, b"links", name, ACCESS_BOTH, DENY_NONE, true).unwrap();
    let (st, _) = on_file(c, &fh, |o| o.write_stable(&sid, 0, FILE_SYNC4, DATA));
    assert_eq!(st, NFS4_OK, "WRITE");
    let (st, _) = on_file(c, &fh, |o| o.close(&sid));
    assert_eq!(st, NFS4_OK, "CLOSE");
    fh
}

/// Two names in two directories, then a third: one filehandle and fileid under each,
/// numlinks 1 → 2 → 3, link_support true; each refusal leaves the count alone;
/// REMOVE of the first name keeps the file (same handle, its data) with one link
/// less; a restart changes none of it; the last REMOVE makes the handle stale.
#[test]
fn link_gives_one_file_many_names_and_keeps_its_handle() {
    let mut gw = Gw41::start_with("", EXPORT_B);
    let mut c = gw.client(b"conf-links");
    let root = lookup(&mut c, &[]).unwrap();
    let fh = new_file(&mut c, b"f");
    let (st, res) = c.seq_run(|o| o.putrootfh().create_obj(b"d", None).getfh());
    assert_eq!(st, NFS4_OK, "CREATE d");
    let mut r = after_seq(&res);
    expect_op(&mut r, OP_PUTROOTFH);
    expect_op(&mut r, OP_CREATE);
    let d = lookup(&mut c, &["d"]).unwrap();
    let (fileid, n) = ids(&mut c, &fh);
    assert_eq!(n, 1);

    let (st, res) = on_file(&mut c, &fh, |o| o.getattr(&[1 << LINK_SUPPORT]));
    assert_eq!(st, NFS4_OK);
    let (_, mut r) = third(&res, OP_GETATTR);
    r.skip(4 + 4 + 4).unwrap();
    assert!(r.bool().unwrap(), "link_support");

    assert_eq!(link(&mut c, &fh, &root, b"g"), NFS4_OK);
    assert_eq!(lookup(&mut c, &["g"]).unwrap(), fh, "the same filehandle");
    assert_eq!(ids(&mut c, &fh), (fileid, 2));
    assert_eq!(
        link(&mut c, &fh, &d, b"h"),
        NFS4_OK,
        "into another directory"
    );
    let h = lookup(&mut c, &["d", "h"]).unwrap();
    assert_eq!(h, fh);
    assert_eq!(ids(&mut c, &h), (fileid, 3));
    assert_eq!(read(&mut c, &h), DATA);

    // Refusals (§18.9.4), the count unchanged.
    assert_eq!(link(&mut c, &fh, &root, b"g"), NFS4ERR_EXIST);
    assert_eq!(link(&mut c, &fh, &root, b"d"), NFS4ERR_EXIST);
    assert_eq!(link(&mut c, &d, &root, b"d2"), NFS4ERR_ISDIR);
    assert_eq!(link(&mut c, &fh, &fh, b"x"), NFS4ERR_NOTDIR);
    let b = lookup(&mut c, &["b"]).unwrap();
    assert_eq!(link(&mut c, &fh, &b, b"x"), NFS4ERR_XDEV, "another export");
    let (st, _) = c.seq_run(|o| o.putfh(&root).link(b"x"));
    assert_eq!(st, NFS4ERR_NOFILEHANDLE, "no saved filehandle");
    assert_eq!(lookup(&mut c, &["x"]), Err(NFS4ERR_NOENT));
    assert_eq!(ids(&mut c, &fh), (fileid, 3));

    // One name goes: the file stays, through the handle and the other names.
    assert_eq!(remove(&mut c, &root, b"f"), NFS4_OK);
    assert_eq!(lookup(&mut c, &["f"]), Err(NFS4ERR_NOENT));
    assert_eq!(ids(&mut c, &fh), (fileid, 2));
    assert_eq!(read(&mut c, &fh), DATA);

    // A restart on the same directories: the same handle, names and count.
    drop(c);
    gw.restart();
    let mut c = gw.client(b"conf-links");
    assert_eq!(ids(&mut c, &fh), (fileid, 2));
    assert_eq!(lookup(&mut c, &["g"]).unwrap(), fh);
    assert_eq!(lookup(&mut c, &["d", "h"]).unwrap(), fh);
    assert_eq!(read(&mut c, &fh), DATA);

    // The last names go: the file with them.
    let root = lookup(&mut c, &[]).unwrap();
    assert_eq!(remove(&mut c, &root, b"g"), NFS4_OK);
    assert_eq!(ids(&mut c, &fh), (fileid, 1));
    assert_eq!(remove(&mut c, &d, b"h"), NFS4_OK);
    let (st, _) = on_file(&mut c, &fh, |o| o.getattr(&[1 << FILEID]));
    assert_eq!(st, NFS4ERR_STALE);
}
