//! `nfsgw_uring_failures_total{op}`: storage operations on a reactor's io_uring that
//! failed or came back short (`server::direct::fault`). Each such call went
//! to a backend worker, which redid it and answered (NFS3ERR_NOSPC and the like are
//! the worker's answers). `op`: `read`, `splice`, `write` (an error), `short_write`
//! (fewer bytes than asked: ENOSPC after some pages, a file-size limit), `sync` (a
//! stable WRITE's linked fsync/fdatasync), `statx` (the post-write attributes),
//! `commit` (COMMIT's fdatasync).
//!
//! Process-wide relaxed atomics, one add per failure (never on a successful call).

use std::sync::atomic::{AtomicU64, Ordering};

/// The label values, in the order of the counters.
pub const OPS: [&str; 7] = [
    "read",
    "splice",
    "write",
    "short_write",
    "sync",
    "statx",
    "commit",
];

static COUNTS: [AtomicU64; OPS.len()] = [const { AtomicU64::new(0) }; OPS.len()];

/// Counts one failure of `OPS[op]` (an index out of range counts nothing).
pub fn count(op: usize) {
    if let Some(c) = COUNTS.get(op) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// The count of `OPS[op]`.
pub fn total(op: usize) -> u64 {
    COUNTS.get(op).map_or(0, |c| c.load(Ordering::Relaxed))
}
