//! Durability tracking across renames (`Inner::move_dirty`, `rename_keys`).
//!
//! RFC 1813 §3.3.21: COMMIT answers only once the file's UNSTABLE writes are durable.
//! The model knows which files have such writes by key (`dirty`), and a COMMIT of a
//! key that is not dirty (and has no sync in flight) answers at once without syncing.
//! So a rename must move exactly the renamed file's marker (or, for a directory, the
//! markers of the files under it): a marker moved from a neighbour whose name merely
//! starts with the renamed one's (`a/f2` beside `a/f`, a bug once) leaves that
//! neighbour's writes unsynced by its COMMIT. These tests watch the backend's syncs.

use super::*;
use crate::backend::{BResult, ListPage, RandomWrite};
use std::sync::Mutex;

/// The memory backend, recording every `RandomWrite::sync` (the durability a COMMIT
/// must ask for). Everything else passes through.
struct Syncs {
    inner: Arc<dyn Backend>,
    synced: Mutex<Vec<String>>,
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
        self.inner.random_write().unwrap().sync(key)
    }
}

fn setup() -> (FileModel, Arc<Syncs>, tempfile::TempDir) {
    let syncs = Arc::new(Syncs {
        inner: Arc::new(MemoryBackend::new()),
        synced: Mutex::new(Vec::new()),
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
