//! Opens (open-owners, share reservations, open stateids) and byte-range locks
//! (lock-owners, lock stateids, ranges, conflicts).

use super::stateid::Stateid;

/// Every open and lock. Skeleton: the opens/locks owner fills it in.
#[derive(Default)]
pub struct Opens {}

impl Opens {
    /// Checks the stateid of a READ (`write` false), WRITE or SETATTR(size) against
    /// the file: special stateids, open/lock/delegation stateids of `clientid` for
    /// `fileid`, share-mode and mandatory-lock rules. Returns NFS4_OK or the nfsstat4.
    pub fn check_io(&self, _clientid: u64, _stateid: &Stateid, _fileid: u64, _write: bool) -> u32 {
        0
    }

    /// Frees every open and lock of a client (lease expiry, DESTROY_CLIENTID).
    pub fn purge_client(&self, _clientid: u64) {}

    /// Whether the client still holds opens or locks (DESTROY_CLIENTID →
    /// NFS4ERR_CLIENTID_BUSY).
    pub fn client_has_state(&self, _clientid: u64) -> bool {
        false
    }
}
