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
