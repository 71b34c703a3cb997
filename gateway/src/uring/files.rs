//! The files a reactor may read itself: for a handle a worker authenticated (it ran a
//! GETATTR or READ of it), the open local file, the attributes the worker returned,
//! and the stamp they were valid under.
//!
//! Validity is the read cache's rule (README "The read cache"): an entry answers only
//! while its stamp (file generation + epoch) is current — every change the file
//! model executes on a worker (write, SETATTR, syncing COMMIT, truncating OPEN, a
//! namespace change touching the file: `fs::ChangeObserver`) and every other
//! reactor's io_uring write bumps the file's generation, what cannot be named the
//! epoch — and for at most `cache::ATTR_TTL` (changes made behind the gateway's back).
//! A handle absent or stale here (or expired and not revalidated, below) goes to a
//! worker, which refreshes it.
//!
//! Writes the reactor does itself bump the file's generation too (before and after,
//! as a worker's): the entry counts those bumps (`own`), so it stays valid while the
//! stamp is exactly its base stamp plus its own bumps — any other change to the file
//! moves it past that. Several writes may be in flight at once (a client pipelines
//! them); each completion merges its statx into the attributes: size and times only
//! grow under writes, so the maximum is the state after every completed write.
//! Lookups use the exact handle bytes, so a forged handle never hits.
//!
//! Revalidation: an entry past `ATTR_TTL` whose stamp is still current is
//! not dropped at once: the reactor may renew it with one `statx` of the key's path
//! on its ring instead of a worker round trip. The rule ([`unchanged`]): the path
//! still names the inode the entry holds open (a rename, replacement or removal
//! behind the gateway's back fails it), with the size the entry says, and the
//! inode's ctime is older than the moment the worker started the call its
//! attributes came from ([`Validator::since_ns`], less [`CTIME_SLACK`]). Every change
//! the file model's attributes derive from — data, size, mode and owner, the
//! `user.nfsgw.*` xattrs holding stored times and ownership, the link count —
//! moves the ctime, so an older ctime means the attributes the worker computed are
//! still the file's. Anything else (a change, an error, a stamp that moved) drops
//! the entry and the call goes to a worker, which relearns it. Entries are kept
//! past the TTL for at most [`KEEP_EXPIRED`] to be revalidated, so a file removed
//! behind the gateway's back is closed within `ATTR_TTL + KEEP_EXPIRED`.

use crate::cache::{FhKey, Generations, Stamp, ATTR_TTL};
use crate::fs::{Attr, DataFile};
use rustc_hash::FxHashMap as HashMap;
use std::ffi::{CStr, CString};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long past `ATTR_TTL` an entry that can be revalidated is kept for it.
pub const KEEP_EXPIRED: Duration = Duration::from_secs(2);
/// File timestamps come from the kernel's coarse clock, up to a tick (10 ms at
/// HZ=100) behind the real time: a ctime within this of `since_ns` may be a change
/// made after it, so it does not count as older.
pub const CTIME_SLACK: i64 = 20_000_000;

/// What a worker knew about the file besides its attributes, for revalidating them
/// on the ring: when it started the call that computed them (wall clock, ns since
/// 1970) and the inode it holds open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validator {
    pub since_ns: i64,
    pub dev: u64,
    pub ino: u64,
}

/// Whether a `statx` of the key's path (not following a final symlink) shows the
/// file unchanged since the attributes held for it (`size`) were computed.
pub fn unchanged(v: &Validator, size: u64, st: &libc::statx) -> bool {
    let need = libc::STATX_TYPE | libc::STATX_INO | libc::STATX_SIZE | libc::STATX_CTIME;
    let ctime = i128::from(st.stx_ctime.tv_sec) * 1_000_000_000 + i128::from(st.stx_ctime.tv_nsec);
    st.stx_mask & need == need
        && u32::from(st.stx_mode) & libc::S_IFMT == libc::S_IFREG
        && libc::makedev(st.stx_dev_major, st.stx_dev_minor) == v.dev
        && st.stx_ino == v.ino
        && st.stx_nlink > 0
        && st.stx_size == size
        && ctime + i128::from(CTIME_SLACK) < i128::from(v.since_ns)
}

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
    /// `None`: the entry is not revalidated on the ring (dropped at its TTL).
    pub validator: Option<Validator>,
}

/// An entry past its TTL that may be revalidated: what the `statx` and the
/// operation in flight keep of it.
pub struct Expired {
    pub id: u64,
    pub export: u16,
    pub attr: Attr,
    pub stamp: Stamp,
    pub data: DataFile,
    pub key: Arc<str>,
    /// The key as a path under the backend's root.
    pub path: Arc<CStr>,
    pub validator: Validator,
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
    /// The key's path and the validator, when it can be revalidated.
    reval: Option<(Arc<CStr>, Validator)>,
    /// The file's slot in the ring's registered file table, if installed there.
    fixed: Option<u32>,
}

/// A valid entry, as the data paths need it.
pub struct Hit<'a> {
    pub export: u16,
    pub attr: &'a Attr,
    pub stamp: Stamp,
    pub data: &'a DataFile,
    pub key: &'a Arc<str>,
    pub fixed: Option<u32>,
}

#[derive(Default)]
pub struct Files {
    map: HashMap<FhKey, Entry>,
    next_id: u64,
    /// Registered-table slots of entries that left the table (`take_retired`).
    retired: Vec<u32>,
}

/// Notes a leaving entry's registered slot, to be emptied by the ring's owner.
fn retire(retired: &mut Vec<u32>, e: &Entry) {
    if let Some(i) = e.fixed {
        retired.push(i);
    }
}

impl Files {
    /// Records what a worker learned, if it is still current (a stamp that moved
    /// since the worker snapshotted it means a change raced with it).
    pub fn insert(&mut self, gens: &Generations, o: Opened) {
        if gens.stamp(o.attr.fileid) != o.stamp {
            if let Some(e) = self.map.remove(&o.fh) {
                retire(&mut self.retired, &e);
            }
            return;
        }
        if self.map.len() >= MAX_FILES && !self.map.contains_key(&o.fh) {
            for (_, e) in self.map.drain() {
                retire(&mut self.retired, &e);
            }
        }
        self.next_id += 1;
        let reval = o
            .validator
            .and_then(|v| Some((Arc::from(CString::new(o.key.as_str()).ok()?), v)));
        let old = self.map.insert(
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
                reval,
                fixed: None,
            },
        );
        if let Some(e) = old {
            retire(&mut self.retired, &e);
        }
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
            if let Some(e) = self.map.remove(fh) {
                retire(&mut self.retired, &e);
            }
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
            fixed: e.fixed,
        })
    }

    /// The entry for `fh` if it is past its TTL (by at most `KEEP_EXPIRED`), still
    /// current under the stamp rule, and can be revalidated.
    pub fn expired(&self, gens: &Generations, fh: &[u8]) -> Option<Expired> {
        let e = self.map.get(&FhKey::new(fh)?)?;
        let age = e.at.elapsed();
        let now = e.stamp.after_bumps(e.own);
        if age < ATTR_TTL || age >= ATTR_TTL + KEEP_EXPIRED || gens.stamp(e.attr.fileid) != now {
            return None;
        }
        let (path, validator) = e.reval.clone()?;
        Some(Expired {
            id: e.id,
            export: e.export,
            attr: e.attr,
            stamp: now,
            data: e.data.clone(),
            key: e.key.clone(),
            path,
            validator,
        })
    }

    /// The revalidation of entry `id` found the file unchanged: it answers for
    /// another `ATTR_TTL` (under the stamp rule, checked on every lookup).
    pub fn renew(&mut self, fh: &FhKey, id: u64) {
        if let Some(e) = self.map.get_mut(fh).filter(|e| e.id == id) {
            e.at = Instant::now();
        }
    }

    /// The revalidation of entry `id` found a change (or failed): a worker relearns.
    pub fn forget(&mut self, fh: &FhKey, id: u64) {
        if self.map.get(fh).is_some_and(|e| e.id == id) {
            if let Some(e) = self.map.remove(fh) {
                retire(&mut self.retired, &e);
            }
        }
    }

    /// Drops expired and stale entries, closing their descriptors (a removed file's
    /// space is freed once nothing holds it open): called every so many passes and
    /// before the reactor sleeps, so an entry outlives its use by about `ATTR_TTL`
    /// (`ATTR_TTL + KEEP_EXPIRED` for one that can be revalidated). Their registered
    /// slots are noted for emptying (`take_retired`).
    /// An entry dropped while its writes are in flight loses nothing: each operation
    /// holds the file itself, and its completion finds no entry to update.
    pub fn sweep(&mut self, gens: &Generations) {
        if self.map.is_empty() {
            return;
        }
        let retired = &mut self.retired;
        self.map.retain(|_, e| {
            let keep = if e.reval.is_some() {
                ATTR_TTL + KEEP_EXPIRED
            } else {
                ATTR_TTL
            };
            let keep =
                e.at.elapsed() < keep && gens.stamp(e.attr.fileid) == e.stamp.after_bumps(e.own);
            if !keep {
                retire(retired, e);
            }
            keep
        });
    }

    /// The descriptor of `fh`'s entry when it has no registered slot yet.
    pub fn unregistered(&self, fh: &FhKey) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        let e = self.map.get(fh)?;
        e.fixed.is_none().then(|| e.data.file.as_raw_fd())
    }

    /// Records that `fh`'s entry's file was installed at slot `i` (false: no
    /// entry, the caller empties the slot again).
    pub fn set_fixed(&mut self, fh: &FhKey, i: u32) -> bool {
        match self.map.get_mut(fh) {
            Some(e) if e.fixed.is_none() => {
                e.fixed = Some(i);
                true
            }
            _ => false,
        }
    }

    /// The registered slots of entries that left since the last call: the ring's
    /// owner empties each once no operation names it (`uring::fixed`).
    /// Whether `take_retired` has anything to give (checked every reactor pass).
    pub fn has_retired(&self) -> bool {
        !self.retired.is_empty()
    }

    pub fn take_retired(&mut self, out: &mut Vec<u32>) {
        out.append(&mut self.retired);
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
            validator: None,
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
        gens.bump_all();
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
        gens.bump_all();
        f.sweep(&gens);
        assert!(f.is_empty());
    }

    #[test]
    fn expired_entries_are_revalidated_renewed_or_forgotten() {
        let gens = Generations::new();
        let mut f = Files::default();
        let fh = FhKey::new(FH).unwrap();
        let v = Validator {
            since_ns: 1,
            dev: 2,
            ino: 3,
        };
        let mut o = opened(&gens, attr(10, 100));
        o.validator = Some(v);
        f.insert(&gens, o);
        assert!(f.expired(&gens, FH).is_none(), "current: no revalidation");
        // Age the entry past its TTL.
        f.map.get_mut(&fh).unwrap().at -= ATTR_TTL;
        assert!(f.get(&gens, FH).is_none());
        let e = f.expired(&gens, FH).unwrap();
        assert_eq!(
            (e.validator, e.attr.size, e.path.to_bytes()),
            (v, 10, &b"k"[..])
        );
        f.sweep(&gens);
        assert_eq!(f.len(), 1, "kept for its revalidation");
        f.renew(&fh, e.id + 1);
        assert!(f.get(&gens, FH).is_none(), "another learning's renewal");
        f.renew(&fh, e.id);
        assert_eq!(f.get(&gens, FH).unwrap().attr.size, 10);
        // A gateway change: never revalidated (the stamp rule comes first).
        f.map.get_mut(&fh).unwrap().at -= ATTR_TTL;
        gens.bump_file(42);
        assert!(f.expired(&gens, FH).is_none());
        let mut o = opened(&gens, attr(10, 100));
        o.validator = Some(v);
        f.insert(&gens, o);
        f.map.get_mut(&fh).unwrap().at -= ATTR_TTL;
        let e = f.expired(&gens, FH).unwrap();
        f.forget(&fh, e.id);
        assert!(f.is_empty());
        // Without a validator, or too long expired: dropped at its TTL.
        f.insert(&gens, opened(&gens, attr(10, 100)));
        f.map.get_mut(&fh).unwrap().at -= ATTR_TTL;
        assert!(f.expired(&gens, FH).is_none());
        f.sweep(&gens);
        assert!(f.is_empty());
        let mut o = opened(&gens, attr(10, 100));
        o.validator = Some(v);
        f.insert(&gens, o);
        f.map.get_mut(&fh).unwrap().at -= ATTR_TTL + KEEP_EXPIRED;
        assert!(f.expired(&gens, FH).is_none());
        f.sweep(&gens);
        assert!(f.is_empty());
    }
}
