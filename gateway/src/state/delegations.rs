//! Delegations: granting on OPEN, recall over the back channel when another client
//! (v4) or any v3 call conflicts, return and revocation after the lease.

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

    /// Frees every delegation of a client (lease expiry, DESTROY_CLIENTID).
    pub fn purge_client(&self, _clientid: u64) {}
}
