//! The audit log's unit rules: names, refusals, which changes are logged, the line's
//! fields, rotation and dropping. The end-to-end check (every namespace-changing
//! procedure of NFSv3 and NFSv4.1 once, with its fields) is tests/e2e/test_audit.py.

use super::*;
use crate::fs::SetTime;
use engine::rpc::AuthSys;

fn header(prog: u32, vers: u32, proc_: u32) -> CallHeader {
    CallHeader {
        xid: 1,
        prog,
        vers,
        proc_,
        cred: Cred::Sys(AuthSys::new(1000, 100, &[100, 27])),
    }
}

#[test]
fn protocols_and_procedures_are_named() {
    let v3 = header(nfs_wire::NFS_PROGRAM, 3, 14);
    assert_eq!(names::of(&v3, &[]), ("nfs3".to_string(), "RENAME"));
    // COMPOUND4args: tag "ab" (length 2 + pad), minorversion 1.
    let args = [0, 0, 0, 2, b'a', b'b', 0, 0, 0, 0, 0, 1, 0, 0, 0, 0];
    let v4 = header(nfs_wire::NFS_PROGRAM, 4, 1);
    assert_eq!(names::of(&v4, &args), ("nfs4.1".to_string(), "COMPOUND"));
    // Truncated arguments: the version is unknown, not guessed.
    assert_eq!(names::of(&v4, &args[..5]).0, "nfs4");
    let mnt = header(nfs_wire::MOUNT_PROGRAM, 3, 1);
    assert_eq!(names::of(&mnt, &[]).1, "MNT");
    // A procedure number beyond the table is "?", never a panic.
    assert_eq!(
        names::of(&header(nfs_wire::NFS_PROGRAM, 3, u32::MAX), &[]).1,
        "?"
    );
}

#[test]
fn only_refusals_are_refusals() {
    assert_eq!(names::refusal(1), Some("PERM"));
    assert_eq!(names::refusal(13), Some("ACCES"));
    assert_eq!(names::refusal(30), Some("ROFS"));
    for other in [0, 2, 17, 10008, u32::MAX] {
        assert_eq!(names::refusal(other), None, "{other}");
    }
}

#[test]
fn a_setattr_of_times_alone_is_not_logged() {
    let node = Node {
        export: 1,
        fileid: 9,
        key: "a/f".into(),
    };
    let fh = FileHandle {
        len: 2,
        bytes: [7; crate::fs::FH_MAX],
    };
    let times = SetAttr {
        mode: None,
        uid: None,
        gid: None,
        size: None,
        atime: SetTime::ServerTime,
        mtime: SetTime::ServerTime,
    };
    assert!(!Change::SetAttr {
        node: &node,
        set: &times,
        fh
    }
    .logged());
    let chmod = SetAttr {
        mode: Some(0o600),
        ..times
    };
    assert!(Change::SetAttr {
        node: &node,
        set: &chmod,
        fh
    }
    .logged());
}

#[test]
fn a_line_names_who_what_and_where() {
    let exports = Arc::new(Exports::default());
    let cur = Current {
        client: "192.0.2.7:801".parse().unwrap(),
        cred: header(0, 0, 0).cred,
        proto: "nfs3".into(),
        proc_: "RENAME",
        exports,
        refusal: None,
    };
    let dir = Node {
        export: 1,
        fileid: 5,
        key: "d/".into(),
    };
    let to = Node {
        export: 1,
        fileid: 6,
        key: "e/".into(),
    };
    let fh = FileHandle {
        len: 2,
        bytes: [0xab; crate::fs::FH_MAX],
    };
    let ch = Change::Rename {
        from: &dir,
        from_name: b"old\xff",
        to: &to,
        to_name: b"new",
        fh,
    };
    let line = record_of(&cur, &ch).line();
    assert!(line.ends_with('\n'));
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["event"], "rename");
    assert_eq!(v["proto"], "nfs3");
    assert_eq!(v["proc"], "RENAME");
    assert_eq!(v["client"], "192.0.2.7:801");
    assert_eq!(v["uid"], 1000);
    assert_eq!(v["gid"], 100);
    assert_eq!(v["gids"], serde_json::json!([100, 27]));
    assert_eq!(v["path"], "d/old\u{fffd}");
    assert_eq!(v["name_hex"], "6f6c64ff");
    assert_eq!(v["to"], "e/new");
    assert_eq!(v["fh"], "abab");
    assert!(v["time"].as_str().unwrap().ends_with('Z'));
}

#[test]
fn nothing_is_noted_outside_a_workers_call() {
    // No scope on this thread (a reactor's refusal): nothing recorded, no panic.
    note_refusal(Some(1), "read");
    CURRENT.with(|c| assert!(c.borrow().is_none()));
}
