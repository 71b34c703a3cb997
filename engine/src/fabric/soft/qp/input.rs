//! Input: frames from the peer, processed in ring order when this side polls (the
//! "remote NIC" work). Requests are checked against the receive queue and this fabric's
//! registrations before any byte is copied; responses complete our send queue. Nothing
//! here waits for output space: answers go to the bounded response queue.

use super::{Ctx, Fail, Inbound, QpEngine, Resp};
use crate::fabric::soft::mr::MrTable;
use crate::fabric::soft::ring::{round8, Link};
use crate::fabric::soft::wire::{self, Hdr, Kind, F_ACK_REQ, F_INV, HDR};
use crate::fabric::{access, Completion, Op, WcOpcode, WcStatus};

impl QpEngine {
    /// Processes up to `budget` frames from the peer. Never waits for output space.
    pub fn pump_in(
        &mut self,
        link: &mut Link,
        ctx: &mut Ctx,
        budget: usize,
    ) -> Result<usize, Fail> {
        let mut n = 0;
        let r = loop {
            if n == budget {
                break Ok(());
            }
            match self.one_frame(link, ctx) {
                Ok(true) => n += 1,
                Ok(false) => break Ok(()),
                Err(f) => break Err(f),
            }
        };
        link.rx_publish();
        r.map(|()| n)
    }

    fn one_frame(&mut self, link: &mut Link, ctx: &mut Ctx) -> Result<bool, Fail> {
        let avail = link.rx_avail()?;
        if avail == 0 {
            return Ok(false);
        }
        if avail < HDR as u64 {
            return Err(Fail::protocol("truncated frame"));
        }
        let mut b = [0u8; HDR];
        link.rx_read(0, &mut b);
        let (kind, h) = Hdr::decode(&b).map_err(Fail::protocol)?;
        let size = round8(HDR as u64 + u64::from(h.len));
        if size > avail {
            return Err(Fail::protocol("frame longer than the published bytes"));
        }
        match kind {
            Kind::Send => self.on_send(link, ctx, &h)?,
            Kind::Write => self.on_write(link, ctx, &h)?,
            Kind::ReadReq => self.on_read_req(ctx, &h)?,
            Kind::ReadResp => self.on_read_resp(link, ctx, &h)?,
            Kind::Ack => self.on_ack(ctx, &h)?,
            Kind::Nak => self.on_nak(ctx, &h)?,
        }
        link.rx_consume(size);
        ctx.stats.frames_received += 1;
        ctx.stats.bytes_received += u64::from(h.len);
        Ok(true)
    }

    /// A new request must be the next in the peer's sequence (else a frame was lost).
    fn begin_request(&mut self, seq: u64) -> Result<(), Fail> {
        if self.inbound.is_some() {
            return Err(Fail::protocol("new request inside a chunked one"));
        }
        if seq != self.expect {
            return Err(Fail::nak(
                self.expect,
                WcStatus::Fatal,
                "request sequence gap (lost frame)",
            ));
        }
        self.expect += 1;
        Ok(())
    }

    fn queue_ack(&mut self, seq: u64) -> Result<(), Fail> {
        if let Some(Resp::Ack { seq: s, .. }) = self.resp.back_mut() {
            *s = seq;
            return Ok(());
        }
        if self.resp.len() >= self.resp_cap {
            return Err(Fail::protocol("response queue overflow"));
        }
        let ready_at = self.delay_deadline();
        self.resp.push_back(Resp::Ack { seq, ready_at });
        Ok(())
    }

    fn on_send(&mut self, link: &mut Link, ctx: &mut Ctx, h: &Hdr) -> Result<(), Fail> {
        if h.offset == 0 {
            self.begin_request(h.seq)?;
            let Some(r) = self.rq.front() else {
                ctx.stats.rnr_sent += 1;
                return Err(Fail::nak(
                    h.seq,
                    WcStatus::ReceiverNotReady,
                    "send found no receive",
                ));
            };
            if h.total > r.sge.len {
                self.rq_fail = Some(WcStatus::LocalLength);
                return Err(Fail::nak(
                    h.seq,
                    WcStatus::RemoteInvalidRequest,
                    "send longer than the receive",
                ));
            }
        } else if !matches!(self.inbound, Some(Inbound::Send { seq, total, next })
            if seq == h.seq && total == h.total && next == h.offset)
        {
            return Err(Fail::protocol("send chunk out of order"));
        }
        let Some(r) = self.rq.front().copied() else {
            return Err(Fail::protocol("send chunk without a receive"));
        };
        if h.len > 0 {
            let dst = r.sge.addr + u64::from(h.offset);
            let Some(span) = ctx
                .mrs
                .local(r.sge.lkey, dst, u64::from(h.len), access::LOCAL_WRITE)
            else {
                self.rq_fail = Some(WcStatus::LocalProtection);
                return Err(Fail::nak(
                    h.seq,
                    WcStatus::Fatal,
                    "receive buffer deregistered",
                ));
            };
            link.rx_copy_out(HDR as u64, &span, 0, h.len as usize);
        }
        if !h.is_last() {
            self.inbound = Some(Inbound::Send {
                seq: h.seq,
                total: h.total,
                next: h.offset + h.len,
            });
            return Ok(());
        }
        self.inbound = None;
        let mut invalidated = None;
        if h.flags & F_INV != 0 {
            if !ctx.mrs.invalidate(h.inv) {
                self.rq_fail = Some(WcStatus::LocalProtection);
                return Err(Fail::nak(
                    h.seq,
                    WcStatus::RemoteInvalidRequest,
                    "invalidate of an unknown rkey",
                ));
            }
            invalidated = Some(h.inv);
        }
        self.rq.pop_front();
        ctx.cq.push_back(Completion {
            wr_id: r.wr_id,
            qp: self.qp,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: h.total,
            invalidated,
            vendor_err: 0,
        });
        if h.flags & F_ACK_REQ != 0 {
            self.queue_ack(h.seq)?;
        }
        Ok(())
    }

    fn on_write(&mut self, link: &mut Link, ctx: &mut Ctx, h: &Hdr) -> Result<(), Fail> {
        if h.offset == 0 {
            self.begin_request(h.seq)?;
            // The whole range is checked up front: a bad Write touches nothing.
            let whole = u64::from(h.total);
            if whole > 0
                && ctx
                    .mrs
                    .remote(h.rkey, h.addr, whole, access::REMOTE_WRITE)
                    .is_none()
            {
                return Err(Fail::nak(
                    h.seq,
                    WcStatus::RemoteAccess,
                    "write outside a remotely writable region",
                ));
            }
        } else if !matches!(self.inbound, Some(Inbound::Write { seq, rkey, addr, total, next })
            if seq == h.seq && rkey == h.rkey && addr == h.addr && total == h.total && next == h.offset)
        {
            return Err(Fail::protocol("write chunk out of order"));
        }
        if h.len > 0 {
            let span = h.addr.checked_add(u64::from(h.offset)).and_then(|dst| {
                ctx.mrs
                    .remote(h.rkey, dst, u64::from(h.len), access::REMOTE_WRITE)
            });
            let Some(span) = span else {
                return Err(Fail::nak(
                    h.seq,
                    WcStatus::RemoteAccess,
                    "write region vanished",
                ));
            };
            link.rx_copy_out(HDR as u64, &span, 0, h.len as usize);
        }
        if !h.is_last() {
            self.inbound = Some(Inbound::Write {
                seq: h.seq,
                rkey: h.rkey,
                addr: h.addr,
                total: h.total,
                next: h.offset + h.len,
            });
            return Ok(());
        }
        self.inbound = None;
        if h.flags & F_ACK_REQ != 0 {
            self.queue_ack(h.seq)?;
        }
        Ok(())
    }

    fn on_read_req(&mut self, ctx: &mut Ctx, h: &Hdr) -> Result<(), Fail> {
        self.begin_request(h.seq)?;
        if self.serving >= self.serve_limit {
            return Err(Fail::nak(
                h.seq,
                WcStatus::RemoteInvalidRequest,
                "reads beyond the negotiated depth",
            ));
        }
        let whole = u64::from(h.total);
        if whole > 0
            && ctx
                .mrs
                .remote(h.rkey, h.addr, whole, access::REMOTE_READ)
                .is_none()
        {
            return Err(Fail::nak(
                h.seq,
                WcStatus::RemoteAccess,
                "read outside a remotely readable region",
            ));
        }
        if self.resp.len() >= self.resp_cap {
            return Err(Fail::protocol("response queue overflow"));
        }
        let ready_at = self.delay_deadline();
        self.resp.push_back(Resp::Read {
            seq: h.seq,
            rkey: h.rkey,
            addr: h.addr,
            total: h.total,
            sent: 0,
            ready_at,
        });
        self.serving += 1;
        Ok(())
    }

    fn on_read_resp(&mut self, link: &mut Link, ctx: &mut Ctx, h: &Hdr) -> Result<(), Fail> {
        let Some(&seq) = self.reads.front() else {
            return Err(Fail::protocol("read response without a read"));
        };
        let slot = self.slot(seq);
        let e = self.sq[slot];
        if h.seq != seq || h.total != e.total || h.offset != e.progress {
            // A gap (lost response frame) fails the Read itself.
            if h.seq == seq {
                self.failed = Some((seq, WcStatus::Fatal));
            }
            return Err(Fail::protocol("read response out of order"));
        }
        // Responses come in request order: everything before this Read was processed.
        self.acked = self.acked.max(seq);
        if !self.scatter(link, slot, h.offset, h.len, ctx.mrs) {
            self.failed = Some((seq, WcStatus::LocalProtection));
            return Err(Fail::local("read destination deregistered"));
        }
        let e = &mut self.sq[slot];
        e.progress += h.len;
        if e.progress == e.total {
            e.done = true;
            self.reads.pop_front();
            self.retire(ctx);
        }
        Ok(())
    }

    fn on_ack(&mut self, ctx: &mut Ctx, h: &Hdr) -> Result<(), Fail> {
        if h.seq < self.acked || h.seq >= self.push {
            return Err(Fail::protocol("ack for a request not outstanding"));
        }
        if matches!(self.sq[self.slot(h.seq)].op, Op::Read { .. }) {
            return Err(Fail::protocol("ack for a read"));
        }
        if self.reads.front().is_some_and(|&r| r <= h.seq) {
            return Err(Fail::protocol("ack overtook a read response"));
        }
        self.acked = h.seq + 1;
        self.retire(ctx);
        Ok(())
    }

    fn on_nak(&mut self, ctx: &mut Ctx, h: &Hdr) -> Result<(), Fail> {
        if h.seq < self.head || h.seq >= self.push {
            return Err(Fail::protocol("nak for a request not outstanding"));
        }
        let status = wire::status_of(h.status);
        if status == WcStatus::ReceiverNotReady {
            ctx.stats.rnr_received += 1;
        }
        // The peer processed everything before the failed request.
        self.acked = self.acked.max(h.seq);
        self.failed = Some((h.seq, status));
        Err(Fail::local("peer reported an error"))
    }

    /// Copies `len` bytes of the current frame's payload into entry `slot`'s scatter
    /// list at byte `from`. False if an SGE no longer names writable local memory.
    fn scatter(&self, link: &Link, slot: usize, from: u32, len: u32, mrs: &MrTable) -> bool {
        self.walk_sges(slot, from, len, |s, off, n, done| {
            let Some(span) = mrs.local(s.lkey, s.addr + off, n, access::LOCAL_WRITE) else {
                return false;
            };
            link.rx_copy_out(HDR as u64 + done, &span, 0, n as usize);
            true
        })
    }
}
