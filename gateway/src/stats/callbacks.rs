//! NFSv4.1 callback and delegation counters (RFC 8881 §10.2, §20): how many
//! callbacks went out and how they ended, how recalls ended, how many delegations are
//! held. Rare events written by several threads (the callback thread, reactors that
//! route callback replies, workers that grant and return delegations), so plain
//! relaxed `fetch_add`s; read by the stats endpoint.
//!
//! Both counters carry a `transport` label: the back channel the callback went on
//! ("tcp", or "rdma" for RFC 8167 reverse calls on an RPC-over-RDMA connection), so
//! an operator sees a CB_RECALL sent and answered over RDMA. A recall that ended
//! before any CB_RECALL could be sent (no back channel bound) counts as "none".

use super::counters::Transport;
use std::sync::atomic::{AtomicU64, Ordering};

/// The `transport` label values of the recall counter: the two transports, then
/// "none" (index 2: no CB_RECALL was ever sent for that recall).
pub const RECALL_TRANSPORTS: [&str; 3] = ["tcp", "rdma", "none"];

/// `nfsgw_callbacks_total{transport,result}`: every callback RPC (CB_NULL,
/// CB_COMPOUND).
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
    /// The client answered with RDMA_ERROR, or the connection dropped while it was
    /// outstanding (RFC 8167 §5.4, R8167-16/17): a recall is resent after a backoff on
    /// the back channel the client binds next.
    Failed = 4,
}

pub const CALLBACK_RESULTS: [(CallbackResult, &str); 5] = [
    (CallbackResult::Sent, "sent"),
    (CallbackResult::Replied, "replied"),
    (CallbackResult::Unmatched, "unmatched"),
    (CallbackResult::TimedOut, "timed_out"),
    (CallbackResult::Failed, "failed"),
];

/// `nfsgw_delegation_recalls_total{transport,result}`: how recalls went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum RecallResult {
    /// A recall (started by a conflicting v3 or v4 operation) sent its first
    /// CB_RECALL; counted once per delegation, on the transport it went over.
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

/// Where a recall counter goes: a transport's index, or 2 ("none").
pub fn recall_index(via: Option<Transport>) -> usize {
    via.map_or(2, |t| t as usize)
}

#[derive(Debug, Default)]
pub struct CallbackStats {
    /// [transport][result].
    callbacks: [[AtomicU64; 5]; 2],
    /// [tcp, rdma, none][result].
    recalls: [[AtomicU64; 4]; 3],
    /// Gauge: delegations granted and not yet returned or revoked.
    delegations: AtomicU64,
    /// Gauge: NFSv4.1 courtesy clients (lease run out, state kept: RFC 8881 §8.4.2.1).
    courtesy_clients: AtomicU64,
    /// Courtesy clients expired because another client's operation conflicted.
    courtesy_expired: AtomicU64,
}

impl CallbackStats {
    pub fn callback(&self, t: Transport, r: CallbackResult) {
        self.callbacks[t as usize][r as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// A recall event; `via` is the transport of its CB_RECALL (None: never sent).
    pub fn recall(&self, via: Option<Transport>, r: RecallResult) {
        self.recalls[recall_index(via)][r as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Callbacks with result `r`, every transport.
    pub fn callbacks(&self, r: CallbackResult) -> u64 {
        (0..2).map(|t| self.callbacks_at(t, r)).sum()
    }

    /// Callbacks with result `r` on transport index `t` (0 tcp, 1 rdma).
    pub fn callbacks_at(&self, t: usize, r: CallbackResult) -> u64 {
        self.callbacks
            .get(t)
            .map_or(0, |c| c[r as usize].load(Ordering::Relaxed))
    }

    /// Recalls with result `r`, every transport.
    pub fn recalls(&self, r: RecallResult) -> u64 {
        (0..3).map(|t| self.recalls_at(t, r)).sum()
    }

    /// Recalls with result `r` at transport index `t` (`RECALL_TRANSPORTS`).
    pub fn recalls_at(&self, t: usize, r: RecallResult) -> u64 {
        self.recalls
            .get(t)
            .map_or(0, |c| c[r as usize].load(Ordering::Relaxed))
    }

    pub fn set_delegations(&self, n: u64) {
        self.delegations.store(n, Ordering::Relaxed);
    }

    pub fn delegations(&self) -> u64 {
        self.delegations.load(Ordering::Relaxed)
    }

    pub fn set_courtesy_clients(&self, n: u64) {
        self.courtesy_clients.store(n, Ordering::Relaxed);
    }

    pub fn courtesy_clients(&self) -> u64 {
        self.courtesy_clients.load(Ordering::Relaxed)
    }

    /// `n` more courtesy clients expired for a conflict.
    pub fn courtesy_expired(&self, n: u64) {
        if n > 0 {
            self.courtesy_expired.fetch_add(n, Ordering::Relaxed);
        }
    }

    pub fn courtesy_expired_total(&self) -> u64 {
        self.courtesy_expired.load(Ordering::Relaxed)
    }
}
