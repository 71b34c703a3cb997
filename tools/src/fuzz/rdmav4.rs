//! Campaign `rdma`'s NFSv4.1 share on a session: once per connection (half the time
//! its first COMPOUND is drawn) EXCHANGE_ID, CREATE_SESSION (campaign 3's generator:
//! 1 in 4 hostile, the back channel on this connection, so the gateway's CB_NULL and
//! recalls come over RDMA as RFC 8167 backward calls that are never answered) and the
//! lookups of the work area go as clean calls (a reply chunk always offered, a Long call
//! when too big to go inline); the fuzz COMPOUNDs then carry SEQUENCE on that session,
//! and their replies advance the slot and feed the generator's handles and stateids.

use super::campaign::{hex, Campaign};
use super::rdmagen::Offer;
use super::rdmapeer::{Area, Event};
use super::rdmarun::{check_reply, Conn};
use super::v4::{Compound, Session, V4Gen};
use super::v4check;
use super::wire::{self, call_record, Cred, Dec, Enc, NFS_PROG};
use engine::rpcrdma::wire::{self as rw, Segment};
use std::time::Instant;

/// Names looked up at setup (as campaign 3 does).
const NAMES: &[&[u8]] = &[b"f0", b"f1", b"f2", b"f3", b"d0", b"d1", b"l0"];
/// SEQUENCE errors after which the session is set up again on the next connection.
const SESSION_GONE: &[u32] = &[10052, 10078, 10022, 10011, 10077];
/// The reply chunk every clean call offers.
const REPLY_CHUNK: usize = 64 * 1024;

impl Campaign<'_> {
    /// One clean COMPOUND; its accepted reply body, or `None` (closed, not accepted,
    /// RDMA_ERROR). Shape violations are failures. Sent only with nothing else
    /// outstanding: other messages that arrive meanwhile are checked and set aside.
    fn rdma_v4_clean(
        &mut self,
        c: &mut Conn,
        comp: &Compound,
    ) -> anyhow::Result<Option<v4check::Res>> {
        let xid = self.next_xid();
        let rec = call_record(xid, NFS_PROG, 4, 1, &Cred::root(), &comp.args);
        let body = &rec[4..];
        let reply = Segment {
            handle: c.peer.mr.rkey,
            length: REPLY_CHUNK as u32,
            offset: c.peer.area(Area::Reply).0,
        };
        let long = body.len() + 64 > c.peer.server_recv;
        let mut e = Enc::default();
        e.u32(xid).u32(1).u32(c.grant.max(1));
        if long {
            c.peer.fill(Area::Source, 0, body);
            let (src, _) = c.peer.area(Area::Source);
            e.u32(rw::RDMA_NOMSG)
                .u32(1)
                .u32(0)
                .u32(c.peer.mr.rkey)
                .u32(body.len() as u32)
                .u64(src);
        } else {
            e.u32(rw::RDMA_MSG);
        }
        e.u32(0).u32(0).u32(1).u32(1);
        e.u32(reply.handle).u32(reply.length).u64(reply.offset);
        if !long {
            e.0.extend_from_slice(body);
        }
        self.remember(
            self.tally.calls,
            format!("RDMA setup {}", comp.label()),
            e.0.clone(),
        );
        c.sent(
            xid,
            Offer {
                writes: Vec::new(),
                reply: Some(vec![reply]),
            },
        );
        if !c.peer.send(&e.0) {
            return Ok(None);
        }
        let deadline = Instant::now() + self.timeout;
        loop {
            match c
                .peer
                .recv(deadline.saturating_duration_since(Instant::now()))
            {
                Event::Msg(m) => {
                    let got = check_reply(c, &m).map_err(|e| {
                        self.fail(&format!(
                            "RDMA reply breaks RFC 8166: {e}; message: {}",
                            hex(&m)
                        ))
                    })?;
                    if got.callback {
                        if super::rdmarun::trace() {
                            eprintln!(
                                "rdma trace: callback during setup {}",
                                hex(&m[..m.len().min(64)])
                            );
                        }
                        *self.tally.by_stat.entry("callbacks".into()).or_default() += 1;
                        continue;
                    }
                    if got.xid != xid {
                        continue;
                    }
                    self.tally.replies += 1;
                    let Some(rpc) = got.rpc else {
                        return Ok(None);
                    };
                    let rep = wire::parse_reply(&rpc).expect("checked");
                    if rep.accept != Some(0) {
                        return Ok(None);
                    }
                    return v4check::check(comp, rep.body).map(Some).map_err(|why| {
                        self.fail(&format!(
                            "COMPOUND reply (over RDMA) breaks RFC 8881 §15.2: {why}; reply body: {}",
                            hex(rep.body)
                        ))
                    });
                }
                Event::Closed => return Ok(None),
                Event::Timeout => {
                    return Err(self.fail(&format!(
                        "no RDMA reply to setup xid {xid:#x} and no close within {:?}",
                        self.timeout
                    )))
                }
            }
        }
    }

    /// EXCHANGE_ID, CREATE_SESSION, SEQUENCE + lookups; leaves the session in `c`.
    pub(super) fn rdma_v4_setup(&mut self, c: &mut Conn, g: &mut V4Gen) -> anyhow::Result<()> {
        let x = g.exchange_id();
        let Some(r) = self.rdma_v4_clean(c, &x)? else {
            return Ok(());
        };
        let Some((clientid, seq)) = r.exchange else {
            return Ok(());
        };
        let cs = g.create_session(clientid, seq);
        let Some(r) = self.rdma_v4_clean(c, &cs)? else {
            return Ok(());
        };
        let Some((sessionid, slots)) = r.session else {
            return Ok(());
        };
        let mut sess = Session {
            clientid,
            sessionid,
            slots: vec![1; slots.clamp(1, 64) as usize],
        };
        let l = g.setup_lookups(&sess, NAMES);
        c.v4_last = vec![None; sess.slots.len()];
        if let Some(r) = self.rdma_v4_clean(c, &l)? {
            if r.results.first().is_some_and(|x| x.1 == 0) {
                sess.slots[0] = 2;
                // A retry of sequence id 1 is answered with this COMPOUND's reply.
                c.v4_last[0] = Some(l.clone());
            }
            for (at, fh) in r.handles {
                // GETFH results: 3 the root, 5 the work area, then 8, 11, ... NAMES.
                match at {
                    3 => g.root = fh,
                    5 => g.learn_fh(&fh, true),
                    _ => {
                        let k = at.saturating_sub(8) / 3;
                        g.learn_fh(&fh, NAMES.get(k).is_some_and(|n| n.starts_with(b"d")));
                    }
                }
            }
        }
        c.sess = Some(sess);
        Ok(())
    }

    fn v4_shape_fail(&self, why: &str, body: &[u8]) -> anyhow::Error {
        self.fail(&format!(
            "COMPOUND reply (over RDMA) breaks RFC 8881 §15.2: {why}; reply body: {}",
            hex(body)
        ))
    }

    /// A fuzz COMPOUND's accepted reply: the slot advances on SEQUENCE OK (a session
    /// gone is forgotten); without write chunks (READ data inline) the reply's shape is
    /// checked as campaign 3 checks it (or as the slot's previous request's, which the
    /// reply cache may have answered), and its handles and stateids are learned.
    pub(super) fn rdma_v4_reply(
        &mut self,
        c: &mut Conn,
        comp: &Compound,
        rep: &wire::Reply,
        ddp: bool,
        g: &mut V4Gen,
    ) -> anyhow::Result<()> {
        if rep.accept != Some(0) {
            return Ok(());
        }
        let mut d = Dec::new(rep.body);
        let first = (|| {
            d.u32()?;
            d.var(1 << 16)?;
            d.u32()?;
            Some((d.u32()?, d.u32()?))
        })();
        // The reply cache may answer with the slot's previous reply (a retried
        // sequence id, or one the fuzzer did not know was used: replies of a burst
        // come in any order), so a reply may have that request's shape instead.
        let prev = comp
            .seq
            .and_then(|(slot, _)| c.v4_last.get(slot).cloned().flatten());
        if let (Some((slot, seqid)), Some(se)) = (comp.seq, c.sess.as_mut()) {
            match first {
                Some((53, 0)) if se.slots.get(slot) == Some(&seqid) => {
                    se.slots[slot] = seqid.wrapping_add(1);
                    if c.v4_last.len() < se.slots.len() {
                        c.v4_last.resize(se.slots.len(), None);
                    }
                    c.v4_last[slot] = Some(comp.clone());
                }
                Some((53, st)) if SESSION_GONE.contains(&st) => {
                    c.sess = None;
                    c.v4_last.clear();
                }
                _ => {}
            }
        }
        if ddp {
            return Ok(());
        }
        let r = match (v4check::check(comp, rep.body), prev) {
            (Ok(r), _) => r,
            (Err(why), Some(p)) if comp.seq.is_some() => {
                v4check::check(&p, rep.body).map_err(|_| self.v4_shape_fail(&why, rep.body))?
            }
            (Err(why), _) => return Err(self.v4_shape_fail(&why, rep.body)),
        };
        for (_, fh) in &r.handles {
            g.learn_fh(fh, false);
        }
        for sid in &r.stateids {
            g.learn_stateid(*sid);
        }
        Ok(())
    }
}
