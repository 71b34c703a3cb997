//! NFSv4.1 COMPOUND (RFC 8267 §6): the DDP-eligible items of calls and replies.
//!
//! Calls (§6.1, R8267-12/13): only `WRITE4args.data` (op 38) and the NF4LNK
//! `linkdata` of CREATE (op 6) may be reduced. Unlike NFSv3 they need not end the
//! call, so the COMPOUND's plan (`nfs4::plan`, one walk over its arguments) lists
//! where those fields' data lie: each reduced item must start right after the length
//! word of one of them, and the chunk must carry that length (with or without the XDR
//! pad, RFC 8166 §3.4.5.2). A reduced item anywhere else, or one the walk cannot reach
//! (an operation whose arguments it cannot skip, truncated arguments, more eligible
//! items before it than a plan keeps), is GARBAGE_ARGS (RFC 8166 §6.1, RFC 8267
//! §6.4.2: R8267-26).
//!
//! Replies (§6.4.1, R8267-18..22): the encoders note where each READ-class
//! result's data went (`crate::ddp::note`, the COMPOUND loop from what its READ and
//! READLINK report); the list travels with the reply to the transport, which pairs
//! entry k with write chunk k. Nothing here reads a reply, except the test oracle
//! [`fast_read_data`].
//!
//! This module names no front end: the COMPOUND's walk comes from its caller
//! (`front::V4_PATHS.plan_ddp`, docs/architecture.md §2 "Layering rules").

use super::{ReplyItem, Violation};
use crate::ddp::Eligibles;
use engine::rpc;
use engine::rpcrdma::responder::Reduced;
use engine::xdr::{padded, XdrReader};

pub use nfs_wire::nfs4::NFSPROC4_COMPOUND as COMPOUND;
pub use nfs_wire::NFS_V4;

/// Checks the reduced items of an NFSv4 COMPOUND call (`rec` from the XID on)
/// against the eligible items `walk` finds in its arguments (the front end's one
/// walk, `nfs4::plan::Plan::with_ddp`).
pub fn check_compound<P>(
    rec: &[u8],
    reduced: &[Reduced],
    walk: impl FnOnce(&[u8]) -> (P, Eligibles),
) -> Result<ReplyItem, Violation> {
    check_planned(rec, reduced, walk).map(|(item, _)| item)
}

/// `check_compound`, with what the walk made besides the eligible items (the
/// COMPOUND's plan, opaque here; `None` when there were no reduced items: nothing was
/// walked), so the call is classified without a second walk.
pub fn check_planned<P>(
    rec: &[u8],
    reduced: &[Reduced],
    walk: impl FnOnce(&[u8]) -> (P, Eligibles),
) -> Result<(ReplyItem, Option<P>), Violation> {
    let xid = rec
        .get(..4)
        .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let Ok((_, args_at)) = rpc::decode_call(rec) else {
        return Err(Violation { xid });
    };
    let args = rec.get(args_at..).unwrap_or_default();
    if reduced.is_empty() {
        // Nothing to match: only the COMPOUND header must be there.
        let mut r = XdrReader::new(args);
        return match (r.opaque_var(usize::MAX), r.u32(), r.u32()) {
            (Ok(_), Ok(_), Ok(_)) => Ok((ReplyItem::Compound, None)),
            _ => Err(Violation { xid }),
        };
    }
    let (plan, ddp) = walk(args);
    match matches_ddp(&ddp, args_at, reduced) {
        true => Ok((ReplyItem::Compound, Some(plan))),
        false => Err(Violation { xid }),
    }
}

/// Whether every reduced item (positions from the XID, in order) is the data of an
/// eligible item of a COMPOUND (arguments at `args_at` of the record), each eligible item
/// matched at most once and in COMPOUND order, carrying the declared length with or
/// without its XDR pad (R8166-52). An item anywhere else — inside another field, past
/// where the walk could go, or past the eligible items a plan keeps — breaks the
/// binding.
pub fn matches_ddp(ddp: &Eligibles, args_at: usize, reduced: &[Reduced]) -> bool {
    let mut eligible = ddp.eligible().iter();
    reduced.iter().all(|red| {
        let at = red.position as usize;
        match eligible.find(|e| args_at + e.data_at as usize >= at) {
            Some(e) if args_at + e.data_at as usize == at => {
                let (sent, declared) = (red.len as usize, e.len as usize);
                sent == declared || sent == padded(declared)
            }
            _ => false,
        }
    })
}

/// Test oracle: the READ-class result of a `SEQUENCE, PUTFH, READ|READLINK` reply,
/// found by reading the reply (`reply` from the XID on). The server never does this:
/// every executor passes where its READ data lies with the reply (the worker's
/// COMPOUND loop, a slot-cache replay, the cache's and the io_uring READ's outcome);
/// the tests hold those positions to what this walk finds. A failed READ or READLINK
/// gives an entry without data (its chunk comes back empty, R8267-21).
#[cfg(test)]
pub fn fast_read_data(reply: &[u8]) -> engine::rpcrdma::responder::DdpList {
    let mut list = engine::rpcrdma::responder::DdpList::new();
    if let Some(item) = simple_read_class(reply) {
        list.push(item);
    }
    list
}

/// Reads words at fixed offsets, every access bounds-checked.
#[cfg(test)]
fn simple_read_class(reply: &[u8]) -> Option<Option<std::ops::Range<usize>>> {
    use nfs_wire::nfs4::{OP_PUTFH, OP_READ, OP_READLINK, OP_SEQUENCE};
    // NFS4_OK (RFC 8881 §15.1) as the reply word it is compared with.
    const NFS4_OK: u32 = 0;
    let word = |at: usize| -> Option<u32> {
        let b = reply.get(at..at.checked_add(4)?)?;
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    // RFC 5531 §9: xid, REPLY (1), MSG_ACCEPTED (0), verifier, SUCCESS (0).
    if word(4)? != 1 || word(8)? != 0 {
        return None;
    }
    let verf_len = word(16)? as usize;
    let mut at = 20usize.checked_add(padded(verf_len))?;
    if word(at)? != 0 {
        return None;
    }
    // COMPOUND4res: status, tag, 3 results.
    let tag_len = word(at + 8)? as usize;
    at = (at + 12).checked_add(padded(tag_len))?;
    if word(at)? != 3 || word(at + 4)? != OP_SEQUENCE || word(at + 8)? != NFS4_OK {
        return None;
    }
    at += 12 + 16 + 20; // SEQUENCE4resok
    if word(at)? != OP_PUTFH || word(at + 4)? != NFS4_OK {
        return None;
    }
    let op = word(at + 8)?;
    if op != OP_READ && op != OP_READLINK {
        return None;
    }
    if word(at + 12)? != NFS4_OK {
        return Some(None);
    }
    let len_at = if op == OP_READ { at + 20 } else { at + 16 }; // READ: eof first
    let len = word(len_at)? as usize;
    let start = len_at + 4;
    let end = start.checked_add(len)?;
    (end <= reply.len()).then_some(Some(start..end))
}

#[cfg(test)]
#[path = "v4_tests.rs"]
mod tests;
