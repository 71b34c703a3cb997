//! The COMPOUND procedure (RFC 8881 §16.2, §2.10.6): header, minor version, the
//! first-operation rules of sessions, the operation loop with the session's limits,
//! and the exactly-once reply cache around it.

use super::ops::*;
use super::session_ops::{self, SeqStart};
use super::status::*;
use super::{put_status, Compound, Full, OpResult};
use crate::call::{Ctx, Outcome};
use crate::state::stateid::Stateid;
use engine::xdr::{XdrReader, XdrWriter};

/// Longest COMPOUND tag (NFS4_OPAQUE_LIMIT).
pub const TAG_MAX: usize = 1024;

/// Operations that may start a COMPOUND without SEQUENCE and must then be its only
/// operation (RFC 8881 §2.10.6.4, §18.35.3, §18.36.3, §18.37.3, §18.34.3, §18.50.3).
fn solo_op(op: u32) -> bool {
    matches!(
        op,
        OP_EXCHANGE_ID
            | OP_CREATE_SESSION
            | OP_DESTROY_SESSION
            | OP_BIND_CONN_TO_SESSION
            | OP_DESTROY_CLIENTID
    )
}

/// Limits the session sets on the rest of a COMPOUND.
#[derive(Debug, Clone, Copy)]
pub(super) struct ReplyLimits {
    /// ca_maxresponsesize: larger → NFS4ERR_REP_TOO_BIG.
    pub max: usize,
    /// With sa_cachethis: ca_maxresponsesize_cached (→ NFS4ERR_REP_TOO_BIG_TO_CACHE).
    pub cached: Option<usize>,
}

impl<'a> Compound<'a> {
    /// A COMPOUND context with no filehandles, stateids or session yet.
    pub fn new(ctx: &'a Ctx<'a>, state: &'a crate::state::State, minor: u32, nops: usize) -> Self {
        Compound {
            ctx,
            state,
            minor,
            cfh: None,
            sfh: None,
            current_stateid: None,
            saved_stateid: None,
            session: None,
            clientid: 0,
            op_index: 0,
            nops,
            data: None,
            fresh: None,
        }
    }

    /// Replaces the special CURRENT stateid (seqid 1, other zero) by the stateid the
    /// previous operation left (RFC 8881 §16.2.3.1.2); other stateids pass unchanged.
    /// No current stateid → NFS4ERR_BAD_STATEID.
    pub fn resolve_stateid(&self, sid: &Stateid) -> Result<Stateid, Nfsstat4> {
        if *sid == Stateid::CURRENT {
            self.current_stateid.ok_or(NFS4ERR_BAD_STATEID)
        } else {
            Ok(*sid)
        }
    }

    /// Whether this is the last operation of the COMPOUND.
    pub fn is_last_op(&self) -> bool {
        self.op_index + 1 >= self.nops
    }
}

/// COMPOUND4args → COMPOUND4res (RFC 8881 §16.2.3).
pub(super) fn compound(
    ctx: &Ctx,
    state: &crate::state::State,
    args: &[u8],
    out: &mut XdrWriter,
) -> Outcome {
    let mut r = XdrReader::new(args);
    let (Ok(tag), Ok(minor), Ok(n)) = (r.opaque_var(TAG_MAX), r.u32(), r.u32()) else {
        return Outcome::GarbageArgs;
    };
    let start = out.position();
    let Ok(header) = put_header(out, tag) else {
        return Outcome::GarbageArgs;
    };
    if !super::serves_minor(minor, state.clients.limits.max_minor) {
        // RFC 8881 §16.2.3: a minor version we do not serve gets the error and an
        // empty result array.
        finish(out, header, noted(0, NFS4ERR_MINOR_VERS_MISMATCH), 0);
        return Outcome::Done;
    }
    if n == 0 {
        finish(out, header, NFS4_OK, 0);
        return Outcome::Done;
    }
    // `[ha]`, fence shut: the COMPOUND waits for it to open (a takeover in sight)
    // rather than NFS4ERR_DELAY, after which clients back off for seconds
    // (`state::park`, docs/ha.md "What a gateway that does not serve answers").
    if !state.clients.serving()
        && state.clients.park_until_serving(ctx.client) == crate::state::park::Parked::Delay
    {
        let done = session_ops::fenced(&mut r, out);
        finish(out, header, noted(0, NFS4ERR_DELAY), done);
        return Outcome::Done;
    }
    // Admitted under the identity: the store changes this COMPOUND makes are gated
    // by the same deadline until they are sent (`backend::gate`).
    let _admitted = crate::backend::gate::Admitted::enter();
    let mut c = Compound::new(ctx, state, minor, n as usize);
    let first = XdrReader::new(r.rest()).u32().unwrap_or(u32::MAX);
    if first == OP_SEQUENCE {
        let _ = r.u32();
        match session_ops::sequence_first(&mut c, &mut r, out, n, args.len()) {
            SeqStart::Replay(cached) => {
                out.rewind(start);
                if out.opaque_fixed(&cached.bytes).is_ok() {
                    // Where its READ data lie, as the first reply noted them.
                    crate::ddp::replayed(cached.data, start);
                } else {
                    // The retransmission's reply buffer is smaller than the original's.
                    out.rewind(start);
                    let Ok(h) = put_header(out, tag) else {
                        return Outcome::GarbageArgs;
                    };
                    let _ = out.u32(OP_SEQUENCE);
                    let _ = NFS4ERR_REP_TOO_BIG.put(out);
                    finish(out, h, noted(OP_SEQUENCE, NFS4ERR_REP_TOO_BIG), 1);
                }
                return Outcome::Done;
            }
            SeqStart::Failed(st) => {
                finish(out, header, noted(OP_SEQUENCE, st), 1);
                return Outcome::Done;
            }
            SeqStart::Run {
                mut claim,
                limits,
                cache_max,
            } => {
                crate::ddp::begin();
                let (status, done) = run_ops(&mut c, &mut r, out, 1, n, start, limits);
                finish(out, header, status, done);
                let len = out.position() - start;
                // Every reply that fits the slot's cache is kept (not only those with
                // sa_cachethis): a retransmission then gets the same bytes.
                let reply = (len <= cache_max).then(|| out.written()[start..].to_vec());
                claim.set_data(crate::ddp::noted_from(start));
                claim.finish(reply);
                return Outcome::Done;
            }
        }
    }
    if first != u32::MAX && super::op_fn_in(first, minor).is_some() && !solo_op(first) {
        // RFC 8881 §2.10.6.4: outside a session only the solo operations may come first.
        let _ = r.u32();
        let _ = out.u32(first);
        let _ = NFS4ERR_OP_NOT_IN_SESSION.put(out);
        finish(out, header, noted(first, NFS4ERR_OP_NOT_IN_SESSION), 1);
        return Outcome::Done;
    }
    if solo_op(first) && n > 1 {
        let _ = r.u32();
        let _ = out.u32(first);
        let _ = NFS4ERR_NOT_ONLY_OP.put(out);
        finish(out, header, noted(first, NFS4ERR_NOT_ONLY_OP), 1);
        return Outcome::Done;
    }
    let limits = ReplyLimits {
        max: usize::MAX,
        cached: None,
    };
    crate::ddp::begin();
    let (status, done) = run_ops(&mut c, &mut r, out, 0, n, start, limits);
    finish(out, header, status, done);
    Outcome::Done
}

impl ReplyLimits {
    fn cached_cap(&self) -> usize {
        self.cached.unwrap_or(usize::MAX)
    }
}

/// Positions of the COMPOUND4res status and result count.
struct Header {
    status_at: usize,
    count_at: usize,
}

fn put_header(out: &mut XdrWriter, tag: &[u8]) -> Result<Header, Full> {
    let status_at = out.reserve_u32().map_err(|_| Full)?;
    out.opaque_var(tag).map_err(|_| Full)?;
    let count_at = out.reserve_u32().map_err(|_| Full)?;
    Ok(Header {
        status_at,
        count_at,
    })
}

fn finish(out: &mut XdrWriter, h: Header, status: Nfsstat4, done: u32) {
    status.patch(out, h.status_at);
    out.patch_u32(h.count_at, done);
}

/// Runs operations `from..n`; stops at the first failure (RFC 8881 §16.2.3). Returns
/// the COMPOUND status and the number of results written.
fn run_ops(
    c: &mut Compound,
    r: &mut XdrReader,
    out: &mut XdrWriter,
    from: u32,
    n: u32,
    start: usize,
    limits: ReplyLimits,
) -> (Nfsstat4, u32) {
    let mut done = from;
    for i in from..n {
        c.op_index = i as usize;
        let Ok(op) = r.u32() else {
            // Fewer operations than announced: the array is malformed. The COMPOUND's
            // status is its last result's (RFC 8881 §15.2, §16.2.3), and the ops before
            // have run and succeeded, so the missing one gets a result of its own:
            // OP_ILLEGAL (no legal opnum was sent) with NFS4ERR_BADXDR.
            super::fast::forget();
            let at = out.position();
            let st = noted(OP_ILLEGAL, NFS4ERR_BADXDR);
            if out.u32(OP_ILLEGAL).is_ok() && NFS4ERR_BADXDR.put(out).is_ok() {
                return (st, done + 1);
            }
            out.rewind(at);
            return (st, done);
        };
        let f = super::op_fn_in(op, c.minor);
        let at = out.position();
        let op_out = if f.is_some() { op } else { OP_ILLEGAL };
        if out.u32(op_out).is_err() {
            super::fast::forget();
            return (noted(op_out, NFS4ERR_REP_TOO_BIG), done);
        }
        done += 1;
        let body = out.position();
        c.data = None;
        let st: OpResult = match f {
            Some(f) => f(c, r, out),
            None => put_status(out, NFS4ERR_OP_ILLEGAL),
        };
        let size = out.position() - start;
        let over = if size > limits.max {
            Some(NFS4ERR_REP_TOO_BIG)
        } else if size > limits.cached_cap() {
            Some(NFS4ERR_REP_TOO_BIG_TO_CACHE)
        } else {
            None
        };
        let st = match (st, over) {
            (Ok(s), None) => s,
            (Ok(_), Some(e)) | (Err(Full), Some(e)) => replace(out, body, e),
            (Err(Full), None) => replace(out, body, NFS4ERR_REP_TOO_BIG),
        };
        // An op that succeeded but leaves no room for the next op's number and status
        // fails itself with NFS4ERR_REP_TOO_BIG: the COMPOUND's status must be its last
        // result's (RFC 8881 §15.2), which the next op could not write.
        let st = if st == NFS4_OK && i + 1 < n && out.remaining() < 8 {
            replace(out, body, NFS4ERR_REP_TOO_BIG)
        } else {
            st
        };
        if out.position() == at {
            // Not even the operation number fits.
            super::fast::forget();
            return (noted(op_out, NFS4ERR_REP_TOO_BIG), done - 1);
        }
        // Where the operation's encoder put its data; a result replaced above (or
        // failed) carries none.
        let data = c.data.take().filter(|_| st == NFS4_OK);
        if matches!(op_out, OP_READ | OP_READLINK) {
            // RFC 8267 §6.4.1: entry k of the write list is the k-th READ-class
            // result, one without data included (its chunk comes back empty).
            crate::ddp::note(data.clone());
        }
        if st != NFS4_OK {
            // What an operation noted for the reactor cache is not learned from a
            // failed COMPOUND.
            super::fast::forget();
            return (noted(op_out, st), done);
        }
        if let (OP_READ, Some(data)) = (op_out, data) {
            // The reactor cache fill takes the data from here (`fast::note_attr`).
            super::fast::note_read_data(data.start, data.len());
        }
    }
    (NFS4_OK, done)
}

/// Notes a COMPOUND's failure at operation `op` (0: before any) for
/// `nfsgw_nfs_errors_total` (`stats::status`); the worker counts it with the reply.
fn noted(op: u32, st: Nfsstat4) -> Nfsstat4 {
    crate::stats::status::note_v4(op, st);
    st
}

/// Drops an operation's partial results and writes `st` as its status.
fn replace(out: &mut XdrWriter, body: usize, st: Nfsstat4) -> Nfsstat4 {
    out.rewind(body);
    if st.put(out).is_err() {
        out.rewind(body - 4);
    }
    st
}
