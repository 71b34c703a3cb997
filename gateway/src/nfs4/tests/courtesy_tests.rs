//! Courtesy clients through real COMPOUNDs (RFC 8881 §8.4.2.1, `state/expiry.rs`): a
//! client whose lease ran out keeps its open and lock until another client's OPEN or
//! LOCK conflicts with them (which then succeeds), and a client that renews after its
//! lease ran out goes on with the same stateids.

use super::*;
use crate::state::stateid::Stateid;
use std::time::Duration;

const LEASE: Duration = Duration::from_millis(300);
const NO_DELEG: u32 = 0x400;

fn courteous() -> H {
    let mut h = harness();
    let limits = crate::state::clients::Limits {
        lease: LEASE,
        ..Default::default()
    };
    h.state = State::with_config(limits, None);
    let root = h.model.root(0).unwrap();
    h.model
        .create(
            &root,
            b"f",
            &crate::fs::CreateMode::Unchecked(Default::default()),
            crate::fs::Owner { uid: 0, gid: 0 },
        )
        .unwrap();
    h
}

/// EXCHANGE_ID, CREATE_SESSION and RECLAIM_COMPLETE (slot 0 sequence 1): the
/// client may open; its next sequence id is 2.
fn ready(h: &H, owner: &'static [u8]) -> (u64, [u8; 16]) {
    let (id, sid) = session(h, owner);
    let rc: Op = Box::new(|w| {
        w.u32(OP_RECLAIM_COMPLETE)?;
        w.bool(false)
    });
    assert_eq!(call(h, &[sequence(sid, 1, 0), rc]).0, NFS4_OK);
    (id, sid)
}

/// OPEN "f" (CLAIM_NULL, NOCREATE, no delegation wanted).
fn open_f(clientid: u64, owner: &'static [u8], access: u32, deny: u32) -> Op {
    Box::new(move |w| {
        w.u32(OP_OPEN)?;
        w.u32(0)?;
        w.u32(access | NO_DELEG)?;
        w.u32(deny)?;
        w.u64(clientid)?;
        w.opaque_var(owner)?;
        w.u32(0)?; // OPEN4_NOCREATE
        w.u32(0)?; // CLAIM_NULL
        w.opaque_var(b"f")
    })
}

/// LOCK WRITE_LT of the whole file by a new lock-owner of `open`.
fn lock_all(clientid: u64, open: Stateid, owner: &'static [u8]) -> Op {
    Box::new(move |w| {
        w.u32(OP_LOCK)?;
        w.u32(2)?;
        w.bool(false)?;
        w.u64(0)?;
        w.u64(u64::MAX)?;
        w.bool(true)?;
        w.u32(0)?;
        open.encode(w)?;
        w.u32(0)?;
        w.u64(clientid)?;
        w.opaque_var(owner)
    })
}

fn locku_all(lock: Stateid) -> Op {
    Box::new(move |w| {
        w.u32(OP_LOCKU)?;
        w.u32(2)?;
        w.u32(0)?;
        lock.encode(w)?;
        w.u64(0)?;
        w.u64(u64::MAX)
    })
}

/// SEQUENCE + PUTROOTFH + `op` (OPEN, or LOOKUP f first for the others); returns the
/// last operation's status and, on success, the stateid its result starts with.
fn on_f(h: &H, sid: [u8; 16], seq: u32, lookup: bool, op: Op) -> (u32, Option<Stateid>) {
    let mut ops = vec![sequence(sid, seq, 0), op0(OP_PUTROOTFH)];
    if lookup {
        ops.push(named(OP_LOOKUP, b"f"));
    }
    ops.push(op);
    let n = ops.len();
    let (st, rep) = call(h, &ops);
    if st != NFS4_OK {
        return (st, None);
    }
    let mut r = results(&rep);
    r.skip(8 + 36 + 8 * (n - 2)).unwrap();
    r.skip(8).unwrap();
    (st, Some(Stateid::decode(&mut r).unwrap()))
}

/// Client `owner` opens "f" for read and write denying writes and write-locks it all:
/// (open stateid, lock stateid).
fn hold_f(h: &H, clientid: u64, sid: [u8; 16]) -> (Stateid, Stateid) {
    let (st, open) = on_f(h, sid, 2, false, open_f(clientid, b"oa", 3, 2));
    assert_eq!(st, NFS4_OK);
    let open = open.unwrap();
    let (st, lock) = on_f(h, sid, 3, true, lock_all(clientid, open, b"la"));
    assert_eq!(st, NFS4_OK);
    (open, lock.unwrap())
}

#[test]
fn a_conflicting_open_and_lock_succeed_once_the_holders_lease_ran_out() {
    let h = courteous();
    let (a, sa) = ready(&h, b"courtesy-a");
    let (b, sb) = ready(&h, b"courtesy-b");
    hold_f(&h, a, sa);
    // b keeps its lease, a does not.
    std::thread::sleep(LEASE * 2 / 3);
    assert_eq!(call(&h, &[sequence(sb, 2, 0)]).0, NFS4_OK);
    std::thread::sleep(LEASE / 3 + Duration::from_millis(100));
    let (st, open_b) = on_f(&h, sb, 3, false, open_f(b, b"ob", 2, 0));
    assert_eq!(st, NFS4_OK, "a's DENY_WRITE gave way");
    let (st, _) = on_f(&h, sb, 4, true, lock_all(b, open_b.unwrap(), b"lb"));
    assert_eq!(st, NFS4_OK, "a's lock went with it");
    // a was expired for real: its session is gone.
    assert_eq!(call(&h, &[sequence(sa, 4, 0)]).0, NFS4ERR_BADSESSION);
}

#[test]
fn a_client_renewing_after_its_lease_ran_out_keeps_its_stateids() {
    let h = courteous();
    let (a, sa) = ready(&h, b"courtesy-a");
    let (_, lock) = hold_f(&h, a, sa);
    std::thread::sleep(LEASE + Duration::from_millis(100));
    h.state.sweep();
    // Another client arrives meanwhile (EXCHANGE_ID sweeps the table).
    let (b, sb) = ready(&h, b"courtesy-b");
    let (st, _) = on_f(&h, sa, 4, true, locku_all(lock));
    assert_eq!(st, NFS4_OK, "SEQUENCE revives a; its lock stateid works");
    // Its open (DENY_WRITE) is still its own.
    let (st, _) = on_f(&h, sb, 2, false, open_f(b, b"ob", 2, 0));
    assert_eq!(st, NFS4ERR_SHARE_DENIED);
}
