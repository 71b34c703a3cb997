//! The access policy of both protocols: unix mode bits against the caller after
//! squashing (`crate::export::admit`, which applies the export's `squash` and
//! `access = "ro"` to the `Caller` this module reads).
//!
//! The file model calls it only in its NFSv4.2 operations (`fs::v42`, which take the
//! caller); NFSv3, MOUNT, NFSv4.1,
//! the reactor cache and the io_uring fast paths do, so one rule answers the same on
//! every path. Follows knfsd and POSIX:
//! - uid 0 bypasses the permission bits, except that executing a non-directory needs
//!   some x bit;
//! - otherwise the caller's class (owner, else group, else other) alone decides:
//!   an owner of a mode-0077 file has no access even though "other" has all of it;
//! - a read-only export refuses every mutation with `Status::Rofs`.
//!
//! Data access (READ, WRITE, a size change) names its rule, a [`Grant`]: the mode
//! bits alone, NFSv3's owner override, or an NFSv4 open that already checked them.
//! The owner override exists only for NFSv3 (RFC 1813 §4.4: WRITE is stateless, so
//! the server lets the owner write a file it opened and then made read-only, as a
//! local descriptor could); NFSv4 checks at OPEN (RFC 8881 §18.16.3) and its I/O
//! under the open's stateid needs no second check.

pub use crate::export::Caller;
use crate::fs::{Attr, FileKind, SetAttr, SetTime, Status};

pub const R: u32 = 4;
pub const W: u32 = 2;
pub const X: u32 = 1;

/// How a data access (READ, WRITE, truncation) is granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// The mode bits alone: NFSv4 with a special (anonymous or bypass) stateid,
    /// NFSv4 OPEN, the fast paths' conservative answer.
    Mode,
    /// NFSv3 (RFC 1813 §4.4): the owner may always read and write its file; others
    /// need the mode bits.
    OwnerOverride,
    /// An NFSv4 open (or delegation) for this access exists: OPEN checked the mode
    /// (RFC 8881 §18.16.3) and a later chmod does not revoke it, as for a local open
    /// descriptor. Only a read-only export still refuses writes.
    Open,
}

/// The rwx bits of the class (owner, group, other) the caller falls in.
pub fn class_bits(a: &Attr, c: &Caller) -> u32 {
    if c.uid == a.uid {
        (a.mode >> 6) & 7
    } else if c.in_group(a.gid) {
        (a.mode >> 3) & 7
    } else {
        a.mode & 7
    }
}

/// Whether the caller has all of `want` (R/W/X) on the object.
pub fn may(a: &Attr, c: &Caller, want: u32) -> bool {
    if c.is_root() {
        return want & X == 0 || a.kind == FileKind::Dir || a.mode & 0o111 != 0;
    }
    class_bits(a, c) & want == want
}

pub fn check(a: &Attr, c: &Caller, want: u32) -> Result<(), Status> {
    if may(a, c, want) {
        Ok(())
    } else {
        Err(refuse(Some(a), right_of(want), Status::Acces))
    }
}

/// A refusal, noted for the audit log (`crate::audit::note_refusal`: only a worker's
/// call is logged, and only if its answer is the refusal).
fn refuse(a: Option<&Attr>, right: &'static str, s: Status) -> Status {
    crate::audit::note_refusal(a.map(|a| a.fileid), right);
    s
}

/// The audit log's name for the mode bits `want`.
fn right_of(want: u32) -> &'static str {
    match want {
        R => "read",
        W => "write",
        X => "execute",
        x if x == W | X => "modify directory",
        x if x == R | W => "read and write",
        _ => "access",
    }
}

/// Refuses mutations on read-only exports.
pub fn check_writable(c: &Caller) -> Result<(), Status> {
    if c.writable {
        Ok(())
    } else {
        Err(refuse(None, "write on a read-only export", Status::Rofs))
    }
}

/// The NFSv3 owner override applies: `g` is `OwnerOverride` and the caller owns `a`.
pub fn owner_override(a: &Attr, c: &Caller, g: Grant) -> bool {
    g == Grant::OwnerOverride && c.uid == a.uid
}

/// Creating, removing or renaming entries in `dir`: a writable export, a directory,
/// and w+x on it.
pub fn check_dir_modify(dir: &Attr, c: &Caller) -> Result<(), Status> {
    check_writable(c)?;
    if dir.kind != FileKind::Dir {
        return Err(Status::NotDir);
    }
    check(dir, c, W | X)
}

/// Removing `victim` from sticky directory `dir` needs ownership of either (or root).
pub fn check_sticky(dir: &Attr, victim: &Attr, c: &Caller) -> Result<(), Status> {
    if dir.mode & 0o1000 == 0 || c.is_root() || c.uid == dir.uid || c.uid == victim.uid {
        Ok(())
    } else {
        Err(refuse(
            Some(victim),
            "remove from a sticky directory",
            Status::Acces,
        ))
    }
}

/// READ by the mode bits alone (`Grant::Mode`): what the reactor cache and the
/// io_uring paths check before answering without a worker. Never more than any
/// grant allows, so a refusal there only sends the call to the worker.
pub fn check_read(a: &Attr, c: &Caller) -> Result<(), Status> {
    check_read_by(a, c, Grant::Mode)
}

/// WRITE by the mode bits alone (`Grant::Mode`), as `check_read`.
pub fn check_write(a: &Attr, c: &Caller) -> Result<(), Status> {
    check_write_by(a, c, Grant::Mode)
}

/// READ: r, or x (clients read a file to execute it), or what `g` grants.
pub fn check_read_by(a: &Attr, c: &Caller, g: Grant) -> Result<(), Status> {
    if g == Grant::Open || owner_override(a, c, g) || may(a, c, R) || may(a, c, X) {
        Ok(())
    } else {
        Err(refuse(Some(a), "read", Status::Acces))
    }
}

/// WRITE: a writable export, then w or what `g` grants.
pub fn check_write_by(a: &Attr, c: &Caller, g: Grant) -> Result<(), Status> {
    check_writable(c)?;
    if g == Grant::Open || owner_override(a, c, g) || may(a, c, W) {
        Ok(())
    } else {
        Err(refuse(Some(a), "write", Status::Acces))
    }
}

/// NFSv4 OPEN of an existing regular file (RFC 8881 §18.16.3, as knfsd's
/// `do_open_permission`): the share access's permissions by the mode bits alone. A
/// read-only open may also be granted by x (an execve reads the file through an
/// OPEN for READ, and the client checks ACCESS4_EXECUTE vs ACCESS4_READ itself);
/// with WRITE it needs r and w. The creator of the file in this OPEN is not checked
/// (POSIX open(O_CREAT|O_WRONLY, 0444) succeeds): the caller skips this.
pub fn check_open(a: &Attr, c: &Caller, read: bool, write: bool) -> Result<(), Status> {
    if write {
        check_writable(c)?;
        check(a, c, if read { R | W } else { W })
    } else if read {
        check_read(a, c)
    } else {
        Ok(())
    }
}

/// The ACCESS bits the caller holds on the object, before masking with the request.
/// ACCESS3 (RFC 1813 §3.3.4) and ACCESS4 (RFC 8881 §18.1) use the same values.
pub mod mask {
    pub const READ: u32 = 0x01;
    pub const LOOKUP: u32 = 0x02;
    pub const MODIFY: u32 = 0x04;
    pub const EXTEND: u32 = 0x08;
    pub const DELETE: u32 = 0x10;
    pub const EXECUTE: u32 = 0x20;
}

/// What ACCESS answers (no override of any kind: it reports the mode bits).
pub fn access_mask(a: &Attr, c: &Caller) -> u32 {
    use mask::*;
    let mut m = 0;
    if may(a, c, R) {
        m |= READ;
    }
    if a.kind == FileKind::Dir {
        if may(a, c, X) {
            m |= LOOKUP;
        }
        if may(a, c, W | X) {
            m |= MODIFY | EXTEND | DELETE;
        }
    } else {
        if may(a, c, W) {
            m |= MODIFY | EXTEND;
        }
        if may(a, c, X) {
            m |= EXECUTE;
        }
    }
    if !c.writable {
        m &= !(MODIFY | EXTEND | DELETE);
    }
    m
}

/// SETATTR, as POSIX chown(2)/chmod(2)/utimensat(2) and Linux `chown_ok`/`chgrp_ok`:
/// only root changes the owner (the owner may "set" it to its current value); the
/// owner may change the group to its current one or to a group it belongs to (the
/// AUTH_SYS gids of the call); anyone else gets PERM, even for a no-op chown. chmod
/// and explicit times only by the owner or root; "touch to now" needs ownership or w;
/// a size needs a regular file and write access as `size` grants it (truncate(2)
/// needs w even for the owner; ftruncate(2) of a descriptor open for writing does not).
pub fn check_setattr(a: &Attr, c: &Caller, s: &SetAttr, size: Grant) -> Result<(), Status> {
    check_writable(c)?;
    check_ids(a, c, s)?;
    let root = c.is_root();
    let owner = c.uid == a.uid;
    if s.mode.is_some() && !root && !owner {
        return Err(refuse(Some(a), "chmod", Status::Perm));
    }
    for t in [s.atime, s.mtime] {
        match t {
            SetTime::DontChange => {}
            SetTime::Client(_) if !root && !owner => {
                return Err(refuse(Some(a), "set times", Status::Perm))
            }
            SetTime::Client(_) => {}
            SetTime::ServerTime if !owner && !may(a, c, W) => {
                return Err(refuse(Some(a), "touch", Status::Acces))
            }
            SetTime::ServerTime => {}
        }
    }
    if s.size.is_some() {
        match a.kind {
            FileKind::Reg => {}
            FileKind::Dir => return Err(Status::IsDir),
            _ => return Err(Status::Inval),
        }
        check_write_by(a, c, size)?;
    }
    Ok(())
}

/// chown/chgrp rules of `check_setattr`.
fn check_ids(a: &Attr, c: &Caller, s: &SetAttr) -> Result<(), Status> {
    let root = c.is_root();
    let owner = c.uid == a.uid;
    if s.uid.is_some_and(|uid| !(root || (owner && uid == a.uid))) {
        return Err(refuse(Some(a), "chown", Status::Perm));
    }
    if s.gid
        .is_some_and(|gid| !(root || (owner && (gid == a.gid || c.in_group(gid)))))
    {
        return Err(refuse(Some(a), "chgrp", Status::Perm));
    }
    Ok(())
}

pub const S_ISUID: u32 = 0o4000;
pub const S_ISGID: u32 = 0o2000;
const S_IXGRP: u32 = 0o010;

/// The mode `m` without the privilege bits a modification by a caller without
/// CAP_FSETID removes (Linux `should_remove_suid`): S_ISUID always, S_ISGID only with
/// S_IXGRP (set-group-id without group execute marks mandatory locking, not privilege).
pub fn without_privs(m: u32) -> u32 {
    let mut m = m & !S_ISUID;
    if m & S_IXGRP != 0 {
        m &= !S_ISGID;
    }
    m
}

/// WRITE (and a size change): a caller other than root clears the set-id bits, as
/// knfsd does (nfsd drops CAP_FSETID for non-root callers, so the VFS kills the bits
/// on write). Returns the new mode when it differs.
pub fn mode_after_write(a: &Attr, c: &Caller) -> Option<u32> {
    if c.is_root() || a.kind != FileKind::Reg {
        return None;
    }
    let m = without_privs(a.mode);
    (m != a.mode).then_some(m)
}

/// The SETATTR actually applied, after the implicit mode changes of POSIX and Linux
/// (`setattr_prepare`, `nfsd_sanitize_attrs`):
/// - chmod by a non-root caller who is not in the file's (new) group drops S_ISGID;
/// - chown/chgrp of a non-directory clears S_ISUID, and S_ISGID when S_IXGRP is set,
///   for any caller (from the requested mode if one is given, else the current mode);
/// - a size change by a non-root caller clears them as a write does.
///
/// Call after `check_setattr` succeeded.
pub fn sanitize_setattr(a: &Attr, c: &Caller, s: &SetAttr) -> SetAttr {
    let mut out = *s;
    if let Some(m) = out.mode.as_mut() {
        *m &= 0o7777;
        let group = s.gid.unwrap_or(a.gid);
        if !c.is_root() && !c.in_group(group) {
            *m &= !S_ISGID;
        }
    }
    let chown = s.uid.is_some() || s.gid.is_some();
    let kill = (chown && a.kind != FileKind::Dir)
        || (s.size.is_some() && !c.is_root() && a.kind == FileKind::Reg);
    if kill {
        match out.mode.as_mut() {
            Some(m) => *m = without_privs(*m),
            None => {
                let m = without_privs(a.mode);
                if m != a.mode {
                    out.mode = Some(m);
                }
            }
        }
    }
    out
}

/// Attributes given with a new object may not give it away to someone else.
pub fn check_new_attrs(c: &Caller, s: &SetAttr) -> Result<(), Status> {
    if c.is_root() {
        return Ok(());
    }
    if matches!(s.uid, Some(u) if u != c.uid) {
        return Err(refuse(None, "create owned by another user", Status::Perm));
    }
    if matches!(s.gid, Some(g) if !c.in_group(g)) {
        return Err(refuse(None, "create in a group not its own", Status::Perm));
    }
    Ok(())
}

/// "." and "..": every directory has them, no client creates or removes them.
pub fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

#[cfg(test)]
#[path = "access_tests.rs"]
mod tests;
