//! Shared by the `[ha]` tests (docs/ha.md): gateway processes serving one identity on
//! a shared `fs` directory, and the client side of a takeover — the state a client
//! holds before its gateway dies and the reclaim it makes on the successor (RFC 8881
//! §8.4.2: a new client id, the same server owner, OPEN with CLAIM_PREVIOUS and LOCK
//! with `reclaim`).
#![allow(dead_code)]

use crate::nfs4_client::*;
use nfs_wire::nfs4args::UNCHECKED4;
use nfs_wire::v4call::Fattr;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How one gateway of the pair is started.
pub struct Spec<'a> {
    /// The shared object directory (`backend.shared = true`).
    pub root: &'a Path,
    /// Where its config, state dir and log go.
    pub work: &'a Path,
    pub name: &'a str,
    /// "active" or "standby".
    pub role: &'a str,
    pub lease_s: u64,
    /// `tcp.listen`.
    pub listen: SocketAddr,
    /// Where clients reach it (the listen address, or a service address that moves).
    pub reach: SocketAddr,
    /// Run inside this network namespace (`ip netns exec`), with its stats on
    /// 127.0.0.1:9108 there (what tools/ha/check.sh reads).
    pub netns: Option<&'a str>,
    /// `rdma.listen` with the `soft` provider; `None`: RDMA off.
    pub rdma: Option<SocketAddr>,
    /// More configuration (whole sections, e.g. `[pnfs]`), appended as is.
    pub extra: &'a str,
    /// More `[ha]` keys (lines), e.g. `etcd = [...]`.
    pub ha: &'a str,
}

impl<'a> Spec<'a> {
    /// A gateway on its own port of 127.0.0.1, no namespace, no RDMA, nothing more
    /// configured: what the loopback tests start (`Spec { extra, ..Spec::local(…) }`).
    pub fn local(
        root: &'a Path,
        work: &'a Path,
        name: &'a str,
        role: &'a str,
        lease_s: u64,
    ) -> Self {
        let addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        Spec {
            root,
            work,
            name,
            role,
            lease_s,
            listen: addr,
            reach: addr,
            netns: None,
            rdma: None,
            extra: "",
            ha: "",
        }
    }
}

pub struct Gw {
    pub child: Child,
    pub reach: SocketAddr,
    pub log: PathBuf,
    /// Its `/metrics` endpoint, reachable from the test (not in a namespace).
    pub stats: Option<SocketAddr>,
}

impl Drop for Gw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A gateway process serving identity "t" as `spec.role`.
pub fn spawn(spec: &Spec) -> Gw {
    let state = spec.work.join(spec.name);
    std::fs::create_dir_all(&state).unwrap();
    let (stats, endpoint) = if spec.netns.is_some() {
        ("[stats]\nlisten = \"127.0.0.1:9108\"\n".to_string(), None)
    } else {
        let a = SocketAddr::from(([127, 0, 0, 1], free_port()));
        (format!("[stats]\nlisten = \"{a}\"\n"), Some(a))
    };
    let rdma = match spec.rdma {
        Some(a) => format!("[rdma]\nprovider = \"soft\"\nlisten = \"{a}\"\n"),
        None => "[rdma]\nprovider = \"off\"\n".to_string(),
    };
    let cfg = format!(
        "[engine]\ncores = [0]\nidle = \"adaptive\"\nhugepages = \"off\"\n\
         [pools]\nsmall = 256\nmedium = 16\nlarge = 8\n\
         [tcp]\nlisten = \"{}\"\n\
         {rdma}\
         [backend]\nkind = \"fs\"\nroot = \"{}\"\nshared = true\nio = \"workers\"\n\
         [state]\ndir = \"{}\"\n{stats}\
         [nfs4]\nlease_time_s = 10\ngrace_time_s = 10\n\
         [ha]\nidentity = \"t\"\nlease_s = {}\nrole = \"{}\"\n{}\n\
         [[exports]]\npath = \"/\"\nclients = [\"0.0.0.0/0\"]\nsquash = \"none\"\n{}",
        spec.listen,
        spec.root.display(),
        state.display(),
        spec.lease_s,
        spec.role,
        spec.ha,
        spec.extra,
    );
    let conf = spec.work.join(format!("{}.toml", spec.name));
    std::fs::write(&conf, cfg).unwrap();
    let log = spec.work.join(format!("{}.log", spec.name));
    let bin = env!("CARGO_BIN_EXE_gateway");
    let mut cmd = match spec.netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, bin]);
            c
        }
        None => Command::new(bin),
    };
    let child = cmd
        .arg("--config")
        .arg(&conf)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    Gw {
        child,
        reach: spec.reach,
        log,
        stats: endpoint,
    }
}

impl Gw {
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The text of its `/metrics` (docs/stats.md), fetched over HTTP/1.0.
    pub fn metrics(&self) -> String {
        use std::io::{Read, Write};
        let addr = self.stats.expect("a gateway with a stats endpoint");
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text
    }

    /// The value of one series (`name` or `name{labels}` exactly), `None` when absent.
    pub fn metric(&self, series: &str) -> Option<u64> {
        self.metrics()
            .lines()
            .find(|l| l.starts_with(series) && l.as_bytes().get(series.len()) == Some(&b' '))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }

    /// A connection once something listens at `reach` (within 20 s).
    pub fn connect(&self) -> Tcp41 {
        connect_within(self.reach, Duration::from_secs(20), || self.log())
    }
}

/// A connection to `addr` once it accepts one, panicking with `why()` after `within`.
pub fn connect_within(addr: SocketAddr, within: Duration, why: impl Fn() -> String) -> Tcp41 {
    let end = Instant::now() + within;
    while TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_err() {
        assert!(
            Instant::now() < end,
            "nothing listens at {addr}:\n{}",
            why()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Tcp41::connect(addr)
}

/// EXCHANGE_ID at `addr` until it is not NFS4ERR_DELAY (the fence opens) and the
/// connection holds; then the session. How long that took.
pub fn session_when_served(
    addr: SocketAddr,
    owner: &[u8],
    within: Duration,
    why: impl Fn() -> String,
) -> (Tcp41, Duration) {
    session_when_served_flags(addr, owner, 0, within, why)
}

/// `session_when_served` with CREATE_SESSION `flags` (CONN_BACK_CHAN: this connection
/// is the session's back channel too).
pub fn session_when_served_flags(
    addr: SocketAddr,
    owner: &[u8],
    flags: u32,
    within: Duration,
    why: impl Fn() -> String,
) -> (Tcp41, Duration) {
    let t0 = Instant::now();
    loop {
        let left = within.saturating_sub(t0.elapsed());
        let mut c = connect_within(addr, left.max(Duration::from_millis(1)), &why);
        let res = c.compound(&nfs_wire::v4call::Ops::new().exchange_id([9; 8], owner));
        if res.status == NFS4_OK {
            c.session(owner, flags);
            return (c, t0.elapsed());
        }
        assert_eq!(res.status, NFS4ERR_DELAY, "a fenced gateway answers DELAY");
        assert!(
            t0.elapsed() < within,
            "not served within {within:?}:\n{}",
            why()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A v4.1 client the takeover helpers drive: over TCP (`Tcp41`) or RPC-over-RDMA
/// (`Rdma41`).
pub trait Client41 {
    fn clientid(&self) -> u64;
    /// SEQUENCE (slot 0, the next sequence id) followed by what `f` adds.
    fn run_ops(&mut self, f: impl FnOnce(Ops) -> Ops) -> Res;
    /// As `run_ops`, checking SEQUENCE succeeded; the COMPOUND's status and reply.
    fn seq_ok(&mut self, f: impl FnOnce(Ops) -> Ops) -> (u32, Res) {
        let res = self.run_ops(f);
        let mut r = res.reader();
        assert_eq!(expect_op(&mut r, OP_SEQUENCE), NFS4_OK, "SEQUENCE");
        (res.status, res)
    }
}

impl Client41 for Tcp41 {
    fn clientid(&self) -> u64 {
        self.clientid
    }
    fn run_ops(&mut self, f: impl FnOnce(Ops) -> Ops) -> Res {
        self.run(f)
    }
}

/// An NFSv4.1 session over RPC-over-RDMA (the `soft` provider), no back channel.
pub struct Rdma41 {
    pub c: V41,
    pub clientid: u64,
    sid: [u8; 16],
    seq: u32,
}

impl Client41 for Rdma41 {
    fn clientid(&self) -> u64 {
        self.clientid
    }
    fn run_ops(&mut self, f: impl FnOnce(Ops) -> Ops) -> Res {
        let ops = f(Ops::new().sequence(self.sid, self.seq));
        self.seq += 1;
        self.c.compound(&ops)
    }
}

impl Rdma41 {
    /// A session at `addr` once something listens there over RDMA and its fence is
    /// open (EXCHANGE_ID not NFS4ERR_DELAY); panics with `why()` after `within`.
    pub fn when_served(
        addr: SocketAddr,
        owner: &[u8],
        within: Duration,
        why: impl Fn() -> String,
    ) -> Rdma41 {
        let end = Instant::now() + within;
        loop {
            assert!(
                Instant::now() < end,
                "no NFSv4.1 over RDMA at {addr} within {within:?}:\n{}",
                why()
            );
            let Ok(mut c) = V41::try_connect(addr, 8, 0) else {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            };
            let res = c.compound(&Ops::new().exchange_id([9; 8], owner));
            if res.status == NFS4ERR_DELAY {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            assert_eq!(res.status, NFS4_OK, "EXCHANGE_ID over RDMA");
            let (clientid, sid, _) = c.session(owner, 0, 1);
            return Rdma41 {
                c,
                clientid,
                sid,
                seq: 1,
            };
        }
    }
}

pub fn lock_status(res: &Res) -> u32 {
    let mut r = after_seq(res);
    expect_op(&mut r, OP_PUTFH);
    expect_op(&mut r, OP_LOCK)
}

/// What client one holds when its gateway dies: file "f" open for both, a write lock
/// on [0, 100), "committed" at 0 COMMITted, and `pending` written UNSTABLE at 9 under
/// `verifier` (the write in progress).
pub struct Held {
    pub fh: Vec<u8>,
    pub verifier: [u8; 8],
}

pub const COMMITTED: &[u8] = b"committed";
pub const PENDING: &[u8] = b"+pending";

/// Client one's state before the kill (see `Held`), in a new session on `c`.
pub fn hold_state(c: &mut impl Client41) -> Held {
    let (st, _) = c.seq_ok(|o| o.reclaim_complete());
    assert_eq!(st, NFS4_OK);
    let clientid = c.clientid();
    let how = How::WithAttrs {
        mode: UNCHECKED4,
        attrs: Fattr {
            bitmap: &[0, 0],
            values: &[],
        },
    };
    let (st, res) = c.seq_ok(|o| {
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
    let (st, _) = c.seq_ok(|o| o.putfh(&fh).lock(WRITE_LT, false, 0, 100, locker));
    assert_eq!(st, NFS4_OK, "LOCK");
    let (st, _) = c.seq_ok(|o| o.putfh(&fh).write(&open, 0, COMMITTED).commit(0, 0));
    assert_eq!(st, NFS4_OK, "WRITE + COMMIT");
    let verifier = write_unstable(c, &fh, &open);
    Held { fh, verifier }
}

/// WRITE `PENDING` at 9, UNSTABLE4: the write verifier of the reply.
fn write_unstable(c: &mut impl Client41, fh: &[u8], open: &[u8; 16]) -> [u8; 8] {
    let (st, res) = c.seq_ok(|o| o.putfh(fh).write_stable(open, 9, 0, PENDING));
    assert_eq!(st, NFS4_OK, "WRITE UNSTABLE");
    let mut r = after_seq(&res);
    expect_op(&mut r, OP_PUTFH);
    expect_op(&mut r, OP_WRITE);
    let _count = r.u32().unwrap();
    let _committed = r.u32().unwrap();
    r.opaque_fixed(8).unwrap().try_into().unwrap()
}

/// Client one on the successor (a new session `c`): reclaims its open and its lock,
/// then finishes the write in progress by the verifier rule (RFC 8881 §18.32.3: a
/// COMMIT verifier unlike the WRITE's means the data may be lost; send it again).
/// The reclaimed open stateid.
pub fn reclaim_state(c: &mut impl Client41, held: &Held) -> [u8; 16] {
    let clientid = c.clientid();
    let fh = &held.fh;
    let (st, res) = c.seq_ok(|o| {
        o.putfh(fh).open(
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
    let res = c.run_ops(|o| o.putfh(fh).lock(WRITE_LT, true, 0, 100, locker));
    assert_eq!(lock_status(&res), NFS4_OK, "LOCK reclaim");
    open
}

/// The write in progress, completed: COMMIT; a new verifier (the successor is another
/// server instance) means the UNSTABLE data is sent again and committed.
pub fn finish_write(c: &mut impl Client41, held: &Held, open: &[u8; 16]) {
    let (st, res) = c.seq_ok(|o| o.putfh(&held.fh).commit(0, 0));
    assert_eq!(st, NFS4_OK, "COMMIT after the takeover");
    let mut r = after_seq(&res);
    expect_op(&mut r, OP_PUTFH);
    expect_op(&mut r, OP_COMMIT);
    let verifier: [u8; 8] = r.opaque_fixed(8).unwrap().try_into().unwrap();
    assert_ne!(
        verifier, held.verifier,
        "another gateway instance must not present the dead one's write verifier"
    );
    let again = write_unstable(c, &held.fh, open);
    let (st, res) = c.seq_ok(|o| o.putfh(&held.fh).commit(0, 0));
    assert_eq!(st, NFS4_OK, "COMMIT of the resent data");
    let mut r = after_seq(&res);
    expect_op(&mut r, OP_PUTFH);
    expect_op(&mut r, OP_COMMIT);
    assert_eq!(r.opaque_fixed(8).unwrap(), again, "the verifier holds now");
}

/// A second client during and after the grace period: its OPEN waits for the grace
/// period (NFS4ERR_GRACE) until client one's RECLAIM_COMPLETE ends it early (its own
/// does not, whether the record knows it or not), then its conflicting lock is refused
/// (NFS4ERR_DENIED): the reclaimed lock holds.
pub fn second_client_conflicts(c1: &mut Tcp41, c2: &mut Tcp41, fh: &[u8]) {
    let (st, _) = c2.seq_run(|o| o.reclaim_complete());
    assert_eq!(st, NFS4_OK);
    let c2id = c2.clientid;
    let open2 = |o: nfs_wire::v4call::Ops| {
        o.putfh(fh).open(
            c2id,
            b"o2",
            ACCESS_BOTH | WANT_NO_DELEG,
            0,
            How::NoCreate,
            Claim::Fh,
        )
    };
    let (st, _) = c2.seq_run(open2);
    assert_eq!(st, NFS4ERR_GRACE, "OPEN in grace");
    let (st, _) = c1.seq_run(|o| o.reclaim_complete());
    assert_eq!(st, NFS4_OK, "RECLAIM_COMPLETE ends the grace period early");
    let (st, res) = c2.seq_run(open2);
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
    let res = c2.run(|o| o.putfh(fh).lock(WRITE_LT, false, 50, 10, locker2));
    assert_eq!(
        lock_status(&res),
        NFS4ERR_DENIED,
        "the reclaimed lock holds"
    );
}

/// A second client before the kill, at the active: open for both, and its lock on
/// [50, 60), which conflicts with client one's write lock, refused (NFS4ERR_DENIED).
/// Its owner is then in the record too, so at the successor the grace period lasts
/// until both clients sent RECLAIM_COMPLETE.
pub fn conflicting_lock_refused_before(c2: &mut Tcp41, fh: &[u8]) {
    let (st, _) = c2.seq_run(|o| o.reclaim_complete());
    assert_eq!(st, NFS4_OK);
    let c2id = c2.clientid;
    let (st, res) = c2.seq_run(|o| {
        o.putfh(fh).open(
            c2id,
            b"o2",
            ACCESS_BOTH | WANT_NO_DELEG,
            0,
            How::NoCreate,
            Claim::Fh,
        )
    });
    assert_eq!(st, NFS4_OK, "OPEN before the kill");
    let mut r = after_seq(&res);
    expect_op(&mut r, OP_PUTFH);
    expect_op(&mut r, OP_OPEN);
    let open2 = parse_open_ok(&mut r).stateid;
    let locker2 = Locker::New {
        open_stateid: &open2,
        clientid: c2id,
        owner: b"l2",
    };
    let res = c2.run(|o| o.putfh(fh).lock(WRITE_LT, false, 50, 10, locker2));
    assert_eq!(
        lock_status(&res),
        NFS4ERR_DENIED,
        "client one's lock holds before the kill"
    );
}

/// Every COMMITted byte is there: "committed+pending".
pub fn read_back(c: &mut impl Client41, fh: &[u8], open: &[u8; 16]) {
    let (st, res) = c.seq_ok(|o| o.putfh(fh).read(open, 0, 64));
    assert_eq!(st, NFS4_OK);
    let mut r = after_seq(&res);
    expect_op(&mut r, OP_PUTFH);
    expect_op(&mut r, OP_READ);
    let _eof = r.u32().unwrap();
    let want = [COMMITTED, PENDING].concat();
    assert_eq!(r.opaque_var(64).unwrap(), &want[..]);
}

/// Waits until the gateway's CB_NULL probe of `c`'s back channel came and was
/// answered (RFC 8881 §2.10.3.1: no delegation before it).
pub fn back_channel_probed(c: &mut Tcp41) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.cb_nulls == 0 {
        assert!(c.next_callback(Duration::from_millis(50)).is_none());
        assert!(Instant::now() < deadline, "no CB_NULL probe");
    }
}

/// The file client one holds a read delegation of, open-owner "ro".
pub const DELEGATED: &[u8] = b"r";

/// OPEN of `DELEGATED` by open-owner "ro" with `claim` for reading, no delegation
/// preference (the server decides); tried again while no delegation comes (the
/// gateway may not yet have seen the back channel's answer to its probe; a second
/// OPEN by the same open-owner only upgrades the open). The reply.
fn open_for_delegation(c: &mut Tcp41, fh: &[u8], claim: impl Fn() -> Claim<'static>) -> Opened {
    let id = c.clientid;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (st, res) = c.seq_run(|o| {
            o.putfh(fh)
                .open(id, b"ro", ACCESS_READ, 0, How::NoCreate, claim())
        });
        assert_eq!(st, NFS4_OK, "OPEN for a read delegation");
        let mut r = after_seq(&res);
        expect_op(&mut r, OP_PUTFH);
        expect_op(&mut r, OP_OPEN);
        let opened = parse_open_ok(&mut r);
        if opened.deleg.is_some() {
            return opened;
        }
        assert!(
            Instant::now() < deadline,
            "no read delegation (RFC 8881 §10.4)"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Client one (a back channel, RECLAIM_COMPLETE sent) before the kill: `DELEGATED`
/// created and written, then opened for reading with a read delegation. Its handle.
pub fn hold_read_delegation(c: &mut Tcp41) -> Vec<u8> {
    back_channel_probed(c);
    let clientid = c.clientid;
    let (st, res) = c.seq_run(|o| {
        o.putrootfh()
            .open(
                clientid,
                b"ro",
                ACCESS_BOTH | WANT_NO_DELEG,
                0,
                How::Unchecked,
                Claim::Null(DELEGATED),
            )
            .getfh()
    });
    assert_eq!(st, NFS4_OK, "OPEN (create) of the delegated file");
    let mut r = after_seq(&res);
    expect_op(&mut r, OP_PUTROOTFH);
    expect_op(&mut r, OP_OPEN);
    let open = parse_open_ok(&mut r).stateid;
    expect_op(&mut r, OP_GETFH);
    let fh = r.opaque_var(128).unwrap().to_vec();
    let (st, _) = c.seq_run(|o| o.putfh(&fh).write(&open, 0, b"read me").close(&open));
    assert_eq!(st, NFS4_OK, "WRITE + CLOSE");
    let held = open_for_delegation(c, &fh, || Claim::Fh);
    assert!(!held.write, "a read delegation");
    fh
}

/// At the successor, in its grace period: OPEN CLAIM_PREVIOUS with the delegation
/// type held (RFC 8881 §10.2.1, §18.16.3 delegate_type = OPEN_DELEGATE_READ). The
/// reclaimed delegation's stateid.
pub fn reclaim_read_delegation(c: &mut Tcp41, fh: &[u8]) -> [u8; 16] {
    back_channel_probed(c);
    let opened = open_for_delegation(c, fh, || Claim::Previous(OPEN_DELEGATE_READ));
    assert!(!opened.write, "a read delegation, as held");
    opened.deleg.unwrap()
}

/// After the grace period, client two's OPEN of `DELEGATED` for writing conflicts
/// with the reclaimed read delegation (RFC 8881 §10.4.2): NFS4ERR_DELAY while the
/// gateway sends CB_RECALL of exactly that delegation to client one, which returns
/// it (DELEGRETURN); then client two's OPEN succeeds.
pub fn write_open_recalls_the_reclaimed_delegation(
    c1: &mut Tcp41,
    c2: &mut Tcp41,
    fh: &[u8],
    deleg: &[u8; 16],
) {
    let c2id = c2.clientid;
    let open2 = |c2: &mut Tcp41| {
        c2.seq_run(|o| {
            o.putfh(fh).open(
                c2id,
                b"w2",
                ACCESS_WRITE | WANT_NO_DELEG,
                0,
                How::NoCreate,
                Claim::Fh,
            )
        })
        .0
    };
    assert_eq!(
        open2(c2),
        NFS4ERR_DELAY,
        "a write OPEN waits for the recall"
    );
    let rec = c1
        .next_callback(Duration::from_secs(10))
        .expect("CB_RECALL to the client that reclaimed the delegation");
    assert_eq!(&c1.answer(&rec).stateid, deleg, "the reclaimed delegation");
    let (st, _) = c1.seq_run(|o| o.putfh(fh).delegreturn(deleg));
    assert_eq!(st, NFS4_OK, "DELEGRETURN");
    assert_eq!(
        open2(c2),
        NFS4_OK,
        "the write OPEN once the delegation is back"
    );
}
