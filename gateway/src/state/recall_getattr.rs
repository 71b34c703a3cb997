//! CB_GETATTR in the callback table (RFC 8881 §20.1, §10.4.3; the delegation side is
//! `delegations_getattr.rs`): sent once on the holder's current back channel, slot 0
//! like every callback; the answer goes to the delegation table, and anything but an
//! answer — no back channel, a call too large for it, a failed or unusable reply, a
//! timeout, a lost RDMA connection — turns into a recall of the delegation, driven
//! from here on as any other (`RecallTable::tasks`).

use super::{Queue, RecallTable, Task, What, MAX_JOBS};
use crate::state::backchannel::{CallbackWire, CbAttrs, CbCall, RecallAnswer, RecallReply};
use crate::state::delegations::Delegations;
use crate::state::recall::Outcall;
use crate::state::BackChannelInfo;
use std::time::Instant;

impl RecallTable {
    /// CB_GETATTRs waiting or in flight.
    pub fn getattrs(&self) -> usize {
        self.getattr_tasks.len()
    }

    /// A reader asked (`Job::Getattr`): queued once (a full table recalls instead).
    pub(super) fn queue_getattr(&mut self, dl: &Delegations, other: [u8; 12], now: Instant) {
        if self.getattr_tasks.len() < MAX_JOBS {
            self.getattr_tasks.entry(other).or_insert(Task::due(now));
        } else {
            self.getattr_failed(dl, other, now);
        }
    }

    /// Sends the due CB_GETATTRs, each on its holder's current back channel; one
    /// waits while the session's slot is busy.
    pub(super) fn send_getattrs(
        &mut self,
        wire: &dyn CallbackWire,
        dl: &Delegations,
        lookup: &dyn Fn(u64) -> Option<BackChannelInfo>,
        now: Instant,
        out: &mut Vec<Outcall>,
    ) {
        for other in self.due(Queue::Getattrs, now) {
            let Some((clientid, fh, times)) = dl.getattr_target(&other) else {
                self.getattr_tasks.remove(&other);
                continue;
            };
            let Some(info) = lookup(clientid) else {
                self.getattr_failed(dl, other, now);
                continue;
            };
            let Some(seqid) = self.claim_slot(info.session) else {
                continue;
            };
            let call = CbCall::Getattr {
                session: info.session,
                minor: info.minor,
                seqid,
                fh: &fh,
                times,
            };
            let what = What::Getattr {
                other,
                session: info.session,
            };
            let q = Queue::Getattrs;
            if self
                .post(q, other, &call, what, &info, wire, dl, now, out)
                .is_none()
            {
                tracing::info!(
                    clientid,
                    "CB_GETATTR does not fit the back channel; recalling"
                );
                self.getattr_failed(dl, other, now);
            }
        }
    }

    /// The holder's reply: the slot moves on as for a recall; the attributes, or a
    /// recall when there are none.
    pub(super) fn on_getattr_reply(
        &mut self,
        dl: &Delegations,
        other: [u8; 12],
        session: [u8; 16],
        (reply, attrs): (RecallReply, Option<CbAttrs>),
        now: Instant,
    ) {
        self.getattr_tasks.remove(&other);
        let advance = !matches!(reply, RecallReply::NoAnswer | RecallReply::SeqFailed);
        self.free_slot(&session, advance);
        match (reply, attrs) {
            (RecallReply::Sequenced(RecallAnswer::Accepted), Some(a)) => {
                dl.getattr_answered(&other, a)
            }
            _ => {
                tracing::info!(?reply, "CB_GETATTR failed; recalling the delegation");
                self.getattr_failed(dl, other, now);
            }
        }
    }

    /// CB_GETATTR of `other` failed: no more of it; its recall starts now.
    pub(super) fn getattr_failed(&mut self, dl: &Delegations, other: [u8; 12], now: Instant) {
        self.getattr_tasks.remove(&other);
        if dl.getattr_failed(&other) && self.tasks.len() < MAX_JOBS {
            self.tasks.entry(other).or_insert(Task::due(now));
        }
    }
}

#[cfg(test)]
#[path = "recall_getattr_tests.rs"]
mod tests;
