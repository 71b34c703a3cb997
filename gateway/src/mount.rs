//! MOUNT v3 (RFC 1813 appendix I): NULL, MNT, DUMP, UMNT, UMNTALL, EXPORT.
//!
//! MNT hands out the root handle of an export (or of a directory below it, walked
//! with the same permission checks as LOOKUP) after the export's client and squash
//! rules admit the caller. The mount list is advisory, as in every implementation.

use crate::call::{Ctx, Outcome};
use crate::config::Cidr;
use crate::export::{admit, normalize_path, Export};
use crate::fs::access;
use crate::fs::{FileKind, Node, Status};
use engine::xdr::{padded, XdrReader, XdrResult, XdrWriter};
use std::sync::Mutex;

pub use nfs_wire::{MOUNT_PROGRAM, MOUNT_V3};

/// MNTPATHLEN.
pub const MNT_PATH_LEN: usize = 1024;
/// MNTNAMLEN.
pub const MNT_NAME_LEN: usize = 255;

// mountstat3.
pub const MNT3_OK: u32 = 0;
pub const MNT3ERR_PERM: u32 = 1;
pub const MNT3ERR_NOENT: u32 = 2;
pub const MNT3ERR_IO: u32 = 5;
pub const MNT3ERR_ACCES: u32 = 13;
pub const MNT3ERR_NOTDIR: u32 = 20;
pub const MNT3ERR_INVAL: u32 = 22;
pub const MNT3ERR_NAMETOOLONG: u32 = 63;
pub const MNT3ERR_NOTSUPP: u32 = 10004;
pub const MNT3ERR_SERVERFAULT: u32 = 10006;

/// Who mounted what: (client host, directory), as DUMP reports it.
#[derive(Debug, Default)]
pub struct MountTable {
    entries: Mutex<Vec<(String, String)>>,
}

impl MountTable {
    pub fn new() -> MountTable {
        MountTable::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(String, String)>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn add(&self, host: &str, dir: &str) {
        let mut e = self.lock();
        if !e.iter().any(|(h, d)| h == host && d == dir) {
            e.push((host.to_string(), dir.to_string()));
        }
    }

    pub fn remove(&self, host: &str, dir: &str) {
        self.lock().retain(|(h, d)| !(h == host && d == dir));
    }

    pub fn remove_host(&self, host: &str) {
        self.lock().retain(|(h, _)| h != host);
    }

    pub fn list(&self) -> Vec<(String, String)> {
        self.lock().clone()
    }
}

fn mount_status(s: Status) -> u32 {
    match s {
        Status::Perm => MNT3ERR_PERM,
        Status::NoEnt | Status::Stale => MNT3ERR_NOENT,
        Status::Io => MNT3ERR_IO,
        Status::Acces => MNT3ERR_ACCES,
        Status::NotDir => MNT3ERR_NOTDIR,
        Status::Inval => MNT3ERR_INVAL,
        Status::NameTooLong => MNT3ERR_NAMETOOLONG,
        Status::NotSupp => MNT3ERR_NOTSUPP,
        _ => MNT3ERR_SERVERFAULT,
    }
}

pub fn serve(ctx: &Ctx, proc_: u32, args: &[u8], out: &mut XdrWriter) -> Outcome {
    if proc_ > 5 {
        return Outcome::ProcUnavail;
    }
    let mut r = XdrReader::new(args);
    let host = ctx.client.ip().to_string();
    let start = out.position();
    let res = match proc_ {
        0 => Ok(()),
        1 => {
            let Ok(path) = r.string(MNT_PATH_LEN) else {
                return Outcome::GarbageArgs;
            };
            mnt(ctx, &host, path, out)
        }
        2 => dump(ctx, out),
        3 => {
            let Ok(path) = r.string(MNT_PATH_LEN) else {
                return Outcome::GarbageArgs;
            };
            if let Some(p) = normalize_path(path) {
                ctx.mounts.remove(&host, &p);
            }
            Ok(())
        }
        4 => {
            ctx.mounts.remove_host(&host);
            Ok(())
        }
        _ => export(ctx, out),
    };
    if res.is_err() {
        // Only MNT can overflow (the lists truncate themselves); its reply is tiny.
        out.rewind(start);
        let _ = out.u32(MNT3ERR_SERVERFAULT);
    }
    Outcome::Done
}

/// The export serving `path` exactly, or else the one with the longest path that is
/// a component-wise prefix of it, with the remaining components.
fn find_export<'a, 'p>(ctx: &Ctx<'a>, path: &'p str) -> Option<(&'a Export, Vec<&'p str>)> {
    if let Some(e) = ctx.exports.by_path(path.as_bytes()) {
        return Some((e, Vec::new()));
    }
    let mut best: Option<&Export> = None;
    for e in ctx.exports.all() {
        let under = e.path == "/"
            || (path.starts_with(e.path.as_str())
                && path.as_bytes().get(e.path.len()) == Some(&b'/'));
        if under && best.is_none_or(|b| e.path.len() > b.path.len()) {
            best = Some(e);
        }
    }
    let e = best?;
    let rest = path[e.path.len()..]
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    Some((e, rest))
}

/// Resolves a mount path to a directory node the caller may use.
fn mount_node(ctx: &Ctx, path: &[u8]) -> Result<(Node, String), u32> {
    let norm = normalize_path(path).ok_or(MNT3ERR_NOENT)?;
    let (export, rest) = find_export(ctx, &norm).ok_or(MNT3ERR_NOENT)?;
    let caller = admit(export, ctx.client.ip(), &ctx.cred).map_err(|_| MNT3ERR_ACCES)?;
    let mut node = ctx.model.root(export.id).map_err(mount_status)?;
    for comp in rest {
        if comp == "." || comp == ".." {
            return Err(MNT3ERR_INVAL);
        }
        if comp.len() > MNT_NAME_LEN {
            return Err(MNT3ERR_NAMETOOLONG);
        }
        let a = ctx.model.getattr(&node).map_err(mount_status)?;
        if a.kind != FileKind::Dir {
            return Err(MNT3ERR_NOTDIR);
        }
        access::check(&a, &caller, access::X).map_err(mount_status)?;
        node = ctx
            .model
            .lookup(&node, comp.as_bytes())
            .map_err(mount_status)?;
    }
    let a = ctx.model.getattr(&node).map_err(mount_status)?;
    if a.kind != FileKind::Dir {
        return Err(MNT3ERR_NOTDIR);
    }
    Ok((node, norm))
}

fn mnt(ctx: &Ctx, host: &str, path: &[u8], out: &mut XdrWriter) -> XdrResult<()> {
    match mount_node(ctx, path) {
        Ok((node, norm)) => {
            let fh = ctx.model.handle(&node);
            out.u32(MNT3_OK)?;
            out.opaque_var(fh.as_bytes())?;
            // auth_flavors: AUTH_SYS, AUTH_NONE.
            out.u32(2)?;
            out.u32(engine::rpc::AUTH_SYS)?;
            out.u32(engine::rpc::AUTH_NONE)?;
            ctx.mounts.add(host, &norm);
        }
        Err(st) => out.u32(st)?,
    }
    Ok(())
}

/// mountlist: as many entries as fit, always well-formed.
fn dump(ctx: &Ctx, out: &mut XdrWriter) -> XdrResult<()> {
    for (host, dir) in ctx.mounts.list() {
        let host = &host.as_bytes()[..host.len().min(MNT_NAME_LEN)];
        let dir = &dir.as_bytes()[..dir.len().min(MNT_PATH_LEN)];
        let need = 4 + 4 + padded(host.len()) + 4 + padded(dir.len());
        if out.remaining() < need + 4 {
            break;
        }
        out.bool(true)?;
        out.string(host)?;
        out.string(dir)?;
    }
    out.bool(false)
}

/// How a client network is shown in EXPORT's groups.
pub fn cidr_string(c: &Cidr) -> String {
    let full = if c.addr.is_ipv4() { 32 } else { 128 };
    if c.prefix == 0 && c.addr.is_unspecified() {
        "*".to_string()
    } else if c.prefix == full {
        c.addr.to_string()
    } else {
        format!("{}/{}", c.addr, c.prefix)
    }
}

/// exports: every export with its client networks as groups; truncated (still
/// well-formed) if the reply buffer is too small for all of them.
fn export(ctx: &Ctx, out: &mut XdrWriter) -> XdrResult<()> {
    for e in ctx.exports.all() {
        let groups: Vec<String> = e.clients.iter().map(cidr_string).collect();
        let dir = &e.path.as_bytes()[..e.path.len().min(MNT_PATH_LEN)];
        let need = 4
            + 4
            + padded(dir.len())
            + groups.iter().map(|g| 8 + padded(g.len())).sum::<usize>()
            + 4;
        if out.remaining() < need + 4 {
            break;
        }
        out.bool(true)?;
        out.string(dir)?;
        for g in &groups {
            out.bool(true)?;
            out.string(&g.as_bytes()[..g.len().min(MNT_NAME_LEN)])?;
        }
        out.bool(false)?;
    }
    out.bool(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_add_remove() {
        let t = MountTable::new();
        t.add("10.0.0.1", "/");
        t.add("10.0.0.1", "/");
        t.add("10.0.0.1", "/a");
        t.add("10.0.0.2", "/");
        assert_eq!(t.list().len(), 3);
        t.remove("10.0.0.1", "/a");
        assert_eq!(t.list().len(), 2);
        t.remove_host("10.0.0.1");
        assert_eq!(t.list(), vec![("10.0.0.2".to_string(), "/".to_string())]);
    }

    #[test]
    fn cidr_strings() {
        assert_eq!(cidr_string(&Cidr::parse("*").unwrap()), "*");
        assert_eq!(
            cidr_string(&Cidr::parse("10.0.0.0/8").unwrap()),
            "10.0.0.0/8"
        );
        assert_eq!(cidr_string(&Cidr::parse("127.0.0.1").unwrap()), "127.0.0.1");
        assert_eq!(cidr_string(&Cidr::parse("::1/128").unwrap()), "::1");
    }

    #[test]
    fn status_mapping() {
        assert_eq!(mount_status(Status::NoEnt), MNT3ERR_NOENT);
        assert_eq!(mount_status(Status::Acces), MNT3ERR_ACCES);
        assert_eq!(mount_status(Status::Jukebox), MNT3ERR_SERVERFAULT);
    }
}
