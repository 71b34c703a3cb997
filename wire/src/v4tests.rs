//! The client encoders against engine's RPC decoder and hand-written RFC layouts.

use crate::nfs4::*;
use crate::nfs4args::*;
use crate::rpccall::{self, Auth, AuthSysBody};
use crate::v4call::{compound_call, Channel, Claim, How, Locker, Ops};
use crate::v4cb::{callback_reply, decode_callback, CbRecall};
use crate::v4reply::{self, Res};
use crate::{v3more, NFS_PROGRAM, NFS_V4};
use engine::rpc::{self, Accept, CallError, Cred, ReplyStatus};
use engine::xdr::{XdrError, XdrReader};

fn words(b: &[u8]) -> Vec<u32> {
    assert_eq!(b.len() % 4, 0, "XDR is whole words");
    b.chunks(4)
        .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
        .collect()
}

/// A COMPOUND call decodes as program NFS version 4 procedure COMPOUND with the
/// caller's credential, and its arguments are COMPOUND4args (RFC 8881 §16.2.1).
#[test]
fn compound_call_decodes_as_nfs4_compound() {
    let ops = Ops::new().sequence([9; 16], 3).putrootfh().getfh();
    let m = compound_call(77, &rpccall::sys(5), &ops);
    let (h, at) = rpc::decode_call(&m).unwrap();
    assert_eq!(
        (h.xid, h.prog, h.vers, h.proc_),
        (77, NFS_PROGRAM, NFS_V4, 1)
    );
    assert_eq!(h.cred, rpccall::sys(5));
    let w = words(&m[at..]);
    assert_eq!(&w[..3], &[0, 1, 3], "empty tag, minor 1, three ops");
    assert_eq!(w[3], OP_SEQUENCE);
    assert_eq!(
        &w[8..12],
        &[3, 0, 0, 0],
        "seq 3, slot 0, highest 0, no cache"
    );
    assert_eq!(&w[12..], &[OP_PUTROOTFH, OP_GETFH]);
}

/// OPEN4args (RFC 8881 §18.16.1): EXCLUSIVE4_1 carries the verifier and an empty
/// fattr4; CLAIM_NULL the name, padded.
#[test]
fn open_exclusive41_layout() {
    let o = Ops::new().open(
        0x0102_0304_0506_0708,
        b"ow",
        OPEN4_SHARE_ACCESS_BOTH,
        OPEN4_SHARE_DENY_NONE,
        How::Exclusive41([0xab; 8]),
        Claim::Null(b"name5"),
    );
    let w = words(o.bytes());
    let want = [
        OP_OPEN,
        0,
        3,
        0,
        0x0102_0304,
        0x0506_0708,
        2,
        u32::from_be_bytes(*b"ow\0\0"),
        OPEN4_CREATE,
        EXCLUSIVE4_1,
        0xabab_abab,
        0xabab_abab,
        0,
        0,
        CLAIM_NULL,
        5,
        u32::from_be_bytes(*b"name"),
        u32::from_be_bytes(*b"5\0\0\0"),
    ];
    assert_eq!(w, want);
    assert_eq!(o.n, 1);
}

/// LOCK's two locker arms (RFC 8881 §18.10.1) and CREATE_SESSION's channel and
/// callback fields (§18.36.1) in order.
#[test]
fn lock_and_create_session_layouts() {
    let sid = [1u8; 16];
    let new = Ops::new().lock(
        WRITE_LT,
        false,
        10,
        20,
        Locker::New {
            open_stateid: &sid,
            clientid: 7,
            owner: b"lo",
        },
    );
    let w = words(new.bytes());
    assert_eq!(&w[..8], &[OP_LOCK, WRITE_LT, 0, 0, 10, 0, 20, 1]);
    assert_eq!(w.len(), 8 + 1 + 4 + 1 + 2 + 2);
    let old = Ops::new().lock(READ_LT, true, 0, 1, Locker::Existing { lock_stateid: &sid });
    assert_eq!(words(old.bytes())[7], 0, "exist_lock_owner4 arm");
    assert_eq!(words(old.bytes()).len(), 8 + 4 + 1);

    let ch = Channel {
        headerpad: 0,
        max_request: 1,
        max_response: 2,
        max_response_cached: 3,
        max_ops: 4,
        max_requests: 5,
    };
    let cs = Ops::new().create_session(9, 2, CREATE_SESSION4_FLAG_CONN_BACK_CHAN, &ch, &ch, 1);
    let w = words(cs.bytes());
    assert_eq!(&w[..5], &[OP_CREATE_SESSION, 0, 9, 2, 2]);
    assert_eq!(&w[5..12], &[0, 1, 2, 3, 4, 5, 0]);
    assert_eq!(&w[12..19], &[0, 1, 2, 3, 4, 5, 0]);
    assert_eq!(&w[19..], &[NFS4_CALLBACK, 1, 0]);
}

/// `raw` grows its buffer for an operation larger than the first guess.
#[test]
fn raw_and_write_grow_past_the_first_buffer() {
    let big = vec![7u8; 300 << 10];
    let o = Ops::new()
        .raw(|w| {
            w.u32(OP_ILLEGAL)?;
            w.opaque_var(&big)
        })
        .write_stable(&ANONYMOUS_STATEID, 0, UNSTABLE4, &big);
    assert_eq!(o.n, 2);
    assert_eq!(
        o.bytes().len(),
        8 + big.len() + 4 + 16 + 8 + 4 + 4 + big.len()
    );
}

/// AUTH_SYS with more than 16 groups encodes (a fuzzer sends it) and engine's
/// decoder refuses it with AUTH_BADCRED; 16 groups decode (RFC 5531 Appendix A).
#[test]
fn hostile_auth_sys_is_encoded_and_refused() {
    let gids: Vec<u32> = (0..17).collect();
    let a = |n| {
        Auth::Sys(AuthSysBody {
            stamp: 1,
            machine: b"m",
            uid: 3,
            gid: 4,
            gids: &gids[..n],
        })
    };
    let ok = rpccall::call_with(1, NFS_PROGRAM, NFS_V4, 0, &a(16), &[]).unwrap();
    let (h, _) = rpc::decode_call(&ok).unwrap();
    let Cred::Sys(s) = h.cred else {
        panic!("AUTH_SYS")
    };
    assert_eq!((s.uid, s.gid, s.groups().len()), (3, 4, 16));
    let bad = rpccall::call_with(2, NFS_PROGRAM, NFS_V4, 0, &a(17), &[]).unwrap();
    assert!(matches!(
        rpc::decode_call(&bad),
        Err(CallError::Deny { xid: 2, .. })
    ));
    let none = rpccall::call_with(3, NFS_PROGRAM, NFS_V4, 0, &Auth::None, &[]).unwrap();
    assert_eq!(rpc::decode_call(&none).unwrap().0.cred, Cred::None);
}

#[test]
fn record_marks_one_last_fragment() {
    let r = rpccall::record(b"abcd").unwrap();
    assert_eq!(r, [0x80, 0, 0, 4, b'a', b'b', b'c', b'd']);
}

/// A COMPOUND4res walked result by result; a wrong op number or a short body is an
/// error, not a panic.
#[test]
fn reply_walker_reads_results_and_refuses_short_ones() {
    let mut rep = vec![0, 0, 0, 0, 0, 0, 0, 1, b't', 0, 0, 0, 0, 0, 0, 2];
    rep.extend(OP_SEQUENCE.to_be_bytes());
    rep.extend(NFS4_OK.to_be_bytes());
    rep.extend([5u8; 16]);
    for v in [4u32, 0, 0, 7, SEQ4_STATUS_CB_PATH_DOWN] {
        rep.extend(v.to_be_bytes());
    }
    rep.extend(OP_GETFH.to_be_bytes());
    rep.extend(NFS4_OK.to_be_bytes());
    rep.extend(3u32.to_be_bytes());
    rep.extend(*b"fh\x01\0");
    let res = Res::parse(&rep).unwrap();
    assert_eq!((res.status, res.count), (0, 2));
    let mut r = res.reader();
    assert_eq!(v4reply::expect_op(&mut r, OP_SEQUENCE), Ok(0));
    let s = v4reply::sequence_ok(&mut r).unwrap();
    assert_eq!((s.sequenceid, s.target_highest_slotid), (4, 7));
    assert_eq!(s.status_flags, SEQ4_STATUS_CB_PATH_DOWN);
    assert_eq!(v4reply::expect_op(&mut r, OP_GETFH), Ok(0));
    assert_eq!(v4reply::fh(&mut r).unwrap(), b"fh\x01");
    assert_eq!(res.whole(), &rep[..]);

    let mut r = res.reader();
    assert_eq!(
        v4reply::expect_op(&mut r, OP_GETFH),
        Err(XdrError::BadValue)
    );
    let cut = Res::parse(&rep[..30]).unwrap();
    let mut r = cut.reader();
    v4reply::expect_op(&mut r, OP_SEQUENCE).unwrap();
    assert_eq!(v4reply::sequence_ok(&mut r), Err(XdrError::Short));
}

/// OPEN4resok with a read delegation (RFC 8881 §18.16.2) and with a hostile attrset
/// length.
#[test]
fn open_ok_reads_a_read_delegation() {
    let mut b = vec![2u8; 16];
    b.extend([0u8; 24]); // change_info4, rflags
    b.extend(1u32.to_be_bytes());
    b.extend(0u32.to_be_bytes());
    b.extend(OPEN_DELEGATE_READ.to_be_bytes());
    b.extend([3u8; 16]);
    b.extend([0u8; 16]); // recall, ace type/flag/mask
    b.extend(1u32.to_be_bytes());
    b.extend(*b"w\0\0\0");
    let o = v4reply::open_ok(&mut XdrReader::new(&b)).unwrap();
    assert_eq!(
        (o.stateid, o.deleg, o.write),
        ([2; 16], Some([3; 16]), false)
    );
    b[40..44].copy_from_slice(&u32::MAX.to_be_bytes());
    assert_eq!(
        v4reply::open_ok(&mut XdrReader::new(&b)),
        Err(XdrError::TooLong)
    );
}

/// OPEN4resok with a write delegation (RFC 8881 §18.16.2: open_write_delegation4
/// carries an nfs_space_limit4 before the ACE), and an unknown limit_by4.
#[test]
fn open_ok_reads_a_write_delegation() {
    let mut b = vec![2u8; 16];
    b.extend([0u8; 24]); // change_info4, rflags
    b.extend(0u32.to_be_bytes()); // attrset
    b.extend(OPEN_DELEGATE_WRITE.to_be_bytes());
    b.extend([3u8; 16]);
    b.extend(0u32.to_be_bytes()); // recall
    let limit_at = b.len();
    b.extend(NFS_LIMIT_SIZE.to_be_bytes());
    b.extend(u64::MAX.to_be_bytes());
    b.extend([0u8; 12]); // ace type/flag/mask
    b.extend(1u32.to_be_bytes());
    b.extend(*b"w\0\0\0");
    let o = v4reply::open_ok(&mut XdrReader::new(&b)).unwrap();
    assert_eq!(
        (o.stateid, o.deleg, o.write),
        ([2; 16], Some([3; 16]), true)
    );
    b[limit_at..limit_at + 4].copy_from_slice(&3u32.to_be_bytes());
    assert_eq!(
        v4reply::open_ok(&mut XdrReader::new(&b)),
        Err(XdrError::BadValue)
    );
}

/// A CB_COMPOUND the gateway would send decodes, and the reply decodes as accepted
/// SUCCESS with CB_SEQUENCE echoing session and sequence id (RFC 8881 §20.9.2).
#[test]
fn callback_round_trip() {
    let mut args = vec![0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2];
    args.extend(OP_CB_SEQUENCE.to_be_bytes());
    args.extend([4u8; 16]);
    for v in [9u32, 0, 0, 0, 0] {
        args.extend(v.to_be_bytes());
    }
    args.extend(OP_CB_RECALL.to_be_bytes());
    args.extend([6u8; 16]);
    let call = rpccall::call(41, NFS4_CALLBACK, NFS_CB, CB_COMPOUND, &Cred::None, &args);
    let (xid, what) = decode_callback(&call).unwrap();
    let want = CbRecall {
        session: [4; 16],
        seqid: 9,
        stateid: [6; 16],
    };
    assert_eq!((xid, what), (41, Some(want)));
    let rep = callback_reply(xid, what.as_ref());
    let (rx, st, at) = rpc::decode_reply(&rep).unwrap();
    assert_eq!((rx, st), (41, ReplyStatus::Accepted(Accept::Success)));
    let w = words(&rep[at..]);
    assert_eq!(&w[..5], &[NFS4_OK, 0, 2, OP_CB_SEQUENCE, NFS4_OK]);
    assert_eq!(&w[9..], &[9, 0, 0, 0, OP_CB_RECALL, NFS4_OK]);

    let null = rpccall::call(5, NFS4_CALLBACK, NFS_CB, CB_NULL, &Cred::None, &[]);
    assert_eq!(decode_callback(&null), Ok((5, None)));
    let other = rpccall::call(5, NFS_PROGRAM, NFS_V4, CB_NULL, &Cred::None, &[]);
    assert!(decode_callback(&other).is_err());
    assert!(decode_callback(&call[..call.len() - 8]).is_err());
}

/// A 4.2 session's CB_RECALL comes in a CB_COMPOUND of minor version 2 and reads the
/// same; minor 0 or 3 is not one this client knows.
#[test]
fn callback_of_minor_version_2_is_a_recall_too() {
    let body = |minor: u8| {
        let mut args = vec![0, 0, 0, 0, 0, 0, 0, minor, 0, 0, 0, 0, 0, 0, 0, 2];
        args.extend(OP_CB_SEQUENCE.to_be_bytes());
        args.extend([4u8; 16]);
        for v in [9u32, 0, 0, 0, 0] {
            args.extend(v.to_be_bytes());
        }
        args.extend(OP_CB_RECALL.to_be_bytes());
        args.extend([6u8; 16]);
        rpccall::call(41, NFS4_CALLBACK, NFS_CB, CB_COMPOUND, &Cred::None, &args)
    };
    let (_, got) = decode_callback(&body(2)).unwrap();
    assert_eq!(got.map(|c| c.stateid), Some([6; 16]));
    assert!(decode_callback(&body(0)).is_err());
    assert!(decode_callback(&body(3)).is_err());
}

/// SYMLINK3args (RFC 1813 §3.3.10): the empty sattr3 sits between name and target.
#[test]
fn v3_symlink_layout() {
    let w = words(&v3more::symlink_args(b"d", b"n", b"t"));
    assert_eq!(w.len(), 2 + 2 + 6 + 2);
    assert_eq!(&w[4..10], &[0; 6]);
    assert_eq!(w[10], 1);
}

/// createhow4 with attributes and CREATE's createattrs (RFC 8881 §18.16.1, §18.4.1):
/// bitmap count and words, then the values as one opaque.
#[test]
fn create_attrs_layouts() {
    use crate::v4call::Fattr;
    let attrs = Fattr {
        bitmap: &[0, 2],
        values: &[0, 0, 1, 0xa4],
    };
    let o = Ops::new().open(
        1,
        b"",
        OPEN4_SHARE_ACCESS_READ,
        OPEN4_SHARE_DENY_NONE,
        How::WithAttrs {
            mode: GUARDED4,
            attrs,
        },
        Claim::Fh,
    );
    let w = words(o.bytes());
    assert_eq!(
        &w[7..],
        &[OPEN4_CREATE, GUARDED4, 2, 0, 2, 4, 0x1a4, CLAIM_FH]
    );
    let c = Ops::new().create_with(b"d", None, attrs);
    let w = words(c.bytes());
    assert_eq!(
        w,
        [
            OP_CREATE,
            NF4DIR,
            1,
            u32::from_be_bytes(*b"d\0\0\0"),
            2,
            0,
            2,
            4,
            0x1a4
        ]
    );
}
