//! `bench --nfs 4.1 --pnfs` (issue 27): the data I/O of the read and write workloads
//! goes straight to the data servers a pNFS metadata server names, as the flexible
//! files layout has a client do (RFC 8435 §2, RFC 8881 §12): every file is OPENed at
//! the metadata server, a layout taken ([`layout::take`]: LAYOUTGET, GETDEVICEINFO),
//! and the load is NFSv3 READ/WRITE (+ COMMIT) at the file's data server with the
//! layout's file handle and synthetic AUTH_SYS ids; then LAYOUTCOMMIT (writes),
//! LAYOUTRETURN, CLOSE.
//!
//! Files are grouped by data server; each group is one load (the ordinary driver, as
//! NFSv3) on its own connections, all groups at once. A file whose layout is refused
//! (LAYOUTUNAVAILABLE, LAYOUTTRYLATER, an unusable layout or device) or whose data
//! server cannot be reached (its layout is returned) goes in a group driven through
//! the metadata server as NFSv4.1, and the report says so. A data server that fails
//! during the load is not replaced: its calls count as errors, the run fails.

mod finish;
pub mod layout;
mod per_server;

use crate::client::Conn;
use crate::driver::{Plan, ThreadSpec, V4Plan};
use crate::fileset::FileSet;
use crate::load::{self, Load, Seconds, Timing};
use crate::nfs4::setup::Setup4;
use crate::report::{self, Settings};
use crate::run::{budgets, Layout};
use crate::stats::Stats;
use crate::transport::Target;
use crate::workload::{Mix, Op};
use crate::RunArgs;
use engine::rpc::{AuthSys, Cred};
use layout::Taken;
use nfs_wire::nfs4args::{LAYOUTIOMODE4_READ, LAYOUTIOMODE4_RW};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

/// Where a group's I/O goes: a data server (`Some`) or the metadata server.
type Via = Option<SocketAddr>;

/// A group of files and its result.
struct Group {
    via: Via,
    /// Global file indices.
    files: Vec<usize>,
    set: FileSet,
    conns: usize,
}

/// What the run knows of each file.
struct File {
    layout: Option<Taken>,
    /// Why its I/O goes through the metadata server.
    fallback: Option<String>,
}

/// The pNFS run (in place of `run::run`'s setup and load).
#[allow(clippy::too_many_arguments)]
pub fn run(
    args: &RunArgs,
    target: &Target,
    mix: &Mix,
    workload_name: &str,
    lay: &Layout,
    usable: &[core_affinity::CoreId],
    file_size: u64,
    bs: u32,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.nfs.is_v4() && matches!(target, Target::Tcp(_)),
        "--pnfs needs --nfs 4.1 (or 4.2) and a tcp:// metadata server"
    );
    anyhow::ensure!(
        !mix.any(|o| !(o.reads() || o.writes())),
        "--pnfs drives data workloads only (randread, seqread, randwrite, seqwrite)"
    );
    anyhow::ensure!(
        args.hdr_log.is_none() && args.plot.is_none(),
        "--pnfs does not write --hdr-log or --plot (one load per data server)"
    );
    let (reads, writes) = (mix.any(Op::reads), mix.any(Op::writes));
    let retry = crate::jukebox::Policy::new(Duration::from_secs_f64(args.jukebox_timeout));
    // The files are filled (below) through their data servers, not here.
    let (mut setup, mds_set) = Setup4::prepare(
        target,
        args.export.as_deref(),
        &args.file,
        args.files,
        file_size,
        false,
        true,
        lay.total_conns,
        args.qd,
        retry,
    )?;
    let mut files = Vec::with_capacity(args.files);
    let opened = setup.opened.clone();
    let mut ds_conns: BTreeMap<SocketAddr, Result<Conn, String>> = BTreeMap::new();
    for (i, f) in opened.iter().enumerate() {
        let fill = reads && f.size < file_size;
        let iomode = if writes || fill {
            LAYOUTIOMODE4_RW
        } else {
            LAYOUTIOMODE4_READ
        };
        let mut file = match layout::take(&mut setup.client, f, iomode)? {
            Ok(t) => File {
                layout: Some(t),
                fallback: None,
            },
            Err(why) => File {
                layout: None,
                fallback: Some(why.to_string()),
            },
        };
        if let Some(t) = &file.layout {
            anyhow::ensure!(
                bs <= t.rsize && bs <= t.wsize,
                "--bs {bs} is larger than data server {}'s rsize/wsize ({}/{})",
                t.addr,
                t.rsize,
                t.wsize
            );
            let conn = ds_conns.entry(t.addr).or_insert_with(|| {
                Conn::connect(&Target::Tcp(t.addr.to_string())).map_err(|e| format!("{e:#}"))
            });
            let done = match conn {
                Err(e) => Err(format!("data server {}: {e}", t.addr)),
                Ok(c) if fill => {
                    c.set_cred(sys(t.ids));
                    let pat = mds_set.pattern(i);
                    c.write_pattern_in(&t.fh, file_size, &pat, 8, t.wsize)
                        .and_then(|()| layout::commit(&mut setup.client, &f.fh, t, file_size))
                        .map_err(|e| format!("filling {} at {}: {e:#}", mds_set.names[i], t.addr))
                }
                Ok(_) => Ok(()),
            };
            if let Err(why) = done {
                if let Some(e) = layout::give_back(&mut setup.client, &f.fh, t.iomode, t.stateid) {
                    eprintln!("bench: {e}");
                }
                file = File {
                    layout: None,
                    fallback: Some(why),
                };
            }
        }
        if let Some(why) = &file.fallback {
            eprintln!(
                "bench: pnfs: {} through the metadata server ({why})",
                mds_set.names[i]
            );
            if fill {
                setup
                    .client
                    .write_pattern(f, file_size, &mds_set.pattern(i))?;
            }
        }
        files.push(file);
    }

    let groups = group(&files, &mds_set, lay.total_conns);
    let total_conns: usize = groups.iter().map(|g| g.conns).sum();
    let timing = Timing {
        warmup: Duration::from_secs_f64(args.warmup),
        duration: args
            .ops
            .is_none()
            .then(|| Duration::from_secs_f64(args.duration)),
    };
    let quiet = Seconds {
        live_line: false,
        hdr_log: None,
    };
    let (clientid, owner) = (setup.client.clientid, setup.client.owner.clone());
    let sessions = setup.conns.clone();
    let ds_targets: Vec<Target> = groups
        .iter()
        .map(|g| {
            g.via
                .map_or_else(|| target.clone(), |a| Target::Tcp(a.to_string()))
        })
        .collect();
    let plans: Vec<Plan> = groups
        .iter()
        .zip(&ds_targets)
        .map(|(g, t)| Plan {
            target: t,
            mix,
            files: &g.set,
            bs,
            qd: if g.via.is_some() {
                args.qd
            } else {
                setup.slots as usize
            },
            verify: args.verify,
            write_pattern: true,
            track_writes: args.verify && writes,
            rate_per_conn: args.rate.map(|r| r / total_conns as f64),
            pid: std::process::id(),
            conns: g.conns,
            v4: g.via.is_none().then(|| V4Plan {
                conns: &sessions,
                clientid,
                owner: &owner,
            }),
            retry,
        })
        .collect();
    let specs = specs(&groups, lay, usable, args.ops, total_conns);
    let loads: Vec<anyhow::Result<Load>> = std::thread::scope(|s| {
        let hs: Vec<_> = plans
            .iter()
            .zip(&specs)
            .map(|(p, sp)| s.spawn(|| load::run(p, sp, &timing, &quiet)))
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a load panicked")))
            })
            .collect()
    });
    let mut bad = Vec::new();
    let mut loads: Vec<Option<Load>> = groups
        .iter()
        .zip(loads)
        .map(|(g, l)| {
            l.map_err(|e| bad.push(format!("{}: {e:#}", name(g.via))))
                .ok()
        })
        .collect();

    // After the load: COMMIT (and read back) where the data went, LAYOUTCOMMIT the
    // size the data server has, LAYOUTRETURN every layout.
    for ((g, plan), l) in groups.iter().zip(&plans).zip(loads.iter_mut()) {
        let Some(l) = l.as_mut() else { continue };
        if !writes {
            continue;
        }
        match g.via {
            Some(addr) => {
                let Some(Ok(c)) = ds_conns.get_mut(&addr) else {
                    bad.push(format!("data server {addr}: no connection to commit"));
                    continue;
                };
                for (k, &i) in g.files.iter().enumerate() {
                    let Some(t) = files[i].layout.as_ref() else {
                        continue;
                    };
                    if plan.track_writes && !l.written.touched(k) {
                        continue;
                    }
                    c.set_cred(sys(t.ids));
                    finish::ds_finish(c, g, k, plan, l, args.qd.max(8));
                    // LAYOUTCOMMIT of the size the data server has (RFC 8435 §6: the
                    // metadata server learns it from the client).
                    let r = c
                        .size(&g.set.handles[k])
                        .and_then(|size| layout::commit(&mut setup.client, &opened[i].fh, t, size));
                    if let Err(e) = r {
                        bad.push(format!("{}: {e:#}", mds_set.names[i]));
                    }
                }
            }
            None => finish::mds_finish(&mut setup, &opened, g, plan, l, bs),
        }
    }
    for (i, f) in files.iter().enumerate() {
        if let Some(t) = &f.layout {
            if let Some(e) =
                layout::give_back(&mut setup.client, &opened[i].fh, t.iomode, t.stateid)
            {
                bad.push(format!("{}: {e}", mds_set.names[i]));
            }
        }
    }
    let mut merged = Stats::default();
    let mut measured: f64 = 0.0;
    for l in loads.iter().flatten() {
        merged.merge(&l.stats);
        measured = measured.max(l.measured_s);
    }
    if let Err(e) = setup.teardown() {
        bad.push(format!("{e:#}"));
    }
    let threads: usize = specs.iter().map(Vec::len).sum();
    let settings = Settings {
        target: &args.target,
        provider: None,
        workload: workload_name,
        mix,
        bs,
        files: args.files,
        file_size,
        threads,
        conns: total_conns,
        conns_per_thread: total_conns.div_ceil(threads.max(1)),
        qd: args.qd,
        rate: args.rate,
        warmup_s: args.warmup,
        duration_s: measured,
        rdma: None,
    };
    let fallbacks: Vec<String> = files
        .iter()
        .enumerate()
        .filter_map(|(i, f)| Some(format!("{}: {}", mds_set.names[i], f.fallback.as_ref()?)))
        .collect();
    if args.json {
        let j = report::json(&settings, &merged);
        let body = j.strip_suffix('}').unwrap_or(&j);
        println!(
            "{body},\"pnfs\":{}}}",
            per_server::pnfs_json(&groups, &loads, &fallbacks, measured)
        );
    } else {
        print!("{}", report::table(&settings, &merged));
        print!(
            "{}",
            per_server::pnfs_table(&groups, &loads, &fallbacks, measured)
        );
    }
    let total = merged.total();
    if total.verify_failures > 0 {
        bad.push(format!(
            "verification FAILED: {} read(s) did not return the expected data or could not be checked",
            total.verify_failures
        ));
    }
    if total.errors > 0 {
        bad.push(format!("{} calls failed", total.errors));
    }
    if total.ops == 0 {
        bad.push("no op completed".into());
    }
    anyhow::ensure!(bad.is_empty(), "{}", bad.join("; "));
    Ok(())
}

fn sys((uid, gid): (u32, u32)) -> Cred {
    Cred::Sys(AuthSys::new(uid, gid, &[]))
}

fn name(via: Via) -> String {
    via.map_or_else(|| "metadata server".into(), |a| format!("data server {a}"))
}

/// Files grouped by where their I/O goes, each group a part of the set (its data
/// server's handles; the pattern of each file's global index) with its share of the
/// `conns` connections (at least one each).
fn group(files: &[File], mds: &FileSet, conns: usize) -> Vec<Group> {
    let mut by: BTreeMap<Via, Vec<usize>> = BTreeMap::new();
    for (i, f) in files.iter().enumerate() {
        by.entry(f.layout.as_ref().map(|t| t.addr))
            .or_default()
            .push(i);
    }
    let n = by.len().max(1);
    by.into_iter()
        .enumerate()
        .map(|(k, (via, idx))| {
            let set = FileSet {
                dir: mds.dir.clone(),
                names: idx.iter().map(|&i| mds.names[i].clone()).collect(),
                handles: idx
                    .iter()
                    .map(|&i| match &files[i].layout {
                        Some(t) => t.fh.clone(),
                        None => mds.handles[i].clone(),
                    })
                    .collect(),
                size: mds.size,
                stateids: match via {
                    Some(_) => Vec::new(),
                    None => idx.iter().map(|&i| mds.stateids[i]).collect(),
                },
                seeds: idx.iter().map(|&i| i as u64).collect(),
                creds: idx
                    .iter()
                    .filter_map(|&i| files[i].layout.as_ref().map(|t| sys(t.ids)))
                    .collect(),
            };
            Group {
                via,
                files: idx,
                set,
                conns: (conns / n + usize::from(k < conns % n)).max(1),
            }
        })
        .collect()
}

/// Each group's threads (`--threads` shared between the groups, at least one each,
/// on the usable cores after the previous groups') and connections (local indices,
/// `--ops` split over all).
fn specs(
    groups: &[Group],
    lay: &Layout,
    usable: &[core_affinity::CoreId],
    ops: Option<u64>,
    total: usize,
) -> Vec<Vec<ThreadSpec>> {
    let budgets = budgets(ops, total);
    let (mut conn0, mut core0) = (0, 0);
    let n = groups.len().max(1);
    groups
        .iter()
        .enumerate()
        .map(|(k, g)| {
            let share = lay.threads / n + usize::from(k < lay.threads % n);
            let threads = share.min(g.conns).max(1);
            let v = (0..threads)
                .map(|t| ThreadSpec {
                    thread: t,
                    core: (!usable.is_empty()).then(|| usable[(core0 + t) % usable.len()]),
                    conns: (t..g.conns)
                        .step_by(threads)
                        .map(|c| (c, budgets[conn0 + c]))
                        .collect(),
                })
                .collect();
            conn0 += g.conns;
            core0 += threads;
            v
        })
        .collect()
}

#[cfg(test)]
mod tests;
