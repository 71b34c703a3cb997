//! How `bench` reaches the server: record-marked RPC over TCP or RPC-over-RDMA v1.
//!
//! [`Transport`] is the blocking, pipelined interface the load generator drives: `send`
//! hands over one encoded call, `recv` returns the next reply in arrival order.
//! `tcp://HOST:PORT` is [`TcpTransport`]; `rdma://HOST:PORT` is a [`PipeTransport`]
//! over [`crate::rdma::RdmaPipe`] on the chosen fabric provider.

use crate::pipe::{Pipe, SubmitFail};
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// The reply to one call: the whole RPC reply record (starting at the XID), or why the
/// transport could not deliver it (an RPC-over-RDMA error for that call).
pub type Reply = Result<Vec<u8>, String>;

/// A pipelined RPC connection.
pub trait Transport: Send {
    /// Sends one call. `buf[..4]` is scratch (room for a record mark); the encoded call
    /// (starting at its XID) is `buf[4..]`. May block until the call can go out.
    fn send(&mut self, buf: &mut [u8]) -> anyhow::Result<()>;

    /// Blocks for the next reply; returns its XID and the reply.
    fn recv(&mut self) -> anyhow::Result<(u32, Reply)>;
}

/// RDMA fabric providers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Provider {
    /// The pure-Rust software provider (host-local, between processes).
    Soft,
    /// libibverbs / librdmacm (needs a build with `--features rdma`).
    Verbs,
}

/// Where to connect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Tcp(String),
    Rdma {
        addr: SocketAddr,
        provider: Provider,
    },
}

impl Target {
    /// Parses `tcp://HOST:PORT` or `rdma://HOST:PORT`.
    pub fn parse(s: &str, provider: Provider) -> anyhow::Result<Target> {
        if let Some(a) = s.strip_prefix("tcp://") {
            return Ok(Target::Tcp(a.to_string()));
        }
        if let Some(a) = s.strip_prefix("rdma://") {
            #[cfg(not(feature = "rdma"))]
            if provider == Provider::Verbs {
                anyhow::bail!(
                    "--provider verbs is not available in this build (only soft); \
                     rebuild bench with `--features rdma` (needs libibverbs-dev, \
                     librdmacm-dev, libclang-dev)"
                );
            }
            let addr = a
                .to_socket_addrs()
                .map_err(|e| anyhow::anyhow!("bad RDMA address {a}: {e}"))?
                .next()
                .ok_or_else(|| anyhow::anyhow!("RDMA address {a} resolves to nothing"))?;
            return Ok(Target::Rdma { addr, provider });
        }
        anyhow::bail!("--target must be tcp://HOST:PORT or rdma://HOST:PORT, not {s}")
    }

    /// Opens one non-blocking connection for up to `depth` calls in flight.
    pub fn connect_pipe(&self, depth: usize) -> anyhow::Result<Box<dyn Pipe>> {
        Ok(match self {
            Target::Tcp(a) => Box::new(
                crate::pipe::TcpPipe::connect(a, depth)
                    .map_err(|e| anyhow::anyhow!("connecting to {a}: {e}"))?,
            ),
            Target::Rdma { addr, provider } => Box::new(crate::rdma::RdmaPipe::connect(
                *addr,
                *provider,
                crate::rdma::DEFAULT_CREDITS.max(depth as u32),
            )?),
        })
    }

    /// Opens one connection.
    pub fn connect(&self) -> anyhow::Result<Box<dyn Transport>> {
        Ok(match self {
            Target::Tcp(a) => Box::new(TcpTransport::connect(a)?),
            Target::Rdma { addr, provider } => Box::new(PipeTransport::new(
                crate::rdma::RdmaPipe::connect(*addr, *provider, crate::rdma::DEFAULT_CREDITS)?,
            )),
        })
    }
}

/// `--source`: the address every TCP connection binds before connecting (set once at
/// start, before any connection).
static SOURCE: std::sync::OnceLock<std::net::IpAddr> = std::sync::OnceLock::new();

pub fn set_source(src: Option<std::net::IpAddr>) {
    if let Some(a) = src {
        let _ = SOURCE.set(a);
    }
}

/// Connects to `addr` from `--source` when one is given.
pub fn tcp_connect(addr: &str) -> std::io::Result<TcpStream> {
    let Some(src) = SOURCE.get() else {
        return TcpStream::connect(addr);
    };
    let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no address");
    for a in addr.to_socket_addrs()? {
        let s = socket2::Socket::new(
            socket2::Domain::for_address(a),
            socket2::Type::STREAM,
            Some(socket2::Protocol::TCP),
        )?;
        s.bind(&std::net::SocketAddr::new(*src, 0).into())?;
        match s.connect(&a.into()) {
            Ok(()) => return Ok(s.into()),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Record-marked RPC over TCP (RFC 5531 §11).
pub struct TcpTransport {
    s: TcpStream,
}

impl TcpTransport {
    pub fn connect(addr: &str) -> anyhow::Result<TcpTransport> {
        let s = tcp_connect(addr)?;
        s.set_nodelay(true)?;
        Ok(TcpTransport { s })
    }
}

impl Transport for TcpTransport {
    fn send(&mut self, buf: &mut [u8]) -> anyhow::Result<()> {
        anyhow::ensure!(buf.len() >= 4, "call buffer without room for a record mark");
        let mark = 0x8000_0000u32 | (buf.len() as u32 - 4);
        buf[..4].copy_from_slice(&mark.to_be_bytes());
        self.s.write_all(buf)?;
        Ok(())
    }

    fn recv(&mut self) -> anyhow::Result<(u32, Reply)> {
        let mut rec = Vec::new();
        loop {
            let mut m = [0u8; 4];
            self.s.read_exact(&mut m)?;
            let mark = u32::from_be_bytes(m);
            let len = (mark & 0x7fff_ffff) as usize;
            anyhow::ensure!(rec.len() + len <= 64 << 20, "reply record too large");
            let at = rec.len();
            rec.resize(at + len, 0);
            self.s.read_exact(&mut rec[at..])?;
            if mark & 0x8000_0000 != 0 {
                break;
            }
        }
        anyhow::ensure!(rec.len() >= 4, "reply record shorter than an XID");
        let xid = u32::from_be_bytes([rec[0], rec[1], rec[2], rec[3]]);
        Ok((xid, Ok(rec)))
    }
}

/// How long a blocking `recv` waits for a reply before giving up on the connection.
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// The blocking [`Transport`] over a non-blocking [`Pipe`]: `send` polls (keeping the
/// replies) while the pipe is out of credits; `recv` busy-polls.
pub struct PipeTransport<P: Pipe> {
    p: P,
    ready: VecDeque<(u32, Reply)>,
}

impl<P: Pipe> PipeTransport<P> {
    pub fn new(p: P) -> PipeTransport<P> {
        PipeTransport {
            p,
            ready: VecDeque::new(),
        }
    }

    fn poll(&mut self) -> anyhow::Result<usize> {
        let ready = &mut self.ready;
        Ok(self.p.poll(&mut |xid, r| {
            ready.push_back((
                xid,
                r.map(|b| {
                    let mut v = b.to_vec();
                    if v.len() >= 4 {
                        v[..4].copy_from_slice(&xid.to_be_bytes());
                    }
                    v
                }),
            ));
        })?)
    }
}

impl<P: Pipe> Transport for PipeTransport<P> {
    fn send(&mut self, buf: &mut [u8]) -> anyhow::Result<()> {
        let call = &buf[4..];
        let t0 = Instant::now();
        loop {
            match self.p.try_submit(call) {
                Ok(true) => return Ok(()),
                Ok(false) => {
                    if self.poll()? == 0 {
                        anyhow::ensure!(
                            t0.elapsed() < REPLY_TIMEOUT,
                            "no credit for {REPLY_TIMEOUT:?}"
                        );
                        std::hint::spin_loop();
                    }
                }
                Err(SubmitFail::Call(why)) => {
                    // Answer the call locally so the caller's bookkeeping stays whole.
                    let xid = crate::pipe::xid_of(call).unwrap_or(0);
                    self.ready.push_back((xid, Err(why)));
                    return Ok(());
                }
                Err(SubmitFail::Conn(e)) => return Err(e.into()),
            }
        }
    }

    fn recv(&mut self) -> anyhow::Result<(u32, Reply)> {
        let t0 = Instant::now();
        let mut spins = 0u32;
        loop {
            if let Some(r) = self.ready.pop_front() {
                return Ok(r);
            }
            anyhow::ensure!(
                self.p.in_flight() > 0,
                "waiting for a reply with no call in flight"
            );
            if self.poll()? == 0 {
                spins += 1;
                if spins.is_multiple_of(1024) {
                    anyhow::ensure!(
                        t0.elapsed() < REPLY_TIMEOUT,
                        "no reply for {REPLY_TIMEOUT:?}"
                    );
                    std::thread::yield_now();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse() {
        assert_eq!(
            Target::parse("tcp://127.0.0.1:2049", Provider::Soft).unwrap(),
            Target::Tcp("127.0.0.1:2049".into())
        );
        assert_eq!(
            Target::parse("rdma://127.0.0.1:20049", Provider::Soft).unwrap(),
            Target::Rdma {
                addr: "127.0.0.1:20049".parse().unwrap(),
                provider: Provider::Soft
            }
        );
        #[cfg(not(feature = "rdma"))]
        {
            let e = Target::parse("rdma://127.0.0.1:20049", Provider::Verbs).unwrap_err();
            assert!(e.to_string().contains("not available"), "{e}");
        }
        assert!(Target::parse("udp://1.2.3.4:5", Provider::Soft).is_err());
        assert!(Target::parse("rdma://nohost", Provider::Soft).is_err());
    }

    #[test]
    fn pipe_transport_round_trips_over_tcp() {
        // A tiny record-marked echo server: every record comes back unchanged.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let h = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut r = crate::pipe::RecordReader::new();
            let mut buf = [0u8; 4096];
            loop {
                let n = s.read(&mut buf).unwrap();
                if n == 0 {
                    return;
                }
                let mut out = Vec::new();
                r.feed(&buf[..n], &mut |rec| {
                    crate::pipe::push_record(&mut out, &rec)
                })
                .unwrap();
                s.write_all(&out).unwrap();
            }
        });
        let mut t = PipeTransport::new(crate::pipe::TcpPipe::connect(&addr, 2).unwrap());
        for xid in 0..8u32 {
            let mut buf = vec![0u8; 12];
            buf[4..8].copy_from_slice(&xid.to_be_bytes());
            t.send(&mut buf).unwrap();
        }
        let mut got: Vec<u32> = (0..8).map(|_| t.recv().unwrap().0).collect();
        got.sort();
        assert_eq!(got, (0..8).collect::<Vec<_>>());
        drop(t);
        h.join().unwrap();
    }
}
