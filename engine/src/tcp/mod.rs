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
//! Bytes land in a per-connection staging buffer (its own mapping, taken at accept);
//! the sans-IO [`record::RecordDecoder`] frames them. A record's pool buffer grows with the bytes
//! that arrived, never with what its mark announces (see `conn.rs`); large bodies that
//! are already arriving are read from the socket straight into their `Buf`. A
//! connection stops being read when it has `max_inflight` records unanswered or
//! `max_queued` bytes of replies queued or still being produced (backpressure: the
//! caller charges each record's expected reply size when it is delivered, see
//! [`TcpTransport::poll`] and [`TcpTransport::release`]), or when the pools are
//! exhausted (parked: retried every poll).
//!
//! Send path: `send` writes the record mark into the reply's reserved first 4 bytes and
//! writes immediately when nothing is queued; otherwise (or on a partial write) the
//! reply waits in the connection's queue, flushed with vectored writes on writability.
//! `send_external` queues a reply whose result data stays in memory of pools lent to
//! the transport (`lend_pages`: a read cache's pages, mapped as long as the transport
//! holds their handle): header, data pieces and padding leave as slices of the same
//! vectored writes, and the pieces are handed back by `take_released` (see `ext.rs`).
//!
//! Reply budget: the reply bytes a delivered record will need are a [`Charge`] the
//! caller makes through the [`Budget`] lent with the record (`charge.rs`), given back
//! when the charge is dropped, wherever that is; no release is paired by hand.
//!
//! Resource limits (no client can take the gateway down): a partial record
//! held past `record_timeout`, or queued replies without write progress for
//! `send_timeout`, close the connection; while some allocation is starved, a partial
//! record holding pool memory without progress for `stall_reclaim` is closed too, and
//! so are queued replies holding shared memory of which the client took too little in
//! `stall_reclaim` (many connections that read nothing, each within its `max_queued`,
//! would otherwise hold every large buffer until `send_timeout`); over
//! `max_connections`, new connections are closed at once with a rate-limited log line.

mod charge;
mod conn;
mod ext;
pub mod pipe;
pub mod record;

use crate::mem::{Buf, Pools};
pub use charge::{Budget, Charge};
use conn::{Close, Conn, Cx, Pump, Stall};
pub use conn::{GROW_STEP, RECLAIM_HELD, RECLAIM_PROGRESS};
pub use ext::{ExtList, ExtSeg, MAX_EXT};
use ext::{Out, Released};
use memmap2::MmapMut;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
pub use pipe::Pipe;
use std::collections::VecDeque;
use std::io;
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
    /// Queued replies without write progress for this long close the connection.
    pub send_timeout: Duration,
    /// While some allocation is starved (a connection parked, or a pool class found
    /// empty), a connection holding pool memory for a partial record that made no
    /// progress for this long is closed, and so is one whose queued replies hold at
    /// least `RECLAIM_HELD` bytes of shared memory and whose client took (acknowledged)
    /// less than `RECLAIM_PROGRESS` bytes in this long.
    pub stall_reclaim: Duration,
    /// Reply bytes per connection, queued or reserved for calls still being answered,
    /// before it stops being read.
    pub max_queued: usize,
}

impl Default for TcpOptions {
    fn default() -> Self {
        TcpOptions {
            max_record: (1 << 20) + 64 * 1024,
            max_connections: 1024,
            max_inflight: 64,
            record_timeout: Duration::from_secs(30),
            send_timeout: Duration::from_secs(30),
            stall_reclaim: Duration::from_millis(1000),
            max_queued: 4 << 20,
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

impl ConnId {
    /// An id from its parts (tests of code keyed by connections; the transport only
    /// hands out ids of its live connections).
    pub fn from_raw(slot: u32, gen: u32) -> ConnId {
        ConnId { slot, gen }
    }
}

/// Monotonic counters of one transport (owned by its reactor; copy out for stats).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TcpStats {
    pub accepted: u64,
    /// Connections refused over `max_connections`.
    pub refused: u64,
    /// Idle or stalled connections closed at `max_connections` to admit a new one
    /// (`TcpTransport::evict_for`).
    pub evicted: u64,
    pub closed: u64,
    pub records_in: u64,
    pub replies_out: u64,
    /// CALL records the server originated (callbacks, `send_call`).
    pub calls_out: u64,
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
    /// Connections closed for a partial record held past `record_timeout`.
    pub timeouts: u64,
    /// Connections closed for queued replies without progress past `send_timeout`.
    pub send_timeouts: u64,
    /// Connections closed by stall reclaim (pool memory held by a stalled partial
    /// record while an allocation was starved).
    pub reclaimed: u64,
    /// Connections closed by send-side reclaim (queued replies holding shared memory of
    /// which the client took too little in `stall_reclaim` while an allocation was
    /// starved).
    pub send_reclaimed: u64,
    /// Times a connection stopped reading at `max_queued` bytes of queued replies.
    pub output_stalls: u64,
    /// Times a connection stopped reading at `max_queued` bytes of queued replies plus
    /// replies still being produced (`reserve`), with the queued ones alone under it:
    /// a client pipelining large calls faster than it reads their replies.
    pub reply_budget_stalls: u64,
    /// Reply bytes spliced from pipes into sockets (`send_pipe`: no copy).
    pub bytes_spliced: u64,
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
    spare_stages: Vec<MmapMut>,
    sweep_every: Duration,
    next_sweep: Instant,
    /// Pool allocation failures seen at the last sweep (starvation detector).
    exhausted_seen: u64,
    /// Refusal log lines, rate-limited (a connection flood).
    refusal_log: LogLimit,
    /// Lines for connections closed to admit another, rate-limited likewise.
    evict_log: LogLimit,
    /// Send-side reclaim log lines, rate-limited (a sweep may close many at once).
    reclaim_log: LogLimit,
    stats: TcpStats,
    /// Connections closed since the last `take_closed` (at most `MAX_CLOSED`).
    closed: Vec<ConnId>,
    /// Borrowed data of replies written or dropped since the last `take_released`.
    released: Released,
    /// Pools whose memory replies may borrow (`lend_pages`): held so their regions
    /// stay mapped while a queued reply points into them.
    lent: Vec<Pools>,
    /// The pass clock: read once per `poll` (after its wait) and used for every
    /// timestamp of that pass (input, queued replies, sweeps); timeouts are seconds,
    /// a clock read per event would only cost system time.
    now: Instant,
}

/// Which resource limit a connection ran past (see `TcpTransport::sweep`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Overdue {
    Record,
    Send,
    Reclaim,
    /// Queued replies holding shared memory that do not drain while buffers are short.
    SendReclaim,
}

/// At most one log line per `REFUSAL_LOG_EVERY` for a kind of event that may come in
/// floods; the events in between are counted and reported with the next line.
#[derive(Default)]
struct LogLimit {
    logged: Option<Instant>,
    quiet: u64,
}

impl LogLimit {
    /// `Some(events not logged since the last line)` when a line is due now.
    fn due(&mut self, now: Instant) -> Option<u64> {
        let due = self
            .logged
            .is_none_or(|t| now.saturating_duration_since(t) >= REFUSAL_LOG_EVERY);
        if !due {
            self.quiet += 1;
            return None;
        }
        self.logged = Some(now);
        Some(std::mem::take(&mut self.quiet))
    }
}

/// Closed connections remembered for `take_closed` between two calls, at most (more
/// are not reported: the caller's callbacks on them then fail and time out).
const MAX_CLOSED: usize = 1024;

/// Staging buffers of closed connections kept for reuse.
const SPARE_STAGES: usize = 64;

/// At most one refusal (or send-side reclaim) log line per this interval (the rest
/// are counted).
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(1);

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
        let shortest = opts
            .record_timeout
            .min(opts.send_timeout)
            .min(opts.stall_reclaim);
        let sweep_every = (shortest / 4).clamp(Duration::from_millis(1), Duration::from_secs(1));
        let exhausted_seen = Self::exhausted(&pools);
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
            now: Instant::now(),
            exhausted_seen,
            refusal_log: LogLimit::default(),
            evict_log: LogLimit::default(),
            reclaim_log: LogLimit::default(),
            stats: TcpStats::default(),
            closed: Vec::new(),
            released: Released {
                lists: Vec::with_capacity(256),
                pipes: Vec::with_capacity(64),
            },
            lent: Vec::new(),
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
        opts.max_queued = opts.max_queued.max(1);
        opts
    }

    /// Allocation failures over every pool class so far.
    fn exhausted(pools: &Pools) -> u64 {
        pools.exhausted_total()
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
    /// `on_record(conn, peer, record, budget)` with the record body in a pool Buf;
    /// flushes pending output. The reply bytes `on_record` charges through `budget`
    /// count against `max_queued` at once, before the connection's next record is
    /// read, until the charge is dropped. Returns units of work done.
    pub fn poll(
        &mut self,
        timeout: Option<Duration>,
        on_record: &mut dyn FnMut(ConnId, SocketAddr, Buf, &Budget),
    ) -> usize {
        self.flush();
        let mut work = self.wait(timeout);
        self.now = Instant::now();
        work += self.run_ready(on_record);
        self.sweep();
        work
    }

    /// `poll`'s first half, for a caller with other input to take before the records
    /// (a reactor's messages from workers that arrived while it slept): flushes,
    /// waits as `poll` does, accepts, and queues the connections with input, read by
    /// `poll_queued`. Returns accepted connections.
    pub fn wait_input(&mut self, timeout: Option<Duration>) -> usize {
        self.flush();
        let work = self.wait(timeout);
        self.now = Instant::now();
        work
    }

    /// `poll`'s second half: reads the queued connections' records (`wait_input`)
    /// without waiting.
    pub fn poll_queued(
        &mut self,
        on_record: &mut dyn FnMut(ConnId, SocketAddr, Buf, &Budget),
    ) -> usize {
        let work = self.run_ready(on_record);
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
        if ev.is_read_closed() || ev.is_error() {
            c.hung_up = true;
        }
        if writable {
            c.write_blocked = false;
            if let Err(e) = c.flush(&mut self.stats, self.now, &mut self.released) {
                tracing::info!("tcp {}: write failed ({e}); closing", c.peer);
                self.close_slot(slot);
                return;
            }
            self.output_drained(slot);
        }
        if readable {
            if let Some(c) = self.conns[slot].as_mut() {
                c.readable = true;
            }
            self.queue(slot);
        }
    }

    /// Rule: a connection held by its reply budget is read again once its queued plus
    /// reserved reply bytes are under `max_queued`.
    fn output_drained(&mut self, slot: usize) {
        let Some(c) = self.conns[slot].as_ref() else {
            return;
        };
        if c.stall == Stall::Output && c.budget_used() < self.opts.max_queued {
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

    /// Rule: at `max_connections`, the slot of a peer that hung up, else of an idle
    /// or stalled connection (`evict_for`), goes to the newcomer; when none can give
    /// way it is accepted and closed at once (warn). Admitted ones get TCP_NODELAY, a
    /// slot, a staging buffer, and a first read.
    fn admit(&mut self, mut sock: TcpStream, peer: SocketAddr) {
        if self.live >= self.opts.max_connections
            && self.reap_hung_up() == 0
            && !self.evict_for(peer)
        {
            self.refuse(peer);
            return;
        }
        if let Err(e) = sock.set_nodelay(true) {
            tracing::warn!("tcp {peer}: setting TCP_NODELAY failed: {e}");
        }
        let Some(stage) = self.stage() else {
            return;
        };
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
            self.spare_stage(stage);
            return;
        }
        let id = ConnId {
            slot: slot as u32,
            gen: self.gens[slot],
        };
        self.conns[slot] = Some(self.new_conn(sock, peer, id, stage));
        self.live += 1;
        self.stats.accepted += 1;
        self.queue(slot);
    }

    /// Rule: a connection over `max_connections` is closed at once (the
    /// caller drops the socket), counted, and logged at most once per
    /// `REFUSAL_LOG_EVERY` so a connection flood cannot flood the log.
    /// Rule: a slot held by a peer that has already hung up is not a reason to refuse
    /// a newcomer. A reactor that falls behind (a burst of short-lived connections, a
    /// busy core) learns of hang-ups in the same poll as new connections, and accepts
    /// are handled before the hang-ups are read. So, at the limit, the connections whose
    /// peer closed or reset are closed first, as their next read would have closed them
    /// (replies still queued for them are dropped then too). O(slots), only at the limit.
    /// Returns how many were closed.
    fn reap_hung_up(&mut self) -> usize {
        let mut n = 0;
        for slot in 0..self.conns.len() {
            if self.conns[slot].as_ref().is_some_and(|c| c.hung_up) {
                if let Some(c) = self.conns[slot].as_ref() {
                    tracing::debug!(
                        "tcp {}: peer hung up; its slot goes to a new connection",
                        c.peer
                    );
                }
                self.close_slot(slot);
                n += 1;
            }
        }
        n
    }

    /// Rule: connections that hold a slot without using it must not lock newcomers
    /// out (knfsd's `svc_check_conn_limits` closes its oldest temporary connection
    /// when over its limit). At `max_connections`, one connection gives way: first a
    /// stalled one (part of a record sent, no byte for `stall_reclaim`), the one
    /// silent longest, else an idle one (`Conn::is_idle`: no call being received or
    /// answered, no reply queued) silent for at least `stall_reclaim`, longest first.
    /// Connections that sent within `stall_reclaim` or have calls in progress are
    /// never taken, so a flood of newcomers cannot push out busy clients (they are
    /// refused instead), and it closes its own earlier connections first. Counted
    /// (`evicted`) and logged at most once per `REFUSAL_LOG_EVERY`. O(slots), only at
    /// the limit.
    fn evict_for(&mut self, peer: SocketAddr) -> bool {
        let now = Instant::now();
        let Some((slot, stalled)) = self.victim(now) else {
            return false;
        };
        self.stats.evicted += 1;
        if let (Some(quiet), Some(c)) = (self.evict_log.due(now), self.conns[slot].as_ref()) {
            tracing::warn!(
                "tcp: tcp.max_connections = {} reached: closing {} connection from {}                  (silent for {:?}) to admit {peer}; consider raising tcp.max_connections                  (docs/tuning.md) ({quiet} more closed since the last message)",
                self.opts.max_connections,
                if stalled { "stalled" } else { "idle" },
                c.peer,
                now.saturating_duration_since(c.last_input),
            );
        }
        self.close_slot(slot);
        true
    }

    /// The connection `evict_for` closes, and whether it is a stalled one.
    fn victim(&self, now: Instant) -> Option<(usize, bool)> {
        let mut best: Option<(bool, Instant, usize)> = None;
        for (slot, c) in self.conns.iter().enumerate() {
            let Some(c) = c else { continue };
            if now.saturating_duration_since(c.last_input) < self.opts.stall_reclaim {
                continue;
            }
            // Not one we stopped reading (backpressure, no buffer): its silence is ours.
            let stalled = c.mid_record() && c.stall == Stall::None;
            if !stalled && !c.is_idle() {
                continue;
            }
            // Stalled before idle, then the longest silent.
            let better = best.is_none_or(|(bs, bt, _)| (stalled, bt) > (bs, c.last_input));
            if better {
                best = Some((stalled, c.last_input, slot));
            }
        }
        best.map(|(stalled, _, slot)| (slot, stalled))
    }

    fn refuse(&mut self, peer: SocketAddr) {
        self.stats.refused += 1;
        let Some(quiet) = self.refusal_log.due(Instant::now()) else {
            return;
        };
        tracing::warn!(
            "tcp: refusing connection from {peer}: tcp.max_connections = {} reached \
             ({quiet} more refused since the last message)",
            self.opts.max_connections,
        );
    }

    /// Rule (memory returns when connections go): a staging buffer is its
    /// own anonymous mapping, so its pages are only touched as far as records reach and
    /// go back to the system when it is unmapped; at most `SPARE_STAGES` are kept for
    /// reuse. Mapping failure refuses the connection (logged), never panics.
    fn stage(&mut self) -> Option<MmapMut> {
        if let Some(s) = self.spare_stages.pop() {
            return Some(s);
        }
        match MmapMut::map_anon(STAGE_SIZE) {
            Ok(m) => Some(m),
            Err(e) => {
                tracing::warn!("tcp: mapping a {STAGE_SIZE}-byte staging buffer failed ({e}); closing a new connection");
                None
            }
        }
    }

    fn spare_stage(&mut self, stage: MmapMut) {
        if self.spare_stages.len() < SPARE_STAGES {
            self.spare_stages.push(stage);
        }
    }

    fn new_conn(&self, sock: TcpStream, peer: SocketAddr, id: ConnId, stage: MmapMut) -> Conn {
        Conn::new(
            sock,
            peer,
            id,
            stage,
            self.opts.max_record,
            self.opts.max_inflight,
        )
    }

    /// Rule: each queued connection gets one budgeted pump per poll; connections with
    /// input left, or parked, stay queued for the next poll; failures close.
    fn run_ready(&mut self, on_record: &mut dyn FnMut(ConnId, SocketAddr, Buf, &Budget)) -> usize {
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
                max_queued: self.opts.max_queued,
                stats: &mut self.stats,
                now: self.now,
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

    /// Rule: every `sweep_every`, close connections that hold resources
    /// without progress: a partial record held past `record_timeout` while we were
    /// reading it; queued replies that made no write progress for `send_timeout`; and,
    /// only while allocations are starved (a connection parked for a buffer, or a pool
    /// class found empty since the last sweep), a partial record holding pool memory
    /// with no input for `stall_reclaim`, and queued replies holding at least
    /// `RECLAIM_HELD` bytes of shared memory of which the client took (acknowledged)
    /// less than `RECLAIM_PROGRESS` bytes in `stall_reclaim` (`Conn::note_drain`;
    /// Standards: no starved neighbour; a client that reads, however slowly, above
    /// that rate keeps its connection). Closing returns every buffer it held.
    fn sweep(&mut self) {
        if self.live == 0 {
            return;
        }
        let now = self.now;
        if now < self.next_sweep {
            return;
        }
        self.next_sweep = now + self.sweep_every;
        let starved = self.starved();
        for slot in 0..self.conns.len() {
            let Some(c) = self.conns[slot].as_mut() else {
                continue;
            };
            c.note_drain(now);
            if let Some(why) = Self::overdue(&self.opts, c, now, starved) {
                self.close_overdue(slot, why);
                continue;
            }
            // A charge dropped away from `send` (a call dropped unanswered, on any
            // thread) tells no one: a connection it held is read again from here.
            self.output_drained(slot);
        }
    }

    /// Whether some allocation failed since the last check (or a connection waits).
    fn starved(&mut self) -> bool {
        let exhausted = Self::exhausted(&self.pools);
        let grew = exhausted != self.exhausted_seen;
        self.exhausted_seen = exhausted;
        let parked = self.ready.iter().any(|&s| {
            self.conns[s]
                .as_ref()
                .is_some_and(|c| c.stall == Stall::Parked)
        });
        grew || parked
    }

    /// Which limit, if any, `c` has run past.
    fn overdue(opts: &TcpOptions, c: &Conn, now: Instant, starved: bool) -> Option<Overdue> {
        let age = |t: Instant| now.saturating_duration_since(t);
        if c.stall == Stall::None
            && c.partial_since
                .is_some_and(|t| age(t) > opts.record_timeout)
        {
            return Some(Overdue::Record);
        }
        if c.out_since.is_some_and(|t| age(t) > opts.send_timeout) {
            return Some(Overdue::Send);
        }
        if starved
            && c.stall == Stall::None
            && c.holds_partial()
            && age(c.last_input) > opts.stall_reclaim
        {
            return Some(Overdue::Reclaim);
        }
        if starved
            && now
                .checked_sub(opts.stall_reclaim)
                .is_some_and(|since| c.holds_undrained(since))
        {
            return Some(Overdue::SendReclaim);
        }
        None
    }

    /// Logs and counts why an overdue connection is closed, then closes it.
    fn close_overdue(&mut self, slot: usize, why: Overdue) {
        let Some(c) = self.conns[slot].as_ref() else {
            return;
        };
        let peer = c.peer;
        match why {
            Overdue::Record => {
                self.stats.timeouts += 1;
                tracing::warn!(
                    "tcp {peer}: partial record held longer than {:?} (tcp.record_timeout_s); closing",
                    self.opts.record_timeout
                );
            }
            Overdue::Send => {
                self.stats.send_timeouts += 1;
                tracing::warn!(
                    "tcp {peer}: {} replies ({} buffer bytes) queued without write progress for {:?} \
                     (tcp.send_timeout_s; the client does not read); closing",
                    c.out.len(),
                    c.out_bytes,
                    self.opts.send_timeout
                );
            }
            Overdue::Reclaim => {
                self.stats.reclaimed += 1;
                tracing::warn!(
                    "tcp {peer}: partial record holds a {}-byte pool buffer without input for {:?} \
                     while buffers are short (tcp.stall_reclaim_ms); closing to reclaim it",
                    c.rec.as_ref().map_or(0, |r| r.capacity()),
                    self.opts.stall_reclaim
                );
            }
            Overdue::SendReclaim => {
                self.stats.send_reclaimed += 1;
                let (replies, held) = (c.out.len(), c.out_bytes);
                if let Some(quiet) = self.reclaim_log.due(self.now) {
                    tracing::warn!(
                        "tcp {peer}: {replies} queued replies hold {held} bytes of shared buffers and \
                         the client took less than {RECLAIM_PROGRESS} bytes of them in {:?} while \
                         buffers are short (tcp.stall_reclaim_ms; the client does not read); closing \
                         to reclaim them ({quiet} more such connections closed since the last message)",
                        c.undrained_since().map_or(self.opts.stall_reclaim, |t| self.now.saturating_duration_since(t))
                    );
                }
            }
        }
        self.close_slot(slot);
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
        if let Ok(slot) = self.enqueue(conn, Out::Buf(reply)) {
            self.flush_slot(slot);
        }
    }

    /// Like `send`, but the reply only joins the connection's queue; it leaves at the
    /// next `flush()` (or `poll()`), in one vectored write with the connection's other
    /// deferred replies. Use it to answer a whole poll's records with one syscall per
    /// connection.
    pub fn send_deferred(&mut self, conn: ConnId, reply: Buf) {
        if let Ok(slot) = self.enqueue(conn, Out::Buf(reply)) {
            self.mark_dirty(slot);
        }
    }

    /// Lends the memory of `pools` (a read cache's pages) to replies sent with
    /// `send_external`: the transport keeps a handle, so the region stays mapped as
    /// long as a queued reply may point into it, whatever order the caller drops
    /// things in.
    pub fn lend_pages(&mut self, pools: &Pools) {
        self.lent.push(pools.clone());
    }

    /// Whether `data`'s pieces all lie in lent memory (`lend_pages`).
    fn in_lent(&self, data: &ExtList) -> bool {
        data.as_slice().iter().all(|s| {
            self.lent.iter().any(|p| {
                let (base, len) = p.region();
                let start = base as u64;
                s.addr >= start && s.addr.saturating_add(u64::from(s.len)) <= start + len as u64
            })
        })
    }

    /// Like `send_deferred`, for a reply whose result data is not in `head`: `head`
    /// (record-mark room first) ends with the data's XDR length word, and the data is
    /// the pieces of `data`, sent from where they are and followed by the XDR padding
    /// to a multiple of 4 bytes. Each piece must lie in memory lent with
    /// `lend_pages` (which keeps it mapped); the caller keeps the bytes unchanged
    /// (a read cache pins the pages) until `data` comes back through
    /// `take_released`: once the kernel has every byte, the connection closed, or
    /// the reply was dropped (a gone connection: at once). A piece outside lent
    /// memory is refused: the record is answered with no reply and `data` comes
    /// back at once.
    pub fn send_external(&mut self, conn: ConnId, head: Buf, data: Box<ExtList>) {
        if !self.in_lent(&data) {
            tracing::error!("tcp: a reply's data lies outside lent memory; not sent");
            self.no_reply(conn);
            self.released.lists.push(data);
            return;
        }
        let data_len = data.data_len();
        let out = Out::Ext {
            head,
            data,
            data_len,
            pad: (4 - data_len % 4) % 4,
        };
        match self.enqueue(conn, out) {
            Ok(slot) => self.mark_dirty(slot),
            Err(out) => self.released.take(out),
        }
    }

    /// Like `send_deferred`, for a reply whose result data waits in `pipe` (all the
    /// bytes it holds, `Pipe::filled`): `head` (record-mark room first) ends with the
    /// data's XDR length word; the data is spliced from the pipe into the socket as
    /// the socket takes it (no copy through user space), then the XDR padding follows.
    /// The pipe comes back through `take_released_pipes` once empty, or still holding
    /// data when the connection closed first or was already gone. Its bytes count
    /// against `max_queued` while queued (a client that does not read keeps pages
    /// referenced), and `send_timeout` closes a connection that stops reading.
    pub fn send_pipe(&mut self, conn: ConnId, head: Buf, pipe: Pipe) {
        let data_len = pipe.filled();
        let out = Out::Pipe {
            head,
            pipe,
            data_len,
            pad: (4 - data_len % 4) % 4,
        };
        match self.enqueue(conn, out) {
            Ok(slot) => self.mark_dirty(slot),
            Err(out) => self.released.take(out),
        }
    }

    /// Hands over the borrowed data (`send_external`) whose bytes the transport no
    /// longer reads.
    #[inline]
    pub fn take_released(&mut self, f: &mut dyn FnMut(Box<ExtList>)) {
        if self.released.lists.is_empty() {
            return;
        }
        for d in self.released.lists.drain(..) {
            f(d);
        }
    }

    /// Hands over the pipes (`send_pipe`) the transport is done with: empty when
    /// their data was sent, not empty when their connection went away first.
    #[inline]
    pub fn take_released_pipes(&mut self, f: &mut dyn FnMut(Pipe)) {
        if self.released.pipes.is_empty() {
            return;
        }
        for p in self.released.pipes.drain(..) {
            f(p);
        }
    }

    fn mark_dirty(&mut self, slot: usize) {
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
    /// reserved first 4 bytes, and joins the queue in order. Returns the live slot, or
    /// the reply's borrowed data when it was dropped (gone connection, no mark room).
    fn enqueue(&mut self, conn: ConnId, mut reply: Out) -> Result<usize, Out> {
        let Some(slot) = self.slot_of(conn) else {
            return Err(reply);
        };
        self.answered(slot);
        let head = match &reply {
            Out::Buf(b) => b.len(),
            Out::Ext { head, .. } | Out::Pipe { head, .. } => head.len(),
        };
        if head < 4 {
            debug_assert!(false, "reply without room for the record mark");
            tracing::error!("tcp: reply of {head} bytes has no record mark room; dropped");
            return Err(reply);
        }
        let body = reply.len() - 4;
        reply.mark_mut().copy_from_slice(&record::mark(body));
        self.stats.replies_out += 1;
        let c = self.conns[slot].as_mut().expect("slot_of checked");
        c.push_reply(reply, self.now);
        Ok(slot)
    }

    /// Sends a CALL record the server originates (an NFSv4.1 callback on the client's
    /// connection, RFC 8881 §2.10.3.1): `call[0..4]` is reserved for the record mark,
    /// like a reply's. It answers no received record, so the in-flight accounting is
    /// untouched; it joins the connection's queue in order with the replies and is
    /// written now when nothing is queued. The peer's REPLY to it arrives as an ordinary
    /// record through `poll` (the caller tells it apart by msg_type and answers it with
    /// `no_reply`). Returns false when the connection is gone (the Buf is dropped).
    pub fn send_call(&mut self, conn: ConnId, mut call: Buf) -> bool {
        let Some(slot) = self.slot_of(conn) else {
            return false;
        };
        if call.len() < 4 {
            debug_assert!(false, "call without room for the record mark");
            return false;
        }
        let body = call.len() - 4;
        call[..4].copy_from_slice(&record::mark(body));
        self.stats.calls_out += 1;
        let c = self.conns[slot].as_mut().expect("slot_of checked");
        c.push_reply(Out::Buf(call), self.now);
        self.flush_slot(slot);
        true
    }

    /// Writes what the socket takes now unless it is known to be full; failure closes.
    fn flush_slot(&mut self, slot: usize) {
        let c = self.conns[slot].as_mut().expect("live slot");
        if c.write_blocked || c.out.is_empty() {
            return;
        }
        if let Err(e) = c.flush(&mut self.stats, self.now, &mut self.released) {
            tracing::info!("tcp {}: write failed ({e}); closing", c.peer);
            self.close_slot(slot);
            return;
        }
        self.output_drained(slot);
    }

    /// Charges `bytes` of `conn`'s reply budget for a delivered record whose reply is
    /// still being produced, for records the caller classifies after the poll that
    /// delivered them (inside it, through the `Budget` lent with the record). Given
    /// back when the charge is dropped; drop it before the record's `send`/`no_reply`,
    /// whose reply then counts as queued and reads the connection again when under
    /// its budget. A gone connection or 0 bytes: no charge.
    pub fn charge(&mut self, conn: ConnId, bytes: usize) -> Option<Charge> {
        let slot = self.slot_of(conn)?;
        self.conns[slot].as_ref()?.reserved.charge(bytes)
    }

    /// Reply bytes queued plus reserved on `conn` (0 when it is gone).
    pub fn budget_used(&self, conn: ConnId) -> usize {
        self.slot_of(conn)
            .and_then(|s| self.conns[s].as_ref())
            .map_or(0, |c| c.budget_used())
    }

    /// Answers a delivered record with no reply (e.g. a dropped duplicate, a
    /// callback's REPLY); its bytes are acknowledged at once (`Conn::ack_now`).
    pub fn no_reply(&mut self, conn: ConnId) {
        if let Some(slot) = self.slot_of(conn) {
            if let Some(c) = self.conns[slot].as_ref() {
                c.ack_now();
            }
            self.answered(slot);
        }
    }

    /// Rule: answering a record lowers the in-flight count; a connection held by
    /// backpressure, or by a budget its charges no longer fill, is queued to be read
    /// again.
    fn answered(&mut self, slot: usize) {
        let c = self.conns[slot].as_mut().expect("live slot");
        debug_assert!(c.inflight > 0, "more answers than records");
        c.inflight = c.inflight.saturating_sub(1);
        let resume = match c.stall {
            Stall::Backpressure => c.inflight < self.opts.max_inflight,
            Stall::Output => c.budget_used() < self.opts.max_queued,
            _ => false,
        };
        if resume {
            self.queue(slot);
        }
    }

    /// Hands over the connections that closed since the last call, whatever closed
    /// them (the peer, a timeout, `close`): an NFSv4.1 session whose back channel was
    /// one of them must forget it.
    pub fn take_closed(&mut self, f: &mut dyn FnMut(ConnId)) {
        for c in self.closed.drain(..) {
            f(c);
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
    /// replies are dropped, and the staging buffer is kept for a later accept (up to
    /// `SPARE_STAGES`) or unmapped.
    fn close_slot(&mut self, slot: usize) {
        let Some(mut c) = self.conns[slot].take() else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut c.sock);
        if self.closed.len() < MAX_CLOSED {
            self.closed.push(ConnId {
                slot: slot as u32,
                gen: self.gens[slot],
            });
        }
        self.gens[slot] = self.gens[slot].wrapping_add(1);
        self.free.push(slot);
        self.live -= 1;
        self.stats.closed += 1;
        c.drop_output(&mut self.released);
        self.spare_stage(c.stage);
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod ack_tests;

#[cfg(test)]
mod pipe_tests;
