//! Delete on last close (`orphans`): a file removed or renamed over while an NFSv4
//! open holds it stays readable through its handle, nameless, until `release`.

use super::*;
use crate::fs::OpenFiles;

/// The open table, reduced to the set of open file ids.
#[derive(Default)]
struct Opened(Mutex<HashSet<u64>>);

impl OpenFiles for Opened {
    fn is_open(&self, fileid: u64) -> bool {
        lock(&self.0).contains(&fileid)
    }
}

fn track(m: &FileModel) -> Arc<Opened> {
    let o = Arc::new(Opened::default());
    m.track_opens(o.clone());
    o
}

fn put(m: &FileModel, f: &Node, data: &[u8]) {
    m.write(f, 0, data, Stable::FileSync).unwrap();
}

fn read_all(m: &FileModel, f: &Node) -> Vec<u8> {
    let mut b = vec![0u8; 64];
    let (n, _) = m.read(f, 0, &mut b).unwrap();
    b.truncate(n);
    b
}

/// Every object key the backend holds (the store as a whole, nothing hidden).
fn store_keys(b: &Arc<dyn Backend>) -> Vec<String> {
    b.list("", None, None, 10_000)
        .unwrap()
        .objects
        .into_iter()
        .map(|o| o.key)
        .collect()
}

/// READDIR's entries without "." and "..".
fn listed(m: &FileModel, dir: &Node) -> Vec<String> {
    names(m, dir)
        .into_iter()
        .filter(|n| n != "." && n != "..")
        .collect()
}

fn orphans_in_store(b: &Arc<dyn Backend>) -> Vec<String> {
    store_keys(b)
        .into_iter()
        .filter(|k| orphans::is_orphan_key(k))
        .collect()
}

#[test]
fn a_removed_open_file_stays_readable_until_its_last_close() {
    each(|m, b, _| {
        let opened = track(m);
        let root = m.root(0).unwrap();
        let d = m.mkdir(&root, b"d", &SetAttr::default(), OWNER).unwrap();
        let f = mkfile(m, &d, "f");
        put(m, &f, b"old bytes");
        let h = m.handle(&f);
        lock(&opened.0).insert(f.fileid);

        m.remove(&d, b"f").unwrap();

        // The name is gone for everyone, the orphan listed nowhere.
        assert_eq!(m.lookup(&d, b"f"), Err(Status::NoEnt));
        assert!(listed(m, &d).is_empty(), "{:?}", listed(m, &d));
        assert!(
            !listed(m, &root).iter().any(|n| n.starts_with(".nfsgw")),
            "{:?}",
            listed(m, &root)
        );
        assert_eq!(orphans_in_store(b).len(), 1, "{:?}", store_keys(b));
        // The open's handle still reaches the data; nlink 0, as knfsd.
        let o = m.resolve(h.as_bytes()).unwrap();
        assert_eq!(o.fileid, f.fileid);
        assert_eq!(read_all(m, &o), b"old bytes");
        let a = m.getattr(&o).unwrap();
        assert_eq!((a.nlink, a.size), (0, 9));
        put(m, &o, b"NEW");
        assert_eq!(read_all(m, &o), b"NEW bytes");
        // The name is free at once.
        let g = mkfile(m, &d, "f");
        assert_ne!(g.fileid, f.fileid);
        assert_eq!(read_all(m, &g), b"");

        // Last close: the orphan is deleted, its handle STALE; the new "f" stays.
        lock(&opened.0).clear();
        m.release(f.fileid);
        assert_eq!(m.resolve(h.as_bytes()), Err(Status::Stale));
        assert!(orphans_in_store(b).is_empty(), "{:?}", store_keys(b));
        assert_eq!(listed(m, &d), vec!["f".to_string()]);
        m.release(f.fileid); // a second release is a no-op

        // Not open: deleted at once, as before.
        let x = mkfile(m, &d, "x");
        let hx = m.handle(&x);
        m.remove(&d, b"x").unwrap();
        assert_eq!(m.resolve(hx.as_bytes()), Err(Status::Stale));
        assert!(orphans_in_store(b).is_empty());
    });
}

#[test]
fn a_file_renamed_over_while_open_keeps_its_old_bytes() {
    each(|m, b, _| {
        let opened = track(m);
        // Through the "sub/" export: the orphan stays under that export's root.
        let root = m.root(1).unwrap();
        let old = mkfile(m, &root, "config");
        put(m, &old, b"version 1");
        let new = mkfile(m, &root, "config.new");
        put(m, &new, b"version 2");
        let h = m.handle(&old);
        lock(&opened.0).insert(old.fileid);

        m.rename(&root, b"config.new", &root, b"config").unwrap();

        let now = m.lookup(&root, b"config").unwrap();
        assert_eq!(now.fileid, new.fileid);
        assert_eq!(read_all(m, &now), b"version 2");
        assert_eq!(m.getattr(&now).unwrap().nlink, 1);
        assert_eq!(listed(m, &root), vec!["config".to_string()]);
        let o = m.resolve(h.as_bytes()).unwrap();
        assert_eq!(read_all(m, &o), b"version 1");
        assert_eq!(m.getattr(&o).unwrap().nlink, 0);
        let orphans = orphans_in_store(b);
        assert_eq!(orphans.len(), 1);
        assert!(orphans[0].starts_with("sub/"), "{orphans:?}");

        lock(&opened.0).clear();
        m.release(old.fileid);
        assert_eq!(m.resolve(h.as_bytes()), Err(Status::Stale));
        assert!(orphans_in_store(b).is_empty(), "{:?}", store_keys(b));
        assert_eq!(read_all(m, &now), b"version 2");
    });
}

/// A restart keeps the orphans of the previous run (stopped with opens held) for the
/// grace period: the handle resolves to the nameless file, a reclaimed open's last
/// close deletes it, and the grace period's end deletes those nobody reclaimed
/// (OPEN4_RESULT_PRESERVE_UNLINKED, RFC 8881 §18.16.4).
#[test]
fn orphans_of_a_stopped_run_are_kept_through_the_grace_period() {
    each(|m, b, st| {
        let opened = track(m);
        let root = m.root(0).unwrap();
        let (f, g) = (mkfile(m, &root, "held"), mkfile(m, &root, "lost"));
        put(m, &f, b"x");
        let (hf, hg) = (m.handle(&f), m.handle(&g));
        lock(&opened.0).extend([f.fileid, g.fileid]);
        m.remove(&root, b"held").unwrap();
        m.remove(&root, b"lost").unwrap();
        assert_eq!(orphans_in_store(b).len(), 2);
        // A second gateway start on the same store and state dir.
        let m2 = FileModel::open(b.clone(), st, &exports()).unwrap();
        assert_eq!(orphans_in_store(b).len(), 2, "{:?}", store_keys(b));
        let n = m2.resolve(hf.as_bytes()).unwrap();
        assert_eq!(m2.getattr(&n).unwrap().nlink, 0);
        assert_eq!(read_all(&m2, &n), b"x");
        // "held" is reclaimed, "lost" not: the grace period ends.
        let opened2 = track(&m2);
        lock(&opened2.0).insert(f.fileid);
        assert_eq!(m2.release_unopened_orphans(), 1);
        assert_eq!(m2.resolve(hg.as_bytes()), Err(Status::Stale));
        assert_eq!(orphans_in_store(b).len(), 1, "{:?}", store_keys(b));
        // The reclaimed open's last close.
        lock(&opened2.0).clear();
        m2.release(f.fileid);
        assert!(orphans_in_store(b).is_empty(), "{:?}", store_keys(b));
        assert_eq!(m2.resolve(hf.as_bytes()), Err(Status::Stale));
        // And the log is done with them: a third start has nothing to keep.
        drop(m2);
        let m3 = FileModel::open(b.clone(), st, &exports()).unwrap();
        assert_eq!(m3.release_unopened_orphans(), 0);
    });
}

/// Only stores that outlive the process may promise to keep an unlinked open file
/// through a restart.
#[test]
fn preserving_unlinked_files_needs_a_lasting_store() {
    each_local(|m, b, _| {
        let root = m.root(0).unwrap();
        let f = mkfile(m, &root, "f");
        assert_eq!(
            m.preserves_unlinked(&f),
            b.name() != "memory",
            "{}",
            b.name()
        );
    });
}

#[test]
fn orphan_names_are_reserved() {
    each_local(|m, _, _| {
        let root = m.root(0).unwrap();
        let name = b".nfsgw-orphan.0000000000000001";
        assert_eq!(
            m.create(&root, name, &CreateMode::Guarded(SetAttr::default()), OWNER),
            Err(Status::Inval)
        );
        assert_eq!(m.lookup(&root, name), Err(Status::NoEnt));
    });
}

/// The last close racing the REMOVE: the open went between the check and the move,
/// so no `release` will come; the REMOVE deletes the orphan itself.
#[test]
fn a_close_racing_the_remove_leaves_no_orphan() {
    /// Open at the first question only.
    struct OnceOpen(std::sync::atomic::AtomicBool);
    impl OpenFiles for OnceOpen {
        fn is_open(&self, _: u64) -> bool {
            self.0.swap(false, std::sync::atomic::Ordering::SeqCst)
        }
    }
    each_local(|m, b, _| {
        m.track_opens(Arc::new(OnceOpen(true.into())));
        let root = m.root(0).unwrap();
        let f = mkfile(m, &root, "f");
        let h = m.handle(&f);
        m.remove(&root, b"f").unwrap();
        assert_eq!(m.resolve(h.as_bytes()), Err(Status::Stale));
        assert!(orphans_in_store(b).is_empty(), "{:?}", store_keys(b));
    });
}

/// A power loss may tear the log's last record (module doc of `orphans`): start-up
/// skips it with a log line, never fails, never deletes a key it does not fully
/// know (a torn `+di…` must not remove the user's `di`), and still keeps, then
/// deletes, the orphans its complete records list.
#[test]
fn a_torn_or_malformed_record_is_skipped_and_complete_ones_still_clean_up() {
    each(|m, b, st| {
        let opened = track(m);
        let root = m.root(0).unwrap();
        let f = mkfile(m, &root, "held");
        put(m, &f, b"x");
        lock(&opened.0).insert(f.fileid);
        m.remove(&root, b"held").unwrap();
        assert_eq!(orphans_in_store(b).len(), 1);
        let di = mkfile(m, &root, "di");
        put(m, &di, b"keep me");
        // What a crash can leave after the complete records: a line that is not
        // UTF-8, a complete record naming a user's file (never written by us), and
        // a last record cut short (a prefix of an orphan name, no newline).
        let log = st.join("orphans.log");
        let mut tail = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        use std::io::Write;
        tail.write_all(b"+\xff\xfe\n+di\n+.nfsgw-orphan.00000000")
            .unwrap();
        drop(tail);
        let m2 = FileModel::open(b.clone(), st, &exports()).expect("start-up with a torn log");
        // The complete record's orphan is kept for the grace period, then deleted.
        assert_eq!(orphans_in_store(b).len(), 1, "{:?}", store_keys(b));
        assert_eq!(m2.release_unopened_orphans(), 1);
        assert!(orphans_in_store(b).is_empty(), "{:?}", store_keys(b));
        assert!(
            store_keys(b).iter().any(|k| k == "di"),
            "{:?}",
            store_keys(b)
        );
        // The rewritten log holds complete records only.
        let body = std::fs::read(&log).unwrap();
        assert!(body.is_empty() || body.ends_with(b"\n"), "{body:?}");
    });
}

#[test]
fn the_log_parser_keeps_complete_unstruck_orphan_records_only() {
    let p = std::path::Path::new("orphans.log");
    let o1 = ".nfsgw-orphan.0000000000000001";
    let o2 = "d/.nfsgw-orphan.0000000000000002";
    let o3 = ".nfsgw-orphan.0000000000000003";
    let log = format!("+{o1}\n+{o2}\n-{o1}\nx{o3}\n\n+{o3}");
    assert_eq!(orphans::parse_log(p, log.as_bytes()), vec![o2.to_string()]);
    let log = format!("+{o1}\n+{o3}\n");
    assert_eq!(orphans::parse_log(p, log.as_bytes()), vec![o1, o3]);
    assert!(orphans::parse_log(p, b"").is_empty());
}
