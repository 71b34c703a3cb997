//! Client IDs, sessions and slots: EXCHANGE_ID (RFC 8881 §18.35.4), CREATE_SESSION
//! (§18.36.4), DESTROY_SESSION (§18.37), DESTROY_CLIENTID (§18.50), SEQUENCE and the
//! slot rules (§2.10.6, §18.46.3).

use crate::nfs4_client::*;
use crate::Gw41;

/// EXCHANGE_ID's first result: (status, clientid, sequence id, flags).
fn eid(c: &mut Tcp41, owner: &[u8], verf: u8) -> (u32, u64, u32, u32) {
    let res = c.compound(&Ops::new().exchange_id([verf; 8], owner));
    let mut r = res.reader();
    let st = expect_op(&mut r, OP_EXCHANGE_ID);
    if st != NFS4_OK {
        return (st, 0, 0, 0);
    }
    (st, r.u64().unwrap(), r.u32().unwrap(), r.u32().unwrap())
}

/// CREATE_SESSION's status and, when OK, the whole reply and the session id.
fn cs(c: &mut Tcp41, clientid: u64, seq: u32) -> (u32, Vec<u8>, [u8; 16]) {
    let res = c.compound(&Ops::new().create_session_tcp(clientid, seq, 0, 8));
    let mut r = res.reader();
    let st = expect_op(&mut r, OP_CREATE_SESSION);
    let mut sid = [0u8; 16];
    if st == NFS4_OK {
        sid = read_create_session(&mut r).0;
    }
    (st, res.whole().to_vec(), sid)
}

/// The status of a lone SEQUENCE on `sid`.
fn seq_status(c: &mut Tcp41, sid: [u8; 16], seq: u32) -> u32 {
    c.compound(&Ops::new().sequence(sid, seq)).status
}

/// §18.35.4 cases 1 (new owner), 2 (same owner and verifier: the confirmed record,
/// EXCHGID4_FLAG_CONFIRMED_R), 3 (another principal while the lease runs:
/// NFS4ERR_CLID_INUSE) and 5 (new verifier: a new client ID that replaces the old
/// one, with its sessions, once confirmed).
#[test]
fn exchange_id_cases() {
    let gw = Gw41::start("");
    let mut c = Tcp41::connect(gw.addr);
    let (st, id1, seq1, flags) = eid(&mut c, b"conf-eid", 1);
    assert_eq!(st, NFS4_OK);
    assert_eq!(flags & EXCHGID4_FLAG_CONFIRMED_R, 0, "case 1: unconfirmed");
    let (st, _, sid1) = cs(&mut c, id1, seq1);
    assert_eq!(st, NFS4_OK);
    // Case 2: the same client ID, now confirmed.
    let (st, id, _, flags) = eid(&mut c, b"conf-eid", 1);
    assert_eq!((st, id), (NFS4_OK, id1));
    assert_ne!(flags & EXCHGID4_FLAG_CONFIRMED_R, 0, "case 2: CONFIRMED_R");
    // Case 3: another principal (AUTH_SYS uid 1000) for a live client.
    let mut other = Tcp41::connect(gw.addr);
    other.uid = 1000;
    assert_eq!(eid(&mut other, b"conf-eid", 1).0, NFS4ERR_CLID_INUSE);
    // Case 5: a new verifier is a client restart: a new, unconfirmed client ID; the
    // old one keeps working until the new one is confirmed.
    let (st, id2, seq2, flags) = eid(&mut c, b"conf-eid", 2);
    assert_eq!(st, NFS4_OK);
    assert_ne!(id2, id1);
    assert_eq!(flags & EXCHGID4_FLAG_CONFIRMED_R, 0, "case 5: unconfirmed");
    assert_eq!(seq_status(&mut c, sid1, 1), NFS4_OK);
    let (st, _, sid2) = cs(&mut c, id2, seq2);
    assert_eq!(st, NFS4_OK);
    assert_eq!(seq_status(&mut c, sid2, 1), NFS4_OK);
    assert_eq!(
        seq_status(&mut c, sid1, 2),
        NFS4ERR_BADSESSION,
        "the old client ID's session is gone"
    );
    assert_eq!(cs(&mut c, id1, seq1 + 1).0, NFS4ERR_STALE_CLIENTID);
}

/// §18.35.4 case 4: an EXCHANGE_ID for an owner that has only an unconfirmed record
/// replaces it: a new client ID, and the old one is gone (CREATE_SESSION on it is
/// NFS4ERR_STALE_CLIENTID).
#[test]
fn exchange_id_replaces_an_unconfirmed_record() {
    let gw = Gw41::start("");
    let mut c = Tcp41::connect(gw.addr);
    let (st, id1, seq1, _) = eid(&mut c, b"conf-eid4", 1);
    assert_eq!(st, NFS4_OK);
    let (st, id2, seq2, flags) = eid(&mut c, b"conf-eid4", 2);
    assert_eq!(st, NFS4_OK);
    assert_ne!(id2, id1);
    assert_eq!(flags & EXCHGID4_FLAG_CONFIRMED_R, 0);
    assert_eq!(cs(&mut c, id1, seq1).0, NFS4ERR_STALE_CLIENTID);
    assert_eq!(cs(&mut c, id2, seq2).0, NFS4_OK);
}

/// §18.36.4: csa_sequence equal to the last one is a replay (the same reply, the same
/// session); anything but that or the next one is NFS4ERR_SEQ_MISORDERED; an unknown
/// client ID is NFS4ERR_STALE_CLIENTID. §2.10.6.4: only the solo operations may come
/// without SEQUENCE, and alone.
#[test]
fn create_session_replay_and_solo_operations() {
    let gw = Gw41::start("");
    let mut c = Tcp41::connect(gw.addr);
    let (_, id, seq, _) = eid(&mut c, b"conf-cs", 1);
    assert_eq!(
        cs(&mut c, id, seq.wrapping_add(2)).0,
        NFS4ERR_SEQ_MISORDERED
    );
    let (st, first, sid) = cs(&mut c, id, seq);
    assert_eq!(st, NFS4_OK);
    let (st, again, sid_again) = cs(&mut c, id, seq);
    assert_eq!(st, NFS4_OK);
    assert_eq!(sid_again, sid, "a replay creates no second session");
    assert_eq!(again, first, "a replay is answered with the same reply");
    assert_eq!(
        cs(&mut c, id, seq.wrapping_add(2)).0,
        NFS4ERR_SEQ_MISORDERED
    );
    assert_eq!(cs(&mut c, 0xdead_beef, 1).0, NFS4ERR_STALE_CLIENTID);
    // An operation without SEQUENCE; a solo operation with company.
    let res = c.compound(&Ops::new().putrootfh().getfh());
    assert_eq!(res.status, NFS4ERR_OP_NOT_IN_SESSION);
    let mut r = res.reader();
    assert_eq!(expect_op(&mut r, OP_PUTROOTFH), NFS4ERR_OP_NOT_IN_SESSION);
    assert_eq!(r.remaining(), 0, "no result after the failed one");
    let res = c.compound(&Ops::new().exchange_id([1; 8], b"conf-cs").putrootfh());
    assert_eq!(res.status, NFS4ERR_NOT_ONLY_OP);
}

/// §18.37.3 and §18.50.3: DESTROY_SESSION ends the session (SEQUENCE on it is then
/// NFS4ERR_BADSESSION); DESTROY_CLIENTID is NFS4ERR_CLIENTID_BUSY while the client
/// has a session and then removes the client ID (NFS4ERR_STALE_CLIENTID).
#[test]
fn destroy_session_then_clientid() {
    let gw = Gw41::start("");
    let mut c = Tcp41::connect(gw.addr);
    c.session(b"conf-destroy", 0);
    let (id, sid) = (c.clientid, c.sid);
    let res = c.compound(&Ops::new().destroy_clientid(id));
    assert_eq!(res.status, NFS4ERR_CLIENTID_BUSY);
    let res = c.compound(&Ops::new().destroy_session(sid));
    assert_eq!(res.status, NFS4_OK);
    assert_eq!(seq_status(&mut c, sid, 1), NFS4ERR_BADSESSION);
    let res = c.compound(&Ops::new().destroy_session(sid));
    assert_eq!(res.status, NFS4ERR_BADSESSION, "destroyed once only");
    let res = c.compound(&Ops::new().destroy_clientid(id));
    assert_eq!(res.status, NFS4_OK);
    assert_eq!(cs(&mut c, id, 2).0, NFS4ERR_STALE_CLIENTID);
    let res = c.compound(&Ops::new().destroy_clientid(id));
    assert_eq!(res.status, NFS4ERR_STALE_CLIENTID);
}

/// §2.10.6.1: a retransmission (same slot, same sequence id, same request) gets the
/// cached reply byte for byte, so a non-idempotent CREATE is not run twice; seqid + 2
/// is NFS4ERR_SEQ_MISORDERED; the same sequence id with another request is
/// NFS4ERR_SEQ_FALSE_RETRY (§2.10.6.1.3.1); slots keep their own sequence ids; a slot
/// id at or past the table is NFS4ERR_BADSLOT; SEQUENCE not first is
/// NFS4ERR_SEQUENCE_POS (§18.46.3); more operations than ca_maxoperations is
/// NFS4ERR_TOO_MANY_OPS (§18.36.3).
#[test]
fn sequence_slots_replay_and_limits() {
    let gw = Gw41::start("");
    let mut c = Tcp41::ready(gw.addr, b"conf-seq");
    let sid = c.sid;
    let seq = c.seq;
    let mkdir = Ops::new()
        .sequence(sid, seq)
        .putrootfh()
        .create_obj(b"replayed-dir", None);
    let first = c.compound(&mkdir);
    assert_eq!(first.status, NFS4_OK, "CREATE");
    let again = c.compound(&mkdir);
    assert_eq!(
        again.whole(),
        first.whole(),
        "the retry gets the cached reply"
    );
    let other = Ops::new().sequence(sid, seq).putrootfh();
    assert_eq!(c.compound(&other).status, NFS4ERR_SEQ_FALSE_RETRY);
    assert_eq!(seq_status(&mut c, sid, seq + 2), NFS4ERR_SEQ_MISORDERED);
    assert_eq!(
        seq_status(&mut c, sid, seq.wrapping_sub(1)),
        NFS4ERR_SEQ_MISORDERED
    );
    // The slot's state did not move: the next sequence id still works.
    c.seq += 1;
    let (st, _) = c.seq_run(|o| o.putrootfh().create_obj(b"replayed-dir", None));
    assert_eq!(st, NFS4ERR_EXIST, "the directory was created once");
    // Another slot has its own sequence: 1 first.
    let slots = c.fore.slots;
    assert!(slots >= 2, "asked for 8 slots, got {slots}");
    let res = c.compound(&Ops::new().sequence_at(sid, 1, 1, true));
    assert_eq!(res.status, NFS4_OK);
    let res = c.compound(&Ops::new().sequence_at(sid, 1, slots, true));
    assert_eq!(res.status, NFS4ERR_BADSLOT);
    let mut r = res.reader();
    assert_eq!(expect_op(&mut r, OP_SEQUENCE), NFS4ERR_BADSLOT);
    // SEQUENCE in second place.
    let res = c.compound(&Ops::new().sequence(sid, c.seq).sequence(sid, c.seq + 1));
    c.seq += 1;
    assert_eq!(res.status, NFS4ERR_SEQUENCE_POS);
    let mut r = after_seq(&res);
    assert_eq!(expect_op(&mut r, OP_SEQUENCE), NFS4ERR_SEQUENCE_POS);
    // ca_maxoperations + 1 operations.
    let max = c.fore.max_ops;
    let res = c.run(|mut o| {
        for _ in 0..max {
            o = o.putrootfh();
        }
        o
    });
    assert_eq!(res.status, NFS4ERR_TOO_MANY_OPS);
    let mut r = res.reader();
    assert_eq!(expect_op(&mut r, OP_SEQUENCE), NFS4ERR_TOO_MANY_OPS);
    assert_eq!(r.remaining(), 0);
}

/// §18.46.3 / §2.10.6.1.3: a request larger than ca_maxrequestsize is
/// NFS4ERR_REQ_TOO_BIG; a reply larger than ca_maxresponsesize_cached is
/// NFS4ERR_REP_TOO_BIG_TO_CACHE with sa_cachethis, and without it is not cached, so
/// its retry is NFS4ERR_RETRY_UNCACHED_REP (never another reply).
#[test]
fn request_too_big_and_uncached_replies() {
    let gw = Gw41::start("");
    let mut c = Tcp41::ready(gw.addr, b"conf-big");
    let data = vec![0x5a; 16 << 10];
    let clientid = c.clientid;
    let (st, res) = c.seq_run(|o| {
        o.putrootfh()
            .open(
                clientid,
                b"o",
                ACCESS_BOTH | WANT_NO_DELEG,
                DENY_NONE,
                How::Unchecked,
                Claim::Null(b"big"),
            )
            .getfh()
            .write(&CURRENT, 0, &data)
    });
    assert_eq!(st, NFS4_OK);
    let mut r = after_seq(&res);
    expect_op(&mut r, OP_PUTROOTFH);
    expect_op(&mut r, OP_OPEN);
    parse_open_ok(&mut r);
    expect_op(&mut r, OP_GETFH);
    let fh = r.opaque_var(128).unwrap().to_vec();
    let cached = c.fore.max_cached as usize;
    assert!(cached < data.len(), "cached replies are {cached} bytes");
    // With sa_cachethis: refused before running.
    let (sid, seq) = (c.sid, c.seq);
    let read = |cache| {
        Ops::new()
            .sequence_at(sid, seq, 0, cache)
            .putfh(&fh)
            .read(&ANONYMOUS, 0, data.len() as u32)
    };
    let res = c.compound(&read(true));
    assert_eq!(res.status, 10067, "NFS4ERR_REP_TOO_BIG_TO_CACHE");
    // Without: answered, not cached; the retry is RETRY_UNCACHED_REP.
    let (sid, seq) = (c.sid, seq + 1);
    c.seq = seq + 1;
    let read = |cache| {
        Ops::new()
            .sequence_at(sid, seq, 0, cache)
            .putfh(&fh)
            .read(&ANONYMOUS, 0, data.len() as u32)
    };
    let res = c.compound(&read(false));
    assert_eq!(res.status, NFS4_OK);
    let res = c.compound(&read(false));
    assert_eq!(res.status, NFS4ERR_RETRY_UNCACHED_REP);
    let mut r = res.reader();
    assert_eq!(expect_op(&mut r, OP_SEQUENCE), NFS4ERR_RETRY_UNCACHED_REP);
    // A session whose requests may be 1 KiB: a 2 KiB WRITE is too big.
    let mut s = Tcp41::connect(gw.addr);
    let (id, eseq, _) = s.exchange_id(b"conf-small", [3; 8]);
    let res = s.compound(&Ops::new().create_session_sized(id, eseq, 0, 4, 1024));
    assert_eq!(res.status, NFS4_OK);
    let mut r = res.reader();
    expect_op(&mut r, OP_CREATE_SESSION);
    let (ssid, _, _, fore) = read_create_session(&mut r);
    assert!(fore.max_request <= 1024, "{fore:?}");
    let res = s.compound(
        &Ops::new()
            .sequence(ssid, 1)
            .putfh(&fh)
            .write(&ANONYMOUS, 0, &[1; 2048]),
    );
    assert_eq!(res.status, NFS4ERR_REQ_TOO_BIG);
    let mut r = res.reader();
    assert_eq!(expect_op(&mut r, OP_SEQUENCE), NFS4ERR_REQ_TOO_BIG);
    // Nothing was written, and the slot was not used: sequence id 1 is still new.
    let res = s.compound(
        &Ops::new()
            .sequence(ssid, 1)
            .putfh(&fh)
            .read(&ANONYMOUS, 0, 4),
    );
    assert_eq!(res.status, NFS4_OK);
    let mut r = after_seq(&res);
    expect_op(&mut r, OP_PUTFH);
    assert_eq!(expect_op(&mut r, OP_READ), NFS4_OK);
    r.u32().unwrap(); // eof
    assert_eq!(r.opaque_var(16).unwrap(), &[0x5a; 4]);
}
