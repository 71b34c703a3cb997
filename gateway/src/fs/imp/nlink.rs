//! Directory link counts: 2 + the number of subdirectories (POSIX/Linux: "." and the
//! entry in the parent, plus each child's ".."), which `find` and `fts` use to skip
//! stat calls in leaf directories and pjdfstest checks (rename/24).
//!
//! Object stores keep no such count, so it is counted once from the store
//! (`Backend::count_subdirs`: a readdir on `fs`, delimiter listings on s3/memory) and
//! cached per directory file id. The gateway's own MKDIR/RMDIR/RENAME adjust a cached
//! count in place, so GETATTR on a directory never lists it again while the entry is
//! fresh; entries expire after [`TTL`] so changes made behind the gateway's back (other
//! tools, other gateways on a shared bucket) show within that time. A directory too
//! large to count cheaply (more than `COUNT_LIMIT` entries on a listing store) gets
//! link count 1, the conventional "unknown" that makes `find` stop assuming leaves.
//!
//! Bounded: at `cap` entries the table is emptied (counts are re-read on demand).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a counted value is trusted without re-counting.
pub(super) const TTL: Duration = Duration::from_secs(10);

#[derive(Clone, Copy)]
struct Entry {
    /// Subdirectories, or `None`: too many entries to count.
    subdirs: Option<u64>,
    at: Instant,
}

pub(super) struct SubdirCounts {
    map: Mutex<HashMap<u64, Entry>>,
    cap: usize,
}

impl SubdirCounts {
    pub fn new(cap: usize) -> SubdirCounts {
        SubdirCounts {
            map: Mutex::new(HashMap::new()),
            cap: cap.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cached count of `dir`: `Some(Some(n))` n subdirectories, `Some(None)` too
    /// many to count, `None` unknown or expired (count again and `put`).
    pub fn get(&self, dir: u64) -> Option<Option<u64>> {
        let g = self.lock();
        let e = g.get(&dir)?;
        (e.at.elapsed() < TTL).then_some(e.subdirs)
    }

    pub fn put(&self, dir: u64, subdirs: Option<u64>) {
        let mut g = self.lock();
        if g.len() >= self.cap && !g.contains_key(&dir) {
            g.clear();
        }
        g.insert(
            dir,
            Entry {
                subdirs,
                at: Instant::now(),
            },
        );
    }

    /// A subdirectory appeared in (`delta` = 1) or left (-1) `dir` through this
    /// gateway: a cached count follows (its age is kept: the TTL still bounds how long
    /// outside changes stay unseen).
    pub fn adjust(&self, dir: u64, delta: i64) {
        let mut g = self.lock();
        if let Some(Entry {
            subdirs: Some(n), ..
        }) = g.get_mut(&dir)
        {
            *n = n.saturating_add_signed(delta);
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().len()
    }
}

/// st_nlink of a directory with `subdirs` subdirectories (`None`: unknown → 1).
pub(super) fn dir_nlink(subdirs: Option<u64>) -> u32 {
    match subdirs {
        Some(n) => u32::try_from(n.saturating_add(2)).unwrap_or(u32::MAX),
        None => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_adjust_and_bound() {
        let c = SubdirCounts::new(4);
        assert_eq!(c.get(1), None);
        c.put(1, Some(0));
        c.adjust(1, 1);
        c.adjust(1, 1);
        c.adjust(1, -1);
        assert_eq!(c.get(1), Some(Some(1)));
        c.adjust(1, -5);
        assert_eq!(c.get(1), Some(Some(0)));
        // Unknown counts are not invented by adjustments.
        c.adjust(2, 1);
        assert_eq!(c.get(2), None);
        c.put(3, None);
        c.adjust(3, 1);
        assert_eq!(c.get(3), Some(None));
        for i in 10..100 {
            c.put(i, Some(i));
        }
        assert!(c.len() <= 4);
        assert_eq!(dir_nlink(Some(0)), 2);
        assert_eq!(dir_nlink(Some(u64::MAX)), u32::MAX);
        assert_eq!(dir_nlink(None), 1);
    }
}
