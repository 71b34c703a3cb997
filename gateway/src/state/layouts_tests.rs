//! The layout table from its API: stateids (RFC 8881 §12.5.3), returns (§18.44.3),
//! the commit check (§18.42.3), bounds, purges and placement.

use super::*;

fn devices(n: usize, mirrors: u32) -> Devices {
    Devices {
        servers: (0..n)
            .map(|i| DataServer {
                addr: format!("10.0.0.{}:2049", i + 1).parse().unwrap(),
                rdma: false,
            })
            .collect(),
        stripe_unit: 1 << 20,
        rsize: 1 << 20,
        wsize: 1 << 20,
        read_mirrors: mirrors,
    }
}

const F: LayoutFile = LayoutFile {
    clientid: 7,
    fileid: 100,
    fsid: 1,
};

#[test]
fn first_grant_makes_a_layout_stateid_and_later_ones_advance_it() {
    let t = Layouts::new(Some(devices(2, 1)));
    let s = t.grant(F, None, IOMODE_READ).unwrap();
    assert!(Layouts::owns(&s));
    assert_eq!(s.seqid, 1);
    // An open stateid again: the same layout stateid, advanced (one per file).
    let s2 = t.grant(F, None, IOMODE_RW).unwrap();
    assert_eq!((s2.other, s2.seqid), (s.other, 2));
    let s3 = t.grant(F, Some(&s2), IOMODE_RW).unwrap();
    assert_eq!(s3.seqid, 3);
    // An older seqid is OLD_STATEID, a future one or another file's BAD_STATEID.
    assert_eq!(
        t.grant(F, Some(&s), IOMODE_READ),
        Err(StateError::OldStateid)
    );
    let future = Stateid { seqid: 9, ..s3 };
    assert_eq!(
        t.grant(F, Some(&future), IOMODE_READ),
        Err(StateError::BadStateid)
    );
    let other_file = LayoutFile { fileid: 101, ..F };
    assert_eq!(
        t.grant(other_file, Some(&s3), IOMODE_READ),
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
    t.grant(F, None, IOMODE_READ).unwrap();
    let s = t.grant(F, None, IOMODE_RW).unwrap();
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
        t.grant(f, None, IOMODE_RW).unwrap();
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
        t.grant(LayoutFile { fileid: i, ..F }, None, IOMODE_READ)
            .unwrap();
    }
    let over = LayoutFile {
        fileid: u64::MAX,
        ..F
    };
    assert_eq!(t.grant(over, None, IOMODE_READ), Err(StateError::Resource));
    // Another client still gets one.
    t.grant(
        LayoutFile {
            clientid: 1,
            ..over
        },
        None,
        IOMODE_READ,
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
