//! One reactor's pipes for zero-copy TCP READ replies: a READ's range is
//! spliced from the file into a pipe through the ring, and the TCP transport splices
//! the pipe into the socket (`engine::tcp::Pipe`); no byte passes through user space.
//!
//! Limits (rules this module implements):
//! - a fixed number of pipes per reactor ([`PIPES`]), made at start; none free → the
//!   READ takes the pool-buffer path;
//! - at most [`PER_CONN`] pipes per connection (leased or queued in the transport): a
//!   client that pipelines READs and reads no replies cannot take them all — the rest
//!   of its READs use pool buffers, bounded by the transport's `max_queued`, and
//!   `send_timeout` closes it; a closed connection's pipes come back at once;
//! - a pipe is reused only empty; one that comes back holding pages (its connection
//!   went away mid-reply) or whose splice failed is closed and a fresh one opened.
//!
//! Availability: pipes are sized to the largest READ (`F_SETPIPE_SZ`); where the
//! kernel refuses (`/proc/sys/fs/pipe-max-size`, the `pipe-user-pages` limits of an
//! unprivileged user) the pool keeps the pipes it got, or none: READs then keep the
//! pool-buffer path. Which is in force is logged once per process.

use engine::tcp::{ConnId, Pipe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Pipes per reactor: enough for a few connections' queue depth of 1 MiB reads.
pub const PIPES: usize = 16;
/// Pipes one connection may hold at once (its replies in the transport or being
/// spliced in): a client reading nothing pins at most this many pipes' pages.
pub const PER_CONN: usize = 4;

/// Pipes leased now, process-wide (the `nfsgw_tcp_pipes_in_use` gauge).
static IN_USE: AtomicU64 = AtomicU64::new(0);
/// Reply bytes sent from pipes (`nfsgw_tcp_spliced_bytes_total`).
static SPLICED: AtomicU64 = AtomicU64::new(0);
/// The pipe count last logged, plus one (0: nothing logged yet): each reactor opens
/// its pool at start, and a line is logged only when the outcome differs from the
/// last one (a later reactor may get fewer pipes under the per-user pipe limits).
static LOGGED: AtomicUsize = AtomicUsize::new(0);

pub fn in_use() -> u64 {
    IN_USE.load(Ordering::Relaxed)
}

pub fn spliced_bytes() -> u64 {
    SPLICED.load(Ordering::Relaxed)
}

/// Counts `n` reply bytes handed to the transport in a pipe.
pub fn count_spliced(n: usize) {
    SPLICED.fetch_add(n as u64, Ordering::Relaxed);
}

/// A reactor's pipes.
pub struct Pipes {
    free: Vec<Pipe>,
    /// Who holds each pipe (by `Pipe::id`), `None` while free.
    lease: Vec<Option<ConnId>>,
    size: usize,
}

impl Pipes {
    /// Up to `n` pipes of `size` bytes; `None` when not one could be made (logged).
    pub fn open(n: usize, size: usize) -> Option<Pipes> {
        let mut free = Vec::with_capacity(n);
        let mut err = None;
        for id in 0..n as u32 {
            match Pipe::new(size, id) {
                Ok(p) => free.push(p),
                Err(e) => {
                    err = Some(e);
                    break;
                }
            }
        }
        if LOGGED.swap(free.len() + 1, Ordering::Relaxed) != free.len() + 1 {
            match (&err, free.len()) {
                (None, k) => tracing::info!(
                    pipes = k,
                    size,
                    "TCP READ replies of fs files: spliced from the page cache (no copy)"
                ),
                (Some(e), 0) => tracing::info!(
                    "TCP READ replies: pool-buffer copies (no {size}-byte pipe: {e}; see fs.pipe-max-size)"
                ),
                (Some(e), k) => tracing::info!(
                    pipes = k,
                    size,
                    "TCP READ replies: spliced, with fewer pipes than {n} ({e})"
                ),
            }
        }
        if free.is_empty() {
            return None;
        }
        let lease = vec![None; free.len()];
        Some(Pipes { free, lease, size })
    }

    /// A free, empty pipe for a reply to `conn` of `len` bytes at file offset
    /// `offset`, if it fits and `conn` holds fewer than [`PER_CONN`].
    pub fn take(&mut self, conn: ConnId, offset: u64, len: usize) -> Option<Pipe> {
        let p = self.free.last()?;
        if !p.fits(offset, len) {
            return None;
        }
        if self.lease.iter().filter(|l| **l == Some(conn)).count() >= PER_CONN {
            return None;
        }
        let p = self.free.pop()?;
        self.lease[p.id as usize] = Some(conn);
        IN_USE.fetch_add(1, Ordering::Relaxed);
        Some(p)
    }

    /// Takes a pipe back: reused when empty, else closed and replaced (its pages
    /// belong to a reply that was not sent).
    pub fn put(&mut self, p: Pipe) {
        if p.is_empty() {
            self.release(p.id);
            self.free.push(p);
        } else {
            self.replace(p);
        }
    }

    /// Closes a pipe whose content is unknown (a failed splice) and opens a fresh
    /// one in its place; if that fails the pool is one pipe smaller.
    pub fn replace(&mut self, p: Pipe) {
        let id = p.id;
        drop(p);
        self.release(id);
        match Pipe::new(self.size, id) {
            Ok(fresh) => self.free.push(fresh),
            Err(e) => tracing::warn!("splice pipes: replacing a pipe failed ({e}); one fewer"),
        }
    }

    fn release(&mut self, id: u32) {
        if let Some(l) = self.lease.get_mut(id as usize) {
            if l.take().is_some() {
                IN_USE.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Pipes free now (tests).
    #[cfg(test)]
    pub fn free(&self) -> usize {
        self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_connection_cap_fit_and_replacement() {
        let Some(mut p) = Pipes::open(6, 256 * 1024) else {
            panic!("no pipes on this machine");
        };
        let a = ConnId::from_raw(1, 0);
        let b = ConnId::from_raw(2, 0);
        // A range starting mid-page needs one more pipe buffer than its length.
        assert!(p.take(a, 0, 256 * 1024 + 1).is_none());
        assert!(p.take(a, 1, 256 * 1024).is_none());
        let mut held: Vec<Pipe> = (0..PER_CONN)
            .map(|_| p.take(a, 4096, 65536).unwrap())
            .collect();
        assert!(p.take(a, 0, 4096).is_none(), "over the per-connection cap");
        let other = p
            .take(b, 0, 4096)
            .expect("another connection still gets one");
        // Back empty: reused; back holding data: replaced by a fresh (empty) pipe.
        p.put(held.pop().unwrap());
        let mut dirty = held.pop().unwrap();
        dirty.set_filled(10);
        p.put(dirty);
        p.put(other);
        assert_eq!(p.free(), 4);
        assert!(p.take(a, 0, 4096).is_some_and(|x| x.is_empty()));
    }
}
