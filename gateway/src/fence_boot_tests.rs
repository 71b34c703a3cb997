//! The boot epoch (issue 27): its read, cache and move over the memory store's
//! conditional writes, and what the data servers' check makes of ids of an earlier
//! boot.

use super::super::{admit_cached, admit_file, Epoch, Fence, WINDOW};
use super::*;
use crate::backend::memory::MemoryBackend;
use crate::backend::Backend;
use crate::export::{Caller, Groups};
use crate::fs::{Attr, FileKind, NfsTime, Status};
use engine::rpc::{AuthSys, Cred};
use std::sync::Arc;

fn attr(fileid: u64) -> Attr {
    let t = NfsTime::default();
    Attr {
        kind: FileKind::Reg,
        mode: 0o600,
        nlink: 1,
        uid: 1000,
        gid: 100,
        size: 0,
        used: 0,
        rdev: (0, 0),
        fsid: 1,
        fileid,
        atime: t,
        mtime: t,
        ctime: t,
        change: 0,
    }
}

fn who() -> Caller {
    Caller {
        uid: 65534,
        gid: 65534,
        gids: Groups::NONE,
        writable: true,
    }
}

/// Epoch `n` as an object of before nonces has it (nonce 0).
fn e(n: u64) -> Epoch {
    Epoch { n, nonce: 0 }
}

fn cred((u, g): (u32, u32)) -> Cred {
    Cred::Sys(AuthSys::new(u, g, &[]))
}

/// A data server's verdict on a worker: the owner's uid, or the refusal.
fn admit(f: &Fence, ids: (u32, u32), fileid: u64) -> Result<u32, Status> {
    admit_file(Some(f), &cred(ids), who(), &attr(fileid)).map(|(c, _)| c.uid)
}

/// The ids a metadata server grants for `fileid` now (as LAYOUTGET: the epoch read).
fn granted(mds: &Fence, fileid: u64) -> (u32, u32) {
    let e = mds.read(fileid).unwrap();
    mds.ids(fileid, e, 0)
}

fn stores() -> (Arc<dyn Backend>, Fence) {
    let store: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    let mds = Fence::new(store.clone(), [1; 32], WINDOW);
    (store, mds)
}

#[test]
fn a_boot_move_fences_every_earlier_id_within_the_window() {
    let (store, mds) = stores();
    let ds = Fence::new(store, [1; 32], Duration::from_millis(150));
    let old = granted(&mds, 5);
    let other_file = granted(&mds, 6);
    assert_eq!(admit(&ds, old, 5), Ok(1000), "a layout's ids work");
    assert_eq!(admit(&mds, old, 5), Ok(1000));
    let asked = Instant::now();
    assert_eq!(mds.bump_boot().unwrap(), (1, false));
    assert_eq!(mds.boot_epoch().unwrap(), 1);
    // Written through at the gateway that moved it.
    assert_eq!(admit(&mds, old, 5), Err(Status::Acces));
    // A data server that read the old boot trusts it for its window at most.
    if asked.elapsed() < Duration::from_millis(100) {
        assert_eq!(admit(&ds, old, 5), Ok(1000), "inside the window");
    }
    std::thread::sleep(Duration::from_millis(160));
    assert_eq!(admit(&ds, old, 5), Err(Status::Acces), "after it");
    assert_eq!(
        admit(&ds, other_file, 6),
        Err(Status::Acces),
        "every file's, read or not"
    );
    let new = granted(&mds, 5);
    assert_ne!(new, old, "the file's epoch did not move; the ids did");
    assert_eq!(admit(&ds, new, 5), Ok(1000));
    assert_eq!(ds.boot_epoch().unwrap(), 1);
}

#[test]
fn a_reactor_sends_a_call_to_a_worker_once_the_boot_read_is_a_window_old() {
    let (store, mds) = stores();
    let ds = Fence::new(store, [1; 32], Duration::from_millis(100));
    let old = granted(&mds, 9);
    assert_eq!(admit(&ds, old, 9), Ok(1000), "cached with its pair");
    let hit = admit_cached(Some(&ds), &cred(old), who(), &attr(9));
    assert_eq!(
        hit.flatten().map(|c| c.uid),
        Some(1000),
        "O(1) on the reactor"
    );
    mds.bump_boot().unwrap();
    std::thread::sleep(Duration::from_millis(110));
    assert!(
        admit_cached(Some(&ds), &cred(old), who(), &attr(9)).is_none(),
        "stale: to a worker, which reads the boot epoch"
    );
    assert_eq!(admit(&ds, old, 9), Err(Status::Acces));
}

#[test]
fn a_file_entry_is_trusted_no_longer_than_the_boot_read_it_was_made_with() {
    let (store, mds) = stores();
    let ds = Fence::new(store, [1; 32], Duration::from_millis(200));
    let old = granted(&mds, 3);
    assert_eq!(ds.boot_epoch().unwrap(), 0, "boot read at t0");
    std::thread::sleep(Duration::from_millis(120));
    // The file's epoch read at t0 + 120 ms, the boot's cached from t0.
    assert_eq!(admit(&ds, old, 3), Ok(1000));
    mds.bump_boot().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    // t0 + 220 ms: the boot read is a window old, so the file's entry is too.
    assert_eq!(ds.cached(3), None);
    assert_eq!(admit(&ds, old, 3), Err(Status::Acces));
}

#[test]
fn a_boot_counts_as_used_once_a_layout_may_have_been_granted_at_it_or_before() {
    let store: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    let window = Duration::from_millis(300);
    let mds = Fence::new(store.clone(), [1; 32], window);
    assert_eq!(mds.bump_boot().unwrap(), (1, false), "a fresh store");
    assert_eq!(mds.bump_boot().unwrap(), (2, false), "nothing granted at 1");
    let checked = Instant::now();
    assert_eq!(
        mds.grant_ids(7, e(0), 0).unwrap(),
        Some(mds.ids(7, e(0), 0))
    );
    let cas = store.cas().unwrap();
    let (data, v) = cas.cas_get(NAME).unwrap().unwrap();
    assert_eq!(parse(&data).unwrap(), (mds.boot.last().unwrap().0, true));
    assert!(data.starts_with(b"2 1 "), "with its nonce");
    assert!(matches!(mds.mark_used().unwrap(), Grant::At(b) if b.n == 2));
    assert_eq!(cas.cas_get(NAME).unwrap().unwrap().1, v, "once per boot");
    // Another gateway's start (a takeover) finds it used, and carries the mark: a
    // second move inside the first one's window (a restart loop, a retried
    // takeover) must wait the window out too.
    let successor = Fence::new(store.clone(), [1; 32], WINDOW);
    assert_eq!(successor.bump_boot().unwrap(), (3, true));
    assert!(cas.cas_get(NAME).unwrap().unwrap().0.starts_with(b"3 1 "));
    // The previous holder's grants stay at the boot it checked for a window at most
    // (as a data server trusts an epoch it read); then it reads the store again.
    // (Timed checks only where this ran inside the window: a loaded machine.)
    let g = mds.mark_used().unwrap();
    if checked.elapsed() < window {
        assert!(matches!(g, Grant::At(b) if b.n == 2));
    }
    std::thread::sleep(window);
    let adopted = Instant::now();
    assert_eq!(
        mds.grant_ids(7, e(0), 0).unwrap(),
        None,
        "adopted: a window first"
    );
    assert_eq!(mds.boot_epoch().unwrap(), 3, "its data server role sees it");
    let e = mds.read(7).unwrap();
    let g = mds.grant_ids(7, e, 0).unwrap();
    if adopted.elapsed() < window {
        assert_eq!(g, None, "no grant inside the window");
    }
    std::thread::sleep(window);
    let ids = mds.grant_ids(7, e, 0).unwrap();
    assert!(cas.cas_get(NAME).unwrap().unwrap().0.starts_with(b"3 1 "));
    assert_eq!(ids, Some(successor.ids(7, e, 0)), "the new boot's ids");
    assert_eq!(
        successor.bump_boot().unwrap(),
        (4, true),
        "carried: still waits"
    );
}

#[test]
fn a_corrupt_boot_object_is_an_error_not_boot_zero() {
    let (store, mds) = stores();
    for junk in [
        &b"junk"[..],
        b"7",
        b"7 2",
        b"",
        b"7 1 zz",
        b"7 1 00000000000000ab x",
        b"7 1 ab",
        b"+7 1",
        b"7 +1",
        b"7 1 +00000000000000a",
        b"7 1 00000000000000AB",
        b"7 1 0000000000000000",
        b"7 1 -00000000000000a",
    ] {
        let cas = store.cas().unwrap();
        let v = cas.cas_get(NAME).unwrap().map(|(_, v)| v);
        cas.cas_put(NAME, junk, v.as_deref()).unwrap();
        assert!(mds.bump_boot().is_err(), "{junk:?}");
        let fresh = Fence::new(store.clone(), [1; 32], WINDOW);
        assert!(fresh.mark_used().is_err(), "{junk:?}");
        let ds = Fence::new(store.clone(), [1; 32], WINDOW);
        let ids = mds.ids(4, e(0), 0);
        assert_eq!(admit(&ds, ids, 4), Err(Status::Jukebox), "{junk:?}");
    }
}

/// No single read lowers the cached boot epoch (a slow read, a lagging replica):
/// a lower value (or the same number with another nonce) is followed only once a
/// second read, begun after the first returned, answers it too (the store went
/// back: `fence_epoch.rs`), and counted.
#[test]
fn one_lower_boot_read_never_lowers_the_epoch_a_confirming_one_does() {
    let b = Boot::default();
    let w = Duration::from_secs(60);
    let (four, three) = (e(4), e(3));
    let t0 = Instant::now();
    assert_eq!(b.remember(four, t0, w), Some((four, t0)));
    let slow = t0 - Duration::from_millis(1);
    assert_eq!(b.remember(three, slow, w), Some((four, t0)), "a slow read");
    let t1 = Instant::now();
    assert_eq!(
        b.remember(four, t1, w),
        Some((four, t1)),
        "the same epoch read later"
    );
    assert_eq!(
        b.remember(four, t0, w),
        Some((four, t1)),
        "not an older read of it"
    );
    assert_eq!(b.last(), Some((four, t1)));
    // A lower read begun after the cached value was seen: still one read.
    let t2 = Instant::now();
    assert_eq!(b.remember(three, t2, w), Some((four, t1)), "one lower read");
    assert_eq!(
        b.remember(three, t2, w),
        Some((four, t1)),
        "a read begun before the first lower one returned confirms nothing"
    );
    assert_eq!(b.backwards.count(), 0);
    let t3 = Instant::now();
    assert_eq!(b.remember(three, t3, w), Some((three, t3)), "confirmed");
    assert_eq!(b.backwards.count(), 1);
    let other = Epoch { n: 3, nonce: 9 };
    let t4 = Instant::now();
    assert_eq!(b.remember(other, t4, w), Some((three, t3)), "one read");
    // Another lower value in between starts over.
    assert_eq!(b.remember(e(2), Instant::now(), w), Some((three, t3)));
    assert_eq!(b.remember(other, Instant::now(), w), Some((three, t3)));
    let t5 = Instant::now();
    assert_eq!(b.remember(other, t5, w), Some((other, t5)), "rewritten");
    assert_eq!(b.backwards.count(), 2);
    // A lower read kept against a value out of its window: read again (`None`).
    let b = Boot::default();
    let w = Duration::from_millis(20);
    let t0 = Instant::now();
    b.remember(four, t0, w);
    std::thread::sleep(w);
    assert_eq!(b.remember(three, t0, w), None);
    assert_eq!(b.last(), Some((four, t0)), "kept");
    assert_eq!(b.backwards.count(), 0);
}

/// A boot epoch read from a lagging replica (one read of a lower value) never
/// un-fences: the ids of the boot it left stay refused, and the current ones taken;
/// once the store answers the lower value twice it is followed.
#[test]
fn a_stale_boot_read_never_unfences_the_ids_of_the_boot_it_left() {
    let (store, mds) = stores();
    let cas = store.cas().unwrap();
    assert_eq!(mds.bump_boot().unwrap().0, 1);
    let at1 = cas.cas_get(NAME).unwrap().unwrap().0;
    let old = granted(&mds, 5);
    assert_eq!(mds.bump_boot().unwrap().0, 2);
    let new = granted(&mds, 5);
    let ds = Fence::new(store.clone(), [1; 32], Duration::from_millis(300));
    assert_eq!(admit(&ds, new, 5), Ok(1000));
    std::thread::sleep(Duration::from_millis(310));
    // The lagging read, then the store answers the current value again.
    let asked = Instant::now();
    let (b1, _) = parse(&at1).unwrap();
    assert_eq!(ds.boot.remember(b1, asked, ds.window()), None, "kept");
    assert_eq!(admit(&ds, old, 5), Err(Status::Acces), "still fenced");
    assert_eq!(admit(&ds, new, 5), Ok(1000));
    assert_eq!(ds.backwards(), 0);
}

/// Issue 27's restore: the boot object rewritten to an older text (a store restored
/// from a backup), then moved by the next start to a number an earlier run had: the
/// earlier run's ids stay refused everywhere (the move wrote a fresh nonce), at a
/// data server started since and at one that ran through it (after its window),
/// which counts the value gone back and takes the new run's ids.
#[test]
fn ids_of_before_a_restore_are_refused_after_a_restart_moves_the_boot_to_the_same_number() {
    let (store, mds) = stores();
    let cas = store.cas().unwrap();
    assert_eq!(mds.bump_boot().unwrap().0, 1);
    let backup = cas.cas_get(NAME).unwrap().unwrap().0;
    let run2 = Fence::new(store.clone(), [1; 32], WINDOW);
    assert_eq!(run2.bump_boot().unwrap().0, 2);
    let e2 = run2.read(5).unwrap();
    let old = run2.grant_ids(5, e2, 0).unwrap().expect("granted");
    let ds = Fence::new(store.clone(), [1; 32], Duration::from_millis(50));
    assert_eq!(admit(&ds, old, 5), Ok(1000));
    // The restore: the boot object back to run 1's text.
    let v = cas.cas_get(NAME).unwrap().unwrap().1;
    cas.cas_put(NAME, &backup, Some(v.as_str())).unwrap();
    let run3 = Fence::new(store.clone(), [1; 32], WINDOW);
    assert_eq!(run3.bump_boot().unwrap().0, 2, "the same number again");
    assert_eq!(admit(&run3, old, 5), Err(Status::Acces), "at the new run");
    let fresh = Fence::new(store.clone(), [1; 32], WINDOW);
    assert_eq!(
        admit(&fresh, old, 5),
        Err(Status::Acces),
        "at a new data server"
    );
    std::thread::sleep(Duration::from_millis(60));
    assert_eq!(
        admit(&ds, old, 5),
        Err(Status::Acces),
        "at a long-running one"
    );
    assert_eq!(
        ds.backwards(),
        1,
        "which saw the boot epoch's value go back"
    );
    let e3 = run3.read(5).unwrap();
    assert_eq!(e3, e2, "the file's epoch did not move");
    let new = run3.grant_ids(5, e3, 0).unwrap().expect("granted");
    assert_ne!(new, old);
    assert_eq!(admit(&ds, new, 5), Ok(1000), "the new run's ids are taken");
    assert_eq!(admit(&fresh, new, 5), Ok(1000));
}

/// A boot object of before nonces (`"<b> <used>"`) reads as nonce 0, its ids are the
/// earlier builds' (no nonce hashed), and the next move writes a nonce.
#[test]
fn an_old_boot_object_reads_as_nonce_0() {
    let (store, mds) = stores();
    let cas = store.cas().unwrap();
    cas.cas_put(NAME, b"4 1", None).unwrap();
    assert_eq!(mds.boot_epoch().unwrap(), 4);
    assert_eq!(mds.boot.last().unwrap().0, e(4));
    assert!(matches!(mds.mark_used().unwrap(), Grant::At(b) if b == e(4)));
    assert_eq!(
        cas.cas_get(NAME).unwrap().unwrap().0,
        b"4 1",
        "kept as it was"
    );
    let ids = mds.grant_ids(5, e(0), 0).unwrap().unwrap();
    let ds = Fence::new(store.clone(), [1; 32], WINDOW);
    assert_eq!(admit(&ds, ids, 5), Ok(1000));
    assert_eq!(mds.bump_boot().unwrap(), (5, true));
    let (data, _) = cas.cas_get(NAME).unwrap().unwrap();
    let (b, used) = parse(&data).unwrap();
    assert!(b.n == 5 && b.nonce != 0 && used, "{data:?}");
    assert_eq!(text(b, used).as_bytes(), &data[..]);
}

/// The store's boot epoch at this metadata server's number but with another nonce
/// (the store went back and another gateway moved it again since): another
/// gateway's epoch, adopted as a moved one is (a window of no grant), not granted at.
#[test]
fn the_same_boot_number_with_another_nonce_is_adopted_as_moved() {
    let store: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    let window = Duration::from_millis(50);
    let a = Fence::new(store.clone(), [1; 32], window);
    assert_eq!(a.bump_boot().unwrap().0, 1);
    assert!(matches!(a.mark_used().unwrap(), Grant::At(b) if b.n == 1));
    let ours = a.boot.last().unwrap().0;
    let cas = store.cas().unwrap();
    let v = cas.cas_get(NAME).unwrap().unwrap().1;
    cas.cas_put(NAME, b"0 1", Some(v.as_str())).unwrap();
    let b = Fence::new(store.clone(), [1; 32], window);
    assert_eq!(b.bump_boot().unwrap(), (1, true));
    let theirs = b.boot.last().unwrap().0;
    assert_ne!(theirs, ours);
    std::thread::sleep(window);
    assert_eq!(
        a.mark_used().unwrap(),
        Grant::Later,
        "adopted: a window first"
    );
    std::thread::sleep(window);
    assert_eq!(a.mark_used().unwrap(), Grant::At(theirs));
    assert_eq!(a.grant_ids(3, e(0), 0).unwrap(), Some(b.ids(3, e(0), 0)));
}

/// The bug the slots' review found in the store-wide epoch: a metadata server that
/// had marked its epoch used kept granting at it forever once another gateway moved
/// it, when no data server call made it read the epoch again. Now it reads again a
/// window after its last check, adopts the new epoch, waits a window, goes on; ids
/// it grants then are taken at data servers, those of before are refused.
#[test]
fn a_metadata_server_whose_epoch_another_moved_adopts_it_after_a_window() {
    let store: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    let window = Duration::from_millis(80);
    let a = Fence::new(store.clone(), [1; 32], window);
    assert_eq!(a.bump_boot().unwrap(), (1, false));
    let old = a.grant_ids(9, e(0), 0).unwrap().expect("granted at once");
    // B starts on the same store: it waits (A granted), and moves the epoch.
    let b = Fence::new(store.clone(), [1; 32], window);
    assert_eq!(b.bump_boot().unwrap(), (2, true));
    let ds = Fence::new(store.clone(), [1; 32], window);
    assert_eq!(
        admit(&ds, old, 9),
        Err(Status::Acces),
        "A's earlier ids fenced"
    );
    // A's next grants: at its checked epoch for at most a window, then none for a
    // window (a data server may still trust epoch 1 and refuse the new ids).
    let moved = Instant::now();
    let mut later = None;
    while moved.elapsed() < window * 10 {
        let asked = Instant::now();
        match a.mark_used().unwrap() {
            Grant::At(at) if at.n == 1 => assert!(later.is_none(), "never back to the old epoch"),
            Grant::Later => {
                later.get_or_insert(asked);
            }
            Grant::At(at) if at.n == 2 => {
                let since = later.expect("a window of no grant first").elapsed();
                assert!(since >= window, "granted {since:?} after adopting");
                let ids = a.grant_ids(9, e(0), 0).unwrap().unwrap();
                assert_eq!(ids, b.ids(9, e(0), 0));
                let ds = Fence::new(store.clone(), [1; 32], window);
                assert_eq!(admit(&ds, ids, 9), Ok(1000), "the new ids are taken");
                return;
            }
            g => panic!("{g:?}"),
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("A never adopted the moved epoch");
}

/// A store whose epoch went below the one this gateway moved it to (restored from
/// a backup, another store under the same name) is not granted at.
#[test]
fn a_store_epoch_below_this_gateways_is_an_error() {
    let (store, mds) = stores();
    assert_eq!(mds.bump_boot().unwrap(), (1, false));
    assert_eq!(mds.bump_boot().unwrap(), (2, false));
    let cas = store.cas().unwrap();
    let v = cas.cas_get(NAME).unwrap().unwrap().1;
    cas.cas_put(NAME, b"1 0", Some(v.as_str())).unwrap();
    assert!(mds.mark_used().is_err());
}

/// Every refusal of a synthetic id at a data server is counted (the metric
/// `nfsgw_pnfs_fence_refused_total`); a real user's call and an accepted id are not.
#[test]
fn refused_synthetic_ids_are_counted() {
    let (store, mds) = stores();
    let ds = Fence::new(store, [1; 32], Duration::from_millis(20));
    let old = granted(&mds, 5);
    assert_eq!(admit(&ds, old, 5), Ok(1000));
    assert_eq!(admit(&ds, (1000, 100), 5), Ok(65534), "a real user's call");
    assert_eq!(ds.refused(), 0);
    assert_eq!(
        admit(&ds, (old.0 ^ 1, old.1), 5),
        Err(Status::Acces),
        "forged"
    );
    mds.bump_boot().unwrap();
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(admit(&ds, old, 5), Err(Status::Acces), "an earlier boot's");
    assert_eq!(ds.refused(), 2);
}

/// Two grants reading the moved epoch at once: the one that finds it adopted by the
/// other waits the window too (no grant at the new epoch inside it).
#[test]
fn a_grant_racing_the_adoption_waits_the_window_too() {
    let store: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    let window = Duration::from_millis(300);
    let a = Fence::new(store.clone(), [1; 32], window);
    a.bump_boot().unwrap();
    assert!(matches!(a.mark_used().unwrap(), Grant::At(b) if b.n == 1));
    Fence::new(store, [1; 32], window).bump_boot().unwrap();
    std::thread::sleep(window);
    let adopted = Instant::now();
    let grants: Vec<Grant> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..8).map(|_| s.spawn(|| a.mark_used().unwrap())).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let g = a.mark_used().unwrap();
    // (A machine too loaded to run this inside the window proves nothing.)
    if adopted.elapsed() < window {
        assert!(grants.iter().all(|g| *g == Grant::Later), "{grants:?}");
        assert_eq!(g, Grant::Later);
    }
}

/// A file's entry keeps its boot epoch against a load that read the boot epoch the
/// boot's cache has since left, even at the same number (a restore, then a move:
/// another nonce), and takes the one the boot's cache holds now.
#[test]
fn a_slow_load_at_a_boot_epoch_left_never_replaces_a_fresh_entry() {
    let mds = Fence::new(Arc::new(MemoryBackend::new()), [1; 32], WINDOW);
    let (left, now) = (Epoch { n: 5, nonce: 1 }, Epoch { n: 5, nonce: 2 });
    let t0 = Instant::now();
    mds.boot.wrote(left, t0);
    let slow = Instant::now();
    let t1 = Instant::now();
    mds.boot.wrote(now, t1);
    let fresh = mds.remember(9, e(1), (now, t1), t1).unwrap();
    assert_eq!(fresh.boot, now);
    let got = mds.remember(9, e(1), (left, t0), slow).unwrap();
    assert_eq!(got.boot, now, "the fresh entry stays");
    assert_eq!(mds.known(9).unwrap().boot, now);
    // The boot's cache back at `left` (followed a restore): taken.
    mds.boot.wrote(left, Instant::now());
    let t2 = Instant::now();
    assert_eq!(mds.remember(9, e(1), (left, t2), t2).unwrap().boot, left);
}
