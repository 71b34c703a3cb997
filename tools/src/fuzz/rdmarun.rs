//! Running campaign `rdma` (docs/fuzzing.md "Campaign 4: rdma"): messages from
//! [`super::rdmagen`] over `soft` RDMA connections ([`super::rdmapeer`]), each followed
//! by a NULL probe on the same connection that must be answered or the connection
//! closed within the call timeout; every message the gateway sends is checked against
//! RFC 8166 §4 as it arrives, and the peer behaviours (bursts past the credits,
//! disconnects with RDMA Reads outstanding, revoked memory, peers that never poll,
//! hostile private data) are checked for what the gateway must do about them.

use super::campaign::{hex, Campaign};
use super::rdmagen::{Act, Msg, Offer, PeerView, RdmaGen};
use super::rdmapeer::{Area, Event, Peer};
use super::structured::{returned_handle, Call};
use super::wire::{self, call_record, Cred, NFS_PROG};
use engine::rpcrdma::wire::{self as rw, Chunks, ErrBody, Header, Limits, Segment};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The gateway's `rdma.credits` in the campaign's config ([`super::gateway`]).
pub const CREDITS: u32 = 16;
/// Its `rdma.read_timeout_s` and `rdma.send_timeout_s`.
pub const RDMA_TIMEOUT: Duration = Duration::from_secs(2);
/// An abandoned peer must be closed by then: the timeout, two checking intervals
/// (README: it fires up to two intervals late) and slack for a loaded machine.
const ABANDON_CLOSED_BY: Duration = Duration::from_secs(8);
/// Peers left unpolled at once.
const MAX_HELD: usize = 4;
/// The data check's round during the flood: 1 MiB, which needs a large buffer.
const FLOOD_ROUND: usize = 5;
/// XIDs (with their offers) remembered per connection for matching replies.
const SENT_KEPT: usize = 2048;

/// One live connection and what was sent on it.
pub(super) struct Conn {
    pub(super) peer: Peer,
    pub(super) grant: u32,
    sent: VecDeque<(u32, Offer)>,
    /// The NFSv4.1 session set up on this connection (module `rdmav4`).
    pub(super) sess: Option<super::v4::Session>,
    /// Whether a session setup was tried on this connection.
    tried: bool,
    /// The fuzz COMPOUNDs awaiting their replies (to advance the slot, learn handles).
    v4_pending: Vec<(u32, super::v4::Compound)>,
    /// Per slot, the COMPOUND last answered with SEQUENCE OK: a retried sequence id is
    /// answered from the slot's reply cache with that one's reply (RFC 8881 §2.10.6.1).
    pub(super) v4_last: Vec<Option<super::v4::Compound>>,
}

impl Conn {
    fn new(peer: Peer, grant: u32) -> Conn {
        Conn {
            peer,
            grant,
            sent: VecDeque::new(),
            sess: None,
            tried: false,
            v4_pending: Vec::new(),
            v4_last: Vec::new(),
        }
    }

    fn view(&self) -> PeerView {
        PeerView {
            rkey: self.peer.mr.rkey,
            source: self.peer.area(Area::Source),
            sink: self.peer.area(Area::Sink),
            reply: self.peer.area(Area::Reply),
            inline: self.peer.server_recv,
            grant: self.grant,
        }
    }

    pub(super) fn sent(&mut self, xid: u32, offer: Offer) {
        if self.sent.len() == SENT_KEPT {
            self.sent.pop_front();
        }
        self.sent.push_back((xid, offer));
    }
}

/// A peer that stopped polling, and since when.
struct Held {
    peer: Peer,
    since: Instant,
    /// It sent something the gateway must act on (so it has work outstanding).
    owed: bool,
    index: usize,
}

/// Generous decoding limits for replies: the checks below compare with the offer.
fn reply_limits() -> Limits {
    Limits {
        max_read_segments: 256,
        max_write_chunks: 256,
        max_chunk_segments: 256,
        max_chunk_bytes: u64::MAX,
    }
}

/// A segment the gateway returns must be one offered, at most as long (RFC 8166
/// §3.4.6: the responder updates only the lengths, to what it wrote).
fn within(got: &[Segment], offered: &[Segment]) -> Result<(), String> {
    if got.len() > offered.len() {
        return Err(format!(
            "{} segments returned, {} offered",
            got.len(),
            offered.len()
        ));
    }
    for (g, o) in got.iter().zip(offered) {
        if g.handle != o.handle || g.offset != o.offset || g.length > o.length {
            return Err(format!("segment {g:?} returned for offered {o:?}"));
        }
    }
    Ok(())
}

/// What one received message was.
pub(super) struct Got {
    pub(super) xid: u32,
    /// The RPC reply (inline or gathered from the reply chunk), `None` for RDMA_ERROR
    /// and for a reply chunk whose offered segments overlap (`overlapping`).
    pub(super) rpc: Option<Vec<u8>>,
    /// Its offer had write chunks (READ data is not inline then).
    ddp: bool,
    /// A backward-direction call from the gateway (RFC 8167: CB_NULL, CB_RECALL on an
    /// NFSv4.1 session's back channel), never answered here.
    pub(super) callback: bool,
}

/// Whether two of `segs` (as returned, same registration) share a byte of memory.
fn overlapping(segs: &[Segment]) -> bool {
    let end = |s: &Segment| s.offset.saturating_add(s.length as u64);
    segs.iter().enumerate().any(|(i, a)| {
        segs[i + 1..]
            .iter()
            .any(|b| a.length > 0 && b.length > 0 && a.offset < end(b) && b.offset < end(a))
    })
}

/// RFC 8166 §4 checks of one message from the gateway; `Err` names the rule broken.
pub(super) fn check_reply(c: &Conn, m: &[u8]) -> Result<Got, String> {
    // A segment the gateway left unused (length 0) names nothing to read, even where
    // its offered offset was hostile.
    check_sent(&c.sent, m, &|s: &Segment| match s.length {
        0 => Some(Vec::new()),
        n => c.peer.read_at(s.offset, n as usize).map(<[u8]>::to_vec),
    })
}

/// [`check_reply`] against the xids and offers `sent`; `read` gives the bytes a
/// returned reply-chunk segment covers (`None`: outside the registered memory).
fn check_sent(
    sent: &VecDeque<(u32, Offer)>,
    m: &[u8],
    read: &dyn Fn(&Segment) -> Option<Vec<u8>>,
) -> Result<Got, String> {
    let lim = reply_limits();
    let mut ch = Chunks::with_limits(&lim);
    let h = rw::decode(m, &lim, &mut ch).map_err(|e| format!("header does not decode ({e:?})"))?;
    let fixed = match h {
        Header::Msg { fixed, .. } | Header::Error { fixed, .. } => fixed,
    };
    if fixed.credit == 0 {
        return Err("credits granted 0 (RFC 8166 §3.3.1: at least 1)".into());
    }
    if let Header::Msg { payload_at, .. } = h {
        // RFC 8167 §4.2: the direction is the RPC msg_type (CALL = 0) of the payload.
        if fixed.proc_ == rw::RDMA_MSG && m.get(payload_at + 4..payload_at + 8) == Some(&[0; 4]) {
            if fixed.vers != 1 {
                return Err(format!("callback of version {}", fixed.vers));
            }
            return Ok(Got {
                xid: fixed.xid,
                rpc: None,
                ddp: false,
                callback: true,
            });
        }
    }
    let Some((_, offer)) = sent.iter().rev().find(|(x, _)| *x == fixed.xid) else {
        return Err(format!(
            "xid {:#x} was never sent on this connection",
            fixed.xid
        ));
    };
    match h {
        Header::Error { err, .. } => {
            if let ErrBody::Vers { low, high } = err {
                if !(low <= 1 && 1 <= high) {
                    return Err(format!("ERR_VERS {low}..{high} excludes version 1"));
                }
            }
            Ok(Got {
                xid: fixed.xid,
                rpc: None,
                ddp: false,
                callback: false,
            })
        }
        Header::Msg { payload_at, .. } => {
            if fixed.vers != 1 {
                return Err(format!("reply of version {}", fixed.vers));
            }
            if !ch.reads.is_empty() {
                return Err("a reply with a read list".into());
            }
            if ch.write_chunks.len() > offer.writes.len() {
                return Err(format!(
                    "{} write chunks returned, {} offered",
                    ch.write_chunks.len(),
                    offer.writes.len()
                ));
            }
            for i in 0..ch.write_chunks.len() {
                within(ch.write_chunk(i), &offer.writes[i])
                    .map_err(|e| format!("write chunk {i}: {e}"))?;
            }
            let reply_segs = match (ch.reply_chunk(), &offer.reply) {
                (None, _) => None,
                (Some(_), None) => return Err("a reply chunk that was not offered".into()),
                (Some(got), Some(o)) => {
                    within(got, o).map_err(|e| format!("reply chunk: {e}"))?;
                    Some(got.to_vec())
                }
            };
            let rpc = if fixed.proc_ == rw::RDMA_NOMSG {
                if payload_at != m.len() {
                    return Err("RDMA_NOMSG with an inline payload".into());
                }
                let segs = reply_segs.ok_or("RDMA_NOMSG without a reply chunk")?;
                if overlapping(&segs) {
                    // The generator's spoiled segment (rdmagen `spoil`, case 6) may overlap
                    // another of the same chunk: the gateway's later RDMA Write lands on
                    // its earlier one in our memory, so the gathered bytes are whatever the
                    // client's own layout made of them (RFC 8166 §4.4 leaves the layout of
                    // a chunk to the requester). Nothing to check beyond `within` above.
                    return Ok(Got {
                        xid: fixed.xid,
                        rpc: None,
                        ddp: false,
                        callback: false,
                    });
                }
                let mut body = Vec::new();
                for s in segs {
                    let b = read(&s).ok_or("reply chunk outside the registered memory")?;
                    body.extend_from_slice(&b);
                }
                body
            } else {
                m[payload_at..].to_vec()
            };
            let rep = wire::parse_reply(&rpc)
                .ok_or_else(|| format!("not an RPC reply: {}", hex(&rpc)))?;
            if rep.xid != fixed.xid {
                return Err(format!(
                    "RPC xid {:#x} under transport xid {:#x}",
                    rep.xid, fixed.xid
                ));
            }
            Ok(Got {
                xid: fixed.xid,
                rpc: Some(rpc),
                ddp: !offer.writes.is_empty(),
                callback: false,
            })
        }
    }
}

/// `NFSGW_FUZZ_TRACE=1`: every message sent and received on stderr (for debugging a
/// report).
pub(super) fn trace() -> bool {
    static T: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *T.get_or_init(|| std::env::var_os("NFSGW_FUZZ_TRACE").is_some())
}

/// `NFSGW_FUZZ_RDMA_SESSIONLESS=1`: the NFSv4.1 share never sets up a session (module
/// `rdmav4`), e.g. to tell whether a failure needs one.
fn sessions() -> bool {
    static T: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *T.get_or_init(|| std::env::var_os("NFSGW_FUZZ_RDMA_SESSIONLESS").is_none())
}

fn probe(xid: u32, grant: u32) -> Vec<u8> {
    let mut e = wire::Enc::default();
    e.u32(xid)
        .u32(1)
        .u32(grant.max(1))
        .u32(rw::RDMA_MSG)
        .u32(0)
        .u32(0)
        .u32(0);
    let rec = call_record(xid, NFS_PROG, 3, 0, &Cred::root(), &[]);
    e.0.extend_from_slice(&rec[4..]);
    e.0
}

impl Campaign<'_> {
    fn rdma_open(&self, addr: SocketAddr, private: &[u8]) -> anyhow::Result<Option<Conn>> {
        match Peer::connect(addr, private, self.timeout) {
            Ok(peer) => Ok(Some(Conn::new(peer, CREDITS))),
            // Hostile private data may be refused (a reject is fine, a hang is not).
            Err(e) if e == "rejected" && !private.is_empty() => Ok(None),
            Err(e) => Err(self.fail(&format!(
                "RDMA connect with private data {} failed: {e}",
                hex(private)
            ))),
        }
    }

    /// Checks one message from the gateway and accounts for it.
    fn rdma_got(
        &mut self,
        c: &mut Conn,
        m: &[u8],
        msgs: &[Msg],
        v4: &mut super::v4::V4Gen,
    ) -> anyhow::Result<u32> {
        let got = check_reply(c, m).map_err(|e| {
            self.fail(&format!(
                "RDMA reply breaks RFC 8166: {e}; message: {}",
                hex(m)
            ))
        })?;
        let credit = u32::from_be_bytes([m[8], m[9], m[10], m[11]]);
        c.grant = credit.min(CREDITS);
        if got.callback {
            // Not answered: the gateway must cope with a client that never does.
            *self.tally.by_stat.entry("callbacks".into()).or_default() += 1;
            return Ok(got.xid);
        }
        self.tally.replies += 1;
        let Some(rpc) = got.rpc else {
            let what = if m[12..16] == rw::RDMA_NOMSG.to_be_bytes() {
                "reply chunk overlapping itself"
            } else {
                "RDMA_ERROR"
            };
            *self.tally.by_stat.entry(what.into()).or_default() += 1;
            return Ok(got.xid);
        };
        let rep = wire::parse_reply(&rpc).expect("checked above");
        if let Some(at) = c.v4_pending.iter().position(|p| p.0 == got.xid) {
            let (_, comp) = c.v4_pending.swap_remove(at);
            self.rdma_v4_reply(c, &comp, &rep, got.ddp, v4)?;
        }
        let Some(call) = msgs
            .iter()
            .find(|m| m.xid == got.xid)
            .and_then(|m| m.call.clone())
        else {
            return Ok(got.xid);
        };
        if rep.accept == Some(0) && !got.ddp {
            if let Some(why) = super::semantics::violation(&call, rep.body) {
                return Err(self.fail(&format!("reply breaks RFC 1813: {why}")));
            }
        }
        if call.prog == NFS_PROG && call.vers == 3 && rep.accept == Some(0) && !got.ddp {
            if let Some(fh) = returned_handle(call.proc_, rep.body) {
                self.gen.learn(&fh, call.proc_ == 9);
            }
        }
        self.count_reply(&call, &rep);
        Ok(got.xid)
    }

    /// Waits until every xid in `want` is answered (`Ok(true)`) or the connection is
    /// closed (`Ok(false)`); anything else within the call timeout is a failure.
    fn rdma_await(
        &mut self,
        c: &mut Conn,
        msgs: &[Msg],
        mut want: Vec<u32>,
        v4: &mut super::v4::V4Gen,
    ) -> anyhow::Result<bool> {
        let deadline = Instant::now() + self.timeout;
        while !want.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            match c.peer.recv(left) {
                Event::Msg(m) => {
                    if trace() {
                        eprintln!("rdma trace: got {}", hex(&m[..m.len().min(64)]));
                        if !c.peer.send_errors.is_empty() {
                            eprintln!("rdma trace: send errors {:?}", c.peer.send_errors);
                        }
                    }
                    c.peer.send_errors.clear();
                    let xid = self.rdma_got(c, &m, msgs, v4)?;
                    want.retain(|x| *x != xid);
                }
                Event::Closed => {
                    self.tally.closes += 1;
                    return Ok(false);
                }
                Event::Timeout => {
                    if trace() {
                        eprintln!("rdma trace: send errors {:?}", c.peer.send_errors);
                    }
                    let xids: Vec<String> = want.iter().map(|x| format!("{x:#x}")).collect();
                    return Err(self.fail(&format!(
                        "no RDMA reply to xid {} and no close within {:?}",
                        xids.join(", "),
                        self.timeout
                    )));
                }
            }
        }
        Ok(true)
    }

    /// A peer left unpolled since `h.since` must have been closed by the gateway's
    /// read/send timeouts (if it owed the gateway anything) once polled again.
    fn rdma_check_held(&mut self, h: Held, msgs: &[Msg]) -> anyhow::Result<()> {
        let wait = ABANDON_CLOSED_BY.saturating_sub(h.since.elapsed());
        std::thread::sleep(wait);
        let mut c = Conn::new(h.peer, 1);
        if !h.owed {
            return Ok(());
        }
        let deadline = Instant::now() + self.timeout;
        loop {
            match c
                .peer
                .recv(deadline.saturating_duration_since(Instant::now()))
            {
                // Replies pushed before the close are still in the ring; their
                // offers are gone with the generator's view, so only count them.
                Event::Msg(_) => self.tally.replies += 1,
                Event::Closed => return Ok(()),
                Event::Timeout => {
                    let _ = msgs;
                    return Err(self.fail(&format!(
                        "an RDMA peer that stopped polling after call #{} was not closed within {:?} \
                         (rdma.read_timeout_s / rdma.send_timeout_s = {:?})",
                        h.index,
                        ABANDON_CLOSED_BY,
                        RDMA_TIMEOUT
                    )));
                }
            }
        }
    }

    /// The flood (docs/fuzzing.md "Campaign 4: rdma"): while 24-80 peers hold RDMA
    /// Reads unanswered (and the large buffers they pin), a fresh connection's data
    /// check and a TCP NULL must complete within the call timeout (the WRITE may wait
    /// for the gateway to reap the flood after `rdma.read_timeout_s`, no longer).
    fn rdma_flood(
        &mut self,
        addr: SocketAddr,
        fh: &[u8],
        rng: &mut super::rng::Rng,
    ) -> anyhow::Result<()> {
        let n = 24 + rng.below(57);
        self.remember(
            self.tally.calls,
            format!("RDMA flood of {n} connections"),
            Vec::new(),
        );
        let (peers, refused) = super::rdmacheck::flood(addr, fh, rng, n, self.timeout);
        let (pool, empty) = match self.gw.scrape() {
            Ok(m) => (
                m.sum("nfsgw_pool_buffers_in_use", &[]),
                m.sum("nfsgw_pool_exhausted_total", &[]),
            ),
            Err(_) => (f64::NAN, f64::NAN),
        };
        println!(
            "fuzz: rdma flood: {} connections holding unanswered RDMA Reads ({refused} refused), \
             pool buffers in use {pool}, class-empty allocations so far {empty}",
            peers.len()
        );
        let t0 = Instant::now();
        super::rdmacheck::write_read(addr, fh, self.seed, FLOOD_ROUND, self.timeout)
            .map_err(|e| self.fail(&format!("data check during the RDMA flood: {e}")))?;
        let mut t = super::client::Client::connect(&self.gw.addr, self.timeout)?;
        t.null()
            .map_err(|e| self.fail(&format!("TCP NULL during the RDMA flood: {e:#}")))?;
        println!(
            "fuzz: rdma flood: a fresh connection's WRITE and READ took {:.1} s",
            t0.elapsed().as_secs_f64()
        );
        drop(peers);
        self.check_process()
    }

    /// Campaign 4 (docs/fuzzing.md "Campaign 4: rdma").
    pub fn run_rdma(&mut self, addr: SocketAddr, rng: &mut super::rng::Rng) -> anyhow::Result<()> {
        let mut g = RdmaGen::new(rng.next_u64());
        let mut v4 =
            super::v4::V4Gen::new(self.seed, format!("fz-{}-rdma", self.seed).into_bytes());
        v4.files = self.gen.files.clone();
        v4.dirs = self.gen.dirs.clone();
        let mut conn: Option<Conn> = None;
        let mut held: VecDeque<Held> = VecDeque::new();
        let mut i = 0;
        let mut next_tcp_probe = 1000;
        let mut next_data_check = 0;
        let mut flooded = false;
        let data_fh = {
            let mut t = super::client::Client::connect(&self.gw.addr, self.timeout)?;
            let root = t.mount()?;
            let dir = t.lookup(&root, super::client::CANARY_DIR)?;
            let name = format!("rdma-{}.dat", self.seed);
            t.create(&dir, name.as_bytes())
                .or_else(|_| t.lookup(&dir, name.as_bytes()))?
        };
        while !self.done(i) {
            let mut act = g.act();
            if act == Act::Abandon && held.len() >= MAX_HELD {
                act = Act::Normal;
            }
            if act == Act::Reconnect {
                conn = None;
            }
            let mut c = match conn.take() {
                Some(c) if !c.peer.closed => c,
                _ => {
                    let private = if act == Act::Reconnect {
                        g.private_data()
                    } else {
                        Vec::new()
                    };
                    let label = format!("RDMA connect, private data {}", hex(&private));
                    self.remember(i, label, private.clone());
                    match self.rdma_open(addr, &private)? {
                        Some(c) => c,
                        None => {
                            self.check_process()?;
                            continue;
                        }
                    }
                }
            };
            let n = match act {
                Act::Burst(_) => g.burst_len(c.grant),
                _ => 1,
            };
            let grant = c.grant as usize;
            let mut msgs: Vec<Msg> = Vec::with_capacity(n);
            for k in 0..n {
                if self.done(i) {
                    break;
                }
                let xid = self.next_xid();
                let mut m = if g.rng.chance(1, 25) {
                    g.stray(xid)
                } else if g.rng.chance(1, 8) {
                    // An NFSv4.1 COMPOUND without a session (campaign 3's generator):
                    // its ops fail at the first, but its arguments are walked for the
                    // chunks first.
                    // Only before the first message of a burst: the setup waits for
                    // its own replies and sets aside any other.
                    if !c.tried && g.rng.chance(1, 2) && k == 0 {
                        c.tried = true;
                        if sessions() {
                            self.rdma_v4_setup(&mut c, &mut v4)?;
                        }
                        if c.peer.closed {
                            break;
                        }
                    }
                    let c4 = v4.next(c.sess.as_ref());
                    if c.v4_pending.len() == 64 {
                        c.v4_pending.remove(0);
                    }
                    c.v4_pending.push((xid, c4.clone()));
                    let label = c4.label();
                    self.tally
                        .by_proc
                        .entry("NFS4 COMPOUND".into())
                        .or_default()
                        .0 += 1;
                    let call = Call {
                        prog: NFS_PROG,
                        vers: 4,
                        proc_: 1,
                        cred: Cred::root(),
                        args: c4.args,
                    };
                    let mut m = g.message(call, xid, &c.view());
                    m.label = format!(
                        "RDMA {label}{}",
                        m.label.trim_start_matches("RDMA prog 100003 v4 proc 1")
                    );
                    m
                } else {
                    let call = self.gen.next(i);
                    self.tally.by_proc.entry(call.label()).or_default().0 += 1;
                    g.message(call, xid, &c.view())
                };
                // Past the grant the gateway may drop the message or the connection.
                if k + 2 > grant {
                    m.must_answer = false;
                }
                self.remember(i, m.label.clone(), m.bytes.clone());
                self.tally.calls += 1;
                i += 1;
                for (a, off, b) in &m.fills {
                    c.peer.fill(*a, *off, b);
                }
                c.sent(m.xid, m.offer.clone());
                let ok = c.peer.send(&m.bytes);
                // A message that could not be posted (the connection is going) is
                // owed nothing.
                m.must_answer &= ok;
                if trace() {
                    eprintln!(
                        "rdma trace: #{} {} xid {:#x} must {} sent {ok} len {}: {}",
                        i - 1,
                        m.label,
                        m.xid,
                        m.must_answer,
                        m.bytes.len(),
                        hex(&m.bytes[..m.bytes.len().min(400)])
                    );
                }
                msgs.push(m);
                if !ok {
                    break;
                }
            }
            let owed = msgs.iter().any(|m| m.must_answer);
            match act {
                Act::Disconnect => {
                    c.peer.drop_now();
                    self.check_process()?;
                    continue;
                }
                Act::Abandon => {
                    self.tally.held += 1;
                    held.push_back(Held {
                        peer: c.peer,
                        since: Instant::now(),
                        owed,
                        index: i - 1,
                    });
                    self.check_process()?;
                    continue;
                }
                Act::Revoke => {
                    c.peer.revoke();
                    // What the gateway does with the dead rkeys: its RDMA Reads or
                    // Writes, or its reply's Send, fail; the connection must end.
                    let want = if owed { vec![u32::MAX] } else { Vec::new() };
                    if owed {
                        self.rdma_await(&mut c, &msgs, want, &mut v4)?;
                    }
                    self.check_process()?;
                    continue;
                }
                _ => {}
            }
            let px = self.next_xid();
            c.sent(px, Offer::default());
            let mut want: Vec<u32> = msgs
                .iter()
                .filter(|m| m.must_answer)
                .map(|m| m.xid)
                .collect();
            if c.peer.send(&probe(px, c.grant)) {
                want.push(px);
            }
            if self.rdma_await(&mut c, &msgs, want, &mut v4)? {
                conn = Some(c);
            }
            self.check_process()?;
            while held
                .front()
                .is_some_and(|h| h.since.elapsed() > ABANDON_CLOSED_BY)
            {
                let h = held.pop_front().expect("front exists");
                self.rdma_check_held(h, &msgs)?;
            }
            if !flooded && i >= self.calls / 2 {
                flooded = true;
                self.rdma_flood(addr, &data_fh, rng)?;
            }
            if i >= next_data_check {
                let round = next_data_check / super::rdmacheck::EVERY;
                next_data_check += super::rdmacheck::EVERY;
                super::rdmacheck::write_read(addr, &data_fh, self.seed, round, self.timeout)
                    .map_err(|e| {
                        self.fail(&format!(
                            "data check {round} on a fresh RDMA connection: {e}"
                        ))
                    })?;
            }
            if i >= next_tcp_probe {
                next_tcp_probe += 1000;
                let mut t = super::client::Client::connect(&self.gw.addr, self.timeout)
                    .map_err(|e| self.fail(&format!("TCP connect during campaign rdma: {e:#}")))?;
                t.null()
                    .map_err(|e| self.fail(&format!("TCP NULL during campaign rdma: {e:#}")))?;
            }
        }
        drop(conn);
        while let Some(h) = held.pop_front() {
            self.rdma_check_held(h, &[])?;
        }
        Ok(())
    }
}

/// "After each campaign": a fresh RDMA connection's NULL is answered (retrying the
/// connect for a while: the listener may still be reaping the campaign's connections).
pub fn null_on_fresh_connection(addr: SocketAddr, timeout: Duration) -> Result<(), String> {
    let end = Instant::now() + timeout;
    let mut c = loop {
        match Peer::connect(addr, &[], timeout) {
            Ok(p) => break p,
            Err(e) if Instant::now() > end => return Err(format!("connect: {e}")),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    let xid = 0x6e75_6c6c;
    if !c.send(&probe(xid, 1)) {
        return Err("NULL could not be sent".into());
    }
    match c.recv(timeout) {
        Event::Msg(m) => {
            let ok = m.len() > 28
                && m[..4] == xid.to_be_bytes()
                && wire::parse_reply(&m[28..]).is_some_and(|r| r.xid == xid && r.accept == Some(0));
            if ok {
                Ok(())
            } else {
                Err(format!("bad NULL reply {}", hex(&m)))
            }
        }
        Event::Closed => Err("closed before answering NULL".into()),
        Event::Timeout => Err(format!("NULL not answered within {timeout:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg_reply(xid: u32, credit: u32, writes: &[&[Segment]]) -> Vec<u8> {
        let mut e = wire::Enc::default();
        e.u32(xid).u32(1).u32(credit).u32(rw::RDMA_MSG).u32(0);
        for w in writes {
            e.u32(1).u32(w.len() as u32);
            for s in *w {
                e.u32(s.handle).u32(s.length).u64(s.offset);
            }
        }
        e.u32(0).u32(0);
        // RPC reply: accepted, AUTH_NONE, SUCCESS.
        e.u32(xid).u32(1).u32(0).u32(0).u32(0).u32(0);
        e.0
    }

    /// The generator's overlapping spoil (rdmagen `spoil`, case 6) is told apart from
    /// segments that only touch; empty segments overlap nothing.
    #[test]
    fn overlapping_segments_are_those_sharing_a_byte() {
        let seg = |offset, length| Segment {
            handle: 7,
            length,
            offset,
        };
        assert!(!overlapping(&[
            seg(0x1000, 224),
            seg(0x10e0, 224),
            seg(0x11c0, 224)
        ]));
        // The CI failure's chunk: the 2nd segment 18 bytes into the 1st.
        assert!(overlapping(&[
            seg(0x1000, 224),
            seg(0x10e0, 224),
            seg(0x1012, 224)
        ]));
        assert!(!overlapping(&[seg(0x1000, 0), seg(0x1000, 16)]));
        assert!(overlapping(&[seg(u64::MAX - 8, 64), seg(u64::MAX - 1, 1)]));
    }

    #[test]
    fn segments_must_stay_within_the_offer() {
        let o = Segment {
            handle: 9,
            length: 4096,
            offset: 0x1000,
        };
        assert!(within(&[o], &[o]).is_ok());
        assert!(within(&[Segment { length: 100, ..o }], &[o]).is_ok());
        assert!(within(&[Segment { length: 4097, ..o }], &[o]).is_err());
        assert!(within(
            &[Segment {
                offset: 0x1004,
                ..o
            }],
            &[o]
        )
        .is_err());
        assert!(within(&[Segment { handle: 8, ..o }], &[o]).is_err());
        assert!(within(&[o, o], &[o]).is_err());
    }

    /// The header rules, without a connection (RDMA_NOMSG gathering aside).
    #[test]
    fn reply_header_rules() {
        let o = Segment {
            handle: 9,
            length: 4096,
            offset: 0x1000,
        };
        let offer = Offer {
            writes: vec![vec![o]],
            reply: None,
        };
        let sent: VecDeque<(u32, Offer)> = [(5, offer)].into_iter().collect();
        let check = |m: &[u8]| check_sent(&sent, m, &|_| None).map(|g| g.xid);
        assert!(check(&msg_reply(5, 16, &[&[Segment { length: 10, ..o }]])).is_ok());
        assert!(check(&msg_reply(5, 0, &[]))
            .unwrap_err()
            .contains("credits granted 0"));
        assert!(check(&msg_reply(6, 16, &[]))
            .unwrap_err()
            .contains("never sent"));
        assert!(
            check(&msg_reply(5, 16, &[&[Segment { length: 4097, ..o }]]))
                .unwrap_err()
                .contains("write chunk 0")
        );
        assert!(check(&msg_reply(5, 16, &[&[o], &[o]]))
            .unwrap_err()
            .contains("2 write chunks"));
        // RDMA_ERROR: ERR_VERS must include version 1; an unknown error code does
        // not decode.
        let mut e = wire::Enc::default();
        e.u32(5)
            .u32(1)
            .u32(1)
            .u32(rw::RDMA_ERROR)
            .u32(rw::ERR_VERS)
            .u32(2)
            .u32(3);
        assert!(check(&e.0).unwrap_err().contains("ERR_VERS"));
        let mut e = wire::Enc::default();
        e.u32(5).u32(1).u32(1).u32(rw::RDMA_ERROR).u32(7);
        assert!(check(&e.0).unwrap_err().contains("does not decode"));
    }
}
