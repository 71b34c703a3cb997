//! Handle table tests: the cache bound, the index behind it, migration, crash reopen.

use super::legacy::{record, MAGIC, T_ASSIGN, T_FORGET, T_RENAME, T_RENAME_PREFIX};
use super::*;

fn open(d: &Path, cap: usize) -> HandleTable {
    HandleTable::open_with(d, cap, u64::MAX).unwrap()
}

#[test]
fn tombstones_below_the_time_floor_are_pruned() {
    let d = tempfile::tempdir().unwrap();
    let c = index::open(&d.path().join("handles.db")).unwrap();
    index::put(&c, 10, 100, "a").unwrap();
    index::put(&c, 11, 5_000, "b").unwrap();
    index::tomb(&c, 10, 0).unwrap();
    index::tomb(&c, 11, 0).unwrap();
    assert_eq!(index::counts(&c).unwrap(), (0, 2));
    assert_eq!(index::prune_tombs(&c, 1_000).unwrap(), 1);
    assert_eq!(index::by_id(&c, 11).unwrap(), Some((None, 5_000)));
    assert_eq!(index::by_id(&c, 10).unwrap(), None);
}

#[test]
fn listing_ids_match_later_assignments_and_are_not_recorded() {
    let d = tempfile::tempdir().unwrap();
    let t = HandleTable::open(d.path()).unwrap();
    let (dir, _) = t.assign("d/");
    let keys: Vec<String> = (0..1000).map(|i| format!("d/f{i}")).collect();
    let ids = t.ids_for_listing(keys.iter().map(String::as_str));
    assert_eq!(t.sizes().0, 1, "a listing records nothing");
    for (k, id) in keys.iter().zip(&ids) {
        assert_eq!(t.assign(k).0, *id, "{k}");
    }
    assert_ne!(dir, ids[0]);
    // A renamed key keeps its id, and the listing shows that one (evicted or not).
    t.rename("d/f0", "d/g0");
    assert_eq!(t.ids_for_listing(["d/g0"].into_iter()), vec![ids[0]]);
    // A key whose first candidate another key holds gets assigned for real.
    let taken = candidate("d/x", 0);
    index::put(&t.db().conn, taken, 1, "elsewhere").unwrap();
    let got = t.ids_for_listing(["d/x"].into_iter());
    assert_ne!(got[0], taken);
    assert_eq!(t.assign("d/x").0, got[0]);
}

#[test]
fn more_keys_than_the_cache_all_resolve_before_and_after_reopen() {
    let d = tempfile::tempdir().unwrap();
    let keys: Vec<String> = (0..5000).map(|i| format!("dir{}/f{i}", i % 7)).collect();
    let t = open(d.path(), 100);
    let got: Vec<(u64, u32)> = keys.iter().map(|k| t.assign(k)).collect();
    assert!(t.cached() <= 100, "cache bound kept: {}", t.cached());
    assert_eq!(t.sizes(), (5000, 0));
    let check = |t: &HandleTable| {
        for (k, (id, gen)) in keys.iter().zip(&got) {
            assert_eq!(t.get(*id), Some((k.clone(), *gen)), "{k}");
            assert_eq!(t.assign(k), (*id, *gen), "{k}");
        }
        assert!(t.cached() <= 100);
    };
    check(&t);
    t.sync().unwrap();
    drop(t);
    check(&open(d.path(), 100));
}

#[test]
fn rename_prefix_moves_evicted_entries_and_replaces_the_target() {
    let d = tempfile::tempdir().unwrap();
    let t = open(d.path(), 10);
    let (dir, _) = t.assign("d/");
    let (old, _) = t.assign("e/old");
    let (outside, _) = t.assign("dx");
    let files: Vec<(u64, u32)> = (0..200).map(|i| t.assign(&format!("d/f{i}"))).collect();
    t.rename("d/", "e/");
    let check = |t: &HandleTable| {
        for (i, (id, gen)) in files.iter().enumerate() {
            assert_eq!(t.get(*id), Some((format!("e/f{i}"), *gen)));
        }
        assert_eq!(t.get(dir).map(|r| r.0), Some("e/".to_string()));
        assert_eq!(t.get(old), None, "the replaced target is forgotten");
        assert_eq!(t.get(outside).map(|r| r.0), Some("dx".to_string()));
    };
    check(&t);
    // The old names are free: "d/f0" gets a new id (its first candidate is taken).
    let (nid, _) = t.assign("d/f0");
    assert_ne!(nid, files[0].0);
    t.forget("d/f0");
    drop(t);
    let t = open(d.path(), 10);
    check(&t);
    // forget_prefix reaches evicted entries too.
    t.forget_prefix("e/");
    for (id, _) in &files {
        assert_eq!(t.get(*id), None);
    }
    assert_eq!(t.get(outside).map(|r| r.0), Some("dx".to_string()));
    drop(t);
    assert_eq!(open(d.path(), 10).get(files[5].0), None);
}

/// RMDIR's prefix forget of a directory whose children were all forgotten (their
/// index rows superseded by pending forgets) is one journal append: no fold, no index
/// write, and the directory's handle is stale before and after a reopen. A child still
/// mapped — only in the index (evicted from the cache), or only pending — takes the
/// whole prefix forget, as before.
#[test]
fn forgetting_an_emptied_directory_appends_without_a_fold() {
    let d = tempfile::tempdir().unwrap();
    let t = open(d.path(), 10);
    let (dir, _) = t.assign("d/");
    let files: Vec<u64> = (0..50).map(|i| t.assign(&format!("d/f{i}")).0).collect();
    let folded = t.index_writes(); // folds: the children are index rows now
    for i in 0..50 {
        t.forget(&format!("d/f{i}"));
    }
    assert_eq!(t.db().recs.len(), 50);
    assert_eq!(t.forget_prefix("d/"), Some(vec![dir]));
    assert_eq!(t.db().recs.len(), 51, "one forget appended, nothing folded");
    assert_eq!(t.db().writes, folded, "no index write");
    assert_eq!(t.get(dir), None);
    // Nothing mapped at or under a prefix: nothing to forget.
    assert_eq!(t.forget_prefix("none/"), Some(Vec::new()));
    drop(t);
    let t = open(d.path(), 10);
    assert_eq!(
        t.get(dir),
        None,
        "the forget survives a reopen (journal replay)"
    );
    assert!(files.iter().all(|id| t.get(*id).is_none()));
    // A child only the index holds (evicted: the cache keeps 10).
    let (e, _) = t.assign("e/");
    let mut kept: Vec<u64> = (0..30).map(|i| t.assign(&format!("e/g{i}")).0).collect();
    t.index_writes();
    let mut touched = t.forget_prefix("e/").unwrap();
    kept.push(e);
    kept.sort_unstable();
    touched.sort_unstable();
    assert_eq!(touched, kept);
    assert!(kept.iter().all(|id| t.get(*id).is_none()));
    // A child only pending (assigned since the last fold).
    let (x, _) = t.assign("x/");
    let (y, _) = t.assign("x/y");
    let mut touched = t.forget_prefix("x/").unwrap();
    touched.sort_unstable();
    let mut want = vec![x, y];
    want.sort_unstable();
    assert_eq!(touched, want);
    assert_eq!((t.get(x), t.get(y)), (None, None));
    // A sibling that shares the name's start is not under the prefix.
    let (z, _) = t.assign("z/");
    let (zz, _) = t.assign("zz");
    let before = t.db().recs.len();
    assert_eq!(t.forget_prefix("z/"), Some(vec![z]));
    assert_eq!(t.db().recs.len(), before + 1);
    assert_eq!(t.get(zz).map(|r| r.0), Some("zz".to_string()));
}

#[test]
fn a_reassigned_id_gets_a_higher_generation_after_eviction_and_reopen() {
    let d = tempfile::tempdir().unwrap();
    let t = open(d.path(), 2);
    let (id, gen) = t.assign("x");
    assert!(gen >= now_secs().saturating_sub(5) && id > 1);
    for i in 0..50 {
        t.assign(&format!("y{i}"));
    }
    t.forget("x");
    assert_eq!(t.get(id), None);
    // A tombstone from the future (a clock step back): the rule must still hold.
    let future = now_secs().saturating_add(1000);
    t.sizes(); // folds the journal, so the injected row is the index's latest word
    index::tomb(&t.db().conn, id, future).unwrap();
    drop(t);
    let t = open(d.path(), 2);
    assert_eq!(t.assign("x"), (id, future + 1));
    t.forget("x");
    for i in 0..50 {
        t.assign(&format!("z{i}"));
    }
    drop(t);
    let t = open(d.path(), 2);
    assert_eq!(t.assign("x"), (id, future + 2));
}

#[test]
fn a_legacy_log_is_imported_once() {
    let d = tempfile::tempdir().unwrap();
    let future = now_secs().saturating_add(1000);
    let idc = candidate("c", 0);
    let mut log = MAGIC.to_vec();
    record(&mut log, T_ASSIGN, 10, 7, "a");
    record(&mut log, T_ASSIGN, 11, 8, "d/b");
    record(&mut log, T_ASSIGN, 13, 9, "e/gone");
    record(&mut log, T_RENAME_PREFIX, 0, 0, "d/\0e/");
    record(&mut log, T_ASSIGN, idc, 50, "c");
    record(&mut log, T_FORGET, idc, future, "");
    record(&mut log, T_RENAME, 10, 0, "a2");
    let good = log.len();
    record(&mut log, T_ASSIGN, 12, 9, "torn");
    log.truncate(good + 10);
    std::fs::write(d.path().join("handles.log"), &log).unwrap();
    let check = |t: &HandleTable| {
        assert_eq!(t.get(10), Some(("a2".to_string(), 7)));
        assert_eq!(t.get(11), Some(("e/b".to_string(), 8)));
        assert_eq!(t.get(13), None);
        assert_eq!(t.get(12), None, "torn tail ignored");
        assert_eq!(t.assign("a2"), (10, 7));
    };
    let t = open(d.path(), 100);
    check(&t);
    assert!(!d.path().join("handles.log").exists());
    assert!(d.path().join("handles.log.imported").exists());
    assert_eq!(t.assign("c"), (idc, future + 1), "tombstone imported");
    drop(t);
    let t = open(d.path(), 100);
    check(&t);
    assert_eq!(t.assign("c"), (idc, future + 1));
    // A log that is not ours is refused, not imported.
    drop(t);
    std::fs::write(d.path().join("handles.log"), b"garbage!").unwrap();
    assert!(HandleTable::open_with(d.path(), 100, u64::MAX).is_err());
}

#[test]
fn collisions_take_the_next_free_candidate_never_0_or_1() {
    let d = tempfile::tempdir().unwrap();
    // Ids 2..=7 only: six keys fill the space.
    let t = HandleTable::open_with(d.path(), 2, 7).unwrap();
    let keys: Vec<String> = (0..6).map(|i| format!("k{i}")).collect();
    let listed = t.ids_for_listing(keys.iter().map(String::as_str));
    let ids: Vec<u64> = keys.iter().map(|k| t.assign(k).0).collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, vec![2, 3, 4, 5, 6, 7]);
    for (k, id) in keys.iter().zip(&ids) {
        assert_eq!(t.get(*id).map(|r| r.0), Some(k.clone()));
        assert_eq!(t.ids_for_listing([k.as_str()].into_iter()), vec![*id]);
    }
    // Listing ids: a key's first candidate when it won it, else its real id.
    for (l, id) in listed.iter().zip(&ids) {
        assert!(l == id || ids.contains(l));
    }
    // A freed id goes to the next key that needs one, with a higher generation.
    let (gone, g) = t.assign("k3");
    t.forget("k3");
    drop(t);
    let t = HandleTable::open_with(d.path(), 2, 7).unwrap();
    let (nid, ng) = t.assign("new");
    assert_eq!(nid, gone);
    assert!(ng > g, "{ng} > {g}");
}

#[test]
fn a_killed_process_loses_nothing_committed() {
    let d = tempfile::tempdir().unwrap();
    let t = open(d.path(), 10);
    let (a, ga) = t.assign("a");
    let (b, gb) = t.assign("dir/b");
    t.assign("gone");
    t.sync().unwrap();
    // After the last sync: a rename, a directory rename, a forget, new keys.
    t.rename("a", "a2");
    t.rename("dir/", "dir2/");
    t.forget("gone");
    let fresh: Vec<(u64, u32)> = (0..30).map(|i| t.assign(&format!("n{i}"))).collect();
    // No close, no checkpoint: the connection is leaked as a kill would leave it.
    std::mem::forget(t);
    let t = open(d.path(), 10);
    assert_eq!(t.get(a), Some(("a2".to_string(), ga)));
    assert_eq!(t.get(b), Some(("dir2/b".to_string(), gb)));
    assert_eq!(t.sizes().0, 32);
    for (i, (id, gen)) in fresh.iter().enumerate() {
        assert_eq!(t.get(*id), Some((format!("n{i}"), *gen)));
    }
}

#[test]
fn an_index_failure_gives_stale_ids_never_another_files() {
    let d = tempfile::tempdir().unwrap();
    let t = open(d.path(), 10);
    let (a, _) = t.assign("a");
    t.rename("a", "b"); // "b" holds "a"'s first candidate now
    t.db().conn.execute_batch("DROP TABLE handles").unwrap();
    t.cache_mut().remove_key("b");
    let (id, _) = t.assign("a");
    assert_ne!(id, a, "not the id another key holds");
    assert_eq!(id, UNRESOLVABLE);
    assert_eq!(t.get(id), None);
    assert_eq!(t.get(a), None);
    // Changes fail without panicking.
    t.rename("x/", "y/");
    t.forget("a");
    t.forget_prefix("x/");
    assert_eq!(t.ids_for_listing(["q"].into_iter()), vec![UNRESOLVABLE]);
}

#[test]
fn concurrent_misses_never_cache_a_stale_mapping() {
    let d = tempfile::tempdir().unwrap();
    let t = open(d.path(), 8);
    let ids: Vec<u64> = (0..20).map(|i| t.assign(&format!("d/f{i}")).0).collect();
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..200 {
                let (a, b) = if i % 2 == 0 {
                    ("d/", "e/")
                } else {
                    ("e/", "d/")
                };
                t.rename(a, b);
            }
        });
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..50 {
                    for id in &ids {
                        let (k, _) = t.get(*id).expect("live");
                        assert!(k.starts_with("d/f") || k.starts_with("e/f"), "{k}");
                    }
                }
            });
        }
    });
    // 200 renames: back under "d/". Whatever the cache holds matches the index.
    for (i, id) in ids.iter().enumerate() {
        let cached = t.cache().by_id(*id);
        let stored = index::by_id(&t.db().conn, *id).unwrap();
        assert_eq!(
            stored.as_ref().map(|s| s.0.clone()),
            Some(Some(format!("d/f{i}")))
        );
        if let Some((k, _)) = cached {
            assert_eq!(k, format!("d/f{i}"));
        }
        assert_eq!(t.get(*id).map(|r| r.0), Some(format!("d/f{i}")));
    }
}

#[test]
fn a_new_name_costs_a_journal_append_not_an_index_transaction() {
    let d = tempfile::tempdir().unwrap();
    let t = open(d.path(), 10);
    let jlen = || {
        std::fs::metadata(d.path().join("handles.journal"))
            .unwrap()
            .len()
    };
    let before = jlen();
    let (id, gen) = t.assign("a");
    assert!(jlen() > before, "journaled before the call returned");
    // Another connection sees nothing in the index yet: no per-name transaction.
    let other = index::open_reader(&d.path().join("handles.db")).unwrap();
    assert_eq!(index::by_id(&other, id).unwrap(), None);
    // ... but every lookup does, evicted or not.
    for i in 0..20 {
        t.assign(&format!("b{i}"));
    }
    assert_eq!(t.get(id), Some(("a".to_string(), gen)));
    t.forget("a");
    assert_eq!(t.get(id), None);
    assert_eq!(t.id_of("a"), None);
}

#[test]
fn a_kill_keeps_folded_and_pending_changes_and_torn_tails() {
    let d = tempfile::tempdir().unwrap();
    let t = open(d.path(), 50);
    let n = FOLD_RECORDS + FOLD_RECORDS / 2; // some folded, some pending
    let got: Vec<(u64, u32)> = (0..n).map(|i| t.assign(&format!("d/f{i}"))).collect();
    for i in (0..n).step_by(3) {
        t.forget(&format!("d/f{i}"));
    }
    t.rename("d/f1", "d/moved");
    let late = t.assign("late");
    t.forget("d/f4");
    std::mem::forget(t); // a kill: no fold, no checkpoint
                         // A torn append at the end is ignored; the records before it are not.
    let mut j = std::fs::OpenOptions::new()
        .append(true)
        .open(d.path().join("handles.journal"))
        .unwrap();
    j.write_all(&[1, 2, 3, 4, 5, 6, 7]).unwrap();
    drop(j);
    let check = |t: &HandleTable| {
        for (i, (id, gen)) in got.iter().enumerate() {
            let want = match i {
                _ if i % 3 == 0 || i == 4 => None,
                1 => Some(("d/moved".to_string(), *gen)),
                _ => Some((format!("d/f{i}"), *gen)),
            };
            assert_eq!(t.get(*id), want, "d/f{i}");
        }
        assert_eq!(t.get(late.0), Some(("late".to_string(), late.1)));
    };
    let t = open(d.path(), 50);
    check(&t);
    // A second kill replays the new generation's journal over the first's index.
    t.forget("late");
    std::mem::forget(t);
    let t = open(d.path(), 50);
    assert_eq!(t.get(late.0), None);
    let (id, gen) = t.assign("late");
    assert_eq!(id, late.0);
    assert!(gen > late.1, "a reassigned id gets a higher generation");
}

/// `adopt` (a hard-linked file's inode, named after its id): the id moves from the
/// file's earlier name keeping its generation, survives a reopen, and is given
/// afresh, above its tombstone, where no key held it (another gateway's table);
/// a key mapped to another id before loses that mapping.
#[test]
fn adopt_moves_or_assigns_the_id_a_name_carries() {
    let d = tempfile::tempdir().unwrap();
    let t = open(d.path(), 10);
    let (id, gen) = t.assign("d/f");
    let ikey = format!(".nfsgw-inode.{id:016x}");
    let ((a, g), touched) = t.adopt(&ikey, id);
    assert_eq!((a, g), (id, gen), "moved, generation kept");
    assert_eq!(touched, Some(vec![id]));
    assert_eq!(t.get(id), Some((ikey.clone(), gen)));
    assert_ne!(t.assign("d/f").0, id, "the old name is another key now");
    assert_eq!(
        t.adopt(&ikey, id),
        ((id, gen), Some(vec![])),
        "nothing to do"
    );
    t.sync().unwrap();
    drop(t);
    let t = open(d.path(), 10);
    assert_eq!(t.get(id), Some((ikey.clone(), gen)));
    // A tombstoned id: a generation above the tombstone's.
    let (gone, ggen) = t.assign("g");
    t.forget("g");
    let k2 = format!(".nfsgw-inode.{gone:016x}");
    let ((a, g2), _) = t.adopt(&k2, gone);
    assert!(a == gone && g2 > ggen, "{g2} > {ggen}");
    // A key that had another id: that mapping goes.
    let (other, _) = t.assign("k3");
    let ((a, _), touched) = t.adopt("k3", 0x1234_5678);
    assert_eq!(a, 0x1234_5678);
    assert_eq!(touched, Some(vec![other, 0x1234_5678]));
    assert_eq!(t.get(other), None);
    assert_eq!(t.get(0x1234_5678).unwrap().0, "k3");
    // A fresh table (another gateway): assigned as named.
    let d2 = tempfile::tempdir().unwrap();
    let t2 = open(d2.path(), 10);
    assert_eq!(t2.adopt(&ikey, id).0 .0, id);
    assert_eq!(t2.get(id).unwrap().0, ikey);
}
