//! RFC 8267 §6 (the NFSv4 upper-layer binding) end to end over the `soft` fabric: a
//! raw requester sends NFSv4.1 COMPOUNDs with hand-made chunk lists to an in-process
//! gateway. Test names carry the conformance-checklist rows they prove.

mod common;

use common::v4::*;
use common::*;
use engine::rpc;
use engine::rpcrdma::wire::{self, Chunks};
use engine::xdr::XdrReader;
use std::net::TcpStream;

/// A gateway, its root, files `a` (5000 bytes) and `b` (3000 bytes), a symlink `l`,
/// and a v4.1 session over RDMA.
struct Fx {
    _gw: Gw,
    tcp: TcpStream,
    root: Vec<u8>,
    a: Vec<u8>,
    b: Vec<u8>,
    l: Vec<u8>,
    da: Vec<u8>,
    db: Vec<u8>,
    s: V4,
}

const LINK: &[u8] = b"target/of/the/link";

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect()
}

fn setup(owner: &[u8]) -> Fx {
    let gw = Gw::start(&GwOpts::default());
    let mut tcp = gw.connect_tcp();
    let root = v3_mount(&mut tcp);
    let (da, db) = (pattern(5000, 1), pattern(3000, 2));
    let a = v3_file(&mut tcp, &root, b"a", &da);
    let b = v3_file(&mut tcp, &root, b"b", &db);
    let l = v3_symlink(&mut tcp, &root, b"l", LINK);
    let s = V4::connect(&gw, owner);
    Fx {
        _gw: gw,
        tcp,
        root,
        a,
        b,
        l,
        da,
        db,
        s,
    }
}

/// Walks COMPOUND4res results.
struct Res<'a>(XdrReader<'a>);

impl Res<'_> {
    fn op(&mut self, op: u32) -> u32 {
        assert_eq!(self.0.u32().unwrap(), op, "result order");
        self.0.u32().unwrap()
    }
    fn sequence(&mut self) {
        assert_eq!(self.op(OP_SEQUENCE), 0);
        self.0.skip(16 + 20).unwrap();
    }
    fn putfh(&mut self) {
        assert_eq!(self.op(OP_PUTFH), 0);
    }
    /// A READ result: (eof, length word, the data when inline).
    fn read(&mut self, inline: bool) -> (bool, usize, Vec<u8>) {
        assert_eq!(self.op(OP_READ), 0);
        let eof = self.0.bool().unwrap();
        let len = self.0.u32().unwrap() as usize;
        let data = if inline {
            self.0.opaque_fixed(len).unwrap().to_vec()
        } else {
            Vec::new()
        };
        (eof, len, data)
    }
}

/// READ data was written into the echoed chunk `k`, and its inline length word says
/// how much.
fn written(fx: &mut Fx, echo: &Chunks, k: usize) -> Vec<u8> {
    let segs = echo.write_chunk(k).to_vec();
    chunk_data(&mut fx.s.raw, &segs)
}

#[test]
fn r8267_18_two_reads_with_write_list_a_b_fill_a_then_b() {
    let mut fx = setup(b"r18");
    let mut ops = putfh_op(&fx.a);
    ops.extend(read_op(0, 5000));
    ops.extend(putfh_op(&fx.b));
    ops.extend(read_op(0, 3000));
    let (xid, call) = fx.s.compound(4, &ops);
    let mut ch = Chunks::default();
    let a = segs(&mut fx.s.raw, 0, 0, 2, 4096);
    let b = segs(&mut fx.s.raw, 1, 0, 1, 4096);
    ch.push_write_chunk(&a);
    ch.push_write_chunk(&b);
    let rep = fx.s.short(xid, &ch, &call);
    assert_eq!(rep.fixed.proc_, wire::RDMA_MSG);
    let (st, n, res) = rep.compound();
    assert_eq!((st, n), (0, 5));
    let mut r = Res(XdrReader::new(&res));
    r.sequence();
    r.putfh();
    let (eof1, len1, _) = r.read(false);
    r.putfh();
    let (eof2, len2, _) = r.read(false);
    assert_eq!((len1, len2), (5000, 3000));
    assert!(eof1 && eof2);
    assert!(r.0.rest().is_empty(), "no data inline");
    assert_eq!(written(&mut fx, &rep.echo, 0), fx.da, "first READ in A");
    assert_eq!(written(&mut fx, &rep.echo, 1), fx.db, "second READ in B");
}

#[test]
fn r8267_19_read_readlink_read_with_a_empty_c_keeps_the_link_inline() {
    let mut fx = setup(b"r19");
    let mut ops = putfh_op(&fx.a);
    ops.extend(read_op(0, 5000));
    ops.extend(putfh_op(&fx.l));
    ops.extend(OP_READLINK.to_be_bytes());
    ops.extend(putfh_op(&fx.b));
    ops.extend(read_op(0, 3000));
    let (xid, call) = fx.s.compound(6, &ops);
    let mut ch = Chunks::default();
    let a = segs(&mut fx.s.raw, 0, 0, 2, 4096);
    let c = segs(&mut fx.s.raw, 1, 0, 3, 1024);
    ch.push_write_chunk(&a);
    ch.push_write_chunk(&[]);
    ch.push_write_chunk(&c);
    let rep = fx.s.short(xid, &ch, &call);
    let (st, n, res) = rep.compound();
    assert_eq!((st, n), (0, 7));
    assert_eq!(rep.echo.write_chunks.len(), 3);
    assert_eq!(
        rep.echo.write_chunk(1).len(),
        0,
        "empty chunk echoed in slot 2"
    );
    let mut r = Res(XdrReader::new(&res));
    r.sequence();
    r.putfh();
    assert_eq!(r.read(false).1, 5000);
    r.putfh();
    assert_eq!(r.op(OP_READLINK), 0);
    assert_eq!(r.0.opaque_var(1024).unwrap(), LINK, "READLINK inline");
    r.putfh();
    assert_eq!(r.read(false).1, 3000);
    assert_eq!(written(&mut fx, &rep.echo, 0), fx.da);
    assert_eq!(written(&mut fx, &rep.echo, 2), fx.db);
}

#[test]
fn r8267_20_three_reads_one_chunk_first_via_the_chunk_others_inline() {
    let mut fx = setup(b"r20");
    let mut ops = putfh_op(&fx.a);
    ops.extend(read_op(0, 2000));
    ops.extend(read_op(2000, 300));
    ops.extend(read_op(3000, 201));
    let (xid, call) = fx.s.compound(4, &ops);
    let mut ch = Chunks::default();
    let a = segs(&mut fx.s.raw, 0, 0, 1, 2000);
    ch.push_write_chunk(&a);
    // No private data: the reply threshold is 1024 bytes (RFC 8797), which the two
    // inline READs fit.
    let rep = fx.s.short(xid, &ch, &call);
    assert_eq!(rep.fixed.proc_, wire::RDMA_MSG);
    let (st, n, res) = rep.compound();
    assert_eq!((st, n), (0, 5));
    let mut r = Res(XdrReader::new(&res));
    r.sequence();
    r.putfh();
    assert_eq!(r.read(false).1, 2000);
    assert_eq!(r.read(true).2, fx.da[2000..2300]);
    assert_eq!(r.read(true).2, fx.da[3000..3201]);
    assert_eq!(written(&mut fx, &rep.echo, 0), fx.da[..2000]);
    // Larger extra READs go into the Reply chunk.
    let mut ops = putfh_op(&fx.a);
    ops.extend(read_op(0, 2000));
    ops.extend(read_op(2000, 1000));
    ops.extend(read_op(3000, 2000));
    let (xid, call) = fx.s.compound(4, &ops);
    let rc = segs(&mut fx.s.raw, 1, 0, 2, 4096);
    ch.set_reply_chunk(&rc);
    let rep = fx.s.short(xid, &ch, &call);
    assert_eq!(rep.fixed.proc_, wire::RDMA_NOMSG);
    let (st, _, res) = rep.compound();
    assert_eq!(st, 0);
    let mut r = Res(XdrReader::new(&res));
    r.sequence();
    r.putfh();
    assert_eq!(r.read(false).1, 2000);
    assert_eq!(r.read(true).2, fx.da[2000..3000]);
    assert_eq!(r.read(true).2, fx.da[3000..5000]);
    assert_eq!(written(&mut fx, &rep.echo, 0), fx.da[..2000]);
}

#[test]
fn r8267_21_failing_read_returns_its_chunk_with_zero_length() {
    let mut fx = setup(b"r21");
    // READ of a directory fails (NFS4ERR_ISDIR); the COMPOUND stops there.
    let mut ops = putfh_op(&fx.root);
    ops.extend(read_op(0, 4096));
    ops.extend(putfh_op(&fx.b));
    ops.extend(read_op(0, 3000));
    let (xid, call) = fx.s.compound(4, &ops);
    let mut ch = Chunks::default();
    let a = segs(&mut fx.s.raw, 0, 0, 2, 4096);
    let b = segs(&mut fx.s.raw, 1, 0, 1, 4096);
    ch.push_write_chunk(&a);
    ch.push_write_chunk(&b);
    let rep = fx.s.short(xid, &ch, &call);
    let (st, n, _) = rep.compound();
    assert_ne!(st, 0, "the READ failed");
    assert_eq!(n, 3, "stopped at the READ");
    for k in 0..2 {
        let e = rep.echo.write_chunk(k);
        assert!(!e.is_empty(), "count kept");
        assert!(e.iter().all(|s| s.length == 0), "chunk {k} empty");
    }
}

#[test]
fn r8267_22_empty_write_list_returns_every_read_inline() {
    let mut fx = setup(b"r22");
    let mut ops = putfh_op(&fx.b);
    ops.extend(read_op(0, 400));
    ops.extend(read_op(2600, 1000));
    let (xid, call) = fx.s.compound(3, &ops);
    let rep = fx.s.short(xid, &Chunks::default(), &call);
    let (st, _, res) = rep.compound();
    assert_eq!(st, 0);
    let mut r = Res(XdrReader::new(&res));
    r.sequence();
    r.putfh();
    assert_eq!(r.read(true).2, fx.db[..400]);
    assert_eq!(r.read(true).2, fx.db[2600..]);
    // Too large for the Send: everything goes into the Reply chunk.
    let mut ops = putfh_op(&fx.a);
    ops.extend(read_op(0, 5000));
    let (xid, call) = fx.s.compound(2, &ops);
    let mut ch = Chunks::default();
    let rc = segs(&mut fx.s.raw, 1, 0, 4, 4096);
    ch.set_reply_chunk(&rc);
    let rep = fx.s.short(xid, &ch, &call);
    assert_eq!(rep.fixed.proc_, wire::RDMA_NOMSG);
    let (st, _, res) = rep.compound();
    assert_eq!(st, 0);
    let mut r = Res(XdrReader::new(&res));
    r.sequence();
    r.putfh();
    assert_eq!(r.read(true).2, fx.da);
}

/// A session whose EXCHANGE_ID offered a Reply chunk (as Linux does) is set up in
/// `V4::connect`; the reply came back Short with the chunk echoed empty.
#[test]
fn exchange_id_with_a_reply_chunk_on_the_first_compound_works() {
    let mut fx = setup(b"first");
    let (xid, call) = fx.s.compound(0, &[]);
    let rep = fx.s.short(xid, &Chunks::default(), &call);
    assert_eq!(rep.compound().0, 0, "the session works");
}

#[test]
fn r8267_12_write_data_from_a_read_chunk_lands_byte_exact() {
    let mut fx = setup(b"w");
    let data = pattern(10001, 9);
    let mut ops = putfh_op(&fx.b);
    ops.extend(OP_WRITE.to_be_bytes());
    ops.extend([0u8; 16]);
    ops.extend(0u64.to_be_bytes());
    ops.extend(2u32.to_be_bytes());
    ops.extend((data.len() as u32).to_be_bytes());
    let (xid, call) = fx.s.compound(2, &ops);
    let position = call.len() as u32;
    let ch = Chunks {
        reads: read_chunk(&mut fx.s.raw, 0, 0, &data, position, 4096),
        ..Default::default()
    };
    let rep = fx.s.short(xid, &ch, &call);
    let (st, _, _) = rep.compound();
    assert_eq!(st, 0, "WRITE from a read chunk");
    assert_eq!(v3_read(&mut fx.tcp, &fx.b, 0, 20000), data);
    // A read chunk reducing something else (the PUTFH handle) is GARBAGE_ARGS.
    let (xid, call) = fx.s.compound(1, &putfh_op(&fx.b));
    let fh_at = call.len() - fx.b.len().div_ceil(4) * 4;
    let reduced = call[..fh_at].to_vec();
    let mut ch = Chunks::default();
    let fh = fx.b.clone();
    ch.reads = read_chunk(&mut fx.s.raw, 0, 0, &fh, fh_at as u32, 4096);
    let rep = fx.s.short(xid, &ch, &reduced);
    let (_, st, _) = rpc::decode_reply(&rep.rpc).unwrap();
    assert_eq!(st, rpc::ReplyStatus::Accepted(rpc::Accept::GarbageArgs));
}

#[test]
fn r8267_13_create_nf4lnk_with_linkdata_in_a_read_chunk_makes_the_symlink() {
    let mut fx = setup(b"r13");
    let target = b"../a/very/long/target/path/for/the/link".repeat(3);
    let mut ops = putfh_op(&fx.root);
    ops.extend(OP_CREATE.to_be_bytes());
    ops.extend(5u32.to_be_bytes()); // NF4LNK
    ops.extend((target.len() as u32).to_be_bytes());
    let (xid, call) = fx.s.compound(2, &ops);
    let position = call.len() as u32;
    // objname and createattrs follow the reduced linkdata inline.
    let mut call = call;
    xdr_opaque(&mut call, b"sl");
    call.extend(0u32.to_be_bytes()); // empty bitmap
    call.extend(0u32.to_be_bytes()); // no values
    let ch = Chunks {
        reads: read_chunk(&mut fx.s.raw, 0, 0, &target, position, 4096),
        ..Default::default()
    };
    let rep = fx.s.short(xid, &ch, &call);
    assert_eq!(rep.compound().0, 0, "CREATE NF4LNK");
    let fh = v3_lookup(&mut fx.tcp, &fx.root, b"sl").expect("the symlink exists");
    assert_eq!(v3_readlink(&mut fx.tcp, &fh), target);
}

#[test]
fn r8267_24_long_call_pzrc_read_chunk_write_chunk_reply_chunk_16_segments_each() {
    let mut fx = setup(b"r24");
    let data = pattern(8000, 3);
    // SEQUENCE, PUTFH b, WRITE (data reduced), READ it back.
    let mut ops = putfh_op(&fx.b);
    ops.extend(OP_WRITE.to_be_bytes());
    ops.extend([0u8; 16]);
    ops.extend(0u64.to_be_bytes());
    ops.extend(2u32.to_be_bytes());
    ops.extend((data.len() as u32).to_be_bytes());
    let (xid, head) = fx.s.compound(3, &ops);
    let position = head.len() as u32;
    let mut reduced = head;
    reduced.extend(read_op(0, 8000));
    // The PZRC: the reduced call in 16 segments (area 0); the read chunk: the data in
    // 16 segments (area 1); write and Reply chunks: 16 segments each (area 2).
    // 16 non-empty PZRC segments of near-equal (unaligned) lengths.
    let mut reads = read_chunk(&mut fx.s.raw, 0, 0, &reduced, 0, reduced.len());
    let whole = reads[0].seg;
    let (q, rem) = (reduced.len() / 16, reduced.len() % 16);
    assert!(q > 0);
    reads.clear();
    let mut at = 0u64;
    for i in 0..16 {
        let len = (q + usize::from(i < rem)) as u32;
        reads.push(engine::rpcrdma::wire::ReadSegment {
            position: 0,
            seg: engine::rpcrdma::wire::Segment {
                offset: whole.offset + at,
                length: len,
                ..whole
            },
        });
        at += len as u64;
    }
    reads.extend(read_chunk(&mut fx.s.raw, 1, 0, &data, position, 500));
    assert_eq!(reads.len(), 32);
    let mut ch = Chunks {
        reads,
        ..Default::default()
    };
    let w = segs(&mut fx.s.raw, 2, 0, 16, 512);
    ch.push_write_chunk(&w);
    let rc = segs(&mut fx.s.raw, 2, 16 * 512, 16, 512);
    ch.set_reply_chunk(&rc);
    let m = [header(xid, wire::RDMA_NOMSG, &ch)].concat();
    let rep = exchange(&mut fx.s.raw, &m);
    let (st, n, res) = rep.compound();
    assert_eq!((st, n), (0, 4), "R8267-24: processed");
    let mut r = Res(XdrReader::new(&res));
    r.sequence();
    r.putfh();
    assert_eq!(r.op(OP_WRITE), 0);
    r.0.skip(4 + 4 + 8).unwrap();
    assert_eq!(r.read(false).1, 8000);
    assert_eq!(
        written(&mut fx, &rep.echo, 0),
        data,
        "WRITE then READ byte-exact"
    );
}

#[test]
fn fast_path_v41_read_over_rdma_puts_its_data_in_the_write_chunk() {
    let mut fx = setup(b"fast");
    let before = gateway::nfs4::fast::answered();
    let mut got = 0;
    for _ in 0..4 {
        let mut ops = putfh_op(&fx.a);
        ops.extend(read_op(0, 4096));
        let (xid, call) = fx.s.compound(2, &ops);
        let mut ch = Chunks::default();
        let a = segs(&mut fx.s.raw, 0, 0, 1, 4096);
        fx.s.raw.scratch(0).1[..4096].fill(0);
        ch.push_write_chunk(&a);
        let rep = fx.s.short(xid, &ch, &call);
        let (st, _, res) = rep.compound();
        assert_eq!(st, 0);
        let mut r = Res(XdrReader::new(&res));
        r.sequence();
        r.putfh();
        assert_eq!(r.read(false).1, 4096);
        assert_eq!(written(&mut fx, &rep.echo, 0), fx.da[..4096]);
        got = gateway::nfs4::fast::answered() - before;
    }
    assert!(got >= 1, "the reactor answered a cached READ over RDMA");
}

/// A retransmitted READ (same slot and sequence id) is answered from the session's
/// reply cache; its data still goes into the retransmission's write chunk.
#[test]
fn r8267_18_a_replayed_read_still_uses_the_write_chunk() {
    let mut fx = setup(b"replay");
    let mut ops = putfh_op(&fx.b);
    ops.extend(read_op(0, 3000));
    let (xid, call) = fx.s.compound(2, &ops);
    for k in 0..2 {
        let mut ch = Chunks::default();
        let a = segs(&mut fx.s.raw, k, 0, 1, 4096);
        ch.push_write_chunk(&a);
        let rep = fx.s.short(xid, &ch, &call);
        let (st, _, res) = rep.compound();
        assert_eq!(st, 0);
        let mut r = Res(XdrReader::new(&res));
        r.sequence();
        r.putfh();
        assert_eq!(r.read(false).1, 3000, "attempt {k}");
        assert_eq!(written(&mut fx, &rep.echo, 0), fx.db, "attempt {k}");
    }
}

/// A retransmitted COMPOUND of two READs (not a shape the reactor answers) is
/// answered from the session's reply cache with each READ's data in its own write
/// chunk again (RFC 8267 §6.4.1, RFC 8881 §2.10.6.1.3): the slot keeps where the
/// first reply's READ data lie with its bytes; nothing reads the cached reply to
/// find them.
#[test]
fn r8267_18_a_replayed_compound_of_two_reads_fills_both_chunks_again() {
    let mut fx = setup(b"replay2");
    // Small enough for the session's ca_maxresponsesize_cached (4096): cached.
    let (na, nb) = (1500, 1200);
    let mut ops = putfh_op(&fx.a);
    ops.extend(read_op(0, na as u32));
    ops.extend(putfh_op(&fx.b));
    ops.extend(read_op(0, nb as u32));
    let (xid, call) = fx.s.compound(4, &ops);
    let mut first = None;
    for k in 0..2 {
        // Fresh scratch areas for the retransmission: its chunks start zeroed.
        let (ka, kb) = (2 * k, 2 * k + 1);
        fx.s.raw.scratch(ka).1.fill(0);
        fx.s.raw.scratch(kb).1.fill(0);
        let mut ch = Chunks::default();
        let a = segs(&mut fx.s.raw, ka, 0, 1, 4096);
        let b = segs(&mut fx.s.raw, kb, 0, 1, 4096);
        ch.push_write_chunk(&a);
        ch.push_write_chunk(&b);
        let rep = fx.s.short(xid, &ch, &call);
        let (st, n, res) = rep.compound();
        assert_eq!((st, n), (0, 5), "attempt {k}");
        let mut r = Res(XdrReader::new(&res));
        r.sequence();
        r.putfh();
        assert_eq!(r.read(false).1, na, "attempt {k}");
        r.putfh();
        assert_eq!(r.read(false).1, nb, "attempt {k}");
        assert!(r.0.rest().is_empty(), "no data inline, attempt {k}");
        let (a, b) = (
            written(&mut fx, &rep.echo, 0),
            written(&mut fx, &rep.echo, 1),
        );
        assert_eq!(a, fx.da[..na], "chunk A, attempt {k}");
        assert_eq!(b, fx.db[..nb], "chunk B, attempt {k}");
        match &first {
            None => first = Some(res),
            Some(f) => assert_eq!(&res, f, "the replay's results are the original's"),
        }
    }
}

/// The fast path's zero-copy READ over RDMA (data written from the cache pages, RFC
/// 8267 §6.4.1) keeps the whole COMPOUND4res in the slot reply cache (RFC 8881
/// §2.10.6.1.3): a retransmission gets the same results and the same data, padding
/// included (3,000 bytes), in its write chunk.
#[test]
fn r8267_18_fast_path_zero_copy_read_replays_byte_identical() {
    let mut fx = setup(b"zcopy");
    let mut fast = None;
    for _ in 0..4 {
        let before = gateway::nfs4::fast::answered();
        let mut ops = putfh_op(&fx.b);
        ops.extend(read_op(0, 3000));
        let (xid, call) = fx.s.compound(2, &ops);
        let mut ch = Chunks::default();
        let a = segs(&mut fx.s.raw, 0, 0, 1, 4096);
        ch.push_write_chunk(&a);
        let rep = fx.s.short(xid, &ch, &call);
        assert_eq!(written(&mut fx, &rep.echo, 0), fx.db);
        if gateway::nfs4::fast::answered() > before {
            fast = Some((xid, call, rep.compound().2));
            break;
        }
    }
    let (xid, call, first) = fast.expect("the reactor answered a cached READ");
    let mut ch = Chunks::default();
    let a = segs(&mut fx.s.raw, 1, 0, 1, 4096);
    fx.s.raw.scratch(1).1[..4096].fill(0);
    ch.push_write_chunk(&a);
    let rep = fx.s.short(xid, &ch, &call);
    let (st, _, res) = rep.compound();
    assert_eq!(st, 0);
    assert_eq!(res, first, "the replay's results are the original's");
    assert_eq!(written(&mut fx, &rep.echo, 0), fx.db, "the replay's data");
}

/// Rough per-op cost of a cached 4 KiB READ over soft RDMA, v4.1 (reactor fast path,
/// data into the write chunk) against v3 (the same, from the cache pages). Both sides
/// share this process, so the ratio, not the numbers, is what to look at.
/// `cargo test --release -p gateway --test nfs4_rdma_ulb -- --ignored --nocapture`
#[test]
#[ignore]
fn perf_v41_cached_read_vs_v3_over_soft() {
    const N: usize = 20000;
    let mut fx = setup(b"perf");
    let v3_args = enc(|w| {
        w.opaque_var(&fx.a).unwrap();
        w.u64(0).unwrap();
        w.u32(4096).unwrap();
    });
    let mut ch = Chunks::default();
    let a = segs(&mut fx.s.raw, 0, 0, 1, 4096);
    ch.push_write_chunk(&a);
    let run = |fx: &mut Fx, v4: bool| {
        let t = std::time::Instant::now();
        for i in 0..N {
            let (xid, call) = if v4 {
                let mut ops = putfh_op(&fx.a);
                ops.extend(read_op(0, 4096));
                fx.s.compound(2, &ops)
            } else {
                let xid = 50_000 + i as u32;
                (xid, rpc_call_v(xid, NFS, 3, 6, &v3_args))
            };
            let rep = fx.s.short(xid, &ch, &call);
            assert_eq!(rep.echo.write_chunk(0)[0].length, 4096);
        }
        t.elapsed().as_nanos() as f64 / N as f64
    };
    let fast0 = gateway::nfs4::fast::answered();
    // Round 0 warms up (the first thousands of calls of a fresh gateway are slow).
    for round in 0..3 {
        let v3 = run(&mut fx, false);
        let v4 = run(&mut fx, true);
        println!(
            "round {round}: v3 {v3:.0} ns/op, v4.1 {v4:.0} ns/op, ratio {:.2}",
            v4 / v3
        );
    }
    println!(
        "fast path answered {}",
        gateway::nfs4::fast::answered() - fast0
    );
}

/// A COMPOUND reply too large for the Send with no Reply chunk (and its READs not in
/// write chunks) is ERR_CHUNK; the connection and the session stay usable.
#[test]
fn r8267_07_compound_reply_overrun_is_err_chunk_and_the_connection_stays_up() {
    let mut fx = setup(b"r07");
    let mut ops = putfh_op(&fx.a);
    ops.extend(read_op(0, 5000));
    ops.extend(putfh_op(&fx.b));
    ops.extend(read_op(0, 3000));
    let (xid, call) = fx.s.compound(4, &ops);
    // One write chunk for the first READ only: the second (3000 bytes) must go inline.
    let mut ch = Chunks::default();
    let a = segs(&mut fx.s.raw, 0, 0, 2, 4096);
    ch.push_write_chunk(&a);
    assert!(fx.s.raw.send(&msg(xid, &ch, &call)));
    let got =
        fx.s.raw
            .recv(std::time::Duration::from_secs(10))
            .expect("an answer");
    let mut echo = Chunks::default();
    match wire::decode(&got, &wire::Limits::default(), &mut echo) {
        Ok(wire::Header::Error { fixed, err }) => {
            assert_eq!(fixed.xid, xid);
            assert_eq!(err, wire::ErrBody::Chunk);
        }
        other => panic!("expected ERR_CHUNK, got {other:?}"),
    }
    let (xid, call) = fx.s.compound(0, &[]);
    let rep = fx.s.short(xid, &Chunks::default(), &call);
    assert_eq!(rep.compound().0, 0, "the session goes on");
}
