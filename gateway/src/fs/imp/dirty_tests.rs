//! Durability tracking across renames (`Inner::move_dirty`, `rename_keys`).
//!
//! RFC 1813 §3.3.21: COMMIT answers only once the file's UNSTABLE writes are durable.
//! The model knows which files have such writes by key (`dirty`), and a COMMIT of a
//! key that is not dirty (and has no sync in flight) answers at once without syncing.
//! So a rename must move exactly the renamed file's marker (or, for a directory, the
//! markers of the files under it): a marker moved from a neighbour whose name merely
//! starts with the renamed one's (`a/f2` beside `a/f`, a bug once) leaves that
//! neighbour's writes unsynced by its COMMIT. These tests watch the backend's syncs.
//!
//! Also here: staged writes the store lost (`BackendError::Lost`, s3's vanished
//! multipart upload): COMMIT answers OK with a new write verifier (RFC 1813
//! §3.3.21), a stable WRITE and a SETATTR of the size are redone, never reported
//! done without being in the store.

use super::*;
use crate::backend::{BResult, ListPage, RandomWrite};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// The memory backend, recording every `RandomWrite::sync` (the durability a COMMIT
/// must ask for). Everything else passes through.
struct Syncs {
    inner: Arc<dyn Backend>,
    synced: Mutex<Vec<String>>,
    /// The next sync finds its staged writes lost (as s3's `WriteBack::lose`).
    lose_next: AtomicBool,
    lost: AtomicU64,
}

impl Syncs {
    fn take(&self) -> Vec<String> {
        let mut v = std::mem::take(&mut *self.synced.lock().unwrap());
        v.sort();
        v
    }
}

impl Backend for Syncs {
    fn name(&self) -> &'static str {
        "syncs"
    }
    fn head(&self, key: &str) -> BResult<ObjectMeta> {
        self.inner.head(key)
    }
    fn get_range(&self, key: &str, offset: u64, dst: &mut [u8]) -> BResult<usize> {
        self.inner.get_range(key, offset, dst)
    }
    fn put(&self, key: &str, data: &[u8], meta: &UserMeta, if_absent: bool) -> BResult<ObjectMeta> {
        self.inner.put(key, data, meta, if_absent)
    }
    fn multipart(&self, key: &str, meta: &UserMeta) -> BResult<Box<dyn crate::backend::Upload>> {
        self.inner.multipart(key, meta)
    }
    fn list(
        &self,
        prefix: &str,
        delimiter: Option<char>,
        start_after: Option<&str>,
        max: usize,
    ) -> BResult<ListPage> {
        self.inner.list(prefix, delimiter, start_after, max)
    }
    fn copy(&self, from: &str, to: &str) -> BResult<()> {
        self.inner.copy(from, to)
    }
    fn delete(&self, key: &str) -> BResult<()> {
        self.inner.delete(key)
    }
    fn set_meta(&self, key: &str, meta: &UserMeta) -> BResult<()> {
        self.inner.set_meta(key, meta)
    }
    fn capacity(&self) -> BResult<(u64, u64, u64, u64)> {
        self.inner.capacity()
    }
    fn random_write(&self) -> Option<&dyn RandomWrite> {
        Some(self)
    }
    fn lost_writes(&self) -> u64 {
        self.lost.load(Ordering::Acquire)
    }
}

impl RandomWrite for Syncs {
    fn write_at(&self, key: &str, offset: u64, data: &[u8]) -> BResult<()> {
        self.inner
            .random_write()
            .unwrap()
            .write_at(key, offset, data)
    }
    fn set_size(&self, key: &str, size: u64) -> BResult<()> {
        self.inner.random_write().unwrap().set_size(key, size)
    }
    fn sync(&self, key: &str) -> BResult<()> {
        self.synced.lock().unwrap().push(key.to_string());
        if self.lose_next.swap(false, Ordering::AcqRel) {
            // The store lost what was staged: gone from the object too.
            self.inner.random_write().unwrap().set_size(key, 0)?;
            self.lost.fetch_add(1, Ordering::AcqRel);
            return Err(BackendError::Lost("test".into()));
        }
        self.inner.random_write().unwrap().sync(key)
    }
}

fn setup() -> (FileModel, Arc<Syncs>, tempfile::TempDir) {
    let syncs = Arc::new(Syncs {
        inner: Arc::new(MemoryBackend::new()),
        synced: Mutex::new(Vec::new()),
        lose_next: AtomicBool::new(false),
        lost: AtomicU64::new(0),
    });
    let st = tempfile::tempdir().unwrap();
    let b: Arc<dyn Backend> = syncs.clone();
    let m = FileModel::open(b, st.path(), &exports()).unwrap();
    (m, syncs, st)
}

fn unstable(m: &FileModel, f: &Node, data: &[u8]) {
    assert_eq!(m.write(f, 0, data, Stable::Unstable), Ok(Stable::Unstable));
}

#[test]
fn renaming_a_file_leaves_the_pending_writes_of_a_name_it_prefixes_alone() {
    let (m, syncs, _st) = setup();
    let root = m.root(0).unwrap();
    let a = m.mkdir(&root, b"a", &SetAttr::default(), OWNER).unwrap();
    let f = mkfile(&m, &a, "f");
    let f2 = mkfile(&m, &a, "f2");
    unstable(&m, &f, b"f's data");
    unstable(&m, &f2, b"f2's data");
    syncs.take();
    m.rename(&a, b"f", &a, b"g").unwrap();
    assert_eq!(
        syncs.take(),
        Vec::<String>::new(),
        "a rename syncs nothing here"
    );
    // The neighbour keeps its name and its pending writes: its COMMIT syncs them.
    let f2 = m.lookup(&a, b"f2").unwrap_or(f2);
    m.commit(&f2).unwrap();
    assert_eq!(
        syncs.take(),
        ["a/f2"],
        "COMMIT of a/f2 did not sync its pending writes"
    );
    // The renamed file's pending writes moved with it.
    let g = m.lookup(&a, b"g").unwrap();
    m.commit(&g).unwrap();
    assert_eq!(syncs.take(), ["a/g"]);
    // Nothing else is left pending (no marker invented for "a/g2").
    for k in ["a/f", "a/f2", "a/g", "a/g2"] {
        assert!(!m.begin_sync(k), "{k} still marked pending");
    }
    // A second COMMIT has nothing to sync.
    m.commit(&g).unwrap();
    m.commit(&f2).unwrap();
    assert_eq!(syncs.take(), Vec::<String>::new());
}

#[test]
fn renaming_a_directory_moves_the_pending_writes_of_every_file_under_it() {
    let (m, syncs, _st) = setup();
    let root = m.root(0).unwrap();
    let a = m.mkdir(&root, b"a", &SetAttr::default(), OWNER).unwrap();
    let sub = m.mkdir(&a, b"sub", &SetAttr::default(), OWNER).unwrap();
    let a2 = m.mkdir(&root, b"a2", &SetAttr::default(), OWNER).unwrap();
    let x = mkfile(&m, &a, "x");
    let y = mkfile(&m, &sub, "y");
    let z = mkfile(&m, &a2, "z"); // beside "a/", not under it
    let top = mkfile(&m, &root, "a.txt"); // a name "a" prefixes, not under "a/"
    for (f, d) in [(&x, &b"x"[..]), (&y, b"y"), (&z, b"z"), (&top, b"t")] {
        unstable(&m, f, d);
    }
    syncs.take();
    m.rename(&root, b"a", &root, b"b").unwrap();
    let b = m.lookup(&root, b"b").unwrap();
    let bsub = m.lookup(&b, b"sub").unwrap();
    m.commit(&m.lookup(&b, b"x").unwrap()).unwrap();
    m.commit(&m.lookup(&bsub, b"y").unwrap()).unwrap();
    assert_eq!(
        syncs.take(),
        ["b/sub/y", "b/x"],
        "files under the moved directory"
    );
    m.commit(&z).unwrap();
    m.commit(&top).unwrap();
    assert_eq!(
        syncs.take(),
        ["a.txt", "a2/z"],
        "files beside it keep their markers"
    );
    for k in [
        "a/x", "a/sub/y", "b/x", "b/sub/y", "a2/z", "a.txt", "b2/z", "b.txt",
    ] {
        assert!(!m.begin_sync(k), "{k} still marked pending");
    }
}

fn content(m: &FileModel, f: &Node) -> Vec<u8> {
    let mut b = vec![0u8; 256];
    let (n, _) = m.read(f, 0, &mut b).unwrap();
    b.truncate(n);
    b
}

#[test]
fn a_commit_that_finds_its_writes_lost_answers_ok_with_a_new_verifier() {
    let (m, syncs, _st) = setup();
    let root = m.root(0).unwrap();
    let f = mkfile(&m, &root, "f");
    let v0 = m.write_verifier();
    unstable(&m, &f, b"lost by the store");
    syncs.lose_next.store(true, Ordering::Release);
    // OK, not an error the application would see as EIO: the client compares the
    // verifier, sees a new one and resends.
    assert_eq!(m.commit(&f), Ok(()));
    let v1 = m.write_verifier();
    assert_ne!(
        v1, v0,
        "COMMIT answered with the verifier the lost WRITEs carry"
    );
    unstable(&m, &f, b"resent");
    assert_eq!(m.commit(&f), Ok(()));
    assert_eq!(m.write_verifier(), v1);
    assert_eq!(content(&m, &f), b"resent");
}

#[test]
fn a_stable_write_or_a_truncation_that_finds_the_stage_lost_is_redone() {
    let (m, syncs, _st) = setup();
    let root = m.root(0).unwrap();
    let f = mkfile(&m, &root, "f");
    syncs.take();
    // FILE_SYNC promises the data is in the store: redone once, then reported.
    syncs.lose_next.store(true, Ordering::Release);
    assert_eq!(
        m.write(&f, 0, b"stable", Stable::FileSync),
        Ok(Stable::FileSync)
    );
    assert_eq!(syncs.take(), ["f", "f"]);
    assert_eq!(content(&m, &f), b"stable");
    // A SETATTR of the size is not resent by clients either.
    syncs.lose_next.store(true, Ordering::Release);
    let set = SetAttr {
        size: Some(3),
        ..Default::default()
    };
    assert_eq!(m.setattr(&f, &set), Ok(()));
    assert_eq!(m.getattr(&f).unwrap().size, 3);
    assert_eq!(syncs.lost.load(Ordering::Acquire), 2);
}
