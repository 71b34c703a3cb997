//! Group commit of directory fsyncs.
//!
//! A CREATE or REMOVE answers only once its directory entry is on stable storage
//! (RFC 1813 §3.3.8, §3.3.12: the NFSv3 server commits a namespace change before it
//! replies; RFC 8881 §18.16.3 likewise for OPEN with CREATE), which on a POSIX file
//! system takes a fsync of the directory after the change. A fsync that *starts*
//! after a change completed covers it, whoever calls it, so workers changing the same
//! directory at once need not each pay one: a change takes a ticket when it has
//! completed; the fsync a worker starts covers every ticket taken before it started;
//! a worker whose ticket a running fsync does not cover waits for it to end and then
//! starts the next one (or finds that someone else did). At queue depth 1 this is one
//! fsync per change, as before; with N workers creating in one directory, about one
//! fsync per round of N.
//!
//! Errors: a failed fsync fails every ticket it was to cover, not only its caller's
//! (on Linux a writeback error is reported once per open file, so a waiter's own
//! retry could succeed on what was never written).
//!
//! Sharing: one table per backend, shared by the workers; its mutex guards the map
//! lookup only, and each directory's state its own short critical sections (never held
//! across the fsync).
//!
//! On a file system that orders metadata through one log (`flush`, `backend.fs.flush`)
//! the same ticket rule runs once per file system instead of once per directory: one
//! [`DirSync`] whose "fsync" is a log force covering every change made before it
//! started, in any directory.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Directories (device, inode) with a sync state; idle ones are dropped past this.
const KEEP: usize = 256;

#[derive(Default)]
pub struct DirSyncs {
    dirs: Mutex<HashMap<(u64, u64), Arc<DirSync>>>,
}

/// One group commit: tickets and the flush in flight (a directory's, or the log's).
#[derive(Default)]
pub struct DirSync {
    state: Mutex<State>,
    done: Condvar,
}

#[derive(Default)]
struct State {
    /// Tickets handed out: one per completed change.
    taken: u64,
    /// Every ticket up to this one is on stable storage.
    synced: u64,
    /// The fsync in flight covers tickets up to this one.
    running: Option<u64>,
    /// The last failed fsync was to cover tickets in `(from, to]`.
    failed: (u64, u64),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl DirSyncs {
    /// Returns once a fsync of directory `dir` (device, inode) that started after
    /// this call's change (completed before the call) has succeeded; `fsync` runs
    /// that fsync when no other worker's will do.
    pub fn sync(&self, dir: (u64, u64), fsync: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
        self.of(dir).sync(fsync)
    }

    fn of(&self, dir: (u64, u64)) -> Arc<DirSync> {
        let mut dirs = lock(&self.dirs);
        if dirs.len() >= KEEP && !dirs.contains_key(&dir) {
            // Only this table holds an idle directory's state.
            dirs.retain(|_, d| Arc::strong_count(d) > 1);
        }
        dirs.entry(dir).or_default().clone()
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.dirs).len()
    }
}

impl DirSync {
    /// Returns once a `fsync` that started after this call's change (completed before
    /// the call) has succeeded, running it when no other caller's will do.
    pub fn sync(&self, fsync: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
        self.sync_gathered(|| 0, fsync)
    }

    /// `sync`, where the leader first lets changes about to complete join its flush:
    /// `others()` says how many other callers may be about to change and sync (calls in
    /// flight at the workers, `backend::pending`, less the tickets already waiting here).
    /// While some are, each yield brings a new ticket and the gathering is young, the
    /// leader yields its core (at most `GATHER_YIELDS` times, for at most
    /// `GATHER_FOR`): on a machine with fewer cores than busy threads the woken worker
    /// runs before the reactor has read the rest of a burst, or before the workers it
    /// woke for the burst's other calls have run; the yield lets them make their
    /// changes, take tickets and wait behind the leader instead of each leading a
    /// flush of its own (docs/performance.md "A burst's changes share one log force"). The flush still covers only tickets taken before it
    /// starts (read after the gathering), so the rule above holds. With `others() == 0`
    /// (queue depth 1) no yield, no clock read.
    pub fn sync_gathered(
        &self,
        others: impl Fn() -> usize,
        fsync: impl FnOnce() -> io::Result<()>,
    ) -> io::Result<()> {
        let mut st = lock(&self.state);
        st.taken += 1;
        let ticket = st.taken;
        loop {
            // A failed fsync that was to cover this ticket decides, even if a later
            // one succeeded: Linux reports a writeback error once per open file, so
            // the later fsync may not have written what the failed one lost.
            if st.failed.0 < ticket && ticket <= st.failed.1 {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            if st.synced >= ticket {
                return Ok(());
            }
            if st.running.is_none() {
                break;
            }
            st = self.done.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        // Claimed while gathering: later tickets wait instead of leading.
        st.running = Some(st.taken);
        drop(st);
        self.gather(&others);
        let mut st = lock(&self.state);
        let (from, upto) = (st.synced, st.taken);
        st.running = Some(upto);
        drop(st);
        let res = fsync();
        let mut st = lock(&self.state);
        st.running = None;
        match &res {
            Ok(()) => st.synced = st.synced.max(upto),
            // Merged with an earlier failure (the range between may fail tickets a
            // success covered: a spurious EIO is safe, a lost one is not).
            Err(_) if st.failed.1 > st.failed.0 => {
                st.failed = (st.failed.0.min(from), st.failed.1.max(upto))
            }
            Err(_) => st.failed = (from, upto),
        }
        drop(st);
        self.done.notify_all();
        res
    }
}

impl DirSync {
    /// The leader's wait for the changes of calls in flight (`sync_gathered`).
    fn gather(&self, others: &impl Fn() -> usize) {
        let waiting = || {
            let st = lock(&self.state);
            (st.taken - st.synced).saturating_sub(1) as usize
        };
        // Alone (queue depth 1): one relaxed load, no lock.
        let first = others();
        if first == 0 || first <= waiting() {
            return;
        }
        let start = std::time::Instant::now();
        let taken = || lock(&self.state).taken;
        for _ in 0..GATHER_YIELDS {
            let before = taken();
            std::thread::yield_now();
            // A yield that brought no change: the calls still in flight are not
            // about to change anything (reads, a reply being encoded, a slow store).
            if taken() == before || others() <= waiting() || start.elapsed() >= GATHER_FOR {
                return;
            }
        }
    }
}

/// At most this many yields of a flush's leader before it starts (`sync_gathered`):
/// each lets the runnable workers of a burst reach their change; past them the calls
/// still in flight are not about to change anything (reads, listings, a slow store).
const GATHER_YIELDS: usize = 4;
/// And for at most this long: a yield that hands the core to another thread returns
/// only when the scheduler picks the leader again.
const GATHER_FOR: std::time::Duration = std::time::Duration::from_micros(200);

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    /// Every caller returns only after a fsync that started after its change; while
    /// one fsync runs, the changes that queue behind it share the next one.
    #[test]
    fn concurrent_changes_share_fsyncs_that_started_after_them() {
        let syncs = Arc::new(DirSyncs::default());
        // Changes made (a counter standing for directory entries) and, per fsync,
        // how many changes had completed when it started.
        let changes = Arc::new(AtomicU64::new(0));
        let fsyncs = Arc::new(AtomicU64::new(0));
        let covered = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (syncs, changes, fsyncs, covered) = (
                    syncs.clone(),
                    changes.clone(),
                    fsyncs.clone(),
                    covered.clone(),
                );
                std::thread::spawn(move || {
                    for _ in 0..20 {
                        let mine = changes.fetch_add(1, Ordering::SeqCst) + 1;
                        syncs
                            .sync((1, 2), || {
                                let at_start = changes.load(Ordering::SeqCst);
                                std::thread::sleep(Duration::from_millis(2));
                                fsyncs.fetch_add(1, Ordering::SeqCst);
                                covered.fetch_max(at_start, Ordering::SeqCst);
                                Ok(())
                            })
                            .unwrap();
                        // A fsync that started once this change was made has ended.
                        assert!(covered.load(Ordering::SeqCst) >= mine);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let n = fsyncs.load(Ordering::SeqCst);
        assert!(n < 160, "8 threads × 20 changes shared no fsync ({n})");
        assert!(
            n >= 20,
            "a thread's 20 changes need 20 fsyncs at least ({n})"
        );
    }

    /// Pins the calling thread to `cpu`: the burst below then interleaves only through
    /// the scheduler's picks, as workers outnumbering the cores do.
    fn pin(cpu: Option<core_affinity::CoreId>) {
        if let Some(id) = cpu {
            core_affinity::set_for_current(id);
        }
    }

    fn first_cpu() -> Option<core_affinity::CoreId> {
        core_affinity::get_core_ids()?.into_iter().next()
    }

    /// N calls in flight on one core, released at once: the first to reach its flush
    /// yields to the others (`sync_gathered`), so their changes share its flush —
    /// fewer than N flushes, each covering only changes completed before it started.
    /// Without the gathering each call leads its own (an instant flush ends before
    /// the next thread runs).
    #[test]
    fn a_burst_in_flight_shares_one_flush() {
        const N: usize = 8;
        let cpu = first_cpu();
        let mut best = usize::MAX;
        // A few rounds: another process on the core can take a yield's turn.
        for _ in 0..5 {
            let d = Arc::new(DirSync::default());
            let in_flight = Arc::new(std::sync::atomic::AtomicUsize::new(N));
            let changes = Arc::new(AtomicU64::new(0));
            let (flushes, covered) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
            let go = Arc::new(std::sync::Barrier::new(N));
            let threads: Vec<_> = (0..N)
                .map(|_| {
                    let (d, in_flight, changes, flushes, covered, go) = (
                        d.clone(),
                        in_flight.clone(),
                        changes.clone(),
                        flushes.clone(),
                        covered.clone(),
                        go.clone(),
                    );
                    std::thread::spawn(move || {
                        pin(cpu);
                        go.wait();
                        let mine = changes.fetch_add(1, Ordering::SeqCst) + 1;
                        let others = || in_flight.load(Ordering::SeqCst) - 1;
                        d.sync_gathered(others, || {
                            covered.fetch_max(changes.load(Ordering::SeqCst), Ordering::SeqCst);
                            flushes.fetch_add(1, Ordering::SeqCst);
                            Ok(())
                        })
                        .unwrap();
                        // Settled: no longer a call another leader waits for.
                        in_flight.fetch_sub(1, Ordering::SeqCst);
                        assert!(covered.load(Ordering::SeqCst) >= mine);
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            best = best.min(flushes.load(Ordering::SeqCst) as usize);
        }
        assert!(best < N / 2, "{N} calls in flight: {best} flushes at best");
    }

    /// Alone (nothing else in flight) the leader flushes at once: `others` asked
    /// once, no yield; with calls in flight that never change anything (reads) it
    /// stops gathering after a yield that brought no one, so nothing waits long.
    #[test]
    fn gathering_never_waits_for_calls_that_change_nothing() {
        let d = DirSync::default();
        let asked = AtomicU64::new(0);
        let alone = || {
            asked.fetch_add(1, Ordering::SeqCst);
            0
        };
        d.sync_gathered(alone, || Ok(())).unwrap();
        assert_eq!(asked.load(Ordering::SeqCst), 1);
        let t = std::time::Instant::now();
        for _ in 0..100 {
            d.sync_gathered(|| 31, || Ok(())).unwrap();
        }
        // One yield each (≤ GATHER_FOR past the first), not 100 stalls.
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    }

    /// A failed flush during a gathering burst still fails every ticket it covered.
    #[test]
    fn a_gathered_failure_fails_the_burst() {
        let d = Arc::new(DirSync::default());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let d = d.clone();
                std::thread::spawn(move || {
                    d.sync_gathered(|| 3, || Err(io::Error::from_raw_os_error(libc::EIO)))
                })
            })
            .collect();
        for t in threads {
            assert!(t.join().unwrap().is_err());
        }
        assert!(d.sync(|| Ok(())).is_ok());
    }

    /// A failed fsync fails the change of every caller it was to cover; later
    /// changes sync again.
    #[test]
    fn a_failed_fsync_fails_every_change_it_covered() {
        let syncs = DirSyncs::default();
        let eio = || Err(io::Error::from_raw_os_error(libc::EIO));
        assert!(syncs.sync((1, 1), eio).is_err());
        assert!(syncs.sync((1, 1), || Ok(())).is_ok());
        let d = syncs.of((1, 1));
        // A ticket of the failed range, taken while that fsync ran.
        {
            let mut st = lock(&d.state);
            st.failed = (st.synced, st.taken + 1);
        }
        assert_eq!(
            d.sync(|| panic!("covered by the failed fsync: no fsync of its own"))
                .unwrap_err()
                .raw_os_error(),
            Some(libc::EIO)
        );
    }

    /// A ticket the failed fsync was to cover fails even when a later fsync that also
    /// covers it succeeded before its caller woke; a second failure widens the range.
    #[test]
    fn a_later_success_does_not_hide_a_failure_that_covered_the_change() {
        let syncs = DirSyncs::default();
        let d = syncs.of((1, 1));
        {
            let mut st = lock(&d.state);
            st.failed = (st.synced, st.taken + 1);
            st.synced = st.taken + 5;
        }
        assert_eq!(
            d.sync(|| panic!("covered already"))
                .unwrap_err()
                .raw_os_error(),
            Some(libc::EIO)
        );
        let d = syncs.of((1, 2));
        {
            let mut st = lock(&d.state);
            (st.taken, st.synced, st.failed) = (3, 2, (0, 1));
        }
        let eio = || Err(io::Error::from_raw_os_error(libc::EIO));
        assert!(d.sync(eio).is_err());
        assert_eq!(
            lock(&d.state).failed,
            (0, 4),
            "the earlier failure stays in the range"
        );
    }

    #[test]
    fn idle_directories_are_dropped() {
        let syncs = DirSyncs::default();
        for ino in 0..(KEEP as u64 * 3) {
            syncs.sync((1, ino), || Ok(())).unwrap();
        }
        assert!(syncs.len() <= KEEP);
    }
}
