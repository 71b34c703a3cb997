//! File operations of NFSv4.1 (RFC 8881 §18) over the file model: filehandles,
//! LOOKUP/LOOKUPP, ACCESS, GETATTR/SETATTR, VERIFY/NVERIFY, READLINK, SECINFO.
//! Permission checks: `fs::access` after `export::admit`.

use super::attrs::{self, Bitmap, Env, Obj};
use super::status::*;
use super::{pseudo, put_status, Compound, CurrentFh, Full, OpResult, FH4_MAX};
use crate::export::{admit, Caller};
use crate::fs::access::*;
use crate::fs::{Attr, FileKind, Node};
use crate::state::stateid::Stateid;
use engine::xdr::{XdrReader, XdrResult, XdrWriter};

pub(super) use super::dir_ops::{create, link, readdir, remove, rename};
pub(super) use super::io_ops::{commit, read, write};

/// Operations this server does not offer (pNFS, directory delegations, OPENATTR).
pub(super) fn notsupp(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

/// NFSv4.0-only operations sent in a 4.1 COMPOUND (RFC 8881 §18.x: MUST NOT be used).
pub(super) fn notsupp_v41(_c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    put_status(w, NFS4ERR_NOTSUPP)
}

/// Writes NFS4_OK and the results `f` encodes.
pub(super) fn ok_with(
    w: &mut XdrWriter,
    f: impl FnOnce(&mut XdrWriter) -> XdrResult<()>,
) -> OpResult {
    NFS4_OK.put(w).map_err(|_| Full)?;
    f(w).map_err(|_| Full)?;
    Ok(NFS4_OK)
}

pub(super) fn fs_err(s: crate::fs::Status) -> Nfsstat4 {
    from_fs(s)
}

/// The current filehandle (RFC 8881 §16.2.3.1.1: none → NFS4ERR_NOFILEHANDLE).
pub(super) fn cur<'c>(c: &'c Compound) -> Result<&'c CurrentFh, Nfsstat4> {
    c.cfh.as_ref().ok_or(NFS4ERR_NOFILEHANDLE)
}

/// Who the caller is on `node`'s export (client network check and squashing).
pub(super) fn caller(c: &Compound, node: &Node) -> Result<Caller, Nfsstat4> {
    let e = c.ctx.exports.get(node.export).ok_or(NFS4ERR_STALE)?;
    admit(e, c.ctx.client.ip(), &c.ctx.cred).map_err(|_| NFS4ERR_ACCESS)
}

/// A file of an export as the current filehandle, with its caller and attributes.
pub(super) struct FileCtx {
    pub node: Node,
    pub caller: Caller,
    pub attr: Attr,
}

/// The current filehandle when it is a file of an export; `pseudo_err` for a pseudo
/// directory.
pub(super) fn cur_file(c: &Compound, pseudo_err: Nfsstat4) -> Result<FileCtx, Nfsstat4> {
    match cur(c)? {
        CurrentFh::Pseudo(_) => Err(pseudo_err),
        CurrentFh::File { node, .. } => file_ctx(c, node),
    }
}

pub(super) fn file_ctx(c: &Compound, node: &Node) -> Result<FileCtx, Nfsstat4> {
    let caller = caller(c, node)?;
    let attr = c.ctx.model.getattr(node).map_err(fs_err)?;
    Ok(FileCtx {
        node: node.clone(),
        caller,
        attr,
    })
}

/// Sets the current filehandle; the current stateid no longer applies to it
/// (RFC 8881 §16.2.3.1.2).
pub(super) fn set_cfh(c: &mut Compound, fh: CurrentFh) {
    c.cfh = Some(fh);
    c.current_stateid = None;
}

/// The attributes of `node`: those the previous operation read when it made `node`
/// the current filehandle (PUTFH, LOOKUP: `Compound::fresh`), else read now. Only the
/// operation right after may take them, so nothing of this COMPOUND ran in between
/// and they are what a read at that instant gave (one store HEAD, not two, for the
/// `PUTFH, GETATTR` and `PUTFH, LOOKUP, GETATTR` a stat sends). Called only by
/// operations that change nothing (GETATTR, VERIFY, NVERIFY, ACCESS, LOOKUP's
/// directory), never after a change an operation made itself.
pub(super) fn cur_attr(c: &Compound, node: &Node) -> Result<Attr, Nfsstat4> {
    match c.fresh {
        Some(f) if f.op + 1 == c.op_index && f.fileid == node.fileid => Ok(f.attr),
        _ => c.ctx.model.getattr(node).map_err(fs_err),
    }
}

/// Whether the operation after this one (past GETFHs, which pass the attributes on:
/// `getfh`) reads the current filehandle's attributes first thing (`cur_attr`),
/// judged from its number (`r` is past this operation's arguments): only then are
/// they worth computing with the filehandle (a PUTFH before a READ, or a LOOKUP
/// before a GETFH alone, needs none).
fn next_takes_attrs(c: &Compound, r: &XdrReader) -> bool {
    use super::ops::{OP_ACCESS, OP_GETATTR, OP_GETFH, OP_LOOKUP, OP_NVERIFY, OP_VERIFY};
    let mut r = r.clone();
    for _ in c.op_index + 1..c.nops {
        match r.u32() {
            // GETFH has no arguments: the next number follows.
            Ok(OP_GETFH) => continue,
            Ok(op) => {
                return matches!(
                    op,
                    OP_GETATTR | OP_ACCESS | OP_LOOKUP | OP_VERIFY | OP_NVERIFY
                )
            }
            Err(_) => return false,
        }
    }
    false
}

/// Notes `attr` as read with the current filehandle `node` by this operation.
fn note_fresh(c: &mut Compound, node: &Node, attr: Attr) {
    c.fresh = Some(super::Fresh {
        op: c.op_index,
        fileid: node.fileid,
        attr,
    });
}

pub(super) fn file_fh(c: &Compound, node: Node) -> CurrentFh {
    let handle = c.ctx.model.handle(&node).as_bytes().to_vec();
    CurrentFh::File { node, handle }
}

/// component4 checks (RFC 8881 §14.5; knfsd's check_filename): empty or not UTF-8 →
/// NFS4ERR_INVAL, too long → NFS4ERR_NAMETOOLONG, "." "..", '/' or NUL →
/// NFS4ERR_BADNAME.
pub(super) fn check_component(name: &[u8]) -> Result<(), Nfsstat4> {
    if name.is_empty() {
        return Err(NFS4ERR_INVAL);
    }
    if name.len() > attrs::NAME_MAX as usize {
        return Err(NFS4ERR_NAMETOOLONG);
    }
    if std::str::from_utf8(name).is_err() {
        return Err(NFS4ERR_INVAL);
    }
    if is_dot(name) || name.iter().any(|&b| b == b'/' || b == 0) {
        return Err(NFS4ERR_BADNAME);
    }
    Ok(())
}

/// Reads a component4 (longer than any name: NFS4ERR_NAMETOOLONG after decoding).
pub(super) fn get_component<'a>(r: &mut XdrReader<'a>) -> Result<&'a [u8], Nfsstat4> {
    r.opaque_var(4096).map_err(|_| NFS4ERR_BADXDR)
}

/// The attributes of the current object.
pub(super) fn obj_of(
    c: &Compound,
    fh: &CurrentFh,
) -> Result<(Obj<'static>, Option<Node>), Nfsstat4> {
    match fh {
        CurrentFh::Pseudo(p) => Ok((pseudo::attrs(p), None)),
        CurrentFh::File { node, handle } => {
            caller(c, node)?;
            let a = cur_attr(c, node)?;
            super::fast::note_attr(&a);
            Ok((Obj::from_attr(&a, handle.clone()), Some(node.clone())))
        }
    }
}

/// Server-wide attribute values, with FSSTAT fetched only when asked for.
pub(super) fn env(c: &Compound, want: &Bitmap, node: Option<&Node>) -> Env {
    let fsstat = match node {
        Some(n) if !want.and(&attrs::FSSTAT_ATTRS).is_empty() => c.ctx.model.fsstat(n).ok(),
        None if !want.and(&attrs::FSSTAT_ATTRS).is_empty() => Some(Default::default()),
        _ => None,
    };
    Env {
        lease_s: c.state.clients.limits.lease.as_secs().min(u32::MAX as u64) as u32,
        max_file_size: c.ctx.model.max_file_size().min(attrs::MAX_FILE_SIZE),
        fsstat,
        v42: (c.minor >= 2).then(|| attrs::V42Env {
            clone_blksize: c.ctx.model.clone_block().min(u32::MAX as u64) as u32,
        }),
        pnfs_blksize: c.state.layouts.devices().map(|d| d.stripe_unit),
    }
}

/// PUTROOTFH (RFC 8881 §18.21).
pub(super) fn putrootfh(c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    match pseudo::root(c.ctx) {
        Ok(fh) => {
            set_cfh(c, fh);
            put_status(w, NFS4_OK)
        }
        Err(e) => put_status(w, e),
    }
}

/// PUTPUBFH (RFC 8881 §18.20): the public filehandle is the root.
pub(super) fn putpubfh(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    putrootfh(c, r, w)
}

/// PUTFH (RFC 8881 §18.19): file-model handles (NFSv3's) and pseudo handles.
pub(super) fn putfh(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let Ok(fh) = r.opaque_var(FH4_MAX) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    let res = if fh.is_empty() {
        Err(NFS4ERR_BADHANDLE)
    } else if pseudo::is_pseudo_handle(fh) {
        pseudo::resolve(c.ctx, fh)
    } else if fh.len() > crate::fs::FH_MAX {
        Err(NFS4ERR_BADHANDLE)
    } else if next_takes_attrs(c, r) {
        match c.ctx.model.resolve_attr(fh) {
            Ok((node, attr)) => {
                note_fresh(c, &node, attr);
                Ok(CurrentFh::File {
                    node,
                    handle: fh.to_vec(),
                })
            }
            Err(e) => Err(fs_err(e)),
        }
    } else {
        c.ctx
            .model
            .resolve(fh)
            .map(|node| CurrentFh::File {
                node,
                handle: fh.to_vec(),
            })
            .map_err(fs_err)
    };
    match res {
        Ok(fh) => {
            set_cfh(c, fh);
            put_status(w, NFS4_OK)
        }
        Err(e) => put_status(w, e),
    }
}

/// GETFH (RFC 8881 §18.8).
pub(super) fn getfh(c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    // GETFH reads and changes nothing: attributes the previous operation read with
    // the filehandle stay the next one's (the Linux client's `PUTFH, LOOKUP, GETFH,
    // GETATTR`).
    if let Some(f) = c.fresh.as_mut().filter(|f| f.op + 1 == c.op_index) {
        f.op = c.op_index;
    }
    let fh = match cur(c) {
        Ok(CurrentFh::Pseudo(p)) => pseudo::handle(p),
        Ok(CurrentFh::File { handle, .. }) => handle.clone(),
        Err(e) => return put_status(w, e),
    };
    ok_with(w, |w| w.opaque_var(&fh))
}

/// SAVEFH (RFC 8881 §18.32): saves the filehandle and the current stateid.
pub(super) fn savefh(c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    match c.cfh.clone() {
        Some(fh) => {
            c.sfh = Some(fh);
            c.saved_stateid = c.current_stateid;
            put_status(w, NFS4_OK)
        }
        None => put_status(w, NFS4ERR_NOFILEHANDLE),
    }
}

/// RESTOREFH (RFC 8881 §18.27): no saved filehandle → NFS4ERR_RESTOREFH.
pub(super) fn restorefh(c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    match c.sfh.clone() {
        Some(fh) => {
            c.cfh = Some(fh);
            c.current_stateid = c.saved_stateid;
            put_status(w, NFS4_OK)
        }
        None => put_status(w, NFS4ERR_RESTOREFH),
    }
}

/// The directory `name` is looked up in must be one: symlink → NFS4ERR_SYMLINK,
/// anything else NFS4ERR_NOTDIR (RFC 8881 §18.15.3).
pub(super) fn need_dir(a: &Attr) -> Result<(), Nfsstat4> {
    match a.kind {
        FileKind::Dir => Ok(()),
        FileKind::Lnk => Err(NFS4ERR_SYMLINK),
        _ => Err(NFS4ERR_NOTDIR),
    }
}

/// LOOKUP (RFC 8881 §18.15), crossing from pseudo directories into exports and
/// between nested exports.
pub(super) fn lookup(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let name = match get_component(r) {
        Ok(n) => n,
        Err(e) => return put_status(w, e),
    };
    let res = (|| {
        let fh = cur(c)?.clone();
        let node = match &fh {
            CurrentFh::Pseudo(p) => {
                check_component(name)?;
                return pseudo::at_path(c.ctx, &pseudo::child_path(p, name));
            }
            CurrentFh::File { node, .. } => node,
        };
        let caller = caller(c, node)?;
        let a = cur_attr(c, node)?;
        need_dir(&a)?;
        check_component(name)?;
        check(&a, &caller, X).map_err(fs_err)?;
        if let Some(cross) = pseudo::export_child(c.ctx, node, name) {
            return Ok(cross);
        }
        if !next_takes_attrs(c, r) {
            let child = c.ctx.model.lookup(node, name).map_err(fs_err)?;
            return Ok(file_fh(c, child));
        }
        let (child, attr) = c.ctx.model.lookup_attr(node, name).map_err(fs_err)?;
        note_fresh(c, &child, attr);
        let fh = file_fh(c, child);
        note_entry(node, &fh, attr, a);
        Ok(fh)
    })();
    match res {
        Ok(fh) => {
            set_cfh(c, fh);
            put_status(w, NFS4_OK)
        }
        Err(e) => put_status(w, e),
    }
}

/// Notes the entry a LOOKUP found for the reactor's names (`call::note_named`, as
/// NFSv3's LOOKUP notes it; kept only for `SEQUENCE, PUTFH, LOOKUP[, GETFH],
/// GETATTR`, `cache::names::EntrySeen::v4`): a regular file or directory in the
/// directory's own export (an export crossing returned before and notes nothing),
/// with the model's attributes of both.
fn note_entry(dir: &Node, fh: &CurrentFh, obj_attr: Attr, dir_attr: Attr) {
    let CurrentFh::File { node, handle } = fh else {
        return;
    };
    if node.export != dir.export || !matches!(obj_attr.kind, FileKind::Reg | FileKind::Dir) {
        return;
    }
    if let Some(obj) = crate::cache::FhKey::new(handle) {
        crate::call::note_named(crate::call::Named {
            obj,
            obj_attr: Some(obj_attr),
            dir_attr: Some(dir_attr),
            made: false,
        });
    }
}

/// LOOKUPP (RFC 8881 §18.16): the parent; from an export's root the pseudo directory
/// above it; from the root NFS4ERR_NOENT.
pub(super) fn lookupp(c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let res = (|| match cur(c)?.clone() {
        CurrentFh::Pseudo(mut p) => {
            if p.pop().is_none() {
                return Err(NFS4ERR_NOENT);
            }
            pseudo::at_path(c.ctx, &p)
        }
        CurrentFh::File { node, .. } => {
            let caller = caller(c, &node)?;
            let a = c.ctx.model.getattr(&node).map_err(fs_err)?;
            need_dir(&a)?;
            check(&a, &caller, X).map_err(fs_err)?;
            let root = c.ctx.model.root(node.export).map_err(fs_err)?;
            if root.fileid == node.fileid {
                return pseudo::export_parent(c.ctx, node.export);
            }
            let parent = c.ctx.model.lookup(&node, b"..").map_err(fs_err)?;
            Ok(file_fh(c, parent))
        }
    })();
    match res {
        Ok(fh) => {
            set_cfh(c, fh);
            put_status(w, NFS4_OK)
        }
        Err(e) => put_status(w, e),
    }
}

/// ACCESS4 bits this server evaluates (READ, LOOKUP, MODIFY, EXTEND, DELETE, EXECUTE).
const ACCESS_ALL: u32 = 0x3f;
/// RFC 8276 §8.4.1: ACCESS4_XAREAD, ACCESS4_XAWRITE, ACCESS4_XALIST (NFSv4.2).
const ACCESS4_XAREAD: u32 = 0x40;
const ACCESS4_XAWRITE: u32 = 0x80;
const ACCESS4_XALIST: u32 = 0x100;

/// The extended-attribute bits granted with `granted` (the file service's rule:
/// reading and listing need read access, changing needs MODIFY).
fn xattr_access(granted: u32) -> u32 {
    let read = if granted & 0x1 != 0 {
        ACCESS4_XAREAD | ACCESS4_XALIST
    } else {
        0
    };
    read | if granted & 0x4 != 0 {
        ACCESS4_XAWRITE
    } else {
        0
    }
}

/// ACCESS (RFC 8881 §18.1): the same bits and rules as NFSv3 ACCESS.
pub(super) fn access(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let Ok(want) = r.u32() else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    let all = if c.minor >= 2 {
        ACCESS_ALL | ACCESS4_XAREAD | ACCESS4_XAWRITE | ACCESS4_XALIST
    } else {
        ACCESS_ALL
    };
    let res = (|| match cur(c)? {
        // Pseudo directories: read and search only.
        CurrentFh::Pseudo(_) => Ok(want & (0x1 | 0x2 | 0x20)),
        CurrentFh::File { node, .. } => {
            let (caller, attr) = (caller(c, node)?, cur_attr(c, node)?);
            let mask = access_mask(&attr, &caller);
            Ok(want & (mask | xattr_access(mask)))
        }
    })();
    match res {
        Ok(granted) => ok_with(w, |w| {
            w.u32(want & all)?;
            w.u32(granted & all)
        }),
        Err(e) => put_status(w, e),
    }
}

/// GETATTR (RFC 8881 §18.7).
pub(super) fn getattr(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let Ok((want, _)) = attrs::get_bitmap(r) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    if !want.and(&attrs::WRITE_ONLY).is_empty() {
        return put_status(w, NFS4ERR_INVAL);
    }
    let holders_size = match cur(c) {
        Ok(CurrentFh::File { node, .. }) => super::deleg_ops::attrs_for_getattr(c, node, &want),
        Ok(_) => Ok(None),
        Err(e) => Err(e),
    };
    if let Ok(Some(_)) = holders_size {
        // Settling moved the file's times in the model (§10.4.3): what PUTFH or
        // LOOKUP read before is stale now, so read again.
        c.fresh = None;
    }
    let res = holders_size.and_then(|_| cur(c).and_then(|fh| obj_of(c, fh)));
    let holders_size = holders_size.ok().flatten();
    match res {
        Ok((mut o, node)) => {
            // §10.4.3: the size the write delegation's holder reported.
            if let Some(size) = holders_size {
                o.size = size;
            }
            let env = env(c, &want, node.as_ref());
            ok_with(w, |w| attrs::put_fattr(w, &want, &o, &env).map(|_| ()))
        }
        Err(e) => put_status(w, e),
    }
}

/// SETATTR (RFC 8881 §18.30): NFSv3's permission rules; a size change checks the
/// stateid (`Opens::check_io`) and breaks delegations of other clients first.
pub(super) fn setattr(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let Ok(sid) = Stateid::decode(r) else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    let new = attrs::get_new_attrs_in(r, c.minor >= 2);
    let res = (|| {
        let new = new?;
        let f = cur_file(c, NFS4ERR_ROFS)?;
        check_writable(&f.caller).map_err(fs_err)?;
        // RFC 9754 §6.1: delegated times only from their delegation's holder
        // (checked first: a refusal recalls nothing), no owner check (the
        // delegation is the authority), vetted against the grant's times.
        let delegated = super::deleg_times::vetted(c, &sid, f.node.fileid, &new)?;
        let mut size_grant = Grant::Mode;
        if let Some(size) = new.set.size {
            match f.attr.kind {
                FileKind::Reg => {}
                FileKind::Dir => return Err(NFS4ERR_ISDIR),
                _ => return Err(NFS4ERR_INVAL),
            }
            let sid = c.resolve_stateid(&sid)?;
            c.state.check_io(c.clientid, &sid, f.node.fileid, true)?;
            if size > attrs::MAX_FILE_SIZE {
                return Err(NFS4ERR_FBIG);
            }
            // ftruncate(2) of an open for writing needs nothing more; truncate(2)
            // (a special stateid, RFC 8881 §18.30.3) needs w, for the owner too.
            size_grant = super::io_ops::grant(c, &sid, true);
        }
        if !c.state.delegations.break_conflicts(
            f.node.fileid,
            Some(c.clientid),
            crate::state::Conflict::Write,
        ) {
            return Err(NFS4ERR_DELAY);
        }
        if new.set.size.is_some() {
            // A truncate changes what other clients' pNFS layouts map (§12.5.5).
            super::layout_ops::recall_conflicts(c, f.node.fileid)?;
        }
        check_setattr(&f.attr, &f.caller, &new.set, size_grant).map_err(fs_err)?;
        let mut set = sanitize_setattr(&f.attr, &f.caller, &new.set);
        if let Some(times) = delegated {
            super::deleg_times::merge(&mut set, times);
        }
        // Delegated times all ignored (none after the grant's) and nothing else:
        // nothing to store.
        if delegated.is_none() || set != crate::fs::SetAttr::default() {
            c.ctx.model.setattr(&f.node, &set).map_err(fs_err)?;
        }
        Ok(new.given)
    })();
    let (st, set) = match res {
        Ok(b) => (NFS4_OK, b),
        Err(e) => (e, Bitmap::default()),
    };
    st.put(w).map_err(|_| Full)?;
    attrs::put_bitmap(w, &set).map_err(|_| Full)?;
    Ok(st)
}

/// VERIFY (RFC 8881 §18.31) and NVERIFY (§18.15): compare the given attributes with
/// ours, byte for byte.
fn same_attrs(c: &Compound, r: &mut XdrReader) -> Result<bool, Nfsstat4> {
    let (bits, list) = attrs::get_raw_fattr(r)?;
    let fh = cur(c)?.clone();
    let (o, node) = obj_of(c, &fh)?;
    let env = env(c, &bits, node.as_ref());
    let mut buf = vec![0u8; list.len() + 8192];
    let mut w = XdrWriter::new(&mut buf);
    let got = attrs::put_fattr(&mut w, &bits, &o, &env).map_err(|_| NFS4ERR_SERVERFAULT)?;
    if got != bits {
        return Err(NFS4ERR_ATTRNOTSUPP);
    }
    let mut rr = XdrReader::new(w.written());
    let _ = attrs::get_bitmap(&mut rr);
    let ours = rr.opaque_var(usize::MAX).map_err(|_| NFS4ERR_SERVERFAULT)?;
    Ok(ours == list)
}

pub(super) fn verify(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let st = match same_attrs(c, r) {
        Ok(true) => NFS4_OK,
        Ok(false) => NFS4ERR_NOT_SAME,
        Err(e) => e,
    };
    put_status(w, st)
}

pub(super) fn nverify(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let st = match same_attrs(c, r) {
        Ok(true) => NFS4ERR_SAME,
        Ok(false) => NFS4_OK,
        Err(e) => e,
    };
    put_status(w, st)
}

/// READLINK (RFC 8881 §18.24).
pub(super) fn readlink(c: &mut Compound, _r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let res = (|| {
        let f = cur_file(c, NFS4ERR_ISDIR)?;
        match f.attr.kind {
            FileKind::Lnk => {}
            FileKind::Dir => return Err(NFS4ERR_ISDIR),
            _ => return Err(NFS4ERR_INVAL),
        }
        c.ctx.model.readlink(&f.node).map_err(fs_err)
    })();
    match res {
        Ok(t) => {
            // The link text follows the status and its length word: for the RDMA
            // write list (RFC 8267 §6.4.1, `compound::run_ops`).
            let at = w.position() + 8;
            let st = ok_with(w, |w| w.string(&t))?;
            c.data = Some(at..at + t.len());
            Ok(st)
        }
        Err(e) => put_status(w, e),
    }
}

/// The flavors offered: AUTH_SYS and AUTH_NONE (secinfo4 without GSS data).
fn put_flavors(w: &mut XdrWriter) -> XdrResult<()> {
    w.u32(2)?;
    w.u32(1)?;
    w.u32(0)
}

/// SECINFO (RFC 8881 §18.29): the name must exist; the current filehandle is
/// consumed (§2.6.3.1.1.8).
pub(super) fn secinfo(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let name = match get_component(r) {
        Ok(n) => n,
        Err(e) => return put_status(w, e),
    };
    let res = (|| match cur(c)?.clone() {
        CurrentFh::Pseudo(p) => {
            check_component(name)?;
            pseudo::at_path(c.ctx, &pseudo::child_path(&p, name)).map(|_| ())
        }
        CurrentFh::File { node, .. } => {
            let f = file_ctx(c, &node)?;
            need_dir(&f.attr)?;
            check_component(name)?;
            c.ctx.model.lookup(&node, name).map_err(fs_err).map(|_| ())
        }
    })();
    match res {
        Ok(()) => {
            c.cfh = None;
            ok_with(w, put_flavors)
        }
        Err(e) => put_status(w, e),
    }
}

/// SECINFO_NO_NAME (RFC 8881 §18.45): style 0 the current object, 1 its parent.
pub(super) fn secinfo_no_name(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let Ok(style) = r.u32() else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    let res = (|| {
        let fh = cur(c)?.clone();
        match style {
            0 => Ok(()),
            1 => match fh {
                CurrentFh::Pseudo(p) if p.is_empty() => Err(NFS4ERR_NOENT),
                CurrentFh::File { node, .. } => {
                    let f = file_ctx(c, &node)?;
                    need_dir(&f.attr)?;
                    let root = c.ctx.model.root(node.export).map_err(fs_err)?;
                    if root.fileid == node.fileid {
                        // Above an export's root: the pseudo directory, or nothing
                        // above "/".
                        pseudo::export_parent(c.ctx, node.export)?;
                    }
                    Ok(())
                }
                _ => Ok(()),
            },
            _ => Err(NFS4ERR_INVAL),
        }
    })();
    match res {
        Ok(()) => {
            c.cfh = None;
            ok_with(w, put_flavors)
        }
        Err(e) => put_status(w, e),
    }
}
