//! CB_GETATTR on the back channel (RFC 8881 §20.1, §10.4.3): the arguments the
//! server sends (the file's handle, a bitmap of change and size) and the reply the
//! holder of a write delegation gives (CB_SEQUENCE's result, then CB_GETATTR's status
//! and fattr4). A codec beside `callback` (which writes the CB_COMPOUND's header and
//! CB_SEQUENCE, and walks the reply: `decode_reply_with`): no state, no I/O. Anything in a reply we cannot trust — short,
//! another attribute set, values that are not a file's — is a failed CB_GETATTR,
//! which the recall table answers by recalling the delegation.

use super::attrs::{self, Bitmap, CHANGE, SIZE, TIME_DELEG_ACCESS, TIME_DELEG_MODIFY};
use super::callback::{decode_reply_with, recall_reply, CbReply, CompoundReply};
use super::status::{Nfsstat4, NFS4ERR_BADXDR};
use crate::state::backchannel::{CbAttrs, RecallAnswer, RecallReply};
use engine::xdr::{XdrError, XdrReader, XdrResult, XdrWriter};
use nfs_wire::nfs4::OP_CB_GETATTR;
// What the tests (`cb_getattr_tests.rs`) take from here besides.
#[cfg(test)]
use {engine::rpc, nfs_wire::nfs4::OP_CB_SEQUENCE};

/// What CB_GETATTR asks for: change and size, the two §10.4.3 names; and of a file
/// whose times are delegated (RFC 9754 §6.1), the two delegated times.
const WANT: Bitmap = Bitmap::of(&[CHANGE, SIZE]);
const WANT_TIMES: Bitmap = Bitmap::of(&[CHANGE, SIZE, TIME_DELEG_ACCESS, TIME_DELEG_MODIFY]);
/// Largest bitmap length and attribute values read.
const MAX_BITMAP: u32 = 8;
const MAX_ATTR_VALS: usize = 4096;

/// CB_GETATTR4args (RFC 8881 §20.1.1): the operation, the file's handle and the
/// attributes wanted, after `callback`'s CB_COMPOUND header and CB_SEQUENCE.
pub(super) fn put_args(w: &mut XdrWriter, fh: &[u8], times: bool) -> XdrResult<()> {
    w.u32(OP_CB_GETATTR)?;
    w.opaque_var(fh)?;
    attrs::put_bitmap(w, if times { &WANT_TIMES } else { &WANT })
}

/// A CB_COMPOUND reply to CB_SEQUENCE + CB_GETATTR in the recall table's terms: the
/// sequencing as for a recall (`callback::recall_reply`, CB_GETATTR's status in
/// CB_RECALL's place) and, when both succeeded, the holder's size and change. A reply
/// that does not decode is no answer; one whose CB_SEQUENCE succeeded but whose
/// attributes are unusable is a refusal (the slot moved on: the client ran it).
pub fn getattr_reply(record: &[u8]) -> (RecallReply, Option<CbAttrs>) {
    let Ok(Some((c, attrs))) = decode(record) else {
        return (RecallReply::NoAnswer, None);
    };
    let r = recall_reply(&c);
    let ok = r == RecallReply::Sequenced(RecallAnswer::Accepted);
    (r, attrs.filter(|_| ok))
}

/// Decodes the reply through `callback`'s walk: `None` for an RPC-level failure
/// (the procedure did not run).
fn decode(record: &[u8]) -> XdrResult<Option<(CompoundReply, Option<CbAttrs>)>> {
    let mut got = None;
    let walked = decode_reply_with(record, true, |op, r, out| {
        if op != OP_CB_GETATTR {
            return Ok(false);
        }
        let st = Nfsstat4::decode(r)?;
        if st.is_ok() {
            match fattr(r) {
                Ok(a) => got = Some(a),
                // The client ran it (its slot moved on) but what it says is not
                // usable: a refusal, not a lost reply.
                Err(_) => {
                    out.recall = Some(NFS4ERR_BADXDR);
                    return Ok(false);
                }
            }
        }
        out.recall = Some(st);
        Ok(true)
    })?;
    Ok(match walked {
        (_, CbReply::Ok(Some(c))) => Some((c, got)),
        _ => None,
    })
}

/// CB_GETATTR4resok's fattr4 (RFC 8881 §3.3.9: a bitmap, then the values in bit
/// order): it must carry change (3) and size (4) and nothing before them (whose
/// lengths we would have to know). The delegated times (RFC 9754 §6.1) are read when
/// nothing lies between size and them; anything else after size is ignored. A size
/// past the largest file, or a time with 10^9 nanoseconds or more, is no answer.
fn fattr(r: &mut XdrReader) -> XdrResult<CbAttrs> {
    let n = r.u32()?;
    if n > MAX_BITMAP {
        return Err(XdrError::TooLong);
    }
    let mut got = Bitmap::default();
    for i in 0..n {
        let v = r.u32()?;
        if let Some(w) = got.0.get_mut(i as usize) {
            *w = v;
        }
    }
    let word0 = got.0[0];
    let vals = r.opaque_var(MAX_ATTR_VALS)?;
    let below_size = (1u32 << (SIZE + 1)) - 1;
    if word0 & below_size != (1 << CHANGE) | (1 << SIZE) {
        return Err(XdrError::BadValue);
    }
    let mut v = XdrReader::new(vals);
    let change = v.u64()?;
    let size = v.u64()?;
    if size > attrs::MAX_FILE_SIZE {
        return Err(XdrError::BadValue);
    }
    let mut out = CbAttrs {
        size,
        change,
        ..CbAttrs::default()
    };
    // The times are next only if no attribute between size and them was sent.
    let rest = got.minus(&WANT);
    if !matches!(
        rest.bits().next(),
        Some(TIME_DELEG_ACCESS | TIME_DELEG_MODIFY)
    ) {
        return Ok(out);
    }
    if rest.has(TIME_DELEG_ACCESS) {
        out.atime = Some(nfstime(&mut v)?);
    }
    if rest.has(TIME_DELEG_MODIFY) {
        out.mtime = Some(nfstime(&mut v)?);
    }
    Ok(out)
}

/// A delegated time from the holder: a valid nfstime4 (RFC 8881 §3.3.1).
fn nfstime(v: &mut XdrReader) -> XdrResult<crate::fs::NfsTime> {
    let (sec, nsec) = (v.i64()?, v.u32()?);
    if !nfs_wire::delstid::time_valid(sec, nsec) || sec == i64::MIN {
        return Err(XdrError::BadValue);
    }
    Ok(crate::fs::NfsTime { sec, nsec })
}

#[cfg(test)]
#[path = "cb_getattr_tests.rs"]
mod tests;
