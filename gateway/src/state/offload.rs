//! Asynchronous COPYs (RFC 7862 §15.2.3, §4.6): the copies a client let the server
//! finish after the COPY reply, each named by a stateid of kind `Copy` (the reply's
//! wr_callback_id). The table answers OFFLOAD_STATUS (§15.9) and OFFLOAD_CANCEL
//! (§15.8), and holds each finished copy's result until CB_OFFLOAD (§16.1) has told
//! its client; the callback thread (`recall::RecallTable`) sends that callback.
//!
//! The copy itself runs on a thread of its own (the front end starts it); it ends with
//! `finish`, and the callback thread finds the result with `take_finished`. Bounded:
//! at most `MAX_RUNNING` copies at once (`MAX_PER_CLIENT` per client) and `MAX_KEPT`
//! records in all; a COPY over a bound is run synchronously instead (the server's
//! choice, §15.2.3), so no client can take the copy threads from the others.

use super::opens::stateids::{self, Kind};
use super::stateid::Stateid;
use crossbeam_queue::ArrayQueue;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Copies running at once, in all and per client.
pub const MAX_RUNNING: usize = 8;
pub const MAX_PER_CLIENT: usize = 4;
/// Records kept (running, or finished and not yet told).
const MAX_KEPT: usize = 256;
/// A finished copy whose CB_OFFLOAD never got through is forgotten after this long
/// (the client can still have asked OFFLOAD_STATUS meanwhile).
pub const KEEP_FINISHED: Duration = Duration::from_secs(300);

/// How an asynchronous copy ended, in the terms CB_OFFLOAD carries (offload_info4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffloadOutcome {
    /// write_response4: bytes copied, whether FILE_SYNC, the write verifier.
    Copied {
        count: u64,
        file_sync: bool,
        verifier: [u8; 8],
    },
    /// The nfsstat4 the copy failed with, and the bytes copied before it failed.
    Failed { status: u32, copied: u64 },
}

#[derive(Debug, Clone)]
struct Offload {
    clientid: u64,
    /// The destination's file handle (CB_OFFLOAD's coa_fh).
    fh: Vec<u8>,
    seqid: u32,
    result: Option<(OffloadOutcome, Instant)>,
}

/// The callback a finished copy owes its client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffloadNotice {
    pub clientid: u64,
    pub stateid: Stateid,
    pub fh: Vec<u8>,
    pub outcome: OffloadOutcome,
}

#[derive(Default)]
struct Table {
    by_other: HashMap<[u8; 12], Offload>,
}

impl Table {
    fn running(&self, clientid: Option<u64>) -> usize {
        self.by_other
            .values()
            .filter(|o| o.result.is_none() && clientid.is_none_or(|c| c == o.clientid))
            .count()
    }
}

/// The table, shared by the front end (start, status, cancel), the copy threads
/// (finish) and the callback thread (notices). A handle: clones share one table.
#[derive(Clone)]
pub struct Offloads {
    table: Arc<Mutex<Table>>,
    /// Finished copies for the callback thread (bounded like the table).
    finished: Arc<ArrayQueue<[u8; 12]>>,
}

impl Default for Offloads {
    fn default() -> Self {
        Offloads {
            table: Arc::default(),
            finished: Arc::new(ArrayQueue::new(MAX_KEPT)),
        }
    }
}

impl Offloads {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a copy about to run for `clientid` into the file `fh`: its callback
    /// id, or `None` when the bounds say run it synchronously.
    pub fn start(&self, clientid: u64, fh: &[u8]) -> Option<Stateid> {
        let mut t = self.lock();
        if t.by_other.len() >= MAX_KEPT
            || t.running(None) >= MAX_RUNNING
            || t.running(Some(clientid)) >= MAX_PER_CLIENT
        {
            return None;
        }
        // Unguessable: another client cannot name (cancel) this copy.
        let mut other: [u8; 12] = rand::random();
        other[..4].copy_from_slice(&stateids::boot_verifier().to_be_bytes());
        other[4] = Kind::Copy as u8;
        t.by_other.insert(
            other,
            Offload {
                clientid,
                fh: fh.to_vec(),
                seqid: 1,
                result: None,
            },
        );
        Some(Stateid { seqid: 1, other })
    }

    /// The copy `other` ended: its result is kept for OFFLOAD_STATUS and queued for
    /// CB_OFFLOAD. `false` when it was cancelled meanwhile (nothing is told).
    pub fn finish(&self, other: &[u8; 12], outcome: OffloadOutcome) -> bool {
        let mut t = self.lock();
        let Some(o) = t.by_other.get_mut(other) else {
            return false;
        };
        o.result = Some((outcome, Instant::now()));
        drop(t);
        if self.finished.push(*other).is_err() {
            tracing::warn!("offload queue full; a CB_OFFLOAD is left to OFFLOAD_STATUS");
        }
        true
    }

    /// Forgets a copy whose thread could not be started (it is run synchronously).
    pub fn abandon(&self, other: &[u8; 12]) {
        self.lock().by_other.remove(other);
    }

    /// OFFLOAD_STATUS (§15.9): `None` when `sid` names no copy of `clientid`
    /// (NFS4ERR_BAD_STATEID); else the result once finished.
    pub fn status(&self, clientid: u64, sid: &Stateid) -> Option<Option<OffloadOutcome>> {
        let t = self.lock();
        let o = t.by_other.get(&sid.other)?;
        (o.clientid == clientid).then(|| o.result.map(|(r, _)| r))
    }

    /// OFFLOAD_CANCEL (§15.8): forgets the copy (no CB_OFFLOAD will be sent for it;
    /// a copy already under way inside the store completes there). `false` when `sid`
    /// names no copy of `clientid`.
    pub fn cancel(&self, clientid: u64, sid: &Stateid) -> bool {
        let mut t = self.lock();
        match t.by_other.get(&sid.other) {
            Some(o) if o.clientid == clientid => {
                t.by_other.remove(&sid.other);
                true
            }
            _ => false,
        }
    }

    /// The next finished copy's callback (the callback thread's input), if it is
    /// still wanted.
    pub(crate) fn take_finished(&self) -> Option<[u8; 12]> {
        self.finished.pop()
    }

    /// What CB_OFFLOAD for `other` carries, while the copy is finished and not yet
    /// told (or cancelled).
    pub(crate) fn notice(&self, other: &[u8; 12]) -> Option<OffloadNotice> {
        let t = self.lock();
        let o = t.by_other.get(other)?;
        let (outcome, _) = o.result?;
        Some(OffloadNotice {
            clientid: o.clientid,
            stateid: Stateid {
                seqid: o.seqid,
                other: *other,
            },
            fh: o.fh.clone(),
            outcome,
        })
    }

    /// The client answered CB_OFFLOAD for `other` (or it could not be told for
    /// `KEEP_FINISHED`): the record goes.
    pub(crate) fn told(&self, other: &[u8; 12]) {
        self.lock().by_other.remove(other);
    }

    /// Forgets finished copies older than `KEEP_FINISHED` at `now`; how many.
    pub(crate) fn expire(&self, now: Instant) -> usize {
        let mut t = self.lock();
        let before = t.by_other.len();
        t.by_other.retain(|_, o| {
            o.result
                .is_none_or(|(_, at)| now.saturating_duration_since(at) < KEEP_FINISHED)
        });
        before - t.by_other.len()
    }

    /// Copies known (running or finished and not yet told).
    pub fn len(&self) -> usize {
        self.lock().by_other.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
#[path = "offload_tests.rs"]
mod tests;
