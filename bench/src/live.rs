//! Per-second results while the load runs: the load threads' intervals are merged here
//! once every thread has finished that second, then shown on the live line (stderr, a
//! terminal only) and written to the interval log.

use crate::driver::Interval;
use crate::stats::Stats;
use std::collections::BTreeMap;

/// Collects the threads' per-second stats and releases each second once complete.
pub struct Intervals {
    /// Per thread: the next interval it has not reported yet, or `None` once done.
    next: Vec<Option<u64>>,
    pending: BTreeMap<u64, Stats>,
    released: u64,
}

impl Intervals {
    pub fn new(threads: usize) -> Intervals {
        Intervals {
            next: vec![Some(0); threads],
            pending: BTreeMap::new(),
            released: 0,
        }
    }

    pub fn add(&mut self, iv: Interval) {
        self.pending.entry(iv.index).or_default().merge(&iv.stats);
        if let Some(Some(n)) = self.next.get_mut(iv.thread) {
            *n = (*n).max(iv.index + 1);
        }
    }

    pub fn thread_done(&mut self, thread: usize) {
        if let Some(n) = self.next.get_mut(thread) {
            *n = None;
        }
    }

    /// The seconds every running thread has reported, in order (each once).
    pub fn ready(&mut self) -> Vec<(u64, Stats)> {
        let upto = self
            .next
            .iter()
            .flatten()
            .min()
            .copied()
            .unwrap_or(u64::MAX);
        let mut out = Vec::new();
        while let Some((&i, _)) = self.pending.first_key_value() {
            if i >= upto {
                break;
            }
            let s = self.pending.remove(&i).unwrap_or_default();
            // Seconds nobody reported (every thread idle) are empty, not missing.
            while self.released < i {
                out.push((self.released, Stats::default()));
                self.released += 1;
            }
            out.push((i, s));
            self.released = i + 1;
        }
        out
    }
}

/// The live line for one second (`len` long; the last may be shorter): ops/s, MiB/s
/// and p99 over that second.
pub fn line(index: u64, len: std::time::Duration, s: &Stats) -> String {
    let secs = len.as_secs_f64().max(1e-3);
    let t = s.total();
    let p99 = if t.hist.is_empty() {
        0.0
    } else {
        t.hist.value_at_quantile(0.99) as f64 / 1000.0
    };
    format!(
        "[{:>4}s] {:>10.0} ops/s {:>9.1} MiB/s  p99 {:>9.1} µs  errors {}",
        index + 1,
        t.ops as f64 / secs,
        t.bytes as f64 / (1u64 << 20) as f64 / secs,
        p99,
        t.errors
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Kind;

    fn iv(thread: usize, index: u64, ops: u64) -> Interval {
        let mut stats = Stats::default();
        for _ in 0..ops {
            stats.kind(Kind::Read).record(1000);
        }
        Interval {
            thread,
            index,
            stats,
        }
    }

    #[test]
    fn a_second_is_released_once_every_thread_reported_it() {
        let mut v = Intervals::new(2);
        v.add(iv(0, 0, 3));
        assert!(v.ready().is_empty());
        v.add(iv(1, 0, 2));
        let r = v.ready();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].1.total().ops, 5);
        v.add(iv(0, 1, 1));
        v.add(iv(0, 2, 1));
        assert!(v.ready().is_empty());
        v.thread_done(1);
        let r: Vec<u64> = v.ready().into_iter().map(|(i, _)| i).collect();
        assert_eq!(r, vec![1, 2]);
        v.add(iv(0, 5, 1));
        v.thread_done(0);
        let r: Vec<u64> = v.ready().into_iter().map(|(i, _)| i).collect();
        assert_eq!(r, vec![3, 4, 5]);
        let one = std::time::Duration::from_secs(1);
        assert!(line(0, one, &iv(0, 0, 4).stats).contains(" 4 ops/s"));
        assert!(line(0, one / 2, &iv(0, 0, 4).stats).contains(" 8 ops/s"));
    }
}
