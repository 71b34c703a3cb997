//! The reactor's names (`gateway::cache::names`, docs/architecture.md §5 "Names")
//! through the real server: an NFSv3 LOOKUP of a name a worker answered or created a
//! moment ago is answered on the reactor (a cache hit, no worker job), creating other
//! names in the directory leaves it answering, and a REMOVE, RENAME (either name),
//! or RMDIR of the name made over NFSv4.1 or NFSv3 makes the very next LOOKUP the
//! worker's: NOENT or the new object, never the cached one (RFC 1813 §3.3.3; RFC
//! 8881 §18.25, §18.26).

mod common;
#[path = "common/nfs4_client.rs"]
mod nfs4_client;

use common::v4::enc;
use common::{Gw, GwOpts};
use nfs4_client::*;
use nfs_wire::v3call::{self, Call};
use nfs_wire::NFS_PROGRAM;
use std::time::{Duration, Instant};

/// The value of one series of the gateway's metrics (0 when absent).
fn metric(gw: &Gw, series: &str) -> u64 {
    gw.metric(series)
}

/// Cache hits, once the reactor published them (it does before it sleeps).
fn hits(gw: &Gw, at_least: u64) -> u64 {
    let end = Instant::now() + Duration::from_secs(3);
    loop {
        let h = metric(gw, "nfsgw_cache_hits_total{reactor=\"0\"}");
        if h >= at_least || Instant::now() > end {
            return h;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn call(v3: &mut V3, c: Call) -> Vec<u8> {
    let args = enc(|w| c.args(w).unwrap());
    v3.call(NFS_PROGRAM, c.prog_vers_proc().2, &args)
}

/// LOOKUP's handle, `None` for NOENT (any other status fails).
fn lookup(v3: &mut V3, dir: &[u8], name: &str) -> Option<Vec<u8>> {
    v3call::parse_lookup(&call(v3, Call::Lookup(dir, name))).expect("LOOKUP")
}

/// LOOKUP's whole reply.
fn lookup_raw(v3: &mut V3, dir: &[u8], name: &str) -> Vec<u8> {
    call(v3, Call::Lookup(dir, name))
}

#[test]
fn a_lookup_is_a_reactor_hit_until_either_version_changes_the_name() {
    let gw = Gw::start(&GwOpts {
        rdma: false,
        ..Default::default()
    });
    let mut v3 = V3::connect(gw.tcp_addr());
    let root = v3.mount_root();
    let dir = v3call::parse_mkdir(&call(&mut v3, Call::Mkdir(&root, "d"))).unwrap();
    let f = v3.create(&dir, b"f");
    assert_eq!(v3.write(&f, b"12345"), 0);

    // The create taught the name, the write the file's attributes: LOOKUPs of it
    // are answered on the reactor, each the same reply.
    let first = lookup_raw(&mut v3, &dir, "f");
    let before = hits(&gw, 0);
    for _ in 0..5 {
        assert_eq!(lookup_raw(&mut v3, &dir, "f"), first);
    }
    let after = hits(&gw, before + 5);
    assert!(
        after >= before + 5,
        "LOOKUPs are reactor hits: {before} → {after}"
    );
    assert_eq!(lookup(&mut v3, &dir, "f"), Some(f.clone()));

    // Other names made in the directory leave the name answering.
    for i in 0..10 {
        v3.create(&dir, format!("g{i}").as_bytes());
        let before = hits(&gw, 0);
        assert_eq!(lookup(&mut v3, &dir, "f"), Some(f.clone()));
        assert!(hits(&gw, before + 1) > before, "after creating g{i}");
    }

    // NFSv4.1 REMOVE: the next NFSv3 LOOKUP is NOENT.
    let mut v4 = Tcp41::ready(gw.tcp_addr(), b"lookup-cache");
    let (st, _) = v4.seq_run(|o| o.putfh(&dir).remove(b"f"));
    assert_eq!(st, NFS4_OK, "REMOVE");
    assert_eq!(lookup(&mut v3, &dir, "f"), None);
    // Made again: the new file, never the old handle.
    let f2 = v3.create(&dir, b"f");
    assert_ne!(f2, f);
    assert_eq!(lookup(&mut v3, &dir, "f"), Some(f2.clone()));
    assert_eq!(lookup(&mut v3, &dir, "f"), Some(f2.clone()));

    // NFSv4.1 RENAME of a cached name onto another cached name.
    let a = v3.create(&dir, b"a");
    let b = v3.create(&dir, b"b");
    for _ in 0..2 {
        assert_eq!(lookup(&mut v3, &dir, "a"), Some(a.clone()));
        assert_eq!(lookup(&mut v3, &dir, "b"), Some(b.clone()));
    }
    let (st, _) = v4.seq_run(|o| o.putfh(&dir).savefh().putfh(&dir).rename(b"a", b"b"));
    assert_eq!(st, NFS4_OK, "RENAME");
    assert_eq!(lookup(&mut v3, &dir, "a"), None);
    assert_eq!(lookup(&mut v3, &dir, "b"), Some(a.clone()));
    // The moved file's attributes known again (through its new name): its old name
    // still never answers.
    assert_eq!(lookup(&mut v3, &dir, "b"), Some(a.clone()));
    assert_eq!(lookup(&mut v3, &dir, "a"), None);

    // NFSv3 RENAME and REMOVE, and an NFSv4.1 REMOVE of a directory (RMDIR's work).
    let args = enc(|w| {
        w.opaque_var(&dir).unwrap();
        w.string(b"b").unwrap();
        w.opaque_var(&dir).unwrap();
        w.string(b"c").unwrap();
    });
    let rep = v3.call(NFS_PROGRAM, nfs_wire::nfs3::NFSPROC3_RENAME, &args);
    assert_eq!(v3call::status(&rep), 0, "RENAME");
    assert_eq!(lookup(&mut v3, &dir, "b"), None);
    assert_eq!(lookup(&mut v3, &dir, "c"), Some(a.clone()));
    call(&mut v3, Call::Remove(&dir, "c"));
    assert_eq!(lookup(&mut v3, &dir, "c"), None);
    let sub = v3call::parse_mkdir(&call(&mut v3, Call::Mkdir(&dir, "sub"))).unwrap();
    assert_eq!(lookup(&mut v3, &dir, "sub"), Some(sub.clone()));
    assert_eq!(lookup(&mut v3, &dir, "sub"), Some(sub));
    let (st, _) = v4.seq_run(|o| o.putfh(&dir).remove(b"sub"));
    assert_eq!(st, NFS4_OK, "REMOVE of a directory");
    assert_eq!(lookup(&mut v3, &dir, "sub"), None);
}

/// NFSv4.1 stat of a name as the Linux client sends it (RFC 8881 §18.15, §18.8,
/// §18.7): `SEQUENCE, PUTFH, LOOKUP, GETFH, GETATTR`; the status and the results
/// after SEQUENCE's (whose sequence id differs from call to call).
fn stat4(v4: &mut Tcp41, dir: &[u8], name: &[u8]) -> (u32, Vec<u8>) {
    let (st, res) = v4.seq_run(|o| o.putfh(dir).lookup(name).getfh().getattr(&[1 << 4]));
    let left = after_seq(&res).remaining();
    (st, res.body[res.body.len() - left..].to_vec())
}

/// The handle GETFH returned in `stat4`'s results.
fn stat4_fh(rest: &[u8]) -> Vec<u8> {
    let mut r = engine::xdr::XdrReader::new(rest);
    for op in [OP_PUTFH, OP_LOOKUP, OP_GETFH] {
        assert_eq!(expect_op(&mut r, op), NFS4_OK);
    }
    r.opaque_var(128).unwrap().to_vec()
}

#[test]
fn an_nfs41_stat_is_a_reactor_hit_until_either_version_changes_the_name() {
    let gw = Gw::start(&GwOpts {
        rdma: false,
        ..Default::default()
    });
    let mut v3 = V3::connect(gw.tcp_addr());
    let root = v3.mount_root();
    let dir = v3call::parse_mkdir(&call(&mut v3, Call::Mkdir(&root, "d4"))).unwrap();
    let f = v3.create(&dir, b"f");
    assert_eq!(v3.write(&f, b"12345"), 0);
    let mut v4 = Tcp41::ready(gw.tcp_addr(), b"lookup-cache-v4");

    // The worker's LOOKUP teaches the name: the next stats are reactor hits, each
    // the worker's results.
    let (st, first) = stat4(&mut v4, &dir, b"f");
    assert_eq!(st, NFS4_OK);
    assert_eq!(stat4_fh(&first), f);
    let before = hits(&gw, 0);
    for _ in 0..5 {
        assert_eq!(stat4(&mut v4, &dir, b"f"), (NFS4_OK, first.clone()));
    }
    let after = hits(&gw, before + 5);
    assert!(
        after >= before + 5,
        "stats are reactor hits: {before} → {after}"
    );

    // NFSv3 REMOVE: the next NFSv4.1 LOOKUP is NOENT; made again, the new file.
    call(&mut v3, Call::Remove(&dir, "f"));
    assert_eq!(stat4(&mut v4, &dir, b"f").0, NFS4ERR_NOENT);
    let f2 = v3.create(&dir, b"f");
    assert_ne!(f2, f);
    for _ in 0..3 {
        let (st, rest) = stat4(&mut v4, &dir, b"f");
        assert_eq!(st, NFS4_OK);
        assert_eq!(stat4_fh(&rest), f2);
    }

    // NFSv4.1 RENAME away and LINK: the old name NOENT, the new names the file.
    let (st, _) = v4.seq_run(|o| o.putfh(&dir).savefh().putfh(&dir).rename(b"f", b"g"));
    assert_eq!(st, NFS4_OK, "RENAME");
    assert_eq!(stat4(&mut v4, &dir, b"f").0, NFS4ERR_NOENT);
    let (st, _) = v4.seq_run(|o| o.putfh(&f2).savefh().putfh(&dir).link(b"h"));
    assert_eq!(st, NFS4_OK, "LINK");
    for name in [&b"g"[..], b"h", b"g", b"h"] {
        let (st, rest) = stat4(&mut v4, &dir, name);
        assert_eq!(st, NFS4_OK);
        assert_eq!(stat4_fh(&rest), f2, "{name:?}");
    }
    // NFSv4.1 REMOVE of one link: its name NOENT, the other still the file.
    let (st, _) = v4.seq_run(|o| o.putfh(&dir).remove(b"h"));
    assert_eq!(st, NFS4_OK, "REMOVE");
    assert_eq!(stat4(&mut v4, &dir, b"h").0, NFS4ERR_NOENT);
    assert_eq!(stat4_fh(&stat4(&mut v4, &dir, b"g").1), f2);
}
