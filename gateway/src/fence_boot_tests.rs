//! The metadata servers' boot epochs (issue 27): their slots, reads, caches and moves
//! over the memory store's conditional writes, and what the data servers' check
//! makes of ids of an earlier boot, of this metadata server and of another.

use super::super::{admit_cached, admit_file, slot_of, Fence, WINDOW};
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

const A: Identity = [0xa0; 16];
const B: Identity = [0xb0; 16];

/// A store and a metadata server on it, its boot epoch moved (identity `A`).
fn stores() -> (Arc<dyn Backend>, Fence) {
    let store: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    let mds = Fence::new(store.clone(), [1; 32], WINDOW);
    mds.bump_boot(&A).unwrap();
    (store, mds)
}

#[test]
fn a_boot_move_fences_every_earlier_id_within_the_window() {
    let (store, mds) = stores();
    let ds = Fence::new(store, [1; 32], Duration::from_millis(150));
    let old = granted(&mds, 5);
    let other_file = granted(&mds, 6);
    assert_eq!(slot_of(old.0), 0xa0, "the uid names the slot");
    assert_eq!(admit(&ds, old, 5), Ok(1000), "a layout's ids work");
    assert_eq!(admit(&mds, old, 5), Ok(1000));
    let asked = Instant::now();
    assert_eq!(mds.bump_boot(&A).unwrap(), (0xa0, 2, false));
    assert_eq!(mds.boot_epoch(0xa0).unwrap(), 2);
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
    assert_eq!(ds.boot_epoch(0xa0).unwrap(), 2);
}

/// Two metadata servers on one store (two identities): each claims a slot of its
/// own; one's restart fences its own earlier ids only, and the other keeps granting
/// ids every data server accepts.
#[test]
fn a_metadata_servers_restart_fences_its_own_layouts_only() {
    let (store, a) = stores();
    let b = Fence::new(store.clone(), [1; 32], WINDOW);
    assert_eq!(b.bump_boot(&B).unwrap(), (0xb0, 1, false));
    let ds = Fence::new(store.clone(), [1; 32], Duration::from_millis(80));
    let ida = granted(&a, 5);
    let idb = b.grant_ids(5, b.read(5).unwrap(), 0).unwrap();
    assert_ne!(slot_of(ida.0), slot_of(idb.0));
    assert_eq!(admit(&ds, ida, 5), Ok(1000));
    assert_eq!(
        admit(&ds, idb, 5),
        Ok(1000),
        "one file, both servers' layouts"
    );
    // B restarts (a new fence on the same store, the same identity).
    let b2 = Fence::new(store.clone(), [1; 32], WINDOW);
    assert_eq!(b2.bump_boot(&B).unwrap(), (0xb0, 2, true), "its slot again");
    std::thread::sleep(Duration::from_millis(90));
    assert_eq!(admit(&ds, idb, 5), Err(Status::Acces), "B's earlier ids");
    assert_eq!(admit(&ds, ida, 5), Ok(1000), "A's are untouched");
    assert_eq!(admit(&b2, ida, 5), Ok(1000), "at B's own data server too");
    // A grants on at its own epoch, and those ids work everywhere.
    let e = a.read(6).unwrap();
    let fresh = a.grant_ids(6, e, 0).unwrap();
    assert_eq!(admit(&ds, fresh, 6), Ok(1000));
    assert_eq!(admit(&b2, fresh, 6), Ok(1000));
    // A third identity whose probe starts at B's slot takes the next free one.
    let mut c = B;
    c[1] = 1;
    let cf = Fence::new(store, [1; 32], WINDOW);
    assert_eq!(cf.bump_boot(&c).unwrap(), (0xb1, 1, false));
    assert_eq!(admit(&ds, granted(&cf, 5), 5), Ok(1000));
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
    mds.bump_boot(&A).unwrap();
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
    assert_eq!(ds.boot_epoch(0xa0).unwrap(), 1, "boot read at t0");
    std::thread::sleep(Duration::from_millis(120));
    // The file's epoch read at t0 + 120 ms, the boot's cached from t0.
    assert_eq!(admit(&ds, old, 3), Ok(1000));
    mds.bump_boot(&A).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    // t0 + 220 ms: the boot read is a window old, so the file's pair is too.
    assert!(admit_cached(Some(&ds), &cred(old), who(), &attr(3)).is_none());
    assert_eq!(admit(&ds, old, 3), Err(Status::Acces));
}

#[test]
fn a_boot_counts_as_used_once_a_layout_may_have_been_granted_at_it_or_before() {
    let store: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    let mds = Fence::new(store.clone(), [1; 32], Duration::from_millis(50));
    assert!(mds.grant_ids(7, 0, 0).is_err(), "no grant before a move");
    assert_eq!(
        mds.bump_boot(&A).unwrap(),
        (0xa0, 1, false),
        "a fresh store"
    );
    assert_eq!(
        mds.bump_boot(&A).unwrap(),
        (0xa0, 2, false),
        "nothing granted at 1"
    );
    assert_eq!(mds.grant_ids(7, 0, 0).unwrap(), mds.ids(7, 0, 0));
    let cas = store.cas().unwrap();
    let name = object(0xa0);
    let (data, v) = cas.cas_get(&name).unwrap().unwrap();
    assert_eq!(data, format!("2 1 {}", "a0".repeat(16)).as_bytes());
    assert_eq!(mds.mark_used().unwrap(), (0xa0, 2));
    assert_eq!(cas.cas_get(&name).unwrap().unwrap().1, v, "once per boot");
    // A takeover of the identity finds it used, and carries the mark: a second move
    // inside the first one's window (a restart loop, a retried takeover) must wait
    // the window out too.
    let successor = Fence::new(store.clone(), [1; 32], WINDOW);
    assert_eq!(successor.bump_boot(&A).unwrap(), (0xa0, 3, true));
    // Another move of the identity (a second takeover) before the successor granted
    // anything: the successor grants nothing more (its ids would be refused; it
    // reads the store before its first grant of a boot), the last mover does.
    let last = Fence::new(store.clone(), [1; 32], WINDOW);
    assert_eq!(last.bump_boot(&A).unwrap(), (0xa0, 4, true));
    assert!(successor.mark_used().is_err(), "moved by another gateway");
    assert!(successor.grant_ids(7, 0, 0).is_err());
    assert!(last.grant_ids(7, 0, 0).is_ok(), "the last mover grants");
    assert_eq!(
        last.bump_boot(&A).unwrap(),
        (0xa0, 5, true),
        "carried: still waits"
    );
}

#[test]
fn a_corrupt_boot_object_is_an_error_not_boot_zero() {
    let (store, mds) = stores();
    let id = format!(" {}", "a0".repeat(16));
    for junk in [
        b"junk".to_vec(),
        b"7".to_vec(),
        format!("7 2{id}").into_bytes(),
        b"7 1".to_vec(),
        format!("7 1{id}00").into_bytes(),
        format!("7 1{id} x").into_bytes(),
        b"".to_vec(),
    ] {
        let cas = store.cas().unwrap();
        let v = cas.cas_get(&object(0xa0)).unwrap().map(|(_, v)| v);
        cas.cas_put(&object(0xa0), &junk, v.as_deref()).unwrap();
        assert!(mds.bump_boot(&A).is_err(), "{junk:?}");
        let ds = Fence::new(store.clone(), [1; 32], WINDOW);
        let ids = mds.ids(4, 0, 0);
        assert_eq!(admit(&ds, ids, 4), Err(Status::Jukebox), "{junk:?}");
    }
}

#[test]
fn a_lower_boot_read_never_replaces_a_higher_one() {
    let b = Boot::default();
    let t0 = Instant::now();
    assert_eq!(b.remember(3, 4, t0), (4, t0));
    let t1 = Instant::now();
    assert_eq!(
        b.remember(3, 3, t1),
        (4, t0),
        "a slow read of the old epoch"
    );
    assert_eq!(b.remember(3, 4, t1), (4, t1), "the same epoch read later");
    assert_eq!(b.remember(3, 4, t0), (4, t1), "not an older read of it");
    assert_eq!(b.last(3), Some((4, t1)));
    assert_eq!(b.last(4), None, "slots apart");
}
