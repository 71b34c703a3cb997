//! The gate at the store's door (docs/ha.md "Lease and clocks"): under `[ha]` a
//! gateway may change the store only until the deadline its last identity-lease
//! renewal earned (`t + 3L/4`), so that every request it sends ends (within `L/4`)
//! before a standby may take over (`t + L`). The NFSv4.1 fence
//! (`state::recovery::Fence`) checks the same deadline at a COMPOUND's start; the
//! store checks it again immediately before each request that changes the store is
//! sent, after any wait for an in-flight permit and before each retry, and before a
//! staged UNSTABLE buffer is uploaded in the background. One word, shared: the fence
//! and the backend hold the same `Gate`, which `ha` moves; the backend knows no `ha`.
//!
//! `term` counts the times the gate opened again after it had stopped: staged data
//! admitted in an earlier term may predate a takeover by another gateway and is
//! never uploaded in a later one (`backend/s3/stage.rs`).

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

// Which changes the gate applies to: those made for a call admitted under the identity
// (an NFSv4 COMPOUND past the fence, `nfs4::compound`), and the uploads of staged data
// such calls wrote. NFSv3 and MOUNT are served by every gateway on the store, holder
// or not (README "Several gateways on one bucket"); their changes carry no state of
// the identity and are never gated, so a standby and a pNFS data server keep serving
// them.
thread_local! {
    static ADMITTED: Cell<bool> = const { Cell::new(false) };
}
tokio::task_local! {
    static ADMITTED_TASK: bool;
}

/// While alive, this thread runs a call admitted under the identity: the store
/// changes it makes are gated.
pub struct Admitted {
    prev: bool,
}

impl Admitted {
    pub fn enter() -> Admitted {
        Admitted {
            prev: ADMITTED.with(|a| a.replace(true)),
        }
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let prev = self.prev;
        ADMITTED.with(|a| a.set(prev));
    }
}

/// Whether this thread runs a call admitted under the identity.
pub fn admitted_here() -> bool {
    ADMITTED.with(|a| a.get())
}

/// `fut` as a task that carries this thread's `admitted_here` (the s3 backend runs
/// its requests on its runtime's threads, where the thread-local is not set).
pub fn carry<F: Future>(fut: F) -> impl Future<Output = F::Output> {
    ADMITTED_TASK.scope(admitted_here(), fut)
}

/// Whether the running task's changes are gated: what `carry` captured; a task not
/// started through `carry` is gated (the safe side).
pub fn admitted_task() -> bool {
    ADMITTED_TASK.try_with(|a| *a).unwrap_or(true)
}

/// Until when this gateway may change the store. `u64::MAX`: always (no `[ha]`).
pub struct Gate {
    base: Instant,
    /// Nanoseconds after `base` until which changes are admitted.
    until_ns: AtomicU64,
    /// Openings after a stop (see the module's comment).
    term: AtomicU64,
    /// Requests refused at the gate (`nfsgw_ha_store_writes_refused_total`).
    refused: AtomicU64,
    /// The `term` whose stop was logged last (logged once per stop).
    logged: AtomicU64,
}

/// Requests the gate refused, process-wide (one gate per gateway).
static REFUSED: AtomicU64 = AtomicU64::new(0);
/// Staged buffers dropped because the gate had stopped (or a new term began).
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// (store requests refused at the gate, staged buffers dropped at the gate).
pub fn counts() -> (u64, u64) {
    (
        REFUSED.load(Ordering::Relaxed),
        DROPPED.load(Ordering::Relaxed),
    )
}

/// Counts a staged buffer dropped because its term ended.
pub fn count_dropped() {
    DROPPED.fetch_add(1, Ordering::Relaxed);
}

impl Gate {
    /// Always admits (no `[ha]`).
    pub fn open() -> Gate {
        Gate::with(u64::MAX)
    }

    /// Admits nothing until `serve_until` opens it.
    pub fn shut() -> Gate {
        Gate::with(0)
    }

    fn with(until: u64) -> Gate {
        Gate {
            base: Instant::now(),
            until_ns: AtomicU64::new(until),
            term: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            logged: AtomicU64::new(u64::MAX),
        }
    }

    /// Whether a change may be sent now: one atomic load and a clock read.
    pub fn admits(&self) -> bool {
        let until = self.until_ns.load(Ordering::Acquire);
        until == u64::MAX || (self.base.elapsed().as_nanos() as u64) < until
    }

    /// Admits changes until `t` (a renewal's deadline). Opening again after a stop
    /// begins a new term.
    pub fn serve_until(&self, t: Instant) {
        let ns = t.saturating_duration_since(self.base).as_nanos() as u64;
        let now = self.base.elapsed().as_nanos() as u64;
        let was = self.until_ns.swap(ns.min(u64::MAX - 1), Ordering::AcqRel);
        if was != u64::MAX && was <= now && ns > now {
            self.term.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Admits nothing from now on (the identity was lost).
    pub fn close(&self) {
        self.until_ns.store(0, Ordering::Release);
    }

    /// The current term (see the module's comment).
    pub fn term(&self) -> u64 {
        self.term.load(Ordering::Acquire)
    }

    /// `Ok` when a change may be sent now, else the error the NFS side answers with
    /// NFS3ERR_JUKEBOX / NFS4ERR_DELAY (the client retries; after a takeover, at the
    /// successor). Counted; logged once per stop.
    pub fn check(&self, what: &str) -> Result<(), super::BackendError> {
        if self.admits() {
            return Ok(());
        }
        self.refused.fetch_add(1, Ordering::Relaxed);
        REFUSED.fetch_add(1, Ordering::Relaxed);
        let term = self.term();
        if self.logged.swap(term, Ordering::Relaxed) != term {
            tracing::warn!(
                what,
                "ha: past the identity lease's deadline: no request that changes the store is sent (answered NFS4ERR_DELAY / NFS3ERR_JUKEBOX)"
            );
        }
        Err(super::BackendError::Retryable(format!(
            "ha: {what} not sent: past the identity lease's deadline"
        )))
    }

    /// Requests this gate refused.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

impl Default for Gate {
    fn default() -> Self {
        Gate::open()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn only_admitted_calls_are_marked_and_tasks_carry_the_mark() {
        assert!(!admitted_here());
        {
            let _a = Admitted::enter();
            assert!(admitted_here());
            {
                let _b = Admitted::enter();
            }
            assert!(admitted_here(), "nested: restored to the outer mark");
        }
        assert!(!admitted_here());
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert!(
            !rt.block_on(carry(async { admitted_task() })),
            "NFSv3: ungated"
        );
        let _a = Admitted::enter();
        let fut = carry(async { admitted_task() });
        drop(_a);
        assert!(rt.block_on(fut), "captured when the call made it");
        assert!(rt.block_on(async { admitted_task() }), "uncarried: gated");
    }

    #[test]
    fn admits_until_the_deadline_and_counts_terms() {
        assert!(Gate::open().admits());
        let g = Gate::shut();
        assert!(!g.admits());
        assert!(g.check("PUT").is_err());
        assert_eq!(g.refused(), 1);
        g.serve_until(Instant::now() + Duration::from_millis(60));
        assert!(g.admits() && g.check("PUT").is_ok());
        let t = g.term();
        // Renewed in time: the same term.
        g.serve_until(Instant::now() + Duration::from_millis(60));
        assert_eq!(g.term(), t);
        std::thread::sleep(Duration::from_millis(80));
        assert!(!g.admits(), "past the deadline");
        assert!(matches!(
            g.check("PUT"),
            Err(crate::backend::BackendError::Retryable(_))
        ));
        // A late renewal whose deadline is already past opens nothing.
        g.serve_until(Instant::now() - Duration::from_millis(1));
        assert!(!g.admits());
        assert_eq!(g.term(), t);
        // Open again after the stop: a new term.
        g.serve_until(Instant::now() + Duration::from_secs(5));
        assert!(g.admits());
        assert_eq!(g.term(), t + 1);
        g.close();
        assert!(!g.admits());
    }
}
