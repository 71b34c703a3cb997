//! Delimiter listings of one real directory, a page at a time.
//!
//! A directory's entries come from `readdir` in the file system's own order, while a
//! listing is in key order from `start_after`. A page therefore reads the whole
//! directory once, but keeps only the `max` smallest keys after `start_after` (a
//! bounded max-heap; a name is allocated only when it enters the heap), and reads
//! metadata for those alone. Time per page is one pass over the directory, memory is
//! O(`max`): a directory of a million entries pages with the memory of one page.

use super::*;
use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;

/// Calls `f` with each listable entry of the open directory `dir`: (name, is_dir),
/// regular files and directories only, "." and "..", temp files and non-UTF-8 names
/// skipped. The directory is read through a stream of its own ([`sys::Dir`]), never
/// through a dup of `dir`: a dup shares the offset, and concurrent listings of one
/// directory would lose entries.
pub(super) fn each_entry(dir: BorrowedFd<'_>, mut f: impl FnMut(&str, bool)) -> io::Result<()> {
    let mut stream = sys::Dir::open(dir)?;
    stream.each(|name, kind| {
        if name == b"." || name == b".." {
            return;
        }
        let Ok(s) = std::str::from_utf8(name) else {
            return;
        };
        if s.starts_with(TEMP_PREFIX) {
            return;
        }
        let d = match kind {
            libc::DT_DIR => true,
            libc::DT_REG => false,
            libc::DT_UNKNOWN => {
                let Ok(c) = CString::new(name) else { return };
                match lstatat(dir, &c) {
                    Ok(st) if is_dir(&st) => true,
                    Ok(st) if is_reg(&st) => false,
                    _ => return,
                }
            }
            _ => return,
        };
        f(s, d);
    })
}

/// Orders the key `dir_key + name (+ "/" for a directory)` against `s`, without
/// building the key.
pub(super) fn cmp_key(dir_key: &str, name: &str, is_dir: bool, s: &str) -> CmpOrdering {
    let slash: &[u8] = if is_dir { b"/" } else { b"" };
    let mut rest = s.as_bytes();
    for part in [dir_key.as_bytes(), name.as_bytes(), slash] {
        let n = part.len().min(rest.len());
        match part[..n].cmp(&rest[..n]) {
            CmpOrdering::Equal => {}
            o => return o,
        }
        if n < part.len() {
            return CmpOrdering::Greater;
        }
        rest = &rest[n..];
    }
    if rest.is_empty() {
        CmpOrdering::Equal
    } else {
        CmpOrdering::Less
    }
}

/// The `cap` smallest keys offered, as (key, is_dir).
pub(super) struct Smallest {
    cap: usize,
    heap: BinaryHeap<(String, bool)>,
    /// More keys were offered than kept.
    pub(super) more: bool,
}

impl Smallest {
    pub(super) fn new(cap: usize) -> Smallest {
        Smallest {
            cap,
            heap: BinaryHeap::new(),
            more: false,
        }
    }

    pub(super) fn offer(&mut self, dir_key: &str, name: &str, is_dir: bool) {
        let key = |d: &str| {
            let mut k = String::with_capacity(d.len() + name.len() + 1);
            k.push_str(d);
            k.push_str(name);
            if is_dir {
                k.push('/');
            }
            k
        };
        if self.heap.len() < self.cap {
            self.heap.push((key(dir_key), is_dir));
            return;
        }
        self.more = true;
        let Some(top) = self.heap.peek() else {
            return;
        };
        if cmp_key(dir_key, name, is_dir, &top.0) == CmpOrdering::Less {
            self.heap.pop();
            self.heap.push((key(dir_key), is_dir));
        }
    }

    /// The kept keys in key order.
    pub(super) fn into_sorted(self) -> Vec<(String, bool)> {
        self.heap.into_sorted_vec()
    }
}

impl FsBackend {
    /// One page of a delimiter listing of the open directory `dir` (key `dir_key`):
    /// sub-directories as prefixes, files with their metadata, `max` items at most
    /// in key order after `start_after`, appended to `out`. Returns the key to pass as
    /// `start_after` for the next page, `None` when nothing follows.
    pub(super) fn visit_rolled(
        &self,
        dir: BorrowedFd<'_>,
        dir_key: &str,
        name_prefix: &str,
        start_after: Option<&str>,
        max: usize,
        out: &mut Vec<Item>,
    ) -> BResult<Option<String>> {
        let room = max.saturating_sub(out.len());
        // One more than fits: whether anything follows the page.
        let mut sel = Smallest::new(room + 1);
        each_entry(dir, |name, d| {
            if !name.starts_with(name_prefix) {
                return;
            }
            if start_after.is_some_and(|s| cmp_key(dir_key, name, d, s) != CmpOrdering::Greater) {
                return;
            }
            sel.offer(dir_key, name, d);
        })
        .map_err(|e| map_io(e, "readdir", dir_key))?;
        let mut keys = sel.into_sorted();
        let more = keys.len() > room;
        keys.truncate(room);
        // The resume point is the last key looked at, listed or not (an object that
        // vanished since the readdir is skipped, not the end of the listing).
        let next = if more {
            keys.last()
                .map(|(k, _)| k.clone())
                .or_else(|| out.last().map(|i| i.key().to_string()))
        } else {
            None
        };
        for (key, d) in keys {
            if d {
                out.push(Item::Prefix(key));
                continue;
            }
            // Through the open-object cache: a file looked up before costs one fstat.
            match self.head(&key) {
                Ok(m) => out.push(Item::Obj(m)),
                Err(BackendError::NotFound) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(next)
    }
}
