//! RFC 8167 (bidirectional RPC-over-RDMA) on the responder, sans-IO: telling the
//! direction of a received message, framing callbacks (reverse-direction calls), and
//! the per-connection callback table with its reverse credits.
//!
//! - [`classify`]: a received message is forward (CALL, or anything the forward
//!   responder answers or drops), a REPLY to one of our callbacks, or an RDMA_ERROR that
//!   may answer one (RFC 8167 §2, R8167-20, R8167-16; docs/architecture.md §9 rule 5). It looks only at header words, so
//!   the transport calls it before a forward call slot is taken.
//! - [`encode_call_header`]: the 7-word header every callback carries (R8167-09/10/14).
//! - [`Table`]: callbacks outstanding on one connection, matched by XID in a table of
//!   their own (R8167-01), limited by the reverse grant (R8167-02/03).
//!
//! The gateway profile has no reverse chunks (R8167-13): callbacks are Short RDMA_MSGs,
//! and a REPLY that carries chunk lists cannot answer one of ours.

use super::wire;

/// Most callbacks one connection keeps outstanding: the reverse credits we request in
/// every callback's `rdma_credit` (R8167-10), as knfsd does. Also the extra Receives
/// reserved per connection (R8167-08).
pub const MAX_CALLBACKS: u32 = 2;

/// Bytes of a callback's transport header: xid, vers, credit, RDMA_MSG and three
/// empty chunk lists (the form the Linux client requires, R8167-14).
pub const CALL_HEADER: usize = 28;

const MSG_TYPE_CALL: u32 = 0;
const MSG_TYPE_REPLY: u32 = 1;

/// The direction of one received message (RFC 8167 §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inbound {
    /// A forward call, or anything the forward responder answers or drops
    /// (`crate::rpcrdma::responder::Responder::receive`).
    Forward,
    /// An RPC REPLY in the callback form: `rdma_credit` is the client's reverse grant
    /// (valid only once matched, R8167-04), the RPC reply starts at `payload_at`.
    Reply {
        xid: u32,
        credit: u32,
        payload_at: usize,
    },
    /// An RDMA_ERROR: it can only answer one of our callbacks (R8167-16, R8166-14).
    Error { xid: u32 },
    /// An RPC REPLY that cannot answer a callback (chunk lists, another version, RPC
    /// xid differing from `rdma_xid`): dropped and counted, credit ignored.
    Stray(&'static str),
}

fn word(msg: &[u8], at: usize) -> Option<u32> {
    let b = msg.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Classifies one received message by its `rdma_proc` and, for RDMA_MSG, the RPC
/// `msg_type` (word 1 of the payload): R8167-20. Allocation-free; never trusts a length.
pub fn classify(msg: &[u8]) -> Inbound {
    let (Some(xid), Some(vers), Some(credit), Some(proc_)) =
        (word(msg, 0), word(msg, 4), word(msg, 8), word(msg, 12))
    else {
        return Inbound::Forward; // R8166-04: the responder drops it.
    };
    if proc_ == wire::RDMA_ERROR {
        // An RDMA_ERROR body is at least one word (ERR_CHUNK, 20 bytes in all).
        if msg.len() < wire::ERR_CHUNK_LEN {
            return Inbound::Forward;
        }
        return Inbound::Error { xid };
    }
    // A NOMSG at the server is a Long forward call: replies to our callbacks could only
    // use it with a Reply chunk, which we never offer.
    if proc_ != wire::RDMA_MSG {
        return Inbound::Forward;
    }
    let Some(at) = wire::msg_payload_at(msg) else {
        return Inbound::Forward;
    };
    match at.checked_add(4).and_then(|p| word(msg, p)) {
        Some(MSG_TYPE_REPLY) => {}
        _ => return Inbound::Forward,
    }
    if at != CALL_HEADER {
        return Inbound::Stray("RPC reply with chunk lists (no reverse chunks, R8167-13)");
    }
    if vers != wire::VERSION {
        return Inbound::Stray("RPC reply of another RPC-over-RDMA version");
    }
    if word(msg, at) != Some(xid) {
        return Inbound::Stray("RPC reply whose xid is not its rdma_xid (R8167-11)");
    }
    Inbound::Reply {
        xid,
        credit,
        payload_at: at,
    }
}

/// Writes a callback's header into `out` (at least [`CALL_HEADER`] bytes): `rdma_xid`
/// = the callback's RPC XID, version 1, `rdma_credit` = the reverse credits we request
/// (>= 1), RDMA_MSG, three empty chunk lists (R8167-09, R8167-10, R8167-14).
pub fn encode_call_header(out: &mut [u8], xid: u32, credit: u32) -> usize {
    let words = [
        xid,
        wire::VERSION,
        credit.max(1),
        wire::RDMA_MSG,
        0, // no read list
        0, // no write list
        0, // no reply chunk
    ];
    for (i, w) in words.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&w.to_be_bytes());
    }
    CALL_HEADER
}

/// The XID of a callback record (an RPC CALL message), if it is one: at least the XID
/// and `msg_type` words, `msg_type` = CALL (R8167-09).
pub fn call_xid(record: &[u8]) -> Option<u32> {
    match word(record, 4)? {
        MSG_TYPE_CALL => word(record, 0),
        _ => None,
    }
}

/// Why [`Table::begin`] refused a callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// As many outstanding as the client's reverse grant allows (R8167-02).
    NoCredit,
    /// Every slot still waits for its Send completion, or the XID is already
    /// outstanding on this connection (it could not be matched unambiguously).
    Busy,
}

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    xid: u32,
    /// Waiting for a REPLY or RDMA_ERROR (holds a reverse credit).
    awaiting: bool,
    /// Its Send is posted and not yet completed (holds the send buffer).
    sending: bool,
}

/// Callbacks outstanding on one connection (RFC 8167 §4.1): their XIDs, a table
/// separate from forward calls (R8167-01), and the client's reverse grant — 1 until
/// its first callback reply (RFC 8166 §3.3.1 applied to the reverse direction), then
/// the `rdma_credit` of its latest matched reply clamped to `[1, max]`.
#[derive(Debug, Clone)]
pub struct Table {
    max: u32,
    grant: u32,
    slots: [Slot; MAX_CALLBACKS as usize],
}

impl Table {
    /// `max`: callbacks we keep outstanding at most (clamped to `1..=MAX_CALLBACKS`).
    pub fn new(max: u32) -> Table {
        Table {
            max: max.clamp(1, MAX_CALLBACKS),
            grant: 1,
            slots: [Slot::default(); MAX_CALLBACKS as usize],
        }
    }

    /// Reverse credits we request in each callback (R8167-10).
    pub fn requested(&self) -> u32 {
        self.max
    }

    /// The client's latest reverse grant.
    pub fn grant(&self) -> u32 {
        self.grant
    }

    /// Callbacks waiting for their reply (each holds one extra Receive, R8167-08).
    pub fn outstanding(&self) -> u32 {
        self.slots.iter().filter(|s| s.awaiting).count() as u32
    }

    /// Takes a slot for a callback with `xid`; on `Ok` it is awaiting and sending.
    pub fn begin(&mut self, xid: u32) -> Result<usize, Refused> {
        if self.outstanding() >= self.max.min(self.grant) {
            return Err(Refused::NoCredit);
        }
        if self.slots.iter().any(|s| s.awaiting && s.xid == xid) {
            return Err(Refused::Busy);
        }
        let i = self
            .slots
            .iter()
            .position(|s| !s.awaiting && !s.sending)
            .ok_or(Refused::Busy)?;
        self.slots[i] = Slot {
            xid,
            awaiting: true,
            sending: true,
        };
        Ok(i)
    }

    /// Undoes `begin` (nothing was posted).
    pub fn cancel(&mut self, i: usize) {
        if let Some(s) = self.slots.get_mut(i) {
            *s = Slot::default();
        }
    }

    /// The Send of slot `i` completed (or was flushed): its buffer is free.
    pub fn sent(&mut self, i: usize) {
        if let Some(s) = self.slots.get_mut(i) {
            s.sending = false;
        }
    }

    /// A REPLY with `xid` arrived: `Some(slot)` if it answers an outstanding callback,
    /// which is then complete and whose `credit` becomes the reverse grant (clamped to
    /// `[1, max]`); `None` (nothing changes, R8167-04/20) otherwise.
    pub fn on_reply(&mut self, xid: u32, credit: u32) -> Option<usize> {
        let i = self.find(xid)?;
        self.slots[i].awaiting = false;
        self.grant = credit.clamp(1, self.max);
        Some(i)
    }

    /// An RDMA_ERROR with `xid` arrived: `Some(slot)` if it fails an outstanding
    /// callback (R8167-16); the grant is unchanged. `None` otherwise (R8166-14: drop).
    pub fn on_error(&mut self, xid: u32) -> Option<usize> {
        let i = self.find(xid)?;
        self.slots[i].awaiting = false;
        Some(i)
    }

    /// The connection is gone: every outstanding callback's XID to `f` (R8167-17).
    pub fn drain_lost(&mut self, f: &mut dyn FnMut(u32)) {
        for s in self.slots.iter_mut().filter(|s| s.awaiting) {
            s.awaiting = false;
            f(s.xid);
        }
    }

    fn find(&self, xid: u32) -> Option<usize> {
        self.slots.iter().position(|s| s.awaiting && s.xid == xid)
    }
}

#[cfg(test)]
#[path = "reverse_tests.rs"]
mod tests;
