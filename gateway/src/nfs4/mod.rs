//! NFSv4.1 (RFC 8881) and NFSv4.2 (RFC 7862, RFC 8276): the COMPOUND procedure over
//! the file model.
//!
//! `serve` runs on a backend worker thread, like `nfs3::serve`. It decodes the COMPOUND
//! header, runs each operation in order through the operation table below, and stops at
//! the first operation that fails (RFC 8881 §15.2 / §16.2.3). Each operation function
//! decodes its own arguments and writes its own `nfs_resop4` body (status first).
//!
//! Who owns what (parallel work, keep to your files):
//! - `compound.rs` (this loop's helpers), `session_ops.rs`, `file_ops.rs`, `attrs.rs`,
//!   `pseudo.rs`: the session layer and file operations.
//! - `state_ops.rs`: OPEN, OPEN_DOWNGRADE, CLOSE, LOCK, LOCKT, LOCKU, TEST_STATEID,
//!   FREE_STATEID, DELEGRETURN (over `crate::state::opens` / `locks`).
//! - `deleg_ops.rs` (DELEGRETURN), `callback.rs`: delegations and the backchannel
//!   (CB_COMPOUND encoding, CB_NULL, CB_RECALL).

mod advise;
mod attrs;
pub mod callback;
mod cb_getattr;
mod compound;
mod deleg_ops;
mod deleg_times;
mod device_list;
mod dir_ops;
pub mod fast;
pub mod fast_dirs;
pub mod fast_io;
pub mod fast_names;
mod file_ops;
mod io_ops;
mod layout_errors;
mod layout_ops;
pub mod ops;
pub mod plan;
mod pseudo;
mod session_ops;
pub mod skip;
mod state_ops;
pub mod status;
mod v42_ops;
mod xattr_ops;

use crate::call::{Ctx, Outcome};
use crate::fs::Node;
use crate::state::stateid::Stateid;
use engine::xdr::{XdrReader, XdrWriter};
use status::Nfsstat4;

/// NFS program version 4 (minor version in the COMPOUND arguments): nfs-wire's.
pub use nfs_wire::NFS_V4;
/// The minor version of the reactor's fast paths and of the callbacks the server
/// sends; NFSv4.2 COMPOUNDs use the same operations for them (RFC 7862 §1.3).
pub const MINOR_VERSION: u32 = 1;
/// The highest minor version this server knows (RFC 7862); `nfs4.max_minor_version`
/// may lower it. Others get NFS4ERR_MINOR_VERS_MISMATCH.
pub const MINOR_MAX: u32 = 2;

/// Whether the reactor's fast paths may take a COMPOUND of minor version `minor`: 4.1's
/// and 4.2's SEQUENCE, PUTFH, GETATTR, READ, WRITE and COMMIT are the same operations
/// (RFC 7862 §1.3). Whether 4.2 is served at all (`nfs4.max_minor_version`) is checked
/// against the session's state where the fast path answers (`fast::answer_parsed`,
/// `fast_io::start`); the worker answers NFS4ERR_MINOR_VERS_MISMATCH.
#[inline]
pub fn fast_minor(minor: u32) -> bool {
    minor == MINOR_VERSION || minor == MINOR_MAX
}

/// Whether a COMPOUND of minor version `minor` is served (1 ..= `max`, at most
/// [`MINOR_MAX`]).
pub fn serves_minor(minor: u32, max: u32) -> bool {
    (MINOR_VERSION..=max.min(MINOR_MAX)).contains(&minor)
}
/// Largest file handle (RFC 8881 NFS4_FHSIZE).
pub const FH4_MAX: usize = 128;

/// The reply buffer is full: the COMPOUND ends with NFS4ERR_REP_TOO_BIG (or
/// NFS4ERR_RESOURCE outside a session).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

/// What an operation function returns: the nfsstat4 it wrote (the COMPOUND stops at
/// the first that is not NFS4_OK), or `Full` when its results did not fit.
pub type OpResult = Result<Nfsstat4, Full>;

/// An operation: decodes its arguments from `r` (a decode failure writes
/// NFS4ERR_BADXDR and returns it), runs, writes status and results to `w`.
pub type OpFn = fn(&mut Compound, &mut XdrReader, &mut XdrWriter) -> OpResult;

pub use crate::conn::{ConnKind, ConnRef};

/// A current or saved filehandle (RFC 8881 §16.2.3.1.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CurrentFh {
    /// A directory of the pseudo file system above the exports ("/" has no
    /// components). Only LOOKUP, LOOKUPP, GETATTR, GETFH, ACCESS, READDIR and
    /// SECINFO work on it.
    Pseudo(Vec<Vec<u8>>),
    /// A file or directory of an export, with the handle clients see.
    File { node: Node, handle: Vec<u8> },
}

/// Everything one COMPOUND's operations share.
pub struct Compound<'a> {
    pub ctx: &'a Ctx<'a>,
    pub state: &'a crate::state::State,
    pub minor: u32,
    pub cfh: Option<CurrentFh>,
    pub sfh: Option<CurrentFh>,
    /// Current and saved stateid (RFC 8881 §16.2.3.1.2).
    pub current_stateid: Option<Stateid>,
    pub saved_stateid: Option<Stateid>,
    /// Set by SEQUENCE: the session and its client (0 = no SEQUENCE yet).
    pub session: Option<[u8; 16]>,
    pub clientid: u64,
    /// Index of the operation being run (0-based).
    pub op_index: usize,
    /// Number of operations in the COMPOUND.
    pub nops: usize,
    /// Where the running READ-class operation (READ, READLINK) put its data in the
    /// reply buffer, reported by its encoder: the COMPOUND loop notes it for the RDMA
    /// write list (RFC 8267 §6.4.1, `crate::ddp::note`) and the cache fill, so no
    /// one reads the result back.
    pub data: Option<std::ops::Range<usize>>,
    /// Attributes the operation that set the current filehandle read with it (PUTFH,
    /// LOOKUP), for the next operation only (`file_ops::cur_attr`).
    pub fresh: Option<Fresh>,
}

/// The attributes of file `fileid` as operation `op` read them.
#[derive(Debug, Clone, Copy)]
pub struct Fresh {
    pub op: usize,
    pub fileid: u64,
    pub attr: crate::fs::Attr,
}

/// Decodes the COMPOUND arguments, runs them, writes COMPOUND4res into `out`.
pub fn serve(
    ctx: &Ctx,
    state: &crate::state::State,
    proc_: u32,
    args: &[u8],
    out: &mut XdrWriter,
) -> Outcome {
    match proc_ {
        0 => Outcome::Done,
        1 => session_ops::compound(ctx, state, args, out),
        _ => Outcome::ProcUnavail,
    }
}

/// The operation table (RFC 8881 §18): operation number → function. Unknown numbers
/// get NFS4ERR_OP_ILLEGAL as OP_ILLEGAL (RFC 8881 §15.2).
pub(crate) fn op_fn(op: u32) -> Option<OpFn> {
    use ops::*;
    Some(match op {
        OP_ACCESS => file_ops::access,
        OP_CLOSE => state_ops::close,
        OP_COMMIT => file_ops::commit,
        OP_CREATE => file_ops::create,
        OP_DELEGPURGE => file_ops::notsupp,
        OP_DELEGRETURN => deleg_ops::delegreturn,
        OP_GETATTR => file_ops::getattr,
        OP_GETFH => file_ops::getfh,
        OP_LINK => file_ops::link,
        OP_LOCK => state_ops::lock,
        OP_LOCKT => state_ops::lockt,
        OP_LOCKU => state_ops::locku,
        OP_LOOKUP => file_ops::lookup,
        OP_LOOKUPP => file_ops::lookupp,
        OP_NVERIFY => file_ops::nverify,
        OP_OPEN => state_ops::open,
        OP_OPENATTR => file_ops::notsupp,
        OP_OPEN_CONFIRM => file_ops::notsupp_v41,
        OP_OPEN_DOWNGRADE => state_ops::open_downgrade,
        OP_PUTFH => file_ops::putfh,
        OP_PUTPUBFH => file_ops::putpubfh,
        OP_PUTROOTFH => file_ops::putrootfh,
        OP_READ => file_ops::read,
        OP_READDIR => file_ops::readdir,
        OP_READLINK => file_ops::readlink,
        OP_REMOVE => file_ops::remove,
        OP_RENAME => file_ops::rename,
        OP_RENEW => file_ops::notsupp_v41,
        OP_RESTOREFH => file_ops::restorefh,
        OP_SAVEFH => file_ops::savefh,
        OP_SECINFO => file_ops::secinfo,
        OP_SETATTR => file_ops::setattr,
        OP_SETCLIENTID | OP_SETCLIENTID_CONFIRM | OP_RELEASE_LOCKOWNER => file_ops::notsupp_v41,
        OP_VERIFY => file_ops::verify,
        OP_WRITE => file_ops::write,
        OP_BACKCHANNEL_CTL => session_ops::backchannel_ctl,
        OP_BIND_CONN_TO_SESSION => session_ops::bind_conn_to_session,
        OP_EXCHANGE_ID => session_ops::exchange_id,
        OP_CREATE_SESSION => session_ops::create_session,
        OP_DESTROY_SESSION => session_ops::destroy_session,
        OP_FREE_STATEID => state_ops::free_stateid,
        OP_GET_DIR_DELEGATION => file_ops::notsupp,
        // pNFS (flexible files): NFS4ERR_NOTSUPP unless `[pnfs]` is on.
        OP_GETDEVICEINFO => layout_ops::getdeviceinfo,
        OP_GETDEVICELIST => device_list::getdevicelist,
        OP_LAYOUTCOMMIT => layout_ops::layoutcommit,
        OP_LAYOUTGET => layout_ops::layoutget,
        OP_LAYOUTRETURN => layout_ops::layoutreturn,
        OP_SECINFO_NO_NAME => file_ops::secinfo_no_name,
        OP_SEQUENCE => session_ops::sequence,
        OP_SET_SSV => file_ops::notsupp,
        OP_TEST_STATEID => state_ops::test_stateid,
        OP_WANT_DELEGATION => file_ops::notsupp,
        OP_DESTROY_CLIENTID => session_ops::destroy_clientid,
        OP_RECLAIM_COMPLETE => session_ops::reclaim_complete,
        // NFSv4.2 (minor version 2 only: `op_fn_in`).
        OP_ALLOCATE => v42_ops::allocate,
        OP_COPY => v42_ops::copy,
        OP_DEALLOCATE => v42_ops::deallocate,
        OP_IO_ADVISE => v42_ops::io_advise,
        OP_READ_PLUS => v42_ops::read_plus,
        OP_SEEK => v42_ops::seek,
        OP_CLONE => v42_ops::clone,
        OP_GETXATTR => xattr_ops::getxattr,
        OP_SETXATTR => xattr_ops::setxattr,
        OP_LISTXATTRS => xattr_ops::listxattrs,
        OP_REMOVEXATTR => xattr_ops::removexattr,
        OP_OFFLOAD_STATUS => v42_ops::offload_status,
        OP_OFFLOAD_CANCEL => v42_ops::offload_cancel,
        // pNFS's reports (NFS4ERR_NOTSUPP unless `[pnfs]` is on).
        OP_LAYOUTERROR => layout_errors::layouterror,
        OP_LAYOUTSTATS => layout_errors::layoutstats,
        // Not offered (docs/nfs42.md): inter-server copy (COPY_NOTIFY), WRITE_SAME.
        OP_COPY_NOTIFY | OP_WRITE_SAME => file_ops::notsupp,
        _ => return None,
    })
}

/// The operation table for a COMPOUND of minor version `minor`: NFSv4.2's
/// operations (RFC 7862 §11.1: 59 and up) do not exist in NFSv4.1, where they are
/// NFS4ERR_OP_ILLEGAL like any unknown number.
pub(crate) fn op_fn_in(op: u32, minor: u32) -> Option<OpFn> {
    if op >= ops::OP_ALLOCATE && minor < 2 {
        return None;
    }
    op_fn(op)
}

/// Writes a bare status (the result of every failed operation without extra results).
pub(crate) fn put_status(w: &mut XdrWriter, st: Nfsstat4) -> OpResult {
    st.put(w).map_err(|_| Full)?;
    Ok(st)
}

#[cfg(test)]
mod skip_prop_tests;
#[cfg(test)]
mod tests;
