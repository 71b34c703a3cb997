//! NFSv4.1 callback and delegation counters (RFC 8881 §10.2, §20): how many
//! callbacks went out and how they ended, how recalls ended, how many delegations are
//! held. Rare events written by several threads (the callback thread, reactors that
//! route callback replies, workers that grant and return delegations), so plain
//! relaxed `fetch_add`s; read by the stats endpoint.

use std::sync::atomic::{AtomicU64, Ordering};

/// `nfsgw_callbacks_total{result}`: every callback RPC (CB_NULL, CB_COMPOUND).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum CallbackResult {
    /// Handed to a reactor to send.
    Sent = 0,
    /// A REPLY matched it.
    Replied = 1,
    /// A REPLY whose XID matched nothing outstanding (dropped, never fatal).
    Unmatched = 2,
    /// No reply within the callback timeout (retried later on the bound channel).
    TimedOut = 3,
}

pub const CALLBACK_RESULTS: [(CallbackResult, &str); 4] = [
    (CallbackResult::Sent, "sent"),
    (CallbackResult::Replied, "replied"),
    (CallbackResult::Unmatched, "unmatched"),
    (CallbackResult::TimedOut, "timed_out"),
];

/// `nfsgw_delegation_recalls_total{result}`: how recalls went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum RecallResult {
    /// A recall started (a conflicting v3 or v4 operation) and CB_RECALL was sent.
    Sent = 0,
    /// The client answered CB_RECALL with NFS4_OK.
    Answered = 1,
    /// The delegation came back (DELEGRETURN) while recalled.
    Returned = 2,
    /// Not returned within the lease: revoked.
    Revoked = 3,
}

pub const RECALL_RESULTS: [(RecallResult, &str); 4] = [
    (RecallResult::Sent, "sent"),
    (RecallResult::Answered, "answered"),
    (RecallResult::Returned, "returned"),
    (RecallResult::Revoked, "revoked"),
];

#[derive(Debug, Default)]
pub struct CallbackStats {
    callbacks: [AtomicU64; 4],
    recalls: [AtomicU64; 4],
    /// Gauge: delegations granted and not yet returned or revoked.
    delegations: AtomicU64,
}

impl CallbackStats {
    pub fn callback(&self, r: CallbackResult) {
        self.callbacks[r as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn recall(&self, r: RecallResult) {
        self.recalls[r as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn callbacks(&self, r: CallbackResult) -> u64 {
        self.callbacks[r as usize].load(Ordering::Relaxed)
    }

    pub fn recalls(&self, r: RecallResult) -> u64 {
        self.recalls[r as usize].load(Ordering::Relaxed)
    }

    pub fn set_delegations(&self, n: u64) {
        self.delegations.store(n, Ordering::Relaxed);
    }

    pub fn delegations(&self) -> u64 {
        self.delegations.load(Ordering::Relaxed)
    }
}
