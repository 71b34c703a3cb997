//! The files a reactor may read itself: for a handle a worker authenticated (it ran a
//! GETATTR or READ of it), the open local file, the attributes the worker returned,
//! and the stamp they were valid under.
//!
//! Validity is the read cache's rule (README "The read cache"): an entry answers only
//! while its stamp (file generation + namespace epoch) is current — every gateway
//! WRITE/SETATTR/COMMIT bumps the file's generation, every create/remove/rename the
//! epoch — and for at most `cache::ATTR_TTL` (changes made behind the gateway's back).
//! A handle absent, stale or expired here goes to a worker, which refreshes it. A
//! write the reactor did itself moves the entry to the stamp after its own two bumps
//! (`restamp`) when nothing else changed the file meanwhile.
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
    stamp: Stamp,
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
        self.map.insert(
            o.fh,
            Entry {
                export: o.export,
                attr: o.attr,
                stamp: o.stamp,
                at: Instant::now(),
                data: o.data,
                key: o.key.into(),
            },
        );
    }

    /// After a write this reactor did itself: the entry's new attributes under
    /// `now`, the stamp after its own bumps (the caller checked nothing else moved
    /// it), or the entry dropped when `attr` is `None`. The TTL is not extended.
    pub fn restamp(&mut self, fh: &FhKey, attr: Option<Attr>, now: Stamp) {
        match attr {
            Some(a) => {
                if let Some(e) = self.map.get_mut(fh) {
                    e.attr = a;
                    e.stamp = now;
                }
            }
            None => {
                self.map.remove(fh);
            }
        }
    }

    /// The current entry for `fh`, if any.
    pub fn get(&self, gens: &Generations, fh: &[u8]) -> Option<Hit<'_>> {
        let e = self.map.get(&FhKey::new(fh)?)?;
        if e.at.elapsed() >= ATTR_TTL || gens.stamp(e.attr.fileid) != e.stamp {
            return None;
        }
        Some(Hit {
            export: e.export,
            attr: &e.attr,
            stamp: e.stamp,
            data: &e.data,
            key: &e.key,
        })
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}
