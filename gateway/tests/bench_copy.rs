//! `bench --nfs 4.2 --workload copy` (issue 31; docs/bench.md "Copy") against the
//! gateway: a server-side COPY (RFC 7862 §15.2) and the same copy through the client
//! (READ + WRITE), both byte-checked with `--verify`. The gateway's own counters of
//! RPC bytes show the difference: the COPY moves no file byte over the connection,
//! the copy through the client moves every byte twice. Needs the release `bench`
//! binary beside the test's (`cargo build --release -p bench`; tests/run-all.sh builds
//! the workspace first).

mod common;

use common::*;
use std::path::PathBuf;
use std::process::Command;

const MIB: u64 = 1 << 20;

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

/// Runs bench against `gw` with `args`: its exit status, stdout and stderr.
fn bench(gw: &Gw, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(bench_bin())
        .arg("--target")
        .arg(format!("tcp://{}", gw.tcp_addr()))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A copy run's JSON (it must succeed).
fn copy_run(gw: &Gw, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "--nfs",
        "4.2",
        "--workload",
        "copy",
        "--files",
        "2",
        "--file",
        "cp.dat",
        "--file-size",
        "4m",
        "--ops",
        "3",
        "--json",
    ];
    args.extend_from_slice(extra);
    let (ok, out, err) = bench(gw, &args);
    assert!(ok, "bench {args:?} failed: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out} {err}"))
}

/// The sum of the gateway's `series` over its reactors.
fn total(gw: &Gw, series: &str) -> u64 {
    let src = gw.server.as_ref().unwrap().stats_source();
    let mut out = String::new();
    gateway::stats::exposition::render(&src, &mut out);
    out.lines()
        .filter(|l| l.starts_with(series) && l[series.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// RPC bytes in and out of the gateway so far.
fn rpc_bytes(gw: &Gw) -> u64 {
    total(gw, "nfsgw_bytes_in_total") + total(gw, "nfsgw_bytes_out_total")
}

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn bench_copy_server_side_and_through_the_client() {
    let gw = Gw::start(&GwOpts::default());

    // Verified: each of the 3 copies read back whole against its source's pattern.
    for extra in [&[][..], &["--copy-through-client"]] {
        let mut args = vec!["--verify"];
        args.extend_from_slice(extra);
        let j = copy_run(&gw, &args);
        let mode = if extra.is_empty() { "server" } else { "client" };
        assert_eq!(j["mode"], mode, "{j}");
        assert_eq!((u(&j["copies"]), u(&j["bytes"])), (3, 12 * MIB), "{j}");
        assert_eq!(
            (u(&j["verified_bytes"]), u(&j["verify_failures"])),
            (12 * MIB, 0),
            "{j}"
        );
        assert!(j["mib_per_s"].as_f64().unwrap() > 0.0, "{j}");
    }

    // Without --verify (the files exist: no fill), what crossed the connection: the
    // COPYs a few KiB of COMPOUNDs, the copies through the client every byte twice.
    let before = rpc_bytes(&gw);
    copy_run(&gw, &[]);
    let server_side = rpc_bytes(&gw) - before;
    let before = rpc_bytes(&gw);
    copy_run(&gw, &["--copy-through-client"]);
    let through = rpc_bytes(&gw) - before;
    assert!(server_side < 64 << 10, "COPY moved {server_side} RPC bytes");
    assert!(
        through >= 2 * 12 * MIB,
        "3 copies of 4 MiB through the client moved only {through} RPC bytes"
    );

    // The flags a copy run refuses, with the reason.
    for (args, says) in [
        (&["--nfs", "4.1", "--workload", "copy"][..], "--nfs 4.2"),
        (&["--workload", "copy"], "--nfs 4.2"),
        (&["--nfs", "4.2", "--mix", "copy:1"], "not part of a mix"),
        (
            &[
                "--nfs",
                "4.2",
                "--workload",
                "getattr",
                "--copy-through-client",
            ],
            "--workload copy",
        ),
    ] {
        let (ok, _, err) = bench(&gw, args);
        assert!(!ok && err.contains(says), "{args:?}: {err}");
    }
}
