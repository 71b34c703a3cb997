//! How the reply-cache budget (`Limits::reply_cache_bytes`) is shared out so that no
//! client, and no source address, can lock the others out of CREATE_SESSION.
//!
//! Every slot of every session counts `Session::slot_bytes` against the budget from
//! CREATE_SESSION on. RFC 8881 §18.36.3 lets the server grant fewer slots
//! (ca_maxrequests) than asked, and ca_maxresponsesize_cached is already capped at
//! `Limits::max_cached_reply`. A new session gets as many slots as it asks, but at
//! most
//! - 1/`SHARE_OF_FREE` of what is left of the budget (knfsd's `nfsd4_get_drc_mem`:
//!   "never use more than a fraction of the remaining memory"), so the budget shrinks
//!   geometrically instead of being used up by the first few greedy sessions;
//! - what keeps one client's sessions within 1/`SHARE_PER_CLIENT` of the budget;
//! - what keeps the sessions made from one source address within
//!   1/`SHARE_PER_ADDR` of it;
//!
//! and never fewer than one slot while one still fits (knfsd: "give the client one slot
//! even if that would require over-allocation — it is better than failure"; here the
//! slot must really fit). When the budget runs short, first the sessions of courtesy
//! clients are dropped (`shed_courtesy_sessions`), then sessions no request used for
//! `Limits::session_idle` give back all but one slot (`Session::shrink_if_idle`, RFC
//! 8881 §2.10.6.1: the server lowers sr_target_highest_slotid); their next request
//! takes the budget back when there is room (`Table::regrow`). Only when not even
//! one slot fits after that is CREATE_SESSION refused, with NFS4ERR_DELAY (knfsd's
//! `nfserr_jukebox` when `nfsd4_create_session` cannot allocate): the client retries
//! and idle sessions keep giving their share back, where NFS4ERR_NOSPC would have
//! been final.

use super::{Clients, Table};
use crate::state::error::StateError;
use crate::state::sessions::{ChannelAttrs, Session, MAX_SLOTS};
use std::net::IpAddr;
use std::time::Duration;

/// A new session gets at most this fraction of the budget left (knfsd: 1/8).
const SHARE_OF_FREE: u64 = 8;
/// One client's sessions together hold at most this fraction of the budget.
const SHARE_PER_CLIENT: u64 = 16;
/// The sessions made from one source address hold at most this fraction of it
/// (clients behind one NAT share it; beyond it each session still gets one slot).
const SHARE_PER_ADDR: u64 = 4;
/// A shrunk session tries to take its budget back at most this often
/// (`Clients::regrow`; each try sums the holdings of its client and address).
const REGROW_EVERY: Duration = Duration::from_secs(1);

impl Table<'_> {
    /// The fore channel a new session of `clientid` made from `addr` gets: the
    /// slots asked, lowered by the shares above (RFC 8881 §18.36.3).
    /// NFS4ERR_DELAY when not one slot fits even after reclaiming.
    pub fn grant_slots(
        &mut self,
        mut fore: ChannelAttrs,
        clientid: u64,
        addr: Option<IpAddr>,
    ) -> Result<ChannelAttrs, StateError> {
        let per_slot = Session::slot_bytes(&fore);
        let asked = fore.max_requests.clamp(1, MAX_SLOTS);
        let want = per_slot.saturating_mul(u64::from(asked));
        // Courtesy clients (lease run out) give way before idle sessions of live ones.
        while self.free() / SHARE_OF_FREE < want && self.shed_courtesy_sessions("reply cache short")
        {
        }
        if self.free() / SHARE_OF_FREE < want {
            self.shrink_idle(want.saturating_mul(SHARE_OF_FREE));
        }
        let n = self.allowance(per_slot, clientid, addr, None).min(asked);
        if n == 0 {
            if let Some(dropped) = self.inner.log.allow(self.now) {
                tracing::warn!(
                    sessions = self.inner.sessions.len(),
                    reserved = self.inner.cache_reserved,
                    dropped,
                    "NFSv4.1 reply cache full (nfs4.reply_cache_mib): CREATE_SESSION \
                     answered StateError::Delay until sessions go idle or are destroyed"
                );
            }
            return Err(StateError::Delay);
        }
        fore.max_requests = n;
        Ok(fore)
    }

    /// Reply-cache bytes not reserved by any session.
    fn free(&self) -> u64 {
        self.limits
            .reply_cache_bytes
            .saturating_sub(self.inner.cache_reserved)
    }

    /// Slots of `per_slot` bytes a session of `clientid` from `addr` may hold under
    /// the shares (`except`: a session whose own holding counts as free, for
    /// `regrow`); at least 1 while a slot fits, 0 when none does.
    fn allowance(
        &self,
        per_slot: u64,
        clientid: u64,
        addr: Option<IpAddr>,
        except: Option<&Session>,
    ) -> u32 {
        let own = except.map_or(0, |s| s.cache_bytes());
        let free = self.free() + own;
        if free < per_slot {
            return 0;
        }
        let budget = self.limits.reply_cache_bytes;
        let client_used = self.held(|s| s.clientid == clientid).saturating_sub(own);
        let mut room =
            (free / SHARE_OF_FREE).min((budget / SHARE_PER_CLIENT).saturating_sub(client_used));
        if let Some(a) = addr {
            let addr_used = self.held(|s| s.addr == Some(a)).saturating_sub(own);
            room = room.min((budget / SHARE_PER_ADDR).saturating_sub(addr_used));
        }
        (room / per_slot).clamp(1, u64::from(MAX_SLOTS)) as u32
    }

    /// Reply-cache bytes held by the sessions `which` selects.
    fn held(&self, which: impl Fn(&Session) -> bool) -> u64 {
        self.inner
            .sessions
            .values()
            .filter(|s| which(s))
            .map(|s| s.cache_bytes())
            .sum()
    }

    /// Shrinks sessions idle for `Limits::session_idle` to one slot until `target`
    /// bytes are free or none is left to shrink.
    fn shrink_idle(&mut self, target: u64) {
        let idle = self.limits.session_idle;
        let mut freed = 0u64;
        let mut shrunk = 0u32;
        for s in self.inner.sessions.values() {
            if self.free() + freed >= target {
                break;
            }
            let f = s.shrink_if_idle(self.now, idle);
            if f > 0 {
                freed += f;
                shrunk += 1;
            }
        }
        self.inner.cache_reserved = self.inner.cache_reserved.saturating_sub(freed);
        if shrunk > 0 {
            if let Some(dropped) = self.inner.log.allow(self.now) {
                tracing::info!(
                    sessions = shrunk,
                    freed,
                    idle_s = idle.as_secs(),
                    dropped,
                    "NFSv4.1 reply cache short: idle sessions shrunk to one slot"
                );
            }
        }
    }

    /// Takes back budget for a shrunk session `s` (its next requests use more
    /// slots again, RFC 8881 §2.10.6.1: sr_target_highest_slotid raised), as much as
    /// a new session of its client and address would get, never beyond its table.
    fn regrow(&mut self, s: &Session) {
        let per_slot = Session::slot_bytes(&s.fore);
        let have = s.granted();
        let may = self.allowance(per_slot, s.clientid, s.addr, Some(s));
        let fits = u32::try_from(self.free() / per_slot).unwrap_or(u32::MAX);
        let want = may.min(have.saturating_add(fits));
        let added = s.grow_to(want);
        self.inner.cache_reserved += u64::from(added) * per_slot;
    }
}

impl Clients {
    /// A request arrived on a shrunk session (`Session::is_shrunk`): at most once
    /// per `REGROW_EVERY`, it takes back what budget it may (`Table::regrow`).
    pub fn regrow(&self, s: &Session) {
        if !s.is_shrunk() || !s.regrow_due(REGROW_EVERY) {
            return;
        }
        let ((), purged) = self.with_purge(|t| {
            if t.inner.sessions.contains_key(&s.id) {
                t.regrow(s);
            }
        });
        debug_assert!(purged.is_empty());
    }
}

#[cfg(test)]
#[path = "budget_tests.rs"]
mod tests;
