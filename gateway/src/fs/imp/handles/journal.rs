//! The handle table's change journal, `state_dir/handles.journal`: every change to the
//! table is appended here with one write(2) before the call returns, and folded into
//! the SQLite index (`index`) in batches. Format:
//!
//! ```text
//! "NFSGWHJ1" | generation u64 LE | records
//! record = tag u8 | fileid u64 LE | gen u32 LE | len u32 LE | payload[len] | check u32 LE
//! ```
//!
//! (the record layout of the old log, `legacy`). Tags: ASSIGN (payload = key), FORGET
//! (`gen` = the generation the tombstone keeps), RENAME (payload = "from\0to": one key,
//! or with both ending in '/' a directory) and FORGET_PREFIX (payload = the prefix).
//! Replay stops at the first torn or corrupt record (a kill mid-append).
//!
//! The index stores, in the same transaction as each fold, the (generation, offset)
//! of the journal it has absorbed (`index::folded`); at open the records after that
//! point are replayed. A new generation (an empty journal) is started only once the
//! index is fsynced (`HandleTable::reset`), so the journal always holds every change
//! the index may not have durably.

use super::legacy::{parse, record};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"NFSGWHJ1";
/// Bytes before the first record: magic and generation.
pub(super) const HEAD: u64 = 16;

pub(super) const T_ASSIGN: u8 = 1;
pub(super) const T_RENAME: u8 = 2;
pub(super) const T_FORGET: u8 = 4;
pub(super) const T_FORGET_PREFIX: u8 = 5;

/// One change, as journaled and as applied to the index.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Rec {
    pub tag: u8,
    pub id: u64,
    pub gen: u32,
    pub payload: String,
}

/// The open journal: appends go to its end.
pub(super) struct Journal {
    file: File,
    /// Bytes written (the end of the last whole record).
    pub len: u64,
    pub gen: u64,
    /// Appended since the last `sync`.
    dirty: bool,
    buf: Vec<u8>,
}

/// What an existing journal holds: its generation and its whole records, each with
/// the offset just past it.
pub(super) struct Read {
    pub gen: u64,
    pub recs: Vec<(Rec, u64)>,
}

fn tmp_of(path: &Path) -> PathBuf {
    path.with_extension("journal.tmp")
}

/// Reads `path`: `None` when there is none (or it is empty: a crash while creating it).
pub(super) fn read(path: &Path) -> anyhow::Result<Option<Read>> {
    use anyhow::Context;
    let data = match std::fs::read(path) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    if data.is_empty() {
        return Ok(None);
    }
    if data.len() < HEAD as usize || &data[..8] != MAGIC {
        anyhow::bail!(
            "{}: not a handle journal (bad magic); move it away to start afresh",
            path.display()
        );
    }
    let gen = u64::from_le_bytes(data[8..16].try_into().expect("8 bytes"));
    let mut pos = HEAD as usize;
    let mut recs = Vec::new();
    while let Some((tag, id, gen, payload, used)) = parse(&data[pos..]) {
        pos += used;
        let payload = payload.to_string();
        recs.push((
            Rec {
                tag,
                id,
                gen,
                payload,
            },
            pos as u64,
        ));
    }
    if pos < data.len() {
        tracing::warn!(path = %path.display(), bytes = data.len() - pos, "handle journal: ignoring a torn or corrupt tail");
    }
    Ok(Some(Read { gen, recs }))
}

impl Journal {
    /// Starts generation `gen` durably: an empty journal written beside, fsynced and
    /// renamed over `path`, then the directory fsynced.
    pub(super) fn create(path: &Path, gen: u64) -> anyhow::Result<Journal> {
        use anyhow::Context;
        let tmp = tmp_of(path);
        let mut head = MAGIC.to_vec();
        head.extend_from_slice(&gen.to_le_bytes());
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("creating {}", tmp.display()))?;
        f.write_all(&head)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path).with_context(|| format!("replacing {}", path.display()))?;
        if let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        Ok(Journal {
            file,
            len: HEAD,
            gen,
            dirty: false,
            buf: Vec::new(),
        })
    }

    /// Appends one record with one write(2): once it returns, a process kill keeps
    /// it (the page cache has it). A failed write is cut back off, so no later record
    /// sits behind a torn one.
    pub(super) fn append(&mut self, r: &Rec) -> std::io::Result<()> {
        self.buf.clear();
        record(&mut self.buf, r.tag, r.id, r.gen, &r.payload);
        if let Err(e) = self.file.write_all(&self.buf) {
            let _ = self.file.set_len(self.len);
            return Err(e);
        }
        self.len += self.buf.len() as u64;
        self.dirty = true;
        Ok(())
    }

    /// Makes every appended record durable (fdatasync), if any came since the last.
    pub(super) fn sync(&mut self) -> std::io::Result<()> {
        if self.dirty {
            self.file.sync_data()?;
            self.dirty = false;
        }
        Ok(())
    }
}
