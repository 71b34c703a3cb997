//! One rate: a token bucket kept as its theoretical arrival time (the GCRA form of a
//! token bucket, ITU-T I.371): one atomic word, so every reactor charges the same
//! bucket without a lock, whichever reactor a client's connections landed on.
//!
//! `tat` is the time (ns on `qos::now_ns`'s clock) at which the bucket would be full
//! again. A call may start when `tat - BURST_NS <= now` (the bucket holds at least
//! `BURST_NS` worth of rate); starting adds its cost (`cost / rate` seconds) to
//! `max(tat, now)`. A cost larger than the burst (a 1 MiB READ on a slow byte rate) is
//! admitted anyway and pushes `tat` into the future: the bucket is in debt, and the
//! next call waits until it is paid.

use std::sync::atomic::{AtomicU64, Ordering};

/// The burst a bucket lets through at once: this long at its rate (100 ms). Long
/// enough that a client pipelining calls is not held at every call, short enough that
/// a rate measured over a second is within 10 % of the limit.
pub const BURST_NS: u64 = 100_000_000;

/// The largest debt one call makes (about 13 days).
const COST_NS_MAX: u64 = 1 << 50;

/// Sharing: `tat` is charged by every reactor (atomic read-modify-write, no lock);
/// `ns_per_unit` is fixed when the rules are built (a reload builds new buckets).
#[derive(Debug)]
pub struct Bucket {
    tat: AtomicU64,
    /// Nanoseconds of rate per unit, 32.32 fixed point (a byte at 10 GiB/s is 0.09 ns).
    ns_per_unit: u64,
}

impl Bucket {
    /// A full bucket of `rate` units per second (`1..=config::RATE_MAX`).
    pub fn new(rate: u64) -> Bucket {
        let rate = rate.max(1);
        Bucket {
            tat: AtomicU64::new(0),
            ns_per_unit: ((1_000_000_000u128 << 32) / u128::from(rate)) as u64,
        }
    }

    /// Nanoseconds a call must wait at `now` before it may start (0: now).
    #[inline]
    pub fn wait(&self, now: u64) -> u64 {
        self.tat
            .load(Ordering::Relaxed)
            .saturating_sub(now.saturating_add(BURST_NS))
    }

    /// Charges `cost` units at `now` (after `wait` said 0): the bucket may go into debt.
    #[inline]
    pub fn charge(&self, now: u64, cost: u64) {
        let ns = (u128::from(cost) * u128::from(self.ns_per_unit)) >> 32;
        // At most COST_NS_MAX: a charge is admitted only when the bucket is nearly
        // full, so `tat` stays below `now` plus a few of these and never wraps.
        let ns = u64::try_from(ns).unwrap_or(u64::MAX).min(COST_NS_MAX);
        // Two read-modify-writes, each atomic: concurrent charges all add up, and a
        // bucket idle since before `now` restarts from `now` (no credit saved up past
        // the burst).
        self.tat.fetch_max(now, Ordering::Relaxed);
        self.tat.fetch_add(ns, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn burst_then_rate() {
        // 1000 ops/s: the 100 ms burst admits 100 calls at once, then one per ms.
        let b = Bucket::new(1000);
        let t = 10 * S;
        let mut n = 0;
        while b.wait(t) == 0 {
            b.charge(t, 1);
            n += 1;
        }
        assert_eq!(n, 101, "burst");
        assert_eq!(b.wait(t), 1_000_000);
        assert_eq!(b.wait(t + 999_999), 1);
        assert_eq!(b.wait(t + 1_000_000), 0, "refilled one call's worth");
    }

    #[test]
    fn rate_over_a_second_is_the_limit() {
        let b = Bucket::new(500);
        let mut t = 5 * S;
        let end = t + S;
        let mut n = 0u64;
        // A client that calls whenever it may: its rate is the limit plus the burst.
        while t < end {
            let w = b.wait(t);
            if w == 0 {
                b.charge(t, 1);
                n += 1;
            } else {
                t += w;
            }
        }
        assert!((500..=551).contains(&n), "{n}");
    }

    #[test]
    fn debt_delays_the_next_call() {
        // 1 MiB/s and a 4 MiB WRITE: admitted (bucket full), then 4 s of debt less
        // the burst before anything else may start.
        let b = Bucket::new(1 << 20);
        let t = 3 * S;
        assert_eq!(b.wait(t), 0);
        b.charge(t, 4 << 20);
        assert_eq!(b.wait(t), 4 * S - BURST_NS);
        assert_eq!(b.wait(t + 4 * S - BURST_NS), 0);
    }

    #[test]
    fn idle_bucket_saves_no_more_than_the_burst() {
        let b = Bucket::new(10);
        b.charge(S, 1);
        // An hour idle: still only the burst (1 call at 10/s) plus one.
        let t = 3600 * S;
        let mut n = 0;
        while b.wait(t) == 0 {
            b.charge(t, 1);
            n += 1;
        }
        assert_eq!(n, 2);
    }

    #[test]
    fn huge_costs_saturate() {
        let b = Bucket::new(1);
        b.charge(0, u64::MAX);
        assert_eq!(b.wait(0), COST_NS_MAX - BURST_NS);
    }

    #[test]
    fn reactors_charge_concurrently() {
        let b = std::sync::Arc::new(Bucket::new(100_000));
        let t = 7 * S;
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let b = b.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        b.charge(t, 1);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        // 40,000 calls at 10 µs each: no charge lost.
        assert_eq!(b.wait(t), 400_000_000 - BURST_NS);
    }
}
