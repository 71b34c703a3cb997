//! How long an adaptive reactor spins before it sleeps: learned, at most
//! `engine.idle_spin_us`.
//!
//! The spin keeps a reactor polling after its last work so that what comes next (a
//! call, a worker's answer) is seen without a wake-up. It is worth its polls only when
//! what ends the idle run comes within it. A CREATE or REMOVE waits for fsyncs
//! (milliseconds): the reactor polled about 22 times per such call under callgrind,
//! hundreds natively, for nothing (docs/performance.md, "Create and remove system
//! calls"), before it slept on the completion ring's doorbell anyway; and a client
//! that takes longer than the spin to send its next call costs the same.
//!
//! Rule (the shape of Linux's cpuidle-haltpoll window): each idle run spins for a
//! learned window, at most the configured spin, and its length teaches the window:
//! ended within the window, it stays; ended after it but within the configured spin
//! (a longer spin would have caught it), it doubles (from [`GROW_FROM`]); ended after
//! the configured spin (no spin could have caught it), it halves, down to 0. Runs that
//! begin with calls at the workers (waiting for their answers) and runs that begin
//! with none (waiting for a client) learn separate windows, since what ends them
//! differs. A run after bulk transfer spins `idle_bulk_spin_us` as before and teaches
//! nothing. So a reactor whose clients and workers answer within the spin (cached
//! READs and GETATTRs, LOOKUPs at the workers) keeps spinning, and one whose workers
//! wait on the disk sleeps on their doorbell at once.

use std::time::{Duration, Instant};

/// The window a growing run starts from (below it a spin saves little beside a
/// wake-up's few microseconds).
pub(super) const GROW_FROM: Duration = Duration::from_micros(25);

/// What an idle run waits for, decided at its first empty poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wait {
    /// The reactor's last work was bulk transfer (`Poller::bulk`): not learned.
    Bulk,
    /// Calls are at the workers.
    Workers,
    /// No call is at the workers: the next comes from a client.
    Clients,
}

#[derive(Debug)]
pub(super) struct SpinWindows {
    /// Learned windows (`None`: the configured spin) for `Wait::Workers` and
    /// `Wait::Clients`.
    windows: [Option<Duration>; 2],
    /// The current idle run, if one is on: what it waits for, since when (learned
    /// runs only), and the configured spin then.
    run: Option<(Wait, Option<Instant>, Duration)>,
}

impl SpinWindows {
    pub(super) const fn new() -> SpinWindows {
        SpinWindows {
            windows: [None, None],
            run: None,
        }
    }

    /// The spin for the current idle run, given the configured `spin` (asked on
    /// every empty poll; the run's first decides what it waits for).
    pub(super) fn idle(&mut self, spin: Duration, wait: impl FnOnce() -> Wait) -> Duration {
        let (wait, _, spin) = *self.run.get_or_insert_with(|| {
            let w = wait();
            let since = (w != Wait::Bulk && !spin.is_zero()).then(Instant::now);
            (w, since, spin)
        });
        match slot(wait) {
            Some(i) => spin.min(*self.windows[i].get_or_insert(spin)),
            None => spin,
        }
    }

    /// A poll found work: the idle run, if any, is over.
    #[inline]
    pub(super) fn busy(&mut self) {
        if let Some((wait, Some(since), spin)) = self.run.take() {
            if let Some(i) = slot(wait) {
                self.windows[i] = Some(learn(self.windows[i], since.elapsed(), spin));
            }
        }
    }

    #[cfg(test)]
    fn window(&self, wait: Wait) -> Option<Duration> {
        slot(wait).and_then(|i| self.windows[i])
    }
}

fn slot(wait: Wait) -> Option<usize> {
    match wait {
        Wait::Bulk => None,
        Wait::Workers => Some(0),
        Wait::Clients => Some(1),
    }
}

/// The next window after an idle run of `waited` under the configured `spin`.
fn learn(window: Option<Duration>, waited: Duration, spin: Duration) -> Duration {
    let w = window.unwrap_or(spin).min(spin);
    if waited <= w {
        w
    } else if waited <= spin {
        (w * 2).max(GROW_FROM).min(spin)
    } else if w / 2 < GROW_FROM {
        Duration::ZERO
    } else {
        w / 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPIN: Duration = Duration::from_micros(200);
    const US: Duration = Duration::from_micros(1);

    /// One idle run waiting for `wait` that lasted `waited`; returns its spin.
    fn run(s: &mut SpinWindows, wait: Wait, waited: Duration) -> Duration {
        let spin = s.idle(SPIN, || wait);
        if let Some((w, Some(t), configured)) = s.run {
            s.run = Some((w, Some(t - waited), configured));
        }
        s.busy();
        spin
    }

    #[test]
    fn calls_behind_fsyncs_stop_the_spin_within_a_few_runs() {
        let mut s = SpinWindows::new();
        let spins: Vec<_> = (0..6)
            .map(|_| run(&mut s, Wait::Workers, Duration::from_millis(2)))
            .collect();
        assert_eq!(spins[0], SPIN, "starts at the configured spin");
        assert_eq!(spins[4], Duration::ZERO, "{spins:?}");
        // Waiting for clients learns apart: still the configured spin.
        assert_eq!(s.window(Wait::Clients), None);
        assert_eq!(run(&mut s, Wait::Clients, 30 * US), SPIN);
    }

    #[test]
    fn answers_within_the_spin_win_it_back() {
        let mut s = SpinWindows::new();
        for _ in 0..6 {
            run(&mut s, Wait::Clients, Duration::from_millis(2));
        }
        let spins: Vec<_> = (0..6)
            .map(|_| run(&mut s, Wait::Clients, 150 * US))
            .collect();
        assert_eq!(spins[1], GROW_FROM);
        assert_eq!(*spins.last().unwrap(), SPIN, "{spins:?}");
        // Answers within the window keep it.
        run(&mut s, Wait::Clients, 10 * US);
        assert_eq!(s.window(Wait::Clients), Some(SPIN));
    }

    #[test]
    fn a_run_is_decided_by_its_first_empty_poll_and_bulk_runs_teach_nothing() {
        let mut s = SpinWindows::new();
        for _ in 0..6 {
            run(&mut s, Wait::Workers, Duration::from_millis(2));
        }
        assert_eq!(s.idle(SPIN, || Wait::Clients), SPIN);
        // Asked again in the same run: still the run's first answer.
        assert_eq!(s.idle(SPIN, || Wait::Workers), SPIN);
        s.busy();
        assert_eq!(s.window(Wait::Workers), Some(Duration::ZERO));
        assert_eq!(s.idle(Duration::ZERO, || Wait::Bulk), Duration::ZERO);
        s.busy();
        assert_eq!(s.window(Wait::Workers), Some(Duration::ZERO));
        assert_eq!(s.window(Wait::Clients), Some(SPIN));
        assert_eq!(s.idle(SPIN, || Wait::Workers), Duration::ZERO);
    }

    #[test]
    fn the_window_never_exceeds_the_configured_spin() {
        let mut s = SpinWindows::new();
        for _ in 0..10 {
            run(&mut s, Wait::Workers, 5 * US);
        }
        assert_eq!(s.idle(50 * US, || Wait::Workers), 50 * US);
        s.busy();
        assert_eq!(s.idle(Duration::ZERO, || Wait::Workers), Duration::ZERO);
    }
}
