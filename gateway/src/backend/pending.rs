//! Calls handed to the backend workers that may still change the namespace or force
//! the log (`changes`: NFSv3 CREATE, MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR, RENAME,
//! LINK, SETATTR, COMMIT, a WRITE that is not UNSTABLE; an NFSv4 COMPOUND with such an
//! operation): queued on the job ring, or running on a worker and not yet past their
//! flush. READs, READDIRs, GETATTRs (revalidations too) and unstable WRITEs are never
//! counted: a leader must not yield for a call that will not join its force. The
//! reactors count a call in when they push its job (`server::reactor`, `Job::changes`);
//! the worker counts it out when its change is on stable storage (`settled`, from
//! `fs::flush`) or, at the latest, when `run_job` ends (`Finished`).
//!
//! A log force's leader reads it (`fs::dirsync`, `DirSync::sync_gathered`): when other
//! calls are in flight — a burst the reactor read, whose workers are runnable but
//! have not run yet — it yields before starting the force, so their namespace changes
//! complete first and share it. With nothing else in flight (queue depth 1) it does not
//! wait at all.

use crate::front::Plan;
use crate::nfs4::ops::{
    OP_COMMIT, OP_CREATE, OP_LINK, OP_OPEN, OP_REMOVE, OP_RENAME, OP_SETATTR, OP_WRITE,
};
use engine::rpc::CallHeader;
use engine::xdr::XdrReader;
use nfs_wire::nfs3::*;
use nfs_wire::{NFS_PROGRAM, NFS_V3, NFS_V4};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread runs a job that is still counted in (from `Finished::begin` until
    /// `settled` or the job's end); false on every other thread.
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

/// A job was pushed onto the workers' ring.
#[inline]
pub fn queued(n: usize) {
    IN_FLIGHT.fetch_add(n, Ordering::Relaxed);
}

/// The raw count (tests: it is back to 0 once every call was answered).
pub fn count() -> usize {
    IN_FLIGHT.load(Ordering::Relaxed)
}

/// Calls in flight at the workers, the caller's own included. (A job popped by a
/// worker that was pushed by no reactor — a test's own ring — would make the count
/// wrap: read as none.)
#[inline]
pub fn in_flight() -> usize {
    let n = IN_FLIGHT.load(Ordering::Relaxed);
    if n > usize::MAX / 2 {
        0
    } else {
        n
    }
}

/// Calls in flight at the workers besides the caller's own (once settled, it is no
/// longer counted).
#[inline]
pub fn in_flight_others() -> usize {
    let mine = usize::from(COUNTED.with(Cell::get));
    in_flight().saturating_sub(mine)
}

/// The calling worker's change is on stable storage: its call is counted out now, so
/// other leaders do not wait for it while it encodes its reply. Off a worker's job
/// (tests, start-up, other threads) nothing was counted in and nothing happens.
#[inline]
pub fn settled() {
    if COUNTED.with(|c| c.replace(false)) {
        count_out();
    }
}

fn count_out() {
    IN_FLIGHT.fetch_sub(1, Ordering::Relaxed);
}

/// Counts one job out when dropped (every way out of `run_job`, a panic included),
/// unless `settled` already did.
pub struct Finished;

impl Finished {
    /// The calling worker starts a job; `counted`: a reactor counted it in
    /// (`Job::changes`).
    #[inline]
    pub fn begin(counted: bool) -> Finished {
        COUNTED.with(|c| c.set(counted));
        Finished
    }
}

/// Counts out a job whose push failed (it stays with the reactor).
#[inline]
pub fn unqueued() {
    count_out();
}

impl Drop for Finished {
    fn drop(&mut self) {
        if COUNTED.with(|c| c.replace(false)) {
            count_out();
        }
    }
}

/// Whether a call may change a name or force the log, so that a leader's force should
/// wait for it (module comment). `args`: the procedure's arguments; `plan`: an NFSv4
/// COMPOUND's (`nfs4::plan`). Hostile bytes: what does not decode is a call the worker
/// rejects (NFSv3, GARBAGE_ARGS) or one counted in to be safe (an NFSv4 operation).
pub(crate) fn changes(h: &CallHeader, args: &[u8], plan: Option<&Plan>) -> bool {
    if h.prog != NFS_PROGRAM {
        return false;
    }
    match (h.vers, plan) {
        (NFS_V3, _) => v3_changes(h.proc_, args),
        (NFS_V4, Some(plan)) => v4_changes(args, plan),
        // A COMPOUND without a plan (none is made for it): counted.
        (NFS_V4, None) => h.proc_ != 0,
        _ => false,
    }
}

/// RFC 1813 §3.3: the procedures that change a name or an attribute, or make data
/// stable (a WRITE whose `stable` is not UNSTABLE, §3.3.7; COMMIT, §3.3.21).
fn v3_changes(proc_: u32, args: &[u8]) -> bool {
    match proc_ {
        NFSPROC3_CREATE | NFSPROC3_MKDIR | NFSPROC3_SYMLINK | NFSPROC3_MKNOD | NFSPROC3_REMOVE
        | NFSPROC3_RMDIR | NFSPROC3_RENAME | NFSPROC3_LINK | NFSPROC3_SETATTR | NFSPROC3_COMMIT => {
            true
        }
        NFSPROC3_WRITE => v3_write_stable(args).is_some_and(|s| s != UNSTABLE),
        _ => false,
    }
}

/// WRITE3args (RFC 1813 §3.3.7): `file`, `offset`, `count`, then `stable`.
fn v3_write_stable(args: &[u8]) -> Option<u32> {
    let mut r = XdrReader::new(args);
    r.opaque_var(NFS3_FHSIZE).ok()?;
    r.u64().ok()?;
    r.u32().ok()?;
    r.u32().ok()
}

/// A COMPOUND (RFC 8881 §16.2) with an OPEN that may create, a CREATE, REMOVE, RENAME,
/// LINK, SETATTR, COMMIT or a WRITE that is not UNSTABLE4. The plan keeps the first
/// `plan::OPS_MAX` operations: a longer COMPOUND is counted without looking.
fn v4_changes(args: &[u8], plan: &Plan) -> bool {
    if plan.ops().len() != plan.nops as usize {
        return true;
    }
    plan.ops().any(|op| {
        let at = args.get(op.at as usize..).unwrap_or_default();
        match op.code {
            OP_CREATE | OP_REMOVE | OP_RENAME | OP_LINK | OP_SETATTR | OP_COMMIT => true,
            OP_OPEN => v4_open_creates(at).unwrap_or(true),
            OP_WRITE => v4_write_stable(at).is_none_or(|s| s != UNSTABLE),
            _ => false,
        }
    })
}

/// OPEN4args (RFC 8881 §18.16.1): seqid, share_access, share_deny, open_owner4
/// (clientid, owner<NFS4_OPAQUE_LIMIT>), then openflag4's opentype (OPEN4_CREATE = 1).
fn v4_open_creates(args: &[u8]) -> Option<bool> {
    let mut r = XdrReader::new(args);
    r.skip(12).ok()?;
    r.u64().ok()?;
    r.opaque_var(1024).ok()?;
    Some(r.u32().ok()? == 1)
}

/// WRITE4args (RFC 8881 §18.32.1): stateid4 (16 bytes), offset, then stable_how4
/// (UNSTABLE4 = 0, as NFSv3's UNSTABLE).
fn v4_write_stable(args: &[u8]) -> Option<u32> {
    let mut r = XdrReader::new(args);
    r.skip(16).ok()?;
    r.u64().ok()?;
    r.u32().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::rpc::Cred;
    use nfs_wire::v3more;
    use nfs_wire::v4call::{Claim, How, Ops};

    fn header(vers: u32, proc_: u32) -> CallHeader {
        CallHeader {
            xid: 1,
            prog: NFS_PROGRAM,
            vers,
            proc_,
            cred: Cred::None,
        }
    }

    fn v3(proc_: u32, args: &[u8]) -> bool {
        changes(&header(NFS_V3, proc_), args, None)
    }

    fn v4(ops: Ops) -> bool {
        let args = ops.args();
        changes(&header(NFS_V4, 1), &args, Some(&Plan::of(&args)))
    }

    /// The calls that can force the log or change a name are counted; reads,
    /// listings, attribute fetches and unstable writes never make a leader yield.
    #[test]
    fn only_calls_that_may_force_or_change_a_name_are_counted() {
        let fh = [7u8; 32];
        let dirop = v3more::dirop_args(&fh, b"a");
        for p in [
            NFSPROC3_CREATE,
            NFSPROC3_MKDIR,
            NFSPROC3_SYMLINK,
            NFSPROC3_MKNOD,
            NFSPROC3_REMOVE,
            NFSPROC3_RMDIR,
            NFSPROC3_RENAME,
            NFSPROC3_LINK,
            NFSPROC3_SETATTR,
            NFSPROC3_COMMIT,
        ] {
            assert!(v3(p, &dirop), "v3 proc {p}");
        }
        for p in [
            NFSPROC3_NULL,
            NFSPROC3_GETATTR,
            NFSPROC3_LOOKUP,
            NFSPROC3_ACCESS,
            NFSPROC3_READ,
            NFSPROC3_READDIR,
            NFSPROC3_READDIRPLUS,
            NFSPROC3_FSSTAT,
        ] {
            assert!(!v3(p, &dirop), "v3 proc {p}");
        }
        let write = |stable| v3more::write_args(&fh, 0, stable, b"data");
        assert!(!v3(NFSPROC3_WRITE, &write(UNSTABLE)));
        assert!(v3(NFSPROC3_WRITE, &write(DATA_SYNC)));
        assert!(v3(NFSPROC3_WRITE, &write(FILE_SYNC)));
        assert!(
            !v3(NFSPROC3_WRITE, &[0, 0]),
            "garbage: rejected, never waited for"
        );
        let other = CallHeader {
            prog: 100005,
            ..header(3, NFSPROC3_CREATE)
        };
        assert!(!changes(&other, &dirop, None), "MOUNT");

        let seq = || Ops::new().sequence([1; 16], 1).putfh(&fh);
        let sid = [0u8; 16];
        assert!(!v4(seq().getattr(&[1])));
        assert!(!v4(seq().read(&sid, 0, 4096)));
        assert!(!v4(seq().lookup(b"a").getfh().getattr(&[1])));
        assert!(!v4(seq().write_stable(&sid, 0, 0, b"x")), "UNSTABLE4");
        assert!(v4(seq().write_stable(&sid, 0, 2, b"x")), "FILE_SYNC4");
        assert!(v4(seq().commit(0, 0)));
        assert!(v4(seq().remove(b"a")));
        assert!(v4(seq().rename(b"a", b"b")));
        assert!(v4(seq().create_obj(b"d", None)));
        assert!(v4(seq().setattr(&sid, &[], &[])));
        let open = |how| {
            let (a, d) = (1, 0);
            seq().open(1, b"owner", a, d, how, Claim::Null(b"f"))
        };
        assert!(v4(open(How::Unchecked)), "OPEN4_CREATE");
        assert!(!v4(open(How::NoCreate)), "OPEN4_NOCREATE");
        // Longer than the plan keeps: counted without looking.
        assert!(v4(seq().getattr(&[1]).getfh().getattr(&[1]).getfh()));
    }

    /// `settled` counts a job out once; `Finished` then does not again, and an
    /// uncounted job is never counted out. (The count itself is process-wide, shared
    /// with other tests' servers: `tests/pending_count.rs` checks it end to end.)
    #[test]
    fn a_job_is_counted_out_once_and_only_if_counted_in() {
        let counted = || COUNTED.with(Cell::get);
        queued(1);
        {
            let _f = Finished::begin(true);
            assert!(counted());
            settled();
            assert!(!counted(), "counted out");
        }
        let _f = Finished::begin(false);
        assert!(!counted());
    }
}
