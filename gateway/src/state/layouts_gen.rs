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
//! An RW grant counts as held from its own `for_grant` until its `Pending` is dropped
//! (after the layout table recorded it, `grant_on`): a read grant that runs between
//! the two would otherwise see no RW layout in the table and clear the mark.
//!
//! Kept in memory, bounded (`MAX`: the map starts over when full). A file this
//! server has no entry for (first grant, after a restart or after the map started
//! over) starts at a fresh random generation (per insert, not per file: a file
//! evicted and granted again must not come back to the value it had): equal to one a
//! data server saw before with probability 2^-15 (it keeps two), the one way a stale
//! answer remains (then bounded as before: `cache::ATTR_TTL` + the store's HEAD
//! cache, ~2 s).

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
    /// RW grants between their `for_grant` and their `Pending`'s drop.
    pending_rw: u32,
}

/// The data generations of the files layouts were granted for.
pub struct DataGens {
    seed: std::hash::RandomState,
    /// Inserts so far: mixed into each new entry's random start.
    inserts: std::sync::atomic::AtomicU64,
    map: Mutex<HashMap<u64, Entry>>,
}

/// An RW grant in flight: the file counts as RW-held until this is dropped (after
/// the layout table recorded the layout, or the grant failed).
pub struct Pending<'a> {
    gens: &'a DataGens,
    fileid: u64,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        let mut m = self.gens.map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = m.get_mut(&self.fileid) {
            e.pending_rw = e.pending_rw.saturating_sub(1);
        }
    }
}

impl Default for DataGens {
    fn default() -> Self {
        DataGens {
            seed: std::hash::RandomState::new(),
            inserts: std::sync::atomic::AtomicU64::new(0),
            map: Mutex::new(HashMap::new()),
        }
    }
}

impl DataGens {
    /// The generation a layout of `fileid` granted now carries. `attrs` digests the
    /// file's attributes as this server sees them (`attrs_digest`); `rw_held`: an RW
    /// layout of the file is in the layout table; `write`: this grant is RW, and the
    /// `Pending` returned must live until the table recorded it.
    pub fn for_grant(
        &self,
        fileid: u64,
        attrs: u64,
        rw_held: bool,
        write: bool,
    ) -> (u16, Option<Pending<'_>>) {
        let mut m = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() >= MAX && !m.contains_key(&fileid) {
            m.clear();
        }
        let e = m.entry(fileid).or_insert_with(|| {
            let n = self
                .inserts
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Entry {
                gen: self.seed.hash_one((fileid, n)) as u16,
                attrs,
                written: false,
                pending_rw: 0,
            }
        });
        if e.written || e.attrs != attrs {
            e.gen = e.gen.wrapping_add(1);
        }
        if write {
            e.pending_rw += 1;
        }
        e.attrs = attrs;
        e.written = rw_held || write || e.pending_rw > 0;
        let gen = e.gen;
        drop(m);
        (gen, write.then_some(Pending { gens: self, fileid }))
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
        let g0 = d.for_grant(1, 10, false, false).0;
        assert_eq!(
            d.for_grant(1, 10, false, false).0,
            g0,
            "nothing written: same"
        );
        let g1 = d.for_grant(1, 11, false, false).0;
        assert_ne!(g1, g0, "the attributes moved (a LAYOUTCOMMIT, a truncate)");
        // A writer's RW layout: every grant while it is held moves it, and the
        // first one after it went.
        assert_eq!(d.for_grant(1, 11, true, false).0, g1, "the RW grant itself");
        let g2 = d.for_grant(1, 11, true, false).0;
        assert_ne!(g2, g1, "RW held since: the data may have changed");
        let g3 = d.for_grant(1, 11, false, false).0;
        assert_ne!(g3, g2, "the RW layout was returned since the last grant");
        assert_eq!(d.for_grant(1, 11, false, false).0, g3, "quiet again");
        assert_eq!(
            d.for_grant(2, 11, false, false).0,
            d.for_grant(2, 11, false, false).0
        );
    }

    #[test]
    fn a_new_process_starts_elsewhere() {
        let a = DataGens::default();
        let b = DataGens::default();
        let differ = (0..64u64)
            .filter(|f| a.for_grant(*f, 0, false, false).0 != b.for_grant(*f, 0, false, false).0);
        assert!(differ.count() > 60, "random starts per process");
    }

    /// A read grant that runs while an RW grant is between its `for_grant` and the
    /// table's record of it (so `rw_held` is false) does not clear the mark: the
    /// grant after the writer's data moves the generation.
    #[test]
    fn a_read_grant_racing_an_rw_grant_keeps_the_mark() {
        let d = DataGens::default();
        let g0 = d.for_grant(1, 10, false, false).0;
        let (gw, pending) = d.for_grant(1, 10, false, true);
        assert_eq!(gw, g0, "the RW grant itself");
        let g1 = d.for_grant(1, 10, false, false).0;
        assert_ne!(g1, gw, "RW in flight: held");
        drop(pending);
        // The writer's layout is in the table now (rw_held), then returned.
        let g2 = d.for_grant(1, 10, true, false).0;
        assert_ne!(g2, g1);
        let g3 = d.for_grant(1, 10, false, false).0;
        assert_ne!(g3, g2, "the RW layout was held since the racing read grant");
        assert_eq!(d.for_grant(1, 10, false, false).0, g3, "quiet again");
    }

    /// A file whose entry was dropped (the map started over) comes back at a fresh
    /// random generation, not at the one it started with.
    #[test]
    fn an_evicted_file_starts_at_a_fresh_generation() {
        let d = DataGens::default();
        let first: Vec<u16> = (0..64u64)
            .map(|f| d.for_grant(f, 0, false, false).0)
            .collect();
        d.map.lock().unwrap().clear();
        let again = (0..64u64).filter(|f| d.for_grant(*f, 0, false, false).0 != first[*f as usize]);
        assert!(
            again.count() > 60,
            "an evicted file came back to its old generation"
        );
    }
}
