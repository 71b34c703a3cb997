//! `[ha]` parking (docs/ha.md "What a gateway that does not serve answers"), with two
//! real gateway processes on one shared `fs` directory:
//!
//! - a standby watching a live holder never says a takeover is imminent
//!   (`nfsgw_ha_takeover_imminent` 0 on both for two leases);
//! - after `kill -9` of the holder, the standby says it is imminent *before* it takes
//!   the identity (the early address of tools/ha/check.sh), and COMPOUNDs sent to it
//!   then are held unanswered until its fence opens and then get the successor's real
//!   answer (NFS4ERR_BADSESSION for the dead holder's session, RFC 8881 §18.46.3)
//!   within moments of the takeover, not NFS4ERR_DELAY and a client's back-off;
//! - parking is bounded: of five COMPOUNDs pipelined on one connection, four park and
//!   the fifth gets NFS4ERR_DELAY at once (`state::park`; the bound in total is the
//!   unit test's);
//! - the client then reclaims its open and lock at the successor as before.

mod common;
#[path = "common/ha.rs"]
mod ha;
#[path = "common/nfs4_client.rs"]
mod nfs4_client;

use engine::rpc;
use ha::*;
use nfs4_client::*;
use nfs_wire::{rpccall, NFS_PROGRAM, NFS_V4};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Long enough that the overdue mark (0.6 L), the takeover (L) and the park bounds
/// (4L/5, L + L/4) are far apart on a loaded test host.
const LEASE_S: u64 = 3;

fn spawn_local(root: &std::path::Path, work: &std::path::Path, name: &str, role: &str) -> Gw {
    spawn(&Spec::local(root, work, name, role, LEASE_S))
}

fn read_record(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let mut mark = [0u8; 4];
        s.read_exact(&mut mark).expect("a reply");
        let m = u32::from_be_bytes(mark);
        let at = out.len();
        out.resize(at + (m & 0x7fff_ffff) as usize, 0);
        s.read_exact(&mut out[at..]).expect("a reply");
        if m & 0x8000_0000 != 0 {
            return out;
        }
    }
}

#[test]
fn compounds_park_at_the_successor_until_it_serves() {
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("objects");
    std::fs::create_dir_all(&root).unwrap();
    let mut a = spawn_local(&root, work.path(), "a", "active");
    let (mut c1, _) =
        session_when_served(a.reach, b"client-one", Duration::from_secs(20), || a.log());
    let held = hold_state(&mut c1);
    let old_session = c1.sid;
    let b = spawn_local(&root, work.path(), "b", "standby");
    let end = Instant::now() + Duration::from_secs(20);
    while !b.log().contains("identity held by another gateway") {
        assert!(
            Instant::now() < end,
            "the standby never waited:\n{}",
            b.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // A live holder: the standby never says a takeover is imminent.
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(LEASE_S * 2) {
        assert_eq!(
            b.metric("nfsgw_ha_takeover_imminent"),
            Some(0),
            "a standby called a live holder overdue:\n{}",
            b.log()
        );
        assert_eq!(a.metric("nfsgw_ha_takeover_imminent"), Some(0));
        assert_eq!(a.metric("nfsgw_ha_identity_held"), Some(1));
        std::thread::sleep(Duration::from_millis(100));
    }
    let parked0 = b.metric("nfsgw_ha_parked_total{how=\"served\"}").unwrap();
    let full0 = b.metric("nfsgw_ha_parked_total{how=\"full\"}").unwrap();

    a.child.kill().unwrap(); // SIGKILL
    a.child.wait().unwrap();
    let killed = Instant::now();

    // The standby says "imminent" before it holds the identity.
    let end = killed + Duration::from_secs(LEASE_S * 3);
    while b.metric("nfsgw_ha_takeover_imminent") != Some(1) {
        assert!(Instant::now() < end, "never imminent:\n{}", b.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    let imminent = killed.elapsed();
    assert!(
        !b.log().contains("ha: took the identity"),
        "imminent only after the takeover ({imminent:?}):\n{}",
        b.log()
    );

    // When the standby's log says it took the identity, as a watcher sees it.
    let took: Arc<Mutex<Option<Instant>>> = Arc::default();
    let watcher = {
        let (took, log) = (took.clone(), b.log.clone());
        std::thread::spawn(move || {
            while killed.elapsed() < Duration::from_secs(LEASE_S * 4) {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                if text.contains("ha: took the identity") {
                    *took.lock().unwrap() = Some(Instant::now());
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };

    // Five COMPOUNDs on one connection, SEQUENCE of the dead holder's session on slots
    // 0..5: four park (the per-connection bound), the fifth is NFS4ERR_DELAY at once.
    let mut s = TcpStream::connect(b.reach).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(LEASE_S * 3)))
        .unwrap();
    let sent = Instant::now();
    for slot in 0..5u32 {
        let args = Ops::new()
            .sequence_at(old_session, 7, slot, false)
            .args_with(b"", 1);
        let call = rpccall::call(
            0x5000 + slot,
            NFS_PROGRAM,
            NFS_V4,
            NFSPROC4_COMPOUND,
            &rpccall::sys(0),
            &args,
        );
        s.write_all(&rpccall::record(&call).unwrap()).unwrap();
    }
    let mut answers = Vec::new();
    for _ in 0..5 {
        let rec = read_record(&mut s);
        let at_reply = Instant::now();
        let (_, st, at) = rpc::decode_reply(&rec).unwrap();
        assert_eq!(st, rpc::ReplyStatus::Accepted(rpc::Accept::Success));
        answers.push((parse_res(&rec[at..]).status, at_reply));
    }
    watcher.join().unwrap();
    let took = took
        .lock()
        .unwrap()
        .expect("the standby never took the identity");
    eprintln!(
        "kill -9 -> imminent {imminent:?}, -> took the identity {:?}; answers: {:?}",
        took - killed,
        answers
            .iter()
            .map(|(st, t)| (*st, *t - killed))
            .collect::<Vec<_>>()
    );
    let (first, first_at) = answers[0];
    assert_eq!(first, NFS4ERR_DELAY, "the fifth COMPOUND is not parked");
    assert!(
        first_at - sent < Duration::from_millis(500),
        "NFS4ERR_DELAY at once, not after a park: {:?}",
        first_at - sent
    );
    for (st, at) in &answers[1..] {
        assert_eq!(
            *st, NFS4ERR_BADSESSION,
            "a parked COMPOUND gets the successor's answer"
        );
        // Not before the takeover's log line (the watcher may see it up to a
        // poll late), and right after it: no client back-off in between.
        assert!(
            *at + Duration::from_millis(100) >= took,
            "answered before the takeover"
        );
        assert!(
            at.saturating_duration_since(took) < Duration::from_millis(500),
            "answered {:?} after the takeover",
            at.saturating_duration_since(took)
        );
    }
    assert_eq!(
        b.metric("nfsgw_ha_parked_total{how=\"served\"}"),
        Some(parked0 + 4)
    );
    assert_eq!(
        b.metric("nfsgw_ha_parked_total{how=\"full\"}"),
        Some(full0 + 1)
    );
    assert_eq!(b.metric("nfsgw_ha_takeover_imminent"), Some(0));
    assert_eq!(b.metric("nfsgw_ha_identity_held"), Some(1));

    // The client recovers at the successor as after any takeover.
    let (mut c1, _) =
        session_when_served(b.reach, b"client-one", Duration::from_secs(5), || b.log());
    let open = reclaim_state(&mut c1, &held);
    finish_write(&mut c1, &held, &open);
    read_back(&mut c1, &held.fh, &open);
}
