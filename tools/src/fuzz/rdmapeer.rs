//! A hand-driven RPC-over-RDMA requester for campaign `rdma`: one `soft` connection
//! (its own fabric instance, so what one peer does not poll stays unpolled), one
//! registered region with the Receives first and chunk areas behind, and raw sends of
//! whatever header bytes the generator built. Polling this peer's fabric is also what
//! serves the gateway's RDMA Reads and Writes into this region (the soft provider does
//! the "remote NIC" work when the target side polls), so a peer that is never polled
//! is one that never answers.

use engine::fabric::soft::SoftFabric;
use engine::fabric::{
    access, CmEvent, Completion, Fabric, Mr, Op, PostError, Qp, QpCaps, SendWr, Sge, WcOpcode,
    WcStatus,
};
use engine::rpcrdma::privdata;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Size of each posted Receive: more than the gateway ever sends inline (its
/// `rdma.inline_size` is 4 KiB; a peer that advertises more still gets at most that).
pub const RECV: usize = 8 * 1024;
pub const NRECV: usize = 32;
/// The chunk areas behind the Receives: where read chunks are pulled from, where write
/// chunks and reply chunks are written to, and the staging area of Sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Area {
    /// Data the gateway pulls (WRITE data, Long calls): 1 MiB + 8 KiB.
    Source,
    /// READ data the gateway pushes (write chunks): 1 MiB + 8 KiB.
    Sink,
    /// Reply chunks: 256 KiB.
    Reply,
    /// Staging of our own Sends: [`STAGE_SLOTS`] slots of [`MAX_SEND`] bytes, used in
    /// turn, so a Send's bytes stay untouched until long after it went out (the
    /// provider may copy them only when it pushes, as a NIC does).
    Stage,
}
const AREAS: [(Area, usize); 4] = [
    (Area::Source, (1 << 20) + 8192),
    (Area::Sink, (1 << 20) + 8192),
    (Area::Reply, 256 << 10),
    (Area::Stage, STAGE_SLOTS * MAX_SEND),
];
/// Largest message sent (4 times the gateway's 4 KiB Receives: longer ones only need to
/// be too long).
pub const MAX_SEND: usize = 16 << 10;
/// More than the messages ever outstanding at once (a burst is at most the credits
/// granted + 8, plus the probe).
const STAGE_SLOTS: usize = 64;

fn area_at(a: Area) -> (usize, usize) {
    let mut at = NRECV * RECV;
    for (k, len) in AREAS {
        if k == a {
            return (at, len);
        }
        at += len;
    }
    unreachable!("every area is listed")
}

fn region_len() -> usize {
    NRECV * RECV + AREAS.iter().map(|a| a.1).sum::<usize>()
}

/// What waiting on a peer produced.
#[derive(Debug)]
pub enum Event {
    Msg(Vec<u8>),
    /// The gateway (or the fabric) ended the connection.
    Closed,
    Timeout,
}

pub struct Peer {
    f: SoftFabric,
    qp: Qp,
    mem: Vec<u8>,
    pub mr: Mr,
    /// The registration was withdrawn (rkey revoked): nothing may be posted from it.
    pub revoked: bool,
    pub closed: bool,
    /// Inline threshold the gateway accepted from us (its private data).
    pub server_recv: usize,
    inbox: VecDeque<Vec<u8>>,
    /// The next staging slot.
    stage: usize,
    /// Failed completions of our Sends (ReceiverNotReady: the gateway had no Receive
    /// posted; Flushed: the connection went), drained by the campaign.
    pub send_errors: Vec<WcStatus>,
}

impl Peer {
    /// Connects with `private` as the CM private data (RFC 8797 or hostile bytes).
    /// `Err` if the gateway rejects it or does not answer within `wait`.
    pub fn connect(addr: SocketAddr, private: &[u8], wait: Duration) -> Result<Peer, String> {
        let mut f = SoftFabric::new().map_err(|e| e.to_string())?;
        let len = region_len();
        let mut mem = vec![0u8; len];
        // SAFETY: `mem`'s heap block lives as long as the Peer, hence as long as the
        // fabric that holds the registration (fields drop in order: the fabric first),
        // and is never reallocated (its length never changes).
        let mr = unsafe {
            f.register(
                mem.as_mut_ptr(),
                len,
                access::LOCAL_WRITE | access::REMOTE_READ | access::REMOTE_WRITE,
            )
            .map_err(|e| e.to_string())?
        };
        let qp = f
            .connect(addr, &QpCaps::default(), private)
            .map_err(|e| e.to_string())?;
        let mut p = Peer {
            f,
            qp,
            mem,
            mr,
            revoked: false,
            closed: false,
            server_recv: privdata::PrivData::ABSENT.recv_size,
            inbox: VecDeque::new(),
            stage: 0,
            send_errors: Vec::new(),
        };
        for i in 0..NRECV {
            p.post_recv(i);
        }
        let deadline = Instant::now() + wait;
        loop {
            match p.f.poll_cm() {
                Some(CmEvent::Established { private_data, .. }) => {
                    p.server_recv = privdata::decode(private_data.as_bytes()).recv_size;
                    return Ok(p);
                }
                Some(CmEvent::Rejected { .. }) => return Err("rejected".into()),
                Some(CmEvent::Disconnected { .. }) => return Err("disconnected".into()),
                Some(_) => {}
                None if Instant::now() > deadline => {
                    return Err(format!("no Established within {wait:?}"))
                }
                None => std::thread::yield_now(),
            }
        }
    }

    fn post_recv(&mut self, i: usize) {
        if self.revoked {
            return;
        }
        let sge = Sge {
            addr: self.mr.addr + (i * RECV) as u64,
            len: RECV as u32,
            lkey: self.mr.lkey,
        };
        let _ = self.f.post_recv(self.qp, i as u64, sge);
    }

    /// Remote address and length of an area (what a segment names).
    pub fn area(&self, a: Area) -> (u64, usize) {
        let (at, len) = area_at(a);
        (self.mr.addr + at as u64, len)
    }

    /// Copies `bytes` into area `a` at `off` (clipped to the area).
    pub fn fill(&mut self, a: Area, off: usize, bytes: &[u8]) {
        let (at, len) = area_at(a);
        let off = off.min(len);
        let n = bytes.len().min(len - off);
        self.mem[at + off..at + off + n].copy_from_slice(&bytes[..n]);
    }

    /// The bytes of area `a` from `off`, `len` long (clipped).
    pub fn read(&self, a: Area, off: usize, n: usize) -> &[u8] {
        let (at, len) = area_at(a);
        let off = off.min(len);
        &self.mem[at + off..at + off + n.min(len - off)]
    }

    /// The bytes at remote address `addr` (as a segment names it), `n` long, if they
    /// lie inside the registered region: a hostile but valid segment may point the
    /// gateway anywhere in it.
    pub fn read_at(&self, addr: u64, n: usize) -> Option<&[u8]> {
        let off = usize::try_from(addr.checked_sub(self.mr.addr)?).ok()?;
        self.mem.get(off..off.checked_add(n)?)
    }

    /// Posts one Send of `bytes` (staged in the next slot of [`Area::Stage`], cut at
    /// [`MAX_SEND`]); `false` if it could not be posted (connection gone, memory
    /// revoked).
    pub fn send(&mut self, bytes: &[u8]) -> bool {
        if self.closed || self.revoked {
            return false;
        }
        let n = bytes.len().min(MAX_SEND);
        let off = self.stage * MAX_SEND;
        self.stage = (self.stage + 1) % STAGE_SLOTS;
        self.fill(Area::Stage, off, &bytes[..n]);
        let (addr, _) = self.area(Area::Stage);
        let sge = Sge {
            addr: addr + off as u64,
            len: n as u32,
            lkey: self.mr.lkey,
        };
        // Signaled, so a completion frees the send-queue slot at once (unsignaled
        // Sends hold theirs until an Ack covers them).
        let wr = SendWr {
            wr_id: u64::MAX,
            op: Op::Send,
            sges: &[sge],
            signaled: true,
        };
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            match self.f.post_send(self.qp, &[wr]) {
                Ok(()) => return true,
                Err(PostError::QueueFull) if Instant::now() < deadline && !self.closed => {
                    self.poll_once();
                    std::thread::yield_now();
                }
                Err(_) => return false,
            }
        }
    }

    /// Deregisters the region: every rkey the gateway was given is now invalid, and
    /// its RDMA Reads and Writes must fail on the peer side (RFC 8166 §3.4.5: an
    /// invalidated handle), not in the gateway's memory.
    pub fn revoke(&mut self) {
        if !self.revoked {
            let mr = self.mr;
            self.f.deregister(&mr);
            self.revoked = true;
        }
    }

    /// Polls for up to `wait`: the next message, the end of the connection, or nothing.
    pub fn recv(&mut self, wait: Duration) -> Event {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(m) = self.inbox.pop_front() {
                return Event::Msg(m);
            }
            let n = self.poll_once();
            if let Some(m) = self.inbox.pop_front() {
                return Event::Msg(m);
            }
            if self.closed {
                return Event::Closed;
            }
            if Instant::now() > deadline {
                return Event::Timeout;
            }
            if n == 0 {
                std::thread::yield_now();
            }
        }
    }

    /// One poll of the CM and completion queues; received messages go to the inbox.
    /// Returns the completions seen.
    fn poll_once(&mut self) -> usize {
        let mut wc = [Completion {
            wr_id: 0,
            qp: self.qp,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: 0,
            invalidated: None,
            vendor_err: 0,
        }; 32];
        {
            while let Some(ev) = self.f.poll_cm() {
                if let CmEvent::Disconnected { .. } = ev {
                    self.closed = true;
                }
            }
            let n = self.f.poll_cq(&mut wc);
            for c in &wc[..n] {
                let i = c.wr_id as usize;
                if c.opcode != WcOpcode::Recv || i >= NRECV {
                    if c.status != WcStatus::Success {
                        self.send_errors.push(c.status);
                    }
                    continue;
                }
                if c.status == WcStatus::Success {
                    let len = (c.byte_len as usize).min(RECV);
                    let at = i * RECV;
                    self.inbox.push_back(self.mem[at..at + len].to_vec());
                    self.post_recv(i);
                } else if c.status != WcStatus::Flushed {
                    // A Receive that failed breaks the connection (the provider
                    // disconnects it); keep polling for the event.
                    self.send_errors.push(c.status);
                }
            }
            n
        }
    }

    /// Disconnects without waiting for anything (outstanding Reads are flushed).
    pub fn drop_now(mut self) {
        self.f.disconnect(self.qp);
    }
}
