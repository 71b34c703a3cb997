//! NFSv3 calls that conflict with NFSv4.1 delegations (RFC 8881 §10.2 "a conflicting
//! access by another client", whichever protocol; docs/architecture.md §8): WRITE and SETATTR of a
//! file, REMOVE of it, RENAME of it or over it, CREATE over an existing name. Before
//! such a call runs, the worker asks `Delegations::break_conflicts` (which starts the
//! recalls); while a recall is outstanding the call is answered NFS3ERR_JUKEBOX and
//! the client retries (RFC 1813 §2.6). Free while no delegation exists: one atomic
//! load, no decoding.

use super::Shared;
use crate::export::admit;
use crate::fs::Node;
use crate::nfs3::proto;
use crate::state::Conflict;
use engine::rpc::Cred;
use engine::xdr::XdrReader;
use std::net::IpAddr;

const SETATTR: u32 = 2;
const WRITE: u32 = 7;
const CREATE: u32 = 8;
const REMOVE: u32 = 12;
const RENAME: u32 = 14;

/// Whether the v3 call `proc_` with `args` must wait for a recall (answer JUKEBOX).
/// Undecodable arguments, unknown handles, and callers the export does not admit
/// for writing never wait (and never recall: the procedure answers them, as knfsd
/// checks access before breaking a lease).
pub(super) fn must_wait(
    shared: &Shared,
    proc_: u32,
    args: &[u8],
    client: IpAddr,
    cred: &Cred,
) -> bool {
    if !matches!(proc_, SETATTR | WRITE | CREATE | REMOVE | RENAME)
        || !shared.state.delegations.any_live()
    {
        return false;
    }
    let mut r = XdrReader::new(args);
    let mut files = [None, None];
    match proc_ {
        SETATTR | WRITE => files[0] = file(shared, &mut r),
        CREATE | REMOVE => files[0] = entry(shared, &mut r),
        _ => {
            files[0] = entry(shared, &mut r);
            files[1] = entry(shared, &mut r);
        }
    }
    let exports = shared.exports.load();
    let may_write = |n: &Node| {
        exports.get(n.export).is_some_and(|e| {
            admit(e, client, cred).is_ok_and(|c| crate::fs::access::check_writable(&c).is_ok())
        })
    };
    let files = files.map(|f| f.filter(may_write));
    let why = if matches!(proc_, SETATTR | WRITE) {
        Conflict::Write
    } else {
        Conflict::Namespace
    };
    let mut wait = false;
    for f in files.into_iter().flatten() {
        // Every conflicting file gets its recall started, so no short-circuit.
        wait |= !shared
            .state
            .delegations
            .break_conflicts(f.fileid, None, why);
    }
    wait
}

fn file(shared: &Shared, r: &mut XdrReader) -> Option<Node> {
    shared.model.resolve(proto::get_fh(r).ok()?).ok()
}

/// diropargs3: the file a directory entry names, if it exists.
fn entry(shared: &Shared, r: &mut XdrReader) -> Option<Node> {
    let dir = proto::get_fh(r).ok();
    let name = r.opaque_var(proto::NAME_MAX).ok()?;
    let dir = shared.model.resolve(dir?).ok()?;
    shared.model.lookup(&dir, name).ok()
}
