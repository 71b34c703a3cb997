//! Grouping files by data server and sharing threads, connections and `--ops`.

use super::*;

fn ds(port: u16, fh: u8, uid: u32) -> layout::TakenDs {
    layout::TakenDs {
        deviceid: [port as u8; 16],
        fh: vec![fh; 8],
        ids: (uid, uid + 1),
        rsize: 65536,
        wsize: 65536,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
    }
}

fn taken(port: u16, fh: u8, uid: u32) -> Taken {
    Taken {
        stateid: [fh; 16],
        iomode: LAYOUTIOMODE4_RW,
        stripe_unit: 1 << 20,
        ds: vec![ds(port, fh, uid)],
    }
}

fn mds_set(n: usize) -> FileSet {
    FileSet {
        dir: vec![0xd],
        names: (0..n).map(|i| format!("f.{i}")).collect(),
        handles: (0..n).map(|i| vec![0xa0 + i as u8; 4]).collect(),
        size: 1 << 20,
        stateids: (0..n)
            .map(|i| crate::nfs4::Stateid {
                seqid: i as u32,
                other: [0; 12],
            })
            .collect(),
        seeds: Vec::new(),
        creds: Vec::new(),
        stripes: Vec::new(),
    }
}

/// Files 0 and 2 on one data server, 1 on another, 3 through the metadata server.
fn four_files() -> Vec<File> {
    let ds = |port, fh, uid| File {
        layout: Some(taken(port, fh, uid)),
        fallback: None,
    };
    vec![
        ds(2050, 0, 1 << 31),
        ds(2051, 1, (1 << 31) + 10),
        ds(2050, 2, (1 << 31) + 20),
        File {
            layout: None,
            fallback: Some("LAYOUTGET: NFS4ERR_LAYOUTUNAVAILABLE".into()),
        },
    ]
}

#[test]
fn files_are_grouped_by_data_server_with_their_handles_seeds_and_ids() {
    let mds = mds_set(4);
    let g = group(&four_files(), &mds, 4, 65536);
    // The metadata server's group first (None sorts first), then by address.
    let vias: Vec<Via> = g.iter().map(|g| g.via).collect();
    assert_eq!(
        vias,
        vec![
            None,
            Some(SocketAddr::from(([127, 0, 0, 1], 2050))),
            Some(SocketAddr::from(([127, 0, 0, 1], 2051)))
        ]
    );
    assert_eq!(g[1].files, vec![0, 2]);
    // A data server's part: the layout's handles, the global index as the pattern's
    // seed (file 2 reads and writes file 2's pattern), each file's own ids.
    assert_eq!(g[1].set.handles, vec![vec![0; 8], vec![2; 8]]);
    assert_eq!(g[1].set.pattern(1), crate::pattern::Pattern::for_file(2));
    assert_eq!(
        g[1].set.creds,
        vec![
            sys((1 << 31, (1 << 31) + 1)),
            sys(((1 << 31) + 20, (1 << 31) + 21))
        ]
    );
    assert!(g[1].set.stateids.is_empty());
    // The metadata server's part: its own handle and open stateid, root's credential.
    assert_eq!(g[0].set.handles, vec![vec![0xa3; 4]]);
    assert_eq!(g[0].set.stateids[0].seqid, 3);
    assert!(g[0].set.creds.is_empty());
    assert_eq!(g[0].set.pattern(0), crate::pattern::Pattern::for_file(3));
    // Four connections over three groups: 2, 1, 1.
    assert_eq!(g.iter().map(|g| g.conns).collect::<Vec<_>>(), vec![2, 1, 1]);
    // Fewer connections than groups: every group still gets one.
    let g = group(&four_files(), &mds, 1, 65536);
    assert_eq!(g.iter().map(|g| g.conns).collect::<Vec<_>>(), vec![1, 1, 1]);
}

#[test]
fn threads_and_ops_are_shared_between_the_groups() {
    let mds = mds_set(4);
    let g = group(&four_files(), &mds, 4, 65536);
    let lay = crate::run::layout(Some(2), None, Some(4), 2).unwrap();
    let cores: Vec<core_affinity::CoreId> = [1, 0]
        .iter()
        .map(|&id| core_affinity::CoreId { id })
        .collect();
    let s = specs(&g, &lay, &cores, Some(10), 4);
    assert_eq!(s.len(), 3);
    // Two threads for three groups: one each at least.
    assert_eq!(s.iter().map(Vec::len).collect::<Vec<_>>(), vec![1, 1, 1]);
    // The first group's thread drives both of its connections; each group counts its
    // connections from 0 (its own plan), and the cores rotate.
    let conns: Vec<usize> = s[0][0].conns.iter().map(|c| c.0).collect();
    assert_eq!(conns, vec![0, 1]);
    assert_eq!(s[1][0].conns[0].0, 0);
    assert_eq!(
        s.iter().map(|t| t[0].core.unwrap().id).collect::<Vec<_>>(),
        vec![1, 0, 1]
    );
    // --ops 10 over four connections: 3, 3, 2, 2, every op given out once.
    let budgets: Vec<u64> = s
        .iter()
        .flat_map(|t| t.iter().flat_map(|t| t.conns.iter().map(|c| c.1.unwrap())))
        .collect();
    assert_eq!(budgets, vec![3, 3, 2, 2]);
}

/// A striped layout (RFC 8435 §6) puts its file in the group of each of its data
/// servers, with that server's handle, ids and share of the units; a server that
/// holds none of the file's blocks (a file of two units striped over three) gets no
/// entry. An unstriped file beside it keeps its whole-file entry.
#[test]
fn a_striped_file_is_in_each_of_its_data_servers_groups() {
    let mut mds = mds_set(2);
    mds.size = 128 << 10; // two 64 KiB units
    let striped = Taken {
        stateid: [9; 16],
        iomode: LAYOUTIOMODE4_READ,
        stripe_unit: 64 << 10,
        ds: vec![ds(2050, 1, 100), ds(2051, 2, 200), ds(2052, 3, 300)],
    };
    let files = vec![
        File {
            layout: Some(striped),
            fallback: None,
        },
        File {
            layout: Some(taken(2051, 7, 700)),
            fallback: None,
        },
    ];
    let g = group(&files, &mds, 3, 16 << 10);
    let at = |p: u16| Some(SocketAddr::from(([127, 0, 0, 1], p)));
    assert_eq!(
        g.iter().map(|g| g.via).collect::<Vec<_>>(),
        vec![at(2050), at(2051)]
    );
    assert_eq!(g[0].files, vec![0]);
    assert_eq!(g[1].files, vec![0, 1]);
    assert_eq!(g[0].set.handles, vec![vec![1; 8]]);
    assert_eq!(g[1].set.handles, vec![vec![2; 8], vec![7; 8]]);
    assert_eq!(g[1].set.creds[0], sys((200, 201)));
    assert_eq!(
        g[1].set.stripes,
        vec![stripe::View::new(64 << 10, 3, 1), None]
    );
    // Server 0 has blocks 0-3 (unit 0), server 1 blocks 4-7 (unit 1); the file's
    // pattern stays its own in every group.
    assert_eq!(g[0].set.piece(0, 16 << 10, 3), Some((48 << 10, 16 << 10)));
    assert_eq!(g[0].set.piece(0, 16 << 10, 4), None);
    assert_eq!(g[1].set.piece(0, 16 << 10, 4), Some((64 << 10, 16 << 10)));
    assert_eq!(g[1].set.pattern(0), crate::pattern::Pattern::for_file(0));
    assert_eq!(g[1].set.piece(1, 16 << 10, 4), Some((64 << 10, 16 << 10)));
}
