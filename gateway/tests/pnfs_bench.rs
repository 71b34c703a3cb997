//! `bench --nfs 4.1 --pnfs` (issue 27, docs/bench.md "pNFS") against a metadata server
//! and two data servers, three gateways on one shared `fs` directory
//! (`backend.shared = true`): a verified write workload, then a verified read
//! workload, whose data the data servers carry (bench's per-server counters and the
//! gateways' own byte counters) and the metadata server does not. With its only data
//! server down, bench falls back to I/O through the metadata server, says so, and the
//! data is still verified. Needs the release `bench` binary beside the test's
//! (`cargo build --release -p bench`; tests/run-all.sh builds the workspace first).

mod common;

use common::*;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::Command;

/// A gateway on the shared `fs` directory `root` with the `[pnfs]` lines given.
fn shared_fs(root: &std::path::Path, pnfs: &str) -> Gw {
    Gw::start_text(|dir| {
        format!(
            "[engine]\ncores = [0]\nidle = \"adaptive\"\nhugepages = \"off\"\n\
             [pools]\nsmall = 256\nmedium = 32\nlarge = 16\n\
             [tcp]\nlisten = \"127.0.0.1:0\"\n\
             [backend]\nkind = \"fs\"\nroot = \"{}\"\nshared = true\n\
             [state]\ndir = \"{}\"\n[nfs4]\nlease_time_s = 10\n\
             [[exports]]\npath = \"/\"\nclients = [\"0.0.0.0/0\"]\nsquash = \"none\"\n{pnfs}",
            root.display(),
            dir.display()
        )
    })
}

fn pnfs_section(ds: &[SocketAddr]) -> String {
    pnfs_with(ds, "")
}

/// `[pnfs]` naming `ds`, with more `[pnfs]` keys (`extra`, newline-terminated).
fn pnfs_with(ds: &[SocketAddr], extra: &str) -> String {
    let mut s = format!("[pnfs]\nenabled = true\nrsize = 65536\nwsize = 65536\n{extra}");
    for a in ds {
        s += &format!("[[pnfs.data_servers]]\naddress = \"{a}\"\n");
    }
    s
}

/// The release `bench` next to this test binary (target/release/deps/..).
fn bench_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().unwrap().parent().unwrap().join("bench");
    assert!(
        bin.exists(),
        "{} is missing: cargo build --release -p bench",
        bin.display()
    );
    bin
}

/// Runs bench with `args` against the metadata server; its JSON and stderr.
fn bench(mds: &Gw, args: &[&str]) -> (serde_json::Value, String) {
    let out = Command::new(bench_bin())
        .arg("--target")
        .arg(format!("tcp://{}", mds.tcp_addr()))
        .args(["--nfs", "4.1", "--pnfs", "--json"])
        .args(args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "bench failed: {err}");
    let j = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {err}"));
    (j, err)
}

/// The sum of a gateway's `series` over its reactors.
fn total(gw: &Gw, series: &str) -> u64 {
    let src = gw.server.as_ref().unwrap().stats_source();
    let mut out = String::new();
    gateway::stats::exposition::render(&src, &mut out);
    out.lines()
        .filter(|l| l.starts_with(series) && l[series.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Bytes in and out of each gateway.
fn bytes(gws: &[&Gw]) -> Vec<(u64, u64)> {
    gws.iter()
        .map(|g| {
            (
                total(g, "nfsgw_bytes_in_total"),
                total(g, "nfsgw_bytes_out_total"),
            )
        })
        .collect()
}

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn bench_pnfs_drives_the_data_servers_and_not_the_metadata_server() {
    let root = tempfile::tempdir().unwrap();
    let ds = [shared_fs(root.path(), ""), shared_fs(root.path(), "")];
    let addrs: Vec<SocketAddr> = ds.iter().map(Gw::tcp_addr).collect();
    let mds = shared_fs(root.path(), &pnfs_section(&addrs));
    let all = [&mds, &ds[0], &ds[1]];
    const MIB: u64 = 1 << 20;

    for (workload, file_size) in [("seqwrite", "1m"), ("randread", "1m")] {
        let before = bytes(&all);
        let (j, err) = bench(
            &mds,
            &[
                "--workload",
                workload,
                "--bs",
                "64k",
                "--files",
                "16",
                "--file",
                "pn.dat",
                "--file-size",
                file_size,
                "--conns",
                "2",
                "--qd",
                "4",
                "--ops",
                "96",
                "--verify",
            ],
        );
        let after = bytes(&all);
        let t = &j["total"];
        assert_eq!(
            (u(&t["ops"]), u(&t["errors"]), u(&t["verify_failures"])),
            (96, 0, 0),
            "{workload}: {t} {err}"
        );
        assert_eq!(u(&t["bytes"]), 96 * 65536, "{workload}");
        assert!(u(&t["verified_bytes"]) >= 96 * 65536, "{workload}: {t}");
        // Every byte went to a data server, and both took some (placement hashes the
        // file id: sixteen files all on one of two would be a 1 in 32,768 chance).
        let p = &j["pnfs"];
        assert_eq!(p["fallbacks"].as_array().unwrap().len(), 0, "{p}");
        let servers = p["servers"].as_array().unwrap();
        assert_eq!(servers.len(), 2, "{p}");
        let mut carried = 0;
        for s in servers {
            assert_eq!(s["role"], "ds", "{s}");
            let at: SocketAddr = s["server"].as_str().unwrap().parse().unwrap();
            assert!(addrs.contains(&at), "{at}");
            assert!(u(&s["bytes"]) > 0 && u(&s["errors"]) == 0, "{s}");
            carried += u(&s["bytes"]);
        }
        assert_eq!(carried, 96 * 65536, "{p}");
        // The gateways' own counters: the data servers moved the data (plus the
        // fill, COMMIT and read-back), the metadata server only metadata.
        let delta: Vec<(u64, u64)> = before
            .iter()
            .zip(&after)
            .map(|(b, a)| (a.0 - b.0, a.1 - b.1))
            .collect();
        let (ds_in, ds_out) = (delta[1].0 + delta[2].0, delta[1].1 + delta[2].1);
        let moved = if workload == "seqwrite" {
            ds_in
        } else {
            ds_out
        };
        assert!(moved >= 6 * MIB, "{workload}: data servers {delta:?}");
        assert!(
            delta[0].0 < MIB / 4 && delta[0].1 < MIB / 4,
            "{workload}: the metadata server carried data: {delta:?}"
        );
    }
}

/// With its only data server down, every file's I/O goes through the metadata server:
/// refused at LAYOUTGET once its probes found the server down, or (probes off,
/// `probe_ms = 0`: the layout still names it) when bench's connection is refused, the
/// layout then returned. Either way the data is verified and the report says why.
#[test]
fn bench_pnfs_falls_back_to_the_metadata_server_when_the_data_server_is_down() {
    // A data server that refuses connections: a port bound, then closed.
    let dead = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    for probes_off in [true, false] {
        let root = tempfile::tempdir().unwrap();
        let extra = if probes_off { "probe_ms = 0\n" } else { "" };
        let mds = shared_fs(root.path(), &pnfs_with(&[dead], extra));
        let (j, err) = bench(
            &mds,
            &[
                "--workload",
                "randwrite",
                "--bs",
                "16k",
                "--files",
                "2",
                "--file-size",
                "256k",
                "--ops",
                "40",
                "--verify",
            ],
        );
        let t = &j["total"];
        assert_eq!(
            (u(&t["ops"]), u(&t["errors"]), u(&t["verify_failures"])),
            (40, 0, 0),
            "{t} {err}"
        );
        assert!(u(&t["verified_bytes"]) > 0, "{t}");
        let p = &j["pnfs"];
        let servers = p["servers"].as_array().unwrap();
        assert_eq!(servers.len(), 1, "{p}");
        assert_eq!(servers[0]["role"], "mds", "{p}");
        assert_eq!(u(&servers[0]["bytes"]), 40 * 16384, "{p}");
        let why: Vec<&str> = p["fallbacks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        assert_eq!(why.len(), 2, "{p}");
        if probes_off {
            let named = format!("data server {dead}");
            assert!(why.iter().all(|w| w.contains(&named)), "{why:?}");
        }
        assert!(err.contains("through the metadata server"), "{err}");
    }
}

/// Striped layouts (RFC 8435 §6; README "Scaling out with pNFS", "Striping"): three
/// data servers on one shared `fs` directory, `stripe_width = 3` and 64 KiB units, so
/// bench (whose EXCHANGE_ID names it, the default `stripe_clients`) gets layouts
/// whose mirror lists all three and sends each request to the data server of its
/// unit. Files of eight units, two of them: a verified seqread (64 KiB blocks, one
/// unit each; the files filled through the striped RW layout first), a verified
/// randread of 48 KiB blocks (a block that crosses a unit boundary is split between
/// two data servers), and a verified seqwrite (RW layouts are striped on a store that
/// writes in place). Each time every data server carries file bytes — bench's
/// per-server report and the gateways' own counters — the metadata server none, and
/// every byte read is the pattern's.
#[test]
fn bench_pnfs_stripes_each_file_over_the_data_servers() {
    let root = tempfile::tempdir().unwrap();
    let ds = [
        shared_fs(root.path(), ""),
        shared_fs(root.path(), ""),
        shared_fs(root.path(), ""),
    ];
    let addrs: Vec<SocketAddr> = ds.iter().map(Gw::tcp_addr).collect();
    let mds = shared_fs(
        root.path(),
        &pnfs_with(&addrs, "stripe_width = 3\nstripe_unit = 65536\n"),
    );
    let all = [&mds, &ds[0], &ds[1], &ds[2]];
    const KIB: u64 = 1024;

    for (workload, bs, ops) in [
        ("seqread", "64k", 48u64),
        ("randread", "48k", 60),
        ("seqwrite", "64k", 48),
    ] {
        let before = bytes(&all);
        let ops_s = ops.to_string();
        let (j, err) = bench(
            &mds,
            &[
                "--workload",
                workload,
                "--bs",
                bs,
                "--files",
                "2",
                "--file",
                "stripe.dat",
                "--file-size",
                "512k",
                "--conns",
                "3",
                "--qd",
                "4",
                "--ops",
                &ops_s,
                "--verify",
            ],
        );
        let after = bytes(&all);
        let t = &j["total"];
        assert_eq!(
            (u(&t["ops"]), u(&t["errors"]), u(&t["verify_failures"])),
            (ops, 0, 0),
            "{workload}: {t} {err}"
        );
        assert!(u(&t["verified_bytes"]) > 0, "{workload}: {t}");
        if bs == "64k" {
            // Blocks of one unit: one op each, whole.
            assert_eq!(u(&t["bytes"]), ops * 64 * KIB, "{workload}: {t}");
        }
        let p = &j["pnfs"];
        assert_eq!(p["fallbacks"].as_array().unwrap().len(), 0, "{p}");
        let servers = p["servers"].as_array().unwrap();
        assert_eq!(
            servers.len(),
            3,
            "{workload}: every data server drives: {p}"
        );
        let mut carried = 0;
        for s in servers {
            assert_eq!(s["role"], "ds", "{s}");
            let at: SocketAddr = s["server"].as_str().unwrap().parse().unwrap();
            assert!(addrs.contains(&at), "{at}");
            // Both files are in every server's group: each has eight units.
            assert_eq!(u(&s["files"]), 2, "{s}");
            assert!(
                u(&s["bytes"]) > 0 && u(&s["errors"]) == 0,
                "{workload}: {s}"
            );
            carried += u(&s["bytes"]);
        }
        assert_eq!(carried, u(&t["bytes"]), "{p}");
        // The gateways' own counters: every data server moved file data, the
        // metadata server only metadata.
        let delta: Vec<(u64, u64)> = before
            .iter()
            .zip(&after)
            .map(|(b, a)| (a.0 - b.0, a.1 - b.1))
            .collect();
        for (k, d) in delta.iter().enumerate().skip(1) {
            let moved = if workload == "seqwrite" { d.0 } else { d.1 };
            assert!(moved >= 64 * KIB, "{workload}: data server {k} moved {d:?}");
        }
        assert!(
            delta[0].0 < 256 * KIB && delta[0].1 < 256 * KIB,
            "{workload}: the metadata server carried data: {delta:?}"
        );
    }
}
