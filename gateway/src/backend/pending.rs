//! Calls handed to the backend workers that may still change the namespace: queued on
//! the job ring, or running on a worker and not yet past their flush. The reactors
//! count a call in when they push its job (`server::reactor`); the worker counts it out
//! when its change is on stable storage (`settled`, from `fs::flush`) or, at the
//! latest, when `run_job` ends (`Finished`).
//!
//! A log force's leader reads it (`fs::dirsync`, `DirSync::sync_gathered`): when other
//! calls are in flight — a burst the reactor read, whose workers are runnable but
//! have not run yet — it yields before starting the force, so their namespace changes
//! complete first and share it. With nothing else in flight (queue depth 1) it does not
//! wait at all.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread runs a job that is still counted in (from `Finished::begin` until
    /// `settled` or the job's end); false on every other thread.
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

/// A job was pushed onto the workers' ring.
#[inline]
pub fn queued(n: usize) {
    IN_FLIGHT.fetch_add(n, Ordering::Relaxed);
}

/// Calls in flight at the workers, the caller's own included. (A job popped by a
/// worker that was pushed by no reactor — a test's own ring — would make the count
/// wrap: read as none.)
#[inline]
pub fn in_flight() -> usize {
    let n = IN_FLIGHT.load(Ordering::Relaxed);
    if n > usize::MAX / 2 {
        0
    } else {
        n
    }
}

/// Calls in flight at the workers besides the caller's own (once settled, it is no
/// longer counted).
#[inline]
pub fn in_flight_others() -> usize {
    let mine = usize::from(COUNTED.with(Cell::get));
    in_flight().saturating_sub(mine)
}

/// The calling worker's change is on stable storage: its call is counted out now, so
/// other leaders do not wait for it while it encodes its reply. Off a worker's job
/// (tests, start-up, other threads) nothing was counted in and nothing happens.
#[inline]
pub fn settled() {
    if COUNTED.with(|c| c.replace(false)) {
        count_out();
    }
}

fn count_out() {
    IN_FLIGHT.fetch_sub(1, Ordering::Relaxed);
}

/// Counts one job out when dropped (every way out of `run_job`, a panic included),
/// unless `settled` already did.
pub struct Finished;

impl Finished {
    /// The calling worker starts a job a reactor counted in.
    #[inline]
    pub fn begin() -> Finished {
        COUNTED.with(|c| c.set(true));
        Finished
    }
}

/// Counts out a job whose push failed (it stays with the reactor).
#[inline]
pub fn unqueued() {
    count_out();
}

impl Drop for Finished {
    fn drop(&mut self) {
        if COUNTED.with(|c| c.replace(false)) {
            count_out();
        }
    }
}
