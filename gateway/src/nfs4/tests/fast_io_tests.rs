//! `nfs4::fast_io` (the protocol half of v4.1 data I/O on the reactor's ring) against
//! the worker path (`serve`): the same reply bytes, the slot claimed while the I/O
//! runs (a retransmission gets NFS4ERR_DELAY), kept for replays, given back intact
//! when the ring hands the call to a worker, and nothing claimed for any call the
//! worker must answer.

use super::*;
use crate::nfs4::fast_io::{self, IoCall, IoOp, Target};
use crate::state::stateid::Stateid;

fn setup() -> (H, Vec<u8>, crate::fs::Node) {
    let h = harness();
    let root = h.model.root(0).unwrap();
    let node = h
        .model
        .create(
            &root,
            b"f",
            &crate::fs::CreateMode::Unchecked(Default::default()),
            crate::fs::Owner { uid: 0, gid: 0 },
        )
        .unwrap();
    h.model
        .write(&node, 0, &[5u8; 10000], crate::fs::Stable::FileSync)
        .unwrap();
    let fh = h.model.handle(&node).as_bytes().to_vec();
    (h, fh, node)
}

fn seq(sid: [u8; 16], seq: u32, cachethis: bool) -> Op {
    Box::new(move |w| {
        w.u32(OP_SEQUENCE)?;
        w.opaque_fixed(&sid)?;
        w.u32(seq)?;
        w.u32(0)?;
        w.u32(0)?;
        w.bool(cachethis)
    })
}

#[allow(clippy::too_many_arguments)]
fn write_args(
    sid: [u8; 16],
    n: u32,
    fh: &[u8],
    st: Stateid,
    off: u64,
    data: &'static [u8],
    how: u32,
    post: bool,
) -> Vec<u8> {
    let mut ops = vec![
        seq(sid, n, false),
        putfh(fh.to_vec()),
        Box::new(move |w: &mut XdrWriter| {
            w.u32(OP_WRITE)?;
            st.encode(w)?;
            w.u64(off)?;
            w.u32(how)?;
            w.opaque_var(data)
        }) as Op,
    ];
    if post {
        ops.push(getattr(&[
            attrs::CHANGE,
            attrs::SIZE,
            attrs::TIME_METADATA,
            attrs::TIME_MODIFY,
        ]));
    }
    compound_args(b"t", 1, &ops)
}

fn read_args(sid: [u8; 16], n: u32, fh: &[u8], st: Stateid, off: u64, count: u32) -> Vec<u8> {
    compound_args(
        b"t",
        1,
        &[
            seq(sid, n, false),
            putfh(fh.to_vec()),
            Box::new(move |w: &mut XdrWriter| {
                w.u32(OP_READ)?;
                st.encode(w)?;
                w.u64(off)?;
                w.u32(count)
            }),
        ],
    )
}

fn commit_args(sid: [u8; 16], n: u32, fh: &[u8], off: u64, count: u32) -> Vec<u8> {
    compound_args(
        b"t",
        1,
        &[
            seq(sid, n, false),
            putfh(fh.to_vec()),
            Box::new(move |w: &mut XdrWriter| {
                w.u32(OP_COMMIT)?;
                w.u64(off)?;
                w.u32(count)
            }),
        ],
    )
}

/// `fast_io::start` over `args` into a fresh buffer: (started, head bytes).
fn start(
    h: &H,
    args: &[u8],
    attr: &crate::fs::Attr,
    tail_max: usize,
) -> Option<(fast_io::Started, Vec<u8>, Vec<u8>)> {
    let c: IoCall = fast_io::parse(args)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut w = XdrWriter::new(&mut buf);
    let t = Target { attr, tail_max };
    let s = fast_io::start(&h.state, &c, args, &t, &mut w)?;
    let n = w.position();
    buf.truncate(n);
    Some((s, buf, args[c.fh.clone()].to_vec()))
}

/// Offset of SEQUENCE4resok's sr_sequenceid in a COMPOUND4res with tag "t".
const SEQID_AT: usize = 4 + 8 + 4 + 4 + 4 + 16;

fn with_seqid(rep: &[u8], n: u32) -> Vec<u8> {
    let mut v = rep.to_vec();
    v[SEQID_AT..SEQID_AT + 4].copy_from_slice(&n.to_be_bytes());
    v
}

#[test]
fn write_read_commit_replies_equal_the_workers() {
    let (h, fh, node) = setup();
    let (_, sid) = session(&h, b"io-a");
    let any = Stateid::ANONYMOUS;
    let verf = h.model.write_verifier();
    // WRITE: the worker's reply (seqid 1) against start + put_write_ok (seqid 2).
    let worker = run(&h, &write_args(sid, 1, &fh, any, 3, b"abc", 0, false));
    assert_eq!(
        Nfsstat4::decode(&mut XdrReader::new(&worker)).unwrap(),
        NFS4_OK
    );
    let attr = h.model.getattr(&node).unwrap();
    let args = write_args(sid, 2, &fh, any, 3, b"abc", 0, false);
    let (s, mut head, _) = start(&h, &args, &attr, 16).expect("taken");
    {
        let mut tail = vec![0u8; 16];
        let mut w = XdrWriter::new(&mut tail);
        fast_io::put_write_ok(&mut w, 3, fast_io::UNSTABLE4, &verf).unwrap();
        head.extend_from_slice(&tail);
    }
    assert_eq!(
        with_seqid(&worker, 2),
        head,
        "WRITE reply differs from the worker's"
    );
    // In flight: a retransmission is DELAY, the next request too (§2.10.6.2).
    let st = Nfsstat4::decode(&mut XdrReader::new(&run(&h, &args))).unwrap();
    assert_eq!(st, NFS4ERR_DELAY);
    fast_io::finish(s, &head, None);
    assert_eq!(run(&h, &args), head, "replayed from the slot");

    // WRITE + GETATTR: the GETATTR encoded from the model's attributes after the write
    // is the worker's.
    let worker = run(&h, &write_args(sid, 3, &fh, any, 0, b"xyzw", 0, true));
    let attr = h.model.getattr(&node).unwrap();
    let args = write_args(sid, 4, &fh, any, 0, b"xyzw", 0, true);
    let (s, mut head, fh2) = start(&h, &args, &attr, 16 + fast_io::GETATTR_MAX).expect("taken");
    let IoOp::Write {
        getattr: Some(want),
        ..
    } = fast_io::parse(&args).unwrap().op
    else {
        panic!("write with getattr")
    };
    let mut tail = vec![0u8; 4096];
    let mut w = XdrWriter::new(&mut tail);
    fast_io::put_write_ok(&mut w, 4, fast_io::UNSTABLE4, &verf).unwrap();
    fast_io::put_getattr(&mut w, &want, &attr, &fh2).unwrap();
    let n = w.position();
    head.extend_from_slice(&tail[..n]);
    assert_eq!(
        with_seqid(&worker, 4),
        head,
        "WRITE+GETATTR differs from the worker's"
    );
    fast_io::finish(s, &head, None);

    // READ: head from start, then eof, length and data as the ring writes them.
    let worker = run(&h, &read_args(sid, 5, &fh, any, 9990, 100));
    let args = read_args(sid, 6, &fh, any, 9990, 100);
    let (s, mut head, _) = start(&h, &args, &attr, 8 + 12).expect("taken");
    head.extend_from_slice(&1u32.to_be_bytes());
    head.extend_from_slice(&10u32.to_be_bytes());
    head.extend_from_slice(&[5u8; 10]);
    head.extend_from_slice(&[0, 0]);
    assert_eq!(
        with_seqid(&worker, 6),
        head,
        "READ reply differs from the worker's"
    );
    // The ring's READ passes where its data lie (RFC 8267 §6.4.1); the slot keeps
    // it, so a replay on a worker passes the same place without reading the reply.
    let at = head.len() - 12;
    fast_io::finish(s, &head, Some(at..at + 10));
    let _ = crate::ddp::take();
    assert_eq!(run(&h, &args), head, "replayed from the slot");
    let replayed = crate::ddp::take().expect("a replay passes its READ data");
    assert_eq!(
        (replayed.len(), replayed.get(0)),
        (1, Some(Some(at..at + 10)))
    );

    // COMMIT.
    let worker = run(&h, &commit_args(sid, 7, &fh, 0, 0));
    let args = commit_args(sid, 8, &fh, 0, 0);
    let (s, mut head, _) = start(&h, &args, &attr, 8).expect("taken");
    head.extend_from_slice(&verf);
    assert_eq!(
        with_seqid(&worker, 8),
        head,
        "COMMIT reply differs from the worker's"
    );
    fast_io::finish(s, &head, None);
}

#[test]
fn handed_back_calls_leave_the_slot_for_the_worker() {
    let (h, fh, node) = setup();
    let (_, sid) = session(&h, b"io-b");
    let attr = h.model.getattr(&node).unwrap();
    let any = Stateid::ANONYMOUS;
    let s = h.state.clients.session(&sid).unwrap();
    // Claimed, then the I/O failed: dropping `Started` gives the slot back, and the
    // worker runs the same request as new (not DELAY, not RETRY_UNCACHED_REP).
    let args = write_args(sid, 1, &fh, any, 0, b"abc", 0, false);
    let (started, _, _) = start(&h, &args, &attr, 16).expect("taken");
    assert!(!s.is_next(0, 1));
    drop(started);
    assert!(s.is_next(0, 1));
    assert_eq!(
        Nfsstat4::decode(&mut XdrReader::new(&run(&h, &args))).unwrap(),
        NFS4_OK
    );
    // Calls the worker must answer: nothing claimed, the slot still expects seqid 2.
    let bogus = Stateid {
        seqid: 1,
        other: [7; 12],
    };
    let near_end = u64::MAX - 1;
    let cases: Vec<Vec<u8>> = vec![
        write_args(sid, 2, &fh, Stateid::CURRENT, 0, b"abc", 0, false),
        write_args(sid, 2, &fh, bogus, 0, b"abc", 0, false),
        read_args(sid, 2, &fh, bogus, 0, 10),
        read_args(sid, 2, &fh, Stateid::CURRENT, 0, 10),
        write_args(sid, 2, &fh, any, near_end, b"abc", 0, false),
        write_args(sid, 2, &fh, any, i64::MAX as u64, b"a", 0, false),
        commit_args(sid, 2, &fh, near_end, 100),
        // A retransmission (seqid 1) and a misordered one (3).
        write_args(sid, 1, &fh, any, 0, b"abc", 0, false),
        write_args(sid, 3, &fh, any, 0, b"abc", 0, false),
        // Another session.
        write_args([9; 16], 2, &fh, any, 0, b"abc", 0, false),
    ];
    for (i, a) in cases.iter().enumerate() {
        assert!(start(&h, a, &attr, 16).is_none(), "case {i} taken");
        assert!(s.is_next(0, 2), "case {i} touched the slot");
    }
    // Replies too big for the session (its ca_maxresponsesize): the worker's.
    let a = read_args(sid, 2, &fh, any, 0, 10);
    assert!(start(&h, &a, &attr, 64 << 20).is_none());
    assert!(s.is_next(0, 2));
    // sa_cachethis with a reply over ca_maxresponsesize_cached: the worker's
    // REP_TOO_BIG_TO_CACHE.
    let cached = compound_args(
        b"t",
        1,
        &[
            seq(sid, 2, true),
            putfh(fh.clone()),
            Box::new(|w: &mut XdrWriter| {
                w.u32(OP_READ)?;
                Stateid::ANONYMOUS.encode(w)?;
                w.u64(0)?;
                w.u32(100000)
            }),
        ],
    );
    assert!(start(&h, &cached, &attr, 100008).is_none());
    assert!(s.is_next(0, 2));
}

#[test]
fn parse_takes_exactly_the_shapes() {
    let sid = [3u8; 16];
    let fh = vec![1u8; 20];
    let any = Stateid::ANONYMOUS;
    let w = write_args(sid, 1, &fh, any, 5, b"hello", 0, false);
    let c = fast_io::parse(&w).expect("WRITE");
    assert_eq!(
        (c.nops, c.slot, c.seqid, &w[c.fh.clone()]),
        (3, 0, 1, &fh[..])
    );
    let IoOp::Write {
        offset,
        data: (at, len),
        getattr,
        ..
    } = c.op
    else {
        panic!()
    };
    assert_eq!(
        (offset, &w[at..at + len as usize], getattr),
        (5, &b"hello"[..], None)
    );
    assert!(fast_io::parse(&write_args(sid, 1, &fh, any, 5, b"hello", 0, true)).is_some());
    assert!(fast_io::parse(&read_args(sid, 1, &fh, any, u64::MAX, u32::MAX)).is_some());
    assert!(fast_io::parse(&commit_args(sid, 1, &fh, u64::MAX, u32::MAX)).is_some());
    // DATA_SYNC / FILE_SYNC are taken (the ring syncs them), with the level asked.
    for how in [1, 2] {
        let c = fast_io::parse(&write_args(sid, 1, &fh, any, 0, b"x", how, false)).unwrap();
        assert!(matches!(c.op, fast_io::IoOp::Write { stable, .. } if stable == how));
    }
    // Unknown stable_how, empty writes: the worker's.
    for how in [3, u32::MAX] {
        assert!(fast_io::parse(&write_args(sid, 1, &fh, any, 0, b"x", how, false)).is_none());
    }
    assert!(fast_io::parse(&write_args(sid, 1, &fh, any, 0, b"", 0, false)).is_none());
    // Trailing bytes, truncations at every length, and every byte mutated: no panic,
    // and nothing longer or shorter than the shape is taken.
    let mut trailing = w.clone();
    trailing.extend_from_slice(&[0, 0, 0, 0]);
    assert!(fast_io::parse(&trailing).is_none());
    for n in 0..w.len() {
        assert!(fast_io::parse(&w[..n]).is_none(), "prefix {n}");
    }
    for i in 0..w.len() {
        for v in [0u8, 1, 0x7f, 0xff] {
            let mut m = w.clone();
            m[i] = v;
            assert_eq!(fast_io::parse(&m), oracle(&m), "byte {i} = {v}");
            if let Some(c) = fast_io::parse(&m) {
                // Whatever parses points inside the arguments.
                assert!(c.fh.end <= m.len() && c.tag.end <= m.len());
                if let IoOp::Write {
                    data: (at, len), ..
                } = c.op
                {
                    assert!(at + len as usize <= m.len());
                }
            }
        }
    }
    // A WRITE's data length claiming more than the record holds.
    let mut lie = w.clone();
    let at = lie.len() - 12;
    lie[at..at + 4].copy_from_slice(&1000u32.to_be_bytes());
    assert!(fast_io::parse(&lie).is_none());
}

/// `GETATTR_MAX` bounds a trailing GETATTR of every attribute the ring answers, for
/// the largest handle and ids (the reply buffer and the session-limit check use it).
#[test]
fn getattr_max_bounds_every_fast_attribute() {
    let (h, _, node) = setup();
    let mut attr = h.model.getattr(&node).unwrap();
    attr.uid = u32::MAX;
    attr.gid = u32::MAX;
    attr.size = u64::MAX;
    let fh = vec![0xffu8; crate::nfs4::FH4_MAX];
    let mut buf = vec![0u8; 8192];
    let mut w = XdrWriter::new(&mut buf);
    fast_io::put_getattr(&mut w, &crate::nfs4::fast::FAST_ATTRS, &attr, &fh).unwrap();
    assert!(
        w.position() <= fast_io::GETATTR_MAX,
        "{} bytes",
        w.position()
    );
}

/// The shapes read from the COMPOUND's plan (`plan::Plan`, `fast_io::call`) against
/// the parser they replaced (`plan_oracles::io_parse`): the same decision and fields
/// for every truncation and single-byte change of READ, WRITE (with and without
/// GETATTR) and COMMIT COMPOUNDs.
#[test]
fn plan_shapes_match_the_old_parser_on_every_mutation() {
    let (sid, fh) = ([7u8; 16], vec![3u8; 26]);
    let st = Stateid {
        seqid: 2,
        other: [9; 12],
    };
    let cases = [
        read_args(sid, 5, &fh, st, 8192, 4096),
        write_args(sid, 5, &fh, st, 5, b"hello", 0, true),
        write_args(sid, 5, &fh, st, 5, b"hey", 2, false),
        commit_args(sid, 5, &fh, 0, 4096),
    ];
    let mut checked = 0;
    for a in &cases {
        assert!(fast_io::parse(a).is_some());
        // The plan's fast lane takes these, and agrees with the general walk on
        // every prefix and change (`plan_oracles::lane_agrees`).
        assert!(lane_agrees(a));
        for n in 0..=a.len() {
            assert_eq!(fast_io::parse(&a[..n]), oracle(&a[..n]), "prefix {n}");
            lane_agrees(&a[..n]);
        }
        for i in 0..a.len() {
            for v in [0u8, 1, 3, 4, 0x7f, 0xff, a[i] ^ 1, a[i] ^ 0x80] {
                let mut m = a.clone();
                m[i] = v;
                assert_eq!(fast_io::parse(&m), oracle(&m), "byte {i} = {v}");
                lane_agrees(&m);
                checked += 1;
            }
        }
    }
    assert!(checked > 1000);
}

fn oracle(args: &[u8]) -> Option<IoCall> {
    crate::nfs4::skip_prop_tests::oracles::io_parse(args)
}

fn lane_agrees(args: &[u8]) -> bool {
    crate::nfs4::skip_prop_tests::oracles::lane_agrees(args)
}

/// RFC 8267 §6.4.1 on a replay (RFC 8881 §2.10.6.1.3): a COMPOUND of two READs
/// replayed from the slot's cache passes where both READs' data lie, as its first
/// run noted them, so the transport places them in write chunks without reading the
/// reply (a shape no executor but the worker runs).
#[test]
fn r8267_a_replay_passes_the_read_data_its_first_run_noted() {
    let (h, fh, _) = setup();
    let (_, sid) = session(&h, b"io-replay2");
    let read = |off: u64, count: u32| -> Op {
        Box::new(move |w: &mut XdrWriter| {
            w.u32(OP_READ)?;
            Stateid::ANONYMOUS.encode(w)?;
            w.u64(off)?;
            w.u32(count)
        })
    };
    let ops = [
        seq(sid, 1, false),
        putfh(fh.clone()),
        read(0, 100),
        putfh(fh.clone()),
        read(9990, 100),
    ];
    let args = compound_args(b"two", 1, &ops);
    let first = run(&h, &args);
    let noted = crate::ddp::take().expect("the first run notes its READs");
    assert_eq!(noted.len(), 2);
    let (a, b) = (
        noted.get(0).flatten().unwrap(),
        noted.get(1).flatten().unwrap(),
    );
    assert_eq!((a.len(), b.len()), (100, 10));
    assert_eq!(&first[a.clone()], &[5u8; 100][..]);
    assert_eq!(&first[b.clone()], &[5u8; 10][..]);
    assert_eq!(run(&h, &args), first, "replayed from the slot");
    assert_eq!(
        crate::ddp::take(),
        Some(noted),
        "the replay passes the same"
    );
}

/// RFC 8267 §6.4.1: the COMPOUND loop notes each READ-class result, in COMPOUND order,
/// where its encoder (READ, READLINK) reported writing its data (`Compound::data`),
/// nothing reading the result back; a failed one is noted without data (its write
/// chunk comes back empty, R8267-21).
#[test]
fn r8267_read_class_results_are_noted_where_their_encoders_put_them() {
    let (h, fh, _) = setup();
    let root = h.model.root(0).unwrap();
    let owner = crate::fs::Owner { uid: 0, gid: 0 };
    let set = crate::fs::SetAttr::default();
    let lnk = h
        .model
        .symlink(&root, b"l", b"some/target", &set, owner)
        .unwrap();
    let lfh = h.model.handle(&lnk).as_bytes().to_vec();
    let (_, sid) = session(&h, b"io-noted");
    let read = |off: u64, count: u32| -> Op {
        Box::new(move |w: &mut XdrWriter| {
            w.u32(OP_READ)?;
            Stateid::ANONYMOUS.encode(w)?;
            w.u64(off)?;
            w.u32(count)
        })
    };
    let readlink: Op = Box::new(|w: &mut XdrWriter| w.u32(OP_READLINK));
    let ops = [
        seq(sid, 1, false),
        putfh(fh.clone()),
        read(0, 100),
        putfh(lfh),
        readlink,
        // READ of a symbolic link: NFS4ERR_INVAL, the COMPOUND ends here.
        read(0, 10),
    ];
    let _ = crate::ddp::take();
    let rep = run(&h, &compound_args(b"noted", 1, &ops));
    let noted = crate::ddp::take().expect("a COMPOUND that ran notes its READs");
    assert_eq!(noted.len(), 3);
    let a = noted.get(0).flatten().expect("READ data");
    let b = noted.get(1).flatten().expect("READLINK text");
    assert_eq!(&rep[a], &[5u8; 100][..]);
    assert_eq!(&rep[b], b"some/target");
    assert_eq!(
        noted.get(2),
        Some(None),
        "a failed READ takes its chunk, empty"
    );
}
