//! `bench md`: an mdtest-style metadata run against any NFS server (HPC measures
//! metadata with mdtest inside IO500; this measures peers with the same client).
//!
//! Under a fresh top directory in the export, every connection makes its directory
//! (`--tree easy`) or connection 0 makes one all share (`--tree hard`), then the
//! phases run one after another, all connections together, each with `--qd` ops in
//! flight: create (with `--write-size` bytes of content derived from the name), stat,
//! read, readdir (whole listings, page after page), remove, rmdir. Each phase reports
//! ops/s over its wall time and the latency percentiles. `--verify` checks every read
//! against the content, every stat size, and every listing against the names created.
//! Only what any server answers is used: MOUNT v3 for the root handle under NFSv3,
//! PUTROOTFH + LOOKUP under NFSv4.1 (see `v3`, `v4`).

mod exec;
mod plan;
mod report;
mod scrape;
mod v3;
mod v4;
mod verify;

use crate::client::Conn;
use crate::transport::{Provider, Target};
use crate::NfsVersion;
use exec::{run_phase, PhaseOut, Proto, Work};
pub use plan::{Phase, Phases, Plan, Tree};
use std::time::{Duration, Instant};

fn phases_arg(s: &str) -> Result<Phases, String> {
    Phases::parse(s)
}

/// The largest `--write-size`: one READ or WRITE of bench's (1 MiB).
const MAX_WRITE: u64 = 1 << 20;

#[derive(clap::Args, Debug, Clone)]
pub struct MdArgs {
    /// tcp://HOST:PORT or rdma://HOST:PORT
    #[arg(long, default_value = "tcp://127.0.0.1:2049")]
    pub target: String,
    /// NFS version: 3 (MOUNT v3 for the root) or 4.1 (a client and session per
    /// connection; PUTROOTFH + LOOKUP for the root).
    #[arg(long, value_enum, default_value = "3")]
    pub nfs: NfsVersion,
    /// RDMA provider for rdma:// targets.
    #[arg(long, value_enum, default_value = "soft")]
    pub provider: Provider,
    /// Export path to mount; default: the server's only export (MOUNT EXPORT; an
    /// error listing them if it has several).
    #[arg(long)]
    pub export: Option<String>,
    /// Send MOUNT to this TCP port on the target's host (NFSv3).
    #[arg(long, value_name = "PORT")]
    pub mount_port: Option<u16>,
    /// easy: a directory per connection (IO500 mdtest-easy); hard: one directory all
    /// connections share (mdtest-hard).
    #[arg(long, value_enum, default_value = "easy")]
    pub tree: Tree,
    /// Files each connection creates.
    #[arg(long, default_value_t = 1000)]
    pub files_per_conn: usize,
    /// Bytes written into each file at create and read back (IO500's 3901; 0: empty
    /// files, no WRITE). Suffixes k, m; at most 1m.
    #[arg(long, default_value = "3901", value_parser = crate::size_arg)]
    pub write_size: u64,
    /// Phases to report, comma-separated (mkdir,create,stat,read,readdir,remove,rmdir);
    /// they run in that order. mkdir, create, remove and rmdir run anyway (the tree is
    /// made and removed), stat, read and readdir only when listed.
    #[arg(long, default_value = "mkdir,create,stat,read,readdir,remove,rmdir", value_parser = phases_arg)]
    pub phases: Phases,
    /// Check every read's content, every stat's size and every listing's names
    /// (none missing, extra or twice); exits non-zero on any mismatch.
    #[arg(long)]
    pub verify: bool,
    /// Connections, each driven by its own thread.
    #[arg(long, default_value_t = 1)]
    pub conns: usize,
    /// Ops in flight per connection.
    #[arg(long, default_value_t = 1)]
    pub qd: usize,
    /// Top directory of the run, in the export's root (default bench-md.PID.RANDOM);
    /// it must not exist and is removed at the end.
    #[arg(long, value_name = "NAME")]
    pub dir: Option<String>,
    /// Print one JSON object (schema nfsgw-bench-md/1, docs/bench.md) instead of the
    /// table.
    #[arg(long)]
    pub json: bool,
    /// The gateway's Prometheus endpoint (http://HOST:9108/metrics): read before and
    /// after each phase, the s3 backend's store requests per NFS op are reported
    /// (`nfsgw_s3_requests_total`, gateway-wide counters).
    #[arg(long, value_name = "URL")]
    pub stats_url: Option<String>,
    /// Seconds a call may keep being answered NFS3ERR_JUKEBOX / NFS4ERR_DELAY.
    #[arg(long, default_value = "60", value_parser = crate::secs_arg)]
    pub jukebox_timeout: f64,
}

/// One phase's results over all connections.
pub struct PhaseResult {
    pub phase: Phase,
    pub wall: Duration,
    pub out: PhaseOut,
    /// `--stats-url`: the store requests the gateway sent during the phase, by kind.
    pub store: Option<scrape::Counts>,
}

/// The store request counters now, when `--stats-url` is given.
fn scrape_now(url: Option<&str>) -> anyhow::Result<Option<scrape::Counts>> {
    url.map(|u| scrape::fetch(u).map(|t| scrape::store_requests(&t)))
        .transpose()
}

/// The connections and the export's root.
struct Conns {
    protos: Vec<Box<dyn Proto>>,
    root: Vec<u8>,
}

fn connect(a: &MdArgs, target: &Target) -> anyhow::Result<Conns> {
    let retry = crate::jukebox::Policy::new(Duration::from_secs_f64(a.jukebox_timeout));
    let size = a.write_size as usize;
    let mut protos: Vec<Box<dyn Proto>> = Vec::with_capacity(a.conns);
    if a.nfs.is_v4() {
        anyhow::ensure!(
            a.mount_port.is_none(),
            "--mount-port is for NFSv3 (NFSv4.1 has no MOUNT)"
        );
        let mut root = Vec::new();
        for _ in 0..a.conns {
            let slots = u32::try_from(a.qd).unwrap_or(u32::MAX);
            let mut c = crate::nfs4::session::Client4::connect(target, slots)?;
            c.set_retry(retry);
            if root.is_empty() {
                let export = crate::exports::choose(a.export.as_deref(), || c.exports())?;
                root = c.root(&export)?;
            }
            protos.push(Box::new(v4::V4::new(c, size, a.verify, retry)));
        }
        return Ok(Conns { protos, root });
    }
    let mut first = Conn::connect(target)?;
    first.retry = retry;
    let root = crate::run::mount_root(&mut first, target, a.export.as_deref(), a.mount_port)?;
    let mut first = Some(first);
    for _ in 0..a.conns {
        let mut c = match first.take() {
            Some(c) => c,
            None => Conn::connect(target)?,
        };
        c.retry = retry;
        protos.push(Box::new(v3::V3::new(c, a.qd, size, a.verify)));
    }
    Ok(Conns { protos, root })
}

/// Runs `works[c]` as `phase` on every connection `c` at once.
fn phase_on_all(
    protos: &mut [Box<dyn Proto>],
    phase: Phase,
    works: &[Vec<Work>],
) -> anyhow::Result<(Duration, Vec<PhaseOut>)> {
    let t0 = Instant::now();
    let outs: Vec<anyhow::Result<PhaseOut>> = std::thread::scope(|s| {
        let hs: Vec<_> = protos
            .iter_mut()
            .zip(works)
            .map(|(p, w)| s.spawn(move || run_phase(p.as_mut(), phase, w)))
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a connection's thread panicked")))
            })
            .collect()
    });
    let wall = t0.elapsed();
    let outs = outs
        .into_iter()
        .enumerate()
        .map(|(c, o)| o.map_err(|e| anyhow::anyhow!("{phase}, connection {c}: {e:#}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok((wall, outs))
}

/// The ops of `phase` for every connection, given the top directory's handle and the
/// work directories' handles (known after mkdir).
fn works_of(plan: &Plan, phase: Phase, top: &[u8], dirs: &[Vec<u8>]) -> Vec<Vec<Work>> {
    let names = plan.dirs();
    (0..plan.conns)
        .map(|c| {
            let own = || dirs.get(plan.dir_of(c)).cloned().unwrap_or_default();
            let work = |dir: Vec<u8>, name: String| Work { dir, name };
            match phase {
                Phase::Mkdir | Phase::Rmdir => plan
                    .dirs_made_by(c)
                    .into_iter()
                    .map(|d| work(top.to_vec(), names[d].clone()))
                    .collect(),
                Phase::Readdir => vec![work(own(), names[plan.dir_of(c)].clone())],
                _ => plan
                    .files_of(c)
                    .into_iter()
                    .map(|n| work(own(), n))
                    .collect(),
            }
        })
        .collect()
}

/// One unmeasured op on connection 0 (the top directory), failing on any error.
fn single(p: &mut dyn Proto, phase: Phase, dir: &[u8], name: &str) -> anyhow::Result<Vec<u8>> {
    let w = [Work {
        dir: dir.to_vec(),
        name: name.to_string(),
    }];
    let mut out = run_phase(p, phase, &w)?;
    if let Some(e) = out.errors.first() {
        anyhow::bail!("{e}");
    }
    Ok(std::mem::take(&mut out.handles[0]))
}

/// Merges the connections' outcomes of one phase.
fn merge(outs: Vec<PhaseOut>) -> PhaseOut {
    let mut all = PhaseOut::default();
    for o in outs {
        all.stats.merge(&o.stats);
        all.errors.extend(o.errors);
        all.wrong.extend(o.wrong);
    }
    all
}

/// The listings checked against the plan (readdir with `--verify`).
fn check_listings(plan: &Plan, outs: &mut [PhaseOut]) {
    let names = plan.dirs();
    for (c, o) in outs.iter_mut().enumerate() {
        let d = plan.dir_of(c);
        let Some(listed) = o.listings.first() else {
            continue;
        };
        if o.stats.errors > 0 {
            continue; // the listing failed: counted already
        }
        if let Err(e) = verify::check_listing(&names[d], &plan.expected_in(d), listed) {
            o.stats.verify_failures += 1;
            o.wrong.push(e);
        }
    }
}

pub fn main(a: MdArgs) -> anyhow::Result<()> {
    crate::nfs4::set_minor(a.nfs.minor().max(1));
    let target = Target::parse(&a.target, a.provider)?;
    anyhow::ensure!(a.conns > 0, "--conns must be at least 1");
    anyhow::ensure!(a.qd > 0, "--qd must be at least 1");
    anyhow::ensure!(a.write_size <= MAX_WRITE, "--write-size is at most 1m");
    let plan = Plan {
        tree: a.tree,
        conns: a.conns,
        files: a.files_per_conn,
    };
    let top_name = a.dir.clone().unwrap_or_else(|| {
        format!(
            "bench-md.{}.{:04x}",
            std::process::id(),
            rand::random::<u16>()
        )
    });
    let mut cs = connect(&a, &target)?;
    let top = single(cs.protos[0].as_mut(), Phase::Mkdir, &cs.root, &top_name)
        .map_err(|e| anyhow::anyhow!("making the top directory: {e:#}"))?;
    let mut dirs: Vec<Vec<u8>> = Vec::new();
    let mut results = Vec::new();
    for phase in a.phases.to_run() {
        let works = works_of(&plan, phase, &top, &dirs);
        let before = scrape_now(a.stats_url.as_deref())?;
        let (wall, mut outs) = phase_on_all(&mut cs.protos, phase, &works)?;
        let after = scrape_now(a.stats_url.as_deref())?;
        let store = before.zip(after).map(|(b, a)| scrape::delta(&b, &a));
        if phase == Phase::Mkdir {
            dirs = vec![Vec::new(); plan.dirs().len()];
            for (c, o) in outs.iter().enumerate() {
                for (d, fh) in plan.dirs_made_by(c).into_iter().zip(&o.handles) {
                    dirs[d] = fh.clone();
                }
            }
        }
        if phase == Phase::Readdir && a.verify {
            check_listings(&plan, &mut outs);
        }
        let out = merge(outs);
        let broken = matches!(phase, Phase::Mkdir | Phase::Create) && out.stats.errors > 0;
        results.push(PhaseResult {
            phase,
            wall,
            out,
            store,
        });
        if broken {
            break; // the tree is not there: later phases would only fail
        }
    }
    let left = single(cs.protos[0].as_mut(), Phase::Rmdir, &cs.root, &top_name).err();
    let text = if a.json {
        report::json(&a, &plan, &results)
    } else {
        report::table(&a, &results)
    };
    println!("{}", text.trim_end());
    finish(cs.protos);
    report::outcome(
        &results,
        left.map(|e| format!("removing {top_name}: {e:#}")),
    )
}

/// Ends NFSv4.1 clients (DESTROY_SESSION, DESTROY_CLIENTID); NFSv3 has nothing to end.
fn finish(protos: Vec<Box<dyn Proto>>) {
    for p in protos {
        if let Err(e) = p.finish() {
            eprintln!("bench: {e:#}");
        }
    }
}
