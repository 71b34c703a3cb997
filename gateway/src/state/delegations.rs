//! Delegations: granting on OPEN, recall over the back channel when another client
//! (v4) or any v3 call conflicts, return and revocation after the lease.

use super::stateid::Stateid;
use super::Conflict;

/// Every delegation. Skeleton: the delegations owner fills it in.
#[derive(Default)]
pub struct Delegations {}

impl Delegations {
    /// Called before an operation that conflicts with delegations on `fileid` runs,
    /// by `clientid` (`None` for NFSv3 callers). Starts recalls of conflicting
    /// delegations held by other clients and returns `false` while any is
    /// outstanding: the caller then answers NFS4ERR_DELAY (v4) or NFS3ERR_JUKEBOX (v3)
    /// and the client retries. `true`: no conflict, go on.
    pub fn break_conflicts(&self, _fileid: u64, _clientid: Option<u64>, _why: Conflict) -> bool {
        true
    }

    /// OPEN (RFC 8881 §10.4, §18.16.3) asks whether `clientid` may be given a
    /// delegation on `fileid` (`want_write`: a write delegation is preferred). `Some`:
    /// the new delegation's stateid and whether it is a write delegation.
    /// Stub added by the opens slice; the delegations owner implements it.
    pub fn try_grant(
        &self,
        _clientid: u64,
        _fileid: u64,
        _want_write: bool,
    ) -> Option<(Stateid, bool)> {
        None
    }

    /// OPEN with CLAIM_DELEGATE_CUR / CLAIM_DELEG_CUR_FH (§18.16.3): whether
    /// `stateid` is a current delegation of `clientid` on `fileid`.
    /// Stub added by the opens slice; the delegations owner implements it.
    pub fn holds(&self, _clientid: u64, _stateid: &Stateid, _fileid: u64) -> bool {
        false
    }

    /// Frees every delegation of a client (lease expiry, DESTROY_CLIENTID).
    pub fn purge_client(&self, _clientid: u64) {}
}
