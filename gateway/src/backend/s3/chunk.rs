//! The memory of a write-back stage (`stage.rs`): 1 MiB chunks with their written
//! ranges, in memory or, past the budget, in slots of an unlinked spill file.

use super::super::{BResult, BackendError};
use super::stage::CHUNK;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where chunks go once the memory budget is used up, when a spill directory is
/// configured: one unlinked file (gone with the process; staged data is UNSTABLE
/// anyway) holding CHUNK-sized slots.
pub(crate) struct Spill {
    file: std::fs::File,
    free: Mutex<Vec<u64>>,
    slots: AtomicUsize,
}

impl Spill {
    /// Creates the spill file in `dir` and unlinks it at once.
    pub fn open(dir: &std::path::Path) -> std::io::Result<Spill> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("nfsgw-spill-{}.tmp", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
        std::fs::remove_file(&path)?;
        Ok(Spill {
            file,
            free: Mutex::new(Vec::new()),
            slots: AtomicUsize::new(0),
        })
    }

    pub(super) fn alloc(&self) -> u64 {
        lock(&self.free)
            .pop()
            .unwrap_or_else(|| self.slots.fetch_add(1, Ordering::Relaxed) as u64)
    }

    pub(super) fn release(&self, slot: u64) {
        lock(&self.free).push(slot);
    }
}

pub(super) enum Data {
    Mem(Box<[u8]>),
    /// A slot of the spill file.
    Disk(u64),
}

pub(super) struct Chunk {
    pub(super) data: Data,
    /// Written byte ranges within the chunk, sorted, disjoint, non-adjacent.
    pub(super) written: Vec<(u32, u32)>,
}

fn io_err(e: std::io::Error) -> BackendError {
    if e.raw_os_error() == Some(libc::ENOSPC) {
        BackendError::NoSpace
    } else {
        BackendError::Permanent(format!("spill file: {e}"))
    }
}

impl Chunk {
    pub(super) fn new() -> Chunk {
        Chunk {
            data: Data::Mem(vec![0u8; CHUNK as usize].into_boxed_slice()),
            written: Vec::new(),
        }
    }

    pub(super) fn on_disk(slot: u64) -> Chunk {
        Chunk {
            data: Data::Disk(slot),
            written: Vec::new(),
        }
    }

    pub(super) fn put(&mut self, spill: Option<&Spill>, at: usize, src: &[u8]) -> BResult<()> {
        use std::os::unix::fs::FileExt;
        match (&mut self.data, spill) {
            (Data::Mem(d), _) => d[at..at + src.len()].copy_from_slice(src),
            (Data::Disk(slot), Some(sp)) => sp
                .file
                .write_all_at(src, *slot * CHUNK + at as u64)
                .map_err(io_err)?,
            (Data::Disk(_), None) => unreachable!("disk chunks only with a spill file"),
        }
        Ok(())
    }

    pub(super) fn get(&self, spill: Option<&Spill>, at: usize, dst: &mut [u8]) -> BResult<()> {
        use std::os::unix::fs::FileExt;
        match (&self.data, spill) {
            (Data::Mem(d), _) => dst.copy_from_slice(&d[at..at + dst.len()]),
            (Data::Disk(slot), Some(sp)) => sp
                .file
                .read_exact_at(dst, *slot * CHUNK + at as u64)
                .map_err(io_err)?,
            (Data::Disk(_), None) => unreachable!("disk chunks only with a spill file"),
        }
        Ok(())
    }

    pub(super) fn mark(&mut self, a: u32, b: u32) {
        let (mut a, mut b) = (a, b);
        self.written.retain(|&(x, y)| {
            if y < a || x > b {
                true
            } else {
                a = a.min(x);
                b = b.max(y);
                false
            }
        });
        let at = self.written.partition_point(|&(x, _)| x < a);
        self.written.insert(at, (a, b));
    }

    /// End of the written run that contains `from` (or `from` if none does).
    pub(super) fn run_end(&self, from: u32) -> u32 {
        self.written
            .iter()
            .find(|&&(x, y)| x <= from && from < y)
            .map_or(from, |&(_, y)| y)
    }
}
