//! Deferred removal of open files ("delete on last close").
//!
//! RFC 8881 §18.25 (REMOVE) and §18.26 (RENAME): removing a name does not end the
//! state of the object behind it; an NFSv4 client that holds it open keeps reading
//! and writing it through its filehandle and stateid until its CLOSE (§9.1.1: the
//! open's stateid stays valid). knfsd gets this from the VFS (the open `nfsd_file`
//! keeps the inode alive with nlink 0). An object store has no inodes, so when a
//! REMOVE, or a RENAME over an existing file, would delete a regular file that has
//! NFSv4 opens (`crate::fs::OpenFiles`), the model moves the object to a hidden key
//! in the export root instead, `<root>.nfsgw-orphan.<fileid hex>`, with the backend's
//! own rename (on s3 a copy: acceptable, it only happens to files open elsewhere).
//! The handle table moves the file id with it, so the open's filehandle resolves
//! to the orphan: READ, WRITE, GETATTR (numlinks 0, as knfsd) and CLOSE work. The
//! name is gone at once for everyone (LOOKUP NOENT, READDIR without it, the name
//! free for a new file). The caches are told the file changed (`observe`), not that
//! it is gone: it is still readable.
//!
//! When the last open of the file goes (CLOSE, the client's state purged on lease
//! expiry or DESTROY_CLIENTID), the server calls `release` and the orphan is deleted
//! (then its handles are STALE, as for any removed file). A REMOVE racing the last
//! CLOSE re-checks after the move, so no orphan outlives its opens.
//!
//! Hidden: names starting with [`ORPHAN_PREFIX`] are refused for creation (`Inval`),
//! never found by LOOKUP and left out of READDIR (`check_name`, `Inner::list_dir`),
//! as `.nfsgw-tmp.` names are.
//!
//! Restarts: every orphan is appended to `state_dir/orphans.log` (`+key`) before the
//! move and struck (`-key`) after its deletion. At start, the orphans the log still
//! lists are kept, mapped to their file ids again (`adopt_orphans`), through the
//! NFSv4 grace period: a client reclaiming its open (CLAIM_PREVIOUS by filehandle,
//! RFC 8881 §8.4.2.1) finds the file, and its last CLOSE deletes it as before. When
//! the grace period is over the server calls `release_unopened` (server::orphans),
//! which deletes every orphan no open holds. That is the promise of
//! OPEN4_RESULT_PRESERVE_UNLINKED (RFC 8881 §18.16.4: kept while open, and through
//! the grace period after a restart so its open can be reclaimed), which OPEN makes
//! only where this module keeps it (`preserves_unlinked`): a backend whose objects
//! outlive the process (`fs`, `s3`; not `memory`) and a key the log can hold (no
//! newline). The one exception is a state directory that cannot be written: the
//! REMOVE then deletes at once (`orphan_if_open`) and says so in the log. The log is
//! this gateway's own, so gateways sharing a bucket never delete each other's
//! orphans.
//!
//! Power loss: a `+key` record is fsynced before the move (and the directory when
//! the log is created), so no hidden orphan can exist without its record. A `-key`
//! strike is not: losing one only makes the next start delete an orphan that is
//! already gone (NotFound, fine), so a CLOSE does not pay for an fsync. A record torn
//! by the crash (no trailing newline, or not UTF-8) is skipped with a log line, never
//! taken for a key: a torn `+dir/.nfsgw-orphan.…` could name a user's `di`. Only
//! keys whose last component is an orphan name are ever deleted at start.
//!
//! Bounded: an orphan exists only while an open of it does, and opens are capped per
//! client and in total (`nfs4` limits, `state::opens::Limits`), so a client that opens
//! and removes many files holds at most its open limit of orphans.

use super::{lock, Inner, Status};
use crate::backend::BackendError;
use crate::fs::{FsResult, OpenFiles};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// Names of orphaned objects (a sibling of `backend::TEMP_PREFIX`).
pub(super) const ORPHAN_PREFIX: &str = ".nfsgw-orphan.";

/// The orphans of this run and their log.
pub(super) struct Orphans {
    /// Which file ids have NFSv4 opens (set once by the server).
    opens: OnceLock<Arc<dyn OpenFiles>>,
    /// File id → orphan key.
    map: Mutex<HashMap<u64, String>>,
    /// `state_dir/orphans.log`, append-only.
    log: PathBuf,
    /// The log, opened by the first append of this run (creating it, then fsyncing
    /// its directory); appends serialize on it (orphans are rare).
    file: Mutex<Option<std::fs::File>>,
}

impl Orphans {
    pub fn new(state_dir: &Path) -> Orphans {
        Orphans {
            opens: OnceLock::new(),
            map: Mutex::new(HashMap::new()),
            log: state_dir.join("orphans.log"),
            file: Mutex::new(None),
        }
    }

    fn is_open(&self, fileid: u64) -> bool {
        self.opens.get().is_some_and(|o| o.is_open(fileid))
    }

    /// Appends one record (`+key` or `-key`) with one write(2), so a process kill
    /// never tears it. A `+` record is fsynced before returning: the caller moves the
    /// file aside only once the record would survive a power loss (module doc).
    fn append(&self, sign: char, key: &str) -> std::io::Result<()> {
        let mut g = lock(&self.file);
        if g.is_none() {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.log)?;
            // The log's name must be durable too (it may have just been created).
            sync_dir(&self.log)?;
            *g = Some(f);
        }
        let f = g.as_mut().expect("opened above");
        f.write_all(format!("{sign}{key}\n").as_bytes())?;
        if sign == '+' {
            f.sync_data()?;
        }
        Ok(())
    }

    /// Keys the log lists as orphaned and not yet deleted.
    fn pending(&self) -> std::io::Result<Vec<String>> {
        let bytes = match std::fs::read(&self.log) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        Ok(parse_log(&self.log, &bytes))
    }

    /// Replaces the log with `+key` records for `keys`, durably: a crash leaves the
    /// old log or the new one, never a truncated one (temporary file, fsync, rename,
    /// fsync of the directory). The next append opens the new file.
    fn rewrite(&self, keys: &[String]) -> std::io::Result<()> {
        let body: String = keys.iter().map(|k| format!("+{k}\n")).collect();
        let tmp = self.log.with_extension("log.tmp");
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(body.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &self.log)?;
        sync_dir(&self.log)?;
        *lock(&self.file) = None;
        Ok(())
    }
}

/// fsyncs the directory holding `path` (its entries: a created or renamed name).
fn sync_dir(path: &Path) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)?.sync_all()
}

/// The orphans a log lists and does not strike. Complete records only: a last line
/// without its newline (torn by a crash), a line that is not UTF-8, a record that is
/// neither `+` nor `-`, and a key that is not an orphan name are skipped, each with
/// a log line (`log` names the file in it).
pub(super) fn parse_log(log: &Path, bytes: &[u8]) -> Vec<String> {
    let mut live: Vec<String> = Vec::new();
    let mut lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    // After the last newline: empty, or a record whose write the crash cut short.
    if let Some(tail) = lines.pop().filter(|t| !t.is_empty()) {
        tracing::warn!(
            log = %log.display(),
            record = %String::from_utf8_lossy(tail),
            "orphans.log: torn last record (no newline) skipped"
        );
    }
    for (n, line) in lines.into_iter().enumerate() {
        let rec = std::str::from_utf8(line).ok().and_then(|l| {
            let (sign, key) = (l.chars().next()?, l.get(1..)?);
            (matches!(sign, '+' | '-') && is_orphan_key(key)).then_some((sign, key))
        });
        match rec {
            Some(('+', k)) => live.push(k.to_string()),
            Some((_, k)) => live.retain(|x| x != k),
            None => tracing::warn!(
                log = %log.display(),
                line = n + 1,
                record = %String::from_utf8_lossy(line),
                "orphans.log: malformed record skipped"
            ),
        }
    }
    live
}

/// Whether `key` names an orphan (its last component has the prefix).
pub(super) fn is_orphan_key(key: &str) -> bool {
    key.rsplit('/')
        .next()
        .is_some_and(|n| n.starts_with(ORPHAN_PREFIX))
}

impl Inner {
    /// See `FileModel::track_opens`.
    pub fn track_opens(&self, o: Arc<dyn OpenFiles>) {
        let _ = self.orphans.opens.set(o);
    }

    /// The deepest export root holding `key`: every export that reaches the file
    /// reaches that root too, so the orphan resolves through each of them.
    pub(super) fn orphan_root(&self, key: &str) -> &'static str {
        self.exports
            .load()
            .values()
            .copied()
            .filter(|p| key.starts_with(p))
            .max_by_key(|p| p.len())
            .unwrap_or("")
    }

    /// REMOVE or RENAME is about to delete the regular file at `key`: when it has
    /// NFSv4 opens, moves it to an orphan key instead (module doc) and returns true;
    /// the caller then must not delete it. False: not open, delete as usual.
    pub(super) fn orphan_if_open(&self, key: &str) -> FsResult<bool> {
        let Some(id) = self.table.id_of(key) else {
            return Ok(false); // never given a handle: nobody can have it open
        };
        if !self.orphans.is_open(id) || key.contains('\n') {
            return Ok(false);
        }
        let okey = format!("{}{ORPHAN_PREFIX}{id:016x}", self.orphan_root(key));
        if let Err(e) = self.orphans.append('+', &okey) {
            // Without the record a crash would leave the orphan for good: delete now.
            tracing::warn!(key, error = %e, "orphans.log: cannot record; removing the open file at once");
            return Ok(false);
        }
        self.move_dirty(key, &okey);
        self.backend
            .rename(key, &okey)
            .map_err(|e| self.berr(e, key))?;
        let moved = self.table.rename(key, &okey);
        self.observer.touched(&moved);
        lock(&self.clean).remove(key);
        lock(&self.orphans.map).insert(id, okey.clone());
        tracing::debug!(
            key,
            orphan = okey,
            fileid = id,
            "open file removed: kept until its last close"
        );
        // The last CLOSE may have run between the check and the insert: it found no
        // orphan to delete, so delete it here.
        if !self.orphans.is_open(id) {
            self.release(id);
        }
        Ok(true)
    }

    /// See `FileModel::release`: the last open of `fileid` went; delete its orphan.
    pub fn release(&self, fileid: u64) {
        let Some(okey) = lock(&self.orphans.map).remove(&fileid) else {
            return;
        };
        let _ = self.changing(&[Some(fileid)], || {
            match self.backend.delete(&okey) {
                Ok(()) | Err(BackendError::NotFound) => {}
                Err(e) => {
                    // Left for the next start's clean-up (the log still lists it).
                    tracing::warn!(key = okey, error = %e, "cannot delete a closed orphan");
                    return Err(Status::Io);
                }
            }
            self.forget_file(&okey);
            if let Err(e) = self.orphans.append('-', &okey) {
                tracing::warn!(key = okey, error = %e, "orphans.log: cannot strike");
            }
            Ok(())
        });
    }

    /// Whether an open of the file at `key` may promise OPEN4_RESULT_PRESERVE_UNLINKED
    /// (module doc): the store outlives this process and the key fits the log.
    pub fn preserves_unlinked(&self, key: &str) -> bool {
        self.backend.name() != "memory" && !key.contains('\n')
    }

    /// At open: the orphans a previous run left (stopped with opens held) are kept
    /// for their reclaims, mapped to their file ids (the handle table still maps each
    /// id to the orphan key); one that no id maps any more is deleted. The log is
    /// rewritten with those kept.
    pub(super) fn adopt_orphans(&self) -> anyhow::Result<()> {
        use anyhow::Context;
        let keys = self
            .orphans
            .pending()
            .with_context(|| format!("reading {}", self.orphans.log.display()))?;
        let mut left = Vec::new();
        for k in keys {
            if let Some(id) = self.table.id_of(&k) {
                tracing::info!(
                    key = k,
                    fileid = id,
                    "kept an orphan of the previous run for the grace period"
                );
                lock(&self.orphans.map).insert(id, k.clone());
                left.push(k);
                continue;
            }
            match self.backend.delete(&k) {
                Ok(()) | Err(BackendError::NotFound) => {
                    tracing::info!(key = k, "deleted an orphan left by the previous run");
                }
                Err(e) => {
                    tracing::warn!(key = k, error = %e, "cannot delete an orphan of the previous run; kept for the next start");
                    left.push(k);
                }
            }
        }
        self.orphans
            .rewrite(&left)
            .with_context(|| format!("writing {}", self.orphans.log.display()))?;
        Ok(())
    }

    /// See `FileModel::release_unopened_orphans`: deletes every orphan no open holds
    /// (those of the previous run nobody reclaimed). Returns how many.
    pub fn release_unopened(&self) -> usize {
        let ids: Vec<u64> = lock(&self.orphans.map).keys().copied().collect();
        let idle: Vec<u64> = ids
            .into_iter()
            .filter(|&id| !self.orphans.is_open(id))
            .collect();
        idle.iter().for_each(|&id| self.release(id));
        idle.len()
    }
}
