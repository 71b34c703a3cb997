//! The copy workload (`--workload copy`, issue 31; docs/bench.md "Copy"): each op
//! copies one whole file of the set (`--file-size` bytes) to a new name, then the
//! copy is removed (untimed). Two ways, so the same run can compare them:
//!
//! - server-side (the default; `--nfs 4.2`): one COMPOUND of PUTFH (source), SAVEFH,
//!   PUTFH (target), COPY (RFC 7862 §15.2: intra-server, ca_consecutive and
//!   ca_synchronous true, the whole file), so no file byte crosses the network;
//! - through the client (`--copy-through-client`, `--nfs 4.1` or `4.2`): READs of the
//!   source and WRITEs (UNSTABLE4) of the target, 1 MiB each (or the session's
//!   largest), as many in flight as the session has slots (`--qd`, at least 8), each
//!   slot's READ followed by the WRITE of its data, as `cp` through a client's page
//!   cache does.
//!
//! A timed op is OPEN (create) of the target, the copy, and COMMIT when the copy's
//! data was not answered FILE_SYNC4 (RFC 7862 §15.2.3: wr_committed), as `cp` ends
//! with the close that flushes. `--verify` then reads the copy back against the
//! source's pattern (untimed). The ops run one after another on one session:
//! `--ops` copies, or as many as start within `--duration` (at least one).

use crate::nfs4::reply;
use crate::nfs4::session::{check, Client4, Opened};
use crate::nfs4::{status, Op4, Seq};
use crate::pattern::Pattern;
use crate::transport::Target;
use crate::RunArgs;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// stable_how4 FILE_SYNC4 (RFC 8881 §18.32.1): nothing left to COMMIT.
const FILE_SYNC4: u32 = 2;
/// Session slots at least: the through-client copy's READs and WRITEs in flight.
const MIN_SLOTS: u32 = 8;

/// What a copy run measured.
#[derive(Debug, Default)]
pub struct Copied {
    pub copies: u64,
    pub bytes: u64,
    /// Each copy's time (OPEN of the target to its data stable).
    pub latencies: Vec<Duration>,
    pub verified_bytes: u64,
    pub verify_failures: u64,
    /// READ + WRITE size of the through-client copy, and slots in flight.
    pub io_size: u32,
    pub slots: usize,
    /// NFS4ERR_DELAY answers resent.
    pub delays: u64,
}

impl Copied {
    pub fn seconds(&self) -> f64 {
        self.latencies.iter().map(Duration::as_secs_f64).sum()
    }

    pub fn mib_per_s(&self) -> f64 {
        let s = self.seconds();
        if s > 0.0 {
            self.bytes as f64 / (1u64 << 20) as f64 / s
        } else {
            0.0
        }
    }

    pub fn ops_per_s(&self) -> f64 {
        let s = self.seconds();
        if s > 0.0 {
            self.copies as f64 / s
        } else {
            0.0
        }
    }

    /// Latency quantile `q` (0..=1) in milliseconds, nearest rank.
    pub fn latency_ms(&self, q: f64) -> f64 {
        let mut l = self.latencies.clone();
        l.sort();
        match l.len() {
            0 => 0.0,
            n => l[((q * (n - 1) as f64).round() as usize).min(n - 1)].as_secs_f64() * 1e3,
        }
    }
}

/// Checks the flags of a copy run.
pub fn check_args(args: &RunArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.nfs.is_v4(),
        "--workload copy needs --nfs 4.2 (COPY), or 4.1/4.2 with --copy-through-client"
    );
    anyhow::ensure!(
        args.copy_through_client || args.nfs == crate::NfsVersion::V42,
        "a server-side copy is NFSv4.2's COPY: give --nfs 4.2 (or --copy-through-client)"
    );
    anyhow::ensure!(!args.pnfs, "--workload copy does not take --pnfs");
    anyhow::ensure!(
        args.rate.is_none(),
        "--workload copy runs its copies one after another; --rate does not apply"
    );
    Ok(())
}

/// The copy run: setup (the file set, filled with the pattern), the copies, the
/// teardown, the report.
pub fn run(args: &RunArgs, target: &Target, file_size: u64) -> anyhow::Result<()> {
    check_args(args)?;
    anyhow::ensure!(file_size > 0, "--workload copy needs a --file-size above 0");
    let slots = u32::try_from(args.qd).unwrap_or(u32::MAX).max(MIN_SLOTS);
    let mut c = Client4::connect(target, slots)?;
    c.set_retry(crate::jukebox::Policy::new(Duration::from_secs_f64(
        args.jukebox_timeout,
    )));
    let export = crate::exports::choose(args.export.as_deref(), || c.exports())?;
    let root = c.root(&export)?;
    let mut files = Vec::with_capacity(args.files);
    for i in 0..args.files {
        let name = crate::fileset::file_name(&args.file, i, args.files);
        let f = c.open(&root, &name)?;
        if f.size < file_size {
            eprintln!("bench: writing the pattern into {name} ({file_size} bytes)");
            c.write_pattern(&f, file_size, &Pattern::for_file(i as u64))
                .map_err(|e| anyhow::anyhow!("preparing {name}: {e:#}"))?;
        }
        files.push(f);
    }
    let mut out = Copied {
        io_size: c.max_io.clamp(4096, 1 << 20),
        slots: c.slots(),
        ..Copied::default()
    };
    let start = Instant::now();
    let duration = Duration::from_secs_f64(args.duration);
    let mut i = 0u64;
    let result = loop {
        let more = match args.ops {
            Some(n) => i < n,
            None => i == 0 || start.elapsed() < duration,
        };
        if !more {
            break Ok(());
        }
        let src = (i % files.len() as u64) as usize;
        let name = format!("{}.copy-{}-{i}", args.file, std::process::id());
        if let Err(e) = one(
            args,
            &mut c,
            &root,
            &files[src],
            src,
            &name,
            file_size,
            &mut out,
        ) {
            break Err(e.context(format!("copy {i} ({name})")));
        }
        i += 1;
    };
    // A failed copy is the error to report; the teardown after it may fail too
    // (DESTROY_CLIENTID answers CLIENTID_BUSY while the copy's target is open).
    let teardown = (|| {
        for f in &files {
            c.close(f)?;
        }
        out.delays += c.jukebox();
        c.finish()
    })();
    result?;
    teardown?;
    report(args, file_size, &out);
    anyhow::ensure!(
        out.verify_failures == 0,
        "verification FAILED: {} block(s) of the copies did not match their source",
        out.verify_failures
    );
    Ok(())
}

/// One copy of `src` (file `index` of the set) to `name`, timed; verified with
/// `--verify`; then the copy is closed and removed.
#[allow(clippy::too_many_arguments)]
fn one(
    args: &RunArgs,
    c: &mut Client4,
    root: &[u8],
    src: &Opened,
    index: usize,
    name: &str,
    size: u64,
    out: &mut Copied,
) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let dst = c.open(root, name)?;
    anyhow::ensure!(dst.size == 0, "the copy's new name {name} is not empty");
    let stable = if args.copy_through_client {
        let give_up = Duration::from_secs_f64(args.jukebox_timeout);
        through_client(c, src, &dst, size, give_up, out)?;
        false
    } else {
        let body = c.compound(&[
            Op4::Putfh(&src.fh),
            Op4::Savefh,
            Op4::Putfh(&dst.fh),
            Op4::Copy {
                src: src.stateid.latest(),
                dst: dst.stateid.latest(),
                src_off: 0,
                dst_off: 0,
                count: size,
            },
        ])?;
        let d = reply::decode(&body).map_err(anyhow::Error::msg)?;
        check(&d, "COPY")?;
        anyhow::ensure!(
            !d.copy_async,
            "COPY asked synchronous was answered with a callback id"
        );
        let (n, committed) = d
            .copied
            .ok_or_else(|| anyhow::anyhow!("COPY reply without write_response4"))?;
        anyhow::ensure!(n == size, "COPY copied {n} of {size} bytes");
        committed == FILE_SYNC4
    };
    if !stable {
        c.commit(&dst.fh)?;
    }
    out.latencies.push(t0.elapsed());
    out.copies += 1;
    out.bytes += size;
    if args.verify {
        let io = u64::from(out.io_size);
        let blocks: Vec<(u64, u32)> = (0..size.div_ceil(io))
            .map(|b| (b * io, io.min(size - b * io) as u32))
            .collect();
        let (good, bad) = c.read_back(&dst, &blocks, &Pattern::for_file(index as u64), name)?;
        out.verified_bytes += good;
        out.verify_failures += bad;
    }
    c.close(&dst)?;
    let body = c.compound(&[Op4::Putfh(root), Op4::Remove(name)])?;
    check(&reply::decode(&body).map_err(anyhow::Error::msg)?, "REMOVE")
}

/// One READ or WRITE of the through-client copy.
enum Io {
    Read(u64, u32),
    /// The target offset, the READ reply holding the data and where it lies in it.
    Write(u64, Vec<u8>, std::ops::Range<usize>),
}

/// Copies `size` bytes of `src` into `dst` by READ and WRITE: every free slot reads
/// the next block; a READ's answer is written back on the slot it freed, before any
/// new READ, so at most `slots` blocks are held.
fn through_client(
    c: &mut Client4,
    src: &Opened,
    dst: &Opened,
    size: u64,
    give_up: Duration,
    out: &mut Copied,
) -> anyhow::Result<()> {
    let io = u64::from(out.io_size);
    let (rsid, wsid) = (src.stateid.latest(), dst.stateid.latest());
    let mut next = 0u64;
    let mut ready: VecDeque<Io> = VecDeque::new();
    let mut inflight: HashMap<u32, (Seq, Io)> = HashMap::new();
    let mut delayed_since: Option<Instant> = None;
    loop {
        while inflight.len() < c.slots() {
            let io_op = match ready.pop_front() {
                Some(w) => w,
                None if next < size => {
                    let len = io.min(size - next) as u32;
                    next += u64::from(len);
                    Io::Read(next - u64::from(len), len)
                }
                None => break,
            };
            let sent = match &io_op {
                Io::Read(off, len) => c.send(&[Op4::Putfh(&src.fh), Op4::Read(rsid, *off, *len)]),
                Io::Write(off, body, r) => c.send(&[
                    Op4::Putfh(&dst.fh),
                    Op4::Write(wsid, *off, &body[r.clone()]),
                ]),
            }?;
            inflight.insert(sent.0, (sent.1, io_op));
        }
        if inflight.is_empty() {
            return Ok(());
        }
        let (xid, body) = c.recv()?;
        let (seq, io_op) = inflight
            .remove(&xid)
            .ok_or_else(|| anyhow::anyhow!("reply with unknown xid {xid}"))?;
        let body = body?;
        let d = reply::decode(&body).map_err(anyhow::Error::msg)?;
        c.release(&seq, d.seq_done);
        let failed = check(&d, "answered");
        // Where READ data lies in `body`: written from there, not copied.
        let data = d.data.map(|x| {
            let at = x.as_ptr() as usize - body.as_ptr() as usize;
            at..at + x.len()
        });
        if d.status == status::DELAY {
            // Resent after a pause (RFC 8881 §15.1.1.3), for at most --jukebox-timeout.
            let since = *delayed_since.get_or_insert_with(Instant::now);
            anyhow::ensure!(
                since.elapsed() < give_up,
                "answered NFS4ERR_DELAY for longer than --jukebox-timeout"
            );
            out.delays += 1;
            std::thread::sleep(Duration::from_millis(50));
            ready.push_front(io_op);
            continue;
        }
        delayed_since = None;
        match io_op {
            Io::Read(off, len) => {
                failed.map_err(|e| e.context(format!("READ at {off}")))?;
                let data = data.unwrap_or_default();
                anyhow::ensure!(
                    data.len() == len as usize,
                    "READ at {off} returned {} of {len} bytes (the source is shorter than --file-size?)",
                    data.len()
                );
                ready.push_back(Io::Write(off, body, data));
            }
            Io::Write(off, ..) => failed.map_err(|e| e.context(format!("WRITE at {off}")))?,
        }
    }
}

fn report(args: &RunArgs, file_size: u64, o: &Copied) {
    let mode = if args.copy_through_client {
        "client"
    } else {
        "server"
    };
    if args.json {
        use crate::report::{json_num as n, json_str};
        let j = format!(
            "{{\"schema\":\"nfsgw-bench-copy/1\",\"target\":{},\"nfs\":\"{}\",\
             \"mode\":\"{mode}\",\"file_size\":{file_size},\"files\":{},\
             \"copies\":{},\"bytes\":{},\"seconds\":{},\"mib_per_s\":{},\
             \"ops_per_s\":{},\"latency_ms\":{{\"min\":{},\"p50\":{},\"max\":{}}},\
             \"io_size\":{},\"slots\":{},\"delays\":{},\"verified_bytes\":{},\
             \"verify_failures\":{}}}",
            json_str(&args.target),
            if args.nfs == crate::NfsVersion::V42 {
                "4.2"
            } else {
                "4.1"
            },
            args.files,
            o.copies,
            o.bytes,
            n(o.seconds()),
            n(o.mib_per_s()),
            n(o.ops_per_s()),
            n(o.latency_ms(0.0)),
            n(o.latency_ms(0.5)),
            n(o.latency_ms(1.0)),
            o.io_size,
            o.slots,
            o.delays,
            o.verified_bytes,
            o.verify_failures,
        );
        println!("{j}");
        return;
    }
    let how = if args.copy_through_client {
        format!(
            "through the client (READ + WRITE of {} KiB, {} in flight)",
            o.io_size >> 10,
            o.slots
        )
    } else {
        "server-side COPY (RFC 7862 §15.2)".to_string()
    };
    println!(
        "copy on {}: {how}, {} file(s) of {} bytes",
        args.target, args.files, file_size
    );
    println!(
        "{:>8} {:>12} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "copies", "MiB", "MiB/s", "ops/s", "min ms", "p50 ms", "max ms"
    );
    println!(
        "{:>8} {:>12.1} {:>10.1} {:>10.2} {:>10.1} {:>10.1} {:>10.1}",
        o.copies,
        o.bytes as f64 / (1u64 << 20) as f64,
        o.mib_per_s(),
        o.ops_per_s(),
        o.latency_ms(0.0),
        o.latency_ms(0.5),
        o.latency_ms(1.0)
    );
    if args.verify {
        println!(
            "verified {} bytes, {} block(s) did not match",
            o.verified_bytes, o.verify_failures
        );
    }
    if o.delays > 0 {
        println!("NFS4ERR_DELAY answers resent: {}", o.delays);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_latencies() {
        let o = Copied {
            copies: 4,
            bytes: 4 << 20,
            latencies: [400, 100, 300, 200].map(Duration::from_millis).to_vec(),
            ..Copied::default()
        };
        assert!((o.seconds() - 1.0).abs() < 1e-9);
        assert!((o.mib_per_s() - 4.0).abs() < 1e-9);
        assert!((o.ops_per_s() - 4.0).abs() < 1e-9);
        assert_eq!((o.latency_ms(0.0), o.latency_ms(1.0)), (100.0, 400.0));
        assert!(o.latency_ms(0.5) == 200.0 || o.latency_ms(0.5) == 300.0);
        let none = Copied::default();
        assert_eq!(
            (none.mib_per_s(), none.ops_per_s(), none.latency_ms(0.5)),
            (0.0, 0.0, 0.0)
        );
    }

    #[test]
    fn copy_flags_are_checked() {
        use clap::Parser;
        let parse = |a: &[&str]| crate::Cli::try_parse_from(a).unwrap().run;
        let ok = parse(&["bench", "--nfs", "4.2", "--workload", "copy"]);
        assert!(check_args(&ok).is_ok());
        let through = parse(&[
            "bench",
            "--nfs",
            "4.1",
            "--workload",
            "copy",
            "--copy-through-client",
        ]);
        assert!(check_args(&through).is_ok());
        for bad in [
            &["bench", "--workload", "copy"][..],
            &["bench", "--nfs", "4.1", "--workload", "copy"],
            &["bench", "--nfs", "4.2", "--workload", "copy", "--pnfs"],
            &["bench", "--nfs", "4.2", "--workload", "copy", "--rate", "5"],
        ] {
            assert!(check_args(&parse(bad)).is_err(), "{bad:?}");
        }
    }
}
