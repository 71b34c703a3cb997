//! Write-back staging: UNSTABLE writes gather in memory per object and reach the
//! bucket as one PUT (small files) or one multipart upload (large ones).
//!
//! An object store cannot update an object in place, so `RandomWrite` is built here:
//! - A *stage* holds the bytes written to one key since its last upload, in 1 MiB
//!   chunks with the written ranges of each, over a *base*: the object as it was
//!   (unwritten ranges come from it by ranged GET) or nothing (zeros: a new or
//!   truncated file).
//! - Streaming: over an empty base, every full part of contiguous data from the start
//!   is uploaded as soon as it is complete (a multipart upload opened on demand), and
//!   its memory is freed when the part is in the store. A sequential writer of any
//!   size needs about one part of memory per file.
//! - `sync` (COMMIT, a stable WRITE, a full buffer, an idle timeout, shutdown) uploads
//!   the rest: the tail as the last part and completes the upload, or, with a base,
//!   rewrites the whole object part by part (read-modify-write: an overwrite of a few
//!   bytes of a large object costs a full re-upload; documented in the README).
//!   Only then does COMMIT answer, and only then is the stage dropped.
//! - Reads see staged data (read-your-writes); reads of a range already handed to a
//!   part upload, overwrites below it, and truncation below it first complete the
//!   upload, then continue over the uploaded object as the new base.
//! - A failed part upload keeps its bytes and is retried by the next sync, which
//!   reports the failure (JUKEBOX) until it succeeds; nothing is dropped before the
//!   store has it.
//! - Unless the store lost it: a streaming upload that is gone (NoSuchUpload on a part
//!   or on Complete, not a lost Complete answer: a lifecycle rule or another client
//!   aborted it) took the parts' bytes with it, and they are no longer in memory. The
//!   stage is then dropped whole, as a restart would drop it, and `lost` moves on: it
//!   is part of the write verifier, so clients resend every WRITE not yet committed
//!   (RFC 1813 §3.3.7/§3.3.21, RFC 8881 §18.32.3) into a fresh stage and a fresh
//!   upload. Nothing refers to the dead upload id again (see `lose`).
//! - Under `[ha]` (docs/ha.md "Lease and clocks"): no stage is uploaded past the
//!   identity lease's deadline, in the background (`flush_idle_s`) or on a COMMIT that
//!   waited for it. A stage that cannot be uploaded before the stop is dropped the
//!   same way (`lose`: the verifier moves, clients resend, after a takeover to the
//!   successor, whose verifier differs anyway), and so is one staged in an earlier
//!   term of the gate (`gate::Gate::term`): it is never uploaded later, over what a
//!   successor may have written meanwhile. New writes are refused (JUKEBOX) while the
//!   gate is shut.

use super::super::gate::{self, Gate};
use super::super::{BResult, BackendError, ObjectMeta, UserMeta};
pub(super) use super::chunk::Spill;
use super::chunk::{Chunk, Data};
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

pub(super) const CHUNK: u64 = 1 << 20;

/// Process-wide count of stages dropped because the store lost their upload
/// (`nfsgw_s3_uploads_lost_total`).
static UPLOADS_LOST: AtomicU64 = AtomicU64::new(0);

pub fn uploads_lost() -> u64 {
    UPLOADS_LOST.load(Ordering::Relaxed)
}
/// S3 limits: at most 10,000 parts per upload and 5 TiB per object.
const MAX_PARTS: u64 = 10_000;
const S3_MAX_OBJECT: u64 = 5 << 40;

/// What staging needs from the store (implemented by the S3 backend; a fake in tests).
pub(super) trait Store: Send + Sync {
    fn head(&self, key: &str) -> BResult<ObjectMeta>;
    fn get_range(&self, key: &str, offset: u64, dst: &mut [u8]) -> BResult<usize>;
    fn put(&self, key: &str, data: Bytes, meta: &UserMeta) -> BResult<ObjectMeta>;
    /// Opens a multipart upload; returns its id.
    fn mp_create(&self, key: &str, meta: &UserMeta) -> BResult<String>;
    /// Uploads part `idx` (0-based); returns the part's ETag.
    fn mp_part(&self, key: &str, id: &str, idx: usize, data: Bytes) -> BResult<String>;
    fn mp_complete(&self, key: &str, id: &str, etags: Vec<String>) -> BResult<()>;
    fn mp_abort(&self, key: &str, id: &str);
}

enum Part {
    Uploading,
    Done(String),
    Failed(Bytes),
}

struct Stage {
    size: u64,
    /// Size of the base object; 0 = no base (zeros).
    base: u64,
    meta: UserMeta,
    mtime_ns: u64,
    chunks: BTreeMap<u64, Chunk>,
    /// Streaming upload: id and parts; bytes [0, claimed) belong to parts.
    mp: Option<String>,
    parts: BTreeMap<usize, Part>,
    claimed: u64,
    /// Bytes of chunks and retained parts held by this stage.
    held: usize,
    last_write: Instant,
    seq: u64,
    /// The gate's term when the stage was opened (0 without `[ha]`).
    term: u64,
    /// A call admitted under the identity (NFSv4) wrote or truncated it: it is gated
    /// (uploaded only while the gate admits, in its term). A stage only NFSv3 wrote is
    /// not (`gate`'s module comment).
    admitted: bool,
}

struct Cell {
    stage: Mutex<Option<Stage>>,
    parts_done: Condvar,
}

pub(super) struct WriteBack {
    store: Arc<dyn Store>,
    spill: Option<Spill>,
    cells: Mutex<HashMap<String, Arc<Cell>>>,
    part: u64,
    budget: usize,
    used: AtomicUsize,
    idle: Duration,
    /// Stages dropped because the store lost their upload (`Backend::lost_writes`).
    lost: AtomicU64,
    /// Under `[ha]`: uploads only while it admits, of stages of its current term.
    gate: OnceLock<Arc<Gate>>,
}

/// Why a stage is dropped whole (`WriteBack::lose`).
enum Why {
    /// The store lost its streaming upload (`op` got NoSuchUpload).
    Lost(String),
    /// Past the identity lease's deadline, or staged in an earlier term of the gate.
    Fenced,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

impl WriteBack {
    pub fn new(
        store: Arc<dyn Store>,
        part: usize,
        budget: usize,
        idle: Duration,
        spill: Option<Spill>,
    ) -> WriteBack {
        assert!(
            part as u64 >= CHUNK && (part as u64).is_multiple_of(CHUNK),
            "part size in whole MiB"
        );
        WriteBack {
            store,
            spill,
            cells: Mutex::new(HashMap::new()),
            part: part as u64,
            budget,
            used: AtomicUsize::new(0),
            idle,
            lost: AtomicU64::new(0),
            gate: OnceLock::new(),
        }
    }

    /// Gates uploads from now on (`[ha]`, set once at start).
    pub fn set_gate(&self, g: Arc<Gate>) {
        let _ = self.gate.set(g);
    }

    /// Whether the stage may be uploaded now: without a gate, always; with one, while
    /// it admits and only if the stage was opened in its current term.
    fn may_upload(&self, s: &Stage) -> bool {
        !s.admitted
            || self
                .gate
                .get()
                .is_none_or(|g| g.admits() && g.term() == s.term)
    }

    /// A stage an admitted call (NFSv4 under the identity) writes becomes gated, in
    /// the gate's current term (what NFSv3 staged before carries no identity's state).
    fn mark_admitted(&self, s: &mut Stage) {
        if !s.admitted && gate::admitted_here() {
            s.admitted = true;
            s.term = self.gate.get().map_or(0, |g| g.term());
        }
    }

    /// A new write or truncation of an admitted call (NFSv4 under the identity) is
    /// taken only while the gate admits.
    fn check_gate(&self, what: &str) -> BResult<()> {
        if !gate::admitted_here() {
            return Ok(());
        }
        self.gate.get().map_or(Ok(()), |g| g.check(what))
    }

    fn cell(&self, key: &str) -> Option<Arc<Cell>> {
        lock(&self.cells).get(key).cloned()
    }

    fn cell_or_new(&self, key: &str) -> Arc<Cell> {
        lock(&self.cells)
            .entry(key.to_string())
            .or_insert_with(|| {
                Arc::new(Cell {
                    stage: Mutex::new(None),
                    parts_done: Condvar::new(),
                })
            })
            .clone()
    }

    /// Bytes staged in memory across all objects.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// The staged view of `key`, if it has unsynced writes.
    pub fn overlay(&self, key: &str) -> Option<ObjectMeta> {
        let cell = self.cell(key)?;
        let mut g = lock(&cell.stage);
        // A stage of an earlier term is never uploaded: it is not the file either.
        self.drop_if_old_term(key, &mut g);
        let s = g.as_ref()?;
        Some(ObjectMeta {
            key: key.to_string(),
            size: s.size,
            mtime_ns: s.mtime_ns,
            etag: format!("staged-{}-{}", s.seq, s.size),
            user: s.meta.clone(),
        })
    }

    fn open_stage(&self, key: &str) -> BResult<Stage> {
        let m = self.store.head(key)?;
        Ok(Stage {
            size: m.size,
            base: m.size,
            meta: m.user,
            mtime_ns: now_ns(),
            chunks: BTreeMap::new(),
            mp: None,
            parts: BTreeMap::new(),
            claimed: 0,
            held: 0,
            last_write: Instant::now(),
            seq: 0,
            term: self.gate.get().map_or(0, |g| g.term()),
            admitted: false,
        })
    }

    /// The largest object this stage can upload: the store's 5 TiB, or fewer when
    /// 10,000 parts of the configured size do not reach it.
    pub(crate) fn max_object(&self) -> u64 {
        self.part.saturating_mul(MAX_PARTS).min(S3_MAX_OBJECT)
    }

    /// A size (untrusted: a WRITE's offset + count, a SETATTR size) the store could
    /// never hold gets NoSpace now, instead of a sync that uploads parts of zeros
    /// until the store refuses (or, for a size near 2^63, for ever).
    fn check_size(&self, key: &str, end: Option<u64>) -> BResult<()> {
        match end {
            Some(e) if e <= self.max_object() => Ok(()),
            _ => {
                tracing::warn!(key, end = ?end, max = self.max_object(), "s3: object size past the store's limit refused");
                Err(BackendError::NoSpace)
            }
        }
    }

    /// `RandomWrite::write_at`.
    pub fn write_at(&self, key: &str, offset: u64, data: &[u8]) -> BResult<()> {
        self.check_size(key, offset.checked_add(data.len() as u64))?;
        self.check_gate("a staged WRITE")?;
        let cell = self.cell_or_new(key);
        let mut g = lock(&cell.stage);
        self.drop_if_old_term(key, &mut g);
        if g.as_ref().is_some_and(|s| offset < s.claimed) {
            // Overwriting bytes already handed to the store: finish that upload first.
            let (ng, r) = self.sync_locked(key, &cell, g);
            g = ng;
            settled(r)?;
        }
        if g.is_none() {
            *g = Some(self.open_stage(key)?);
        }
        let s = g.as_mut().expect("stage");
        self.mark_admitted(s);
        let mut off = offset;
        let mut rest = data;
        while !rest.is_empty() {
            let idx = off / CHUNK;
            let within = (off % CHUNK) as usize;
            let n = rest.len().min(CHUNK as usize - within);
            let spill = self.spill.as_ref();
            let c = s.chunks.entry(idx).or_insert_with(|| {
                // Past the memory budget, new chunks go to the spill file if any.
                if let Some(sp) = spill.filter(|_| self.used() + CHUNK as usize > self.budget) {
                    return Chunk::on_disk(sp.alloc());
                }
                self.used.fetch_add(CHUNK as usize, Ordering::Relaxed);
                s.held += CHUNK as usize;
                Chunk::new()
            });
            c.put(spill, within, &rest[..n])?;
            c.mark(within as u32, (within + n) as u32);
            off += n as u64;
            rest = &rest[n..];
        }
        s.size = s.size.max(offset + data.len() as u64);
        s.mtime_ns = now_ns();
        s.last_write = Instant::now();
        s.seq += 1;
        let claims = self.claim_parts(key, s)?;
        drop(g);
        for (idx, id, bytes) in claims {
            self.upload_part(key, &cell, &id, idx, bytes);
        }
        if self.used() > self.budget {
            self.relieve(key)?;
        }
        Ok(())
    }

    /// Hands every complete part of contiguous data (over an empty base) to a part
    /// upload; returns what to upload (done by the caller with the lock released).
    fn claim_parts(&self, key: &str, s: &mut Stage) -> BResult<Vec<(usize, String, Bytes)>> {
        let mut out = Vec::new();
        while s.base == 0 && self.contiguous(s, s.claimed) >= s.claimed + self.part {
            if s.mp.is_none() {
                s.mp = Some(self.store.mp_create(key, &s.meta)?);
            }
            let (a, b) = (s.claimed, s.claimed + self.part);
            let bytes = self.take_range(s, a, b)?;
            let idx = (a / self.part) as usize;
            s.parts.insert(idx, Part::Uploading);
            s.claimed = b;
            out.push((idx, s.mp.clone().expect("mp"), bytes));
        }
        Ok(out)
    }

    /// End of the contiguous written run starting at `from`.
    fn contiguous(&self, s: &Stage, from: u64) -> u64 {
        let mut at = from;
        loop {
            let Some(c) = s.chunks.get(&(at / CHUNK)) else {
                return at;
            };
            let within = (at % CHUNK) as u32;
            let end = c.run_end(within);
            if end == within {
                return at;
            }
            at = at - within as u64 + end as u64;
            if end < CHUNK as u32 {
                return at;
            }
        }
    }

    fn upload_part(&self, key: &str, cell: &Cell, id: &str, idx: usize, bytes: Bytes) {
        let held = bytes.len();
        if lock(&cell.stage)
            .as_ref()
            .is_none_or(|s| s.mp.as_deref() != Some(id))
        {
            // An earlier part found the upload gone (`lose`; the stage's release
            // counted this part's bytes back): never send to a dead upload again.
            cell.parts_done.notify_all();
            return;
        }
        let r = self.store.mp_part(key, id, idx, bytes.clone());
        let mut g = lock(&cell.stage);
        let ours = g.as_ref().is_some_and(|s| s.mp.as_deref() == Some(id));
        match (r, g.as_mut().filter(|_| ours)) {
            (_, None) => {}
            (Ok(etag), Some(s)) => {
                s.parts.insert(idx, Part::Done(etag));
                s.held -= held;
                self.used.fetch_sub(held, Ordering::Relaxed);
            }
            // NoSuchUpload: no sync can complete this upload any more.
            (Err(BackendError::NotFound), Some(_)) => {
                self.lose(key, &mut g, Why::Lost("UploadPart".into()))
            }
            // Past the deadline: this stage is never completed (see `sync_locked`).
            (Err(_), Some(s)) if !self.may_upload(s) => self.lose(key, &mut g, Why::Fenced),
            (Err(e), Some(s)) => {
                tracing::warn!(key, part = idx, error = %e, "s3: part upload failed; kept for the next sync");
                s.parts.insert(idx, Part::Failed(bytes));
            }
        }
        cell.parts_done.notify_all();
    }

    /// Over budget: upload the largest stage now (its memory comes back).
    fn relieve(&self, writing: &str) -> BResult<()> {
        let cells: Vec<(String, Arc<Cell>)> = lock(&self.cells)
            .iter()
            .map(|(k, c)| (k.clone(), c.clone()))
            .collect();
        let mut best: Option<(usize, String, Arc<Cell>)> = None;
        for (k, c) in cells {
            let held = lock(&c.stage).as_ref().map_or(0, |s| s.held);
            if best.as_ref().is_none_or(|b| held > b.0) {
                best = Some((held, k, c));
            }
        }
        if let Some((_, k, c)) = best {
            tracing::debug!(
                key = k,
                writing,
                used = self.used(),
                "s3: write buffer full, uploading"
            );
            let g = lock(&c.stage);
            settled(self.sync_locked(&k, &c, g).1)?;
        }
        Ok(())
    }

    /// `RandomWrite::set_size`.
    pub fn set_size(&self, key: &str, size: u64) -> BResult<()> {
        self.check_size(key, Some(size))?;
        self.check_gate("a staged truncation")?;
        let cell = self.cell_or_new(key);
        let mut g = lock(&cell.stage);
        self.drop_if_old_term(key, &mut g);
        if g.as_ref().is_some_and(|s| size < s.claimed) {
            let (ng, r) = self.sync_locked(key, &cell, g);
            g = ng;
            settled(r)?;
        }
        if g.is_none() {
            *g = Some(self.open_stage(key)?);
        }
        let s = g.as_mut().expect("stage");
        self.mark_admitted(s);
        if size < s.size {
            // Forget staged bytes past the end; a shrunk base is cut at `size` too.
            let keep = size.div_ceil(CHUNK);
            let gone: Vec<u64> = s.chunks.range(keep..).map(|(k, _)| *k).collect();
            for k in gone {
                if let Some(c) = s.chunks.remove(&k) {
                    self.free_chunk(&mut s.held, c);
                }
            }
            if let Some(c) = s.chunks.get_mut(&(size / CHUNK)) {
                // Bytes past the cut are no longer written (never read again).
                let cut = (size % CHUNK) as u32;
                c.written.retain_mut(|r| {
                    r.1 = r.1.min(cut);
                    r.0 < r.1
                });
            }
            s.base = s.base.min(size);
        }
        s.size = size;
        s.mtime_ns = now_ns();
        s.seq += 1;
        Ok(())
    }

    /// Replaces the metadata the staged object will be uploaded with. Returns false
    /// when `key` has no stage.
    pub fn set_meta(&self, key: &str, meta: &UserMeta) -> bool {
        let Some(cell) = self.cell(key) else {
            return false;
        };
        let mut g = lock(&cell.stage);
        match g.as_mut() {
            // A streaming upload fixed its metadata when it was opened.
            Some(s) if s.mp.is_none() => {
                s.meta = meta.clone();
                true
            }
            _ => false,
        }
    }

    /// Reads through the stage; `None` when `key` has no stage (read the store).
    pub fn read(&self, key: &str, offset: u64, dst: &mut [u8]) -> Option<BResult<usize>> {
        let cell = self.cell(key)?;
        let mut g = lock(&cell.stage);
        self.drop_if_old_term(key, &mut g);
        if g.as_ref().is_some_and(|s| offset < s.claimed) {
            let (ng, r) = self.sync_locked(key, &cell, g);
            g = ng;
            if let Err(e) = settled(r) {
                return Some(Err(e));
            }
        }
        let s = g.as_ref()?;
        if offset >= s.size {
            return Some(Ok(0));
        }
        let n = dst.len().min((s.size - offset) as usize);
        Some(self.fill(key, s, offset, &mut dst[..n]).map(|_| n))
    }

    /// Fills `dst` with the object's bytes at `offset`: staged, else base, else zeros.
    fn fill(&self, key: &str, s: &Stage, offset: u64, dst: &mut [u8]) -> BResult<()> {
        let end = offset + dst.len() as u64;
        if offset < s.base {
            let n = (s.base.min(end) - offset) as usize;
            let got = self.store.get_range(key, offset, &mut dst[..n])?;
            dst[got..n].fill(0);
        }
        let from = ((s.base.max(offset) - offset) as usize).min(dst.len());
        dst[from..].fill(0);
        for (idx, c) in s.chunks.range(offset / CHUNK..end.div_ceil(CHUNK)) {
            let cbase = idx * CHUNK;
            for &(a, b) in &c.written {
                let (a, b) = (cbase + a as u64, cbase + b as u64);
                let (x, y) = (a.max(offset), b.min(end));
                if x < y {
                    c.get(
                        self.spill.as_ref(),
                        (x - cbase) as usize,
                        &mut dst[(x - offset) as usize..(y - offset) as usize],
                    )?;
                }
            }
        }
        Ok(())
    }

    /// Stages dropped so far because the store lost their upload.
    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::Acquire)
    }

    /// `sync` for callers that only need the staged bytes out of the way (a rename's
    /// or a metadata change's copy): staged writes the store lost are already
    /// dropped and the verifier has moved on, so the object is what the store holds.
    pub fn settle(&self, key: &str) -> BResult<()> {
        settled(self.sync(key))
    }

    /// `RandomWrite::sync`: makes every staged write of `key` durable in the store.
    /// `Err(Lost)` when it found the store had lost the stage's upload (dropped, see
    /// `lose`); a later sync finds no stage.
    pub fn sync(&self, key: &str) -> BResult<()> {
        let Some(cell) = self.cell(key) else {
            return Ok(());
        };
        let g = lock(&cell.stage);
        let (_g, r) = self.sync_locked(key, &cell, g);
        r
    }

    /// Syncs the stage behind `g` (locked); returns the guard (now empty on success).
    fn sync_locked<'a>(
        &self,
        key: &str,
        cell: &'a Cell,
        mut g: MutexGuard<'a, Option<Stage>>,
    ) -> (MutexGuard<'a, Option<Stage>>, BResult<()>) {
        // Wait for part uploads other threads are running (they notify when done).
        while g
            .as_ref()
            .is_some_and(|s| s.parts.values().any(|p| matches!(p, Part::Uploading)))
        {
            g = cell
                .parts_done
                .wait_timeout(g, Duration::from_secs(1))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let Some(s) = g.as_mut() else {
            return (g, Ok(()));
        };
        if !self.may_upload(s) {
            // Past the identity lease's deadline (or staged before a stop): never
            // uploaded, now or later (docs/ha.md "Lease and clocks").
            self.lose(key, &mut g, Why::Fenced);
            return (g, Err(BackendError::Lost("fenced".into())));
        }
        // An admitted stage's upload is gated per request (also from the idle
        // flusher's thread, which is no call's).
        let _admitted = s.admitted.then(gate::Admitted::enter);
        let mut r = if s.mp.is_some() {
            self.finish_streaming(key, s)
        } else {
            self.rewrite(key, s)
        };
        if r.is_err() && !self.may_upload(s) {
            // Refused at the gate part-way, or the store held it past the deadline:
            // it cannot be uploaded before the stop.
            r = Err(BackendError::Lost("fenced".into()));
            self.lose(key, &mut g, Why::Fenced);
        } else if let Err(BackendError::Lost(what)) = &r {
            let op = what.clone();
            self.lose(key, &mut g, Why::Lost(op));
        } else if r.is_ok() {
            if let Some(s) = g.take() {
                self.release_stage(s);
            }
        }
        (g, r)
    }

    /// Uploads the tail as the last part(s) and completes the streaming upload.
    fn finish_streaming(&self, key: &str, s: &mut Stage) -> BResult<()> {
        let id = s.mp.clone().expect("streaming");
        // Retry failed parts first (their bytes were kept).
        let failed: Vec<usize> = s
            .parts
            .iter()
            .filter(|(_, p)| matches!(p, Part::Failed(_)))
            .map(|(i, _)| *i)
            .collect();
        for idx in failed {
            let Some(Part::Failed(bytes)) = s.parts.get(&idx) else {
                continue;
            };
            let bytes = bytes.clone();
            let etag = self
                .store
                .mp_part(key, &id, idx, bytes.clone())
                .map_err(gone("UploadPart"))?;
            s.parts.insert(idx, Part::Done(etag));
            s.held -= bytes.len();
            self.used.fetch_sub(bytes.len(), Ordering::Relaxed);
        }
        let mut at = s.claimed;
        while at < s.size {
            let b = (at + self.part).min(s.size);
            let mut buf = vec![0u8; (b - at) as usize];
            self.fill(key, s, at, &mut buf)?;
            let idx = (at / self.part) as usize;
            let etag = self
                .store
                .mp_part(key, &id, idx, Bytes::from(buf))
                .map_err(gone("UploadPart"))?;
            s.parts.insert(idx, Part::Done(etag));
            s.claimed = b;
            self.drop_chunks_below(s, b);
            at = b;
        }
        let etags: Vec<String> = s
            .parts
            .values()
            .map(|p| match p {
                Part::Done(e) => e.clone(),
                _ => unreachable!("every part is done before completing"),
            })
            .collect();
        // NotFound here is not a lost answer: `Store::mp_complete` accepts that one.
        self.store
            .mp_complete(key, &id, etags)
            .map_err(gone("CompleteMultipartUpload"))
    }

    /// Uploads the whole object from stage + base: one PUT up to a part, else a
    /// multipart upload part by part (read-modify-write for a base).
    fn rewrite(&self, key: &str, s: &mut Stage) -> BResult<()> {
        if s.size <= self.part {
            let mut buf = vec![0u8; s.size as usize];
            self.fill(key, s, 0, &mut buf)?;
            self.store.put(key, Bytes::from(buf), &s.meta)?;
            return Ok(());
        }
        let id = self.store.mp_create(key, &s.meta)?;
        let mut etags = Vec::new();
        let mut at = 0;
        while at < s.size {
            let b = (at + self.part).min(s.size);
            let mut buf = vec![0u8; (b - at) as usize];
            let r = self
                .fill(key, s, at, &mut buf)
                .and_then(|_| self.store.mp_part(key, &id, etags.len(), Bytes::from(buf)));
            match r {
                Ok(e) => etags.push(e),
                Err(e) => {
                    self.store.mp_abort(key, &id);
                    return Err(vanished(e, &id));
                }
            }
            at = b;
        }
        self.store.mp_complete(key, &id, etags).map_err(|e| {
            self.store.mp_abort(key, &id);
            vanished(e, &id)
        })
    }

    /// Forgets `key`'s staged writes (the object is being deleted).
    pub fn discard(&self, key: &str) {
        let Some(cell) = lock(&self.cells).remove(key) else {
            return;
        };
        let mut g = lock(&cell.stage);
        if let Some(s) = g.take() {
            if let Some(id) = &s.mp {
                self.store.mp_abort(key, id);
            }
            self.release_stage(s);
        }
    }

    /// Keys with staged writes idle for the configured time (for the flusher).
    pub fn idle_keys(&self) -> Vec<String> {
        if self.idle.is_zero() {
            return Vec::new();
        }
        let cells: Vec<(String, Arc<Cell>)> = lock(&self.cells)
            .iter()
            .map(|(k, c)| (k.clone(), c.clone()))
            .collect();
        cells
            .into_iter()
            .filter(|(_, c)| {
                c.stage
                    .try_lock()
                    .ok()
                    .and_then(|g| g.as_ref().map(|s| s.last_write.elapsed() >= self.idle))
                    .unwrap_or(false)
            })
            .map(|(k, _)| k)
            .collect()
    }

    /// Every key with staged writes.
    pub fn staged_keys(&self) -> Vec<String> {
        lock(&self.cells).keys().cloned().collect()
    }

    /// Drops empty cells (after syncs) so the map does not grow without bound.
    pub fn prune(&self) {
        lock(&self.cells).retain(|_, c| {
            Arc::strong_count(c) > 1 || c.stage.try_lock().map_or(true, |g| g.is_some())
        });
    }
}

/// A sync's outcome for a caller that goes on over whatever is left: a stage the
/// store lost is gone (`WriteBack::lose`), so the caller continues over the store's
/// object (a write or truncation then opens a fresh stage, a read reads the store).
fn settled(r: BResult<()>) -> BResult<()> {
    match r {
        Err(BackendError::Lost(_)) => Ok(()),
        r => r,
    }
}

/// Marks a NoSuchUpload of the stage's own streaming upload (`op` failed on it): the
/// upload and its parts' bytes are gone (`WriteBack::lose`).
fn gone(op: &'static str) -> impl Fn(BackendError) -> BackendError {
    move |e| match e {
        BackendError::NotFound => BackendError::Lost(op.into()),
        e => e,
    }
}

/// NoSuchUpload on an upload a rewrite opened itself: every byte is still staged, so
/// the next sync redoes it with a new upload (JUKEBOX meanwhile), never STALE.
fn vanished(e: BackendError, id: &str) -> BackendError {
    match e {
        BackendError::NotFound => BackendError::Retryable(format!(
            "multipart upload {id} vanished; redone by the next sync"
        )),
        e => e,
    }
}

impl WriteBack {
    /// The store lost the streaming upload of `key`'s stage (`op` got NoSuchUpload):
    /// the bytes of its uploaded parts exist nowhere any more, so no sync can make
    /// the stage whole. Drops it, as a restart would (the file is what the store
    /// holds), and moves `lost` on *before the cell lock is released*: a WRITE that
    /// reads the new verifier writes into a fresh stage, one that read the old one
    /// is resent by its client after the next COMMIT (RFC 1813 §3.3.7). The dead
    /// upload id goes with the stage: nothing uses it again (no abort either: the
    /// store has no such upload).
    ///
    /// `Why::Fenced`: the same for a stage the gate will not let out (past the
    /// identity lease's deadline, or opened in an earlier term). Its streaming upload,
    /// if any, is left unfinished (an abort would be one more request to a store that
    /// may hang; the bucket's lifecycle rule removes it): its object never changes.
    fn lose(&self, key: &str, g: &mut MutexGuard<'_, Option<Stage>>, why: Why) {
        let Some(s) = g.take() else {
            return;
        };
        let upload = s.mp.clone().unwrap_or_default();
        let size = s.size;
        self.release_stage(s);
        self.lost.fetch_add(1, Ordering::AcqRel);
        match why {
            Why::Lost(op) => {
                UPLOADS_LOST.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    key,
                    upload,
                    op,
                    size,
                    "s3: the store lost a multipart upload (NoSuchUpload: aborted by a lifecycle rule or another client); uncommitted writes dropped, write verifier changed (clients resend them)"
                );
            }
            Why::Fenced => {
                gate::count_dropped();
                tracing::warn!(
                    key,
                    upload,
                    size,
                    "ha: staged writes dropped, never uploaded: past the identity lease's deadline; write verifier changed (clients resend them)"
                );
            }
        }
    }

    /// Drops the stage behind `g` when it was opened in an earlier term of the gate.
    fn drop_if_old_term(&self, key: &str, g: &mut MutexGuard<'_, Option<Stage>>) {
        let old = match (self.gate.get(), g.as_ref()) {
            (Some(gt), Some(s)) => s.admitted && gt.term() != s.term,
            _ => false,
        };
        if old {
            self.lose(key, g, Why::Fenced);
        }
    }

    /// Moves [a, b) out of the chunks into one buffer (all of it is written).
    fn take_range(&self, s: &mut Stage, a: u64, b: u64) -> BResult<Bytes> {
        let mut buf = vec![0u8; (b - a) as usize];
        for (idx, c) in s.chunks.range(a / CHUNK..b.div_ceil(CHUNK)) {
            let cbase = idx * CHUNK;
            let (x, y) = (cbase.max(a), (cbase + CHUNK).min(b));
            c.get(
                self.spill.as_ref(),
                (x - cbase) as usize,
                &mut buf[(x - a) as usize..(y - a) as usize],
            )?;
        }
        self.drop_chunks_below(s, b);
        // The part's bytes stay counted (held) until the store has them.
        s.held += buf.len();
        self.used.fetch_add(buf.len(), Ordering::Relaxed);
        Ok(Bytes::from(buf))
    }

    /// Frees chunks wholly below `b` (their bytes now live in a part).
    fn drop_chunks_below(&self, s: &mut Stage, b: u64) {
        let gone: Vec<u64> = s.chunks.range(..b / CHUNK).map(|(k, _)| *k).collect();
        for k in gone {
            if let Some(c) = s.chunks.remove(&k) {
                self.free_chunk(&mut s.held, c);
            }
        }
    }

    /// Gives back everything a finished or dropped stage holds.
    fn release_stage(&self, s: Stage) {
        let mut held = s.held;
        for (_, c) in s.chunks {
            self.free_chunk(&mut held, c);
        }
        // What is left is retained part bytes.
        self.used.fetch_sub(held, Ordering::Relaxed);
    }

    /// Returns a chunk's memory to the budget, or its slot to the spill file.
    fn free_chunk(&self, held: &mut usize, c: Chunk) {
        match c.data {
            Data::Mem(_) => {
                *held -= CHUNK as usize;
                self.used.fetch_sub(CHUNK as usize, Ordering::Relaxed);
            }
            Data::Disk(slot) => {
                if let Some(sp) = &self.spill {
                    sp.release(slot);
                }
            }
        }
    }
}
