//! `bench md`'s results: a table (one row per reported phase: ops, ops/s over the
//! phase's wall time, latency percentiles, wall time, errors, resends) or one JSON
//! object (`nfsgw-bench-md/1`, docs/bench.md), and the run's verdict.

use super::{MdArgs, PhaseResult, Plan};
use crate::report::{json_str, latency, stats_json};
use std::fmt::Write as _;

pub const SCHEMA: &str = "nfsgw-bench-md/1";

fn reported<'a>(a: &'a MdArgs, r: &'a [PhaseResult]) -> impl Iterator<Item = &'a PhaseResult> {
    r.iter().filter(|p| a.phases.reported(p.phase))
}

fn nfs_name(a: &MdArgs) -> &'static str {
    match a.nfs {
        crate::NfsVersion::V3 => "3",
        crate::NfsVersion::V41 => "4.1",
        crate::NfsVersion::V42 => "4.2",
    }
}

pub fn table(a: &MdArgs, results: &[PhaseResult]) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{} | md NFSv{} tree {:?} | {} conn(s) x qd {} | {} file(s) per conn of {} bytes{}",
        a.target,
        nfs_name(a),
        a.tree,
        a.conns,
        a.qd,
        a.files_per_conn,
        a.write_size,
        if a.verify { " | verify" } else { "" }
    );
    let _ = writeln!(
        o,
        "{:<8} {:>9} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>7} {:>7}",
        "phase",
        "ops",
        "ops/s",
        "p50 µs",
        "p90 µs",
        "p99 µs",
        "p99.9 µs",
        "max µs",
        "wall s",
        "errors",
        "jukebox"
    );
    for r in reported(a, results) {
        let (s, secs) = (&r.out.stats, r.wall.as_secs_f64().max(1e-9));
        let l = latency(s);
        let _ = writeln!(
            o,
            "{:<8} {:>9} {:>10.0} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>8.3} {:>7} {:>7}",
            r.phase.name(),
            s.ops,
            s.ops as f64 / secs,
            l.p50,
            l.p90,
            l.p99,
            l.p99_9,
            l.max,
            secs,
            s.errors,
            s.jukebox
        );
    }
    if a.stats_url.is_some() {
        store_table(&mut o, a, results);
    }
    if a.verify {
        let bad: u64 = results.iter().map(|r| r.out.stats.verify_failures).sum();
        let _ = writeln!(o, "verify: {bad} failure(s)");
    }
    o
}

/// Store requests per NFS op of each phase, by kind (`--stats-url`).
fn store_table(o: &mut String, a: &MdArgs, results: &[PhaseResult]) {
    let kinds: Vec<&String> = results
        .iter()
        .filter_map(|r| r.store.as_ref())
        .flat_map(|c| c.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let _ = write!(o, "store requests per op\n{:<8}", "phase");
    for k in &kinds {
        let _ = write!(o, " {k:>9}");
    }
    let _ = writeln!(o);
    for r in reported(a, results) {
        let Some(c) = &r.store else { continue };
        let ops = r.out.stats.ops.max(1) as f64;
        let _ = write!(o, "{:<8}", r.phase.name());
        for k in &kinds {
            let n = c.get(*k).copied().unwrap_or(0);
            let _ = write!(o, " {:>9.2}", n as f64 / ops);
        }
        let _ = writeln!(o);
    }
}

/// A phase's wall time in seconds to the microsecond: a phase of a few ops (mkdir and
/// rmdir are one per connection) can take less than the millisecond that `json_num`'s
/// three decimals would show as 0.
fn json_secs(secs: f64) -> String {
    let s = format!("{secs:.6}");
    let t = s.trim_end_matches('0');
    if t.ends_with('.') {
        format!("{t}0")
    } else {
        t.to_string()
    }
}

fn store_json(c: Option<&super::scrape::Counts>) -> String {
    let Some(c) = c else {
        return "null".into();
    };
    let kv: Vec<String> = c
        .iter()
        .map(|(k, v)| format!("{}:{v}", json_str(k)))
        .collect();
    format!("{{{}}}", kv.join(","))
}

pub fn json(a: &MdArgs, plan: &Plan, results: &[PhaseResult]) -> String {
    let phases: Vec<String> = reported(a, results)
        .map(|r| {
            let secs = r.wall.as_secs_f64().max(1e-9);
            let s = stats_json(&r.out.stats, secs);
            // The phase's wall time and store requests join the usual per-op object.
            format!(
                "{}:{},\"wall_s\":{},\"store_requests\":{}}}",
                json_str(r.phase.name()),
                &s[..s.len() - 1],
                json_secs(secs),
                store_json(r.store.as_ref())
            )
        })
        .collect();
    format!(
        "{{\"schema\":{},\"target\":{},\"nfs\":{},\"tree\":{},\"conns\":{},\"qd\":{},\
         \"files_per_conn\":{},\"write_size\":{},\"verify\":{},\"phases\":{{{}}}}}",
        json_str(SCHEMA),
        json_str(&a.target),
        json_str(nfs_name(a)),
        json_str(match plan.tree {
            super::Tree::Easy => "easy",
            super::Tree::Hard => "hard",
        }),
        a.conns,
        a.qd,
        a.files_per_conn,
        a.write_size,
        a.verify,
        phases.join(",")
    )
}

/// The verdict: every failure and verify problem on stderr (the first few per phase
/// and connection), and an error when there was any.
pub fn outcome(results: &[PhaseResult], cleanup: Option<String>) -> anyhow::Result<()> {
    let (mut errors, mut wrong) = (0, 0);
    for r in results {
        for e in r.out.errors.iter().chain(&r.out.wrong) {
            eprintln!("bench: {}: {e}", r.phase);
        }
        errors += r.out.stats.errors;
        wrong += r.out.stats.verify_failures;
    }
    if let Some(c) = &cleanup {
        eprintln!("bench: {c}");
    }
    anyhow::ensure!(
        errors == 0 && wrong == 0 && cleanup.is_none(),
        "{errors} op(s) failed, {wrong} verify failure(s){}",
        if cleanup.is_some() {
            ", the tree was not removed"
        } else {
            ""
        }
    );
    Ok(())
}
