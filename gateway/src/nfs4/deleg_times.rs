//! SETATTR of the delegated times (RFC 9754 §6.1), time_deleg_access and
//! time_deleg_modify, in a minor-version-2 COMPOUND: the holder of an
//! `*_ATTRS_DELEG` delegation hands the server the times it kept while it was the
//! authority for them (before its DELEGRETURN, typically in the same COMPOUND).
//! Only under that delegation's stateid: anyone else → NFS4ERR_BAD_STATEID, the
//! modify time under a read delegation → NFS4ERR_OPENMODE
//! (`state::delegations::times::check_times`). The times are vetted against those
//! of the grant (earlier: ignored; in the future: clamped to now) and stored in
//! the file as any client-set time is. In a 4.1 COMPOUND the attributes are unknown
//! (NFS4ERR_ATTRNOTSUPP, `attrs::get_new_attrs_in`).

use super::attrs::NewAttrs;
use super::status::*;
use super::Compound;
use crate::fs::{NfsTime, SetAttr, SetTime};
use crate::state::delegations::times::vet;
use crate::state::stateid::Stateid;

/// The vetted delegated times of `new` as the access and modify times to set
/// (`DontChange` for one not given or ignored); `None` when neither was given. Run
/// before anything else of the SETATTR, so a non-holder is refused without a recall.
pub(super) fn vetted(
    c: &Compound,
    sid: &Stateid,
    fileid: u64,
    new: &NewAttrs,
) -> Result<Option<(SetTime, SetTime)>, Nfsstat4> {
    if new.deleg_atime.is_none() && new.deleg_mtime.is_none() {
        return Ok(None);
    }
    let sid = c.resolve_stateid(sid)?;
    let modify = new.deleg_mtime.is_some();
    let grant = c
        .state
        .delegations
        .check_times(c.clientid, &sid, fileid, modify)
        .map_err(from_state)?;
    let now = NfsTime::now();
    let pick = |t: Option<NfsTime>, orig| match t.and_then(|t| vet(t, orig, now)) {
        Some(t) => SetTime::Client(t),
        None => SetTime::DontChange,
    };
    Ok(Some((
        pick(new.deleg_atime, grant.atime),
        pick(new.deleg_mtime, grant.mtime),
    )))
}

/// Puts the vetted times into `set` (they take the place of time_access_set /
/// time_modify_set given beside them).
pub(super) fn merge(set: &mut SetAttr, (atime, mtime): (SetTime, SetTime)) {
    if atime != SetTime::DontChange {
        set.atime = atime;
    }
    if mtime != SetTime::DontChange {
        set.mtime = mtime;
    }
}
