//! `bench bridge`: lets ordinary NFS clients (libnfs utilities, the Python test client)
//! reach the gateway over RPC-over-RDMA.
//!
//! The bridge accepts TCP connections on `--listen`; for each one it opens one
//! connection to `--target` (normally `rdma://HOST:PORT`) and runs one thread that
//! moves calls one way and replies the other:
//! - record-marked calls (any number of fragments) are reassembled from the
//!   non-blocking socket and queued;
//! - queued calls are submitted as long as the RDMA connection has credits, each with
//!   the NFS upper-layer binding's shape (`crate::ulb`: WRITE data in a read chunk,
//!   READ data into a write chunk, Reply chunks for large directory replies); the rest
//!   waits in the queue (a retransmission of a call still in flight is dropped);
//! - replies are written back record-marked, in completion order;
//! - a call the RDMA side fails (RDMA_ERROR, a bad reply) is answered with an RPC
//!   SYSTEM_ERR so the client does not wait forever; a broken RDMA connection closes
//!   the TCP connection, and a closed TCP connection closes the RDMA connection (calls
//!   still in flight are drained first when the client only half-closed).
//! - NFSv4.1 callbacks the server sends on the RDMA connection (RFC 8167, after the
//!   client's CREATE_SESSION bound it as back channel) are written to the client as
//!   calls; the client's REPLY records coming back are sent as reverse replies, never
//!   as calls. The bridge answers no callback itself.
//!
//! The loop busy-polls briefly after activity, then sleeps ~20 µs while calls are in
//! flight, and blocks on the socket (a few ms at a time) when nothing is outstanding.

use crate::pipe::{self, Pipe, RecordReader, SubmitFail};
use crate::transport::{Provider, Target};
use std::collections::{HashSet, VecDeque};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug, Clone)]
pub struct BridgeArgs {
    /// TCP address to accept NFS clients on (HOST:PORT; port 0 picks a free port).
    #[arg(long)]
    pub listen: String,
    /// Server to forward to: rdma://HOST:PORT (tcp://HOST:PORT also works, for
    /// comparisons).
    #[arg(long)]
    pub target: String,
    /// RDMA provider for rdma:// targets.
    #[arg(long, value_enum, default_value = "soft")]
    pub provider: Provider,
    /// Calls read from a client and not yet sent to the server, per connection, before
    /// the bridge stops reading from that client.
    #[arg(long, default_value_t = DEFAULT_MAX_QUEUE)]
    pub max_queue: usize,
    /// Log every connection and failed call to stderr.
    #[arg(long)]
    pub verbose: bool,
}

/// Default for `--max-queue`.
pub const DEFAULT_MAX_QUEUE: usize = 1024;
/// Bytes of queued calls (or unsent replies) above which the bridge stops reading
/// from the client.
const MAX_BUFFERED: usize = 64 << 20;
/// How long busy-polling continues after the last activity before sleeping.
const SPIN: Duration = Duration::from_micros(200);
/// Sleep between polls while calls are in flight.
const NAP: Duration = Duration::from_micros(20);
/// Blocking wait on the socket when nothing is outstanding.
const IDLE_WAIT: Duration = Duration::from_millis(5);
/// How long calls still in flight are awaited after the client half-closed.
const DRAIN: Duration = Duration::from_secs(30);

pub fn main(args: BridgeArgs) -> anyhow::Result<()> {
    let target = Target::parse(&args.target, args.provider)?;
    let listener = TcpListener::bind(&args.listen)
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", args.listen))?;
    println!("bridge listening on {}", listener.local_addr()?);
    io::stdout().flush()?;
    for s in listener.incoming() {
        let s = match s {
            Ok(s) => s,
            Err(e) => {
                eprintln!("bridge: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let peer = s.peer_addr().ok();
        let (target, opts) = (target.clone(), Opts::from(&args));
        let spawned = std::thread::Builder::new()
            .name("bridge-conn".into())
            .spawn(move || connection(s, peer, &target, &opts));
        if let Err(e) = spawned {
            eprintln!("bridge: cannot start a connection thread: {e}");
        }
    }
    Ok(())
}

/// Per-connection settings.
#[derive(Debug, Clone, Copy)]
pub struct Opts {
    pub max_queue: usize,
    pub verbose: bool,
}

impl From<&BridgeArgs> for Opts {
    fn from(a: &BridgeArgs) -> Opts {
        Opts {
            max_queue: a.max_queue.max(1),
            verbose: a.verbose,
        }
    }
}

/// Opens the server side for one client connection.
pub fn open_pipe(target: &Target) -> anyhow::Result<Box<dyn Pipe>> {
    Ok(match target {
        Target::Tcp(a) => Box::new(pipe::TcpPipe::connect(a, 256)?),
        // Callbacks go to the client, whose callback service answers them (RFC 8167:
        // the server's calls on this connection; their replies come back on the TCP
        // connection and are sent as reverse replies).
        Target::Rdma { addr, provider } => Box::new(crate::rdma::RdmaPipe::connect_with(
            *addr,
            *provider,
            crate::rdma::DEFAULT_CREDITS,
            false,
        )?),
    })
}

fn connection(s: TcpStream, peer: Option<SocketAddr>, target: &Target, opts: &Opts) {
    let peer = peer.map_or_else(|| "?".to_string(), |p| p.to_string());
    let mut p = match open_pipe(target) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("bridge: {peer}: cannot connect to the server: {e:#}");
            return;
        }
    };
    if opts.verbose {
        eprintln!("bridge: {peer}: connected");
    }
    match serve(s, p.as_mut(), opts) {
        Ok(()) => {
            if opts.verbose {
                eprintln!("bridge: {peer}: client closed");
            }
        }
        Err(End::Client(e)) => {
            if opts.verbose || e.kind() != io::ErrorKind::ConnectionReset {
                eprintln!("bridge: {peer}: client connection: {e}");
            }
        }
        Err(End::Server(e)) => {
            eprintln!("bridge: {peer}: server connection failed, closing the client: {e}")
        }
    }
    // Dropping the pipe closes the server connection; dropping the socket the client's.
}

/// Why a bridged connection ended abnormally.
#[derive(Debug)]
pub enum End {
    /// The TCP client side failed (reset, protocol error).
    Client(io::Error),
    /// The server side failed.
    Server(io::Error),
}

/// Runs one bridged connection until the client closes (`Ok`) or either side fails.
pub fn serve(mut sock: TcpStream, p: &mut dyn Pipe, opts: &Opts) -> Result<(), End> {
    sock.set_nonblocking(true).map_err(End::Client)?;
    let _ = sock.set_nodelay(true);
    sock.set_read_timeout(Some(IDLE_WAIT))
        .map_err(End::Client)?;
    let mut rbuf = vec![0u8; 256 << 10];
    let mut reader = RecordReader::new();
    let mut queue: VecDeque<Vec<u8>> = VecDeque::new();
    let mut queued_bytes = 0usize;
    let mut out: Vec<u8> = Vec::new();
    let mut out_at = 0usize;
    let mut in_flight: HashSet<u32> = HashSet::new();
    let mut eof_at: Option<Instant> = None;
    let mut last_progress = Instant::now();
    loop {
        let mut progress = false;

        // 1. Calls from the client.
        let room = queue.len() < opts.max_queue
            && queued_bytes < MAX_BUFFERED
            && out.len() - out_at < MAX_BUFFERED;
        if eof_at.is_none() && room {
            match sock.read(&mut rbuf) {
                Ok(0) => {
                    if reader.partial() && opts.verbose {
                        eprintln!("bridge: client closed in the middle of a record");
                    }
                    eof_at = Some(Instant::now());
                    progress = true;
                }
                Ok(n) => {
                    reader
                        .feed(&rbuf[..n], &mut |rec| {
                            queued_bytes += rec.len();
                            queue.push_back(rec);
                        })
                        .map_err(End::Client)?;
                    progress = true;
                }
                Err(e) if would_block(&e) => {}
                Err(e) => return Err(End::Client(e)),
            }
        }

        // 2. Calls to the server, as credits allow.
        while let Some(call) = queue.front() {
            let Some(xid) = pipe::xid_of(call) else {
                // Not even an XID: nothing can be answered.
                queued_bytes -= call.len();
                queue.pop_front();
                continue;
            };
            if call.get(4..8) == Some(&engine::rpc::MSG_REPLY.to_be_bytes()[..]) {
                // The client's answer to a callback we forwarded.
                if let Err(e) = p.reply_callback(xid, call) {
                    if opts.verbose {
                        eprintln!("bridge: callback reply {xid:#x} not forwarded: {e}");
                    }
                }
                queued_bytes -= call.len();
                queue.pop_front();
                progress = true;
                continue;
            }
            if in_flight.contains(&xid) {
                // A retransmission of a call still in flight: its reply will come.
                queued_bytes -= call.len();
                queue.pop_front();
                continue;
            }
            match p.try_submit(call) {
                Ok(true) => in_flight.insert(xid),
                Ok(false) => break,
                Err(SubmitFail::Call(why)) => {
                    eprintln!("bridge: call {xid:#x} not forwarded: {why}");
                    pipe::push_record(&mut out, &pipe::system_err_reply(xid));
                    false
                }
                Err(SubmitFail::Conn(e)) => return Err(End::Server(e)),
            };
            queued_bytes -= call.len();
            queue.pop_front();
            progress = true;
        }

        // 3. Replies from the server.
        let verbose = opts.verbose;
        let n = p
            .poll(&mut |xid, r| {
                in_flight.remove(&xid);
                match r {
                    Ok(rep) => pipe::push_record_as(&mut out, xid, rep),
                    Err(why) => {
                        if verbose {
                            eprintln!("bridge: call {xid:#x} failed: {why}");
                        }
                        pipe::push_record(&mut out, &pipe::system_err_reply(xid));
                    }
                }
            })
            .map_err(End::Server)?;
        progress |= n > 0;
        // Callbacks from the server, to the client's callback service.
        p.take_callbacks(&mut |_, call| {
            pipe::push_record(&mut out, call);
            progress = true;
        });

        // 4. Replies to the client.
        while out_at < out.len() {
            match sock.write(&out[out_at..]) {
                Ok(0) => return Err(End::Client(io::ErrorKind::WriteZero.into())),
                Ok(n) => {
                    out_at += n;
                    progress = true;
                }
                Err(e) if would_block(&e) => break,
                Err(e) => return Err(End::Client(e)),
            }
        }
        if out_at == out.len() {
            out.clear();
            out_at = 0;
        } else if out_at >= 4 << 20 {
            out.drain(..out_at);
            out_at = 0;
        }

        // 5. Done, or idle.
        let nothing_pending = queue.is_empty() && in_flight.is_empty() && out.is_empty();
        if let Some(t) = eof_at {
            if nothing_pending {
                return Ok(());
            }
            if t.elapsed() > DRAIN {
                return Err(End::Client(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("client closed; {} calls unanswered", in_flight.len()),
                )));
            }
        }
        if progress {
            last_progress = Instant::now();
        } else if nothing_pending && eof_at.is_none() {
            wait_readable(&sock).map_err(End::Client)?;
        } else if last_progress.elapsed() > SPIN {
            std::thread::sleep(NAP);
        } else {
            std::hint::spin_loop();
        }
    }
}

fn would_block(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted | io::ErrorKind::TimedOut
    )
}

/// Blocks up to [`IDLE_WAIT`] (the socket's read timeout) until the client sends
/// something or closes.
fn wait_readable(sock: &TcpStream) -> io::Result<()> {
    sock.set_nonblocking(false)?;
    let r = sock.peek(&mut [0u8; 1]);
    sock.set_nonblocking(true)?;
    match r {
        Ok(_) => Ok(()),
        Err(e) if would_block(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipe::{push_record, OnReply};
    use engine::rpc::{self, Accept, Cred};
    use engine::xdr::XdrWriter;
    use nfs_wire::nfs4::NFS4_CALLBACK;
    use nfs_wire::{rpccall, NFS_PROGRAM, NFS_V3};
    use std::net::Shutdown;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Callback replies a test server received: (xid, record).
    type CbReplies = Arc<std::sync::Mutex<Vec<(u32, Vec<u8>)>>>;

    /// A server that answers every call with SUCCESS and the call's args echoed,
    /// `credits` at a time, one poll later.
    struct Echo {
        credits: usize,
        pending: VecDeque<Vec<u8>>,
        max_seen: Arc<AtomicUsize>,
        fail_after: Option<usize>,
        answered: usize,
        /// Callbacks to hand over (a call with proc 77 makes one).
        callbacks: VecDeque<Vec<u8>>,
        /// Callback replies received.
        cb_replies: CbReplies,
    }

    impl Pipe for Echo {
        fn try_submit(&mut self, call: &[u8]) -> Result<bool, SubmitFail> {
            if self.pending.len() >= self.credits {
                return Ok(false);
            }
            self.pending.push_back(call.to_vec());
            self.max_seen
                .fetch_max(self.pending.len(), Ordering::Relaxed);
            Ok(true)
        }

        fn poll(&mut self, on_reply: &mut OnReply) -> io::Result<usize> {
            let mut n = 0;
            // Answer in reverse order to show replies need not be in call order.
            while let Some(call) = self.pending.pop_back() {
                if self.fail_after.is_some_and(|f| self.answered >= f) {
                    return Err(io::Error::new(io::ErrorKind::BrokenPipe, "fabric down"));
                }
                let (h, args_at) = rpc::decode_call(&call).unwrap();
                if h.proc_ == 77 {
                    let mut cb = vec![0u8; 64];
                    let mut w = XdrWriter::new(&mut cb);
                    rpccall::header(&mut w, 0xcb01, NFS4_CALLBACK, 1, 0, &Cred::None).unwrap();
                    let n = w.position();
                    cb.truncate(n);
                    self.callbacks.push_back(cb);
                }
                let mut buf = vec![0u8; call.len() + 64];
                let mut w = XdrWriter::new(&mut buf);
                rpc::write_accepted(&mut w, h.xid, Accept::Success).unwrap();
                w.opaque_fixed(&call[args_at..]).unwrap();
                let len = w.position();
                if h.proc_ == 99 {
                    on_reply(h.xid, Err("RDMA_ERROR".into()));
                } else {
                    on_reply(h.xid, Ok(&buf[..len]));
                }
                n += 1;
                self.answered += 1;
            }
            Ok(n)
        }

        fn in_flight(&self) -> usize {
            self.pending.len()
        }

        fn take_callbacks(&mut self, f: &mut dyn FnMut(u32, &[u8])) {
            while let Some(cb) = self.callbacks.pop_front() {
                f(crate::pipe::xid_of(&cb).unwrap(), &cb);
            }
        }

        fn reply_callback(&mut self, xid: u32, reply: &[u8]) -> io::Result<()> {
            self.cb_replies.lock().unwrap().push((xid, reply.to_vec()));
            Ok(())
        }
    }

    fn call(xid: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
        rpccall::call(xid, NFS_PROGRAM, NFS_V3, proc_, &rpccall::sys(0), args)
    }

    fn read_record(s: &mut TcpStream) -> io::Result<Vec<u8>> {
        let mut rec = Vec::new();
        loop {
            let mut m = [0u8; 4];
            s.read_exact(&mut m)?;
            let m = u32::from_be_bytes(m);
            let at = rec.len();
            rec.resize(at + (m & 0x7fff_ffff) as usize, 0);
            s.read_exact(&mut rec[at..])?;
            if m & 0x8000_0000 != 0 {
                return Ok(rec);
            }
        }
    }

    fn start(
        credits: usize,
        fail_after: Option<usize>,
    ) -> (
        TcpStream,
        std::thread::JoinHandle<Result<(), End>>,
        Arc<AtomicUsize>,
    ) {
        let (c, h, m, _) = start_cb(credits, fail_after);
        (c, h, m)
    }

    fn start_cb(
        credits: usize,
        fail_after: Option<usize>,
    ) -> (
        TcpStream,
        std::thread::JoinHandle<Result<(), End>>,
        Arc<AtomicUsize>,
        CbReplies,
    ) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let max_seen = Arc::new(AtomicUsize::new(0));
        let m = max_seen.clone();
        let cb_replies = CbReplies::default();
        let cbr = cb_replies.clone();
        let h = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let mut echo = Echo {
                credits,
                pending: VecDeque::new(),
                max_seen: m,
                fail_after,
                answered: 0,
                callbacks: VecDeque::new(),
                cb_replies: cbr,
            };
            serve(
                s,
                &mut echo,
                &Opts {
                    max_queue: 1024,
                    verbose: false,
                },
            )
        });
        let c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        (c, h, max_seen, cb_replies)
    }

    #[test]
    fn r8167_callbacks_reach_the_client_and_its_replies_the_server() {
        let (mut c, h, _, replies) = start_cb(4, None);
        let mut s = Vec::new();
        push_record(&mut s, &call(9, 77, &[]));
        c.write_all(&s).unwrap();
        // The callback (a CALL) and the reply to call 9, in either order.
        let mut cb = None;
        for _ in 0..2 {
            let rec = read_record(&mut c).unwrap();
            if rec[4..8] == rpc::MSG_CALL.to_be_bytes() {
                cb = Some(rec);
            } else {
                assert_eq!(rpc::decode_reply(&rec).unwrap().0, 9);
            }
        }
        let cb = cb.expect("the callback was forwarded");
        let (hdr, _) = rpc::decode_call(&cb).unwrap();
        assert_eq!((hdr.xid, hdr.prog), (0xcb01, NFS4_CALLBACK));
        // The client's callback service answers on the same TCP connection.
        let mut rep = vec![0u8; 64];
        let mut w = XdrWriter::new(&mut rep);
        rpc::write_accepted(&mut w, 0xcb01, Accept::Success).unwrap();
        let n = w.position();
        rep.truncate(n);
        let mut s = Vec::new();
        push_record(&mut s, &rep);
        c.write_all(&s).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while replies.lock().unwrap().is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(*replies.lock().unwrap(), vec![(0xcb01, rep)]);
        drop(c);
        assert!(h.join().unwrap().is_ok());
    }

    #[test]
    fn pipelines_multi_fragment_calls_within_credits() {
        let (mut c, h, max_seen) = start(4, None);
        // 64 calls in one burst, each split into three fragments, with a 100 KiB one.
        let mut stream = Vec::new();
        let mut want = std::collections::HashMap::new();
        for i in 0..64u32 {
            let args: Vec<u8> = if i == 7 {
                vec![0xabu8; 100 << 10]
            } else {
                i.to_be_bytes().to_vec()
            };
            let rec = call(1000 + i, 1, &args);
            let (a, rest) = rec.split_at(4);
            let (b, d) = rest.split_at(rest.len() / 2 / 4 * 4);
            for (frag, last) in [(a, false), (b, false), (d, true)] {
                let mark = frag.len() as u32 | if last { 0x8000_0000 } else { 0 };
                stream.extend_from_slice(&mark.to_be_bytes());
                stream.extend_from_slice(frag);
            }
            want.insert(1000 + i, args);
        }
        c.write_all(&stream).unwrap();
        for _ in 0..64 {
            let rep = read_record(&mut c).unwrap();
            let (xid, st, at) = rpc::decode_reply(&rep).unwrap();
            assert_eq!(st, rpc::ReplyStatus::Accepted(Accept::Success));
            let args = want.remove(&xid).expect("one reply per call");
            assert_eq!(&rep[at..], &args[..]);
        }
        assert!(want.is_empty());
        let seen = max_seen.load(Ordering::Relaxed);
        assert!(seen > 1 && seen <= 4, "in flight at once: {seen}");
        // A failed call gets SYSTEM_ERR; then the client closes.
        let mut one = Vec::new();
        push_record(&mut one, &call(5, 99, &[]));
        c.write_all(&one).unwrap();
        let rep = read_record(&mut c).unwrap();
        assert_eq!(
            rpc::decode_reply(&rep).unwrap().1,
            rpc::ReplyStatus::Accepted(Accept::SystemErr)
        );
        drop(c);
        assert!(h.join().unwrap().is_ok());
    }

    #[test]
    fn half_closed_client_still_gets_its_replies() {
        let (mut c, h, _) = start(2, None);
        let mut s = Vec::new();
        for i in 0..10 {
            push_record(&mut s, &call(i, 0, &[]));
        }
        c.write_all(&s).unwrap();
        c.shutdown(Shutdown::Write).unwrap();
        for _ in 0..10 {
            read_record(&mut c).unwrap();
        }
        assert!(h.join().unwrap().is_ok());
    }

    #[test]
    fn server_failure_closes_the_client() {
        let (mut c, h, _) = start(2, Some(3));
        let mut s = Vec::new();
        for i in 0..10 {
            push_record(&mut s, &call(i, 0, &[]));
        }
        c.write_all(&s).unwrap();
        let mut got = 0;
        while read_record(&mut c).is_ok() {
            got += 1;
        }
        assert!(got <= 3);
        assert!(matches!(h.join().unwrap(), Err(End::Server(_))));
    }
}
