//! A small NFSv4.1 client for the in-process tests: COMPOUND encoders (the operations
//! the back-channel tests need), a session over `engine::rdma::client::RdmaClient`
//! whose callbacks (RFC 8167 reverse calls) are collected while forward calls wait,
//! CB_NULL / CB_COMPOUND (CB_SEQUENCE + CB_RECALL) replies, and NFSv3 over TCP for
//! the conflicting writer.
#![allow(dead_code)]

use engine::fabric::soft::SoftFabric;
use engine::rdma::client::{ClientOptions, RdmaClient, SubmitError};
use engine::rpc::{self, AuthSys, Cred};
use engine::rpcrdma::requester::CallShape;
use engine::xdr::{XdrReader, XdrResult, XdrWriter};
use std::collections::VecDeque;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

pub const NFS4_OK: u32 = 0;
pub const NFS3ERR_JUKEBOX: u32 = 10008;
pub const CB_PROG: u32 = 0x4000_0000;
pub const CONN_BACK_CHAN: u32 = 0x2;
pub const SEQ4_STATUS_CB_PATH_DOWN: u32 = 0x1;

pub const OP_CLOSE: u32 = 4;
pub const OP_DELEGRETURN: u32 = 8;
pub const OP_GETFH: u32 = 10;
pub const OP_OPEN: u32 = 18;
pub const OP_PUTFH: u32 = 22;
pub const OP_PUTROOTFH: u32 = 24;
pub const OP_READ: u32 = 25;
pub const OP_BACKCHANNEL_CTL: u32 = 40;
pub const OP_BIND_CONN_TO_SESSION: u32 = 41;
pub const OP_EXCHANGE_ID: u32 = 42;
pub const OP_CREATE_SESSION: u32 = 43;
pub const OP_SEQUENCE: u32 = 53;
pub const OP_RECLAIM_COMPLETE: u32 = 58;
pub const OP_CB_SEQUENCE: u32 = 11;
pub const OP_CB_RECALL: u32 = 4;

/// One COMPOUND's operations, encoded as they are added.
pub struct Ops {
    buf: Vec<u8>,
    pub n: u32,
}

fn enc(f: impl FnOnce(&mut XdrWriter) -> XdrResult<()>) -> Vec<u8> {
    let mut b = vec![0u8; 256 << 10];
    let mut w = XdrWriter::new(&mut b);
    f(&mut w).unwrap();
    let n = w.position();
    b.truncate(n);
    b
}

impl Default for Ops {
    fn default() -> Self {
        Self::new()
    }
}

impl Ops {
    pub fn new() -> Ops {
        Ops {
            buf: Vec::new(),
            n: 0,
        }
    }

    fn op(mut self, f: impl FnOnce(&mut XdrWriter) -> XdrResult<()>) -> Ops {
        self.buf.extend(enc(f));
        self.n += 1;
        self
    }

    pub fn exchange_id(self, owner: &[u8]) -> Ops {
        self.op(|w| {
            w.u32(OP_EXCHANGE_ID)?;
            w.opaque_fixed(&[7; 8])?;
            w.opaque_var(owner)?;
            w.u32(0)?;
            w.u32(0)?; // SP4_NONE
            w.u32(0) // no implementation id
        })
    }

    /// CREATE_SESSION with `flags`; the back channel as Linux asks over RDMA
    /// (ca_maxrequestsize = inline threshold − 28), `back_slots` slots, AUTH_NONE.
    pub fn create_session(self, clientid: u64, seq: u32, flags: u32, back_slots: u32) -> Ops {
        self.op(|w| {
            w.u32(OP_CREATE_SESSION)?;
            w.u64(clientid)?;
            w.u32(seq)?;
            w.u32(flags)?;
            for v in [0, 4068, 4068, 2048, 16, 8, 0] {
                w.u32(v)?;
            }
            for v in [0, 4068, 4068, 0, 2, back_slots, 0] {
                w.u32(v)?;
            }
            w.u32(CB_PROG)?;
            w.u32(1)?;
            w.u32(0) // AUTH_NONE
        })
    }

    pub fn sequence(self, sid: [u8; 16], seq: u32) -> Ops {
        self.op(|w| {
            w.u32(OP_SEQUENCE)?;
            w.opaque_fixed(&sid)?;
            w.u32(seq)?;
            w.u32(0)?;
            w.u32(0)?;
            w.bool(false)
        })
    }

    pub fn reclaim_complete(self) -> Ops {
        self.op(|w| {
            w.u32(OP_RECLAIM_COMPLETE)?;
            w.bool(false)
        })
    }

    /// BIND_CONN_TO_SESSION with CDFC4_BACK_OR_BOTH (what Linux sends on reconnect).
    pub fn bind_conn(self, sid: [u8; 16]) -> Ops {
        self.op(|w| {
            w.u32(OP_BIND_CONN_TO_SESSION)?;
            w.opaque_fixed(&sid)?;
            w.u32(0x7)?;
            w.bool(false)
        })
    }

    /// BACKCHANNEL_CTL with the same callback program, AUTH_NONE (the gateway probes
    /// the back channel again).
    pub fn backchannel_ctl(self) -> Ops {
        self.op(|w| {
            w.u32(OP_BACKCHANNEL_CTL)?;
            w.u32(CB_PROG)?;
            w.u32(1)?;
            w.u32(0)
        })
    }

    pub fn putrootfh(self) -> Ops {
        self.op(|w| w.u32(OP_PUTROOTFH))
    }

    pub fn putfh(self, fh: &[u8]) -> Ops {
        self.op(|w| {
            w.u32(OP_PUTFH)?;
            w.opaque_var(fh)
        })
    }

    pub fn getfh(self) -> Ops {
        self.op(|w| w.u32(OP_GETFH))
    }

    /// OPEN CLAIM_NULL `name` for reading, no create, WANT_NO_PREFERENCE.
    pub fn open_read(self, clientid: u64, owner: &[u8], name: &[u8]) -> Ops {
        self.op(|w| {
            w.u32(OP_OPEN)?;
            w.u32(0)?;
            w.u32(1)?; // OPEN4_SHARE_ACCESS_READ
            w.u32(0)?;
            w.u64(clientid)?;
            w.opaque_var(owner)?;
            w.u32(0)?; // OPEN4_NOCREATE
            w.u32(0)?; // CLAIM_NULL
            w.opaque_var(name)
        })
    }

    pub fn read(self, stateid: &[u8; 16], offset: u64, count: u32) -> Ops {
        self.op(|w| {
            w.u32(OP_READ)?;
            w.opaque_fixed(stateid)?;
            w.u64(offset)?;
            w.u32(count)
        })
    }

    pub fn delegreturn(self, stateid: &[u8; 16]) -> Ops {
        self.op(|w| {
            w.u32(OP_DELEGRETURN)?;
            w.opaque_fixed(stateid)
        })
    }

    /// `self`'s operations followed by `more`'s.
    pub fn append(mut self, more: Ops) -> Ops {
        self.buf.extend_from_slice(&more.buf);
        self.n += more.n;
        self
    }

    /// The COMPOUND4args: tag, minor version 1, the operations.
    pub fn args(&self) -> Vec<u8> {
        let mut a = enc(|w| {
            w.opaque_var(b"")?;
            w.u32(1)?;
            w.u32(self.n)
        });
        a.extend_from_slice(&self.buf);
        a
    }
}

/// A COMPOUND4res: status and a reader over the results.
pub struct Res {
    pub status: u32,
    pub body: Vec<u8>,
    raw: Vec<u8>,
}

impl Res {
    pub fn parse(rep: &[u8]) -> Res {
        let mut r = XdrReader::new(rep);
        let status = r.u32().unwrap();
        r.opaque_var(1024).unwrap();
        r.u32().unwrap();
        Res {
            status,
            body: r.rest().to_vec(),
            raw: rep.to_vec(),
        }
    }

    pub fn reader(&self) -> XdrReader<'_> {
        XdrReader::new(&self.body)
    }
}

/// Reads `op`'s result header (op number, status) and checks it.
pub fn expect_op(r: &mut XdrReader, op: u32) -> u32 {
    assert_eq!(r.u32().unwrap(), op, "result of op {op}");
    r.u32().unwrap()
}

/// SEQUENCE4resok after its status: returns sr_status_flags.
pub fn skip_sequence_ok(r: &mut XdrReader) -> u32 {
    r.skip(16 + 16).unwrap();
    r.u32().unwrap()
}

/// What an OPEN granted: its stateid and the read delegation's, if any.
#[derive(Debug, Clone, Copy)]
pub struct Opened {
    pub stateid: [u8; 16],
    pub deleg: Option<[u8; 16]>,
}

/// OPEN4resok after its status (RFC 8881 §18.16.2).
pub fn parse_open_ok(r: &mut XdrReader) -> Opened {
    let mut stateid = [0u8; 16];
    stateid.copy_from_slice(r.opaque_fixed(16).unwrap());
    r.skip(4 + 16 + 4).unwrap(); // change_info4, rflags
    let n = r.u32().unwrap();
    r.skip(4 * n as usize).unwrap(); // attrset
    let deleg = match r.u32().unwrap() {
        0 => None, // OPEN_DELEGATE_NONE
        3 => {
            // OPEN_DELEGATE_NONE_EXT: only WND4_CONTENTION (1) and WND4_RESOURCE (2)
            // carry a bool (open_none_delegation4).
            if matches!(r.u32().unwrap(), 1 | 2) {
                r.u32().unwrap();
            }
            None
        }
        1 => {
            let mut s = [0u8; 16];
            s.copy_from_slice(r.opaque_fixed(16).unwrap());
            r.u32().unwrap(); // recall
            r.skip(12).unwrap(); // ace type, flag, mask
            r.opaque_var(1024).unwrap(); // who
            Some(s)
        }
        t => panic!("unexpected delegation type {t}"),
    };
    Opened { stateid, deleg }
}

/// A CB_COMPOUND as the client sees it: CB_SEQUENCE's session and sequence id, and
/// CB_RECALL's stateid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CbRecall {
    pub session: [u8; 16],
    pub seqid: u32,
    pub stateid: [u8; 16],
}

/// What a callback is: CB_NULL (None) or a CB_COMPOUND with CB_SEQUENCE + CB_RECALL.
pub fn decode_callback(rec: &[u8]) -> (u32, Option<CbRecall>) {
    let (h, at) = rpc::decode_call(rec).expect("a callback is an RPC CALL");
    assert_eq!((h.prog, h.vers), (CB_PROG, 1), "the callback program");
    if h.proc_ == 0 {
        return (h.xid, None);
    }
    assert_eq!(h.proc_, 1, "CB_COMPOUND");
    let mut r = XdrReader::new(&rec[at..]);
    r.opaque_var(1024).unwrap();
    assert_eq!(r.u32().unwrap(), 1, "minor version");
    r.u32().unwrap();
    assert_eq!(r.u32().unwrap(), 2, "CB_SEQUENCE + CB_RECALL");
    assert_eq!(r.u32().unwrap(), OP_CB_SEQUENCE);
    let mut session = [0u8; 16];
    session.copy_from_slice(r.opaque_fixed(16).unwrap());
    let seqid = r.u32().unwrap();
    r.skip(12).unwrap();
    r.u32().unwrap(); // no referring call lists
    assert_eq!(r.u32().unwrap(), OP_CB_RECALL);
    let mut stateid = [0u8; 16];
    stateid.copy_from_slice(r.opaque_fixed(16).unwrap());
    (
        h.xid,
        Some(CbRecall {
            session,
            seqid,
            stateid,
        }),
    )
}

/// The REPLY to a callback: accepted SUCCESS, then for a CB_COMPOUND the results
/// CB_SEQUENCE OK (echoing session and sequence id) and CB_RECALL OK.
pub fn callback_reply(xid: u32, recall: Option<&CbRecall>) -> Vec<u8> {
    enc(|w| {
        rpc::write_accepted(w, xid, rpc::Accept::Success)?;
        if let Some(c) = recall {
            w.u32(NFS4_OK)?;
            w.opaque_var(b"")?;
            w.u32(2)?;
            w.u32(OP_CB_SEQUENCE)?;
            w.u32(NFS4_OK)?;
            w.opaque_fixed(&c.session)?;
            w.u32(c.seqid)?;
            w.u32(0)?;
            w.u32(0)?;
            w.u32(0)?;
            w.u32(OP_CB_RECALL)?;
            w.u32(NFS4_OK)?;
        }
        Ok(())
    })
}

/// An NFSv4.1 client on one RPC-over-RDMA connection (soft provider). Callbacks that
/// arrive while it waits for a forward reply are kept in `callbacks`.
pub struct V41 {
    pub c: RdmaClient,
    pub callbacks: VecDeque<(u32, Vec<u8>)>,
    next_xid: u32,
}

pub fn cred() -> Cred {
    Cred::Sys(AuthSys::new(0, 0, &[]))
}

impl V41 {
    /// Connects with `credits` forward credits and `bc` reverse credits (RFC 8167).
    pub fn connect(addr: SocketAddr, credits: u32, bc: u32) -> V41 {
        let opts = ClientOptions {
            credits,
            max_io: 64 << 10,
            backchannel_credits: bc,
            ..ClientOptions::default()
        };
        let c = RdmaClient::connect(Box::new(SoftFabric::new().unwrap()), addr, opts)
            .expect("RDMA connect");
        V41 {
            c,
            callbacks: VecDeque::new(),
            next_xid: 1,
        }
    }

    /// An NFS (program 100003) version 4 call record for `proc_` with `args`.
    pub fn record(&mut self, proc_: u32, args: &[u8]) -> Vec<u8> {
        self.next_xid += 1;
        let mut b = enc(|w| rpc::write_call(w, self.next_xid, 100003, 4, proc_, &cred()));
        b.extend_from_slice(args);
        b
    }

    /// Moves callbacks the client received into `callbacks`.
    pub fn collect(&mut self) {
        let q = &mut self.callbacks;
        self.c
            .take_callbacks(&mut |xid, rec| q.push_back((xid, rec.to_vec())));
    }

    /// Sends a COMPOUND and waits for its reply (collecting callbacks meanwhile).
    pub fn compound(&mut self, ops: &Ops) -> Res {
        let call = self.record(1, &ops.args());
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
                return Res::parse(&rep[at..]);
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
        let res = self.compound(&Ops::new().exchange_id(owner));
        assert_eq!(res.status, NFS4_OK, "EXCHANGE_ID");
        let mut r = res.reader();
        expect_op(&mut r, OP_EXCHANGE_ID);
        let clientid = r.u64().unwrap();
        let seq = r.u32().unwrap();
        let res = self.compound(&Ops::new().create_session(clientid, seq, flags, back_slots));
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
        let mut b = enc(|w| rpc::write_call(w, self.xid, prog, 3, proc_, &cred()));
        b.extend_from_slice(args);
        let rep = crate::common::tcp_call(&mut self.s, &b).unwrap();
        let (x, st, at) = rpc::decode_reply(&rep).unwrap();
        assert_eq!(x, self.xid);
        assert_eq!(st, rpc::ReplyStatus::Accepted(rpc::Accept::Success));
        rep[at..].to_vec()
    }

    pub fn mount_root(&mut self) -> Vec<u8> {
        let rep = self.call(100005, 1, &enc(|w| w.string(b"/")));
        let mut r = XdrReader::new(&rep);
        assert_eq!(r.u32().unwrap(), 0, "MNT");
        r.opaque_var(64).unwrap().to_vec()
    }

    pub fn create(&mut self, dir: &[u8], name: &[u8]) -> Vec<u8> {
        let rep = self.call(
            100003,
            8,
            &enc(|w| {
                w.opaque_var(dir)?;
                w.string(name)?;
                w.u32(0)?; // UNCHECKED
                for _ in 0..4 {
                    w.bool(false)?;
                }
                w.u32(0)?;
                w.u32(0)
            }),
        );
        let mut r = XdrReader::new(&rep);
        assert_eq!(r.u32().unwrap(), 0, "CREATE");
        assert!(r.bool().unwrap());
        r.opaque_var(64).unwrap().to_vec()
    }

    /// WRITE FILE_SYNC at 0; returns the nfsstat3.
    pub fn write(&mut self, fh: &[u8], data: &[u8]) -> u32 {
        let rep = self.call(
            100003,
            7,
            &enc(|w| {
                w.opaque_var(fh)?;
                w.u64(0)?;
                w.u32(data.len() as u32)?;
                w.u32(2)?;
                w.opaque_var(data)
            }),
        );
        XdrReader::new(&rep).u32().unwrap()
    }
}

// ---------------------------------------------------------------------------------
// The conformance tests' client (gateway/tests/nfs41_conf/): every status code and
// operation number they check, written from RFC 8881 §15.1 and §16.2 (not taken
// from the gateway's own tables, so a wrong constant there fails a test here).

pub const NFS4ERR_NOENT: u32 = 2;
pub const NFS4ERR_EXIST: u32 = 17;
pub const NFS4ERR_ISDIR: u32 = 21;
pub const NFS4ERR_INVAL: u32 = 22;
pub const NFS4ERR_NOTSUPP: u32 = 10004;
pub const NFS4ERR_DELAY: u32 = 10008;
pub const NFS4ERR_DENIED: u32 = 10010;
pub const NFS4ERR_GRACE: u32 = 10013;
pub const NFS4ERR_SHARE_DENIED: u32 = 10015;
pub const NFS4ERR_CLID_INUSE: u32 = 10017;
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

pub const OP_CREATE: u32 = 6;
pub const OP_LOCK: u32 = 12;
pub const OP_LOCKT: u32 = 13;
pub const OP_LOCKU: u32 = 14;
pub const OP_LOOKUP: u32 = 15;
pub const OP_OPEN_DOWNGRADE: u32 = 21;
pub const OP_WRITE: u32 = 38;
pub const OP_RELEASE_LOCKOWNER: u32 = 39;
pub const OP_DESTROY_SESSION: u32 = 44;
pub const OP_FREE_STATEID: u32 = 45;
pub const OP_TEST_STATEID: u32 = 55;
pub const OP_DESTROY_CLIENTID: u32 = 57;

/// OPEN4_SHARE_ACCESS_* and OPEN4_SHARE_DENY_* (RFC 8881 §18.16.1).
pub const ACCESS_READ: u32 = 1;
pub const ACCESS_WRITE: u32 = 2;
pub const ACCESS_BOTH: u32 = 3;
pub const DENY_NONE: u32 = 0;
pub const DENY_READ: u32 = 1;
pub const DENY_WRITE: u32 = 2;
pub const DENY_BOTH: u32 = 3;
/// OPEN4_SHARE_ACCESS_WANT_NO_DELEG (RFC 8881 §18.16.1).
pub const WANT_NO_DELEG: u32 = 0x0400;
/// nfs_lock_type4 (RFC 8881 §18.10.1).
pub const READ_LT: u32 = 1;
pub const WRITE_LT: u32 = 2;
/// SEQ4_STATUS_RECALLABLE_STATE_REVOKED and friends are not checked; EXCHGID4 flags:
pub const EXCHGID4_FLAG_CONFIRMED_R: u32 = 0x8000_0000;

/// The special stateids (RFC 8881 §8.2.3): anonymous (all zero), READ bypass (all
/// ones), current (seqid 1, other zero).
pub const ANONYMOUS: [u8; 16] = [0; 16];
pub const BYPASS: [u8; 16] = [0xff; 16];
pub const CURRENT: [u8; 16] = [0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];

/// A stateid with its seqid replaced (RFC 8881 §8.2.2).
pub fn with_seqid(sid: &[u8; 16], seqid: u32) -> [u8; 16] {
    let mut s = *sid;
    s[..4].copy_from_slice(&seqid.to_be_bytes());
    s
}

pub fn seqid_of(sid: &[u8; 16]) -> u32 {
    u32::from_be_bytes(sid[..4].try_into().unwrap())
}

/// How an OPEN creates (createhow4, RFC 8881 §18.16.1), or `NoCreate`.
#[derive(Clone, Copy)]
pub enum How {
    NoCreate,
    Unchecked,
    Guarded,
    Exclusive41([u8; 8]),
}

/// Which file an OPEN names (open_claim4), with the values the tests use.
#[derive(Clone, Copy)]
pub enum Claim<'a> {
    Null(&'a [u8]),
    /// CLAIM_PREVIOUS with OPEN_DELEGATE_NONE.
    Previous,
    Fh,
}

impl Ops {
    /// Any encoded operation (a test's own, or a deliberately broken one).
    pub fn raw(self, f: impl FnOnce(&mut XdrWriter) -> XdrResult<()>) -> Ops {
        self.op(f)
    }

    /// EXCHANGE_ID with `verifier`, no flags, SP4_NONE.
    pub fn exchange_id_v(self, owner: &[u8], verifier: [u8; 8]) -> Ops {
        self.op(|w| {
            w.u32(OP_EXCHANGE_ID)?;
            w.opaque_fixed(&verifier)?;
            w.opaque_var(owner)?;
            w.u32(0)?;
            w.u32(0)?;
            w.u32(0)
        })
    }

    /// CREATE_SESSION for TCP: `slots` fore slots of 1 MiB requests, 4 KiB cached
    /// replies, 16 operations; 2 back slots; AUTH_NONE callbacks.
    pub fn create_session_tcp(self, clientid: u64, seq: u32, flags: u32, slots: u32) -> Ops {
        self.create_session_sized(clientid, seq, flags, slots, 1 << 20)
    }

    /// As `create_session_tcp` with ca_maxrequestsize `max_request`.
    pub fn create_session_sized(
        self,
        clientid: u64,
        seq: u32,
        flags: u32,
        slots: u32,
        max_request: u32,
    ) -> Ops {
        self.op(|w| {
            w.u32(OP_CREATE_SESSION)?;
            w.u64(clientid)?;
            w.u32(seq)?;
            w.u32(flags)?;
            for v in [0, max_request, 1 << 20, 4096, 16, slots, 0] {
                w.u32(v)?;
            }
            for v in [0, 4096, 4096, 0, 2, 2, 0] {
                w.u32(v)?;
            }
            w.u32(CB_PROG)?;
            w.u32(1)?;
            w.u32(0)
        })
    }

    /// SEQUENCE on any slot, with sa_highest_slotid = slot and sa_cachethis.
    pub fn sequence_at(self, sid: [u8; 16], seq: u32, slot: u32, cachethis: bool) -> Ops {
        self.op(|w| {
            w.u32(OP_SEQUENCE)?;
            w.opaque_fixed(&sid)?;
            w.u32(seq)?;
            w.u32(slot)?;
            w.u32(slot)?;
            w.bool(cachethis)
        })
    }

    pub fn destroy_session(self, sid: [u8; 16]) -> Ops {
        self.op(|w| {
            w.u32(OP_DESTROY_SESSION)?;
            w.opaque_fixed(&sid)
        })
    }

    pub fn destroy_clientid(self, clientid: u64) -> Ops {
        self.op(|w| {
            w.u32(OP_DESTROY_CLIENTID)?;
            w.u64(clientid)
        })
    }

    /// RECLAIM_COMPLETE with rca_one_fs.
    pub fn reclaim_complete_fs(self, one_fs: bool) -> Ops {
        self.op(|w| {
            w.u32(OP_RECLAIM_COMPLETE)?;
            w.bool(one_fs)
        })
    }

    /// OPEN4args (RFC 8881 §18.16.1): seqid 0 (ignored in 4.1), `access` (want flags
    /// included), `deny`, the open owner, `how`, `claim`.
    pub fn open(
        self,
        clientid: u64,
        owner: &[u8],
        access: u32,
        deny: u32,
        how: How,
        claim: Claim,
    ) -> Ops {
        self.op(|w| {
            w.u32(OP_OPEN)?;
            w.u32(0)?;
            w.u32(access)?;
            w.u32(deny)?;
            w.u64(clientid)?;
            w.opaque_var(owner)?;
            match how {
                How::NoCreate => w.u32(0)?,
                How::Unchecked | How::Guarded => {
                    w.u32(1)?;
                    w.u32(if matches!(how, How::Unchecked) { 0 } else { 1 })?;
                    w.u32(0)?; // empty bitmap
                    w.u32(0)?; // empty attrlist
                }
                How::Exclusive41(v) => {
                    w.u32(1)?;
                    w.u32(3)?; // EXCLUSIVE4_1
                    w.opaque_fixed(&v)?;
                    w.u32(0)?;
                    w.u32(0)?;
                }
            }
            match claim {
                Claim::Null(name) => {
                    w.u32(0)?;
                    w.opaque_var(name)
                }
                Claim::Previous => {
                    w.u32(1)?;
                    w.u32(0) // OPEN_DELEGATE_NONE
                }
                Claim::Fh => w.u32(4),
            }
        })
    }

    pub fn open_downgrade(self, stateid: &[u8; 16], access: u32, deny: u32) -> Ops {
        self.op(|w| {
            w.u32(OP_OPEN_DOWNGRADE)?;
            w.opaque_fixed(stateid)?;
            w.u32(0)?;
            w.u32(access)?;
            w.u32(deny)
        })
    }

    pub fn close(self, stateid: &[u8; 16]) -> Ops {
        self.op(|w| {
            w.u32(OP_CLOSE)?;
            w.u32(0)?;
            w.opaque_fixed(stateid)
        })
    }

    /// LOCK by a new lock owner (open_to_lock_owner4) for the open `open_sid`.
    pub fn lock_new(
        self,
        kind: u32,
        offset: u64,
        length: u64,
        open_sid: &[u8; 16],
        clientid: u64,
        owner: &[u8],
    ) -> Ops {
        self.lock_with(kind, false, offset, length, |w| {
            w.bool(true)?;
            w.u32(0)?;
            w.opaque_fixed(open_sid)?;
            w.u32(0)?;
            w.u64(clientid)?;
            w.opaque_var(owner)
        })
    }

    /// LOCK by a lock owner that has `lock_sid` (exist_lock_owner4).
    pub fn lock_old(self, kind: u32, offset: u64, length: u64, lock_sid: &[u8; 16]) -> Ops {
        self.lock_with(kind, false, offset, length, |w| {
            w.bool(false)?;
            w.opaque_fixed(lock_sid)?;
            w.u32(0)
        })
    }

    /// LOCK with reclaim = true by a new lock owner (RFC 8881 §18.10.3).
    pub fn lock_reclaim(
        self,
        offset: u64,
        length: u64,
        open_sid: &[u8; 16],
        clientid: u64,
        owner: &[u8],
    ) -> Ops {
        self.lock_with(WRITE_LT, true, offset, length, |w| {
            w.bool(true)?;
            w.u32(0)?;
            w.opaque_fixed(open_sid)?;
            w.u32(0)?;
            w.u64(clientid)?;
            w.opaque_var(owner)
        })
    }

    fn lock_with(
        self,
        kind: u32,
        reclaim: bool,
        offset: u64,
        length: u64,
        locker: impl FnOnce(&mut XdrWriter) -> XdrResult<()>,
    ) -> Ops {
        self.op(|w| {
            w.u32(OP_LOCK)?;
            w.u32(kind)?;
            w.bool(reclaim)?;
            w.u64(offset)?;
            w.u64(length)?;
            locker(w)
        })
    }

    pub fn lockt(self, kind: u32, offset: u64, length: u64, clientid: u64, owner: &[u8]) -> Ops {
        self.op(|w| {
            w.u32(OP_LOCKT)?;
            w.u32(kind)?;
            w.u64(offset)?;
            w.u64(length)?;
            w.u64(clientid)?;
            w.opaque_var(owner)
        })
    }

    pub fn locku(self, kind: u32, lock_sid: &[u8; 16], offset: u64, length: u64) -> Ops {
        self.op(|w| {
            w.u32(OP_LOCKU)?;
            w.u32(kind)?;
            w.u32(0)?;
            w.opaque_fixed(lock_sid)?;
            w.u64(offset)?;
            w.u64(length)
        })
    }

    pub fn release_lockowner(self, clientid: u64, owner: &[u8]) -> Ops {
        self.op(|w| {
            w.u32(OP_RELEASE_LOCKOWNER)?;
            w.u64(clientid)?;
            w.opaque_var(owner)
        })
    }

    pub fn test_stateid(self, sids: &[[u8; 16]]) -> Ops {
        self.op(|w| {
            w.u32(OP_TEST_STATEID)?;
            w.u32(sids.len() as u32)?;
            for s in sids {
                w.opaque_fixed(s)?;
            }
            Ok(())
        })
    }

    pub fn free_stateid(self, sid: &[u8; 16]) -> Ops {
        self.op(|w| {
            w.u32(OP_FREE_STATEID)?;
            w.opaque_fixed(sid)
        })
    }

    /// WRITE FILE_SYNC4.
    pub fn write(self, stateid: &[u8; 16], offset: u64, data: &[u8]) -> Ops {
        self.op(|w| {
            w.u32(OP_WRITE)?;
            w.opaque_fixed(stateid)?;
            w.u64(offset)?;
            w.u32(2)?;
            w.opaque_var(data)
        })
    }

    pub fn lookup(self, name: &[u8]) -> Ops {
        self.op(|w| {
            w.u32(OP_LOOKUP)?;
            w.opaque_var(name)
        })
    }

    /// CREATE of a directory (NF4DIR) or, with `target`, a symlink (NF4LNK).
    pub fn create_obj(self, name: &[u8], target: Option<&[u8]>) -> Ops {
        self.op(|w| {
            w.u32(OP_CREATE)?;
            match target {
                Some(t) => {
                    w.u32(5)?;
                    w.opaque_var(t)?;
                }
                None => w.u32(2)?,
            }
            w.opaque_var(name)?;
            w.u32(0)?;
            w.u32(0)
        })
    }
}

impl Res {
    /// The whole COMPOUND4res as received: the bytes a replay must repeat.
    pub fn whole(&self) -> Vec<u8> {
        self.raw.clone()
    }
}

/// A reader after the COMPOUND's first result, a SEQUENCE that must have succeeded.
pub fn after_seq(res: &Res) -> XdrReader<'_> {
    let mut r = res.reader();
    assert_eq!(expect_op(&mut r, OP_SEQUENCE), NFS4_OK, "SEQUENCE");
    skip_sequence_ok(&mut r);
    r
}

/// The fore channel a CREATE_SESSION granted (channel_attrs4, RFC 8881 §18.36.2).
#[derive(Debug, Clone, Copy, Default)]
pub struct Fore {
    pub max_request: u32,
    pub max_response: u32,
    pub max_cached: u32,
    pub max_ops: u32,
    pub slots: u32,
}

/// CREATE_SESSION4resok after the status: (session id, sequence id, flags, fore).
pub fn read_create_session(r: &mut XdrReader) -> ([u8; 16], u32, u32, Fore) {
    let mut sid = [0u8; 16];
    sid.copy_from_slice(r.opaque_fixed(16).unwrap());
    let seq = r.u32().unwrap();
    let flags = r.u32().unwrap();
    r.u32().unwrap(); // ca_headerpadsize
    let fore = Fore {
        max_request: r.u32().unwrap(),
        max_response: r.u32().unwrap(),
        max_cached: r.u32().unwrap(),
        max_ops: r.u32().unwrap(),
        slots: r.u32().unwrap(),
    };
    (sid, seq, flags, fore)
}

/// A stateid result (OPEN_DOWNGRADE, CLOSE, LOCKU, LOCK OK): the stateid.
pub fn read_stateid(r: &mut XdrReader) -> [u8; 16] {
    let mut s = [0u8; 16];
    s.copy_from_slice(r.opaque_fixed(16).unwrap());
    s
}

/// LOCK4denied (RFC 8881 §18.10.2): offset, length, type, owner's clientid and name.
#[derive(Debug, PartialEq, Eq)]
pub struct Denied {
    pub offset: u64,
    pub length: u64,
    pub kind: u32,
    pub clientid: u64,
    pub owner: Vec<u8>,
}

pub fn read_denied(r: &mut XdrReader) -> Denied {
    Denied {
        offset: r.u64().unwrap(),
        length: r.u64().unwrap(),
        kind: r.u32().unwrap(),
        clientid: r.u64().unwrap(),
        owner: r.opaque_var(1024).unwrap().to_vec(),
    }
}

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
        }
    }

    fn send_record(&mut self, body: &[u8]) {
        use std::io::Write;
        let mut rec = (0x8000_0000u32 | body.len() as u32).to_be_bytes().to_vec();
        rec.extend_from_slice(body);
        self.s.write_all(&rec).unwrap();
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
        let cred = Cred::Sys(AuthSys::new(self.uid, self.uid, &[]));
        let mut b = enc(|w| rpc::write_call(w, xid, 100003, 4, 1, &cred));
        b.extend_from_slice(args);
        self.send_record(&b);
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
        Res::parse(&self.call_xid(xid, &ops.args()))
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
        let res = self.compound(&Ops::new().exchange_id_v(owner, verf));
        assert_eq!(res.status, NFS4_OK, "EXCHANGE_ID");
        let mut r = res.reader();
        expect_op(&mut r, OP_EXCHANGE_ID);
        (r.u64().unwrap(), r.u32().unwrap(), r.u32().unwrap())
    }

    /// EXCHANGE_ID + CREATE_SESSION (`flags`; CONN_BACK_CHAN makes this connection the
    /// back channel); the session becomes this client's.
    pub fn session(&mut self, owner: &[u8], flags: u32) {
        let (clientid, seq, _) = self.exchange_id(owner, [7; 8]);
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

    /// Answers a CB_COMPOUND (CB_SEQUENCE + CB_RECALL) with OK; what it recalled.
    pub fn answer(&mut self, rec: &[u8]) -> CbRecall {
        let (xid, what) = decode_callback(rec);
        let recall = what.expect("a CB_RECALL");
        self.send_record(&callback_reply(xid, Some(&recall)));
        recall
    }
}
