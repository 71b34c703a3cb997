//! `nfsgw_worker_data_jobs_total`: READ, WRITE and COMMIT calls run by backend
//! workers (NFSv3 procedures, and NFSv4.1 COMPOUNDs holding one of those
//! operations). With `backend.io = "uring"` the reactors read file data themselves,
//! so this counter shows what still takes the worker hop.
//!
//! One process-wide counter (a relaxed atomic add per worker job that moves data):
//! every reactor's calls share the same workers, so there is nothing per reactor to
//! split.

use crate::nfs4::ops::{OP_COMMIT, OP_READ, OP_WRITE};
use engine::rpc::CallHeader;
use engine::xdr::XdrReader;
use std::sync::atomic::{AtomicU64, Ordering};

static DATA_JOBS: AtomicU64 = AtomicU64::new(0);

/// Most COMPOUND operations looked at for a data operation.
const MAX_OPS: u32 = 64;

/// Counts one data job run by a worker.
pub fn count() {
    DATA_JOBS.fetch_add(1, Ordering::Relaxed);
}

pub fn total() -> u64 {
    DATA_JOBS.load(Ordering::Relaxed)
}

/// Whether a call moves file data: NFSv3 READ (6), WRITE (7), COMMIT (21), or an
/// NFSv4.1 COMPOUND with READ, WRITE or COMMIT among its first operations (the walk
/// stops at the first operation it cannot skip).
pub fn is_data_job(h: &CallHeader, args: &[u8]) -> bool {
    if h.prog != crate::nfs3::NFS_PROGRAM {
        return false;
    }
    if h.vers == crate::nfs3::NFS_V3 {
        return matches!(h.proc_, 6 | 7 | 21);
    }
    if h.vers != crate::nfs4::NFS_V4 || h.proc_ != 1 {
        return false;
    }
    let mut r = XdrReader::new(args);
    let (Ok(_tag), Ok(_minor), Ok(n)) = (r.opaque_var(1024), r.u32(), r.u32()) else {
        return false;
    };
    for _ in 0..n.min(MAX_OPS) {
        let Ok(op) = r.u32() else { return false };
        if matches!(op, OP_READ | OP_WRITE | OP_COMMIT) {
            return true;
        }
        if crate::nfs4::skip::op_args(op, &mut r, &mut |_| Ok(())).is_err() {
            return false;
        }
    }
    false
}
