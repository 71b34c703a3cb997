//! NFSv4.1 for the in-process tests, on nfs-wire's encoder: COMPOUND calls of
//! pre-encoded operations, EXCHANGE_ID + CREATE_SESSION + SEQUENCE, a session over a
//! raw RPC-over-RDMA connection (with any chunk lists), and NFSv3-over-TCP setup of
//! files and symlinks.

use super::*;
use engine::rpcrdma::wire::{ReadSegment, Segment};

use nfs_wire::nfs3::{
    FILE_SYNC, NFSPROC3_CREATE, NFSPROC3_LOOKUP, NFSPROC3_READ, NFSPROC3_READLINK,
    NFSPROC3_SYMLINK, NFSPROC3_WRITE,
};
#[allow(unused_imports)]
pub use nfs_wire::nfs4::*;
use nfs_wire::v4call::{Channel, Ops};
use nfs_wire::{mount3, rpccall, v3call, v3more};

/// XDR-encodes with a writer (a test's own arguments).
pub fn enc(f: impl FnOnce(&mut XdrWriter)) -> Vec<u8> {
    let mut b = vec![0u8; 16384];
    let mut w = XdrWriter::new(&mut b);
    f(&mut w);
    let n = w.position();
    b.truncate(n);
    b
}

/// An RPC call of `prog`/`vers`/`proc_` with `args`.
pub fn rpc_call_v(xid: u32, prog: u32, vers: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
    rpccall::call(xid, prog, vers, proc_, &cred(), args)
}

/// A COMPOUND call (minor 1, empty tag) of `nops` encoded operations.
pub fn compound_call(xid: u32, nops: u32, ops: &[u8]) -> Vec<u8> {
    nfs_wire::v4call::compound_call(xid, &cred(), &Ops::new().encoded(nops, ops))
}

pub fn exchange_id_op(owner: &[u8]) -> Vec<u8> {
    Ops::new().exchange_id([1; 8], owner).bytes().to_vec()
}

/// CREATE_SESSION: 4 fore slots of 1 MiB, a 2-slot back channel, no callback
/// security parameters (so no CB_NULL probe interleaves with the test's replies).
pub fn create_session_op(clientid: u64, seq: u32) -> Vec<u8> {
    let fore = Channel {
        headerpad: 0,
        max_request: 1 << 20,
        max_response: 1 << 20,
        max_response_cached: 4096,
        max_ops: 16,
        max_requests: 4,
    };
    let back = Channel {
        headerpad: 0,
        max_request: 4096,
        max_response: 4096,
        max_response_cached: 0,
        max_ops: 2,
        max_requests: 2,
    };
    let o = Ops::new().create_session(clientid, seq, 0, &fore, &back, 0);
    o.bytes().to_vec()
}

pub fn sequence_op(sid: &[u8], seqid: u32) -> Vec<u8> {
    let sid: [u8; 16] = sid.try_into().expect("a 16-byte session id");
    Ops::new().sequence(sid, seqid).bytes().to_vec()
}

pub fn putfh_op(fh: &[u8]) -> Vec<u8> {
    Ops::new().putfh(fh).bytes().to_vec()
}

/// READ with the anonymous stateid.
pub fn read_op(offset: u64, count: u32) -> Vec<u8> {
    Ops::new().read(&[0; 16], offset, count).bytes().to_vec()
}

/// A decoded RPC-over-RDMA reply: header, echoed chunk lists, the RPC reply (from
/// the Send, or gathered from the Reply chunk).
pub struct RdmaReply {
    pub fixed: Fixed,
    pub echo: Chunks,
    pub rpc: Vec<u8>,
}

impl RdmaReply {
    /// The COMPOUND4res after the RPC header: (status, results after the count).
    pub fn compound(&self) -> (u32, u32, Vec<u8>) {
        let (_, st, at) = rpc::decode_reply(&self.rpc).expect("an RPC reply");
        assert_eq!(st, rpc::ReplyStatus::Accepted(rpc::Accept::Success));
        let mut r = XdrReader::new(&self.rpc[at..]);
        let status = r.u32().unwrap();
        r.opaque_var(1024).unwrap();
        let n = r.u32().unwrap();
        (status, n, r.rest().to_vec())
    }
}

/// Scratch memory handed to the gateway for chunks: `(address, len)` of a piece of
/// scratch area `k` at `off`, as a one-segment list.
pub fn seg(raw: &mut Raw, k: usize, off: usize, len: u32) -> Segment {
    let (addr, _) = raw.scratch(k);
    Segment {
        handle: raw.mr.rkey,
        length: len,
        offset: addr + off as u64,
    }
}

/// `n` segments of `len` bytes, back to back in scratch area `k` from `off`.
pub fn segs(raw: &mut Raw, k: usize, off: usize, n: usize, len: u32) -> Vec<Segment> {
    (0..n)
        .map(|i| seg(raw, k, off + i * len as usize, len))
        .collect()
}

/// Bytes the gateway wrote at `addr` (in some scratch area).
pub fn remote(raw: &mut Raw, addr: u64, len: usize) -> Vec<u8> {
    for k in 0..NSCRATCH {
        let (base, s) = raw.scratch(k);
        if addr >= base && addr + len as u64 <= base + SCRATCH as u64 {
            let at = (addr - base) as usize;
            return s[at..at + len].to_vec();
        }
    }
    panic!("address outside the scratch areas");
}

/// The bytes the echoed segments say were written, in order.
pub fn chunk_data(raw: &mut Raw, echo: &[Segment]) -> Vec<u8> {
    echo.iter()
        .flat_map(|s| remote(raw, s.offset, s.length as usize))
        .collect()
}

/// Places `data` into scratch area `k` from `off` and returns read segments of at
/// most `piece` bytes at `position`.
pub fn read_chunk(
    raw: &mut Raw,
    k: usize,
    off: usize,
    data: &[u8],
    position: u32,
    piece: usize,
) -> Vec<ReadSegment> {
    let rkey = raw.mr.rkey;
    let (addr, s) = raw.scratch(k);
    s[off..off + data.len()].copy_from_slice(data);
    data.chunks(piece)
        .enumerate()
        .map(|(i, c)| ReadSegment {
            position,
            seg: Segment {
                handle: rkey,
                length: c.len() as u32,
                offset: addr + (off + i * piece) as u64,
            },
        })
        .collect()
}

/// Sends one message and decodes the reply (waiting up to 10 s).
pub fn exchange(raw: &mut Raw, m: &[u8]) -> RdmaReply {
    assert!(raw.send(m), "send");
    let got = raw.recv(Duration::from_secs(10)).expect("a reply");
    let mut echo = Chunks::with_limits(&Limits::default());
    let Header::Msg { fixed, payload_at } =
        wire::decode(&got, &Limits::default(), &mut echo).expect("reply header")
    else {
        panic!("RDMA_ERROR instead of a reply");
    };
    let rpc = if fixed.proc_ == wire::RDMA_NOMSG {
        let rc = echo
            .reply_chunk()
            .expect("NOMSG reply uses the Reply chunk")
            .to_vec();
        chunk_data(raw, &rc)
    } else {
        got[payload_at..].to_vec()
    };
    RdmaReply { fixed, echo, rpc }
}

/// An NFSv4.1 session over a raw RPC-over-RDMA connection.
pub struct V4 {
    pub raw: Raw,
    pub sid: Vec<u8>,
    pub seq: u32,
    pub xid: u32,
}

impl V4 {
    /// EXCHANGE_ID (offering a Reply chunk, as the Linux client does on its first
    /// COMPOUND) and CREATE_SESSION on a fresh connection.
    pub fn connect(gw: &Gw, owner: &[u8]) -> V4 {
        let mut raw = Raw::connect(gw.rdma);
        let mut ch = Chunks::default();
        let rc = segs(&mut raw, 2, 0, 2, 4096);
        ch.set_reply_chunk(&rc);
        let call = compound_call(100, 1, &exchange_id_op(owner));
        let rep = exchange(&mut raw, &[header(100, wire::RDMA_MSG, &ch), call].concat());
        let (st, _, res) = rep.compound();
        assert_eq!(st, 0, "EXCHANGE_ID");
        let mut r = XdrReader::new(&res);
        r.skip(8).unwrap();
        let clientid = r.u64().unwrap();
        let seq = r.u32().unwrap();
        let call = compound_call(101, 1, &create_session_op(clientid, seq));
        let rep = exchange(&mut raw, &msg(101, &Chunks::default(), &call));
        let (st, _, res) = rep.compound();
        assert_eq!(st, 0, "CREATE_SESSION");
        let mut r = XdrReader::new(&res);
        r.skip(8).unwrap();
        let sid = r.opaque_fixed(16).unwrap().to_vec();
        V4 {
            raw,
            sid,
            seq: 1,
            xid: 200,
        }
    }

    /// The next SEQUENCE op (slot 0).
    pub fn sequence(&mut self) -> Vec<u8> {
        let s = sequence_op(&self.sid, self.seq);
        self.seq += 1;
        s
    }

    /// A COMPOUND of SEQUENCE + `ops` (`nops` of them) and its xid.
    pub fn compound(&mut self, nops: u32, ops: &[u8]) -> (u32, Vec<u8>) {
        let mut all = self.sequence();
        all.extend_from_slice(ops);
        self.xid += 1;
        (self.xid, compound_call(self.xid, nops + 1, &all))
    }

    /// Sends `rpc` as a Short call with `chunks`.
    pub fn short(&mut self, xid: u32, chunks: &Chunks, rpc: &[u8]) -> RdmaReply {
        exchange(&mut self.raw, &msg(xid, chunks, rpc))
    }
}

/// NFSv3 over TCP: a call that must succeed; the procedure results.
pub fn v3_tcp(s: &mut TcpStream, xid: u32, prog: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
    let reply = tcp_call(s, &v3more::call(xid, prog, proc_, &cred(), args)).unwrap();
    let (rx, st, at) = rpc::decode_reply(&reply).unwrap();
    assert_eq!(rx, xid);
    assert_eq!(st, rpc::ReplyStatus::Accepted(rpc::Accept::Success));
    reply[at..].to_vec()
}

/// MNT "/" over TCP: the root handle.
pub fn v3_mount(s: &mut TcpStream) -> Vec<u8> {
    let rep = v3_tcp(s, 1, MOUNT, mount3::MOUNTPROC3_MNT, &v3more::mnt_args(b"/"));
    v3call::parse_mount(&rep).expect("MNT")
}

/// CREATE `name` in `dir` and WRITE `data` (FILE_SYNC); its handle.
pub fn v3_file(s: &mut TcpStream, dir: &[u8], name: &[u8], data: &[u8]) -> Vec<u8> {
    let args = v3more::create_args(dir, name);
    let fh = v3call::parse_create(&v3_tcp(s, 2, NFS, NFSPROC3_CREATE, &args)).expect("CREATE");
    for (i, part) in data.chunks(32768).enumerate() {
        let args = v3more::write_args(&fh, i as u64 * 32768, FILE_SYNC, part);
        let rep = v3_tcp(s, 3 + i as u32, NFS, NFSPROC3_WRITE, &args);
        assert_eq!(v3call::status(&rep), 0, "WRITE ok");
    }
    fh
}

/// SYMLINK `name` → `target` in `dir`; its handle (SYMLINK3resok has CREATE3resok's
/// shape, RFC 1813 §3.3.10).
pub fn v3_symlink(s: &mut TcpStream, dir: &[u8], name: &[u8], target: &[u8]) -> Vec<u8> {
    let args = v3more::symlink_args(dir, name, target);
    v3call::parse_create(&v3_tcp(s, 40, NFS, NFSPROC3_SYMLINK, &args)).expect("SYMLINK")
}

/// LOOKUP `name` in `dir`: its handle, or `None` (an NFS error).
pub fn v3_lookup(s: &mut TcpStream, dir: &[u8], name: &[u8]) -> Option<Vec<u8>> {
    let rep = v3_tcp(s, 41, NFS, NFSPROC3_LOOKUP, &v3more::dirop_args(dir, name));
    v3call::parse_lookup(&rep).ok().flatten()
}

/// READLINK over TCP: the target.
pub fn v3_readlink(s: &mut TcpStream, fh: &[u8]) -> Vec<u8> {
    let rep = v3_tcp(s, 42, NFS, NFSPROC3_READLINK, &v3more::fh_args(fh));
    v3more::parse_readlink(&rep).expect("READLINK ok")
}

/// READ over TCP: the data.
pub fn v3_read(s: &mut TcpStream, fh: &[u8], offset: u64, count: u32) -> Vec<u8> {
    let rep = v3_tcp(
        s,
        43,
        NFS,
        NFSPROC3_READ,
        &v3more::read_args(fh, offset, count),
    );
    v3call::parse_read(&rep).expect("READ ok").to_vec()
}
