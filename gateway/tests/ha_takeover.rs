//! `[ha]` (docs/ha.md) with real gateway processes on one shared `fs` directory
//! (`backend.shared = true`): an active holds the identity; a second active is refused
//! while it renews; `kill -9` of the active; the standby takes the identity within a
//! lease and a poll, runs the grace period for the active's client, which reclaims its
//! open (CLAIM_PREVIOUS) and its byte-range lock (LOCK reclaim) on the standby's port
//! (the test reconnects by port: moving an address is the operator's tool, tools/ha/);
//! another client's conflicting lock is refused before the kill (NFS4ERR_DENIED), during
//! grace (NFS4ERR_GRACE: the record names both clients, and the grace period lasts past
//! the second's RECLAIM_COMPLETE until the first's) and after it (NFS4ERR_DENIED); the COMMITted bytes are there and the write in progress is
//! finished by the verifier rule (the successor's verifier differs, so the client
//! sends its UNSTABLE data again). Then a torn recovery record:
//! the next takeover lets no client reclaim (NFS4ERR_NO_GRACE), never grants a lock it
//! cannot prove. The client also held a read delegation: it reclaims it at the
//! standby (OPEN CLAIM_PREVIOUS with OPEN_DELEGATE_READ), and another client's write
//! OPEN after the grace period recalls it from the reclaimer.
//!
//! With `[pnfs]` (docs/ha.md "pNFS"): a client's layout stateid from the dead
//! metadata server verifies at the successor (the key is the identity's, in the
//! store), so its LAYOUTCOMMIT with loca_reclaim commits what it wrote through a data
//! server; a forged stateid or another client's reclaim is NFS4ERR_RECLAIM_BAD.

mod common;
#[path = "common/ha.rs"]
mod ha;
#[path = "common/ha_pnfs.rs"]
mod ha_pnfs;
#[path = "common/nfs4_client.rs"]
mod nfs4_client;

use ha::*;
use nfs4_client::*;
use std::path::Path;
use std::time::{Duration, Instant};

const LEASE_S: u64 = 2;

/// A gateway on its own port of 127.0.0.1 serving identity "t" as `role`.
fn spawn_local(root: &Path, work: &Path, name: &str, role: &str) -> Gw {
    spawn_with(root, work, name, role, "")
}

/// `spawn_local` with more configuration (`extra`: whole sections).
fn spawn_with(root: &Path, work: &Path, name: &str, role: &str, extra: &str) -> Gw {
    spawn(&Spec {
        extra,
        ..Spec::local(root, work, name, role, LEASE_S)
    })
}

fn served(gw: &Gw, owner: &[u8], within: Duration) -> (Tcp41, Duration) {
    session_when_served(gw.reach, owner, within, || gw.log())
}

/// `served` with this connection as the session's back channel (delegations).
fn served_bc(gw: &Gw, owner: &[u8], within: Duration) -> (Tcp41, Duration) {
    session_when_served_flags(gw.reach, owner, CONN_BACK_CHAN, within, || gw.log())
}

#[test]
fn standby_takes_over_and_clients_reclaim() {
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("objects");
    std::fs::create_dir_all(&root).unwrap();
    let mut a = spawn_local(&root, work.path(), "a", "active");
    let (mut c1, _) = served_bc(&a, b"client-one", Duration::from_secs(20));
    let held = hold_state(&mut c1);
    let delegated = hold_read_delegation(&mut c1);
    let (mut c2, _) = served(&a, b"client-two", Duration::from_secs(5));
    conflicting_lock_refused_before(&mut c2, &held.fh);
    drop(c2);

    // A second active is refused while the first renews.
    let mut dup = spawn_local(&root, work.path(), "dup", "active");
    let end = Instant::now() + Duration::from_secs(LEASE_S * 5);
    let status = loop {
        if let Some(s) = dup.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < end,
            "second active not refused:\n{}",
            dup.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(!status.success());
    assert!(
        dup.log().contains("refusing to start a second active"),
        "{}",
        dup.log()
    );

    // The standby waits (DELAY) while the active holds the identity.
    let b = spawn_local(&root, work.path(), "b", "standby");
    let mut probe = b.connect();
    let res = probe.compound(&nfs_wire::v4call::Ops::new().exchange_id([9; 8], b"x"));
    assert_eq!(res.status, NFS4ERR_DELAY, "a standby serves no NFSv4 state");
    // Who holds the identity, as each gateway says (docs/ha.md "Stats and logs").
    let (a_holder, a_self) = holder(&a);
    assert_eq!(a_holder, a_self, "the active says it holds the identity");
    assert_eq!(a.metric("nfsgw_ha_identity_held"), Some(1));
    let (b_saw, b_self) = wait_holder(&b, |h| h == a_self);
    assert_ne!(b_self, a_self, "each gateway its own name");
    assert_eq!(b_saw, a_self, "the standby names the active as the holder");
    assert_eq!(b.metric("nfsgw_ha_identity_held"), Some(0));
    let before = ha_counts(&b);

    a.child.kill().unwrap(); // SIGKILL
    a.child.wait().unwrap();
    let killed = Instant::now();

    // Client one on the standby's port: a new client id, the same server owner; it
    // reclaims its open and its lock and finishes its write.
    let (mut c1, waited) = served_bc(&b, b"client-one", Duration::from_secs(LEASE_S * 5));
    assert!(
        waited <= Duration::from_secs(LEASE_S * 3),
        "takeover took {waited:?}"
    );
    let open = reclaim_state(&mut c1, &held);
    let first_op = killed.elapsed();
    let deleg = reclaim_read_delegation(&mut c1, &delegated);
    finish_write(&mut c1, &held, &open);

    // Client two: new locks wait for the grace period, then conflict; its write OPEN
    // of the delegated file recalls the reclaimed delegation.
    let (mut c2, _) = served(&b, b"client-two", Duration::from_secs(5));
    second_client_conflicts(&mut c1, &mut c2, &held.fh);
    write_open_recalls_the_reclaimed_delegation(&mut c1, &mut c2, &delegated, &deleg);
    read_back(&mut c1, &held.fh, &open);
    assert!(b.log().contains("ha: took the identity"), "{}", b.log());
    eprintln!("kill -9 -> session on the standby {waited:?}, -> lock reclaimed {first_op:?}");

    // The successor's stats: it holds the identity, one takeover, one grace period
    // started and ended early (client one's RECLAIM_COMPLETE), the open, lock and
    // delegation reclaims accepted, none refused.
    let (b_holder, b_self) = holder(&b);
    assert_eq!(b_holder, b_self, "the successor says it holds the identity");
    assert_eq!(b.metric("nfsgw_ha_identity_held"), Some(1));
    let after = ha_counts(&b);
    assert_eq!(after.takeovers, before.takeovers + 1, "takeovers");
    assert_eq!(after.started, before.started + 1, "grace periods started");
    assert_eq!(after.early, before.early + 1, "grace periods ended early");
    assert!(
        after.accepted >= before.accepted + 3,
        "open, lock and delegation reclaims accepted: {} -> {}",
        before.accepted,
        after.accepted
    );
    assert_eq!(after.refused, before.refused, "no reclaim refused");

    torn_record_lets_no_client_reclaim(&root, work.path(), b, &held.fh);
}

/// The record torn behind the holder's back, then the holder killed: the successor
/// serves, but refuses every reclaim (it cannot prove who held what).
fn torn_record_lets_no_client_reclaim(root: &Path, work: &Path, mut b: Gw, fh: &[u8]) {
    let dir = root.join(".nfsgw-tmp.shared/cas/ha~t~record");
    let newest = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .max()
        .unwrap();
    std::fs::write(&newest, b"nfsgw-recovery 1\nowner 6\n").unwrap();
    let c = spawn_local(root, work, "c", "standby");
    b.child.kill().unwrap();
    b.child.wait().unwrap();
    let (mut c1, _) = served(&c, b"client-one", Duration::from_secs(LEASE_S * 5));
    let clientid = c1.clientid;
    let (st, _) = c1.seq_run(|o| {
        o.putfh(fh).open(
            clientid,
            b"oo",
            ACCESS_BOTH | WANT_NO_DELEG,
            0,
            How::NoCreate,
            Claim::Previous(0),
        )
    });
    assert_eq!(st, NFS4ERR_NO_GRACE, "no reclaim from a torn record");
    assert!(c.log().contains("recovery record is torn"), "{}", c.log());
    let n = ha_counts(&c);
    assert_eq!(n.torn, 1, "the torn record counted");
    assert_eq!(n.takeovers, 1);
    assert_eq!(n.started, 0, "no client to wait for: no grace period");
    assert_eq!(
        (n.accepted, n.refused),
        (0, 1),
        "the reclaim counted as refused"
    );
}

/// `nfsgw_ha_identity_holder`'s labels at `gw`: (holder, gateway).
fn holder(gw: &Gw) -> (String, String) {
    try_holder(gw).unwrap_or_else(|| panic!("no nfsgw_ha_identity_holder in:\n{}", gw.metrics()))
}

fn try_holder(gw: &Gw) -> Option<(String, String)> {
    let m = gw.metrics();
    let line = m
        .lines()
        .find(|l| l.starts_with("nfsgw_ha_identity_holder{"))?;
    let label = |k: &str| {
        let at = line.find(&format!("{k}=\"")).expect(k) + k.len() + 2;
        line[at..].split('"').next().unwrap().to_string()
    };
    assert!(line.contains("identity=\"t\""), "{line}");
    Some((label("holder"), label("gateway")))
}

/// `holder`, once the holder label satisfies `f` (the keeper's next look; 10 s).
fn wait_holder(gw: &Gw, f: impl Fn(&str) -> bool) -> (String, String) {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        match try_holder(gw) {
            Some(h) if f(&h.0) || Instant::now() > end => return h,
            None if Instant::now() > end => return holder(gw),
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// The `[ha]` counters of one gateway's /metrics.
struct HaCounts {
    takeovers: u64,
    torn: u64,
    started: u64,
    early: u64,
    accepted: u64,
    refused: u64,
}

fn ha_counts(gw: &Gw) -> HaCounts {
    let m = |s: &str| gw.metric(s).unwrap_or_else(|| panic!("no {s}"));
    HaCounts {
        takeovers: m("nfsgw_ha_takeovers_total"),
        torn: m("nfsgw_ha_records_torn_total"),
        started: m("nfsgw_ha_grace_periods_total{how=\"started\"}"),
        early: m("nfsgw_ha_grace_periods_total{how=\"ended_early\"}"),
        accepted: m("nfsgw_ha_reclaims_total{result=\"accepted\"}"),
        refused: m("nfsgw_ha_reclaims_total{result=\"refused\"}"),
    }
}

/// Waits until `gw`'s log contains `what`, panicking with the log after `within`.
fn log_says(gw: &Gw, what: &str, within: Duration) {
    let end = Instant::now() + within;
    while !gw.log().contains(what) {
        assert!(
            Instant::now() < end,
            "no \"{what}\" within {within:?}:\n{}",
            gw.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// RPC-over-RDMA through a takeover (docs/ha.md "RPC-over-RDMA through a takeover"):
/// both gateways listen for RDMA on one address (the `soft` provider: a host-local
/// name only one process can hold, as an RDMA device binds a service address only
/// where it is). The standby cannot listen while the active lives: it starts on TCP
/// alone and says so. `kill -9` of the active: the standby takes the identity, its
/// RDMA listener binds the address the client knows, and the client, reconnecting
/// there over RDMA, reclaims its open and lock, finishes its write by the verifier
/// rule and reads every COMMITted byte.
#[test]
fn the_rdma_listener_follows_the_identity() {
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("objects");
    std::fs::create_dir_all(&root).unwrap();
    let rdma = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    let start = |name: &str, role: &str| {
        let addr = ([127, 0, 0, 1], free_port()).into();
        spawn(&Spec {
            root: &root,
            work: work.path(),
            name,
            role,
            lease_s: LEASE_S,
            listen: addr,
            reach: addr,
            netns: None,
            rdma: Some(rdma),
            extra: "",
            ha: "",
        })
    };
    let mut a = start("rdma-a", "active");
    log_says(&a, "over RPC-over-RDMA", Duration::from_secs(20));
    let b = start("rdma-b", "standby");
    log_says(&b, "rdma: cannot listen yet", Duration::from_secs(20));
    log_says(
        &b,
        "identity held by another gateway",
        Duration::from_secs(20),
    );
    assert!(
        !b.log().contains("the address is available now"),
        "the standby listens on the active's RDMA address:\n{}",
        b.log()
    );

    let mut c = Rdma41::when_served(rdma, b"rdma-client", Duration::from_secs(20), || a.log());
    let held = hold_state(&mut c);
    a.child.kill().unwrap(); // SIGKILL
    a.child.wait().unwrap();
    let killed = Instant::now();
    log_says(
        &b,
        "ha: took the identity",
        Duration::from_secs(LEASE_S * 3 + 20),
    );
    log_says(&b, "the address is available now", Duration::from_secs(20));
    let mut c = Rdma41::when_served(rdma, b"rdma-client", Duration::from_secs(30), || b.log());
    let open = reclaim_state(&mut c, &held);
    eprintln!(
        "kill -9 -> lock reclaimed over RDMA at the same address: {:?}",
        killed.elapsed()
    );
    finish_write(&mut c, &held, &open);
    read_back(&mut c, &held.fh, &open);
}

/// pNFS across a takeover (RFC 8881 §12.7.4, §18.42.3; docs/ha.md "pNFS"): gateways
/// "pa" (active) and "pb" (standby) are metadata servers of identity "t", a third
/// gateway on the same directory their data server. The client takes a RW layout at
/// "pa", writes and commits through the data server, and "pa" is killed before the
/// client's LAYOUTCOMMIT. At "pb", in its grace period: LAYOUTGET is NFS4ERR_GRACE;
/// the old layout stateid with loca_reclaim is NFS4ERR_RECLAIM_BAD from a client the
/// record does not know, on another file, or with one byte changed, and accepted
/// from the client that held it — the size it sets is what GETATTR shows, the bytes
/// are the data server's. The key that proves it lives in the store, not in "pa"'s
/// `state.dir` (each gateway has its own here). "pb" moved the boot epoch when it took
/// the identity (issue 27): a new layout once the fence window ran out, and "pa"'s
/// layout's ids refused at the data server.
#[test]
fn a_layout_is_reclaimed_at_the_successor() {
    use ha_pnfs::*;
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("objects");
    std::fs::create_dir_all(&root).unwrap();
    let ds = common::Gw::start_text(|dir| {
        format!(
            "[engine]\ncores = [0]\nidle = \"adaptive\"\nhugepages = \"off\"\n\
             [pools]\nsmall = 256\nmedium = 16\nlarge = 8\n\
             [tcp]\nlisten = \"127.0.0.1:0\"\n\
             [backend]\nkind = \"fs\"\nroot = \"{}\"\nshared = true\n\
             [state]\ndir = \"{}\"\n\
             [[exports]]\npath = \"/\"\nclients = [\"0.0.0.0/0\"]\nsquash = \"none\"\n",
            root.display(),
            dir.display()
        )
    });
    let ds_addr = ds.tcp_addr();
    let pnfs = pnfs_section(ds_addr);
    let mut a = spawn_with(&root, work.path(), "pa", "active", &pnfs);
    let (mut c, _) = served(&a, b"pnfs-client", Duration::from_secs(20));
    assert_eq!(c.seq_run(|o| o.reclaim_complete()).0, NFS4_OK);
    let (open, fh) = create(&mut c, b"laid-out");
    let (_, other_fh) = create(&mut c, b"not-laid-out");
    let layout = layout_rw(&mut c, &fh, open).expect("LAYOUTGET at the active");
    let w = nfs_wire::v3call::Call::Write(&fh, 0, b"through the DS");
    assert_eq!(
        v3_as(ds_addr, layout.ids, &w),
        0,
        "WRITE at the data server"
    );
    let commit = nfs_wire::v3call::Call::Commit(&fh);
    assert_eq!(v3_as(ds_addr, layout.ids, &commit), 0, "COMMIT there");
    let key = root.join(".nfsgw-tmp.shared/cas/ha~t~layout-key");
    assert!(key.is_dir(), "the identity's layout key is in the store");

    let b = spawn_with(&root, work.path(), "pb", "standby", &pnfs);
    log_says(
        &b,
        "identity held by another gateway",
        Duration::from_secs(20),
    );
    a.child.kill().unwrap(); // SIGKILL, before the client's LAYOUTCOMMIT
    a.child.wait().unwrap();
    // The data server keeps serving while no metadata server does (its credentials
    // are the file's fence epoch in the store, not the dead gateway's).
    let w = nfs_wire::v3call::Call::Write(&fh, 0, b"while MDS dead");
    assert_eq!(v3_as(ds_addr, layout.ids, &w), 0, "DS WRITE, no MDS");
    assert_eq!(v3_as(ds_addr, layout.ids, &commit), 0, "DS COMMIT, no MDS");
    assert!(
        !b.log().contains("ha: took the identity"),
        "the data server's answers came after the takeover, not during the outage"
    );
    let (mut c, _) = served(&b, b"pnfs-client", Duration::from_secs(LEASE_S * 5));
    // (In the successor's grace period the dead gateway's layout's ids are refused
    // once the fence window after the takeover ran out: the successor moved the boot
    // epoch, issue 27, `fence_boot.rs`; checked below. The data server itself keeps
    // serving every layout the successor grants.)
    let (mut x, _) = served(&b, b"pnfs-stranger", Duration::from_secs(5));
    let sid = layout.stateid;
    assert_eq!(
        layout_rw(&mut c, &fh, [0; 16]).err(),
        Some(NFS4ERR_GRACE),
        "LAYOUTGET in the successor's grace period"
    );
    assert_eq!(
        layout_commit(&mut x, &fh, sid, true, 99).0,
        NFS4ERR_RECLAIM_BAD,
        "another client's reclaim"
    );
    assert_eq!(
        layout_commit(&mut c, &other_fh, sid, true, 99).0,
        NFS4ERR_RECLAIM_BAD,
        "another file"
    );
    let mut forged = sid;
    forged[13] ^= 0x40;
    assert_eq!(
        layout_commit(&mut c, &fh, forged, true, 99).0,
        NFS4ERR_RECLAIM_BAD,
        "a forged stateid"
    );
    assert_eq!(size_of(&mut c, &fh), 14, "nothing committed yet");
    // Past what the data server wrote: only the reclaim can make this size.
    assert_eq!(
        layout_commit(&mut c, &fh, sid, true, 99),
        (NFS4_OK, Some(100)),
        "LAYOUTCOMMIT with loca_reclaim at the successor"
    );
    assert_eq!(size_of(&mut c, &fh), 100);
    assert_eq!(c.seq_run(|o| o.reclaim_complete()).0, NFS4_OK);
    assert_eq!(
        layout_commit(&mut c, &fh, sid, true, 199).0,
        NFS4ERR_NO_GRACE
    );
    assert_eq!(size_of(&mut c, &fh), 100);
    // The bytes are the data server's, read through the successor.
    let (open, _) = create(&mut c, b"laid-out");
    let (st, res) = c.seq_run(|o| o.putfh(&fh).read(&open, 0, 14));
    assert_eq!(st, NFS4_OK);
    let mut r = after_seq(&res);
    expect_op(&mut r, OP_PUTFH);
    expect_op(&mut r, OP_READ);
    r.u32().unwrap();
    assert_eq!(r.opaque_var(64).unwrap(), b"while MDS dead");
    // A new layout after the grace period, once the fence window after the takeover
    // ran out (NFS4ERR_LAYOUTTRYLATER until then: issue 27, `state/layouts_boot.rs`).
    const NFS4ERR_LAYOUTTRYLATER: u32 = 10058;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let fresh = loop {
        match layout_rw(&mut c, &fh, open) {
            Ok(g) => break g,
            Err(NFS4ERR_LAYOUTTRYLATER) => assert!(std::time::Instant::now() < deadline),
            Err(st) => panic!("LAYOUTGET after the grace period: {st}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // The successor moved the boot epoch when it took the identity: the previous
    // holder's layout's ids are refused at the data server, the new layout's work.
    const NFS3ERR_ACCES: u32 = 13;
    assert_ne!(fresh.ids, layout.ids);
    assert_eq!(v3_as(ds_addr, layout.ids, &w), NFS3ERR_ACCES, "old ids");
    assert_eq!(v3_as(ds_addr, fresh.ids, &w), 0, "new ids");
    assert!(b.log().contains("ha: took the identity"), "{}", b.log());
}
