//! Directory operations of NFSv4.1: CREATE, REMOVE, RENAME, LINK and READDIR
//! (RFC 8881 §18.4, §18.25, §18.26, §18.9, §18.23), with NFSv3's permission rules.

use super::attrs::{self, Bitmap, Obj};
use super::file_ops::*;
use super::status::*;
use super::{pseudo, put_status, Compound, CurrentFh, Full, OpResult};
use crate::fs::access::*;
use crate::fs::{Attr, FileHandle, FileKind, Node, Owner, Status};
use crate::state::Conflict;
use engine::xdr::{XdrReader, XdrResult, XdrWriter};

/// change_info4 around a directory change (RFC 8881 §3.3.6); `atomic` is false as
/// the two reads are not atomic with the change.
pub(super) fn put_cinfo(w: &mut XdrWriter, before: &Attr, after: Option<&Attr>) -> XdrResult<()> {
    w.bool(false)?;
    w.u64(attrs::change_of(before))?;
    w.u64(after.map_or(attrs::change_of(before).wrapping_add(1), attrs::change_of))
}

/// The directory a namespace change happens in (pseudo directories are read-only).
pub(super) fn dir_for_change(c: &Compound, fh: Option<&CurrentFh>) -> Result<FileCtx, Nfsstat4> {
    match fh.ok_or(NFS4ERR_NOFILEHANDLE)? {
        CurrentFh::Pseudo(_) => Err(NFS4ERR_ROFS),
        CurrentFh::File { node, .. } => {
            let f = file_ctx(c, node)?;
            need_dir_notdir(&f.attr)?;
            check_writable(&f.caller).map_err(fs_err)?;
            Ok(f)
        }
    }
}

fn need_dir_notdir(a: &Attr) -> Result<(), Nfsstat4> {
    if a.kind == FileKind::Dir {
        Ok(())
    } else {
        Err(NFS4ERR_NOTDIR)
    }
}

/// createtype4 (RFC 8881 §18.4.1).
enum NewKind<'a> {
    Dir,
    Link(&'a [u8]),
    /// Block/character device (with specdata4), socket or FIFO.
    Special(FileKind, (u32, u32)),
}

fn get_createtype<'a>(r: &mut XdrReader<'a>) -> Result<NewKind<'a>, Nfsstat4> {
    let bad = |_| NFS4ERR_BADXDR;
    Ok(match r.u32().map_err(bad)? {
        2 => NewKind::Dir,
        5 => NewKind::Link(r.opaque_var(4096).map_err(bad)?),
        t @ (3 | 4) => {
            let kind = if t == 3 { FileKind::Blk } else { FileKind::Chr };
            NewKind::Special(kind, (r.u32().map_err(bad)?, r.u32().map_err(bad)?))
        }
        6 => NewKind::Special(FileKind::Sock, (0, 0)),
        7 => NewKind::Special(FileKind::Fifo, (0, 0)),
        // Regular files are made by OPEN; named-attribute types are not supported.
        _ => return Err(NFS4ERR_BADTYPE),
    })
}

/// The component a CREATE of a directory (NF4DIR, RFC 8881 §18.4.1) names, from its
/// arguments: the entry `SEQUENCE, PUTFH, CREATE ...` may teach the reactor
/// (`fast_names::made`), as NFSv3's MKDIR does.
pub(super) fn creates_dir_name<'a>(r: &mut XdrReader<'a>) -> Option<&'a [u8]> {
    match get_createtype(r).ok()? {
        NewKind::Dir => get_component(r).ok(),
        _ => None,
    }
}

/// CREATE (RFC 8881 §18.4): directories, symlinks, and device, socket and FIFO nodes
/// (stored as objects with their type and rdev: `FileModel::mknod`).
pub(super) fn create(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let kind = get_createtype(r);
    let name = get_component(r);
    let new = attrs::get_new_attrs(r);
    let res = (|| {
        let kind = kind?;
        let name = name?;
        let new = new?;
        let dir = dir_for_change(c, c.cfh.as_ref())?;
        check_component(name)?;
        if let NewKind::Link(t) = kind {
            if t.is_empty() {
                return Err(NFS4ERR_INVAL);
            }
        }
        check_dir_modify(&dir.attr, &dir.caller).map_err(fs_err)?;
        check_new_attrs(&dir.caller, &new.set).map_err(fs_err)?;
        let gid = if dir.attr.mode & 0o2000 != 0 {
            dir.attr.gid
        } else {
            dir.caller.gid
        };
        let owner = Owner {
            uid: dir.caller.uid,
            gid,
        };
        let m = c.ctx.model;
        let node = match kind {
            NewKind::Dir => m.mkdir(&dir.node, name, &new.set, owner),
            NewKind::Link(t) => m.symlink(&dir.node, name, t, &new.set, owner),
            NewKind::Special(kind, rdev) => {
                // Devices need privilege, as vfs_mknod's CAP_MKNOD (same rule as v3 MKNOD).
                if matches!(kind, FileKind::Chr | FileKind::Blk) && !dir.caller.is_root() {
                    return Err(NFS4ERR_PERM);
                }
                m.mknod(&dir.node, name, kind, rdev, &new.set, owner)
            }
        }
        .map_err(fs_err)?;
        let post = m.getattr(&dir.node).ok();
        if matches!(kind, NewKind::Dir) {
            note_made_dir(c, &dir.node, &node, post);
        }
        Ok((node, dir.attr, post, new.given))
    })();
    match res {
        Ok((node, pre, post, given)) => {
            let fh = file_fh(c, node);
            set_cfh(c, fh);
            ok_with(w, |w| {
                put_cinfo(w, &pre, post.as_ref())?;
                attrs::put_bitmap(w, &given)
            })
        }
        Err(e) => put_status(w, e),
    }
}

/// Notes the directory a CREATE made for the reactor (`call::note_named`, as NFSv3's
/// MKDIR notes it; kept only for `SEQUENCE, PUTFH, CREATE ...` when the name changed
/// by exactly this create, `cache::names::EntrySeen::learned`): the parent's listing
/// run takes the name (`cache_dirs::Listings::made`) and the new directory's starts
/// empty (`server::worker::learned_empty`). The model's own attributes of both.
fn note_made_dir(c: &Compound, dir: &Node, node: &Node, dir_attr: Option<Attr>) {
    if node.export != dir.export || dir_attr.is_none() {
        return;
    }
    match c.ctx.model.getattr(node) {
        Ok(attr) if attr.kind == FileKind::Dir => note_made(c, dir, node, attr, dir_attr),
        _ => {}
    }
}

/// Notes an object a create made by name in `dir` (a CREATE's directory, an OPEN's
/// regular file) for the reactor's names and listings (`call::note_named`): only in
/// the directory's export, with the directory's attributes after the create.
pub(super) fn note_made(c: &Compound, dir: &Node, node: &Node, attr: Attr, dir_attr: Option<Attr>) {
    if node.export != dir.export || dir_attr.is_none() {
        return;
    }
    if let Some(obj) = crate::cache::FhKey::new(c.ctx.model.handle(node).as_bytes()) {
        crate::call::note_named(crate::call::Named {
            obj,
            obj_attr: Some(attr),
            dir_attr,
            made: true,
        });
    }
}

/// REMOVE (RFC 8881 §18.25): files and empty directories; delegations on the victim
/// are recalled first.
pub(super) fn remove(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let name = get_component(r);
    let res = (|| {
        let name = name?;
        let dir = dir_for_change(c, c.cfh.as_ref())?;
        check_component(name)?;
        check_dir_modify(&dir.attr, &dir.caller).map_err(fs_err)?;
        let m = c.ctx.model;
        let victim = m.lookup(&dir.node, name).map_err(fs_err)?;
        let va = m.getattr(&victim).map_err(fs_err)?;
        if dir.attr.mode & 0o1000 != 0 {
            check_sticky(&dir.attr, &va, &dir.caller).map_err(fs_err)?;
        }
        if !c.state.delegations.break_conflicts(
            victim.fileid,
            Some(c.clientid),
            Conflict::Namespace,
        ) {
            return Err(NFS4ERR_DELAY);
        }
        super::layout_ops::recall_conflicts(c, victim.fileid)?;
        match va.kind {
            FileKind::Dir => m.rmdir(&dir.node, name),
            _ => m.remove(&dir.node, name),
        }
        .map_err(|s| match s {
            Status::NotEmpty => NFS4ERR_NOTEMPTY,
            s => fs_err(s),
        })?;
        Ok((dir.attr, m.getattr(&dir.node).ok()))
    })();
    match res {
        Ok((pre, post)) => ok_with(w, |w| put_cinfo(w, &pre, post.as_ref())),
        Err(e) => put_status(w, e),
    }
}

/// RENAME (RFC 8881 §18.26): saved filehandle = source directory, current = target.
pub(super) fn rename(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let from = get_component(r);
    let to = get_component(r);
    let res = (|| {
        let (from, to) = (from?, to?);
        if c.sfh.is_none() || c.cfh.is_none() {
            return Err(NFS4ERR_NOFILEHANDLE);
        }
        let src = dir_for_change(c, c.sfh.as_ref())?;
        let dst = dir_for_change(c, c.cfh.as_ref())?;
        check_component(from)?;
        check_component(to)?;
        if src.node.export != dst.node.export {
            return Err(NFS4ERR_XDEV);
        }
        check_dir_modify(&src.attr, &src.caller).map_err(fs_err)?;
        check_dir_modify(&dst.attr, &src.caller).map_err(fs_err)?;
        let m = c.ctx.model;
        let victim = m.lookup(&src.node, from).map_err(fs_err)?;
        let va = m.getattr(&victim).map_err(fs_err)?;
        if src.attr.mode & 0o1000 != 0 {
            check_sticky(&src.attr, &va, &src.caller).map_err(fs_err)?;
        }
        let target = match m.lookup(&dst.node, to) {
            Ok(t) => Some(t),
            Err(Status::NoEnt) => None,
            Err(e) => return Err(fs_err(e)),
        };
        if let Some(t) = &target {
            if dst.attr.mode & 0o1000 != 0 {
                let ta = m.getattr(t).map_err(fs_err)?;
                check_sticky(&dst.attr, &ta, &src.caller).map_err(fs_err)?;
            }
        }
        let ids = std::iter::once(victim.fileid).chain(target.as_ref().map(|t| t.fileid));
        for id in ids {
            if !c
                .state
                .delegations
                .break_conflicts(id, Some(c.clientid), Conflict::Namespace)
            {
                return Err(NFS4ERR_DELAY);
            }
        }
        if let Some(t) = &target {
            // Renamed over: the target's pNFS layouts are recalled (§12.5.5).
            super::layout_ops::recall_conflicts(c, t.fileid)?;
        }
        m.rename(&src.node, from, &dst.node, to)
            .map_err(|s| match s {
                // RFC 8881 §18.26.3: a non-empty target directory is NFS4ERR_EXIST.
                Status::NotEmpty | Status::Exist => NFS4ERR_EXIST,
                s => fs_err(s),
            })?;
        Ok((
            src.attr,
            m.getattr(&src.node).ok(),
            dst.attr,
            m.getattr(&dst.node).ok(),
        ))
    })();
    match res {
        Ok((spre, spost, tpre, tpost)) => ok_with(w, |w| {
            put_cinfo(w, &spre, spost.as_ref())?;
            put_cinfo(w, &tpre, tpost.as_ref())
        }),
        Err(e) => put_status(w, e),
    }
}

/// LINK (RFC 8881 §18.9): saved filehandle = the file, current = the directory that
/// gets the new name (it stays current); change_info4 of that directory. A directory
/// (or pseudo directory) source is NFS4ERR_ISDIR, another export's NFS4ERR_XDEV; the
/// name is checked as CREATE's. The file's delegations are recalled as for RENAME
/// (its link count and ctime change).
pub(super) fn link(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let name = get_component(r);
    let res = (|| {
        let name = name?;
        let src = match c.sfh.as_ref().ok_or(NFS4ERR_NOFILEHANDLE)? {
            CurrentFh::Pseudo(_) => return Err(NFS4ERR_ISDIR),
            CurrentFh::File { node, .. } => node.clone(),
        };
        let dir = dir_for_change(c, c.cfh.as_ref())?;
        check_component(name)?;
        if src.export != dir.node.export {
            return Err(NFS4ERR_XDEV);
        }
        check_dir_modify(&dir.attr, &dir.caller).map_err(fs_err)?;
        if !c
            .state
            .delegations
            .break_conflicts(src.fileid, Some(c.clientid), Conflict::Namespace)
        {
            return Err(NFS4ERR_DELAY);
        }
        let m = c.ctx.model;
        m.link(&src, &dir.node, name).map_err(fs_err)?;
        Ok((dir.attr, m.getattr(&dir.node).ok()))
    })();
    match res {
        Ok((pre, post)) => ok_with(w, |w| put_cinfo(w, &pre, post.as_ref())),
        Err(e) => put_status(w, e),
    }
}

/// READDIR (RFC 8881 §18.23). Cookies 1 and 2 are reserved (never returned; sent back
/// → NFS4ERR_BAD_COOKIE); the file model's cookies (3 and up after its "." and "..")
/// are used as they are. Only `maxcount` bounds the reply; `dircount` is a hint.
pub(super) fn readdir(c: &mut Compound, r: &mut XdrReader, w: &mut XdrWriter) -> OpResult {
    let args = (|| -> XdrResult<_> {
        let cookie = r.u64()?;
        let mut verf = [0u8; 8];
        verf.copy_from_slice(r.opaque_fixed(8)?);
        let _dircount = r.u32()?;
        let maxcount = r.u32()?;
        let (want, _) = attrs::get_bitmap(r)?;
        Ok((cookie, verf, maxcount, want))
    })();
    let Ok((cookie, verf, maxcount, want)) = args else {
        return put_status(w, NFS4ERR_BADXDR);
    };
    if !want.and(&attrs::WRITE_ONLY).is_empty() {
        return put_status(w, NFS4ERR_INVAL);
    }
    if cookie == 1 || cookie == 2 {
        return put_status(w, NFS4ERR_BAD_COOKIE);
    }
    let fh = match cur(c) {
        Ok(fh) => fh.clone(),
        Err(e) => return put_status(w, e),
    };
    // Bytes allowed for the READDIR4resok: verifier, entries, two list ends.
    let limit = (maxcount as usize).min(w.remaining().saturating_sub(4));
    let fixed = 8 + 4 + 4;
    if limit < fixed {
        return put_status(w, NFS4ERR_TOOSMALL);
    }
    let entries = match list(c, &fh, (cookie, verf), &want, maxcount as usize, limit) {
        Ok(e) => e,
        Err(e) => return put_status(w, e),
    };
    let start = w.position();
    NFS4_OK.put(w).map_err(|_| Full)?;
    w.opaque_fixed(&entries.verf).map_err(|_| Full)?;
    let body = w.position();
    let mut fit = 0;
    for e in &entries.items {
        let at = w.position();
        let ok = (|| -> XdrResult<()> {
            w.bool(true)?;
            w.u64(e.cookie)?;
            w.string(&e.name)?;
            w.opaque_fixed(&e.attrs)
        })();
        if ok.is_err() || w.position() - body + 8 + 8 > limit {
            w.rewind(at);
            break;
        }
        fit += 1;
    }
    if fit == 0 && !entries.items.is_empty() {
        w.rewind(start);
        return put_status(w, NFS4ERR_TOOSMALL);
    }
    let eof = entries.eof && fit == entries.items.len();
    w.bool(false).map_err(|_| Full)?;
    w.bool(eof).map_err(|_| Full)?;
    Ok(NFS4_OK)
}

struct Entry {
    cookie: u64,
    name: Vec<u8>,
    /// Encoded fattr4.
    attrs: Vec<u8>,
}

struct Listing {
    verf: [u8; 8],
    items: Vec<Entry>,
    eof: bool,
}

/// Most entries listed per READDIR (the reply limit usually stops earlier).
const MAX_ENTRIES: usize = 1024;

/// Bytes an encoded entry takes in READDIR4resok (list marker, cookie, name, fattr4).
fn entry_size(e: &Entry) -> usize {
    4 + 8 + 4 + engine::xdr::padded(e.name.len()) + e.attrs.len()
}

/// The page of `fh` from `at` (cookie, verifier): entries encoded until one crosses
/// `limit` (the reply's bytes: the ones after it are not shown, so their attributes
/// are not encoded), the whole listed page noted for the reactor's listings.
fn list(
    c: &Compound,
    fh: &CurrentFh,
    at: (u64, [u8; 8]),
    want: &Bitmap,
    maxcount: usize,
    limit: usize,
) -> Result<Listing, Nfsstat4> {
    let (cookie, verf) = at;
    let hint = (maxcount / 32).clamp(1, MAX_ENTRIES);
    match fh {
        CurrentFh::Pseudo(p) => {
            let names = pseudo::children(c.ctx, p);
            let skip = if cookie == 0 { 0 } else { cookie - 2 } as usize;
            let mut items = Vec::new();
            for (i, name) in names.iter().enumerate().skip(skip).take(hint) {
                let child = pseudo::child_path(p, name);
                let attrs = match pseudo::at_path(c.ctx, &child) {
                    Ok(fh) => entry_attrs(c, &fh, want)?,
                    Err(e) => rdattr_error(want, e)?,
                };
                items.push(Entry {
                    cookie: i as u64 + 3,
                    name: name.clone(),
                    attrs,
                });
            }
            let eof = skip + items.len() >= names.len();
            Ok(Listing {
                verf: [0; 8],
                items,
                eof,
            })
        }
        CurrentFh::File { node, .. } => {
            let f = file_ctx(c, node)?;
            need_dir_notdir(&f.attr)?;
            check(&f.attr, &f.caller, R).map_err(fs_err)?;
            // From cookie 0 the model lists "." and ".." first, which are not shown
            // (`is_dot`) but keep the page the one NFSv3 lists, for the reactor's
            // listings (`note_page`): two more entries for them. With attributes the
            // model lists ahead (`FileModel::plus_count`): what the reply does not
            // show, the reactor answers the next pages from.
            let hint = if want.is_empty() {
                hint
            } else {
                c.ctx.model.plus_count(hint)
            };
            let hint = if cookie == 0 { hint + 2 } else { hint };
            let not_same = |s| match s {
                Status::BadCookie => NFS4ERR_NOT_SAME,
                s => fs_err(s),
            };
            // Attributes come with the listing page, as for NFSv3 READDIRPLUS
            // (`FileModel::readdir_plus`): no LOOKUP and GETATTR per entry.
            // The page with attributes is shared with identical calls listed at once
            // (`FileModel::readdir_plus`): read, not taken.
            let shared = if want.is_empty() {
                let p = c.ctx.model.readdir(node, cookie, verf, hint);
                std::sync::Arc::new((p.map_err(not_same)?, Vec::new()))
            } else {
                let p = c.ctx.model.readdir_plus(node, cookie, verf, hint);
                p.map_err(not_same)?
            };
            let (page, plus) = &*shared;
            // Noted for the reactor's listings whenever attributes were listed: a
            // handle per entry (a handle-table look-up and a MAC) is cheaper than the
            // worker round trip each page after this one would cost.
            let mut noted = (!want.is_empty()).then(|| Vec::with_capacity(plus.len()));
            let mut plus = plus.iter();
            let mut items = Vec::with_capacity(page.entries.len());
            // What every entry shares, found once per page: the caller's admission to
            // the directory's export (every entry is in it) and the attributes'
            // environment (an export's fsstat is the same for all its files).
            let each = Each {
                admitted: caller(c, node).map(|_| ()),
                env: env(c, want, Some(node)),
                handles: want.has(attrs::FILEHANDLE),
            };
            let mut scratch = vec![0u8; FATTR_MAX];
            // Bytes of the entries encoded so far, with the verifier and list ends.
            let mut used = 8 + 8;
            for e in &page.entries {
                let listed = plus.next().and_then(Option::as_ref);
                if let Some(n) = noted.as_mut() {
                    n.push(listed_entry(e, listed));
                }
                if is_dot(&e.name) {
                    continue;
                }
                // No other export's root for the reactor, whichever client asks
                // there (shown or not: the reactor shows what this reply does not).
                if noted.is_some() && pseudo::any_export_root(c.ctx, node, &e.name) {
                    noted = None;
                }
                if used > limit {
                    continue;
                }
                let attrs = if want.is_empty() {
                    empty_fattr()
                } else if let Some(cross) = pseudo::export_child(c.ctx, node, &e.name) {
                    // Another export's root: its root's attributes, and the page is
                    // not the reactor's to show (`any_export_root` said so above).
                    noted = None;
                    entry_attrs(c, &cross, want)?
                } else {
                    match listed {
                        Some((_, a, fh)) => listed_attrs(&each, a, fh, want, &mut scratch)?,
                        // Gone since it was listed: what its LOOKUP would say.
                        None => rdattr_error(want, fs_err(Status::NoEnt))?,
                    }
                };
                let entry = Entry {
                    cookie: e.cookie,
                    name: e.name.clone(),
                    attrs,
                };
                used += entry_size(&entry);
                items.push(entry);
            }
            if let (Some(entries), true) = (noted, each.admitted.is_ok()) {
                let at = (cookie, page.verf, c.ctx.exports.gen());
                note_page(&f.attr, at, entries, (page.eof, page.at, page.names));
            }
            Ok(Listing {
                verf: page.verf,
                items,
                eof: page.eof,
            })
        }
    }
}

/// A listed entry as the reactor's listings keep it (neutral: `cache::ListedEntry`).
fn listed_entry(
    e: &crate::fs::DirEntry,
    listed: Option<&(Node, Attr, FileHandle)>,
) -> crate::cache::ListedEntry {
    crate::cache::ListedEntry {
        name: e.name.as_slice().into(),
        fileid: e.fileid,
        cookie: e.cookie,
        plus: listed.map(|(_, a, fh)| (*a, *fh)),
    }
}

/// Notes a page listed with attributes, and its directory's attributes, for the
/// reactor's listings (`nfs4::fast_dirs`); kept only when the COMPOUND was
/// `SEQUENCE, PUTFH, READDIR` (the worker's `observe`, from the plan).
/// `at`: the page's cookie and verifier, and the export table its entries were
/// checked under (`Exports::gen`).
fn note_page(
    dir: &Attr,
    (cookie, verf, exports_gen): (u64, [u8; 8], u64),
    entries: Vec<crate::cache::ListedEntry>,
    (eof, listed_at, names): (bool, std::time::Instant, Option<crate::fs::NamesSeen>),
) {
    crate::call::note_learned(crate::call::Learned {
        attr: *dir,
        data: None,
    });
    crate::call::note_listing(crate::cache::ListedPage {
        cookie,
        verf,
        entries,
        eof,
        v4: true,
        exports_gen,
        at: listed_at,
        names,
    });
}

/// Bytes one entry's fattr4 takes at most.
const FATTR_MAX: usize = 4096;

/// What the entries of one listing page share (`list`).
struct Each {
    admitted: Result<(), Nfsstat4>,
    env: attrs::Env,
    /// FILEHANDLE is asked: each entry's handle (the page's) is copied only then.
    handles: bool,
}

/// The fattr4 of a listed entry from the attributes and handle its listing page
/// carried.
fn listed_attrs(
    each: &Each,
    a: &Attr,
    fh: &FileHandle,
    want: &Bitmap,
    scratch: &mut [u8],
) -> Result<Vec<u8>, Nfsstat4> {
    if let Err(e) = each.admitted {
        return rdattr_error(want, e);
    }
    let fh = if each.handles {
        fh.as_bytes().to_vec()
    } else {
        Vec::new()
    };
    let o = Obj::from_attr(a, fh);
    let mut w = XdrWriter::new(scratch);
    attrs::put_fattr(&mut w, want, &o, &each.env).map_err(|_| NFS4ERR_SERVERFAULT)?;
    Ok(w.written().to_vec())
}

fn entry_attrs(c: &Compound, fh: &CurrentFh, want: &Bitmap) -> Result<Vec<u8>, Nfsstat4> {
    let (o, node): (Obj<'static>, Option<Node>) = match obj_of(c, fh) {
        Ok(v) => v,
        Err(e) => return rdattr_error(want, e),
    };
    put_attrs(c, &o, node.as_ref(), want)
}

fn put_attrs(
    c: &Compound,
    o: &Obj,
    node: Option<&Node>,
    want: &Bitmap,
) -> Result<Vec<u8>, Nfsstat4> {
    let env = env(c, want, node);
    let mut buf = vec![0u8; FATTR_MAX];
    let mut w = XdrWriter::new(&mut buf);
    attrs::put_fattr(&mut w, want, o, &env).map_err(|_| NFS4ERR_SERVERFAULT)?;
    Ok(w.written().to_vec())
}

fn empty_fattr() -> Vec<u8> {
    vec![0; 8]
}

/// An entry whose attributes cannot be read: with RDATTR_ERROR asked, only that
/// attribute carries the error; otherwise the whole READDIR fails (RFC 8881 §18.23.3).
fn rdattr_error(want: &Bitmap, e: Nfsstat4) -> Result<Vec<u8>, Nfsstat4> {
    if !want.has(attrs::RDATTR_ERROR) {
        return Err(e);
    }
    let mut buf = [0u8; 32];
    let mut w = XdrWriter::new(&mut buf);
    let bits = Bitmap::of(&[attrs::RDATTR_ERROR]);
    let ok = attrs::put_bitmap(&mut w, &bits)
        .and_then(|_| w.u32(4))
        .and_then(|_| e.put(&mut w));
    ok.map_err(|_| NFS4ERR_SERVERFAULT)?;
    Ok(w.written().to_vec())
}
