//! `[ha]` (docs/ha.md) when the store *hangs* rather than fails: gateway processes on
//! one S3 bucket (moto's server; skipped when `moto_server` is not installed), the
//! active reaching it through a TCP relay of this test that can be frozen: it keeps
//! accepting connections and holds whatever they carry, answering nothing, as a
//! partition or a wedged store does. A connection that carried anything while frozen
//! is cut when the relay thaws (its bytes are lost, as the network would lose them).
//!
//! - `a_hung_store_stops_the_active_before_the_standby_takes_over`: the relay frozen
//!   both ways. The active's renewals and store calls never answer; it stops serving
//!   NFSv4 at its deadline (`t + 3L/4` after its last successful renewal) while its
//!   renewal is still outstanding, and logs so; the standby takes the identity only
//!   after the lease ran out. A client polls both addresses all along: never do both
//!   answer EXCHANGE_ID. The client reclaims at the standby. When the relay thaws,
//!   the old active finds the identity gone and stays a standby.
//! - `a_record_write_that_times_out_delays_the_confirm`: the relay loses the store's
//!   answers (requests reach the store, replies never come back) while a client
//!   confirms: its CREATE_SESSION gets NFS4ERR_DELAY, and when the store answers again
//!   its retry succeeds although the record write that timed out had landed. After the
//!   gateway restarts, the record it takes over holds every confirmed client (and
//!   not the one that gave up): the confirmed client reclaims its open and lock, the
//!   one that gave up can reclaim nothing.
//!
//! - `staged_data_is_never_uploaded_past_the_deadline`: the relay loses the store's
//!   answers (requests still reach it) while the active holds UNSTABLE data staged for
//!   a background upload (`flush_idle_s`) due after its deadline: the upload is never
//!   sent (it would reach the store), the staged data is dropped and logged.
//!
//! All run with `ha.lease_s = 8` and store calls bounded at 1.5 s (`timeout_s = 1`,
//! `retry_budget_s = 1.5`: below `lease_s / 4`, as the gateway requires).

mod common;
#[path = "common/ha.rs"]
mod ha;
#[path = "common/nfs4_client.rs"]
mod nfs4_client;

use ha::*;
use nfs4_client::*;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const LEASE_S: u64 = 8;

/// moto's S3 server on a free loopback port, killed when dropped.
struct Moto {
    child: Child,
    addr: SocketAddr,
}

impl Moto {
    fn start() -> Option<Moto> {
        let port = free_port();
        let child = Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let m = Moto {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(m.addr).is_err() {
            assert!(Instant::now() < deadline, "moto_server did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(m)
    }

    /// One unsigned request (moto does not check signatures): (status line, body).
    fn request(&self, method: &str, path: &str) -> (String, Vec<u8>) {
        self.request_as(method, path, "")
    }

    /// `request` with `extra` header lines (each ending in CRLF).
    fn request_as(&self, method: &str, path: &str, extra: &str) -> (String, Vec<u8>) {
        let mut s = TcpStream::connect(self.addr).unwrap();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: 0\r\n{extra}Connection: close\r\n\r\n",
            self.addr
        )
        .unwrap();
        let mut rep = Vec::new();
        s.read_to_end(&mut rep).unwrap();
        let at = rep.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        let head = String::from_utf8_lossy(&rep[..at]).to_string();
        (
            head.lines().next().unwrap_or("").to_string(),
            rep[at + 4..].to_vec(),
        )
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the relay does with what it carries.
const OPEN: u8 = 0;
/// Holds both ways: requests never reach the store, nothing comes back.
const FROZEN: u8 = 1;
/// Requests reach the store, its answers are held.
const NO_ANSWERS: u8 = 2;

/// A TCP relay to `upstream` whose traffic can be held (`FROZEN`, `NO_ANSWERS`).
struct Relay {
    addr: SocketAddr,
    mode: Arc<AtomicU8>,
    stop: Arc<AtomicBool>,
}

impl Relay {
    fn start(upstream: SocketAddr) -> Relay {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        l.set_nonblocking(true).unwrap();
        let mode = Arc::new(AtomicU8::new(OPEN));
        let stop = Arc::new(AtomicBool::new(false));
        let (m, st) = (mode.clone(), stop.clone());
        std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((down, _)) => {
                        down.set_nonblocking(false).unwrap();
                        let Ok(up) = TcpStream::connect(upstream) else {
                            continue;
                        };
                        let cut = Arc::new(Mutex::new(vec![
                            down.try_clone().unwrap(),
                            up.try_clone().unwrap(),
                        ]));
                        let (d2, u2) = (down.try_clone().unwrap(), up.try_clone().unwrap());
                        pipe(down, up, m.clone(), FROZEN, cut.clone());
                        pipe(u2, d2, m.clone(), NO_ANSWERS, cut);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Relay { addr, mode, stop }
    }

    fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::SeqCst);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.set(OPEN);
    }
}

/// Copies `from` to `to`; while the relay's mode is `FROZEN` or `also` (the mode that
/// holds this direction too), what was read is held, and the connection is cut when
/// the mode changes back (the held bytes are lost).
fn pipe(
    mut from: TcpStream,
    mut to: TcpStream,
    mode: Arc<AtomicU8>,
    also: u8,
    cut: Arc<Mutex<Vec<TcpStream>>>,
) {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        let kill = || {
            for s in cut.lock().unwrap().iter() {
                let _ = s.shutdown(Shutdown::Both);
            }
        };
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => {
                    let _ = to.shutdown(Shutdown::Write);
                    return;
                }
                Ok(n) => n,
            };
            let held = |m: u8| m == FROZEN || m == also;
            if held(mode.load(Ordering::SeqCst)) {
                while held(mode.load(Ordering::SeqCst)) {
                    std::thread::sleep(Duration::from_millis(5));
                }
                kill();
                return;
            }
            if to.write_all(&buf[..n]).is_err() {
                kill();
                return;
            }
        }
    });
}

/// A gateway serving identity "t" as `role` on `bucket`, reaching the store at `s3`.
fn spawn_s3(s3: SocketAddr, bucket: &str, work: &std::path::Path, name: &str, role: &str) -> Gw {
    spawn_s3_with(s3, bucket, work, name, role, "")
}

/// `spawn_s3` with `extra` lines in `[backend.s3]`.
fn spawn_s3_with(
    s3: SocketAddr,
    bucket: &str,
    work: &std::path::Path,
    name: &str,
    role: &str,
    extra: &str,
) -> Gw {
    let state = work.join(name);
    std::fs::create_dir_all(&state).unwrap();
    let addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let cfg = format!(
        "[engine]\ncores = [0]\nidle = \"adaptive\"\nhugepages = \"off\"\n\
         [pools]\nsmall = 256\nmedium = 16\nlarge = 8\n\
         [tcp]\nlisten = \"{addr}\"\n[rdma]\nprovider = \"off\"\n\
         [backend]\nkind = \"s3\"\nworkers = 2\n\
         [backend.s3]\nendpoint = \"http://{s3}\"\nregion = \"us-east-1\"\nbucket = \"{bucket}\"\n\
         path_style = true\nallow_http = true\naccess_key_id = \"testing\"\n\
         secret_access_key = \"testing\"\ntimeout_s = 1\nretry_budget_s = 1.5\n\
         connect_timeout_s = 1\nretries = 3\n{extra}\
         [state]\ndir = \"{}\"\n\
         [nfs4]\nlease_time_s = 10\ngrace_time_s = 10\n\
         [ha]\nidentity = \"t\"\nlease_s = {LEASE_S}\nrole = \"{role}\"\n\
         [[exports]]\npath = \"/\"\nclients = [\"0.0.0.0/0\"]\nsquash = \"none\"\n",
        state.display(),
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
    Gw {
        child,
        reach: addr,
        log,
        stats: None,
    }
}

/// Waits until `gw`'s log contains `what`; panics with `logs()` after `within`.
fn log_says(gw: &Gw, what: &str, within: Duration, logs: &dyn Fn() -> String) {
    let end = Instant::now() + within;
    while !gw.log().contains(what) {
        assert!(
            Instant::now() < end,
            "no {what:?} within {within:?}:\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The first log line of `gw` containing `what`.
fn line(gw: &Gw, what: &str) -> String {
    gw.log()
        .lines()
        .find(|l| l.contains(what))
        .unwrap_or_else(|| panic!("no {what:?} in:\n{}", gw.log()))
        .to_string()
}

/// A bucket of its own on `m` for one test.
fn bucket(m: &Moto, name: &str) -> String {
    let (st, _) = m.request("PUT", &format!("/{name}"));
    assert!(st.contains(" 200"), "CreateBucket: {st}");
    name.to_string()
}

/// Whether `addr` serves NFSv4.1 now: EXCHANGE_ID on a fresh connection is NFS4_OK
/// (a standby and a fenced active answer NFS4ERR_DELAY).
fn answers(addr: SocketAddr) -> bool {
    let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_millis(300)) else {
        return false;
    };
    drop(s);
    let mut c = Tcp41::connect(addr);
    let res = c.compound(&Ops::new().exchange_id([5; 8], b"prober"));
    assert!(
        res.status == NFS4_OK || res.status == NFS4ERR_DELAY,
        "EXCHANGE_ID: {}",
        res.status
    );
    res.status == NFS4_OK
}

/// Polls both addresses until `stop`: (the last time `a` answered, the first time `b`
/// did), each taken on the safe side (after `a`'s reply, before `b`'s request).
fn watch_both(
    a: SocketAddr,
    b: SocketAddr,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<(Option<Instant>, Option<Instant>)> {
    std::thread::spawn(move || {
        let (mut a_last, mut b_first) = (None, None);
        // `stop` may come while a probe of `a` is still waiting for its answer (the
        // stopped active answers slowly): keep probing until `b` has been seen once,
        // for at most 20 s after the stop, so the result never depends on that race.
        let mut stopped_at: Option<Instant> = None;
        loop {
            if stop.load(Ordering::Relaxed) {
                let at = *stopped_at.get_or_insert_with(Instant::now);
                if b_first.is_some() || at.elapsed() > Duration::from_secs(20) {
                    break;
                }
            }
            if answers(a) {
                a_last = Some(Instant::now());
            }
            let sent = Instant::now();
            if b_first.is_none() && answers(b) {
                b_first = Some(sent);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        (a_last, b_first)
    })
}

#[test]
fn a_hung_store_stops_the_active_before_the_standby_takes_over() {
    let Some(moto) = Moto::start() else {
        eprintln!("moto_server not installed: skipped");
        return;
    };
    let bucket = bucket(&moto, "hang");
    let relay = Relay::start(moto.addr);
    let work = tempfile::tempdir().unwrap();
    let a = spawn_s3(relay.addr, &bucket, work.path(), "a", "active");
    let logs = || format!("{}\n----\n", a.log());
    let (mut c1, _) = session_when_served(a.reach, b"client-one", Duration::from_secs(30), logs);
    let b = spawn_s3(moto.addr, &bucket, work.path(), "b", "standby");
    let logs = || format!("{}\n----\n{}", a.log(), b.log());
    log_says(
        &b,
        "identity held by another gateway",
        Duration::from_secs(30),
        &logs,
    );
    let held = hold_state(&mut c1);
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch_both(a.reach, b.reach, stop.clone());

    // The store hangs for the active: every renewal sent from now on goes unanswered,
    // so the last successful one was sent before `frozen`.
    std::thread::sleep(Duration::from_millis(300));
    relay.set(FROZEN);
    let frozen = Instant::now();
    // The data path hangs too: a COMMIT of the UNSTABLE write cannot reach the store,
    // so it must not succeed (it waits out the store's timeout, or the fence).
    let (st, _) = c1.seq_run(|o| o.putfh(&held.fh).commit(0, 0));
    assert_ne!(st, NFS4_OK, "a COMMIT answered while the store hangs");
    log_says(
        &a,
        "stopped serving NFSv4",
        Duration::from_secs(LEASE_S),
        &logs,
    );
    let stopped = frozen.elapsed();
    let deadline = Duration::from_millis(LEASE_S * 750);
    assert!(
        stopped < deadline + Duration::from_millis(500),
        "stopped {stopped:?} after the freeze, past the deadline ({deadline:?} at most)"
    );
    // Noticed at the deadline, not when the hung renewal returned.
    let stop_line = line(&a, "stopped serving NFSv4");
    let late: u64 = stop_line
        .split("late_ms=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no late_ms in {stop_line}"));
    assert!(late < 300, "the stop came {late} ms after the deadline");

    log_says(
        &b,
        "ha: took the identity",
        Duration::from_secs(LEASE_S * 2),
        &logs,
    );
    // The last successful renewal was sent at most L/4 before the freeze, and the
    // standby waits a whole lease after it saw it.
    let took = frozen.elapsed();
    assert!(
        took >= Duration::from_millis(LEASE_S * 750) && took > stopped,
        "taken over {took:?} after the freeze (the active stopped at {stopped:?}): before the lease ran out"
    );
    let (mut c1, _) = session_when_served(b.reach, b"client-one", Duration::from_secs(20), logs);
    reclaim_state(&mut c1, &held);
    stop.store(true, Ordering::Relaxed);
    let (a_last, b_first) = watcher.join().unwrap();
    let (a_last, b_first) = (a_last.expect("a served"), b_first.expect("b served"));
    assert!(
        a_last < b_first,
        "both answered: the active until {:?} after the freeze, the standby from {:?}",
        a_last.saturating_duration_since(frozen),
        b_first.saturating_duration_since(frozen)
    );
    let word = |l: String| l.split_whitespace().next().unwrap_or("").to_string();
    let (a_stop, b_took) = (word(stop_line), word(line(&b, "ha: took the identity")));
    assert!(
        a_stop < b_took,
        "took ({b_took}) before the active stopped ({a_stop})"
    );

    // The store answers the old active again: it finds the identity taken and stays
    // a standby (its EXCHANGE_ID keeps answering NFS4ERR_DELAY).
    relay.set(OPEN);
    log_says(
        &a,
        "another gateway took the identity",
        Duration::from_secs(LEASE_S),
        &logs,
    );
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(3) {
        assert!(
            !answers(a.reach),
            "the old active serves again:\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(answers(b.reach));
    eprintln!(
        "store hang: the active stopped {stopped:?} after the freeze ({late} ms past its \
         deadline), the standby took over {took:?} after it"
    );
}

/// EXCHANGE_ID then CREATE_SESSION for `owner` on a new connection: the connection,
/// its client id and sequence id, and CREATE_SESSION's status.
fn confirm(addr: SocketAddr, owner: &[u8]) -> (Tcp41, u64, u32, u32) {
    let mut c = Tcp41::connect(addr);
    let (id, seq, _) = c.exchange_id(owner, [3; 8]);
    let st = c
        .compound(&Ops::new().create_session_tcp(id, seq, 0, 8))
        .status;
    (c, id, seq, st)
}

#[test]
fn a_record_write_that_times_out_delays_the_confirm() {
    let Some(moto) = Moto::start() else {
        eprintln!("moto_server not installed: skipped");
        return;
    };
    let bucket = bucket(&moto, "recordhang");
    let relay = Relay::start(moto.addr);
    let work = tempfile::tempdir().unwrap();
    let a = spawn_s3(relay.addr, &bucket, work.path(), "a", "active");
    let logs = || a.log();
    let (mut c0, _) = session_when_served(a.reach, b"client-zero", Duration::from_secs(30), logs);
    let (st, _) = c0.seq_run(|o| o.reclaim_complete());
    assert_eq!(st, NFS4_OK);

    // The store takes requests but its answers are lost: both confirms time out.
    relay.set(NO_ANSWERS);
    let (mut late, id, seq, st) = confirm(a.reach, b"client-late");
    assert_eq!(
        st, NFS4ERR_DELAY,
        "CREATE_SESSION while the record write hangs"
    );
    let (_gone, _, _, st) = confirm(a.reach, b"client-gone");
    assert_eq!(
        st, NFS4ERR_DELAY,
        "CREATE_SESSION while the record write hangs"
    );
    assert!(a.log().contains("its owner is not recorded"), "{}", a.log());
    relay.set(OPEN);

    // The client retries its CREATE_SESSION until the store answers again.
    let t0 = Instant::now();
    loop {
        let res = late.compound(&Ops::new().create_session_tcp(id, seq, 0, 8));
        if res.status == NFS4_OK {
            let mut r = res.reader();
            expect_op(&mut r, OP_CREATE_SESSION);
            let (sid, _, _, fore) = read_create_session(&mut r);
            (late.sid, late.fore, late.clientid, late.seq) = (sid, fore, id, 1);
            break;
        }
        assert_eq!(res.status, NFS4ERR_DELAY, "CREATE_SESSION retried");
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the retried CREATE_SESSION never succeeded:\n{}",
            a.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        !a.log().contains("record changed under this gateway"),
        "its own landed write taken for another gateway's:\n{}",
        a.log()
    );
    let held = hold_state(&mut late);

    // The gateway restarts: the confirmed client reclaims its open and lock.
    let mut a = a;
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let a2 = spawn_s3(moto.addr, &bucket, work.path(), "a2", "active");
    let (mut late, _) = session_when_served(
        a2.reach,
        b"client-late",
        Duration::from_secs(LEASE_S * 3),
        || a2.log(),
    );
    reclaim_state(&mut late, &held);
    // The record it took over holds the two confirmed clients' owners, not the one
    // that gave up (its write never landed: it was conditional on a version the
    // landed write had replaced).
    let took = line(&a2, "ha: took the identity");
    assert!(took.contains("clients=2"), "{took}");
    let (mut gone, _) =
        session_when_served(a2.reach, b"client-gone", Duration::from_secs(5), || {
            a2.log()
        });
    let gid = gone.clientid;
    let (st, _) = gone.seq_run(|o| {
        o.putfh(&held.fh).open(
            gid,
            b"oo",
            ACCESS_BOTH | WANT_NO_DELEG,
            0,
            How::NoCreate,
            Claim::Previous(0),
        )
    });
    assert!(
        st == NFS4ERR_NO_GRACE || st == NFS4ERR_RECLAIM_BAD,
        "a reclaim by a client that held nothing: {st}"
    );
}

#[test]
fn staged_data_is_never_uploaded_past_the_deadline() {
    let Some(moto) = Moto::start() else {
        eprintln!("moto_server not installed: skipped");
        return;
    };
    let bucket = bucket(&moto, "late");
    let relay = Relay::start(moto.addr);
    let work = tempfile::tempdir().unwrap();
    // The idle upload comes 7 s after the last write: past the deadline, which is at
    // most 3L/4 = 6 s after the last renewal the active heard answered.
    let a = spawn_s3_with(
        relay.addr,
        &bucket,
        work.path(),
        "a",
        "active",
        "flush_idle_s = 7\n",
    );
    let logs = || a.log();
    let (mut c1, _) = session_when_served(a.reach, b"client-one", Duration::from_secs(30), logs);
    // "committed" in the store, "+pending" staged (UNSTABLE) after it.
    let _held = hold_state(&mut c1);
    let wrote = Instant::now();
    // From now on the store takes every request and answers none: a request the
    // active sends lands, and it hears nothing back, so it stops at its deadline.
    relay.set(NO_ANSWERS);
    log_says(
        &a,
        "stopped serving NFSv4",
        Duration::from_secs(LEASE_S),
        &logs,
    );
    // The idle flusher's turn (7 s after the write, every 0.5 s) and a margin.
    std::thread::sleep(Duration::from_millis(9500).saturating_sub(wrote.elapsed()));
    let (st, body) = get_object(&moto, &bucket, "f");
    assert!(st.contains(" 200"), "GET f: {st}");
    assert_eq!(
        String::from_utf8_lossy(&body),
        String::from_utf8_lossy(COMMITTED),
        "staged data reached the store past the deadline:\n{}",
        a.log()
    );
    relay.set(OPEN);
    log_says(
        &a,
        "staged writes dropped, never uploaded",
        Duration::from_secs(3),
        &logs,
    );
    let (_, body) = get_object(&moto, &bucket, "f");
    assert_eq!(body, COMMITTED, "uploaded later");
}

/// GetObject from moto itself: moto wants an Authorization header on objects, but
/// does not check its signature.
fn get_object(m: &Moto, bucket: &str, key: &str) -> (String, Vec<u8>) {
    m.request_as(
        "GET",
        &format!("/{bucket}/{key}"),
        "Authorization: AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00\r\n",
    )
}
