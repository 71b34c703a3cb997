//! NFSv4.1 COMPOUND (RFC 8267 §6): the DDP-eligible items of calls and replies.
//!
//! Calls (§6.1, R8267-12/13): only `WRITE4args.data` (op 38) and the NF4LNK
//! `linkdata` of CREATE (op 6) may be reduced. Unlike NFSv3 they need not end the
//! call, so the COMPOUND arguments are walked op by op: each reduced item must start
//! right after the length word of one of those two fields, and the chunk must carry
//! that length (with or without the XDR pad, RFC 8166 §3.4.5.2). A reduced item
//! anywhere else, or one the walk cannot reach (an operation whose arguments it cannot
//! skip, truncated arguments), is GARBAGE_ARGS (RFC 8166 §6.1, RFC 8267 §6.4.2:
//! R8267-26).
//!
//! Replies (§6.4.1, R8267-18..22): the COMPOUND loop notes where each READ-class
//! result's data lies ([`begin`], [`note_result`], [`take`]); the list travels with
//! the reply to the transport, which pairs entry k with write chunk k.

use super::{ReplyItem, Violation};
use crate::nfs4::ops::*;
use crate::nfs4::skip::{self, opaque};
use engine::rpc;
use engine::rpcrdma::responder::{DdpList, Reduced};
use engine::xdr::{padded, XdrError, XdrReader, XdrResult};
use std::cell::Cell;
use std::ops::Range;

/// NFS4_OK as the reply word it is compared with.
const NFS4_OK: u32 = crate::nfs4::status::NFS4_OK.as_u32();

pub use nfs_wire::nfs4::NFSPROC4_COMPOUND as COMPOUND;
pub use nfs_wire::NFS_V4;

/// Checks the reduced items of an NFSv4 COMPOUND call (`rec` from the XID on).
pub fn check_compound(rec: &[u8], reduced: &[Reduced]) -> Result<ReplyItem, Violation> {
    let xid = rec
        .get(..4)
        .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let Ok((_, args_at)) = rpc::decode_call(rec) else {
        return Err(Violation { xid });
    };
    match walk(rec, args_at, reduced) {
        Ok(()) => Ok(ReplyItem::Compound),
        Err(()) => Err(Violation { xid }),
    }
}

/// Walks COMPOUND4args (RFC 8881 §16.2.1) from `at` until every reduced item has been
/// matched with an eligible field.
fn walk(rec: &[u8], at: usize, reduced: &[Reduced]) -> Result<(), ()> {
    let mut w = Walk {
        r: XdrReader::new(rec),
        reduced,
        next: 0,
    };
    w.r.skip(at).map_err(|_| ())?;
    let (_tag, _minor, n) = (opaque(&mut w.r), w.r.u32(), w.r.u32());
    let (Ok(()), Ok(_), Ok(n)) = (_tag, _minor, n) else {
        return Err(());
    };
    // Every operation takes at least its 4-byte number: the count cannot exceed the
    // bytes left, whatever the peer claims.
    let n = (n as usize).min(w.r.remaining() / 4);
    for _ in 0..n {
        if w.done() {
            return Ok(());
        }
        let op = w.r.u32().map_err(|_| ())?;
        w.op(op).map_err(|_| ())?;
        // An item that starts before here was inside a non-eligible field.
        if !w.done() && (w.reduced[w.next].position as usize) < w.r.position() {
            return Err(());
        }
    }
    if w.done() {
        Ok(())
    } else {
        Err(())
    }
}

struct Walk<'a> {
    r: XdrReader<'a>,
    reduced: &'a [Reduced],
    /// The first reduced item not yet matched.
    next: usize,
}

impl Walk<'_> {
    fn done(&self) -> bool {
        self.next >= self.reduced.len()
    }

    /// One operation's arguments (`crate::nfs4::skip`): at an eligible opaque, if the
    /// next reduced item starts at its data, its length must be the declared one, with
    /// or without pad (R8166-52); then it is matched.
    fn op(&mut self, op: u32) -> XdrResult<()> {
        let (reduced, next) = (self.reduced, &mut self.next);
        skip::op_args(op, &mut self.r, &mut |r| {
            let data_at = r.position() + 4;
            let declared = r.clone().u32()? as usize;
            if let Some(red) = reduced.get(*next) {
                if red.position as usize == data_at {
                    let sent = red.len as usize;
                    if sent != declared && sent != padded(declared) {
                        return Err(XdrError::Short);
                    }
                    *next += 1;
                }
            }
            Ok(())
        })
    }
}

thread_local! {
    /// The READ-class results of the COMPOUND running on this worker thread, or
    /// `None` when it did not run its operations (a replay from the slot cache).
    static LOCATED: Cell<Option<DdpList>> = const { Cell::new(None) };
}

/// A COMPOUND starts running its operations: results are noted from here.
pub fn begin() {
    LOCATED.with(|l| l.set(Some(DdpList::new())));
}

/// After operation `op` finished with status `st`, its result written at `body..` of
/// `written` (the status word first): a READ-class result is noted with where its data
/// lies, or without data when it failed (its chunk then comes back empty, R8267-21).
pub fn note_result(op: u32, st: u32, written: &[u8], body: usize) {
    let len_at = match op {
        OP_READ => body + 8,     // status, eof
        OP_READLINK => body + 4, // status
        _ => return,
    };
    let data = (st == NFS4_OK)
        .then(|| {
            let w = written.get(len_at..len_at + 4)?;
            let len = u32::from_be_bytes([w[0], w[1], w[2], w[3]]) as usize;
            let start = len_at + 4;
            let end = start.checked_add(len)?;
            (end <= written.len()).then_some(start..end)
        })
        .flatten();
    LOCATED.with(|l| {
        if let Some(mut list) = l.get() {
            // Past MAX_DDP results the entry is dropped: those go inline.
            list.push(data);
            l.set(Some(list));
        }
    });
}

/// Takes (and clears) the results noted since [`begin`] on this thread.
pub fn take() -> Option<DdpList> {
    LOCATED.with(|l| l.take())
}

/// The READ-class result of a `SEQUENCE, PUTFH, READ|READLINK` reply whose COMPOUND
/// noted nothing: the reactor's v4 fast path, or a replay from the session's reply
/// cache (the shapes the Linux client sends). `reply` from the XID on. A failed READ
/// or READLINK gives an entry without data (its chunk comes back empty, R8267-21).
pub fn fast_read_data(reply: &[u8]) -> DdpList {
    let mut list = DdpList::new();
    if let Some(item) = simple_read_class(reply) {
        list.push(item);
    }
    list
}

/// Reads words at fixed offsets (this runs for every v4 reply over RDMA: no decoder
/// state, every access bounds-checked).
fn simple_read_class(reply: &[u8]) -> Option<Option<Range<usize>>> {
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
