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
    l: &Listings,
    gens: &Generations,
    cookie: u64,
    verf: [u8; 8],
    uid: u32,
) -> Option<(Vec<u64>, bool)> {
    let cred = Cred::Sys(AuthSys::new(uid, uid, &[]));
    let exports = exports();
    let req = Request {
        fh: b"dir-handle",
        client: "127.0.0.1".parse().unwrap(),
        cred: &cred,
    };
    let hit = l.lookup(gens, &exports, &req, cookie, verf)?;
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
        ask(&l, &gens, 0, [0; 8], 0),
        Some(((10..20).collect(), false))
    );
    // The next page resumes after the last entry: appended.
    fill(&mut l, &gens, page(19, 20..25, true));
    assert_eq!(
        ask(&l, &gens, 0, [0; 8], 0),
        Some(((10..25).collect(), true))
    );
    // Any entry's cookie resumes, with the directory's verifier or zero.
    assert_eq!(
        ask(&l, &gens, 14, VERF, 0),
        Some(((15..25).collect(), true))
    );
    assert_eq!(ask(&l, &gens, 24, [0; 8], 0), Some((vec![], true)));
    // A page resuming inside the run replaces its tail.
    fill(&mut l, &gens, page(12, 13..15, false));
    assert_eq!(
        ask(&l, &gens, 0, [0; 8], 0),
        Some(((10..15).collect(), false))
    );
    assert_eq!(l.len(), 5);
}

#[test]
fn unknown_cookies_and_foreign_verifiers_are_the_workers() {
    let (mut l, gens) = (Listings::default(), Generations::new());
    fill(&mut l, &gens, page(0, 10..20, true));
    // Forged or stale: not an entry of the run (the worker answers BAD_COOKIE).
    assert_eq!(ask(&l, &gens, 9, VERF, 0), None);
    assert_eq!(ask(&l, &gens, u64::MAX, VERF, 0), None);
    // A verifier this directory never gave.
    assert_eq!(ask(&l, &gens, 12, *b"otherdir", 0), None);
    // A page resuming at a cookie the run does not hold teaches nothing.
    fill(&mut l, &gens, page(99, 100..110, true));
    assert_eq!(ask(&l, &gens, 105, VERF, 0), None);
    // Nor does a page with another verifier.
    let mut p = page(19, 20..22, true);
    p.verf = *b"otherdir";
    fill(&mut l, &gens, p);
    assert_eq!(
        ask(&l, &gens, 0, [0; 8], 0),
        Some(((10..20).collect(), true))
    );
}

#[test]
fn a_change_in_the_directory_ends_the_run() {
    let (mut l, gens) = (Listings::default(), Generations::new());
    fill(&mut l, &gens, page(0, 10..20, true));
    // A create, remove or rename in it bumps the directory (either protocol).
    gens.bump_file(DIR);
    assert_eq!(ask(&l, &gens, 0, [0; 8], 0), None);
    assert_eq!(ask(&l, &gens, 12, VERF, 0), None);
    // The epoch ends every run.
    let (mut l, gens) = (Listings::default(), Generations::new());
    fill(&mut l, &gens, page(0, 10..20, true));
    gens.bump_all();
    assert_eq!(ask(&l, &gens, 0, [0; 8], 0), None);
}

#[test]
fn an_entry_changed_since_it_was_listed_is_never_shown() {
    let (mut l, gens) = (Listings::default(), Generations::new());
    fill(&mut l, &gens, page(0, 10..20, true));
    // A WRITE or SETATTR of entry 15 bumps it: pages showing it miss.
    gens.bump_file(15);
    assert_eq!(ask(&l, &gens, 0, [0; 8], 0), None);
    assert_eq!(ask(&l, &gens, 14, VERF, 0), None);
    // One that starts after it does not show it.
    assert_eq!(
        ask(&l, &gens, 15, VERF, 0),
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
    assert_eq!(ask(&l, &gens, 0, [0; 8], 0), None);
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
    assert!(ask(&l, &gens, 0, [0; 8], 0).is_some());
    assert_eq!(ask(&l, &gens, 0, [0; 8], 1000), None);
    // A handle of another export than the run's is another key: never a hit.
    let cred = Cred::Sys(AuthSys::new(0, 0, &[]));
    let exports = exports();
    let req = Request {
        fh: b"dir-handle-2",
        client: "127.0.0.1".parse().unwrap(),
        cred: &cred,
    };
    assert!(l.lookup(&gens, &exports, &req, 0, [0; 8]).is_none());
    // A client outside the export's networks.
    let req = Request {
        fh: b"dir-handle",
        client: "10.0.0.1".parse().unwrap(),
        cred: &cred,
    };
    assert!(l.lookup(&gens, &exports, &req, 0, [0; 8]).is_none());
}

#[test]
fn runs_are_bounded() {
    let (mut l, gens) = (Listings::default(), Generations::new());
    // One directory longer than a run holds: the run stops short of eof.
    fill(&mut l, &gens, page(0, 10..10 + RUN_MAX as u64 + 5, true));
    let (got, eof) = ask(&l, &gens, 0, [0; 8], 0).unwrap();
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
    assert_eq!(ask(&l, &gens, 0, [0; 8], 0), None);
}

#[test]
fn runs_expire_so_changes_behind_the_gateway_are_seen() {
    let (mut l, gens) = (Listings::default(), Generations::new());
    fill(&mut l, &gens, page(0, 10..20, false));
    let old = Instant::now() - ATTR_TTL;
    l.runs.get_mut(&fh()).unwrap().at = old;
    assert_eq!(ask(&l, &gens, 0, [0; 8], 0), None);
    // Nor does an expired run grow.
    fill(&mut l, &gens, page(19, 20..25, true));
    assert_eq!(l.runs[&fh()].entries.len(), 10);
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
    let hit = |l: &Listings| l.lookup(&gens, &exports, &r, 0, [0; 8]).map(|h| h.v4);
    assert_eq!(hit(&l), Some(true));
    // A NFSv3 page resuming inside it: the run is no longer NFSv4.1's.
    fill(&mut l, &gens, page(109, 110..120, true));
    assert_eq!(hit(&l), Some(false));
    fill(&mut l, &gens, page(0, 100..110, true));
    assert_eq!(hit(&l), Some(false));
}
