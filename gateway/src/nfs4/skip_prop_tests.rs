//! Property tests of the one walk over a COMPOUND before it runs: `skip::op_args`,
//! the plan built on it (`plan::Plan`: reply bound, operations, DDP-eligible items)
//! and the RFC 8267 check in `crate::ulb::v4` that matches reduced items against the
//! plan (RFC 8881 §16.2.1 COMPOUND4args, the operations' arguments in §18). The plan
//! agrees with the passes it replaced (`tests/plan_oracles.rs`) on every corpus.
//!
//! Generated COMPOUNDs of well-formed operations are skipped exactly, scanned to a
//! reply bound within `MAX_REPLY` (what they change the file model reports as it
//! runs: `fs::ChangeObserver`), and pass the
//! DDP walk with their WRITE data and NF4LNK linkdata reduced; arbitrary and mutated
//! ones never panic and keep the bound. Cases: 2 000 by default, `PROPTEST_CASES`
//! for more (docs/fuzzing.md "Property tests").

use super::ops::*;
use super::plan::{Kind, Plan, MAX_REPLY};
use super::skip::{self, STATEID};
use engine::rpc::{self, Cred};
use engine::rpcrdma::responder::Reduced;
use engine::xdr::{XdrReader, XdrResult, XdrWriter};
use proptest::prelude::*;

fn config() -> ProptestConfig {
    let mut c = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = 2_000;
    }
    c
}

/// One operation with well-formed arguments, in the terms the properties need.
#[derive(Debug, Clone)]
struct Op {
    op: u32,
    /// The encoded arguments (without the operation number).
    args: Vec<u8>,
    /// Offset in `args` of a DDP-eligible opaque's length word (RFC 8267 §6.1).
    eligible: Option<usize>,
    /// READ count or READDIR maxcount: reply bytes the client asked for.
    asks: usize,
}

fn op(op: u32, args: Vec<u8>) -> Op {
    Op {
        op,
        args,
        eligible: None,
        asks: 0,
    }
}

/// Encodes with engine's XDR writer into a vector.
fn enc(f: impl FnOnce(&mut XdrWriter) -> XdrResult<()>) -> Vec<u8> {
    let mut buf = vec![0u8; 64 << 10];
    let mut w = XdrWriter::new(&mut buf);
    f(&mut w).unwrap();
    let n = w.position();
    buf.truncate(n);
    buf
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

/// A bitmap4 of at most 8 words (`skip`'s `BITMAP_MAX`).
fn bitmap() -> impl Strategy<Value = Vec<u32>> {
    proptest::collection::vec(any::<u32>(), 0..=8)
}

fn put_bitmap(w: &mut XdrWriter, bits: &[u32]) -> XdrResult<()> {
    w.u32(bits.len() as u32)?;
    bits.iter().try_for_each(|&b| w.u32(b))
}

/// fattr4: a bitmap4 and the attribute values as an opaque.
type Fattr = (Vec<u32>, Vec<u8>);

fn fattr() -> impl Strategy<Value = Fattr> {
    (bitmap(), bytes(40))
}

fn put_fattr(w: &mut XdrWriter, (bits, vals): &Fattr) -> XdrResult<()> {
    put_bitmap(w, bits)?;
    w.opaque_var(vals)
}

/// Operations whose arguments are a fixed number of bytes (RFC 8881 §18).
fn fixed_size_op() -> impl Strategy<Value = Op> {
    let sizes = [
        (OP_ACCESS, 4),
        (OP_CLOSE, 4 + STATEID),
        (OP_COMMIT, 12),
        (OP_DELEGRETURN, STATEID),
        (OP_FREE_STATEID, STATEID),
        (OP_LOCKU, 8 + STATEID + 16),
        (OP_OPEN_DOWNGRADE, STATEID + 12),
        (OP_SEQUENCE, 32),
        (OP_DESTROY_SESSION, 16),
        (OP_DESTROY_CLIENTID, 8),
        (OP_SECINFO_NO_NAME, 4),
        (OP_RECLAIM_COMPLETE, 4),
        (OP_GETFH, 0),
        (OP_PUTROOTFH, 0),
        (OP_SAVEFH, 0),
        (OP_RESTOREFH, 0),
        (OP_LOOKUPP, 0),
        (OP_READLINK, 0),
    ];
    (proptest::sample::select(sizes.to_vec()), any::<u8>())
        .prop_map(|((code, n), fill)| op(code, vec![fill; n]))
}

/// Operations taking a name or a handle, and RENAME.
fn named_op() -> impl Strategy<Value = Op> {
    let codes = [OP_PUTFH, OP_LOOKUP, OP_REMOVE, OP_SECINFO, OP_LINK];
    let one = (proptest::sample::select(codes.to_vec()), bytes(140))
        .prop_map(|(code, a)| op(code, enc(|w| w.opaque_var(&a))));
    let rename = (bytes(40), bytes(40)).prop_map(|(a, b)| {
        op(
            OP_RENAME,
            enc(|w| {
                w.opaque_var(&a)?;
                w.opaque_var(&b)
            }),
        )
    });
    prop_oneof![4 => one, 1 => rename]
}

/// READ, READDIR, WRITE, GETATTR, SETATTR, VERIFY: what the scan sizes and names.
fn io_op() -> impl Strategy<Value = Op> {
    let read = (any::<u64>(), any::<u32>()).prop_map(|(off, count)| Op {
        asks: count as usize,
        ..op(
            OP_READ,
            enc(|w| {
                w.opaque_fixed(&[1; STATEID])?;
                w.u64(off)?;
                w.u32(count)
            }),
        )
    });
    let readdir = (any::<u32>(), any::<u32>(), bitmap()).prop_map(|(dircount, max, bits)| Op {
        asks: max as usize,
        ..op(
            OP_READDIR,
            enc(|w| {
                w.u64(0)?;
                w.opaque_fixed(&[0; 8])?;
                w.u32(dircount)?;
                w.u32(max)?;
                put_bitmap(w, &bits)
            }),
        )
    });
    let write = (any::<u64>(), 0u32..3, bytes(300)).prop_map(|(off, stable, data)| Op {
        eligible: Some(STATEID + 8 + 4),
        ..op(
            OP_WRITE,
            enc(|w| {
                w.opaque_fixed(&[2; STATEID])?;
                w.u64(off)?;
                w.u32(stable)?;
                w.opaque_var(&data)
            }),
        )
    });
    let getattr = bitmap().prop_map(|bits| op(OP_GETATTR, enc(|w| put_bitmap(w, &bits))));
    let setattr = fattr().prop_map(|f| {
        let args = enc(|w| {
            w.opaque_fixed(&[3; STATEID])?;
            put_fattr(w, &f)
        });
        op(OP_SETATTR, args)
    });
    let verify = (prop_oneof![Just(OP_VERIFY), Just(OP_NVERIFY)], fattr())
        .prop_map(|(code, f)| op(code, enc(|w| put_fattr(w, &f))));
    prop_oneof![read, readdir, write, getattr, setattr, verify]
}

/// CREATE4args (RFC 8881 §18.4.1): NF4LNK carries DDP-eligible linkdata.
fn create_op() -> impl Strategy<Value = Op> {
    (1u32..=7, bytes(100), bytes(20), fattr()).prop_map(|(kind, link, name, f)| {
        let args = enc(|w| {
            w.u32(kind)?;
            match kind {
                5 => w.opaque_var(&link)?,
                3 | 4 => w.u64(0x0102_0304)?,
                _ => {}
            }
            w.opaque_var(&name)?;
            put_fattr(w, &f)
        });
        Op {
            eligible: (kind == 5).then_some(4),
            ..op(OP_CREATE, args)
        }
    })
}

/// OPEN4args (RFC 8881 §18.16.1) with every createhow4 and open_claim4 arm.
fn open_op() -> impl Strategy<Value = Op> {
    let how = prop_oneof![Just(None), (0u32..4).prop_map(Some)];
    (how, 0u32..7, bytes(30), bytes(30), fattr()).prop_map(|(how, claim, owner, name, f)| {
        let args = enc(|w| {
            w.u32(0)?; // seqid
            w.u32(1)?; // share_access
            w.u32(0)?; // share_deny
            w.u64(9)?; // clientid
            w.opaque_var(&owner)?;
            w.u32(how.is_some() as u32)?;
            match how {
                Some(m @ (0 | 1)) => w.u32(m).and_then(|()| put_fattr(w, &f))?,
                Some(2) => w.u32(2).and_then(|()| w.u64(5))?,
                Some(m) => w
                    .u32(m)
                    .and_then(|()| w.u64(5))
                    .and_then(|()| put_fattr(w, &f))?,
                None => {}
            }
            w.u32(claim)?;
            match claim {
                0 | 3 => w.opaque_var(&name),
                1 => w.u32(1),
                2 => w
                    .opaque_fixed(&[4; STATEID])
                    .and_then(|()| w.opaque_var(&name)),
                5 => w.opaque_fixed(&[4; STATEID]),
                _ => Ok(()),
            }
        });
        op(OP_OPEN, args)
    })
}

/// LOCK, LOCKT, TEST_STATEID, RELEASE_LOCKOWNER (RFC 8881 §18.10, §18.11, §18.48,
/// §18.52.1 (v4.0 only, still skipped)).
fn lock_op() -> impl Strategy<Value = Op> {
    let lock = (any::<bool>(), bytes(30)).prop_map(|(new, owner)| {
        let args = enc(|w| {
            w.u32(2)?; // WRITE_LT
            w.bool(false)?;
            w.u64(0)?;
            w.u64(u64::MAX)?;
            w.bool(new)?;
            if new {
                w.u32(1)?;
                w.opaque_fixed(&[5; STATEID])?;
                w.u32(0)?;
                w.u64(9)?;
                w.opaque_var(&owner)
            } else {
                w.opaque_fixed(&[6; STATEID])?;
                w.u32(1)
            }
        });
        op(OP_LOCK, args)
    });
    let lockt = bytes(30).prop_map(|owner| {
        let args = enc(|w| {
            w.u32(1)?;
            w.u64(0)?;
            w.u64(10)?;
            w.u64(9)?;
            w.opaque_var(&owner)
        });
        op(OP_LOCKT, args)
    });
    let test = (0usize..5).prop_map(|n| {
        let args = enc(|w| {
            w.u32(n as u32)?;
            (0..n).try_for_each(|_| w.opaque_fixed(&[7; STATEID]))
        });
        op(OP_TEST_STATEID, args)
    });
    let release = bytes(30).prop_map(|owner| {
        op(
            OP_RELEASE_LOCKOWNER,
            enc(|w| w.u64(9).and_then(|()| w.opaque_var(&owner))),
        )
    });
    prop_oneof![lock, lockt, test, release]
}

fn any_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => fixed_size_op(),
        3 => named_op(),
        4 => io_op(),
        1 => create_op(),
        1 => open_op(),
        1 => lock_op(),
    ]
}

/// COMPOUND4args: tag, minorversion 1, the operations; with where each operation's
/// arguments start.
fn compound(tag: &[u8], ops: &[Op]) -> (Vec<u8>, Vec<usize>) {
    let mut b = enc(|w| {
        w.opaque_var(tag)?;
        w.u32(1)?;
        w.u32(ops.len() as u32)
    });
    let mut starts = vec![];
    for o in ops {
        b.extend_from_slice(&o.op.to_be_bytes());
        starts.push(b.len());
        b.extend_from_slice(&o.args);
    }
    (b, starts)
}

/// Operations after which `scan` looks no further (session and client operations).
fn ends_scan(op: u32) -> bool {
    matches!(op, OP_DESTROY_SESSION | OP_DESTROY_CLIENTID)
}

#[path = "tests/plan_oracles.rs"]
pub(in crate::nfs4) mod oracles;

/// Checks what must hold for any input to the plan, and that it sizes the reply as
/// the old scan did.
fn scan_bounded(args: &[u8]) -> Plan {
    let s = Plan::of(args);
    assert!(
        s.reply > 0 && s.reply <= MAX_REPLY,
        "reply bound {}",
        s.reply
    );
    assert_eq!(
        s.reply,
        oracles::scan(args),
        "reply bound against the old scan"
    );
    assert!(s.ops().len() <= s.nops as usize);
    oracles::lane_agrees(args);
    s
}

/// SEQUENCE4args whose sa_cachethis word is `cachethis` (an XDR bool, or not).
fn sequence(cachethis: u32) -> Op {
    op(
        OP_SEQUENCE,
        enc(|w| {
            w.opaque_fixed(&[5; 16])?;
            w.u32(7)?;
            w.u32(1)?;
            w.u32(3)?;
            w.u32(cachethis)
        }),
    )
}

/// The operations after SEQUENCE, PUTFH of the shapes the plan's fast lane takes:
/// GETATTR, READ, COMMIT, WRITE with or without a GETATTR after it.
fn lane_tail() -> impl Strategy<Value = Vec<Op>> {
    let getattr = |bits: &[u32]| op(OP_GETATTR, enc(|w| put_bitmap(w, bits)));
    let read = (any::<u64>(), any::<u32>()).prop_map(|(off, count)| {
        let args = enc(|w| {
            w.opaque_fixed(&[1; STATEID])?;
            w.u64(off)?;
            w.u32(count)
        });
        vec![op(OP_READ, args)]
    });
    let commit = (any::<u64>(), any::<u32>()).prop_map(|(off, count)| {
        vec![op(
            OP_COMMIT,
            enc(|w| w.u64(off).and_then(|_| w.u32(count))),
        )]
    });
    let write = (0u32..4, bytes(40), proptest::option::of(bitmap())).prop_map(
        move |(stable, data, then)| {
            let args = enc(|w| {
                w.opaque_fixed(&[2; STATEID])?;
                w.u64(9)?;
                w.u32(stable)?;
                w.opaque_var(&data)
            });
            let mut ops = vec![op(OP_WRITE, args)];
            ops.extend(then.map(|b| getattr(&b)));
            ops
        },
    );
    prop_oneof![
        bitmap().prop_map(move |b| vec![getattr(&b)]),
        read,
        commit,
        write
    ]
}

/// The plan's RFC 8267 check against the old walk on the record `rec` (arguments at
/// `at`), where the old walk's answer is defined the same: a tag within
/// NFS4_OPAQUE_LIMIT (the worker refuses longer ones anyway) and no more eligible
/// items than a plan keeps.
fn ddp_agrees(rec: &[u8], at: usize, reduced: &[Reduced]) {
    let new =
        crate::ulb::v4::check_compound(rec, reduced, crate::nfs4::plan::Plan::with_ddp).is_ok();
    let tag_len = XdrReader::new(&rec[at..]).u32().unwrap_or(0);
    if tag_len > 1024 || Plan::with_ddp(&rec[at..]).1.cut() {
        return;
    }
    assert_eq!(new, oracles::ddp_walk(rec, at, reduced), "{reduced:?}");
}

/// A mutation of a valid COMPOUND: a word overwritten (edge or random), a cut, bytes
/// spliced in.
#[derive(Debug, Clone)]
enum Mutation {
    Word(usize, u32),
    Cut(usize),
    Insert(usize, Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let word = prop_oneof![
        Just(0u32),
        Just(1),
        Just(9),
        Just(OP_WRITE),
        Just(OP_READ),
        Just(0x7fff_ffff),
        Just(u32::MAX),
        Just(u32::MAX - 3),
        any::<u32>()
    ];
    prop_oneof![
        (any::<usize>(), word).prop_map(|(i, w)| Mutation::Word(i, w)),
        any::<usize>().prop_map(Mutation::Cut),
        (any::<usize>(), bytes(12)).prop_map(|(i, b)| Mutation::Insert(i, b)),
    ]
}

fn mutate(mut b: Vec<u8>, muts: &[Mutation]) -> Vec<u8> {
    for m in muts {
        match m {
            Mutation::Word(i, w) if b.len() >= 4 => {
                let at = (i % (b.len() / 4)) * 4;
                b[at..at + 4].copy_from_slice(&w.to_be_bytes());
            }
            Mutation::Word(..) => {}
            Mutation::Cut(n) => b.truncate(n % (b.len() + 1)),
            Mutation::Insert(i, x) => {
                let at = i % (b.len() + 1);
                b.splice(at..at, x.iter().copied());
            }
        }
    }
    b
}

/// An NFSv4 COMPOUND call record (from the XID on) around `args`, and where the
/// arguments start in it.
fn call_record(args: &[u8]) -> (Vec<u8>, usize) {
    let mut rec = enc(|w| rpc::write_call(w, 1, nfs_wire::NFS_PROGRAM, 4, 1, &Cred::None));
    let at = rec.len();
    rec.extend_from_slice(args);
    (rec, at)
}

proptest! {
    #![proptest_config(config())]

    /// Every generated operation's arguments are skipped exactly, and the eligible
    /// callback sees exactly its DDP-eligible opaque.
    #[test]
    fn well_formed_arguments_are_skipped_exactly(o in any_op()) {
        let mut r = XdrReader::new(&o.args);
        let mut seen = vec![];
        skip::op_args(o.op, &mut r, &mut |r| {
            seen.push(r.position());
            Ok(())
        })
        .unwrap();
        prop_assert_eq!(r.remaining(), 0);
        prop_assert_eq!(seen, o.eligible.into_iter().collect::<Vec<_>>());
    }

    /// Well-formed COMPOUNDs: the reply bound covers the data asked for (up to
    /// `MAX_REPLY`).
    #[test]
    fn well_formed_compounds_scan_within_bounds(
        tag in bytes(20),
        ops in proptest::collection::vec(any_op(), 0..12),
    ) {
        let (args, _) = compound(&tag, &ops);
        let s = scan_bounded(&args);
        let scanned = ops.iter().take_while(|o| !ends_scan(o.op));
        let asked: usize = scanned.clone().map(|o| o.asks.min(MAX_REPLY)).sum();
        prop_assert!(s.reply >= asked.min(MAX_REPLY));
    }

    /// The RFC 8267 walk accepts each WRITE's data and NF4LNK linkdata reduced (with
    /// or without pad) and refuses an item placed anywhere else.
    #[test]
    fn ddp_walk_accepts_exactly_the_eligible_items(
        ops in proptest::collection::vec(any_op(), 1..10),
        padded_len in any::<bool>(),
        off_by in 1u32..8,
    ) {
        let (args, starts) = compound(b"", &ops);
        let (rec, at) = call_record(&args);
        let mut reduced = vec![];
        for (o, s) in ops.iter().zip(&starts) {
            if let Some(e) = o.eligible {
                let len_at = at + s + e;
                let len = u32::from_be_bytes(rec[len_at..len_at + 4].try_into().unwrap());
                let len = if padded_len { len.next_multiple_of(4) } else { len };
                reduced.push(Reduced { position: (len_at + 4) as u32, len });
            }
        }
        prop_assert!(crate::ulb::v4::check_compound(&rec, &reduced, crate::nfs4::plan::Plan::with_ddp).is_ok());
        ddp_agrees(&rec, at, &reduced);
        // The plan lists exactly those items, and every operation with its offset.
        let (plan, ddp) = Plan::with_ddp(&args);
        prop_assert_eq!(ddp.eligible().len(), reduced.len());
        prop_assert_eq!(plan.ops().len(), ops.len().min(super::plan::OPS_MAX));
        for ((o, s), p) in ops.iter().zip(&starts).zip(plan.ops()) {
            prop_assert_eq!((o.op, *s as u32), (p.code, p.at));
        }
        // The same item a few bytes off is inside no eligible field's data start.
        if let Some(first) = reduced.first_mut() {
            first.position += off_by;
            prop_assert!(crate::ulb::v4::check_compound(&rec, &reduced, crate::nfs4::plan::Plan::with_ddp).is_err());
            ddp_agrees(&rec, at, &reduced);
        }
    }

    /// Mutated well-formed COMPOUNDs: no pass panics and the reply bound holds.
    #[test]
    fn mutated_compounds_never_panic(
        ops in proptest::collection::vec(any_op(), 0..10),
        muts in proptest::collection::vec(mutation(), 1..6),
        reduce_at in proptest::collection::vec((any::<u16>(), any::<u32>()), 0..3),
    ) {
        let (args, _) = compound(b"t", &ops);
        let args = mutate(args, &muts);
        scan_bounded(&args);
        let (rec, at) = call_record(&args);
        let reduced: Vec<Reduced> = reduce_at
            .iter()
            .map(|&(p, len)| Reduced { position: p as u32, len })
            .collect();
        ddp_agrees(&rec, at, &reduced);
        // The eligible items the plan found, reduced: the old walk agrees too.
        let (_, ddp) = Plan::with_ddp(&args);
        let found: Vec<Reduced> = ddp
            .eligible()
            .iter()
            .take(4)
            .map(|e| Reduced { position: (at + e.data_at as usize) as u32, len: e.len })
            .collect();
        ddp_agrees(&rec, at, &found);
    }

    /// The shapes of the plan's fast lane (tags and handles on both sides of
    /// `TAG_MAX` and `FH4_MAX`, sa_cachethis a bool or not) and their mutations:
    /// the lane takes exactly the well-formed ones it may, and agrees with the
    /// general walk on all (`plan_oracles::lane_agrees`).
    #[test]
    fn lane_shapes_agree_with_the_general_walk(
        tag in bytes(70),
        cachethis in prop_oneof![Just(0u32), Just(1), any::<u32>()],
        fh in bytes(140),
        tail in lane_tail(),
        muts in proptest::collection::vec(mutation(), 0..4),
    ) {
        let mut ops = vec![sequence(cachethis), op(OP_PUTFH, enc(|w| w.opaque_var(&fh)))];
        ops.extend(tail);
        let (args, _) = compound(&tag, &ops);
        let took = oracles::lane_agrees(&args);
        let fits = tag.len() <= super::plan::TAG_MAX && fh.len() <= super::FH4_MAX;
        prop_assert_eq!(took, fits);
        scan_bounded(&mutate(args, &muts));
    }

    /// `SEQUENCE, PUTFH, LOOKUP[, GETFH], GETATTR` (the stat shapes `fast_names`
    /// answers; the general walk takes them, the lane never does) and their
    /// mutations: exactly the well-formed ones are `Kind::Lookup` / `LookupFh` with
    /// all their operations kept (`OPS_MAX` is 5), their cache shape decodes the
    /// handle, the component and the bitmap at the plan's offsets exactly when the
    /// fast path may take them (handle up to `FH4_MAX`, component up to `NAME_MAX`,
    /// no bitmap word past the third), a worker learns the same entry from them
    /// (`looked_up`) and never observes them as a GETATTR; the lane agrees with the
    /// general walk on all (`plan_oracles::lane_agrees`).
    #[test]
    fn stat_shapes_are_planned_exactly(
        tag in bytes(70),
        fh in bytes(140),
        name in bytes(300),
        getfh in any::<bool>(),
        bits in bitmap(),
        muts in proptest::collection::vec(mutation(), 0..4),
    ) {
        let mut ops = vec![
            sequence(0),
            op(OP_PUTFH, enc(|w| w.opaque_var(&fh))),
            op(OP_LOOKUP, enc(|w| w.opaque_var(&name))),
        ];
        if getfh {
            ops.push(op(OP_GETFH, vec![]));
        }
        ops.push(op(OP_GETATTR, enc(|w| put_bitmap(w, &bits))));
        let (args, starts) = compound(&tag, &ops);
        prop_assert!(!oracles::lane_agrees(&args), "the lane takes no LOOKUP");
        let plan = Plan::of(&args);
        let tag_ok = tag.len() <= super::plan::TAG_MAX;
        let kind = match (tag_ok, getfh) {
            (false, _) => Kind::Other,
            (true, false) => Kind::Lookup,
            (true, true) => Kind::LookupFh,
        };
        prop_assert_eq!(plan.kind, kind);
        prop_assert_eq!(plan.looks_up(), tag_ok);
        prop_assert!(!plan.long());
        let kept: Vec<(u32, usize)> = plan.ops().map(|o| (o.code, o.at as usize)).collect();
        let want: Vec<(u32, usize)> = ops.iter().map(|o| o.op).zip(starts).collect();
        prop_assert_eq!(kept, want);
        let fits = tag_ok
            && fh.len() <= super::FH4_MAX
            && name.len() <= crate::cache::names::NAME_MAX
            && bits.iter().skip(3).all(|&b| b == 0);
        let shape = super::fast::shape(&args, &plan);
        prop_assert_eq!(shape.is_some(), fits);
        if let Some(s) = shape {
            prop_assert_eq!(s.fh, &fh[..]);
            match s.last {
                super::fast::Last::Lookup { name: n, getfh: g, want } => {
                    prop_assert_eq!(n, &name[..]);
                    prop_assert_eq!(g, getfh);
                    for (i, &b) in bits.iter().take(3).enumerate() {
                        prop_assert_eq!(want.0[i], b);
                    }
                }
                other => prop_assert!(false, "not a LOOKUP shape: {:?}", other),
            }
        }
        let learns = super::fast::looked_up(&args, &plan);
        prop_assert_eq!(learns, fits.then_some((&fh[..], &name[..])));
        prop_assert!(super::fast::observe(&args, &plan).is_none());
        scan_bounded(&mutate(args, &muts));
    }

    /// Arbitrary bytes as COMPOUND4args and as any operation's arguments.
    #[test]
    fn arbitrary_bytes_never_panic(
        args in bytes(600),
        code in prop_oneof![0u32..70, any::<u32>()],
    ) {
        scan_bounded(&args);
        let mut r = XdrReader::new(&args);
        let _ = skip::op_args(code, &mut r, &mut |r| {
            assert!(r.position() <= args.len());
            Ok(())
        });
        prop_assert!(r.position() <= args.len());
    }
}

/// Hostile counts and lengths (operation counts and opaque lengths near 2^32, cut
/// arguments): a conservative plan — no fast shape, a bound within `MAX_REPLY`, only
/// the operations present walked — never a panic.
#[test]
fn hostile_counts_and_lengths_give_a_conservative_plan() {
    let fh = vec![1u8; 8];
    let seq = op(OP_SEQUENCE, vec![0; 32]);
    let putfh = op(OP_PUTFH, enc(|w| w.opaque_var(&fh)));
    let read = op(
        OP_READ,
        enc(|w| {
            w.opaque_fixed(&[0; STATEID])?;
            w.u64(0)?;
            w.u32(4096)
        }),
    );
    let (good, _) = compound(b"", &[seq, putfh, read]);
    let plan = scan_bounded(&good);
    assert_eq!((plan.kind, plan.ops().len()), (Kind::Read, 3));
    // The operation count word is at 8 (empty tag, minor version).
    for n in [4u32, 0x7fff_ffff, 0x8000_0000, u32::MAX - 1, u32::MAX] {
        let mut b = good.clone();
        b[8..12].copy_from_slice(&n.to_be_bytes());
        let p = scan_bounded(&b);
        assert_eq!((p.kind, p.ops().len(), p.nops), (Kind::Other, 3, n));
    }
    // PUTFH's handle length (at 12 + 4 + 32 + 4) and the tag length near 2^32.
    for (at, len) in [
        (52usize, u32::MAX),
        (52, 0xffff_fffc),
        (0, u32::MAX),
        (0, 1 << 31),
    ] {
        let mut b = good.clone();
        b[at..at + 4].copy_from_slice(&len.to_be_bytes());
        let p = scan_bounded(&b);
        assert_eq!(p.kind, Kind::Other);
        assert!(p.ops().len() <= 1);
    }
    // A WRITE whose data length is near 2^32: nothing eligible is listed past the cut.
    let write = op(
        OP_WRITE,
        enc(|w| {
            w.opaque_fixed(&[0; STATEID])?;
            w.u64(0)?;
            w.u32(0)?;
            w.u32(u32::MAX)
        }),
    );
    let (b, _) = compound(b"", &[write]);
    let (p, ddp) = Plan::with_ddp(&b);
    assert_eq!(p, scan_bounded(&b));
    assert!(
        ddp.eligible().len() <= 1
            && p.ops().next().is_none()
            && p.reply >= super::plan::UNKNOWN_REPLY
    );
    for cut in 0..good.len() {
        let p = scan_bounded(&good[..cut]);
        assert_eq!(p.kind, Kind::Other, "cut at {cut}");
    }
}
