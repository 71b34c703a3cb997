//! The `soft` provider: RDMA semantics in pure Rust, between threads of one process or
//! processes of one host, with fault injection for tests.
//!
//! - Connection management (`cm.rs`, `conn.rs`): an abstract Unix stream socket named
//!   after the listen address. The connector creates a sealed memfd segment with two
//!   SPSC byte rings and passes it with its request (`SCM_RIGHTS`); the socket then lives
//!   as long as the connection, as doorbell and as liveness signal (end of stream = the
//!   peer disconnected, exited or crashed).
//! - Data path (`ring.rs`, `qp/`): frames in the rings. The initiator copies from its
//!   registered memory into the ring when it pushes; the "remote NIC" work (checking
//!   rkeys, copying into memory, answering Reads, acknowledging) happens when the other
//!   side polls (`poll_cq`/`poll_cm`). Busy polling costs atomics on the shared rings
//!   only; the sockets (new connections, handshakes, peer exits) are looked at once
//!   [`SOCKET_CHECK_INTERVAL`] has passed (the clock is read every
//!   [`IDLE_CLOCK_EVERY`] idle or [`BUSY_CLOCK_EVERY`] busy polls), and in
//!   [`Fabric::arm`].
//! - Memory (`mr.rs`, `sys.rs`): registrations are this fabric's protection domain; all
//!   raw copies live in `sys.rs`, each bounds-checked against a registration first.
//!
//! Provider-specific behaviour (beyond what the trait's module docs ask of every
//! provider):
//! - the passive side reports `Established` when the connector confirmed (RTU byte) or
//!   its first frame arrived; it may post before that. The active side may post sends
//!   while connecting: they go out once established. If the connector goes away before
//!   confirming, the passive side gets `Disconnected` (with flushes) for that QP;
//! - `Rejected` (refused, nobody listening, listener gone, backlog full) comes after the
//!   flushes of whatever was posted on the QP; no `Disconnected` follows. A local
//!   `disconnect` of a connecting QP gives `Disconnected`;
//! - flush completions are queued in the same poll that queues `Disconnected`; a caller
//!   that polls the CM queue first sees the event before collecting them;
//! - `release` of a QP that is still up disconnects it first, flushing its work, but
//!   reports no `Disconnected`;
//! - unsignaled Sends/Writes hold their send-queue slot until a later Ack or Read
//!   response covers them (they ask for an Ack themselves once the queue is half full);
//!   successful Send/Write completions carry the bytes sent in `byte_len`;
//! - a Send-With-Invalidate naming an rkey unknown at the receiver fails the Receive
//!   with `LocalProtection` and the Send with `RemoteInvalidRequest`; a Receive whose
//!   buffer was deregistered meanwhile fails with `LocalProtection` (the Send: `Fatal`);
//! - a lost frame (fault injection only) is detected by the responder at the next
//!   request (`Fatal` for the lost one) or by the initiator at the next Read-response
//!   chunk; there is no retransmission and no timeout;
//! - `register` refuses REMOTE_WRITE without LOCAL_WRITE, as `ibv_reg_mr` does;
//! - negotiated Read depth: `max(1, min(our initiator_depth, peer's responder_resources))`
//!   (a peer's 0 thus means 1 here); the responder enforces the same number and breaks a
//!   connection whose peer exceeds it;
//! - any local process may connect (as any host may reach a NIC); what it sends is
//!   checked: the segment must be a sealed memfd of the announced size, frames and ring
//!   positions are validated, and a violation ends that connection only.

mod cm;
mod conn;
mod faults;
mod mr;
mod qp;
mod ring;
mod sys;
mod wire;

#[cfg(test)]
mod tests;

pub use faults::{Faults, FrameKind, SoftStats};

use super::{CmEvent, Completion, Fabric, Mr, PostError, Qp, QpCaps, SendWr, Sge};
use cm::SharedListener;
use conn::{Conn, State, Verdict};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use mr::MrTable;
use qp::{Ctx, Fail, QpEngine};
use ring::{segment_len, valid_ring_size, Link};
use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};
use sys::Shm;
use wire::{ConnectMsg, REQ_LEN};

/// Polls look at the sockets (one `epoll_wait`) when this long passed since the last look.
pub const SOCKET_CHECK_INTERVAL: Duration = Duration::from_micros(50);
/// Idle polls between two clock reads for [`SOCKET_CHECK_INTERVAL`].
pub const IDLE_CLOCK_EVERY: u32 = 16;
/// Polls that found work between two clock reads.
pub const BUSY_CLOCK_EVERY: u32 = 64;
/// Connections (and pending requests) one fabric can hold.
pub const MAX_CONNECTIONS: usize = 1 << 16;
const LISTENER_TOKEN: usize = 1 << 20;

/// Provider settings.
#[derive(Debug, Clone)]
pub struct SoftOptions {
    /// Bytes of each direction's ring on connections this fabric initiates (a power of
    /// two, 4 KiB to 1 GiB). The acceptor uses the connector's choice.
    pub ring_bytes: u64,
    /// Largest payload of one frame (bigger transfers are split; clamped to a quarter
    /// of the ring).
    pub max_frame_payload: u64,
    /// The address this fabric gives as its own in connect requests (`ConnRequest::peer`,
    /// with a per-connection pseudo port).
    pub local_ip: IpAddr,
}

impl Default for SoftOptions {
    fn default() -> Self {
        SoftOptions {
            ring_bytes: 4 << 20,
            max_frame_payload: 64 << 10,
            local_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
        }
    }
}

struct Slot {
    gen: u16,
    conn: Option<Conn>,
}

/// One reactor's soft RDMA device. See the module docs.
pub struct SoftFabric {
    opts: SoftOptions,
    mrs: MrTable,
    poll: Poll,
    events: Option<Events>,
    listeners: Vec<(SocketAddr, Arc<SharedListener>)>,
    slots: Vec<Slot>,
    free: Vec<usize>,
    cq: VecDeque<Completion>,
    cm: VecDeque<CmEvent>,
    stats: SoftStats,
    armed: bool,
    /// Polls since the clock was last read (the socket look is time-based).
    since_clock: u32,
    last_check: Instant,
}

/// Frame payload limit on a ring of `ring` bytes.
fn max_payload(opts: &SoftOptions, ring: u64) -> u64 {
    (opts.max_frame_payload.min(ring / 4) & !7).max(8)
}

fn check_caps(caps: &QpCaps) -> io::Result<()> {
    let ok = (1..=65536).contains(&caps.max_send_wr)
        && (1..=65536).contains(&caps.max_recv_wr)
        && (1..=64).contains(&caps.max_sge);
    if ok {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "queue pair caps out of range",
        ))
    }
}

impl SoftFabric {
    pub fn new() -> io::Result<SoftFabric> {
        SoftFabric::with_options(SoftOptions::default())
    }

    pub fn with_options(opts: SoftOptions) -> io::Result<SoftFabric> {
        if !valid_ring_size(opts.ring_bytes) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "ring_bytes must be a power of two in 4 KiB..=1 GiB",
            ));
        }
        Ok(SoftFabric {
            opts,
            mrs: MrTable::default(),
            poll: Poll::new()?,
            events: Some(Events::with_capacity(256)),
            listeners: Vec::new(),
            slots: Vec::new(),
            free: Vec::new(),
            cq: VecDeque::with_capacity(1024),
            cm: VecDeque::new(),
            stats: SoftStats::default(),
            armed: false,
            since_clock: 0,
            last_check: Instant::now(),
        })
    }

    /// Fault injection for `qp` (None if there is no such QP).
    pub fn faults(&mut self, qp: Qp) -> Option<&mut Faults> {
        let idx = self.find(qp.0)?;
        Some(&mut self.slots[idx].conn.as_mut()?.eng.as_mut()?.faults)
    }

    /// Counters over all connections of this fabric.
    pub fn stats(&self) -> SoftStats {
        self.stats
    }

    fn find(&self, id: u32) -> Option<usize> {
        let idx = (id & 0xffff) as usize;
        let slot = self.slots.get(idx)?;
        (slot.gen == (id >> 16) as u16 && slot.conn.is_some()).then_some(idx)
    }

    fn alloc(&mut self) -> io::Result<(usize, u32)> {
        let idx = match self.free.pop() {
            Some(i) => i,
            None if self.slots.len() < MAX_CONNECTIONS => {
                self.slots.push(Slot { gen: 0, conn: None });
                self.slots.len() - 1
            }
            None => return Err(io::Error::other("soft fabric: too many connections")),
        };
        let slot = &mut self.slots[idx];
        slot.gen = slot.gen.wrapping_add(1).max(1);
        Ok((idx, u32::from(slot.gen) << 16 | idx as u32))
    }

    fn free_slot(&mut self, idx: usize) {
        if self.slots[idx].conn.take().is_some() {
            self.free.push(idx);
        }
    }

    /// Runs `f` on the live connection `id` with the fabric's report context.
    fn with_conn<R>(&mut self, id: u32, f: impl FnOnce(&mut Conn, &mut Ctx) -> R) -> Option<R> {
        let idx = self.find(id)?;
        let conn = self.slots[idx].conn.as_mut()?;
        let mut ctx = Ctx {
            mrs: &mut self.mrs,
            cq: &mut self.cq,
            cm: &mut self.cm,
            stats: &mut self.stats,
        };
        Some(f(conn, &mut ctx))
    }

    /// One progress pass over every connection, plus the periodic socket look.
    fn progress(&mut self) -> usize {
        if self.armed {
            self.armed = false;
            for c in self.slots.iter().filter_map(|s| s.conn.as_ref()) {
                c.disarm();
            }
        }
        let mut ctx = Ctx {
            mrs: &mut self.mrs,
            cq: &mut self.cq,
            cm: &mut self.cm,
            stats: &mut self.stats,
        };
        let mut work = 0;
        for c in self.slots.iter_mut().filter_map(|s| s.conn.as_mut()) {
            work += c.pump(&mut ctx);
        }
        // Reading the clock is not free either (a VM may trap it): only every so often.
        self.since_clock += 1;
        let every = if work == 0 {
            IDLE_CLOCK_EVERY
        } else {
            BUSY_CLOCK_EVERY
        };
        if self.since_clock >= every {
            self.since_clock = 0;
            if self.last_check.elapsed() >= SOCKET_CHECK_INTERVAL {
                work += self.check_sockets();
            }
        }
        work
    }

    /// Handles socket readiness: new connections, handshakes, doorbells, peer exits.
    fn check_sockets(&mut self) -> usize {
        self.last_check = Instant::now();
        let Some(mut events) = self.events.take() else {
            return 0;
        };
        if let Err(e) = self.poll.poll(&mut events, Some(Duration::ZERO)) {
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::warn!(error = %e, "soft fabric: epoll failed");
            }
        }
        let mut n = 0;
        for ev in events.iter() {
            n += 1;
            match ev.token().0 {
                t if t >= LISTENER_TOKEN => self.accept_incoming(t - LISTENER_TOKEN),
                idx => self.on_readable(idx),
            }
        }
        self.events = Some(events);
        n
    }

    fn accept_incoming(&mut self, li: usize) {
        let Some(l) = self.listeners.get(li).map(|(_, l)| l.clone()) else {
            return;
        };
        loop {
            match l.sock.accept() {
                Ok((mut stream, _)) => {
                    let Ok((idx, id)) = self.alloc() else {
                        tracing::warn!("soft fabric: connection table full, refusing a connection");
                        continue;
                    };
                    if self
                        .poll
                        .registry()
                        .register(&mut stream, Token(idx), Interest::READABLE)
                        .is_err()
                    {
                        self.free.push(idx);
                        continue;
                    }
                    self.slots[idx].conn = Some(Conn::new(id, State::Incoming, Some(stream)));
                    self.on_readable(idx);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    tracing::warn!(error = %e, "soft fabric: accept failed");
                    return;
                }
            }
        }
    }

    fn on_readable(&mut self, idx: usize) {
        let Some(conn) = self.slots.get_mut(idx).and_then(|s| s.conn.as_mut()) else {
            return;
        };
        let mut ctx = Ctx {
            mrs: &mut self.mrs,
            cq: &mut self.cq,
            cm: &mut self.cm,
            stats: &mut self.stats,
        };
        if conn.on_readable(&mut ctx) == Verdict::Free {
            self.free_slot(idx);
        }
    }

    /// A pending connection request by id, if it is still waiting for an answer.
    fn request_slot(&self, req: u64) -> Option<usize> {
        let id = u32::try_from(req).ok()?;
        let idx = self.find(id)?;
        let c = self.slots[idx].conn.as_ref()?;
        (c.state == State::Requested).then_some(idx)
    }
}

impl Fabric for SoftFabric {
    fn name(&self) -> &'static str {
        "soft"
    }

    unsafe fn register(&mut self, addr: *mut u8, len: usize, access: u32) -> io::Result<Mr> {
        self.mrs.register(addr as u64, len as u64, access)
    }

    fn deregister(&mut self, mr: &Mr) {
        self.mrs.deregister(mr.lkey);
    }

    fn listen(&mut self, addr: SocketAddr) -> io::Result<()> {
        if self.listeners.iter().any(|(a, _)| *a == addr) {
            return Ok(());
        }
        let l = cm::listen_shared(addr)?;
        let token = Token(LISTENER_TOKEN + self.listeners.len());
        let fd = l.sock.as_raw_fd();
        self.poll
            .registry()
            .register(&mut SourceFd(&fd), token, Interest::READABLE)?;
        self.listeners.push((addr, l));
        Ok(())
    }

    fn accept(&mut self, req: u64, caps: &QpCaps, private_data: &[u8]) -> io::Result<Qp> {
        check_caps(caps)?;
        let not_found = || io::Error::new(io::ErrorKind::NotFound, "no such connection request");
        let idx = self.request_slot(req).ok_or_else(not_found)?;
        let conn = self.slots[idx].conn.as_mut().ok_or_else(not_found)?;
        let ring = conn.req.map_or(0, |r| r.ring_bytes);
        let qp = conn.qp();
        let eng = QpEngine::new(qp, *caps, max_payload(&self.opts, ring));
        match conn.answer(Some((eng, private_data))) {
            Ok(()) => Ok(qp),
            Err(e) => {
                self.free_slot(idx);
                Err(e)
            }
        }
    }

    fn reject(&mut self, req: u64) {
        if let Some(idx) = self.request_slot(req) {
            if let Some(c) = self.slots[idx].conn.as_mut() {
                let _ = c.answer(None);
            }
            self.free_slot(idx);
        }
    }

    fn connect(&mut self, addr: SocketAddr, caps: &QpCaps, private_data: &[u8]) -> io::Result<Qp> {
        check_caps(caps)?;
        let ring = self.opts.ring_bytes;
        let mut shm = Shm::create(segment_len(ring))?;
        let (idx, id) = self.alloc()?;
        let mut conn = Conn::new(id, State::Connecting, None);
        conn.eng = Some(QpEngine::new(Qp(id), *caps, max_payload(&self.opts, ring)));
        let msg = ConnectMsg {
            ring_bytes: ring,
            initiator_depth: caps.initiator_depth,
            responder_resources: caps.responder_resources,
            peer: SocketAddr::new(self.opts.local_ip, cm::pseudo_port()),
            private_data: super::PrivateData::new(private_data),
        };
        // Failures to reach a listener become `Rejected` at the next poll, so that
        // Receives posted meanwhile come back flushed first.
        match cm::connect(addr) {
            Ok(mut stream) => {
                let memfd = shm.fd().unwrap_or(-1);
                let sent = sys::send_with_fd(stream.as_raw_fd(), &msg.encode(), memfd);
                let registered =
                    self.poll
                        .registry()
                        .register(&mut stream, Token(idx), Interest::READABLE);
                if matches!(sent, Ok(REQ_LEN)) && registered.is_ok() {
                    conn.sock = Some(stream);
                } else {
                    conn.connect_failed = true;
                }
            }
            Err(_) => conn.connect_failed = true,
        }
        shm.close_fd();
        conn.link = Some(Link::new(shm, ring, true));
        self.slots[idx].conn = Some(conn);
        Ok(Qp(id))
    }

    fn disconnect(&mut self, qp: Qp) {
        self.with_conn(qp.0, |c, ctx| {
            if c.postable() {
                c.fail(Fail::local("local disconnect"), ctx, true);
            }
        });
    }

    fn release(&mut self, qp: Qp) {
        let Some(idx) = self.find(qp.0) else {
            return;
        };
        self.with_conn(qp.0, |c, ctx| {
            if c.postable() {
                c.fail(Fail::local("released while connected"), ctx, false);
            }
        });
        self.free_slot(idx);
    }

    fn post_recv(&mut self, qp: Qp, wr_id: u64, sge: Sge) -> Result<(), PostError> {
        self.with_conn(qp.0, |c, ctx| {
            if !c.postable() {
                return Err(PostError::NotConnected);
            }
            let eng = c.eng.as_mut().ok_or(PostError::NotConnected)?;
            eng.post_recv(wr_id, sge, ctx.mrs)
        })
        .unwrap_or(Err(PostError::NotConnected))
    }

    fn post_send(&mut self, qp: Qp, wrs: &[SendWr]) -> Result<(), PostError> {
        self.with_conn(qp.0, |c, ctx| {
            if !c.postable() {
                return Err(PostError::NotConnected);
            }
            c.post_send(wrs, ctx)
        })
        .unwrap_or(Err(PostError::NotConnected))
    }

    fn poll_cq(&mut self, out: &mut [Completion]) -> usize {
        self.progress();
        let n = out.len().min(self.cq.len());
        for (slot, c) in out.iter_mut().zip(self.cq.drain(..n)) {
            *slot = c;
        }
        n
    }

    fn poll_cm(&mut self) -> Option<CmEvent> {
        if self.cm.is_empty() {
            self.progress();
        }
        self.cm.pop_front()
    }

    fn wait_fd(&self) -> Option<RawFd> {
        Some(self.poll.as_raw_fd())
    }

    fn arm(&mut self) -> bool {
        // Consume readiness first (doorbells, exits, new connections): the reactor's
        // wait must only return for new events.
        self.check_sockets();
        if !self.cq.is_empty() || !self.cm.is_empty() {
            return false;
        }
        let mut pending = false;
        for c in self.slots.iter_mut().filter_map(|s| s.conn.as_mut()) {
            pending |= c.arm();
        }
        self.armed = true;
        if pending {
            self.progress();
            return false;
        }
        true
    }
}
