use super::*;
use crate::mount3::MOUNTPROC3_MNT;

fn encoded(call: &Call) -> Vec<u8> {
    let mut buf = vec![0u8; 4096];
    let n = encode(&mut buf, 0x1234, &Cred::None, call).unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn every_call_decodes_as_a_call_to_its_program_and_procedure() {
    let fh = [7u8; 32];
    let calls = [
        (Call::Null, NFSPROC3_NULL),
        (Call::Getattr(&fh), NFSPROC3_GETATTR),
        (Call::Lookup(&fh, "a"), NFSPROC3_LOOKUP),
        (Call::Read(&fh, 1 << 40, 4096), NFSPROC3_READ),
        (Call::Write(&fh, 8, b"abc"), NFSPROC3_WRITE),
        (Call::Create(&fh, "new"), NFSPROC3_CREATE),
        (Call::Remove(&fh, "old"), NFSPROC3_REMOVE),
        (Call::Readdirplus(&fh), NFSPROC3_READDIRPLUS),
        (Call::Commit(&fh), NFSPROC3_COMMIT),
    ];
    for (call, proc_) in calls {
        let b = encoded(&call);
        let (h, _) = rpc::decode_call(&b[4..]).unwrap();
        assert_eq!((h.prog, h.vers, h.proc_), (NFS_PROGRAM, NFS_V3, proc_));
    }
    let b = encoded(&Call::Mount("/export"));
    let (h, off) = rpc::decode_call(&b[4..]).unwrap();
    assert_eq!(
        (h.prog, h.vers, h.proc_),
        (MOUNT_PROGRAM, MOUNT_V3, MOUNTPROC3_MNT)
    );
    assert_eq!(
        XdrReader::new(&b[4 + off..]).string(64),
        Ok(&b"/export"[..])
    );
}

#[test]
fn calls_encode_after_room_for_a_record_mark() {
    let mut buf = vec![0u8; 4096];
    let cred = Cred::None;
    let fh = [7u8; 32];
    let n = encode(&mut buf, 0x1234, &cred, &Call::Readdirplus(&fh)).unwrap();
    // xid, CALL, rpcvers 2, prog, vers 3, proc 17
    assert_eq!(&buf[4..8], &0x1234u32.to_be_bytes());
    assert_eq!(&buf[16..20], &NFS_PROGRAM.to_be_bytes());
    assert_eq!(&buf[24..28], &17u32.to_be_bytes());
    // header (6 words + 2 auth pairs) + fh (4 + 32) + cookie 8 + verf 8 + 2 counts
    assert_eq!(n - 4, 40 + 36 + 8 + 8 + 8);
    let n = encode(&mut buf, 1, &cred, &Call::Remove(&fh, "abc")).unwrap();
    assert_eq!(n - 4, 40 + 36 + 8);
}

#[test]
fn a_call_larger_than_the_buffer_is_an_error() {
    let mut buf = vec![0u8; 64];
    let data = [1u8; 100];
    let r = encode(&mut buf, 1, &Cred::None, &Call::Write(&[1; 8], 0, &data));
    assert_eq!(r, Err(XdrError::Overflow));
}

#[test]
fn parse_read_rejects_errors_and_truncation() {
    assert_eq!(
        parse_read(&[0, 0, 0, 2]),
        Err(ReplyError::Status("READ", 2))
    );
    assert!(parse_read(&[0, 0, 0, 0, 0, 0, 0, 0]).is_err());
    let mut ok = vec![0u8; 4 + 4 + 4 + 4 + 4 + 4];
    ok[15] = 1; // eof
    ok[19] = 3; // len
    ok.truncate(20);
    ok.extend_from_slice(&[1, 2, 3, 0]);
    assert_eq!(parse_read(&ok).unwrap(), &[1, 2, 3]);
    // A data length past the 2 MiB bound is refused before the body is looked at.
    ok[16..20].copy_from_slice(&u32::MAX.to_be_bytes());
    assert_eq!(parse_read(&ok), Err(ReplyError::Xdr(XdrError::TooLong)));
}

#[test]
fn lookup_create_mount_and_getattr_replies_parse() {
    let mut b = vec![0, 0, 0, 0, 0, 0, 0, 2, 9, 9, 0, 0];
    assert_eq!(parse_lookup(&b).unwrap(), Some(vec![9, 9]));
    assert_eq!(parse_mount(&b).unwrap(), vec![9, 9]);
    assert_eq!(parse_lookup(&[0, 0, 0, 2]).unwrap(), None);
    assert!(parse_lookup(&[0, 0, 0, 13]).is_err());
    b.splice(4..4, [0, 0, 0, 1]);
    assert_eq!(parse_create(&b).unwrap(), vec![9, 9]);
    assert_eq!(
        parse_create(&[0, 0, 0, 0, 0, 0, 0, 0]),
        Err(ReplyError::NoHandle)
    );
    let mut attr = vec![0u8; 4 + 20 + 8];
    attr[31] = 42;
    assert_eq!(parse_getattr_size(&attr).unwrap(), 42);
    assert_eq!(
        parse_mount(&[0, 0, 0, 13]).unwrap_err().to_string(),
        "MNT failed: mountstat3 13"
    );
}

#[test]
fn handles_longer_than_nfs3_fhsize_are_refused() {
    let mut b = vec![0, 0, 0, 0, 0, 0, 0, 65];
    b.extend_from_slice(&[0u8; 68]);
    assert_eq!(parse_lookup(&b), Err(ReplyError::Xdr(XdrError::TooLong)));
}

#[test]
fn metadata_calls_go_to_their_procedures() {
    let fh = [7u8; 32];
    for (call, proc_) in [
        (Call::WriteSync(&fh, 0, b"x"), NFSPROC3_WRITE),
        (Call::Mkdir(&fh, "d"), NFSPROC3_MKDIR),
        (Call::Rmdir(&fh, "d"), NFSPROC3_RMDIR),
        (Call::ReaddirplusAt(&fh, 9, [1; 8]), NFSPROC3_READDIRPLUS),
    ] {
        let b = encoded(&call);
        let (h, off) = rpc::decode_call(&b[4..]).unwrap();
        assert_eq!((h.prog, h.vers, h.proc_), (NFS_PROGRAM, NFS_V3, proc_));
        let mut r = XdrReader::new(&b[4 + off..]);
        assert_eq!(r.opaque_var(64).unwrap(), &fh[..]);
        match call {
            Call::WriteSync(..) => {
                assert_eq!((r.u64(), r.u32(), r.u32()), (Ok(0), Ok(1), Ok(FILE_SYNC)));
            }
            Call::ReaddirplusAt(..) => {
                assert_eq!(r.u64(), Ok(9));
                assert_eq!(r.opaque_fixed(8), Ok(&[1u8; 8][..]));
            }
            Call::Mkdir(..) => {
                assert_eq!(r.string(8), Ok(&b"d"[..]));
                assert_eq!((r.u32(), r.u32()), (Ok(1), Ok(0o755)));
                assert_eq!(r.remaining(), 20);
            }
            _ => assert_eq!(r.string(8), Ok(&b"d"[..])),
        }
    }
}

/// An fattr3 whose size is `size`.
fn fattr3(w: &mut XdrWriter, size: u64) {
    for v in [1u32, 0o644, 1, 0, 0] {
        w.u32(v).unwrap();
    }
    w.u64(size).unwrap();
    for _ in 0..(FATTR3_LEN - 28) / 4 {
        w.u32(0).unwrap();
    }
}

#[test]
fn readdirplus_pages_and_lookup_sizes_decode() {
    let mut buf = vec![0u8; 1024];
    let mut w = XdrWriter::new(&mut buf);
    w.u32(NFS3_OK).unwrap();
    w.bool(false).unwrap(); // dir attributes
    w.opaque_fixed(&[3; 8]).unwrap();
    for (name, cookie, attrs) in [("a", 5u64, true), ("bb", 9, false)] {
        w.bool(true).unwrap();
        w.u64(cookie + 100).unwrap();
        w.string(name.as_bytes()).unwrap();
        w.u64(cookie).unwrap();
        w.bool(attrs).unwrap();
        if attrs {
            fattr3(&mut w, 3901);
        }
        w.bool(true).unwrap();
        w.opaque_var(&[1; 16]).unwrap();
    }
    w.bool(false).unwrap();
    w.bool(true).unwrap(); // eof
    let n = w.position();
    let page = parse_readdirplus(&buf[..n]).unwrap();
    assert_eq!(page.verf, [3; 8]);
    assert!(page.eof);
    let got: Vec<_> = page
        .entries
        .iter()
        .map(|e| (e.name.as_slice(), e.cookie, e.size))
        .collect();
    assert_eq!(got, vec![(&b"a"[..], 5, Some(3901)), (&b"bb"[..], 9, None)]);
    // Cut anywhere: an error, never a panic.
    for cut in 0..n {
        assert!(parse_readdirplus(&buf[..cut]).is_err(), "{cut}");
    }

    let mut w = XdrWriter::new(&mut buf);
    w.u32(NFS3_OK).unwrap();
    w.opaque_var(&[9; 8]).unwrap();
    w.bool(true).unwrap();
    fattr3(&mut w, 77);
    let n = w.position();
    assert_eq!(
        parse_lookup_size(&buf[..n]).unwrap(),
        Some((vec![9; 8], Some(77)))
    );
    assert_eq!(parse_lookup_size(&2u32.to_be_bytes()).unwrap(), None);
    assert_eq!(
        parse_mkdir(&17u32.to_be_bytes()),
        Err(ReplyError::Status("MKDIR", 17))
    );
}

/// A reduced WRITE is the full one without the data and its pad: same header and
/// arguments, ending with the length word the read chunk's data follows
/// (RFC 8166 §3.4.5).
#[test]
fn reduced_write_is_the_full_write_without_its_data() {
    let fh = [3u8; 20];
    let data = [0xabu8; 10];
    let mut full = vec![0u8; 256];
    let n = encode(&mut full, 7, &Cred::None, &Call::WriteSync(&fh, 64, &data)).unwrap();
    let mut reduced = vec![0u8; 256];
    let m = encode_write_reduced(&mut reduced, 7, &Cred::None, (&fh, 64, 10), FILE_SYNC).unwrap();
    assert_eq!(m, n - 12, "10 bytes of data and 2 of pad left out");
    assert_eq!(reduced[..m], full[..m]);
    assert_eq!(reduced[m - 4..m], 10u32.to_be_bytes());
}
