//! Extended attributes in NFSv4.2 (RFC 8276 §8.4): GETXATTR, SETXATTR, LISTXATTRS
//! and REMOVEXATTR over the file service (`fs::v42`), which checks the names, the
//! values' limits and the caller's access. The pseudo directories above the exports
//! have none and cannot be given any.

use super::dir_ops::put_cinfo;
use super::file_ops::{cur_file, fs_err, ok_with, FileCtx};
use super::status::*;
use super::{put_status, Compound, CurrentFh, OpResult};
use crate::fs::v42::{XattrHow, XATTR_MAX_NAME, XATTR_MAX_VALUE};
use crate::state::Conflict;
use engine::xdr::{XdrReader, XdrWriter};

/// The longest name decoded: longer ones reach the file service, which answers
/// NFS4ERR_NAMETOOLONG, rather than failing to decode as NFS4ERR_BADXDR.
const NAME_DECODE_MAX: usize = 4 * XATTR_MAX_NAME;
/// The longest value decoded: a value past the store's limit is NFS4ERR_XATTR2BIG
/// (RFC 8276 §8.4.3.3), so values somewhat past the largest allowed still decode.
const VALUE_DECODE_MAX: usize = 2 * XATTR_MAX_VALUE;
/// LISTXATTRS4resok around the names: cookie, array length, eof.
const LIST_OVERHEAD: usize = 8 + 4 + 4;

/// setxattr_option4 (RFC 8276 §8.4.3.1).
const SETXATTR4_EITHER: u32 = 0;
const SETXATTR4_CREATE: u32 = 1;
const SETXATTR4_REPLACE: u32 = 2;

/// The current file for an attribute change: pseudo directories are read-only,
/// other clients' delegations are recalled first (a change of the file's
/// attributes, as SETATTR).
fn file_for_change(c: &Compound) -> Result<FileCtx, Nfsstat4> {
    let f = cur_file(c, NFS4ERR_ROFS)?;
    if !c
        .state
        .delegations
        .break_conflicts(f.node.fileid, Some(c.clientid), Conflict::Write)
    {
        return Err(NFS4ERR_DELAY);
    }
    Ok(f)
}

/// GETXATTR (RFC 8276 §8.4.2).
pub(super) fn getxattr(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let Ok(name) = r.opaque_var(NAME_DECODE_MAX) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    let res = (|| {
        let f = cur_file(c, NFS4ERR_NOXATTR)?;
        c.ctx
            .model
            .getxattr(&f.caller, &f.node, name)
            .map_err(fs_err)
    })();
    match res {
        Ok(v) => ok_with(w, |w| w.opaque_var(&v)),
        Err(e) => put_status(w, e),
    }
}

/// SETXATTR (RFC 8276 §8.4.3): the change_info4 of the file around the change.
pub(super) fn setxattr(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let (Ok(how), Ok(name), Ok(value)) = (
        r.u32(),
        r.opaque_var(NAME_DECODE_MAX),
        r.opaque_var(VALUE_DECODE_MAX),
    ) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    let res = (|| {
        let how = match how {
            SETXATTR4_EITHER => XattrHow::Either,
            SETXATTR4_CREATE => XattrHow::Create,
            SETXATTR4_REPLACE => XattrHow::Replace,
            _ => return Err(NFS4ERR_INVAL),
        };
        let f = file_for_change(c)?;
        let m = &c.ctx.model;
        m.setxattr(&f.caller, &f.node, name, value, how)
            .map_err(fs_err)?;
        Ok((f.attr, m.getattr(&f.node).ok()))
    })();
    match res {
        Ok((pre, post)) => ok_with(w, |w| put_cinfo(w, &pre, post.as_ref())),
        Err(e) => put_status(w, e),
    }
}

/// LISTXATTRS (RFC 8276 §8.4.4): the names after the cookie that fit `maxcount`
/// bytes of results.
pub(super) fn listxattrs(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let (Ok(cookie), Ok(maxcount)) = (r.u64(), r.u32()) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    let res = (|| {
        let room = (maxcount as usize)
            .min(w.remaining())
            .checked_sub(4 + LIST_OVERHEAD)
            .ok_or(NFS4ERR_TOOSMALL)?;
        match c.cfh.as_ref().ok_or(NFS4ERR_NOFILEHANDLE)? {
            // Nothing to list above the exports.
            CurrentFh::Pseudo(_) if cookie == 0 => Ok(None),
            CurrentFh::Pseudo(_) => Err(NFS4ERR_BAD_COOKIE),
            CurrentFh::File { .. } => {
                let f = cur_file(c, NFS4ERR_NOXATTR)?;
                let page = c.ctx.model.listxattrs(&f.caller, &f.node, cookie, room);
                page.map(Some).map_err(fs_err)
            }
        }
    })();
    match res {
        Ok(Some(p)) => ok_with(w, |w| {
            w.u64(p.cookie)?;
            w.u32(p.names.len() as u32)?;
            for n in &p.names {
                w.opaque_var(n)?;
            }
            w.bool(p.eof)
        }),
        Ok(None) => ok_with(w, |w| {
            w.u64(0)?;
            w.u32(0)?;
            w.bool(true)
        }),
        Err(e) => put_status(w, e),
    }
}

/// REMOVEXATTR (RFC 8276 §8.4.5).
pub(super) fn removexattr(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let Ok(name) = r.opaque_var(NAME_DECODE_MAX) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    let res = (|| {
        let f = file_for_change(c)?;
        let m = &c.ctx.model;
        m.removexattr(&f.caller, &f.node, name).map_err(fs_err)?;
        Ok((f.attr, m.getattr(&f.node).ok()))
    })();
    match res {
        Ok((pre, post)) => ok_with(w, |w| put_cinfo(w, &pre, post.as_ref())),
        Err(e) => put_status(w, e),
    }
}
