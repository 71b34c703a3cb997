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
