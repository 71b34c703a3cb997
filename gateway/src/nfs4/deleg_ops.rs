//! DELEGRETURN (RFC 8881 §18.6) over `crate::state::delegations`.

use super::status::*;
use super::{put_status, Compound, CurrentFh, OpResult};
use crate::state::delegations::AttrVerdict;
use crate::state::stateid::Stateid;
use engine::xdr::{XdrReader, XdrWriter};

/// DELEGRETURN4args: the delegation stateid. The current filehandle names the file
/// (NOFILEHANDLE without one); the special "current" stateid stands for the
/// COMPOUND's current stateid (§16.2.3.1.2). Returning frees the delegation and
/// completes a recall in progress (§10.2); unknown → BAD_STATEID, revoked →
/// DELEG_REVOKED.
pub(super) fn delegreturn(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let Ok(mut sid) = Stateid::decode(r) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    let fileid = match &c.cfh {
        None => return put_status(w, NFS4ERR_NOFILEHANDLE),
        Some(CurrentFh::Pseudo(_)) => return put_status(w, NFS4ERR_BAD_STATEID),
        Some(CurrentFh::File { node, .. }) => node.fileid,
    };
    if sid == Stateid::CURRENT {
        match c.current_stateid {
            Some(s) => sid = s,
            None => return put_status(w, NFS4ERR_BAD_STATEID),
        }
    }
    let st = c.state.delegations.delegreturn(c.clientid, &sid, fileid);
    put_status(w, of_state(st))
}

/// Attributes a write delegation's holder changes by writing (RFC 8881 §10.4.3: the
/// server cannot answer them truthfully for another client while the holder may
/// have cached writes): asking for any of them asks the holder first (CB_GETATTR).
const WRITTEN_ATTRS: super::attrs::Bitmap = super::attrs::Bitmap::of(&[
    super::attrs::CHANGE,
    super::attrs::SIZE,
    super::attrs::SPACE_USED,
    super::attrs::TIME_ACCESS,
    super::attrs::TIME_METADATA,
    super::attrs::TIME_MODIFY,
    super::attrs::TIME_DELEG_ACCESS,
    super::attrs::TIME_DELEG_MODIFY,
]);

/// A READ of `fileid` (or a GETATTR asking for `WRITTEN_ATTRS`) by this COMPOUND's
/// client: another client's write delegation on it is recalled first and the caller
/// gets NFS4ERR_DELAY until it is returned or revoked (RFC 8881 §10.4.3, §10.2). One
/// atomic load while no write delegation is out.
pub(super) fn recall_for_read(c: &Compound, fileid: u64) -> Result<(), Nfsstat4> {
    let d = &c.state.delegations;
    if d.break_conflicts(fileid, Some(c.clientid), crate::state::Conflict::Read) {
        Ok(())
    } else {
        Err(NFS4ERR_DELAY)
    }
}

/// A GETATTR asking for `want` of `node` by this COMPOUND's client, under another
/// client's write delegation: CB_GETATTR instead of a recall (RFC 8881 §10.4.3,
/// `state::delegations::settle_attrs`). `Some(size)`: the holder modified the file,
/// answer its size (the times and change the file model now has were just moved);
/// NFS4ERR_DELAY while the holder's answer or a recall is awaited. One atomic load
/// while no write delegation is out.
pub(super) fn attrs_for_getattr(
    c: &Compound,
    node: &crate::fs::Node,
    want: &super::attrs::Bitmap,
) -> Result<Option<u64>, Nfsstat4> {
    let d = &c.state.delegations;
    if !d.any_write() || want.and(&WRITTEN_ATTRS).is_empty() {
        return Ok(None);
    }
    let wait = crate::state::delegations::CB_GETATTR_WAIT;
    match d.settle_attrs(c.ctx.model, node, Some(c.clientid), wait) {
        AttrVerdict::Go => Ok(None),
        AttrVerdict::Wait => Err(NFS4ERR_DELAY),
        AttrVerdict::Present { size } => Ok(Some(size)),
    }
}
