//! serve()-level tests of NFSv3 and MOUNT over the real file model on the memory
//! backend.

use super::proto::*;
use super::status::nfsstat3;
use super::*;
use crate::backend::memory::MemoryBackend;
use crate::config::{Access, Cidr, Squash};
use crate::export::{Export, Exports};
use crate::fs::{ExportRoot, FileKind, FileModel, Status};
use crate::mount::{self, MountTable};
use engine::rpc::{AuthSys, Cred};
use engine::xdr::{XdrReader, XdrResult, XdrWriter};
use std::sync::Arc;

struct H {
    model: FileModel,
    exports: Exports,
    mounts: MountTable,
    _dir: tempfile::TempDir,
}

fn mk_export(id: u16, path: &str, access: Access, squash: Squash, nets: &[&str]) -> Export {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    Export {
        id,
        path: format!("/{}", parts.join("/")),
        prefix: if parts.is_empty() {
            String::new()
        } else {
            format!("{}/", parts.join("/"))
        },
        clients: nets.iter().map(|n| Cidr::parse(n).unwrap()).collect(),
        access,
        squash,
        anon_uid: 65534,
        anon_gid: 65534,
    }
}

fn harness_with(list: Vec<Export>) -> H {
    harness_on(Arc::new(MemoryBackend::new()), list)
}

/// A harness over `backend`.
fn harness_on(backend: Arc<dyn crate::backend::Backend>, list: Vec<Export>) -> H {
    let dir = tempfile::tempdir().unwrap();
    let roots: Vec<ExportRoot> = list
        .iter()
        .map(|e| ExportRoot {
            id: e.id,
            prefix: e.prefix.clone(),
        })
        .collect();
    let model = FileModel::open(backend, dir.path(), &roots).unwrap();
    H {
        model,
        exports: Exports::new(list),
        mounts: MountTable::new(),
        _dir: dir,
    }
}

/// "/" read-write, no squash; "/ro" read-only; "/far" only for 10.0.0.0/8.
fn harness() -> H {
    harness_with(vec![
        mk_export(0, "/", Access::Rw, Squash::None, &["127.0.0.0/8"]),
        mk_export(1, "/ro", Access::Ro, Squash::None, &["127.0.0.0/8"]),
        mk_export(2, "/far", Access::Rw, Squash::None, &["10.0.0.0/8"]),
        mk_export(3, "/sq", Access::Rw, Squash::Root, &["127.0.0.0/8"]),
    ])
}

fn user(uid: u32) -> Cred {
    Cred::Sys(AuthSys::new(uid, uid, &[]))
}

fn ctx<'a>(h: &'a H, cred: Cred) -> Ctx<'a> {
    Ctx {
        model: &h.model,
        exports: &h.exports,
        mounts: &h.mounts,
        client: "127.0.0.1:700".parse().unwrap(),
        cred,
        conn: None,
        fence: None,
    }
}

fn call(h: &H, cred: Cred, proc_: u32, args: &[u8]) -> (Outcome, Vec<u8>) {
    let mut buf = vec![0u8; 256 << 10];
    let c = ctx(h, cred);
    let mut w = XdrWriter::new(&mut buf);
    let o = serve(&c, proc_, args, &mut w);
    let n = w.position();
    buf.truncate(n);
    (o, buf)
}

fn mcall(h: &H, cred: Cred, proc_: u32, args: &[u8]) -> (Outcome, Vec<u8>) {
    let mut buf = vec![0u8; 64 << 10];
    let c = ctx(h, cred);
    let mut w = XdrWriter::new(&mut buf);
    let o = mount::serve(&c, proc_, args, &mut w);
    let n = w.position();
    buf.truncate(n);
    (o, buf)
}

fn args(f: impl FnOnce(&mut XdrWriter) -> XdrResult<()>) -> Vec<u8> {
    let mut buf = vec![0u8; 2 << 20];
    let mut w = XdrWriter::new(&mut buf);
    f(&mut w).unwrap();
    let n = w.position();
    buf.truncate(n);
    buf
}

fn mnt(h: &H, path: &str) -> Vec<u8> {
    let (o, rep) = mcall(h, user(0), 1, &args(|w| w.string(path.as_bytes())));
    assert_eq!(o, Outcome::Done);
    let mut r = XdrReader::new(&rep);
    assert_eq!(r.u32().unwrap(), 0, "MNT {path}");
    let fh = r.opaque_var(64).unwrap().to_vec();
    assert_eq!(r.u32().unwrap(), 2);
    assert_eq!(r.u32().unwrap(), 1);
    assert_eq!(r.u32().unwrap(), 0);
    fh
}

/// Parsed fattr3 fields the tests look at.
#[derive(Debug, Clone, Copy)]
struct A {
    kind: u32,
    mode: u32,
    nlink: u32,
    uid: u32,
    gid: u32,
    size: u64,
    fileid: u64,
}

fn fattr(r: &mut XdrReader) -> A {
    let kind = r.u32().unwrap();
    let mode = r.u32().unwrap();
    let nlink = r.u32().unwrap();
    let uid = r.u32().unwrap();
    let gid = r.u32().unwrap();
    let size = r.u64().unwrap();
    r.skip(8 + 8 + 8).unwrap();
    let fileid = r.u64().unwrap();
    r.skip(24).unwrap();
    A {
        kind,
        mode,
        nlink,
        uid,
        gid,
        size,
        fileid,
    }
}

fn post_op(r: &mut XdrReader) -> Option<A> {
    r.bool().unwrap().then(|| fattr(r))
}

fn wcc(r: &mut XdrReader) -> (bool, Option<A>) {
    let pre = r.bool().unwrap();
    if pre {
        r.skip(24).unwrap();
    }
    (pre, post_op(r))
}

fn status(rep: &[u8]) -> u32 {
    XdrReader::new(rep).u32().unwrap()
}

fn diropargs(w: &mut XdrWriter, fh: &[u8], name: &[u8]) -> XdrResult<()> {
    w.opaque_var(fh)?;
    w.string(name)
}

fn sattr_mode(w: &mut XdrWriter, mode: Option<u32>) -> XdrResult<()> {
    match mode {
        Some(m) => {
            w.bool(true)?;
            w.u32(m)?
        }
        None => w.bool(false)?,
    }
    for _ in 0..3 {
        w.bool(false)?;
    }
    w.u32(0)?;
    w.u32(0)
}

/// CREATE (UNCHECKED, mode) → the new handle.
fn create(h: &H, cred: Cred, dir: &[u8], name: &str, mode: u32) -> Result<Vec<u8>, u32> {
    let a = args(|w| {
        diropargs(w, dir, name.as_bytes())?;
        w.u32(0)?;
        sattr_mode(w, Some(mode))
    });
    let (o, rep) = call(h, cred, 8, &a);
    assert_eq!(o, Outcome::Done);
    let mut r = XdrReader::new(&rep);
    let st = r.u32().unwrap();
    if st != 0 {
        let (pre, _) = wcc(&mut r);
        assert!(pre, "CREATE failure carries dir wcc");
        assert_eq!(r.remaining(), 0);
        return Err(st);
    }
    assert!(r.bool().unwrap());
    let fh = r.opaque_var(64).unwrap().to_vec();
    let a = post_op(&mut r).unwrap();
    assert_eq!(a.kind, FileKind::Reg as u32);
    let (pre, post) = wcc(&mut r);
    assert!(pre && post.is_some());
    assert_eq!(r.remaining(), 0);
    Ok(fh)
}

/// SETATTR mode as root.
fn chmod(h: &H, fh: &[u8], mode: u32) {
    let (o, rep) = call(
        h,
        user(0),
        2,
        &args(|w| {
            w.opaque_var(fh)?;
            sattr_mode(w, Some(mode))?;
            w.bool(false)
        }),
    );
    assert_eq!((o, status(&rep)), (Outcome::Done, 0));
    assert_eq!(getattr(h, fh).mode & 0o7777, mode);
}

fn getattr(h: &H, fh: &[u8]) -> A {
    let (o, rep) = call(h, user(0), 1, &args(|w| w.opaque_var(fh)));
    assert_eq!(o, Outcome::Done);
    let mut r = XdrReader::new(&rep);
    assert_eq!(r.u32().unwrap(), 0);
    let a = fattr(&mut r);
    assert_eq!(r.remaining(), 0);
    a
}

fn lookup(h: &H, cred: Cred, dir: &[u8], name: &str) -> Result<Vec<u8>, u32> {
    let (o, rep) = call(h, cred, 3, &args(|w| diropargs(w, dir, name.as_bytes())));
    assert_eq!(o, Outcome::Done);
    let mut r = XdrReader::new(&rep);
    let st = r.u32().unwrap();
    if st != 0 {
        post_op(&mut r);
        assert_eq!(r.remaining(), 0);
        return Err(st);
    }
    let fh = r.opaque_var(64).unwrap().to_vec();
    assert!(post_op(&mut r).is_some());
    assert!(post_op(&mut r).is_some());
    assert_eq!(r.remaining(), 0);
    Ok(fh)
}

fn write(h: &H, fh: &[u8], off: u64, data: &[u8], stable: u32) -> (u32, u32) {
    let a = args(|w| {
        w.opaque_var(fh)?;
        w.u64(off)?;
        w.u32(data.len() as u32)?;
        w.u32(stable)?;
        w.opaque_var(data)
    });
    let (o, rep) = call(h, user(0), 7, &a);
    assert_eq!(o, Outcome::Done);
    let mut r = XdrReader::new(&rep);
    let st = r.u32().unwrap();
    wcc(&mut r);
    if st != 0 {
        assert_eq!(r.remaining(), 0);
        return (st, 0);
    }
    assert_eq!(r.u32().unwrap() as usize, data.len());
    let committed = r.u32().unwrap();
    assert!(committed >= stable);
    assert_eq!(r.opaque_fixed(8).unwrap(), &h.model.write_verifier());
    assert_eq!(r.remaining(), 0);
    (0, committed)
}

fn read(h: &H, cred: Cred, fh: &[u8], off: u64, count: u32) -> Result<(Vec<u8>, bool), u32> {
    let a = args(|w| {
        w.opaque_var(fh)?;
        w.u64(off)?;
        w.u32(count)
    });
    let (o, rep) = call(h, cred, 6, &a);
    assert_eq!(o, Outcome::Done);
    let mut r = XdrReader::new(&rep);
    let st = r.u32().unwrap();
    post_op(&mut r);
    if st != 0 {
        assert_eq!(r.remaining(), 0);
        return Err(st);
    }
    let n = r.u32().unwrap() as usize;
    let eof = r.bool().unwrap();
    let data = r.opaque_var(usize::MAX).unwrap().to_vec();
    assert_eq!(data.len(), n);
    assert_eq!(r.remaining(), 0);
    Ok((data, eof))
}

/// READDIR or READDIRPLUS; returns (status, [(name, cookie, has attr+fh)], eof, verf).
#[allow(clippy::type_complexity)]
fn readdir(
    h: &H,
    plus: bool,
    fh: &[u8],
    cookie: u64,
    verf: [u8; 8],
    count: u32,
) -> (u32, Vec<(String, u64, bool)>, bool, [u8; 8]) {
    let a = args(|w| {
        w.opaque_var(fh)?;
        w.u64(cookie)?;
        w.opaque_fixed(&verf)?;
        if plus {
            w.u32(count)?;
        }
        w.u32(count)
    });
    let proc_ = if plus { 17 } else { 16 };
    let (o, rep) = call(h, user(0), proc_, &a);
    assert_eq!(o, Outcome::Done);
    if !plus {
        assert!(rep.len() <= count as usize || status(&rep) != 0);
    }
    let mut r = XdrReader::new(&rep);
    let st = r.u32().unwrap();
    post_op(&mut r);
    if st != 0 {
        assert_eq!(r.remaining(), 0);
        return (st, vec![], false, [0; 8]);
    }
    let mut v = [0u8; 8];
    v.copy_from_slice(r.opaque_fixed(8).unwrap());
    let mut out = Vec::new();
    while r.bool().unwrap() {
        let _fileid = r.u64().unwrap();
        let name = String::from_utf8(r.string(255).unwrap().to_vec()).unwrap();
        let c = r.u64().unwrap();
        let mut full = true;
        if plus {
            full &= post_op(&mut r).is_some();
            full &= if r.bool().unwrap() {
                r.opaque_var(64).unwrap();
                true
            } else {
                false
            };
        }
        out.push((name, c, full));
    }
    let eof = r.bool().unwrap();
    assert_eq!(r.remaining(), 0);
    (0, out, eof, v)
}

fn list_all(h: &H, plus: bool, fh: &[u8], count: u32) -> Vec<String> {
    let (mut cookie, mut verf) = (0u64, [0u8; 8]);
    let mut names = Vec::new();
    for _ in 0..1000 {
        let (st, ents, eof, v) = readdir(h, plus, fh, cookie, verf, count);
        assert_eq!(st, 0);
        if let Some(last) = ents.last() {
            cookie = last.1;
        }
        for e in &ents {
            if plus {
                assert!(e.2, "READDIRPLUS entry {} lacks attrs/handle", e.0);
            }
        }
        names.extend(ents.into_iter().map(|e| e.0));
        verf = v;
        if eof {
            return names;
        }
    }
    panic!("listing never reached eof");
}

#[test]
fn end_to_end_file_lifecycle() {
    let h = harness();
    let root = mnt(&h, "/");
    assert_eq!(h.mounts.list(), vec![("127.0.0.1".into(), "/".into())]);
    let ra = getattr(&h, &root);
    assert_eq!(ra.kind, FileKind::Dir as u32);
    // The whole-store root carries no metadata; work in a world-writable directory.
    let (_, rep) = call(
        &h,
        user(0),
        9,
        &args(|w| {
            diropargs(w, &root, b"w")?;
            sattr_mode(w, Some(0o777))
        }),
    );
    assert_eq!(status(&rep), 0);
    let root = lookup(&h, user(0), &root, "w").unwrap();
    chmod(&h, &root, 0o1777);
    chmod(&h, &root, 0o777);

    let f = create(&h, user(1000), &root, "f", 0o640).unwrap();
    let fa = getattr(&h, &f);
    assert_eq!(
        (fa.uid, fa.gid, fa.mode & 0o777, fa.size),
        (1000, 1000, 0o640, 0)
    );
    assert_eq!(lookup(&h, user(1000), &root, "f").unwrap().len(), f.len());

    let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
    assert_eq!(write(&h, &f, 0, &data, 0).0, 0);
    assert_eq!(getattr(&h, &f).size, 10_000);
    let (got, eof) = read(&h, user(1000), &f, 0, 4096).unwrap();
    assert_eq!((&got[..], eof), (&data[..4096], false));
    let (got, eof) = read(&h, user(1000), &f, 8000, 4096).unwrap();
    assert_eq!((&got[..], eof), (&data[8000..], true));
    // Odd lengths are padded correctly.
    let (got, _) = read(&h, user(1000), &f, 1, 3).unwrap();
    assert_eq!(got, &data[1..4]);
    // Other users cannot read a 0640 file; the owner of a 0000 file still can.
    assert_eq!(
        read(&h, user(2000), &f, 0, 10),
        Err(nfsstat3(Status::Acces))
    );

    // COMMIT returns the write verifier.
    let (o, rep) = call(
        &h,
        user(1000),
        21,
        &args(|w| {
            w.opaque_var(&f)?;
            w.u64(0)?;
            w.u32(0)
        }),
    );
    assert_eq!(o, Outcome::Done);
    let mut r = XdrReader::new(&rep);
    assert_eq!(r.u32().unwrap(), 0);
    wcc(&mut r);
    assert_eq!(r.opaque_fixed(8).unwrap(), &h.model.write_verifier());

    // READ of a directory.
    assert_eq!(
        read(&h, user(0), &root, 0, 10),
        Err(nfsstat3(Status::IsDir))
    );

    // REMOVE, then the name is gone.
    let (o, rep) = call(&h, user(1000), 12, &args(|w| diropargs(w, &root, b"f")));
    assert_eq!(o, Outcome::Done);
    let mut r = XdrReader::new(&rep);
    assert_eq!(r.u32().unwrap(), 0);
    let (pre, post) = wcc(&mut r);
    assert!(pre && post.is_some());
    assert_eq!(r.remaining(), 0);
    assert_eq!(
        lookup(&h, user(1000), &root, "f"),
        Err(nfsstat3(Status::NoEnt))
    );
}

#[test]
fn readdir_paging_small_count() {
    let h = harness_with(vec![mk_export(
        0,
        "/",
        Access::Rw,
        Squash::None,
        &["127.0.0.0/8"],
    )]);
    let root = mnt(&h, "/");
    let mut want: Vec<String> = (0..40).map(|i| format!("file-{i:03}")).collect();
    for n in &want {
        create(&h, user(0), &root, n, 0o644).unwrap();
    }
    want.push(".".into());
    want.push("..".into());
    want.sort();
    for (plus, count) in [(false, 400), (false, 4096), (true, 1200), (true, 65536)] {
        let mut names = list_all(&h, plus, &root, count);
        names.sort();
        assert_eq!(names, want, "plus={plus} count={count}");
    }
    // Too small for even one entry.
    let (st, ..) = readdir(&h, false, &root, 0, [0; 8], 100);
    assert_eq!(st, nfsstat3(Status::TooSmall));
    let (st, ..) = readdir(&h, true, &root, 0, [0; 8], 200);
    assert_eq!(st, nfsstat3(Status::TooSmall));
}

#[test]
fn names_and_types() {
    let h = harness();
    let root = mnt(&h, "/");
    let long = "x".repeat(256);
    assert_eq!(
        create(&h, user(0), &root, &long, 0o644),
        Err(nfsstat3(Status::NameTooLong))
    );
    assert_eq!(
        create(&h, user(0), &root, "a/b", 0o644),
        Err(nfsstat3(Status::Inval))
    );
    assert_eq!(
        create(&h, user(0), &root, "", 0o644),
        Err(nfsstat3(Status::Inval))
    );
    assert_eq!(
        create(&h, user(0), &root, "..", 0o644),
        Err(nfsstat3(Status::Exist))
    );
    assert!(create(&h, user(0), &root, &"y".repeat(255), 0o644).is_ok());

    // MKDIR, SYMLINK, READLINK.
    let (o, rep) = call(
        &h,
        user(0),
        9,
        &args(|w| {
            diropargs(w, &root, b"d")?;
            sattr_mode(w, Some(0o755))
        }),
    );
    assert_eq!((o, status(&rep)), (Outcome::Done, 0));
    let d = lookup(&h, user(0), &root, "d").unwrap();
    assert_eq!(getattr(&h, &d).kind, FileKind::Dir as u32);
    assert_eq!(lookup(&h, user(0), &d, "..").unwrap().len(), root.len());
    let (o, rep) = call(
        &h,
        user(0),
        10,
        &args(|w| {
            diropargs(w, &root, b"l")?;
            sattr_mode(w, None)?;
            w.string(b"d/target")
        }),
    );
    assert_eq!((o, status(&rep)), (Outcome::Done, 0));
    let l = lookup(&h, user(0), &root, "l").unwrap();
    let (_, rep) = call(&h, user(0), 5, &args(|w| w.opaque_var(&l)));
    let mut r = XdrReader::new(&rep);
    assert_eq!(r.u32().unwrap(), 0);
    assert_eq!(post_op(&mut r).unwrap().kind, FileKind::Lnk as u32);
    assert_eq!(r.string(4096).unwrap(), b"d/target");
    // READLINK of a directory.
    let (_, rep) = call(&h, user(0), 5, &args(|w| w.opaque_var(&d)));
    assert_eq!(status(&rep), nfsstat3(Status::Inval));

    // LINK (RFC 1813 §3.3.15) of the symlink into "d": the file's attributes with its
    // new count and the directory's wcc, the same handle under the new name, which
    // reads the same target (MKNOD: see `mknod_*`).
    let link = |from: &[u8], dir: &[u8], name: &[u8]| {
        let (o, rep) = call(
            &h,
            user(0),
            15,
            &args(|w| {
                w.opaque_var(from)?;
                diropargs(w, dir, name)
            }),
        );
        assert_eq!(o, Outcome::Done);
        let mut r = XdrReader::new(&rep);
        let st = r.u32().unwrap();
        let a = post_op(&mut r);
        let (pre, post) = wcc(&mut r);
        assert_eq!(r.remaining(), 0, "a well-formed LINK3res");
        (st, a, pre && post.is_some())
    };
    let (st, a, dir_wcc) = link(&l, &d, b"hard");
    assert_eq!(st, 0);
    let a = a.unwrap();
    assert_eq!((a.kind, a.nlink), (FileKind::Lnk as u32, 2));
    assert!(dir_wcc);
    let hard = lookup(&h, user(0), &d, "hard").unwrap();
    assert_eq!(hard, l, "one file, one handle");
    assert_eq!(getattr(&h, &l).fileid, a.fileid);
    let (_, rep) = call(&h, user(0), 5, &args(|w| w.opaque_var(&hard)));
    let mut r = XdrReader::new(&rep);
    assert_eq!(r.u32().unwrap(), 0);
    post_op(&mut r);
    assert_eq!(r.string(4096).unwrap(), b"d/target");
    // Refusals, each with a well-formed reply: a taken name, a directory source, a
    // source that is not a directory as the target directory, a hidden name.
    assert_eq!(link(&l, &root, b"d").0, nfsstat3(Status::Exist));
    assert_eq!(link(&d, &root, b"dd").0, nfsstat3(Status::IsDir));
    assert_eq!(link(&l, &l, b"x").0, nfsstat3(Status::NotDir));
    assert_eq!(
        link(&l, &root, b".nfsgw-inode.1").0,
        nfsstat3(Status::Inval)
    );
    assert_eq!(getattr(&h, &l).nlink, 2);
    let (_, rep) = call(&h, user(0), 12, &args(|w| diropargs(w, &d, b"hard")));
    assert_eq!(status(&rep), 0);
    assert_eq!(getattr(&h, &l).nlink, 1);

    // RENAME then RMDIR.
    let (_, rep) = call(
        &h,
        user(0),
        14,
        &args(|w| {
            diropargs(w, &root, b"d")?;
            diropargs(w, &root, b"e")
        }),
    );
    let mut r = XdrReader::new(&rep);
    assert_eq!(r.u32().unwrap(), 0);
    wcc(&mut r);
    wcc(&mut r);
    assert_eq!(r.remaining(), 0);
    assert!(lookup(&h, user(0), &root, "e").is_ok());
    let (_, rep) = call(&h, user(0), 13, &args(|w| diropargs(w, &root, b"e")));
    assert_eq!(status(&rep), 0);
}

#[test]
fn permissions_and_squash() {
    let h = harness();
    let root = mnt(&h, "/");
    // Root's directory is not writable by others unless its mode allows.
    let (_, rep) = call(
        &h,
        user(0),
        9,
        &args(|w| {
            diropargs(w, &root, b"private")?;
            sattr_mode(w, Some(0o700))
        }),
    );
    assert_eq!(status(&rep), 0);
    let p = lookup(&h, user(0), &root, "private").unwrap();
    assert_eq!(
        create(&h, user(1000), &p, "x", 0o644),
        Err(nfsstat3(Status::Acces))
    );
    assert_eq!(
        lookup(&h, user(1000), &p, "x"),
        Err(nfsstat3(Status::Acces))
    );

    // ACCESS: owner vs other on a 0640 file.
    let f = create(&h, user(0), &root, "f", 0o640).unwrap();
    for (cred, want) in [
        (user(0), ACCESS3_READ | ACCESS3_MODIFY | ACCESS3_EXTEND),
        (user(1000), 0),
        (Cred::Sys(AuthSys::new(1000, 0, &[])), ACCESS3_READ),
    ] {
        let (_, rep) = call(
            &h,
            cred,
            4,
            &args(|w| {
                w.opaque_var(&f)?;
                w.u32(0x3f)
            }),
        );
        let mut r = XdrReader::new(&rep);
        assert_eq!(r.u32().unwrap(), 0);
        post_op(&mut r).unwrap();
        assert_eq!(r.u32().unwrap(), want);
    }
    // chmod by a non-owner → PERM; by root ok.
    let chmod_f = |cred| {
        let (_, rep) = call(
            &h,
            cred,
            2,
            &args(|w| {
                w.opaque_var(&f)?;
                sattr_mode(w, Some(0o600))?;
                w.bool(false)
            }),
        );
        let mut r = XdrReader::new(&rep);
        let st = r.u32().unwrap();
        let (pre, post) = wcc(&mut r);
        assert!(pre && post.is_some());
        st
    };
    assert_eq!(chmod_f(user(1000)), nfsstat3(Status::Perm));
    assert_eq!(chmod_f(user(0)), 0);
    assert_eq!(getattr(&h, &f).mode & 0o777, 0o600);
    // Guard mismatch → NOT_SYNC.
    let (_, rep) = call(
        &h,
        user(0),
        2,
        &args(|w| {
            w.opaque_var(&f)?;
            sattr_mode(w, Some(0o644))?;
            w.bool(true)?;
            w.u32(1)?;
            w.u32(2)
        }),
    );
    assert_eq!(status(&rep), nfsstat3(Status::NotSync));

    // Root-squashed export: root's new files belong to the anonymous user.
    let sq = mnt(&h, "/sq");
    // The squashed export's root is the "sq" directory of "/".
    let sq_in_root = lookup(&h, user(0), &root, "sq").unwrap();
    assert_eq!(getattr(&h, &sq_in_root).fileid, getattr(&h, &sq).fileid);
    chmod(&h, &sq_in_root, 0o777);
    // Squashed root cannot chmod it back.
    let (_, rep) = call(
        &h,
        user(0),
        2,
        &args(|w| {
            w.opaque_var(&sq)?;
            sattr_mode(w, Some(0o700))?;
            w.bool(false)
        }),
    );
    assert_eq!(status(&rep), nfsstat3(Status::Perm));
    let sqf = create(&h, user(0), &sq, "mine", 0o644).unwrap();
    let a = getattr(&h, &sqf);
    assert_eq!((a.uid, a.gid), (65534, 65534));

    // Read-only export: mutations → ROFS, ACCESS without MODIFY/EXTEND/DELETE.
    let ro = mnt(&h, "/ro");
    assert_eq!(
        create(&h, user(0), &ro, "x", 0o644),
        Err(nfsstat3(Status::Rofs))
    );
    let (_, rep) = call(
        &h,
        user(0),
        4,
        &args(|w| {
            w.opaque_var(&ro)?;
            w.u32(0x3f)
        }),
    );
    let mut r = XdrReader::new(&rep);
    assert_eq!(r.u32().unwrap(), 0);
    post_op(&mut r).unwrap();
    assert_eq!(r.u32().unwrap(), ACCESS3_READ | ACCESS3_LOOKUP);
}

#[test]
fn bad_handles_and_refused_clients() {
    let h = harness();
    let (o, rep) = call(&h, user(0), 1, &args(|w| w.opaque_var(b"not a handle")));
    assert_eq!(o, Outcome::Done);
    assert_eq!(rep.len(), 4);
    let st = status(&rep);
    assert!(
        st == nfsstat3(Status::BadHandle) || st == nfsstat3(Status::Stale),
        "{st}"
    );
    // Failure shape of a wcc procedure.
    let (_, rep) = call(&h, user(0), 12, &args(|w| diropargs(w, b"junk", b"x")));
    assert_eq!(rep.len(), 12);

    // A client outside the export's networks: MNT refused, handles refused.
    let (_, rep) = mcall(&h, user(0), 1, &args(|w| w.string(b"/far")));
    assert_eq!(rep, vec![0, 0, 0, 13]);
    let node = h.model.root(2).unwrap();
    let fh = h.model.handle(&node);
    let (_, rep) = call(&h, user(0), 1, &args(|w| w.opaque_var(fh.as_bytes())));
    assert_eq!(rep, (nfsstat3(Status::Acces)).to_be_bytes());
    // Unknown export path.
    let (_, rep) = mcall(&h, user(0), 1, &args(|w| w.string(b"/nope")));
    assert_eq!(rep, vec![0, 0, 0, 2]);
}

#[test]
fn fsinfo_pathconf_fsstat() {
    let h = harness();
    let root = mnt(&h, "/");
    let (_, rep) = call(&h, user(0), 19, &args(|w| w.opaque_var(&root)));
    let mut r = XdrReader::new(&rep);
    assert_eq!(r.u32().unwrap(), 0);
    post_op(&mut r).unwrap();
    let v: Vec<u32> = (0..7).map(|_| r.u32().unwrap()).collect();
    assert_eq!(
        v,
        vec![1 << 20, 1 << 20, 4096, 1 << 20, 1 << 20, 4096, 65536]
    );
    // maxfilesize: what this (memory) backend can hold, not the protocol's maximum.
    assert_eq!(r.u64().unwrap(), crate::backend::memory::MAX_OBJECT);
    assert_eq!((r.u32().unwrap(), r.u32().unwrap()), (0, 1));
    // FSF3_LINK: LINK makes hard links (RFC 1813 §3.3.19).
    assert_eq!(
        r.u32().unwrap(),
        FSF3_LINK | FSF3_SYMLINK | FSF3_HOMOGENEOUS | FSF3_CANSETTIME
    );
    assert_eq!(r.remaining(), 0);

    let (_, rep) = call(&h, user(0), 20, &args(|w| w.opaque_var(&root)));
    let mut r = XdrReader::new(&rep);
    assert_eq!(r.u32().unwrap(), 0);
    post_op(&mut r).unwrap();
    let v: Vec<u32> = (0..6).map(|_| r.u32().unwrap()).collect();
    assert_eq!(v, vec![crate::fs::LINK_MAX, 255, 1, 1, 0, 1]);
    assert_eq!(r.remaining(), 0);

    let (_, rep) = call(&h, user(0), 18, &args(|w| w.opaque_var(&root)));
    let mut r = XdrReader::new(&rep);
    assert_eq!(r.u32().unwrap(), 0);
    post_op(&mut r).unwrap();
    r.skip(48).unwrap();
    assert_eq!(r.u32().unwrap(), 0);
    assert_eq!(r.remaining(), 0);
}

#[test]
fn mount_export_dump_umnt() {
    let h = harness();
    let (o, rep) = mcall(&h, user(0), 5, &[]);
    assert_eq!(o, Outcome::Done);
    let mut r = XdrReader::new(&rep);
    let mut seen = Vec::new();
    while r.bool().unwrap() {
        let dir = String::from_utf8(r.string(1024).unwrap().to_vec()).unwrap();
        let mut groups = Vec::new();
        while r.bool().unwrap() {
            groups.push(String::from_utf8(r.string(255).unwrap().to_vec()).unwrap());
        }
        seen.push((dir, groups));
    }
    assert_eq!(r.remaining(), 0);
    assert_eq!(seen.len(), 4);
    assert_eq!(seen[0], ("/".to_string(), vec!["127.0.0.0/8".to_string()]));
    assert_eq!(seen[2].0, "/far");

    mnt(&h, "/ro/");
    mnt(&h, "//");
    let (_, rep) = mcall(&h, user(0), 2, &[]);
    let mut r = XdrReader::new(&rep);
    let mut dirs = Vec::new();
    while r.bool().unwrap() {
        assert_eq!(r.string(255).unwrap(), b"127.0.0.1");
        dirs.push(String::from_utf8(r.string(1024).unwrap().to_vec()).unwrap());
    }
    assert_eq!(r.remaining(), 0);
    assert_eq!(dirs, vec!["/ro".to_string(), "/".to_string()]);
    let (o, rep) = mcall(&h, user(0), 3, &args(|w| w.string(b"/ro")));
    assert_eq!((o, rep.len()), (Outcome::Done, 0));
    assert_eq!(h.mounts.list().len(), 1);
    let (o, rep) = mcall(&h, user(0), 4, &[]);
    assert_eq!((o, rep.len()), (Outcome::Done, 0));
    assert!(h.mounts.list().is_empty());
    let (o, rep) = mcall(&h, user(0), 0, &[]);
    assert_eq!((o, rep.len()), (Outcome::Done, 0));
    assert_eq!(mcall(&h, user(0), 6, &[]).0, Outcome::ProcUnavail);
    assert_eq!(mcall(&h, user(0), 1, &[0, 0, 0]).0, Outcome::GarbageArgs);
    assert_eq!(
        mcall(&h, user(0), 1, &args(|w| w.string(&[b'/'; 1025]))).0,
        Outcome::GarbageArgs
    );
    assert_eq!(mcall(&h, user(0), 3, &[0, 0, 0, 9]).0, Outcome::GarbageArgs);
}

#[test]
fn mount_subdirectory() {
    let h = harness();
    let root = mnt(&h, "/");
    let (_, rep) = call(
        &h,
        user(0),
        9,
        &args(|w| {
            diropargs(w, &root, b"sub")?;
            sattr_mode(w, Some(0o755))
        }),
    );
    assert_eq!(status(&rep), 0);
    let sub = lookup(&h, user(0), &root, "sub").unwrap();
    let m = mnt(&h, "/sub/");
    assert_eq!(getattr(&h, &m).fileid, getattr(&h, &sub).fileid);
    let (_, rep) = mcall(&h, user(0), 1, &args(|w| w.string(b"/sub/missing")));
    assert_eq!(rep, vec![0, 0, 0, 2]);
}

/// Valid arguments for every procedure, built around real handles.
fn sample_args(h: &H) -> Vec<(u32, Vec<u8>)> {
    let root = mnt(h, "/");
    let f = create(h, user(0), &root, "sample", 0o644).unwrap();
    let s = |w: &mut XdrWriter| sattr_mode(w, Some(0o644));
    vec![
        (1, args(|w| w.opaque_var(&f))),
        (
            2,
            args(|w| {
                w.opaque_var(&f)?;
                s(w)?;
                w.bool(true)?;
                w.u64(0)
            }),
        ),
        (3, args(|w| diropargs(w, &root, b"sample"))),
        (
            4,
            args(|w| {
                w.opaque_var(&f)?;
                w.u32(0x3f)
            }),
        ),
        (5, args(|w| w.opaque_var(&f))),
        (
            6,
            args(|w| {
                w.opaque_var(&f)?;
                w.u64(0)?;
                w.u32(100)
            }),
        ),
        (
            7,
            args(|w| {
                w.opaque_var(&f)?;
                w.u64(0)?;
                w.u32(5)?;
                w.u32(2)?;
                w.opaque_var(b"hello")
            }),
        ),
        (
            8,
            args(|w| {
                diropargs(w, &root, b"c")?;
                w.u32(2)?;
                w.opaque_fixed(b"verifier")
            }),
        ),
        (
            9,
            args(|w| {
                diropargs(w, &root, b"dd")?;
                s(w)
            }),
        ),
        (
            10,
            args(|w| {
                diropargs(w, &root, b"ll")?;
                s(w)?;
                w.string(b"target")
            }),
        ),
        (
            11,
            args(|w| {
                diropargs(w, &root, b"nn")?;
                w.u32(3)?;
                s(w)?;
                w.u32(1)?;
                w.u32(2)
            }),
        ),
        (12, args(|w| diropargs(w, &root, b"nothere"))),
        (13, args(|w| diropargs(w, &root, b"nothere"))),
        (
            14,
            args(|w| {
                diropargs(w, &root, b"nothere")?;
                diropargs(w, &root, b"other")
            }),
        ),
        (
            15,
            args(|w| {
                w.opaque_var(&f)?;
                diropargs(w, &root, b"hard")
            }),
        ),
        (
            16,
            args(|w| {
                w.opaque_var(&root)?;
                w.u64(0)?;
                w.opaque_fixed(&[0; 8])?;
                w.u32(4096)
            }),
        ),
        (
            17,
            args(|w| {
                w.opaque_var(&root)?;
                w.u64(0)?;
                w.opaque_fixed(&[0; 8])?;
                w.u32(4096)?;
                w.u32(8192)
            }),
        ),
        (18, args(|w| w.opaque_var(&root))),
        (19, args(|w| w.opaque_var(&root))),
        (20, args(|w| w.opaque_var(&root))),
        (
            21,
            args(|w| {
                w.opaque_var(&f)?;
                w.u64(0)?;
                w.u32(0)
            }),
        ),
    ]
}

#[test]
fn truncated_args_are_garbage_at_every_length() {
    let h = harness();
    for (proc_, a) in sample_args(&h) {
        for n in 0..a.len() {
            let (o, _) = call(&h, user(0), proc_, &a[..n]);
            assert_eq!(o, Outcome::GarbageArgs, "proc {proc_} truncated to {n}");
        }
        let (o, _) = call(&h, user(0), proc_, &a);
        assert_eq!(o, Outcome::Done, "proc {proc_} full args");
        // Trailing garbage is allowed.
        let mut longer = a.clone();
        longer.extend_from_slice(&[1, 2, 3]);
        assert_eq!(
            call(&h, user(0), proc_, &longer).0,
            Outcome::Done,
            "proc {proc_}"
        );
        assert!(reply_capacity(proc_, &a) >= 512);
    }
    assert_eq!(call(&h, user(0), 0, &[]).0, Outcome::Done);
    assert_eq!(call(&h, user(0), 22, &[]).0, Outcome::ProcUnavail);
    // WRITE whose data is shorter than count.
    let f = lookup(&h, user(0), &mnt(&h, "/"), "sample").unwrap();
    let a = args(|w| {
        w.opaque_var(&f)?;
        w.u64(0)?;
        w.u32(10)?;
        w.u32(0)?;
        w.opaque_var(b"short")
    });
    assert_eq!(call(&h, user(0), 7, &a).0, Outcome::GarbageArgs);
    // Oversized handle.
    let a = args(|w| w.opaque_var(&[0u8; 65]));
    assert_eq!(call(&h, user(0), 1, &a).0, Outcome::GarbageArgs);
}

#[test]
fn random_args_never_panic() {
    let h = harness();
    let samples = sample_args(&h);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..3000 {
        let (proc_, base) = &samples[round % samples.len()];
        // SETATTR sizes and WRITE offsets from random bytes could ask the memory
        // backend for exabytes; those procedures get the truncation test only.
        if *proc_ == 2 || *proc_ == 7 {
            continue;
        }
        let mut a = base.clone();
        // Flip a few bytes of otherwise valid args.
        for _ in 0..(next() % 4 + 1) {
            let i = (next() as usize) % a.len();
            a[i] = next() as u8;
        }
        let _ = reply_capacity(*proc_, &a);
        let (o, _) = call(&h, user((next() % 3) as u32 * 1000), *proc_, &a);
        assert_ne!(o, Outcome::ProcUnavail);
        let junk: Vec<u8> = (0..(next() % 64)).map(|_| next() as u8).collect();
        let _ = call(&h, Cred::None, (next() % 22) as u32, &junk);
        let _ = mcall(&h, Cred::None, (next() % 6) as u32, &junk);
    }
}

#[test]
fn reply_capacity_sizes() {
    let fh = [7u8; 32];
    let read = args(|w| {
        w.opaque_var(&fh)?;
        w.u64(0)?;
        w.u32(u32::MAX)
    });
    assert_eq!(reply_capacity(6, &read), (1 << 20) + 512);
    let read = args(|w| {
        w.opaque_var(&fh)?;
        w.u64(0)?;
        w.u32(1000)
    });
    assert_eq!(reply_capacity(6, &read), 1512);
    let rdp = args(|w| {
        w.opaque_var(&fh)?;
        w.u64(0)?;
        w.opaque_fixed(&[0; 8])?;
        w.u32(100)?;
        w.u32(1 << 20)
    });
    assert_eq!(reply_capacity(17, &rdp), (64 << 10) + 512);
    assert!(reply_capacity(6, &[1, 2]) <= 8192);
    assert!(reply_capacity(1, &[]) <= 8192);
    assert!(reply_capacity(99, &[0xff; 9]) <= 8192);
}

/// A READ into a buffer smaller than the requested count is clamped, not failed.
#[test]
fn read_clamped_to_buffer() {
    let h = harness();
    let root = mnt(&h, "/");
    let f = create(&h, user(0), &root, "big", 0o644).unwrap();
    let data = vec![5u8; 100_000];
    assert_eq!(write(&h, &f, 0, &data, 2).0, 0);
    let a = args(|w| {
        w.opaque_var(&f)?;
        w.u64(0)?;
        w.u32(100_000)
    });
    let mut buf = vec![0u8; 4096];
    let c = ctx(&h, user(0));
    let mut w = XdrWriter::new(&mut buf);
    assert_eq!(serve(&c, 6, &a, &mut w), Outcome::Done);
    let n = w.position();
    let mut r = XdrReader::new(&buf[..n]);
    assert_eq!(r.u32().unwrap(), 0);
    post_op(&mut r).unwrap();
    let cnt = r.u32().unwrap() as usize;
    assert!(!r.bool().unwrap());
    assert!(cnt > 3000 && cnt <= 4096);
    assert_eq!(r.opaque_var(4096).unwrap(), &data[..cnt]);
}

#[test]
fn sticky_dirs_and_unchecked_truncate() {
    let h = harness();
    let root = mnt(&h, "/");
    let (_, rep) = call(
        &h,
        user(0),
        9,
        &args(|w| {
            diropargs(w, &root, b"tmp")?;
            sattr_mode(w, Some(0o1777))
        }),
    );
    assert_eq!(status(&rep), 0);
    let t = lookup(&h, user(0), &root, "tmp").unwrap();
    assert_eq!(getattr(&h, &t).mode & 0o7777, 0o1777);
    create(&h, user(1000), &t, "a", 0o644).unwrap();
    let remove = |uid| {
        let (_, rep) = call(&h, user(uid), 12, &args(|w| diropargs(w, &t, b"a")));
        status(&rep)
    };
    // Another user may not truncate it through CREATE UNCHECKED with a size...
    let (_, rep) = call(
        &h,
        user(2000),
        8,
        &args(|w| {
            diropargs(w, &t, b"a")?;
            w.u32(0)?;
            for _ in 0..3 {
                w.bool(false)?;
            }
            w.bool(true)?;
            w.u64(0)?;
            w.u32(0)?;
            w.u32(0)
        }),
    );
    assert_eq!(status(&rep), nfsstat3(Status::Acces));
    // ...nor remove it from the sticky directory; the owner may.
    assert_eq!(remove(2000), nfsstat3(Status::Acces));
    assert_eq!(remove(1000), 0);
    // Renames across exports are refused.
    let ro = mnt(&h, "/ro");
    let (_, rep) = call(
        &h,
        user(0),
        14,
        &args(|w| {
            diropargs(w, &t, b"x")?;
            diropargs(w, &ro, b"y")
        }),
    );
    assert_eq!(status(&rep), nfsstat3(Status::Rofs));
    let sq = mnt(&h, "/sq");
    let (_, rep) = call(
        &h,
        user(0),
        14,
        &args(|w| {
            diropargs(w, &t, b"x")?;
            diropargs(w, &sq, b"y")
        }),
    );
    assert_eq!(rep.len(), 4 + 2 * (28 + 88));
    assert_eq!(status(&rep), nfsstat3(Status::XDev));
}

/// MKNOD with `data` (mknoddata3 after the diropargs) → the new handle and its full
/// attributes, or the status (the failure carries the directory's wcc_data).
fn mknod(
    h: &H,
    cred: Cred,
    dir: &[u8],
    name: &str,
    data: impl FnOnce(&mut XdrWriter) -> XdrResult<()>,
) -> Result<(Vec<u8>, crate::fs::Attr), u32> {
    let a = args(|w| {
        diropargs(w, dir, name.as_bytes())?;
        data(w)
    });
    let (o, rep) = call(h, cred, 11, &a);
    assert_eq!(o, Outcome::Done);
    let mut r = XdrReader::new(&rep);
    let st = r.u32().unwrap();
    if st != 0 {
        let (pre, post) = wcc(&mut r);
        assert!(pre && post.is_some(), "MKNOD failure carries dir wcc");
        assert_eq!(r.remaining(), 0);
        return Err(st);
    }
    assert!(r.bool().unwrap());
    let fh = r.opaque_var(64).unwrap().to_vec();
    assert!(r.bool().unwrap());
    let attr = get_fattr(&mut r).unwrap();
    let (pre, post) = wcc(&mut r);
    assert!(pre && post.is_some());
    assert_eq!(r.remaining(), 0);
    Ok((fh, attr))
}

fn special(
    kind: u32,
    mode: Option<u32>,
    rdev: Option<(u32, u32)>,
) -> impl FnOnce(&mut XdrWriter) -> XdrResult<()> {
    move |w| {
        w.u32(kind)?;
        if matches!(kind, 3 | 4 | 6 | 7) {
            sattr_mode(w, mode)?;
        }
        if let Some((ma, mi)) = rdev {
            w.u32(ma)?;
            w.u32(mi)?;
        }
        Ok(())
    }
}

/// MKNOD (RFC 1813 §3.3.11): fifos, sockets and devices with their type, mode and
/// rdev in the reply and in GETATTR; NF3REG/NF3DIR/NF3LNK → BADTYPE; devices only
/// for root (PERM, as knfsd's vfs_mknod without CAP_MKNOD); the directory checks of
/// CREATE (ACCES, ROFS, EXIST); READ/WRITE on them → INVAL; READDIRPLUS lists them.
#[test]
fn mknod_creates_special_files() {
    let h = harness();
    let root = mnt(&h, "/");
    let cases = [
        ("fifo", 7, FileKind::Fifo, None, 0o640),
        ("sock", 6, FileKind::Sock, None, 0o600),
        ("null", 4, FileKind::Chr, Some((1, 3)), 0o666),
        ("sda", 3, FileKind::Blk, Some((8, 0)), 0o660),
        ("big", 4, FileKind::Chr, Some((u32::MAX, 1 << 31)), 0o600),
    ];
    for (name, t, kind, rdev, mode) in cases {
        let (fh, a) = mknod(&h, user(0), &root, name, special(t, Some(mode), rdev)).unwrap();
        assert_eq!((a.kind, a.mode, a.size), (kind, mode, 0), "{name}");
        assert_eq!(a.rdev, rdev.unwrap_or((0, 0)), "{name}");
        let (o, rep) = call(&h, user(0), 1, &args(|w| w.opaque_var(&fh)));
        assert_eq!(o, Outcome::Done);
        let mut r = XdrReader::new(&rep);
        assert_eq!(r.u32().unwrap(), 0);
        let g = get_fattr(&mut r).unwrap();
        assert_eq!((g.kind, g.rdev, g.fileid), (kind, a.rdev, a.fileid));
    }
    // A mode-less sattr3 gets the default.
    let (_, a) = mknod(&h, user(0), &root, "p2", special(7, None, None)).unwrap();
    assert_eq!(a.mode, 0o644);
    for t in [1, 2, 5] {
        assert_eq!(
            mknod(&h, user(0), &root, "x", special(t, None, None)).err(),
            Some(nfsstat3(Status::BadType)),
            "type {t}"
        );
    }
    assert_eq!(
        lookup(&h, user(0), &root, "x"),
        Err(nfsstat3(Status::NoEnt))
    );
    assert_eq!(
        mknod(&h, user(0), &root, "fifo", special(7, None, None)).err(),
        Some(nfsstat3(Status::Exist))
    );
    // Any other type is not a mknoddata3.
    let (o, _) = call(
        &h,
        user(0),
        11,
        &args(|w| {
            diropargs(w, &root, b"y")?;
            w.u32(8)
        }),
    );
    assert_eq!(o, Outcome::GarbageArgs);

    // Users: fifos and sockets where they may create, devices never.
    let (o, rep) = call(
        &h,
        user(0),
        9,
        &args(|w| {
            diropargs(w, &root, b"pub")?;
            sattr_mode(w, Some(0o777))
        }),
    );
    assert_eq!((o, status(&rep)), (Outcome::Done, 0));
    let public = lookup(&h, user(0), &root, "pub").unwrap();
    let (_, a) = mknod(
        &h,
        user(1000),
        &public,
        "myfifo",
        special(7, Some(0o600), None),
    )
    .unwrap();
    assert_eq!((a.kind, a.uid), (FileKind::Fifo, 1000));
    for t in [3, 4] {
        assert_eq!(
            mknod(
                &h,
                user(1000),
                &public,
                "dev",
                special(t, None, Some((1, 1)))
            )
            .err(),
            Some(nfsstat3(Status::Perm))
        );
    }
    // Without write permission on the directory: ACCES first (as knfsd's may_create).
    assert_eq!(
        mknod(&h, user(1000), &root, "dev", special(4, None, Some((1, 1)))).err(),
        Some(nfsstat3(Status::Acces))
    );
    // Giving the new node away is PERM as for CREATE.
    let give = |w: &mut XdrWriter| {
        w.u32(7)?;
        w.bool(false)?;
        w.bool(true)?;
        w.u32(0)?;
        for _ in 0..4 {
            w.bool(false)?;
        }
        Ok(())
    };
    assert_eq!(
        mknod(&h, user(1000), &public, "given", give).err(),
        Some(nfsstat3(Status::Perm))
    );
    let ro = mnt(&h, "/ro");
    assert_eq!(
        mknod(&h, user(0), &ro, "f", special(7, None, None)).err(),
        Some(nfsstat3(Status::Rofs))
    );

    // No data on special files.
    let fifo = lookup(&h, user(0), &root, "fifo").unwrap();
    let null = lookup(&h, user(0), &root, "null").unwrap();
    assert_eq!(
        read(&h, user(0), &fifo, 0, 10),
        Err(nfsstat3(Status::Inval))
    );
    assert_eq!(
        read(&h, user(0), &null, 0, 10),
        Err(nfsstat3(Status::Inval))
    );
    assert_eq!(write(&h, &null, 0, b"x", 2).0, nfsstat3(Status::Inval));

    let names = list_all(&h, true, &root, 4096);
    for n in ["fifo", "sock", "null", "sda", "big", "p2", "pub"] {
        assert!(names.iter().any(|x| x == n), "{n} in {names:?}");
    }
    // REMOVE and RENAME as for files.
    let (o, rep) = call(&h, user(0), 12, &args(|w| diropargs(w, &root, b"p2")));
    assert_eq!((o, status(&rep)), (Outcome::Done, 0));
    let (o, rep) = call(
        &h,
        user(0),
        14,
        &args(|w| {
            diropargs(w, &root, b"sda")?;
            diropargs(w, &public, b"sda")
        }),
    );
    assert_eq!((o, status(&rep)), (Outcome::Done, 0));
    let sda = lookup(&h, user(0), &public, "sda").unwrap();
    let (o, rep) = call(&h, user(0), 1, &args(|w| w.opaque_var(&sda)));
    assert_eq!(o, Outcome::Done);
    let mut r = XdrReader::new(&rep);
    assert_eq!(r.u32().unwrap(), 0);
    let g = get_fattr(&mut r).unwrap();
    assert_eq!((g.kind, g.rdev), (FileKind::Blk, (8, 0)));
}

/// A worker's GETATTR, READ and WRITE note what they learned as they encode
/// (`call::note_learned`): the file model's attributes and, for a READ, where its
/// data lies in the reply, so the worker's cache fill needs no decoding of the
/// reply. A failed call notes nothing.
#[test]
fn replies_note_what_the_caches_may_learn() {
    use crate::call::take_learned;
    let h = harness();
    let root = mnt(&h, "/");
    let f = create(&h, user(0), &root, "learned", 0o644).unwrap();
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
    let _ = take_learned();
    assert_eq!(write(&h, &f, 0, &data, 2).0, 0);
    let w = take_learned().expect("a WRITE notes its attributes after");
    assert_eq!((w.attr.size, w.data), (10_000, None));

    let (o, rep) = call(&h, user(0), 1, &args(|w| w.opaque_var(&f)));
    assert_eq!(o, Outcome::Done);
    let g = take_learned().expect("a GETATTR notes its attributes");
    let mut r = XdrReader::new(&rep[4..]);
    let wire = get_fattr(&mut r).unwrap();
    assert_eq!(
        (g.attr.fileid, g.attr.size, g.data),
        (wire.fileid, 10_000, None)
    );

    let a = args(|w| {
        w.opaque_var(&f)?;
        w.u64(100)?;
        w.u32(5000)
    });
    let (o, rep) = call(&h, user(0), 6, &a);
    assert_eq!(o, Outcome::Done);
    let l = take_learned().expect("a READ notes its attributes and data");
    let (at, len) = l.data.expect("where the data is");
    assert_eq!(&rep[at..at + len], &data[100..5100]);
    assert_eq!(l.attr.fileid, g.attr.fileid);

    // READ of a directory: IsDir, nothing learned.
    let a = args(|w| {
        w.opaque_var(&root)?;
        w.u64(0)?;
        w.u32(10)
    });
    let (_, rep) = call(&h, user(0), 6, &a);
    assert_ne!(status(&rep), 0);
    assert_eq!(take_learned(), None);
}

/// The reactor's cached GETATTR and READ (`fast`, encoding the cache's neutral
/// outcomes with `outcome`) answer with the bytes the worker's procedure writes.
#[test]
fn cached_answers_are_the_workers_bytes() {
    use crate::cache::{FhKey, Fill, FillData, Generations, ReadCache, Request};
    use crate::call::take_learned;
    let h = harness();
    let root = mnt(&h, "/");
    let f = create(&h, user(0), &root, "cached", 0o644).unwrap();
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 3) as u8).collect();
    assert_eq!(write(&h, &f, 0, &data, 2).0, 0);
    let gens = Generations::new();
    let mut cache = ReadCache::new(16 * crate::cache::PAGE, engine::mem::HugePolicy::Off).unwrap();
    let (export, fileid) = FileModel::peek_handle(&f).unwrap();
    let stamp = gens.stamp(fileid);
    let a = args(|w| {
        w.opaque_var(&f)?;
        w.u64(0)?;
        w.u32(8192)
    });
    let _ = take_learned();
    let (_, read_rep) = call(&h, user(0), 6, &a);
    let l = take_learned().unwrap();
    let (at, len) = l.data.unwrap();
    let fill = Fill {
        fh: FhKey::new(&f).unwrap(),
        export,
        attr: l.attr,
        stamp,
        data: Some(FillData::InReply { offset: 0, at, len }),
        exact: false,
    };
    cache.fill(&gens, fill, Some(&read_rep));
    let cred = user(0);
    let req = Request {
        fh: &f,
        client: "127.0.0.1".parse().unwrap(),
        cred: &cred,
    };
    let mut buf = vec![0u8; 64 << 10];
    let mut w = XdrWriter::new(&mut buf);
    let placed = fast::read(&mut cache, &gens, &h.exports, &req, (0, 8192), &mut w);
    let n = w.position();
    assert_eq!(&buf[..n], &read_rep[..]);
    // The answer says where its data went (RFC 8267 §4): where the worker put it.
    assert_eq!(placed, Some(at..at + len));

    let (_, getattr_rep) = call(&h, user(0), 1, &args(|w| w.opaque_var(&f)));
    let mut w = XdrWriter::new(&mut buf);
    assert!(fast::getattr(&mut cache, &gens, &h.exports, &req, &mut w));
    let n = w.position();
    assert_eq!(&buf[..n], &getattr_rep[..]);

    // Zero copy: the head up to the data's length word, then the pinned pages.
    let mut w = XdrWriter::new(&mut buf);
    let pages = fast::read_pages(&mut cache, &gens, &h.exports, &req, (0, 8192), 9, &mut w)
        .expect("cached");
    let n = w.position();
    assert_eq!(&buf[..n], &read_rep[..n]);
    assert_eq!(read_rep.len(), n + 8192);
    assert_eq!(pages.as_slice().iter().map(|s| s.len).sum::<u32>(), 8192);
    cache.release(pages);
    // A range not cached: nothing written.
    let mut w = XdrWriter::new(&mut buf);
    let missed = fast::read(&mut cache, &gens, &h.exports, &req, (8192, 100), &mut w);
    assert_eq!((missed, w.position()), (None, 0));
}

/// RFC 8267 §4: an NFSv3 READ or READLINK reply's one DDP item is noted by the
/// encoder that writes it (`crate::ddp::note`), exactly where a walk of the reply
/// (`ulb::reply_data`, a test oracle) finds it, so the RDMA transport never reads the
/// reply; an error arm notes none (its write chunk comes back unused).
#[test]
fn read_and_readlink_note_their_ddp_item_as_they_encode() {
    use crate::ulb::{reply_data, ReplyItem};
    use engine::rpc::{write_accepted, Accept};
    let h = harness();
    let root = mnt(&h, "/");
    let f = create(&h, user(0), &root, "placed", 0o644).unwrap();
    let data: Vec<u8> = (0..9_000u32).map(|i| (i * 5) as u8).collect();
    assert_eq!(write(&h, &f, 0, &data, 2).0, 0);
    let link = args(|w| {
        diropargs(w, &root, b"l")?;
        sattr_mode(w, None)?;
        w.string(b"some/target")
    });
    assert_eq!(status(&call(&h, user(0), 10, &link).1), 0);
    let l = lookup(&h, user(0), &root, "l").unwrap();
    // A whole RPC reply, as a worker encodes it after the record-mark slot.
    let rpc = |proc_: u32, a: &[u8]| {
        let mut buf = vec![0u8; 64 << 10];
        let mut w = XdrWriter::at(&mut buf, 4);
        write_accepted(&mut w, 9, Accept::Success).unwrap();
        let c = ctx(&h, user(0));
        assert_eq!(serve(&c, proc_, a, &mut w), Outcome::Done);
        let n = w.position();
        buf.truncate(n);
        buf
    };
    let read = |fh: &[u8]| {
        args(|w| {
            w.opaque_var(fh)?;
            w.u64(100)?;
            w.u32(5000)
        })
    };
    let _ = crate::ddp::take();
    let rep = rpc(6, &read(&f));
    let noted = crate::ddp::take().expect("a READ notes its data");
    let at = reply_data(ReplyItem::ReadData, &rep[4..]).map(|r| r.start + 4..r.end + 4);
    assert_eq!((noted.len(), noted.get(0)), (1, Some(at.clone())));
    assert_eq!(&rep[at.unwrap()], &data[100..5100]);

    let rep = rpc(5, &args(|w| w.opaque_var(&l)));
    let noted = crate::ddp::take().expect("a READLINK notes its path");
    let at = reply_data(ReplyItem::ReadlinkPath, &rep[4..]).map(|r| r.start + 4..r.end + 4);
    assert_eq!((noted.len(), noted.get(0)), (1, Some(at.clone())));
    assert_eq!(&rep[at.unwrap()], b"some/target");

    // Error arms: a READ of a directory, a READLINK of a file.
    rpc(6, &read(&root));
    assert_eq!(crate::ddp::take(), None);
    rpc(5, &args(|w| w.opaque_var(&f)));
    assert_eq!(crate::ddp::take(), None);
}

mod stat_tests;

mod lookup_cache_tests;
