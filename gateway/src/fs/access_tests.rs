use super::*;
use crate::fs::NfsTime;

const V3: Grant = Grant::OwnerOverride;

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
        mask::READ | mask::MODIFY | mask::EXTEND | mask::EXECUTE
    );
    assert_eq!(access_mask(&f, &group), mask::READ | mask::EXECUTE);
    assert_eq!(access_mask(&f, &group2), mask::READ | mask::EXECUTE);
    assert_eq!(access_mask(&f, &other), mask::READ);
    // Owner class bits apply even when other bits are wider.
    let f = attr(FileKind::Reg, 0o077);
    assert_eq!(access_mask(&f, &owner), 0);
    assert_eq!(
        access_mask(&f, &other) & ALL,
        mask::READ | mask::MODIFY | mask::EXTEND | mask::EXECUTE
    );
}

#[test]
fn dir_mask() {
    let d = attr(FileKind::Dir, 0o755);
    let owner = caller(1000, 1, &[], true);
    let other = caller(2000, 5, &[], true);
    assert_eq!(
        access_mask(&d, &owner),
        mask::READ | mask::LOOKUP | mask::MODIFY | mask::EXTEND | mask::DELETE
    );
    assert_eq!(access_mask(&d, &other), mask::READ | mask::LOOKUP);
    // w without x is useless on a directory.
    let d = attr(FileKind::Dir, 0o766);
    assert_eq!(access_mask(&d, &other), mask::READ);
}

#[test]
fn root_bypass_except_exec() {
    let root = caller(0, 0, &[], true);
    let f = attr(FileKind::Reg, 0o000);
    assert_eq!(
        access_mask(&f, &root),
        mask::READ | mask::MODIFY | mask::EXTEND
    );
    let f = attr(FileKind::Reg, 0o001);
    assert_eq!(
        access_mask(&f, &root),
        mask::READ | mask::MODIFY | mask::EXTEND | mask::EXECUTE
    );
    let d = attr(FileKind::Dir, 0o000);
    assert_eq!(
        access_mask(&d, &root),
        mask::READ | mask::LOOKUP | mask::MODIFY | mask::EXTEND | mask::DELETE
    );
}

#[test]
fn read_only_export_mask() {
    let d = attr(FileKind::Dir, 0o777);
    let ro = caller(0, 0, &[], false);
    assert_eq!(access_mask(&d, &ro), mask::READ | mask::LOOKUP);
    let f = attr(FileKind::Reg, 0o777);
    let ro = caller(1000, 0, &[], false);
    assert_eq!(access_mask(&f, &ro), mask::READ | mask::EXECUTE);
    assert_eq!(check_write_by(&f, &ro, V3), Err(Status::Rofs));
    assert_eq!(check_dir_modify(&d, &ro), Err(Status::Rofs));
    assert_eq!(
        check_setattr(&f, &ro, &SetAttr::default(), V3),
        Err(Status::Rofs)
    );
}

#[test]
fn owner_override_for_read_write() {
    let f = attr(FileKind::Reg, 0o000);
    let owner = caller(1000, 1, &[], true);
    let other = caller(2000, 1, &[], true);
    assert!(check_read_by(&f, &owner, V3).is_ok());
    assert!(check_write_by(&f, &owner, V3).is_ok());
    assert_eq!(check_read_by(&f, &other, V3), Err(Status::Acces));
    assert_eq!(check_write_by(&f, &other, V3), Err(Status::Acces));
    // Execute-only files can be read (clients read to execute).
    let f = attr(FileKind::Reg, 0o001);
    assert!(check_read_by(&f, &other, V3).is_ok());
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
    assert!(check_setattr(&f, &owner, &chmod, V3).is_ok());
    assert_eq!(check_setattr(&f, &other, &chmod, V3), Err(Status::Perm));
    assert!(check_setattr(&f, &root, &chmod, V3).is_ok());
    let chown = SetAttr {
        uid: Some(5),
        ..Default::default()
    };
    assert_eq!(check_setattr(&f, &owner, &chown, V3), Err(Status::Perm));
    assert!(check_setattr(&f, &root, &chown, V3).is_ok());
    let same = SetAttr {
        uid: Some(1000),
        gid: Some(100),
        ..Default::default()
    };
    assert!(check_setattr(&f, &owner, &same, V3).is_ok());
    // pjdfstest chown/07: a non-owner "setting" the current owner and group.
    assert_eq!(check_setattr(&f, &other, &same, V3), Err(Status::Perm));
    let same_gid = SetAttr {
        gid: Some(100),
        ..Default::default()
    };
    assert_eq!(check_setattr(&f, &other, &same_gid, V3), Err(Status::Perm));
    assert!(check_setattr(&f, &root, &same, V3).is_ok());
    let chgrp = SetAttr {
        gid: Some(7),
        ..Default::default()
    };
    assert!(check_setattr(&f, &owner, &chgrp, V3).is_ok());
    let chgrp = SetAttr {
        gid: Some(8),
        ..Default::default()
    };
    assert_eq!(check_setattr(&f, &owner, &chgrp, V3), Err(Status::Perm));
    let trunc = SetAttr {
        size: Some(0),
        ..Default::default()
    };
    assert!(check_setattr(&f, &owner, &trunc, V3).is_ok());
    assert_eq!(check_setattr(&f, &other, &trunc, V3), Err(Status::Acces));
    let fw = attr(FileKind::Reg, 0o666);
    assert!(check_setattr(&fw, &other, &trunc, V3).is_ok());
    assert_eq!(
        check_setattr(&attr(FileKind::Dir, 0o777), &root, &trunc, V3),
        Err(Status::IsDir)
    );
    let touch = SetAttr {
        mtime: SetTime::ServerTime,
        ..Default::default()
    };
    assert!(check_setattr(&fw, &other, &touch, V3).is_ok());
    assert_eq!(check_setattr(&f, &other, &touch, V3), Err(Status::Acces));
    let stamp = SetAttr {
        mtime: SetTime::Client(NfsTime { sec: 1, nsec: 0 }),
        ..Default::default()
    };
    assert_eq!(check_setattr(&fw, &other, &stamp, V3), Err(Status::Perm));
    assert!(check_setattr(&f, &owner, &stamp, V3).is_ok());
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
fn new_attrs() {
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
}

/// One row of the policy table: who asks, through which export.
struct Who {
    uid: u32,
    gid: u32,
    squash: crate::config::Squash,
    access: crate::config::Access,
}

/// The caller `admit` makes of `w` (anonymous ids 65534/65533).
fn admitted(w: &Who) -> Caller {
    let e = crate::config::Export {
        id: 0,
        path: "/".into(),
        prefix: String::new(),
        clients: vec![crate::config::Cidr::parse("*").unwrap()],
        access: w.access,
        squash: w.squash,
        anon_uid: 65534,
        anon_gid: 65533,
    };
    let cred = engine::rpc::Cred::Sys(engine::rpc::AuthSys::new(w.uid, w.gid, &[]));
    crate::export::admit(&e, "127.0.0.1".parse().unwrap(), &cred).unwrap()
}

/// The bits of `mode` (a regular file owned by 1000:100) the policy grants `c`, by
/// the definition: root all but x (x if any x bit), else the caller's class only.
fn expected(mode: u32, c: &Caller) -> u32 {
    if c.uid == 0 {
        return R | W | if mode & 0o111 != 0 { X } else { 0 };
    }
    let shift = if c.uid == 1000 {
        6
    } else if c.gid == 100 {
        3
    } else {
        0
    };
    (mode >> shift) & 7
}

/// owner / group / other / root (plain, squashed) × every rwx of each class × rw and
/// ro exports × each `Grant`: `may`, `check_read`, `check_write` and `check_open`
/// against the definition.
#[test]
fn policy_table() {
    use crate::config::{Access, Squash};
    let whos = [
        (1000, 1, Squash::None),   // owner
        (2000, 100, Squash::None), // group
        (2000, 5, Squash::None),   // other
        (0, 0, Squash::None),      // root
        (0, 0, Squash::Root),      // root squashed: other
        (1000, 1, Squash::All),    // owner squashed: other
    ];
    for (uid, gid, squash) in whos {
        for access in [Access::Rw, Access::Ro] {
            let c = admitted(&Who {
                uid,
                gid,
                squash,
                access,
            });
            for mode in 0..0o1000 {
                table_row(&attr(FileKind::Reg, mode), &c);
            }
        }
    }
}

fn table_row(f: &Attr, c: &Caller) {
    let bits = expected(f.mode, c);
    let ctx = format!("mode {:o} caller {c:?}", f.mode);
    for want in [R, W, X, R | W] {
        assert_eq!(may(f, c, want), bits & want == want, "{ctx} want {want}");
    }
    let rofs = |r: Result<(), Status>| if c.writable { r } else { Err(Status::Rofs) };
    let acces = |ok: bool| if ok { Ok(()) } else { Err(Status::Acces) };
    let owner = c.uid == f.uid;
    let read = bits & (R | X) != 0;
    assert_eq!(check_read_by(f, c, Grant::Mode), acces(read), "{ctx}");
    assert_eq!(
        check_read_by(f, c, Grant::OwnerOverride),
        acces(read || owner),
        "{ctx}"
    );
    assert_eq!(check_read_by(f, c, Grant::Open), Ok(()), "{ctx}");
    let write = bits & W != 0;
    assert_eq!(
        check_write_by(f, c, Grant::Mode),
        rofs(acces(write)),
        "{ctx}"
    );
    let v3 = check_write_by(f, c, Grant::OwnerOverride);
    assert_eq!(v3, rofs(acces(write || owner)), "{ctx}");
    assert_eq!(check_write_by(f, c, Grant::Open), rofs(Ok(())), "{ctx}");
    assert_eq!(check_open(f, c, true, false), acces(read), "{ctx}");
    assert_eq!(check_open(f, c, false, true), rofs(acces(write)), "{ctx}");
    let rw = bits & (R | W) == R | W;
    assert_eq!(check_open(f, c, true, true), rofs(acces(rw)), "{ctx}");
}

/// pjdfstest open/06.t over NFSv4.1: the owner of 0477/0177/0077 may not open for
/// writing, of 0377/0277/0077 not for reading (x alone admits a read-only open: an
/// execve); the NFSv3 override lets the same owner WRITE and READ.
#[test]
fn owner_without_bits_opens_nothing() {
    let owner = caller(1000, 1, &[], true);
    for mode in [0o477, 0o177, 0o077] {
        let f = attr(FileKind::Reg, mode);
        assert_eq!(check_open(&f, &owner, false, true), Err(Status::Acces));
        assert_eq!(check_open(&f, &owner, true, true), Err(Status::Acces));
        assert_eq!(check_write_by(&f, &owner, Grant::Mode), Err(Status::Acces));
        assert!(check_write_by(&f, &owner, Grant::OwnerOverride).is_ok());
        assert!(check_write_by(&f, &owner, Grant::Open).is_ok());
    }
    for mode in [0o377, 0o277, 0o077] {
        let f = attr(FileKind::Reg, mode);
        let want = if mode & 0o100 != 0 {
            Ok(())
        } else {
            Err(Status::Acces)
        };
        assert_eq!(check_open(&f, &owner, true, false), want, "{mode:o}");
        assert_eq!(check_open(&f, &owner, true, true), Err(Status::Acces));
        assert!(check_read_by(&f, &owner, Grant::OwnerOverride).is_ok());
    }
}

/// A size change: truncate(2) (`Grant::Mode`) needs w even for the owner, NFSv3 lets
/// the owner, an NFSv4 open for writing needs nothing more; a read-only export never.
#[test]
fn truncate_by_grant() {
    let f = attr(FileKind::Reg, 0o444);
    let owner = caller(1000, 1, &[], true);
    let trunc = SetAttr {
        size: Some(0),
        ..Default::default()
    };
    assert_eq!(
        check_setattr(&f, &owner, &trunc, Grant::Mode),
        Err(Status::Acces)
    );
    assert!(check_setattr(&f, &owner, &trunc, Grant::OwnerOverride).is_ok());
    assert!(check_setattr(&f, &owner, &trunc, Grant::Open).is_ok());
    let other = caller(2000, 5, &[], true);
    assert!(check_setattr(&f, &other, &trunc, Grant::Open).is_ok());
    assert_eq!(
        check_setattr(&f, &other, &trunc, Grant::OwnerOverride),
        Err(Status::Acces)
    );
    let ro = caller(1000, 1, &[], false);
    assert_eq!(
        check_setattr(&f, &ro, &trunc, Grant::Open),
        Err(Status::Rofs)
    );
}
