//! Opens (open-owners, share reservations, open stateids) and byte-range locks
//! (lock-owners, lock stateids, ranges, conflicts): RFC 8881 §8 (stateids), §9
//! (locking and share reservations), §18.10-§18.12, §18.16-§18.18, §18.38, §18.48.
//!
//! Sans-IO: no storage, no protocol bytes; `nfs4::state_ops` decodes and encodes.
//! One `Mutex` around the table: it is used by backend workers only and never held
//! across storage I/O. Every table a client can grow is capped (`Limits`):
//! exceeding a cap answers NFS4ERR_RESOURCE.
//!
//! NFSv4.1 ignores the seqids of open-owners and lock-owners (sessions give
//! exactly-once semantics; §8.8, "obsolete locking infrastructure from NFSv4.0"): only stateid seqids are checked.

mod locks;
pub mod stateids;
mod table;
#[cfg(test)]
mod tests;

use super::stateid::Stateid;
use crate::state::error::{Checked, StateError};
pub use locks::Range;
pub use stateids::Kind;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use table::Table;

/// OPEN4_SHARE_ACCESS_* / OPEN4_SHARE_DENY_* bits (§18.16.3).
pub const ACCESS_READ: u32 = 1;
pub const ACCESS_WRITE: u32 = 2;
pub const DENY_READ: u32 = 1;
pub const DENY_WRITE: u32 = 2;

/// Caps on what one client may hold.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Open plus lock stateids of one client.
    pub states_per_client: usize,
    /// Open plus lock stateids of all clients.
    pub states_total: usize,
    /// Byte ranges held by one lock stateid (one lock-owner on one file).
    pub ranges_per_owner: usize,
    /// Byte ranges held, all clients together.
    pub ranges_total: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            states_per_client: 16384,
            states_total: 1 << 18,
            ranges_per_owner: 1024,
            ranges_total: 1 << 20,
        }
    }
}

/// The lock that made a LOCK or LOCKT fail: LOCK4denied (§18.10.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    pub offset: u64,
    pub length: u64,
    pub write: bool,
    pub clientid: u64,
    pub owner: Vec<u8>,
}

/// Why a LOCK or LOCKT did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockError {
    /// A conflicting lock of another owner (NFS4ERR_DENIED), which the reply names.
    Denied(Denied),
    /// Any other failure.
    Status(StateError),
}

impl From<StateError> for LockError {
    fn from(s: StateError) -> LockError {
        LockError::Status(s)
    }
}

/// locker4 (§18.10.1): which lock-owner a LOCK is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Locker {
    /// open_to_lock_owner4: the first LOCK of a lock-owner on this open.
    New { open: Stateid, owner: Vec<u8> },
    /// exist_lock_owner4: a lock stateid already issued.
    Existing { lock: Stateid },
}

/// Called with a file id when its last open goes (`Opens::on_last_close`).
pub type LastClose = Arc<dyn Fn(u64) + Send + Sync>;

/// Every open and lock of this gateway.
pub struct Opens {
    table: Mutex<Table>,
    last_close: OnceLock<LastClose>,
}

impl Default for Opens {
    fn default() -> Opens {
        Opens::with(stateids::boot_verifier(), Limits::default())
    }
}

impl Opens {
    /// Open stateids, lock stateids and byte ranges locked, for the stats endpoint.
    pub fn counts(&self) -> (u64, u64, u64) {
        self.t().counts()
    }

    /// A table issuing stateids under `boot` with caps `limits`.
    pub fn with(boot: u32, limits: Limits) -> Opens {
        Opens {
            table: Mutex::new(Table::new(boot, limits)),
            last_close: OnceLock::new(),
        }
    }

    fn t(&self) -> MutexGuard<'_, Table> {
        // A panic while holding the lock leaves a table whose invariants each
        // method re-checks; keep serving rather than poison every later call.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Checks the stateid of a READ (`write` false), WRITE or SETATTR(size) against
    /// the file: special stateids, open/lock/delegation stateids of `clientid` for
    /// `fileid`, share-mode and mandatory-lock rules. `Ok` or why not.
    ///
    /// §8.2.3 and §9.7 (share reservations): the anonymous stateid is refused (NFS4ERR_LOCKED) only by a
    /// share reservation denying the access; the READ bypass stateid skips it for
    /// READ. An open or lock stateid must belong to the client and the file; a WRITE
    /// needs WRITE access (NFS4ERR_OPENMODE), a READ READ or WRITE access (as knfsd
    /// allows). Delegation stateids are not in this table: NFS4ERR_BAD_STATEID here,
    /// the caller asks the delegations table.
    pub fn check_io(&self, clientid: u64, stateid: &Stateid, fileid: u64, write: bool) -> Checked {
        self.t().check_io(clientid, stateid, fileid, write)
    }

    /// The clients whose share reservations on `fileid` deny READ (`write` false) or
    /// WRITE: those that make `check_io` refuse a special stateid (NFS4ERR_LOCKED).
    pub fn deny_blockers(&self, fileid: u64, write: bool) -> Vec<u64> {
        self.t().deny_blockers(fileid, write)
    }

    /// Frees every open and lock of a client (lease expiry, DESTROY_CLIENTID).
    pub fn purge_client(&self, clientid: u64) {
        let idle = {
            let mut t = self.t();
            t.purge_client(clientid);
            t.take_idle()
        };
        self.tell_idle(idle);
    }

    /// Installs the hook told of each file whose last open went (CLOSE, a purged
    /// client; not OPEN_DOWNGRADE): the file model deletes a file removed while open
    /// (RFC 8881 §18.25: "delete on last close"). Set once, by the server.
    pub fn on_last_close(&self, f: LastClose) {
        let _ = self.last_close.set(f);
    }

    /// Whether any open stateid holds `fileid` (a REMOVE keeps such a file).
    pub fn is_open(&self, fileid: u64) -> bool {
        self.t().file_is_open(fileid)
    }

    /// Runs the hook for `idle`, outside the table's lock (it may do storage I/O).
    fn tell_idle(&self, idle: Vec<u64>) {
        if let Some(f) = self.last_close.get() {
            idle.into_iter().for_each(|id| f(id));
        }
    }

    /// Whether the client still holds opens or locks (DESTROY_CLIENTID →
    /// NFS4ERR_CLIENTID_BUSY).
    pub fn client_has_state(&self, clientid: u64) -> bool {
        self.t().client_has_state(clientid)
    }

    /// OPEN (§18.16, §9.7): opens `fileid` for the open-owner, or upgrades its
    /// existing open with the union of the modes; share conflicts with other
    /// open-owners → NFS4ERR_SHARE_DENIED. Returns the open stateid (seqid bumped).
    pub fn open(
        &self,
        clientid: u64,
        owner: &[u8],
        fileid: u64,
        access: u32,
        deny: u32,
    ) -> Result<Stateid, StateError> {
        self.open_or_upgrade(clientid, owner, fileid, access, deny)
            .map(|(sid, _)| sid)
    }

    /// `open`, and whether it made the open (true) rather than upgrading one the
    /// open-owner held: decided under the table's lock with the open itself, so a
    /// concurrent OPEN of the same owner cannot make both think they made it.
    pub fn open_or_upgrade(
        &self,
        clientid: u64,
        owner: &[u8],
        fileid: u64,
        access: u32,
        deny: u32,
    ) -> Result<(Stateid, bool), StateError> {
        let mut t = self.t();
        let made = !t.has_open(clientid, owner, fileid);
        t.open(clientid, owner, fileid, access, deny)
            .map(|sid| (sid, made))
    }

    /// The clients whose opens make `open` (same arguments) fail with
    /// NFS4ERR_SHARE_DENIED (§9.7), each once: what a courtesy client's conflict
    /// check asks (`State::open`).
    pub fn share_blockers(
        &self,
        clientid: u64,
        owner: &[u8],
        fileid: u64,
        access: u32,
        deny: u32,
    ) -> Vec<u64> {
        self.t()
            .share_blockers(clientid, owner, fileid, access, deny)
    }

    /// OPEN_DOWNGRADE (§18.18).
    pub fn downgrade(
        &self,
        clientid: u64,
        stateid: &Stateid,
        fileid: u64,
        access: u32,
        deny: u32,
    ) -> Result<Stateid, StateError> {
        self.t().downgrade(clientid, stateid, fileid, access, deny)
    }

    /// CLOSE (§18.2): NFS4ERR_LOCKS_HELD while a lock-owner of the open holds locks.
    pub fn close(&self, clientid: u64, stateid: &Stateid, fileid: u64) -> Result<(), StateError> {
        let (r, idle) = {
            let mut t = self.t();
            let r = t.close(clientid, stateid, fileid);
            (r, t.take_idle())
        };
        self.tell_idle(idle);
        r
    }

    /// The access bits of an open stateid (for tests and diagnostics).
    pub fn open_modes(&self, stateid: &Stateid) -> Option<(u32, u32)> {
        self.t().open_modes(stateid)
    }

    /// LOCK (§18.10): `write` for WRITE_LT/WRITEW_LT (blocking types are served as
    /// non-blocking). Returns the lock stateid (seqid bumped).
    pub fn lock(
        &self,
        clientid: u64,
        locker: &Locker,
        fileid: u64,
        range: Range,
        write: bool,
    ) -> Result<Stateid, LockError> {
        self.t().lock(clientid, locker, fileid, range, write)
    }

    /// LOCKT (§18.11): tests without creating state; the owner's own locks never
    /// conflict.
    pub fn lockt(
        &self,
        clientid: u64,
        owner: &[u8],
        fileid: u64,
        range: Range,
        write: bool,
    ) -> Result<(), LockError> {
        self.t().lockt(clientid, owner, fileid, range, write)
    }

    /// LOCKU (§18.12). Returns the lock stateid (seqid bumped).
    pub fn locku(
        &self,
        clientid: u64,
        stateid: &Stateid,
        fileid: u64,
        range: Range,
    ) -> Result<Stateid, StateError> {
        self.t().locku(clientid, stateid, fileid, range)
    }

    /// TEST_STATEID for one stateid (§18.48): `Ok`, `BadStateid` or `OldStateid`.
    /// Delegation stateids are not known here.
    pub fn test_stateid(&self, clientid: u64, stateid: &Stateid) -> Checked {
        self.t().test_stateid(clientid, stateid)
    }

    /// FREE_STATEID (§18.38): frees a lock stateid without locks; open stateids and
    /// lock stateids with locks → NFS4ERR_LOCKS_HELD; unknown → NFS4ERR_BAD_STATEID.
    pub fn free_stateid(&self, clientid: u64, stateid: &Stateid) -> Checked {
        self.t().free_stateid(clientid, stateid)
    }
}
