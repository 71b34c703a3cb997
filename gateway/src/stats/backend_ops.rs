//! `nfsgw_backend_duration_seconds{backend,op}` and
//! `nfsgw_backend_errors_total{backend,op,error}`: every call the file model makes to
//! its object store, timed where it is made (`backend::timed::Timed`, the wrapper the
//! server puts around the store it opens), by the operation of the `Backend` trait and
//! by how it failed. The NFS latency of a worker-bound procedure includes the ring
//! hops and the queueing; this is the store's own share.
//!
//! Sharing: process-wide statics, written by the backend workers (several threads:
//! `Hist::record_shared`, relaxed `fetch_add`s) and read by the stats endpoint. A
//! backend call costs a microsecond (memory) to milliseconds (s3), the two clock
//! readings and two atomic adds tens of nanoseconds. Never on a reactor: reactors do
//! not call the store (docs/architecture.md §1).

use super::histogram::{upper_us, Hist, BUCKETS};
use crate::backend::BackendError;
use std::sync::atomic::{AtomicU64, Ordering};

/// The operations of the `Backend`, `Upload`, `RandomWrite` and `SharedState` traits
/// (label `op`). Hints and local look-ups (`warm`, `data_file`, limits) are not
/// store calls and are not timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Op {
    Head,
    Get,
    Put,
    Multipart,
    Part,
    Complete,
    Abort,
    List,
    CountSubdirs,
    Copy,
    Delete,
    SetMeta,
    Capacity,
    Rename,
    WriteAt,
    SetSize,
    Sync,
    Seek,
    Allocate,
    Deallocate,
    CopyRange,
    CloneRange,
    XattrGet,
    XattrSet,
    XattrList,
    XattrRemove,
    MacKey,
    PutId,
    GetId,
}

/// The `op` label of each [`Op`], in order.
pub const OPS: [&str; 29] = [
    "head",
    "get",
    "put",
    "multipart",
    "part",
    "complete",
    "abort",
    "list",
    "count_subdirs",
    "copy",
    "delete",
    "set_meta",
    "capacity",
    "rename",
    "write_at",
    "set_size",
    "sync",
    "seek",
    "allocate",
    "deallocate",
    "copy_range",
    "clone_range",
    "xattr_get",
    "xattr_set",
    "xattr_list",
    "xattr_remove",
    "mac_key",
    "put_id",
    "get_id",
];

/// The `error` label: `BackendError`'s variants.
pub const ERRORS: [&str; 9] = [
    "not_found",
    "already_exists",
    "no_space",
    "too_large",
    "read_only",
    "retryable",
    "permanent",
    "lost",
    "unsupported",
];

/// The `backend` label: the stores `Backend::name` gives, then anything else.
pub const BACKENDS: [&str; 4] = ["fs", "memory", "s3", "other"];

/// The row of a store by its `Backend::name`.
pub fn backend_row(name: &str) -> usize {
    BACKENDS[..3]
        .iter()
        .position(|b| *b == name)
        .unwrap_or(BACKENDS.len() - 1)
}

fn error_row(e: &BackendError) -> usize {
    match e {
        BackendError::NotFound => 0,
        BackendError::AlreadyExists => 1,
        BackendError::NoSpace => 2,
        BackendError::TooLarge => 3,
        BackendError::ReadOnly => 4,
        BackendError::Retryable(_) => 5,
        BackendError::Permanent(_) => 6,
        BackendError::Lost(_) => 7,
        BackendError::Unsupported => 8,
    }
}

static LATENCY: [[Hist; OPS.len()]; BACKENDS.len()] =
    [const { [const { Hist::new() }; OPS.len()] }; BACKENDS.len()];
static FAILED: [[[AtomicU64; ERRORS.len()]; OPS.len()]; BACKENDS.len()] =
    [const { [const { [const { AtomicU64::new(0) }; ERRORS.len()] }; OPS.len()] }; BACKENDS.len()];

/// Records one store call of `backend` (its row) that took `ns`, and how it failed.
#[inline]
pub fn record(backend: usize, op: Op, ns: u64, err: Option<&BackendError>) {
    let b = backend.min(BACKENDS.len() - 1);
    LATENCY[b][op as usize].record_shared(ns);
    if let Some(e) = err {
        FAILED[b][op as usize][error_row(e)].fetch_add(1, Ordering::Relaxed);
    }
}

/// Calls recorded and errors of one (backend, op), for tests and the `top` view.
pub fn totals(backend: usize, op: Op) -> (u64, [u64; ERRORS.len()]) {
    let (counts, _) = LATENCY[backend][op as usize].read();
    let errs = std::array::from_fn(|e| FAILED[backend][op as usize][e].load(Ordering::Relaxed));
    (counts.iter().sum(), errs)
}

/// Renders both metrics: for each (backend, op) that was called, its histogram and
/// its error counters (every `error` value, zeros included, so a panel of a called
/// operation has a series to show).
pub fn render(out: &mut String) {
    use std::fmt::Write;
    let called: Vec<(usize, usize, [u64; BUCKETS], u64)> = (0..BACKENDS.len())
        .flat_map(|b| (0..OPS.len()).map(move |o| (b, o)))
        .filter_map(|(b, o)| {
            let (counts, sum) = LATENCY[b][o].read();
            (counts.iter().sum::<u64>() > 0).then_some((b, o, counts, sum))
        })
        .collect();
    let _ = writeln!(out, "# HELP nfsgw_backend_duration_seconds Calls to the object store by operation of the backend interface: the store's own latency, without the ring hops and queueing of the NFS call.");
    let _ = writeln!(out, "# TYPE nfsgw_backend_duration_seconds histogram");
    for (b, o, counts, sum_ns) in &called {
        let labels = format!("backend=\"{}\",op=\"{}\"", BACKENDS[*b], OPS[*o]);
        let mut cum = 0;
        for (i, c) in counts.iter().enumerate() {
            cum += c;
            let le = upper_us(i).map_or("+Inf".to_string(), |us| format!("{}", us as f64 / 1e6));
            let _ = writeln!(
                out,
                "nfsgw_backend_duration_seconds_bucket{{{labels},le=\"{le}\"}} {cum}"
            );
        }
        let _ = writeln!(
            out,
            "nfsgw_backend_duration_seconds_sum{{{labels}}} {}",
            *sum_ns as f64 / 1e9
        );
        let _ = writeln!(
            out,
            "nfsgw_backend_duration_seconds_count{{{labels}}} {cum}"
        );
    }
    let _ = writeln!(out, "# HELP nfsgw_backend_errors_total Failed calls to the object store by operation and error (not_found is routine: a LOOKUP of a missing name asks the store).");
    let _ = writeln!(out, "# TYPE nfsgw_backend_errors_total counter");
    for (b, o, _, _) in &called {
        for (e, name) in ERRORS.iter().enumerate() {
            let _ = writeln!(
                out,
                "nfsgw_backend_errors_total{{backend=\"{}\",op=\"{}\",error=\"{name}\"}} {}",
                BACKENDS[*b],
                OPS[*o],
                FAILED[*b][*o][e].load(Ordering::Relaxed)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_cover_every_op_and_error() {
        assert_eq!(OPS.len(), Op::GetId as usize + 1);
        assert_eq!(OPS[Op::Head as usize], "head");
        assert_eq!(OPS[Op::Get as usize], "get");
        assert_eq!(OPS[Op::XattrRemove as usize], "xattr_remove");
        assert_eq!(ERRORS[error_row(&BackendError::Unsupported)], "unsupported");
        assert_eq!(
            ERRORS[error_row(&BackendError::Retryable(String::new()))],
            "retryable"
        );
        assert_eq!(backend_row("fs"), 0);
        assert_eq!(backend_row("s3"), 2);
        assert_eq!(backend_row("anything"), 3);
    }

    #[test]
    fn records_render_as_histograms_and_error_counters() {
        // The "other" row: no real backend in this test binary is named so.
        let b = backend_row("test-only");
        let (n0, e0) = totals(b, Op::Copy);
        record(b, Op::Copy, 1_500, None);
        record(b, Op::Copy, 3_000_000, Some(&BackendError::NotFound));
        record(usize::MAX, Op::Copy, 10, Some(&BackendError::NoSpace));
        let (n1, e1) = totals(b, Op::Copy);
        assert_eq!(n1, n0 + 3);
        assert_eq!(e1[0], e0[0] + 1);
        assert_eq!(e1[2], e0[2] + 1);
        let mut text = String::new();
        render(&mut text);
        let l = "backend=\"other\",op=\"copy\"";
        assert!(text.contains(&format!(
            "nfsgw_backend_duration_seconds_bucket{{{l},le=\"+Inf\"}} {n1}\n"
        )));
        assert!(text.contains(&format!(
            "nfsgw_backend_duration_seconds_count{{{l}}} {n1}\n"
        )));
        assert!(text.contains(&format!(
            "nfsgw_backend_errors_total{{{l},error=\"no_space\"}} {}\n",
            e1[2]
        )));
        assert!(text.contains(&format!(
            "nfsgw_backend_errors_total{{{l},error=\"lost\"}} {}\n",
            e1[7]
        )));
    }
}
