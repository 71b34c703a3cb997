//! File handles and the persistent handle table.
//!
//! Handle (31 bytes): version 1 | export id u16 LE | fileid u64 LE | generation u32 LE
//! | MAC: blake3 keyed hash of the preceding 15 bytes, truncated to 16 bytes. The
//! 32-byte MAC key is made at first start in `state_dir/handle.key` (mode 0600).
//!
//! The table maps fileid → (backend key, generation). Three layers, each a subset of
//! the one below for what it holds:
//!
//! - `cache`: a bounded in-memory cache (CLOCK eviction, `DEFAULT_CACHE_ENTRIES`
//!   entries) of live mappings;
//! - `pending`: the changes since the last fold, in memory, and in the change
//!   journal `state_dir/handles.journal` (`journal`) — every assignment, forget and
//!   rename is appended there with ONE write(2) before the call returns, so it
//!   survives a process kill (the page cache keeps it) and is fsynced at `sync`
//!   (flush_all / COMMIT);
//! - `index`: `state_dir/handles.db`, SQLite in WAL mode, which holds every mapping
//!   folded so far, answers id → (key, gen) and key → id for evicted entries, and
//!   whose ordered key index makes a directory rename or removal a range scan.
//!   SQLite (the `bundled` build, so no system library is needed) because the table
//!   outgrows memory and needs those range scans.
//!
//! Why the journal: a transaction per created or removed name (the index alone,
//! committed before each reply) cost about 23,000 instructions each, most of the
//! CREATE+REMOVE path. Now a new name costs two index lookups and one append; every
//! `FOLD_RECORDS` records (and at each rename or prefix forget, which range over
//! evicted entries only the index has) the pending records go into the index in one
//! transaction, which also stores how far the journal is folded (`index::folded`).
//! A new object's name costs two index reads (`renew`: what the name held, then the
//! picked id's tombstone), and a name created and removed before its fold writes only
//! its tombstone row, or none when the time floor already covers its generation
//! (`index::apply_batch`): the fold's end state is the same.
//!
//! Crash argument. A handle a client holds must never resolve to another object,
//! and a mapping handed out must survive a kill, as a rename must (else a kill
//! could resolve a renamed id to the new object at its old name). (1) Every change is
//! journaled before any reply names its id, and the journal is append-only, checked
//! per record, replayed to the first torn record: after a kill the journal holds
//! every change made, in order. (2) The index holds a prefix of the same history and
//! says which (the `folded` row commits atomically with the changes it covers); at
//! open the records past it are applied in order, which gives exactly the state
//! before the kill. (3) A journal is replaced by an empty one of the next generation
//! only after a FULL checkpoint made the index durable, and records of a newer
//! generation than the index's `folded` one are all replayed, so no change is ever
//! only in a discarded journal. After a power loss (the journal fsynced at `sync`,
//! the index at each journal restart), the state is the index's durable prefix plus
//! the journal's durable prefix, a prefix of the history — the guarantee the index
//! alone gave. If an append fails, an assignment hands out an unresolvable id and a
//! forget or rename goes straight into the index (a committed WAL frame survives a
//! kill too).
//!
//! Locks: a lookup of a cached key or id takes only the cache's read lock (and sets an
//! atomic "used" bit). A miss by id reads the pending changes, then the index on one
//! of a few reader connections (WAL readers do not wait for the writer), and fills the
//! cache only if no change came in between (the cache's epoch). A fold commits before
//! it drops the pending records, so a reader never misses a change in both. Changes
//! and new assignments take the index mutex, then `pending`'s, then the cache's write
//! lock; every change goes to the journal and `pending` first, then to the cache (and
//! bumps the epoch), so the cache is always a subset of index plus pending.
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

mod adopt;
mod cache;
mod index;
mod journal;
mod legacy;
mod pending;
#[cfg(test)]
mod tests;

use cache::Cache;
use journal::{Journal, Rec};
use pending::Pending;
use rusqlite::Connection;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};

/// Live mappings kept in memory (each about 125 bytes plus its key, with its kept MAC).
#[cfg(test)]
const DEFAULT_CACHE_ENTRIES: usize = crate::config::DEFAULT_HANDLE_CACHE_ENTRIES;
/// The id `assign` gives when the index fails: never assigned (ids are above 1), so a
/// handle with it is STALE, never another file.
const UNRESOLVABLE: u64 = 1;
/// Idle reader connections kept open.
const READERS_MAX: usize = 8;
/// Forgets between two prunes of the tombstones the time floor covers.
const PRUNE_EVERY: usize = 4096;
/// Journaled changes kept pending before they are folded into the index in one
/// transaction (bounds the memory of `Db::recs` and `Pending`).
const FOLD_RECORDS: usize = 1024;
/// Journal size past which a fold makes the index durable and starts a new journal.
const JOURNAL_RESET: u64 = 16 << 20;

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
    with_mac(export, fileid, gen, mac_v1(key, export, fileid, gen))
}

/// The version-1 handle body (the MAC's input) of (export, fileid, gen), with `m`
/// as its MAC.
fn with_mac(export: u16, fileid: u64, gen: u32, m: [u8; 16]) -> [u8; HANDLE_LEN] {
    let mut b = [0u8; HANDLE_LEN];
    b[0] = VERSION;
    b[1..3].copy_from_slice(&export.to_le_bytes());
    b[3..11].copy_from_slice(&fileid.to_le_bytes());
    b[11..15].copy_from_slice(&gen.to_le_bytes());
    b[15..].copy_from_slice(&m);
    b
}

/// The MAC a version-1 handle of (export, fileid, gen) carries.
fn mac_v1(key: &[u8; 32], export: u16, fileid: u64, gen: u32) -> [u8; 16] {
    let b = with_mac(export, fileid, gen, [0; 16]);
    mac(key, &b[..15])
}

/// Shared-store handles (version 2, for stores several gateways serve: s3, and `fs`
/// with `backend.shared`):
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
#[inline]
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

/// Whether `fh` claims to be a version-1 handle (one gateway's: its own key and table).
pub(super) fn is_local(fh: &[u8]) -> bool {
    fh.first() == Some(&VERSION)
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

/// The index connection, the journal in front of it and the records not yet folded.
struct Db {
    conn: Connection,
    /// Forgets since the last tombstone prune.
    forgets: usize,
    journal: Journal,
    /// Journaled since the last fold, in order (what `fold` applies).
    recs: Vec<Rec>,
    jpath: PathBuf,
    /// Index rows written by folds (what the tests count).
    writes: u64,
}

/// The table; see the module doc for the journal/index/cache split and the lock
/// order (index, then pending, then cache).
pub(super) struct HandleTable {
    cache: RwLock<Cache>,
    db: Mutex<Db>,
    /// The changes in `Db::recs`, for lookups: readers check it before the index.
    pending: Mutex<Pending>,
    /// Idle reader connections: misses read the index beside the writer, so a lookup
    /// of an evicted entry does not wait for changes or for other misses.
    readers: Mutex<Vec<Connection>>,
    /// The fileid space: all ones, except in tests that force collisions.
    mask: u64,
    path: PathBuf,
    /// Index reads (by key or by id) so far: what the tests count.
    reads: AtomicU64,
}

impl HandleTable {
    /// With the default cache size (the gateway passes `state.handle_cache_entries`).
    #[cfg(test)]
    pub(super) fn open(state_dir: &Path) -> anyhow::Result<HandleTable> {
        Self::open_with(state_dir, DEFAULT_CACHE_ENTRIES, u64::MAX)
    }

    /// Opens (creating) `state_dir/handles.db`, importing a legacy `handles.log` and
    /// replaying the journal.
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
        let jpath = state_dir.join("handles.journal");
        let journal = Self::recover(&mut conn, &jpath)
            .with_context(|| format!("{}: replaying the journal", jpath.display()))?;
        index::prune_tombs(&conn, now_secs())
            .with_context(|| format!("{}: pruning tombstones", path.display()))?;
        Ok(HandleTable {
            cache: RwLock::new(Cache::new(cache_entries)),
            db: Mutex::new(Db {
                conn,
                forgets: 0,
                journal,
                recs: Vec::new(),
                jpath,
                writes: 0,
            }),
            pending: Mutex::new(Pending::default()),
            readers: Mutex::new(Vec::new()),
            mask,
            path,
            reads: AtomicU64::new(0),
        })
    }

    /// Folds the journal's records the index does not hold yet (those past
    /// `index::folded`; all of them when the journal is a newer generation), makes
    /// the index durable, and starts an empty journal of the next generation.
    fn recover(conn: &mut Connection, jpath: &Path) -> anyhow::Result<Journal> {
        let folded = index::folded(conn)?;
        let mut gen = folded.map_or(0, |f| f.0);
        if let Some(read) = journal::read(jpath)? {
            let from = match folded {
                Some((g, pos)) if g == read.gen => pos,
                Some((g, _)) if g > read.gen => u64::MAX, // an old journal: all folded
                _ => 0,
            };
            gen = gen.max(read.gen);
            let tx = conn.transaction()?;
            let recs = read.recs.iter().filter(|(_, end)| *end > from);
            let n = recs.clone().count();
            index::apply_batch(&tx, recs.map(|(r, _)| r), now_secs())?;
            tx.commit()?;
            if n > 0 {
                tracing::info!(records = n, "handle table: replayed the journal");
            }
        }
        index::checkpoint(conn)?;
        Journal::create(jpath, gen.wrapping_add(1))
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

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
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

    /// A journal or index error: the change is kept in memory only and may not
    /// survive a restart, as with a failed append to the old log.
    fn warn(&self, what: &str, e: &dyn std::fmt::Display) {
        tracing::warn!(path = %self.path.display(), error = %e, "handle table: {what} failed; handles may not survive a restart");
    }

    fn candidate(&self, key: &str, n: u64) -> u64 {
        candidate(key, n) & self.mask
    }

    /// (id, gen) of a live key: the pending changes, then the index (whose row is
    /// superseded when its id has a pending change). `c` is any connection: a fold
    /// commits before it clears the pending changes, so a reader never misses both.
    fn find_key(&self, c: &Connection, key: &str) -> index::Result<Option<(u64, u32)>> {
        if let Some(r) = self.pending().by_key(key) {
            return Ok(Some(r));
        }
        self.reads.fetch_add(1, Ordering::Relaxed);
        let Some((id, gen)) = index::by_key(c, key)? else {
            return Ok(None);
        };
        Ok((!self.pending().knows(id)).then_some((id, gen)))
    }

    /// (key, gen) of an id, `Some((None, gen))` for a tombstone: pending, then index.
    fn find_id(&self, c: &Connection, id: u64) -> index::Result<Option<(Option<String>, u32)>> {
        if let Some(r) = self.pending().by_id(id) {
            return Ok(Some(r));
        }
        self.reads.fetch_add(1, Ordering::Relaxed);
        index::by_id(c, id)
    }

    /// The id rule: the first candidate that no other live key holds, never 0 or 1;
    /// the generation at least now and above the id's tombstone. Index lock held.
    fn pick(&self, c: &Connection, key: &str) -> index::Result<(u64, u32)> {
        let mut n = 0u64;
        loop {
            let id = self.candidate(key, n);
            n = n.wrapping_add(1);
            if id <= 1 {
                continue;
            }
            let floor = match self.find_id(c, id)? {
                Some((Some(_), _)) => continue,
                Some((None, g)) => g.saturating_add(1),
                None => 0,
            };
            return Ok((id, floor.max(now_secs())));
        }
    }

    /// Applies every journaled record to the index in one transaction that also
    /// records how far the journal is folded, then drops them from memory. Starts a
    /// new journal when this one has grown past `JOURNAL_RESET`. Returns what the
    /// last record (a rename or prefix forget) touched.
    fn fold(&self, db: &mut Db) -> index::Result<Vec<u64>> {
        let tx = db.conn.unchecked_transaction()?;
        let (touched, writes) = index::apply_batch(&tx, db.recs.iter(), now_secs())?;
        index::set_folded(&tx, db.journal.gen, db.journal.len)?;
        tx.commit()?;
        db.writes += writes as u64;
        db.recs.clear();
        self.pending().clear();
        if db.journal.len > JOURNAL_RESET {
            if let Err(e) = Self::reset(db) {
                self.warn("journal restart", &e);
            }
        }
        Ok(touched)
    }

    /// Makes the index durable, then replaces the journal (all folded) with an empty
    /// one of the next generation. A crash between leaves the old journal, whose
    /// records the index already holds (`recover` skips them).
    fn reset(db: &mut Db) -> anyhow::Result<()> {
        index::checkpoint(&db.conn)?;
        db.journal = Journal::create(&db.jpath, db.journal.gen.wrapping_add(1))?;
        Ok(())
    }

    /// Folds when enough records are pending (or `now` asks for it).
    fn maybe_fold(&self, db: &mut Db, now: bool) {
        if now || db.recs.len() >= FOLD_RECORDS {
            if let Err(e) = self.fold(db) {
                self.warn("index update", &e);
            }
        }
    }

    /// The fileid and generation of `key`, assigning them at first sight.
    pub(super) fn assign(&self, key: &str) -> (u64, u32) {
        if let Some(r) = self.cache().by_key(key) {
            return r;
        }
        // Decided under the index lock, which is held only for lookups and one
        // journal append (no index commit), so misses do not go through a reader.
        let mut db = self.db();
        match self.assign_locked(&mut db, key) {
            Ok(r) => {
                self.cache_mut().insert(r.0, r.1, key);
                self.maybe_fold(&mut db, false);
                r
            }
            Err(e) => {
                // Nothing verified or nothing durable: hand out an id that resolves
                // to nothing (STALE) rather than one that might be another key's.
                self.warn("assign", &e);
                (UNRESOLVABLE, now_secs())
            }
        }
    }

    fn assign_locked(&self, db: &mut Db, key: &str) -> anyhow::Result<(u64, u32)> {
        if let Some(r) = self.find_key(&db.conn, key)? {
            return Ok(r);
        }
        self.assign_new(db, key)
    }

    /// Maps `key`, which no live id holds, to a new id. Index lock held.
    fn assign_new(&self, db: &mut Db, key: &str) -> anyhow::Result<(u64, u32)> {
        let (id, gen) = self.pick(&db.conn, key)?;
        let rec = Rec {
            tag: journal::T_ASSIGN,
            id,
            gen,
            payload: key.to_string(),
        };
        // Journaled before anyone sees the id: a kill after the reply keeps it.
        db.journal.append(&rec)?;
        self.pending().assign(id, gen, key);
        db.recs.push(rec);
        Ok((id, gen))
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
        if let Some((id, _)) = self.find_key(c, key)? {
            return Ok(Some(id));
        }
        let id = self.candidate(key, 0);
        if id <= 1 {
            return Ok(None);
        }
        Ok(match self.find_id(c, id)? {
            Some((Some(_), _)) => None,
            _ => Some(id),
        })
    }

    /// The version-1 handle of `id` through `export` (MAC key `mac_key`), when the
    /// cache holds `id` under `key`: what `encode` of its generation gives, with the
    /// MAC computed once per mapping (`Cache::mac_of`) and no copy of the key. `None`
    /// when not cached (the caller goes the `get`/`assign` way).
    pub(super) fn local_handle(
        &self,
        mac_key: &[u8; 32],
        export: u16,
        id: u64,
        key: &str,
    ) -> Option<[u8; HANDLE_LEN]> {
        let c = self.cache();
        let mac = |gen| mac_v1(mac_key, export, id, gen);
        let (gen, m) = c.mac_of(id, key, export, mac)?;
        Some(with_mac(export, id, gen, m))
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
        match self.with_reader(|c| self.find_id(c, id)) {
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

    /// (live mappings, tombstones) in the index, all pending changes folded.
    #[cfg(test)]
    pub(super) fn sizes(&self) -> (usize, usize) {
        let mut db = self.db();
        self.fold(&mut db).unwrap();
        index::counts(&db.conn).unwrap()
    }

    /// Index rows written by folds so far, all pending changes folded.
    #[cfg(test)]
    pub(super) fn index_writes(&self) -> u64 {
        let mut db = self.db();
        self.fold(&mut db).unwrap();
        db.writes
    }

    /// Index reads (by key or id) so far.
    #[cfg(test)]
    pub(super) fn index_reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Mappings held in memory.
    #[cfg(test)]
    fn cached(&self) -> usize {
        self.cache().len()
    }

    /// Counts forgets; prunes the tombstones the time floor covers every
    /// `PRUNE_EVERY` of them (keeps the index from growing with every removed file).
    /// A prune changes no mapping (a pruned tombstone can no longer raise a
    /// generation), so it needs no journal record.
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
        match self.with_reader(|c| self.find_key(c, key)) {
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
        let touched = self.forget_locked(&mut db, key);
        let mut c = self.cache_mut();
        c.remove_key(key);
        c.bump();
        touched
    }

    /// A new object appeared at `key` (CREATE, MKDIR, ...): `forget` then `assign`
    /// under one index lock, with ONE lookup of what `key` held (the assignment needs
    /// none: the key is unmapped by then), so the new object gets a fresh id and
    /// generation. Returns what the forget unmapped and the new (id, generation).
    pub(super) fn renew(&self, key: &str) -> (Touched, (u64, u32)) {
        let mut db = self.db();
        let touched = self.forget_locked(&mut db, key);
        {
            let mut c = self.cache_mut();
            c.remove_key(key);
            c.bump();
        }
        let r = match &touched {
            Some(_) => self.assign_new(&mut db, key),
            // The lookup failed: the assignment looks again (and fails safe).
            None => self.assign_locked(&mut db, key),
        };
        let r = match r {
            Ok(r) => {
                self.cache_mut().insert(r.0, r.1, key);
                self.maybe_fold(&mut db, false);
                r
            }
            Err(e) => {
                self.warn("assign", &e);
                (UNRESOLVABLE, now_secs())
            }
        };
        (touched, r)
    }

    /// `forget` without the cache update. Index lock held.
    fn forget_locked(&self, db: &mut Db, key: &str) -> Touched {
        let found = match self.cache().by_key(key) {
            Some(r) => Ok(Some(r)),
            None => self.find_key(&db.conn, key),
        };
        match found {
            Ok(Some((id, gen))) => {
                let rec = Rec {
                    tag: journal::T_FORGET,
                    id,
                    gen,
                    payload: String::new(),
                };
                let journaled = db.journal.append(&rec);
                self.pending().forget(id, gen);
                db.recs.push(rec);
                if let Err(e) = &journaled {
                    self.warn("journal append", e);
                }
                // Not journaled: straight into the index, which a kill keeps too.
                self.maybe_fold(db, journaled.is_err());
                self.note_forgets(db, 1);
                Some(vec![id])
            }
            Ok(None) => Some(Vec::new()),
            Err(e) => {
                self.warn("forget", &e);
                None
            }
        }
    }

    /// Journals a rename or prefix forget and folds it into the index at once with
    /// everything pending (these range over evicted entries, which only the index
    /// has). Returns what it touched.
    fn change_now(&self, db: &mut Db, tag: u8, payload: String) -> Touched {
        let rec = Rec {
            tag,
            id: 0,
            gen: 0,
            payload,
        };
        if let Err(e) = db.journal.append(&rec) {
            self.warn("journal append", &e);
        }
        db.recs.push(rec);
        match self.fold(db) {
            Ok(ids) => Some(ids),
            Err(e) => {
                self.warn("index update", &e);
                None
            }
        }
    }

    /// Drops every mapping under the directory prefix `prefix` (itself included).
    /// Returns the ids it unmapped.
    ///
    /// When nothing under `prefix` but `prefix` itself is mapped — an RMDIR of a
    /// directory whose children were removed through the gateway, the usual case —
    /// this is exactly a `forget` of `prefix`: one journal append, no fold. Folding
    /// here (an index transaction under the index lock, carrying every record
    /// journaled since the last fold, up to `FOLD_RECORDS`) made the first RMDIR after
    /// a burst of removes wait for all of them, and every other change wait behind it
    /// (docs/performance.md, "Mkdir and rmdir").
    pub(super) fn forget_prefix(&self, prefix: &str) -> Touched {
        let mut db = self.db();
        // Under the index lock: no assignment or change can come between the look
        // and the forget.
        if let Ok(true) = self.only_itself_under(&db, prefix) {
            let touched = self.forget_locked(&mut db, prefix);
            let mut c = self.cache_mut();
            c.remove_key(prefix);
            c.bump();
            return touched;
        }
        let touched = self.change_now(&mut db, journal::T_FORGET_PREFIX, prefix.to_string());
        if let Some(ids) = &touched {
            self.note_forgets(&mut db, ids.len());
        }
        let mut c = self.cache_mut();
        c.remove_prefixes(&[prefix]);
        c.bump();
        touched
    }

    /// True when no live key under `prefix` other than `prefix` itself is mapped, in
    /// the index and the pending changes together (an index row is superseded when its
    /// id has a pending change, as in `find_key`). The cache needs no look: it is a
    /// subset of the two. Index lock held (`db`).
    fn only_itself_under(&self, db: &Db, prefix: &str) -> index::Result<bool> {
        // At most one row per pending record is superseded, and one is `prefix`: past
        // that many rows, some other live key is surely there (a directory of a
        // million mappings is not read whole to learn it).
        let limit = i64::try_from(db.recs.len())
            .unwrap_or(i64::MAX)
            .saturating_add(2);
        let rows = index::range_first(&db.conn, prefix, limit)?;
        if i64::try_from(rows.len()).unwrap_or(i64::MAX) >= limit {
            return Ok(false);
        }
        let p = self.pending();
        Ok(rows.iter().all(|(id, key)| key == prefix || p.knows(*id)) && !p.maps_under(prefix))
    }

    /// Moves `from` to `to` keeping fileids: one key, or with both ending in '/' a
    /// whole directory (evicted entries included: a range scan of the index).
    /// Whatever was mapped at the target is forgotten. Returns the ids it moved and
    /// the ids it unmapped at the target.
    pub(super) fn rename(&self, from: &str, to: &str) -> Touched {
        if from == to {
            return Some(Vec::new()); // POSIX: renaming a name to itself changes nothing.
        }
        let mut db = self.db();
        let touched = self.change_now(&mut db, journal::T_RENAME, format!("{from}\0{to}"));
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

    /// Makes every change durable: an fdatasync of the journal (the index is rebuilt
    /// from it after a crash, so it is fsynced only when a journal is replaced).
    pub(super) fn sync(&self) -> std::io::Result<()> {
        self.db().journal.sync()
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
