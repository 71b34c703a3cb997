//! NFSv4.2's data operations (RFC 7862 §15): ALLOCATE, DEALLOCATE, SEEK, READ_PLUS,
//! COPY, CLONE and IO_ADVISE. Each decodes its arguments, checks the stateids as
//! READ and WRITE do (`io_ops`), runs one call of the file service (`fs::v42`, which
//! checks the caller's access and the ranges) and encodes the result.
//!
//! COPY runs synchronously unless the client offers otherwise (ca_synchronous false)
//! for at least `ASYNC_COPY_MIN` bytes and its back channel answers: then it runs on a
//! thread of its own after the reply, which names it by a copy stateid; the client
//! hears the result by CB_OFFLOAD (`state::offload`, sent by the callback thread) or
//! asks OFFLOAD_STATUS, and may OFFLOAD_CANCEL it (RFC 7862 §15.2.3, §15.8, §15.9).

use super::file_ops::{fs_err, ok_with, FileCtx};
use super::io_ops::{grant, need_reg};
use super::status::*;
use super::{put_status, Compound, CurrentFh, Full, OpResult};
use crate::fs::access::{mode_after_write, Grant};
use crate::fs::v42::{Content, CopyArgs};
use crate::fs::{SetAttr, Stable};
use crate::limits::MAX_IO;
use crate::state::offload::OffloadOutcome;
use crate::state::stateid::Stateid;
use crate::state::Conflict;
use engine::xdr::{XdrReader, XdrWriter};

/// data_content4 (RFC 7862 §15.11.1 / §15.10.1).
pub(super) const NFS4_CONTENT_DATA: u32 = 0;
const NFS4_CONTENT_HOLE: u32 = 1;
/// stable_how4 FILE_SYNC4: COPY's data is durable before the reply.
const FILE_SYNC4: u32 = 2;
const UNSTABLE4: u32 = 0;
/// The smallest copy run asynchronously when the client offers it: below this the
/// copy costs less than the callback that would report it.
pub const ASYNC_COPY_MIN: u64 = 1 << 20;

/// The current filehandle as a regular file opened by `sid` for reading or writing
/// (the checks of READ and WRITE, RFC 8881 §18.22.3, §18.32.3), and how its access
/// is granted.
fn io_file(
    c: &Compound,
    fh: Option<&CurrentFh>,
    sid: &Stateid,
    write: bool,
) -> Result<(FileCtx, Grant), Nfsstat4> {
    let f = match fh.ok_or(NFS4ERR_NOFILEHANDLE)? {
        CurrentFh::Pseudo(_) => return Err(NFS4ERR_ISDIR),
        CurrentFh::File { node, .. } => super::file_ops::file_ctx(c, node)?,
    };
    need_reg(f.attr.kind)?;
    let sid = c.resolve_stateid(sid)?;
    c.state.check_io(c.clientid, &sid, f.node.fileid, write)?;
    if !write {
        // READ_PLUS, SEEK, a COPY's source: another client's write delegation is
        // recalled first, as for READ (RFC 8881 §10.4.3).
        super::deleg_ops::recall_for_read(c, f.node.fileid)?;
    }
    let g = grant(c, &sid, write);
    Ok((f, g))
}

/// What every change of a file's data does first, as WRITE: other clients'
/// delegations are recalled (NFS4ERR_DELAY meanwhile) and a caller other than root
/// clears the set-id bits.
fn before_data_change(c: &Compound, f: &FileCtx) -> Result<(), Nfsstat4> {
    if !c
        .state
        .delegations
        .break_conflicts(f.node.fileid, Some(c.clientid), Conflict::Write)
    {
        return Err(NFS4ERR_DELAY);
    }
    if let Some(mode) = mode_after_write(&f.attr, &f.caller) {
        let set = SetAttr {
            mode: Some(mode),
            ..Default::default()
        };
        c.ctx.model.setattr(&f.node, &set).map_err(fs_err)?;
    }
    Ok(())
}

/// ALLOCATE (RFC 7862 §15.1) and DEALLOCATE (§15.4): stateid, offset, length.
fn space(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter, allocate: bool) -> OpResult {
    let (Ok(sid), Ok(off), Ok(len)) = (Stateid::decode(r), r.u64(), r.u64()) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    let res = (|| {
        let (f, g) = io_file(c, c.cfh.as_ref(), &sid, true)?;
        before_data_change(c, &f)?;
        let m = &c.ctx.model;
        if allocate {
            m.allocate(&f.caller, g, &f.node, off, len).map_err(fs_err)
        } else {
            m.deallocate(&f.caller, g, &f.node, off, len)
                .map_err(fs_err)
        }
    })();
    put_status(w, res.err().unwrap_or(NFS4_OK))
}

pub(super) fn allocate(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    space(c, r, w, true)
}

pub(super) fn deallocate(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    space(c, r, w, false)
}

/// SEEK (RFC 7862 §15.11): the first data or hole at or after the offset.
pub(super) fn seek(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let (Ok(sid), Ok(off), Ok(what)) = (Stateid::decode(r), r.u64(), r.u32()) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    let res = (|| {
        // §15.11.3: a content type the server does not know.
        let what = match what {
            NFS4_CONTENT_DATA => Content::Data,
            NFS4_CONTENT_HOLE => Content::Hole,
            _ => return Err(NFS4ERR_UNION_NOTSUPP),
        };
        let (f, g) = io_file(c, c.cfh.as_ref(), &sid, false)?;
        c.ctx
            .model
            .seek(&f.caller, g, &f.node, off, what)
            .map_err(fs_err)
    })();
    match res {
        Ok(d) => ok_with(w, |w| {
            w.bool(d.eof)?;
            w.u64(d.offset)
        }),
        Err(e) => put_status(w, e),
    }
}

/// READ_PLUS (RFC 7862 §15.10): the range as data and hole segments, the data read
/// from the file into the reply. Segments that do not fit the reply are left out
/// (`eof` is then false and the client asks again from where they stop).
pub(super) fn read_plus(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let (Ok(sid), Ok(off), Ok(count)) = (Stateid::decode(r), r.u64(), r.u32()) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    let pre = (|| {
        let (f, g) = io_file(c, c.cfh.as_ref(), &sid, false)?;
        let want = (count as usize).min(MAX_IO) as u64;
        let ext = c
            .ctx
            .model
            .extents(&f.caller, g, &f.node, off, want)
            .map_err(fs_err)?;
        Ok((f, ext))
    })();
    let (f, ext) = match pre {
        Ok(v) => v,
        Err(e) => return put_status(w, e),
    };
    // For the reactor cache fill, as READ (`fast::note_attr`); its data only when
    // the reply is one data segment from the offset asked (below).
    super::fast::note_attr(&f.attr);
    let start = w.position();
    NFS4_OK.put(w).map_err(|_| Full)?;
    let eof_at = w.reserve_u32().map_err(|_| Full)?;
    let n_at = w.reserve_u32().map_err(|_| Full)?;
    let mut eof = ext.eof;
    let mut n = 0u32;
    // Where the first segment's data lies: content, offset and length come first.
    let first_data = w.position() + 4 + 8 + 4;
    for e in &ext.extents {
        match put_segment(c, &f, w, e) {
            Ok(Segment::Whole) => n += 1,
            Ok(cut) => {
                // No room, or the file shrank meanwhile: what follows is asked for
                // again.
                n += (cut == Segment::Short) as u32;
                eof = false;
                break;
            }
            Err(st) => {
                w.rewind(start);
                return put_status(w, st);
            }
        }
    }
    w.patch_u32(eof_at, eof as u32);
    w.patch_u32(n_at, n);
    match ext.extents.first() {
        Some(e) if n == 1 && e.what == Content::Data && e.offset == off => {
            super::fast::note_read_data(first_data, e.len as usize);
        }
        // A hole, several segments or nothing: no data the cache could keep as a
        // READ's (the fill then learns nothing of this call).
        _ => super::fast::forget(),
    }
    Ok(NFS4_OK)
}

/// How much of a segment `put_segment` wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Segment {
    Whole,
    /// Written with less data than the extent (the file shrank meanwhile).
    Short,
    /// Nothing written: no room left in the reply.
    NoRoom,
}

/// One read_plus_content4.
fn put_segment(
    c: &Compound,
    f: &FileCtx,
    w: &mut XdrWriter,
    e: &crate::fs::v42::Extent,
) -> Result<Segment, Nfsstat4> {
    let at = w.position();
    match e.what {
        Content::Hole => {
            if w.remaining() < 4 + 8 + 8 {
                return Ok(Segment::NoRoom);
            }
            let ok = w
                .u32(NFS4_CONTENT_HOLE)
                .and(w.u64(e.offset))
                .and(w.u64(e.len));
            if ok.is_err() {
                w.rewind(at);
                return Ok(Segment::NoRoom);
            }
            Ok(Segment::Whole)
        }
        Content::Data => {
            let len = e.len as usize;
            // content, offset, length word, the data padded.
            if w.remaining() < 4 + 8 + 4 + len.next_multiple_of(4) {
                return Ok(Segment::NoRoom);
            }
            let head = w.u32(NFS4_CONTENT_DATA).and(w.u64(e.offset));
            let len_at = w.reserve_u32();
            let (Ok(()), Ok(len_at)) = (head, len_at) else {
                w.rewind(at);
                return Ok(Segment::NoRoom);
            };
            let data_at = w.position();
            let Ok(dst) = w.reserve_opaque_fixed(len) else {
                w.rewind(at);
                return Ok(Segment::NoRoom);
            };
            let (got, _) = c.ctx.model.read(&f.node, e.offset, dst).map_err(fs_err)?;
            let got = got.min(len);
            w.truncate_opaque(data_at, got);
            w.patch_u32(len_at, got as u32);
            Ok(if got == len {
                Segment::Whole
            } else {
                Segment::Short
            })
        }
    }
}

/// COPY4args after the stateids: offsets, count, the two requirements and the
/// source servers (RFC 7862 §15.2.1).
struct CopyWant {
    src_off: u64,
    dst_off: u64,
    count: u64,
    /// ca_synchronous: false lets the server finish after its reply.
    synchronous: bool,
    /// netloc4 entries: an inter-server copy.
    servers: u32,
}

fn decode_copy(r: &mut XdrReader) -> Option<CopyWant> {
    let (src_off, dst_off, count) = (r.u64().ok()?, r.u64().ok()?, r.u64().ok()?);
    let (_consecutive, synchronous) = (r.bool().ok()?, r.bool().ok()?);
    let servers = r.u32().ok()?;
    // Each netloc4 (RFC 7862 §3.3) is a tag and one or two strings: 8 bytes or more.
    if servers as usize > r.remaining() / 8 {
        return None;
    }
    for _ in 0..servers {
        match r.u32().ok()? {
            // NL4_NAME, NL4_URL: one string; NL4_NETADDR: netid and address.
            1 | 2 => super::skip::opaque(r).ok()?,
            3 => {
                super::skip::opaque(r).ok()?;
                super::skip::opaque(r).ok()?;
            }
            _ => return None,
        }
    }
    Some(CopyWant {
        src_off,
        dst_off,
        count,
        synchronous,
        servers,
    })
}

/// The source (saved filehandle, read) and the target (current filehandle, write)
/// of a COPY or CLONE, checked, in one export (else NFS4ERR_XDEV, RFC 7862
/// §15.2.3), the target's delegations recalled and set-id bits cleared.
/// A file checked for I/O and how its access is granted.
type IoFile = (FileCtx, Grant);

fn copy_pair(
    c: &Compound,
    src_sid: &Stateid,
    dst_sid: &Stateid,
) -> Result<(IoFile, IoFile), Nfsstat4> {
    if c.sfh.is_none() {
        return Err(NFS4ERR_NOFILEHANDLE);
    }
    let src = io_file(c, c.sfh.as_ref(), src_sid, false)?;
    let dst = io_file(c, c.cfh.as_ref(), dst_sid, true)?;
    if src.0.node.export != dst.0.node.export {
        return Err(NFS4ERR_XDEV);
    }
    before_data_change(c, &dst.0)?;
    Ok((src, dst))
}

/// COPY (RFC 7862 §15.2), intra-server: SAVED_FH to CURRENT_FH, synchronous or
/// (when the client offers it and `offload_to` agrees) finished after the reply.
pub(super) fn copy(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let (Ok(src_sid), Ok(dst_sid)) = (Stateid::decode(r), Stateid::decode(r)) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    let Some(want) = decode_copy(r) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    let verf = c.ctx.model.write_verifier();
    let res = (|| {
        if want.servers != 0 {
            // An inter-server copy (§15.2.3, ca_source_server): not offered.
            return Err(NFS4ERR_NOTSUPP);
        }
        let ((s, sg), (d, dg)) = copy_pair(c, &src_sid, &dst_sid)?;
        let args = CopyArgs {
            src: &s.node,
            src_grant: sg,
            src_off: want.src_off,
            dst: &d.node,
            dst_grant: dg,
            dst_off: want.dst_off,
            count: want.count,
        };
        if let Some(sid) = offload_to(c, &want, &s, &d, &args) {
            return Ok(Copied::Later(sid));
        }
        c.ctx
            .model
            .copy(&d.caller, &args)
            .map(Copied::Now)
            .map_err(fs_err)
    })();
    match res {
        Ok(Copied::Now(done)) => ok_with(w, |w| {
            // write_response4: no callback id (done), count, committed, verifier.
            w.u32(0)?;
            w.u64(done.count)?;
            w.u32(stable_how(done.committed))?;
            w.opaque_fixed(&verf)?;
            // copy_requirements4: consecutive and synchronous, both met.
            w.bool(true)?;
            w.bool(true)
        }),
        Ok(Copied::Later(sid)) => ok_with(w, |w| {
            // write_response4 naming the copy (wr_callback_id); nothing copied yet.
            w.u32(1)?;
            sid.encode(w)?;
            w.u64(0)?;
            w.u32(UNSTABLE4)?;
            w.opaque_fixed(&verf)?;
            // copy_requirements4: consecutive, and not synchronous.
            w.bool(true)?;
            w.bool(false)
        }),
        Err(e) => put_status(w, e),
    }
}

/// What COPY answers: the copy done, or the stateid of the copy left running.
enum Copied {
    Now(crate::fs::v42::CopyDone),
    Later(Stateid),
}

fn stable_how(s: Stable) -> u32 {
    match s {
        Stable::Unstable => UNSTABLE4,
        Stable::DataSync => 1,
        Stable::FileSync => FILE_SYNC4,
    }
}

/// Starts the copy `args` on a thread of its own and returns its callback id, when
/// the client offered an asynchronous copy (§15.2.3) of at least `ASYNC_COPY_MIN`
/// bytes, its back channel answers (CB_OFFLOAD must be able to reach it) and the
/// offload table has room (`state::offload` bounds); `None`: run it now.
fn offload_to(
    c: &Compound,
    want: &CopyWant,
    src: &FileCtx,
    dst: &FileCtx,
    args: &CopyArgs<'_>,
) -> Option<Stateid> {
    let len = match want.count {
        0 => src.attr.size.saturating_sub(want.src_off),
        n => n,
    };
    if want.synchronous
        || len < ASYNC_COPY_MIN
        || c.session.is_none()
        || !c.state.delegations.callback_up(c.clientid)
    {
        return None;
    }
    let Some(CurrentFh::File { handle, .. }) = c.cfh.as_ref() else {
        return None;
    };
    let table = c.state.delegations.offloads.clone();
    let sid = table.start(c.clientid, handle)?;
    let job = OffloadJob {
        model: c.ctx.model.clone(),
        caller: dst.caller,
        src: args.src.clone(),
        src_grant: args.src_grant,
        src_off: args.src_off,
        dst: args.dst.clone(),
        dst_grant: args.dst_grant,
        dst_off: args.dst_off,
        count: args.count,
        other: sid.other,
        table: table.clone(),
        waker: c.state.delegations.inbox.waker(),
    };
    match std::thread::Builder::new()
        .name("nfs4-copy".into())
        .spawn(move || job.run())
    {
        Ok(_) => Some(sid),
        Err(e) => {
            tracing::warn!(error = %e, "no thread for an asynchronous COPY; copying now");
            table.abandon(&sid.other);
            None
        }
    }
}

/// An asynchronous COPY, owned by its thread: `CopyArgs` with the files owned.
struct OffloadJob {
    model: crate::fs::FileModel,
    caller: crate::export::Caller,
    src: crate::fs::Node,
    src_grant: Grant,
    src_off: u64,
    dst: crate::fs::Node,
    dst_grant: Grant,
    dst_off: u64,
    count: u64,
    other: [u8; 12],
    table: crate::state::offload::Offloads,
    waker: Option<std::thread::Thread>,
}

impl OffloadJob {
    /// Copies, records the outcome for OFFLOAD_STATUS and CB_OFFLOAD, and wakes the
    /// callback thread. A panic in the copy is the copy's failure, not the server's.
    fn run(self) {
        let args = CopyArgs {
            src: &self.src,
            src_grant: self.src_grant,
            src_off: self.src_off,
            dst: &self.dst,
            dst_grant: self.dst_grant,
            dst_off: self.dst_off,
            count: self.count,
        };
        let done = crate::supervise::request("nfs4: asynchronous COPY", || {
            self.model.copy(&self.caller, &args)
        });
        let outcome = match done {
            Ok(Ok(d)) => OffloadOutcome::Copied {
                count: d.count,
                file_sync: d.committed == Stable::FileSync,
                verifier: self.model.write_verifier(),
            },
            Ok(Err(e)) => OffloadOutcome::Failed {
                status: fs_err(e).as_u32(),
                copied: 0,
            },
            Err(_) => OffloadOutcome::Failed {
                status: NFS4ERR_SERVERFAULT.as_u32(),
                copied: 0,
            },
        };
        if self.table.finish(&self.other, outcome) {
            if let Some(t) = self.waker {
                t.unpark();
            }
        }
    }
}

/// OFFLOAD_STATUS (RFC 7862 §15.9): bytes copied so far (0 while running: a copy
/// inside the store reports no progress) and, once finished, its status.
pub(super) fn offload_status(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let Ok(sid) = Stateid::decode(r) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    let Some(state) = c.state.delegations.offloads.status(c.clientid, &sid) else {
        return put_status(w, NFS4ERR_BAD_STATEID);
    };
    ok_with(w, |w| match state {
        None => {
            w.u64(0)?;
            w.u32(0)
        }
        Some(OffloadOutcome::Copied { count, .. }) => {
            w.u64(count)?;
            w.u32(1)?;
            w.u32(NFS4_OK.as_u32())
        }
        Some(OffloadOutcome::Failed { status, copied }) => {
            w.u64(copied)?;
            w.u32(1)?;
            w.u32(status)
        }
    })
}

/// OFFLOAD_CANCEL (RFC 7862 §15.8): the copy is forgotten and no CB_OFFLOAD sent;
/// what the store already copied stays (§15.8.3 leaves the target's content to the
/// server).
pub(super) fn offload_cancel(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let Ok(sid) = Stateid::decode(r) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    let ok = c.state.delegations.offloads.cancel(c.clientid, &sid);
    put_status(w, if ok { NFS4_OK } else { NFS4ERR_BAD_STATEID })
}

/// CLONE (RFC 7862 §15.13): SAVED_FH's range shared into CURRENT_FH, all or nothing.
pub(super) fn clone(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let (Ok(src_sid), Ok(dst_sid), Ok(src_off), Ok(dst_off), Ok(count)) = (
        Stateid::decode(r),
        Stateid::decode(r),
        r.u64(),
        r.u64(),
        r.u64(),
    ) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    let res = (|| {
        let ((s, sg), (d, dg)) = copy_pair(c, &src_sid, &dst_sid)?;
        let args = CopyArgs {
            src: &s.node,
            src_grant: sg,
            src_off,
            dst: &d.node,
            dst_grant: dg,
            dst_off,
            count,
        };
        c.ctx.model.clone_range(&d.caller, &args).map_err(fs_err)
    })();
    put_status(w, res.err().unwrap_or(NFS4_OK))
}

/// IO_ADVISE (RFC 7862 §15.5): the hints are advice for the whole file (the range
/// is not looked at: read-ahead is per file). The answer names only the hints the
/// store acts on (`super::advise`): on s3, SEQUENTIAL/WILLNEED deepen its read-ahead
/// and RANDOM/DONTNEED turn it off for the file; stores without read-ahead (`fs`,
/// whose kernel page cache reads ahead by itself, and `memory`) act on none and
/// answer an empty bitmap, as before.
pub(super) fn io_advise(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let (Ok(sid), Ok(_off), Ok(_len)) = (Stateid::decode(r), r.u64(), r.u64()) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    let Ok((hints, _)) = super::attrs::get_bitmap(r) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    match io_file(c, c.cfh.as_ref(), &sid, false) {
        Ok((f, _)) => {
            let honoured = match super::advise::of(hints.0[0]) {
                Some((how, bits)) if c.ctx.model.advise(&f.node, how) => bits,
                _ => 0,
            };
            ok_with(w, |w| {
                // bitmap4: no word when nothing is acted on, else the first word.
                if honoured == 0 {
                    w.u32(0)
                } else {
                    w.u32(1)?;
                    w.u32(honoured)
                }
            })
        }
        Err(e) => put_status(w, e),
    }
}
