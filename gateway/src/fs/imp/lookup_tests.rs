//! `resolve_attr` and `lookup_attr` (docs/performance.md "Stat and listing CPU"):
//! the metadata a handle's resolution or a name's look-up reads gives the found
//! object's attributes, so a worker's GETATTR reads its object once and a LOOKUP
//! its directory and its object once each — on `fs` one `fstat` each, where
//! `resolve` + `getattr` and `lookup` + `getattr` made two. The attributes must be
//! exactly `getattr`'s, for files, directories, hard links, "." and "..", and as
//! fresh: a change behind the gateway's back shows in the next call.

use super::*;

fn same(m: &FileModel, got: (Node, Attr), want: &Node) {
    let (node, a) = got;
    assert_eq!(node, *want);
    assert_eq!(a, m.getattr(want).unwrap(), "{}", want.key);
}

#[test]
fn resolve_and_lookup_give_getattrs_attributes_on_every_backend() {
    each(|m, _, _| {
        let root = m.root(0).unwrap();
        let d = m.mkdir(&root, b"d", &SetAttr::default(), OWNER).unwrap();
        let f = mkfile(m, &d, "f");
        m.write(&f, 0, b"hello", Stable::FileSync).unwrap();
        let sub = m.mkdir(&d, b"sub", &SetAttr::default(), OWNER).unwrap();
        for n in [&root, &d, &f, &sub] {
            same(m, m.resolve_attr(m.handle(n).as_bytes()).unwrap(), n);
        }
        same(m, m.lookup_attr(&d, b"f").unwrap(), &f);
        same(m, m.lookup_attr(&d, b"sub").unwrap(), &sub);
        same(m, m.lookup_attr(&d, b".").unwrap(), &d);
        same(m, m.lookup_attr(&sub, b"..").unwrap(), &d);
        assert_eq!(m.lookup_attr(&d, b"none").unwrap_err(), Status::NoEnt);
        assert_eq!(m.lookup_attr(&f, b"x").unwrap_err(), Status::NotDir);
        // A second name of a file: its inode's node and attributes (nlink 2).
        let e = m.mkdir(&root, b"e", &SetAttr::default(), OWNER).unwrap();
        let ffh = m.handle(&f);
        let linked = m.link(&f, &e, b"g").unwrap();
        let (g, ga) = m.lookup_attr(&e, b"g").unwrap();
        assert_eq!((g.fileid, ga.nlink), (f.fileid, 2));
        same(m, (g.clone(), ga), &linked);
        same(m, m.lookup_attr(&d, b"f").unwrap(), &g);
        same(m, m.resolve_attr(ffh.as_bytes()).unwrap(), &g);
        // Removed: the handle is STALE, the name gone.
        m.remove(&d, b"f").unwrap();
        m.remove(&e, b"g").unwrap();
        assert_eq!(m.resolve_attr(ffh.as_bytes()).unwrap_err(), Status::Stale);
        assert_eq!(m.lookup_attr(&d, b"f").unwrap_err(), Status::NoEnt);
    });
}

/// On `fs`, with the objects open in the backend's cache: resolving a handle with
/// its attributes is one `fstat`, a look-up with the found object's attributes one
/// more, no path walk, no metadata re-read; a file changed behind the gateway's back
/// shows its new size at once (the one `fstat` is of now).
#[test]
fn a_stat_reads_each_object_once_on_the_fs_backend() {
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("data");
    let fsb: Arc<dyn Backend> = Arc::new(FsBackend::open(&data).unwrap());
    let m = FileModel::open(fsb, &d.path().join("state"), &exports()).unwrap();
    let root = m.root(0).unwrap();
    let dir = m.mkdir(&root, b"top", &SetAttr::default(), OWNER).unwrap();
    let f = mkfile(&m, &dir, "f");
    m.write(&f, 0, b"12345", Stable::FileSync).unwrap();
    let dfh = m.handle(&dir);
    // Warm: both objects open in the backend's cache.
    m.lookup_attr(&m.resolve(dfh.as_bytes()).unwrap(), b"f")
        .unwrap();

    FsBackend::take_calls();
    let (dn, da) = m.resolve_attr(dfh.as_bytes()).unwrap();
    let calls = FsBackend::take_calls();
    assert_eq!(da.kind, FileKind::Dir);
    assert_eq!(calls.get("fstat"), Some(&1), "{calls:?}");
    assert_eq!(calls.values().sum::<u32>(), 1, "{calls:?}");

    let (_, fa) = m.lookup_attr(&dn, b"f").unwrap();
    let calls = FsBackend::take_calls();
    assert_eq!(fa.size, 5);
    assert_eq!(calls.get("fstat"), Some(&1), "{calls:?}");
    assert_eq!(calls.values().sum::<u32>(), 1, "{calls:?}");

    // Behind the gateway's back: the next look-up reads the new size.
    std::fs::write(data.join("top/f"), b"1234567890").unwrap();
    let (_, fa) = m.lookup_attr(&dn, b"f").unwrap();
    assert_eq!(fa.size, 10);
    let (_, fa) = m.resolve_attr(m.handle(&f).as_bytes()).unwrap();
    assert_eq!(fa.size, 10);
}
