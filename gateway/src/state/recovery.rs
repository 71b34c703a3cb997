//! Where the records a server needs for its grace period live (RFC 8881 §8.4.2.1: the
//! client owners that may reclaim after a restart or a takeover), and the fence that
//! says whether this gateway serves NFSv4.1 state at all (docs/ha.md).
//!
//! Two implementations of [`Records`]: the local file `state.dir/nfs4-clients`
//! (`grace::Persist`, the default) and the identity's record in the store (`[ha]`,
//! `crate::ha::record`). The client table writes a new owner to the record before it
//! confirms the client (`Clients::record_before_confirm`), so every client that holds
//! state is in the record a successor reads.

pub(crate) use super::grace::{hex, unhex};
use super::park::{Park, Parked};
use crate::backend::gate::Gate;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Why the records could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordError {
    /// The stored record does not parse (torn, truncated, foreign): nothing in it can be
    /// proved, so no client may reclaim (docs/ha.md "Faults in the records").
    Torn(String),
    /// The store did not answer, or refused (a failed condition: another gateway holds
    /// the identity now).
    Store(String),
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordError::Torn(s) => write!(f, "recovery record unreadable: {s}"),
            RecordError::Store(s) => write!(f, "recovery record store: {s}"),
        }
    }
}

/// The owners that may reclaim, kept across restarts and takeovers.
pub trait Records: Send + Sync {
    /// The owners the previous holder recorded (empty when there is no record).
    fn load(&self) -> Result<HashSet<Vec<u8>>, RecordError>;
    /// Replaces the record with `owners`, durably, before returning `Ok`.
    fn save(&self, owners: &[Vec<u8>]) -> Result<(), RecordError>;
}

/// Whether this gateway serves NFSv4.1 state now: always without `[ha]`; with it, until
/// the deadline its last identity-lease renewal earned (docs/ha.md "Lease and clocks").
/// Read on every COMPOUND and by the reactors' fast paths: one atomic load and a clock
/// read, no lock.
pub struct Fence {
    /// The deadline itself, shared with the store's gate (`backend::gate`): requests
    /// that change the store check the same word immediately before they are sent.
    gate: Arc<Gate>,
    /// Where COMPOUNDs that come while the fence is shut wait for it (`park`).
    park: Park,
}

impl Fence {
    /// A fence that never shuts (no `[ha]`).
    pub fn open() -> Fence {
        Fence {
            gate: Arc::new(Gate::open()),
            park: Park::off(),
        }
    }

    /// A shut fence: nothing served until `serve_until` opens it; nothing parks.
    pub fn shut() -> Fence {
        Fence::shut_parking(Park::off())
    }

    /// A shut fence whose COMPOUNDs park within `park`'s bounds (`[ha]`).
    pub fn shut_parking(park: Park) -> Fence {
        Fence {
            gate: Arc::new(Gate::shut()),
            park,
        }
    }

    /// The parking of COMPOUNDs that come while the fence is shut.
    pub fn park(&self) -> &Park {
        &self.park
    }

    /// Holds a COMPOUND of connection `conn` that came while the fence is shut until
    /// it opens, within the park's bounds (docs/ha.md).
    pub fn park_until_serving(&self, conn: std::net::SocketAddr) -> Parked {
        self.park.wait(conn, || self.serving())
    }

    pub fn serving(&self) -> bool {
        self.gate.admits()
    }

    /// Serves until `t` (a renewal's deadline).
    pub fn serve_until(&self, t: Instant) {
        self.gate.serve_until(t);
    }

    /// Stops serving now (the identity was lost).
    pub fn close(&self) {
        self.gate.close();
    }

    /// The deadline as the store's gate (`Backend::gate_writes`).
    pub fn gate(&self) -> Arc<Gate> {
        self.gate.clone()
    }
}

impl Default for Fence {
    fn default() -> Self {
        Fence::open()
    }
}

/// Reclaims answered (`nfsgw_ha_reclaims_total{result}`): accepted, and refused because
/// the client is not one the record proves or the grace period is over.
static RECLAIMS_OK: AtomicU64 = AtomicU64::new(0);
static RECLAIMS_REFUSED: AtomicU64 = AtomicU64::new(0);

fn count_reclaim(ok: bool) {
    let c = if ok { &RECLAIMS_OK } else { &RECLAIMS_REFUSED };
    c.fetch_add(1, Ordering::Relaxed);
}

/// One client table's reclaims (accepted, refused), counted into the totals as well.
#[derive(Default)]
pub struct Reclaims {
    ok: AtomicU64,
    refused: AtomicU64,
}

impl Reclaims {
    pub fn count(&self, ok: bool) {
        let c = if ok { &self.ok } else { &self.refused };
        c.fetch_add(1, Ordering::Relaxed);
        count_reclaim(ok);
    }

    pub fn get(&self) -> (u64, u64) {
        (
            self.ok.load(Ordering::Relaxed),
            self.refused.load(Ordering::Relaxed),
        )
    }
}

/// Grace periods started (at start with a record, or at a takeover) and ended early
/// because every client had reclaimed (`nfsgw_ha_grace_periods_total{how}`).
static GRACE_STARTED: AtomicU64 = AtomicU64::new(0);
static GRACE_EARLY: AtomicU64 = AtomicU64::new(0);

pub(crate) fn count_grace_started() {
    GRACE_STARTED.fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn count_grace_ended_early() {
    GRACE_EARLY.fetch_add(1, Ordering::Relaxed);
}

/// (started, ended early) grace periods so far.
pub fn grace_periods() -> (u64, u64) {
    (
        GRACE_STARTED.load(Ordering::Relaxed),
        GRACE_EARLY.load(Ordering::Relaxed),
    )
}

/// (accepted, refused) reclaims so far.
pub fn reclaims() -> (u64, u64) {
    (
        RECLAIMS_OK.load(Ordering::Relaxed),
        RECLAIMS_REFUSED.load(Ordering::Relaxed),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn fence_serves_until_its_deadline() {
        assert!(Fence::open().serving());
        let f = Fence::shut();
        assert!(!f.serving());
        f.serve_until(Instant::now() + Duration::from_millis(80));
        assert!(f.serving());
        std::thread::sleep(Duration::from_millis(100));
        assert!(!f.serving(), "past the deadline it stops by itself");
        f.serve_until(Instant::now() + Duration::from_secs(60));
        f.close();
        assert!(!f.serving());
    }
}
