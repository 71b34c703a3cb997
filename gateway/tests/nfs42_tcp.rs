//! NFSv4.2 (RFC 7862, RFC 8276) through the real server over TCP, written from the
//! RFCs: minor version 2 is served (and 3 is not); its operations are illegal in a
//! minor-version-1 COMPOUND; SEEK, READ_PLUS, ALLOCATE, DEALLOCATE, COPY, CLONE and
//! the extended attribute operations on the memory backend (its sparse map has real
//! holes); the 4.2 attributes and ACCESS bits appear in 4.2 only; what is not offered
//! answers NFS4ERR_NOTSUPP.

mod common;
#[path = "common/nfs4_client.rs"]
mod nfs4_client;

use common::v4::*;
use common::v42::*;
use common::*;
use engine::xdr::XdrReader;
use nfs_wire::v4call::Ops;
use nfs_wire::v4op::CopyRange;

fn gateway() -> Gw {
    Gw::start(&GwOpts {
        rdma: false,
        ..Default::default()
    })
}

/// A READ_PLUS segment: data at an offset, or a hole of a length.
#[derive(Debug, PartialEq, Eq)]
enum Seg {
    Data(u64, Vec<u8>),
    Hole(u64, u64),
}

fn read_plus(s: &mut S, fh: &[u8], off: u64, count: u32) -> (bool, Vec<Seg>) {
    let (st, rest) = s.on(fh, Ops::new().read_plus(&ANON, off, count));
    assert_eq!(st, NFS4_OK);
    let mut r = XdrReader::new(&rest);
    let eof = r.bool().unwrap();
    let n = r.u32().unwrap();
    let segs = (0..n)
        .map(|_| match r.u32().unwrap() {
            0 => Seg::Data(r.u64().unwrap(), r.opaque_var(1 << 20).unwrap().to_vec()),
            1 => Seg::Hole(r.u64().unwrap(), r.u64().unwrap()),
            k => panic!("content {k}"),
        })
        .collect();
    (eof, segs)
}

#[test]
fn minor_version_2_is_served_and_its_operations_only_there() {
    let gw = gateway();
    let mut s = S::new(&gw, 2);
    let (sid, fh) = s.create(b"f");
    s.write(&fh, &sid, 0, b"abc");
    assert_eq!(s.seek(&fh, 0, 0), (NFS4_OK, false, 0));
    // Minor version 3 does not exist yet (RFC 8881 §16.2.3: no results).
    let mut three = S {
        minor: 3,
        ..S::new(&gw, 2)
    };
    let rep = three.call(&Ops::new().putrootfh());
    assert_eq!((rep.status, rep.r.len()), (NFS4ERR_MINOR_VERS_MISMATCH, 0));
    // In minor version 1, SEEK is an unknown operation (RFC 7862 §11.1).
    let mut one = S::new(&gw, 1);
    let rep = one.seq_call(Ops::new().putfh(&fh).seek(&ANON, 0, 0));
    let mut r = XdrReader::new(&rep.r);
    r.skip(8).unwrap();
    assert_eq!(
        (r.u32().unwrap(), r.u32().unwrap()),
        (OP_ILLEGAL, NFS4ERR_OP_ILLEGAL)
    );
    assert_eq!(rep.status, NFS4ERR_OP_ILLEGAL);
    // Offered: OFFLOAD_STATUS, which names no copy here (RFC 7862 §15.9.3).
    let (st, _) = s.on(&fh, Ops::new().offload(OP_OFFLOAD_STATUS, &[7; 16]));
    assert_eq!(st, 10025, "NFS4ERR_BAD_STATEID");
    // Not offered: COPY_NOTIFY (inter-server copies) and WRITE_SAME.
    let notify = Ops::new().copy_notify(&ANON, b"elsewhere");
    let (st, _) = s.on(&fh, notify);
    assert_eq!(st, NFS4ERR_NOTSUPP);
}

#[test]
fn the_42_attributes_and_access_bits_are_in_42_only() {
    let gw = gateway();
    for (minor, want42) in [(1, false), (2, true)] {
        let mut s = S::new(&gw, minor);
        let (_, fh) = s.create(format!("a{minor}").as_bytes());
        // supported_attrs (bit 0): clone_blksize 77 and xattr_support 82 are in
        // the third word.
        let (st, rest) = s.on(&fh, Ops::new().getattr(&[1]));
        assert_eq!(st, NFS4_OK);
        let mut r = XdrReader::new(&rest);
        let n = r.u32().unwrap();
        r.skip(4 * n as usize + 4).unwrap();
        let words: Vec<u32> = (0..r.u32().unwrap()).map(|_| r.u32().unwrap()).collect();
        let third = words.get(2).copied().unwrap_or(0);
        let has = |bit: u32| third & (1 << (bit - 64)) != 0;
        assert_eq!((has(77), has(82)), (want42, want42), "minor {minor}");
        // ACCESS of READ|MODIFY|XAREAD|XAWRITE|XALIST.
        let (st, rest) = s.on(
            &fh,
            Ops::new().raw(|w| {
                w.u32(3)?;
                w.u32(0x1 | 0x4 | 0x40 | 0x80 | 0x100)
            }),
        );
        assert_eq!(st, NFS4_OK);
        let mut r = XdrReader::new(&rest);
        let (supported, access) = (r.u32().unwrap(), r.u32().unwrap());
        let xa = if want42 { 0x1c0 } else { 0 };
        assert_eq!((supported, access), (0x5 | xa, 0x5 | xa), "minor {minor}");
    }
}

#[test]
fn seek_and_read_plus_see_the_holes() {
    let gw = gateway();
    let mut s = S::new(&gw, 2);
    let (sid, fh) = s.create(b"sparse");
    let a = vec![b'a'; 4096];
    let b = vec![b'b'; 4096];
    s.write(&fh, &sid, 0, &a);
    s.write(&fh, &sid, 1 << 19, &b);
    let size = (1 << 19) + 4096;
    // RFC 7862 §15.11: the first data, the first hole, the virtual hole at the end.
    assert_eq!(s.seek(&fh, 0, 0), (NFS4_OK, false, 0));
    assert_eq!(s.seek(&fh, 0, 1), (NFS4_OK, false, 4096));
    assert_eq!(s.seek(&fh, 4096, 0), (NFS4_OK, false, 1 << 19));
    // At the end: eof (knfsd's reading too: the offset found is the size).
    assert_eq!(s.seek(&fh, 1 << 19, 1), (NFS4_OK, true, size));
    assert_eq!(s.seek(&fh, size, 0).0, NFS4ERR_NXIO);
    assert_eq!(s.seek(&fh, 0, 7).0, NFS4ERR_UNION_NOTSUPP);
    // READ_PLUS: data, hole, data, and the end of the file.
    let (eof, segs) = read_plus(&mut s, &fh, 0, 1 << 20);
    assert!(eof);
    assert_eq!(
        segs,
        vec![
            Seg::Data(0, a.clone()),
            Seg::Hole(4096, (1 << 19) - 4096),
            Seg::Data(1 << 19, b.clone())
        ]
    );
    // A range inside: clipped to it, not at the end.
    let (eof, segs) = read_plus(&mut s, &fh, 4000, 200);
    assert!(!eof);
    assert_eq!(
        segs,
        vec![Seg::Data(4000, a[..96].to_vec()), Seg::Hole(4096, 104)]
    );
    // Past the end: nothing, at the end.
    let (eof, segs) = read_plus(&mut s, &fh, size + 10, 100);
    assert!(eof && segs.is_empty());
}

#[test]
fn allocate_extends_and_deallocate_punches_zeros() {
    let gw = gateway();
    let mut s = S::new(&gw, 2);
    let (sid, fh) = s.create(b"space");
    s.write(&fh, &sid, 0, &[7u8; 8192]);
    let (st, _) = s.on(&fh, Ops::new().allocate(&sid, 8192, 8192));
    assert_eq!(st, NFS4_OK);
    assert_eq!(s.size(&fh), 16384, "ALLOCATE past the end extends");
    let (st, _) = s.on(&fh, Ops::new().deallocate(&sid, 4096, 4096));
    assert_eq!(st, NFS4_OK);
    assert_eq!(s.size(&fh), 16384, "DEALLOCATE keeps the size");
    let data = s.read(&fh, 0, 16384);
    assert_eq!(&data[..4096], &[7u8; 4096][..]);
    assert_eq!(&data[4096..8192], &[0u8; 4096][..]);
    assert_eq!(&data[8192..], &[0u8; 8192][..]);
    let (st, _) = s.on(&fh, Ops::new().allocate(&sid, 0, 0));
    assert_eq!(st, NFS4ERR_INVAL, "a zero length (RFC 7862 §15.1.3)");
}

#[test]
fn copy_and_clone_move_the_bytes_inside_the_server() {
    let gw = gateway();
    let mut s = S::new(&gw, 2);
    let (ssid, src) = s.create(b"src");
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
    s.write(&src, &ssid, 0, &data);
    let (dsid, dst) = s.create(b"dst");
    let range = CopyRange {
        src_stateid: ssid,
        dst_stateid: dsid,
        src_offset: 0,
        dst_offset: 0,
        count: 0,
    };
    // COPY, asynchronous allowed: done synchronously, to the source's end.
    let rep = s.seq_call(
        Ops::new()
            .putfh(&src)
            .savefh()
            .putfh(&dst)
            .copy(&range, false),
    );
    assert_eq!(rep.status, NFS4_OK);
    let mut r = XdrReader::new(&rep.r);
    r.skip(8 * 3).unwrap();
    assert_eq!((r.u32().unwrap(), r.u32().unwrap()), (OP_COPY, NFS4_OK));
    assert_eq!(r.u32().unwrap(), 0, "no callback id: done");
    assert_eq!(r.u64().unwrap(), data.len() as u64);
    assert_eq!(r.u32().unwrap(), 2, "FILE_SYNC4");
    r.skip(8).unwrap();
    assert_eq!((r.bool().unwrap(), r.bool().unwrap()), (true, true));
    assert_eq!(s.read(&dst, 0, 1 << 20), data);
    // A copy onto an overlapping range of the same file (RFC 7862 §15.2.3).
    let same = CopyRange {
        dst_stateid: ssid,
        dst_offset: 10,
        count: 100,
        ..range
    };
    let rep = s.seq_call(
        Ops::new()
            .putfh(&src)
            .savefh()
            .putfh(&src)
            .copy(&same, true),
    );
    assert_eq!(rep.status, NFS4ERR_INVAL);
    // An inter-server copy (a source server given) is not offered.
    let rep = s.seq_call(
        Ops::new()
            .putfh(&src)
            .savefh()
            .putfh(&dst)
            .copy_from(&range, &[b"elsewhere"]),
    );
    assert_eq!(rep.status, NFS4ERR_NOTSUPP);
    // CLONE of the first 8 KiB into a third file.
    let (csid, cl) = s.create(b"clone");
    let c = CopyRange {
        dst_stateid: csid,
        count: 8192,
        ..range
    };
    let rep = s.seq_call(Ops::new().putfh(&src).savefh().putfh(&cl).clone_range(&c));
    assert_eq!(rep.status, NFS4_OK);
    assert_eq!(s.read(&cl, 0, 1 << 20), data[..8192]);
}

#[test]
fn extended_attributes_round_trip_with_the_rfc_errors() {
    let gw = gateway();
    let mut s = S::new(&gw, 2);
    let (_, fh) = s.create(b"x");
    let st = |s: &mut S, op: Ops| s.on(&fh, op).0;
    assert_eq!(st(&mut s, Ops::new().setxattr(1, b"k", b"v1")), NFS4_OK);
    assert_eq!(
        st(&mut s, Ops::new().setxattr(1, b"k", b"v2")),
        NFS4ERR_EXIST
    );
    assert_eq!(
        st(&mut s, Ops::new().setxattr(2, b"nope", b"v")),
        NFS4ERR_NOXATTR
    );
    assert_eq!(st(&mut s, Ops::new().setxattr(2, b"k", b"v3")), NFS4_OK);
    assert_eq!(st(&mut s, Ops::new().setxattr(0, b"j", b"")), NFS4_OK);
    assert_eq!(
        st(&mut s, Ops::new().setxattr(9, b"k", b"v")),
        NFS4ERR_INVAL
    );
    let (st0, rest) = s.on(&fh, Ops::new().getxattr(b"k"));
    assert_eq!(st0, NFS4_OK);
    assert_eq!(XdrReader::new(&rest).opaque_var(100).unwrap(), b"v3");
    // LISTXATTRS: every name, sorted, then the end.
    let (st0, rest) = s.on(&fh, Ops::new().listxattrs(0, 4096));
    assert_eq!(st0, NFS4_OK);
    let mut r = XdrReader::new(&rest);
    r.u64().unwrap();
    let names: Vec<Vec<u8>> = (0..r.u32().unwrap())
        .map(|_| r.opaque_var(255).unwrap().to_vec())
        .collect();
    assert_eq!(names, vec![b"j".to_vec(), b"k".to_vec()]);
    assert!(r.bool().unwrap());
    assert_eq!(st(&mut s, Ops::new().removexattr(b"k")), NFS4_OK);
    assert_eq!(st(&mut s, Ops::new().getxattr(b"k")), NFS4ERR_NOXATTR);
    assert_eq!(st(&mut s, Ops::new().removexattr(b"k")), NFS4ERR_NOXATTR);
    // Limits: a name past 255 bytes, a value past 64 KiB.
    let long = vec![b'n'; 256];
    assert_eq!(
        st(&mut s, Ops::new().setxattr(0, &long, b"v")),
        NFS4ERR_NAMETOOLONG
    );
    let big = vec![0u8; 65537];
    assert_eq!(
        st(&mut s, Ops::new().setxattr(0, b"big", &big)),
        NFS4ERR_XATTR2BIG
    );
    let (rp, _) = s.on(&fh, Ops::new().read_plus(&ANON, 0, 1));
    assert_eq!(rp, NFS4_OK, "{OP_READ_PLUS} on an empty file");
}

/// COPY4res's write_response4 and requirements, after OP_COPY and its status:
/// (callback id, count, committed, synchronous).
fn copy_res(r: &mut XdrReader) -> (Option<[u8; 16]>, u64, u32, bool) {
    let id = match r.u32().unwrap() {
        0 => None,
        1 => Some(r.opaque_fixed(16).unwrap().try_into().unwrap()),
        n => panic!("wr_callback_id of {n}"),
    };
    let (count, committed) = (r.u64().unwrap(), r.u32().unwrap());
    r.skip(8).unwrap();
    let (_consecutive, synchronous) = (r.bool().unwrap(), r.bool().unwrap());
    (id, count, committed, synchronous)
}

/// An asynchronous COPY (RFC 7862 §15.2.3): offered by a client whose back channel
/// answers, 3 MiB are copied after the reply, which names the copy by a stateid;
/// OFFLOAD_STATUS (§15.9) reports it finished, CB_OFFLOAD (§16.1) arrives on the back
/// channel in a minor-version-2 CB_COMPOUND with that stateid, the destination's
/// handle and the count; the bytes are there. OFFLOAD_CANCEL (§15.8) forgets a copy
/// once and names no other client's. A client without a back channel gets its copy
/// done synchronously.
#[test]
fn an_asynchronous_copy_reports_by_cb_offload_on_the_back_channel() {
    use nfs4_client::{expect_op, skip_sequence_ok, Tcp41, CONN_BACK_CHAN, NFS4ERR_BAD_STATEID};
    use std::time::{Duration, Instant};
    let gw = gateway();
    let mut s = S::new(&gw, 2);
    let (ssid, src) = s.create(b"big-src");
    let data: Vec<u8> = (0..3u32 << 20).map(|i| (i % 251) as u8).collect();
    for (i, part) in data.chunks(64 << 10).enumerate() {
        s.write(&src, &ssid, (i as u64) << 16, part);
    }
    let (_, dst) = s.create(b"big-dst");
    let (_, dst2) = s.create(b"big-dst2");
    let range = CopyRange {
        src_stateid: ANON,
        dst_stateid: ANON,
        src_offset: 0,
        dst_offset: 0,
        count: 0,
    };
    let copy = |fh: &[u8]| {
        Ops::new()
            .putfh(&src)
            .savefh()
            .putfh(fh)
            .copy(&range, false)
    };
    // A reader at the result of the last of `ops` (after SEQUENCE, each NFS4_OK).
    let after = |res: &nfs_wire::v4reply::Res, ops: &[u32]| -> Vec<u8> {
        let mut r = res.reader();
        assert_eq!(expect_op(&mut r, OP_SEQUENCE), NFS4_OK);
        skip_sequence_ok(&mut r);
        for &op in ops {
            assert_eq!(expect_op(&mut r, op), NFS4_OK, "op {op}");
        }
        r.rest().to_vec()
    };
    // No back channel: the same offer is copied at once.
    let rep = s.seq_call(copy(&dst2));
    let mut r = XdrReader::new(&rep.r);
    r.skip(8 * 3).unwrap();
    assert_eq!((r.u32().unwrap(), r.u32().unwrap()), (OP_COPY, NFS4_OK));
    assert_eq!(copy_res(&mut r), (None, 3 << 20, 2, true));

    let mut c = Tcp41::connect(gw.tcp_addr());
    c.minor = 2;
    c.session(b"offload-client", CONN_BACK_CHAN);
    let (st, _) = c.seq_run(|o| o.reclaim_complete());
    assert_eq!(st, NFS4_OK);
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.cb_nulls == 0 {
        assert!(c.next_callback(Duration::from_millis(50)).is_none());
        assert!(Instant::now() < deadline, "no CB_NULL probe");
    }
    // The probe's answer reaches the callback thread just after: until then a copy
    // is synchronous. Offer again until it is not.
    let offer = |c: &mut Tcp41| loop {
        let (_, res) = c.seq_run(|o| o.append(copy(&dst)));
        let rest = after(&res, &[OP_PUTFH, OP_SAVEFH, OP_PUTFH, OP_COPY]);
        match copy_res(&mut XdrReader::new(&rest)) {
            (Some(id), 0, _, false) => break id,
            (None, n, 2, true) => assert_eq!(n, 3 << 20),
            other => panic!("COPY answered {other:?}"),
        }
        assert!(Instant::now() < deadline, "never asynchronous");
        std::thread::sleep(Duration::from_millis(50));
    };
    let id = offer(&mut c);
    let cb = c
        .next_callback(Duration::from_secs(10))
        .expect("CB_OFFLOAD");
    // Before it is answered, OFFLOAD_STATUS knows the copy finished.
    let (st, res) = c.seq_run(|o| o.putfh(&dst).offload(OP_OFFLOAD_STATUS, &id));
    assert_eq!(st, NFS4_OK);
    let rest = after(&res, &[OP_PUTFH, OP_OFFLOAD_STATUS]);
    let mut r = XdrReader::new(&rest);
    assert_eq!(
        (r.u64().unwrap(), r.u32().unwrap(), r.u32().unwrap()),
        (3 << 20, 1, NFS4_OK)
    );
    let told = c.answer_offload(&cb);
    assert_eq!(told.stateid, id, "CB_OFFLOAD names the copy");
    assert_eq!(told.session, c.sid, "on this session's back channel");
    assert_eq!(told.fh, dst, "and the destination");
    assert_eq!(
        (told.status, told.count, told.committed),
        (NFS4_OK, 3 << 20, 2)
    );
    let k = 64 << 10;
    assert_eq!(s.read(&dst, 0, k as u32), data[..k]);
    assert_eq!(
        s.read(&dst, (3 << 20) - k as u64, k as u32),
        data[(3 << 20) - k..]
    );
    assert_eq!(
        s.read(&dst2, 1 << 20, k as u32),
        data[1 << 20..(1 << 20) + k]
    );
    // OFFLOAD_CANCEL: another client cannot name the copy; once forgets it.
    let id2 = offer(&mut c);
    let (st, _) = s.on(&dst, Ops::new().offload(OP_OFFLOAD_CANCEL, &id2));
    assert_eq!(st, NFS4ERR_BAD_STATEID, "not the other client's copy");
    let (st, _) = c.seq_run(|o| o.putfh(&dst).offload(OP_OFFLOAD_CANCEL, &id2));
    assert_eq!(st, NFS4_OK);
    let (st, _) = c.seq_run(|o| o.putfh(&dst).offload(OP_OFFLOAD_CANCEL, &id2));
    assert_eq!(st, NFS4ERR_BAD_STATEID, "forgotten");
}
