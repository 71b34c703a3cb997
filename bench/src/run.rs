//! Run mode from start to end: check the arguments, mount and prepare the file set,
//! start the pinned load threads together, gather their seconds (live line, interval
//! log) and results, commit and read written blocks back, and report.

use crate::client::Conn;
use crate::driver::V4Plan;
use crate::driver::{Plan, ThreadSpec};
use crate::fileset::{BlockSet, FileSet};
use crate::load::{self, Load, Seconds, Timing};
use crate::nfs4::setup::Setup4;
use crate::report::{self, Settings};
use crate::stats::Stats;
use crate::transport::{Provider, Target};
use crate::workload::{Kind, Mix, Op};
use crate::RunArgs;
use std::io::IsTerminal;
use std::time::Duration;

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
    crate::transport::set_source(args.source);
    let target = Target::parse(&args.target, args.provider)?;
    crate::nfs4::set_minor(args.nfs.minor().max(1));
    if args.read_plus && (args.nfs != crate::NfsVersion::V42 || !args.target.starts_with("tcp://"))
    {
        anyhow::bail!("--read-plus needs --nfs 4.2 and a tcp:// target (READ_PLUS is NFSv4.2's; its data is inline, not in an RDMA write chunk)");
    }
    crate::nfs4::set_read_plus(args.read_plus);
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
    if args.workload == Op::Copy && args.mix.is_none() {
        return crate::copy::run(&args, &target, file_size);
    }
    anyhow::ensure!(
        !args.copy_through_client,
        "--copy-through-client is for --workload copy"
    );
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
    if args.nfs.is_v4() {
        anyhow::ensure!(
            args.mount_port.is_none(),
            "--mount-port is for NFSv3 (NFSv4.1 has no MOUNT)"
        );
    }

    if args.pnfs {
        return crate::pnfs::run(
            &args,
            &target,
            &mix,
            workload_name,
            &lay,
            &usable,
            file_size,
            bs,
        );
    }
    // Setup, over one connection, before any load.
    let mut setup4 = None;
    let mut qd = args.qd;
    let files;
    let mut setup = None;
    if args.nfs.is_v4() {
        let (s, f) = Setup4::prepare(
            &target,
            args.export.as_deref(),
            &args.file,
            args.files,
            file_size,
            reads,
            mix.any(Op::uses_files),
            lay.total_conns,
            args.qd,
            crate::jukebox::Policy::new(std::time::Duration::from_secs_f64(args.jukebox_timeout)),
        )?;
        anyhow::ensure!(
            bs <= s.client.max_io,
            "--bs {bs} is larger than the server's session allows ({})",
            s.client.max_io
        );
        qd = s.slots as usize;
        files = f;
        setup4 = Some(s);
    } else {
        let (c, f) = setup3(&args, &target, &mix, file_size, reads)?;
        files = f;
        setup = Some(c);
    }
    let sessions: Vec<crate::nfs4::setup::ConnSession> =
        setup4.as_ref().map(|s| s.conns.clone()).unwrap_or_default();
    let (clientid, owner) = setup4
        .as_ref()
        .map(|s| (s.client.clientid, s.client.owner.clone()))
        .unwrap_or_default();
    let plan = Plan {
        target: &target,
        mix: &mix,
        files: &files,
        bs,
        qd,
        verify: args.verify,
        write_pattern: args.verify || reads,
        track_writes: args.verify && writes,
        rate_per_conn: args.rate.map(|r| r / lay.total_conns as f64),
        pid: std::process::id(),
        conns: lay.total_conns,
        v4: setup4.as_ref().map(|_| V4Plan {
            conns: &sessions,
            clientid,
            owner: &owner,
        }),
        retry: crate::jukebox::Policy::new(std::time::Duration::from_secs_f64(
            args.jukebox_timeout,
        )),
    };
    run_load(
        &args,
        &target,
        &mix,
        workload_name,
        &lay,
        &usable,
        file_size,
        bs,
        plan,
        setup,
        setup4,
    )
}

/// The export's root handle by MOUNT v3: over `conn` (the NFS port), or over TCP to
/// `mount_port` on the target's host (servers that serve MOUNT on a port of its own).
/// Without `export`, the server's only one ([`crate::exports::choose`]).
pub fn mount_root(
    conn: &mut Conn,
    target: &Target,
    export: Option<&str>,
    mount_port: Option<u16>,
) -> anyhow::Result<Vec<u8>> {
    let mount = |c: &mut Conn| {
        let path = crate::exports::choose(export, || c.exports())?;
        c.mount(&path)
    };
    let Some(port) = mount_port else {
        return mount(conn);
    };
    let host = match target {
        Target::Tcp(a) => a
            .rsplit_once(':')
            .map_or(a.as_str(), |(h, _)| h)
            .to_string(),
        Target::Rdma { addr, .. } => addr.ip().to_string(),
    };
    let addr = format!("{host}:{port}");
    Conn::connect(&Target::Tcp(addr.clone()))
        .and_then(|mut c| mount(&mut c))
        .map_err(|e| anyhow::anyhow!("MOUNT at {addr} (--mount-port): {e}"))
}

/// NFSv3 setup: MOUNT (on the NFS port or `--mount-port`), then the file set.
fn setup3(
    args: &RunArgs,
    target: &Target,
    mix: &Mix,
    file_size: u64,
    reads: bool,
) -> anyhow::Result<(Conn, FileSet)> {
    let mut setup = Conn::connect(target)?;
    setup.retry =
        crate::jukebox::Policy::new(std::time::Duration::from_secs_f64(args.jukebox_timeout));
    let root = mount_root(&mut setup, target, args.export.as_deref(), args.mount_port)?;
    let files = if mix.any(Op::uses_files) {
        FileSet::prepare(&mut setup, &root, &args.file, args.files, file_size, reads)?
    } else {
        FileSet {
            dir: root.clone(),
            names: Vec::new(),
            handles: Vec::new(),
            size: file_size,
            stateids: Vec::new(),
            seeds: Vec::new(),
            creds: Vec::new(),
            stripes: Vec::new(),
        }
    };
    Ok((setup, files))
}

/// The load and what follows it (COMMIT, read-back, NFSv4.1 teardown, report).
#[allow(clippy::too_many_arguments)]
fn run_load(
    args: &RunArgs,
    target: &Target,
    mix: &Mix,
    workload_name: &str,
    lay: &Layout,
    usable: &[core_affinity::CoreId],
    file_size: u64,
    bs: u32,
    plan: Plan,
    setup: Option<Conn>,
    setup4: Option<Setup4>,
) -> anyhow::Result<()> {
    let files = plan.files;
    let writes = mix.any(Op::writes);
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

    let timing = Timing {
        warmup: Duration::from_secs_f64(args.warmup),
        duration: args
            .ops
            .is_none()
            .then(|| Duration::from_secs_f64(args.duration)),
    };
    let seconds = Seconds {
        live_line: std::io::stderr().is_terminal(),
        hdr_log: args
            .hdr_log
            .as_deref()
            .map(|p| (p, format!("{workload_name} on {}", args.target))),
    };
    let Load {
        stats: mut merged,
        written,
        measured_s: measured,
    } = load::run(&plan, &specs, &timing, &seconds)?;

    if let Some(mut setup) = setup {
        if writes {
            finish_writes(&mut setup, &plan, &written, &mut merged, args.qd.max(8))?;
        }
        add_setup_jukebox(&mut merged, writes, setup.jukebox);
    }
    let mut teardown = Ok(());
    if let Some(mut s) = setup4 {
        if writes {
            s.finish_writes(files, bs, &written, plan.track_writes, &mut merged);
        }
        add_setup_jukebox(&mut merged, writes, s.client.jukebox());
        teardown = s.teardown();
    }

    let settings = Settings {
        target: &args.target,
        provider: matches!(target, Target::Rdma { .. }).then(|| match args.provider {
            Provider::Soft => "soft",
            Provider::Verbs => "verbs",
        }),
        workload: workload_name,
        mix,
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
        qd: plan.qd,
        rate: args.rate,
        warmup_s: args.warmup,
        duration_s: measured,
        // Every connection is closed by now (load, setup and teardown).
        rdma: matches!(target, Target::Rdma { .. }).then(crate::rdma::totals),
    };
    if args.json {
        println!("{}", report::json(&settings, &merged));
    } else {
        print!("{}", report::table(&settings, &merged));
    }
    if let Some(path) = &args.plot {
        let series: Vec<(&str, &crate::stats::OpStats)> =
            merged.iter().map(|(k, s)| (k.name(), s)).collect();
        std::fs::write(
            path,
            crate::plot::svg(&report::headline(&settings), &series),
        )
        .map_err(|e| anyhow::anyhow!("--plot {}: {e}", path.display()))?;
    }
    let total = merged.total();
    let mut bad = Vec::new();
    if total.verify_failures > 0 {
        bad.push(format!(
            "verification FAILED: {} read(s) did not return the expected data or could not be checked",
            total.verify_failures
        ));
    }
    if total.errors > 0 {
        bad.push(format!("{} calls failed", total.errors));
    }
    if total.ops == 0 {
        bad.push("no op completed".into());
    }
    if let Err(e) = teardown {
        bad.push(format!("{e:#}"));
    }
    anyhow::ensure!(bad.is_empty(), "{}", bad.join("; "));
    Ok(())
}

/// Counts the JUKEBOX/DELAY resends of the setup and check calls (preparing files,
/// COMMIT, read-back): on the writes when the load wrote, else on its first op type.
fn add_setup_jukebox(merged: &mut Stats, writes: bool, n: u64) {
    if n == 0 {
        return;
    }
    let k = match merged.iter().next() {
        Some((k, _)) if !writes => k,
        _ => Kind::Write,
    };
    merged.kind(k).jukebox += n;
}

/// After a load that wrote: COMMIT the files written (a failure counts as a write
/// error), then, with `--verify`, read every written block back and check it.
fn finish_writes(
    setup: &mut Conn,
    plan: &Plan,
    written: &BlockSet,
    stats: &mut Stats,
    depth: usize,
) -> anyhow::Result<()> {
    let files = plan.files;
    let bs = plan.bs as u64;
    for (i, fh) in files.handles.iter().enumerate() {
        // Without tracking, any file may have been written.
        if plan.track_writes && !written.touched(i) {
            continue;
        }
        if let Err(e) = setup.commit(fh) {
            eprintln!("bench: COMMIT of {}: {e:#}", files.names[i]);
            stats.kind(Kind::Write).errors += 1;
        }
    }
    if !plan.track_writes {
        return Ok(());
    }
    for (i, fh) in files.handles.iter().enumerate() {
        // The last block of a file smaller than --bs is short.
        let mut blocks = written.blocks_of(i).map(|b| {
            let off = b * bs;
            (off, bs.min(files.size.saturating_sub(off)).max(1) as u32)
        });
        let pat = files.pattern(i);
        let w = stats.kind(Kind::Write);
        match setup.read_back(fh, &mut blocks, &pat, depth, &files.names[i]) {
            Ok((good, bad)) => {
                w.verified_bytes += good;
                w.verify_failures += bad;
            }
            // The data could not be checked: that is a failure to verify, not a pass.
            Err(e) => {
                eprintln!("bench: reading {} back: {e:#}", files.names[i]);
                w.verify_failures += 1;
            }
        }
    }
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
