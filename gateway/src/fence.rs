//! pNFS fencing at the data servers (RFC 8435 §2.2): the synthetic AUTH_SYS
//! credentials a flexfiles layout carries, and the check every gateway acting as a
//! data server makes of them.
//!
//! The data servers are loosely coupled gateways on the same store with no NFSv4
//! state, so what they accept is derived from the store alone. Each file has a
//! *fence epoch* `e` (0 until first fenced), kept in the store as a small object of
//! the gateway's own (`backend::Cas`, `pnfs-fence/<fileid>`: outside every client's
//! key space, so no client can reset it). A layout's `ffds_user`/`ffds_group` are
//! `H(key, fileid, e) | 2^31` (blake3 keyed with a key derived from the store-wide
//! handle key, so every gateway computes the same ids; bit 31 set: an id no real user
//! is given). A data server that receives a call with such an id accepts it only when
//! it is the file's current pair, and then acts as the file's owner; any other id
//! with bit 31 set is refused (NFS3ERR_ACCES, RFC 8435 §2.2: the storage device
//! denies access to fenced credentials). Ids below 2^31 keep the export's rules.
//!
//! Close-to-open across data servers (README "On one S3 bucket"): the gid of the
//! pair also carries, in the clear, the file's *data generation* `g` (16 bits,
//! `GEN_SHIFT`), which the metadata server moves whenever data written through a
//! layout may have become visible (`state::layouts_gen`), and the MAC covers it:
//! `uid = H(key, fileid, e, g)[0..4] | 2^31`, `gid = 2^31 | g << 15 |
//! H(key, fileid, e, g)[4..6] & 0x7fff`: 46 bits of MAC (31 in the uid, 15 in the
//! gid) where the pair had 62 before. A data server that verifies a pair whose `g` it
//! has not seen for the file drops everything it cached of it (reactor caches, the
//! store's HEAD/attribute cache) before answering (`fs::FileModel::fresh_data`,
//! `cache::Generations::data_seen`). A forged `g` cannot pass the MAC; a verified old
//! `g` (a layout granted before) costs at most one cache drop, never a refusal.
//!
//! Revoking a layout bumps the epoch in the store before the conflicting operation
//! proceeds (`state::layouts`). The window: a data server caches an epoch it read
//! for `WINDOW` (the store's own attribute cache is as long), so a fenced client's
//! call can still land at a data server that read the old epoch less than `WINDOW`
//! before the bump; none lands after `bump` returned + `WINDOW`. The metadata server's
//! own data-server role sees its bumps at once (the cache is written through).
//!
//! A metadata server restart or `[ha]` takeover (issue 27): the ids also depend on a
//! store-wide *boot epoch* the metadata server moves before it grants anything
//! (`fence_boot.rs`); a data server's cached entry of a file is as old as the older of
//! its two reads, so old boots' ids are refused everywhere a window after the move.
//!
//! A restored store (issue 27): every move of either epoch also writes a random nonce
//! that the ids hash with the number (`fence_epoch.rs`), so a number that comes back
//! and is moved again never re-creates an id an earlier run handed out. The MAC input
//! is `fileid, e.n, g, b.n` and, unless both nonces are 0 (objects of before nonces:
//! the earlier builds' ids), `e.nonce, b.nonce`.
//!
//! One per gateway (`open` at start), held by the server beside the file model.

use crate::backend::{Backend, BackendError};
use crate::export::{Caller, Groups};
use crate::fs::{Attr, Status};
use engine::rpc::Cred;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The bit every synthetic id has (no real user's id has it here).
pub const SYNTHETIC: u32 = 1 << 31;
/// Where a synthetic gid carries the data generation (bits 15..31); below it, 15
/// bits of the MAC.
pub const GEN_SHIFT: u32 = 15;
const GID_MAC: u32 = (1 << GEN_SHIFT) - 1;
/// How long a data server trusts an epoch it read: the fencing window.
pub const WINDOW: Duration = Duration::from_secs(2);
/// Epochs cached at most (then the cache starts over: a bound, not an LRU).
const CACHE_MAX: usize = 1 << 16;
/// Conditional-write attempts of one bump before the store is called busy.
const BUMP_TRIES: usize = 16;
/// Reads of an epoch before its store's answers are called unsettled (each lower
/// read kept against a value out of its window is read again: `fence_epoch::take`).
const READ_TRIES: usize = 4;

/// The fence state of this gateway: the id key, the store, cached epochs.
pub struct Fence {
    key: [u8; 32],
    store: Arc<dyn Backend>,
    window: Duration,
    /// SipHash with a per-process random key: an fs file id is an unkeyed hash of
    /// a name a client chose (see `cache.rs`), so an unkeyed hasher could be ground.
    cache: Mutex<std::collections::HashMap<u64, Known>>,
    /// The store-wide boot epoch mixed into every id (`fence_boot.rs`).
    boot: boot::Boot,
    /// Synthetic ids refused here as a data server (`refused`), and when one was
    /// last logged. (Epochs seen going back are counted in `boot`.)
    refused: AtomicU64,
    refused_logged: Mutex<Option<Instant>>,
}

/// At most one log line of refused synthetic ids per this long (a fenced client
/// retries every call; the count is the metric's).
const REFUSED_LOG_EVERY: Duration = Duration::from_secs(10);

/// A file's epoch as read from the store, with its synthetic pair: the pair is
/// computed once per read, not once per call (a keyed blake3 per data-server call was
/// ~600 of a 1 MiB READ's ~9,700 instructions: docs/performance.md, "`bench --pnfs`
/// over 1, 2 and 3 data servers").
/// The pairs of the last two data generations verified at this epoch are kept with
/// it (a writer's older layout and a reader's newer one stay O(1) side by side).
#[derive(Clone, Copy)]
struct Known {
    epoch: Epoch,
    /// The boot epoch the pairs are computed at (`at` is no later than its read).
    boot: Epoch,
    pairs: [Option<(u16, (u32, u32))>; 2],
    at: Instant,
    /// A read of the file's epoch below `epoch` not yet confirmed (`fence_epoch::take`).
    pending: epoch::Pending,
}

impl Known {
    /// The verified pair of generation `gen`, when kept.
    fn pair(&self, gen: u16) -> Option<(u32, u32)> {
        self.pairs
            .iter()
            .flatten()
            .find(|p| p.0 == gen)
            .map(|p| p.1)
    }
}

/// A gateway's fence, when its store has conditional writes (else `None`: fencing
/// off); `handle_key` is the store-wide handle MAC key.
pub fn open(store: Arc<dyn Backend>, handle_key: [u8; 32]) -> Option<Arc<Fence>> {
    store.cas()?;
    Some(Arc::new(Fence::new(store, handle_key, WINDOW)))
}

/// Whether an AUTH_SYS uid is a synthetic one.
pub fn is_synthetic(uid: u32) -> bool {
    uid & SYNTHETIC != 0
}

/// A call's AUTH_SYS (uid, gid) when the uid is synthetic.
pub fn synthetic_ids(cred: &Cred) -> Option<(u32, u32)> {
    match cred {
        Cred::Sys(s) if is_synthetic(s.uid) => Some((s.uid, s.gid)),
        _ => None,
    }
}

/// The data generation a synthetic gid carries (bits 15..31).
pub fn gen_of(gid: u32) -> u16 {
    (gid >> GEN_SHIFT) as u16
}

/// The data generation of a call whose AUTH_SYS uid is synthetic, read from its gid
/// in the clear (not verified: a reactor's cache asks only whether it is one a
/// worker already verified and dropped the file's caches for).
#[inline]
pub fn synthetic_gen(cred: &Cred) -> Option<u16> {
    match cred {
        Cred::Sys(s) if is_synthetic(s.uid) => Some(gen_of(s.gid)),
        _ => None,
    }
}

fn name(fileid: u64) -> String {
    format!("pnfs-fence/{fileid:016x}")
}

impl Fence {
    pub fn new(store: Arc<dyn Backend>, handle_key: [u8; 32], window: Duration) -> Fence {
        Fence {
            key: blake3::derive_key("nfsgw pnfs fence ids v2", &handle_key),
            store,
            window,
            cache: Mutex::new(std::collections::HashMap::new()),
            boot: boot::Boot::default(),
            refused: AtomicU64::new(0),
            refused_logged: Mutex::new(None),
        }
    }

    /// Synthetic ids this gateway refused as a data server
    /// (`nfsgw_pnfs_fence_refused_total`).
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Epoch values (a file's or the boot epoch) this gateway saw go back in the
    /// store (`nfsgw_pnfs_fence_epoch_backwards_total`, `fence_epoch.rs`).
    pub fn backwards(&self) -> u64 {
        self.boot.backwards.count()
    }

    /// Counts a refused synthetic id, and logs it at most once per
    /// `REFUSED_LOG_EVERY`: a fenced layout (revoked, or of before a metadata
    /// server's start) still in use, a forged id, or a gateway on the store whose
    /// ids are computed otherwise (another build, or another handle key).
    fn refuse(&self, fileid: u64, uid: u32) {
        let n = self.refused.fetch_add(1, Ordering::Relaxed) + 1;
        let mut last = self
            .refused_logged
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if last.is_none_or(|t| t.elapsed() >= REFUSED_LOG_EVERY) {
            *last = Some(Instant::now());
            tracing::warn!(
                fileid,
                uid,
                refused_total = n,
                "pNFS fence: a synthetic id refused (NFS3ERR_ACCES): a fenced layout still in use (revoked, or granted before a metadata server's start), a forged id, or a gateway computing ids otherwise (another build or handle key on the store); logged at most every 10 s"
            );
        }
    }

    /// How long a data server may still trust an epoch it read: a fenced client's
    /// call can land until a bump returned + this (the module's promise).
    pub fn window(&self) -> Duration {
        self.window
    }

    /// The synthetic (uid, gid) of `fileid` at `epoch` and data generation `gen`, at
    /// the boot epoch this gateway last saw (a metadata server: the one it set).
    pub fn ids(&self, fileid: u64, epoch: Epoch, gen: u16) -> (u32, u32) {
        let b = self.boot.last().map_or(Epoch::default(), |(b, _)| b);
        self.ids_at(b, fileid, epoch, gen)
    }

    /// `ids` at boot epoch `boot` (`fence_boot.rs`). The nonces are hashed unless both
    /// are 0, so objects of before nonces keep the earlier builds' ids (a data server
    /// upgraded before the metadata server takes its layouts until that one moves an
    /// epoch); fixed lengths, so the two forms cannot collide.
    fn ids_at(&self, boot: Epoch, fileid: u64, epoch: Epoch, gen: u16) -> (u32, u32) {
        let mut m = [0u8; 42];
        m[..8].copy_from_slice(&fileid.to_le_bytes());
        m[8..16].copy_from_slice(&epoch.n.to_le_bytes());
        m[16..18].copy_from_slice(&gen.to_le_bytes());
        m[18..26].copy_from_slice(&boot.n.to_le_bytes());
        let len = if (epoch.nonce, boot.nonce) == (0, 0) {
            26
        } else {
            m[26..34].copy_from_slice(&epoch.nonce.to_le_bytes());
            m[34..].copy_from_slice(&boot.nonce.to_le_bytes());
            42
        };
        let h = blake3::keyed_hash(&self.key, &m[..len]);
        let b = h.as_bytes();
        let word = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let gid = SYNTHETIC | u32::from(gen) << GEN_SHIFT | (word(4) & GID_MAC);
        (word(0) | SYNTHETIC, gid)
    }

    fn cas(&self) -> &dyn crate::backend::Cas {
        self.store.cas().expect("checked at install")
    }

    /// Caches `epoch`, read by a store call that began at `asked`: the window runs
    /// from then, not from the answer, so a read that began before a bump and
    /// returned the old epoch after it is trusted no later than `asked + window`,
    /// before `bump` returned + window (the module's promise). A lower value (or the
    /// same number with another nonce) never replaces the cached one on one read: only
    /// once a second read confirms it (`fence_epoch::take`: the store went back,
    /// counted and logged); until then the cached value is kept, and `None` says it
    /// is out of its window (read again). The verified pairs of the same epoch are
    /// kept (the generations stay valid). `boot` is the boot epoch and when it was
    /// read: the entry is trusted no longer than either read (`fence_boot.rs`).
    fn remember(
        &self,
        fileid: u64,
        epoch: Epoch,
        boot: (Epoch, Instant),
        asked: Instant,
    ) -> Option<Known> {
        let (b, b_at) = boot;
        let mut known = Known {
            epoch,
            boot: b,
            pairs: [None; 2],
            at: asked.min(b_at),
            pending: None,
        };
        let mut c = self.cache_lock();
        if let Some(k) = c.get_mut(&fileid) {
            let fresh = k.at.elapsed() < self.window;
            if k.boot == b {
                match epoch::take(k.epoch, &mut k.pending, epoch, asked) {
                    epoch::Take::Keep => return fresh.then_some(*k),
                    epoch::Take::Backwards => {
                        self.boot.backwards.saw("file", fileid, k.epoch, epoch);
                    }
                    epoch::Take::Replace if k.epoch == epoch => known.pairs = k.pairs,
                    epoch::Take::Replace => {}
                }
            } else if !self.boot_newer(k.boot, b) {
                // Read at a boot epoch the boot's cache no longer holds (a slow load
                // that began before it moved, or followed a restore): the entry's
                // boot stays; the boot's own cache judges its going back
                // (`Boot::remember`, `fence_epoch::take`).
                return fresh.then_some(*k);
            }
        }
        if c.len() >= CACHE_MAX {
            c.clear();
        }
        c.insert(fileid, known);
        Some(known)
    }

    /// Whether boot epoch `b`, a load read at, may replace `cached` in a file's
    /// entry: a higher number, or the value the boot's cache holds now (after
    /// `take` let it follow a restore). Never a value it has left, even one of the
    /// same number (the nonce tells a restored boot from the one moved since).
    fn boot_newer(&self, cached: Epoch, b: Epoch) -> bool {
        b.n > cached.n || self.boot.last().is_some_and(|(now, _)| now == b)
    }

    /// Caches `epoch`, written by a successful conditional write whose read began at
    /// `asked`, at boot epoch `boot`: the store's current value, replacing whatever
    /// is cached (a concurrent load may have cached a higher value of before a
    /// restore); one below the cached value is counted as gone back.
    fn wrote(&self, fileid: u64, epoch: Epoch, boot: (Epoch, Instant), asked: Instant) {
        let mut c = self.cache_lock();
        if let Some(k) = c.get(&fileid) {
            if k.boot == boot.0 && epoch::wrote_back(k.epoch, epoch) {
                self.boot.backwards.saw("file", fileid, k.epoch, epoch);
            }
        }
        if c.len() >= CACHE_MAX {
            c.clear();
        }
        let known = Known {
            epoch,
            boot: boot.0,
            pairs: [None; 2],
            at: asked.min(boot.1),
            pending: None,
        };
        c.insert(fileid, known);
    }

    /// Keeps `pair` as the verified pair of `gen` at `epoch` (when that is still the
    /// epoch cached), the most recent first.
    fn keep_pair(&self, fileid: u64, at: &Known, gen: u16, pair: (u32, u32)) {
        let mut c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = c.get_mut(&fileid) {
            if (k.boot, k.epoch) == (at.boot, at.epoch) && k.pair(gen).is_none() {
                k.pairs = [Some((gen, pair)), k.pairs[0]];
            }
        }
    }

    /// What is cached of the file, read less than the window ago, without I/O.
    fn known(&self, fileid: u64) -> Option<Known> {
        let c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let k = c.get(&fileid)?;
        (k.at.elapsed() < self.window).then_some(*k)
    }

    /// The epoch's number cached less than the window ago, without I/O.
    pub fn cached(&self, fileid: u64) -> Option<u64> {
        self.known(fileid).map(|k| k.epoch.n)
    }

    /// Forgets every file's entry (the boot epoch moved here: `fence_boot.rs`).
    fn forget_all(&self) {
        self.cache_lock().clear();
    }

    fn cache_lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<u64, Known>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads the file's epoch (and the boot epoch, when out of its window), again
    /// while a lower read is kept against a cached value out of its window (the next
    /// read begins after it returned, so it can confirm it: `fence_epoch::take`).
    fn load(&self, fileid: u64) -> Result<Known, BackendError> {
        for _ in 0..READ_TRIES {
            let boot = self.boot.current(self.cas(), self.window)?;
            let asked = Instant::now();
            let e = match self.cas().cas_get(&name(fileid))? {
                None => Epoch::default(),
                Some((data, _)) => epoch::parse_file(&data)?,
            };
            if let Some(k) = self.remember(fileid, e, boot, asked) {
                return Ok(k);
            }
        }
        Err(BackendError::Retryable(
            "pnfs fence epoch: the store's reads disagree".into(),
        ))
    }

    /// The file's epoch as the store has it now (cached afterwards): what LAYOUTGET
    /// computes a layout's ids at (`grant_ids`).
    pub fn read(&self, fileid: u64) -> Result<Epoch, BackendError> {
        self.load(fileid).map(|k| k.epoch)
    }

    /// The number of the epoch a data server checks against: cached within the
    /// window, else read.
    pub fn epoch(&self, fileid: u64) -> Result<u64, BackendError> {
        self.current(fileid).map(|k| k.epoch.n)
    }

    /// The file's current epoch and pair: cached within the window, else read.
    fn current(&self, fileid: u64) -> Result<Known, BackendError> {
        match self.known(fileid) {
            Some(k) => Ok(k),
            None => self.load(fileid),
        }
    }

    /// Moves the file's epoch on in the store (every synthetic id issued for it
    /// before is refused from then on, after the window): the next number with a fresh
    /// nonce (`fence_epoch.rs`: never a value an earlier run had, even once the
    /// store went back); the new number.
    pub fn bump(&self, fileid: u64) -> Result<u64, BackendError> {
        let n = name(fileid);
        for _ in 0..BUMP_TRIES {
            let asked = Instant::now();
            let (e, ver) = match self.cas().cas_get(&n)? {
                None => (Epoch::default(), None),
                Some((data, v)) => (epoch::parse_file(&data)?, Some(v)),
            };
            let next = e.next()?;
            match self
                .cas()
                .cas_put(&n, epoch::file_text(next).as_bytes(), ver.as_deref())
            {
                Ok(_) => {
                    // Written through at the boot epoch as known within the window;
                    // without one, the file's entry goes (the next check reads both).
                    match self.boot.current(self.cas(), self.window) {
                        Ok(boot) => self.wrote(fileid, next, boot, asked),
                        Err(_) => {
                            self.cache_lock().remove(&fileid);
                        }
                    }
                    return Ok(next.n);
                }
                Err(BackendError::AlreadyExists) => continue,
                Err(err) => return Err(err),
            }
        }
        Err(BackendError::Retryable(
            "pnfs fence epoch: contended".into(),
        ))
    }

    /// Whether (uid, gid) is a synthetic pair of the file at `epoch` (of the data
    /// generation its gid names).
    pub fn matches(&self, fileid: u64, epoch: Epoch, uid: u32, gid: u32) -> bool {
        self.ids(fileid, epoch, gen_of(gid)) == (uid, gid)
    }
}

/// The verdict on a caller whose AUTH_SYS uid is synthetic, for the file `attr`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A real user's id (or fencing off): the export's rules, unchanged.
    Real,
    /// The file's current synthetic pair: act as the file's owner.
    Owner(Caller),
    /// A fenced (or forged) synthetic id.
    Refused,
}

/// The data servers' check (NFSv3 calls from a flexfiles client): `cred_ids` are the
/// call's synthetic AUTH_SYS (uid, gid) before squashing (`synthetic_ids`; `None`: a
/// real user), `admitted` the export's caller. `epoch`
/// gives the file's epoch (cached, or read from the store on a worker).
pub fn judge(
    f: &Fence,
    cred_ids: Option<(u32, u32)>,
    admitted: &Caller,
    attr: &Attr,
    epoch: Epoch,
) -> Verdict {
    verdict(cred_ids, admitted, attr, |(u, g)| {
        f.matches(attr.fileid, epoch, u, g)
    })
}

/// `judge` with the check of the pair (`valid`, asked only when the call's ids are
/// synthetic).
fn verdict(
    cred_ids: Option<(u32, u32)>,
    admitted: &Caller,
    attr: &Attr,
    valid: impl FnOnce((u32, u32)) -> bool,
) -> Verdict {
    let Some(ids) = cred_ids else {
        return Verdict::Real;
    };
    if !valid(ids) {
        return Verdict::Refused;
    }
    Verdict::Owner(Caller {
        uid: attr.uid,
        gid: attr.gid,
        gids: Groups::NONE,
        writable: admitted.writable,
    })
}

/// `judge` on a worker: reads the epoch from the store when it is not cached (a
/// store error is NFS3ERR_JUKEBOX's `Status`); a refusal is `Status::Acces`. With the
/// caller, the data generation a layout's pair carries once verified (`None`: a real
/// user's call): the caller drops the file's caches when it is new to this gateway
/// (`fs::FileModel::fresh_data`) before it answers. A generation not kept with the
/// epoch costs one MAC here, then it is kept.
pub fn admit_file(
    fence: Option<&Fence>,
    cred: &Cred,
    admitted: Caller,
    attr: &Attr,
) -> Result<(Caller, Option<u16>), Status> {
    let (Some(f), Some(ids)) = (fence, synthetic_ids(cred)) else {
        return Ok((admitted, None));
    };
    let known = f.current(attr.fileid).map_err(|e| {
        tracing::warn!(error = %e, "pNFS fence: cannot read a file's epoch");
        Status::Jukebox
    })?;
    let gen = gen_of(ids.1);
    let valid = |ids: (u32, u32)| match known.pair(gen) {
        Some(p) => p == ids,
        None => {
            let p = f.ids_at(known.boot, attr.fileid, known.epoch, gen);
            if p == ids {
                f.keep_pair(attr.fileid, &known, gen, p);
            }
            p == ids
        }
    };
    match verdict(Some(ids), &admitted, attr, valid) {
        Verdict::Real => Ok((admitted, None)),
        Verdict::Owner(c) => Ok((c, Some(gen))),
        Verdict::Refused => {
            f.refuse(attr.fileid, ids.0);
            Err(Status::Acces)
        }
    }
}

/// `judge` on a reactor, without I/O: `None` when the call must go to a worker (a
/// synthetic id whose file's epoch is not cached, or whose data generation has no
/// pair kept with it); a refusal is `Some(None)`. Whether the generation's caches were
/// dropped here is the caller's check (`cache::Generations::data_seen`).
pub fn admit_cached(
    fence: Option<&Fence>,
    cred: &Cred,
    admitted: Caller,
    attr: &Attr,
) -> Option<Option<Caller>> {
    let (Some(f), Some(ids)) = (fence, synthetic_ids(cred)) else {
        return Some(Some(admitted));
    };
    let known = f.known(attr.fileid)?;
    let pair = known.pair(gen_of(ids.1))?;
    Some(
        match verdict(Some(ids), &admitted, attr, |ids| pair == ids) {
            Verdict::Real => Some(admitted),
            Verdict::Owner(c) => Some(c),
            Verdict::Refused => None,
        },
    )
}

#[path = "fence_boot.rs"]
mod boot;
#[path = "fence_epoch.rs"]
mod epoch;
/// The store object of the boot epoch (`fence_boot.rs`).
pub use boot::NAME as BOOT_OBJECT;
pub use epoch::Epoch;

#[cfg(test)]
#[path = "fence_tests.rs"]
mod tests;
