//! What the layout table does when a data server fails (README "Scaling out with
//! pNFS", "When a data server dies"): a server the probes mark down has the layouts
//! naming it recalled (`recall_server`: CB_LAYOUTRECALL through the same queue and
//! rules as a conflict's, RFC 8881 §12.5.5, so the client returns it and asks for a
//! layout that names a live server or does its I/O through the metadata server); a
//! client's report of an error with a data server (LAYOUTERROR, RFC 7862 §15.6, or
//! an ff_ioerr4 in LAYOUTRETURN, RFC 8435 §9.1.1) is counted against it and asks its
//! prober to probe now (`report_error`). Its device id is deleted as it goes down
//! (`layouts_notify.rs`: CB_NOTIFY_DEVICEID to the clients that asked).

use super::{bump, Layouts};
use crate::state::opens::stateids;
use crate::state::recall::Inbox;
use std::time::Instant;

impl Layouts {
    /// Data server `i` went down (its `Health` already says so, so no layout naming
    /// it is granted after this scan: `grant_on` checks under the same lock): every
    /// layout that names it and is not already being recalled is recalled — its
    /// stateid's seqid one on (§12.5.3), queued for the callback thread, which is
    /// woken. A layout not returned within the lease is revoked and its file fenced
    /// as after any recall (`revoke_overdue`). Returns how many were recalled.
    pub(crate) fn recall_server(&self, i: usize, inbox: &Inbox) -> usize {
        if i >= 64 {
            return 0;
        }
        let bit = 1u64 << i;
        let now = Instant::now();
        let mut t = self.lock();
        let mut begun = Vec::new();
        for (other, l) in t.by_other.iter_mut() {
            if l.servers & bit != 0 && l.recalled.is_none() {
                l.recalled = Some(now);
                l.down_only = true;
                l.seqid = stateids::next_seqid(l.seqid);
                begun.push(*other);
            }
        }
        t.queued.extend(begun.iter().copied());
        // Its device id is deleted: clients that asked are told once their layouts
        // naming it are gone (`layouts_notify.rs`, RFC 8881 §20.12).
        self.retire_device(&mut t, i);
        drop(t);
        if !begun.is_empty() {
            bump(&self.counters.recalled_ds_down, begun.len());
        }
        // Recalls to send, or deletions that may go at once (no layout held them).
        inbox.wake();
        begun.len()
    }

    /// The holder of layout `other`, recalled only because a data server it named
    /// went down (no conflict recall of the file runs), asked for a new layout of the
    /// file: the recalled layout is let go now instead of a lease after its recall.
    /// Nothing waits on its return — no conflicting operation (those recall with
    /// `break_conflicts`, which makes a layout strict again), and any gateway serves
    /// any file — and the metadata server, not the client, decides when a recall it
    /// began ends: it revokes the layout (RFC 8881 §12.5.5.2, as `revoke_overdue`
    /// does a lease later) without moving the file's fence epoch (RFC 8435 §2.2
    /// fences a client so that a conflicting operation can go on: none waits here).
    /// Revoked, its stateid is unknown from now on (NFS4ERR_BAD_STATEID: the Linux
    /// client then drops the layout and asks again with its open stateid). Counted
    /// in `released_ds_down`; its device deletions may go (`layouts_notify.rs`).
    /// The file is remembered for a lease (`Table::released`): the client may still
    /// have I/O in flight under the layout's credentials, so a conflict that comes
    /// within it fences the file before it proceeds (`break_conflicts`).
    pub(super) fn release_down(&self, t: &mut super::Table, other: &[u8; 12]) {
        let Some(fileid) = t
            .by_other
            .get(other)
            .filter(|l| l.down_only)
            .map(|l| l.fileid)
        else {
            return;
        };
        t.released.insert(fileid, Instant::now());
        t.remove(other);
        self.publish(t);
        bump(&self.counters.released_ds_down, 1);
        tracing::debug!(
            "pNFS: a layout recalled for a down data server let go at its holder's LAYOUTGET"
        );
    }

    /// A client reported the I/O it did through the data server `deviceid` names
    /// (now or just deleted): added to that server's counts. An id no configured
    /// server has is ignored (false).
    pub fn report_io(&self, deviceid: &[u8; 16], io: &super::health::Io) -> bool {
        let Some(i) = self.find_reported(deviceid) else {
            return false;
        };
        self.health.add_io(i, io);
        true
    }

    /// Each configured data server's address and health numbers (stats endpoint).
    pub fn server_counts(&self) -> Vec<(std::net::SocketAddr, super::health::ServerCounts)> {
        let Some(d) = self.devices() else {
            return Vec::new();
        };
        d.servers
            .iter()
            .enumerate()
            .map(|(i, s)| (s.addr, self.health.counts(i)))
            .collect()
    }

    /// A client reported an error with the data server `deviceid` names (`status`
    /// from operation `opnum` there). Counted against the server, which is probed at
    /// once; logged (sparingly). An id no configured server has is counted apart and
    /// otherwise ignored (a report is a hint; `nfs4::layout_errors` says why). True
    /// when the device is known.
    pub fn report_error(&self, deviceid: &[u8; 16], status: u32, opnum: u32, why: &str) -> bool {
        let Some((i, ds)) = self.devices().and_then(|d| {
            let i = self.find_reported(deviceid)?;
            Some((i, d.servers[i]))
        }) else {
            bump(&self.counters.unknown_device_reports, 1);
            tracing::debug!(why, "pNFS: an error report names no configured data server");
            return false;
        };
        if self.health.reported(i) {
            tracing::warn!(
                data_server = %ds.addr,
                status,
                opnum,
                why,
                "pNFS: a client reports an error with a data server; probing it now"
            );
        }
        true
    }
}
