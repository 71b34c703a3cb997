//! NFSv4.2 COMPOUNDs on the reactor's fast path (RFC 7862 §1.3: SEQUENCE, PUTFH, GETATTR
//! and READ are 4.1's operations): a cached GETATTR and READ of minor version 2 are
//! answered by the reactor as 4.1's are; with `nfs4.max_minor_version = 1` the same
//! COMPOUND gets NFS4ERR_MINOR_VERS_MISMATCH even with the file in the cache. One test
//! in its own binary: the fast-path counter is process-wide.

mod common;

use common::v42::*;
use common::*;
use engine::xdr::XdrReader;
use nfs_wire::v4call::Ops;

fn gw(max_minor: u32) -> Gw {
    Gw::start(&GwOpts {
        rdma: false,
        // The template's [tcp] lines end where [nfs4] begins (a TOML table of its own).
        tcp_extra: format!("[nfs4]\nmax_minor_version = {max_minor}"),
        ..Default::default()
    })
}

#[test]
fn minor_2_takes_the_fast_path_unless_it_is_not_served() {
    let answered = gateway::nfs4::fast::answered;
    // Served: after a worker's GETATTR and READ fill the cache, the reactor answers.
    let g = gw(2);
    let mut s = S::new(&g, 2);
    let (sid, fh) = s.create(b"f");
    s.write(&fh, &sid, 0, &[5u8; 4096]);
    s.size(&fh);
    s.read(&fh, 0, 4096);
    let before = answered();
    for _ in 0..10 {
        assert_eq!(s.size(&fh), 4096);
        assert_eq!(s.read(&fh, 0, 4096), vec![5u8; 4096]);
    }
    assert!(
        answered() - before >= 18,
        "{} of 20 from the reactor",
        answered() - before
    );
    // With the file cached, a 4.2 client's supported_attrs (what the Linux client
    // asks at mount, then asks xattr_support only if it lists it) comes from the
    // worker: the reactor encodes 4.1's set.
    let before = answered();
    for _ in 0..3 {
        let (st, rest) = s.on(&fh, Ops::new().getattr(&[1]));
        assert_eq!(st, NFS4_OK);
        let mut r = XdrReader::new(&rest);
        let n = r.u32().unwrap();
        r.skip(4 * n as usize + 4).unwrap();
        let n = r.u32().unwrap();
        let sup: Vec<u32> = (0..n).map(|_| r.u32().unwrap()).collect();
        assert_ne!(
            sup.get(2).copied().unwrap_or(0) & (1 << 18),
            0,
            "xattr_support listed"
        );
    }
    assert_eq!(
        answered(),
        before,
        "supported_attrs of 4.2 answered by the reactor"
    );
    drop(g);
    // Not served: a session made in 4.1, then 4.2 COMPOUNDs of the cached shape.
    let g = gw(1);
    let mut one = S::new(&g, 1);
    let (sid, fh) = one.create(b"f");
    one.write(&fh, &sid, 0, &[6u8; 4096]);
    for _ in 0..3 {
        one.size(&fh);
        one.read(&fh, 0, 4096);
    }
    let mut two = S { minor: 2, ..one };
    let before = answered();
    for _ in 0..3 {
        two.seq += 1;
        let ops = Ops::new()
            .sequence(two.sid, two.seq)
            .putfh(&fh)
            .getattr(&[1 << 4]);
        let rep = two.call(&ops);
        assert_eq!((rep.status, rep.r.len()), (NFS4ERR_MINOR_VERS_MISMATCH, 0));
        two.seq -= 1; // the slot did not move
    }
    assert_eq!(
        answered(),
        before,
        "the reactor answered a minor version not served"
    );
}
