//! The NFSv4.1 callback program on the back channel (RFC 8881 §20, §2.10.3.1):
//! encoding CB_NULL and CB_COMPOUND(CB_SEQUENCE, CB_RECALL) calls and decoding their
//! replies. A codec: no state, no I/O. The recall state machine that uses it is
//! `crate::state::recall::RecallTable`, which decides what to send in state's terms
//! (`state::backchannel`); `Wire` turns that into bytes and replies back, and
//! `RecallDriver` is the table speaking through `Wire`. `probe` is the entry point the
//! session layer calls.
//!
//! Callbacks carry AUTH_SYS (uid 0, gid 0, machine name "nfsgw"): the Linux client's
//! callback service refuses AUTH_NULL for everything but CB_NULL.

use super::status::{
    Nfsstat4, NFS4ERR_BADHANDLE, NFS4ERR_BAD_STATEID, NFS4ERR_DELAY, NFS4ERR_RETRY_UNCACHED_REP,
    NFS4ERR_SEQ_MISORDERED, NFS4_OK,
};
use crate::state::backchannel::{CallbackWire, CbAttrs, RecallAnswer, RecallReply};
pub use crate::state::backchannel::{CbCall, CbSec};
use crate::state::delegations::Delegations;
use crate::state::recall::{Outcall, RecallTable};
use crate::state::stateid::Stateid;
use crate::state::{BackChannelInfo, State};
use engine::rpc::{self, Accept, AuthSys, Cred, ReplyStatus};
use engine::xdr::{XdrError, XdrReader, XdrResult, XdrWriter};

use crate::state::offload::OffloadOutcome;
/// The callback program's version and procedures (RFC 8881 §19) and the callback
/// operation numbers (RFC 8881 §20), from `nfs_wire::nfs4`.
pub use nfs_wire::nfs4::{
    CB_COMPOUND, CB_NULL, NFS_CB as CB_VERSION, OP_CB_ILLEGAL, OP_CB_LAYOUTRECALL,
    OP_CB_NOTIFY_DEVICEID, OP_CB_OFFLOAD, OP_CB_RECALL, OP_CB_SEQUENCE,
};
/// The tag our CB_COMPOUNDs carry (echoed by the client).
pub const TAG: &[u8] = b"nfsgw";
/// Largest reply tag / result array we read (hostile clients get a decode error).
const MAX_TAG: usize = 1024;
const MAX_RESULTS: u32 = 16;
/// Largest file handle (NFS4_FHSIZE).
const FH_MAX: usize = 128;

/// Queues a CB_NULL probe of a session's new back channel (RFC 8881 §18.36.3: the
/// server checks the back channel; knfsd and nfs4j probe with CB_NULL at
/// CREATE_SESSION). Non-blocking: the callback thread sends it; until it is answered
/// `clientid` gets no delegations. Called by the session layer after CREATE_SESSION
/// with CONN_BACK_CHAN, BIND_CONN_TO_SESSION (back or both) and BACKCHANNEL_CTL.
/// Callbacks keep the session's security (`probe_sec`; AUTH_SYS as root when none was
/// set), e.g. after BIND_CONN_TO_SESSION.
pub fn probe(state: &State, clientid: u64, info: BackChannelInfo) {
    state.delegations.queue_probe(clientid, info, None);
}

/// `probe` with the security the client asked for in csa_sec_parms /
/// bca_sec_parms (decoded by `decode_sec_parms`): every callback on this session
/// then carries it (RFC 8881 §18.36.3, §2.10.8.2). `None`: AUTH_SYS as root.
pub fn probe_sec(state: &State, clientid: u64, info: BackChannelInfo, sec: Option<CbSec>) {
    probe_delegations(&state.delegations, clientid, info, sec);
}

/// `probe_sec` on the delegations table alone.
pub fn probe_delegations(
    dl: &Delegations,
    clientid: u64,
    info: BackChannelInfo,
    sec: Option<CbSec>,
) {
    dl.queue_probe(clientid, info, Some(sec));
}

/// The RPC credential of a session's callback security.
fn cred(sec: &CbSec) -> Cred {
    match sec {
        CbSec::None => Cred::None,
        CbSec::Sys {
            stamp,
            uid,
            gid,
            gids,
        } => {
            let mut a = AuthSys::new(*uid, *gid, gids);
            a.stamp = *stamp;
            Cred::Sys(a)
        }
    }
}

const AUTH_NONE: u32 = 0;
const AUTH_SYS: u32 = 1;
const RPCSEC_GSS: u32 = 6;
/// Most sec parms entries read (each is small; a client sends one or two).
const MAX_SEC_PARMS: u32 = 16;

/// Decodes callback_sec_parms4<> (CREATE_SESSION, BACKCHANNEL_CTL) and picks the
/// first flavor we can send: AUTH_NONE or AUTH_SYS (RPCSEC_GSS entries are skipped,
/// RFC 8881 §2.10.8.2). `None` when none is usable (callbacks then use AUTH_SYS as
/// root). Unknown flavors cannot be skipped: BadValue (NFS4ERR_BADXDR... the caller
/// may answer NFS4ERR_ENCR_ALG_UNSUPP / INVAL as it sees fit).
pub fn decode_sec_parms(r: &mut XdrReader) -> XdrResult<Option<CbSec>> {
    let n = r.u32()?;
    if n > MAX_SEC_PARMS {
        return Err(XdrError::TooLong);
    }
    let mut pick = None;
    for _ in 0..n {
        let sec = match r.u32()? {
            AUTH_NONE => Some(CbSec::None),
            AUTH_SYS => {
                let stamp = r.u32()?;
                r.string(255)?;
                let (uid, gid) = (r.u32()?, r.u32()?);
                let ngids = r.u32()?;
                if ngids > 16 {
                    return Err(XdrError::TooLong);
                }
                let gids = (0..ngids).map(|_| r.u32()).collect::<XdrResult<Vec<_>>>()?;
                Some(CbSec::Sys {
                    stamp,
                    uid,
                    gid,
                    gids,
                })
            }
            RPCSEC_GSS => {
                // gss_cb_handles4: service, handle from server, handle from client.
                r.u32()?;
                r.opaque_var(1024)?;
                r.opaque_var(1024)?;
                None
            }
            _ => return Err(XdrError::BadValue),
        };
        if pick.is_none() {
            pick = sec;
        }
    }
    Ok(pick)
}

/// The default callback credential: AUTH_SYS, root, machine name "nfsgw" (written
/// by `engine::rpc::write_call`).
fn root_cred() -> Cred {
    Cred::Sys(AuthSys::new(0, 0, &[]))
}

/// Encodes a whole callback RPC message (no record mark) for `cb_program` with the
/// session's callback security (`None`: AUTH_SYS as root). Fails with `XdrError`
/// when it does not fit `max` bytes (the back channel's ca_maxrequestsize, which
/// counts the RPC header: RFC 8881 §18.36.3).
pub fn encode(
    xid: u32,
    cb_program: u32,
    call: &CbCall,
    max: u32,
    sec: Option<&CbSec>,
) -> XdrResult<Vec<u8>> {
    let cred = sec.map_or_else(root_cred, cred);
    let mut buf = vec![0u8; (max as usize).min(64 * 1024)];
    let mut w = XdrWriter::new(&mut buf);
    // CB_NULL is procedure 0; every other callback is CB_COMPOUND (procedure 1) with
    // CB_SEQUENCE (slot 0) and the one operation.
    match compound_head(call) {
        None => rpc::write_call(&mut w, xid, cb_program, CB_VERSION, CB_NULL, &cred)?,
        Some((minor, session, seqid, fh)) => {
            if fh.is_some_and(|fh| fh.len() > FH_MAX) {
                return Err(XdrError::BadValue);
            }
            rpc::write_call(&mut w, xid, cb_program, CB_VERSION, CB_COMPOUND, &cred)?;
            cb_sequence(&mut w, minor, session, seqid)?;
            op_args(&mut w, call)?;
        }
    }
    let n = w.position();
    buf.truncate(n);
    Ok(buf)
}

/// A CB_COMPOUND's minor version, session, slot 0 sequence id and file handle.
type Head<'a> = (u32, &'a [u8; 16], u32, Option<&'a [u8]>);

/// A CB_COMPOUND's minor version, session, slot 0 sequence id and the file handle
/// it names (bounded by `FH_MAX`); `None` for CB_NULL. The minor version is the
/// session's (RFC 7862 §16: a 4.2 session's callbacks are 4.2's; Linux matches the
/// CB_SEQUENCE's session only among its clients of the CB_COMPOUND's minor version),
/// except CB_OFFLOAD's, an NFSv4.2 callback: always 2 (a 4.1 callback service would
/// answer OP_ILLEGAL).
fn compound_head<'a>(call: &'a CbCall<'a>) -> Option<Head<'a>> {
    match *call {
        CbCall::Null => None,
        CbCall::Recall {
            ref session,
            minor,
            seqid,
            fh,
            ..
        }
        | CbCall::LayoutRecall {
            ref session,
            minor,
            seqid,
            fh,
            ..
        }
        | CbCall::Getattr {
            ref session,
            minor,
            seqid,
            fh,
            ..
        } => Some((minor, session, seqid, Some(fh))),
        CbCall::Offload {
            ref session,
            seqid,
            fh,
            ..
        } => Some((2, session, seqid, Some(fh))),
        CbCall::NotifyDelete {
            ref session,
            minor,
            seqid,
            ..
        } => Some((minor, session, seqid, None)),
    }
}

/// The operation after CB_SEQUENCE, with its arguments.
fn op_args(w: &mut XdrWriter, call: &CbCall) -> XdrResult<()> {
    match call {
        CbCall::Null => Ok(()),
        // CB_RECALL4args (RFC 8881 §20.2.1): stateid, truncate false, fh.
        CbCall::Recall { stateid, fh, .. } => {
            w.u32(OP_CB_RECALL)?;
            stateid.encode(w)?;
            w.bool(false)?;
            w.opaque_var(fh)
        }
        CbCall::Offload {
            stateid,
            fh,
            outcome,
            ..
        } => cb_offload(w, stateid, fh, outcome),
        CbCall::LayoutRecall { stateid, fh, .. } => cb_layoutrecall(w, stateid, fh),
        CbCall::NotifyDelete { deviceid, .. } => cb_notify_delete(w, deviceid),
        CbCall::Getattr { fh, times, .. } => super::cb_getattr::put_args(w, fh, *times),
    }
}

/// CB_COMPOUND4args' header (RFC 8881 §20.2: tag, `minor`, callback_ident 0 — ignored
/// since 4.1 —, two operations) and CB_SEQUENCE4args (§20.9: session, sequence id,
/// slot 0, highest slot 0, cachethis false, no referring call lists).
fn cb_sequence(w: &mut XdrWriter, minor: u32, session: &[u8; 16], seqid: u32) -> XdrResult<()> {
    w.string(TAG)?;
    w.u32(minor)?;
    w.u32(0)?;
    w.u32(2)?;
    w.u32(OP_CB_SEQUENCE)?;
    w.opaque_fixed(session)?;
    w.u32(seqid)?;
    w.u32(0)?;
    w.u32(0)?;
    w.bool(false)?;
    w.u32(0)
}

/// CB_LAYOUTRECALL4args (RFC 8881 §20.3.1): flexfiles (RFC 8435 §5), any iomode,
/// clora_changed false (the data servers stay good: the client may write back its
/// dirty data through them before returning), LAYOUTRECALL4_FILE of the whole file.
fn cb_layoutrecall(w: &mut XdrWriter, stateid: &Stateid, fh: &[u8]) -> XdrResult<()> {
    w.u32(OP_CB_LAYOUTRECALL)?;
    w.u32(super::layout_ops::LAYOUT4_FLEX_FILES)?;
    w.u32(crate::state::layouts::IOMODE_ANY)?;
    w.bool(false)?;
    w.u32(1)?; // LAYOUTRECALL4_FILE
    w.opaque_var(fh)?;
    w.u64(0)?;
    w.u64(u64::MAX)?;
    stateid.encode(w)
}

/// CB_NOTIFY_DEVICEID4args (RFC 8881 §20.12.1): one notify4 whose mask has the
/// NOTIFY_DEVICEID4_DELETE bit and whose value is notify_deviceid_delete4 (the layout
/// type, the device id).
fn cb_notify_delete(w: &mut XdrWriter, deviceid: &[u8; 16]) -> XdrResult<()> {
    w.u32(OP_CB_NOTIFY_DEVICEID)?;
    w.u32(1)?; // cnda_changes: one
    w.u32(1)?; // notify_mask: one word
    w.u32(crate::state::layouts::NOTIFY_DELETE)?;
    w.u32(4 + 16)?; // notify_vals
    w.u32(super::layout_ops::LAYOUT4_FLEX_FILES)?;
    w.opaque_fixed(deviceid)
}

/// CB_OFFLOAD4args (RFC 7862 §16.1.1): the destination's handle, the copy's
/// callback id and offload_info4 — write_response4 (no callback id, count,
/// committed, verifier) on success, else the status and the bytes copied.
fn cb_offload(
    w: &mut XdrWriter,
    stateid: &Stateid,
    fh: &[u8],
    outcome: &OffloadOutcome,
) -> XdrResult<()> {
    w.u32(OP_CB_OFFLOAD)?;
    w.opaque_var(fh)?;
    stateid.encode(w)?;
    match *outcome {
        OffloadOutcome::Copied {
            count,
            file_sync,
            verifier,
        } => {
            w.u32(NFS4_OK.as_u32())?;
            w.u32(0)?;
            w.u64(count)?;
            // stable_how4: FILE_SYNC4 (2) or UNSTABLE4 (0).
            w.u32(if file_sync { 2 } else { 0 })?;
            w.opaque_fixed(&verifier)
        }
        OffloadOutcome::Failed { status, copied } => {
            w.u32(status)?;
            w.u64(copied)
        }
    }
}

/// The size of the CB_RECALL record (CB_COMPOUND of CB_SEQUENCE + CB_RECALL, RPC
/// header included) we send for a file handle of `fh_len` bytes with `sec` (`None`:
/// AUTH_SYS as root). A back channel whose ca_maxrequestsize is below this for the
/// largest handle we issue could never carry a recall: CREATE_SESSION refuses it with
/// NFS4ERR_TOOSMALL (RFC 8881 §18.36.3; R8267-30 over RDMA).
pub fn recall_record_len(fh_len: usize, sec: Option<&CbSec>) -> usize {
    let fh = vec![0u8; fh_len.min(FH_MAX)];
    let call = CbCall::Recall {
        session: [0; 16],
        minor: 1,
        seqid: 1,
        stateid: Stateid::default(),
        fh: &fh,
    };
    encode(1, 0, &call, 64 * 1024, sec).map_or(64 * 1024, |r| r.len())
}

/// CB_SEQUENCE4resok's session id and sequence id.
pub type SequenceOk = ([u8; 16], u32);

/// The outcome of a CB_COMPOUND as the client reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompoundReply {
    /// The CB_COMPOUND status (the first failing operation's).
    pub status: Nfsstat4,
    /// CB_SEQUENCE's status, and when NFS4_OK its session id and sequence id.
    pub sequence: Option<(Nfsstat4, Option<SequenceOk>)>,
    /// CB_RECALL's status when the client got that far.
    pub recall: Option<Nfsstat4>,
}

/// A decoded callback reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CbReply {
    /// Accepted with SUCCESS; the results of a CB_NULL (none) or CB_COMPOUND.
    Ok(Option<CompoundReply>),
    /// Accepted with another status, or denied (e.g. AUTH_ERROR).
    Rpc(ReplyStatus),
}

/// Reads the XID and msg_type of a record: `Some(xid)` when it is a REPLY (msg_type
/// 1, RFC 5531 §9), which the reactor routes to the callback table.
pub fn reply_xid(record: &[u8]) -> Option<u32> {
    let mut r = XdrReader::new(record);
    let xid = r.u32().ok()?;
    (r.u32().ok()? == rpc::MSG_REPLY).then_some(xid)
}

/// Decodes a callback reply (RFC 5531 reply header, then CB_COMPOUND4res when
/// `compound`). Any malformed byte is an error, never a panic; so is a status RFC 8881
/// §15.1 does not define (`Nfsstat4::decode`).
pub fn decode_reply(record: &[u8], compound: bool) -> XdrResult<(u32, CbReply)> {
    // CB_OFFLOAD4res (RFC 7862 §16.1.2), CB_LAYOUTRECALL4res (RFC 8881 §20.3.2) and
    // CB_NOTIFY_DEVICEID4res (§20.12.2) are a status too: they take CB_RECALL's place.
    decode_reply_with(record, compound, |op, r, out| match op {
        OP_CB_RECALL | OP_CB_OFFLOAD | OP_CB_LAYOUTRECALL | OP_CB_NOTIFY_DEVICEID => {
            out.recall = Some(Nfsstat4::decode(r)?);
            Ok(true)
        }
        _ => Ok(false),
    })
}

/// The one walk over a callback reply: the RPC reply header, then CB_COMPOUND4res
/// (RFC 8881 §20.2... §19.2.2: status, tag, results) when `compound`. CB_SEQUENCE's
/// result (§20.9.2) and CB_ILLEGAL's are read here; any other result goes to `op`
/// (its operation number, the reader just after it, the reply so far), which reads
/// it and says whether to read on (`false`: a result we did not ask for, or one
/// not to trust further — the statuses we need came first).
pub(super) fn decode_reply_with(
    record: &[u8],
    compound: bool,
    mut op: impl FnMut(u32, &mut XdrReader, &mut CompoundReply) -> XdrResult<bool>,
) -> XdrResult<(u32, CbReply)> {
    let (xid, status, at) = rpc::decode_reply(record)?;
    if status != ReplyStatus::Accepted(Accept::Success) {
        return Ok((xid, CbReply::Rpc(status)));
    }
    if !compound {
        return Ok((xid, CbReply::Ok(None)));
    }
    let mut r = XdrReader::new(record.get(at..).ok_or(XdrError::Short)?);
    let status = Nfsstat4::decode(&mut r)?;
    r.string(MAX_TAG)?;
    let n = r.u32()?;
    if n > MAX_RESULTS {
        return Err(XdrError::BadValue);
    }
    let mut out = CompoundReply {
        status,
        sequence: None,
        recall: None,
    };
    for _ in 0..n {
        match r.u32()? {
            OP_CB_SEQUENCE => {
                let st = Nfsstat4::decode(&mut r)?;
                let ok = if st.is_ok() {
                    let mut sid = [0u8; 16];
                    sid.copy_from_slice(r.opaque_fixed(16)?);
                    let seqid = r.u32()?;
                    // slotid, highest_slotid, target_highest_slotid.
                    r.skip(12)?;
                    Some((sid, seqid))
                } else {
                    None
                };
                out.sequence = Some((st, ok));
            }
            OP_CB_ILLEGAL => {
                r.u32()?;
            }
            code => {
                if !op(code, &mut r, &mut out)? {
                    break;
                }
            }
        }
    }
    Ok((xid, CbReply::Ok(Some(out))))
}

/// The NFSv4.1 back-channel codec the recall table speaks through.
pub struct Wire;

impl CallbackWire for Wire {
    fn encode(
        &self,
        xid: u32,
        cb_program: u32,
        call: &CbCall,
        max: u32,
        sec: Option<&CbSec>,
    ) -> Option<Vec<u8>> {
        encode(xid, cb_program, call, max, sec).ok()
    }

    fn probe_ok(&self, record: &[u8]) -> bool {
        matches!(decode_reply(record, false), Ok((_, CbReply::Ok(_))))
    }

    fn recall_reply(&self, record: &[u8]) -> RecallReply {
        match decode_reply(record, true) {
            Ok((_, CbReply::Ok(Some(c)))) => recall_reply(&c),
            other => {
                tracing::info!(?other, "CB_RECALL failed at the RPC level; retrying");
                RecallReply::NoAnswer
            }
        }
    }

    fn getattr_reply(&self, record: &[u8]) -> (RecallReply, Option<CbAttrs>) {
        super::cb_getattr::getattr_reply(record)
    }
}

/// A CB_COMPOUND reply to CB_SEQUENCE + CB_RECALL in the recall table's terms: one
/// explicit table of the statuses it tells apart (RFC 8881 §20.9.3, §20.2.3).
pub fn recall_reply(c: &CompoundReply) -> RecallReply {
    let answer = match c.sequence {
        Some((NFS4_OK, _)) => match c.recall {
            Some(NFS4_OK) => RecallAnswer::Accepted,
            Some(NFS4ERR_BAD_STATEID | NFS4ERR_BADHANDLE) => RecallAnswer::Unknown,
            Some(NFS4ERR_DELAY) | None => RecallAnswer::Later,
            Some(st) => RecallAnswer::Refused(st.as_u32()),
        },
        Some((NFS4ERR_RETRY_UNCACHED_REP, _)) => return RecallReply::SeqUncached,
        Some((NFS4ERR_SEQ_MISORDERED, _)) => return RecallReply::SeqMisordered,
        _ => return RecallReply::SeqFailed,
    };
    RecallReply::Sequenced(answer)
}

/// The recall table (`state::recall::RecallTable`) speaking NFSv4.1 through `Wire`:
/// what the callback thread owns.
#[derive(Default)]
pub struct RecallDriver(RecallTable);

impl RecallDriver {
    /// `RecallTable::step` with this codec.
    pub fn step(
        &mut self,
        dl: &Delegations,
        lookup: &dyn Fn(u64) -> Option<BackChannelInfo>,
        now: std::time::Instant,
    ) -> Vec<Outcall> {
        self.0.step(&Wire, dl, lookup, now)
    }

    /// `RecallTable::step_layouts` with this codec (CB_LAYOUTRECALL).
    pub fn step_layouts(
        &mut self,
        dl: &Delegations,
        layouts: &crate::state::layouts::Layouts,
        lookup: &dyn Fn(u64) -> Option<BackChannelInfo>,
        now: std::time::Instant,
    ) -> Vec<Outcall> {
        self.0.step_layouts(&Wire, dl, layouts, lookup, now)
    }
}

impl std::ops::Deref for RecallDriver {
    type Target = RecallTable;

    fn deref(&self) -> &RecallTable {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROG: u32 = 0x4000_0000;

    fn words(b: &[u8]) -> Vec<u32> {
        b.chunks(4)
            .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn cb_null_is_an_auth_sys_call_to_the_callback_program() {
        let b = encode(7, PROG, &CbCall::Null, 1024, None).unwrap();
        let w = words(&b);
        // xid, CALL, rpcvers 2, prog, vers 1, proc 0, AUTH_SYS.
        assert_eq!(&w[..7], &[7, 0, 2, PROG, 1, 0, 1]);
        let (h, at) = rpc::decode_call(&b).unwrap();
        assert_eq!((h.prog, h.vers, h.proc_), (PROG, 1, 0));
        match h.cred {
            Cred::Sys(a) => assert_eq!((a.uid, a.gid, a.ngids), (0, 0, 0)),
            c => panic!("{c:?}"),
        }
        assert!(b.windows(5).any(|x| x == b"nfsgw"), "machine name");
        assert_eq!(at, b.len(), "no arguments");
    }

    #[test]
    fn cb_compound_carries_cb_sequence_then_cb_recall() {
        let st = Stateid {
            seqid: 3,
            other: *b"ABCDEFGHIJKL",
        };
        let fh = [9u8; 10];
        let call = CbCall::Recall {
            session: [0x55; 16],
            minor: 1,
            seqid: 42,
            stateid: st,
            fh: &fh,
        };
        let b = encode(0x1234, PROG, &call, 4096, None).unwrap();
        let (h, at) = rpc::decode_call(&b).unwrap();
        assert_eq!((h.xid, h.prog, h.vers, h.proc_), (0x1234, PROG, 1, 1));
        assert!(matches!(h.cred, Cred::Sys(_)));
        let mut want = Vec::new();
        want.extend(5u32.to_be_bytes());
        want.extend(b"nfsgw\0\0\0");
        for v in [1u32, 0, 2, OP_CB_SEQUENCE] {
            want.extend(v.to_be_bytes());
        }
        want.extend([0x55; 16]);
        for v in [42u32, 0, 0, 0, 0, OP_CB_RECALL, 3] {
            want.extend(v.to_be_bytes());
        }
        want.extend(b"ABCDEFGHIJKL");
        want.extend(0u32.to_be_bytes());
        want.extend(10u32.to_be_bytes());
        want.extend([9u8; 10]);
        want.extend([0, 0]);
        assert_eq!(&b[at..], &want[..]);
    }

    /// A 4.2 session's CB_RECALL and CB_LAYOUTRECALL say minor version 2 in the
    /// CB_COMPOUND header (the word after the tag), a 4.1 session's 1: Linux finds the
    /// CB_SEQUENCE's session only among its clients of that minor version.
    #[test]
    fn callbacks_carry_the_sessions_minor_version() {
        let fh = [9u8; 10];
        let minor_of = |call: &CbCall| {
            let b = encode(7, PROG, call, 4096, None).unwrap();
            let (_, at) = rpc::decode_call(&b).unwrap();
            let w = |i: usize| u32::from_be_bytes(b[i..i + 4].try_into().unwrap());
            assert_eq!(w(at), 5, "tag nfsgw");
            w(at + 12)
        };
        for minor in [1, 2] {
            let recall = CbCall::Recall {
                session: [1; 16],
                minor,
                seqid: 1,
                stateid: Stateid::default(),
                fh: &fh,
            };
            assert_eq!(minor_of(&recall), minor);
            let layout = CbCall::LayoutRecall {
                session: [1; 16],
                minor,
                seqid: 1,
                stateid: Stateid::default(),
                fh: &fh,
            };
            assert_eq!(minor_of(&layout), minor);
        }
    }

    /// R8267-30: the size CREATE_SESSION requires of a back channel is exactly the
    /// CB_RECALL we would send (RPC header and credential included).
    #[test]
    fn r8267_30_recall_record_len_is_the_encoded_cb_recall() {
        assert_eq!(recall_record_len(64, None), 224, "AUTH_SYS as root");
        assert_eq!(recall_record_len(64, Some(&CbSec::None)), 196, "AUTH_NONE");
        let fh = [3u8; 31];
        let call = CbCall::Recall {
            session: [1; 16],
            minor: 1,
            seqid: 9,
            stateid: Stateid::default(),
            fh: &fh,
        };
        let n = encode(5, PROG, &call, 4096, None).unwrap().len();
        assert_eq!(recall_record_len(31, None), n);
    }

    #[test]
    fn a_call_larger_than_the_back_channel_allows_is_refused() {
        let fh = [1u8; 128];
        let call = CbCall::Recall {
            session: [0; 16],
            minor: 1,
            seqid: 1,
            stateid: Stateid::default(),
            fh: &fh,
        };
        let full = encode(1, PROG, &call, 4096, None).unwrap().len() as u32;
        assert!(encode(1, PROG, &call, full, None).is_ok());
        assert!(encode(1, PROG, &call, full - 1, None).is_err());
        let long = [1u8; 129];
        let bad = CbCall::Recall {
            session: [0; 16],
            minor: 1,
            seqid: 1,
            stateid: Stateid::default(),
            fh: &long,
        };
        assert!(encode(1, PROG, &bad, 4096, None).is_err());
    }

    /// An accepted-SUCCESS reply header (null verifier) followed by `body` words.
    fn reply(xid: u32, body: &[u32]) -> Vec<u8> {
        let mut v = Vec::new();
        for w in [xid, 1, 0, 0, 0, 0].iter().chain(body) {
            v.extend(w.to_be_bytes());
        }
        v
    }

    fn seq_ok(seqid: u32) -> Vec<u32> {
        let mut v = vec![OP_CB_SEQUENCE, 0];
        v.extend([0x01010101u32; 4]);
        v.extend([seqid, 0, 0, 0]);
        v
    }

    #[test]
    fn replies_decode_with_their_statuses() {
        // CB_NULL.
        let (xid, r) = decode_reply(&reply(5, &[]), false).unwrap();
        assert_eq!((xid, r), (5, CbReply::Ok(None)));
        assert_eq!(reply_xid(&reply(5, &[])), Some(5));
        // CB_COMPOUND: both OK.
        let mut body = vec![0, 5];
        body.extend(words(b"nfsgw\0\0\0"));
        body.push(2);
        body.extend(seq_ok(9));
        body.extend([OP_CB_RECALL, 0]);
        let (_, r) = decode_reply(&reply(6, &body), true).unwrap();
        assert_eq!(
            r,
            CbReply::Ok(Some(CompoundReply {
                status: NFS4_OK,
                sequence: Some((NFS4_OK, Some(([1; 16], 9)))),
                recall: Some(NFS4_OK),
            }))
        );
        // CB_RECALL fails with BAD_STATEID (the client does not know it yet).
        let mut body = vec![10025, 0, 2];
        body.extend(seq_ok(9));
        body.extend([OP_CB_RECALL, 10025]);
        let (_, r) = decode_reply(&reply(6, &body), true).unwrap();
        let CbReply::Ok(Some(c)) = r else { panic!() };
        assert_eq!(
            (c.status, c.recall),
            (NFS4ERR_BAD_STATEID, Some(NFS4ERR_BAD_STATEID))
        );
        // CB_SEQUENCE fails: no CB_RECALL result.
        let body = [10063u32, 0, 1, OP_CB_SEQUENCE, 10063];
        let (_, r) = decode_reply(&reply(6, &body), true).unwrap();
        assert_eq!(
            r,
            CbReply::Ok(Some(CompoundReply {
                status: NFS4ERR_SEQ_MISORDERED,
                sequence: Some((NFS4ERR_SEQ_MISORDERED, None)),
                recall: None,
            }))
        );
        // RPC-level failures.
        let mut v = Vec::new();
        for w in [8u32, 1, 0, 0, 0, 1] {
            v.extend(w.to_be_bytes());
        }
        let (_, r) = decode_reply(&v, true).unwrap();
        assert_eq!(r, CbReply::Rpc(ReplyStatus::Accepted(Accept::ProgUnavail)));
        let mut v = Vec::new();
        for w in [8u32, 1, 1, 1, 1] {
            v.extend(w.to_be_bytes());
        }
        let (_, r) = decode_reply(&v, false).unwrap();
        assert!(matches!(r, CbReply::Rpc(ReplyStatus::Denied(_))));
    }

    #[test]
    fn callbacks_carry_the_security_the_client_asked_for() {
        // callback_sec_parms4<>: RPCSEC_GSS (skipped), AUTH_SYS 17/19, AUTH_NONE.
        let mut v: Vec<u32> = vec![3, 6, 1, 0, 0, 1];
        v.extend([5, 3, u32::from_be_bytes(*b"host"), 17, 19, 2, 100, 200, 0]);
        let bytes: Vec<u8> = v.iter().flat_map(|w| w.to_be_bytes()).collect();
        let mut r = XdrReader::new(&bytes);
        let sec = decode_sec_parms(&mut r).unwrap().unwrap();
        assert_eq!(
            sec,
            CbSec::Sys {
                stamp: 5,
                uid: 17,
                gid: 19,
                gids: vec![100, 200]
            }
        );
        assert_eq!(r.remaining(), 0, "every entry consumed");
        let b = encode(9, PROG, &CbCall::Null, 512, Some(&sec)).unwrap();
        match rpc::decode_call(&b).unwrap().0.cred {
            Cred::Sys(a) => assert_eq!((a.uid, a.gid, a.groups()), (17, 19, &[100, 200][..])),
            c => panic!("{c:?}"),
        }
        let b = encode(9, PROG, &CbCall::Null, 512, Some(&CbSec::None)).unwrap();
        assert_eq!(rpc::decode_call(&b).unwrap().0.cred, Cred::None);
        // Only GSS: nothing usable. Unknown flavor, huge counts: errors.
        let gss: Vec<u8> = [1u32, 6, 1, 0, 0]
            .iter()
            .flat_map(|w| w.to_be_bytes())
            .collect();
        assert_eq!(decode_sec_parms(&mut XdrReader::new(&gss)).unwrap(), None);
        for bad in [&[1u32, 99][..], &[u32::MAX], &[1, 1, 0, 0, 0, 0, 99]] {
            let b: Vec<u8> = bad.iter().flat_map(|w| w.to_be_bytes()).collect();
            assert!(
                decode_sec_parms(&mut XdrReader::new(&b)).is_err(),
                "{bad:?}"
            );
        }
    }

    /// The statuses of a recall reply, case by case, as the recall table sees them.
    #[test]
    fn recall_replies_map_to_what_the_table_does() {
        let st = |n: u32| Nfsstat4::new(n).unwrap();
        let c = |sequence: Option<u32>, recall: Option<u32>| CompoundReply {
            status: NFS4_OK,
            sequence: sequence.map(|s| (st(s), (s == 0).then_some(([0; 16], 1)))),
            recall: recall.map(st),
        };
        let seq = RecallReply::Sequenced;
        let cases = [
            (c(Some(0), Some(0)), seq(RecallAnswer::Accepted)),
            (c(Some(0), Some(10025)), seq(RecallAnswer::Unknown)),
            (c(Some(0), Some(10001)), seq(RecallAnswer::Unknown)),
            (c(Some(0), Some(10008)), seq(RecallAnswer::Later)),
            (c(Some(0), None), seq(RecallAnswer::Later)),
            (c(Some(0), Some(10006)), seq(RecallAnswer::Refused(10006))),
            (c(Some(10068), None), RecallReply::SeqUncached),
            (c(Some(10063), None), RecallReply::SeqMisordered),
            (c(Some(10052), None), RecallReply::SeqFailed),
            (c(None, None), RecallReply::SeqFailed),
        ];
        for (reply, want) in cases {
            assert_eq!(recall_reply(&reply), want, "{reply:?}");
        }
        // Through the wire: an RPC-level failure or a short record is no answer.
        let mut denied = Vec::new();
        for w in [8u32, 1, 1, 1, 1] {
            denied.extend(w.to_be_bytes());
        }
        assert_eq!(Wire.recall_reply(&denied), RecallReply::NoAnswer);
        assert_eq!(Wire.recall_reply(&[0, 0, 0]), RecallReply::NoAnswer);
        assert!(Wire.probe_ok(&reply(5, &[])));
        assert!(!Wire.probe_ok(&denied));
    }

    #[test]
    fn hostile_replies_are_errors_not_panics() {
        assert_eq!(reply_xid(&[0, 0, 0, 1, 0, 0, 0, 0]), None, "a CALL");
        assert_eq!(reply_xid(&[0, 0]), None);
        let good = {
            let mut body = vec![0, 0, 2];
            body.extend(seq_ok(1));
            body.extend([OP_CB_RECALL, 0]);
            reply(3, &body)
        };
        for cut in 0..good.len() {
            let _ = decode_reply(&good[..cut], true);
        }
        assert!(decode_reply(&good[..good.len() - 4], true).is_err());
        // A status RFC 8881 §15.1 does not define, in each place one is read: the
        // reply does not decode, so the recall table sees no answer and retries.
        for (at, word) in [(6, 10073), (10, 19), (good.len() / 4 - 1, 10002)] {
            let mut bad = good.clone();
            bad[at * 4..at * 4 + 4].copy_from_slice(&u32::to_be_bytes(word));
            assert_eq!(decode_reply(&bad, true), Err(XdrError::BadValue), "{at}");
            assert_eq!(Wire.recall_reply(&bad), RecallReply::NoAnswer, "{at}");
        }
        // A huge result count, a huge tag.
        assert!(decode_reply(&reply(3, &[0, 0, u32::MAX]), true).is_err());
        assert!(decode_reply(&reply(3, &[0, u32::MAX]), true).is_err());
        // Not a reply at all.
        assert!(decode_reply(&encode(1, PROG, &CbCall::Null, 512, None).unwrap(), false).is_err());
    }
}
