//! A connection's reply budget as values: the bytes a delivered record reserves while
//! its reply is produced (`tcp.max_queued`, see `conn.rs`) are a [`Charge`], given
//! back when the charge is dropped — when the caller hands the reply over, or when the
//! call is dropped unanswered on whatever thread holds it — so no release is paired by
//! hand, and a reply that never comes holds no budget.
//!
//! Sharing rule: the counter is shared by the connection (its reactor reads it before
//! each record) and the charges made against it (which may be dropped on a worker
//! thread), so it is an atomic; relaxed order is enough, since it only gates reading
//! and nothing else is published through it. A charge outlives its connection
//! harmlessly: the counter goes with the last charge.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// One connection's reserved reply bytes (the sum of its live charges).
#[derive(Debug, Default)]
pub(super) struct Reserved(Arc<AtomicUsize>);

impl Reserved {
    /// Bytes reserved now.
    #[inline]
    pub fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    /// Reserves `bytes` until the returned charge is dropped (`None` for 0 bytes:
    /// nothing to give back, no reference taken).
    #[inline]
    pub fn charge(&self, bytes: usize) -> Option<Charge> {
        if bytes == 0 {
            return None;
        }
        self.0.fetch_add(bytes, Ordering::Relaxed);
        Some(Charge {
            reserved: self.0.clone(),
            bytes,
        })
    }
}

/// Reply bytes reserved in one TCP connection's budget for a call being answered,
/// given back when dropped (see the module docs).
#[derive(Debug)]
#[must_use = "a charge gives its bytes back when dropped"]
pub struct Charge {
    reserved: Arc<AtomicUsize>,
    bytes: usize,
}

impl Charge {
    /// The bytes this charge holds.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.reserved.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// What `TcpTransport::poll` lends its callback with each record: the record's
/// connection's budget, to charge the reply bytes the call will need before the
/// connection's next record is read.
pub struct Budget<'a>(pub(super) &'a Reserved);

impl Budget<'_> {
    /// Reserves `bytes` of the connection's reply budget until the charge is dropped.
    #[inline]
    pub fn charge(&self, bytes: usize) -> Option<Charge> {
        self.0.charge(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_charge_gives_its_bytes_back_when_dropped_on_any_thread() {
        let r = Reserved::default();
        let a = r.charge(100).unwrap();
        let b = r.charge(28).unwrap();
        assert!(r.charge(0).is_none());
        assert_eq!(r.get(), 128);
        drop(a);
        assert_eq!(r.get(), 28);
        std::thread::spawn(move || drop(b)).join().unwrap();
        assert_eq!(r.get(), 0);
    }
}
