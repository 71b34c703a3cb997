//! The handle table's format before the durable index: the append-only log
//! `state_dir/handles.log` (format in the parent module's doc). Only read now, once, to
//! import an old table into the index (see `HandleTable::open`). Its record layout
//! lives on in the change journal (`journal`), which uses `record` and `parse`.

use std::collections::HashMap;
use std::path::Path;

pub(super) const MAGIC: &[u8; 8] = b"NFSGWHT1";
pub(super) const T_ASSIGN: u8 = 1;
pub(super) const T_RENAME: u8 = 2;
pub(super) const T_RENAME_PREFIX: u8 = 3;
pub(super) const T_FORGET: u8 = 4;

pub(super) struct Entry {
    pub key: String,
    pub gen: u32,
}

/// The replayed table: live mappings and tombstones (last generation of forgotten ids).
#[derive(Default)]
pub(super) struct State {
    pub by_id: HashMap<u64, Entry>,
    pub by_key: HashMap<String, u64>,
    pub tombs: HashMap<u64, u32>,
}

impl State {
    fn forget_id(&mut self, id: u64) {
        if let Some(e) = self.by_id.remove(&id) {
            self.by_key.remove(&e.key);
            let t = self.tombs.entry(id).or_insert(0);
            *t = (*t).max(e.gen);
        }
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

    /// RENAME_PREFIX as older versions applied it: keys under the target prefix that
    /// are not moved are forgotten, then every key under `from` moves under `to`.
    fn rename_prefix(&mut self, from: &str, to: &str) {
        let moved: Vec<(u64, String)> = self
            .by_id
            .iter()
            .filter(|(_, e)| e.key.starts_with(from))
            .map(|(id, e)| (*id, format!("{to}{}", &e.key[from.len()..])))
            .collect();
        let stale: Vec<u64> = self
            .by_id
            .iter()
            .filter(|(_, e)| e.key.starts_with(to) && !e.key.starts_with(from))
            .map(|(id, _)| *id)
            .collect();
        for id in stale {
            self.forget_id(id);
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
            T_RENAME => {
                if let Some(g) = self.by_id.get(&id).map(|e| e.gen) {
                    self.insert(id, g, payload.to_string());
                }
            }
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

/// Appends one record (the log format, also the journal's) to `buf`.
pub(super) fn record(buf: &mut Vec<u8>, tag: u8, id: u64, gen: u32, payload: &str) {
    let start = buf.len();
    buf.push(tag);
    buf.extend_from_slice(&id.to_le_bytes());
    buf.extend_from_slice(&gen.to_le_bytes());
    buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    buf.extend_from_slice(payload.as_bytes());
    let c = blake3::hash(&buf[start..]);
    buf.extend_from_slice(&c.as_bytes()[..4]);
}

/// Replays a log file. Replay stops at the first torn or corrupt record (a crash
/// mid-append), as older versions did; a bad magic is an error (not our file).
pub(super) fn replay(path: &Path) -> anyhow::Result<State> {
    use anyhow::Context;
    let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let mut st = State::default();
    if data.is_empty() {
        return Ok(st);
    }
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
        let Some(rec) = parse(rest) else {
            bad = rest.len();
            break;
        };
        let (tag, id, gen, payload, used) = rec;
        st.apply(tag, id, gen, payload);
        pos += used;
    }
    if bad > 0 {
        tracing::warn!(path = %path.display(), bytes = bad, "handle table: ignoring a torn or corrupt tail");
    }
    Ok(st)
}

/// One record at the start of `rest`: (tag, id, gen, payload, bytes used), or `None`
/// when it is torn or its check does not match.
pub(super) fn parse(rest: &[u8]) -> Option<(u8, u64, u32, &str, usize)> {
    let len = u32::from_le_bytes(rest.get(13..17)?.try_into().ok()?) as usize;
    let end = len.checked_add(17)?;
    let body = rest.get(..end)?;
    let check = rest.get(end..end.checked_add(4)?)?;
    if blake3::hash(body).as_bytes()[..4] != *check {
        return None;
    }
    let id = u64::from_le_bytes(body.get(1..9)?.try_into().ok()?);
    let gen = u32::from_le_bytes(body.get(9..13)?.try_into().ok()?);
    let payload = std::str::from_utf8(&body[17..]).ok()?;
    Some((body[0], id, gen, payload, end + 4))
}
