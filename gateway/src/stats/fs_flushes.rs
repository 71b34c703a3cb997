//! `nfsgw_fs_flushes_total{kind}`: device flushes the `fs` backend asked for on its
//! namespace path (`backend::fs::flush`). `file`: a new file's fsync before its name
//! points at it; `dir`: a directory's fsync after its entries changed; `log`: one
//! force of the file system's log (`backend.fs.flush` = journal), which covers every
//! change made before it in any directory; `data`: a stable WRITE's or COMMIT's data
//! sync through a worker (an fsync, or under the journal mode the data written back
//! without a device flush and then a shared log force, counted under `log`).
//!
//! Process-wide relaxed atomics, one add per flush (each costs a device round trip,
//! milliseconds: the add is free beside it).

use std::sync::atomic::{AtomicU64, Ordering};

/// The kinds, in exposition order.
pub const KINDS: [&str; 4] = ["file", "dir", "log", "data"];

static TOTALS: [AtomicU64; 4] = [
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
];

/// Counts one flush of kind `KINDS[kind]`.
pub fn count(kind: usize) {
    TOTALS[kind].fetch_add(1, Ordering::Relaxed);
}

/// Flushes of kind `KINDS[kind]` so far.
pub fn total(kind: usize) -> u64 {
    TOTALS[kind].load(Ordering::Relaxed)
}
