//! The layout table from its API: stateids (RFC 8881 §12.5.3), returns (§18.44.3),
//! the commit check (§18.42.3), bounds, purges and placement.

use super::*;
use crate::state::recall::Inbox;

fn devices(n: usize, mirrors: u32) -> Devices {
    Devices {
        servers: (0..n)
            .map(|i| DataServer {
                addr: format!("10.0.0.{}:2049", i + 1).parse().unwrap(),
                rdma: false,
                probe: None,
            })
            .collect(),
        stripe_unit: 1 << 20,
        rsize: 1 << 20,
        wsize: 1 << 20,
        read_mirrors: mirrors,
        stripe: Default::default(),
        probe: Probe::default(),
    }
}

const FH: &[u8] = b"handle";
const LEASE: Duration = Duration::from_secs(90);

const F: LayoutFile = LayoutFile {
    clientid: 7,
    fileid: 100,
    fsid: 1,
    owner: 0,
};

#[test]
fn first_grant_makes_a_layout_stateid_and_later_ones_advance_it() {
    let t = Layouts::new(Some(devices(2, 1)));
    let s = t.grant(F, FH, None, IOMODE_READ, LEASE).unwrap();
    assert!(Layouts::owns(&s));
    assert_eq!(s.seqid, 1);
    // An open stateid again: the same layout stateid, advanced (one per file).
    let s2 = t.grant(F, FH, None, IOMODE_RW, LEASE).unwrap();
    assert_eq!((s2.other, s2.seqid), (s.other, 2));
    let s3 = t.grant(F, FH, Some(&s2), IOMODE_RW, LEASE).unwrap();
    assert_eq!(s3.seqid, 3);
    // An older seqid is OLD_STATEID, a future one or another file's BAD_STATEID.
    assert_eq!(
        t.grant(F, FH, Some(&s), IOMODE_READ, LEASE),
        Err(StateError::OldStateid)
    );
    let future = Stateid { seqid: 9, ..s3 };
    assert_eq!(
        t.grant(F, FH, Some(&future), IOMODE_READ, LEASE),
        Err(StateError::BadStateid)
    );
    let other_file = LayoutFile { fileid: 101, ..F };
    assert_eq!(
        t.grant(other_file, FH, Some(&s3), IOMODE_READ, LEASE),
        Err(StateError::BadStateid)
    );
    let other_client = LayoutFile { clientid: 8, ..F };
    assert_eq!(
        t.check_commit(other_client, &s3),
        Err(StateError::BadStateid)
    );
    assert_eq!(t.count(), 1);
}

#[test]
fn returns_are_idempotent_and_free_the_stateid_when_nothing_is_left() {
    let t = Layouts::new(Some(devices(1, 1)));
    // Nothing held on the file: NOMATCHING_LAYOUT.
    let never = Stateid {
        seqid: 1,
        other: stateids::fresh_other(stateids::boot_verifier(), Kind::Layout),
    };
    assert_eq!(
        t.give_back(F, &never, IOMODE_ANY),
        Err(StateError::NoMatchingLayout)
    );
    t.grant(F, FH, None, IOMODE_READ, LEASE).unwrap();
    let s = t.grant(F, FH, None, IOMODE_RW, LEASE).unwrap();
    // RW back: READ remains, the stateid advances.
    let left = t
        .give_back(F, &s, IOMODE_RW)
        .unwrap()
        .expect("READ remains");
    assert_eq!(left.seqid, s.seqid + 1);
    assert_eq!(t.check_commit(F, &left), Err(StateError::BadLayout));
    // RW again: held nothing of it, still fine.
    let left = t.give_back(F, &left, IOMODE_RW).unwrap().unwrap();
    assert_eq!(t.give_back(F, &left, IOMODE_READ), Ok(None));
    assert_eq!(t.count(), 0);
    // Gone: the freed stateid names nothing any more.
    assert_eq!(
        t.give_back(F, &left, IOMODE_ANY),
        Err(StateError::NoMatchingLayout)
    );
    assert_eq!(t.check_commit(F, &left), Err(StateError::BadStateid));
}

#[test]
fn bulk_returns_and_purges_take_only_their_clients_layouts() {
    let t = Layouts::new(Some(devices(1, 1)));
    let g = LayoutFile {
        fileid: 200,
        fsid: 2,
        ..F
    };
    let other = LayoutFile { clientid: 9, ..F };
    for f in [F, g, other] {
        t.grant(f, FH, None, IOMODE_RW, LEASE).unwrap();
    }
    t.give_back_all(F.clientid, Some(2));
    assert_eq!(t.count(), 2);
    t.purge_client(F.clientid);
    assert_eq!(t.count(), 1);
    t.give_back_all(F.clientid, None);
    assert_eq!(t.count(), 1, "the other client's layout stays");
}

#[test]
fn the_table_is_bounded_per_client() {
    let t = Layouts::new(Some(devices(1, 1)));
    for i in 0..MAX_PER_CLIENT as u64 {
        t.grant(LayoutFile { fileid: i, ..F }, FH, None, IOMODE_READ, LEASE)
            .unwrap();
    }
    let over = LayoutFile {
        fileid: u64::MAX,
        ..F
    };
    assert_eq!(
        t.grant(over, FH, None, IOMODE_READ, LEASE),
        Err(StateError::Resource)
    );
    // Another client still gets one.
    t.grant(
        LayoutFile {
            clientid: 1,
            ..over
        },
        FH,
        None,
        IOMODE_READ,
        LEASE,
    )
    .unwrap();
}

#[test]
fn placement_spreads_files_and_writes_one_mirror() {
    let d = devices(3, 2);
    let mut used = std::collections::HashSet::new();
    for fileid in 0..64u64 {
        let w: Vec<_> = d.placement(fileid, true).collect();
        assert_eq!(w.len(), 1, "a write layout has one mirror");
        let r: Vec<_> = d.placement(fileid, false).collect();
        assert_eq!(r.len(), 2);
        assert_ne!(r[0], r[1], "mirrors are different data servers");
        assert_eq!(r[0], w[0], "reads start where writes go");
        used.insert(w[0].addr);
    }
    assert_eq!(used.len(), 3, "files land on every data server");
    // More mirrors than data servers: each once.
    assert_eq!(devices(1, 8).placement(5, false).count(), 1);
}

#[test]
fn devices_are_found_by_their_stable_id() {
    let d = devices(2, 1);
    let id = d.servers[1].device_id();
    assert_eq!(d.find(&id), Some(&d.servers[1]));
    assert_eq!(d.find(&[0; 16]), None);
    // Same address and transport, same id (across restarts and list orders).
    assert_eq!(devices(3, 1).servers[1].device_id(), id);
}

/// A recall (RFC 8881 §12.5.5): another client's conflict marks the layout recalled,
/// its seqid one on, and queues it for the callback thread; the caller waits until
/// it comes back; the holder's own operations never conflict; LAYOUTGET of the file
/// meanwhile is RECALLCONFLICT for the holder and TRYLATER for others.
#[test]
fn a_conflict_recalls_other_clients_layouts_until_they_are_returned() {
    let t = Layouts::new(Some(devices(1, 1)));
    let inbox = Inbox::default();
    assert!(
        t.break_conflicts(F.fileid, None, LEASE, &inbox),
        "none held: free"
    );
    let s = t.grant(F, FH, None, IOMODE_RW, LEASE).unwrap();
    assert!(
        t.break_conflicts(F.fileid, Some(F.clientid), LEASE, &inbox),
        "its own"
    );
    assert!(t.take_recalls().is_empty());
    assert!(!t.break_conflicts(F.fileid, Some(8), LEASE, &inbox));
    assert_eq!(t.take_recalls(), vec![s.other], "queued once");
    assert!(!t.break_conflicts(F.fileid, None, LEASE, &inbox));
    assert!(t.take_recalls().is_empty(), "not twice");
    let (client, recalled, fh) = t.recall_target(&s.other).unwrap();
    assert_eq!((client, fh.as_slice()), (F.clientid, FH));
    assert_eq!((recalled.other, recalled.seqid), (s.other, s.seqid + 1));
    let other = LayoutFile { clientid: 8, ..F };
    assert_eq!(
        t.grant(F, FH, None, IOMODE_READ, LEASE),
        Err(StateError::RecallConflict)
    );
    assert_eq!(
        t.grant(other, FH, None, IOMODE_READ, LEASE),
        Err(StateError::Resource)
    );
    assert_eq!(t.give_back(F, &recalled, IOMODE_ANY), Ok(None));
    assert!(
        t.recall_target(&s.other).is_none(),
        "returned: stop sending"
    );
    assert!(t.break_conflicts(F.fileid, Some(8), LEASE, &inbox));
    t.grant(other, FH, None, IOMODE_READ, LEASE).unwrap();
    let c = t.counts();
    assert_eq!(
        (
            c.held,
            c.granted,
            c.recalled,
            c.returned,
            c.revoked,
            c.get_errors
        ),
        (1, 2, 1, 1, 0, 0)
    );
}

/// A recalled layout not returned within the lease is revoked (§12.5.5.2), by the
/// callback thread's pass or by the conflicting caller itself; one the client says
/// it does not hold (NFS4ERR_NOMATCHING_LAYOUT) is forgotten at once.
#[test]
fn recalled_layouts_are_revoked_after_the_lease_or_forgotten_when_not_held() {
    let t = Layouts::new(Some(devices(1, 1)));
    let inbox = Inbox::default();
    let g = LayoutFile { fileid: 5, ..F };
    let s = t.grant(F, FH, None, IOMODE_RW, LEASE).unwrap();
    let s2 = t.grant(g, FH, None, IOMODE_READ, LEASE).unwrap();
    assert!(!t.break_conflicts(F.fileid, None, LEASE, &inbox));
    assert!(!t.break_conflicts(g.fileid, None, LEASE, &inbox));
    let now = Instant::now();
    assert_eq!(t.revoke_overdue(now, LEASE), 0, "not yet");
    // Not recalled: a layout is never revoked for time alone.
    let h = LayoutFile { fileid: 6, ..F };
    t.grant(h, FH, None, IOMODE_READ, LEASE).unwrap();
    t.forget(&s2.other);
    assert_eq!(t.count(), 2);
    assert_eq!(t.revoke_overdue(now + LEASE, LEASE), 1);
    assert!(t.recall_target(&s.other).is_none());
    assert_eq!(t.count(), 1, "the layout never recalled stays");
    // The conflicting caller revokes by itself too.
    let s3 = t.grant(g, FH, None, IOMODE_READ, LEASE).unwrap();
    assert!(!t.break_conflicts(g.fileid, None, Duration::ZERO, &inbox));
    assert!(t.break_conflicts(g.fileid, None, Duration::ZERO, &inbox));
    assert!(t.recall_target(&s3.other).is_none());
    let c = t.counts();
    assert_eq!((c.recalled, c.returned, c.revoked), (3, 1, 2));
}

/// Placement steps over data servers that are down (only their files move), gives
/// fewer read mirrors when fewer are up, and nothing when none is.
#[test]
fn placement_skips_servers_that_are_down() {
    let d = devices(3, 2);
    for fileid in 0..64u64 {
        let all = d.placement_up(fileid, false, |_| true);
        let home = all[0];
        let w = d.placement_up(fileid, true, |i| i != home);
        assert_eq!(w.len(), 1);
        assert_ne!(w[0], home, "a write layout avoids the dead server");
        assert_eq!(w[0], (home + 1) % 3, "the next one up takes its files");
        // A file whose server is up keeps it.
        let other = (home + 2) % 3;
        assert_eq!(d.placement_up(fileid, true, |i| i != other), vec![home]);
        let r = d.placement_up(fileid, false, |i| i != home);
        assert_eq!(r.len(), 2);
        assert!(!r.contains(&home));
        let one = d.placement_up(fileid, false, |i| i == other);
        assert_eq!(one, vec![other], "fewer mirrors when fewer are up");
        assert!(d.placement_up(fileid, false, |_| false).is_empty());
        assert!(d.placement_up(fileid, true, |_| false).is_empty());
    }
    assert_eq!(mask_of(&[0, 2]), 0b101);
    assert_eq!(mask_of(&[64, 1]), 0b10, "past the mask: ignored");
}

/// A data server going down recalls exactly the layouts naming it (CB_LAYOUTRECALL
/// queued, the stateid one seqid on, counted apart from conflicts), once; the
/// recalled client gets RECALLCONFLICT until it returns the layout; a grant naming a
/// server that is down is refused (the client asks again); the server coming back is
/// placed again.
#[test]
fn a_data_server_going_down_recalls_the_layouts_naming_it() {
    let t = Layouts::new(Some(devices(2, 1)));
    let inbox = Inbox::default();
    let on0 = t.grant_on(F, FH, None, IOMODE_RW, LEASE, 0b01).unwrap();
    let g = LayoutFile { fileid: 200, ..F };
    let on1 = t.grant_on(g, FH, None, IOMODE_RW, LEASE, 0b10).unwrap();
    let h = LayoutFile {
        fileid: 300,
        clientid: 9,
        ..F
    };
    let both = t.grant_on(h, FH, None, IOMODE_READ, LEASE, 0b11).unwrap();

    assert_eq!(t.health().probed(1, false), None);
    assert_eq!(
        t.health().probed(1, false),
        None,
        "three failures by default"
    );
    assert_eq!(t.health().probed(1, false), Some(health::Transition::Down));
    assert_eq!(t.recall_server(1, &inbox), 2);
    let mut queued = t.take_recalls();
    queued.sort();
    let mut want = vec![on1.other, both.other];
    want.sort();
    assert_eq!(queued, want, "the layouts naming server 1, not the other");
    let (client, sid, _) = t.recall_target(&on1.other).unwrap();
    assert_eq!((client, sid.seqid), (F.clientid, on1.seqid + 1));
    assert!(t.recall_target(&on0.other).is_none(), "not recalled");
    assert_eq!(t.recall_server(1, &inbox), 0, "not twice");
    assert!(t.take_recalls().is_empty());

    // A grant naming the dead server is refused; one naming the live server is fine
    // (the recalled client's own LAYOUTGET: the next test).
    let k = LayoutFile { fileid: 400, ..F };
    assert_eq!(
        t.grant_on(k, FH, None, IOMODE_RW, LEASE, 0b10),
        Err(StateError::Resource)
    );
    t.grant_on(k, FH, None, IOMODE_RW, LEASE, 0b01).unwrap();
    assert_eq!(t.give_back(g, &sid, IOMODE_ANY), Ok(None));
    t.grant_on(g, FH, None, IOMODE_RW, LEASE, 0b01).unwrap();

    assert_eq!(t.health().probed(1, true), Some(health::Transition::Up));
    t.grant_on(
        LayoutFile { fileid: 500, ..F },
        FH,
        None,
        IOMODE_RW,
        LEASE,
        0b10,
    )
    .unwrap();
    let c = t.counts();
    assert_eq!((c.recalled_ds_down, c.recalled, c.returned), (2, 0, 1));
}

/// A layout recalled because its data server went down protects nothing (no
/// conflicting operation waits on it): its holder's next LAYOUTGET lets it go —
/// revoked at once, unfenced, counted apart — answered BAD_STATEID when it presented
/// that layout's stateid (the client drops it and comes back with its open stateid)
/// and granted anew when it came with its open stateid. A layout recalled for a
/// conflict stays RECALLCONFLICT until returned or revoked a lease later, as before;
/// so does a down-recalled layout a conflict then asked for too, and one whose file
/// has a conflict recall running (RFC 8881 §12.5.5.2.1).
#[test]
fn a_down_recall_lets_its_holder_go_on_a_conflict_recall_does_not() {
    let t = Layouts::new(Some(devices(2, 1)));
    let inbox = Inbox::default();
    let on1 = |fileid, clientid| LayoutFile {
        fileid,
        clientid,
        ..F
    };
    let (a, b, c, e) = (on1(100, 7), on1(200, 7), on1(300, 7), on1(600, 7));
    let sa = t.grant_on(a, FH, None, IOMODE_RW, LEASE, 0b10).unwrap();
    t.grant_on(b, FH, None, IOMODE_RW, LEASE, 0b10).unwrap();
    t.grant_on(c, FH, None, IOMODE_RW, LEASE, 0b10).unwrap();
    t.grant_on(e, FH, None, IOMODE_RW, LEASE, 0b10).unwrap();
    // A conflict's layout on the live server, and another client's on file e.
    let d = on1(500, 7);
    t.grant_on(d, FH, None, IOMODE_RW, LEASE, 0b01).unwrap();
    let e8 = on1(600, 8);
    t.grant_on(e8, FH, None, IOMODE_READ, LEASE, 0b01).unwrap();

    for _ in 0..3 {
        t.health().probed(1, false);
    }
    assert!(!t.health().is_up(1));
    assert_eq!(t.recall_server(1, &inbox), 4, "a, b, c, e");
    // Conflicts: client 9 truncates c (already recalled: now wanted by a conflict
    // too) and d; client 7 truncates e (client 8's layout recalled: e's recall runs).
    assert!(!t.break_conflicts(c.fileid, Some(9), LEASE, &inbox));
    assert!(!t.break_conflicts(d.fileid, Some(9), LEASE, &inbox));
    assert!(!t.break_conflicts(e.fileid, Some(7), LEASE, &inbox));
    let queued = t.take_recalls();
    assert_eq!(queued.len(), 6, "4 for the server, d and e8 for conflicts");

    // a, with the recalled layout's stateid: let go, BAD_STATEID; then with its open
    // stateid a new layout (a new stateid) on the live server.
    let (_, recalled_a, _) = t.recall_target(&sa.other).unwrap();
    assert_eq!(
        t.grant_on(a, FH, Some(&recalled_a), IOMODE_RW, LEASE, 0b01),
        Err(StateError::BadStateid)
    );
    assert!(t.recall_target(&sa.other).is_none(), "gone: stop recalling");
    assert_eq!(
        t.give_back(a, &recalled_a, IOMODE_ANY),
        Err(StateError::NoMatchingLayout),
        "a late return of it finds nothing"
    );
    let na = t.grant_on(a, FH, None, IOMODE_RW, LEASE, 0b01).unwrap();
    assert_ne!(na.other, sa.other);
    // b, with its open stateid: let go and granted at once.
    t.grant_on(b, FH, None, IOMODE_RW, LEASE, 0b01).unwrap();
    // c (a conflict asked for it too), d (a conflict's), e (its file's recall runs):
    // RECALLCONFLICT, as before.
    for f in [c, d, e] {
        assert_eq!(
            t.grant_on(f, FH, None, IOMODE_RW, LEASE, 0b01),
            Err(StateError::RecallConflict),
            "file {}",
            f.fileid
        );
    }
    let n = t.counts();
    assert_eq!(
        (
            n.released_ds_down,
            n.revoked,
            n.recalled_ds_down,
            n.recalled
        ),
        (2, 0, 4, 2)
    );
    // They go the old way: a lease after their recall, revoked (and fenced).
    let later = Instant::now() + LEASE + Duration::from_secs(1);
    assert_eq!(t.revoke_overdue(later, LEASE), 4, "c, d, e, e8");
    assert_eq!(t.count(), 2, "a's and b's new layouts");
}

/// A layout let go unfenced for a down data server (`release_down`) leaves its
/// credentials valid at the data servers; a conflict on its file within the lease
/// moves the file's fence epoch before it proceeds (RFC 8435 §2.2), once; a conflict
/// on a file nothing was let go of moves nothing.
#[test]
fn a_conflict_after_a_down_release_fences_the_file_first() {
    let store = std::sync::Arc::new(crate::backend::memory::MemoryBackend::new());
    let window = Duration::from_millis(300);
    let fence = std::sync::Arc::new(crate::fence::Fence::new(store, [3; 32], window));
    let mut t = Layouts::new(Some(devices(2, 1)));
    t.set_fence(Some(fence.clone()));
    let inbox = Inbox::default();
    let on = |fileid| LayoutFile {
        fileid,
        clientid: 7,
        ..F
    };
    let (a, other) = (on(100), on(200));
    t.grant_on(a, FH, None, IOMODE_RW, LEASE, 0b10).unwrap();
    t.grant_on(other, FH, None, IOMODE_RW, LEASE, 0b01).unwrap();
    for _ in 0..3 {
        t.health().probed(1, false);
    }
    assert_eq!(t.recall_server(1, &inbox), 1);
    // The holder's LAYOUTGET with its open stateid: let go, a new layout granted.
    let mine = t.grant_on(a, FH, None, IOMODE_RW, LEASE, 0b01).unwrap();
    assert_eq!(t.counts().released_ds_down, 1);
    let before = fence.epoch(a.fileid).unwrap();
    // The holder returns its new layout; then another client truncates the file.
    assert_eq!(t.take_recalls().len(), 1, "only the down recall was queued");
    t.give_back(a, &mine, IOMODE_ANY).unwrap();
    let fenced_at = Instant::now();
    // Fenced first, and the conflict waits out the fence's window: a data server may
    // trust the old epoch that long, so a fenced WRITE could still land.
    assert!(!t.break_conflicts(a.fileid, Some(9), LEASE, &inbox));
    assert_eq!(fence.epoch(a.fileid).unwrap(), before + 1, "fenced first");
    assert!(t.any(), "the window keeps the conflict path on");
    while !t.break_conflicts(a.fileid, Some(9), LEASE, &inbox) {
        assert!(fenced_at.elapsed() < 10 * window, "the wait ends");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        fenced_at.elapsed() >= window,
        "not before the window ran out"
    );
    // Once: the next conflict finds nothing let go and no window.
    assert!(t.break_conflicts(a.fileid, Some(9), LEASE, &inbox));
    assert_eq!(fence.epoch(a.fileid).unwrap(), before + 1);
    // A file nothing was let go of: its conflict (no layout left) moves nothing.
    let b0 = fence.epoch(300).unwrap();
    assert!(t.break_conflicts(300, Some(9), LEASE, &inbox));
    assert_eq!(fence.epoch(300).unwrap(), b0);
}

/// Error reports count against the data server the device id names and ask for a
/// probe; an unknown id is counted apart and changes nothing.
#[test]
fn error_reports_count_against_the_named_data_server() {
    let d = devices(2, 1);
    let id1 = d.servers[1].device_id();
    let t = Layouts::new(Some(d));
    assert!(t.report_error(&id1, 10060, 38, "LAYOUTERROR"));
    assert!(t.report_error(&id1, 5, 38, "LAYOUTRETURN"));
    assert!(!t.report_error(&[0xee; 16], 5, 38, "LAYOUTERROR"));
    assert_eq!(t.health().counts(1).reported, 2);
    assert_eq!(t.health().counts(0).reported, 0);
    assert!(t.health().take_asked(1));
    assert!(t.health().is_up(1), "a report is a hint, not proof");
    assert_eq!(t.counts().unknown_device_reports, 1);
    // pNFS off: nothing is known.
    let off = Layouts::new(None);
    assert!(!off.report_error(&id1, 5, 38, "LAYOUTERROR"));
}

/// Device id deletion (RFC 8881 §20.12, `layouts_notify.rs`): GETDEVICEINFO's watch
/// promises DELETE only when asked for it; a server going down retires its id (no
/// longer found; the next generation's names it) and queues one deletion per watching
/// client, held back while that client holds a layout naming the server (§20.12.3)
/// and handed over once; a client that did not watch gets none; a purged client's
/// deletions go with it.
#[test]
fn a_down_servers_id_is_deleted_for_watchers_once_their_layouts_are_gone() {
    let t = Layouts::new(Some(devices(2, 1)));
    let inbox = Inbox::default();
    let d1 = t.device_id(1).unwrap();
    assert_eq!(d1, t.devices().unwrap().servers[1].device_id());
    assert_eq!(t.find_device(&d1), Some((1, 0)));
    // Client 7 watches (asks CHANGE and DELETE: promised DELETE), 8 asks CHANGE only,
    // 9 watches and holds nothing.
    assert_eq!(t.watch(7, 1, 0, 0b110), NOTIFY_DELETE);
    assert_eq!(t.watch(8, 1, 0, 0b010), 0);
    assert_eq!(t.watch(9, 1, 0, 0b100), NOTIFY_DELETE);
    assert_eq!(t.watch(9, 1, 5, 0b100), 0, "an id of another generation");
    let held = t.grant_on(F, FH, None, IOMODE_RW, LEASE, 0b10).unwrap();
    let eight = LayoutFile { clientid: 8, ..F };
    t.grant_on(eight, FH, None, IOMODE_RW, LEASE, 0b10).unwrap();

    t.health().probed(1, false);
    t.health().probed(1, false);
    assert_eq!(t.health().probed(1, false), Some(health::Transition::Down));
    assert_eq!(t.recall_server(1, &inbox), 2);
    assert_eq!(t.find_device(&d1), None, "deleted");
    assert_eq!(t.find_reported(&d1), Some(1), "reports still name it");
    let d1b = t.device_id(1).unwrap();
    assert_ne!(d1b, d1);
    assert_eq!(t.find_device(&d1b), Some((1, 1)));
    assert_eq!(
        t.watch(7, 1, 0, 0b100),
        0,
        "the deleted id is watched no more"
    );

    // 9 holds nothing: its deletion goes at once; 7's waits for its layout.
    assert_eq!(t.notices(), 2);
    let ready = t.take_notices();
    assert_eq!(ready.len(), 1);
    assert_eq!(t.notice_target(&ready[0]), Some((9, d1)));
    assert!(t.take_notices().is_empty(), "handed over once");
    t.notified(&ready[0]);
    assert_eq!(
        t.give_back(F, &Stateid { seqid: 0, ..held }, IOMODE_ANY),
        Ok(None)
    );
    let ready = t.take_notices();
    assert_eq!(ready.len(), 1);
    assert_eq!(t.notice_target(&ready[0]), Some((7, d1)));
    t.purge_client(7);
    assert_eq!(t.notice_target(&ready[0]), None, "gone with its client");
    assert_eq!(t.notices(), 0);
}

/// Reclaims after a restart (RFC 8881 §18.42.3, `layouts_reclaim.rs`): with a key,
/// a layout stateid is bound to its client owner and file — reclaimable once the layout
/// is no longer held (a new table with the same key: a restarted server), never for
/// another file, another owner, a changed byte, or a table without the key.
#[test]
fn a_layout_stateid_is_reclaimable_only_for_its_owner_and_file() {
    let key = [3u8; 32];
    let t = Layouts::new(Some(devices(1, 1)));
    t.set_key(Some(key));
    let f = LayoutFile { owner: 55, ..F };
    let s = t.grant(f, FH, None, IOMODE_RW, LEASE).unwrap();
    assert!(Layouts::owns(&s));
    assert!(!t.reclaimable(f, &s), "held now: nothing to reclaim");
    let restarted = Layouts::new(Some(devices(1, 1)));
    restarted.set_key(Some(key));
    assert!(restarted.reclaimable(f, &s));
    assert!(!restarted.reclaimable(LayoutFile { fileid: 101, ..f }, &s));
    assert!(!restarted.reclaimable(LayoutFile { owner: 56, ..f }, &s));
    for i in 0..12 {
        let mut forged = s;
        forged.other[i] ^= 1;
        assert!(!restarted.reclaimable(f, &forged), "byte {i}");
    }
    assert!(
        !Layouts::new(Some(devices(1, 1))).reclaimable(f, &s),
        "no key"
    );
    let dir = tempfile::tempdir().unwrap();
    let k = load_key(dir.path()).unwrap();
    assert_eq!(load_key(dir.path()), Some(k), "kept in state.dir");
}

/// A client purged (lease expiry): its files are fenced, and a conflicting operation
/// or another client's LAYOUTGET of one waits until the fence's window ran out — a
/// layout granted in it would be recalled by the waiting conflict again (a lease of
/// DELAY each time), and a data server may still take the purged client's WRITEs.
#[test]
fn after_a_purge_conflicts_and_layoutgets_wait_out_the_fence_window() {
    let store = std::sync::Arc::new(crate::backend::memory::MemoryBackend::new());
    let window = Duration::from_millis(300);
    let fence = std::sync::Arc::new(crate::fence::Fence::new(store, [4; 32], window));
    let mut t = Layouts::new(Some(devices(2, 1)));
    t.set_fence(Some(fence.clone()));
    let inbox = Inbox::default();
    let a = LayoutFile {
        fileid: 100,
        clientid: 7,
        ..F
    };
    t.grant_on(a, FH, None, IOMODE_RW, LEASE, 0b01).unwrap();
    let before = fence.epoch(a.fileid).unwrap();
    let purged_at = Instant::now();
    t.purge_client(7);
    assert_eq!(fence.epoch(a.fileid).unwrap(), before + 1, "fenced");
    assert!(t.any(), "the window keeps the conflict path on");
    let other = LayoutFile { clientid: 9, ..a };
    assert!(!t.break_conflicts(a.fileid, Some(9), LEASE, &inbox));
    assert!(matches!(
        t.grant_on(other, FH, None, IOMODE_RW, LEASE, 0b01),
        Err(StateError::Resource)
    ));
    while !t.break_conflicts(a.fileid, Some(9), LEASE, &inbox) {
        assert!(purged_at.elapsed() < 10 * window, "the wait ends");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(purged_at.elapsed() >= window);
    t.grant_on(other, FH, None, IOMODE_RW, LEASE, 0b01).unwrap();
}
