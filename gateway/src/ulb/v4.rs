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
use crate::nfs4::status::NFS4_OK;
use engine::rpc;
use engine::rpcrdma::responder::{DdpList, Reduced};
use engine::xdr::{padded, XdrError, XdrReader, XdrResult};
use std::cell::Cell;
use std::ops::Range;

pub const NFS_V4: u32 = 4;
pub const COMPOUND: u32 = 1;

const STATEID: usize = 16;
const NF4LNK: u32 = 5;
const NF4BLK: u32 = 3;
const NF4CHR: u32 = 4;
/// Longest bitmap4 the walk accepts (words).
const BITMAP_MAX: usize = 8;

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

    /// An eligible opaque: if the next reduced item starts at its data, its length must
    /// be the declared one, with or without pad (R8166-52); then it is matched.
    fn eligible(&mut self) -> XdrResult<()> {
        let data_at = self.r.position() + 4;
        let declared = self.r.clone().u32()? as usize;
        if let Some(red) = self.reduced.get(self.next) {
            if red.position as usize == data_at {
                let sent = red.len as usize;
                if sent != declared && sent != padded(declared) {
                    return Err(XdrError::Short);
                }
                self.next += 1;
            }
        }
        opaque(&mut self.r)
    }

    /// Skips one operation's arguments (RFC 8881 §18, op numbers §16.2.1).
    fn op(&mut self, op: u32) -> XdrResult<()> {
        let r = &mut self.r;
        match op {
            OP_ACCESS | OP_SECINFO_NO_NAME | OP_RECLAIM_COMPLETE | OP_OPENATTR => r.skip(4),
            OP_CLOSE => r.skip(4 + STATEID),
            OP_COMMIT => r.skip(8 + 4),
            OP_CREATE => {
                match r.u32()? {
                    NF4LNK => self.eligible()?,
                    NF4BLK | NF4CHR => self.r.skip(8)?,
                    // NF4SOCK, NF4FIFO, NF4DIR: void; others are the server's to refuse.
                    _ => {}
                }
                opaque(&mut self.r)?;
                fattr(&mut self.r)
            }
            OP_DELEGPURGE | OP_RENEW | OP_DESTROY_CLIENTID => r.skip(8),
            OP_DELEGRETURN | OP_FREE_STATEID => r.skip(STATEID),
            OP_GETATTR => bitmap(r),
            OP_GETFH | OP_LOOKUPP | OP_PUTPUBFH | OP_PUTROOTFH | OP_READLINK | OP_RESTOREFH
            | OP_SAVEFH => Ok(()),
            OP_LINK | OP_LOOKUP | OP_REMOVE | OP_SECINFO | OP_PUTFH => opaque(r),
            OP_RENAME => {
                opaque(r)?;
                opaque(r)
            }
            OP_LOCK => {
                r.skip(4 + 4 + 8 + 8)?;
                if r.bool()? {
                    r.skip(4 + STATEID + 4 + 8)?;
                    opaque(r)
                } else {
                    r.skip(STATEID + 4)
                }
            }
            OP_LOCKT => {
                r.skip(4 + 8 + 8 + 8)?;
                opaque(r)
            }
            OP_LOCKU => r.skip(4 + 4 + STATEID + 8 + 8),
            OP_NVERIFY | OP_VERIFY => fattr(r),
            OP_OPEN => open(r),
            OP_OPEN_CONFIRM => r.skip(STATEID + 4),
            OP_OPEN_DOWNGRADE => r.skip(STATEID + 4 * 3),
            OP_READ => r.skip(STATEID + 8 + 4),
            OP_READDIR => {
                r.skip(8 + 8 + 4 + 4)?;
                bitmap(r)
            }
            OP_SETATTR => {
                r.skip(STATEID)?;
                fattr(r)
            }
            OP_WRITE => {
                r.skip(STATEID + 8 + 4)?;
                self.eligible()
            }
            OP_RELEASE_LOCKOWNER => {
                r.skip(8)?;
                opaque(r)
            }
            OP_SEQUENCE => r.skip(16 + 4 * 4),
            OP_DESTROY_SESSION => r.skip(16),
            OP_TEST_STATEID => {
                let n = r.u32()? as usize;
                r.skip(n.checked_mul(STATEID).ok_or(XdrError::Short)?)
            }
            // Not walked (session setup, pNFS, v4.0-only SETCLIENTID, unknown): the
            // arguments after them cannot hold an accepted reduced item.
            _ => Err(XdrError::Short),
        }
    }
}

fn opaque(r: &mut XdrReader) -> XdrResult<()> {
    r.opaque_var(usize::MAX).map(|_| ())
}

fn bitmap(r: &mut XdrReader) -> XdrResult<()> {
    let n = r.u32()? as usize;
    if n > BITMAP_MAX {
        return Err(XdrError::TooLong);
    }
    r.skip(n * 4)
}

fn fattr(r: &mut XdrReader) -> XdrResult<()> {
    bitmap(r)?;
    opaque(r)
}

/// OPEN4args (RFC 8881 §18.16.1).
fn open(r: &mut XdrReader) -> XdrResult<()> {
    r.skip(4 * 3 + 8)?;
    opaque(r)?;
    if r.u32()? == 1 {
        // OPEN4_CREATE: createhow4.
        match r.u32()? {
            0 | 1 => fattr(r)?,
            2 => r.skip(8)?,
            3 => {
                r.skip(8)?;
                fattr(r)?
            }
            _ => return Err(XdrError::Short),
        }
    }
    // open_claim4: CLAIM_NULL 0, PREVIOUS 1, DELEGATE_CUR 2, DELEGATE_PREV 3, FH 4,
    // DELEG_CUR_FH 5 (a stateid), DELEG_PREV_FH 6.
    match r.u32()? {
        0 | 3 => opaque(r),
        1 => r.skip(4),
        2 => {
            r.skip(STATEID)?;
            opaque(r)
        }
        4 | 6 => Ok(()),
        5 => r.skip(STATEID),
        _ => Err(XdrError::Short),
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

fn simple_read_class(reply: &[u8]) -> Option<Option<Range<usize>>> {
    let (_, status, at) = rpc::decode_reply(reply).ok()?;
    if status != rpc::ReplyStatus::Accepted(rpc::Accept::Success) {
        return None;
    }
    let mut r = XdrReader::new(reply);
    r.skip(at).ok()?;
    let _status = r.u32().ok()?;
    opaque(&mut r).ok()?; // tag
    if r.u32().ok()? != 3 {
        return None;
    }
    if r.u32().ok()? != OP_SEQUENCE || r.u32().ok()? != NFS4_OK {
        return None;
    }
    r.skip(16 + 20).ok()?;
    if r.u32().ok()? != OP_PUTFH || r.u32().ok()? != NFS4_OK {
        return None;
    }
    let op = r.u32().ok()?;
    if op != OP_READ && op != OP_READLINK {
        return None;
    }
    if r.u32().ok()? != NFS4_OK {
        return Some(None);
    }
    if op == OP_READ {
        r.skip(4).ok()?; // eof
    }
    let len = r.u32().ok()? as usize;
    let start = r.position();
    let end = start.checked_add(len)?;
    (end <= reply.len()).then_some(Some(start..end))
}

#[cfg(test)]
#[path = "v4_tests.rs"]
mod tests;
