//! `Timed`: the store the server opens, wrapped so every call the file model makes to
//! it is timed and its failures counted by operation (`stats::backend_ops`:
//! `nfsgw_backend_duration_seconds`, `nfsgw_backend_errors_total`).
//!
//! The wrapper forwards every method of `Backend` to the store, overridden or not, so
//! the store's own implementation runs (a default body here would hide the store's):
//! a method added to the trait needs its line here too. What it forwards without a
//! clock are hints, limits and local look-ups (`warm`, `data_file`, `max_file_size`,
//! ...), which are not store round trips. The in-place writer, the multipart upload
//! and the shared state a store offers are wrapped the same way.
//!
//! The clock is the stats clock (`stats::Clock`: one `rdtsc` per reading where the TSC
//! is invariant, else `Instant`), not `Instant::now()`: a CREATE makes about five store
//! calls, and two vDSO `clock_gettime`s per call cost 2 % of its worker time where two
//! `rdtsc`s cost nothing measurable. Workers are not pinned; an invariant TSC is
//! synchronised across cores, and a reading across a migration that went backwards
//! counts 0 ns (`Clock::ns_between`).

use super::*;
use crate::stats::backend_ops::{self, Op};
use crate::stats::Clock;
use std::sync::Arc;

/// A store whose calls are timed.
pub struct Timed {
    inner: Arc<dyn Backend>,
    at: At,
}

/// Where a call's time goes: the clock and the store's row in the tables.
#[derive(Clone, Copy)]
struct At {
    clock: Clock,
    row: usize,
}

impl Timed {
    /// `inner`, timed under its `name()`.
    pub fn wrap(inner: Arc<dyn Backend>) -> Arc<dyn Backend> {
        let at = At {
            clock: Clock::get(),
            row: backend_ops::backend_row(inner.name()),
        };
        Arc::new(Timed { inner, at })
    }

    #[inline]
    fn time<T>(&self, op: Op, f: impl FnOnce() -> BResult<T>) -> BResult<T> {
        timed(self.at, op, f)
    }
}

#[inline]
fn timed<T>(at: At, op: Op, f: impl FnOnce() -> BResult<T>) -> BResult<T> {
    let t0 = at.clock.now();
    let r = f();
    let ns = at.clock.ns_between(t0, at.clock.now());
    backend_ops::record(at.row, op, ns, r.as_ref().err());
    r
}

impl Backend for Timed {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn head(&self, key: &str) -> BResult<ObjectMeta> {
        self.time(Op::Head, || self.inner.head(key))
    }
    fn max_file_size(&self) -> u64 {
        self.inner.max_file_size()
    }
    fn lost_writes(&self) -> u64 {
        self.inner.lost_writes()
    }
    fn gate_writes(&self, gate: Arc<super::gate::Gate>) {
        self.inner.gate_writes(gate)
    }
    fn get_range(&self, key: &str, offset: u64, dst: &mut [u8]) -> BResult<usize> {
        self.time(Op::Get, || self.inner.get_range(key, offset, dst))
    }
    fn put(&self, key: &str, data: &[u8], meta: &UserMeta, if_absent: bool) -> BResult<ObjectMeta> {
        self.time(Op::Put, || self.inner.put(key, data, meta, if_absent))
    }
    fn multipart(&self, key: &str, meta: &UserMeta) -> BResult<Box<dyn Upload>> {
        let inner = self.time(Op::Multipart, || self.inner.multipart(key, meta))?;
        Ok(Box::new(TimedUpload { inner, at: self.at }))
    }
    fn list(
        &self,
        prefix: &str,
        delimiter: Option<char>,
        start_after: Option<&str>,
        max: usize,
    ) -> BResult<ListPage> {
        self.time(Op::List, || {
            self.inner.list(prefix, delimiter, start_after, max)
        })
    }
    fn list_meta_complete(&self) -> bool {
        self.inner.list_meta_complete()
    }
    fn put_if_absent_refuses_dirs(&self) -> bool {
        self.inner.put_if_absent_refuses_dirs()
    }
    fn delete_empty_dir(&self, dkey: &str) -> Option<BResult<()>> {
        // `None` (the store cannot) made no store call: nothing to record.
        let t0 = self.at.clock.now();
        let r = self.inner.delete_empty_dir(dkey)?;
        let ns = self.at.clock.ns_between(t0, self.at.clock.now());
        backend_ops::record(self.at.row, Op::Delete, ns, r.as_ref().err());
        Some(r)
    }
    fn each_dir_name(&self, dkey: &str, f: &mut dyn FnMut(&str, bool)) -> Option<BResult<()>> {
        // A look at what the store holds in memory and one fstat: no store request
        // worth a row (as `list_meta_complete`).
        self.inner.each_dir_name(dkey, f)
    }
    fn dir_is_empty(&self, dkey: &str) -> Option<BResult<bool>> {
        // `None` (the store cannot) made no store call: nothing to record. A readdir
        // of the directory: a listing's cost, recorded as one (on S3 an answer from
        // what it knows, as `list` records one).
        let t0 = self.at.clock.now();
        let r = self.inner.dir_is_empty(dkey)?;
        let ns = self.at.clock.ns_between(t0, self.at.clock.now());
        backend_ops::record(self.at.row, Op::List, ns, r.as_ref().err());
        Some(r)
    }
    fn surely_absent(&self, name: &str) -> BResult<bool> {
        // Not timed: a local probe standing in for HEADs, never a store round trip.
        self.inner.surely_absent(name)
    }
    fn probe_absent(&self, name: &str) -> BResult<bool> {
        // Not timed either: on S3 a listing, counted in `nfsgw_s3_requests_total`.
        self.inner.probe_absent(name)
    }
    fn count_subdirs(&self, dir: &str, limit: usize) -> BResult<Option<u64>> {
        self.time(Op::CountSubdirs, || self.inner.count_subdirs(dir, limit))
    }
    fn copy(&self, from: &str, to: &str) -> BResult<()> {
        self.time(Op::Copy, || self.inner.copy(from, to))
    }
    fn delete(&self, key: &str) -> BResult<()> {
        self.time(Op::Delete, || self.inner.delete(key))
    }
    fn set_meta(&self, key: &str, meta: &UserMeta) -> BResult<()> {
        self.time(Op::SetMeta, || self.inner.set_meta(key, meta))
    }
    fn capacity(&self) -> BResult<(u64, u64, u64, u64)> {
        self.time(Op::Capacity, || self.inner.capacity())
    }
    fn random_write(&self) -> Option<&dyn RandomWrite> {
        self.inner.random_write().map(|_| self as &dyn RandomWrite)
    }
    fn data_file(&self, key: &str) -> Option<(Arc<std::fs::File>, bool)> {
        self.inner.data_file(key)
    }
    fn data_root(&self) -> Option<Arc<std::os::fd::OwnedFd>> {
        self.inner.data_root()
    }
    fn warm(&self, keys: &[String]) {
        self.inner.warm(keys)
    }
    fn forget_cached(&self, key: &str) {
        self.inner.forget_cached(key)
    }
    fn advise(&self, key: &str, how: super::ReadAdvice) -> bool {
        self.inner.advise(key, how)
    }
    fn shared(&self) -> Option<&dyn SharedState> {
        self.inner.shared().map(|_| self as &dyn SharedState)
    }
    fn cas(&self) -> Option<&dyn Cas> {
        // Not timed: a few small calls a second at most (`crate::ha`).
        self.inner.cas()
    }
    fn identity(&self) -> String {
        self.inner.identity()
    }
    fn seek(&self, key: &str, offset: u64, data: bool) -> BResult<Option<u64>> {
        self.time(Op::Seek, || self.inner.seek(key, offset, data))
    }
    fn allocate(&self, key: &str, offset: u64, len: u64) -> BResult<()> {
        self.time(Op::Allocate, || self.inner.allocate(key, offset, len))
    }
    fn deallocate(&self, key: &str, offset: u64, len: u64) -> BResult<()> {
        self.time(Op::Deallocate, || self.inner.deallocate(key, offset, len))
    }
    fn copy_range(&self, src: &str, s: u64, dst: &str, d: u64, count: u64) -> BResult<u64> {
        self.time(Op::CopyRange, || {
            self.inner.copy_range(src, s, dst, d, count)
        })
    }
    fn clone_range(&self, src: &str, s: u64, dst: &str, d: u64, count: u64) -> BResult<()> {
        self.time(Op::CloneRange, || {
            self.inner.clone_range(src, s, dst, d, count)
        })
    }
    fn clone_block(&self) -> u64 {
        self.inner.clone_block()
    }
    fn xattr_max_value(&self) -> usize {
        self.inner.xattr_max_value()
    }
    fn xattr_max_name(&self) -> usize {
        self.inner.xattr_max_name()
    }
    fn xattr_get(&self, key: &str, name: &[u8]) -> BResult<Option<Vec<u8>>> {
        self.time(Op::XattrGet, || self.inner.xattr_get(key, name))
    }
    fn xattr_set(&self, key: &str, name: &[u8], val: &[u8], how: XattrSet) -> BResult<bool> {
        self.time(Op::XattrSet, || self.inner.xattr_set(key, name, val, how))
    }
    fn xattr_list(&self, key: &str) -> BResult<Vec<Vec<u8>>> {
        self.time(Op::XattrList, || self.inner.xattr_list(key))
    }
    fn xattr_remove(&self, key: &str, name: &[u8]) -> BResult<bool> {
        self.time(Op::XattrRemove, || self.inner.xattr_remove(key, name))
    }
    fn rename(&self, from: &str, to: &str) -> BResult<()> {
        self.time(Op::Rename, || self.inner.rename(from, to))
    }
}

/// Only handed out when the store has one (`random_write`); the `Unsupported`
/// branches are unreachable then.
impl RandomWrite for Timed {
    fn write_at(&self, key: &str, offset: u64, data: &[u8]) -> BResult<()> {
        let rw = self.inner.random_write().ok_or(BackendError::Unsupported)?;
        self.time(Op::WriteAt, || rw.write_at(key, offset, data))
    }
    fn set_size(&self, key: &str, size: u64) -> BResult<()> {
        let rw = self.inner.random_write().ok_or(BackendError::Unsupported)?;
        self.time(Op::SetSize, || rw.set_size(key, size))
    }
    fn sync(&self, key: &str) -> BResult<()> {
        let rw = self.inner.random_write().ok_or(BackendError::Unsupported)?;
        self.time(Op::Sync, || rw.sync(key))
    }
}

/// Only handed out when the store has shared state (`shared`).
impl SharedState for Timed {
    fn mac_key(&self) -> BResult<[u8; 32]> {
        let s = self.inner.shared().ok_or(BackendError::Unsupported)?;
        self.time(Op::MacKey, || s.mac_key())
    }
    fn put_id(&self, fileid: u64, key: &str) -> BResult<()> {
        let s = self.inner.shared().ok_or(BackendError::Unsupported)?;
        self.time(Op::PutId, || s.put_id(fileid, key))
    }
    fn get_id(&self, fileid: u64) -> BResult<String> {
        let s = self.inner.shared().ok_or(BackendError::Unsupported)?;
        self.time(Op::GetId, || s.get_id(fileid))
    }
}

/// A multipart upload whose parts and completion are timed.
struct TimedUpload {
    inner: Box<dyn Upload>,
    at: At,
}

impl Upload for TimedUpload {
    fn put_part(&mut self, data: &[u8]) -> BResult<()> {
        let inner = &mut self.inner;
        timed(self.at, Op::Part, || inner.put_part(data))
    }
    fn complete(self: Box<Self>) -> BResult<ObjectMeta> {
        let TimedUpload { inner, at } = *self;
        timed(at, Op::Complete, || inner.complete())
    }
    fn abort(self: Box<Self>) {
        let TimedUpload { inner, at } = *self;
        let _ = timed(at, Op::Abort, || {
            inner.abort();
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wrapper changes nothing a store does: the backend conformance suite
    /// passes through it, over a store with in-place writes (memory).
    #[test]
    fn a_timed_store_behaves_as_the_store() {
        let b = Timed::wrap(Arc::new(memory::MemoryBackend::new()));
        assert_eq!(b.name(), "memory");
        assert!(b.random_write().is_some());
        conformance::run(&*b);
    }

    /// Every method of the `Backend` trait is passed through (a method left out
    /// would run the trait's default, e.g. `Unsupported`, instead of the store's).
    #[test]
    fn every_backend_method_is_passed_through() {
        let fns = |text: &str| -> Vec<String> {
            text.lines()
                .filter_map(|l| l.trim_start().strip_prefix("fn "))
                .map(|l| l.split(['(', '<']).next().unwrap_or("").to_string())
                .collect()
        };
        let module = include_str!("mod.rs");
        let start = module.find("pub trait Backend:").expect("the trait");
        let len = module[start..].find("\n}\n").expect("its end");
        let trait_fns = fns(&module[start..start + len]);
        assert!(trait_fns.len() > 30, "{trait_fns:?}");
        let here = include_str!("timed.rs");
        let at = here.find("impl Backend for Timed").expect("the impl");
        let passed = fns(&here[at..]);
        for f in &trait_fns {
            assert!(passed.contains(f), "Timed does not pass `{f}` through");
        }
    }

    #[test]
    fn calls_and_failures_are_counted_by_operation() {
        let b = Timed::wrap(Arc::new(memory::MemoryBackend::new()));
        let row = backend_ops::backend_row("memory");
        let (h0, e0) = backend_ops::totals(row, Op::Head);
        let (w0, _) = backend_ops::totals(row, Op::WriteAt);
        assert_eq!(b.head("timed/missing"), Err(BackendError::NotFound));
        b.put("timed/f", b"x", &UserMeta::new(), false).unwrap();
        b.head("timed/f").unwrap();
        b.random_write()
            .unwrap()
            .write_at("timed/f", 1, b"y")
            .unwrap();
        let (h1, e1) = backend_ops::totals(row, Op::Head);
        // Other tests in this binary may use a memory store at the same time.
        assert!(h1 >= h0 + 2, "{h0} -> {h1}");
        assert!(e1[0] > e0[0]);
        assert!(backend_ops::totals(row, Op::WriteAt).0 > w0);
    }
}
