//! What clients report of their I/O through the data servers (RFC 7862 §15.7
//! LAYOUTSTATS; RFC 8435 §9.2.1 ff_iostats4 in a LAYOUTRETURN), added to each data
//! server's reported I/O (`Health::add_io`: `nfsgw_pnfs_data_server_reported_{ops,
//! bytes}_total{address,op}`), the metadata server's view of its data servers' load.
//!
//! A report's io_info4 counts are running totals of the layout (the Linux client
//! sends the totals of the layout's mirror each time, and the same again in the
//! LAYOUTRETURN), so each layout keeps the last totals reported per data server
//! (`Layout::io_seen`) and only the increase is counted: a layout reported every
//! minute and then given back counts its I/O once. A total below the last one is a
//! count the client started over: counted whole, as a Prometheus counter reset is.
//!
//! Hostile reports are ignored with a log line, never an overflow: a count of 2^63
//! or more (no client does that much I/O; `nfsgw_pnfs_layoutstats_ignored_total`), a
//! device id no configured data server has (`nfsgw_pnfs_unknown_device_reports_total`,
//! as for error reports). The counters saturate (`Health::add_io`). The layout
//! stateid is the operation's check (`nfs4::layout_errors`). A LAYOUTSTATS racing a
//! LAYOUTRETURN of its layout is not counted (`closing_io`): the return's report, the
//! final totals, counts its increase once.

use super::health::Io;
use super::{bump, LayoutFile, Layouts};
use crate::state::stateid::Stateid;

/// Counts at or above this are no client's: the report is ignored.
pub const IMPLAUSIBLE: u64 = 1 << 63;

/// What became of one report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reported {
    /// Its increase was counted against the data server.
    Counted(Io),
    /// The device id names no configured data server.
    UnknownDevice,
    /// A count of 2^63 or more.
    Implausible,
    /// The layout is not (or no longer) this client's for this file.
    NoLayout,
}

/// The increase from `last` to `now`, part by part; a part that went down started
/// over and counts whole.
fn increase(last: &Io, now: &Io) -> Io {
    let d = |l: u64, n: u64| if n >= l { n - l } else { n };
    Io {
        read_ops: d(last.read_ops, now.read_ops),
        read_bytes: d(last.read_bytes, now.read_bytes),
        write_ops: d(last.write_ops, now.write_ops),
        write_bytes: d(last.write_bytes, now.write_bytes),
    }
}

fn plausible(io: &Io) -> bool {
    [io.read_ops, io.read_bytes, io.write_ops, io.write_bytes]
        .iter()
        .all(|v| *v < IMPLAUSIBLE)
}

impl Layouts {
    /// LAYOUTSTATS (and a LAYOUTRETURN's ff_iostats4 while the layout is held): the
    /// running totals `io` the client reports for data server `deviceid` under its
    /// layout `s` of `f`. The increase since the layout's last report is counted.
    pub fn report_stats(
        &self,
        f: LayoutFile,
        s: &Stateid,
        deviceid: &[u8; 16],
        io: &Io,
    ) -> Reported {
        let Some(i) = self.find_reported(deviceid) else {
            bump(&self.counters.unknown_device_reports, 1);
            tracing::debug!("pNFS: an I/O report names no configured data server; ignored");
            return Reported::UnknownDevice;
        };
        if !plausible(io) {
            bump(&self.counters.stats_ignored, 1);
            tracing::info!(
                clientid = f.clientid,
                fileid = f.fileid,
                "pNFS: an I/O report with a count of 2^63 or more; ignored"
            );
            return Reported::Implausible;
        }
        let slot = i as u8;
        let add = {
            let mut t = self.lock();
            let Some(l) = t
                .by_other
                .get_mut(&s.other)
                .filter(|l| l.clientid == f.clientid && l.fileid == f.fileid)
            else {
                return Reported::NoLayout;
            };
            // A return of it is under way: the return's report (final totals, over
            // the snapshot `closing_io` took) counts this report's increase too.
            if l.io_closing > 0 {
                return Reported::NoLayout;
            };
            match l.io_seen.iter_mut().find(|(k, _)| *k == slot) {
                Some((_, last)) => {
                    let add = increase(last, io);
                    *last = *io;
                    add
                }
                None => {
                    l.io_seen.push((slot, *io));
                    *io
                }
            }
        };
        self.health.add_io(i, &add);
        Reported::Counted(add)
    }

    /// Before a LAYOUTRETURN that may end layout `other`: its last totals reported,
    /// per data server index (`report_returned` counts over them), and no LAYOUTSTATS
    /// under it is counted until `reopen_io` (one landing between this snapshot and
    /// the layout's end would be counted again by the return's report).
    pub fn closing_io(&self, other: &[u8; 12]) -> Vec<(u8, Io)> {
        let mut t = self.lock();
        let Some(l) = t.by_other.get_mut(other) else {
            return Vec::new();
        };
        l.io_closing = l.io_closing.saturating_add(1);
        l.io_seen.clone()
    }

    /// After the LAYOUTRETURN: a layout `other` still held (a part given back, or
    /// the return refused) counts its reports again once no other return of it is
    /// under way (each `closing_io` is paired with one `reopen_io`).
    pub fn reopen_io(&self, other: &[u8; 12]) {
        if let Some(l) = self.lock().by_other.get_mut(other) {
            l.io_closing = l.io_closing.saturating_sub(1);
        }
    }

    /// A LAYOUTRETURN's ff_iostats4 for data server `deviceid` of a layout that is
    /// gone: the increase over `seen` (its last reports, `io_seen`) is counted.
    pub fn report_returned(&self, deviceid: &[u8; 16], io: &Io, seen: &[(u8, Io)]) -> Reported {
        let Some(i) = self.find_reported(deviceid) else {
            bump(&self.counters.unknown_device_reports, 1);
            return Reported::UnknownDevice;
        };
        if !plausible(io) {
            bump(&self.counters.stats_ignored, 1);
            tracing::info!("pNFS: a LAYOUTRETURN I/O report with a count of 2^63 or more; ignored");
            return Reported::Implausible;
        }
        let add = match seen.iter().find(|(k, _)| usize::from(*k) == i) {
            Some((_, last)) => increase(last, io),
            None => *io,
        };
        self.health.add_io(i, &add);
        Reported::Counted(add)
    }
}

#[cfg(test)]
#[path = "layouts_stats_tests.rs"]
mod tests;
