//! `nfsgw_nfs_errors_total{prog,proc,status}`: answers whose status was not OK, by
//! NFSv3 procedure and nfsstat3 (RFC 1813 §2.6) or by the NFSv4.1 operation a
//! COMPOUND failed at and its nfsstat4 (RFC 8881 §15.1, §16.2.3: a COMPOUND stops at
//! its first failing operation, whose status is the COMPOUND's).
//!
//! Where the status is known: every NFSv3 status goes through `nfs3::status::nfsstat3`,
//! every failed COMPOUND through `nfs4::compound`; each notes a non-OK status on its
//! thread ([`note_v3`], [`note_v4`]) as the reply is encoded, and the worker that ran
//! the call counts the note once the reply is complete ([`answered`]). No reply byte is
//! read back. Only workers answer errors (the reactor's cache and io_uring paths answer
//! OK or hand the call to a worker), so an OK answer costs the worker one thread-local
//! take and the reactor nothing.
//!
//! Sharing: process-wide fixed tables of relaxed atomics, written with `fetch_add` by
//! the workers (several threads, errors only) and read by the stats endpoint. Bounded:
//! 22 procedures × 28 nfsstat3 values and 60 operation rows × the nfsstat4 table.

use crate::nfs4::status::Nfsstat4;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Every nfsstat3 error RFC 1813 §2.6 defines, ascending, with its name.
pub const NFS3_STATUS: [(u32, &str); 28] = [
    (1, "NFS3ERR_PERM"),
    (2, "NFS3ERR_NOENT"),
    (5, "NFS3ERR_IO"),
    (6, "NFS3ERR_NXIO"),
    (13, "NFS3ERR_ACCES"),
    (17, "NFS3ERR_EXIST"),
    (18, "NFS3ERR_XDEV"),
    (19, "NFS3ERR_NODEV"),
    (20, "NFS3ERR_NOTDIR"),
    (21, "NFS3ERR_ISDIR"),
    (22, "NFS3ERR_INVAL"),
    (27, "NFS3ERR_FBIG"),
    (28, "NFS3ERR_NOSPC"),
    (30, "NFS3ERR_ROFS"),
    (31, "NFS3ERR_MLINK"),
    (63, "NFS3ERR_NAMETOOLONG"),
    (66, "NFS3ERR_NOTEMPTY"),
    (69, "NFS3ERR_DQUOT"),
    (70, "NFS3ERR_STALE"),
    (71, "NFS3ERR_REMOTE"),
    (10001, "NFS3ERR_BADHANDLE"),
    (10002, "NFS3ERR_NOT_SYNC"),
    (10003, "NFS3ERR_BAD_COOKIE"),
    (10004, "NFS3ERR_NOTSUPP"),
    (10005, "NFS3ERR_TOOSMALL"),
    (10006, "NFS3ERR_SERVERFAULT"),
    (10007, "NFS3ERR_BADTYPE"),
    (10008, "NFS3ERR_JUKEBOX"),
];

/// Rows of the NFSv4.1 table: 0 is the COMPOUND itself (a failure before any
/// operation: NFS4ERR_MINOR_VERS_MISMATCH), 3..=58 the operations of RFC 8881
/// §16.2.1, the last one OP_ILLEGAL (and any number outside them).
pub const V4_ROWS: usize = 60;
const V4_ILLEGAL: usize = V4_ROWS - 1;

/// The `proc` label of NFSv4.1 row `i`.
pub fn v4_row_name(i: usize) -> &'static str {
    use nfs_wire::nfs4::*;
    const NAMES: [(u32, &str); 56] = [
        (OP_ACCESS, "ACCESS"),
        (OP_CLOSE, "CLOSE"),
        (OP_COMMIT, "COMMIT"),
        (OP_CREATE, "CREATE"),
        (OP_DELEGPURGE, "DELEGPURGE"),
        (OP_DELEGRETURN, "DELEGRETURN"),
        (OP_GETATTR, "GETATTR"),
        (OP_GETFH, "GETFH"),
        (OP_LINK, "LINK"),
        (OP_LOCK, "LOCK"),
        (OP_LOCKT, "LOCKT"),
        (OP_LOCKU, "LOCKU"),
        (OP_LOOKUP, "LOOKUP"),
        (OP_LOOKUPP, "LOOKUPP"),
        (OP_NVERIFY, "NVERIFY"),
        (OP_OPEN, "OPEN"),
        (OP_OPENATTR, "OPENATTR"),
        (OP_OPEN_CONFIRM, "OPEN_CONFIRM"),
        (OP_OPEN_DOWNGRADE, "OPEN_DOWNGRADE"),
        (OP_PUTFH, "PUTFH"),
        (OP_PUTPUBFH, "PUTPUBFH"),
        (OP_PUTROOTFH, "PUTROOTFH"),
        (OP_READ, "READ"),
        (OP_READDIR, "READDIR"),
        (OP_READLINK, "READLINK"),
        (OP_REMOVE, "REMOVE"),
        (OP_RENAME, "RENAME"),
        (OP_RENEW, "RENEW"),
        (OP_RESTOREFH, "RESTOREFH"),
        (OP_SAVEFH, "SAVEFH"),
        (OP_SECINFO, "SECINFO"),
        (OP_SETATTR, "SETATTR"),
        (OP_SETCLIENTID, "SETCLIENTID"),
        (OP_SETCLIENTID_CONFIRM, "SETCLIENTID_CONFIRM"),
        (OP_VERIFY, "VERIFY"),
        (OP_WRITE, "WRITE"),
        (OP_RELEASE_LOCKOWNER, "RELEASE_LOCKOWNER"),
        (OP_BACKCHANNEL_CTL, "BACKCHANNEL_CTL"),
        (OP_BIND_CONN_TO_SESSION, "BIND_CONN_TO_SESSION"),
        (OP_EXCHANGE_ID, "EXCHANGE_ID"),
        (OP_CREATE_SESSION, "CREATE_SESSION"),
        (OP_DESTROY_SESSION, "DESTROY_SESSION"),
        (OP_FREE_STATEID, "FREE_STATEID"),
        (OP_GET_DIR_DELEGATION, "GET_DIR_DELEGATION"),
        (OP_GETDEVICEINFO, "GETDEVICEINFO"),
        (OP_GETDEVICELIST, "GETDEVICELIST"),
        (OP_LAYOUTCOMMIT, "LAYOUTCOMMIT"),
        (OP_LAYOUTGET, "LAYOUTGET"),
        (OP_LAYOUTRETURN, "LAYOUTRETURN"),
        (OP_SECINFO_NO_NAME, "SECINFO_NO_NAME"),
        (OP_SEQUENCE, "SEQUENCE"),
        (OP_SET_SSV, "SET_SSV"),
        (OP_TEST_STATEID, "TEST_STATEID"),
        (OP_WANT_DELEGATION, "WANT_DELEGATION"),
        (OP_DESTROY_CLIENTID, "DESTROY_CLIENTID"),
        (OP_RECLAIM_COMPLETE, "RECLAIM_COMPLETE"),
    ];
    match i {
        0 => "COMPOUND",
        V4_ILLEGAL => "ILLEGAL",
        _ => NAMES
            .iter()
            .find(|(op, _)| *op as usize == i)
            .map_or("ILLEGAL", |(_, n)| n),
    }
}

/// The row of operation number `op` (0: the COMPOUND itself).
fn v4_row(op: u32) -> usize {
    match op {
        0 => 0,
        3..=58 => op as usize,
        _ => V4_ILLEGAL,
    }
}

const V4_STATUS: usize = Nfsstat4::ALL.len();
const NFS3_PROCS: usize = super::counters::NFS3_PROCS.len();

/// A failed answer as its front end noted it: the status's row in its table, and for
/// NFSv4.1 the row of the operation it failed at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failed {
    V3 { status: u8 },
    V4 { op: u8, status: u8 },
}

thread_local! {
    /// The failure the call being encoded on this thread noted (the last one wins:
    /// the status an answer ends with is the one written last).
    static NOTED: Cell<Option<Failed>> = const { Cell::new(None) };
}

static V3: [[AtomicU64; NFS3_STATUS.len()]; NFS3_PROCS] =
    [const { [const { AtomicU64::new(0) }; NFS3_STATUS.len()] }; NFS3_PROCS];
static V4: [[AtomicU64; V4_STATUS]; V4_ROWS] =
    [const { [const { AtomicU64::new(0) }; V4_STATUS] }; V4_ROWS];

/// Notes an nfsstat3 other than NFS3_OK written into this thread's reply.
#[cold]
pub fn note_v3(code: u32) {
    // A number outside RFC 1813 §2.6 is not noted (the front end writes none).
    if let Ok(i) = NFS3_STATUS.binary_search_by_key(&code, |(c, _)| *c) {
        NOTED.with(|n| n.set(Some(Failed::V3 { status: i as u8 })));
    }
}

/// Notes that the COMPOUND encoded on this thread failed at operation `op` (0: before
/// any operation) with `st`; NFS4_OK is not a failure.
#[cold]
pub fn note_v4(op: u32, st: Nfsstat4) {
    let all = Nfsstat4::ALL;
    if st.is_ok() {
        return;
    }
    if let Ok(i) = all.binary_search_by_key(&st.as_u32(), |(s, _)| s.as_u32()) {
        NOTED.with(|n| {
            n.set(Some(Failed::V4 {
                op: v4_row(op) as u8,
                status: i as u8,
            }))
        });
    }
}

/// Takes (and clears) this thread's note.
#[inline]
pub fn take() -> Option<Failed> {
    NOTED.with(|n| n.take())
}

/// The worker's hook once a call's reply is complete: counts what the front end
/// noted when the procedure's results were sent (`results`: not an RPC-level
/// rejection, which carries no NFS status). NFSv3 `proc_` is the call's procedure.
#[inline]
pub fn answered(proc_: u32, results: bool) {
    if let Some(f) = take() {
        if results {
            count(proc_, f);
        }
    }
}

#[cold]
fn count(proc_: u32, f: Failed) {
    let cell = match f {
        Failed::V3 { status } => V3
            .get(proc_ as usize)
            .and_then(|row| row.get(status as usize)),
        Failed::V4 { op, status } => V4.get(op as usize).and_then(|row| row.get(status as usize)),
    };
    if let Some(c) = cell {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// Every non-zero series: (prog label, proc label, status name, count).
pub fn nonzero() -> Vec<(&'static str, &'static str, &'static str, u64)> {
    let mut out = Vec::new();
    for (p, row) in V3.iter().enumerate() {
        for (s, c) in row.iter().enumerate() {
            let n = c.load(Ordering::Relaxed);
            if n > 0 {
                out.push(("nfs3", super::counters::NFS3_PROCS[p], NFS3_STATUS[s].1, n));
            }
        }
    }
    for (op, row) in V4.iter().enumerate() {
        for (s, c) in row.iter().enumerate() {
            let n = c.load(Ordering::Relaxed);
            if n > 0 {
                out.push(("nfs4", v4_row_name(op), Nfsstat4::ALL[s].1, n));
            }
        }
    }
    out
}

/// Renders `nfsgw_nfs_errors_total` (only series that counted something: the
/// tables hold thousands of combinations, a gateway sees a handful).
pub fn render(out: &mut String) {
    use std::fmt::Write;
    let _ = writeln!(
        out,
        "# HELP nfsgw_nfs_errors_total NFS answers whose status was not OK, by NFSv3 procedure or the NFSv4.1 operation a COMPOUND failed at, and status (RFC 1813 / RFC 8881 names)."
    );
    let _ = writeln!(out, "# TYPE nfsgw_nfs_errors_total counter");
    for (prog, proc_, status, n) in nonzero() {
        let _ = writeln!(
            out,
            "nfsgw_nfs_errors_total{{prog=\"{prog}\",proc=\"{proc_}\",status=\"{status}\"}} {n}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs4::status::{NFS4ERR_DELAY, NFS4ERR_NOENT, NFS4_OK};

    fn get(prog: &str, proc_: &str, status: &str) -> u64 {
        nonzero()
            .into_iter()
            .find(|s| (s.0, s.1, s.2) == (prog, proc_, status))
            .map_or(0, |s| s.3)
    }

    #[test]
    fn the_nfs3_table_is_rfc_1813s() {
        // Ascending (binary search) and every name the file model's table writes.
        assert!(NFS3_STATUS.windows(2).all(|w| w[0].0 < w[1].0));
        use crate::fs::Status;
        for s in [Status::NoEnt, Status::Jukebox, Status::Stale, Status::Acces] {
            let code = crate::nfs3::status::nfsstat3(s);
            assert!(NFS3_STATUS.iter().any(|(c, _)| *c == code), "{s:?}");
        }
        assert_eq!(V4_STATUS, Nfsstat4::ALL.len());
    }

    #[test]
    fn notes_are_counted_once_by_procedure_and_status() {
        let before = get("nfs3", "LOOKUP", "NFS3ERR_NOENT");
        let jb = get("nfs3", "WRITE", "NFS3ERR_JUKEBOX");
        // nfsstat3 of an error notes it; the worker counts the note with its procedure.
        let _ = crate::nfs3::status::nfsstat3(crate::fs::Status::NoEnt);
        answered(3, true);
        assert_eq!(get("nfs3", "LOOKUP", "NFS3ERR_NOENT"), before + 1);
        // Taken: a second answer without a note counts nothing.
        answered(3, true);
        assert_eq!(get("nfs3", "LOOKUP", "NFS3ERR_NOENT"), before + 1);
        // OK is not noted.
        assert_eq!(crate::nfs3::status::nfsstat3(crate::fs::Status::Ok), 0);
        assert_eq!(take(), None);
        // A rejected call (GARBAGE_ARGS, SYSTEM_ERR) drops its note.
        note_v3(10008);
        answered(7, false);
        assert_eq!(get("nfs3", "WRITE", "NFS3ERR_JUKEBOX"), jb);
        note_v3(10008);
        answered(7, true);
        assert_eq!(get("nfs3", "WRITE", "NFS3ERR_JUKEBOX"), jb + 1);
        // A hostile procedure number or undefined status is never counted.
        note_v3(12345);
        assert_eq!(take(), None);
        note_v3(2);
        answered(u32::MAX, true);
        assert_eq!(take(), None);
    }

    #[test]
    fn compounds_count_the_operation_they_failed_at() {
        use nfs_wire::nfs4::{OP_ILLEGAL, OP_LOOKUP, OP_SEQUENCE};
        let lookup = get("nfs4", "LOOKUP", "NFS4ERR_NOENT");
        let seq = get("nfs4", "SEQUENCE", "NFS4ERR_DELAY");
        let ill = get("nfs4", "ILLEGAL", "NFS4ERR_NOENT");
        note_v4(OP_LOOKUP, NFS4ERR_NOENT);
        answered(1, true);
        note_v4(OP_SEQUENCE, NFS4ERR_DELAY);
        answered(1, true);
        note_v4(OP_SEQUENCE, NFS4_OK);
        assert_eq!(take(), None);
        note_v4(OP_ILLEGAL, NFS4ERR_NOENT);
        answered(1, true);
        note_v4(u32::MAX, NFS4ERR_NOENT);
        answered(1, true);
        assert_eq!(get("nfs4", "LOOKUP", "NFS4ERR_NOENT"), lookup + 1);
        assert_eq!(get("nfs4", "SEQUENCE", "NFS4ERR_DELAY"), seq + 1);
        assert_eq!(get("nfs4", "ILLEGAL", "NFS4ERR_NOENT"), ill + 2);
        let mut text = String::new();
        render(&mut text);
        assert!(text.contains(
            "nfsgw_nfs_errors_total{prog=\"nfs4\",proc=\"SEQUENCE\",status=\"NFS4ERR_DELAY\"} "
        ));
    }

    #[test]
    fn every_operation_row_has_its_rfc_name() {
        assert_eq!(v4_row_name(0), "COMPOUND");
        assert_eq!(v4_row_name(3), "ACCESS");
        assert_eq!(v4_row_name(53), "SEQUENCE");
        assert_eq!(v4_row_name(58), "RECLAIM_COMPLETE");
        assert_eq!(v4_row_name(V4_ILLEGAL), "ILLEGAL");
        for i in 3..=58 {
            assert_ne!(v4_row_name(i), "ILLEGAL", "row {i}");
        }
    }
}
