//! RFC 8167 reverse-direction calls on the responder transport (see the parent
//! module's docs for the callback slot states): sending a callback on a connection the
//! client bound to its back channel, matching REPLYs and RDMA_ERRORs to callbacks by
//! XID, and handing their outcomes to the caller. Rules: R8167-01/02 (own XID space,
//! reverse credits), R8167-05/09/10/13/14 (Short RDMA_MSG only, within the client's
//! inline threshold), R8167-08 (one extra Receive per callback, posted first),
//! R8167-16/17/20 (errors, loss with the connection, direction before slot).

use super::*;

impl RdmaServer {
    /// Sends an RFC 8167 reverse-direction call (a callback) on `conn`: `record` is the
    /// whole RPC call message, starting at its XID (which becomes `rdma_xid`). It goes
    /// as a Short RDMA_MSG with three empty chunk lists (R8167-09/10/14), and one extra
    /// Receive is posted for its reply first (R8167-08). The caller must only use
    /// connections the client bound to its back channel (R8167-19).
    pub fn send_callback(&mut self, conn: ConnId, record: &[u8]) -> Result<(), CallbackError> {
        if self.gens.get(conn.slot as usize) != Some(&conn.gen) {
            return Err(CallbackError::Gone);
        }
        let slot = conn.slot;
        let Some(c) = self.conns[slot as usize].as_mut().filter(|c| !c.closing) else {
            return Err(CallbackError::Gone);
        };
        // A record that is no RPC CALL cannot be framed as a callback (R8167-09).
        let Some(xid) = reverse::call_xid(record) else {
            return Err(CallbackError::TooLarge);
        };
        // R8167-05: inline only, within the client's receive threshold.
        let len = reverse::CALL_HEADER.saturating_add(record.len());
        if len > c.send_limit {
            return Err(CallbackError::TooLarge);
        }
        if c.sq_used >= c.sq_max {
            return Err(CallbackError::Busy);
        }
        let i = c.cb.begin(xid).map_err(|r| match r {
            Refused::NoCredit => CallbackError::NoCredit,
            Refused::Busy => CallbackError::Busy,
        })?;
        let Some(mut buf) = self.pools.alloc(len) else {
            c.cb.cancel(i);
            return Err(CallbackError::Busy);
        };
        let out = buf.spare_mut();
        let at = reverse::encode_call_header(out, xid, c.cb.requested());
        out[at..len].copy_from_slice(record);
        buf.set_len(len);
        // R8167-08: the extra Receive for its reply is posted before the Send.
        self.refill(slot);
        let c = self.conns[slot as usize].as_mut().expect("checked above");
        if c.posted < c.recv_target() {
            c.cb.cancel(i);
            return Err(CallbackError::Busy);
        }
        let sge = Sge {
            addr: buf.addr(),
            len: len as u32,
            lkey: self.mr.lkey,
        };
        let wr = SendWr {
            wr_id: wr_id(KIND_CB_SEND, slot, i as u32),
            op: Op::Send,
            sges: std::slice::from_ref(&sge),
            signaled: true,
        };
        match self.fabric.post_send(c.qp, &[wr]) {
            Ok(()) => {}
            Err(PostError::QueueFull) => {
                c.cb.cancel(i);
                return Err(CallbackError::Busy);
            }
            Err(e) => {
                tracing::warn!(peer = %c.peer, "rdma: posting a callback failed: {e}; closing");
                c.cb.cancel(i);
                self.close(slot);
                return Err(CallbackError::Gone);
            }
        }
        c.sq_used += 1;
        c.sends.posted(len);
        c.drain.posted(buf.capacity());
        c.cb_bufs[i] = Some(buf);
        self.stats.cb_sent += 1;
        Ok(())
    }

    /// A received REPLY or RDMA_ERROR (`reverse::classify`): matched against the
    /// connection's callbacks by XID (R8167-20, R8167-16); unmatched ones are dropped
    /// and counted, their `rdma_credit` ignored (R8167-04, R8166-14).
    pub(super) fn on_reverse(&mut self, slot: u32, msg: &[u8], inbound: Inbound) {
        let id = ConnId {
            slot,
            gen: self.gens[slot as usize],
        };
        let Some(c) = self.conns[slot as usize].as_mut() else {
            return;
        };
        match inbound {
            Inbound::Reply {
                xid,
                credit,
                payload_at,
            } => {
                if c.cb.on_reply(xid, credit).is_some() {
                    self.stats.cb_replies += 1;
                    let reply = msg.get(payload_at..).unwrap_or_default().to_vec();
                    push_bounded(&mut self.cb_events, (id, xid, CbEvent::Reply(reply)));
                } else {
                    tracing::debug!(peer = %c.peer, xid, "rdma: dropping a REPLY matching no callback");
                    self.stats.cb_unmatched += 1;
                }
            }
            Inbound::Error { xid } => {
                if c.cb.on_error(xid).is_some() {
                    tracing::debug!(peer = %c.peer, xid, "rdma: callback answered with RDMA_ERROR");
                    self.stats.cb_errors += 1;
                    push_bounded(&mut self.cb_events, (id, xid, CbEvent::Error));
                } else {
                    tracing::debug!(peer = %c.peer, xid, "rdma: dropping RDMA_ERROR matching no callback");
                    self.stats.dropped += 1;
                }
            }
            Inbound::Stray(why) => {
                tracing::debug!(peer = %c.peer, "rdma: dropping message: {why}");
                self.stats.cb_unmatched += 1;
            }
            Inbound::Forward => {}
        }
    }

    /// Hands over what became of callbacks since the last call: their connection, XID
    /// and outcome (a REPLY matched by XID in the connection's callback table, an
    /// RDMA_ERROR for one, or the connection's loss). Unmatched REPLYs are dropped and
    /// counted, never handed over (R8167-20).
    pub fn take_callback_events(&mut self, f: &mut dyn FnMut(ConnId, u32, CallbackOutcome)) {
        while let Some((id, xid, ev)) = self.cb_events.pop_front() {
            let out = match &ev {
                CbEvent::Reply(r) => CallbackOutcome::Reply(r),
                CbEvent::Error => CallbackOutcome::Error,
                CbEvent::Lost => CallbackOutcome::Lost,
            };
            f(id, xid, out);
        }
    }
}
