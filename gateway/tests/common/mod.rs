//! Shared by the in-process integration tests (TCP and RDMA exhaustion, RDMA fuzz): a
//! gateway with the `soft` provider (or TCP only), TCP RPC helpers on nfs-wire's
//! call encoder, and a small raw requester (fabric trait + header codec) cheap enough
//! to open 64 of at once. `rdma_soft.rs` keeps its own, larger one.
#![allow(dead_code)]

pub mod v4;
pub mod v42;

use engine::fabric::soft::SoftFabric;
use engine::fabric::{
    access, CmEvent, Completion, Fabric, Mr, Op, Qp, QpCaps, SendWr, Sge, WcOpcode, WcStatus,
};
use engine::rpc::{self, Cred};
use engine::rpcrdma::wire::{self, Chunks, Fixed, Header, Limits};
use engine::xdr::{XdrReader, XdrWriter};
use gateway::config::Config;
use gateway::server::Server;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use nfs_wire::mount3::MOUNTPROC3_MNT;
use nfs_wire::nfs3::NFSPROC3_NULL;
pub use nfs_wire::{MOUNT_PROGRAM as MOUNT, NFS_PROGRAM as NFS};

static PORT: AtomicU16 = AtomicU16::new(0);

/// Panics on any thread of this test process (the reactor's included), counted by a
/// hook installed with [`count_panics`].
pub static PANICS: AtomicUsize = AtomicUsize::new(0);

pub fn count_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            prev(info);
        }));
    });
}

/// Gateway settings the tests vary.
#[derive(Debug, Clone)]
pub struct GwOpts {
    pub credits: u32,
    pub inline: usize,
    pub small: usize,
    pub medium: usize,
    pub large: usize,
    pub max_connections: usize,
    pub tcp_max_connections: usize,
    /// More `[tcp]` lines (`key = value`, newline-separated).
    pub tcp_extra: String,
    /// More `[rdma]` lines (`key = value`, newline-separated).
    pub rdma_extra: String,
    /// Serve RPC-over-RDMA (`soft`); `false`: TCP only.
    pub rdma: bool,
    /// Reactors (`engine.cores = [0, 1, ..]`).
    pub cores: usize,
}

impl Default for GwOpts {
    fn default() -> Self {
        GwOpts {
            credits: 128,
            inline: 4096,
            small: 1024,
            medium: 64,
            large: 24,
            max_connections: 64,
            tcp_max_connections: 1024,
            tcp_extra: String::new(),
            rdma_extra: String::new(),
            rdma: true,
            cores: 1,
        }
    }
}

pub struct Gw {
    pub server: Option<Server>,
    pub rdma: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Gw {
    /// `o.cores` reactors (one by default), memory backend.
    pub fn start(o: &GwOpts) -> Gw {
        let dir = tempfile::tempdir().unwrap();
        // Unique per process and per gateway (the soft provider names its listener
        // after the address; tests run in parallel and must never share one).
        let pid = std::process::id();
        let port = 45000 + PORT.fetch_add(1, Ordering::Relaxed);
        let rdma = SocketAddr::from(([127, (pid >> 16) as u8, (pid >> 8) as u8, pid as u8], port));
        let provider = if o.rdma { "soft" } else { "off" };
        let text = format!(
            "[engine]\ncores = {:?}\nidle = \"adaptive\"\nhugepages = \"off\"\n\
             [pools]\nsmall = {}\nmedium = {}\nlarge = {}\n\
             [tcp]\nlisten = \"127.0.0.1:0\"\nmax_connections = {}\n{}\n\
             [rdma]\nprovider = \"{provider}\"\nlisten = \"{rdma}\"\ncredits = {}\ninline_size = {}\n\
             max_connections = {}\n{}\n\
             [backend]\nkind = \"memory\"\nworkers = 2\n\
             [state]\ndir = \"{}\"\n\
             [[exports]]\npath = \"/\"\nclients = [\"0.0.0.0/0\"]\nsquash = \"none\"\n",
            (0..o.cores.max(1)).collect::<Vec<_>>(),
            o.small,
            o.medium,
            o.large,
            o.tcp_max_connections,
            o.tcp_extra,
            o.credits,
            o.inline,
            o.max_connections,
            o.rdma_extra,
            dir.path().display()
        );
        let cfg = Config::parse(&text).unwrap();
        let server = Server::start(&cfg).unwrap();
        Gw {
            server: Some(server),
            rdma,
            _dir: dir,
        }
    }

    /// A gateway over TCP only from a whole configuration, which `text` writes
    /// given the gateway's own state directory.
    pub fn start_text(text: impl FnOnce(&std::path::Path) -> String) -> Gw {
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config::parse(&text(dir.path())).unwrap();
        Gw {
            server: Some(Server::start(&cfg).unwrap()),
            rdma: SocketAddr::from(([127, 0, 0, 1], 0)),
            _dir: dir,
        }
    }

    /// The value of one series of the gateway's metrics (0 when absent).
    pub fn metric(&self, series: &str) -> u64 {
        let src = self.server.as_ref().unwrap().stats_source();
        let mut out = String::new();
        gateway::stats::exposition::render(&src, &mut out);
        out.lines()
            .find(|l| l.starts_with(series) && l.as_bytes().get(series.len()) == Some(&b' '))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0)
    }

    pub fn tcp_addr(&self) -> SocketAddr {
        self.server.as_ref().unwrap().local_addr()
    }

    pub fn in_use(&self) -> usize {
        self.server.as_ref().unwrap().pool_buffers_in_use()
    }

    /// A TCP connection to the gateway (5 s read timeout, no delay).
    pub fn connect_tcp(&self) -> TcpStream {
        let s = TcpStream::connect(self.tcp_addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.set_nodelay(true).unwrap();
        s
    }

    /// Every pool buffer returns once connections are gone.
    pub fn assert_buffers_back(&self, wait: Duration) {
        let deadline = Instant::now() + wait;
        loop {
            let used = self.in_use();
            if used == 0 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{used} pool buffers never came back"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Gw {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            let _ = s.shutdown();
        }
    }
}

pub const RECV: usize = 8 * 1024;
pub const NRECV: usize = 16;
/// Scratch areas behind the Receives, each `SCRATCH` bytes.
pub const SCRATCH: usize = 64 * 1024;
pub const NSCRATCH: usize = 4;
const REGION: usize = NRECV * RECV + NSCRATCH * SCRATCH;

/// A raw requester: one connection, a registered region (Receives first, then scratch
/// areas for chunks), no private data (the gateway sends at most 1024 bytes).
pub struct Raw {
    f: SoftFabric,
    pub qp: Qp,
    mem: Vec<u8>,
    pub mr: Mr,
    pub disconnected: bool,
    inbox: std::collections::VecDeque<Vec<u8>>,
}

impl Raw {
    pub fn connect(addr: SocketAddr) -> Raw {
        Raw::try_connect(addr).unwrap_or_else(|e| panic!("connect: {e}"))
    }

    /// `Err` when the gateway rejects the request (or never answers in 5 s).
    pub fn try_connect(addr: SocketAddr) -> Result<Raw, String> {
        Raw::try_connect_with(addr, 0)
    }

    /// A requester whose region has `big` more bytes after the scratch areas
    /// ([`Raw::big`]): room for a 1 MiB write chunk.
    pub fn connect_big(addr: SocketAddr, big: usize) -> Raw {
        Raw::try_connect_with(addr, big).unwrap_or_else(|e| panic!("connect: {e}"))
    }

    fn try_connect_with(addr: SocketAddr, big: usize) -> Result<Raw, String> {
        let mut f = SoftFabric::new().map_err(|e| e.to_string())?;
        let len = REGION + big;
        let mut mem = vec![0u8; len];
        // SAFETY: `mem` lives in the returned Raw as long as the fabric (the Vec's
        // heap block does not move when the Vec does).
        let mr = unsafe {
            f.register(
                mem.as_mut_ptr(),
                len,
                access::LOCAL_WRITE | access::REMOTE_READ | access::REMOTE_WRITE,
            )
            .map_err(|e| e.to_string())?
        };
        let qp = f
            .connect(addr, &QpCaps::default(), &[])
            .map_err(|e| e.to_string())?;
        let mut raw = Raw {
            f,
            qp,
            mem,
            mr,
            disconnected: false,
            inbox: Default::default(),
        };
        for i in 0..NRECV {
            raw.post_recv(i);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match raw.f.poll_cm() {
                Some(CmEvent::Established { .. }) => return Ok(raw),
                Some(CmEvent::Rejected { .. }) => return Err("rejected".into()),
                Some(CmEvent::Disconnected { .. }) => return Err("disconnected".into()),
                Some(_) => {}
                None => {
                    if Instant::now() > deadline {
                        return Err("no Established in 5 s".into());
                    }
                    std::thread::yield_now();
                }
            }
        }
    }

    fn post_recv(&mut self, i: usize) {
        let addr = self.mem.as_ptr() as u64 + (i * RECV) as u64;
        let _ = self.f.post_recv(
            self.qp,
            i as u64,
            Sge {
                addr,
                len: RECV as u32,
                lkey: self.mr.lkey,
            },
        );
    }

    /// Scratch area `k`: its remote address and bytes.
    pub fn scratch(&mut self, k: usize) -> (u64, &mut [u8]) {
        let at = NRECV * RECV + k * SCRATCH;
        let addr = self.mem.as_ptr() as u64 + at as u64;
        (addr, &mut self.mem[at..at + SCRATCH])
    }

    /// The area after the scratch areas (empty unless made with [`Raw::connect_big`]):
    /// its remote address and bytes.
    pub fn big(&mut self) -> (u64, &mut [u8]) {
        let addr = self.mem.as_ptr() as u64 + REGION as u64;
        (addr, &mut self.mem[REGION..])
    }

    /// Posts one Send of `bytes` (staged in the last scratch area); `false` if the
    /// connection is gone.
    pub fn send(&mut self, bytes: &[u8]) -> bool {
        let n = bytes.len().min(SCRATCH);
        let (addr, s) = self.scratch(NSCRATCH - 1);
        s[..n].copy_from_slice(&bytes[..n]);
        let sge = Sge {
            addr,
            len: n as u32,
            lkey: self.mr.lkey,
        };
        let wr = SendWr {
            wr_id: 1000,
            op: Op::Send,
            sges: &[sge],
            signaled: false,
        };
        self.f.post_send(self.qp, &[wr]).is_ok()
    }

    /// The next received message, or `None` after `wait` (or on disconnect).
    pub fn recv(&mut self, wait: Duration) -> Option<Vec<u8>> {
        let deadline = Instant::now() + wait;
        let mut wc = [Completion {
            wr_id: 0,
            qp: self.qp,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: 0,
            invalidated: None,
            vendor_err: 0,
        }; 16];
        loop {
            if let Some(m) = self.inbox.pop_front() {
                return Some(m);
            }
            while let Some(ev) = self.f.poll_cm() {
                if let CmEvent::Disconnected { .. } = ev {
                    self.disconnected = true;
                }
            }
            let n = self.f.poll_cq(&mut wc);
            for c in &wc[..n] {
                if c.opcode != WcOpcode::Recv || c.status != WcStatus::Success {
                    continue;
                }
                let i = c.wr_id as usize;
                if i >= NRECV {
                    continue;
                }
                let at = i * RECV;
                let len = (c.byte_len as usize).min(RECV);
                self.inbox.push_back(self.mem[at..at + len].to_vec());
                self.post_recv(i);
            }
            if let Some(m) = self.inbox.pop_front() {
                return Some(m);
            }
            if self.disconnected || Instant::now() > deadline {
                return None;
            }
            std::thread::yield_now();
        }
    }
}

pub fn cred() -> Cred {
    nfs_wire::rpccall::sys(0)
}

/// An RPC call to version 3 of `prog` (NFS or MOUNT): header + args.
pub fn rpc_call(xid: u32, prog: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
    nfs_wire::v3more::call(xid, prog, proc_, &cred(), args)
}

pub fn header(xid: u32, proc_: u32, chunks: &Chunks) -> Vec<u8> {
    let mut b = vec![0u8; 2048];
    let fixed = Fixed {
        xid,
        vers: 1,
        credit: 32,
        proc_,
    };
    let n = wire::encode_msg(&mut XdrWriter::new(&mut b), fixed, chunks).unwrap();
    b.truncate(n);
    b
}

pub fn msg(xid: u32, chunks: &Chunks, payload: &[u8]) -> Vec<u8> {
    let mut m = header(xid, wire::RDMA_MSG, chunks);
    m.extend_from_slice(payload);
    m
}

pub fn xdr_opaque(v: &mut Vec<u8>, data: &[u8]) {
    v.extend((data.len() as u32).to_be_bytes());
    v.extend_from_slice(data);
    v.resize(v.len() + engine::xdr::pad_len(data.len()), 0);
}

/// A reply's header fields and inline payload; `None` if it does not decode as one.
pub fn parse(m: &[u8]) -> Option<(Fixed, Vec<u8>)> {
    let mut c = Chunks::with_limits(&Limits::default());
    match wire::decode(m, &Limits::default(), &mut c).ok()? {
        Header::Msg { fixed, payload_at } => Some((fixed, m[payload_at..].to_vec())),
        Header::Error { fixed, .. } => Some((fixed, Vec::new())),
    }
}

/// Calls inline over RDMA; returns the grant and the procedure results.
pub fn call_inline(raw: &mut Raw, xid: u32, prog: u32, proc_: u32, args: &[u8]) -> (u32, Vec<u8>) {
    assert!(raw.send(&msg(
        xid,
        &Chunks::default(),
        &rpc_call(xid, prog, proc_, args)
    )));
    let m = raw.recv(Duration::from_secs(10)).expect("a reply");
    let (fixed, payload) = parse(&m).expect("reply header decodes");
    assert_eq!(fixed.xid, xid);
    assert!(fixed.credit >= 1, "R8166-24: every reply grants a credit");
    let (rx, st, at) = rpc::decode_reply(&payload).unwrap();
    assert_eq!(rx, xid);
    assert_eq!(st, rpc::ReplyStatus::Accepted(rpc::Accept::Success));
    (fixed.credit, payload[at..].to_vec())
}

/// MNT "/" over RDMA → root handle.
pub fn mount(raw: &mut Raw) -> Vec<u8> {
    let args = nfs_wire::v3more::mnt_args(b"/");
    let (_, res) = call_inline(raw, 1, MOUNT, MOUNTPROC3_MNT, &args);
    nfs_wire::v3call::parse_mount(&res).expect("MNT ok")
}

/// A fresh RDMA connection gets a NULL answered.
pub fn null_ok(addr: SocketAddr) {
    let mut raw = Raw::connect(addr);
    call_inline(&mut raw, 77, NFS, NFSPROC3_NULL, &[]);
}

/// One record-marked RPC over TCP (RFC 5531 §11): the reply record.
pub fn tcp_call(s: &mut TcpStream, call: &[u8]) -> std::io::Result<Vec<u8>> {
    let rec = nfs_wire::rpccall::record(call).map_err(std::io::Error::other)?;
    s.write_all(&rec)?;
    let mut out = Vec::new();
    loop {
        let mut mark = [0u8; 4];
        s.read_exact(&mut mark)?;
        let m = u32::from_be_bytes(mark);
        let at = out.len();
        out.resize(at + (m & 0x7fff_ffff) as usize, 0);
        s.read_exact(&mut out[at..])?;
        if m & 0x8000_0000 != 0 {
            return Ok(out);
        }
    }
}

/// A TCP NULL call answered with success within 10 s.
pub fn tcp_null_ok(addr: SocketAddr, xid: u32) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let null = rpc_call(xid, NFS, NFSPROC3_NULL, &[]);
    let reply = tcp_call(&mut s, &null).expect("TCP NULL answered");
    let (rx, st, _) = rpc::decode_reply(&reply).unwrap();
    assert_eq!(
        (rx, st),
        (xid, rpc::ReplyStatus::Accepted(rpc::Accept::Success))
    );
}

/// Raises this process's open-file soft limit to at least `want` (bounded by the hard
/// limit): 1,000 client sockets plus the gateway's own need more than 1024.
pub fn raise_nofile(want: u64) {
    // SAFETY: getrlimit/setrlimit read and write one initialised rlimit we own.
    unsafe {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < want {
            r.rlim_cur = want.min(r.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// A small xorshift64 PRNG: deterministic campaigns without another crate.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Waits up to `secs` for `done`, polling every 50 ms; panics naming `what`.
pub fn wait_for(what: &str, secs: u64, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {secs} s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A loopback address nothing listens on now (a gateway binds it next).
pub fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}
