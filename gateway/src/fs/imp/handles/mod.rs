//! File handles and the persistent handle table.
//!
//! Handle (31 bytes): version 1 | export id u16 LE | fileid u64 LE | generation u32 LE
//! | MAC: blake3 keyed hash of the preceding 15 bytes, truncated to 16 bytes. The
//! 32-byte MAC key is made at first start in `state_dir/handle.key` (mode 0600).
//!
//! The table maps fileid → (backend key, generation). It is a bounded in-memory cache
//! (`cache`: CLOCK eviction, `DEFAULT_CACHE_ENTRIES` entries) over a durable index,
//! `state_dir/handles.db` (`index`: SQLite, WAL journal), which holds every mapping and
//! answers id → (key, gen) and key → id for evicted entries, and whose ordered key
//! index makes a directory rename or removal a range scan. SQLite (the `bundled`
//! build, so no system library is needed) rather than a pure-Rust store because its
//! WAL mode with `synchronous = NORMAL` gives exactly the durability the old log had:
//! each change is committed with write(2) before the call returns (it survives a
//! process kill) and fsynced only at `sync` (flush_all / COMMIT) — a store whose only
//! cheap commit is "lost on crash" would let a kill resolve a renamed id to the new
//! object at its old name.
//!
//! Locks: a lookup of a cached key or id takes only the cache's read lock (and sets an
//! atomic "used" bit). A miss reads the index on one of a few reader connections (WAL
//! readers do not wait for the writer) and fills the cache only if no change came in
//! between (the cache's epoch). Changes and new assignments take the index mutex, then
//! the cache's write lock; every change goes to the index first, then to the cache
//! (and bumps the epoch), so the cache is always a subset of the index.
//!
//! Older versions kept the table as an append-only log, `state_dir/handles.log`: an
//! 8-byte magic "NFSGWHT1", then records
//!
//! ```text
//! tag u8 | fileid u64 LE | gen u32 LE | len u32 LE | payload[len] | check u32 LE
//! ```
//!
//! where `check` is the first 4 bytes of blake3 over the record's preceding bytes.
//! Tags: 1 ASSIGN (payload = key), 2 RENAME (fileid's key becomes payload), 3
//! RENAME_PREFIX (payload = "old\0new": every key under the old directory prefix moves
//! under the new one), 4 FORGET (fileid removed; `gen` is kept as a tombstone so the
//! next object with that fileid gets a higher generation). Replay stops at the first
//! torn or corrupt record. At the first open such a log is imported into the index
//! (`legacy`), made durable, and renamed to `handles.log.imported`, so handles issued
//! before the upgrade keep working.
//!
//! Only keys someone got a handle for (LOOKUP, CREATE, READDIRPLUS, ...) are recorded:
//! a READDIR listing shows the id a key would get (`ids_for_listing`) without
//! recording it. Tombstones below the time floor are pruned at open and as forgets
//! pile up.
//!
//! fileid = the first 8 bytes of blake3(key), re-hashed with a counter on collision
//! with another live key and never 0 or 1. A generation is at least the current Unix
//! time in seconds and above any earlier generation of that fileid, so a forgotten and
//! reassigned fileid never matches an old handle, even across restarts.

mod cache;
mod index;
mod legacy;
#[cfg(test)]
mod tests;

use cache::Cache;
use rusqlite::Connection;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};

/// Live mappings kept in memory (each about 100 bytes plus its key).
#[cfg(test)]
const DEFAULT_CACHE_ENTRIES: usize = crate::config::DEFAULT_HANDLE_CACHE_ENTRIES;
/// The id `assign` gives when the index fails: never assigned (ids are above 1), so a
/// handle with it is STALE, never another file.
const UNRESOLVABLE: u64 = 1;
/// Idle reader connections kept open.
const READERS_MAX: usize = 8;
/// Forgets between two prunes of the tombstones the time floor covers.
const PRUNE_EVERY: usize = 4096;

pub(super) const HANDLE_LEN: usize = 31;
const VERSION: u8 = 1;

/// Loads the MAC key, creating it (mode 0600) at first start.
pub(super) fn load_mac_key(state_dir: &Path) -> anyhow::Result<[u8; 32]> {
    use anyhow::Context;
    let path = state_dir.join("handle.key");
    match std::fs::read(&path) {
        Ok(b) if b.len() == 32 => {
            let mut k = [0u8; 32];
            k.copy_from_slice(&b);
            return Ok(k);
        }
        Ok(b) => anyhow::bail!(
            "{}: expected 32 bytes, found {}; restore it (or delete it: every handle clients hold becomes invalid)",
            path.display(),
            b.len()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    }
    let key: [u8; 32] = rand::random();
    write_atomically(&path, &state_dir.join("handle.key.tmp"), &key)?;
    File::open(state_dir)?.sync_all()?;
    Ok(key)
}

fn mac(key: &[u8; 32], body: &[u8]) -> [u8; 16] {
    let h = blake3::keyed_hash(key, body);
    let mut m = [0u8; 16];
    m.copy_from_slice(&h.as_bytes()[..16]);
    m
}

pub(super) fn encode(key: &[u8; 32], export: u16, fileid: u64, gen: u32) -> [u8; HANDLE_LEN] {
    let mut b = [0u8; HANDLE_LEN];
    b[0] = VERSION;
    b[1..3].copy_from_slice(&export.to_le_bytes());
    b[3..11].copy_from_slice(&fileid.to_le_bytes());
    b[11..15].copy_from_slice(&gen.to_le_bytes());
    let m = mac(key, &b[..15]);
    b[15..].copy_from_slice(&m);
    b
}

/// Shared-store handles (version 2, for stores several gateways serve: s3):
///
/// ```text
/// 2 | export u16 LE | fileid u64 LE | incarnation u32 LE | MAC[16] | key suffix
/// ```
///
/// The MAC (keyed with the store-wide key, see `SharedState::mac_key`) covers the
/// first 15 bytes and the suffix. The suffix is the object key below the export root
/// when it fits (at most SUFFIX_MAX bytes); longer keys are found through the store's
/// id index instead. The incarnation is a random id the gateway stores in an object's
/// metadata when it creates it (0 for objects made by other tools), so a removed and
/// re-created name gets a new handle. Every gateway on the store derives the same
/// handle for the same object.
const VERSION_SHARED: u8 = 2;
const SHARED_FIXED: usize = 31;
pub(super) const SUFFIX_MAX: usize = crate::fs::FH_MAX - SHARED_FIXED;

pub(super) fn encode_shared(
    key: &[u8; 32],
    export: u16,
    fileid: u64,
    incarnation: u32,
    suffix: &[u8],
) -> Vec<u8> {
    assert!(suffix.len() <= SUFFIX_MAX, "suffix fits the handle");
    let mut b = Vec::with_capacity(SHARED_FIXED + suffix.len());
    b.push(VERSION_SHARED);
    b.extend_from_slice(&export.to_le_bytes());
    b.extend_from_slice(&fileid.to_le_bytes());
    b.extend_from_slice(&incarnation.to_le_bytes());
    let m = mac_shared(key, &b, suffix);
    b.extend_from_slice(&m);
    b.extend_from_slice(suffix);
    b
}

fn mac_shared(key: &[u8; 32], head: &[u8], suffix: &[u8]) -> [u8; 16] {
    let mut h = blake3::Hasher::new_keyed(key);
    h.update(head);
    h.update(suffix);
    let mut m = [0u8; 16];
    m.copy_from_slice(&h.finalize().as_bytes()[..16]);
    m
}

/// A version-2 handle's parts.
pub(super) struct SharedHandle {
    pub export: u16,
    pub fileid: u64,
    pub incarnation: u32,
    pub suffix: Vec<u8>,
}

/// Authenticates a version-2 handle.
pub(super) fn decode_shared(key: &[u8; 32], fh: &[u8]) -> Option<SharedHandle> {
    if fh.len() < SHARED_FIXED || fh.len() > crate::fs::FH_MAX || fh[0] != VERSION_SHARED {
        return None;
    }
    let m = mac_shared(key, &fh[..15], &fh[SHARED_FIXED..]);
    let diff = m
        .iter()
        .zip(&fh[15..SHARED_FIXED])
        .fold(0u8, |a, (x, y)| a | (x ^ y));
    if diff != 0 {
        return None;
    }
    let (export, fileid) = peek(fh)?;
    Some(SharedHandle {
        export,
        fileid,
        incarnation: u32::from_le_bytes(fh[11..15].try_into().ok()?),
        suffix: fh[SHARED_FIXED..].to_vec(),
    })
}

/// Reads export and file id from a handle WITHOUT authenticating it: only for cache
/// invalidation and keys, where a wrong answer costs a miss, never a wrong file.
pub(super) fn peek(fh: &[u8]) -> Option<(u16, u64)> {
    let ok = match fh.first() {
        Some(&VERSION) => fh.len() == HANDLE_LEN,
        Some(&VERSION_SHARED) => (SHARED_FIXED..=crate::fs::FH_MAX).contains(&fh.len()),
        _ => false,
    };
    if !ok {
        return None;
    }
    let export = u16::from_le_bytes([fh[1], fh[2]]);
    let fileid = u64::from_le_bytes(fh[3..11].try_into().ok()?);
    Some((export, fileid))
}

/// Authenticates and splits a handle into (export, fileid, generation).
pub(super) fn decode(key: &[u8; 32], fh: &[u8]) -> Option<(u16, u64, u32)> {
    if fh.len() != HANDLE_LEN || fh[0] != VERSION {
        return None;
    }
    let m = mac(key, &fh[..15]);
    // Constant-time comparison.
    let diff = m.iter().zip(&fh[15..]).fold(0u8, |a, (x, y)| a | (x ^ y));
    if diff != 0 {
        return None;
    }
    let (export, fileid) = peek(fh)?;
    let gen = u32::from_le_bytes(fh[11..15].try_into().ok()?);
    Some((export, fileid, gen))
}

/// The `n`th file id candidate of `key`: the first 8 bytes of blake3(key), then of
/// blake3(key | 0 | n) for collision re-hashes.
fn candidate(key: &str, n: u64) -> u64 {
    let h = if n == 0 {
        blake3::hash(key.as_bytes())
    } else {
        let mut hs = blake3::Hasher::new();
        hs.update(key.as_bytes());
        hs.update(&[0]);
        hs.update(&n.to_le_bytes());
        hs.finalize()
    };
    u64::from_le_bytes(h.as_bytes()[..8].try_into().expect("8 bytes"))
}

fn now_secs() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs().min(u32::MAX as u64) as u32)
        .unwrap_or(1)
}

/// The file ids a change of the table unmapped or moved, for the reactors' caches
/// (`Inner::changing`); `None` when the index failed and cannot say which (every
/// cached entry is then dropped).
pub(super) type Touched = Option<Vec<u64>>;

/// The index connection and the forgets since the last tombstone prune.
struct Db {
    conn: Connection,
    forgets: usize,
}

/// The table; see the module doc for the cache/index split and the lock order
/// (index, then cache).
pub(super) struct HandleTable {
    cache: RwLock<Cache>,
    db: Mutex<Db>,
    /// Idle reader connections: misses read the index beside the writer, so a lookup
    /// of an evicted entry does not wait for changes or for other misses.
    readers: Mutex<Vec<Connection>>,
    /// The fileid space: all ones, except in tests that force collisions.
    mask: u64,
    path: PathBuf,
}

impl HandleTable {
    /// With the default cache size (the gateway passes `state.handle_cache_entries`).
    #[cfg(test)]
    pub(super) fn open(state_dir: &Path) -> anyhow::Result<HandleTable> {
        Self::open_with(state_dir, DEFAULT_CACHE_ENTRIES, u64::MAX)
    }

    /// Opens (creating) `state_dir/handles.db`, importing a legacy `handles.log`.
    pub(super) fn open_with(
        state_dir: &Path,
        cache_entries: usize,
        mask: u64,
    ) -> anyhow::Result<HandleTable> {
        use anyhow::Context;
        let path = state_dir.join("handles.db");
        let mut conn = index::open(&path)?;
        let log = state_dir.join("handles.log");
        if log.exists() {
            Self::import(&mut conn, &log, &state_dir.join("handles.log.imported"))?;
            File::open(state_dir)?.sync_all()?;
        }
        index::prune_tombs(&conn, now_secs())
            .with_context(|| format!("{}: pruning tombstones", path.display()))?;
        Ok(HandleTable {
            cache: RwLock::new(Cache::new(cache_entries)),
            db: Mutex::new(Db { conn, forgets: 0 }),
            readers: Mutex::new(Vec::new()),
            mask,
            path,
        })
    }

    /// Migration: replays an old log into the index in one transaction, makes it
    /// durable, then renames the log away. A crash before the rename imports the same
    /// log again next time, which is harmless (same rows).
    fn import(conn: &mut Connection, log: &Path, done: &Path) -> anyhow::Result<()> {
        use anyhow::Context;
        let st = legacy::replay(log)?;
        let tx = conn.transaction()?;
        for (id, e) in &st.by_id {
            index::put(&tx, *id, e.gen, &e.key)?;
        }
        for (id, g) in &st.tombs {
            index::tomb(&tx, *id, *g)?;
        }
        tx.commit()?;
        index::checkpoint(conn).context("making the imported handle table durable")?;
        std::fs::rename(log, done)
            .with_context(|| format!("renaming {} to {}", log.display(), done.display()))?;
        tracing::info!(live = st.by_id.len(), tombstones = st.tombs.len(), log = %log.display(), "handle table: imported the old log");
        Ok(())
    }

    fn cache(&self) -> std::sync::RwLockReadGuard<'_, Cache> {
        self.cache.read().unwrap_or_else(|e| e.into_inner())
    }

    fn cache_mut(&self) -> std::sync::RwLockWriteGuard<'_, Cache> {
        self.cache.write().unwrap_or_else(|e| e.into_inner())
    }

    fn db(&self) -> std::sync::MutexGuard<'_, Db> {
        self.db.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs a read on an idle reader connection (opening one if none is idle).
    fn with_reader<T>(&self, f: impl FnOnce(&Connection) -> index::Result<T>) -> index::Result<T> {
        let idle = self.readers.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let c = match idle {
            Some(c) => c,
            None => index::open_reader(&self.path)?,
        };
        let r = f(&c);
        let mut pool = self.readers.lock().unwrap_or_else(|e| e.into_inner());
        if pool.len() < READERS_MAX {
            pool.push(c);
        }
        r
    }

    /// An index error: the change is kept in memory only and may not survive a
    /// restart, as with a failed append to the old log.
    fn warn(&self, what: &str, e: &rusqlite::Error) {
        tracing::warn!(path = %self.path.display(), error = %e, "handle table: {what} failed; handles may not survive a restart");
    }

    fn candidate(&self, key: &str, n: u64) -> u64 {
        candidate(key, n) & self.mask
    }

    /// The id rule: the first candidate that no other live key holds, never 0 or 1;
    /// the generation at least now and above the id's tombstone. Index lock held.
    fn assign_new(&self, c: &Connection, key: &str) -> index::Result<(u64, u32)> {
        let mut n = 0u64;
        loop {
            let id = self.candidate(key, n);
            n = n.wrapping_add(1);
            if id <= 1 {
                continue;
            }
            let floor = match index::by_id(c, id)? {
                Some((Some(_), _)) => continue,
                Some((None, g)) => g.saturating_add(1),
                None => 0,
            };
            let gen = floor.max(now_secs());
            index::put(c, id, gen, key)?;
            return Ok((id, gen));
        }
    }

    /// The fileid and generation of `key`, assigning them at first sight.
    pub(super) fn assign(&self, key: &str) -> (u64, u32) {
        let epoch = {
            let c = self.cache();
            if let Some(r) = c.by_key(key) {
                return r;
            }
            c.epoch()
        };
        match self.with_reader(|c| index::by_key(c, key)) {
            Ok(Some(r)) => {
                self.cache_mut().insert_if(epoch, r.0, r.1, key);
                return r;
            }
            Ok(None) => {}
            Err(e) => self.warn("lookup", &e),
        }
        // Unknown (or the reader failed): decide under the index lock.
        let db = self.db();
        let r = index::by_key(&db.conn, key).and_then(|found| match found {
            Some(r) => Ok(r),
            None => self.assign_new(&db.conn, key),
        });
        match r {
            Ok(r) => {
                self.cache_mut().insert(r.0, r.1, key);
                r
            }
            Err(e) => {
                // Nothing verified: hand out an id that resolves to nothing (STALE)
                // rather than one that might be another key's.
                self.warn("assign", &e);
                (UNRESOLVABLE, now_secs())
            }
        }
    }

    /// The file ids of a directory listing's keys. Keys nobody has a handle for are
    /// NOT recorded (their id is the one `assign` will give them: the first candidate
    /// when no other live key holds it), so listing a large directory does not grow
    /// the table; only collisions are.
    pub(super) fn ids_for_listing<'a>(&self, keys: impl Iterator<Item = &'a str>) -> Vec<u64> {
        let keys: Vec<&str> = keys.collect();
        let mut ids: Vec<Option<u64>> = {
            let c = self.cache();
            keys.iter().map(|k| c.by_key(k).map(|r| r.0)).collect()
        };
        if ids.iter().any(Option::is_none) {
            let r = self.with_reader(|c| {
                for (k, id) in keys.iter().zip(ids.iter_mut()) {
                    if id.is_none() {
                        *id = self.peek_id(c, k)?;
                    }
                }
                Ok(())
            });
            if let Err(e) = r {
                self.warn("lookup", &e);
            }
        }
        keys.iter()
            .zip(ids)
            .map(|(k, id)| id.unwrap_or_else(|| self.assign(k).0))
            .collect()
    }

    fn peek_id(&self, c: &Connection, key: &str) -> index::Result<Option<u64>> {
        if let Some((id, _)) = index::by_key(c, key)? {
            return Ok(Some(id));
        }
        let id = self.candidate(key, 0);
        if id <= 1 {
            return Ok(None);
        }
        Ok(match index::by_id(c, id)? {
            Some((Some(_), _)) => None,
            _ => Some(id),
        })
    }

    /// (key, generation) of a live fileid.
    pub(super) fn get(&self, id: u64) -> Option<(String, u32)> {
        let epoch = {
            let c = self.cache();
            if let Some(r) = c.by_id(id) {
                return Some(r);
            }
            c.epoch()
        };
        match self.with_reader(|c| index::by_id(c, id)) {
            Ok(Some((Some(key), gen))) => {
                self.cache_mut().insert_if(epoch, id, gen, &key);
                Some((key, gen))
            }
            Ok(_) => None,
            Err(e) => {
                self.warn("lookup", &e);
                None
            }
        }
    }

    /// (live mappings, tombstones) in the index.
    #[cfg(test)]
    pub(super) fn sizes(&self) -> (usize, usize) {
        index::counts(&self.db().conn).unwrap()
    }

    /// Mappings held in memory.
    #[cfg(test)]
    fn cached(&self) -> usize {
        self.cache().len()
    }

    /// Counts forgets; prunes the tombstones the time floor covers every
    /// `PRUNE_EVERY` of them (keeps the index from growing with every removed file).
    fn note_forgets(&self, db: &mut Db, n: usize) {
        db.forgets = db.forgets.saturating_add(n);
        if db.forgets >= PRUNE_EVERY {
            db.forgets = 0;
            if let Err(e) = index::prune_tombs(&db.conn, now_secs()) {
                self.warn("tombstone prune", &e);
            }
        }
    }

    /// The file id `key` is mapped to now, without assigning one (a namespace change
    /// names the object it is about to replace or remove: `Inner::changing`). `None`
    /// when unmapped, or when the index cannot say (the change's own report of what
    /// it unmapped, `Touched`, then covers it).
    pub(super) fn id_of(&self, key: &str) -> Option<u64> {
        if let Some((id, _)) = self.cache().by_key(key) {
            return Some(id);
        }
        match self.with_reader(|c| index::by_key(c, key)) {
            Ok(r) => r.map(|(id, _)| id),
            Err(e) => {
                self.warn("lookup", &e);
                None
            }
        }
    }

    /// Drops the mapping of `key` (the object is gone): its handles become stale.
    /// Returns the id it unmapped.
    pub(super) fn forget(&self, key: &str) -> Touched {
        let mut db = self.db();
        let r = index::by_key(&db.conn, key).and_then(|f| {
            f.map(|(id, gen)| index::tomb(&db.conn, id, gen).map(|()| id))
                .transpose()
        });
        let touched = match r {
            Ok(Some(id)) => {
                self.note_forgets(&mut db, 1);
                Some(vec![id])
            }
            Ok(None) => Some(Vec::new()),
            Err(e) => {
                self.warn("forget", &e);
                None
            }
        };
        let mut c = self.cache_mut();
        c.remove_key(key);
        c.bump();
        touched
    }

    /// Drops every mapping under the directory prefix `prefix` (itself included).
    /// Returns the ids it unmapped.
    pub(super) fn forget_prefix(&self, prefix: &str) -> Touched {
        let mut db = self.db();
        let r = (|| -> index::Result<Vec<u64>> {
            let tx = db.conn.unchecked_transaction()?;
            let rows = index::range(&tx, prefix)?;
            for (id, _) in &rows {
                // A live row's gen is its tombstone's (tomb keeps the max).
                index::tomb(&tx, *id, 0)?;
            }
            tx.commit()?;
            Ok(rows.into_iter().map(|(id, _)| id).collect())
        })();
        let touched = match r {
            Ok(ids) => {
                self.note_forgets(&mut db, ids.len());
                Some(ids)
            }
            Err(e) => {
                self.warn("forget", &e);
                None
            }
        };
        let mut c = self.cache_mut();
        c.remove_prefixes(&[prefix]);
        c.bump();
        touched
    }

    /// Moves `from` to `to` keeping fileids: one key, or with both ending in '/' a
    /// whole directory (evicted entries included: a range scan of the index).
    /// Whatever was mapped at the target is forgotten. Returns the ids it moved and
    /// the ids it unmapped at the target.
    pub(super) fn rename(&self, from: &str, to: &str) -> Touched {
        if from == to {
            return Some(Vec::new()); // POSIX: renaming a name to itself changes nothing.
        }
        let db = self.db();
        let r = (|| -> index::Result<Vec<u64>> {
            let tx = db.conn.unchecked_transaction()?;
            let mut touched = Vec::new();
            if from.ends_with('/') {
                let moved = index::range(&tx, from)?;
                for (id, k) in index::range(&tx, to)? {
                    if !k.starts_with(from) {
                        index::tomb(&tx, id, 0)?;
                        touched.push(id);
                    }
                }
                // Two passes: clear, then set, so no moved key meets another's old
                // one in the unique index midway.
                for (id, _) in &moved {
                    index::set_key(&tx, *id, None)?;
                }
                for (id, k) in &moved {
                    let new = format!("{to}{}", &k[from.len()..]);
                    index::set_key(&tx, *id, Some(&new))?;
                    touched.push(*id);
                }
            } else {
                if let Some((old, _)) = index::by_key(&tx, to)? {
                    index::tomb(&tx, old, 0)?;
                    touched.push(old);
                }
                if let Some((id, _)) = index::by_key(&tx, from)? {
                    index::set_key(&tx, id, Some(to))?;
                    touched.push(id);
                }
            }
            tx.commit()?;
            Ok(touched)
        })();
        let touched = match r {
            Ok(ids) => Some(ids),
            Err(e) => {
                self.warn("rename", &e);
                None
            }
        };
        let mut c = self.cache_mut();
        if from.ends_with('/') {
            c.remove_prefixes(&[from, to]);
        } else {
            c.remove_key(from);
            c.remove_key(to);
        }
        c.bump();
        touched
    }

    /// Makes every change durable (fsync of the index).
    pub(super) fn sync(&self) -> std::io::Result<()> {
        index::checkpoint(&self.db().conn).map_err(std::io::Error::other)
    }
}

/// Replaces `path` with `bytes` durably (mode 0600): write `tmp`, fsync, rename.
fn write_atomically(path: &Path, tmp: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use anyhow::Context;
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(tmp, path).with_context(|| format!("replacing {}", path.display()))
}
