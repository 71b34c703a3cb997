//! Listings of directories the gateway filled itself (`gateway::cache::dirs`:
//! `start_empty`, `made`; docs/architecture.md §5 "Listings"): a directory made by
//! MKDIR and filled by CREATE and MKDIR is listed on the reactor from the first
//! READDIRPLUS, and that listing is the one a worker gives (names, cookies, sizes,
//! verifier: RFC 1813 §3.3.17). Every change the reactor's run did not apply — a
//! remove, a rename in or out, a create by another connection (or reactor), a file
//! made behind the gateway's back in the `fs` directory (after `ATTR_TTL`) — is in
//! the next listing; a listing interrupted by creates resumes from its cookies with
//! no name lost or shown twice (§3.3.16/17: cookies stay valid, the verifier too).
//! The same over NFSv4.1 (RFC 8881 §18.23): a directory made by CREATE and filled by
//! OPEN is listed on the reactor from the first READDIR, each entry's attributes a
//! GETATTR's; removes and creates are in the next listing; a created name that is
//! another export's root (§7.7) is the worker's to show.

mod common;
#[path = "common/nfs4_client.rs"]
mod nfs4_client;

use common::v4::enc;
use gateway::config::Config;
use gateway::server::Server;
use nfs4_client::OP_READDIR;
use nfs4_client::{after_seq, expect_op, Claim, How, Tcp41, V3};
use nfs4_client::{ACCESS_BOTH, CURRENT, DENY_NONE, NFS4_OK, WANT_NO_DELEG};
use nfs4_client::{OP_CREATE, OP_GETATTR, OP_GETFH, OP_LOOKUP, OP_OPEN, OP_PUTFH};
use nfs_wire::nfs3::{NFSPROC3_MKDIR, NFSPROC3_READDIRPLUS, NFSPROC3_REMOVE, NFSPROC3_RENAME};
use nfs_wire::v3call::{self, Call, DirPage};
use nfs_wire::{v3more, NFS_PROGRAM};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// `cache::ATTR_TTL`, and a margin.
const TTL: Duration = Duration::from_millis(1100);
/// `cache::STALE_MAX`: how long past `ATTR_TTL` a listing may still be answered
/// while one revalidation runs.
const STALE: Duration = Duration::from_secs(2);

/// A gateway on a fresh `fs` directory, two reactors; shut down on drop.
struct Gw {
    server: Option<Server>,
    data: PathBuf,
    _dir: tempfile::TempDir,
}

impl Gw {
    fn start() -> Gw {
        Gw::start_with("")
    }

    /// A gateway whose configuration ends with `more` (more exports).
    fn start_with(more: &str) -> Gw {
        Gw::start_on("0, 1", more)
    }

    /// `start_with` on reactors `cores`.
    fn start_on(cores: &str, more: &str) -> Gw {
        let dir = tempfile::tempdir().unwrap();
        let (data, state) = (dir.path().join("data"), dir.path().join("state"));
        std::fs::create_dir_all(&data).unwrap();
        std::fs::create_dir_all(&state).unwrap();
        let text = format!(
            "[engine]\ncores = [{cores}]\nidle = \"adaptive\"\nhugepages = \"off\"\n\
             [pools]\nsmall = 256\nmedium = 32\nlarge = 8\n\
             [tcp]\nlisten = \"127.0.0.1:0\"\n\
             [rdma]\nprovider = \"off\"\n\
             [backend]\nkind = \"fs\"\nroot = \"{}\"\nworkers = 2\n\
             [state]\ndir = \"{}\"\n\
             [[exports]]\npath = \"/\"\nclients = [\"0.0.0.0/0\"]\nsquash = \"none\"\n{more}",
            data.display(),
            state.display()
        );
        let server = Server::start(&Config::parse(&text).unwrap()).unwrap();
        Gw {
            server: Some(server),
            data,
            _dir: dir,
        }
    }

    fn v3(&self) -> V3 {
        V3::connect(self.server.as_ref().unwrap().local_addr())
    }

    fn v4(&self, owner: &[u8]) -> Tcp41 {
        Tcp41::ready(self.server.as_ref().unwrap().local_addr(), owner)
    }

    /// Cache hits of all reactors, once they published them.
    fn hits(&self) -> u64 {
        std::thread::sleep(Duration::from_millis(50));
        let src = self.server.as_ref().unwrap().stats_source();
        let mut out = String::new();
        gateway::stats::exposition::render(&src, &mut out);
        out.lines()
            .filter(|l| l.starts_with("nfsgw_cache_hits_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    /// Calls each reactor ran (every program), once they published them.
    fn calls_by_reactor(&self) -> Vec<u64> {
        std::thread::sleep(Duration::from_millis(50));
        let src = self.server.as_ref().unwrap().stats_source();
        let mut out = String::new();
        gateway::stats::exposition::render(&src, &mut out);
        let mut by = vec![0u64; 2];
        for l in out.lines() {
            let Some(rest) = l.strip_prefix("nfsgw_ops_total{reactor=\"") else {
                continue;
            };
            let r: usize = rest.split('"').next().unwrap().parse().unwrap();
            by[r] += l.rsplit(' ').next().unwrap().parse::<u64>().unwrap();
        }
        by
    }

    /// Two connections made by `connect`, one on each reactor (the kernel spreads
    /// connections over the reactors' `SO_REUSEPORT` listeners by their addresses):
    /// a connection's reactor is the one whose call count its `probe` moves.
    fn one_per_reactor<C>(&self, connect: impl Fn() -> C, probe: impl Fn(&mut C)) -> (C, C) {
        let mut on: [Option<C>; 2] = [None, None];
        for _ in 0..64 {
            let mut c = connect();
            let before = self.calls_by_reactor();
            probe(&mut c);
            let after = self.calls_by_reactor();
            let r = (0..2)
                .find(|&r| after[r] > before[r])
                .expect("a reactor ran it");
            on[r].get_or_insert(c);
            if let [Some(_), Some(_)] = &on {
                let [a, b] = on;
                return (a.unwrap(), b.unwrap());
            }
        }
        panic!("64 connections, all on one reactor");
    }
}

impl Drop for Gw {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            let _ = s.shutdown();
        }
    }
}

fn call(v3: &mut V3, proc_: u32, c: Call) -> Vec<u8> {
    v3.call(NFS_PROGRAM, proc_, &enc(|w| c.args(w).unwrap()))
}

fn mkdir(v3: &mut V3, dir: &[u8], name: &str) -> Vec<u8> {
    v3call::parse_mkdir(&call(v3, NFSPROC3_MKDIR, Call::Mkdir(dir, name))).expect("MKDIR")
}

/// CREATE then a FILE_SYNC WRITE of `len` bytes (bench md's create).
fn file(v3: &mut V3, dir: &[u8], name: &str, len: usize) {
    let fh = v3.create(dir, name.as_bytes());
    assert_eq!(v3.write(&fh, &vec![b'x'; len]), 0, "WRITE {name}");
}

fn remove(v3: &mut V3, dir: &[u8], name: &str) {
    let rep = call(v3, NFSPROC3_REMOVE, Call::Remove(dir, name));
    assert_eq!(v3call::status(&rep), 0, "REMOVE {name}");
}

fn rename(v3: &mut V3, (from, a): (&[u8], &str), (to, b): (&[u8], &str)) {
    let mut args = v3more::dirop_args(from, a.as_bytes());
    args.extend(v3more::dirop_args(to, b.as_bytes()));
    let rep = v3.call(NFS_PROGRAM, NFSPROC3_RENAME, &args);
    assert_eq!(v3call::status(&rep), 0, "RENAME {a} -> {b}");
}

fn page(v3: &mut V3, dir: &[u8], cookie: u64, verf: [u8; 8]) -> DirPage {
    let rep = call(
        v3,
        NFSPROC3_READDIRPLUS,
        Call::ReaddirplusAt(dir, cookie, verf),
    );
    v3call::parse_readdirplus(&rep).expect("READDIRPLUS")
}

/// A READDIRPLUS page of at most `maxcount` bytes (RFC 1813 §3.3.17).
fn page_of(v3: &mut V3, dir: &[u8], cookie: u64, verf: [u8; 8], maxcount: u32) -> DirPage {
    let args = enc(|w| {
        w.opaque_var(dir).unwrap();
        w.u64(cookie).unwrap();
        w.opaque_fixed(&verf).unwrap();
        w.u32(maxcount / 8).unwrap();
        w.u32(maxcount).unwrap();
    });
    let rep = v3.call(NFS_PROGRAM, NFSPROC3_READDIRPLUS, &args);
    v3call::parse_readdirplus(&rep).expect("READDIRPLUS")
}

/// One entry as a listing shows it: cookie and size.
type Listing = BTreeMap<String, (u64, Option<u64>)>;

/// The whole listing of `dir` ("." and ".." left out), page after page, and its
/// verifier and page count.
fn listing(v3: &mut V3, dir: &[u8]) -> (Listing, [u8; 8], usize) {
    listing_of(v3, dir, 32768)
}

fn listing_of(v3: &mut V3, dir: &[u8], maxcount: u32) -> (Listing, [u8; 8], usize) {
    let (mut cookie, mut verf, mut out, mut pages) = (0, [0; 8], Listing::new(), 0);
    loop {
        let p = page_of(v3, dir, cookie, verf, maxcount);
        pages += 1;
        for e in &p.entries {
            let name = String::from_utf8(e.name.clone()).unwrap();
            if name != "." && name != ".." {
                assert!(
                    out.insert(name, (e.cookie, e.size)).is_none(),
                    "a name twice"
                );
            }
        }
        if p.eof {
            return (out, p.verf, pages);
        }
        cookie = p.entries.last().expect("a page that ends nothing").cookie;
        verf = p.verf;
    }
}

fn names(l: &Listing) -> Vec<&str> {
    l.keys().map(|k| k.as_str()).collect()
}

#[test]
fn a_directory_filled_through_the_gateway_is_listed_on_the_reactor_as_a_worker_lists_it() {
    let gw = gw_started();
    let mut v3 = gw.v3();
    let root = v3.mount_root();
    let made = Instant::now();
    let d = mkdir(&mut v3, &root, "filled");
    // Pages of 4 KiB replies (about 20 entries); names out of key order; a
    // subdirectory whose key ("sub/") sorts after the file "sub-1".
    for i in (0..60).rev() {
        file(&mut v3, &d, &format!("f{i:03}"), i % 7 + 1);
    }
    mkdir(&mut v3, &d, "sub");
    file(&mut v3, &d, "sub-1", 3);
    let before = gw.hits();
    let (fast, verf, pages) = listing_of(&mut v3, &d, 4096);
    let fresh = made.elapsed() < Duration::from_millis(900);
    let hits = gw.hits() - before;
    // The worker's listing of the same directory, once the run expired.
    std::thread::sleep(TTL);
    let (slow, slow_verf, _) = listing_of(&mut v3, &d, 4096);
    assert_eq!(fast, slow, "the reactor's listing is the worker's");
    assert_eq!(verf, slow_verf);
    assert_eq!(fast.len(), 62);
    assert_eq!(fast["f006"].1, Some(7));
    let order: Vec<&str> = names(&fast);
    assert!(order.contains(&"sub") && order.contains(&"sub-1"));
    // The first listing was the reactor's, every page, when it came within
    // ATTR_TTL of the MKDIR (a loaded machine may take longer to create them).
    if fresh {
        assert!(pages >= 3);
        assert_eq!(
            hits, pages as u64,
            "every page of the first listing on the reactor"
        );
    } else {
        eprintln!("skipped the hit count: the creates took longer than ATTR_TTL");
    }
    // The run a worker's listing started takes a create too: the next listing is
    // the reactor's and shows it.
    let listed = Instant::now();
    let (again, _, _) = listing_of(&mut v3, &d, 4096);
    assert_eq!(again, slow);
    file(&mut v3, &d, "late", 1);
    let before = gw.hits();
    let (after, _, pages) = listing_of(&mut v3, &d, 4096);
    let fresh = listed.elapsed() < Duration::from_millis(900);
    let hits = gw.hits() - before;
    assert_eq!(after.len(), 63);
    assert_eq!(after["late"].1, Some(1));
    if fresh {
        assert_eq!(hits, pages as u64, "a listed run takes the create");
    }
}

fn gw_started() -> Gw {
    Gw::start()
}

/// A directory of `n` files made now, listed once from the reactor's run: asserted
/// (a hit) when the listing came within 0.9 s of the MKDIR, so the change a test
/// makes next meets a live run, which must then stop answering. On a machine slow
/// enough to miss that, the run had expired and the test says so (it still checks
/// the listings, with less power).
fn small(gw: &Gw, v3: &mut V3, root: &[u8], name: &str, n: usize) -> Vec<u8> {
    let made = Instant::now();
    let d = mkdir(v3, root, name);
    for i in 0..n {
        file(v3, &d, &format!("f{i}"), 4);
    }
    let before = gw.hits();
    let (l, _, _) = listing(v3, &d);
    let fresh = made.elapsed() < Duration::from_millis(900);
    let hits = gw.hits() - before;
    assert_eq!(l.len(), n);
    if fresh {
        assert!(
            hits >= 1,
            "{name}: the first listing is the run's (a reactor hit)"
        );
    } else {
        eprintln!(
            "{name}: listed {:?} after the MKDIR: the run had expired",
            made.elapsed()
        );
    }
    d
}

#[test]
fn every_change_the_run_did_not_make_is_in_the_next_listing() {
    let gw = gw_started();
    let mut v3 = gw.v3();
    let root = v3.mount_root();

    // A remove.
    let d = small(&gw, &mut v3, &root, "rm", 20);
    remove(&mut v3, &d, "f3");
    let (l, _, _) = listing(&mut v3, &d);
    assert!(!l.contains_key("f3") && l.len() == 19);

    // Renames out of and into the directory.
    let d = small(&gw, &mut v3, &root, "mv", 20);
    let other = mkdir(&mut v3, &root, "elsewhere");
    file(&mut v3, &other, "g1", 4);
    rename(&mut v3, (&d, "f4"), (&other, "f4"));
    let (l, _, _) = listing(&mut v3, &d);
    assert!(!l.contains_key("f4"));
    rename(&mut v3, (&other, "g1"), (&d, "g1"));
    let (l, _, _) = listing(&mut v3, &d);
    assert!(l.contains_key("g1") && l.len() == 20);
    // A rename inside it.
    rename(&mut v3, (&d, "f5"), (&d, "f5b"));
    let (l, _, _) = listing(&mut v3, &d);
    assert!(l.contains_key("f5b") && !l.contains_key("f5"));

    // Creates by other connections (on either reactor).
    let d = small(&gw, &mut v3, &root, "others", 20);
    for k in 0..4 {
        let mut other = gw.v3();
        file(&mut other, &d, &format!("other{k}"), 9);
        let (l, _, _) = listing(&mut v3, &d);
        assert_eq!(
            l[&format!("other{k}")].1,
            Some(9),
            "connection {k}'s create"
        );
        assert_eq!(l.len(), 21 + k);
    }

    // A write by another connection to a listed file: its new size.
    let d = small(&gw, &mut v3, &root, "written", 5);
    let mut other = gw.v3();
    let fh = other.create(&d, b"f2");
    assert_eq!(other.write(&fh, b"0123456789"), 0);
    let (l, _, _) = listing(&mut v3, &d);
    assert_eq!(l["f2"].1, Some(10));
}

/// A directory made on one reactor and filled by connections on both (several
/// clients, or one client's `nconnect` connections) is listed from the reactor's run
/// on either: each reactor's run applies every create, whichever reactor's connection
/// made it (`worker::tell_other_reactors`). Without that, each reactor's run missed
/// the other's creates and every page of a first listing was a worker's. Over NFSv3
/// a page is the reactor's where that reactor holds its entries' attributes (a
/// WRITE's reply teaches them to its own reactor only): at least the first page on
/// the creating connection's, the other's after a worker page refreshed them.
#[test]
fn a_directory_filled_from_both_reactors_is_listed_on_the_reactor_from_either() {
    let gw = gw_started();
    let root = gw.v3().mount_root();
    let getattr = |c: &mut V3| {
        let rep = c.call(NFS_PROGRAM, 1, &enc(|w| w.opaque_var(&root).unwrap()));
        assert_eq!(v3call::status(&rep), 0, "GETATTR");
    };
    let (mut a, mut b) = gw.one_per_reactor(|| gw.v3(), getattr);
    let made = Instant::now();
    let d = mkdir(&mut a, &root, "shared");
    for i in 0..30 {
        file(&mut a, &d, &format!("a{i:02}"), 1);
        file(&mut b, &d, &format!("b{i:02}"), 2);
    }
    mkdir(&mut b, &d, "sub-b");
    let mut seen = Vec::new();
    for (who, v3) in [("a", &mut a), ("b", &mut b)] {
        let before = gw.hits();
        let (l, _, pages) = listing_of(v3, &d, 4096);
        let hits = gw.hits() - before;
        assert_eq!(l.len(), 61, "{who}: every name");
        assert_eq!((l["a07"].1, l["b07"].1), (Some(1), Some(2)), "{who}: sizes");
        if made.elapsed() < Duration::from_millis(900) {
            assert!(pages >= 3);
            assert!(
                hits >= 1,
                "{who}: {hits} of {pages} pages from its reactor's run"
            );
        } else {
            eprintln!("{who}: skipped the hit count: the creates took longer than ATTR_TTL");
        }
        seen.push(l);
    }
    assert_eq!(seen[0], seen[1], "both reactors list the same");
    // The worker's listing, once the runs expired: the same.
    std::thread::sleep(TTL + STALE);
    let (slow, _, _) = listing_of(&mut b, &d, 4096);
    assert_eq!(seen[0], slow, "the reactors' listing is the worker's");
}

#[test]
fn a_file_made_behind_the_gateways_back_is_listed_after_attr_ttl() {
    let gw = gw_started();
    let mut v3 = gw.v3();
    let root = v3.mount_root();
    let d = small(&gw, &mut v3, &root, "behind", 10);
    std::fs::write(gw.data.join("behind").join("planted"), b"abc").unwrap();
    std::thread::sleep(TTL);
    // Past ATTR_TTL the reactor may answer once more from what it held while one
    // worker lists the directory again (stale-while-revalidate, as for attributes:
    // `cache::STALE_MAX`, 2 s more at most); the new name shows as soon as that page
    // is back, and never later.
    let until = Instant::now() + Duration::from_secs(2);
    let l = loop {
        let (l, _, _) = listing(&mut v3, &d);
        if l.contains_key("planted") || Instant::now() > until {
            break l;
        }
        assert_eq!(l.len(), 10, "the names before: {:?}", names(&l));
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(l.contains_key("planted"), "{:?}", names(&l));
    assert_eq!(l.len(), 11);
}

#[test]
fn a_listing_interrupted_by_creates_resumes_from_its_cookies() {
    let gw = gw_started();
    let mut v3 = gw.v3();
    let root = v3.mount_root();
    let d = mkdir(&mut v3, &root, "interrupted");
    for i in 0..300 {
        file(&mut v3, &d, &format!("f{i:03}"), 2);
    }
    let first = page(&mut v3, &d, 0, [0; 8]);
    assert!(!first.eof);
    let last = first.entries.last().unwrap().cookie;
    // Creates between the pages, before and after the resume point.
    for i in 0..300 {
        file(&mut v3, &d, &format!("f{i:03}x"), 2);
    }
    let mut seen: Vec<Vec<u8>> = first.entries.iter().map(|e| e.name.clone()).collect();
    let (mut cookie, verf) = (last, first.verf);
    loop {
        let p = page(&mut v3, &d, cookie, verf);
        assert_eq!(p.verf, verf, "the verifier does not move with creates");
        seen.extend(p.entries.iter().map(|e| e.name.clone()));
        if p.eof {
            break;
        }
        cookie = p.entries.last().unwrap().cookie;
    }
    let mut uniq = seen.clone();
    uniq.sort();
    uniq.dedup();
    assert_eq!(uniq.len(), seen.len(), "no name twice");
    for i in 0..300 {
        assert!(
            seen.contains(&format!("f{i:03}").into_bytes()),
            "f{i:03}, present all along, is listed"
        );
    }
    // Created ahead of the resume point: listed (the key order is the listing's).
    assert!(seen.contains(&b"f299x".to_vec()));
}

// ---- NFSv4.1 (RFC 8881): directories made by CREATE and filled by OPEN ------------
//
// bench md's NFSv4.1 COMPOUNDs: mkdir = PUTFH, CREATE (NF4DIR), GETFH; create =
// PUTFH, OPEN (create), [WRITE FILE_SYNC4,] CLOSE; readdir = PUTFH, READDIR. The
// first listing of such a directory is the reactor's (`nfs4::fast_dirs` from the
// run `start_empty` and `made` keep), and it is exactly the worker's: names,
// cookies, verifier, each entry's fattr4 byte for byte (a GETATTR of the entry).

/// What the Linux client asks in its READDIR but RDATTR_ERROR (so a GETATTR of the
/// entry asks the same): TYPE, CHANGE, SIZE, FSID, FILEHANDLE, FILEID; MODE,
/// NUMLINKS, OWNER, OWNER_GROUP, RAWDEV, SPACE_USED, TIME_ACCESS, TIME_METADATA,
/// TIME_MODIFY, MOUNTED_ON_FILEID.
const BITS4: [u32; 2] = [
    1 << 1 | 1 << 3 | 1 << 4 | 1 << 8 | 1 << 19 | 1 << 20,
    1 << 1 | 1 << 3 | 1 << 4 | 1 << 5 | 1 << 9 | 1 << 13 | 1 << 15 | 1 << 20 | 1 << 21 | 1 << 23,
];

/// CREATE of directory `name` in `dir` (bench md's mkdir): its handle.
fn mkdir4(v4: &mut Tcp41, dir: &[u8], name: &str) -> Vec<u8> {
    let (st, res) = v4.seq_run(|o| o.putfh(dir).create_obj(name.as_bytes(), None).getfh());
    assert_eq!(st, NFS4_OK, "CREATE {name}");
    let mut r = after_seq(&res);
    expect_op(&mut r, OP_PUTFH);
    expect_op(&mut r, OP_CREATE);
    r.skip(4 + 16).unwrap(); // change_info4
    let words = r.u32().unwrap() as usize;
    r.skip(4 * words).unwrap(); // attrset
    expect_op(&mut r, OP_GETFH);
    r.opaque_var(128).unwrap().to_vec()
}

/// OPEN creating `name` in `dir`, a FILE_SYNC4 WRITE of `len` bytes when `len` > 0,
/// CLOSE (bench md's create).
fn file4(v4: &mut Tcp41, dir: &[u8], name: &str, len: usize) {
    let id = v4.clientid;
    let data = vec![b'y'; len];
    let (st, res) = v4.seq_run(|o| {
        let o = o.putfh(dir).open(
            id,
            b"made-v4",
            ACCESS_BOTH | WANT_NO_DELEG,
            DENY_NONE,
            How::Unchecked,
            Claim::Null(name.as_bytes()),
        );
        let o = if len > 0 {
            o.write_stable(&CURRENT, 0, 2, &data)
        } else {
            o
        };
        o.close(&CURRENT)
    });
    assert_eq!(st, NFS4_OK, "OPEN {name}");
    let mut r = after_seq(&res);
    for op in [OP_PUTFH, OP_OPEN] {
        assert_eq!(expect_op(&mut r, op), NFS4_OK);
    }
}

fn remove4(v4: &mut Tcp41, dir: &[u8], name: &str) {
    let (st, _) = v4.seq_run(|o| o.putfh(dir).remove(name.as_bytes()));
    assert_eq!(st, NFS4_OK, "REMOVE {name}");
}

/// The fattr4 of `name` in `dir` (LOOKUP, GETATTR of `BITS4`), as bytes.
fn getattr4(v4: &mut Tcp41, dir: &[u8], name: &str) -> Vec<u8> {
    let (st, res) = v4.seq_run(|o| o.putfh(dir).lookup(name.as_bytes()).getattr(&BITS4));
    assert_eq!(st, NFS4_OK, "LOOKUP, GETATTR {name}");
    let mut r = after_seq(&res);
    expect_op(&mut r, OP_PUTFH);
    expect_op(&mut r, OP_LOOKUP);
    expect_op(&mut r, OP_GETATTR);
    let at = r.position();
    let words = r.u32().unwrap();
    for _ in 0..words {
        r.u32().unwrap();
    }
    r.opaque_var(4096).unwrap();
    res.body[at..r.position()].to_vec()
}

/// One READDIR4resok: the verifier, each entry's (cookie, name, fattr4 bytes), eof.
struct Page4 {
    verf: [u8; 8],
    entries: Vec<(u64, String, Vec<u8>)>,
    eof: bool,
}

/// `SEQUENCE, PUTFH, READDIR` of `dir` from `cookie` (the shape the reactor answers),
/// replies of at most `maxcount` bytes.
fn page4(v4: &mut Tcp41, dir: &[u8], cookie: u64, verf: [u8; 8], maxcount: u32) -> Page4 {
    let (_, res) = v4.seq_run(|o| {
        o.putfh(dir)
            .readdir(cookie, verf, maxcount, maxcount, &BITS4)
    });
    let mut r = after_seq(&res);
    assert_eq!(expect_op(&mut r, OP_PUTFH), NFS4_OK, "PUTFH");
    assert_eq!(
        expect_op(&mut r, OP_READDIR),
        NFS4_OK,
        "READDIR from {cookie}"
    );
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
        entries.push((cookie, name, res.body[at..r.position()].to_vec()));
    }
    let eof = r.u32().unwrap() == 1;
    Page4 { verf, entries, eof }
}

/// One entry as an NFSv4.1 listing shows it: cookie and fattr4.
type Listing4 = BTreeMap<String, (u64, Vec<u8>)>;

/// The whole NFSv4.1 listing of `dir` in replies of `maxcount` bytes: entries, the
/// verifier, pages.
fn listing4(v4: &mut Tcp41, dir: &[u8], maxcount: u32) -> (Listing4, [u8; 8], usize) {
    let (mut cookie, mut verf, mut out, mut pages) = (0, [0; 8], Listing4::new(), 0);
    loop {
        let p = page4(v4, dir, cookie, verf, maxcount);
        pages += 1;
        for (c, name, fattr) in &p.entries {
            assert!(name != "." && name != "..", "NFSv4 shows no dots");
            assert!(
                out.insert(name.clone(), (*c, fattr.clone())).is_none(),
                "{name} twice"
            );
        }
        if p.eof {
            return (out, p.verf, pages);
        }
        cookie = p.entries.last().expect("a page that ends nothing").0;
        verf = p.verf;
    }
}

/// Every entry's fattr4 is what a GETATTR of it answers.
fn each_as_getattr(v4: &mut Tcp41, dir: &[u8], l: &Listing4) {
    for (name, (_, fattr)) in l {
        assert_eq!(
            &getattr4(v4, dir, name),
            fattr,
            "{name}: the listing's attributes"
        );
    }
}

#[test]
fn a_directory_made_and_filled_over_nfsv41_is_listed_on_the_reactor_as_a_worker_lists_it() {
    let gw = gw_started();
    let root = gw.v3().mount_root();
    let mut v4 = gw.v4(b"made-v4-filled");
    let made = Instant::now();
    let d = mkdir4(&mut v4, &root, "filled4");
    // Names out of key order, every fifth file written (the rest empty), a
    // subdirectory whose key ("sub/") sorts after the file "sub-1".
    for i in (0..60).rev() {
        let len = if i % 5 == 0 { i % 7 + 1 } else { 0 };
        file4(&mut v4, &d, &format!("f{i:03}"), len);
    }
    mkdir4(&mut v4, &d, "sub");
    file4(&mut v4, &d, "sub-1", 3);
    let before = gw.hits();
    let (fast, verf, pages) = listing4(&mut v4, &d, 4096);
    let fresh = made.elapsed() < Duration::from_millis(900);
    let hits = gw.hits() - before;
    assert_eq!(fast.len(), 62);
    each_as_getattr(&mut v4, &d, &fast);
    // The worker's listing of the same directory, once the run expired.
    std::thread::sleep(TTL);
    let (slow, slow_verf, _) = listing4(&mut v4, &d, 4096);
    assert_eq!(fast, slow, "the reactor's listing is the worker's");
    assert_eq!(verf, slow_verf);
    if fresh {
        assert!(pages >= 3, "{pages} pages");
        assert_eq!(
            hits, pages as u64,
            "every page of the first NFSv4.1 listing on the reactor"
        );
    } else {
        eprintln!("skipped the hit count: the creates took longer than ATTR_TTL");
    }
}

/// `a_directory_filled_from_both_reactors_is_listed_on_the_reactor_from_either`
/// over NFSv4.1: a directory made by CREATE on one reactor, filled by OPENs from
/// sessions on both, listed on the reactor from either, each entry's attributes a
/// GETATTR's.
#[test]
fn an_nfsv41_directory_filled_from_both_reactors_is_listed_on_the_reactor_from_either() {
    let gw = gw_started();
    let root = gw.v3().mount_root();
    let n = std::cell::Cell::new(0u32);
    let connect = || {
        n.set(n.get() + 1);
        gw.v4(format!("made-v4-both-{}", n.get()).as_bytes())
    };
    let probe = |v4: &mut Tcp41| {
        page4(v4, &root, 0, [0; 8], 4096);
    };
    let (mut a, mut b) = gw.one_per_reactor(connect, probe);
    let made = Instant::now();
    let d = mkdir4(&mut a, &root, "shared4");
    for i in 0..30 {
        file4(&mut a, &d, &format!("a{i:02}"), 1);
        file4(&mut b, &d, &format!("b{i:02}"), 2);
    }
    mkdir4(&mut b, &d, "sub-b");
    let mut seen = Vec::new();
    for (who, v4) in [("a", &mut a), ("b", &mut b)] {
        let before = gw.hits();
        let (l, _, pages) = listing4(v4, &d, 4096);
        let hits = gw.hits() - before;
        assert_eq!(l.len(), 61, "{who}: every name");
        if made.elapsed() < Duration::from_millis(900) {
            assert!(pages >= 3, "{pages} pages");
            assert_eq!(
                hits, pages as u64,
                "{who}: every page of the first listing on its reactor"
            );
        } else {
            eprintln!("{who}: skipped the hit count: the creates took longer than ATTR_TTL");
        }
        seen.push(l);
    }
    assert_eq!(seen[0], seen[1], "both reactors list the same");
    each_as_getattr(&mut a, &d, &seen[0]);
    std::thread::sleep(TTL + STALE);
    let (slow, _, _) = listing4(&mut b, &d, 4096);
    assert_eq!(seen[0], slow, "the reactors' listing is the worker's");
}

/// Past `ATTR_TTL` an NFSv4.1 listing is answered from the reactor's run while one
/// worker lists the first page again behind it (stale-while-revalidate, as NFSv3's:
/// `dispatch::listing_revalidation`), whose names renew the run, which stays
/// NFSv4.1's; a name made behind the gateway's back shows once that page is back, and
/// never later than `STALE_MAX` past the TTL.
#[test]
fn an_nfsv41_listing_past_the_ttl_is_the_reactors_while_one_worker_revalidates_it() {
    let gw = gw_started();
    let root = gw.v3().mount_root();
    let mut v4 = gw.v4(b"made-v4-stale");
    let d = mkdir4(&mut v4, &root, "stale4");
    for i in 0..100 {
        file4(&mut v4, &d, &format!("f{i:03}"), 1 + i % 3);
    }
    // First listed past the TTL: the created entries' attributes (each OPEN's,
    // `learned_made`) are as old as the run, and shown while it is revalidated.
    std::thread::sleep(TTL);
    let before = gw.hits();
    let (stale, _, pages) = listing4(&mut v4, &d, 4096);
    let hits = gw.hits() - before;
    assert_eq!(stale.len(), 100);
    assert!(pages >= 3, "{pages} pages");
    assert_eq!(
        hits, pages as u64,
        "every page past the TTL from the reactor's run"
    );
    each_as_getattr(&mut v4, &d, &stale);
    // Renewed (its names unchanged): listed again, the reactor's, still NFSv4.1's.
    std::thread::sleep(Duration::from_millis(100));
    let before = gw.hits();
    let (renewed, _, pages) = listing4(&mut v4, &d, 4096);
    assert_eq!(renewed, stale);
    assert_eq!(
        gw.hits() - before,
        pages as u64,
        "the renewed run answers NFSv4.1"
    );
    // Once every run expired, the workers' listing: the same.
    std::thread::sleep(TTL + STALE);
    let (young, _, _) = listing4(&mut v4, &d, 4096);
    assert_eq!(young, stale, "the reactor's listings are the worker's");

    std::fs::write(gw.data.join("stale4").join("planted"), b"abc").unwrap();
    std::thread::sleep(TTL);
    let until = Instant::now() + STALE + Duration::from_millis(500);
    let l = loop {
        let (l, _, _) = listing4(&mut v4, &d, 4096);
        if l.contains_key("planted") || Instant::now() > until {
            break l;
        }
        assert_eq!(l.len(), 100, "the names before");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        l.contains_key("planted"),
        "a name made behind the gateway's back, shown"
    );
    assert_eq!(l.len(), 101);
}

#[test]
fn nfsv41_listings_of_a_made_directory_show_every_remove_and_create() {
    let gw = gw_started();
    let root = gw.v3().mount_root();
    let mut v4 = gw.v4(b"made-v4-changes");
    let made = Instant::now();
    let d = mkdir4(&mut v4, &root, "changed4");
    for i in 0..20 {
        file4(
            &mut v4,
            &d,
            &format!("f{i}"),
            if i % 4 == 0 { 5 } else { 0 },
        );
    }
    let before = gw.hits();
    let (l, _, pages) = listing4(&mut v4, &d, 32 << 10);
    let fresh = made.elapsed() < Duration::from_millis(900);
    let hits = gw.hits() - before;
    assert_eq!(l.len(), 20);
    if fresh {
        assert_eq!(hits, pages as u64, "the first listing is the run's");
    }
    // A remove the run did not make: the next listing has it (a worker's, or the
    // reactor's after one).
    remove4(&mut v4, &d, "f3");
    let (l, _, _) = listing4(&mut v4, &d, 32 << 10);
    assert!(!l.contains_key("f3") && l.len() == 19, "{:?}", l.keys());
    each_as_getattr(&mut v4, &d, &l);
    // A create after it, with and without data: listed with its attributes.
    file4(&mut v4, &d, "late", 7);
    file4(&mut v4, &d, "empty", 0);
    let (l, _, _) = listing4(&mut v4, &d, 32 << 10);
    assert!(l.contains_key("late") && l.contains_key("empty") && l.len() == 21);
    each_as_getattr(&mut v4, &d, &l);
    // And a directory made in it, then removed.
    mkdir4(&mut v4, &d, "subdir");
    let (l, _, _) = listing4(&mut v4, &d, 32 << 10);
    assert!(l.contains_key("subdir") && l.len() == 22);
    each_as_getattr(&mut v4, &d, &l);
    remove4(&mut v4, &d, "subdir");
    let (l, _, _) = listing4(&mut v4, &d, 32 << 10);
    assert!(!l.contains_key("subdir") && l.len() == 21);
}

#[test]
fn a_made_directory_that_is_another_exports_root_is_shown_as_that_root_over_nfsv41() {
    // "/top/nested" is the store's "top/nested/": a directory a client makes there
    // is that export's root, which NFSv4.1's READDIR shows with the root's
    // attributes (RFC 8881 §7.7), not as a created entry of "top".
    let gw = Gw::start_with(
        "[[exports]]\npath = \"/top/nested\"\nclients = [\"0.0.0.0/0\"]\nsquash = \"none\"\n",
    );
    let root = gw.v3().mount_root();
    let mut v4 = gw.v4(b"made-v4-roots");
    // The store has the nested export's directories from the start: removed, then
    // made again by the client, so "top" is a run its CREATE started.
    let (st, res) = v4.seq_run(|o| o.putfh(&root).lookup(b"top").getfh());
    assert_eq!(st, NFS4_OK, "LOOKUP top");
    let mut r = after_seq(&res);
    expect_op(&mut r, OP_PUTFH);
    expect_op(&mut r, OP_LOOKUP);
    expect_op(&mut r, OP_GETFH);
    let old = r.opaque_var(128).unwrap().to_vec();
    remove4(&mut v4, &old, "nested");
    remove4(&mut v4, &root, "top");
    let top = mkdir4(&mut v4, &root, "top");
    mkdir4(&mut v4, &top, "nested");
    file4(&mut v4, &top, "plain", 4);
    let before = gw.hits();
    let (l, _, _) = listing4(&mut v4, &top, 32 << 10);
    let hits = gw.hits() - before;
    assert_eq!(l.len(), 2);
    assert_eq!(
        hits, 0,
        "a run with created names is not NFSv4.1's with two exports"
    );
    // The LOOKUP crosses into the nested export: its root's attributes (another
    // fsid and handle than a created entry of "top" would show).
    each_as_getattr(&mut v4, &top, &l);
    assert_ne!(l["nested"].1, l["plain"].1);
}

#[test]
fn concurrent_nfsv41_creates_keep_the_run_and_its_listing_exact() {
    // One reactor: every connection's creates reach the run (a create another
    // reactor's connection made leaves it short, by design). Concurrent creates
    // leave the table no current attributes of the directory (each create's are
    // kept only when nothing raced with it): NFSv4.1 does not need them.
    let gw = Gw::start_on("0", "");
    let root = gw.v3().mount_root();
    let mut v4 = gw.v4(b"made-v4-conc");
    let made = Instant::now();
    let d = mkdir4(&mut v4, &root, "concurrent4");
    std::thread::scope(|s| {
        for t in 0..4 {
            let (gw, d) = (&gw, &d);
            s.spawn(move || {
                let mut c = gw.v4(format!("made-v4-conc-{t}").as_bytes());
                for i in 0..25 {
                    file4(&mut c, d, &format!("t{t}.{i:02}"), (i % 3) * 100);
                }
            });
        }
    });
    let before = gw.hits();
    let (fast, verf, pages) = listing4(&mut v4, &d, 32 << 10);
    let fresh = made.elapsed() < Duration::from_millis(900);
    let hits = gw.hits() - before;
    assert_eq!(fast.len(), 100);
    each_as_getattr(&mut v4, &d, &fast);
    std::thread::sleep(TTL);
    let (slow, slow_verf, _) = listing4(&mut v4, &d, 32 << 10);
    assert_eq!(fast, slow, "the reactor's listing is the worker's");
    assert_eq!(verf, slow_verf);
    if fresh {
        assert_eq!(hits, pages as u64, "the first listing is the run's");
    } else {
        eprintln!("skipped the hit count: the creates took longer than ATTR_TTL");
    }
}
