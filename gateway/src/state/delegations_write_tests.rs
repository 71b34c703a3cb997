//! Write delegations from the table's API (RFC 8881 §10.4, §10.4.3): granted alone on
//! a file, recalled by every access of anyone else (reads and attribute reads
//! included), holding the file in the reactors' caches from grant to return,
//! revocation or purge.

use super::*;
use crate::cache::Generations;
use crate::state::recall::Job;

const A: u64 = 0xa;
const B: u64 = 0xb;
const FILE: u64 = 91;

/// A table whose clients A and B have working back channels, holding files in
/// `gens`.
fn table() -> (Delegations, Arc<Generations>) {
    let d = Delegations::default();
    d.set_callback_up(A, true);
    d.set_callback_up(B, true);
    let gens = Arc::new(Generations::new());
    d.observe_holds(gens.clone());
    (d, gens)
}

fn jobs(d: &Delegations) -> Vec<Job> {
    std::iter::from_fn(|| d.inbox.pop()).collect()
}

/// Whether the caches may use what they learned of `FILE` (a stamp taken now
/// still equals itself a moment later).
fn cacheable(gens: &Generations) -> bool {
    gens.stamp(FILE) == gens.stamp(FILE)
}

#[test]
fn a_write_delegation_is_granted_alone_and_holds_the_file_in_the_caches() {
    let (d, gens) = table();
    assert!(cacheable(&gens));
    let (s, write) = d.try_grant_fh(A, FILE, b"fh", true).expect("granted");
    assert!(write);
    assert!(d.any_write() && d.any_live());
    assert!(!cacheable(&gens), "no cached answer while it is out");
    // Nobody else gets a delegation on the file, nor the holder a second one.
    assert_eq!(d.try_grant_fh(B, FILE, b"fh", false), None);
    assert_eq!(d.try_grant_fh(B, FILE, b"fh", true), None);
    assert_eq!(d.try_grant_fh(A, FILE, b"fh", false), None);
    // The holder writes and reads under it; revoked or another's → errors.
    assert_eq!(d.check_io(A, &s, FILE, true), Some(Ok(())));
    assert_eq!(d.check_io(A, &s, FILE, false), Some(Ok(())));
    assert_eq!(
        d.check_io(B, &s, FILE, true),
        Some(Err(StateError::BadStateid))
    );
    assert_eq!(d.delegreturn(A, &s, FILE), Ok(()));
    assert!(!d.any_write());
    assert!(cacheable(&gens), "released on DELEGRETURN");
    // A read delegation elsewhere keeps a write one off its file.
    d.try_grant_fh(B, FILE + 1, b"fh2", false).unwrap();
    assert_eq!(d.try_grant_fh(A, FILE + 1, b"fh2", true), None);
}

#[test]
fn reads_recall_a_write_delegation_and_wait_until_it_is_returned() {
    let (d, gens) = table();
    // No write delegation: reads never wait, never lock.
    assert!(d.break_conflicts(FILE, None, Conflict::Read));
    let (s, _) = d.try_grant_fh(A, FILE, b"fh", true).unwrap();
    // The holder's own reads do not conflict.
    assert!(d.break_conflicts(FILE, Some(A), Conflict::Read));
    assert!(
        d.break_conflicts(FILE + 1, None, Conflict::Read),
        "another file"
    );
    assert!(jobs(&d).is_empty());
    // An NFSv3 GETATTR (or READ): recall, wait.
    assert!(!d.break_conflicts(FILE, None, Conflict::Read));
    assert_eq!(jobs(&d), vec![Job::Recall(s.other)]);
    // Another v4 client's READ and OPEN for reading wait for the same recall.
    assert!(!d.break_conflicts(FILE, Some(B), Conflict::Read));
    assert!(!d.break_conflicts(FILE, Some(B), Conflict::OpenRead));
    assert!(jobs(&d).is_empty(), "one recall");
    assert!(!cacheable(&gens), "still held while recalled");
    assert_eq!(d.delegreturn(A, &s, FILE), Ok(()));
    assert!(d.break_conflicts(FILE, None, Conflict::Read));
    assert!(cacheable(&gens));
    // The reader's conflict keeps the file from new delegations for a while.
    assert_eq!(d.try_grant_fh(A, FILE, b"fh", true), None);
}

#[test]
fn a_write_delegation_not_returned_within_the_lease_is_revoked_and_released() {
    let (d, gens) = table();
    d.set_lease(Duration::from_millis(40));
    let (s, _) = d.try_grant_fh(A, FILE, b"fh", true).unwrap();
    assert!(!d.break_conflicts(FILE, None, Conflict::Write));
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(d.revoke_overdue(Instant::now()), 1);
    assert!(!d.any_write());
    assert!(cacheable(&gens), "a revoked delegation holds nothing");
    assert!(d.break_conflicts(FILE, None, Conflict::Read));
    assert_eq!(
        d.check_io(A, &s, FILE, true),
        Some(Err(StateError::DelegRevoked))
    );
    assert_eq!(d.delegreturn(A, &s, FILE), Err(StateError::DelegRevoked));
    assert_eq!(d.free(&s), Ok(()));
    assert!(cacheable(&gens));
}

#[test]
fn a_purged_holder_releases_its_files() {
    let (d, gens) = table();
    d.try_grant_fh(A, FILE, b"fh", true).unwrap();
    d.purge_client(A);
    assert!(!d.any_write() && !d.any_live());
    assert!(cacheable(&gens));
    // Off: never granted.
    d.set_write_delegations(false);
    assert_eq!(d.try_grant_fh(B, FILE, b"fh", true), None);
}

#[test]
fn read_delegations_ignore_reads() {
    let (d, _) = table();
    d.try_grant_fh(A, FILE, b"fh", false).unwrap();
    assert!(d.break_conflicts(FILE, None, Conflict::Read));
    assert!(d.break_conflicts(FILE, Some(B), Conflict::Read));
    assert!(jobs(&d).is_empty());
}

/// A holder whose lease ran out (a courtesy client) cannot answer a recall: a
/// reader's conflict takes its write delegation at once (no wait), releases the
/// file's hold and dooms the client (`delegations_courtesy.rs`), as for read ones.
#[test]
fn a_courtesy_holders_write_delegation_goes_at_the_first_conflict() {
    let (d, gens) = table();
    d.try_grant_fh(A, FILE, b"fh", true).unwrap();
    d.mark_courtesy(&[A]);
    assert!(d.break_conflicts(FILE, None, Conflict::Read), "no wait");
    assert!(jobs(&d).iter().all(|j| !matches!(j, Job::Recall(_))));
    assert!(!d.any_write() && cacheable(&gens));
    assert_eq!(d.take_doomed(), vec![A]);
}
