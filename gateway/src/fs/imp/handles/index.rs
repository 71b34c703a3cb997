//! The durable index behind the handle table: one SQLite table
//!
//! ```text
//! handles(id INTEGER PRIMARY KEY, gen INTEGER NOT NULL, key BLOB UNIQUE)
//! ```
//!
//! `id` is the fileid (u64 stored bit-for-bit as i64), `key` the backend key, NULL for
//! a tombstone (a forgotten id whose `gen` must still rise on reuse). The unique key
//! index answers key → id and, being ordered (BLOB compares as memcmp), a directory
//! prefix is a range scan `key >= 'dir/' AND key < 'dir0'`.
//!
//! and one row `folded(gen, pos)`: how much of the change journal (`journal`) the
//! table holds, written in the same transaction as the changes it covers.
//!
//! Durability: WAL journal with `synchronous = NORMAL` — a commit is written to the
//! WAL with write(2) and fsynced only at a checkpoint; `checkpoint` runs a FULL one,
//! which fsyncs WAL and database. The change journal in front of it is what makes each
//! change survive a kill before the call returns; the index is written in batches.

use super::journal::{self, Rec};
use rusqlite::{params, Connection, OptionalExtension};
use std::path::Path;

pub(super) type Result<T> = rusqlite::Result<T>;

pub(super) fn open(path: &Path) -> anyhow::Result<Connection> {
    use anyhow::Context;
    use std::os::unix::fs::OpenOptionsExt;
    // Create it 0600 ourselves (SQLite gives its WAL files the database's mode).
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    let conn = Connection::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
        .with_context(|| format!("{}: not a handle index?", path.display()))?;
    anyhow::ensure!(
        mode.eq_ignore_ascii_case("wal"),
        "{}: cannot use a WAL journal (got {mode})",
        path.display()
    );
    conn.execute_batch(
        "PRAGMA synchronous=NORMAL;
         CREATE TABLE IF NOT EXISTS handles (
             id INTEGER PRIMARY KEY, gen INTEGER NOT NULL, key BLOB UNIQUE);
         CREATE TABLE IF NOT EXISTS folded (
             one INTEGER PRIMARY KEY CHECK (one = 0), gen INTEGER NOT NULL, pos INTEGER NOT NULL);",
    )
    .with_context(|| format!("{}: cannot set up the handle index", path.display()))?;
    Ok(conn)
}

/// A read-only connection for cache misses (WAL readers run beside the writer).
pub(super) fn open_reader(path: &Path) -> Result<Connection> {
    let c = Connection::open(path)?;
    c.execute_batch("PRAGMA query_only=1")?;
    Ok(c)
}

fn to_sql(id: u64) -> i64 {
    i64::from_le_bytes(id.to_le_bytes())
}

fn from_sql(id: i64) -> u64 {
    u64::from_le_bytes(id.to_le_bytes())
}

/// The smallest byte string above every string that starts with `prefix`, or `None`
/// when there is none (all 0xff).
fn prefix_end(prefix: &str) -> Option<Vec<u8>> {
    let mut b = prefix.as_bytes().to_vec();
    while let Some(last) = b.pop() {
        if last < 0xff {
            b.push(last + 1);
            return Some(b);
        }
    }
    None
}

/// (id, gen) of a live key.
pub(super) fn by_key(c: &Connection, key: &str) -> Result<Option<(u64, u32)>> {
    c.prepare_cached("SELECT id, gen FROM handles WHERE key = ?1")?
        .query_row([key.as_bytes()], |r| Ok((from_sql(r.get(0)?), r.get(1)?)))
        .optional()
}

/// (key, gen) of an id: `Some((None, gen))` for a tombstone.
pub(super) fn by_id(c: &Connection, id: u64) -> Result<Option<(Option<String>, u32)>> {
    let row: Option<(Option<Vec<u8>>, u32)> = c
        .prepare_cached("SELECT key, gen FROM handles WHERE id = ?1")?
        .query_row([to_sql(id)], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    // A key that is not UTF-8 was not written by us: treat the row as a tombstone.
    Ok(row.map(|(k, g)| (k.and_then(|k| String::from_utf8(k).ok()), g)))
}

/// Sets id → (gen, key), replacing the id's row and any other row holding `key`.
pub(super) fn put(c: &Connection, id: u64, gen: u32, key: &str) -> Result<()> {
    c.prepare_cached("INSERT OR REPLACE INTO handles (id, gen, key) VALUES (?1, ?2, ?3)")?
        .execute(params![to_sql(id), gen, key.as_bytes()])?;
    Ok(())
}

/// Makes `id` a tombstone keeping at least generation `gen`.
pub(super) fn tomb(c: &Connection, id: u64, gen: u32) -> Result<()> {
    c.prepare_cached(
        "INSERT INTO handles (id, gen, key) VALUES (?1, ?2, NULL)
         ON CONFLICT(id) DO UPDATE SET key = NULL, gen = max(gen, excluded.gen)",
    )?
    .execute(params![to_sql(id), gen])?;
    Ok(())
}

/// Gives the live `id` the key `key`.
pub(super) fn set_key(c: &Connection, id: u64, key: Option<&str>) -> Result<()> {
    c.prepare_cached("UPDATE handles SET key = ?2 WHERE id = ?1")?
        .execute(params![to_sql(id), key.map(str::as_bytes)])?;
    Ok(())
}

/// Live (id, key) under `prefix`, in key order.
pub(super) fn range(c: &Connection, prefix: &str) -> Result<Vec<(u64, String)>> {
    range_first(c, prefix, -1)
}

/// The first `limit` live (id, key) under `prefix` in key order (all of them when
/// `limit` is negative, SQLite's "no limit").
pub(super) fn range_first(c: &Connection, prefix: &str, limit: i64) -> Result<Vec<(u64, String)>> {
    let map =
        |r: &rusqlite::Row<'_>| -> Result<(u64, Vec<u8>)> { Ok((from_sql(r.get(0)?), r.get(1)?)) };
    let rows: Vec<(u64, Vec<u8>)> = match prefix_end(prefix) {
        Some(end) => c
            .prepare_cached("SELECT id, key FROM handles WHERE key >= ?1 AND key < ?2 LIMIT ?3")?
            .query_map(params![prefix.as_bytes(), end, limit], map)?
            .collect::<Result<_>>()?,
        None => c
            .prepare_cached("SELECT id, key FROM handles WHERE key >= ?1 LIMIT ?2")?
            .query_map(params![prefix.as_bytes(), limit], map)?
            .collect::<Result<_>>()?,
    };
    Ok(rows
        .into_iter()
        .filter_map(|(id, k)| Some((id, String::from_utf8(k).ok()?)))
        .collect())
}

/// The journal (generation, offset) the index holds every change up to, if any.
pub(super) fn folded(c: &Connection) -> Result<Option<(u64, u64)>> {
    c.query_row("SELECT gen, pos FROM folded WHERE one = 0", [], |r| {
        Ok((from_sql(r.get(0)?), from_sql(r.get(1)?)))
    })
    .optional()
}

pub(super) fn set_folded(c: &Connection, gen: u64, pos: u64) -> Result<()> {
    c.prepare_cached("INSERT OR REPLACE INTO folded (one, gen, pos) VALUES (0, ?1, ?2)")?
        .execute(params![to_sql(gen), to_sql(pos)])?;
    Ok(())
}

/// Applies one journal record (inside the caller's transaction). Returns the ids a
/// RENAME or FORGET_PREFIX moved or unmapped (an ASSIGN or FORGET reported its own
/// when it was journaled).
pub(super) fn apply(c: &Connection, r: &Rec) -> Result<Vec<u64>> {
    match r.tag {
        journal::T_ASSIGN => put(c, r.id, r.gen, &r.payload).map(|()| Vec::new()),
        journal::T_FORGET => tomb(c, r.id, r.gen).map(|()| Vec::new()),
        journal::T_RENAME => match r.payload.split_once('\0') {
            Some((from, to)) => rename(c, from, to),
            None => Ok(Vec::new()),
        },
        journal::T_FORGET_PREFIX => forget_prefix(c, &r.payload),
        _ => Ok(Vec::new()),
    }
}

/// Applies a batch of journal records in order (inside the caller's transaction),
/// except an ASSIGN whose id a later FORGET of the same batch tombstones with no
/// RENAME or FORGET_PREFIX between: a name created and removed before the fold
/// writes only its tombstone, the row the put would have left behind anyway (`tomb`
/// keeps the larger generation, and the put's replacement of another row holding the
/// key is done by that row's own record, which is in the batch: `HandleTable::find_key`
/// supersedes an index row only for an id with a pending record). That tombstone is
/// skipped too when its generation is below `floor`, the current second: a new
/// generation is at least that (`HandleTable::pick`), so the row could raise none and
/// `prune_tombs` would delete it; what the index held for the id before the ASSIGN
/// (nothing, or an older tombstone or FORGET of the same batch: the id was not live
/// when the ASSIGN picked it) is then the end state, as after a prune. Returns what
/// the last record touched and the rows written.
pub(super) fn apply_batch<'a>(
    c: &Connection,
    recs: impl DoubleEndedIterator<Item = &'a Rec> + Clone,
    floor: u32,
) -> Result<(Vec<u64>, usize)> {
    let skip = skipped(recs.clone(), floor);
    let (mut touched, mut writes) = (Vec::new(), 0);
    for (r, skip) in recs.zip(skip) {
        if !skip {
            touched = apply(c, r)?;
            writes += 1;
        }
    }
    Ok((touched, writes))
}

/// Which records of a batch `apply_batch` skips, in order: ASSIGNs a later FORGET of
/// the same segment (no RENAME or FORGET_PREFIX between) undoes, and FORGETs of an
/// id ASSIGNed earlier in the segment whose generation is below `floor`.
fn skipped<'a>(recs: impl DoubleEndedIterator<Item = &'a Rec> + Clone, floor: u32) -> Vec<bool> {
    let mut forgotten_later = std::collections::HashSet::new();
    let mut skip = Vec::new();
    for r in recs.clone().rev() {
        skip.push(match r.tag {
            journal::T_FORGET => {
                forgotten_later.insert(r.id);
                false
            }
            journal::T_ASSIGN => forgotten_later.contains(&r.id),
            _ => {
                forgotten_later.clear();
                false
            }
        });
    }
    skip.reverse();
    let mut assigned = std::collections::HashSet::new();
    for (r, skip) in recs.zip(skip.iter_mut()) {
        match r.tag {
            journal::T_ASSIGN => {
                assigned.insert(r.id);
            }
            journal::T_FORGET => *skip = assigned.remove(&r.id) && r.gen < floor,
            _ => assigned.clear(),
        }
    }
    skip
}

/// Every live key under `prefix` becomes a tombstone.
fn forget_prefix(c: &Connection, prefix: &str) -> Result<Vec<u64>> {
    let rows = range(c, prefix)?;
    for (id, _) in &rows {
        // A live row's gen is its tombstone's (tomb keeps the max).
        tomb(c, *id, 0)?;
    }
    Ok(rows.into_iter().map(|(id, _)| id).collect())
}

/// Moves `from` to `to` keeping ids: one key, or with both ending in '/' a directory.
/// Whatever was mapped at the target is forgotten.
fn rename(c: &Connection, from: &str, to: &str) -> Result<Vec<u64>> {
    let mut touched = Vec::new();
    if from.ends_with('/') {
        let moved = range(c, from)?;
        for (id, k) in range(c, to)? {
            if !k.starts_with(from) {
                tomb(c, id, 0)?;
                touched.push(id);
            }
        }
        // Two passes: clear, then set, so no moved key meets another's old one in
        // the unique index midway.
        for (id, _) in &moved {
            set_key(c, *id, None)?;
        }
        for (id, k) in &moved {
            let new = format!("{to}{}", &k[from.len()..]);
            set_key(c, *id, Some(&new))?;
            touched.push(*id);
        }
    } else {
        if let Some((old, _)) = by_key(c, to)? {
            tomb(c, old, 0)?;
            touched.push(old);
        }
        if let Some((id, _)) = by_key(c, from)? {
            set_key(c, id, Some(to))?;
            touched.push(id);
        }
    }
    Ok(touched)
}

/// Drops tombstones the time floor covers (a new generation is at least the current
/// second, so a tombstone below it can no longer raise one).
pub(super) fn prune_tombs(c: &Connection, now: u32) -> Result<usize> {
    c.prepare_cached("DELETE FROM handles WHERE key IS NULL AND gen < ?1")?
        .execute([now])
}

/// Makes every commit durable: a FULL checkpoint fsyncs the WAL, copies it into the
/// database and fsyncs that.
pub(super) fn checkpoint(c: &Connection) -> Result<()> {
    let busy: i64 = c.query_row("PRAGMA wal_checkpoint(FULL)", [], |r| r.get(0))?;
    if busy != 0 {
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
            Some("checkpoint blocked".into()),
        ));
    }
    Ok(())
}

/// (live, tombstone) row counts.
#[cfg(test)]
pub(super) fn counts(c: &Connection) -> Result<(usize, usize)> {
    c.query_row(
        "SELECT count(key), count(*) - count(key) FROM handles",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn prefix_end_is_the_next_string() {
        assert_eq!(super::prefix_end("d/"), Some(b"d0".to_vec()));
        assert_eq!(super::prefix_end("a\u{7f}"), Some(b"a\x80".to_vec()));
        assert_eq!(super::prefix_end(""), None);
    }

    fn rec(tag: u8, id: u64, gen: u32, payload: &str) -> super::Rec {
        super::Rec {
            tag,
            id,
            gen,
            payload: payload.into(),
        }
    }

    /// A name created and removed within one batch writes its tombstone only while
    /// the time floor does not cover it; below the floor it writes no row, and a FORGET
    /// of a mapping from before the batch is still applied.
    #[test]
    fn a_created_and_removed_name_under_the_time_floor_writes_no_row() {
        use super::journal::{T_ASSIGN, T_FORGET, T_RENAME};
        let d = tempfile::tempdir().unwrap();
        let c = super::open(&d.path().join("i.db")).unwrap();
        let pair = [rec(T_ASSIGN, 5, 100, "a"), rec(T_FORGET, 5, 100, "")];
        let (_, writes) = super::apply_batch(&c, pair.iter(), 100).unwrap();
        assert_eq!(writes, 1, "the floor does not cover generation 100 yet");
        assert_eq!(super::counts(&c).unwrap(), (0, 1));
        let pair = [rec(T_ASSIGN, 6, 100, "b"), rec(T_FORGET, 6, 100, "")];
        let (_, writes) = super::apply_batch(&c, pair.iter(), 101).unwrap();
        assert_eq!(writes, 0);
        assert_eq!(super::counts(&c).unwrap(), (0, 1));
        // A stale live mapping forgotten, then a pair: the forget still lands.
        super::put(&c, 7, 90, "c").unwrap();
        let recs = [
            rec(T_FORGET, 7, 90, ""),
            rec(T_ASSIGN, 7, 91, "c"),
            rec(T_FORGET, 7, 91, ""),
        ];
        let (_, writes) = super::apply_batch(&c, recs.iter(), 200).unwrap();
        assert_eq!(writes, 1);
        assert_eq!(super::by_key(&c, "c").unwrap(), None);
        assert_eq!(super::by_id(&c, 7).unwrap(), Some((None, 90)));
        // A rename between ASSIGN and FORGET: nothing is skipped.
        let recs = [
            rec(T_ASSIGN, 8, 100, "e"),
            rec(T_RENAME, 0, 0, "e\0f"),
            rec(T_FORGET, 8, 100, ""),
        ];
        let (_, writes) = super::apply_batch(&c, recs.iter(), 200).unwrap();
        assert_eq!(writes, 3);
        assert_eq!(super::by_id(&c, 8).unwrap(), Some((None, 100)));
        // A live name at the end of the batch is written whatever came before.
        let recs = [
            rec(T_ASSIGN, 9, 100, "g"),
            rec(T_FORGET, 9, 100, ""),
            rec(T_ASSIGN, 9, 101, "g"),
        ];
        let (_, writes) = super::apply_batch(&c, recs.iter(), 200).unwrap();
        assert_eq!(writes, 1);
        assert_eq!(super::by_key(&c, "g").unwrap(), Some((9, 101)));
    }
}
