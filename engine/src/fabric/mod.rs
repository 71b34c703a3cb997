//! The fabric: a narrow, verbs-shaped provider interface (docs/architecture.md §9).
//!
//! One [`Fabric`] value is one reactor's view of an RDMA device: its protection domain
//! (which a provider may share between the fabrics of one device: `verbs` opens one per
//! device), its memory registrations, one completion queue and the reliable-connected
//! queue pairs whose completions land there, plus connection management (listen, accept
//! and connect carrying private data, disconnect events). A reactor owns its `Fabric`
//! exclusively and polls it; nothing here blocks.
//!
//! Providers: [`soft`] (pure Rust, between threads and processes on one host, with
//! fault injection) and, behind the `rdma` feature, `verbs` (libibverbs + librdmacm).
//!
//! Semantics every provider keeps (the ones RPC-over-RDMA relies on):
//! - work requests on one QP execute in posting order; a Send posted after RDMA Writes
//!   is delivered after the written data is in place;
//! - a Send that finds no posted Receive, or a Receive too small for it, breaks the
//!   connection (both sides see errors, then `Disconnected`);
//! - an RDMA Read/Write whose rkey, bounds or access rights do not check out fails that
//!   work request with [`WcStatus::RemoteAccess`] and breaks the connection; it never
//!   touches other memory;
//! - after a disconnect every outstanding work request (posted Receives included)
//!   completes with [`WcStatus::Flushed`], exactly once, so every buffer comes back.

pub mod soft;
#[cfg(feature = "rdma")]
pub mod verbs;

use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;

/// A queue pair (connection) of one fabric instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Qp(pub u32);

/// Access rights of a memory registration (bit set, as in `ibv_access_flags`).
pub mod access {
    pub const LOCAL_WRITE: u32 = 1;
    pub const REMOTE_WRITE: u32 = 2;
    pub const REMOTE_READ: u32 = 4;
}

/// A registered memory region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mr {
    /// Start address in this process (also the RDMA offset we advertise: virtual
    /// addressing, as Linux does).
    pub addr: u64,
    pub len: u64,
    pub lkey: u32,
    pub rkey: u32,
    pub access: u32,
}

/// One gather/scatter element: local bytes of a registered region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    pub addr: u64,
    pub len: u32,
    pub lkey: u32,
}

impl Sge {
    /// The element covering `bytes`, which must lie inside `mr` (checked in debug).
    pub fn of(mr: &Mr, bytes: &[u8]) -> Sge {
        let addr = bytes.as_ptr() as u64;
        debug_assert!(addr >= mr.addr && addr + bytes.len() as u64 <= mr.addr + mr.len);
        Sge {
            addr,
            len: bytes.len() as u32,
            lkey: mr.lkey,
        }
    }
}

/// What a send-queue work request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Send,
    /// Send, and invalidate the peer's registration `rkey` (RFC 8797 remote invalidation).
    SendWithInv {
        rkey: u32,
    },
    /// Write the gathered local bytes to the peer's memory.
    Write {
        remote_addr: u64,
        rkey: u32,
    },
    /// Read from the peer's memory into the local scatter list.
    Read {
        remote_addr: u64,
        rkey: u32,
    },
}

/// A send-queue work request. A slice of them is posted as one chain (one doorbell).
#[derive(Debug, Clone, Copy)]
pub struct SendWr<'a> {
    pub wr_id: u64,
    pub op: Op,
    /// Gather list (Send/Write) or scatter list (Read).
    pub sges: &'a [Sge],
    /// Whether a completion is reported on success (errors are always reported).
    pub signaled: bool,
}

/// Completion status, after `ibv_wc_status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcStatus {
    Success,
    /// A received message was larger than the posted Receive.
    LocalLength,
    /// A local SGE named memory that is not registered (or lacks LOCAL_WRITE).
    LocalProtection,
    /// The peer refused an RDMA Read/Write: bad rkey, out of bounds or no access.
    RemoteAccess,
    /// The peer found the request invalid (for example a Send longer than its Receive).
    RemoteInvalidRequest,
    /// A Send found no Receive posted at the peer.
    ReceiverNotReady,
    /// Flushed because the queue pair went to the error state (disconnect).
    Flushed,
    /// Anything else: the connection is broken.
    Fatal,
}

/// Which work request completed. Defined only for a successful completion: verbs
/// leaves the opcode of an error completion undefined (a failed RDMA Read may read as
/// `Send`), so a consumer names a failed work request from its own `wr_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcOpcode {
    Send,
    Write,
    Read,
    Recv,
}

/// One completion-queue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    pub wr_id: u64,
    pub qp: Qp,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    /// Bytes received (Recv) or transferred (Read).
    pub byte_len: u32,
    /// For a Recv of a Send-With-Invalidate: the local rkey that is now invalid.
    pub invalidated: Option<u32>,
    /// The device's own error code for a failed work request (`ibv_wc.vendor_err`),
    /// for logs only; 0 on success and from providers that have none (`soft`).
    pub vendor_err: u32,
}

/// Queue-pair sizing asked for at accept/connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_sge: u32,
    /// RDMA Reads this side may have outstanding as initiator.
    pub initiator_depth: u8,
    /// RDMA Reads from the peer this side can serve at once.
    pub responder_resources: u8,
}

impl Default for QpCaps {
    fn default() -> Self {
        QpCaps {
            max_send_wr: 512,
            max_recv_wr: 256,
            max_sge: 8,
            initiator_depth: 16,
            responder_resources: 16,
        }
    }
}

/// Most private-data bytes carried by a connection request or accept (the RDMA-CM
/// limit for a REQ on InfiniBand is 56).
pub const MAX_PRIVATE_DATA: usize = 56;

/// Private data carried by a CM message, stored inline (no allocation).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PrivateData {
    len: u8,
    bytes: [u8; MAX_PRIVATE_DATA],
}

impl PrivateData {
    /// At most [`MAX_PRIVATE_DATA`] bytes are kept; the rest is cut off.
    pub fn new(data: &[u8]) -> PrivateData {
        let n = data.len().min(MAX_PRIVATE_DATA);
        let mut bytes = [0u8; MAX_PRIVATE_DATA];
        bytes[..n].copy_from_slice(&data[..n]);
        PrivateData {
            len: n as u8,
            bytes,
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

impl std::fmt::Debug for PrivateData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PrivateData({:02x?})", self.as_bytes())
    }
}

/// An incoming connection request, answered with [`Fabric::accept`] or [`Fabric::reject`].
#[derive(Debug, Clone, Copy)]
pub struct ConnRequest {
    /// Names the request in `accept`/`reject`.
    pub id: u64,
    pub peer: SocketAddr,
    pub private_data: PrivateData,
    /// RDMA Reads the peer wants to issue towards us at once.
    pub initiator_depth: u8,
    /// RDMA Reads the peer can serve for us at once (the Linux client sends 0 and
    /// means "as the device allows").
    pub responder_resources: u8,
}

/// Connection-management events.
#[derive(Debug, Clone, Copy)]
pub enum CmEvent {
    /// Passive side: a peer asks to connect.
    ConnectRequest(ConnRequest),
    /// Both sides: the queue pair is ready. For the active side `private_data` is what
    /// the peer sent with its accept; for the passive side it is empty.
    Established {
        qp: Qp,
        private_data: PrivateData,
        /// RDMA Reads this side may issue at once on this connection (negotiated).
        initiator_depth: u8,
    },
    /// Active side: the peer refused (or nobody listens).
    Rejected { qp: Qp },
    /// The connection is gone (peer disconnect, local disconnect, or a fatal error).
    /// Every outstanding work request of `qp` has been (or is being) flushed; after its
    /// flush completions are polled the QP may be released with [`Fabric::release`].
    Disconnected { qp: Qp },
}

/// Why a post failed (the work request was not queued; nothing completes for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostError {
    /// No such QP, or it is not connected (disconnected, being torn down).
    NotConnected,
    /// The queue is full (more than `max_send_wr`/`max_recv_wr` outstanding).
    QueueFull,
    /// More SGEs than `max_sge`, or an SGE outside every local registration.
    Invalid,
}

impl std::fmt::Display for PostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            PostError::NotConnected => "queue pair not connected",
            PostError::QueueFull => "work queue full",
            PostError::Invalid => "invalid work request",
        };
        f.write_str(s)
    }
}

impl std::error::Error for PostError {}

/// One reactor's RDMA device context. See the module docs for the semantics kept.
pub trait Fabric: Send {
    /// Provider name for logs ("soft", "verbs").
    fn name(&self) -> &'static str;

    /// Registers `len` bytes at `addr` with `access` rights in this context's
    /// protection domain; keys are unpredictable.
    ///
    /// # Safety
    /// The memory must stay valid (mapped, not freed) until [`Fabric::deregister`] or
    /// until the fabric is dropped; the provider reads and writes it on remote request.
    unsafe fn register(&mut self, addr: *mut u8, len: usize, access: u32) -> io::Result<Mr>;

    /// Removes a registration (a local invalidate). Idempotent: an rkey already
    /// invalidated by a peer's Send-With-Invalidate is fine.
    fn deregister(&mut self, mr: &Mr);

    /// Starts accepting connections on `addr` (provider-specific address space: for
    /// `soft` a host-local name derived from the address, for `verbs` the IP address).
    fn listen(&mut self, addr: SocketAddr) -> io::Result<()>;

    /// Accepts a request from [`CmEvent::ConnectRequest`], answering with
    /// `private_data`. `Established` follows.
    fn accept(&mut self, req: u64, caps: &QpCaps, private_data: &[u8]) -> io::Result<Qp>;

    /// Refuses a connection request.
    fn reject(&mut self, req: u64);

    /// Starts connecting to a listener, offering `private_data`. `Established` or
    /// `Rejected` follows. Receives may be posted on the returned QP at once.
    fn connect(&mut self, addr: SocketAddr, caps: &QpCaps, private_data: &[u8]) -> io::Result<Qp>;

    /// Starts tearing a connection down (flushes, then `Disconnected`).
    fn disconnect(&mut self, qp: Qp);

    /// Frees a QP after `Disconnected` and its flushes were polled.
    fn release(&mut self, qp: Qp);

    /// Posts one Receive into the local buffer `sge`.
    fn post_recv(&mut self, qp: Qp, wr_id: u64, sge: Sge) -> Result<(), PostError>;

    /// Posts a chain of send-queue work requests with one doorbell. On error nothing
    /// of the chain was posted.
    fn post_send(&mut self, qp: Qp, wrs: &[SendWr]) -> Result<(), PostError>;

    /// Moves up to `out.len()` completions into `out`; returns how many.
    fn poll_cq(&mut self, out: &mut [Completion]) -> usize;

    /// The next connection-management event, if any.
    fn poll_cm(&mut self) -> Option<CmEvent>;

    /// A file descriptor that becomes readable when completions or CM events may be
    /// pending, for adaptive idle (register it with the reactor's event wait). `None`
    /// if the provider can only be busy-polled.
    fn wait_fd(&self) -> Option<RawFd>;

    /// Call before waiting on [`Fabric::wait_fd`]: asks for a wake-up on the next
    /// event. Returns `false` if work is already pending (do not wait).
    fn arm(&mut self) -> bool;
}
