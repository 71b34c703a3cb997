//! The 22 NFSv3 procedures.
//!
//! Each handler decodes all of its arguments before touching the model (a decode
//! error is `Fail::Garbage` with nothing done), then runs, then encodes. Failures that
//! carry attributes (wcc_data, post_op_attr) are encoded by the handler; failures that
//! happen before any attributes are known are returned as `Fail::St` and `serve`
//! writes the procedure's attribute-less resfail.

use super::dirpage::{entry_base_size, plus_fit, put_plus_ok, READDIR_OVERHEAD};
use super::names::*;
use super::proto::*;
use super::status::nfsstat3;
use super::{Ctx, MAX_DIR_REPLY, MAX_IO};
use crate::cache::{ListedEntry, ListedPage};
use crate::call::{note_learned, note_listing, Learned};
use crate::export::{admit, Caller};
use crate::fs::access::*;
use crate::fs::{Attr, CreateMode, FileKind, NfsTime, Node, Owner, SetAttr, Status};
use engine::xdr::{XdrError, XdrReader, XdrWriter};

/// NFSv3 data access keeps the owner override (RFC 1813 §4.4: WRITE is stateless, so
/// the owner of a file it opened and then made read-only can still write it).
const V3: Grant = Grant::OwnerOverride;

pub(super) enum Fail {
    /// The arguments could not be decoded.
    Garbage,
    /// Reply with this status and the attribute-less resfail.
    St(Status),
    /// The reply buffer overflowed.
    Full,
}

impl From<Status> for Fail {
    fn from(s: Status) -> Fail {
        Fail::St(s)
    }
}

/// Only encoding uses `?` on XdrError; decode errors go through `garbage`.
impl From<XdrError> for Fail {
    fn from(_: XdrError) -> Fail {
        Fail::Full
    }
}

fn garbage(_: XdrError) -> Fail {
    Fail::Garbage
}

type Res = Result<(), Fail>;

const OK: u32 = 0;

/// Largest file offset + 1 we accept (FSINFO maxfilesize).
pub(super) const MAX_FILE_SIZE: u64 = u64::MAX >> 1;

pub(super) fn dispatch(ctx: &Ctx, proc_: u32, args: &[u8], out: &mut XdrWriter) -> Res {
    let mut r = XdrReader::new(args);
    let r = &mut r;
    match proc_ {
        0 => Ok(()),
        1 => getattr(ctx, r, out),
        2 => setattr(ctx, r, out),
        3 => lookup(ctx, r, out),
        4 => access(ctx, r, out),
        5 => readlink(ctx, r, out),
        6 => read(ctx, r, out),
        7 => write(ctx, r, out),
        8 => create(ctx, r, out),
        9 => mkdir(ctx, r, out),
        10 => symlink(ctx, r, out),
        11 => mknod(ctx, r, out),
        12 => remove(ctx, r, out, false),
        13 => remove(ctx, r, out, true),
        14 => rename(ctx, r, out),
        15 => link(ctx, r, out),
        16 => readdir(ctx, r, out),
        17 => readdirplus(ctx, r, out),
        18 => fsstat(ctx, r, out),
        19 => fsinfo(ctx, r, out),
        20 => pathconf(ctx, r, out),
        21 => commit(ctx, r, out),
        _ => Err(Fail::Garbage),
    }
}

/// Resolves a handle and admits the caller to its export; a pNFS layout's synthetic
/// credentials are checked against the file's fence epoch (`crate::fence`), and a
/// data generation this gateway has not seen drops its caches of the file first.
fn open(ctx: &Ctx, fh: &[u8]) -> Result<(Node, Caller), Status> {
    let node = ctx.model.resolve(fh)?;
    let export = ctx.exports.get(node.export).ok_or(Status::Stale)?;
    let caller = admit(export, ctx.client.ip(), &ctx.cred).map_err(|_| Status::Acces)?;
    if crate::fence::synthetic_ids(&ctx.cred).is_none() {
        return Ok((node, caller));
    }
    let attr = ctx.model.getattr(&node)?;
    let (caller, gen) = crate::fence::admit_file(ctx.fence, &ctx.cred, caller, &attr)?;
    if let Some(gen) = gen {
        ctx.model.fresh_data(&node, gen);
    }
    Ok((node, caller))
}

/// `open`, with the object's attributes from the same metadata read (one store HEAD
/// where `open` then `getattr` made two): for procedures that need both at once.
fn open_attr(ctx: &Ctx, fh: &[u8]) -> Result<(Node, Caller, Attr), Status> {
    let (node, attr) = ctx.model.resolve_attr(fh)?;
    let export = ctx.exports.get(node.export).ok_or(Status::Stale)?;
    let caller = admit(export, ctx.client.ip(), &ctx.cred).map_err(|_| Status::Acces)?;
    if crate::fence::synthetic_ids(&ctx.cred).is_none() {
        return Ok((node, caller, attr));
    }
    let (caller, gen) = crate::fence::admit_file(ctx.fence, &ctx.cred, caller, &attr)?;
    // A data generation new here: the attributes read above may be the cache's.
    if gen.is_some_and(|g| ctx.model.fresh_data(&node, g)) {
        let attr = ctx.model.getattr(&node)?;
        return Ok((node, caller, attr));
    }
    Ok((node, caller, attr))
}

fn attr_opt(ctx: &Ctx, node: &Node) -> Option<Attr> {
    ctx.model.getattr(node).ok()
}

fn code<T>(r: &Result<T, Status>) -> u32 {
    match r {
        Ok(_) => OK,
        Err(s) => nfsstat3(*s),
    }
}

fn put_status_wcc(out: &mut XdrWriter, st: u32, pre: &Attr, post: Option<&Attr>) -> Res {
    out.u32(st)?;
    put_wcc(out, Some(pre), post)?;
    Ok(())
}

fn getattr(ctx: &Ctx, r: &mut XdrReader, out: &mut XdrWriter) -> Res {
    let fh = get_fh(r).map_err(garbage)?;
    let (node, _, mut a) = open_attr(ctx, fh)?;
    // Under another client's write delegation: the size its holder reported
    // (CB_GETATTR, RFC 8881 §10.4.3), never taught to the caches.
    let holders = crate::call::take_holders_size(node.fileid);
    if let Some(size) = holders {
        a.size = size;
    }
    out.u32(OK)?;
    put_fattr(out, &a)?;
    if holders.is_none() {
        note_learned(Learned {
            attr: a,
            data: None,
        });
    }
    Ok(())
}

fn setattr(ctx: &Ctx, r: &mut XdrReader, out: &mut XdrWriter) -> Res {
    let fh = get_fh(r).map_err(garbage)?;
    let set = get_sattr(r).map_err(garbage)?;
    let guard = if r.bool().map_err(garbage)? {
        Some(get_time(r).map_err(garbage)?)
    } else {
        None
    };
    let (node, c, pre) = open_attr(ctx, fh)?;
    let res = (|| {
        check_writable(&c)?;
        // The guard is compared with the ctime as NFSv3 shows it (clamped to uint32).
        if matches!(guard, Some(t) if t != (NfsTime { sec: i64::from(pre.ctime.sec_u32()), ..pre.ctime }))
        {
            return Err(Status::NotSync);
        }
        check_setattr(&pre, &c, &set, V3)?;
        if let Some(size) = set.size {
            if size > MAX_FILE_SIZE {
                return Err(Status::FBig);
            }
        }
        ctx.model.setattr(&node, &sanitize_setattr(&pre, &c, &set))
    })();
    let post = attr_opt(ctx, &node);
    put_status_wcc(out, code(&res), &pre, post.as_ref())
}

fn lookup(ctx: &Ctx, r: &mut XdrReader, out: &mut XdrWriter) -> Res {
    let (fh, name) = get_diropargs(r).map_err(garbage)?;
    let (dir, c, dattr) = open_attr(ctx, fh)?;
    let res = (|| {
        if dattr.kind != FileKind::Dir {
            return Err(Status::NotDir);
        }
        check_name(name)?;
        check(&dattr, &c, X)?;
        ctx.model.lookup_attr(&dir, name)
    })();
    match res {
        Ok((node, a)) => {
            let fh = ctx.model.handle(&node);
            out.u32(OK)?;
            put_fh(out, &fh)?;
            put_post_op_attr(out, Some(&a))?;
            put_post_op_attr(out, Some(&dattr))?;
            note_named_entry(&dir, &node, &fh, (Some(a), Some(dattr)), false);
        }
        Err(s) => {
            out.u32(nfsstat3(s))?;
            put_post_op_attr(out, Some(&dattr))?;
        }
    }
    Ok(())
}

/// Notes an entry a LOOKUP, CREATE or MKDIR answered for the reactor's names
/// (`call::note_named`): only a regular file or directory (its attributes known) in
/// the directory's own export (no export crossing is ever cached).
fn note_named_entry(
    dir: &Node,
    node: &Node,
    fh: &crate::fs::FileHandle,
    (obj_attr, dir_attr): (Option<Attr>, Option<Attr>),
    made: bool,
) {
    let kind_ok = obj_attr.is_some_and(|a| matches!(a.kind, FileKind::Reg | FileKind::Dir));
    if node.export != dir.export || !kind_ok {
        return;
    }
    if let Some(obj) = crate::cache::FhKey::new(fh.as_bytes()) {
        crate::call::note_named(crate::call::Named {
            obj,
            obj_attr,
            dir_attr,
            made,
        });
    }
}

fn access(ctx: &Ctx, r: &mut XdrReader, out: &mut XdrWriter) -> Res {
    let fh = get_fh(r).map_err(garbage)?;
    let want = r.u32().map_err(garbage)?;
    let (_, c, a) = open_attr(ctx, fh)?;
    out.u32(OK)?;
    put_post_op_attr(out, Some(&a))?;
    out.u32(want & access_mask(&a, &c))?;
    Ok(())
}

fn readlink(ctx: &Ctx, r: &mut XdrReader, out: &mut XdrWriter) -> Res {
    let fh = get_fh(r).map_err(garbage)?;
    let (node, _, a) = open_attr(ctx, fh)?;
    let res = if a.kind != FileKind::Lnk {
        Err(Status::Inval)
    } else {
        ctx.model.readlink(&node)
    };
    out.u32(code(&res))?;
    put_post_op_attr(out, Some(&a))?;
    if let Ok(target) = res {
        // RFC 8267 §4: the path after its length word is the reply's one DDP item.
        let at = out.position() + 4;
        out.string(&target)?;
        crate::ddp::note(Some(at..at + target.len()));
    }
    Ok(())
}

/// status, post_op_attr, count, eof, data length and padding.
const READ_HEADER: usize = 4 + POST_OP_ATTR_SIZE + 4 + 4 + 4 + 4;

fn read(ctx: &Ctx, r: &mut XdrReader, out: &mut XdrWriter) -> Res {
    let fh = get_fh(r).map_err(garbage)?;
    let offset = r.u64().map_err(garbage)?;
    let count = r.u32().map_err(garbage)?;
    let (node, c, a) = open_attr(ctx, fh)?;
    let pre = (|| {
        match a.kind {
            FileKind::Reg => {}
            FileKind::Dir => return Err(Status::IsDir),
            _ => return Err(Status::Inval),
        }
        check_read_by(&a, &c, V3)
    })();
    if let Err(s) = pre {
        out.u32(nfsstat3(s))?;
        put_post_op_attr(out, Some(&a))?;
        return Ok(());
    }
    let room = out.remaining().saturating_sub(READ_HEADER) & !3;
    let n = (count as usize).min(MAX_IO).min(room);
    let start = out.position();
    out.u32(OK)?;
    put_post_op_attr(out, Some(&a))?;
    let count_at = out.reserve_u32()?;
    let eof_at = out.reserve_u32()?;
    let len_at = out.reserve_u32()?;
    let data_at = out.position();
    let dst = out.reserve_opaque_fixed(n)?;
    match ctx.model.read(&node, offset, dst) {
        Ok((got, eof)) => {
            let got = got.min(n);
            out.truncate_opaque(data_at, got);
            out.patch_u32(count_at, got as u32);
            out.patch_u32(eof_at, eof as u32);
            out.patch_u32(len_at, got as u32);
            note_learned(Learned {
                attr: a,
                data: Some((data_at, got)),
            });
            // RFC 8267 §4: the reply's one DDP item, for an RDMA write chunk.
            crate::ddp::note(Some(data_at..data_at + got));
        }
        Err(s) => {
            out.rewind(start);
            out.u32(nfsstat3(s))?;
            put_post_op_attr(out, attr_opt(ctx, &node).as_ref())?;
        }
    }
    Ok(())
}

fn write(ctx: &Ctx, r: &mut XdrReader, out: &mut XdrWriter) -> Res {
    let fh = get_fh(r).map_err(garbage)?;
    let offset = r.u64().map_err(garbage)?;
    let count = r.u32().map_err(garbage)? as usize;
    let stable = get_stable(r).map_err(garbage)?;
    let data = r.opaque_var(usize::MAX).map_err(garbage)?;
    if data.len() < count {
        return Err(Fail::Garbage);
    }
    let data = &data[..count];
    let (node, c, pre) = open_attr(ctx, fh)?;
    // Read before the data is written: a sync failing meanwhile moves it on
    // (`FileModel::write_verifier`).
    let verf = ctx.model.write_verifier();
    let res = (|| {
        check_writable(&c)?;
        match pre.kind {
            FileKind::Reg => {}
            FileKind::Dir => return Err(Status::IsDir),
            _ => return Err(Status::Inval),
        }
        check_write_by(&pre, &c, V3)?;
        match offset.checked_add(count as u64) {
            Some(end) if end <= MAX_FILE_SIZE => {}
            _ => return Err(Status::FBig),
        }
        // A write by anyone but root clears S_ISUID/S_ISGID (see `mode_after_write`),
        // before the data lands, as the kernel's file_remove_privs does.
        if let Some(mode) = mode_after_write(&pre, &c) {
            let set = SetAttr {
                mode: Some(mode),
                ..Default::default()
            };
            ctx.model.setattr(&node, &set).inspect_err(|s| {
                tracing::warn!(status = ?s, "WRITE: cannot clear the set-id bits");
            })?;
        }
        ctx.model.write(&node, offset, data, stable)
    })();
    let post = attr_opt(ctx, &node);
    put_status_wcc(out, code(&res), &pre, post.as_ref())?;
    if let Ok(committed) = res {
        out.u32(count as u32)?;
        out.u32(committed as u32)?;
        out.opaque_fixed(&verf)?;
        if let Some(attr) = post {
            note_learned(Learned { attr, data: None });
        }
    }
    Ok(())
}

/// CREATE, MKDIR and SYMLINK: checks, the model call, and the diropres3 reply.
fn create_common(
    ctx: &Ctx,
    out: &mut XdrWriter,
    dirfh: &[u8],
    name: &[u8],
    attrs: Option<&SetAttr>,
    op: impl FnOnce(&Node, &Caller, Owner) -> Result<Node, Status>,
) -> Res {
    let (dir, c, pre) = open_attr(ctx, dirfh)?;
    let res = (|| {
        check_writable(&c)?;
        if pre.kind != FileKind::Dir {
            return Err(Status::NotDir);
        }
        check_new_name(name)?;
        check_dir_modify(&pre, &c)?;
        if let Some(s) = attrs {
            check_new_attrs(&c, s)?;
        }
        // New objects in a set-group-id directory take the directory's group.
        let gid = if pre.mode & 0o2000 != 0 {
            pre.gid
        } else {
            c.gid
        };
        op(&dir, &c, Owner { uid: c.uid, gid })
    })();
    let post = attr_opt(ctx, &dir);
    match res {
        Ok(node) => {
            let fh = ctx.model.handle(&node);
            let a = attr_opt(ctx, &node);
            out.u32(OK)?;
            put_post_op_fh(out, Some(&fh))?;
            put_post_op_attr(out, a.as_ref())?;
            put_wcc(out, Some(&pre), post.as_ref())?;
            note_named_entry(&dir, &node, &fh, (a, post), true);
        }
        Err(s) => put_status_wcc(out, nfsstat3(s), &pre, post.as_ref())?,
    }
    Ok(())
}

fn create(ctx: &Ctx, r: &mut XdrReader, out: &mut XdrWriter) -> Res {
    let (fh, name) = get_diropargs(r).map_err(garbage)?;
    let how = get_createhow(r).map_err(garbage)?;
    let attrs = match &how {
        CreateMode::Unchecked(s) | CreateMode::Guarded(s) => Some(*s),
        CreateMode::Exclusive(_) | CreateMode::Exclusive41(..) => None,
    };
    create_common(ctx, out, fh, name, attrs.as_ref(), |dir, c, owner| {
        // UNCHECKED on an existing file truncates it when a size is given: that
        // needs write permission on the file, not just on the directory (asked
        // by the model of the file it finds, so a new name costs no LOOKUP).
        let may_truncate = |existing: &Node| {
            let a = ctx.model.getattr(existing)?;
            if a.kind == FileKind::Reg {
                check_write_by(&a, c, V3)?;
            }
            Ok(())
        };
        ctx.model
            .create_checked(dir, name, &how, owner, &may_truncate)
    })
}

fn mkdir(ctx: &Ctx, r: &mut XdrReader, out: &mut XdrWriter) -> Res {
    let (fh, name) = get_diropargs(r).map_err(garbage)?;
    let set = get_sattr(r).map_err(garbage)?;
    create_common(ctx, out, fh, name, Some(&set), |dir, _, owner| {
        ctx.model.mkdir(dir, name, &set, owner)
    })
}

fn symlink(ctx: &Ctx, r: &mut XdrReader, out: &mut XdrWriter) -> Res {
    let (fh, name) = get_diropargs(r).map_err(garbage)?;
    let set = get_sattr(r).map_err(garbage)?;
    let target = r.string(PATH_DECODE_MAX).map_err(garbage)?;
    create_common(ctx, out, fh, name, Some(&set), |dir, _, owner| {
        if target.len() > PATH_MAX {
            return Err(Status::NameTooLong);
        }
        if target.is_empty() || target.contains(&0) {
            return Err(Status::Inval);
        }
        ctx.model.symlink(dir, name, target, &set, owner)
    })
}

/// MKNOD (RFC 1813 §3.3.11): the checks of CREATE, then NF3REG/NF3DIR/NF3LNK →
/// NFS3ERR_BADTYPE, and devices only for root: knfsd's vfs_mknod needs CAP_MKNOD
/// (after the directory permission check) → NFS3ERR_PERM. Fifos and sockets may be
/// made by anyone who may create in the directory.
fn mknod(ctx: &Ctx, r: &mut XdrReader, out: &mut XdrWriter) -> Res {
    let (fh, name) = get_diropargs(r).map_err(garbage)?;
    let d = get_mknoddata(r).map_err(garbage)?;
    create_common(ctx, out, fh, name, Some(&d.set), |dir, c, owner| {
        if !d.kind.is_special() {
            return Err(Status::BadType);
        }
        if matches!(d.kind, FileKind::Chr | FileKind::Blk) && !c.is_root() {
            return Err(Status::Perm);
        }
        ctx.model.mknod(dir, name, d.kind, d.rdev, &d.set, owner)
    })
}

/// REMOVE and RMDIR.
fn remove(ctx: &Ctx, r: &mut XdrReader, out: &mut XdrWriter, is_dir: bool) -> Res {
    let (fh, name) = get_diropargs(r).map_err(garbage)?;
    let (dir, c, pre) = open_attr(ctx, fh)?;
    let res = (|| {
        check_writable(&c)?;
        if pre.kind != FileKind::Dir {
            return Err(Status::NotDir);
        }
        check_victim_name(name)?;
        check_dir_modify(&pre, &c)?;
        if pre.mode & 0o1000 != 0 {
            let victim = ctx.model.lookup(&dir, name)?;
            check_sticky(&pre, &ctx.model.getattr(&victim)?, &c)?;
        }
        if is_dir {
            ctx.model.rmdir(&dir, name)
        } else {
            ctx.model.remove(&dir, name)
        }
    })();
    let post = attr_opt(ctx, &dir);
    put_status_wcc(out, code(&res), &pre, post.as_ref())
}

fn rename(ctx: &Ctx, r: &mut XdrReader, out: &mut XdrWriter) -> Res {
    let (ffh, fname) = get_diropargs(r).map_err(garbage)?;
    let (tfh, tname) = get_diropargs(r).map_err(garbage)?;
    let (from, c) = open(ctx, ffh)?;
    let (to, tc) = open(ctx, tfh)?;
    let fpre = ctx.model.getattr(&from)?;
    let tpre = ctx.model.getattr(&to)?;
    let res = (|| {
        check_writable(&c)?;
        check_writable(&tc)?;
        if fpre.kind != FileKind::Dir || tpre.kind != FileKind::Dir {
            return Err(Status::NotDir);
        }
        check_victim_name(fname)?;
        check_victim_name(tname)?;
        if from.export != to.export {
            return Err(Status::XDev);
        }
        check_dir_modify(&fpre, &c)?;
        check_dir_modify(&tpre, &c)?;
        if fpre.mode & 0o1000 != 0 {
            let victim = ctx.model.lookup(&from, fname)?;
            check_sticky(&fpre, &ctx.model.getattr(&victim)?, &c)?;
        }
        if tpre.mode & 0o1000 != 0 {
            match ctx.model.lookup(&to, tname) {
                Ok(victim) => check_sticky(&tpre, &ctx.model.getattr(&victim)?, &c)?,
                Err(Status::NoEnt) => {}
                Err(e) => return Err(e),
            }
        }
        ctx.model.rename(&from, fname, &to, tname)
    })();
    let fpost = attr_opt(ctx, &from);
    let tpost = attr_opt(ctx, &to);
    out.u32(code(&res))?;
    put_wcc(out, Some(&fpre), fpost.as_ref())?;
    put_wcc(out, Some(&tpre), tpost.as_ref())?;
    Ok(())
}

/// LINK (RFC 1813 §3.3.15): the file's attributes after the change (its new link
/// count) and the directory's wcc. The new name is checked as CREATE's; a directory
/// source is NFS3ERR_ISDIR, another export's NFS3ERR_XDEV (the model's rules).
fn link(ctx: &Ctx, r: &mut XdrReader, out: &mut XdrWriter) -> Res {
    let fh = get_fh(r).map_err(garbage)?;
    let (dirfh, name) = get_diropargs(r).map_err(garbage)?;
    let (file, _) = open(ctx, fh)?;
    let (dir, c, pre) = open_attr(ctx, dirfh)?;
    let res = (|| {
        check_writable(&c)?;
        if pre.kind != FileKind::Dir {
            return Err(Status::NotDir);
        }
        check_new_name(name)?;
        check_dir_modify(&pre, &c)?;
        ctx.model.link(&file, &dir, name)
    })();
    let fattr = attr_opt(ctx, res.as_ref().unwrap_or(&file));
    let post = attr_opt(ctx, &dir);
    out.u32(code(&res))?;
    put_post_op_attr(out, fattr.as_ref())?;
    put_wcc(out, Some(&pre), post.as_ref())?;
    Ok(())
}

/// Entry count to ask the model for when `limit` reply bytes are available.
fn entries_hint(limit: usize, min_entry: usize) -> usize {
    (limit / min_entry + 2).min(4096)
}

/// Entry count to ask the model for in READDIRPLUS: what `maxcount` (`limit`) holds
/// at most (every entry listed costs a metadata read). Not listed ahead
/// (`FileModel::plus_count`): measured under load, one worker reading 1,024 entries'
/// metadata in a row made bench md's NFSv3 readdir p99 4–7× ganesha's
/// (docs/performance.md "Listing, third pass").
///
/// 150 bytes: an entryplus3 with attributes and one of this server's handles takes
/// 160 or more (88 of fattr3, 28 of fileid, cookie and a short name, the handle), so
/// a page lists about what its reply shows; at 100 it listed 329 entries for the 204
/// a 32 KiB reply shows, and the next page read the other 125's metadata again.
fn plus_hint(limit: usize) -> usize {
    entries_hint(limit, 150)
}

/// Checks shared by READDIR and READDIRPLUS; on failure writes the resfail.
fn readdir_open(ctx: &Ctx, out: &mut XdrWriter, fh: &[u8]) -> Result<Option<(Node, Attr)>, Fail> {
    let (dir, c, dattr) = open_attr(ctx, fh)?;
    let res = if dattr.kind != FileKind::Dir {
        Err(Status::NotDir)
    } else {
        check(&dattr, &c, R)
    };
    match res {
        Ok(()) => Ok(Some((dir, dattr))),
        Err(s) => {
            out.u32(nfsstat3(s))?;
            put_post_op_attr(out, Some(&dattr))?;
            Ok(None)
        }
    }
}

fn readdir(ctx: &Ctx, r: &mut XdrReader, out: &mut XdrWriter) -> Res {
    let fh = get_fh(r).map_err(garbage)?;
    let cookie = r.u64().map_err(garbage)?;
    let verf = get_verf(r).map_err(garbage)?;
    let count = r.u32().map_err(garbage)? as usize;
    let Some((dir, dattr)) = readdir_open(ctx, out, fh)? else {
        return Ok(());
    };
    let limit = count.min(MAX_DIR_REPLY).min(out.remaining());
    let page = match ctx
        .model
        .readdir(&dir, cookie, verf, entries_hint(limit, 28))
    {
        Ok(p) => p,
        Err(s) => {
            out.u32(nfsstat3(s))?;
            put_post_op_attr(out, Some(&dattr))?;
            return Ok(());
        }
    };
    let mut used = READDIR_OVERHEAD;
    let mut fit = 0;
    for e in &page.entries {
        let size = 4 + entry_base_size(&e.name);
        if used + size > limit {
            break;
        }
        used += size;
        fit += 1;
    }
    if used > limit || (fit == 0 && !page.entries.is_empty()) {
        out.u32(nfsstat3(Status::TooSmall))?;
        put_post_op_attr(out, Some(&dattr))?;
        return Ok(());
    }
    out.u32(OK)?;
    put_post_op_attr(out, Some(&dattr))?;
    out.opaque_fixed(&page.verf)?;
    for e in &page.entries[..fit] {
        out.bool(true)?;
        out.u64(e.fileid)?;
        out.string(&e.name)?;
        out.u64(e.cookie)?;
    }
    out.bool(false)?;
    out.bool(page.eof && fit == page.entries.len())?;
    Ok(())
}

fn readdirplus(ctx: &Ctx, r: &mut XdrReader, out: &mut XdrWriter) -> Res {
    let fh = get_fh(r).map_err(garbage)?;
    let cookie = r.u64().map_err(garbage)?;
    let verf = get_verf(r).map_err(garbage)?;
    // dircount is a hint (`dirpage::plus_fit`).
    let _dircount = r.u32().map_err(garbage)?;
    let maxcount = r.u32().map_err(garbage)? as usize;
    let Some((dir, dattr)) = readdir_open(ctx, out, fh)? else {
        return Ok(());
    };
    let limit = maxcount.min(MAX_DIR_REPLY).min(out.remaining());
    // A revalidation of the reactor's run (`dispatch::listing_revalidation`) answers
    // no client: it lists ahead as NFSv4.1's first page does, so the renewed run holds
    // fresh attributes past the reply (nobody waits for its serial metadata reads).
    let hint = match crate::call::behind_reply() {
        true => ctx.model.plus_count(plus_hint(limit)),
        false => plus_hint(limit),
    };
    let shared = match ctx.model.readdir_plus(&dir, cookie, verf, hint) {
        Ok(p) => p,
        Err(s) => {
            out.u32(nfsstat3(s))?;
            put_post_op_attr(out, Some(&dattr))?;
            return Ok(());
        }
    };
    // Attributes come with the page (one listing, `FileModel::readdir_plus`); without
    // them the handle is not worth sending either (e.g. a race with a remove): the
    // client will LOOKUP. The page is shared with identical calls listed at once
    // (`FileModel::readdir_plus`): read, not taken.
    let (page, plus) = &*shared;
    let listed: Vec<ListedEntry> = page
        .entries
        .iter()
        .zip(plus)
        .map(|(e, p)| ListedEntry {
            name: e.name.as_slice().into(),
            fileid: e.fileid,
            cookie: e.cookie,
            plus: p.as_ref().map(|(_, a, fh)| (*a, *fh)),
        })
        .collect();
    let (fit, used) = plus_fit(listed.iter(), limit);
    if used > limit || (fit == 0 && !listed.is_empty()) {
        out.u32(nfsstat3(Status::TooSmall))?;
        put_post_op_attr(out, Some(&dattr))?;
        return Ok(());
    }
    let eof = page.eof && fit == listed.len();
    put_plus_ok(out, &dattr, &page.verf, listed[..fit].iter(), eof)?;
    // The whole page listed (not only what fit) and the directory's attributes, for
    // the reactor's listings (`cache_dirs`).
    note_learned(Learned {
        attr: dattr,
        data: None,
    });
    note_listing(ListedPage {
        cookie,
        verf: page.verf,
        entries: listed,
        eof: page.eof,
        v4: false,
        exports_gen: ctx.exports.gen(),
        at: page.at,
        names: page.names,
    });
    Ok(())
}

fn fsstat(ctx: &Ctx, r: &mut XdrReader, out: &mut XdrWriter) -> Res {
    let fh = get_fh(r).map_err(garbage)?;
    let (node, _) = open(ctx, fh)?;
    let a = attr_opt(ctx, &node);
    let res = ctx.model.fsstat(&node);
    out.u32(code(&res))?;
    put_post_op_attr(out, a.as_ref())?;
    if let Ok(s) = res {
        for v in [s.tbytes, s.fbytes, s.abytes, s.tfiles, s.ffiles, s.afiles] {
            out.u64(v)?;
        }
        // invarsec: the values may change at any time.
        out.u32(0)?;
    }
    Ok(())
}

fn fsinfo(ctx: &Ctx, r: &mut XdrReader, out: &mut XdrWriter) -> Res {
    let fh = get_fh(r).map_err(garbage)?;
    let (_, _, a) = open_attr(ctx, fh)?;
    out.u32(OK)?;
    put_post_op_attr(out, Some(&a))?;
    let io = MAX_IO as u32;
    // rtmax, rtpref, rtmult, wtmax, wtpref, wtmult, dtpref.
    for v in [io, io, 4096, io, io, 4096, MAX_DIR_REPLY as u32] {
        out.u32(v)?;
    }
    // What this store can really hold (s3: 10,000 parts of part_size_mib, at most
    // 5 TiB), so clients learn the limit instead of meeting NOSPC half-way.
    out.u64(ctx.model.max_file_size().min(MAX_FILE_SIZE))?;
    // time_delta: nanosecond timestamps.
    out.u32(0)?;
    out.u32(1)?;
    // FSF3_LINK: LINK makes hard links (RFC 1813 §3.3.19; `fs::imp::links`).
    out.u32(FSF3_LINK | FSF3_SYMLINK | FSF3_HOMOGENEOUS | FSF3_CANSETTIME)?;
    Ok(())
}

fn pathconf(ctx: &Ctx, r: &mut XdrReader, out: &mut XdrWriter) -> Res {
    let fh = get_fh(r).map_err(garbage)?;
    let (_, _, a) = open_attr(ctx, fh)?;
    out.u32(OK)?;
    put_post_op_attr(out, Some(&a))?;
    out.u32(crate::fs::LINK_MAX)?; // linkmax (RFC 1813 §3.3.20)
    out.u32(NAME_MAX as u32)?; // name_max
    out.bool(true)?; // no_trunc
    out.bool(true)?; // chown_restricted
    out.bool(false)?; // case_insensitive
    out.bool(true)?; // case_preserving
    Ok(())
}

fn commit(ctx: &Ctx, r: &mut XdrReader, out: &mut XdrWriter) -> Res {
    let fh = get_fh(r).map_err(garbage)?;
    let _offset = r.u64().map_err(garbage)?;
    let _count = r.u32().map_err(garbage)?;
    let (node, _, pre) = open_attr(ctx, fh)?;
    let res = match pre.kind {
        FileKind::Reg => ctx.model.commit(&node),
        FileKind::Dir => Err(Status::IsDir),
        _ => Err(Status::Inval),
    };
    let post = attr_opt(ctx, &node);
    put_status_wcc(out, code(&res), &pre, post.as_ref())?;
    if res.is_ok() {
        out.opaque_fixed(&ctx.model.write_verifier())?;
    }
    Ok(())
}
