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
        let shared = m.readdir_plus(&d, 0, [0; 8], 100).unwrap();
        let (page, plus) = &*shared;
        for (e, p) in page.entries.iter().zip(plus).skip(2) {
            let (node, a, _) = p.as_ref().unwrap();
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

/// A first LINK cut short after the store moved the file to its inode key, before
/// the handle table heard of it (a kill -9 between the two): the handle made before
/// still resolves, to the inode (the id its name carries), with the data; the new
/// name shows that same handle; the old name is gone.
#[test]
fn a_link_cut_after_the_move_keeps_the_handle() {
    each_local(|m, b, _| {
        let root = m.root(0).unwrap();
        let f = mkfile(m, &root, "f");
        m.write(&f, 0, b"moved", Stable::FileSync).unwrap();
        let fh = m.handle(&f);
        let ikey = format!(".nfsgw-inode.{:016x}", f.fileid);
        let mut meta = UserMeta::new();
        meta.insert("nfsgw-link".into(), ikey.clone());
        b.put("g", b"", &meta, true).unwrap();
        b.rename("f", &ikey).unwrap();
        let via = m.resolve(fh.as_bytes()).unwrap();
        assert_eq!((via.fileid, via.key.as_str()), (f.fileid, ikey.as_str()));
        assert_eq!(read_all(m, &via), b"moved");
        assert_eq!(m.handle(&m.lookup(&root, b"g").unwrap()), fh);
        assert_eq!(m.lookup(&root, b"f"), Err(Status::NoEnt));
        assert_eq!(names(m, &root), [".", "..", "g", "sub"]);
    });
}

/// An inode object planted in the store under a live file's id (the id shows in
/// GETATTR) does not take that id: the live file keeps its handle and its data, the
/// planted object gets an id of its own.
#[test]
fn a_planted_inode_does_not_take_a_live_files_id() {
    each_local(|m, b, _| {
        let root = m.root(0).unwrap();
        let f = mkfile(m, &root, "f");
        m.write(&f, 0, b"mine", Stable::FileSync).unwrap();
        let fh = m.handle(&f);
        let ikey = format!(".nfsgw-inode.{:016x}", f.fileid);
        let mut meta = UserMeta::new();
        meta.insert("nfsgw-link".into(), ikey.clone());
        b.put("planted", b"", &meta, true).unwrap();
        b.put(&ikey, b"theirs", &UserMeta::new(), true).unwrap();
        let p = m.lookup(&root, b"planted").unwrap();
        assert_ne!(
            p.fileid, f.fileid,
            "the planted inode took the live file's id"
        );
        let via = m.resolve(fh.as_bytes()).unwrap();
        assert_eq!(via.key, "f");
        assert_eq!(read_all(m, &via), b"mine");
    });
}

/// LINK through a node from before an earlier LINK of the file; LINK refuses a file
/// with no name left (removed while open, `orphans`: link(2)'s ENOENT for a link
/// count of 0) and a file at the most names (`LINK_MAX`: MLINK).
#[test]
fn link_refuses_an_unlinked_file_and_one_at_the_limit() {
    each_local(|m, b, _| {
        let root = m.root(0).unwrap();
        let f = mkfile(m, &root, "f");
        m.link(&f, &root, b"g").unwrap();
        // `f` is a node from before the LINK (as a second first LINK at once holds):
        // the next LINK counts on the inode, never moves the link object over it.
        m.write(
            &m.lookup(&root, b"g").unwrap(),
            0,
            b"kept",
            Stable::FileSync,
        )
        .unwrap();
        m.link(&f, &root, b"s").unwrap();
        let s = m.lookup(&root, b"s").unwrap();
        assert_eq!(
            (s.fileid, nlink(m, &s), read_all(m, &s)),
            (f.fileid, 3, b"kept".to_vec())
        );
        let ikey = format!(".nfsgw-inode.{:016x}", f.fileid);
        let mut user = b.head(&ikey).unwrap().user;
        user.insert("nfsgw-nlink".into(), crate::fs::LINK_MAX.to_string());
        b.set_meta(&ikey, &user).unwrap();
        assert_eq!(m.link(&f, &root, b"h"), Err(Status::MLink));
        assert_eq!(m.lookup(&root, b"h"), Err(Status::NoEnt));
        let orphan = Node {
            key: ".nfsgw-orphan.00000000000000ab".into(),
            ..f.clone()
        };
        assert_eq!(m.link(&orphan, &root, b"h"), Err(Status::NoEnt));
    });
}

/// Two gateways on one bucket (shared-store handles carry the key): a file linked on
/// one keeps the handle it had on both, and the other gateway, whose table never saw
/// the LINK, resolves that handle to the inode, shows the link name with the same
/// file id and handle, and still does once the file's first name is removed.
#[test]
fn another_gateway_resolves_a_linked_files_handle() {
    let Some(b1) = crate::backend::s3::live_tests::fresh("") else {
        return;
    };
    let b1: Arc<dyn Backend> = Arc::new(b1);
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let g1 = FileModel::open(b1.clone(), d1.path(), &exports()).unwrap();
    let bucket = b1.identity();
    let bucket = bucket.rsplit('/').nth(1).unwrap().to_string();
    let b2: Arc<dyn Backend> = Arc::new(crate::backend::s3::live_tests::live(&bucket, "").unwrap());
    let g2 = FileModel::open(b2, d2.path(), &exports()).unwrap();
    let r1 = g1.root(0).unwrap();
    let d = g1.mkdir(&r1, b"d", &SetAttr::default(), OWNER).unwrap();
    let f = mkfile(&g1, &d, "f");
    g1.write(&f, 0, b"shared", Stable::FileSync).unwrap();
    let fh = g1.handle(&f);
    let r2 = g2.root(0).unwrap();
    let d2n = g2.lookup(&r2, b"d").unwrap();
    assert_eq!(g2.handle(&g2.lookup(&d2n, b"f").unwrap()), fh);
    let g = g1.link(&f, &r1, b"g").unwrap();
    assert_eq!(g1.handle(&g), fh, "the linking gateway");
    // The other gateway's store metadata cache (the s3 backend's ATTR_TTL, 1 s, as an
    // NFS client's attribute cache) still knows "d/f" as the file until then.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let via = g2.resolve(fh.as_bytes()).unwrap();
    assert_eq!(
        (via.fileid, read_all(&g2, &via)),
        (f.fileid, b"shared".to_vec())
    );
    let g_on_2 = g2.lookup(&r2, b"g").unwrap();
    assert_eq!((g_on_2.fileid, g2.handle(&g_on_2)), (f.fileid, fh));
    assert_eq!(nlink(&g2, &g_on_2), 2);
    g1.remove(&d, b"f").unwrap();
    let d3 = tempfile::tempdir().unwrap();
    let b3: Arc<dyn Backend> = Arc::new(crate::backend::s3::live_tests::live(&bucket, "").unwrap());
    let g3 = FileModel::open(b3, d3.path(), &exports()).unwrap();
    let via = g3.resolve(fh.as_bytes()).unwrap();
    assert_eq!((via.fileid, nlink(&g3, &via)), (f.fileid, 1));
    assert_eq!(read_all(&g3, &via), b"shared");
}
