//! RFC 9754 ("Extending the Opening of Files in NFSv4.2") in minor version 2:
//! open_arguments (86) says what OPEN takes (§4.1); OPEN4_SHARE_ACCESS_WANT_OPEN_XOR_
//! DELEGATION gives a delegation and no open stateid (§5); OPEN4_SHARE_ACCESS_WANT_
//! DELEG_TIMESTAMPS gives the `*_ATTRS_DELEG` delegation types (§6), whose holder
//! sets time_deleg_access (84) / time_deleg_modify (85) under its delegation stateid —
//! times before the grant's are ignored, future ones clamped — and answers them in
//! CB_GETATTR. Nobody else may set them (NFS4ERR_BAD_STATEID); a 4.1 COMPOUND knows
//! none of it (NFS4ERR_ATTRNOTSUPP, NFS4ERR_INVAL for the flags).

use crate::deleg::with_back_channel;
use crate::nfs4_client::*;
use crate::wdeleg::open_deleg;
use crate::{on_file, third, Gw41};
use nfs_wire::delstid::*;
use nfs_wire::nfs4args::OPEN_DELEGATE_READ;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// time_access (47) and time_modify (53): word 1, bits 15 and 21.
const TIMES_WORD1: u32 = 1 << 15 | 1 << 21;
/// time_deleg_access (84) and time_deleg_modify (85): word 2, bits 20 and 21.
const DELEG_A: u32 = 1 << 20;
const DELEG_M: u32 = 1 << 21;

type T = (i64, u32);

/// NFS4ERR_ATTRNOTSUPP (RFC 8881 §15.1.15.1).
const NFS4ERR_ATTRNOTSUPP: u32 = 10032;

/// A 4.2 client with its back channel up (delegations need it).
fn client42(gw: &Gw41, owner: &[u8]) -> Tcp41 {
    let mut c = with_back_channel(gw, owner);
    c.minor = 2;
    c
}

fn now() -> T {
    let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    (d.as_secs() as i64, d.subsec_nanos())
}

fn plus(t: T, ms: i64) -> T {
    let ns = t.0 as i128 * 1_000_000_000 + t.1 as i128 + ms as i128 * 1_000_000;
    (
        ns.div_euclid(1_000_000_000) as i64,
        ns.rem_euclid(1_000_000_000) as u32,
    )
}

/// GETATTR of time_access and time_modify.
fn times(c: &mut Tcp41, fh: &[u8]) -> (T, T) {
    let (st, res) = on_file(c, fh, |o| o.getattr(&[0, TIMES_WORD1]));
    assert_eq!(st, NFS4_OK);
    let (_, mut r) = third(&res, OP_GETATTR);
    let n = r.u32().unwrap();
    let words: Vec<u32> = (0..n).map(|_| r.u32().unwrap()).collect();
    assert_eq!(words.get(1).copied(), Some(TIMES_WORD1));
    assert_eq!(r.u32().unwrap(), 24);
    let mut t = || (r.i64().unwrap(), r.u32().unwrap());
    (t(), t())
}

/// SETATTR under `sid` of the delegated times given (`None`: not sent).
fn set_deleg_times(c: &mut Tcp41, fh: &[u8], sid: &[u8; 16], a: Option<T>, m: Option<T>) -> u32 {
    let (bits, vals) = deleg_fattr(a, m);
    let (st, _) = on_file(c, fh, |o| o.setattr(sid, &bits, &vals));
    st
}

fn deleg_fattr(a: Option<T>, m: Option<T>) -> ([u32; 3], Vec<u8>) {
    let mut word2 = 0;
    let mut vals = Vec::new();
    if let Some((s, n)) = a {
        word2 |= DELEG_A;
        vals.extend(encode_time(s, n));
    }
    if let Some((s, n)) = m {
        word2 |= DELEG_M;
        vals.extend(encode_time(s, n));
    }
    ([0, 0, word2], vals)
}

#[test]
fn open_arguments_and_the_delegated_times_are_42_attributes() {
    let gw = Gw41::start("write_delegations = true");
    let mut c = gw.client(b"dts-attrs");
    let (_, fh) = crate::open_file(&mut c, b"o", b"dts0", ACCESS_BOTH, DENY_NONE, true).unwrap();
    for minor in [1, 2] {
        c.minor = minor;
        // supported_attrs: 84, 85 and 86 in 4.2 only.
        let (st, res) = on_file(&mut c, &fh, |o| o.getattr(&[1]));
        assert_eq!(st, NFS4_OK);
        let (_, mut r) = third(&res, OP_GETATTR);
        let n = r.u32().unwrap();
        r.skip(4 * n as usize + 4).unwrap();
        let words: Vec<u32> = (0..r.u32().unwrap()).map(|_| r.u32().unwrap()).collect();
        let third_word = words.get(2).copied().unwrap_or(0);
        let want = if minor == 2 { 7 << 20 } else { 0 };
        assert_eq!(third_word & 7 << 20, want, "minor {minor}");
        // open_arguments of the root and of a file: asked in 4.1, left out.
        for obj in [None, Some(&fh)] {
            let (st, res) = c.seq_run(|o| {
                match obj {
                    Some(fh) => o.putfh(fh),
                    None => o.putrootfh(),
                }
                .getattr(&[0, 0, 1 << 22])
            });
            assert_eq!(st, NFS4_OK);
            let mut r = after_seq(&res);
            r.skip(8).unwrap(); // PUTFH / PUTROOTFH result
            assert_eq!(expect_op(&mut r, OP_GETATTR), NFS4_OK);
            let n = r.u32().unwrap();
            let words: Vec<u32> = (0..n).map(|_| r.u32().unwrap()).collect();
            let len = r.u32().unwrap() as usize;
            if minor == 1 {
                assert!(words.iter().all(|&w| w == 0) && len == 0, "not in 4.1");
                continue;
            }
            assert_eq!(words, [0, 0, 1 << 22]);
            let body = r.opaque_fixed(len).unwrap();
            let (oa, used) = OpenArguments::decode(body).expect("open_arguments4");
            assert_eq!(used, len);
            assert_eq!(oa.share_access, 0b1110);
            assert_eq!(oa.share_deny, 0b1111);
            for v in [
                OPEN_ARGS_SHARE_ACCESS_WANT_ANY_DELEG,
                OPEN_ARGS_SHARE_ACCESS_WANT_NO_DELEG,
                OPEN_ARGS_SHARE_ACCESS_WANT_CANCEL,
                OPEN_ARGS_SHARE_ACCESS_WANT_DELEG_TIMESTAMPS,
                OPEN_ARGS_SHARE_ACCESS_WANT_OPEN_XOR_DELEGATION,
            ] {
                assert!(oa.share_access_want & bit(v) != 0, "want {v}");
            }
            // The claims that can succeed here: no delegation outlives a restart.
            assert_eq!(oa.open_claim & bit(OPEN_ARGS_OPEN_CLAIM_DELEGATE_PREV), 0);
            assert_ne!(oa.open_claim & bit(OPEN_ARGS_OPEN_CLAIM_FH), 0);
            assert_eq!(oa.create_mode, 0b1111);
        }
    }
    // The delegated times in a 4.1 SETATTR: unknown attributes.
    c.minor = 1;
    let st = set_deleg_times(&mut c, &fh, &[0; 16], Some(now()), None);
    assert_eq!(st, NFS4ERR_ATTRNOTSUPP);
    // In 4.2 without a delegation: only a delegation's holder may set them.
    c.minor = 2;
    for sid in [[0; 16], [0xff; 16]] {
        let st = set_deleg_times(&mut c, &fh, &sid, Some(now()), None);
        assert_eq!(st, NFS4ERR_BAD_STATEID, "a special stateid");
    }
    // open_arguments is read-only: INVAL (RFC 8881 §18.30.3), in 4.2.
    let (st, _) = on_file(&mut c, &fh, |o| {
        o.setattr(&[0; 16], &[0, 0, 1 << 22], &[0; 20])
    });
    assert_eq!(st, NFS4ERR_INVAL);
}

#[test]
fn the_holder_of_a_write_attrs_delegation_sets_the_times() {
    let gw = Gw41::start("write_delegations = true");
    let mut a = client42(&gw, b"dts-holder");
    let want = ACCESS_BOTH | OPEN4_SHARE_ACCESS_WANT_DELEG_TIMESTAMPS;
    let (opened, fh) = open_deleg(&mut a, b"dts1", want);
    assert_eq!(opened.kind, OPEN_DELEGATE_WRITE_ATTRS_DELEG);
    assert!(opened.write);
    let deleg = opened.deleg.unwrap();
    let (_, m0) = times(&mut a, &fh);
    std::thread::sleep(Duration::from_millis(1100));
    // Times after the grant's and not in the future are stored as given.
    let (ta, tm) = (plus(m0, 300), plus(m0, 500));
    assert_eq!(
        set_deleg_times(&mut a, &fh, &deleg, Some(ta), Some(tm)),
        NFS4_OK
    );
    assert_eq!(times(&mut a, &fh), (ta, tm));
    // Read back as the delegated attributes too.
    let (st, res) = on_file(&mut a, &fh, |o| o.getattr(&[0, 0, DELEG_A | DELEG_M]));
    assert_eq!(st, NFS4_OK);
    let (_, mut r) = third(&res, OP_GETATTR);
    let n = r.u32().unwrap() as usize;
    r.skip(4 * n).unwrap();
    assert_eq!(r.u32().unwrap(), 24);
    let got: Vec<T> = (0..2)
        .map(|_| (r.i64().unwrap(), r.u32().unwrap()))
        .collect();
    assert_eq!(got, [ta, tm]);
    // Before the grant's time: ignored (still OK).
    let old = plus(m0, -100_000);
    assert_eq!(
        set_deleg_times(&mut a, &fh, &deleg, Some(old), Some(old)),
        NFS4_OK
    );
    assert_eq!(times(&mut a, &fh), (ta, tm));
    // In the future: clamped to the server's now.
    let before = now();
    let later = plus(before, 86_400_000);
    assert_eq!(
        set_deleg_times(&mut a, &fh, &deleg, None, Some(later)),
        NFS4_OK
    );
    let (_, m2) = times(&mut a, &fh);
    assert!(m2 >= before && m2 <= now(), "{m2:?} clamped to now");
    // Nanoseconds of 10^9 or more: INVAL.
    for bad in [(m0.0 + 1, 1_000_000_000), (m0.0 + 1, u32::MAX)] {
        let st = set_deleg_times(&mut a, &fh, &deleg, None, Some(bad));
        assert_eq!(st, NFS4ERR_INVAL);
        let st = set_deleg_times(&mut a, &fh, &deleg, Some(bad), None);
        assert_eq!(st, NFS4ERR_INVAL);
    }
    // The holder's open stateid is no delegation: BAD_STATEID.
    let st = set_deleg_times(&mut a, &fh, &opened.stateid, Some(ta), None);
    assert_eq!(st, NFS4ERR_BAD_STATEID);
    // Another client, with the holder's delegation stateid: BAD_STATEID.
    let mut b = gw.client(b"dts-other");
    b.minor = 2;
    let st = set_deleg_times(&mut b, &fh, &deleg, Some(plus(m0, 700)), None);
    assert_eq!(st, NFS4ERR_BAD_STATEID);
    // The holder hands the times back before DELEGRETURN, in one COMPOUND.
    let (fa, fm) = (plus(m0, 800), plus(m0, 900));
    let (bits, vals) = deleg_fattr(Some(fa), Some(fm));
    let (st, _) = on_file(&mut a, &fh, |o| {
        o.setattr(&deleg, &bits, &vals).delegreturn(&deleg)
    });
    assert_eq!(st, NFS4_OK);
    // Returned: the other client sees them; the stateid sets nothing any more.
    assert_eq!(times(&mut b, &fh), (fa, fm));
    let st = set_deleg_times(&mut a, &fh, &deleg, Some(plus(m0, 950)), None);
    assert_eq!(st, NFS4ERR_BAD_STATEID);
}

#[test]
fn a_read_attrs_delegation_delegates_the_access_time_only() {
    let gw = Gw41::start("write_delegations = true");
    let mut a = client42(&gw, b"dts-reader");
    let want = ACCESS_READ | OPEN4_SHARE_ACCESS_WANT_DELEG_TIMESTAMPS;
    let (opened, fh) = open_deleg(&mut a, b"dts2", want);
    assert_eq!(opened.kind, OPEN_DELEGATE_READ_ATTRS_DELEG);
    assert!(!opened.write);
    let deleg = opened.deleg.unwrap();
    let (a0, m0) = times(&mut a, &fh);
    std::thread::sleep(Duration::from_millis(1100));
    let ta = plus(a0, 400);
    assert_eq!(
        set_deleg_times(&mut a, &fh, &deleg, Some(ta), None),
        NFS4_OK
    );
    assert_eq!(times(&mut a, &fh), (ta, m0));
    // The modify time is not delegated by a read delegation.
    let st = set_deleg_times(&mut a, &fh, &deleg, None, Some(plus(m0, 400)));
    assert_eq!(st, NFS4ERR_OPENMODE);
    let st = set_deleg_times(&mut a, &fh, &deleg, Some(ta), Some(plus(m0, 400)));
    assert_eq!(st, NFS4ERR_OPENMODE);
    // A plain read delegation (no DELEG_TIMESTAMPS) delegates no time at all.
    let (plain, fh3) = open_deleg(&mut a, b"dts3", ACCESS_READ);
    assert_eq!(plain.kind, OPEN_DELEGATE_READ);
    let d3 = plain.deleg.unwrap();
    let st = set_deleg_times(&mut a, &fh3, &d3, Some(plus(a0, 500)), None);
    assert_eq!(st, NFS4ERR_BAD_STATEID);
    // Another file's delegation: BAD_STATEID.
    let st = set_deleg_times(&mut a, &fh3, &deleg, Some(plus(a0, 500)), None);
    assert_eq!(st, NFS4ERR_BAD_STATEID);
}

#[test]
fn open_xor_delegation_returns_the_delegation_alone() {
    let gw = Gw41::start("write_delegations = true");
    let mut a = client42(&gw, b"dts-xor");
    let want = ACCESS_READ | OPEN4_SHARE_ACCESS_WANT_OPEN_XOR_DELEGATION;
    let (opened, fh) = open_deleg(&mut a, b"dts4", want);
    assert_eq!(opened.kind, OPEN_DELEGATE_READ);
    assert_ne!(opened.rflags & OPEN4_RESULT_NO_OPEN_STATEID, 0);
    assert_eq!(opened.stateid, [0; 16], "no open stateid");
    let deleg = opened.deleg.unwrap();
    // Nothing to CLOSE: the zero stateid is no open of the file.
    let (st, _) = on_file(&mut a, &fh, |o| o.close(&opened.stateid));
    assert_ne!(st, NFS4_OK);
    // The delegation stateid reads.
    let (st, _) = on_file(&mut a, &fh, |o| o.read(&deleg, 0, 16));
    assert_eq!(st, NFS4_OK);
    // Recalled, the holder reopens under the delegation (CLAIM_DELEG_CUR_FH) and
    // gets an open stateid, then returns it.
    let id = a.clientid;
    let (st, res) = on_file(&mut a, &fh, |o| {
        o.open(
            id,
            b"o",
            ACCESS_READ,
            DENY_NONE,
            How::NoCreate,
            Claim::DelegCurFh(&deleg),
        )
    });
    assert_eq!(st, NFS4_OK);
    let (_, mut r) = third(&res, OP_OPEN);
    let reopened = parse_open_ok(&mut r);
    assert_ne!(reopened.stateid, [0; 16]);
    assert_eq!(reopened.rflags & OPEN4_RESULT_NO_OPEN_STATEID, 0);
    let (st, _) = on_file(&mut a, &fh, |o| o.delegreturn(&deleg));
    assert_eq!(st, NFS4_OK);
    let (st, _) = on_file(&mut a, &fh, |o| o.close(&reopened.stateid));
    assert_eq!(st, NFS4_OK);
    // No delegation wanted, or none granted: an open stateid, the flag clear.
    let id = a.clientid;
    for extra in [WANT_NO_DELEG, 0x500 /* WANT_CANCEL */] {
        let (st, res) = a.seq_run(|o| {
            o.putrootfh().open(
                id,
                b"p",
                want | extra | OPEN4_SHARE_ACCESS_WANT_DELEG_TIMESTAMPS,
                DENY_NONE,
                How::Unchecked,
                Claim::Null(b"dts5"),
            )
        });
        assert_eq!(st, NFS4_OK, "odd combinations are still OPENs");
        let mut r = after_seq(&res);
        expect_op(&mut r, OP_PUTROOTFH);
        expect_op(&mut r, OP_OPEN);
        let o = parse_open_ok(&mut r);
        assert!(o.deleg.is_none());
        assert_eq!(o.rflags & OPEN4_RESULT_NO_OPEN_STATEID, 0);
        assert_ne!(o.stateid, [0; 16]);
    }
    // Both new flags, write access: a write delegation with times, alone.
    let both = ACCESS_BOTH
        | OPEN4_SHARE_ACCESS_WANT_OPEN_XOR_DELEGATION
        | OPEN4_SHARE_ACCESS_WANT_DELEG_TIMESTAMPS;
    let (o6, _) = open_deleg(&mut a, b"dts6", both);
    assert_eq!(o6.kind, OPEN_DELEGATE_WRITE_ATTRS_DELEG);
    assert_eq!(o6.stateid, [0; 16]);
    // In 4.1 the flags are unknown share_access bits: INVAL.
    a.minor = 1;
    for flag in [
        OPEN4_SHARE_ACCESS_WANT_OPEN_XOR_DELEGATION,
        OPEN4_SHARE_ACCESS_WANT_DELEG_TIMESTAMPS,
    ] {
        let (st, _) = a.seq_run(|o| {
            o.putrootfh().open(
                id,
                b"q",
                ACCESS_READ | flag,
                DENY_NONE,
                How::NoCreate,
                Claim::Null(b"dts5"),
            )
        });
        assert_eq!(st, NFS4ERR_INVAL);
    }
    // Unknown bits beside them stay unknown in 4.2.
    a.minor = 2;
    let (st, _) = a.seq_run(|o| {
        o.putrootfh().open(
            id,
            b"q",
            ACCESS_READ | 1 << 22,
            DENY_NONE,
            How::NoCreate,
            Claim::Null(b"dts5"),
        )
    });
    assert_eq!(st, NFS4ERR_INVAL);
}

#[test]
fn cb_getattr_brings_the_holders_delegated_times() {
    let gw = Gw41::start("write_delegations = true");
    let mut a = client42(&gw, b"dts-cbga");
    let want = ACCESS_BOTH | OPEN4_SHARE_ACCESS_WANT_DELEG_TIMESTAMPS;
    let (opened, fh) = open_deleg(&mut a, b"dts7", want);
    assert_eq!(opened.kind, OPEN_DELEGATE_WRITE_ATTRS_DELEG);
    let (_, m0) = times(&mut a, &fh);
    let (ta, tm) = (plus(m0, 200), plus(m0, 300));
    std::thread::sleep(Duration::from_millis(1100));
    let mut b = gw.client(b"dts-cbga-reader");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut asked = false;
    let got = loop {
        let (st, res) = on_file(&mut b, &fh, |o| o.getattr(&[1 << 4, TIMES_WORD1]));
        if st == NFS4_OK {
            let (_, mut r) = third(&res, OP_GETATTR);
            let n = r.u32().unwrap() as usize;
            r.skip(4 * n + 4).unwrap();
            let size = r.u64().unwrap();
            let mut t = || (r.i64().unwrap(), r.u32().unwrap());
            break (size, t(), t());
        }
        assert_eq!(st, NFS4ERR_DELAY);
        assert!(Instant::now() < deadline, "never answered");
        if let Some(rec) = a.next_callback(Duration::from_millis(200)) {
            let (xid, cb) = nfs_wire::v4cb::decode_getattr(&rec).expect("CB_GETATTR");
            assert!(cb.times, "the delegated times are asked (RFC 9754 §6.1)");
            let reply = nfs_wire::v4cb::getattr_reply_times(xid, &cb, (10, 99), ta, tm);
            use std::io::Write;
            a.s.write_all(&nfs_wire::rpccall::record(&reply).unwrap())
                .unwrap();
            asked = true;
        }
    };
    assert!(asked);
    assert_eq!(got, (10, ta, tm), "the holder's size and times");
}
