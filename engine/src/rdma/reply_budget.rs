//! Per-connection reply budget (`rdma.max_reply_mib`, `ServerOptions::max_reply_bytes`).
//!
//! Rule (Standards: a client must not pin shared buffers by reading nothing): credits
//! alone bound how many calls a peer has in flight, not how many large reply buffers
//! they hold. A READ's reply holds a buffer as large as its write chunk until its Send
//! completes (the NIC reads the reply from it until then), and the Send completes
//! only when the peer takes it. So each delivered call is charged the chunks it offers for its reply
//! ([`reply_charge`]); while a connection's charges reach the budget, its further
//! calls wait here, received and reassembled, and are delivered in arrival order as
//! earlier replies complete (or are dropped). A peer that never completes its replies
//! then holds the budget plus one call, not a large buffer per credit.

use crate::rpcrdma::wire::Chunks;
use std::collections::VecDeque;

/// One connection's charged reply bytes and the calls waiting for room.
pub(super) struct ReplyBudget {
    /// Reply bytes charged to calls delivered and not yet released.
    reserved: usize,
    /// Budget (`max_reply_bytes`).
    max: usize,
    /// Reassembled calls (call-slot indices) waiting for `reserved` to drop under `max`.
    held: VecDeque<u16>,
}

impl ReplyBudget {
    pub(super) fn new(max: usize) -> ReplyBudget {
        ReplyBudget {
            reserved: 0,
            max,
            held: VecDeque::new(),
        }
    }

    /// Charges `charge` for call `idx` about to be delivered; `false` when the budget
    /// is reached: the call is then held (a call charged nothing is never held: it is
    /// answered inline from one small buffer).
    pub(super) fn admit(&mut self, idx: u16, charge: usize) -> bool {
        if charge > 0 && self.reserved >= self.max {
            self.held.push_back(idx);
            return false;
        }
        self.reserved = self.reserved.saturating_add(charge);
        true
    }

    /// A charged call's reply completed, failed or was dropped.
    pub(super) fn release(&mut self, charge: usize) {
        self.reserved = self.reserved.saturating_sub(charge);
    }

    /// The next held call, when the budget has room for it.
    pub(super) fn next_held(&mut self) -> Option<u16> {
        if self.reserved >= self.max {
            return None;
        }
        self.held.pop_front()
    }

    /// Some call is held (the connection needs a pump pass once room appears).
    pub(super) fn has_held(&self) -> bool {
        !self.held.is_empty()
    }

    /// A held call could be delivered now.
    pub(super) fn ready(&self) -> bool {
        !self.held.is_empty() && self.reserved < self.max
    }
}

/// Reply bytes a call may hold until its Send completes: the chunks it offers for its
/// reply (a READ's write chunk, a reply chunk), at most the largest pool buffer. A
/// call offering none is answered inline (one small buffer): 0.
pub(super) fn reply_charge(chunks: &Chunks, max_buf: usize) -> usize {
    let segs = chunks.write_segs.iter().chain(&chunks.reply_segs);
    let total = segs.fold(0usize, |t, s| t.saturating_add(s.length as usize));
    total.min(max_buf)
}
