//! Starvation-driven reclaim on the responder transport (`rdma.stall_reclaim_ms`,
//! `ServerOptions::stall_reclaim`), the RDMA side of the rule TCP keeps with
//! `tcp.stall_reclaim_ms` (Standards: no starved neighbour).
//!
//! Each connection stays within its reply budget (`super::reply_budget`), and a peer
//! that never takes its replies is closed after `send_timeout`; but several such peers
//! on one reactor hold every large buffer until then, and TCP and good RDMA clients
//! get short READs and wait for WRITE buffers meanwhile. So, while some allocation of
//! the reactor is starved (a pool class found empty since the last sweep — the pools
//! TCP and RDMA share count it, so either transport's starvation is seen — or a call
//! of ours parked for a reassembly buffer), a connection is closed whose outstanding
//! Sends (replies with the RDMA Writes of their data, and callbacks) hold at least
//! [`RECLAIM_HELD`] bytes and whose peer completed less than [`RECLAIM_PROGRESS`]
//! bytes of them in `stall_reclaim`. A slow but steady peer, above that rate, keeps
//! its connection. Measured per connection by [`Drain`], at each timeout sweep (no
//! clock read per completion).
//!
//! The same rule covers the Read side with a second [`Drain`]: reassembly buffers of
//! calls whose RDMA Reads are still outstanding (each up to the large class, at most
//! `MAX_PULLING` per connection) are held, and the bytes our Reads completed are the
//! progress. A peer that sends chunked calls and never answers our Reads (on `soft`
//! it never polls; on verbs its side stalls) would otherwise keep those buffers until
//! `read_timeout` (30 s by default; the fuzz campaign measured a fresh client's 1 MiB
//! WRITE waiting up to about three read timeouts behind a few such peers).

pub use crate::tcp::{RECLAIM_HELD, RECLAIM_PROGRESS};
use std::time::Instant;

/// Memory a connection's posted Sends hold, what its peer has completed, and the
/// reclaim's clock.
#[derive(Debug, Default)]
pub(super) struct Drain {
    /// Bytes held by Sends posted and not completed: each reply's pool buffer (its
    /// capacity), a pool header buffer, external data (cache pages kept pinned), a
    /// callback's buffer.
    held: usize,
    /// Bytes of completed Sends over the connection's life (successful completions:
    /// the peer took them).
    taken: u64,
    /// While `held >= RECLAIM_HELD`: since when, and from what `taken`, the peer has
    /// not taken `RECLAIM_PROGRESS` more. `None` below that.
    mark: Option<(Instant, u64)>,
}

impl Drain {
    /// A Send holding `held` bytes was posted.
    pub(super) fn posted(&mut self, held: usize) {
        self.held = self.held.saturating_add(held);
    }

    /// A Send holding `held` bytes completed; `took`: successfully (the peer took it),
    /// else failed or flushed.
    pub(super) fn completed(&mut self, held: usize, took: bool) {
        self.held = self.held.saturating_sub(held);
        if took {
            self.taken = self.taken.saturating_add(held as u64);
        }
    }

    /// Memory of `held` bytes is given back without being taken (the Read side: a
    /// call's Reads are all done, failed or flushed; progress is counted by `took`).
    pub(super) fn released(&mut self, held: usize) {
        self.completed(held, false);
    }

    /// The peer did `bytes` of work for us without giving memory back (the Read side:
    /// one RDMA Read completed).
    pub(super) fn took(&mut self, bytes: usize) {
        self.taken = self.taken.saturating_add(bytes as u64);
    }

    /// Bytes held by outstanding Sends (or reassembly buffers with Reads outstanding).
    pub(super) fn held(&self) -> usize {
        self.held
    }

    /// At every sweep: while `RECLAIM_HELD` bytes are held, the mark moves to `now`
    /// whenever the peer has taken `RECLAIM_PROGRESS` more since it was set; below
    /// that there is no mark.
    pub(super) fn note(&mut self, now: Instant) {
        if self.held < RECLAIM_HELD {
            self.mark = None;
            return;
        }
        match self.mark {
            Some((_, from)) if self.taken < from.saturating_add(RECLAIM_PROGRESS as u64) => {}
            _ => self.mark = Some((now, self.taken)),
        }
    }

    /// Whether the Sends hold enough, with too little taken since before `since`, for
    /// the reclaim to close the connection.
    pub(super) fn undrained(&self, since: Instant) -> bool {
        self.held >= RECLAIM_HELD && self.mark.is_some_and(|(t, _)| t < since)
    }

    /// Since when the peer has taken too little (the log line).
    pub(super) fn since(&self) -> Option<Instant> {
        self.mark.map(|(t, _)| t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const W: Duration = Duration::from_secs(1);
    const MIB: usize = 1 << 20;

    #[test]
    fn below_the_held_floor_there_is_no_clock() {
        let mut d = Drain::default();
        let t0 = Instant::now();
        d.posted(RECLAIM_HELD - 1);
        d.note(t0);
        assert!(!d.undrained(t0 + 10 * W));
        assert_eq!(d.since(), None);
    }

    #[test]
    fn held_and_never_taken_is_undrained_only_after_the_window() {
        let mut d = Drain::default();
        let t0 = Instant::now();
        d.posted(MIB);
        d.note(t0);
        assert!(!d.undrained(t0), "not before the window");
        d.note(t0 + W);
        assert!(d.undrained(t0 + Duration::from_millis(1)));
        assert_eq!(d.since(), Some(t0));
    }

    #[test]
    fn a_steady_peer_moves_the_clock_and_a_trickle_does_not() {
        let mut d = Drain::default();
        let t0 = Instant::now();
        for _ in 0..8 {
            d.posted(MIB);
        }
        d.note(t0);
        // One 1 MiB reply taken per window, another posted: steady, never undrained.
        let mut now = t0;
        for _ in 0..10 {
            now += W;
            d.completed(MIB, true);
            d.posted(MIB);
            d.note(now);
            assert!(!d.undrained(now - W + Duration::from_millis(1)));
        }
        // Less than RECLAIM_PROGRESS taken: the clock stays.
        let at = now;
        d.posted(4096);
        d.completed(4096, true);
        d.note(now + W);
        assert_eq!(d.since(), Some(at));
        assert!(d.undrained(at + Duration::from_millis(1)));
        // Flushes are not progress, and once held drops under the floor, no clock.
        d.completed(7 * MIB, false);
        d.note(now + 2 * W);
        assert_eq!(d.since(), Some(at));
        d.completed(MIB, false);
        d.note(now + 3 * W);
        assert_eq!((d.held(), d.since()), (0, None));
    }

    #[test]
    fn reads_completing_are_progress_and_a_release_is_not() {
        let mut d = Drain::default();
        let t0 = Instant::now();
        d.posted(MIB);
        d.note(t0);
        // Completed Reads of RECLAIM_PROGRESS move the clock; memory stays held.
        d.took(RECLAIM_PROGRESS);
        d.note(t0 + W);
        assert_eq!((d.held(), d.since()), (MIB, Some(t0 + W)));
        // A trickle does not.
        d.took(RECLAIM_PROGRESS - 1);
        d.note(t0 + 2 * W);
        assert!(d.undrained(t0 + W + Duration::from_millis(1)));
        // Released without progress: no clock once under the floor.
        d.released(MIB);
        d.note(t0 + 3 * W);
        assert_eq!((d.held(), d.since()), (0, None));
    }

    #[test]
    fn counts_saturate() {
        let mut d = Drain {
            held: usize::MAX,
            taken: u64::MAX,
            mark: None,
        };
        d.posted(1);
        d.completed(usize::MAX, true);
        assert_eq!((d.held, d.taken), (0, u64::MAX));
        d.completed(5, true);
        assert_eq!(d.held, 0);
    }
}
