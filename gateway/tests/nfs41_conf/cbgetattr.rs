//! CB_GETATTR (RFC 8881 §10.4.3, §20.1): another client's or NFSv3's GETATTR of
//! the size or change of a file under a write delegation asks the holder over the
//! back channel instead of recalling. Unchanged at the holder (its change equals the
//! one at the grant, same size): the server's attributes. Changed: the holder's size,
//! and a change attribute greater than every one presented before; the holder keeps
//! its delegation. A CB_GETATTR answered with garbage, or not at all, ends in the
//! recall it replaced. Meanwhile the reader gets NFS4ERR_DELAY / NFS3ERR_JUKEBOX.

use crate::deleg::with_back_channel;
use crate::nfs4_client::*;
use crate::wdeleg::{open_deleg, v3_file};
use crate::{on_file, third, Gw41};
use nfs_wire::nfs3::NFSPROC3_GETATTR;
use nfs_wire::v3call::{parse_getattr_size, status};
use nfs_wire::v3more::fh_args;
use nfs_wire::NFS_PROGRAM;
use std::io::Write;
use std::time::{Duration, Instant};

/// change (3) and size (4).
const CHANGE_SIZE: u32 = 1 << 3 | 1 << 4;

/// GETATTR of change and size: `Ok((change, size))` or the status.
fn attrs(c: &mut Tcp41, fh: &[u8]) -> Result<(u64, u64), u32> {
    let (st, res) = on_file(c, fh, |o| o.getattr(&[CHANGE_SIZE]));
    if st != NFS4_OK {
        return Err(st);
    }
    let (_, mut r) = third(&res, OP_GETATTR);
    let n = r.u32().unwrap();
    let words: Vec<u32> = (0..n).map(|_| r.u32().unwrap()).collect();
    assert_eq!(words.first().map(|w| w & CHANGE_SIZE), Some(CHANGE_SIZE));
    assert_eq!(r.u32().unwrap(), 16, "two 64-bit values");
    Ok((r.u64().unwrap(), r.u64().unwrap()))
}

/// Repeats `read` (a GETATTR by anyone but the holder) while it is answered
/// NFS4ERR_DELAY / NFS3ERR_JUKEBOX, the holder `a` answering every CB_GETATTR of `fh`
/// meanwhile with `size` and `change` (a CB_RECALL instead fails the test): the
/// reader's answer and how many CB_GETATTRs the holder answered.
fn answered<T>(
    a: &mut Tcp41,
    fh: &[u8],
    (size, change): (u64, u64),
    mut read: impl FnMut() -> Result<T, u32>,
) -> (T, usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut asked = 0;
    loop {
        match read() {
            Ok(v) => return (v, asked),
            Err(st) => assert_eq!(st, NFS4ERR_DELAY, "DELAY and JUKEBOX are 10008"),
        }
        assert!(Instant::now() < deadline, "never answered");
        if let Some(rec) = a.next_callback(Duration::from_millis(200)) {
            assert_eq!(a.answer_getattr(&rec, size, change).fh, fh, "of the file");
            asked += 1;
        }
    }
}

#[test]
fn a_getattr_by_others_gets_the_holders_size_and_the_holder_keeps_its_delegation() {
    let gw = Gw41::start("write_delegations = true");
    let mut a = with_back_channel(&gw, b"cbga-holder");
    let (opened, fh) = open_deleg(&mut a, b"cbga1", ACCESS_BOTH);
    assert!(opened.write, "a write delegation");
    let deleg = opened.deleg.unwrap();
    // sc: the change the holder was given (its own GETATTR asks nobody).
    let (sc, size) = attrs(&mut a, &fh).expect("the holder's GETATTR");
    assert_eq!(size, 0);
    let mut b = gw.client(b"cbga-reader");
    // Nothing changed at the holder (cc = sc, same size): the server's attributes.
    let (got, asked) = answered(&mut a, &fh, (0, sc), || attrs(&mut b, &fh));
    assert_eq!(got, (sc, 0), "unmodified: the server's change and size");
    assert!(asked >= 1, "the holder was asked (CB_GETATTR)");
    // An answer serves readers for a second; then the holder is asked again, and now
    // it has written 4096 bytes it has not sent (cc != sc).
    std::thread::sleep(Duration::from_millis(1100));
    let modified = (4096, sc + 1);
    let ((c1, s1), asked) = answered(&mut a, &fh, modified, || attrs(&mut b, &fh));
    assert!(asked >= 1, "asked again");
    assert_eq!(s1, 4096, "the holder's size");
    assert!(c1 > sc, "a change greater than the last one: {c1} > {sc}");
    // NFSv3 sees the holder's size too.
    let (mut v3, v3fh) = v3_file(&gw, b"cbga1");
    let (v3size, _) = answered(&mut a, &fh, modified, || {
        let rep = v3.call(NFS_PROGRAM, NFSPROC3_GETATTR, &fh_args(&v3fh));
        parse_getattr_size(&rep).map_err(|_| status(&rep))
    });
    assert_eq!(v3size, 4096);
    // Every CB_GETATTR answered while modified moves the change on (§10.4.3: each
    // nsc greater than the last), a second later when the holder is asked again.
    std::thread::sleep(Duration::from_millis(1100));
    let ((c2, _), asked) = answered(&mut a, &fh, modified, || attrs(&mut b, &fh));
    assert!(asked >= 1, "asked again");
    assert!(c2 > c1, "{c2} > {c1}");
    // No recall came; the delegation is the holder's still: it writes under it and
    // returns it (a revoked one would be DELEG_REVOKED).
    assert!(
        a.next_callback(Duration::from_millis(300)).is_none(),
        "no recall"
    );
    let (_, res) = on_file(&mut a, &fh, |o| o.write(&deleg, 0, b"data").commit(0, 0));
    assert_eq!(
        res.status, NFS4_OK,
        "the holder writes under its delegation"
    );
    let (_, res) = on_file(&mut a, &fh, |o| o.delegreturn(&deleg));
    assert_eq!(third(&res, OP_DELEGRETURN).0, NFS4_OK, "still held");
    // Returned: the server's own attributes, the change never going back.
    let (c3, s3) = attrs(&mut b, &fh).expect("no delegation: answered at once");
    assert_eq!(s3, 4);
    assert!(c3 > c2, "{c3} > {c2}");
}

#[test]
fn a_garbled_or_unanswered_cb_getattr_ends_in_a_recall() {
    let gw = Gw41::start("write_delegations = true");
    let mut a = with_back_channel(&gw, b"cbga-silent");
    let mut b = gw.client(b"cbga-asker");
    for (name, garble) in [(&b"cbga2"[..], true), (b"cbga3", false)] {
        let (opened, fh) = open_deleg(&mut a, name, ACCESS_BOTH);
        let deleg = opened.deleg.unwrap();
        assert_eq!(
            attrs(&mut b, &fh),
            Err(NFS4ERR_DELAY),
            "the holder is asked"
        );
        let rec = a
            .next_callback(Duration::from_secs(10))
            .expect("CB_GETATTR");
        let (xid, cb) = nfs_wire::v4cb::decode_getattr(&rec).unwrap();
        if garble {
            // A size past the largest file: no size at all.
            let reply = nfs_wire::v4cb::getattr_reply(xid, &cb, u64::MAX, 1);
            a.s.write_all(&nfs_wire::rpccall::record(&reply).unwrap())
                .unwrap();
        }
        // Unanswered: the callback times out (5 s) and the recall follows.
        let rec = a.next_callback(Duration::from_secs(15)).expect("CB_RECALL");
        assert_eq!(a.answer(&rec).stateid, deleg, "the delegation is recalled");
        assert_eq!(
            attrs(&mut b, &fh),
            Err(NFS4ERR_DELAY),
            "until it is returned"
        );
        let (_, res) = on_file(&mut a, &fh, |o| o.delegreturn(&deleg));
        assert_eq!(third(&res, OP_DELEGRETURN).0, NFS4_OK);
        assert_eq!(attrs(&mut b, &fh).map(|(_, s)| s), Ok(0));
    }
}
