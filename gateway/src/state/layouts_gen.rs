//! Each file's *data generation* at the metadata server: the 16 bits a layout's
//! synthetic gid carries to the data servers (`crate::fence`), which drop what they
//! cached of the file when they meet one they have not seen
//! (`fs::FileModel::fresh_data`). It closes the close-to-open gap between data
//! servers (README "On one S3 bucket"): a reader whose layout names data server B
//! after a writer's data went through A must not be answered from B's caches of
//! before that data was committed.
//!
//! When it moves: at a LAYOUTGET, if an RW layout of the file was held at any time
//! since the previous grant (so data may have been written through a data server
//! and committed: a DS COMMIT this server never sees, then LAYOUTCOMMIT, CLOSE or
//! LAYOUTRETURN), or if the file's attributes as this server sees them now differ
//! from those at the previous grant (a LAYOUTCOMMIT's size or mtime, a write through
//! this server or another gateway, a truncate). A grant that leaves no RW layout
//! held clears the mark. So a layout granted after a writer's last commit carries a
//! generation no layout granted before that commit carried, and every data server
//! that still has the old data cached drops it before it answers that layout.
//!
//! Kept in memory, bounded (`MAX`: the map starts over when full). A file this
//! server has no entry for (first grant, after a restart or eviction) starts at a
//! per-process random generation: equal to one a data server saw before with
//! probability 2^-15 (it keeps two), the one way a stale answer remains (then
//! bounded as before: `cache::ATTR_TTL` + the store's HEAD cache, ~2 s).

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Mutex;

/// Files with an entry at most (then the map starts over).
const MAX: usize = 1 << 16;

#[derive(Clone, Copy)]
struct Entry {
    gen: u16,
    /// The attributes' digest at the last grant.
    attrs: u64,
    /// An RW layout was held since the last grant (or is held).
    written: bool,
}

/// The data generations of the files layouts were granted for.
pub struct DataGens {
    seed: std::hash::RandomState,
    map: Mutex<HashMap<u64, Entry>>,
}

impl Default for DataGens {
    fn default() -> Self {
        DataGens {
            seed: std::hash::RandomState::new(),
            map: Mutex::new(HashMap::new()),
        }
    }
}

impl DataGens {
    /// The generation a layout of `fileid` granted now carries. `attrs` digests the
    /// file's attributes as this server sees them (`attrs_digest`); `rw_held`: an RW
    /// layout of the file is held after this grant (this one included).
    pub fn for_grant(&self, fileid: u64, attrs: u64, rw_held: bool) -> u16 {
        let mut m = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() >= MAX && !m.contains_key(&fileid) {
            m.clear();
        }
        let start = self.seed.hash_one(fileid) as u16;
        let e = m.entry(fileid).or_insert(Entry {
            gen: start,
            attrs,
            written: false,
        });
        if e.written || e.attrs != attrs {
            e.gen = e.gen.wrapping_add(1);
        }
        e.attrs = attrs;
        e.written = rw_held;
        e.gen
    }
}

/// A digest of what a change of a file's data moves in its attributes.
pub fn attrs_digest(a: &crate::fs::Attr) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    std::hash::Hash::hash(
        &(
            a.size,
            a.change,
            a.mtime.sec,
            a.mtime.nsec,
            a.ctime.sec,
            a.ctime.nsec,
        ),
        &mut h,
    );
    std::hash::Hasher::finish(&h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_moves_after_writes_and_attribute_changes_only() {
        let d = DataGens::default();
        let g0 = d.for_grant(1, 10, false);
        assert_eq!(d.for_grant(1, 10, false), g0, "nothing written: same");
        let g1 = d.for_grant(1, 11, false);
        assert_ne!(g1, g0, "the attributes moved (a LAYOUTCOMMIT, a truncate)");
        // A writer's RW layout: every grant while it is held moves it, and the
        // first one after it went.
        assert_eq!(d.for_grant(1, 11, true), g1, "the RW grant itself");
        let g2 = d.for_grant(1, 11, true);
        assert_ne!(g2, g1, "RW held since: the data may have changed");
        let g3 = d.for_grant(1, 11, false);
        assert_ne!(g3, g2, "the RW layout was returned since the last grant");
        assert_eq!(d.for_grant(1, 11, false), g3, "quiet again");
        assert_eq!(d.for_grant(2, 11, false), d.for_grant(2, 11, false));
    }

    #[test]
    fn a_new_process_starts_elsewhere() {
        let a = DataGens::default();
        let b = DataGens::default();
        let differ = (0..64u64).filter(|f| a.for_grant(*f, 0, false) != b.for_grant(*f, 0, false));
        assert!(differ.count() > 60, "random starts per process");
    }
}
