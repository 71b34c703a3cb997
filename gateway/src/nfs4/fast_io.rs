//! The protocol half of NFSv4.1 data I/O on the reactor's io_uring
//! (`server::direct` runs the I/O): the COMPOUNDs `SEQUENCE, PUTFH, READ`,
//! `SEQUENCE, PUTFH, WRITE [, GETATTR]` (UNSTABLE) and `SEQUENCE, PUTFH, COMMIT`.
//!
//! `start` makes every check a worker's COMPOUND makes before it touches the file —
//! SEQUENCE's (RFC 8881 §18.46.3), the stateid (§8.2, §18.22.3, §18.32.3, by the same
//! state tables `io_ops` asks), conflicting delegations (§10.2: a WRITE breaks other
//! clients' delegations through `Delegations::break_conflicts`, as `io_ops::write`)
//! and the reply limits — and only when all pass does it renew the lease, write the
//! reply's head and claim the slot (`Session::use_slot`). Any other outcome leaves
//! the slot untouched and the call goes to a worker, which owns every error answer.
//!
//! The claimed slot stays busy while the I/O runs, so a retransmission meanwhile gets
//! NFS4ERR_DELAY from `use_slot` (§2.10.6.2), as one racing a worker's COMPOUND does.
//! `finish` keeps the reply in the slot when it fits ca_maxresponsesize_cached (as
//! `compound::compound` does for every reply); a failed I/O gives the slot back with
//! `SlotClaim::abandon`, so the worker the call then goes to runs it as new.
//!
//! The bytes are the worker's: same encoders (`put_sequence_ok`, `put_fattr`), same
//! field order as `io_ops`.

pub use super::attrs::Bitmap;
use super::attrs::{self, Env, Obj};
use super::fast::FAST_ATTRS;
use super::ops::{OP_COMMIT, OP_GETATTR, OP_PUTFH, OP_READ, OP_SEQUENCE, OP_WRITE};
use super::plan::{Kind, Plan};
use super::session_ops;
use super::status::NFS4_OK;
use crate::fs::Attr;
use crate::state::sessions::{ReqPrint, SlotClaim, SlotUse};
use crate::state::stateid::Stateid;
use crate::state::{Conflict, State};
use engine::xdr::{XdrReader, XdrResult, XdrWriter};
use std::ops::Range;

/// UNSTABLE4 (RFC 8881 §18.32.1).
pub const UNSTABLE4: u32 = 0;
/// FILE_SYNC4, the largest stable_how (DATA_SYNC4 = 1 between).
pub const FILE_SYNC4: u32 = 2;

/// Upper bound of the reply's bytes before the last operation's results: RPC
/// accepted header (24), COMPOUND status, tag (4 + `fast::TAG_MAX`), count,
/// SEQUENCE (4 + 4 + 36), PUTFH (8), the operation and its status (8).
pub const HEAD_MAX: usize = 24 + 4 + 4 + super::fast::TAG_MAX + 4 + 44 + 8 + 8;

/// Upper bound of a trailing GETATTR's result over `FAST_ATTRS`: op, status, the
/// bitmap (4 + 3 words) and the values (fixed-size ones well under 400 bytes, plus
/// owner and group strings and the handle, each bounded).
pub const GETATTR_MAX: usize = 8 + 16 + 400 + 2 * (4 + 64) + 4 + super::FH4_MAX;

/// The data operation of a recognised COMPOUND.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoOp {
    Read {
        stateid: Stateid,
        offset: u64,
        count: u32,
    },
    /// `stable`: the stable_how asked (and answered as `committed`); `data`: where
    /// the bytes are in the COMPOUND4args.
    Write {
        stateid: Stateid,
        offset: u64,
        stable: u32,
        data: (usize, u32),
        getattr: Option<Bitmap>,
    },
    Commit {
        offset: u64,
        count: u32,
    },
}

/// A recognised COMPOUND; ranges are into its COMPOUND4args.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IoCall {
    pub tag: Range<usize>,
    pub sessionid: [u8; 16],
    pub seqid: u32,
    pub slot: u32,
    pub cachethis: bool,
    pub fh: Range<usize>,
    pub op: IoOp,
    pub nops: u32,
    /// The false-retry print (`state::sessions::ReqPrint`).
    pub print: ReqPrint,
    /// The COMPOUND's minor version (1 or 2, `nfs4::fast_minor`).
    pub minor: u32,
}

/// Recognises the shapes in arguments not planned yet (tests, tools): `call` of
/// their plan.
pub fn parse(args: &[u8]) -> Option<IoCall> {
    call(args, &Plan::of(args))
}

/// The call of a COMPOUND whose plan (`plan::Plan`, RFC 8881 §16.2.1) has one of the
/// shapes (minor version 1 or 2, tag up to `fast::TAG_MAX`, nothing after the last
/// operation): its fields, decoded at the offsets the plan keeps. `None` for anything
/// else, including a handle past `FH4_MAX`, an sa_cachethis that is no XDR bool, an
/// unknown stable_how, writes of no bytes or more than `limits::MAX_IO`, and GETATTR
/// bitmaps with a word past the third.
pub fn call(args: &[u8], plan: &Plan) -> Option<IoCall> {
    if !matches!(
        plan.kind,
        Kind::Read | Kind::Write | Kind::WriteGetattr | Kind::Commit
    ) {
        return None;
    }
    let mut r = XdrReader::new(args);
    let at = |r: &XdrReader| args.len() - r.remaining();
    let tag_len = r.u32().ok()? as usize;
    let tag = 4..4 + tag_len;
    r.skip(tag_len.next_multiple_of(4)).ok()?;
    let minor = r.u32().ok()?;
    let mut r = XdrReader::new(args.get(plan.at(0)..)?);
    let mut sessionid = [0u8; 16];
    sessionid.copy_from_slice(r.opaque_fixed(16).ok()?);
    let (seqid, slot, _highest) = (r.u32().ok()?, r.u32().ok()?, r.u32().ok()?);
    let cachethis = r.bool().ok()?;
    let print = ReqPrint::of(args.len(), r.rest());
    let mut r = XdrReader::new(args.get(plan.at(1)..)?);
    let fh_len = r.u32().ok()? as usize;
    if fh_len > super::FH4_MAX {
        return None;
    }
    let fh = at(&r)..at(&r) + fh_len;
    let mut r = XdrReader::new(args.get(plan.at(2)..)?);
    let op = match plan.kind {
        Kind::Read => IoOp::Read {
            stateid: Stateid::decode(&mut r).ok()?,
            offset: r.u64().ok()?,
            count: r.u32().ok()?,
        },
        Kind::Commit => IoOp::Commit {
            offset: r.u64().ok()?,
            count: r.u32().ok()?,
        },
        _ => {
            let stateid = Stateid::decode(&mut r).ok()?;
            let offset = r.u64().ok()?;
            let stable = r.u32().ok()?;
            if stable > FILE_SYNC4 {
                return None;
            }
            let len = r.u32().ok()?;
            if len == 0 || len as usize > crate::limits::MAX_IO {
                return None;
            }
            let data = (at(&r), len);
            let getattr = match plan.kind {
                Kind::WriteGetattr => {
                    let mut r = XdrReader::new(args.get(plan.at(3)..)?);
                    match attrs::get_bitmap(&mut r).ok()? {
                        (b, false) => Some(b),
                        _ => return None,
                    }
                }
                _ => None,
            };
            IoOp::Write {
                stateid,
                offset,
                stable,
                data,
                getattr,
            }
        }
    };
    Some(IoCall {
        tag,
        sessionid,
        seqid,
        slot,
        cachethis,
        fh,
        op,
        nops: plan.nops,
        print,
        minor,
    })
}

/// What `start` checked the call against: the file's attributes as the reactor's
/// file table holds them.
pub struct Target<'a> {
    pub attr: &'a Attr,
    /// The bytes after the data operation's status the reply will carry (at most):
    /// `start` checks the whole reply against the session's limits.
    pub tail_max: usize,
}

/// A started call: its slot (busy until `finish`) and the limit under which its reply
/// is kept for retransmissions. Dropped unfinished (the I/O failed or could not be
/// submitted, the reactor stops) it gives the slot back as it found it
/// (`SlotClaim::abandon`): the call then goes to a worker, which claims it anew — no
/// slot is left busy, none advanced without a reply.
pub struct Started {
    claim: Option<SlotClaim>,
    cache_max: usize,
    /// Where the COMPOUND4res starts in the reply buffer.
    pub res_at: usize,
}

impl Drop for Started {
    fn drop(&mut self) {
        if let Some(c) = self.claim.take() {
            c.abandon();
        }
    }
}

/// The checks, then the reply's COMPOUND4res up to and including the data
/// operation's NFS4_OK, then the slot claim (see the module comment). `w` holds the
/// RPC reply header. `None`: nothing claimed, `w`'s content is to be dropped.
pub fn start(
    state: &State,
    c: &IoCall,
    args: &[u8],
    t: &Target,
    w: &mut XdrWriter,
) -> Option<Started> {
    if c.minor > state.clients.limits.max_minor {
        return None; // not served: the worker answers NFS4ERR_MINOR_VERS_MISMATCH
    }
    let s = state.clients.session(&c.sessionid)?;
    let nslots = s.slots();
    if c.slot >= nslots
        || c.nops > s.fore.max_ops
        || args.len() > s.fore.max_request as usize
        || !s.is_next(c.slot, c.seqid)
    {
        return None;
    }
    let fileid = t.attr.fileid;
    let (stateid, write) = match c.op {
        IoOp::Read { stateid, .. } => (Some(stateid), false),
        IoOp::Write { stateid, .. } => (Some(stateid), true),
        IoOp::Commit { offset, count } => {
            // The worker answers NFS4ERR_INVAL (RFC 8881 §18.3.3).
            offset.checked_add(u64::from(count))?;
            (None, false)
        }
    };
    if let Some(sid) = stateid {
        // The CURRENT stateid is unset after PUTFH: the worker answers BAD_STATEID.
        if sid == Stateid::CURRENT {
            return None;
        }
        let st = state
            .delegations
            .check_io(s.clientid, &sid, fileid, write)
            .unwrap_or_else(|| state.opens.check_io(s.clientid, &sid, fileid, write));
        if st.is_err() {
            return None;
        }
    }
    if let IoOp::Write {
        offset,
        data: (_, len),
        getattr,
        ..
    } = c.op
    {
        // NFS4ERR_FBIG is the worker's.
        if offset
            .checked_add(u64::from(len))
            .is_none_or(|e| e > attrs::MAX_FILE_SIZE)
        {
            return None;
        }
        if let Some(want) = getattr {
            // Only attributes the file table's `Attr` gives, as the read fast path.
            if !want
                .and(&attrs::SUPPORTED_ANY)
                .minus(&FAST_ATTRS)
                .is_empty()
            {
                return None;
            }
            // 4.1's supported_attrs is what the reactor encodes (see `fast::answer`).
            let more = c.minor >= 2 || state.layouts.devices().is_some();
            if more && want.has(attrs::SUPPORTED_ATTRS) {
                return None;
            }
        }
        // RFC 8881 §10.2: another client's delegation must be recalled first (the
        // worker answers NFS4ERR_DELAY and the recall starts); also marks the file
        // as written, so no read delegation is granted right after, as the worker.
        if !state
            .delegations
            .break_conflicts(fileid, Some(s.clientid), Conflict::Write)
        {
            return None;
        }
    }
    let tag = args.get(c.tag.clone())?;
    let res_at = w.position();
    (|| -> XdrResult<()> {
        NFS4_OK.put(w)?;
        w.opaque_var(tag)?;
        w.u32(c.nops)?;
        w.u32(OP_SEQUENCE)
    })()
    .ok()?;
    let len = (w.position() - res_at) + 44 + 8 + 8 + t.tail_max;
    if len > s.fore.max_response as usize
        || (c.cachethis && len > s.fore.max_response_cached as usize)
    {
        // REP_TOO_BIG / REP_TOO_BIG_TO_CACHE are the worker's answers.
        return None;
    }
    // Lease renewal (RFC 8881 §8.3); an expired client goes to the worker, which
    // purges it and answers BADSESSION.
    let flags = state.clients.renew_if_live(&s)?;
    let flags = session_ops::status_flags(state, &s, flags);
    let op = match c.op {
        IoOp::Read { .. } => OP_READ,
        IoOp::Write { .. } => OP_WRITE,
        IoOp::Commit { .. } => OP_COMMIT,
    };
    (|| -> XdrResult<()> {
        session_ops::put_sequence_ok(w, &s, c.seqid, c.slot, nslots, flags)?;
        w.u32(OP_PUTFH)?;
        NFS4_OK.put(w)?;
        w.u32(op)?;
        NFS4_OK.put(w)
    })()
    .ok()?;
    // Claimed last; a worker that took the slot meanwhile wins (the call then goes to
    // a worker, which sees a retransmission or a busy slot).
    let claim = match s.use_slot(c.slot, c.seqid, c.print) {
        Ok(SlotUse::New(claim)) => claim,
        _ => return None,
    };
    Some(Started {
        claim: Some(claim),
        cache_max: s.fore.max_response_cached as usize,
        res_at,
    })
}

/// WRITE4resok after its status (as `io_ops::write`): count, committed, verifier.
/// `committed` is the stable_how asked: the ring syncs exactly that much (a worker
/// answers FILE_SYNC4 for DATA_SYNC4; both keep RFC 8881 §18.32.3's "at least").
pub fn put_write_ok(
    w: &mut XdrWriter,
    count: u32,
    committed: u32,
    verf: &[u8; 8],
) -> XdrResult<()> {
    w.u32(count)?;
    w.u32(committed)?;
    w.opaque_fixed(verf)
}

/// A trailing GETATTR's result from the attributes after the write (as the
/// worker's `GETATTR`, which reads them from the file model).
pub fn put_getattr(w: &mut XdrWriter, want: &Bitmap, attr: &Attr, fh: &[u8]) -> XdrResult<()> {
    w.u32(OP_GETATTR)?;
    NFS4_OK.put(w)?;
    let env = Env {
        lease_s: 0,
        max_file_size: 0,
        fsstat: None,
        v42: None,
        pnfs_blksize: None,
    };
    attrs::put_fattr(w, want, &Obj::from_attr(attr, fh), &env).map(|_| ())
}

/// Ends a call answered here: its COMPOUND4res (`res`) kept in the slot when it fits
/// ca_maxresponsesize_cached (refilling the slot's previous buffer, no allocation),
/// as `compound::compound` keeps every reply that fits, with where a READ's data lie
/// in it (`read`, RFC 8267 §6.4.1: a replay over RDMA places them again); the slot
/// is free again.
pub fn finish(mut started: Started, res: &[u8], read: Option<Range<usize>>) {
    let Some(mut claim) = started.claim.take() else {
        return;
    };
    if res.len() <= started.cache_max {
        if read.is_some() {
            claim.set_data(read.into());
        }
        claim.finish_copy(res);
    } else {
        claim.finish(None);
    }
}
