//! Client records (EXCHANGE_ID, RFC 8881 §18.35), their leases (§8.3), the sessions
//! they create (CREATE_SESSION §18.36, DESTROY_SESSION §18.37), persistence of who may
//! reclaim after a restart and the grace period (§8.4.2).
//!
//! One mutex protects the client and session tables; it is never held across file
//! I/O or calls into the other state tables (purges run after it is released).

mod budget;
mod courtesy;

use super::grace::Persist;
use super::recovery::{self, Fence, Records};
use super::sessions::Session;
use super::BackChannelInfo;
use crate::state::error::StateError;
use rustc_hash::FxHashMap;
use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// SEQ4_STATUS_CB_PATH_DOWN (RFC 8881 §18.46.3).
const CB_PATH_DOWN: u32 = 0x1;

/// Limits and timers of the NFSv4.1 state (config `[nfs4]`).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub lease: Duration,
    pub grace: Duration,
    /// The longest the grace period runs while reclaims keep arriving
    /// (`nfs4.grace_max_s`, see `Clients::in_grace`); None: twice `grace` (knfsd's cap).
    pub grace_max: Option<Duration>,
    pub max_clients: usize,
    pub max_sessions: usize,
    pub max_sessions_per_client: usize,
    /// Upper bound of ca_maxresponsesize_cached (bytes cached per slot).
    pub max_cached_reply: u32,
    /// Memory the slots of all sessions together may hold in their reply caches
    /// (`nfs4.reply_cache_mib`): what bounds the sessions' memory, not their number.
    pub reply_cache_bytes: u64,
    /// How long a client whose lease ran out keeps its state as a courtesy client
    /// (`nfs4.courtesy_s`, RFC 8881 §8.4.2.1; see `clients/courtesy.rs`). Zero: its
    /// state is freed as soon as the lease runs out.
    pub courtesy: Duration,
    /// A session no request used for this long gives its reply cache back, all but
    /// one slot, when a new session finds the budget short (`Session::shrink_if_idle`).
    pub session_idle: Duration,
    /// The highest NFSv4 minor version served (`nfs4.max_minor_version`: 1 or 2).
    pub max_minor: u32,
}

impl Limits {
    /// The grace period's hard cap (`grace_max`, default twice `grace`), never
    /// shorter than `grace`.
    pub fn grace_max(&self) -> Duration {
        self.grace_max
            .unwrap_or(self.grace.saturating_mul(2))
            .max(self.grace)
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            lease: Duration::from_secs(90),
            grace: Duration::from_secs(90),
            grace_max: None,
            max_clients: 4096,
            max_sessions: 4096,
            max_sessions_per_client: 16,
            max_cached_reply: 8192,
            reply_cache_bytes: 128 << 20,
            courtesy: Duration::from_secs(86_400),
            session_idle: SESSION_IDLE,
            max_minor: 2,
        }
    }
}

/// Who sent EXCHANGE_ID: the RPC credential reduced to what identifies a principal
/// (RFC 8881 §18.35.4: "the principal that created the record").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Principal {
    None,
    Sys { uid: u32 },
}

impl Principal {
    pub fn of(cred: &engine::rpc::Cred) -> Principal {
        match cred {
            engine::rpc::Cred::None => Principal::None,
            engine::rpc::Cred::Sys(s) => Principal::Sys { uid: s.uid },
        }
    }
}

/// One client record.
#[derive(Debug)]
pub struct Client {
    pub id: u64,
    pub owner: Vec<u8>,
    pub verifier: [u8; 8],
    pub principal: Principal,
    pub confirmed: bool,
    /// Sequence id of the last CREATE_SESSION executed (RFC 8881 §18.36.4).
    pub cs_seq: u32,
    /// That CREATE_SESSION's encoded result (status and body), for its replay.
    pub cs_reply: Option<Vec<u8>>,
    pub last_renew: Instant,
    pub sessions: Vec<[u8; 16]>,
    /// Known before the restart and not yet RECLAIM_COMPLETE.
    pub may_reclaim: bool,
    pub reclaim_complete: bool,
    /// SEQ4_STATUS_* flags every SEQUENCE reports until cleared (RFC 8881 §18.46.3),
    /// raised by other tables (callback path down, revoked delegations).
    pub status_flags: u32,
    /// The lease ran out and the client keeps its state until another client
    /// conflicts with it or `Limits::courtesy` passes (`clients/courtesy.rs`).
    pub courtesy: bool,
    /// Its implementation (EXCHANGE_ID's eia_client_impl_id) is one `pnfs.stripe_clients`
    /// names: its layouts may stripe a file over several data servers.
    pub stripes: bool,
}

#[derive(Default)]
struct Inner {
    // Server-chosen keys (client ids, session ids): FxHash, no SipHash on the
    // per-COMPOUND lookups (`session`, `renew_if_live`).
    clients: FxHashMap<u64, Client>,
    sessions: FxHashMap<[u8; 16], Arc<Session>>,
    /// Owners persisted by the previous run that have not finished reclaiming.
    reclaimable: HashSet<Vec<u8>>,
    /// The last reclaim (OPEN or LOCK with the reclaim flag, RECLAIM_COMPLETE
    /// excluded): what extends the grace period past `Limits::grace`.
    last_reclaim: Option<Instant>,
    /// The grace period has ended; it never starts again until a takeover
    /// (`Clients::adopt`).
    grace_over: bool,
    /// When the grace period started: this table's creation, or a takeover.
    grace_from: Option<Instant>,
    /// The owners in the last record written or read (`Clients::save`): a client whose
    /// owner is in it is confirmed without writing the record again.
    recorded: HashSet<Vec<u8>>,
    /// Reply-cache bytes the live sessions' slots may hold (`Session::cache_bytes`).
    cache_reserved: u64,
    /// The last periodic sweep (`Clients::sweep_due`).
    last_sweep: Option<Instant>,
    /// Rate limit of the courtesy log lines (`courtesy::LogLimit`).
    log: courtesy::LogLimit,
    /// Clients with `courtesy` set.
    courtesy_n: u64,
}

/// `Limits::session_idle` by default: long past any retransmission of a reply lost
/// with its connection (the Linux client resends at once on reconnect), well within a
/// lease, so the silent sessions of clients that renew through another one still
/// give their reply caches back.
pub const SESSION_IDLE: Duration = Duration::from_secs(30);

/// A grace period is extended while reclaims keep arriving, at most this far apart
/// (knfsd's laundromat extends by one second at a time while "somebody reclaimed").
const RECLAIM_GAP: Duration = Duration::from_secs(2);

/// Every client of this gateway.
pub struct Clients {
    pub limits: Limits,
    inner: Mutex<Inner>,
    records: Option<Box<dyn Records>>,
    /// Serialises record writes; each takes its snapshot under it, so the last write
    /// holds the latest set.
    write: Mutex<()>,
    /// Whether this gateway serves NFSv4.1 state now (`[ha]`; always open without it).
    fence: Arc<Fence>,
    /// so_major_id of the server owner (RFC 8881 §2.5): the same for every gateway
    /// that serves this identity, so a client reclaims at a successor.
    server_major: Vec<u8>,
    /// Reclaims this table answered (`may_reclaim`), also summed for `/metrics`.
    reclaims: recovery::Reclaims,
}

/// The server owner's major id without `[ha]` (and its prefix with it).
pub const SERVER_MAJOR: &[u8] = b"nfs-gateway";

impl Default for Clients {
    fn default() -> Self {
        Clients::new(Limits::default(), None)
    }
}

/// Client records by kind (`Clients::counts`): confirmed with a live lease,
/// courtesy clients (lease run out, state kept: RFC 8881 §8.4.2.1), unconfirmed
/// (EXCHANGE_ID without CREATE_SESSION yet, §18.35.4); and sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClientCounts {
    pub confirmed: u64,
    pub courtesy: u64,
    pub unconfirmed: u64,
    pub sessions: u64,
}

/// What a purge leaves for the caller to do outside the lock (`State::purge`): free
/// the state of the clients `gone` in the other tables, and tell the delegation table
/// which clients became courtesy clients or came back from it.
#[must_use]
#[derive(Debug, Default)]
pub struct Purged {
    pub gone: Vec<u64>,
    pub courtesy: Vec<u64>,
    pub revived: Vec<u64>,
    /// Courtesy clients in the table after this call (`nfsgw_nfs4_courtesy_clients`).
    pub courtesy_clients: Option<u64>,
    /// Courtesy clients expired because another client's operation conflicted with
    /// their state (`nfsgw_nfs4_courtesy_expired_total`).
    pub expired_conflict: u64,
}

impl Purged {
    pub fn is_empty(&self) -> bool {
        self.gone.is_empty() && self.courtesy.is_empty() && self.revived.is_empty()
    }
}

impl Clients {
    /// A table with `limits`; with `dir`, client records persist in `dir` and the
    /// clients of the previous run may reclaim during the grace period.
    pub fn new(limits: Limits, dir: Option<&Path>) -> Clients {
        let records = dir.map(|d| Box::new(Persist::new(d)) as Box<dyn Records>);
        let reclaimable = match records.as_ref().map(|r| r.load()) {
            Some(Ok(set)) => set,
            Some(Err(e)) => {
                tracing::error!(error = %e, "NFSv4.1: no client may reclaim");
                HashSet::new()
            }
            None => HashSet::new(),
        };
        let cl = Clients::with_records(limits, records, Arc::new(Fence::open()), SERVER_MAJOR);
        cl.adopt(reclaimable);
        cl
    }

    /// A table whose records are `records`, serving while `fence` is open, presenting
    /// `server_major` as the server owner. Nobody may reclaim until `adopt`.
    pub fn with_records(
        limits: Limits,
        records: Option<Box<dyn Records>>,
        fence: Arc<Fence>,
        server_major: &[u8],
    ) -> Clients {
        Clients {
            limits,
            inner: Mutex::new(Inner {
                grace_over: true,
                grace_from: Some(Instant::now()),
                ..Default::default()
            }),
            records,
            write: Mutex::new(()),
            fence,
            server_major: server_major.to_vec(),
            reclaims: Default::default(),
        }
    }

    /// Starts a grace period (RFC 8881 §8.4.2.1) now for the clients `owners` names:
    /// at start with the previous run's record, or at a takeover (`crate::ha`) with the
    /// previous holder's. Never skipped: it ends early only once each of them sent
    /// RECLAIM_COMPLETE (`in_grace`), at once when there are none.
    pub fn adopt(&self, owners: HashSet<Vec<u8>>) {
        if !owners.is_empty() {
            recovery::count_grace_started();
            tracing::info!(
                clients = owners.len(),
                grace_s = self.limits.grace.as_secs(),
                "NFSv4.1 grace period: clients of the previous server may reclaim"
            );
        }
        let mut g = self.lock();
        g.recorded = owners.clone();
        g.reclaimable = owners;
        g.grace_over = false;
        g.grace_from = Some(Instant::now());
        g.last_reclaim = None;
    }

    /// Drops every client record and session, without writing the records (`[ha]`:
    /// the identity was lost or is taken over, and the state this table held is not
    /// this gateway's any more); the caller frees their state with `State::purge`.
    pub fn purge_all(&self) -> Purged {
        self.with_purge(|t| {
            let ids: Vec<u64> = t.inner.clients.keys().copied().collect();
            for id in ids {
                t.purge(id);
            }
            t.dirty = false;
        })
        .1
    }

    /// Whether this gateway serves NFSv4.1 state now (docs/ha.md "Fencing").
    pub fn serving(&self) -> bool {
        self.fence.serving()
    }

    /// A COMPOUND of connection `conn` that came while the fence is shut: held until
    /// the fence opens or the park's bound (`state::park`).
    pub fn park_until_serving(&self, conn: std::net::SocketAddr) -> super::park::Parked {
        self.fence.park_until_serving(conn)
    }

    /// The server owner's so_major_id (EXCHANGE_ID, RFC 8881 §18.35.4).
    pub fn server_major(&self) -> &[u8] {
        &self.server_major
    }

    /// How long the current grace period has run (tests).
    #[cfg(test)]
    pub(crate) fn grace_elapsed(&self) -> Duration {
        self.lock()
            .grace_from
            .map_or(Duration::MAX, |t| t.elapsed())
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn expired(&self, c: &Client, now: Instant) -> bool {
        now.saturating_duration_since(c.last_renew) > self.limits.lease
    }

    /// Whether `clientid` names a confirmed client whose lease has not expired.
    pub fn is_live(&self, clientid: u64) -> bool {
        let g = self.lock();
        g.clients
            .get(&clientid)
            .is_some_and(|c| c.confirmed && !self.expired(c, Instant::now()))
    }

    /// Whether the server is in its grace period (RFC 8881 §8.4.2): from start for
    /// `grace`, ended early once every client of the previous run has sent
    /// RECLAIM_COMPLETE (or none was recorded). Past `grace` it goes on while
    /// reclaims keep arriving (each within `RECLAIM_GAP` of the last), up to
    /// `Limits::grace_max` from the start (default a second `grace`, knfsd's cap):
    /// clients that came back late, or many clients reclaiming one after another, keep
    /// their opens and locks instead of losing them to a cut-off in the middle of
    /// their reclaims (pynfs REBT2c/3c, REBT5). RFC 8881 §8.4.2.1 leaves the length to
    /// the server. Once over it stays over: state granted after it can never meet a
    /// reclaim.
    pub fn in_grace(&self) -> bool {
        let forgot = {
            let mut g = self.lock();
            let elapsed = g.grace_from.map_or(Duration::MAX, |t| t.elapsed());
            if elapsed < self.limits.grace {
                return !g.reclaimable.is_empty();
            }
            let extended = !g.grace_over
                && !g.reclaimable.is_empty()
                && elapsed < self.limits.grace_max()
                && g.last_reclaim.is_some_and(|t| t.elapsed() < RECLAIM_GAP);
            if extended {
                return true;
            }
            if !g.grace_over && !g.reclaimable.is_empty() {
                tracing::info!(
                    not_reclaimed = g.reclaimable.len(),
                    after_s = elapsed.as_secs(),
                    "NFSv4.1 grace period over"
                );
            }
            g.grace_over = true;
            // Clients of the previous run that did not come back lose their right to
            // reclaim, also across later restarts.
            let had = !g.reclaimable.is_empty();
            g.reclaimable.clear();
            had
        };
        if forgot {
            self.save();
        }
        false
    }

    /// Whether `clientid` was known before the restart and may still reclaim
    /// (not yet sent RECLAIM_COMPLETE): the one question every reclaim asks
    /// (`nfs4::state_ops::reclaim_allowed`), so the one place reclaims are counted,
    /// refused ones after the grace period (NFS4ERR_NO_GRACE) too.
    /// Asking counts as a reclaim for the grace period's extension (`in_grace`).
    pub fn may_reclaim(&self, clientid: u64) -> bool {
        if !self.in_grace() {
            self.reclaims.count(false);
            return false;
        }
        let mut g = self.lock();
        let ok = g
            .clients
            .get(&clientid)
            .is_some_and(|c| c.may_reclaim && !c.reclaim_complete);
        if ok {
            g.last_reclaim = Some(Instant::now());
        }
        self.reclaims.count(ok);
        ok
    }

    /// (accepted, refused) reclaims this table answered.
    pub fn reclaims(&self) -> (u64, u64) {
        self.reclaims.get()
    }

    /// Whether `clientid` has sent RECLAIM_COMPLETE (RFC 8881 §18.51.3: until then its
    /// non-reclaim OPENs get NFS4ERR_GRACE). Unknown clients count as complete.
    pub fn reclaim_completed(&self, clientid: u64) -> bool {
        let g = self.lock();
        g.clients.get(&clientid).is_none_or(|c| c.reclaim_complete)
    }

    /// The owner (co_ownerid) of client `clientid`.
    pub fn owner_of(&self, clientid: u64) -> Option<Vec<u8>> {
        self.lock().clients.get(&clientid).map(|c| c.owner.clone())
    }

    /// Whether `clientid`'s layouts may be striped (`Client::stripes`).
    pub fn stripes(&self, clientid: u64) -> bool {
        self.lock()
            .clients
            .get(&clientid)
            .is_some_and(|c| c.stripes)
    }

    /// Records what EXCHANGE_ID said of `clientid`'s implementation (`Client::stripes`).
    pub fn set_stripes(&self, clientid: u64, on: bool) {
        if let Some(c) = self.lock().clients.get_mut(&clientid) {
            c.stripes = on;
        }
    }

    /// The back channel of `clientid`'s session(s), if one is bound.
    pub fn lookup_backchannel(&self, clientid: u64) -> Option<BackChannelInfo> {
        let g = self.lock();
        let c = g.clients.get(&clientid)?;
        c.sessions.iter().rev().find_map(|sid| {
            let s = g.sessions.get(sid)?;
            Some(BackChannelInfo {
                session: s.id,
                conn: s.back_conn()?,
                cb_program: s.cb_program(),
                max_request: s.back.max_request,
                max_slots: s.back.max_requests,
                minor: s.minor,
            })
        })
    }

    /// `lookup_backchannel(clientid).is_some()` without building the info: whether a
    /// session of the client has a back-channel connection (SEQUENCE's
    /// SEQ4_STATUS_CB_PATH_DOWN, RFC 8881 §18.46.3, checked on every COMPOUND).
    pub fn has_backchannel(&self, clientid: u64) -> bool {
        let g = self.lock();
        let Some(c) = g.clients.get(&clientid) else {
            return false;
        };
        c.sessions
            .iter()
            .any(|sid| g.sessions.get(sid).is_some_and(|s| s.back_conn().is_some()))
    }

    /// A connection closed (TCP or RPC-over-RDMA, reported by the reactor that owned
    /// it): every session whose back channel it was forgets it, and its client gets
    /// SEQ4_STATUS_CB_PATH_DOWN in every SEQUENCE until it binds another
    /// (BIND_CONN_TO_SESSION, as the Linux client does on reconnect: RFC 8881
    /// §18.46.3, §2.10.3.1; RFC 8167 §5.4 — the server never connects, R8167-17).
    /// Returns the clients left with no back channel at all (the caller marks their
    /// callback path down in the delegation table: no new delegations until a new
    /// binding answers its probe).
    pub fn forget_conn(&self, conn: &crate::conn::ConnRef) -> Vec<u64> {
        let mut hit = Vec::new();
        {
            let mut g = self.lock();
            let Inner {
                sessions, clients, ..
            } = &mut *g;
            for s in sessions.values() {
                if s.unbind_back_if(conn) {
                    if let Some(c) = clients.get_mut(&s.clientid) {
                        c.status_flags |= CB_PATH_DOWN;
                    }
                    if !hit.contains(&s.clientid) {
                        hit.push(s.clientid);
                    }
                }
            }
        }
        hit.retain(|&id| self.lookup_backchannel(id).is_none());
        hit
    }

    /// Runs `f` on the locked table (for the session operations) and returns the
    /// clients it purged: the caller frees their state with `State::purge`.
    pub(crate) fn with_purge<R>(&self, f: impl FnOnce(&mut Table<'_>) -> R) -> (R, Purged) {
        let mut g = self.lock();
        let mut t = Table {
            inner: &mut g,
            limits: &self.limits,
            now: Instant::now(),
            dirty: false,
            purged: Purged::default(),
        };
        let r = f(&mut t);
        t.purged.courtesy_clients = Some(t.inner.courtesy_n);
        let dirty = t.dirty;
        let purged = std::mem::take(&mut t.purged);
        drop(g);
        if dirty {
            self.save();
        }
        (r, purged)
    }

    /// `with_purge` dropping the purge list (tests).
    #[cfg(test)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut Table<'_>) -> R) -> R {
        self.with_purge(f).0
    }

    /// Clients by kind and sessions, for the stats endpoint's gauges (one lock, a
    /// walk over the client records, at each scrape).
    pub fn counts(&self) -> ClientCounts {
        let g = self.lock();
        let mut n = ClientCounts {
            sessions: g.sessions.len() as u64,
            ..Default::default()
        };
        for c in g.clients.values() {
            match (c.courtesy, c.confirmed) {
                (true, _) => n.courtesy += 1,
                (false, true) => n.confirmed += 1,
                (false, false) => n.unconfirmed += 1,
            }
        }
        n
    }

    /// A session by id; none while the fence is shut (the reactors' fast paths then
    /// leave the call to a worker, whose COMPOUND answers NFS4ERR_DELAY).
    pub fn session(&self, id: &[u8; 16]) -> Option<Arc<Session>> {
        if !self.fence.serving() {
            return None;
        }
        self.lock().sessions.get(id).cloned()
    }

    /// Raises (`on`) or clears SEQ4_STATUS_* `flags` in every SEQUENCE reply to
    /// `clientid` (RFC 8881 §18.46.3), e.g. SEQ4_STATUS_CB_PATH_DOWN (1) when a
    /// callback could not be sent, SEQ4_STATUS_RECALLABLE_STATE_REVOKED (0x40) while
    /// revoked delegations are not freed. BIND_CONN_TO_SESSION, BACKCHANNEL_CTL and
    /// CREATE_SESSION with a back channel clear CB_PATH_DOWN.
    pub fn set_status_flags(&self, clientid: u64, flags: u32, on: bool) {
        let mut g = self.lock();
        if let Some(c) = g.clients.get_mut(&clientid) {
            if on {
                c.status_flags |= flags;
            } else {
                c.status_flags &= !flags;
            }
        }
    }

    /// SEQUENCE's lease rules (RFC 8881 §8.3): renews the lease of the session's
    /// client and returns its status flags. A courtesy client (lease run out, state
    /// kept: RFC 8881 §8.4.2.1) becomes active again with all its state (`revived`;
    /// nothing was revoked, so no SEQ4_STATUS_*_REVOKED flag). A client past its
    /// courtesy time (or any expired one with `courtesy` 0) is purged (`gone`) and the
    /// session is gone (NFS4ERR_BADSESSION). Use `State::renew`, which also checks that
    /// a returning courtesy client lost no delegation meanwhile.
    pub fn renew(&self, session: &Session) -> (Result<u32, StateError>, Purged) {
        self.with_purge(|t| {
            let id = session.clientid;
            let Some(c) = t.inner.clients.get(&id) else {
                return Err(StateError::BadSession);
            };
            let lapsed = t.now.saturating_duration_since(c.last_renew) > t.limits.lease;
            if lapsed && !t.within_courtesy(c) {
                t.expire(id, "courtesy time over");
                return Err(StateError::BadSession);
            }
            t.touch(id);
            Ok(t.inner.clients.get(&id).map_or(0, |c| c.status_flags))
        })
    }

    /// `renew` for the reactor's fast path (`nfs4::fast`): renews the lease and
    /// returns the status flags only while the lease still runs (RFC 8881 §8.3). A
    /// courtesy (lease run out) or unknown client is left alone (`None`): the worker
    /// that then runs the call revives or purges it (`State::renew`), which may write
    /// the state dir — never done on a reactor.
    pub(crate) fn renew_if_live(&self, session: &Session) -> Option<u32> {
        let now = Instant::now();
        let mut g = self.lock();
        let c = g.clients.get_mut(&session.clientid)?;
        if now.saturating_duration_since(c.last_renew) > self.limits.lease {
            return None;
        }
        c.last_renew = now;
        Some(c.status_flags)
    }

    /// Writes the confirmed clients' owners to the records (best effort: a failure is
    /// logged and the next change writes again; what must be written before it is
    /// relied on goes through `record_before_confirm`).
    fn save(&self) {
        if let Err(e) = self.save_with(None) {
            tracing::warn!(error = %e, "cannot record NFSv4.1 clients");
        }
    }

    /// Writes the confirmed clients' owners, those of the previous run not yet
    /// reclaimed (they keep their right across another restart within the grace
    /// period) and `extra`.
    fn save_with(&self, extra: Option<Vec<u8>>) -> Result<(), recovery::RecordError> {
        let Some(r) = &self.records else {
            return Ok(());
        };
        let _w = self.write.lock().unwrap_or_else(|e| e.into_inner());
        let owners: Vec<Vec<u8>> = {
            let g = self.lock();
            let mut set: HashSet<&Vec<u8>> = g
                .clients
                .values()
                .filter(|c| c.confirmed)
                .map(|c| &c.owner)
                .collect();
            set.extend(g.reclaimable.iter());
            let mut v: Vec<Vec<u8>> = set.into_iter().cloned().collect();
            v.extend(extra.filter(|o| !g.reclaimable.contains(o)));
            v.sort();
            v.dedup();
            v
        };
        r.save(&owners)?;
        self.lock().recorded = owners.into_iter().collect();
        Ok(())
    }

    /// Writes `clientid`'s owner to the records before CREATE_SESSION confirms it, so
    /// a successor lets it reclaim what it is about to be granted (RFC 8881 §8.4.3: the
    /// record must precede the state). Nothing to write when the owner is already
    /// recorded; a write that fails is NFS4ERR_DELAY (the client retries).
    pub fn record_before_confirm(&self, clientid: u64) -> Result<(), StateError> {
        if self.records.is_none() {
            return Ok(());
        }
        let owner = {
            let g = self.lock();
            match g.clients.get(&clientid) {
                Some(c) if !c.confirmed && !g.recorded.contains(&c.owner) => c.owner.clone(),
                _ => return Ok(()),
            }
        };
        self.save_with(Some(owner)).map_err(|e| {
            tracing::warn!(error = %e, "NFSv4.1 client not confirmed: its owner is not recorded");
            StateError::Delay
        })
    }
}

/// The locked table, handed to the session operations.
pub(crate) struct Table<'a> {
    inner: &'a mut Inner,
    pub limits: &'a Limits,
    pub now: Instant,
    /// The persisted set changed: rewrite it after unlocking.
    pub dirty: bool,
    purged: Purged,
}

impl Table<'_> {
    pub fn client(&self, id: u64) -> Option<&Client> {
        self.inner.clients.get(&id)
    }

    pub fn client_mut(&mut self, id: u64) -> Option<&mut Client> {
        self.inner.clients.get_mut(&id)
    }

    /// The confirmed and unconfirmed records of `owner`.
    pub fn by_owner(&self, owner: &[u8]) -> (Option<u64>, Option<u64>) {
        let mut conf = None;
        let mut unconf = None;
        for c in self.inner.clients.values() {
            if c.owner == owner {
                if c.confirmed {
                    conf = Some(c.id);
                } else {
                    unconf = Some(c.id);
                }
            }
        }
        (conf, unconf)
    }

    /// A new unconfirmed record (EXCHANGE_ID). Expired clients are swept first; when the
    /// table is still full the oldest courtesy client is expired, else the oldest
    /// unconfirmed record makes room, else NFS4ERR_DELAY.
    pub fn insert(
        &mut self,
        owner: &[u8],
        verifier: [u8; 8],
        principal: Principal,
    ) -> Result<u64, StateError> {
        self.sweep();
        if self.inner.clients.len() >= self.limits.max_clients {
            self.expire_oldest_courtesy("client table full");
        }
        if self.inner.clients.len() >= self.limits.max_clients {
            let oldest = self
                .inner
                .clients
                .values()
                .filter(|c| !c.confirmed)
                .min_by_key(|c| c.last_renew)
                .map(|c| c.id);
            match oldest {
                Some(id) => {
                    self.inner.clients.remove(&id);
                }
                None => return Err(StateError::Delay),
            }
        }
        let id = self.new_client_id();
        let may_reclaim = self.inner.reclaimable.contains(owner);
        self.inner.clients.insert(
            id,
            Client {
                id,
                owner: owner.to_vec(),
                verifier,
                principal,
                confirmed: false,
                cs_seq: 0,
                cs_reply: None,
                last_renew: self.now,
                sessions: Vec::new(),
                may_reclaim,
                reclaim_complete: false,
                status_flags: 0,
                courtesy: false,
                stripes: false,
            },
        );
        Ok(id)
    }

    /// Removes an unconfirmed record (no state hangs off it).
    pub fn drop_unconfirmed(&mut self, id: u64) {
        if self.inner.clients.get(&id).is_some_and(|c| !c.confirmed) {
            self.inner.clients.remove(&id);
        }
    }

    /// Removes a client with its sessions; its opens and delegations are freed by the
    /// caller after the lock is released (`Purged`).
    pub fn purge(&mut self, id: u64) {
        if let Some(c) = self.inner.clients.remove(&id) {
            if c.courtesy {
                self.inner.courtesy_n = self.inner.courtesy_n.saturating_sub(1);
            }
            for s in &c.sessions {
                if let Some(s) = self.inner.sessions.remove(s) {
                    self.session_gone(&s);
                }
            }
            if c.confirmed {
                self.dirty = true;
                self.purged.gone.push(id);
            }
        }
    }

    /// Registers a new session of `clientid` and reserves its reply cache (granted by
    /// `grant_slots`). A full session table (after courtesy clients' sessions went) is
    /// NFS4ERR_DELAY, as knfsd answers when it cannot allocate a session: it passes
    /// as sessions are destroyed or their clients expire. A client over
    /// `max_sessions_per_client` gets NFS4ERR_NOSPC: that one is its own doing.
    pub fn add_session(&mut self, s: Arc<Session>) -> Result<(), StateError> {
        while self.inner.sessions.len() >= self.limits.max_sessions
            && self.shed_courtesy_sessions("session table full")
        {}
        if self.inner.sessions.len() >= self.limits.max_sessions {
            return Err(StateError::Delay);
        }
        let bytes = s.cache_bytes();
        if self.inner.cache_reserved.saturating_add(bytes) > self.limits.reply_cache_bytes {
            return Err(StateError::Delay);
        }
        let max = self.limits.max_sessions_per_client;
        let Some(c) = self.inner.clients.get_mut(&s.clientid) else {
            return Err(StateError::StaleClientid);
        };
        if c.sessions.len() >= max {
            return Err(StateError::SessionLimit);
        }
        c.sessions.push(s.id);
        self.inner.cache_reserved += bytes;
        self.inner.sessions.insert(s.id, s);
        Ok(())
    }

    /// A session left the table: its reply-cache reservation comes back.
    fn session_gone(&mut self, s: &Session) {
        s.kill();
        self.inner.cache_reserved = self.inner.cache_reserved.saturating_sub(s.cache_bytes());
    }

    /// A fresh client id: 64 bits from the CSPRNG (`rand::random`, ChaCha seeded by
    /// the OS), so no client can name another's record from its own (RFC 8881 §2.4:
    /// the server makes clientid4 unique; §21 on guessable identifiers). Unique in
    /// the table; nothing persists client ids (`state.dir` holds owners, which a
    /// restarted client presents again with EXCHANGE_ID), so an id of an earlier run
    /// is unknown here: NFS4ERR_STALE_CLIENTID. Never 0.
    fn new_client_id(&self) -> u64 {
        loop {
            let id: u64 = rand::random();
            if id != 0 && !self.inner.clients.contains_key(&id) {
                return id;
            }
        }
    }

    /// A fresh session id (RFC 8881 §2.10.3): 128 bits from the CSPRNG, unique in the
    /// table, so a client cannot guess another's session (a guess finds no session:
    /// NFS4ERR_BADSESSION).
    pub fn new_session_id(&mut self) -> [u8; 16] {
        loop {
            let id: [u8; 16] = rand::random();
            if !self.inner.sessions.contains_key(&id) {
                return id;
            }
        }
    }

    /// DESTROY_SESSION (RFC 8881 §18.37).
    pub fn remove_session(&mut self, id: &[u8; 16]) -> bool {
        let Some(s) = self.inner.sessions.remove(id) else {
            return false;
        };
        self.session_gone(&s);
        if let Some(c) = self.inner.clients.get_mut(&s.clientid) {
            c.sessions.retain(|x| x != id);
        }
        true
    }

    /// CREATE_SESSION confirmed `id` (RFC 8881 §18.36.4): an older confirmed record of
    /// the same owner is replaced (purged).
    pub fn confirm(&mut self, id: u64) {
        let Some(owner) = self.inner.clients.get(&id).map(|c| c.owner.clone()) else {
            return;
        };
        let olds: Vec<u64> = self
            .inner
            .clients
            .values()
            .filter(|c| c.id != id && c.owner == owner && c.confirmed)
            .map(|c| c.id)
            .collect();
        for old in olds {
            self.purge(old);
        }
        if let Some(c) = self.inner.clients.get_mut(&id) {
            c.confirmed = true;
        }
        // The record holds the confirmed owners and those still reclaimable (`save`):
        // a client of the previous run confirming again changes nothing in it, so
        // 1,000 clients reclaiming after a restart do not rewrite it 1,000 times; nor
        // does one `record_before_confirm` wrote already.
        if !self.inner.reclaimable.contains(&owner) && !self.inner.recorded.contains(&owner) {
            self.dirty = true;
        }
    }

    /// RECLAIM_COMPLETE (RFC 8881 §18.51): the client's reclaims are over.
    pub fn reclaim_complete(&mut self, id: u64) -> Result<(), StateError> {
        let Some(c) = self.inner.clients.get_mut(&id) else {
            return Err(StateError::StaleClientid);
        };
        if c.reclaim_complete {
            return Err(StateError::CompleteAlready);
        }
        c.reclaim_complete = true;
        // A confirmed client's owner stays in the file (`save`): unchanged then.
        let was = self.inner.reclaimable.remove(&c.owner);
        if was && !c.confirmed {
            self.dirty = true;
        }
        if was && self.inner.reclaimable.is_empty() && !self.inner.grace_over {
            // RFC 8881 §8.4.2.1: every client of the previous server is back.
            self.inner.grace_over = true;
            recovery::count_grace_ended_early();
            tracing::info!("NFSv4.1 grace period ended early: every client reclaimed");
        }
        Ok(())
    }
}

#[cfg(test)]
mod grace_tests;

#[cfg(test)]
mod tests;
