//! `nfsgw-tools top`: scrape /metrics every interval and show rates from the
//! difference of two scrapes: per reactor busy %, ops/s, MiB/s, p99 (from histogram
//! bucket deltas), parked calls, connections, RDMA credits and pool occupancy; then
//! the procedures seen in the interval; then the heaviest clients and exports
//! (`nfsgw_client_*`, `nfsgw_export_*`: the gateway's top N plus "other").
//! Plain ANSI (home + clear) between frames; `--once` prints a single frame without
//! escapes.

use crate::fetch;
use crate::metrics::Scrape;
use clap::Args;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct TopArgs {
    /// The gateway's stats endpoint.
    #[arg(long, default_value = "http://127.0.0.1:9108/metrics")]
    url: String,
    /// Seconds between frames.
    #[arg(long, default_value_t = 1.0)]
    interval: f64,
    /// Print one frame (two scrapes one interval apart) without terminal escapes.
    #[arg(long)]
    once: bool,
    /// Rows of the heaviest clients and of the heaviest exports.
    #[arg(long, default_value_t = 10)]
    top: usize,
}

pub fn run(a: &TopArgs) -> anyhow::Result<()> {
    if !(a.interval > 0.0 && a.interval <= 3600.0) {
        anyhow::bail!("--interval must be in (0, 3600] seconds");
    }
    let interval = Duration::from_secs_f64(a.interval);
    let timeout = Duration::from_secs(5);
    let mut prev = Scrape::parse(&fetch::get(&a.url, timeout)?);
    let mut at = Instant::now();
    loop {
        std::thread::sleep(interval);
        let cur = Scrape::parse(&fetch::get(&a.url, timeout)?);
        let now = Instant::now();
        let secs = now.duration_since(at).as_secs_f64();
        let mut frame = render(&a.url, &prev, &cur, secs);
        for what in ["client", "export"] {
            tenants(&mut frame, &prev, &cur, secs, what, a.top);
        }
        if a.once {
            print!("{frame}");
            return Ok(());
        }
        print!("\x1b[H\x1b[2J{frame}");
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        prev = cur;
        at = now;
    }
}

fn delta(prev: &Scrape, cur: &Scrape, name: &str, with: &[(&str, &str)]) -> f64 {
    (cur.sum(name, with) - prev.sum(name, with)).max(0.0)
}

const HIST: &str = "nfsgw_request_duration_seconds_bucket";

/// p99 (µs, the upper bound of its bucket; infinite for the overflow bucket) of the
/// calls completed between two scrapes, over the series matching `with`.
pub fn p99_us(prev: &Scrape, cur: &Scrape, with: &[(&str, &str)]) -> Option<f64> {
    p99_of(HIST, prev, cur, with)
}

/// [`p99_us`] of any histogram family (`hist`: its `_bucket` series).
fn p99_of(hist: &str, prev: &Scrape, cur: &Scrape, with: &[(&str, &str)]) -> Option<f64> {
    let cumulative = |s: &Scrape| {
        let mut by_le: BTreeMap<u64, f64> = BTreeMap::new();
        for x in s.matching(hist, with) {
            let le = x.labels.get("le").map(String::as_str).unwrap_or("+Inf");
            let us = if le == "+Inf" {
                u64::MAX
            } else {
                (le.parse::<f64>().unwrap_or(f64::INFINITY) * 1e6).round() as u64
            };
            *by_le.entry(us).or_default() += x.value;
        }
        by_le
    };
    let (a, b) = (cumulative(prev), cumulative(cur));
    let total = b.get(&u64::MAX).copied().unwrap_or(0.0) - a.get(&u64::MAX).copied().unwrap_or(0.0);
    if total <= 0.0 {
        return None;
    }
    let rank = (total * 0.99).ceil().max(1.0);
    for (le, cum) in &b {
        let d = cum - a.get(le).copied().unwrap_or(0.0);
        if d >= rank {
            return Some(if *le == u64::MAX {
                f64::INFINITY
            } else {
                *le as f64
            });
        }
    }
    Some(f64::INFINITY)
}

fn fmt_us(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(x) if x.is_infinite() => ">4.2s".into(),
        Some(x) if x >= 1000.0 => format!("{:.1}ms", x / 1000.0),
        Some(x) => format!("{x:.0}µs"),
    }
}

fn size_name(bytes: &str) -> String {
    match bytes.parse::<u64>() {
        Ok(b) if b >= 1 << 20 => format!("{}M", b >> 20),
        Ok(b) if b >= 1 << 10 => format!("{}K", b >> 10),
        _ => bytes.to_string(),
    }
}

/// One frame of text (no escapes).
pub fn render(url: &str, prev: &Scrape, cur: &Scrape, secs: f64) -> String {
    let secs = secs.max(1e-6);
    let mib = (1u64 << 20) as f64;
    let mut out = String::new();
    let _ = writeln!(out, "nfsgw top  {url}  interval {secs:.1}s");
    let _ = writeln!(
        out,
        "{:<8} {:>6} {:>10} {:>9} {:>9} {:>8} {:>6} {:>5} {:>5} {:>11}  pools in use",
        "reactor",
        "busy%",
        "ops/s",
        "MiB/s in",
        "MiB/s out",
        "p99",
        "parked",
        "tcp",
        "rdma",
        "credits"
    );
    let mut reactors = cur.label_values("nfsgw_reactor_polls_total", "reactor");
    reactors.sort_by_key(|r| r.parse::<u64>().unwrap_or(u64::MAX));
    let mut total_ops = 0.0;
    for r in &reactors {
        let w = [("reactor", r.as_str())];
        let polls = delta(prev, cur, "nfsgw_reactor_polls_total", &w);
        let busy = delta(prev, cur, "nfsgw_reactor_busy_polls_total", &w);
        let ops = delta(prev, cur, "nfsgw_ops_total", &w) / secs;
        total_ops += ops;
        let bin = delta(prev, cur, "nfsgw_bytes_in_total", &w) / secs / mib;
        let bout = delta(prev, cur, "nfsgw_bytes_out_total", &w) / secs / mib;
        let mut pools = String::new();
        for s in cur.matching("nfsgw_pool_buffers", &w) {
            let size = s.labels.get("size").cloned().unwrap_or_default();
            let used = cur.sum(
                "nfsgw_pool_buffers_in_use",
                &[("reactor", r.as_str()), ("size", size.as_str())],
            );
            let _ = write!(pools, " {}:{}/{}", size_name(&size), used, s.value);
        }
        let _ = writeln!(
            out,
            "{:<8} {:>6.1} {:>10.0} {:>9.1} {:>9.1} {:>8} {:>6} {:>5} {:>5} {:>11} {}",
            r,
            if polls > 0.0 {
                busy * 100.0 / polls
            } else {
                0.0
            },
            ops,
            bin,
            bout,
            fmt_us(p99_us(prev, cur, &w)),
            cur.sum("nfsgw_parked_requests", &w),
            cur.sum("nfsgw_tcp_connections", &w),
            cur.sum("nfsgw_rdma_connections", &w),
            format!(
                "{}/{}",
                cur.sum("nfsgw_rdma_credits_in_use", &w),
                cur.sum("nfsgw_rdma_credits_granted", &w)
            ),
            pools.trim_start()
        );
    }
    let _ = writeln!(
        out,
        "{:<8} {:>6} {:>10.0} {:>9} {:>9} {:>8}",
        "all",
        "",
        total_ops,
        "",
        "",
        fmt_us(p99_us(prev, cur, &[]))
    );
    // Procedures with calls in this interval, busiest first.
    let mut procs: Vec<(f64, String, String, String)> = Vec::new();
    for s in cur.matching("nfsgw_ops_total", &[]) {
        let get = |k: &str| s.labels.get(k).cloned().unwrap_or_default();
        let (prog, proc_, tr) = (get("prog"), get("proc"), get("transport"));
        if procs
            .iter()
            .any(|p| p.1 == prog && p.2 == proc_ && p.3 == tr)
        {
            continue;
        }
        let w = [
            ("prog", prog.as_str()),
            ("proc", proc_.as_str()),
            ("transport", tr.as_str()),
        ];
        let rate = delta(prev, cur, "nfsgw_ops_total", &w) / secs;
        if rate > 0.0 {
            procs.push((rate, prog, proc_, tr));
        }
    }
    procs.sort_by(|a, b| b.0.total_cmp(&a.0));
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<8} {:<12} {:<9} {:>10} {:>8}",
        "prog", "proc", "transport", "ops/s", "p99"
    );
    if procs.is_empty() {
        let _ = writeln!(out, "(no calls in this interval)");
    }
    for (rate, prog, proc_, tr) in procs {
        let w = [
            ("prog", prog.as_str()),
            ("proc", proc_.as_str()),
            ("transport", tr.as_str()),
        ];
        let _ = writeln!(
            out,
            "{:<8} {:<12} {:<9} {:>10.0} {:>8}",
            prog,
            proc_,
            tr,
            rate,
            fmt_us(p99_us(prev, cur, &w))
        );
    }
    out
}

/// The heaviest clients (`what` = "client") or exports in the interval: ops/s,
/// MiB/s in and out and p99, at most `rows` of them, busiest first. The gateway
/// exposes its top N and "other" (docs/stats.md); a label absent from the previous
/// scrape (it just joined the top N) counts from zero, so its first interval
/// overstates it, and a rate never goes below zero ("other" shrinks when one joins).
pub fn tenants(out: &mut String, prev: &Scrape, cur: &Scrape, secs: f64, what: &str, rows: usize) {
    let secs = secs.max(1e-6);
    let mib = (1u64 << 20) as f64;
    let ops_name = format!("nfsgw_{what}_ops_total");
    let bytes_name = format!("nfsgw_{what}_bytes_total");
    let hist = format!("nfsgw_{what}_request_duration_seconds_bucket");
    let mut seen: Vec<(f64, String)> = cur
        .label_values(&ops_name, what)
        .into_iter()
        .map(|v| (delta(prev, cur, &ops_name, &[(what, v.as_str())]) / secs, v))
        .filter(|(rate, _)| *rate > 0.0)
        .collect();
    seen.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<24} {:>10} {:>7} {:>7} {:>7} {:>9} {:>9} {:>8}",
        what, "ops/s", "read", "write", "meta", "MiB/s in", "MiB/s out", "p99"
    );
    if seen.is_empty() {
        let _ = writeln!(out, "(no calls in this interval)");
    }
    for (rate, v) in seen.into_iter().take(rows) {
        let w =
            |extra: (&'static str, &'static str)| [(what, v.clone()), (extra.0, extra.1.into())];
        let r = |name: &str, extra| {
            let l = w(extra);
            let l: Vec<(&str, &str)> = l.iter().map(|(k, v)| (*k, v.as_str())).collect();
            delta(prev, cur, name, &l) / secs
        };
        let _ = writeln!(
            out,
            "{:<24} {:>10.0} {:>7.0} {:>7.0} {:>7.0} {:>9.1} {:>9.1} {:>8}",
            v,
            rate,
            r(&ops_name, ("class", "read")),
            r(&ops_name, ("class", "write")),
            r(&ops_name, ("class", "metadata")),
            r(&bytes_name, ("direction", "in")) / mib,
            r(&bytes_name, ("direction", "out")) / mib,
            fmt_us(p99_of(&hist, prev, cur, &[(what, v.as_str())]))
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(ops: u64, fast: u64, slow: u64, polls: u64, busy: u64) -> Scrape {
        let l = "reactor=\"0\",transport=\"tcp\",prog=\"nfs3\",proc=\"GETATTR\"";
        Scrape::parse(&format!(
            "nfsgw_reactor_polls_total{{reactor=\"0\"}} {polls}\n\
             nfsgw_reactor_busy_polls_total{{reactor=\"0\"}} {busy}\n\
             nfsgw_ops_total{{{l}}} {ops}\n\
             nfsgw_bytes_out_total{{reactor=\"0\",transport=\"tcp\"}} {}\n\
             nfsgw_request_duration_seconds_bucket{{{l},le=\"0.000008\"}} {fast}\n\
             nfsgw_request_duration_seconds_bucket{{{l},le=\"0.001024\"}} {}\n\
             nfsgw_request_duration_seconds_bucket{{{l},le=\"+Inf\"}} {}\n\
             nfsgw_pool_buffers{{reactor=\"0\",size=\"8192\"}} 1024\n\
             nfsgw_pool_buffers_in_use{{reactor=\"0\",size=\"8192\"}} 3\n",
            ops * 1024,
            fast + slow,
            fast + slow
        ))
    }

    #[test]
    fn p99_from_bucket_deltas() {
        let a = scrape(0, 0, 0, 0, 0);
        // 1000 calls: 995 fast, 5 slow → p99 in the fast bucket.
        let b = scrape(1000, 995, 5, 100, 25);
        assert_eq!(p99_us(&a, &b, &[]), Some(8.0));
        // Next interval: only slow calls.
        let c = scrape(1100, 995, 105, 200, 50);
        assert_eq!(p99_us(&b, &c, &[]), Some(1024.0));
        assert_eq!(p99_us(&c, &c, &[]), None);
    }

    #[test]
    fn frame_has_reactor_rows_and_procedures() {
        let a = scrape(0, 0, 0, 0, 0);
        let b = scrape(1000, 995, 5, 100, 25);
        let f = render("http://x/metrics", &a, &b, 1.0);
        assert!(!f.contains('\x1b'));
        let row = f.lines().find(|l| l.starts_with("0 ")).expect(&f);
        assert!(
            row.contains("25.0") && row.contains("1000") && row.contains("8µs"),
            "{row}"
        );
        assert!(row.contains("8K:3/1024"), "{row}");
        assert!(f.contains("GETATTR"), "{f}");
    }

    fn tenant_scrape(a: u64, b: u64) -> Scrape {
        let mut t = String::new();
        for (client, n) in [("127.0.0.2", a), ("other", b)] {
            let _ = write!(
                t,
                "nfsgw_client_ops_total{{client=\"{client}\",class=\"read\"}} {n}\n\
                 nfsgw_client_ops_total{{client=\"{client}\",class=\"metadata\"}} {n}\n\
                 nfsgw_client_bytes_total{{client=\"{client}\",direction=\"out\"}} {}\n\
                 nfsgw_client_request_duration_seconds_bucket{{client=\"{client}\",le=\"0.000016\"}} {}\n\
                 nfsgw_client_request_duration_seconds_bucket{{client=\"{client}\",le=\"+Inf\"}} {}\n",
                n << 20,
                2 * n,
                2 * n
            );
        }
        Scrape::parse(&t)
    }

    #[test]
    fn heaviest_clients_first_with_rates_and_p99() {
        let (a, b) = (tenant_scrape(0, 0), tenant_scrape(100, 300));
        let mut f = String::new();
        tenants(&mut f, &a, &b, 2.0, "client", 10);
        let lines: Vec<&str> = f
            .lines()
            .filter(|l| l.contains("127.") || l.starts_with("other"))
            .collect();
        assert_eq!(lines.len(), 2, "{f}");
        assert!(
            lines[0].starts_with("other") && lines[0].contains(" 300 "),
            "{f}"
        );
        assert!(
            lines[1].starts_with("127.0.0.2") && lines[1].contains(" 100 "),
            "{f}"
        );
        assert!(
            lines[1].contains("50.0") && lines[1].contains("16µs"),
            "{f}"
        );
        let mut one = String::new();
        tenants(&mut one, &a, &b, 2.0, "client", 1);
        assert!(!one.contains("127.0.0.2"), "{one}");
        let mut idle = String::new();
        tenants(&mut idle, &b, &b, 1.0, "export", 5);
        assert!(idle.contains("(no calls in this interval)"), "{idle}");
    }
}
