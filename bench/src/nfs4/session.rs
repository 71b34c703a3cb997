//! The blocking NFSv4.1 client of bench's setup and check phases: EXCHANGE_ID and
//! CREATE_SESSION (RFC 8881 §18.35, §18.36), RECLAIM_COMPLETE (§18.51), the export's
//! root by PUTROOTFH + LOOKUPs, OPEN of the file set (create, CLAIM_NULL), filling and
//! reading back files, COMMIT, and the teardown: CLOSE (and DELEGRETURN of any
//! delegation), DESTROY_SESSION, DESTROY_CLIENTID. Every request but EXCHANGE_ID,
//! CREATE_SESSION and the DESTROYs starts with SEQUENCE on the setup session; calls are
//! pipelined up to the slots the server granted, NFS4ERR_DELAY (and NFS4ERR_GRACE after
//! a server restart) is retried after a pause.

use super::reply::{self, status_name, Decoded};
use super::slots::Slots;
use super::{encode_compound, status, BackChannel, Op4, Seq, SessionId, Stateid, FATTR4_SIZE};
use crate::client::Conn;
use crate::jukebox::{Policy, Tries};
use crate::pattern::Pattern;
use crate::transport::Target;
use nfs_wire::v3mount::ExportNode;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a DELAY/GRACE answer is retried before giving up (a restarted server's
/// grace period is typically 90 s).
const RETRY_FOR: Duration = Duration::from_secs(120);
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// After an answer: the pause before resending it (DELAY: by `--jukebox-timeout`'s
/// policy, counted in `conn.jukebox`; GRACE: 50 ms for up to `RETRY_FOR`), `Ok(None)`
/// when it is final, an error when DELAY lasted too long.
fn resend_after(
    conn: &mut Conn,
    status: u32,
    tries: &mut Tries,
    start: Instant,
    what: &str,
) -> anyhow::Result<Option<Duration>> {
    match status {
        status::DELAY => match tries.next(&conn.retry, Instant::now()) {
            Some(p) => {
                conn.jukebox += 1;
                Ok(Some(p))
            }
            None => Err(anyhow::anyhow!(conn.retry.gave_up(what))),
        },
        status::GRACE if start.elapsed() < RETRY_FOR => Ok(Some(RETRY_PAUSE)),
        _ => Ok(None),
    }
}
/// Largest request/reply bench asks a session for: a 1 MiB WRITE or READ and headers.
pub const MAX_MSG: u32 = (1 << 20) + (64 << 10);

/// A session bench made: its id and the fore-channel slots granted.
#[derive(Clone, Copy, Debug)]
pub struct Session {
    pub id: SessionId,
    pub slots: u32,
}

/// One file of the set, opened.
#[derive(Clone, Debug)]
pub struct Opened {
    pub fh: Vec<u8>,
    pub size: u64,
    pub stateid: Stateid,
    pub deleg: Option<Stateid>,
}

/// Sends the ops (after SEQUENCE) of one pipelined request.
type SendOps<'a> = dyn FnMut(&[Op4]) -> anyhow::Result<()> + 'a;
/// Builds pipelined request `i` and sends it with the given sender.
type MakeReq<'a> = dyn Fn(usize, &mut SendOps) -> anyhow::Result<()> + 'a;

pub struct Client4 {
    conn: Conn,
    pub clientid: u64,
    /// The next CREATE_SESSION's csa_sequence (RFC 8881 §18.36.3).
    cs_seq: u32,
    pub session: Session,
    slots: Slots,
    /// The open owner of every OPEN bench sends.
    pub owner: Vec<u8>,
    /// Largest READ/WRITE payload the setup session carries.
    pub max_io: u32,
    /// The back channel each CREATE_SESSION asks for (RPC-over-RDMA targets).
    back: Option<BackChannel>,
}

/// A COMPOUND that must have succeeded: its failing operation and status as the error.
pub(crate) fn check(d: &Decoded, what: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        d.ok(),
        "{what}: {} (op {})",
        status_name(d.status),
        d.failed_op
    );
    Ok(())
}

impl Client4 {
    /// How calls answered NFS4ERR_DELAY are resent (`--jukebox-timeout`).
    pub fn set_retry(&mut self, p: Policy) {
        self.conn.retry = p;
    }

    /// Resends after NFS4ERR_DELAY so far.
    pub fn jukebox(&self) -> u64 {
        self.conn.jukebox
    }

    /// EXCHANGE_ID (a new client owner per bench process), CREATE_SESSION with `slots`
    /// fore slots, RECLAIM_COMPLETE.
    pub fn connect(target: &Target, slots: u32) -> anyhow::Result<Client4> {
        let mut conn = Conn::connect(target)?;
        // Over RPC-over-RDMA the connection offers a back channel (RFC 8167): bind it
        // with CONN_BACK_CHAN, its messages within the inline threshold (4 KiB both
        // ways for bench's RDMA client) less the transport header.
        let back = matches!(target, Target::Rdma { .. }).then_some(BackChannel {
            slots: crate::rdma::BACKCHANNEL_CREDITS,
            max_msg: 4096 - 28,
        });
        let pid = std::process::id();
        let owner = format!("nfsgw-bench/{pid}/{:016x}", rand::random::<u64>()).into_bytes();
        let verifier = rand::random::<u64>().to_be_bytes();
        let body = conn.call_with(|out, xid, cred| {
            encode_compound(
                out,
                xid,
                cred,
                &[Op4::ExchangeId {
                    verifier,
                    owner: &owner,
                }],
            )
        })?;
        let d = reply::decode(&body).map_err(anyhow::Error::msg)?;
        check(&d, "EXCHANGE_ID")?;
        let (clientid, seq) = d
            .clientid
            .ok_or_else(|| anyhow::anyhow!("EXCHANGE_ID reply without a client id"))?;
        let mut c = Client4 {
            conn,
            clientid,
            cs_seq: seq,
            session: Session {
                id: [0; 16],
                slots: 0,
            },
            slots: Slots::default(),
            owner: format!("bench-{pid}").into_bytes(),
            max_io: 0,
            back,
        };
        let (session, max_io) = c.create_session_sized(slots)?;
        c.session = session;
        c.slots = Slots::new(session.slots);
        c.max_io = max_io;
        let body = c.compound(&[Op4::ReclaimComplete])?;
        let d = reply::decode(&body).map_err(anyhow::Error::msg)?;
        if !d.ok() && d.status != status::COMPLETE_ALREADY {
            check(&d, "RECLAIM_COMPLETE")?;
        }
        Ok(c)
    }

    /// CREATE_SESSION asking `slots` fore slots (RFC 8881 §18.36); the server may
    /// grant fewer. Each session of the load's connections is one of these.
    pub fn create_session(&mut self, slots: u32) -> anyhow::Result<Session> {
        Ok(self.create_session_sized(slots)?.0)
    }

    fn create_session_sized(&mut self, slots: u32) -> anyhow::Result<(Session, u32)> {
        let (clientid, sequence, back) = (self.clientid, self.cs_seq, self.back);
        let body = self.conn.call_with(|out, xid, cred| {
            encode_compound(
                out,
                xid,
                cred,
                &[Op4::CreateSession {
                    clientid,
                    sequence,
                    slots: slots.max(1),
                    max_msg: MAX_MSG,
                    back,
                }],
            )
        })?;
        let d = reply::decode(&body).map_err(anyhow::Error::msg)?;
        check(&d, "CREATE_SESSION")?;
        let (id, granted, max_req, max_resp) = d
            .session
            .ok_or_else(|| anyhow::anyhow!("CREATE_SESSION reply without a session"))?;
        anyhow::ensure!(granted > 0, "CREATE_SESSION granted no slot");
        self.cs_seq = self.cs_seq.wrapping_add(1);
        // Unpredictable replies over RDMA are bounded by this (R8267-15).
        crate::rdma::set_v4_max_response(max_resp);
        // Room for the RPC header and the COMPOUND around the data.
        let max_io = max_req.min(max_resp).saturating_sub(512);
        Ok((
            Session {
                id,
                slots: granted.min(slots.max(1)),
            },
            max_io,
        ))
    }

    fn seq(&mut self) -> anyhow::Result<Seq> {
        let (slot, seqid) = self
            .slots
            .take()
            .ok_or_else(|| anyhow::anyhow!("no free session slot"))?;
        Ok(Seq {
            session: self.session.id,
            slot,
            seqid,
            highest: self.slots.highest(),
        })
    }

    /// One COMPOUND of SEQUENCE + `ops`, retried while the server answers DELAY or
    /// GRACE; returns the procedure results.
    pub fn compound(&mut self, ops: &[Op4]) -> anyhow::Result<Vec<u8>> {
        let start = Instant::now();
        let mut tries = Tries::default();
        loop {
            let seq = self.seq()?;
            let mut all = Vec::with_capacity(ops.len() + 1);
            all.push(Op4::Sequence(seq));
            all.extend_from_slice(ops);
            let res = self
                .conn
                .call_with(|out, xid, cred| encode_compound(out, xid, cred, &all));
            let body = match res {
                Ok(b) => b,
                Err(e) => {
                    self.slots.release(seq.slot, seq.seqid, false);
                    return Err(e);
                }
            };
            let d = reply::decode(&body).map_err(anyhow::Error::msg)?;
            self.slots.release(seq.slot, seq.seqid, d.seq_done);
            if let Some(p) = resend_after(&mut self.conn, d.status, &mut tries, start, "COMPOUND")?
            {
                std::thread::sleep(p);
                continue;
            }
            return Ok(body);
        }
    }

    /// Sends SEQUENCE + `ops` on a free slot without waiting for the reply (the
    /// metadata run pipelines its own requests); returns the xid and the SEQUENCE,
    /// whose slot [`Client4::release`] gives back when the reply is in.
    pub fn send(&mut self, ops: &[Op4]) -> anyhow::Result<(u32, Seq)> {
        let seq = self.seq()?;
        let mut all = Vec::with_capacity(ops.len() + 1);
        all.push(Op4::Sequence(seq));
        all.extend_from_slice(ops);
        match self
            .conn
            .send_with(|out, xid, cred| encode_compound(out, xid, cred, &all))
        {
            Ok(xid) => Ok((xid, seq)),
            Err(e) => {
                self.slots.release(seq.slot, seq.seqid, false);
                Err(e)
            }
        }
    }

    /// The next reply of a [`Client4::send`]: its xid and procedure results.
    pub fn recv(&mut self) -> anyhow::Result<(u32, anyhow::Result<Vec<u8>>)> {
        self.conn.recv()
    }

    /// Gives a sent request's slot back; `processed`: its SEQUENCE succeeded.
    pub fn release(&mut self, seq: &Seq, processed: bool) {
        self.slots.release(seq.slot, seq.seqid, processed);
    }

    /// Slots of the session (requests that may be in flight at once).
    pub fn slots(&self) -> usize {
        self.slots.len() as usize
    }

    /// The server's exports, by MOUNT EXPORT on this connection (NFSv4.1 itself has
    /// no such list; a server that serves MOUNT elsewhere, or not at all, needs
    /// `--export`).
    pub fn exports(&mut self) -> anyhow::Result<Vec<ExportNode>> {
        self.conn
            .exports()
            .map_err(|e| e.context("MOUNT on the NFS port (else give --export)"))
    }

    /// The file handle of `path` (PUTROOTFH, one LOOKUP per component, GETFH).
    pub fn root(&mut self, path: &str) -> anyhow::Result<Vec<u8>> {
        let names: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        let mut ops = vec![Op4::Putrootfh];
        ops.extend(names.iter().map(|n| Op4::Lookup(n)));
        ops.push(Op4::Getfh);
        let body = self.compound(&ops)?;
        let d = reply::decode(&body).map_err(anyhow::Error::msg)?;
        check(&d, &format!("looking up the export {path}"))?;
        d.fh.map(<[u8]>::to_vec)
            .ok_or_else(|| anyhow::anyhow!("GETFH of {path} returned no handle"))
    }

    /// OPEN (create if missing, UNCHECKED, CLAIM_NULL) of `name` in `dir`, its handle
    /// and size.
    pub fn open(&mut self, dir: &[u8], name: &str) -> anyhow::Result<Opened> {
        let owner = self.owner.clone();
        let body = self.compound(&[
            Op4::Putfh(dir),
            Op4::OpenCreate {
                clientid: self.clientid,
                owner: &owner,
                name,
            },
            Op4::Getfh,
            Op4::Getattr(&[FATTR4_SIZE]),
        ])?;
        let d = reply::decode(&body).map_err(anyhow::Error::msg)?;
        check(&d, &format!("OPEN {name}"))?;
        match (d.fh, d.size, d.open) {
            (Some(fh), Some(size), Some(stateid)) => Ok(Opened {
                fh: fh.to_vec(),
                size,
                stateid,
                deleg: d.deleg,
            }),
            _ => anyhow::bail!("OPEN {name}: reply without handle, size or stateid"),
        }
    }

    /// CLOSE of an open file (and DELEGRETURN of its delegation first).
    pub fn close(&mut self, f: &Opened) -> anyhow::Result<()> {
        if let Some(d) = f.deleg {
            let body = self.compound(&[Op4::Putfh(&f.fh), Op4::Delegreturn(d)])?;
            check(
                &reply::decode(&body).map_err(anyhow::Error::msg)?,
                "DELEGRETURN",
            )?;
        }
        let body = self.compound(&[Op4::Putfh(&f.fh), Op4::Close(f.stateid)])?;
        check(&reply::decode(&body).map_err(anyhow::Error::msg)?, "CLOSE")
    }

    pub fn commit(&mut self, fh: &[u8]) -> anyhow::Result<()> {
        let body = self.compound(&[Op4::Putfh(fh), Op4::Commit])?;
        check(&reply::decode(&body).map_err(anyhow::Error::msg)?, "COMMIT")
    }

    /// Runs `n` requests (SEQUENCE + `make(i)`'s ops), up to the session's slots in
    /// flight, handing each reply to `done(i, reply)`; DELAY/GRACE answers are resent.
    fn pipelined(
        &mut self,
        n: usize,
        make: &MakeReq<'_>,
        done: &mut dyn FnMut(usize, &Decoded) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let mut inflight: HashMap<u32, (usize, Seq)> = HashMap::new();
        let mut queue: std::collections::VecDeque<usize> = (0..n).collect();
        let mut tries: HashMap<usize, Tries> = HashMap::new();
        let start = Instant::now();
        while !queue.is_empty() || !inflight.is_empty() {
            while inflight.len() < self.slots.len() as usize {
                let Some(i) = queue.pop_front() else { break };
                let seq = self.seq()?;
                let conn = &mut self.conn;
                let mut xid = 0;
                make(i, &mut |ops: &[Op4]| {
                    let mut all = Vec::with_capacity(ops.len() + 1);
                    all.push(Op4::Sequence(seq));
                    all.extend_from_slice(ops);
                    xid = conn.send_with(|out, x, cred| encode_compound(out, x, cred, &all))?;
                    Ok(())
                })?;
                inflight.insert(xid, (i, seq));
            }
            let (xid, body) = self.conn.recv()?;
            let Some((i, seq)) = inflight.remove(&xid) else {
                anyhow::bail!("reply with unknown xid {xid}");
            };
            let body = body?;
            let d = reply::decode(&body).map_err(anyhow::Error::msg)?;
            self.slots.release(seq.slot, seq.seqid, d.seq_done);
            let t = tries.entry(i).or_default();
            if let Some(p) = resend_after(&mut self.conn, d.status, t, start, "request")? {
                std::thread::sleep(p);
                queue.push_back(i);
                continue;
            }
            done(i, &d)?;
        }
        Ok(())
    }

    /// Writes `size` bytes of `pat` into the open file (1 MiB or the session's largest
    /// WRITE, pipelined), then COMMITs.
    pub fn write_pattern(&mut self, f: &Opened, size: u64, pat: &Pattern) -> anyhow::Result<()> {
        let chunk = u64::from(self.max_io.clamp(4096, 1 << 20));
        let n = size.div_ceil(chunk) as usize;
        let sid = f.stateid.latest();
        let fh = f.fh.clone();
        self.pipelined(
            n,
            &|i, send| {
                let off = i as u64 * chunk;
                let len = chunk.min(size - off) as usize;
                let mut buf = vec![0u8; len];
                pat.fill(off, &mut buf);
                send(&[Op4::Putfh(&fh), Op4::Write(sid, off, &buf)])
            },
            &mut |_, d| check(d, "WRITE"),
        )?;
        self.commit(&f.fh)
    }

    /// Reads every `(offset, length)` back and checks it against `pat`; returns the
    /// bytes that matched and the blocks that did not.
    pub fn read_back(
        &mut self,
        f: &Opened,
        blocks: &[(u64, u32)],
        pat: &Pattern,
        name: &str,
    ) -> anyhow::Result<(u64, u64)> {
        let (mut good, mut bad) = (0u64, 0u64);
        let sid = f.stateid.latest();
        let fh = f.fh.clone();
        self.pipelined(
            blocks.len(),
            &|i, send| {
                let (off, len) = blocks[i];
                send(&[Op4::Putfh(&fh), Op4::Read(sid, off, len)])
            },
            &mut |i, d| {
                check(d, "READ")?;
                let (off, len) = blocks[i];
                let data = d.data.unwrap_or_default();
                match pat.first_mismatch(off, data) {
                    None if data.len() == len as usize => good += u64::from(len),
                    at => {
                        if bad < 5 {
                            eprintln!(
                                "bench: read-back of {name} at {off}+{len} does not match: {}",
                                match at {
                                    Some(at) => format!("first bad byte at offset {at}"),
                                    None => format!("{} bytes returned", data.len()),
                                }
                            );
                        }
                        bad += 1;
                    }
                }
                Ok(())
            },
        )?;
        Ok((good, bad))
    }

    /// DESTROY_SESSION of a load connection's session, sent on the setup session
    /// (SEQUENCE of another session first: RFC 8881 §18.37.3).
    pub fn destroy_session(&mut self, s: &SessionId) -> anyhow::Result<()> {
        let body = self.compound(&[Op4::DestroySession(*s)])?;
        check(
            &reply::decode(&body).map_err(anyhow::Error::msg)?,
            "DESTROY_SESSION",
        )
    }

    /// The end: DESTROY_SESSION of the setup session (the only op: RFC 8881 §18.37.3),
    /// then DESTROY_CLIENTID (§18.50).
    pub fn finish(mut self) -> anyhow::Result<()> {
        let sid = self.session.id;
        let body = self.conn.call_with(|out, xid, cred| {
            encode_compound(out, xid, cred, &[Op4::DestroySession(sid)])
        })?;
        check(
            &reply::decode(&body).map_err(anyhow::Error::msg)?,
            "DESTROY_SESSION",
        )?;
        let id = self.clientid;
        let body = self.conn.call_with(|out, xid, cred| {
            encode_compound(out, xid, cred, &[Op4::DestroyClientid(id)])
        })?;
        check(
            &reply::decode(&body).map_err(anyhow::Error::msg)?,
            "DESTROY_CLIENTID",
        )?;
        Ok(())
    }
}
