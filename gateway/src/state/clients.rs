//! Client records (EXCHANGE_ID), leases, sessions (CREATE_SESSION, slot tables and
//! the exactly-once reply cache), persistence and the grace period.

use super::BackChannelInfo;

/// Every client of this gateway. Skeleton: the session-layer owner fills it in.
#[derive(Default)]
pub struct Clients {}

impl Clients {
    /// Whether `clientid` names a confirmed client whose lease has not expired.
    pub fn is_live(&self, _clientid: u64) -> bool {
        false
    }

    /// Whether the server is in its grace period (reclaims allowed, new opens and
    /// locks get NFS4ERR_GRACE).
    pub fn in_grace(&self) -> bool {
        false
    }

    /// Whether `clientid` was known before the restart and may still reclaim
    /// (not yet sent RECLAIM_COMPLETE).
    pub fn may_reclaim(&self, _clientid: u64) -> bool {
        false
    }

    /// The back channel of `clientid`'s session(s), if one is bound.
    pub fn lookup_backchannel(&self, _clientid: u64) -> Option<BackChannelInfo> {
        None
    }
}
