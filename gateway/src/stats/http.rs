//! The stats endpoint: a minimal HTTP/1.1 server on its own thread (std::net only).
//!
//! It serves `GET /metrics` (Prometheus text) and `GET /` (a hint), one connection at
//! a time, `Connection: close`. Hostile clients are bounded: a request head larger
//! than `MAX_HEAD` gets 431, a client that has not sent its head within `DEADLINE`
//! is dropped, and writes time out too. It never touches a reactor: it only reads the
//! reactors' atomics and pool free-list lengths.

use super::exposition::{render, Source, CONTENT_TYPE};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Largest request head read (request line + headers); bodies are never read.
const MAX_HEAD: usize = 8192;
/// Time a client has to send its request head, in total.
const DEADLINE: Duration = Duration::from_secs(2);
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// A running endpoint; stops (and joins its thread) when dropped.
pub struct Endpoint {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// A bound, not yet serving, endpoint: bind before the reactors start so a taken
/// port fails start-up early and the endpoint answers as soon as NFS does.
pub struct Bound(TcpListener);

impl Bound {
    pub fn bind(addr: SocketAddr) -> std::io::Result<Bound> {
        TcpListener::bind(addr).map(Bound)
    }

    /// Serves `src` on a new thread.
    pub fn serve(self, src: Source) -> std::io::Result<Endpoint> {
        let listener = self.0;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("stats-http".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if flag.load(Ordering::Relaxed) {
                        return;
                    }
                    if let Ok(s) = conn {
                        // Errors only concern this client (timeouts, resets); so does a
                        // panic (supervision policy: it costs that scrape).
                        let _ = crate::supervise::request("stats: serving a scrape", || {
                            serve_one(s, &src)
                        });
                    }
                }
            })?;
        Ok(Endpoint {
            addr,
            stop,
            thread: Some(thread),
        })
    }
}

impl Endpoint {
    /// Binds `addr` and serves `src` on a new thread.
    pub fn start(addr: SocketAddr, src: Source) -> std::io::Result<Endpoint> {
        Bound::bind(addr)?.serve(src)
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the blocking accept; it sees the flag and returns.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reads until the end of the request head, within `MAX_HEAD` bytes and `DEADLINE`.
/// `Ok(None)`: the head did not fit.
fn read_head(s: &mut TcpStream, buf: &mut [u8; MAX_HEAD]) -> std::io::Result<Option<usize>> {
    let start = Instant::now();
    let mut n = 0;
    loop {
        let left = DEADLINE.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        s.set_read_timeout(Some(left))?;
        if n == buf.len() {
            return Ok(None);
        }
        let got = s.read(&mut buf[n..])?;
        if got == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        // The terminator may straddle two reads: look back 3 bytes.
        let from = n.saturating_sub(3);
        n += got;
        if buf[from..n].windows(4).any(|w| w == b"\r\n\r\n") {
            return Ok(Some(n));
        }
    }
}

/// What to answer: status line, content type, body.
fn respond(head: &[u8], src: &Source) -> (&'static str, &'static str, String, bool) {
    let text = "text/plain; charset=utf-8";
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let Ok(line) = std::str::from_utf8(line) else {
        return ("400 Bad Request", text, "bad request\n".into(), false);
    };
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return ("400 Bad Request", text, "bad request\n".into(), false);
    };
    if !version.starts_with("HTTP/1.") {
        return ("400 Bad Request", text, "HTTP/1.x only\n".into(), false);
    }
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        return (
            "405 Method Not Allowed",
            text,
            "GET /metrics\n".into(),
            false,
        );
    }
    let path = target.split('?').next().unwrap_or_default();
    match path {
        "/metrics" => {
            let mut body = String::with_capacity(64 * 1024);
            render(src, &mut body);
            ("200 OK", CONTENT_TYPE, body, head_only)
        }
        "/" => (
            "200 OK",
            text,
            "nfsgw stats: Prometheus metrics at /metrics (see docs/stats.md); \
             live view: nfsgw-tools top --url http://<this address>/metrics\n"
                .into(),
            head_only,
        ),
        _ => ("404 Not Found", text, "try /metrics\n".into(), head_only),
    }
}

fn serve_one(mut s: TcpStream, src: &Source) -> std::io::Result<()> {
    s.set_write_timeout(Some(WRITE_TIMEOUT))?;
    let mut buf = [0u8; MAX_HEAD];
    let (status, ctype, body, head_only) = match read_head(&mut s, &mut buf)? {
        Some(n) => respond(&buf[..n], src),
        None => (
            "431 Request Header Fields Too Large",
            "text/plain; charset=utf-8",
            "request head too large\n".to_string(),
            false,
        ),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    if !head_only {
        s.write_all(body.as_bytes())?;
    }
    s.flush()?;
    // Let the client read everything before the close (no RST over unread input).
    let _ = s.shutdown(std::net::Shutdown::Write);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::exposition::ReactorSource;
    use super::*;
    use engine::mem::{ClassSpec, HugePolicy, Pools};

    fn endpoint() -> Endpoint {
        let pools = Pools::new(
            &[ClassSpec {
                size: 8192,
                count: 2,
            }],
            HugePolicy::Off,
        )
        .unwrap();
        let src = Source {
            reactors: vec![ReactorSource {
                counters: Default::default(),
                stats: Default::default(),
                pools,
                tenants: std::sync::Arc::new(crate::stats::TenantTable::new(16)),
            }],
            rdma_credits: 8,
            callbacks: Default::default(),
            nfs4: None,
            qos: None,
            exports: None,
        };
        Endpoint::start("127.0.0.1:0".parse().unwrap(), src).unwrap()
    }

    fn exchange(addr: SocketAddr, req: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s.write_all(req);
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn serves_metrics_and_hint() {
        let e = endpoint();
        let r = exchange(e.local_addr(), b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(r.contains("Content-Type: text/plain; version=0.0.4"));
        assert!(r.contains("\r\n\r\n# HELP nfsgw_reactors"));
        let len: usize = r
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(r.split_once("\r\n\r\n").unwrap().1.len(), len);
        let r = exchange(e.local_addr(), b"GET / HTTP/1.0\r\n\r\n");
        assert!(
            r.starts_with("HTTP/1.1 200 OK") && r.contains("/metrics"),
            "{r}"
        );
        let r = exchange(e.local_addr(), b"HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(
            r.starts_with("HTTP/1.1 200 OK") && r.ends_with("\r\n\r\n"),
            "{r}"
        );
    }

    #[test]
    fn hostile_requests_get_errors_not_panics() {
        let e = endpoint();
        let a = e.local_addr();
        assert!(exchange(a, b"POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
        assert!(exchange(a, b"GET /nope HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(exchange(a, b"garbage\r\n\r\n").starts_with("HTTP/1.1 400"));
        assert!(exchange(a, b"GET /metrics SMTP\r\n\r\n").starts_with("HTTP/1.1 400"));
        assert!(exchange(a, b"\xff\xfe \xff HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 400"));
        let big = vec![b'A'; MAX_HEAD + 100];
        assert!(exchange(a, &big).starts_with("HTTP/1.1 431"));
        // A client that sends half a head and goes quiet is dropped after DEADLINE,
        // and the endpoint keeps serving.
        let mut slow = TcpStream::connect(a).unwrap();
        slow.write_all(b"GET /metr").unwrap();
        let t = Instant::now();
        let mut sink = Vec::new();
        let _ = slow.read_to_end(&mut sink);
        assert!(t.elapsed() < DEADLINE + Duration::from_secs(3));
        assert!(exchange(a, b"GET /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200"));
        // Connect and close without a byte.
        drop(TcpStream::connect(a).unwrap());
        assert!(exchange(a, b"GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200"));
    }
}
