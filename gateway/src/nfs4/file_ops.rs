//! File operations of NFSv4.1 (RFC 8881 §18) over the file model.

use super::status::*;
use super::{put_status, Compound, OpResult};
use engine::xdr::{XdrReader, XdrWriter};

/// Operations this server does not offer (pNFS, directory delegations, OPENATTR).
pub(super) fn notsupp(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

/// NFSv4.0-only operations sent in a 4.1 COMPOUND (RFC 8881 §18.x: MUST NOT be used).
pub(super) fn notsupp_v41(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn access(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn commit(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn create(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn getattr(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn getfh(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn link(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn lookup(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn lookupp(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn nverify(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn putfh(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn putpubfh(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn putrootfh(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn read(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn readdir(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn readlink(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn remove(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn rename(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn restorefh(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn savefh(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn secinfo(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn setattr(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn verify(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn write(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

pub(super) fn secinfo_no_name(
    _c: &mut Compound,
    _r: &mut XdrReader,
    w: &mut XdrWriter,
) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}
