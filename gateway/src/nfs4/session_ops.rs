//! The session operations of NFSv4.1 (RFC 8881 §18.33-§18.37, §18.46, §18.50, §18.51):
//! client records, sessions, SEQUENCE and the reply cache around a COMPOUND.

use super::compound::ReplyLimits;
use super::status::*;
use super::{put_status, Compound, Full, OpResult};
use crate::state::clients::{Client, Principal};
use crate::state::sessions::{
    CachedReply, ChannelAttrs, ReqPrint, Session, SlotClaim, SlotUse, MAX_SLOTS,
};
use engine::xdr::{XdrReader, XdrResult, XdrWriter};
use std::sync::Arc;

pub(super) use super::compound::compound;

/// exchange_id4 flags (RFC 8881 §18.35.1).
pub const EXCHGID4_FLAG_SUPP_MOVED_REFER: u32 = 0x1;
pub const EXCHGID4_FLAG_SUPP_MOVED_MIGR: u32 = 0x2;
pub const EXCHGID4_FLAG_BIND_PRINC_STATEID: u32 = 0x100;
pub const EXCHGID4_FLAG_USE_NON_PNFS: u32 = 0x10000;
pub const EXCHGID4_FLAG_USE_PNFS_MDS: u32 = 0x20000;
pub const EXCHGID4_FLAG_USE_PNFS_DS: u32 = 0x40000;
pub const EXCHGID4_FLAG_UPD_CONFIRMED_REC_A: u32 = 0x4000_0000;
pub const EXCHGID4_FLAG_CONFIRMED_R: u32 = 0x8000_0000;
const EXCHGID4_CLIENT_FLAGS: u32 = EXCHGID4_FLAG_SUPP_MOVED_REFER
    | EXCHGID4_FLAG_SUPP_MOVED_MIGR
    | EXCHGID4_FLAG_BIND_PRINC_STATEID
    | EXCHGID4_FLAG_USE_NON_PNFS
    | EXCHGID4_FLAG_USE_PNFS_MDS
    | EXCHGID4_FLAG_USE_PNFS_DS
    | EXCHGID4_FLAG_UPD_CONFIRMED_REC_A;

/// CREATE_SESSION flags (RFC 8881 §18.36.1).
pub const CREATE_SESSION4_FLAG_PERSIST: u32 = 0x1;
pub const CREATE_SESSION4_FLAG_CONN_BACK_CHAN: u32 = 0x2;
pub const CREATE_SESSION4_FLAG_CONN_RDMA: u32 = 0x4;

/// sr_status_flags (RFC 8881 §18.46.3).
pub const SEQ4_STATUS_CB_PATH_DOWN: u32 = 0x1;

/// channel_dir_from_client4 / _server4 (RFC 8881 §18.34).
const CDFC4_FORE: u32 = 0x1;
const CDFC4_BACK: u32 = 0x2;
const CDFC4_FORE_OR_BOTH: u32 = 0x3;
const CDFC4_BACK_OR_BOTH: u32 = 0x7;
const CDFS4_FORE: u32 = 0x1;
const CDFS4_BACK: u32 = 0x2;
const CDFS4_BOTH: u32 = 0x3;

/// The server scope (RFC 8881 §2.5): constant, so it stays the same across restarts
/// and takeovers and a client reclaims instead of seeing a different server. The
/// owner's major id is the client table's (`Clients::server_major`: `[ha]`'s identity).
const SERVER_SCOPE: &[u8] = b"nfs-gateway";

/// Fore channel bounds: a 1 MiB READ/WRITE plus headers.
pub const MAX_REQUEST: u32 = (1 << 20) + 8192;
pub const MAX_RESPONSE: u32 = (1 << 20) + 8192;
pub const MAX_OPS: u32 = 64;
/// Smallest fore channel sizes that can carry SEQUENCE (else NFS4ERR_TOOSMALL).
const MIN_FORE: u32 = 128;
/// Smallest back channel response size that can carry the CB_SEQUENCE + CB_RECALL
/// results (the request side is `callback::recall_record_len`, see `check_back`).
const MIN_BACK_RESPONSE: u32 = 64;
/// callback_sec_parms4 entries accepted.
fn badxdr(w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_BADXDR)
}

fn sessionid(r: &mut XdrReader) -> XdrResult<[u8; 16]> {
    let mut id = [0u8; 16];
    id.copy_from_slice(r.opaque_fixed(16)?);
    Ok(id)
}

/// What SEQUENCE at the head of a COMPOUND decided.
pub(super) enum SeqStart {
    /// Send these bytes (a retransmission).
    Replay(Arc<CachedReply>),
    /// SEQUENCE failed with this status; its result is written.
    Failed(Nfsstat4),
    /// Run the rest of the COMPOUND within `limits`; then store the reply in `claim`.
    Run {
        claim: SlotClaim,
        limits: ReplyLimits,
        /// Replies up to this size are cached (ca_maxresponsesize_cached).
        cache_max: usize,
    },
}

/// SEQUENCE4args.
struct SeqArgs {
    sid: [u8; 16],
    seqid: u32,
    slot: u32,
    highest: u32,
    cachethis: bool,
}

fn get_seq_args(r: &mut XdrReader) -> XdrResult<SeqArgs> {
    Ok(SeqArgs {
        sid: sessionid(r)?,
        seqid: r.u32()?,
        slot: r.u32()?,
        highest: r.u32()?,
        cachethis: r.bool()?,
    })
}

/// Bytes of a SEQUENCE4resok after the status.
const SEQ_RES: usize = 16 + 5 * 4;

/// SEQUENCE as the first operation (RFC 8881 §18.46.3, §2.10.6.1): session, slot and
/// sequence id checks, the COMPOUND's size and operation limits, lease renewal.
/// Writes the SEQUENCE result (opnum already consumed from `r`, not yet written).
pub(super) fn sequence_first(
    c: &mut Compound,
    r: &mut XdrReader,
    w: &mut XdrWriter,
    nops: u32,
    req_len: usize,
) -> SeqStart {
    if w.u32(super::ops::OP_SEQUENCE).is_err() {
        return SeqStart::Failed(NFS4ERR_REP_TOO_BIG);
    }
    let head = w.position();
    let fail = |w: &mut XdrWriter, st: Nfsstat4| {
        let _ = st.put(w);
        SeqStart::Failed(st)
    };
    let Ok(a) = get_seq_args(r) else {
        return fail(w, NFS4ERR_BADXDR);
    };
    let print = ReqPrint::of(req_len, r.rest());
    let Some(s) = c.state.clients.session(&a.sid) else {
        return fail(w, NFS4ERR_BADSESSION);
    };
    let nslots = s.slots();
    if a.slot >= nslots {
        return fail(w, NFS4ERR_BADSLOT);
    }
    // A session shrunk while idle takes its budget back when it can (else a request
    // on a slot above its target waits: `Session::use_slot`).
    c.state.clients.regrow(&s);
    if nops > s.fore.max_ops {
        return fail(w, NFS4ERR_TOO_MANY_OPS);
    }
    if req_len > s.fore.max_request as usize {
        return fail(w, NFS4ERR_REQ_TOO_BIG);
    }
    // The reply so far (header) plus SEQUENCE's own result must fit the limits.
    let min_reply = head + 4 + SEQ_RES;
    if min_reply > s.fore.max_response as usize {
        return fail(w, NFS4ERR_REP_TOO_BIG);
    }
    if a.cachethis && min_reply > s.fore.max_response_cached as usize {
        return fail(w, NFS4ERR_REP_TOO_BIG_TO_CACHE);
    }
    let claim = match s.use_slot(a.slot, a.seqid, print) {
        Ok(SlotUse::Replay(cached)) => return SeqStart::Replay(cached),
        Ok(SlotUse::New(claim)) => claim,
        Err(e) => return fail(w, from_state(e)),
    };
    let mut flags = match c.state.renew(&s) {
        Ok(f) => f,
        Err(e) => return fail(w, from_state(e)),
    };
    c.session = Some(s.id);
    c.clientid = s.clientid;
    flags = status_flags(c.state, &s, flags);
    if put_sequence_ok(w, &s, a.seqid, a.slot, nslots, flags).is_err() {
        return SeqStart::Failed(NFS4ERR_REP_TOO_BIG);
    }
    let _ = a.highest;
    SeqStart::Run {
        claim,
        limits: ReplyLimits {
            max: s.fore.max_response as usize,
            cached: a.cachethis.then_some(s.fore.max_response_cached as usize),
        },
        cache_max: s.fore.max_response_cached as usize,
    }
}

/// sr_status_flags (RFC 8881 §18.46.3): the client's flags (from `Clients::renew`),
/// CB_PATH_DOWN when the session wants a back channel and has none, and
/// RECALLABLE_STATE_REVOKED while revoked delegations are not yet freed.
pub(super) fn status_flags(state: &crate::state::State, s: &Session, mut flags: u32) -> u32 {
    // The session's own back channel answers most calls without the client table.
    if s.flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN != 0
        && s.back_conn().is_none()
        && !state.clients.has_backchannel(s.clientid)
    {
        flags |= SEQ4_STATUS_CB_PATH_DOWN;
    }
    if state.delegations.has_revoked(s.clientid) {
        flags |= 0x40; // SEQ4_STATUS_RECALLABLE_STATE_REVOKED
    }
    flags
}

/// SEQUENCE4resok after OP_SEQUENCE (RFC 8881 §18.46.2): status, session, sequence
/// and slot echoed, the highest slot id (the whole table, never lowered: a client
/// may use any of its slots), the target (the slots the reply-cache budget covers,
/// lower once an idle session was shrunk: RFC 8881 §2.10.6.1, `Session::granted`),
/// status flags.
pub(super) fn put_sequence_ok(
    w: &mut XdrWriter,
    s: &Session,
    seqid: u32,
    slot: u32,
    nslots: u32,
    flags: u32,
) -> XdrResult<()> {
    NFS4_OK.put(w)?;
    w.opaque_fixed(&s.id)?;
    w.u32(seqid)?;
    w.u32(slot)?;
    w.u32(nslots.saturating_sub(1))?;
    w.u32(s.granted().min(nslots).saturating_sub(1))?;
    w.u32(flags)
}

/// A COMPOUND while the fence is shut (`[ha]`: this gateway does not hold its identity,
/// docs/ha.md): NFS4ERR_DELAY for its first operation, so clients retry until the
/// address moves to the gateway that serves it. Writes the first result; returns the
/// results written.
pub(super) fn fenced(r: &mut XdrReader, w: &mut XdrWriter) -> u32 {
    let Ok(op) = r.u32() else {
        return 0;
    };
    if w.u32(op).is_err() || NFS4ERR_DELAY.put(w).is_err() {
        return 0;
    }
    1
}

/// SEQUENCE anywhere but first (RFC 8881 §18.46.3): NFS4ERR_SEQUENCE_POS.
pub(super) fn sequence(_c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    if get_seq_args(r).is_err() {
        return badxdr(w);
    }
    put_status(w, NFS4ERR_SEQUENCE_POS)
}

/// EXCHANGE_ID4args, decoded.
struct ExchArgs<'a> {
    verifier: [u8; 8],
    owner: &'a [u8],
    flags: u32,
    protect: u32,
    /// eia_client_impl_id's nii_name, when the client names its implementation.
    impl_name: Option<&'a [u8]>,
}

fn get_exch_args<'a>(r: &mut XdrReader<'a>) -> XdrResult<ExchArgs<'a>> {
    let mut verifier = [0u8; 8];
    verifier.copy_from_slice(r.opaque_fixed(8)?);
    let owner = r.opaque_var(1024)?;
    let flags = r.u32()?;
    let protect = r.u32()?;
    match protect {
        0 => {}
        1 => {
            skip_bitmap(r)?;
            skip_bitmap(r)?;
        }
        2 => {
            skip_bitmap(r)?;
            skip_bitmap(r)?;
            for _ in 0..2 {
                let n = r.u32()?;
                if n > 64 {
                    return Err(engine::xdr::XdrError::Short);
                }
                for _ in 0..n {
                    r.opaque_var(1024)?;
                }
            }
            r.u32()?;
            r.u32()?;
        }
        _ => return Err(engine::xdr::XdrError::Short),
    }
    // eia_client_impl_id<1>.
    let n = r.u32()?;
    if n > 1 {
        return Err(engine::xdr::XdrError::Short);
    }
    let mut impl_name = None;
    if n == 1 {
        r.opaque_var(1024)?; // nii_domain
        impl_name = Some(r.opaque_var(1024)?);
        r.i64()?;
        r.u32()?;
    }
    Ok(ExchArgs {
        verifier,
        owner,
        flags,
        protect,
        impl_name,
    })
}

pub(super) fn skip_bitmap(r: &mut XdrReader) -> XdrResult<()> {
    let n = r.u32()?;
    if n > 8 {
        return Err(engine::xdr::XdrError::Short);
    }
    r.skip(n as usize * 4)
}

/// EXCHANGE_ID (RFC 8881 §18.35.4/5): the nine cases of owner, verifier and principal
/// with and without EXCHGID4_FLAG_UPD_CONFIRMED_REC_A.
pub(super) fn exchange_id(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let Ok(a) = get_exch_args(r) else {
        return badxdr(w);
    };
    if a.flags & !EXCHGID4_CLIENT_FLAGS != 0 || a.owner.is_empty() {
        return put_status(w, NFS4ERR_INVAL);
    }
    if a.protect != 0 {
        // Only SP4_NONE: no machine-credential or SSV state protection.
        return put_status(w, NFS4ERR_NOTSUPP);
    }
    let principal = Principal::of(&c.ctx.cred);
    let update = a.flags & EXCHGID4_FLAG_UPD_CONFIRMED_REC_A != 0;
    let state = c.state;
    // Whether the owner's confirmed client holds opens or locks, asked before taking
    // the client table's lock (the opens table has its own; never nest them).
    let (conf_now, _) = state.clients.with_purge(|t| t.by_owner(a.owner)).0;
    let conf_has_state = conf_now.is_some_and(|id| state.opens.client_has_state(id));
    let has_state = |id: u64| Some(id) == conf_now && conf_has_state;
    let (res, purged) = state.clients.with_purge(|t| {
        let (conf, unconf) = t.by_owner(a.owner);
        let conf_rec = conf.and_then(|id| t.client(id)).map(|c| {
            (
                c.id,
                c.verifier,
                c.principal,
                !c.sessions.is_empty(),
                c.cs_seq,
            )
        });
        if update {
            // Cases 6-9.
            let Some((id, verf, princ, _, seq)) = conf_rec else {
                return Err(NFS4ERR_NOENT);
            };
            if verf != a.verifier {
                return Err(NFS4ERR_NOT_SAME);
            }
            if princ != principal {
                return Err(NFS4ERR_PERM);
            }
            return Ok((id, seq.wrapping_add(1), true));
        }
        if let Some((id, verf, princ, sessions, seq)) = conf_rec {
            if princ != principal {
                if (sessions || has_state(id)) && !t.is_lapsed(id) {
                    // Case 3 with state: somebody else's client.
                    return Err(NFS4ERR_CLID_INUSE);
                }
                if sessions || has_state(id) {
                    // Case 3 against a courtesy client (lease run out, state kept):
                    // RFC 8881 §18.35.4 lets the server expire it, and its state
                    // gives way to any conflict (§8.4.2.1); knfsd expires it too.
                    // Then as for a new client.
                    t.expire_for_conflict(id, "EXCHANGE_ID from another principal");
                } else {
                    // Case 3 without state: the old record goes now.
                    t.purge(id);
                }
            } else if verf == a.verifier {
                // Case 2: the same client again.
                if let Some(u) = unconf {
                    t.drop_unconfirmed(u);
                }
                t.touch(id);
                return Ok((id, seq.wrapping_add(1), true));
            }
            // Case 5 (client restarted): a new unconfirmed record; the confirmed one
            // stays until CREATE_SESSION confirms the new one.
        }
        // Case 4: an unconfirmed record is replaced; case 1: a new client.
        if let Some(u) = unconf {
            t.drop_unconfirmed(u);
        }
        let id = t.insert(a.owner, a.verifier, principal)?;
        Ok((id, 1, false))
    });
    c.state.purge(purged);
    let (clientid, seq, confirmed) = match res {
        Ok(v) => v,
        Err(st) => return put_status(w, st),
    };
    // Striped layouts only for the implementations `pnfs.stripe_clients` names. A
    // knowing, opt-in deviation: RFC 8881 §18.35.3 means eia_client_impl_id for
    // diagnosis, not to change behaviour, but no protocol signal says a client takes
    // a mirror of several data servers (Linux refuses one), so the operator names
    // the clients that do (README "Scaling out with pNFS").
    if let Some(ds) = c.state.layouts.devices().filter(|d| d.stripe.width > 1) {
        let stripes = a.impl_name.is_some_and(|n| ds.stripe.accepts(n));
        c.state.clients.set_stripes(clientid, stripes);
    }
    // §13.1: a pNFS metadata server says so (and only then); as knfsd, it is one
    // or the other, never both.
    let role = if c.state.layouts.devices().is_some() {
        EXCHGID4_FLAG_USE_PNFS_MDS
    } else {
        EXCHGID4_FLAG_USE_NON_PNFS
    };
    let mut flags = role | EXCHGID4_FLAG_SUPP_MOVED_REFER;
    if confirmed {
        flags |= EXCHGID4_FLAG_CONFIRMED_R;
    }
    (|| -> XdrResult<()> {
        NFS4_OK.put(w)?;
        w.u64(clientid)?;
        w.u32(seq)?;
        w.u32(flags)?;
        w.u32(0)?; // SP4_NONE
        w.u64(0)?; // so_minor_id
        w.opaque_var(state.clients.server_major())?;
        w.opaque_var(SERVER_SCOPE)?;
        w.u32(0) // no eir_server_impl_id
    })()
    .map_err(|_| Full)?;
    Ok(NFS4_OK)
}

fn get_channel(r: &mut XdrReader) -> XdrResult<ChannelAttrs> {
    let mut a = ChannelAttrs {
        header_pad: r.u32()?,
        max_request: r.u32()?,
        max_response: r.u32()?,
        max_response_cached: r.u32()?,
        max_ops: r.u32()?,
        max_requests: r.u32()?,
        rdma_ird: None,
    };
    match r.u32()? {
        0 => {}
        1 => a.rdma_ird = Some(r.u32()?),
        _ => return Err(engine::xdr::XdrError::Short),
    }
    Ok(a)
}

fn put_channel(w: &mut XdrWriter, a: &ChannelAttrs) -> XdrResult<()> {
    for v in [
        a.header_pad,
        a.max_request,
        a.max_response,
        a.max_response_cached,
        a.max_ops,
        a.max_requests,
    ] {
        w.u32(v)?;
    }
    match a.rdma_ird {
        Some(v) => {
            w.u32(1)?;
            w.u32(v)
        }
        None => w.u32(0),
    }
}

/// The fore channel we grant (RFC 8881 §18.36.3: the server may lower any value).
fn clamp_fore(a: &ChannelAttrs, max_cached: u32) -> Result<ChannelAttrs, Nfsstat4> {
    if a.max_request < MIN_FORE || a.max_response < MIN_FORE || a.max_requests == 0 {
        return Err(NFS4ERR_TOOSMALL);
    }
    Ok(ChannelAttrs {
        header_pad: 0,
        max_request: a.max_request.min(MAX_REQUEST),
        max_response: a.max_response.min(MAX_RESPONSE),
        max_response_cached: a.max_response_cached.min(max_cached),
        max_ops: a.max_ops.min(MAX_OPS),
        max_requests: a.max_requests.min(MAX_SLOTS),
        rdma_ird: None,
    })
}

/// The back channel: the client's values echoed (the Linux client fails a session
/// whose back channel exceeds what it asked; over RDMA it asks max_rqst = inline
/// threshold − 28), too small ones refused: ca_maxrequestsize must hold a CB_RECALL
/// for the largest file handle we issue with the client's callback security
/// (RFC 8881 §18.36.3, R8267-30: every callback fits the client's back channel).
fn check_back(
    a: &ChannelAttrs,
    sec: Option<&super::callback::CbSec>,
) -> Result<ChannelAttrs, Nfsstat4> {
    let min_request = super::callback::recall_record_len(crate::fs::FH_MAX, sec);
    if (a.max_request as usize) < min_request
        || a.max_response < MIN_BACK_RESPONSE
        || a.max_ops < 2
        || a.max_requests == 0
    {
        return Err(NFS4ERR_TOOSMALL);
    }
    Ok(ChannelAttrs {
        header_pad: 0,
        rdma_ird: None,
        ..*a
    })
}

/// CREATE_SESSION (RFC 8881 §18.36.4): the client's sequence id (replay of the last
/// one answered from the record's cache, anything but the next NFS4ERR_SEQ_MISORDERED),
/// confirmation of an unconfirmed record, channel attributes, the back channel.
pub(super) fn create_session(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let args = (|| -> XdrResult<_> {
        let clientid = r.u64()?;
        let seq = r.u32()?;
        let flags = r.u32()?;
        let fore = get_channel(r)?;
        let back = get_channel(r)?;
        let prog = r.u32()?;
        let sec = super::callback::decode_sec_parms(r)?;
        Ok((clientid, seq, flags, fore, back, prog, sec))
    })();
    let Ok((clientid, seq, flags, fore, back, prog, sec)) = args else {
        return badxdr(w);
    };
    // The owner goes into the recovery record before the client is confirmed
    // (docs/ha.md): a successor then lets it reclaim what it is granted here.
    if let Err(e) = c.state.clients.record_before_confirm(clientid) {
        return put_status(w, from_state(e));
    }
    let principal = Principal::of(&c.ctx.cred);
    let max_cached = c.state.clients.limits.max_cached_reply;
    let conn = c.ctx.conn;
    let addr = c.ctx.client.ip().to_canonical();
    let (res, purged) = c.state.clients.with_purge(|t| {
        let Some(cl) = t.client(clientid) else {
            return Err(NFS4ERR_STALE_CLIENTID);
        };
        let expired = t.now.saturating_duration_since(cl.last_renew) > t.limits.lease;
        if !cl.confirmed && expired {
            // RFC 8881 §18.35.4: an unconfirmed record not confirmed within a lease
            // is gone.
            t.drop_unconfirmed(clientid);
            return Err(NFS4ERR_STALE_CLIENTID);
        }
        if seq == cl.cs_seq {
            if let Some(bytes) = &cl.cs_reply {
                return Ok(bytes.clone());
            }
        }
        if seq != cl.cs_seq.wrapping_add(1) {
            return Err(NFS4ERR_SEQ_MISORDERED);
        }
        if !cl.confirmed && cl.principal != principal {
            return Err(NFS4ERR_CLID_INUSE);
        }
        if flags
            & !(CREATE_SESSION4_FLAG_PERSIST
                | CREATE_SESSION4_FLAG_CONN_BACK_CHAN
                | CREATE_SESSION4_FLAG_CONN_RDMA)
            != 0
        {
            return Err(NFS4ERR_INVAL);
        }
        let fore = t.grant_slots(clamp_fore(&fore, max_cached)?, clientid, Some(addr))?;
        let back = check_back(&back, sec.as_ref())?;
        // CONN_BACK_CHAN binds this connection, TCP or RPC-over-RDMA (RFC 8267 §6,
        // RFC 8167 bidirectional); without it the flag is answered cleared and the
        // session has no back channel, so no delegations (R8167-19/21).
        let want_back = flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN != 0;
        let back_conn = conn.filter(|_| want_back);
        let out_flags = if back_conn.is_some() {
            CREATE_SESSION4_FLAG_CONN_BACK_CHAN
        } else {
            0
        };
        let id = t.new_session_id();
        let s = Session::new(id, clientid, fore, back, out_flags, prog, back_conn);
        let s = Arc::new(s.from_addr(addr).with_minor(c.minor));
        t.add_session(s)?;
        t.confirm(clientid);
        let bytes = encode_cs_res(&id, seq, out_flags, &fore, &back);
        // A courtesy client's CREATE_SESSION (its sessions were dropped while it
        // was away) revives it with its state (`state/clients/courtesy.rs`).
        t.touch(clientid);
        if let Some(cl) = t.client_mut(clientid) {
            if out_flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN != 0 {
                cl.status_flags &= !SEQ4_STATUS_CB_PATH_DOWN;
            }
            cl.cs_seq = seq;
            cl.cs_reply = Some(bytes.clone());
        }
        Ok(bytes)
    });
    c.state.purge(purged);
    match res {
        Ok(bytes) => {
            if flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN != 0 {
                if let Some(info) = c.state.clients.lookup_backchannel(clientid) {
                    super::callback::probe_sec(c.state, clientid, info, sec);
                }
            }
            w.opaque_fixed(&bytes).map_err(|_| Full)?;
            Ok(NFS4_OK)
        }
        Err(st) => put_status(w, st),
    }
}

/// CREATE_SESSION4res with status NFS4_OK, as cached for replays.
fn encode_cs_res(
    id: &[u8; 16],
    seq: u32,
    flags: u32,
    fore: &ChannelAttrs,
    back: &ChannelAttrs,
) -> Vec<u8> {
    let mut buf = [0u8; 128];
    let mut w = XdrWriter::new(&mut buf);
    let ok = (|| -> XdrResult<()> {
        NFS4_OK.put(&mut w)?;
        w.opaque_fixed(id)?;
        w.u32(seq)?;
        w.u32(flags)?;
        put_channel(&mut w, fore)?;
        put_channel(&mut w, back)
    })();
    debug_assert!(ok.is_ok(), "CREATE_SESSION result fits 128 bytes");
    w.written().to_vec()
}

/// DESTROY_SESSION (RFC 8881 §18.37.3): the session of this COMPOUND's SEQUENCE may
/// only be destroyed by the last operation.
pub(super) fn destroy_session(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let Ok(sid) = sessionid(r) else {
        return badxdr(w);
    };
    if c.session == Some(sid) && !c.is_last_op() {
        return put_status(w, NFS4ERR_NOT_ONLY_OP);
    }
    let (gone, purged) = c.state.clients.with_purge(|t| t.remove_session(&sid));
    c.state.purge(purged);
    put_status(w, if gone { NFS4_OK } else { NFS4ERR_BADSESSION })
}

/// BIND_CONN_TO_SESSION (RFC 8881 §18.34.3): fore, back or both as asked (FORE_OR_BOTH
/// and BACK_OR_BOTH are answered BOTH); never RDMA mode.
pub(super) fn bind_conn_to_session(
    c: &mut Compound,
    r: &mut XdrReader,
    w: &mut XdrWriter,
) -> OpResult {
    let (Ok(sid), Ok(dir), Ok(_rdma)) = (sessionid(r), r.u32(), r.bool()) else {
        return badxdr(w);
    };
    let out_dir = match dir {
        CDFC4_FORE => CDFS4_FORE,
        CDFC4_BACK => CDFS4_BACK,
        CDFC4_FORE_OR_BOTH | CDFC4_BACK_OR_BOTH => CDFS4_BOTH,
        _ => return put_status(w, NFS4ERR_INVAL),
    };
    let Some(s) = c.state.clients.session(&sid) else {
        return put_status(w, NFS4ERR_BADSESSION);
    };
    if out_dir & CDFS4_BACK != 0 {
        if let Some(conn) = c.ctx.conn {
            s.bind_back(conn);
            c.state
                .clients
                .set_status_flags(s.clientid, SEQ4_STATUS_CB_PATH_DOWN, false);
            if let Some(info) = c.state.clients.lookup_backchannel(s.clientid) {
                super::callback::probe(c.state, s.clientid, info);
            }
        }
    }
    (|| -> XdrResult<()> {
        NFS4_OK.put(w)?;
        w.opaque_fixed(&sid)?;
        w.u32(out_dir)?;
        w.bool(false)
    })()
    .map_err(|_| Full)?;
    Ok(NFS4_OK)
}

/// BACKCHANNEL_CTL (RFC 8881 §18.33): a new callback program for the session.
pub(super) fn backchannel_ctl(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let Ok(prog) = r.u32() else {
        return badxdr(w);
    };
    let Ok(sec) = super::callback::decode_sec_parms(r) else {
        return badxdr(w);
    };
    let Some(s) = c.session.and_then(|id| c.state.clients.session(&id)) else {
        return put_status(w, NFS4ERR_OP_NOT_IN_SESSION);
    };
    s.set_cb_program(prog);
    c.state
        .clients
        .set_status_flags(s.clientid, SEQ4_STATUS_CB_PATH_DOWN, false);
    if let Some(info) = c.state.clients.lookup_backchannel(c.clientid) {
        super::callback::probe_sec(c.state, c.clientid, info, sec);
    }
    put_status(w, NFS4_OK)
}

/// DESTROY_CLIENTID (RFC 8881 §18.50.3): only a client without sessions and state.
pub(super) fn destroy_clientid(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let Ok(id) = r.u64() else {
        return badxdr(w);
    };
    let has_state = c.state.opens.client_has_state(id);
    let (st, purged) = c.state.clients.with_purge(|t| {
        let Some(cl): Option<&Client> = t.client(id) else {
            return NFS4ERR_STALE_CLIENTID;
        };
        if !cl.sessions.is_empty() || has_state {
            return NFS4ERR_CLIENTID_BUSY;
        }
        t.purge(id);
        t.drop_unconfirmed(id);
        NFS4_OK
    });
    c.state.purge(purged);
    put_status(w, st)
}

/// RECLAIM_COMPLETE (RFC 8881 §18.51.3): the client is done reclaiming; a second one
/// gets NFS4ERR_COMPLETE_ALREADY. `rca_one_fs` (one file system only) is accepted and
/// changes nothing: every export's reclaims end with the client's global one.
pub(super) fn reclaim_complete(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let Ok(one_fs) = r.bool() else {
        return badxdr(w);
    };
    if c.session.is_none() {
        return put_status(w, NFS4ERR_OP_NOT_IN_SESSION);
    }
    if one_fs {
        return put_status(w, NFS4_OK);
    }
    let id = c.clientid;
    let (st, purged) = c
        .state
        .clients
        .with_purge(|t| of_state(t.reclaim_complete(id)));
    c.state.purge(purged);
    put_status(w, st)
}

#[cfg(test)]
#[path = "session_ops_tests.rs"]
mod tests;
