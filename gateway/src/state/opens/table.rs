//! The open and lock table behind `Opens`' mutex.

use super::locks::{self, Lock, Range};
use super::stateids::{self, Kind};
use super::{Denied, Limits, LockError, Locker, ACCESS_WRITE, DENY_READ, DENY_WRITE};
use crate::state::error::{Checked, StateError};
use crate::state::stateid::Stateid;
use rustc_hash::FxHashMap;
use std::collections::HashMap;

type OwnerKey = (u64, Vec<u8>, u64);

struct OpenState {
    clientid: u64,
    owner: Vec<u8>,
    fileid: u64,
    seqid: u32,
    access: u32,
    deny: u32,
    /// Which share_access values (bits 1..=3) and share_deny values (bits 0..=3)
    /// OPENs of this stateid asked for: OPEN_DOWNGRADE may only go to a union of
    /// some of them (§18.18.3).
    seen_access: u8,
    seen_deny: u8,
    /// Lock stateids made from this open.
    locks: Vec<[u8; 12]>,
}

struct LockState {
    clientid: u64,
    owner: Vec<u8>,
    fileid: u64,
    open: [u8; 12],
    seqid: u32,
}

#[derive(Default)]
struct FileState {
    opens: Vec<[u8; 12]>,
    locks: Vec<Lock>,
}

pub(super) struct Table {
    boot: u32,
    limits: Limits,
    // Keyed by server-chosen values (stateid `other`, file and client ids): FxHash
    // for `check_io` on every READ; owner keys (client-chosen) keep SipHash.
    opens: FxHashMap<[u8; 12], OpenState>,
    open_index: HashMap<OwnerKey, [u8; 12]>,
    lockst: FxHashMap<[u8; 12], LockState>,
    lock_index: HashMap<OwnerKey, [u8; 12]>,
    files: FxHashMap<u64, FileState>,
    per_client: FxHashMap<u64, usize>,
    /// Byte ranges held, all files together (capped by `Limits::ranges_total`).
    nranges: usize,
    /// Files whose last open went since the last `take_idle` (`Opens` tells the file
    /// model, which deletes files removed while open).
    idle: Vec<u64>,
}

/// Whether `other` is one of the special stateids' (all zeros or all ones, §8.2.3).
fn special(other: &[u8; 12]) -> bool {
    other.iter().all(|&b| b == 0) || other.iter().all(|&b| b == 0xff)
}

/// The seqid rule of §8.2.2 for NFSv4.1: 0 means "the current one", an older one
/// NFS4ERR_OLD_STATEID, a newer one (never issued) NFS4ERR_BAD_STATEID.
fn check_seqid(asked: u32, current: u32) -> Result<(), StateError> {
    if asked == 0 || asked == current {
        Ok(())
    } else if asked < current {
        Err(StateError::OldStateid)
    } else {
        Err(StateError::BadStateid)
    }
}

/// Whether `want` is the union of some of the values recorded in `seen` (bit v set
/// = value v was asked for).
fn union_of_seen(want: u32, seen: u8) -> bool {
    let mut u = 0;
    let mut any = false;
    for v in 0..4u32 {
        if seen & (1 << v) != 0 && v & !want == 0 {
            u |= v;
            any = true;
        }
    }
    any && u == want
}

/// Keeps only the seen values inside `new` (knfsd's reset of the union bitmap).
fn keep_seen(seen: u8, new: u32) -> u8 {
    let mut s = 0;
    for v in 0..4u32 {
        if seen & (1 << v) != 0 && v & !new == 0 {
            s |= 1 << v;
        }
    }
    s | (1 << new)
}

fn stateid(other: [u8; 12], seqid: u32) -> Stateid {
    Stateid { seqid, other }
}

impl Table {
    pub(super) fn new(boot: u32, limits: Limits) -> Table {
        Table {
            boot,
            limits,
            opens: FxHashMap::default(),
            open_index: HashMap::new(),
            lockst: FxHashMap::default(),
            lock_index: HashMap::new(),
            files: FxHashMap::default(),
            per_client: FxHashMap::default(),
            nranges: 0,
            idle: Vec::new(),
        }
    }

    /// (open stateids, lock stateids, byte ranges locked).
    pub(super) fn counts(&self) -> (u64, u64, u64) {
        (
            self.opens.len() as u64,
            self.lockst.len() as u64,
            self.nranges as u64,
        )
    }

    fn total(&self) -> usize {
        self.opens.len() + self.lockst.len()
    }

    /// Room for one more stateid of `clientid` (NFS4ERR_RESOURCE otherwise).
    fn room(&self, clientid: u64) -> Result<(), StateError> {
        let n = self.per_client.get(&clientid).copied().unwrap_or(0);
        if n >= self.limits.states_per_client || self.total() >= self.limits.states_total {
            return Err(StateError::Resource);
        }
        Ok(())
    }

    fn count_up(&mut self, clientid: u64) {
        *self.per_client.entry(clientid).or_insert(0) += 1;
    }

    fn count_down(&mut self, clientid: u64) {
        if let Some(n) = self.per_client.get_mut(&clientid) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_client.remove(&clientid);
            }
        }
    }

    /// The `other` of an issued stateid of `kind`, or NFS4ERR_BAD_STATEID (special,
    /// another boot, another kind).
    fn ours(&self, sid: &Stateid, kind: Kind) -> Result<[u8; 12], StateError> {
        let o = sid.other;
        if special(&o) || stateids::boot_of(&o) != self.boot || Kind::of(&o) != Some(kind) {
            return Err(StateError::BadStateid);
        }
        Ok(o)
    }

    /// The open of `sid` owned by `clientid` on `fileid` (when given), seqid checked.
    fn open_of(
        &self,
        clientid: u64,
        sid: &Stateid,
        fileid: Option<u64>,
    ) -> Result<[u8; 12], StateError> {
        let o = self.ours(sid, Kind::Open)?;
        let st = self.opens.get(&o).ok_or(StateError::BadStateid)?;
        if st.clientid != clientid || fileid.is_some_and(|f| f != st.fileid) {
            return Err(StateError::BadStateid);
        }
        check_seqid(sid.seqid, st.seqid)?;
        Ok(o)
    }

    /// The lock stateid `sid` owned by `clientid` on `fileid` (when given).
    fn lock_of(
        &self,
        clientid: u64,
        sid: &Stateid,
        fileid: Option<u64>,
    ) -> Result<[u8; 12], StateError> {
        let o = self.ours(sid, Kind::Lock)?;
        let st = self.lockst.get(&o).ok_or(StateError::BadStateid)?;
        if st.clientid != clientid || fileid.is_some_and(|f| f != st.fileid) {
            return Err(StateError::BadStateid);
        }
        check_seqid(sid.seqid, st.seqid)?;
        Ok(o)
    }

    /// Whether an open of (`access`, `deny`) conflicts with the file's other opens
    /// (§9.7: my access against their deny, my deny against their access).
    fn share_conflict(
        &self,
        fileid: u64,
        except: Option<&[u8; 12]>,
        access: u32,
        deny: u32,
    ) -> bool {
        let Some(f) = self.files.get(&fileid) else {
            return false;
        };
        f.opens
            .iter()
            .filter(|o| Some(*o) != except)
            .filter_map(|o| self.opens.get(o))
            .any(|s| access & s.deny != 0 || deny & s.access != 0)
    }

    /// The clients holding the opens `share_conflict` finds for an OPEN of
    /// (`access`, `deny`) by the open-owner (an upgrade adds the modes it holds).
    pub(super) fn share_blockers(
        &self,
        clientid: u64,
        owner: &[u8],
        fileid: u64,
        access: u32,
        deny: u32,
    ) -> Vec<u64> {
        let own = self
            .open_index
            .get(&(clientid, owner.to_vec(), fileid))
            .copied();
        let (a, d) = own
            .and_then(|o| self.opens.get(&o))
            .map_or((access, deny), |s| (s.access | access, s.deny | deny));
        let Some(f) = self.files.get(&fileid) else {
            return Vec::new();
        };
        let mut ids: Vec<u64> = f
            .opens
            .iter()
            .filter(|o| Some(**o) != own)
            .filter_map(|o| self.opens.get(o))
            .filter(|s| a & s.deny != 0 || d & s.access != 0)
            .map(|s| s.clientid)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// The clients whose opens of `fileid` deny READ (`write` false) or WRITE: what
    /// refuses I/O with a special stateid (`check_io`'s NFS4ERR_LOCKED).
    pub(super) fn deny_blockers(&self, fileid: u64, write: bool) -> Vec<u64> {
        let denied = if write { DENY_WRITE } else { DENY_READ };
        let Some(f) = self.files.get(&fileid) else {
            return Vec::new();
        };
        let mut ids: Vec<u64> = f
            .opens
            .iter()
            .filter_map(|o| self.opens.get(o))
            .filter(|s| s.deny & denied != 0)
            .map(|s| s.clientid)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    pub(super) fn check_io(
        &self,
        clientid: u64,
        sid: &Stateid,
        fileid: u64,
        write: bool,
    ) -> Result<(), StateError> {
        let o = sid.other;
        if o == [0; 12] || o == [0xff; 12] {
            let bypass = o == [0xff; 12];
            if (o == [0; 12] && sid.seqid != 0) || (bypass && sid.seqid != u32::MAX) {
                // CURRENT stateid must have been resolved by the COMPOUND.
                return Err(StateError::BadStateid);
            }
            if bypass && !write {
                return Ok(());
            }
            let denied = if write { DENY_WRITE } else { DENY_READ };
            let locked = self.files.get(&fileid).is_some_and(|f| {
                f.opens
                    .iter()
                    .filter_map(|x| self.opens.get(x))
                    .any(|s| s.deny & denied != 0)
            });
            return if locked {
                Err(StateError::Locked)
            } else {
                Ok(())
            };
        }
        let open = match Kind::of(&o) {
            Some(Kind::Open) => self.open_of(clientid, sid, Some(fileid))?,
            Some(Kind::Lock) => {
                let l = self.lock_of(clientid, sid, Some(fileid))?;
                self.lockst
                    .get(&l)
                    .map(|s| s.open)
                    .ok_or(StateError::BadStateid)?
            }
            _ => return Err(StateError::BadStateid),
        };
        let access = self
            .opens
            .get(&open)
            .map(|s| s.access)
            .ok_or(StateError::BadStateid)?;
        if write && access & ACCESS_WRITE == 0 {
            return Err(StateError::OpenMode);
        }
        // A READ is allowed with READ or WRITE access (knfsd's access_permit_read).
        Ok(())
    }

    pub(super) fn client_has_state(&self, clientid: u64) -> bool {
        self.per_client.get(&clientid).is_some_and(|&n| n > 0)
    }

    pub(super) fn purge_client(&mut self, clientid: u64) {
        let opens: Vec<[u8; 12]> = self
            .opens
            .iter()
            .filter(|(_, s)| s.clientid == clientid)
            .map(|(o, _)| *o)
            .collect();
        for o in opens {
            self.remove_open(&o);
        }
        self.per_client.remove(&clientid);
    }

    /// Removes an open, its lock stateids and their locks.
    fn remove_open(&mut self, o: &[u8; 12]) {
        let Some(st) = self.opens.remove(o) else {
            return;
        };
        for l in &st.locks {
            self.remove_lock_state(l);
        }
        self.open_index.remove(&(st.clientid, st.owner, st.fileid));
        if let Some(f) = self.files.get_mut(&st.fileid) {
            f.opens.retain(|x| x != o);
            if f.opens.is_empty() {
                self.idle.push(st.fileid);
            }
        }
        self.drop_file_if_idle(st.fileid);
        self.count_down(st.clientid);
    }

    /// Removes a lock stateid and its locks (not its entry in the open's list).
    fn remove_lock_state(&mut self, l: &[u8; 12]) {
        let Some(st) = self.lockst.remove(l) else {
            return;
        };
        self.lock_index.remove(&(st.clientid, st.owner, st.fileid));
        if let Some(f) = self.files.get_mut(&st.fileid) {
            let held = locks::count(&f.locks, l);
            f.locks.retain(|x| &x.owner != l);
            self.nranges = self.nranges.saturating_sub(held);
        }
        self.count_down(st.clientid);
    }

    fn drop_file_if_idle(&mut self, fileid: u64) {
        if self
            .files
            .get(&fileid)
            .is_some_and(|f| f.opens.is_empty() && f.locks.is_empty())
        {
            self.files.remove(&fileid);
        }
    }

    pub(super) fn open(
        &mut self,
        clientid: u64,
        owner: &[u8],
        fileid: u64,
        access: u32,
        deny: u32,
    ) -> Result<Stateid, StateError> {
        if !(1..=3).contains(&access) || deny > 3 {
            return Err(StateError::Invalid);
        }
        let key = (clientid, owner.to_vec(), fileid);
        if let Some(o) = self.open_index.get(&key).copied() {
            // Upgrade (§9.7 / §18.16.3): the open now has the union of both.
            let (a, d) = self
                .opens
                .get(&o)
                .map(|s| (s.access, s.deny))
                .ok_or(StateError::Inconsistent)?;
            if self.share_conflict(fileid, Some(&o), a | access, d | deny) {
                return Err(StateError::ShareDenied);
            }
            let s = self.opens.get_mut(&o).ok_or(StateError::Inconsistent)?;
            s.access |= access;
            s.deny |= deny;
            s.seen_access |= 1 << access;
            s.seen_deny |= 1 << deny;
            s.seqid = stateids::next_seqid(s.seqid);
            return Ok(stateid(o, s.seqid));
        }
        if self.share_conflict(fileid, None, access, deny) {
            return Err(StateError::ShareDenied);
        }
        self.room(clientid)?;
        let o = stateids::fresh_other(self.boot, Kind::Open);
        self.opens.insert(
            o,
            OpenState {
                clientid,
                owner: owner.to_vec(),
                fileid,
                seqid: 1,
                access,
                deny,
                seen_access: 1 << access,
                seen_deny: 1 << deny,
                locks: Vec::new(),
            },
        );
        self.open_index.insert(key, o);
        self.files.entry(fileid).or_default().opens.push(o);
        self.count_up(clientid);
        Ok(stateid(o, 1))
    }

    pub(super) fn downgrade(
        &mut self,
        clientid: u64,
        sid: &Stateid,
        fileid: u64,
        access: u32,
        deny: u32,
    ) -> Result<Stateid, StateError> {
        let o = self.open_of(clientid, sid, Some(fileid))?;
        if !(1..=3).contains(&access) || deny > 3 {
            return Err(StateError::Invalid);
        }
        let s = self.opens.get_mut(&o).ok_or(StateError::BadStateid)?;
        // §18.18.3: a subset of the current modes that is a union of modes opened.
        if access & !s.access != 0
            || deny & !s.deny != 0
            || !union_of_seen(access, s.seen_access)
            || !union_of_seen(deny, s.seen_deny)
        {
            return Err(StateError::Invalid);
        }
        s.access = access;
        s.deny = deny;
        s.seen_access = keep_seen(s.seen_access, access);
        s.seen_deny = keep_seen(s.seen_deny, deny);
        s.seqid = stateids::next_seqid(s.seqid);
        Ok(stateid(o, s.seqid))
    }

    pub(super) fn close(
        &mut self,
        clientid: u64,
        sid: &Stateid,
        fileid: u64,
    ) -> Result<(), StateError> {
        let o = self.open_of(clientid, sid, Some(fileid))?;
        let held = self.opens.get(&o).is_some_and(|s| {
            let f = self.files.get(&s.fileid);
            s.locks
                .iter()
                .any(|l| f.is_some_and(|f| f.locks.iter().any(|x| &x.owner == l)))
        });
        if held {
            return Err(StateError::LocksHeld);
        }
        self.remove_open(&o);
        Ok(())
    }

    /// Whether any open stateid holds `fileid`.
    pub(super) fn file_is_open(&self, fileid: u64) -> bool {
        self.files.get(&fileid).is_some_and(|f| !f.opens.is_empty())
    }

    /// The files whose last open went since the last call.
    pub(super) fn take_idle(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.idle)
    }

    pub(super) fn has_open(&self, clientid: u64, owner: &[u8], fileid: u64) -> bool {
        self.open_index
            .contains_key(&(clientid, owner.to_vec(), fileid))
    }

    pub(super) fn open_modes(&self, sid: &Stateid) -> Option<(u32, u32)> {
        self.opens.get(&sid.other).map(|s| (s.access, s.deny))
    }

    fn denied(&self, l: &Lock) -> Denied {
        let (clientid, owner) = self
            .lockst
            .get(&l.owner)
            .map(|s| (s.clientid, s.owner.clone()))
            .unwrap_or_default();
        Denied {
            offset: l.range.start,
            length: l.range.length(),
            write: l.write,
            clientid,
            owner,
        }
    }

    pub(super) fn lock(
        &mut self,
        clientid: u64,
        locker: &Locker,
        fileid: u64,
        range: Range,
        write: bool,
    ) -> Result<Stateid, LockError> {
        // Which lock stateid (existing or to be made) and which open it hangs off.
        let (existing, open, owner) = match locker {
            Locker::Existing { lock } => {
                let l = self.lock_of(clientid, lock, Some(fileid))?;
                let st = self.lockst.get(&l).ok_or(StateError::BadStateid)?;
                (Some(l), st.open, st.owner.clone())
            }
            Locker::New { open, owner } => {
                let o = self.open_of(clientid, open, Some(fileid))?;
                let key = (clientid, owner.clone(), fileid);
                (self.lock_index.get(&key).copied(), o, owner.clone())
            }
        };
        let access = self
            .opens
            .get(&open)
            .map(|s| s.access)
            .ok_or(StateError::BadStateid)?;
        // §18.10.3: a WRITE_LT needs an open for writing (READ_LT: READ or WRITE).
        if write && access & ACCESS_WRITE == 0 {
            return Err(StateError::OpenMode.into());
        }
        if let Some(f) = self.files.get(&fileid) {
            let mine = |l: &Lock| existing.is_some_and(|e| e == l.owner);
            if let Some(c) = locks::conflict(&f.locks, mine, &range, write) {
                return Err(LockError::Denied(self.denied(c)));
            }
        }
        let l = match existing {
            Some(l) => l,
            None => {
                self.room(clientid)?;
                let l = stateids::fresh_other(self.boot, Kind::Lock);
                self.lockst.insert(
                    l,
                    LockState {
                        clientid,
                        owner: owner.clone(),
                        fileid,
                        open,
                        seqid: 0,
                    },
                );
                self.lock_index.insert((clientid, owner, fileid), l);
                if let Some(s) = self.opens.get_mut(&open) {
                    s.locks.push(l);
                }
                self.count_up(clientid);
                l
            }
        };
        let f = self.files.entry(fileid).or_default();
        let held = locks::count(&f.locks, &l);
        // The owner's own cap, and what is left of the table-wide one.
        let room = self.limits.ranges_total.saturating_sub(self.nranges);
        let max = self.limits.ranges_per_owner.min(held.saturating_add(room));
        let ok = locks::set(&mut f.locks, l, range, write, max);
        let now = locks::count(&f.locks, &l);
        self.nranges = self.nranges.saturating_sub(held).saturating_add(now);
        if !ok {
            if existing.is_none() {
                self.remove_lock_state(&l);
                if let Some(s) = self.opens.get_mut(&open) {
                    s.locks.retain(|x| x != &l);
                }
            }
            return Err(StateError::Resource.into());
        }
        let st = self.lockst.get_mut(&l).ok_or(StateError::Inconsistent)?;
        st.seqid = stateids::next_seqid(st.seqid);
        Ok(stateid(l, st.seqid))
    }

    pub(super) fn lockt(
        &self,
        clientid: u64,
        owner: &[u8],
        fileid: u64,
        range: Range,
        write: bool,
    ) -> Result<(), LockError> {
        let Some(f) = self.files.get(&fileid) else {
            return Ok(());
        };
        let me = self
            .lock_index
            .get(&(clientid, owner.to_vec(), fileid))
            .copied();
        let mine = |l: &Lock| me.is_some_and(|m| m == l.owner);
        match locks::conflict(&f.locks, mine, &range, write) {
            Some(c) => Err(LockError::Denied(self.denied(c))),
            None => Ok(()),
        }
    }

    pub(super) fn locku(
        &mut self,
        clientid: u64,
        sid: &Stateid,
        fileid: u64,
        range: Range,
    ) -> Result<Stateid, StateError> {
        let l = self.lock_of(clientid, sid, Some(fileid))?;
        let room = self.limits.ranges_total.saturating_sub(self.nranges);
        if let Some(f) = self.files.get_mut(&fileid) {
            let held = locks::count(&f.locks, &l);
            let max = self.limits.ranges_per_owner.min(held.saturating_add(room));
            let ok = locks::unset(&mut f.locks, l, range, max);
            let now = locks::count(&f.locks, &l);
            self.nranges = self.nranges.saturating_sub(held).saturating_add(now);
            if !ok {
                return Err(StateError::Resource);
            }
        }
        let st = self.lockst.get_mut(&l).ok_or(StateError::BadStateid)?;
        st.seqid = stateids::next_seqid(st.seqid);
        Ok(stateid(l, st.seqid))
    }

    pub(super) fn test_stateid(&self, clientid: u64, sid: &Stateid) -> Checked {
        match Kind::of(&sid.other) {
            Some(Kind::Open) => self.open_of(clientid, sid, None).map(|_| ()),
            Some(Kind::Lock) => self.lock_of(clientid, sid, None).map(|_| ()),
            _ => Err(StateError::BadStateid),
        }
    }

    pub(super) fn free_stateid(&mut self, clientid: u64, sid: &Stateid) -> Checked {
        match Kind::of(&sid.other) {
            Some(Kind::Open) => match self.open_of(clientid, sid, None) {
                Ok(_) => Err(StateError::LocksHeld),
                Err(e) => Err(e),
            },
            Some(Kind::Lock) => {
                let l = self.lock_of(clientid, sid, None)?;
                let Some(st) = self.lockst.get(&l) else {
                    return Err(StateError::BadStateid);
                };
                let (fileid, open) = (st.fileid, st.open);
                if self
                    .files
                    .get(&fileid)
                    .is_some_and(|f| f.locks.iter().any(|x| x.owner == l))
                {
                    return Err(StateError::LocksHeld);
                }
                self.remove_lock_state(&l);
                if let Some(s) = self.opens.get_mut(&open) {
                    s.locks.retain(|x| x != &l);
                }
                self.drop_file_if_idle(fileid);
                Ok(())
            }
            _ => Err(StateError::BadStateid),
        }
    }
}
