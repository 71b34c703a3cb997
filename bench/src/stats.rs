//! Counters and latency histograms per op type. Each load thread keeps its own (no
//! sharing on the hot path); they are merged once at the end, and once a second for the
//! live line and the interval log.

use crate::workload::{Kind, ALL_KINDS, KINDS};
use hdrhistogram::Histogram;

/// Latencies are recorded in nanoseconds, 1 ns .. 60 s, 3 significant digits.
pub const HIST_MAX_NS: u64 = 60_000_000_000;

pub fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIST_MAX_NS, 3).expect("valid histogram bounds")
}

/// What one op type (or all of them) did.
#[derive(Clone, Debug)]
pub struct OpStats {
    pub hist: Histogram<u64>,
    /// Completed calls, failed ones included.
    pub ops: u64,
    /// Calls that failed: RPC or transport errors, and NFS status other than OK.
    pub errors: u64,
    /// Payload bytes moved (READ data returned, WRITE data acknowledged).
    pub bytes: u64,
    /// Bytes checked against the pattern and found right.
    pub verified_bytes: u64,
    /// Reads (or read-backs of written blocks) whose data was not the pattern.
    pub verify_failures: u64,
    /// Resends after NFS3ERR_JUKEBOX / NFS4ERR_DELAY (not errors; see `jukebox.rs`).
    pub jukebox: u64,
}

impl Default for OpStats {
    fn default() -> Self {
        OpStats {
            hist: new_hist(),
            ops: 0,
            errors: 0,
            bytes: 0,
            verified_bytes: 0,
            verify_failures: 0,
            jukebox: 0,
        }
    }
}

impl OpStats {
    pub fn record(&mut self, latency_ns: u64) {
        self.ops += 1;
        self.hist.saturating_record(latency_ns.min(HIST_MAX_NS));
    }

    pub fn merge(&mut self, o: &OpStats) {
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.hist.add(&o.hist);
        self.ops += o.ops;
        self.errors += o.errors;
        self.bytes += o.bytes;
        self.verified_bytes += o.verified_bytes;
        self.verify_failures += o.verify_failures;
        self.jukebox += o.jukebox;
    }
}

/// [`OpStats`] per op type; only types that ran have an entry.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    per: [Option<Box<OpStats>>; KINDS],
}

impl Stats {
    pub fn kind(&mut self, k: Kind) -> &mut OpStats {
        self.per[k.index()].get_or_insert_with(Default::default)
    }

    pub fn get(&self, k: Kind) -> Option<&OpStats> {
        self.per[k.index()].as_deref()
    }

    /// The op types with an entry, in report order, and their stats.
    pub fn iter(&self) -> impl Iterator<Item = (Kind, &OpStats)> {
        ALL_KINDS
            .into_iter()
            .filter_map(|k| self.get(k).map(|s| (k, s)))
    }

    pub fn merge(&mut self, o: &Stats) {
        for (k, s) in o.iter() {
            self.kind(k).merge(s);
        }
    }

    /// All op types together.
    pub fn total(&self) -> OpStats {
        let mut t = OpStats::default();
        for (_, s) in self.iter() {
            t.merge(s);
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_thread_stats_merge() {
        let mut a = Stats::default();
        a.kind(Kind::Read).record(1_000);
        a.kind(Kind::Read).bytes += 4096;
        let mut b = Stats::default();
        b.kind(Kind::Read).record(3_000);
        b.kind(Kind::Write).record(2_000);
        b.kind(Kind::Write).errors += 1;
        a.merge(&b);
        let r = a.get(Kind::Read).unwrap();
        assert_eq!((r.ops, r.bytes, r.hist.len()), (2, 4096, 2));
        assert!(a.get(Kind::Getattr).is_none());
        let kinds: Vec<Kind> = a.iter().map(|(k, _)| k).collect();
        assert_eq!(kinds, vec![Kind::Read, Kind::Write]);
        let t = a.total();
        assert_eq!((t.ops, t.errors, t.hist.len()), (3, 1, 3));
        assert!(t.hist.max() >= 2_990 && t.hist.max() <= 3_010);
        // Absurd latencies saturate at the top instead of failing.
        let mut s = OpStats::default();
        s.record(u64::MAX);
        assert_eq!(s.ops, 1);
    }
}
