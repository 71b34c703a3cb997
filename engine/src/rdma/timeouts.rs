//! When the responder transport looks for connections whose peer stopped doing its
//! part (Standards: a peer must not hold shared buffers forever by answering
//! nothing). The look is cheap but reads the clock, so a busy reactor takes it every
//! [`SWEEP_POLLS`] polls, and an idle one before each sleep (a system call anyway;
//! an idle reactor polls only every `engine.idle_sleep_us`, which would stretch 256
//! polls to seconds); either way at most once per [`Sweep`] interval, a quarter of the
//! shortest timeout, at most a second. A timeout thus fires up to about two intervals
//! late, never early.
//!
//! - `read_timeout` (`rdma.read_timeout_s`): RDMA Reads outstanding and none completed
//!   for that long (a peer that stops answering the Reads of its chunked calls). On
//!   verbs the NIC's own retry limit usually fails such Reads first.
//! - `send_timeout` (`rdma.send_timeout_s`): signaled Sends (replies, with the
//!   unsignaled RDMA Writes posted before them, and callbacks) outstanding and none
//!   completed for that long ([`SendWatch`]). A Send completes only when the peer takes
//!   it: on `soft` when it polls, on verbs when it has a Receive posted. A peer that
//!   posts none gets RNR NAKs, and with `rnr_retry_count` 7 in its CM REQ (which
//!   sets our QP's RNR retry: "infinite") the NIC retries for ever, so without this
//!   rule the connection keeps its reply budget (`super::reply_budget`) of large
//!   buffers as long as the peer likes. Closing moves the QP to the error state: every
//!   outstanding work request completes as a flush and each call's buffers come back
//!   with its Send's flush, once.
//!
//! The same sweep applies `stall_reclaim` (`rdma.stall_reclaim_ms`, `super::reclaim`):
//! while an allocation starves, peers that took too little of what their outstanding
//! Sends hold are closed long before `send_timeout`, and peers that answered too few of
//! the Reads their calls' reassembly buffers wait for long before `read_timeout`.

use std::time::{Duration, Instant};

/// Busy polls between looks at the clock.
pub(super) const SWEEP_POLLS: u32 = 256;
/// Longest interval between two sweeps.
const SWEEP_MAX: Duration = Duration::from_secs(1);
/// Shortest interval between two sweeps.
const SWEEP_MIN: Duration = Duration::from_millis(10);

/// The sweep's cadence.
pub(super) struct Sweep {
    polls: u32,
    every: Duration,
    last: Instant,
}

impl Sweep {
    /// Sweeps every quarter of the shortest of `timeouts`, within 10 ms..=1 s.
    pub(super) fn new(timeouts: &[Duration]) -> Sweep {
        let shortest = timeouts.iter().copied().min().unwrap_or(SWEEP_MAX);
        Sweep {
            polls: 0,
            every: (shortest / 4).clamp(SWEEP_MIN, SWEEP_MAX),
            last: Instant::now(),
        }
    }

    /// Counts one poll; `Some(now)` when a sweep is due.
    pub(super) fn tick(&mut self) -> Option<Instant> {
        self.polls = self.polls.wrapping_add(1);
        if !self.polls.is_multiple_of(SWEEP_POLLS) {
            return None;
        }
        self.due()
    }

    /// Before a sleep: `Some(now)` when a sweep is due.
    pub(super) fn due(&mut self) -> Option<Instant> {
        let now = Instant::now();
        if now.saturating_duration_since(self.last) < self.every {
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

/// Send-side progress of one connection, without reading the clock per completion:
/// completions are counted, and the sweep notes when it first saw Sends outstanding
/// with the count unchanged. A stall is thus declared between `timeout` and
/// `timeout` plus two sweep intervals after the last completion (or after the Sends
/// were posted), never earlier: a peer that completes slowly but steadily is never
/// closed, however long it keeps Sends outstanding.
#[derive(Debug, Default)]
pub(super) struct SendWatch {
    /// Signaled Sends posted and not completed.
    out: u32,
    /// Bytes those Sends and the RDMA Writes before them carry (for the log line).
    bytes: u64,
    /// Completions so far (wrapping: only equality with `seen` matters).
    done: u32,
    /// `done` at the last sweep.
    seen: u32,
    /// The first sweep that saw Sends outstanding and no completion since.
    since: Option<Instant>,
}

impl SendWatch {
    /// A signaled Send (and the Writes chained before it, `bytes` in all) was posted.
    pub(super) fn posted(&mut self, bytes: usize) {
        self.out = self.out.saturating_add(1);
        self.bytes = self.bytes.saturating_add(bytes as u64);
    }

    /// One posted Send completed (success, error or flush), carrying `bytes`.
    pub(super) fn completed(&mut self, bytes: usize) {
        self.out = self.out.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub(bytes as u64);
        self.done = self.done.wrapping_add(1);
    }

    /// Sends outstanding and the bytes they carry.
    pub(super) fn outstanding(&self) -> (u32, u64) {
        (self.out, self.bytes)
    }

    /// At a sweep: `true` when Sends have been outstanding with no completion for at
    /// least `timeout`.
    pub(super) fn stalled(&mut self, now: Instant, timeout: Duration) -> bool {
        if self.out == 0 || self.done != self.seen {
            self.seen = self.done;
            self.since = (self.out > 0).then_some(now);
            return false;
        }
        let since = *self.since.get_or_insert(now);
        now.saturating_duration_since(since) >= timeout
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(30);

    #[test]
    fn nothing_outstanding_never_stalls() {
        let mut w = SendWatch::default();
        let t0 = Instant::now();
        assert!(!w.stalled(t0, T));
        assert!(!w.stalled(t0 + 10 * T, T));
    }

    #[test]
    fn sends_without_completion_stall_after_the_timeout_from_the_first_sweep_seeing_them() {
        let mut w = SendWatch::default();
        let t0 = Instant::now();
        assert!(!w.stalled(t0, T));
        w.posted(1 << 20);
        w.posted(100);
        assert_eq!(w.outstanding(), (2, (1 << 20) + 100));
        // The first sweep after the post starts the clock: never early.
        let t1 = t0 + Duration::from_secs(1);
        assert!(!w.stalled(t1, T));
        assert!(!w.stalled(t1 + T - Duration::from_millis(1), T));
        assert!(w.stalled(t1 + T, T));
    }

    #[test]
    fn any_completion_between_sweeps_restarts_the_clock() {
        let mut w = SendWatch::default();
        let t0 = Instant::now();
        for _ in 0..3 {
            w.posted(10);
        }
        assert!(!w.stalled(t0, T));
        let mut now = t0;
        // One completion per 20 s, new Sends posted meanwhile: steady, never stalled.
        for _ in 0..10 {
            now += Duration::from_secs(20);
            w.completed(10);
            w.posted(10);
            assert!(!w.stalled(now, T));
        }
        assert!(!w.stalled(now + T - Duration::from_millis(1), T));
        assert!(w.stalled(now + T, T));
    }

    #[test]
    fn all_completed_then_new_sends_start_a_new_clock() {
        let mut w = SendWatch::default();
        let t0 = Instant::now();
        w.posted(10);
        assert!(!w.stalled(t0, T));
        w.completed(10);
        assert_eq!(w.outstanding(), (0, 0));
        assert!(!w.stalled(t0 + 2 * T, T));
        w.posted(10);
        let t2 = t0 + 3 * T;
        assert!(!w.stalled(t2, T), "the first sweep seeing them");
        assert!(w.stalled(t2 + T, T));
    }

    #[test]
    fn counts_saturate_and_wrap_without_panic() {
        let mut w = SendWatch {
            out: u32::MAX,
            bytes: u64::MAX,
            done: u32::MAX,
            ..SendWatch::default()
        };
        w.posted(usize::MAX);
        assert_eq!(w.outstanding(), (u32::MAX, u64::MAX));
        w.completed(usize::MAX);
        w.completed(1);
        assert_eq!(w.done, 1);
        let mut z = SendWatch::default();
        z.completed(5);
        assert_eq!(z.outstanding(), (0, 0));
    }
}
