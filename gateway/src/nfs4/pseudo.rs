//! The pseudo file system (RFC 8881 §7.3-§7.4): read-only directories above the
//! exports, so a client that starts at PUTROOTFH reaches every export it may mount.
//! With an export at "/", the root is that export's root directory.
//!
//! Pseudo directories have handles of their own, longer than any file-model handle
//! (`FH_MAX` = 64 bytes) and starting with a marker byte no file-model handle uses, so
//! the two can never be confused.

use super::attrs::Obj;
use super::status::*;
use super::CurrentFh;
use crate::call::Ctx;
use crate::export::Export;
use crate::fs::{FileKind, NfsTime, Node};

const MARK: &[u8] = b"\xffNFS4PSEUDO";
/// Pseudo handle length: above `crate::fs::FH_MAX`.
pub const PSEUDO_FH_LEN: usize = 72;
/// fsid of the pseudo file system (distinct from every export's).
pub const PSEUDO_FSID: (u64, u64) = (u64::MAX, u64::MAX);

/// Path components of an export path ("/a/b" → ["a", "b"]).
fn comps(path: &str) -> Vec<Vec<u8>> {
    path.split('/')
        .filter(|p| !p.is_empty())
        .map(|p| p.as_bytes().to_vec())
        .collect()
}

/// FNV-1a of the joined components: identifies a pseudo directory in its handle.
fn hash(c: &[Vec<u8>]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in c {
        for &b in part.iter().chain(std::iter::once(&b'/')) {
            h ^= b as u64;
            h = h.wrapping_mul(0x100_0000_01b3);
        }
    }
    h
}

pub fn handle(c: &[Vec<u8>]) -> Vec<u8> {
    let mut fh = Vec::with_capacity(PSEUDO_FH_LEN);
    fh.extend_from_slice(MARK);
    fh.extend_from_slice(&hash(c).to_be_bytes());
    fh.resize(PSEUDO_FH_LEN, 0);
    fh
}

pub fn is_pseudo_handle(fh: &[u8]) -> bool {
    fh.len() == PSEUDO_FH_LEN && fh.starts_with(MARK)
}

/// The exports this client may see (its address is in their client list).
fn visible<'a>(ctx: &'a Ctx) -> impl Iterator<Item = &'a Export> + 'a {
    let ip = ctx.client.ip();
    ctx.exports
        .all()
        .iter()
        .filter(move |e| e.clients.iter().any(|n| n.contains(ip)))
}

/// Whether `c` is a pseudo directory: a strict prefix of a visible export's path
/// that is not itself an export.
fn is_pseudo_dir(ctx: &Ctx, c: &[Vec<u8>]) -> bool {
    let mut prefix_of_export = false;
    for e in visible(ctx) {
        let ec = comps(&e.path);
        if ec == c {
            return false;
        }
        if ec.len() > c.len() && ec[..c.len()] == *c {
            prefix_of_export = true;
        }
    }
    prefix_of_export || (c.is_empty() && ctx.exports.by_path(b"/").is_none())
}

/// The object at path `c`: an export's root or a pseudo directory.
pub fn at_path(ctx: &Ctx, c: &[Vec<u8>]) -> Result<CurrentFh, Nfsstat4> {
    for e in visible(ctx) {
        if comps(&e.path) == c {
            let node = ctx.model.root(e.id).map_err(from_fs)?;
            let handle = ctx.model.handle(&node).as_bytes().to_vec();
            return Ok(CurrentFh::File { node, handle });
        }
    }
    if is_pseudo_dir(ctx, c) {
        return Ok(CurrentFh::Pseudo(c.to_vec()));
    }
    Err(NFS4ERR_NOENT)
}

/// PUTROOTFH (RFC 8881 §18.21).
pub fn root(ctx: &Ctx) -> Result<CurrentFh, Nfsstat4> {
    at_path(ctx, &[])
}

/// PUTFH of a pseudo handle: the pseudo directory it names, if it still exists.
pub fn resolve(ctx: &Ctx, fh: &[u8]) -> Result<CurrentFh, Nfsstat4> {
    let want = fh
        .get(MARK.len()..MARK.len() + 8)
        .ok_or(NFS4ERR_BADHANDLE)?;
    let mut found = None;
    for e in visible(ctx) {
        let ec = comps(&e.path);
        for n in 0..ec.len() {
            if hash(&ec[..n]).to_be_bytes() == want {
                found = Some(ec[..n].to_vec());
            }
        }
    }
    match found {
        Some(c) if is_pseudo_dir(ctx, &c) => Ok(CurrentFh::Pseudo(c)),
        _ => Err(NFS4ERR_STALE),
    }
}

/// The names in pseudo directory `c` (sorted, deduplicated).
pub fn children(ctx: &Ctx, c: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut names: Vec<Vec<u8>> = visible(ctx)
        .map(|e| comps(&e.path))
        .filter(|ec| ec.len() > c.len() && ec[..c.len()] == *c)
        .map(|ec| ec[c.len()].clone())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The path of a file-model directory that is an export's root, or the path of
/// `name` in it, when the exports nest (used to cross into a nested export).
pub fn export_child(ctx: &Ctx, dir: &Node, name: &[u8]) -> Option<CurrentFh> {
    if ctx.exports.all().len() < 2 {
        return None;
    }
    let e = ctx.exports.get(dir.export)?;
    let rel = dir.key.strip_prefix(e.prefix.as_str())?;
    let mut c = comps(&e.path);
    c.extend(comps(rel));
    c.push(name.to_vec());
    match at_path(ctx, &c) {
        Ok(fh @ CurrentFh::File { .. }) => Some(fh),
        _ => None,
    }
}

/// Whether `name` in directory `dir` is another export's root for any client, the
/// exports this one may not see included (`export_child` answers for the caller
/// only): a page noting such an entry must not be shown to NFSv4.1 from the
/// reactor, which serves every client (`dir_ops::list`, RFC 8881 §7.7). A directory
/// whose path cannot be told counts as one.
pub fn any_export_root(ctx: &Ctx, dir: &Node, name: &[u8]) -> bool {
    let all = ctx.exports.all();
    if all.len() < 2 {
        return false;
    }
    let Some(e) = ctx.exports.get(dir.export) else {
        return true;
    };
    let Some(rel) = dir.key.strip_prefix(e.prefix.as_str()) else {
        return true;
    };
    let mut c = comps(&e.path);
    c.extend(comps(rel));
    c.push(name.to_vec());
    all.iter().any(|x| comps(&x.path) == c)
}

/// LOOKUPP from an export's root: the directory above it in the pseudo file system
/// (NFS4ERR_NOENT above "/").
pub fn export_parent(ctx: &Ctx, export: u16) -> Result<CurrentFh, Nfsstat4> {
    let e = ctx.exports.get(export).ok_or(NFS4ERR_STALE)?;
    let mut c = comps(&e.path);
    if c.pop().is_none() {
        return Err(NFS4ERR_NOENT);
    }
    at_path(ctx, &c)
}

/// Attributes of a pseudo directory: read-only, owned by root.
pub fn attrs(c: &[Vec<u8>]) -> Obj<'static> {
    let t = NfsTime { sec: 0, nsec: 0 };
    let id = hash(c) | (1 << 63);
    Obj {
        kind: FileKind::Dir,
        mode: 0o555,
        nlink: 2,
        uid: 0,
        gid: 0,
        size: 4096,
        used: 4096,
        rdev: (0, 0),
        fsid: PSEUDO_FSID,
        fileid: id,
        mounted_on_fileid: id,
        atime: t,
        mtime: t,
        ctime: t,
        change: 1,
        fh: handle(c).into(),
    }
}

/// The fileid a pseudo child entry has in READDIR (the pseudo dir or export root).
pub fn child_path(c: &[Vec<u8>], name: &[u8]) -> Vec<Vec<u8>> {
    let mut p = c.to_vec();
    p.push(name.to_vec());
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pseudo_handles_never_look_like_file_handles() {
        let h = handle(&[b"a".to_vec()]);
        assert_eq!(h.len(), PSEUDO_FH_LEN);
        assert!(h.len() > crate::fs::FH_MAX);
        assert!(is_pseudo_handle(&h));
        assert_ne!(handle(&[b"a".to_vec()]), handle(&[b"b".to_vec()]));
        assert_ne!(handle(&[]), handle(&[b"a".to_vec()]));
        assert!(!is_pseudo_handle(&[0xff; 31]));
        assert!(crate::fs::FileModel::peek_handle(&h).is_none());
    }
}
