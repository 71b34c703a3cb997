//! NFSv4.1 over TCP against an in-process gateway: a v4 WRITE must invalidate what
//! the reactor's read cache learned from v3 READs of the same file (the worker scans
//! the COMPOUND for the files it changes).

mod common;

use common::*;
use engine::rpc;
use engine::xdr::{XdrReader, XdrWriter};
use std::net::TcpStream;

fn call_v(s: &mut TcpStream, xid: u32, prog: u32, vers: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 512];
    let mut w = XdrWriter::new(&mut b);
    rpc::write_call(&mut w, xid, prog, vers, proc_, &cred()).unwrap();
    let n = w.position();
    b.truncate(n);
    b.extend_from_slice(args);
    let reply = tcp_call(s, &b).unwrap();
    let (rx, st, at) = rpc::decode_reply(&reply).unwrap();
    assert_eq!(rx, xid);
    assert_eq!(st, rpc::ReplyStatus::Accepted(rpc::Accept::Success));
    reply[at..].to_vec()
}

fn enc(f: impl FnOnce(&mut XdrWriter)) -> Vec<u8> {
    let mut b = vec![0u8; 8192];
    let mut w = XdrWriter::new(&mut b);
    f(&mut w);
    let n = w.position();
    b.truncate(n);
    b
}

fn v3_read(s: &mut TcpStream, xid: u32, fh: &[u8]) -> Vec<u8> {
    let rep = call_v(
        s,
        xid,
        NFS,
        3,
        6,
        &enc(|w| {
            w.opaque_var(fh).unwrap();
            w.u64(0).unwrap();
            w.u32(4).unwrap();
        }),
    );
    let mut r = XdrReader::new(&rep);
    assert_eq!(r.u32().unwrap(), 0, "READ ok");
    if r.bool().unwrap() {
        r.skip(84).unwrap();
    }
    r.u32().unwrap();
    r.bool().unwrap();
    r.opaque_var(4).unwrap().to_vec()
}

/// COMPOUND (minor 1) with `ops` already encoded; returns (status, results).
fn compound(s: &mut TcpStream, xid: u32, nops: u32, ops: &[u8]) -> (u32, Vec<u8>) {
    let mut a = enc(|w| {
        w.opaque_var(b"").unwrap();
        w.u32(1).unwrap();
        w.u32(nops).unwrap();
    });
    a.extend_from_slice(ops);
    let rep = call_v(s, xid, NFS, 4, 1, &a);
    let mut r = XdrReader::new(&rep);
    let st = r.u32().unwrap();
    r.opaque_var(100).unwrap();
    r.u32().unwrap();
    (st, r.rest().to_vec())
}

#[test]
fn v4_write_invalidates_v3_read_cache() {
    let gw = Gw::start(&GwOpts {
        rdma: false,
        ..Default::default()
    });
    let mut s = gw.connect_tcp();
    // v3: MNT, CREATE f, WRITE "aaaa", READ twice (the reactor caches the block).
    let rep = call_v(&mut s, 1, MOUNT, 3, 1, &enc(|w| w.string(b"/").unwrap()));
    let mut r = XdrReader::new(&rep);
    assert_eq!(r.u32().unwrap(), 0);
    let root = r.opaque_var(64).unwrap().to_vec();
    let rep = call_v(
        &mut s,
        2,
        NFS,
        3,
        8,
        &enc(|w| {
            w.opaque_var(&root).unwrap();
            w.string(b"f").unwrap();
            w.u32(0).unwrap();
            for _ in 0..4 {
                w.bool(false).unwrap();
            }
            w.u32(0).unwrap();
            w.u32(0).unwrap();
        }),
    );
    let mut r = XdrReader::new(&rep);
    assert_eq!(r.u32().unwrap(), 0, "CREATE ok");
    assert!(r.bool().unwrap());
    let fh = r.opaque_var(64).unwrap().to_vec();
    let rep = call_v(
        &mut s,
        3,
        NFS,
        3,
        7,
        &enc(|w| {
            w.opaque_var(&fh).unwrap();
            w.u64(0).unwrap();
            w.u32(4).unwrap();
            w.u32(2).unwrap();
            w.opaque_var(b"aaaa").unwrap();
        }),
    );
    assert_eq!(XdrReader::new(&rep).u32().unwrap(), 0, "WRITE ok");
    assert_eq!(v3_read(&mut s, 4, &fh), b"aaaa");
    assert_eq!(v3_read(&mut s, 5, &fh), b"aaaa");

    // v4: EXCHANGE_ID, CREATE_SESSION, then SEQUENCE + PUTFH + WRITE "bbbb".
    let (st, res) = compound(
        &mut s,
        10,
        1,
        &enc(|w| {
            w.u32(42).unwrap();
            w.opaque_fixed(&[1; 8]).unwrap();
            w.opaque_var(b"nfs4-tcp-test").unwrap();
            w.u32(0).unwrap();
            w.u32(0).unwrap();
            w.u32(0).unwrap();
        }),
    );
    assert_eq!(st, 0, "EXCHANGE_ID");
    let mut r = XdrReader::new(&res);
    r.skip(8).unwrap();
    let clientid = r.u64().unwrap();
    let seq = r.u32().unwrap();
    let (st, res) = compound(
        &mut s,
        11,
        1,
        &enc(|w| {
            w.u32(43).unwrap();
            w.u64(clientid).unwrap();
            w.u32(seq).unwrap();
            w.u32(0).unwrap();
            for v in [0, 1 << 20, 1 << 20, 4096, 16, 4, 0] {
                w.u32(v).unwrap();
            }
            for v in [0, 4096, 4096, 0, 2, 2, 0] {
                w.u32(v).unwrap();
            }
            w.u32(0x4000_0000).unwrap();
            w.u32(0).unwrap();
        }),
    );
    assert_eq!(st, 0, "CREATE_SESSION");
    let mut r = XdrReader::new(&res);
    r.skip(8).unwrap();
    let sid = r.opaque_fixed(16).unwrap().to_vec();
    let (st, _) = compound(
        &mut s,
        12,
        3,
        &enc(|w| {
            w.u32(53).unwrap();
            w.opaque_fixed(&sid).unwrap();
            for v in [1, 0, 0, 0] {
                w.u32(v).unwrap();
            }
            w.u32(22).unwrap();
            w.opaque_var(&fh).unwrap();
            w.u32(38).unwrap();
            w.opaque_fixed(&[0; 16]).unwrap();
            w.u64(0).unwrap();
            w.u32(2).unwrap();
            w.opaque_var(b"bbbb").unwrap();
        }),
    );
    assert_eq!(st, 0, "SEQUENCE+PUTFH+WRITE");
    assert_eq!(
        v3_read(&mut s, 20, &fh),
        b"bbbb",
        "v3 READ sees the v4 WRITE"
    );
}

fn v3_setup(s: &mut TcpStream, name: &[u8], data: &[u8]) -> Vec<u8> {
    let rep = call_v(s, 101, MOUNT, 3, 1, &enc(|w| w.string(b"/").unwrap()));
    let mut r = XdrReader::new(&rep);
    assert_eq!(r.u32().unwrap(), 0);
    let root = r.opaque_var(64).unwrap().to_vec();
    let rep = call_v(
        s,
        102,
        NFS,
        3,
        8,
        &enc(|w| {
            w.opaque_var(&root).unwrap();
            w.string(name).unwrap();
            w.u32(0).unwrap();
            for _ in 0..4 {
                w.bool(false).unwrap();
            }
            w.u32(0).unwrap();
            w.u32(0).unwrap();
        }),
    );
    let mut r = XdrReader::new(&rep);
    assert_eq!(r.u32().unwrap(), 0, "CREATE ok");
    assert!(r.bool().unwrap());
    let fh = r.opaque_var(64).unwrap().to_vec();
    v3_write(s, 103, &fh, data);
    fh
}

fn v3_write(s: &mut TcpStream, xid: u32, fh: &[u8], data: &[u8]) {
    let rep = call_v(
        s,
        xid,
        NFS,
        3,
        7,
        &enc(|w| {
            w.opaque_var(fh).unwrap();
            w.u64(0).unwrap();
            w.u32(data.len() as u32).unwrap();
            w.u32(2).unwrap();
            w.opaque_var(data).unwrap();
        }),
    );
    assert_eq!(XdrReader::new(&rep).u32().unwrap(), 0, "WRITE ok");
}

/// EXCHANGE_ID + CREATE_SESSION (one slot): the session id.
fn v4_session(s: &mut TcpStream, owner: &[u8]) -> Vec<u8> {
    let (st, res) = compound(
        s,
        110,
        1,
        &enc(|w| {
            w.u32(42).unwrap();
            w.opaque_fixed(&[1; 8]).unwrap();
            w.opaque_var(owner).unwrap();
            w.u32(0).unwrap();
            w.u32(0).unwrap();
            w.u32(0).unwrap();
        }),
    );
    assert_eq!(st, 0, "EXCHANGE_ID");
    let mut r = XdrReader::new(&res);
    r.skip(8).unwrap();
    let clientid = r.u64().unwrap();
    let seq = r.u32().unwrap();
    let (st, res) = compound(
        s,
        111,
        1,
        &enc(|w| {
            w.u32(43).unwrap();
            w.u64(clientid).unwrap();
            w.u32(seq).unwrap();
            w.u32(0).unwrap();
            for v in [0, 1 << 20, 1 << 20, 4096, 16, 1, 0] {
                w.u32(v).unwrap();
            }
            for v in [0, 4096, 4096, 0, 2, 2, 0] {
                w.u32(v).unwrap();
            }
            w.u32(0x4000_0000).unwrap();
            w.u32(0).unwrap();
        }),
    );
    assert_eq!(st, 0, "CREATE_SESSION");
    let mut r = XdrReader::new(&res);
    r.skip(8).unwrap();
    r.opaque_fixed(16).unwrap().to_vec()
}

/// SEQUENCE (slot 0, no cachethis) + PUTFH + READ (anonymous stateid) of 4 bytes: the
/// whole COMPOUND4res results and the data.
fn v4_read(s: &mut TcpStream, xid: u32, sid: &[u8], seq: u32, fh: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let (st, res) = compound(
        s,
        xid,
        3,
        &enc(|w| {
            w.u32(53).unwrap();
            w.opaque_fixed(sid).unwrap();
            for v in [seq, 0, 0, 0] {
                w.u32(v).unwrap();
            }
            w.u32(22).unwrap();
            w.opaque_var(fh).unwrap();
            w.u32(25).unwrap();
            w.opaque_fixed(&[0; 16]).unwrap();
            w.u64(0).unwrap();
            w.u32(4).unwrap();
        }),
    );
    assert_eq!(st, 0, "SEQUENCE+PUTFH+READ seq {seq}");
    let mut r = XdrReader::new(&res);
    r.skip(8 + 16 + 20 + 8).unwrap();
    assert_eq!((r.u32().unwrap(), r.u32().unwrap()), (25, 0));
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
    let sid = v4_session(&mut s, b"nfs4-fast-test");
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
