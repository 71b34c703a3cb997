//! Run mode from start to end: check the arguments, mount and prepare the file set,
//! start the pinned load threads together, gather their seconds (live line, interval
//! log) and results, commit and read written blocks back, and report.

use crate::client::Conn;
use crate::driver::{self, Clock, Plan, Report, ThreadSpec};
use crate::fileset::{BlockSet, FileSet};
use crate::hdrlog::HdrLog;
use crate::live::{self, Intervals};
use crate::pattern::Pattern;
use crate::report::{self, Settings};
use crate::stats::Stats;
use crate::transport::{Provider, Target};
use crate::workload::{Kind, Mix, Op};
use crate::RunArgs;
use std::io::IsTerminal;
use std::sync::{mpsc, Barrier, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// Threads, connections and cores, resolved from the flags.
#[derive(Debug, PartialEq, Eq)]
pub struct Layout {
    pub threads: usize,
    /// Connections of each thread (global connection indices).
    pub conns: Vec<Vec<usize>>,
    pub total_conns: usize,
    pub conns_per_thread: usize,
}

pub fn layout(
    threads: Option<usize>,
    conns_per_thread: Option<usize>,
    conns: Option<usize>,
    cores: usize,
) -> anyhow::Result<Layout> {
    let threads = threads.unwrap_or(match conns {
        Some(c) => c.min(cores.max(1)),
        None => 1,
    });
    anyhow::ensure!(threads > 0, "--threads must be at least 1");
    let total = match (conns, conns_per_thread) {
        (Some(c), _) => c,
        (None, Some(c)) => threads * c,
        (None, None) => threads,
    };
    anyhow::ensure!(
        total >= threads,
        "--conns ({total}) must be at least --threads ({threads})"
    );
    let mut per: Vec<Vec<usize>> = vec![Vec::new(); threads];
    for c in 0..total {
        per[c % threads].push(c);
    }
    Ok(Layout {
        threads,
        conns: per,
        total_conns: total,
        conns_per_thread: total.div_ceil(threads),
    })
}

/// Parses a core list like `1,3,5-7`.
pub fn parse_cpus(s: &str) -> anyhow::Result<Vec<usize>> {
    let mut v = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad =
            || anyhow::anyhow!("--cpus: {part:?} is not a core number or range (e.g. 1,3,5-7)");
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) =
                    (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                anyhow::ensure!(a <= b, bad());
                v.extend(a..=b);
            }
            None => v.push(part.parse().map_err(|_| bad())?),
        }
    }
    anyhow::ensure!(!v.is_empty(), "--cpus lists no core");
    Ok(v)
}

/// `--ops` split over the connections (the first ones take the remainder).
pub fn budgets(ops: Option<u64>, conns: usize) -> Vec<Option<u64>> {
    (0..conns)
        .map(|i| ops.map(|n| n / conns as u64 + u64::from((i as u64) < n % conns as u64)))
        .collect()
}

pub fn run(args: RunArgs) -> anyhow::Result<()> {
    let target = Target::parse(&args.target, args.provider)?;
    let mix = args
        .mix
        .clone()
        .unwrap_or_else(|| Mix::single(args.workload));
    let workload_name = if args.mix.is_some() {
        "mix"
    } else {
        args.workload.name()
    };
    anyhow::ensure!(
        args.bs > 0 && args.bs <= 1 << 20,
        "--bs must be 1 .. 1m (1048576)"
    );
    let bs = args.bs as u32;
    anyhow::ensure!(args.qd > 0, "--qd must be at least 1");
    anyhow::ensure!(args.files > 0, "--files must be at least 1");
    let file_size = args
        .file_size
        .or(args.size_mib.map(|m| m << 20))
        .unwrap_or(64 << 20);
    let usable: Vec<core_affinity::CoreId> = match &args.cpus {
        Some(list) => parse_cpus(list)?
            .into_iter()
            .map(|id| core_affinity::CoreId { id })
            .collect(),
        None => {
            let mut c = core_affinity::get_core_ids().unwrap_or_default();
            c.reverse();
            c
        }
    };
    let lay = layout(
        args.threads,
        args.conns_per_thread,
        args.conns,
        usable.len(),
    )?;
    let reads = mix.any(Op::reads);
    let writes = mix.any(Op::writes);

    // Setup, over one connection, before any load.
    let mut setup = Conn::connect(&target)?;
    let root = setup.mount(&args.export)?;
    let files = if mix.any(Op::uses_files) {
        FileSet::prepare(&mut setup, &root, &args.file, args.files, file_size, reads)?
    } else {
        FileSet {
            dir: root.clone(),
            names: Vec::new(),
            handles: Vec::new(),
            size: file_size,
        }
    };
    let plan = Plan {
        target: &target,
        mix: &mix,
        files: &files,
        bs,
        qd: args.qd,
        verify: args.verify,
        write_pattern: args.verify || reads,
        track_writes: args.verify && writes,
        rate_per_conn: args.rate.map(|r| r / lay.total_conns as f64),
        pid: std::process::id(),
        conns: lay.total_conns,
    };
    let budgets = budgets(args.ops, lay.total_conns);
    let specs: Vec<ThreadSpec> = lay
        .conns
        .iter()
        .enumerate()
        .map(|(t, cs)| ThreadSpec {
            thread: t,
            core: (!usable.is_empty()).then(|| usable[t % usable.len()]),
            conns: cs.iter().map(|&c| (c, budgets[c])).collect(),
        })
        .collect();

    let warmup = Duration::from_secs_f64(args.warmup);
    let duration = Duration::from_secs_f64(args.duration);
    let live_line = std::io::stderr().is_terminal();
    let (tx, rx) = mpsc::channel::<Report>();
    // Threads connect, then wait twice: for everyone to be connected, then for the
    // clock the main thread sets in between, so the load starts at once everywhere.
    let ready = Barrier::new(lay.threads + 1);
    let go = Barrier::new(lay.threads + 1);
    let clock_cell: Mutex<Option<Clock>> = Mutex::new(None);
    let mut log: Option<HdrLog> = None;
    let mut merged = Stats::default();
    let mut written = BlockSet::default();
    let mut clock = None;
    let mut finished: Option<Instant> = None;
    let mut failed_threads = Vec::new();

    std::thread::scope(|s| -> anyhow::Result<()> {
        let handles: Vec<_> = specs
            .iter()
            .map(|spec| {
                let (plan, tx, ready, go, cell) = (&plan, tx.clone(), &ready, &go, &clock_cell);
                s.spawn(move || {
                    let pipes = driver::connect(plan, spec);
                    ready.wait();
                    go.wait();
                    let clock = cell.lock().map(|c| *c).ok().flatten();
                    let r = match (pipes, clock) {
                        (Ok(p), Some(c)) => Ok(driver::run_thread(plan, spec, p, c, &tx)),
                        (Err(e), _) => Err(e),
                        (_, None) => Err(anyhow::anyhow!("no clock")),
                    };
                    let end = r.as_ref().map_or_else(|_| Instant::now(), |r| r.finished);
                    let _ = tx.send(Report::Done(spec.thread, end));
                    r
                })
            })
            .collect();
        drop(tx);
        ready.wait();
        let start = Instant::now();
        let c = Clock {
            start,
            t0: start + warmup,
            end: args.ops.is_none().then(|| start + warmup + duration),
        };
        if let Ok(mut cell) = clock_cell.lock() {
            *cell = Some(c);
        }
        clock = Some(c);
        if let Some(path) = &args.hdr_log {
            let base = SystemTime::now() + warmup;
            log = Some(HdrLog::create(
                path,
                base,
                &format!("{workload_name} on {}", args.target),
            )?);
        }
        go.wait();

        let mut ivs = Intervals::new(lay.threads);
        let mut shown = false;
        let (mut running, mut last_end) = (lay.threads, c.t0);
        loop {
            match rx.recv_timeout(Duration::from_millis(250)) {
                Ok(Report::Interval(iv)) => ivs.add(iv),
                Ok(Report::Done(t, end)) => {
                    ivs.thread_done(t);
                    running -= 1;
                    last_end = last_end.max(end);
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if handles.iter().all(|h| h.is_finished()) {
                        // A thread that died without saying so.
                        for t in 0..lay.threads {
                            ivs.thread_done(t);
                        }
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
                if live_line {
                    eprint!("\r{}", live::line(i, len, &st));
                    shown = true;
                }
            }
        }
        if shown {
            eprintln!();
        }
        for (t, h) in handles.into_iter().enumerate() {
            match h.join() {
                Ok(Ok(r)) => {
                    merged.merge(&r.stats);
                    written.union(&r.written);
                    finished = Some(finished.map_or(r.finished, |f: Instant| f.max(r.finished)));
                }
                Ok(Err(e)) => failed_threads.push(format!("thread {t}: {e:#}")),
                Err(_) => failed_threads.push(format!("thread {t} panicked")),
            }
        }
        Ok(())
    })?;
    if let Some(l) = log.take() {
        l.finish()?;
    }
    anyhow::ensure!(failed_threads.is_empty(), "{}", failed_threads.join("; "));
    let clock = clock.ok_or_else(|| anyhow::anyhow!("the load never started"))?;
    let measured = finished
        .map(|f| f.saturating_duration_since(clock.t0))
        .unwrap_or_default()
        .as_secs_f64();

    // Make written data durable, then (--verify) read every written block back.
    if writes {
        for (i, fh) in files.handles.iter().enumerate() {
            let touched = !plan.track_writes || written.touched(i);
            if touched {
                if let Err(e) = setup.commit(fh) {
                    eprintln!("bench: COMMIT of {}: {e:#}", files.names[i]);
                    merged.kind(Kind::Write).errors += 1;
                }
            }
        }
    }
    if plan.track_writes {
        let last = files.size;
        for (i, fh) in files.handles.iter().enumerate() {
            let mut blocks = written.blocks_of(i).map(|b| {
                let off = b * bs as u64;
                (off, (bs as u64).min(last.saturating_sub(off)).max(1) as u32)
            });
            let (good, bad) = setup.read_back(
                fh,
                &mut blocks,
                &Pattern::for_file(i as u64),
                args.qd.max(8),
                &files.names[i],
            )?;
            let w = merged.kind(Kind::Write);
            w.verified_bytes += good;
            w.verify_failures += bad;
        }
    }

    let settings = Settings {
        target: &args.target,
        provider: matches!(target, Target::Rdma { .. }).then(|| match args.provider {
            Provider::Soft => "soft",
            Provider::Verbs => "verbs",
        }),
        workload: workload_name,
        mix: &mix,
        bs,
        files: if mix.any(Op::uses_files) {
            files.len()
        } else {
            0
        },
        file_size,
        threads: lay.threads,
        conns: lay.total_conns,
        conns_per_thread: lay.conns_per_thread,
        qd: args.qd,
        rate: args.rate,
        warmup_s: args.warmup,
        duration_s: measured,
    };
    if args.json {
        println!("{}", report::json(&settings, &merged));
    } else {
        print!("{}", report::table(&settings, &merged));
    }
    if let Some(path) = &args.plot {
        let title = format!(
            "{} · {} · bs {} · qd {} x {} conn(s){}",
            args.target,
            if args.mix.is_some() {
                format!(
                    "mix {}",
                    mix.entries()
                        .iter()
                        .map(|(o, w)| format!("{o}:{w}"))
                        .collect::<Vec<_>>()
                        .join(",")
                )
            } else {
                workload_name.to_string()
            },
            crate::units::format_size(bs as u64),
            args.qd,
            lay.total_conns,
            args.rate
                .map(|r| format!(" · {r} ops/s open loop"))
                .unwrap_or_default()
        );
        let series: Vec<(&str, &crate::stats::OpStats)> =
            merged.iter().map(|(k, s)| (k.name(), s)).collect();
        std::fs::write(path, crate::plot::svg(&title, &series))
            .map_err(|e| anyhow::anyhow!("--plot {}: {e}", path.display()))?;
    }
    let total = merged.total();
    anyhow::ensure!(
        total.verify_failures == 0,
        "verification FAILED: {} block(s) did not hold the expected data",
        total.verify_failures
    );
    anyhow::ensure!(total.errors == 0, "{} calls failed", total.errors);
    anyhow::ensure!(total.ops > 0, "no op completed");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts() {
        let l = layout(None, None, None, 2).unwrap();
        assert_eq!((l.threads, l.total_conns, l.conns_per_thread), (1, 1, 1));
        let l = layout(Some(2), Some(3), None, 2).unwrap();
        assert_eq!(l.conns, vec![vec![0, 2, 4], vec![1, 3, 5]]);
        // --conns alone keeps the old meaning (one thread per connection) up to the
        // usable cores.
        let l = layout(None, None, Some(4), 2).unwrap();
        assert_eq!((l.threads, l.total_conns, l.conns_per_thread), (2, 4, 2));
        let l = layout(Some(2), None, Some(3), 8).unwrap();
        assert_eq!(l.conns, vec![vec![0, 2], vec![1]]);
        assert!(layout(Some(3), None, Some(2), 8).is_err());
        assert!(layout(Some(0), None, None, 8).is_err());
    }

    #[test]
    fn cpu_lists_and_budgets() {
        assert_eq!(parse_cpus("1,3,5-7").unwrap(), vec![1, 3, 5, 6, 7]);
        assert!(parse_cpus("").is_err() && parse_cpus("3-1").is_err() && parse_cpus("x").is_err());
        assert_eq!(budgets(Some(10), 3), vec![Some(4), Some(3), Some(3)]);
        assert_eq!(budgets(None, 2), vec![None, None]);
        assert_eq!(budgets(Some(10), 3).iter().flatten().sum::<u64>(), 10);
    }
}
