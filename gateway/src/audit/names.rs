//! What the audit log calls a protocol, a procedure and a refusal.

use crate::stats::counters::{MOUNT3_PROCS as MOUNT3, NFS3_PROCS as NFS3};
use engine::rpc::CallHeader;
use engine::xdr::XdrReader;
use nfs_wire::{MOUNT_PROGRAM, NFS_PROGRAM, NFS_V3, NFS_V4};

/// The protocol ("nfs3", "nfs4.1", "mount3") and procedure of a call. An NFSv4
/// COMPOUND's minor version is its arguments' second field (RFC 8881 §16.2.1).
pub(super) fn of(h: &CallHeader, args: &[u8]) -> (String, &'static str) {
    let name = |t: &[&'static str]| t.get(h.proc_ as usize).copied().unwrap_or("?");
    match (h.prog, h.vers) {
        (NFS_PROGRAM, NFS_V3) => ("nfs3".into(), name(&NFS3)),
        (NFS_PROGRAM, NFS_V4) => {
            let mut r = XdrReader::new(args);
            let minor = r.opaque_var(1024).and_then(|_| r.u32()).ok();
            let proto = minor.map_or("nfs4".into(), |m| format!("nfs4.{m}"));
            let proc_ = if h.proc_ == 1 { "COMPOUND" } else { "NULL" };
            (proto, proc_)
        }
        (MOUNT_PROGRAM, 3) => ("mount3".into(), name(&MOUNT3)),
        (p, v) => (format!("prog{p}.v{v}"), "?"),
    }
}

/// The refusal a call's status word means, if any. nfsstat3, nfsstat4 and mountstat3
/// give these the same numbers (RFC 1813 §2.6 and Appendix I, RFC 8881 §15.1).
pub(super) fn refusal(status: u32) -> Option<&'static str> {
    match status {
        1 => Some("PERM"),
        13 => Some("ACCES"),
        30 => Some("ROFS"),
        _ => None,
    }
}
