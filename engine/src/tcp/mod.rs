//! RPC over TCP with record marking (RFC 5531 §11) on non-blocking sockets.
//!
//! One [`TcpTransport`] per reactor: its own `SO_REUSEPORT` listener on the shared
//! address (the kernel spreads connections across reactors), its own `mio::Poll`, and
//! every connection it accepts for that connection's whole life. Nothing in it is
//! shared: the transport is owned by one reactor thread (it is `Send` so it can be built
//! before the thread starts). The only cross-thread handles are the `mio::Waker` from
//! [`TcpTransport::waker`] and the buffer pools, whose `Buf`s may be dropped anywhere.
//!
//! Receive path: sockets are edge-triggered, so a connection is read until `WouldBlock`
//! (at most [`READ_BUDGET`] reads per poll; the rest stays queued for the next poll).
//! Bytes land in a per-connection staging buffer allocated at accept; the sans-IO
//! [`record::RecordDecoder`] frames them; each record's body is copied into a pool `Buf`
//! sized from its fragment header, except that large bodies are read from the socket
//! straight into their `Buf`. A connection stops being read when it has `max_inflight`
//! records unanswered (backpressure) or when the pools are exhausted (parked: retried
//! every poll).
//!
//! Send path: `send` writes the record mark into the reply's reserved first 4 bytes and
//! writes immediately when nothing is queued; otherwise (or on a partial write) the
//! reply waits in the connection's queue, flushed with vectored writes on writability.

pub mod record;

use crate::mem::{Buf, Pools};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use record::{Event, FrameError, RecordDecoder};
use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Per-connection staging buffer for small records and headers.
pub const STAGE_SIZE: usize = 32 * 1024;
/// Bodies with at least this many bytes outstanding are read straight into their `Buf`.
pub const DIRECT_MIN: usize = 8 * 1024;
/// Reads per connection per poll before yielding to other connections.
pub const READ_BUDGET: usize = 16;
/// Replies gathered into one vectored write.
pub const MAX_IOV: usize = 64;
/// How often a parked connection retries when the caller asked to wait longer.
const PARK_RETRY: Duration = Duration::from_millis(1);
const LISTENER: Token = Token(usize::MAX);
const WAKER: Token = Token(usize::MAX - 1);
/// Another transport's readiness fd (e.g. the fabric's): it only ends the wait.
const EXTERNAL: Token = Token(usize::MAX - 2);

/// The `tcp` configuration section.
#[derive(Debug, Clone)]
pub struct TcpOptions {
    /// Largest record body accepted (sum of its fragments). Clamped to the largest
    /// pool buffer.
    pub max_record: usize,
    /// Connections this transport holds; more are accepted and closed at once.
    pub max_connections: usize,
    /// Unanswered records per connection before it stops being read.
    pub max_inflight: usize,
    /// A partial record held longer than this closes the connection.
    pub record_timeout: Duration,
}

impl Default for TcpOptions {
    fn default() -> Self {
        TcpOptions {
            max_record: (1 << 20) + 64 * 1024,
            max_connections: 1024,
            max_inflight: 64,
            record_timeout: Duration::from_secs(30),
        }
    }
}

/// A connection of one transport: slot + generation, so a reply for a closed (and
/// possibly reused) slot is dropped instead of reaching another client.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct ConnId {
    slot: u32,
    gen: u32,
}

/// Monotonic counters of one transport (owned by its reactor; copy out for stats).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TcpStats {
    pub accepted: u64,
    /// Connections refused over `max_connections`.
    pub refused: u64,
    pub closed: u64,
    pub records_in: u64,
    pub replies_out: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Body bytes read from the socket straight into record buffers (no staging copy).
    pub bytes_direct: u64,
    /// Vectored write calls.
    pub writes: u64,
    /// Writes that hit `WouldBlock` (replies left queued until writability).
    pub write_blocks: u64,
    /// Times a connection parked because no pool buffer was free.
    pub parks: u64,
    /// Times a connection stopped reading at `max_inflight`.
    pub backpressured: u64,
    pub oversize: u64,
    pub timeouts: u64,
}

/// Why a connection is not being read although it may have input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stall {
    None,
    /// No pool buffer for the next record: retried every poll.
    Parked,
    /// `max_inflight` records unanswered: resumed by `send`/`no_reply`.
    Backpressure,
}

/// What one pump of a connection left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pump {
    /// Read to `WouldBlock`; wait for the next readiness event.
    Idle,
    /// Read budget used up with input possibly left: pump again next poll.
    Again,
    Stalled(Stall),
}

/// Why a connection is closed.
enum Close {
    Eof,
    Io(io::Error),
    Frame(FrameError),
}

/// Shared context a connection needs while pumping (disjoint from the slot table).
struct Cx<'a> {
    pools: &'a Pools,
    max_inflight: usize,
    stats: &'a mut TcpStats,
}

struct Conn {
    sock: TcpStream,
    peer: SocketAddr,
    id: ConnId,
    dec: RecordDecoder,
    stage: Box<[u8]>,
    /// Unconsumed staged bytes are `stage[pos..end]`.
    pos: usize,
    end: usize,
    /// The record being assembled.
    rec: Option<Buf>,
    /// Capacity `rec` must reach before more body is placed (set by a fragment header).
    need: Option<usize>,
    /// Records delivered and not yet answered.
    inflight: usize,
    out: VecDeque<Buf>,
    /// Bytes of `out[0]` already written.
    out_off: usize,
    write_blocked: bool,
    /// The socket may hold unread bytes (edge-triggered: set by events, cleared by
    /// `WouldBlock`).
    readable: bool,
    /// In the transport's ready list.
    queued: bool,
    /// In the transport's deferred-flush list.
    dirty: bool,
    stall: Stall,
    /// When the current partial record was first seen while we were reading.
    partial_since: Option<Instant>,
}

impl Conn {
    /// Rule: read until `WouldBlock` (edge-triggered), at most `READ_BUDGET` reads per
    /// poll, delivering each complete record. Returns the state and units of work.
    fn pump(
        &mut self,
        cx: &mut Cx,
        on_record: &mut dyn FnMut(ConnId, SocketAddr, Buf),
    ) -> Result<(Pump, usize), Close> {
        self.resume();
        let mut work = 0;
        for _ in 0..READ_BUDGET {
            if let Some(stall) = self.drain(cx, on_record, &mut work)? {
                return Ok((self.stalled(cx, stall), work));
            }
            if !self.readable {
                return Ok((Pump::Idle, work));
            }
            work += self.read_some(cx)?;
        }
        if let Some(stall) = self.drain(cx, on_record, &mut work)? {
            return Ok((self.stalled(cx, stall), work));
        }
        Ok((
            if self.readable {
                Pump::Again
            } else {
                Pump::Idle
            },
            work,
        ))
    }

    /// Rule: time spent stalled by us does not count against the peer's
    /// `record_timeout`: the clock restarts when reading resumes.
    fn resume(&mut self) {
        if self.stall != Stall::None {
            self.stall = Stall::None;
            self.partial_since = None;
        }
    }

    fn stalled(&mut self, cx: &mut Cx, stall: Stall) -> Pump {
        match stall {
            Stall::Parked => cx.stats.parks += 1,
            Stall::Backpressure => cx.stats.backpressured += 1,
            Stall::None => {}
        }
        self.stall = stall;
        Pump::Stalled(stall)
    }

    /// Rule: decode all staged bytes into records; stop before starting a record when
    /// `max_inflight` are unanswered, and before placing body bytes when no pool
    /// buffer is free. Returns the stall, or `None` when the stage is empty.
    fn drain(
        &mut self,
        cx: &mut Cx,
        on_record: &mut dyn FnMut(ConnId, SocketAddr, Buf),
        work: &mut usize,
    ) -> Result<Option<Stall>, Close> {
        loop {
            if self.dec.at_boundary() && self.inflight >= cx.max_inflight {
                return Ok(Some(Stall::Backpressure));
            }
            if !self.ensure_buf(cx.pools) {
                return Ok(Some(Stall::Parked));
            }
            let (n, ev) = self
                .dec
                .decode(&self.stage[self.pos..self.end])
                .map_err(Close::Frame)?;
            self.pos += n;
            match ev {
                None if n == 0 => break,
                None => {}
                Some(Event::Fragment { record_len, .. }) => self.need = Some(record_len),
                Some(Event::Body(k)) => self.copy_body(self.pos - k, k),
                Some(Event::Record) => {
                    self.deliver(cx, on_record);
                    *work += 1;
                }
            }
        }
        self.pos = 0;
        self.end = 0;
        if !self.dec.at_boundary() && self.partial_since.is_none() {
            self.partial_since = Some(Instant::now());
        }
        Ok(None)
    }

    /// Rule: before body bytes are placed, the record buffer holds the record's
    /// announced length. A later fragment that does not fit moves the record into a
    /// bigger pool buffer (multi-fragment records only). No buffer free → false (park).
    fn ensure_buf(&mut self, pools: &Pools) -> bool {
        let Some(need) = self.need else {
            return true;
        };
        if self.rec.as_ref().is_some_and(|r| r.capacity() >= need) {
            self.need = None;
            return true;
        }
        let Some(mut b) = pools.alloc(need) else {
            return false;
        };
        if let Some(old) = self.rec.take() {
            b.spare_mut()[..old.len()].copy_from_slice(&old);
            b.set_len(old.len());
        }
        self.rec = Some(b);
        self.need = None;
        true
    }

    /// Copies `k` staged body bytes at `at` to the end of the record.
    fn copy_body(&mut self, at: usize, k: usize) {
        let rec = self
            .rec
            .as_mut()
            .expect("buffer ensured at the fragment header");
        let l = rec.len();
        rec.spare_mut()[l..l + k].copy_from_slice(&self.stage[at..at + k]);
        rec.set_len(l + k);
    }

    /// Rule: a complete record goes to the caller and counts as in flight until answered.
    fn deliver(&mut self, cx: &mut Cx, on_record: &mut dyn FnMut(ConnId, SocketAddr, Buf)) {
        let rec = self.rec.take().expect("every record has a fragment header");
        self.inflight += 1;
        self.partial_since = None;
        cx.stats.records_in += 1;
        on_record(self.id, self.peer, rec);
    }

    /// Rule: a large outstanding body is read straight into its record buffer (no
    /// staging copy), and only up to its end so the next header lands in staging.
    /// Everything else is read into the (empty) staging buffer. Returns 1 if bytes came.
    fn read_some(&mut self, cx: &mut Cx) -> Result<usize, Close> {
        debug_assert_eq!(self.pos, self.end);
        let left = self.dec.body_left();
        let direct = left >= DIRECT_MIN && self.need.is_none() && self.rec.is_some();
        let (res, asked) = match (&mut self.rec, direct) {
            (Some(rec), true) => {
                let l = rec.len();
                (self.sock.read(&mut rec.spare_mut()[l..l + left]), left)
            }
            _ => (self.sock.read(&mut self.stage[..]), self.stage.len()),
        };
        match res {
            Ok(0) => Err(Close::Eof),
            Ok(n) => {
                // A short read emptied the socket's receive queue; new data raises a
                // fresh edge, so skip the read that would only say WouldBlock.
                if n < asked {
                    self.readable = false;
                }
                cx.stats.bytes_in += n as u64;
                if direct {
                    cx.stats.bytes_direct += n as u64;
                }
                self.placed(direct, n);
                Ok(1)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.readable = false;
                Ok(0)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
            Err(e) => Err(Close::Io(e)),
        }
    }

    /// Accounts `n` bytes just read, either into the record or into staging.
    fn placed(&mut self, direct: bool, n: usize) {
        if direct {
            let rec = self
                .rec
                .as_mut()
                .expect("direct read needs a record buffer");
            rec.set_len(rec.len() + n);
            self.dec.body_read(n);
        } else {
            self.pos = 0;
            self.end = n;
        }
    }

    /// Rule: replies leave in queue order, up to `MAX_IOV` per vectored write; a partial
    /// write keeps the offset into the front reply; `WouldBlock` waits for writability.
    fn flush(&mut self, stats: &mut TcpStats) -> io::Result<()> {
        while !self.out.is_empty() {
            let res = {
                let mut iov = [IoSlice::new(&[]); MAX_IOV];
                let k = self.out.len().min(MAX_IOV);
                for (i, b) in self.out.iter().take(k).enumerate() {
                    let from = if i == 0 { self.out_off } else { 0 };
                    iov[i] = IoSlice::new(&b[from..]);
                }
                stats.writes += 1;
                self.sock.write_vectored(&iov[..k])
            };
            match res {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    stats.bytes_out += n as u64;
                    self.advance(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    stats.write_blocks += 1;
                    self.write_blocked = true;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Drops fully written replies (back to their pool) and keeps the partial offset.
    fn advance(&mut self, mut n: usize) {
        while n > 0 {
            let left = self.out[0].len() - self.out_off;
            if n < left {
                self.out_off += n;
                return;
            }
            n -= left;
            self.out.pop_front();
            self.out_off = 0;
        }
    }
}

/// Record-marked RPC over TCP for one reactor. See the module docs.
pub struct TcpTransport {
    poll: Poll,
    events: Events,
    listener: TcpListener,
    local: SocketAddr,
    waker: Arc<Waker>,
    opts: TcpOptions,
    pools: Pools,
    conns: Vec<Option<Conn>>,
    gens: Vec<u32>,
    free: Vec<usize>,
    live: usize,
    /// Connections to pump on the next pass (input left, parked, or unblocked).
    ready: VecDeque<usize>,
    /// Connections with deferred replies to flush.
    dirty: Vec<usize>,
    /// Staging buffers of closed connections, reused at accept.
    spare_stages: Vec<Box<[u8]>>,
    sweep_every: Duration,
    next_sweep: Instant,
    stats: TcpStats,
}

impl TcpTransport {
    /// Binds a non-blocking listener with SO_REUSEADDR and SO_REUSEPORT (each reactor
    /// binds its own listener on the same address; the kernel spreads connections),
    /// registers it with its own mio::Poll.
    pub fn bind(addr: SocketAddr, opts: TcpOptions, pools: Pools) -> io::Result<TcpTransport> {
        let opts = Self::checked(opts, &pools);
        let listener = Self::listen(addr)?;
        let mut listener = TcpListener::from_std(listener);
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let local = listener.local_addr()?;
        let sweep_every =
            (opts.record_timeout / 4).clamp(Duration::from_millis(1), Duration::from_secs(1));
        Ok(TcpTransport {
            poll,
            events: Events::with_capacity(1024),
            listener,
            local,
            waker,
            conns: Vec::with_capacity(opts.max_connections),
            gens: Vec::with_capacity(opts.max_connections),
            free: Vec::with_capacity(opts.max_connections),
            live: 0,
            ready: VecDeque::with_capacity(opts.max_connections),
            dirty: Vec::with_capacity(opts.max_connections),
            spare_stages: Vec::new(),
            sweep_every,
            next_sweep: Instant::now() + sweep_every,
            stats: TcpStats::default(),
            opts,
            pools,
        })
    }

    /// Rule: a record must fit one pool buffer, and at least one record may be in flight.
    fn checked(mut opts: TcpOptions, pools: &Pools) -> TcpOptions {
        if opts.max_record > pools.max_buf() {
            tracing::warn!(
                "tcp.max_record = {} exceeds the largest pool buffer ({}); records are limited to {}",
                opts.max_record,
                pools.max_buf(),
                pools.max_buf()
            );
            opts.max_record = pools.max_buf();
        }
        opts.max_inflight = opts.max_inflight.max(1);
        opts
    }

    fn listen(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
        use socket2::{Domain, Protocol, Socket, Type};
        let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        s.set_reuse_address(true)?;
        s.set_reuse_port(true)?;
        s.set_nonblocking(true)?;
        s.bind(&addr.into())?;
        s.listen(1024)?;
        Ok(s.into())
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// A waker registered with this transport's Poll, so other threads can interrupt
    /// `poll(Some(timeout))` (used with ring::Doorbell).
    pub fn waker(&self) -> Arc<Waker> {
        self.waker.clone()
    }

    pub fn connections(&self) -> usize {
        self.live
    }

    /// Makes `poll`'s wait also end when `fd` becomes readable, so one reactor sleeps
    /// on every transport it owns (the fabric's `wait_fd`). `fd` must stay open while
    /// this transport lives.
    pub fn register_external(&self, fd: std::os::fd::RawFd) -> io::Result<()> {
        self.poll
            .registry()
            .register(&mut mio::unix::SourceFd(&fd), EXTERNAL, Interest::READABLE)
    }

    pub fn stats(&self) -> TcpStats {
        self.stats
    }

    /// The options in force (after clamping to the pools).
    pub fn options(&self) -> &TcpOptions {
        &self.opts
    }

    /// Waits up to `timeout` (Some(ZERO) = non-blocking busy poll) for readiness,
    /// accepts new connections, reads ready sockets, and for each complete record calls
    /// `on_record(conn, peer, record)` with the record body in a pool Buf; flushes
    /// pending output. Returns units of work done.
    pub fn poll(
        &mut self,
        timeout: Option<Duration>,
        on_record: &mut dyn FnMut(ConnId, SocketAddr, Buf),
    ) -> usize {
        self.flush();
        let mut work = self.wait(timeout);
        work += self.run_ready(on_record);
        self.sweep();
        work
    }

    /// Rule: never sleep past work we already know of: queued connections with input
    /// poll without waiting, parked ones retry every `PARK_RETRY`, and partial records
    /// are checked every `sweep_every`.
    fn wait_limit(&self, asked: Option<Duration>) -> Option<Duration> {
        let urgent = self.ready.iter().any(|&s| {
            self.conns[s]
                .as_ref()
                .is_some_and(|c| c.stall != Stall::Parked)
        });
        let cap = if urgent {
            Some(Duration::ZERO)
        } else if !self.ready.is_empty() {
            Some(PARK_RETRY)
        } else if self.live > 0 {
            Some(self.sweep_every)
        } else {
            None
        };
        match (asked, cap) {
            (Some(a), Some(c)) => Some(a.min(c)),
            (a, c) => a.or(c),
        }
    }

    /// Waits for readiness and dispatches the events. Returns accepted connections.
    fn wait(&mut self, timeout: Option<Duration>) -> usize {
        let limit = self.wait_limit(timeout);
        let mut events = std::mem::replace(&mut self.events, Events::with_capacity(0));
        if let Err(e) = self.poll.poll(&mut events, limit) {
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::warn!("tcp: poll failed: {e}");
            }
        }
        let mut work = 0;
        for ev in events.iter() {
            match ev.token() {
                LISTENER => work += self.accept_all(),
                WAKER | EXTERNAL => {}
                Token(slot) => self.conn_event(slot, ev),
            }
        }
        self.events = events;
        work
    }

    /// Rule: readability (or hang-up/error, which a read reports) queues the connection
    /// for reading; writability flushes queued replies.
    fn conn_event(&mut self, slot: usize, ev: &mio::event::Event) {
        let readable = ev.is_readable() || ev.is_read_closed() || ev.is_error();
        let writable = ev.is_writable() || ev.is_error();
        let Some(c) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        if writable {
            c.write_blocked = false;
            if let Err(e) = c.flush(&mut self.stats) {
                tracing::info!("tcp {}: write failed ({e}); closing", c.peer);
                self.close_slot(slot);
                return;
            }
        }
        if readable {
            c.readable = true;
            self.queue(slot);
        }
    }

    fn queue(&mut self, slot: usize) {
        if let Some(c) = self.conns[slot].as_mut() {
            if !c.queued {
                c.queued = true;
                self.ready.push_back(slot);
            }
        }
    }

    /// Rule: accept until `WouldBlock`; count every accepted connection as work.
    fn accept_all(&mut self) -> usize {
        let mut n = 0;
        loop {
            match self.listener.accept() {
                Ok((sock, peer)) => {
                    self.admit(sock, peer);
                    n += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // EMFILE and friends: the backlog keeps the rest for the next event.
                    tracing::warn!("tcp {}: accept failed: {e}", self.local);
                    return n;
                }
            }
        }
    }

    /// Rule: beyond `max_connections` a connection is accepted and closed at once
    /// (warn); admitted ones get TCP_NODELAY, a slot, a staging buffer, and a first read.
    fn admit(&mut self, mut sock: TcpStream, peer: SocketAddr) {
        if self.live >= self.opts.max_connections {
            tracing::warn!(
                "tcp {}: {} connections open (tcp.max_connections); closing new connection from {peer}",
                self.local,
                self.live
            );
            self.stats.refused += 1;
            return;
        }
        if let Err(e) = sock.set_nodelay(true) {
            tracing::warn!("tcp {peer}: setting TCP_NODELAY failed: {e}");
        }
        let slot = self.free.pop().unwrap_or_else(|| {
            self.conns.push(None);
            self.gens.push(0);
            self.conns.len() - 1
        });
        let interest = Interest::READABLE | Interest::WRITABLE;
        if let Err(e) = self
            .poll
            .registry()
            .register(&mut sock, Token(slot), interest)
        {
            tracing::warn!("tcp {peer}: registering the connection failed: {e}; closing");
            self.free.push(slot);
            return;
        }
        let stage = self
            .spare_stages
            .pop()
            .unwrap_or_else(|| vec![0u8; STAGE_SIZE].into_boxed_slice());
        let id = ConnId {
            slot: slot as u32,
            gen: self.gens[slot],
        };
        self.conns[slot] = Some(self.new_conn(sock, peer, id, stage));
        self.live += 1;
        self.stats.accepted += 1;
        self.queue(slot);
    }

    fn new_conn(&self, sock: TcpStream, peer: SocketAddr, id: ConnId, stage: Box<[u8]>) -> Conn {
        Conn {
            sock,
            peer,
            id,
            dec: RecordDecoder::new(self.opts.max_record),
            stage,
            pos: 0,
            end: 0,
            rec: None,
            need: None,
            inflight: 0,
            out: VecDeque::with_capacity(self.opts.max_inflight),
            out_off: 0,
            write_blocked: false,
            readable: true,
            queued: false,
            dirty: false,
            stall: Stall::None,
            partial_since: None,
        }
    }

    /// Rule: each queued connection gets one budgeted pump per poll; connections with
    /// input left, or parked, stay queued for the next poll; failures close.
    fn run_ready(&mut self, on_record: &mut dyn FnMut(ConnId, SocketAddr, Buf)) -> usize {
        let mut work = 0;
        for _ in 0..self.ready.len() {
            let Some(slot) = self.ready.pop_front() else {
                break;
            };
            let Some(c) = self.conns[slot].as_mut() else {
                continue;
            };
            c.queued = false;
            let mut cx = Cx {
                pools: &self.pools,
                max_inflight: self.opts.max_inflight,
                stats: &mut self.stats,
            };
            match c.pump(&mut cx, on_record) {
                Ok((state, n)) => {
                    work += n;
                    if matches!(state, Pump::Again | Pump::Stalled(Stall::Parked)) {
                        c.queued = true;
                        self.ready.push_back(slot);
                    }
                }
                Err(why) => self.close_for(slot, why),
            }
        }
        work
    }

    /// Logs why a connection is being closed, then closes it.
    fn close_for(&mut self, slot: usize, why: Close) {
        let Some(c) = self.conns[slot].as_ref() else {
            return;
        };
        let peer = c.peer;
        match why {
            Close::Eof => tracing::debug!("tcp {peer}: peer closed the connection"),
            Close::Io(e) => tracing::info!("tcp {peer}: read failed ({e}); closing"),
            Close::Frame(e) => {
                self.stats.oversize += 1;
                tracing::warn!("tcp {peer}: {e} (tcp.max_record); closing the connection");
            }
        }
        self.close_slot(slot);
    }

    /// Rule: a partial record held longer than `record_timeout` while we were reading
    /// the connection closes it. Checked every `sweep_every`.
    fn sweep(&mut self) {
        if self.live == 0 {
            return;
        }
        let now = Instant::now();
        if now < self.next_sweep {
            return;
        }
        self.next_sweep = now + self.sweep_every;
        for slot in 0..self.conns.len() {
            let Some(c) = self.conns[slot].as_ref() else {
                continue;
            };
            let held = c.partial_since.map(|t| now.saturating_duration_since(t));
            if c.stall == Stall::None && held.is_some_and(|h| h > self.opts.record_timeout) {
                tracing::warn!(
                    "tcp {}: partial record held longer than {:?} (tcp.record_timeout); closing",
                    c.peer,
                    self.opts.record_timeout
                );
                self.stats.timeouts += 1;
                self.close_slot(slot);
            }
        }
    }

    /// Looks up a live connection by id (slot and generation must match).
    fn slot_of(&self, conn: ConnId) -> Option<usize> {
        let slot = conn.slot as usize;
        match self.conns.get(slot) {
            Some(Some(c)) if c.id == conn => Some(slot),
            _ => None,
        }
    }

    /// Queues a reply. reply[0..4] is reserved for the record mark, written here as a
    /// single last fragment. Writes at once when nothing is queued; the rest waits for
    /// writability. A gone connection just drops the Buf. Every delivered record is
    /// answered by exactly one `send`, `send_deferred` or `no_reply`.
    pub fn send(&mut self, conn: ConnId, reply: Buf) {
        if let Some(slot) = self.enqueue(conn, reply) {
            self.flush_slot(slot);
        }
    }

    /// Like `send`, but the reply only joins the connection's queue; it leaves at the
    /// next `flush()` (or `poll()`), in one vectored write with the connection's other
    /// deferred replies. Use it to answer a whole poll's records with one syscall per
    /// connection.
    pub fn send_deferred(&mut self, conn: ConnId, reply: Buf) {
        let Some(slot) = self.enqueue(conn, reply) else {
            return;
        };
        let c = self.conns[slot].as_mut().expect("enqueue checked");
        if !c.dirty {
            c.dirty = true;
            self.dirty.push(slot);
        }
    }

    /// Writes every connection's deferred replies (those not waiting for writability).
    pub fn flush(&mut self) {
        while let Some(slot) = self.dirty.pop() {
            if let Some(c) = self.conns[slot].as_mut() {
                c.dirty = false;
                self.flush_slot(slot);
            }
        }
    }

    /// Rule: a reply answers one record, carries a single-fragment mark in its
    /// reserved first 4 bytes, and joins the queue in order. Returns the live slot.
    fn enqueue(&mut self, conn: ConnId, mut reply: Buf) -> Option<usize> {
        let slot = self.slot_of(conn)?;
        self.answered(slot);
        if reply.len() < 4 {
            debug_assert!(false, "reply without room for the record mark");
            tracing::error!(
                "tcp: reply of {} bytes has no record mark room; dropped",
                reply.len()
            );
            return None;
        }
        let body = reply.len() - 4;
        reply[..4].copy_from_slice(&record::mark(body));
        self.stats.replies_out += 1;
        let c = self.conns[slot].as_mut().expect("slot_of checked");
        c.out.push_back(reply);
        Some(slot)
    }

    /// Writes what the socket takes now unless it is known to be full; failure closes.
    fn flush_slot(&mut self, slot: usize) {
        let c = self.conns[slot].as_mut().expect("live slot");
        if c.write_blocked || c.out.is_empty() {
            return;
        }
        if let Err(e) = c.flush(&mut self.stats) {
            tracing::info!("tcp {}: write failed ({e}); closing", c.peer);
            self.close_slot(slot);
        }
    }

    /// Answers a delivered record with no reply (e.g. a dropped duplicate).
    pub fn no_reply(&mut self, conn: ConnId) {
        if let Some(slot) = self.slot_of(conn) {
            self.answered(slot);
        }
    }

    /// Rule: answering a record lowers the in-flight count; a connection held by
    /// backpressure is queued to be read again.
    fn answered(&mut self, slot: usize) {
        let c = self.conns[slot].as_mut().expect("live slot");
        debug_assert!(c.inflight > 0, "more answers than records");
        c.inflight = c.inflight.saturating_sub(1);
        if c.stall == Stall::Backpressure && c.inflight < self.opts.max_inflight {
            self.queue(slot);
        }
    }

    /// Closes a connection now (caller logs why).
    pub fn close(&mut self, conn: ConnId) {
        if let Some(slot) = self.slot_of(conn) {
            self.close_slot(slot);
        }
    }

    /// Rule: closing frees everything at once: the socket, the partial record and
    /// queued replies go back to their pools, the slot's generation moves on so late
    /// replies are dropped, and the staging buffer is kept for the next accept.
    fn close_slot(&mut self, slot: usize) {
        let Some(mut c) = self.conns[slot].take() else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut c.sock);
        self.gens[slot] = self.gens[slot].wrapping_add(1);
        self.free.push(slot);
        self.live -= 1;
        self.stats.closed += 1;
        self.spare_stages.push(std::mem::take(&mut c.stage));
    }
}

#[cfg(test)]
mod tests;
