//! DELEGRETURN (RFC 8881 §18.6) over `crate::state::delegations`.

use super::status::*;
use super::{put_status, Compound, OpResult};
use engine::xdr::{XdrReader, XdrWriter};

pub(super) fn delegreturn(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}
