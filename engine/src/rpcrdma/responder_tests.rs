//! Responder rules from bytes. Test names carry the conformance-checklist IDs.

use super::*;
use crate::rpcrdma::wire::{ReadSegment, RDMA_MSG, RDMA_NOMSG};

fn cfg() -> Config {
    Config {
        credits: 128,
        max_call: 1024 * 1024 + 4096,
        limits: Limits::default(),
    }
}

fn words(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|v| v.to_be_bytes()).collect()
}

/// An RDMA_MSG header with `chunks` followed by an RPC call payload of `payload`.
fn msg(xid: u32, proc_: u32, chunks: &Chunks, payload: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 4096];
    let fixed = Fixed {
        xid,
        vers: 1,
        credit: 32,
        proc_,
    };
    let n = wire::encode_msg(&mut XdrWriter::new(&mut b), fixed, chunks).unwrap();
    b.truncate(n);
    b.extend_from_slice(payload);
    b
}

/// NFSv3 NULL call (AUTH_NONE), 40 bytes.
fn null_call(xid: u32) -> Vec<u8> {
    words(&[xid, 0, 2, 100003, 3, 0, 0, 0, 0, 0])
}

fn receive(r: &mut Responder, m: &[u8]) -> Received {
    let mut c = r.new_chunks();
    r.receive(m, &mut c)
}

#[test]
fn short_call_without_chunks_is_a_call_read_in_place() {
    let mut r = Responder::new(cfg());
    let m = msg(7, RDMA_MSG, &Chunks::default(), &null_call(7));
    let Received::Call(c) = receive(&mut r, &m) else {
        panic!()
    };
    assert_eq!((c.xid, c.total_len, c.pulls, c.long), (7, 40, false, false));
    assert_eq!(
        r.pieces(),
        &[Piece::Inline {
            from: 28,
            len: 40,
            to: 0
        }]
    );
}

#[test]
fn r8166_03_xid_mismatch_gets_err_chunk_with_the_header_xid() {
    let mut r = Responder::new(cfg());
    let m = msg(
        0x1111_1111,
        RDMA_MSG,
        &Chunks::default(),
        &null_call(0x2222_2222),
    );
    assert_eq!(
        receive(&mut r, &m),
        Received::Error {
            xid: 0x1111_1111,
            vers: 1,
            body: ErrBody::Chunk
        }
    );
}

#[test]
fn r8166_04_messages_under_28_bytes_are_dropped() {
    let mut r = Responder::new(cfg());
    for n in [16usize, 24, 27] {
        let m = msg(1, RDMA_MSG, &Chunks::default(), &null_call(1));
        assert!(matches!(receive(&mut r, &m[..n]), Received::Drop(_)), "{n}");
    }
}

#[test]
fn r8166_06_version_2_gets_err_vers_echoing_xid_and_version() {
    let mut r = Responder::new(cfg());
    let m = words(&[0x1a2b3c50, 2, 0x20, 0, 0, 0, 0]);
    let got = receive(&mut r, &m);
    let Received::Error { xid, vers, body } = got else {
        panic!("{got:?}")
    };
    let mut out = [0u8; 28];
    let n = encode_error(&mut out, xid, vers, 0x40, body);
    assert_eq!(&out[..n], &words(&[0x1a2b3c50, 2, 0x40, 4, 1, 1, 1])[..]);
}

#[test]
fn r8166_07_any_other_version_gets_the_same_err_vers_but_errors_are_dropped() {
    let mut r = Responder::new(cfg());
    for vers in [0u32, 0xffff_ffff] {
        for proc_ in [0u32, 1, 7] {
            let m = words(&[9, vers, 1, proc_, 0, 0, 0]);
            assert_eq!(
                receive(&mut r, &m),
                Received::Error {
                    xid: 9,
                    vers,
                    body: ErrBody::Vers { low: 1, high: 1 }
                }
            );
        }
        let m = words(&[9, vers, 1, 4, 2, 0, 0]);
        assert!(matches!(receive(&mut r, &m), Received::Drop(_)));
    }
}

#[test]
fn r8166_08_r8166_24_errors_echo_and_carry_a_nonzero_grant() {
    let r = Responder::new(cfg());
    assert_eq!(r.grant(0), 1, "never 0, even with no Receive posted");
    assert_eq!(r.grant(5), 5, "never more than posted");
    assert_eq!(r.grant(500), 128);
    let mut out = [0u8; 28];
    let n = encode_error(&mut out, 0xabc, 1, 0, ErrBody::Chunk);
    assert_eq!(&out[..n], &words(&[0xabc, 1, 1, 4, 2])[..]);
}

#[test]
fn r8166_09_r8166_20_unknown_procs_and_msgp_get_err_chunk() {
    let mut r = Responder::new(cfg());
    for proc_ in [5u32, 0xffff_ffff, 2] {
        let m = words(&[3, 1, 1, proc_, 0, 0, 0]);
        assert_eq!(
            receive(&mut r, &m),
            Received::Error {
                xid: 3,
                vers: 1,
                body: ErrBody::Chunk
            }
        );
    }
}

#[test]
fn r8166_10_nomsg_without_any_chunk_gets_err_chunk() {
    let mut r = Responder::new(cfg());
    let m = msg(4, RDMA_NOMSG, &Chunks::default(), &[]);
    assert!(matches!(
        receive(&mut r, &m),
        Received::Error {
            body: ErrBody::Chunk,
            ..
        }
    ));
}

#[test]
fn r8166_11_read_list_running_past_the_message_gets_err_chunk() {
    let mut r = Responder::new(cfg());
    // Read segment present, but the message ends inside it.
    let m = words(&[5, 1, 1, 0, 1, 72, 0x1234, 5001, 0]);
    let mut padded = m.clone();
    padded.resize(32, 0);
    assert!(matches!(
        receive(&mut r, &m),
        Received::Error {
            body: ErrBody::Chunk,
            ..
        }
    ));
}

#[test]
fn r8166_14_r8167_16_rdma_error_at_the_server_is_dropped() {
    let mut r = Responder::new(cfg());
    let m = words(&[6, 1, 1, 4, 2, 0, 0]);
    assert!(matches!(receive(&mut r, &m), Received::Drop(_)));
}

#[test]
fn r8166_23_rdma_done_is_dropped_silently() {
    let mut r = Responder::new(cfg());
    let m = words(&[6, 1, 1, 3, 0, 0, 0]);
    assert!(matches!(receive(&mut r, &m), Received::Drop(_)));
}

#[test]
fn r8167_20_rpc_reply_with_no_callback_outstanding_is_dropped() {
    let mut r = Responder::new(cfg());
    let reply = words(&[8, 1, 0, 0, 0, 0]);
    let m = msg(8, RDMA_MSG, &Chunks::default(), &reply);
    assert!(matches!(receive(&mut r, &m), Received::Drop(_)));
}

/// Example B of the digest: a 5001-byte WRITE reduced into a read chunk at 72.
fn write_call_with_chunk(chunk_len: u32, position: u32) -> (Vec<u8>, Chunks) {
    let mut c = Chunks::default();
    c.reads.push(ReadSegment {
        position,
        seg: Segment {
            handle: 0x1234,
            length: chunk_len,
            offset: 0x7f00_1234_0000,
        },
    });
    let mut p = words(&[0x1a2b3c4e, 0, 2, 100003, 3, 7, 0, 0, 0, 0, 8]);
    p.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
    p.extend(words(&[0, 0x10000, 5001, 0, 5001]));
    assert_eq!(p.len(), 72);
    (msg(0x1a2b3c4e, RDMA_MSG, &c, &p), c)
}

#[test]
fn r8166_53_reduced_payload_ends_at_the_position_and_padding_is_restored() {
    let mut r = Responder::new(cfg());
    let (m, _) = write_call_with_chunk(5001, 72);
    let Received::Call(c) = receive(&mut r, &m) else {
        panic!()
    };
    assert_eq!(c.total_len, 72 + 5004);
    assert!(c.pulls);
    assert_eq!(
        r.pieces(),
        &[
            Piece::Inline {
                from: 52,
                len: 72,
                to: 0
            },
            Piece::Pull {
                seg: Segment {
                    handle: 0x1234,
                    length: 5001,
                    offset: 0x7f00_1234_0000
                },
                to: 72
            },
            Piece::Zero { to: 5073, len: 3 },
        ]
    );
    assert_eq!(
        r.reduced(),
        &[Reduced {
            position: 72,
            len: 5001
        }]
    );
}

#[test]
fn r8166_52_chunk_with_its_pad_needs_no_zero_fill() {
    let mut r = Responder::new(cfg());
    let (m, _) = write_call_with_chunk(5004, 72);
    let Received::Call(c) = receive(&mut r, &m) else {
        panic!()
    };
    assert_eq!(c.total_len, 72 + 5004);
    assert!(!r.pieces().iter().any(|p| matches!(p, Piece::Zero { .. })));
}

#[test]
fn r8166_49_unaligned_position_gets_err_chunk() {
    let mut r = Responder::new(cfg());
    let (m, _) = write_call_with_chunk(5001, 70);
    assert!(matches!(
        receive(&mut r, &m),
        Received::Error {
            body: ErrBody::Chunk,
            ..
        }
    ));
}

#[test]
fn r8166_50_position_beyond_the_reduced_payload_gets_err_chunk() {
    let mut r = Responder::new(cfg());
    let (m, _) = write_call_with_chunk(5001, 76);
    assert!(matches!(
        receive(&mut r, &m),
        Received::Error {
            body: ErrBody::Chunk,
            ..
        }
    ));
}

#[test]
fn r8166_76_read_chunk_above_the_call_limit_is_refused_before_reading() {
    let mut r = Responder::new(Config {
        max_call: 64 * 1024,
        ..cfg()
    });
    let (m, _) = write_call_with_chunk(1024 * 1024, 72);
    assert!(matches!(
        receive(&mut r, &m),
        Received::Error {
            body: ErrBody::Chunk,
            ..
        }
    ));
}

#[test]
fn r8166_48_segments_of_one_chunk_are_reassembled_in_list_order() {
    let mut r = Responder::new(cfg());
    let mut c = Chunks::default();
    for k in 0..3u32 {
        c.reads.push(ReadSegment {
            position: 72,
            seg: Segment {
                handle: 10 + k,
                length: 4096,
                offset: 0,
            },
        });
    }
    let (_, _) = write_call_with_chunk(5001, 72);
    let mut p = words(&[9, 0, 2, 100003, 3, 7, 0, 0, 0, 0, 8]);
    p.extend_from_slice(&[0; 8]);
    p.extend(words(&[0, 0, 12288, 0, 12288]));
    let m = msg(9, RDMA_MSG, &c, &p);
    let Received::Call(info) = receive(&mut r, &m) else {
        panic!()
    };
    assert_eq!(info.total_len, 72 + 12288);
    let pulls: Vec<(u32, usize)> = r
        .pieces()
        .iter()
        .filter_map(|p| match p {
            Piece::Pull { seg, to } => Some((seg.handle, *to)),
            _ => None,
        })
        .collect();
    assert_eq!(pulls, vec![(10, 72), (11, 72 + 4096), (12, 72 + 8192)]);
}

#[test]
fn r8166_38_long_call_is_a_pull_of_the_whole_payload() {
    let mut r = Responder::new(cfg());
    let mut c = Chunks::default();
    c.reads.push(ReadSegment {
        position: 0,
        seg: Segment {
            handle: 0x2001,
            length: 40,
            offset: 0x1000,
        },
    });
    let m = msg(0x52, RDMA_NOMSG, &c, &[]);
    let Received::Call(info) = receive(&mut r, &m) else {
        panic!()
    };
    assert!(info.long && info.pulls);
    assert_eq!(info.total_len, 40);
    assert!(Responder::check_long_xid(0x52, &null_call(0x52)));
    assert!(!Responder::check_long_xid(0x52, &null_call(0x53)));
}

/// A READ reply: header words, then `data` as the last opaque.
fn read_reply(xid: u32, data: &[u8]) -> (Vec<u8>, Range<usize>) {
    let mut b = words(&[
        xid,
        1,
        0,
        0,
        0,
        0,
        0,
        0,
        data.len() as u32,
        1,
        data.len() as u32,
    ]);
    let start = b.len();
    b.extend_from_slice(data);
    b.resize(start + padded(data.len()), 0);
    (b, start..start + data.len())
}

fn one_write_chunk(lengths: &[u32]) -> Chunks {
    let segs: Vec<Segment> = lengths
        .iter()
        .enumerate()
        .map(|(i, &l)| Segment {
            handle: 0xabcd + i as u32,
            length: l,
            offset: 0x7f00_5678_0000 + 0x10_0000 * i as u64,
        })
        .collect();
    let mut c = Chunks::default();
    c.push_write_chunk(&segs);
    c
}

fn decode_echo(hdr: &[u8]) -> (Fixed, Chunks) {
    let mut c = Chunks::with_limits(&Limits::default());
    let Header::Msg { fixed, .. } = wire::decode(hdr, &Limits::default(), &mut c).unwrap() else {
        panic!()
    };
    (fixed, c)
}

#[test]
fn r8166_64_66_data_split_over_segments_exact_length_no_pad() {
    let mut r = Responder::new(cfg());
    let call = one_write_chunk(&[4096, 4096]);
    let data = vec![0x5a; 5001];
    let (reply, ddp) = read_reply(0x1a2b3c4f, &data);
    let mut hdr = [0u8; 256];
    let plan = r
        .plan_reply(
            0x1a2b3c4f,
            64,
            &call,
            &reply,
            Some(ddp.clone()),
            4096,
            false,
            &mut hdr,
        )
        .unwrap()
        .clone();
    assert_eq!(plan.writes.len(), 2);
    assert_eq!(plan.writes[0].src, ddp.start..ddp.start + 4096);
    assert_eq!(plan.writes[1].src, ddp.start + 4096..ddp.end);
    assert_eq!(plan.writes[1].handle, 0xabce);
    let total: usize = plan.writes.iter().map(|w| w.src.len()).sum();
    assert_eq!(total, 5001, "R8166-65/66: exactly the data, no pad written");
    assert_eq!(plan.inline, [0..ddp.start, reply.len()..reply.len()]);
    let (fixed, echo) = decode_echo(&hdr[..plan.header_len]);
    assert_eq!((fixed.proc_, fixed.credit, fixed.vers), (RDMA_MSG, 64, 1));
    let lens: Vec<u32> = echo.write_chunk(0).iter().map(|s| s.length).collect();
    assert_eq!(lens, vec![4096, 905]);
}

#[test]
fn r8166_63_echo_keeps_count_handles_and_offsets() {
    let mut r = Responder::new(cfg());
    let call = one_write_chunk(&[8192]);
    let (reply, ddp) = read_reply(1, &[1; 100]);
    let mut hdr = [0u8; 256];
    let n = r
        .plan_reply(1, 8, &call, &reply, Some(ddp), 4096, false, &mut hdr)
        .unwrap()
        .header_len;
    let (_, echo) = decode_echo(&hdr[..n]);
    let (a, b) = (echo.write_chunk(0)[0], call.write_chunk(0)[0]);
    assert_eq!((a.handle, a.offset, a.length), (b.handle, b.offset, 100));
}

#[test]
fn r8166_45_replies_never_carry_a_read_list() {
    let mut r = Responder::new(cfg());
    let mut call = one_write_chunk(&[8192]);
    call.reads.push(ReadSegment::default());
    let (reply, ddp) = read_reply(1, &[1; 10]);
    let mut hdr = [0u8; 256];
    let n = r
        .plan_reply(1, 8, &call, &reply, Some(ddp), 4096, false, &mut hdr)
        .unwrap()
        .header_len;
    assert_eq!(&hdr[16..20], &[0, 0, 0, 0]);
    assert_eq!(n, 16 + 4 + (8 + 16 + 4) + 4);
}

#[test]
fn r8166_68_failed_read_returns_the_chunk_unused() {
    let mut r = Responder::new(cfg());
    let call = one_write_chunk(&[4096, 4096]);
    let reply = words(&[1, 1, 0, 0, 0, 70, 0]); // NFS3ERR_STALE, no attributes
    let mut hdr = [0u8; 256];
    let plan = r
        .plan_reply(1, 8, &call, &reply, None, 4096, false, &mut hdr)
        .unwrap()
        .clone();
    assert!(plan.writes.is_empty());
    let (_, echo) = decode_echo(&hdr[..plan.header_len]);
    assert_eq!(echo.write_chunk(0).len(), 2, "segment count kept");
    assert!(echo.write_chunk(0).iter().all(|s| s.length == 0));
}

#[test]
fn r8166_71_empty_write_chunk_means_inline_and_is_echoed_empty() {
    let mut r = Responder::new(cfg());
    let call = one_write_chunk(&[]);
    let (reply, ddp) = read_reply(1, &[7; 64]);
    let mut hdr = [0u8; 256];
    let plan = r
        .plan_reply(1, 8, &call, &reply, Some(ddp), 4096, false, &mut hdr)
        .unwrap()
        .clone();
    assert!(plan.writes.is_empty());
    assert_eq!(plan.inline[0], 0..reply.len());
    let (_, echo) = decode_echo(&hdr[..plan.header_len]);
    assert_eq!(echo.write_chunks.len(), 1);
    assert!(echo.write_chunk(0).is_empty());
}

#[test]
fn write_chunk_smaller_than_the_data_is_an_overrun_not_an_overwrite() {
    let mut r = Responder::new(cfg());
    let call = one_write_chunk(&[4096]);
    let (reply, ddp) = read_reply(1, &[7; 5000]);
    let mut hdr = [0u8; 256];
    assert_eq!(
        r.plan_reply(1, 8, &call, &reply, Some(ddp), 4096, false, &mut hdr),
        Err(Overrun)
    );
}

fn reply_chunk_call(len: u32) -> Chunks {
    let mut c = Chunks::default();
    c.set_reply_chunk(&[
        Segment {
            handle: 0x2002,
            length: len / 2,
            offset: 0x1000,
        },
        Segment {
            handle: 0x2003,
            length: len - len / 2,
            offset: 0x9000,
        },
    ]);
    c
}

#[test]
fn r8166_39_r8166_42_long_reply_goes_into_the_reply_chunk_as_nomsg() {
    let mut r = Responder::new(cfg());
    let call = reply_chunk_call(8192);
    let reply = vec![3u8; 6000];
    let mut hdr = [0u8; 256];
    let plan = r
        .plan_reply(1, 8, &call, &reply, None, 1024, false, &mut hdr)
        .unwrap()
        .clone();
    assert_eq!(plan.inline, [0..0, 0..0], "no inline payload");
    let (fixed, echo) = decode_echo(&hdr[..plan.header_len]);
    assert_eq!(fixed.proc_, RDMA_NOMSG);
    let segs = echo.reply_chunk().unwrap();
    assert_eq!((segs[0].length, segs[1].length), (4096, 1904));
    assert_eq!((segs[0].handle, segs[1].offset), (0x2002, 0x9000));
    let written: usize = plan.writes.iter().map(|w| w.src.len()).sum();
    assert_eq!(written, 6000);
}

#[test]
fn r8166_43_short_reply_echoes_an_unused_reply_chunk_with_zero_lengths() {
    let mut r = Responder::new(cfg());
    let call = reply_chunk_call(8192);
    let reply = vec![3u8; 100];
    let mut hdr = [0u8; 256];
    let plan = r
        .plan_reply(1, 8, &call, &reply, None, 1024, false, &mut hdr)
        .unwrap()
        .clone();
    let (fixed, echo) = decode_echo(&hdr[..plan.header_len]);
    assert_eq!(fixed.proc_, RDMA_MSG);
    assert!(echo.reply_chunk().unwrap().iter().all(|s| s.length == 0));
    assert!(plan.writes.is_empty());
}

#[test]
fn r8166_44_r8267_07_reply_too_big_without_room_is_an_overrun() {
    let mut r = Responder::new(cfg());
    let reply = vec![3u8; 6000];
    let mut hdr = [0u8; 256];
    assert_eq!(
        r.plan_reply(
            1,
            8,
            &Chunks::default(),
            &reply,
            None,
            1024,
            false,
            &mut hdr
        ),
        Err(Overrun)
    );
    let small = reply_chunk_call(4096);
    let reply = vec![3u8; 64 * 1024];
    assert_eq!(
        r.plan_reply(1, 8, &small, &reply, None, 1024, false, &mut hdr),
        Err(Overrun)
    );
}

#[test]
fn r8797_13_remote_invalidation_only_with_a_single_rkey_and_both_r_bits() {
    let mut r = Responder::new(cfg());
    let call = one_write_chunk(&[8192]);
    let (reply, ddp) = read_reply(1, &[1; 10]);
    let mut hdr = [0u8; 256];
    let p = r
        .plan_reply(1, 8, &call, &reply, Some(ddp.clone()), 4096, true, &mut hdr)
        .unwrap();
    assert_eq!(p.invalidate, Some(0xabcd));
    let p = r
        .plan_reply(
            1,
            8,
            &call,
            &reply,
            Some(ddp.clone()),
            4096,
            false,
            &mut hdr,
        )
        .unwrap();
    assert_eq!(p.invalidate, None, "R8797-14: no SWI unless both set R");
    let two = one_write_chunk(&[4096, 4096]);
    let p = r
        .plan_reply(1, 8, &two, &reply, Some(ddp), 4096, true, &mut hdr)
        .unwrap();
    assert_eq!(p.invalidate, None, "two rkeys: plain Send");
}

#[test]
fn r8166_01_02_reply_headers_are_version_1_with_the_call_xid() {
    let mut r = Responder::new(cfg());
    let (reply, ddp) = read_reply(0x77, &[1; 10]);
    let mut hdr = [0u8; 256];
    let n = r
        .plan_reply(
            0x77,
            8,
            &Chunks::default(),
            &reply,
            Some(ddp),
            4096,
            false,
            &mut hdr,
        )
        .unwrap()
        .header_len;
    let (fixed, _) = decode_echo(&hdr[..n]);
    assert_eq!((fixed.vers, fixed.xid), (1, 0x77));
    assert_eq!(&reply[..4], &0x77u32.to_be_bytes());
}

#[test]
fn random_headers_never_panic_and_plans_stay_in_bounds() {
    let mut r = Responder::new(cfg());
    let mut c = r.new_chunks();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let (base, _) = write_call_with_chunk(5001, 72);
    for _ in 0..20_000 {
        let mut m = base.clone();
        for _ in 0..(next() % 6) {
            let i = (next() as usize) % m.len();
            m[i] = next() as u8;
        }
        let cut = (next() as usize) % (m.len() + 1);
        m.truncate(cut.max(m.len() / 2));
        if let Received::Call(info) = r.receive(&m, &mut c) {
            assert!(info.total_len <= cfg().max_call);
            for p in r.pieces() {
                match *p {
                    Piece::Inline { from, len, to } => {
                        assert!(from + len <= m.len() && to + len <= info.total_len)
                    }
                    Piece::Pull { seg, to } => assert!(to + seg.length as usize <= info.total_len),
                    Piece::Zero { to, len } => assert!(to + len <= info.total_len),
                }
            }
        }
    }
}

#[test]
fn r8166_01_02_long_reply_header_xid_is_the_xid_at_the_start_of_the_reply_chunk() {
    let mut r = Responder::new(cfg());
    let call = reply_chunk_call(8192);
    let mut reply = words(&[0x5151_5151, 1, 0, 0, 0, 0]);
    reply.resize(6000, 3);
    let mut hdr = [0u8; 256];
    let plan = r
        .plan_reply(0x5151_5151, 8, &call, &reply, None, 1024, false, &mut hdr)
        .unwrap()
        .clone();
    let (fixed, _) = decode_echo(&hdr[..plan.header_len]);
    assert_eq!((fixed.proc_, fixed.vers), (RDMA_NOMSG, 1));
    // The first Write puts reply bytes 0.. at the start of the Reply chunk.
    let first = &plan.writes[0];
    assert_eq!(
        (first.src.start, first.handle, first.remote_offset),
        (0, 0x2002, 0x1000)
    );
    assert_eq!(
        &reply[first.src.start..first.src.start + 4],
        &fixed.xid.to_be_bytes()
    );
}

/// R8166-19/22: whatever the reply shape, the responder emits RDMA_MSG, RDMA_NOMSG or
/// RDMA_ERROR only, never RDMA_MSGP (2) or RDMA_DONE (3).
#[test]
fn r8166_19_22_responder_emits_only_msg_nomsg_or_error() {
    let mut r = Responder::new(cfg());
    let mut hdr = [0u8; 256];
    let (small, sddp) = read_reply(1, &[1; 10]);
    let (big, bddp) = read_reply(1, &[1; 6000]);
    let cases = [
        (Chunks::default(), &small[..], Some(sddp.clone())),
        (one_write_chunk(&[8192]), &big, Some(bddp.clone())),
        (one_write_chunk(&[]), &small, Some(sddp)),
        (reply_chunk_call(8192), &big, None),
        (reply_chunk_call(8192), &big, Some(bddp)),
        (Chunks::default(), &big, None), // overrun: the caller answers ERR_CHUNK
    ];
    for (call, reply, ddp) in cases {
        if r.plan_reply(1, 8, &call, reply, ddp, 1024, true, &mut hdr)
            .is_err()
        {
            encode_error(&mut hdr, 1, 1, 8, ErrBody::Chunk);
        }
        let proc_ = u32::from_be_bytes(hdr[12..16].try_into().unwrap());
        assert!(
            [RDMA_MSG, RDMA_NOMSG, wire::RDMA_ERROR].contains(&proc_),
            "{proc_}"
        );
    }
    let n = encode_error(&mut hdr, 1, 7, 8, ErrBody::Vers { low: 1, high: 1 });
    assert_eq!((n, &hdr[12..16]), (28, &wire::RDMA_ERROR.to_be_bytes()[..]));
}

/// R8166-69 as NFSv3 can exercise it: an NFSv3 reply has at most one DDP-eligible
/// result (READ data or READLINK path), so no chunk can be "skipped by a non-DDP arm
/// and used by the next eligible result". What remains: the one result takes the first
/// write chunk, later chunks come back unused (count kept, lengths 0), and an error arm
/// leaves every chunk unused. The multi-result case needs NFSv4 COMPOUND (and a
/// `plan_reply` that takes several DDP items).
#[test]
fn r8166_69_nfsv3_one_result_takes_the_first_chunk_and_the_others_come_back_unused() {
    let mut r = Responder::new(cfg());
    let mut call = one_write_chunk(&[4096]);
    call.push_write_chunk(&[Segment {
        handle: 0x7777,
        length: 4096,
        offset: 0x9000,
    }]);
    let (reply, ddp) = read_reply(1, &[5; 100]);
    let mut hdr = [0u8; 256];
    for ddp in [Some(ddp), None] {
        let plan = r
            .plan_reply(1, 8, &call, &reply, ddp.clone(), 4096, false, &mut hdr)
            .unwrap()
            .clone();
        let (_, echo) = decode_echo(&hdr[..plan.header_len]);
        assert_eq!(echo.write_chunks.len(), 2);
        let first = echo.write_chunk(0)[0];
        assert_eq!(first.length, if ddp.is_some() { 100 } else { 0 });
        assert!(plan.writes.iter().all(|w| w.handle == 0xabcd));
        let second = echo.write_chunk(1);
        assert_eq!(second.len(), 1, "count kept");
        assert_eq!((second[0].handle, second[0].length), (0x7777, 0));
    }
}

#[test]
fn r8166_77_64_bit_offsets_reach_the_rdma_operations_verbatim() {
    const HIGH: u64 = 0xffff_ffff_0000_1000;
    let mut r = Responder::new(cfg());
    let (mut m, mut c) = write_call_with_chunk(5001, 72);
    c.reads[0].seg.offset = HIGH;
    let payload = m.split_off(52);
    let m = msg(0x1a2b3c4e, RDMA_MSG, &c, &payload);
    assert!(matches!(receive(&mut r, &m), Received::Call(_)));
    let pulled = r.pieces().iter().find_map(|p| match p {
        Piece::Pull { seg, .. } => Some(seg.offset),
        _ => None,
    });
    assert_eq!(pulled, Some(HIGH), "RDMA Read source");
    let mut call = Chunks::default();
    let seg = |handle, offset| Segment {
        handle,
        length: 4096,
        offset,
    };
    call.push_write_chunk(&[seg(0xffff_fffe, HIGH), seg(0xffff_ffff, u64::MAX - 4095)]);
    let (reply, ddp) = read_reply(1, &[9; 5000]);
    let mut hdr = [0u8; 256];
    let plan = r
        .plan_reply(1, 8, &call, &reply, Some(ddp), 4096, false, &mut hdr)
        .unwrap();
    let targets: Vec<(u32, u64)> = plan
        .writes
        .iter()
        .map(|w| (w.handle, w.remote_offset))
        .collect();
    assert_eq!(
        targets,
        vec![(0xffff_fffe, HIGH), (0xffff_ffff, u64::MAX - 4095)]
    );
}

/// R8267-25 (checked for every ULP, NFSv3 included): chunk lists over the limits the
/// header decoder enforces get ERR_CHUNK; the RFC 8267 §6.4.2 minimum (read chunk,
/// write chunk and Reply chunk of 16 segments each) is accepted.
#[test]
fn r8267_25_chunk_lists_over_the_limits_get_err_chunk_and_16_segments_are_fine() {
    let l = Limits::default();
    let with = |reads: usize, chunks: usize, per_chunk: usize, reply: usize, len: u32| {
        let seg = Segment {
            handle: 1,
            length: len,
            offset: 0,
        };
        let mut c = Chunks::default();
        let rseg = Segment {
            length: 4096,
            ..seg
        };
        c.reads = vec![
            ReadSegment {
                position: 72,
                seg: rseg
            };
            reads
        ];
        for _ in 0..chunks {
            c.push_write_chunk(&vec![seg; per_chunk]);
        }
        if reply > 0 {
            c.set_reply_chunk(&vec![seg; reply]);
        }
        let mut p = words(&[9, 0, 2, 100003, 3, 7, 0, 0, 0, 0, 8]);
        p.extend_from_slice(&[0; 8]);
        let n = 4096 * reads as u32;
        p.extend(words(&[0, 0, n, 0, n]));
        msg(9, RDMA_MSG, &c, &p)
    };
    let mut r = Responder::new(cfg());
    let within = with(16, 1, 16, 16, 4096);
    assert!(matches!(receive(&mut r, &within), Received::Call(_)));
    let huge = (l.max_chunk_bytes / 2 + 4) as u32;
    for m in [
        with(l.max_read_segments + 1, 0, 0, 0, 4096),
        with(1, l.max_write_chunks + 1, 1, 0, 4096),
        with(1, 1, l.max_chunk_segments + 1, 0, 4096),
        with(1, 0, 0, l.max_chunk_segments + 1, 4096),
        with(1, 1, 2, 0, huge),
    ] {
        let got = receive(&mut r, &m);
        assert_eq!(
            got,
            Received::Error {
                xid: 9,
                vers: 1,
                body: ErrBody::Chunk
            }
        );
    }
}

/// Hostile peers: a segment whose last byte would lie past 2^64 - 1 names no
/// memory: ERR_CHUNK, for a read chunk, a write chunk and the Reply chunk alike; one
/// ending exactly at 2^64 - 1 is fine (R8166-77).
#[test]
fn r8166_77_segments_wrapping_past_2_pow_64_get_err_chunk() {
    let mut r = Responder::new(cfg());
    let wrap = Segment {
        handle: 1,
        length: 4096,
        offset: u64::MAX - 4094,
    };
    let edge = Segment {
        offset: u64::MAX - 4095,
        ..wrap
    };
    let (mut m, c) = write_call_with_chunk(4096, 72);
    let payload = m.split_off(52);
    for (seg, ok) in [(wrap, false), (edge, true)] {
        let mut reads = c.clone();
        reads.reads[0].seg = seg;
        let mut writes = Chunks::default();
        writes.push_write_chunk(&[seg]);
        let mut reply = Chunks::default();
        reply.set_reply_chunk(&[seg]);
        for (chunks, body) in [
            (&reads, &payload[..]),
            (&writes, &null_call(9)[..]),
            (&reply, &null_call(9)[..]),
        ] {
            let xid = u32::from_be_bytes(body[..4].try_into().unwrap());
            let m = msg(xid, RDMA_MSG, chunks, body);
            let got = receive(&mut r, &m);
            if ok {
                assert!(matches!(got, Received::Call(_)), "{seg:?}: {got:?}");
            } else {
                assert_eq!(
                    got,
                    Received::Error {
                        xid,
                        vers: 1,
                        body: ErrBody::Chunk
                    },
                    "{seg:?}"
                );
            }
        }
    }
}

/// The requester's credit field is a request only; 0 and 2^32 - 1 change
/// nothing on our side (R8166-31: the grant stays ours, within [1, configured]), and
/// any XID (0, 2^32 - 1) is just echoed.
#[test]
fn r8166_31_extreme_credit_requests_and_xids_are_taken_as_they_come() {
    let mut r = Responder::new(cfg());
    for (credit, xid) in [(0u32, 0u32), (u32::MAX, u32::MAX), (1, 0x8000_0000)] {
        let mut m = msg(xid, RDMA_MSG, &Chunks::default(), &null_call(xid));
        m[8..12].copy_from_slice(&credit.to_be_bytes());
        let Received::Call(c) = receive(&mut r, &m) else {
            panic!("credit {credit} xid {xid}")
        };
        assert_eq!((c.xid, c.requested), (xid, credit));
        for posted in [0, 1, 128, u32::MAX] {
            let g = r.grant(posted);
            assert!(
                (1..=128).contains(&g) && (g <= posted || posted == 0),
                "{g}"
            );
        }
    }
}

/// A long call whose position-zero chunk adds up past the call limit (many
/// segments at the per-chunk byte cap) is ERR_CHUNK before any Read, with no overflow.
#[test]
fn r8166_76_long_call_read_chunks_summing_past_the_limit_get_err_chunk() {
    let mut r = Responder::new(cfg());
    let mut c = Chunks::default();
    for i in 0..3 {
        c.reads.push(ReadSegment {
            position: 0,
            seg: Segment {
                handle: i,
                length: 600 * 1024,
                offset: 0x1000 * i as u64,
            },
        });
    }
    let m = msg(3, RDMA_NOMSG, &c, &[]);
    assert_eq!(
        receive(&mut r, &m),
        Received::Error {
            xid: 3,
            vers: 1,
            body: ErrBody::Chunk
        }
    );
    assert!(r.pieces().len() <= 3);
}

// ---- RFC 8267 §6.4 (NFSv4 COMPOUND): several results, several chunks ----

/// A reply with the `data` items as opaques (each after a length word), separated by
/// 12 bytes of other results; returns the reply and each item's data range.
fn multi_reply(data: &[&[u8]]) -> (Vec<u8>, Vec<Range<usize>>) {
    let mut b = words(&[0x44, 1, 0, 0, 0, 0]);
    let mut at = vec![];
    for d in data {
        b.extend(words(&[0xeeee, 0, d.len() as u32]));
        let start = b.len();
        b.extend_from_slice(d);
        b.resize(start + padded(d.len()), 0);
        at.push(start..start + d.len());
    }
    b.extend(words(&[0xffff]));
    (b, at)
}

fn chunk(handle: u32, lengths: &[u32]) -> Vec<Segment> {
    lengths
        .iter()
        .enumerate()
        .map(|(i, &l)| Segment {
            handle: handle + i as u32,
            length: l,
            offset: 0x10_0000 * (handle as u64) + 0x1000 * i as u64,
        })
        .collect()
}

fn list(items: &[Option<Range<usize>>]) -> DdpList {
    let mut l = DdpList::new();
    for i in items {
        assert!(l.push(i.clone()));
    }
    l
}

/// What the requester would see: each chunk's bytes (by the Writes), and the inline
/// payload the Send carries.
fn apply(plan: &ReplyPlan, reply: &[u8], segs: &[Segment]) -> (Vec<Vec<u8>>, Vec<u8>) {
    let mut mem: Vec<Vec<u8>> = segs.iter().map(|s| vec![0u8; s.length as usize]).collect();
    for w in &plan.writes {
        let (i, s) = segs
            .iter()
            .enumerate()
            .find(|(_, s)| s.handle == w.handle)
            .expect("write targets a segment the call offered");
        let off = (w.remote_offset - s.offset) as usize;
        assert!(
            off + w.src.len() <= s.length as usize,
            "write past a segment"
        );
        mem[i][off..off + w.src.len()].copy_from_slice(&reply[w.src.clone()]);
    }
    let inline = plan
        .inline
        .iter()
        .flat_map(|r| reply[r.clone()].to_vec())
        .collect();
    (mem, inline)
}

fn chunk_bytes(mem: &[Vec<u8>], echo: &[Segment], first: usize) -> Vec<u8> {
    echo.iter()
        .enumerate()
        .flat_map(|(i, s)| mem[first + i][..s.length as usize].to_vec())
        .collect()
}

#[test]
fn r8267_18_two_reads_go_into_write_chunks_a_and_b_in_order() {
    let mut r = Responder::new(cfg());
    let (d1, d2) = (vec![1u8; 5001], vec![2u8; 3000]);
    let (reply, at) = multi_reply(&[&d1, &d2]);
    let mut call = Chunks::default();
    let (a, b) = (chunk(0x100, &[4096, 4096]), chunk(0x200, &[4096]));
    call.push_write_chunk(&a);
    call.push_write_chunk(&b);
    let mut hdr = [0u8; 512];
    let ddp = list(&[Some(at[0].clone()), Some(at[1].clone())]);
    let plan = r
        .plan_reply_list(0x44, 8, &call, &reply, &ddp, 1024, false, &mut hdr)
        .unwrap()
        .clone();
    let (_, echo) = decode_echo(&hdr[..plan.header_len]);
    let segs: Vec<Segment> = a.iter().chain(b.iter()).copied().collect();
    let (mem, inline) = apply(&plan, &reply, &segs);
    assert_eq!(
        chunk_bytes(&mem, echo.write_chunk(0), 0),
        d1,
        "first READ in A"
    );
    assert_eq!(
        chunk_bytes(&mem, echo.write_chunk(1), 2),
        d2,
        "second READ in B"
    );
    assert_eq!(
        echo.write_chunk(0)
            .iter()
            .map(|s| s.length)
            .collect::<Vec<_>>(),
        [4096, 905]
    );
    // The inline rest: everything but the two items and their pads.
    let mut want = reply[..at[0].start].to_vec();
    want.extend_from_slice(&reply[at[0].start + 5004..at[1].start]);
    want.extend_from_slice(&reply[at[1].end..]);
    assert_eq!(inline, want);
    assert_eq!(plan.inline.as_slice().len(), 3);
}

#[test]
fn r8267_19_read_readlink_read_with_a_b_empty_c_keeps_the_readlink_inline() {
    let mut r = Responder::new(cfg());
    let (d1, link, d3) = (vec![1u8; 2000], b"target/of/link".to_vec(), vec![3u8; 2500]);
    let (reply, at) = multi_reply(&[&d1, &link, &d3]);
    let mut call = Chunks::default();
    let (a, c) = (chunk(0x100, &[4096]), chunk(0x300, &[1024, 4096]));
    call.push_write_chunk(&a);
    call.push_write_chunk(&[]);
    call.push_write_chunk(&c);
    let mut hdr = [0u8; 512];
    let ddp = list(&[
        Some(at[0].clone()),
        Some(at[1].clone()),
        Some(at[2].clone()),
    ]);
    let plan = r
        .plan_reply_list(0x44, 8, &call, &reply, &ddp, 1024, false, &mut hdr)
        .unwrap()
        .clone();
    let (_, echo) = decode_echo(&hdr[..plan.header_len]);
    assert_eq!(echo.write_chunks.len(), 3);
    assert_eq!(echo.write_chunk(1).len(), 0, "empty chunk echoed in slot 2");
    let segs: Vec<Segment> = a.iter().chain(c.iter()).copied().collect();
    let (mem, inline) = apply(&plan, &reply, &segs);
    assert_eq!(chunk_bytes(&mem, echo.write_chunk(0), 0), d1);
    assert_eq!(chunk_bytes(&mem, echo.write_chunk(2), 1), d3);
    let mut want = reply[..at[0].start].to_vec();
    want.extend_from_slice(&reply[at[0].end..at[2].start]);
    want.extend_from_slice(&reply[at[2].start + 2500..]);
    assert_eq!(inline, want, "READLINK text stays inline");
}

#[test]
fn r8267_20_three_reads_one_chunk_the_first_uses_it_the_rest_inline() {
    let mut r = Responder::new(cfg());
    let (d1, d2, d3) = (vec![1u8; 1000], vec![2u8; 100], vec![3u8; 200]);
    let (reply, at) = multi_reply(&[&d1, &d2, &d3]);
    let mut call = Chunks::default();
    let a = chunk(0x100, &[1000]);
    call.push_write_chunk(&a);
    let mut hdr = [0u8; 512];
    let ddp = list(&at.iter().cloned().map(Some).collect::<Vec<_>>());
    let plan = r
        .plan_reply_list(0x44, 8, &call, &reply, &ddp, 1024, false, &mut hdr)
        .unwrap()
        .clone();
    let (mem, inline) = apply(&plan, &reply, &a);
    assert_eq!(mem[0], d1);
    let mut want = reply[..at[0].start].to_vec();
    want.extend_from_slice(&reply[at[0].end..]);
    assert_eq!(inline, want);
    // Too large for the Send: the inline rest goes into the Reply chunk.
    let (big2, big3) = (vec![2u8; 3000], vec![3u8; 3000]);
    let (reply, at) = multi_reply(&[&d1, &big2, &big3]);
    let ddp = list(&at.iter().cloned().map(Some).collect::<Vec<_>>());
    let rc = chunk(0x900, &[4096, 4096]);
    call.set_reply_chunk(&rc);
    let plan = r
        .plan_reply_list(0x44, 8, &call, &reply, &ddp, 1024, false, &mut hdr)
        .unwrap()
        .clone();
    assert_eq!(decode_echo(&hdr[..plan.header_len]).0.proc_, RDMA_NOMSG);
    let segs: Vec<Segment> = a.iter().chain(rc.iter()).copied().collect();
    let (mem, inline) = apply(&plan, &reply, &segs);
    assert!(inline.is_empty());
    assert_eq!(mem[0], d1);
    let mut want = reply[..at[0].start].to_vec();
    want.extend_from_slice(&reply[at[0].end..]);
    let (_, echo) = decode_echo(&hdr[..plan.header_len]);
    let got: Vec<u8> = echo
        .reply_chunk()
        .unwrap()
        .iter()
        .enumerate()
        .flat_map(|(i, s)| mem[1 + i][..s.length as usize].to_vec())
        .collect();
    assert_eq!(got, want);
}

#[test]
fn r8267_21_failed_read_returns_its_chunk_empty_and_the_next_read_uses_the_next() {
    let mut r = Responder::new(cfg());
    let d2 = vec![7u8; 300];
    let (reply, at) = multi_reply(&[&d2]);
    let mut call = Chunks::default();
    let (a, b) = (chunk(0x100, &[4096, 4096]), chunk(0x200, &[4096]));
    call.push_write_chunk(&a);
    call.push_write_chunk(&b);
    let mut hdr = [0u8; 512];
    let ddp = list(&[None, Some(at[0].clone())]);
    let plan = r
        .plan_reply_list(0x44, 8, &call, &reply, &ddp, 1024, false, &mut hdr)
        .unwrap()
        .clone();
    let (_, echo) = decode_echo(&hdr[..plan.header_len]);
    let a_echo = echo.write_chunk(0);
    assert_eq!(a_echo.len(), 2, "count kept");
    assert!(a_echo.iter().all(|s| s.length == 0), "zero data length");
    assert_eq!(echo.write_chunk(1)[0].length, 300);
    // A COMPOUND that stopped at a failed READ: every chunk comes back empty.
    let plan = r
        .plan_reply_list(
            0x44,
            8,
            &call,
            &reply,
            &list(&[None]),
            4096,
            false,
            &mut hdr,
        )
        .unwrap()
        .clone();
    assert!(plan.writes.is_empty());
    let (_, echo) = decode_echo(&hdr[..plan.header_len]);
    assert!(echo.write_segs.iter().all(|s| s.length == 0));
    assert_eq!(plan.inline.total(), reply.len());
}

#[test]
fn r8267_22_empty_write_list_puts_every_result_inline() {
    let mut r = Responder::new(cfg());
    let (reply, at) = multi_reply(&[&[1u8; 100], &[2u8; 100]]);
    let ddp = list(&at.iter().cloned().map(Some).collect::<Vec<_>>());
    let mut hdr = [0u8; 512];
    let plan = r
        .plan_reply_list(
            0x44,
            8,
            &Chunks::default(),
            &reply,
            &ddp,
            1024,
            false,
            &mut hdr,
        )
        .unwrap();
    assert!(plan.writes.is_empty());
    assert_eq!(plan.inline.as_slice().len(), 1);
    assert_eq!(plan.inline[0], 0..reply.len());
}

#[test]
fn r8267_07_a_compound_result_larger_than_its_chunk_is_an_overrun() {
    let mut r = Responder::new(cfg());
    let (reply, at) = multi_reply(&[&[1u8; 100], &[2u8; 5000]]);
    let mut call = Chunks::default();
    call.push_write_chunk(&chunk(0x100, &[4096]));
    call.push_write_chunk(&chunk(0x200, &[4096]));
    let ddp = list(&at.iter().cloned().map(Some).collect::<Vec<_>>());
    let mut hdr = [0u8; 512];
    assert_eq!(
        r.plan_reply_list(0x44, 8, &call, &reply, &ddp, 1024, false, &mut hdr),
        Err(Overrun)
    );
}

/// Runs the reassembly `pieces` against the requester's memory (`segs[i]` holds
/// `mem[i]`) and the received message.
fn reassemble(
    pieces: &[Piece],
    m: &[u8],
    segs: &[Segment],
    mem: &[Vec<u8>],
    total: usize,
) -> Vec<u8> {
    let mut out = vec![0xAAu8; total];
    for p in pieces {
        match *p {
            Piece::Inline { from, len, to } => {
                out[to..to + len].copy_from_slice(&m[from..from + len])
            }
            Piece::Zero { to, len } => out[to..to + len].fill(0),
            Piece::Pull { seg, to } => {
                let i = segs.iter().position(|s| s.handle == seg.handle).unwrap();
                let off = (seg.offset - segs[i].offset) as usize;
                assert!(
                    off + seg.length as usize <= segs[i].length as usize,
                    "read past a segment"
                );
                out[to..to + seg.length as usize]
                    .copy_from_slice(&mem[i][off..off + seg.length as usize]);
            }
        }
    }
    out
}

#[test]
fn r8267_24_long_call_with_pzrc_read_chunk_write_chunk_and_reply_chunk_of_16_segments() {
    let mut r = Responder::new(cfg());
    // The reassembled call: 1000 bytes of arguments, 16 * 301 bytes of WRITE data
    // (padded to 4), then 600 bytes of trailing arguments.
    let head: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
    let mut head = head;
    head[..4].copy_from_slice(&0x77u32.to_be_bytes());
    let data: Vec<u8> = (0..16 * 301u32).map(|i| (i % 13) as u8 + 1).collect();
    let tail: Vec<u8> = (0..600u32).map(|i| (i % 7) as u8 + 100).collect();
    let reduced: Vec<u8> = head.iter().chain(tail.iter()).copied().collect();
    // PZRC: the reduced stream in 16 segments of 100 bytes.
    let pz = chunk(0x1000, &[100; 16]);
    let rd = chunk(0x2000, &[301; 16]);
    let mut c = Chunks::default();
    for s in &pz {
        c.reads.push(ReadSegment {
            position: 0,
            seg: *s,
        });
    }
    for s in &rd {
        c.reads.push(ReadSegment {
            position: 1000,
            seg: *s,
        });
    }
    c.push_write_chunk(&chunk(0x3000, &[512; 16]));
    c.set_reply_chunk(&chunk(0x4000, &[512; 16]));
    let m = msg(0x77, RDMA_NOMSG, &c, &[]);
    let Received::Call(info) = receive(&mut r, &m) else {
        panic!("R8267-24: must be processed")
    };
    assert!(info.long && info.pulls);
    let padded_data = padded(data.len());
    assert_eq!(info.total_len, 1000 + padded_data + 600);
    let mut mem: Vec<Vec<u8>> = reduced.chunks(100).map(|c| c.to_vec()).collect();
    mem.extend(data.chunks(301).map(|c| c.to_vec()));
    let segs: Vec<Segment> = pz.iter().chain(rd.iter()).copied().collect();
    let rec = reassemble(r.pieces(), &m, &segs, &mem, info.total_len);
    let mut want = head.clone();
    want.extend_from_slice(&data);
    want.resize(1000 + padded_data, 0);
    want.extend_from_slice(&tail);
    assert_eq!(rec, want);
    assert_eq!(
        r.reduced(),
        &[Reduced {
            position: 1000,
            len: data.len() as u32
        }]
    );
    assert!(Responder::check_long_xid(0x77, &rec));
    // The reply: a READ result into the 16-segment write chunk, the rest (over the
    // inline threshold) into the 16-segment Reply chunk.
    let mut call = Chunks::default();
    call.push_write_chunk(&chunk(0x3000, &[512; 16]));
    call.set_reply_chunk(&chunk(0x4000, &[512; 16]));
    let (reply, at) = multi_reply(&[&[9u8; 8000], &[0u8; 0]]);
    let mut big = reply.clone();
    big.extend(vec![5u8; 2000]);
    let ddp = list(&[Some(at[0].clone())]);
    let mut hdr = [0u8; 1024];
    let plan = r
        .plan_reply_list(0x77, 8, &call, &big, &ddp, 1024, false, &mut hdr)
        .unwrap();
    assert_eq!(decode_echo(&hdr[..plan.header_len]).0.proc_, RDMA_NOMSG);
    let written: usize = plan.writes.iter().map(|w| w.src.len()).sum();
    assert_eq!(
        written,
        big.len(),
        "data into the write chunk, the rest into the Reply chunk"
    );
}

#[test]
fn r8267_24_read_chunk_beyond_the_pzrc_stream_gets_err_chunk() {
    let mut r = Responder::new(cfg());
    let mut c = Chunks::default();
    for s in chunk(0x1000, &[100; 2]) {
        c.reads.push(ReadSegment {
            position: 0,
            seg: s,
        });
    }
    c.reads.push(ReadSegment {
        position: 204,
        seg: chunk(0x2000, &[8])[0],
    });
    let m = msg(5, RDMA_NOMSG, &c, &[]);
    assert!(matches!(
        receive(&mut r, &m),
        Received::Error {
            body: ErrBody::Chunk,
            ..
        }
    ));
    // At the very end of the stream it is fine (a trailing item).
    c.reads[2].position = 200;
    let m = msg(5, RDMA_NOMSG, &c, &[]);
    assert!(matches!(receive(&mut r, &m), Received::Call(_)));
}
