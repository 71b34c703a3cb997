//! The reactor's side of QoS (`crate::qos`): calls a rule holds back wait here,
//! received but not classified, and are classified when their buckets refill.
//!
//! Why this slows a client instead of failing it: a held TCP call stays in flight on
//! its connection (`engine::tcp` counts it until it is answered), so once
//! `tcp.max_inflight` are held the transport stops reading the socket and TCP flow
//! control holds the client; a held RPC-over-RDMA call keeps the credit it came
//! with until its reply grants it back, so the client's credits run out the same way
//! (RFC 8166 §3.3.1). Neither costs a connection anything else: no timeout counts a
//! call in flight (`tcp.record_timeout_s` counts partial records, the send timeouts
//! queued replies).
//!
//! Memory: a held TCP record keeps its pool buffer, so it reserves its length in its
//! connection's reply budget (`tcp.max_queued_mib`) until it is released: a client
//! pipelining 1 MiB WRITEs under a write limit stops being read after a few of them,
//! instead of holding the reactor's large buffers that other clients need.

use super::reactor::ReactorState;
use super::transport::Link;
use crate::qos::Cost;
use crate::stats::CallStat;
use engine::mem::Buf;
use engine::rdma::server::Delivered;
use engine::tcp::{Budget, Charge};
use std::net::SocketAddr;

/// A call a QoS rule holds (what the reactor needs to classify it later).
pub(crate) enum Held {
    /// A TCP record: its link, peer, record and arrival, and the charge its length
    /// holds in its connection's reply budget while held (given back by Drop).
    Tcp(Link, SocketAddr, Buf, CallStat, Option<Charge>),
    /// An RPC-over-RDMA call as the server delivered it, counted on arrival.
    Rdma(Delivered, CallStat),
}

pub(crate) type Gate = crate::qos::Gate<Held>;

/// Offers a TCP record costing `cost` (the reactor's one peek, `Router::count_in`)
/// to the gate: the record back to classify now, or `None`: held, its length charged
/// to its connection's `budget` (the transport counts the record in flight until it
/// is answered).
/// Out of line: the reactor's call path without rules keeps only the branch on
/// `Gate::on` (measured, docs/performance.md "QoS").
#[inline(never)]
pub(crate) fn tcp(
    gate: &mut Gate,
    conn: Link,
    peer: SocketAddr,
    rec: Buf,
    st: CallStat,
    cost: Cost,
    budget: &Budget,
) -> Option<Buf> {
    let len = rec.len();
    match gate.offer(peer.ip(), cost, Held::Tcp(conn, peer, rec, st, None)) {
        Some(Held::Tcp(_, _, rec, _, _)) => Some(rec),
        Some(other) => {
            debug_assert!(false, "the gate gave back another call");
            drop(other);
            None
        }
        None => {
            if let Some(Held::Tcp(.., charge)) = gate.last_held() {
                *charge = budget.charge(len);
            }
            None
        }
    }
}

/// Offers an RDMA call costing `cost` (counted as `st`) to the gate: back to
/// classify now, or `None` (held).
#[inline(never)]
pub(crate) fn rdma(gate: &mut Gate, d: Delivered, st: CallStat, cost: Cost) -> Option<Delivered> {
    match gate.offer(d.peer.ip(), cost, Held::Rdma(d, st)) {
        Some(Held::Rdma(d, _)) => Some(d),
        _ => None,
    }
}

impl ReactorState {
    /// Classifies the held calls whose buckets refilled, oldest first (TCP ones
    /// reserve their reply charge now, as parked records do; RDMA replies are posted
    /// by this pass's RDMA pump). Returns how many.
    pub(super) fn release_held(&mut self) -> usize {
        let mut ready = std::mem::take(&mut self.held_ready);
        let n = self.qos.release(&mut |h| ready.push(h));
        for h in ready.drain(..) {
            match h {
                Held::Tcp(conn, peer, rec, st, charge) => {
                    // The record's charge goes back; its reply is charged as a
                    // parked record's is (`take_record`).
                    drop(charge);
                    self.take_record(conn, peer, rec, st)
                }
                Held::Rdma(d, st) => self.take_rdma_call(d, st),
            }
        }
        self.held_ready = ready;
        if n > 0 {
            self.end_of_round();
        }
        n
    }
}
