//! The kinds of callback the table drives (RFC 8881 §20, RFC 7862 §16.1) and what
//! each one's failures mean, as data (`Policy`): the table (`recall.rs`) has one path
//! that sends, resends and gives up, and asks `Kind::decide` what an event means for
//! the callback; the few things a kind does to its own table when a callback ends
//! (`RecallTable::done`, `give_up`) are the only per-kind code.
//!
//! - CB_RECALL (§20.2, §10.2): resent until answered; the lease ends one the client
//!   never takes (`Delegations::revoke_overdue`).
//! - CB_LAYOUTRECALL (§20.3): the same, the lease ending it through
//!   `Layouts::revoke_overdue`; NFS4ERR_NOMATCHING_LAYOUT means the client holds none.
//! - CB_OFFLOAD (RFC 7862 §16.1): resent until CB_SEQUENCE goes through, whatever
//!   CB_OFFLOAD answers, or until `offload::KEEP_FINISHED` forgets the copy.
//! - CB_NOTIFY_DEVICEID (§20.12): resent like CB_OFFLOAD, dropped after `NOTIFY_TRIES`
//!   lost attempts (the client learns the id is gone from GETDEVICEINFO's
//!   NFS4ERR_NOENT).
//! - CB_GETATTR (§20.1, §10.4.3): never resent; anything but the holder's attributes
//!   recalls the delegation.

use super::{RecallTable, Task, MAX_JOBS, RETRY};
use crate::state::backchannel::{CbAttrs, CbCall, RecallAnswer};
use crate::state::delegations::Delegations;
use crate::state::layouts::Layouts;
use crate::state::offload::OffloadOutcome;
use crate::state::stateid::Stateid;
use crate::state::BackChannelInfo;
use crate::stats::Transport;
use std::time::Instant;

/// CB_RECALL or CB_LAYOUTRECALL answered BAD_STATEID/BADHANDLE (the client has not
/// seen the grant's reply yet — knfsd retries the same race): resent this many
/// times, then left to the lease.
pub(super) const BAD_STATEID_RETRIES: u8 = 2;
/// Lost attempts of one CB_NOTIFY_DEVICEID before it is dropped.
pub(super) const NOTIFY_TRIES: u8 = 30;
/// NFS4ERR_NOMATCHING_LAYOUT (RFC 8881 §15.1.5.5), as a recall answer carries it.
const NOMATCHING_LAYOUT: u32 = 10060;

/// One kind of callback, each with its own queue (by the key its table gives it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// CB_RECALL of a delegation, by delegation stateid.
    Recall,
    /// CB_OFFLOAD of a finished asynchronous COPY, by copy stateid.
    Offload,
    /// CB_LAYOUTRECALL of a pNFS layout, by layout stateid (`layouts_recall.rs`).
    LayoutRecall,
    /// CB_GETATTR to a write delegation's holder, by delegation stateid.
    Getattr,
    /// CB_NOTIFY_DEVICEID of a deleted device id, by the layout table's notice key
    /// (`layouts_notify.rs`).
    Notify,
}

/// What happens to an attempt that got no usable answer: no back channel bound, no
/// reply within `CB_TIMEOUT`, a transport failure (RFC 8167 §5.4), a reply that does
/// not decode or whose CB_SEQUENCE failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lost {
    /// Resent, without limit: something else ends the callback (the lease).
    Resend,
    /// Resent; given up at this many lost attempts.
    ResendUpTo(u8),
    /// Never resent: the first loss gives up.
    GiveUp,
}

/// What the operation's answer does, once CB_SEQUENCE went through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Answers {
    /// A notice: whatever it answered, the client was told.
    Told,
    /// A request the client may put off or refuse (§20.2.3, §20.3.3): NFS4_OK ends
    /// it; NFS4ERR_DELAY is resent; BAD_STATEID/BADHANDLE resent `unknown` times,
    /// then given up; `done_on` ends it too; any other refusal gives up.
    Request { unknown: u8, done_on: Option<u32> },
    /// A question (§20.1.3): NFS4_OK ends it, anything else gives up.
    Question,
}

/// A kind's rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Policy {
    pub lost: Lost,
    pub answers: Answers,
}

/// One event in a callback's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Event {
    /// No usable answer (`Lost`); a resend goes at this time.
    Lost(Instant),
    /// CB_SEQUENCE said NFS4ERR_SEQ_MISORDERED (the slot moved on by one).
    Misordered,
    /// CB_SEQUENCE went through (or the client replayed it without a cached reply:
    /// the call got there, taken as NFS4_OK) and the operation answered this.
    Answered(RecallAnswer),
}

/// What the table does next with the callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// Sent again at this time.
    Resend(Instant),
    /// It got there: the kind's ending (`RecallTable::done`).
    Done,
    /// No more attempts: the kind's ending for a failure (`RecallTable::give_up`).
    GiveUp,
}

impl Kind {
    pub(super) const COUNT: usize = 5;

    pub(super) fn index(self) -> usize {
        self as usize
    }

    pub(super) fn policy(self) -> Policy {
        let request = |done_on| Answers::Request {
            unknown: BAD_STATEID_RETRIES,
            done_on,
        };
        let (lost, answers) = match self {
            Kind::Recall => (Lost::Resend, request(None)),
            Kind::LayoutRecall => (Lost::Resend, request(Some(NOMATCHING_LAYOUT))),
            Kind::Offload => (Lost::Resend, Answers::Told),
            Kind::Notify => (Lost::ResendUpTo(NOTIFY_TRIES), Answers::Told),
            Kind::Getattr => (Lost::GiveUp, Answers::Question),
        };
        Policy { lost, answers }
    }

    /// The operation's name, for the log.
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Recall => "CB_RECALL",
            Kind::Offload => "CB_OFFLOAD",
            Kind::LayoutRecall => "CB_LAYOUTRECALL",
            Kind::Getattr => "CB_GETATTR",
            Kind::Notify => "CB_NOTIFY_DEVICEID",
        }
    }

    /// What giving up means for the client, for the log.
    pub(super) fn end(self) -> &'static str {
        match self {
            Kind::Recall => "the delegation will be revoked after the lease",
            Kind::Offload => "the client must ask OFFLOAD_STATUS",
            Kind::LayoutRecall => "the layout will be revoked after the lease",
            Kind::Getattr => "recalling the delegation",
            Kind::Notify => "the client learns it from GETDEVICEINFO",
        }
    }

    /// What `event` means for a callback of this kind; `strikes` counts its lost
    /// attempts (`Lost::ResendUpTo`) or its BAD_STATEID answers (`Answers::Request`).
    pub(super) fn decide(self, strikes: &mut u8, event: Event, now: Instant) -> Next {
        let p = self.policy();
        match event {
            Event::Lost(at) => match p.lost {
                Lost::Resend => Next::Resend(at),
                Lost::ResendUpTo(n) => {
                    *strikes = strikes.saturating_add(1);
                    if *strikes >= n {
                        Next::GiveUp
                    } else {
                        Next::Resend(at)
                    }
                }
                Lost::GiveUp => Next::GiveUp,
            },
            // The slot moved on: a resend is a new request.
            Event::Misordered if p.lost == Lost::GiveUp => Next::GiveUp,
            Event::Misordered => Next::Resend(now + RETRY),
            Event::Answered(a) => match (p.answers, a) {
                (Answers::Told, _) | (_, RecallAnswer::Accepted) => Next::Done,
                (Answers::Question, _) => Next::GiveUp,
                (Answers::Request { done_on, .. }, RecallAnswer::Refused(st))
                    if done_on == Some(st) =>
                {
                    Next::Done
                }
                (Answers::Request { unknown, .. }, RecallAnswer::Unknown) => {
                    *strikes = strikes.saturating_add(1);
                    if *strikes <= unknown {
                        Next::Resend(now + RETRY)
                    } else {
                        Next::GiveUp
                    }
                }
                (Answers::Request { .. }, RecallAnswer::Later) => Next::Resend(now + RETRY),
                (Answers::Request { .. }, RecallAnswer::Refused(_)) => Next::GiveUp,
            },
        }
    }
}

/// What a callback carries beyond CB_SEQUENCE, read from its table at each attempt.
pub(super) enum Body {
    Recall {
        stateid: Stateid,
        fh: Vec<u8>,
    },
    Offload {
        stateid: Stateid,
        fh: Vec<u8>,
        outcome: OffloadOutcome,
    },
    LayoutRecall {
        stateid: Stateid,
        fh: Vec<u8>,
    },
    Getattr {
        fh: Vec<u8>,
        times: bool,
    },
    Notify {
        deviceid: [u8; 16],
    },
}

impl Body {
    /// The call on `info`'s session, slot 0 with `seqid`.
    pub(super) fn call(&self, info: &BackChannelInfo, seqid: u32) -> CbCall<'_> {
        let (session, minor) = (info.session, info.minor);
        match self {
            Body::Recall { stateid, fh } => CbCall::Recall {
                session,
                minor,
                seqid,
                stateid: *stateid,
                fh,
            },
            Body::Offload {
                stateid,
                fh,
                outcome,
            } => CbCall::Offload {
                session,
                seqid,
                stateid: *stateid,
                fh,
                outcome: *outcome,
            },
            Body::LayoutRecall { stateid, fh } => CbCall::LayoutRecall {
                session,
                minor,
                seqid,
                stateid: *stateid,
                fh,
            },
            Body::Getattr { fh, times } => CbCall::Getattr {
                session,
                minor,
                seqid,
                fh,
                times: *times,
            },
            Body::Notify { deviceid } => CbCall::NotifyDelete {
                session,
                minor,
                seqid,
                deviceid: *deviceid,
            },
        }
    }
}

/// The tables a pass reads callbacks from: the layout table only in
/// `step_layouts`, which alone sends the layout kinds.
#[derive(Clone, Copy)]
pub(super) struct Tables<'a> {
    pub dl: &'a Delegations,
    pub layouts: Option<&'a Layouts>,
}

impl Tables<'_> {
    /// The client and body of `kind`'s callback `other`; `None` once its table no
    /// longer wants it sent (returned, forgotten, purged).
    pub(super) fn target(&self, kind: Kind, other: &[u8; 12]) -> Option<(u64, Body)> {
        let dl = self.dl;
        match kind {
            Kind::Recall => dl
                .recall_target(other)
                .map(|(c, stateid, fh)| (c, Body::Recall { stateid, fh })),
            Kind::Offload => dl.offloads.notice(other).map(|n| {
                let (stateid, fh, outcome) = (n.stateid, n.fh, n.outcome);
                (
                    n.clientid,
                    Body::Offload {
                        stateid,
                        fh,
                        outcome,
                    },
                )
            }),
            Kind::Getattr => dl
                .getattr_target(other)
                .map(|(c, fh, times)| (c, Body::Getattr { fh, times })),
            Kind::LayoutRecall => self
                .layouts?
                .recall_target(other)
                .map(|(c, stateid, fh)| (c, Body::LayoutRecall { stateid, fh })),
            Kind::Notify => self
                .layouts?
                .notice_target(other)
                .map(|(c, deviceid)| (c, Body::Notify { deviceid })),
        }
    }
}

/// How each kind ends, in its own table.
impl RecallTable {
    /// Queues `kind`'s callback `other` to go at `now` (once; at most `MAX_JOBS` of a
    /// kind: past that it is not queued, and the kind's other end takes over).
    pub(super) fn enqueue(&mut self, kind: Kind, other: [u8; 12], now: Instant) -> bool {
        let q = &mut self.queues[kind.index()];
        if q.len() >= MAX_JOBS {
            return false;
        }
        q.entry(other).or_insert(Task::due(now));
        true
    }

    /// It got there (`answer` what the operation said, `attrs` a CB_GETATTR's).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn done(
        &mut self,
        kind: Kind,
        other: [u8; 12],
        dl: &Delegations,
        via: Transport,
        answer: RecallAnswer,
        attrs: Option<CbAttrs>,
        now: Instant,
    ) {
        self.queues[kind.index()].remove(&other);
        if answer != RecallAnswer::Accepted && kind.policy().answers == Answers::Told {
            tracing::info!(?answer, "{} answered with an error", kind.name());
        }
        match kind {
            Kind::Recall => dl.recall_answered(via),
            Kind::Offload => dl.offloads.told(&other),
            // NFS4ERR_NOMATCHING_LAYOUT: forgotten by the next `step_layouts`.
            Kind::LayoutRecall if answer != RecallAnswer::Accepted => self.layouts_gone.push(other),
            Kind::LayoutRecall => {}
            Kind::Getattr => match attrs {
                Some(a) => dl.getattr_answered(&other, a),
                None => self.give_up(kind, other, dl, now),
            },
            Kind::Notify => self.notices_done.push(other),
        }
    }

    /// No more attempts of `kind`'s callback `other`.
    pub(super) fn give_up(&mut self, kind: Kind, other: [u8; 12], dl: &Delegations, now: Instant) {
        self.queues[kind.index()].remove(&other);
        match kind {
            // The lease (or `offload::KEEP_FINISHED`) ends these.
            Kind::Recall | Kind::LayoutRecall | Kind::Offload => {}
            // §10.4.3: no attributes from the holder, so the delegation is recalled.
            Kind::Getattr => {
                if dl.getattr_failed(&other) {
                    self.enqueue(Kind::Recall, other, now);
                }
            }
            // Dropped from the layout table by the next `step_layouts`.
            Kind::Notify => self.notices_done.push(other),
        }
    }

    /// A CB_GETATTR a reader asked for (`Job::Getattr`): queued once (a full table
    /// recalls instead).
    pub(super) fn queue_getattr(&mut self, dl: &Delegations, other: [u8; 12], now: Instant) {
        if !self.enqueue(Kind::Getattr, other, now) {
            self.give_up(Kind::Getattr, other, dl, now);
        }
    }

    /// CB_GETATTRs waiting or in flight.
    pub fn getattrs(&self) -> usize {
        self.queues[Kind::Getattr.index()].len()
    }

    /// CB_NOTIFY_DEVICEIDs waiting or in flight.
    pub fn notices(&self) -> usize {
        self.queues[Kind::Notify.index()].len()
    }

    /// Layout recalls being driven.
    pub fn layout_recalls(&self) -> usize {
        self.queues[Kind::LayoutRecall.index()].len()
    }
}

#[cfg(test)]
#[path = "recall_kinds_tests.rs"]
mod tests;
