//! The client's side of the NFSv4.1 callback program (RFC 8881 §19–§20): reading a
//! CB_NULL or a CB_COMPOUND of CB_SEQUENCE + one operation the server calls, and
//! writing the REPLY a callback service gives (CB_SEQUENCE OK echoing the session and
//! sequence id, then the operation's status). One reader of the call (`decode_cb`)
//! and one writer of the reply (`cb_reply`) serve every operation, pNFS's too
//! (`v4pnfs`).

use crate::nfs4::*;
use crate::nfs4args::NFS4_OK;
use crate::rpccall;
use engine::rpc::{self, Accept};
use engine::xdr::{XdrReader, XdrResult, XdrWriter};

/// Longest callback tag accepted.
const MAX_TAG: usize = 1024;

/// A CB_COMPOUND as the client sees it: CB_SEQUENCE's session and sequence id, and
/// CB_RECALL's stateid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CbRecall {
    pub session: [u8; 16],
    pub seqid: u32,
    pub stateid: [u8; 16],
}

/// What a callback record is: its xid and CB_NULL (`None`) or a CB_COMPOUND of
/// CB_SEQUENCE + CB_RECALL. Anything else — another program, version, procedure,
/// operation or a malformed body — is an `Err` saying what.
pub fn decode_callback(rec: &[u8]) -> Result<(u32, Option<CbRecall>), String> {
    let (h, _) = rpc::decode_call(rec).map_err(|e| format!("not an RPC CALL: {e:?}"))?;
    if (h.prog, h.vers) != (NFS4_CALLBACK, NFS_CB) {
        return Err(format!("program {} version {}", h.prog, h.vers));
    }
    match h.proc_ {
        CB_NULL => Ok((h.xid, None)),
        CB_COMPOUND => {
            let (xid, c) = decode_cb(rec, Some(NFS4_CALLBACK), 1, OP_CB_RECALL, cb_recall)?;
            Ok((xid, Some(c)))
        }
        p => Err(format!("procedure {p}")),
    }
}

/// The xid and `op`'s arguments of a callback record: an RPC CALL of the callback
/// program (`prog` when given; a client picks its own, csa_cb_program) version 1,
/// procedure CB_COMPOUND, whose CB_COMPOUND4args is CB_SEQUENCE then `op`
/// (`cb_sequence_then`), `body` reading the rest from CB_SEQUENCE's session and
/// sequence id. Anything else is an `Err` saying what.
pub(crate) fn decode_cb<T>(
    rec: &[u8],
    prog: Option<u32>,
    minor: u32,
    op: u32,
    body: impl FnOnce(&mut XdrReader, [u8; 16], u32) -> XdrResult<Option<T>>,
) -> Result<(u32, T), String> {
    let (h, at) = rpc::decode_call(rec).map_err(|e| format!("not an RPC CALL: {e:?}"))?;
    if prog.is_some_and(|p| p != h.prog) || (h.vers, h.proc_) != (NFS_CB, CB_COMPOUND) {
        return Err(format!(
            "program {} version {} procedure {}",
            h.prog, h.vers, h.proc_
        ));
    }
    let mut r = XdrReader::new(&rec[at..]);
    let got = match cb_sequence_then(&mut r, minor, op) {
        Ok(Some((session, seqid))) => body(&mut r, session, seqid),
        Ok(None) => Ok(None),
        Err(e) => Err(e),
    };
    got.map_err(|e| format!("CB_COMPOUND: {e:?}"))?
        .map(|c| (h.xid, c))
        .ok_or_else(|| format!("not a minor-{minor} CB_SEQUENCE + operation {op}"))
}

/// The REPLY to a CB_COMPOUND of CB_SEQUENCE + `op` (RFC 8881 §19.2.2): accepted
/// SUCCESS, CB_COMPOUND4res with `status` and an empty tag, CB_SEQUENCE OK (§20.9.2)
/// echoing `session` and `seqid` (slot 0, highest slot 0, target 0), then `op` with
/// `status` and whatever `tail` writes after it.
pub(crate) fn cb_reply(
    xid: u32,
    (session, seqid): (&[u8; 16], u32),
    op: u32,
    status: u32,
    tail: impl Fn(&mut XdrWriter) -> XdrResult<()>,
) -> Vec<u8> {
    rpccall::encode(256, |w| {
        rpc::write_accepted(w, xid, Accept::Success)?;
        w.u32(status)?;
        w.opaque_var(b"")?;
        w.u32(2)?;
        w.u32(OP_CB_SEQUENCE)?;
        w.u32(NFS4_OK)?;
        w.opaque_fixed(session)?;
        w.u32(seqid)?;
        for _ in 0..3 {
            w.u32(0)?; // slot, highest slot, target highest slot
        }
        w.u32(op)?;
        w.u32(status)?;
        tail(w)
    })
    .expect("a callback reply fits its buffer")
}

/// The head of a two-operation CB_COMPOUND4args (RFC 8881 §19.2.1) of minor version
/// `minor` or a later one up to 2 (an operation of 4.1 is one of 4.2 too, and a server
/// sends a 4.2 session's callbacks as 4.2's): CB_SEQUENCE (§20.9.1) with no referring
/// call lists, then operation `op`, whose arguments follow. Its session and sequence
/// id; `None` for any other shape.
fn cb_sequence_then(r: &mut XdrReader, minor: u32, op: u32) -> XdrResult<Option<([u8; 16], u32)>> {
    r.opaque_var(MAX_TAG)?;
    let got_minor = r.u32()?;
    r.u32()?; // callback_ident
    if !(minor..=2).contains(&got_minor) || r.u32()? != 2 || r.u32()? != OP_CB_SEQUENCE {
        return Ok(None);
    }
    let mut session = [0u8; 16];
    session.copy_from_slice(r.opaque_fixed(16)?);
    let seqid = r.u32()?;
    r.skip(12)?; // slotid, highest_slotid, cachethis
    if r.u32()? != 0 || r.u32()? != op {
        return Ok(None); // referring call lists are not expected here
    }
    Ok(Some((session, seqid)))
}

/// CB_RECALL4args (RFC 8881 §20.2.1) after CB_SEQUENCE: the stateid (the truncate
/// flag and handle after it are not read).
fn cb_recall(r: &mut XdrReader, session: [u8; 16], seqid: u32) -> XdrResult<Option<CbRecall>> {
    let mut stateid = [0u8; 16];
    stateid.copy_from_slice(r.opaque_fixed(16)?);
    Ok(Some(CbRecall {
        session,
        seqid,
        stateid,
    }))
}

/// The REPLY to a callback: accepted SUCCESS, then for a CB_COMPOUND the results
/// CB_SEQUENCE OK (echoing session and sequence id; slot 0, highest slot 0, target 0)
/// and CB_RECALL OK.
pub fn callback_reply(xid: u32, recall: Option<&CbRecall>) -> Vec<u8> {
    match recall {
        Some(c) => cb_reply(
            xid,
            (&c.session, c.seqid),
            OP_CB_RECALL,
            NFS4_OK,
            |_| Ok(()),
        ),
        None => rpccall::encode(256, |w| rpc::write_accepted(w, xid, Accept::Success))
            .expect("a callback reply fits its buffer"),
    }
}

/// A CB_OFFLOAD (RFC 7862 §16.1) as the client sees it: CB_SEQUENCE's session and
/// sequence id, the destination's handle, the copy's stateid and offload_info4 —
/// `status`, and on NFS4_OK the write_response4's count, committed and verifier
/// (on an error, `count` is the bytes copied).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CbOffload {
    pub session: [u8; 16],
    pub seqid: u32,
    pub fh: Vec<u8>,
    pub stateid: [u8; 16],
    pub status: u32,
    pub count: u64,
    pub committed: u32,
    pub verifier: [u8; 8],
}

/// A CB_COMPOUND of minor version 2 with exactly CB_SEQUENCE and CB_OFFLOAD: its xid
/// and what it says; anything else is an `Err` saying what.
pub fn decode_offload(rec: &[u8]) -> Result<(u32, CbOffload), String> {
    decode_cb(rec, None, 2, OP_CB_OFFLOAD, cb_offload)
}

fn cb_offload(r: &mut XdrReader, session: [u8; 16], seqid: u32) -> XdrResult<Option<CbOffload>> {
    let fh = r.opaque_var(128)?.to_vec();
    let mut stateid = [0u8; 16];
    stateid.copy_from_slice(r.opaque_fixed(16)?);
    let status = r.u32()?;
    let mut c = CbOffload {
        session,
        seqid,
        fh,
        stateid,
        status,
        count: 0,
        committed: 0,
        verifier: [0; 8],
    };
    if status == NFS4_OK {
        if r.u32()? > 1 {
            return Ok(None); // wr_callback_id<1>
        }
        c.count = r.u64()?;
        c.committed = r.u32()?;
        c.verifier.copy_from_slice(r.opaque_fixed(8)?);
    } else {
        c.count = r.u64()?;
    }
    Ok(Some(c))
}

/// The REPLY to a CB_OFFLOAD: CB_SEQUENCE OK echoing session and sequence id, then
/// CB_OFFLOAD OK.
pub fn offload_reply(xid: u32, c: &CbOffload) -> Vec<u8> {
    cb_reply(xid, (&c.session, c.seqid), OP_CB_OFFLOAD, NFS4_OK, |_| {
        Ok(())
    })
}

/// A CB_GETATTR (RFC 8881 §20.1) as the client sees it: CB_SEQUENCE's session and
/// sequence id and the file's handle (the server asks for change and size, and
/// `times`: time_deleg_access and time_deleg_modify too, RFC 9754 §6.1, of a file
/// whose times it delegated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CbGetattr {
    pub session: [u8; 16],
    pub seqid: u32,
    pub fh: Vec<u8>,
    pub times: bool,
}

/// Word 2 of a bitmap4 asking for time_deleg_access (84) and time_deleg_modify (85).
const DELEG_TIMES_WORD2: u32 = 1 << (crate::delstid::FATTR4_TIME_DELEG_ACCESS - 64)
    | 1 << (crate::delstid::FATTR4_TIME_DELEG_MODIFY - 64);

/// A CB_COMPOUND of minor version 1 or 2 with exactly CB_SEQUENCE and CB_GETATTR
/// asking for change (3) and size (4): its xid and what it says; anything else is an
/// `Err` saying what.
pub fn decode_getattr(rec: &[u8]) -> Result<(u32, CbGetattr), String> {
    decode_cb(rec, None, 1, OP_CB_GETATTR, cb_getattr)
}

fn cb_getattr(r: &mut XdrReader, session: [u8; 16], seqid: u32) -> XdrResult<Option<CbGetattr>> {
    let fh = r.opaque_var(128)?.to_vec();
    let times = match r.u32()? {
        1 => false,
        3 => true,
        _ => return Ok(None),
    };
    if r.u32()? != (1 << 3 | 1 << 4) {
        return Ok(None);
    }
    if times && (r.u32()?, r.u32()?) != (0, DELEG_TIMES_WORD2) {
        return Ok(None);
    }
    Ok(Some(CbGetattr {
        session,
        seqid,
        fh,
        times,
    }))
}

/// `getattr_reply` with the holder's delegated times too (RFC 9754 §6.1): fattr4
/// {change, size, time_deleg_access, time_deleg_modify}, each time an nfstime4
/// (seconds, nanoseconds) sent as given, valid or not.
pub fn getattr_reply_times(
    xid: u32,
    c: &CbGetattr,
    (size, change): (u64, u64),
    atime: (i64, u32),
    mtime: (i64, u32),
) -> Vec<u8> {
    cb_reply(xid, (&c.session, c.seqid), OP_CB_GETATTR, NFS4_OK, |w| {
        w.u32(3)?;
        w.u32(1 << 3 | 1 << 4)?;
        w.u32(0)?;
        w.u32(DELEG_TIMES_WORD2)?;
        w.u32(40)?;
        w.u64(change)?;
        w.u64(size)?;
        w.opaque_fixed(&crate::delstid::encode_time(atime.0, atime.1))?;
        w.opaque_fixed(&crate::delstid::encode_time(mtime.0, mtime.1))
    })
}

/// The REPLY to a CB_GETATTR: CB_SEQUENCE OK echoing session and sequence id, then
/// CB_GETATTR OK with fattr4 {change, size} (RFC 8881 §20.1.2).
pub fn getattr_reply(xid: u32, c: &CbGetattr, size: u64, change: u64) -> Vec<u8> {
    cb_reply(xid, (&c.session, c.seqid), OP_CB_GETATTR, NFS4_OK, |w| {
        w.u32(1)?;
        w.u32(1 << 3 | 1 << 4)?;
        w.u32(16)?;
        w.u64(change)?;
        w.u64(size)
    })
}
