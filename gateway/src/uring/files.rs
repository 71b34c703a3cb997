//! The files a reactor may read itself: for a handle a worker authenticated (it ran a
//! GETATTR or READ of it), the open local file, the attributes the worker returned,
//! and the stamp they were valid under.
//!
//! Validity is the read cache's rule (README "The read cache"): an entry answers only
//! while its stamp (file generation + namespace epoch) is current — every gateway
//! WRITE/SETATTR/COMMIT bumps the file's generation, every create/remove/rename the
//! epoch — and for at most `cache::ATTR_TTL` (changes made behind the gateway's back).
//! A handle absent, stale or expired here goes to a worker, which refreshes it.
//!
//! Writes the reactor does itself bump the file's generation too (before and after,
//! as a worker's): the entry counts those bumps (`own`), so it stays valid while the
//! stamp is exactly its base stamp plus its own bumps — any other change to the file
//! moves it past that. Several writes may be in flight at once (a client pipelines
//! them); each completion merges its statx into the attributes: size and times only
//! grow under writes, so the maximum is the state after every completed write.
//! Lookups use the exact handle bytes, so a forged handle never hits.

use crate::cache::{FhKey, Generations, Stamp, ATTR_TTL};
use crate::fs::{Attr, DataFile};
use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;
use std::time::Instant;

/// Entries per reactor before the table is cleared (bounds descriptors held: each
/// entry holds the backend's open file, so an evicted object's descriptor stays
/// open until its entry goes).
pub const MAX_FILES: usize = 4096;

/// What a worker hands a reactor about one regular file.
pub struct Opened {
    pub fh: FhKey,
    pub export: u16,
    pub attr: Attr,
    pub stamp: Stamp,
    pub data: DataFile,
    /// The object's key (COMMIT takes it out of the model's staged set).
    pub key: String,
}

struct Entry {
    export: u16,
    attr: Attr,
    /// The stamp the entry was learned under, and the bumps this reactor's own
    /// writes made since.
    stamp: Stamp,
    own: u64,
    /// Which learning this is (a write completing after a relearn leaves the new
    /// entry alone).
    id: u64,
    at: Instant,
    data: DataFile,
    key: Arc<str>,
}

/// A valid entry, as the data paths need it.
pub struct Hit<'a> {
    pub export: u16,
    pub attr: &'a Attr,
    pub stamp: Stamp,
    pub data: &'a DataFile,
    pub key: &'a Arc<str>,
}

#[derive(Default)]
pub struct Files {
    map: HashMap<FhKey, Entry>,
    next_id: u64,
}

impl Files {
    /// Records what a worker learned, if it is still current (a stamp that moved
    /// since the worker snapshotted it means a change raced with it).
    pub fn insert(&mut self, gens: &Generations, o: Opened) {
        if gens.stamp(o.attr.fileid) != o.stamp {
            self.map.remove(&o.fh);
            return;
        }
        if self.map.len() >= MAX_FILES && !self.map.contains_key(&o.fh) {
            self.map.clear();
        }
        self.next_id += 1;
        self.map.insert(
            o.fh,
            Entry {
                export: o.export,
                attr: o.attr,
                stamp: o.stamp,
                own: 0,
                id: self.next_id,
                at: Instant::now(),
                data: o.data,
                key: o.key.into(),
            },
        );
    }

    /// A write of `fh` is about to be submitted: the caller bumps the file's
    /// generation right after (same thread, so no lookup sees one without the
    /// other). Returns the entry's id for `end_write`.
    pub fn begin_write(&mut self, fh: &FhKey) -> Option<u64> {
        let e = self.map.get_mut(fh)?;
        e.own += 1;
        Some(e.id)
    }

    /// A write begun on entry `id` completed; the caller bumps the generation right
    /// after. `attr`: the attributes a statx saw after it (merged in), or `None`
    /// (the write failed or its attributes are unknown: the entry is dropped).
    pub fn end_write(&mut self, fh: &FhKey, id: u64, attr: Option<Attr>) {
        let Some(e) = self.map.get_mut(fh).filter(|e| e.id == id) else {
            return;
        };
        let Some(a) = attr else {
            self.map.remove(fh);
            return;
        };
        e.own += 1;
        e.attr.size = e.attr.size.max(a.size);
        e.attr.used = e.attr.used.max(a.used);
        if a.mtime > e.attr.mtime {
            e.attr.mtime = a.mtime;
            e.attr.ctime = a.ctime;
            e.attr.atime = a.atime;
        }
    }

    /// The current entry for `fh`, if any.
    pub fn get(&self, gens: &Generations, fh: &[u8]) -> Option<Hit<'_>> {
        let e = self.map.get(&FhKey::new(fh)?)?;
        let now = e.stamp.after_bumps(e.own);
        if e.at.elapsed() >= ATTR_TTL || gens.stamp(e.attr.fileid) != now {
            return None;
        }
        Some(Hit {
            export: e.export,
            attr: &e.attr,
            stamp: now,
            data: &e.data,
            key: &e.key,
        })
    }

    /// Drops expired and stale entries, closing their descriptors (a removed file's
    /// space is freed once nothing holds it open): called every so many passes and
    /// before the reactor sleeps, so an entry outlives its use by about `ATTR_TTL`.
    /// An entry dropped while its writes are in flight loses nothing: each operation
    /// holds the file itself, and its completion finds no entry to update.
    pub fn sweep(&mut self, gens: &Generations) {
        if self.map.is_empty() {
            return;
        }
        self.map.retain(|_, e| {
            e.at.elapsed() < ATTR_TTL && gens.stamp(e.attr.fileid) == e.stamp.after_bumps(e.own)
        });
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{FileKind, NfsTime};

    const FH: &[u8] = b"a handle of some bytes";

    fn attr(size: u64, sec: i64) -> Attr {
        let t = NfsTime { sec, nsec: 5 };
        Attr {
            kind: FileKind::Reg,
            mode: 0o644,
            nlink: 1,
            uid: 1,
            gid: 1,
            size,
            used: size,
            rdev: (0, 0),
            fsid: 1,
            fileid: 42,
            atime: t,
            mtime: t,
            ctime: t,
            change: 0,
        }
    }

    fn opened(gens: &Generations, a: Attr) -> Opened {
        Opened {
            fh: FhKey::new(FH).unwrap(),
            export: 0,
            attr: a,
            stamp: gens.stamp(a.fileid),
            data: DataFile {
                file: Arc::new(tempfile::tempfile().unwrap()),
                writable: true,
                clean: true,
                atime_set: false,
            },
            key: "k".into(),
        }
    }

    #[test]
    fn only_current_entries_answer() {
        let gens = Generations::new();
        let mut f = Files::default();
        let stale = opened(&gens, attr(10, 100));
        gens.bump_file(42);
        // Learned under a stamp that moved before it arrived: not kept.
        f.insert(&gens, stale);
        assert!(f.get(&gens, FH).is_none());
        f.insert(&gens, opened(&gens, attr(10, 100)));
        assert_eq!(f.get(&gens, FH).unwrap().attr.size, 10);
        assert!(f.get(&gens, b"another handle").is_none());
        // Any change by someone else (a worker's WRITE/SETATTR) or to the namespace.
        gens.bump_file(42);
        assert!(f.get(&gens, FH).is_none());
        f.insert(&gens, opened(&gens, attr(10, 100)));
        gens.bump_namespace();
        assert!(f.get(&gens, FH).is_none());
    }

    #[test]
    fn own_writes_in_flight_keep_the_entry_and_merge_to_the_latest_state() {
        let gens = Generations::new();
        let mut f = Files::default();
        let fh = FhKey::new(FH).unwrap();
        f.insert(&gens, opened(&gens, attr(10, 100)));
        // Two pipelined writes: each bump is the reactor's own.
        let a = f.begin_write(&fh).unwrap();
        gens.bump_file(42);
        let b = f.begin_write(&fh).unwrap();
        gens.bump_file(42);
        assert!(f.get(&gens, FH).is_some(), "own bumps keep it valid");
        // The later write's statx completes first; the earlier one's saw less.
        f.end_write(&fh, b, Some(attr(5000, 300)));
        gens.bump_file(42);
        f.end_write(&fh, a, Some(attr(3000, 200)));
        gens.bump_file(42);
        let h = f.get(&gens, FH).unwrap();
        assert_eq!((h.attr.size, h.attr.mtime.sec), (5000, 300));
        assert_eq!(h.stamp, gens.stamp(42));
        // A worker's change in between: invalid, though the reactor's count is right.
        let c = f.begin_write(&fh).unwrap();
        gens.bump_file(42);
        gens.bump_file(42);
        f.end_write(&fh, c, Some(attr(6000, 400)));
        gens.bump_file(42);
        assert!(f.get(&gens, FH).is_none());
    }

    #[test]
    fn a_failed_write_or_a_relearn_ends_the_old_accounting() {
        let gens = Generations::new();
        let mut f = Files::default();
        let fh = FhKey::new(FH).unwrap();
        f.insert(&gens, opened(&gens, attr(10, 100)));
        let a = f.begin_write(&fh).unwrap();
        gens.bump_file(42);
        f.end_write(&fh, a, None);
        gens.bump_file(42);
        assert!(f.get(&gens, FH).is_none(), "unknown attributes: dropped");
        // Relearned while a write is in flight: that write leaves the new entry alone
        // (its bumps then invalidate it, conservatively).
        f.insert(&gens, opened(&gens, attr(10, 100)));
        let b = f.begin_write(&fh).unwrap();
        gens.bump_file(42);
        f.insert(&gens, opened(&gens, attr(20, 150)));
        f.end_write(&fh, b, Some(attr(999, 999)));
        assert_eq!(f.get(&gens, FH).unwrap().attr.size, 20);
        gens.bump_file(42);
        assert!(f.get(&gens, FH).is_none());
    }

    #[test]
    fn sweep_closes_stale_entries_and_keeps_current_ones() {
        let gens = Generations::new();
        let mut f = Files::default();
        f.insert(&gens, opened(&gens, attr(10, 100)));
        let mut other = opened(&gens, attr(10, 100));
        other.fh = FhKey::new(b"second").unwrap();
        other.attr.fileid = 7;
        other.stamp = gens.stamp(7);
        f.insert(&gens, other);
        f.sweep(&gens);
        assert_eq!(f.len(), 2);
        gens.bump_file(42);
        f.sweep(&gens);
        assert_eq!(f.len(), 1, "the changed file's entry is gone");
        assert!(f.get(&gens, b"second").is_some());
        gens.bump_namespace();
        f.sweep(&gens);
        assert!(f.is_empty());
    }
}
