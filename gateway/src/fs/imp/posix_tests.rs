//! POSIX semantics of the file model found missing by pjdfstest: parent directory
//! times, hostile attribute values, malformed stored metadata, and staged data that
//! must follow a rename (the Linux client's silly rename of an open, unlinked file).

use super::*;

const OLD: NfsTime = NfsTime {
    sec: 1_000_000_000,
    nsec: 0,
};

fn set_mtime(m: &FileModel, n: &Node, t: NfsTime) {
    m.setattr(
        n,
        &SetAttr {
            mtime: SetTime::Client(t),
            ..Default::default()
        },
    )
    .unwrap();
}

/// Runs `op` and checks that it advanced mtime and ctime of every dir in `dirs`.
fn advances(m: &FileModel, dirs: &[&Node], what: &str, op: impl FnOnce()) {
    let before: Vec<Attr> = dirs.iter().map(|d| m.getattr(d).unwrap()).collect();
    // The clock must move between the two samples.
    std::thread::sleep(std::time::Duration::from_millis(2));
    op();
    for (d, b) in dirs.iter().zip(before) {
        let a = m.getattr(d).unwrap();
        assert!(
            a.mtime > b.mtime,
            "{what}: mtime of {:?} {:?} -> {:?}",
            d.key,
            b.mtime,
            a.mtime
        );
        assert!(
            a.ctime > b.ctime,
            "{what}: ctime of {:?} {:?} -> {:?}",
            d.key,
            b.ctime,
            a.ctime
        );
    }
}

/// mkdir/00, open/00: creating, removing or renaming an entry advances the parent's
/// mtime and ctime, on every backend; SETATTR of the parent then persists the mtime.
#[test]
fn entry_changes_advance_parent_times() {
    each(|m, b, st| {
        let root = m.root(0).unwrap();
        let p = m.mkdir(&root, b"p", &SetAttr::default(), OWNER).unwrap();
        let q = m.mkdir(&root, b"q", &SetAttr::default(), OWNER).unwrap();
        set_mtime(m, &p, OLD);
        set_mtime(m, &q, OLD);
        assert_eq!(m.getattr(&p).unwrap().mtime, OLD);
        advances(m, &[&p], "create", || {
            mkfile(m, &p, "f");
        });
        advances(m, &[&p], "mkdir", || {
            m.mkdir(&p, b"sub", &SetAttr::default(), OWNER).unwrap();
        });
        advances(m, &[&p], "symlink", || {
            m.symlink(&p, b"l", b"f", &SetAttr::default(), OWNER)
                .unwrap();
        });
        advances(m, &[&p], "rename within", || {
            m.rename(&p, b"f", &p, b"g").unwrap();
        });
        advances(m, &[&p, &q], "rename across", || {
            m.rename(&p, b"g", &q, b"g").unwrap();
        });
        advances(m, &[&q], "remove", || m.remove(&q, b"g").unwrap());
        advances(m, &[&p], "rmdir", || m.rmdir(&p, b"sub").unwrap());
        // An explicit time still wins over the last change.
        set_mtime(m, &q, OLD);
        assert_eq!(m.getattr(&q).unwrap().mtime, OLD);
        // A chmod stores the changed mtime, so it survives a restart.
        let mtime = m.getattr(&p).unwrap().mtime;
        assert!(mtime > OLD);
        m.setattr(
            &p,
            &SetAttr {
                mode: Some(0o750),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(m.getattr(&p).unwrap().mtime, mtime);
        let again = FileModel::open(b.clone(), st, &exports()).unwrap();
        let p2 = again.lookup(&again.root(0).unwrap(), b"p").unwrap();
        let a = again.getattr(&p2).unwrap();
        assert_eq!((a.mtime, a.mode), (mtime, 0o750));
    });
}

/// Sizes past the largest file are FBIG; nanoseconds >= 10^9 are INVAL; nothing changes.
#[test]
fn hostile_sizes_and_times_are_refused() {
    each(|m, _, _| {
        let root = m.root(0).unwrap();
        let f = mkfile(m, &root, "h");
        m.write(&f, 0, b"abc", Stable::FileSync).unwrap();
        for size in [u64::MAX, u64::MAX - 4095, MAX_FILE_SIZE + 1] {
            let set = SetAttr {
                size: Some(size),
                ..Default::default()
            };
            assert_eq!(m.setattr(&f, &set), Err(Status::FBig), "{size}");
        }
        assert_eq!(
            m.write(&f, MAX_FILE_SIZE - 1, b"xy", Stable::FileSync),
            Err(Status::FBig)
        );
        assert_eq!(
            m.write(&f, u64::MAX, b"x", Stable::Unstable),
            Err(Status::FBig)
        );
        let bad = NfsTime {
            sec: 5,
            nsec: 1_000_000_000,
        };
        for set in [
            SetAttr {
                mtime: SetTime::Client(bad),
                ..Default::default()
            },
            SetAttr {
                atime: SetTime::Client(NfsTime {
                    sec: 1,
                    nsec: u32::MAX,
                }),
                mode: Some(0o600),
                ..Default::default()
            },
        ] {
            assert_eq!(m.setattr(&f, &set), Err(Status::Inval));
            assert_eq!(
                m.create(&root, b"n1", &CreateMode::Guarded(set), OWNER),
                Err(Status::Inval)
            );
            assert_eq!(m.mkdir(&root, b"n2", &set, OWNER), Err(Status::Inval));
            assert_eq!(
                m.symlink(&root, b"n3", b"t", &set, OWNER),
                Err(Status::Inval)
            );
        }
        let a = m.getattr(&f).unwrap();
        assert_eq!((a.size, a.mode), (3, 0o644));
        for n in ["n1", "n2", "n3"] {
            assert_eq!(m.lookup(&root, n.as_bytes()), Err(Status::NoEnt));
        }
    });
}

/// Garbage in stored attribute metadata (other tools, hand-edited xattrs) is ignored:
/// GETATTR and READDIR still work and show the defaults.
#[test]
fn malformed_metadata_is_ignored() {
    each(|m, b, _| {
        let user: UserMeta = [
            ("mode", "\u{e9}\u{e9}zz"),
            ("uid", "-1"),
            ("gid", "99999999999999"),
            ("mtime", "2023-11-14T22:13:20+a\u{e9}bc"),
            ("atime", "\u{e9}.\u{e9}"),
            ("ctime", "1.99999999999999999999"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        b.put("junk", b"12345", &user, false).unwrap();
        let root = m.root(0).unwrap();
        let f = m.lookup(&root, b"junk").unwrap();
        let a = m.getattr(&f).unwrap();
        assert_eq!((a.kind, a.mode, a.size), (FileKind::Reg, 0o644, 5));
        assert!(a.ctime.nsec < 1_000_000_000 && a.mtime.nsec < 1_000_000_000);
        assert!(names(m, &root).contains(&"junk".to_string()));
    });
}

/// unlink/14: a file written UNSTABLE and renamed before COMMIT (the Linux client's
/// silly rename to ".nfsXXXX") reads back its data under the new name, and COMMIT
/// through the old handle makes it durable there.
#[test]
fn staged_data_follows_rename() {
    each(|m, b, _| {
        let root = m.root(0).unwrap();
        let d = m.mkdir(&root, b"u", &SetAttr::default(), OWNER).unwrap();
        // Written, then renamed.
        let f = mkfile(m, &d, "f");
        let fh = m.handle(&f);
        m.write(&f, 0, b"Hello, World!", Stable::Unstable).unwrap();
        m.rename(&d, b"f", &d, b".nfs0000000000001").unwrap();
        let n = m.resolve(fh.as_bytes()).unwrap();
        assert_eq!(n.key, "u/.nfs0000000000001");
        let mut buf = [0u8; 64];
        assert_eq!(m.read(&n, 0, &mut buf).unwrap(), (13, true));
        assert_eq!(&buf[..13], b"Hello, World!");
        assert_eq!(m.getattr(&n).unwrap().size, 13);
        m.commit(&n).unwrap();
        let mut raw = [0u8; 64];
        assert_eq!(b.get_range(&n.key, 0, &mut raw).unwrap(), 13);
        assert_eq!(&raw[..13], b"Hello, World!");
        // Renamed, then written, then renamed again (into another directory).
        let g = mkfile(m, &d, "g");
        let gh = m.handle(&g);
        m.rename(&d, b"g", &d, b".nfs2").unwrap();
        let g2 = m.resolve(gh.as_bytes()).unwrap();
        m.write(&g2, 0, b"0123456789abc", Stable::Unstable).unwrap();
        m.rename(&d, b".nfs2", &root, b".nfs3").unwrap();
        let g3 = m.resolve(gh.as_bytes()).unwrap();
        assert_eq!(g3.key, ".nfs3");
        assert_eq!(m.read(&g3, 0, &mut buf).unwrap(), (13, true));
        assert_eq!(&buf[..13], b"0123456789abc");
        m.commit(&g3).unwrap();
        m.flush_all().unwrap();
        assert_eq!(b.get_range(".nfs3", 0, &mut raw).unwrap(), 13);
        assert_eq!(&raw[..13], b"0123456789abc");
        assert_eq!(m.lookup(&d, b".nfs2"), Err(Status::NoEnt));
        // A directory holding staged files moves with them.
        let h = mkfile(m, &d, "h");
        m.write(&h, 0, b"staged", Stable::Unstable).unwrap();
        m.rename(&root, b"u", &root, b"v").unwrap();
        let v = m.lookup(&root, b"v").unwrap();
        let h2 = m.lookup(&v, b"h").unwrap();
        assert_eq!(m.read(&h2, 0, &mut buf).unwrap(), (6, true));
        m.commit(&h2).unwrap();
        assert_eq!(b.get_range("v/h", 0, &mut raw).unwrap(), 6);
    });
}
