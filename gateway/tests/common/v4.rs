//! NFSv4.1 encodings for the in-process tests: COMPOUND calls, EXCHANGE_ID +
//! CREATE_SESSION + SEQUENCE, a session over a raw RPC-over-RDMA connection (with any
//! chunk lists), and NFSv3-over-TCP setup of files and symlinks.

use super::*;
use engine::rpcrdma::wire::{ReadSegment, Segment};

pub const OP_CREATE: u32 = 6;
pub const OP_GETATTR: u32 = 9;
pub const OP_LOOKUP: u32 = 15;
pub const OP_PUTFH: u32 = 22;
pub const OP_READ: u32 = 25;
pub const OP_READLINK: u32 = 27;
pub const OP_WRITE: u32 = 38;
pub const OP_EXCHANGE_ID: u32 = 42;
pub const OP_CREATE_SESSION: u32 = 43;
pub const OP_SEQUENCE: u32 = 53;

/// XDR-encodes with a writer.
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
    let mut b = vec![0u8; 512];
    let mut w = XdrWriter::new(&mut b);
    rpc::write_call(&mut w, xid, prog, vers, proc_, &cred()).unwrap();
    let n = w.position();
    b.truncate(n);
    b.extend_from_slice(args);
    b
}

/// A COMPOUND call (minor 1, empty tag) of `nops` encoded operations.
pub fn compound_call(xid: u32, nops: u32, ops: &[u8]) -> Vec<u8> {
    let mut a = enc(|w| {
        w.opaque_var(b"").unwrap();
        w.u32(1).unwrap();
        w.u32(nops).unwrap();
    });
    a.extend_from_slice(ops);
    rpc_call_v(xid, NFS, 4, 1, &a)
}

pub fn exchange_id_op(owner: &[u8]) -> Vec<u8> {
    enc(|w| {
        w.u32(OP_EXCHANGE_ID).unwrap();
        w.opaque_fixed(&[1; 8]).unwrap();
        w.opaque_var(owner).unwrap();
        w.u32(0).unwrap();
        w.u32(0).unwrap();
        w.u32(0).unwrap();
    })
}

pub fn create_session_op(clientid: u64, seq: u32) -> Vec<u8> {
    enc(|w| {
        w.u32(OP_CREATE_SESSION).unwrap();
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
    })
}

pub fn sequence_op(sid: &[u8], seqid: u32) -> Vec<u8> {
    enc(|w| {
        w.u32(OP_SEQUENCE).unwrap();
        w.opaque_fixed(sid).unwrap();
        for v in [seqid, 0, 0, 0] {
            w.u32(v).unwrap();
        }
    })
}

pub fn putfh_op(fh: &[u8]) -> Vec<u8> {
    enc(|w| {
        w.u32(OP_PUTFH).unwrap();
        w.opaque_var(fh).unwrap();
    })
}

/// READ with the anonymous stateid.
pub fn read_op(offset: u64, count: u32) -> Vec<u8> {
    enc(|w| {
        w.u32(OP_READ).unwrap();
        w.opaque_fixed(&[0; 16]).unwrap();
        w.u64(offset).unwrap();
        w.u32(count).unwrap();
    })
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
    let reply = tcp_call(s, &rpc_call_v(xid, prog, 3, proc_, args)).unwrap();
    let (rx, st, at) = rpc::decode_reply(&reply).unwrap();
    assert_eq!(rx, xid);
    assert_eq!(st, rpc::ReplyStatus::Accepted(rpc::Accept::Success));
    reply[at..].to_vec()
}

/// MNT "/" over TCP: the root handle.
pub fn v3_mount(s: &mut TcpStream) -> Vec<u8> {
    let rep = v3_tcp(s, 1, MOUNT, 1, &enc(|w| w.string(b"/").unwrap()));
    let mut r = XdrReader::new(&rep);
    assert_eq!(r.u32().unwrap(), 0);
    r.opaque_var(64).unwrap().to_vec()
}

/// sattr3 setting nothing.
fn no_sattr(w: &mut XdrWriter) {
    for _ in 0..4 {
        w.bool(false).unwrap();
    }
    w.u32(0).unwrap();
    w.u32(0).unwrap();
}

/// A post_op_fh3 / handle after a status and optional handle arm.
fn created_fh(rep: &[u8], what: &str) -> Vec<u8> {
    let mut r = XdrReader::new(rep);
    assert_eq!(r.u32().unwrap(), 0, "{what} ok");
    assert!(r.bool().unwrap());
    r.opaque_var(64).unwrap().to_vec()
}

/// CREATE `name` in `dir` and WRITE `data` (FILE_SYNC); its handle.
pub fn v3_file(s: &mut TcpStream, dir: &[u8], name: &[u8], data: &[u8]) -> Vec<u8> {
    let rep = v3_tcp(
        s,
        2,
        NFS,
        8,
        &enc(|w| {
            w.opaque_var(dir).unwrap();
            w.string(name).unwrap();
            w.u32(0).unwrap();
            no_sattr(w);
        }),
    );
    let fh = created_fh(&rep, "CREATE");
    for (i, part) in data.chunks(32768).enumerate() {
        let rep = v3_tcp(
            s,
            3 + i as u32,
            NFS,
            7,
            &enc(|w| {
                w.opaque_var(&fh).unwrap();
                w.u64(i as u64 * 32768).unwrap();
                w.u32(part.len() as u32).unwrap();
                w.u32(2).unwrap();
                w.opaque_var(part).unwrap();
            }),
        );
        assert_eq!(XdrReader::new(&rep).u32().unwrap(), 0, "WRITE ok");
    }
    fh
}

/// SYMLINK `name` → `target` in `dir`; its handle.
pub fn v3_symlink(s: &mut TcpStream, dir: &[u8], name: &[u8], target: &[u8]) -> Vec<u8> {
    let rep = v3_tcp(
        s,
        40,
        NFS,
        10,
        &enc(|w| {
            w.opaque_var(dir).unwrap();
            w.string(name).unwrap();
            no_sattr(w);
            w.string(target).unwrap();
        }),
    );
    created_fh(&rep, "SYMLINK")
}

/// LOOKUP `name` in `dir`: its handle, or `None` (an NFS error).
pub fn v3_lookup(s: &mut TcpStream, dir: &[u8], name: &[u8]) -> Option<Vec<u8>> {
    let rep = v3_tcp(
        s,
        41,
        NFS,
        3,
        &enc(|w| {
            w.opaque_var(dir).unwrap();
            w.string(name).unwrap();
        }),
    );
    let mut r = XdrReader::new(&rep);
    if r.u32().unwrap() != 0 {
        return None;
    }
    Some(r.opaque_var(64).unwrap().to_vec())
}

/// READLINK over TCP: the target.
pub fn v3_readlink(s: &mut TcpStream, fh: &[u8]) -> Vec<u8> {
    let rep = v3_tcp(s, 42, NFS, 5, &enc(|w| w.opaque_var(fh).unwrap()));
    let mut r = XdrReader::new(&rep);
    assert_eq!(r.u32().unwrap(), 0, "READLINK ok");
    if r.bool().unwrap() {
        r.skip(84).unwrap();
    }
    r.opaque_var(4096).unwrap().to_vec()
}

/// READ over TCP: the data.
pub fn v3_read(s: &mut TcpStream, fh: &[u8], offset: u64, count: u32) -> Vec<u8> {
    let rep = v3_tcp(
        s,
        43,
        NFS,
        6,
        &enc(|w| {
            w.opaque_var(fh).unwrap();
            w.u64(offset).unwrap();
            w.u32(count).unwrap();
        }),
    );
    let mut r = XdrReader::new(&rep);
    assert_eq!(r.u32().unwrap(), 0, "READ ok");
    if r.bool().unwrap() {
        r.skip(84).unwrap();
    }
    r.u32().unwrap();
    r.bool().unwrap();
    r.opaque_var(1 << 20).unwrap().to_vec()
}
