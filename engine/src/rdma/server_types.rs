//! The responder transport's public types: its options (`[rdma]` settings), the
//! names of calls and connections handed to the caller, callback results and the
//! counters. No behaviour beyond option defaults.

use super::*;

/// `[rdma]` settings the transport needs.
#[derive(Debug, Clone, Copy)]
pub struct ServerOptions {
    /// Credits granted per connection (Receives posted per connection) when the
    /// reactor's receive budget allows it (see `super::admit`).
    pub credits: u32,
    /// Fewest credits a connection is accepted with when buffers are short; below
    /// that it is refused.
    pub min_credits: u32,
    /// Inline threshold we advertise both ways (RFC 8797): our Receive buffer size and
    /// the largest Send we post.
    pub inline_size: usize,
    /// Advertise the R bit (we may reply with Send-With-Invalidate).
    pub remote_invalidate: bool,
    pub max_connections: usize,
    /// RDMA Reads we keep outstanding per connection (also bounded by the peer).
    pub read_depth: u8,
    pub limits: Limits,
    /// Largest reassembled call (clamped to the largest pool buffer).
    pub max_call: usize,
    /// A connection with RDMA Reads outstanding and none completed for this long is
    /// closed (a peer that stops answering Reads must not hold buffers forever).
    pub read_timeout: Duration,
    /// A connection with Sends (replies, callbacks) outstanding and none completed for
    /// this long is closed: a peer that never takes its replies must not keep its
    /// reply budget of buffers, and its connection, for ever (see `super::timeouts`).
    pub send_timeout: Duration,
    /// Reply bytes a connection may have in production or awaiting Send completion
    /// before its next calls wait, received, for its replies to complete. A call is
    /// charged the chunks it offers for its reply (write chunks plus reply chunk, at
    /// most the largest pool buffer): what its reply buffer may hold until its Send
    /// completes. Credits alone would let a peer that never completes its replies
    /// hold up to `credits` large buffers (Standards: a client must not pin shared
    /// buffers by reading nothing).
    pub max_reply_bytes: usize,
    /// While some allocation is starved, a connection whose outstanding Sends hold at
    /// least `RECLAIM_HELD` bytes and whose peer completed less than
    /// `RECLAIM_PROGRESS` bytes of them in this long is closed (`super::reclaim`); so
    /// is one whose calls waiting for their RDMA Reads hold that much and whose peer
    /// answered less than that of our Reads.
    pub stall_reclaim: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            credits: 128,
            min_credits: 8,
            inline_size: 4096,
            remote_invalidate: true,
            max_connections: 64,
            read_depth: 16,
            limits: Limits::default(),
            max_call: 1024 * 1024 + 4096,
            read_timeout: Duration::from_secs(30),
            send_timeout: Duration::from_secs(30),
            max_reply_bytes: 8 << 20,
            stall_reclaim: Duration::from_millis(1000),
        }
    }
}

/// Receives each reassembled call: its reference, the peer, the RPC record and the
/// reduced items (for the upper layer's DDP-eligibility check).
/// The last argument is the room of the call's first write chunk, when it has one: a
/// READ result up to that size may be sent from elsewhere with
/// [`RdmaServer::reply_external`].
pub type OnCall<'a> = dyn FnMut(CallRef, SocketAddr, Buf, &[Reduced], Option<u64>) + 'a;

/// A piece of registered memory outside the reply holding DDP-eligible result data
/// (a cache page), and the caller's tag for it, handed back by
/// [`RdmaServer::take_released`] once the RDMA Write from it is complete (or will
/// never happen).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtSeg {
    pub addr: u64,
    pub len: u32,
    pub lkey: u32,
    pub tag: u64,
}

/// Names one call handed to the caller; give it back with the reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallRef {
    pub(super) slot: u32,
    pub(super) gen: u32,
    pub(super) call: u16,
}

impl CallRef {
    /// The connection this call arrived on.
    pub fn conn(&self) -> ConnId {
        ConnId {
            slot: self.slot,
            gen: self.gen,
        }
    }
}

/// Names one connection for as long as it lives: a later connection in the same slot
/// has another generation, so a stale `ConnId` never reaches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnId {
    pub(super) slot: u32,
    pub(super) gen: u32,
}

impl ConnId {
    /// A connection id from its parts (tests, and tables keyed by connection).
    pub fn from_raw(slot: u32, gen: u32) -> ConnId {
        ConnId { slot, gen }
    }
}

/// Why [`RdmaServer::send_callback`] did not send a callback. Nothing was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallbackError {
    /// The connection is gone or closing: the caller waits for the client to bind
    /// another (RFC 8167 §5.4: the server never connects, R8167-17).
    Gone,
    /// Larger than the client's receive inline threshold: callbacks are Short only
    /// (no reverse chunks, R8167-05/13/14).
    TooLarge,
    /// As many callbacks outstanding as the client grants reverse credits (RFC 8167
    /// §4.1, R8167-02): try again after a callback reply.
    NoCredit,
    /// No buffer, Receive or send-queue room right now: try again.
    Busy,
}

/// What became of one callback sent with [`RdmaServer::send_callback`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallbackOutcome<'a> {
    /// Its RPC reply (starting at the XID).
    Reply(&'a [u8]),
    /// The client answered with an RDMA_ERROR carrying the callback's XID (R8167-16).
    Error,
    /// The connection dropped while it was outstanding (R8167-17: resend on the
    /// connection the client binds next, or time out).
    Lost,
}

/// Counters (reactor-owned, copied out on request).
#[derive(Debug, Clone, Copy, Default)]
pub struct RdmaStats {
    pub accepted: u64,
    /// Connection requests refused, for any reason (the two below and accept errors).
    pub rejected: u64,
    /// Refused because `max_connections` were live.
    pub refused_full: u64,
    /// Refused because the receive budget could not give even `min_credits`.
    pub refused_no_buffers: u64,
    /// Accepted with fewer credits than configured (receive budget short).
    pub credits_reduced: u64,
    /// Connections closed because their peer left RDMA Reads unanswered.
    pub read_timeouts: u64,
    /// Connections closed because their peer completed none of their outstanding
    /// Sends for `send_timeout`.
    pub send_timeouts: u64,
    /// Calls held back because their connection's replies in production or awaiting
    /// Send completion reached `max_reply_bytes`.
    pub reply_budget_holds: u64,
    /// Connections closed because, while an allocation was starved, their outstanding
    /// Sends held `RECLAIM_HELD` bytes or more and their peer completed less than
    /// `RECLAIM_PROGRESS` bytes of them in `stall_reclaim` (`super::reclaim`).
    pub send_reclaimed: u64,
    /// Connections closed because, while an allocation was starved, the reassembly
    /// buffers of their calls with RDMA Reads outstanding held `RECLAIM_HELD` bytes
    /// or more and their peer answered less than `RECLAIM_PROGRESS` bytes of Reads in
    /// `stall_reclaim` (`super::reclaim`).
    pub read_reclaimed: u64,
    pub disconnects: u64,
    pub calls: u64,
    pub replies: u64,
    pub errors_sent: u64,
    pub dropped: u64,
    pub rdma_reads: u64,
    pub rdma_writes: u64,
    pub remote_invalidations: u64,
    /// Times a Receive could not be re-posted for lack of a buffer.
    pub recv_starved: u64,
    /// Calls parked waiting for a reassembly buffer.
    pub parked: u64,
    /// Callbacks sent (RFC 8167 reverse-direction calls).
    pub cb_sent: u64,
    /// Callback replies matched by XID.
    pub cb_replies: u64,
    /// REPLYs matching no outstanding callback, dropped (R8167-20).
    pub cb_unmatched: u64,
    /// Callbacks answered with an RDMA_ERROR (R8167-16).
    pub cb_errors: u64,
    /// Callbacks outstanding when their connection was lost (R8167-17).
    pub cb_lost: u64,
}
