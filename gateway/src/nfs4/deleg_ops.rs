//! DELEGRETURN (RFC 8881 §18.6) over `crate::state::delegations`.

use super::status::*;
use super::{put_status, Compound, CurrentFh, OpResult};
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
