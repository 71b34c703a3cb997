//! Tests are named after the conformance-checklist rows they cover
//! (docs/conformance.md); NFSv3 bytes are built here.
use super::*;
use crate::rpc::{self, Accept, Cred};
use crate::rpcrdma::privdata::Thresholds;
use crate::xdr::XdrReader;

use nfs_wire::NFS_PROGRAM as NFS;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn th(send: usize, recv: usize) -> Thresholds {
    Thresholds {
        send,
        recv,
        remote_invalidate: false,
    }
}

fn lim() -> Limits {
    Limits::default()
}

fn seg(handle: u32, length: u32, offset: u64) -> Segment {
    Segment {
        handle,
        length,
        offset,
    }
}

const FH: [u8; 8] = [1, 2, 3, 4, 5, 6, 7, 8];

fn build(f: impl FnOnce(&mut XdrWriter)) -> Vec<u8> {
    let mut b = vec![0u8; 64 << 10];
    let mut w = XdrWriter::new(&mut b);
    f(&mut w);
    let n = w.position();
    b.truncate(n);
    b
}

fn null_call(xid: u32) -> Vec<u8> {
    build(|w| rpc::write_call(w, xid, NFS, 3, 0, &Cred::None).unwrap())
}

/// NFSv3 WRITE (proc 7) of `data`; returns the call and the data's byte range.
fn write_call(xid: u32, data: &[u8]) -> (Vec<u8>, Range<usize>) {
    let b = build(|w| {
        rpc::write_call(w, xid, NFS, 3, 7, &Cred::None).unwrap();
        w.opaque_var(&FH).unwrap();
        w.u64(65536).unwrap();
        w.u32(data.len() as u32).unwrap();
        w.u32(0).unwrap();
        w.opaque_var(data).unwrap();
    });
    let start = b.len() - padded(data.len());
    (b, start..start + data.len())
}

/// NFSv3 READ (proc 6) of `count` bytes at 65536.
fn read_call(xid: u32, count: u32) -> Vec<u8> {
    build(|w| {
        rpc::write_call(w, xid, NFS, 3, 6, &Cred::None).unwrap();
        w.opaque_var(&FH).unwrap();
        w.u64(65536).unwrap();
        w.u32(count).unwrap();
    })
}

/// A READ3res: OK with `data` (inline unless `reduced`, then only its length word),
/// or an error status with no attributes.
fn read_reply(xid: u32, status: u32, data: &[u8], reduced: bool) -> Vec<u8> {
    build(|w| {
        rpc::write_accepted(w, xid, Accept::Success).unwrap();
        w.u32(status).unwrap();
        w.bool(false).unwrap(); // post_op_attr absent
        if status == 0 {
            w.u32(data.len() as u32).unwrap();
            w.bool(true).unwrap();
            if reduced {
                w.u32(data.len() as u32).unwrap();
            } else {
                w.opaque_var(data).unwrap();
            }
        }
    })
}

/// The ULP's READ3res locator: offset of `data`'s length word in an OK reply.
fn nfs3_read_locate(reply: &[u8]) -> Option<usize> {
    let (_, st, off) = rpc::decode_reply(reply).ok()?;
    if st != rpc::ReplyStatus::Accepted(Accept::Success) {
        return None;
    }
    let mut r = XdrReader::new(&reply[off..]);
    if r.u32().ok()? != 0 {
        return None;
    }
    if r.bool().ok()? {
        r.skip(84).ok()?;
    }
    r.u32().ok()?; // count
    r.bool().ok()?; // eof
    Some(off + r.position())
}

/// NFSv3 READ3res maximum for `count` (attributes present).
fn read_max_reply(count: u32) -> usize {
    24 + 4 + 4 + 84 + 4 + 4 + 4 + padded(count as usize)
}

/// A reply message: header (with `write` echoed as one chunk, `reply` echoed) and
/// `payload`.
fn reply_msg(
    xid: u32,
    credit: u32,
    proc_: u32,
    write: Option<&[Segment]>,
    reply: Option<&[Segment]>,
    payload: &[u8],
) -> Vec<u8> {
    let mut c = Chunks::default();
    if let Some(w) = write {
        c.push_write_chunk(w);
    }
    if let Some(r) = reply {
        c.set_reply_chunk(r);
    }
    let mut out = vec![0u8; 1024 + payload.len()];
    let fixed = Fixed {
        xid,
        vers: 1,
        credit,
        proc_,
    };
    let n = wire::encode_msg(&mut XdrWriter::new(&mut out), fixed, &c).unwrap();
    out.truncate(n);
    out.extend_from_slice(payload);
    out
}

fn send_bytes(plan: &CallPlan, call: &[u8], segs: &ChunkSegments, credits: u32) -> Vec<u8> {
    let mut scratch = Chunks::with_limits(&lim());
    let mut hdr = [0u8; 512];
    let n = encode_header(plan, credits, segs, &mut scratch, &mut hdr).unwrap();
    let mut out = hdr[..n].to_vec();
    for p in plan.inline_parts(call) {
        out.extend_from_slice(p);
    }
    assert!(
        out.len() <= plan.send_limit,
        "R8166-35: Send fits the threshold"
    );
    out
}

/// classify + check_reply + assemble, as a client does after invalidation.
fn complete(
    msg: &[u8],
    offered: &Offered,
    reply_buf: &[u8],
    write_buf: &[u8],
) -> Result<Vec<u8>, RpcRdmaError> {
    let mut c = Chunks::with_limits(&lim());
    let Received::Reply(h) = classify(msg, &lim(), &mut c) else {
        panic!("not a reply: {:?}", classify(msg, &lim(), &mut c));
    };
    let layout = check_reply(&h, &c, msg, offered, reply_buf)?;
    let mut out = vec![0u8; layout.total_len()];
    let n = assemble(&layout, msg, reply_buf, write_buf, &mut out).unwrap();
    out.truncate(n);
    Ok(out)
}

// ----- credits -------------------------------------------------------------

#[test]
fn r8166_27_one_credit_until_first_reply() {
    let mut c = Credits::new(32);
    assert_eq!(c.requested(), 32);
    assert_eq!(c.limit(), 1);
    assert!(c.on_send());
    assert!(!c.can_send(), "second call waits for the first reply");
    assert!(!c.on_send());
    assert_eq!(c.in_flight(), 1);
    c.on_reply(32);
    assert_eq!(c.limit(), 32);
    for _ in 0..32 {
        assert!(c.on_send());
    }
    assert!(!c.on_send());
    // Reconnect: back to one credit.
    c.reset();
    assert_eq!((c.limit(), c.in_flight()), (1, 0));
}

#[test]
fn r8166_25_in_flight_never_exceeds_min_of_requested_and_latest_grant() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut c = Credits::new(16);
    let mut latest: Option<u32> = None;
    for _ in 0..100_000 {
        if next() % 3 != 0 {
            if c.on_send() {
                let lim = latest.map_or(1, |g| g.clamp(1, 16).min(16));
                assert!(c.in_flight() <= lim, "in flight {} > {lim}", c.in_flight());
            }
        } else if c.in_flight() > 0 {
            let g = (next() % 40) as u32;
            c.on_reply(g);
            latest = Some(g);
        }
    }
}

#[test]
fn r8166_26_lowered_grant_is_honoured() {
    let mut c = Credits::new(32);
    c.on_send();
    c.on_reply(32);
    for _ in 0..32 {
        assert!(c.on_send());
    }
    c.on_reply(4);
    assert_eq!(c.limit(), 4);
    // 31 still in flight: nothing may go until fewer than 4 remain, and then
    // never more than 4 at once.
    let mut sent = 0;
    for _ in 0..200 {
        c.on_reply(4);
        let before = c.in_flight();
        if c.on_send() {
            sent += 1;
            assert!(before < 4 && c.in_flight() <= 4);
        } else {
            assert!(before >= 4 || c.in_flight() == 4);
        }
    }
    assert!(sent > 100);
    assert_eq!(c.in_flight(), 4);
}

#[test]
fn r8166_31_grant_zero_or_huge_is_clamped() {
    let mut c = Credits::new(8);
    c.on_send();
    c.on_reply(0);
    assert_eq!(c.limit(), 1, "grant 0 must not deadlock");
    assert!(c.on_send());
    c.on_reply(u32::MAX);
    assert_eq!(c.grant(), Some(8));
    assert_eq!(c.limit(), 8);
    assert_eq!(Credits::new(0).requested(), 1);
    assert_eq!(Credits::new(u32::MAX).requested(), MAX_CREDITS);
}

// ----- calls: digest worked examples ----------------------------------------

#[test]
fn digest_example_a_short_null_call() {
    let call = null_call(0x1a2b3c4d);
    let shape = CallShape::new(24);
    let p = plan(&call, &shape, &th(1024, 1024), &lim()).unwrap();
    assert_eq!(p.class, CallClass::Short);
    assert_eq!((p.read.clone(), p.write_len, p.reply_len), (None, 0, 0));
    let b = send_bytes(&p, &call, &ChunkSegments::default(), 32);
    let want = hex("1a2b3c4d 00000001 00000020 00000000
         00000000 00000000 00000000 1a2b3c4d
         00000000 00000002 000186a3 00000003
         00000000 00000000 00000000 00000000
         00000000");
    assert_eq!(b, want);
    assert_eq!(p.send_len(), 68);
}

#[test]
fn digest_example_b_chunked_write_r8166_46_51_53_54() {
    let data: Vec<u8> = (0..5001u32).map(|i| i as u8).collect();
    let (call, r) = write_call(0x1a2b3c4e, &data);
    assert_eq!(call.len(), 72 + 5004);
    let shape = CallShape::new(24 + 4 + 4 + 84 + 4 + 84 + 4 + 4 + 8).with_reduce(r.clone());
    let p = plan(&call, &shape, &th(1024, 1024), &lim()).unwrap();
    assert_eq!(p.class, CallClass::Chunked);
    let rc = p.read.clone().unwrap();
    // R8166-46: position = offset in the unreduced payload, multiple of 4.
    assert_eq!(rc.position, 72);
    assert_eq!(rc.position % 4, 0);
    // R8166-51: chunk = item without pad.
    assert_eq!(rc.source, 72..5073);
    assert_eq!(rc.source.len(), 5001);
    // R8166-53: item and pad gone; the reduced payload ends exactly at 72.
    let parts = p.inline_parts(&call);
    assert_eq!(parts[0].len(), 72);
    assert!(parts[1].is_empty());
    // R8166-54: the length word stays inline and equals the chunk length.
    assert_eq!(word(parts[0], 68), Some(5001));
    let segs = [seg(0x1234, 5001, 0x00007f0012340000)];
    let b = send_bytes(
        &p,
        &call,
        &ChunkSegments {
            read: &segs,
            ..Default::default()
        },
        32,
    );
    let want = hex("1a2b3c4e 00000001 00000020 00000000
         00000001 00000048 00001234 00001389
         00007f00 12340000 00000000 00000000
         00000000 1a2b3c4e 00000000 00000002
         000186a3 00000003 00000007 00000000
         00000000 00000000 00000000 00000008
         01020304 05060708 00000000 00010000
         00001389 00000000 00001389");
    assert_eq!(b, want);
    assert_eq!(b.len(), 124);
}

fn example_c_call_plan() -> (Vec<u8>, CallPlan) {
    let call = read_call(0x1a2b3c4f, 8192);
    let shape = CallShape::new(read_max_reply(8192))
        .with_write_chunk(8192)
        .with_result(ResultAt::Locate(nfs3_read_locate));
    let p = plan(&call, &shape, &th(1024, 1024), &lim()).unwrap();
    (call, p)
}

#[test]
fn digest_example_c_read_call_with_write_list() {
    let (call, p) = example_c_call_plan();
    assert_eq!(p.class, CallClass::Short);
    assert_eq!(p.write_len, 8192);
    assert_eq!(p.reply_len, 0, "reduced READ reply fits 1024");
    let w = [seg(0xabcd, 8192, 0x00007f0056780000)];
    let b = send_bytes(
        &p,
        &call,
        &ChunkSegments {
            write: &w,
            ..Default::default()
        },
        32,
    );
    let want = hex("1a2b3c4f 00000001 00000020 00000000
         00000000 00000001 00000001 0000abcd
         00002000 00007f00 56780000 00000000
         00000000 1a2b3c4f 00000000 00000002
         000186a3 00000003 00000006 00000000
         00000000 00000000 00000000 00000008
         01020304 05060708 00000000 00010000
         00002000");
    assert_eq!(b, want);
    assert_eq!(b.len(), 116);
}

#[test]
fn digest_example_c_reply_is_spliced_after_the_length_word() {
    let reply = hex("1a2b3c4f 00000001 00000040 00000000
         00000000 00000001 00000001 0000abcd
         00001389 00007f00 56780000 00000000
         00000000 1a2b3c4f 00000001 00000000
         00000000 00000000 00000000 00000000
         00000000 00001389 00000001 00001389");
    assert_eq!(reply.len(), 96);
    let offered_w = [seg(0xabcd, 8192, 0x00007f0056780000)];
    let mut wbuf = vec![0xeeu8; 8192];
    let data: Vec<u8> = (0..5001u32).map(|i| (i * 7) as u8).collect();
    wbuf[..5001].copy_from_slice(&data);
    let mut c = Chunks::with_limits(&lim());
    let Received::Reply(h) = classify(&reply, &lim(), &mut c) else {
        panic!()
    };
    assert_eq!(
        (h.xid, h.credit, h.nomsg, h.payload_at),
        (0x1a2b3c4f, 64, false, 52)
    );
    let mut credits = Credits::new(32);
    credits.on_send();
    credits.on_reply(h.credit);
    assert_eq!(credits.limit(), 32, "grant 64 clamped to our 32");
    for result in [ResultAt::Last, ResultAt::Locate(nfs3_read_locate)] {
        let offered = Offered {
            write: Some(&offered_w),
            reply: None,
            result,
        };
        let out = complete(&reply, &offered, &[], &wbuf).unwrap();
        let want = read_reply(0x1a2b3c4f, 0, &data, false);
        assert_eq!(out, want);
        assert_eq!(out.len(), 44 + 5004);
    }
}

// ----- calls: classes and chunks ---------------------------------------------

#[test]
fn r8166_36_call_too_big_after_reduction_is_long_nomsg_with_pzrc() {
    // A 2 KiB opaque that is not DDP-eligible (an ACL, say): no reduce given.
    let call = build(|w| {
        rpc::write_call(w, 7, NFS, 4, 1, &Cred::None).unwrap();
        w.opaque_var(&[0x5a; 2048]).unwrap();
    });
    let p = plan(&call, &CallShape::new(512), &th(1024, 1024), &lim()).unwrap();
    assert_eq!(p.class, CallClass::Long);
    assert_eq!(p.proc_(), wire::RDMA_NOMSG);
    assert_eq!(p.inline_len(), 0);
    assert_eq!(p.read.clone().unwrap().source, 0..call.len());
    // Also when a reducible item exists but the rest is still too big.
    let (mut wcall, r) = write_call(8, &[1u8; 100]);
    let big = build(|w| w.opaque_var(&[0u8; 2000]).unwrap());
    // Put 2000 bytes of non-eligible stuff before the item: rebuild by hand.
    let mut call2 = wcall[..r.start - 4].to_vec();
    call2.extend_from_slice(&big);
    let item_at = call2.len() + 4;
    call2.extend_from_slice(&wcall[r.start - 4..]);
    wcall = call2;
    let shape = CallShape::new(256).with_reduce(item_at..item_at + 100);
    let p = plan(&wcall, &shape, &th(1024, 1024), &lim()).unwrap();
    assert_eq!(p.class, CallClass::Long);
    let segs = [seg(9, wcall.len() as u32, 0x1000)];
    let b = send_bytes(
        &p,
        &wcall,
        &ChunkSegments {
            read: &segs,
            ..Default::default()
        },
        32,
    );
    assert_eq!(word(&b, 12), Some(wire::RDMA_NOMSG));
    assert_eq!(b.len(), p.header_len(), "no inline payload");
}

#[test]
fn r8166_37_every_pzrc_segment_has_position_zero() {
    let call = build(|w| {
        rpc::write_call(w, 7, NFS, 4, 1, &Cred::None).unwrap();
        w.opaque_var(&[0x5a; 3000]).unwrap();
    });
    let p = plan(&call, &CallShape::new(512), &th(1024, 1024), &lim()).unwrap();
    let n = call.len() as u32;
    let segs = [
        seg(1, 1024, 0x1000),
        seg(2, 1024, 0x1400),
        seg(3, n - 2048, 0x1800),
    ];
    let b = send_bytes(
        &p,
        &call,
        &ChunkSegments {
            read: &segs,
            ..Default::default()
        },
        32,
    );
    let mut c = Chunks::with_limits(&lim());
    wire::decode(&b, &lim(), &mut c).unwrap();
    assert_eq!(c.reads.len(), 3);
    assert!(c.reads.iter().all(|r| r.position == 0));
    assert_eq!(c.reads.iter().map(|r| r.seg).collect::<Vec<_>>(), segs);
}

#[test]
fn r8166_47_all_segments_of_a_read_chunk_share_the_position() {
    let data = vec![3u8; 12288];
    let (call, r) = write_call(5, &data);
    let p = plan(
        &call,
        &CallShape::new(256).with_reduce(r),
        &th(1024, 1024),
        &lim(),
    )
    .unwrap();
    assert_eq!(p.class, CallClass::Chunked);
    let segs = [seg(1, 4096, 0), seg(2, 4096, 4096), seg(3, 4096, 8192)];
    let b = send_bytes(
        &p,
        &call,
        &ChunkSegments {
            read: &segs,
            ..Default::default()
        },
        32,
    );
    let mut c = Chunks::with_limits(&lim());
    wire::decode(&b, &lim(), &mut c).unwrap();
    assert!(c.reads.iter().all(|s| s.position == 72));
}

#[test]
fn r8166_53_reduced_item_that_is_not_last_keeps_the_rest_aligned() {
    // NFSv2 SYMLINK shape: `to` path (eligible) followed by sattr (8 words).
    let path = vec![b'p'; 1001];
    let call = build(|w| {
        rpc::write_call(w, 11, NFS, 2, 13, &Cred::None).unwrap();
        w.opaque_var(&FH).unwrap();
        w.string(b"name").unwrap();
        w.opaque_var(&path).unwrap();
        for i in 0..8 {
            w.u32(0x100 + i).unwrap();
        }
    });
    let start = 40 + 12 + 8 + 4;
    let r = start..start + 1001;
    let p = plan(
        &call,
        &CallShape::new(256).with_reduce(r.clone()),
        &th(1024, 1024),
        &lim(),
    )
    .unwrap();
    assert_eq!(p.class, CallClass::Chunked);
    let [a, b] = p.inline_parts(&call);
    assert_eq!(a.len(), start);
    assert_eq!(b.len(), 32);
    assert_eq!(
        word(b, 0),
        Some(0x100),
        "sattr follows the item's pad, 4-aligned"
    );
    assert_eq!(p.read.unwrap().position as usize, start);
    assert_eq!((a.len() + b.len()) % 4, 0);
}

#[test]
fn r8166_54_reduce_must_name_the_data_after_a_matching_length_word() {
    let (call, r) = write_call(5, &[1u8; 5001]);
    let t = th(1024, 1024);
    for bad in [
        r.start + 4..r.end,
        r.start..r.end - 1,
        r.start - 2..r.end,
        0..5001,
    ] {
        assert_eq!(
            plan(&call, &CallShape::new(256).with_reduce(bad), &t, &lim()),
            Err(PlanError::BadReduce)
        );
    }
    assert_eq!(
        plan(
            &call,
            &CallShape::new(256).with_reduce(r.start..call.len() + 4),
            &t,
            &lim()
        ),
        Err(PlanError::BadReduce)
    );
}

#[test]
fn r8166_40_calls_and_pzrc_contents_are_whole_xdr_streams() {
    let mut call = null_call(1);
    call.push(0);
    assert_eq!(
        plan(&call, &CallShape::new(24), &th(1024, 1024), &lim()),
        Err(PlanError::BadCall)
    );
    assert_eq!(
        plan(&[], &CallShape::new(24), &th(1024, 1024), &lim()),
        Err(PlanError::BadCall)
    );
    // A reply chunk whose content is not a multiple of 4 is refused.
    let call = read_call(9, 0);
    let shape = CallShape::new(8192);
    let p = plan(&call, &shape, &th(1024, 1024), &lim()).unwrap();
    assert_eq!(p.reply_len, 8192);
    let off = [seg(0x77, 8192, 0x9000)];
    let mut rbuf = read_reply(9, 0, &[1, 2, 3], false);
    rbuf.resize(8192, 0);
    let offered = Offered {
        write: None,
        reply: Some(&off),
        result: ResultAt::Last,
    };
    let msg = reply_msg(
        9,
        1,
        wire::RDMA_NOMSG,
        None,
        Some(&[seg(0x77, 50, 0x9000)]),
        &[],
    );
    assert_eq!(
        complete(&msg, &offered, &rbuf, &[]),
        Err(RpcRdmaError::BadReplyChunk)
    );
}

#[test]
fn r8166_41_reply_chunk_iff_largest_reply_can_exceed_reply_threshold() {
    let t = th(1024, 1024);
    // READDIR count=8192 at 1 KiB: present, sized for the whole reply.
    let readdir = build(|w| {
        rpc::write_call(w, 3, NFS, 3, 16, &Cred::None).unwrap();
        w.opaque_var(&FH).unwrap();
        w.u64(0).unwrap();
        w.u64(0).unwrap();
        w.u32(8192).unwrap();
    });
    let p = plan(&readdir, &CallShape::new(24 + 8192), &t, &lim()).unwrap();
    assert_eq!(p.reply_len as usize, 24 + 8192);
    // GETATTR: fixed 112-byte reply, absent.
    let getattr = build(|w| {
        rpc::write_call(w, 4, NFS, 3, 1, &Cred::None).unwrap();
        w.opaque_var(&FH).unwrap();
    });
    let p = plan(&getattr, &CallShape::new(112), &t, &lim()).unwrap();
    assert_eq!(p.reply_len, 0);
    // Boundary: header 28 + reply == threshold is inline; one more word needs it.
    assert_eq!(
        plan(&getattr, &CallShape::new(996), &t, &lim())
            .unwrap()
            .reply_len,
        0
    );
    assert_eq!(
        plan(&getattr, &CallShape::new(1000), &t, &lim())
            .unwrap()
            .reply_len,
        1000
    );
    // The echoed write chunk counts in the reply header.
    let read = read_call(5, 8192);
    let s = CallShape::new(read_max_reply(8192)).with_write_chunk(8192);
    assert_eq!(plan(&read, &s, &t, &lim()).unwrap().reply_len, 0);
    // Without DDP a big READ needs the Reply chunk.
    let s = CallShape::new(read_max_reply(8192));
    assert_eq!(
        plan(&read, &s, &t, &lim()).unwrap().reply_len as usize,
        read_max_reply(8192)
    );
}

#[test]
fn r8166_62_write_chunk_is_exactly_the_largest_result() {
    let call = read_call(5, 5001);
    let s = CallShape::new(read_max_reply(5001)).with_write_chunk(5001);
    let p = plan(&call, &s, &th(1024, 1024), &lim()).unwrap();
    assert_eq!(p.write_len, 5001, "no pad room");
    // Segments must cover exactly that.
    let mut scratch = Chunks::with_limits(&lim());
    let mut out = [0u8; 256];
    let bad = [seg(1, 5004, 0)];
    let cs = ChunkSegments {
        write: &bad,
        ..Default::default()
    };
    assert_eq!(
        encode_header(&p, 32, &cs, &mut scratch, &mut out),
        Err(PlanError::Segments)
    );
    // Count 0: no write chunk at all (the empty result comes inline).
    let s = CallShape::new(read_max_reply(0)).with_write_chunk(0);
    assert_eq!(
        plan(&read_call(5, 0), &s, &th(1024, 1024), &lim())
            .unwrap()
            .write_len,
        0
    );
}

#[test]
fn segments_are_checked_against_the_plan_and_the_threshold() {
    let (call, r) = write_call(5, &[1u8; 5001]);
    let p = plan(
        &call,
        &CallShape::new(256).with_reduce(r),
        &th(1024, 1024),
        &lim(),
    )
    .unwrap();
    let mut scratch = Chunks::with_limits(&lim());
    let mut out = [0u8; 1024];
    // Missing read segments.
    assert_eq!(
        encode_header(&p, 1, &ChunkSegments::default(), &mut scratch, &mut out),
        Err(PlanError::Segments)
    );
    // Unasked-for write chunk.
    let ok = [seg(1, 5001, 0)];
    let extra = [seg(2, 10, 0)];
    let cs = ChunkSegments {
        read: &ok,
        write: &extra,
        ..Default::default()
    };
    assert_eq!(
        encode_header(&p, 1, &cs, &mut scratch, &mut out),
        Err(PlanError::Segments)
    );
    // 17 segments: over the RFC 8267 limit.
    let many: Vec<Segment> = (0..17)
        .map(|i| seg(i, if i == 0 { 4985 } else { 1 }, 0))
        .collect();
    let cs = ChunkSegments {
        read: &many,
        ..Default::default()
    };
    assert_eq!(
        encode_header(&p, 1, &cs, &mut scratch, &mut out),
        Err(PlanError::Segments)
    );
    // A tiny threshold: 16 segments would push the Send over it.
    let p = plan(
        &call,
        &CallShape::new(256).with_reduce(72..5073),
        &th(200, 1024),
        &lim(),
    )
    .unwrap();
    assert_eq!(p.class, CallClass::Chunked);
    let sixteen: Vec<Segment> = (0..16)
        .map(|i| seg(i, if i == 0 { 4986 } else { 1 }, 0))
        .collect();
    let cs = ChunkSegments {
        read: &sixteen,
        ..Default::default()
    };
    assert_eq!(
        encode_header(&p, 1, &cs, &mut scratch, &mut out),
        Err(PlanError::Segments)
    );
    // Header buffer too small.
    let cs = ChunkSegments {
        read: &ok,
        ..Default::default()
    };
    assert_eq!(
        encode_header(&p, 1, &cs, &mut scratch, &mut out[..20]),
        Err(PlanError::HeaderBuffer)
    );
}

#[test]
fn chunks_over_the_limits_are_refused() {
    let call = read_call(5, 4 << 20);
    let s = CallShape::new(read_max_reply(4 << 20)).with_write_chunk(4 << 20);
    assert_eq!(
        plan(&call, &s, &th(1024, 1024), &lim()),
        Err(PlanError::TooLarge)
    );
}

// ----- replies: discards ---------------------------------------------------

#[test]
fn r8166_05_short_non_error_discarded_20_byte_err_chunk_honoured() {
    let mut c = Chunks::with_limits(&lim());
    let b = hex("00000005 00000001 00000020 00000000 00000000 00000000");
    assert_eq!(b.len(), 24);
    assert_eq!(
        classify(&b, &lim(), &mut c),
        Received::Discard(Discard::Short)
    );
    for n in 0..16 {
        assert_eq!(
            classify(&b[..n], &lim(), &mut c),
            Received::Discard(Discard::Short)
        );
    }
    let e = hex("1a2b3c51 00000001 00000040 00000004 00000002");
    assert_eq!(
        classify(&e, &lim(), &mut c),
        Received::Error {
            xid: 0x1a2b3c51,
            credit: 64,
            err: ErrBody::Chunk
        }
    );
    let v = hex("1a2b3c50 00000001 00000040 00000004 00000001 00000001 00000001");
    assert_eq!(
        classify(&v, &lim(), &mut c),
        Received::Error {
            xid: 0x1a2b3c50,
            credit: 64,
            err: ErrBody::Vers { low: 1, high: 1 }
        }
    );
}

#[test]
fn r8166_16_malformed_reply_header_is_discarded() {
    // Example C's reply with its write list cut short.
    let full = hex(
        "1a2b3c4f 00000001 00000040 00000000 00000000 00000001 00000001 0000abcd
         00001389 00007f00",
    );
    let mut c = Chunks::with_limits(&lim());
    assert_eq!(
        classify(&full, &lim(), &mut c),
        Received::Discard(Discard::Malformed)
    );
    // A read list in a reply.
    let mut m = reply_msg(
        3,
        1,
        wire::RDMA_MSG,
        None,
        None,
        &read_reply(3, 70, &[], false),
    );
    m[16..20].copy_from_slice(&1u32.to_be_bytes());
    let mut with_read = m[..20].to_vec();
    with_read.extend_from_slice(&hex(
        "00000000 00000001 00000010 00000000 00000000 00000000",
    ));
    with_read.extend_from_slice(&m[20..]);
    assert_eq!(
        classify(&with_read, &lim(), &mut c),
        Received::Discard(Discard::Malformed)
    );
    // RDMA_NOMSG without a Reply chunk.
    let m = reply_msg(3, 1, wire::RDMA_NOMSG, Some(&[seg(1, 0, 0)]), None, &[]);
    assert_eq!(
        classify(&m, &lim(), &mut c),
        Received::Discard(Discard::Malformed)
    );
    // rdma_xid differs from the RPC xid; a CALL instead of a REPLY.
    let m = reply_msg(
        4,
        1,
        wire::RDMA_MSG,
        None,
        None,
        &read_reply(3, 70, &[], false),
    );
    assert_eq!(
        classify(&m, &lim(), &mut c),
        Received::Discard(Discard::XidMismatch)
    );
    let m = reply_msg(4, 1, wire::RDMA_MSG, None, None, &null_call(4));
    assert!(matches!(
        classify(&m, &lim(), &mut c),
        Received::Callback(CallbackHeader {
            xid: 4,
            chunked: false,
            ..
        })
    ));
    // A callback offering a chunk is flagged for ERR_CHUNK (R8167-15).
    let w = [Segment {
        handle: 9,
        length: 64,
        offset: 0x1000,
    }];
    let m = reply_msg(4, 1, wire::RDMA_MSG, Some(&w), None, &null_call(4));
    assert!(matches!(
        classify(&m, &lim(), &mut c),
        Received::Callback(CallbackHeader {
            xid: 4,
            chunked: true,
            ..
        })
    ));
    let mut m = reply_msg(4, 1, wire::RDMA_MSG, None, None, &null_call(4));
    let at = m.len() - null_call(4).len() + 4;
    m[at..at + 4].copy_from_slice(&7u32.to_be_bytes());
    assert_eq!(
        classify(&m, &lim(), &mut c),
        Received::Discard(Discard::NotAReply)
    );
    let m = reply_msg(4, 1, wire::RDMA_MSG, None, None, &[0, 0, 0, 4]);
    assert_eq!(
        classify(&m, &lim(), &mut c),
        Received::Discard(Discard::XidMismatch)
    );
    // Other versions.
    let mut m = reply_msg(
        3,
        1,
        wire::RDMA_MSG,
        None,
        None,
        &read_reply(3, 70, &[], false),
    );
    m[7] = 2;
    assert_eq!(
        classify(&m, &lim(), &mut c),
        Received::Discard(Discard::Version)
    );
}

#[test]
fn r8166_17_undecodable_rdma_error_is_discarded() {
    let mut c = Chunks::with_limits(&lim());
    let bad_err = hex("00000001 00000001 00000020 00000004 00000009");
    assert_eq!(
        classify(&bad_err, &lim(), &mut c),
        Received::Discard(Discard::Malformed)
    );
    let no_range = hex("00000001 00000001 00000020 00000004 00000001");
    assert_eq!(
        classify(&no_range, &lim(), &mut c),
        Received::Discard(Discard::Malformed)
    );
    let half = hex("00000001 00000001 00000020 00000004 00000001 00000001");
    assert_eq!(
        classify(&half, &lim(), &mut c),
        Received::Discard(Discard::Malformed)
    );
    let no_code = hex("00000001 00000001 00000020 00000004");
    assert_eq!(
        classify(&no_code, &lim(), &mut c),
        Received::Discard(Discard::Malformed)
    );
    let v2 = hex("00000001 00000002 00000020 00000004 00000002");
    assert_eq!(
        classify(&v2, &lim(), &mut c),
        Received::Discard(Discard::Version)
    );
}

#[test]
fn r8166_18_err_chunk_for_a_pending_xid_is_a_permanent_error() {
    let mut c = Chunks::with_limits(&lim());
    let e = hex("00000042 00000001 00000008 00000004 00000002");
    let Received::Error { xid, credit, err } = classify(&e, &lim(), &mut c) else {
        panic!()
    };
    assert_eq!((xid, credit), (0x42, 8));
    let as_rpc = match err {
        ErrBody::Chunk => RpcRdmaError::Chunk,
        ErrBody::Vers { low, high } => RpcRdmaError::Vers { low, high },
    };
    assert!(as_rpc.is_permanent(), "never resend the identical request");
    assert!(RpcRdmaError::Vers { low: 1, high: 1 }.is_permanent());
    assert!(!RpcRdmaError::Disconnected.is_permanent());
    // The credit of an error is a grant like any other.
    let mut cr = Credits::new(32);
    cr.on_send();
    cr.on_reply(credit);
    assert_eq!((cr.in_flight(), cr.limit()), (0, 8));
}

#[test]
fn r8166_21_msgp_is_discarded() {
    let mut c = Chunks::with_limits(&lim());
    let m = hex("00000001 00000001 00000020 00000002 00000000 00000400 00000000 00000000 00000000");
    assert_eq!(
        classify(&m, &lim(), &mut c),
        Received::Discard(Discard::Obsolete)
    );
}

#[test]
fn r8166_23_done_and_unknown_procs_are_discarded() {
    let mut c = Chunks::with_limits(&lim());
    let m = hex("00000001 00000001 00000020 00000003 00000000 00000000 00000000");
    assert_eq!(
        classify(&m, &lim(), &mut c),
        Received::Discard(Discard::Obsolete)
    );
    for p in [5u32, 7, 0xffff_ffff] {
        let mut m = m.clone();
        m[12..16].copy_from_slice(&p.to_be_bytes());
        assert_eq!(
            classify(&m, &lim(), &mut c),
            Received::Discard(Discard::UnknownProc)
        );
    }
}

/// R8166-15/19/22: whatever the shapes and replies, the requester emits only
/// RDMA_MSG and RDMA_NOMSG, and classifying hostile replies never panics or asks
/// for an answer (this module has no way to produce one).
#[test]
fn r8166_15_19_22_requester_emits_only_msg_and_nomsg_under_fuzz() {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut scratch = Chunks::with_limits(&lim());
    let mut c = Chunks::with_limits(&lim());
    let mut hdr = [0u8; 512];
    let valid = hex(
        "1a2b3c4f 00000001 00000040 00000000 00000000 00000001 00000001 0000abcd
         00001389 00007f00 56780000 00000000 00000000 1a2b3c4f 00000001 00000000
         00000000 00000000 00000000 00000000 00000000 00001389 00000001 00001389",
    );
    let offered_w = [seg(0xabcd, 8192, 0x00007f0056780000)];
    let offered_r = [seg(0x1111, 4096, 0x1000)];
    let wbuf = vec![0u8; 8192];
    let rbuf = vec![0u8; 4096];
    for i in 0..100_000u32 {
        // A random call shape.
        let len = 4 * (1 + (next() % 600) as usize);
        let data = (next() % len as u64) as usize;
        let (call, r) = write_call(i, &vec![0u8; data]);
        let _ = len;
        let t = th(
            1024 + 1024 * (next() % 4) as usize,
            1024 + 1024 * (next() % 4) as usize,
        );
        let wc = (next() % 3 == 0).then_some((next() % 70_000) as u32);
        let shape = CallShape {
            reduce: (next() % 2 == 0).then_some(r),
            write_chunk: wc,
            max_reply: (next() % 100_000) as usize,
            result: ResultAt::Last,
        };
        if let Ok(p) = plan(&call, &shape, &t, &lim()) {
            let rd = p.read.as_ref().map(|r| seg(1, r.source.len() as u32, 0));
            let wr = seg(2, p.write_len, 0);
            let rp = seg(3, p.reply_len, 0);
            let cs = ChunkSegments {
                read: rd.as_slice(),
                write: if p.write_len > 0 {
                    std::slice::from_ref(&wr)
                } else {
                    &[]
                },
                reply: if p.reply_len > 0 {
                    std::slice::from_ref(&rp)
                } else {
                    &[]
                },
            };
            let n = encode_header(&p, 32, &cs, &mut scratch, &mut hdr).unwrap();
            let proc_ = word(&hdr, 12).unwrap();
            assert!(proc_ == wire::RDMA_MSG || proc_ == wire::RDMA_NOMSG);
            assert_eq!(word(&hdr, 4), Some(1), "R8166-01");
            assert_eq!(word(&hdr, 0), word(&call, 0), "R8166-02");
            assert!(n + p.inline_len() <= t.send);
        }
        // A mutated reply.
        let mut m = valid.clone();
        for _ in 0..(next() % 4) {
            let j = (next() as usize) % m.len();
            m[j] = next() as u8;
        }
        m.truncate((next() as usize) % (m.len() + 1));
        if let Received::Reply(h) = classify(&m, &lim(), &mut c) {
            let offered = Offered {
                write: Some(&offered_w),
                reply: (next() % 2 == 0).then_some(&offered_r[..]),
                result: if next() % 2 == 0 {
                    ResultAt::Last
                } else {
                    ResultAt::Locate(nfs3_read_locate)
                },
            };
            if let Ok(l) = check_reply(&h, &c, &m, &offered, &rbuf) {
                let mut out = vec![0u8; l.total_len()];
                assert_eq!(
                    assemble(&l, &m, &rbuf, &wbuf, &mut out),
                    Some(l.total_len())
                );
            }
        }
    }
}

// ----- replies: DDP rules --------------------------------------------------

fn read_offered(w: &[Segment]) -> Offered<'_> {
    Offered {
        write: Some(w),
        reply: None,
        result: ResultAt::Locate(nfs3_read_locate),
    }
}

#[test]
fn r8166_60_data_in_write_chunk_for_no_eligible_item_fails_the_rpc() {
    let w = [seg(0xabcd, 8192, 0x1000)];
    let wbuf = vec![1u8; 8192];
    // Error status (no data arm), yet 100 bytes were written.
    let payload = read_reply(7, 5, &[], true);
    let m = reply_msg(
        7,
        4,
        wire::RDMA_MSG,
        Some(&[seg(0xabcd, 100, 0x1000)]),
        None,
        &payload,
    );
    assert_eq!(
        complete(&m, &read_offered(&w), &[], &wbuf),
        Err(RpcRdmaError::NotEligible)
    );
    // Length word says 99 but 100 were written.
    let mut payload = read_reply(7, 0, &[0; 99], true);
    let n = payload.len();
    payload[n - 4..].copy_from_slice(&99u32.to_be_bytes());
    let m = reply_msg(
        7,
        4,
        wire::RDMA_MSG,
        Some(&[seg(0xabcd, 100, 0x1000)]),
        None,
        &payload,
    );
    assert_eq!(
        complete(&m, &read_offered(&w), &[], &wbuf),
        Err(RpcRdmaError::LengthMismatch)
    );
    // Without a locator: the last word must be the length.
    let offered = Offered {
        result: ResultAt::Last,
        ..read_offered(&w)
    };
    assert_eq!(
        complete(&m, &offered, &[], &wbuf),
        Err(RpcRdmaError::LengthMismatch)
    );
    let m = reply_msg(
        7,
        4,
        wire::RDMA_MSG,
        Some(&[seg(0xabcd, 100, 0x1000)]),
        None,
        &payload[..n - 8],
    );
    assert_eq!(
        complete(&m, &offered, &[], &wbuf),
        Err(RpcRdmaError::LengthMismatch)
    );
}

#[test]
fn r8166_61_read_data_inline_despite_write_chunk_fails_the_rpc() {
    let w = [seg(0xabcd, 8192, 0x1000)];
    let payload = read_reply(7, 0, &[9u8; 500], false);
    // Chunk echoed unused, and as empty.
    for echo in [&[seg(0xabcd, 0, 0x1000)][..], &[][..]] {
        let m = reply_msg(7, 4, wire::RDMA_MSG, Some(echo), None, &payload);
        assert_eq!(
            complete(&m, &read_offered(&w), &[], &[]),
            Err(RpcRdmaError::InlineDespiteChunk)
        );
    }
    // A zero-byte read (EOF) is fine, and so is an error with the chunk unused.
    let m = reply_msg(
        7,
        4,
        wire::RDMA_MSG,
        Some(&[seg(0xabcd, 0, 0x1000)]),
        None,
        &read_reply(7, 0, &[], true),
    );
    assert_eq!(
        complete(&m, &read_offered(&w), &[], &[]).unwrap(),
        read_reply(7, 0, &[], false)
    );
    let m = reply_msg(
        7,
        4,
        wire::RDMA_MSG,
        Some(&[seg(0xabcd, 0, 0x1000)]),
        None,
        &read_reply(7, 2, &[], true),
    );
    assert_eq!(
        complete(&m, &read_offered(&w), &[], &[]).unwrap(),
        read_reply(7, 2, &[], true)
    );
}

#[test]
fn r8166_70_unused_chunk_memory_is_never_exposed() {
    let w = [seg(0xabcd, 8192, 0x1000)];
    let canary = vec![0xc5u8; 8192];
    let payload = read_reply(7, 70, &[], true);
    let m = reply_msg(
        7,
        4,
        wire::RDMA_MSG,
        Some(&[seg(0xabcd, 0, 0x1000)]),
        None,
        &payload,
    );
    let out = complete(&m, &read_offered(&w), &[], &canary).unwrap();
    assert_eq!(out, payload);
    assert!(!out.contains(&0xc5));
    // Written data: only the echoed bytes, then zero pad, never the canary tail.
    let mut wbuf = canary.clone();
    wbuf[..5].copy_from_slice(b"hello");
    let m = reply_msg(
        7,
        4,
        wire::RDMA_MSG,
        Some(&[seg(0xabcd, 5, 0x1000)]),
        None,
        &read_reply(7, 0, b"hello", true),
    );
    let out = complete(&m, &read_offered(&w), &[], &wbuf).unwrap();
    assert_eq!(out, read_reply(7, 0, b"hello", false));
    assert!(!out.contains(&0xc5));
}

#[test]
fn write_echo_must_match_what_was_offered() {
    let w = [seg(0xabcd, 4096, 0x1000), seg(0xabce, 4096, 0x2000)];
    let data = vec![4u8; 5001];
    let mut wbuf = vec![0u8; 8192];
    wbuf[..5001].copy_from_slice(&data);
    let p = read_reply(7, 0, &data, true);
    let ok = [seg(0xabcd, 4096, 0x1000), seg(0xabce, 905, 0x2000)];
    let m = reply_msg(7, 4, wire::RDMA_MSG, Some(&ok), None, &p);
    assert_eq!(
        complete(&m, &read_offered(&w), &[], &wbuf).unwrap(),
        read_reply(7, 0, &data, false)
    );
    let bad: [&[Segment]; 5] = [
        &[seg(0xabcd, 4096, 0x1000)],                            // count differs
        &[seg(0xabcd, 4096, 0x1000), seg(0xffff, 905, 0x2000)],  // handle
        &[seg(0xabcd, 4096, 0x1000), seg(0xabce, 905, 0x2004)],  // offset
        &[seg(0xabcd, 4097, 0x1000), seg(0xabce, 904, 0x2000)],  // over length
        &[seg(0xabcd, 4000, 0x1000), seg(0xabce, 1001, 0x2000)], // hole
    ];
    for b in bad {
        let m = reply_msg(7, 4, wire::RDMA_MSG, Some(b), None, &p);
        assert_eq!(
            complete(&m, &read_offered(&w), &[], &wbuf),
            Err(RpcRdmaError::WriteEcho)
        );
    }
    // A write list although none was offered.
    let m = reply_msg(7, 4, wire::RDMA_MSG, Some(&ok), None, &p);
    let none = Offered::default();
    assert_eq!(
        complete(&m, &none, &[], &wbuf),
        Err(RpcRdmaError::WriteEcho)
    );
    // Two chunks echoed for one offered.
    let mut c = Chunks::default();
    c.push_write_chunk(&ok);
    c.push_write_chunk(&ok);
    let mut m = vec![0u8; 512];
    let n = wire::encode_msg(
        &mut XdrWriter::new(&mut m),
        Fixed {
            xid: 7,
            vers: 1,
            credit: 1,
            proc_: wire::RDMA_MSG,
        },
        &c,
    )
    .unwrap();
    m.truncate(n);
    m.extend_from_slice(&p);
    assert_eq!(
        complete(&m, &read_offered(&w), &[], &wbuf),
        Err(RpcRdmaError::WriteEcho)
    );
}

#[test]
fn long_reply_comes_from_the_reply_chunk() {
    let r = [seg(0x51, 4096, 0x8000), seg(0x52, 4096, 0x9000)];
    let body: Vec<u8> = build(|w| {
        rpc::write_accepted(w, 21, Accept::Success).unwrap();
        for i in 0..1500 {
            w.u32(i).unwrap();
        }
    });
    assert_eq!(body.len(), 6024);
    let mut rbuf = vec![0xaau8; 8192];
    rbuf[..6024].copy_from_slice(&body);
    let echo = [seg(0x51, 4096, 0x8000), seg(0x52, 6024 - 4096, 0x9000)];
    let offered = Offered {
        write: None,
        reply: Some(&r),
        result: ResultAt::Last,
    };
    let m = reply_msg(21, 4, wire::RDMA_NOMSG, None, Some(&echo), &[]);
    assert_eq!(complete(&m, &offered, &rbuf, &[]).unwrap(), body);
    // Short reply with the Reply chunk echoed unused: fine; echoed with data: not.
    let small = read_reply(21, 2, &[], true);
    let unused = [seg(0x51, 0, 0x8000), seg(0x52, 0, 0x9000)];
    let m = reply_msg(21, 4, wire::RDMA_MSG, None, Some(&unused), &small);
    assert_eq!(complete(&m, &offered, &rbuf, &[]).unwrap(), small);
    let m = reply_msg(21, 4, wire::RDMA_MSG, None, Some(&echo), &small);
    assert_eq!(
        complete(&m, &offered, &rbuf, &[]),
        Err(RpcRdmaError::ReplyEcho)
    );
    // NOMSG when we offered no Reply chunk; NOMSG whose content has another XID.
    let m = reply_msg(21, 4, wire::RDMA_NOMSG, None, Some(&echo), &[]);
    assert_eq!(
        complete(&m, &Offered::default(), &rbuf, &[]),
        Err(RpcRdmaError::ReplyEcho)
    );
    let mut other = rbuf.clone();
    other[3] = 22;
    let m = reply_msg(21, 4, wire::RDMA_NOMSG, None, Some(&echo), &[]);
    assert_eq!(
        complete(&m, &offered, &other, &[]),
        Err(RpcRdmaError::BadReplyChunk)
    );
    // Reply chunk with a different handle.
    let m = reply_msg(
        21,
        4,
        wire::RDMA_NOMSG,
        None,
        Some(&[seg(0x51, 4096, 0x8000), seg(0x53, 8, 0x9000)]),
        &[],
    );
    assert_eq!(
        complete(&m, &offered, &rbuf, &[]),
        Err(RpcRdmaError::ReplyEcho)
    );
}

#[test]
fn long_reply_with_write_chunk_data_is_spliced_too() {
    let w = [seg(0xabcd, 8192, 0x1000)];
    let r = [seg(0x51, 4096, 0x8000)];
    let data = vec![0x31u8; 3001];
    let mut wbuf = vec![0u8; 8192];
    wbuf[..3001].copy_from_slice(&data);
    let reduced = read_reply(9, 0, &data, true);
    let mut rbuf = vec![0u8; 4096];
    rbuf[..reduced.len()].copy_from_slice(&reduced);
    let m = reply_msg(
        9,
        4,
        wire::RDMA_NOMSG,
        Some(&[seg(0xabcd, 3001, 0x1000)]),
        Some(&[seg(0x51, reduced.len() as u32, 0x8000)]),
        &[],
    );
    let offered = Offered {
        reply: Some(&r),
        ..read_offered(&w)
    };
    assert_eq!(
        complete(&m, &offered, &rbuf, &wbuf).unwrap(),
        read_reply(9, 0, &data, false)
    );
}

/// R8166-01/02 on the requester side: every class of call carries `rdma_vers` 1 and
/// the call's XID; for RDMA_NOMSG that is the XID at the start of the PZRC content.
#[test]
fn r8166_01_02_every_call_class_is_version_1_with_the_payload_xid() {
    let short = null_call(0x0a0b_0c01);
    let (chunked, r) = write_call(0x0a0b_0c02, &[7u8; 5001]);
    let long = build(|w| {
        rpc::write_call(w, 0x0a0b_0c03, NFS, 3, 10, &Cred::None).unwrap();
        w.opaque_var(&[0x5a; 3000]).unwrap();
    });
    let cases = [
        (short, CallShape::new(24), CallClass::Short),
        (
            chunked,
            CallShape::new(256).with_reduce(r),
            CallClass::Chunked,
        ),
        (long, CallShape::new(512), CallClass::Long),
    ];
    for (call, shape, class) in cases {
        let p = plan(&call, &shape, &th(1024, 1024), &lim()).unwrap();
        assert_eq!(p.class, class);
        let rd = p.read.as_ref().map(|r| seg(1, r.source.len() as u32, 0));
        let cs = ChunkSegments {
            read: rd.as_slice(),
            ..Default::default()
        };
        let b = send_bytes(&p, &call, &cs, 32);
        assert_eq!(word(&b, 4), Some(1), "rdma_vers");
        assert_eq!(word(&b, 0), word(&call, 0), "rdma_xid");
        if class == CallClass::Long {
            assert_eq!(word(&b, 12), Some(wire::RDMA_NOMSG));
            let pzrc = &call[p.read.clone().unwrap().source];
            assert_eq!(
                word(pzrc, 0),
                word(&b, 0),
                "PZRC content starts with rdma_xid"
            );
        } else {
            let n = p.header_len();
            assert_eq!(word(&b, n), word(&b, 0), "payload starts with rdma_xid");
        }
    }
}

/// R8267-23: the lists this requester builds stay within what every server must
/// accept: a PZRC or one other read chunk (never both), at most one write chunk, at
/// most 16 segments per chunk; a 17th segment is refused before anything is sent.
#[test]
fn r8267_23_chunk_lists_stay_within_the_default_complexity_limits() {
    let (wcall, r) = write_call(5, &vec![1u8; 32 << 10]);
    let long = build(|w| {
        rpc::write_call(w, 6, NFS, 3, 10, &Cred::None).unwrap();
        w.opaque_var(&[0x5a; 3000]).unwrap();
    });
    let read = read_call(7, 64 << 10);
    let cases = [
        (wcall, CallShape::new(8192).with_reduce(r)),
        (long, CallShape::new(8192).with_write_chunk(64 << 10)),
        (
            read,
            CallShape::new(read_max_reply(64 << 10)).with_write_chunk(64 << 10),
        ),
    ];
    let split = |n: u32, k: u32| -> Vec<Segment> {
        (0..k)
            .map(|i| seg(i + 1, n / k + (i == 0) as u32 * (n % k), 0))
            .collect()
    };
    let mut classes = vec![];
    for (call, shape) in cases {
        let p = plan(&call, &shape, &th(1024, 1024), &lim()).unwrap();
        classes.push(p.class);
        let rd = p
            .read
            .as_ref()
            .map_or(vec![], |r| split(r.source.len() as u32, 16));
        let wr = if p.write_len > 0 {
            split(p.write_len, 16)
        } else {
            vec![]
        };
        let rp = if p.reply_len > 0 {
            split(p.reply_len, 16)
        } else {
            vec![]
        };
        let mut cs = ChunkSegments {
            read: &rd,
            write: &wr,
            reply: &rp,
        };
        let mut scratch = Chunks::with_limits(&lim());
        let mut b = [0u8; 1024];
        let n = encode_header(&p, 32, &cs, &mut scratch, &mut b).unwrap();
        let mut c = Chunks::with_limits(&lim());
        wire::decode(&b[..n], &lim(), &mut c).unwrap();
        let mut positions: Vec<u32> = c.reads.iter().map(|r| r.position).collect();
        positions.dedup();
        assert!(
            positions.len() <= 1,
            "a PZRC or one read chunk: {positions:?}"
        );
        assert!(c.write_chunks.len() <= 1);
        assert!(c.write_chunks.iter().all(|&(_, n)| n <= 16));
        assert!(c.reply_segs.len() <= 16);
        let seventeen = split(p.write_len.max(17), 17);
        if p.write_len > 0 {
            cs.write = &seventeen;
            assert_eq!(
                encode_header(&p, 32, &cs, &mut scratch, &mut b),
                Err(PlanError::Segments)
            );
        }
    }
    assert_eq!(
        classes,
        [CallClass::Chunked, CallClass::Long, CallClass::Short]
    );
}

#[test]
fn locate_splices_an_item_that_is_not_last() {
    // A synthetic reply: header, item length, then two more words after the item.
    fn locate(r: &[u8]) -> Option<usize> {
        (r.len() >= 36).then_some(r.len() - 12)
    }
    let mut reduced = build(|w| rpc::write_accepted(w, 5, Accept::Success).unwrap());
    reduced.extend_from_slice(&7u32.to_be_bytes());
    reduced.extend_from_slice(&hex("0000aaaa 0000bbbb"));
    let w = [seg(1, 16, 0)];
    let mut wbuf = [0u8; 16];
    wbuf[..7].copy_from_slice(b"1234567");
    let m = reply_msg(5, 1, wire::RDMA_MSG, Some(&[seg(1, 7, 0)]), None, &reduced);
    let offered = Offered {
        write: Some(&w),
        reply: None,
        result: ResultAt::Locate(locate),
    };
    let out = complete(&m, &offered, &[], &wbuf).unwrap();
    let mut want = reduced[..28].to_vec();
    want.extend_from_slice(b"1234567\0");
    want.extend_from_slice(&hex("0000aaaa 0000bbbb"));
    assert_eq!(out, want);
    // A locator pointing off the end or unaligned is a broken reply, not a panic.
    fn wild(r: &[u8]) -> Option<usize> {
        Some(r.len() + 1)
    }
    let offered = Offered {
        result: ResultAt::Locate(wild),
        ..offered
    };
    assert_eq!(
        complete(&m, &offered, &[], &wbuf),
        Err(RpcRdmaError::NotEligible)
    );
}
