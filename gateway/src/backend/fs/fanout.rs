//! A listing page's metadata reads, shared with helper threads when cores are idle
//! (docs/architecture.md §7 "Directory listings"; docs/performance.md "Listing, fourth
//! pass").
//!
//! A first listing reads each listed file's metadata (`list.rs` `listed_head`: an
//! `fstatat`, and the xattrs of a file past its revalidation time that the gateway
//! wrote itself: five system calls), one file after another, and the page waits for
//! all of them: that, not the directory scan nor the encoding, is most of a first
//! listing's time (`perf` of bench md's readdir phase: 64 % of the listing's CPU under
//! `listed_head`). The reads of different files are independent, so a page's are cut
//! into chunks that the listing thread and helper threads claim one at a time; each
//! result is put back at its entry's index, so the page is the serial one whatever
//! thread read which entry.
//!
//! Idle only: the threads a page may use are counted against `width` (the cores the
//! process may run on, at most 4) together with every other page's, so concurrent
//! listings (one per client directory, mdtest-easy) each read on their own thread as
//! before, and a lone listing (one client, or several waiting for one page:
//! `listing::PageMemo`) gets the idle cores. The listing thread never waits for a
//! helper to start: it claims chunks until none is left and then waits only for the
//! chunks helpers are reading, so on a machine with no idle core a page costs what it
//! cost before (helpers that wake late find nothing left). Helpers are long-lived
//! (`width - 1`, started with the first page that shares), catch a panic of a read
//! and hand it to the listing thread, which raises it as its own (the call's, under
//! `supervise::request`), and stop when the backend is dropped.

use std::any::Any;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, Once};

/// Reads a thread claims at a time: small enough that threads finish together, large
/// enough that claiming costs nothing beside a read's system calls.
const CHUNK: usize = 16;
/// Reads a page needs per thread for one more thread to be worth waking.
const PER_THREAD: usize = 64;
/// A helper's stack: it runs the metadata read of one file at a time.
const HELPER_STACK: usize = 256 << 10;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Work helpers can take part in.
trait Help: Send + Sync {
    fn help(&self);
}

/// The helpers' queue: jobs to help with, and whether to stop.
#[derive(Default)]
struct Queue {
    state: Mutex<(VecDeque<Arc<dyn Help>>, bool)>,
    bell: Condvar,
}

impl Queue {
    fn run(&self) {
        loop {
            let job = {
                let mut s = lock(&self.state);
                loop {
                    if s.1 {
                        return;
                    }
                    if let Some(j) = s.0.pop_front() {
                        break j;
                    }
                    s = self.bell.wait(s).unwrap_or_else(|e| e.into_inner());
                }
            };
            job.help();
        }
    }
}

pub(super) struct Fanout {
    /// Threads all pages together may read with (listing threads included; a
    /// listing always has its own).
    width: usize,
    /// Threads reading pages' metadata now.
    busy: AtomicUsize,
    /// Pages shared with helpers.
    shared: AtomicU64,
    queue: Arc<Queue>,
    started: Once,
    /// Helpers running.
    helpers: AtomicUsize,
}

/// Gives a page's threads back when it is done (or unwinds).
struct Claimed<'a>(&'a AtomicUsize, usize);

impl Drop for Claimed<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(self.1, Ordering::AcqRel);
    }
}

impl Drop for Fanout {
    fn drop(&mut self) {
        lock(&self.queue.state).1 = true;
        self.queue.bell.notify_all();
    }
}

/// One page's reads: `f(i)` for every `i < n`, claimed a chunk at a time.
struct Job<T, F> {
    n: usize,
    next: AtomicUsize,
    f: F,
    state: Mutex<Done<T>>,
    finished: Condvar,
}

struct Done<T> {
    got: Vec<(usize, T)>,
    /// Indices read (or whose chunk panicked).
    count: usize,
    panic: Option<Box<dyn Any + Send>>,
}

impl<T: Send, F: Fn(usize) -> T + Send + Sync> Help for Job<T, F> {
    fn help(&self) {
        loop {
            let start = self.next.fetch_add(CHUNK, Ordering::Relaxed);
            if start >= self.n {
                return;
            }
            let end = (start + CHUNK).min(self.n);
            let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                (start..end).map(|i| (i, (self.f)(i))).collect::<Vec<_>>()
            }));
            let mut s = lock(&self.state);
            match read {
                Ok(v) => s.got.extend(v),
                Err(p) => {
                    s.panic.get_or_insert(p);
                }
            }
            s.count += end - start;
            if s.count == self.n {
                self.finished.notify_all();
            }
        }
    }
}

impl Fanout {
    /// Up to `width` threads in all (1: nothing is shared).
    pub(super) fn new(width: usize) -> Fanout {
        Fanout {
            width: width.max(1),
            busy: AtomicUsize::new(0),
            shared: AtomicU64::new(0),
            queue: Arc::default(),
            started: Once::new(),
            helpers: AtomicUsize::new(0),
        }
    }

    /// One thread per core the process may run on, at most 4 (a page of 1,024
    /// entries gains little past that, and other cores serve other clients).
    pub(super) fn per_core() -> Fanout {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Fanout::new(cores.min(4))
    }

    /// Pages shared with helpers so far.
    #[cfg(test)]
    pub(super) fn shared_pages(&self) -> u64 {
        self.shared.load(Ordering::Relaxed)
    }

    /// Takes up to `want` threads (the caller's own always): as many as other
    /// pages leave.
    fn claim(&self, want: usize) -> Claimed<'_> {
        let mut cur = self.busy.load(Ordering::Acquire);
        loop {
            let k = want.min(self.width.saturating_sub(cur)).max(1);
            match self
                .busy
                .compare_exchange_weak(cur, cur + k, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Claimed(&self.busy, k),
                Err(now) => cur = now,
            }
        }
    }

    /// Starts the helpers once; how many run.
    fn helpers(&self) -> usize {
        self.started.call_once(|| {
            for _ in 1..self.width {
                let q = self.queue.clone();
                // A helper that cannot be started leaves its share to the others.
                if std::thread::Builder::new()
                    .name("fs-list".into())
                    .stack_size(HELPER_STACK)
                    .spawn(move || q.run())
                    .is_ok()
                {
                    self.helpers.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        self.helpers.load(Ordering::Relaxed)
    }

    /// Whether a page of `n` reads may be shared at all (else the caller reads them
    /// itself, without making the reads `'static` for `map`).
    pub(super) fn worth(&self, n: usize) -> bool {
        self.width > 1 && n >= 2 * PER_THREAD
    }

    /// `f(0), …, f(n - 1)`, in that order, read on the calling thread and, when `n`
    /// is large enough and cores are idle, helpers (module docs).
    pub(super) fn map<T, F>(&self, n: usize, f: F) -> Vec<T>
    where
        T: Send + 'static,
        F: Fn(usize) -> T + Send + Sync + 'static,
    {
        let want = (n / PER_THREAD).clamp(1, self.width);
        let claimed = self.claim(want);
        let ask = (claimed.1 - 1).min(self.helpers());
        if ask == 0 {
            return (0..n).map(f).collect();
        }
        self.shared.fetch_add(1, Ordering::Relaxed);
        let job = Arc::new(Job {
            n,
            next: AtomicUsize::new(0),
            f,
            state: Mutex::new(Done {
                got: Vec::with_capacity(n),
                count: 0,
                panic: None,
            }),
            finished: Condvar::new(),
        });
        {
            let mut q = lock(&self.queue.state);
            for _ in 0..ask {
                q.0.push_back(job.clone());
            }
        }
        for _ in 0..ask {
            self.queue.bell.notify_one();
        }
        job.help();
        let done = {
            let mut s = lock(&job.state);
            while s.count < n {
                s = job.finished.wait(s).unwrap_or_else(|e| e.into_inner());
            }
            std::mem::replace(
                &mut *s,
                Done {
                    got: Vec::new(),
                    count: 0,
                    panic: None,
                },
            )
        };
        drop(claimed);
        if let Some(p) = done.panic {
            std::panic::resume_unwind(p);
        }
        let mut slots: Vec<Option<T>> = std::iter::repeat_with(|| None).take(n).collect();
        for (i, t) in done.got {
            slots[i] = Some(t);
        }
        slots
            .into_iter()
            .map(|t| t.expect("every index is read by exactly one thread"))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::time::Duration;

    /// Every index once, in order, whichever thread read it; helpers did, with
    /// width to spare.
    #[test]
    fn a_shared_map_is_the_serial_map() {
        let fan = Fanout::new(4);
        let threads = Arc::new(Mutex::new(HashSet::new()));
        let t = threads.clone();
        let got = fan.map(1000, move |i| {
            t.lock().unwrap().insert(std::thread::current().id());
            // Long enough that the helpers wake before the caller is done.
            std::thread::sleep(Duration::from_micros(50));
            i * 3
        });
        assert_eq!(got, (0..1000).map(|i| i * 3).collect::<Vec<_>>());
        assert!(threads.lock().unwrap().len() > 1, "no helper read");
        assert_eq!(fan.shared_pages(), 1);
        assert_eq!(fan.busy.load(Ordering::Relaxed), 0, "threads given back");
    }

    /// Small pages, width 1, and cores other pages hold: the caller alone.
    #[test]
    fn no_helper_without_idle_width_or_work() {
        let fan = Fanout::new(2);
        assert_eq!(
            fan.map(PER_THREAD, |i| i),
            (0..PER_THREAD).collect::<Vec<_>>()
        );
        assert_eq!(Fanout::new(1).map(5000, |i| i).len(), 5000);
        let held = fan.claim(2);
        let me = std::thread::current().id();
        assert!(fan
            .map(5000, |_| std::thread::current().id())
            .iter()
            .all(|t| *t == me));
        drop(held);
        assert_eq!(fan.shared_pages(), 0);
    }

    /// A read's panic on a helper is the caller's, and the threads are given back.
    #[test]
    fn a_helpers_panic_reaches_the_caller() {
        let fan = Fanout::new(4);
        let me = std::thread::current().id();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            fan.map(1000, move |_| {
                std::thread::sleep(Duration::from_micros(50));
                assert_eq!(std::thread::current().id(), me, "a helper panics");
            })
        }));
        assert!(r.is_err());
        assert_eq!(fan.busy.load(Ordering::Relaxed), 0);
        // The helpers survive it.
        assert_eq!(fan.map(1000, |i| i).len(), 1000);
    }
}
