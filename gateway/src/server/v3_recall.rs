//! NFSv3 calls that conflict with NFSv4.1 delegations (RFC 8881 §10.2 "a conflicting
//! access by another client", whichever protocol; docs/architecture.md §8): WRITE and SETATTR of a
//! file, REMOVE of it, RENAME of it or over it, CREATE over an existing name; READ of a
//! file under a write delegation (§10.4.3), and GETATTR of one, which asks the holder
//! (CB_GETATTR) instead of recalling. Before
//! such a call runs, the worker asks `Delegations::break_conflicts` (which starts the
//! recalls); while a recall is outstanding the call is answered NFS3ERR_JUKEBOX and
//! the client retries (RFC 1813 §2.6). The same calls but WRITE recall pNFS layouts
//! (RFC 8881 §12.5.5; `Layouts::break_conflicts`). Free while no delegation or
//! layout exists: two atomic loads, no decoding. The arguments are decoded by the front end (`nfs3::recall`,
//! through `FrontEnd::touches`).

use super::Shared;
use crate::call::{Target, Touch, Touches};
use crate::export::admit;
use crate::fs::Node;
use crate::state::delegations::AttrVerdict;
use crate::state::Conflict;
use engine::rpc::Cred;
use std::net::IpAddr;

/// Whether a call must wait for a recall (answer JUKEBOX): `touches` is its front
/// end's decoding of the files it changes (`FrontEnd::touches`; `None`: none).
/// Undecodable arguments, unknown handles, and callers the export does not admit
/// (for writing, unless the call only reads) never wait (and never recall: the procedure answers them, as knfsd
/// checks access before breaking a lease).
pub(super) fn must_wait<'a>(
    shared: &Shared,
    touches: impl FnOnce() -> Option<Touches<'a>>,
    client: IpAddr,
    cred: &Cred,
) -> bool {
    crate::call::note_holders_size(None);
    let layouts = shared.state.layouts.any();
    if !shared.state.delegations.any_live() && !layouts {
        return false;
    }
    let Some(t) = touches() else {
        return false;
    };
    let why = match t.how {
        // Reads wait only for write delegations (one atomic load while none is out).
        Touch::Read | Touch::Attrs if !shared.state.delegations.any_write() => return false,
        Touch::Read => Conflict::Read,
        Touch::Attrs => return attrs_wait(shared, t, client, cred),
        Touch::Write => Conflict::Write,
        Touch::Namespace => Conflict::Namespace,
    };
    let files = t.targets.map(|t| t.and_then(|t| resolve(shared, t)));
    let exports = shared.exports.load();
    // Readers need the export's admission, writers its write access too.
    let admitted = |n: &Node| {
        exports.get(n.export).is_some_and(|e| {
            admit(e, client, cred).is_ok_and(|c| {
                why == Conflict::Read || crate::fs::access::check_writable(&c).is_ok()
            })
        })
    };
    let files = files.map(|f| f.filter(admitted));
    let mut wait = false;
    for f in files.into_iter().flatten() {
        // Every conflicting file gets its recall started, so no short-circuit.
        wait |= !shared
            .state
            .delegations
            .break_conflicts(f.fileid, None, why);
        if layouts && t.layout {
            wait |= !break_layouts(shared, f.fileid);
        }
    }
    wait
}

/// GETATTR of a file under a write delegation: the holder is asked (CB_GETATTR,
/// RFC 8881 §10.4.3; `Delegations::settle_attrs`, which may wait a little for the
/// answer on this worker). JUKEBOX while it (or a recall it turned into) is
/// awaited; a modified file's size as the holder has it is noted for the procedure.
fn attrs_wait(shared: &Shared, t: Touches, client: IpAddr, cred: &Cred) -> bool {
    let Some(node) = t.targets[0].and_then(|t| resolve(shared, t)) else {
        return false;
    };
    let exports = shared.exports.load();
    let admitted = exports
        .get(node.export)
        .is_some_and(|e| admit(e, client, cred).is_ok());
    if !admitted {
        return false;
    }
    let wait = crate::state::delegations::CB_GETATTR_WAIT;
    match shared
        .state
        .delegations
        .settle_attrs(&shared.model, &node, None, wait)
    {
        AttrVerdict::Go => false,
        AttrVerdict::Wait => true,
        AttrVerdict::Present { size } => {
            crate::call::note_holders_size(Some((node.fileid, size)));
            false
        }
    }
}

/// The pNFS layouts of `fileid` recalled (an NFSv3 caller has no client id: every
/// holder's conflicts; `state/layouts_recall.rs`): whether none is left.
fn break_layouts(shared: &Shared, fileid: u64) -> bool {
    let st = &shared.state;
    let lease = st.delegations.lease();
    st.layouts
        .break_conflicts(fileid, None, lease, &st.delegations.inbox)
}

/// The file a target names, if it exists.
fn resolve(shared: &Shared, t: Target) -> Option<Node> {
    match t {
        Target::File(fh) => shared.model.resolve(fh).ok(),
        Target::Entry(dir, name) => {
            let dir = shared.model.resolve(dir).ok()?;
            shared.model.lookup(&dir, name).ok()
        }
    }
}
