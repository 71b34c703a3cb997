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
    /// flight at the workers that may change a name or force the log,
    /// `backend::pending`), compared with the tickets already waiting here. While more
    /// are in flight than wait, each yield brought a new ticket, and the gathering is
    /// younger than `GATHER_FOR`, the leader yields its core (at most `GATHER_YIELDS`
    /// times): on a machine with fewer cores than busy threads the woken worker runs
    /// before the reactor has read the rest of a burst, or before the workers it woke
    /// for the burst's other calls have run; the yield lets them make their changes,
    /// take tickets and wait behind the leader instead of each leading a flush of its
    /// own (docs/performance.md "A burst's changes share one log force").
    /// `GATHER_FOR` only stops further yields: one `sched_yield` returns when the
    /// scheduler picks the leader again, which under EEVDF may be a whole slice of
    /// each runnable thread on its core (milliseconds on a loaded machine), while the
    /// tickets already waiting wait too. Hence `others` counts only calls that can
    /// join: a READ in flight never makes a leader yield.
    /// The flush still covers only tickets taken before it starts (read after the
    /// gathering), so the rule above holds. With `others() == 0` (queue depth 1) no
    /// yield, no clock read.
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
    /// The leader's wait for the changes of calls in flight (`sync_gathered`); the
    /// yields it made.
    fn gather(&self, others: &impl Fn() -> usize) -> usize {
        let waiting = || {
            let st = lock(&self.state);
            (st.taken - st.synced).saturating_sub(1) as usize
        };
        // Alone (queue depth 1): one relaxed load, no lock.
        let first = others();
        if first == 0 || first <= waiting() {
            return 0;
        }
        let start = std::time::Instant::now();
        let taken = || lock(&self.state).taken;
        for n in 1..=GATHER_YIELDS {
            let before = taken();
            std::thread::yield_now();
            // A yield that brought no change: the calls still in flight are not
            // about to change anything (a reply being encoded, a slow store).
            if taken() == before || others() <= waiting() || start.elapsed() >= GATHER_FOR {
                return n;
            }
        }
        GATHER_YIELDS
    }
}

/// At most this many yields of a flush's leader before it starts (`sync_gathered`):
/// each lets the runnable workers of a burst reach their change; past them the calls
/// still in flight are not about to change anything (reads, listings, a slow store).
const GATHER_YIELDS: usize = 4;
/// No yield starts after this long. It bounds the number of yields, not the wait: a
/// yield that hands the core to another thread returns only when the scheduler picks
/// the leader again (up to a slice per runnable thread under EEVDF).
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
            assert!(core_affinity::set_for_current(id), "pinning to {id:?}");
        }
    }

    fn first_cpu() -> Option<core_affinity::CoreId> {
        core_affinity::get_core_ids()?.into_iter().next()
    }

    /// A burst of `N` calls, all in flight (the counter `pending` keeps at the
    /// workers) and pinned to one core, released at once; each makes its change
    /// (`changes`), syncs through `sync_gathered` with `flush`, and is counted out
    /// once answered. Each returns only after a flush that started after its change
    /// completed has ended: `flush` gets the changes completed when it started and
    /// returns what they were covered with (they count as covered only once it ends).
    /// The calls' results, in thread order, with their change numbers.
    fn burst(
        d: &Arc<DirSync>,
        n: usize,
        flush: impl Fn(u64) -> io::Result<()> + Send + Sync + 'static,
    ) -> Vec<(u64, io::Result<()>)> {
        let cpu = first_cpu();
        let in_flight = Arc::new(std::sync::atomic::AtomicUsize::new(n));
        let changes = Arc::new(AtomicU64::new(0));
        let covered = Arc::new(AtomicU64::new(0));
        let flush = Arc::new(flush);
        let go = Arc::new(std::sync::Barrier::new(n));
        let threads: Vec<_> = (0..n)
            .map(|_| {
                let (d, in_flight, changes, covered, flush, go) = (
                    d.clone(),
                    in_flight.clone(),
                    changes.clone(),
                    covered.clone(),
                    flush.clone(),
                    go.clone(),
                );
                std::thread::spawn(move || {
                    pin(cpu);
                    go.wait();
                    let mine = changes.fetch_add(1, Ordering::SeqCst) + 1;
                    let others = || in_flight.load(Ordering::SeqCst) - 1;
                    let res = d.sync_gathered(others, || {
                        let seen = changes.load(Ordering::SeqCst);
                        flush(seen)?;
                        covered.fetch_max(seen, Ordering::SeqCst);
                        Ok(())
                    });
                    if res.is_ok() {
                        let c = covered.load(Ordering::SeqCst);
                        assert!(c >= mine, "change {mine} answered, flushed up to {c}");
                    }
                    // Answered: no longer a call another leader waits for.
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    (mine, res)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    }

    /// N calls in flight on one core, released at once: the first to reach its flush
    /// yields to the others (`sync_gathered`), so their changes share its flush —
    /// fewer than N/2 flushes in some round. Without the gathering each call leads
    /// its own (an instant flush ends before the next thread runs): checked by
    /// making `gather` return at once, which fails this test. A loaded machine's other
    /// processes can take a yield's turn, hence up to 30 rounds, one sharing enough.
    #[test]
    fn a_burst_in_flight_shares_one_flush() {
        const N: usize = 8;
        let mut seen = Vec::new();
        for _ in 0..30 {
            let d = Arc::new(DirSync::default());
            let flushes = Arc::new(AtomicU64::new(0));
            let f = flushes.clone();
            let results = burst(&d, N, move |_| {
                f.fetch_add(1, Ordering::SeqCst);
                Ok(())
            });
            assert!(results.iter().all(|(_, r)| r.is_ok()));
            let n = flushes.load(Ordering::SeqCst) as usize;
            if n < N / 2 {
                return;
            }
            seen.push(n);
        }
        panic!(
            "{N} calls in flight: flushes per round {seen:?}, never < {}",
            N / 2
        );
    }

    /// The durability rule while gathering, with a slow flush (2 ms, as a log force
    /// on a loaded disk): each change returns only after a flush that started after
    /// it completed has ended (asserted in `burst`), round after round.
    #[test]
    fn gathered_changes_return_only_after_a_later_flush_ended() {
        for _ in 0..5 {
            let d = Arc::new(DirSync::default());
            let results = burst(&d, 8, |_| {
                std::thread::sleep(Duration::from_millis(2));
                Ok(())
            });
            assert!(results.iter().all(|(_, r)| r.is_ok()));
        }
    }

    /// Only the first flush fails: exactly the tickets it was to cover (those taken
    /// before it started, `running` while it runs) get the error, the later ones
    /// succeed through later flushes. Fails if only the leader saw the error. Rounds
    /// until one in which the failed flush covered gathered tickets.
    #[test]
    fn a_gathered_failure_fails_exactly_the_tickets_it_covered() {
        const N: usize = 8;
        let mut covered_by_first = Vec::new();
        for _ in 0..30 {
            let d = Arc::new(DirSync::default());
            let first = Arc::new(std::sync::Mutex::new(None));
            let (d2, first2) = (d.clone(), first.clone());
            let results = burst(&d, N, move |_| {
                let mut f = lock(&first2);
                if f.is_some() {
                    return Ok(());
                }
                let upto = lock(&d2.state).running.expect("a flush runs");
                *f = Some(upto);
                std::thread::sleep(Duration::from_millis(2));
                Err(io::Error::from_raw_os_error(libc::EIO))
            });
            let upto = lock(&first).expect("a first flush") as usize;
            let failed = results.iter().filter(|(_, r)| r.is_err()).count();
            assert_eq!(failed, upto, "the failed flush covered tickets 1..={upto}");
            assert!(d.sync(|| Ok(())).is_ok(), "a later change syncs again");
            covered_by_first.push(upto);
            if upto >= 2 {
                return;
            }
        }
        panic!("the failed flush never covered a gathered ticket: {covered_by_first:?}");
    }

    /// Alone (nothing else in flight) the leader flushes at once: `others` asked
    /// once, no yield. With calls in flight that change nothing more (a reply being
    /// encoded) it stops after the one yield that brought no one: 100 changes take
    /// one yield each, far below a wait of `GATHER_FOR` each (20 ms), in the best of
    /// a few rounds (another process may take a yield's turn on a loaded machine).
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
        assert_eq!(d.gather(&|| 0), 0, "alone: no yield");
        assert_eq!(d.gather(&|| 31), 1, "no one joined: one yield");
        let mut best = Duration::MAX;
        for _ in 0..5 {
            let t = std::time::Instant::now();
            for _ in 0..100 {
                d.sync_gathered(|| 31, || Ok(())).unwrap();
            }
            best = best.min(t.elapsed());
        }
        assert!(best < GATHER_FOR * 100 / 4, "100 changes took {best:?}");
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
