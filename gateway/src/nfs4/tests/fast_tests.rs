//! The reactor fast path (`nfs4::fast`) against the worker path (`serve`): the same
//! bytes, the same slot bookkeeping, and every unusual case left to the worker.

use super::*;
use crate::cache::{FhKey, Fill, FillData, Generations, ReadCache};
use crate::nfs4::fast::{self, View};
use crate::state::stateid::Stateid;
use engine::mem::HugePolicy;

const DATA_LEN: usize = 3 * 4096 + 100;

struct F {
    h: H,
    cache: ReadCache,
    gens: Generations,
    fh: Vec<u8>,
    node: crate::fs::Node,
}

fn pattern(seed: u8) -> Vec<u8> {
    (0..DATA_LEN)
        .map(|i| (i as u8).wrapping_mul(7) ^ seed)
        .collect()
}

fn setup() -> F {
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
        .write(&node, 0, &pattern(1), crate::fs::Stable::FileSync)
        .unwrap();
    let fh = h.model.handle(&node).as_bytes().to_vec();
    F {
        h,
        cache: ReadCache::new(64 << 10, HugePolicy::Off).unwrap(),
        gens: Generations::new(),
        fh,
        node,
    }
}

fn seq(sid: [u8; 16], seq: u32, slot: u32, cachethis: bool) -> Op {
    Box::new(move |w| {
        w.u32(OP_SEQUENCE)?;
        w.opaque_fixed(&sid)?;
        w.u32(seq)?;
        w.u32(slot)?;
        w.u32(slot)?;
        w.bool(cachethis)
    })
}

fn read_op(sid: Stateid, offset: u64, count: u32) -> Op {
    Box::new(move |w| {
        w.u32(OP_READ)?;
        sid.encode(w)?;
        w.u64(offset)?;
        w.u32(count)
    })
}

/// The Linux client's GETATTR bitmap for a regular file.
const LINUX_ATTRS: &[u32] = &[
    attrs::TYPE,
    attrs::CHANGE,
    attrs::SIZE,
    attrs::FSID,
    attrs::FILEID,
    attrs::MODE,
    attrs::NUMLINKS,
    attrs::OWNER,
    attrs::OWNER_GROUP,
    attrs::RAWDEV,
    attrs::SPACE_USED,
    attrs::TIME_ACCESS,
    attrs::TIME_METADATA,
    attrs::TIME_MODIFY,
    attrs::MOUNTED_ON_FILEID,
];

/// Runs `args` on the fast path: the COMPOUND4res, or None (→ worker). Every answer
/// locates its READ data itself (its outcome, for an RPC-over-RDMA write chunk):
/// where the reply walk finds it in the RPC reply (`fast_read_data`).
fn fast_call(f: &mut F, args: &[u8]) -> Option<Vec<u8>> {
    use crate::ulb::v4::fast_read_data;
    let mut buf = vec![0u8; 1 << 20];
    let mut w = XdrWriter::new(&mut buf);
    engine::rpc::write_accepted(&mut w, 7, engine::rpc::Accept::Success).unwrap();
    let head = w.position();
    let cred = Cred::Sys(AuthSys::new(0, 0, &[]));
    let mut v = View {
        cache: &mut f.cache,
        gens: &f.gens,
        exports: &f.h.exports,
        state: &f.h.state,
    };
    let shape = fast::parse(args)?;
    let ip = "127.0.0.1".parse().unwrap();
    let data = fast::answer_parsed(&mut v, ip, &cred, &shape, args.len(), &mut w)?;
    let n = w.position();
    buf.truncate(n);
    assert_eq!(
        engine::rpcrdma::responder::DdpList::from(data),
        fast_read_data(&buf),
        "READ data located"
    );
    Some(buf.split_off(head))
}

/// Runs `args` on the worker path and fills the cache from it as a worker does
/// (what the executing GETATTR or READ noted, `call::take_learned`: its attributes
/// and where the READ data lies in the reply).
fn worker_call(f: &mut F, args: &[u8]) -> Vec<u8> {
    let _ = crate::call::take_learned();
    let fileid = f.node.fileid;
    let stamp = f.gens.stamp(fileid);
    let rep = run(&f.h, args);
    if let Some(crate::call::Learned { attr, data }) = crate::call::take_learned() {
        assert_eq!(attr.fileid, fileid);
        let data = data.map(|(at, len)| FillData::InReply { offset: 0, at, len });
        let fill = Fill {
            fh: FhKey::new(&f.fh).unwrap(),
            export: 0,
            attr,
            stamp,
            data,
            exact: true,
        };
        f.cache.fill(&f.gens, fill, Some(&rep));
    }
    rep
}

/// Offset of SEQUENCE4resok's sr_sequenceid in a COMPOUND4res with tag `tag`.
fn seqid_at(tag: &[u8]) -> usize {
    4 + 4 + tag.len().div_ceil(4) * 4 + 4 + 4 + 4 + 16
}

fn getattr_args(sid: [u8; 16], n: u32, fh: &[u8], bits: &[u32]) -> Vec<u8> {
    compound_args(
        b"t",
        1,
        &[seq(sid, n, 0, false), putfh(fh.to_vec()), getattr(bits)],
    )
}

fn read_args(sid: [u8; 16], n: u32, fh: &[u8], st: Stateid, off: u64, count: u32) -> Vec<u8> {
    compound_args(
        b"t",
        1,
        &[
            seq(sid, n, 0, false),
            putfh(fh.to_vec()),
            read_op(st, off, count),
        ],
    )
}

/// `SEQUENCE, PUTFH, READ_PLUS` under minor version `minor` (RFC 7862 §15.10).
fn read_plus_args(
    minor: u32,
    sid: [u8; 16],
    n: u32,
    fh: &[u8],
    st: Stateid,
    off: u64,
    count: u32,
) -> Vec<u8> {
    let read_plus: Op = Box::new(move |w| {
        w.u32(crate::nfs4::ops::OP_READ_PLUS)?;
        st.encode(w)?;
        w.u64(off)?;
        w.u32(count)
    });
    compound_args(
        b"t",
        minor,
        &[seq(sid, n, 0, false), putfh(fh.to_vec()), read_plus],
    )
}

/// Asserts `fast` equals `worker` but for the sequence id word (`fast_seq` there).
fn same_but_seqid(worker: &[u8], fast: &[u8], fast_seq: u32) {
    let at = seqid_at(b"t");
    let mut w = worker.to_vec();
    w[at..at + 4].copy_from_slice(&fast_seq.to_be_bytes());
    assert_eq!(w, fast, "fast path reply differs from the worker's");
}

#[test]
fn getattr_bytes_equal_the_workers_and_slot_rules_hold() {
    let mut f = setup();
    let (_, sid) = session(&f.h, b"fast-a");
    let fh = f.fh.clone();
    // Cold cache: the worker answers (and fills the cache).
    assert!(fast_call(&mut f, &getattr_args(sid, 1, &fh, LINUX_ATTRS)).is_none());
    let worker = worker_call(&mut f, &getattr_args(sid, 1, &fh, LINUX_ATTRS));
    assert_eq!(
        Nfsstat4::decode(&mut XdrReader::new(&worker)).unwrap(),
        NFS4_OK
    );
    // Warm: the fast path answers seqid 2 with the worker's bytes.
    let hits = f.cache.stats().hits;
    let fast = fast_call(&mut f, &getattr_args(sid, 2, &fh, LINUX_ATTRS)).expect("fast hit");
    same_but_seqid(&worker, &fast, 2);
    assert_eq!(f.cache.stats().hits, hits + 1, "counted as a cache hit");
    // The same seqid again is a retransmission: not for the fast path; the worker
    // replays the stored reply, byte for byte.
    assert!(fast_call(&mut f, &getattr_args(sid, 2, &fh, LINUX_ATTRS)).is_none());
    assert_eq!(run(&f.h, &getattr_args(sid, 2, &fh, LINUX_ATTRS)), fast);
    // The next seqid is a new request (the slot advanced): the worker accepts it.
    let (st, _) = call(&f.h, &[seq(sid, 3, 0, false), putfh(fh.clone())]);
    assert_eq!(st, NFS4_OK);
    // A stale or skipped seqid, sa_cachethis, another slot's seqid: the worker's.
    assert!(fast_call(&mut f, &getattr_args(sid, 3, &fh, LINUX_ATTRS)).is_none());
    assert!(fast_call(&mut f, &getattr_args(sid, 5, &fh, LINUX_ATTRS)).is_none());
    let cached = compound_args(
        b"t",
        1,
        &[
            seq(sid, 4, 0, true),
            putfh(fh.clone()),
            getattr(LINUX_ATTRS),
        ],
    );
    assert!(fast_call(&mut f, &cached).is_none());
    // Attributes the reactor does not hold (LEASE_TIME, FSSTAT) and write-only ones.
    for bits in [
        &[attrs::SIZE, attrs::LEASE_TIME][..],
        &[attrs::SPACE_FREE],
        &[attrs::TIME_MODIFY_SET],
    ] {
        assert!(fast_call(&mut f, &getattr_args(sid, 4, &fh, bits)).is_none());
    }
    // A busy slot (a worker runs seqid 4): the fast path leaves it alone.
    let s = f.h.state.clients.session(&sid).unwrap();
    let claim = match s.use_slot(0, 4, Default::default()).unwrap() {
        crate::state::sessions::SlotUse::New(c) => c,
        _ => panic!("new"),
    };
    assert!(fast_call(&mut f, &getattr_args(sid, 5, &fh, LINUX_ATTRS)).is_none());
    claim.finish(None);
    let fast = fast_call(&mut f, &getattr_args(sid, 5, &fh, LINUX_ATTRS)).expect("hit");
    same_but_seqid(&worker, &fast, 5);
    // Unknown session, slot beyond the table, a longer COMPOUND: the worker's.
    assert!(fast_call(&mut f, &getattr_args([9; 16], 1, &fh, LINUX_ATTRS)).is_none());
    let other_slot = compound_args(
        b"t",
        1,
        &[
            seq(sid, 1, 64, false),
            putfh(fh.clone()),
            getattr(LINUX_ATTRS),
        ],
    );
    assert!(fast_call(&mut f, &other_slot).is_none());
    let four = compound_args(
        b"t",
        1,
        &[
            seq(sid, 6, 0, false),
            putfh(fh.clone()),
            getattr(LINUX_ATTRS),
            op0(OP_GETFH),
        ],
    );
    assert!(fast_call(&mut f, &four).is_none());
    // A bumped generation (a write by anyone) makes the entry stale.
    f.gens.bump_file(f.node.fileid);
    assert!(fast_call(&mut f, &getattr_args(sid, 6, &fh, LINUX_ATTRS)).is_none());
}

#[test]
fn read_bytes_equal_the_workers_and_stateids_are_checked() {
    let mut f = setup();
    let (cid_a, sid_a) = session(&f.h, b"fast-b");
    let (cid_b, sid_b) = session(&f.h, b"fast-c");
    let fh = f.fh.clone();
    let anon = Stateid::ANONYMOUS;
    let count = DATA_LEN as u32;
    // The worker's READ of the whole file fills attributes and pages.
    let worker = worker_call(&mut f, &read_args(sid_a, 1, &fh, anon, 0, count));
    assert_eq!(
        Nfsstat4::decode(&mut XdrReader::new(&worker)).unwrap(),
        NFS4_OK
    );
    let fast = fast_call(&mut f, &read_args(sid_a, 2, &fh, anon, 0, count)).expect("hit");
    same_but_seqid(&worker, &fast, 2);
    // A range inside, and one past the end (eof).
    let w2 = run(&f.h, &read_args(sid_a, 3, &fh, anon, 4096, 4096));
    let f2 = fast_call(&mut f, &read_args(sid_a, 4, &fh, anon, 4096, 4096)).expect("hit");
    same_but_seqid(&w2, &f2, 4);
    let w3 = run(&f.h, &read_args(sid_a, 5, &fh, anon, 3 * 4096, 4096));
    let f3 = fast_call(&mut f, &read_args(sid_a, 6, &fh, anon, 3 * 4096, 4096)).expect("hit");
    same_but_seqid(&w3, &f3, 6);
    // An open stateid of client A: accepted for A; for B it is the worker's error.
    let open =
        f.h.state
            .opens
            .open(cid_a, b"owner", f.node.fileid, 1, 0)
            .unwrap();
    assert!(fast_call(&mut f, &read_args(sid_a, 7, &fh, open, 0, 4096)).is_some());
    assert!(fast_call(&mut f, &read_args(sid_b, 1, &fh, open, 0, 4096)).is_none());
    let (st, _) = call(
        &f.h,
        &[
            seq(sid_b, 1, 0, false),
            putfh(fh.clone()),
            read_op(open, 0, 4096),
        ],
    );
    assert_ne!(st, NFS4_OK);
    let _ = cid_b;
    // Closed: the worker's error.
    f.h.state.opens.close(cid_a, &open, f.node.fileid).unwrap();
    assert!(fast_call(&mut f, &read_args(sid_a, 8, &fh, open, 0, 4096)).is_none());
    let (st, _) = call(
        &f.h,
        &[
            seq(sid_a, 8, 0, false),
            putfh(fh.clone()),
            read_op(open, 0, 4096),
        ],
    );
    assert_ne!(st, NFS4_OK);
    // The CURRENT stateid (unset after PUTFH) → the worker's BAD_STATEID.
    assert!(fast_call(&mut f, &read_args(sid_a, 9, &fh, Stateid::CURRENT, 0, 4096)).is_none());
    // A range not cached (beyond a 64 KiB cached read): the worker.
    assert!(fast_call(&mut f, &read_args(sid_a, 9, &fh, anon, 0, 1 << 20)).is_none());
}

/// READ_PLUS (RFC 7862 §15.10) from the cache: the worker's bytes (one data
/// segment for a file without holes), eof at the end, no segment past it; under
/// minor version 1 it is the worker's (OP_ILLEGAL), never the cache's.
#[test]
fn read_plus_bytes_equal_the_workers() {
    let mut f = setup();
    let (_, sid) = session(&f.h, b"fast-rp");
    let fh = f.fh.clone();
    let anon = Stateid::ANONYMOUS;
    let count = DATA_LEN as u32;
    // A worker's READ of the whole file fills attributes and pages.
    worker_call(&mut f, &read_args(sid, 1, &fh, anon, 0, count));
    let mut n = 2;
    for (off, len) in [
        (0, count),
        (4096, 4096),
        (3 * 4096, 4096),
        (DATA_LEN as u64, 10),
    ] {
        let worker = run(&f.h, &read_plus_args(2, sid, n, &fh, anon, off, len));
        let fast = fast_call(&mut f, &read_plus_args(2, sid, n + 1, &fh, anon, off, len))
            .unwrap_or_else(|| panic!("READ_PLUS at {off} answered from the cache"));
        same_but_seqid(&worker, &fast, n + 1);
        n += 2;
    }
    assert!(fast_call(&mut f, &read_plus_args(1, sid, n, &fh, anon, 0, 4096)).is_none());
}

/// A READ_PLUS-only client (Linux ≥ 6.2) warms the cache itself: the worker's
/// READ_PLUS of one data segment fills it as a READ does.
#[test]
fn a_workers_read_plus_fills_the_cache() {
    let mut f = setup();
    let (_, sid) = session(&f.h, b"fast-rp2");
    let fh = f.fh.clone();
    let anon = Stateid::ANONYMOUS;
    let args = |n| read_plus_args(2, sid, n, &fh, anon, 0, 4096);
    assert!(fast_call(&mut f, &args(1)).is_none(), "nothing cached yet");
    let worker = worker_call(&mut f, &args(1));
    let fast = fast_call(&mut f, &args(2)).expect("filled by the worker's READ_PLUS");
    same_but_seqid(&worker, &fast, 2);
}

#[test]
fn a_write_behind_the_cache_is_seen_after_the_worker_refills() {
    let mut f = setup();
    let (_, sid) = session(&f.h, b"fast-d");
    let fh = f.fh.clone();
    let anon = Stateid::ANONYMOUS;
    let count = DATA_LEN as u32;
    worker_call(&mut f, &read_args(sid, 1, &fh, anon, 0, count));
    assert!(fast_call(&mut f, &read_args(sid, 2, &fh, anon, 0, count)).is_some());
    // An NFSv3 WRITE: the worker bumps the file's generation around it (CacheEffect).
    f.gens.bump_file(f.node.fileid);
    f.h.model
        .write(&f.node, 0, &pattern(2), crate::fs::Stable::FileSync)
        .unwrap();
    f.gens.bump_file(f.node.fileid);
    assert!(fast_call(&mut f, &read_args(sid, 3, &fh, anon, 0, count)).is_none());
    worker_call(&mut f, &read_args(sid, 3, &fh, anon, 0, count));
    let rep = fast_call(&mut f, &read_args(sid, 4, &fh, anon, 0, count)).expect("hit");
    let mut r = results(&rep);
    r.skip(8 + 16 + 20 + 8).unwrap();
    assert_eq!(
        (r.u32().unwrap(), Nfsstat4::decode(&mut r).unwrap()),
        (OP_READ, NFS4_OK)
    );
    assert!(r.bool().unwrap());
    assert_eq!(r.opaque_var(DATA_LEN).unwrap(), &pattern(2)[..]);
}

#[test]
fn parse_takes_only_the_two_shapes() {
    let sid = [1; 16];
    let fh = vec![1u8; 20];
    assert!(fast::parse(&getattr_args(sid, 1, &fh, LINUX_ATTRS)).is_some());
    assert!(fast::parse(&read_args(sid, 1, &fh, Stateid::ANONYMOUS, 0, 1)).is_some());
    let mut trailing = getattr_args(sid, 1, &fh, LINUX_ATTRS);
    trailing.extend_from_slice(&[0; 4]);
    assert!(fast::parse(&trailing).is_none());
    let long_tag = compound_args(
        &[b'x'; 100],
        1,
        &[
            seq(sid, 1, 0, false),
            putfh(fh.clone()),
            getattr(LINUX_ATTRS),
        ],
    );
    assert!(fast::parse(&long_tag).is_none());
    let minor0 = compound_args(
        b"",
        0,
        &[
            seq(sid, 1, 0, false),
            putfh(fh.clone()),
            getattr(LINUX_ATTRS),
        ],
    );
    assert!(fast::parse(&minor0).is_none());
    // Every truncation is rejected, never a panic.
    let a = read_args(sid, 1, &fh, Stateid::ANONYMOUS, u64::MAX, u32::MAX);
    for n in 0..a.len() {
        assert!(fast::parse(&a[..n]).is_none());
    }
}

/// The inlined parser (`fast::parse`) against the XdrReader-based one it replaced:
/// the same decision and the same fields for every single-byte change (0, 1, 0xff,
/// one bit flipped) and every truncation of a READ and a GETATTR COMPOUND (RFC 8881
/// §16.2.1 COMPOUND4args; R8881 fast path: anything unusual goes to the worker).
#[test]
fn parse_inlined_matches_the_xdr_reader_parser_on_every_mutation() {
    use crate::nfs4::attrs;
    use crate::nfs4::ops::{OP_GETATTR, OP_PUTFH, OP_READ, OP_READ_PLUS, OP_SEQUENCE};
    use engine::xdr::XdrReader;
    type Fields<'a> = (&'a [u8], [u8; 16], u32, u32, bool, &'a [u8], fast::Last<'a>);
    fn reference(args: &[u8]) -> Option<Fields<'_>> {
        let mut r = XdrReader::new(args);
        let tag = r.opaque_var(fast::TAG_MAX).ok()?;
        if r.u32().ok()? != 1 || r.u32().ok()? != 3 || r.u32().ok()? != OP_SEQUENCE {
            return None;
        }
        let mut sid = [0u8; 16];
        sid.copy_from_slice(r.opaque_fixed(16).ok()?);
        let (seqid, slot, _) = (r.u32().ok()?, r.u32().ok()?, r.u32().ok()?);
        let cachethis = r.bool().ok()?;
        if r.u32().ok()? != OP_PUTFH {
            return None;
        }
        let fh = r.opaque_var(crate::nfs4::FH4_MAX).ok()?;
        let last = match r.u32().ok()? {
            OP_GETATTR => match attrs::get_bitmap(&mut r).ok()? {
                (b, false) => fast::Last::Getattr(b),
                _ => return None,
            },
            op @ (OP_READ | OP_READ_PLUS) => fast::Last::Read {
                stateid: Stateid::decode(&mut r).ok()?,
                offset: r.u64().ok()?,
                count: r.u32().ok()?,
                plus: op == OP_READ_PLUS,
            },
            _ => return None,
        };
        (r.remaining() == 0).then_some((tag, sid, seqid, slot, cachethis, fh, last))
    }
    fn fields<'a>(s: fast::Shape<'a>) -> Fields<'a> {
        (
            s.tag,
            s.sessionid,
            s.seqid,
            s.slot,
            s.cachethis,
            s.fh,
            s.last,
        )
    }
    let sid = [7; 16];
    let fh = vec![3u8; 26];
    let st = Stateid {
        seqid: 2,
        other: [9; 12],
    };
    let cases = [
        read_args(sid, 5, &fh, st, 8192, 4096),
        getattr_args(sid, 5, &fh, LINUX_ATTRS),
        read_plus_args(1, sid, 5, &fh, st, 8192, 4096),
    ];
    let mut checked = 0;
    // `fast::parse` is the plan's fast lane (`Plan::with_shape`); `lane_agrees` holds
    // it to the general walk and the decode at that walk's offsets too.
    use crate::nfs4::skip_prop_tests::oracles::lane_agrees;
    for a in &cases {
        assert!(fast::parse(a).is_some());
        assert!(lane_agrees(a));
        for n in 0..=a.len() {
            assert_eq!(fast::parse(&a[..n]).map(fields), reference(&a[..n]));
            lane_agrees(&a[..n]);
        }
        for i in 0..a.len() {
            for v in [0u8, 1, 0xff, a[i] ^ 1, a[i] ^ 0x80] {
                let mut m = a.clone();
                m[i] = v;
                assert_eq!(fast::parse(&m).map(fields), reference(&m), "byte {i} = {v}");
                lane_agrees(&m);
                checked += 1;
            }
        }
    }
    assert!(checked > 500);
}

#[test]
fn an_expired_lease_is_left_to_the_worker() {
    // Courtesy clients (`nfs4.courtesy_s`): the worker revives the client; with 0 it
    // purges it (BADSESSION).
    for (courtesy, want) in [(86_400, NFS4_OK), (0, NFS4ERR_BADSESSION)] {
        let mut f = setup();
        let limits = crate::state::clients::Limits {
            lease: std::time::Duration::from_millis(200),
            courtesy: std::time::Duration::from_secs(courtesy),
            ..Default::default()
        };
        f.h.state = State::with_config(limits, None);
        let (_, sid) = session(&f.h, b"fast-e");
        let fh = f.fh.clone();
        worker_call(&mut f, &getattr_args(sid, 1, &fh, LINUX_ATTRS));
        assert!(fast_call(&mut f, &getattr_args(sid, 2, &fh, LINUX_ATTRS)).is_some());
        std::thread::sleep(std::time::Duration::from_millis(300));
        // The reactor neither renews, revives nor purges: the worker does.
        assert!(fast_call(&mut f, &getattr_args(sid, 3, &fh, LINUX_ATTRS)).is_none());
        assert!(
            f.h.state.clients.session(&sid).is_some(),
            "not purged on the reactor"
        );
        let rep = run(&f.h, &getattr_args(sid, 3, &fh, LINUX_ATTRS));
        assert_eq!(Nfsstat4::decode(&mut XdrReader::new(&rep)).unwrap(), want);
        if want == NFS4_OK {
            assert!(
                fast_call(&mut f, &getattr_args(sid, 4, &fh, LINUX_ATTRS)).is_some(),
                "renewed by the worker: the fast path serves it again"
            );
        }
    }
}
