//! Delegations: granting on OPEN, recall over the back channel when another client
//! (v4) or any v3 call conflicts, return and revocation after the lease (RFC 8881
//! §10.2, §10.4, §18.6).
//!
//! Sharing (docs/architecture.md §3): one `Mutex<Table>` shared by every worker (grants, conflicts,
//! DELEGRETURN), the callback thread (recall progress, revocation) and nothing else;
//! never held across storage I/O or a wait (a worker waiting for a CB_GETATTR
//! answer waits on `attr_cv`, which releases it). Reactors only push callback replies onto
//! the lock-free `replies` queue. `live` (delegations held or being recalled) lets a
//! v3 WRITE skip the lock entirely while no client holds a delegation.
//!
//! Policy: delegations are granted only to clients whose back channel answered a
//! CB_NULL probe, never on a file that saw a conflict in the last `BLOCK_FOR`
//! (knfsd's "recently recalled" rule), never while another client's delegation on the
//! file is being recalled. A read delegation to an OPEN for reading; a write
//! delegation (`nfs4.write_delegations`) to an OPEN for writing when no other
//! delegation and no other client's open is on the file (RFC 8881 §10.4: the server
//! decides; the caller checks the opens). A write delegation conflicts with every
//! data access by anyone else, reads included (§10.4.3: the holder may hold writes
//! the server has not seen): NFSv3 READ and another client's READ or OPEN recall it
//! (`Conflict::Read`) and wait with JUKEBOX / DELAY like writers. Attribute reads
//! (GETATTR) ask the holder instead (CB_GETATTR, `delegations_getattr.rs`), and
//! recall only when that fails. While one is out its file is held in the reactors'
//! caches (`ChangeObserver::hold`): no cached GETATTR or READ answers for it, so every
//! such call reaches a worker and this check.

use super::recall::{Inbox, Job};
use super::stateid::Stateid;
use super::{BackChannelInfo, Conflict};
use crate::fs::ChangeObserver;
use crate::state::error::{Checked, StateError};
use crate::stats::callbacks::{CallbackResult, CallbackStats, RecallResult};
use crate::stats::Transport;
use crossbeam_queue::ArrayQueue;
use rustc_hash::FxHashMap;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// Delegations (held, recalled or revoked-but-not-freed) the gateway keeps at most.
pub const MAX_DELEGATIONS: usize = 65_536;
/// ... and per client.
pub const MAX_PER_CLIENT: usize = 4096;
/// A file that saw a conflict gets no new delegation for this long.
pub const BLOCK_FOR: Duration = Duration::from_secs(30);
/// Files remembered as recently conflicted, at most.
const MAX_BLOCKED: usize = 4096;
/// Callback replies waiting for the callback thread, at most (more are dropped and
/// counted as unmatched: the callback then times out and is retried).
const MAX_REPLIES: usize = 256;
/// Largest callback reply kept (CB_COMPOUND replies to CB_RECALL are ~100 bytes).
pub const MAX_REPLY_BYTES: usize = 64 * 1024;
/// The default lease (`nfs4.lease_time_s`, set by `set_lease`).
const DEFAULT_LEASE: Duration = Duration::from_secs(90);
/// Byte 4 of every delegation stateid's `other`: the kind of state, in the layout the
/// opens table uses too (`[0..4]` boot verifier, never 0; `[4]` kind: 1 open, 2 lock,
/// 3 delegation; `[5..12]` a counter), so TEST_STATEID / FREE_STATEID route by it.
pub const KIND: u8 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DState {
    Held,
    /// Recall started at `since`; `answered` once CB_RECALL was acknowledged.
    Recalling {
        since: Instant,
    },
    /// Not returned within the lease (RFC 8881 §10.2.1 / §8.11.1): kept until
    /// FREE_STATEID or the client goes, so TEST_STATEID reports it.
    Revoked,
}

#[derive(Debug, Clone)]
struct Deleg {
    clientid: u64,
    fileid: u64,
    seqid: u32,
    write: bool,
    state: DState,
    /// The transport of the first CB_RECALL sent for it (the recall counters'
    /// `transport` label); None until one is sent.
    via: Option<Transport>,
    /// A write delegation's CB_GETATTR record (§10.4.3; `delegations_getattr.rs`).
    probe: getattr::AttrProbe,
    /// An `*_ATTRS_DELEG` delegation's original times (RFC 9754 §6;
    /// `delegations_times.rs`); `None`: a plain one.
    times: Option<times::GrantTimes>,
}

#[derive(Default)]
struct Table {
    // Server-chosen keys (delegation `other`, file and client ids): FxHash.
    by_other: FxHashMap<[u8; 12], Deleg>,
    by_file: FxHashMap<u64, Vec<[u8; 12]>>,
    per_client: FxHashMap<u64, usize>,
    /// File handles of delegated files (CB_RECALL names the file by handle).
    fhs: HashMap<u64, Vec<u8>>,
    /// Files that saw a conflict, when, and by whom (None: NFSv3).
    blocked: HashMap<u64, (Instant, Option<u64>)>,
    /// Clients whose last CB_NULL probe was answered (true) or failed (false);
    /// absent: not probed yet or a probe is in flight.
    cb_up: HashMap<u64, bool>,
    counter: u64,
    /// Delegations held or being recalled (not revoked).
    live: usize,
    /// ... of which write delegations.
    live_write: usize,
    /// Files whose write delegation ended since the last `publish` (their cache
    /// holds are released there).
    unhold: Vec<(u64, u64)>,
    /// Courtesy clients (lease run out, state kept: `delegations_courtesy.rs`).
    courtesy: rustc_hash::FxHashSet<u64>,
    /// Courtesy clients whose delegation a conflict took: to be expired.
    doomed: Vec<u64>,
}

/// Every delegation of the gateway, and the queues to and from the callback thread.
pub struct Delegations {
    table: Mutex<Table>,
    /// Signalled (with `table`) when a CB_GETATTR is answered or fails: a worker
    /// answering another client's GETATTR waits on it a little (`holder_attrs`).
    attr_cv: Condvar,
    /// Delegations held or being recalled (not revoked).
    live: AtomicUsize,
    /// Write delegations held or being recalled: while 0, reads skip every check.
    live_write: AtomicUsize,
    /// Whether write delegations are granted (`nfs4.write_delegations`).
    write_on: AtomicBool,
    /// The reactors' caches, told which files a write delegation holds.
    caches: OnceLock<Arc<dyn ChangeObserver>>,
    lease_ms: AtomicU64,
    boot: [u8; 4],
    stats: Arc<CallbackStats>,
    /// Work for the callback thread (probes, recalls), and its wake-up.
    pub(crate) inbox: Inbox,
    /// Asynchronous COPYs: the callback thread sends their CB_OFFLOADs beside the
    /// recalls (`recall::RecallTable`).
    pub offloads: super::offload::Offloads,
    /// Callback replies from reactors: (xid, record, transport).
    replies: ArrayQueue<(u32, Vec<u8>, Transport)>,
    /// Callbacks the RDMA transport reports failed (RDMA_ERROR, or the connection was
    /// lost while they were outstanding: RFC 8167 §5.4, R8167-16/17), by XID.
    failures: ArrayQueue<u32>,
}

impl Default for Delegations {
    fn default() -> Self {
        let boot = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs() as u32)
            .max(1);
        Delegations {
            table: Mutex::default(),
            attr_cv: Condvar::new(),
            live: AtomicUsize::new(0),
            live_write: AtomicUsize::new(0),
            write_on: AtomicBool::new(true),
            caches: OnceLock::new(),
            lease_ms: AtomicU64::new(DEFAULT_LEASE.as_millis() as u64),
            boot: boot.to_be_bytes(),
            stats: Arc::default(),
            inbox: Inbox::default(),
            offloads: Default::default(),
            replies: ArrayQueue::new(MAX_REPLIES),
            failures: ArrayQueue::new(MAX_REPLIES),
        }
    }
}

impl Delegations {
    fn lock(&self) -> MutexGuard<'_, Table> {
        // A panic while holding the lock leaves a consistent table (every mutation is
        // a few field stores), so poisoning is ignored.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The lease: a recalled delegation not returned within it is revoked.
    pub fn set_lease(&self, lease: Duration) {
        self.lease_ms
            .store(lease.as_millis().max(1) as u64, Ordering::Relaxed);
    }

    /// Grants write delegations (`true`, the default) or never (`false`).
    pub fn set_write_delegations(&self, on: bool) {
        self.write_on.store(on, Ordering::Relaxed);
    }

    /// The caches to hold a write-delegated file in (set once, by the server).
    pub fn observe_holds(&self, caches: Arc<dyn ChangeObserver>) {
        let _ = self.caches.set(caches);
    }

    fn hold(&self, fileid: u64, clientid: u64, held: bool) {
        if let Some(c) = self.caches.get() {
            c.hold(fileid, clientid, held);
        }
    }

    /// Whether any write delegation is held or being recalled (one atomic load:
    /// reads and GETATTRs skip the conflict check while none is).
    pub fn any_write(&self) -> bool {
        self.live_write.load(Ordering::Acquire) > 0
    }

    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms.load(Ordering::Relaxed))
    }

    /// Whether any delegation is held or being recalled (one atomic load: lets
    /// NFSv3 calls skip every conflict check while none is).
    pub fn any_live(&self) -> bool {
        self.live.load(Ordering::Acquire) > 0
    }

    /// The counters behind `nfsgw_callbacks_total`, `nfsgw_delegation_recalls_total`
    /// and `nfsgw_delegations`.
    pub fn stats(&self) -> Arc<CallbackStats> {
        self.stats.clone()
    }

    /// Whether `s` is a delegation stateid by its kind byte (ours or from an earlier
    /// run, which this table then does not know: BAD_STATEID), so TEST_STATEID /
    /// FREE_STATEID / READ / WRITE know to ask this table.
    pub fn owns(&self, s: &Stateid) -> bool {
        s.other[4] == KIND
    }

    /// OPEN with CLAIM_DELEGATE_CUR / CLAIM_DELEG_CUR_FH (RFC 8881 §18.16.3): whether
    /// `s` is a current (not revoked) delegation of `clientid` on `fileid`.
    pub fn holds(&self, clientid: u64, s: &Stateid, fileid: u64) -> bool {
        let t = self.lock();
        Self::find(&t, Some(clientid), s)
            .is_ok_and(|d| d.fileid == fileid && d.state != DState::Revoked)
    }

    fn publish(&self, t: &mut Table) {
        self.live.store(t.live, Ordering::Release);
        self.live_write.store(t.live_write, Ordering::Release);
        self.stats.set_delegations(t.live as u64);
        for (f, c) in t.unhold.drain(..) {
            self.hold(f, c, false);
        }
    }

    /// Remembers the handle of `fileid` for CB_RECALL (call before `try_grant`; the
    /// OPEN that grants knows the handle, `try_grant` does not take it).
    pub fn note_fh(&self, fileid: u64, fh: &[u8]) {
        let mut t = self.lock();
        if t.fhs.len() >= MAX_DELEGATIONS && !t.fhs.contains_key(&fileid) {
            let Table { fhs, by_file, .. } = &mut *t;
            fhs.retain(|f, _| by_file.contains_key(f));
            if fhs.len() >= MAX_DELEGATIONS {
                return;
            }
        }
        t.fhs.insert(fileid, fh.to_vec());
    }

    /// `note_fh` then `try_grant`: what OPEN should call.
    pub fn try_grant_fh(
        &self,
        clientid: u64,
        fileid: u64,
        fh: &[u8],
        want_write: bool,
    ) -> Option<(Stateid, bool)> {
        self.note_fh(fileid, fh);
        self.try_grant(clientid, fileid, want_write)
    }

    /// Grant policy for OPEN (RFC 8881 §10.4: the server decides; a delegation is only
    /// given when it can be recalled): a read delegation when the client's back
    /// channel answered a probe, the file's handle is known (`note_fh`), no other
    /// client's delegation on it is being recalled and none is a write delegation, it
    /// saw no conflict from another client or NFSv3 in the last `BLOCK_FOR`, the
    /// client holds none on it already, and the tables have room. `want_write` (the
    /// OPEN asked for WRITE access): a write delegation under the same rules, when
    /// they are on and no other delegation at all is on the file (the caller has
    /// checked that no other client has it open). Returns the delegation stateid and
    /// whether it is a write delegation.
    pub fn try_grant(
        &self,
        clientid: u64,
        fileid: u64,
        want_write: bool,
    ) -> Option<(Stateid, bool)> {
        if want_write && !self.write_on.load(Ordering::Relaxed) {
            return None;
        }
        let now = Instant::now();
        let mut t = self.lock();
        if t.cb_up.get(&clientid) != Some(&true) || !t.fhs.contains_key(&fileid) {
            return None;
        }
        if let Some(&(at, by)) = t.blocked.get(&fileid) {
            if now.saturating_duration_since(at) < BLOCK_FOR && by != Some(clientid) {
                return None;
            }
        }
        let busy = t.by_file.get(&fileid).is_some_and(|v| {
            v.iter().filter_map(|o| t.by_other.get(o)).any(|d| {
                d.clientid == clientid
                    || matches!(d.state, DState::Recalling { .. })
                    || d.write
                    || (want_write && d.state != DState::Revoked)
            })
        });
        let mine = t.per_client.get(&clientid).copied().unwrap_or(0);
        if busy || t.by_other.len() >= MAX_DELEGATIONS || mine >= MAX_PER_CLIENT {
            return None;
        }
        t.counter = t.counter.wrapping_add(1);
        let mut other = [0u8; 12];
        other[..4].copy_from_slice(&self.boot);
        other[4] = KIND;
        other[5..].copy_from_slice(&t.counter.to_be_bytes()[1..]);
        t.by_other.insert(
            other,
            Deleg {
                clientid,
                fileid,
                seqid: 1,
                write: want_write,
                state: DState::Held,
                via: None,
                probe: Default::default(),
                times: None,
            },
        );
        t.by_file.entry(fileid).or_default().push(other);
        *t.per_client.entry(clientid).or_default() += 1;
        t.live += 1;
        if want_write {
            // Held before the OPEN's reply leaves: no cached answer for the file
            // from now until the delegation ends (`publish` releases it).
            self.hold(fileid, clientid, true);
            t.live_write += 1;
        }
        self.publish(&mut t);
        Some((Stateid { seqid: 1, other }, want_write))
    }

    /// Called before an operation that conflicts with delegations on `fileid` runs,
    /// by `clientid` (`None` for NFSv3 callers). Starts recalls of conflicting
    /// delegations held by other clients and returns `false` while any is
    /// outstanding: the caller then answers NFS4ERR_DELAY (v4) or NFS3ERR_JUKEBOX (v3)
    /// and the client retries. `true`: no conflict, go on.
    ///
    /// RFC 8881 §10.4.4 (a conflicting OPEN), §10.2 (recall when another client's
    /// operation conflicts); a client never conflicts with its own delegations. A
    /// recall is started once per delegation; one not returned within the lease is
    /// revoked here too (so v3 writers make progress even without the callback
    /// thread), after which it no longer conflicts.
    pub fn break_conflicts(&self, fileid: u64, clientid: Option<u64>, why: Conflict) -> bool {
        let reads = matches!(why, Conflict::OpenRead | Conflict::Read);
        if why == Conflict::Read && !self.any_write() {
            return true;
        }
        let v4_writer = clientid.is_some() && !reads;
        if self.live.load(Ordering::Acquire) == 0 && !v4_writer {
            return true;
        }
        let now = Instant::now();
        let lease = self.lease();
        let mut t = self.lock();
        if !reads {
            block(&mut t, fileid, now, clientid);
        }
        let Some(list) = t.by_file.get(&fileid).cloned() else {
            return true;
        };
        let mut outstanding = false;
        let mut started = Vec::new();
        let mut revoked = 0;
        let mut doomed = false;
        for other in list {
            let Some(d) = t.by_other.get(&other) else {
                continue;
            };
            if Some(d.clientid) == clientid || (reads && !d.write) {
                continue;
            }
            if d.state != DState::Revoked && t.courtesy.contains(&d.clientid) {
                // A courtesy client cannot answer a recall: its delegation goes now
                // and the client is expired (`delegations_courtesy.rs`).
                doom(&mut t, &other);
                doomed = true;
                continue;
            }
            let Some(d) = t.by_other.get_mut(&other) else {
                continue;
            };
            match d.state {
                DState::Held => {
                    d.state = DState::Recalling { since: now };
                    started.push(other);
                    outstanding = true;
                }
                DState::Recalling { since } if now.saturating_duration_since(since) >= lease => {
                    d.state = DState::Revoked;
                    self.stats.recall(d.via, RecallResult::Revoked);
                    revoked += 1;
                    let (write, f, c) = (d.write, d.fileid, d.clientid);
                    ended_write(&mut t, write, f, c);
                }
                DState::Recalling { .. } => outstanding = true,
                DState::Revoked => {}
            }
        }
        if revoked > 0 {
            t.live = t.live.saturating_sub(revoked);
        }
        if outstanding && why == Conflict::Read {
            // A reader that had to recall a write delegation keeps the file from new
            // delegations for a while, as a writer does (no ping-pong).
            block(&mut t, fileid, now, clientid);
        }
        if revoked > 0 || doomed {
            self.publish(&mut t);
        }
        drop(t);
        if doomed {
            // The callback thread expires the doomed clients (`State::sweep`).
            self.inbox.wake();
        }
        // The recall's "sent" is counted by `recall_sent`, when its first CB_RECALL
        // goes out on a known transport.
        for other in started {
            self.inbox.push(Job::Recall(other));
        }
        !outstanding
    }

    /// What CB_RECALL needs for a delegation still being recalled: its client,
    /// stateid and file handle. `None`: returned, revoked or freed (stop recalling).
    pub(crate) fn recall_target(&self, other: &[u8; 12]) -> Option<(u64, Stateid, Vec<u8>)> {
        let t = self.lock();
        let d = t.by_other.get(other)?;
        if !matches!(d.state, DState::Recalling { .. }) {
            return None;
        }
        let fh = t.fhs.get(&d.fileid)?.clone();
        Some((
            d.clientid,
            Stateid {
                seqid: d.seqid,
                other: *other,
            },
            fh,
        ))
    }

    /// A CB_RECALL for `other` was handed to the reactor of a `via` back channel:
    /// the first one counts the recall as sent on that transport.
    pub(crate) fn recall_sent(&self, other: &[u8; 12], via: Transport) {
        let mut t = self.lock();
        if let Some(d) = t.by_other.get_mut(other) {
            if d.via.is_none() {
                d.via = Some(via);
                self.stats.recall(Some(via), RecallResult::Sent);
            }
        }
    }

    /// The client acknowledged CB_RECALL over `via` (it will DELEGRETURN).
    pub(crate) fn recall_answered(&self, via: Transport) {
        self.stats.recall(Some(via), RecallResult::Answered);
    }

    /// Revokes every delegation recalled longer than the lease ago (RFC 8881
    /// §10.2.1: the server may revoke after the lease). Returns how many.
    pub fn revoke_overdue(&self, now: Instant) -> usize {
        let lease = self.lease();
        let mut t = self.lock();
        let mut n = 0;
        let mut writes = Vec::new();
        for d in t.by_other.values_mut() {
            if let DState::Recalling { since } = d.state {
                if now.saturating_duration_since(since) >= lease {
                    d.state = DState::Revoked;
                    self.stats.recall(d.via, RecallResult::Revoked);
                    n += 1;
                    if d.write {
                        writes.push((d.fileid, d.clientid));
                    }
                }
            }
        }
        for (f, c) in writes {
            ended_write(&mut t, true, f, c);
        }
        if n > 0 {
            t.live = t.live.saturating_sub(n);
            self.publish(&mut t);
        }
        n
    }

    /// Whether a CB_NULL probe of `clientid`'s back channel was answered.
    pub fn callback_up(&self, clientid: u64) -> bool {
        self.lock().cb_up.get(&clientid) == Some(&true)
    }

    /// Whether the last CB_NULL probe of `clientid`'s back channel failed or timed out
    /// (SEQUENCE then sets SEQ4_STATUS_CB_PATH_DOWN, RFC 8881 §18.46.3). `false`
    /// while the probe is outstanding.
    pub fn callback_down(&self, clientid: u64) -> bool {
        self.lock().cb_up.get(&clientid) == Some(&false)
    }

    pub(crate) fn set_callback_up(&self, clientid: u64, up: bool) {
        let mut t = self.lock();
        if t.cb_up.len() < MAX_DELEGATIONS || t.cb_up.contains_key(&clientid) {
            t.cb_up.insert(clientid, up);
        }
    }

    /// Whether `clientid` has revoked delegations not yet freed (SEQUENCE sets
    /// SEQ4_STATUS_RECALLABLE_STATE_REVOKED then: RFC 8881 §18.46.3).
    pub fn has_revoked(&self, clientid: u64) -> bool {
        let t = self.lock();
        // Every SEQUENCE asks: when nothing is revoked at all (`live` counts the
        // delegations that are not), answer without walking the table.
        if t.by_other.len() == t.live {
            return false;
        }
        t.by_other
            .values()
            .any(|d| d.clientid == clientid && d.state == DState::Revoked)
    }

    /// Finds a delegation stateid for `clientid` and checks its seqid (RFC 8881
    /// §8.2.2: seqid 0 = current; older → OLD_STATEID, newer → BAD_STATEID).
    fn find<'t>(t: &'t Table, clientid: Option<u64>, s: &Stateid) -> Result<&'t Deleg, StateError> {
        let d = t.by_other.get(&s.other).ok_or(StateError::BadStateid)?;
        if clientid.is_some_and(|c| c != d.clientid) {
            return Err(StateError::BadStateid);
        }
        if s.seqid != 0 && s.seqid < d.seqid {
            return Err(StateError::OldStateid);
        }
        if s.seqid > d.seqid {
            return Err(StateError::BadStateid);
        }
        Ok(d)
    }

    /// DELEGRETURN (RFC 8881 §18.6): `fileid` is the current filehandle's file.
    /// Unknown, another client's, another file's → BAD_STATEID; revoked →
    /// DELEG_REVOKED (FREE_STATEID frees it); else freed, completing a recall.
    pub fn delegreturn(&self, clientid: u64, s: &Stateid, fileid: u64) -> Checked {
        let mut t = self.lock();
        let d = Self::find(&t, Some(clientid), s)?;
        if d.fileid != fileid {
            return Err(StateError::BadStateid);
        }
        match d.state {
            DState::Revoked => return Err(StateError::DelegRevoked),
            DState::Recalling { .. } => self.stats.recall(d.via, RecallResult::Returned),
            DState::Held => {}
        }
        remove(&mut t, &s.other);
        self.publish(&mut t);
        Ok(())
    }

    /// TEST_STATEID for a delegation stateid (RFC 8881 §18.48): `Ok`, `BadStateid`,
    /// `OldStateid` or `DelegRevoked`.
    pub fn test(&self, s: &Stateid) -> Checked {
        let t = self.lock();
        match Self::find(&t, None, s) {
            Ok(d) if d.state == DState::Revoked => Err(StateError::DelegRevoked),
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// `test` for the COMPOUND's client: another client's delegation stateid is
    /// BAD_STATEID (RFC 8881 §18.48.3).
    pub fn test_client(&self, clientid: u64, s: &Stateid) -> Checked {
        let t = self.lock();
        match Self::find(&t, Some(clientid), s) {
            Ok(d) if d.state == DState::Revoked => Err(StateError::DelegRevoked),
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// `free` for the COMPOUND's client (another client's → BAD_STATEID).
    pub fn free_client(&self, clientid: u64, s: &Stateid) -> Checked {
        if Self::find(&self.lock(), Some(clientid), s).is_err() {
            return Err(StateError::BadStateid);
        }
        self.free(s)
    }

    /// FREE_STATEID for a delegation stateid (RFC 8881 §18.38): a revoked one is
    /// freed; one still held → LOCKS_HELD (return it with DELEGRETURN); unknown →
    /// BAD_STATEID.
    pub fn free(&self, s: &Stateid) -> Checked {
        let mut t = self.lock();
        match Self::find(&t, None, s) {
            Ok(d) if d.state == DState::Revoked => {
                remove(&mut t, &s.other);
                self.publish(&mut t);
                Ok(())
            }
            Ok(_) => Err(StateError::LocksHeld),
            Err(e) => Err(e),
        }
    }

    /// Checks a READ (`write` false) / WRITE / SETATTR(size) stateid: `None` when it
    /// is not a delegation stateid (the opens table decides), else `Some(result)`:
    /// `Ok` for the holder's live delegation on `fileid`; `BadStateid` (unknown,
    /// another client's, another file's), `OldStateid`, `DelegRevoked`, or `OpenMode` for a
    /// WRITE under a read delegation (RFC 8881 §9.1.2, §10.4: a read delegation does
    /// not permit writing).
    pub fn check_io(
        &self,
        clientid: u64,
        s: &Stateid,
        fileid: u64,
        write: bool,
    ) -> Option<Checked> {
        if !self.owns(s) {
            return None;
        }
        let t = self.lock();
        Some(match Self::find(&t, Some(clientid), s) {
            Err(e) => Err(e),
            Ok(d) if d.fileid != fileid => Err(StateError::BadStateid),
            Ok(d) if d.state == DState::Revoked => Err(StateError::DelegRevoked),
            Ok(d) if write && !d.write => Err(StateError::OpenMode),
            Ok(_) => Ok(()),
        })
    }

    /// Frees every delegation of a client (lease expiry, DESTROY_CLIENTID).
    pub fn purge_client(&self, clientid: u64) {
        let mut t = self.lock();
        let mine: Vec<[u8; 12]> = t
            .by_other
            .iter()
            .filter(|(_, d)| d.clientid == clientid)
            .map(|(o, _)| *o)
            .collect();
        for o in mine {
            remove(&mut t, &o);
        }
        t.cb_up.remove(&clientid);
        t.courtesy.remove(&clientid);
        self.publish(&mut t);
    }

    /// A reactor received a REPLY record (msg_type 1) with this XID: hand it to the
    /// callback thread. Never blocks; a full queue or an oversized record drops it
    /// (counted as unmatched; the callback will time out and be retried).
    pub fn callback_reply(&self, xid: u32, record: &[u8]) {
        self.callback_reply_via(Transport::Tcp, xid, record);
    }

    /// `callback_reply` for a reply that came over `via` (RPC-over-RDMA replies come
    /// from `RdmaServer::take_callback_events`, already matched to a callback we sent
    /// on that connection: RFC 8167 §4.2, R8167-20).
    pub fn callback_reply_via(&self, via: Transport, xid: u32, record: &[u8]) {
        if record.len() > MAX_REPLY_BYTES || self.replies.push((xid, record.to_vec(), via)).is_err()
        {
            self.stats.callback(via, CallbackResult::Unmatched);
            return;
        }
        self.inbox.wake();
    }

    pub(crate) fn pop_reply(&self) -> Option<(u32, Vec<u8>, Transport)> {
        self.replies.pop()
    }

    /// The RDMA transport reports callback `xid` failed: the client answered it with
    /// RDMA_ERROR (R8167-16) or its connection was lost while it was outstanding
    /// (R8167-17). The callback thread then retries a recall after a short backoff on
    /// whatever back channel the client has bound by then. A full queue drops the
    /// report: the callback then times out instead (same retry, later).
    pub fn callback_failed(&self, xid: u32) {
        if self.failures.push(xid).is_ok() {
            self.inbox.wake();
        }
    }

    pub(crate) fn pop_failure(&self) -> Option<u32> {
        self.failures.pop()
    }

    /// Queues a CB_NULL probe (see `nfs4::callback::probe`); `sec`: `None` keeps the
    /// session's callback security, `Some` sets it.
    pub(crate) fn queue_probe(
        &self,
        clientid: u64,
        info: BackChannelInfo,
        sec: Option<Option<super::backchannel::CbSec>>,
    ) {
        self.lock().cb_up.remove(&clientid);
        self.inbox.push(Job::Probe(clientid, info, sec));
    }
}

/// Remembers that `fileid` saw a conflict (no grants for `BLOCK_FOR`), bounded.
fn block(t: &mut Table, fileid: u64, now: Instant, by: Option<u64>) {
    if t.blocked.len() >= MAX_BLOCKED && !t.blocked.contains_key(&fileid) {
        t.blocked
            .retain(|_, (at, _)| now.saturating_duration_since(*at) < BLOCK_FOR);
        if t.blocked.len() >= MAX_BLOCKED {
            return;
        }
    }
    t.blocked.insert(fileid, (now, by));
}

/// A write delegation on `fileid` stopped being live (returned, revoked, purged):
/// its cache hold goes at the next `publish`.
fn ended_write(t: &mut Table, write: bool, fileid: u64, clientid: u64) {
    if write {
        t.live_write = t.live_write.saturating_sub(1);
        t.unhold.push((fileid, clientid));
    }
}

/// Drops a delegation from every index.
fn remove(t: &mut Table, other: &[u8; 12]) {
    let Some(d) = t.by_other.remove(other) else {
        return;
    };
    if d.state != DState::Revoked {
        t.live = t.live.saturating_sub(1);
        ended_write(t, d.write, d.fileid, d.clientid);
    }
    if let Some(v) = t.by_file.get_mut(&d.fileid) {
        v.retain(|o| o != other);
        if v.is_empty() {
            t.by_file.remove(&d.fileid);
            t.fhs.remove(&d.fileid);
        }
    }
    if let Some(n) = t.per_client.get_mut(&d.clientid) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            t.per_client.remove(&d.clientid);
        }
    }
}

#[cfg(test)]
#[path = "delegations_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "delegations_write_tests.rs"]
mod write_tests;

#[path = "delegations_courtesy.rs"]
mod courtesy;
use courtesy::doom;

#[path = "delegations_getattr.rs"]
mod getattr;
#[path = "delegations_times.rs"]
pub mod times;
#[cfg(test)]
pub(crate) use getattr::ASK_AGAIN;
pub use getattr::{AttrVerdict, CB_GETATTR_WAIT};
