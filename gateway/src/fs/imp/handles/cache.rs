//! The in-memory part of the handle table: a bounded cache of live mappings
//! (fileid ↔ key, generation) over the durable index (`index`), which holds them all.
//!
//! Eviction is CLOCK (second chance): entries sit in a ring in insertion order with a
//! "referenced" bit that a hit sets under the READ lock (an atomic store, no
//! allocation); when the cache is over its bound, the entry at the head is evicted if
//! its bit is clear, else the bit is cleared and it goes round again. Keys are shared
//! `Arc<str>` between both maps, so a lookup by `&str` allocates nothing.
//!
//! The cache is never the only copy of anything: every change is made in the index
//! first, then here (under the index lock, see `HandleTable`), so dropping an entry
//! at any time is always correct.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

struct Slot {
    key: Arc<str>,
    gen: u32,
    hot: AtomicBool,
    /// The version-1 handle MAC of (export, this id, `gen`) for the first export a
    /// handle of it was made through (`mac_of`). The MAC covers nothing else and its
    /// key is fixed for the process (`Inner::mac_key`), so it holds for the slot's
    /// life: a new generation, key or removal of the id is a new slot or none.
    mac: OnceLock<(u16, [u8; 16])>,
}

pub(super) struct Cache {
    by_id: HashMap<u64, Slot>,
    by_key: HashMap<Arc<str>, u64>,
    /// Clock order. May hold ids already removed (skipped) or twice (harmless: an
    /// early eviction); compacted when it grows past twice the bound.
    ring: VecDeque<u64>,
    cap: usize,
    /// Bumped by every change that moves or drops a mapping; a fill read from the
    /// index without the index lock is cached only if no change came in between
    /// (`insert_if`), so a stale read never lands in the cache after its invalidation.
    epoch: u64,
}

impl Cache {
    pub(super) fn new(cap: usize) -> Cache {
        Cache {
            by_id: HashMap::new(),
            by_key: HashMap::new(),
            ring: VecDeque::new(),
            cap: cap.max(1),
            epoch: 0,
        }
    }

    pub(super) fn epoch(&self) -> u64 {
        self.epoch
    }

    pub(super) fn bump(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
    }

    /// `insert` of a mapping read at `epoch`, unless a change came since.
    pub(super) fn insert_if(&mut self, epoch: u64, id: u64, gen: u32, key: &str) {
        if self.epoch == epoch {
            self.insert(id, gen, key);
        }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.by_id.len()
    }

    /// (fileid, generation) of a cached key; marks it used.
    pub(super) fn by_key(&self, key: &str) -> Option<(u64, u32)> {
        let id = *self.by_key.get(key)?;
        let s = self.by_id.get(&id)?;
        s.hot.store(true, Ordering::Relaxed);
        Some((id, s.gen))
    }

    /// (key, generation) of a cached fileid; marks it used.
    pub(super) fn by_id(&self, id: u64) -> Option<(String, u32)> {
        let s = self.by_id.get(&id)?;
        s.hot.store(true, Ordering::Relaxed);
        Some((s.key.to_string(), s.gen))
    }

    /// The generation of cached `id` when `key` is its key, and the version-1
    /// handle MAC of (`export`, `id`, that generation): `mac` computes it the first
    /// time, then the slot keeps it (one export's per slot: another export's, a
    /// nested export's handle of the same file, is computed each time). Marks it
    /// used. Every listing hands out a handle per entry, and the MAC was most of
    /// its cost (docs/performance.md "Cold listings, shared").
    pub(super) fn mac_of(
        &self,
        id: u64,
        key: &str,
        export: u16,
        mac: impl FnOnce(u32) -> [u8; 16],
    ) -> Option<(u32, [u8; 16])> {
        let s = self.by_id.get(&id)?;
        if &*s.key != key {
            return None;
        }
        s.hot.store(true, Ordering::Relaxed);
        let m = match s.mac.get() {
            Some((e, m)) if *e == export => *m,
            Some(_) => mac(s.gen),
            None => {
                let m = mac(s.gen);
                // A racing thread computed the same MAC: either is kept.
                let _ = s.mac.set((export, m));
                m
            }
        };
        Some((s.gen, m))
    }

    /// Caches id ↔ key (replacing whatever either was mapped to), evicting as needed.
    pub(super) fn insert(&mut self, id: u64, gen: u32, key: &str) {
        self.remove_id(id);
        if let Some(old) = self.by_key.get(key).copied() {
            self.remove_id(old);
        }
        let key: Arc<str> = Arc::from(key);
        self.by_key.insert(key.clone(), id);
        self.by_id.insert(
            id,
            Slot {
                key,
                gen,
                hot: AtomicBool::new(false),
                mac: OnceLock::new(),
            },
        );
        self.ring.push_back(id);
        self.evict();
    }

    /// CLOCK: each pass clears at most every bit once, so this ends.
    fn evict(&mut self) {
        while self.by_id.len() > self.cap {
            let Some(id) = self.ring.pop_front() else {
                break;
            };
            match self.by_id.get(&id) {
                Some(s) if s.hot.swap(false, Ordering::Relaxed) => self.ring.push_back(id),
                Some(_) => self.remove_id(id),
                None => {}
            }
        }
        if self.ring.len() > self.cap.saturating_mul(2).saturating_add(64) {
            let mut seen = HashSet::new();
            let by_id = &self.by_id;
            self.ring
                .retain(|id| by_id.contains_key(id) && seen.insert(*id));
        }
    }

    pub(super) fn remove_id(&mut self, id: u64) {
        if let Some(s) = self.by_id.remove(&id) {
            self.by_key.remove(&s.key);
        }
    }

    pub(super) fn remove_key(&mut self, key: &str) {
        if let Some(id) = self.by_key.get(key).copied() {
            self.remove_id(id);
        }
    }

    /// Drops every entry whose key starts with one of `prefixes` (they are reloaded
    /// from the index on demand).
    pub(super) fn remove_prefixes(&mut self, prefixes: &[&str]) {
        let ids: Vec<u64> = self
            .by_id
            .iter()
            .filter(|(_, s)| prefixes.iter().any(|p| s.key.starts_with(p)))
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.remove_id(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_keeps_the_bound_and_spares_used_entries() {
        let mut c = Cache::new(3);
        c.insert(10, 1, "a");
        c.insert(11, 1, "b");
        c.insert(12, 1, "c");
        assert!(c.by_key("a").is_some()); // a gets a second chance
        c.insert(13, 1, "d");
        assert_eq!(c.len(), 3);
        assert!(c.by_key("a").is_some(), "used entry kept");
        assert!(c.by_key("b").is_none(), "unused head evicted");
        // Replacing a key's id drops the old id; re-keying an id drops the old key.
        c.insert(14, 2, "a");
        assert!(c.by_id(10).is_none());
        c.insert(14, 2, "z");
        assert!(c.by_key("a").is_none());
        assert_eq!(c.by_id(14), Some(("z".to_string(), 2)));
        // The ring stays bounded under churn.
        for i in 0..1000u64 {
            c.insert(100 + i % 5, 1, &format!("k{}", i % 7));
        }
        assert!(c.ring.len() <= 3 * 2 + 64 + 1);
        c.remove_prefixes(&["k"]);
        assert!(c.by_id.keys().all(|id| *id < 100));
    }

    /// The MAC is computed once per mapping and export and kept (what makes a
    /// listing's handles cheap); a re-keyed or re-generated id, or another export,
    /// computes it again.
    #[test]
    fn a_mapping_keeps_its_first_exports_mac() {
        use std::cell::Cell;
        let mut c = Cache::new(10);
        c.insert(5, 1, "a");
        let made = Cell::new(0);
        let made = &made;
        let mac = |export: u16| {
            move |gen: u32| {
                made.set(made.get() + 1);
                [gen as u8 ^ export as u8; 16]
            }
        };
        assert_eq!(c.mac_of(5, "a", 0, mac(0)), Some((1, [1; 16])));
        assert_eq!(c.mac_of(5, "a", 0, mac(0)), Some((1, [1; 16])));
        assert_eq!(made.get(), 1, "computed once, then kept");
        assert_eq!(c.mac_of(5, "a", 3, mac(3)), Some((1, [2; 16])));
        assert_eq!(c.mac_of(5, "a", 3, mac(3)), Some((1, [2; 16])));
        assert_eq!(made.get(), 3, "another export's is computed each time");
        assert_eq!(c.mac_of(5, "b", 0, mac(0)), None, "not this key's id");
        c.insert(5, 2, "a"); // a new generation of the id: a new slot
        assert_eq!(c.mac_of(5, "a", 0, mac(0)), Some((2, [2; 16])));
        assert_eq!(made.get(), 4);
    }

    #[test]
    fn a_fill_read_before_a_change_is_not_cached() {
        let mut c = Cache::new(10);
        let e = c.epoch();
        c.insert_if(e, 5, 1, "a");
        assert!(c.by_id(5).is_some());
        let e = c.epoch();
        c.bump(); // a rename came between the read and the fill
        c.insert_if(e, 6, 1, "old-name");
        assert!(c.by_id(6).is_none());
    }
}
