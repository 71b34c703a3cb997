//! What a worker's NFSv4.1 stat costs the `fs` backend (docs/performance.md "Stat
//! and listing CPU"): PUTFH and LOOKUP read the attributes of the filehandle they
//! set (`FileModel::resolve_attr`, `lookup_attr`), and only the operation right
//! after may use them (`file_ops::cur_attr`): `PUTFH, LOOKUP, GETATTR` is one
//! `fstat` of the directory and one of the file, not four; an operation between
//! (a WRITE) makes the next GETATTR read again.

use super::*;
use crate::backend::fs::FsBackend;
use crate::fs::{CreateMode, Owner, SetAttr, Stable};

/// The size a GETATTR(SIZE) result carries, with `r` at that result.
fn size_result(r: &mut XdrReader) -> u64 {
    assert_eq!(r.u32().unwrap(), OP_GETATTR);
    assert_eq!(Nfsstat4::decode(r).unwrap(), NFS4_OK);
    let words = r.u32().unwrap();
    r.skip(4 * words as usize).unwrap();
    assert_eq!(r.u32().unwrap(), 8, "the size alone");
    r.u64().unwrap()
}

fn skip_ok(r: &mut XdrReader, op: u32) {
    assert_eq!(r.u32().unwrap(), op);
    assert_eq!(Nfsstat4::decode(r).unwrap(), NFS4_OK);
}

#[test]
fn putfh_lookup_getattr_reads_each_object_once_and_only_for_the_next_op() {
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("data");
    let h = harness_on(
        Arc::new(FsBackend::open(&data).unwrap()),
        vec![mk_export(0, "/", Access::Rw, &["127.0.0.0/8"])],
    );
    let m = &h.model;
    let owner = Owner { uid: 0, gid: 0 };
    let root = m.root(0).unwrap();
    let dir = m.mkdir(&root, b"top", &SetAttr::default(), owner).unwrap();
    let f = m
        .create(
            &dir,
            b"f",
            &CreateMode::Unchecked(SetAttr::default()),
            owner,
        )
        .unwrap();
    m.write(&f, 0, b"12345", Stable::FileSync).unwrap();
    let (dfh, ffh) = (
        m.handle(&dir).as_bytes().to_vec(),
        m.handle(&f).as_bytes().to_vec(),
    );
    let (_, sid) = session(&h, b"client-stat");
    let stat = |seq: u32| {
        let (st, rep) = call(
            &h,
            &[
                sequence(sid, seq, 0),
                putfh(dfh.clone()),
                named(OP_LOOKUP, b"f"),
                getattr(&[attrs::SIZE]),
            ],
        );
        assert_eq!(st, NFS4_OK, "{:?}", first_statuses(&rep, 4));
        let mut r = results(&rep);
        r.skip(8 + 16 + 20).unwrap();
        skip_ok(&mut r, OP_PUTFH);
        skip_ok(&mut r, OP_LOOKUP);
        size_result(&mut r)
    };
    assert_eq!(stat(1), 5);
    FsBackend::take_calls();
    assert_eq!(stat(2), 5);
    let calls = FsBackend::take_calls();
    assert_eq!(calls.get("fstat"), Some(&2), "directory + file: {calls:?}");
    assert_eq!(calls.values().sum::<u32>(), 2, "{calls:?}");
    // Behind the gateway's back: the next stat reads it.
    std::fs::write(data.join("top/f"), b"1234567890").unwrap();
    assert_eq!(stat(3), 10);
    // The Linux client's shape: a GETFH between passes the attributes on.
    FsBackend::take_calls();
    let (st, rep) = call(
        &h,
        &[
            sequence(sid, 4, 0),
            putfh(dfh.clone()),
            named(OP_LOOKUP, b"f"),
            op0(OP_GETFH),
            getattr(&[attrs::SIZE]),
        ],
    );
    assert_eq!(st, NFS4_OK);
    let calls = FsBackend::take_calls();
    assert_eq!(calls.get("fstat"), Some(&2), "{calls:?}");
    let mut r = results(&rep);
    r.skip(8 + 16 + 20).unwrap();
    skip_ok(&mut r, OP_PUTFH);
    skip_ok(&mut r, OP_LOOKUP);
    skip_ok(&mut r, OP_GETFH);
    assert_eq!(r.opaque_var(128).unwrap(), &ffh[..]);
    assert_eq!(size_result(&mut r), 10);

    // PUTFH, WRITE, GETATTR: PUTFH's attributes are not the GETATTR's to take.
    let (st, rep) = call(
        &h,
        &[
            sequence(sid, 5, 0),
            putfh(ffh.clone()),
            write_op(b"hello world, longer"),
            getattr(&[attrs::SIZE]),
        ],
    );
    assert_eq!(st, NFS4_OK);
    let mut r = results(&rep);
    r.skip(8 + 16 + 20).unwrap();
    skip_ok(&mut r, OP_PUTFH);
    skip_ok(&mut r, OP_WRITE);
    r.skip(4 + 4 + 8).unwrap();
    assert_eq!(size_result(&mut r), 19);
    // PUTFH, GETATTR right after: one fstat.
    FsBackend::take_calls();
    let (st, rep) = call(
        &h,
        &[sequence(sid, 6, 0), putfh(ffh), getattr(&[attrs::SIZE])],
    );
    assert_eq!(st, NFS4_OK);
    let calls = FsBackend::take_calls();
    assert_eq!(calls.get("fstat"), Some(&1), "{calls:?}");
    let mut r = results(&rep);
    r.skip(8 + 16 + 20).unwrap();
    skip_ok(&mut r, OP_PUTFH);
    assert_eq!(size_result(&mut r), 19);
}
