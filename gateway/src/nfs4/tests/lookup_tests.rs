//! NFSv4.1 stat on the reactor (`nfs4::fast_names`): `SEQUENCE, PUTFH, LOOKUP[,
//! GETFH], GETATTR` answered from the reactor's names, filled exactly as a worker
//! fills them (`server::worker::entry_seen`: the stamps snapshotted before the
//! COMPOUND runs, `EntrySeen::before(..).v4()`, and what its LOOKUP noted,
//! `call::note_named`), over the file model reporting to the same `Generations` the
//! server gives it. A hit is the worker's reply byte for byte (but for the slot's
//! sequence id) with no system call; a retransmission gets the slot's cached reply;
//! every change of the name (RFC 8881 §18.25 REMOVE, §18.26 RENAME, §18.9 LINK, and
//! the file model's same operations NFSv3 runs) makes the next LOOKUP the worker's;
//! access (export admission, squashing, search permission on the directory) is
//! checked on every hit; names the worker refuses or crosses into another export at
//! never hit.

use super::*;
use crate::backend::fs::FsBackend;
use crate::cache::names::EntrySeen;
use crate::cache::{FhKey, Fill, Generations, ReadCache};
use crate::call::take_named;
use crate::fs::{CreateMode, Owner, SetAttr};
use crate::nfs4::fast::{self, View};
use crate::nfs4::plan::Plan;

/// The Linux client's GETATTR bitmap for a stat (words 0 and 1).
const STAT_ATTRS: &[u32] = &[
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

struct W {
    h: H,
    gens: Arc<Generations>,
    cache: ReadCache,
    sid: [u8; 16],
    clientid: u64,
    seq: u32,
    _d: tempfile::TempDir,
}

fn world_with(list: Vec<Export>) -> W {
    let d = tempfile::tempdir().unwrap();
    let b = Arc::new(FsBackend::open(&d.path().join("data")).unwrap());
    let h = harness_on(b, list);
    let gens = Arc::new(Generations::new());
    h.model.observe_changes(gens.clone());
    let (clientid, sid) = session(&h, b"names");
    // RECLAIM_COMPLETE (slot 0, sequence 1): OPENs that create are not refused with
    // NFS4ERR_GRACE (RFC 8881 §18.51.3).
    let done: Op = Box::new(|w: &mut XdrWriter| {
        w.u32(OP_RECLAIM_COMPLETE)?;
        w.bool(false)
    });
    assert_eq!(call(&h, &[sequence(sid, 1, 0), done]).0, NFS4_OK);
    W {
        h,
        gens,
        cache: ReadCache::new(0, engine::mem::HugePolicy::Off).unwrap(),
        sid,
        clientid,
        seq: 2,
        _d: d,
    }
}

fn world() -> W {
    world_with(vec![mk_export(0, "/", Access::Rw, &["127.0.0.0/8"])])
}

fn root_cred() -> Cred {
    Cred::Sys(AuthSys::new(0, 0, &[]))
}

fn user(uid: u32) -> Cred {
    Cred::Sys(AuthSys::new(uid, uid, &[]))
}

/// `run` under another credential.
fn run_as(h: &H, cred: Cred, args: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; 1 << 20];
    let c = Ctx { cred, ..ctx(h) };
    let mut w = XdrWriter::new(&mut buf);
    assert_eq!(serve(&c, &h.state, 1, args, &mut w), Outcome::Done);
    let n = w.position();
    buf.truncate(n);
    buf
}

/// SEQUENCE on slot 0 without sa_cachethis.
fn seq_op(sid: [u8; 16], seq: u32) -> Op {
    Box::new(move |w| {
        w.u32(OP_SEQUENCE)?;
        w.opaque_fixed(&sid)?;
        w.u32(seq)?;
        w.u32(0)?;
        w.u32(0)?;
        w.bool(false)
    })
}

/// `SEQUENCE (slot 0, no sa_cachethis), PUTFH dir, LOOKUP name[, GETFH], GETATTR`.
fn stat_args(sid: [u8; 16], seq: u32, dir: &[u8], name: &[u8], getfh: bool) -> Vec<u8> {
    let (dir, name) = (dir.to_vec(), name.to_vec());
    let mut ops: Vec<Op> = vec![
        seq_op(sid, seq),
        putfh(dir),
        Box::new(move |w| {
            w.u32(OP_LOOKUP)?;
            w.opaque_var(&name)
        }),
    ];
    if getfh {
        ops.push(op0(OP_GETFH));
    }
    ops.push(getattr(STAT_ATTRS));
    compound_args(b"stat", 1, &ops)
}

/// The LOOKUP's status in a stat reply (after SEQUENCE and PUTFH).
fn lookup_status(rep: &[u8]) -> Nfsstat4 {
    let st = first_statuses(rep, 3);
    assert_eq!(st[2].0, OP_LOOKUP);
    st[2].1
}

/// The object's handle in a stat reply with GETFH.
fn getfh_of(rep: &[u8]) -> Vec<u8> {
    let mut r = results(rep);
    assert_eq!(r.u32().unwrap(), OP_SEQUENCE);
    assert_eq!(Nfsstat4::decode(&mut r).unwrap(), NFS4_OK);
    r.skip(16 + 4 * 5).unwrap();
    for op in [OP_PUTFH, OP_LOOKUP, OP_GETFH] {
        assert_eq!(r.u32().unwrap(), op);
        assert_eq!(Nfsstat4::decode(&mut r).unwrap(), NFS4_OK);
    }
    r.opaque_var(FH4_MAX).unwrap().to_vec()
}

/// Offset of SEQUENCE4resok's sr_sequenceid with tag "stat".
const SEQID_AT: usize = 4 + 4 + 4 + 4 + 4 + 4 + 16;

impl W {
    fn next(&mut self) -> u32 {
        self.seq += 1;
        self.seq - 1
    }

    /// A COMPOUND run as a worker runs it: stamps before, the COMPOUND, then the
    /// fill the reactor receives (`server::worker::run_job`, `entry_seen`).
    fn worker_as(&mut self, cred: Cred, args: &[u8]) -> Vec<u8> {
        let plan = Plan::of(args);
        let entry = match fast::looked_up(args, &plan) {
            Some(found) => Some((found, false)),
            None => crate::nfs4::fast_names::made(args, &plan).map(|m| (m, true)),
        };
        let seen = entry
            .filter(|((_, name), _)| crate::cache::names::cacheable(name))
            .and_then(|((dir, name), makes)| {
                let ask = crate::outcome::EntryAsk { dir, name, makes };
                EntrySeen::before(&self.gens, &ask)
            })
            .map(|e| e.v4());
        let made_v4 = seen.as_ref().is_some_and(|e| e.made_v4());
        let _ = take_named();
        let rep = run_as(&self.h, cred, args);
        let named = take_named();
        if let Some(fill) = seen.and_then(|s| s.learned(&self.gens, named)) {
            // A create's file: its attributes after the COMPOUND, read under the
            // stamp taken first (`server::worker::learned_made`).
            let made = match &fill.data {
                Some(crate::cache::FillData::Name(n)) if made_v4 => Some((n.obj, n.obj_id)),
                _ => None,
            };
            self.cache.fill(&self.gens, fill, None);
            if let Some((obj, id)) = made {
                let stamp = self.gens.stamp(id);
                let node = self.h.model.resolve(obj.bytes()).unwrap();
                let attr = self.h.model.getattr(&node).unwrap();
                let fill = Fill {
                    fh: obj,
                    export: 0,
                    attr,
                    stamp,
                    data: None,
                    exact: true,
                };
                self.cache.fill(&self.gens, fill, None);
            }
        }
        rep
    }

    /// A stat by a worker (root, the next sequence id).
    fn stat(&mut self, dir: &[u8], name: &[u8], getfh: bool) -> Vec<u8> {
        let n = self.next();
        self.worker_as(root_cred(), &stat_args(self.sid, n, dir, name, getfh))
    }

    /// The reactor's answer, or `None` (nothing written, no slot touched).
    fn fast_in(
        &mut self,
        exports: Option<&Exports>,
        cred: &Cred,
        client: &str,
        args: &[u8],
    ) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; 8192];
        let mut w = XdrWriter::new(&mut buf);
        let mut v = View {
            cache: &mut self.cache,
            gens: &self.gens,
            exports: exports.unwrap_or(&self.h.exports),
            state: &self.h.state,
        };
        // A component longer than a name may be has no cache shape.
        let shape = fast::parse(args)?;
        let ip = client.parse().unwrap();
        let got = fast::answer_parsed(&mut v, ip, cred, &shape, args.len(), &mut w);
        let n = w.position();
        assert_eq!(got.is_some(), n > 0, "a miss writes nothing");
        got.map(|_| buf[..n].to_vec())
    }

    /// A stat on the reactor (root, the next sequence id when answered).
    fn hit(&mut self, dir: &[u8], name: &[u8], getfh: bool) -> Option<Vec<u8>> {
        let args = stat_args(self.sid, self.seq, dir, name, getfh);
        let got = self.fast_in(None, &root_cred(), "127.0.0.1", &args);
        if got.is_some() {
            self.seq += 1;
        }
        got
    }

    fn hit_fh(&mut self, dir: &[u8], name: &[u8]) -> Vec<u8> {
        getfh_of(&self.hit(dir, name, true).expect("a reactor hit"))
    }

    fn node(&self, fh: &[u8]) -> crate::fs::Node {
        self.h.model.resolve(fh).unwrap()
    }

    fn fh(&self, n: &crate::fs::Node) -> Vec<u8> {
        self.h.model.handle(n).as_bytes().to_vec()
    }

    fn mkdir(&self, dir: &[u8], name: &[u8], mode: u32) -> Vec<u8> {
        let set = SetAttr {
            mode: Some(mode),
            ..Default::default()
        };
        let d = self.node(dir);
        let n = self.h.model.mkdir(&d, name, &set, Owner { uid: 0, gid: 0 });
        self.fh(&n.unwrap())
    }

    fn create(&self, dir: &[u8], name: &[u8]) -> Vec<u8> {
        let d = self.node(dir);
        let how = CreateMode::Unchecked(Default::default());
        let n = self
            .h
            .model
            .create(&d, name, &how, Owner { uid: 0, gid: 0 });
        self.fh(&n.unwrap())
    }

    fn root(&self) -> Vec<u8> {
        self.fh(&self.h.model.root(0).unwrap())
    }
}

/// The same reply but for SEQUENCE's sequence id.
fn same_but_seqid(worker: &[u8], fast: &[u8]) {
    let mut w = worker.to_vec();
    w[SEQID_AT..SEQID_AT + 4].copy_from_slice(&fast[SEQID_AT..SEQID_AT + 4]);
    assert_eq!(w, fast, "the reactor's reply differs from the worker's");
}

/// A directory `top` with a file `f` of 5 bytes.
fn top_with_f(w: &mut W) -> (Vec<u8>, Vec<u8>) {
    let root = w.root();
    let top = w.mkdir(&root, b"top", 0o755);
    let f = w.create(&top, b"f");
    let node = w.node(&f);
    w.h.model
        .write(&node, 0, b"12345", crate::fs::Stable::FileSync)
        .unwrap();
    (top, f)
}

#[test]
fn a_cached_stat_is_the_workers_reply_with_no_system_call() {
    let mut w = world();
    let (top, f) = top_with_f(&mut w);
    for getfh in [false, true] {
        let args = stat_args(w.sid, w.seq, &top, b"f", getfh);
        if !getfh {
            assert!(
                w.fast_in(None, &root_cred(), "127.0.0.1", &args).is_none(),
                "cold"
            );
        }
        let by_worker = w.stat(&top, b"f", getfh);
        assert_eq!(lookup_status(&by_worker), NFS4_OK);
        let lookups = w.cache.stats().lookups;
        FsBackend::take_calls();
        let seq = w.seq;
        let hit = w.hit(&top, b"f", getfh).expect("answered from the names");
        let calls = FsBackend::take_calls();
        assert!(calls.is_empty(), "no system call: {calls:?}");
        same_but_seqid(&by_worker, &hit);
        assert_eq!(w.cache.stats().lookups, lookups + 1);
        // A retransmission (same slot and sequence id) is not the reactor's: the
        // worker replays the slot's cached reply, byte for byte.
        let again = stat_args(w.sid, seq, &top, b"f", getfh);
        assert!(w.fast_in(None, &root_cred(), "127.0.0.1", &again).is_none());
        assert_eq!(run(&w.h, &again), hit, "the replay");
    }
    assert_eq!(w.hit_fh(&top, b"f"), f);
    // sa_cachethis and a GETATTR the reactor does not encode are the worker's.
    let mut cached = stat_args(w.sid, w.seq, &top, b"f", true);
    let at = 4 + 4 + 4 + 4 + 4 + 16 + 12;
    assert_eq!(cached[at..at + 4], [0, 0, 0, 0]);
    cached[at + 3] = 1;
    assert!(w
        .fast_in(None, &root_cred(), "127.0.0.1", &cached)
        .is_none());
    let lease: Vec<Op> = vec![
        seq_op(w.sid, w.seq),
        putfh(top.clone()),
        named(OP_LOOKUP, b"f"),
        getattr(&[attrs::SIZE, attrs::LEASE_TIME]),
    ];
    let args = compound_args(b"t", 1, &lease);
    assert!(w.fast_in(None, &root_cred(), "127.0.0.1", &args).is_none());
    // A directory's name too, its attributes those its LOOKUP read.
    let root = w.root();
    w.stat(&root, b"top", true);
    assert_eq!(w.hit_fh(&root, b"top"), top);
}

#[test]
fn changes_of_the_name_make_the_next_lookup_the_workers() {
    let mut w = world();
    let (top, f) = top_with_f(&mut w);
    w.stat(&top, b"f", true);
    assert_eq!(w.hit_fh(&top, b"f"), f);
    // Other names made in the directory leave its entry answering, once the
    // directory's new attributes are known (here from a worker's LOOKUP of the new
    // name; the reactor checks search permission on them).
    for i in 0..5 {
        let g = w.create(&top, format!("g{i}").as_bytes());
        assert!(w.hit(&top, b"f", true).is_none(), "the directory changed");
        w.stat(&top, format!("g{i}").as_bytes(), true);
        assert_eq!(w.hit_fh(&top, b"f"), f, "after creating g{i}");
        assert_eq!(w.hit_fh(&top, format!("g{i}").as_bytes()), g);
    }
    // A WRITE moves the file's attributes: the next stat is the worker's, which
    // teaches them again.
    let node = w.node(&f);
    w.h.model
        .write(&node, 0, b"1234567", crate::fs::Stable::FileSync)
        .unwrap();
    assert!(w.hit(&top, b"f", true).is_none(), "old attributes");
    w.stat(&top, b"f", true);
    assert_eq!(w.hit_fh(&top, b"f"), f);

    // NFSv4.1 REMOVE: the name is gone at once; the worker answers NOENT.
    let n = w.next();
    let rm = compound_args(
        b"t",
        1,
        &[
            sequence(w.sid, n, 0),
            putfh(top.clone()),
            named(OP_REMOVE, b"f"),
        ],
    );
    assert_eq!(
        Nfsstat4::decode(&mut XdrReader::new(&run(&w.h, &rm))).unwrap(),
        NFS4_OK
    );
    assert!(w.hit(&top, b"f", true).is_none());
    assert_eq!(lookup_status(&w.stat(&top, b"f", true)), NFS4ERR_NOENT);
    assert!(w.hit(&top, b"f", true).is_none(), "no negative entries");
    // Made again: the new object, never the old one.
    let f2 = w.create(&top, b"f");
    assert_ne!(f2, f);
    w.stat(&top, b"f", true);
    assert_eq!(w.hit_fh(&top, b"f"), f2);

    // RENAME as NFSv3's RENAME runs it (the file model): both names change.
    let a = w.create(&top, b"a");
    w.stat(&top, b"a", true);
    assert_eq!(w.hit_fh(&top, b"a"), a);
    let t = w.node(&top);
    w.h.model.rename(&t, b"a", &t, b"f").unwrap();
    assert!(w.hit(&top, b"a", true).is_none(), "the renamed-away name");
    assert!(w.hit(&top, b"f", true).is_none(), "the replaced name");
    assert_eq!(lookup_status(&w.stat(&top, b"a", true)), NFS4ERR_NOENT);
    w.stat(&top, b"f", true);
    assert_eq!(w.hit_fh(&top, b"f"), a);

    // LINK (NFSv4.1) at a new name: the linked file; REMOVE of it as NFSv3 runs it.
    let n = w.next();
    let ln = compound_args(
        b"t",
        1,
        &[
            sequence(w.sid, n, 0),
            putfh(a.clone()),
            op0(OP_SAVEFH),
            putfh(top.clone()),
            named(OP_LINK, b"l"),
        ],
    );
    assert_eq!(
        Nfsstat4::decode(&mut XdrReader::new(&run(&w.h, &ln))).unwrap(),
        NFS4_OK
    );
    w.stat(&top, b"l", true);
    let l = w.hit_fh(&top, b"l");
    assert_eq!(
        FileModel::peek_handle(&l).map(|p| p.1),
        FileModel::peek_handle(&a).map(|p| p.1)
    );
    w.h.model.remove(&t, b"l").unwrap();
    assert!(w.hit(&top, b"l", true).is_none(), "the removed link name");
    assert_eq!(lookup_status(&w.stat(&top, b"l", true)), NFS4ERR_NOENT);
}

#[test]
fn search_permission_admission_and_squashing_are_checked_on_every_hit() {
    let mut w = world();
    let root = w.root();
    let private = w.mkdir(&root, b"private", 0o700);
    w.create(&private, b"f");
    w.stat(&private, b"f", true);
    assert!(w.hit(&private, b"f", true).is_some(), "root may search it");
    // No X on the directory: the reactor answers nothing; the worker, ACCESS.
    let args = stat_args(w.sid, w.seq, &private, b"f", true);
    assert!(w.fast_in(None, &user(1000), "127.0.0.1", &args).is_none());
    let rep = w.worker_as(user(1000), &args);
    w.seq += 1;
    assert_eq!(lookup_status(&rep), NFS4ERR_ACCESS);
    assert!(w.hit(&private, b"f", true).is_some(), "root's entry stays");
    // A client outside the export's networks.
    let args = stat_args(w.sid, w.seq, &private, b"f", true);
    assert!(w.fast_in(None, &root_cred(), "10.1.2.3", &args).is_none());
    // The export root-squashed (a reload): root is nobody, who may not search.
    let mut e = mk_export(0, "/", Access::Rw, &["127.0.0.0/8"]);
    e.squash = Squash::Root;
    let squashed = Exports::new(vec![e]);
    assert!(w
        .fast_in(Some(&squashed), &root_cred(), "127.0.0.1", &args)
        .is_none());
    assert!(w.hit(&private, b"f", true).is_some());
}

#[test]
fn names_the_worker_refuses_or_crosses_at_never_hit() {
    let mut w = world();
    let (top, _) = top_with_f(&mut w);
    let long = vec![b'x'; 256];
    for (name, st) in [
        (&b"."[..], NFS4ERR_BADNAME),
        (&b".."[..], NFS4ERR_BADNAME),
        (&b"\xff"[..], NFS4ERR_INVAL),
        (&b"a/f"[..], NFS4ERR_BADNAME),
        (&long[..], NFS4ERR_NAMETOOLONG),
    ] {
        assert!(w.hit(&top, name, true).is_none(), "{name:?}");
        assert_eq!(lookup_status(&w.stat(&top, name, true)), st, "{name:?}");
        assert!(
            w.hit(&top, name, true).is_none(),
            "{name:?} after the worker"
        );
    }
    // A valid name taught by an NFSv3 LOOKUP answers NFSv4 while there is one
    // export (no name can cross into another), its attributes exact.
    teach_as_v3(&mut w, &top, b"f");
    assert!(w.hit(&top, b"f", true).is_some());
}

/// What an NFSv3 LOOKUP of `name` teaches (`NameFill::v4` false), and then the
/// object's attributes as an NFSv4.1 GETATTR teaches them (exact).
fn teach_as_v3(w: &mut W, dir: &[u8], name: &[u8]) {
    let ask = crate::outcome::EntryAsk {
        dir,
        name,
        makes: false,
    };
    let seen = EntrySeen::before(&w.gens, &ask).unwrap();
    let d = w.node(dir);
    let dattr = w.h.model.getattr(&d).unwrap();
    let (node, a) = w.h.model.lookup_attr(&d, name).unwrap();
    let obj = FhKey::new(w.h.model.handle(&node).as_bytes()).unwrap();
    let named = crate::call::Named {
        obj,
        obj_attr: Some(a),
        dir_attr: Some(dattr),
        made: false,
    };
    let fill = seen.learned(&w.gens, Some(named)).unwrap();
    w.cache.fill(&w.gens, fill, None);
    let stamp = w.gens.stamp(a.fileid);
    let attr = w.h.model.getattr(&node).unwrap();
    let fill = Fill {
        fh: obj,
        export: 0,
        attr,
        stamp,
        data: None,
        exact: true,
    };
    w.cache.fill(&w.gens, fill, None);
}

#[test]
fn another_exports_root_is_the_workers_crossing() {
    // "/" and "/top/sub" exported: LOOKUP "sub" in "/top" crosses (RFC 8881 §7.7).
    let mut w = world_with(vec![
        mk_export(0, "/", Access::Rw, &["127.0.0.0/8"]),
        mk_export(1, "/top/sub", Access::Rw, &["127.0.0.0/8"]),
    ]);
    // The file model made the second export's root (and "top") when it opened.
    let root = w.h.model.root(0).unwrap();
    let top = w.fh(&w.h.model.lookup(&root, b"top").unwrap());
    let f = w.create(&top, b"f");
    // An NFSv3 LOOKUP sees the directory in export 0: never an NFSv4.1 answer.
    teach_as_v3(&mut w, &top, b"sub");
    assert!(w.hit(&top, b"sub", true).is_none());
    let crossed = w.stat(&top, b"sub", true);
    assert_eq!(lookup_status(&crossed), NFS4_OK);
    assert_eq!(
        FileModel::peek_handle(&getfh_of(&crossed)).map(|p| p.0),
        Some(1),
        "the other export's root"
    );
    assert!(
        w.hit(&top, b"sub", true).is_none(),
        "a crossing is not noted"
    );
    // With two exports, even an ordinary name an NFSv4.1 LOOKUP taught goes to the
    // worker: whether a name crosses depends on the asking client's address (an
    // export it may not see is not crossed into), so one client's LOOKUP cannot
    // vouch for another's.
    let st = w.stat(&top, b"f", true);
    assert_eq!(
        FileModel::peek_handle(&getfh_of(&st)),
        FileModel::peek_handle(&f)
    );
    assert!(
        w.hit(&top, b"f", true).is_none(),
        "a v4 hit with two exports"
    );
}

/// `SEQUENCE, PUTFH dir, OPEN (create UNCHECKED4, CLAIM_NULL name), CLOSE` (RFC 8881
/// §18.16, §18.2; the current stateid, §16.2.3.1.2): bench md's create without its
/// WRITE.
fn create_args(w: &W, dir: &[u8], name: &[u8]) -> Vec<u8> {
    let (clientid, name) = (w.clientid, name.to_vec());
    let open: Op = Box::new(move |x| {
        x.u32(OP_OPEN)?;
        x.u32(0)?;
        x.u32(3)?; // OPEN4_SHARE_ACCESS_BOTH
        x.u32(0)?;
        x.u64(clientid)?;
        x.opaque_var(b"owner")?;
        x.u32(1)?; // OPEN4_CREATE
        x.u32(0)?; // UNCHECKED4, empty fattr4
        x.u32(0)?;
        x.u32(0)?;
        x.u32(0)?; // CLAIM_NULL
        x.opaque_var(&name)
    });
    let close: Op = Box::new(|x| {
        x.u32(OP_CLOSE)?;
        x.u32(0)?;
        crate::state::stateid::Stateid::CURRENT.encode(x)
    });
    compound_args(
        b"t",
        1,
        &[seq_op(w.sid, w.seq), putfh(dir.to_vec()), open, close],
    )
}

#[test]
fn a_name_an_open_created_is_answered_without_a_lookup() {
    let mut w = world();
    let (top, _) = top_with_f(&mut w);
    // A worker's LOOKUP teaches the directory's attributes; then v4 creates.
    w.stat(&top, b"f", true);
    let mut made = vec![];
    for i in 0..4 {
        let name = format!("n{i}");
        let args = create_args(&w, &top, name.as_bytes());
        let rep = w.worker_as(root_cred(), &args);
        w.seq += 1;
        assert_eq!(
            Nfsstat4::decode(&mut XdrReader::new(&rep)).unwrap(),
            NFS4_OK
        );
        made.push(name);
    }
    // Each name is the reactor's at once, the worker's answer byte for byte.
    for name in &made {
        let hit = w.hit(&top, name.as_bytes(), true).expect("taught by OPEN");
        let by_worker = w.stat(&top, name.as_bytes(), true);
        same_but_seqid(&by_worker, &hit);
    }
    // An OPEN of an existing name (no create) teaches nothing new; a REMOVE after
    // an OPEN's create still sends the next stat to the worker.
    let n = w.next();
    let rm = compound_args(
        b"t",
        1,
        &[
            seq_op(w.sid, n),
            putfh(top.clone()),
            named(OP_REMOVE, b"n0"),
        ],
    );
    assert_eq!(
        Nfsstat4::decode(&mut XdrReader::new(&run(&w.h, &rm))).unwrap(),
        NFS4_OK
    );
    assert!(w.hit(&top, b"n0", true).is_none());
    assert_eq!(lookup_status(&w.stat(&top, b"n0", true)), NFS4ERR_NOENT);
}

/// An OPEN creating `name` (UNCHECKED4, CLAIM_NULL), as in `create_args`.
fn open_op(clientid: u64, name: &[u8]) -> Op {
    let name = name.to_vec();
    Box::new(move |x| {
        x.u32(OP_OPEN)?;
        x.u32(0)?;
        x.u32(3)?;
        x.u32(0)?;
        x.u64(clientid)?;
        x.opaque_var(b"owner")?;
        x.u32(1)?;
        x.u32(0)?;
        x.u32(0)?;
        x.u32(0)?;
        x.u32(0)?;
        x.opaque_var(&name)
    })
}

/// A COMPOUND whose OPEN of an existing name creates nothing (but reports the name,
/// two bumps, as a create does), then creates another name: the worker's one note is
/// the second OPEN's file, which must never be taught under the first OPEN's name
/// (its stamp moved by exactly two, as a create's would). Only an OPEN followed by
/// quiet operations teaches.
#[test]
fn an_open_followed_by_other_namings_teaches_nothing() {
    let mut w = world();
    let (top, _) = top_with_f(&mut w);
    w.stat(&top, b"f", true);
    let a = w.create(&top, b"a");
    let n = w.next();
    let args = compound_args(
        b"t",
        1,
        &[
            seq_op(w.sid, n),
            putfh(top.clone()),
            open_op(w.clientid, b"a"),
            putfh(top.clone()),
            open_op(w.clientid, b"b"),
        ],
    );
    let rep = w.worker_as(root_cred(), &args);
    assert_eq!(
        Nfsstat4::decode(&mut XdrReader::new(&rep)).unwrap(),
        NFS4_OK
    );
    assert!(
        w.hit(&top, b"a", true).is_none(),
        "a name answered with the other OPEN's file"
    );
    let by_worker = w.stat(&top, b"a", true);
    assert_eq!(
        FileModel::peek_handle(&getfh_of(&by_worker)),
        FileModel::peek_handle(&a)
    );
}

/// `SEQUENCE, PUTFH, CREATE (NF4DIR, no attributes), GETFH` (RFC 8881 §18.4): bench
/// md's mkdir.
fn mkdir_args(w: &W, dir: &[u8], name: &[u8]) -> Vec<u8> {
    let name = name.to_vec();
    let create: Op = Box::new(move |x| {
        x.u32(OP_CREATE)?;
        x.u32(2)?; // NF4DIR
        x.opaque_var(&name)?;
        x.u32(0)?; // createattrs: an empty bitmap, no values
        x.u32(0)
    });
    let getfh: Op = Box::new(|x| x.u32(OP_GETFH));
    compound_args(
        b"t",
        1,
        &[seq_op(w.sid, w.seq), putfh(dir.to_vec()), create, getfh],
    )
}

/// A directory an NFSv4.1 CREATE made teaches its name as NFSv3's MKDIR does
/// (`fast_names::made`, `dir_ops::note_made_dir`): the stat after it is the
/// reactor's, the worker's answer byte for byte. A symlink's CREATE teaches nothing.
#[test]
fn a_directory_a_create_made_is_answered_without_a_lookup() {
    let mut w = world();
    let (top, _) = top_with_f(&mut w);
    w.stat(&top, b"f", true);
    let args = mkdir_args(&w, &top, b"sub");
    let rep = w.worker_as(root_cred(), &args);
    w.seq += 1;
    assert_eq!(
        Nfsstat4::decode(&mut XdrReader::new(&rep)).unwrap(),
        NFS4_OK
    );
    let hit = w.hit(&top, b"sub", true).expect("taught by CREATE");
    let by_worker = w.stat(&top, b"sub", true);
    same_but_seqid(&by_worker, &hit);
    // A CREATE of a symlink is no directory's: not a shape that teaches.
    let n = w.next();
    let link: Op = Box::new(|x| {
        x.u32(OP_CREATE)?;
        x.u32(5)?; // NF4LNK
        x.opaque_var(b"target")?;
        x.opaque_var(b"ln")?;
        x.u32(0)?;
        x.u32(0)
    });
    let args = compound_args(b"t", 1, &[seq_op(w.sid, n), putfh(top.clone()), link]);
    let plan = Plan::of(&args);
    assert!(crate::nfs4::fast_names::made(&args, &plan).is_none());
    assert_eq!(
        Nfsstat4::decode(&mut XdrReader::new(&run(&w.h, &args))).unwrap(),
        NFS4_OK
    );
    assert!(w.hit(&top, b"ln", true).is_none());
}
