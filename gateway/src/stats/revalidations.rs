//! `nfsgw_uring_revalidations_total{result}`: file-table entries past their TTL that
//! a reactor revalidated with a `statx` on its ring instead of a worker round trip
//! (`uring::files`, "Revalidation"). `unchanged`: renewed, the call stayed
//! on the reactor; `changed`: the file changed (or the statx failed), the entry was
//! dropped and the call went to a worker.
//!
//! Process-wide relaxed atomics, one add per revalidation (at most about one per
//! file per second per reactor).

use std::sync::atomic::{AtomicU64, Ordering};

static UNCHANGED: AtomicU64 = AtomicU64::new(0);
static CHANGED: AtomicU64 = AtomicU64::new(0);

/// Counts one revalidation and its outcome.
pub fn count(unchanged: bool) {
    let c = if unchanged { &UNCHANGED } else { &CHANGED };
    c.fetch_add(1, Ordering::Relaxed);
}

/// (unchanged, changed).
pub fn totals() -> (u64, u64) {
    (
        UNCHANGED.load(Ordering::Relaxed),
        CHANGED.load(Ordering::Relaxed),
    )
}
