//! A real etcd for the `[ha] etcd` tests (docs/ha.md "Fencing: etcd"): one member on
//! loopback with free ports and a temporary data directory, killed when dropped.
//! Shared by the unit tests (`gateway/src/ha/etcd_tests.rs`) and the integration
//! tests; uses nothing but std and tempfile.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Etcd {
    child: Child,
    pub url: String,
    pub addr: SocketAddr,
    pub dir: tempfile::TempDir,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.resume();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The etcd binary (tests/setup.sh installs Debian's etcd-server), or `None` when it
/// is absent outside CI (the caller skips, saying so); in CI its absence fails.
pub fn binary() -> Option<&'static str> {
    let found = Command::new("etcd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if found {
        return Some("etcd");
    }
    if std::env::var_os("CI").is_some() {
        panic!("etcd is not installed (tests/setup.sh installs etcd-server): CI must run the [ha] etcd tests");
    }
    eprintln!("SKIPPED: no etcd binary (apt-get install etcd-server; tests/setup.sh does)");
    None
}

/// Starts a one-member etcd and waits until it answers; `None`: skipped (`binary`).
pub fn start() -> Option<Etcd> {
    let bin = binary()?;
    let dir = tempfile::tempdir().unwrap();
    let (c, p) = (port(), port());
    let url = format!("http://127.0.0.1:{c}");
    let peer = format!("http://127.0.0.1:{p}");
    let log = std::fs::File::create(dir.path().join("etcd.log")).unwrap();
    let child = Command::new(bin)
        .args(["--name", "default", "--data-dir"])
        .arg(dir.path().join("data"))
        .args([
            "--listen-client-urls",
            &url,
            "--advertise-client-urls",
            &url,
        ])
        .args([
            "--listen-peer-urls",
            &peer,
            "--initial-advertise-peer-urls",
            &peer,
        ])
        .args(["--initial-cluster", &format!("default={peer}")])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{c}").parse().unwrap();
    let e = Etcd {
        child,
        url,
        addr,
        dir,
    };
    let t0 = Instant::now();
    while !e.healthy() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "etcd did not start: {}",
            e.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    Some(e)
}

impl Etcd {
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }

    /// Whether it answers a linearizable read.
    pub fn healthy(&self) -> bool {
        self.post("/v3/kv/range", r#"{"key":"AA=="}"#)
            .is_some_and(|a| a.starts_with("HTTP/1.1 200"))
    }

    /// One POST over HTTP/1.1; the whole answer (head and body), `None` on any error.
    pub fn post(&self, path: &str, body: &str) -> Option<String> {
        let mut s = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).ok()?;
        let mut a = String::new();
        s.read_to_string(&mut a).ok()?;
        Some(a)
    }

    /// How many keys start with `prefix` (a linearizable count).
    pub fn count(&self, prefix: &str) -> usize {
        let mut end = prefix.as_bytes().to_vec();
        *end.last_mut().unwrap() += 1;
        let body = format!(
            r#"{{"key":"{}","range_end":"{}","count_only":true}}"#,
            b64(prefix.as_bytes()),
            b64(&end)
        );
        let a = self.post("/v3/kv/range", &body).expect("etcd answers");
        let Some(i) = a.find("\"count\":\"") else {
            return 0;
        };
        let rest = &a[i + 9..];
        rest[..rest.find('"').unwrap()].parse().unwrap()
    }

    /// Freezes the member (SIGSTOP): connections are taken by the kernel, never
    /// answered — a coordination service that hangs. Returns once every thread of
    /// it has stopped: kill(2) only queues the stop, each thread takes it when it
    /// next runs, and one still running answered the call a test made next (a CI
    /// rehearsal: `dead_endpoints_are_skipped_and_a_frozen_etcd_times_out` read its
    /// key from a member it had just frozen, on a loaded machine).
    pub fn freeze(&self) {
        let pid = self.child.id();
        // SAFETY: kill(2) on our own child's pid (not yet waited for: `Drop` waits).
        unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !all_threads_stopped(pid) {
            assert!(
                Instant::now() < deadline,
                "etcd {pid} did not stop within 10 s"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Lets a frozen member go on (SIGCONT).
    pub fn resume(&self) {
        // SAFETY: as in `freeze`.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGCONT) };
    }
}

/// Whether every thread of `pid` is in the stopped state ("T" in
/// /proc/PID/task/TID/stat, after the command name's closing parenthesis).
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|t| {
        std::fs::read_to_string(t.path().join("stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, rest)| rest.trim_start().starts_with('T'))
            })
            .unwrap_or(true)
    })
}

fn b64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::new();
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            s.push(if i <= c.len() {
                T[(n >> (18 - 6 * i) & 63) as usize] as char
            } else {
                '='
            });
        }
    }
    s
}
