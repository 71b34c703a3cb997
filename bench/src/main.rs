//! `bench`: an NFSv3 load generator over TCP or RPC-over-RDMA, and a TCP → RDMA bridge.
//!
//! Run mode (the default, or `bench run ...`): mounts an export (MOUNT on the NFS port,
//! over the chosen transport), prepares a file, then keeps `--qd` calls in flight per
//! connection for `--duration` seconds (or `--ops` calls) and prints ops/s, MiB/s and
//! latency percentiles from an HdrHistogram. `--verify` checks every byte read against
//! the pattern written during preparation; for write workloads it writes the pattern
//! and reads every written block back after the run.
//!
//! Bridge mode (`bench bridge --listen ADDR --target rdma://HOST:PORT`, or
//! `bench --bridge-listen ADDR --target rdma://HOST:PORT`): ordinary NFS
//! clients speak record-marked RPC over TCP to the bridge, which forwards every call
//! over its own RPC-over-RDMA connection to the server (see `bridge`).

mod bridge;
mod client;
mod pipe;
mod rdma;
mod transport;
mod ulb;

use clap::{Args, Parser, Subcommand, ValueEnum};
use client::{Conn, Pattern};
use hdrhistogram::Histogram;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use transport::{Provider, Target};

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum Workload {
    Null,
    Getattr,
    Randread,
    Seqread,
    Seqwrite,
    Randwrite,
}

impl Workload {
    fn writes(self) -> bool {
        matches!(self, Workload::Seqwrite | Workload::Randwrite)
    }

    fn random(self) -> bool {
        matches!(self, Workload::Randread | Workload::Randwrite)
    }
}

#[derive(Parser, Debug)]
#[command(
    name = "bench",
    about = "NFSv3 load generator (TCP or RPC-over-RDMA) and TCP-to-RDMA bridge",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    /// Bridge mode, same as `bench bridge --listen ADDR`: accept NFS clients over TCP
    /// on ADDR and forward their calls to --target (rdma://HOST:PORT) with --provider.
    #[arg(long, value_name = "ADDR")]
    bridge_listen: Option<String>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run a workload (the default when no subcommand is given).
    Run(RunArgs),
    /// Accept NFS clients over TCP and forward their calls over RPC-over-RDMA.
    Bridge(bridge::BridgeArgs),
}

#[derive(Args, Debug, Clone)]
struct RunArgs {
    /// tcp://HOST:PORT or rdma://HOST:PORT
    #[arg(long, default_value = "tcp://127.0.0.1:2049")]
    target: String,
    /// RDMA provider for rdma:// targets.
    #[arg(long, value_enum, default_value = "soft")]
    provider: Provider,
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
    /// File size in MiB (read workloads prepare it; write workloads wrap within it).
    #[arg(long, default_value_t = 64)]
    size_mib: u64,
    /// Check every byte read; write workloads write the pattern and read it back.
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
    /// Blocks written (write workloads with --verify).
    written: Vec<bool>,
}

fn blocks(args: &RunArgs) -> u64 {
    ((args.size_mib << 20) / args.bs as u64).max(1)
}

fn run_conn(args: &RunArgs, target: &Target, fh: &[u8], seed: u64) -> anyhow::Result<Outcome> {
    let mut c = Conn::connect(target)?;
    let pat = Pattern::new(&args.file);
    let blocks = blocks(args);
    let bs = args.bs as u64;
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)?;
    let mut rng = seed | 1;
    let mut next_block = 0u64;
    let mut pick = |w: Workload| -> u64 {
        if w.random() {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % blocks
        } else {
            let b = next_block % blocks;
            next_block += 1;
            b
        }
    };
    let deadline = Instant::now() + Duration::from_secs(args.duration);
    let limit = args.ops.unwrap_or(u64::MAX);
    let mut payload = vec![0x5au8; args.bs as usize];
    let track = args.verify && args.workload.writes();
    let mut written = vec![false; if track { blocks as usize } else { 0 }];
    let (mut issued, mut done, mut bytes, mut errors) = (0u64, 0u64, 0u64, 0u64);
    let start = Instant::now();
    let mut inflight = HashMap::<u32, (Instant, u64)>::new();
    loop {
        while inflight.len() < args.qd
            && issued < limit
            && (args.ops.is_some() || Instant::now() < deadline)
        {
            let block = pick(args.workload);
            let off = block * bs;
            let xid = match args.workload {
                Workload::Null => c.send_null()?,
                Workload::Getattr => c.send_getattr(fh)?,
                Workload::Randread | Workload::Seqread => c.send_read(fh, off, args.bs)?,
                Workload::Seqwrite | Workload::Randwrite => {
                    if args.verify {
                        pat.fill(off, &mut payload);
                    }
                    c.send_write(fh, off, &payload)?
                }
            };
            inflight.insert(xid, (Instant::now(), block));
            issued += 1;
        }
        if inflight.is_empty() {
            break;
        }
        let (xid, reply) = c.recv()?;
        let Some((t0, block)) = inflight.remove(&xid) else {
            anyhow::bail!("reply with unknown xid {xid}");
        };
        hist.record(t0.elapsed().as_nanos().max(1) as u64)?;
        done += 1;
        let reply = match reply {
            Ok(r) => r,
            Err(e) => {
                if errors < 5 {
                    eprintln!("bench: {e:#}");
                }
                errors += 1;
                continue;
            }
        };
        let off = block * bs;
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
            Workload::Seqwrite | Workload::Randwrite => {
                if client::status(&reply) == 0 {
                    bytes += bs;
                    if track {
                        written[block as usize] = true;
                    }
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
    if args.workload.writes() {
        c.commit(fh)?;
    }
    let elapsed = start.elapsed();
    Ok(Outcome {
        hist,
        ops: done,
        bytes,
        errors,
        elapsed,
        written,
    })
}

/// Reads every written block back (`--qd` reads in flight) and checks the pattern.
fn verify_written(
    c: &mut Conn,
    fh: &[u8],
    written: &[bool],
    args: &RunArgs,
    pat: &Pattern,
) -> anyhow::Result<u64> {
    let bs = args.bs as u64;
    let mut todo = written
        .iter()
        .enumerate()
        .filter(|(_, &w)| w)
        .map(|(b, _)| b as u64);
    let mut inflight = HashMap::<u32, u64>::new();
    let mut checked = 0u64;
    loop {
        while inflight.len() < args.qd.max(1) {
            let Some(b) = todo.next() else { break };
            let xid = c.send_read(fh, b * bs, args.bs)?;
            inflight.insert(xid, b);
        }
        if inflight.is_empty() {
            return Ok(checked);
        }
        let (xid, reply) = c.recv()?;
        let Some(b) = inflight.remove(&xid) else {
            anyhow::bail!("reply with unknown xid {xid}");
        };
        let reply = reply?;
        let data = client::parse_read(&reply)?;
        let off = b * bs;
        anyhow::ensure!(
            data.len() as u64 == bs,
            "read-back verification failed at offset {off}: {} bytes instead of {bs}",
            data.len()
        );
        anyhow::ensure!(
            pat.check(off, data),
            "read-back verification failed at offset {off}"
        );
        checked += 1;
    }
}

fn run(args: RunArgs) -> anyhow::Result<()> {
    let target = Target::parse(&args.target, args.provider)?;
    anyhow::ensure!(
        args.bs > 0 && args.bs <= 1 << 20,
        "--bs must be 1..=1048576"
    );
    anyhow::ensure!(
        args.qd > 0 && args.conns > 0,
        "--qd and --conns must be positive"
    );
    // One setup connection: mount and prepare the file once, before the load starts.
    let mut setup = Conn::connect(&target)?;
    let root = setup.mount(&args.export)?;
    let pat = Pattern::new(&args.file);
    let fh = match args.workload {
        Workload::Null | Workload::Getattr => root.clone(),
        Workload::Seqwrite => setup.create(&root, &args.file)?,
        Workload::Randwrite => setup.lookup_or_create(&root, &args.file)?,
        Workload::Randread | Workload::Seqread => {
            setup.prepare(&root, &args.file, args.size_mib << 20, &pat)?
        }
    };
    let outs: Vec<anyhow::Result<Outcome>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..args.conns)
            .map(|i| {
                let (a, t, fh) = (&args, &target, &fh);
                s.spawn(move || run_conn(a, t, fh, 0x9e37_79b9_7f4a_7c15 ^ i as u64))
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("bench thread"))
            .collect()
    });
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)?;
    let (mut ops, mut bytes, mut errors, mut secs) = (0u64, 0u64, 0u64, 0f64);
    let mut written = Vec::new();
    for o in outs {
        let o = o?;
        hist.add(&o.hist)?;
        ops += o.ops;
        bytes += o.bytes;
        errors += o.errors;
        secs = secs.max(o.elapsed.as_secs_f64());
        if written.is_empty() {
            written = o.written;
        } else {
            for (w, x) in written.iter_mut().zip(o.written) {
                *w |= x;
            }
        }
    }
    if args.verify && args.workload.writes() {
        let n = verify_written(&mut setup, &fh, &written, &args, &pat)?;
        if !args.json {
            println!("verified {n} written blocks");
        }
    }
    let secs = secs.max(1e-9);
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
            "workload {:?} bs {} qd {} conns {} target {}",
            args.workload, args.bs, args.qd, args.conns, args.target
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

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        None => match cli.bridge_listen {
            Some(listen) => bridge::main(bridge::BridgeArgs {
                listen,
                target: cli.run.target,
                provider: cli.run.provider,
                max_queue: bridge::DEFAULT_MAX_QUEUE,
                verbose: false,
            }),
            None => run(cli.run),
        },
        Some(Cmd::Run(a)) => run(a),
        Some(Cmd::Bridge(b)) => bridge::main(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn flags_without_subcommand_run_a_workload() {
        let c = Cli::try_parse_from([
            "bench",
            "--target",
            "rdma://127.0.0.1:20049",
            "--workload",
            "randwrite",
            "--bs",
            "65536",
            "--verify",
            "--json",
        ])
        .unwrap();
        assert!(c.cmd.is_none());
        assert_eq!(c.run.workload, Workload::Randwrite);
        assert_eq!(c.run.provider, Provider::Soft);
        assert!(c.run.verify && c.run.json);
        let c = Cli::try_parse_from(["bench", "run", "--workload", "null"]).unwrap();
        assert!(matches!(c.cmd, Some(Cmd::Run(ref a)) if a.workload == Workload::Null));
    }

    #[test]
    fn bridge_subcommand_parses() {
        let c = Cli::try_parse_from([
            "bench",
            "bridge",
            "--listen",
            "127.0.0.1:0",
            "--target",
            "rdma://127.0.0.1:20049",
        ])
        .unwrap();
        let Some(Cmd::Bridge(b)) = c.cmd else {
            panic!("not a bridge");
        };
        assert_eq!(b.listen, "127.0.0.1:0");
        assert!(Cli::try_parse_from(["bench", "--workload", "null", "bridge"]).is_err());
        let c = Cli::try_parse_from([
            "bench",
            "--bridge-listen",
            "127.0.0.1:7000",
            "--target",
            "rdma://127.0.0.1:20049",
        ])
        .unwrap();
        assert!(c.cmd.is_none());
        assert_eq!(c.bridge_listen.as_deref(), Some("127.0.0.1:7000"));
        assert_eq!(c.run.target, "rdma://127.0.0.1:20049");
    }
}
