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
//!
//! Cost: every listing page asks for the keys under its directory (`under`) and every
//! REMOVE, RMDIR and RENAME notes one, all under one lock shared by the workers. So
//! neither scans the whole set: keys are held in key order (the keys under a prefix
//! are one range, `O(log n + k)` for the `k` under it, at any depth: a listing of the
//! export root still walks every key remembered), and numbered in the order noted
//! (the cap pops the oldest, expiry at most `EXPIRE_PER_CALL` per call). A scan of
//! up to `MAX` keys per call under the lock was a serialisation of every listing,
//! MKDIR (its new directory's first listing, `server::worker::learned_empty`), REMOVE
//! and RMDIR once a few thousand names had been removed (docs/performance.md, "Mkdir
//! and rmdir, second pass").

use std::collections::{BTreeMap, HashSet};
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
    inner: Mutex<Keys>,
}

#[derive(Default)]
struct Keys {
    /// Key → when it was last noted and that noting's number, in key order: `under`
    /// is a range.
    by_key: BTreeMap<String, (Instant, u64)>,
    /// Noting number → key, oldest first: exactly one entry per key of `by_key` (a
    /// key noted again leaves its older number), so `MAX` bounds distinct keys, as
    /// the set did before it was ordered. Numbers are taken under the lock with the
    /// time, so the oldest number is also the oldest time.
    by_age: BTreeMap<u64, String>,
    next: u64,
    /// Entries looked at by the last call (tests: no call scans the set).
    visited: usize,
}

/// Most expired keys one call forgets: the first call after a quiet `KEEP` does not
/// free thousands under the lock (the rest go at the next calls; `under` filters by
/// time anyway).
const EXPIRE_PER_CALL: usize = 64;

impl Keys {
    /// Forgets the oldest noted key.
    fn pop_oldest(&mut self) {
        if let Some((_, k)) = self.by_age.pop_first() {
            self.by_key.remove(&k);
            self.visited += 1;
        }
    }

    /// Forgets (up to `EXPIRE_PER_CALL` of) what was noted `KEEP` ago or earlier.
    fn expire(&mut self, now: Instant) {
        for _ in 0..EXPIRE_PER_CALL {
            let old = self
                .by_age
                .first_key_value()
                .and_then(|(_, k)| self.by_key.get(k))
                .is_some_and(|(t, _)| now.saturating_duration_since(*t) >= KEEP);
            if !old {
                return;
            }
            self.pop_oldest();
        }
    }

    /// Remembers `key` as removed at `now`, in place of an earlier noting of it.
    fn note(&mut self, key: &str, now: Instant) {
        self.visited = 0;
        self.expire(now);
        if let Some((_, n)) = self.by_key.remove(key) {
            self.by_age.remove(&n);
        }
        while self.by_age.len() >= MAX {
            self.pop_oldest();
        }
        let n = self.next;
        self.next += 1;
        self.by_key.insert(key.to_string(), (now, n));
        self.by_age.insert(n, key.to_string());
    }
}

impl RecentlyGone {
    fn lock(&self) -> std::sync::MutexGuard<'_, Keys> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remembers `key` (a file's key, or a directory's with its trailing '/') as
    /// removed now.
    pub fn note(&self, key: &str) {
        let mut keys = self.lock();
        // The time under the lock: notings are numbered in time order.
        keys.note(key, Instant::now());
    }

    #[cfg(test)]
    fn note_at(&self, key: &str, now: Instant) {
        self.lock().note(key, now);
    }

    /// The keys under `prefix` removed less than `KEEP` ago, taken under one lock: a
    /// listing checks its entries against them without a lock per entry. Empty (no
    /// allocation) in the common case.
    pub fn under(&self, prefix: &str) -> HashSet<String> {
        self.under_at(prefix, Instant::now())
    }

    fn under_at(&self, prefix: &str, now: Instant) -> HashSet<String> {
        let mut keys = self.lock();
        let mut out = HashSet::new();
        // Every key starting with `prefix` sorts at or after it, and they are
        // contiguous: the range stops at the first key that does not start with it.
        let mut seen = 0usize;
        for (k, (t, _)) in keys.by_key.range::<str, _>((
            std::ops::Bound::Included(prefix),
            std::ops::Bound::Unbounded,
        )) {
            seen += 1;
            if !k.starts_with(prefix) {
                break;
            }
            if now.saturating_duration_since(*t) < KEEP {
                out.insert(k.clone());
            }
        }
        keys.visited = seen;
        out
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
        let n = g.lock().by_key.len();
        assert!(n <= MAX, "{n} keys kept");
        assert!(g.lock().by_age.len() <= MAX);
        // The oldest went first; the newest is there.
        assert!(g.under_at("a/", t0 + Duration::from_millis(1)).is_empty());
        assert!(g
            .under_at("k", t0 + Duration::from_millis(1))
            .contains(&format!("k{}", MAX + 9)));
        assert!(!g
            .under_at("k", t0 + Duration::from_millis(1))
            .contains("k0"));
    }

    /// `under` gives exactly the keys that start with the prefix (deeper ones too),
    /// not a sibling sharing its first bytes, nor the prefix's own parent.
    #[test]
    fn under_is_exactly_the_keys_starting_with_the_prefix() {
        let g = RecentlyGone::default();
        let t0 = Instant::now();
        for k in [
            "a", "a/", "a/f", "a/d/", "a/d/g", "a0/f", "a./f", "ab/f", "b/f", "/",
        ] {
            g.note_at(k, t0);
        }
        let mut got: Vec<String> = g.under_at("a/", t0).into_iter().collect();
        got.sort();
        assert_eq!(got, ["a/", "a/d/", "a/d/g", "a/f"]);
        assert_eq!(g.under_at("a/d/", t0).len(), 2);
        assert_eq!(g.under_at("", t0).len(), 10, "the root's prefix covers all");
        assert!(g.under_at("c/", t0).is_empty());
    }

    /// A key noted again is kept from its latest noting: the older noting's expiry
    /// or eviction does not take it.
    #[test]
    fn a_key_noted_again_lives_from_its_last_noting() {
        let g = RecentlyGone::default();
        let t0 = Instant::now();
        g.note_at("d/f", t0);
        g.note_at("d/f", t0 + KEEP / 2);
        // The first noting has expired (and is popped by this note); the second not.
        g.note_at("x", t0 + KEEP);
        assert!(g.under_at("d/", t0 + KEEP).contains("d/f"));
        assert!(g.under_at("d/", t0 + KEEP + KEEP / 2).is_empty());
        // At the cap, popping its older noting (the oldest) does not take it.
        let g = RecentlyGone::default();
        let t1 = t0 + Duration::from_micros(1);
        g.note_at("d/f", t0);
        g.note_at("d/f", t1);
        for i in 2..MAX {
            g.note_at(&format!("k{i}"), t1);
        }
        g.note_at("z", t1);
        assert!(g.under_at("d/", t1).contains("d/f"));
        assert_eq!(g.lock().by_age.len(), MAX);
        // The next note pops d/f's live noting: the oldest key goes first.
        g.note_at("z2", t1);
        assert!(g.under_at("d/", t1).is_empty());
    }

    /// Neither a listing's look nor a removal's note scans the set: with `MAX` keys
    /// held, `under` of a directory holding none of them looks at one entry, and a
    /// note at the cap pops one (before, both walked all `MAX` under the lock that
    /// every worker's listing, REMOVE and RMDIR share).
    #[test]
    fn no_call_scans_the_remembered_keys() {
        let g = RecentlyGone::default();
        let t0 = Instant::now();
        for i in 0..MAX {
            g.note_at(&format!("run/conn.{}/f.{i}", i % 4), t0);
        }
        let visited = || g.lock().visited;
        assert!(g.under_at("new-dir/", t0).is_empty());
        assert!(visited() <= 1, "a listing looked at {} keys", visited());
        assert_eq!(g.under_at("run/conn.1/", t0).len(), MAX / 4);
        assert!(visited() <= MAX / 4 + 1, "looked at {}", visited());
        g.note_at("run/conn.0/another", t0 + Duration::from_millis(1));
        assert!(visited() <= 1, "a removal looked at {} keys", visited());
        assert_eq!(g.lock().by_key.len(), MAX);
    }

    /// `MAX` bounds distinct keys, not notings: a few names removed again and again
    /// (a lock file, an editor's swap file) do not push out a tree removed a moment
    /// before (with one entry per noting they did, within seconds).
    #[test]
    fn names_removed_again_and_again_do_not_push_out_other_keys() {
        let g = RecentlyGone::default();
        let t0 = Instant::now();
        for i in 0..3000 {
            g.note_at(&format!("tree/f{i}"), t0);
        }
        for i in 0..10 * MAX {
            let t = t0 + Duration::from_micros(i as u64);
            g.note_at(&format!("run/lock{}", i % 10), t);
        }
        let later = t0 + Duration::from_secs(1);
        assert_eq!(g.under_at("tree/", later).len(), 3000);
        assert_eq!(g.under_at("run/", later).len(), 10);
        let k = g.lock();
        assert_eq!((k.by_key.len(), k.by_age.len()), (3010, 3010));
    }

    /// The first call after a quiet `KEEP` forgets at most `EXPIRE_PER_CALL` keys
    /// under the lock; the rest go at later calls and are never listed meanwhile.
    #[test]
    fn expiry_is_spread_over_calls() {
        let g = RecentlyGone::default();
        let t0 = Instant::now();
        for i in 0..1000 {
            g.note_at(&format!("old/f{i}"), t0);
        }
        let t1 = t0 + KEEP;
        g.note_at("new", t1);
        assert!(g.lock().visited <= EXPIRE_PER_CALL);
        assert!(g.under_at("old/", t1).is_empty());
        for _ in 0..1000 / EXPIRE_PER_CALL + 1 {
            g.note_at("new", t1);
        }
        assert_eq!(g.lock().by_key.len(), 1);
    }
}
