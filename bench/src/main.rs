//! `bench`: an NFSv3 load generator over TCP.
//!
//! Mounts an export (MOUNT on the NFS port), prepares a file, then keeps `--qd` calls
//! in flight per connection for `--duration` seconds (or `--ops` calls) and prints
//! ops/s, MiB/s and latency percentiles from an HdrHistogram. `--verify` checks every
//! byte read against the pattern written during preparation.
//!
//! This is the first, small version; the full workload set, RDMA transport, JSON
//! schema and plots come with the bench issue.

mod client;

use clap::{Parser, ValueEnum};
use client::{Conn, Pattern};
use hdrhistogram::Histogram;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum Workload {
    Null,
    Getattr,
    Randread,
    Seqread,
    Seqwrite,
}

#[derive(Parser, Debug)]
#[command(name = "bench", about = "NFSv3 load generator")]
struct Args {
    /// tcp://HOST:PORT
    #[arg(long, default_value = "tcp://127.0.0.1:2049")]
    target: String,
    /// Export path to mount.
    #[arg(long, default_value = "/")]
    export: String,
    #[arg(long, value_enum, default_value = "getattr")]
    workload: Workload,
    /// Block size in bytes for read/write workloads.
    #[arg(long, default_value_t = 4096)]
    bs: u32,
    /// Calls in flight per connection.
    #[arg(long, default_value_t = 1)]
    qd: usize,
    /// Connections (one thread each).
    #[arg(long, default_value_t = 1)]
    conns: usize,
    /// Seconds to run (ignored when --ops is given).
    #[arg(long, default_value_t = 5)]
    duration: u64,
    /// Stop after this many calls per connection.
    #[arg(long)]
    ops: Option<u64>,
    /// File used by read/write workloads (created if missing).
    #[arg(long, default_value = "bench.dat")]
    file: String,
    /// File size in MiB for read workloads.
    #[arg(long, default_value_t = 64)]
    size_mib: u64,
    /// Check every byte read.
    #[arg(long)]
    verify: bool,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

struct Outcome {
    hist: Histogram<u64>,
    ops: u64,
    bytes: u64,
    errors: u64,
    elapsed: Duration,
}

fn run_conn(args: &Args, addr: &str, seed: u64) -> anyhow::Result<Outcome> {
    let mut c = Conn::connect(addr)?;
    let root = c.mount(&args.export)?;
    let size = args.size_mib << 20;
    let pat = Pattern::new(&args.file);
    let fh = match args.workload {
        Workload::Null | Workload::Getattr => root.clone(),
        Workload::Seqwrite => c.create(&root, &args.file)?,
        Workload::Randread | Workload::Seqread => c.prepare(&root, &args.file, size, &pat)?,
    };
    let blocks = (size / args.bs as u64).max(1);
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)?;
    let mut rng = seed | 1;
    let mut next_block = 0u64;
    let mut pick = |w: Workload| -> u64 {
        match w {
            Workload::Randread => {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                (rng % blocks) * args.bs as u64
            }
            _ => {
                let off = (next_block % blocks) * args.bs as u64;
                next_block += 1;
                off
            }
        }
    };
    let deadline = Instant::now() + Duration::from_secs(args.duration);
    let limit = args.ops.unwrap_or(u64::MAX);
    let payload = vec![0x5au8; args.bs as usize];
    let (mut issued, mut done, mut bytes, mut errors) = (0u64, 0u64, 0u64, 0u64);
    let start = Instant::now();
    let mut inflight = std::collections::HashMap::<u32, (Instant, u64)>::new();
    loop {
        while inflight.len() < args.qd
            && issued < limit
            && (args.ops.is_some() || Instant::now() < deadline)
        {
            let off = pick(args.workload);
            let xid = match args.workload {
                Workload::Null => c.send_null()?,
                Workload::Getattr => c.send_getattr(&fh)?,
                Workload::Randread | Workload::Seqread => c.send_read(&fh, off, args.bs)?,
                Workload::Seqwrite => c.send_write(&fh, off, &payload)?,
            };
            inflight.insert(xid, (Instant::now(), off));
            issued += 1;
        }
        if inflight.is_empty() {
            break;
        }
        let (xid, reply) = c.recv()?;
        let Some((t0, off)) = inflight.remove(&xid) else {
            anyhow::bail!("reply with unknown xid {xid}");
        };
        hist.record(t0.elapsed().as_nanos().max(1) as u64)?;
        done += 1;
        match args.workload {
            Workload::Randread | Workload::Seqread => match client::parse_read(&reply) {
                Ok(data) => {
                    bytes += data.len() as u64;
                    if args.verify && !pat.check(off, data) {
                        anyhow::bail!("verification failed at offset {off}");
                    }
                }
                Err(_) => errors += 1,
            },
            Workload::Seqwrite => {
                if client::status(&reply) == 0 {
                    bytes += args.bs as u64;
                } else {
                    errors += 1;
                }
            }
            Workload::Getattr => {
                if client::status(&reply) != 0 {
                    errors += 1
                }
            }
            Workload::Null => {}
        }
    }
    if args.workload == Workload::Seqwrite {
        c.commit(&fh)?;
    }
    Ok(Outcome {
        hist,
        ops: done,
        bytes,
        errors,
        elapsed: start.elapsed(),
    })
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let addr = args
        .target
        .strip_prefix("tcp://")
        .ok_or_else(|| anyhow::anyhow!("--target must be tcp://HOST:PORT (rdma:// comes later)"))?
        .to_string();
    let outs: Vec<anyhow::Result<Outcome>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..args.conns)
            .map(|i| {
                let a = &args;
                let addr = addr.clone();
                s.spawn(move || run_conn(a, &addr, 0x9e37_79b9_7f4a_7c15 ^ i as u64))
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("bench thread"))
            .collect()
    });
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)?;
    let (mut ops, mut bytes, mut errors, mut secs) = (0u64, 0u64, 0u64, 0f64);
    for o in outs {
        let o = o?;
        hist.add(&o.hist)?;
        ops += o.ops;
        bytes += o.bytes;
        errors += o.errors;
        secs = secs.max(o.elapsed.as_secs_f64());
    }
    let us = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    let iops = ops as f64 / secs;
    let mibs = bytes as f64 / secs / (1 << 20) as f64;
    if args.json {
        println!(
            "{{\"workload\":\"{:?}\",\"bs\":{},\"qd\":{},\"conns\":{},\"ops\":{},\"errors\":{},\"seconds\":{:.3},\"ops_per_s\":{:.1},\"mib_per_s\":{:.2},\"p50_us\":{:.1},\"p99_us\":{:.1},\"p999_us\":{:.1},\"max_us\":{:.1}}}",
            args.workload, args.bs, args.qd, args.conns, ops, errors, secs, iops, mibs,
            us(0.5), us(0.99), us(0.999), hist.max() as f64 / 1000.0
        );
    } else {
        println!(
            "workload {:?} bs {} qd {} conns {}",
            args.workload, args.bs, args.qd, args.conns
        );
        println!(
            "{:>12} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "ops/s", "MiB/s", "p50 µs", "p90 µs", "p99 µs", "p99.9 µs", "errors"
        );
        println!(
            "{:>12.0} {:>10.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9}",
            iops,
            mibs,
            us(0.5),
            us(0.9),
            us(0.99),
            us(0.999),
            errors
        );
    }
    if errors > 0 {
        anyhow::bail!("{errors} calls failed");
    }
    Ok(())
}
