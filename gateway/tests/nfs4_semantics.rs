//! NFSv4.1 permission and time rules through the real server over TCP, as a user
//! that is not root: OPEN checks the mode bits with no NFSv3 owner override (pjdfstest
//! open/06.t) except for the file it creates (open(O_CREAT|O_WRONLY, 0444)); WRITE
//! and SETATTR(size) under that open are not checked again, under the anonymous
//! stateid they are; SETATTR times beyond uint32 seconds read back exactly
//! (pjdfstest utimensat/09.t).

mod common;

use common::v4::*;
use common::*;
use engine::rpc;
use engine::xdr::{XdrReader, XdrWriter};
use nfs_wire::nfs4args::{GUARDED4, OPEN4_SHARE_ACCESS_WANT_NO_DELEG};
use nfs_wire::rpccall;
use nfs_wire::v4call::{Claim, Fattr, How, Ops};
use std::net::TcpStream;

const USER: u32 = 1000;
const NFS4_OK: u32 = 0;
const NFS4ERR_ACCESS: u32 = 13;
const NFS4ERR_INVAL: u32 = 22;
const ANON: [u8; 16] = [0; 16];
/// fattr4 attribute numbers (RFC 8881 §5.7).
const SIZE: u32 = 4;
const MODE: u32 = 33;
const TIME_ACCESS: u32 = 47;
const TIME_ACCESS_SET: u32 = 48;
const TIME_MODIFY: u32 = 53;
const TIME_MODIFY_SET: u32 = 54;

/// A session on one TCP connection; each COMPOUND runs as `uid`.
struct S {
    s: TcpStream,
    xid: u32,
    clientid: u64,
    sid: [u8; 16],
    seq: u32,
}

impl S {
    fn new(gw: &Gw) -> S {
        let mut s = S {
            s: gw.connect_tcp(),
            xid: 0,
            clientid: 0,
            sid: [0; 16],
            seq: 0,
        };
        let rep = s.raw(0, 1, &exchange_id_op(b"nfs4-semantics"));
        let mut r = XdrReader::new(&rep);
        assert_eq!(
            (r.u32().unwrap(), r.u32().unwrap()),
            (OP_EXCHANGE_ID, NFS4_OK)
        );
        s.clientid = r.u64().unwrap();
        let seq = r.u32().unwrap();
        let rep = s.raw(0, 1, &create_session_op(s.clientid, seq));
        let mut r = XdrReader::new(&rep);
        assert_eq!(
            (r.u32().unwrap(), r.u32().unwrap()),
            (OP_CREATE_SESSION, NFS4_OK)
        );
        s.sid.copy_from_slice(r.opaque_fixed(16).unwrap());
        // Before RECLAIM_COMPLETE, non-reclaim OPENs get NFS4ERR_GRACE (§18.51.3).
        s.seq += 1;
        let ops = Ops::new().sequence(s.sid, s.seq).reclaim_complete();
        let rep = s.raw(0, ops.n, ops.bytes());
        let mut r = XdrReader::new(&rep);
        r.skip(8 + 16 + 20).unwrap();
        assert_eq!(
            (r.u32().unwrap(), r.u32().unwrap()),
            (OP_RECLAIM_COMPLETE, NFS4_OK)
        );
        s
    }

    /// A COMPOUND of `nops` operations as `uid`: its results.
    fn raw(&mut self, uid: u32, nops: u32, ops: &[u8]) -> Vec<u8> {
        self.xid += 1;
        let ops = Ops::new().encoded(nops, ops);
        let call = nfs_wire::v4call::compound_call(self.xid, &rpccall::sys(uid), &ops);
        let reply = tcp_call(&mut self.s, &call).unwrap();
        let (_, st, at) = rpc::decode_reply(&reply).unwrap();
        assert_eq!(st, rpc::ReplyStatus::Accepted(rpc::Accept::Success));
        let mut r = XdrReader::new(&reply[at..]);
        r.u32().unwrap();
        r.opaque_var(64).unwrap();
        r.u32().unwrap();
        r.rest().to_vec()
    }

    /// SEQUENCE, PUTFH `fh`, then `ops` (`n` of them) as USER: the results after
    /// PUTFH's.
    fn on_file(&mut self, fh: &[u8], n: u32, ops: &[u8]) -> Vec<u8> {
        self.seq += 1;
        let mut all = sequence_op(&self.sid, self.seq);
        all.extend(putfh_op(fh));
        all.extend_from_slice(ops);
        let rep = self.raw(USER, 2 + n, &all);
        let mut r = XdrReader::new(&rep);
        assert_eq!((r.u32().unwrap(), r.u32().unwrap()), (OP_SEQUENCE, NFS4_OK));
        r.skip(16 + 20).unwrap();
        assert_eq!((r.u32().unwrap(), r.u32().unwrap()), (OP_PUTFH, NFS4_OK));
        r.rest().to_vec()
    }

    /// OPEN of "d/`name`" as USER, share `access`, `how` = None (NOCREATE) or a
    /// GUARDED4 create with `mode`, then GETFH: status, stateid, handle.
    fn open(
        &mut self,
        owner: &[u8],
        access: u32,
        name: &[u8],
        how: Option<u32>,
    ) -> (u32, [u8; 16], Vec<u8>) {
        let (bitmap, values) = fattr(&[MODE], |l| l.u32(how.unwrap_or(0)).unwrap());
        let create = How::WithAttrs {
            mode: GUARDED4,
            attrs: Fattr {
                bitmap: &bitmap,
                values: &values,
            },
        };
        self.seq += 1;
        let ops = Ops::new()
            .sequence(self.sid, self.seq)
            .putrootfh()
            .lookup(b"d")
            .open(
                self.clientid,
                owner,
                access | OPEN4_SHARE_ACCESS_WANT_NO_DELEG,
                0,
                if how.is_some() { create } else { How::NoCreate },
                Claim::Null(name),
            )
            .getfh();
        let rep = self.raw(USER, ops.n, ops.bytes());
        let mut r = XdrReader::new(&rep);
        r.skip(8 + 16 + 20 + 8 + 8).unwrap();
        assert_eq!(r.u32().unwrap(), OP_OPEN);
        let st = r.u32().unwrap();
        if st != NFS4_OK {
            return (st, [0; 16], Vec::new());
        }
        let mut sid = [0u8; 16];
        sid.copy_from_slice(r.opaque_fixed(16).unwrap());
        r.skip(20 + 4).unwrap(); // change_info4, rflags
        let n = r.u32().unwrap();
        r.skip(4 * n as usize).unwrap();
        // OPEN_DELEGATE_NONE_EXT (WANT_NO_DELEG) and its why_no_delegation4.
        assert_eq!((r.u32().unwrap(), r.u32().unwrap()), (3, 0));
        assert_eq!((r.u32().unwrap(), r.u32().unwrap()), (OP_GETFH, NFS4_OK));
        (st, sid, r.opaque_var(128).unwrap().to_vec())
    }

    /// SETATTR of `fh` with stateid `sid` and the fattr4 `bits`/`body`: its status.
    fn setattr(
        &mut self,
        fh: &[u8],
        sid: &[u8; 16],
        bits: &[u32],
        body: impl FnOnce(&mut XdrWriter),
    ) -> u32 {
        let (bitmap, values) = fattr(bits, body);
        let op = Ops::new().setattr(sid, &bitmap, &values);
        let rep = self.on_file(fh, 1, op.bytes());
        let mut r = XdrReader::new(&rep);
        assert_eq!(r.u32().unwrap(), OP_SETATTR);
        r.u32().unwrap()
    }

    fn write(&mut self, fh: &[u8], sid: &[u8; 16]) -> u32 {
        let op = Ops::new().write(sid, 0, b"data");
        let rep = self.on_file(fh, 1, op.bytes());
        let mut r = XdrReader::new(&rep);
        assert_eq!(r.u32().unwrap(), OP_WRITE);
        r.u32().unwrap()
    }
}

/// A fattr4 of `bits` (all in the first two words) whose values `body` encodes:
/// bitmap words and values.
fn fattr(bits: &[u32], body: impl FnOnce(&mut XdrWriter)) -> ([u32; 2], Vec<u8>) {
    let mut words = [0u32; 2];
    for b in bits {
        words[(b / 32) as usize] |= 1 << (b % 32);
    }
    (words, enc(body))
}

fn gateway() -> (Gw, S) {
    let gw = Gw::start(&GwOpts {
        rdma: false,
        ..Default::default()
    });
    let mut s = S::new(&gw);
    // As root: "d", mode 0777, for USER's files.
    let (bitmap, values) = fattr(&[MODE], |l| l.u32(0o777).unwrap());
    let attrs = Fattr {
        bitmap: &bitmap,
        values: &values,
    };
    s.seq += 1;
    let ops = Ops::new()
        .sequence(s.sid, s.seq)
        .putrootfh()
        .create_with(b"d", None, attrs);
    let rep = s.raw(0, ops.n, ops.bytes());
    let mut r = XdrReader::new(&rep);
    r.skip(8 + 16 + 20 + 8).unwrap();
    assert_eq!((r.u32().unwrap(), r.u32().unwrap()), (OP_CREATE, NFS4_OK));
    (gw, s)
}

#[test]
fn open_checks_the_owner_against_the_mode_except_when_it_creates() {
    let (_gw, mut s) = gateway();
    // The creator: mode 0444, share WRITE, and its open writes and truncates.
    let (st, w, fh) = s.open(b"creator", 2, b"ro", Some(0o444));
    assert_eq!(st, NFS4_OK, "OPEN4_CREATE 0444 for WRITE");
    assert_eq!(s.write(&fh, &w), NFS4_OK);
    assert_eq!(s.setattr(&fh, &w, &[SIZE], |l| l.u64(1).unwrap()), NFS4_OK);
    // truncate(2): the anonymous stateid needs w, for the owner too.
    assert_eq!(
        s.setattr(&fh, &ANON, &[SIZE], |l| l.u64(0).unwrap()),
        NFS4ERR_ACCESS
    );
    assert_eq!(s.write(&fh, &ANON), NFS4ERR_ACCESS);
    // A later OPEN of it for writing is checked: the owner has no w.
    assert_eq!(s.open(b"again", 2, b"ro", None).0, NFS4ERR_ACCESS);
    assert_eq!(s.open(b"again", 1, b"ro", None).0, NFS4_OK);
    // pjdfstest open/06.t: chmod by the owner, then OPEN for writing / reading.
    let (st, _, f) = s.open(b"maker", 3, b"f", Some(0o644));
    assert_eq!(st, NFS4_OK);
    for (mode, read, write) in [
        (0o477, NFS4_OK, NFS4ERR_ACCESS),
        (0o177, NFS4_OK, NFS4ERR_ACCESS),
        (0o077, NFS4ERR_ACCESS, NFS4ERR_ACCESS),
        (0o277, NFS4ERR_ACCESS, NFS4_OK),
    ] {
        let st = s.setattr(&f, &ANON, &[MODE], |l| l.u32(mode).unwrap());
        assert_eq!(st, NFS4_OK, "chmod {mode:o}");
        assert_eq!(s.open(b"r", 1, b"f", None).0, read, "read, mode {mode:o}");
        assert_eq!(s.open(b"w", 2, b"f", None).0, write, "write, mode {mode:o}");
    }
}

#[test]
fn times_beyond_uint32_seconds_read_back_exactly() {
    let (_gw, mut s) = gateway();
    let (st, _, fh) = s.open(b"t", 1, b"t", Some(0o644));
    assert_eq!(st, NFS4_OK);
    for sec in [1i64 << 32, 1 << 33, -1, -(1 << 40)] {
        let st = s.setattr(&fh, &ANON, &[TIME_ACCESS_SET, TIME_MODIFY_SET], |l| {
            for _ in 0..2 {
                l.u32(1).unwrap(); // SET_TO_CLIENT_TIME4
                l.i64(sec).unwrap();
                l.u32(123_456_789).unwrap();
            }
        });
        assert_eq!(st, NFS4_OK, "{sec}");
        let times = (1 << (TIME_ACCESS - 32)) | (1 << (TIME_MODIFY - 32));
        let op = Ops::new().getattr(&[0, times]);
        let rep = s.on_file(&fh, 1, op.bytes());
        let mut r = XdrReader::new(&rep);
        assert_eq!((r.u32().unwrap(), r.u32().unwrap()), (OP_GETATTR, NFS4_OK));
        let n = r.u32().unwrap();
        r.skip(4 * n as usize).unwrap();
        let mut l = XdrReader::new(r.opaque_var(64).unwrap());
        for _ in 0..2 {
            assert_eq!((l.i64().unwrap(), l.u32().unwrap()), (sec, 123_456_789));
        }
    }
    let st = s.setattr(&fh, &ANON, &[TIME_MODIFY_SET], |l| {
        l.u32(1).unwrap();
        l.i64(5).unwrap();
        l.u32(1_000_000_000).unwrap();
    });
    assert_eq!(st, NFS4ERR_INVAL);
}
