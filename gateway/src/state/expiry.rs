//! Where courtesy clients (`clients/courtesy.rs`) meet the other tables: a courtesy
//! client is expired for real as soon as another client's operation conflicts with
//! its state (RFC 8881 §8.4.2.1: the state of a client whose lease expired may be
//! kept "as long as no conflict arises"), and the operation then proceeds in the same
//! call; its state never blocks anything it does not conflict with.
//!
//! - OPEN: a share reservation conflict (§9.7) with opens of courtesy clients only;
//!   a conflict with any active client's open is NFS4ERR_SHARE_DENIED as before and
//!   expires nobody.
//! - LOCK / LOCKT: the conflicting lock (§18.10.4) belongs to a courtesy client; the
//!   check is retried after each expiry (one conflicting lock is found at a time,
//!   as knfsd's `lm_lock_expirable` / `lm_expire_lock`).
//! - READ / WRITE / SETATTR(size) with the anonymous or READ-bypass stateid
//!   (`State::check_io`): refused (NFS4ERR_LOCKED) by share DENYs of courtesy clients
//!   only, which are expired; any active holder keeps NFS4ERR_LOCKED.
//! - EXCHANGE_ID of another principal for a courtesy client's owner
//!   (`nfs4/session_ops.rs`, §18.35.4 case 3): expired instead of NFS4ERR_CLID_INUSE.
//! - delegations: `Delegations::break_conflicts` drops a courtesy client's delegation
//!   instead of recalling it (NFSv4.1 and NFSv3 conflicts alike) and the periodic
//!   `sweep` expires its client.

use super::clients::Purged;
use super::opens::{LockError, Locker, Range};
use super::sessions::Session;
use super::stateid::Stateid;
use super::State;
use crate::state::error::{Checked, StateError};

/// Conflicts resolved by expiring courtesy clients within one call at most; past it
/// the caller answers NFS4ERR_DELAY (each round expires a client, so this bounds the
/// time one call spends, not correctness).
const MAX_ROUNDS: usize = 16;

impl State {
    /// SEQUENCE's lease renewal (`Clients::renew`, RFC 8881 §8.3): a courtesy client
    /// comes back with its state, unless a conflict took a delegation of it
    /// meanwhile: then it is expired and the SEQUENCE gets NFS4ERR_BADSESSION (the
    /// client recovers with EXCHANGE_ID / CREATE_SESSION, §8.4.2.1's "expired" case).
    pub fn renew(&self, s: &Session) -> Result<u32, StateError> {
        let (r, mut p) = self.clients.renew(s);
        let revived = std::mem::take(&mut p.revived);
        self.purge(p);
        let flags = r?;
        for id in revived {
            if !self.revive(id) {
                return Err(StateError::BadSession);
            }
        }
        Ok(flags)
    }

    /// A courtesy client renewed its lease: whether it keeps its state (false: it
    /// lost a delegation to a conflict and is expired now).
    pub(super) fn revive(&self, id: u64) -> bool {
        if self.delegations.revive(id) {
            return true;
        }
        self.purge(
            self.clients
                .expire_now(id, "a delegation was taken by a conflict"),
        );
        false
    }

    /// The periodic pass of the callback thread: marks courtesy clients, expires those
    /// past `nfs4.courtesy_s`, and expires the clients whose delegation a conflict
    /// took (`Delegations::take_doomed`).
    pub fn sweep(&self) {
        if let Some(p) = self.clients.sweep_due() {
            self.purge(p);
        }
        for id in self.delegations.take_doomed() {
            self.purge(self.clients.expire_now(id, "delegation conflict"));
        }
    }

    /// Expires the clients `ids` if every one is a courtesy client; false (nobody
    /// expired) if any is active or `ids` is empty.
    fn expire_if_all_courtesy(&self, ids: &[u64], why: &'static str) -> bool {
        if ids.is_empty() || !ids.iter().all(|&id| self.clients.is_courtesy(id)) {
            return false;
        }
        let p: Purged = self.clients.expire_courtesy(ids, why);
        let any = !p.gone.is_empty();
        self.purge(p);
        any
    }

    /// The stateid check of READ (`write` false), WRITE and SETATTR(size): a delegation
    /// stateid by `Delegations::check_io`, any other by `Opens::check_io`. An I/O with
    /// the anonymous or READ-bypass stateid refused (NFS4ERR_LOCKED) only by share
    /// DENYs of courtesy clients expires them and proceeds (§8.2.3, §9.7; §8.4.2.1:
    /// their state is kept only "as long as no conflict arises"). Any active client
    /// among the holders: NFS4ERR_LOCKED, nobody expired.
    pub fn check_io(&self, clientid: u64, sid: &Stateid, fileid: u64, write: bool) -> Checked {
        for _ in 0..MAX_ROUNDS {
            let r = self
                .delegations
                .check_io(clientid, sid, fileid, write)
                .unwrap_or_else(|| self.opens.check_io(clientid, sid, fileid, write));
            if r != Err(StateError::Locked) {
                return r;
            }
            let holders = self.opens.deny_blockers(fileid, write);
            if !self.expire_if_all_courtesy(&holders, "share reservation conflict with I/O") {
                return r;
            }
        }
        Err(StateError::Delay)
    }

    /// `Opens::open_or_upgrade` where share reservations of courtesy clients give
    /// way (§9.7): the open stateid, and whether this call made the open.
    pub fn open(
        &self,
        clientid: u64,
        owner: &[u8],
        fileid: u64,
        access: u32,
        deny: u32,
    ) -> Result<(Stateid, bool), StateError> {
        for _ in 0..MAX_ROUNDS {
            match self
                .opens
                .open_or_upgrade(clientid, owner, fileid, access, deny)
            {
                Err(StateError::ShareDenied) => {
                    let holders = self
                        .opens
                        .share_blockers(clientid, owner, fileid, access, deny);
                    if !self.expire_if_all_courtesy(&holders, "share reservation conflict") {
                        return Err(StateError::ShareDenied);
                    }
                }
                r => return r,
            }
        }
        Err(StateError::Delay)
    }

    /// `Opens::lock` where locks of courtesy clients give way (§18.10.4).
    pub fn lock(
        &self,
        clientid: u64,
        locker: &Locker,
        fileid: u64,
        range: Range,
        write: bool,
    ) -> Result<Stateid, LockError> {
        for _ in 0..MAX_ROUNDS {
            match self.opens.lock(clientid, locker, fileid, range, write) {
                Err(LockError::Denied(d))
                    if d.clientid != clientid
                        && self.expire_if_all_courtesy(&[d.clientid], "lock conflict") => {}
                r => return r,
            }
        }
        Err(StateError::Delay.into())
    }

    /// `Opens::lockt` where locks of courtesy clients give way (§18.11.4: LOCKT
    /// answers what a LOCK would meet, and a LOCK would expire them).
    pub fn lockt(
        &self,
        clientid: u64,
        owner: &[u8],
        fileid: u64,
        range: Range,
        write: bool,
    ) -> Result<(), LockError> {
        for _ in 0..MAX_ROUNDS {
            match self.opens.lockt(clientid, owner, fileid, range, write) {
                Err(LockError::Denied(d))
                    if d.clientid != clientid
                        && self.expire_if_all_courtesy(&[d.clientid], "lock conflict") => {}
                r => return r,
            }
        }
        Err(StateError::Delay.into())
    }
}

#[cfg(test)]
#[path = "courtesy_tests.rs"]
mod tests;
