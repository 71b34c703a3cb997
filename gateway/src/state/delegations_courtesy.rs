//! Delegations of courtesy clients (RFC 8881 §8.4.2.1, `state/clients/courtesy.rs`).
//!
//! A client whose lease ran out cannot answer a CB_RECALL, so a conflict with its
//! delegation does not wait for a recall (and its revocation a lease later): the
//! delegation is dropped at once, the conflicting operation proceeds in the same
//! call, and the client is "doomed": the callback thread expires it for real
//! (`State::sweep`), since a client that came back to its opens without its
//! delegation would be left with state it believes it holds (knfsd likewise expires a
//! courtesy client instead of recalling: `nfs4_anylock_blockers`, `expire_client`).
//! A doomed client that renews before that is expired by `State::renew` instead.

use super::{remove, Delegations, Table};

/// Drops the delegation `other` of a courtesy client and dooms its client.
pub(super) fn doom(t: &mut Table, other: &[u8; 12]) {
    let Some(id) = t.by_other.get(other).map(|d| d.clientid) else {
        return;
    };
    remove(t, other);
    if !t.doomed.contains(&id) && t.doomed.len() < super::MAX_DELEGATIONS {
        t.doomed.push(id);
    }
}

impl Delegations {
    /// The clients table marked these clients courtesy clients (their lease ran out):
    /// conflicts take their delegations instead of recalling them.
    pub fn mark_courtesy(&self, ids: &[u64]) {
        if ids.is_empty() {
            return;
        }
        let mut t = self.lock();
        for &id in ids {
            if t.per_client.get(&id).is_some_and(|&n| n > 0) {
                t.courtesy.insert(id);
            }
        }
    }

    /// A courtesy client renewed its lease. False if a conflict took one of its
    /// delegations meanwhile: the caller expires it (it must not go on with part of
    /// its state gone).
    pub fn revive(&self, id: u64) -> bool {
        let mut t = self.lock();
        t.courtesy.remove(&id);
        !t.doomed.contains(&id)
    }

    /// The clients whose delegation a conflict took, for the caller to expire.
    pub fn take_doomed(&self) -> Vec<u64> {
        std::mem::take(&mut self.lock().doomed)
    }
}
