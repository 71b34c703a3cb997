//! What each namespace change reports to the `ChangeObserver` (`observe`): its
//! files, the ones it can name before the store changes and all of them after.

use super::*;

/// Records each report with whether the object at `watch` existed at that moment.
struct Rec {
    backend: Arc<dyn Backend>,
    watch: Mutex<String>,
    log: Mutex<Vec<(u64, bool)>>,
    all: std::sync::atomic::AtomicUsize,
}

impl ChangeObserver for Rec {
    fn file(&self, fileid: u64) {
        let there = self.backend.head(&lock(&self.watch)).is_ok();
        lock(&self.log).push((fileid, there));
    }
    fn all(&self) {
        self.all.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Rec {
    fn start(&self, watch: &str) {
        *lock(&self.watch) = watch.into();
        lock(&self.log).clear();
    }
    fn ids(&self) -> HashSet<u64> {
        lock(&self.log).iter().map(|(id, _)| *id).collect()
    }
    /// Reported while the watched object existed, and again once it did not.
    fn before_and_after_removal(&self, id: u64) -> bool {
        let log = lock(&self.log);
        log.contains(&(id, true)) && log.contains(&(id, false))
    }
}

#[test]
fn namespace_changes_report_exactly_their_files() {
    each_local(|m, backend, _| {
        let rec = Arc::new(Rec {
            backend: backend.clone(),
            watch: Mutex::new(String::new()),
            log: Mutex::new(Vec::new()),
            all: Default::default(),
        });
        m.observe_changes(rec.clone());
        let root = m.root(0).unwrap();
        let unchecked = CreateMode::Unchecked(SetAttr::default());
        let a = m.mkdir(&root, b"a", &SetAttr::default(), OWNER).unwrap();
        let b = m.mkdir(&root, b"b", &SetAttr::default(), OWNER).unwrap();
        let b1 = m.create(&b, b"b1", &unchecked, OWNER).unwrap();

        rec.start("a/f");
        let f = m.create(&a, b"f", &unchecked, OWNER).unwrap();
        assert_eq!(rec.ids(), HashSet::from([a.fileid, f.fileid]), "create");

        rec.start("a/f");
        m.remove(&a, b"f").unwrap();
        assert_eq!(rec.ids(), HashSet::from([a.fileid, f.fileid]), "remove");
        assert!(
            rec.before_and_after_removal(f.fileid),
            "the victim is reported before the store loses it, and after"
        );

        // RENAME over an existing file: both parents, the moved and the replaced.
        let g = m.create(&a, b"g", &unchecked, OWNER).unwrap();
        rec.start("b/b1");
        m.rename(&a, b"g", &b, b"b1").unwrap();
        assert_eq!(
            rec.ids(),
            HashSet::from([a.fileid, b.fileid, g.fileid, b1.fileid]),
            "rename over a file"
        );
        let log = lock(&rec.log).clone();
        assert!(
            log.first().is_some_and(|(_, there)| *there),
            "reported before the replaced object goes"
        );

        // A directory rename: its descendants too, and nothing in b/.
        let sub = m.mkdir(&a, b"sub", &SetAttr::default(), OWNER).unwrap();
        let s1 = m.create(&sub, b"s1", &unchecked, OWNER).unwrap();
        rec.start("a/sub/");
        m.rename(&a, b"sub", &a, b"moved").unwrap();
        assert_eq!(
            rec.ids(),
            HashSet::from([a.fileid, sub.fileid, s1.fileid]),
            "directory rename"
        );

        rec.start("a/moved/");
        m.remove(&sub_at(m, &a), b"s1").unwrap();
        m.rmdir(&a, b"moved").unwrap();
        assert!(rec.ids().contains(&sub.fileid) && rec.ids().contains(&a.fileid));
        assert!(!rec.ids().contains(&b.fileid) && !rec.ids().contains(&root.fileid));
        assert_eq!(
            rec.all.load(std::sync::atomic::Ordering::Relaxed),
            0,
            "nothing global"
        );
    });
}

fn sub_at(m: &FileModel, a: &Node) -> Node {
    m.lookup(a, b"moved").unwrap()
}

/// A report: the file id, and the watched object's size and stored mode then.
type Report = (u64, Option<(u64, Option<String>)>);

/// Records each report with what the store held for the watched key at that moment:
/// its size and stored mode.
struct Seen {
    backend: Arc<dyn Backend>,
    key: String,
    log: Mutex<Vec<Report>>,
}

impl ChangeObserver for Seen {
    fn file(&self, fileid: u64) {
        let m = self.backend.head(&self.key).ok();
        let state = m.map(|m| (m.size, m.user.get(M_MODE).cloned()));
        lock(&self.log).push((fileid, state));
    }
    fn all(&self) {
        panic!("a data or attribute change names its file");
    }
}

impl Seen {
    /// The reports since the last call.
    fn take(&self) -> Vec<Report> {
        std::mem::take(&mut *lock(&self.log))
    }
}

/// Data and attribute changes report their one file, before the store changes and
/// after, whoever calls them (the caches' invalidation follows what executed).
#[test]
fn data_and_attribute_changes_report_their_file_before_and_after() {
    each_local(|m, backend, _| {
        let root = m.root(0).unwrap();
        let f = m
            .create(
                &root,
                b"f",
                &CreateMode::Unchecked(SetAttr::default()),
                OWNER,
            )
            .unwrap();
        let seen = Arc::new(Seen {
            backend: backend.clone(),
            key: f.key.clone(),
            log: Mutex::new(Vec::new()),
        });
        m.observe_changes(seen.clone());
        let size = |log: &[Report]| -> Vec<(u64, u64)> {
            log.iter()
                .map(|(id, s)| (*id, s.as_ref().unwrap().0))
                .collect()
        };

        for stable in [Stable::Unstable, Stable::FileSync] {
            m.write(&f, 0, b"hello", stable).unwrap();
            let log = size(&seen.take());
            assert_eq!(log.len(), 2, "{stable:?}: {log:?}");
            assert_eq!(log[1], (f.fileid, 5), "{stable:?}: after the write");
        }
        m.write(&f, 5, b"!", Stable::Unstable).unwrap();
        assert_eq!(size(&seen.take()), [(f.fileid, 5), (f.fileid, 6)], "write");

        let trunc = SetAttr {
            size: Some(2),
            ..Default::default()
        };
        m.setattr(&f, &trunc).unwrap();
        assert_eq!(size(&seen.take()), [(f.fileid, 6), (f.fileid, 2)], "size");

        let mode = SetAttr {
            mode: Some(0o600),
            ..Default::default()
        };
        m.setattr(&f, &mode).unwrap();
        let log = seen.take();
        assert_eq!(log.len(), 2, "mode: {log:?}");
        assert_ne!(
            log[0].1, log[1].1,
            "reported before the mode is stored, and after"
        );

        // COMMIT: with staged data, around the sync; with none, nothing changes.
        m.write(&f, 0, b"x", Stable::Unstable).unwrap();
        seen.take();
        m.commit(&f).unwrap();
        assert_eq!(seen.take().len(), 2, "commit of staged data");
        m.commit(&f).unwrap();
        assert!(seen.take().is_empty(), "commit of nothing");

        // A size set by CREATE over an existing file (UNCHECKED): reported too.
        let over = CreateMode::Unchecked(SetAttr {
            size: Some(0),
            ..Default::default()
        });
        m.create(&root, b"f", &over, OWNER).unwrap();
        let log: Vec<u64> = size(&seen.take())
            .into_iter()
            .filter(|(id, _)| *id == f.fileid)
            .map(|(_, size)| size)
            .collect();
        assert!(
            log.first() == Some(&2) && log.last() == Some(&0),
            "truncating create: {log:?}"
        );

        // Refused changes report nothing (nothing ran).
        let dir = m.mkdir(&root, b"d", &SetAttr::default(), OWNER).unwrap();
        seen.take();
        let r = m.write(&dir, 0, b"x", Stable::Unstable);
        assert!(matches!(r, Err(Status::IsDir)));
        assert!(seen.take().is_empty());
    });
}

/// Records each directory-entry report (`ChangeObserver::name`) with whether the
/// object at `watch` existed at that moment.
#[derive(Default)]
struct Names {
    backend: Mutex<Option<Arc<dyn Backend>>>,
    watch: Mutex<String>,
    log: Mutex<Vec<(u64, Vec<u8>, bool)>>,
}

impl ChangeObserver for Names {
    fn file(&self, _: u64) {}
    fn all(&self) {}
    fn name(&self, dir: u64, name: &[u8]) {
        let b = lock(&self.backend).clone().unwrap();
        let there = b.head(&lock(&self.watch)).is_ok();
        lock(&self.log).push((dir, name.to_vec(), there));
    }
}

impl Names {
    /// The reports since the last call, as (directory, name) → how many.
    fn take(&self, watch: &str) -> std::collections::BTreeMap<(u64, Vec<u8>), usize> {
        let mut out = std::collections::BTreeMap::new();
        for (d, n, _) in lock(&self.log).drain(..) {
            *out.entry((d, n)).or_insert(0) += 1;
        }
        *lock(&self.watch) = watch.into();
        out
    }
}

/// Each change of what a name refers to reports exactly that name (both names for a
/// rename), once before the store changes and once after: the reactors' name cache
/// keeps a CREATE's name only when its stamp moved by exactly these two reports
/// (`cache::names::EntrySeen::learned`), and a cached LOOKUP of any other name is
/// left answering. Data and attribute changes report no name.
#[test]
fn name_changes_report_exactly_their_names_twice() {
    each_local(|m, backend, _| {
        let rec = Arc::new(Names::default());
        *lock(&rec.backend) = Some(backend.clone());
        m.observe_changes(rec.clone());
        let root = m.root(0).unwrap();
        let unchecked = CreateMode::Unchecked(SetAttr::default());
        let two = |d: &Node, n: &[u8]| ((d.fileid, n.to_vec()), 2usize);
        rec.take("");
        let a = m.mkdir(&root, b"a", &SetAttr::default(), OWNER).unwrap();
        assert_eq!(rec.take("a/f"), [two(&root, b"a")].into(), "mkdir");
        let f = m.create(&a, b"f", &unchecked, OWNER).unwrap();
        assert_eq!(rec.take(""), [two(&a, b"f")].into(), "create");
        m.write(&f, 0, b"data", Stable::FileSync).unwrap();
        m.setattr(
            &f,
            &SetAttr {
                mode: Some(0o600),
                ..Default::default()
            },
        )
        .unwrap();
        assert!(
            rec.take("").is_empty(),
            "a write and a SETATTR name nothing"
        );
        m.create(&a, b"g", &unchecked, OWNER).unwrap();
        assert_eq!(rec.take("a/f"), [two(&a, b"g")].into(), "another create");
        m.rename(&a, b"f", &root, b"h").unwrap();
        assert_eq!(
            rec.take("h"),
            [two(&a, b"f"), two(&root, b"h")].into(),
            "rename"
        );
        let h = m.lookup(&root, b"h").unwrap();
        assert_eq!(h.fileid, f.fileid, "a rename keeps the id");
        m.link(&h, &a, b"l").unwrap();
        assert_eq!(rec.take("h"), [two(&a, b"l")].into(), "link");
        m.remove(&root, b"h").unwrap();
        {
            // Reported while the object was there, and again once it was gone.
            let log = lock(&rec.log);
            assert_eq!(log.len(), 2, "remove");
            assert!(
                log[0].2 && !log[1].2,
                "before and after the removal: {log:?}"
            );
        }
        assert_eq!(rec.take(""), [two(&root, b"h")].into(), "remove");
        m.rmdir(&root, b"a").unwrap_err();
        assert_eq!(rec.take(""), [two(&root, b"a")].into(), "a refused rmdir");
    });
}
