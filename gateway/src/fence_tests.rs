//! The fence's ids, epochs and verdicts over the memory store's conditional writes.

use super::*;
use crate::backend::memory::MemoryBackend;
use crate::fs::{FileKind, NfsTime};

fn fence(window: Duration) -> Fence {
    Fence::new(Arc::new(MemoryBackend::new()), [7; 32], window)
}

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

/// Epoch `n` as an object of before nonces has it (nonce 0).
fn e(n: u64) -> Epoch {
    Epoch { n, nonce: 0 }
}

fn caller(uid: u32, gid: u32) -> Caller {
    Caller {
        uid,
        gid,
        gids: Groups::NONE,
        writable: true,
    }
}

#[test]
fn ids_are_synthetic_and_differ_per_file_epoch_and_key() {
    let f = fence(WINDOW);
    let (u, g) = f.ids(5, e(0), 0);
    assert!(is_synthetic(u) && is_synthetic(g));
    assert_ne!(f.ids(5, e(1), 0), (u, g), "a new epoch, new ids");
    assert_ne!(f.ids(6, e(0), 0), (u, g), "another file, other ids");
    assert_eq!(f.ids(5, e(0), 0), (u, g), "deterministic");
    let other = Fence::new(Arc::new(MemoryBackend::new()), [8; 32], WINDOW);
    assert_ne!(
        other.ids(5, e(0), 0),
        (u, g),
        "another store's key, other ids"
    );
}

#[test]
fn a_bump_moves_the_epoch_in_the_store_and_every_gateway_sees_it() {
    let store: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    let mds = Fence::new(store.clone(), [1; 32], WINDOW);
    let ds = Fence::new(store, [1; 32], Duration::ZERO);
    assert_eq!((mds.read(9).unwrap().n, ds.epoch(9).unwrap()), (0, 0));
    assert_eq!(mds.bump(9).unwrap(), 1);
    assert_eq!(mds.bump(9).unwrap(), 2);
    assert_eq!(mds.cached(9), Some(2), "written through");
    assert_eq!(
        ds.epoch(9).unwrap(),
        2,
        "an uncached data server reads the store"
    );
    assert_eq!(ds.epoch(10).unwrap(), 0, "other files untouched");
}

#[test]
fn a_cached_epoch_is_trusted_for_the_window_only() {
    let store: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    let mds = Fence::new(store.clone(), [1; 32], WINDOW);
    let ds = Fence::new(store, [1; 32], Duration::from_millis(100));
    assert_eq!(ds.epoch(3).unwrap(), 0);
    mds.bump(3).unwrap();
    assert_eq!(ds.epoch(3).unwrap(), 0, "inside the window: the old epoch");
    std::thread::sleep(Duration::from_millis(120));
    assert_eq!(ds.cached(3), None);
    assert_eq!(ds.epoch(3).unwrap(), 1, "after it: the new one");
}

#[test]
fn verdicts_real_owner_refused() {
    let f = fence(WINDOW);
    let a = attr(42);
    let admitted = caller(77, 77);
    assert_eq!(judge(&f, None, &admitted, &a, e(0)), Verdict::Real);
    let ids = f.ids(42, e(3), 0);
    assert_eq!(
        judge(&f, Some(ids), &admitted, &a, e(3)),
        Verdict::Owner(caller(1000, 100)),
        "the current pair acts as the owner"
    );
    assert_eq!(
        judge(&f, Some(ids), &admitted, &a, e(4)),
        Verdict::Refused,
        "fenced"
    );
    let forged = [
        (ids.0 ^ 1, ids.1),
        (ids.0, ids.1 ^ 1),
        (u32::MAX, u32::MAX),
        (SYNTHETIC, 0),
    ];
    for (u, g) in forged {
        assert_eq!(
            judge(&f, Some((u, g)), &admitted, &a, e(3)),
            Verdict::Refused
        );
    }
    let other = attr(43);
    assert_eq!(
        judge(&f, Some(ids), &admitted, &other, e(3)),
        Verdict::Refused,
        "another file"
    );
}

#[test]
fn synthetic_ids_only_from_auth_sys_with_bit_31() {
    use engine::rpc::AuthSys;
    assert_eq!(synthetic_ids(&Cred::None), None);
    assert_eq!(synthetic_ids(&Cred::Sys(AuthSys::new(1000, 1, &[]))), None);
    let c = Cred::Sys(AuthSys::new(SYNTHETIC | 5, 9, &[]));
    assert_eq!(synthetic_ids(&c), Some((SYNTHETIC | 5, 9)));
}

#[test]
fn a_corrupt_epoch_object_is_an_error_not_epoch_zero() {
    let store: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    store
        .cas()
        .unwrap()
        .cas_put(&name(8), b"junk", None)
        .unwrap();
    let f = Fence::new(store, [1; 32], WINDOW);
    assert!(f.read(8).is_err());
    assert!(f.bump(8).is_err());
}

/// The pair a data server checks is computed when the epoch is read and cached with
/// it: after a bump (written through at the metadata server; read again at a data
/// server whose window is over) the pair checked is the new epoch's, on the reactor
/// (`admit_cached`) and on a worker (`admit_file`) alike.
#[test]
fn the_cached_pair_follows_the_epoch() {
    use engine::rpc::AuthSys;
    let store: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    let mds = Fence::new(store.clone(), [1; 32], WINDOW);
    let ds = Fence::new(store.clone(), [1; 32], WINDOW);
    let a = attr(21);
    let cred = |(u, g): (u32, u32)| Cred::Sys(AuthSys::new(u, g, &[]));
    let owner = Ok(caller(1000, 100));
    let admitted = caller(77, 77);
    let old = ds.ids(21, e(0), 0);
    assert_eq!(
        admit_cached(Some(&ds), &cred(old), admitted, &a),
        None,
        "nothing cached yet: to a worker"
    );
    assert_eq!(
        admit_file(Some(&ds), &cred(old), admitted, &a),
        owner.map(|c| (c, Some(0)))
    );
    assert_eq!(
        admit_cached(Some(&ds), &cred(old), admitted, &a),
        Some(owner.ok()),
        "cached: judged on the reactor"
    );
    assert_eq!(mds.bump(21).unwrap(), 1);
    let new = mds.ids(21, mds.read(21).unwrap(), 0);
    assert_eq!(
        admit_cached(Some(&mds), &cred(old), admitted, &a),
        None,
        "written through: the old pair is not taken on the reactor"
    );
    assert_eq!(
        admit_file(Some(&mds), &cred(old), admitted, &a),
        Err(Status::Acces),
        "and refused by a worker at once"
    );
    assert_eq!(
        admit_file(Some(&mds), &cred(new), admitted, &a),
        owner.map(|c| (c, Some(0)))
    );
    assert_eq!(
        admit_cached(Some(&mds), &cred(new), admitted, &a),
        Some(owner.ok())
    );
    // A data server whose window is over reads the epoch again.
    let late = Fence::new(store, [1; 32], Duration::ZERO);
    assert_eq!(
        admit_file(Some(&late), &cred(old), admitted, &a),
        Err(Status::Acces)
    );
    assert_eq!(
        admit_file(Some(&late), &cred(new), admitted, &a),
        owner.map(|c| (c, Some(0)))
    );
    assert_eq!(
        admit_file(Some(&late), &cred((new.0, old.1)), admitted, &a),
        Err(Status::Acces),
        "half of the pair is not the pair"
    );
}

/// A read that began before a bump and answered the old epoch after it: trusted from
/// when it was asked, not answered; and never over the higher epoch the bump cached.
#[test]
fn a_slow_read_is_trusted_from_when_it_was_asked_and_never_lowers_the_epoch() {
    let window = Duration::from_millis(200);
    let f = fence(window);
    let asked = Instant::now();
    assert_eq!(f.bump(9).unwrap(), 1);
    // The slow read's answer (epoch 0) arrives after the bump: the cache keeps 1.
    let boot = (e(0), asked);
    assert_eq!(f.remember(9, e(0), boot, asked).map(|k| k.epoch.n), Some(1));
    assert_eq!(f.cached(9), Some(1));
    // A read of another file asked a window ago is already past its window.
    f.remember(10, e(0), (e(0), Instant::now()), Instant::now() - window);
    assert_eq!(f.cached(10), None, "trusted from when it was asked");
}

/// The data generation rides in the gid in the clear and under the MAC: every
/// generation of a file has its own pair, the gid names it, and a pair moved to
/// another generation (or a made-up generation) is refused, so a forged generation
/// can cost nothing but a refusal.
#[test]
fn the_data_generation_is_carried_in_the_gid_under_the_mac() {
    let f = fence(WINDOW);
    for gen in [0u16, 1, 0x7fff, 0x8000, u16::MAX] {
        let (u, g) = f.ids(5, e(2), gen);
        assert!(is_synthetic(u) && is_synthetic(g));
        assert_eq!(gen_of(g), gen, "the gid names its generation");
        assert!(f.matches(5, e(2), u, g));
        assert!(!f.matches(5, e(3), u, g), "another epoch");
        assert!(!f.matches(6, e(2), u, g), "another file");
    }
    let (u, g) = f.ids(5, e(2), 7);
    assert_ne!(f.ids(5, e(2), 8).0, u, "another generation, another uid");
    // The gid's generation bits changed, MAC bits kept: refused.
    let moved = (g & !(0xffff << GEN_SHIFT)) | (8 << GEN_SHIFT);
    assert_eq!(gen_of(moved), 8);
    assert!(
        !f.matches(5, e(2), u, moved),
        "a forged generation fails the MAC"
    );
    assert!(!f.matches(5, e(2), u, g ^ 1), "the gid's MAC bits count");
}

/// A worker verifies a generation once and keeps its pair with the epoch (two of
/// them), so a writer's older layout and a reader's newer one are both judged on the
/// reactor; a forged generation is refused by the worker and never kept.
#[test]
fn a_worker_keeps_the_last_two_generations_pairs() {
    use engine::rpc::AuthSys;
    let f = fence(WINDOW);
    let a = attr(30);
    let cred = |(u, g): (u32, u32)| Cred::Sys(AuthSys::new(u, g, &[]));
    let admitted = caller(77, 77);
    let owner = caller(1000, 100);
    let (old, new, newer) = (f.ids(30, e(0), 1), f.ids(30, e(0), 2), f.ids(30, e(0), 3));
    assert_eq!(
        admit_file(Some(&f), &cred(old), admitted, &a),
        Ok((owner, Some(1)))
    );
    assert_eq!(
        admit_file(Some(&f), &cred(new), admitted, &a),
        Ok((owner, Some(2)))
    );
    for ids in [old, new] {
        assert_eq!(
            admit_cached(Some(&f), &cred(ids), admitted, &a),
            Some(Some(owner))
        );
    }
    let forged = (new.0, (new.1 & !(0xffff << GEN_SHIFT)) | (9 << GEN_SHIFT));
    assert_eq!(
        admit_cached(Some(&f), &cred(forged), admitted, &a),
        None,
        "to a worker"
    );
    assert_eq!(
        admit_file(Some(&f), &cred(forged), admitted, &a),
        Err(Status::Acces)
    );
    assert_eq!(
        admit_cached(Some(&f), &cred(forged), admitted, &a),
        None,
        "not kept"
    );
    assert_eq!(
        admit_file(Some(&f), &cred(newer), admitted, &a),
        Ok((owner, Some(3)))
    );
    assert_eq!(
        admit_cached(Some(&f), &cred(old), admitted, &a),
        None,
        "third back"
    );
    assert_eq!(
        admit_file(Some(&f), &cred(old), admitted, &a),
        Ok((owner, Some(1))),
        "still valid"
    );
}

/// Each move writes a fresh nonce the ids hash: the same number with another nonce
/// gives other ids; nonce 0 (objects of before nonces) gives the earlier builds' ids.
#[test]
fn the_nonce_is_under_the_mac_and_nonce_0_keeps_the_earlier_ids() {
    let f = fence(WINDOW);
    let (x, y) = (Epoch { n: 1, nonce: 1 }, Epoch { n: 1, nonce: 2 });
    assert_ne!(f.ids(5, x, 0), f.ids(5, y, 0));
    assert_ne!(f.ids(5, x, 0), f.ids(5, e(1), 0));
    // The earlier builds' MAC input: fileid, epoch, generation, boot epoch.
    let mut m = [0u8; 26];
    m[..8].copy_from_slice(&5u64.to_le_bytes());
    m[8..16].copy_from_slice(&1u64.to_le_bytes());
    let h = blake3::keyed_hash(&f.key, &m);
    let uid = u32::from_le_bytes(h.as_bytes()[..4].try_into().unwrap()) | SYNTHETIC;
    assert_eq!(f.ids(5, e(1), 0).0, uid);
}

/// A file epoch object of before nonces (`"<n>"`) reads as nonce 0; a move writes
/// `"<n> <nonce>"`; anything else is an error, not epoch 0.
#[test]
fn an_old_file_epoch_object_reads_as_nonce_0_and_a_move_writes_a_nonce() {
    let store: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    let cas = store.cas().unwrap();
    cas.cas_put(&name(8), b"5", None).unwrap();
    let f = Fence::new(store.clone(), [1; 32], WINDOW);
    assert_eq!(f.read(8).unwrap(), e(5));
    assert_eq!(f.bump(8).unwrap(), 6);
    let (data, v) = cas.cas_get(&name(8)).unwrap().unwrap();
    let moved = epoch::parse_file(&data).unwrap();
    assert!(moved.n == 6 && moved.nonce != 0, "{data:?}");
    assert_eq!(epoch::file_text(moved).as_bytes(), &data[..]);
    assert_eq!(f.read(8).unwrap(), moved);
    let mut v = v;
    for junk in [
        &b"5 zz"[..],
        b"5 00000000000000ab x",
        b"5 ab",
        b"+5",
        b"+5 00000000000000ab",
        b"5 +00000000000000a",
        b"5 00000000000000AB",
        b"5 0000000000000000",
        b"x 00000000000000ab",
    ] {
        v = cas.cas_put(&name(8), junk, Some(v.as_str())).unwrap();
        assert!(
            Fence::new(store.clone(), [1; 32], WINDOW).read(8).is_err(),
            "{junk:?}"
        );
    }
}

/// Issue 27's restore: a client's layout at file epoch 4 is fenced (5); the store is
/// restored to its text at 3 and the metadata server moves the epoch to 4 again. The
/// client's ids stay refused: at the metadata server, at a data server started
/// since, and at one that ran through the restore (after its window), which counts
/// the number gone back and takes the new ids.
#[test]
fn ids_of_before_a_restore_are_refused_after_the_file_epoch_moves_to_the_same_number() {
    let store: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    let cas = store.cas().unwrap();
    let mds = Fence::new(store.clone(), [1; 32], WINDOW);
    let ds = Fence::new(store.clone(), [1; 32], Duration::from_millis(50));
    let a = attr(7);
    let admit = |f: &Fence, ids: (u32, u32)| {
        let c = Cred::Sys(engine::rpc::AuthSys::new(ids.0, ids.1, &[]));
        admit_file(Some(f), &c, caller(77, 77), &a).map(|(c, _)| c.uid)
    };
    for _ in 0..3 {
        mds.bump(7).unwrap();
    }
    let backup = cas.cas_get(&name(7)).unwrap().unwrap().0;
    assert_eq!(mds.bump(7).unwrap(), 4);
    let at4 = mds.read(7).unwrap();
    let client = mds.ids(7, at4, 0);
    assert_eq!(admit(&ds, client), Ok(1000), "the layout works");
    assert_eq!(mds.bump(7).unwrap(), 5, "revoked: fenced");
    std::thread::sleep(Duration::from_millis(60));
    assert_eq!(admit(&ds, client), Err(Status::Acces));
    assert_eq!(ds.epoch(7).unwrap(), 5);
    // The restore, then the next revocation.
    let v = cas.cas_get(&name(7)).unwrap().unwrap().1;
    cas.cas_put(&name(7), &backup, Some(v.as_str())).unwrap();
    assert_eq!(mds.bump(7).unwrap(), 4, "the same number again");
    let again = mds.read(7).unwrap();
    assert_ne!(again, at4, "another nonce");
    assert_eq!(
        admit(&mds, client),
        Err(Status::Acces),
        "at the metadata server"
    );
    let fresh = Fence::new(store.clone(), [1; 32], WINDOW);
    assert_eq!(
        admit(&fresh, client),
        Err(Status::Acces),
        "at a new data server"
    );
    std::thread::sleep(Duration::from_millis(60));
    assert_eq!(
        admit(&ds, client),
        Err(Status::Acces),
        "at a long-running one"
    );
    assert_eq!(ds.epoch(7).unwrap(), 4, "which follows the store back");
    assert_eq!((ds.backwards(), mds.backwards()), (1, 1), "and counts it");
    assert_eq!(admit(&ds, mds.ids(7, again, 0)), Ok(1000), "new ids taken");
}

/// The nonce word is exactly what `nonce_word` writes (16 lowercase hex digits, not
/// 0); a number is decimal digits only.
#[test]
fn nonce_and_number_words_are_strict() {
    assert_eq!(epoch::parse_nonce("00000000000000ab"), Some(0xab));
    for junk in [
        "+0000000000000ab",
        "-0000000000000ab",
        "00000000000000AB",
        "0000000000000000",
        "00000000000000ab0",
        "0x000000000000ab",
        "",
    ] {
        assert_eq!(epoch::parse_nonce(junk), None, "{junk:?}");
    }
    assert_eq!(epoch::parse_n("5"), Some(5));
    for junk in ["+5", "-5", "", " 5", "5x", "99999999999999999999"] {
        assert_eq!(epoch::parse_n(junk), None, "{junk:?}");
    }
}

/// One read of a lower value (a lagging replica, a retry on another endpoint, a
/// read begun before a move) is never followed: a second read begun strictly after
/// the first returned must answer the same value; one begun at that same instant
/// proves nothing.
#[test]
fn take_follows_a_lower_value_only_on_a_second_later_read() {
    let (five, four) = (e(5), e(4));
    let mut p = None;
    let t0 = Instant::now();
    assert_eq!(epoch::take(five, &mut p, four, t0), epoch::Take::Keep);
    let (_, returned) = p.expect("pending");
    assert_eq!(
        epoch::take(five, &mut p, four, returned),
        epoch::Take::Keep,
        "a tie"
    );
    assert_eq!(p.map(|p| p.1), Some(returned), "the first return counts");
    let other = Epoch { n: 5, nonce: 3 };
    assert_eq!(epoch::take(five, &mut p, other, t0), epoch::Take::Keep);
    let later = p.unwrap().1 + Duration::from_nanos(1);
    assert_eq!(
        epoch::take(five, &mut p, four, later),
        epoch::Take::Keep,
        "other value"
    );
    let later = p.unwrap().1 + Duration::from_nanos(1);
    assert_eq!(
        epoch::take(five, &mut p, four, later),
        epoch::Take::Backwards
    );
    // Higher, or the same value: at once, and the pending read is dropped.
    assert_eq!(epoch::take(five, &mut p, e(6), t0), epoch::Take::Replace);
    assert_eq!(p, None);
    assert_eq!(epoch::take(five, &mut p, five, t0), epoch::Take::Replace);
}

/// A data server whose cached epoch a bump moved (fencing a layout) never takes the
/// fenced ids back on one lower read (a lagging store replica); a second read of the
/// same value, begun after the first returned, is the store gone back: followed.
#[test]
fn one_lower_read_never_unfences_a_revoked_layout() {
    let store: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    let mds = Fence::new(store.clone(), [1; 32], WINDOW);
    let ds = Fence::new(store.clone(), [1; 32], WINDOW);
    let a = attr(7);
    let admit = |f: &Fence, ids: (u32, u32)| {
        let c = Cred::Sys(engine::rpc::AuthSys::new(ids.0, ids.1, &[]));
        admit_file(Some(f), &c, caller(77, 77), &a).map(|(c, _)| c.uid)
    };
    mds.bump(7).unwrap();
    let at1 = mds.read(7).unwrap();
    let client = mds.ids(7, at1, 0);
    assert_eq!(admit(&ds, client), Ok(1000));
    mds.bump(7).unwrap();
    let at2 = ds.read(7).unwrap();
    assert_eq!(at2.n, 2);
    let boot = ds.boot.last().unwrap();
    let k = ds.remember(7, at1, boot, Instant::now()).unwrap();
    assert_eq!(k.epoch, at2, "one lower read: kept");
    assert_eq!(admit(&ds, client), Err(Status::Acces), "still fenced");
    assert_eq!(ds.backwards(), 0);
    let k = ds.remember(7, at1, boot, Instant::now()).unwrap();
    assert_eq!(k.epoch, at1, "confirmed: followed");
    assert_eq!(ds.backwards(), 1);
}

/// A successful conditional write's value replaces whatever is cached, even a
/// higher value a read begun after the write's own read cached (before a restore).
#[test]
fn a_bumps_write_replaces_a_higher_cached_value() {
    let f = fence(WINDOW);
    let boot = (e(0), Instant::now());
    let asked = Instant::now();
    f.remember(7, e(5), boot, Instant::now()).unwrap();
    let moved = Epoch { n: 4, nonce: 9 };
    f.wrote(7, moved, boot, asked);
    assert_eq!(f.known(7).unwrap().epoch, moved);
    assert_eq!(f.backwards(), 1, "counted: the write found the store back");
    // A restore test through `bump`: the write-through takes the lower value.
    let store: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    let f = Fence::new(store.clone(), [1; 32], WINDOW);
    let cas = store.cas().unwrap();
    f.bump(3).unwrap();
    let backup = cas.cas_get(&name(3)).unwrap().unwrap().0;
    f.bump(3).unwrap();
    let v = cas.cas_get(&name(3)).unwrap().unwrap().1;
    cas.cas_put(&name(3), &backup, Some(v.as_str())).unwrap();
    assert_eq!(f.bump(3).unwrap(), 2);
    assert_eq!(f.known(3).unwrap().epoch, f.read(3).unwrap());
}
