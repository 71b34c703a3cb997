//! Timeouts and reclaim on the responder transport: the periodic sweep that closes
//! connections whose peer leaves RDMA Reads unanswered (`read_timeout`), completes none
//! of its Sends (`send_timeout`), or, while an allocation of the reactor starves,
//! holds shared buffers it does not drain (`stall_reclaim`; rules in
//! `super::timeouts` and `super::reclaim`). Only decides and calls `close`.

use super::*;

impl RdmaServer {
    /// Closes connections whose peer answered none of their outstanding RDMA Reads
    /// for `read_timeout`, completed none of their outstanding Sends for
    /// `send_timeout`, or, while an allocation is starved, took too little of what
    /// their outstanding Sends hold, or answered too few Reads of the calls whose
    /// reassembly buffers they hold, in `stall_reclaim` (their buffers come back with
    /// the flushes; see `super::timeouts`, `super::reclaim`).
    pub(super) fn sweep_timeouts(&mut self, now: Instant) -> usize {
        let starved = self.starved();
        let stalled_since = now.checked_sub(self.opts.stall_reclaim);
        let mut closed = 0;
        for slot in 0..self.conns.len() as u32 {
            let Some(c) = self.conns[slot as usize].as_mut() else {
                continue;
            };
            if c.closing {
                continue;
            }
            c.drain.note(now);
            c.pull.note(now);
            if timeouts::reads_stalled(c.reads_out, c.read_progress, now, self.opts.read_timeout) {
                tracing::warn!(peer = %c.peer, reads = c.reads_out, timeout = ?self.opts.read_timeout,
                    "rdma: peer left RDMA Reads unanswered; closing the connection");
                self.stats.read_timeouts += 1;
            } else if c.sends.stalled(now, self.opts.send_timeout) {
                let (sends, bytes) = c.sends.outstanding();
                tracing::warn!(peer = %c.peer, sends, bytes, timeout = ?self.opts.send_timeout,
                    "rdma: peer completed none of its replies (rdma.send_timeout_s); closing the connection");
                self.stats.send_timeouts += 1;
            } else if starved && stalled_since.is_some_and(|t| c.drain.undrained(t)) {
                self.stats.send_reclaimed += 1;
                if let Some(quiet) = self.reclaims.ready(now) {
                    let (sends, _) = c.sends.outstanding();
                    let stalled_for = c.drain.since().map_or(self.opts.stall_reclaim, |t| {
                        now.saturating_duration_since(t)
                    });
                    tracing::warn!(peer = %c.peer, sends, held = c.drain.held(), ?stalled_for, not_logged = quiet,
                        "rdma: outstanding replies hold {RECLAIM_HELD} bytes or more of shared buffers and the \
                         peer completed less than {RECLAIM_PROGRESS} bytes of them while buffers are short \
                         (rdma.stall_reclaim_ms); closing the connection to reclaim them");
                }
            } else if starved && stalled_since.is_some_and(|t| c.pull.undrained(t)) {
                self.stats.read_reclaimed += 1;
                if let Some(quiet) = self.reclaims.ready(now) {
                    let stalled_for = c.pull.since().map_or(self.opts.stall_reclaim, |t| {
                        now.saturating_duration_since(t)
                    });
                    tracing::warn!(peer = %c.peer, reads = c.reads_out, held = c.pull.held(), ?stalled_for, not_logged = quiet,
                        "rdma: calls waiting for their RDMA Reads hold {RECLAIM_HELD} bytes or more of shared \
                         buffers and the peer answered less than {RECLAIM_PROGRESS} bytes of Reads while buffers \
                         are short (rdma.stall_reclaim_ms); closing the connection to reclaim them");
                }
            } else {
                continue;
            }
            self.close(slot);
            closed += 1;
        }
        closed
    }

    /// Whether some allocation of this reactor was starved since the last sweep: a
    /// pool class found empty (by either transport: they share the pools) or a call
    /// of ours parked for a reassembly buffer.
    pub(super) fn starved(&mut self) -> bool {
        let exhausted = self.pools.exhausted_total();
        let grew = exhausted != self.exhausted_seen;
        self.exhausted_seen = exhausted;
        grew || self
            .conns
            .iter()
            .flatten()
            .any(|c| !c.closing && !c.parked.is_empty())
    }
}
