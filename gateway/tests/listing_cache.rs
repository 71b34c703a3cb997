//! The reactor's listings (`gateway::cache::dirs`, docs/architecture.md §5) through
//! the real server: a READDIRPLUS page of a directory listed a moment ago is answered
//! on the reactor; a change in that directory or to one of its entries, made through
//! either protocol version, is in the next page at once; cookies handed out by the
//! reactor resume on a worker and the other way round; a forged cookie or verifier
//! gets the worker's error.

mod common;
#[path = "common/nfs4_client.rs"]
mod nfs4_client;

use common::v4::enc;
use common::{Gw, GwOpts};
use nfs4_client::*;
use nfs_wire::nfs3::NFSPROC3_READDIRPLUS;
use nfs_wire::v3call::{self, Call, DirPage};
use nfs_wire::NFS_PROGRAM;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const NFS3ERR_BAD_COOKIE: u32 = 10003;

/// The value of one series of the gateway's metrics (0 when absent).
fn metric(gw: &Gw, series: &str) -> u64 {
    gw.metric(series)
}

/// Cache hits, once the reactor published them (it does before it sleeps).
fn hits(gw: &Gw, at_least: u64) -> u64 {
    let end = Instant::now() + Duration::from_secs(3);
    loop {
        let h = metric(gw, "nfsgw_cache_hits_total{reactor=\"0\"}");
        if h >= at_least || Instant::now() > end {
            return h;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// READDIRPLUS3res of `dir` from `cookie`.
fn page_raw(v3: &mut V3, dir: &[u8], cookie: u64, verf: [u8; 8]) -> Vec<u8> {
    let args = enc(|w| Call::ReaddirplusAt(dir, cookie, verf).args(w).unwrap());
    v3.call(NFS_PROGRAM, NFSPROC3_READDIRPLUS, &args)
}

fn page(v3: &mut V3, dir: &[u8], cookie: u64, verf: [u8; 8]) -> DirPage {
    v3call::parse_readdirplus(&page_raw(v3, dir, cookie, verf)).expect("READDIRPLUS")
}

/// The whole listing of `dir` (name → size), page after page.
fn listing(v3: &mut V3, dir: &[u8]) -> BTreeMap<String, Option<u64>> {
    let (mut cookie, mut verf, mut out) = (0, [0; 8], BTreeMap::new());
    loop {
        let p = page(v3, dir, cookie, verf);
        for e in &p.entries {
            let name = String::from_utf8(e.name.clone()).unwrap();
            if name != "." && name != ".." {
                assert!(out.insert(name, e.size).is_none(), "a name twice");
            }
        }
        if p.eof {
            return out;
        }
        cookie = p.entries.last().expect("a page that ends nothing").cookie;
        verf = p.verf;
    }
}

fn gw() -> Gw {
    Gw::start(&GwOpts {
        rdma: false,
        ..Default::default()
    })
}

#[test]
fn a_listing_is_answered_on_the_reactor_until_either_version_changes_it() {
    let gw = gw();
    let mut v3 = V3::connect(gw.tcp_addr());
    let root = v3.mount_root();
    // Two pages of the counts the client sends (dircount 4 KiB, maxcount 32 KiB).
    for i in 0..300 {
        v3.create(&root, format!("f{i:04}").as_bytes());
    }
    let first = listing(&mut v3, &root);
    assert_eq!(first.len(), 300);
    let before = hits(&gw, 0);
    let again = listing(&mut v3, &root);
    assert_eq!(again, first);
    let after = hits(&gw, before + 2);
    assert!(
        after >= before + 2,
        "pages of a listed directory are reactor hits"
    );

    // A directory made and a file removed over NFSv4.1: the next v3 page shows both.
    let mut v4 = Tcp41::ready(gw.tcp_addr(), b"listing-cache");
    let (st, _) = v4.seq_run(|o| o.putfh(&root).create_obj(b"d41", None));
    assert_eq!(st, NFS4_OK, "CREATE");
    let (st, _) = v4.seq_run(|o| o.putfh(&root).remove(b"f0007"));
    assert_eq!(st, NFS4_OK, "REMOVE");
    let now = listing(&mut v3, &root);
    assert!(now.contains_key("d41") && !now.contains_key("f0007"));
    assert_eq!(now.len(), 300);

    // A write to an entry shows its new size in the next page.
    let fh = v3.create(&root, b"w");
    listing(&mut v3, &root);
    listing(&mut v3, &root);
    assert_eq!(v3.write(&fh, b"12345"), 0);
    assert_eq!(listing(&mut v3, &root)["w"], Some(5));
}

#[test]
fn cookies_resume_across_reactor_and_workers_and_forged_ones_are_refused() {
    let gw = gw();
    let mut v3 = V3::connect(gw.tcp_addr());
    let root = v3.mount_root();
    for i in 0..300 {
        v3.create(&root, format!("f{i:04}").as_bytes());
    }
    let want = listing(&mut v3, &root);
    // A page from the reactor, then a change: the next page (from the cookie the
    // reactor gave) goes to a worker, which resumes exactly after it.
    let p = page(&mut v3, &root, 0, [0; 8]);
    assert!(!p.eof);
    let last = p.entries.last().unwrap();
    let (cookie, seen) = (last.cookie, String::from_utf8(last.name.clone()).unwrap());
    v3.create(&root, b"zzzz");
    let q = page(&mut v3, &root, cookie, p.verf);
    let next = String::from_utf8(q.entries[0].name.clone()).unwrap();
    let after: Vec<&String> = want.keys().filter(|k| **k > seen).collect();
    assert_eq!(&next, after[0]);
    // Forged cookies and verifiers: the worker's NFS3ERR_BAD_COOKIE, whether or not
    // the directory's pages are on the reactor.
    listing(&mut v3, &root);
    let forged = page_raw(&mut v3, &root, 0xdead_beef_0001, p.verf);
    assert_eq!(v3call::status(&forged), NFS3ERR_BAD_COOKIE);
    let foreign = page_raw(&mut v3, &root, cookie, *b"notmine!");
    assert_eq!(v3call::status(&foreign), NFS3ERR_BAD_COOKIE);
    // A cookie from the reactor with the verifier it gave still resumes.
    let r = page(&mut v3, &root, cookie, p.verf);
    assert_eq!(
        String::from_utf8(r.entries[0].name.clone()).unwrap(),
        *after[0]
    );
}

// NFSv4.1 READDIR (RFC 8881 §18.23) from the reactor's listings (`nfs4::fast_dirs`).

const NFS4ERR_BAD_COOKIE: u32 = 10003;
const NFS4ERR_NOT_SAME: u32 = 10027;
/// What the Linux client asks in its READDIR: TYPE, CHANGE, SIZE, FSID,
/// RDATTR_ERROR, FILEHANDLE, FILEID; MODE, NUMLINKS, OWNER, OWNER_GROUP, RAWDEV,
/// SPACE_USED, TIME_ACCESS, TIME_METADATA, TIME_MODIFY, MOUNTED_ON_FILEID.
const LINUX_BITS: [u32; 2] = [
    1 << 1 | 1 << 3 | 1 << 4 | 1 << 8 | 1 << 11 | 1 << 19 | 1 << 20,
    1 << 1 | 1 << 3 | 1 << 4 | 1 << 5 | 1 << 9 | 1 << 13 | 1 << 15 | 1 << 20 | 1 << 21 | 1 << 23,
];

/// One READDIR4resok: the verifier, each entry's (cookie, name, fattr4 bytes), eof.
struct Page4 {
    verf: [u8; 8],
    entries: Vec<(u64, String, Vec<u8>)>,
    eof: bool,
}

/// `SEQUENCE, PUTFH, READDIR` of `dir` from `cookie` (the shape the reactor
/// answers): READDIR's status and, when NFS4_OK, its page.
fn page4(v4: &mut Tcp41, dir: &[u8], cookie: u64, verf: [u8; 8]) -> (u32, Option<Page4>) {
    page4_of(v4, dir, cookie, verf, &LINUX_BITS)
}

/// `page4` asking the attributes of `bits`.
fn page4_of(
    v4: &mut Tcp41,
    dir: &[u8],
    cookie: u64,
    verf: [u8; 8],
    bits: &[u32],
) -> (u32, Option<Page4>) {
    let (_, res) = v4.seq_run(|o| o.putfh(dir).readdir(cookie, verf, 4096, 32 << 10, bits));
    let mut r = after_seq(&res);
    assert_eq!(expect_op(&mut r, OP_PUTFH), NFS4_OK, "PUTFH");
    let st = expect_op(&mut r, OP_READDIR);
    if st != NFS4_OK {
        return (st, None);
    }
    let verf: [u8; 8] = r.opaque_fixed(8).unwrap().try_into().unwrap();
    let mut entries = Vec::new();
    while r.u32().unwrap() == 1 {
        let cookie = r.u64().unwrap();
        let name = String::from_utf8(r.opaque_var(255).unwrap().to_vec()).unwrap();
        let at = r.position();
        let words = r.u32().unwrap();
        for _ in 0..words {
            r.u32().unwrap();
        }
        r.opaque_var(4096).unwrap();
        let fattr = res.body[at..r.position()].to_vec();
        entries.push((cookie, name, fattr));
    }
    let eof = r.u32().unwrap() == 1;
    (st, Some(Page4 { verf, entries, eof }))
}

/// The whole NFSv4.1 listing of `dir` (name → fattr4 bytes), calling `between` after
/// each page but the last.
fn listing4(v4: &mut Tcp41, dir: &[u8], between: impl FnMut()) -> BTreeMap<String, Vec<u8>> {
    listing4_of(v4, dir, &LINUX_BITS, between)
}

/// `listing4` asking the attributes of `bits`.
fn listing4_of(
    v4: &mut Tcp41,
    dir: &[u8],
    bits: &[u32],
    mut between: impl FnMut(),
) -> BTreeMap<String, Vec<u8>> {
    let (mut cookie, mut verf, mut out) = (0, [0; 8], BTreeMap::new());
    loop {
        let (st, p) = page4_of(v4, dir, cookie, verf, bits);
        assert_eq!(st, NFS4_OK, "READDIR from cookie {cookie}");
        let p = p.unwrap();
        for (_, name, fattr) in &p.entries {
            assert!(name != "." && name != "..", "NFSv4 shows no dots");
            assert!(
                out.insert(name.clone(), fattr.clone()).is_none(),
                "{name} twice"
            );
        }
        if p.eof {
            return out;
        }
        let last = p.entries.last().expect("a page that ends nothing");
        (cookie, verf) = (last.0, p.verf);
        between();
    }
}

#[test]
fn a_v41_listing_is_answered_on_the_reactor_until_either_version_changes_it() {
    let gw = gw();
    let mut v3 = V3::connect(gw.tcp_addr());
    let root = v3.mount_root();
    for i in 0..300 {
        v3.create(&root, format!("f{i:04}").as_bytes());
    }
    let mut v4 = Tcp41::ready(gw.tcp_addr(), b"listing-v41");
    let first = listing4(&mut v4, &root, || {});
    assert_eq!(first.len(), 300);
    let before = hits(&gw, 0);
    let again = listing4(&mut v4, &root, || {});
    // The same entries with the same attributes, byte for byte.
    assert_eq!(again, first);
    let after = hits(&gw, before + 2);
    assert!(
        after >= before + 2,
        "READDIR pages of a listed directory are reactor hits"
    );

    // A create over NFSv3 is in the next page at once.
    v3.create(&root, b"by-v3");
    let now = listing4(&mut v4, &root, || {});
    assert!(now.contains_key("by-v3") && now.len() == 301);
    // So is one over NFSv4.1 (listed twice first: the reactor holds the pages).
    listing4(&mut v4, &root, || {});
    let (st, _) = v4.seq_run(|o| o.putfh(&root).create_obj(b"by-v41", None));
    assert_eq!(st, NFS4_OK, "CREATE");
    let now = listing4(&mut v4, &root, || {});
    assert!(now.contains_key("by-v41") && now.len() == 302);
    // A write to an entry shows in its attributes in the next page.
    let fh = v3.create(&root, b"w");
    let before = listing4(&mut v4, &root, || {});
    listing4(&mut v4, &root, || {});
    assert_eq!(v3.write(&fh, b"12345"), 0);
    assert_ne!(listing4(&mut v4, &root, || {})["w"], before["w"]);
}

#[test]
fn v41_cookies_from_the_reactor_resume_and_stale_ones_get_the_error() {
    let gw = gw();
    let mut v3 = V3::connect(gw.tcp_addr());
    let root = v3.mount_root();
    for i in 0..300 {
        v3.create(&root, format!("f{i:04}").as_bytes());
    }
    let mut v4 = Tcp41::ready(gw.tcp_addr(), b"listing-v41-cookies");
    let want = listing4(&mut v4, &root, || {});
    // Listed under concurrent creates (a new name after every page): every name
    // present throughout is listed exactly once (`listing4` checks "once").
    let mut n = 0;
    let got = listing4(&mut v4, &root, || {
        n += 1;
        v3.create(&root, format!("new{n:03}").as_bytes());
    });
    for name in want.keys() {
        assert!(got.contains_key(name), "{name} missing");
    }
    // A page from the reactor; its last cookie resumes on a worker after a change.
    let (_, p) = page4(&mut v4, &root, 0, [0; 8]);
    let p = p.unwrap();
    let (cookie, seen) = (
        p.entries.last().unwrap().0,
        p.entries.last().unwrap().1.clone(),
    );
    v3.create(&root, b"zzzz");
    let (_, q) = page4(&mut v4, &root, cookie, p.verf);
    let next = &q.unwrap().entries[0].1;
    let all = listing4(&mut v4, &root, || {});
    let after: Vec<&String> = all.keys().filter(|k| **k > seen).collect();
    assert_eq!(next, after[0]);
    // With the directory's pages on the reactor: reserved cookies, a forged cookie
    // and a foreign verifier get the worker's errors (RFC 8881 §18.23.3).
    listing4(&mut v4, &root, || {});
    for c in [1, 2] {
        assert_eq!(page4(&mut v4, &root, c, p.verf).0, NFS4ERR_BAD_COOKIE);
    }
    assert_eq!(
        page4(&mut v4, &root, 0xdead_beef_0001, p.verf).0,
        NFS4ERR_NOT_SAME
    );
    assert_eq!(
        page4(&mut v4, &root, cookie, *b"notmine!").0,
        NFS4ERR_NOT_SAME
    );
    // The reactor's cookie with its verifier still resumes.
    let (st, r) = page4(&mut v4, &root, cookie, p.verf);
    assert_eq!(st, NFS4_OK);
    assert_eq!(&r.unwrap().entries[0].1, after[0]);
}

// A first listing (mdtest lists each directory once): the worker that answers its
// first page lists ahead (`FileModel::plus_count`) and the reactor answers the pages
// after it from what that page noted.

/// bench md's NFSv4.1 READDIR bitmap: TYPE and SIZE, no FILEHANDLE.
const TYPE_SIZE: [u32; 1] = [1 << 1 | 1 << 4];

/// Makes `n` files in `dir` named as bench md names them.
fn tree(v3: &mut V3, dir: &[u8], n: usize) {
    for i in 0..n {
        v3.create(dir, format!("f.0.{i}").as_bytes());
    }
}

#[test]
fn a_v3_page_is_bounded_by_maxcount_not_dircount() {
    let gw = gw();
    let mut v3 = V3::connect(gw.tcp_addr());
    let root = v3.mount_root();
    tree(&mut v3, &root, 1000);
    let dir = root;
    let mut pages = 0;
    let (mut cookie, mut verf, mut names) = (0, [0; 8], 0);
    loop {
        let p = page(&mut v3, &dir, cookie, verf);
        pages += 1;
        names += p.entries.len();
        if p.eof {
            break;
        }
        (cookie, verf) = (p.entries.last().unwrap().cookie, p.verf);
    }
    assert_eq!(names, 1002, "every entry and the dots, once");
    // maxcount bounds a page, dircount (4 KiB, the Linux client's maxcount / 8) does
    // not: 1,002 entries of these names in 5 pages, as nfs-ganesha answers (7 when
    // dircount cut them).
    assert!(pages <= 5, "{pages} pages");
}

#[test]
fn a_first_v41_listing_of_bench_attributes_is_one_worker_page() {
    let gw = gw();
    let mut v3 = V3::connect(gw.tcp_addr());
    let root = v3.mount_root();
    tree(&mut v3, &root, 1000);
    let dir = root;
    let mut v4 = Tcp41::ready(gw.tcp_addr(), b"listing-first");
    let before = hits(&gw, 0);
    let mut pages = 0;
    let got = listing4_of(&mut v4, &dir, &TYPE_SIZE, || pages += 1);
    assert_eq!(got.len(), 1000);
    // Pages after the first: `pages` counts the pages before the last.
    let after = hits(&gw, before + pages);
    assert!(pages >= 1, "a 32 KiB reply holds fewer than 1,000 entries");
    assert_eq!(
        after - before,
        pages,
        "every page but the first a reactor hit"
    );
    // The same bytes as a worker's pages (a listing after a change goes to one).
    v3.create(&dir, b"zzz");
    let fresh = listing4_of(&mut v4, &dir, &TYPE_SIZE, || {});
    for (name, fattr) in &got {
        assert_eq!(fresh.get(name), Some(fattr), "{name}");
    }
}
