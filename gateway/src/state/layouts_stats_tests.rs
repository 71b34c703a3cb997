//! Client I/O reports (LAYOUTSTATS, ff_iostats4) against the layout table: running
//! totals count their increase once per layout; hostile reports are ignored.

use super::super::*;
use super::{Reported, IMPLAUSIBLE};
use health::Io;

const LEASE: Duration = Duration::from_secs(90);
const F: LayoutFile = LayoutFile {
    clientid: 7,
    fileid: 100,
    fsid: 1,
    owner: 0,
};

fn table() -> (Layouts, [u8; 16], [u8; 16]) {
    let servers: Vec<DataServer> = (1..=2)
        .map(|i| DataServer {
            addr: format!("10.0.0.{i}:2049").parse().unwrap(),
            rdma: false,
            probe: None,
        })
        .collect();
    let ids = (servers[0].device_id(), servers[1].device_id());
    let d = Devices {
        servers,
        stripe_unit: 1 << 20,
        rsize: 1 << 20,
        wsize: 1 << 20,
        read_mirrors: 1,
        stripe: Default::default(),
        probe: Probe::default(),
    };
    (Layouts::new(Some(d)), ids.0, ids.1)
}

fn io(read_ops: u64, read_bytes: u64, write_ops: u64, write_bytes: u64) -> Io {
    Io {
        read_ops,
        read_bytes,
        write_ops,
        write_bytes,
    }
}

fn counted(t: &Layouts, i: usize) -> Io {
    t.health().counts(i).io
}

#[test]
fn running_totals_count_their_increase_once_per_layout_and_server() {
    let (t, d0, d1) = table();
    let s = t.grant(F, b"fh", None, IOMODE_RW, LEASE).unwrap();
    let g = LayoutFile { clientid: 8, ..F };
    let s2 = t.grant(g, b"fh", None, IOMODE_RW, LEASE).unwrap();
    assert_eq!(
        t.report_stats(F, &s, &d0, &io(2, 100, 3, 200)),
        Reported::Counted(io(2, 100, 3, 200))
    );
    // The same totals again (a report with no I/O since): nothing more.
    assert_eq!(
        t.report_stats(F, &s, &d0, &io(2, 100, 3, 200)),
        Reported::Counted(io(0, 0, 0, 0))
    );
    assert_eq!(
        t.report_stats(F, &s, &d0, &io(5, 400, 3, 200)),
        Reported::Counted(io(3, 300, 0, 0))
    );
    // Another server of the layout, another client's layout: their own totals.
    t.report_stats(F, &s, &d1, &io(1, 10, 0, 0));
    t.report_stats(g, &s2, &d0, &io(1, 1, 1, 1));
    assert_eq!(counted(&t, 0), io(6, 401, 4, 201));
    assert_eq!(counted(&t, 1), io(1, 10, 0, 0));
    // A total that went down: the client's count started over, counted whole.
    assert_eq!(
        t.report_stats(F, &s, &d0, &io(1, 50, 3, 200)),
        Reported::Counted(io(1, 50, 0, 0))
    );
    // The return reports the layout's totals once more: only the increase counts.
    let seen = t.closing_io(&s.other);
    // A LAYOUTSTATS racing the return is not counted: the return's totals are.
    assert_eq!(
        t.report_stats(F, &s, &d0, &io(2, 55, 4, 250)),
        Reported::NoLayout
    );
    assert_eq!(t.give_back(F, &s, IOMODE_ANY), Ok(None));
    assert_eq!(
        t.report_returned(&d0, &io(2, 60, 4, 300), &seen),
        Reported::Counted(io(1, 10, 1, 100))
    );
    // A layout never reported on: its return counts whole (as before LAYOUTSTATS).
    assert_eq!(
        t.report_returned(&d1, &io(7, 7, 7, 7), &[]),
        Reported::Counted(io(7, 7, 7, 7))
    );
    assert_eq!(counted(&t, 0), io(8, 461, 5, 301));
}

/// A return that leaves the layout held (or is refused) reopens its counting.
#[test]
fn a_layout_still_held_after_a_return_counts_its_reports_again() {
    let (t, d0, _) = table();
    let s = t.grant(F, b"fh", None, IOMODE_RW, LEASE).unwrap();
    t.report_stats(F, &s, &d0, &io(1, 1, 1, 1));
    assert_eq!(t.closing_io(&s.other), vec![(0, io(1, 1, 1, 1))]);
    assert_eq!(
        t.report_stats(F, &s, &d0, &io(2, 2, 2, 2)),
        Reported::NoLayout
    );
    t.reopen_io(&s.other);
    assert_eq!(
        t.report_stats(F, &s, &d0, &io(2, 2, 2, 2)),
        Reported::Counted(io(1, 1, 1, 1))
    );
    assert_eq!(counted(&t, 0), io(2, 2, 2, 2));
}

#[test]
fn hostile_reports_are_ignored_never_overflow() {
    let (t, d0, _) = table();
    let s = t.grant(F, b"fh", None, IOMODE_RW, LEASE).unwrap();
    for bad in [
        io(IMPLAUSIBLE, 0, 0, 0),
        io(0, u64::MAX, 0, 0),
        io(0, 0, u64::MAX, u64::MAX),
    ] {
        assert_eq!(t.report_stats(F, &s, &d0, &bad), Reported::Implausible);
        assert_eq!(t.report_returned(&d0, &bad, &[]), Reported::Implausible);
    }
    assert_eq!(t.counts().stats_ignored, 6);
    assert_eq!(counted(&t, 0), Io::default(), "nothing counted");
    // An unknown device, a stateid not held, another client's or file's layout.
    assert_eq!(
        t.report_stats(F, &s, &[0xee; 16], &io(1, 1, 1, 1)),
        Reported::UnknownDevice
    );
    assert_eq!(t.counts().unknown_device_reports, 1);
    let never = Stateid {
        seqid: 1,
        other: [9; 12],
    };
    assert_eq!(
        t.report_stats(F, &never, &d0, &io(1, 1, 1, 1)),
        Reported::NoLayout
    );
    for other in [
        LayoutFile { clientid: 8, ..F },
        LayoutFile { fileid: 101, ..F },
    ] {
        assert_eq!(
            t.report_stats(other, &s, &d0, &io(1, 1, 1, 1)),
            Reported::NoLayout
        );
    }
    assert_eq!(counted(&t, 0), Io::default());
    // Plausible counts that add up past 2^64 saturate at the top.
    let big = IMPLAUSIBLE - 1;
    for c in 0..3u64 {
        let g = LayoutFile {
            clientid: 20 + c,
            ..F
        };
        let sg = t.grant(g, b"fh", None, IOMODE_RW, LEASE).unwrap();
        t.report_stats(g, &sg, &d0, &io(big, big, big, big));
    }
    assert_eq!(counted(&t, 0), io(u64::MAX, u64::MAX, u64::MAX, u64::MAX));
}

/// Two returns of one layout in flight: the first one's end does not reopen counting
/// while the second, whose snapshot is older, still runs (its report would count a
/// LAYOUTSTATS landing in between a second time).
#[test]
fn counting_reopens_only_when_every_return_in_flight_ended() {
    let (t, d0, _) = table();
    let s = t.grant(F, b"fh", None, IOMODE_RW, LEASE).unwrap();
    t.report_stats(F, &s, &d0, &io(1, 1, 1, 1));
    let first = t.closing_io(&s.other);
    let second = t.closing_io(&s.other);
    assert_eq!(first, second);
    t.reopen_io(&s.other);
    assert_eq!(
        t.report_stats(F, &s, &d0, &io(2, 2, 2, 2)),
        Reported::NoLayout,
        "the second return is still under way"
    );
    t.reopen_io(&s.other);
    assert_eq!(
        t.report_stats(F, &s, &d0, &io(2, 2, 2, 2)),
        Reported::Counted(io(1, 1, 1, 1))
    );
    // An unpaired reopen (a layout granted between the two calls) stays at zero.
    t.reopen_io(&s.other);
    assert_eq!(
        t.report_stats(F, &s, &d0, &io(3, 3, 3, 3)),
        Reported::Counted(io(1, 1, 1, 1))
    );
}
