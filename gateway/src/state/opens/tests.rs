//! The open/lock state machine (RFC 8881 §8, §9, §18.10-§18.18, §18.38, §18.48).

use super::*;

const C1: u64 = 11;
const C2: u64 = 22;
const F: u64 = 100;
const BOOT: u32 = 0x5eed;

fn t() -> Opens {
    Opens::with(BOOT, Limits::default())
}

fn r(o: u64, l: u64) -> Range {
    Range::new(o, l).unwrap()
}

fn new_lock(open: Stateid, owner: &[u8]) -> Locker {
    Locker::New {
        open,
        owner: owner.to_vec(),
    }
}

fn denied(e: Result<Stateid, LockError>) -> Denied {
    match e {
        Err(LockError::Denied(d)) => d,
        other => panic!("expected DENIED, got {other:?}"),
    }
}

#[test]
fn share_reservations_conflict_across_owners_and_clients() {
    let o = t();
    let a = o.open(C1, b"a", F, ACCESS_READ, DENY_WRITE).unwrap();
    assert_eq!(a.seqid, 1);
    // write access against a deny-write: denied for another owner and client
    assert_eq!(
        o.open(C1, b"b", F, ACCESS_WRITE, 0),
        Err(StateError::ShareDenied)
    );
    assert_eq!(o.open(C2, b"a", F, 3, 0), Err(StateError::ShareDenied));
    // deny-read against an existing reader
    assert_eq!(
        o.open(C2, b"x", F, ACCESS_READ, DENY_READ),
        Err(StateError::ShareDenied)
    );
    // compatible open
    assert!(o.open(C2, b"x", F, ACCESS_READ, 0).is_ok());
    // another file is independent
    assert!(o.open(C2, b"x", F + 1, 3, 3).is_ok());
    // bad modes
    assert_eq!(o.open(C1, b"a", F, 0, 0), Err(StateError::Invalid));
    assert_eq!(o.open(C1, b"a", F, 4, 0), Err(StateError::Invalid));
    assert_eq!(o.open(C1, b"a", F, 1, 4), Err(StateError::Invalid));
}

#[test]
fn upgrade_keeps_stateid_bumps_seqid_and_downgrade_needs_opened_modes() {
    let o = t();
    let s1 = o.open(C1, b"a", F, ACCESS_READ, 0).unwrap();
    let s2 = o.open(C1, b"a", F, ACCESS_WRITE, DENY_WRITE).unwrap();
    assert_eq!(s1.other, s2.other);
    assert_eq!(s2.seqid, 2);
    assert_eq!(o.open_modes(&s2), Some((3, DENY_WRITE)));
    // an older seqid is OLD, a future one BAD, 0 means current
    assert_eq!(o.downgrade(C1, &s1, F, 1, 0), Err(StateError::OldStateid));
    let future = Stateid { seqid: 9, ..s2 };
    assert_eq!(
        o.downgrade(C1, &future, F, 1, 0),
        Err(StateError::BadStateid)
    );
    // not a subset / never opened like that
    assert_eq!(
        o.downgrade(C1, &s2, F, 1, DENY_READ),
        Err(StateError::Invalid)
    );
    assert_eq!(o.downgrade(C1, &s2, F, 3, 3), Err(StateError::Invalid));
    let s3 = o
        .downgrade(C1, &Stateid { seqid: 0, ..s2 }, F, ACCESS_READ, 0)
        .unwrap();
    assert_eq!(s3.seqid, 3);
    assert_eq!(o.open_modes(&s3), Some((1, 0)));
    // WRITE was dropped: it may not come back by downgrade
    assert_eq!(
        o.downgrade(C1, &s3, F, ACCESS_WRITE, 0),
        Err(StateError::Invalid)
    );
    // wrong file or client
    assert_eq!(
        o.downgrade(C1, &s3, F + 1, 1, 0),
        Err(StateError::BadStateid)
    );
    assert_eq!(o.downgrade(C2, &s3, F, 1, 0), Err(StateError::BadStateid));
}

#[test]
fn opening_both_at_once_cannot_downgrade_to_one() {
    let o = t();
    let s = o.open(C1, b"a", F, 3, 0).unwrap();
    assert_eq!(
        o.downgrade(C1, &s, F, ACCESS_READ, 0),
        Err(StateError::Invalid)
    );
    assert!(o.downgrade(C1, &s, F, 3, 0).is_ok());
}

#[test]
fn stale_and_special_stateids_are_bad() {
    let o = t();
    let s = o.open(C1, b"a", F, 1, 0).unwrap();
    let other_boot = Opens::with(BOOT + 1, Limits::default());
    assert_eq!(other_boot.close(C1, &s, F), Err(StateError::BadStateid));
    assert_eq!(other_boot.test_stateid(C1, &s), Err(StateError::BadStateid));
    for sp in [Stateid::ANONYMOUS, Stateid::BYPASS, Stateid::CURRENT] {
        assert_eq!(o.close(C1, &sp, F), Err(StateError::BadStateid));
        assert_eq!(o.test_stateid(C1, &sp), Err(StateError::BadStateid));
    }
    assert_eq!(o.test_stateid(C1, &s), Ok(()));
    assert_eq!(o.test_stateid(C2, &s), Err(StateError::BadStateid));
    o.close(C1, &s, F).unwrap();
    assert_eq!(o.test_stateid(C1, &s), Err(StateError::BadStateid));
    assert!(!o.client_has_state(C1));
}

#[test]
fn check_io_rules() {
    let o = t();
    let ro = o.open(C1, b"a", F, ACCESS_READ, DENY_WRITE).unwrap();
    assert_eq!(o.check_io(C1, &ro, F, false), Ok(()));
    assert_eq!(o.check_io(C1, &ro, F, true), Err(StateError::OpenMode));
    assert_eq!(
        o.check_io(C1, &ro, F + 1, false),
        Err(StateError::BadStateid)
    );
    assert_eq!(o.check_io(C2, &ro, F, false), Err(StateError::BadStateid));
    assert_eq!(
        o.check_io(C1, &Stateid { seqid: 0, ..ro }, F, false),
        Ok(())
    );
    // anonymous writes meet the deny-write reservation; reads pass
    assert_eq!(
        o.check_io(C2, &Stateid::ANONYMOUS, F, true),
        Err(StateError::Locked)
    );
    assert_eq!(o.check_io(C2, &Stateid::ANONYMOUS, F, false), Ok(()));
    assert_eq!(o.check_io(C2, &Stateid::BYPASS, F, false), Ok(()));
    assert_eq!(
        o.check_io(C2, &Stateid::BYPASS, F, true),
        Err(StateError::Locked)
    );
    assert_eq!(o.check_io(C2, &Stateid::ANONYMOUS, F + 1, true), Ok(()));
    assert_eq!(
        o.check_io(C1, &Stateid::CURRENT, F, false),
        Err(StateError::BadStateid)
    );
    // write-only opens may read (as knfsd and the Linux client expect)
    let wo = o.open(C2, b"w", F + 1, ACCESS_WRITE, 0).unwrap();
    assert_eq!(o.check_io(C2, &wo, F + 1, false), Ok(()));
    assert_eq!(o.check_io(C2, &wo, F + 1, true), Ok(()));
    // a lock stateid carries its open's modes
    let l = o.lock(C1, &new_lock(ro, b"L"), F, r(0, 1), false).unwrap();
    assert_eq!(o.check_io(C1, &l, F, false), Ok(()));
    assert_eq!(o.check_io(C1, &l, F, true), Err(StateError::OpenMode));
    // unknown kinds (a delegation stateid) are not this table's
    let d = Stateid {
        seqid: 1,
        other: stateids::fresh_other(BOOT, Kind::Delegation),
    };
    assert_eq!(o.check_io(C1, &d, F, false), Err(StateError::BadStateid));
}

#[test]
fn locks_conflict_split_and_report_the_holder() {
    let o = t();
    let s1 = o.open(C1, b"o1", F, 3, 0).unwrap();
    let s2 = o.open(C2, b"o2", F, 3, 0).unwrap();
    let l1 = o
        .lock(C1, &new_lock(s1, b"L1"), F, r(0, 100), true)
        .unwrap();
    assert_eq!(l1.seqid, 1);
    assert_eq!(stateids::Kind::of(&l1.other), Some(Kind::Lock));
    let d = denied(o.lock(C2, &new_lock(s2, b"L2"), F, r(50, 10), false));
    assert_eq!(
        d,
        Denied {
            offset: 0,
            length: 100,
            write: true,
            clientid: C1,
            owner: b"L1".to_vec()
        }
    );
    // LOCKT: same answer, creates nothing; own locks never conflict
    assert_eq!(
        o.lockt(C2, b"L2", F, r(50, 10), false),
        Err(LockError::Denied(d))
    );
    assert_eq!(o.lockt(C1, b"L1", F, r(50, 10), true), Ok(()));
    assert_eq!(o.lockt(C2, b"L2", F, r(100, 10), true), Ok(()));
    // unlock the middle: the hole is free for others, the rest still held
    let l1b = o.locku(C1, &l1, F, r(40, 20)).unwrap();
    assert_eq!(l1b.seqid, 2);
    let l2 = o
        .lock(C2, &new_lock(s2, b"L2"), F, r(45, 10), true)
        .unwrap();
    assert_eq!(l2.seqid, 1);
    let d = denied(o.lock(C2, &Locker::Existing { lock: l2 }, F, r(30, 20), true));
    assert_eq!((d.offset, d.length), (0, 40));
    // old seqid on the lock stateid
    assert_eq!(
        o.lock(C1, &Locker::Existing { lock: l1 }, F, r(0, 1), true),
        Err(LockError::Status(StateError::OldStateid))
    );
    // CLOSE with locks → LOCKS_HELD; FREE_STATEID likewise
    assert_eq!(o.close(C1, &s1, F), Err(StateError::LocksHeld));
    assert_eq!(o.free_stateid(C1, &l1b), Err(StateError::LocksHeld));
    assert_eq!(o.free_stateid(C1, &s1), Err(StateError::LocksHeld));
    // release everything, then FREE_STATEID frees the lock stateid and CLOSE works
    let l1c = o
        .locku(C1, &l1b, F, Range::new(0, u64::MAX).unwrap())
        .unwrap();
    assert_eq!(o.free_stateid(C1, &l1c), Ok(()));
    assert_eq!(o.test_stateid(C1, &l1c), Err(StateError::BadStateid));
    assert_eq!(o.close(C1, &s1, F), Ok(()));
    assert!(!o.client_has_state(C1));
    assert!(o.client_has_state(C2));
}

#[test]
fn read_locks_share_and_upgrade_is_checked() {
    let o = t();
    let s1 = o.open(C1, b"o1", F, 3, 0).unwrap();
    let s2 = o.open(C2, b"o2", F, 3, 0).unwrap();
    let l1 = o
        .lock(C1, &new_lock(s1, b"L1"), F, r(0, 10), false)
        .unwrap();
    let l2 = o
        .lock(C2, &new_lock(s2, b"L2"), F, r(5, 10), false)
        .unwrap();
    // upgrading an overlapped read lock to write is denied by the other reader
    let d = denied(o.lock(C1, &Locker::Existing { lock: l1 }, F, r(0, 10), true));
    assert_eq!(
        (d.offset, d.length, d.write, d.clientid),
        (5, 10, false, C2)
    );
    // the non-overlapping part may be upgraded
    assert!(o
        .lock(C1, &Locker::Existing { lock: l1 }, F, r(0, 5), true)
        .is_ok());
    // a new open_to_lock_owner for an owner that has a stateid reuses it
    let again = o
        .lock(C2, &new_lock(s2, b"L2"), F, r(20, 1), false)
        .unwrap();
    assert_eq!(again.other, l2.other);
    assert_eq!(again.seqid, 2);
}

#[test]
fn write_lock_needs_write_open() {
    let o = t();
    let s = o.open(C1, b"o", F, ACCESS_READ, 0).unwrap();
    assert_eq!(
        o.lock(C1, &new_lock(s, b"L"), F, r(0, 1), true),
        Err(LockError::Status(StateError::OpenMode))
    );
    // nothing was created
    assert_eq!(o.lockt(C2, b"x", F, r(0, 1), true), Ok(()));
    assert_eq!(
        o.lock(C1, &new_lock(s, b"L"), F + 1, r(0, 1), false),
        Err(LockError::Status(StateError::BadStateid))
    );
}

#[test]
fn caps_answer_resource() {
    let o = Opens::with(
        BOOT,
        Limits {
            states_per_client: 2,
            states_total: 3,
            ranges_per_owner: 2,
            ranges_total: 100,
        },
    );
    let s = o.open(C1, b"a", F, 3, 0).unwrap();
    let l = o.lock(C1, &new_lock(s, b"L"), F, r(0, 1), true).unwrap();
    assert_eq!(o.open(C1, b"b", F, 1, 0), Err(StateError::Resource));
    let l = o
        .lock(C1, &Locker::Existing { lock: l }, F, r(10, 1), true)
        .unwrap();
    assert_eq!(
        o.lock(C1, &Locker::Existing { lock: l }, F, r(20, 1), true),
        Err(LockError::Status(StateError::Resource))
    );
    assert!(o.open(C2, b"a", F, 1, 0).is_ok());
    assert_eq!(o.open(C2, b"b", F, 1, 0), Err(StateError::Resource));
    // a failed first LOCK leaves no lock stateid behind
    let o = Opens::with(
        BOOT,
        Limits {
            states_per_client: 8,
            states_total: 8,
            ranges_per_owner: 0,
            ranges_total: 100,
        },
    );
    let s = o.open(C1, b"a", F, 3, 0).unwrap();
    assert_eq!(
        o.lock(C1, &new_lock(s, b"L"), F, r(0, 1), true),
        Err(LockError::Status(StateError::Resource))
    );
    assert_eq!(o.close(C1, &s, F), Ok(()));
    assert!(!o.client_has_state(C1));
}

#[test]
fn purge_frees_opens_locks_and_reservations() {
    let o = t();
    let s = o.open(C1, b"a", F, 3, 3).unwrap();
    o.lock(C1, &new_lock(s, b"L"), F, r(0, u64::MAX), true)
        .unwrap();
    assert!(o.client_has_state(C1));
    assert_eq!(o.open(C2, b"b", F, 1, 0), Err(StateError::ShareDenied));
    o.purge_client(C1);
    assert!(!o.client_has_state(C1));
    assert_eq!(o.test_stateid(C1, &s), Err(StateError::BadStateid));
    let s2 = o.open(C2, b"b", F, 3, 0).unwrap();
    assert!(o.lock(C2, &new_lock(s2, b"M"), F, r(0, 1), true).is_ok());
    assert_eq!(o.check_io(C2, &Stateid::ANONYMOUS, F, true), Ok(()));
}

#[test]
fn table_wide_range_cap_counts_splits_and_releases() {
    let o = Opens::with(
        BOOT,
        Limits {
            states_per_client: 8,
            states_total: 8,
            ranges_per_owner: 100,
            ranges_total: 3,
        },
    );
    let s1 = o.open(C1, b"a", F, 3, 0).unwrap();
    let s2 = o.open(C2, b"b", F + 1, 3, 0).unwrap();
    let l1 = o.lock(C1, &new_lock(s1, b"L"), F, r(0, 100), true).unwrap();
    let l1 = o.locku(C1, &l1, F, r(10, 10)).unwrap(); // split: 2 ranges
    let l2 = o
        .lock(C2, &new_lock(s2, b"M"), F + 1, r(0, 10), true)
        .unwrap(); // 3
    assert_eq!(
        o.lock(C2, &Locker::Existing { lock: l2 }, F + 1, r(20, 1), true),
        Err(LockError::Status(StateError::Resource))
    );
    assert_eq!(o.locku(C1, &l1, F, r(50, 1)), Err(StateError::Resource));
    // merging back frees one; extending a held range costs nothing
    let l1 = o
        .lock(C1, &Locker::Existing { lock: l1 }, F, r(10, 10), true)
        .unwrap();
    assert!(o
        .lock(C2, &Locker::Existing { lock: l2 }, F + 1, r(20, 1), true)
        .is_ok());
    assert!(o
        .lock(C1, &Locker::Existing { lock: l1 }, F, r(0, 200), true)
        .is_ok());
    // a purge returns its ranges
    o.purge_client(C2);
    let s3 = o.open(C2, b"c", F + 2, 3, 0).unwrap();
    let l3 = o
        .lock(C2, &new_lock(s3, b"N"), F + 2, r(0, 1), true)
        .unwrap();
    assert!(o
        .lock(C2, &Locker::Existing { lock: l3 }, F + 2, r(5, 1), true)
        .is_ok());
    assert!(o
        .lock(C2, &Locker::Existing { lock: l3 }, F + 2, r(9, 1), true)
        .is_err());
}

/// Delete on last close (`fs::imp::orphans`): the hook hears of a file exactly when its
/// last open goes, by CLOSE or by the client's purge; an OPEN_DOWNGRADE, a CLOSE of one
/// of two opens, or a refused CLOSE do not count.
#[test]
fn last_close_is_reported_once_per_file() {
    let o = t();
    let heard = Arc::new(Mutex::new(Vec::new()));
    let h = heard.clone();
    o.on_last_close(Arc::new(move |id| h.lock().unwrap().push(id)));
    o.open(C1, b"a", F, ACCESS_READ, 0).unwrap();
    let a = o.open(C1, b"a", F, ACCESS_WRITE, 0).unwrap();
    let b = o.open(C2, b"b", F, ACCESS_READ, 0).unwrap();
    assert!(o.is_open(F) && !o.is_open(F + 1));
    let a = o.downgrade(C1, &a, F, ACCESS_READ, 0).unwrap();
    assert!(
        heard.lock().unwrap().is_empty(),
        "OPEN_DOWNGRADE is no close"
    );
    assert_eq!(o.close(C2, &a, F), Err(StateError::BadStateid));
    o.close(C1, &a, F).unwrap();
    assert!(o.is_open(F), "C2 still holds it");
    assert!(heard.lock().unwrap().is_empty());
    o.close(C2, &b, F).unwrap();
    assert!(!o.is_open(F));
    assert_eq!(*heard.lock().unwrap(), vec![F]);
    // The purge of a client with opens of two files: both reported.
    o.open(C1, b"a", F, ACCESS_READ, 0).unwrap();
    o.open(C1, b"a", F + 1, ACCESS_READ, 0).unwrap();
    o.purge_client(C1);
    let mut got = heard.lock().unwrap().clone();
    got.sort_unstable();
    assert_eq!(got, vec![F, F, F + 1]);
    assert!(!o.is_open(F) && !o.is_open(F + 1));
}

/// RFC 9754 §5's OPEN_XOR_DELEGATION closes the open its OPEN made; two OPENs of one
/// owner racing must not both count as its maker, and the maker's close must fail
/// once the other upgraded it (the open then stays, for the upgrader's stateid).
#[test]
fn only_the_open_that_made_it_says_so_and_its_close_fails_after_an_upgrade() {
    let o = t();
    let (made, fresh) = o.open_or_upgrade(C1, b"a", F, ACCESS_READ, 0).unwrap();
    assert!(fresh);
    let (up, fresh) = o.open_or_upgrade(C1, b"a", F, ACCESS_WRITE, 0).unwrap();
    assert!(!fresh);
    assert_eq!(up.other, made.other);
    assert_eq!(o.close(C1, &made, F), Err(StateError::OldStateid));
    assert!(o.client_has_state(C1));
    o.close(C1, &up, F).unwrap();
    assert!(!o.client_has_state(C1));
}
