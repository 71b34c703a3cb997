//! The stateful operations from bytes: argument decoding (every claim and createhow),
//! OPEN over the file model on the memory backend, LOCK4denied encoding, CLOSE /
//! FREE_STATEID / TEST_STATEID, the CURRENT stateid, BADXDR on short arguments.

use super::args::{self, Claim, CreateHow, LockerArg};
use super::*;
use crate::backend::memory::MemoryBackend;
use crate::config::{Access, Cidr, Squash};
use crate::export::{Export, Exports};
use crate::fs::{CreateMode, ExportRoot, FileModel, Owner, SetAttr};
use crate::mount::MountTable;
use crate::nfs3::Ctx;
use crate::nfs4::OpFn;
use crate::state::State;
use engine::rpc::{AuthSys, Cred};
use std::sync::Arc;

/// An XDR builder.
#[derive(Default, Clone)]
struct B(Vec<u8>);

impl B {
    fn u32(mut self, v: u32) -> B {
        self.0.extend(v.to_be_bytes());
        self
    }
    fn u64(mut self, v: u64) -> B {
        self.0.extend(v.to_be_bytes());
        self
    }
    fn raw(mut self, b: &[u8]) -> B {
        self.0.extend(b);
        self
    }
    fn opaque(self, b: &[u8]) -> B {
        let pad = (4 - b.len() % 4) % 4;
        self.u32(b.len() as u32).raw(b).raw(&[0, 0, 0][..pad])
    }
    fn st(self, s: Nfsstat4) -> B {
        self.u32(s.as_u32())
    }
    fn sid(self, s: &Stateid) -> B {
        self.u32(s.seqid).raw(&s.other)
    }
}

/// OPEN4args up to (not including) openhow.
fn open_head(access: u32, deny: u32, owner: &[u8]) -> B {
    B::default()
        .u32(0)
        .u32(access)
        .u32(deny)
        .u64(0)
        .opaque(owner)
}

/// fattr4 with only MODE.
fn mode_attr(b: B, mode: u32) -> B {
    b.u32(2).u32(0).u32(1 << 1).opaque(&mode.to_be_bytes())
}

fn size_attr(b: B, size: u64) -> B {
    b.u32(1).u32(1 << 4).opaque(&size.to_be_bytes())
}

const NO_DELEG: u32 = 0x400;

struct H {
    model: FileModel,
    exports: Exports,
    mounts: MountTable,
    state: State,
    _dir: tempfile::TempDir,
}

fn export(id: u16, path: &str, access: Access) -> Export {
    let p = path.trim_matches('/');
    Export {
        id,
        path: format!("/{p}"),
        prefix: if p.is_empty() {
            String::new()
        } else {
            format!("{p}/")
        },
        clients: vec![Cidr::parse("127.0.0.0/8").unwrap()],
        access,
        squash: Squash::None,
        anon_uid: 65534,
        anon_gid: 65534,
    }
}

fn harness() -> H {
    harness_on(|_| Arc::new(MemoryBackend::new()))
}

/// The harness over the fs backend (per-directory fsyncs, whatever the temp file
/// system), for what an operation costs in system calls.
fn harness_fs() -> H {
    harness_on(|d| {
        Arc::new(
            crate::backend::fs::FsBackend::open_configured(
                &d.join("data"),
                false,
                crate::config::FlushMode::PerDirectory,
            )
            .unwrap(),
        )
    })
}

fn harness_on(backend: impl Fn(&std::path::Path) -> Arc<dyn crate::backend::Backend>) -> H {
    let dir = tempfile::tempdir().unwrap();
    let list = vec![export(0, "/", Access::Rw), export(1, "/ro", Access::Ro)];
    let roots: Vec<ExportRoot> = list
        .iter()
        .map(|e| ExportRoot {
            id: e.id,
            prefix: e.prefix.clone(),
        })
        .collect();
    let model = FileModel::open(backend(dir.path()), &dir.path().join("state"), &roots).unwrap();
    H {
        model,
        exports: Exports::new(list),
        mounts: MountTable::new(),
        state: State::new(),
        _dir: dir,
    }
}

fn ctx(h: &H, uid: u32) -> Ctx<'_> {
    Ctx {
        model: &h.model,
        exports: &h.exports,
        mounts: &h.mounts,
        client: "127.0.0.1:700".parse().unwrap(),
        cred: Cred::Sys(AuthSys::new(uid, uid, &[])),
        conn: None,
        fence: None,
    }
}

fn compound<'a>(ctx: &'a Ctx<'a>, state: &'a State, clientid: u64) -> Compound<'a> {
    Compound {
        ctx,
        state,
        minor: 1,
        cfh: None,
        sfh: None,
        current_stateid: None,
        saved_stateid: None,
        session: Some([1; 16]),
        clientid,
        op_index: 0,
        nops: 1,
        data: None,
        fresh: None,
    }
}

fn put(c: &mut Compound, node: &Node) {
    let handle = c.ctx.model.handle(node).as_bytes().to_vec();
    c.cfh = Some(CurrentFh::File {
        node: node.clone(),
        handle,
    });
}

fn root(c: &mut Compound) -> Node {
    let n = c.ctx.model.root(0).unwrap();
    put(c, &n);
    n
}

/// Runs one operation; returns its status and the bytes it wrote.
fn call(c: &mut Compound, f: OpFn, args: &B) -> (Nfsstat4, Vec<u8>) {
    let mut buf = vec![0u8; 4096];
    let mut r = XdrReader::new(&args.0);
    let (st, n) = {
        let mut w = XdrWriter::new(&mut buf);
        let st = f(c, &mut r, &mut w).unwrap();
        (st, w.position())
    };
    buf.truncate(n);
    assert_eq!(Nfsstat4::decode(&mut XdrReader::new(&buf)).unwrap(), st);
    (st, buf)
}

fn sid_at(b: &[u8], at: usize) -> Stateid {
    let mut other = [0; 12];
    other.copy_from_slice(&b[at + 4..at + 16]);
    Stateid {
        seqid: u32::from_be_bytes(b[at..at + 4].try_into().unwrap()),
        other,
    }
}

fn create_args(name: &[u8], owner: &[u8], how: B) -> B {
    open_head(3 | NO_DELEG, 0, owner)
        .u32(1)
        .raw(&how.0)
        .u32(0)
        .opaque(name)
}

fn guarded(name: &[u8], owner: &[u8]) -> B {
    create_args(name, owner, mode_attr(B::default().u32(1), 0o644))
}

#[test]
fn open_args_decode_every_claim_and_createhow() {
    let s = Stateid {
        seqid: 3,
        other: [7; 12],
    };
    let claims: Vec<(B, Claim)> = vec![
        (B::default().u32(0).opaque(b"f"), Claim::Null(b"f")),
        (B::default().u32(1).u32(2), Claim::Previous(2)),
        (
            B::default().u32(2).sid(&s).opaque(b"g"),
            Claim::DelegateCur(s, b"g"),
        ),
        (B::default().u32(3).opaque(b"h"), Claim::DelegatePrev(b"h")),
        (B::default().u32(4), Claim::Fh),
        (B::default().u32(6), Claim::DelegPrevFh),
        (B::default().u32(5).sid(&s), Claim::DelegCurFh(s)),
    ];
    for (b, want) in claims {
        let bytes = open_head(1, 0, b"own").u32(0).raw(&b.0);
        let a = args::open(&mut XdrReader::new(&bytes.0)).unwrap();
        assert_eq!(a.claim, want);
        assert_eq!((a.share_access, a.share_deny, a.owner), (1, 0, &b"own"[..]));
        assert!(a.create.is_none());
    }
    let v = *b"verifier";
    type Check = fn(&CreateHow) -> bool;
    let hows: Vec<(B, Check)> = vec![
        (
            mode_attr(B::default().u32(0), 0o600),
            |h| matches!(h, CreateHow::Unchecked(Ok(a)) if a.set.mode == Some(0o600)),
        ),
        (
            size_attr(B::default().u32(1), 0),
            |h| matches!(h, CreateHow::Guarded(Ok(a)) if a.set.size == Some(0)),
        ),
        (
            B::default().u32(2).raw(&v),
            |h| matches!(h, CreateHow::Exclusive(x) if x == b"verifier"),
        ),
        (
            mode_attr(B::default().u32(3).raw(&v), 0o640),
            |h| matches!(h, CreateHow::Exclusive41(x, Ok(a)) if x == b"verifier" && a.set.mode == Some(0o640)),
        ),
        // an unsupported attribute is carried, not a decode error
        (
            B::default().u32(0).u32(1).u32(1 << 12).opaque(&[0; 4]),
            |h| matches!(h, CreateHow::Unchecked(Err(NFS4ERR_ATTRNOTSUPP))),
        ),
    ];
    for (how, ok) in hows {
        let bytes = open_head(3, 0, b"o").u32(1).raw(&how.0).u32(4);
        let a = args::open(&mut XdrReader::new(&bytes.0)).unwrap();
        assert!(ok(a.create.as_ref().unwrap()), "{:?}", a.create);
    }
    // bad discriminants, a too long owner, truncation
    for bad in [
        open_head(1, 0, b"o").u32(2).u32(4),
        open_head(1, 0, b"o").u32(1).u32(4).u32(4),
        open_head(1, 0, b"o").u32(0).u32(7),
        open_head(1, 0, &[0; 1025]).u32(0).u32(4),
        open_head(1, 0, b"o").u32(0),
    ] {
        assert!(args::open(&mut XdrReader::new(&bad.0)).is_err());
    }
}

#[test]
fn lock_args_decode_both_lockers() {
    let s = Stateid {
        seqid: 1,
        other: [9; 12],
    };
    let b = B::default()
        .u32(4)
        .u32(0)
        .u64(5)
        .u64(u64::MAX)
        .u32(1)
        .u32(0)
        .sid(&s)
        .u32(0)
        .u64(77)
        .opaque(b"lo");
    let a = args::lock(&mut XdrReader::new(&b.0)).unwrap();
    assert!(a.write && !a.reclaim);
    assert_eq!((a.offset, a.length), (5, u64::MAX));
    assert_eq!(
        a.locker,
        LockerArg::New {
            open: s,
            owner: b"lo"
        }
    );
    let b = B::default()
        .u32(3)
        .u32(1)
        .u64(0)
        .u64(1)
        .u32(0)
        .sid(&s)
        .u32(0);
    let a = args::lock(&mut XdrReader::new(&b.0)).unwrap();
    assert!(!a.write && a.reclaim);
    assert_eq!(a.locker, LockerArg::Existing(s));
    // lock type 5 and a bool of 2 are not XDR
    let b = B::default()
        .u32(5)
        .u32(0)
        .u64(0)
        .u64(1)
        .u32(0)
        .sid(&s)
        .u32(0);
    assert!(args::lock(&mut XdrReader::new(&b.0)).is_err());
    // TEST_STATEID with more stateids than bytes
    let b = B::default().u32(1000).sid(&s);
    assert!(args::test_stateid(&mut XdrReader::new(&b.0)).is_err());
}

#[test]
fn open_create_close_and_current_stateid() {
    let h = harness();
    let cx = ctx(&h, 0);
    let mut c = compound(&cx, &h.state, 5);
    let dir = root(&mut c);
    let (st, b) = call(&mut c, open, &guarded(b"f1", b"own"));
    assert_eq!(st, NFS4_OK);
    let sid = sid_at(&b, 4);
    assert_eq!(sid.seqid, 1);
    // cinfo: atomic false, before < after (the directory changed)
    let before = u64::from_be_bytes(b[24..32].try_into().unwrap());
    let after = u64::from_be_bytes(b[32..40].try_into().unwrap());
    assert!(after > before, "{before} {after}");
    // rflags POSIX, attrset = MODE, NONE_EXT NOT_WANTED
    assert_eq!(&b[40..44], &4u32.to_be_bytes());
    assert_eq!(&b[44..56], &B::default().u32(2).u32(0).u32(2).0[..]);
    assert_eq!(&b[56..], &B::default().u32(3).u32(0).0[..]);
    assert_eq!(c.current_stateid, Some(sid));
    let Some(CurrentFh::File { node, .. }) = &c.cfh else {
        panic!("no file")
    };
    assert_ne!(node.fileid, dir.fileid);
    // GUARDED again → EXIST; the first open is still there
    put(&mut c, &dir);
    assert_eq!(call(&mut c, open, &guarded(b"f1", b"own")).0, NFS4ERR_EXIST);
    // CLOSE with the CURRENT stateid after a new OPEN in "the same compound"
    let (st, b) = call(
        &mut c,
        open,
        &open_head(1 | NO_DELEG, 0, b"own")
            .u32(0)
            .u32(0)
            .opaque(b"f1"),
    );
    assert_eq!(st, NFS4_OK);
    assert_eq!(sid_at(&b, 4).seqid, 2);
    let (st, b) = call(&mut c, close, &B::default().u32(0).sid(&Stateid::CURRENT));
    assert_eq!(st, NFS4_OK);
    assert_eq!(sid_at(&b, 4), Stateid::INVALID);
    assert!(!h.state.opens.client_has_state(5));
    // CLOSE again: the stateid is gone
    let (st, _) = call(&mut c, close, &B::default().u32(0).sid(&sid));
    assert_eq!(st, NFS4ERR_BAD_STATEID);
    // CURRENT with no current stateid
    c.current_stateid = None;
    assert_eq!(
        call(&mut c, close, &B::default().u32(0).sid(&Stateid::CURRENT)).0,
        NFS4ERR_BAD_STATEID
    );
}

#[test]
fn open_errors_by_type_claim_and_share() {
    let h = harness();
    let cx = ctx(&h, 0);
    let mut c = compound(&cx, &h.state, 5);
    let dir = root(&mut c);
    let owner = Owner { uid: 0, gid: 0 };
    h.model
        .mkdir(&dir, b"d", &SetAttr::default(), owner)
        .unwrap();
    h.model
        .symlink(&dir, b"l", b"target", &SetAttr::default(), owner)
        .unwrap();
    let nocreate = |name: &[u8], access: u32| {
        open_head(access | NO_DELEG, 0, b"o")
            .u32(0)
            .u32(0)
            .opaque(name)
    };
    for (name, want) in [
        (&b"missing"[..], NFS4ERR_NOENT),
        (b"d", NFS4ERR_ISDIR),
        (b"l", NFS4ERR_SYMLINK),
        (b"", NFS4ERR_INVAL),
        (b"..", NFS4ERR_BADNAME),
        (b"a/b", NFS4ERR_BADCHAR),
        (&[b'x'; 256], NFS4ERR_NAMETOOLONG),
    ] {
        put(&mut c, &dir);
        assert_eq!(call(&mut c, open, &nocreate(name, 1)).0, want, "{name:?}");
    }
    // share_access 0, unknown bits, deny 4
    put(&mut c, &dir);
    assert_eq!(call(&mut c, open, &nocreate(b"d", 0)).0, NFS4ERR_INVAL);
    assert_eq!(
        call(&mut c, open, &nocreate(b"d", 1 << 20)).0,
        NFS4ERR_INVAL
    );
    let b = open_head(1, 4, b"o").u32(0).u32(0).opaque(b"d");
    assert_eq!(call(&mut c, open, &b).0, NFS4ERR_INVAL);
    // no filehandle; the pseudo root
    c.cfh = None;
    assert_eq!(
        call(&mut c, open, &nocreate(b"x", 1)).0,
        NFS4ERR_NOFILEHANDLE
    );
    c.cfh = Some(CurrentFh::Pseudo(vec![]));
    assert_eq!(call(&mut c, open, &guarded(b"x", b"o")).0, NFS4ERR_ROFS);
    let fh = open_head(1, 0, b"o").u32(0).u32(4);
    assert_eq!(call(&mut c, open, &fh).0, NFS4ERR_ISDIR);
    // CLAIM_FH of a directory; reclaim claims outside grace; unknown delegation
    put(&mut c, &dir);
    assert_eq!(call(&mut c, open, &fh).0, NFS4ERR_ISDIR);
    let prev = open_head(1, 0, b"o").u32(0).u32(1).u32(0);
    assert_eq!(call(&mut c, open, &prev).0, NFS4ERR_NO_GRACE);
    // Refused outside any grace period, and counted so
    // (`nfsgw_ha_reclaims_total{result="refused"}`).
    assert_eq!(h.state.clients.reclaims(), (0, 1));
    let dprev = open_head(1, 0, b"o").u32(0).u32(6);
    assert_eq!(call(&mut c, open, &dprev).0, NFS4ERR_NO_GRACE);
    let f = h
        .model
        .create(&dir, b"f", &CreateMode::Guarded(SetAttr::default()), owner)
        .unwrap();
    put(&mut c, &f);
    let dcur = open_head(1, 0, b"o").u32(0).u32(5).sid(&Stateid {
        seqid: 1,
        other: [3; 12],
    });
    assert_eq!(call(&mut c, open, &dcur).0, NFS4ERR_RECLAIM_BAD);
    // createhow with CLAIM_FH is not allowed
    let b = open_head(1, 0, b"o").u32(1).u32(2).raw(b"verifier").u32(4);
    assert_eq!(call(&mut c, open, &b).0, NFS4ERR_INVAL);
    // truncated → BADXDR
    assert_eq!(call(&mut c, open, &open_head(1, 0, b"o")).0, NFS4ERR_BADXDR);
    // an unsupported create attribute
    put(&mut c, &dir);
    let b = create_args(
        b"n",
        b"o",
        B::default().u32(0).u32(1).u32(1 << 12).opaque(&[0; 4]),
    );
    assert_eq!(call(&mut c, open, &b).0, NFS4ERR_ATTRNOTSUPP);
}

#[test]
fn open_claim_fh_share_denied_and_permissions() {
    let h = harness();
    let cx = ctx(&h, 0);
    let user = ctx(&h, 1000);
    let mut c = compound(&cx, &h.state, 5);
    let dir = root(&mut c);
    let f = h
        .model
        .create(
            &dir,
            b"secret",
            &CreateMode::Guarded(SetAttr {
                mode: Some(0o600),
                ..SetAttr::default()
            }),
            Owner { uid: 0, gid: 0 },
        )
        .unwrap();
    put(&mut c, &f);
    // CLAIM_FH, deny WRITE
    let b = open_head(1 | NO_DELEG, 2, b"a").u32(0).u32(4);
    let (st, r) = call(&mut c, open, &b);
    assert_eq!(st, NFS4_OK);
    let sid = sid_at(&r, 4);
    // cinfo zeros for CLAIM_FH
    assert_eq!(&r[20..40], &B::default().u32(0).u64(0).u64(0).0[..]);
    // another client wanting WRITE → SHARE_DENIED
    let mut c2 = compound(&cx, &h.state, 6);
    put(&mut c2, &f);
    let b = open_head(3 | NO_DELEG, 0, b"b").u32(0).u32(4);
    assert_eq!(call(&mut c2, open, &b).0, NFS4ERR_SHARE_DENIED);
    // a user without permission → ACCESS
    let mut cu = compound(&user, &h.state, 7);
    put(&mut cu, &f);
    let b = open_head(1 | NO_DELEG, 0, b"u").u32(0).u32(4);
    assert_eq!(call(&mut cu, open, &b).0, NFS4ERR_ACCESS);
    // deny NONE was never opened: no downgrade to it (§18.18.3)
    let b = B::default().sid(&sid).u32(0).u32(1).u32(0);
    assert_eq!(call(&mut c, open_downgrade, &b).0, NFS4ERR_INVAL);
    // a second OPEN by the owner with deny NONE: same stateid, seqid 2
    let b = open_head(1 | NO_DELEG, 0, b"a").u32(0).u32(4);
    let (st, r) = call(&mut c, open, &b);
    assert_eq!((st, sid_at(&r, 4)), (NFS4_OK, Stateid { seqid: 2, ..sid }));
    // OPEN_DOWNGRADE to deny none, then client 2 may write
    let b = B::default()
        .sid(&Stateid { seqid: 0, ..sid })
        .u32(0)
        .u32(1)
        .u32(0);
    let (st, r) = call(&mut c, open_downgrade, &b);
    assert_eq!(st, NFS4_OK);
    assert_eq!(sid_at(&r, 4).seqid, 3);
    let b = open_head(3 | NO_DELEG, 0, b"b").u32(0).u32(4);
    assert_eq!(call(&mut c2, open, &b).0, NFS4_OK);
    // downgrade with the old seqid
    let b = B::default().sid(&sid).u32(0).u32(1).u32(0);
    assert_eq!(call(&mut c, open_downgrade, &b).0, NFS4ERR_OLD_STATEID);
}

#[test]
fn unchecked_truncates_and_exclusive41_checks_verifier() {
    let h = harness();
    let cx = ctx(&h, 0);
    let mut c = compound(&cx, &h.state, 5);
    let dir = root(&mut c);
    let f = h
        .model
        .create(
            &dir,
            b"data",
            &CreateMode::Guarded(SetAttr::default()),
            Owner { uid: 0, gid: 0 },
        )
        .unwrap();
    h.model
        .write(&f, 0, b"hello", crate::fs::Stable::FileSync)
        .unwrap();
    // UNCHECKED with size 0 but READ only → INVAL, nothing truncated
    let how = size_attr(B::default().u32(0), 0);
    let b = open_head(1 | NO_DELEG, 0, b"o")
        .u32(1)
        .raw(&how.0)
        .u32(0)
        .opaque(b"data");
    assert_eq!(call(&mut c, open, &b).0, NFS4ERR_INVAL);
    assert_eq!(h.model.getattr(&f).unwrap().size, 5);
    put(&mut c, &dir);
    let (st, r) = call(&mut c, open, &create_args(b"data", b"o", how));
    assert_eq!(st, NFS4_OK);
    assert_eq!(h.model.getattr(&f).unwrap().size, 0);
    assert_eq!(&r[44..56], &B::default().u32(2).u32(1 << 4).u32(0).0[..]);
    // EXCLUSIVE4_1: same verifier returns the file, another → EXIST
    let ex = |v: &[u8; 8]| mode_attr(B::default().u32(3).raw(v), 0o600);
    put(&mut c, &dir);
    assert_eq!(
        call(&mut c, open, &create_args(b"x", b"o", ex(b"verifier"))).0,
        NFS4_OK
    );
    put(&mut c, &dir);
    assert_eq!(
        call(&mut c, open, &create_args(b"x", b"o", ex(b"verifier"))).0,
        NFS4_OK
    );
    put(&mut c, &dir);
    assert_eq!(
        call(&mut c, open, &create_args(b"x", b"o", ex(b"Justtest"))).0,
        NFS4ERR_EXIST
    );
    // EXCLUSIVE4 creates too
    put(&mut c, &dir);
    let b = create_args(b"y", b"o", B::default().u32(2).raw(b"12345678"));
    assert_eq!(call(&mut c, open, &b).0, NFS4_OK);
}

#[test]
fn read_only_export_refuses_write_opens() {
    let h = harness();
    let cx = ctx(&h, 0);
    let mut c = compound(&cx, &h.state, 5);
    let dir = root(&mut c);
    let _ = h
        .model
        .mkdir(&dir, b"ro", &SetAttr::default(), Owner { uid: 0, gid: 0 });
    let sub = h.model.lookup(&dir, b"ro").unwrap();
    let f = h
        .model
        .create(
            &sub,
            b"f",
            &CreateMode::Guarded(SetAttr::default()),
            Owner { uid: 0, gid: 0 },
        )
        .unwrap();
    let ro_root = h.model.root(1).unwrap();
    let f_ro = h.model.lookup(&ro_root, b"f").unwrap();
    assert_eq!(f_ro.fileid, f.fileid);
    put(&mut c, &f_ro);
    let b = open_head(3 | NO_DELEG, 0, b"o").u32(0).u32(4);
    assert_eq!(call(&mut c, open, &b).0, NFS4ERR_ROFS);
    let b = open_head(1 | NO_DELEG, 0, b"o").u32(0).u32(4);
    assert_eq!(call(&mut c, open, &b).0, NFS4_OK);
    put(&mut c, &ro_root);
    assert_eq!(call(&mut c, open, &guarded(b"new", b"o")).0, NFS4ERR_ROFS);
}

fn lock_new(write: bool, off: u64, len: u64, open: &Stateid, owner: &[u8]) -> B {
    B::default()
        .u32(if write { 2 } else { 1 })
        .u32(0)
        .u64(off)
        .u64(len)
        .u32(1)
        .u32(0)
        .sid(open)
        .u32(0)
        .u64(0)
        .opaque(owner)
}

#[test]
fn lock_denied_encoding_locku_lockt_free_and_test() {
    let h = harness();
    let cx = ctx(&h, 0);
    let mut c1 = compound(&cx, &h.state, 5);
    let mut c2 = compound(&cx, &h.state, 6);
    let dir = root(&mut c1);
    let (_, r) = call(&mut c1, open, &guarded(b"lk", b"o1"));
    let s1 = sid_at(&r, 4);
    let f = h.model.lookup(&dir, b"lk").unwrap();
    put(&mut c2, &f);
    let (_, r) = call(
        &mut c2,
        open,
        &open_head(3 | NO_DELEG, 0, b"o2").u32(0).u32(4),
    );
    let s2 = sid_at(&r, 4);
    // LOCK with the CURRENT stateid standing for the open stateid
    let (st, r) = call(
        &mut c1,
        lock,
        &lock_new(true, 10, 20, &Stateid::CURRENT, b"L1"),
    );
    assert_eq!(st, NFS4_OK);
    let l1 = sid_at(&r, 4);
    assert_eq!(l1.seqid, 1);
    assert_eq!(c1.current_stateid, Some(l1));
    // client 2 is denied: LOCK4denied bytes
    let (st, r) = call(&mut c2, lock, &lock_new(false, 0, u64::MAX, &s2, b"L2"));
    assert_eq!(st, NFS4ERR_DENIED);
    let want = B::default()
        .st(NFS4ERR_DENIED)
        .u64(10)
        .u64(20)
        .u32(2)
        .u64(5)
        .opaque(b"L1");
    assert_eq!(r, want.0);
    // LOCKT says the same, and nothing for a free range
    let lockt_args =
        |off: u64, len: u64| B::default().u32(1).u64(off).u64(len).u64(6).opaque(b"L2");
    let (st, r) = call(&mut c2, lockt, &lockt_args(0, 11));
    assert_eq!((st, r), (NFS4ERR_DENIED, want.0.clone()));
    assert_eq!(call(&mut c2, lockt, &lockt_args(30, 5)).0, NFS4_OK);
    // range errors
    assert_eq!(call(&mut c2, lockt, &lockt_args(0, 0)).0, NFS4ERR_INVAL);
    assert_eq!(
        call(&mut c2, lockt, &lockt_args(u64::MAX, 2)).0,
        NFS4ERR_INVAL
    );
    // CLOSE and FREE_STATEID with locks held
    assert_eq!(
        call(&mut c1, close, &B::default().u32(0).sid(&s1)).0,
        NFS4ERR_LOCKS_HELD
    );
    assert_eq!(
        call(&mut c1, free_stateid, &B::default().sid(&l1)).0,
        NFS4ERR_LOCKS_HELD
    );
    assert_eq!(
        call(&mut c1, free_stateid, &B::default().sid(&s1)).0,
        NFS4ERR_LOCKS_HELD
    );
    // TEST_STATEID: ok, ok, bad (special), bad (other client's), old
    let old = Stateid { seqid: 0, ..l1 };
    let list = B::default()
        .u32(5)
        .sid(&s1)
        .sid(&old)
        .sid(&Stateid::CURRENT)
        .sid(&s2)
        .sid(&Stateid { seqid: 5, ..s1 });
    let (st, r) = call(&mut c1, test_stateid, &list);
    assert_eq!(st, NFS4_OK);
    let codes = B::default()
        .st(NFS4_OK)
        .u32(5)
        .st(NFS4_OK)
        .st(NFS4_OK)
        .st(NFS4ERR_BAD_STATEID)
        .st(NFS4ERR_BAD_STATEID)
        .st(NFS4ERR_BAD_STATEID);
    assert_eq!(r, codes.0);
    // LOCKU all with CURRENT (= l1), then FREE_STATEID, then CLOSE
    let (st, r) = call(
        &mut c1,
        locku,
        &B::default()
            .u32(2)
            .u32(0)
            .sid(&Stateid::CURRENT)
            .u64(0)
            .u64(u64::MAX),
    );
    assert_eq!(st, NFS4_OK);
    let l1b = sid_at(&r, 4);
    assert_eq!((l1b.other, l1b.seqid), (l1.other, 2));
    // the old lock stateid seqid is OLD now
    let (st, _) = call(
        &mut c1,
        locku,
        &B::default().u32(2).u32(0).sid(&l1).u64(0).u64(1),
    );
    assert_eq!(st, NFS4ERR_OLD_STATEID);
    assert_eq!(
        call(&mut c1, free_stateid, &B::default().sid(&l1b)).0,
        NFS4_OK
    );
    assert_eq!(
        call(&mut c1, close, &B::default().u32(0).sid(&s1)).0,
        NFS4_OK
    );
    // client 2 now gets its lock
    assert_eq!(
        call(&mut c2, lock, &lock_new(true, 0, u64::MAX, &s2, b"L2")).0,
        NFS4_OK
    );
}

#[test]
fn lock_type_rules_and_badxdr() {
    let h = harness();
    let cx = ctx(&h, 0);
    let mut c = compound(&cx, &h.state, 5);
    let dir = root(&mut c);
    // LOCK on a directory
    let s = Stateid {
        seqid: 1,
        other: [1; 12],
    };
    assert_eq!(
        call(&mut c, lock, &lock_new(true, 0, 1, &s, b"L")).0,
        NFS4ERR_ISDIR
    );
    c.cfh = None;
    assert_eq!(
        call(&mut c, lock, &lock_new(true, 0, 1, &s, b"L")).0,
        NFS4ERR_NOFILEHANDLE
    );
    put(&mut c, &dir);
    let (_, r) = call(
        &mut c,
        open,
        &open_head(1 | NO_DELEG, 0, b"o")
            .u32(1)
            .raw(&mode_attr(B::default().u32(1), 0o644).0)
            .u32(0)
            .opaque(b"rd"),
    );
    let rd = sid_at(&r, 4);
    // WRITE_LT on a read-only open; an unknown stateid; a zero length
    assert_eq!(
        call(&mut c, lock, &lock_new(true, 0, 1, &rd, b"L")).0,
        NFS4ERR_OPENMODE
    );
    assert_eq!(
        call(&mut c, lock, &lock_new(false, 0, 1, &s, b"L")).0,
        NFS4ERR_BAD_STATEID
    );
    assert_eq!(
        call(&mut c, lock, &lock_new(false, 0, 0, &rd, b"L")).0,
        NFS4ERR_INVAL
    );
    // READW_LT is served like READ_LT
    let mut b = lock_new(false, 0, 1, &rd, b"L");
    b.0[3] = 3;
    assert_eq!(call(&mut c, lock, &b).0, NFS4_OK);
    // every op answers BADXDR to a short argument
    for f in [
        open,
        open_downgrade,
        close,
        lock,
        lockt,
        locku,
        test_stateid,
        free_stateid,
    ] {
        assert_eq!(
            call(&mut c, f as OpFn, &B::default().u32(1)).0,
            NFS4ERR_BADXDR
        );
    }
}

/// A state whose client table remembers the owner "me" from a previous run, and that
/// client's id (confirmed again in this run): the grace period is on.
fn grace_state(dir: &std::path::Path) -> (State, u64) {
    std::fs::write(dir.join("nfs4-clients"), "6d65\n").unwrap();
    let state = State::with_config(crate::state::clients::Limits::default(), Some(dir));
    let cred = Cred::Sys(AuthSys::new(0, 0, &[]));
    let id = state.clients.with(|t| {
        let id = t
            .insert(b"me", [1; 8], crate::state::clients::Principal::of(&cred))
            .unwrap();
        t.confirm(id);
        id
    });
    (state, id)
}

#[test]
fn grace_allows_only_reclaims_and_recreates_opens_and_locks() {
    let h = harness();
    let sdir = tempfile::tempdir().unwrap();
    let (state, me) = grace_state(sdir.path());
    assert!(state.clients.in_grace() && state.clients.may_reclaim(me));
    let cx = ctx(&h, 0);
    let mut c = compound(&cx, &state, me);
    let dir = root(&mut c);
    let f = h
        .model
        .create(
            &dir,
            b"g",
            &CreateMode::Guarded(SetAttr::default()),
            Owner { uid: 0, gid: 0 },
        )
        .unwrap();
    // a new open, by name or by handle, waits for the grace period
    assert_eq!(call(&mut c, open, &guarded(b"n", b"o")).0, NFS4ERR_GRACE);
    put(&mut c, &f);
    let fh = open_head(3 | NO_DELEG, 0, b"o").u32(0).u32(4);
    assert_eq!(call(&mut c, open, &fh).0, NFS4ERR_GRACE);
    // CLAIM_PREVIOUS recreates the open with the share mode asked
    let prev = open_head(3, 2, b"o").u32(0).u32(1).u32(0);
    let (st, r) = call(&mut c, open, &prev);
    assert_eq!(st, NFS4_OK);
    let s = sid_at(&r, 4);
    assert_eq!(state.opens.open_modes(&s), Some((3, 2)));
    // delegation: OPEN_DELEGATE_NONE (no want flags given)
    assert_eq!(&r[r.len() - 4..], &0u32.to_be_bytes());
    // LOCK: reclaim recreates, a new lock waits; LOCKT waits
    let mut reclaim = lock_new(true, 0, 10, &s, b"L");
    reclaim.0[7] = 1;
    let (st, r) = call(&mut c, lock, &reclaim);
    assert_eq!(st, NFS4_OK);
    let l = sid_at(&r, 4);
    assert_eq!(
        call(
            &mut c,
            lock,
            &B::default()
                .u32(2)
                .u32(0)
                .u64(20)
                .u64(1)
                .u32(0)
                .sid(&l)
                .u32(0)
        )
        .0,
        NFS4ERR_GRACE
    );
    let t = B::default().u32(2).u64(0).u64(1).u64(0).opaque(b"x");
    assert_eq!(call(&mut c, lockt, &t).0, NFS4ERR_GRACE);
    // a client the previous run did not know may not reclaim
    let mut other = compound(&cx, &state, me + 1);
    put(&mut other, &f);
    assert_eq!(call(&mut other, open, &prev).0, NFS4ERR_NO_GRACE);
    let mut reclaim2 = lock_new(true, 0, 10, &s, b"L");
    reclaim2.0[7] = 1;
    assert_eq!(call(&mut other, lock, &reclaim2).0, NFS4ERR_NO_GRACE);
}

#[test]
fn open_result_encodes_each_delegation_kind() {
    let s = Stateid {
        seqid: 1,
        other: [4; 12],
    };
    let d = Stateid {
        seqid: 1,
        other: [5; 12],
    };
    let enc = |deleg| {
        let o = open::Opened {
            stateid: s,
            cinfo: (1, 2),
            attrset: [0, 2],
            rflags: open::OPEN4_RESULT_LOCKTYPE_POSIX,
            deleg,
        };
        let mut buf = vec![0u8; 512];
        let n = {
            let mut w = XdrWriter::new(&mut buf);
            encode_open(&mut w, &o).unwrap();
            w.position()
        };
        buf.truncate(n);
        buf
    };
    let head = B::default()
        .st(NFS4_OK)
        .sid(&s)
        .u32(0)
        .u64(1)
        .u64(2)
        .u32(4)
        .u32(2)
        .u32(0)
        .u32(2);
    let ace = |mask: u32| B::default().u32(0).u32(0).u32(mask).opaque(b"EVERYONE@");
    let read = head.clone().u32(1).sid(&d).u32(0).raw(&ace(1).0);
    assert_eq!(enc(open::Deleg::Read(d)), read.0);
    let write = head
        .clone()
        .u32(2)
        .sid(&d)
        .u32(0)
        .u32(1)
        .u64(u64::MAX)
        .raw(&ace(3).0);
    assert_eq!(enc(open::Deleg::Write(d)), write.0);
    assert_eq!(enc(open::Deleg::None), head.clone().u32(0).0);
    let contention = head.clone().u32(3).u32(open::WND4_CONTENTION).u32(0);
    assert_eq!(
        enc(open::Deleg::NoneExt(open::WND4_CONTENTION)),
        contention.0
    );
    let not_wanted = head.u32(3).u32(open::WND4_NOT_WANTED);
    assert_eq!(
        enc(open::Deleg::NoneExt(open::WND4_NOT_WANTED)),
        not_wanted.0
    );
}

/// OPEN, READ, WRITE and SETATTR(size) permission rules of NFSv4 (no owner override).
mod perm_tests;

/// RFC 9754 in minor version 2 only: its attributes (time_deleg_access 84,
/// time_deleg_modify 85, open_arguments 86) are 4.2's, and its want flags
/// (OPEN4_SHARE_ACCESS_WANT_DELEG_TIMESTAMPS, bit 20; _WANT_OPEN_XOR_DELEGATION, bit
/// 21) are unknown share_access bits in 4.1 (NFS4ERR_INVAL, RFC 8178 §4.4.3), known
/// in 4.2 with any want; the bits between and above stay unknown.
#[test]
fn rfc9754_is_minor_version_2s() {
    use crate::nfs4::attrs;
    for bit in [84, 85, 86] {
        assert!(!attrs::SUPPORTED.has(bit), "attribute {bit}");
        assert!(attrs::SUPPORTED_V42_ONLY.has(bit), "attribute {bit}");
    }
    for flag in [1 << 20, 1 << 21, 3 << 20] {
        let sa = open::WANT_WRITE_DELEG | 3 | flag;
        assert_eq!(open::split_share(sa, 0), Err(NFS4ERR_INVAL));
        assert_eq!(open::split_share_in(sa, 0, 1), Err(NFS4ERR_INVAL));
        assert_eq!(
            open::split_share_in(sa, 0, 2),
            Ok((3, open::WANT_WRITE_DELEG, 0, flag))
        );
        for want in [open::WANT_NO_DELEG, open::WANT_CANCEL, 0] {
            assert!(open::split_share_in(want | 1 | flag, 3, 2).is_ok());
        }
    }
    for unknown in [1 << 19, 1 << 22, 1 << 23, 1 << 31] {
        assert_eq!(
            open::split_share_in(3 | unknown, 0, 2),
            Err(NFS4ERR_INVAL),
            "{unknown:#x}"
        );
    }
    assert!(open::split_share(open::WANT_WRITE_DELEG | 3, 0).is_ok());
}

/// The `*_ATTRS_DELEG` delegation types (RFC 9754 §6): 4 and 5, with the bodies of
/// the read and write delegations.
#[test]
fn attrs_deleg_types_have_the_plain_bodies() {
    let d = crate::state::stateid::Stateid {
        seqid: 1,
        other: [7; 12],
    };
    let enc = |deleg| {
        let o = open::Opened {
            stateid: d,
            cinfo: (0, 0),
            attrset: [0; 2],
            rflags: 0,
            deleg,
        };
        let mut buf = vec![0u8; 512];
        let mut w = engine::xdr::XdrWriter::new(&mut buf);
        encode_open(&mut w, &o).unwrap();
        w.written().to_vec()
    };
    // OPEN4resok: status, stateid 16, cinfo 20, rflags 4, attrset 12, then the type.
    let at = 4 + 16 + 20 + 4 + 12;
    for (plain, attrs, t) in [
        (open::Deleg::Read(d), open::Deleg::ReadAttrs(d), 4u8),
        (open::Deleg::Write(d), open::Deleg::WriteAttrs(d), 5),
    ] {
        let (p, a) = (enc(plain), enc(attrs));
        assert_eq!(a[at..at + 4], [0, 0, 0, t]);
        assert_eq!(p[..at], a[..at]);
        assert_eq!(p[at + 4..], a[at + 4..], "the same body");
        assert_eq!(attrs.stateid(), Some(d));
    }
    assert_eq!(open::Deleg::None.stateid(), None);
}

fn unchecked(name: &[u8], owner: &[u8], b: B) -> B {
    create_args(name, owner, b)
}

/// A creating OPEN of a new name walks the parents once, as NFSv3's CREATE (the
/// create tried before any LOOKUP: `open::create_first`); every createhow keeps
/// §18.16.3's answer for a taken name: UNCHECKED4 opens the file (a size truncates
/// it), GUARDED4 is EXIST, a directory at the name is not opened as a file, and a
/// caller who may not create in the directory still opens an existing file.
#[test]
fn a_creating_open_walks_the_parents_once_and_keeps_every_createhow_rule() {
    let h = harness_fs();
    let cx = ctx(&h, 0);
    let mut c = compound(&cx, &h.state, 9);
    let top = root(&mut c);
    let sub = h
        .model
        .mkdir(&top, b"sub", &SetAttr::default(), Owner { uid: 0, gid: 0 })
        .unwrap();
    put(&mut c, &sub);
    crate::backend::fs::FsBackend::take_calls();
    let (st, b) = call(&mut c, open, &guarded(b"new", b"own"));
    let calls = crate::backend::fs::FsBackend::take_calls();
    assert_eq!(st, NFS4_OK);
    // One walk to "sub" (its opens) and one probe of the name: no LOOKUP first.
    assert_eq!(calls.get("lstatat"), Some(&1), "{calls:?}");
    assert_eq!(calls.get("openat"), Some(&2), "{calls:?}");
    let before = u64::from_be_bytes(b[24..32].try_into().unwrap());
    let after = u64::from_be_bytes(b[32..40].try_into().unwrap());
    assert!(after > before, "created: the directory changed");
    assert_eq!(
        &b[44..56],
        &B::default().u32(2).u32(0).u32(2).0[..],
        "attrset MODE"
    );

    // UNCHECKED4 on the existing file: opened, not created, the size applied.
    h.model
        .write(
            &h.model.lookup(&sub, b"new").unwrap(),
            0,
            b"twelve bytes",
            crate::fs::Stable::FileSync,
        )
        .unwrap();
    put(&mut c, &sub);
    let (st, b) = call(
        &mut c,
        open,
        &unchecked(b"new", b"own", size_attr(B::default().u32(0), 4)),
    );
    assert_eq!(st, NFS4_OK);
    let before = u64::from_be_bytes(b[24..32].try_into().unwrap());
    let after = u64::from_be_bytes(b[32..40].try_into().unwrap());
    assert_eq!(
        before, after,
        "an existing file: the directory did not change"
    );
    assert_eq!(
        &b[44..56],
        &B::default().u32(2).u32(1 << 4).u32(0).0[..],
        "attrset SIZE"
    );
    let n = h.model.lookup(&sub, b"new").unwrap();
    assert_eq!(h.model.getattr(&n).unwrap().size, 4);
    // GUARDED4 on it: EXIST.
    put(&mut c, &sub);
    assert_eq!(
        call(&mut c, open, &guarded(b"new", b"own")).0,
        NFS4ERR_EXIST
    );
    // A directory at the name: neither created over nor opened as a file.
    h.model
        .mkdir(&sub, b"d", &SetAttr::default(), Owner { uid: 0, gid: 0 })
        .unwrap();
    put(&mut c, &sub);
    let st = call(
        &mut c,
        open,
        &unchecked(b"d", b"own", mode_attr(B::default().u32(0), 0o644)),
    )
    .0;
    assert_eq!(st, NFS4ERR_ISDIR);
    put(&mut c, &sub);
    assert_eq!(call(&mut c, open, &guarded(b"d", b"own")).0, NFS4ERR_EXIST);

    // uid 1000 may not write in "sub" (root's 0755): an existing file still opens
    // for reading with UNCHECKED4; a new name is ACCESS.
    let other = ctx(&h, 1000);
    let mut c2 = compound(&other, &h.state, 10);
    put(&mut c2, &sub);
    let read_only = open_head(1 | NO_DELEG, 0, b"o2")
        .u32(1)
        .raw(&mode_attr(B::default().u32(0), 0o644).0)
        .u32(0)
        .opaque(b"new");
    assert_eq!(call(&mut c2, open, &read_only).0, NFS4_OK);
    put(&mut c2, &sub);
    let st = call(
        &mut c2,
        open,
        &unchecked(b"other", b"o2", mode_attr(B::default().u32(0), 0o644)),
    )
    .0;
    assert_eq!(st, NFS4ERR_ACCESS);
    assert_eq!(
        h.model.lookup(&sub, b"other").err(),
        Some(crate::fs::Status::NoEnt)
    );
}
