//! Hard links (`links`), on every backend: one file, one handle and file id under
//! every name, `nlink` counting the names, and REMOVE / RENAME of any name right.

use super::*;

fn nlink(m: &FileModel, n: &Node) -> u32 {
    m.getattr(n).unwrap().nlink
}

fn read_all(m: &FileModel, n: &Node) -> Vec<u8> {
    let mut buf = vec![0u8; 64];
    let (got, _) = m.read(n, 0, &mut buf).unwrap();
    buf.truncate(got);
    buf
}

/// link/00-style: both names are the same file (id, handle, data, attributes), the
/// count follows LINK and REMOVE, and the file goes with its last name.
#[test]
fn link_names_one_file_and_remove_each_name_in_turn() {
    each(|m, _, _| {
        let root = m.root(0).unwrap();
        let d = m.mkdir(&root, b"d", &SetAttr::default(), OWNER).unwrap();
        let e = m.mkdir(&root, b"e", &SetAttr::default(), OWNER).unwrap();
        let f = mkfile(m, &d, "f");
        m.write(&f, 0, b"hello", Stable::FileSync).unwrap();
        let fh = m.handle(&f);
        assert_eq!(nlink(m, &f), 1);
        let n = m.link(&f, &e, b"g").unwrap();
        assert_eq!(n.fileid, f.fileid);
        let g = m.lookup(&e, b"g").unwrap();
        let f2 = m.lookup(&d, b"f").unwrap();
        assert_eq!((g.fileid, f2.fileid), (f.fileid, f.fileid));
        assert_eq!(
            m.handle(&g),
            fh,
            "the handle of a linked file stays the same"
        );
        assert_eq!(m.handle(&f2), fh);
        let via_old = m.resolve(fh.as_bytes()).unwrap();
        assert_eq!((nlink(m, &via_old), nlink(m, &g)), (2, 2));
        // Write through one name, read through the other.
        assert_eq!(read_all(m, &g), b"hello");
        m.write(&g, 5, b" world", Stable::FileSync).unwrap();
        assert_eq!(read_all(m, &f2), b"hello world");
        // A third name, in the same directory.
        m.link(&g, &d, b"h").unwrap();
        assert_eq!(nlink(m, &via_old), 3);
        // READDIR(PLUS) shows every name with the file's id and attributes, and no
        // hidden inode object.
        assert_eq!(names(m, &d), [".", "..", "f", "h"]);
        assert_eq!(names(m, &root), [".", "..", "d", "e", "sub"]);
        let (page, plus) = m.readdir_plus(&d, 0, [0; 8], 100).unwrap();
        for (e, p) in page.entries.iter().zip(&plus).skip(2) {
            let (node, a) = p.as_ref().unwrap();
            assert_eq!(
                (e.fileid, node.fileid, a.fileid),
                (f.fileid, f.fileid, f.fileid)
            );
            assert_eq!((a.nlink, a.size), (3, 11));
        }
        let cookies: Vec<u64> = page.entries.iter().map(|e| e.cookie).collect();
        assert_ne!(cookies[2], cookies[3], "two names, two cookies");
        // Remove each name in turn.
        m.remove(&d, b"f").unwrap();
        assert_eq!(m.lookup(&d, b"f"), Err(Status::NoEnt));
        assert_eq!(nlink(m, &g), 2);
        m.remove(&e, b"g").unwrap();
        assert_eq!(nlink(m, &g), 1);
        assert_eq!(read_all(m, &m.lookup(&d, b"h").unwrap()), b"hello world");
        m.remove(&d, b"h").unwrap();
        assert_eq!(m.resolve(fh.as_bytes()), Err(Status::Stale));
        assert_eq!(names(m, &d), [".", ".."]);
    });
}

/// rename/ over a name of a linked file drops one link; renaming one name of a file
/// onto another of the same file changes nothing (POSIX rename(2)); a renamed link
/// name still names the file.
#[test]
fn rename_of_and_over_linked_names() {
    each(|m, _, _| {
        let root = m.root(0).unwrap();
        let f = mkfile(m, &root, "f");
        let fh = m.handle(&f);
        m.link(&f, &root, b"g").unwrap();
        m.rename(&root, b"f", &root, b"g").unwrap();
        assert_eq!(names(m, &root), [".", "..", "f", "g", "sub"]);
        assert_eq!(nlink(m, &m.resolve(fh.as_bytes()).unwrap()), 2);
        // Move a name away and back under another name: still the file.
        let d = m.mkdir(&root, b"d", &SetAttr::default(), OWNER).unwrap();
        m.rename(&root, b"g", &d, b"moved").unwrap();
        assert_eq!(m.handle(&m.lookup(&d, b"moved").unwrap()), fh);
        // Another file renamed over a name: the linked file loses that name.
        let other = mkfile(m, &root, "other");
        m.rename(&root, b"other", &d, b"moved").unwrap();
        assert_eq!(m.lookup(&d, b"moved").unwrap().fileid, other.fileid);
        let f = m.resolve(fh.as_bytes()).unwrap();
        assert_eq!(nlink(m, &f), 1);
        // A name renamed over a plain file replaces it.
        let plain = mkfile(m, &root, "plain");
        let ph = m.handle(&plain);
        m.rename(&root, b"f", &root, b"plain").unwrap();
        assert_eq!(m.resolve(ph.as_bytes()), Err(Status::Stale));
        assert_eq!(m.handle(&m.lookup(&root, b"plain").unwrap()), fh);
        m.remove(&root, b"plain").unwrap();
        assert_eq!(m.resolve(fh.as_bytes()), Err(Status::Stale));
    });
}

/// LINK's refusals: a directory source (ISDIR), a taken name (EXIST), names checked
/// as CREATE's, another export (XDEV), the hidden inode names.
#[test]
fn link_refusals() {
    each(|m, _, _| {
        let root = m.root(0).unwrap();
        let d = m.mkdir(&root, b"d", &SetAttr::default(), OWNER).unwrap();
        let f = mkfile(m, &root, "f");
        mkfile(m, &root, "taken");
        assert_eq!(m.link(&d, &root, b"d2"), Err(Status::IsDir));
        assert_eq!(m.link(&f, &root, b"taken"), Err(Status::Exist));
        assert_eq!(m.link(&f, &root, b"d"), Err(Status::Exist));
        assert_eq!(m.link(&f, &root, b"."), Err(Status::Exist));
        assert_eq!(m.link(&f, &root, b""), Err(Status::Inval));
        assert_eq!(m.link(&f, &root, b"a/b"), Err(Status::Inval));
        assert_eq!(m.link(&f, &root, &[b'x'; 256]), Err(Status::NameTooLong));
        assert_eq!(m.link(&f, &root, b".nfsgw-inode.1"), Err(Status::Inval));
        assert_eq!(m.link(&f, &f, b"x"), Err(Status::NotDir));
        let other = m.root(1).unwrap();
        assert_eq!(m.link(&f, &other, b"x"), Err(Status::XDev));
        assert_eq!(nlink(m, &f), 1);
        assert_eq!(names(m, &other), [".", ".."]);
    });
}

/// Names, count and handle survive a restart (the handle table's journal keeps the
/// file id's move to the inode key).
#[test]
fn links_survive_restart() {
    let d = tempfile::tempdir().unwrap();
    let b: Arc<dyn Backend> = Arc::new(FsBackend::open(&d.path().join("data")).unwrap());
    let st = d.path().join("state");
    let (fh, id);
    {
        let m = FileModel::open(b.clone(), &st, &exports()).unwrap();
        let root = m.root(0).unwrap();
        let f = mkfile(&m, &root, "f");
        m.write(&f, 0, b"data", Stable::FileSync).unwrap();
        fh = m.handle(&f);
        id = f.fileid;
        m.link(&f, &root, b"g").unwrap();
    }
    let m = FileModel::open(b, &st, &exports()).unwrap();
    let f = m.resolve(fh.as_bytes()).unwrap();
    assert_eq!((f.fileid, nlink(&m, &f)), (id, 2));
    let root = m.root(0).unwrap();
    for name in ["f", "g"] {
        let n = m.lookup(&root, name.as_bytes()).unwrap();
        assert_eq!(m.handle(&n), fh, "{name}");
        assert_eq!(read_all(&m, &n), b"data");
    }
}

/// A LINK cut short after its new name was written, before the file moved (a kill
/// -9): the file keeps its name and data; the dangling new name is not found and
/// can be removed or created over.
#[test]
fn a_dangling_link_name_loses_nothing() {
    each_local(|m, b, _| {
        let root = m.root(0).unwrap();
        let f = mkfile(m, &root, "f");
        m.write(&f, 0, b"kept", Stable::FileSync).unwrap();
        let mut meta = UserMeta::new();
        meta.insert("nfsgw-link".into(), ".nfsgw-inode.00000000000000aa".into());
        b.put("g", b"", &meta, true).unwrap();
        assert_eq!(m.lookup(&root, b"g"), Err(Status::NoEnt));
        assert_eq!(read_all(m, &m.lookup(&root, b"f").unwrap()), b"kept");
        m.remove(&root, b"g").unwrap();
        assert_eq!(names(m, &root), [".", "..", "f", "sub"]);
    });
}
