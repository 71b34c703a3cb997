//! Tests of the NFSv4 requester binding against bench's own COMPOUND encoder and the
//! sans-IO requester planner (RFC 8267 §6 rows).

use super::*;
use crate::nfs4::{encode_compound, Op4, Seq, Stateid, FATTR4_SIZE};
use crate::ulb::{call_shape, call_shape_with, V4_UNPREDICTABLE};
use engine::rpc::{self, Accept, AuthSys, Cred};
use engine::rpcrdma::privdata::Thresholds;
use engine::rpcrdma::requester::{plan, CallClass};
use engine::rpcrdma::wire::Limits;
use engine::xdr::XdrWriter;

const FH: &[u8] = &[5u8; 40];
/// fattr4_owner (RFC 8881 §5.8.2.26): a string.
const FATTR4_OWNER: u32 = 36;

fn seq() -> Op4<'static> {
    Op4::Sequence(Seq {
        session: [1; 16],
        slot: 0,
        seqid: 1,
        highest: 3,
    })
}

fn compound(ops: &[Op4]) -> Vec<u8> {
    let mut out = vec![0u8; (2 << 20) + 4096];
    let n = encode_compound(&mut out, 0x77, &Cred::Sys(AuthSys::new(1, 1, &[])), ops).unwrap();
    // encode_compound leaves room for a record mark.
    out[4..n].to_vec()
}

fn t4k() -> Thresholds {
    Thresholds {
        send: 4096,
        recv: 4096,
        remote_invalidate: false,
    }
}

#[test]
fn r8267_12_write_data_is_the_only_reducible_argument() {
    let data: Vec<u8> = (0..65536u32).map(|i| (i * 13) as u8).collect();
    let sid = Stateid::default();
    let c = compound(&[seq(), Op4::Putfh(FH), Op4::Write(sid, 8192, &data)]);
    let s = call_shape(&c);
    let r = s.reduce.clone().expect("WRITE data reducible");
    assert_eq!(&c[r.clone()], &data[..]);
    assert_eq!(s.write_chunk, None);
    assert!(s.max_reply < 2048, "{}", s.max_reply);
    // Large: the planner reduces it into a read chunk (Chunked, not Long).
    let p = plan(&c, &s, &t4k(), &Limits::default()).unwrap();
    assert_eq!(p.class, CallClass::Chunked);
    assert_eq!(p.read.unwrap().source, r);
    assert_eq!(p.reply_len, 0);
    // Small: stays inline.
    let c = compound(&[seq(), Op4::Putfh(FH), Op4::Write(sid, 0, &data[..100])]);
    let p = plan(&c, &call_shape(&c), &t4k(), &Limits::default()).unwrap();
    assert_eq!(p.class, CallClass::Short);
    // Nothing else is reducible: a long LOOKUP name is not.
    let name = "n".repeat(3000);
    let c = compound(&[seq(), Op4::Putfh(FH), Op4::Lookup(&name), Op4::Getfh]);
    assert!(call_shape(&c).reduce.is_none());
}

#[test]
fn r8267_18_20_read_gets_a_write_chunk_of_its_count_first_read_only() {
    let sid = Stateid::default();
    for count in [1u32, 4096, 65536, 1 << 20] {
        let c = compound(&[seq(), Op4::Putfh(FH), Op4::Read(sid, 0, count)]);
        let s = call_shape(&c);
        assert_eq!(s.write_chunk, Some(count));
        assert!(matches!(s.result, ResultAt::Locate(_)));
        assert!(s.max_reply >= padded(count as usize));
        let p = plan(&c, &s, &t4k(), &Limits::default()).unwrap();
        assert_eq!(p.write_len, count);
        // The reduced reply is small: no Reply chunk.
        assert_eq!(p.reply_len, 0, "{count}");
    }
    // Two READs: one write chunk, for the first (the second comes inline).
    let c = compound(&[
        seq(),
        Op4::Putfh(FH),
        Op4::Read(sid, 0, 8192),
        Op4::Read(sid, 8192, 100),
    ]);
    assert_eq!(call_shape(&c).write_chunk, Some(8192));
}

#[test]
fn r8267_15_unpredictable_replies_get_a_reply_chunk_of_ca_maxresponsesize() {
    // EXCHANGE_ID: the first COMPOUND of a client, its reply unbounded.
    let c = compound(&[Op4::ExchangeId {
        verifier: [1; 8],
        owner: b"bench",
    }]);
    let s = call_shape(&c);
    assert_eq!(s.max_reply, V4_UNPREDICTABLE);
    let p = plan(&c, &s, &t4k(), &Limits::default()).unwrap();
    assert_eq!(p.reply_len as usize, V4_UNPREDICTABLE);
    // A GETATTR of a variable-size attribute is bounded by the session's
    // ca_maxresponsesize.
    let c = compound(&[seq(), Op4::Putfh(FH), Op4::Getattr(&[FATTR4_OWNER])]);
    let s = call_shape_with(&c, 200_000);
    assert_eq!(s.max_reply, 200_000);
    assert_eq!(
        plan(&c, &s, &t4k(), &Limits::default()).unwrap().reply_len,
        200_000
    );
    // GETATTR of size only: fixed size, inline.
    let c = compound(&[seq(), Op4::Putfh(FH), Op4::Getattr(&[FATTR4_SIZE])]);
    let s = call_shape_with(&c, 200_000);
    assert!(s.max_reply < 2048);
    assert_eq!(
        plan(&c, &s, &t4k(), &Limits::default()).unwrap().reply_len,
        0
    );
    // READDIR: bounded by its maxcount (32 KiB): a Reply chunk of about that.
    let c = compound(&[seq(), Op4::Putfh(FH), Op4::Readdir]);
    let s = call_shape_with(&c, 200_000);
    assert!(
        s.max_reply > 32 << 10 && s.max_reply < (32 << 10) + 2048,
        "{}",
        s.max_reply
    );
    // Session setup and teardown ops are all sized.
    let c = compound(&[Op4::CreateSession {
        clientid: 7,
        sequence: 1,
        slots: 8,
        max_msg: 1 << 20,
        back: Some(crate::nfs4::BackChannel {
            slots: 2,
            max_msg: 4068,
        }),
    }]);
    assert!(call_shape_with(&c, 200_000).max_reply < 2048);
    for ops in [
        vec![seq(), Op4::Putfh(FH), Op4::Commit],
        vec![seq(), Op4::Putfh(FH), Op4::Close(Stateid::default())],
        vec![seq(), Op4::Putfh(FH), Op4::Remove("x")],
        vec![seq(), Op4::Putrootfh, Op4::Lookup("a"), Op4::Getfh],
        vec![
            seq(),
            Op4::Putfh(FH),
            Op4::OpenCreate {
                clientid: 1,
                owner: b"o",
                name: "f",
            },
            Op4::Close(Stateid::CURRENT),
        ],
        vec![seq(), Op4::ReclaimComplete],
        vec![Op4::DestroySession([3; 16])],
        vec![Op4::DestroyClientid(4)],
    ] {
        let c = compound(&ops);
        assert!(call_shape_with(&c, 200_000).max_reply < 4096, "{ops:?}");
    }
}

fn reply(results: impl FnOnce(&mut XdrWriter) -> XdrResult<()>) -> Vec<u8> {
    let mut b = vec![0u8; 4096];
    let mut w = XdrWriter::new(&mut b);
    rpc::write_accepted(&mut w, 9, Accept::Success).unwrap();
    results(&mut w).unwrap();
    let n = w.position();
    b.truncate(n);
    b
}

fn seq_res(w: &mut XdrWriter) -> XdrResult<()> {
    w.u32(53)?;
    w.u32(0)?;
    w.opaque_fixed(&[1; 16])?;
    for v in [1, 0, 3, 3, 0] {
        w.u32(v)?;
    }
    Ok(())
}

#[test]
fn locate_finds_the_first_read_class_result_after_sequence_putfh_getattr() {
    // SEQUENCE, PUTFH, GETATTR(size), READ: eof, then the data's length word.
    let r = reply(|w| {
        w.u32(0)?;
        w.opaque_var(b"")?;
        w.u32(4)?;
        seq_res(w)?;
        w.u32(22)?;
        w.u32(0)?;
        w.u32(9)?;
        w.u32(0)?;
        w.u32(1)?;
        w.u32(1 << FATTR4_SIZE)?;
        w.opaque_var(&4096u64.to_be_bytes())?;
        w.u32(25)?;
        w.u32(0)?;
        w.bool(false)?;
        w.u32(4096)
    });
    let at = locate(&r).unwrap();
    assert_eq!(at, r.len() - 4);
    // READ failed: the COMPOUND stopped, no item.
    let r = reply(|w| {
        w.u32(10025)?;
        w.opaque_var(b"")?;
        w.u32(3)?;
        seq_res(w)?;
        w.u32(22)?;
        w.u32(0)?;
        w.u32(25)?;
        w.u32(10025)
    });
    assert_eq!(locate(&r), None);
    // Garbage never panics.
    for n in 0..r.len() {
        let _ = locate(&r[..n]);
    }
    assert_eq!(locate(&[0xff; 64]), None);
}

#[test]
fn locate_walks_past_open_to_the_read_of_an_open_read_close_compound() {
    // SEQUENCE, PUTFH, OPEN (no delegation / NONE_EXT), READ, CLOSE (bench md's read).
    for deleg in [&[0u32][..], &[3, 7, 0]] {
        let r = reply(|w| {
            w.u32(0)?;
            w.opaque_var(b"")?;
            w.u32(5)?;
            seq_res(w)?;
            w.u32(22)?;
            w.u32(0)?;
            w.u32(18)?;
            w.u32(0)?;
            w.opaque_fixed(&[5; 16])?; // stateid
            w.opaque_fixed(&[0; 20])?; // change_info4
            w.u32(0)?; // rflags
            w.u32(1)?;
            w.u32(0)?; // attrset
            for v in deleg {
                w.u32(*v)?;
            }
            w.u32(25)?;
            w.u32(0)?;
            w.bool(true)?;
            w.u32(3901)?;
            w.u32(4)?;
            w.u32(0)?;
            w.opaque_fixed(&[5; 16])
        });
        assert_eq!(locate(&r), Some(r.len() - 4 - 8 - 16), "{deleg:?}");
    }
}

#[test]
fn undecodable_compounds_are_unbounded_and_never_panic() {
    let sid = Stateid::default();
    let c = compound(&[seq(), Op4::Putfh(FH), Op4::Write(sid, 0, &[7u8; 5000])]);
    for n in (0..c.len()).step_by(7) {
        let s = call_shape_with(&c[..n], 100_000);
        assert!(s.max_reply >= REPLY_BASE);
    }
    // Cut inside the WRITE data: not reducible (the data is not all there), unbounded.
    let s = call_shape_with(&c[..c.len() - 100], 100_000);
    assert!(s.reduce.is_none());
    assert_eq!(s.max_reply, 100_000);
}
