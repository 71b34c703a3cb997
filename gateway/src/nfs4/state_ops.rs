//! Stateful operations of NFSv4.1: opens, byte-range locks, stateids (RFC 8881
//! §18.2 CLOSE, §18.10-§18.12 LOCK/LOCKT/LOCKU, §18.16 OPEN, §18.18 OPEN_DOWNGRADE,
//! §18.38 FREE_STATEID, §18.48 TEST_STATEID) over `crate::state::opens`.
//! DELEGRETURN is in `deleg_ops.rs`.

mod args;
mod fattr;
mod open;
pub(super) use open::reclaim_allowed;
#[cfg(test)]
mod tests;

use super::status::*;
use super::{put_status, Compound, CurrentFh, Full, OpResult};
use crate::export::{admit, Caller};
use crate::fs::{FileKind, Node};
use crate::state::opens::{Denied, Kind, LockError, Locker, Range};
use crate::state::stateid::Stateid;
use crate::state::StateError;
use engine::xdr::{XdrReader, XdrWriter};

/// open_delegation_type4.
const OPEN_DELEGATE_NONE: u32 = 0;
const OPEN_DELEGATE_READ: u32 = 1;
const OPEN_DELEGATE_WRITE: u32 = 2;
const OPEN_DELEGATE_NONE_EXT: u32 = 3;
use nfs_wire::delstid::{OPEN_DELEGATE_READ_ATTRS_DELEG, OPEN_DELEGATE_WRITE_ATTRS_DELEG};
/// nfsace4 pieces of the delegation's permissions (§6.2.1).
const ACE4_ACCESS_ALLOWED_ACE_TYPE: u32 = 0;
const ACE4_READ_DATA: u32 = 1;
const ACE4_WRITE_DATA: u32 = 2;
/// limitby4 NFS_LIMIT_SIZE.
const NFS_LIMIT_SIZE: u32 = 1;

fn full<T>(_: T) -> Full {
    Full
}

/// The CURRENT special stateid (seqid 1, other 0) stands for the stateid the
/// COMPOUND last produced (§16.2.3.1.2); none yet → NFS4ERR_BAD_STATEID.
pub(super) fn resolve_stateid(c: &Compound, s: Stateid) -> Result<Stateid, Nfsstat4> {
    c.resolve_stateid(&s)
}

/// The caller as the export of `node` sees it (squashing, read-only).
pub(super) fn caller(c: &Compound, node: &Node) -> Result<Caller, Nfsstat4> {
    let export = c.ctx.exports.get(node.export).ok_or(NFS4ERR_STALE)?;
    admit(export, c.ctx.client.ip(), &c.ctx.cred).map_err(|_| NFS4ERR_ACCESS)
}

/// The current filehandle as a regular file for LOCK, LOCKT, LOCKU, CLOSE and
/// OPEN_DOWNGRADE: none → NOFILEHANDLE; a directory (also of the pseudo file
/// system) → ISDIR; a symlink → SYMLINK; other types → WRONG_TYPE (§18.10.4).
fn regular_file(c: &Compound) -> Result<Node, Nfsstat4> {
    let node = match &c.cfh {
        None => return Err(NFS4ERR_NOFILEHANDLE),
        Some(CurrentFh::Pseudo(_)) => return Err(NFS4ERR_ISDIR),
        Some(CurrentFh::File { node, .. }) => node,
    };
    let a = c.ctx.model.getattr(node).map_err(from_fs)?;
    match a.kind {
        FileKind::Reg => Ok(node.clone()),
        FileKind::Dir => Err(NFS4ERR_ISDIR),
        FileKind::Lnk => Err(NFS4ERR_SYMLINK),
        _ => Err(NFS4ERR_WRONG_TYPE),
    }
}

/// The fileid of the current filehandle for operations that only need to match a
/// stateid to it (CLOSE, OPEN_DOWNGRADE, LOCKU): no storage call.
fn cfh_fileid(c: &Compound) -> Result<u64, Nfsstat4> {
    match &c.cfh {
        None => Err(NFS4ERR_NOFILEHANDLE),
        Some(CurrentFh::Pseudo(_)) => Err(NFS4ERR_ISDIR),
        Some(CurrentFh::File { node, .. }) => Ok(node.fileid),
    }
}

/// Writes NFS4_OK and a stateid; sets the current stateid.
fn ok_stateid(c: &mut Compound, w: &mut XdrWriter, s: Stateid) -> OpResult {
    c.current_stateid = Some(s);
    NFS4_OK.put(w).map_err(full)?;
    s.encode(w).map_err(full)?;
    Ok(NFS4_OK)
}

fn stateid_result(c: &mut Compound, w: &mut XdrWriter, r: Result<Stateid, Nfsstat4>) -> OpResult {
    match r {
        Ok(s) => ok_stateid(c, w, s),
        Err(e) => put_status(w, e),
    }
}

/// The component an OPEN4args creates by name (createmode set, CLAIM_NULL: RFC 8881
/// §18.16.1), for the reactor's names (`fast_names::made`); `None` otherwise.
pub(super) fn creates_name<'a>(r: &mut XdrReader<'a>) -> Option<&'a [u8]> {
    match args::open(r).ok()? {
        args::OpenArgs {
            create: Some(_),
            claim: args::Claim::Null(name),
            ..
        } => Some(name),
        _ => None,
    }
}

pub(super) fn open(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let Ok(a) = args::open(r) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    match open::run(c, &a) {
        Ok(o) => encode_open(w, &o).map_err(full).map(|_| NFS4_OK),
        Err(e) => put_status(w, e),
    }
}

/// OPEN4res with OPEN4resok (§18.16.2).
fn encode_open(w: &mut XdrWriter, o: &open::Opened) -> engine::xdr::XdrResult<()> {
    NFS4_OK.put(w)?;
    o.stateid.encode(w)?;
    // change_info4: the directory's change attribute is read before and after,
    // not under one lock: not atomic.
    w.bool(false)?;
    w.u64(o.cinfo.0)?;
    w.u64(o.cinfo.1)?;
    w.u32(o.rflags)?;
    w.u32(2)?;
    w.u32(o.attrset[0])?;
    w.u32(o.attrset[1])?;
    match o.deleg {
        open::Deleg::None => w.u32(OPEN_DELEGATE_NONE)?,
        open::Deleg::NoneExt(why) => {
            w.u32(OPEN_DELEGATE_NONE_EXT)?;
            w.u32(why)?;
            if why == open::WND4_CONTENTION {
                w.bool(false)?; // ond_server_will_push_deleg
            }
        }
        open::Deleg::Read(s) | open::Deleg::ReadAttrs(s) => {
            // RFC 9754 §6: the attrs kind has the read delegation's body.
            let attrs = matches!(o.deleg, open::Deleg::ReadAttrs(_));
            w.u32(if attrs {
                OPEN_DELEGATE_READ_ATTRS_DELEG
            } else {
                OPEN_DELEGATE_READ
            })?;
            s.encode(w)?;
            w.bool(false)?; // recall
            put_ace(w, ACE4_READ_DATA)?;
        }
        open::Deleg::Write(s) | open::Deleg::WriteAttrs(s) => {
            let attrs = matches!(o.deleg, open::Deleg::WriteAttrs(_));
            w.u32(if attrs {
                OPEN_DELEGATE_WRITE_ATTRS_DELEG
            } else {
                OPEN_DELEGATE_WRITE
            })?;
            s.encode(w)?;
            w.bool(false)?;
            w.u32(NFS_LIMIT_SIZE)?;
            w.u64(u64::MAX)?;
            put_ace(w, ACE4_READ_DATA | ACE4_WRITE_DATA)?;
        }
    }
    Ok(())
}

/// An nfsace4 allowing `mask` to EVERYONE@.
fn put_ace(w: &mut XdrWriter, mask: u32) -> engine::xdr::XdrResult<()> {
    w.u32(ACE4_ACCESS_ALLOWED_ACE_TYPE)?;
    w.u32(0)?;
    w.u32(mask)?;
    w.string(b"EVERYONE@")
}

pub(super) fn open_downgrade(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let Ok((sid, access, deny)) = args::open_downgrade(r) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    let res = (|| {
        let fileid = cfh_fileid(c)?;
        let sid = resolve_stateid(c, sid)?;
        // §18.18.3: want bits are not used by OPEN_DOWNGRADE.
        let (access, _, deny) = open::split_share(access, deny)?;
        c.state
            .opens
            .downgrade(c.clientid, &sid, fileid, access, deny)
            .map_err(from_state)
    })();
    stateid_result(c, w, res)
}

pub(super) fn close(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let Ok(sid) = args::close(r) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    let res = (|| {
        let fileid = cfh_fileid(c)?;
        let sid = resolve_stateid(c, sid)?;
        c.state
            .opens
            .close(c.clientid, &sid, fileid)
            .map_err(from_state)
    })();
    // §18.2.4: the stateid returned is the invalid special stateid.
    stateid_result(c, w, res.map(|_| Stateid::INVALID))
}

/// Why LOCK or LOCKT failed, as the reply tells it: the conflicting lock
/// (LOCK4denied, §18.10.2) or another nfsstat4.
enum LockFail {
    Denied(Denied),
    Status(Nfsstat4),
}

impl From<Nfsstat4> for LockFail {
    fn from(s: Nfsstat4) -> LockFail {
        LockFail::Status(s)
    }
}

impl From<StateError> for LockFail {
    fn from(e: StateError) -> LockFail {
        LockFail::Status(from_state(e))
    }
}

impl From<LockError> for LockFail {
    fn from(e: LockError) -> LockFail {
        match e {
            LockError::Denied(d) => LockFail::Denied(d),
            LockError::Status(e) => e.into(),
        }
    }
}

/// LOCK4denied (§18.10.2).
fn encode_denied(w: &mut XdrWriter, d: &Denied) -> OpResult {
    NFS4ERR_DENIED.put(w).map_err(full)?;
    w.u64(d.offset).map_err(full)?;
    w.u64(d.length).map_err(full)?;
    w.u32(if d.write { 2 } else { 1 }).map_err(full)?;
    w.u64(d.clientid).map_err(full)?;
    w.opaque_var(&d.owner).map_err(full)?;
    Ok(NFS4ERR_DENIED)
}

/// Grace-period rules of LOCK (§8.4.2, §18.10.4): reclaims only in grace by
/// clients that may reclaim; new locks wait for the grace period to end.
fn lock_grace(c: &Compound, reclaim: bool) -> Result<(), Nfsstat4> {
    if reclaim {
        open::reclaim_allowed(c)
    } else if c.state.clients.in_grace() {
        Err(NFS4ERR_GRACE)
    } else {
        Ok(())
    }
}

pub(super) fn lock(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let Ok(a) = args::lock(r) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    let res = (|| -> Result<Stateid, LockFail> {
        let node = regular_file(c)?;
        let range = Range::new(a.offset, a.length)?;
        lock_grace(c, a.reclaim)?;
        let locker = match a.locker {
            args::LockerArg::New { open, owner } => Locker::New {
                open: resolve_stateid(c, open)?,
                owner: owner.to_vec(),
            },
            args::LockerArg::Existing(s) => Locker::Existing {
                lock: resolve_stateid(c, s)?,
            },
        };
        // Locks of courtesy clients give way (`state/expiry.rs`).
        Ok(c.state
            .lock(c.clientid, &locker, node.fileid, range, a.write)?)
    })();
    match res {
        Ok(s) => ok_stateid(c, w, s),
        Err(LockFail::Denied(d)) => encode_denied(w, &d),
        Err(LockFail::Status(s)) => put_status(w, s),
    }
}

pub(super) fn lockt(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let Ok((write, offset, length, owner)) = args::lockt(r) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    let res = (|| -> Result<(), LockFail> {
        let node = regular_file(c)?;
        let range = Range::new(offset, length)?;
        if c.state.clients.in_grace() {
            return Err(NFS4ERR_GRACE.into());
        }
        Ok(c.state
            .lockt(c.clientid, owner, node.fileid, range, write)?)
    })();
    match res {
        Ok(()) => put_status(w, NFS4_OK),
        Err(LockFail::Denied(d)) => encode_denied(w, &d),
        Err(LockFail::Status(s)) => put_status(w, s),
    }
}

pub(super) fn locku(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let Ok((sid, offset, length)) = args::locku(r) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    let res = (|| {
        let node = regular_file(c)?;
        let range = Range::new(offset, length)?;
        let sid = resolve_stateid(c, sid)?;
        c.state
            .opens
            .locku(c.clientid, &sid, node.fileid, range)
            .map_err(from_state)
    })();
    stateid_result(c, w, res)
}

pub(super) fn test_stateid(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let Ok(list) = args::test_stateid(r) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    NFS4_OK.put(w).map_err(full)?;
    w.u32(list.len() as u32).map_err(full)?;
    for s in &list {
        // §18.48.3: special stateids (CURRENT included) are BAD_STATEID here.
        // Delegation stateids belong to the delegations table (not asked yet).
        let st = match Kind::of(&s.other) {
            Some(Kind::Open | Kind::Lock) => of_state(c.state.opens.test_stateid(c.clientid, s)),
            Some(Kind::Delegation) => of_state(c.state.delegations.test_client(c.clientid, s)),
            _ => NFS4ERR_BAD_STATEID,
        };
        st.put(w).map_err(full)?;
    }
    Ok(NFS4_OK)
}

pub(super) fn free_stateid(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let Ok(sid) = Stateid::decode(r) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    let st = match resolve_stateid(c, sid) {
        Ok(s) if Kind::of(&s.other) == Some(Kind::Delegation) => {
            of_state(c.state.delegations.free_client(c.clientid, &s))
        }
        Ok(s) => of_state(c.state.opens.free_stateid(c.clientid, &s)),
        Err(e) => e,
    };
    put_status(w, st)
}
