//! A cheap per-call clock for latency histograms.
//!
//! Why not `Instant::now()` everywhere: it is a vDSO `clock_gettime` (tens of
//! instructions, and a real system call on hosts whose clocksource is not the TSC),
//! paid twice per call. On x86-64 with an invariant TSC (`constant_tsc` and
//! `nonstop_tsc`) a reading is one `rdtsc`; it is converted to nanoseconds with a
//! multiplier calibrated once against `Instant` at start. Both readings of a call are
//! taken on the same pinned reactor thread, so TSC skew between cores does not matter
//! (differences saturate at 0 if a thread ever migrates). Elsewhere the clock falls
//! back to `Instant`.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Ticks since an arbitrary origin, and how to turn tick differences into ns.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    tsc: bool,
    /// Nanoseconds per tick, 32.32 fixed point.
    ns_per_tick: u64,
    epoch: Instant,
}

impl Clock {
    /// The process-wide clock (calibrated on first use, about 20 ms).
    pub fn get() -> Clock {
        static CLOCK: OnceLock<Clock> = OnceLock::new();
        *CLOCK.get_or_init(Clock::calibrate)
    }

    /// A clock that always uses `Instant` (tests, and hosts without an invariant TSC).
    pub fn instant() -> Clock {
        Clock {
            tsc: false,
            ns_per_tick: 1 << 32,
            epoch: Instant::now(),
        }
    }

    fn calibrate() -> Clock {
        if !invariant_tsc() {
            return Clock::instant();
        }
        let t0 = Instant::now();
        let c0 = rdtsc();
        std::thread::sleep(Duration::from_millis(20));
        let c1 = rdtsc();
        let ns = t0.elapsed().as_nanos() as u64;
        let ticks = c1.saturating_sub(c0);
        if ticks == 0 || ns == 0 {
            return Clock::instant();
        }
        Clock {
            tsc: true,
            ns_per_tick: ((ns as u128) << 32).div_euclid(ticks as u128) as u64,
            epoch: Instant::now(),
        }
    }

    /// Whether readings come from the TSC.
    pub fn is_tsc(&self) -> bool {
        self.tsc
    }

    /// The current reading, in ticks.
    #[inline]
    pub fn now(&self) -> u64 {
        if self.tsc {
            rdtsc()
        } else {
            self.epoch.elapsed().as_nanos() as u64
        }
    }

    /// Nanoseconds between two readings (0 if `end` precedes `start`).
    #[inline]
    pub fn ns_between(&self, start: u64, end: u64) -> u64 {
        let ticks = end.saturating_sub(start) as u128;
        ((ticks * self.ns_per_tick as u128) >> 32) as u64
    }
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn rdtsc() -> u64 {
    // SAFETY: RDTSC has no memory effects; every x86-64 CPU implements it.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn rdtsc() -> u64 {
    0
}

/// The TSC ticks at a constant rate in every P/C-state (Linux's cpuinfo flags).
fn invariant_tsc() -> bool {
    if !cfg!(target_arch = "x86_64") {
        return false;
    }
    let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
        return false;
    };
    let Some(flags) = info.lines().find(|l| l.starts_with("flags")) else {
        return false;
    };
    let has = |f: &str| flags.split_whitespace().any(|w| w == f);
    has("constant_tsc") && has("nonstop_tsc")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_a_sleep_within_reason() {
        for c in [Clock::get(), Clock::instant()] {
            let a = c.now();
            std::thread::sleep(Duration::from_millis(5));
            let ns = c.ns_between(a, c.now());
            assert!(
                (4_000_000..500_000_000).contains(&ns),
                "{ns} ns (tsc {})",
                c.tsc
            );
        }
    }

    #[test]
    fn backwards_is_zero() {
        let c = Clock::get();
        assert_eq!(c.ns_between(10, 5), 0);
    }
}
