//! READ, WRITE and COMMIT (RFC 8881 §18.22, §18.32, §18.3): the stateid is checked by
//! the opens table (`Opens::check_io`); the mode bits only where no OPEN checked them
//! (`grant`). NFSv3's owner override does not apply: NFSv4 checks at OPEN.

use super::attrs::MAX_FILE_SIZE;
use super::file_ops::{cur_file, fs_err, ok_with};
use super::status::*;
use super::{put_status, Compound, Full, OpResult};
use crate::fs::access::*;
use crate::fs::{FileKind, SetAttr, Stable};
use crate::limits::MAX_IO;
use crate::state::opens::ACCESS_READ;
use crate::state::stateid::Stateid;
use crate::state::Conflict;
use engine::xdr::{XdrReader, XdrWriter};

/// READ and WRITE need a regular file: a directory (or pseudo directory) is
/// NFS4ERR_ISDIR, anything else NFS4ERR_INVAL.
pub(super) fn need_reg(kind: FileKind) -> Result<(), Nfsstat4> {
    match kind {
        FileKind::Reg => Ok(()),
        FileKind::Dir => Err(NFS4ERR_ISDIR),
        FileKind::Lnk => Err(NFS4ERR_INVAL),
        _ => Err(NFS4ERR_INVAL),
    }
}

/// How an I/O `sid` (resolved, accepted by `check_io` for `write`) grants access:
/// a special stateid (anonymous or bypass, RFC 8881 §8.2.3) was opened by no one, so
/// the mode bits decide, strictly; a delegation or an open with this access was
/// checked by its OPEN (§18.16.3). `check_io` let WRITE through only with an open or
/// lock stateid whose open has WRITE access; a READ it also lets through an open for
/// WRITE only (as knfsd, for the client's read-modify-write), and through a lock
/// stateid whose open this table cannot see: those the mode bits decide.
pub(super) fn grant(c: &Compound, sid: &Stateid, write: bool) -> Grant {
    let special = sid.other == [0; 12] || sid.other == [0xff; 12];
    if special {
        return Grant::Mode;
    }
    if write || c.state.delegations.owns(sid) {
        return Grant::Open;
    }
    match c.state.opens.open_modes(sid) {
        Some((access, _)) if access & ACCESS_READ != 0 => Grant::Open,
        _ => Grant::Mode,
    }
}

/// READ (RFC 8881 §18.22): data straight from the file model into the reply.
pub(super) fn read(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let (Ok(sid), Ok(offset), Ok(count)) = (Stateid::decode(r), r.u64(), r.u32()) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    let pre = (|| {
        let f = cur_file(c, NFS4ERR_ISDIR)?;
        need_reg(f.attr.kind)?;
        let sid = c.resolve_stateid(&sid)?;
        c.state.check_io(c.clientid, &sid, f.node.fileid, false)?;
        check_read_by(&f.attr, &f.caller, grant(c, &sid, false)).map_err(fs_err)?;
        super::deleg_ops::recall_for_read(c, f.node.fileid)?;
        // For the reactor cache fill (`fast::take_attr`).
        super::fast::note_attr(&f.attr);
        Ok(f)
    })();
    let f = match pre {
        Ok(f) => f,
        Err(e) => return put_status(w, e),
    };
    // status, eof, length: 12 bytes before the data.
    let room = w.remaining().saturating_sub(12) & !3;
    let n = (count as usize).min(MAX_IO).min(room);
    let start = w.position();
    NFS4_OK.put(w).map_err(|_| Full)?;
    let eof_at = w.reserve_u32().map_err(|_| Full)?;
    let len_at = w.reserve_u32().map_err(|_| Full)?;
    let data_at = w.position();
    let dst = w.reserve_opaque_fixed(n).map_err(|_| Full)?;
    match c.ctx.model.read(&f.node, offset, dst) {
        Ok((got, eof)) => {
            let got = got.min(n);
            w.truncate_opaque(data_at, got);
            w.patch_u32(eof_at, eof as u32);
            w.patch_u32(len_at, got as u32);
            // For the RDMA write list and the cache fill (`compound::run_ops`).
            c.data = Some(data_at..data_at + got);
            Ok(NFS4_OK)
        }
        Err(s) => {
            w.rewind(start);
            put_status(w, fs_err(s))
        }
    }
}

/// WRITE (RFC 8881 §18.32): stable_how4 maps onto the file model's `Stable`; the
/// verifier is the file model's write verifier.
pub(super) fn write(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let (Ok(sid), Ok(offset), Ok(how), Ok(data)) =
        (Stateid::decode(r), r.u64(), r.u32(), r.opaque_var(MAX_IO))
    else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    let stable = match how {
        0 => Stable::Unstable,
        1 => Stable::DataSync,
        2 => Stable::FileSync,
        _ => return put_status(w, NFS4ERR_BADXDR),
    };
    // Read before the data is written: a sync failing meanwhile moves it on
    // (`FileModel::write_verifier`).
    let verf = c.ctx.model.write_verifier();
    let res = (|| {
        let f = cur_file(c, NFS4ERR_ISDIR)?;
        need_reg(f.attr.kind)?;
        let sid = c.resolve_stateid(&sid)?;
        c.state.check_io(c.clientid, &sid, f.node.fileid, true)?;
        check_writable(&f.caller).map_err(fs_err)?;
        check_write_by(&f.attr, &f.caller, grant(c, &sid, true)).map_err(fs_err)?;
        match offset.checked_add(data.len() as u64) {
            Some(end) if end <= MAX_FILE_SIZE => {}
            _ => return Err(NFS4ERR_FBIG),
        }
        if !c
            .state
            .delegations
            .break_conflicts(f.node.fileid, Some(c.clientid), Conflict::Write)
        {
            return Err(NFS4ERR_DELAY);
        }
        // As NFSv3: a write by anyone but root clears the set-id bits first.
        if let Some(mode) = mode_after_write(&f.attr, &f.caller) {
            let set = SetAttr {
                mode: Some(mode),
                ..Default::default()
            };
            c.ctx.model.setattr(&f.node, &set).map_err(fs_err)?;
        }
        c.ctx
            .model
            .write(&f.node, offset, data, stable)
            .map_err(fs_err)
    })();
    match res {
        Ok(done) => ok_with(w, |w| {
            w.u32(data.len() as u32)?;
            w.u32(done as u32)?;
            w.opaque_fixed(&verf)
        }),
        Err(e) => put_status(w, e),
    }
}

/// COMMIT (RFC 8881 §18.3).
pub(super) fn commit(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let (Ok(offset), Ok(count)) = (r.u64(), r.u32()) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    let res = (|| {
        let f = cur_file(c, NFS4ERR_ISDIR)?;
        need_reg(f.attr.kind)?;
        if offset.checked_add(count as u64).is_none() {
            return Err(NFS4ERR_INVAL);
        }
        c.ctx.model.commit(&f.node).map_err(fs_err)
    })();
    match res {
        Ok(()) => {
            let verf = c.ctx.model.write_verifier();
            ok_with(w, |w| w.opaque_fixed(&verf))
        }
        Err(e) => put_status(w, e),
    }
}
