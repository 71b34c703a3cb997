//! The `memory` backend: objects in a `BTreeMap` under a `RwLock`. For tests and for
//! measuring the engine without a store. It behaves like an S3 bucket (no parent
//! directories are required, a "dir/" marker is just a zero-byte object) and also
//! supports in-place updates (`RandomWrite`) and the NFSv4.2 operations the way a
//! sparse local file does: holes in a sparse map (`extents::Extents`), ALLOCATE,
//! DEALLOCATE, range copies and clones; extended attributes are kept as the s3 store
//! keeps them (`meta_xattr`, with a larger budget), so tests see those rules.

use super::extents::Extents;

use super::*;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

#[derive(Debug, Clone)]
struct Obj {
    data: Vec<u8>,
    mtime_ns: u64,
    version: u64,
    user: UserMeta,
    /// Which bytes of `data` are data, not holes.
    extents: Extents,
}

#[derive(Default)]
struct Store {
    objects: BTreeMap<String, Obj>,
    /// Metadata of the store root (key ""), which is not an object in the map.
    root_user: UserMeta,
    root_mtime_ns: u64,
}

/// Largest object the memory backend holds: a hostile WRITE or SETATTR at a huge
/// offset gets NFS3ERR_NOSPC instead of an allocation of that size.
pub const MAX_OBJECT: u64 = 16 << 30;

/// Bytes of extended attributes per object (their names and encoded values,
/// `meta_xattr`), and the largest value: RFC 8276 leaves both to the server.
pub const XATTR_BUDGET: usize = 256 << 10;
pub const XATTR_MAX_VALUE: usize = 64 << 10;

pub struct MemoryBackend {
    store: Arc<RwLock<Store>>,
    version: Arc<AtomicU64>,
    /// `Cas` objects (name → bytes, version), apart from the keys clients see. One
    /// mutex makes each conditional write atomic (tests of `[ha]`).
    cas: std::sync::Mutex<BTreeMap<String, (Vec<u8>, u64)>>,
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn meta_of(key: &str, o: &Obj) -> ObjectMeta {
    ObjectMeta {
        key: key.to_string(),
        size: o.data.len() as u64,
        mtime_ns: o.mtime_ns,
        etag: format!("{:x}-{:x}", o.version, o.data.len()),
        user: o.user.clone(),
    }
}

/// The smallest string greater than every string starting with `p` (which ends in
/// the delimiter `d`).
fn past_prefix(p: &str, d: char) -> String {
    let mut s = p[..p.len() - d.len_utf8()].to_string();
    s.push(char::from_u32(d as u32 + 1).unwrap_or(char::MAX));
    s
}

impl MemoryBackend {
    pub fn new() -> MemoryBackend {
        MemoryBackend {
            store: Arc::new(RwLock::new(Store {
                root_mtime_ns: now_ns(),
                ..Store::default()
            })),
            version: Arc::new(AtomicU64::new(1)),
            cas: Default::default(),
        }
    }

    fn next_version(&self) -> u64 {
        self.version.fetch_add(1, Ordering::Relaxed)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Store> {
        self.store.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Store> {
        self.store.write().unwrap_or_else(|e| e.into_inner())
    }

    fn insert(
        &self,
        key: &str,
        data: Vec<u8>,
        meta: &UserMeta,
        if_absent: bool,
    ) -> BResult<ObjectMeta> {
        check_key(key)?;
        let obj = Obj {
            extents: Extents::full(data.len() as u64),
            data,
            mtime_ns: now_ns(),
            version: self.next_version(),
            user: meta.clone(),
        };
        let mut st = self.write();
        if if_absent && st.objects.contains_key(key) {
            return Err(BackendError::AlreadyExists);
        }
        let m = meta_of(key, &obj);
        st.objects.insert(key.to_string(), obj);
        Ok(m)
    }

    fn update<R>(&self, key: &str, f: impl FnOnce(&mut Obj) -> R) -> BResult<R> {
        check_key(key)?;
        let v = self.next_version();
        let mut st = self.write();
        let o = st.objects.get_mut(key).ok_or(BackendError::NotFound)?;
        let r = f(o);
        o.version = v;
        Ok(r)
    }
}

struct MemUpload {
    backend: MemoryBackend,
    key: String,
    meta: UserMeta,
    data: Vec<u8>,
}

impl Upload for MemUpload {
    fn put_part(&mut self, data: &[u8]) -> BResult<()> {
        self.data.extend_from_slice(data);
        Ok(())
    }

    fn complete(self: Box<Self>) -> BResult<ObjectMeta> {
        let this = *self;
        this.backend.insert(&this.key, this.data, &this.meta, false)
    }

    fn abort(self: Box<Self>) {}
}

impl Cas for MemoryBackend {
    fn cas_get(&self, name: &str) -> BResult<Option<(Vec<u8>, String)>> {
        let g = self.cas.lock().unwrap_or_else(|e| e.into_inner());
        Ok(g.get(name).map(|(d, v)| (d.clone(), v.to_string())))
    }

    fn cas_put(&self, name: &str, data: &[u8], expect: Option<&str>) -> BResult<String> {
        let mut g = self.cas.lock().unwrap_or_else(|e| e.into_inner());
        let now = g.get(name).map(|(_, v)| v.to_string());
        if now.as_deref() != expect {
            return Err(BackendError::AlreadyExists);
        }
        let v = self.version.fetch_add(1, Ordering::Relaxed);
        g.insert(name.to_string(), (data.to_vec(), v));
        Ok(v.to_string())
    }
}

impl Backend for MemoryBackend {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn cas(&self) -> Option<&dyn Cas> {
        Some(self)
    }

    fn max_file_size(&self) -> u64 {
        MAX_OBJECT
    }

    fn head(&self, key: &str) -> BResult<ObjectMeta> {
        if key.is_empty() {
            let st = self.read();
            return Ok(ObjectMeta {
                key: String::new(),
                size: 0,
                mtime_ns: st.root_mtime_ns,
                etag: String::new(),
                user: st.root_user.clone(),
            });
        }
        check_key(key)?;
        let st = self.read();
        st.objects
            .get(key)
            .map(|o| meta_of(key, o))
            .ok_or(BackendError::NotFound)
    }

    fn get_range(&self, key: &str, offset: u64, dst: &mut [u8]) -> BResult<usize> {
        check_key(key)?;
        let st = self.read();
        let o = st.objects.get(key).ok_or(BackendError::NotFound)?;
        let len = o.data.len() as u64;
        if offset >= len {
            return Ok(0);
        }
        let n = ((len - offset) as usize).min(dst.len());
        dst[..n].copy_from_slice(&o.data[offset as usize..offset as usize + n]);
        Ok(n)
    }

    fn put(&self, key: &str, data: &[u8], meta: &UserMeta, if_absent: bool) -> BResult<ObjectMeta> {
        self.insert(key, data.to_vec(), meta, if_absent)
    }

    fn multipart(&self, key: &str, meta: &UserMeta) -> BResult<Box<dyn Upload>> {
        check_key(key)?;
        Ok(Box::new(MemUpload {
            backend: MemoryBackend {
                store: self.store.clone(),
                version: self.version.clone(),
                cas: Default::default(),
            },
            key: key.to_string(),
            meta: meta.clone(),
            data: Vec::new(),
        }))
    }

    /// Listed objects are read as `head` reads them.
    fn list_meta_complete(&self) -> bool {
        true
    }

    fn list(
        &self,
        prefix: &str,
        delimiter: Option<char>,
        start_after: Option<&str>,
        max: usize,
    ) -> BResult<ListPage> {
        check_prefix(prefix)?;
        let max = max.max(1);
        let st = self.read();
        let mut page = ListPage::default();
        let mut count = 0usize;
        let mut last: Option<String> = None;
        let mut lower: Bound<String> = match start_after {
            Some(s) if s >= prefix => Bound::Excluded(s.to_string()),
            _ => Bound::Included(prefix.to_string()),
        };
        loop {
            let mut it = st
                .objects
                .range::<String, _>((lower.clone(), Bound::Unbounded));
            let Some((k, o)) = it.next() else { break };
            if !k.starts_with(prefix) {
                break;
            }
            let rest = &k[prefix.len()..];
            let rolled = delimiter.and_then(|d| {
                rest.find(d)
                    .map(|i| (d, &k[..prefix.len() + i + d.len_utf8()]))
            });
            if count == max {
                page.next = last.take();
                break;
            }
            match rolled {
                Some((d, cp)) => {
                    let past = past_prefix(cp, d);
                    if start_after.is_none_or(|s| s < cp) {
                        page.prefixes.push(cp.to_string());
                        last = Some(cp.to_string());
                        count += 1;
                    }
                    lower = Bound::Included(past);
                }
                None => {
                    page.objects.push(meta_of(k, o));
                    last = Some(k.clone());
                    count += 1;
                    lower = Bound::Excluded(k.clone());
                }
            }
        }
        Ok(page)
    }

    fn copy(&self, from: &str, to: &str) -> BResult<()> {
        check_key(from)?;
        check_key(to)?;
        let v = self.next_version();
        let mut st = self.write();
        let mut o = st
            .objects
            .get(from)
            .cloned()
            .ok_or(BackendError::NotFound)?;
        o.version = v;
        o.mtime_ns = now_ns();
        st.objects.insert(to.to_string(), o);
        Ok(())
    }

    fn delete(&self, key: &str) -> BResult<()> {
        check_key(key)?;
        match self.write().objects.remove(key) {
            Some(_) => Ok(()),
            None => Err(BackendError::NotFound),
        }
    }

    fn set_meta(&self, key: &str, meta: &UserMeta) -> BResult<()> {
        if key.is_empty() {
            self.write().root_user = meta.clone();
            return Ok(());
        }
        self.update(key, |o| o.user = meta.clone())
    }

    fn capacity(&self) -> BResult<(u64, u64, u64, u64)> {
        let st = self.read();
        let used: u64 = st.objects.values().map(|o| o.data.len() as u64).sum();
        let total = 1u64 << 40;
        let files = 1u64 << 32;
        Ok((
            total,
            total.saturating_sub(used),
            files,
            files.saturating_sub(st.objects.len() as u64),
        ))
    }

    fn random_write(&self) -> Option<&dyn RandomWrite> {
        Some(self)
    }

    fn seek(&self, key: &str, offset: u64, data: bool) -> BResult<Option<u64>> {
        check_key(key)?;
        let st = self.read();
        let o = st.objects.get(key).ok_or(BackendError::NotFound)?;
        let size = o.data.len() as u64;
        Ok(if data {
            o.extents.next_data(offset, size)
        } else {
            o.extents.next_hole(offset, size)
        })
    }

    fn allocate(&self, key: &str, offset: u64, len: u64) -> BResult<()> {
        let end = end_of(offset, len)?;
        self.update(key, |o| {
            if (o.data.len() as u64) < end {
                o.data.resize(end as usize, 0);
            }
            o.extents.add(offset, end);
            o.mtime_ns = now_ns();
        })
    }

    fn deallocate(&self, key: &str, offset: u64, len: u64) -> BResult<()> {
        let end = offset.saturating_add(len);
        self.update(key, |o| {
            let size = o.data.len() as u64;
            let (s, e) = (offset.min(size), end.min(size));
            o.data[s as usize..e as usize].fill(0);
            o.extents.punch(s, e);
            o.mtime_ns = now_ns();
        })
    }

    fn copy_range(&self, src: &str, s: u64, dst: &str, d: u64, count: u64) -> BResult<u64> {
        check_key(src)?;
        let end = end_of(d, count)?;
        let v = self.next_version();
        let mut st = self.write();
        let from = st.objects.get(src).ok_or(BackendError::NotFound)?;
        let size = from.data.len() as u64;
        let n = count.min(size.saturating_sub(s));
        let bytes = from.data[s.min(size) as usize..(s.min(size) + n) as usize].to_vec();
        let holes = from.extents.clone();
        let to = st.objects.get_mut(dst).ok_or(BackendError::NotFound)?;
        debug_assert!(d + n <= end);
        if (to.data.len() as u64) < d + n {
            to.data.resize((d + n) as usize, 0);
        }
        to.data[d as usize..(d + n) as usize].copy_from_slice(&bytes);
        // The source's holes stay holes (as copy_file_range keeps them sparse).
        to.extents.punch(d, d + n);
        let mut at = s;
        while let Some(ds) = holes.next_data(at, s + n) {
            let de = holes.next_hole(ds, s + n).unwrap_or(s + n);
            to.extents.add(d + (ds - s), d + (de - s));
            at = de;
        }
        to.version = v;
        to.mtime_ns = now_ns();
        Ok(n)
    }

    fn clone_range(&self, src: &str, s: u64, dst: &str, d: u64, count: u64) -> BResult<()> {
        self.copy_range(src, s, dst, d, count).map(|_| ())
    }

    fn xattr_max_value(&self) -> usize {
        XATTR_MAX_VALUE
    }

    fn xattr_get(&self, key: &str, name: &[u8]) -> BResult<Option<Vec<u8>>> {
        Ok(meta_xattr::get(&self.head(key)?.user, name))
    }

    fn xattr_set(&self, key: &str, name: &[u8], val: &[u8], how: XattrSet) -> BResult<bool> {
        if val.len() > XATTR_MAX_VALUE {
            return Err(BackendError::TooLarge);
        }
        self.update(key, |o| {
            meta_xattr::set(&mut o.user, name, val, how, XATTR_BUDGET)
        })?
    }

    fn xattr_list(&self, key: &str) -> BResult<Vec<Vec<u8>>> {
        Ok(meta_xattr::list(&self.head(key)?.user))
    }

    fn xattr_remove(&self, key: &str, name: &[u8]) -> BResult<bool> {
        self.update(key, |o| meta_xattr::remove(&mut o.user, name))
    }

    fn rename(&self, from: &str, to: &str) -> BResult<()> {
        check_key(from)?;
        check_key(to)?;
        if from == to {
            return Ok(());
        }
        if from.ends_with('/') != to.ends_with('/') {
            return Err(BackendError::Permanent(format!(
                "rename {from:?} -> {to:?}: mixing a directory and a file"
            )));
        }
        let mut st = self.write();
        if !from.ends_with('/') {
            let o = st.objects.remove(from).ok_or(BackendError::NotFound)?;
            st.objects.insert(to.to_string(), o);
            return Ok(());
        }
        if to.starts_with(from) {
            return Err(BackendError::Permanent(format!(
                "rename {from:?} into itself"
            )));
        }
        let keys: Vec<String> = st
            .objects
            .range::<String, _>((Bound::Included(from.to_string()), Bound::Unbounded))
            .map(|(k, _)| k)
            .take_while(|k| k.starts_with(from))
            .cloned()
            .collect();
        if keys.is_empty() {
            return Err(BackendError::NotFound);
        }
        // A non-empty target directory cannot be replaced.
        let busy = st
            .objects
            .range::<String, _>((Bound::Excluded(to.to_string()), Bound::Unbounded))
            .next()
            .is_some_and(|(k, _)| k.starts_with(to));
        if busy {
            return Err(BackendError::Permanent(format!(
                "rename target {to:?} is not empty"
            )));
        }
        st.objects.remove(to);
        for k in keys {
            if let Some(o) = st.objects.remove(&k) {
                st.objects.insert(format!("{to}{}", &k[from.len()..]), o);
            }
        }
        Ok(())
    }
}

/// The end of `[offset, offset + len)`, which must fit the largest object.
fn end_of(offset: u64, len: u64) -> BResult<u64> {
    offset
        .checked_add(len)
        .filter(|e| *e <= MAX_OBJECT)
        .ok_or(BackendError::NoSpace)
}

impl RandomWrite for MemoryBackend {
    fn write_at(&self, key: &str, offset: u64, data: &[u8]) -> BResult<()> {
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|e| *e <= MAX_OBJECT)
            .ok_or(BackendError::NoSpace)?;
        self.update(key, |o| {
            if (o.data.len() as u64) < end {
                o.data.resize(end as usize, 0);
            }
            o.data[offset as usize..end as usize].copy_from_slice(data);
            o.extents.add(offset, end);
            o.mtime_ns = now_ns();
        })
    }

    fn set_size(&self, key: &str, size: u64) -> BResult<()> {
        if size > MAX_OBJECT {
            return Err(BackendError::NoSpace);
        }
        self.update(key, |o| {
            o.data.resize(size as usize, 0);
            o.extents.truncate(size);
            o.mtime_ns = now_ns();
        })
    }

    fn sync(&self, key: &str) -> BResult<()> {
        self.head(key).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conformance() {
        crate::backend::conformance::run(&MemoryBackend::new());
        crate::backend::conformance::cas(&MemoryBackend::new());
    }
}
