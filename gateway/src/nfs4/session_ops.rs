//! The COMPOUND loop and the session operations of NFSv4.1 (RFC 8881 §2.10, §18.35-§18.51).

use super::status::*;
use super::{put_status, Compound, OpResult};
use crate::nfs3::{Ctx, Outcome};
use engine::xdr::{XdrReader, XdrWriter};

/// COMPOUND4args → COMPOUND4res (RFC 8881 §16.2). Skeleton: the session layer owner
/// replaces it with the real loop (tag, minor version, SEQUENCE rules, reply cache).
pub(super) fn compound(
    ctx: &Ctx,
    state: &crate::state::State,
    args: &[u8],
    out: &mut XdrWriter,
) -> Outcome {
    let mut r = XdrReader::new(args);
    let (Ok(tag), Ok(minor), Ok(n)) = (r.opaque_var(1024), r.u32(), r.u32()) else {
        return Outcome::GarbageArgs;
    };
    let mut c = Compound {
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
    };
    let status_at = out
        .reserve_u32()
        .expect("reply buffer holds a COMPOUND header");
    if out.opaque_var(tag).is_err() {
        return Outcome::GarbageArgs;
    }
    let count_at = out
        .reserve_u32()
        .expect("reply buffer holds a COMPOUND header");
    let mut status = NFS4_OK;
    let mut done = 0u32;
    if minor != super::MINOR_VERSION {
        status = NFS4ERR_MINOR_VERS_MISMATCH;
    } else {
        for i in 0..n {
            c.op_index = i as usize;
            let Ok(op) = r.u32() else {
                status = NFS4ERR_BADXDR;
                break;
            };
            let f = super::op_fn(op);
            let op_out = if f.is_some() {
                op
            } else {
                super::ops::OP_ILLEGAL
            };
            if out.u32(op_out).is_err() {
                status = NFS4ERR_RESOURCE;
                break;
            }
            done += 1;
            let st = match f {
                Some(f) => f(&mut c, &mut r, out),
                None => put_status(out, NFS4ERR_OP_ILLEGAL),
            };
            match st {
                Ok(NFS4_OK) => {}
                Ok(s) => {
                    status = s;
                    break;
                }
                Err(super::Full) => {
                    status = NFS4ERR_RESOURCE;
                    break;
                }
            }
        }
    }
    out.patch_u32(status_at, status);
    out.patch_u32(count_at, done);
    Outcome::Done
}

pub(super) fn backchannel_ctl(
    _c: &mut Compound,
    _r: &mut XdrReader,
    w: &mut XdrWriter,
) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn bind_conn_to_session(
    _c: &mut Compound,
    _r: &mut XdrReader,
    w: &mut XdrWriter,
) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn exchange_id(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn create_session(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn destroy_session(
    _c: &mut Compound,
    _r: &mut XdrReader,
    w: &mut XdrWriter,
) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn sequence(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn destroy_clientid(
    _c: &mut Compound,
    _r: &mut XdrReader,
    w: &mut XdrWriter,
) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn reclaim_complete(
    _c: &mut Compound,
    _r: &mut XdrReader,
    w: &mut XdrWriter,
) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}
