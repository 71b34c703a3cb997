//! Completion polling of the responder transport: completion-queue entries
//! dispatched by the kind in their `wr_id` (Receive, RDMA Read, reply Send, callback
//! Send), failed work requests logged and their connection closed, and `pump`, which
//! runs the per-connection work completions left pending (Reads to issue, replies to
//! send, Receives to re-post, parked and held calls).

use super::*;

impl RdmaServer {
    pub(super) fn poll_cq(&mut self, on_call: &mut OnCall) -> usize {
        let mut total = 0;
        loop {
            let mut cq = std::mem::take(&mut self.cq);
            let n = self.fabric.poll_cq(&mut cq);
            for c in &cq[..n] {
                self.on_completion(*c, on_call);
            }
            self.cq = cq;
            total += n;
            if n < BATCH {
                return total;
            }
        }
    }

    pub(super) fn on_completion(&mut self, wc: Completion, on_call: &mut OnCall) {
        let (kind, slot, idx) = wr_parts(wc.wr_id);
        let Some(c) = self.conns.get_mut(slot as usize).and_then(|c| c.as_mut()) else {
            return;
        };
        if c.qp != wc.qp {
            // A late completion of the QP that held this slot before (verbs reports
            // `Disconnected` after `DRAIN_TIMEOUT` even if flushes are still missing):
            // it must not release this connection's call of the same index. Each
            // buffer comes back once, by its own connection's completion or drop.
            return;
        }
        let ok = wc.status == WcStatus::Success;
        if !ok && wc.status != WcStatus::Flushed {
            // The opcode of an error completion is undefined (verbs): the kind comes
            // from our wr_id; the vendor error is the device's own diagnosis.
            tracing::warn!(peer = %c.peer, status = ?wc.status, wr = WrKind::of(wc.wr_id).name(),
                vendor_err = wc.vendor_err, "rdma: work request failed; closing the connection");
            if kind == KIND_READ {
                // R8166-75: answer a retransmission of this call with ERR_CHUNK.
                if let Some(call) = c.calls.get(idx as usize) {
                    if self.failed.len() == FAILED_XIDS {
                        self.failed.pop_front();
                    }
                    self.failed.push_back((c.peer.ip(), call.xid));
                }
            }
            self.close(slot);
        }
        let Some(c) = self.conns[slot as usize].as_mut() else {
            return;
        };
        match kind {
            KIND_RECV => {
                let Some(mut buf) = c.recvs.get_mut(idx as usize).and_then(|b| b.take()) else {
                    return;
                };
                c.posted -= 1;
                c.free_recvs.push(idx);
                if !ok {
                    return;
                }
                buf.set_len((wc.byte_len as usize).min(buf.capacity()));
                // R8167-20: direction first, so a REPLY never takes a call slot, and a
                // matched reply's extra Receive is not re-posted (R8167-08).
                match reverse::classify(&buf) {
                    Inbound::Forward => {
                        self.refill(slot);
                        self.on_receive(slot, buf, on_call);
                    }
                    rev => {
                        self.on_reverse(slot, &buf, rev);
                        self.refill(slot);
                    }
                }
            }
            KIND_CB_SEND => {
                c.sq_used = c.sq_used.saturating_sub(1);
                if let Some(b) = c.cb_bufs.get_mut(idx as usize).and_then(|b| b.take()) {
                    c.sends.completed(b.len());
                    c.drain.completed(b.capacity(), ok);
                }
                c.cb.sent(idx as usize);
                mark(&mut self.dirty, slot);
            }
            KIND_READ => {
                c.reads_out = c.reads_out.saturating_sub(1);
                c.sq_used = c.sq_used.saturating_sub(1);
                let Some(call) = c.calls.get_mut(idx as usize) else {
                    return;
                };
                if call.state != State::Pulling {
                    return;
                }
                if !ok {
                    release_call(c, idx as u16, &mut self.released);
                    return;
                }
                let Some(left) = call.pulls_left.checked_sub(1) else {
                    return; // no Read of this call is outstanding: stale
                };
                call.pulls_left = left;
                c.read_progress = Instant::now();
                // Progress for the Read-side reclaim: the bytes this Read brought
                // (verbs and soft report them for RDMA Reads).
                c.pull.took(wc.byte_len as usize);
                mark(&mut self.dirty, slot);
                if left == 0 {
                    c.pulling = c.pulling.saturating_sub(1);
                    c.pull.released(std::mem::take(&mut call.pull_held));
                    self.deliver(slot, idx as u16, on_call);
                }
            }
            KIND_SEND => {
                let Some(call) = c.calls.get_mut(idx as usize) else {
                    return;
                };
                if call.state != State::Sending {
                    return;
                }
                let cost = call.cost;
                c.sq_used = c.sq_used.saturating_sub(cost);
                c.sends.completed(call.sent);
                c.drain.completed(call.held, ok);
                release_call(c, idx as u16, &mut self.released);
                mark(&mut self.dirty, slot);
            }
            _ => {}
        }
    }

    /// Issues queued RDMA Reads, sends queued replies, re-posts Receives and retries
    /// parked calls, for connections that have such work.
    pub(super) fn pump(&mut self, on_call: &mut OnCall) -> usize {
        if self.dirty.is_empty() {
            return 0;
        }
        let mut work = 0;
        let dirty = std::mem::take(&mut self.dirty);
        for &slot in &dirty {
            if self.conns[slot as usize].is_none() {
                continue;
            }
            self.refill(slot);
            work += self.issue_reads(slot);
            work += self.send_replies(slot);
            work += self.retry_parked(slot, on_call);
            work += self.deliver_held(slot, on_call);
        }
        let mut dirty = dirty;
        dirty.retain(|&s| {
            self.conns[s as usize].as_ref().is_some_and(|c| {
                !c.closing
                    && (!c.reply_queue.is_empty()
                        || !c.parked.is_empty()
                        || (!c.read_queue.is_empty() && c.reads_out < c.read_depth)
                        || c.budget.ready()
                        || c.posted < c.recv_target())
            })
        });
        for s in dirty {
            mark(&mut self.dirty, s);
        }
        work
    }
}
