//! `nfsgw-tools fuzz`: seeded, deterministic fuzz campaigns against the real gateway
//! binary over TCP (docs/fuzzing.md). It starts the gateway with a temporary config,
//! writes and COMMITs a canary file, runs the structured campaign (valid calls, hostile
//! values), the mutation campaign (mangled bytes and record marks) and the NFSv4.1
//! campaign (COMPOUNDs on sessions, hostile ops, a mutated share), the RPC-over-RDMA
//! campaign (hostile transport headers, chunk lists and peer behaviour over the `soft`
//! provider), and after each
//! checks that the gateway answers NULL and MNT+GETATTR, logged no panic, still serves
//! the canary byte-exact, and is back to its baseline pool use and RSS once every fuzz
//! connection has closed. Any failure exits non-zero with the seed and the call in hex.

mod campaign;
mod client;
mod gateway;
mod mutate;
mod rdmacheck;
mod rdmagen;
mod rdmapeer;
mod rdmarun;
mod rdmav4;
mod rng;
mod semantics;
mod structured;
mod v4;
mod v4check;
mod v4run;
mod values;
mod wire;

use anyhow::{bail, Context};
use campaign::{Campaign, Kind};
use clap::{Args, ValueEnum};
use client::{canary_bytes, Client, CANARY_DIR, CANARY_FILE};
use gateway::Gateway;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Which {
    Structured,
    Mutate,
    V4,
    Rdma,
    All,
}

#[derive(Args, Debug)]
pub struct FuzzArgs {
    /// Seed of every random choice; the same seed sends the same calls. The default is
    /// the CI seed (tests/e2e/test_fuzz.py).
    #[arg(long, default_value_t = 3)]
    seed: u64,
    /// Calls (or mutated records) per campaign and round.
    #[arg(long, default_value_t = 10_000)]
    calls: usize,
    /// Night mode: repeat rounds (seed, seed+1, ...) against one gateway for this many
    /// seconds. Without it, one round.
    #[arg(long)]
    duration: Option<u64>,
    #[arg(long, value_enum, default_value = "all")]
    campaign: Which,
    /// The gateway binary (default: next to this program).
    #[arg(long)]
    gateway: Option<PathBuf>,
    /// CPUs for the gateway's reactors (`engine.cores`), e.g. `0` or `0,1` (then
    /// connections spread over two reactors).
    #[arg(long, value_delimiter = ',', default_value = "0")]
    core: Vec<usize>,
    /// `cache.size_mib` of the gateway (0 = no page cache: READs always reach the
    /// backend).
    #[arg(long, default_value_t = 16)]
    cache_mib: u64,
    /// Milliseconds a call may go unanswered (with its connection open) before it is a
    /// failure.
    #[arg(long, default_value_t = 10_000)]
    call_timeout_ms: u64,
    /// RSS growth over the baseline (MiB) allowed after a campaign.
    #[arg(long, default_value_t = 96)]
    rss_slack_mib: u64,
    /// Seconds to wait for connections, pool buffers and RSS to come back to baseline.
    #[arg(long, default_value_t = 20)]
    settle_s: u64,
    /// Where the gateway's directory goes (it is kept after a failure).
    #[arg(long, default_value_os_t = std::env::temp_dir())]
    workdir: PathBuf,
    /// Also print, per campaign, calls and successes per procedure.
    #[arg(long)]
    verbose: bool,
    /// Keep the gateway's directory (config, log, data) after success too.
    #[arg(long)]
    keep: bool,
}

/// Baseline resource use, taken after setup with no client connected.
struct Baseline {
    pool_in_use: f64,
    rss_kib: u64,
}

pub fn run(a: &FuzzArgs) -> anyhow::Result<()> {
    let bin = match &a.gateway {
        Some(p) => p.clone(),
        None => std::env::current_exe()?.with_file_name("gateway"),
    };
    println!(
        "fuzz: seed {} calls {} campaign {:?} gateway {}",
        a.seed,
        a.calls,
        a.campaign,
        bin.display()
    );
    // RDMA only when campaign `rdma` runs: the TCP campaigns keep their config.
    let rdma = matches!(a.campaign, Which::Rdma | Which::All);
    let mut gw = Gateway::start(&bin, &a.workdir, &a.core, a.cache_mib, rdma)?;
    let result = rounds(a, &mut gw);
    match &result {
        Ok(()) if !a.keep => {
            let dir = gw.dir.clone();
            drop(gw);
            std::fs::remove_dir_all(&dir).ok();
        }
        _ => println!("fuzz: gateway directory kept: {}", gw.dir.display()),
    }
    result
}

fn rounds(a: &FuzzArgs, gw: &mut Gateway) -> anyhow::Result<()> {
    let timeout = Duration::from_millis(a.call_timeout_ms);
    let (root, canary) = setup_canary(gw, a.seed, timeout)?;
    let base = settle_baseline(gw, a)?;
    println!(
        "fuzz: baseline pool buffers in use {} RSS {} KiB",
        base.pool_in_use, base.rss_kib
    );
    let until = a.duration.map(|d| Instant::now() + Duration::from_secs(d));
    let mut round = 0u64;
    loop {
        let seed = a.seed.wrapping_add(round);
        let kinds: &[Kind] = match a.campaign {
            Which::Structured => &[Kind::Structured],
            Which::Mutate => &[Kind::Mutate],
            Which::V4 => &[Kind::V4],
            Which::Rdma => &[Kind::Rdma],
            Which::All => &[Kind::Structured, Kind::Mutate, Kind::V4, Kind::Rdma],
        };
        for &kind in kinds {
            let t0 = Instant::now();
            let (files, dirs) = work_area(gw, seed, kind, timeout)?;
            let gen = structured::Gen::new(seed ^ kind as u64, files, dirs, vec![root.clone()]);
            let mut c = Campaign::new(kind, seed, a.calls, timeout, gw, gen);
            c.deadline = until;
            match kind {
                Kind::Structured => {
                    let mut r = rng::Rng::new(seed).fork(0x7374_7275);
                    c.run_structured(&mut r)?
                }
                Kind::Mutate => {
                    let mut r = rng::Rng::new(seed).fork(0x6d75_7461);
                    c.run_mutate(&mut r)?
                }
                Kind::V4 => {
                    let mut r = rng::Rng::new(seed).fork(0x7634_7634);
                    let work = format!("fz-{seed}-v4").into_bytes();
                    let mut g = v4::V4Gen::new(seed, work);
                    c.run_v4(&mut r, &mut g)?
                }
                Kind::Rdma => {
                    let mut r = rng::Rng::new(seed).fork(0x7264_6d61);
                    let addr =
                        c.gw.rdma
                            .context("campaign rdma without an RDMA listener")?;
                    c.run_rdma(addr, &mut r)?
                }
            }
            let t = &c.tally;
            println!(
                "fuzz: seed {seed} {}: {} calls in {:.1} s, {} replies, {} closes, {} held; {:?}",
                kind.name(),
                t.calls,
                t0.elapsed().as_secs_f64(),
                t.replies,
                t.closes,
                t.held,
                t.by_stat
            );
            if a.verbose {
                for (p, (n, ok)) in &t.by_proc {
                    println!("fuzz:   {p:<24} {n:>7} calls {ok:>7} status 0");
                }
            }
            after_campaign(gw, a, &base, &root, &canary, seed, kind, timeout)?;
        }
        round += 1;
        match until {
            Some(u) if Instant::now() < u => continue,
            _ => break,
        }
    }
    println!("fuzz: OK ({round} round(s), seed {})", a.seed);
    Ok(())
}

/// Writes the canary (UNSTABLE + COMMIT, by a well-behaved client); returns the root
/// handle and the canary's path handles.
fn setup_canary(gw: &Gateway, seed: u64, timeout: Duration) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
    let mut c = Client::connect(&gw.addr, timeout)?;
    let root = c.mount().context("setup")?;
    let dir = c
        .mkdir(&root, CANARY_DIR)
        .context("setup: MKDIR canary dir")?;
    let f = c
        .create(&dir, CANARY_FILE)
        .context("setup: CREATE canary")?;
    let data = canary_bytes(seed);
    c.write_commit(&f, &data)
        .context("setup: canary WRITE+COMMIT")?;
    let back = c.read_all(&f).context("setup: canary READ")?;
    anyhow::ensure!(
        back == data,
        "setup: canary read back differs before any fuzzing"
    );
    Ok((root, f))
}

/// A fresh directory for one campaign with files, directories, a symlink and the
/// handle of a removed file; returns their handles for the generator (files and
/// others, directories).
type Handles = (Vec<Vec<u8>>, Vec<Vec<u8>>);
fn work_area(gw: &Gateway, seed: u64, kind: Kind, timeout: Duration) -> anyhow::Result<Handles> {
    let mut c = Client::connect(&gw.addr, timeout)?;
    let root = c.mount()?;
    let name = format!("fz-{seed}-{}", kind.name());
    let w = match c.mkdir(&root, name.as_bytes()) {
        Ok(w) => w,
        Err(_) => c.lookup(&root, name.as_bytes()).context("work area")?,
    };
    let mut hs = Vec::new();
    for (i, f) in [b"f0", b"f1", b"f2", b"f3"].iter().enumerate() {
        let h = c.create(&w, *f)?;
        if i < 2 {
            c.write_commit(&h, &vec![i as u8 + 1; 20_000 + i * 9000])?;
        }
        hs.push(h);
    }
    let dirs = vec![w.clone(), c.mkdir(&w, b"d0")?, c.mkdir(&w, b"d1")?];
    hs.push(c.symlink(&w, b"l0", b"f0")?);
    hs.push(c.create(&w, b"gone")?);
    c.remove(&w, b"gone")?;
    Ok((hs, dirs))
}

/// Pool buffers in use and open connections (TCP and RDMA).
fn pool_in_use(gw: &Gateway) -> anyhow::Result<(f64, f64)> {
    let m = gw.scrape()?;
    Ok((
        m.sum("nfsgw_pool_buffers_in_use", &[]),
        m.sum("nfsgw_tcp_connections", &[]) + m.sum("nfsgw_rdma_connections", &[]),
    ))
}

/// Waits for no connections, then takes the baseline.
fn settle_baseline(gw: &Gateway, a: &FuzzArgs) -> anyhow::Result<Baseline> {
    let end = Instant::now() + Duration::from_secs(a.settle_s);
    loop {
        let (pool, conns) = pool_in_use(gw)?;
        if conns == 0.0 {
            return Ok(Baseline {
                pool_in_use: pool,
                rss_kib: gw.rss_kib()?,
            });
        }
        if Instant::now() > end {
            bail!("setup connections still open after {} s", a.settle_s);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The checks after every campaign (docs/fuzzing.md "After each campaign").
#[allow(clippy::too_many_arguments)]
fn after_campaign(
    gw: &mut Gateway,
    a: &FuzzArgs,
    base: &Baseline,
    root: &[u8],
    canary: &[u8],
    seed: u64,
    kind: Kind,
    timeout: Duration,
) -> anyhow::Result<()> {
    let what = format!("after campaign {} (seed {seed})", kind.name());
    let report = |gw: &Gateway, why: String| {
        anyhow::anyhow!(
            "FUZZ FAILURE: {what}: {why}\ngateway log (last lines):\n{}\nreproduce: nfsgw-tools fuzz --seed {seed} --campaign {} --calls {}",
            gw.log_tail(30),
            kind.name(),
            a.calls
        )
    };
    if let Some(st) = gw.exited() {
        return Err(report(gw, format!("gateway exited ({st})")));
    }
    let check = || -> anyhow::Result<()> {
        let mut c = Client::connect(&gw.addr, timeout)?;
        c.null().context("NULL")?;
        let r = c.mount().context("MNT")?;
        anyhow::ensure!(r == root, "MNT returned a different root handle");
        c.getattr(&r).context("GETATTR of the root")?;
        let dir = c.lookup(&r, CANARY_DIR).context("LOOKUP canary dir")?;
        let f = c.lookup(&dir, CANARY_FILE).context("LOOKUP canary")?;
        anyhow::ensure!(f == canary, "the canary's handle changed");
        let data = c.read_all(&f).context("READ canary")?;
        let want = canary_bytes(a.seed);
        if data != want {
            let at = data.iter().zip(&want).position(|(x, y)| x != y);
            bail!(
                "canary differs: {} bytes read, {} expected, first difference at {at:?}",
                data.len(),
                want.len()
            );
        }
        Ok(())
    };
    check().map_err(|e| report(gw, format!("{e:#}")))?;
    if let Some(addr) = gw.rdma {
        rdmarun::null_on_fresh_connection(addr, timeout)
            .map_err(|e| report(gw, format!("fresh RDMA connection: {e}")))?;
    }
    let panics: Vec<String> = gw
        .log_text()
        .lines()
        .filter(|l| l.contains("panicked"))
        .map(String::from)
        .collect();
    if !panics.is_empty() {
        return Err(report(
            gw,
            format!("log has `panicked`: {}", panics.join(" | ")),
        ));
    }
    // Resources: every connection closed, pool buffers and RSS back within bounds.
    let end = Instant::now() + Duration::from_secs(a.settle_s);
    loop {
        let (pool, conns) = pool_in_use(gw).map_err(|e| report(gw, format!("stats: {e:#}")))?;
        let rss = gw.rss_kib()?;
        let rss_ok = rss <= base.rss_kib + a.rss_slack_mib * 1024;
        if conns == 0.0 && pool <= base.pool_in_use && rss_ok {
            println!("fuzz: {what}: healthy; pool buffers in use {pool}, RSS {rss} KiB");
            return Ok(());
        }
        if Instant::now() > end {
            return Err(report(
                gw,
                format!(
                    "not back to baseline after {} s: connections {conns}, pool buffers in use {pool} \
                     (baseline {}), RSS {rss} KiB (baseline {} + {} MiB allowed)",
                    a.settle_s, base.pool_in_use, base.rss_kib, a.rss_slack_mib
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
