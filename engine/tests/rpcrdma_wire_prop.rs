//! Property tests of the RPC-over-RDMA version 1 header codec
//! (`engine::rpcrdma::wire`, RFC 8166 §4.1–§4.3): arbitrary and mutated headers never
//! panic and never grow the caller's chunk storage (R8166-12); every header the
//! decoder accepts re-encodes to the same bytes; and the decoder accepts exactly the
//! chunk lists within `Limits` whose segments name addressable memory (RFC 8166
//! §4.5.2), including hostile counts, lengths near 2^32 and offsets near 2^64.
//! Cases: 2 000 by default, `PROPTEST_CASES` for more (docs/fuzzing.md
//! "Property tests").

use engine::rpcrdma::wire::*;
use engine::xdr::XdrWriter;
use proptest::prelude::*;

fn config() -> ProptestConfig {
    let mut c = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = 2_000;
    }
    c
}

/// Lengths at the edges the limits and 32-bit arithmetic care about.
fn length() -> impl Strategy<Value = u32> {
    prop_oneof![
        8 => 0u32..=8192,
        1 => (u32::MAX - 4)..=u32::MAX,
        1 => Just(1 << 20),
        1 => Just(2 * 1024 * 1024 + 64 * 1024),
        1 => Just(2 * 1024 * 1024 + 64 * 1024 + 1),
        1 => any::<u32>(),
    ]
}

/// Offsets near 0 and near 2^64, where `offset + length - 1` may overflow.
fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => any::<u64>(),
        2 => 0u64..4096,
        1 => (u64::MAX - 9000)..=u64::MAX,
        1 => Just(u64::MAX),
    ]
}

fn segment(length: BoxedStrategy<u32>, offset: BoxedStrategy<u64>) -> BoxedStrategy<Segment> {
    (any::<u32>(), length, offset)
        .prop_map(|(handle, length, offset)| Segment {
            handle,
            length,
            offset,
        })
        .boxed()
}

/// Segments such as a real requester registers: always acceptable in the counts below.
fn tame_segment() -> BoxedStrategy<Segment> {
    segment((0u32..=65536).boxed(), (0u64..1 << 63).boxed())
}

/// Segments with edge lengths and offsets: often beyond a limit or unaddressable.
fn hostile_segment() -> BoxedStrategy<Segment> {
    segment(length().boxed(), offset().boxed())
}

/// Chunk lists of `seg`s: `reads` read segments, `writes` write chunks and a reply
/// chunk of up to `per_chunk` segments each.
fn lists(
    seg: fn() -> BoxedStrategy<Segment>,
    reads: usize,
    writes: usize,
    per_chunk: usize,
) -> impl Strategy<Value = Chunks> {
    let read = (prop_oneof![0u32..3, any::<u32>()], seg())
        .prop_map(|(position, seg)| ReadSegment { position, seg });
    let chunk = move || proptest::collection::vec(seg(), 0..=per_chunk);
    (
        proptest::collection::vec(read, 0..=reads),
        proptest::collection::vec(chunk(), 0..=writes),
        proptest::option::of(chunk()),
    )
        .prop_map(|(reads, writes, reply)| {
            let mut c = Chunks {
                reads,
                ..Chunks::default()
            };
            for w in &writes {
                c.push_write_chunk(w);
            }
            if let Some(r) = reply {
                c.set_reply_chunk(&r);
            }
            c
        })
}

/// Chunk lists within the default limits, a little past them, or with few hostile
/// segments.
fn chunks() -> impl Strategy<Value = Chunks> {
    prop_oneof![
        lists(tame_segment, 32, 4, 32),
        lists(tame_segment, 34, 5, 34),
        lists(hostile_segment, 3, 2, 3),
    ]
}

fn msg_fixed() -> impl Strategy<Value = Fixed> {
    (
        any::<u32>(),
        any::<u32>(),
        prop_oneof![Just(RDMA_MSG), Just(RDMA_NOMSG)],
    )
        .prop_map(|(xid, credit, proc_)| Fixed {
            xid,
            vers: VERSION,
            credit,
            proc_,
        })
}

fn encode(fixed: Fixed, c: &Chunks) -> Vec<u8> {
    let mut out = vec![0u8; 16 + c.encoded_len()];
    let n = encode_msg(&mut XdrWriter::new(&mut out), fixed, c).unwrap();
    assert_eq!(n, out.len(), "encoded_len agrees with encode_msg");
    out
}

/// The decoder's contract, restated: a segment must not run past 2^64 - 1; a chunk
/// (read segments sharing a position in a row, a write chunk, the reply chunk) must
/// not describe more than `max_chunk_bytes`; counts within their limits.
fn acceptable(c: &Chunks, l: &Limits) -> bool {
    let addressable =
        |s: &Segment| s.length == 0 || s.offset.checked_add(s.length as u64 - 1).is_some();
    let counted = |segs: &[Segment]| {
        segs.len() <= l.max_chunk_segments
            && segs.iter().all(addressable)
            && chunk_len(segs) <= l.max_chunk_bytes
    };
    let mut reads_ok = c.reads.len() <= l.max_read_segments;
    let mut run = (None, 0u64);
    for rs in &c.reads {
        if run.0 != Some(rs.position) {
            run = (Some(rs.position), 0);
        }
        run.1 = run.1.saturating_add(rs.seg.length as u64);
        reads_ok &= addressable(&rs.seg) && run.1 <= l.max_chunk_bytes;
    }
    reads_ok
        && c.write_chunks.len() <= l.max_write_chunks
        && (0..c.write_chunks.len()).all(|i| counted(c.write_chunk(i)))
        && c.reply_chunk().is_none_or(counted)
}

/// Storage sizes of a `Chunks`: decoding must never change them.
fn capacities(c: &Chunks) -> [usize; 4] {
    [
        c.reads.capacity(),
        c.write_segs.capacity(),
        c.write_chunks.capacity(),
        c.reply_segs.capacity(),
    ]
}

/// Decodes `buf` with the default limits and checks what holds for any input: no
/// allocation, an in-bounds payload offset that `msg_payload_at` agrees with, and a
/// byte-exact re-encoding of what was accepted.
fn decode_checked(buf: &[u8]) -> Result<(Header, Chunks), DecodeError> {
    let l = Limits::default();
    let mut c = Chunks::with_limits(&l);
    let cap = capacities(&c);
    let got = decode(buf, &l, &mut c);
    assert_eq!(capacities(&c), cap, "decoding allocated");
    let mut out = vec![0u8; buf.len() + 64];
    match got? {
        Header::Msg { fixed, payload_at } => {
            assert!(payload_at <= buf.len());
            assert_eq!(msg_payload_at(buf), Some(payload_at));
            let n = encode_msg(&mut XdrWriter::new(&mut out), fixed, &c).unwrap();
            assert_eq!(&out[..n], &buf[..payload_at], "re-encoding differs");
        }
        Header::Error { fixed, err } => {
            let mut w = XdrWriter::new(&mut out);
            let n = encode_error(&mut w, fixed.xid, fixed.vers, fixed.credit, err).unwrap();
            assert_eq!(&out[..n], &buf[..n], "re-encoding differs");
        }
    }
    Ok((got.unwrap(), c))
}

/// A mutation of a valid header: a word replaced (by an edge value or a random one),
/// the message cut short, or garbage appended.
#[derive(Debug, Clone)]
enum Mutation {
    Word(usize, u32),
    Cut(usize),
    Append(Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let word = prop_oneof![
        Just(0u32),
        Just(1),
        Just(2),
        Just(u32::MAX),
        Just(0x7fff_ffff),
        Just(0x8000_0000),
        any::<u32>()
    ];
    prop_oneof![
        (any::<usize>(), word).prop_map(|(i, w)| Mutation::Word(i, w)),
        any::<usize>().prop_map(Mutation::Cut),
        proptest::collection::vec(any::<u8>(), 1..32).prop_map(Mutation::Append),
    ]
}

fn mutate(mut b: Vec<u8>, muts: &[Mutation]) -> Vec<u8> {
    for m in muts {
        match m {
            Mutation::Word(i, w) if b.len() >= 4 => {
                let at = (i % (b.len() / 4)) * 4;
                b[at..at + 4].copy_from_slice(&w.to_be_bytes());
            }
            Mutation::Cut(n) => b.truncate(n % (b.len() + 1)),
            Mutation::Append(x) => b.extend_from_slice(x),
            Mutation::Word(..) => {}
        }
    }
    b
}

proptest! {
    #![proptest_config(config())]

    /// Arbitrary bytes: no panic, no allocation; anything accepted re-encodes.
    #[test]
    fn arbitrary_bytes_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode_checked(&buf);
        if let Some(at) = msg_payload_at(&buf) {
            prop_assert!(at <= buf.len());
        }
    }

    /// Encoded chunk lists decode to the same lists exactly when they are within the
    /// limits and every segment is addressable; otherwise `Chunks` with the fixed
    /// words kept for the ERR_CHUNK answer.
    #[test]
    fn encoded_lists_decode_iff_acceptable(fixed in msg_fixed(), c in chunks()) {
        let buf = encode(fixed, &c);
        match decode_checked(&buf) {
            Ok((h, got)) => {
                prop_assert!(acceptable(&c, &Limits::default()));
                prop_assert_eq!(h, Header::Msg { fixed, payload_at: buf.len() });
                prop_assert_eq!(got, c);
            }
            Err(e) => {
                prop_assert!(!acceptable(&c, &Limits::default()));
                prop_assert_eq!(e, DecodeError::Chunks(fixed));
            }
        }
    }

    /// Mutated valid headers (hostile counts, discriminants, lengths, truncations):
    /// never a panic or an allocation, and anything accepted re-encodes exactly.
    #[test]
    fn mutated_headers_never_panic(
        fixed in msg_fixed(),
        c in chunks(),
        muts in proptest::collection::vec(mutation(), 1..6),
    ) {
        let buf = mutate(encode(fixed, &c), &muts);
        let _ = decode_checked(&buf);
    }

    /// A write or reply chunk claiming a huge segment count is refused before any
    /// segment is stored, whatever the message's real length.
    #[test]
    fn huge_counts_are_refused(
        count in 33u32..,
        reply in any::<bool>(),
        tail in proptest::collection::vec(any::<u8>(), 0..600),
    ) {
        let mut b: Vec<u8> = [7u32, VERSION, 1, RDMA_MSG, 0]
            .iter()
            .flat_map(|w| w.to_be_bytes())
            .collect();
        if reply {
            b.extend_from_slice(&0u32.to_be_bytes()); // empty write list
        }
        b.extend_from_slice(&1u32.to_be_bytes());
        b.extend_from_slice(&count.to_be_bytes());
        b.extend_from_slice(&tail);
        let fixed = Fixed { xid: 7, vers: VERSION, credit: 1, proc_: RDMA_MSG };
        prop_assert_eq!(decode_checked(&b).unwrap_err(), DecodeError::Chunks(fixed));
    }

    /// RDMA_ERROR headers of either kind, any version: decoded and re-encoded exactly.
    #[test]
    fn error_headers_round_trip(
        xid in any::<u32>(),
        vers in any::<u32>(),
        credit in any::<u32>(),
        low in any::<u32>(),
        high in any::<u32>(),
        chunk in any::<bool>(),
    ) {
        let err = if chunk { ErrBody::Chunk } else { ErrBody::Vers { low, high } };
        let mut out = [0u8; 32];
        let n = encode_error(&mut XdrWriter::new(&mut out), xid, vers, credit, err).unwrap();
        let (h, _) = decode_checked(&out[..n]).unwrap();
        let fixed = Fixed { xid, vers, credit, proc_: RDMA_ERROR };
        prop_assert_eq!(h, Header::Error { fixed, err });
    }
}
