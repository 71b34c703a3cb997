//! The count of calls in flight that may change a name or force the log
//! (`gateway::backend::pending`, read by a log force's leader to decide whether to
//! wait for them, `DirSync::sync_gathered`): the reactors count such a call in when
//! they hand it to a worker, the worker counts it out once its change is stable or
//! its job ends. After a server answered calls of every kind — namespace changes,
//! stable and unstable WRITEs, COMMIT, reads, lookups, listings, over NFSv3 and
//! NFSv4.1, one at a time and in concurrent bursts — the count is back to 0. A call
//! counted in and never out would make every later force yield for nothing; one
//! counted out and never in would wrap the count and turn the gathering off.
//! One test in this file: the count is process-wide.

mod common;
#[path = "common/nfs4_client.rs"]
mod nfs4_client;

use common::v4::enc;
use gateway::backend::pending;
use gateway::config::Config;
use gateway::server::Server;
use nfs4_client::WANT_NO_DELEG;
use nfs4_client::{Claim, How, Tcp41, ACCESS_BOTH, CURRENT, DENY_NONE, NFS4_OK, V3};
use nfs_wire::nfs3::*;
use nfs_wire::v3call::{self, Call};
use nfs_wire::{v3more, NFS_PROGRAM};
use std::net::SocketAddr;
use std::time::Duration;

fn start(root: &std::path::Path) -> Server {
    let (data, state) = (root.join("data"), root.join("state"));
    std::fs::create_dir_all(&data).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    let text = format!(
        "[engine]\ncores = [0, 1]\nidle = \"adaptive\"\nhugepages = \"off\"\n\
         [pools]\nsmall = 256\nmedium = 32\nlarge = 8\n\
         [tcp]\nlisten = \"127.0.0.1:0\"\n\
         [rdma]\nprovider = \"off\"\n\
         [backend]\nkind = \"fs\"\nroot = \"{}\"\nworkers = 4\n\
         [state]\ndir = \"{}\"\n\
         [[exports]]\npath = \"/\"\nclients = [\"0.0.0.0/0\"]\nsquash = \"none\"\n",
        data.display(),
        state.display()
    );
    Server::start(&Config::parse(&text).unwrap()).unwrap()
}

fn ok(v3: &mut V3, proc_: u32, args: &[u8], what: &str) -> Vec<u8> {
    let rep = v3.call(NFS_PROGRAM, proc_, args);
    assert_eq!(v3call::status(&rep), NFS3_OK, "{what}");
    rep
}

fn call(v3: &mut V3, proc_: u32, c: Call, what: &str) -> Vec<u8> {
    ok(v3, proc_, &enc(|w| c.args(w).unwrap()), what)
}

/// One of each NFSv3 kind in directory `d` (names suffixed `k`).
fn v3_round(v3: &mut V3, d: &[u8], k: usize) {
    let (f, g, s, sub) = (
        format!("f{k}"),
        format!("g{k}"),
        format!("s{k}"),
        format!("d{k}"),
    );
    let fh = v3.create(d, f.as_bytes());
    assert_eq!(v3.write(&fh, b"stable"), NFS3_OK, "FILE_SYNC WRITE");
    let unstable = v3more::write_args(&fh, 6, UNSTABLE, b"unstable");
    ok(v3, NFSPROC3_WRITE, &unstable, "UNSTABLE WRITE");
    call(v3, NFSPROC3_COMMIT, Call::Commit(&fh), "COMMIT");
    call(v3, NFSPROC3_GETATTR, Call::Getattr(&fh), "GETATTR");
    call(v3, NFSPROC3_READ, Call::Read(&fh, 0, 64), "READ");
    call(v3, NFSPROC3_LOOKUP, Call::Lookup(d, &f), "LOOKUP");
    call(v3, NFSPROC3_MKDIR, Call::Mkdir(d, &sub), "MKDIR");
    call(
        v3,
        NFSPROC3_READDIRPLUS,
        Call::Readdirplus(d),
        "READDIRPLUS",
    );
    let link = v3more::symlink_args(d, s.as_bytes(), b"target");
    ok(v3, NFSPROC3_SYMLINK, &link, "SYMLINK");
    let mut rename = v3more::dirop_args(d, f.as_bytes());
    rename.extend(v3more::dirop_args(d, g.as_bytes()));
    ok(v3, NFSPROC3_RENAME, &rename, "RENAME");
    call(v3, NFSPROC3_REMOVE, Call::Remove(d, &g), "REMOVE");
    call(v3, NFSPROC3_REMOVE, Call::Remove(d, &s), "REMOVE symlink");
    call(v3, NFSPROC3_RMDIR, Call::Rmdir(d, &sub), "RMDIR");
    // Refused changes count out too.
    let rep = v3.call(
        NFS_PROGRAM,
        NFSPROC3_REMOVE,
        &v3more::dirop_args(d, b"none"),
    );
    assert_eq!(v3call::status(&rep), NFS3ERR_NOENT);
}

/// OPEN creating a file with a FILE_SYNC4 WRITE, CLOSE; CREATE of a directory;
/// REMOVE of both.
fn v4_round(v4: &mut Tcp41, root: &[u8], k: usize) {
    let id = v4.clientid;
    let (f, d) = (format!("v4f{k}"), format!("v4d{k}"));
    let (st, _) = v4.seq_run(|o| {
        o.putfh(root)
            .open(
                id,
                b"pending",
                ACCESS_BOTH | WANT_NO_DELEG,
                DENY_NONE,
                How::Unchecked,
                Claim::Null(f.as_bytes()),
            )
            .write_stable(&CURRENT, 0, 2, b"four")
            .close(&CURRENT)
    });
    assert_eq!(st, NFS4_OK, "OPEN, WRITE, CLOSE");
    let (st, _) = v4.seq_run(|o| o.putfh(root).create_obj(d.as_bytes(), None));
    assert_eq!(st, NFS4_OK, "CREATE");
    let (st, _) = v4.seq_run(|o| o.putfh(root).lookup(f.as_bytes()).getattr(&[1]));
    assert_eq!(st, NFS4_OK, "LOOKUP, GETATTR");
    for name in [&f, &d] {
        let (st, _) = v4.seq_run(|o| o.putfh(root).remove(name.as_bytes()));
        assert_eq!(st, NFS4_OK, "REMOVE {name}");
    }
}

/// Four NFSv3 clients at once, each in a directory of its own, `rounds` rounds.
fn burst(addr: SocketAddr, root: &[u8], rounds: usize) {
    std::thread::scope(|s| {
        for t in 0..4 {
            s.spawn(move || {
                let mut v3 = V3::connect(addr);
                let name = format!("t{t}");
                let rep = call(&mut v3, NFSPROC3_MKDIR, Call::Mkdir(root, &name), "MKDIR");
                let d = v3call::parse_mkdir(&rep).expect("MKDIR");
                for k in 0..rounds {
                    v3_round(&mut v3, &d, k);
                }
            });
        }
    });
}

#[test]
fn every_call_counted_in_flight_is_counted_out() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path());
    let addr = server.local_addr();
    assert_eq!(
        pending::count(),
        0,
        "nothing in flight before the first call"
    );
    let mut v3 = V3::connect(addr);
    let root = v3.mount_root();
    for k in 0..5 {
        v3_round(&mut v3, &root, k);
    }
    burst(addr, &root, 10);
    let mut v4 = Tcp41::ready(addr, b"pending-count");
    for k in 0..5 {
        v4_round(&mut v4, &root, k);
    }
    // A job's count leaves when its worker returns, just after it sent the reply.
    common::wait_for("the in-flight count back to 0", 5, || pending::count() == 0);
    assert_eq!(pending::count(), 0);
    drop(v4);
    server.shutdown().unwrap();
    std::thread::sleep(Duration::from_millis(10));
    assert_eq!(pending::count(), 0);
}
