//! Exposition of the per-client and per-export series: every reactor's table summed
//! by address (or export), the top N by operations kept, everything else summed into
//! `client="other"` (`export="other"`). Runs on the endpoint thread (allocation is
//! fine here). Metric reference: docs/stats.md "Per client and per export".

use super::exposition::Source;
use super::histogram::upper_us;
use super::tenants::{Counts as Agg, CLASSES};
use crate::config::StatsConfig;
use std::collections::HashMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `stats.top_clients` and `stats.top_exports` in force (set at start and by a
/// reload, `set_top`; read per scrape).
static TOP: [AtomicUsize; 2] = [AtomicUsize::new(20), AtomicUsize::new(20)];

/// Applies `[stats] top_clients` and `top_exports` (at start and on SIGHUP reload).
pub fn set_top(cfg: &StatsConfig) {
    TOP[0].store(cfg.top_clients, Ordering::Relaxed);
    TOP[1].store(cfg.top_exports, Ordering::Relaxed);
}

/// The top `n` keys by operations (ties by key, so the choice is stable), then the
/// rest summed into `rest` (which already holds what was folded before).
fn top_n<K: Ord + Clone>(all: HashMap<K, Agg>, n: usize, rest: &mut Agg) -> Vec<(K, Agg)> {
    let mut v: Vec<(K, Agg)> = all.into_iter().collect();
    v.sort_by(|a, b| b.1.total().cmp(&a.1.total()).then(a.0.cmp(&b.0)));
    for (_, a) in v.iter().skip(n) {
        rest.add(a);
    }
    v.truncate(n);
    v
}

/// A label value escaped as the text format requires (backslash, quote, newline).
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The series of one family (`client` or `export`): ops by class, bytes by
/// direction, and the latency histogram of rows that have calls.
fn render_rows(out: &mut String, what: &str, rows: &[(String, Agg)]) {
    let name = format!("nfsgw_{what}_ops_total");
    header(
        out,
        &name,
        "counter",
        &format!("RPC calls by {what} (top N by calls over the process life, the rest under \"other\") and class: read, write, metadata."),
    );
    for (label, a) in rows {
        for (c, class) in CLASSES.iter().enumerate() {
            let _ = writeln!(
                out,
                "{name}{{{what}=\"{label}\",class=\"{class}\"}} {}",
                a.ops[c]
            );
        }
    }
    let name = format!("nfsgw_{what}_bytes_total");
    header(
        out,
        &name,
        "counter",
        &format!("Call bytes received (in) and reply bytes sent (out) by {what}."),
    );
    for (label, a) in rows {
        for (dir, v) in [("in", a.bytes.0), ("out", a.bytes.1)] {
            let _ = writeln!(out, "{name}{{{what}=\"{label}\",direction=\"{dir}\"}} {v}");
        }
    }
    let name = format!("nfsgw_{what}_request_duration_seconds");
    header(
        out,
        &name,
        "histogram",
        &format!("Time from a call's arrival on the reactor to its reply, by {what}."),
    );
    for (label, a) in rows {
        let count: u64 = a.buckets.iter().sum();
        if count == 0 {
            continue;
        }
        let mut cum = 0;
        for (b, c) in a.buckets.iter().enumerate() {
            cum += c;
            let le = upper_us(b).map_or("+Inf".to_string(), |us| format!("{}", us as f64 / 1e6));
            let _ = writeln!(out, "{name}_bucket{{{what}=\"{label}\",le=\"{le}\"}} {cum}");
        }
        let _ = writeln!(
            out,
            "{name}_sum{{{what}=\"{label}\"}} {}",
            a.sum_ns as f64 / 1e9
        );
        let _ = writeln!(out, "{name}_count{{{what}=\"{label}\"}} {count}");
    }
}

/// Renders the per-client and per-export families.
pub(super) fn render(src: &Source, out: &mut String) {
    let [top_clients, top_exports] = [0, 1].map(|i| TOP[i].load(Ordering::Relaxed));
    render_clients(src, top_clients, out);
    render_exports(src, top_exports, out);
}

fn render_clients(src: &Source, n: usize, out: &mut String) {
    let mut all: HashMap<std::net::IpAddr, Agg> = HashMap::new();
    let mut other = Agg::default();
    let (mut full, mut lookups, mut peeks) = (0, 0, 0);
    for r in &src.reactors {
        let t = &*r.tenants;
        full += t.full();
        lookups += t.lookups();
        peeks += t.peeks();
        for (k, s) in t.clients() {
            match k {
                Some(k) => all.entry(k).or_default().add(&s),
                None => other.add(&s),
            }
        }
    }
    let held = all.len();
    let mut rows: Vec<(String, Agg)> = top_n(all, n, &mut other)
        .into_iter()
        .map(|(ip, a)| (ip.to_string(), a))
        .collect();
    rows.push(("other".into(), other));
    render_rows(out, "client", &rows);
    header(
        out,
        "nfsgw_clients",
        "gauge",
        "Distinct client addresses the reactors' client tables hold (stats.client_slots each).",
    );
    let _ = writeln!(out, "nfsgw_clients {held}");
    header(
        out,
        "nfsgw_client_table_full_total",
        "counter",
        "Connections whose address found its reactor's client table full (stats.client_slots): their calls count under client=\"other\".",
    );
    let _ = writeln!(out, "nfsgw_client_table_full_total {full}");
    header(
        out,
        "nfsgw_client_lookups_total",
        "counter",
        "Client and pair lookups: a connection's first call, a change of export, an evicted line (never per call on a settled connection).",
    );
    let _ = writeln!(out, "nfsgw_client_lookups_total {lookups}");
    header(
        out,
        "nfsgw_client_record_peeks_total",
        "counter",
        "Calls whose record was read for their cost before classification: only calls on a reactor with a QoS rule (the rest are counted from what classification decoded).",
    );
    let _ = writeln!(out, "nfsgw_client_record_peeks_total {peeks}");
}

fn render_exports(src: &Source, n: usize, out: &mut String) {
    let mut all: HashMap<u16, Agg> = HashMap::new();
    let mut none = Agg::default();
    for r in &src.reactors {
        for (k, s) in r.tenants.exports() {
            match k {
                Some(k) => all.entry(k).or_default().add(&s),
                None => none.add(&s),
            }
        }
    }
    let table = src.exports.as_ref().map(|e| e.load());
    let path = |id: u16| match table.as_ref().and_then(|t| t.get(id)) {
        Some(e) => escape(&e.path),
        None => format!("id:{id}"),
    };
    let mut other = Agg::default();
    let mut rows: Vec<(String, Agg)> = top_n(all, n, &mut other)
        .into_iter()
        .map(|(id, a)| (path(id), a))
        .collect();
    rows.push(("other".into(), other));
    rows.push(("none".into(), none));
    render_rows(out, "export", &rows);
}
