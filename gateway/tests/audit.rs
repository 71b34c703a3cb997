//! The audit log over NFSv4.1 and NFSv4.2 (TCP), through the real server: every
//! namespace or permission change a COMPOUND makes — CREATE of a directory and a
//! symlink, OPEN that creates, SETATTR of mode and size, RENAME, REMOVE of a file and a
//! directory — appears exactly once with its fields and the COMPOUND's minor version
//! ("nfs4.1", "nfs4.2"), a refused access appears once, and what changes nothing
//! (LOOKUP, GETATTR, a SETATTR of times alone) appears not at all. NFSv4.2 adds no
//! namespace or permission change (RFC 7862's COPY, CLONE, ALLOCATE and DEALLOCATE
//! change data, as WRITE does); its extended attributes (RFC 8276) are data too: a
//! SETXATTR or REMOVEXATTR is not logged, a refused one is (docs/operations.md
//! "Audit log"). NFSv3, MOUNT, rotation and reload are tests/e2e/test_audit.py's.
//!
//! Its own test binary: the audit log is process-wide.

mod common;
#[path = "common/nfs4_client.rs"]
mod nfs4_client;

use common::v4::enc;
use common::{Gw, GwOpts};
use engine::xdr::XdrWriter;
use gateway::config::AuditConfig;
use nfs4_client::*;
use nfs_wire::nfs4args::GUARDED4;
use nfs_wire::v4call::Fattr;
use serde_json::Value;
use std::time::{Duration, Instant};

const MODE: u32 = 33;
const SIZE: u32 = 4;
const TIME_MODIFY_SET: u32 = 54;
const ANON: [u8; 16] = [0; 16];

fn fattr(bit: u32, body: impl FnOnce(&mut XdrWriter)) -> ([u32; 2], Vec<u8>) {
    let mut words = [0u32; 2];
    words[(bit / 32) as usize] |= 1 << (bit % 32);
    (words, enc(body))
}

/// The log's lines once `n` of them are there (the writer drains within ~20 ms).
fn lines(path: &std::path::Path, n: usize) -> Vec<Value> {
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let v: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("each line is JSON"))
            .collect();
        if v.len() >= n || Instant::now() > end {
            return v;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn one<'a>(log: &'a [Value], event: &str, path: &str) -> &'a Value {
    let hits: Vec<&Value> = log
        .iter()
        .filter(|l| l["event"] == event && l["path"] == path)
        .collect();
    assert_eq!(hits.len(), 1, "{event} {path} once in {log:#?}");
    hits[0]
}

/// One test for both minor versions, one after the other: the log is process-wide.
#[test]
fn every_nfs41_and_nfs42_change_and_refusal_is_logged_once() {
    for minor in [1, 2] {
        every_change_and_refusal_is_logged_once(minor);
    }
}

fn every_change_and_refusal_is_logged_once(minor: u32) {
    let gw = Gw::start(&GwOpts {
        rdma: false,
        ..Default::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.log");
    let cfg = AuditConfig {
        enabled: true,
        path: path.display().to_string(),
        ..Default::default()
    };
    // A new path: the writer reopens (the previous minor's lines are all written).
    gateway::audit::configure(&cfg, dir.path()).unwrap();
    let before = gateway::audit::totals();

    let mut c = Tcp41::connect(gw.tcp_addr());
    c.minor = minor;
    c.session(b"audit-test", 0);
    let (st, _) = c.seq_run(|o| o.reclaim_complete());
    assert_eq!(st, NFS4_OK, "RECLAIM_COMPLETE");
    // mkdir "d" 0777, a symlink in it, and "p" 0755 (root's: others may not write it).
    let (bm, val) = fattr(MODE, |w| w.u32(0o777).unwrap());
    let d = Fattr {
        bitmap: &bm,
        values: &val,
    };
    let (st, _) = c.seq_run(|o| o.putrootfh().create_with(b"d", None, d));
    assert_eq!(st, NFS4_OK, "CREATE d");
    let (st, _) = c.seq_run(|o| o.putrootfh().lookup(b"d").create_obj(b"l", Some(b"f")));
    assert_eq!(st, NFS4_OK, "CREATE symlink");
    let (bm, val) = fattr(MODE, |w| w.u32(0o755).unwrap());
    let p = Fattr {
        bitmap: &bm,
        values: &val,
    };
    let (st, _) = c.seq_run(|o| o.putrootfh().create_with(b"p", None, p));
    assert_eq!(st, NFS4_OK, "CREATE p");

    // OPEN that creates d/f, then SETATTR mode, size, and times alone (not logged).
    let (bm, val) = fattr(MODE, |w| w.u32(0o644).unwrap());
    let how = How::WithAttrs {
        mode: GUARDED4,
        attrs: Fattr {
            bitmap: &bm,
            values: &val,
        },
    };
    let clientid = c.clientid;
    let (st, res) = c.seq_run(|o| {
        o.putrootfh()
            .lookup(b"d")
            .open(
                clientid,
                b"owner",
                ACCESS_BOTH | WANT_NO_DELEG,
                0,
                how,
                Claim::Null(b"f"),
            )
            .getfh()
    });
    assert_eq!(st, NFS4_OK, "OPEN create");
    let mut r = after_seq(&res);
    for op in [OP_PUTROOTFH, OP_LOOKUP] {
        assert_eq!(expect_op(&mut r, op), NFS4_OK);
    }
    assert_eq!(expect_op(&mut r, OP_OPEN), NFS4_OK);
    let opened = parse_open_ok(&mut r);
    assert_eq!(expect_op(&mut r, OP_GETFH), NFS4_OK);
    let fh = r.opaque_var(128).unwrap().to_vec();
    let (bm, val) = fattr(MODE, |w| w.u32(0o600).unwrap());
    let (st, _) = c.seq_run(|o| o.putfh(&fh).setattr(&ANON, &bm, &val));
    assert_eq!(st, NFS4_OK, "SETATTR mode");
    let (bm, val) = fattr(SIZE, |w| w.u64(7).unwrap());
    let (st, _) = c.seq_run(|o| o.putfh(&fh).setattr(&opened.stateid, &bm, &val));
    assert_eq!(st, NFS4_OK, "SETATTR size");
    let (bm, val) = fattr(TIME_MODIFY_SET, |w| w.u32(0).unwrap()); // SET_TO_SERVER_TIME4
    let (st, _) = c.seq_run(|o| o.putfh(&fh).setattr(&ANON, &bm, &val));
    assert_eq!(st, NFS4_OK, "SETATTR mtime");
    let (st, _) = c.seq_run(|o| {
        o.putrootfh()
            .lookup(b"d")
            .lookup(b"f")
            .getattr(&[0, 1 << (MODE - 32)])
    });
    assert_eq!(st, NFS4_OK, "LOOKUP + GETATTR");

    // RENAME d/f → d/g, REMOVE d/l, mkdir + rmdir d/e.
    let (st, _) = c.seq_run(|o| {
        o.putrootfh()
            .lookup(b"d")
            .savefh()
            .putrootfh()
            .lookup(b"d")
            .rename(b"f", b"g")
    });
    assert_eq!(st, NFS4_OK, "RENAME");
    let (st, _) = c.seq_run(|o| o.putrootfh().lookup(b"d").remove(b"l"));
    assert_eq!(st, NFS4_OK, "REMOVE");
    let (st, _) = c.seq_run(|o| o.putrootfh().lookup(b"d").create_obj(b"e", None));
    assert_eq!(st, NFS4_OK, "CREATE e");
    let (st, _) = c.seq_run(|o| o.putrootfh().lookup(b"d").remove(b"e"));
    assert_eq!(st, NFS4_OK, "REMOVE dir");

    let mut expected = 11;
    if minor == 2 {
        // Extended attributes are data: set and removed by the owner, not logged.
        let (st, _) = c.seq_run(|o| o.putfh(&fh).setxattr(0, b"k", b"v"));
        assert_eq!(st, NFS4_OK, "SETXATTR");
        let (st, _) = c.seq_run(|o| o.putfh(&fh).removexattr(b"k"));
        assert_eq!(st, NFS4_OK, "REMOVEXATTR");
    }

    // As uid 1000: a directory in root's 0755 "p" is refused.
    c.uid = 1000;
    let (st, _) = c.seq_run(|o| o.putrootfh().lookup(b"p").create_obj(b"x", None));
    assert_eq!(st, 13, "CREATE in p as 1000");
    if minor == 2 {
        // ... and so is an extended attribute on root's 0600 d/g: one line.
        let (st, _) = c.seq_run(|o| o.putfh(&fh).setxattr(0, b"k", b"v"));
        assert_eq!(st, 13, "SETXATTR on d/g as 1000");
        expected += 1;
    }

    let log = lines(&path, expected);
    let version = format!("nfs4.{minor}");
    for l in &log {
        assert_eq!(l["proto"], version.as_str(), "{l}");
        assert_eq!(l["proc"], "COMPOUND", "{l}");
        assert!(
            l["client"].as_str().unwrap().starts_with("127.0.0.1:"),
            "{l}"
        );
        assert!(l["time"].as_str().unwrap().ends_with('Z'), "{l}");
    }
    assert_eq!(one(&log, "mkdir", "d")["uid"], 0);
    assert_eq!(one(&log, "mkdir", "p")["export"], "/");
    assert_eq!(
        one(&log, "symlink", "d/l")["fh"].as_str().unwrap().len() % 2,
        0
    );
    one(&log, "create", "d/f");
    let setattrs: Vec<&Value> = log.iter().filter(|l| l["event"] == "setattr").collect();
    assert_eq!(setattrs.len(), 2, "mode and size, not times: {setattrs:#?}");
    assert_eq!(setattrs[0]["mode"], "0600");
    assert_eq!(setattrs[1]["size"], 7);
    assert_eq!(one(&log, "rename", "d/f")["to"], "d/g");
    one(&log, "remove", "d/l");
    one(&log, "mkdir", "d/e");
    one(&log, "rmdir", "d/e");
    let refused: Vec<&Value> = log.iter().filter(|l| l["event"] == "refused").collect();
    assert_eq!(refused.len(), expected - 10, "{refused:#?}");
    assert_eq!(refused[0]["uid"], 1000);
    assert_eq!(refused[0]["status"], "ACCES");
    assert_eq!(refused[0]["right"], "modify directory");
    if let Some(x) = refused.get(1) {
        assert_eq!(
            (&x["uid"], &x["status"]),
            (&1000.into(), &"ACCES".into()),
            "{x}"
        );
    }
    assert_eq!(log.len(), expected, "nothing else: {log:#?}");
    let (written, dropped) = gateway::audit::totals();
    assert_eq!(
        (written - before.0, dropped - before.1),
        (expected as u64, 0)
    );
}
