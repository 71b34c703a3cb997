//! The Send/reply path of the responder transport: the caller's replies (`reply`,
//! `reply_external`, `no_reply`) queued per connection, then posted as RDMA Writes
//! into the client's write/reply chunks plus one Send (header from the connection's
//! slab or a pool buffer, inline pieces gathered), within send-queue room; ERR_CHUNK
//! when a reply does not fit what the client offered (R8166-44). Buffers stay with the
//! call until its Send completes (`super::completions`).

use super::*;

impl RdmaServer {
    /// The caller's reply to `call`: `reply` is the whole RPC reply; `ddp` the data
    /// bytes of its DDP-eligible results (RFC 8267: READ data, READLINK path): one
    /// range or none for NFSv3, one entry per READ-class operation for an NFSv4
    /// COMPOUND (§6.4.1, paired with the write chunks in order).
    /// A reply for a connection that is gone is dropped.
    pub fn reply(&mut self, call: CallRef, reply: Buf, ddp: impl Into<DdpList>) {
        let ddp = ddp.into();
        let Some(c) = self.live_conn(call) else {
            return;
        };
        let slot = &mut c.calls[call.call as usize];
        if slot.state != State::Executing {
            debug_assert!(false, "reply for a call not executing");
            return;
        }
        slot.reply = Some(reply);
        slot.ddp = ddp;
        slot.state = State::Queued;
        c.reply_queue.push_back(call.call);
        mark(&mut self.dirty, call.slot);
    }

    /// The reply to a READ-like call whose result data lives outside `reply` (which
    /// ends with the result's length word): `data` (at most [`MAX_EXT`] pieces, in
    /// order, registered memory) goes by RDMA Write straight into the call's first
    /// write chunk, which must have room for it (see [`OnCall`]). Each piece's tag comes
    /// back through [`RdmaServer::take_released`] when the Writes are done, the
    /// connection is gone, or the reply was dropped.
    pub fn reply_external(&mut self, call: CallRef, reply: Buf, data: &[ExtSeg]) {
        debug_assert!(data.len() <= MAX_EXT);
        if !self.is_live(call) {
            self.released.extend(data.iter().map(|d| d.tag));
            return;
        }
        let c = self.conns[call.slot as usize].as_mut().expect("live");
        let slot = &mut c.calls[call.call as usize];
        if slot.state != State::Executing || data.len() > MAX_EXT {
            debug_assert!(false, "reply for a call not executing");
            self.released.extend(data.iter().map(|d| d.tag));
            return;
        }
        slot.ext.clear();
        slot.ext.extend_from_slice(data);
        slot.reply = Some(reply);
        slot.ddp = DdpList::new();
        slot.state = State::Queued;
        c.reply_queue.push_back(call.call);
        mark(&mut self.dirty, call.slot);
    }

    /// The caller will not answer `call` (an RPC it drops): free its slot.
    pub fn no_reply(&mut self, call: CallRef) {
        if self.is_live(call) {
            let c = self.conns[call.slot as usize].as_mut().expect("live");
            if c.calls[call.call as usize].state == State::Executing {
                release_call(c, call.call, &mut self.released);
                if c.budget.has_held() {
                    mark(&mut self.dirty, call.slot);
                }
            }
        }
    }

    /// Closes the connection `call` arrived on (the caller could not serve the call,
    /// e.g. it panicked): the call is released and its buffers come back with the
    /// flush completions, like any disconnect.
    pub fn close_call_conn(&mut self, call: CallRef) {
        self.no_reply(call);
        if self.gens.get(call.slot as usize) == Some(&call.gen) {
            self.close(call.slot);
        }
    }

    pub(super) fn is_live(&self, call: CallRef) -> bool {
        self.gens.get(call.slot as usize) == Some(&call.gen)
            && self.conns[call.slot as usize]
                .as_ref()
                .is_some_and(|c| !c.closing)
    }

    pub(super) fn live_conn(&mut self, call: CallRef) -> Option<&mut Conn> {
        if self.gens.get(call.slot as usize) != Some(&call.gen) {
            return None;
        }
        self.conns[call.slot as usize]
            .as_mut()
            .filter(|c| !c.closing)
    }

    /// Sends queued replies while the send queue has room for their work requests.
    pub(super) fn send_replies(&mut self, slot: u32) -> usize {
        let mut n = 0;
        loop {
            let c = self.conns[slot as usize].as_mut().expect("live");
            let Some(&idx) = c.reply_queue.front() else {
                return n;
            };
            match self.send_one(slot, idx) {
                Sent::Done => {
                    let c = self.conns[slot as usize].as_mut().expect("live");
                    c.reply_queue.pop_front();
                    n += 1;
                }
                Sent::Wait => return n,
                Sent::Closed => return n,
            }
        }
    }

    pub(super) fn send_one(&mut self, slot: u32, idx: u16) -> Sent {
        let c = self.conns[slot as usize].as_mut().expect("live");
        let grant = c.responder.grant(c.forward_posted());
        let call = &mut c.calls[idx as usize];
        let hdr_cap = wire::FIXED_WORDS + call.chunks.encoded_len() + 16;
        if hdr_cap > HDR_SLOT && call.hdr.is_none() {
            match self.pools.alloc(hdr_cap) {
                Some(b) => call.hdr = Some(b),
                None => return Sent::Wait,
            }
        }
        let mut pool_hdr = call.hdr.take();
        let (hdr, hdr_addr, hdr_lkey): (&mut [u8], u64, u32) = match pool_hdr.as_mut() {
            Some(b) => {
                let a = b.addr();
                (b.spare_mut(), a, self.mr.lkey)
            }
            None => {
                let at = idx as usize * HDR_SLOT;
                let h = &mut c.hdr_slab[at..at + HDR_SLOT];
                let a = h.as_ptr() as u64;
                (h, a, c.hdr_mr.lkey)
            }
        };
        let hdr_len: usize;
        let mut sges = [Sge {
            addr: 0,
            len: 0,
            lkey: 0,
        }; MAX_CHAIN + 1 + MAX_INLINE];
        let mut ops: [Option<Op>; MAX_CHAIN] = [None; MAX_CHAIN];
        let mut nwrites = 0usize;
        let mut send_sges = 1usize;
        let mut invalidate = None;
        if let Some((vers, body)) = call.error {
            hdr_len = responder::encode_error(hdr, call.xid, vers, grant, body);
            self.stats.errors_sent += 1;
        } else {
            let reply = call.reply.as_ref().expect("queued reply");
            let planned = if call.ext.is_empty() {
                c.responder.plan_reply_list(
                    call.xid,
                    grant,
                    &call.chunks,
                    reply,
                    &call.ddp,
                    c.send_limit,
                    c.remote_invalidate,
                    &mut *hdr,
                )
            } else {
                let len = call.ext.iter().map(|d| d.len as usize).sum();
                c.responder.plan_reply_external(
                    call.xid,
                    grant,
                    &call.chunks,
                    reply,
                    len,
                    c.send_limit,
                    c.remote_invalidate,
                    &mut *hdr,
                )
            };
            match planned {
                Ok(plan) if plan.writes.len() + call.ext.len() <= MAX_CHAIN => {
                    for w in plan.writes.iter() {
                        if !w.external {
                            sges[nwrites] = Sge {
                                addr: reply.addr() + w.src.start as u64,
                                len: w.src.len() as u32,
                                lkey: self.mr.lkey,
                            };
                            ops[nwrites] = Some(Op::Write {
                                remote_addr: w.remote_offset,
                                rkey: w.handle,
                            });
                            nwrites += 1;
                            continue;
                        }
                        // Split the Write where the external pieces meet.
                        let mut base = 0usize;
                        for d in &call.ext {
                            let piece = base..base + d.len as usize;
                            base = piece.end;
                            let from = piece.start.max(w.src.start);
                            let to = piece.end.min(w.src.end);
                            if from >= to {
                                continue;
                            }
                            sges[nwrites] = Sge {
                                addr: d.addr + (from - piece.start) as u64,
                                len: (to - from) as u32,
                                lkey: d.lkey,
                            };
                            ops[nwrites] = Some(Op::Write {
                                remote_addr: w
                                    .remote_offset
                                    .saturating_add((from - w.src.start) as u64),
                                rkey: w.handle,
                            });
                            nwrites += 1;
                        }
                    }
                    hdr_len = plan.header_len;
                    for r in plan.inline.iter().filter(|r| !r.is_empty()) {
                        sges[nwrites + send_sges] = Sge {
                            addr: reply.addr() + r.start as u64,
                            len: r.len() as u32,
                            lkey: self.mr.lkey,
                        };
                        send_sges += 1;
                    }
                    invalidate = plan.invalidate;
                }
                _ => {
                    // R8166-44 / RFC 8267 §3.1: the reply does not fit what the client
                    // provided: ERR_CHUNK, never an over-size Send or a write past a
                    // segment.
                    tracing::debug!(peer = %c.peer, xid = call.xid, "rdma: reply resource overrun; answering ERR_CHUNK");
                    hdr_len = responder::encode_error(
                        hdr,
                        call.xid,
                        wire::VERSION,
                        grant,
                        ErrBody::Chunk,
                    );
                    call.reply = None;
                    call.ddp = DdpList::new();
                    call.error = Some((wire::VERSION, ErrBody::Chunk));
                    self.stats.errors_sent += 1;
                }
            }
        }
        let cost = 1 + nwrites as u32;
        if c.sq_used + cost > c.sq_max {
            call.hdr = pool_hdr;
            return Sent::Wait;
        }
        sges[nwrites] = Sge {
            addr: hdr_addr,
            len: hdr_len as u32,
            lkey: hdr_lkey,
        };
        let total: usize = sges[nwrites..nwrites + send_sges]
            .iter()
            .map(|s| s.len as usize)
            .sum();
        let written: usize = sges[..nwrites].iter().map(|s| s.len as usize).sum();
        debug_assert!(
            total <= c.send_limit.max(wire::MIN_HEADER),
            "R8166-35: a Send never exceeds the threshold"
        );
        let send_op = match invalidate {
            Some(rkey) => {
                self.stats.remote_invalidations += 1;
                Op::SendWithInv { rkey }
            }
            None => Op::Send,
        };
        let mut wrs = [SendWr {
            wr_id: 0,
            op: Op::Send,
            sges: &[],
            signaled: false,
        }; MAX_CHAIN + 1];
        for k in 0..nwrites {
            wrs[k] = SendWr {
                wr_id: wr_id(KIND_WRITE, slot, idx as u32),
                op: ops[k].expect("set above"),
                sges: &sges[k..k + 1],
                signaled: false,
            };
        }
        wrs[nwrites] = SendWr {
            wr_id: wr_id(KIND_SEND, slot, idx as u32),
            op: send_op,
            sges: &sges[nwrites..nwrites + send_sges],
            signaled: true,
        };
        call.hdr = pool_hdr;
        call.state = State::Sending;
        call.cost = cost;
        call.sent = written + total;
        call.held = call.reply.as_ref().map_or(0, |b| b.capacity())
            + call.hdr.as_ref().map_or(0, |b| b.capacity())
            + call.ext.iter().map(|d| d.len as usize).sum::<usize>();
        self.stats.rdma_writes += nwrites as u64;
        self.stats.replies += 1;
        if let Err(e) = self.fabric.post_send(c.qp, &wrs[..nwrites + 1]) {
            // R8166-74: a reply that cannot be posted closes the connection, which
            // tells the client it is lost.
            tracing::warn!(peer = %c.peer, "rdma: posting a reply failed: {e}; closing");
            self.close(slot);
            return Sent::Closed;
        }
        c.sq_used += cost;
        c.sends.posted(call.sent);
        c.drain.posted(call.held);
        Sent::Done
    }
}

/// What `send_one` did with a queued reply.
pub(super) enum Sent {
    Done,
    Wait,
    Closed,
}
