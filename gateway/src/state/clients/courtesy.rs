//! Courtesy clients (RFC 8881 §8.4.2.1: "a server MAY retain the state of a client
//! whose lease expired, as long as no conflict arises"; knfsd's `NFSD4_COURTESY`).
//!
//! A confirmed client whose lease (§8.3) runs out is not purged: it becomes a
//! courtesy client and keeps its record (also in `state.dir`, so it can reclaim after
//! a restart), its sessions, opens, locks and delegations. A SEQUENCE on one of its
//! sessions, or a CREATE_SESSION / EXCHANGE_ID for it, makes it active again with all
//! its state; nothing was revoked, so no SEQ4_STATUS_*_REVOKED flag is raised.
//!
//! Its sessions stay (as knfsd keeps them): a client back from a network partition
//! goes on with its next SEQUENCE, and a retransmission finds its reply cache. They
//! are the part of its state that costs memory, so when the reply-cache budget or the
//! session table is short, courtesy clients' sessions go first (oldest first); such a
//! client gets NFS4ERR_BADSESSION on return, and its CREATE_SESSION with the same
//! client id revives it with its opens and locks (RFC 8881 §2.10.13.1's recovery).
//!
//! A courtesy client is expired for real (purged, its state freed) when
//! - another client conflicts with its state (`State::open`, `State::lock`,
//!   `State::check_io`, `Delegations::break_conflicts`, EXCHANGE_ID of another
//!   principal for its owner: see `state/expiry.rs`), counted in
//!   `nfsgw_nfs4_courtesy_expired_total`;
//! - `Limits::courtesy` passes since the lease ran out (`sweep`);
//! - the client table is full (`insert`: courtesy clients go first, oldest first).
//!
//! `Limits::courtesy` zero is the old rule: purged as soon as the lease runs out.

use super::{Client, Clients, Purged, Table};
use std::time::{Duration, Instant};

/// Courtesy log lines per second at most; the rest are counted in the next one.
const LOG_PER_SEC: u32 = 10;

/// The periodic sweep (`Clients::sweep_due`) runs at most this often.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Rate limit of the info lines this module logs (thousands of clients may expire
/// at once, e.g. after a partition).
#[derive(Debug, Default)]
pub(super) struct LogLimit {
    window: Option<Instant>,
    n: u32,
    dropped: u32,
}

impl LogLimit {
    /// Whether a line may be logged now, and how many were dropped before it.
    pub(super) fn allow(&mut self, now: Instant) -> Option<u32> {
        match self.window {
            Some(w) if now.saturating_duration_since(w) < Duration::from_secs(1) => {
                if self.n < LOG_PER_SEC {
                    self.n += 1;
                    Some(0)
                } else {
                    self.dropped += 1;
                    None
                }
            }
            _ => {
                let dropped = std::mem::take(&mut self.dropped);
                self.window = Some(now);
                self.n = 1;
                Some(dropped)
            }
        }
    }
}

impl Table<'_> {
    /// Whether `c`'s lease ran out with `c` confirmed: it holds state nobody renews.
    fn lapsed(&self, c: &Client) -> bool {
        c.confirmed && self.now.saturating_duration_since(c.last_renew) > self.limits.lease
    }

    /// Whether `c`, lease run out or not, may still come back with its state: it is
    /// within `Limits::courtesy` after its lease ended.
    pub(super) fn within_courtesy(&self, c: &Client) -> bool {
        !self.limits.courtesy.is_zero()
            && self.now.saturating_duration_since(c.last_renew)
                <= self.limits.lease.saturating_add(self.limits.courtesy)
    }

    /// The client renewed its lease (SEQUENCE, CREATE_SESSION, EXCHANGE_ID of the
    /// same client, RFC 8881 §8.3): a courtesy client becomes active again.
    pub fn touch(&mut self, id: u64) {
        let now = self.now;
        let Some(c) = self.inner.clients.get_mut(&id) else {
            return;
        };
        c.last_renew = now;
        if c.courtesy {
            c.courtesy = false;
            self.inner.courtesy_n = self.inner.courtesy_n.saturating_sub(1);
            self.purged.revived.push(id);
            if let Some(dropped) = self.inner.log.allow(now) {
                tracing::info!(
                    clientid = format!("{id:016x}"),
                    dropped,
                    "NFSv4.1 courtesy client is back: lease renewed, its state kept"
                );
            }
        }
    }

    /// Purges a client whose lease ran out, with a log line saying why (the state is
    /// freed by the caller, `State::purge`).
    pub fn expire(&mut self, id: u64, why: &'static str) {
        if !self.inner.clients.contains_key(&id) {
            return;
        }
        if !self.limits.courtesy.is_zero() {
            if let Some(dropped) = self.inner.log.allow(self.now) {
                tracing::info!(
                    clientid = format!("{id:016x}"),
                    reason = why,
                    dropped,
                    "NFSv4.1 courtesy client expired: its opens, locks and delegations are freed"
                );
            }
        }
        self.purge(id);
    }

    /// Whether `id` is a confirmed client whose lease ran out (marked by the sweep
    /// or not yet): its state gives way to any conflict.
    pub fn is_lapsed(&self, id: u64) -> bool {
        self.inner.clients.get(&id).is_some_and(|c| self.lapsed(c))
    }

    /// `expire` because another client's operation conflicts with the client's
    /// state, counted (`Purged::expired_conflict`).
    pub fn expire_for_conflict(&mut self, id: u64, why: &'static str) {
        if self.inner.clients.contains_key(&id) {
            self.expire(id, why);
            self.purged.expired_conflict += 1;
        }
    }

    /// Expires every client whose lease ran out (RFC 8881 §8.3) and that is past its
    /// courtesy time, and unconfirmed records older than a lease (§18.35.4). The other
    /// confirmed ones whose lease ran out become courtesy clients (`Purged::courtesy`).
    pub fn sweep(&mut self) {
        let lease = self.limits.lease;
        let now = self.now;
        let mut gone = Vec::new();
        let mut newly = Vec::new();
        for c in self.inner.clients.values() {
            if now.saturating_duration_since(c.last_renew) <= lease {
                continue;
            }
            if !c.confirmed || !self.within_courtesy(c) {
                gone.push(c.id);
            } else if !c.courtesy {
                newly.push(c.id);
            }
        }
        for id in gone {
            self.expire(id, "courtesy time over");
        }
        for id in newly {
            if let Some(c) = self.inner.clients.get_mut(&id) {
                c.courtesy = true;
                self.inner.courtesy_n += 1;
            }
            self.purged.courtesy.push(id);
            if let Some(dropped) = self.inner.log.allow(now) {
                tracing::info!(
                    clientid = format!("{id:016x}"),
                    courtesy_s = self.limits.courtesy.as_secs(),
                    dropped,
                    "NFSv4.1 lease expired: courtesy client, state kept until a conflict"
                );
            }
        }
    }

    /// Expires the courtesy client whose lease ran out first; false if there is none.
    pub(super) fn expire_oldest_courtesy(&mut self, why: &'static str) -> bool {
        let oldest = self
            .inner
            .clients
            .values()
            .filter(|c| self.lapsed(c))
            .min_by_key(|c| c.last_renew)
            .map(|c| c.id);
        match oldest {
            Some(id) => {
                self.expire(id, why);
                true
            }
            None => false,
        }
    }

    /// Drops the sessions (and their reply caches) of the courtesy client with
    /// sessions whose lease ran out first; its record, opens and locks stay. False if
    /// there is none.
    pub(super) fn shed_courtesy_sessions(&mut self, why: &'static str) -> bool {
        let oldest = self
            .inner
            .clients
            .values()
            .filter(|c| self.lapsed(c) && !c.sessions.is_empty())
            .min_by_key(|c| c.last_renew)
            .map(|c| c.id);
        let Some(id) = oldest else {
            return false;
        };
        let sessions = self
            .inner
            .clients
            .get_mut(&id)
            .map(|c| std::mem::take(&mut c.sessions))
            .unwrap_or_default();
        for s in &sessions {
            if let Some(s) = self.inner.sessions.remove(s) {
                self.session_gone(&s);
            }
        }
        if let Some(dropped) = self.inner.log.allow(self.now) {
            tracing::info!(
                clientid = format!("{id:016x}"),
                sessions = sessions.len(),
                reason = why,
                dropped,
                "NFSv4.1 courtesy client's sessions dropped; its state is kept"
            );
        }
        true
    }
}

impl Clients {
    /// The periodic sweep (the callback thread calls it on every pass): at most once
    /// per `SWEEP_EVERY`, marks clients whose lease ran out as courtesy clients and
    /// expires those past their courtesy time. `None` when not due.
    pub fn sweep_due(&self) -> Option<Purged> {
        let now = Instant::now();
        {
            let mut g = self.lock();
            if g.last_sweep
                .is_some_and(|t| now.saturating_duration_since(t) < SWEEP_EVERY)
            {
                return None;
            }
            g.last_sweep = Some(now);
        }
        Some(self.with_purge(|t| t.sweep()).1)
    }

    /// Whether `clientid` is confirmed and its lease ran out: a courtesy client (marked
    /// by the sweep or not yet), whose state gives way to any conflict.
    pub fn is_courtesy(&self, clientid: u64) -> bool {
        let now = Instant::now();
        let g = self.lock();
        g.clients
            .get(&clientid)
            .is_some_and(|c| c.confirmed && self.expired(c, now))
    }

    /// Expires the clients `ids` whose lease ran out (another client's operation
    /// conflicts with their state: `why`). Returns what `State::purge` frees.
    pub fn expire_courtesy(&self, ids: &[u64], why: &'static str) -> Purged {
        self.with_purge(|t| {
            for &id in ids {
                if t.is_lapsed(id) {
                    t.expire_for_conflict(id, why);
                }
            }
        })
        .1
    }

    /// Expires `id` whatever its lease (its delegation was taken from it as a
    /// courtesy client: it must not come back to a partial state).
    pub fn expire_now(&self, id: u64, why: &'static str) -> Purged {
        self.with_purge(|t| t.expire_for_conflict(id, why)).1
    }
}
