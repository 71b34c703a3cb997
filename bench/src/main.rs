//! `bench`: an NFS load generator (NFSv3 over TCP or RPC-over-RDMA; NFSv4.1 over TCP
//! with `--nfs 4.1`, see `nfs4`), and a TCP → RDMA bridge.
//!
//! Run mode (the default, or `bench run ...`): mounts an export (MOUNT on the NFS port,
//! over the chosen transport), prepares a file set, then runs a workload or a weighted
//! mix of ops from pinned threads, each driving several connections with `--qd` calls in
//! flight, closed loop or at a target rate (open loop, latency from the intended send
//! time). Prints a table per op type or one JSON object (docs/bench.md), and optionally
//! an HdrHistogram interval log and an SVG percentile plot. `--verify` checks every byte
//! read against a pattern that depends on the file and the offset, and reads written
//! blocks back at the end. See `run`.
//!
//! Metadata mode (`bench md ...`): mdtest-style phases (mkdir, create, stat, read,
//! readdir, remove, rmdir) over NFSv3 or NFSv4.1, see `md`.
//!
//! Bridge mode (`bench bridge --listen ADDR --target rdma://HOST:PORT`, or
//! `bench --bridge-listen ADDR --target rdma://HOST:PORT`): ordinary NFS
//! clients speak record-marked RPC over TCP to the bridge, which forwards every call
//! over its own RPC-over-RDMA connection to the server (see `bridge`).

mod bridge;
mod client;
mod conn;
mod copy;
mod driver;
mod exports;
mod fileset;
mod hdrlog;
mod jukebox;
mod live;
mod load;
mod md;
mod nfs4;
mod pattern;
mod pipe;
mod plot;
mod pnfs;
mod rdma;
mod recorder;
mod report;
mod run;
mod schedule;
mod stall;
mod stats;
mod transport;
mod ulb;
mod ulb4;
mod units;

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use transport::Provider;
use workload::Op;

mod workload;

#[derive(Parser, Debug)]
#[command(
    name = "bench",
    about = "NFS load generator (NFSv3 over TCP or RPC-over-RDMA, NFSv4.1 over TCP) and TCP-to-RDMA bridge",
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
    Run(Box<RunArgs>),
    /// Accept NFS clients over TCP and forward their calls over RPC-over-RDMA.
    Bridge(bridge::BridgeArgs),
    /// An mdtest-style metadata run: mkdir, create (+ a small write), stat, read,
    /// readdir, remove, rmdir, per connection in its own directory (easy) or all in
    /// one (hard); ops/s and latency per phase.
    Md(Box<md::MdArgs>),
    /// A hostile RPC-over-RDMA peer: sends NULL calls (or 1 MiB READs with `--read`),
    /// posts no Receive, and waits for the gateway to close the connection
    /// (`rdma.send_timeout_s`, or `rdma.stall_reclaim_ms` when buffers run short).
    Stall(stall::StallArgs),
}

fn size_arg(s: &str) -> Result<u64, String> {
    units::parse_size(s)
}

fn mix_arg(s: &str) -> Result<workload::Mix, String> {
    workload::Mix::parse(s)
}

fn secs_arg(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(format!("{s:?} is not a number of seconds")),
    }
}

fn rate_arg(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("{s:?} is not a positive rate")),
    }
}

/// The NFS version a run speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum NfsVersion {
    /// NFSv3 and MOUNT v3.
    #[value(name = "3")]
    V3,
    /// NFSv4.1: a client, sessions, OPENed files (TCP only).
    #[value(name = "4.1")]
    V41,
    /// NFSv4.2 (RFC 7862): the same client and operations as 4.1 in COMPOUNDs of minor
    /// version 2.
    #[value(name = "4.2")]
    V42,
}

impl NfsVersion {
    /// NFSv4.x (sessions, no MOUNT).
    pub fn is_v4(self) -> bool {
        matches!(self, NfsVersion::V41 | NfsVersion::V42)
    }

    /// The COMPOUND minor version (0 for NFSv3).
    pub fn minor(self) -> u32 {
        match self {
            NfsVersion::V3 => 0,
            NfsVersion::V41 => 1,
            NfsVersion::V42 => 2,
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// tcp://HOST:PORT or rdma://HOST:PORT
    #[arg(long, default_value = "tcp://127.0.0.1:2049")]
    pub target: String,
    /// NFS version: 3, or 4.1 (EXCHANGE_ID, a session per connection with --qd slots,
    /// SEQUENCE + PUTFH + op compounds, OPENed files; over rdma:// with an RFC 8167
    /// back channel).
    #[arg(long, value_enum, default_value = "3")]
    pub nfs: NfsVersion,
    /// Reads as READ_PLUS (RFC 7862 §15.10) instead of READ; needs `--nfs 4.2` and a
    /// tcp:// target (READ_PLUS data is inline, no RDMA write chunk).
    #[arg(long)]
    pub read_plus: bool,
    /// `--workload copy`: copy through bench (READ + WRITE) instead of the server-side
    /// COPY, for comparison (docs/bench.md "Copy").
    #[arg(long)]
    pub copy_through_client: bool,
    /// RDMA provider for rdma:// targets.
    #[arg(long, value_enum, default_value = "soft")]
    pub provider: Provider,
    /// Source address of every TCP connection (bound before connecting), e.g.
    /// 127.0.0.2: lets one host stand for several clients (per-client QoS rules).
    #[arg(long, value_name = "ADDR")]
    pub source: Option<std::net::IpAddr>,
    /// Export path to mount; default: the server's only export (MOUNT EXPORT; an
    /// error listing them if it has several).
    #[arg(long)]
    pub export: Option<String>,
    /// Send MOUNT to this TCP port on the target's host (servers such as NFS-Ganesha
    /// serve MOUNT on a port of its own); default: the target's NFS port.
    #[arg(long, value_name = "PORT")]
    pub mount_port: Option<u16>,
    /// One op for the whole run.
    #[arg(long, value_enum, default_value = "getattr", conflicts_with = "mix")]
    pub workload: Op,
    /// A weighted mix instead of one workload: OP:WEIGHT,... (e.g.
    /// randread:70,randwrite:20,getattr:10). Results are recorded per op type.
    #[arg(long, value_name = "MIX", value_parser = mix_arg)]
    pub mix: Option<workload::Mix>,
    /// Block size of reads and writes (4k .. 1m; suffixes k, m).
    #[arg(long, default_value = "4k", value_parser = size_arg)]
    pub bs: u64,
    /// Calls in flight per connection.
    #[arg(long, default_value_t = 1)]
    pub qd: usize,
    /// Load threads, each pinned to a core (default: 1, or one per connection given
    /// with --conns up to the number of usable cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Connections per thread (default 1).
    #[arg(long, conflicts_with = "conns")]
    pub conns_per_thread: Option<usize>,
    /// Total connections, spread round-robin over the threads (alternative to
    /// --conns-per-thread).
    #[arg(long)]
    pub conns: Option<usize>,
    /// Cores to pin threads to, e.g. 1,3 or 2-5 (default: the cores this process may
    /// use, highest first, as the gateway's first reactor usually runs on core 0).
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,
    /// Seconds to measure (ignored when --ops is given).
    #[arg(long, default_value = "5", value_parser = secs_arg)]
    pub duration: f64,
    /// Seconds of load before measuring starts (not recorded).
    #[arg(long, default_value = "0", value_parser = secs_arg)]
    pub warmup: f64,
    /// Stop after this many recorded ops in total (instead of --duration).
    #[arg(long)]
    pub ops: Option<u64>,
    /// Open loop: send this many ops per second in total (split evenly over the
    /// connections); latency is measured from each op's intended send time.
    #[arg(long, value_name = "OPS_PER_S", value_parser = rate_arg)]
    pub rate: Option<f64>,
    /// Files in the set read and write workloads spread over.
    #[arg(long, default_value_t = 1)]
    pub files: usize,
    /// Name of the file (one file) or prefix of the files (NAME.0, NAME.1, ...) in the
    /// export's root.
    #[arg(long, default_value = "bench.dat")]
    pub file: String,
    /// Size of each file (suffixes k, m, g; default 64m).
    #[arg(long, value_parser = size_arg, conflicts_with = "size_mib")]
    pub file_size: Option<u64>,
    /// File size in MiB (older spelling of --file-size).
    #[arg(long)]
    pub size_mib: Option<u64>,
    /// Check every byte read against the pattern; write workloads write the pattern
    /// and read every written block back at the end. Exits non-zero on any mismatch.
    #[arg(long)]
    pub verify: bool,
    /// Print one JSON object (schema nfsgw-bench/1, docs/bench.md) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// pNFS (issue 27; needs --nfs 4.1 or 4.2 and a tcp:// metadata server): take a
    /// flexfiles layout for every file (LAYOUTGET, GETDEVICEINFO) and drive the data
    /// I/O as NFSv3 at the data servers named; per data server results in the report.
    #[arg(long)]
    pub pnfs: bool,
    /// Write an HdrHistogram interval log (one interval per second, tag = op type).
    #[arg(long, value_name = "FILE")]
    pub hdr_log: Option<PathBuf>,
    /// Write a latency-percentile plot (SVG), one line per op type.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Seconds a call may keep being answered NFS3ERR_JUKEBOX / NFS4ERR_DELAY (each
    /// resent after 100 ms doubling to 2 s, as the kernel client does) before it fails.
    #[arg(long, default_value = "60", value_parser = secs_arg)]
    pub jukebox_timeout: f64,
}

fn main() {
    let cli = Cli::parse();
    let r = match cli.cmd {
        None => match cli.bridge_listen {
            Some(listen) => bridge::main(bridge::BridgeArgs {
                listen,
                target: cli.run.target,
                provider: cli.run.provider,
                max_queue: bridge::DEFAULT_MAX_QUEUE,
                verbose: false,
            }),
            None => run::run(cli.run),
        },
        Some(Cmd::Run(a)) => run::run(*a),
        Some(Cmd::Bridge(b)) => bridge::main(b),
        Some(Cmd::Md(m)) => md::main(*m),
        Some(Cmd::Stall(s)) => stall::main(s),
    };
    if let Err(e) = r {
        // One line, no backtrace: failures here are the server's or the operator's.
        eprintln!("bench: {e:#}");
        std::process::exit(1);
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
    fn stall_flags_parse() {
        let c = Cli::try_parse_from([
            "bench",
            "stall",
            "--target",
            "rdma://10.0.2.15:20049",
            "--provider",
            "verbs",
            "--wait-s",
            "40",
        ])
        .unwrap();
        let Some(Cmd::Stall(s)) = c.cmd else {
            panic!("not stall: {:?}", c.cmd);
        };
        assert_eq!((s.provider, s.calls, s.wait_s), (Provider::Verbs, 8, 40));
        assert_eq!((s.read, s.export), (None, None));
        let c = Cli::try_parse_from([
            "bench",
            "stall",
            "--target",
            "rdma://10.0.2.15:20049",
            "--read",
            "big.dat",
            "--calls",
            "12",
        ])
        .unwrap();
        let Some(Cmd::Stall(s)) = c.cmd else {
            panic!("not stall: {:?}", c.cmd);
        };
        assert_eq!((s.read.as_deref(), s.calls), (Some("big.dat"), 12));
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
        assert_eq!(c.run.workload, Op::Randwrite);
        assert_eq!(c.run.provider, Provider::Soft);
        assert!(c.run.verify && c.run.json);
        let c = Cli::try_parse_from(["bench", "run", "--workload", "null"]).unwrap();
        assert!(matches!(c.cmd, Some(Cmd::Run(ref a)) if a.workload == Op::Null));
    }

    #[test]
    fn run_flags_parse() {
        let c = Cli::try_parse_from([
            "bench",
            "--mix",
            "randread:70,randwrite:20,getattr:10",
            "--bs",
            "64k",
            "--file-size",
            "1m",
            "--files",
            "8",
            "--threads",
            "2",
            "--conns-per-thread",
            "3",
            "--rate",
            "1500.5",
            "--warmup",
            "0.5",
            "--hdr-log",
            "x.hlog",
            "--plot",
            "x.svg",
        ])
        .unwrap();
        let r = c.run;
        assert_eq!(r.mix.unwrap().entries().len(), 3);
        assert_eq!((r.bs, r.file_size, r.files), (65536, Some(1 << 20), 8));
        assert_eq!((r.threads, r.conns_per_thread), (Some(2), Some(3)));
        assert_eq!((r.rate, r.warmup), (Some(1500.5), 0.5));
        assert!(r.hdr_log.is_some() && r.plot.is_some());
        assert_eq!(r.nfs, NfsVersion::V3);
        let c = Cli::try_parse_from(["bench", "--nfs", "4.1", "--workload", "randread"]).unwrap();
        assert_eq!(c.run.nfs, NfsVersion::V41);
        let c = Cli::try_parse_from(["bench", "--nfs", "4.2", "--workload", "randread"]).unwrap();
        assert_eq!((c.run.nfs, c.run.nfs.minor()), (NfsVersion::V42, 2));
        assert!(c.run.nfs.is_v4());
        assert!(Cli::try_parse_from(["bench", "--nfs", "4"]).is_err());
        for bad in [
            &["bench", "--mix", "bogus:1"][..],
            &["bench", "--workload", "null", "--mix", "null:1"],
            &["bench", "--conns", "2", "--conns-per-thread", "2"],
            &["bench", "--file-size", "1m", "--size-mib", "1"],
            &["bench", "--bs", "4q"],
            &["bench", "--rate", "0"],
            &["bench", "--warmup", "-1"],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn md_flags_parse() {
        let c = Cli::try_parse_from([
            "bench",
            "md",
            "--target",
            "rdma://127.0.0.1:20049",
            "--nfs",
            "4.1",
            "--tree",
            "hard",
            "--files-per-conn",
            "200",
            "--phases",
            "readdir,create",
            "--conns",
            "2",
            "--qd",
            "4",
            "--verify",
        ])
        .unwrap();
        let Some(Cmd::Md(m)) = c.cmd else {
            panic!("not md: {:?}", c.cmd);
        };
        assert_eq!(
            (m.nfs, m.tree, m.files_per_conn),
            (NfsVersion::V41, md::Tree::Hard, 200)
        );
        assert_eq!((m.write_size, m.conns, m.qd, m.verify), (3901, 2, 4, true));
        assert!(m.phases.reported(md::Phase::Readdir) && !m.phases.reported(md::Phase::Stat));
        let c = Cli::try_parse_from(["bench", "md", "--write-size", "4k"]).unwrap();
        let Some(Cmd::Md(m)) = c.cmd else {
            panic!("not md");
        };
        assert_eq!((m.write_size, m.tree), (4096, md::Tree::Easy));
        assert_eq!(m.phases, md::Phases::default());
        for bad in [
            &["bench", "md", "--phases", "open"][..],
            &["bench", "md", "--tree", "medium"],
            &["bench", "md", "--workload", "null"],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?}");
        }
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
