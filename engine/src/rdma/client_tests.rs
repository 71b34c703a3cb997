//! End-to-end tests of the requester over the `soft` provider: a tiny test responder on
//! another thread (its own `SoftFabric`) answers a test RPC program. It is strict where
//! the client is under test: it posts exactly as many Receives as it grants (so a
//! client that overran its credits or sent before posting would break the connection),
//! records how many calls it held at once, and can probe old rkeys.

use super::*;
use crate::fabric::soft::SoftFabric;
use crate::fabric::{access, CmEvent, Completion, Fabric, Mr, Op, Qp, QpCaps, SendWr, Sge};
use crate::fabric::{WcOpcode, WcStatus};
use crate::rpc::{self, Accept, Cred};
use crate::rpcrdma::privdata::{self, PrivData};
use crate::rpcrdma::requester::{CallShape, ResultAt};
use crate::rpcrdma::wire::{self, Chunks, Fixed, Limits, Segment};
use crate::xdr::{padded, XdrReader, XdrWriter};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

const PROG: u32 = 0x2000_0042;
const NULL: u32 = 0;
/// ECHO(opaque data) -> opaque data; `data` is DDP-eligible both ways.
const ECHO: u32 = 1;
/// BIG(n) -> n words 0..n (nothing eligible).
const BIG: u32 = 2;
/// The server answers RDMA_ERROR / ERR_CHUNK.
const ERR: u32 = 3;
/// The server sends six bad messages, then the reply.
const JUNK: u32 = 4;
/// SLOW(ms): the server sleeps, then answers like NULL.
const SLOW: u32 = 5;
/// The server disconnects.
const DIE: u32 = 6;
/// The server RDMA-Reads every segment the previous call advertised, then answers.
const PROBE: u32 = 7;
/// CB(n, flags): the server sends `n` callbacks (RFC 8167), then answers like NULL.
const CB: u32 = 8;
/// CB flag: the callbacks offer a write chunk.
const CB_CHUNKED: u32 = 1;
/// CB flag: the first callback reuses the forward call's XID (R8167-01).
const CB_SAME_XID: u32 = 2;
/// The NFSv4 callback program (what the callbacks call).
const CB_PROG: u32 = 0x4000_0000;
/// `rdma_credit` of the server's callbacks: its requested reverse credits.
const CB_REQUESTED: u32 = 1;

const INLINE: usize = 4096;
const DATA_AREA: usize = (2 << 20) + (256 << 10);
const STAGE_AT: usize = 2 << 20;
const TAG_READ: u64 = 1 << 40;

fn addr() -> SocketAddr {
    // Unique per process (the soft provider names its listener after the address) and
    // per test: tests run in parallel, and two sharing an address would reach each
    // other's servers. Each test module has its own port range.
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    let ip = std::net::Ipv4Addr::new(127, (pid >> 16) as u8, (pid >> 8) as u8, pid as u8);
    SocketAddr::new(ip.into(), 30000 + n)
}

#[derive(Debug, Clone, Copy)]
struct ServerOpts {
    grant: u32,
    remote_invalidate: bool,
    /// Accept with our RFC 8797 private data (else with none: 1024 each way).
    private_data: bool,
    /// Extra Receives for callback replies (R8167-08).
    bc: u32,
}

impl Default for ServerOpts {
    fn default() -> Self {
        ServerOpts {
            grant: 8,
            remote_invalidate: true,
            private_data: true,
            bc: 0,
        }
    }
}

#[derive(Debug, Default)]
struct ServerLog {
    /// (xid, proc) of every call, in arrival order.
    calls: Vec<(u32, u32)>,
    /// Calls held unanswered at once, per batch.
    batches: Vec<usize>,
    /// Replies sent with Send-With-Invalidate.
    swi: u32,
    /// Status of each probe Read.
    probes: Vec<WcStatus>,
    /// Things that should not happen.
    errors: Vec<String>,
    client_priv: Option<PrivData>,
    /// Byte length of every message received.
    sizes: Vec<usize>,
    /// Handle of every segment of every call, in arrival order.
    handles: Vec<u32>,
    /// Callback replies: transport header, whether its chunk lists were empty, and
    /// the RPC reply.
    cb_replies: Vec<(Fixed, bool, Vec<u8>)>,
    /// RDMA_ERRORs received: (xid, vers, credit, body).
    cb_errors: Vec<(u32, u32, u32, wire::ErrBody)>,
}

struct Server {
    fabric: SoftFabric,
    mem: Box<[u8]>,
    mr: Mr,
    qp: Option<Qp>,
    opts: ServerOpts,
    r_both: bool,
    /// Our reply inline threshold.
    send_limit: usize,
    log: ServerLog,
    backlog: VecDeque<Completion>,
    prev_segs: Vec<Segment>,
    next_wr: u64,
}

struct ServerHandle {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    join: Option<JoinHandle<ServerLog>>,
}

impl ServerHandle {
    fn finish(mut self) -> ServerLog {
        self.stop.store(true, Ordering::Relaxed);
        self.join.take().unwrap().join().unwrap()
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn spawn_server(opts: ServerOpts) -> ServerHandle {
    let addr = addr();
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let st = stop.clone();
    let join = thread::spawn(move || {
        let g = (opts.grant + opts.bc) as usize;
        let mut mem = vec![0u8; g * 2 * INLINE + g * DATA_AREA].into_boxed_slice();
        let mut fabric = SoftFabric::new().unwrap();
        // SAFETY: `mem` lives in the Server next to the fabric and outlives it (the
        // fabric is dropped first, being declared first).
        let mr = unsafe {
            fabric
                .register(mem.as_mut_ptr(), mem.len(), access::LOCAL_WRITE)
                .unwrap()
        };
        fabric.listen(addr).unwrap();
        let mut s = Server {
            fabric,
            mem,
            mr,
            qp: None,
            opts,
            r_both: false,
            send_limit: INLINE,
            log: ServerLog::default(),
            backlog: VecDeque::new(),
            prev_segs: Vec::new(),
            next_wr: 1,
        };
        tx.send(()).unwrap();
        s.run(&st);
        s.log
    });
    rx.recv().unwrap();
    ServerHandle {
        addr,
        stop,
        join: Some(join),
    }
}

impl Server {
    /// Receives posted (and buffers of each kind).
    fn g(&self) -> usize {
        (self.opts.grant + self.opts.bc) as usize
    }
    fn recv_at(&self, i: usize) -> usize {
        i * INLINE
    }
    fn send_at(&self, i: usize) -> usize {
        (self.g() + i) * INLINE
    }
    fn data_at(&self, i: usize) -> usize {
        2 * self.g() * INLINE + i * DATA_AREA
    }
    fn sge(&self, off: usize, len: usize) -> Sge {
        Sge {
            addr: self.mem.as_ptr() as u64 + off as u64,
            len: len as u32,
            lkey: self.mr.lkey,
        }
    }

    fn post_recv(&mut self, i: usize) {
        let sge = self.sge(self.recv_at(i), INLINE);
        if let Some(qp) = self.qp {
            if let Err(e) = self.fabric.post_recv(qp, i as u64, sge) {
                self.log.errors.push(format!("post_recv: {e}"));
            }
        }
    }

    fn run(&mut self, stop: &AtomicBool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut cqe = [Completion {
            wr_id: 0,
            qp: Qp(0),
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: 0,
            invalidated: None,
            vendor_err: 0,
        }; 16];
        while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
            self.cm_events();
            let mut batch = Vec::new();
            let mut last_new = Instant::now();
            loop {
                let before = batch.len();
                while let Some(c) = self.backlog.pop_front() {
                    self.take(c, &mut batch);
                }
                let n = self.fabric.poll_cq(&mut cqe);
                for c in cqe.iter().take(n) {
                    self.take(*c, &mut batch);
                }
                if batch.len() > before {
                    last_new = Instant::now();
                }
                // Hold calls for a moment to see how many the client has in flight.
                if batch.is_empty() || last_new.elapsed() > Duration::from_millis(2) {
                    break;
                }
            }
            if batch.is_empty() {
                thread::yield_now();
                continue;
            }
            self.log.batches.push(batch.len());
            for (i, len) in batch {
                self.handle(i, len);
            }
        }
    }

    fn cm_events(&mut self) {
        while let Some(ev) = self.fabric.poll_cm() {
            match ev {
                CmEvent::ConnectRequest(req) => {
                    let peer = privdata::decode(req.private_data.as_bytes());
                    self.log.client_priv = Some(peer);
                    let ours = if self.opts.private_data {
                        PrivData {
                            send_size: INLINE,
                            recv_size: INLINE,
                            remote_invalidate: self.opts.remote_invalidate,
                        }
                    } else {
                        PrivData::ABSENT
                    };
                    let t = privdata::thresholds(&ours, &peer);
                    self.r_both = t.remote_invalidate;
                    self.send_limit = t.send;
                    let pd = privdata::encode(&ours);
                    let pd: &[u8] = if self.opts.private_data { &pd } else { &[] };
                    let caps = QpCaps {
                        max_recv_wr: self.opts.grant + self.opts.bc,
                        ..QpCaps::default()
                    };
                    let qp = self.fabric.accept(req.id, &caps, pd).unwrap();
                    self.qp = Some(qp);
                    for i in 0..self.g() {
                        self.post_recv(i);
                    }
                }
                CmEvent::Disconnected { .. } => {}
                _ => {}
            }
        }
    }

    fn take(&mut self, c: Completion, batch: &mut Vec<(usize, usize)>) {
        if c.status != WcStatus::Success {
            if c.status != WcStatus::Flushed {
                self.log.errors.push(format!("completion {c:?}"));
            }
            return;
        }
        if c.opcode == WcOpcode::Recv {
            batch.push((c.wr_id as usize, c.byte_len as usize));
        }
    }

    /// Waits for the completion of `wr_id`, keeping Receives for later.
    fn wait(&mut self, wr_id: u64) -> WcStatus {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut cqe = [Completion {
            wr_id: 0,
            qp: Qp(0),
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: 0,
            invalidated: None,
            vendor_err: 0,
        }; 16];
        let mut found = None;
        while found.is_none() && Instant::now() < deadline {
            let n = self.fabric.poll_cq(&mut cqe);
            for c in cqe.iter().take(n) {
                if c.wr_id == wr_id {
                    found = Some(c.status);
                } else if c.opcode == WcOpcode::Recv {
                    self.backlog.push_back(*c);
                }
            }
        }
        found.unwrap_or(WcStatus::Fatal)
    }

    /// RDMA-Reads `segs` into `mem[at..]`, in list order; returns the bytes read.
    fn read(&mut self, segs: &[Segment], at: usize) -> Option<usize> {
        let mut off = at;
        for s in segs {
            let id = TAG_READ | self.next_wr;
            self.next_wr += 1;
            let sge = [self.sge(off, s.length as usize)];
            let wr = SendWr {
                wr_id: id,
                op: Op::Read {
                    remote_addr: s.offset,
                    rkey: s.handle,
                },
                sges: &sge,
                signaled: true,
            };
            self.fabric.post_send(self.qp?, &[wr]).ok()?;
            if self.wait(id) != WcStatus::Success {
                return None;
            }
            off += s.length as usize;
        }
        Some(off - at)
    }

    fn handle(&mut self, i: usize, len: usize) {
        let at = self.recv_at(i);
        let msg = self.mem[at..at + len].to_vec();
        self.log.sizes.push(len);
        let mut ch = Chunks::with_limits(&Limits::default());
        let decoded = wire::decode(&msg, &Limits::default(), &mut ch);
        if let Ok(wire::Header::Error { fixed, err }) = decoded {
            self.log
                .cb_errors
                .push((fixed.xid, fixed.vers, fixed.credit, err));
            self.post_recv(i);
            return;
        }
        if let Ok(wire::Header::Msg { fixed, payload_at }) = decoded {
            let p = &msg[payload_at..];
            if p.len() >= 8 && p[4..8] == rpc::MSG_REPLY.to_be_bytes() {
                self.log.cb_replies.push((fixed, ch.is_empty(), p.to_vec()));
                self.post_recv(i);
                return;
            }
        }
        let Ok(wire::Header::Msg { fixed, payload_at }) = decoded else {
            self.log.errors.push(format!("bad call header {msg:02x?}"));
            self.post_recv(i);
            return;
        };
        if ch.reads.iter().any(|r| r.position != ch.reads[0].position) {
            self.log.errors.push("read chunk positions differ".into());
        }
        // Rebuild the call.
        let data_at = self.data_at(i);
        let call = if fixed.proc_ == wire::RDMA_NOMSG {
            if ch.reads.iter().any(|r| r.position != 0) {
                self.log.errors.push("PZRC position not 0".into());
            }
            let segs: Vec<Segment> = ch.reads.iter().map(|r| r.seg).collect();
            let Some(n) = self.read(&segs, data_at) else {
                return;
            };
            self.mem[data_at..data_at + n].to_vec()
        } else if ch.reads.is_empty() {
            msg[payload_at..].to_vec()
        } else {
            let inline = &msg[payload_at..];
            let p = ch.reads[0].position as usize;
            let segs: Vec<Segment> = ch.reads.iter().map(|r| r.seg).collect();
            let Some(n) = self.read(&segs, data_at) else {
                return;
            };
            let mut c = inline[..p].to_vec();
            c.extend_from_slice(&self.mem[data_at..data_at + n]);
            c.resize(padded(c.len()), 0);
            c.extend_from_slice(&inline[p..]);
            c
        };
        let mut segs: Vec<Segment> = ch.reads.iter().map(|r| r.seg).collect();
        for w in 0..ch.write_chunks.len() {
            segs.extend_from_slice(ch.write_chunk(w));
        }
        segs.extend_from_slice(ch.reply_chunk().unwrap_or(&[]));
        self.log.handles.extend(segs.iter().map(|s| s.handle));
        let prev = std::mem::replace(&mut self.prev_segs, segs.clone());
        let Ok((h, off)) = rpc::decode_call(&call) else {
            self.log.errors.push("bad RPC call".into());
            self.post_recv(i);
            return;
        };
        if h.xid != fixed.xid || h.prog != PROG {
            self.log.errors.push("xid/prog mismatch".into());
        }
        self.log.calls.push((h.xid, h.proc_));
        let args = &call[off..];
        let mut result = Vec::new();
        let mut eligible: Option<Vec<u8>> = None;
        match h.proc_ {
            NULL => {}
            ECHO => {
                let mut r = XdrReader::new(args);
                eligible = Some(r.opaque_var(DATA_AREA).unwrap().to_vec());
            }
            BIG => {
                let n = XdrReader::new(args).u32().unwrap();
                for k in 0..n {
                    result.extend_from_slice(&k.to_be_bytes());
                }
            }
            ERR => {
                self.post_recv(i);
                let mut b = [0u8; 20];
                let n = wire::encode_error(
                    &mut XdrWriter::new(&mut b),
                    fixed.xid,
                    1,
                    self.opts.grant,
                    wire::ErrBody::Chunk,
                )
                .unwrap();
                self.send_raw(i, 0, &b[..n], None);
                return;
            }
            JUNK => self.junk(i, fixed.xid),
            SLOW => thread::sleep(Duration::from_millis(
                XdrReader::new(args).u32().unwrap() as u64
            )),
            DIE => {
                if let Some(qp) = self.qp {
                    self.fabric.disconnect(qp);
                }
                return;
            }
            PROBE => {
                for s in prev {
                    let st = {
                        let id = TAG_READ | self.next_wr;
                        self.next_wr += 1;
                        let sge = [self.sge(data_at, s.length.max(1) as usize)];
                        let wr = SendWr {
                            wr_id: id,
                            op: Op::Read {
                                remote_addr: s.offset,
                                rkey: s.handle,
                            },
                            sges: &sge,
                            signaled: true,
                        };
                        match self.fabric.post_send(self.qp.unwrap(), &[wr]) {
                            Ok(()) => self.wait(id),
                            Err(_) => WcStatus::Flushed,
                        }
                    };
                    self.log.probes.push(st);
                }
            }
            CB => {
                let mut r = XdrReader::new(args);
                let n = r.u32().unwrap();
                let flags = r.u32().unwrap();
                for k in 0..n {
                    let xid = if k == 0 && flags & CB_SAME_XID != 0 {
                        fixed.xid
                    } else {
                        0xcb00_0000 + k
                    };
                    self.callback(i, k as usize + 1, xid, flags & CB_CHUNKED != 0);
                }
            }
            p => self.log.errors.push(format!("unknown proc {p}")),
        }
        self.reply(i, fixed.xid, &ch, result, eligible);
    }

    /// Sends one callback (RFC 8167 §5.1): RDMA_MSG, rdma_xid = RPC xid, msg_type
    /// CALL, our requested reverse credits; a CB_NULL-like call to [`CB_PROG`] with 8
    /// bytes of arguments naming `xid`. With `chunked`, a write chunk is offered.
    fn callback(&mut self, i: usize, slot: usize, xid: u32, chunked: bool) {
        let mut ch = Chunks::default();
        if chunked {
            ch.push_write_chunk(&[Segment {
                handle: 0x77,
                length: 512,
                offset: 0x1000,
            }]);
        }
        let mut b = vec![0u8; 256];
        let mut w = XdrWriter::new(&mut b);
        let fixed = Fixed {
            xid,
            vers: 1,
            credit: CB_REQUESTED,
            proc_: wire::RDMA_MSG,
        };
        wire::encode_msg(&mut w, fixed, &ch).unwrap();
        rpc::write_call(&mut w, xid, CB_PROG, 1, 0, &Cred::None).unwrap();
        w.u32(0xcafe).unwrap();
        w.u32(xid).unwrap();
        let n = w.position();
        self.send_raw(i, slot, &b[..n], None);
    }

    /// Sends `bytes` (copied to send buffer `i` at `slot` * 512) after `writes`.
    fn send_raw(&mut self, i: usize, slot: usize, bytes: &[u8], inv: Option<u32>) {
        let at = self.send_at(i) + slot * 512;
        self.mem[at..at + bytes.len()].copy_from_slice(bytes);
        let sge = [self.sge(at, bytes.len())];
        let op = inv.map_or(Op::Send, |rkey| Op::SendWithInv { rkey });
        let wr = SendWr {
            wr_id: 0,
            op,
            sges: &sge,
            signaled: false,
        };
        if let Some(qp) = self.qp {
            if let Err(e) = self.fabric.post_send(qp, &[wr]) {
                self.log.errors.push(format!("send: {e}"));
            }
        }
    }

    fn junk(&mut self, i: usize, xid: u32) {
        let g = self.opts.grant;
        let words = |w: &[u32]| -> Vec<u8> { w.iter().flat_map(|x| x.to_be_bytes()).collect() };
        let mut unknown = words(&[xid ^ 0x5555_0000, 1, g, 0, 0, 0, 0]);
        unknown.extend_from_slice(&words(&[xid ^ 0x5555_0000, 1, 0, 0, 0, 0]));
        let msgs = [
            words(&[xid, 1, g, 0, 0, 0]),                   // 24 bytes, not an error
            words(&[xid, 1, g, 2, 0, 1024, 0, 0, 0]),       // RDMA_MSGP
            words(&[xid, 1, g, 3, 0, 0, 0]),                // RDMA_DONE
            unknown,                                        // reply for no pending xid
            words(&[xid, 1, g, 0, 0, 1, 1, 0xabcd, 0x100]), // truncated write list
            words(&[xid, 1, g, 4, 9]),                      // RDMA_ERROR, bad code
        ];
        for (k, m) in msgs.iter().enumerate() {
            self.send_raw(i, k, m, None);
        }
    }

    fn reply(
        &mut self,
        i: usize,
        xid: u32,
        ch: &Chunks,
        result: Vec<u8>,
        eligible: Option<Vec<u8>>,
    ) {
        let mut reduced = vec![0u8; 64];
        let mut w = XdrWriter::new(&mut reduced);
        rpc::write_accepted(&mut w, xid, Accept::Success).unwrap();
        let n = w.position();
        reduced.truncate(n);
        reduced.extend_from_slice(&result);
        let data_at = self.data_at(i);
        let stage = data_at + STAGE_AT;
        let mut out = Chunks::default();
        let mut writes: Vec<(Segment, usize, usize)> = Vec::new(); // target, local, len
        let wchunk: Vec<Segment> = if ch.write_chunks.is_empty() {
            vec![]
        } else {
            ch.write_chunk(0).to_vec()
        };
        let wcap = wire::chunk_len(&wchunk) as usize;
        match eligible {
            Some(d) if !wchunk.is_empty() && wcap >= d.len() => {
                self.mem[data_at..data_at + d.len()].copy_from_slice(&d);
                let mut left = d.len();
                let mut local = data_at;
                let mut echo = Vec::new();
                for s in &wchunk {
                    let n = left.min(s.length as usize);
                    if n > 0 {
                        writes.push((*s, local, n));
                    }
                    echo.push(Segment {
                        length: n as u32,
                        ..*s
                    });
                    left -= n;
                    local += n;
                }
                out.push_write_chunk(&echo);
                reduced.extend_from_slice(&(d.len() as u32).to_be_bytes());
            }
            other => {
                if let Some(d) = other {
                    let mut b = vec![0u8; 4 + padded(d.len())];
                    XdrWriter::new(&mut b).opaque_var(&d).unwrap();
                    reduced.extend_from_slice(&b);
                }
                if !wchunk.is_empty() {
                    let unused: Vec<Segment> =
                        wchunk.iter().map(|s| Segment { length: 0, ..*s }).collect();
                    out.push_write_chunk(&unused);
                }
            }
        }
        let rchunk = ch.reply_chunk().map(<[Segment]>::to_vec);
        let hdr_guess = 16 + out.encoded_len() + rchunk.as_ref().map_or(0, |r| 4 + 16 * r.len());
        let proc_ = if hdr_guess + reduced.len() <= self.send_limit {
            if let Some(r) = &rchunk {
                let z: Vec<Segment> = r.iter().map(|s| Segment { length: 0, ..*s }).collect();
                out.set_reply_chunk(&z);
            }
            wire::RDMA_MSG
        } else if let Some(r) = rchunk.filter(|r| wire::chunk_len(r) as usize >= reduced.len()) {
            self.mem[stage..stage + reduced.len()].copy_from_slice(&reduced);
            let mut left = reduced.len();
            let mut local = stage;
            let mut echo = Vec::new();
            for s in &r {
                let n = left.min(s.length as usize);
                if n > 0 {
                    writes.push((*s, local, n));
                }
                echo.push(Segment {
                    length: n as u32,
                    ..*s
                });
                left -= n;
                local += n;
            }
            out.set_reply_chunk(&echo);
            reduced.clear();
            wire::RDMA_NOMSG
        } else {
            self.log.errors.push("reply does not fit".into());
            return;
        };
        // Send-With-Invalidate when allowed and the call used exactly one rkey.
        let mut keys: Vec<u32> = self.prev_segs.iter().map(|s| s.handle).collect();
        keys.dedup();
        let inv = (self.r_both && keys.len() == 1).then(|| keys[0]);
        let mut hdr = vec![0u8; INLINE];
        let fixed = Fixed {
            xid,
            vers: 1,
            credit: self.opts.grant,
            proc_,
        };
        let hn = wire::encode_msg(&mut XdrWriter::new(&mut hdr), fixed, &out).unwrap();
        hdr.truncate(hn);
        hdr.extend_from_slice(&reduced);
        // Repost the Receive before the reply can prompt the next call.
        self.post_recv(i);
        let sges: Vec<[Sge; 1]> = writes.iter().map(|&(_, l, n)| [self.sge(l, n)]).collect();
        let at = self.send_at(i);
        self.mem[at..at + hdr.len()].copy_from_slice(&hdr);
        let send_sge = [self.sge(at, hdr.len())];
        let mut chain: Vec<SendWr> = writes
            .iter()
            .zip(&sges)
            .map(|(&(t, _, _), sge)| SendWr {
                wr_id: 0,
                op: Op::Write {
                    remote_addr: t.offset,
                    rkey: t.handle,
                },
                sges: sge,
                signaled: false,
            })
            .collect();
        chain.push(SendWr {
            wr_id: 0,
            op: inv.map_or(Op::Send, |rkey| Op::SendWithInv { rkey }),
            sges: &send_sge,
            signaled: false,
        });
        self.log.swi += inv.is_some() as u32;
        if let Err(e) = self.fabric.post_send(self.qp.unwrap(), &chain) {
            self.log.errors.push(format!("reply post: {e}"));
        }
    }
}

// ----- client side helpers ----------------------------------------------------------

fn connect(server: &ServerHandle, opts: ClientOptions) -> RdmaClient {
    RdmaClient::connect(Box::new(SoftFabric::new().unwrap()), server.addr, opts).unwrap()
}

fn header(proc_: u32) -> Vec<u8> {
    let mut b = vec![0u8; 64];
    let mut w = XdrWriter::new(&mut b);
    rpc::write_call(&mut w, 0, PROG, 1, proc_, &Cred::None).unwrap();
    let n = w.position();
    b.truncate(n);
    b
}

/// An ECHO call whose data is reducible and whose result may come by write chunk.
fn echo(data: &[u8], ddp: bool) -> (Vec<u8>, CallShape) {
    let mut c = header(ECHO);
    let at = c.len() + 4;
    let mut b = vec![0u8; 4 + padded(data.len())];
    XdrWriter::new(&mut b).opaque_var(data).unwrap();
    c.extend_from_slice(&b);
    let mut shape = CallShape::new(24 + 4 + padded(data.len()));
    if ddp {
        shape = shape
            .with_reduce(at..at + data.len())
            .with_write_chunk(data.len() as u32)
            .with_result(ResultAt::Last);
    }
    (c, shape)
}

fn with_u32(proc_: u32, v: u32) -> Vec<u8> {
    let mut c = header(proc_);
    c.extend_from_slice(&v.to_be_bytes());
    c
}

fn echo_reply(xid: u32, data: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 28 + padded(data.len())];
    let mut w = XdrWriter::new(&mut b);
    rpc::write_accepted(&mut w, xid, Accept::Success).unwrap();
    w.opaque_var(data).unwrap();
    b
}

fn xid_of(reply: &[u8]) -> u32 {
    u32::from_be_bytes(reply[..4].try_into().unwrap())
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

const T: Duration = Duration::from_secs(10);

// ----- tests ------------------------------------------------------------------------

#[test]
fn connect_negotiates_thresholds_and_answers_a_null_call() {
    let server = spawn_server(ServerOpts::default());
    let mut c = connect(
        &server,
        ClientOptions {
            inline_send: 8192,
            inline_recv: 8192,
            ..ClientOptions::default()
        },
    );
    // R8797-06: min(our send 8K, their recv 4K), min(their send 4K, our recv 8K).
    assert_eq!((c.thresholds().send, c.thresholds().recv), (4096, 4096));
    assert!(c.thresholds().remote_invalidate);
    assert_eq!(c.credit_limit(), 1, "R8166-27");
    let r = c.call(&header(NULL), &CallShape::new(24), T).unwrap();
    assert_eq!(r.len(), 24);
    assert_eq!(c.credit_limit(), 8, "the grant");
    assert_eq!(c.in_flight(), 0);
    drop(c);
    let log = server.finish();
    let p = log.client_priv.unwrap();
    assert_eq!(
        (p.send_size, p.recv_size, p.remote_invalidate),
        (8192, 8192, true)
    );
    assert!(log.errors.is_empty(), "{:?}", log.errors);
}

/// R8166-25/27/29: pipelined calls never exceed the grant (the server posts exactly as
/// many Receives as it grants, so an overrun would break the connection), the first
/// call travels alone, and every reply is delivered intact.
#[test]
fn r8166_25_27_29_pipelined_calls_respect_credits_end_to_end() {
    let server = spawn_server(ServerOpts {
        grant: 4,
        ..ServerOpts::default()
    });
    let mut c = connect(&server, ClientOptions::default());
    let sizes = [0usize, 1, 100, 3000, 5000, 70_000, 4093, 12];
    let mut expect = std::collections::HashMap::new();
    let mut sent = 0;
    let mut got = 0;
    let total = 200;
    let deadline = Instant::now() + T;
    while got < total {
        if Instant::now() >= deadline {
            let st = c.stats();
            drop(c);
            let log = server.finish();
            panic!("stalled at {got}: {st:?} {log:?}");
        }
        while sent < total {
            let data = pattern(sizes[sent % sizes.len()], sent as u8);
            let (call, shape) = echo(&data, true);
            match c.submit(&call, &shape) {
                Ok(xid) => {
                    assert!(c.in_flight() <= c.credit_limit());
                    expect.insert(xid, data);
                    sent += 1;
                }
                Err(SubmitError::Busy) => break,
                Err(e) => panic!("{e}"),
            }
        }
        c.poll(&mut |xid, r| {
            let data = expect.remove(&xid).expect("known xid");
            assert_eq!(r.unwrap(), &echo_reply(xid, &data)[..]);
            got += 1;
        })
        .unwrap();
    }
    assert_eq!(c.chunk_registrations(), 0);
    let st = c.stats();
    assert!(st.short_calls > 0 && st.chunked_calls > 0, "{st:?}");
    assert_eq!(st.replies, total as u64);
    drop(c);
    let log = server.finish();
    assert!(log.errors.is_empty(), "{:?}", log.errors);
    assert_eq!(log.calls.len(), total);
    assert_eq!(
        log.batches[0], 1,
        "R8166-27: one call until the first reply"
    );
    assert!(log.batches.iter().all(|&b| b <= 4), "{:?}", log.batches);
    assert!(log.batches.iter().any(|&b| b > 1), "pipelining happened");
}

/// Chunked call (read chunk) and Chunked reply (write chunk spliced in place), then a
/// probe shows the server can no longer read the call's chunk (R8166-57/72).
#[test]
fn r8166_57_72_chunked_echo_then_chunk_rkeys_are_dead() {
    let server = spawn_server(ServerOpts::default());
    let mut c = connect(&server, ClientOptions::default());
    let data = pattern(100_001, 7);
    let (call, shape) = echo(&data, true);
    let r = c.call(&call, &shape, T).unwrap();
    assert_eq!(r, echo_reply(xid_of(&r), &data));
    let st = c.stats();
    assert_eq!(
        (st.chunked_calls, st.write_chunks, st.reply_chunks),
        (1, 1, 0)
    );
    assert_eq!(c.chunk_registrations(), 0);
    // The server RDMA-Reads the read and write chunks of that call: both must fail,
    // which breaks the connection.
    let e = c.call(&header(PROBE), &CallShape::new(24), T).unwrap_err();
    assert!(
        matches!(e, CallError::Rpc(RpcRdmaError::Disconnected)),
        "{e:?}"
    );
    let log = server.finish();
    assert!(!log.probes.is_empty());
    assert_eq!(log.probes[0], WcStatus::RemoteAccess, "{:?}", log.probes);
}

/// R8166-36/40/41: a call too big for inline with nothing reducible goes Long (PZRC),
/// and a reply too big for inline comes through the Reply chunk (RDMA_NOMSG).
#[test]
fn r8166_36_41_long_call_and_long_reply() {
    let server = spawn_server(ServerOpts::default());
    let mut c = connect(&server, ClientOptions::default());
    let data = pattern(10_001, 3);
    let (call, shape) = echo(&data, false);
    let r = c.call(&call, &shape, T).unwrap();
    assert_eq!(r, echo_reply(xid_of(&r), &data));
    let st = c.stats();
    assert_eq!((st.long_calls, st.reply_chunks), (1, 1));
    // A long reply with nothing eligible, and a small one with an unused Reply chunk.
    let r = c
        .call(&with_u32(BIG, 5000), &CallShape::new(24 + 4 * 5000), T)
        .unwrap();
    assert_eq!(r.len(), 24 + 20_000);
    assert!(r[24..]
        .chunks(4)
        .enumerate()
        .all(|(k, w)| w == (k as u32).to_be_bytes()));
    let r = c
        .call(&with_u32(BIG, 10), &CallShape::new(24 + 4 * 5000), T)
        .unwrap();
    assert_eq!(r.len(), 24 + 40);
    // Long call + write chunk: data comes back spliced.
    let data = pattern(300_000, 9);
    let (call, mut shape) = echo(&data, true);
    shape.reduce = None;
    let r = c.call(&call, &shape, T).unwrap();
    assert_eq!(r, echo_reply(xid_of(&r), &data));
    assert_eq!(c.chunk_registrations(), 0);
    drop(c);
    let log = server.finish();
    assert!(log.errors.is_empty(), "{:?}", log.errors);
}

/// R8166-18: RDMA_ERROR fails the call permanently; it is sent exactly once.
#[test]
fn r8166_18_rdma_error_fails_the_call_and_it_is_not_resent() {
    let server = spawn_server(ServerOpts::default());
    let mut c = connect(&server, ClientOptions::default());
    let data = pattern(9000, 1);
    let (mut call, shape) = echo(&data, true);
    call[20..24].copy_from_slice(&ERR.to_be_bytes());
    let e = c.call(&call, &shape, T).unwrap_err();
    assert!(matches!(e, CallError::Rpc(RpcRdmaError::Chunk)), "{e:?}");
    assert_eq!(c.chunk_registrations(), 0);
    assert_eq!(c.in_flight(), 0);
    // Still usable; the credit came back.
    c.call(&header(NULL), &CallShape::new(24), T).unwrap();
    drop(c);
    let log = server.finish();
    let errs = log.calls.iter().filter(|&&(_, p)| p == ERR).count();
    assert_eq!(errs, 1);
}

/// R8166-05/16/17/21/23: bad messages are dropped silently (the client sends nothing
/// back: the server's Receives would overflow otherwise) and the real reply still
/// completes the call.
#[test]
fn r8166_05_16_17_21_23_junk_is_discarded_and_the_call_completes() {
    let server = spawn_server(ServerOpts::default());
    let mut c = connect(&server, ClientOptions::default());
    let r = c.call(&header(JUNK), &CallShape::new(24), T).unwrap();
    assert_eq!(r.len(), 24);
    let st = c.stats();
    assert_eq!(st.discarded, 5, "{st:?}");
    assert_eq!(st.unknown_xid, 1, "{st:?}");
    // The connection is fine and the Receives were reposted.
    for _ in 0..40 {
        c.call(&header(NULL), &CallShape::new(24), T).unwrap();
    }
    drop(c);
    let log = server.finish();
    assert!(log.errors.is_empty(), "{:?}", log.errors);
    assert_eq!(log.calls.len(), 41);
}

/// A timed-out call is abandoned: its registrations and its credit go when the late
/// reply arrives (which is dropped; with both R bits set it came by
/// Send-With-Invalidate of the still-valid rkey, so the connection survives).
#[test]
fn timeout_abandons_the_call_and_its_late_reply_is_dropped() {
    let server = spawn_server(ServerOpts::default());
    let mut c = connect(&server, ClientOptions::default());
    c.call(&header(NULL), &CallShape::new(24), T).unwrap();
    let e = c
        .call(
            &with_u32(SLOW, 300),
            &CallShape::new(24).with_write_chunk(4096),
            Duration::from_millis(50),
        )
        .unwrap_err();
    assert!(matches!(e, CallError::Rpc(RpcRdmaError::TimedOut)), "{e:?}");
    // Its write chunk stays registered (and private to the slot) until the reply comes.
    assert_eq!(c.chunk_registrations(), 1);
    assert_eq!(c.in_flight(), 1, "credit still held");
    let deadline = Instant::now() + T;
    while c.in_flight() > 0 {
        assert!(Instant::now() < deadline);
        c.poll(&mut |_, _| panic!("abandoned reply delivered"))
            .unwrap();
    }
    assert_eq!(c.stats().orphaned, 1);
    assert_eq!(
        c.chunk_registrations(),
        0,
        "R8166-72: gone with the late reply"
    );
    assert_eq!(c.stats().remote_invalidations, 1);
    c.call(&header(NULL), &CallShape::new(24), T).unwrap();
    drop(c);
    let log = server.finish();
    assert!(log.errors.is_empty(), "{:?}", log.errors);
}

/// Disconnect: every pending call completes with an error, registrations are gone,
/// and the client refuses new calls.
#[test]
fn disconnect_fails_every_pending_call() {
    let server = spawn_server(ServerOpts {
        grant: 8,
        ..ServerOpts::default()
    });
    let mut c = connect(&server, ClientOptions::default());
    c.call(&header(NULL), &CallShape::new(24), T).unwrap();
    let data = pattern(50_000, 5);
    let (call, shape) = echo(&data, true);
    // DIE travels first, so none of the others is ever answered.
    let mut pending = vec![c.submit(&header(DIE), &CallShape::new(24)).unwrap()];
    for _ in 0..3 {
        pending.push(c.submit(&call, &shape).unwrap());
    }
    pending.push(c.submit(&with_u32(SLOW, 10), &CallShape::new(24)).unwrap());
    assert!(c.chunk_registrations() > 0);
    let mut failed = Vec::new();
    let deadline = Instant::now() + T;
    loop {
        assert!(Instant::now() < deadline);
        match c.poll(&mut |xid, r| {
            assert_eq!(r.unwrap_err(), RpcRdmaError::Disconnected);
            failed.push(xid);
        }) {
            Ok(_) => {}
            Err(e) => {
                assert_eq!(e.kind(), io::ErrorKind::NotConnected);
                break;
            }
        }
    }
    failed.sort_unstable();
    pending.sort_unstable();
    assert_eq!(failed, pending);
    assert_eq!(c.in_flight(), 0);
    assert!(!c.is_connected());
    assert_eq!(c.chunk_registrations(), 0);
    assert!(matches!(
        c.submit(&call, &shape),
        Err(SubmitError::Disconnected)
    ));
    drop(c);
    server.finish();
}

/// R8797-15: with both R bits set the server invalidates our single rkey remotely and
/// the client notices; with our R bit clear it never does.
#[test]
fn r8797_15_remote_invalidation_only_when_both_set() {
    for r in [true, false] {
        let server = spawn_server(ServerOpts::default());
        let mut c = connect(
            &server,
            ClientOptions {
                remote_invalidate: r,
                ..ClientOptions::default()
            },
        );
        // Short call, one write chunk: one rkey in the call.
        let data = pattern(1000, 2);
        let (call, shape) = echo(&data, true);
        let reply = c.call(&call, &shape, T).unwrap();
        assert_eq!(reply, echo_reply(xid_of(&reply), &data));
        assert_eq!(c.stats().remote_invalidations, r as u64);
        assert_eq!(c.stats().foreign_invalidations, 0);
        assert_eq!(c.chunk_registrations(), 0);
        drop(c);
        let log = server.finish();
        assert_eq!(log.swi, r as u32);
        assert!(log.errors.is_empty(), "{:?}", log.errors);
    }
}

#[test]
fn oversized_calls_are_refused_before_anything_is_sent() {
    let server = spawn_server(ServerOpts::default());
    let mut c = connect(
        &server,
        ClientOptions {
            max_io: 64 << 10,
            max_reply_chunk: 8 << 10,
            ..ClientOptions::default()
        },
    );
    let (call, shape) = echo(&pattern(100_000, 0), true);
    assert!(matches!(
        c.submit(&call, &shape),
        Err(SubmitError::TooLarge)
    ));
    let big = CallShape::new(64 << 10);
    assert!(matches!(
        c.submit(&header(NULL), &big),
        Err(SubmitError::TooLarge)
    ));
    assert!(matches!(
        c.submit(&[1, 2, 3], &CallShape::new(24)),
        Err(SubmitError::Plan(PlanError::BadCall))
    ));
    assert_eq!((c.in_flight(), c.chunk_registrations()), (0, 0));
    c.call(&header(NULL), &CallShape::new(24), T).unwrap();
    drop(c);
    let log = server.finish();
    assert_eq!(log.calls.len(), 1);
}

#[test]
fn connect_to_nobody_is_refused() {
    let err = RdmaClient::connect(
        Box::new(SoftFabric::new().unwrap()),
        addr(),
        ClientOptions {
            connect_timeout: Duration::from_secs(2),
            ..ClientOptions::default()
        },
    )
    .err()
    .unwrap();
    assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused);
}

#[test]
fn layout_keeps_reply_area_right_before_write_area() {
    let o = ClientOptions::default();
    let l = Layout::new(&o, 4);
    assert_eq!(l.reply_off + l.reply_room, l.write_off);
    assert!(l.slot_size >= l.write_off + l.write_room + l.reply_room + 3);
    assert_eq!(l.len(), l.slots_base + 4 * l.slot_size);
}

/// R8166-33/34/35, R8797-01 (client side): against a responder that sends no private
/// data the connection runs at 1024 bytes each way, and with one that does, at the
/// negotiated threshold (our 2 KiB send size here). A mixed workload (Short, Chunked
/// and Long calls, inline and Reply-chunk replies) never Sends more than the threshold,
/// and 1024-byte messages pass both ways: a 1024-byte call, and a 1024-byte reply into
/// our 1024-byte Receive.
#[test]
fn r8166_33_34_35_r8797_01_sends_fit_the_threshold_and_1024_byte_messages_pass() {
    for (private_data, send, limit) in [(false, 4096, 1024usize), (true, 2048, 2048)] {
        let server = spawn_server(ServerOpts {
            private_data,
            ..ServerOpts::default()
        });
        let opts = ClientOptions {
            inline_send: send,
            inline_recv: 1024,
            ..ClientOptions::default()
        };
        let mut c = connect(&server, opts);
        assert_eq!((c.thresholds().send, c.thresholds().recv), (limit, 1024));
        for (k, n) in [0usize, 100, 952, 968, 1500, 3000, 10_000]
            .into_iter()
            .enumerate()
        {
            for ddp in [false, true] {
                let data = pattern(n, k as u8);
                let (call, shape) = echo(&data, ddp);
                let before = c.stats().reply_chunks;
                let r = c.call(&call, &shape, T).unwrap();
                assert_eq!(r, echo_reply(xid_of(&r), &data));
                if n == 968 && !ddp {
                    // 28-byte header + 996-byte reply, inline: exactly 1024 bytes.
                    assert_eq!((r.len(), c.stats().reply_chunks), (996, before));
                }
            }
        }
        let r = c.call(&with_u32(BIG, 600), &CallShape::new(24 + 2400), T);
        assert_eq!(r.unwrap().len(), 24 + 2400);
        drop(c);
        let log = server.finish();
        assert!(log.errors.is_empty(), "{:?}", log.errors);
        assert!(log.sizes.iter().all(|&n| n <= limit), "{:?}", log.sizes);
        assert!(
            log.sizes.contains(&1024),
            "the 952-byte echo is a 1024-byte call"
        );
        assert_eq!(limit > 1024, log.sizes.iter().any(|&n| n > 1024));
    }
}

/// R8166-83/84: every RPC's chunks are registered for that RPC only, under rkeys never
/// used before (random, not a fixed step), and nothing stays registered after it.
#[test]
fn r8166_83_84_each_rpc_gets_fresh_rkeys_that_die_with_its_reply() {
    let server = spawn_server(ServerOpts::default());
    let mut c = connect(&server, ClientOptions::default());
    for k in 0..40usize {
        let data = pattern(9000 + k, k as u8);
        let (call, shape) = echo(&data, true);
        let r = c.call(&call, &shape, T).unwrap();
        assert_eq!(r, echo_reply(xid_of(&r), &data));
        assert_eq!(c.chunk_registrations(), 0, "R8166-84");
    }
    drop(c);
    let log = server.finish();
    assert_eq!(log.handles.len(), 80, "a read and a write chunk per call");
    let distinct: std::collections::HashSet<u32> = log.handles.iter().copied().collect();
    assert_eq!(distinct.len(), 80, "R8166-83: no rkey reused across RPCs");
    let steps: std::collections::HashSet<u32> = log
        .handles
        .windows(2)
        .map(|w| w[1].wrapping_sub(w[0]))
        .collect();
    assert!(steps.len() > 1, "rkeys are not a fixed-step sequence");
}

/// R8267-05/27: this requester has no short Reply chunk retry (RFC 8267 allows one
/// only for NFSACL GETACL and NFSv4.0, neither of which it carries): an ERR_CHUNK
/// answer to a call that offered a Reply chunk ends that RPC at once, and nothing is
/// resent, neither under the same XID nor under a new one with a bigger chunk.
#[test]
fn r8267_05_27_err_chunk_ends_the_rpc_without_a_short_reply_chunk_retry() {
    let server = spawn_server(ServerOpts::default());
    let mut c = connect(&server, ClientOptions::default());
    let e = c
        .call(&header(ERR), &CallShape::new(24 + 8192), T)
        .unwrap_err();
    assert!(matches!(e, CallError::Rpc(RpcRdmaError::Chunk)), "{e:?}");
    let deadline = Instant::now() + Duration::from_millis(200);
    while Instant::now() < deadline {
        c.poll(&mut |x, _| panic!("unexpected completion {x:#x}"))
            .unwrap();
    }
    c.call(&header(NULL), &CallShape::new(24), T).unwrap();
    let st = c.stats();
    assert_eq!((st.reply_chunks, st.rdma_errors), (1, 1), "{st:?}");
    drop(c);
    let log = server.finish();
    let procs: Vec<u32> = log.calls.iter().map(|&(_, p)| p).collect();
    assert_eq!(procs, vec![ERR, NULL]);
}

// ----- RFC 8167: callbacks on the forward connection ----------------------------------

fn cb_call(n: u32, flags: u32) -> Vec<u8> {
    let mut c = header(CB);
    c.extend_from_slice(&n.to_be_bytes());
    c.extend_from_slice(&flags.to_be_bytes());
    c
}

/// A CB_NULL-like reply to callback `xid` (what a back channel answers).
fn cb_reply(xid: u32) -> Vec<u8> {
    let mut b = vec![0u8; 64];
    let mut w = XdrWriter::new(&mut b);
    rpc::write_accepted(&mut w, xid, Accept::Success).unwrap();
    w.u32(0x600d).unwrap();
    let n = w.position();
    b.truncate(n);
    b
}

/// Forward calls finished (xid, ok) and callbacks taken (xid, record).
type Drained = (Vec<(u32, bool)>, Vec<(u32, Vec<u8>)>);

/// Polls until `want` forward calls finished; returns them and the callbacks taken.
fn drain(c: &mut RdmaClient, want: usize) -> Drained {
    let deadline = Instant::now() + T;
    let mut done = Vec::new();
    let mut cbs = Vec::new();
    while done.len() < want && Instant::now() < deadline {
        c.poll(&mut |x, r| done.push((x, r.is_ok()))).unwrap();
        c.take_callbacks(&mut |x, rec| cbs.push((x, rec.to_vec())));
        thread::yield_now();
    }
    c.take_callbacks(&mut |x, rec| cbs.push((x, rec.to_vec())));
    (done, cbs)
}

fn bc_opts(credits: u32, bc: u32) -> ClientOptions {
    ClientOptions {
        credits,
        backchannel_credits: bc,
        ..ClientOptions::default()
    }
}

#[test]
fn r8167_06_two_callbacks_under_full_forward_load_cause_no_rnr() {
    let server = spawn_server(ServerOpts {
        grant: 4,
        bc: 2,
        ..ServerOpts::default()
    });
    let mut c = connect(&server, bc_opts(4, 2));
    c.call(&header(NULL), &CallShape::new(64), T).unwrap();
    assert_eq!(c.credit_limit(), 4);
    // Every forward credit in use, then two callbacks on top: 6 messages arrive while
    // the client does not poll, so all 4 + 2 Receives must already be posted.
    let mut xids = vec![c.submit(&cb_call(2, 0), &CallShape::new(64)).unwrap()];
    for _ in 0..3 {
        xids.push(c.submit(&header(NULL), &CallShape::new(64)).unwrap());
    }
    assert_eq!(c.in_flight(), 4);
    thread::sleep(Duration::from_millis(300));
    let (done, cbs) = drain(&mut c, 4);
    assert!(c.is_connected());
    assert_eq!(done.len(), 4, "{done:?}");
    assert!(done.iter().all(|&(x, ok)| ok && xids.contains(&x)));
    assert_eq!(cbs.len(), 2);
    // Callbacks took no forward credit and their rdma_credit (1) changed nothing
    // (R8167-02/04).
    assert_eq!((c.in_flight(), c.credit_limit()), (0, 4));
    for (x, _) in &cbs {
        c.reply_callback(*x, &cb_reply(*x)).unwrap();
    }
    c.call(&header(NULL), &CallShape::new(64), T).unwrap();
    let st = c.stats();
    assert_eq!(
        (st.callbacks, st.callback_replies, st.callbacks_dropped),
        (2, 2, 0)
    );
    drop(c);
    let log = server.finish();
    assert!(log.errors.is_empty(), "{:?}", log.errors);
    assert_eq!(log.cb_replies.len(), 2);
}

#[test]
fn r8167_07_after_reconnect_reverse_receives_are_posted_before_the_first_call() {
    let server = spawn_server(ServerOpts {
        grant: 4,
        bc: 2,
        ..ServerOpts::default()
    });
    let mut c = connect(&server, bc_opts(1, 2));
    c.call(&header(NULL), &CallShape::new(64), T).unwrap();
    let _ = c.call(&header(DIE), &CallShape::new(64), T);
    drop(c);
    // The reconnect is a new client: one forward credit, two reverse. Its very first
    // call draws two callbacks, which arrive before the client polls at all: only the
    // reverse Receives posted at connect can take them.
    let mut c = connect(&server, bc_opts(1, 2));
    let x = c.submit(&cb_call(2, 0), &CallShape::new(64)).unwrap();
    thread::sleep(Duration::from_millis(300));
    let (done, cbs) = drain(&mut c, 1);
    assert_eq!(done, vec![(x, true)]);
    assert!(c.is_connected());
    assert_eq!(cbs.len(), 2);
    for (x, _) in &cbs {
        c.reply_callback(*x, &cb_reply(*x)).unwrap();
    }
    c.call(&header(NULL), &CallShape::new(64), T).unwrap();
    drop(c);
    let log = server.finish();
    assert_eq!(log.cb_replies.len(), 2, "{:?}", log.errors);
}

#[test]
fn r8167_11_12_callback_reply_echoes_xid_and_carries_the_reverse_grant() {
    let server = spawn_server(ServerOpts {
        bc: 2,
        ..ServerOpts::default()
    });
    let mut c = connect(&server, bc_opts(4, 2));
    let x = c.submit(&cb_call(1, 0), &CallShape::new(64)).unwrap();
    let (done, cbs) = drain(&mut c, 1);
    assert_eq!(done, vec![(x, true)]);
    let [(cbx, rec)] = &cbs[..] else {
        panic!("{cbs:?}")
    };
    // The record is the RPC call from its XID: CALL to the callback program.
    let (h, off) = rpc::decode_call(rec).unwrap();
    assert_eq!((h.xid, h.prog, h.proc_), (*cbx, CB_PROG, 0));
    assert_eq!(rec[off..], [0, 0, 0xca, 0xfe, 0xcb, 0, 0, 0]);
    // Unknown XIDs and a CALL instead of a REPLY are refused.
    assert!(matches!(
        c.reply_callback(cbx ^ 1, &cb_reply(cbx ^ 1)),
        Err(SubmitError::NoSuchCallback)
    ));
    assert!(matches!(
        c.reply_callback(*cbx, rec),
        Err(SubmitError::Plan(PlanError::BadCall))
    ));
    // The XID word is overwritten with the callback's.
    c.reply_callback(*cbx, &cb_reply(0)).unwrap();
    assert!(matches!(
        c.reply_callback(*cbx, &cb_reply(*cbx)),
        Err(SubmitError::NoSuchCallback)
    ));
    c.call(&header(NULL), &CallShape::new(64), T).unwrap();
    drop(c);
    let log = server.finish();
    let [(fixed, empty, rpc_reply)] = &log.cb_replies[..] else {
        panic!("{:?}", log.cb_replies)
    };
    assert_eq!(
        (fixed.xid, fixed.vers, fixed.credit, fixed.proc_),
        (*cbx, 1, 2, wire::RDMA_MSG)
    );
    assert!(empty);
    assert_eq!(rpc_reply[..], cb_reply(*cbx)[..]);
}

#[test]
fn r8167_15_callback_with_a_chunk_is_answered_err_chunk() {
    let server = spawn_server(ServerOpts {
        bc: 2,
        ..ServerOpts::default()
    });
    let mut c = connect(&server, bc_opts(4, 2));
    let x = c
        .submit(&cb_call(1, CB_CHUNKED), &CallShape::new(64))
        .unwrap();
    let (done, cbs) = drain(&mut c, 1);
    assert_eq!(done, vec![(x, true)]);
    assert!(cbs.is_empty());
    assert_eq!(c.stats().callback_chunk_errors, 1);
    c.call(&header(NULL), &CallShape::new(64), T).unwrap();
    drop(c);
    let log = server.finish();
    assert_eq!(
        log.cb_errors,
        vec![(0xcb00_0000, 1, 2, wire::ErrBody::Chunk)]
    );
    assert!(log.cb_replies.is_empty());
}

#[test]
fn r8167_01_04_callback_with_a_forward_xid_leaves_the_forward_call_alone() {
    let server = spawn_server(ServerOpts {
        bc: 1,
        ..ServerOpts::default()
    });
    let mut c = connect(&server, bc_opts(4, 1));
    c.call(&header(NULL), &CallShape::new(64), T).unwrap();
    let limit = c.credit_limit();
    let x = c
        .submit(&cb_call(1, CB_SAME_XID), &CallShape::new(64))
        .unwrap();
    let (done, cbs) = drain(&mut c, 1);
    // Same XID in both directions: two transactions (separate tables).
    assert_eq!(done, vec![(x, true)]);
    assert_eq!(cbs.len(), 1);
    assert_eq!(cbs[0].0, x);
    assert_eq!(c.credit_limit(), limit);
    c.reply_callback(x, &cb_reply(x)).unwrap();
    c.call(&header(NULL), &CallShape::new(64), T).unwrap();
    drop(c);
    assert_eq!(server.finish().cb_replies.len(), 1);
}

#[test]
fn r8167_06_callbacks_over_the_grant_or_without_back_channel_are_dropped() {
    let server = spawn_server(ServerOpts {
        bc: 2,
        ..ServerOpts::default()
    });
    let mut c = connect(&server, bc_opts(4, 2));
    let x = c.submit(&cb_call(3, 0), &CallShape::new(64)).unwrap();
    let (done, cbs) = drain(&mut c, 1);
    assert_eq!(done, vec![(x, true)]);
    assert_eq!(cbs.len(), 2);
    let st = c.stats();
    assert_eq!((st.callbacks, st.callbacks_dropped), (2, 1));
    drop(c);
    drop(server);
    // No back channel: dropped and counted, the forward call unharmed.
    let server = spawn_server(ServerOpts::default());
    let mut c = connect(&server, bc_opts(4, 0));
    let x = c.submit(&cb_call(1, 0), &CallShape::new(64)).unwrap();
    let (done, cbs) = drain(&mut c, 1);
    assert_eq!(done, vec![(x, true)]);
    assert!(cbs.is_empty());
    assert_eq!(c.stats().callbacks_dropped, 1);
    assert!(matches!(
        c.reply_callback(0xcb00_0000, &cb_reply(0)),
        Err(SubmitError::NoSuchCallback)
    ));
}
