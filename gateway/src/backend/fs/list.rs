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
/// Entries left in a directory below which a listing's files enter the open-object
/// cache (a quarter of it): small directories listed again and again stay cached.
const FEW: usize = CACHE_MAX / 4;
/// Keys all windows hold at most (their length plus 4 bytes each).
const WINDOWS_NAMES: usize = 131_072;
/// How long a directory must have been unchanged for a scan to keep a window: longer
/// than the file system's timestamp tick (the coarse clock, a few milliseconds). Also
/// how old a file's ctime must be for metadata read under it to stay current while
/// the ctime does (`settled_ctime`).
const SETTLE: Duration = Duration::from_millis(50);

/// Whether `ctime` (seconds, nanoseconds) is at least SETTLE old now: a change made
/// from now on gets a later ctime, whatever the timestamp tick (a clock before 1970
/// or in the future: no).
pub(super) fn settled_ctime(ctime: (i64, i64)) -> bool {
    let Ok(secs) = u64::try_from(ctime.0) else {
        return false;
    };
    let t = std::time::UNIX_EPOCH
        + Duration::from_secs(secs)
        + Duration::from_nanos(ctime.1.clamp(0, 999_999_999) as u64);
    std::time::SystemTime::now()
        .duration_since(t)
        .is_ok_and(|d| d >= SETTLE)
}

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
        settled_ctime(self.mtime.max(self.ctime))
    }
}

/// A directory's window: the smallest keys after `from`, in order. Held in three
/// allocations, not one per key: a window outlives the scan's and the pages'
/// short-lived blocks, and one block per key among them would leave the allocator
/// arenas holes it keeps (RSS growing with the directories listed).
struct Window {
    stamp: Stamp,
    from: Option<String>,
    /// Each key without the directory's key ("name", or "name/" for a directory),
    /// back to back.
    names: String,
    /// Where each key ends in `names`.
    ends: Vec<u32>,
    /// No key follows the last one.
    complete: bool,
    used: u64,
}

impl Window {
    /// A window of `keys` (all under `dir_key`, in order); `None` past 4 GiB of names.
    fn new(
        dir_key: &str,
        stamp: Stamp,
        from: Option<&str>,
        keys: &[(String, bool)],
        complete: bool,
    ) -> Option<Window> {
        let mut names = String::with_capacity(
            keys.iter()
                .map(|(k, _)| k.len().saturating_sub(dir_key.len()))
                .sum(),
        );
        let mut ends = Vec::with_capacity(keys.len());
        for (k, _) in keys {
            names.push_str(k.strip_prefix(dir_key)?);
            ends.push(u32::try_from(names.len()).ok()?);
        }
        Some(Window {
            stamp,
            from: from.map(str::to_string),
            names,
            ends,
            complete,
            used: 0,
        })
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    /// Key `i` without the directory's key.
    fn suffix(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.names[start..self.ends[i] as usize]
    }

    /// The `room` keys after `after` and whether more follow, when the window holds
    /// them all.
    fn page(&self, dir_key: &str, after: Option<&str>, room: usize) -> Option<Rolled> {
        if let Some(from) = &self.from {
            if after.is_none_or(|a| a < from.as_str()) {
                return None;
            }
        }
        let n = self.len();
        let i = after.map_or(0, |a| {
            partition(n, |j| {
                cmp_key(dir_key, self.suffix(j), false, a) != CmpOrdering::Greater
            })
        });
        let end = i.saturating_add(room);
        let take = |to: usize| -> Vec<(String, bool)> {
            (i.min(to)..to)
                .map(|j| {
                    let s = self.suffix(j);
                    (format!("{dir_key}{s}"), s.ends_with('/'))
                })
                .collect()
        };
        let few = self.complete && n - i.min(n) <= FEW;
        if end < n {
            return Some(Rolled {
                keys: take(end),
                more: true,
                few,
            });
        }
        self.complete.then(|| Rolled {
            keys: take(n),
            more: false,
            few,
        })
    }
}

/// A page of keys: (key, is_dir) in order, whether more follow, and whether the
/// directory holds at most [`FEW`] keys from the page's start on.
#[derive(Default)]
struct Rolled {
    keys: Vec<(String, bool)>,
    more: bool,
    few: bool,
}

/// The first index in `0..n` where `before` turns false (`before` holds for a prefix).
fn partition(n: usize, before: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if before(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
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
    ) -> Option<Rolled> {
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
        w.page(dir_key, after, room)
    }

    /// Calls `f` with every name of the window of `dir_key` when it is current under
    /// `stamp` and holds the whole directory (scanned from its start, nothing after
    /// its last key): true; else false, having called `f` for nothing.
    fn each_name(&self, dir_key: &str, stamp: Stamp, f: &mut dyn FnMut(&str, bool)) -> bool {
        if self.count.load(Ordering::Acquire) == 0 {
            return false;
        }
        let s = lock(&self.state);
        let Some(w) = s.dirs.get(dir_key) else {
            return false;
        };
        if w.stamp != stamp || w.from.is_some() || !w.complete {
            return false;
        }
        for i in 0..w.len() {
            let k = w.suffix(i);
            match k.strip_suffix('/') {
                Some(name) => f(name, true),
                None => f(k, false),
            }
        }
        true
    }

    fn keep(&self, dir_key: &str, w: Window) {
        if w.len() > WINDOW_NAMES {
            return;
        }
        let mut s = lock(&self.state);
        self.drop_locked(&mut s, dir_key);
        while s.keys + w.len() > WINDOWS_NAMES {
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
        s.keys += w.len();
        s.dirs.insert(dir_key.to_string(), w);
        self.count.store(s.dirs.len(), Ordering::Release);
    }

    fn drop_locked(&self, s: &mut WinState, dir_key: &str) {
        if let Some(w) = s.dirs.remove(dir_key) {
            s.keys -= w.len();
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

/// The first `room` of a scan's sorted `keys` (all after its `start_after`;
/// `more`: the scan saw more than it kept).
fn first_page(keys: &[(String, bool)], room: usize, more: bool) -> Rolled {
    let end = room.min(keys.len());
    Rolled {
        keys: keys[..end].to_vec(),
        more: end < keys.len() || more,
        few: !more && keys.len() <= FEW,
    }
}

impl FsBackend {
    /// `Backend::each_dir_name`: the names of directory `dkey` from its window, when
    /// the directory's stat, taken now, is the one the window was scanned under (a
    /// window is kept only of a directory unchanged for [`SETTLE`] before its scan,
    /// so any change since moved the times) and the window holds all of it. `None`
    /// when there is no such window (nothing called).
    pub(super) fn window_names(
        &self,
        dkey: &str,
        f: &mut dyn FnMut(&str, bool),
    ) -> BResult<Option<()>> {
        if !dkey.is_empty() {
            if !dkey.ends_with('/') {
                return Ok(None);
            }
            check_key(dkey)?;
        }
        if self.cache.windows.count.load(Ordering::Acquire) == 0 {
            return Ok(None);
        }
        let comps: Vec<&str> = dkey.split('/').filter(|c| !c.is_empty()).collect();
        let dir = self.walk(&comps, false, dkey)?;
        let st = fstat(self.at(&dir)).map_err(|e| map_io(e, "stat", dkey))?;
        Ok(self
            .cache
            .windows
            .each_name(dkey, Stamp::of(&st), f)
            .then_some(()))
    }

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
        let Rolled { keys, more, few } =
            self.rolled_keys(dir, dir_key, name_prefix, start_after, room)?;
        // The resume point is the last key looked at, listed or not (an object that
        // vanished since the readdir is skipped, not the end of the listing).
        let next = if more {
            keys.last()
                .map(|(k, _)| k.clone())
                .or_else(|| out.last().map(|i| i.key().to_string()))
        } else {
            None
        };
        // The files' metadata, read on idle cores too (`fanout`), each at its index.
        let files = keys.iter().filter(|(_, d)| !d).map(|(k, _)| k);
        let heads: Vec<BResult<ObjectMeta>> = if self.fanout.worth(files.clone().count()) {
            let files: Vec<String> = files.cloned().collect();
            let (me, owned_dir, dk) = (
                self.handle(),
                dir.try_clone_to_owned()
                    .map_err(|e| map_io(e, "dup", dir_key))?,
                dir_key.to_string(),
            );
            self.fanout.map(files.len(), move |i| {
                me.listed_head(owned_dir.as_fd(), &dk, &files[i], few)
            })
        } else {
            files
                .map(|k| self.listed_head(dir, dir_key, k, few))
                .collect()
        };
        let mut heads = heads.into_iter();
        for (key, d) in keys {
            if d {
                out.push(Item::Prefix(key));
                continue;
            }
            match heads.next().expect("one read per file") {
                Ok(m) => out.push(Item::Obj(m)),
                Err(BackendError::NotFound) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(next)
    }

    /// The metadata of listed file `key` in the open directory `dir`, through the
    /// open-object cache when it holds the file: one fstat while the entry is fresh;
    /// past REVALIDATE, one fstatat of the name in `dir` (which the listing walked
    /// just now: the key's path, without walking it again) and no metadata read
    /// while the ctime is the settled one it was read under (`FsBackend::refresh`).
    /// Else opened in `dir`: entered in the cache when the directory has `few`
    /// entries left to list, otherwise read through a descriptor of its own, closed
    /// at once. A listing of a big directory meets each file once: entering them all
    /// would evict the cache's hot files (files being written, a small directory
    /// listed again and again) for entries no one asks for again, and churn memory.
    fn listed_head(
        &self,
        dir: BorrowedFd<'_>,
        dir_key: &str,
        key: &str,
        few: bool,
    ) -> BResult<ObjectMeta> {
        let name = cstr(&key[dir_key.len()..])?;
        if let Some(e) = self.cache.get(key) {
            if e.validated.elapsed() < REVALIDATE {
                // The entry in hand, not `head`'s second look-up of the key.
                match self.stat_fresh(key, e)? {
                    Some((e, st)) => return Ok(object_meta(key, &st, (*e.user).clone())),
                    None => return self.listed_open(dir, key, &name, few),
                }
            }
            match lstatat(dir, &name) {
                Ok(st) if st.st_dev == e.dev && st.st_ino == e.ino && is_reg(&st) => {
                    let e = self.refresh(key, e, &st, Some(Instant::now()))?;
                    return Ok(object_meta(key, &st, (*e.user).clone()));
                }
                // Another inode at the name now, or none: open what is there.
                _ => self.cache.remove_if(key, &e.file),
            }
        }
        self.listed_open(dir, key, &name, few)
    }

    /// `listed_head` of a file the cache does not hold (any more): opened in `dir`.
    fn listed_open(
        &self,
        dir: BorrowedFd<'_>,
        key: &str,
        name: &std::ffi::CStr,
        few: bool,
    ) -> BResult<ObjectMeta> {
        let epoch = self.cache.epoch();
        let fd = openat(dir, name, libc::O_RDONLY | libc::O_NONBLOCK, 0).map_err(|e| {
            match e.raw_os_error() {
                Some(libc::EISDIR) => BackendError::NotFound,
                _ => map_io(e, "open", key),
            }
        })?;
        let st = fstat(fd.as_fd()).map_err(|e| map_io(e, "stat", key))?;
        if !is_reg(&st) {
            return Err(BackendError::NotFound);
        }
        // Judged before the read (`Entry::settled`).
        let settled = settled_ctime(ctime_of(&st));
        let user = self.read_meta(fd.as_fd(), key)?;
        if few {
            let e = Entry {
                file: Arc::new(File::from(fd)),
                dir: false,
                writable: false,
                dev: st.st_dev,
                ino: st.st_ino,
                ctime: ctime_of(&st),
                settled,
                user: Arc::new(user.clone()),
                validated: Instant::now(),
            };
            self.cache.insert(key, e, epoch);
        }
        Ok(object_meta(key, &st, user))
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
    ) -> BResult<Rolled> {
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
        let page = first_page(&keys, room, more);
        if let (Some(stamp), true) = (stamp, settled && keys.len() > page.keys.len()) {
            if let Some(w) = Window::new(dir_key, stamp, start_after, &keys, !more) {
                windows.keep(dir_key, w);
            }
        }
        Ok(page)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(b: &FsBackend, dir: &str, page: usize) -> Vec<String> {
        let (mut after, mut out) = (None, Vec::new());
        loop {
            let p = b.list(dir, Some('/'), after.as_deref(), page).unwrap();
            // The files; the directory's own marker leads the first page, as in S3.
            out.extend(
                p.objects
                    .into_iter()
                    .map(|o| o.key)
                    .filter(|k| !k.ends_with('/')),
            );
            match p.next {
                Some(n) => after = Some(n),
                None => return out,
            }
        }
    }

    fn cached_under(b: &FsBackend, dir: &str) -> usize {
        b.cache
            .shards
            .iter()
            .map(|s| {
                let m = lock(s);
                m.keys()
                    .filter(|k| k.len() > dir.len() && k.starts_with(dir))
                    .count()
            })
            .sum()
    }

    /// A big directory's listing leaves the open-object cache alone but for its last
    /// `FEW` files; a small directory's enters it, so listing it again reads no
    /// metadata.
    /// `Backend::each_dir_name`: the names of a directory whose first page was
    /// listed (its window), in key order with their kinds, while no change moved
    /// the directory's times; a file made behind the gateway's back ends it.
    #[test]
    fn a_listed_directory_tells_its_names_until_it_changes() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("objects");
        let b = FsBackend::open(&root).unwrap();
        std::fs::create_dir_all(root.join("d/sub")).unwrap();
        for i in 0..50 {
            std::fs::File::create(root.join("d").join(format!("f{i:02}"))).unwrap();
        }
        let names = |b: &FsBackend| {
            let mut v = Vec::new();
            b.each_dir_name("d/", &mut |n, dir| v.push((n.to_string(), dir)))
                .map(|r| r.map(|()| v))
        };
        assert!(names(&b).is_none(), "nothing listed yet");
        std::thread::sleep(SETTLE * 2);
        b.list("d/", Some('/'), None, 10).unwrap();
        let mut want: Vec<(String, bool)> = (0..50).map(|i| (format!("f{i:02}"), false)).collect();
        want.push(("sub".into(), true));
        assert_eq!(names(&b), Some(Ok(want)));
        // Behind the gateway's back (a change through it drops the window anyway).
        std::fs::File::create(root.join("d/new")).unwrap();
        assert!(names(&b).is_none(), "the directory changed since its scan");
        // A directory changed just before its scan keeps no window to tell from.
        b.list("d/", Some('/'), None, 10).unwrap();
        assert!(names(&b).is_none(), "changed within SETTLE of the scan");
    }

    #[test]
    fn only_small_listings_fill_the_open_object_cache() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("objects");
        let b = FsBackend::open(&root).unwrap();
        for (dir, n) in [("big", FEW * 2 + 100), ("small", 10)] {
            std::fs::create_dir(root.join(dir)).unwrap();
            for i in 0..n {
                std::fs::File::create(root.join(dir).join(format!("f{i:05}"))).unwrap();
            }
        }
        let big = listed(&b, "big/", 300);
        assert_eq!(big.len(), FEW * 2 + 100);
        let cached = cached_under(&b, "big/");
        assert!(cached <= FEW + 300, "{cached} of a big listing cached");
        assert_eq!(listed(&b, "small/", 300).len(), 10);
        assert_eq!(cached_under(&b, "small/"), 10);
        let reads = b.meta_reads.load(Ordering::Relaxed);
        assert_eq!(listed(&b, "small/", 300).len(), 10);
        // The directory's own marker only (`list` reads it each time).
        assert_eq!(b.meta_reads.load(Ordering::Relaxed), reads + 1);
    }

    /// A listing past the entries' revalidation time reads no metadata for files
    /// whose ctime is the settled one their metadata was read under (one fstatat
    /// each, through the listed directory), and reads it again for a file changed
    /// since, behind the backend's back (or whose metadata it wrote itself: the
    /// ctime of a put is not settled).
    #[test]
    fn a_relisting_reads_metadata_only_of_changed_files() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("objects");
        let b = FsBackend::open(&root).unwrap();
        let mut meta = UserMeta::new();
        meta.insert("mode".into(), "100600".into());
        for i in 0..10 {
            b.put(&format!("d/f{i}"), b"x", &meta, false).unwrap();
        }
        std::thread::sleep(SETTLE * 2);
        let first = b.list("d/", Some('/'), None, 100).unwrap().objects;
        assert_eq!(first.len(), 11, "the marker and ten files");
        // The metadata the puts wrote is re-read once (its ctime was not settled).
        std::thread::sleep(REVALIDATE + SETTLE);
        let reads = b.meta_reads();
        assert_eq!(b.list("d/", Some('/'), None, 100).unwrap().objects, first);
        assert_eq!(b.meta_reads(), reads + 11);
        std::thread::sleep(REVALIDATE + SETTLE);
        let reads = b.meta_reads();
        let again = b.list("d/", Some('/'), None, 100).unwrap().objects;
        assert_eq!(again, first);
        // The directory's own marker only (`list` reads it each time).
        assert_eq!(b.meta_reads(), reads + 1);
        let other = FsBackend::open(&root).unwrap();
        meta.insert("mode".into(), "100640".into());
        other.set_meta("d/f3", &meta).unwrap();
        std::thread::sleep(REVALIDATE + SETTLE);
        let reads = b.meta_reads();
        let changed = b.list("d/", Some('/'), None, 100).unwrap().objects;
        assert_eq!(b.meta_reads(), reads + 2, "the marker and f3");
        let f3 = changed.iter().find(|o| o.key == "d/f3").unwrap();
        assert_eq!(f3.user.get("mode").map(String::as_str), Some("100640"));
    }

    /// A page's metadata read on several threads (`fanout`) is each entry's own:
    /// 5,000 files whose size, mode, owner and group all follow from their names
    /// (the owner is unique), written behind the backend's back (read through a
    /// descriptor of their own, the directory being big) and through it (cached,
    /// its own unsettled writes), listed in pages of 1,000 with helpers: every file
    /// once, in order, every attribute its own, a subdirectory in its place.
    #[test]
    fn a_shared_page_gives_each_entry_its_own_metadata() {
        const N: usize = 5000;
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("objects");
        let mut b = FsBackend::open(&root).unwrap();
        b.fanout = Arc::new(fanout::Fanout::new(4));
        let want = |i: usize| {
            let mut m = UserMeta::new();
            m.insert("mode".into(), format!("100{:03o}", i % 512));
            m.insert("uid".into(), (10_000 + i).to_string());
            m.insert("gid".into(), (i % 7).to_string());
            (m, i % 311)
        };
        std::fs::create_dir_all(root.join("d/sub")).unwrap();
        for i in 0..N {
            let (meta, size) = want(i);
            let key = format!("d/f{i:05}");
            if i % 10 == 0 {
                b.put(&key, &vec![b'x'; size], &meta, false).unwrap();
                continue;
            }
            let f = std::fs::File::create(root.join(&key)).unwrap();
            f.set_len(size as u64).unwrap();
            xattr::set(f.as_fd(), &meta).unwrap();
        }
        let (mut after, mut seen) = (None, Vec::new());
        let mut subs = 0;
        loop {
            let p = b.list("d/", Some('/'), after.as_deref(), 1000).unwrap();
            subs += p.prefixes.iter().filter(|k| *k == "d/sub/").count();
            seen.extend(p.objects.into_iter().filter(|o| o.key != "d/"));
            match p.next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        assert_eq!(subs, 1, "the subdirectory once");
        assert_eq!(seen.len(), N, "every file once");
        for (i, o) in seen.iter().enumerate() {
            assert_eq!(o.key, format!("d/f{i:05}"), "in order");
            let (meta, size) = want(i);
            assert_eq!(o.size, size as u64, "{}: size", o.key);
            for (k, v) in &meta {
                assert_eq!(o.user.get(k), Some(v), "{}: {k}", o.key);
            }
        }
        assert!(
            b.fanout.shared_pages() >= 5,
            "{} pages shared",
            b.fanout.shared_pages()
        );
    }

    /// Window pages: cut at any key, in order, a directory's "/" kept.
    #[test]
    fn a_window_cuts_pages_at_any_key() {
        let keys: Vec<(String, bool)> = ["d/a", "d/b/", "d/c", "d/e/"]
            .iter()
            .map(|k| (k.to_string(), k.ends_with('/')))
            .collect();
        let stamp = Stamp {
            dev: 1,
            ino: 2,
            mtime: (0, 0),
            ctime: (0, 0),
        };
        let w = Window::new("d/", stamp, None, &keys, true).unwrap();
        let p = w.page("d/", Some("d/b/"), 1).unwrap();
        assert_eq!(p.keys, vec![("d/c".to_string(), false)]);
        assert!(p.more && p.few);
        let p = w.page("d/", Some("d/b"), 9).unwrap();
        assert_eq!(p.keys, keys[1..].to_vec());
        assert!(!p.more);
        assert!(Window::new("x/", stamp, None, &keys, true).is_none());
    }
}
