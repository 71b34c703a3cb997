//! NFSv4.1 over TCP against an in-process gateway: a v4 WRITE must invalidate what
//! the reactor's read cache learned from v3 READs of the same file (the worker scans
//! the COMPOUND for the files it changes).

mod common;

use common::v4::{v3_file, v3_mount, v3_read, v3_tcp};
use common::*;
use engine::rpc;
use engine::xdr::XdrReader;
use nfs_wire::nfs3::{FILE_SYNC, NFSPROC3_WRITE};
use nfs_wire::nfs4::{OP_CREATE_SESSION, OP_EXCHANGE_ID, OP_READ};
use nfs_wire::v4call::{compound_call, Channel, Ops};
use nfs_wire::v4reply::{self, Res};
use nfs_wire::{v3call, v3more};
use std::net::TcpStream;

/// A COMPOUND (minor 1) of `ops`; returns (status, results).
fn compound(s: &mut TcpStream, xid: u32, ops: &Ops) -> (u32, Vec<u8>) {
    let reply = tcp_call(s, &compound_call(xid, &cred(), ops)).unwrap();
    let (rx, st, at) = rpc::decode_reply(&reply).unwrap();
    assert_eq!(rx, xid);
    assert_eq!(st, rpc::ReplyStatus::Accepted(rpc::Accept::Success));
    let res = Res::parse(&reply[at..]).unwrap();
    (res.status, res.body)
}

#[test]
fn v4_write_invalidates_v3_read_cache() {
    let gw = Gw::start(&GwOpts {
        rdma: false,
        ..Default::default()
    });
    let mut s = gw.connect_tcp();
    // v3: MNT, CREATE f, WRITE "aaaa", READ twice (the reactor caches the block).
    let root = v3_mount(&mut s);
    let fh = v3_file(&mut s, &root, b"f", b"aaaa");
    assert_eq!(v3_read(&mut s, &fh, 0, 4), b"aaaa");
    assert_eq!(v3_read(&mut s, &fh, 0, 4), b"aaaa");

    // v4: EXCHANGE_ID, CREATE_SESSION, then SEQUENCE + PUTFH + WRITE "bbbb".
    let sid = v4_session(&mut s, 10, b"nfs4-tcp-test", 4);
    let ops = Ops::new()
        .sequence(sid, 1)
        .putfh(&fh)
        .write(&[0; 16], 0, b"bbbb");
    let (st, _) = compound(&mut s, 12, &ops);
    assert_eq!(st, 0, "SEQUENCE+PUTFH+WRITE");
    assert_eq!(
        v3_read(&mut s, &fh, 0, 4),
        b"bbbb",
        "v3 READ sees the v4 WRITE"
    );
}

fn v3_setup(s: &mut TcpStream, name: &[u8], data: &[u8]) -> Vec<u8> {
    let root = v3_mount(s);
    v3_file(s, &root, name, data)
}

fn v3_write(s: &mut TcpStream, xid: u32, fh: &[u8], data: &[u8]) {
    let args = v3more::write_args(fh, 0, FILE_SYNC, data);
    let rep = v3_tcp(s, xid, NFS, NFSPROC3_WRITE, &args);
    assert_eq!(v3call::status(&rep), 0, "WRITE ok");
}

/// EXCHANGE_ID + CREATE_SESSION (`slots` fore slots, no callback security): the
/// session id.
fn v4_session(s: &mut TcpStream, xid: u32, owner: &[u8], slots: u32) -> [u8; 16] {
    let (st, res) = compound(s, xid, &Ops::new().exchange_id([1; 8], owner));
    assert_eq!(st, 0, "EXCHANGE_ID");
    let mut r = XdrReader::new(&res);
    assert_eq!(v4reply::expect_op(&mut r, OP_EXCHANGE_ID), Ok(0));
    let (clientid, seq, _) = v4reply::exchange_id_ok(&mut r).unwrap();
    let fore = Channel {
        headerpad: 0,
        max_request: 1 << 20,
        max_response: 1 << 20,
        max_response_cached: 4096,
        max_ops: 16,
        max_requests: slots,
    };
    let back = Channel {
        headerpad: 0,
        max_request: 4096,
        max_response: 4096,
        max_response_cached: 0,
        max_ops: 2,
        max_requests: 2,
    };
    let ops = Ops::new().create_session(clientid, seq, 0, &fore, &back, 0);
    let (st, res) = compound(s, xid + 1, &ops);
    assert_eq!(st, 0, "CREATE_SESSION");
    let mut r = XdrReader::new(&res);
    assert_eq!(v4reply::expect_op(&mut r, OP_CREATE_SESSION), Ok(0));
    v4reply::create_session_ok(&mut r).unwrap().0
}

/// SEQUENCE (slot 0, no cachethis) + PUTFH + READ (anonymous stateid) of 4 bytes: the
/// whole COMPOUND4res results and the data.
fn v4_read(s: &mut TcpStream, xid: u32, sid: &[u8; 16], seq: u32, fh: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let ops = Ops::new()
        .sequence(*sid, seq)
        .putfh(fh)
        .read(&[0; 16], 0, 4);
    let (st, res) = compound(s, xid, &ops);
    assert_eq!(st, 0, "SEQUENCE+PUTFH+READ seq {seq}");
    let mut r = XdrReader::new(&res);
    r.skip(8 + 16 + 20 + 8).unwrap();
    assert_eq!((r.u32().unwrap(), r.u32().unwrap()), (OP_READ, 0));
    r.bool().unwrap();
    let data = r.opaque_var(4).unwrap().to_vec();
    (res, data)
}

/// The reactor answers `SEQUENCE, PUTFH, READ` from its cache once a worker filled it
/// (nfs4::fast); an NFSv3 WRITE must make it serve the new data, and the slot
/// bookkeeping must stay the worker's (a retransmission gets the same bytes, the next
/// seqid is accepted).
#[test]
fn v4_fast_path_sees_v3_write_and_keeps_slot_rules() {
    let gw = Gw::start(&GwOpts {
        rdma: false,
        ..Default::default()
    });
    let mut s = gw.connect_tcp();
    let fh = v3_setup(&mut s, b"g", b"aaaa");
    let sid = v4_session(&mut s, 110, b"nfs4-fast-test", 1);
    let (_, d1) = v4_read(&mut s, 120, &sid, 1, &fh);
    assert_eq!(d1, b"aaaa");
    // Warm: answered by the reactor; its retransmission gets the same bytes.
    let fast = gateway::nfs4::fast::answered;
    let before = fast();
    let (r2, d2) = v4_read(&mut s, 121, &sid, 2, &fh);
    assert_eq!(d2, b"aaaa");
    assert_eq!(fast(), before + 1, "answered on the reactor");
    let (r2b, _) = v4_read(&mut s, 122, &sid, 2, &fh);
    assert_eq!(r2, r2b, "retransmission replays the stored reply");
    assert_eq!(fast(), before + 1, "a retransmission goes to a worker");
    v3_write(&mut s, 123, &fh, b"cccc");
    for (i, seq) in (3..6).enumerate() {
        let (_, d) = v4_read(&mut s, 130 + i as u32, &sid, seq, &fh);
        assert_eq!(d, b"cccc", "v4 READ seq {seq} after the v3 WRITE");
    }
    // seq 3 refilled the cache through a worker; 4 and 5 came from the reactor.
    assert_eq!(fast(), before + 3, "the new data served by the reactor");
}
