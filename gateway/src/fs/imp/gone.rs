//! Keys this gateway removed a moment ago (REMOVE, RMDIR, RENAME's source): a
//! directory listing that still shows one is confirmed by a HEAD before READDIR
//! answers it (`Inner::list_dir`).
//!
//! Why: a replicated store may list an object it has already deleted. Garage filters
//! each replica's range before it merges them, so a replica that has not yet applied a
//! DELETE still lists the key while a HEAD (a merged read) says "not found" (see
//! `Inner::has_children`). Without this, `rm f; ls` through the gateway could show
//! `f`, whose LOOKUP then fails. It gives this gateway's clients read-your-deletes;
//! a name removed through another gateway is not known here (README, "Several
//! gateways on one bucket"). A key created again since is kept: the HEAD finds it.
//!
//! Bounded: at most `MAX` keys, each kept `KEEP`; the oldest go first.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a removed key is checked for in listings: well past the replication lag
/// of a healthy cluster (Garage applies a DELETE on every replica within
/// milliseconds to seconds).
pub(super) const KEEP: Duration = Duration::from_secs(30);
/// Most keys remembered (a `rm -rf` of a large tree forgets its oldest first).
pub(super) const MAX: usize = 4096;

#[derive(Default)]
pub(super) struct RecentlyGone {
    keys: Mutex<HashMap<String, Instant>>,
}

impl RecentlyGone {
    /// Remembers `key` (a file's key, or a directory's with its trailing '/') as
    /// removed now.
    pub fn note(&self, key: &str) {
        self.note_at(key, Instant::now());
    }

    fn note_at(&self, key: &str, now: Instant) {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        if keys.len() >= MAX {
            keys.retain(|_, t| now.saturating_duration_since(*t) < KEEP);
        }
        if keys.len() >= MAX {
            if let Some(oldest) = keys.iter().min_by_key(|(_, t)| **t).map(|(k, _)| k.clone()) {
                keys.remove(&oldest);
            }
        }
        keys.insert(key.to_string(), now);
    }

    /// The keys under `prefix` removed less than `KEEP` ago, taken under one lock: a
    /// listing checks its entries against them without a lock per entry. Empty (no
    /// allocation) in the common case.
    pub fn under(&self, prefix: &str) -> HashSet<String> {
        self.under_at(prefix, Instant::now())
    }

    fn under_at(&self, prefix: &str, now: Instant) -> HashSet<String> {
        let keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        keys.iter()
            .filter(|(k, t)| k.starts_with(prefix) && now.saturating_duration_since(**t) < KEEP)
            .map(|(k, _)| k.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_expire_and_the_set_stays_bounded() {
        let g = RecentlyGone::default();
        let t0 = Instant::now();
        g.note_at("a/f", t0);
        assert!(g.under_at("a/", t0 + KEEP / 2).contains("a/f"));
        assert!(g.under_at("a/", t0 + KEEP).is_empty());
        assert!(!g.under_at("a/", t0).contains("a/g"));
        assert!(g.under_at("b/", t0).is_empty());
        for i in 0..MAX + 10 {
            g.note_at(&format!("k{i}"), t0 + Duration::from_micros(i as u64));
        }
        let n = g.keys.lock().unwrap().len();
        assert!(n <= MAX, "{n} keys kept");
        // The oldest went first; the newest is there.
        assert!(g.under_at("a/", t0 + Duration::from_millis(1)).is_empty());
        assert!(g
            .under_at("k", t0 + Duration::from_millis(1))
            .contains(&format!("k{}", MAX + 9)));
    }
}
