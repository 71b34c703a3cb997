//! The file model both front ends share (docs/architecture.md §7): special files, directory
//! link counts, the change attribute, 64-bit times, EXCLUSIVE4_1 and NFSv4-sized
//! handles.

use super::*;
use crate::backend::ObjectMeta;
use std::sync::atomic::{AtomicUsize, Ordering};

fn tick() {
    // File timestamps come from the kernel's coarse clock (a tick, up to 10 ms).
    std::thread::sleep(std::time::Duration::from_millis(12));
}

fn mode_set(mode: u32) -> SetAttr {
    SetAttr {
        mode: Some(mode),
        ..Default::default()
    }
}

/// MKNOD of every special kind on every backend: type, mode, owner and rdev show in
/// GETATTR and survive a restart of the model; data operations are INVAL; rename,
/// readdir, handles and remove work as for files.
#[test]
fn special_files_keep_type_and_rdev_across_restart() {
    each(|m, b, st| {
        let root = m.root(0).unwrap();
        let d = m.mkdir(&root, b"dev", &SetAttr::default(), OWNER).unwrap();
        let cases = [
            ("fifo", FileKind::Fifo, (0, 0), 0o600),
            ("sock", FileKind::Sock, (0, 0), 0o755),
            ("null", FileKind::Chr, (1, 3), 0o666),
            ("sda1", FileKind::Blk, (8, 1), 0o640),
            ("huge", FileKind::Chr, (u32::MAX, u32::MAX), 0o600),
            ("mix", FileKind::Blk, (0xfff0_0123, 0x00ab_cdef), 0o600),
        ];
        let mut handles = Vec::new();
        for (name, kind, rdev, mode) in cases {
            let n = m
                .mknod(&d, name.as_bytes(), kind, rdev, &mode_set(mode), OWNER)
                .unwrap();
            let a = m.getattr(&n).unwrap();
            assert_eq!((a.kind, a.rdev, a.mode), (kind, rdev, mode), "{name}");
            assert_eq!((a.size, a.nlink, a.uid, a.gid), (0, 1, 1000, 100));
            handles.push((name, kind, rdev, mode, m.handle(&n)));
        }
        // Fifos and sockets have no device number, whatever the caller sent.
        let f = m
            .mknod(
                &d,
                b"f2",
                FileKind::Fifo,
                (5, 6),
                &SetAttr::default(),
                OWNER,
            )
            .unwrap();
        let a = m.getattr(&f).unwrap();
        assert_eq!((a.rdev, a.mode), ((0, 0), 0o644));
        for kind in [FileKind::Reg, FileKind::Dir, FileKind::Lnk] {
            assert_eq!(
                m.mknod(&d, b"x", kind, (0, 0), &SetAttr::default(), OWNER),
                Err(Status::BadType)
            );
        }
        assert_eq!(
            m.mknod(
                &d,
                b"fifo",
                FileKind::Fifo,
                (0, 0),
                &SetAttr::default(),
                OWNER
            ),
            Err(Status::Exist)
        );
        let mut buf = [0u8; 8];
        assert_eq!(m.read(&f, 0, &mut buf), Err(Status::Inval));
        assert_eq!(m.write(&f, 0, b"x", Stable::FileSync), Err(Status::Inval));
        let size = SetAttr {
            size: Some(0),
            ..Default::default()
        };
        assert_eq!(m.setattr(&f, &size), Err(Status::Inval));
        assert_eq!(m.readlink(&f), Err(Status::Inval));
        // A guarded or unchecked CREATE over a special file is EXIST, not a truncate.
        for how in [
            CreateMode::Guarded(SetAttr::default()),
            CreateMode::Unchecked(size),
        ] {
            assert_eq!(m.create(&d, b"f2", &how, OWNER), Err(Status::Exist));
        }
        // chmod keeps the type.
        let null = m.lookup(&d, b"null").unwrap();
        m.setattr(&null, &mode_set(0o620)).unwrap();
        let a = m.getattr(&null).unwrap();
        assert_eq!((a.kind, a.mode, a.rdev), (FileKind::Chr, 0o620, (1, 3)));
        // Rename within and across directories keeps type, rdev and the handle.
        m.rename(&d, b"sda1", &root, b"disk").unwrap();
        let disk = m.lookup(&root, b"disk").unwrap();
        let a = m.getattr(&disk).unwrap();
        assert_eq!((a.kind, a.rdev), (FileKind::Blk, (8, 1)));
        let moved = m.resolve(handles[3].4.as_bytes()).unwrap();
        assert_eq!(moved.key, "disk");
        let listed = names(m, &d);
        for n in ["fifo", "sock", "null", "huge", "mix", "f2"] {
            assert!(listed.iter().any(|l| l == n), "{n} in {listed:?}");
        }
        m.remove(&d, b"f2").unwrap();
        assert_eq!(m.lookup(&d, b"f2"), Err(Status::NoEnt));
        // A restart of the model (and a fresh backend view for the local store).
        let again = FileModel::open(b.clone(), st, &exports()).unwrap();
        for (name, kind, rdev, mode, fh) in &handles {
            let n = again.resolve(fh.as_bytes()).unwrap();
            let a = again.getattr(&n).unwrap();
            let mode = if *name == "null" { 0o620 } else { *mode };
            assert_eq!((a.kind, a.rdev, a.mode), (*kind, *rdev, mode), "{name}");
        }
    });
}

/// Raw metadata as s3fs writes it (decimal mode with type bits, decimal dev_t) is read
/// back as the special file it is.
#[test]
fn special_files_written_by_s3fs_are_recognised() {
    each_local(|m, b, _| {
        let mut meta = UserMeta::new();
        // S_IFCHR | 0644 = 8612; makedev(4, 64) = 1088.
        meta.insert("mode".into(), "8612".into());
        meta.insert("rdev".into(), "1088".into());
        b.put("tty0", b"", &meta, false).unwrap();
        let root = m.root(0).unwrap();
        let n = m.lookup(&root, b"tty0").unwrap();
        let a = m.getattr(&n).unwrap();
        assert_eq!((a.kind, a.mode, a.rdev), (FileKind::Chr, 0o644, (4, 64)));
        // Malformed rdev: (0, 0), not an error.
        meta.insert("rdev".into(), "junk".into());
        b.put("tty1", b"", &meta, false).unwrap();
        let n = m.lookup(&root, b"tty1").unwrap();
        assert_eq!(m.getattr(&n).unwrap().rdev, (0, 0));
    });
}

fn nlink(m: &FileModel, n: &Node) -> u32 {
    m.getattr(n).unwrap().nlink
}

/// A directory's link count is 2 + its subdirectories through mkdir, rmdir, rename
/// (pjdfstest rename/24: 3 after one subdirectory is moved in), and a restart.
#[test]
fn directory_link_counts_follow_subdirectories() {
    each(|m, b, st| {
        let root = m.root(0).unwrap();
        let d = m.mkdir(&root, b"d", &SetAttr::default(), OWNER).unwrap();
        let e = m.mkdir(&root, b"e", &SetAttr::default(), OWNER).unwrap();
        assert_eq!((nlink(m, &d), nlink(m, &e)), (2, 2));
        let a = m.mkdir(&d, b"a", &SetAttr::default(), OWNER).unwrap();
        m.mkdir(&d, b"b", &SetAttr::default(), OWNER).unwrap();
        mkfile(m, &d, "file");
        m.mknod(
            &d,
            b"fifo",
            FileKind::Fifo,
            (0, 0),
            &SetAttr::default(),
            OWNER,
        )
        .unwrap();
        assert_eq!(nlink(m, &d), 4);
        m.rmdir(&d, b"b").unwrap();
        assert_eq!(nlink(m, &d), 3);
        // rename/24: a subdirectory moved in.
        m.rename(&d, b"a", &e, b"a").unwrap();
        assert_eq!((nlink(m, &d), nlink(m, &e)), (2, 3));
        let a = m.lookup(&e, b"a").unwrap_or(a);
        assert_eq!(nlink(m, &a), 2);
        // Within one directory: no change.
        m.rename(&e, b"a", &e, b"a2").unwrap();
        assert_eq!(nlink(m, &e), 3);
        // Over an existing empty directory: the target loses one, gains one.
        m.mkdir(&e, b"x", &SetAttr::default(), OWNER).unwrap();
        m.mkdir(&d, b"y", &SetAttr::default(), OWNER).unwrap();
        assert_eq!((nlink(m, &d), nlink(m, &e)), (3, 4));
        m.rename(&d, b"y", &e, b"x").unwrap();
        assert_eq!((nlink(m, &d), nlink(m, &e)), (2, 4));
        m.rename(&e, b"a2", &e, b"x").unwrap();
        assert_eq!(nlink(m, &e), 3);
        // Files moving do not count.
        m.rename(&d, b"file", &e, b"file").unwrap();
        assert_eq!((nlink(m, &d), nlink(m, &e)), (2, 3));
        // A restarted model counts from the store.
        let again = FileModel::open(b.clone(), st, &exports()).unwrap();
        let r2 = again.root(0).unwrap();
        let e2 = again.lookup(&r2, b"e").unwrap();
        let d2 = again.lookup(&r2, b"d").unwrap();
        assert_eq!((nlink(&again, &d2), nlink(&again, &e2)), (2, 3));
    });
}

/// A backend that counts its listings (everything else passes through). Keys in
/// `ghosts` stay in listings after they are deleted, as a replica that has not yet
/// applied a DELETE lists them (Garage filters replicas' ranges before merging).
struct CountingBackend {
    inner: Arc<dyn Backend>,
    lists: AtomicUsize,
    heads: AtomicUsize,
    ghosts: std::sync::Mutex<Vec<String>>,
}

impl CountingBackend {
    fn over(inner: Arc<dyn Backend>) -> CountingBackend {
        CountingBackend {
            inner,
            lists: AtomicUsize::new(0),
            heads: AtomicUsize::new(0),
            ghosts: Default::default(),
        }
    }
}

impl Backend for CountingBackend {
    fn name(&self) -> &'static str {
        "counting"
    }
    fn head(&self, key: &str) -> crate::backend::BResult<ObjectMeta> {
        self.heads.fetch_add(1, Ordering::Relaxed);
        self.inner.head(key)
    }
    fn surely_absent(&self, name: &str) -> crate::backend::BResult<bool> {
        self.inner.surely_absent(name)
    }
    fn get_range(&self, key: &str, offset: u64, dst: &mut [u8]) -> crate::backend::BResult<usize> {
        self.inner.get_range(key, offset, dst)
    }
    fn put(
        &self,
        key: &str,
        data: &[u8],
        meta: &UserMeta,
        if_absent: bool,
    ) -> crate::backend::BResult<ObjectMeta> {
        self.inner.put(key, data, meta, if_absent)
    }
    fn multipart(
        &self,
        key: &str,
        meta: &UserMeta,
    ) -> crate::backend::BResult<Box<dyn crate::backend::Upload>> {
        self.inner.multipart(key, meta)
    }
    fn list(
        &self,
        prefix: &str,
        delimiter: Option<char>,
        start_after: Option<&str>,
        max: usize,
    ) -> crate::backend::BResult<ListPage> {
        self.lists.fetch_add(1, Ordering::Relaxed);
        let mut page = self.inner.list(prefix, delimiter, start_after, max)?;
        for g in self.ghosts.lock().unwrap().iter() {
            let Some(rest) = g.strip_prefix(prefix) else {
                continue;
            };
            if start_after.is_some_and(|a| g.as_str() <= a) {
                continue;
            }
            match delimiter.and_then(|d| rest.find(d)) {
                Some(i) => {
                    let p = format!("{prefix}{}", &rest[..=i]);
                    if !page.prefixes.contains(&p) {
                        page.prefixes.push(p);
                    }
                }
                None if !page.objects.iter().any(|o| &o.key == g) => {
                    page.objects.push(ObjectMeta {
                        key: g.clone(),
                        size: 0,
                        mtime_ns: 0,
                        etag: String::new(),
                        user: Default::default(),
                    });
                }
                None => {}
            }
        }
        Ok(page)
    }
    fn copy(&self, from: &str, to: &str) -> crate::backend::BResult<()> {
        self.inner.copy(from, to)
    }
    fn delete(&self, key: &str) -> crate::backend::BResult<()> {
        self.inner.delete(key)
    }
    fn set_meta(&self, key: &str, meta: &UserMeta) -> crate::backend::BResult<()> {
        self.inner.set_meta(key, meta)
    }
    fn capacity(&self) -> crate::backend::BResult<(u64, u64, u64, u64)> {
        self.inner.capacity()
    }
    fn random_write(&self) -> Option<&dyn crate::backend::RandomWrite> {
        self.inner.random_write()
    }
}

/// GETATTR of a directory counts its subdirectories once (one listing page on a
/// listing store such as s3), not at every call; the gateway's own changes keep the
/// cached count right without listing again.
#[test]
fn directory_getattr_does_not_list_every_time() {
    let mem: Arc<dyn Backend> = Arc::new(crate::backend::memory::MemoryBackend::new());
    let counting = Arc::new(CountingBackend::over(mem.clone()));
    let b: Arc<dyn Backend> = counting.clone();
    let dir = tempfile::tempdir().unwrap();
    {
        let m = FileModel::open(b.clone(), dir.path(), &exports()).unwrap();
        let root = m.root(0).unwrap();
        let d = m.mkdir(&root, b"d", &SetAttr::default(), OWNER).unwrap();
        for i in 0..20 {
            m.mkdir(&d, format!("s{i}").as_bytes(), &SetAttr::default(), OWNER)
                .unwrap();
        }
        let before = counting.lists.load(Ordering::Relaxed);
        for _ in 0..100 {
            assert_eq!(nlink(&m, &d), 22);
        }
        m.rmdir(&d, b"s0").unwrap();
        assert_eq!(nlink(&m, &d), 21);
        // RMDIR checks emptiness with a listing; GETATTR adds none.
        let rmdir_lists = 1;
        assert_eq!(counting.lists.load(Ordering::Relaxed) - before, rmdir_lists);
    }
    // A fresh model counts once, then answers from its cache.
    let m = FileModel::open(b.clone(), dir.path(), &exports()).unwrap();
    let d = m.lookup(&m.root(0).unwrap(), b"d").unwrap();
    let before = counting.lists.load(Ordering::Relaxed);
    for _ in 0..100 {
        assert_eq!(nlink(&m, &d), 21);
    }
    assert_eq!(counting.lists.load(Ordering::Relaxed) - before, 1);
}

/// Runs `op` after a clock tick and checks that it moved `node`'s change attribute
/// past `last` (then the new value is `last`).
fn step(m: &FileModel, last: &mut u64, what: &str, node: &Node, op: impl FnOnce()) {
    tick();
    op();
    let c = m.getattr(node).unwrap().change;
    assert!(c > *last, "{what}: {last} -> {c}");
    *last = c;
}

/// The change attribute moves forward with data writes, size changes, SETATTR, and for
/// a directory with entries renamed in, created, and removed.
#[test]
fn change_attribute_moves_with_every_change() {
    each_local(|m, _, _| {
        let root = m.root(0).unwrap();
        let d = m.mkdir(&root, b"cd", &SetAttr::default(), OWNER).unwrap();
        let f = mkfile(m, &root, "cf");
        let mut last = m.getattr(&f).unwrap().change;
        assert!(last > 0);
        let last = &mut last;
        step(m, last, "write", &f, || {
            m.write(&f, 0, b"abc", Stable::FileSync).unwrap();
        });
        step(m, last, "unstable write", &f, || {
            m.write(&f, 3, b"def", Stable::Unstable).unwrap();
        });
        step(m, last, "truncate", &f, || {
            m.setattr(
                &f,
                &SetAttr {
                    size: Some(1),
                    ..Default::default()
                },
            )
            .unwrap()
        });
        step(m, last, "chmod", &f, || {
            m.setattr(&f, &mode_set(0o600)).unwrap()
        });
        step(m, last, "set mtime to the past", &f, || {
            m.setattr(
                &f,
                &SetAttr {
                    mtime: SetTime::Client(NfsTime { sec: 5, nsec: 0 }),
                    ..Default::default()
                },
            )
            .unwrap()
        });
        step(m, last, "write after utimes", &f, || {
            m.write(&f, 0, b"z", Stable::FileSync).unwrap();
        });
        *last = m.getattr(&d).unwrap().change;
        step(m, last, "rename in", &d, || {
            m.rename(&root, b"cf", &d, b"cf").unwrap()
        });
        step(m, last, "create in", &d, || {
            mkfile(m, &d, "g");
        });
        step(m, last, "remove in", &d, || m.remove(&d, b"g").unwrap());
        step(m, last, "mknod in", &d, || {
            m.mknod(&d, b"p", FileKind::Fifo, (0, 0), &SetAttr::default(), OWNER)
                .unwrap();
        });
        step(m, last, "chmod dir", &d, || {
            m.setattr(&d, &mode_set(0o700)).unwrap()
        });
        // Changes within one clock tick still move a directory's attribute.
        let before = m.getattr(&d).unwrap().change;
        mkfile(m, &d, "h1");
        let mid = m.getattr(&d).unwrap().change;
        m.remove(&d, b"h1").unwrap();
        let after = m.getattr(&d).unwrap().change;
        assert!(before < mid && mid < after, "{before} {mid} {after}");
    });
}

/// Raw ctime moving backwards (metadata from another tool, an s3 same-second rewrite,
/// a clock step) still moves the change attribute forward.
#[test]
fn change_attribute_never_moves_back() {
    each(|m, b, _| {
        let root = m.root(0).unwrap();
        let f = mkfile(m, &root, "back");
        let c1 = m.getattr(&f).unwrap().change;
        let mut user = b.head("back").unwrap().user;
        user.insert("ctime".into(), "1000.5".into());
        b.set_meta("back", &user).unwrap();
        let c2 = m.getattr(&f).unwrap().change;
        assert!(c2 > c1, "{c1} -> {c2}");
        assert_eq!(m.getattr(&f).unwrap().change, c2, "no change, same value");
        user.insert("ctime".into(), "999.5".into());
        b.set_meta("back", &user).unwrap();
        let c3 = m.getattr(&f).unwrap().change;
        assert!(c3 > c2, "{c2} -> {c3}");
    });
}

/// Directory change attribute on every backend (s3 too: the gateway's own entry
/// changes are nanosecond-timed in memory).
#[test]
fn directory_change_attribute_on_every_backend() {
    each(|m, _, _| {
        let root = m.root(0).unwrap();
        let d = m.mkdir(&root, b"dd", &SetAttr::default(), OWNER).unwrap();
        let mut last = m.getattr(&d).unwrap().change;
        for i in 0..3 {
            mkfile(m, &d, &format!("f{i}"));
            let c = m.getattr(&d).unwrap().change;
            assert!(c > last, "create {i}: {last} -> {c}");
            last = c;
            m.rename(&d, format!("f{i}").as_bytes(), &d, b"g").unwrap();
            let c = m.getattr(&d).unwrap().change;
            assert!(c > last, "rename {i}: {last} -> {c}");
            last = c;
        }
    });
}

/// EXCLUSIVE4_1: attributes applied at creation; the same verifier again returns the
/// same file (attributes not re-applied), another verifier is EXIST.
#[test]
fn exclusive41_create_applies_attributes_and_retries() {
    each(|m, _, _| {
        let root = m.root(0).unwrap();
        let t = NfsTime {
            sec: 1_234_567_890,
            nsec: 5,
        };
        let set = SetAttr {
            mode: Some(0o640),
            mtime: SetTime::Client(t),
            ..Default::default()
        };
        let how = CreateMode::Exclusive41(*b"verifier", set);
        let f = m.create(&root, b"x41", &how, OWNER).unwrap();
        let a = m.getattr(&f).unwrap();
        assert_eq!(
            (a.kind, a.mode, a.mtime, a.uid),
            (FileKind::Reg, 0o640, t, 1000)
        );
        m.setattr(&f, &mode_set(0o600)).unwrap();
        // The retransmission succeeds with the same file, which keeps its later mode.
        let again = m.create(&root, b"x41", &how, OWNER).unwrap();
        assert_eq!(again, f);
        assert_eq!(m.getattr(&f).unwrap().mode, 0o600);
        let other = CreateMode::Exclusive41(*b"VERIFIER", set);
        assert_eq!(m.create(&root, b"x41", &other, OWNER), Err(Status::Exist));
        // A v3 exclusive create with the same verifier is the same create too.
        assert_eq!(
            m.create(&root, b"x41", &CreateMode::Exclusive(*b"verifier"), OWNER),
            Ok(f.clone())
        );
        assert_eq!(
            m.create(
                &root,
                b"x41",
                &CreateMode::Guarded(SetAttr::default()),
                OWNER
            ),
            Err(Status::Exist)
        );
        // Over a directory: EXIST; hostile attributes: refused before anything.
        m.mkdir(&root, b"xd", &SetAttr::default(), OWNER).unwrap();
        assert_eq!(m.create(&root, b"xd", &how, OWNER), Err(Status::Exist));
        let bad = CreateMode::Exclusive41(
            *b"verifier",
            SetAttr {
                size: Some(u64::MAX),
                ..Default::default()
            },
        );
        assert_eq!(m.create(&root, b"xbad", &bad, OWNER), Err(Status::FBig));
        assert_eq!(m.lookup(&root, b"xbad"), Err(Status::NoEnt));
    });
}

/// Times before 1970 and after 2106 (NFSv4 int64 seconds) are stored and read back,
/// across a restart of the model, on every backend.
#[test]
fn times_are_64_bit_and_signed() {
    each(|m, b, st| {
        let root = m.root(0).unwrap();
        let f = mkfile(m, &root, "t64");
        let cases = [
            NfsTime { sec: -1, nsec: 0 },
            NfsTime {
                sec: -1,
                nsec: 500_000_000,
            },
            NfsTime {
                sec: -2_000_000_000,
                nsec: 1,
            },
            NfsTime {
                sec: 5_000_000_000,
                nsec: 999_999_999,
            },
            NfsTime {
                sec: i64::MAX,
                nsec: 0,
            },
            NfsTime {
                sec: i64::MIN + 1,
                nsec: 7,
            },
        ];
        for t in cases {
            let set = SetAttr {
                atime: SetTime::Client(t),
                mtime: SetTime::Client(t),
                ..Default::default()
            };
            m.setattr(&f, &set).unwrap();
            let a = m.getattr(&f).unwrap();
            assert_eq!((a.atime, a.mtime), (t, t), "{t:?}");
            let again = FileModel::open(b.clone(), st, &exports()).unwrap();
            let n = again.lookup(&again.root(0).unwrap(), b"t64").unwrap();
            let a = again.getattr(&n).unwrap();
            assert_eq!((a.atime, a.mtime), (t, t), "{t:?} after restart");
        }
        // i64::MIN seconds cannot be written back as a decimal: INVAL, nothing changed.
        let set = SetAttr {
            mtime: SetTime::Client(NfsTime {
                sec: i64::MIN,
                nsec: 0,
            }),
            ..Default::default()
        };
        assert_eq!(m.setattr(&f, &set), Err(Status::Inval));
        // NFSv3 shows what it can: clamped to nfstime3.
        let a = m.getattr(&f).unwrap();
        assert_eq!(a.mtime.sec_u32(), 0);
    });
}

/// NFSv4 handles may be up to 128 bytes: anything not ours, of any length, is
/// BADHANDLE, never a panic.
#[test]
fn garbage_handles_up_to_nfs4_size_are_bad() {
    each_local(|m, _, _| {
        let root = m.root(0).unwrap();
        let good = m.handle(&root);
        for len in [
            0, 1, 15, 31, 32, 33, 63, 64, 65, 100, 127, FH4_MAX, 129, 1000,
        ] {
            for first in [0u8, 1, 2, 3, 0xff] {
                let mut fh: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
                if let Some(b) = fh.first_mut() {
                    *b = first;
                }
                assert_eq!(m.resolve(&fh), Err(Status::BadHandle), "len {len}");
            }
            // A good handle padded to this length is not ours either.
            if len > good.as_bytes().len() {
                let mut fh = good.as_bytes().to_vec();
                fh.resize(len, 0);
                assert_eq!(m.resolve(&fh), Err(Status::BadHandle), "padded to {len}");
            }
        }
        assert_eq!(m.resolve(good.as_bytes()).unwrap(), root);
    });
}

/// A COMMIT that arrives while another COMMIT's sync of the same file is still in
/// flight must sync itself: answering at once would promise durability the first
/// sync has not delivered yet (found in review: the first COMMIT took the key out of
/// the dirty set before its sync ended).
#[test]
fn a_commit_during_another_commits_sync_syncs_too() {
    each_local(|m, _, _| {
        let root = m.root(0).unwrap();
        let f = mkfile(m, &root, "sy");
        let k = f.key.as_str();
        m.write(&f, 0, b"abc", Stable::Unstable).unwrap();
        assert!(m.begin_sync(k), "staged data is synced");
        assert!(m.begin_sync(k), "a sync in flight is not durability yet");
        m.end_sync(k, true);
        assert!(m.begin_sync(k), "one sync still in flight");
        m.end_sync(k, true);
        m.end_sync(k, true);
        assert!(!m.begin_sync(k), "nothing staged, nothing in flight");

        m.write(&f, 3, b"def", Stable::Unstable).unwrap();
        assert!(m.begin_sync(k));
        m.end_sync(k, false);
        assert!(m.begin_sync(k), "a failed sync leaves the data staged");
        m.end_sync(k, true);
        assert!(!m.begin_sync(k));

        // The model's own COMMIT and a stable WRITE count as syncs in flight too.
        m.write(&f, 6, b"ghi", Stable::Unstable).unwrap();
        assert!(m.begin_sync(k));
        m.commit(&f).unwrap();
        m.write(&f, 9, b"jkl", Stable::FileSync).unwrap();
        assert!(m.begin_sync(k), "the first sync is still in flight");
        m.end_sync(k, true);
        m.end_sync(k, true);
        assert!(!m.begin_sync(k));
    });
}

/// A failed sync moves the write verifier on (what it lost may be any staged WRITE
/// of the file, and a later sync can succeed without reporting it): clients then
/// resend every WRITE not committed under the new verifier. Successful syncs and
/// COMMITs keep it, and so does a sync that never ran (`end_sync(false)` alone: a
/// reactor that could not submit its fdatasync).
#[test]
fn a_failed_sync_changes_the_write_verifier() {
    each_local(|m, _, _| {
        let root = m.root(0).unwrap();
        let f = mkfile(m, &root, "wv");
        let k = f.key.as_str();
        let v0 = m.write_verifier();
        m.write(&f, 0, b"abc", Stable::Unstable).unwrap();
        m.commit(&f).unwrap();
        m.write(&f, 0, b"abc", Stable::FileSync).unwrap();
        assert_eq!(m.write_verifier(), v0, "successful syncs keep it");
        m.write(&f, 3, b"def", Stable::Unstable).unwrap();
        assert!(m.begin_sync(k));
        m.end_sync(k, false);
        assert_eq!(m.write_verifier(), v0, "a sync that never ran keeps it");
        m.reset_write_verifier();
        let v1 = m.write_verifier();
        assert_ne!(v1, v0, "a failed sync changes it");
        m.reset_write_verifier();
        let v2 = m.write_verifier();
        assert!(v2 != v1 && v2 != v0, "every failure gives a new one");
        m.commit(&f).unwrap();
        assert_eq!(m.write_verifier(), v2);
    });
}

/// RMDIR of a directory whose only listed children are ghosts (deleted objects a
/// lagging replica still lists) succeeds; a real child still makes it NOTEMPTY.
/// Found in CI on a three-node Garage cluster: REMOVE then RMDIR answered NOTEMPTY.
#[test]
fn rmdir_is_not_fooled_by_listed_ghosts_of_deleted_children() {
    let mem: Arc<dyn Backend> = Arc::new(crate::backend::memory::MemoryBackend::new());
    let counting = Arc::new(CountingBackend::over(mem));
    let b: Arc<dyn Backend> = counting.clone();
    let dir = tempfile::tempdir().unwrap();
    let m = FileModel::open(b, dir.path(), &exports()).unwrap();
    let root = m.root(0).unwrap();
    let d = m.mkdir(&root, b"d", &SetAttr::default(), OWNER).unwrap();
    m.create(&d, b"f", &CreateMode::Unchecked(SetAttr::default()), OWNER)
        .unwrap();
    let sub = m.mkdir(&d, b"sub", &SetAttr::default(), OWNER).unwrap();
    m.create(
        &sub,
        b"x",
        &CreateMode::Unchecked(SetAttr::default()),
        OWNER,
    )
    .unwrap();
    m.remove(&sub, b"x").unwrap();
    m.rmdir(&d, b"sub").unwrap();
    m.remove(&d, b"f").unwrap();
    counting
        .ghosts
        .lock()
        .unwrap()
        .extend(["d/f".into(), "d/sub/".into(), "d/sub/x".into()]);
    // A real child among the ghosts: still NOTEMPTY.
    m.create(
        &d,
        b"real",
        &CreateMode::Unchecked(SetAttr::default()),
        OWNER,
    )
    .unwrap();
    assert_eq!(m.rmdir(&root, b"d").unwrap_err(), Status::NotEmpty);
    m.remove(&d, b"real").unwrap();
    m.rmdir(&root, b"d").unwrap();
    // Gone at once: ghosts under a removed directory do not make it an implicit one.
    counting.ghosts.lock().unwrap().push("d/sub/y".into());
    assert_eq!(m.lookup(&root, b"d").unwrap_err(), Status::NoEnt);
    assert_eq!(m.rmdir(&root, b"d").unwrap_err(), Status::NoEnt);
}

/// Names removed through this gateway that a lagging replica still lists are not
/// answered by READDIR (read-your-deletes, `gone`); a removed name created again
/// behind the gateway's back is listed (its HEAD finds it).
#[test]
fn readdir_does_not_list_ghosts_of_names_removed_here() {
    let mem: Arc<dyn Backend> = Arc::new(crate::backend::memory::MemoryBackend::new());
    let counting = Arc::new(CountingBackend::over(mem.clone()));
    let b: Arc<dyn Backend> = counting.clone();
    let dir = tempfile::tempdir().unwrap();
    let m = FileModel::open(b, dir.path(), &exports()).unwrap();
    let root = m.root(0).unwrap();
    let d = m.mkdir(&root, b"d", &SetAttr::default(), OWNER).unwrap();
    for n in [&b"keep"[..], b"f", b"g", b"moved"] {
        m.create(&d, n, &CreateMode::Unchecked(SetAttr::default()), OWNER)
            .unwrap();
    }
    let sub = m.mkdir(&d, b"sub", &SetAttr::default(), OWNER).unwrap();
    m.create(
        &sub,
        b"x",
        &CreateMode::Unchecked(SetAttr::default()),
        OWNER,
    )
    .unwrap();
    m.remove(&sub, b"x").unwrap();
    m.rmdir(&d, b"sub").unwrap();
    m.remove(&d, b"f").unwrap();
    m.remove(&d, b"g").unwrap();
    m.rename(&d, b"moved", &root, b"moved").unwrap();
    counting.ghosts.lock().unwrap().extend([
        "d/f".into(),
        "d/g".into(),
        "d/moved".into(),
        "d/sub/".into(),
        "d/sub/x".into(),
    ]);
    // `g` is created again behind the gateway (another writer): it is real.
    mem.put("d/g", b"new", &UserMeta::default(), false).unwrap();
    let names = |m: &FileModel| {
        let p = m.readdir(&d, 0, [0; 8], 100).unwrap();
        assert!(p.eof);
        let mut n: Vec<String> = p
            .entries
            .iter()
            .map(|e| String::from_utf8(e.name.clone()).unwrap())
            .filter(|n| n != "." && n != "..")
            .collect();
        n.sort();
        n
    };
    assert_eq!(names(&m), ["g", "keep"]);
}

/// A CREATE of a new name, and the LOOKUP an NFSv3 CREATE makes before it, cost the
/// fs store one probe (`Backend::surely_absent`): no HEAD of the name or of its
/// directory marker and no listing for an implicit directory. Stores without the probe
/// (memory, like s3) still ask both HEADs and list; existing names and directories are
/// found as before on both.
#[test]
fn a_new_name_costs_no_head_and_no_listing_on_the_fs_store() {
    let root_dir = tempfile::tempdir().unwrap();
    let fs: Arc<dyn Backend> =
        Arc::new(crate::backend::fs::FsBackend::open(&root_dir.path().join("data")).unwrap());
    let mem: Arc<dyn Backend> = Arc::new(crate::backend::memory::MemoryBackend::new());
    for (inner, heads, lists) in [(fs, 0, 0), (mem, 4, 2)] {
        let counting = Arc::new(CountingBackend::over(inner));
        let b: Arc<dyn Backend> = counting.clone();
        let state = tempfile::tempdir().unwrap();
        let m = FileModel::open(b, state.path(), &exports()).unwrap();
        let root = m.root(0).unwrap();
        let d = m.mkdir(&root, b"d", &SetAttr::default(), OWNER).unwrap();
        let count = || {
            (
                counting.heads.load(Ordering::Relaxed),
                counting.lists.load(Ordering::Relaxed),
            )
        };
        let (h0, l0) = count();
        assert_eq!(m.lookup(&d, b"new").map(|_| ()), Err(Status::NoEnt));
        let how = CreateMode::Unchecked(SetAttr::default());
        let f = m.create(&d, b"new", &how, OWNER).unwrap();
        let (h1, l1) = count();
        assert_eq!(
            (h1 - h0, l1 - l0),
            (heads, lists),
            "{}",
            counting.inner.name()
        );
        // What exists is still found: the file, and a directory by its name.
        assert_eq!(m.lookup(&d, b"new").unwrap().fileid, f.fileid);
        assert_eq!(m.lookup(&root, b"d").unwrap().fileid, d.fileid);
        assert_eq!(
            m.create(&root, b"d", &how, OWNER).map(|_| ()),
            Err(Status::Exist)
        );
        let guarded = CreateMode::Guarded(SetAttr::default());
        assert_eq!(
            m.create(&d, b"new", &guarded, OWNER).map(|_| ()),
            Err(Status::Exist)
        );
    }
}
