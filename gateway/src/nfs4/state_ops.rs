//! Stateful operations of NFSv4.1: opens, byte-range locks, stateids, delegation
//! return (RFC 8881 §18), over `crate::state`.

use super::status::*;
use super::{put_status, Compound, OpResult};
use engine::xdr::{XdrReader, XdrWriter};

pub(super) fn open(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn open_downgrade(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn close(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn lock(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn lockt(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn locku(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn test_stateid(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn free_stateid(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}
