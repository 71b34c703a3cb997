//! The change attribute's forward-only rule (RFC 8881 §5.8.1.4: "the value of the
//! change attribute MUST change ... whenever the file's data or metadata changes"; a
//! client orders values it sees, so within a run they only move forward).
//!
//! The raw value is ctime in nanoseconds. It can move backwards: on s3 the sub-second
//! part of an object's time comes from its ETag (see `Inner::attr`), a clock can step
//! back, and metadata written by other tools can carry an older ctime. Per file id
//! this table remembers the last raw value seen and the value answered: a raw value
//! that differs from the last one seen answers the larger of itself and the last
//! answer + 1, so every change is seen as a later one; an unchanged raw value answers
//! the same as before.
//!
//! Bounded: `SHARDS` maps of at most `cap / SHARDS` files each; a full shard is
//! emptied (its files start again from their raw values, which is what a restart
//! does too).

use std::collections::HashMap;
use std::sync::Mutex;

const SHARDS: usize = 16;

pub(super) struct ChangeGuard {
    shards: Vec<Mutex<HashMap<u64, (u64, u64)>>>,
    per_shard: usize,
}

impl ChangeGuard {
    pub fn new(cap: usize) -> ChangeGuard {
        ChangeGuard {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            per_shard: (cap / SHARDS).max(1),
        }
    }

    /// The change attribute of file `fileid` whose raw value (ctime ns) is now `raw`.
    pub fn observe(&self, fileid: u64, raw: u64) -> u64 {
        // File ids are hashes (see `handles`): their low bits spread well.
        let shard = &self.shards[(fileid % SHARDS as u64) as usize];
        let mut g = shard.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((seen, out)) = g.get_mut(&fileid) {
            if *seen != raw {
                *out = raw.max(out.saturating_add(1));
                *seen = raw;
            }
            return *out;
        }
        if g.len() >= self.per_shard {
            g.clear();
        }
        g.insert(fileid, (raw, raw));
        raw
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forward_only_and_stable_and_bounded() {
        let g = ChangeGuard::new(64);
        assert_eq!(g.observe(1, 1000), 1000);
        assert_eq!(g.observe(1, 1000), 1000);
        // A later raw value is taken as it is.
        assert_eq!(g.observe(1, 2000), 2000);
        // An earlier one (s3 same-second rewrite, clock step) still moves forward...
        assert_eq!(g.observe(1, 1500), 2001);
        // ...and stays put while the raw value does.
        assert_eq!(g.observe(1, 1500), 2001);
        assert_eq!(g.observe(1, 1400), 2002);
        assert_eq!(g.observe(1, 9000), 9000);
        assert_eq!(g.observe(1, u64::MAX), u64::MAX);
        assert_eq!(g.observe(1, 5), u64::MAX);
        // Files are independent.
        assert_eq!(g.observe(2, 7), 7);
        for id in 0..10_000u64 {
            g.observe(id, id);
        }
        let total: usize = g.shards.iter().map(|s| s.lock().unwrap().len()).sum();
        assert!(total <= 64, "{total}");
    }
}
