//! The NFSv4.1 codec against hand-written bytes (RFC 8881 §16.2, §18).

use super::reply::decode;
use super::slots::Slots;
use super::*;
use engine::xdr::XdrReader;

/// Big-endian words.
fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

struct Body(Vec<u8>);

impl Body {
    /// A COMPOUND4res header: status, empty tag, result count.
    fn new(status: u32, n: u32) -> Body {
        Body(words(&[status, 0, n]))
    }
    fn w(mut self, ws: &[u32]) -> Body {
        self.0.extend(words(ws));
        self
    }
    fn b(mut self, bytes: &[u8]) -> Body {
        self.0.extend_from_slice(bytes);
        self
    }
    /// A successful SEQUENCE result.
    fn seq_ok(self) -> Body {
        self.w(&[op::SEQUENCE, 0]).b(&[7; 16]).w(&[5, 0, 15, 15, 0])
    }
}

fn seq() -> Seq {
    Seq {
        session: [0xab; 16],
        slot: 3,
        seqid: 9,
        highest: 7,
    }
}

#[test]
fn read_compound_encodes_sequence_putfh_read() {
    let mut out = vec![0u8; 4096];
    let fh = [0x11u8; 20];
    let sid = Stateid {
        seqid: 4,
        other: [0x22; 12],
    };
    let x = Ctx {
        seq: seq(),
        stateid: sid,
        clientid: 0x0102_0304_0506_0708,
        owner: b"o",
    };
    let n = encode_call(
        &mut out,
        0x55,
        &Cred::None,
        &x,
        &Call::Read(&fh, 1 << 33, 4096),
    )
    .unwrap();
    let mut r = XdrReader::new(&out[4..n]);
    // RPC call header: xid, CALL, rpcvers 2, NFS, version 4, COMPOUND, AUTH_NONE x2
    for want in [0x55, 0, 2, 100003, 4, 1, 0, 0, 0, 0] {
        assert_eq!(r.u32().unwrap(), want);
    }
    assert_eq!(r.opaque_var(16).unwrap(), b""); // tag
    assert_eq!(r.u32().unwrap(), 1); // minorversion
    assert_eq!(r.u32().unwrap(), 3); // ops
    assert_eq!(r.u32().unwrap(), op::SEQUENCE);
    assert_eq!(r.opaque_fixed(16).unwrap(), &[0xab; 16]);
    assert_eq!(
        (r.u32().unwrap(), r.u32().unwrap(), r.u32().unwrap()),
        (9, 3, 7)
    );
    assert!(!r.bool().unwrap()); // cachethis
    assert_eq!(r.u32().unwrap(), op::PUTFH);
    assert_eq!(r.opaque_var(128).unwrap(), &fh);
    assert_eq!(r.u32().unwrap(), op::READ);
    // seqid 0: "the most recent" stateid for I/O (RFC 8881 §8.2.2)
    assert_eq!(r.u32().unwrap(), 0);
    assert_eq!(r.opaque_fixed(12).unwrap(), &[0x22; 12]);
    assert_eq!(r.u64().unwrap(), 1 << 33);
    assert_eq!(r.u32().unwrap(), 4096);
    assert_eq!(r.remaining(), 0);
}

#[test]
fn create_is_open_then_close_of_the_current_stateid() {
    let mut out = vec![0u8; 4096];
    let x = Ctx {
        seq: seq(),
        stateid: Stateid::default(),
        clientid: 0x99,
        owner: b"bench-1",
    };
    let n = encode_call(&mut out, 1, &Cred::None, &x, &Call::Create(&[1; 8], "n")).unwrap();
    let body = &out[4 + 40..n];
    let mut r = XdrReader::new(body);
    r.opaque_var(16).unwrap();
    assert_eq!((r.u32().unwrap(), r.u32().unwrap()), (1, 4));
    r.skip(4 + 16 + 16).unwrap(); // SEQUENCE
    r.skip(4 + 4 + 8).unwrap(); // PUTFH
    assert_eq!(r.u32().unwrap(), op::OPEN);
    // seqid, share access BOTH wanting no delegation, deny NONE, clientid, owner
    assert_eq!(
        (r.u32().unwrap(), r.u32().unwrap(), r.u32().unwrap()),
        (0, 3 | 0x0400, 0)
    );
    assert_eq!(r.u64().unwrap(), 0x99);
    assert_eq!(r.opaque_var(64).unwrap(), b"bench-1");
    // OPEN4_CREATE, UNCHECKED4, bitmap {MODE} (word 1, bit 1), attrlist mode 0644
    assert_eq!((r.u32().unwrap(), r.u32().unwrap()), (1, 0));
    assert_eq!(
        (r.u32().unwrap(), r.u32().unwrap(), r.u32().unwrap()),
        (2, 0, 2)
    );
    assert_eq!(r.opaque_var(8).unwrap(), &0o644u32.to_be_bytes());
    assert_eq!(r.u32().unwrap(), 0); // CLAIM_NULL
    assert_eq!(r.string(8).unwrap(), b"n");
    assert_eq!(r.u32().unwrap(), op::CLOSE);
    assert_eq!(r.u32().unwrap(), 0);
    // the current stateid: seqid 1, other zero (RFC 8881 §16.2.3.1.2)
    assert_eq!(r.u32().unwrap(), 1);
    assert_eq!(r.opaque_fixed(12).unwrap(), &[0; 12]);
    assert_eq!(r.remaining(), 0);
}

#[test]
fn null_is_the_null_procedure_and_write_carries_its_data() {
    let mut out = vec![0u8; 4096];
    let x = Ctx {
        seq: seq(),
        stateid: Stateid::default(),
        clientid: 0,
        owner: b"",
    };
    let n = encode_call(&mut out, 1, &Cred::None, &x, &Call::Null).unwrap();
    assert_eq!(n - 4, 40);
    assert_eq!(&out[24..28], &0u32.to_be_bytes()); // procedure 0
    let n = encode_call(
        &mut out,
        1,
        &Cred::None,
        &x,
        &Call::Write(&[1; 4], 8, &[9; 5]),
    )
    .unwrap();
    // ... WRITE: stateid, offset, UNSTABLE4, data<5> padded to 8
    assert_eq!(&out[n - 8..n], &[9, 9, 9, 9, 9, 0, 0, 0]);
    assert_eq!(&out[n - 16..n - 8], &words(&[0, 5])[..]);
    assert!(encode_call(&mut out, 1, &Cred::None, &x, &Call::Mount("/")).is_err());
}

#[test]
fn read_reply_decodes_data_and_the_sequence() {
    let body = Body::new(0, 3)
        .seq_ok()
        .w(&[op::PUTFH, 0])
        .w(&[op::READ, 0, 1, 5])
        .b(&[1, 2, 3, 4, 5, 0, 0, 0]);
    let d = decode(&body.0).unwrap();
    assert!(d.ok() && d.seq_done);
    assert_eq!(d.data, Some(&[1, 2, 3, 4, 5][..]));
}

#[test]
fn failed_ops_report_status_op_and_whether_the_slot_advanced() {
    // WRITE answered DELAY after a successful SEQUENCE: the slot advanced.
    let body = Body::new(status::DELAY, 3)
        .seq_ok()
        .w(&[op::PUTFH, 0])
        .w(&[op::WRITE, status::DELAY]);
    let d = decode(&body.0).unwrap();
    assert_eq!(
        (d.status, d.failed_op, d.seq_done),
        (status::DELAY, op::WRITE, true)
    );
    // SEQUENCE itself failed (NFS4ERR_BADSESSION): the slot did not advance.
    let body = Body::new(10052, 1).w(&[op::SEQUENCE, 10052]);
    let d = decode(&body.0).unwrap();
    assert!(!d.ok() && !d.seq_done);
    assert_eq!(reply::status_name(d.status), "NFS4ERR_BADSESSION");
}

#[test]
fn open_reply_with_a_write_delegation_then_getfh_and_getattr() {
    let body = Body::new(0, 5)
        .seq_ok()
        .w(&[op::PUTFH, 0])
        .w(&[op::OPEN, 0, 1])
        .b(&[3; 12])
        .w(&[0, 0, 1, 0, 2]) // change_info4 (atomic false, before, after)
        .w(&[4, 1, 0]) // rflags, attrset {}
        .w(&[2, 7]) // OPEN_DELEGATE_WRITE, stateid seqid 7
        .b(&[4; 12])
        .w(&[0, 1, 0, 1 << 20]) // recall, NFS_LIMIT_SIZE 1 MiB
        .w(&[0, 0, 0, 0]) // nfsace4: type, flag, mask, who ""
        .w(&[op::GETFH, 0, 3])
        .b(&[5, 6, 7, 0])
        .w(&[op::GETATTR, 0, 1, 1 << FATTR4_SIZE, 8, 0, 12345]);
    let d = decode(&body.0).unwrap();
    assert!(d.ok());
    assert_eq!(
        d.open,
        Some(Stateid {
            seqid: 1,
            other: [3; 12]
        })
    );
    assert_eq!(d.deleg.map(|s| s.seqid), Some(7));
    assert_eq!(d.fh, Some(&[5, 6, 7][..]));
    assert_eq!(d.size, Some(12345));
    // No delegation, 4.1's NONE_EXT with a reason: parsed, none kept.
    let body = Body::new(0, 2)
        .seq_ok()
        .w(&[op::OPEN, 0, 1])
        .b(&[3; 12])
        .w(&[0, 0, 1, 0, 2, 4, 0])
        .w(&[3, 7, 0]);
    let d = decode(&body.0).unwrap();
    assert!(d.ok() && d.open.is_some() && d.deleg.is_none());
}

#[test]
fn session_setup_replies_decode() {
    let body = Body::new(0, 1)
        .w(&[op::EXCHANGE_ID, 0, 0, 42, 17])
        .w(&[0x1_0000, 0]);
    let d = decode(&body.0).unwrap();
    assert_eq!(d.clientid, Some((42, 17)));
    let body = Body::new(0, 1)
        .w(&[op::CREATE_SESSION, 0])
        .b(&[9; 16])
        .w(&[17, 0])
        .w(&[0, 70000, 80000, 4096, 8, 32, 0]);
    let d = decode(&body.0).unwrap();
    assert_eq!(d.session, Some(([9; 16], 32, 70000, 80000)));
}

#[test]
fn malformed_replies_are_errors_not_panics() {
    let good = Body::new(0, 3)
        .seq_ok()
        .w(&[op::PUTFH, 0])
        .w(&[op::READ, 0, 1, 5])
        .b(&[1, 2, 3, 4, 5, 0, 0, 0])
        .0;
    for cut in 0..good.len() {
        assert!(decode(&good[..cut]).is_err(), "cut at {cut}");
    }
    // A result count no server sends, a READ longer than 2 MiB, a bad delegation type.
    assert!(decode(&words(&[0, 0, u32::MAX])).is_err());
    assert!(decode(&Body::new(0, 1).w(&[op::READ, 0, 0, 3 << 20]).0).is_err());
    let bad_deleg = Body::new(0, 1)
        .w(&[op::OPEN, 0, 0])
        .b(&[0; 12])
        .w(&[0, 0, 0, 0, 0, 0, 0, 9]);
    assert!(decode(&bad_deleg.0).is_err());
}

#[test]
fn slots_hand_out_sequence_ids_and_advance_only_when_processed() {
    let mut s = Slots::new(2);
    assert_eq!(s.highest(), 1);
    let a = s.take().unwrap();
    let b = s.take().unwrap();
    assert_eq!((a, b), ((0, 1), (1, 1)));
    assert!(s.take().is_none());
    s.release(0, 1, true);
    assert_eq!(s.take(), Some((0, 2)));
    // Not processed (SEQUENCE failed, or the reply was lost): the same id again.
    s.release(0, 2, false);
    assert_eq!(s.take(), Some((0, 2)));
    s.release(0, 2, true);
    s.release(1, 1, true);
    // Releasing twice or an unknown slot changes nothing.
    s.release(1, 1, true);
    s.release(9, 1, true);
    assert_eq!(s.take(), Some((1, 2)));
    assert_eq!(s.take(), Some((0, 3)));
    assert!(s.take().is_none());
}

#[test]
fn a_slot_range_hands_out_its_own_ids_only() {
    let mut s = Slots::range(4, 2, 7);
    assert_eq!(s.highest(), 7);
    assert_eq!(
        (s.take(), s.take(), s.take()),
        (Some((4, 1)), Some((5, 1)), None)
    );
    s.release(3, 1, true); // not in the range
    s.release(6, 1, true);
    assert!(s.take().is_none());
    s.release(5, 1, true);
    assert_eq!(s.take(), Some((5, 2)));
}

#[test]
fn connections_spread_over_the_sessions_the_server_allowed() {
    use super::setup::spread;
    // One session each: the queue depth, capped at the fewest granted.
    let (c, per) = spread(&[([1; 16], 8), ([2; 16], 4)], 2, 6);
    assert_eq!(per, 4);
    assert_eq!(
        (c[0].session, c[0].base, c[0].slots, c[0].highest),
        ([1; 16], 0, 4, 7)
    );
    assert_eq!(
        (c[1].session, c[1].base, c[1].slots, c[1].highest),
        ([2; 16], 0, 4, 3)
    );
    // 5 connections on 2 sessions of 16: 3 on the first (ranges 0, 5, 10), 2 on the
    // second; 16 / 3 = 5 each at most.
    let (c, per) = spread(&[([1; 16], 16), ([2; 16], 16)], 5, 8);
    assert_eq!(per, 5);
    let on1: Vec<u32> = c
        .iter()
        .filter(|s| s.session == [1; 16])
        .map(|s| s.base)
        .collect();
    let on2: Vec<u32> = c
        .iter()
        .filter(|s| s.session == [2; 16])
        .map(|s| s.base)
        .collect();
    assert_eq!((on1, on2), (vec![0, 5, 10], vec![0, 5]));
    // More connections than slots: none each (the caller refuses that).
    assert_eq!(spread(&[([1; 16], 2)], 3, 4).1, 0);
    assert!(spread(&[], 3, 4).0.is_empty());
}

/// bench's setup and metadata operations are what nfs-wire's COMPOUND builder writes
/// for the same arguments (one client encoder, docs/architecture.md §2): OPEN with
/// create, CLOSE, CREATE of a directory, OPEN for reading, READDIR, EXCHANGE_ID.
#[test]
fn operations_match_nfs_wire_ops() {
    use nfs_wire::v4call::{compound_call, Ops};
    let (mode644, mode755) = (0o644u32.to_be_bytes(), 0o755u32.to_be_bytes());
    let bits = Bitmap::of(&[FATTR4_MODE]);
    let a644 = Fattr {
        bitmap: bits.words(),
        values: &mode644,
    };
    let a755 = Fattr {
        values: &mode755,
        ..a644
    };
    let share = |a| a | WANT_NO_DELEG;
    let sid = Stateid {
        seqid: 2,
        other: [5; 12],
    };
    let want = Ops::new()
        .open(
            7,
            b"own",
            share(OPEN4_SHARE_ACCESS_BOTH),
            0,
            How::WithAttrs {
                mode: UNCHECKED4,
                attrs: a644,
            },
            Claim::Null(b"f"),
        )
        .close(&sid.bytes())
        .create_with(b"d", None, a755)
        .open(
            7,
            b"own",
            share(OPEN4_SHARE_ACCESS_READ),
            0,
            How::NoCreate,
            Claim::Null(b"f"),
        )
        .readdir(
            9,
            [1; 8],
            4096,
            32 << 10,
            &[(1 << FATTR4_TYPE) | (1 << FATTR4_SIZE)],
        )
        .exchange_id_as(
            [3; 8],
            b"me",
            (
                nfs_wire::nfs4args::BENCH_IMPL_DOMAIN,
                nfs_wire::nfs4args::BENCH_IMPL_NAME,
            ),
        );
    let ops = [
        Op4::OpenCreate {
            clientid: 7,
            owner: b"own",
            name: "f",
        },
        Op4::Close(sid),
        Op4::Mkdir("d"),
        Op4::OpenRead {
            clientid: 7,
            owner: b"own",
            name: "f",
        },
        Op4::ReaddirAt(9, [1; 8]),
        Op4::ExchangeId {
            verifier: [3; 8],
            owner: b"me",
        },
    ];
    let mut out = vec![0u8; 1024];
    let n = encode_compound(&mut out, 0x31, &Cred::None, &ops).unwrap();
    assert_eq!(out[4..n], compound_call(0x31, &Cred::None, &want)[..]);
}

/// The copy workload's COMPOUND (SAVEFH of the source, COPY to the current file) is
/// what nfs-wire's builder writes: a synchronous, consecutive COPY inside the server
/// (RFC 7862 §15.2.1: no ca_source_server).
#[test]
fn copy_matches_nfs_wire_and_its_reply_decodes() {
    use nfs_wire::v4call::{compound_call, Ops};
    let (src, dst) = (
        Stateid {
            seqid: 1,
            other: [1; 12],
        },
        Stateid {
            seqid: 2,
            other: [2; 12],
        },
    );
    let range = v4op::CopyRange {
        src_stateid: src.bytes(),
        dst_stateid: dst.bytes(),
        src_offset: 0,
        dst_offset: 0,
        count: 5 << 20,
    };
    let want = Ops::new().putfh(b"s").savefh().copy(&range, true);
    let ops = [
        Op4::Putfh(b"s"),
        Op4::Savefh,
        Op4::Copy {
            src,
            dst,
            src_off: 0,
            dst_off: 0,
            count: 5 << 20,
        },
    ];
    let mut out = vec![0u8; 1024];
    let n = encode_compound(&mut out, 0x32, &Cred::None, &ops).unwrap();
    assert_eq!(out[4..n], compound_call(0x32, &Cred::None, &want)[..]);

    // Done in the reply: no callback id, 5 MiB, FILE_SYNC4, verifier, requirements.
    let body = Body::new(0, 4)
        .seq_ok()
        .w(&[op::PUTFH, 0, op::SAVEFH, 0, op::COPY, 0, 0, 0, 5 << 20, 2])
        .b(&[9; 8])
        .w(&[1, 1]);
    let d = decode(&body.0).unwrap();
    assert!(d.ok() && d.seq_done && !d.copy_async);
    assert_eq!(d.copied, Some((5 << 20, 2)));
    // Left running: a callback id, nothing counted as copied.
    let body = Body::new(0, 2)
        .seq_ok()
        .w(&[op::COPY, 0, 1, 3])
        .b(&[4; 12])
        .w(&[0, 0, 0])
        .b(&[9; 8])
        .w(&[1, 0]);
    let d = decode(&body.0).unwrap();
    assert!(d.copy_async && d.copied.is_none());
    // A bad wr_callback_id count is malformed, and so is a cut reply.
    let bad = Body::new(0, 2).seq_ok().w(&[op::COPY, 0, 2]);
    assert!(decode(&bad.0).is_err());
    let cut = Body::new(0, 2).seq_ok().w(&[op::COPY, 0, 0, 0]);
    assert!(decode(&cut.0).is_err());
    // A failed COPY reports its status and op.
    let failed = Body::new(10004, 2).seq_ok().w(&[op::COPY, 10004]);
    let d = decode(&failed.0).unwrap();
    assert_eq!((d.status, d.failed_op, d.copied), (10004, op::COPY, None));
}
