//! The results: the table people read and the JSON object scripts read
//! (`nfsgw-bench/1`, documented in docs/bench.md; add keys, never rename or retype
//! them without bumping the schema version).

use crate::stats::{OpStats, Stats};
use crate::workload::Mix;
use std::fmt::Write as _;

pub const SCHEMA: &str = "nfsgw-bench/1";

/// The run's settings, as reported.
pub struct Settings<'a> {
    pub target: &'a str,
    /// RDMA provider name for rdma:// targets.
    pub provider: Option<&'a str>,
    /// The `--workload` name, or "mix" for `--mix`.
    pub workload: &'a str,
    pub mix: &'a Mix,
    pub bs: u32,
    pub files: usize,
    pub file_size: u64,
    pub threads: usize,
    pub conns: usize,
    pub conns_per_thread: usize,
    pub qd: usize,
    pub rate: Option<f64>,
    pub warmup_s: f64,
    /// Measured seconds (from the end of the warm-up to the last completion).
    pub duration_s: f64,
    /// rdma:// targets: what the RPC-over-RDMA connections did.
    pub rdma: Option<crate::rdma::RdmaTotals>,
}

fn rdma_json(t: &crate::rdma::RdmaTotals) -> String {
    format!(
        "{{\"connections\":{},\"short_calls\":{},\"chunked_calls\":{},\"long_calls\":{},\
         \"write_chunks\":{},\"reply_chunks\":{},\"rdma_errors\":{},\"callbacks\":{},\
         \"callback_replies\":{},\"callbacks_dropped\":{}}}",
        t.connections,
        t.short_calls,
        t.chunked_calls,
        t.long_calls,
        t.write_chunks,
        t.reply_chunks,
        t.rdma_errors,
        t.callbacks,
        t.callback_replies,
        t.callbacks_dropped
    )
}

/// Latency percentiles in microseconds.
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p99_9: f64,
    pub max: f64,
    pub mean: f64,
}

pub fn latency(s: &OpStats) -> Latency {
    let h = &s.hist;
    let us = |ns: u64| ns as f64 / 1000.0;
    if h.is_empty() {
        return Latency {
            p50: 0.0,
            p90: 0.0,
            p99: 0.0,
            p99_9: 0.0,
            max: 0.0,
            mean: 0.0,
        };
    }
    Latency {
        p50: us(h.value_at_quantile(0.5)),
        p90: us(h.value_at_quantile(0.9)),
        p99: us(h.value_at_quantile(0.99)),
        p99_9: us(h.value_at_quantile(0.999)),
        max: us(h.max()),
        mean: h.mean() / 1000.0,
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

/// A JSON string literal.
pub fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// A JSON number (JSON has no NaN or infinity: those become 0).
pub fn json_num(x: f64) -> String {
    if x.is_finite() {
        let s = format!("{x:.3}");
        // Trim "12.500" to "12.5" and "3.000" to "3.0" (keep it a float).
        let t = s.trim_end_matches('0');
        if t.ends_with('.') {
            format!("{t}0")
        } else {
            t.to_string()
        }
    } else {
        "0.0".into()
    }
}

pub fn stats_json(s: &OpStats, secs: f64) -> String {
    let l = latency(s);
    format!(
        "{{\"ops\":{},\"errors\":{},\"bytes\":{},\"ops_per_s\":{},\"mib_per_s\":{},\
         \"verified_bytes\":{},\"verify_failures\":{},\"jukebox\":{},\"latency_us\":{{\"p50\":{},\"p90\":{},\
         \"p99\":{},\"p99_9\":{},\"max\":{},\"mean\":{}}}}}",
        s.ops,
        s.errors,
        s.bytes,
        json_num(s.ops as f64 / secs),
        json_num(mib(s.bytes) / secs),
        s.verified_bytes,
        s.verify_failures,
        s.jukebox,
        json_num(l.p50),
        json_num(l.p90),
        json_num(l.p99),
        json_num(l.p99_9),
        json_num(l.max),
        json_num(l.mean),
    )
}

/// The one-line JSON object.
pub fn json(set: &Settings, stats: &Stats) -> String {
    let secs = set.duration_s.max(1e-9);
    let mix: Vec<String> = set
        .mix
        .entries()
        .iter()
        .map(|(op, w)| format!("{{\"op\":{},\"weight\":{w}}}", json_str(op.name())))
        .collect();
    let per_op: Vec<String> = stats
        .iter()
        .map(|(k, s)| format!("{}:{}", json_str(k.name()), stats_json(s, secs)))
        .collect();
    format!(
        "{{\"schema\":{},\"target\":{},\"provider\":{},\"workload\":{},\"mix\":[{}],\"bs\":{},\
         \"files\":{},\"file_size\":{},\"threads\":{},\"conns\":{},\"conns_per_thread\":{},\"qd\":{},\
         \"rate\":{},\"warmup_s\":{},\"duration_s\":{},\"total\":{},\"per_op\":{{{}}},\"rdma\":{}}}",
        json_str(SCHEMA),
        json_str(set.target),
        set.provider.map_or("null".into(), json_str),
        json_str(set.workload),
        mix.join(","),
        set.bs,
        set.files,
        set.file_size,
        set.threads,
        set.conns,
        set.conns_per_thread,
        set.qd,
        set.rate.map_or("null".into(), json_num),
        json_num(set.warmup_s),
        json_num(set.duration_s),
        stats_json(&stats.total(), secs),
        per_op.join(","),
        set.rdma.as_ref().map_or("null".into(), rdma_json),
    )
}

/// One line saying what ran: the table's first line and the plot's title.
pub fn headline(set: &Settings) -> String {
    let what = if set.workload == "mix" {
        let mix: Vec<String> = set
            .mix
            .entries()
            .iter()
            .map(|(op, w)| format!("{op}:{w}"))
            .collect();
        format!("mix {}", mix.join(","))
    } else {
        set.workload.to_string()
    };
    format!(
        "{}{} | {}{} | {} thread(s) x {} conn(s) x qd {}{} | {:.2} s measured",
        set.target,
        set.provider.map(|p| format!(" ({p})")).unwrap_or_default(),
        what,
        if set.files > 0 {
            format!(
                " | bs {} | {} file(s) of {}",
                crate::units::format_size(set.bs as u64),
                set.files,
                crate::units::format_size(set.file_size)
            )
        } else {
            String::new()
        },
        set.threads,
        set.conns_per_thread,
        set.qd,
        set.rate
            .map(|r| format!(" | open loop {r} ops/s"))
            .unwrap_or_default(),
        set.duration_s,
    )
}

/// The table: one row per op type, then the total.
pub fn table(set: &Settings, stats: &Stats) -> String {
    let secs = set.duration_s.max(1e-9);
    let mut o = String::new();
    let _ = writeln!(o, "{}", headline(set));
    let _ = writeln!(
        o,
        "{:<12} {:>10} {:>11} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7} {:>7}",
        "op",
        "ops",
        "ops/s",
        "MiB/s",
        "p50 µs",
        "p90 µs",
        "p99 µs",
        "p99.9 µs",
        "max µs",
        "errors",
        "jukebox"
    );
    let total = stats.total();
    let rows = stats
        .iter()
        .map(|(k, s)| (k.name(), s))
        .chain(std::iter::once(("total", &total)));
    for (name, s) in rows {
        let l = latency(s);
        let _ = writeln!(
            o,
            "{:<12} {:>10} {:>11.0} {:>9.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>7} {:>7}",
            name,
            s.ops,
            s.ops as f64 / secs,
            mib(s.bytes) / secs,
            l.p50,
            l.p90,
            l.p99,
            l.p99_9,
            l.max,
            s.errors,
            s.jukebox
        );
    }
    if total.verified_bytes > 0 || total.verify_failures > 0 {
        let _ = writeln!(
            o,
            "verify: {} bytes checked, {} failure(s)",
            total.verified_bytes, total.verify_failures
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{Kind, Op};

    #[test]
    fn json_literals() {
        assert_eq!(json_str("a\"b\\c\n\u{1}"), "\"a\\\"b\\\\c\\n\\u0001\"");
        assert_eq!(json_num(12.5), "12.5");
        assert_eq!(json_num(3.0), "3.0");
        assert_eq!(json_num(0.0004), "0.0");
        assert_eq!(json_num(f64::NAN), "0.0");
        assert_eq!(json_num(1234.5678), "1234.568");
    }

    #[test]
    fn json_has_the_documented_shape() {
        let mix = Mix::parse("randread:70,getattr:30").unwrap();
        let mut st = Stats::default();
        st.kind(Kind::Read).record(10_000);
        st.kind(Kind::Read).bytes = 4 << 20;
        st.kind(Kind::Getattr).record(2_000);
        let set = Settings {
            target: "tcp://127.0.0.1:2049",
            provider: None,
            rdma: None,
            workload: "mix",
            mix: &mix,
            bs: 4096,
            files: 2,
            file_size: 1 << 20,
            threads: 1,
            conns: 2,
            conns_per_thread: 2,
            qd: 4,
            rate: None,
            warmup_s: 0.0,
            duration_s: 2.0,
        };
        let j = json(&set, &st);
        assert!(j.starts_with("{\"schema\":\"nfsgw-bench/1\",\"target\":\"tcp://127.0.0.1:2049\",\"provider\":null,\"workload\":\"mix\",\"mix\":[{\"op\":\"randread\",\"weight\":70},{\"op\":\"getattr\",\"weight\":30}],"), "{j}");
        assert!(j.contains("\"total\":{\"ops\":2,\"errors\":0,\"bytes\":4194304,\"ops_per_s\":1.0,\"mib_per_s\":2.0,"), "{j}");
        assert!(j.contains("\"per_op\":{\"read\":{\"ops\":1,"), "{j}");
        assert!(j.ends_with(",\"rdma\":null}"), "{j}");
        assert!(j.contains(",\"getattr\":{\"ops\":1,"), "{j}");
        assert!(j.contains("\"rate\":null,"), "{j}");
        assert!(!j.contains("\"write\""));
        assert_eq!(j.matches('{').count(), j.matches('}').count());
        assert!(table(&set, &st).contains("getattr"));
        let _ = Op::Null;
    }
}
