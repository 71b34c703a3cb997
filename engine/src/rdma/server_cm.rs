//! Connection setup and teardown on the responder transport: RDMA-CM events
//! (requests, establishment, disconnects), admission against the receive budget and
//! `max_connections` (refusals counted and logged), the accept with RFC 8797
//! thresholds from private data, and the close → `Disconnected` → drop sequence that
//! returns every buffer and reservation. May touch every field of a connection it
//! creates or drops; `live` changes only here.

use super::*;

impl RdmaServer {
    pub(super) fn on_cm(&mut self, ev: CmEvent, on_call: &mut OnCall) {
        match ev {
            CmEvent::ConnectRequest(req) => self.on_request(req),
            CmEvent::Established {
                qp,
                initiator_depth,
                ..
            } => {
                if let Some(&slot) = self.by_qp.get(&qp) {
                    if let Some(c) = self.conns[slot as usize].as_mut() {
                        c.read_depth =
                            (initiator_depth as u32).clamp(1, self.opts.read_depth.max(1) as u32);
                        tracing::debug!(peer = %c.peer, read_depth = c.read_depth, "rdma: connection established");
                    }
                }
            }
            CmEvent::Rejected { .. } => {}
            CmEvent::Disconnected { qp } => {
                // Every flush of this QP is queued before the event: take them first so
                // each buffer is returned by its own completion.
                self.poll_cq(on_call);
                // The QP is destroyed before its connection's buffers go back to the
                // pool: should a device not have flushed everything (the provider
                // reports the disconnect after `DRAIN_TIMEOUT` anyway), no work request
                // can still DMA into a buffer that another call is then given.
                self.fabric.release(qp);
                if let Some(slot) = self.by_qp.remove(&qp) {
                    self.drop_conn(slot);
                }
            }
        }
    }

    /// Accepts a connection: RFC 8797 thresholds from the peer's private data (1024
    /// each way without it, R8797-01/07), Receives posted before the first grant can
    /// reach the client (R8166-28).
    pub(super) fn on_request(&mut self, req: ConnRequest) {
        // R8167-08: the extra Receives of callback replies are reserved with the grant.
        let extra = MAX_CALLBACKS;
        let credits = match self
            .admission
            .admit_with(self.live, self.opts.credits, extra)
        {
            Verdict::Grant(g) => g,
            refusal => {
                self.refuse(&req, refusal);
                return;
            }
        };
        if credits < self.opts.credits {
            self.stats.credits_reduced += 1;
            tracing::debug!(peer = %req.peer, credits, configured = self.opts.credits,
                "rdma: receive budget short; granting fewer credits");
        }
        let peer = privdata::decode(req.private_data.as_bytes());
        let t = privdata::thresholds(&self.ours, &peer);
        let caps = QpCaps {
            max_send_wr: (credits * 4).max(2 * MAX_CHAIN as u32),
            max_recv_wr: credits + extra,
            // The header and up to MAX_INLINE reply pieces in one Send (RFC 8267
            // §6.4.1: a COMPOUND's results written into several chunks leave holes).
            max_sge: (1 + MAX_INLINE as u32).max(4),
            initiator_depth: self.opts.read_depth.max(1),
            responder_resources: 1,
        };
        let ours = privdata::encode(&self.ours);
        let qp = match self.fabric.accept(req.id, &caps, &ours) {
            Ok(qp) => qp,
            Err(e) => {
                tracing::warn!(peer = %req.peer, "rdma: accept failed: {e}");
                self.stats.rejected += 1;
                self.admission.release(credits + extra);
                return;
            }
        };
        let cfg = Config {
            credits,
            max_call: self.opts.max_call,
            limits: self.opts.limits,
        };
        let responder = Responder::new(cfg);
        let ncalls = credits as usize + 16;
        let mut hdr_slab = vec![0u8; ncalls * HDR_SLOT].into_boxed_slice();
        // SAFETY: the slab is owned by the connection, whose drop deregisters it first
        // (`drop_conn`); a boxed slice never moves.
        let hdr_mr = match unsafe {
            self.fabric
                .register(hdr_slab.as_mut_ptr(), hdr_slab.len(), access::LOCAL_WRITE)
        } {
            Ok(mr) => mr,
            Err(e) => {
                tracing::warn!(peer = %req.peer, "rdma: registering reply headers failed: {e}");
                self.admission.release(credits + extra);
                self.fabric.disconnect(qp);
                return;
            }
        };
        let calls = (0..ncalls)
            .map(|_| CallSlot {
                state: State::Free,
                xid: 0,
                long: false,
                chunks: responder.new_chunks(),
                recv: None,
                record: None,
                pulls_left: 0,
                reduced: Vec::with_capacity(self.opts.limits.max_read_segments),
                reply: None,
                ddp: DdpList::new(),
                error: None,
                hdr: None,
                cost: 0,
                ext: Vec::with_capacity(MAX_EXT),
                charge: 0,
                sent: 0,
                held: 0,
                pull_held: 0,
            })
            .collect();
        let conn = Conn {
            qp,
            credits,
            hdr_slab,
            hdr_mr,
            peer: req.peer,
            responder,
            send_limit: t.send,
            recv_size: self.opts.inline_size,
            remote_invalidate: t.remote_invalidate,
            read_depth: 1,
            recvs: (0..credits + extra).map(|_| None).collect(),
            free_recvs: (0..credits + extra).rev().collect(),
            posted: 0,
            calls,
            free_calls: (0..ncalls as u16).rev().collect(),
            reads_out: 0,
            pulling: 0,
            read_progress: Instant::now(),
            read_queue: VecDeque::with_capacity(64),
            sends: SendWatch::default(),
            drain: Drain::default(),
            pull: Drain::default(),
            sq_used: 0,
            sq_max: caps.max_send_wr,
            reply_queue: VecDeque::with_capacity(ncalls),
            parked: VecDeque::new(),
            budget: ReplyBudget::new(self.opts.max_reply_bytes),
            closing: false,
            cb: reverse::Table::new(MAX_CALLBACKS),
            cb_bufs: Default::default(),
            cb_extra: extra,
        };
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.conns.push(None);
                self.gens.push(0);
                (self.conns.len() - 1) as u32
            }
        };
        self.conns[slot as usize] = Some(conn);
        self.by_qp.insert(qp, slot);
        self.live += 1;
        self.live_changed();
        self.stats.accepted += 1;
        self.refill(slot);
        let c = self.conns[slot as usize].as_ref().expect("just set");
        if c.posted == 0 {
            tracing::warn!(peer = %req.peer, "rdma: no buffers for Receives; dropping the connection");
            self.fabric.disconnect(qp);
        }
        tracing::info!(
            peer = %req.peer,
            send = t.send,
            recv = t.recv,
            remote_invalidate = t.remote_invalidate,
            credits = c.posted,
            "rdma: accepted connection"
        );
    }

    /// Refuses a connection request (RDMA-CM reject): counted, and logged at most once
    /// a second with the number of refusals not logged.
    pub(super) fn refuse(&mut self, req: &ConnRequest, why: Verdict) {
        self.stats.rejected += 1;
        let reason = match why {
            Verdict::Full => {
                self.stats.refused_full += 1;
                "rdma.max_connections reached"
            }
            _ => {
                self.stats.refused_no_buffers += 1;
                "receive budget cannot give rdma.min_credits (raise the [pools] count of the rdma.inline_size class, or lower rdma.credits / rdma.max_connections)"
            }
        };
        if let Some(held) = self.refusals.ready(Instant::now()) {
            tracing::warn!(peer = %req.peer, live = self.live,
                reserved = self.admission.reserved(), budget = self.admission.budget(),
                not_logged = held, "rdma: connection refused: {reason}");
        }
        self.fabric.reject(req.id);
    }

    /// Hands over the connections that closed since the last call (a session's back
    /// channel bound to one must be forgotten).
    pub fn take_closed(&mut self, f: &mut dyn FnMut(ConnId)) {
        while let Some(id) = self.closed.pop_front() {
            f(id);
        }
    }

    /// Starts closing a connection; buffers come back with the flush completions and
    /// the slot is freed at `Disconnected`.
    pub(super) fn close(&mut self, slot: u32) {
        if let Some(c) = self.conns[slot as usize].as_mut() {
            if !c.closing {
                c.closing = true;
                self.fabric.disconnect(c.qp);
            }
        }
    }

    pub(super) fn drop_conn(&mut self, slot: u32) {
        if let Some(mut c) = self.conns[slot as usize].take() {
            self.fabric.deregister(&c.hdr_mr);
            self.admission.release(c.credits + c.cb_extra);
            // R8167-17: callbacks outstanding are lost with the connection; the caller
            // resends them on the connection the client binds next (or times out).
            let id = ConnId {
                slot,
                gen: self.gens[slot as usize],
            };
            let (events, stats) = (&mut self.cb_events, &mut self.stats);
            c.cb.drain_lost(&mut |xid| {
                stats.cb_lost += 1;
                push_bounded(events, (id, xid, CbEvent::Lost));
            });
            push_bounded(&mut self.closed, id);
            for call in c.calls.iter_mut() {
                self.released.extend(call.ext.drain(..).map(|d| d.tag));
            }
            self.gens[slot as usize] = self.gens[slot as usize].wrapping_add(1);
            self.free.push(slot);
            self.live -= 1;
            self.live_changed();
            self.stats.disconnects += 1;
        }
    }
}
