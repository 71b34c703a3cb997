//! The delegation table from its API: grant policy, conflicts → one recall → DELAY
//! until returned or revoked after the lease, DELEGRETURN/TEST/FREE/check_io
//! statuses, purge, limits.

use super::*;
use crate::state::recall::Job;

const A: u64 = 0xa;
const B: u64 = 0xb;
const FILE: u64 = 77;

fn table() -> Delegations {
    let d = Delegations::default();
    d.set_callback_up(A, true);
    d.set_callback_up(B, true);
    d
}

fn grant(d: &Delegations, c: u64, f: u64) -> Stateid {
    d.try_grant_fh(c, f, &[1, 2, 3], false)
        .expect("grantable")
        .0
}

fn jobs(d: &Delegations) -> Vec<Job> {
    std::iter::from_fn(|| d.inbox.pop()).collect()
}

#[test]
fn read_delegations_only_to_clients_with_a_working_back_channel() {
    let d = Delegations::default();
    assert_eq!(
        d.try_grant_fh(A, FILE, b"fh", false),
        None,
        "no probe answered"
    );
    d.set_callback_up(A, true);
    assert_eq!(d.try_grant(A, FILE + 1, false), None, "handle unknown");
    d.set_write_delegations(false);
    assert_eq!(
        d.try_grant_fh(A, FILE, b"fh", true),
        None,
        "no write delegations with nfs4.write_delegations off"
    );
    let (s, write) = d.try_grant_fh(A, FILE, b"fh", false).unwrap();
    assert!(!write);
    assert_eq!(s.seqid, 1);
    assert!(d.owns(&s));
    assert_eq!(s.other[4], KIND);
    assert_ne!(s.other[..4], [0; 4], "never a special stateid");
    assert!(!d.owns(&Stateid::ANONYMOUS));
    assert!(!d.owns(&Stateid::BYPASS));
    assert!(d.holds(A, &s, FILE));
    assert!(!d.holds(B, &s, FILE));
    assert!(!d.holds(A, &s, FILE + 1));
    assert_eq!(d.try_grant(A, FILE, false), None, "one per client and file");
    d.set_callback_up(B, true);
    let (s2, _) = d.try_grant(B, FILE, false).expect("read delegations share");
    assert_ne!(s.other, s2.other);
    assert_eq!(d.stats().delegations(), 2);
    assert!(d.any_live());
}

#[test]
fn conflict_recalls_once_and_delays_until_returned() {
    let d = table();
    let s = grant(&d, A, FILE);
    // The holder itself never conflicts; an OPEN for reading never conflicts with
    // read delegations.
    assert!(d.break_conflicts(FILE, Some(A), Conflict::Write));
    assert!(d.break_conflicts(FILE, Some(B), Conflict::OpenRead));
    assert!(jobs(&d).is_empty());
    // A v3 WRITE: recall started, caller must wait.
    assert!(!d.break_conflicts(FILE, None, Conflict::Write));
    assert_eq!(jobs(&d), vec![Job::Recall(s.other)]);
    // Retries keep waiting without a second recall.
    assert!(!d.break_conflicts(FILE, None, Conflict::Write));
    assert!(!d.break_conflicts(FILE, Some(B), Conflict::Namespace));
    assert!(jobs(&d).is_empty(), "recall started once");
    // "sent" counts the first CB_RECALL handed to a transport, once, with its label.
    assert_eq!(d.stats().recalls(RecallResult::Sent), 0, "no CB_RECALL yet");
    d.recall_sent(&s.other, Transport::Rdma);
    d.recall_sent(&s.other, Transport::Tcp);
    assert_eq!(d.stats().recalls(RecallResult::Sent), 1);
    assert_eq!(
        d.stats()
            .recalls_at(Transport::Rdma as usize, RecallResult::Sent),
        1
    );
    let (client, sid, fh) = d.recall_target(&s.other).unwrap();
    assert_eq!((client, sid, &fh[..]), (A, s, &[1u8, 2, 3][..]));
    // No new grants on the file while it is recalled (or recently conflicted).
    assert_eq!(d.try_grant_fh(B, FILE, b"x", false), None);
    // DELEGRETURN completes the recall; the writer goes on.
    assert_eq!(d.delegreturn(A, &s, FILE), Ok(()));
    assert_eq!(d.stats().recalls(RecallResult::Returned), 1);
    assert_eq!(
        d.stats()
            .recalls_at(Transport::Rdma as usize, RecallResult::Returned),
        1,
        "returned is labelled with the recall's transport"
    );
    assert!(d.recall_target(&s.other).is_none());
    assert!(d.break_conflicts(FILE, None, Conflict::Write));
    assert_eq!(
        d.delegreturn(A, &s, FILE),
        Err(StateError::BadStateid),
        "gone"
    );
    assert!(!d.any_live());
    assert_eq!(d.stats().delegations(), 0);
}

#[test]
fn a_recall_not_answered_within_the_lease_is_revoked() {
    let d = table();
    d.set_lease(Duration::from_millis(50));
    let s = grant(&d, A, FILE);
    assert!(!d.break_conflicts(FILE, None, Conflict::Write));
    assert_eq!(d.revoke_overdue(Instant::now()), 0, "lease not over yet");
    std::thread::sleep(Duration::from_millis(60));
    // The conflicting caller's retry revokes it and goes on.
    assert!(d.break_conflicts(FILE, None, Conflict::Write));
    assert_eq!(d.stats().recalls(RecallResult::Revoked), 1);
    assert_eq!(
        d.stats().recalls_at(2, RecallResult::Revoked),
        1,
        "no CB_RECALL was ever sent: transport \"none\""
    );
    assert!(!d.any_live());
    assert!(d.has_revoked(A));
    assert!(!d.has_revoked(B));
    // Revoked: DELEGRETURN and I/O say so, TEST_STATEID too; FREE_STATEID frees it.
    assert_eq!(d.delegreturn(A, &s, FILE), Err(StateError::DelegRevoked));
    assert!(!d.holds(A, &s, FILE), "revoked: no CLAIM_DELEGATE_CUR");
    assert_eq!(
        d.check_io(A, &s, FILE, false),
        Some(Err(StateError::DelegRevoked))
    );
    assert_eq!(d.test(&s), Err(StateError::DelegRevoked));
    assert_eq!(d.test_client(A, &s), Err(StateError::DelegRevoked));
    assert_eq!(d.test_client(B, &s), Err(StateError::BadStateid), "not B's");
    assert_eq!(d.free_client(B, &s), Err(StateError::BadStateid), "not B's");
    assert_eq!(d.free_client(A, &s), Ok(()));
    assert_eq!(d.free(&s), Err(StateError::BadStateid), "freed");
    assert_eq!(d.test(&s), Err(StateError::BadStateid));
    assert!(!d.has_revoked(A));
}

#[test]
fn revoke_overdue_is_what_the_callback_thread_runs() {
    let d = table();
    d.set_lease(Duration::from_millis(20));
    let s = grant(&d, A, FILE);
    let other = grant(&d, A, FILE + 1);
    assert!(!d.break_conflicts(FILE, Some(B), Conflict::Write));
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(d.revoke_overdue(Instant::now()), 1, "only the recalled one");
    assert_eq!(d.test(&s), Err(StateError::DelegRevoked));
    assert_eq!(d.test(&other), Ok(()));
    assert_eq!(d.stats().delegations(), 1);
}

#[test]
fn stateid_checks() {
    let d = table();
    let s = grant(&d, A, FILE);
    // check_io: not ours → None (the opens table decides).
    assert_eq!(d.check_io(A, &Stateid::ANONYMOUS, FILE, false), None);
    assert_eq!(d.check_io(A, &s, FILE, false), Some(Ok(())));
    assert_eq!(
        d.check_io(A, &s, FILE, true),
        Some(Err(StateError::OpenMode))
    );
    assert_eq!(
        d.check_io(B, &s, FILE, false),
        Some(Err(StateError::BadStateid))
    );
    assert_eq!(
        d.check_io(A, &s, FILE + 1, false),
        Some(Err(StateError::BadStateid))
    );
    let zero = Stateid { seqid: 0, ..s };
    assert_eq!(
        d.check_io(A, &zero, FILE, false),
        Some(Ok(())),
        "seqid 0 = current"
    );
    let newer = Stateid { seqid: 2, ..s };
    assert_eq!(
        d.check_io(A, &newer, FILE, false),
        Some(Err(StateError::BadStateid))
    );
    let mut forged = s;
    forged.other[11] ^= 0xff;
    assert_eq!(
        d.check_io(A, &forged, FILE, false),
        Some(Err(StateError::BadStateid))
    );
    assert_eq!(d.test(&forged), Err(StateError::BadStateid));
    assert_eq!(d.test(&s), Ok(()));
    assert_eq!(
        d.free(&s),
        Err(StateError::LocksHeld),
        "still held: DELEGRETURN it"
    );
    // DELEGRETURN by another client or for another file.
    assert_eq!(d.delegreturn(B, &s, FILE), Err(StateError::BadStateid));
    assert_eq!(d.delegreturn(A, &s, FILE + 1), Err(StateError::BadStateid));
    assert_eq!(d.delegreturn(A, &newer, FILE), Err(StateError::BadStateid));
    assert_eq!(d.delegreturn(A, &zero, FILE), Ok(()));
}

#[test]
fn purge_frees_everything_of_a_client() {
    let d = table();
    let a1 = grant(&d, A, 1);
    let a2 = grant(&d, A, 2);
    let b1 = grant(&d, B, 1);
    assert!(!d.break_conflicts(2, None, Conflict::Write));
    d.purge_client(A);
    assert_eq!(d.test(&a1), Err(StateError::BadStateid));
    assert_eq!(d.test(&a2), Err(StateError::BadStateid));
    assert_eq!(d.test(&b1), Ok(()));
    assert!(d.recall_target(&a2.other).is_none(), "its recall stops");
    assert!(
        d.break_conflicts(2, None, Conflict::Write),
        "nothing left to wait for"
    );
    assert!(
        !d.callback_up(A),
        "the client's back channel is forgotten too"
    );
    assert_eq!(d.stats().delegations(), 1);
}

#[test]
fn a_recently_conflicted_file_gets_no_delegation() {
    let d = table();
    let s = grant(&d, A, FILE);
    assert!(!d.break_conflicts(FILE, None, Conflict::Write));
    assert_eq!(d.delegreturn(A, &s, FILE), Ok(()));
    assert_eq!(
        d.try_grant_fh(A, FILE, b"fh", false),
        None,
        "blocked for a while"
    );
    // A v4 writer blocks others even when nobody holds a delegation yet...
    assert!(d.break_conflicts(FILE + 1, Some(B), Conflict::Write));
    assert_eq!(d.try_grant_fh(A, FILE + 1, b"fh", false), None);
    // ...but not itself.
    assert!(d.try_grant_fh(B, FILE + 1, b"fh", false).is_some());
}

#[test]
fn per_client_limit() {
    let d = table();
    for f in 0..MAX_PER_CLIENT as u64 {
        grant(&d, A, 1000 + f);
    }
    assert_eq!(d.try_grant_fh(A, 1, b"fh", false), None, "limit reached");
    assert!(
        d.try_grant_fh(B, 1, b"fh", false).is_some(),
        "others unaffected"
    );
}

#[test]
fn callback_replies_are_queued_and_bounded() {
    let d = Delegations::default();
    d.callback_reply(1, &[0; 8]);
    assert_eq!(
        d.pop_reply(),
        Some((1, vec![0; 8], crate::stats::Transport::Tcp))
    );
    d.callback_reply(2, &vec![0; MAX_REPLY_BYTES + 1]);
    assert_eq!(d.pop_reply(), None, "oversized reply dropped");
    for x in 0..MAX_REPLIES as u32 + 5 {
        d.callback_reply(x, &[0; 4]);
    }
    use crate::stats::callbacks::CallbackResult;
    assert_eq!(d.stats().callbacks(CallbackResult::Unmatched), 6);
}
