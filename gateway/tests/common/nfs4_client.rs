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
    let mut b = vec![0u8; 4096];
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
}

impl Res {
    fn parse(rep: &[u8]) -> Res {
        let mut r = XdrReader::new(rep);
        let status = r.u32().unwrap();
        r.opaque_var(1024).unwrap();
        r.u32().unwrap();
        Res {
            status,
            body: r.rest().to_vec(),
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
            // OPEN_DELEGATE_NONE_EXT
            if r.u32().unwrap() <= 1 {
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
