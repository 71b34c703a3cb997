//! Layout recalls in the layout table (RFC 8881 §12.5.5, §20.3): what a conflicting
//! operation starts (`break_conflicts`), what the callback thread asks to send a
//! CB_LAYOUTRECALL (`take_recalls`, `recall_target`), and how a recall ends — the
//! client's LAYOUTRETURN (`Layouts::give_back`), its NFS4ERR_NOMATCHING_LAYOUT answer
//! (`forget`), or revocation a lease after it began (`revoke_overdue`).

use super::{bump, Layouts, Table};
use crate::state::opens::stateids;
use crate::state::recall::Inbox;
use crate::state::stateid::Stateid;
use std::time::{Duration, Instant};

impl Layouts {
    /// Before an operation that changes what `fileid`'s layouts map (a truncate,
    /// REMOVE, RENAME over it; RFC 8881 §12.5.5): recalls every layout of it held by a
    /// client other than `except` (the caller's own never conflict), revokes those
    /// recalled longer than `lease` ago (so the caller makes progress without the
    /// callback thread, as `Delegations::break_conflicts` does). True when none is
    /// left and the operation may go on; false: answer NFS4ERR_DELAY (NFS3ERR_JUKEBOX)
    /// and let the client retry. Free (one atomic load) while no layout is held.
    pub(crate) fn break_conflicts(
        &self,
        fileid: u64,
        except: Option<u64>,
        lease: Duration,
        inbox: &Inbox,
    ) -> bool {
        if !self.any() {
            return true;
        }
        // A start or takeover: every file may be laid out by a client of the previous
        // boot until its ids are fenced everywhere (`layouts_boot.rs`).
        if !self.boot_open() {
            return false;
        }
        let now = Instant::now();
        let (started, overdue, mut outstanding) = self.mark_recalls(fileid, except, lease, now);
        // RFC 8435 §2.2: the file's fence epoch moves on before the revoked layouts go
        // and the conflicting operation proceeds; a store that cannot say so keeps
        // them (the caller retries).
        if !overdue.is_empty() {
            if self.fence_file(fileid) {
                let mut t = self.lock();
                self.revoke(&mut t, &overdue);
            } else {
                outstanding = true;
            }
        }
        // A layout of the file let go unfenced for a down data server within the
        // lease (`release_down`): its credentials are fenced before the operation
        // proceeds, as they would have been had the layout been revoked a lease on.
        if !outstanding && self.released_within(fileid, now, lease) {
            if self.fence_file(fileid) {
                self.lock().released.remove(&fileid);
            } else {
                outstanding = true;
            }
        }
        let mut t = self.lock();
        // RFC 8435 §2.2, and the window `crate::fence` promises: a data server may
        // trust the old epoch for `Fence::window` after the bump, so a fenced client's
        // WRITE can land until then. The conflicting operation waits it out, or such a
        // WRITE would land after it (a truncated file growing back).
        t.fenced.retain(|_, until| now < *until);
        if t.fenced.contains_key(&fileid) || t.fencing.contains(&fileid) {
            outstanding = true;
        }
        if outstanding {
            t.recalling.entry(fileid).or_insert(now);
        } else {
            t.recalling.remove(&fileid);
        }
        self.publish(&t);
        drop(t);
        if started > 0 {
            bump(&self.counters.recalled, started);
            inbox.wake();
        }
        !outstanding
    }

    /// `break_conflicts`' pass over the table: recalls begun (queued), the layouts
    /// recalled `lease` or longer ago, and whether any recall is still outstanding.
    fn mark_recalls(
        &self,
        fileid: u64,
        except: Option<u64>,
        lease: Duration,
        now: Instant,
    ) -> (usize, Vec<[u8; 12]>, bool) {
        let mut t = self.lock();
        let list = t.holders.get(&fileid).cloned().unwrap_or_default();
        let (mut started, mut overdue, mut outstanding) = (0, Vec::new(), false);
        for other in list {
            let Some(l) = t.by_other.get_mut(&other) else {
                continue;
            };
            if Some(l.clientid) == except {
                continue;
            }
            // A conflict needs it back now, whatever began its recall: from here it
            // is returned or revoked and fenced, never let go (`release_down`).
            l.down_only = false;
            match l.recalled {
                None => {
                    // §12.5.3: CB_LAYOUTRECALL carries the stateid one seqid on.
                    l.recalled = Some(now);
                    l.seqid = stateids::next_seqid(l.seqid);
                    t.queued.push_back(other);
                    started += 1;
                    outstanding = true;
                }
                Some(since) if now.saturating_duration_since(since) >= lease => overdue.push(other),
                Some(_) => outstanding = true,
            }
        }
        (started, overdue, outstanding)
    }

    /// Whether a layout of `fileid` was let go unfenced less than `lease` ago.
    fn released_within(&self, fileid: u64, now: Instant, lease: Duration) -> bool {
        let t = self.lock();
        t.released
            .get(&fileid)
            .is_some_and(|since| now.saturating_duration_since(*since) < lease)
    }

    /// Removes `gone` as revoked layouts (counted), how many it removed. Layouts another path removed first (the timer's `revoke_overdue` and a
    /// conflict's `break_conflicts` can both find one overdue) are not counted again.
    fn revoke(&self, t: &mut Table, gone: &[[u8; 12]]) -> usize {
        let n = gone.iter().filter(|o| t.remove(o)).count();
        if n > 0 {
            self.publish(t);
            bump(&self.counters.revoked, n);
            tracing::info!(
                n,
                "pNFS layouts not returned within the lease after a recall: revoked"
            );
        }
        n
    }

    /// The recalls begun since the last call, for the callback thread.
    pub(crate) fn take_recalls(&self) -> Vec<[u8; 12]> {
        self.lock().queued.drain(..).collect()
    }

    /// What CB_LAYOUTRECALL needs for a layout still being recalled: its client, the
    /// layout stateid and the file's handle. `None`: returned, revoked or never
    /// recalled (stop sending).
    pub(crate) fn recall_target(&self, other: &[u8; 12]) -> Option<(u64, Stateid, Vec<u8>)> {
        let t = self.lock();
        let l = t.by_other.get(other)?;
        l.recalled?;
        Some((l.clientid, l.stateid(*other), l.fh.to_vec()))
    }

    /// The client answered a recall with NFS4ERR_NOMATCHING_LAYOUT: it holds nothing
    /// of it and will send no LAYOUTRETURN (RFC 8881 §20.3.3): the layout is gone,
    /// counted as returned.
    pub(crate) fn forget(&self, other: &[u8; 12]) {
        let mut t = self.lock();
        if t.by_other.get(other).is_some_and(|l| l.recalled.is_some()) {
            t.remove(other);
            self.publish(&t);
            bump(&self.counters.returned, 1);
        }
    }

    /// Revokes every layout recalled `lease` or longer ago (RFC 8881 §12.5.5.2: the
    /// server may, once the client had its chance); forgets files whose recall is
    /// that old. Returns how many layouts.
    pub fn revoke_overdue(&self, now: Instant, lease: Duration) -> usize {
        if self.devices.is_none() {
            return 0;
        }
        let late = |since: &Instant| now.saturating_duration_since(*since) >= lease;
        let overdue: Vec<([u8; 12], u64)> = self
            .lock()
            .by_other
            .iter()
            .filter(|(_, l)| l.recalled.as_ref().is_some_and(late))
            .map(|(o, l)| (*o, l.fileid))
            .collect();
        // Fenced first (RFC 8435 §2.2), without the table's lock: a file whose epoch
        // the store would not move keeps its layouts, revoked on a later pass.
        let mut fenced = std::collections::HashMap::new();
        let gone: Vec<[u8; 12]> = overdue
            .iter()
            .filter(|(_, f)| *fenced.entry(*f).or_insert_with(|| self.fence_file(*f)))
            .map(|(o, _)| *o)
            .collect();
        let mut t = self.lock();
        let revoked = self.revoke(&mut t, &gone);
        t.recalling.retain(|_, since| !late(since));
        t.released.retain(|_, since| !late(since));
        t.fenced.retain(|_, until| now < *until);
        self.publish(&t);
        revoked
    }
}

impl Layouts {
    /// Moves `fileid`'s fence epoch on in the store (`crate::fence`), so that no data
    /// server accepts the synthetic credentials its layouts carried. True when done or
    /// when fencing is off (nothing to do); false when the store refused (logged).
    pub(super) fn fence_file(&self, fileid: u64) -> bool {
        let Some(f) = self.fence() else {
            return true;
        };
        match f.bump(fileid) {
            Ok(epoch) => {
                tracing::info!(fileid, epoch, "pNFS: file fenced at the data servers");
                let until = Instant::now() + f.window();
                let mut t = self.lock();
                let e = t.fenced.entry(fileid).or_insert(until);
                *e = (*e).max(until);
                self.publish(&t);
                true
            }
            Err(e) => {
                tracing::warn!(fileid, error = %e, "pNFS: cannot fence a file (its fence epoch did not move); its layouts stay");
                false
            }
        }
    }
}
