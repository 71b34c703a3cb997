//! Hugepage regions carved into size-class buffer pools.
//!
//! Each reactor owns one `Pools`: a single anonymous mapping (2 MiB hugepages when the
//! kernel has them reserved, else regular pages with transparent-hugepage advice),
//! pre-faulted at start and divided into fixed size classes. A `Buf` is a handle into
//! that region; dropping it pushes its index back on the class free list. Free lists
//! are lock-free (`ArrayQueue`), so a buffer may be released on any thread (a backend
//! worker, say) without a lock and without a message back to the owner.
//!
//! Nothing here allocates after `Pools::new`: `alloc` returns `None` when a class is
//! exhausted, and the caller parks the request until a buffer comes back.
//!
//! Sharing: `PoolsInner` is shared read-only (layout) plus lock-free free lists.

use crossbeam_queue::ArrayQueue;
use memmap2::{MmapMut, MmapOptions};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

const HUGE_PAGE: usize = 2 << 20;

/// `engine.hugepages`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HugePolicy {
    /// Fail start if hugepages cannot be mapped.
    Require,
    /// Use hugepages when reserved; otherwise regular pages with THP advice.
    Auto,
    /// Regular pages only.
    Off,
}

/// One size class: `count` buffers of `size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassSpec {
    pub size: usize,
    pub count: usize,
}

#[derive(Debug)]
pub enum MemError {
    /// `Require` and the kernel could not map hugepages.
    NoHugepages {
        bytes: usize,
        err: std::io::Error,
    },
    Map(std::io::Error),
    BadSpec(&'static str),
}

impl std::fmt::Display for MemError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MemError::NoHugepages { bytes, err } => write!(
                f,
                "engine.hugepages = \"require\" but {} MiB of 2 MiB hugepages could not be mapped ({err}); \
                 reserve them (echo N > /proc/sys/vm/nr_hugepages) or set engine.hugepages = \"auto\"",
                bytes >> 20
            ),
            MemError::Map(e) => write!(f, "mapping the buffer region failed: {e}"),
            MemError::BadSpec(s) => write!(f, "invalid pool layout: {s}"),
        }
    }
}

impl std::error::Error for MemError {}

struct Class {
    size: usize,
    offset: usize,
    count: usize,
    free: ArrayQueue<u32>,
    /// Times `alloc` found this class empty (parked requests).
    exhausted: AtomicU64,
}

struct PoolsInner {
    base: *mut u8,
    len: usize,
    huge: bool,
    classes: Vec<Class>,
    _map: MmapMut,
}

// SAFETY: `base` points into `_map`, which lives as long as `PoolsInner`. Disjoint
// buffers are handed out exclusively (an index is on the free list or owned by exactly
// one `Buf`), so sharing the layout across threads is sound.
unsafe impl Send for PoolsInner {}
// SAFETY: as for `Send`: shared access only reads the layout; each buffer's bytes are
// reached through the one `Buf` that owns its index.
unsafe impl Sync for PoolsInner {}

/// Occupancy of one class, for stats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassStats {
    pub size: usize,
    pub count: usize,
    pub free: usize,
    pub exhausted: u64,
}

/// A reactor's buffer pools. Cheap to clone (shared handle).
#[derive(Clone)]
pub struct Pools {
    inner: Arc<PoolsInner>,
}

static FALLBACK_LOGGED: AtomicBool = AtomicBool::new(false);

fn map_region(len: usize, policy: HugePolicy) -> Result<(MmapMut, bool), MemError> {
    if policy != HugePolicy::Off {
        let huge_len = len.div_ceil(HUGE_PAGE) * HUGE_PAGE;
        match MmapOptions::new()
            .len(huge_len)
            .huge(Some(21))
            .populate()
            .map_anon()
        {
            Ok(m) => return Ok((m, true)),
            Err(err) if policy == HugePolicy::Require => {
                return Err(MemError::NoHugepages {
                    bytes: huge_len,
                    err,
                })
            }
            Err(err) => {
                if !FALLBACK_LOGGED.swap(true, Ordering::Relaxed) {
                    tracing::info!(
                        "no 2 MiB hugepages reserved ({err}); buffer pools use regular pages \
                         with transparent-hugepage advice"
                    );
                }
            }
        }
    }
    let m = MmapOptions::new()
        .len(len)
        .populate()
        .map_anon()
        .map_err(MemError::Map)?;
    #[cfg(target_os = "linux")]
    {
        let _ = m.advise(memmap2::Advice::HugePage);
    }
    Ok((m, false))
}

impl Pools {
    /// Maps one region holding every class and fills the free lists.
    pub fn new(specs: &[ClassSpec], policy: HugePolicy) -> Result<Pools, MemError> {
        if specs.is_empty() {
            return Err(MemError::BadSpec("no size classes"));
        }
        let mut sorted = specs.to_vec();
        sorted.sort_by_key(|c| c.size);
        let mut offset = 0usize;
        let mut layout = Vec::with_capacity(sorted.len());
        for c in &sorted {
            if c.size == 0 || c.count == 0 || c.size % 64 != 0 {
                return Err(MemError::BadSpec(
                    "class sizes must be non-zero multiples of 64 with non-zero counts",
                ));
            }
            if c.count > u32::MAX as usize {
                return Err(MemError::BadSpec("class count too large"));
            }
            layout.push((c.size, offset, c.count));
            offset = offset
                .checked_add(
                    c.size
                        .checked_mul(c.count)
                        .ok_or(MemError::BadSpec("overflow"))?,
                )
                .ok_or(MemError::BadSpec("overflow"))?;
        }
        let (mut map, huge) = map_region(offset, policy)?;
        let base = map.as_mut_ptr();
        let classes = layout
            .into_iter()
            .map(|(size, offset, count)| {
                let free = ArrayQueue::new(count);
                for i in 0..count as u32 {
                    free.push(i).expect("free list sized to count");
                }
                Class {
                    size,
                    offset,
                    count,
                    free,
                    exhausted: AtomicU64::new(0),
                }
            })
            .collect();
        Ok(Pools {
            inner: Arc::new(PoolsInner {
                base,
                len: offset,
                huge,
                classes,
                _map: map,
            }),
        })
    }

    /// Whether the region is backed by hugepages.
    pub fn is_huge(&self) -> bool {
        self.inner.huge
    }

    /// Base address and length of the whole region (for one-time RDMA registration).
    pub fn region(&self) -> (*mut u8, usize) {
        (self.inner.base, self.inner.len)
    }

    /// The largest buffer any class can give.
    pub fn max_buf(&self) -> usize {
        self.inner.classes.last().map(|c| c.size).unwrap_or(0)
    }

    /// A buffer of at least `min_cap` bytes from the smallest class that fits and has
    /// one free, with length 0. `None` means exhausted (or too large): park and retry.
    pub fn alloc(&self, min_cap: usize) -> Option<Buf> {
        let inner = &self.inner;
        for (ci, c) in inner.classes.iter().enumerate() {
            if c.size < min_cap {
                continue;
            }
            if let Some(idx) = c.free.pop() {
                debug_assert!((idx as usize) < c.count);
                // SAFETY: offset + idx*size + size <= len by construction in `new`.
                let ptr = unsafe { inner.base.add(c.offset + idx as usize * c.size) };
                return Some(Buf {
                    pools: self.inner.clone(),
                    ptr,
                    len: 0,
                    cap: c.size,
                    class: ci as u8,
                    idx,
                });
            }
            c.exhausted.fetch_add(1, Ordering::Relaxed);
        }
        None
    }

    pub fn stats(&self) -> Vec<ClassStats> {
        self.inner
            .classes
            .iter()
            .map(|c| ClassStats {
                size: c.size,
                count: c.count,
                free: c.free.len(),
                exhausted: c.exhausted.load(Ordering::Relaxed),
            })
            .collect()
    }

    /// Times any class was found empty, over all classes (no allocation: the
    /// transports' starvation signal, read at each sweep; it moved since the last
    /// look means some allocation of this reactor was starved meanwhile).
    pub fn exhausted_total(&self) -> u64 {
        self.inner
            .classes
            .iter()
            .map(|c| c.exhausted.load(Ordering::Relaxed))
            .sum()
    }

    /// Buffers currently handed out, over all classes.
    pub fn in_use(&self) -> usize {
        self.inner
            .classes
            .iter()
            .map(|c| c.count - c.free.len())
            .sum()
    }
}

/// An exclusively owned buffer in a pool region. `Deref` gives `[..len]`;
/// `spare_mut` gives the whole capacity for filling in place.
pub struct Buf {
    pools: Arc<PoolsInner>,
    ptr: *mut u8,
    len: usize,
    cap: usize,
    class: u8,
    idx: u32,
}

// SAFETY: a `Buf` is the only owner of its bytes; moving it to another thread moves
// that ownership. Release goes through the lock-free free list.
unsafe impl Send for Buf {}

impl Buf {
    pub fn capacity(&self) -> usize {
        self.cap
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sets the valid length. Panics if beyond capacity (a caller bug, not input).
    pub fn set_len(&mut self, len: usize) {
        assert!(len <= self.cap, "Buf::set_len beyond capacity");
        self.len = len;
    }

    /// The whole capacity, for encoding or reading into in place.
    pub fn spare_mut(&mut self) -> &mut [u8] {
        // SAFETY: ptr..ptr+cap is inside the region and exclusively ours.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.cap) }
    }

    /// Drops the first `n` valid bytes: the buffer now starts after them (used to hand
    /// out a message that follows a transport header, without copying). Capacity
    /// shrinks by `n`; the buffer still returns whole to its pool.
    pub fn advance(&mut self, n: usize) {
        assert!(n <= self.len, "Buf::advance beyond length");
        // SAFETY: n <= len <= cap, so the new start stays inside this buffer.
        self.ptr = unsafe { self.ptr.add(n) };
        self.len -= n;
        self.cap -= n;
    }

    /// Address of the first byte (RDMA addressing; registered memory).
    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// Offset of this buffer in its region (RDMA addressing).
    pub fn region_offset(&self) -> usize {
        self.ptr as usize - self.pools.base as usize
    }
}

impl std::ops::Deref for Buf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: len <= cap; bytes exclusively ours.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl std::ops::DerefMut for Buf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        let c = &self.pools.classes[self.class as usize];
        // Cannot fail: the free list has room for every index and this one is absent.
        let pushed = c.free.push(self.idx);
        debug_assert!(pushed.is_ok(), "buffer returned twice");
    }
}

impl std::fmt::Debug for Buf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buf")
            .field("class", &self.class)
            .field("idx", &self.idx)
            .field("len", &self.len)
            .field("cap", &self.cap)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pools() -> Pools {
        Pools::new(
            &[
                ClassSpec {
                    size: 4096,
                    count: 2,
                },
                ClassSpec {
                    size: 65536,
                    count: 1,
                },
            ],
            HugePolicy::Auto,
        )
        .unwrap()
    }

    #[test]
    fn picks_smallest_fitting_class_and_returns_on_drop() {
        let p = pools();
        let a = p.alloc(100).unwrap();
        assert_eq!(a.capacity(), 4096);
        let b = p.alloc(5000).unwrap();
        assert_eq!(b.capacity(), 65536);
        assert_eq!(p.in_use(), 2);
        drop(a);
        drop(b);
        assert_eq!(p.in_use(), 0);
    }

    #[test]
    fn exhaustion_returns_none_and_spills_upward() {
        let p = pools();
        let a = p.alloc(1).unwrap();
        let b = p.alloc(1).unwrap();
        let c = p.alloc(1).unwrap(); // spills to the 64 KiB class
        assert_eq!(c.capacity(), 65536);
        assert!(p.alloc(1).is_none());
        assert!(p.alloc(1 << 20).is_none());
        assert!(p.stats()[0].exhausted >= 1);
        drop((a, b, c));
        assert!(p.alloc(1).is_some());
    }

    #[test]
    fn buffers_are_disjoint_and_writable() {
        let p = pools();
        let mut a = p.alloc(1).unwrap();
        let mut b = p.alloc(1).unwrap();
        a.spare_mut().fill(1);
        b.spare_mut().fill(2);
        a.set_len(10);
        assert!(a.iter().all(|&x| x == 1));
        assert_ne!(a.region_offset(), b.region_offset());
    }

    #[test]
    fn release_from_another_thread() {
        let p = pools();
        let a = p.alloc(1).unwrap();
        std::thread::spawn(move || drop(a)).join().unwrap();
        assert_eq!(p.in_use(), 0);
    }

    #[test]
    fn require_without_reserved_hugepages_names_the_fix() {
        // On machines with hugepages reserved this succeeds; otherwise the error must
        // tell the operator what to do.
        match Pools::new(
            &[ClassSpec {
                size: 4096,
                count: 1,
            }],
            HugePolicy::Require,
        ) {
            Ok(p) => assert!(p.is_huge()),
            Err(e) => assert!(e.to_string().contains("nr_hugepages")),
        }
    }
}
