//! Running the load: start the pinned threads, release them together once all are
//! connected, show and log each second as it completes, and gather the results.

use crate::driver::{self, Clock, Plan, Report, ThreadSpec};
use crate::fileset::BlockSet;
use crate::hdrlog::HdrLog;
use crate::live::{self, Intervals};
use crate::stats::Stats;
use std::path::Path;
use std::sync::{mpsc, Barrier, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// How long the load runs.
pub struct Timing {
    pub warmup: Duration,
    /// Measured time; `None` with an op budget.
    pub duration: Option<Duration>,
}

/// Where the per-second results go.
pub struct Seconds<'a> {
    /// Rewrite a live line on stderr.
    pub live_line: bool,
    /// The interval log's path and its description.
    pub hdr_log: Option<(&'a Path, String)>,
}

/// What the threads did together.
pub struct Load {
    pub stats: Stats,
    pub written: BlockSet,
    /// Seconds from the end of the warm-up to the last completion.
    pub measured_s: f64,
}

pub fn run(
    plan: &Plan,
    specs: &[ThreadSpec],
    timing: &Timing,
    seconds: &Seconds,
) -> anyhow::Result<Load> {
    let threads = specs.len();
    let (tx, rx) = mpsc::channel::<Report>();
    // Threads connect, then wait twice: for everyone to be connected, then for the
    // clock the main thread sets in between, so the load starts at once everywhere.
    let ready = Barrier::new(threads + 1);
    let go = Barrier::new(threads + 1);
    let clock_cell: Mutex<Option<Clock>> = Mutex::new(None);
    let mut load = Load {
        stats: Stats::default(),
        written: BlockSet::default(),
        measured_s: 0.0,
    };
    let mut failed = Vec::new();
    let mut finished: Option<Instant> = None;
    let mut clock = None;

    std::thread::scope(|s| -> anyhow::Result<()> {
        let handles: Vec<_> = specs
            .iter()
            .map(|spec| {
                let (tx, ready, go, cell) = (tx.clone(), &ready, &go, &clock_cell);
                s.spawn(move || {
                    let pipes = driver::connect(plan, spec);
                    ready.wait();
                    go.wait();
                    let clock = cell.lock().map(|c| *c).ok().flatten();
                    let mut r = match (pipes, clock) {
                        (Ok(p), Some(c)) => Ok(driver::run_thread(plan, spec, p, c, &tx)),
                        (Err(e), _) => Err(e),
                        (_, None) => Err(anyhow::anyhow!("no clock")),
                    };
                    let (end, last) = match r.as_mut() {
                        Ok(r) => (r.finished, r.last_second.take()),
                        Err(_) => (Instant::now(), None),
                    };
                    let _ = tx.send(Report::Done(spec.thread, end, last));
                    r
                })
            })
            .collect();
        drop(tx);
        ready.wait();
        let start = Instant::now();
        let c = Clock {
            start,
            t0: start + timing.warmup,
            end: timing.duration.map(|d| start + timing.warmup + d),
        };
        if let Ok(mut cell) = clock_cell.lock() {
            *cell = Some(c);
        }
        clock = Some(c);
        // Create the log before releasing the threads, but never return before `go`:
        // they would wait on the barrier forever.
        let log = seconds
            .hdr_log
            .as_ref()
            .map(|(path, what)| HdrLog::create(path, SystemTime::now() + timing.warmup, what));
        go.wait();
        let mut log = log.transpose()?;

        let mut ivs = Intervals::new(threads);
        let mut shown = false;
        let (mut running, mut last_end) = (threads, c.t0);
        loop {
            match rx.recv_timeout(Duration::from_millis(250)) {
                Ok(Report::Interval(iv)) => ivs.add(iv),
                Ok(Report::Done(t, end, last)) => {
                    if let Some(iv) = last {
                        ivs.add(iv);
                    }
                    ivs.thread_done(t);
                    running -= 1;
                    last_end = last_end.max(end);
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if handles.iter().all(|h| h.is_finished()) {
                        // A thread that died without saying so.
                        (0..threads).for_each(|t| ivs.thread_done(t));
                    }
                }
            }
            for (i, st) in ivs.ready() {
                // Every second is whole except the run's last one.
                let len = if running == 0 {
                    let from = c.t0 + Duration::from_secs(i);
                    last_end
                        .saturating_duration_since(from)
                        .clamp(Duration::from_millis(1), Duration::from_secs(1))
                } else {
                    Duration::from_secs(1)
                };
                if let Some(l) = log.as_mut() {
                    l.write(i, len, &st)?;
                }
                if seconds.live_line {
                    eprint!("\r{}", live::line(i, len, &st));
                    shown = true;
                }
            }
        }
        if shown {
            eprintln!();
        }
        if let Some(l) = log {
            l.finish()?;
        }
        for (t, h) in handles.into_iter().enumerate() {
            match h.join() {
                Ok(Ok(r)) => {
                    load.stats.merge(&r.stats);
                    load.written.union(&r.written);
                    finished = Some(finished.map_or(r.finished, |f: Instant| f.max(r.finished)));
                }
                Ok(Err(e)) => failed.push(format!("thread {t}: {e:#}")),
                Err(_) => failed.push(format!("thread {t} panicked")),
            }
        }
        Ok(())
    })?;
    anyhow::ensure!(failed.is_empty(), "{}", failed.join("; "));
    let clock = clock.ok_or_else(|| anyhow::anyhow!("the load never started"))?;
    load.measured_s = finished
        .map(|f| f.saturating_duration_since(clock.t0))
        .unwrap_or_default()
        .as_secs_f64();
    Ok(load)
}
