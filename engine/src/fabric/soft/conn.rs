//! One connection: its Unix socket (handshake, doorbells, liveness), its shared rings
//! and its queue-pair engine, and the state machine tying them together.
//!
//! Handshake: the connector creates the segment, connects, and sends a [`ConnectMsg`]
//! with the memfd attached; the acceptor maps it (after checking size and seals) and
//! reports `ConnectRequest`. `accept` answers with an [`AcceptMsg`]; the connector
//! reports `Established` and sends the RTU byte; the acceptor reports `Established` on
//! that byte, or on the first frame from the connector, whichever it sees first. After
//! that the socket carries only doorbell bytes, and its end of stream (close, exit,
//! crash) is how either side learns the other is gone.

use super::qp::{Ctx, Fail, QpEngine};
use super::ring::{segment_len, valid_ring_size, Link};
use super::sys::{self, Shm};
use super::wire::{self, AcceptMsg, ConnectMsg, Hdr, Kind, ACC_LEN, BELL, REQ_LEN, RTU};
use crate::fabric::{CmEvent, ConnRequest, PostError, PrivateData, Qp, SendWr};
use mio::net::UnixStream;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd};

/// Frames taken from one connection per poll pass (fairness between connections).
const INPUT_BUDGET: usize = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Passive: socket accepted, connect request not complete yet (no QP, no event).
    Incoming,
    /// Passive: `ConnectRequest` reported; waiting for `accept`/`reject`.
    Requested,
    /// Active: request sent, waiting for the answer. Work may be posted, not pushed.
    Connecting,
    /// Passive: accepted, waiting for the connector's RTU (frames may flow already).
    AwaitRtu,
    Established,
    /// Flushed (or never became a QP); waiting for `release`.
    Dead,
}

/// What the fabric should do with a connection after an event.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Keep,
    /// Nothing user-visible refers to it: free the slot.
    Free,
}

pub struct Conn {
    /// The `Qp`/request id (slot index and generation).
    pub id: u32,
    pub state: State,
    pub sock: Option<UnixStream>,
    pub link: Option<Link>,
    pub eng: Option<QpEngine>,
    /// Passive: the connector's request.
    pub req: Option<ConnectMsg>,
    /// Active: connecting failed before anything was sent (reported at the next poll).
    pub connect_failed: bool,
    /// Passive, `Requested`: the connector went away before our answer.
    pub peer_gone: bool,
    hs: [u8; REQ_LEN],
    hs_len: usize,
    hs_fd: Option<OwnedFd>,
}

fn max1(a: u8, b: u8) -> u32 {
    u32::from(a.min(b)).max(1)
}

impl Conn {
    pub fn new(id: u32, state: State, sock: Option<UnixStream>) -> Conn {
        Conn {
            id,
            state,
            sock,
            link: None,
            eng: None,
            req: None,
            connect_failed: false,
            peer_gone: false,
            hs: [0; REQ_LEN],
            hs_len: 0,
            hs_fd: None,
        }
    }

    pub fn qp(&self) -> Qp {
        Qp(self.id)
    }

    /// Whether work requests may be posted (they are pushed once established).
    pub fn postable(&self) -> bool {
        matches!(
            self.state,
            State::Connecting | State::AwaitRtu | State::Established
        )
    }

    fn pumping(&self) -> bool {
        matches!(self.state, State::AwaitRtu | State::Established)
    }

    /// One poll pass over this connection: input, then output, then doorbell.
    pub fn pump(&mut self, ctx: &mut Ctx) -> usize {
        if self.state == State::Connecting && self.connect_failed {
            self.rejected(ctx);
            return 1;
        }
        if !self.pumping() {
            return 0;
        }
        let mut work = 0;
        if self.state == State::AwaitRtu && self.link.as_ref().is_some_and(Link::rx_pending) {
            self.established_passive(ctx);
            work += 1;
        }
        let (Some(link), Some(eng)) = (self.link.as_mut(), self.eng.as_mut()) else {
            return work;
        };
        let r = eng
            .pump_in(link, ctx, INPUT_BUDGET)
            .and_then(|i| eng.push_out(link, ctx).map(|o| i + o));
        match r {
            Ok(n) => {
                self.wake_peer(ctx);
                work + n
            }
            Err(f) => {
                self.fail(f, ctx, true);
                work + 1
            }
        }
    }

    /// After a pass that moved frames or space: ring the peer's doorbell if it sleeps.
    pub fn wake_peer(&mut self, ctx: &mut Ctx) {
        let Some(link) = self.link.as_mut() else {
            return;
        };
        if !link.peer_needs_wake() {
            return;
        }
        if let Some(s) = &self.sock {
            // A full socket buffer means unread doorbells already: the peer will wake.
            if sys::send_nosignal(s.as_raw_fd(), &[BELL]).is_ok() {
                ctx.stats.doorbells += 1;
            }
        }
    }

    /// Posts and pushes a chain at once (the doorbell of a real NIC).
    pub fn post_send(&mut self, wrs: &[SendWr], ctx: &mut Ctx) -> Result<(), PostError> {
        let eng = self.eng.as_mut().ok_or(PostError::NotConnected)?;
        eng.post_send(wrs, ctx.mrs)?;
        if self.pumping() {
            if let (Some(link), Some(eng)) = (self.link.as_mut(), self.eng.as_mut()) {
                match eng.push_out(link, ctx) {
                    Ok(_) => self.wake_peer(ctx),
                    Err(f) => self.fail(f, ctx, true),
                }
            }
        }
        Ok(())
    }

    /// Takes the connection down: the final Nak (if any) goes out, the socket closes (the
    /// peer sees end of stream), every outstanding work request completes, and
    /// `Disconnected` follows if `notify`.
    pub fn fail(&mut self, f: Fail, ctx: &mut Ctx, notify: bool) {
        if f.protocol {
            tracing::warn!(
                qp = self.id,
                reason = f.reason,
                "soft fabric: peer broke the protocol, disconnecting"
            );
            ctx.stats.protocol_errors += 1;
        } else {
            tracing::debug!(
                qp = self.id,
                reason = f.reason,
                "soft fabric: disconnecting"
            );
        }
        if let (Some((seq, status)), Some(link)) = (f.nak, self.link.as_mut()) {
            let mut h = Hdr::new(Kind::Nak, seq);
            h.status = wire::status_code(status);
            link.tx_push_final(&h.encode());
        }
        self.link = None;
        self.sock = None;
        self.state = State::Dead;
        if let Some(eng) = self.eng.as_mut() {
            eng.flush(ctx);
        }
        ctx.stats.disconnects += 1;
        if notify {
            ctx.cm.push_back(CmEvent::Disconnected { qp: self.qp() });
        }
    }

    /// Active side: refused, unreachable, or the listener went away before answering.
    fn rejected(&mut self, ctx: &mut Ctx) {
        self.link = None;
        self.sock = None;
        self.state = State::Dead;
        if let Some(eng) = self.eng.as_mut() {
            eng.flush(ctx);
        }
        ctx.cm.push_back(CmEvent::Rejected { qp: self.qp() });
    }

    fn established_passive(&mut self, ctx: &mut Ctx) {
        self.state = State::Established;
        let depth = self.eng.as_ref().map_or(1, |e| e.depth());
        ctx.cm.push_back(CmEvent::Established {
            qp: self.qp(),
            private_data: PrivateData::new(&[]),
            initiator_depth: depth.min(255) as u8,
        });
    }

    /// The socket is readable (edge-triggered: read until it would block).
    pub fn on_readable(&mut self, ctx: &mut Ctx) -> Verdict {
        loop {
            let before = self.state;
            let verdict = match self.state {
                State::Incoming => self.read_request(ctx),
                State::Requested => {
                    // The connector may only wait here; anything else ends the request.
                    if !matches!(self.drain_socket(), Ok(None)) {
                        self.peer_gone = true;
                        self.sock = None;
                    }
                    return Verdict::Keep;
                }
                State::Connecting => self.read_accept(ctx),
                State::AwaitRtu | State::Established => self.read_doorbells(ctx),
                State::Dead => return Verdict::Keep,
            };
            if verdict == Verdict::Free || self.state == before {
                return verdict;
            }
        }
    }

    /// Reads doorbell bytes until the socket would block, returning the first one.
    fn drain_socket(&mut self) -> Result<Option<u8>, Drain> {
        let Some(s) = self.sock.as_mut() else {
            return Err(Drain::Closed);
        };
        let mut first = None;
        let mut buf = [0u8; 64];
        // A peer rings at most once per flag we set (each `arm`), and we drain at every
        // arm: kilobytes of doorbells can only be a flood, which must not hold us here.
        for _ in 0..64 {
            match s.read(&mut buf) {
                Ok(0) => return Err(Drain::Closed),
                Ok(_) => first = first.or(Some(buf[0])),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(first),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(Drain::Closed),
            }
        }
        Err(Drain::Flood)
    }

    fn read_doorbells(&mut self, ctx: &mut Ctx) -> Verdict {
        match self.drain_socket() {
            Ok(first) => {
                if self.state == State::AwaitRtu {
                    match first {
                        Some(RTU) => self.established_passive(ctx),
                        Some(_) => self.fail(Fail::protocol("expected the RTU byte"), ctx, true),
                        None => {}
                    }
                }
            }
            Err(Drain::Closed) => self.peer_closed(ctx),
            Err(Drain::Flood) => self.fail(Fail::protocol("doorbell flood"), ctx, true),
        }
        Verdict::Keep
    }

    /// End of stream from the peer: take in what it published before going, then break.
    fn peer_closed(&mut self, ctx: &mut Ctx) {
        let mut f = Fail::local("peer closed the connection");
        if let (Some(link), Some(eng)) = (self.link.as_mut(), self.eng.as_mut()) {
            if let Err(e) = eng.pump_in(link, ctx, usize::MAX) {
                f = e;
            }
        }
        f.nak = None;
        self.fail(f, ctx, true);
    }

    /// Passive: accumulates the connect request and its memfd.
    fn read_request(&mut self, ctx: &mut Ctx) -> Verdict {
        let Some(s) = self.sock.as_ref() else {
            return Verdict::Free;
        };
        let fd = s.as_raw_fd();
        while self.hs_len < REQ_LEN {
            match sys::recv_with_fd(fd, &mut self.hs[self.hs_len..REQ_LEN]) {
                Ok((0, _)) => return Verdict::Free,
                Ok((n, passed)) => {
                    self.hs_len += n;
                    if passed.is_some() {
                        if self.hs_fd.is_some() {
                            return self.bad_request("two descriptors in a connect request");
                        }
                        self.hs_fd = passed;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Verdict::Keep,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Verdict::Free,
            }
        }
        let Some(msg) = ConnectMsg::decode(&self.hs) else {
            return self.bad_request("malformed connect request");
        };
        if !valid_ring_size(msg.ring_bytes) {
            return self.bad_request("connect request with a bad ring size");
        }
        let Some(fd) = self.hs_fd.take() else {
            return self.bad_request("connect request without a segment");
        };
        let shm = match Shm::open(fd, segment_len(msg.ring_bytes)) {
            Ok(shm) => shm,
            Err(_) => return self.bad_request("connect request with an unusable segment"),
        };
        self.link = Some(Link::new(shm, msg.ring_bytes, false));
        self.req = Some(msg);
        self.state = State::Requested;
        ctx.cm.push_back(CmEvent::ConnectRequest(ConnRequest {
            id: u64::from(self.id),
            peer: msg.peer,
            private_data: msg.private_data,
            initiator_depth: msg.initiator_depth,
            responder_resources: msg.responder_resources,
        }));
        Verdict::Keep
    }

    fn bad_request(&mut self, why: &'static str) -> Verdict {
        tracing::warn!(reason = why, "soft fabric: dropping a connection attempt");
        Verdict::Free
    }

    /// Active: reads the acceptor's answer.
    fn read_accept(&mut self, ctx: &mut Ctx) -> Verdict {
        let Some(s) = self.sock.as_mut() else {
            self.rejected(ctx);
            return Verdict::Keep;
        };
        while self.hs_len < ACC_LEN {
            match s.read(&mut self.hs[self.hs_len..ACC_LEN]) {
                Ok(0) => {
                    self.rejected(ctx);
                    return Verdict::Keep;
                }
                Ok(n) => self.hs_len += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Verdict::Keep,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.rejected(ctx);
                    return Verdict::Keep;
                }
            }
        }
        let mut b = [0u8; ACC_LEN];
        b.copy_from_slice(&self.hs[..ACC_LEN]);
        let answer = AcceptMsg::decode(&b);
        let Some(acc) = answer.filter(|a| a.accepted) else {
            if answer.is_none() {
                tracing::warn!(
                    qp = self.id,
                    "soft fabric: malformed accept, treating as a reject"
                );
            }
            self.rejected(ctx);
            return Verdict::Keep;
        };
        if sys::send_nosignal(s.as_raw_fd(), &[RTU]).is_err() {
            self.rejected(ctx);
            return Verdict::Keep;
        }
        let Some(eng) = self.eng.as_mut() else {
            self.rejected(ctx);
            return Verdict::Keep;
        };
        let caps = *eng.caps();
        let depth = max1(caps.initiator_depth, acc.responder_resources);
        eng.establish(depth, max1(acc.initiator_depth, caps.responder_resources));
        self.state = State::Established;
        ctx.cm.push_back(CmEvent::Established {
            qp: self.qp(),
            private_data: acc.private_data,
            initiator_depth: depth as u8,
        });
        // Work posted while connecting goes out now.
        if let (Some(link), Some(eng)) = (self.link.as_mut(), self.eng.as_mut()) {
            match eng.push_out(link, ctx) {
                Ok(_) => self.wake_peer(ctx),
                Err(f) => self.fail(f, ctx, true),
            }
        }
        Verdict::Keep
    }

    /// Passive: answers the request (accept with `eng`, or reject). Errors mean the
    /// connector is gone.
    pub fn answer(&mut self, accept: Option<(QpEngine, &[u8])>) -> io::Result<()> {
        let req = self.req.ok_or(io::ErrorKind::NotConnected)?;
        let Some(s) = self.sock.as_ref().filter(|_| !self.peer_gone) else {
            return Err(io::ErrorKind::ConnectionAborted.into());
        };
        let msg = match &accept {
            Some((eng, pd)) => AcceptMsg {
                accepted: true,
                initiator_depth: eng.caps().initiator_depth,
                responder_resources: eng.caps().responder_resources,
                private_data: PrivateData::new(pd),
            },
            None => AcceptMsg {
                accepted: false,
                initiator_depth: 0,
                responder_resources: 0,
                private_data: PrivateData::new(&[]),
            },
        };
        if sys::send_nosignal(s.as_raw_fd(), &msg.encode())? != ACC_LEN {
            return Err(io::ErrorKind::WriteZero.into());
        }
        if let Some((mut eng, _)) = accept {
            let caps = *eng.caps();
            let depth = max1(caps.initiator_depth, req.responder_resources);
            eng.establish(depth, max1(req.initiator_depth, caps.responder_resources));
            self.eng = Some(eng);
            self.state = State::AwaitRtu;
        }
        Ok(())
    }

    /// Flags this connection's rings for sleep; true if it has work after all.
    pub fn arm(&mut self) -> bool {
        if self.state == State::Connecting && self.connect_failed {
            return true;
        }
        if !self.pumping() {
            return false;
        }
        match (self.link.as_mut(), self.eng.as_ref()) {
            (Some(link), Some(eng)) => link.arm(eng.blocked) || eng.delayed_output(),
            _ => false,
        }
    }

    pub fn disarm(&self) {
        if let Some(link) = &self.link {
            link.disarm();
        }
    }
}

/// Why draining the socket stopped short.
enum Drain {
    /// End of stream or a socket error: the peer is gone.
    Closed,
    /// Far more bytes than doorbells can explain.
    Flood,
}
