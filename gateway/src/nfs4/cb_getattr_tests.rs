//! CB_GETATTR's bytes, from RFC 8881 §20.1 (arguments: handle, attr_request bitmap4;
//! result: status, then fattr4) and §3.3.9 (fattr4: bitmap, values in bit order), and
//! what the recall table is told about every reply, hostile ones included.

use super::*;
use crate::nfs4::callback::{encode, CbCall, Wire, CB_COMPOUND};
use crate::state::backchannel::CallbackWire;
use engine::rpc::Cred;

const PROG: u32 = 0x4000_0042;
const BADHANDLE: u32 = 10001;
const SEQ_MISORDERED: u32 = 10063;

fn words(b: &[u8]) -> Vec<u32> {
    b.chunks(4)
        .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
        .collect()
}

fn bytes(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|w| w.to_be_bytes()).collect()
}

/// An accepted-SUCCESS reply (null verifier) with `body` words after the header.
fn reply(xid: u32, body: &[u32]) -> Vec<u8> {
    bytes(&[&[xid, 1, 0, 0, 0, 0][..], body].concat())
}

/// CB_COMPOUND4res: status, empty tag, two results: CB_SEQUENCE OK (session of 1s,
/// `seqid`, slots 0) and CB_GETATTR `st` with `tail` after it.
fn compound(st: u32, seqid: u32, tail: &[u32]) -> Vec<u32> {
    let mut b = vec![st, 0, 2, OP_CB_SEQUENCE, 0];
    b.extend([0x0101_0101; 4]);
    b.extend([seqid, 0, 0, 0, OP_CB_GETATTR, st]);
    b.extend(tail);
    b
}

/// fattr4 with bitmap `bits` and these 64-bit values.
fn fattr4(bits: &[u32], vals: &[u64]) -> Vec<u32> {
    let mut b = vec![bits.len() as u32];
    b.extend(bits);
    b.push(vals.len() as u32 * 8);
    for v in vals {
        b.extend([(*v >> 32) as u32, *v as u32]);
    }
    b
}

#[test]
fn cb_getattr_asks_the_handles_change_and_size_after_cb_sequence() {
    let fh = [7u8; 10];
    let call = CbCall::Getattr {
        session: [0x33; 16],
        minor: 2,
        seqid: 5,
        fh: &fh,
        times: false,
    };
    let b = encode(0x99, PROG, &call, 4096, None).unwrap();
    let (h, at) = rpc::decode_call(&b).unwrap();
    assert_eq!(
        (h.xid, h.prog, h.vers, h.proc_),
        (0x99, PROG, 1, CB_COMPOUND)
    );
    assert!(matches!(h.cred, Cred::Sys(_)));
    let w = words(&b[at..]);
    // tag "nfsgw", minor 2, callback_ident 0, two operations, CB_SEQUENCE.
    assert_eq!(
        &w[..7],
        &[5, 0x6e66_7367, 0x7700_0000, 2, 0, 2, OP_CB_SEQUENCE]
    );
    assert_eq!(&w[7..11], &[0x3333_3333; 4]);
    // sequence id, slot 0, highest slot 0, cachethis false, no referring lists.
    assert_eq!(&w[11..16], &[5, 0, 0, 0, 0]);
    // CB_GETATTR4args: the handle (10 bytes, padded), bitmap4 of change and size.
    assert_eq!(w[16], OP_CB_GETATTR);
    assert_eq!(w[17], 10);
    assert_eq!(&b[at + 18 * 4..at + 18 * 4 + 10], &fh);
    assert_eq!(&w[21..], &[1, 1 << 3 | 1 << 4]);
    // The client's decoder (nfs_wire) reads the same call.
    let (xid, got) = nfs_wire::v4cb::decode_getattr(&b).unwrap();
    assert_eq!((xid, got.fh.as_slice(), got.seqid), (0x99, &fh[..], 5));
    // A handle longer than NFS4_FHSIZE is never sent, nor a call past the channel.
    let long = [0u8; 129];
    let bad = CbCall::Getattr {
        session: [0; 16],
        minor: 1,
        seqid: 1,
        fh: &long,
        times: false,
    };
    assert!(encode(1, PROG, &bad, 4096, None).is_err());
    assert!(encode(1, PROG, &call, 100, None).is_err());
}

#[test]
fn the_holders_size_and_change_come_back_to_the_table() {
    let ok = RecallReply::Sequenced(RecallAnswer::Accepted);
    let good = reply(3, &compound(0, 1, &fattr4(&[0x18], &[77, 4096])));
    let want = CbAttrs {
        size: 4096,
        change: 77,
        ..CbAttrs::default()
    };
    assert_eq!(getattr_reply(&good), (ok, Some(want)));
    assert_eq!(Wire.getattr_reply(&good), (ok, Some(want)));
    // More attributes after size (time_modify in word 1, say) are left unread.
    let more = fattr4(&[0x18, 1 << 21], &[77, 4096, 5]);
    assert_eq!(
        getattr_reply(&reply(3, &compound(0, 1, &more))),
        (ok, Some(want))
    );
    // The client's encoder (nfs_wire) writes what we read.
    let cb = nfs_wire::v4cb::CbGetattr {
        session: [1; 16],
        seqid: 1,
        fh: vec![1],
        times: false,
    };
    let rec = nfs_wire::v4cb::getattr_reply(3, &cb, 4096, 77);
    assert_eq!(getattr_reply(&rec), (ok, Some(want)));
}

/// RFC 9754 §6.1: of a file whose times are delegated, CB_GETATTR also asks
/// time_deleg_access (84) and time_deleg_modify (85), word 2 bits 20 and 21; the
/// holder's nfstime4s come back with the size and change. A time with 10^9
/// nanoseconds is no answer (the recall follows); times behind an attribute we do
/// not read are left unread.
#[test]
fn delegated_times_are_asked_and_read_back() {
    let fh = [9u8; 4];
    let call = CbCall::Getattr {
        session: [0x33; 16],
        minor: 2,
        seqid: 5,
        fh: &fh,
        times: true,
    };
    let b = encode(0x77, PROG, &call, 4096, None).unwrap();
    let (_, at) = rpc::decode_call(&b).unwrap();
    let w = words(&b[at..]);
    assert_eq!(&w[w.len() - 4..], &[3, 1 << 3 | 1 << 4, 0, 3 << 20]);
    let (_, got) = nfs_wire::v4cb::decode_getattr(&b).unwrap();
    assert!(got.times, "the client's decoder sees the times asked");
    let ok = RecallReply::Sequenced(RecallAnswer::Accepted);
    let t = |sec, nsec| crate::fs::NfsTime { sec, nsec };
    let rec = nfs_wire::v4cb::getattr_reply_times(3, &got, (4096, 77), (10, 1), (-2, 999_999_999));
    let want = CbAttrs {
        size: 4096,
        change: 77,
        atime: Some(t(10, 1)),
        mtime: Some(t(-2, 999_999_999)),
    };
    assert_eq!(getattr_reply(&rec), (ok, Some(want)));
    // Only the modify time: read as such.
    let body = compound(0, 1, &[3, 0x18, 0, 1 << 21, 28, 0, 77, 0, 4096, 0, 5, 6]);
    let (_, a) = getattr_reply(&reply(3, &body));
    assert_eq!(a.map(|a| (a.atime, a.mtime)), Some((None, Some(t(5, 6)))));
    // Nanoseconds of 10^9: unusable, a refusal.
    let bad = nfs_wire::v4cb::getattr_reply_times(3, &got, (4096, 77), (10, 1_000_000_000), (1, 1));
    assert_eq!(getattr_reply(&bad).1, None);
    // time_modify (53) before them: their place is unknown, the times are left.
    let mut body = compound(0, 1, &[3, 0x18, 1 << 21, 3 << 20]);
    body.extend([52, 0, 77, 0, 4096, 0, 9, 9, 0, 1, 0, 0, 2, 0]);
    let (_, a) = getattr_reply(&reply(3, &body));
    assert_eq!(
        a.map(|a| (a.size, a.atime, a.mtime)),
        Some((4096, None, None))
    );
}

#[test]
fn failed_cb_getattrs_say_how_the_slot_moved() {
    // CB_GETATTR refused (the client does not know the handle): sequenced, no attrs.
    let body = compound(BADHANDLE, 1, &[]);
    assert_eq!(
        getattr_reply(&reply(3, &body)),
        (RecallReply::Sequenced(RecallAnswer::Unknown), None)
    );
    // CB_SEQUENCE misordered: no CB_GETATTR result.
    let body = [SEQ_MISORDERED, 0, 1, OP_CB_SEQUENCE, SEQ_MISORDERED];
    assert_eq!(
        getattr_reply(&reply(3, &body)),
        (RecallReply::SeqMisordered, None)
    );
    // RPC-level failure: no answer.
    let denied = bytes(&[8, 1, 1, 1, 1]);
    assert_eq!(getattr_reply(&denied), (RecallReply::NoAnswer, None));
}

#[test]
fn hostile_cb_getattr_replies_fail_and_never_panic() {
    let good = reply(3, &compound(0, 1, &fattr4(&[0x18], &[77, 4096])));
    for cut in 0..good.len() {
        let (_, attrs) = getattr_reply(&good[..cut]);
        assert_eq!(attrs, None, "a record cut at {cut} gives no attributes");
    }
    let refused = RecallReply::Sequenced(RecallAnswer::Refused(NFS4ERR_BADXDR.as_u32()));
    let cases: [(&str, Vec<u32>); 7] = [
        ("size missing", fattr4(&[0x08], &[77])),
        ("change missing", fattr4(&[0x10], &[4096])),
        ("type before them", fattr4(&[0x1a], &[1, 77, 4096])),
        ("no bitmap", fattr4(&[], &[77, 4096])),
        (
            "a size past the largest file",
            fattr4(&[0x18], &[77, u64::MAX]),
        ),
        ("values shorter than the bitmap", fattr4(&[0x18], &[77])),
        ("a huge bitmap", vec![u32::MAX, 0x18]),
    ];
    for (what, tail) in cases {
        let r = getattr_reply(&reply(3, &compound(0, 1, &tail)));
        assert_eq!(r, (refused, None), "{what}");
    }
    // Attribute values longer than any we read; a huge result count; garbage.
    let mut long = vec![1, 0x18, 1 << 20];
    long.extend([0; 4]);
    assert_eq!(
        getattr_reply(&reply(3, &compound(0, 1, &long))),
        (refused, None)
    );
    let huge = reply(3, &[0, 0, u32::MAX]);
    assert_eq!(getattr_reply(&huge), (RecallReply::NoAnswer, None));
    assert_eq!(getattr_reply(&[0xff; 40]), (RecallReply::NoAnswer, None));
}
