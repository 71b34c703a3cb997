//! The pinned run-to-completion loop.
//!
//! One reactor thread per configured core runs [`run`]: it calls its [`Poller`] (which
//! polls every socket, completion queue, ring and timer the reactor owns) over and over.
//! With [`IdlePolicy::Busy`] it never sleeps (the SPDK default: lowest latency, one core
//! at 100 %). With [`IdlePolicy::Adaptive`] it keeps polling for a while after the last
//! work (a number of empty polls and a spin time), then backs off to a bounded event
//! wait, which small machines and CI need.
//!
//! Sharing: [`Counters`] are written only by the owning reactor (Relaxed load + store, no
//! read-modify-write on the hot path) and read by the stats thread (Relaxed loads; the
//! values are monotonic but not a consistent snapshot across fields).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// `engine.idle`: what a reactor does when a poll finds no work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdlePolicy {
    /// Poll forever, never sleep.
    Busy,
    /// Once `spins` consecutive empty polls came AND `spin` has passed since the first
    /// of them, sleep up to `max_sleep` waiting for I/O or a wake; keep sleeping on every
    /// further empty poll until work shows up. The spin time is what matters for
    /// latency: a request arriving within it is seen without a wake-up (an epoll wake
    /// and a context switch), while a count of polls means a different time on every
    /// machine and load.
    Adaptive {
        spins: u32,
        spin: Duration,
        /// The spin instead of `spin` while the poller reports bulk transfer
        /// ([`Poller::bulk`]): what comes next is more of a large record or the
        /// completion of a large copy, which on a machine whose cores the reactor shares
        /// (with the client, the kernel's copy threads) arrives sooner if the reactor
        /// gives its core away than if it spins on it, and a wake-up is small beside a
        /// large transfer.
        bulk_spin: Duration,
        max_sleep: Duration,
    },
}

/// Per-reactor counters, always on.
///
/// `run` maintains `polls`, `busy_polls` (polls that did work) and `sleeps`; the poller
/// maintains `ops`, `bytes_in`, `bytes_out` and `parked` (use [`Counters::add`]).
#[derive(Default, Debug)]
pub struct Counters {
    pub polls: AtomicU64,
    pub busy_polls: AtomicU64,
    pub ops: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub parked: AtomicU64,
    pub sleeps: AtomicU64,
}

impl Counters {
    /// Single-writer increment: a relaxed load and store, no locked instruction.
    /// Only the owning reactor may call this on its own counters.
    #[inline]
    pub fn add(c: &AtomicU64, n: u64) {
        c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }
}

/// Everything one reactor polls.
pub trait Poller {
    /// One pass over everything this reactor owns; returns units of work done (0 = idle pass).
    fn poll(&mut self) -> usize;
    /// Sleep at most `max` waiting for I/O or a wake (adaptive idle only).
    fn sleep(&mut self, max: Duration);
    /// True while the recent work was bulk transfer (large records or replies, large
    /// storage copies in flight): an adaptive reactor then spins `bulk_spin`, not
    /// `spin`, before it sleeps. Called on empty polls only.
    fn bulk(&self) -> bool {
        false
    }
    /// The spin before sleeping, asked on empty polls only: `bulk_spin` while
    /// [`Poller::bulk`], else `spin`. A poller that knows what its idle run waits for
    /// may answer less (the gateway: its calls are all behind slow worker calls).
    fn spin(&mut self, spin: Duration, bulk_spin: Duration) -> Duration {
        if self.bulk() {
            bulk_spin
        } else {
            spin
        }
    }
}

/// Runs the run-to-completion loop until `stop` is set: poll; count polls/busy_polls;
/// with Busy never sleep; with Adaptive, once `spins` consecutive empty polls came and
/// `spin` passed since the first, call `sleep(max_sleep)` (count sleeps).
pub fn run<P: Poller>(p: &mut P, idle: IdlePolicy, stop: &AtomicBool, counters: &Counters) {
    let mut empty: u32 = 0;
    // When the current run of empty polls began (read only while idle and `spin` > 0:
    // a busy reactor never reads the clock here).
    let mut idle_since: Option<Instant> = None;
    while !stop.load(Ordering::Relaxed) {
        let work = p.poll();
        Counters::add(&counters.polls, 1);
        if work > 0 {
            Counters::add(&counters.busy_polls, 1);
            empty = 0;
            idle_since = None;
            continue;
        }
        empty = empty.saturating_add(1);
        if let IdlePolicy::Adaptive {
            spins,
            spin,
            bulk_spin,
            max_sleep,
        } = idle
        {
            // Rule: sleep once both limits are reached; stay sleep-prone (sleep on each
            // further empty poll) until a poll finds work.
            let spin = p.spin(spin, bulk_spin);
            if empty >= spins && spun(spin, &mut idle_since) {
                p.sleep(max_sleep);
                Counters::add(&counters.sleeps, 1);
            }
        }
    }
}

/// Whether `spin` has passed since the run of empty polls began (starting it now if
/// it had not).
fn spun(spin: Duration, idle_since: &mut Option<Instant>) -> bool {
    if spin.is_zero() {
        return true;
    }
    let now = Instant::now();
    now.saturating_duration_since(*idle_since.get_or_insert(now)) >= spin
}

/// Spawns a named thread pinned to `core` with core_affinity (log a warning via tracing
/// if pinning fails, continue unpinned) and runs `f` on it.
pub fn spawn_pinned<F: FnOnce() + Send + 'static>(
    name: String,
    core: Option<usize>,
    f: F,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let thread_name = name.clone();
    std::thread::Builder::new().name(name).spawn(move || {
        if let Some(id) = core {
            // core_affinity indexes a fixed-size CPU set and panics beyond it.
            let in_set = id < libc::CPU_SETSIZE as usize;
            if !in_set || !core_affinity::set_for_current(core_affinity::CoreId { id }) {
                tracing::warn!(
                    "reactor thread {thread_name}: pinning to core {id} failed; running unpinned"
                );
            }
        }
        f()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Counts calls; does work on the polls listed in `busy_at`; sets `stop` after
    /// `stop_after` polls.
    struct Fake<'a> {
        polls: u64,
        sleeps: Vec<u64>,
        busy_at: Vec<u64>,
        stop_after: u64,
        stop: &'a AtomicBool,
    }

    impl Poller for Fake<'_> {
        fn poll(&mut self) -> usize {
            self.polls += 1;
            if self.polls >= self.stop_after {
                self.stop.store(true, Ordering::Relaxed);
            }
            usize::from(self.busy_at.contains(&self.polls))
        }
        fn sleep(&mut self, max: Duration) {
            assert_eq!(max, Duration::from_millis(3));
            self.sleeps.push(self.polls);
        }
    }

    fn fake(stop: &AtomicBool, stop_after: u64, busy_at: Vec<u64>) -> Fake<'_> {
        Fake {
            polls: 0,
            sleeps: Vec::new(),
            busy_at,
            stop_after,
            stop,
        }
    }

    const ADAPTIVE: IdlePolicy = IdlePolicy::Adaptive {
        spins: 3,
        spin: Duration::ZERO,
        bulk_spin: Duration::ZERO,
        max_sleep: Duration::from_millis(3),
    };

    #[test]
    fn stops_on_flag() {
        let stop = AtomicBool::new(false);
        let c = Counters::default();
        let mut f = fake(&stop, 10, vec![]);
        run(&mut f, IdlePolicy::Busy, &stop, &c);
        assert_eq!(f.polls, 10);
        assert_eq!(c.polls.load(Ordering::Relaxed), 10);
    }

    #[test]
    fn flag_already_set_means_no_poll() {
        let stop = AtomicBool::new(true);
        let c = Counters::default();
        let mut f = fake(&stop, 10, vec![]);
        run(&mut f, ADAPTIVE, &stop, &c);
        assert_eq!(f.polls, 0);
    }

    #[test]
    fn busy_never_sleeps() {
        let stop = AtomicBool::new(false);
        let c = Counters::default();
        let mut f = fake(&stop, 1000, vec![5]);
        run(&mut f, IdlePolicy::Busy, &stop, &c);
        assert!(f.sleeps.is_empty());
        assert_eq!(c.sleeps.load(Ordering::Relaxed), 0);
        assert_eq!(c.busy_polls.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn adaptive_sleeps_after_n_empty_polls() {
        let stop = AtomicBool::new(false);
        let c = Counters::default();
        // Work on poll 1 and 7; idle otherwise; stop at 10.
        let mut f = fake(&stop, 10, vec![1, 7]);
        run(&mut f, ADAPTIVE, &stop, &c);
        // Empty polls 2,3,4: the third one in a row sleeps, and so do 5 and 6;
        // 7 works, which resets the count; 8,9 spin and 10 sleeps.
        assert_eq!(f.sleeps, vec![4, 5, 6, 10]);
        assert_eq!(c.sleeps.load(Ordering::Relaxed), 4);
        assert_eq!(c.polls.load(Ordering::Relaxed), 10);
        assert_eq!(c.busy_polls.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn adaptive_zero_spins_sleeps_on_every_empty_poll() {
        let stop = AtomicBool::new(false);
        let c = Counters::default();
        let mut f = fake(&stop, 4, vec![2]);
        let idle = IdlePolicy::Adaptive {
            spins: 0,
            spin: Duration::ZERO,
            bulk_spin: Duration::ZERO,
            max_sleep: Duration::from_millis(3),
        };
        run(&mut f, idle, &stop, &c);
        assert_eq!(f.sleeps, vec![1, 3, 4]);
    }

    /// Polls that take ~1 ms each, with work on the polls in `busy_at`; records when
    /// each sleep came and when the last work was done.
    struct Timed<'a> {
        polls: u64,
        busy_at: Vec<u64>,
        stop_after: u64,
        stop: &'a AtomicBool,
        last_work: Instant,
        /// (poll number, time since the last work) of each sleep.
        sleeps: Vec<(u64, Duration)>,
        /// From this poll on, `bulk()` says the work is bulk transfer.
        bulk_from: u64,
    }

    impl Poller for Timed<'_> {
        fn poll(&mut self) -> usize {
            self.polls += 1;
            if self.polls >= self.stop_after {
                self.stop.store(true, Ordering::Relaxed);
            }
            std::thread::sleep(Duration::from_millis(1));
            if self.busy_at.contains(&self.polls) {
                self.last_work = Instant::now();
                return 1;
            }
            0
        }
        fn sleep(&mut self, _max: Duration) {
            self.sleeps.push((self.polls, self.last_work.elapsed()));
        }
        fn bulk(&self) -> bool {
            self.polls >= self.bulk_from
        }
    }

    #[test]
    fn adaptive_spins_for_its_spin_time_before_sleeping() {
        let stop = AtomicBool::new(false);
        let c = Counters::default();
        let mut t = Timed {
            polls: 0,
            busy_at: vec![1, 40],
            stop_after: 80,
            stop: &stop,
            last_work: Instant::now(),
            sleeps: Vec::new(),
            bulk_from: u64::MAX,
        };
        let spin = Duration::from_millis(15);
        let idle = IdlePolicy::Adaptive {
            spins: 1,
            spin,
            bulk_spin: spin,
            max_sleep: Duration::from_millis(3),
        };
        run(&mut t, idle, &stop, &c);
        // Every sleep comes at least `spin` after the last work (measured from the
        // first empty poll, which follows it), and the reactor does sleep after each
        // of the two busy polls.
        assert!(t.sleeps.iter().all(|&(_, d)| d >= spin), "{:?}", t.sleeps);
        assert!(t.sleeps.iter().any(|&(p, _)| p < 40), "{:?}", t.sleeps);
        assert!(t.sleeps.iter().any(|&(p, _)| p > 40), "{:?}", t.sleeps);
        // No sleep on the polls right after work (1 ms each, less than the spin).
        assert!(!t.sleeps.iter().any(|&(p, _)| p == 2 || p == 41));
    }

    /// After bulk work the reactor sleeps at once (`bulk_spin` 0), after small work
    /// it spins its `spin` first.
    #[test]
    fn adaptive_uses_the_bulk_spin_after_bulk_work() {
        let stop = AtomicBool::new(false);
        let c = Counters::default();
        let mut t = Timed {
            polls: 0,
            busy_at: vec![1, 40],
            stop_after: 60,
            stop: &stop,
            last_work: Instant::now(),
            sleeps: Vec::new(),
            bulk_from: 40,
        };
        let spin = Duration::from_millis(15);
        let idle = IdlePolicy::Adaptive {
            spins: 1,
            spin,
            bulk_spin: Duration::ZERO,
            max_sleep: Duration::from_millis(3),
        };
        run(&mut t, idle, &stop, &c);
        // Small work at poll 1: no sleep before the spin has passed.
        assert!(
            t.sleeps
                .iter()
                .filter(|&&(p, _)| p < 40)
                .all(|&(_, d)| d >= spin),
            "{:?}",
            t.sleeps
        );
        // Bulk work at poll 40: the first empty poll after it sleeps.
        assert!(t.sleeps.iter().any(|&(p, _)| p == 41), "{:?}", t.sleeps);
    }

    #[test]
    fn spawn_pinned_runs_named_thread() {
        let seen = Arc::new(std::sync::Mutex::new(None));
        let s2 = seen.clone();
        let h = spawn_pinned("reactor-test".into(), Some(0), move || {
            *s2.lock().unwrap() = std::thread::current().name().map(String::from);
        })
        .unwrap();
        h.join().unwrap();
        assert_eq!(seen.lock().unwrap().as_deref(), Some("reactor-test"));
        // A core that does not exist: pinning fails, the thread still runs.
        let h = spawn_pinned("reactor-bad".into(), Some(1000), || {}).unwrap();
        h.join().unwrap();
        let h = spawn_pinned("reactor-huge".into(), Some(100_000), || {}).unwrap();
        h.join().unwrap();
    }
}
