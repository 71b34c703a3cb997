//! The audit log's queue and writer thread: workers push formatted lines into a
//! bounded lock-free queue (`crossbeam_queue::ArrayQueue`); one thread appends them to
//! the file, flushes when the queue runs dry and rotates the file by size
//! (`audit.log` → `audit.log.1` → … `audit.log.<keep>`, the oldest deleted).
//!
//! Drops are logged where they happen, by the worker whose line did not fit (at most
//! once per `COMPLAIN_EVERY`): the writer may be the reason the queue is full, stuck
//! in a write to a log that does not drain (a FIFO nobody reads, a hung NFS mount),
//! and could not say so.

use super::ON;
use crate::config::AuditConfig;
use crossbeam_queue::ArrayQueue;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long the writer sleeps when the queue is empty (a line waits at most this long).
const IDLE: Duration = Duration::from_millis(20);
/// Drops and write errors are logged at most this often.
const COMPLAIN_EVERY: Duration = Duration::from_secs(10);

struct Sink {
    queue: ArrayQueue<String>,
    /// Where and how to write; changed by a reload (`configure`), read by the writer.
    settings: Mutex<Settings>,
    /// Bumped by `configure`: the writer reopens the file.
    generation: AtomicU64,
    lines: AtomicU64,
    dropped: AtomicU64,
    /// When the next drop may be logged, in milliseconds since `born`.
    next_drop_warning: AtomicU64,
    born: Instant,
}

#[derive(Clone, PartialEq, Eq)]
struct Settings {
    path: PathBuf,
    max_bytes: u64,
    keep: u32,
}

static SINK: OnceLock<Sink> = OnceLock::new();

/// Applies `[audit]` at start and at each reload: turns the log on or off, and moves
/// or resizes it. The queue's size is fixed by the first configuration that turns the
/// log on (a later change of `queue` needs a restart; `crate::reload` says so).
pub fn configure(cfg: &AuditConfig, state_dir: &Path) -> std::io::Result<()> {
    if !cfg.enabled {
        ON.store(false, Ordering::Relaxed);
        return Ok(());
    }
    let settings = Settings {
        path: cfg.file(state_dir),
        max_bytes: cfg.max_mib.saturating_mul(1 << 20),
        keep: cfg.keep,
    };
    // Fail here, where the operator sees it, rather than in the writer thread.
    open(&settings.path)?;
    let sink = match SINK.get() {
        Some(s) => s,
        None => {
            let s = SINK.get_or_init(|| Sink {
                queue: ArrayQueue::new(cfg.queue),
                settings: Mutex::new(settings.clone()),
                generation: AtomicU64::new(0),
                lines: AtomicU64::new(0),
                dropped: AtomicU64::new(0),
                next_drop_warning: AtomicU64::new(0),
                born: Instant::now(),
            });
            std::thread::Builder::new()
                .name("audit".into())
                .spawn(move || writer(s))?;
            s
        }
    };
    let mut cur = sink.settings.lock().unwrap_or_else(|p| p.into_inner());
    if *cur != settings {
        *cur = settings;
        sink.generation.fetch_add(1, Ordering::Release);
    }
    drop(cur);
    ON.store(true, Ordering::Relaxed);
    Ok(())
}

/// Queues one line; a full queue drops it, counts the drop and says so (rate-limited).
pub(super) fn push(line: String) {
    let Some(s) = SINK.get() else { return };
    if s.queue.push(line).is_err() {
        let total = s.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        s.complain_of_drops(total);
    }
}

impl Sink {
    /// Logs a drop unless one was logged less than `COMPLAIN_EVERY` ago; of the
    /// workers dropping at once, the one that wins the exchange logs.
    fn complain_of_drops(&self, total: u64) {
        let now = self.born.elapsed().as_millis() as u64;
        let next = self.next_drop_warning.load(Ordering::Relaxed);
        let later = now + COMPLAIN_EVERY.as_millis() as u64;
        if now < next
            || self
                .next_drop_warning
                .compare_exchange(next, later, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        tracing::warn!(
            dropped_total = total,
            "audit: queue full, lines dropped: the writer is behind (a slow or stalled \
             log: raise audit.queue, or put audit.path on a faster disk)"
        );
    }
}

/// Lines written and lines dropped (`nfsgw_audit_lines_total`, `nfsgw_audit_dropped_total`).
pub fn totals() -> (u64, u64) {
    SINK.get().map_or((0, 0), |s| {
        (
            s.lines.load(Ordering::Relaxed),
            s.dropped.load(Ordering::Relaxed),
        )
    })
}

/// Waits until every queued line is written (at shutdown; at most `limit`).
pub fn flush(limit: Duration) {
    let Some(s) = SINK.get() else { return };
    let end = Instant::now() + limit;
    // The writer flushes its buffer when it finds the queue empty; one more idle
    // period after that makes sure it did.
    while !s.queue.is_empty() && Instant::now() < end {
        std::thread::sleep(IDLE);
    }
    std::thread::sleep(IDLE * 2);
}

fn open(path: &Path) -> std::io::Result<File> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    OpenOptions::new().create(true).append(true).open(path)
}

/// The open log file and how many bytes it holds.
struct Out {
    file: BufWriter<File>,
    size: u64,
    /// Lines in `file`'s buffer: counted written once a flush succeeds, dropped if it fails.
    pending: u64,
    generation: u64,
    settings: Settings,
}

impl Out {
    fn open(s: &Sink) -> std::io::Result<Out> {
        let generation = s.generation.load(Ordering::Acquire);
        let settings = s.settings.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let file = open(&settings.path)?;
        let size = file.metadata()?.len();
        Ok(Out {
            file: BufWriter::new(file),
            size,
            pending: 0,
            generation,
            settings,
        })
    }

    fn write(&mut self, line: &str) -> std::io::Result<()> {
        let n = line.len() as u64;
        if self.size > 0 && self.size.saturating_add(n) > self.settings.max_bytes {
            self.rotate()?;
        }
        self.file.write_all(line.as_bytes())?;
        self.size += n;
        self.pending += 1;
        Ok(())
    }

    /// Flushes the buffer; the lines in it are written (Ok) or lost (Err): `s` counts them.
    fn flush(&mut self, s: &Sink) -> std::io::Result<()> {
        let n = std::mem::take(&mut self.pending);
        let r = self.file.flush();
        let counter = if r.is_ok() { &s.lines } else { &s.dropped };
        counter.fetch_add(n, Ordering::Relaxed);
        r
    }

    /// `path` → `path.1`, `path.1` → `path.2`, …; `path.<keep>` is overwritten.
    fn rotate(&mut self) -> std::io::Result<()> {
        // Lines already buffered belong to the old file (counted by the next `flush`).
        self.file.flush()?;
        let p = &self.settings.path;
        let numbered = |i: u32| {
            let mut s = p.clone().into_os_string();
            s.push(format!(".{i}"));
            PathBuf::from(s)
        };
        for i in (1..self.settings.keep).rev() {
            let _ = std::fs::rename(numbered(i), numbered(i + 1));
        }
        if self.settings.keep == 0 {
            std::fs::remove_file(p)?;
        } else {
            std::fs::rename(p, numbered(1))?;
        }
        self.file = BufWriter::new(open(p)?);
        self.size = 0;
        Ok(())
    }
}

/// The writer thread: drains the queue, flushes when it is empty, reopens after a
/// reload, and logs (rate-limited) write errors.
fn writer(s: &'static Sink) {
    let mut out: Option<Out> = None;
    let mut complained = Instant::now() - COMPLAIN_EVERY;
    loop {
        if out
            .as_ref()
            .is_some_and(|o| o.generation != s.generation.load(Ordering::Acquire))
        {
            let _ = out.take().map(|mut o| o.flush(s));
        }
        let Some(line) = s.queue.pop() else {
            if let Some(e) = out.as_mut().and_then(|o| o.flush(s).err()) {
                out = None;
                if complained.elapsed() >= COMPLAIN_EVERY {
                    tracing::error!(
                        "audit: cannot write the log: {e}; lines are dropped until it can"
                    );
                    complained = Instant::now();
                }
            }
            std::thread::sleep(IDLE);
            continue;
        };
        let res = match out.as_mut() {
            Some(o) => o.write(&line),
            None => Out::open(s).and_then(|mut o| {
                let r = o.write(&line);
                out = Some(o);
                r
            }),
        };
        match res {
            Ok(()) => {}
            Err(e) => {
                // This line, and those still buffered, are lost.
                let buffered = out.take().map_or(0, |o| o.pending);
                s.dropped.fetch_add(1 + buffered, Ordering::Relaxed);
                if complained.elapsed() >= COMPLAIN_EVERY {
                    tracing::error!(
                        "audit: cannot write the log: {e}; lines are dropped until it can"
                    );
                    complained = Instant::now();
                }
            }
        }
    }
}
