//! Delegated timestamps (RFC 9754 §6): a delegation granted to an OPEN that set
//! OPEN4_SHARE_ACCESS_WANT_DELEG_TIMESTAMPS may be of the `*_ATTRS_DELEG` kind; its
//! holder is then the authority for the file's access time (both kinds) and modify
//! time (the write kind), and hands them to the server with SETATTR of
//! time_deleg_access / time_deleg_modify under the delegation stateid, before its
//! DELEGRETURN (in the same COMPOUND, as the Linux client does) or whenever it likes.
//!
//! The delegation keeps the file's times at the grant: RFC 9754's "original time". A
//! time presented before it is ignored, one in the future is clamped to the server's
//! now (the RFC lets the server clamp or answer NFS4ERR_DELAY; clamping always makes
//! progress): `vet`. Everything else about the delegation (recall, revocation,
//! CB_GETATTR) is the plain read or write delegation's.

use super::{DState, Delegations};
use crate::fs::NfsTime;
use crate::state::error::StateError;
use crate::state::stateid::Stateid;

/// The file's times when an `*_ATTRS_DELEG` delegation was granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GrantTimes {
    pub atime: NfsTime,
    pub mtime: NfsTime,
}

/// RFC 9754 §6's rule for a delegated time `t` against the `original` time (at the
/// grant) and the server's `now`: `None` when it is not after the original (ignored),
/// else the time to store, clamped to `now`.
pub fn vet(t: NfsTime, original: NfsTime, now: NfsTime) -> Option<NfsTime> {
    (t > original).then_some(t.min(now))
}

impl Delegations {
    /// OPEN granted `s` as an `*_ATTRS_DELEG` delegation on a file whose times are
    /// now `times`.
    pub fn note_times_deleg(&self, s: &Stateid, times: GrantTimes) {
        if let Some(d) = self.lock().by_other.get_mut(&s.other) {
            d.times = Some(times);
        }
    }

    /// A SETATTR of delegated times under `s` by `clientid` on `fileid` (RFC 9754
    /// §6.1): the original times when `s` is this client's live `*_ATTRS_DELEG`
    /// delegation on the file. Not a delegation stateid, another client's, another
    /// file's, or a delegation without delegated times → BadStateid (only the holder
    /// may set them, as knfsd); revoked → DelegRevoked; `modify` under a read
    /// delegation (which delegates the access time only) → OpenMode.
    pub fn check_times(
        &self,
        clientid: u64,
        s: &Stateid,
        fileid: u64,
        modify: bool,
    ) -> Result<GrantTimes, StateError> {
        if !self.owns(s) {
            return Err(StateError::BadStateid);
        }
        let t = self.lock();
        let d = Self::find(&t, Some(clientid), s)?;
        if d.fileid != fileid {
            return Err(StateError::BadStateid);
        }
        if d.state == DState::Revoked {
            return Err(StateError::DelegRevoked);
        }
        let times = d.times.ok_or(StateError::BadStateid)?;
        if modify && !d.write {
            return Err(StateError::OpenMode);
        }
        Ok(times)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(sec: i64, nsec: u32) -> NfsTime {
        NfsTime { sec, nsec }
    }

    #[test]
    fn times_before_the_original_are_ignored_and_future_ones_clamped() {
        let (orig, now) = (t(100, 5), t(200, 0));
        assert_eq!(vet(t(100, 5), orig, now), None, "the original itself");
        assert_eq!(vet(t(100, 4), orig, now), None);
        assert_eq!(vet(t(-5, 0), orig, now), None);
        assert_eq!(vet(t(100, 6), orig, now), Some(t(100, 6)));
        assert_eq!(vet(t(200, 0), orig, now), Some(now));
        assert_eq!(vet(t(200, 1), orig, now), Some(now), "clamped");
        assert_eq!(vet(t(i64::MAX, 0), orig, now), Some(now));
    }
}
