//! Per-directory change state: a change counter (it feeds the readdir cookie
//! verifier and the sub-second part of a directory's times) and the time of the last
//! namespace change the gateway made in the directory.
//!
//! POSIX: creating, removing or renaming an entry marks the parent's st_mtime and
//! st_ctime for update. Object stores keep no directory times that move with their
//! children (an S3 marker's Last-Modified is its creation), so the file model shows
//! max(stored time, last change) for both and persists the result into the marker's
//! metadata the next time it writes that metadata anyway (SETATTR). Across a restart
//! the in-memory part is lost and a directory shows its stored times again.
//!
//! Bounded: at `cap` directories the oldest eighth (by last change) is dropped and
//! the verifier epoch moves on, so no cookie verifier of a dropped directory can come
//! back with an older listing behind it.

use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Change {
    /// Namespace changes made in the directory since it was (re)tracked.
    pub count: u64,
    /// Time of the last one (ns since the epoch), 0 when settled or none.
    pub at_ns: u64,
}

pub(super) struct DirChanges {
    map: Mutex<(HashMap<u64, Change>, u64)>,
    cap: usize,
}

impl DirChanges {
    pub fn new(cap: usize) -> DirChanges {
        DirChanges {
            map: Mutex::new((HashMap::new(), 0)),
            cap: cap.max(8),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (HashMap<u64, Change>, u64)> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn get(&self, dir: u64) -> Change {
        self.lock().0.get(&dir).copied().unwrap_or_default()
    }

    /// The counter and the eviction epoch (what the eviction test observes).
    #[cfg(test)]
    pub fn verf_input(&self, dir: u64) -> (u64, u64) {
        let g = self.lock();
        (g.0.get(&dir).map_or(0, |c| c.count), g.1)
    }

    /// A namespace change in `dir` at `now_ns`. The change time only moves forward,
    /// by at least 1 ns per change (it feeds the change attribute, which must move
    /// with every change even when the clock has not ticked).
    pub fn bump(&self, dir: u64, now_ns: u64) {
        let mut g = self.lock();
        let (map, epoch) = &mut *g;
        if !map.contains_key(&dir) && map.len() >= self.cap {
            let mut ages: Vec<u64> = map.values().map(|c| c.at_ns).collect();
            let cut = ages.len() / 8;
            let (_, limit, _) = ages.select_nth_unstable(cut);
            let limit = *limit;
            map.retain(|_, c| c.at_ns > limit);
            *epoch = epoch.wrapping_add(1);
        }
        let c = map.entry(dir).or_default();
        c.count = c.count.wrapping_add(1);
        c.at_ns = c.at_ns.saturating_add(1).max(now_ns);
    }

    /// The last change time of `dir` is now part of its stored metadata.
    pub fn settle(&self, dir: u64) {
        if let Some(c) = self.lock().0.get_mut(&dir) {
            c.at_ns = 0;
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_times_and_settles() {
        let d = DirChanges::new(100);
        assert_eq!(d.get(5), Change::default());
        d.bump(5, 1000);
        d.bump(5, 900);
        assert_eq!(
            d.get(5),
            Change {
                count: 2,
                at_ns: 1001
            }
        );
        d.settle(5);
        assert_eq!(d.get(5), Change { count: 2, at_ns: 0 });
        d.bump(6, 7);
        d.bump(6, 7);
        assert_eq!(d.get(6).at_ns, 8);
    }

    #[test]
    fn bounded_and_verifiers_move_on_eviction() {
        let d = DirChanges::new(16);
        for i in 0..16u64 {
            d.bump(i, 1000 + i);
        }
        let before = d.verf_input(15);
        d.bump(100, 5000);
        assert!(d.len() <= 16);
        // The oldest went, the newest stayed, and the epoch changed.
        assert_eq!(d.get(0), Change::default());
        assert_eq!(d.get(100).count, 1);
        assert_ne!(d.verf_input(15), before);
        for i in 0..10_000u64 {
            d.bump(1_000 + i, i);
        }
        assert!(d.len() <= 16);
    }
}
