//! The asynchronous COPY table's rules (RFC 7862 §15.2.3, §15.8, §15.9) and bounds.

use super::*;

const A: u64 = 1;
const B: u64 = 2;

fn copied(n: u64) -> OffloadOutcome {
    OffloadOutcome::Copied {
        count: n,
        file_sync: true,
        verifier: [7; 8],
    }
}

#[test]
fn a_copy_is_named_by_an_unguessable_copy_stateid_and_owned_by_its_client() {
    let t = Offloads::default();
    let s = t.start(A, b"fh").unwrap();
    let s2 = t.start(A, b"fh").unwrap();
    assert_eq!(Kind::of(&s.other), Some(Kind::Copy));
    assert_ne!(s.other, s2.other);
    // Running: OFFLOAD_STATUS has no result yet; another client sees nothing.
    assert_eq!(t.status(A, &s), Some(None));
    assert_eq!(t.status(B, &s), None);
    assert!(!t.cancel(B, &s), "another client cannot cancel it");
    assert!(t.finish(&s.other, copied(5)));
    assert_eq!(t.status(A, &s), Some(Some(copied(5))));
    // The callback thread finds it, with what CB_OFFLOAD carries.
    assert_eq!(t.take_finished(), Some(s.other));
    let n = t.notice(&s.other).unwrap();
    assert_eq!(
        (n.clientid, n.stateid, &n.fh[..], n.outcome),
        (A, s, &b"fh"[..], copied(5))
    );
    t.told(&s.other);
    assert_eq!(t.status(A, &s), None);
    assert!(
        t.notice(&s2.other).is_none(),
        "still running: nothing to tell"
    );
}

#[test]
fn a_cancelled_copy_is_never_told() {
    let t = Offloads::default();
    let s = t.start(A, b"fh").unwrap();
    assert!(t.cancel(A, &s));
    assert!(!t.finish(&s.other, copied(1)));
    assert_eq!(t.take_finished(), None);
    assert!(t.notice(&s.other).is_none());
    assert!(t.is_empty());
}

#[test]
fn copies_past_the_bounds_run_synchronously() {
    let t = Offloads::default();
    let mine: Vec<_> = (0..MAX_PER_CLIENT)
        .map(|_| t.start(A, b"f").unwrap())
        .collect();
    assert!(t.start(A, b"f").is_none(), "per-client bound");
    // Others still get theirs, up to the global bound.
    let mut others = 0;
    while t.start(B + others as u64 % 2, b"f").is_some() {
        others += 1;
    }
    assert_eq!(MAX_PER_CLIENT + others, MAX_RUNNING);
    // A finished copy frees its running place.
    assert!(t.finish(&mine[0].other, copied(1)));
    assert!(t.start(A, b"f").is_some());
}

#[test]
fn finished_copies_nobody_was_told_of_expire() {
    let t = Offloads::default();
    let s = t.start(A, b"fh").unwrap();
    let running = t.start(A, b"fh").unwrap();
    t.finish(
        &s.other,
        OffloadOutcome::Failed {
            status: 28,
            copied: 0,
        },
    );
    assert_eq!(t.expire(Instant::now()), 0);
    assert_eq!(t.expire(Instant::now() + KEEP_FINISHED), 1);
    assert_eq!(t.status(A, &s), None);
    assert_eq!(
        t.status(A, &running),
        Some(None),
        "a running copy never expires"
    );
}
