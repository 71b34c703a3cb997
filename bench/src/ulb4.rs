//! The requester side of the NFSv4.x upper-layer binding for RPC-over-RDMA (RFC 8267
//! §6.1–§6.4): the [`CallShape`] of a COMPOUND (program 100003, version 4,
//! procedure 1), found by walking its operations.
//!
//! - DDP-eligible arguments (§6.1, R8267-12): `WRITE4args.data` (op 38) and CREATE
//!   (op 6) NF4LNK `linkdata`; the first of them is reducible into a read chunk (the
//!   requester reduces it only when the call does not fit inline). At most one read
//!   chunk besides a PZRC (R8267-23).
//! - DDP-eligible results: `READ4resok.data` (op 25) and `READLINK4resok.link` (op
//!   27). One write chunk is offered, for the first READ-class op (§6.4.1 pairing: the
//!   first write chunk belongs to the first READ-class op; later ones come inline),
//!   sized by the READ's `count` / [`MAX_PATH`]; [`locate`] finds the item in the reply.
//! - Reply size (§6.2): the sum of the results' bounds when every op's result is
//!   bounded (fixed-size results, READ `count`, READDIR `maxcount`, GETATTR of
//!   fixed-size attributes); otherwise the reply is unpredictable and its bound is the
//!   session's fore-channel `ca_maxresponsesize` (R8267-15), given by the caller
//!   (before any session exists, e.g. EXCHANGE_ID, a default: a Reply chunk is offered
//!   on the very first COMPOUND, as the Linux client does).
//!
//! NULL (procedure 0) has an empty reply. Calls that do not decode are unpredictable
//! and get no chunk but the Reply chunk.

use engine::rpcrdma::requester::{CallShape, ResultAt};
use engine::xdr::{padded, XdrReader, XdrResult};
use std::ops::Range;

/// Operation numbers (RFC 8881 §16.2.1) this module knows the arguments of.
mod op {
    pub use nfs_wire::nfs4::{
        OP_CLOSE as CLOSE, OP_COMMIT as COMMIT, OP_CREATE as CREATE,
        OP_CREATE_SESSION as CREATE_SESSION, OP_DELEGRETURN as DELEGRETURN,
        OP_DESTROY_CLIENTID as DESTROY_CLIENTID, OP_DESTROY_SESSION as DESTROY_SESSION,
        OP_GETATTR as GETATTR, OP_GETFH as GETFH, OP_LOOKUP as LOOKUP, OP_OPEN as OPEN,
        OP_PUTFH as PUTFH, OP_PUTROOTFH as PUTROOTFH, OP_READ as READ, OP_READDIR as READDIR,
        OP_READLINK as READLINK, OP_RECLAIM_COMPLETE as RECLAIM_COMPLETE, OP_REMOVE as REMOVE,
        OP_RESTOREFH as RESTOREFH, OP_SAVEFH as SAVEFH, OP_SEQUENCE as SEQUENCE, OP_WRITE as WRITE,
    };
}

/// RPC reply header (verifier up to the 400 bytes RFC 5531 allows) and the COMPOUND4res
/// status and result count, plus slack.
const REPLY_BASE: usize = 24 + 400 + 8 + 256;
/// Per op result: resop and status.
const RES_HEAD: usize = 8;
/// READLINK write chunk: the longest link text expected.
pub const MAX_PATH: u32 = 4096;
/// Largest READ `count` honoured for the write chunk.
pub const MAX_READ: u32 = 2 << 20;
/// Largest READDIR `maxcount` used for sizing.
pub const MAX_DIR: u32 = 1 << 20;
/// Ops walked at most (bench sends at most 8).
const MAX_OPS: u32 = 64;
const FHSIZE: usize = 128;
const MAX_NAME: usize = 4096;
const MAX_OWNER: usize = 1024;

/// What walking the arguments found.
#[derive(Default)]
struct Walk {
    reduce: Option<Range<usize>>,
    write_chunk: Option<u32>,
    /// Bound of the whole reply, `None` once an op's result is unbounded.
    bound: Option<usize>,
    read_class_seen: bool,
}

impl Walk {
    fn add(&mut self, n: usize) {
        self.bound = self.bound.map(|b| b.saturating_add(RES_HEAD + n));
    }
    fn unbounded(&mut self) {
        self.bound = None;
    }
}

/// The shape of an NFSv4 call (`vers` 4) whose procedure arguments start at
/// `args_at`; `unpredictable` is the bound of a reply that cannot be sized from the
/// call (the session's `ca_maxresponsesize`, R8267-15).
pub fn shape(call: &[u8], proc_: u32, args_at: usize, unpredictable: usize) -> CallShape {
    if proc_ == 0 {
        return CallShape::new(REPLY_BASE);
    }
    let Some(args) = call.get(args_at..) else {
        return CallShape::new(unpredictable);
    };
    let mut w = Walk {
        bound: Some(REPLY_BASE),
        ..Walk::default()
    };
    // Whatever could not be walked leaves the reply unbounded; the chunks found so far
    // stay valid.
    if walk(&mut XdrReader::new(args), args_at, &mut w).is_err() {
        w.unbounded();
    }
    let max_reply = w.bound.unwrap_or(unpredictable).max(REPLY_BASE);
    let mut s = CallShape::new(max_reply);
    if let Some(r) = w.reduce {
        s = s.with_reduce(r);
    }
    if let Some(n) = w.write_chunk {
        // The item, inline and padded, is part of the reply bound (CallShape docs).
        s.max_reply = s.max_reply.max(REPLY_BASE + padded(n as usize));
        s = s.with_write_chunk(n).with_result(ResultAt::Locate(locate));
    }
    s
}

/// COMPOUND4args: tag, minorversion, argarray.
fn walk(r: &mut XdrReader, base: usize, w: &mut Walk) -> XdrResult<()> {
    let tag = r.opaque_var(MAX_NAME)?;
    w.bound = w.bound.map(|b| b + padded(tag.len()));
    r.u32()?; // minorversion
    let n = r.u32()?;
    if n > MAX_OPS {
        return Err(engine::xdr::XdrError::BadValue);
    }
    for _ in 0..n {
        let opnum = r.u32()?;
        if !one_op(opnum, r, base, w)? {
            w.unbounded();
            return Ok(());
        }
    }
    Ok(())
}

fn skip_bitmap(r: &mut XdrReader) -> XdrResult<[u32; 2]> {
    let n = r.u32()?;
    if n > 8 {
        return Err(engine::xdr::XdrError::BadValue);
    }
    let mut words = [0u32; 2];
    for i in 0..n as usize {
        let v = r.u32()?;
        if let Some(x) = words.get_mut(i) {
            *x = v;
        }
    }
    Ok(words)
}

fn skip_fattr(r: &mut XdrReader) -> XdrResult<()> {
    skip_bitmap(r)?;
    r.opaque_var(1 << 16)?;
    Ok(())
}

/// Size of the values of the attributes in `words` when all have a fixed size
/// (RFC 8881 §5.6/5.7): type, change, size, fsid, fileid, mode, numlinks, space_used,
/// the times. `None`: some value has a variable size (owner, ACL, locations...).
fn fixed_attrs_len(words: [u32; 2]) -> Option<usize> {
    let mut n = 0usize;
    for bit in 0..64u32 {
        let set = words[(bit / 32) as usize] & (1 << (bit % 32)) != 0;
        if !set {
            continue;
        }
        n += match bit {
            1 => 4,             // type
            3 | 4 => 8,         // change, size
            8 => 16,            // fsid
            20 => 8,            // fileid
            33 | 35 => 4,       // mode, numlinks
            45 => 8,            // space_used
            47 | 52 | 53 => 12, // time_access, time_metadata, time_modify
            55 => 8,            // mounted_on_fileid
            _ => return None,
        };
    }
    Some(n)
}

/// Marks the data of the opaque whose length word is next as reducible (the first
/// such item only, R8267-23) and skips it.
fn reducible(r: &mut XdrReader, base: usize, w: &mut Walk) -> XdrResult<()> {
    let len = r.u32()? as usize;
    let start = r.position();
    if len > r.remaining() {
        return Err(engine::xdr::XdrError::Short);
    }
    if w.reduce.is_none() {
        w.reduce = Some(base + start..base + start + len);
    }
    r.skip(padded(len).min(r.remaining()))
}

/// A write chunk for the first READ-class op only (§6.4.1); later ones come inline.
fn read_class(w: &mut Walk, item: u32) {
    if !w.read_class_seen {
        w.read_class_seen = true;
        w.write_chunk = Some(item);
    }
}

/// Walks one op's arguments and accounts for its result; `false`: unknown op (its
/// arguments cannot be skipped: stop, the reply is unbounded).
fn one_op(opnum: u32, r: &mut XdrReader, base: usize, w: &mut Walk) -> XdrResult<bool> {
    match opnum {
        op::SEQUENCE => {
            r.skip(16 + 12)?;
            r.bool()?;
            w.add(16 + 20);
        }
        op::PUTFH => {
            r.opaque_var(FHSIZE)?;
            w.add(0);
        }
        op::PUTROOTFH | op::SAVEFH | op::RESTOREFH => w.add(0),
        op::GETFH => w.add(4 + FHSIZE),
        op::LOOKUP => {
            r.opaque_var(MAX_NAME)?;
            w.add(0);
        }
        op::GETATTR => {
            let words = skip_bitmap(r)?;
            match fixed_attrs_len(words) {
                Some(n) => w.add(4 + 8 + 4 + n),
                None => w.unbounded(),
            }
        }
        op::READ => {
            r.skip(16 + 8)?;
            let count = r.u32()?.min(MAX_READ);
            read_class(w, count);
            w.add(8 + padded(count as usize));
        }
        op::READLINK => {
            read_class(w, MAX_PATH);
            w.add(4 + padded(MAX_PATH as usize));
        }
        op::WRITE => {
            r.skip(16 + 8 + 4)?;
            reducible(r, base, w)?;
            w.add(16 + 8);
        }
        op::CREATE => {
            match r.u32()? {
                5 => reducible(r, base, w)?, // NF4LNK linkdata
                3 | 4 => r.skip(8)?,         // NF4BLK / NF4CHR specdata
                _ => {}
            }
            r.opaque_var(MAX_NAME)?;
            skip_fattr(r)?;
            w.add(20 + 4 + 8);
        }
        op::COMMIT => {
            r.skip(12)?;
            w.add(8);
        }
        op::REMOVE => {
            r.opaque_var(MAX_NAME)?;
            w.add(20);
        }
        op::READDIR => {
            r.skip(8 + 8 + 4)?;
            let maxcount = r.u32()?.min(MAX_DIR);
            skip_bitmap(r)?;
            w.add(8 + maxcount as usize);
        }
        op::OPEN => {
            open_args(r)?;
            // stateid, change_info, rflags, attrset, and a delegation with its ACE.
            w.add(16 + 20 + 4 + 12 + 4 + 16 + 4 + 16 + 12 + 4 + MAX_OWNER);
        }
        op::CLOSE => {
            r.skip(4 + 16)?;
            w.add(16);
        }
        op::DELEGRETURN => {
            r.skip(16)?;
            w.add(0);
        }
        op::RECLAIM_COMPLETE => {
            r.bool()?;
            w.add(0);
        }
        op::DESTROY_SESSION => {
            r.skip(16)?;
            w.add(0);
        }
        op::DESTROY_CLIENTID => {
            r.skip(8)?;
            w.add(0);
        }
        op::CREATE_SESSION => {
            r.skip(8 + 4 + 4)?;
            for _ in 0..2 {
                r.skip(24)?;
                if r.u32()? > 1 {
                    return Err(engine::xdr::XdrError::BadValue);
                }
            }
            r.u32()?; // cb_program
            sec_parms(r)?;
            // sessionid, sequence, flags, two channel_attrs4 with one rdma_ird each.
            w.add(16 + 8 + 2 * (24 + 8));
        }
        // EXCHANGE_ID (owner, scope, implementation ids) and anything else.
        _ => return Ok(false),
    }
    Ok(true)
}

/// csa_sec_parms (RFC 8881 §18.36.1): AUTH_NONE, AUTH_SYS or RPCSEC_GSS handles.
fn sec_parms(r: &mut XdrReader) -> XdrResult<()> {
    let n = r.u32()?;
    if n > 16 {
        return Err(engine::xdr::XdrError::BadValue);
    }
    for _ in 0..n {
        match r.u32()? {
            0 => {}
            1 => {
                r.u32()?; // stamp
                r.opaque_var(255)?; // machinename
                r.skip(8)?; // uid, gid
                let g = r.u32()?;
                if g > 16 {
                    return Err(engine::xdr::XdrError::BadValue);
                }
                r.skip(4 * g as usize)?;
            }
            6 => {
                r.u32()?; // service
                r.opaque_var(MAX_OWNER)?;
                r.opaque_var(MAX_OWNER)?;
            }
            _ => return Err(engine::xdr::XdrError::BadValue),
        }
    }
    Ok(())
}

/// OPEN4args (RFC 8881 §18.16.1).
fn open_args(r: &mut XdrReader) -> XdrResult<()> {
    r.skip(4 + 4 + 4 + 8)?; // seqid, share_access, share_deny, owner clientid
    r.opaque_var(MAX_OWNER)?;
    if r.u32()? == 1 {
        // OPEN4_CREATE: createhow4.
        match r.u32()? {
            0 | 1 => skip_fattr(r)?, // UNCHECKED4, GUARDED4
            2 => r.skip(8)?,         // EXCLUSIVE4
            3 => {
                r.skip(8)?; // EXCLUSIVE4_1
                skip_fattr(r)?;
            }
            _ => return Err(engine::xdr::XdrError::BadValue),
        }
    }
    match r.u32()? {
        0 | 3 => {
            r.opaque_var(MAX_NAME)?;
        }
        1 => r.skip(4)?,
        2 => {
            r.skip(16)?;
            r.opaque_var(MAX_NAME)?;
        }
        4 | 6 => {}
        5 => r.skip(16)?,
        _ => return Err(engine::xdr::XdrError::BadValue),
    }
    Ok(())
}

/// [`ResultAt::Locate`] for a COMPOUND: the offset of the length word of the first
/// READ-class result (READ4resok.data or READLINK4resok.link) in the reduced reply;
/// `None` when the COMPOUND stopped before it (an op failed) or a result before it
/// cannot be walked.
pub fn locate(reply: &[u8]) -> Option<usize> {
    let at = crate::ulb::results_at(reply)?;
    let body = reply.get(at..)?;
    let mut r = XdrReader::new(body);
    r.u32().ok()?; // status
    r.opaque_var(MAX_NAME).ok()?; // tag
    let n = r.u32().ok()?;
    for _ in 0..n.min(MAX_OPS) {
        let opnum = r.u32().ok()?;
        if r.u32().ok()? != 0 {
            return None;
        }
        match opnum {
            op::READ => {
                r.bool().ok()?; // eof
                return (r.remaining() >= 4).then(|| at + r.position());
            }
            op::READLINK => return (r.remaining() >= 4).then(|| at + r.position()),
            _ => skip_result(opnum, &mut r).ok()??,
        }
    }
    None
}

/// Skips the OK result of `opnum`; `Ok(None)`: an op whose result is not known.
fn skip_result(opnum: u32, r: &mut XdrReader) -> XdrResult<Option<()>> {
    match opnum {
        op::SEQUENCE => r.skip(16 + 20)?,
        op::PUTFH
        | op::PUTROOTFH
        | op::SAVEFH
        | op::RESTOREFH
        | op::LOOKUP
        | op::DELEGRETURN
        | op::RECLAIM_COMPLETE => {}
        op::GETFH => {
            r.opaque_var(FHSIZE)?;
        }
        op::GETATTR => skip_fattr(r)?,
        op::WRITE => r.skip(16)?,
        op::COMMIT => r.skip(8)?,
        op::CLOSE => r.skip(16)?,
        op::REMOVE => r.skip(20)?,
        op::CREATE => {
            r.skip(20)?;
            skip_bitmap(r)?;
        }
        // OPEN4resok (RFC 8881 §18.16.2): stateid, change_info4, rflags, attrset, the
        // delegation (an OPEN + READ + CLOSE compound reads after it).
        op::OPEN => {
            r.skip(16 + 20 + 4)?;
            skip_bitmap(r)?;
            crate::nfs4::reply::delegation(r)?;
        }
        _ => return Ok(None),
    }
    Ok(Some(()))
}

#[cfg(test)]
#[path = "ulb4_tests.rs"]
mod tests;
