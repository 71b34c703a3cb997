//! Running campaign 3 (`v4`): per connection a session is set up (EXCHANGE_ID,
//! CREATE_SESSION, then SEQUENCE + RECLAIM_COMPLETE with lookups of the work area), and
//! redone whenever the server closes the connection or the session goes bad; then one
//! fuzz COMPOUND at a time ([`super::v4`]). One COMPOUND in 8 is mutated
//! ([`super::mutate`]) and followed by an NFSv4 NULL probe, as in campaign 2. Every
//! reply must come within the call timeout (or the connection close), be a well-formed
//! RPC reply with the call's xid, and an accepted COMPOUND4res must have the shape RFC
//! 8881 §15.2 gives it ([`super::v4check`]); the process checks run after every call.

use super::campaign::{hex, Campaign, MAX_RECORD};
use super::mutate::{self, Framing};
use super::rng::Rng;
use super::v4::{Compound, Session, V4Gen};
use super::v4check::{self, Res};
use super::values;
use super::wire::{self, call_record, Cred, Got, NFS_PROG};
use std::net::TcpStream;
use std::time::Instant;

/// NFS4ERR_BADSESSION, NFS4ERR_DEADSESSION, NFS4ERR_STALE_CLIENTID, NFS4ERR_EXPIRED,
/// NFS4ERR_BAD_HIGH_SLOT... : the session is gone or unusable, set up another.
const SESSION_GONE: &[u32] = &[10052, 10078, 10022, 10011, 10077];
/// Names looked up (and their handles learned) in the work area at setup.
const NAMES: &[&[u8]] = &[b"f0", b"f1", b"f2", b"f3", b"d0", b"d1", b"l0"];

/// A reply, or the connection closed.
enum Answer {
    Res(Res),
    /// Accepted with a non-success accept_stat, or denied.
    NotAccepted,
    Closed,
}

impl Campaign<'_> {
    /// Sends one COMPOUND and waits for its reply; a shape violation, a malformed
    /// reply or no answer in time is a failure. `prev` is the request last answered on
    /// the same slot: a retried sequence id may be answered from the reply cache.
    fn v4_call(
        &mut self,
        s: &mut TcpStream,
        c: &Compound,
        cred: &Cred,
        prev: Option<&Compound>,
    ) -> anyhow::Result<Answer> {
        let xid = self.next_xid();
        let rec = call_record(xid, NFS_PROG, 4, 1, cred, &c.args);
        self.remember(self.tally.calls, c.label(), rec.clone());
        if !wire::send(s, &rec)? {
            self.tally.closes += 1;
            return Ok(Answer::Closed);
        }
        let deadline = Instant::now() + self.timeout;
        loop {
            match wire::read_record(s, deadline).map_err(|e| self.fail(&e.to_string()))? {
                Got::Closed => {
                    self.tally.closes += 1;
                    return Ok(Answer::Closed);
                }
                Got::Timeout => {
                    return Err(self.fail(&format!(
                        "no reply to xid {xid:#x} and no close within {:?}",
                        self.timeout
                    )))
                }
                Got::Reply(r) if is_call(&r) => {}
                Got::Reply(r) => {
                    let Some(rep) = wire::parse_reply(&r) else {
                        return Err(self.fail(&format!("malformed reply record: {}", hex(&r))));
                    };
                    if rep.xid != xid {
                        continue;
                    }
                    self.tally.replies += 1;
                    if rep.accept != Some(0) {
                        let k = rep
                            .accept
                            .map_or("denied".to_string(), |a| format!("accept_stat {a}"));
                        *self.tally.by_stat.entry(k).or_default() += 1;
                        return Ok(Answer::NotAccepted);
                    }
                    let got = match (v4check::check(c, rep.body), prev) {
                        (Ok(r), _) => r,
                        (Err(e), Some(p)) if c.seq.is_some() => match v4check::check(p, rep.body) {
                            Ok(r) => r,
                            Err(_) => e_fail(self, &e, rep.body)?,
                        },
                        (Err(e), _) => e_fail(self, &e, rep.body)?,
                    };
                    let k = match got.status {
                        0 => "success".to_string(),
                        // NFS4ERR_IO and NFS4ERR_SERVERFAULT name their op: a hostile
                        // value the server did not map to a protocol error.
                        st @ (5 | 10006) => {
                            let op = got.results.last().map_or(0, |r| r.0);
                            format!("status {st} {}", super::v4::op_name(op))
                        }
                        st => format!("status {st}"),
                    };
                    *self.tally.by_stat.entry(k).or_default() += 1;
                    // Calls by the ops sent, successes by the results' own opnums (a
                    // retry's reply may be the cached one of another request).
                    for &op in &c.ops {
                        self.tally
                            .by_proc
                            .entry(super::v4::op_name(op))
                            .or_default()
                            .0 += 1;
                    }
                    for &(op, st) in &got.results {
                        if st == 0 {
                            self.tally
                                .by_proc
                                .entry(super::v4::op_name(op))
                                .or_default()
                                .1 += 1;
                        }
                    }
                    return Ok(Answer::Res(got));
                }
            }
        }
    }

    /// EXCHANGE_ID, CREATE_SESSION, SEQUENCE + RECLAIM_COMPLETE + lookups. `Ok(None)`
    /// when the server refused (a hostile CREATE_SESSION, a full client table): the
    /// fuzz COMPOUNDs then go without a session until the next try.
    fn v4_setup(
        &mut self,
        s: &mut TcpStream,
        g: &mut V4Gen,
    ) -> anyhow::Result<Option<(Session, Option<Compound>)>> {
        let root = Cred::root();
        let x = g.exchange_id();
        let Answer::Res(r) = self.v4_call(s, &x, &root, None)? else {
            return Ok(None);
        };
        let Some((clientid, seq)) = r.exchange else {
            return Ok(None);
        };
        let c = g.create_session(clientid, seq);
        let Answer::Res(r) = self.v4_call(s, &c, &root, None)? else {
            return Ok(None);
        };
        let Some((sessionid, slots)) = r.session else {
            return Ok(None);
        };
        let mut sess = Session {
            clientid,
            sessionid,
            slots: vec![1; slots.clamp(1, 64) as usize],
        };
        let l = g.setup_lookups(&sess, NAMES);
        let mut last = None;
        if let Answer::Res(r) = self.v4_call(s, &l, &root, None)? {
            if r.results.first().is_some_and(|x| x.1 == 0) {
                sess.slots[0] = 2;
                last = Some(l);
            }
            for (at, fh) in r.handles {
                // GETFH results: 3 the root, 5 the work area, then 8, 11, ... NAMES.
                match at {
                    3 => g.root = fh,
                    5 => g.learn_fh(&fh, true),
                    _ => {
                        let k = at.saturating_sub(8) / 3;
                        let dir = NAMES.get(k).is_some_and(|n| n.starts_with(b"d"));
                        g.learn_fh(&fh, dir);
                    }
                }
            }
        }
        Ok(Some((sess, last)))
    }

    /// Campaign 3: fuzz COMPOUNDs on a session, 1 in 8 mutated.
    pub fn run_v4(&mut self, rng: &mut Rng, g: &mut V4Gen) -> anyhow::Result<()> {
        let mut conn: Option<(TcpStream, Option<Session>)> = None;
        // The last request answered with SEQUENCE OK on each slot (for retries).
        let mut last: Vec<Option<Compound>> = Vec::new();
        let mut i = 0;
        while !self.done(i) {
            let (mut s, mut sess) = match conn.take() {
                Some(x) => x,
                None => (self.connect()?, None),
            };
            if sess.is_none() && !rng.chance(1, 16) {
                let set = self.v4_setup(&mut s, g)?;
                self.check_process()?;
                last = vec![None; set.as_ref().map_or(0, |x| x.0.slots.len())];
                if let Some((se, l)) = set {
                    last[0] = l;
                    sess = Some(se);
                }
            }
            let c = g.next(sess.as_ref());
            let cred = if rng.chance(1, 10) {
                values::cred(rng)
            } else {
                Cred::root()
            };
            self.tally.calls += 1;
            i += 1;
            if rng.chance(1, 8) {
                // Mutated: the connection is not used for checked COMPOUNDs again. The
                // mutated call's reply may come after the probe's (a worker is slower
                // than the reactor's NULL), and a mutation may have turned its xid into
                // one of the next calls'; the slot's sequence is unknown too.
                self.v4_mutated(rng, &mut s, &c, &cred)?;
                self.check_process()?;
                continue;
            }
            let prev = c.seq.and_then(|(k, _)| last.get(k).cloned().flatten());
            let ans = self.v4_call(&mut s, &c, &cred, prev.as_ref())?;
            self.check_process()?;
            let Answer::Res(r) = ans else {
                if matches!(ans, Answer::NotAccepted) {
                    conn = Some((s, sess));
                }
                continue;
            };
            for (_, fh) in &r.handles {
                g.learn_fh(fh, false);
            }
            for sid in &r.stateids {
                g.learn_stateid(*sid);
            }
            if let (Some((slot, seqid)), Some(se)) = (c.seq, sess.as_mut()) {
                match r.results.first() {
                    Some(&(53, 0)) if seqid == se.slots[slot] => {
                        se.slots[slot] = seqid.wrapping_add(1);
                        last[slot] = Some(c.clone());
                    }
                    Some(&(53, st)) if SESSION_GONE.contains(&st) => sess = None,
                    _ => {}
                }
            }
            conn = Some((s, sess));
        }
        Ok(())
    }

    /// A mutated COMPOUND, framed as campaign 2 frames it; `Ok(true)` if the connection
    /// is still usable.
    fn v4_mutated(
        &mut self,
        rng: &mut Rng,
        s: &mut TcpStream,
        c: &Compound,
        cred: &Cred,
    ) -> anyhow::Result<bool> {
        let xid = self.next_xid();
        let base = call_record(xid, NFS_PROG, 4, 1, cred, &c.args);
        let bytes = mutate::mutate(rng, &base);
        self.remember(
            self.tally.calls,
            format!("mutated {}", c.label()),
            bytes.clone(),
        );
        match mutate::framing(&bytes, MAX_RECORD) {
            Framing::Complete => {
                let probe = self.next_xid();
                let mut both = bytes;
                both.extend_from_slice(&call_record(probe, NFS_PROG, 4, 0, &Cred::None, &[]));
                if !wire::send(s, &both)? {
                    return Ok(false);
                }
                self.await_probe(s, probe)
            }
            Framing::TooLong => {
                if wire::send(s, &bytes)? {
                    self.await_close(s, "a record mark beyond tcp.max_record")?;
                }
                Ok(false)
            }
            Framing::Incomplete => {
                self.tally.held += 1;
                wire::send(s, &bytes)?;
                Ok(false)
            }
        }
    }

    /// Waits for the NULL probe's reply (other replies must be well-formed);
    /// `Ok(false)` if the server closed first.
    fn await_probe(&mut self, s: &mut TcpStream, probe: u32) -> anyhow::Result<bool> {
        let deadline = Instant::now() + self.timeout;
        loop {
            match wire::read_record(s, deadline).map_err(|e| self.fail(&e.to_string()))? {
                Got::Closed => {
                    self.tally.closes += 1;
                    return Ok(false);
                }
                Got::Timeout => {
                    return Err(self.fail(&format!(
                        "no reply to the NULL probe {probe:#x} after a mutated COMPOUND and no close within {:?}",
                        self.timeout
                    )))
                }
                Got::Reply(r) if is_call(&r) => {}
                Got::Reply(r) => {
                    let Some(rep) = wire::parse_reply(&r) else {
                        return Err(self.fail(&format!("malformed reply record: {}", hex(&r))));
                    };
                    self.tally.replies += 1;
                    if rep.xid == probe {
                        return Ok(true);
                    }
                }
            }
        }
    }
}

/// A back-channel call from the server (CB_NULL, CB_COMPOUND on a session created
/// with CREATE_SESSION4_FLAG_CONN_BACK_CHAN, RFC 8881 §2.10.3.1): msg_type CALL. The
/// fuzzer does not answer them: the server must cope with a client that never does.
fn is_call(rec: &[u8]) -> bool {
    rec.get(4..8) == Some(&[0, 0, 0, 0])
}

fn e_fail(c: &Campaign, why: &str, body: &[u8]) -> anyhow::Result<Res> {
    Err(c.fail(&format!(
        "COMPOUND reply breaks RFC 8881 §15.2: {why}; reply body: {}",
        hex(body)
    )))
}
