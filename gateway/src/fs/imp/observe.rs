//! Telling the reactors' caches which files a change falsifies
//! (`crate::fs::ChangeObserver`; the rule it serves is `crate::cache`'s).
//!
//! Data and attribute changes (a write, a SETATTR, a size set by CREATE or OPEN, a
//! COMMIT that turns staged data into the stored object) report their one file
//! before and after, from the model itself (`Inner::changing`), so what the caches
//! drop follows what executed, not what a caller guessed from a call's arguments.
//!
//! The file model is the one place that knows exactly which file ids a create,
//! remove or rename touches: the parent directories (their times, size and link
//! count move, see `dirs` and `nlink`), the object removed or replaced at a name
//! (the handle table unmaps its id: its handles turn STALE), the object moved (its
//! id survives, see `handles`, but its ctime and, on stores that rename by copying,
//! its times move), a directory's descendants (same ids, new keys, copied objects on
//! such stores), and a new object (an id a stale mapping of the same key may have
//! had). Each change reports them here twice: the ids it can name beforehand before
//! it touches the store, every id again once the change is done (before the call
//! returns, so before any reply), including those only the change itself learns
//! (`handles::Touched`). Nothing else is invalidated, so creating and removing files
//! leaves every other cached file answering.
//!
//! Directory entries are reported too, by (directory id, name): each change of what
//! a name refers to — a create, mkdir, symlink or mknod of it, a remove or rmdir, a
//! rename (the source name and the target name), a link made at it — reports the
//! name before the change and again after (`Inner::naming`), so a reactor's cached
//! LOOKUP of exactly that name stops answering, and no other name's does.

use super::handles::Touched;
use crate::fs::ChangeObserver;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Most ids one change reports one by one; beyond, every cached entry is dropped at
/// once (a rename of a large directory): the caches' generation slots are far fewer
/// than that anyway (`cache::Generations`), so it costs no more hits.
pub(super) const EXACT_MAX: usize = 4096;

/// The observer, set once when the server starts (none in tools and most tests),
/// and how many reports were made (the listings' memo, `listing::PageMemo`, reuses a
/// page only while no change was made).
#[derive(Default)]
pub(super) struct Observer(OnceLock<Arc<dyn ChangeObserver>>, AtomicU64);

impl Observer {
    /// Installs `o`; a second call is ignored (one server per model).
    pub fn set(&self, o: Arc<dyn ChangeObserver>) {
        let _ = self.0.set(o);
    }

    /// `fileid`'s cached state may change (or just changed).
    pub fn file(&self, fileid: u64) {
        self.1.fetch_add(1, Ordering::SeqCst);
        if let Some(o) = self.0.get() {
            o.file(fileid);
        }
    }

    /// Whether the caches of `fileid` were dropped for pNFS data generation `gen`
    /// (no observer: not tracked, so no: the store's cache is dropped each time).
    pub fn data_seen(&self, fileid: u64, gen: u16) -> bool {
        self.0.get().is_some_and(|o| o.data_seen(fileid, gen))
    }

    /// Notes a drop of `fileid`'s caches for data generation `gen`.
    pub fn note_data(&self, fileid: u64, gen: u16) {
        if let Some(o) = self.0.get() {
            o.note_data(fileid, gen);
        }
    }

    /// Cached state of files this change cannot name may change.
    pub fn all(&self) {
        self.1.fetch_add(1, Ordering::SeqCst);
        if let Some(o) = self.0.get() {
            o.all();
        }
    }

    /// Changes so far: the observer's count (which also sees the reactors' own
    /// writes), else the reports made here.
    pub fn changes(&self) -> u64 {
        match self.0.get().and_then(|o| o.changes()) {
            Some(n) => n,
            None => self.1.load(Ordering::SeqCst),
        }
    }

    /// Directory entry `name` of directory `dir` may refer to something else (or
    /// just did): reported by each change of what a name refers to, before and after
    /// (`Inner::naming`).
    pub fn name(&self, dir: u64, name: &[u8]) {
        self.1.fetch_add(1, Ordering::SeqCst);
        if let Some(o) = self.0.get() {
            o.name(dir, name);
        }
    }

    /// Each of `ids`; the lot when the table could not say which, or past `EXACT_MAX`.
    pub fn touched(&self, ids: &Touched) {
        match ids {
            Some(v) if v.len() <= EXACT_MAX => v.iter().for_each(|id| self.file(*id)),
            _ => self.all(),
        }
    }
}

/// Reports `ids` when dropped: the second report of `Inner::changing`, made on
/// the way out of the change whether it returned or panicked.
pub(super) struct Again<'a>(pub &'a Observer, pub &'a [Option<u64>]);

impl Drop for Again<'_> {
    fn drop(&mut self) {
        self.1.iter().flatten().for_each(|id| self.0.file(*id));
    }
}

/// Reports the names when dropped: the second report of `Inner::naming`, made on
/// the way out of the change whether it returned or panicked.
pub(super) struct AgainNames<'a>(pub &'a Observer, pub &'a [(u64, &'a [u8])]);

impl Drop for AgainNames<'_> {
    fn drop(&mut self) {
        self.1
            .iter()
            .for_each(|(dir, name)| self.0.name(*dir, name));
    }
}
