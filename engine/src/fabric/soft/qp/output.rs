//! Output: pushing a QP's frames into its tx ring, responses (Acks, Read data) and
//! requests (its send queue) alternately, chunked to the space available; fault
//! injection (drops, delays, cable pulls) applies here.

use super::{Ctx, Fail, QpEngine, Resp};
use crate::fabric::soft::faults::FrameKind;
use crate::fabric::soft::mr::MrTable;
use crate::fabric::soft::ring::{round8, Link};
use crate::fabric::soft::wire::{Hdr, Kind, F_ACK_REQ, F_INV, HDR};
use crate::fabric::{access, Op, WcStatus};
use std::time::Instant;

/// Data chunks smaller than this wait for more ring space unless they end the operation.
const MIN_CHUNK: u64 = 4096;

/// Result of one push attempt.
enum Step {
    Pushed,
    NoSpace,
    Idle,
}

fn ready(at: Option<Instant>, now: &mut Option<Instant>) -> bool {
    match at {
        None => true,
        Some(t) => *now.get_or_insert_with(Instant::now) >= t,
    }
}

impl QpEngine {
    /// Pushes ready frames until the ring is full or nothing is ready; returns frames
    /// pushed. Responses and requests alternate so neither starves the other.
    pub fn push_out(&mut self, link: &mut Link, ctx: &mut Ctx) -> Result<usize, Fail> {
        let mut now = None;
        let mut n = 0;
        self.blocked = false;
        loop {
            let a = self.push_resp(link, ctx, &mut now)?;
            if matches!(a, Step::NoSpace) {
                self.blocked = true;
                return Ok(n);
            }
            let b = self.push_req(link, ctx, &mut now)?;
            if matches!(b, Step::NoSpace) {
                self.blocked = true;
                return Ok(n);
            }
            let pushed = matches!(a, Step::Pushed) as usize + matches!(b, Step::Pushed) as usize;
            if pushed == 0 {
                return Ok(n);
            }
            n += pushed;
        }
    }

    /// Room for a header-only frame?
    fn room_for_hdr(link: &mut Link) -> Result<bool, Fail> {
        Ok(link.tx_free_cached() >= HDR as u64 || link.tx_free()? >= HDR as u64)
    }

    /// The payload bytes of the next data frame, given `remaining` bytes of the
    /// operation, or `None` if the ring has too little room for a worthwhile chunk.
    fn chunk_len(&self, link: &mut Link, remaining: u32) -> Result<Option<u32>, Fail> {
        let want = u64::from(remaining).min(self.max_payload);
        let need = HDR as u64 + round8(want.min(MIN_CHUNK));
        let mut free = link.tx_free_cached();
        if free < need {
            free = link.tx_free()?;
            if free < need {
                return Ok(None);
            }
        }
        let fit = (free - HDR as u64) & !7;
        Ok(Some(want.min(fit) as u32))
    }

    /// Publishes a frame whose header and payload are written; applies cable-pull faults.
    fn commit(&mut self, link: &mut Link, ctx: &mut Ctx, len: u32) -> Result<(), Fail> {
        link.tx_commit(round8(HDR as u64 + u64::from(len)));
        ctx.stats.frames_sent += 1;
        ctx.stats.bytes_sent += u64::from(len);
        if self.faults.active() && self.faults.count_frame(u64::from(len)) {
            self.faults.disconnect_after_frames = None;
            self.faults.disconnect_after_bytes = None;
            return Err(Fail::local("fault injection: cable pulled"));
        }
        Ok(())
    }

    /// Whether fault injection eats this frame (it still counts as pushed for the
    /// operation's progress, not for `disconnect_after_*`).
    fn dropped(&mut self, kind: FrameKind, ctx: &mut Ctx) -> bool {
        let d = self.faults.active() && self.faults.take_drop(kind);
        ctx.stats.dropped += u64::from(d);
        d
    }

    fn push_resp(
        &mut self,
        link: &mut Link,
        ctx: &mut Ctx,
        now: &mut Option<Instant>,
    ) -> Result<Step, Fail> {
        let Some(front) = self.resp.front().copied() else {
            return Ok(Step::Idle);
        };
        match front {
            Resp::Ack { seq, ready_at } => {
                if !ready(ready_at, now) {
                    return Ok(Step::Idle);
                }
                if !Self::room_for_hdr(link)? {
                    return Ok(Step::NoSpace);
                }
                link.tx_write(0, &Hdr::new(Kind::Ack, seq).encode());
                self.resp.pop_front();
                self.commit(link, ctx, 0)?;
            }
            Resp::Read {
                seq,
                rkey,
                addr,
                total,
                sent,
                ready_at,
            } => {
                if !ready(ready_at, now) {
                    return Ok(Step::Idle);
                }
                let Some(len) = self.chunk_len(link, total - sent)? else {
                    return Ok(Step::NoSpace);
                };
                let mut h = Hdr::new(Kind::ReadResp, seq);
                (h.offset, h.len, h.total) = (sent, len, total);
                let dropped = self.dropped(FrameKind::ReadResponse, ctx);
                if !dropped {
                    if len > 0 {
                        // Re-checked now: the region may have been deregistered since.
                        let src = addr + u64::from(sent);
                        let Some(span) =
                            ctx.mrs
                                .remote(rkey, src, u64::from(len), access::REMOTE_READ)
                        else {
                            return Err(Fail::nak(
                                seq,
                                WcStatus::RemoteAccess,
                                "read source vanished",
                            ));
                        };
                        link.tx_copy_in(HDR as u64, &span, 0, len as usize);
                    }
                    link.tx_write(0, &h.encode());
                }
                let sent = sent + len;
                if sent == total {
                    self.resp.pop_front();
                    self.serving -= 1;
                } else if let Some(Resp::Read { sent: s, .. }) = self.resp.front_mut() {
                    *s = sent;
                }
                if !dropped {
                    self.commit(link, ctx, len)?;
                }
            }
        }
        Ok(Step::Pushed)
    }

    fn push_req(
        &mut self,
        link: &mut Link,
        ctx: &mut Ctx,
        now: &mut Option<Instant>,
    ) -> Result<Step, Fail> {
        if self.push == self.tail {
            return Ok(Step::Idle);
        }
        let seq = self.push;
        let slot = self.slot(seq);
        let e = self.sq[slot];
        if !ready(e.ready_at, now) {
            return Ok(Step::Idle);
        }
        if let Op::Read { remote_addr, rkey } = e.op {
            // Reads beyond the negotiated depth wait (and, posting order, all behind).
            if self.reads.len() as u32 >= self.depth {
                return Ok(Step::Idle);
            }
            if !Self::room_for_hdr(link)? {
                return Ok(Step::NoSpace);
            }
            let mut h = Hdr::new(Kind::ReadReq, seq);
            (h.addr, h.rkey, h.total) = (remote_addr, rkey, e.total);
            link.tx_write(0, &h.encode());
            self.reads.push_back(seq);
            self.push += 1;
            self.commit(link, ctx, 0)?;
            return Ok(Step::Pushed);
        }
        let Some(len) = self.chunk_len(link, e.total - e.progress)? else {
            return Ok(Step::NoSpace);
        };
        let (kind, fk) = match e.op {
            Op::Write { .. } => (Kind::Write, FrameKind::Write),
            _ => (Kind::Send, FrameKind::Send),
        };
        let mut h = Hdr::new(kind, seq);
        (h.offset, h.len, h.total) = (e.progress, len, e.total);
        match e.op {
            Op::Write { remote_addr, rkey } => (h.addr, h.rkey) = (remote_addr, rkey),
            Op::SendWithInv { rkey } => (h.flags, h.inv) = (F_INV, rkey),
            _ => {}
        }
        let last = e.progress + len == e.total;
        if last && e.ack_req {
            h.flags |= F_ACK_REQ;
        }
        let dropped = self.dropped(fk, ctx);
        if !dropped {
            if !self.gather(link, slot, e.progress, len, ctx.mrs) {
                self.failed = Some((seq, WcStatus::LocalProtection));
                return Err(Fail::local("send source deregistered"));
            }
            link.tx_write(0, &h.encode());
        }
        let entry = &mut self.sq[slot];
        entry.progress += len;
        if last {
            self.push += 1;
        }
        if !dropped {
            self.commit(link, ctx, len)?;
        }
        Ok(Step::Pushed)
    }

    /// Copies `len` bytes of entry `slot`'s gather list, from byte `from`, into the
    /// frame being built. False if an SGE no longer names registered memory.
    fn gather(&self, link: &Link, slot: usize, from: u32, len: u32, mrs: &MrTable) -> bool {
        self.walk_sges(slot, from, len, |s, off, n, done| {
            let Some(span) = mrs.local(s.lkey, s.addr + off, n, 0) else {
                return false;
            };
            link.tx_copy_in(HDR as u64 + done, &span, 0, n as usize);
            true
        })
    }
}
