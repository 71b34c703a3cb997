//! `nfsgw-tools sweep`: for every variant of a base config (the cartesian product of
//! the `--vary` axes), start the gateway on fresh ports, data and state directories,
//! run one bench workload against it, and collect ops/s, MiB/s, p99 and errors. Then
//! print a table, write an SVG bar chart, and write the best variant (by
//! `--objective`, variants with errors excluded) as a config: the base file with only
//! the varied keys changed, so its ports, directories and comments are the base's.

use crate::benchjson::{self, Figures};
use crate::plot;
use crate::variants::{self, Axis};
use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use std::fmt::Write as _;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use toml_edit::DocumentMut;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Objective {
    /// Highest total ops/s.
    #[value(name = "ops_per_s")]
    OpsPerS,
    /// Lowest p99 latency.
    P99,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Transport {
    Tcp,
    Rdma,
}

#[derive(Args, Debug)]
pub struct SweepArgs {
    /// The base configuration every variant starts from.
    #[arg(long, default_value = "configs/default.toml")]
    base: PathBuf,
    /// KEY=V1,V2,...: a dotted config key and its values (TOML literals; bare words
    /// are strings). Repeat for more axes. `bench.NAME=...` varies a bench option
    /// (e.g. bench.qd=1,8).
    #[arg(long = "vary", value_name = "KEY=V1,V2", required = true)]
    vary: Vec<String>,
    /// Bench arguments (whitespace-separated), without --target and --json, e.g.
    /// "--workload getattr --ops 500".
    #[arg(
        long,
        allow_hyphen_values = true,
        default_value = "--workload getattr --duration 5"
    )]
    bench: String,
    /// Which listener bench drives.
    #[arg(long, value_enum, default_value = "tcp")]
    transport: Transport,
    /// The gateway binary (default: next to this program).
    #[arg(long)]
    gateway: Option<PathBuf>,
    /// The bench binary (default: next to this program).
    #[arg(long)]
    bench_bin: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "ops_per_s")]
    objective: Objective,
    /// Where the best variant is written.
    #[arg(long, default_value = "configs/tuned.toml")]
    out: PathBuf,
    /// The SVG plot (default: --out with .svg).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Bench runs per variant (against the same gateway); the table shows medians and
    /// the errors of all runs. More runs tame a noisy machine.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: u32,
    /// Seconds to wait for each gateway to start.
    #[arg(long, default_value_t = 60)]
    start_timeout: u64,
    /// Keep the per-variant directories (configs, logs) instead of deleting them.
    #[arg(long)]
    keep: bool,
}

/// One variant's outcome.
struct Run {
    settings: Vec<(String, String)>,
    result: Result<Figures, String>,
}

impl Run {
    fn label(&self) -> String {
        self.settings
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn usable(&self) -> Option<&Figures> {
        self.result.as_ref().ok().filter(|f| f.errors == 0)
    }
}

fn sibling(name: &str) -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe().context("locating nfsgw-tools")?;
    Ok(me.with_file_name(name))
}

use crate::child::free_port;

/// A gateway child process, stopped (SIGTERM, then SIGKILL after 10 s) when dropped.
struct Gateway {
    child: Child,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        crate::child::stop(&mut self.child, Duration::from_secs(10));
    }
}

/// Starts the gateway and waits for its "serving" log line.
fn start_gateway(
    bin: &Path,
    config: &Path,
    log: &Path,
    timeout: Duration,
) -> anyhow::Result<Gateway> {
    let err = File::create(log)?;
    let child = Command::new(bin)
        .arg("--config")
        .arg(config)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let mut g = Gateway { child };
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains("serving NFSv3, MOUNT v3 and NFSv4.1 over TCP") {
            return Ok(g);
        }
        if let Some(st) = g.child.try_wait()? {
            bail!("gateway exited ({st}): {}", last_lines(&text, 5));
        }
        if start.elapsed() > timeout {
            bail!(
                "gateway not serving after {timeout:?}: {}",
                last_lines(&text, 5)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The line of a failed program's stderr that says why (anyhow's "Error: ..."), not
/// the backtrace after it.
fn error_line(stderr: &str) -> String {
    stderr
        .lines()
        .find(|l| l.starts_with("Error:") || l.starts_with("error:"))
        .map(str::to_string)
        .unwrap_or_else(|| last_lines(stderr, 2))
}

fn last_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

/// Bench arguments with the `bench.*` settings applied (replacing the same option).
fn bench_args(base: &str, settings: &[(String, String)]) -> Vec<String> {
    let mut args: Vec<String> = base.split_whitespace().map(String::from).collect();
    for (k, v) in settings {
        let Some(name) = k.strip_prefix("bench.") else {
            continue;
        };
        let flag = format!("--{}", name.replace('_', "-"));
        let mut i = 0;
        while i < args.len() {
            if args[i] == flag {
                args.drain(i..(i + 2).min(args.len()));
            } else if args[i].starts_with(&format!("{flag}=")) {
                args.remove(i);
            } else {
                i += 1;
            }
        }
        args.push(flag);
        args.push(v.trim_matches('"').to_string());
    }
    args
}

/// The config for one variant: base + settings + private ports and directories.
fn variant_config(
    base: &DocumentMut,
    settings: &[(String, String)],
    dir: &Path,
) -> anyhow::Result<(DocumentMut, u16, u16)> {
    let mut doc = base.clone();
    for (k, v) in settings.iter().filter(|(k, _)| !k.starts_with("bench.")) {
        variants::set(&mut doc, k, variants::literal(v))?;
    }
    let (tcp, rdma) = (free_port()?, free_port()?);
    let path = |p: &str| dir.join(p).display().to_string();
    std::fs::create_dir_all(dir.join("data"))?;
    variants::set(&mut doc, "tcp.listen", format!("127.0.0.1:{tcp}").into())?;
    variants::set(&mut doc, "rdma.listen", format!("127.0.0.1:{rdma}").into())?;
    variants::set(&mut doc, "backend.root", path("data").into())?;
    variants::set(&mut doc, "state.dir", path("state").into())?;
    // Several sweeps (or a running gateway) must not fight over the stats port.
    variants::remove(&mut doc, "stats.listen");
    Ok((doc, tcp, rdma))
}

fn run_variant(
    a: &SweepArgs,
    gw: &Path,
    bench: &Path,
    base: &DocumentMut,
    settings: &[(String, String)],
    dir: &Path,
) -> anyhow::Result<Figures> {
    let (doc, tcp, rdma) = variant_config(base, settings, dir)?;
    let cfg = dir.join("gateway.toml");
    std::fs::write(&cfg, doc.to_string())?;
    let _g = start_gateway(
        gw,
        &cfg,
        &dir.join("gateway.log"),
        Duration::from_secs(a.start_timeout),
    )?;
    let target = match a.transport {
        Transport::Tcp => format!("tcp://127.0.0.1:{tcp}"),
        Transport::Rdma => format!("rdma://127.0.0.1:{rdma}"),
    };
    let args = bench_args(&a.bench, settings);
    let mut figures = Vec::new();
    for run in 1..=a.runs {
        let out = Command::new(bench)
            .arg("--target")
            .arg(&target)
            .args(&args)
            .arg("--json")
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {}", bench.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        std::fs::write(dir.join(format!("bench.{run}.json")), stdout.as_bytes())?;
        std::fs::write(dir.join(format!("bench.{run}.stderr")), stderr.as_bytes())?;
        match benchjson::parse(&stdout) {
            Ok(f) => figures.push(f),
            Err(e) => bail!("{e} (bench {}: {})", out.status, error_line(&stderr)),
        }
    }
    Ok(median(&figures))
}

/// Medians of ops/s, MiB/s and p99 over runs; errors of all runs.
fn median(runs: &[Figures]) -> Figures {
    let mid = |f: fn(&Figures) -> f64| {
        let mut v: Vec<f64> = runs.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n == 0 {
            0.0
        } else if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    };
    Figures {
        ops_per_s: mid(|f| f.ops_per_s),
        mib_per_s: mid(|f| f.mib_per_s),
        p99_us: mid(|f| f.p99_us),
        errors: runs.iter().map(|f| f.errors).sum(),
    }
}

/// The command-line spelling of an option value.
fn value_name(v: impl ValueEnum) -> String {
    v.to_possible_value()
        .map(|p| p.get_name().to_string())
        .unwrap_or_default()
}

/// Index of the best usable run.
fn pick(runs: &[Run], objective: Objective) -> Option<usize> {
    let mut best: Option<(usize, &Figures)> = None;
    for (i, r) in runs.iter().enumerate() {
        let Some(f) = r.usable() else { continue };
        let better = match (best, objective) {
            (None, _) => true,
            (Some((_, b)), Objective::OpsPerS) => f.ops_per_s > b.ops_per_s,
            (Some((_, b)), Objective::P99) => f.p99_us < b.p99_us,
        };
        if better {
            best = Some((i, f));
        }
    }
    best.map(|(i, _)| i)
}

fn table(runs: &[Run], best: Option<usize>) -> String {
    let w = runs
        .iter()
        .map(|r| r.label().len())
        .max()
        .unwrap_or(7)
        .max(7);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:>3}  {:<w$}  {:>11}  {:>9}  {:>9}  {:>7}  note",
        "#", "variant", "ops/s", "MiB/s", "p99 µs", "errors"
    );
    for (i, r) in runs.iter().enumerate() {
        let note = if Some(i) == best { "best" } else { "" };
        match &r.result {
            Ok(f) => {
                let _ = writeln!(
                    s,
                    "{:>3}  {:<w$}  {:>11.0}  {:>9.2}  {:>9.1}  {:>7}  {}",
                    i + 1,
                    r.label(),
                    f.ops_per_s,
                    f.mib_per_s,
                    f.p99_us,
                    f.errors,
                    if f.errors > 0 {
                        "excluded (errors)"
                    } else {
                        note
                    }
                );
            }
            Err(e) => {
                let _ = writeln!(
                    s,
                    "{:>3}  {:<w$}  {:>11}  {:>9}  {:>9}  {:>7}  failed: {e}",
                    i + 1,
                    r.label(),
                    "-",
                    "-",
                    "-",
                    "-"
                );
            }
        }
    }
    s
}

/// The output config: the base document with the best variant's config keys set.
fn tuned_config(
    base_text: &str,
    base_path: &Path,
    run: &Run,
    a: &SweepArgs,
) -> anyhow::Result<String> {
    let mut doc: DocumentMut = base_text.parse()?;
    for (k, v) in run
        .settings
        .iter()
        .filter(|(k, _)| !k.starts_with("bench."))
    {
        variants::set(&mut doc, k, variants::literal(v))?;
    }
    let f = run.usable().expect("picked runs are usable");
    let bench: Vec<&(String, String)> = run
        .settings
        .iter()
        .filter(|(k, _)| k.starts_with("bench."))
        .collect();
    let mut head = format!(
        "# Written by `nfsgw-tools sweep` from {} (objective {}).\n\
         # Best variant: {}\n\
         # Measured: {:.0} ops/s, {:.2} MiB/s, p99 {:.1} µs (median of {} run(s)) with bench {} over {}.\n",
        base_path.display(),
        value_name(a.objective),
        run.label(),
        f.ops_per_s,
        f.mib_per_s,
        f.p99_us,
        a.runs,
        a.bench,
        value_name(a.transport)
    );
    if !bench.is_empty() {
        let _ = writeln!(
            head,
            "# Client-side settings of this variant (not config keys): {}",
            bench
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    Ok(format!("{head}\n{doc}"))
}

pub fn run(a: &SweepArgs) -> anyhow::Result<()> {
    let axes = a
        .vary
        .iter()
        .map(|s| Axis::parse(s))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let base_text =
        std::fs::read_to_string(&a.base).with_context(|| format!("--base {}", a.base.display()))?;
    let base: DocumentMut = base_text
        .parse()
        .with_context(|| format!("--base {}: not TOML", a.base.display()))?;
    let gw = match &a.gateway {
        Some(p) => p.clone(),
        None => sibling("gateway")?,
    };
    let bench = match &a.bench_bin {
        Some(p) => p.clone(),
        None => sibling("bench")?,
    };
    for (what, p) in [("--gateway", &gw), ("--bench-bin", &bench)] {
        if !p.is_file() {
            bail!(
                "{what}: {} not found (build with cargo build --release --workspace)",
                p.display()
            );
        }
    }
    let combos = variants::product(&axes);
    if combos.len() > 256 {
        bail!(
            "{} variants; narrow the --vary axes (at most 256)",
            combos.len()
        );
    }
    let root = std::env::temp_dir().join(format!(
        "nfsgw-sweep-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0)
    ));
    std::fs::create_dir_all(&root)?;
    eprintln!(
        "sweep: {} variant(s), bench \"{}\" over {}; work dir {}",
        combos.len(),
        a.bench,
        value_name(a.transport),
        root.display()
    );
    let mut runs = Vec::new();
    for (i, settings) in combos.into_iter().enumerate() {
        let dir = root.join(format!("v{}", i + 1));
        let r = run_variant(a, &gw, &bench, &base, &settings, &dir).map_err(|e| format!("{e:#}"));
        let run = Run {
            settings,
            result: r,
        };
        match &run.result {
            Ok(f) => eprintln!(
                "sweep: [{}] {}: {:.0} ops/s, p99 {:.1} µs, {} errors",
                i + 1,
                run.label(),
                f.ops_per_s,
                f.p99_us,
                f.errors
            ),
            Err(e) => eprintln!("sweep: [{}] {}: failed: {e}", i + 1, run.label()),
        }
        runs.push(run);
    }
    let best = pick(&runs, a.objective);
    print!("{}", table(&runs, best));

    let plot_path = a
        .plot
        .clone()
        .unwrap_or_else(|| a.out.with_extension("svg"));
    let bars: Vec<plot::Bar> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| plot::Bar {
            label: r.label(),
            value: r.result.as_ref().map(|f| f.ops_per_s).unwrap_or(0.0),
            note: match &r.result {
                Ok(f) if f.errors > 0 => format!("p99 {:.0} µs, {} errors", f.p99_us, f.errors),
                Ok(f) => format!("p99 {:.0} µs", f.p99_us),
                Err(_) => "failed".into(),
            },
            best: Some(i) == best,
        })
        .collect();
    if let Some(dir) = plot_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(
        &plot_path,
        plot::bars(&format!("nfsgw sweep: bench {}", a.bench), "ops/s", &bars),
    )
    .with_context(|| format!("writing {}", plot_path.display()))?;
    println!("plot: {}", plot_path.display());

    if !a.keep {
        let _ = std::fs::remove_dir_all(&root);
    }
    let Some(b) = best else {
        bail!("no variant ran without errors; no config written");
    };
    let text = tuned_config(&base_text, &a.base, &runs[b], a)?;
    if let Some(dir) = a.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&a.out, &text).with_context(|| format!("writing {}", a.out.display()))?;
    let check = Command::new(&gw)
        .arg("--check-config")
        .arg(&a.out)
        .output()?;
    if !check.status.success() {
        bail!(
            "{} was written but the gateway rejects it: {}",
            a.out.display(),
            String::from_utf8_lossy(&check.stderr).trim()
        );
    }
    println!("best: {} → {}", runs[b].label(), a.out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fig(ops: f64, p99: f64, errors: u64) -> Result<Figures, String> {
        Ok(Figures {
            ops_per_s: ops,
            mib_per_s: 0.0,
            p99_us: p99,
            errors,
        })
    }

    fn runs() -> Vec<Run> {
        vec![
            Run {
                settings: vec![("a".into(), "1".into())],
                result: fig(100.0, 50.0, 0),
            },
            Run {
                settings: vec![("a".into(), "2".into())],
                result: fig(300.0, 90.0, 0),
            },
            Run {
                settings: vec![("a".into(), "3".into())],
                result: fig(900.0, 10.0, 3),
            },
            Run {
                settings: vec![("a".into(), "4".into())],
                result: Err("boom".into()),
            },
        ]
    }

    #[test]
    fn best_excludes_errors_and_failures() {
        let r = runs();
        assert_eq!(pick(&r, Objective::OpsPerS), Some(1));
        assert_eq!(pick(&r, Objective::P99), Some(0));
        assert_eq!(pick(&r[2..], Objective::OpsPerS), None);
        let t = table(&r, Some(1));
        assert!(
            t.contains("best") && t.contains("excluded (errors)") && t.contains("failed: boom"),
            "{t}"
        );
    }

    #[test]
    fn failure_reason_is_the_error_line() {
        let e = "Error: call 7 timed out\n\nStack backtrace:\n   0: x\n   1: _start\n";
        assert_eq!(error_line(e), "Error: call 7 timed out");
        assert_eq!(error_line("a\nb\nc\n"), "b | c");
    }

    #[test]
    fn medians_over_runs() {
        let f = |o, p, e| Figures {
            ops_per_s: o,
            mib_per_s: 0.0,
            p99_us: p,
            errors: e,
        };
        let m = median(&[f(10.0, 5.0, 0), f(30.0, 1.0, 1), f(20.0, 9.0, 0)]);
        assert_eq!((m.ops_per_s, m.p99_us, m.errors), (20.0, 5.0, 1));
        let m = median(&[f(10.0, 5.0, 0), f(30.0, 1.0, 0)]);
        assert_eq!((m.ops_per_s, m.p99_us), (20.0, 3.0));
    }

    #[test]
    fn bench_settings_replace_options() {
        let s = vec![
            ("bench.qd".to_string(), "8".to_string()),
            ("rdma.credits".to_string(), "32".to_string()),
        ];
        assert_eq!(
            bench_args("--workload getattr --qd 1 --ops 5", &s),
            vec!["--workload", "getattr", "--ops", "5", "--qd", "8"]
        );
        assert_eq!(bench_args("--qd=2", &s), vec!["--qd", "8"]);
    }

    #[test]
    fn variant_gets_private_ports_and_dirs_output_keeps_base() {
        let base_text = "# base\n[tcp]\nlisten = \"127.0.0.1:2049\"\n[rdma]\ncredits = 128\n[stats]\nlisten = \"127.0.0.1:9108\"\n[[exports]]\npath = \"/\"\n";
        let base: DocumentMut = base_text.parse().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let settings = vec![("rdma.credits".to_string(), "32".to_string())];
        let (doc, tcp, _) = variant_config(&base, &settings, dir.path()).unwrap();
        assert_eq!(
            doc["tcp"]["listen"].as_str(),
            Some(format!("127.0.0.1:{tcp}").as_str())
        );
        assert_eq!(doc["rdma"]["credits"].as_integer(), Some(32));
        assert!(doc["stats"].get("listen").is_none());
        assert!(doc["backend"]["root"]
            .as_str()
            .unwrap()
            .starts_with(dir.path().to_str().unwrap()));
        let a = SweepArgs {
            base: "b.toml".into(),
            vary: vec![],
            bench: "--ops 1".into(),
            transport: Transport::Tcp,
            gateway: None,
            bench_bin: None,
            objective: Objective::OpsPerS,
            out: "o.toml".into(),
            plot: None,
            runs: 1,
            start_timeout: 1,
            keep: false,
        };
        let run = Run {
            settings,
            result: fig(1.0, 1.0, 0),
        };
        let out = tuned_config(base_text, Path::new("b.toml"), &run, &a).unwrap();
        let o: DocumentMut = out.parse().unwrap();
        assert_eq!(o["tcp"]["listen"].as_str(), Some("127.0.0.1:2049"));
        assert_eq!(o["stats"]["listen"].as_str(), Some("127.0.0.1:9108"));
        assert_eq!(o["rdma"]["credits"].as_integer(), Some(32));
        assert!(o.get("backend").is_none());
        assert!(out.contains("# base"));
    }
}
