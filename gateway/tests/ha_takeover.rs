//! `[ha]` (docs/ha.md) with real gateway processes on one shared `fs` directory
//! (`backend.shared = true`): an active holds the identity; a second active is refused
//! while it renews; `kill -9` of the active; the standby takes the identity within a
//! lease and a poll, runs the grace period for the active's client, which reclaims its
//! open (CLAIM_PREVIOUS) and its byte-range lock (LOCK reclaim) on the standby's port
//! (the test reconnects by port: moving an address is the operator's tool, tools/ha/);
//! another client's conflicting lock is refused during grace (NFS4ERR_GRACE) and after
//! it (NFS4ERR_DENIED); the COMMITted bytes are there. Then a torn recovery record:
//! the next takeover lets no client reclaim (NFS4ERR_NO_GRACE), never grants a lock it
//! cannot prove.

mod common;
#[path = "common/nfs4_client.rs"]
mod nfs4_client;

use nfs4_client::*;
use nfs_wire::nfs4args::UNCHECKED4;
use nfs_wire::v4call::Fattr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const LEASE_S: u64 = 2;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Gw {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Drop for Gw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A gateway process on `root` serving identity "t" as `role`.
fn spawn(root: &Path, work: &Path, name: &str, role: &str) -> Gw {
    let port = free_port();
    let state = work.join(name);
    std::fs::create_dir_all(&state).unwrap();
    let cfg = format!(
        "[engine]\ncores = [0]\nidle = \"adaptive\"\nhugepages = \"off\"\n\
         [pools]\nsmall = 256\nmedium = 16\nlarge = 8\n\
         [tcp]\nlisten = \"127.0.0.1:{port}\"\n\
         [rdma]\nprovider = \"off\"\n\
         [backend]\nkind = \"fs\"\nroot = \"{}\"\nshared = true\nio = \"workers\"\n\
         [state]\ndir = \"{}\"\n\
         [nfs4]\nlease_time_s = 10\ngrace_time_s = 10\n\
         [ha]\nidentity = \"t\"\nlease_s = {LEASE_S}\nrole = \"{role}\"\n\
         [[exports]]\npath = \"/\"\nclients = [\"0.0.0.0/0\"]\nsquash = \"none\"\n",
        root.display(),
        state.display()
    );
    let conf = work.join(format!("{name}.toml"));
    std::fs::write(&conf, cfg).unwrap();
    let log = work.join(format!("{name}.log"));
    let child = Command::new(env!("CARGO_BIN_EXE_gateway"))
        .arg("--config")
        .arg(&conf)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    Gw { child, port, log }
}

impl Gw {
    fn addr(&self) -> std::net::SocketAddr {
        ([127, 0, 0, 1], self.port).into()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A connection once the gateway listens.
    fn connect(&self) -> Tcp41 {
        let end = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(self.addr()).is_err() {
            assert!(
                Instant::now() < end,
                "gateway never listened:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Tcp41::connect(self.addr())
    }
}

/// EXCHANGE_ID until it is not NFS4ERR_DELAY (the fence opens); then the session.
fn session_when_served(gw: &Gw, owner: &[u8], within: Duration) -> (Tcp41, Duration) {
    let t0 = Instant::now();
    loop {
        let mut c = gw.connect();
        let res = c.compound(&nfs_wire::v4call::Ops::new().exchange_id([9; 8], owner));
        if res.status == NFS4_OK {
            c.session(owner, 0);
            return (c, t0.elapsed());
        }
        assert_eq!(res.status, NFS4ERR_DELAY, "a fenced gateway answers DELAY");
        assert!(
            t0.elapsed() < within,
            "not served within {within:?}:\n{}",
            gw.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn lock_status(res: &Res) -> u32 {
    let mut r = after_seq(res);
    expect_op(&mut r, OP_PUTFH);
    expect_op(&mut r, OP_LOCK)
}

#[test]
fn standby_takes_over_and_clients_reclaim() {
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("objects");
    std::fs::create_dir_all(&root).unwrap();
    let mut a = spawn(&root, work.path(), "a", "active");
    let (mut c1, _) = session_when_served(&a, b"client-one", Duration::from_secs(20));
    let (st, _) = c1.seq_run(|o| o.reclaim_complete());
    assert_eq!(st, NFS4_OK);

    // OPEN (create) "f", LOCK [0, 100) for writing, WRITE and COMMIT.
    let clientid = c1.clientid;
    let how = How::WithAttrs {
        mode: UNCHECKED4,
        attrs: Fattr {
            bitmap: &[0, 0],
            values: &[],
        },
    };
    let (st, res) = c1.seq_run(|o| {
        o.putrootfh()
            .open(
                clientid,
                b"oo",
                ACCESS_BOTH | WANT_NO_DELEG,
                0,
                how,
                Claim::Null(b"f"),
            )
            .getfh()
    });
    assert_eq!(st, NFS4_OK, "OPEN");
    let mut r = after_seq(&res);
    expect_op(&mut r, OP_PUTROOTFH);
    expect_op(&mut r, OP_OPEN);
    let open = parse_open_ok(&mut r).stateid;
    expect_op(&mut r, OP_GETFH);
    let fh = r.opaque_var(128).unwrap().to_vec();
    let locker = Locker::New {
        open_stateid: &open,
        clientid,
        owner: b"lo",
    };
    let (st, _) = c1.seq_run(|o| o.putfh(&fh).lock(WRITE_LT, false, 0, 100, locker));
    assert_eq!(st, NFS4_OK, "LOCK");
    let (st, _) = c1.seq_run(|o| o.putfh(&fh).write(&open, 0, b"committed").commit(0, 0));
    assert_eq!(st, NFS4_OK, "WRITE + COMMIT");

    // A second active is refused while the first renews.
    let mut dup = spawn(&root, work.path(), "dup", "active");
    let end = Instant::now() + Duration::from_secs(LEASE_S * 5);
    let status = loop {
        if let Some(s) = dup.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < end,
            "second active not refused:\n{}",
            dup.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(!status.success());
    assert!(
        dup.log().contains("refusing to start a second active"),
        "{}",
        dup.log()
    );

    // The standby waits (DELAY) while the active holds the identity.
    let b = spawn(&root, work.path(), "b", "standby");
    let mut probe = b.connect();
    let res = probe.compound(&nfs_wire::v4call::Ops::new().exchange_id([9; 8], b"x"));
    assert_eq!(res.status, NFS4ERR_DELAY, "a standby serves no NFSv4 state");

    a.child.kill().unwrap(); // SIGKILL
    a.child.wait().unwrap();
    let killed = Instant::now();

    // Client one on the standby's port: a new client id, the same server owner; it
    // reclaims its open and its lock.
    let (mut c1, waited) = session_when_served(&b, b"client-one", Duration::from_secs(LEASE_S * 5));
    assert!(
        waited <= Duration::from_secs(LEASE_S * 3),
        "takeover took {waited:?}"
    );
    let clientid = c1.clientid;
    let (st, res) = c1.seq_run(|o| {
        o.putfh(&fh).open(
            clientid,
            b"oo",
            ACCESS_BOTH | WANT_NO_DELEG,
            0,
            How::NoCreate,
            Claim::Previous(0),
        )
    });
    assert_eq!(st, NFS4_OK, "OPEN CLAIM_PREVIOUS");
    let mut r = after_seq(&res);
    expect_op(&mut r, OP_PUTFH);
    expect_op(&mut r, OP_OPEN);
    let open = parse_open_ok(&mut r).stateid;
    let locker = Locker::New {
        open_stateid: &open,
        clientid,
        owner: b"lo",
    };
    let res = c1.run(|o| o.putfh(&fh).lock(WRITE_LT, true, 0, 100, locker));
    assert_eq!(lock_status(&res), NFS4_OK, "LOCK reclaim");
    let first_op = killed.elapsed();

    // Client two: new locks wait for the grace period, then conflict.
    let (mut c2, _) = session_when_served(&b, b"client-two", Duration::from_secs(5));
    let (st, _) = c2.seq_run(|o| o.reclaim_complete());
    assert_eq!(st, NFS4_OK);
    let c2id = c2.clientid;
    let (st, res) = c2.seq_run(|o| {
        o.putfh(&fh).open(
            c2id,
            b"o2",
            ACCESS_BOTH | WANT_NO_DELEG,
            0,
            How::NoCreate,
            Claim::Fh,
        )
    });
    assert!(st == NFS4ERR_GRACE, "OPEN in grace: {st}");
    let _ = res;
    let (st, _) = c1.seq_run(|o| o.reclaim_complete());
    assert_eq!(st, NFS4_OK, "RECLAIM_COMPLETE ends the grace period early");
    let (st, res) = c2.seq_run(|o| {
        o.putfh(&fh).open(
            c2id,
            b"o2",
            ACCESS_BOTH | WANT_NO_DELEG,
            0,
            How::NoCreate,
            Claim::Fh,
        )
    });
    assert_eq!(st, NFS4_OK, "OPEN after grace");
    let mut r = after_seq(&res);
    expect_op(&mut r, OP_PUTFH);
    expect_op(&mut r, OP_OPEN);
    let open2 = parse_open_ok(&mut r).stateid;
    let locker2 = Locker::New {
        open_stateid: &open2,
        clientid: c2id,
        owner: b"l2",
    };
    let res = c2.run(|o| o.putfh(&fh).lock(WRITE_LT, false, 50, 10, locker2));
    assert_eq!(
        lock_status(&res),
        NFS4ERR_DENIED,
        "the reclaimed lock holds"
    );

    // The committed bytes.
    let (st, res) = c1.seq_run(|o| o.putfh(&fh).read(&open, 0, 64));
    assert_eq!(st, NFS4_OK);
    let mut r = after_seq(&res);
    expect_op(&mut r, OP_PUTFH);
    expect_op(&mut r, OP_READ);
    let _eof = r.u32().unwrap();
    assert_eq!(r.opaque_var(64).unwrap(), b"committed");
    assert!(b.log().contains("ha: took the identity"), "{}", b.log());
    eprintln!("kill -9 -> session on the standby {waited:?}, -> lock reclaimed {first_op:?}");

    torn_record_lets_no_client_reclaim(&root, work.path(), b, &fh);
}

/// The record torn behind the holder's back, then the holder killed: the successor
/// serves, but refuses every reclaim (it cannot prove who held what).
fn torn_record_lets_no_client_reclaim(root: &Path, work: &Path, mut b: Gw, fh: &[u8]) {
    let dir = root.join(".nfsgw-tmp.shared/cas/ha~t~record");
    let newest = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .max()
        .unwrap();
    std::fs::write(&newest, b"nfsgw-recovery 1\nowner 6\n").unwrap();
    let c = spawn(root, work, "c", "standby");
    b.child.kill().unwrap();
    b.child.wait().unwrap();
    let (mut c1, _) = session_when_served(&c, b"client-one", Duration::from_secs(LEASE_S * 5));
    let clientid = c1.clientid;
    let (st, _) = c1.seq_run(|o| {
        o.putfh(fh).open(
            clientid,
            b"oo",
            ACCESS_BOTH | WANT_NO_DELEG,
            0,
            How::NoCreate,
            Claim::Previous(0),
        )
    });
    assert_eq!(st, NFS4ERR_NO_GRACE, "no reclaim from a torn record");
    assert!(c.log().contains("recovery record is torn"), "{}", c.log());
}
