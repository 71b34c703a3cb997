//! `--pnfs`'s report: ops, bytes and errors per server (each data server, and the
//! metadata server when files fell back to it), and why files fell back.

use super::{name, Group};
use crate::load::Load;
use crate::report::{self, json_str};
use crate::workload::Kind;

/// One group's ops, bytes and errors (reads and writes), and its throughput.
fn counts(l: &Option<Load>) -> (u64, u64, u64, u64, u64) {
    let Some(l) = l else {
        return (0, 0, 0, 0, 0);
    };
    let of = |k| {
        l.stats
            .get(k)
            .map_or((0, 0, 0), |s| (s.ops, s.bytes, s.errors))
    };
    let (r, w) = (of(Kind::Read), of(Kind::Write));
    (r.0 + w.0, r.1 + w.1, r.2 + w.2, r.1, w.1)
}

pub fn pnfs_table(
    groups: &[Group],
    loads: &[Option<Load>],
    fallbacks: &[String],
    secs: f64,
) -> String {
    let mut s = String::from("pnfs: per server (data I/O of the load)\n");
    for (g, l) in groups.iter().zip(loads) {
        let (ops, bytes, errors, read, written) = counts(l);
        s += &format!(
            "  {:<32} files {:>4}  conns {:>3}  ops {ops:>9}  bytes {bytes:>13} (read {read}, written {written})  {:>9.1} MiB/s  errors {errors}\n",
            name(g.via),
            g.files.len(),
            g.conns,
            bytes as f64 / (1 << 20) as f64 / secs.max(1e-9),
        );
    }
    for f in fallbacks {
        s += &format!("  through the metadata server: {f}\n");
    }
    s
}

pub fn pnfs_json(
    groups: &[Group],
    loads: &[Option<Load>],
    fallbacks: &[String],
    secs: f64,
) -> String {
    let per: Vec<String> = groups
        .iter()
        .zip(loads)
        .map(|(g, l)| {
            let (ops, bytes, errors, read, written) = counts(l);
            format!(
                "{{\"server\":{},\"role\":{},\"files\":{},\"conns\":{},\"ops\":{ops},\"bytes\":{bytes},\
                 \"read_bytes\":{read},\"write_bytes\":{written},\"errors\":{errors},\"mib_per_s\":{}}}",
                json_str(&g.via.map_or_else(|| "mds".into(), |a| a.to_string())),
                json_str(if g.via.is_some() { "ds" } else { "mds" }),
                g.files.len(),
                g.conns,
                report::json_num(bytes as f64 / (1 << 20) as f64 / secs.max(1e-9)),
            )
        })
        .collect();
    let fb: Vec<String> = fallbacks.iter().map(|f| json_str(f)).collect();
    format!(
        "{{\"servers\":[{}],\"fallbacks\":[{}]}}",
        per.join(","),
        fb.join(",")
    )
}
