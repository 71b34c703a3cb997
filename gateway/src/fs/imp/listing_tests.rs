use super::*;
use crate::backend::fs::FsBackend;
use crate::backend::memory::MemoryBackend;
use crate::fs::FileModel;
use std::collections::HashMap;

fn roots() -> Vec<ExportRoot> {
    vec![ExportRoot {
        id: 0,
        prefix: String::new(),
    }]
}

/// Runs `f` over a memory and an fs model, with a way to make `n` files named
/// `f{i:06}` straight in the store (not through the model: big directories fast).
fn each(f: impl Fn(&FileModel, &dyn Fn(usize))) {
    let mem: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    let d = tempfile::tempdir().unwrap();
    let m = FileModel::open(mem.clone(), &d.path().join("state"), &roots()).unwrap();
    let make = |n: usize| {
        for i in 0..n {
            mem.put(&format!("f{i:06}"), b"", &UserMeta::new(), false)
                .unwrap();
        }
    };
    f(&m, &make);
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("data");
    let fsb: Arc<dyn Backend> = Arc::new(FsBackend::open(&data).unwrap());
    let m = FileModel::open(fsb, &d.path().join("state"), &roots()).unwrap();
    let make = |n: usize| {
        for i in 0..n {
            std::fs::File::create(data.join(format!("f{i:06}"))).unwrap();
        }
    };
    f(&m, &make);
}

/// Pages through `dir` with pages of `max`, calling `between` after each page.
fn list_all(
    m: &FileModel,
    dir: &Node,
    max: usize,
    mut between: impl FnMut(&[DirEntry]),
) -> Vec<String> {
    let (mut cookie, mut verf, mut out) = (0, [0; 8], Vec::new());
    loop {
        let p = m.readdir(dir, cookie, verf, max).unwrap();
        assert!(p.entries.len() <= max);
        out.extend(
            p.entries
                .iter()
                .map(|e| String::from_utf8(e.name.clone()).unwrap()),
        );
        if p.eof {
            return out;
        }
        between(&p.entries);
        cookie = p.entries.last().unwrap().cookie;
        verf = p.verf;
    }
}

#[test]
fn cookies_are_ids_and_never_reserved() {
    assert_eq!(entry_cookie(2), 3);
    assert_eq!(entry_cookie(0xabcdef), 0xabcdef);
    each(|m, make| {
        make(10);
        let root = m.root(0).unwrap();
        let p = m.readdir(&root, 0, [0; 8], 100).unwrap();
        assert_eq!(p.entries[0].cookie, 1);
        assert_eq!(p.entries[1].cookie, 2);
        for e in &p.entries[2..] {
            assert_eq!(e.cookie, entry_cookie(e.fileid));
        }
    });
}

#[test]
fn a_cookie_resumes_after_its_entry_whatever_changed() {
    each(|m, make| {
        make(6);
        let root = m.root(0).unwrap();
        let p = m.readdir(&root, 0, [0; 8], 4).unwrap();
        let c = p.entries.last().unwrap().cookie;
        assert_eq!(p.entries.last().unwrap().name, b"f000001");
        // Changes before and after the resume point, and the entry itself removed:
        // the listing goes on after it with a stale verifier too.
        m.remove(&root, b"f000001").unwrap();
        m.remove(&root, b"f000004").unwrap();
        let o = Owner { uid: 0, gid: 0 };
        let new = CreateMode::Guarded(SetAttr::default());
        m.create(&root, b"e", &new, o).unwrap();
        m.create(&root, b"g", &new, o).unwrap();
        let q = m.readdir(&root, c, p.verf, 100).unwrap();
        let names: Vec<_> = q.entries.iter().map(|e| e.name.clone()).collect();
        let want: Vec<&[u8]> = vec![b"f000002", b"f000003", b"f000005", b"g"];
        assert_eq!(names, want);
        assert!(q.eof);
        // A mid-page cookie resumes too (a client that kept part of a reply).
        let mid = p.entries[2].cookie;
        let r = m.readdir(&root, mid, [0; 8], 1).unwrap();
        assert_eq!(r.entries[0].name, b"f000002");
        // Cookies nothing knows are refused.
        assert_eq!(
            m.readdir(&root, 0xdead_beef, [0; 8], 5),
            Err(Status::BadCookie)
        );
    });
}

#[test]
fn the_verifier_stays_through_changes_and_a_foreign_one_is_refused() {
    each(|m, make| {
        make(6);
        let root = m.root(0).unwrap();
        let p = m.readdir(&root, 0, [0; 8], 4).unwrap();
        assert_ne!(p.verf, [0; 8]);
        let c = p.entries.last().unwrap().cookie;
        m.remove(&root, b"f000004").unwrap();
        // The verifier does not move with the change, so the resumed page carries it.
        let q = m.readdir(&root, c, p.verf, 100).unwrap();
        assert_eq!(q.verf, p.verf);
        // A verifier this server never gave for the directory (a client's guess, or
        // another directory's) is BAD_COOKIE / NOT_SAME, on READDIR and READDIRPLUS.
        let bogus = p.verf.map(|b| b ^ 0xff);
        assert_eq!(m.readdir(&root, c, bogus, 5), Err(Status::BadCookie));
        assert!(matches!(
            m.readdir_plus(&root, c, bogus, 5),
            Err(Status::BadCookie)
        ));
        // Cookie 0 starts a listing whatever the verifier says.
        assert!(m.readdir(&root, 0, bogus, 5).is_ok());
    });
}

#[test]
fn a_cookie_resolves_through_the_handle_table_after_a_restart() {
    let mem: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    for n in ["a", "b", "c"] {
        mem.put(n, b"", &UserMeta::new(), false).unwrap();
    }
    let d = tempfile::tempdir().unwrap();
    let cookie = {
        let m = FileModel::open(mem.clone(), d.path(), &roots()).unwrap();
        let root = m.root(0).unwrap();
        let shared = m.readdir_plus(&root, 0, [0; 8], 3).unwrap();
        let (p, plus) = &*shared;
        let (n, _, _) = plus[2].as_ref().unwrap();
        m.handle(n);
        p.entries[2].cookie
    };
    let m = FileModel::open(mem, d.path(), &roots()).unwrap();
    let root = m.root(0).unwrap();
    let p = m.readdir(&root, cookie, [0; 8], 10).unwrap();
    let names: Vec<_> = p.entries.iter().map(|e| e.name.clone()).collect();
    assert_eq!(names, vec![b"b".to_vec(), b"c".to_vec()]);
}

/// A listing interrupted by creates and removes: every name present for the whole
/// listing exactly once, no name twice.
#[test]
fn interrupted_listing_returns_every_staying_name_once() {
    each(|m, make| {
        make(3000);
        let root = m.root(0).unwrap();
        let o = Owner { uid: 0, gid: 0 };
        let mut removed = HashSet::new();
        let mut round = 0usize;
        let got = list_all(m, &root, 97, |_| {
            round += 1;
            // Remove names ahead and behind, create names everywhere.
            for k in [round * 7 % 3000, (round * 31 + 1500) % 3000] {
                let n = format!("f{k:06}");
                if removed.insert(n.clone()) {
                    m.remove(&root, n.as_bytes()).unwrap();
                }
            }
            for n in [
                format!("a{round}"),
                format!("f{:06}x", round * 13 % 3000),
                format!("z{round}"),
            ] {
                m.create(
                    &root,
                    n.as_bytes(),
                    &CreateMode::Unchecked(SetAttr::default()),
                    o,
                )
                .unwrap();
            }
        });
        let mut count: HashMap<&str, usize> = HashMap::new();
        for n in &got {
            *count.entry(n).or_default() += 1;
        }
        assert!(count.values().all(|c| *c == 1), "a name listed twice");
        for i in 0..3000 {
            let n = format!("f{i:06}");
            if !removed.contains(&n) {
                assert_eq!(count.get(n.as_str()), Some(&1), "{n} missing");
            }
        }
    });
}

/// 100,000 entries listed completely and exactly, the model keeping at most the
/// bounded cursor table (no listing of the whole directory is held).
#[test]
fn a_big_directory_streams_with_bounded_memory() {
    each(|m, make| {
        make(100_000);
        let root = m.root(0).unwrap();
        let got = list_all(m, &root, 1000, |_| {});
        assert_eq!(got.len(), 100_002);
        let uniq: HashSet<&String> = got.iter().collect();
        assert_eq!(uniq.len(), got.len());
        assert!(m.inner.cursors.bytes() <= CURSOR_BYTES);
        // READDIRPLUS pages carry every entry's attributes.
        let shared = m.readdir_plus(&root, 0, [0; 8], 300).unwrap();
        let (p, plus) = &*shared;
        assert_eq!(p.entries.len(), plus.len());
        assert!(plus.iter().all(Option::is_some));
    });
}

#[test]
fn the_cursor_table_is_bounded() {
    let c = Cursors::default();
    let name = "k".repeat(1000);
    for d in 0..10_000u64 {
        c.remember(d, [(d + 3, name.as_str())].into_iter());
    }
    assert!(c.bytes() <= CURSOR_BYTES);
    assert_eq!(c.resolve(9_999, 10_002), Some(name));
    assert!(c.resolve(0, 3).is_none());
}

/// A cursor page is a few blocks whatever its length, counted as allocated, so the
/// table holds some 160,000 entries of 13-byte names; any entry of a page resumes.
#[test]
fn cursor_pages_are_compact_and_resume_from_any_entry() {
    let c = Cursors::default();
    let names: Vec<String> = (0..1000).map(|i| format!("entry-{i:07}")).collect();
    for page in 0..100u64 {
        c.remember(
            7,
            names
                .iter()
                .enumerate()
                .map(|(i, n)| (page * 1000 + i as u64 + 3, n.as_str())),
        );
    }
    assert!(c.bytes() < 100 * 1000 * 26, "{} bytes", c.bytes());
    assert_eq!(c.resolve(7, 3 + 500).as_deref(), Some("entry-0000500"));
    assert_eq!(
        c.resolve(7, 99_000 + 3 + 999).as_deref(),
        Some("entry-0000999")
    );
    assert!(c.resolve(8, 3).is_none());
}

/// A directory renamed while a client lists it: the cookies name entries, not keys
/// under the old name, so the listing goes on under the new key, every name once.
#[test]
fn a_listing_survives_its_directory_being_renamed() {
    let owner = Owner { uid: 0, gid: 0 };
    each(|m, _| {
        let root = m.root(0).unwrap();
        let d = m.mkdir(&root, b"m", &SetAttr::default(), owner).unwrap();
        for i in 0..50 {
            let how = CreateMode::Unchecked(SetAttr::default());
            m.create(&d, format!("f{i:02}").as_bytes(), &how, owner)
                .unwrap();
        }
        let p = m.readdir(&d, 0, [0; 8], 12).unwrap();
        assert!(!p.eof);
        let mut got: Vec<Vec<u8>> = p.entries.iter().map(|e| e.name.clone()).collect();
        // "a" sorts before "m": a resume from a key under "m/" would list nothing.
        m.rename(&root, b"m", &root, b"a").unwrap();
        let d = m.lookup(&root, b"a").unwrap();
        let (mut cookie, mut verf) = (p.entries.last().unwrap().cookie, p.verf);
        loop {
            let p = m.readdir(&d, cookie, verf, 12).unwrap();
            got.extend(p.entries.iter().map(|e| e.name.clone()));
            if p.eof {
                break;
            }
            cookie = p.entries.last().unwrap().cookie;
            verf = p.verf;
        }
        let mut want: Vec<Vec<u8>> = vec![b".".to_vec(), b"..".to_vec()];
        want.extend((0..50).map(|i| format!("f{i:02}").into_bytes()));
        assert_eq!(got, want);
    });
}

/// The names and sizes of `dir`'s first READDIRPLUS page (dots left out).
fn plus_names(m: &FileModel, dir: &Node) -> Vec<(String, u64)> {
    let shared = m.readdir_plus(dir, 0, [0; 8], 100).unwrap();
    let (page, plus) = &*shared;
    page.entries
        .iter()
        .zip(plus)
        .filter(|(e, _)| e.name != b"." && e.name != b"..")
        .map(|(e, p)| {
            let size = p.as_ref().map_or(u64::MAX, |(_, a, _)| a.size);
            (String::from_utf8(e.name.clone()).unwrap(), size)
        })
        .collect()
}

/// A store, a model over it, and the root.
fn memory_model() -> (Arc<dyn Backend>, FileModel, tempfile::TempDir) {
    let mem: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    let d = tempfile::tempdir().unwrap();
    let m = FileModel::open(mem.clone(), &d.path().join("state"), &roots()).unwrap();
    (mem, m, d)
}

#[test]
fn a_repeated_page_is_listed_once_until_the_gateway_changes_anything() {
    let (mem, m, _d) = memory_model();
    let root = m.root(0).unwrap();
    let o = Owner { uid: 0, gid: 0 };
    let new = CreateMode::Guarded(SetAttr::default());
    let a = m.create(&root, b"a", &new, o).unwrap();
    assert_eq!(plus_names(&m, &root), vec![("a".to_string(), 0)]);
    // Reused within MEMO_TTL: an object put straight into the store (behind the
    // gateway's back) is not listed yet, as attributes are not re-read yet.
    mem.put("b", b"", &UserMeta::new(), false).unwrap();
    assert_eq!(plus_names(&m, &root), vec![("a".to_string(), 0)]);
    // Any change through the gateway ends the reuse: a write to an entry shows its
    // new size at once, and the page is listed again (with "b").
    m.write(&a, 0, b"xyz", Stable::FileSync).unwrap();
    let want = vec![("a".to_string(), 3), ("b".to_string(), 0)];
    assert_eq!(plus_names(&m, &root), want);
    // So does a create, in this directory or any other.
    m.create(&root, b"c", &new, o).unwrap();
    assert_eq!(plus_names(&m, &root).len(), 3);
}

#[test]
fn a_change_the_observer_hears_of_elsewhere_ends_the_reuse() {
    // The reactors' generations count their own io_uring writes too: a page listed
    // before one is not reused after it.
    let (mem, m, _d) = memory_model();
    let gens = Arc::new(crate::cache::Generations::new());
    m.observe_changes(gens.clone());
    let root = m.root(0).unwrap();
    assert_eq!(plus_names(&m, &root), vec![]);
    mem.put("b", b"", &UserMeta::new(), false).unwrap();
    assert_eq!(plus_names(&m, &root), vec![]);
    gens.bump_file(12345);
    assert_eq!(plus_names(&m, &root), vec![("b".to_string(), 0)]);
}

#[test]
fn a_reused_page_expires() {
    let (mem, m, _d) = memory_model();
    let root = m.root(0).unwrap();
    assert_eq!(plus_names(&m, &root), vec![]);
    mem.put("b", b"", &UserMeta::new(), false).unwrap();
    std::thread::sleep(MEMO_TTL);
    assert_eq!(plus_names(&m, &root), vec![("b".to_string(), 0)]);
}

/// The attributes a READDIRPLUS page carries are GETATTR's, for files whose mode,
/// owner and times were set through the gateway (its metadata on the `fs` backend),
/// whether the listing reads them fresh, from entries past the backend's
/// revalidation time (`backend::fs` revalidates them through the listed directory),
/// or after they changed behind the gateway's back.
#[test]
fn listed_attributes_are_getattrs() {
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("data");
    let fsb: Arc<dyn Backend> = Arc::new(FsBackend::open(&data).unwrap());
    let m = FileModel::open(fsb, &d.path().join("state"), &roots()).unwrap();
    let root = m.root(0).unwrap();
    let dir = m
        .mkdir(&root, b"d", &SetAttr::default(), Owner { uid: 0, gid: 0 })
        .unwrap();
    let t = |sec| SetTime::Client(NfsTime { sec, nsec: 250 });
    for i in 0..6u32 {
        let new = CreateMode::Guarded(SetAttr {
            mode: Some(0o600 + i),
            ..SetAttr::default()
        });
        let owner = Owner {
            uid: 1000 + i,
            gid: 2000 + i,
        };
        let f = m
            .create(&dir, format!("f{i}").as_bytes(), &new, owner)
            .unwrap();
        if i % 2 == 0 {
            m.write(&f, 0, &vec![7; i as usize * 100], Stable::FileSync)
                .unwrap();
        }
        let set = SetAttr {
            mode: (i == 3).then_some(0o751),
            uid: (i == 4).then_some(42),
            atime: t(1_600_000_000 + i64::from(i)),
            mtime: if i == 5 {
                SetTime::ServerTime
            } else {
                t(1_700_000_000)
            },
            ..SetAttr::default()
        };
        m.setattr(&f, &set).unwrap();
    }
    let same = |when: &str| {
        let shared = m.readdir_plus(&dir, 0, [0; 8], 100).unwrap();
        let (page, plus) = &*shared;
        let mut n = 0;
        for (e, p) in page.entries.iter().zip(plus) {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let (node, a, _) = p.as_ref().expect("listed with attributes");
            assert_eq!(*a, m.getattr(node).unwrap(), "{when}: {:?}", e.name);
            n += 1;
        }
        assert_eq!(n, 6, "{when}");
    };
    same("fresh");
    // Past the fs backend's revalidation time (1 s) and the page memo's.
    std::thread::sleep(Duration::from_millis(1100));
    same("revalidated");
    // Changed behind the gateway's back: another gateway on the same directory.
    let other = FsBackend::open(&data).unwrap();
    let mut meta = other.head("d/f0").unwrap().user;
    meta.insert("mode".into(), "100640".into());
    other.set_meta("d/f0", &meta).unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    same("changed behind the gateway");
    let shared = m.readdir_plus(&dir, 0, [0; 8], 100).unwrap();
    let (page, plus) = &*shared;
    let i = page.entries.iter().position(|e| e.name == b"f0").unwrap();
    assert_eq!(plus[i].as_ref().unwrap().1.mode, 0o640);
}

/// A cookie of an entry the gateway created resumes after that entry is removed,
/// with no worker page having recorded it: a reactor can hand such a cookie out from a
/// run the creates kept (`cache::dirs`, MKDIR-started runs), and `rm -rf` removes a
/// page's entries before it asks for the next page. Fails with BAD_COOKIE without
/// `Cursors::made` (the handle table forgets the removed file's id).
#[test]
fn a_created_entrys_cookie_resumes_after_its_removal_with_no_page_listed() {
    let owner = Owner { uid: 0, gid: 0 };
    each(|m, _| {
        let root = m.root(0).unwrap();
        let d = m.mkdir(&root, b"made", &SetAttr::default(), owner).unwrap();
        let how = CreateMode::Guarded(SetAttr::default());
        let mut made = Vec::new();
        for i in 0..40 {
            let name = format!("n{i:03}");
            let n = m.create(&d, name.as_bytes(), &how, owner).unwrap();
            made.push((name, listing::entry_cookie(n.fileid)));
        }
        made.push(("sub".into(), 0));
        let s = m.mkdir(&d, b"sub", &SetAttr::default(), owner).unwrap();
        made.last_mut().unwrap().1 = listing::entry_cookie(s.fileid);
        // The client holds the cookie of n019 from a page no worker listed; it
        // removes n000..=n019 (and renames "sub" away), then asks for the next page.
        let cookie = made[19].1;
        for (name, _) in &made[..20] {
            m.remove(&d, name.as_bytes()).unwrap();
        }
        let verf = m.readdir(&d, 0, [0; 8], 1).unwrap().verf;
        let p = m.readdir(&d, cookie, verf, 100).unwrap();
        let names: Vec<String> = p
            .entries
            .iter()
            .map(|e| String::from_utf8_lossy(&e.name).into_owned())
            .collect();
        let want: Vec<String> = made[20..].iter().map(|(n, _)| n.clone()).collect();
        assert_eq!(names, want);
        // A directory's cookie too, after the directory was renamed out.
        let sub_cookie = made.last().unwrap().1;
        m.rename(&d, b"sub", &root, b"sub-moved").unwrap();
        let p = m.readdir(&d, sub_cookie, verf, 100).unwrap();
        assert!(
            p.entries.is_empty() && p.eof,
            "nothing after the last entry"
        );
    });
}

/// Eight identical READDIRPLUS calls at once (bench's QD8 on one directory) share
/// one listed page (`PageMemo`: the same `Arc`, no copy per call), and what they
/// share is the complete, exact page a lone call lists; a change through the gateway
/// then gives a new page with it.
#[test]
fn concurrent_identical_listings_share_one_complete_exact_page() {
    let (_mem, m, _d) = memory_model();
    let root = m.root(0).unwrap();
    let o = Owner { uid: 0, gid: 0 };
    let new = CreateMode::Guarded(SetAttr::default());
    for i in 0..200 {
        let f = m
            .create(&root, format!("f{i:03}").as_bytes(), &new, o)
            .unwrap();
        m.write(&f, 0, &vec![7; i], Stable::FileSync).unwrap();
    }
    let t0 = std::time::Instant::now();
    let gate = std::sync::Barrier::new(8);
    let pages: Vec<Arc<PlusPage>> = std::thread::scope(|s| {
        let calls: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    gate.wait();
                    m.readdir_plus(&root, 0, [0; 8], 300).unwrap()
                })
            })
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    if t0.elapsed() < MEMO_TTL / 2 {
        // All within the memo's time: one listing, shared.
        assert!(pages.iter().all(|p| Arc::ptr_eq(p, &pages[0])));
    }
    // Complete and exact: ".", "..", then every file with its own attributes.
    let (page, plus) = &*pages[0];
    assert_eq!(page.entries.len(), 202);
    assert!(page.eof);
    for (i, (e, p)) in page.entries.iter().zip(plus).skip(2).enumerate() {
        assert_eq!(e.name, format!("f{i:03}").into_bytes());
        let (node, a, fh) = p.as_ref().expect("attributes");
        assert_eq!(a.size, i as u64);
        assert_eq!(*fh, m.handle(node), "the page's handle is the entry's");
        assert_eq!(*a, m.getattr(node).unwrap());
        assert_eq!(e.cookie, entry_cookie(node.fileid));
    }
    for p in &pages {
        assert_eq!(**p, *pages[0], "every call got the same page");
    }
    // A create ends the sharing: the next call lists again, with the new file.
    m.create(&root, b"g", &new, o).unwrap();
    let after = m.readdir_plus(&root, 0, [0; 8], 300).unwrap();
    assert!(!Arc::ptr_eq(&after, &pages[0]));
    assert_eq!(after.0.entries.len(), 203);
    assert_eq!(after.0.entries[202].name, b"g");
}

/// The handle a listing hands out with a kept MAC (`HandleTable::local_handle`)
/// is the one `handles::encode` makes afresh, and stays so through what changes a
/// file id's generation or key: a remove and re-create of the name (same id, new
/// generation), a rename (the id under another key), another export's handle of the
/// same file.
#[test]
fn a_kept_handle_mac_is_the_freshly_encoded_one() {
    let (_mem, m, _d) = memory_model();
    let root = m.root(0).unwrap();
    let o = Owner { uid: 0, gid: 0 };
    let new = CreateMode::Guarded(SetAttr::default());
    let fresh = |n: &Node| {
        let (key, gen) = m.inner.table.get(n.fileid).expect("live");
        assert_eq!(key, n.key);
        handles::encode(&m.inner.mac_key, n.export, n.fileid, gen)
    };
    let listed = |name: &[u8]| {
        let shared = m.readdir_plus(&root, 0, [0; 8], 300).unwrap();
        let (page, plus) = &*shared;
        let i = page.entries.iter().position(|e| e.name == name).unwrap();
        plus[i].as_ref().unwrap().0.clone()
    };
    let a = m.create(&root, b"a", &new, o).unwrap();
    let first = m.handle(&a);
    assert_eq!(first.as_bytes(), fresh(&a)); // computed, then kept
    assert_eq!(m.handle(&a), first); // kept
    assert_eq!(m.handle(&listed(b"a")), first);
    // Another export's handle of the same file carries that export's MAC.
    let other = Node {
        export: 1,
        ..a.clone()
    };
    assert_eq!(m.handle(&other).as_bytes(), fresh(&other));
    assert_ne!(m.handle(&other), first);
    assert_eq!(m.handle(&a), first);
    // Removed and made again: the same id, a new generation, a new MAC.
    m.remove(&root, b"a").unwrap();
    let again = m.create(&root, b"a", &new, o).unwrap();
    assert_eq!(again.fileid, a.fileid);
    let h = m.handle(&listed(b"a"));
    assert_ne!(h, first, "an old handle never names the new file");
    assert_eq!(h.as_bytes(), fresh(&again));
    assert_eq!(m.handle(&again), h);
    // Renamed: the handle resolves under the new name, and is what encode gives.
    m.rename(&root, b"a", &root, b"b").unwrap();
    let b = m.lookup(&root, b"b").unwrap();
    let hb = m.handle(&listed(b"b"));
    assert_eq!(hb.as_bytes(), fresh(&b));
    assert_eq!(m.handle(&b), hb);
    // A node whose key is not its id's (stale) is not answered from the kept MAC.
    let stale = Node {
        key: "a".into(),
        ..b.clone()
    };
    assert_ne!(m.handle(&stale), hb);
}
