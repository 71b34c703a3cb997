//! Unit tests of the client table: records, limits, persistence and the grace period.

use super::*;

fn limits() -> Limits {
    Limits {
        lease: Duration::from_millis(200),
        grace: Duration::from_secs(5),
        max_clients: 3,
        ..Default::default()
    }
}

#[test]
fn insert_confirm_purge_and_limits() {
    let cl = Clients::new(limits(), None);
    let a = cl
        .with(|t| t.insert(b"a", [1; 8], Principal::None))
        .unwrap();
    assert!(!cl.is_live(a));
    cl.with(|t| t.confirm(a));
    assert!(cl.is_live(a));
    // Table full of unconfirmed records: the oldest unconfirmed one goes.
    let b = cl
        .with(|t| t.insert(b"b", [1; 8], Principal::None))
        .unwrap();
    let _c = cl
        .with(|t| t.insert(b"c", [1; 8], Principal::None))
        .unwrap();
    let _d = cl
        .with(|t| t.insert(b"d", [1; 8], Principal::None))
        .unwrap();
    assert!(cl.with(|t| t.client(b).is_none()));
    assert!(cl.is_live(a));
    // Lease expiry: a sweep purges the confirmed client and reports it.
    std::thread::sleep(Duration::from_millis(250));
    assert!(!cl.is_live(a));
    let (_, purged) = cl.with_purge(|t| t.sweep());
    assert_eq!(purged.courtesy, vec![a], "a courtesy client now");
    assert!(purged.gone.is_empty());
}

#[test]
fn grace_persists_owners_and_ends_on_reclaim_complete() {
    let dir = tempfile::tempdir().unwrap();
    {
        let cl = Clients::new(limits(), Some(dir.path()));
        assert!(!cl.in_grace(), "nothing to reclaim on a first start");
        let a = cl
            .with(|t| t.insert(b"owner-a", [1; 8], Principal::None))
            .unwrap();
        cl.with(|t| t.confirm(a));
    }
    let cl = Clients::new(limits(), Some(dir.path()));
    assert!(cl.in_grace());
    let a = cl
        .with(|t| t.insert(b"owner-a", [2; 8], Principal::None))
        .unwrap();
    let other = cl
        .with(|t| t.insert(b"owner-b", [2; 8], Principal::None))
        .unwrap();
    assert!(cl.may_reclaim(a));
    assert!(!cl.may_reclaim(other));
    assert_ne!(a, 0);
    cl.with(|t| t.confirm(a));
    assert_eq!(cl.with(|t| t.reclaim_complete(a)), Ok(()));
    assert_eq!(
        cl.with(|t| t.reclaim_complete(a)),
        Err(StateError::CompleteAlready)
    );
    assert!(!cl.in_grace(), "every old client reclaimed: grace over");
    assert!(!cl.may_reclaim(a));
}

#[test]
fn grace_ends_after_its_time_and_forgets_absent_clients() {
    let dir = tempfile::tempdir().unwrap();
    let short = Limits {
        grace: Duration::from_millis(100),
        ..limits()
    };
    {
        let cl = Clients::new(short, Some(dir.path()));
        let a = cl
            .with(|t| t.insert(b"gone", [1; 8], Principal::None))
            .unwrap();
        cl.with(|t| t.confirm(a));
    }
    let cl = Clients::new(short, Some(dir.path()));
    assert!(cl.in_grace());
    std::thread::sleep(Duration::from_millis(150));
    assert!(!cl.in_grace());
    drop(cl);
    let cl = Clients::new(short, Some(dir.path()));
    assert!(
        !cl.in_grace(),
        "the absent client is forgotten after a grace period"
    );
}

/// RFC 8881 §8.4.2 with knfsd's extension: reclaims arriving at the end of the
/// grace period keep it open (one `RECLAIM_GAP` at a time, at most a second
/// `grace`); a gap ends it for good, and clients that did not reclaim are
/// forgotten.
#[test]
fn grace_is_extended_while_reclaims_keep_arriving_and_never_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let short = Limits {
        grace: Duration::from_millis(300),
        ..limits()
    };
    {
        let cl = Clients::new(short, Some(dir.path()));
        for o in [&b"late"[..], b"absent"] {
            let id = cl.with(|t| t.insert(o, [1; 8], Principal::None)).unwrap();
            cl.with(|t| t.confirm(id));
        }
    }
    let cl = Clients::new(short, Some(dir.path()));
    let late = cl
        .with(|t| t.insert(b"late", [2; 8], Principal::None))
        .unwrap();
    cl.with(|t| t.confirm(late));
    // Reclaims right before the end and every 100 ms after it: still in grace
    // past 300 ms.
    std::thread::sleep(Duration::from_millis(250));
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(300) {
        assert!(cl.may_reclaim(late), "reclaims keep the grace period open");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(cl.grace_elapsed() > short.grace);
    assert!(cl.in_grace());
    // Never past a second grace period, reclaims or not.
    while cl.grace_elapsed() < short.grace * 2 {
        cl.may_reclaim(late);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!cl.may_reclaim(late));
    assert!(!cl.in_grace());
    assert!(!cl.may_reclaim(late), "once over, it stays over");
    drop(cl);
    // Next start: "late" (a client of this run) may reclaim, "absent" (which
    // never came back) is forgotten.
    let cl = Clients::new(short, Some(dir.path()));
    let absent = cl
        .with(|t| t.insert(b"absent", [3; 8], Principal::None))
        .unwrap();
    let late = cl
        .with(|t| t.insert(b"late", [3; 8], Principal::None))
        .unwrap();
    assert!(!cl.may_reclaim(absent));
    assert!(cl.may_reclaim(late));
}

/// Without reclaims the grace period ends on time, and a reclaim after a gap does
/// not reopen it.
#[test]
fn grace_is_not_extended_without_recent_reclaims() {
    let dir = tempfile::tempdir().unwrap();
    let short = Limits {
        grace: Duration::from_millis(200),
        ..limits()
    };
    {
        let cl = Clients::new(short, Some(dir.path()));
        let id = cl
            .with(|t| t.insert(b"x", [1; 8], Principal::None))
            .unwrap();
        cl.with(|t| t.confirm(id));
    }
    let cl = Clients::new(short, Some(dir.path()));
    let x = cl
        .with(|t| t.insert(b"x", [2; 8], Principal::None))
        .unwrap();
    cl.with(|t| t.confirm(x));
    assert!(cl.may_reclaim(x), "a reclaim at the start");
    std::thread::sleep(RECLAIM_GAP + Duration::from_millis(100));
    assert!(!cl.in_grace(), "the last reclaim is older than RECLAIM_GAP");
    assert!(!cl.may_reclaim(x));
}

/// The stats endpoint's gauges (`Clients::counts`): each record counted once, by kind.
#[test]
fn counts_by_kind_for_the_gauges() {
    let cl = Clients::new(limits(), None);
    assert_eq!(cl.counts(), ClientCounts::default());
    let a = cl
        .with(|t| t.insert(b"a", [1; 8], Principal::None))
        .unwrap();
    let _b = cl
        .with(|t| t.insert(b"b", [1; 8], Principal::None))
        .unwrap();
    cl.with(|t| t.confirm(a));
    let n = cl.counts();
    assert_eq!(
        (n.confirmed, n.courtesy, n.unconfirmed, n.sessions),
        (1, 0, 1, 0)
    );
    std::thread::sleep(Duration::from_millis(250));
    let (_, purged) = cl.with_purge(|t| t.sweep());
    assert_eq!(purged.courtesy, vec![a]);
    let n = cl.counts();
    assert_eq!((n.confirmed, n.courtesy), (0, 1), "{n:?}");
}

/// Every reclaim the table answers is counted (`nfsgw_ha_reclaims_total`): accepted
/// ones, refused ones in the grace period, and refused ones after it — what
/// NFS4ERR_NO_GRACE answers once the grace period is over (`may_reclaim` is asked
/// first by every reclaim, `nfs4::state_ops::reclaim_allowed`).
#[test]
fn reclaims_refused_after_the_grace_period_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    {
        let cl = Clients::new(limits(), Some(dir.path()));
        let a = cl
            .with(|t| t.insert(b"owner-a", [1; 8], Principal::None))
            .unwrap();
        cl.with(|t| t.confirm(a));
    }
    let total = crate::state::recovery::reclaims();
    let cl = Clients::new(limits(), Some(dir.path()));
    let a = cl
        .with(|t| t.insert(b"owner-a", [2; 8], Principal::None))
        .unwrap();
    let stranger = cl
        .with(|t| t.insert(b"owner-x", [2; 8], Principal::None))
        .unwrap();
    assert!(cl.may_reclaim(a));
    assert!(!cl.may_reclaim(stranger));
    assert_eq!(cl.reclaims(), (1, 1), "in the grace period");
    cl.with(|t| t.confirm(a));
    assert_eq!(cl.with(|t| t.reclaim_complete(a)), Ok(()));
    assert!(!cl.in_grace());
    assert!(!cl.may_reclaim(a));
    assert!(!cl.may_reclaim(stranger));
    assert_eq!(cl.reclaims(), (1, 3), "after it: refused, and counted");
    let now = crate::state::recovery::reclaims();
    assert!(
        now.0 > total.0 && now.1 >= total.1 + 3,
        "{total:?} -> {now:?}"
    );
}
