//! Open-loop pacing and the latency arithmetic that keeps it honest.
//!
//! With `--rate`, every connection sends on a fixed schedule: op `k` is *intended* to
//! go out at `start + k / rate`. When the server falls behind, ops wait for a free
//! queue slot, and their latency is measured from the intended time, not from when
//! they finally went out — otherwise a stall would be recorded as one slow op instead
//! of as every op that should have been sent during it (coordinated omission).

use std::time::{Duration, Instant};

/// The send schedule of one connection.
#[derive(Clone, Debug)]
pub struct Schedule {
    start: Instant,
    /// Seconds between intended sends.
    period: f64,
    /// Index of the next op to send.
    next: u64,
}

impl Schedule {
    /// `rate` ops per second from `start` (the first op is due at `start`).
    pub fn new(start: Instant, rate: f64) -> Schedule {
        assert!(rate > 0.0 && rate.is_finite(), "rate must be positive");
        Schedule {
            start,
            period: 1.0 / rate,
            next: 0,
        }
    }

    /// When the next op is intended to go out.
    pub fn next_at(&self) -> Instant {
        self.start + Duration::from_secs_f64(self.next as f64 * self.period)
    }

    /// If the next op is due at `now`, consumes it and returns its intended send time.
    pub fn due(&mut self, now: Instant) -> Option<Instant> {
        let at = self.next_at();
        (at <= now).then(|| {
            self.next += 1;
            at
        })
    }
}

/// Nanoseconds from `from` (the intended send time in open loop, the actual send time
/// in closed loop) to `done`; at least 1 (histograms start at 1).
pub fn latency_ns(from: Instant, done: Instant) -> u64 {
    (done.saturating_duration_since(from).as_nanos() as u64).max(1)
}

/// The one-second interval (counted from `t0`) that `t` falls in.
pub fn interval_of(t0: Instant, t: Instant) -> u64 {
    t.saturating_duration_since(t0).as_secs()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn ops_are_due_on_schedule_and_never_skipped() {
        let t0 = Instant::now();
        let mut s = Schedule::new(t0, 1000.0);
        assert_eq!(s.due(t0), Some(t0));
        assert_eq!(s.due(t0), None, "the second op is due 1 ms later");
        // 5.5 ms later the sender was stalled: ops 1..=5 are all due at once, each with
        // its own intended time (none is dropped or re-timed).
        let late = t0 + MS * 11 / 2;
        let got: Vec<Instant> = std::iter::from_fn(|| s.due(late)).collect();
        assert_eq!(got.len(), 5);
        for (k, at) in got.iter().enumerate() {
            let want = t0 + MS * (k as u32 + 1);
            let diff = at.max(&want).duration_since(*at.min(&want));
            assert!(diff < Duration::from_micros(1), "op {} at {at:?}", k + 1);
        }
        assert!(s.next_at() > late);
    }

    #[test]
    fn latency_counts_from_the_intended_send_time() {
        let t0 = Instant::now();
        let mut s = Schedule::new(t0, 100.0); // every 10 ms
        let _ = s.due(t0);
        // The server stalls for 50 ms: op 1 (intended at 10 ms) is sent at 50 ms and
        // answered at 51 ms. Its latency is 41 ms, not the 1 ms of service time.
        let intended = s.due(t0 + MS * 50).unwrap();
        assert_eq!(latency_ns(intended, t0 + MS * 51), 41_000_000);
        // Rounding never gives zero or negative latency.
        assert_eq!(latency_ns(t0 + MS, t0), 1);
        assert_eq!(latency_ns(t0, t0), 1);
    }

    #[test]
    fn fractional_rates_and_intervals() {
        let t0 = Instant::now();
        let mut s = Schedule::new(t0, 0.5); // one op every 2 s
        assert!(s.due(t0).is_some());
        assert!(s.due(t0 + Duration::from_millis(1999)).is_none());
        assert!(s.due(t0 + Duration::from_secs(2)).is_some());
        assert_eq!(interval_of(t0, t0 + Duration::from_millis(999)), 0);
        assert_eq!(interval_of(t0, t0 + Duration::from_millis(2500)), 2);
        assert_eq!(interval_of(t0 + MS, t0), 0);
    }
}
