//! What travels between two soft endpoints: ring frame headers and the three
//! connection-management messages on the Unix socket. Host-local, so native endian.
//!
//! Everything decoded here comes from the peer and is checked before use: unknown
//! kinds or flags and impossible lengths are errors, never panics.

use crate::fabric::{PrivateData, WcStatus, MAX_PRIVATE_DATA};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// Ring frame header bytes (a multiple of 8: frames stay 8-byte aligned).
pub const HDR: usize = 40;

/// Frame kinds. Requests (Send, Write, ReadReq) form the initiator's stream in posting
/// order, each with the next sequence number; responses (ReadResp, Ack, Nak) form the
/// responder's stream, in the order the requests were processed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Send = 1,
    Write = 2,
    ReadReq = 3,
    ReadResp = 4,
    /// Every request up to and including `seq` was processed successfully.
    Ack = 5,
    /// Request `seq` failed with `status`; earlier ones succeeded; the link is dead.
    Nak = 6,
}

/// The last chunk of this request asks for an Ack.
pub const F_ACK_REQ: u8 = 1;
/// Send-With-Invalidate: `inv` names the rkey to invalidate at the receiver.
pub const F_INV: u8 = 2;
const F_ALL: u8 = F_ACK_REQ | F_INV;

/// A decoded frame header. Payload (`len` bytes) follows; one request or response of
/// `total` bytes may span several frames, `offset` placing this one.
#[derive(Debug, Clone, Copy, Default)]
pub struct Hdr {
    pub kind: u8,
    pub flags: u8,
    pub status: u8,
    pub len: u32,
    pub seq: u64,
    /// Write/ReadReq: remote address of the whole operation's start.
    pub addr: u64,
    pub rkey: u32,
    pub offset: u32,
    pub total: u32,
    pub inv: u32,
}

impl Hdr {
    pub fn new(kind: Kind, seq: u64) -> Hdr {
        Hdr {
            kind: kind as u8,
            seq,
            ..Hdr::default()
        }
    }

    pub fn encode(&self) -> [u8; HDR] {
        let mut b = [0u8; HDR];
        b[0] = self.kind;
        b[1] = self.flags;
        b[2] = self.status;
        b[4..8].copy_from_slice(&self.len.to_ne_bytes());
        b[8..16].copy_from_slice(&self.seq.to_ne_bytes());
        b[16..24].copy_from_slice(&self.addr.to_ne_bytes());
        b[24..28].copy_from_slice(&self.rkey.to_ne_bytes());
        b[28..32].copy_from_slice(&self.offset.to_ne_bytes());
        b[32..36].copy_from_slice(&self.total.to_ne_bytes());
        b[36..40].copy_from_slice(&self.inv.to_ne_bytes());
        b
    }

    /// Decodes and checks what does not depend on connection state: kind, flags, and
    /// `offset + len <= total` for chunked kinds.
    pub fn decode(b: &[u8; HDR]) -> Result<(Kind, Hdr), &'static str> {
        let u32_at = |i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let h = Hdr {
            kind: b[0],
            flags: b[1],
            status: b[2],
            len: u32_at(4),
            seq: u64_from(&b[8..16]),
            addr: u64_from(&b[16..24]),
            rkey: u32_at(24),
            offset: u32_at(28),
            total: u32_at(32),
            inv: u32_at(36),
        };
        let kind = match h.kind {
            1 => Kind::Send,
            2 => Kind::Write,
            3 => Kind::ReadReq,
            4 => Kind::ReadResp,
            5 => Kind::Ack,
            6 => Kind::Nak,
            _ => return Err("unknown frame kind"),
        };
        if h.flags & !F_ALL != 0 {
            return Err("unknown frame flags");
        }
        match kind {
            Kind::Send | Kind::Write | Kind::ReadResp => {
                if u64::from(h.offset) + u64::from(h.len) > u64::from(h.total) {
                    return Err("frame chunk beyond its operation");
                }
            }
            Kind::ReadReq | Kind::Ack | Kind::Nak => {
                if h.len != 0 {
                    return Err("payload on a control frame");
                }
            }
        }
        Ok((kind, h))
    }

    pub fn is_last(&self) -> bool {
        self.offset + self.len == self.total
    }
}

fn u64_from(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    u64::from_ne_bytes(a)
}

pub fn status_code(s: WcStatus) -> u8 {
    match s {
        WcStatus::Success => 0,
        WcStatus::LocalLength => 1,
        WcStatus::LocalProtection => 2,
        WcStatus::RemoteAccess => 3,
        WcStatus::RemoteInvalidRequest => 4,
        WcStatus::ReceiverNotReady => 5,
        WcStatus::Flushed => 6,
        WcStatus::Fatal => 7,
    }
}

/// A peer's status code; anything unknown (or "success" in a Nak) is `Fatal`.
pub fn status_of(code: u8) -> WcStatus {
    match code {
        1 => WcStatus::LocalLength,
        2 => WcStatus::LocalProtection,
        3 => WcStatus::RemoteAccess,
        4 => WcStatus::RemoteInvalidRequest,
        5 => WcStatus::ReceiverNotReady,
        6 => WcStatus::Flushed,
        _ => WcStatus::Fatal,
    }
}

const REQ_MAGIC: [u8; 4] = *b"NSQ1";
const ACC_MAGIC: [u8; 4] = *b"NSA1";
/// Connect request bytes (sent once, with the segment's memfd attached).
pub const REQ_LEN: usize = 96;
/// Accept/reject answer bytes.
pub const ACC_LEN: usize = 64;
/// The connector's "ready to use" byte after an accept (then only doorbells follow).
pub const RTU: u8 = 0x5a;
/// A doorbell byte (its value carries nothing).
pub const BELL: u8 = 0x01;

/// The active side's request: ring size of the segment it created, its read limits,
/// the address it calls itself, and private data.
#[derive(Debug, Clone, Copy)]
pub struct ConnectMsg {
    pub ring_bytes: u64,
    pub initiator_depth: u8,
    pub responder_resources: u8,
    pub peer: SocketAddr,
    pub private_data: PrivateData,
}

impl ConnectMsg {
    pub fn encode(&self) -> [u8; REQ_LEN] {
        let mut b = [0u8; REQ_LEN];
        b[0..4].copy_from_slice(&REQ_MAGIC);
        b[4..12].copy_from_slice(&self.ring_bytes.to_ne_bytes());
        b[12] = self.initiator_depth;
        b[13] = self.responder_resources;
        let pd = self.private_data.as_bytes();
        b[14] = pd.len() as u8;
        let ip = match self.peer.ip() {
            IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            IpAddr::V6(v6) => v6,
        };
        b[16..32].copy_from_slice(&ip.octets());
        b[32..34].copy_from_slice(&self.peer.port().to_ne_bytes());
        b[40..40 + pd.len()].copy_from_slice(pd);
        b
    }

    pub fn decode(b: &[u8; REQ_LEN]) -> Option<ConnectMsg> {
        let pd_len = usize::from(b[14]);
        if b[0..4] != REQ_MAGIC || pd_len > MAX_PRIVATE_DATA {
            return None;
        }
        let mut ip = [0u8; 16];
        ip.copy_from_slice(&b[16..32]);
        let ip = Ipv6Addr::from(ip);
        let ip = ip.to_ipv4_mapped().map_or(IpAddr::V6(ip), IpAddr::V4);
        Some(ConnectMsg {
            ring_bytes: u64_from(&b[4..12]),
            initiator_depth: b[12],
            responder_resources: b[13],
            peer: SocketAddr::new(ip, u16::from_ne_bytes([b[32], b[33]])),
            private_data: PrivateData::new(&b[40..40 + pd_len]),
        })
    }
}

/// The passive side's answer. On accept it carries its read limits so both sides
/// compute the same negotiated depths.
#[derive(Debug, Clone, Copy)]
pub struct AcceptMsg {
    pub accepted: bool,
    pub initiator_depth: u8,
    pub responder_resources: u8,
    pub private_data: PrivateData,
}

impl AcceptMsg {
    pub fn encode(&self) -> [u8; ACC_LEN] {
        let mut b = [0u8; ACC_LEN];
        b[0..4].copy_from_slice(&ACC_MAGIC);
        b[4] = u8::from(self.accepted);
        b[5] = self.initiator_depth;
        b[6] = self.responder_resources;
        let pd = self.private_data.as_bytes();
        b[7] = pd.len() as u8;
        b[8..8 + pd.len()].copy_from_slice(pd);
        b
    }

    pub fn decode(b: &[u8; ACC_LEN]) -> Option<AcceptMsg> {
        let pd_len = usize::from(b[7]);
        if b[0..4] != ACC_MAGIC || pd_len > MAX_PRIVATE_DATA || b[4] > 1 {
            return None;
        }
        Some(AcceptMsg {
            accepted: b[4] == 1,
            initiator_depth: b[5],
            responder_resources: b[6],
            private_data: PrivateData::new(&b[8..8 + pd_len]),
        })
    }
}
