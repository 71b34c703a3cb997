//! The two single-producer/single-consumer byte rings of one connection, in the shared
//! segment the connector created.
//!
//! Segment layout: ring 0 (connector → acceptor) then ring 1 (acceptor → connector),
//! each a 4 KiB control page followed by `cap` data bytes (`cap` a power of two). The
//! control page holds, on separate cache lines: `head` (bytes ever published by the
//! producer), `tail` (bytes ever consumed), `sleeping` (the consumer armed and may
//! block) and `waiting` (the producer has frames queued for want of space and may block).
//!
//! Frames are 8-byte aligned and may wrap around the end of the data area (copies are
//! split). A frame is published by a Release store of `head` after its bytes are
//! written, and space is returned by a Release store of `tail` after its bytes are read,
//! so the peer never sees a partial frame. The peer's positions are validated on every
//! load (monotonic, never more than `cap` apart, 8-aligned): a violation is corruption
//! and breaks the connection.
//!
//! Wake-ups (no lost doorbell): the consumer stores `sleeping = 1`, issues a SeqCst
//! fence, then loads `head`; the producer stores `head`, issues a SeqCst fence, then
//! loads `sleeping`. The two fences are totally ordered, so either the consumer's load
//! sees the new head (and it does not sleep) or the producer's load sees the flag (and
//! it rings the doorbell byte on the Unix socket). The same argument holds for
//! `waiting` against `tail`. Busy polling pays one fence per pass that moved data and
//! no syscall.

use super::mr::Span;
use super::sys::Shm;
use super::wire::HDR;
use std::sync::atomic::{fence, Ordering};

/// Control page bytes before each ring's data area.
pub const CTL: usize = 4096;
const HEAD: usize = 0;
const TAIL: usize = 128;
const SLEEPING: usize = 256;
const WAITING: usize = 384;
/// Ring bytes kept free for the single Nak that may end a connection, so it can always
/// be published at once.
pub const RESERVE: u64 = 64;
pub const MIN_RING: u64 = 4096;
pub const MAX_RING: u64 = 1 << 30;

/// The peer broke the ring protocol (positions out of range).
#[derive(Debug)]
pub struct Corrupt(pub &'static str);

/// Bytes of a segment holding two rings of `cap` bytes.
pub fn segment_len(cap: u64) -> usize {
    2 * (CTL + cap as usize)
}

pub fn valid_ring_size(cap: u64) -> bool {
    cap.is_power_of_two() && (MIN_RING..=MAX_RING).contains(&cap)
}

pub fn round8(n: u64) -> u64 {
    (n + 7) & !7
}

/// One connection's view of its segment: the ring it produces into and the one it
/// consumes from.
pub struct Link {
    shm: Shm,
    cap: u64,
    tx_base: usize,
    rx_base: usize,
    /// Our producer position (the published `head` of the tx ring).
    tx_head: u64,
    /// Last `tail` of the tx ring we loaded (consumer progress we know of).
    tx_tail: u64,
    /// Last `head` of the rx ring we loaded (validated), and our consumer position.
    rx_head: u64,
    rx_tail: u64,
    /// The part of `rx_tail` already published.
    rx_published: u64,
    pushed: bool,
    consumed: bool,
}

impl Link {
    /// `connector` picks which ring is ours to produce into.
    pub fn new(shm: Shm, cap: u64, connector: bool) -> Link {
        let ring1 = CTL + cap as usize;
        let (tx_base, rx_base) = if connector { (0, ring1) } else { (ring1, 0) };
        Link {
            shm,
            cap,
            tx_base,
            rx_base,
            tx_head: 0,
            tx_tail: 0,
            rx_head: 0,
            rx_tail: 0,
            rx_published: 0,
            pushed: false,
            consumed: false,
        }
    }

    /// Bytes free in the tx ring for ordinary frames (the Nak reserve excluded),
    /// reloading the consumer's tail.
    pub fn tx_free(&mut self) -> Result<u64, Corrupt> {
        let t = self
            .shm
            .atomic_u64(self.tx_base + TAIL)
            .load(Ordering::Acquire);
        if t < self.tx_tail || t > self.tx_head || !t.is_multiple_of(8) {
            return Err(Corrupt("ring tail moved backwards or past head"));
        }
        self.tx_tail = t;
        Ok((self.cap - (self.tx_head - t)).saturating_sub(RESERVE))
    }

    /// Free bytes as last seen, without touching shared memory.
    pub fn tx_free_cached(&self) -> u64 {
        (self.cap - (self.tx_head - self.tx_tail)).saturating_sub(RESERVE)
    }

    fn data_off(&self, base: usize, pos: u64) -> usize {
        base + CTL + (pos & (self.cap - 1)) as usize
    }

    /// Calls `f(offset_in_shm, run_len, done_so_far)` for the one or two contiguous runs
    /// of `len` ring bytes starting at ring position `pos`.
    fn runs(&self, base: usize, pos: u64, len: usize, mut f: impl FnMut(usize, usize, usize)) {
        let start = (pos & (self.cap - 1)) as usize;
        let first = len.min(self.cap as usize - start);
        f(self.data_off(base, pos), first, 0);
        if first < len {
            f(base + CTL, len - first, first);
        }
    }

    /// Writes `bytes` at `rel` bytes past our unpublished head.
    pub fn tx_write(&self, rel: u64, bytes: &[u8]) {
        self.runs(
            self.tx_base,
            self.tx_head + rel,
            bytes.len(),
            |off, n, done| self.shm.write(off, &bytes[done..done + n]),
        );
    }

    /// Copies `len` bytes of `span` (from `span_off`) to `rel` past our head.
    pub fn tx_copy_in(&self, rel: u64, span: &Span, span_off: usize, len: usize) {
        self.runs(self.tx_base, self.tx_head + rel, len, |off, n, done| {
            self.shm.copy_from_mem(off, span, span_off + done, n)
        });
    }

    /// Publishes `size` bytes written past our head (one whole frame).
    pub fn tx_commit(&mut self, size: u64) {
        debug_assert!(size.is_multiple_of(8) && self.tx_head + size - self.tx_tail <= self.cap);
        self.tx_head += size;
        self.shm
            .atomic_u64(self.tx_base + HEAD)
            .store(self.tx_head, Ordering::Release);
        self.pushed = true;
    }

    /// Publishes a header-only frame into the reserve (the final Nak), if it fits.
    pub fn tx_push_final(&mut self, hdr: &[u8; HDR]) -> bool {
        let free = match self.tx_free() {
            Ok(_) => self.cap - (self.tx_head - self.tx_tail),
            Err(_) => return false,
        };
        if free < HDR as u64 {
            return false;
        }
        self.tx_write(0, hdr);
        self.tx_commit(HDR as u64);
        true
    }

    /// Bytes of whole frames waiting in the rx ring (the producer's head is loaded only
    /// when the frames seen last time are used up).
    pub fn rx_avail(&mut self) -> Result<u64, Corrupt> {
        if self.rx_head == self.rx_tail {
            let h = self
                .shm
                .atomic_u64(self.rx_base + HEAD)
                .load(Ordering::Acquire);
            if h < self.rx_tail || h - self.rx_tail > self.cap || !h.is_multiple_of(8) {
                return Err(Corrupt("ring head out of range"));
            }
            self.rx_head = h;
        }
        Ok(self.rx_head - self.rx_tail)
    }

    /// Reads `dst.len()` bytes at `rel` past our consumer position.
    pub fn rx_read(&self, rel: u64, dst: &mut [u8]) {
        self.runs(
            self.rx_base,
            self.rx_tail + rel,
            dst.len(),
            |off, n, done| self.shm.read(off, &mut dst[done..done + n]),
        );
    }

    /// Copies `len` bytes at `rel` past our consumer position into `span` at `span_off`.
    pub fn rx_copy_out(&self, rel: u64, span: &Span, span_off: usize, len: usize) {
        self.runs(self.rx_base, self.rx_tail + rel, len, |off, n, done| {
            self.shm.copy_to_mem(off, span, span_off + done, n)
        });
    }

    /// Consumes one frame of `size` bytes (at most what `rx_avail` reported; published
    /// by [`Link::rx_publish`]).
    pub fn rx_consume(&mut self, size: u64) {
        debug_assert!(size <= self.rx_head - self.rx_tail);
        self.rx_tail += size;
    }

    /// Returns consumed space to the producer.
    pub fn rx_publish(&mut self) {
        if self.rx_tail != self.rx_published {
            self.shm
                .atomic_u64(self.rx_base + TAIL)
                .store(self.rx_tail, Ordering::Release);
            self.rx_published = self.rx_tail;
            self.consumed = true;
        }
    }

    /// After a pass that published frames or space: does the peer sleep on it? (One
    /// SeqCst fence, then the flags; see the module docs.) Clears the flag it acts on,
    /// so one sleep costs at most one doorbell byte.
    pub fn peer_needs_wake(&mut self) -> bool {
        if !self.pushed && !self.consumed {
            return false;
        }
        fence(Ordering::SeqCst);
        let mut wake = false;
        if self.pushed {
            wake |= take_flag(self.shm.atomic_u32(self.tx_base + SLEEPING));
        }
        if self.consumed {
            wake |= take_flag(self.shm.atomic_u32(self.rx_base + WAITING));
        }
        self.pushed = false;
        self.consumed = false;
        wake
    }

    /// Arms: flags that we may sleep (consumer side, and producer side when `blocked`),
    /// then re-checks. Returns true if the link has work after all (the flags are then
    /// left for [`Link::disarm`]).
    pub fn arm(&mut self, blocked: bool) -> bool {
        self.shm
            .atomic_u32(self.rx_base + SLEEPING)
            .store(1, Ordering::Relaxed);
        if blocked {
            self.shm
                .atomic_u32(self.tx_base + WAITING)
                .store(1, Ordering::Relaxed);
        }
        fence(Ordering::SeqCst);
        let head = self
            .shm
            .atomic_u64(self.rx_base + HEAD)
            .load(Ordering::Relaxed);
        let tail = self
            .shm
            .atomic_u64(self.tx_base + TAIL)
            .load(Ordering::Relaxed);
        head != self.rx_tail || (blocked && tail != self.tx_tail)
    }

    /// Clears our sleep flags (we are polling again).
    pub fn disarm(&self) {
        self.shm
            .atomic_u32(self.rx_base + SLEEPING)
            .store(0, Ordering::Relaxed);
        self.shm
            .atomic_u32(self.tx_base + WAITING)
            .store(0, Ordering::Relaxed);
    }

    /// Whether anything is waiting in the rx ring (a plain check, no validation).
    pub fn rx_pending(&self) -> bool {
        self.shm
            .atomic_u64(self.rx_base + HEAD)
            .load(Ordering::Acquire)
            != self.rx_tail
    }
}

fn take_flag(flag: &std::sync::atomic::AtomicU32) -> bool {
    flag.load(Ordering::Relaxed) != 0 && flag.swap(0, Ordering::Relaxed) != 0
}
