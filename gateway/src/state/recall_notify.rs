//! CB_NOTIFY_DEVICEID in the callback table (RFC 8881 §20.12; the layout table's side
//! is `layouts_notify.rs`): each deletion the layout table lets go is sent on its
//! client's current back channel, slot 0 like every callback, and resent under the
//! recalls' rules until CB_SEQUENCE goes through (whatever CB_NOTIFY_DEVICEID itself
//! answers: a notification is not a request the client can refuse usefully); one
//! that cannot reach its client after `MAX_TRIES` attempts is given up (the client
//! learns the id is gone from GETDEVICEINFO's NFS4ERR_NOENT).

use super::{retry_in, Queue, RecallTable, Task, What, MAX_JOBS, RETRY};
use crate::state::backchannel::{CallbackWire, CbCall, RecallReply};
use crate::state::delegations::Delegations;
use crate::state::layouts::Layouts;
use crate::state::recall::Outcall;
use crate::state::BackChannelInfo;
use std::time::Instant;

/// Attempts of one notice before it is given up.
const MAX_TRIES: u8 = 30;

impl RecallTable {
    /// CB_NOTIFY_DEVICEIDs waiting or in flight.
    pub fn notices(&self) -> usize {
        self.notice_tasks.len()
    }

    /// `step_layouts`' part for deletions: drops the told ones from the layout table,
    /// takes the ones that may go, sends the due ones.
    pub(super) fn step_notices(
        &mut self,
        wire: &dyn CallbackWire,
        dl: &Delegations,
        layouts: &Layouts,
        lookup: &dyn Fn(u64) -> Option<BackChannelInfo>,
        now: Instant,
        out: &mut Vec<Outcall>,
    ) {
        for key in std::mem::take(&mut self.notices_done) {
            layouts.notified(&key);
        }
        for key in layouts.take_notices() {
            if self.notice_tasks.len() < MAX_JOBS {
                self.notice_tasks.entry(key).or_insert(Task::due(now));
            } else {
                layouts.notified(&key);
            }
        }
        for key in self.due(Queue::Notices, now) {
            let Some((clientid, deviceid)) = layouts.notice_target(&key) else {
                self.notice_tasks.remove(&key);
                continue;
            };
            let Some(info) = lookup(clientid) else {
                self.notice_failed(&key, now + RETRY);
                continue;
            };
            let Some(seqid) = self.claim_slot(info.session) else {
                continue;
            };
            let call = CbCall::NotifyDelete {
                session: info.session,
                minor: info.minor,
                seqid,
                deviceid,
            };
            let what = What::Notify {
                other: key,
                session: info.session,
            };
            if self
                .post(Queue::Notices, key, &call, what, &info, wire, dl, now, out)
                .is_none()
            {
                tracing::info!(clientid, "CB_NOTIFY_DEVICEID does not fit the back channel");
                self.notices_done.push(key);
            }
        }
    }

    /// No answer from the client (or no back channel): tried again at `at`, or
    /// given up after `MAX_TRIES`.
    pub(super) fn notice_failed(&mut self, key: &[u8; 12], at: Instant) {
        let give_up = self.notice_tasks.get_mut(key).is_some_and(|t| {
            t.bad_stateid = t.bad_stateid.saturating_add(1);
            t.bad_stateid >= MAX_TRIES
        });
        if give_up {
            self.notice_tasks.remove(key);
            self.notices_done.push(*key);
        } else {
            retry_in(&mut self.notice_tasks, key, at);
        }
    }

    /// The client's reply: told once CB_SEQUENCE went through.
    pub(super) fn on_notify_reply(
        &mut self,
        key: [u8; 12],
        session: [u8; 16],
        reply: RecallReply,
        now: Instant,
    ) {
        if let Some(t) = self.notice_tasks.get_mut(&key) {
            t.retransmit = None;
        }
        match reply {
            RecallReply::Sequenced(answer) => {
                self.free_slot(&session, true);
                if answer != crate::state::backchannel::RecallAnswer::Accepted {
                    tracing::info!(?answer, "CB_NOTIFY_DEVICEID answered with an error");
                }
                self.notice_tasks.remove(&key);
                self.notices_done.push(key);
            }
            RecallReply::SeqUncached => {
                self.free_slot(&session, true);
                self.notice_tasks.remove(&key);
                self.notices_done.push(key);
            }
            RecallReply::SeqMisordered => {
                self.free_slot(&session, true);
                retry_in(&mut self.notice_tasks, &key, now + RETRY);
            }
            RecallReply::NoAnswer | RecallReply::SeqFailed => {
                self.free_slot(&session, false);
                self.notice_failed(&key, now + RETRY);
            }
        }
    }
}
