//! `--pnfs` after a load that wrote: COMMIT where the data went (a data server as
//! NFSv3 with the file's layout ids, or the metadata server as NFSv4.1), and with
//! `--verify` every written block read back from there and checked.

use super::Group;
use crate::client::Conn;
use crate::driver::Plan;
use crate::load::Load;
use crate::nfs4::session::Opened;
use crate::nfs4::setup::Setup4;
use crate::workload::Kind;

/// File `k` of a data server's group after a load that wrote: COMMIT there (a failure
/// counts as a write error), and with `--verify` the read-back of what was written.
pub fn ds_finish(c: &mut Conn, g: &Group, k: usize, plan: &Plan, l: &mut Load, depth: usize) {
    let name = &g.set.names[k];
    if let Err(e) = c.commit(&g.set.handles[k]) {
        eprintln!("bench: COMMIT of {name}: {e:#}");
        l.stats.kind(Kind::Write).errors += 1;
    }
    if !plan.track_writes {
        return;
    }
    let size = g.set.size;
    // Each written block's piece on this data server (all of it unless striped).
    let mut blocks = l
        .written
        .blocks_of(k)
        .filter_map(|b| g.set.piece(k, plan.bs, b))
        .map(|(off, len)| {
            (
                off,
                u64::from(len).min(size.saturating_sub(off)).max(1) as u32,
            )
        });
    let r = c.read_back(
        &g.set.handles[k],
        &mut blocks,
        &g.set.pattern(k),
        depth,
        name,
    );
    let w = l.stats.kind(Kind::Write);
    match r {
        Ok((good, bad)) => {
            w.verified_bytes += good;
            w.verify_failures += bad;
        }
        Err(e) => {
            eprintln!("bench: reading {name} back: {e:#}");
            w.verify_failures += 1;
        }
    }
}

/// The metadata server's group after a load that wrote: COMMIT, and with `--verify`
/// the read-back, as NFSv4.1 on the setup session.
pub fn mds_finish(
    setup: &mut Setup4,
    opened: &[Opened],
    g: &Group,
    plan: &Plan,
    l: &mut Load,
    bs: u32,
) {
    let bs = u64::from(bs);
    for (k, &i) in g.files.iter().enumerate() {
        if plan.track_writes && !l.written.touched(k) {
            continue;
        }
        if let Err(e) = setup.client.commit(&opened[i].fh) {
            eprintln!("bench: COMMIT of {}: {e:#}", g.set.names[k]);
            l.stats.kind(Kind::Write).errors += 1;
        }
        if !plan.track_writes {
            continue;
        }
        let blocks: Vec<(u64, u32)> = l
            .written
            .blocks_of(k)
            .map(|b| {
                (
                    b * bs,
                    bs.min(g.set.size.saturating_sub(b * bs)).max(1) as u32,
                )
            })
            .collect();
        let w = l.stats.kind(Kind::Write);
        match setup
            .client
            .read_back(&opened[i], &blocks, &g.set.pattern(k), &g.set.names[k])
        {
            Ok((good, bad)) => {
                w.verified_bytes += good;
                w.verify_failures += bad;
            }
            Err(e) => {
                eprintln!("bench: reading {} back: {e:#}", g.set.names[k]);
                w.verify_failures += 1;
            }
        }
    }
}
