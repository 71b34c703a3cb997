//! The callback thread (docs/architecture.md §8 "Callbacks"): owns the callback table
//! (`nfs4::callback::RecallDriver`), wakes on new jobs (probes, recalls), on callback
//! replies routed by reactors, and on its next timeout, and hands each record to the
//! reactor that owns the connection through that reactor's `calls` ring (a full ring
//! or an empty pool drops the record: it times out and is resent). Callbacks are rare:
//! this thread sleeps almost always.

use super::Shared;
use crate::nfs4::callback::RecallDriver;
use crate::state::recall::Outcall;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest sleep between passes (revocation after the lease is checked at least this
/// often).
const TICK: Duration = Duration::from_millis(500);

pub(crate) fn spawn(
    shared: &Arc<Shared>,
    stop: &Arc<AtomicBool>,
) -> std::io::Result<JoinHandle<()>> {
    let owner = shared.clone();
    let stop = stop.clone();
    let h = crate::supervise::spawn("callbacks".into(), None, move || {
        let shared = owner;
        let mut driver = RecallDriver::default();
        let dl = &shared.state.delegations;
        let lookup = |c: u64| shared.state.clients.lookup_backchannel(c);
        while !stop.load(Ordering::Acquire) {
            let now = Instant::now();
            // Supervision policy: a bug met while handling one client's callback
            // reply costs that pass (counted, logged), not the gateway; the table is
            // rebuilt empty (outstanding recalls end by revocation after the lease).
            // Layout recalls (CB_LAYOUTRECALL) after the pass that matched replies.
            let pass = || {
                let mut calls = driver.step(dl, &lookup, now);
                calls.extend(driver.step_layouts(dl, &shared.state.layouts, &lookup, now));
                calls
            };
            match crate::supervise::request("callbacks: one pass", pass) {
                Ok(calls) => {
                    for call in calls {
                        deliver(&shared, call);
                    }
                }
                Err(crate::supervise::Panicked) => driver = RecallDriver::default(),
            }
            // Courtesy clients: marked, expired after `nfs4.courtesy_s` or once a
            // conflict took their delegation (`state/expiry.rs`).
            shared.state.sweep();
            std::thread::park_timeout(driver.next_due(Instant::now(), TICK));
        }
    })?;
    shared
        .state
        .delegations
        .inbox
        .set_thread(h.thread().clone());
    Ok(h)
}

/// Moves one callback record to its connection's reactor, TCP or RPC-over-RDMA (the
/// reactor sends an RDMA one with `RdmaServer::send_callback`, RFC 8167). The record
/// goes into a pool buffer after room for the record mark, which only TCP sends.
fn deliver(shared: &Shared, call: Outcall) {
    let Some(link) = shared.reactors.get(call.conn.reactor) else {
        return;
    };
    let n = super::dispatch::MARK + call.record.len();
    let Some(mut buf) = link.pools.alloc(n) else {
        tracing::debug!("no pool buffer for a callback; it will be retried");
        return;
    };
    buf.spare_mut()[super::dispatch::MARK..n].copy_from_slice(&call.record);
    buf.set_len(n);
    if link.calls.push((call.conn.kind, buf)).is_err() {
        tracing::debug!("callback ring full; the callback will be retried");
        return;
    }
    link.bell.ring();
}
