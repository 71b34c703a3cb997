//! An NFSv4.2 session over TCP for the integration tests (nfs42_tcp.rs, nfs42_fast.rs):
//! COMPOUNDs of a chosen minor version on nfs-wire's encoder, and the few operations
//! the tests build on (create, write, read, size, seek).

use super::v4::*;
use super::*;
use engine::rpc;
use engine::xdr::XdrReader;
use nfs_wire::nfs4args::OPEN4_SHARE_ACCESS_WANT_NO_DELEG;
use nfs_wire::rpccall;
use nfs_wire::v4call::{compound_call_minor, Claim, How, Ops};
use std::net::TcpStream;

pub const NFS4_OK: u32 = 0;
pub const NFS4ERR_EXIST: u32 = 17;
pub const NFS4ERR_INVAL: u32 = 22;
pub const NFS4ERR_NAMETOOLONG: u32 = 63;
pub const NFS4ERR_NOTSUPP: u32 = 10004;
pub const NFS4ERR_NXIO: u32 = 6;
pub const NFS4ERR_MINOR_VERS_MISMATCH: u32 = 10021;
pub const NFS4ERR_OP_ILLEGAL: u32 = 10044;
pub const NFS4ERR_UNION_NOTSUPP: u32 = 10090;
pub const NFS4ERR_NOXATTR: u32 = 10095;
pub const NFS4ERR_XATTR2BIG: u32 = 10096;
pub const ANON: [u8; 16] = [0; 16];
/// SEQUENCE4resok after the operation number and status.
pub const SEQ_RES: usize = 16 + 20;

/// A session whose COMPOUNDs have minor version `minor`.
pub struct S {
    pub s: TcpStream,
    pub xid: u32,
    pub clientid: u64,
    pub sid: [u8; 16],
    pub seq: u32,
    pub minor: u32,
}

/// A COMPOUND's reply: its status and its results.
pub struct Rep {
    pub status: u32,
    pub r: Vec<u8>,
}

impl S {
    pub fn new(gw: &Gw, minor: u32) -> S {
        let mut s = S {
            s: gw.connect_tcp(),
            xid: 0,
            clientid: 0,
            sid: [0; 16],
            seq: 0,
            minor,
        };
        // A client owner of its own: one client's RECLAIM_COMPLETE is done once.
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let owner = format!("nfs42-{n}");
        let ops = Ops::new().encoded(1, &exchange_id_op(owner.as_bytes()));
        let rep = s.call(&ops).r;
        let mut r = XdrReader::new(&rep);
        assert_eq!(r.u32().unwrap(), OP_EXCHANGE_ID);
        assert_eq!(r.u32().unwrap(), NFS4_OK, "EXCHANGE_ID in minor {minor}");
        s.clientid = r.u64().unwrap();
        let seq = r.u32().unwrap();
        let rep = s.call(&Ops::new().encoded(1, &create_session_op(s.clientid, seq)));
        let mut r = XdrReader::new(&rep.r);
        assert_eq!(
            (r.u32().unwrap(), r.u32().unwrap()),
            (OP_CREATE_SESSION, NFS4_OK)
        );
        s.sid.copy_from_slice(r.opaque_fixed(16).unwrap());
        let rep = s.seq_call(Ops::new().reclaim_complete());
        assert_eq!(rep.status, NFS4_OK);
        s
    }

    pub fn call(&mut self, ops: &Ops) -> Rep {
        self.xid += 1;
        let call = compound_call_minor(self.xid, &rpccall::sys(0), ops, self.minor);
        let reply = tcp_call(&mut self.s, &call).unwrap();
        let (_, st, at) = rpc::decode_reply(&reply).unwrap();
        assert_eq!(st, rpc::ReplyStatus::Accepted(rpc::Accept::Success));
        let mut r = XdrReader::new(&reply[at..]);
        let status = r.u32().unwrap();
        r.opaque_var(64).unwrap();
        r.u32().unwrap();
        Rep {
            status,
            r: r.rest().to_vec(),
        }
    }

    /// SEQUENCE then `ops`: the reply with the results after SEQUENCE's.
    pub fn seq_call(&mut self, ops: Ops) -> Rep {
        self.seq += 1;
        let all = Ops::new().sequence(self.sid, self.seq).append(ops);
        let mut rep = self.call(&all);
        let mut r = XdrReader::new(&rep.r);
        assert_eq!((r.u32().unwrap(), r.u32().unwrap()), (OP_SEQUENCE, NFS4_OK));
        r.skip(SEQ_RES).unwrap();
        rep.r = r.rest().to_vec();
        rep
    }

    /// PUTFH `fh` then `op`: the reader at `op`'s result, after its number.
    pub fn on(&mut self, fh: &[u8], op: Ops) -> (u32, Vec<u8>) {
        let rep = self.seq_call(Ops::new().putfh(fh).append(op));
        let mut r = XdrReader::new(&rep.r);
        assert_eq!((r.u32().unwrap(), r.u32().unwrap()), (OP_PUTFH, NFS4_OK));
        r.u32().unwrap();
        let st = r.u32().unwrap();
        (st, r.rest().to_vec())
    }

    /// Creates "name" in the root (OPEN UNCHECKED4 for both): its stateid and handle.
    pub fn create(&mut self, name: &[u8]) -> ([u8; 16], Vec<u8>) {
        let ops = Ops::new()
            .putrootfh()
            .open(
                self.clientid,
                name,
                3 | OPEN4_SHARE_ACCESS_WANT_NO_DELEG,
                0,
                How::Unchecked,
                Claim::Null(name),
            )
            .getfh();
        let rep = self.seq_call(ops);
        let mut r = XdrReader::new(&rep.r);
        r.skip(8).unwrap();
        assert_eq!((r.u32().unwrap(), r.u32().unwrap()), (OP_OPEN, NFS4_OK));
        let mut sid = [0u8; 16];
        sid.copy_from_slice(r.opaque_fixed(16).unwrap());
        r.skip(20 + 4).unwrap();
        let n = r.u32().unwrap();
        r.skip(4 * n as usize).unwrap();
        assert_eq!((r.u32().unwrap(), r.u32().unwrap()), (3, 0));
        assert_eq!((r.u32().unwrap(), r.u32().unwrap()), (OP_GETFH, NFS4_OK));
        (sid, r.opaque_var(128).unwrap().to_vec())
    }

    pub fn write(&mut self, fh: &[u8], sid: &[u8; 16], off: u64, data: &[u8]) {
        let (st, _) = self.on(fh, Ops::new().write(sid, off, data));
        assert_eq!(st, NFS4_OK);
    }

    /// READ of `count` at `off`: the data.
    pub fn read(&mut self, fh: &[u8], off: u64, count: u32) -> Vec<u8> {
        let (st, rest) = self.on(fh, Ops::new().read(&ANON, off, count));
        assert_eq!(st, NFS4_OK);
        let mut r = XdrReader::new(&rest);
        r.u32().unwrap();
        r.opaque_var(1 << 20).unwrap().to_vec()
    }

    pub fn size(&mut self, fh: &[u8]) -> u64 {
        let (st, rest) = self.on(fh, Ops::new().getattr(&[1 << 4]));
        assert_eq!(st, NFS4_OK);
        let mut r = XdrReader::new(&rest);
        let n = r.u32().unwrap();
        r.skip(4 * n as usize + 4).unwrap();
        r.u64().unwrap()
    }

    /// SEEK: status, eof, offset.
    pub fn seek(&mut self, fh: &[u8], off: u64, what: u32) -> (u32, bool, u64) {
        let (st, rest) = self.on(fh, Ops::new().seek(&ANON, off, what));
        if st != NFS4_OK {
            return (st, false, 0);
        }
        let mut r = XdrReader::new(&rest);
        (st, r.bool().unwrap(), r.u64().unwrap())
    }
}
