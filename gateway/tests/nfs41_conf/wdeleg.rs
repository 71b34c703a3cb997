//! Write delegations (RFC 8881 §10.4, §10.4.3, §18.16, §18.6): granted on an OPEN for
//! writing to a client with a working back channel and no other opener; recalled
//! (CB_RECALL, §20.2) by every other access — an NFSv3 READ, GETATTR or WRITE, a
//! second client's OPEN or GETATTR — each answered NFS3ERR_JUKEBOX / NFS4ERR_DELAY
//! (RFC 1813 §2.6, §10.4.2 here) until DELEGRETURN; what the holder writes before it
//! returns the delegation is what the others then see, never an answer the
//! reactor's cache kept from before the grant.

use crate::deleg::with_back_channel;
use crate::nfs4_client::*;
use crate::{on_file, open_file, third, Gw41};
use nfs_wire::nfs3::{NFSPROC3_GETATTR, NFSPROC3_LOOKUP, NFSPROC3_READ};
use nfs_wire::v3call::{parse_getattr_size, parse_lookup, parse_read, status};
use nfs_wire::v3more::{dirop_args, fh_args, read_args};
use nfs_wire::NFS_PROGRAM;
use std::time::{Duration, Instant};

const NFS3ERR_JUKEBOX: u32 = 10008;

/// OPEN CLAIM_NULL `name` in the root for `access` (want flags included), created
/// UNCHECKED, then GETFH: the OPEN's result and the handle. The CB_NULL probe's
/// answer reaches the callback thread asynchronously: until then OPENs get no
/// delegation, so one without is closed and tried again, for a while.
pub(crate) fn open_deleg(c: &mut Tcp41, name: &[u8], access: u32) -> (Opened, Vec<u8>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let id = c.clientid;
        let (st, res) = c.seq_run(|o| {
            o.putrootfh()
                .open(
                    id,
                    b"o",
                    access,
                    DENY_NONE,
                    How::Unchecked,
                    Claim::Null(name),
                )
                .getfh()
        });
        assert_eq!(st, NFS4_OK);
        let mut r = after_seq(&res);
        expect_op(&mut r, OP_PUTROOTFH);
        expect_op(&mut r, OP_OPEN);
        let opened = parse_open_ok(&mut r);
        expect_op(&mut r, OP_GETFH);
        let fh = r.opaque_var(128).unwrap().to_vec();
        if opened.deleg.is_some() {
            return (opened, fh);
        }
        let (_, res) = on_file(c, &fh, |o| o.close(&opened.stateid));
        assert_eq!(res.status, NFS4_OK);
        assert!(Instant::now() < deadline, "no delegation (§10.4)");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The next CB_RECALL `a` gets; a CB_GETATTR on the way (asked by a reader before
/// the recall began, §10.4.3) is answered with nothing changed.
pub(crate) fn next_recall(a: &mut Tcp41) -> Vec<u8> {
    loop {
        let rec = a.next_callback(Duration::from_secs(10)).expect("CB_RECALL");
        if nfs_wire::v4cb::decode_getattr(&rec).is_err() {
            return rec;
        }
        a.answer_getattr(&rec, 0, 0);
    }
}

/// The holder answers the CB_RECALL naming `deleg`, then writes `data` through the
/// delegation, commits and returns it (what a client flushing its cache does:
/// §10.4.1).
pub(crate) fn flush_and_return(a: &mut Tcp41, fh: &[u8], deleg: &[u8; 16], data: &[u8]) {
    let rec = next_recall(a);
    assert_eq!(a.answer(&rec).stateid, *deleg, "CB_RECALL names it");
    let (_, res) = on_file(a, fh, |o| o.write(deleg, 0, data).commit(0, 0));
    assert_eq!(
        res.status, NFS4_OK,
        "the holder writes under its delegation"
    );
    let (_, res) = on_file(a, fh, |o| o.delegreturn(deleg));
    assert_eq!(third(&res, OP_DELEGRETURN).0, NFS4_OK);
}

/// An NFSv3 client and the handle of `name` in the root.
pub(crate) fn v3_file(gw: &Gw41, name: &[u8]) -> (V3, Vec<u8>) {
    let mut v3 = V3::connect(gw.addr);
    let root = v3.mount_root();
    let rep = v3.call(NFS_PROGRAM, NFSPROC3_LOOKUP, &dirop_args(&root, name));
    let fh = parse_lookup(&rep).unwrap().expect("the file exists");
    (v3, fh)
}

#[test]
fn write_delegation_granted_and_recalled_by_an_nfsv3_getattr_and_read() {
    let gw = Gw41::start("write_delegations = true");
    let mut a = with_back_channel(&gw, b"wdeleg-holder");
    let (opened, fh) = open_deleg(&mut a, b"wd1", ACCESS_BOTH);
    assert!(opened.write, "an OPEN for writing gets a write delegation");
    let deleg = opened.deleg.unwrap();
    let (mut v3, v3fh) = v3_file(&gw, b"wd1");
    // NFSv3 GETATTR: JUKEBOX while the holder is asked (CB_GETATTR, unanswered
    // here) and then while the READ's recall runs (the holder may hold writes).
    let getattr = |v3: &mut V3| v3.call(NFS_PROGRAM, NFSPROC3_GETATTR, &fh_args(&v3fh));
    assert_eq!(status(&getattr(&mut v3)), NFS3ERR_JUKEBOX);
    let read = |v3: &mut V3| v3.call(NFS_PROGRAM, NFSPROC3_READ, &read_args(&v3fh, 0, 64));
    assert_eq!(status(&read(&mut v3)), NFS3ERR_JUKEBOX, "READ waits too");
    flush_and_return(&mut a, &fh, &deleg, b"flushed by the holder");
    assert_eq!(parse_getattr_size(&getattr(&mut v3)).unwrap(), 21);
    assert_eq!(
        parse_read(&read(&mut v3)).unwrap(),
        b"flushed by the holder"
    );
    // The holder's open survives its delegation; DELEGRETURN again → BAD_STATEID.
    let (_, res) = on_file(&mut a, &fh, |o| o.delegreturn(&deleg));
    assert_eq!(third(&res, OP_DELEGRETURN).0, NFS4ERR_BAD_STATEID);
    let (_, res) = on_file(&mut a, &fh, |o| o.close(&opened.stateid));
    assert_eq!(res.status, NFS4_OK);
}

/// The reactor's cache must not answer an NFSv3 GETATTR or READ from what it learned
/// before the grant (the file is held there from grant to return).
#[test]
fn a_cached_file_is_not_answered_from_the_cache_under_a_write_delegation() {
    let gw = Gw41::start("write_delegations = true");
    let mut a = with_back_channel(&gw, b"wdeleg-cached");
    // Created and written by the holder first, closed, then read by NFSv3 (twice: the
    // second is a cache hit).
    let (opened, fh) = open_deleg(&mut a, b"wd2", ACCESS_BOTH);
    let deleg = opened.deleg.unwrap();
    let (_, res) = on_file(&mut a, &fh, |o| {
        o.write(&deleg, 0, b"old").delegreturn(&deleg)
    });
    assert_eq!(res.status, NFS4_OK);
    let (_, res) = on_file(&mut a, &fh, |o| o.close(&opened.stateid));
    assert_eq!(res.status, NFS4_OK);
    let (mut v3, v3fh) = v3_file(&gw, b"wd2");
    let getattr = |v3: &mut V3| v3.call(NFS_PROGRAM, NFSPROC3_GETATTR, &fh_args(&v3fh));
    let read = |v3: &mut V3| v3.call(NFS_PROGRAM, NFSPROC3_READ, &read_args(&v3fh, 0, 64));
    for _ in 0..2 {
        assert_eq!(parse_getattr_size(&getattr(&mut v3)).unwrap(), 3);
        assert_eq!(parse_read(&read(&mut v3)).unwrap(), b"old");
    }
    // DELEGRETURN is no conflict: the holder gets one again (the v3 reads saw no
    // write delegation and block nothing).
    let (opened, _) = open_deleg(&mut a, b"wd2", ACCESS_BOTH);
    assert!(opened.write);
    let deleg = opened.deleg.unwrap();
    assert_eq!(
        status(&getattr(&mut v3)),
        NFS3ERR_JUKEBOX,
        "never the cached size"
    );
    assert_eq!(
        status(&read(&mut v3)),
        NFS3ERR_JUKEBOX,
        "never the cached data"
    );
    flush_and_return(&mut a, &fh, &deleg, b"newer");
    assert_eq!(parse_getattr_size(&getattr(&mut v3)).unwrap(), 5);
    assert_eq!(parse_read(&read(&mut v3)).unwrap(), b"newer");
}

#[test]
fn write_delegation_recalled_by_an_nfsv3_write() {
    let gw = Gw41::start("write_delegations = true");
    let mut a = with_back_channel(&gw, b"wdeleg-v3w");
    let (opened, fh) = open_deleg(&mut a, b"wd3", ACCESS_WRITE);
    assert!(opened.write, "WRITE access alone gets one too");
    let deleg = opened.deleg.unwrap();
    let (mut v3, v3fh) = v3_file(&gw, b"wd3");
    assert_eq!(v3.write(&v3fh, b"v3!"), NFS3ERR_JUKEBOX);
    flush_and_return(&mut a, &fh, &deleg, b"holder");
    assert_eq!(
        v3.write(&v3fh, b"v3!"),
        0,
        "the writer goes on once it was returned"
    );
    let rep = v3.call(NFS_PROGRAM, NFSPROC3_READ, &read_args(&v3fh, 0, 64));
    assert_eq!(parse_read(&rep).unwrap(), b"v3!der");
}

#[test]
fn write_delegation_recalled_by_a_second_clients_getattr_and_open() {
    let gw = Gw41::start("write_delegations = true");
    let mut a = with_back_channel(&gw, b"wdeleg-a");
    let (opened, fh) = open_deleg(&mut a, b"wd4", ACCESS_BOTH);
    let deleg = opened.deleg.unwrap();
    assert!(opened.write);
    let mut b = gw.client(b"wdeleg-b");
    // Attributes the holder's writes do not change: answered, no recall.
    // type (1) and mode (33).
    let (st, _) = on_file(&mut b, &fh, |o| o.getattr(&[1 << 1, 1 << 1]));
    assert_eq!(st, NFS4_OK);
    assert!(
        a.next_callback(Duration::from_millis(300)).is_none(),
        "no recall"
    );
    // Size and change: §10.4.3, the holder is asked (CB_GETATTR, not answered
    // yet: DELAY meanwhile); the read OPEN below recalls it.
    // size (4).
    let size = |b: &mut Tcp41| on_file(b, &fh, |o| o.getattr(&[1 << 4])).0;
    assert_eq!(size(&mut b), NFS4ERR_DELAY);
    let id = b.clientid;
    let open = |b: &mut Tcp41| {
        b.seq_run(|o| {
            o.putrootfh().open(
                id,
                b"b",
                ACCESS_READ | WANT_NO_DELEG,
                DENY_NONE,
                How::NoCreate,
                Claim::Null(b"wd4"),
            )
        })
        .0
    };
    assert_eq!(open(&mut b), NFS4ERR_DELAY, "a read OPEN waits too");
    flush_and_return(&mut a, &fh, &deleg, b"0123456");
    assert_eq!(size(&mut b), NFS4_OK);
    assert_eq!(open(&mut b), NFS4_OK);
    // A file another client has open gets no write delegation (§10.4), though a
    // read delegation would do.
    open_file(&mut b, b"b", b"wd7", ACCESS_READ, DENY_NONE, true).unwrap();
    let (o2, _) = open_plain(&mut a, b"wd7", ACCESS_BOTH);
    assert_eq!(o2.deleg, None);
}

/// OPEN of an existing `name` with no want flags, no retry: (result, handle).
fn open_plain(c: &mut Tcp41, name: &[u8], access: u32) -> (Opened, Vec<u8>) {
    let id = c.clientid;
    let (st, res) = c.seq_run(|o| {
        o.putrootfh()
            .open(
                id,
                b"p",
                access,
                DENY_NONE,
                How::NoCreate,
                Claim::Null(name),
            )
            .getfh()
    });
    assert_eq!(st, NFS4_OK);
    let mut r = after_seq(&res);
    expect_op(&mut r, OP_PUTROOTFH);
    expect_op(&mut r, OP_OPEN);
    let opened = parse_open_ok(&mut r);
    expect_op(&mut r, OP_GETFH);
    (opened, r.opaque_var(128).unwrap().to_vec())
}

/// Hostile stateids (§18.6.3, §9.1.2): another client's DELEGRETURN of it →
/// BAD_STATEID and nothing recalled; WRITE under a read delegation → OPENMODE.
#[test]
fn hostile_delegreturns_and_a_read_delegation_used_to_write() {
    let gw = Gw41::start("write_delegations = true");
    let mut a = with_back_channel(&gw, b"wdeleg-h");
    let (opened, fh) = open_deleg(&mut a, b"wd5", ACCESS_BOTH);
    let deleg = opened.deleg.unwrap();
    let mut b = gw.client(b"wdeleg-thief");
    let (_, res) = on_file(&mut b, &fh, |o| o.delegreturn(&deleg));
    assert_eq!(third(&res, OP_DELEGRETURN).0, NFS4ERR_BAD_STATEID);
    let (_, res) = on_file(&mut a, &fh, |o| {
        o.delegreturn(&deleg).close(&opened.stateid)
    });
    assert_eq!(res.status, NFS4_OK);
    // A read delegation on a file nobody writes (no recent conflict).
    let (ro, fh2) = open_deleg(&mut a, b"wd6", ACCESS_READ);
    assert!(!ro.write, "an OPEN for reading gets a read delegation");
    let rd = ro.deleg.unwrap();
    let (_, res) = on_file(&mut a, &fh2, |o| o.write(&rd, 0, b"x"));
    assert_eq!(third(&res, OP_WRITE).0, NFS4ERR_OPENMODE);
    let (_, res) = on_file(&mut a, &fh2, |o| o.delegreturn(&rd));
    assert_eq!(third(&res, OP_DELEGRETURN).0, NFS4_OK);
    let (_, res) = on_file(&mut a, &fh2, |o| o.delegreturn(&rd));
    assert_eq!(third(&res, OP_DELEGRETURN).0, NFS4ERR_BAD_STATEID, "twice");
}

/// The reactor's cache hits so far (one reactor), once it published them.
fn cache_hits(gw: &Gw41) -> u64 {
    let src = gw.server.as_ref().unwrap().stats_source();
    let mut out = String::new();
    gateway::stats::exposition::render(&src, &mut out);
    let series = "nfsgw_cache_hits_total{reactor=\"0\"} ";
    out.lines()
        .find_map(|l| l.strip_prefix(series)?.parse().ok())
        .unwrap_or(0)
}

/// Repeats `call` until the reactor's hit counter moves past `before` (a worker's
/// fill reaches the reactor asynchronously): whether it did within 3 s.
fn served_by_reactor(gw: &Gw41, mut call: impl FnMut()) -> bool {
    let deadline = Instant::now() + Duration::from_secs(3);
    let before = cache_hits(gw);
    while Instant::now() < deadline {
        call();
        std::thread::sleep(Duration::from_millis(5));
        if cache_hits(gw) > before {
            return true;
        }
    }
    false
}

/// The holder of a write delegation is still answered from the reactor's cache
/// (its own view is the one the server has: RFC 8881 §10.4), its GETATTR and READ
/// alike; another client's calls on the file never are, even of attributes that
/// recall nothing (answered by a worker).
#[test]
fn the_holder_keeps_the_reactors_cache_and_nobody_else_does() {
    let gw = Gw41::start("write_delegations = true");
    let mut a = with_back_channel(&gw, b"wdeleg-cachekeeper");
    let (opened, fh) = open_deleg(&mut a, b"wd9", ACCESS_BOTH);
    assert!(opened.write);
    let deleg = opened.deleg.unwrap();
    let (_, res) = on_file(&mut a, &fh, |o| o.write(&deleg, 0, b"mine").commit(0, 0));
    assert_eq!(res.status, NFS4_OK);
    // size (4) and change (3).
    let attrs = [1 << 4 | 1 << 3, 0];
    let getattr = |a: &mut Tcp41| {
        let (st, _) = on_file(a, &fh, |o| o.getattr(&attrs));
        assert_eq!(st, NFS4_OK);
    };
    assert!(
        served_by_reactor(&gw, || getattr(&mut a)),
        "the holder's GETATTR from the cache"
    );
    let read = |a: &mut Tcp41| {
        let (_, res) = on_file(a, &fh, |o| o.read(&deleg, 0, 64));
        let (st, mut rd) = third(&res, OP_READ);
        assert_eq!(st, NFS4_OK);
        rd.u32().unwrap();
        assert_eq!(rd.opaque_var(64).unwrap(), b"mine");
    };
    assert!(
        served_by_reactor(&gw, || read(&mut a)),
        "the holder's READ from the cache"
    );
    // Another client: type and mode (1, 33) answered, by a worker, every time.
    let mut b = gw.client(b"wdeleg-cacheless");
    let other = |b: &mut Tcp41| {
        let (st, _) = on_file(b, &fh, |o| o.getattr(&[1 << 1, 1 << 1]));
        assert_eq!(st, NFS4_OK);
    };
    assert!(
        !served_by_reactor(&gw, || other(&mut b)),
        "another client is never answered from the cache while the file is held"
    );
    let (_, res) = on_file(&mut a, &fh, |o| o.delegreturn(&deleg));
    assert_eq!(third(&res, OP_DELEGRETURN).0, NFS4_OK);
    assert!(
        served_by_reactor(&gw, || other(&mut b)),
        "returned: the others' calls are cached again"
    );
}
