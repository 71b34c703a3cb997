//! One queue pair's verbs engine: send queue, receive queue and the responder, moving
//! frames through the connection's [`Link`](super::ring::Link): posting, completion and
//! flushing here, frame output in `output.rs`, frame input in `input.rs`.
//!
//! Send queue: a circular array of `max_send_wr` entries (their SGEs in a flat array
//! beside it, both allocated at connect/accept), indexed by a per-QP sequence number.
//! `head..push` were pushed into the ring, `push..tail` wait (out of ring space, a fault
//! delay, or a Read over the negotiated depth: posting order is kept, so everything
//! behind waits too). An entry retires in order once known complete: a Send/Write when
//! an Ack covers it or a later Read's response arrives (the peer processes requests in
//! order, so both imply every earlier request succeeded), a Read when its data is in.
//! Unsignaled Sends/Writes ask for no Ack unless the queue is half full, so they cost
//! nothing on the wire yet are freed by the next Ack. An entry that never
//! completes is flushed when the QP goes down, signaled or not.
//!
//! Responder: requests arrive in the peer's posting order with consecutive sequence
//! numbers (a gap means a lost frame); Sends take the oldest Receive; Writes and Reads
//! are checked against this fabric's registrations. Acks and Read responses go into a
//! response queue of their own, so a stalled send queue never blocks answers to the peer
//! (which would deadlock two peers reading from each other), and processing input never
//! waits for ring space: the queue is bounded by the Read limit the peer negotiated
//! (Acks coalesce).
//!
//! Copies: local memory → ring at push, ring → local memory at receive; every run is
//! re-checked against the registrations at the moment it is copied.

mod input;
mod output;

use super::faults::{Faults, SoftStats};
use super::mr::MrTable;
use super::ring::Corrupt;
use crate::fabric::{access, CmEvent, Completion, Op, PostError, Qp, QpCaps, SendWr, Sge};
use crate::fabric::{WcOpcode, WcStatus};
use std::collections::VecDeque;
use std::time::Instant;

/// Fabric state a connection reports into.
pub struct Ctx<'a> {
    pub mrs: &'a mut MrTable,
    pub cq: &'a mut VecDeque<Completion>,
    pub cm: &'a mut VecDeque<CmEvent>,
    pub stats: &'a mut SoftStats,
}

/// Why a connection must go down.
#[derive(Debug)]
pub struct Fail {
    /// The Nak to publish before closing: which peer request failed, and how.
    pub nak: Option<(u64, WcStatus)>,
    pub reason: &'static str,
    /// The peer broke the protocol (logged as a warning).
    pub protocol: bool,
}

impl Fail {
    fn nak(seq: u64, status: WcStatus, reason: &'static str) -> Fail {
        Fail {
            nak: Some((seq, status)),
            reason,
            protocol: false,
        }
    }

    pub fn local(reason: &'static str) -> Fail {
        Fail {
            nak: None,
            reason,
            protocol: false,
        }
    }

    pub fn protocol(reason: &'static str) -> Fail {
        Fail {
            nak: None,
            reason,
            protocol: true,
        }
    }
}

impl From<Corrupt> for Fail {
    fn from(c: Corrupt) -> Fail {
        Fail::protocol(c.0)
    }
}

#[derive(Debug, Clone, Copy)]
struct SqEntry {
    wr_id: u64,
    op: Op,
    signaled: bool,
    ack_req: bool,
    nsge: usize,
    total: u32,
    /// Bytes pushed (Send/Write) or received (Read).
    progress: u32,
    /// Read: all data arrived.
    done: bool,
    ready_at: Option<Instant>,
}

const EMPTY: SqEntry = SqEntry {
    wr_id: 0,
    op: Op::Send,
    signaled: false,
    ack_req: false,
    nsge: 0,
    total: 0,
    progress: 0,
    done: false,
    ready_at: None,
};

#[derive(Debug, Clone, Copy)]
struct RecvWr {
    wr_id: u64,
    sge: Sge,
}

/// Responder output, in the order the requests were processed.
#[derive(Debug, Clone, Copy)]
enum Resp {
    Ack {
        seq: u64,
        ready_at: Option<Instant>,
    },
    Read {
        seq: u64,
        rkey: u32,
        addr: u64,
        total: u32,
        sent: u32,
        ready_at: Option<Instant>,
    },
}

/// A request arriving in several frames.
#[derive(Debug, Clone, Copy)]
enum Inbound {
    Send {
        seq: u64,
        total: u32,
        next: u32,
    },
    Write {
        seq: u64,
        rkey: u32,
        addr: u64,
        total: u32,
        next: u32,
    },
}

pub struct QpEngine {
    qp: Qp,
    caps: QpCaps,
    max_payload: u64,
    // Send queue (see module docs).
    sq: Vec<SqEntry>,
    sq_sges: Vec<Sge>,
    head: u64,
    push: u64,
    tail: u64,
    /// Sends/Writes with a sequence number below this were acknowledged.
    acked: u64,
    /// Reads pushed and not fully answered, oldest first.
    reads: VecDeque<u64>,
    depth: u32,
    /// The send-queue entry that failed, and how (reported instead of Flushed).
    failed: Option<(u64, WcStatus)>,
    // Receive queue.
    rq: VecDeque<RecvWr>,
    /// How the oldest Receive failed, if it did.
    rq_fail: Option<WcStatus>,
    // Responder.
    expect: u64,
    inbound: Option<Inbound>,
    resp: VecDeque<Resp>,
    resp_cap: usize,
    serving: u32,
    serve_limit: u32,
    pub faults: Faults,
    /// The last push stopped for want of ring space.
    pub blocked: bool,
}

fn opcode(op: Op) -> WcOpcode {
    match op {
        Op::Send | Op::SendWithInv { .. } => WcOpcode::Send,
        Op::Write { .. } => WcOpcode::Write,
        Op::Read { .. } => WcOpcode::Read,
    }
}

impl QpEngine {
    /// Allocates the queues for `caps` (checked by the caller). Read limits start at 1
    /// until [`QpEngine::establish`].
    pub fn new(qp: Qp, caps: QpCaps, max_payload: u64) -> QpEngine {
        let n = caps.max_send_wr as usize;
        QpEngine {
            qp,
            caps,
            max_payload,
            sq: vec![EMPTY; n],
            sq_sges: vec![
                Sge {
                    addr: 0,
                    len: 0,
                    lkey: 0
                };
                n * caps.max_sge as usize
            ],
            head: 0,
            push: 0,
            tail: 0,
            acked: 0,
            reads: VecDeque::with_capacity(usize::from(caps.initiator_depth.max(1))),
            depth: 1,
            failed: None,
            rq: VecDeque::with_capacity(caps.max_recv_wr as usize),
            rq_fail: None,
            expect: 0,
            inbound: None,
            resp: VecDeque::new(),
            resp_cap: 0,
            serving: 0,
            serve_limit: 1,
            faults: Faults::default(),
            blocked: false,
        }
    }

    pub fn caps(&self) -> &QpCaps {
        &self.caps
    }

    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Sets the negotiated Read limits: `depth` Reads we may have outstanding, `serve`
    /// Reads the peer may have outstanding towards us.
    pub fn establish(&mut self, depth: u32, serve: u32) {
        self.depth = depth;
        self.serve_limit = serve;
        // Acks coalesce, so at most one sits between two Read responses.
        self.resp_cap = 2 * serve as usize + 2;
        self.resp.reserve(self.resp_cap);
        self.reads.reserve(depth as usize);
    }

    fn slot(&self, seq: u64) -> usize {
        (seq % self.sq.len() as u64) as usize
    }

    fn delay_deadline(&self) -> Option<Instant> {
        (!self.faults.delay.is_zero()).then(|| Instant::now() + self.faults.delay)
    }

    /// Validates the whole chain first (nothing is queued on error), then queues it.
    pub fn post_send(&mut self, wrs: &[SendWr], mrs: &MrTable) -> Result<(), PostError> {
        let cap = self.sq.len() as u64;
        if self.tail - self.head + wrs.len() as u64 > cap {
            return Err(PostError::QueueFull);
        }
        for wr in wrs {
            if wr.sges.len() > self.caps.max_sge as usize {
                return Err(PostError::Invalid);
            }
            // A Read scatters into local memory: it needs LOCAL_WRITE.
            let need = match wr.op {
                Op::Read { .. } => access::LOCAL_WRITE,
                _ => 0,
            };
            let mut total = 0u64;
            for s in wr.sges {
                if mrs.local(s.lkey, s.addr, u64::from(s.len), need).is_none() {
                    return Err(PostError::Invalid);
                }
                total += u64::from(s.len);
            }
            if total > u64::from(u32::MAX) {
                return Err(PostError::Invalid);
            }
        }
        let ready_at = self.delay_deadline();
        let max_sge = self.caps.max_sge as usize;
        for wr in wrs {
            let slot = self.slot(self.tail);
            self.sq_sges[slot * max_sge..slot * max_sge + wr.sges.len()].copy_from_slice(wr.sges);
            let outstanding = self.tail + 1 - self.head;
            self.sq[slot] = SqEntry {
                wr_id: wr.wr_id,
                op: wr.op,
                signaled: wr.signaled,
                ack_req: wr.signaled || outstanding * 2 >= cap,
                nsge: wr.sges.len(),
                total: wr.sges.iter().map(|s| s.len).sum(),
                ready_at,
                ..EMPTY
            };
            self.tail += 1;
        }
        Ok(())
    }

    pub fn post_recv(&mut self, wr_id: u64, sge: Sge, mrs: &MrTable) -> Result<(), PostError> {
        if self.rq.len() >= self.caps.max_recv_wr as usize {
            return Err(PostError::QueueFull);
        }
        if mrs
            .local(sge.lkey, sge.addr, u64::from(sge.len), access::LOCAL_WRITE)
            .is_none()
        {
            return Err(PostError::Invalid);
        }
        self.rq.push_back(RecvWr { wr_id, sge });
        Ok(())
    }

    /// Output is waiting on a fault delay (the caller must keep polling).
    pub fn delayed_output(&self) -> bool {
        !self.faults.delay.is_zero() && (self.push < self.tail || !self.resp.is_empty())
    }

    /// Calls `f(sge, offset_in_sge, len, offset_in_op)` for the runs of entry `slot`'s
    /// SGE list covering bytes `from..from + len` of the operation. Stops (false) when
    /// `f` does.
    fn walk_sges(
        &self,
        slot: usize,
        from: u32,
        len: u32,
        mut f: impl FnMut(&Sge, u64, u64, u64) -> bool,
    ) -> bool {
        let base = slot * self.caps.max_sge as usize;
        let sges = &self.sq_sges[base..base + self.sq[slot].nsge];
        let (mut skip, mut left, mut done) = (u64::from(from), u64::from(len), 0);
        for s in sges {
            if left == 0 {
                break;
            }
            let l = u64::from(s.len);
            if skip >= l {
                skip -= l;
                continue;
            }
            let n = (l - skip).min(left);
            if !f(s, skip, n, done) {
                return false;
            }
            (done, left, skip) = (done + n, left - n, 0);
        }
        left == 0
    }

    fn complete(&self, seq: u64) -> bool {
        let e = &self.sq[self.slot(seq)];
        match e.op {
            Op::Read { .. } => e.done,
            _ => seq < self.acked && seq < self.push,
        }
    }

    /// Retires complete entries from the head, in order, reporting signaled ones.
    fn retire(&mut self, ctx: &mut Ctx) {
        while self.head < self.push && self.complete(self.head) {
            let e = self.sq[self.slot(self.head)];
            if e.signaled {
                ctx.cq.push_back(self.completion(&e, WcStatus::Success));
            }
            self.head += 1;
        }
    }

    fn completion(&self, e: &SqEntry, status: WcStatus) -> Completion {
        Completion {
            wr_id: e.wr_id,
            qp: self.qp,
            status,
            opcode: opcode(e.op),
            byte_len: if status == WcStatus::Success {
                e.total
            } else {
                0
            },
            invalidated: None,
            vendor_err: 0,
        }
    }

    /// The QP went down: every outstanding work request completes exactly once, in
    /// order: complete ones as Success (if signaled), the failed one with its error,
    /// the rest Flushed; then the Receives (the oldest with its error, if it had one).
    pub fn flush(&mut self, ctx: &mut Ctx) {
        for seq in self.head..self.tail {
            let e = self.sq[self.slot(seq)];
            let status = match self.failed {
                Some((s, st)) if s == seq => st,
                _ if self.complete(seq) => {
                    if !e.signaled {
                        continue;
                    }
                    WcStatus::Success
                }
                _ => WcStatus::Flushed,
            };
            ctx.stats.flushed += u64::from(status == WcStatus::Flushed);
            ctx.cq.push_back(self.completion(&e, status));
        }
        (self.head, self.push) = (self.tail, self.tail);
        self.reads.clear();
        let rq_fail = self.rq_fail.take();
        for (i, r) in self.rq.drain(..).enumerate() {
            let status = match rq_fail {
                Some(st) if i == 0 => st,
                _ => WcStatus::Flushed,
            };
            ctx.stats.flushed += u64::from(status == WcStatus::Flushed);
            ctx.cq.push_back(Completion {
                wr_id: r.wr_id,
                qp: self.qp,
                status,
                opcode: WcOpcode::Recv,
                byte_len: 0,
                invalidated: None,
                vendor_err: 0,
            });
        }
        self.resp.clear();
        self.inbound = None;
        self.failed = None;
    }
}
