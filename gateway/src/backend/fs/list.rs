//! Delimiter listings of one real directory, a page at a time.
//!
//! A directory's entries come from `readdir` in the file system's own order, while a
//! listing is in key order from `start_after`. A scan therefore reads the whole
//! directory once, but keeps only the smallest keys after `start_after` (a bounded
//! max-heap; a name is allocated only when it enters the heap), and reads metadata
//! for the page's alone.
//!
//! Windows: a scan keeps up to [`WINDOW_NAMES`] of those keys (a directory's *window*:
//! its smallest keys after the scan's `start_after`, in order), so the pages that
//! follow — any `start_after` inside the window, from any client — are cut from it
//! without reading the directory again: a page costs O(page), and a directory of N
//! entries is read N / [`WINDOW_NAMES`] + 1 times per listing instead of once per
//! page. Windows are bounded in all ([`WINDOWS_NAMES`], oldest use evicted first).
//! A window is dropped by every change the gateway makes in its directory
//! (`ObjCache::invalidate`, which every put, delete and rename goes through), and is
//! used only while the directory's (dev, ino, mtime, ctime) are those read before
//! its scan, which any change by another tool moves; a scan of a directory changed
//! less than [`SETTLE`] ago keeps no window (a change in the same clock tick as the
//! scan might not move the times). So a window never hides a change a rescan would
//! show.

use super::*;
use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::sync::atomic::AtomicUsize;

/// Keys a directory's window holds at most.
pub(super) const WINDOW_NAMES: usize = 16_384;
/// Keys all windows hold at most (about 64 bytes each).
const WINDOWS_NAMES: usize = 131_072;
/// How long a directory must have been unchanged for a scan to keep a window: longer
/// than the file system's timestamp tick (the coarse clock, a few milliseconds).
const SETTLE: Duration = Duration::from_millis(50);

/// What a directory's stat says about its entries: any change moves one of these.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(super) struct Stamp {
    dev: u64,
    ino: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    pub(super) fn of(st: &libc::stat) -> Stamp {
        Stamp {
            dev: st.st_dev,
            ino: st.st_ino,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: ctime_of(st),
        }
    }

    /// Unchanged for at least SETTLE (a clock before 1970 or in the future: no).
    fn settled(&self) -> bool {
        let newest = self.mtime.max(self.ctime);
        let Ok(secs) = u64::try_from(newest.0) else {
            return false;
        };
        let t = std::time::UNIX_EPOCH
            + Duration::from_secs(secs)
            + Duration::from_nanos(newest.1.clamp(0, 999_999_999) as u64);
        std::time::SystemTime::now()
            .duration_since(t)
            .is_ok_and(|d| d >= SETTLE)
    }
}

/// A directory's window: the smallest keys after `from`, in order.
struct Window {
    stamp: Stamp,
    from: Option<String>,
    keys: Vec<(String, bool)>,
    /// No key follows the last one.
    complete: bool,
    used: u64,
}

impl Window {
    /// The `room` keys after `after` and whether more follow, when the window holds
    /// them all.
    fn page(&self, after: Option<&str>, room: usize) -> Option<(Vec<(String, bool)>, bool)> {
        if let Some(from) = &self.from {
            if after.is_none_or(|a| a < from.as_str()) {
                return None;
            }
        }
        let i = after.map_or(0, |a| self.keys.partition_point(|(k, _)| k.as_str() <= a));
        let end = i.saturating_add(room);
        if end < self.keys.len() {
            return Some((self.keys[i..end].to_vec(), true));
        }
        self.complete
            .then(|| (self.keys[i.min(self.keys.len())..].to_vec(), false))
    }
}

/// The windows of recently listed directories, by directory key. Shared by the
/// workers (and uploads, through `ObjCache`); the lock is held for map work only.
#[derive(Default)]
pub(super) struct Windows {
    state: Mutex<WinState>,
    /// Windows held: lets a change skip the lock when there are none.
    count: AtomicUsize,
}

#[derive(Default)]
struct WinState {
    dirs: HashMap<String, Window>,
    keys: usize,
    clock: u64,
}

impl Windows {
    fn page(
        &self,
        dir_key: &str,
        stamp: Stamp,
        after: Option<&str>,
        room: usize,
    ) -> Option<(Vec<(String, bool)>, bool)> {
        if self.count.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut s = lock(&self.state);
        s.clock += 1;
        let clock = s.clock;
        let w = s.dirs.get_mut(dir_key)?;
        if w.stamp != stamp {
            self.drop_locked(&mut s, dir_key);
            return None;
        }
        w.used = clock;
        w.page(after, room)
    }

    fn keep(&self, dir_key: &str, w: Window) {
        if w.keys.len() > WINDOW_NAMES {
            return;
        }
        let mut s = lock(&self.state);
        self.drop_locked(&mut s, dir_key);
        while s.keys + w.keys.len() > WINDOWS_NAMES {
            let Some(old) = s
                .dirs
                .iter()
                .min_by_key(|(_, w)| w.used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            self.drop_locked(&mut s, &old);
        }
        s.clock += 1;
        let w = Window { used: s.clock, ..w };
        s.keys += w.keys.len();
        s.dirs.insert(dir_key.to_string(), w);
        self.count.store(s.dirs.len(), Ordering::Release);
    }

    fn drop_locked(&self, s: &mut WinState, dir_key: &str) {
        if let Some(w) = s.dirs.remove(dir_key) {
            s.keys -= w.keys.len();
            self.count.store(s.dirs.len(), Ordering::Release);
        }
    }

    /// Drops the window of directory `dir_key` (its entries changed).
    pub(super) fn invalidate(&self, dir_key: &str) {
        if self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut s = lock(&self.state);
        self.drop_locked(&mut s, dir_key);
    }

    /// Drops the windows of every directory under `prefix` (itself included).
    pub(super) fn invalidate_prefix(&self, prefix: &str) {
        if self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut s = lock(&self.state);
        let gone: Vec<String> = s
            .dirs
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect();
        for k in gone {
            self.drop_locked(&mut s, &k);
        }
    }
}

/// The key of the directory holding `key` ("" for a top-level key).
pub(super) fn dir_of(key: &str) -> &str {
    let body = key.strip_suffix('/').unwrap_or(key);
    body.rfind('/').map_or("", |i| &key[..=i])
}

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

    /// The kept keys in key order, and whether more were offered.
    pub(super) fn into_sorted(self) -> (Vec<(String, bool)>, bool) {
        (self.heap.into_sorted_vec(), self.more)
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
        let (keys, more) = self.rolled_keys(dir, dir_key, name_prefix, start_after, room)?;
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

    /// The `room` smallest keys after `start_after` in the open directory `dir`, and
    /// whether more follow: from the directory's window when it holds them (module
    /// docs), else from a scan, which keeps a window for the pages that follow.
    fn rolled_keys(
        &self,
        dir: BorrowedFd<'_>,
        dir_key: &str,
        name_prefix: &str,
        start_after: Option<&str>,
        room: usize,
    ) -> BResult<(Vec<(String, bool)>, bool)> {
        let windows = &self.cache.windows;
        let stamp = if name_prefix.is_empty() {
            let st = fstat(dir).map_err(|e| map_io(e, "stat", dir_key))?;
            Some(Stamp::of(&st))
        } else {
            None
        };
        // Judged before the scan: a change after this stat moves the times past it.
        let settled = stamp.is_some_and(|s| s.settled());
        if let Some(stamp) = stamp {
            if let Some(page) = windows.page(dir_key, stamp, start_after, room) {
                return Ok(page);
            }
        }
        self.dir_scans.fetch_add(1, Ordering::Relaxed);
        // One more than fits: whether anything follows the page.
        let cap = if stamp.is_some() {
            (room + 1).max(WINDOW_NAMES)
        } else {
            room + 1
        };
        let mut sel = Smallest::new(cap);
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
        let (keys, more) = sel.into_sorted();
        let w = Window {
            stamp: stamp.unwrap_or(Stamp {
                dev: 0,
                ino: 0,
                mtime: (0, 0),
                ctime: (0, 0),
            }),
            from: start_after.map(str::to_string),
            keys,
            complete: !more,
            used: 0,
        };
        let page = w.page(start_after, room).unwrap_or_default();
        if settled && w.keys.len() > page.0.len() {
            windows.keep(dir_key, w);
        }
        Ok(page)
    }
}
