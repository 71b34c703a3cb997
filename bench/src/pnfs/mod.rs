//! `bench --nfs 4.1 --pnfs` (issue 27): the data I/O of the read and write workloads
//! goes straight to the data servers a pNFS metadata server names, as the flexible
//! files layout has a client do (RFC 8435 §2, RFC 8881 §12): every file is OPENed at
//! the metadata server, a layout taken ([`layout::take`]: LAYOUTGET, GETDEVICEINFO),
//! and the load is NFSv3 READ/WRITE (+ COMMIT) at the file's data server with the
//! layout's file handle and synthetic AUTH_SYS ids; then LAYOUTCOMMIT (writes),
//! LAYOUTRETURN, CLOSE.
//!
//! Files are grouped by data server; each group is one load (the ordinary driver, as
//! NFSv3) on its own connections, all groups at once. A striped layout (a mirror of
//! several data servers, RFC 8435 §6: offered to bench, whose EXCHANGE_ID names it)
//! puts its file in the group of each of its data servers, each driving only the
//! stripe units that server holds (`stripe.rs`): a request goes to the data server of
//! its unit, and one that crosses a unit boundary is split, so a split request counts
//! as one op at each server. A file whose layout is refused
//! (LAYOUTUNAVAILABLE, LAYOUTTRYLATER, an unusable layout or device) or whose data
//! server cannot be reached (its layout is returned) goes in a group driven through
//! the metadata server as NFSv4.1, and the report says so. A data server that fails
//! during the load is not replaced: its calls count as errors, the run fails.

mod finish;
pub mod layout;
mod per_server;
pub mod stripe;

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
/// A connection to each data server, by address (or why there is none).
type Conns = BTreeMap<SocketAddr, Result<Conn, String>>;

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
    let mut ds_conns: Conns = BTreeMap::new();
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
            for d in &t.ds {
                anyhow::ensure!(
                    bs <= d.rsize && bs <= d.wsize,
                    "--bs {bs} is larger than data server {}'s rsize/wsize ({}/{})",
                    d.addr,
                    d.rsize,
                    d.wsize
                );
            }
            // A block is at most one stripe unit, so it has at most one piece on
            // each data server (`stripe.rs`).
            anyhow::ensure!(
                t.ds.len() == 1 || u64::from(bs) <= t.stripe_unit,
                "--bs {bs} is larger than the stripe unit ({}) of {}'s striped layout",
                t.stripe_unit,
                mds_set.names[i]
            );
            let name = &mds_set.names[i];
            let done = connect_all(&mut ds_conns, t).and_then(|()| {
                if !fill {
                    return Ok(());
                }
                fill_through(&mut ds_conns, t, &mds_set.pattern(i), file_size, name)?;
                layout::commit(&mut setup.client, &f.fh, t, file_size)
                    .map_err(|e| format!("filling {name}: {e:#}"))
            });
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

    let groups = group(&files, &mds_set, lay.total_conns, bs);
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

    // After the load: COMMIT (and read back) where the data went — at each data server
    // of a striped file, as the layout's ids — then LAYOUTCOMMIT the size the data
    // servers have, once per file, and LAYOUTRETURN every layout.
    let mut sizes: BTreeMap<usize, u64> = BTreeMap::new();
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
                    if files[i].layout.is_none() || plan.track_writes && !l.written.touched(k) {
                        continue;
                    }
                    if let Some(cred) = g.set.creds.get(k) {
                        c.set_cred(*cred);
                    }
                    finish::ds_finish(c, g, k, plan, l, args.qd.max(8));
                    // The size the data server has, for LAYOUTCOMMIT (RFC 8435 §6:
                    // the metadata server learns it from the client).
                    match c.size(&g.set.handles[k]) {
                        Ok(size) => {
                            let s = sizes.entry(i).or_default();
                            *s = (*s).max(size);
                        }
                        Err(e) => bad.push(format!("{}: {e:#}", mds_set.names[i])),
                    }
                }
            }
            None => finish::mds_finish(&mut setup, &opened, g, plan, l, bs),
        }
    }
    for (i, size) in sizes {
        let Some(t) = files[i].layout.as_ref() else {
            continue;
        };
        if let Err(e) = layout::commit(&mut setup.client, &opened[i].fh, t, size) {
            bad.push(format!("{}: {e:#}", mds_set.names[i]));
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

/// A connection to each of the layout's data servers (one per address, shared by
/// every file): the first failure.
fn connect_all(conns: &mut Conns, t: &Taken) -> Result<(), String> {
    for d in &t.ds {
        let c = conns.entry(d.addr).or_insert_with(|| {
            Conn::connect(&Target::Tcp(d.addr.to_string())).map_err(|e| format!("{e:#}"))
        });
        if let Err(e) = c {
            return Err(format!("data server {}: {e}", d.addr));
        }
    }
    Ok(())
}

/// Writes the pattern into the file's first `size` bytes through its layout: each
/// data server its share (all of it, or its stripe units: RFC 8435 §6), as the
/// layout's ids, then COMMIT there.
fn fill_through(
    conns: &mut Conns,
    t: &Taken,
    pat: &crate::pattern::Pattern,
    size: u64,
    name: &str,
) -> Result<(), String> {
    for (j, d) in t.ds.iter().enumerate() {
        let Some(Ok(c)) = conns.get_mut(&d.addr) else {
            return Err(format!("data server {}: not connected", d.addr));
        };
        c.set_cred(sys(d.ids));
        let r = match t.view(j) {
            None => c.write_pattern_in(&d.fh, size, pat, 8, d.wsize),
            Some(v) => c.write_pattern_at(&d.fh, &mut v.pieces(size, d.wsize), pat, 8),
        };
        r.map_err(|e| format!("filling {name} at {}: {e:#}", d.addr))?;
    }
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
/// `conns` connections (at least one each). A striped file (RFC 8435 §6) is in the
/// group of each of its data servers that holds some of its blocks, with that
/// server's share (`FileSet::stripes`): each request goes to the data server of its
/// stripe unit.
fn group(files: &[File], mds: &FileSet, conns: usize, bs: u32) -> Vec<Group> {
    // Per group, each member: (global index, data server j of its layout).
    let mut by: BTreeMap<Via, Vec<(usize, Option<usize>)>> = BTreeMap::new();
    let blocks = mds.blocks(bs);
    for (i, f) in files.iter().enumerate() {
        let Some(t) = &f.layout else {
            by.entry(None).or_default().push((i, None));
            continue;
        };
        for (j, d) in t.ds.iter().enumerate() {
            let has = t
                .view(j)
                .is_none_or(|v| v.next_block(bs, blocks, 0).is_some());
            if has {
                by.entry(Some(d.addr)).or_default().push((i, Some(j)));
            }
        }
    }
    let n = by.len().max(1);
    by.into_iter()
        .enumerate()
        .map(|(k, (via, members))| {
            let ds = |&(i, j): &(usize, Option<usize>)| {
                let t = files[i].layout.as_ref()?;
                Some((t, j?))
            };
            let set = FileSet {
                dir: mds.dir.clone(),
                names: members.iter().map(|&(i, _)| mds.names[i].clone()).collect(),
                handles: members
                    .iter()
                    .map(|m| match ds(m) {
                        Some((t, j)) => t.ds[j].fh.clone(),
                        None => mds.handles[m.0].clone(),
                    })
                    .collect(),
                size: mds.size,
                stateids: match via {
                    Some(_) => Vec::new(),
                    None => members.iter().map(|&(i, _)| mds.stateids[i]).collect(),
                },
                seeds: members.iter().map(|&(i, _)| i as u64).collect(),
                creds: members
                    .iter()
                    .filter_map(|m| ds(m).map(|(t, j)| sys(t.ds[j].ids)))
                    .collect(),
                stripes: members
                    .iter()
                    .map(|m| ds(m).and_then(|(t, j)| t.view(j)))
                    .collect(),
            };
            Group {
                via,
                files: members.iter().map(|&(i, _)| i).collect(),
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
