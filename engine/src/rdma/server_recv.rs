//! The Receive path of the responder transport: Receives posted from the pools (the
//! forward credits plus one per callback awaiting its reply), each received call
//! classified by `crate::rpcrdma::responder`, reassembled (inline pieces copied, read
//! chunks pulled by RDMA Read straight into one pool buffer, at most `read_depth`
//! outstanding, at most `MAX_PULLING` buffers per connection) and handed to the
//! caller (`deliver`), held by the reply budget or parked for a buffer meanwhile.

use super::*;

impl RdmaServer {
    /// Posts Receives until the connection has `credits` of them plus one per callback
    /// awaiting its reply (R8167-08), or buffers run out.
    pub(super) fn refill(&mut self, slot: u32) {
        let Some(c) = self.conns[slot as usize].as_mut() else {
            return;
        };
        if c.closing {
            return;
        }
        while c.posted < c.recv_target() {
            let Some(&idx) = c.free_recvs.last() else {
                return;
            };
            let Some(buf) = self.pools.alloc(c.recv_size) else {
                self.stats.recv_starved += 1;
                mark(&mut self.dirty, slot);
                return;
            };
            let sge = Sge {
                addr: buf.addr(),
                len: c.recv_size as u32,
                lkey: self.mr.lkey,
            };
            match self
                .fabric
                .post_recv(c.qp, wr_id(KIND_RECV, slot, idx), sge)
            {
                Ok(()) => {
                    c.free_recvs.pop();
                    c.recvs[idx as usize] = Some(buf);
                    c.posted += 1;
                }
                Err(e) => {
                    tracing::debug!(peer = %c.peer, "rdma: post_recv failed: {e}");
                    return;
                }
            }
        }
    }

    /// One received message: RDMA_ERROR, drop, or a call (RFC 8166 §4.5, §3.4.5).
    pub(super) fn on_receive(&mut self, slot: u32, buf: Buf, on_call: &mut OnCall) {
        let c = self.conns[slot as usize].as_mut().expect("live connection");
        let Some(idx) = c.free_calls.pop() else {
            tracing::warn!(peer = %c.peer, "rdma: client exceeded its credits by more than the slack; closing the connection");
            self.close(slot);
            return;
        };
        c.calls[idx as usize].state = State::NeedBuffer;
        c.calls[idx as usize].recv = Some(buf);
        self.start_call(slot, idx, on_call);
    }

    /// Classifies the call's Receive and starts reassembly. Re-run for parked calls.
    pub(super) fn start_call(&mut self, slot: u32, idx: u16, on_call: &mut OnCall) {
        let c = self.conns[slot as usize].as_mut().expect("live connection");
        let call = &mut c.calls[idx as usize];
        let recv = call.recv.as_ref().expect("parked call keeps its Receive");
        let verdict = c.responder.receive(recv, &mut call.chunks);
        match verdict {
            Received::Drop(why) => {
                tracing::debug!(peer = %c.peer, "rdma: dropping message: {why}");
                self.stats.dropped += 1;
                release_call(c, idx, &mut self.released);
            }
            Received::Error { xid, vers, body } => {
                tracing::debug!(peer = %c.peer, xid, ?body, "rdma: answering RDMA_ERROR");
                call.recv = None;
                call.error = Some((vers, body));
                call.xid = xid;
                call.state = State::Queued;
                c.reply_queue.push_back(idx);
                mark(&mut self.dirty, slot);
            }
            Received::Call(info) => {
                call.xid = info.xid;
                call.long = info.long;
                let key = (c.peer.ip(), info.xid);
                if let Some(at) = self.failed.iter().position(|k| *k == key) {
                    // Answered once, then forgotten: another client on the same host
                    // reusing the XID later must not get a stale ERR_CHUNK.
                    self.failed.remove(at);
                    call.recv = None;
                    call.error = Some((wire::VERSION, ErrBody::Chunk));
                    call.state = State::Queued;
                    c.reply_queue.push_back(idx);
                    mark(&mut self.dirty, slot);
                    return;
                }
                call.reduced.clear();
                call.reduced.extend_from_slice(c.responder.reduced());
                if !info.pulls {
                    // Zero copy: the record is the Receive buffer after the header.
                    let mut rec = call.recv.take().expect("checked");
                    let Some(&Piece::Inline { from, len, .. }) = c.responder.pieces().first()
                    else {
                        unreachable!("a call without pulls is one inline piece");
                    };
                    rec.advance(from);
                    rec.set_len(len);
                    call.record = Some(rec);
                    call.state = State::Pulling;
                    call.pulls_left = 0;
                    self.stats.calls += 1;
                    self.deliver(slot, idx, on_call);
                    return;
                }
                let rec = if c.pulling < MAX_PULLING {
                    self.pools.alloc(info.total_len)
                } else {
                    None
                };
                let Some(mut rec) = rec else {
                    self.stats.parked += 1;
                    call.state = State::NeedBuffer;
                    c.parked.push_back(idx);
                    mark(&mut self.dirty, slot);
                    return;
                };
                rec.set_len(info.total_len);
                let recv = call.recv.take().expect("checked");
                let mut pulls = 0;
                for p in c.responder.pieces() {
                    match *p {
                        Piece::Inline { from, len, to } => {
                            rec[to..to + len].copy_from_slice(&recv[from..from + len])
                        }
                        Piece::Zero { to, len } => rec[to..to + len].fill(0),
                        Piece::Pull { seg, to } => {
                            if seg.length > 0 {
                                c.read_queue.push_back((idx, seg, to));
                                pulls += 1;
                            }
                        }
                    }
                }
                call.record = Some(rec);
                call.state = State::Pulling;
                call.pulls_left = pulls;
                self.stats.calls += 1;
                if pulls == 0 {
                    self.deliver(slot, idx, on_call);
                } else {
                    c.pulling += 1;
                    let cap = call.record.as_ref().map_or(0, |r| r.capacity());
                    call.pull_held = cap;
                    c.pull.posted(cap);
                    mark(&mut self.dirty, slot);
                }
            }
        }
    }

    /// Hands a reassembled call to the caller. Rule (Standards: no pinned shared
    /// buffers): a call whose reply may need a buffer (`reply_charge`) is held while
    /// its connection's replies in production or awaiting Send completion reach
    /// `max_reply_bytes` (`super::reply_budget`).
    pub(super) fn deliver(&mut self, slot: u32, idx: u16, on_call: &mut OnCall) {
        let max_buf = self.pools.max_buf();
        let c = self.conns[slot as usize].as_mut().expect("live connection");
        let call = &mut c.calls[idx as usize];
        let charge = reply_charge(&call.chunks, max_buf);
        if !c.budget.admit(idx, charge) {
            self.stats.reply_budget_holds += 1;
            return;
        }
        call.charge = charge;
        let rec = call.record.take().expect("pulled record");
        if call.long && !Responder::check_long_xid(call.xid, &rec) {
            // R8166-03 for Long calls.
            call.error = Some((wire::VERSION, ErrBody::Chunk));
            call.state = State::Queued;
            c.reply_queue.push_back(idx);
            mark(&mut self.dirty, slot);
            return;
        }
        call.state = State::Executing;
        let r = CallRef {
            slot,
            gen: self.gens[slot as usize],
            call: idx,
        };
        let room = Responder::first_write_chunk_room(&call.chunks);
        on_call(r, c.peer, rec, &call.reduced, room);
    }

    /// Delivers held calls (see `deliver`) while the connection's budget allows.
    pub(super) fn deliver_held(&mut self, slot: u32, on_call: &mut OnCall) -> usize {
        let mut n = 0;
        while let Some(c) = self.conns[slot as usize].as_mut() {
            if c.closing {
                break;
            }
            let Some(idx) = c.budget.next_held() else {
                break;
            };
            self.deliver(slot, idx, on_call);
            n += 1;
        }
        n
    }

    pub(super) fn retry_parked(&mut self, slot: u32, on_call: &mut OnCall) -> usize {
        let mut n = 0;
        while let Some(idx) = self.conns[slot as usize]
            .as_mut()
            .and_then(|c| c.parked.pop_front())
        {
            self.start_call(slot, idx, on_call);
            n += 1;
            let c = self.conns[slot as usize].as_ref().expect("live");
            if c.calls[idx as usize].state == State::NeedBuffer {
                break; // still no buffer: it is back on the parked list
            }
        }
        n
    }

    /// RDMA Reads into the call's record, at most `read_depth` outstanding (the
    /// negotiated depth; RFC 8166 §3.4.5 pulls, SPDK-style park on the depth limit).
    pub(super) fn issue_reads(&mut self, slot: u32) -> usize {
        let c = self.conns[slot as usize].as_mut().expect("live");
        let mut n = 0;
        while c.reads_out < c.read_depth && c.sq_used < c.sq_max {
            let Some((idx, seg, to)) = c.read_queue.pop_front() else {
                break;
            };
            let call = &c.calls[idx as usize];
            let Some(rec) = call.record.as_ref() else {
                continue;
            };
            let sge = Sge {
                addr: rec.addr() + to as u64,
                len: seg.length,
                lkey: self.mr.lkey,
            };
            let wr = SendWr {
                wr_id: wr_id(KIND_READ, slot, idx as u32),
                op: Op::Read {
                    remote_addr: seg.offset,
                    rkey: seg.handle,
                },
                sges: std::slice::from_ref(&sge),
                signaled: true,
            };
            if c.reads_out == 0 {
                c.read_progress = Instant::now();
            }
            if let Err(e) = self.fabric.post_send(c.qp, &[wr]) {
                tracing::warn!(peer = %c.peer, "rdma: posting an RDMA Read failed: {e}; closing");
                self.close(slot);
                return n;
            }
            c.reads_out += 1;
            c.sq_used += 1;
            self.stats.rdma_reads += 1;
            n += 1;
        }
        n
    }
}
