//! Sessions (RFC 8881 §2.10): channel attributes, the fore-channel slot table and its
//! exactly-once reply cache (§2.10.6), and the connection bound as back channel.
//!
//! A session is shared by every worker running one of its COMPOUNDs; its slot table is
//! behind its own mutex (never held across storage I/O: a slot is claimed at SEQUENCE,
//! the COMPOUND runs unlocked, and the reply is stored when it is done).

use crate::conn::ConnRef;
use crate::state::error::StateError;
use engine::rpcrdma::responder::DdpList;
use std::hash::Hasher;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Largest slot table a session gets (RFC 8881 §18.36: the server picks ca_maxrequests).
pub const MAX_SLOTS: u32 = 64;

/// channel_attrs4 (RFC 8881 §18.36).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChannelAttrs {
    pub header_pad: u32,
    pub max_request: u32,
    pub max_response: u32,
    pub max_response_cached: u32,
    pub max_ops: u32,
    pub max_requests: u32,
    /// ca_rdma_ird (at most one value).
    pub rdma_ird: Option<u32>,
}

/// What tells a retransmission from a different request reusing its slot and
/// sequence id (a false retry, RFC 8881 §2.10.6.1.3.1: the server MAY detect it and
/// answer NFS4ERR_SEQ_FALSE_RETRY instead of the cached reply of another request).
///
/// A retransmission resends the same COMPOUND4args, so the print is a hash of their
/// length and of the first [`ReqPrint::WINDOW`] bytes after SEQUENCE's arguments: the
/// operations, the file handle, stateids, offsets and counts of an ordinary call, and
/// for a short call all of it. SEQUENCE's own arguments are left out
/// (sa_highest_slotid may change between transmissions). A different request that
/// differs only past the window (e.g. in a WRITE's data, same length) still gets the
/// cached reply, as it would without the check: hashing whole 1 MiB WRITEs on every
/// call is not worth a MAY. The cost is one FxHash over at most 256 bytes per call.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReqPrint(u64);

impl ReqPrint {
    /// Bytes after SEQUENCE that are hashed.
    pub const WINDOW: usize = 256;

    /// The print of a COMPOUND4args of `args_len` bytes whose bytes after SEQUENCE's
    /// arguments start `after_seq`.
    pub fn of(args_len: usize, after_seq: &[u8]) -> ReqPrint {
        let mut h = rustc_hash::FxHasher::default();
        h.write_usize(args_len);
        h.write(&after_seq[..after_seq.len().min(Self::WINDOW)]);
        ReqPrint(h.finish())
    }
}

/// A cached COMPOUND4res and where its READ-class results' data lie in it (offsets
/// from its first byte; RFC 8267 §6.4.1), kept with it so a replay over
/// RPC-over-RDMA places the data in the write chunks as the first reply did, without
/// reading the bytes again.
#[derive(Debug, Default)]
pub struct CachedReply {
    pub bytes: Vec<u8>,
    pub data: DdpList,
}

/// One slot: the last sequence id seen and the reply of that request.
#[derive(Debug, Default)]
struct Slot {
    seqid: u32,
    /// The print of the request with `seqid` (false-retry check).
    print: ReqPrint,
    /// A request with `seqid` is running.
    busy: bool,
    /// The COMPOUND4res of `seqid` (None: not cached, replays get
    /// NFS4ERR_RETRY_UNCACHED_REP).
    reply: Option<Arc<CachedReply>>,
    /// The previous request's reply buffer, kept for `SlotClaim::finish_copy` to
    /// refill (no allocation per fast-path reply once the slot has been used).
    spare: Option<Arc<CachedReply>>,
}

/// Mutable parts of a session.
#[derive(Debug)]
struct Live {
    slots: Vec<Slot>,
    /// Slots whose replies the reply-cache budget covers (`Clients` reserves
    /// `granted` × `slot_bytes`): all of them, or fewer after `shrink_if_idle`
    /// (reported as sr_target_highest_slotid, RFC 8881 §2.10.6.1). A new request on a
    /// slot at or above it waits for the budget (`use_slot`: NFS4ERR_DELAY).
    granted: u32,
    /// When the last new request started (`shrink_if_idle`).
    last_used: Instant,
    /// When a shrunk session may next try to take its budget back (`regrow_due`).
    next_regrow: Option<Instant>,
    back_conn: Option<ConnRef>,
    cb_program: u32,
    dead: bool,
}

#[derive(Debug)]
pub struct Session {
    pub id: [u8; 16],
    pub clientid: u64,
    pub fore: ChannelAttrs,
    pub back: ChannelAttrs,
    /// csr_flags as answered.
    pub flags: u32,
    /// The address CREATE_SESSION came from (the per-address share of the reply
    /// cache, `Table::grant_slots`); None for sessions made without one (tests).
    pub addr: Option<IpAddr>,
    /// The minor version of the COMPOUND that created it: every CB_COMPOUND on its
    /// back channel says the same (Linux's callback service looks the session up
    /// among clients of that minor version only).
    pub minor: u32,
    live: Mutex<Live>,
}

/// What SEQUENCE decided for a request (RFC 8881 §2.10.6.1).
#[derive(Debug)]
pub enum SlotUse {
    /// A new request: run it, then `SlotClaim::finish`.
    New(SlotClaim),
    /// A retransmission of the request the slot holds: send these bytes again.
    Replay(Arc<CachedReply>),
}

/// A claimed slot; dropping it without `finish` leaves the slot uncached and free.
#[derive(Debug)]
pub struct SlotClaim {
    pub session: Arc<Session>,
    pub slot: u32,
    done: bool,
    /// The sequence id this claim gave the slot, and whether the slot held a cached
    /// reply before (moved to its spare): what `abandon` restores.
    seqid: u32,
    had_reply: bool,
    /// The print of the slot's previous request (what `abandon` restores).
    prev_print: ReqPrint,
    /// Where the reply's READ-class data lie (`with_data`), stored with it.
    data: DdpList,
}

impl SlotClaim {
    /// The reply's READ-class results' data lie at `data` (offsets from the
    /// COMPOUND4res's first byte): the `finish` that follows caches it with the
    /// bytes (`CachedReply::data`). Not called: the reply has none.
    pub fn set_data(&mut self, data: DdpList) {
        self.data = data;
    }

    /// Stores the COMPOUND4res (`None`: too big or not to be cached) and frees the slot.
    pub fn finish(mut self, reply: Option<Vec<u8>>) {
        let data = self.data;
        self.release(reply.map(|bytes| Arc::new(CachedReply { bytes, data })));
        self.done = true;
    }

    /// `finish(Some(reply.to_vec()))` without the allocation: the slot's spare buffer
    /// (the reply of its previous request, when no replay still holds it) is refilled
    /// with `reply`. The cached bytes are the same (RFC 8881 §2.10.6.1.3).
    pub fn finish_copy(self, reply: &[u8]) {
        self.finish_with(|v| v.extend_from_slice(reply))
    }

    /// `finish_copy` of the bytes `fill` appends to an empty buffer (a reply whose
    /// READ data is copied from the cache pages straight into the slot's buffer).
    pub fn finish_with(mut self, fill: impl FnOnce(&mut Vec<u8>)) {
        let mut live = self.session.lock();
        let granted = live.granted;
        if let Some(s) = live.slots.get_mut(self.slot as usize) {
            if self.slot >= granted {
                // Shrunk while it ran (never: a session with a busy slot is not
                // shrunk); nothing is kept outside the budget.
                s.busy = false;
                s.reply = None;
                s.spare = None;
                drop(live);
                self.done = true;
                return;
            }
            let mut kept = s.spare.take().unwrap_or_default();
            if Arc::get_mut(&mut kept).is_none() {
                // A replay in flight still holds the previous buffer.
                kept = Arc::default();
            }
            if let Some(c) = Arc::get_mut(&mut kept) {
                c.bytes.clear();
                fill(&mut c.bytes);
                c.data = self.data;
            }
            s.busy = false;
            s.reply = Some(kept);
        }
        drop(live);
        self.done = true;
    }

    /// Gives the slot back exactly as `use_slot` found it (sequence id one lower, the
    /// previous reply cached again, idle): for a request the reactor claimed the slot
    /// for and then hands to a worker, which claims it anew as the same new request
    /// (RFC 8881 §2.10.6.1): no reply was sent, so the client saw nothing; the worker
    /// runs the request in full (a WRITE the ring did write is written again with the
    /// same bytes, as NFSv3's fallback does).
    pub fn abandon(mut self) {
        let mut live = self.session.lock();
        if let Some(s) = live.slots.get_mut(self.slot as usize) {
            if s.busy && s.seqid == self.seqid {
                s.seqid = s.seqid.wrapping_sub(1);
                s.print = self.prev_print;
                s.busy = false;
                s.reply = if self.had_reply { s.spare.take() } else { None };
            }
        }
        drop(live);
        self.done = true;
    }

    fn release(&self, reply: Option<Arc<CachedReply>>) {
        let mut live = self.session.lock();
        let keep = self.slot < live.granted;
        if let Some(s) = live.slots.get_mut(self.slot as usize) {
            s.busy = false;
            s.reply = reply.filter(|_| keep);
        }
    }
}

impl Drop for SlotClaim {
    fn drop(&mut self) {
        if !self.done {
            self.release(None);
        }
    }
}

impl Session {
    pub fn new(
        id: [u8; 16],
        clientid: u64,
        fore: ChannelAttrs,
        back: ChannelAttrs,
        flags: u32,
        cb_program: u32,
        back_conn: Option<ConnRef>,
    ) -> Session {
        let n = fore.max_requests.clamp(1, MAX_SLOTS);
        Session {
            id,
            clientid,
            fore,
            back,
            flags,
            addr: None,
            minor: 1,
            live: Mutex::new(Live {
                slots: (0..n).map(|_| Slot::default()).collect(),
                granted: n,
                last_used: Instant::now(),
                next_regrow: None,
                back_conn,
                cb_program,
                dead: false,
            }),
        }
    }

    /// Reply-cache bytes one slot of a session with fore channel `fore` may hold:
    /// its cached reply and the spare buffer kept for reuse (`finish_copy`), each
    /// at most ca_maxresponsesize_cached (larger replies are not cached).
    pub fn slot_bytes(fore: &ChannelAttrs) -> u64 {
        2 * u64::from(fore.max_response_cached.max(1))
    }

    /// The session as made by a CREATE_SESSION from `addr`.
    pub fn from_addr(mut self, addr: IpAddr) -> Session {
        self.addr = Some(addr);
        self
    }

    /// The session as made by a CREATE_SESSION in a COMPOUND of minor version `minor`.
    pub fn with_minor(mut self, minor: u32) -> Session {
        self.minor = minor;
        self
    }

    /// Reply-cache bytes this session's slots may hold now (`Clients` budget).
    pub fn cache_bytes(&self) -> u64 {
        Self::slot_bytes(&self.fore) * u64::from(self.granted())
    }

    /// Slots the reply-cache budget covers (sr_target_highest_slotid + 1).
    pub fn granted(&self) -> u32 {
        self.lock().granted
    }

    /// Whether the session holds fewer slots' budget than its table (shrunk).
    pub fn is_shrunk(&self) -> bool {
        let live = self.lock();
        (live.granted as usize) < live.slots.len()
    }

    /// Gives back the reply cache of a session no request has used for `idle`:
    /// every slot but the first forgets its cached reply and its spare buffer, and
    /// the session's budget becomes one slot. Returns the bytes freed (0: in use,
    /// recently used, or already one slot). The slots keep their sequence ids, so
    /// the client's next request on any slot is still in order; the target
    /// (sr_target_highest_slotid 0, RFC 8881 §2.10.6.1) asks it to use slot 0, and a
    /// request on another slot takes the budget back (`Table::regrow`) or waits.
    /// A retransmission on a shrunk slot gets NFS4ERR_RETRY_UNCACHED_REP: after
    /// `idle` of silence a lost reply has long been retransmitted.
    pub fn shrink_if_idle(&self, now: Instant, idle: Duration) -> u64 {
        let mut live = self.lock();
        let quiet = now.saturating_duration_since(live.last_used) >= idle;
        if live.dead || live.granted <= 1 || !quiet || live.slots.iter().any(|s| s.busy) {
            return 0;
        }
        for s in &mut live.slots[1..] {
            s.reply = None;
            s.spare = None;
        }
        let freed = u64::from(live.granted - 1) * Self::slot_bytes(&self.fore);
        live.granted = 1;
        freed
    }

    /// Whether a shrunk session may try to take its budget back now (at most once
    /// per `every`; `Clients::regrow`).
    pub(crate) fn regrow_due(&self, every: Duration) -> bool {
        let now = Instant::now();
        let mut live = self.lock();
        if live.next_regrow.is_some_and(|t| now < t) {
            return false;
        }
        live.next_regrow = Some(now + every);
        true
    }

    /// Raises the budgeted slots to `n` (at most the table; `Table::regrow` has
    /// reserved the bytes). Returns the slots added.
    pub(crate) fn grow_to(&self, n: u32) -> u32 {
        let mut live = self.lock();
        let n = n.min(live.slots.len() as u32);
        let added = n.saturating_sub(live.granted);
        live.granted += added;
        added
    }

    fn lock(&self) -> MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Number of slots (sr_highest_slotid + 1).
    pub fn slots(&self) -> u32 {
        self.lock().slots.len() as u32
    }

    /// The slot rules of SEQUENCE (RFC 8881 §2.10.6.1, §18.46.3): a sequence id one
    /// above the slot's is a new request; equal is a retransmission (replayed from the
    /// cache, NFS4ERR_DELAY while the original still runs, NFS4ERR_RETRY_UNCACHED_REP
    /// when it was not cached); anything else NFS4ERR_SEQ_MISORDERED. A request with
    /// the slot's sequence id whose `print` differs from the one the slot ran is not a
    /// retransmission: NFS4ERR_SEQ_FALSE_RETRY (§2.10.6.1.3.1), never another request's
    /// reply.
    pub fn use_slot(
        self: &Arc<Self>,
        slot: u32,
        seqid: u32,
        print: ReqPrint,
    ) -> Result<SlotUse, StateError> {
        let mut live = self.lock();
        if live.dead {
            return Err(StateError::BadSession);
        }
        let granted = live.granted;
        let Some(s) = live.slots.get_mut(slot as usize) else {
            return Err(StateError::BadSlot);
        };
        if seqid == s.seqid.wrapping_add(1) {
            if s.busy {
                // The previous request of this slot has not finished: the client broke
                // the one-request-per-slot rule.
                return Err(StateError::Delay);
            }
            if slot >= granted {
                // A slot above the target of a shrunk session whose budget could
                // not be taken back (`Table::regrow`): its reply could not be
                // cached, so the request waits (RFC 8881 §15.1.1.3) until the
                // budget frees; the slot's sequence id is left as it was.
                return Err(StateError::Delay);
            }
            s.seqid = seqid;
            let prev_print = std::mem::replace(&mut s.print, print);
            s.busy = true;
            let had_reply = s.reply.is_some();
            if let Some(old) = s.reply.take() {
                s.spare = Some(old);
            }
            live.last_used = Instant::now();
            Ok(SlotUse::New(SlotClaim {
                session: self.clone(),
                slot,
                done: false,
                seqid,
                had_reply,
                prev_print,
                data: DdpList::new(),
            }))
        } else if seqid == s.seqid && (s.busy || s.reply.is_some() || seqid != 0) {
            if s.print != print {
                return Err(StateError::FalseRetry);
            }
            if s.busy {
                return Err(StateError::Delay);
            }
            match &s.reply {
                Some(r) => Ok(SlotUse::Replay(r.clone())),
                None => Err(StateError::RetryUncached),
            }
        } else {
            Err(StateError::SeqMisordered)
        }
    }

    /// Whether `use_slot(slot, seqid)` would start a new request (RFC 8881 §2.10.6.1:
    /// live session, slot in the table and idle, seqid one above the slot's), without
    /// claiming the slot. The reactor's fast path (`nfs4::fast`) answers only such
    /// requests; everything else goes to a worker.
    pub(crate) fn is_next(&self, slot: u32, seqid: u32) -> bool {
        let live = self.lock();
        // A shrunk session's requests go to a worker, which takes its budget back
        // when it can (`Table::regrow`).
        !live.dead
            && live.granted as usize == live.slots.len()
            && live
                .slots
                .get(slot as usize)
                .is_some_and(|s| !s.busy && seqid == s.seqid.wrapping_add(1))
    }

    /// Marks the session destroyed: later SEQUENCEs get NFS4ERR_BADSESSION.
    pub fn kill(&self) {
        self.lock().dead = true;
    }

    pub fn back_conn(&self) -> Option<ConnRef> {
        self.lock().back_conn
    }

    pub fn cb_program(&self) -> u32 {
        self.lock().cb_program
    }

    /// BIND_CONN_TO_SESSION / CREATE_SESSION with CONN_BACK_CHAN (RFC 8881 §18.34).
    pub fn bind_back(&self, conn: ConnRef) {
        self.lock().back_conn = Some(conn);
    }

    /// The connection `conn` closed: if it is this session's back channel, forget
    /// it (no callback is ever sent on a connection not bound, R8167-19) and say so.
    pub fn unbind_back_if(&self, conn: &ConnRef) -> bool {
        let mut live = self.lock();
        if live.back_conn.as_ref() == Some(conn) {
            live.back_conn = None;
            return true;
        }
        false
    }

    /// BACKCHANNEL_CTL (RFC 8881 §18.33).
    pub fn set_cb_program(&self, prog: u32) {
        self.lock().cb_program = prog;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The print every test request shares (a retransmission of itself).
    const P: ReqPrint = ReqPrint(0);

    fn sess(slots: u32) -> Arc<Session> {
        let fore = ChannelAttrs {
            max_requests: slots,
            ..Default::default()
        };
        Arc::new(Session::new([1; 16], 7, fore, fore, 0, 0, None))
    }

    /// RFC 8881 §2.10.6.1.3: a reply kept by `finish_copy` (the fast path's, refilling
    /// the slot's previous buffer) is replayed byte for byte, also when a replay still
    /// holds the previous buffer (then a new one is taken), and a reply of another
    /// length leaves no stale bytes behind.
    #[test]
    fn r8881_slot_replay_after_finish_copy_is_byte_identical() {
        let s = sess(2);
        let mut held = None;
        for (seqid, reply) in [
            (1u32, vec![9u8; 300]),
            (2, vec![1, 2, 3]),
            (3, vec![4; 40]),
            (4, vec![5, 6]),
        ] {
            let SlotUse::New(claim) = s.use_slot(1, seqid, P).unwrap() else {
                panic!("new request")
            };
            claim.finish_copy(&reply);
            match s.use_slot(1, seqid, P).unwrap() {
                SlotUse::Replay(r) => {
                    assert_eq!(r.bytes, reply);
                    if seqid == 2 {
                        // A replay in flight keeps this buffer: the next reply must
                        // not overwrite it.
                        held = Some(r);
                    }
                }
                _ => panic!("replay"),
            }
        }
        assert_eq!(held.map(|r| r.bytes.clone()), Some(vec![1, 2, 3]));
    }

    #[test]
    fn new_replay_busy_misordered() {
        let s = sess(4);
        assert_eq!(s.slots(), 4);
        // Before any request, seqid 0 is not a retransmission.
        assert_eq!(s.use_slot(0, 0, P).unwrap_err(), StateError::SeqMisordered);
        let SlotUse::New(claim) = s.use_slot(0, 1, P).unwrap() else {
            panic!("new request")
        };
        // The same request again while it runs: DELAY.
        assert_eq!(s.use_slot(0, 1, P).unwrap_err(), StateError::Delay);
        // The next one while the slot is busy: DELAY too.
        assert_eq!(s.use_slot(0, 2, P).unwrap_err(), StateError::Delay);
        claim.finish(Some(vec![1, 2, 3]));
        match s.use_slot(0, 1, P).unwrap() {
            SlotUse::Replay(r) => assert_eq!(r.bytes, vec![1, 2, 3]),
            _ => panic!("replay"),
        }
        assert_eq!(s.use_slot(0, 3, P).unwrap_err(), StateError::SeqMisordered);
        assert_eq!(s.use_slot(4, 1, P).unwrap_err(), StateError::BadSlot);
        // An uncached reply (claim dropped) → RETRY_UNCACHED_REP.
        let SlotUse::New(c2) = s.use_slot(0, 2, P).unwrap() else {
            panic!()
        };
        drop(c2);
        assert_eq!(s.use_slot(0, 2, P).unwrap_err(), StateError::RetryUncached);
        s.kill();
        assert_eq!(s.use_slot(0, 3, P).unwrap_err(), StateError::BadSession);
    }

    /// `abandon` (a request the reactor claimed, then handed to a worker): the slot is
    /// as before the claim, so the worker's `use_slot` sees the same new request, and
    /// the previous request's cached reply (or its absence) is kept.
    #[test]
    fn r8881_abandoned_claim_restores_the_slot() {
        let s = sess(1);
        let SlotUse::New(c) = s.use_slot(0, 1, P).unwrap() else {
            panic!()
        };
        c.finish(Some(vec![7, 7]));
        let SlotUse::New(c) = s.use_slot(0, 2, P).unwrap() else {
            panic!()
        };
        // In flight on the reactor: a retransmission gets DELAY.
        assert_eq!(s.use_slot(0, 2, P).unwrap_err(), StateError::Delay);
        c.abandon();
        assert!(s.is_next(0, 2));
        match s.use_slot(0, 1, P).unwrap() {
            SlotUse::Replay(r) => assert_eq!(r.bytes, vec![7, 7]),
            _ => panic!("previous reply kept"),
        }
        let SlotUse::New(c) = s.use_slot(0, 2, P).unwrap() else {
            panic!("the worker claims the same request anew")
        };
        c.finish(None);
        // No cached reply before: none after abandoning either (an older spare
        // buffer is not resurrected as a reply).
        let SlotUse::New(c) = s.use_slot(0, 3, P).unwrap() else {
            panic!()
        };
        c.abandon();
        assert_eq!(s.use_slot(0, 2, P).unwrap_err(), StateError::RetryUncached);
        assert!(s.is_next(0, 3));
    }

    #[test]
    fn seqid_wraps_and_slots_are_capped() {
        let s = sess(1000);
        assert_eq!(s.slots(), MAX_SLOTS);
        let z = sess(0);
        assert_eq!(z.slots(), 1);
        let mut seq = 0u32;
        for _ in 0..3 {
            seq = seq.wrapping_add(1);
            let SlotUse::New(c) = s.use_slot(1, seq, P).unwrap() else {
                panic!()
            };
            c.finish(None);
        }
        assert_eq!(seq, 3);
    }

    /// RFC 8881 §2.10.6.1.3.1: a request with the slot's sequence id that is not the
    /// request the slot ran gets NFS4ERR_SEQ_FALSE_RETRY, not that request's cached
    /// reply; the real retransmission is still replayed; `abandon` restores the print
    /// of the previous request with the previous reply.
    #[test]
    fn r8881_false_retry_is_refused_not_answered_from_the_cache() {
        let s = sess(1);
        let write = ReqPrint::of(200, b"PUTFH fh1 WRITE offset 0");
        let other = ReqPrint::of(200, b"PUTFH fh2 REMOVE name");
        let SlotUse::New(c) = s.use_slot(0, 1, write).unwrap() else {
            panic!()
        };
        // While it runs: a different request with its seqid is a false retry too.
        assert_eq!(s.use_slot(0, 1, other).unwrap_err(), StateError::FalseRetry);
        c.finish(Some(vec![1]));
        assert_eq!(s.use_slot(0, 1, other).unwrap_err(), StateError::FalseRetry);
        match s.use_slot(0, 1, write).unwrap() {
            SlotUse::Replay(r) => assert_eq!(r.bytes, vec![1]),
            _ => panic!("the retransmission is replayed"),
        }
        // Uncached: a false retry is still told apart from RETRY_UNCACHED_REP.
        let SlotUse::New(c) = s.use_slot(0, 2, other).unwrap() else {
            panic!()
        };
        drop(c);
        assert_eq!(s.use_slot(0, 2, write).unwrap_err(), StateError::FalseRetry);
        assert_eq!(
            s.use_slot(0, 2, other).unwrap_err(),
            StateError::RetryUncached
        );
        // Claimed and abandoned: the previous request's print comes back with its seqid.
        let SlotUse::New(c) = s.use_slot(0, 3, write).unwrap() else {
            panic!()
        };
        c.abandon();
        assert_eq!(
            s.use_slot(0, 2, other).unwrap_err(),
            StateError::RetryUncached
        );
        assert_eq!(s.use_slot(0, 2, write).unwrap_err(), StateError::FalseRetry);
    }

    /// The print covers the length and the first `WINDOW` bytes after SEQUENCE.
    #[test]
    fn request_print_covers_length_and_window() {
        let a = vec![7u8; 1000];
        let mut b = a.clone();
        assert_eq!(ReqPrint::of(1000, &a), ReqPrint::of(1000, &b));
        assert_ne!(ReqPrint::of(1000, &a), ReqPrint::of(1004, &a));
        b[ReqPrint::WINDOW - 1] = 8;
        assert_ne!(ReqPrint::of(1000, &a), ReqPrint::of(1000, &b));
        let mut c = a.clone();
        c[ReqPrint::WINDOW] = 8;
        assert_eq!(ReqPrint::of(1000, &a), ReqPrint::of(1000, &c));
        assert_ne!(ReqPrint::of(4, &[]), ReqPrint::of(4, &[0, 0, 0, 0]));
    }
}
