//! `[ha]` with `ha.etcd` (docs/ha.md "Fencing: etcd"): the identity's lease, recovery
//! record and probe in a real etcd (tests/common/etcd.rs: one member on loopback), on
//! a store whose own conditional writes do not work — a shared `fs` directory whose
//! `cas` directory is a plain file, so every conditional write of the store fails (as
//! Garage's are ignored). Without `ha.etcd` that store is refused at start; with it:
//!
//! - `the_identity_moves_through_etcd`: a gateway whose etcd does not answer at start
//!   exits with an error that says so (no hang); an active and a standby on etcd; a
//!   v4.1 client holds an open, a byte-range lock and a COMMITted write; another
//!   client's conflicting lock is refused; `kill -9` of the active; the standby takes
//!   the identity, the client reclaims its open and lock there and finishes its write,
//!   the second client's lock is refused during grace and after; the keys are in etcd
//!   and the store's `cas` is untouched.
//! - `a_frozen_etcd_stops_the_holder`: etcd frozen (SIGSTOP: connections taken, never
//!   answered) under a holder: it stops serving NFSv4 at its deadline (`3L/4` after its
//!   last renewal was sent) and says so, its held metric drops, the standby serves
//!   nothing meanwhile; once etcd answers again exactly one gateway serves, never two.
//!
//! Skipped (saying so) only when the etcd binary is absent outside CI; in CI its
//! absence fails (tests/setup.sh installs etcd-server).

mod common;
#[path = "common/etcd.rs"]
mod etcd;
#[path = "common/ha.rs"]
mod ha;
#[path = "common/nfs4_client.rs"]
mod nfs4_client;

use ha::*;
use nfs4_client::*;
use std::path::Path;
use std::time::{Duration, Instant};

const LEASE_S: u64 = 2;

/// A shared `fs` root whose conditional writes all fail: `.nfsgw-tmp.shared/cas`, the
/// directory `backend::fs::cas` keeps its objects in, is a regular file.
fn broken_cas_root(work: &Path) -> std::path::PathBuf {
    let root = work.join("objects");
    let shared = root.join(".nfsgw-tmp.shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::write(shared.join("cas"), b"not a directory").unwrap();
    root
}

fn spawn_ha(root: &Path, work: &Path, name: &str, role: &str, ha: &str) -> Gw {
    spawn(&Spec {
        ha,
        ..Spec::local(root, work, name, role, LEASE_S)
    })
}

/// Waits for `gw` to exit (it must, within `within`); its log.
fn exits(gw: &mut Gw, within: Duration) -> String {
    let end = Instant::now() + within;
    loop {
        if let Some(s) = gw.child.try_wait().unwrap() {
            assert!(!s.success());
            return gw.log();
        }
        assert!(
            Instant::now() < end,
            "still running after {within:?}:\n{}",
            gw.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn log_says(gw: &Gw, what: &str, within: Duration) -> Instant {
    let end = Instant::now() + within;
    while !gw.log().contains(what) {
        assert!(
            Instant::now() < end,
            "no \"{what}\" within {within:?}:\n{}",
            gw.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Instant::now()
}

fn etcd_keys(e: &etcd::Etcd) -> String {
    format!("etcd = [\"{}\"]\netcd_prefix = \"test/\"", e.url)
}

#[test]
fn the_identity_moves_through_etcd() {
    let Some(e) = etcd::start() else { return };
    let work = tempfile::tempdir().unwrap();
    let root = broken_cas_root(work.path());

    // The store alone cannot fence: refused.
    let mut plain = spawn_ha(&root, work.path(), "plain", "active", "");
    let log = exits(&mut plain, Duration::from_secs(20));
    assert!(
        log.contains("fencing through the fs store's conditional writes"),
        "{log}"
    );
    // etcd that does not answer at start: a clear error within the call bound.
    let dead = format!("etcd = [\"http://127.0.0.1:{}\"]", free_port());
    let mut gone = spawn_ha(&root, work.path(), "gone", "active", &dead);
    let log = exits(&mut gone, Duration::from_secs(20));
    assert!(
        log.contains("fencing through etcd") && log.contains("no endpoint answered"),
        "{log}"
    );

    let on = etcd_keys(&e);
    let mut a = spawn_ha(&root, work.path(), "a", "active", &on);
    let (mut c1, _) =
        session_when_served(a.reach, b"client-one", Duration::from_secs(20), || a.log());
    assert!(a.log().contains("ha: etcd is the fence"), "{}", a.log());
    let held = hold_state(&mut c1);
    let (mut c2, _) =
        session_when_served(a.reach, b"client-two", Duration::from_secs(5), || a.log());
    conflicting_lock_refused_before(&mut c2, &held.fh);
    drop(c2);
    // Lease, record and probe are etcd's keys under the prefix.
    assert!(
        e.count("test/ha/t/") >= 3,
        "keys in etcd: {}",
        e.count("test/")
    );
    assert_eq!(e.count("test/ha/t/lease"), 1);
    assert_eq!(e.count("test/ha/t/record"), 1);

    let b = spawn_ha(&root, work.path(), "b", "standby", &on);
    log_says(
        &b,
        "ha: identity held by another gateway",
        Duration::from_secs(20),
    );
    let mut probe = b.connect();
    let res = probe.compound(&nfs_wire::v4call::Ops::new().exchange_id([9; 8], b"x"));
    assert_eq!(res.status, NFS4ERR_DELAY, "a standby serves no NFSv4 state");
    assert_eq!(b.metric("nfsgw_ha_identity_held"), Some(0));

    a.child.kill().unwrap(); // SIGKILL
    a.child.wait().unwrap();
    let killed = Instant::now();
    let (mut c1, waited) = session_when_served(
        b.reach,
        b"client-one",
        Duration::from_secs(LEASE_S * 5),
        || b.log(),
    );
    let open = reclaim_state(&mut c1, &held);
    finish_write(&mut c1, &held, &open);
    let (mut c2, _) =
        session_when_served(b.reach, b"client-two", Duration::from_secs(5), || b.log());
    second_client_conflicts(&mut c1, &mut c2, &held.fh);
    read_back(&mut c1, &held.fh, &open);
    assert!(b.log().contains("ha: took the identity"), "{}", b.log());
    assert_eq!(b.metric("nfsgw_ha_identity_held"), Some(1));
    assert!(
        b.metric("nfsgw_ha_reclaims_total{result=\"accepted\"}")
            .unwrap()
            >= 2
    );
    eprintln!(
        "kill -9 -> session on the standby {waited:?}, reclaimed {:?}",
        killed.elapsed()
    );
    // Nothing of the identity went to the store.
    assert!(root.join(".nfsgw-tmp.shared/cas").is_file());
}

/// The per-gateway identity_held gauge, 0 when its stats do not answer.
fn held(gw: &Gw) -> u64 {
    gw.metric("nfsgw_ha_identity_held").unwrap_or(0)
}

#[test]
fn a_frozen_etcd_stops_the_holder() {
    let Some(e) = etcd::start() else { return };
    let work = tempfile::tempdir().unwrap();
    let root = broken_cas_root(work.path());
    let on = etcd_keys(&e);
    let a = spawn_ha(&root, work.path(), "a", "active", &on);
    let (mut c1, _) =
        session_when_served(a.reach, b"client-one", Duration::from_secs(20), || a.log());
    let held_state = hold_state(&mut c1);
    let b = spawn_ha(&root, work.path(), "b", "standby", &on);
    log_says(
        &b,
        "ha: identity held by another gateway",
        Duration::from_secs(20),
    );

    e.freeze();
    let frozen = Instant::now();
    let stopped = log_says(
        &a,
        "stopped serving NFSv4",
        Duration::from_secs(LEASE_S * 2),
    );
    // The last renewal was sent at most L/4 (plus a poll) before the freeze: the stop
    // comes within 3L/4 of it, noticed within a tick; in any case before a standby
    // could take over (L after it).
    let after = stopped - frozen;
    assert!(
        after < Duration::from_secs(LEASE_S),
        "stopped {after:?} after the freeze"
    );
    assert_eq!(held(&a), 0, "the address follows this");
    // Neither gateway serves the client while etcd hangs.
    let res = c1.run(|o| o.putfh(&held_state.fh));
    assert_ne!(res.status, NFS4_OK, "the stopped holder served a COMPOUND");
    let mut probe = b.connect();
    let res = probe.compound(&nfs_wire::v4call::Ops::new().exchange_id([9; 8], b"x"));
    assert_eq!(
        res.status, NFS4ERR_DELAY,
        "the standby serves nothing without etcd"
    );
    assert!(!b.log().contains("took the identity"), "{}", b.log());
    std::thread::sleep(Duration::from_secs(LEASE_S).saturating_sub(frozen.elapsed()));

    // etcd answers again: exactly one serves, never both.
    e.resume();
    let end = Instant::now() + Duration::from_secs(LEASE_S * 6);
    let mut one = false;
    while Instant::now() < end {
        let (ha, hb) = (held(&a), held(&b));
        assert!(
            ha + hb <= 1,
            "both hold the identity:\n{}\n{}",
            a.log(),
            b.log()
        );
        if ha + hb == 1 {
            one = true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        one,
        "nobody serves after etcd came back:\n{}\n{}",
        a.log(),
        b.log()
    );
    eprintln!("etcd frozen -> holder stopped after {after:?}");
}

/// On a store whose own conditional writes work, a gateway of the identity without
/// `ha.etcd` beside gateways on etcd would be a second fence: refused at start
/// (`ha::mixed`).
#[test]
fn a_gateway_without_etcd_beside_etcd_ones_is_refused() {
    let Some(e) = etcd::start() else { return };
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("objects");
    std::fs::create_dir_all(&root).unwrap();
    let a = spawn_ha(&root, work.path(), "a", "active", &etcd_keys(&e));
    let _ = session_when_served(a.reach, b"client-one", Duration::from_secs(20), || a.log());
    let mut plain = spawn_ha(&root, work.path(), "plain", "standby", "");
    let log = exits(&mut plain, Duration::from_secs(20));
    assert!(
        log.contains("is fenced through etcd by other gateways"),
        "{log}"
    );
    assert_eq!(a.metric("nfsgw_ha_identity_held"), Some(1));
}
