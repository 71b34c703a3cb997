//! Unit tests of the reactor's listings (`cache_dirs.rs`): what a worker's pages
//! teach, which changes end a run, and which cookies and verifiers it answers.

use super::*;
use crate::cache::Request;
use crate::config::{Access, Cidr, Export, Squash};
use crate::fs::NfsTime;
use engine::rpc::{AuthSys, Cred};

const DIR: u64 = 7;
const VERF: [u8; 8] = *b"verifier";

fn exports() -> Exports {
    Exports::new(vec![Export {
        id: 0,
        path: "/".into(),
        prefix: String::new(),
        clients: vec![Cidr::parse("127.0.0.0/8").unwrap()],
        access: Access::Rw,
        squash: Squash::None,
        anon_uid: 65534,
        anon_gid: 65534,
    }])
}

fn attr(kind: FileKind, fileid: u64, mode: u32) -> Attr {
    Attr {
        kind,
        mode,
        nlink: 1,
        uid: 0,
        gid: 0,
        size: 10,
        used: 10,
        rdev: (0, 0),
        fsid: 1,
        fileid,
        atime: NfsTime::default(),
        mtime: NfsTime { sec: 5, nsec: 0 },
        ctime: NfsTime { sec: 5, nsec: 0 },
        change: 5,
    }
}

fn dir_attr(mode: u32) -> Attr {
    attr(FileKind::Dir, DIR, mode)
}

fn fh() -> FhKey {
    FhKey::new(b"dir-handle").unwrap()
}

/// Entries with file ids (and cookies) `ids`.
fn entries(ids: std::ops::Range<u64>) -> Vec<ListedEntry> {
    ids.map(|id| ListedEntry {
        name: format!("f{id}").into_bytes().into_boxed_slice(),
        fileid: id,
        cookie: id,
        plus: Some((
            attr(FileKind::Reg, id, 0o644),
            FileHandle {
                len: 8,
                bytes: [1; crate::fs::FH_MAX],
            },
        )),
    })
    .collect()
}

fn page(cookie: u64, ids: std::ops::Range<u64>, eof: bool) -> ListedPage {
    ListedPage {
        cookie,
        verf: VERF,
        entries: entries(ids),
        eof,
        v4: false,
        exports_gen: 0,
        at: Instant::now(),
        names: None,
    }
}

fn fill(l: &mut Listings, gens: &Generations, p: ListedPage) {
    let changes = gens.changes();
    l.fill(
        gens,
        fh(),
        0,
        &dir_attr(0o755),
        ListingFill { changes, page: p },
    );
}

/// The cookies the run answers from `cookie` with uid `uid` (`None`: a miss), and
/// whether they end the directory.
fn ask(
    l: &mut Listings,
    gens: &Generations,
    cookie: u64,
    verf: [u8; 8],
    uid: u32,
) -> Option<(Vec<u64>, bool)> {
    ask_with(l, gens, cookie, verf, uid, &no_table)
}

/// An attribute table that knows nothing.
fn no_table(_: &[u8], _: bool) -> Option<(Attr, Stamp, bool)> {
    None
}

/// An attribute table: an entry's attributes by handle, with their stamp.
type Table = dyn Fn(&[u8], bool) -> Option<(Attr, Stamp, bool)>;

/// `ask` with an attribute table (`Listings::lookup`'s `attrs`).
fn ask_with(
    l: &mut Listings,
    gens: &Generations,
    cookie: u64,
    verf: [u8; 8],
    uid: u32,
    table: &Table,
) -> Option<(Vec<u64>, bool)> {
    let cred = Cred::Sys(AuthSys::new(uid, uid, &[]));
    let exports = exports();
    let req = Request {
        fh: b"dir-handle",
        client: "127.0.0.1".parse().unwrap(),
        cred: &cred,
    };
    let hit = l.lookup(
        gens,
        &exports,
        &req,
        (cookie, verf, usize::MAX),
        true,
        table,
    )?;
    if !Listings::current(gens, hit.entries) {
        return None;
    }
    Some((hit.entries.iter().map(|(e, _)| e.cookie).collect(), hit.eof))
}

#[test]
fn pages_chain_into_one_run_from_any_cookie() {
    let (mut l, gens) = (Listings::default(), Generations::new());
    fill(&mut l, &gens, page(0, 10..20, false));
    assert_eq!(
        ask(&mut l, &gens, 0, [0; 8], 0),
        Some(((10..20).collect(), false))
    );
    // The next page resumes after the last entry: appended.
    fill(&mut l, &gens, page(19, 20..25, true));
    assert_eq!(
        ask(&mut l, &gens, 0, [0; 8], 0),
        Some(((10..25).collect(), true))
    );
    // Any entry's cookie resumes, with the directory's verifier or zero.
    assert_eq!(
        ask(&mut l, &gens, 14, VERF, 0),
        Some(((15..25).collect(), true))
    );
    assert_eq!(ask(&mut l, &gens, 24, [0; 8], 0), Some((vec![], true)));
    // A page resuming inside the whole run with the run's own entries refreshes
    // them and leaves the run whole (`extend`).
    fill(&mut l, &gens, page(12, 13..15, false));
    assert_eq!(
        ask(&mut l, &gens, 0, [0; 8], 0),
        Some(((10..25).collect(), true))
    );
    // One with other entries replaces its tail.
    fill(&mut l, &gens, page(12, 30..32, false));
    assert_eq!(
        ask(&mut l, &gens, 0, [0; 8], 0),
        Some((vec![10, 11, 12, 30, 31], false))
    );
    assert_eq!(l.len(), 5);
}

#[test]
fn unknown_cookies_and_foreign_verifiers_are_the_workers() {
    let (mut l, gens) = (Listings::default(), Generations::new());
    fill(&mut l, &gens, page(0, 10..20, true));
    // Forged or stale: not an entry of the run (the worker answers BAD_COOKIE).
    assert_eq!(ask(&mut l, &gens, 9, VERF, 0), None);
    assert_eq!(ask(&mut l, &gens, u64::MAX, VERF, 0), None);
    // A verifier this directory never gave.
    assert_eq!(ask(&mut l, &gens, 12, *b"otherdir", 0), None);
    // A page resuming at a cookie the run does not hold teaches nothing.
    fill(&mut l, &gens, page(99, 100..110, true));
    assert_eq!(ask(&mut l, &gens, 105, VERF, 0), None);
    // Nor does a page with another verifier.
    let mut p = page(19, 20..22, true);
    p.verf = *b"otherdir";
    fill(&mut l, &gens, p);
    assert_eq!(
        ask(&mut l, &gens, 0, [0; 8], 0),
        Some(((10..20).collect(), true))
    );
}

#[test]
fn a_change_in_the_directory_ends_the_run() {
    let (mut l, gens) = (Listings::default(), Generations::new());
    fill(&mut l, &gens, page(0, 10..20, true));
    // A create, remove or rename in it bumps the directory (either protocol).
    gens.bump_file(DIR);
    assert_eq!(ask(&mut l, &gens, 0, [0; 8], 0), None);
    assert_eq!(ask(&mut l, &gens, 12, VERF, 0), None);
    // The epoch ends every run.
    let (mut l, gens) = (Listings::default(), Generations::new());
    fill(&mut l, &gens, page(0, 10..20, true));
    gens.bump_all();
    assert_eq!(ask(&mut l, &gens, 0, [0; 8], 0), None);
}

#[test]
fn an_entry_changed_since_it_was_listed_is_never_shown() {
    let (mut l, gens) = (Listings::default(), Generations::new());
    fill(&mut l, &gens, page(0, 10..20, true));
    // A WRITE or SETATTR of entry 15 bumps it: a hit ends before it (a reply that
    // shows it misses), and one that starts at it holds nothing.
    gens.bump_file(15);
    assert_eq!(
        ask(&mut l, &gens, 0, [0; 8], 0),
        Some(((10..15).collect(), false))
    );
    assert_eq!(ask(&mut l, &gens, 14, VERF, 0), Some((vec![], false)));
    // One that starts after it does not show it.
    assert_eq!(
        ask(&mut l, &gens, 15, VERF, 0),
        Some(((16..20).collect(), true))
    );
}

#[test]
fn a_page_listed_while_anything_changed_is_not_kept() {
    let (mut l, gens) = (Listings::default(), Generations::new());
    // The worker read the counter, then some file changed while it listed.
    let changes = gens.changes();
    gens.bump_file(12);
    gens.bump_file(12);
    l.fill(
        &gens,
        fh(),
        0,
        &dir_attr(0o755),
        ListingFill {
            changes,
            page: page(0, 10..20, true),
        },
    );
    assert_eq!(ask(&mut l, &gens, 0, [0; 8], 0), None);
    assert_eq!(l.len(), 0);
}

#[test]
fn access_is_checked_on_every_hit() {
    let (mut l, gens) = (Listings::default(), Generations::new());
    let changes = gens.changes();
    // A directory only its owner (root) may read.
    l.fill(
        &gens,
        fh(),
        0,
        &dir_attr(0o700),
        ListingFill {
            changes,
            page: page(0, 10..20, true),
        },
    );
    assert!(ask(&mut l, &gens, 0, [0; 8], 0).is_some());
    assert_eq!(ask(&mut l, &gens, 0, [0; 8], 1000), None);
    // A handle of another export than the run's is another key: never a hit.
    let cred = Cred::Sys(AuthSys::new(0, 0, &[]));
    let exports = exports();
    let req = Request {
        fh: b"dir-handle-2",
        client: "127.0.0.1".parse().unwrap(),
        cred: &cred,
    };
    assert!(l
        .lookup(
            &gens,
            &exports,
            &req,
            (0, [0; 8], usize::MAX),
            true,
            no_table
        )
        .is_none());
    // A client outside the export's networks.
    let req = Request {
        fh: b"dir-handle",
        client: "10.0.0.1".parse().unwrap(),
        cred: &cred,
    };
    assert!(l
        .lookup(
            &gens,
            &exports,
            &req,
            (0, [0; 8], usize::MAX),
            true,
            no_table
        )
        .is_none());
}

#[test]
fn runs_are_bounded() {
    let (mut l, gens) = (Listings::default(), Generations::new());
    // One directory longer than a run holds: the run stops short of eof.
    fill(&mut l, &gens, page(0, 10..10 + RUN_MAX as u64 + 5, true));
    let (got, eof) = ask(&mut l, &gens, 0, [0; 8], 0).unwrap();
    assert_eq!((got.len(), eof), (RUN_MAX, false));
    // Many directories: the oldest go.
    for d in 0..(2 * MAX_ENTRIES / 1000) as u64 {
        let key = FhKey::new(format!("dir-{d}").as_bytes()).unwrap();
        let changes = gens.changes();
        l.fill(
            &gens,
            key,
            0,
            &dir_attr(0o755),
            ListingFill {
                changes,
                page: page(0, 10..1010, true),
            },
        );
        assert!(l.len() <= MAX_ENTRIES);
    }
    assert_eq!(ask(&mut l, &gens, 0, [0; 8], 0), None);
}

#[test]
fn runs_expire_so_changes_behind_the_gateway_are_seen() {
    let (mut l, gens) = (Listings::default(), Generations::new());
    fill(&mut l, &gens, page(0, 10..20, false));
    // Past ATTR_TTL and the STALE_MAX a revalidation has.
    let old = Instant::now() - ATTR_TTL - STALE_MAX;
    l.runs.get_mut(&fh()).unwrap().at = old;
    assert_eq!(ask(&mut l, &gens, 0, [0; 8], 0), None);
    // Nor does an expired run grow.
    fill(&mut l, &gens, page(19, 20..25, true));
    assert_eq!(l.runs[&fh()].entries.len(), 10);
}

/// A page the workers shared from their memo can be nearly `ATTR_TTL` old when it is
/// noted: a run answers for `ATTR_TTL` from when the page's listing read the
/// directory, not from when it was noted (a change made behind the gateway's back
/// shows within `ATTR_TTL` of the listing that missed it). Also a page extending
/// a run: the run is then as old as its older page.
#[test]
fn a_run_is_as_old_as_the_listing_its_pages_came_from() {
    let (mut l, gens) = (Listings::default(), Generations::new());
    // Past ATTR_TTL and the STALE_MAX a revalidation has.
    let listed = Instant::now() - ATTR_TTL - STALE_MAX;
    fill(
        &mut l,
        &gens,
        ListedPage {
            at: listed,
            ..page(0, 10..20, false)
        },
    );
    assert_eq!(
        ask(&mut l, &gens, 0, [0; 8], 0),
        None,
        "listed ATTR_TTL + STALE_MAX ago"
    );
    let (mut l, gens) = (Listings::default(), Generations::new());
    fill(&mut l, &gens, page(0, 10..20, false));
    assert!(ask(&mut l, &gens, 0, [0; 8], 0).is_some(), "listed now");
    fill(
        &mut l,
        &gens,
        ListedPage {
            at: listed,
            ..page(19, 20..25, true)
        },
    );
    assert_eq!(
        ask(&mut l, &gens, 0, [0; 8], 0),
        None,
        "extended by an old page"
    );
}

/// A run answers NFSv4.1 only while every page of it was NFSv4.1's, which checked
/// its entries for other exports' roots (`ListedPage::v4`).
#[test]
fn only_nfs41_pages_answer_nfs41() {
    let gens = Generations::new();
    let mut l = Listings::default();
    let v4 = |p: ListedPage| ListedPage { v4: true, ..p };
    fill(&mut l, &gens, v4(page(0, 100..110, false)));
    let (cred, exports) = (Cred::Sys(AuthSys::new(0, 0, &[])), exports());
    let r = Request {
        fh: b"dir-handle",
        client: "127.0.0.1".parse().unwrap(),
        cred: &cred,
    };
    let hit = |l: &mut Listings| {
        l.lookup(&gens, &exports, &r, (0, [0; 8], usize::MAX), true, no_table)
            .map(|h| h.v4)
    };
    assert_eq!(hit(&mut l), Some(true));
    // A NFSv3 page resuming inside it: the run is no longer NFSv4.1's.
    fill(&mut l, &gens, page(109, 110..120, true));
    assert_eq!(hit(&mut l), Some(false));
    fill(&mut l, &gens, page(0, 100..110, true));
    assert_eq!(hit(&mut l), Some(false));
}

/// NFSv4.1 pages were checked for other exports' roots under one export table: a
/// reload (which may add an export whose root is one of the entries, RFC 8881 §7.7)
/// ends the run's NFSv4.1 answers, as do pages checked under different tables.
#[test]
fn a_reload_of_the_exports_ends_nfs41_answers_of_pages_checked_before() {
    let gens = Generations::new();
    let mut l = Listings::default();
    let table = crate::export::ExportTable::new(exports());
    let v4 = |p: ListedPage, g: u64| ListedPage {
        v4: true,
        exports_gen: g,
        ..p
    };
    let cred = Cred::Sys(AuthSys::new(0, 0, &[]));
    let r = Request {
        fh: b"dir-handle",
        client: "127.0.0.1".parse().unwrap(),
        cred: &cred,
    };
    let hit = |l: &mut Listings, ex: &Exports| {
        l.lookup(&gens, ex, &r, (0, [0; 8], usize::MAX), true, no_table)
            .map(|h| h.v4)
    };
    let before = table.load();
    fill(&mut l, &gens, v4(page(0, 100..110, true), before.gen()));
    assert_eq!(hit(&mut l, &before), Some(true));
    table.publish(exports());
    let after = table.load();
    assert_ne!(after.gen(), before.gen());
    assert_eq!(
        hit(&mut l, &after),
        Some(false),
        "checked under the old table"
    );
    // Listed again under the new table: NFSv4.1's again.
    fill(&mut l, &gens, v4(page(0, 100..110, false), after.gen()));
    assert_eq!(hit(&mut l, &after), Some(true));
    // A page checked under another table joins it: not NFSv4.1's.
    fill(&mut l, &gens, v4(page(109, 110..120, true), before.gen()));
    assert_eq!(hit(&mut l, &after), Some(false));
}

// ---- runs the gateway's own creates keep complete (`start_empty`, `made`) ----------

const PARENT: u64 = 3;

fn handle(id: u64) -> FileHandle {
    let name = format!("h{id}");
    let mut bytes = [0; crate::fs::FH_MAX];
    bytes[..name.len()].copy_from_slice(name.as_bytes());
    FileHandle {
        len: name.len() as u8,
        bytes,
    }
}

/// The run of a directory a MKDIR just made, under its stamp now.
fn empty(l: &mut Listings, gens: &Generations) {
    let e = EmptyFill {
        verf: VERF,
        dot: FileHandle {
            len: 10,
            bytes: {
                let mut b = [0; crate::fs::FH_MAX];
                b[..10].copy_from_slice(b"dir-handle");
                b
            },
        },
        parent: (PARENT, handle(PARENT)),
    };
    l.start_empty(fh(), 0, &dir_attr(0o755), gens.stamp(DIR), e);
}

/// A create of `name` (file id `id`, a directory when `dir`) as a worker runs it:
/// the directory's stamp read, the model's two reports; the fill to apply later.
fn create(gens: &Generations, name: &str, id: u64, dir: bool) -> (String, Made) {
    let before = gens.stamp(DIR);
    gens.bump_file(DIR);
    gens.bump_file(DIR);
    let kind = if dir { FileKind::Dir } else { FileKind::Reg };
    let m = Made {
        before,
        attr: attr(kind, id, 0o644),
        fh: handle(id),
    };
    (name.to_string(), m)
}

fn apply(l: &mut Listings, (name, m): &(String, Made)) {
    l.made(&fh(), name.as_bytes(), m);
}

/// An attribute table holding, under their stamps now, the directory's attributes
/// and those of files `ids` (size = id), as an NFSv3 reply taught them (not exact).
fn table(gens: &Generations, ids: &[u64]) -> impl Fn(&[u8], bool) -> Option<(Attr, Stamp, bool)> {
    table_as(gens, ids, false)
}

/// `table` with the files' attributes the model's own (`exact`: an NFSv4.1 worker's).
fn table_as(
    gens: &Generations,
    ids: &[u64],
    exact: bool,
) -> impl Fn(&[u8], bool) -> Option<(Attr, Stamp, bool)> {
    let mut t: HashMap<Vec<u8>, (Attr, Stamp, bool)> = HashMap::default();
    t.insert(
        b"dir-handle".to_vec(),
        (dir_attr(0o755), gens.stamp(DIR), true),
    );
    for &id in ids {
        let mut a = attr(FileKind::Reg, id, 0o644);
        a.size = id;
        t.insert(handle(id).as_bytes().to_vec(), (a, gens.stamp(id), exact));
    }
    move |fh: &[u8], _: bool| t.get(fh).copied()
}

#[test]
fn a_new_directory_lists_its_creates_in_key_order_with_the_models_cookies() {
    let (mut l, gens) = (Listings::default(), Generations::new());
    empty(&mut l, &gens);
    // Empty: "." and ".." (cookies 1 and 2) and the end.
    assert_eq!(ask(&mut l, &gens, 0, [0; 8], 0), Some((vec![1, 2], true)));
    // "a" is a directory, so its key "a/" sorts after the file "a-b" ('-' < '/').
    for c in [
        create(&gens, "b", 40, false),
        create(&gens, "a", 41, true),
        create(&gens, "a-b", 2, false),
    ] {
        apply(&mut l, &c);
    }
    let t = table(&gens, &[40, 41, 2]);
    // Cookie = file id, never below 3 (`listing::entry_cookie`).
    let want = vec![1, 2, 3, 41, 40];
    assert_eq!(
        ask_with(&mut l, &gens, 0, [0; 8], 0, &t),
        Some((want, true))
    );
    let cred = Cred::Sys(AuthSys::new(0, 0, &[]));
    let req = Request {
        fh: b"dir-handle",
        client: "127.0.0.1".parse().unwrap(),
        cred: &cred,
    };
    let hit = l
        .lookup(&gens, &exports(), &req, (0, [0; 8], usize::MAX), true, &t)
        .unwrap();
    let names: Vec<&[u8]> = hit.entries.iter().map(|(e, _)| &*e.name).collect();
    assert_eq!(names, [&b"."[..], b"..", b"a-b", b"a", b"b"]);
    // Each entry's attributes are the table's (size = id); ".." unknown: none.
    assert!(hit.entries[1].0.plus.is_none());
    assert_eq!(hit.entries[4].0.plus.as_ref().unwrap().0.size, 40);
    assert_eq!(hit.entries[2].0.plus.as_ref().unwrap().1, handle(2));
    // Resumed from an entry's cookie, with the directory's verifier.
    assert_eq!(
        ask_with(&mut l, &gens, 3, VERF, 0, &t),
        Some((vec![41, 40], true))
    );
}

#[test]
fn creates_count_in_any_order_and_only_once_all_are_applied() {
    let (mut l, gens) = (Listings::default(), Generations::new());
    empty(&mut l, &gens);
    // Two creates run at once: both read the same stamp, four reports.
    let before = gens.stamp(DIR);
    gens.bump_file(DIR);
    gens.bump_file(DIR);
    gens.bump_file(DIR);
    gens.bump_file(DIR);
    let made = |name: &str, id| {
        let m = Made {
            before,
            attr: attr(FileKind::Reg, id, 0o644),
            fh: handle(id),
        };
        (name.to_string(), m)
    };
    let t = table(&gens, &[10, 11]);
    apply(&mut l, &made("y", 11));
    // One fill of two: a create is unaccounted for (it might be anything).
    assert_eq!(ask_with(&mut l, &gens, 0, [0; 8], 0, &t), None);
    apply(&mut l, &made("x", 10));
    assert_eq!(
        ask_with(&mut l, &gens, 0, [0; 8], 0, &t),
        Some((vec![1, 2, 10, 11], true))
    );
}

#[test]
fn a_change_the_run_did_not_apply_ends_it_for_good() {
    let (mut l, gens) = (Listings::default(), Generations::new());
    empty(&mut l, &gens);
    apply(&mut l, &create(&gens, "a", 10, false));
    // A remove (or rename, SETATTR, another reactor's create): two reports, no fill.
    gens.bump_file(DIR);
    gens.bump_file(DIR);
    let t = table(&gens, &[10]);
    assert_eq!(ask_with(&mut l, &gens, 0, [0; 8], 0, &t), None);
    // Later creates do not make up for it.
    apply(&mut l, &create(&gens, "b", 11, false));
    let t = table(&gens, &[10, 11]);
    assert_eq!(ask_with(&mut l, &gens, 0, [0; 8], 0, &t), None);

    // A create whose worker read the stamp before the run began may be in the
    // run's start: never applied (the run stays short of it).
    let (mut l, gens) = (Listings::default(), Generations::new());
    let early = create(&gens, "c", 12, false);
    empty(&mut l, &gens);
    apply(&mut l, &early);
    let t = table(&gens, &[12]);
    assert_eq!(
        ask_with(&mut l, &gens, 0, [0; 8], 0, &t),
        Some((vec![1, 2], true))
    );
    assert_eq!(l.len(), 2);
}

#[test]
fn created_entries_show_the_attribute_tables_attributes_under_their_stamp() {
    let (mut l, gens) = (Listings::default(), Generations::new());
    empty(&mut l, &gens);
    apply(&mut l, &create(&gens, "a", 10, false));
    // The directory's attributes are the table's once a create moved its stamp.
    let no_dir = {
        let t = table(&gens, &[10]);
        move |fh: &[u8], stale: bool| t(fh, stale).filter(|(a, _, _)| a.fileid != DIR)
    };
    assert_eq!(ask_with(&mut l, &gens, 0, [0; 8], 0, &no_dir), None);
    // Nothing taught the new file's attributes yet: the hit ends before it (the
    // worker lists a reply that shows it).
    let dir_only = table(&gens, &[]);
    assert_eq!(
        ask_with(&mut l, &gens, 0, [0; 8], 0, &dir_only),
        Some((vec![1, 2], false))
    );
    let t = table(&gens, &[10]);
    assert!(ask_with(&mut l, &gens, 0, [0; 8], 0, &t).is_some());
    // A WRITE moved the file's stamp: the table's old attributes no longer do.
    gens.bump_file(10);
    assert_eq!(
        ask_with(&mut l, &gens, 0, [0; 8], 0, &t),
        Some((vec![1, 2], false))
    );
    let t = table(&gens, &[10]);
    assert!(ask_with(&mut l, &gens, 0, [0; 8], 0, &t).is_some());
}

#[test]
fn a_name_made_again_is_listed_once_and_a_replaced_one_ends_the_run() {
    let (mut l, gens) = (Listings::default(), Generations::new());
    empty(&mut l, &gens);
    apply(&mut l, &create(&gens, "a", 10, false));
    // An UNCHECKED create of the same file: counted, not listed twice.
    apply(&mut l, &create(&gens, "a", 10, false));
    let t = table(&gens, &[10]);
    assert_eq!(
        ask_with(&mut l, &gens, 0, [0; 8], 0, &t),
        Some((vec![1, 2, 10], true))
    );
    // The name now another file: something the run missed happened; it goes.
    apply(&mut l, &create(&gens, "a", 11, false));
    let t = table(&gens, &[10, 11]);
    assert_eq!(ask_with(&mut l, &gens, 0, [0; 8], 0, &t), None);
    assert_eq!(l.len(), 0);
}

#[test]
fn a_create_past_a_partial_runs_end_is_left_to_the_workers_pages() {
    let (mut l, gens) = (Listings::default(), Generations::new());
    // A worker's first page (names f10..f19), more to come.
    fill(&mut l, &gens, page(0, 10..20, false));
    // "g" sorts after "f19": not in the run's part of the directory.
    apply(&mut l, &create(&gens, "g", 50, false));
    // "f15x" sorts inside it: inserted.
    apply(&mut l, &create(&gens, "f15x", 51, false));
    let t = table(&gens, &[51]);
    let (got, eof) = ask_with(&mut l, &gens, 0, [0; 8], 0, &t).unwrap();
    assert!(!eof);
    assert_eq!(got, vec![10, 11, 12, 13, 14, 15, 51, 16, 17, 18, 19]);
}

#[test]
fn an_nfs41_run_refreshed_with_fattr3_attributes_answers_nfsv3_only() {
    let (mut l, gens) = (Listings::default(), Generations::new());
    fill(
        &mut l,
        &gens,
        ListedPage {
            v4: true,
            ..page(0, 10..12, true)
        },
    );
    // A WRITE over NFSv3 moved entry 10: the table has its reply's fattr3.
    gens.bump_file(10);
    let mut a = attr(FileKind::Reg, 10, 0o644);
    a.size = 99;
    let now = gens.stamp(10);
    let t = move |fh: &[u8], _: bool| (fh == [1; 8]).then_some((a, now, false));
    let (cred, exports) = (Cred::Sys(AuthSys::new(0, 0, &[])), exports());
    let r = Request {
        fh: b"dir-handle",
        client: "127.0.0.1".parse().unwrap(),
        cred: &cred,
    };
    let hit = l
        .lookup(&gens, &exports, &r, (0, [0; 8], usize::MAX), true, t)
        .unwrap();
    assert_eq!(hit.entries[0].0.plus.as_ref().unwrap().0.size, 99);
    assert!(!hit.v4);
}

// ---- NFSv4.1 from runs the gateway's creates keep (`ListingHit::v4`) ---------------

/// Two exports: "/" and "/nested" (a created name "nested" in the root would be the
/// second one's root to NFSv4.1, `nfs4::pseudo::export_child`).
fn two_exports() -> Exports {
    let mut list = vec![exports().get(0).unwrap().clone()];
    list.push(Export {
        id: 1,
        path: "/nested".into(),
        prefix: "nested/".into(),
        ..list[0].clone()
    });
    Exports::new(list)
}

/// Whether NFSv4.1 may show the whole run from cookie 0 under `exports` with the
/// attribute table `t` (`None`: a miss for both versions).
fn v4_hit(l: &mut Listings, gens: &Generations, exports: &Exports, t: &Table) -> Option<bool> {
    let cred = Cred::Sys(AuthSys::new(0, 0, &[]));
    let req = Request {
        fh: b"dir-handle",
        client: "127.0.0.1".parse().unwrap(),
        cred: &cred,
    };
    let hit = l.lookup(gens, exports, &req, (0, [0; 8], usize::MAX), false, t)?;
    // The whole listing: a hit that ends before an entry it cannot show is no answer
    // to a call that needs that entry.
    (hit.eof && Listings::current_shown(gens, hit.entries)).then_some(hit.v4)
}

#[test]
fn a_created_run_answers_nfsv41_only_with_the_models_own_attributes() {
    let (mut l, gens) = (Listings::default(), Generations::new());
    empty(&mut l, &gens);
    // Empty: nothing NFSv4.1 shows ("." and ".." are not shown).
    assert_eq!(v4_hit(&mut l, &gens, &exports(), &no_table), Some(true));
    for c in [create(&gens, "b", 40, false), create(&gens, "a", 41, false)] {
        apply(&mut l, &c);
    }
    // Nothing taught the files' attributes: a miss, never a guess.
    assert_eq!(
        v4_hit(&mut l, &gens, &exports(), &table_as(&gens, &[], true)),
        None
    );
    // The model's own (an NFSv4.1 OPEN's, read after its COMPOUND): NFSv4.1's too,
    // every shown entry with the table's attributes (size = id).
    let t = table_as(&gens, &[40, 41], true);
    assert_eq!(v4_hit(&mut l, &gens, &exports(), &t), Some(true));
    let cred = Cred::Sys(AuthSys::new(0, 0, &[]));
    let req = Request {
        fh: b"dir-handle",
        client: "127.0.0.1".parse().unwrap(),
        cred: &cred,
    };
    let hit = l
        .lookup(&gens, &exports(), &req, (0, [0; 8], usize::MAX), true, &t)
        .unwrap();
    let shown: Vec<(&[u8], u64, u64)> = hit.entries[2..]
        .iter()
        .map(|(e, _)| (&*e.name, e.cookie, e.plus.as_ref().unwrap().0.size))
        .collect();
    assert_eq!(shown, [(&b"a"[..], 41, 41), (&b"b"[..], 40, 40)]);
    // A WRITE over NFSv3 moved "b": its reply's fattr3 is all the table has. NFSv3
    // is answered, NFSv4.1 never again from this run (the worker lists).
    gens.bump_file(40);
    let t3 = table(&gens, &[40, 41]);
    assert_eq!(v4_hit(&mut l, &gens, &exports(), &t3), Some(false));
    let t = table_as(&gens, &[40, 41], true);
    assert_eq!(v4_hit(&mut l, &gens, &exports(), &t), Some(false));
}

#[test]
fn created_entries_are_shown_to_nfsv41_only_on_a_server_with_one_export() {
    let (mut l, gens) = (Listings::default(), Generations::new());
    empty(&mut l, &gens);
    // No created entry yet: no name to be another export's root.
    assert_eq!(v4_hit(&mut l, &gens, &two_exports(), &no_table), Some(true));
    apply(&mut l, &create(&gens, "nested", 40, true));
    let t = table_as(&gens, &[40], true);
    // "nested" may be the second export's root: NFSv3 only (a worker's NFSv4.1
    // READDIR shows that root's attributes); one export again (a reload): both.
    assert_eq!(v4_hit(&mut l, &gens, &two_exports(), &t), Some(false));
    assert_eq!(v4_hit(&mut l, &gens, &exports(), &t), Some(true));

    // A run NFSv4.1's READDIR listed (its entries checked) answers with two
    // exports until a create inserts a name nothing checked.
    let (mut l, gens) = (Listings::default(), Generations::new());
    fill(
        &mut l,
        &gens,
        ListedPage {
            v4: true,
            ..page(0, 10..12, true)
        },
    );
    assert_eq!(v4_hit(&mut l, &gens, &two_exports(), &no_table), Some(true));
    apply(&mut l, &create(&gens, "g", 50, false));
    let t = table_as(&gens, &[50], true);
    assert_eq!(v4_hit(&mut l, &gens, &two_exports(), &t), Some(false));
    assert_eq!(v4_hit(&mut l, &gens, &exports(), &t), Some(true));
}

#[test]
fn nfsv41_needs_no_current_attributes_of_the_directory_only_its_access() {
    let (mut l, gens) = (Listings::default(), Generations::new());
    empty(&mut l, &gens);
    for c in [create(&gens, "a", 40, false), create(&gens, "b", 41, false)] {
        apply(&mut l, &c);
    }
    // Concurrent creates left the table no current attributes of the directory.
    let files = {
        let t = table_as(&gens, &[40, 41], true);
        move |fh: &[u8], stale: bool| t(fh, stale).filter(|(a, _, _)| a.fileid != DIR)
    };
    let cred = |uid| Cred::Sys(AuthSys::new(uid, uid, &[]));
    let ask = |l: &mut Listings, uid: u32, shown: bool| {
        let c = cred(uid);
        let req = Request {
            fh: b"dir-handle",
            client: "127.0.0.1".parse().unwrap(),
            cred: &c,
        };
        let h = l.lookup(
            &gens,
            &exports(),
            &req,
            (0, [0; 8], usize::MAX),
            shown,
            &files,
        )?;
        // What NFSv4.1 shows is current; "." keeps the attributes of the state
        // the run last knew (NFSv3, which shows it, refreshes it first).
        if !shown {
            assert!(Listings::current_shown(&gens, h.entries));
            assert!(!Listings::current(&gens, h.entries));
        }
        Some((h.entries.len(), h.v4))
    };
    // NFSv3 shows the directory's attributes: a miss; NFSv4.1 shows none: a hit.
    assert_eq!(ask(&mut l, 0, true), None);
    assert_eq!(ask(&mut l, 0, false), Some((4, true)));
    // Its access check still reads the mode (0o755 at the MKDIR: others may read).
    assert_eq!(ask(&mut l, 1000, false), Some((4, true)));
    // A change the run did not apply (a chmod among them): no answer at all.
    gens.bump_file(DIR);
    gens.bump_file(DIR);
    assert_eq!(ask(&mut l, 0, false), None);

    // A directory others may not read (0o700): refused from the run's attributes.
    let (mut l, gens) = (Listings::default(), Generations::new());
    let e = EmptyFill {
        verf: VERF,
        dot: handle(DIR),
        parent: (PARENT, handle(PARENT)),
    };
    l.start_empty(fh(), 0, &dir_attr(0o700), gens.stamp(DIR), e);
    apply(&mut l, &create(&gens, "a", 40, false));
    let files = table_as(&gens, &[40], true);
    let c = cred(1000);
    let req = Request {
        fh: b"dir-handle",
        client: "127.0.0.1".parse().unwrap(),
        cred: &c,
    };
    let files = move |fh: &[u8], stale: bool| files(fh, stale).filter(|(a, _, _)| a.fileid != DIR);
    assert!(l
        .lookup(
            &gens,
            &exports(),
            &req,
            (0, [0; 8], usize::MAX),
            false,
            &files
        )
        .is_none());
}

/// Entries with file ids (and cookies) `ids`, each with a handle of its own (its id).
fn handled(ids: std::ops::Range<u64>) -> Vec<ListedEntry> {
    let mut v = entries(ids);
    for e in &mut v {
        if let Some((_, fh)) = &mut e.plus {
            fh.bytes[..8].copy_from_slice(&e.fileid.to_le_bytes());
        }
    }
    v
}

/// The digest of the names `entries` gives ids `ids` (files all).
fn digest_of(ids: std::ops::Range<u64>) -> u64 {
    let mut d = NamesDigest::new();
    for id in ids {
        d.add(format!("f{id}").as_bytes(), false);
    }
    d.finish()
}

/// A complete run past `ATTR_TTL` answers again after a first page that says the
/// directory's names are the run's (`Listings::renew`, the readdir cliff of
/// docs/performance.md): the page's entries with its attributes, the others' from
/// the attribute table (young there, or a miss); names that differ (a file made
/// behind the gateway's back) replace the run with the page, as before.
#[test]
fn a_complete_run_whose_names_are_seen_unchanged_answers_past_attr_ttl() {
    // The attribute tables below read it, as `lookup`'s `attrs` may ('static: `Table`).
    let gens: &'static Generations = Box::leak(Box::new(Generations::new()));
    let table = move |fh: &[u8], _: bool| {
        let id = u64::from_le_bytes(fh[..8].try_into().ok()?);
        (10..20)
            .contains(&id)
            .then(|| (attr(FileKind::Reg, id, 0o644), gens.stamp(id), true))
    };
    let old = |l: &mut Listings| {
        fill(
            l,
            gens,
            ListedPage {
                at: Instant::now() - ATTR_TTL - STALE_MAX,
                entries: handled(10..20),
                ..page(0, 10..20, true)
            },
        );
        assert_eq!(ask_with(l, gens, 0, VERF, 0, &table), None, "expired");
    };
    let first = |ids: std::ops::Range<u64>| ListedPage {
        names: Some(NamesSeen {
            at: Instant::now(),
            digest: digest_of(ids),
        }),
        entries: handled(10..14),
        ..page(0, 10..14, false)
    };
    let all: Vec<u64> = (10..20).collect();

    let mut l = Listings::default();
    old(&mut l);
    fill(&mut l, gens, first(10..20));
    assert_eq!(
        ask(&mut l, gens, 0, VERF, 0),
        Some(((10..14).collect(), false)),
        "the page's entries; the table knows none of the rest"
    );
    assert_eq!(
        ask_with(&mut l, gens, 0, VERF, 0, &table),
        Some((all.clone(), true)),
        "renewed: the page's entries, the rest's attributes from the table"
    );

    // A page inside the renewed run, of its own entries, keeps it whole.
    let mut l = Listings::default();
    old(&mut l);
    fill(&mut l, gens, first(10..20));
    fill(
        &mut l,
        gens,
        ListedPage {
            entries: handled(14..17),
            ..page(13, 14..17, false)
        },
    );
    let late = move |fh: &[u8], stale: bool| table(fh, stale).filter(|(a, _, _)| a.fileid >= 17);
    assert_eq!(
        ask_with(&mut l, gens, 13, VERF, 0, &late),
        Some(((14..20).collect(), true)),
        "entries 14-16 from the page, 17-19 from the table, the run still whole"
    );

    // Other names behind the gateway's back: the page replaces the run.
    let mut l = Listings::default();
    old(&mut l);
    fill(&mut l, gens, first(10..21));
    assert_eq!(
        ask_with(&mut l, gens, 0, VERF, 0, &table),
        Some(((10..14).collect(), false)),
        "only what the page listed"
    );

    // A change through the gateway since the run's stamp: no renewal either.
    let mut l = Listings::default();
    old(&mut l);
    gens.bump_file(DIR);
    fill(&mut l, gens, first(10..20));
    assert_eq!(
        ask_with(&mut l, gens, 0, VERF, 0, &table),
        Some(((10..14).collect(), false)),
    );
}

/// Past `ATTR_TTL`, a run answers NFSv3 and NFSv4.1 for `STALE_MAX` more while one
/// revalidation of it runs (its first answered hit asks for it,
/// `ListingHit::revalidate`, and no other until the run is renewed or replaced), as
/// cached attributes do.
#[test]
fn a_stale_run_answers_while_one_revalidation_runs() {
    let (mut l, gens) = (Listings::default(), Generations::new());
    fill(&mut l, &gens, page(0, 10..20, true));
    let (cred, exports) = (Cred::Sys(AuthSys::new(0, 0, &[])), exports());
    let req = Request {
        fh: b"dir-handle",
        client: "127.0.0.1".parse().unwrap(),
        cred: &cred,
    };
    let asks = |l: &mut Listings, v3: bool| {
        l.lookup(&gens, &exports, &req, (0, [0; 8], 100), v3, no_table)
            .map(|h| h.revalidate)
    };
    assert_eq!(asks(&mut l, true), Some(false), "young");
    l.runs.get_mut(&fh()).unwrap().at = Instant::now() - ATTR_TTL;
    assert_eq!(asks(&mut l, true), Some(true), "stale: asks");
    assert_eq!(
        asks(&mut l, false),
        Some(true),
        "NFSv4.1 too, until one is started"
    );
    l.revalidating(&fh());
    assert_eq!(asks(&mut l, true), Some(false), "one at a time");
    assert_eq!(asks(&mut l, false), Some(false), "one at a time, NFSv4.1");
    // The revalidation's page (here the whole directory) makes the run young again.
    fill(&mut l, &gens, page(0, 10..20, true));
    assert_eq!(asks(&mut l, true), Some(false));
    l.runs.get_mut(&fh()).unwrap().at = Instant::now() - ATTR_TTL - STALE_MAX;
    assert_eq!(asks(&mut l, true), None, "past STALE_MAX");
    assert_eq!(asks(&mut l, false), None, "past STALE_MAX, NFSv4.1");
}

/// An NFSv4.1 hit's revalidation is an NFSv3 page (`dispatch::listing_revalidation`),
/// which checked no export's root: when it proves the names unchanged the run stays
/// NFSv4.1's; when they differ, the page replaces the run, and NFSv4.1 is not shown it.
#[test]
fn a_run_renewed_by_an_nfsv3_page_stays_nfsv41s_only_with_its_names() {
    let gens: &'static Generations = Box::leak(Box::new(Generations::new()));
    let table = move |fh: &[u8], _: bool| {
        let id = u64::from_le_bytes(fh[..8].try_into().ok()?);
        (10..20)
            .contains(&id)
            .then(|| (attr(FileKind::Reg, id, 0o644), gens.stamp(id), true))
    };
    let exports = exports();
    let v4_whole = |l: &mut Listings| v4_hit(l, gens, &exports, &table);
    let start = |l: &mut Listings| {
        fill(
            l,
            gens,
            ListedPage {
                v4: true,
                at: Instant::now() - ATTR_TTL,
                entries: handled(10..20),
                ..page(0, 10..20, true)
            },
        );
    };
    let v3_first = |ids: std::ops::Range<u64>| ListedPage {
        names: Some(NamesSeen {
            at: Instant::now(),
            digest: digest_of(ids),
        }),
        entries: handled(10..14),
        ..page(0, 10..14, false)
    };
    let mut l = Listings::default();
    start(&mut l);
    assert_eq!(
        v4_whole(&mut l),
        Some(true),
        "stale, answered while revalidated"
    );
    fill(&mut l, gens, v3_first(10..20));
    assert_eq!(v4_whole(&mut l), Some(true), "renewed: still NFSv4.1's");
    let mut l = Listings::default();
    start(&mut l);
    fill(&mut l, gens, v3_first(10..21));
    assert_eq!(
        v4_whole(&mut l),
        None,
        "other names: the NFSv3 page's run, short"
    );
    let hit = l.lookup(
        gens,
        &exports,
        &Request {
            fh: b"dir-handle",
            client: "127.0.0.1".parse().unwrap(),
            cred: &Cred::Sys(AuthSys::new(0, 0, &[])),
        },
        (0, [0; 8], 100),
        false,
        table,
    );
    assert_eq!(hit.map(|h| h.v4), Some(false), "not NFSv4.1's");
}
