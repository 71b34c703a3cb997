//! Fixed log2 latency buckets: bucket `i` holds calls that took at most 2^i µs
//! (1 µs .. 4.19 s), the last one everything slower. Fixed bounds keep recording to
//! one index computation and two single-writer stores, and let readers subtract two
//! scrapes bucket by bucket (the `top` view's p99).

use std::sync::atomic::{AtomicU64, Ordering};

/// Finite buckets (upper bounds 2^0 .. 2^22 µs) plus +Inf.
pub const BUCKETS: usize = 24;

/// Upper bound of bucket `i` in microseconds (`None` for +Inf).
pub fn upper_us(i: usize) -> Option<u64> {
    (i + 1 < BUCKETS).then(|| 1u64 << i)
}

/// The bucket of a duration: the smallest `i` with `ns <= 2^i µs`.
#[inline]
pub fn bucket_of(ns: u64) -> usize {
    // Whole microseconds, rounded up, so a bound is inclusive ("le").
    let us = ns.div_ceil(1000);
    if us <= 1 {
        return 0;
    }
    let i = (64 - (us - 1).leading_zeros()) as usize;
    i.min(BUCKETS - 1)
}

/// One latency histogram. Written by one reactor only (relaxed load + store, no
/// locked instruction); read by the stats thread.
#[derive(Debug)]
pub struct Hist {
    buckets: [AtomicU64; BUCKETS],
    sum_ns: AtomicU64,
}

impl Default for Hist {
    fn default() -> Self {
        Hist::new()
    }
}

/// Single-writer increment (see engine::reactor::Counters::add).
#[inline]
pub(crate) fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

impl Hist {
    /// An empty histogram (const: process-wide tables of them are statics).
    pub const fn new() -> Hist {
        Hist {
            buckets: [const { AtomicU64::new(0) }; BUCKETS],
            sum_ns: AtomicU64::new(0),
        }
    }

    /// Records one event from any thread (`fetch_add`: for histograms several threads
    /// write, such as the backend workers' `stats::backend_ops`).
    #[inline]
    pub fn record_shared(&self, ns: u64) {
        self.buckets[bucket_of(ns)].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Records one call. Only the owning reactor may call this.
    #[inline]
    pub fn record(&self, ns: u64) {
        self.record_at(bucket_of(ns), ns);
    }

    /// Records one call whose bucket (`bucket_of(ns)`) the caller computed once for
    /// several histograms (the per-client and per-export ones).
    #[inline]
    pub fn record_at(&self, bucket: usize, ns: u64) {
        if let Some(b) = self.buckets.get(bucket) {
            bump(b, 1);
        }
        bump(&self.sum_ns, ns);
    }

    /// Per-bucket counts (not cumulative) and the sum in ns.
    pub fn read(&self) -> ([u64; BUCKETS], u64) {
        let mut b = [0u64; BUCKETS];
        for (o, c) in b.iter_mut().zip(&self.buckets) {
            *o = c.load(Ordering::Relaxed);
        }
        (b, self.sum_ns.load(Ordering::Relaxed))
    }
}

/// The upper bound (µs) of the bucket holding quantile `q` of per-bucket counts, or
/// `None` when empty. `u64::MAX` stands for the +Inf bucket.
pub fn quantile_us(counts: &[u64], q: f64) -> Option<u64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = ((total as f64) * q).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, c) in counts.iter().enumerate() {
        seen += c;
        if seen >= rank {
            return Some(upper_us(i).unwrap_or(u64::MAX));
        }
    }
    Some(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_inclusive_powers_of_two_microseconds() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1), 0);
        assert_eq!(bucket_of(1000), 0);
        assert_eq!(bucket_of(1001), 1);
        assert_eq!(bucket_of(2000), 1);
        assert_eq!(bucket_of(2001), 2);
        assert_eq!(bucket_of(4000), 2);
        assert_eq!(bucket_of(4001), 3);
        assert_eq!(bucket_of(1_000_000), 10); // 1 ms <= 1024 µs
        assert_eq!(bucket_of(4_194_304_000), 22);
        assert_eq!(bucket_of(4_194_304_001), BUCKETS - 1);
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        for i in 0..BUCKETS - 1 {
            let ub = upper_us(i).unwrap();
            assert_eq!(bucket_of(ub * 1000), i, "bound of bucket {i}");
            assert_eq!(bucket_of(ub * 1000 + 1), i + 1);
        }
        assert_eq!(upper_us(BUCKETS - 1), None);
    }

    #[test]
    fn records_and_sums() {
        let h = Hist::default();
        h.record(500);
        h.record(3_000);
        h.record(10_000_000_000);
        let (b, sum) = h.read();
        assert_eq!(b[0], 1);
        assert_eq!(b[2], 1);
        assert_eq!(b[BUCKETS - 1], 1);
        assert_eq!(b.iter().sum::<u64>(), 3);
        assert_eq!(sum, 10_000_003_500);
    }

    #[test]
    fn quantiles_from_counts() {
        let mut c = [0u64; BUCKETS];
        assert_eq!(quantile_us(&c, 0.99), None);
        c[3] = 99;
        c[10] = 1;
        assert_eq!(quantile_us(&c, 0.5), Some(8));
        assert_eq!(quantile_us(&c, 0.99), Some(8));
        assert_eq!(quantile_us(&c, 1.0), Some(1024));
        c[BUCKETS - 1] = 100;
        assert_eq!(quantile_us(&c, 0.99), Some(u64::MAX));
    }
}
