//! The floor's file system: one flat directory (the export's root) of files held in
//! memory. Handles are the 8-byte file id; the root is id 1.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

pub const ROOT: u64 = 1;

/// One file's bytes. A READ holds the read lock while its reply goes out, so the data
/// is written to the socket straight from here (no copy into a reply buffer).
pub type Data = Arc<RwLock<Vec<u8>>>;

#[derive(Default)]
struct Inner {
    names: HashMap<Vec<u8>, u64>,
    files: HashMap<u64, Data>,
    next: u64,
}

#[derive(Default)]
pub struct Store {
    inner: Mutex<Inner>,
}

impl Store {
    pub fn lookup(&self, name: &[u8]) -> Option<u64> {
        self.lock().names.get(name).copied()
    }

    /// The file `name`, made empty if it is new; an existing one is kept as it is
    /// (CREATE UNCHECKED, RFC 1813 §3.3.8); `truncate` empties it (a size-0 sattr3).
    pub fn create(&self, name: &[u8], truncate: bool) -> u64 {
        let mut g = self.lock();
        if let Some(&id) = g.names.get(name) {
            if truncate {
                if let Some(d) = g.files.get(&id) {
                    d.write().unwrap_or_else(|e| e.into_inner()).clear();
                }
            }
            return id;
        }
        g.next = g.next.max(ROOT) + 1;
        let id = g.next;
        g.names.insert(name.to_vec(), id);
        g.files.insert(id, Data::default());
        id
    }

    pub fn remove(&self, name: &[u8]) -> bool {
        let mut g = self.lock();
        match g.names.remove(name) {
            Some(id) => g.files.remove(&id).is_some(),
            None => false,
        }
    }

    pub fn file(&self, id: u64) -> Option<Data> {
        self.lock().files.get(&id).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}
