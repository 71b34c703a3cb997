//! Permission checks: unix mode bits against the (squashed) caller.
//!
//! Follows knfsd: uid 0 bypasses permission bits except that executing a
//! non-directory needs some x bit; the owner of a file may always READ and WRITE it
//! (owner override, so a file created read-only can still be written through an open
//! descriptor); read-only exports refuse every mutation with NFS3ERR_ROFS.

use super::proto::*;
use crate::export::Caller;
use crate::fs::{Attr, FileKind, SetAttr, SetTime, Status};

pub const R: u32 = 4;
pub const W: u32 = 2;
pub const X: u32 = 1;

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
        Err(Status::Acces)
    }
}

/// Refuses mutations on read-only exports.
pub fn check_writable(c: &Caller) -> Result<(), Status> {
    if c.writable {
        Ok(())
    } else {
        Err(Status::Rofs)
    }
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
        Err(Status::Acces)
    }
}

/// READ: r, or x (clients read to execute), or ownership.
pub fn check_read(a: &Attr, c: &Caller) -> Result<(), Status> {
    if c.uid == a.uid || may(a, c, R) || may(a, c, X) {
        Ok(())
    } else {
        Err(Status::Acces)
    }
}

/// WRITE: a writable export, then w or ownership.
pub fn check_write(a: &Attr, c: &Caller) -> Result<(), Status> {
    check_writable(c)?;
    if c.uid == a.uid || may(a, c, W) {
        Ok(())
    } else {
        Err(Status::Acces)
    }
}

/// The ACCESS3 bits the caller holds on the object (before masking with the request).
pub fn access_mask(a: &Attr, c: &Caller) -> u32 {
    let mut m = 0;
    if a.kind == FileKind::Dir {
        if may(a, c, R) {
            m |= ACCESS3_READ;
        }
        if may(a, c, X) {
            m |= ACCESS3_LOOKUP;
        }
        if may(a, c, W | X) {
            m |= ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE;
        }
    } else {
        if may(a, c, R) {
            m |= ACCESS3_READ;
        }
        if may(a, c, W) {
            m |= ACCESS3_MODIFY | ACCESS3_EXTEND;
        }
        if may(a, c, X) {
            m |= ACCESS3_EXECUTE;
        }
    }
    if !c.writable {
        m &= !(ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE);
    }
    m
}

/// SETATTR, as POSIX chown(2)/chmod(2)/utimensat(2) and Linux `chown_ok`/`chgrp_ok`:
/// only root changes the owner (the owner may "set" it to its current value); the
/// owner may change the group to its current one or to a group it belongs to (the
/// AUTH_SYS gids of the call); anyone else gets PERM, even for a no-op chown. chmod
/// and explicit times only by the owner or root; size needs w (or ownership) on a
/// regular file; "touch to now" needs ownership or w.
pub fn check_setattr(a: &Attr, c: &Caller, s: &SetAttr) -> Result<(), Status> {
    check_writable(c)?;
    let root = c.is_root();
    let owner = c.uid == a.uid;
    if let Some(uid) = s.uid {
        let allowed = root || (owner && uid == a.uid);
        if !allowed {
            return Err(Status::Perm);
        }
    }
    if let Some(gid) = s.gid {
        let allowed = root || (owner && (gid == a.gid || c.in_group(gid)));
        if !allowed {
            return Err(Status::Perm);
        }
    }
    if s.mode.is_some() && !root && !owner {
        return Err(Status::Perm);
    }
    for t in [s.atime, s.mtime] {
        match t {
            SetTime::DontChange => {}
            SetTime::Client(_) => {
                if !root && !owner {
                    return Err(Status::Perm);
                }
            }
            SetTime::ServerTime => {
                if !owner && !may(a, c, W) {
                    return Err(Status::Acces);
                }
            }
        }
    }
    if s.size.is_some() {
        match a.kind {
            FileKind::Reg => {}
            FileKind::Dir => return Err(Status::IsDir),
            _ => return Err(Status::Inval),
        }
        if !owner && !may(a, c, W) {
            return Err(Status::Acces);
        }
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
        return Err(Status::Perm);
    }
    if matches!(s.gid, Some(g) if !c.in_group(g)) {
        return Err(Status::Perm);
    }
    Ok(())
}

/// filename3 checks for names used to create, remove or rename entries: too long →
/// NAMETOOLONG; empty or containing '/' or NUL → INVAL.
pub fn check_name(name: &[u8]) -> Result<(), Status> {
    if name.len() > NAME_MAX {
        return Err(Status::NameTooLong);
    }
    if name.is_empty() || name.iter().any(|&b| b == b'/' || b == 0) {
        return Err(Status::Inval);
    }
    Ok(())
}

pub fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

/// A name a new object is created under: "." and ".." already exist.
pub fn check_new_name(name: &[u8]) -> Result<(), Status> {
    check_name(name)?;
    if is_dot(name) {
        return Err(Status::Exist);
    }
    Ok(())
}

/// A name an object is removed or renamed from/to: "." and ".." are invalid.
pub fn check_victim_name(name: &[u8]) -> Result<(), Status> {
    check_name(name)?;
    if is_dot(name) {
        return Err(Status::Inval);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::NfsTime;

    fn attr(kind: FileKind, mode: u32) -> Attr {
        Attr {
            kind,
            mode,
            nlink: 1,
            uid: 1000,
            gid: 100,
            size: 0,
            used: 0,
            rdev: (0, 0),
            fsid: 1,
            fileid: 2,
            atime: NfsTime::default(),
            mtime: NfsTime::default(),
            ctime: NfsTime::default(),
            change: 0,
        }
    }

    fn caller(uid: u32, gid: u32, gids: &[u32], writable: bool) -> Caller {
        Caller {
            uid,
            gid,
            gids: crate::export::Groups::new(gids),
            writable,
        }
    }

    const ALL: u32 = 0x3f;

    #[test]
    fn file_mask_by_class() {
        let f = attr(FileKind::Reg, 0o754);
        let owner = caller(1000, 1, &[], true);
        let group = caller(2000, 100, &[], true);
        let group2 = caller(2000, 5, &[100], true);
        let other = caller(2000, 5, &[], true);
        assert_eq!(
            access_mask(&f, &owner),
            ACCESS3_READ | ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_EXECUTE
        );
        assert_eq!(access_mask(&f, &group), ACCESS3_READ | ACCESS3_EXECUTE);
        assert_eq!(access_mask(&f, &group2), ACCESS3_READ | ACCESS3_EXECUTE);
        assert_eq!(access_mask(&f, &other), ACCESS3_READ);
        // Owner class bits apply even when other bits are wider.
        let f = attr(FileKind::Reg, 0o077);
        assert_eq!(access_mask(&f, &owner), 0);
        assert_eq!(
            access_mask(&f, &other) & ALL,
            ACCESS3_READ | ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_EXECUTE
        );
    }

    #[test]
    fn dir_mask() {
        let d = attr(FileKind::Dir, 0o755);
        let owner = caller(1000, 1, &[], true);
        let other = caller(2000, 5, &[], true);
        assert_eq!(
            access_mask(&d, &owner),
            ACCESS3_READ | ACCESS3_LOOKUP | ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE
        );
        assert_eq!(access_mask(&d, &other), ACCESS3_READ | ACCESS3_LOOKUP);
        // w without x is useless on a directory.
        let d = attr(FileKind::Dir, 0o766);
        assert_eq!(access_mask(&d, &other), ACCESS3_READ);
    }

    #[test]
    fn root_bypass_except_exec() {
        let root = caller(0, 0, &[], true);
        let f = attr(FileKind::Reg, 0o000);
        assert_eq!(
            access_mask(&f, &root),
            ACCESS3_READ | ACCESS3_MODIFY | ACCESS3_EXTEND
        );
        let f = attr(FileKind::Reg, 0o001);
        assert_eq!(
            access_mask(&f, &root),
            ACCESS3_READ | ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_EXECUTE
        );
        let d = attr(FileKind::Dir, 0o000);
        assert_eq!(
            access_mask(&d, &root),
            ACCESS3_READ | ACCESS3_LOOKUP | ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE
        );
    }

    #[test]
    fn read_only_export_mask() {
        let d = attr(FileKind::Dir, 0o777);
        let ro = caller(0, 0, &[], false);
        assert_eq!(access_mask(&d, &ro), ACCESS3_READ | ACCESS3_LOOKUP);
        let f = attr(FileKind::Reg, 0o777);
        let ro = caller(1000, 0, &[], false);
        assert_eq!(access_mask(&f, &ro), ACCESS3_READ | ACCESS3_EXECUTE);
        assert_eq!(check_write(&f, &ro), Err(Status::Rofs));
        assert_eq!(check_dir_modify(&d, &ro), Err(Status::Rofs));
        assert_eq!(
            check_setattr(&f, &ro, &SetAttr::default()),
            Err(Status::Rofs)
        );
    }

    #[test]
    fn owner_override_for_read_write() {
        let f = attr(FileKind::Reg, 0o000);
        let owner = caller(1000, 1, &[], true);
        let other = caller(2000, 1, &[], true);
        assert!(check_read(&f, &owner).is_ok());
        assert!(check_write(&f, &owner).is_ok());
        assert_eq!(check_read(&f, &other), Err(Status::Acces));
        assert_eq!(check_write(&f, &other), Err(Status::Acces));
        // Execute-only files can be read (clients read to execute).
        let f = attr(FileKind::Reg, 0o001);
        assert!(check_read(&f, &other).is_ok());
    }

    #[test]
    fn dir_modify_needs_wx() {
        let other = caller(2000, 1, &[], true);
        assert!(check_dir_modify(&attr(FileKind::Dir, 0o003), &other).is_ok());
        assert_eq!(
            check_dir_modify(&attr(FileKind::Dir, 0o002), &other),
            Err(Status::Acces)
        );
        assert_eq!(
            check_dir_modify(&attr(FileKind::Dir, 0o001), &other),
            Err(Status::Acces)
        );
        assert_eq!(
            check_dir_modify(&attr(FileKind::Reg, 0o777), &other),
            Err(Status::NotDir)
        );
    }

    #[test]
    fn sticky() {
        let d = attr(FileKind::Dir, 0o1777);
        let mut v = attr(FileKind::Reg, 0o644);
        v.uid = 3000;
        assert_eq!(
            check_sticky(&d, &v, &caller(2000, 1, &[], true)),
            Err(Status::Acces)
        );
        assert!(check_sticky(&d, &v, &caller(3000, 1, &[], true)).is_ok());
        assert!(check_sticky(&d, &v, &caller(1000, 1, &[], true)).is_ok());
        assert!(check_sticky(&d, &v, &caller(0, 0, &[], true)).is_ok());
        assert!(check_sticky(&attr(FileKind::Dir, 0o777), &v, &caller(2000, 1, &[], true)).is_ok());
    }

    #[test]
    fn setattr_rules() {
        let f = attr(FileKind::Reg, 0o644);
        let owner = caller(1000, 100, &[7], true);
        let other = caller(2000, 100, &[], true);
        let root = caller(0, 0, &[], true);
        let chmod = SetAttr {
            mode: Some(0o600),
            ..Default::default()
        };
        assert!(check_setattr(&f, &owner, &chmod).is_ok());
        assert_eq!(check_setattr(&f, &other, &chmod), Err(Status::Perm));
        assert!(check_setattr(&f, &root, &chmod).is_ok());
        let chown = SetAttr {
            uid: Some(5),
            ..Default::default()
        };
        assert_eq!(check_setattr(&f, &owner, &chown), Err(Status::Perm));
        assert!(check_setattr(&f, &root, &chown).is_ok());
        let same = SetAttr {
            uid: Some(1000),
            gid: Some(100),
            ..Default::default()
        };
        assert!(check_setattr(&f, &owner, &same).is_ok());
        // pjdfstest chown/07: a non-owner "setting" the current owner and group.
        assert_eq!(check_setattr(&f, &other, &same), Err(Status::Perm));
        let same_gid = SetAttr {
            gid: Some(100),
            ..Default::default()
        };
        assert_eq!(check_setattr(&f, &other, &same_gid), Err(Status::Perm));
        assert!(check_setattr(&f, &root, &same).is_ok());
        let chgrp = SetAttr {
            gid: Some(7),
            ..Default::default()
        };
        assert!(check_setattr(&f, &owner, &chgrp).is_ok());
        let chgrp = SetAttr {
            gid: Some(8),
            ..Default::default()
        };
        assert_eq!(check_setattr(&f, &owner, &chgrp), Err(Status::Perm));
        let trunc = SetAttr {
            size: Some(0),
            ..Default::default()
        };
        assert!(check_setattr(&f, &owner, &trunc).is_ok());
        assert_eq!(check_setattr(&f, &other, &trunc), Err(Status::Acces));
        let fw = attr(FileKind::Reg, 0o666);
        assert!(check_setattr(&fw, &other, &trunc).is_ok());
        assert_eq!(
            check_setattr(&attr(FileKind::Dir, 0o777), &root, &trunc),
            Err(Status::IsDir)
        );
        let touch = SetAttr {
            mtime: SetTime::ServerTime,
            ..Default::default()
        };
        assert!(check_setattr(&fw, &other, &touch).is_ok());
        assert_eq!(check_setattr(&f, &other, &touch), Err(Status::Acces));
        let stamp = SetAttr {
            mtime: SetTime::Client(NfsTime { sec: 1, nsec: 0 }),
            ..Default::default()
        };
        assert_eq!(check_setattr(&fw, &other, &stamp), Err(Status::Perm));
        assert!(check_setattr(&f, &owner, &stamp).is_ok());
    }

    #[test]
    fn write_clears_set_id_bits_for_non_root() {
        let f = attr(FileKind::Reg, 0o6777);
        let other = caller(2000, 5, &[], true);
        let owner = caller(1000, 100, &[], true);
        let root = caller(0, 0, &[], true);
        assert_eq!(mode_after_write(&f, &other), Some(0o0777));
        assert_eq!(mode_after_write(&f, &owner), Some(0o0777));
        assert_eq!(mode_after_write(&f, &root), None);
        // S_ISGID without group execute is not a privilege bit: it stays.
        assert_eq!(
            mode_after_write(&attr(FileKind::Reg, 0o6745), &other),
            Some(0o2745)
        );
        assert_eq!(mode_after_write(&attr(FileKind::Reg, 0o2745), &other), None);
        assert_eq!(mode_after_write(&attr(FileKind::Reg, 0o755), &other), None);
    }

    #[test]
    fn setattr_implicit_mode_changes() {
        let f = attr(FileKind::Reg, 0o6755);
        let owner = caller(1000, 100, &[], true);
        let outsider_owner = caller(1000, 5, &[], true);
        let root = caller(0, 0, &[], true);
        // chmod by an owner outside the file's group drops S_ISGID (chmod/00).
        let chmod = SetAttr {
            mode: Some(0o2755),
            ..Default::default()
        };
        assert_eq!(
            sanitize_setattr(&f, &outsider_owner, &chmod).mode,
            Some(0o755)
        );
        assert_eq!(sanitize_setattr(&f, &owner, &chmod).mode, Some(0o2755));
        assert_eq!(sanitize_setattr(&f, &root, &chmod).mode, Some(0o2755));
        // chown of a file clears the set-id bits, for root too.
        let chown = SetAttr {
            uid: Some(5),
            ..Default::default()
        };
        assert_eq!(sanitize_setattr(&f, &root, &chown).mode, Some(0o755));
        let both = SetAttr {
            uid: Some(5),
            mode: Some(0o6711),
            ..Default::default()
        };
        assert_eq!(sanitize_setattr(&f, &root, &both).mode, Some(0o711));
        // ... but not of a directory.
        let d = attr(FileKind::Dir, 0o6755);
        assert_eq!(sanitize_setattr(&d, &root, &chown).mode, None);
        // A size change by a non-root caller clears them, by root not.
        let trunc = SetAttr {
            size: Some(0),
            ..Default::default()
        };
        assert_eq!(sanitize_setattr(&f, &owner, &trunc).mode, Some(0o755));
        assert_eq!(sanitize_setattr(&f, &root, &trunc).mode, None);
        // Nothing to clear: nothing set.
        let plain = attr(FileKind::Reg, 0o644);
        assert_eq!(sanitize_setattr(&plain, &owner, &trunc).mode, None);
    }

    #[test]
    fn new_attrs_and_names() {
        let c = caller(1000, 100, &[7], true);
        assert!(check_new_attrs(&c, &SetAttr::default()).is_ok());
        let s = SetAttr {
            uid: Some(1000),
            gid: Some(7),
            ..Default::default()
        };
        assert!(check_new_attrs(&c, &s).is_ok());
        let s = SetAttr {
            uid: Some(0),
            ..Default::default()
        };
        assert_eq!(check_new_attrs(&c, &s), Err(Status::Perm));
        assert!(check_new_attrs(&caller(0, 0, &[], true), &s).is_ok());

        assert!(check_name(b"a").is_ok());
        assert!(check_name(&[b'x'; 255]).is_ok());
        assert_eq!(check_name(&[b'x'; 256]), Err(Status::NameTooLong));
        assert_eq!(check_name(b""), Err(Status::Inval));
        assert_eq!(check_name(b"a/b"), Err(Status::Inval));
        assert_eq!(check_name(b"a\0"), Err(Status::Inval));
        assert_eq!(check_new_name(b".."), Err(Status::Exist));
        assert_eq!(check_victim_name(b"."), Err(Status::Inval));
        assert!(check_victim_name(b"...").is_ok());
    }
}
