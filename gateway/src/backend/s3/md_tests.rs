//! Store requests on the metadata path, counted per backend (`requests::Tally`)
//! against a real S3 server (moto in CI; `live_tests`): each test fails if the round
//! trip it names comes back (docs/s3.md "Store requests per NFS operation").

use super::live_tests::live;
use super::requests::Req;
use super::*;
use crate::fs::{CreateMode, ExportRoot, FileKind, FileModel, Node, Owner, SetAttr};

/// A backend over a bucket of its own, and a second backend (another gateway) over
/// the same bucket; None without a test server.
fn pair(tag: &str) -> Option<(S3Backend, S3Backend)> {
    let bucket = format!("md{}-{tag}", std::process::id());
    Some((live(&bucket, "")?, live(&bucket, "")?))
}

fn meta(mode: &str) -> UserMeta {
    [("mode", mode), ("uid", "7"), ("gid", "8")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

const OWNER: Owner = Owner { uid: 7, gid: 8 };

/// A file model over `b` (the one export at the bucket's root), as the server runs
/// it; its state directory lives as long as the second value.
fn model(b: &Arc<S3Backend>) -> (FileModel, tempfile::TempDir) {
    let state = tempfile::tempdir().unwrap();
    let exports = [ExportRoot {
        id: 0,
        prefix: String::new(),
    }];
    let m = FileModel::open(b.clone(), state.path(), &exports).unwrap();
    (m, state)
}

/// Whether a fresh listing of `d` shows nothing but "." and "..", complete.
fn lists_only_dots(m: &FileModel, d: &Node) -> bool {
    let page = m.readdir(d, 0, [0; 8], 4096).unwrap();
    page.eof
        && page
            .entries
            .iter()
            .all(|e| e.name == b"." || e.name == b"..")
}

/// A MKDIR of `name` in `dir` through the model, then what the worker does before
/// the reply (`server::worker::learned_empty`): the new directory resolved from its
/// handle, its listing's start (`empty_start`) and its attributes.
fn mkdir_as_served(m: &FileModel, dir: &Node, name: &str) -> (Node, bool) {
    let d = m
        .mkdir(dir, name.as_bytes(), &SetAttr::default(), OWNER)
        .unwrap();
    let node = m.resolve(m.handle(&d).as_bytes()).unwrap();
    let empty = m.empty_start(&node).unwrap().is_some();
    assert_eq!(m.getattr(&node).unwrap().kind, FileKind::Dir);
    (d, empty)
}

/// Requests of each kind `f` sends through `b`.
fn sent<T>(b: &S3Backend, f: impl FnOnce() -> T) -> (T, [u64; 3]) {
    let kinds = [Req::Head, Req::List, Req::Put];
    let before = kinds.map(|k| b.core.tally.sent(k));
    let r = f();
    let after = kinds.map(|k| b.core.tally.sent(k));
    (r, [0, 1, 2].map(|i| after[i] - before[i]))
}

/// NFS CREATE then a FILE_SYNC WRITE and its reply's attributes: the create's PUT
/// and the write's upload, no HEAD (the stage opens over what the create put; the
/// upload leaves what it wrote).
#[test]
fn a_create_and_its_first_write_head_nothing() {
    let Some((b, _)) = pair("create") else {
        return;
    };
    let m = meta("100644");
    let ((), [heads, lists, puts]) = sent(&b, || {
        b.put("d/f", b"", &m, true).unwrap();
        b.write_at("d/f", 0, b"hello").unwrap();
        b.sync("d/f").unwrap();
        let h = b.head("d/f").unwrap();
        assert_eq!((h.size, &h.user), (5, &m));
    });
    assert_eq!((heads, lists, puts), (0, 0, 2));
    // Written by someone else (or cached from a HEAD): the stage reads it afresh.
    b.core.ra.known.changed("d/f");
    let ((), [heads, _, _]) = sent(&b, || b.write_at("d/f", 5, b"!").unwrap());
    assert_eq!(heads, 1);
    b.sync("d/f").unwrap();
    let mut back = [0u8; 8];
    assert_eq!(b.get_range("d/f", 0, &mut back).unwrap(), 6);
    assert_eq!(&back[..6], b"hello!");
}

/// CREATE of a new name: its look-up is one listing (`probe_absent`) and the
/// exclusive PUT after it needs no HEAD, also where the store ignores
/// `If-None-Match` (Garage; moto told so here). Before: HEAD `name`, HEAD `name/`,
/// LIST `name/` and, on such a store, a HEAD before the PUT.
#[test]
fn a_new_name_costs_one_listing_and_its_put() {
    let Some((b, _)) = pair("probe") else {
        return;
    };
    let taken = |r: BResult<ObjectMeta>| matches!(r, Err(BackendError::AlreadyExists));
    for honours in [true, false] {
        b.core
            .honours_if_none_match
            .store(honours, std::sync::atomic::Ordering::Relaxed);
        let key = format!("d/new-{honours}");
        let (absent, [heads, lists, puts]) = sent(&b, || {
            let absent = b.probe_absent(&key).unwrap();
            b.put(&key, b"", &meta("100644"), true).unwrap();
            absent
        });
        assert!(absent, "{key}");
        assert_eq!((heads, lists, puts), (0, 1, 1), "{key}");
        // There now: "perhaps", from the PUT's answer; a second create is refused.
        let (absent, [heads, lists, _]) = sent(&b, || b.probe_absent(&key).unwrap());
        assert_eq!((absent, heads, lists), (false, 0, 0), "{key}");
        assert!(taken(b.put(&key, b"", &meta("100600"), true)), "{key}");
        // Forgotten (as after the attribute cache's second): the listing shows it.
        b.forget_cached(&key);
        assert!(!b.probe_absent(&key).unwrap(), "{key}");
        assert!(taken(b.put(&key, b"", &meta("100600"), true)), "{key}");
    }
    // A LOOKUP of the name just before (HEAD name, HEAD name/, LIST name/: nothing):
    // the create's look-up asks nothing more.
    let key = "d/looked";
    for k in [key, "d/looked/"] {
        assert!(matches!(b.head(k), Err(BackendError::NotFound)));
    }
    assert!(b
        .list("d/looked/", None, None, 16)
        .unwrap()
        .objects
        .is_empty());
    let (absent, [heads, lists, _]) = sent(&b, || b.probe_absent(key).unwrap());
    assert_eq!((absent, heads, lists), (true, 0, 0));
    // What a listing of the name shows: a directory without a marker, a marker,
    // a file; names extending it that sort before `name/` do not hide it, and too
    // many of them (the page ends before `name/`) leave it "perhaps".
    let m = meta("100644");
    for k in [
        "e/implicit/x",
        "e/marked/",
        "e/file",
        "e/n.txt",
        "e/n-1",
        "e/n0",
    ] {
        b.put(k, b"", &m, false).unwrap();
    }
    for i in 0..20 {
        b.put(&format!("e/many-{i:02}"), b"", &m, false).unwrap();
    }
    for (name, absent) in [
        ("e/implicit", false),
        ("e/marked", false),
        ("e/file", false),
        ("e/n", true),
        ("e/many", false),
        ("e/none", true),
    ] {
        for k in [name.to_string(), format!("{name}/")] {
            b.forget_cached(&k);
        }
        let (got, [heads, lists, _]) = sent(&b, || b.probe_absent(name).unwrap());
        assert_eq!((got, heads, lists), (absent, 0, 1), "{name}");
    }
}

/// As `racing_exclusive_creates_of_one_key_create_it_once`, each create probing
/// the name first as CREATE does: the PUT that skips its HEAD after a probe must
/// still be the only one to succeed (a probe answered before another create's PUT
/// was answered is not believed: `Known::changed`). Without that, about one run in
/// three lets two of them through.
#[test]
fn racing_creates_after_their_probes_create_once() {
    let Some((b, _)) = pair("probe-race") else {
        return;
    };
    b.core
        .honours_if_none_match
        .store(false, std::sync::atomic::Ordering::Relaxed);
    for round in 0..12 {
        let key = format!("d/lock{round}");
        let results: Vec<BResult<ObjectMeta>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|i| {
                    let (b, key) = (&b, &key);
                    s.spawn(move || {
                        b.probe_absent(key)?;
                        b.put(key, b"", &meta(&format!("10064{i}")), true)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let won: Vec<usize> = (0..8).filter(|&i| results[i].is_ok()).collect();
        assert_eq!(won.len(), 1, "round {round}: {results:?}");
        b.core.ra.known.changed(&key);
        b.core.ra.invalidate(&key);
        let h = b.head(&key).unwrap();
        assert_eq!(h.user, meta(&format!("10064{}", won[0])));
    }
}

/// A note left by a probe whose operation then failed (a LINK refused after its
/// probe) is not the exclusive PUT's look later: another gateway creates the name
/// meanwhile, and a create through the first must refuse it, not replace it — on a
/// store that ignores `If-None-Match` (moto told so here), whether the create's probe
/// lists again or answers from a LOOKUP's cached answers. Fails if `put` believes
/// the old note (it would skip its HEAD and overwrite the other gateway's object).
#[test]
fn a_probe_left_by_a_failed_operation_does_not_spare_a_later_create_its_look() {
    let Some((a, other)) = pair("stale-probe") else {
        return;
    };
    a.core
        .honours_if_none_match
        .store(false, std::sync::atomic::Ordering::Relaxed);
    let taken = |r: BResult<ObjectMeta>| matches!(r, Err(BackendError::AlreadyExists));
    for lookup in [false, true] {
        let key = format!("d/late-{lookup}");
        // The failed operation's probe: absent, noted.
        assert!(a.probe_absent(&key).unwrap());
        if lookup {
            // The client's LOOKUP of the name, also before the other gateway's create.
            for k in [key.clone(), format!("{key}/")] {
                assert!(matches!(a.head(&k), Err(BackendError::NotFound)));
            }
            assert!(a
                .list(&format!("{key}/"), None, None, 16)
                .unwrap()
                .objects
                .is_empty());
        }
        other.put(&key, b"theirs", &meta("100644"), true).unwrap();
        // The create: after a LOOKUP its probe answers from the cached look-up (as
        // before the probe existed), so the PUT must look at the store itself.
        let absent = a.probe_absent(&key).unwrap();
        assert_eq!(absent, lookup, "{key}");
        assert!(taken(a.put(&key, b"", &meta("100600"), true)), "{key}");
        a.forget_cached(&key);
        assert_eq!(a.head(&key).unwrap().user, meta("100644"), "{key}");
    }
}

/// LOOKUP then CREATE of a new name both list `name/` (a directory without a
/// marker): the second listing is the first's answer; a key created below the
/// prefix ends that at once.
#[test]
fn an_empty_prefix_is_listed_once() {
    let Some((b, _)) = pair("empty") else {
        return;
    };
    let list = || b.list("d/n/", None, None, 16).unwrap();
    let (p, [_, lists, _]) = sent(&b, || (list(), list()));
    assert!(p.0.objects.is_empty() && p.1.objects.is_empty());
    assert_eq!(lists, 1);
    b.put("d/n/x", b"1", &UserMeta::new(), false).unwrap();
    let (p, [_, lists, _]) = sent(&b, list);
    assert_eq!((p.objects.len(), lists), (1, 1));
    // Listings with a delimiter or a start (directory pages, RMDIR's check) are
    // always sent.
    let ((), [_, lists, _]) = sent(&b, || {
        b.list("d/e/", Some('/'), None, 16).unwrap();
        b.list("d/e/", Some('/'), None, 16).unwrap();
    });
    assert_eq!(lists, 2);
}

/// READDIRPLUS: the page's LIST carries the attributes of what this gateway wrote
/// (no HEAD per entry); an object whose metadata another gateway changed is read
/// with a HEAD, and shows that gateway's metadata.
#[test]
fn a_listing_completes_what_this_gateway_wrote() {
    let Some((b, other)) = pair("plus") else {
        return;
    };
    let names: Vec<String> = (0..5).map(|i| format!("d/f{i}")).collect();
    for n in &names {
        b.put(n, b"abc", &meta("100640"), true).unwrap();
    }
    // Past the attribute cache's life, and past the PUTs' second.
    std::thread::sleep(readahead::ATTR_TTL + Duration::from_millis(1100));
    other.set_meta("d/f4", &meta("100600")).unwrap();
    let (page, [heads, lists, _]) = sent(&b, || b.list("d/", Some('/'), None, 100).unwrap());
    assert_eq!((heads, lists, page.objects.len()), (0, 1, 5));
    for o in &page.objects[..4] {
        assert_eq!(o.user, meta("100640"), "{}", o.key);
    }
    assert!(
        page.objects[4].user.is_empty(),
        "changed behind us: not completed"
    );
    let (attrs, [heads, _, _]) = sent(&b, || {
        b.warm(&names);
        names.iter().map(|n| b.head(n).unwrap()).collect::<Vec<_>>()
    });
    assert_eq!(heads, 1, "one HEAD: the object another gateway changed");
    assert_eq!(attrs[0].user, meta("100640"));
    assert_eq!(attrs[4].user, meta("100600"));
    assert_eq!(
        attrs[0].mtime_ns % 1_000_000_000,
        0,
        "whole seconds, as a HEAD gives"
    );
}

/// On a store that ignores `If-None-Match` (Garage; here moto told it does not
/// honour it), exclusive creates of one key racing in this gateway: exactly one
/// succeeds, the others find the key taken (`exclusive.rs`), and the object is the
/// winner's. Without the per-key claim all of them looked before any put.
#[test]
fn racing_exclusive_creates_of_one_key_create_it_once() {
    let Some((b, _)) = pair("excl") else {
        return;
    };
    b.core
        .honours_if_none_match
        .store(false, std::sync::atomic::Ordering::Relaxed);
    for round in 0..3 {
        let key = format!("d/lock{round}");
        let results: Vec<BResult<ObjectMeta>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|i| {
                    let (b, key) = (&b, &key);
                    s.spawn(move || b.put(key, b"", &meta(&format!("10064{i}")), true))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let won: Vec<usize> = (0..8).filter(|&i| results[i].is_ok()).collect();
        assert_eq!(won.len(), 1, "round {round}: {results:?}");
        for r in &results {
            assert!(
                matches!(r, Ok(_) | Err(BackendError::AlreadyExists)),
                "{r:?}"
            );
        }
        b.core.ra.known.changed(&key);
        let h = b.head(&key).unwrap();
        assert_eq!(h.user, meta(&format!("10064{}", won[0])));
    }
}

/// Renames of one source racing in this gateway (copy + delete): exactly one
/// succeeds, the others find it gone, and the file is at one name only — of a file
/// and of a directory (`exclusive.rs`). Without the claim every rename copied the
/// source before any deleted it.
#[test]
fn racing_renames_of_one_source_move_it_once() {
    let Some((b, _)) = pair("mv") else {
        return;
    };
    for (src, dir) in [("r/job", false), ("r/dir/", true)] {
        b.put(src, b"", &meta("100644"), false).unwrap();
        if dir {
            b.put("r/dir/inner", b"data", &meta("100644"), false)
                .unwrap();
        }
        let to = |i: usize| match dir {
            false => format!("r/claimed{i}"),
            true => format!("r/moved{i}/"),
        };
        let results: Vec<BResult<()>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|i| {
                    let (b, to) = (&b, to(i));
                    s.spawn(move || b.rename(src, &to))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let won: Vec<usize> = (0..8).filter(|&i| results[i].is_ok()).collect();
        assert_eq!(won.len(), 1, "{src}: {results:?}");
        for r in &results {
            assert!(matches!(r, Ok(()) | Err(BackendError::NotFound)), "{r:?}");
        }
        for i in 0..8 {
            let key = to(i);
            b.core.ra.known.changed(&key);
            let there = b.list(&key, None, None, 4).unwrap().objects.len();
            assert_eq!(there > 0, i == won[0], "{key}: {there} keys");
        }
    }
}

/// MKDIR as the server runs it (`mkdir_as_served`): the new name's probe and the
/// marker's PUT, nothing more — also where the store ignores `If-None-Match`
/// (Garage; moto told so here), where the probe is the PUT's look. The directory
/// is seen empty from the probe (`Known::making_dir`); before, `empty_start` listed
/// `name/` again (`Backend::dir_is_empty` was `None` on S3): 2 LIST, 1 PUT.
#[test]
fn a_mkdir_costs_its_probe_and_its_marker() {
    let Some((b, _)) = pair("mkdir") else {
        return;
    };
    let b = Arc::new(b);
    let (m, _state) = model(&b);
    let root = m.root(0).unwrap();
    let p = m.mkdir(&root, b"p", &SetAttr::default(), OWNER).unwrap();
    for honours in [true, false] {
        b.core
            .honours_if_none_match
            .store(honours, std::sync::atomic::Ordering::Relaxed);
        let name = format!("d-{honours}");
        let ((d, empty), [heads, lists, puts]) = sent(&b, || mkdir_as_served(&m, &p, &name));
        assert!(empty, "{name}");
        assert_eq!((heads, lists, puts), (0, 1, 1), "{name}");
        // The listing agrees.
        assert!(lists_only_dots(&m, &d), "{name}");
    }
}

/// A name this gateway makes in a new directory before the question after the
/// MKDIR (a client's CREATE racing the MKDIR's reply; a subdirectory; a rename
/// into it) ends its note: the question lists, and the listing shows the name. Also
/// when the marker's PUT fails after the probe (another gateway made the directory
/// in between): nothing is known of it. Fails if `Known::changed` leaves the note of
/// a directory above the key, or a failed PUT leaves it (`Known::not_made`).
#[test]
fn a_name_made_in_a_new_directory_is_listed_by_its_question() {
    let Some((b, other)) = pair("mkdir-made") else {
        return;
    };
    let b = Arc::new(b);
    let (m, _state) = model(&b);
    let root = m.root(0).unwrap();
    let guarded = CreateMode::Guarded(SetAttr::default());
    for how in ["create", "mkdir", "rename"] {
        let d = m
            .mkdir(
                &root,
                format!("d-{how}").as_bytes(),
                &SetAttr::default(),
                OWNER,
            )
            .unwrap();
        match how {
            "create" => {
                m.create(&d, b"x", &guarded, OWNER).unwrap();
            }
            "mkdir" => {
                m.mkdir(&d, b"x", &SetAttr::default(), OWNER).unwrap();
            }
            _ => {
                let f = format!("f-{how}");
                m.create(&root, f.as_bytes(), &guarded, OWNER).unwrap();
                m.rename(&root, f.as_bytes(), &d, b"x").unwrap();
            }
        }
        let (start, [_, lists, _]) = sent(&b, || m.empty_start(&d).unwrap());
        assert!(start.is_none(), "{how}: holds x");
        assert!(lists > 0, "{how}: listed");
    }
    b.core
        .honours_if_none_match
        .store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(b.probe_absent("race").unwrap());
    other.put("race/", b"", &meta("40755"), true).unwrap();
    other
        .put("race/theirs", b"", &meta("100644"), true)
        .unwrap();
    assert!(matches!(
        b.put("race/", b"", &meta("40755"), true),
        Err(BackendError::AlreadyExists)
    ));
    assert!(b.dir_is_empty("race/").is_none());
}

/// An object another gateway (or S3 tool) puts in a directory this one just made is
/// hidden from the question after the MKDIR no longer than `ATTR_TTL` from the
/// probe, as any note of `known.rs` (docs/s3.md): past it, the question lists and
/// sees it. Fails if the note does not expire.
#[test]
fn a_key_another_gateway_puts_in_a_new_directory_is_seen_past_the_ttl() {
    let Some((b, other)) = pair("mkdir-other") else {
        return;
    };
    let b = Arc::new(b);
    let (m, _state) = model(&b);
    let root = m.root(0).unwrap();
    let d = m.mkdir(&root, b"d", &SetAttr::default(), OWNER).unwrap();
    other.put("d/theirs", b"x", &meta("100644"), true).unwrap();
    std::thread::sleep(readahead::ATTR_TTL);
    let (start, [_, lists, _]) = sent(&b, || m.empty_start(&d).unwrap());
    assert!(start.is_none(), "another gateway's object is in it");
    assert!(lists > 0, "listed");
}

/// A directory page that ends on the directory's own marker (a listing of one entry,
/// as `empty_start` asks when the store cannot tell) resumes with what is under it.
/// Before, the resumed listing took the marker for a rolled-up prefix and skipped
/// everything below it: a directory with a marker listed empty after its first page.
#[test]
fn a_listing_resumed_after_the_marker_shows_what_is_under_it() {
    let Some((b, _)) = pair("resume") else {
        return;
    };
    for k in ["m/", "m/a", "m/s/x"] {
        b.put(k, b"", &meta("100644"), false).unwrap();
    }
    let first = b.list("m/", Some('/'), None, 1).unwrap();
    let keys = |p: &ListPage| -> Vec<String> {
        let o = p.objects.iter().map(|o| o.key.clone());
        o.chain(p.prefixes.iter().cloned()).collect()
    };
    assert_eq!(keys(&first), ["m/"]);
    assert_eq!(first.next.as_deref(), Some("m/"));
    let rest = b.list("m/", Some('/'), Some("m/"), 16).unwrap();
    assert_eq!(keys(&rest), ["m/a", "m/s/"]);
    // After a rolled-up prefix, still nothing under it again.
    let after = b.list("m/", Some('/'), Some("m/a"), 16).unwrap();
    assert_eq!(keys(&after), ["m/s/"]);
    let none = b.list("m/", Some('/'), Some("m/s/"), 16).unwrap();
    assert!(keys(&none).is_empty());
}

/// MKDIR after the client's LOOKUP of the new name (what `mkdir` on Linux does): the
/// LOOKUP lists `name/` and finds nothing; the MKDIR's probe answers from that
/// (`probe_absent_at_store`, no note of its own), and the question after it from the
/// LOOKUP's listing (`Known::making_dir`). MKDIR and question: the marker's PUT only,
/// plus the HEAD before it where the store ignores `If-None-Match` (the look-up's
/// cached answers are not the PUT's look: `put`). Before, the question listed
/// `name/` again. Fails if `making_dir` reads the probe's note only.
#[test]
fn a_mkdir_after_a_lookup_of_its_name_lists_nothing_more() {
    let Some((b, _)) = pair("mkdir-looked") else {
        return;
    };
    let b = Arc::new(b);
    let (m, _state) = model(&b);
    let root = m.root(0).unwrap();
    let p = m.mkdir(&root, b"p", &SetAttr::default(), OWNER).unwrap();
    for honours in [true, false] {
        b.core
            .honours_if_none_match
            .store(honours, std::sync::atomic::Ordering::Relaxed);
        let name = format!("d-{honours}");
        let (looked, [heads, lists, puts]) = sent(&b, || m.lookup(&p, name.as_bytes()));
        assert_eq!(looked.err(), Some(crate::fs::Status::NoEnt), "{name}");
        assert_eq!((heads, lists, puts), (2, 1, 0), "{name}: the LOOKUP");
        let ((d, empty), [heads, lists, puts]) = sent(&b, || mkdir_as_served(&m, &p, &name));
        assert!(empty, "{name}");
        assert_eq!((heads, lists, puts), (u64::from(!honours), 0, 1), "{name}");
        assert!(lists_only_dots(&m, &d), "{name}");
    }
}

/// On a store that ignores `If-None-Match` (moto told so here), the HEAD before the
/// marker's PUT finds the marker another gateway made after this one's LOOKUP and
/// probe (which answered from the LOOKUP's cached answers, so the PUT looks): the
/// MKDIR is refused and the note `making_dir` took from the LOOKUP's listing is
/// gone. Fails if the HEAD's refusal leaves it (`Known::not_made` in `put`): the
/// question would answer "empty" of a directory this gateway did not make.
#[test]
fn a_marker_the_head_finds_leaves_no_bare_note() {
    let Some((b, other)) = pair("mkdir-head") else {
        return;
    };
    b.core
        .honours_if_none_match
        .store(false, std::sync::atomic::Ordering::Relaxed);
    for k in ["t", "t/"] {
        assert!(matches!(b.head(k), Err(BackendError::NotFound)));
    }
    assert!(b.list("t/", None, None, 16).unwrap().objects.is_empty());
    assert!(b.probe_absent("t").unwrap());
    other.put("t/", b"", &meta("40755"), true).unwrap();
    let (r, [heads, _, puts]) = sent(&b, || b.put("t/", b"", &meta("40755"), true));
    assert!(matches!(r, Err(BackendError::AlreadyExists)));
    assert_eq!((heads, puts), (1, 0), "refused by the HEAD");
    assert!(b.dir_is_empty("t/").is_none());
}

/// A root listing of a backend with a bucket prefix, where an object sits at exactly
/// that prefix (an S3 console "Create folder"): the object is hidden, and a page of
/// one entry that held only it goes on with what is under it. Before, the listing
/// resumed after everything under the prefix: the export root looked empty.
#[test]
fn an_object_at_the_bucket_prefix_does_not_hide_the_root() {
    let bucket = format!("md{}-folder", std::process::id());
    let Some(whole) = live(&bucket, "") else {
        return;
    };
    let b = live(&bucket, "exp/").unwrap();
    for k in ["exp/", "exp/a", "exp/s/x"] {
        whole.put(k, b"", &meta("100644"), false).unwrap();
    }
    let keys = |p: &ListPage| -> Vec<String> {
        let o = p.objects.iter().map(|o| o.key.clone());
        o.chain(p.prefixes.iter().cloned()).collect()
    };
    let first = b.list("", Some('/'), None, 1).unwrap();
    assert_eq!(keys(&first), ["a"]);
    assert_eq!(first.next.as_deref(), Some("a"));
    let rest = b.list("", Some('/'), Some("a"), 1).unwrap();
    assert_eq!(keys(&rest), ["s/"]);
    let all = b.list("", Some('/'), None, 16).unwrap();
    assert_eq!(
        (keys(&all), all.next),
        (vec!["a".to_string(), "s/".into()], None)
    );
}
