//! The caller's-buffer NFSv4.1 encoder ([`crate::v4op`]) against the collecting one
//! ([`crate::v4call::Ops`]): the same bytes, no allocation, overflow reported.

use crate::nfs4::*;
use crate::nfs4args::*;
use crate::rpccall;
use crate::v4call::{compound_call, Ops};
use crate::v4op::{self, Bitmap, Claim, Fattr, How};
use engine::rpc::Cred;
use engine::xdr::{XdrError, XdrWriter};

/// A COMPOUND written into a caller's buffer is byte for byte the one [`Ops`] and
/// [`compound_call`] build (RFC 8881 §16.2.1).
#[test]
fn caller_buffer_compound_matches_ops() {
    let (sid, fh, st) = ([7u8; 16], [1u8, 2, 3, 4, 5], [9u8; 16]);
    let want = compound_call(
        42,
        &rpccall::sys(3),
        &Ops::new()
            .sequence_at(sid, 5, 2, false)
            .putfh(&fh)
            .read(&st, 8192, 4096)
            .write_stable(&st, 0, UNSTABLE4, b"abcde"),
    );
    let mut buf = [0u8; 512];
    let mut w = XdrWriter::new(&mut buf);
    v4op::compound_header(&mut w, 42, &rpccall::sys(3), b"", 1, 4).unwrap();
    v4op::sequence(&mut w, &sid, 5, 2, 2, false).unwrap();
    v4op::putfh(&mut w, &fh).unwrap();
    v4op::read(&mut w, &st, 8192, 4096).unwrap();
    v4op::write(&mut w, &st, 0, UNSTABLE4, b"abcde").unwrap();
    assert_eq!(w.written(), &want[..]);
}

/// OPEN with attributes, as bench creates files (UNCHECKED4, mode 0644), and CLOSE.
#[test]
fn open_with_attrs_matches_ops() {
    let (mode, bits) = (0o644u32.to_be_bytes(), Bitmap::of(&[FATTR4_MODE]));
    let attrs = Fattr {
        bitmap: bits.words(),
        values: &mode,
    };
    let how = How::WithAttrs {
        mode: UNCHECKED4,
        attrs,
    };
    let ops = Ops::new()
        .open(9, b"own", 3, 0, how, Claim::Null(b"f"))
        .close(&CURRENT_STATEID);
    let mut buf = [0u8; 256];
    let mut w = XdrWriter::new(&mut buf);
    v4op::open(&mut w, 9, b"own", (3, 0), &how, &Claim::Null(b"f")).unwrap();
    v4op::close(&mut w, &CURRENT_STATEID).unwrap();
    assert_eq!(w.written(), ops.bytes());
}

/// Bitmaps are as short as their highest word (RFC 8881 §3.3.7), never empty, and
/// attribute numbers beyond three words are dropped rather than wrapped.
#[test]
fn bitmap_of_attribute_numbers() {
    assert_eq!(Bitmap::of(&[]).words(), &[0]);
    assert_eq!(Bitmap::of(&[1, 4]).words(), &[0x12]);
    assert_eq!(Bitmap::of(&[FATTR4_MODE]).words(), &[0, 2]);
    assert_eq!(Bitmap::of(&[4, 64, 500]).words(), &[0x10, 0, 1]);
}

/// A buffer too small for the operation is an overflow, not a panic or a cut.
#[test]
fn small_buffer_overflows() {
    let mut buf = [0u8; 40];
    let mut w = XdrWriter::new(&mut buf);
    let err = v4op::write(&mut w, &[0; 16], 0, FILE_SYNC4, &[1; 64]).unwrap_err();
    assert_eq!(err, XdrError::Overflow);
    let mut w = XdrWriter::new(&mut buf);
    assert!(v4op::compound_header(&mut w, 1, &Cred::None, &[0; 64], 1, 0).is_err());
}

/// An operation larger than the builder's first guess grows its room and keeps
/// every byte (`Ops::raw` gives no size hint).
#[test]
fn ops_grow_past_their_first_room() {
    let data = vec![0x5a; 3000];
    let ops = Ops::new().raw(|w| v4op::write(w, &[1; 16], 0, FILE_SYNC4, &data));
    assert_eq!(ops.n, 1);
    let b = ops.bytes();
    assert_eq!(b.len(), 4 + 16 + 8 + 4 + 4 + 3000);
    assert_eq!(&b[..4], &OP_WRITE.to_be_bytes());
    assert!(b[36..].iter().all(|&x| x == 0x5a));
}
