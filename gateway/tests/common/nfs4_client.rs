//! A small NFSv4.1 client for the in-process tests, on nfs-wire's encoder
//! (`nfs_wire::v4call`, `v4reply`, `v4cb`, `rpccall`): a session over
//! `engine::rdma::client::RdmaClient` whose callbacks (RFC 8167 reverse calls) are
//! collected while forward calls wait, one over TCP that is also its back channel,
//! CB_NULL / CB_COMPOUND (CB_SEQUENCE + CB_RECALL) answers, and NFSv3 over TCP for
//! the conflicting writer. Encoding lives in nfs-wire; here are the tests' defaults
//! (channel sizes, owners) and unwrapping reply walkers.
#![allow(dead_code, unused_imports)]

use engine::fabric::soft::SoftFabric;
use engine::rdma::client::{ClientOptions, RdmaClient, SubmitError};
use engine::rpc::{self, Cred};
use engine::rpcrdma::requester::CallShape;
use engine::xdr::XdrReader;
use nfs_wire::mount3::MOUNTPROC3_MNT;
use nfs_wire::nfs3::{FILE_SYNC, NFSPROC3_CREATE, NFSPROC3_WRITE};
use nfs_wire::{rpccall, v3more, v4cb, v4reply, MOUNT_PROGRAM, NFS_PROGRAM, NFS_V4};
use std::collections::VecDeque;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

pub use nfs_wire::nfs4::*;
pub use nfs_wire::nfs4args::{
    ANONYMOUS_STATEID as ANONYMOUS, BYPASS_STATEID as BYPASS, CURRENT_STATEID as CURRENT,
};
pub use nfs_wire::nfs4args::{
    CDFC4_BACK_OR_BOTH, CREATE_SESSION4_FLAG_CONN_BACK_CHAN as CONN_BACK_CHAN,
    EXCHGID4_FLAG_CONFIRMED_R, NFS4_OK, OPEN4_SHARE_ACCESS_BOTH as ACCESS_BOTH,
    OPEN4_SHARE_ACCESS_READ as ACCESS_READ, OPEN4_SHARE_ACCESS_WANT_NO_DELEG as WANT_NO_DELEG,
    OPEN4_SHARE_ACCESS_WRITE as ACCESS_WRITE, OPEN4_SHARE_DENY_BOTH as DENY_BOTH,
    OPEN4_SHARE_DENY_NONE as DENY_NONE, OPEN4_SHARE_DENY_READ as DENY_READ,
    OPEN4_SHARE_DENY_WRITE as DENY_WRITE, OPEN_DELEGATE_NONE, OPEN_DELEGATE_READ,
    OPEN_DELEGATE_WRITE, READ_LT, SEQ4_STATUS_CB_PATH_DOWN, WRITE_LT,
};
pub use nfs_wire::v4call::{seqid_of, with_seqid, Channel, Claim, How, Locker, Ops};
pub use nfs_wire::v4cb::CbRecall;
pub use nfs_wire::v4reply::{Denied, Fore, Opened, Res};

/// The callback program the tests' sessions name (RFC 5662 `NFS4_CALLBACK`).
pub const CB_PROG: u32 = NFS4_CALLBACK;
pub const NFS3ERR_JUKEBOX: u32 = 10008;

/// Back channel every test session asks for over TCP: 4 KiB calls, 2 slots.
const TCP_BACK: Channel = Channel {
    headerpad: 0,
    max_request: 4096,
    max_response: 4096,
    max_response_cached: 0,
    max_ops: 2,
    max_requests: 2,
};

/// The tests' shorthands on nfs-wire's COMPOUND builder: the channel sizes and open
/// and lock shapes they use again and again.
pub trait TestOps: Sized {
    /// CREATE_SESSION as Linux asks over RDMA (ca_maxrequestsize = inline threshold −
    /// 28), `back_slots` back slots, AUTH_NONE callbacks.
    fn create_session_rdma(self, clientid: u64, seq: u32, flags: u32, back_slots: u32) -> Ops;
    /// CREATE_SESSION for TCP: `slots` fore slots of 1 MiB requests, 4 KiB cached
    /// replies, 16 operations; 2 back slots; AUTH_NONE callbacks.
    fn create_session_tcp(self, clientid: u64, seq: u32, flags: u32, slots: u32) -> Ops;
    /// As `create_session_tcp` with ca_maxrequestsize `max_request`.
    fn create_session_sized(
        self,
        clientid: u64,
        seq: u32,
        flags: u32,
        slots: u32,
        max_request: u32,
    ) -> Ops;
    /// OPEN CLAIM_NULL `name` for reading, no create, WANT_NO_PREFERENCE.
    fn open_read(self, clientid: u64, owner: &[u8], name: &[u8]) -> Ops;
    /// LOCK by a new lock owner (open_to_lock_owner4) for the open `open_sid`.
    fn lock_new(
        self,
        kind: u32,
        offset: u64,
        length: u64,
        open_sid: &[u8; 16],
        clientid: u64,
        owner: &[u8],
    ) -> Ops;
    /// LOCK by a lock owner that has `lock_sid` (exist_lock_owner4).
    fn lock_old(self, kind: u32, offset: u64, length: u64, lock_sid: &[u8; 16]) -> Ops;
    /// A WRITE_LT LOCK with reclaim = true by a new lock owner (RFC 8881 §18.10.3).
    fn lock_reclaim(
        self,
        offset: u64,
        length: u64,
        open_sid: &[u8; 16],
        clientid: u64,
        owner: &[u8],
    ) -> Ops;
}

impl TestOps for Ops {
    fn create_session_rdma(self, clientid: u64, seq: u32, flags: u32, back_slots: u32) -> Ops {
        let fore = Channel {
            headerpad: 0,
            max_request: 4068,
            max_response: 4068,
            max_response_cached: 2048,
            max_ops: 16,
            max_requests: 8,
        };
        let back = Channel {
            max_request: 4068,
            max_response: 4068,
            max_requests: back_slots,
            ..TCP_BACK
        };
        self.create_session(clientid, seq, flags, &fore, &back, 1)
    }

    fn create_session_tcp(self, clientid: u64, seq: u32, flags: u32, slots: u32) -> Ops {
        self.create_session_sized(clientid, seq, flags, slots, 1 << 20)
    }

    fn create_session_sized(
        self,
        clientid: u64,
        seq: u32,
        flags: u32,
        slots: u32,
        max_request: u32,
    ) -> Ops {
        let fore = Channel {
            headerpad: 0,
            max_request,
            max_response: 1 << 20,
            max_response_cached: 4096,
            max_ops: 16,
            max_requests: slots,
        };
        self.create_session(clientid, seq, flags, &fore, &TCP_BACK, 1)
    }

    fn open_read(self, clientid: u64, owner: &[u8], name: &[u8]) -> Ops {
        self.open(
            clientid,
            owner,
            ACCESS_READ,
            DENY_NONE,
            How::NoCreate,
            Claim::Null(name),
        )
    }

    fn lock_new(
        self,
        kind: u32,
        offset: u64,
        length: u64,
        open_sid: &[u8; 16],
        clientid: u64,
        owner: &[u8],
    ) -> Ops {
        let locker = Locker::New {
            open_stateid: open_sid,
            clientid,
            owner,
        };
        self.lock(kind, false, offset, length, locker)
    }

    fn lock_old(self, kind: u32, offset: u64, length: u64, lock_sid: &[u8; 16]) -> Ops {
        let locker = Locker::Existing {
            lock_stateid: lock_sid,
        };
        self.lock(kind, false, offset, length, locker)
    }

    fn lock_reclaim(
        self,
        offset: u64,
        length: u64,
        open_sid: &[u8; 16],
        clientid: u64,
        owner: &[u8],
    ) -> Ops {
        let locker = Locker::New {
            open_stateid: open_sid,
            clientid,
            owner,
        };
        self.lock(WRITE_LT, true, offset, length, locker)
    }
}

/// A COMPOUND4res that must decode.
pub fn parse_res(rep: &[u8]) -> Res {
    Res::parse(rep).expect("a COMPOUND4res")
}

/// Reads `op`'s result header (op number, status) and checks it; the status.
pub fn expect_op(r: &mut XdrReader, op: u32) -> u32 {
    v4reply::expect_op(r, op).unwrap_or_else(|e| panic!("result of op {op}: {e}"))
}

/// SEQUENCE4resok after its status: returns sr_status_flags.
pub fn skip_sequence_ok(r: &mut XdrReader) -> u32 {
    v4reply::sequence_ok(r)
        .expect("SEQUENCE4resok")
        .status_flags
}

/// OPEN4resok after its status (RFC 8881 §18.16.2).
pub fn parse_open_ok(r: &mut XdrReader) -> Opened {
    v4reply::open_ok(r).expect("OPEN4resok")
}

/// CREATE_SESSION4resok after the status: (session id, sequence id, flags, fore).
pub fn read_create_session(r: &mut XdrReader) -> ([u8; 16], u32, u32, Fore) {
    v4reply::create_session_ok(r).expect("CREATE_SESSION4resok")
}

/// A stateid result (OPEN_DOWNGRADE, CLOSE, LOCKU, LOCK OK): the stateid.
pub fn read_stateid(r: &mut XdrReader) -> [u8; 16] {
    v4reply::stateid(r).expect("a stateid")
}

/// LOCK4denied (RFC 8881 §18.10.2).
pub fn read_denied(r: &mut XdrReader) -> Denied {
    v4reply::denied(r).expect("LOCK4denied")
}

/// A reader after the COMPOUND's first result, a SEQUENCE that must have succeeded.
pub fn after_seq(res: &Res) -> XdrReader<'_> {
    let mut r = res.reader();
    assert_eq!(expect_op(&mut r, OP_SEQUENCE), NFS4_OK, "SEQUENCE");
    skip_sequence_ok(&mut r);
    r
}

/// What a callback is: CB_NULL (None) or a CB_COMPOUND with CB_SEQUENCE + CB_RECALL;
/// anything else fails the test.
pub fn decode_callback(rec: &[u8]) -> (u32, Option<CbRecall>) {
    v4cb::decode_callback(rec).unwrap_or_else(|e| panic!("callback: {e}"))
}

pub use nfs_wire::v4cb::callback_reply;

pub fn cred() -> Cred {
    rpccall::sys(0)
}

/// An NFSv4.1 client on one RPC-over-RDMA connection (soft provider). Callbacks that
/// arrive while it waits for a forward reply are kept in `callbacks`.
pub struct V41 {
    pub c: RdmaClient,
    pub callbacks: VecDeque<(u32, Vec<u8>)>,
    next_xid: u32,
    /// The COMPOUNDs' minor version (1; 2 for NFSv4.2's operations).
    pub minor: u32,
}

impl V41 {
    /// Connects with `credits` forward credits and `bc` reverse credits (RFC 8167).
    pub fn connect(addr: SocketAddr, credits: u32, bc: u32) -> V41 {
        V41::try_connect(addr, credits, bc).expect("RDMA connect")
    }

    /// As `connect`; the error when nothing listens at `addr`.
    pub fn try_connect(addr: SocketAddr, credits: u32, bc: u32) -> std::io::Result<V41> {
        let opts = ClientOptions {
            credits,
            max_io: 64 << 10,
            backchannel_credits: bc,
            ..ClientOptions::default()
        };
        let c = RdmaClient::connect(Box::new(SoftFabric::new()?), addr, opts)?;
        Ok(V41 {
            c,
            callbacks: VecDeque::new(),
            next_xid: 1,
            minor: 1,
        })
    }

    /// An NFS version 4 call record for `proc_` with `args`.
    pub fn record(&mut self, proc_: u32, args: &[u8]) -> Vec<u8> {
        self.next_xid += 1;
        rpccall::call(self.next_xid, NFS_PROGRAM, NFS_V4, proc_, &cred(), args)
    }

    /// Moves callbacks the client received into `callbacks`.
    pub fn collect(&mut self) {
        let q = &mut self.callbacks;
        self.c
            .take_callbacks(&mut |xid, rec| q.push_back((xid, rec.to_vec())));
    }

    /// Sends a COMPOUND and waits for its reply (collecting callbacks meanwhile).
    pub fn compound(&mut self, ops: &Ops) -> Res {
        let call = self.record(NFSPROC4_COMPOUND, &ops.args_with(b"", self.minor));
        let shape = CallShape::new(16 << 10);
        let deadline = Instant::now() + Duration::from_secs(10);
        let xid = loop {
            match self.c.submit(&call, &shape) {
                Ok(x) => break x,
                Err(SubmitError::Busy) => {
                    self.c.poll(&mut |_, _| {}).unwrap();
                    self.collect();
                    assert!(Instant::now() < deadline, "no credit for a call");
                }
                Err(e) => panic!("submit: {e}"),
            }
        };
        let mut out = None;
        loop {
            let _ = self.c.poll(&mut |x, r| {
                if x == xid {
                    out = Some(r.map(<[u8]>::to_vec));
                }
            });
            self.collect();
            if let Some(r) = out.take() {
                let rep = r.expect("COMPOUND reply");
                let (_, st, at) = rpc::decode_reply(&rep).unwrap();
                assert_eq!(st, rpc::ReplyStatus::Accepted(rpc::Accept::Success));
                return parse_res(&rep[at..]);
            }
            assert!(Instant::now() < deadline, "no COMPOUND reply");
            std::thread::yield_now();
        }
    }

    /// Waits up to `wait` for a callback; `None` when none came.
    pub fn next_callback(&mut self, wait: Duration) -> Option<(u32, Vec<u8>)> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(cb) = self.callbacks.pop_front() {
                return Some(cb);
            }
            let _ = self.c.poll(&mut |_, _| {});
            self.collect();
            if self.callbacks.is_empty() && Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Answers a callback record as the callback service would: CB_NULL → OK, a
    /// CB_RECALL → CB_SEQUENCE OK + CB_RECALL OK. Returns what it was.
    pub fn answer(&mut self, xid: u32, rec: &[u8]) -> Option<CbRecall> {
        let (rx, what) = decode_callback(rec);
        assert_eq!(rx, xid);
        self.c
            .reply_callback(xid, &callback_reply(xid, what.as_ref()))
            .expect("reply_callback");
        what
    }

    /// EXCHANGE_ID + CREATE_SESSION (+ RECLAIM_COMPLETE): (clientid, session, csr_flags).
    pub fn session(&mut self, owner: &[u8], flags: u32, back_slots: u32) -> (u64, [u8; 16], u32) {
        let res = self.compound(&Ops::new().exchange_id([7; 8], owner));
        assert_eq!(res.status, NFS4_OK, "EXCHANGE_ID");
        let mut r = res.reader();
        expect_op(&mut r, OP_EXCHANGE_ID);
        let clientid = r.u64().unwrap();
        let seq = r.u32().unwrap();
        let res = self.compound(&Ops::new().create_session_rdma(clientid, seq, flags, back_slots));
        assert_eq!(res.status, NFS4_OK, "CREATE_SESSION");
        let mut r = res.reader();
        expect_op(&mut r, OP_CREATE_SESSION);
        let mut sid = [0u8; 16];
        sid.copy_from_slice(r.opaque_fixed(16).unwrap());
        r.u32().unwrap();
        let csr_flags = r.u32().unwrap();
        (clientid, sid, csr_flags)
    }
}

/// NFSv3 over TCP for the conflicting writer: MOUNT "/", CREATE, WRITE.
pub struct V3 {
    pub s: TcpStream,
    xid: u32,
}

impl V3 {
    pub fn connect(addr: SocketAddr) -> V3 {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_nodelay(true).unwrap();
        V3 { s, xid: 0x3000 }
    }

    /// One call; returns the results after the accepted-SUCCESS header.
    pub fn call(&mut self, prog: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
        self.xid += 1;
        let call = v3more::call(self.xid, prog, proc_, &cred(), args);
        let rep = crate::common::tcp_call(&mut self.s, &call).unwrap();
        let (x, st, at) = rpc::decode_reply(&rep).unwrap();
        assert_eq!(x, self.xid);
        assert_eq!(st, rpc::ReplyStatus::Accepted(rpc::Accept::Success));
        rep[at..].to_vec()
    }

    pub fn mount_root(&mut self) -> Vec<u8> {
        let rep = self.call(MOUNT_PROGRAM, MOUNTPROC3_MNT, &v3more::mnt_args(b"/"));
        nfs_wire::v3call::parse_mount(&rep).expect("MNT")
    }

    pub fn create(&mut self, dir: &[u8], name: &[u8]) -> Vec<u8> {
        let rep = self.call(
            NFS_PROGRAM,
            NFSPROC3_CREATE,
            &v3more::create_args(dir, name),
        );
        nfs_wire::v3call::parse_create(&rep).expect("CREATE")
    }

    /// WRITE FILE_SYNC at 0; returns the nfsstat3.
    pub fn write(&mut self, fh: &[u8], data: &[u8]) -> u32 {
        let args = v3more::write_args(fh, 0, FILE_SYNC, data);
        let rep = self.call(NFS_PROGRAM, NFSPROC3_WRITE, &args);
        nfs_wire::v3call::status(&rep)
    }
}

// ---------------------------------------------------------------------------------
// The status codes the conformance tests (gateway/tests/nfs41_conf/) check, written
// from RFC 8881 §15.1 (not taken from the gateway's own tables, so a wrong constant
// there fails a test here). Operation numbers and argument values are nfs-wire's,
// checked against the RFC by its own tests.

pub const NFS4ERR_NOENT: u32 = 2;
pub const NFS4ERR_EXIST: u32 = 17;
pub const NFS4ERR_XDEV: u32 = 18;
pub const NFS4ERR_NOTDIR: u32 = 20;
pub const NFS4ERR_ISDIR: u32 = 21;
pub const NFS4ERR_INVAL: u32 = 22;
pub const NFS4ERR_STALE: u32 = 70;
pub const NFS4ERR_NOTSUPP: u32 = 10004;
pub const NFS4ERR_DELAY: u32 = 10008;
pub const NFS4ERR_DENIED: u32 = 10010;
pub const NFS4ERR_GRACE: u32 = 10013;
pub const NFS4ERR_SHARE_DENIED: u32 = 10015;
pub const NFS4ERR_CLID_INUSE: u32 = 10017;
pub const NFS4ERR_NOFILEHANDLE: u32 = 10020;
pub const NFS4ERR_STALE_CLIENTID: u32 = 10022;
pub const NFS4ERR_OLD_STATEID: u32 = 10024;
pub const NFS4ERR_BAD_STATEID: u32 = 10025;
pub const NFS4ERR_BAD_SEQID: u32 = 10026;
pub const NFS4ERR_SYMLINK: u32 = 10029;
pub const NFS4ERR_NO_GRACE: u32 = 10033;
pub const NFS4ERR_RECLAIM_BAD: u32 = 10034;
pub const NFS4ERR_BADXDR: u32 = 10036;
pub const NFS4ERR_LOCKS_HELD: u32 = 10037;
pub const NFS4ERR_OPENMODE: u32 = 10038;
pub const NFS4ERR_BADSESSION: u32 = 10052;
pub const NFS4ERR_BADSLOT: u32 = 10053;
pub const NFS4ERR_COMPLETE_ALREADY: u32 = 10054;
pub const NFS4ERR_SEQ_MISORDERED: u32 = 10063;
pub const NFS4ERR_SEQUENCE_POS: u32 = 10064;
pub const NFS4ERR_REQ_TOO_BIG: u32 = 10065;
pub const NFS4ERR_RETRY_UNCACHED_REP: u32 = 10068;
pub const NFS4ERR_TOO_MANY_OPS: u32 = 10070;
pub const NFS4ERR_OP_NOT_IN_SESSION: u32 = 10071;
pub const NFS4ERR_CLIENTID_BUSY: u32 = 10074;
pub const NFS4ERR_SEQ_FALSE_RETRY: u32 = 10076;
pub const NFS4ERR_NOT_ONLY_OP: u32 = 10081;

/// An NFSv4.1 client on one TCP connection that is also its back channel (RFC 8881
/// §2.10.3.1): CB_NULL calls arriving while it waits are answered at once, other
/// callbacks are kept in `callbacks` for the test to answer.
pub struct Tcp41 {
    pub s: TcpStream,
    pub callbacks: VecDeque<Vec<u8>>,
    xid: u32,
    pub clientid: u64,
    pub sid: [u8; 16],
    /// Next sequence id of slot 0.
    pub seq: u32,
    /// What the session's fore channel was granted.
    pub fore: Fore,
    /// The AUTH_SYS uid of the calls.
    pub uid: u32,
    /// CB_NULL calls answered (the gateway's back-channel probes).
    pub cb_nulls: u32,
    /// The COMPOUNDs' minor version (1; 2 for NFSv4.2's operations).
    pub minor: u32,
}

impl Tcp41 {
    pub fn connect(addr: SocketAddr) -> Tcp41 {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_nodelay(true).unwrap();
        Tcp41 {
            s,
            callbacks: VecDeque::new(),
            xid: 0x4100,
            clientid: 0,
            sid: [0; 16],
            seq: 1,
            fore: Fore::default(),
            uid: 0,
            cb_nulls: 0,
            minor: 1,
        }
    }

    fn send_record(&mut self, body: &[u8]) {
        use std::io::Write;
        self.s
            .write_all(&rpccall::record(body).expect("one fragment"))
            .unwrap();
    }

    fn read_record(&mut self) -> std::io::Result<Vec<u8>> {
        use std::io::Read;
        let mut out = Vec::new();
        loop {
            let mut mark = [0u8; 4];
            self.s.read_exact(&mut mark)?;
            let m = u32::from_be_bytes(mark);
            let at = out.len();
            out.resize(at + (m & 0x7fff_ffff) as usize, 0);
            self.s.read_exact(&mut out[at..])?;
            if m & 0x8000_0000 != 0 {
                return Ok(out);
            }
        }
    }

    /// A record from the gateway that is a CALL (msg_type 0) is a callback: CB_NULL is
    /// answered here, anything else queued. Returns true when it was a callback.
    fn take_callback(&mut self, rec: &[u8]) -> bool {
        if rec.len() < 8 || rec[4..8] != [0, 0, 0, 0] {
            return false;
        }
        let (h, _) = rpc::decode_call(rec).expect("a callback is an RPC CALL");
        if h.proc_ == 0 {
            self.cb_nulls += 1;
            self.send_record(&callback_reply(h.xid, None));
        } else {
            self.callbacks.push_back(rec.to_vec());
        }
        true
    }

    /// Sends COMPOUND `args` with `xid`; the RPC reply's results (COMPOUND4res).
    pub fn call_xid(&mut self, xid: u32, args: &[u8]) -> Vec<u8> {
        let cred = rpccall::sys(self.uid);
        let call = rpccall::call(xid, NFS_PROGRAM, NFS_V4, NFSPROC4_COMPOUND, &cred, args);
        self.send_record(&call);
        loop {
            let rec = self.read_record().expect("a COMPOUND reply");
            if self.take_callback(&rec) {
                continue;
            }
            let (x, st, at) = rpc::decode_reply(&rec).unwrap();
            assert_eq!(x, xid, "reply to our call");
            assert_eq!(st, rpc::ReplyStatus::Accepted(rpc::Accept::Success));
            return rec[at..].to_vec();
        }
    }

    pub fn compound(&mut self, ops: &Ops) -> Res {
        self.xid += 1;
        let xid = self.xid;
        let args = ops.args_with(b"", self.minor);
        parse_res(&self.call_xid(xid, &args))
    }

    /// SEQUENCE (slot 0, the next sequence id) followed by what `f` adds.
    pub fn run(&mut self, f: impl FnOnce(Ops) -> Ops) -> Res {
        let ops = f(Ops::new().sequence(self.sid, self.seq));
        self.seq += 1;
        self.compound(&ops)
    }

    /// As `run`, checking SEQUENCE succeeded; a reader after its result and the
    /// COMPOUND's status.
    pub fn seq_run(&mut self, f: impl FnOnce(Ops) -> Ops) -> (u32, Res) {
        let res = self.run(f);
        let mut r = res.reader();
        assert_eq!(expect_op(&mut r, OP_SEQUENCE), NFS4_OK, "SEQUENCE");
        (res.status, res)
    }

    /// EXCHANGE_ID (verifier `verf`): (clientid, sequence id for CREATE_SESSION, flags).
    pub fn exchange_id(&mut self, owner: &[u8], verf: [u8; 8]) -> (u64, u32, u32) {
        let res = self.compound(&Ops::new().exchange_id(verf, owner));
        assert_eq!(res.status, NFS4_OK, "EXCHANGE_ID");
        let mut r = res.reader();
        expect_op(&mut r, OP_EXCHANGE_ID);
        (r.u64().unwrap(), r.u32().unwrap(), r.u32().unwrap())
    }

    /// EXCHANGE_ID + CREATE_SESSION (`flags`; CONN_BACK_CHAN makes this connection the
    /// back channel); the session becomes this client's.
    pub fn session(&mut self, owner: &[u8], flags: u32) {
        let (clientid, seq, _) = self.exchange_id(owner, [7; 8]);
        self.create_session(clientid, seq, flags);
    }

    /// `session` for a client that names its implementation in EXCHANGE_ID
    /// (eia_client_impl_id: nii_domain, nii_name).
    pub fn session_as(&mut self, owner: &[u8], flags: u32, impl_id: (&str, &str)) {
        let res = self.compound(&Ops::new().exchange_id_as([7; 8], owner, impl_id));
        assert_eq!(res.status, NFS4_OK, "EXCHANGE_ID");
        let mut r = res.reader();
        expect_op(&mut r, OP_EXCHANGE_ID);
        let (clientid, seq) = (r.u64().unwrap(), r.u32().unwrap());
        self.create_session(clientid, seq, flags);
    }

    fn create_session(&mut self, clientid: u64, seq: u32, flags: u32) {
        let res = self.compound(&Ops::new().create_session_tcp(clientid, seq, flags, 8));
        assert_eq!(res.status, NFS4_OK, "CREATE_SESSION");
        let mut r = res.reader();
        expect_op(&mut r, OP_CREATE_SESSION);
        let (sid, _, _, fore) = read_create_session(&mut r);
        self.sid = sid;
        self.fore = fore;
        self.clientid = clientid;
        self.seq = 1;
    }

    /// `session` and RECLAIM_COMPLETE (outside a grace period new state needs it
    /// after a restart only, but Linux sends it always: so do the tests).
    pub fn ready(addr: SocketAddr, owner: &[u8]) -> Tcp41 {
        let mut c = Tcp41::connect(addr);
        c.session(owner, 0);
        let (st, _) = c.seq_run(|o| o.reclaim_complete());
        assert_eq!(st, NFS4_OK, "RECLAIM_COMPLETE");
        c
    }

    /// Waits up to `wait` for a callback other than CB_NULL.
    pub fn next_callback(&mut self, wait: Duration) -> Option<Vec<u8>> {
        let deadline = Instant::now() + wait;
        while self.callbacks.is_empty() && Instant::now() < deadline {
            self.s
                .set_read_timeout(Some(deadline - Instant::now() + Duration::from_millis(1)))
                .unwrap();
            let Ok(rec) = self.read_record() else { break };
            assert!(self.take_callback(&rec), "only callbacks arrive unasked");
        }
        self.s
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        self.callbacks.pop_front()
    }

    /// Answers a CB_COMPOUND (CB_SEQUENCE + CB_OFFLOAD, NFSv4.2) with OK; what it said.
    pub fn answer_offload(&mut self, rec: &[u8]) -> nfs_wire::v4cb::CbOffload {
        let (xid, what) = nfs_wire::v4cb::decode_offload(rec).unwrap_or_else(|e| panic!("{e}"));
        self.send_record(&nfs_wire::v4cb::offload_reply(xid, &what));
        what
    }

    /// Answers a CB_COMPOUND (CB_SEQUENCE + CB_GETATTR) with OK and these size and
    /// change attributes (RFC 8881 §20.1); what it asked.
    pub fn answer_getattr(&mut self, rec: &[u8], size: u64, change: u64) -> v4cb::CbGetattr {
        let (xid, what) = v4cb::decode_getattr(rec).unwrap_or_else(|e| panic!("{e}"));
        self.send_record(&v4cb::getattr_reply(xid, &what, size, change));
        what
    }

    /// Answers a CB_COMPOUND (CB_SEQUENCE + CB_RECALL) with OK; what it recalled.
    pub fn answer(&mut self, rec: &[u8]) -> CbRecall {
        let (xid, what) = decode_callback(rec);
        let recall = what.expect("a CB_RECALL");
        self.send_record(&callback_reply(xid, Some(&recall)));
        recall
    }
}
