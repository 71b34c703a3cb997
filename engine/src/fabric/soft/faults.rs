//! Fault injection (per queue pair) and counters (per fabric), for tests.
//!
//! Faults act on *outgoing* frames of one QP, when they are pushed into the ring:
//! - a dropped frame is lost as on a wire without retransmission: the peer detects the
//!   gap at the next request (sequence error → the lost request fails with `Fatal`,
//!   earlier ones succeed, the connection breaks) or at the next Read-response chunk;
//!   with nothing after it, the lost operation waits until a disconnect flushes it;
//! - a delay holds every work request / response until `delay` after it was posted
//!   (requests stay in posting order);
//! - `disconnect_after_*` pulls the cable once that many more frames / payload bytes
//!   went out: the QP breaks locally (flushes, `Disconnected`), the peer sees the
//!   socket close.

use std::time::Duration;

/// Outgoing frame kinds that can be dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    Send,
    Write,
    ReadResponse,
}

/// Faults of one queue pair; get it with `SoftFabric::faults(qp)` and set fields.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Drop this many more Send frames (each chunk of a large Send is one frame).
    pub drop_sends: u32,
    /// Drop this many more RDMA Write frames.
    pub drop_writes: u32,
    /// Drop this many more RDMA Read response frames.
    pub drop_read_responses: u32,
    /// Hold each outgoing work request or response this long after it was queued.
    pub delay: Duration,
    /// Break the connection after this many more frames were pushed.
    pub disconnect_after_frames: Option<u64>,
    /// Break the connection once this many more payload bytes were pushed.
    pub disconnect_after_bytes: Option<u64>,
}

impl Faults {
    /// Drops the next `n` outgoing frames of `kind`.
    pub fn drop_next(&mut self, kind: FrameKind, n: u32) {
        *self.drop_counter(kind) += n;
    }

    fn drop_counter(&mut self, kind: FrameKind) -> &mut u32 {
        match kind {
            FrameKind::Send => &mut self.drop_sends,
            FrameKind::Write => &mut self.drop_writes,
            FrameKind::ReadResponse => &mut self.drop_read_responses,
        }
    }

    /// Whether anything is set (the data path skips all fault logic otherwise).
    pub fn active(&self) -> bool {
        self.drop_sends != 0
            || self.drop_writes != 0
            || self.drop_read_responses != 0
            || !self.delay.is_zero()
            || self.disconnect_after_frames.is_some()
            || self.disconnect_after_bytes.is_some()
    }

    /// Consumes one drop of `kind`, if any is pending.
    pub(super) fn take_drop(&mut self, kind: FrameKind) -> bool {
        let c = self.drop_counter(kind);
        if *c > 0 {
            *c -= 1;
            true
        } else {
            false
        }
    }

    /// Accounts a pushed frame; true when the cable should be pulled now.
    pub(super) fn count_frame(&mut self, payload: u64) -> bool {
        let mut pull = false;
        if let Some(n) = &mut self.disconnect_after_frames {
            *n = n.saturating_sub(1);
            pull |= *n == 0;
        }
        if let Some(n) = &mut self.disconnect_after_bytes {
            *n = n.saturating_sub(payload);
            pull |= *n == 0;
        }
        pull
    }
}

/// Counters of one fabric (all its connections), from `SoftFabric::stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SoftStats {
    pub frames_sent: u64,
    pub frames_received: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Sends that found no Receive posted here.
    pub rnr_sent: u64,
    /// Our Sends that found no Receive at the peer.
    pub rnr_received: u64,
    /// Completions reported with `WcStatus::Flushed`.
    pub flushed: u64,
    /// Doorbell bytes written to wake a sleeping peer.
    pub doorbells: u64,
    /// Frames dropped by fault injection.
    pub dropped: u64,
    /// Connections broken because the peer violated the protocol.
    pub protocol_errors: u64,
    /// Connections that went down (any cause).
    pub disconnects: u64,
}
