//! Admission of RDMA connections against a reactor's receive buffers (no
//! client can take the gateway down by exhausting resources).
//!
//! Every accepted connection keeps `grant` Receives posted, each a pool buffer of the
//! inline size, for as long as it lives. Without accounting, a handful of connections
//! at the configured credits would hold every buffer of that size class and starve TCP,
//! replies and reassembly on the same reactor. So each reactor has a *receive budget*
//! (a share of the class its Receives come from, the rest being the reserve for
//! everything else), and each connection reserves its grant from it at accept and gives
//! it back at disconnect.
//!
//! Policy: a new connection gets the configured credits when the budget allows it
//! while still leaving `floor` credits for every connection `max_connections` still
//! permits; otherwise fewer, down to `floor` (RFC 8166 §3.3.1 allows any grant ≥ 1, and
//! we never grant more than is posted). When not even `floor` is left, or
//! `max_connections` are live, the connection is refused (RDMA-CM reject).

use std::time::{Duration, Instant};

/// Share of the receive class the Receives of all connections may hold, as a fraction
/// `NUM / DEN`; the rest stays for TCP, replies and reassembly.
pub const BUDGET_NUM: usize = 3;
pub const BUDGET_DEN: usize = 4;

/// What to do with one connection request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Accept with this many credits (Receives posted, the grant's ceiling).
    Grant(u32),
    /// `max_connections` are live.
    Full,
    /// Fewer than `floor` receive buffers are left in the budget.
    NoBuffers,
}

/// Receive-buffer bookkeeping of one reactor's RDMA listener.
#[derive(Debug, Clone)]
pub struct Admission {
    budget: usize,
    floor: u32,
    max_connections: usize,
    reserved: usize,
}

impl Admission {
    /// `class_count`: buffers in the pool class the Receives come from.
    pub fn new(class_count: usize, floor: u32, max_connections: usize) -> Admission {
        Admission {
            budget: class_count.saturating_mul(BUDGET_NUM) / BUDGET_DEN,
            floor: floor.max(1),
            max_connections,
            reserved: 0,
        }
    }

    /// The receive buffers all connections together may hold.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Receive buffers currently reserved by live connections.
    pub fn reserved(&self) -> usize {
        self.reserved
    }

    /// Decides on a request while `live` connections exist, `want` being the configured
    /// credits; a `Grant` is reserved until [`Admission::release`].
    pub fn admit(&mut self, live: usize, want: u32) -> Verdict {
        self.admit_with(live, want, 0)
    }

    /// As [`Admission::admit`], also reserving `extra` Receives beyond the grant: the
    /// ones a connection posts for its callbacks' replies (RFC 8167 §4.3.2, R8167-08),
    /// so a callback never fails for lack of them in steady state. Every connection
    /// still to come keeps `floor + extra`. Release `grant + extra`.
    pub fn admit_with(&mut self, live: usize, want: u32, extra: u32) -> Verdict {
        if live >= self.max_connections {
            return Verdict::Full;
        }
        let want = want.max(1);
        let floor = self.floor.min(want) as usize;
        let extra = extra as usize;
        let unit = floor.saturating_add(extra);
        let free = self.budget.saturating_sub(self.reserved);
        if free < unit {
            return Verdict::NoBuffers;
        }
        // Floors of the connections that may still come after this one.
        let later = self.max_connections.saturating_sub(live.saturating_add(1));
        let keep = later.saturating_mul(unit);
        let room = free - extra; // >= floor, checked above
        let grant = free
            .saturating_sub(keep)
            .saturating_sub(extra)
            .max(floor)
            .min(want as usize)
            .min(room);
        self.reserved = self.reserved.saturating_add(grant + extra);
        // `grant <= want`, a u32.
        Verdict::Grant(grant as u32)
    }

    /// Gives back the reservation of a connection that is gone.
    pub fn release(&mut self, grant: u32) {
        self.reserved = self.reserved.saturating_sub(grant as usize);
    }
}

/// A log line at most once per `every`, counting what it held back (a peer that
/// connects in a loop must not flood the log).
#[derive(Debug, Clone)]
pub struct Throttle {
    every: Duration,
    last: Option<Instant>,
    held: u64,
}

impl Throttle {
    pub const fn new(every: Duration) -> Throttle {
        Throttle {
            every,
            last: None,
            held: 0,
        }
    }

    /// `Some(lines held back since the last one)` when a line may be written now.
    pub fn ready(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(t) if now.saturating_duration_since(t) < self.every => {
                self.held = self.held.saturating_add(1);
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.held))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_give_the_first_connections_full_credits_and_every_later_one_the_floor() {
        // 1024 small buffers, floor 8, 64 connections, 128 credits wanted.
        let mut a = Admission::new(1024, 8, 64);
        assert_eq!(a.budget(), 768);
        let mut grants = Vec::new();
        for live in 0..64 {
            match a.admit(live, 128) {
                Verdict::Grant(g) => grants.push(g),
                v => panic!("connection {live} refused: {v:?}"),
            }
        }
        assert_eq!(&grants[..4], &[128, 128, 24, 8]);
        assert!(grants[3..].iter().all(|&g| g == 8));
        assert_eq!(a.reserved(), 768);
        assert!(a.reserved() <= a.budget());
        assert_eq!(a.admit(64, 128), Verdict::Full);
    }

    #[test]
    fn a_small_budget_refuses_once_the_floor_no_longer_fits_and_release_reopens() {
        let mut a = Admission::new(40, 8, 64); // budget 30
        assert_eq!(a.admit(0, 128), Verdict::Grant(8));
        assert_eq!(a.admit(1, 128), Verdict::Grant(8));
        assert_eq!(a.admit(2, 128), Verdict::Grant(8));
        assert_eq!(a.admit(3, 128), Verdict::NoBuffers);
        a.release(8);
        assert_eq!(a.admit(2, 128), Verdict::Grant(8));
    }

    #[test]
    fn grants_never_exceed_what_was_asked_nor_the_budget_and_are_never_zero() {
        for &(count, floor, max, want) in &[
            (0usize, 8u32, 64usize, 128u32),
            (1, 0, 1, 0),
            (8, 8, 1, 4),
            (usize::MAX, u32::MAX, usize::MAX, u32::MAX),
            (1 << 20, 8, 1, 4096),
        ] {
            let mut a = Admission::new(count, floor, max);
            let mut live = 0;
            while let Verdict::Grant(g) = a.admit(live, want) {
                assert!(g >= 1 && g <= want.max(1), "grant {g} for want {want}");
                assert!(a.reserved() <= a.budget());
                live += 1;
                if live > 100 {
                    break;
                }
            }
        }
    }

    #[test]
    fn r8167_08_callback_receives_are_reserved_with_the_grant() {
        // Budget 30, floor 8, 2 extra per connection: three connections of 8 + 2.
        let mut a = Admission::new(40, 8, 64);
        for live in 0..3 {
            assert_eq!(a.admit_with(live, 128, 2), Verdict::Grant(8));
        }
        assert_eq!(a.reserved(), 30);
        assert_eq!(a.admit_with(3, 128, 2), Verdict::NoBuffers);
        a.release(8 + 2);
        // 10 free: 8 + 2 fit, 9 + 2 would not.
        assert_eq!(a.admit_with(2, 9, 2), Verdict::Grant(8));
        // A lone connection with a large budget gets its want plus the extras.
        let mut a = Admission::new(1024, 8, 1);
        assert_eq!(a.admit_with(0, 128, 2), Verdict::Grant(128));
        assert_eq!(a.reserved(), 130);
    }

    #[test]
    fn throttle_lets_one_line_through_per_period_and_counts_the_rest() {
        let mut t = Throttle::new(Duration::from_secs(1));
        let t0 = Instant::now();
        assert_eq!(t.ready(t0), Some(0));
        assert_eq!(t.ready(t0), None);
        assert_eq!(t.ready(t0 + Duration::from_millis(500)), None);
        assert_eq!(t.ready(t0 + Duration::from_secs(2)), Some(2));
    }
}
