//! Courtesy clients through real COMPOUNDs (RFC 8881 §8.4.2.1, `state/expiry.rs`): a
//! client whose lease ran out keeps its open and lock until another client's OPEN or
//! LOCK conflicts with them (which then succeeds), and a client that renews after its
//! lease ran out goes on with the same stateids. I/O with a special stateid against
//! its share DENY, and EXCHANGE_ID of another principal for its owner, expire it too.

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

/// Every lease runs out (`LEASE` and a margin), then each `(session, seqid)` renews
/// with a SEQUENCE: those clients are active again (a lapsed client that renews keeps
/// its state, RFC 8881 §8.4.2.1), the others are courtesy clients. Renewing after the
/// sleep rather than during it keeps the tests right on a loaded machine, where a
/// renewal "2/3 into the lease" could land after the lease and a sleep of a third
/// could outlast the renewed one.
fn lapse_then_renew(h: &H, renew: &[([u8; 16], u32)]) {
    std::thread::sleep(LEASE + Duration::from_millis(100));
    for &(sid, seq) in renew {
        assert_eq!(call(h, &[sequence(sid, seq, 0)]).0, NFS4_OK);
    }
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
fn on_f(h: &H, sid: [u8; 16], seq: u32, lookup: bool, op: Op) -> (Nfsstat4, Option<Stateid>) {
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
    // Both leases run out; b renews (`lapse_then_renew`), a does not.
    lapse_then_renew(&h, &[(sb, 2)]);
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

/// READ (`write` false: 4 bytes at 0) or WRITE (4 bytes "data" at 0, FILE_SYNC) of "f"
/// with a special stateid.
fn io_f(sid: Stateid, write: bool) -> Op {
    Box::new(move |w| {
        if write {
            w.u32(OP_WRITE)?;
            sid.encode(w)?;
            w.u64(0)?;
            w.u32(2)?;
            w.opaque_var(b"data")
        } else {
            w.u32(OP_READ)?;
            sid.encode(w)?;
            w.u64(0)?;
            w.u32(4)
        }
    })
}

/// SEQUENCE + PUTROOTFH + LOOKUP f + READ/WRITE with a special stateid: the status.
fn special_io(h: &H, sid: [u8; 16], seq: u32, stateid: Stateid, write: bool) -> Nfsstat4 {
    let ops = [
        sequence(sid, seq, 0),
        op0(OP_PUTROOTFH),
        named(OP_LOOKUP, b"f"),
        io_f(stateid, write),
    ];
    call(h, &ops).0
}

fn courtesy_gauge(h: &H) -> u64 {
    h.state.delegations.stats().courtesy_clients()
}

fn expired_for_conflict(h: &H) -> u64 {
    h.state.delegations.stats().courtesy_expired_total()
}

/// RFC 8881 §8.2.3/§9.7 with §8.4.2.1: a READ with the anonymous stateid and a WRITE
/// with the READ-bypass stateid meet a share DENY (NFS4ERR_LOCKED) while its holder's
/// lease runs; once the holder is a courtesy client it is expired and the I/O
/// proceeds. The gauge and the conflict counter say so.
#[test]
fn io_with_a_special_stateid_expires_a_courtesy_client_denying_it() {
    let h = courteous();
    let (a, sa) = ready(&h, b"courtesy-a");
    let (_, sb) = ready(&h, b"courtesy-b");
    // a opens "f" for both, denying both.
    let (st, _) = on_f(&h, sa, 2, false, open_f(a, b"oa", 3, 3));
    assert_eq!(st, NFS4_OK);
    assert_eq!(
        special_io(&h, sb, 2, Stateid::ANONYMOUS, false),
        NFS4ERR_LOCKED,
        "a's DENY_READ holds while its lease runs"
    );
    assert_eq!(
        special_io(&h, sb, 3, Stateid::BYPASS, true),
        NFS4ERR_LOCKED,
        "the bypass stateid does not bypass DENY_WRITE"
    );
    // b renews, a does not: a becomes a courtesy client.
    lapse_then_renew(&h, &[(sb, 4)]);
    h.state.sweep();
    assert_eq!(courtesy_gauge(&h), 1, "a is a courtesy client");
    assert_eq!(expired_for_conflict(&h), 0);
    assert_eq!(
        special_io(&h, sb, 5, Stateid::BYPASS, true),
        NFS4_OK,
        "a's DENY_WRITE gave way"
    );
    assert_eq!(special_io(&h, sb, 6, Stateid::ANONYMOUS, false), NFS4_OK);
    assert_eq!(expired_for_conflict(&h), 1);
    assert_eq!(courtesy_gauge(&h), 0);
    assert_eq!(
        call(&h, &[sequence(sa, 3, 0)]).0,
        NFS4ERR_BADSESSION,
        "a was expired for real"
    );
}

/// The same I/O with an active client among the DENY holders stays NFS4ERR_LOCKED
/// and expires nobody: the courtesy holder comes back with its open.
#[test]
fn io_denied_by_an_active_client_too_expires_no_courtesy_client() {
    let h = courteous();
    let (a, sa) = ready(&h, b"courtesy-a");
    let (b, sb) = ready(&h, b"courtesy-b");
    let (_, sc) = ready(&h, b"courtesy-c");
    // a and b both open "f" for reading, denying writes.
    assert_eq!(on_f(&h, sa, 2, false, open_f(a, b"oa", 1, 2)).0, NFS4_OK);
    assert_eq!(on_f(&h, sb, 2, false, open_f(b, b"ob", 1, 2)).0, NFS4_OK);
    // b and c renew, a does not.
    lapse_then_renew(&h, &[(sb, 3), (sc, 2)]);
    assert_eq!(
        special_io(&h, sc, 3, Stateid::ANONYMOUS, true),
        NFS4ERR_LOCKED,
        "b (active) denies writes"
    );
    assert_eq!(expired_for_conflict(&h), 0);
    assert_eq!(
        call(&h, &[sequence(sa, 3, 0)]).0,
        NFS4_OK,
        "a kept its state and comes back"
    );
}

/// RFC 8881 §18.35.4 case 3: EXCHANGE_ID with a courtesy client's owner from another
/// principal expires the courtesy client and proceeds as for a new client (was
/// NFS4ERR_CLID_INUSE); against an active client it stays NFS4ERR_CLID_INUSE.
#[test]
fn exchange_id_of_another_principal_expires_a_courtesy_client() {
    let h = courteous();
    let (a, sa) = ready(&h, b"courtesy-a");
    assert_eq!(on_f(&h, sa, 2, false, open_f(a, b"oa", 3, 3)).0, NFS4_OK);
    let as_uid = |uid: u32, ops: &[Op]| -> (Nfsstat4, Vec<u8>) {
        let args = compound_args(b"t", 1, ops);
        let mut buf = vec![0u8; 1 << 20];
        let mut c = ctx(&h);
        c.cred = Cred::Sys(AuthSys::new(uid, uid, &[]));
        let mut w = XdrWriter::new(&mut buf);
        assert_eq!(serve(&c, &h.state, 1, &args, &mut w), Outcome::Done);
        let n = w.position();
        buf.truncate(n);
        (Nfsstat4::decode(&mut XdrReader::new(&buf)).unwrap(), buf)
    };
    assert_eq!(
        as_uid(1000, &[exchange_id(b"courtesy-a", 9)]).0,
        NFS4ERR_CLID_INUSE,
        "a's lease runs: somebody else's client"
    );
    std::thread::sleep(LEASE + Duration::from_millis(100));
    h.state.sweep();
    assert_eq!(courtesy_gauge(&h), 1);
    let (st, rep) = as_uid(1000, &[exchange_id(b"courtesy-a", 9)]);
    assert_eq!(st, NFS4_OK, "the courtesy client gave way");
    let mut r = results(&rep);
    r.skip(8).unwrap();
    let id = r.u64().unwrap();
    let seq = r.u32().unwrap();
    assert_ne!(id, a, "a new client");
    assert_eq!(r.u32().unwrap() & session_ops::EXCHGID4_FLAG_CONFIRMED_R, 0);
    assert_eq!(expired_for_conflict(&h), 1);
    assert_eq!(courtesy_gauge(&h), 0);
    assert_eq!(
        as_uid(1000, &[create_session(id, seq)]).0,
        NFS4_OK,
        "the new principal's client is confirmed"
    );
    assert_eq!(call(&h, &[sequence(sa, 3, 0)]).0, NFS4ERR_BADSESSION);
    // a's open (DENY both) went with it: anyone may open "f" now.
    let (b, sb) = ready(&h, b"courtesy-b");
    assert_eq!(on_f(&h, sb, 2, false, open_f(b, b"ob", 3, 0)).0, NFS4_OK);
}
