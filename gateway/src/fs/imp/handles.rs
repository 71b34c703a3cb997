//! File handles and the persistent handle table.
//!
//! Handle (31 bytes): version 1 | export id u16 LE | fileid u64 LE | generation u32 LE
//! | MAC: blake3 keyed hash of the preceding 15 bytes, truncated to 16 bytes. The
//! 32-byte MAC key is made at first start in `state_dir/handle.key` (mode 0600).
//!
//! The table maps fileid → (backend key, generation) and persists as an append-only
//! log, `state_dir/handles.log`: an 8-byte magic "NFSGWHT1", then records
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
//! torn or corrupt record (a crash mid-append); the log is then compacted (rewritten as
//! ASSIGN + live tombstones, fsynced, renamed into place) at every open. Records are
//! appended with write(2) only (they survive a process kill in the page cache);
//! `sync` (flush_all) fsyncs.
//!
//! Only keys someone got a handle for (LOOKUP, CREATE, READDIRPLUS, ...) are recorded:
//! a READDIR listing shows the id a key would get (`ids_for_listing`) without
//! recording it. Tombstones below the time floor are pruned as they pile up. The
//! table still holds every recorded key in memory (see the README's limits).
//!
//! fileid = the first 8 bytes of blake3(key), re-hashed with a counter on collision
//! with another live key and never 0 or 1. A generation is at least the current Unix
//! time in seconds and above any earlier generation of that fileid, so a forgotten and
//! reassigned fileid never matches an old handle, even across restarts.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};

/// Forgotten-id tombstones kept in memory before the useless ones are pruned.
const TOMBS_PRUNE_AT: usize = 4096;

pub(super) const HANDLE_LEN: usize = 31;
const VERSION: u8 = 1;
const MAGIC: &[u8; 8] = b"NFSGWHT1";
const T_ASSIGN: u8 = 1;
const T_RENAME: u8 = 2;
const T_RENAME_PREFIX: u8 = 3;
const T_FORGET: u8 = 4;

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

struct Entry {
    key: String,
    gen: u32,
}

#[derive(Default)]
struct State {
    by_id: HashMap<u64, Entry>,
    by_key: HashMap<String, u64>,
    /// Last generation of forgotten fileids.
    tombs: HashMap<u64, u32>,
}

impl State {
    fn forget_id(&mut self, id: u64) -> Option<u32> {
        let e = self.by_id.remove(&id)?;
        self.by_key.remove(&e.key);
        let t = self.tombs.entry(id).or_insert(0);
        *t = (*t).max(e.gen);
        if self.tombs.len() >= TOMBS_PRUNE_AT {
            self.prune_tombs(now_secs());
        }
        Some(e.gen)
    }

    /// Drops tombstones the time floor covers: a new generation is at least the
    /// current second, so a tombstone below it can no longer raise one. Keeps the
    /// tombstone map from growing with every file ever removed.
    fn prune_tombs(&mut self, now: u32) {
        self.tombs.retain(|_, g| *g >= now);
    }

    /// The file id `key` has or would get, without assigning it: the mapped id, else
    /// the first hash candidate when no other key holds it. `None`: it needs a real
    /// assignment (a collision re-hash).
    fn peek_id(&self, key: &str) -> Option<u64> {
        if let Some(id) = self.by_key.get(key) {
            return Some(*id);
        }
        let id = candidate(key, 0);
        (id > 1 && !self.by_id.contains_key(&id)).then_some(id)
    }

    fn insert(&mut self, id: u64, gen: u32, key: String) {
        if let Some(old) = self.by_key.get(&key).copied() {
            if old != id {
                self.forget_id(old);
            }
        }
        if let Some(prev) = self.by_id.get(&id) {
            let k = prev.key.clone();
            self.by_key.remove(&k);
        }
        self.tombs.remove(&id);
        self.by_key.insert(key.clone(), id);
        self.by_id.insert(id, Entry { key, gen });
    }

    fn rename_id(&mut self, id: u64, to: String) {
        if let Some(e) = self.by_id.get(&id) {
            let gen = e.gen;
            self.insert(id, gen, to);
        }
    }

    fn rename_prefix(&mut self, from: &str, to: &str) {
        let moved: Vec<(u64, String)> = self
            .by_id
            .iter()
            .filter(|(_, e)| e.key.starts_with(from))
            .map(|(id, e)| (*id, format!("{to}{}", &e.key[from.len()..])))
            .collect();
        // Whatever was under the target prefix is gone (replaced).
        let stale: Vec<u64> = self
            .by_id
            .iter()
            .filter(|(_, e)| e.key.starts_with(to))
            .map(|(id, _)| *id)
            .collect();
        for id in stale {
            if !moved.iter().any(|(m, _)| *m == id) {
                self.forget_id(id);
            }
        }
        for (id, _) in &moved {
            if let Some(e) = self.by_id.get(id) {
                let k = e.key.clone();
                self.by_key.remove(&k);
            }
        }
        for (id, k) in moved {
            if let Some(e) = self.by_id.get_mut(&id) {
                e.key = k.clone();
            }
            self.by_key.insert(k, id);
        }
    }

    fn apply(&mut self, tag: u8, id: u64, gen: u32, payload: &str) -> bool {
        match tag {
            T_ASSIGN => self.insert(id, gen, payload.to_string()),
            T_RENAME => self.rename_id(id, payload.to_string()),
            T_RENAME_PREFIX => {
                let Some((a, b)) = payload.split_once('\0') else {
                    return false;
                };
                self.rename_prefix(a, b);
            }
            T_FORGET => {
                self.forget_id(id);
                let t = self.tombs.entry(id).or_insert(0);
                *t = (*t).max(gen);
            }
            _ => return false,
        }
        true
    }
}

fn record(buf: &mut Vec<u8>, tag: u8, id: u64, gen: u32, payload: &str) {
    let start = buf.len();
    buf.push(tag);
    buf.extend_from_slice(&id.to_le_bytes());
    buf.extend_from_slice(&gen.to_le_bytes());
    buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    buf.extend_from_slice(payload.as_bytes());
    let c = blake3::hash(&buf[start..]);
    buf.extend_from_slice(&c.as_bytes()[..4]);
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

/// The table: lookups (every resolve, every known key) share a read lock; changes
/// take the write lock and append their records under it (lock order: state, then
/// log), so the log order is the order the changes were made in.
pub(super) struct HandleTable {
    state: RwLock<State>,
    log: Mutex<File>,
    path: PathBuf,
}

impl HandleTable {
    pub(super) fn open(state_dir: &Path) -> anyhow::Result<HandleTable> {
        use anyhow::Context;
        let path = state_dir.join("handles.log");
        let mut st = State::default();
        let mut data = Vec::new();
        match File::open(&path) {
            Ok(mut f) => {
                f.read_to_end(&mut data)
                    .with_context(|| format!("reading {}", path.display()))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        }
        if !data.is_empty() {
            if data.len() < 8 || &data[..8] != MAGIC {
                anyhow::bail!(
                    "{}: not a handle table (bad magic); move it away to start afresh",
                    path.display()
                );
            }
            let mut pos = 8;
            let mut bad = 0usize;
            while pos < data.len() {
                let rest = &data[pos..];
                if rest.len() < 21 {
                    bad = rest.len();
                    break;
                }
                let len = u32::from_le_bytes(rest[13..17].try_into().expect("4 bytes")) as usize;
                if rest.len() < 17 + len + 4 {
                    bad = rest.len();
                    break;
                }
                let c = blake3::hash(&rest[..17 + len]);
                if c.as_bytes()[..4] != rest[17 + len..21 + len] {
                    bad = rest.len();
                    break;
                }
                let tag = rest[0];
                let id = u64::from_le_bytes(rest[1..9].try_into().expect("8 bytes"));
                let gen = u32::from_le_bytes(rest[9..13].try_into().expect("4 bytes"));
                let Ok(payload) = std::str::from_utf8(&rest[17..17 + len]) else {
                    bad = rest.len();
                    break;
                };
                st.apply(tag, id, gen, payload);
                pos += 21 + len;
            }
            if bad > 0 {
                tracing::warn!(path = %path.display(), bytes = bad, "handle table: ignoring a torn or corrupt tail");
            }
        }
        // Compact: live entries, plus tombstones that the time floor does not cover.
        let floor = now_secs();
        st.tombs.retain(|_, g| *g >= floor);
        let mut out = MAGIC.to_vec();
        for (id, e) in &st.by_id {
            record(&mut out, T_ASSIGN, *id, e.gen, &e.key);
        }
        for (id, g) in &st.tombs {
            record(&mut out, T_FORGET, *id, *g, "");
        }
        write_atomically(&path, &state_dir.join("handles.log.tmp"), &out)?;
        File::open(state_dir)?.sync_all()?;
        let log = OpenOptions::new()
            .append(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        Ok(HandleTable {
            state: RwLock::new(st),
            log: Mutex::new(log),
            path,
        })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends records; call with the state write lock held.
    fn append(&self, buf: &[u8]) {
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = log.write_all(buf) {
            tracing::warn!(path = %self.path.display(), error = %e, "handle table: append failed; handles may not survive a restart");
        }
    }

    fn assign_locked(st: &mut State, key: &str, buf: &mut Vec<u8>) -> (u64, u32) {
        if let Some(id) = st.by_key.get(key) {
            return (*id, st.by_id[id].gen);
        }
        let mut n = 0u64;
        let id = loop {
            let id = candidate(key, n);
            if id > 1 && !st.by_id.contains_key(&id) {
                break id;
            }
            n += 1;
        };
        let gen = st
            .tombs
            .get(&id)
            .map_or(0, |g| g.saturating_add(1))
            .max(now_secs());
        st.insert(id, gen, key.to_string());
        record(buf, T_ASSIGN, id, gen, key);
        (id, gen)
    }

    /// The fileid and generation of `key`, assigning them at first sight.
    pub(super) fn assign(&self, key: &str) -> (u64, u32) {
        {
            let st = self.read();
            let known = st
                .by_key
                .get(key)
                .and_then(|id| Some((*id, st.by_id.get(id)?.gen)));
            if let Some(r) = known {
                return r;
            }
        }
        let mut st = self.write();
        let mut buf = Vec::new();
        let r = Self::assign_locked(&mut st, key, &mut buf);
        if !buf.is_empty() {
            self.append(&buf);
        }
        r
    }

    /// The file ids of a directory listing's keys. Keys nobody has a handle for are
    /// NOT recorded (their id is the one `assign` will give them, see `peek_id`), so
    /// listing a large directory does not grow the table; only collisions are.
    pub(super) fn ids_for_listing<'a>(&self, keys: impl Iterator<Item = &'a str>) -> Vec<u64> {
        let keys: Vec<&str> = keys.collect();
        let peeked: Vec<Option<u64>> = {
            let st = self.read();
            keys.iter().map(|k| st.peek_id(k)).collect()
        };
        keys.iter()
            .zip(peeked)
            .map(|(k, id)| id.unwrap_or_else(|| self.assign(k).0))
            .collect()
    }

    /// (key, generation) of a live fileid.
    pub(super) fn get(&self, id: u64) -> Option<(String, u32)> {
        self.read().by_id.get(&id).map(|e| (e.key.clone(), e.gen))
    }

    /// Live mappings and tombstones held in memory.
    #[cfg(test)]
    pub(super) fn sizes(&self) -> (usize, usize) {
        let st = self.read();
        (st.by_id.len(), st.tombs.len())
    }

    /// Drops the mapping of `key` (the object is gone): its handles become stale.
    pub(super) fn forget(&self, key: &str) {
        let mut st = self.write();
        let Some(id) = st.by_key.get(key).copied() else {
            return;
        };
        if let Some(gen) = st.forget_id(id) {
            let mut buf = Vec::new();
            record(&mut buf, T_FORGET, id, gen, "");
            self.append(&buf);
        }
    }

    /// Drops every mapping under the directory prefix `prefix` (itself included).
    pub(super) fn forget_prefix(&self, prefix: &str) {
        let mut st = self.write();
        let ids: Vec<u64> = st
            .by_id
            .iter()
            .filter(|(_, e)| e.key.starts_with(prefix))
            .map(|(id, _)| *id)
            .collect();
        let mut buf = Vec::new();
        for id in ids {
            if let Some(gen) = st.forget_id(id) {
                record(&mut buf, T_FORGET, id, gen, "");
            }
        }
        if !buf.is_empty() {
            self.append(&buf);
        }
    }

    /// Moves `from` to `to` keeping fileids: one key, or with both ending in '/' a
    /// whole directory. Whatever was mapped at the target is forgotten.
    pub(super) fn rename(&self, from: &str, to: &str) {
        let mut st = self.write();
        let mut buf = Vec::new();
        if from.ends_with('/') {
            st.rename_prefix(from, to);
            record(&mut buf, T_RENAME_PREFIX, 0, 0, &format!("{from}\0{to}"));
        } else {
            if let Some(old) = st.by_key.get(to).copied() {
                if let Some(gen) = st.forget_id(old) {
                    record(&mut buf, T_FORGET, old, gen, "");
                }
            }
            if let Some(id) = st.by_key.get(from).copied() {
                st.rename_id(id, to.to_string());
                record(&mut buf, T_RENAME, id, 0, to);
            }
        }
        if !buf.is_empty() {
            self.append(&buf);
        }
    }

    /// Makes every appended record durable.
    pub(super) fn sync(&self) -> std::io::Result<()> {
        let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        log.sync_data()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tombstones_below_the_time_floor_are_pruned() {
        let mut st = State::default();
        st.insert(10, 100, "a".into());
        st.insert(11, 5_000, "b".into());
        st.forget_id(10);
        st.forget_id(11);
        assert_eq!(st.tombs.len(), 2);
        st.prune_tombs(1_000);
        assert_eq!(st.tombs.get(&11), Some(&5_000));
        assert!(!st.tombs.contains_key(&10));
    }

    #[test]
    fn listing_ids_match_later_assignments_and_are_not_recorded() {
        let d = tempfile::tempdir().unwrap();
        let t = HandleTable::open(d.path()).unwrap();
        let (dir, _) = t.assign("d/");
        let keys: Vec<String> = (0..1000).map(|i| format!("d/f{i}")).collect();
        let ids = t.ids_for_listing(keys.iter().map(String::as_str));
        assert_eq!(t.sizes().0, 1, "a listing records nothing");
        for (k, id) in keys.iter().zip(&ids) {
            assert_eq!(t.assign(k).0, *id, "{k}");
        }
        assert_ne!(dir, ids[0]);
        // A renamed key keeps its id, and the listing shows that one.
        t.rename("d/f0", "d/g0");
        assert_eq!(t.ids_for_listing(["d/g0"].into_iter()), vec![ids[0]]);
        // A key whose first candidate another key holds gets assigned for real.
        let taken = candidate("d/x", 0);
        t.write().insert(taken, 1, "elsewhere".into());
        let got = t.ids_for_listing(["d/x"].into_iter());
        assert_ne!(got[0], taken);
        assert_eq!(t.assign("d/x").0, got[0]);
    }
}
