//! The callback table from bytes: probes, CB_RECALL with the slot sequence, replies
//! matched by XID (unmatched ones counted), timeouts resent on the channel bound
//! now, retries on DELAY/BAD_STATEID, one call per back-channel slot.

use super::*;
use crate::conn::ConnKind;
use crate::nfs4::callback::{CbSec, RecallDriver, OP_CB_RECALL, OP_CB_SEQUENCE};
use crate::nfs4::status::*;
use crate::state::stateid::Stateid;
use crate::state::Conflict;
use crate::state::StateError;
use crate::stats::callbacks::{CallbackResult, RecallResult};
use engine::rpc::{self, Cred};
use std::cell::Cell;

const A: u64 = 0xa;
const PROG: u32 = 0x4000_0123;
const SESSION: [u8; 16] = [7; 16];

fn conn(slot_hint: usize) -> ConnRef {
    ConnRef {
        reactor: slot_hint,
        kind: ConnKind::Rdma(engine::rdma::server::ConnId::from_raw(slot_hint as u32, 1)),
    }
}

fn info(c: ConnRef) -> BackChannelInfo {
    BackChannelInfo {
        session: SESSION,
        conn: c,
        cb_program: PROG,
        max_request: 4096,
        max_slots: 1,
        minor: 1,
    }
}

fn xid_of(o: &Outcall) -> u32 {
    u32::from_be_bytes(o.record[..4].try_into().unwrap())
}

/// An accepted-SUCCESS reply with these words after the header.
fn reply(xid: u32, body: &[u32]) -> Vec<u8> {
    [xid, 1, 0, 0, 0, 0]
        .iter()
        .chain(body)
        .flat_map(|w| w.to_be_bytes())
        .collect()
}

fn compound_reply(xid: u32, seq_status: u32, recall: Option<u32>) -> Vec<u8> {
    let status = if seq_status != 0 {
        seq_status
    } else {
        recall.unwrap_or(0)
    };
    let mut b = vec![status, 0, if recall.is_some() { 2 } else { 1 }];
    b.extend([OP_CB_SEQUENCE, seq_status]);
    if seq_status == 0 {
        b.extend(
            SESSION
                .chunks(4)
                .map(|c| u32::from_be_bytes(c.try_into().unwrap())),
        );
        b.extend([1, 0, 0, 0]);
    }
    if let Some(r) = recall {
        b.extend([OP_CB_RECALL, r]);
    }
    reply(xid, &b)
}

/// The CB_SEQUENCE sequence id and the CB_RECALL stateid of an encoded CB_COMPOUND.
fn decode_recall(o: &Outcall) -> (u32, Stateid) {
    let (h, at) = rpc::decode_call(&o.record).unwrap();
    assert_eq!((h.prog, h.vers, h.proc_), (PROG, 1, 1));
    assert!(matches!(h.cred, Cred::Sys(_)));
    let mut r = engine::xdr::XdrReader::new(&o.record[at..]);
    r.string(64).unwrap();
    assert_eq!(
        [r.u32().unwrap(), r.u32().unwrap(), r.u32().unwrap()],
        [1, 0, 2]
    );
    assert_eq!(r.u32().unwrap(), OP_CB_SEQUENCE);
    assert_eq!(r.opaque_fixed(16).unwrap(), &SESSION);
    let seqid = r.u32().unwrap();
    r.skip(16).unwrap();
    assert_eq!(r.u32().unwrap(), OP_CB_RECALL);
    (seqid, Stateid::decode(&mut r).unwrap())
}

fn setup() -> (Delegations, RecallDriver, Stateid) {
    let d = Delegations::default();
    d.set_callback_up(A, true);
    let (s, _) = d.try_grant_fh(A, 1, b"handle", false).unwrap();
    (d, RecallDriver::default(), s)
}

#[test]
fn probe_marks_the_back_channel_up_or_down() {
    let d = Delegations::default();
    let mut drv = RecallDriver::default();
    let none = |_: u64| None;
    crate::nfs4::callback::probe_delegations(&d, A, info(conn(0)), None);
    let now = Instant::now();
    let out = drv.step(&d, &none, now);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].conn, conn(0));
    let (h, _) = rpc::decode_call(&out[0].record).unwrap();
    assert_eq!((h.prog, h.vers, h.proc_), (PROG, 1, 0));
    assert!(!d.callback_up(A), "not before the answer");
    assert!(!d.callback_down(A), "unknown while outstanding");
    d.callback_reply(xid_of(&out[0]), &reply(xid_of(&out[0]), &[]));
    assert!(drv.step(&d, &none, now).is_empty());
    assert!(d.callback_up(A));
    assert_eq!(d.stats().callbacks(CallbackResult::Replied), 1);
    // A new probe that is never answered: down after the timeout.
    crate::nfs4::callback::probe_delegations(&d, A, info(conn(0)), None);
    assert_eq!(drv.step(&d, &none, now).len(), 1);
    assert_eq!(drv.in_flight(), 1);
    drv.step(&d, &none, now + CB_TIMEOUT);
    assert_eq!(drv.in_flight(), 0);
    assert!(!d.callback_up(A));
    assert!(d.callback_down(A), "a timed-out probe: path down");
    assert_eq!(d.stats().callbacks(CallbackResult::TimedOut), 1);
    // A late reply to it matches nothing.
    d.callback_reply(5, &reply(5, &[]));
    drv.step(&d, &none, now + CB_TIMEOUT);
    assert_eq!(d.stats().callbacks(CallbackResult::Unmatched), 1);
}

#[test]
fn recall_goes_out_with_cb_sequence_and_is_answered() {
    let (d, mut drv, s) = setup();
    let bound = |_: u64| Some(info(conn(0)));
    assert!(!d.break_conflicts(1, None, Conflict::Write));
    let now = Instant::now();
    let out = drv.step(&d, &bound, now);
    assert_eq!(out.len(), 1);
    let (seqid, sid) = decode_recall(&out[0]);
    assert_eq!((seqid, sid), (1, s), "first slot sequence id is 1");
    let x = xid_of(&out[0]);
    d.callback_reply(x, &compound_reply(x, 0, Some(0)));
    assert!(drv.step(&d, &bound, now).is_empty());
    assert_eq!(d.stats().recalls(RecallResult::Answered), 1);
    assert_eq!(drv.recalls(), 0);
    // Still outstanding until DELEGRETURN; then the writer proceeds.
    assert!(!d.break_conflicts(1, None, Conflict::Write));
    assert_eq!(d.delegreturn(A, &s, 1), Ok(()));
    assert!(d.break_conflicts(1, None, Conflict::Write));
    // The next recall on the session uses the next sequence id.
    let (s2, _) = d.try_grant_fh(A, 2, b"h2", false).unwrap();
    assert!(!d.break_conflicts(2, None, Conflict::Write));
    let out = drv.step(&d, &bound, now);
    assert_eq!(decode_recall(&out[0]), (2, s2));
}

#[test]
fn one_callback_per_slot_at_a_time() {
    let (d, mut drv, _) = setup();
    d.try_grant_fh(A, 2, b"h2", false).unwrap();
    let bound = |_: u64| Some(info(conn(0)));
    assert!(!d.break_conflicts(1, None, Conflict::Write));
    assert!(!d.break_conflicts(2, None, Conflict::Write));
    let now = Instant::now();
    let out = drv.step(&d, &bound, now);
    assert_eq!(out.len(), 1, "slot 0 busy");
    let x = xid_of(&out[0]);
    d.callback_reply(x, &compound_reply(x, 0, Some(0)));
    let out = drv.step(&d, &bound, now);
    assert_eq!(out.len(), 1, "the second goes once the first is answered");
    assert_eq!(decode_recall(&out[0]).0, 2);
}

#[test]
fn timeout_resends_on_the_channel_bound_now_with_the_same_sequence() {
    let (d, mut drv, s) = setup();
    let which = Cell::new(Some(conn(0)));
    let lookup = |_: u64| which.get().map(info);
    assert!(!d.break_conflicts(1, None, Conflict::Write));
    let now = Instant::now();
    let out = drv.step(&d, &lookup, now);
    assert_eq!(out[0].conn, conn(0));
    let first_xid = xid_of(&out[0]);
    // The connection drops: no back channel for a while.
    which.set(None);
    let later = now + CB_TIMEOUT;
    assert!(drv.step(&d, &lookup, later).is_empty());
    assert_eq!(d.stats().callbacks(CallbackResult::TimedOut), 1);
    // The client binds a new connection: the recall goes there, same seqid.
    which.set(Some(conn(1)));
    let out = drv.step(&d, &lookup, later + RETRY);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].conn, conn(1));
    assert_eq!(decode_recall(&out[0]), (1, s));
    assert_eq!(
        xid_of(&out[0]),
        first_xid,
        "resent as a retransmission: same XID"
    );
    // The client had processed the first one: it answers as a replay without a
    // cached reply; the recall counts as delivered and the sequence moves on.
    let x = xid_of(&out[0]);
    d.callback_reply(
        x,
        &compound_reply(x, NFS4ERR_RETRY_UNCACHED_REP.as_u32(), None),
    );
    drv.step(&d, &lookup, later + RETRY);
    assert_eq!(drv.recalls(), 0);
    assert_eq!(d.stats().recalls(RecallResult::Answered), 1);
}

#[test]
fn delay_and_bad_stateid_are_retried_then_left_to_the_lease() {
    let (d, mut drv, _) = setup();
    let bound = |_: u64| Some(info(conn(0)));
    assert!(!d.break_conflicts(1, None, Conflict::Write));
    let mut now = Instant::now();
    let out = drv.step(&d, &bound, now);
    let x = xid_of(&out[0]);
    d.callback_reply(x, &compound_reply(x, 0, Some(NFS4ERR_DELAY.as_u32())));
    assert!(drv.step(&d, &bound, now).is_empty(), "not at once");
    now += RETRY;
    let mut out = drv.step(&d, &bound, now);
    assert_eq!(out.len(), 1, "resent after RETRY");
    assert_eq!(
        decode_recall(&out[0]).0,
        2,
        "DELAY was processed on the slot"
    );
    assert_ne!(
        xid_of(&out[0]),
        x,
        "answered: the resend is a new call, new XID"
    );
    for _ in 0..BAD_STATEID_RETRIES {
        let x = xid_of(&out[0]);
        d.callback_reply(x, &compound_reply(x, 0, Some(NFS4ERR_BAD_STATEID.as_u32())));
        drv.step(&d, &bound, now);
        now += RETRY;
        out = drv.step(&d, &bound, now);
        assert_eq!(out.len(), 1);
    }
    let x = xid_of(&out[0]);
    d.callback_reply(x, &compound_reply(x, 0, Some(NFS4ERR_BAD_STATEID.as_u32())));
    drv.step(&d, &bound, now);
    assert_eq!(drv.recalls(), 0, "given up: revocation after the lease");
    assert!(
        !d.break_conflicts(1, None, Conflict::Write),
        "still outstanding"
    );
}

#[test]
fn lease_revokes_an_unanswered_recall() {
    let (d, mut drv, s) = setup();
    d.set_lease(Duration::from_secs(10));
    let nobody = |_: u64| None;
    assert!(!d.break_conflicts(1, None, Conflict::Write));
    let now = Instant::now();
    assert!(drv.step(&d, &nobody, now).is_empty(), "no back channel");
    drv.step(&d, &nobody, now + Duration::from_secs(11));
    assert_eq!(d.test(&s), Err(StateError::DelegRevoked));
    assert_eq!(d.stats().recalls(RecallResult::Revoked), 1);
    drv.step(&d, &nobody, now + Duration::from_secs(20));
    assert_eq!(drv.recalls(), 0, "the task ends with the revocation");
    assert!(d.break_conflicts(1, None, Conflict::Write));
}

#[test]
fn a_recall_too_big_for_the_back_channel_is_not_sent() {
    let (d, mut drv, _) = setup();
    let tiny = |_: u64| {
        Some(BackChannelInfo {
            max_request: 64,
            ..info(conn(0))
        })
    };
    assert!(!d.break_conflicts(1, None, Conflict::Write));
    assert!(drv.step(&d, &tiny, Instant::now()).is_empty());
    assert_eq!(drv.recalls(), 0);
}

#[test]
fn garbage_replies_are_retried_not_fatal() {
    let (d, mut drv, _) = setup();
    let bound = |_: u64| Some(info(conn(0)));
    assert!(!d.break_conflicts(1, None, Conflict::Write));
    let now = Instant::now();
    let out = drv.step(&d, &bound, now);
    let x = xid_of(&out[0]);
    d.callback_reply(x, &x.to_be_bytes()[..]);
    assert!(drv.step(&d, &bound, now).is_empty());
    let out = drv.step(&d, &bound, now + RETRY);
    assert_eq!(out.len(), 1);
    assert_eq!(
        decode_recall(&out[0]).0,
        1,
        "same sequence id: not processed"
    );
}

#[test]
fn callbacks_use_the_security_of_the_session_probe() {
    let (d, mut drv, _) = setup();
    let bound = |_: u64| Some(info(conn(0)));
    let sec = CbSec::Sys {
        stamp: 1,
        uid: 17,
        gid: 19,
        gids: vec![],
    };
    crate::nfs4::callback::probe_delegations(&d, A, info(conn(0)), Some(sec));
    let now = Instant::now();
    let out = drv.step(&d, &bound, now);
    let cred = |o: &Outcall| rpc::decode_call(&o.record).unwrap().0.cred;
    assert!(matches!(cred(&out[0]), Cred::Sys(a) if (a.uid, a.gid) == (17, 19)));
    let x = xid_of(&out[0]);
    d.callback_reply(x, &reply(x, &[]));
    assert!(!d.break_conflicts(1, None, Conflict::Write));
    let out = drv.step(&d, &bound, now);
    assert!(matches!(cred(&out[0]), Cred::Sys(a) if (a.uid, a.gid) == (17, 19)));
    // A plain probe (BIND_CONN_TO_SESSION) keeps the session's security...
    let x = xid_of(&out[0]);
    d.callback_reply(x, &compound_reply(x, 0, Some(0)));
    drv.step(&d, &bound, now);
    d.queue_probe(A, info(conn(0)), None);
    let out = drv.step(&d, &bound, now);
    assert!(matches!(cred(&out[0]), Cred::Sys(a) if (a.uid, a.gid) == (17, 19)));
    let x = xid_of(&out[0]);
    d.callback_reply(x, &reply(x, &[]));
    drv.step(&d, &bound, now);
    // ...a later probe with AUTH_NONE switches the session over.
    crate::nfs4::callback::probe_delegations(&d, A, info(conn(0)), Some(CbSec::None));
    let out = drv.step(&d, &bound, now);
    assert_eq!(cred(&out[0]), Cred::None);
}

/// R8167-16/17: a callback the RDMA transport reports failed (RDMA_ERROR from the
/// client, or its connection lost while outstanding) is counted `failed` and the
/// recall is resent after the backoff, on the back channel bound by then, with the
/// same slot sequence id; a late report for it changes nothing.
#[test]
fn r8167_17_failed_rdma_callback_is_resent_on_the_next_binding() {
    use crate::stats::Transport;
    let (d, mut drv, s) = setup();
    let which = Cell::new(Some(conn(0)));
    let lookup = |_: u64| which.get().map(info);
    assert!(!d.break_conflicts(1, None, Conflict::Write));
    let now = Instant::now();
    let out = drv.step(&d, &lookup, now);
    assert_eq!(out.len(), 1);
    let st = d.stats();
    assert_eq!(
        st.callbacks_at(Transport::Rdma as usize, CallbackResult::Sent),
        1
    );
    assert_eq!(
        st.recalls_at(Transport::Rdma as usize, RecallResult::Sent),
        1
    );
    let first = xid_of(&out[0]);
    // The connection is lost with the CB_RECALL outstanding.
    d.callback_failed(first);
    which.set(None);
    assert!(drv.step(&d, &lookup, now).is_empty(), "backoff first");
    assert_eq!(drv.in_flight(), 0);
    assert_eq!(
        st.callbacks_at(Transport::Rdma as usize, CallbackResult::Failed),
        1
    );
    // The client binds a new connection (BIND_CONN_TO_SESSION): resent there.
    which.set(Some(conn(1)));
    let out = drv.step(&d, &lookup, now + RETRY);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].conn, conn(1));
    assert_eq!(decode_recall(&out[0]), (1, s), "same slot sequence id");
    let x = xid_of(&out[0]);
    assert_eq!(x, first, "a retransmission keeps its XID (R8167-17)");
    d.callback_failed(x ^ 1); // matches nothing: ignored
    d.callback_reply_via(Transport::Rdma, x, &compound_reply(x, 0, Some(0)));
    assert!(drv.step(&d, &lookup, now + RETRY).is_empty());
    assert_eq!(drv.recalls(), 0);
    assert_eq!(
        st.callbacks_at(Transport::Rdma as usize, CallbackResult::Replied),
        1
    );
    assert_eq!(
        st.recalls_at(Transport::Rdma as usize, RecallResult::Answered),
        1
    );
    assert_eq!(
        st.recalls(RecallResult::Sent),
        1,
        "sent counted once per recall"
    );
    assert_eq!(st.callbacks(CallbackResult::Failed), 1);
}

/// R8167-16: a CB_NULL probe answered with RDMA_ERROR (or lost) leaves the back
/// channel down: no delegations until the client binds one that answers.
#[test]
fn r8167_16_failed_probe_marks_the_back_channel_down() {
    let d = Delegations::default();
    let mut drv = RecallDriver::default();
    let none = |_: u64| None;
    crate::nfs4::callback::probe_delegations(&d, A, info(conn(0)), None);
    let now = Instant::now();
    let out = drv.step(&d, &none, now);
    d.callback_failed(xid_of(&out[0]));
    drv.step(&d, &none, now);
    assert!(d.callback_down(A));
    assert_eq!(
        d.try_grant_fh(A, 1, b"handle", false),
        None,
        "no delegation"
    );
}

/// CB_OFFLOAD (RFC 7862 §16.1) for a finished asynchronous COPY: a minor-version-2
/// CB_COMPOUND of CB_SEQUENCE + CB_OFFLOAD on the client's back channel, with the
/// copy's stateid, the destination and the result; resent after a timeout with the
/// same slot sequence; once answered the copy is forgotten. A cancelled copy is
/// never told.
#[test]
fn a_finished_copy_is_told_by_cb_offload_and_then_forgotten() {
    use crate::state::offload::OffloadOutcome;
    let d = Delegations::default();
    let mut drv = RecallDriver::default();
    let bound = |_: u64| Some(info(conn(0)));
    let sid = d.offloads.start(A, b"dst-fh").unwrap();
    let now = Instant::now();
    assert!(
        drv.step(&d, &bound, now).is_empty(),
        "running: nothing to tell"
    );
    let done = OffloadOutcome::Copied {
        count: 4096,
        file_sync: true,
        verifier: [3; 8],
    };
    assert!(d.offloads.finish(&sid.other, done));
    let out = drv.step(&d, &bound, now);
    assert_eq!(out.len(), 1);
    let check = |o: &Outcall| {
        let (xid, cb) = nfs_wire::v4cb::decode_offload(&o.record).unwrap();
        assert_eq!(xid, xid_of(o));
        assert_eq!(
            (cb.session, cb.seqid, &cb.fh[..]),
            (SESSION, 1, &b"dst-fh"[..])
        );
        let mut want = [0u8; 16];
        want[..4].copy_from_slice(&sid.seqid.to_be_bytes());
        want[4..].copy_from_slice(&sid.other);
        assert_eq!(cb.stateid, want);
        assert_eq!(
            (cb.status, cb.count, cb.committed, cb.verifier),
            (0, 4096, 2, [3; 8])
        );
        cb
    };
    check(&out[0]);
    // No answer: resent with the same sequence id (and XID: a retransmission).
    let again = drv.step(&d, &bound, now + CB_TIMEOUT);
    assert_eq!(again.len(), 1);
    let cb = check(&again[0]);
    assert_eq!(xid_of(&again[0]), xid_of(&out[0]));
    let x = xid_of(&again[0]);
    d.callback_reply(x, &nfs_wire::v4cb::offload_reply(x, &cb));
    assert!(drv.step(&d, &bound, now + CB_TIMEOUT).is_empty());
    assert!(d.offloads.is_empty(), "told: forgotten");
    // A cancelled copy is never told.
    let sid = d.offloads.start(A, b"dst-fh").unwrap();
    assert!(d.offloads.cancel(A, &sid));
    assert!(!d.offloads.finish(&sid.other, done));
    assert!(drv.step(&d, &bound, now + CB_TIMEOUT).is_empty());
}
