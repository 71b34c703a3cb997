//! CB_GETATTR for write delegations (RFC 8881 §10.4.3, §20.1): when another client
//! or NFSv3 reads the size or change of a file under a write delegation, the server
//! asks the holder (CB_GETATTR of change and size) instead of recalling it, and the
//! holder keeps its delegation.
//!
//! The rules, §10.4.3's: at the grant the delegation records the file's change
//! attribute (`sc`, `note_grant_change`). The holder answers its change (`cc`) and
//! size. The file counts as modified at the holder when `cc != sc` or its size is
//! not the server's, and stays so until the delegation ends (the client may answer
//! the same `cc` after writing again). While modified, each answer is presented as
//! the holder's size with time_modify = time_metadata = now, written into the
//! file's metadata once per answer (§10.4.3 SHOULD: the change attribute is the ctime,
//! `nfs4::attrs::change_of`, so every presentation moves it past every earlier one
//! and it never goes back, whatever the holder then writes or drops). Unmodified: the
//! server's own attributes are the truth and are answered as they are.
//!
//! The wait: the first reader starts a CB_GETATTR (the callback thread sends it,
//! `recall_kinds.rs`) and its worker waits up to `CB_GETATTR_WAIT` for the answer
//! (workers may block; reactors never get here: a held file is never answered from
//! their caches). Not answered by then: NFS4ERR_DELAY / NFS3ERR_JUKEBOX, and the
//! retry takes the answer: any answer serves readers for `FRESH`, one nobody took
//! yet for `UNSERVED` (an NFSv3 client retries JUKEBOX after 5 s). A CB_GETATTR that fails, times
//! out or cannot be sent turns into the recall this replaced (`getattr_failed`).

use super::{block, DState, Delegations, Table};
use crate::fs::{FileModel, Node, SetAttr, SetTime};
use crate::state::backchannel::CbAttrs;
use crate::state::recall::Job;
use crate::state::stateid::Stateid;
use crate::state::Conflict;
use std::time::{Duration, Instant};

/// How long a worker waits for the holder's answer before answering DELAY/JUKEBOX.
pub const CB_GETATTR_WAIT: Duration = Duration::from_millis(100);
/// An answer this recent serves a reader without asking again.
const FRESH: Duration = Duration::from_secs(1);
/// ... and one no reader took yet serves the first that comes within this long: the
/// reader that asked retries after its DELAY or JUKEBOX (Linux's NFSv3 client waits
/// 5 s), and must not find its answer stale and ask again for ever.
const UNSERVED: Duration = Duration::from_secs(10);
/// A question with no answer and no failure after this long is asked again: its job
/// may have been dropped (a full callback queue drops jobs, `recall::Inbox::push`), and
/// a question never sent would leave every reader of the file waiting for ever. Twice
/// the callback timeout, so a CB_GETATTR still in flight has ended by then.
#[cfg(not(test))]
const ASK_AGAIN: Duration = Duration::from_secs(2 * crate::state::recall::CB_TIMEOUT.as_secs());
/// (Short in unit tests, which cannot wait ten seconds.)
#[cfg(test)]
pub(crate) const ASK_AGAIN: Duration = Duration::from_millis(200);

/// One write delegation's CB_GETATTR record.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct AttrProbe {
    /// §10.4.3's `sc`: the change attribute at the grant (`None`: not known).
    sc: Option<u64>,
    /// The holder reported a change once: presented as modified until the end.
    modified: bool,
    /// A CB_GETATTR queued or in flight since.
    asked: Option<Instant>,
    /// The last answer and when it came.
    answer: Option<(Instant, CbAttrs)>,
    /// No reader took the last answer yet.
    unserved: bool,
    /// The answer (by its time) whose presentation last moved the file's times: the
    /// same answer presented again moves nothing (one metadata write per answer).
    presented: Option<Instant>,
}

/// What a reader of a file's attributes (size, change, times) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttrVerdict {
    /// No other client's write delegation, or the holder reported no change: the
    /// server's attributes are the answer.
    Go,
    /// Answer NFS4ERR_DELAY / NFS3ERR_JUKEBOX (a CB_GETATTR or a recall is under way).
    Wait,
    /// The holder has modified the file: answer its `size`, and the times and change
    /// the file model now has (just moved to now).
    Present { size: u64 },
}

/// What the table says of the holder before the file model is consulted.
enum Holder {
    None,
    Wait,
    Answer {
        other: [u8; 12],
        attrs: CbAttrs,
        sc: Option<u64>,
        modified: bool,
        /// When the answer came, and whether it was presented (times moved) already.
        at: Instant,
        presented: bool,
        /// The original times of a delegation that delegated them (RFC 9754 §6).
        times: Option<super::times::GrantTimes>,
    },
}

/// The write delegation on `fileid` that a caller other than its holder reads
/// through (`clientid` `None`: NFSv3), if any (not revoked).
fn foreign_write(t: &Table, fileid: u64, clientid: Option<u64>) -> Option<[u8; 12]> {
    t.by_file.get(&fileid)?.iter().copied().find(|o| {
        t.by_other
            .get(o)
            .is_some_and(|d| d.write && d.state != DState::Revoked && Some(d.clientid) != clientid)
    })
}

/// The times a presentation writes: the server's now for the modify time, or, for a
/// delegation of the times (`times`, RFC 9754 §6), what the holder answered, each
/// vetted (`times::vet`: before the grant's ignored, in the future clamped); a
/// holder that sent no modify time, or one not after the grant's, leaves it to now.
fn presented_times(attrs: &CbAttrs, times: Option<super::times::GrantTimes>) -> SetAttr {
    let mut set = SetAttr {
        mtime: SetTime::ServerTime,
        ..SetAttr::default()
    };
    if let Some(g) = times {
        let now = crate::fs::NfsTime::now();
        if let Some(t) = attrs.mtime.and_then(|t| super::times::vet(t, g.mtime, now)) {
            set.mtime = SetTime::Client(t);
        }
        if let Some(t) = attrs.atime.and_then(|t| super::times::vet(t, g.atime, now)) {
            set.atime = SetTime::Client(t);
        }
    }
    set
}

impl Delegations {
    /// OPEN granted the write delegation `s` on a file whose change attribute is now
    /// `change` (§10.4.3's `sc`).
    pub fn note_grant_change(&self, s: &Stateid, change: u64) {
        if let Some(d) = self.lock().by_other.get_mut(&s.other) {
            d.probe.sc = Some(change);
        }
    }

    /// Another client's (or NFSv3's) read of `node`'s size, change or times: what to
    /// answer (the module's rules). `wait`: how long this worker may wait for the
    /// holder's answer. One atomic load while no write delegation is out.
    pub fn settle_attrs(
        &self,
        model: &FileModel,
        node: &Node,
        clientid: Option<u64>,
        wait: Duration,
    ) -> AttrVerdict {
        let (other, attrs, sc, modified, at, presented, times) =
            match self.holder_attrs(node.fileid, clientid, wait) {
                Holder::None => return AttrVerdict::Go,
                Holder::Wait => return AttrVerdict::Wait,
                Holder::Answer {
                    other,
                    attrs,
                    sc,
                    modified,
                    at,
                    presented,
                    times,
                } => (other, attrs, sc, modified, at, presented, times),
            };
        if presented {
            // This answer's times are in the file already.
            return AttrVerdict::Present { size: attrs.size };
        }
        // A file the model cannot read: the procedure answers its error.
        let Ok(now) = model.getattr(node) else {
            return AttrVerdict::Go;
        };
        if !modified && sc == Some(attrs.change) && attrs.size == now.size {
            return AttrVerdict::Go;
        }
        // time_modify = time_metadata = now, kept in the file's metadata, so the
        // change attribute (its ctime) passes every value presented before. A
        // holder the times are delegated to (RFC 9754 §6) is the authority for
        // them: its times, vetted against the grant's, and time_metadata now.
        let set = presented_times(&attrs, times);
        if model.setattr(node, &set).is_err() {
            // No truthful change to present: recall instead.
            if self.getattr_failed(&other) {
                self.inbox.push(Job::Recall(other));
            }
            return AttrVerdict::Wait;
        }
        if let Some(d) = self.lock().by_other.get_mut(&other) {
            d.probe.modified = true;
            d.probe.presented = Some(at);
        }
        AttrVerdict::Present { size: attrs.size }
    }

    /// The holder's side of `settle_attrs`: a fresh answer, or a CB_GETATTR started
    /// (once) and waited for until `wait` has passed. A delegation being recalled, or
    /// a courtesy client's, goes the recall's way (`break_conflicts`).
    fn holder_attrs(&self, fileid: u64, clientid: Option<u64>, wait: Duration) -> Holder {
        if !self.any_write() {
            return Holder::None;
        }
        let deadline = Instant::now() + wait;
        let mut t = self.lock();
        loop {
            let now = Instant::now();
            let Some(other) = foreign_write(&t, fileid, clientid) else {
                return Holder::None;
            };
            let courtesy = t
                .by_other
                .get(&other)
                .map(|d| t.courtesy.contains(&d.clientid));
            let Some(d) = t.by_other.get_mut(&other) else {
                return Holder::None;
            };
            if d.state != DState::Held || courtesy == Some(true) {
                drop(t);
                return if self.break_conflicts(fileid, clientid, Conflict::Read) {
                    Holder::None
                } else {
                    Holder::Wait
                };
            }
            let p = &mut d.probe;
            if let Some((at, attrs)) = p.answer {
                let age = now.saturating_duration_since(at);
                if age < FRESH || (p.unserved && age < UNSERVED) {
                    p.unserved = false;
                    return Holder::Answer {
                        other,
                        attrs,
                        sc: p.sc,
                        modified: p.modified,
                        at,
                        presented: p.presented == Some(at),
                        times: d.times,
                    };
                }
            }
            if p.asked
                .is_none_or(|at| now.saturating_duration_since(at) >= ASK_AGAIN)
            {
                p.asked = Some(now);
                p.answer = None;
                self.inbox.push(Job::Getattr(other));
            }
            if now >= deadline {
                return Holder::Wait;
            }
            t = match self.attr_cv.wait_timeout(t, deadline - now) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
    }

    /// What CB_GETATTR needs for a delegation still held with a question asked: its
    /// client, the file handle, and whether it delegated the file's times (RFC 9754
    /// §6.1: ask for them too). `None`: returned, recalled, revoked (stop).
    pub(crate) fn getattr_target(&self, other: &[u8; 12]) -> Option<(u64, Vec<u8>, bool)> {
        let t = self.lock();
        let d = t.by_other.get(other)?;
        if d.state != DState::Held || d.probe.asked.is_none() {
            return None;
        }
        Some((d.clientid, t.fhs.get(&d.fileid)?.clone(), d.times.is_some()))
    }

    /// The holder answered CB_GETATTR: kept for the readers, who are woken.
    pub(crate) fn getattr_answered(&self, other: &[u8; 12], attrs: CbAttrs) {
        let mut t = self.lock();
        if let Some(d) = t.by_other.get_mut(other) {
            if d.state == DState::Held {
                d.probe.asked = None;
                d.probe.answer = Some((Instant::now(), attrs));
                d.probe.unserved = true;
            }
        }
        drop(t);
        self.attr_cv.notify_all();
    }

    /// CB_GETATTR failed, timed out or could not be sent: the delegation is recalled
    /// as a read of it would have before (§10.4.3 leaves the server the choice), the
    /// file kept from new delegations a while. True when this began the recall (the
    /// caller drives it); readers are woken to answer DELAY.
    pub(crate) fn getattr_failed(&self, other: &[u8; 12]) -> bool {
        let now = Instant::now();
        let mut t = self.lock();
        let began = match t.by_other.get_mut(other) {
            Some(d) if d.state == DState::Held => {
                d.state = DState::Recalling { since: now };
                d.probe.asked = None;
                Some(d.fileid)
            }
            _ => None,
        };
        if let Some(fileid) = began {
            block(&mut t, fileid, now, None);
        }
        drop(t);
        self.attr_cv.notify_all();
        began.is_some()
    }
}
