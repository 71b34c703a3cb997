//! When the responder transport looks for connections whose peer stopped doing its
//! part (Standards: a peer must not hold shared buffers forever by answering
//! nothing). The look is cheap but reads the clock, so it runs every [`SWEEP_POLLS`]
//! polls and at most once a second: a timeout fires up to a second late, never early.
//!
//! - `read_timeout` (`rdma.read_timeout_s`): RDMA Reads outstanding and none completed
//!   for that long (a peer that stops answering the Reads of its chunked calls). On
//!   verbs the NIC's own retry limit usually fails such Reads first.

use std::time::{Duration, Instant};

/// Polls between looks at the clock (the reactor polls at least every few
/// milliseconds, so this is well under a second).
pub(super) const SWEEP_POLLS: u32 = 256;
/// Shortest interval between two sweeps.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// The sweep's cadence.
pub(super) struct Sweep {
    polls: u32,
    last: Instant,
}

impl Sweep {
    pub(super) fn new() -> Sweep {
        Sweep {
            polls: 0,
            last: Instant::now(),
        }
    }

    /// Counts one poll; `Some(now)` when a sweep is due.
    pub(super) fn tick(&mut self) -> Option<Instant> {
        self.polls = self.polls.wrapping_add(1);
        if !self.polls.is_multiple_of(SWEEP_POLLS) {
            return None;
        }
        let now = Instant::now();
        if now.saturating_duration_since(self.last) < SWEEP_EVERY {
            return None;
        }
        self.last = now;
        Some(now)
    }
}

/// Reads outstanding with no completion since `progress` for `timeout`.
pub(super) fn reads_stalled(
    reads_out: u32,
    progress: Instant,
    now: Instant,
    timeout: Duration,
) -> bool {
    reads_out > 0 && now.saturating_duration_since(progress) >= timeout
}
