//! Property tests of the XDR cursor (`engine::xdr`, RFC 4506): hostile bytes under
//! every reader method are an `Err` or an exact, in-bounds `Ok`, never a panic; and
//! whatever the writer encodes the reader decodes back, with zero padding (RFC 4506
//! §4.9–§4.11). Cases: 2 000 by default, `PROPTEST_CASES` for more (docs/fuzzing.md
//! "Property tests").

use engine::xdr::{pad_len, padded, XdrError, XdrReader, XdrWriter};
use proptest::prelude::*;

fn config() -> ProptestConfig {
    let mut c = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = 2_000;
    }
    c
}

/// One reader call, with the sizes a hostile peer or a careless caller could pass.
#[derive(Debug, Clone)]
enum Read {
    U32,
    I32,
    U64,
    I64,
    Bool,
    Fixed(usize),
    Var(usize),
    Str(usize),
    Skip(usize),
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        0usize..80,
        Just(usize::MAX),
        Just(usize::MAX - 3),
        Just(u32::MAX as usize),
        (usize::MAX - 8)..=usize::MAX,
    ]
}

fn read() -> impl Strategy<Value = Read> {
    prop_oneof![
        Just(Read::U32),
        Just(Read::I32),
        Just(Read::U64),
        Just(Read::I64),
        Just(Read::Bool),
        size().prop_map(Read::Fixed),
        size().prop_map(Read::Var),
        size().prop_map(Read::Str),
        size().prop_map(Read::Skip),
    ]
}

/// Runs `op` at `r`; on `Ok` returns the bytes it must have consumed, checked against
/// what it returned.
fn apply(r: &mut XdrReader, op: &Read) -> Result<usize, XdrError> {
    let before = r.rest();
    match *op {
        Read::U32 => r.u32().map(|v| {
            assert_eq!(v.to_be_bytes(), before[..4]);
            4
        }),
        Read::I32 => r.i32().map(|_| 4),
        Read::U64 => r.u64().map(|v| {
            assert_eq!(v.to_be_bytes(), before[..8]);
            8
        }),
        Read::I64 => r.i64().map(|_| 8),
        Read::Bool => r.bool().map(|b| {
            assert_eq!(before[..4], [0, 0, 0, b as u8]);
            4
        }),
        Read::Fixed(n) => r.opaque_fixed(n).map(|d| {
            assert_eq!(d, &before[..n]);
            padded(n)
        }),
        Read::Var(max) | Read::Str(max) => {
            let d = match op {
                Read::Var(_) => r.opaque_var(max),
                _ => r.string(max),
            }?;
            assert!(d.len() <= max);
            assert_eq!(before[..4], (d.len() as u32).to_be_bytes());
            assert_eq!(d, &before[4..4 + d.len()]);
            Ok(4 + padded(d.len()))
        }
        Read::Skip(n) => r.skip(n).map(|()| n),
    }
}

proptest! {
    #![proptest_config(config())]

    /// Any bytes, any sequence of reads: each read is `Err` or consumes exactly its
    /// item, the cursor never passes the end, and nothing panics.
    #[test]
    fn reads_of_hostile_bytes_are_exact_or_errors(
        buf in proptest::collection::vec(any::<u8>(), 0..256),
        ops in proptest::collection::vec(read(), 1..24),
    ) {
        let mut r = XdrReader::new(&buf);
        for op in &ops {
            let at = r.position();
            match apply(&mut r, op) {
                Ok(n) => prop_assert_eq!(r.position(), at + n),
                Err(_) => prop_assert!(r.position() >= at),
            }
            prop_assert!(r.position() <= buf.len());
            prop_assert_eq!(r.remaining(), buf.len() - r.position());
            prop_assert_eq!(r.rest(), &buf[r.position()..]);
        }
    }

    /// A length prefix over the caller's limit is `TooLong` whatever follows: the
    /// limit is checked before the body is looked at.
    #[test]
    fn length_over_the_limit_is_too_long(len in 1u32.., max in 0usize..4096, tail in 0usize..64) {
        prop_assume!(len as usize > max);
        let mut buf = len.to_be_bytes().to_vec();
        buf.resize(4 + tail, 0xa5);
        prop_assert_eq!(XdrReader::new(&buf).opaque_var(max), Err(XdrError::TooLong));
    }

    /// Scalars and opaques of any length survive writer → reader, padded with zeros
    /// to a multiple of four; the writer's position is the encoded length.
    #[test]
    fn writer_reader_round_trip(
        a in any::<u32>(),
        b in any::<u64>(),
        c in any::<i32>(),
        d in any::<i64>(),
        e in any::<bool>(),
        opaque in proptest::collection::vec(any::<u8>(), 0..300),
        string in proptest::collection::vec(any::<u8>(), 0..300),
        fixed in proptest::collection::vec(any::<u8>(), 0..40),
    ) {
        let len = 4 + 8 + 4 + 8 + 4 + 4 + padded(opaque.len()) + 4 + padded(string.len())
            + padded(fixed.len());
        let mut buf = vec![0xffu8; len];
        let mut w = XdrWriter::new(&mut buf);
        w.u32(a).unwrap();
        w.u64(b).unwrap();
        w.i32(c).unwrap();
        w.i64(d).unwrap();
        w.bool(e).unwrap();
        w.opaque_var(&opaque).unwrap();
        w.string(&string).unwrap();
        w.opaque_fixed(&fixed).unwrap();
        prop_assert_eq!(w.position(), len);
        prop_assert_eq!(w.remaining(), 0);
        prop_assert_eq!(w.u32(0), Err(XdrError::Overflow));

        let mut r = XdrReader::new(&buf);
        prop_assert_eq!(r.u32(), Ok(a));
        prop_assert_eq!(r.u64(), Ok(b));
        prop_assert_eq!(r.i32(), Ok(c));
        prop_assert_eq!(r.i64(), Ok(d));
        prop_assert_eq!(r.bool(), Ok(e));
        let at = r.position() + 4 + opaque.len();
        prop_assert_eq!(r.opaque_var(opaque.len()), Ok(&opaque[..]));
        prop_assert!(buf[at..at + pad_len(opaque.len())].iter().all(|&x| x == 0));
        prop_assert_eq!(r.string(string.len()), Ok(&string[..]));
        let at = r.position() + fixed.len();
        prop_assert_eq!(r.opaque_fixed(fixed.len()), Ok(&fixed[..]));
        prop_assert!(buf[at..].iter().all(|&x| x == 0));
        prop_assert_eq!(r.remaining(), 0);
    }

    /// An item that does not fit is `Overflow` and writes nothing: the position stays
    /// and the bytes after it are untouched.
    #[test]
    fn writer_overflow_writes_nothing(
        data in proptest::collection::vec(any::<u8>(), 0..64),
        room in 0usize..80,
        var in any::<bool>(),
    ) {
        let need = padded(data.len()) + if var { 4 } else { 0 };
        let mut buf = vec![0xeeu8; room];
        let mut w = XdrWriter::new(&mut buf);
        let got = if var { w.opaque_var(&data) } else { w.opaque_fixed(&data) };
        if need <= room {
            prop_assert_eq!(got, Ok(()));
            prop_assert_eq!(w.position(), need);
        } else {
            prop_assert_eq!(got, Err(XdrError::Overflow));
            prop_assert_eq!(w.position(), 0);
            prop_assert!(buf.iter().all(|&x| x == 0xee));
        }
    }

    /// A payload reserved in place and shrunk (a short storage read) decodes as
    /// exactly the bytes kept, re-padded with zeros.
    #[test]
    fn reserved_then_truncated_opaque_round_trips(n in 0usize..200, keep in 0usize..200, fill in any::<u8>()) {
        let actual = keep.min(n);
        let mut buf = vec![0xffu8; 4 + padded(n)];
        let mut w = XdrWriter::new(&mut buf);
        let len_at = w.reserve_u32().unwrap();
        let start = w.position();
        w.reserve_opaque_fixed(n).unwrap().fill(fill);
        w.truncate_opaque(start, actual);
        w.patch_u32(len_at, actual as u32);
        let end = w.position();
        prop_assert_eq!(end, 4 + padded(actual));
        let mut r = XdrReader::new(&buf[..end]);
        let got = r.opaque_var(n).unwrap();
        prop_assert!(got.len() == actual && got.iter().all(|&x| x == fill));
        prop_assert!(buf[4 + actual..end].iter().all(|&x| x == 0));
    }
}
