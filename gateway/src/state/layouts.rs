//! pNFS layouts (RFC 8881 §12) of the flexible files type (RFC 8435) this gateway
//! grants as a metadata server: which data servers exist (`Devices`, from `[pnfs]`),
//! where a file's data goes (placement by file id), and per client the layouts held
//! and their layout stateids (kind `Layout`, §12.5.3).
//!
//! Every layout covers the whole file (offset 0, length NFS4_UINT64_MAX): the data
//! servers are loosely coupled NFSv3 servers on the same store (RFC 8435 §2.1) that
//! any byte of any file can go through, so nothing is gained by cutting ranges. A
//! client holds at most one layout stateid per file, with a READ and an RW iomode
//! bit. The table is bounded (`MAX_LAYOUTS`, `MAX_PER_CLIENT`) and a client's layouts
//! go with the client (lease expiry, DESTROY_CLIENTID: `State::purge`).
//!
//! Recalls (RFC 8881 §12.5.5, §20.3): an operation that changes what a layout maps —
//! a truncate, REMOVE, RENAME over the file, from any client, NFSv3 included — asks
//! `break_conflicts`, which marks the other clients' layouts of the file recalled (the
//! layout stateid's seqid advances, as the client expects of a CB_LAYOUTRECALL,
//! §12.5.3) and queues them for the callback thread (`recall::RecallTable`, which
//! sends CB_LAYOUTRECALL); the operation is answered NFS4ERR_DELAY / NFS3ERR_JUKEBOX
//! until they are returned (LAYOUTRETURN, or the client's NFS4ERR_NOMATCHING_LAYOUT)
//! or revoked a lease after the recall began (§12.5.5.2). While a file's recall runs,
//! LAYOUTGET of it is NFS4ERR_RECALLCONFLICT / NFS4ERR_LAYOUTTRYLATER (§12.5.5.2.1).
//! A revoked layout's file is fenced at the data servers before the layout goes
//! (its fence epoch moves on in the store: `crate::fence`, `recall::fence_file`).
//!
//! Data server failure (README "Scaling out with pNFS"): the table keeps each data
//! server's health (`health`, fed by the probe threads of `server::ds_probe`) and each
//! layout remembers the data servers it named, so that a server going down recalls
//! exactly the layouts that name it (`recall_server`), while placement leaves it out
//! (`Devices::placement_up`) until a probe answers again.
//!
//! One mutex; never held across file I/O or another table's lock.

use super::error::StateError;
use super::opens::stateids::{self, Kind};
use super::stateid::Stateid;
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Layouts kept in all, and per client (a LAYOUTGET past either gets
/// NFS4ERR_LAYOUTTRYLATER: `StateError::Resource` here).
pub const MAX_LAYOUTS: usize = 1 << 16;
pub const MAX_PER_CLIENT: usize = 4096;

/// One data server: a gateway on the same store serving NFSv3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataServer {
    pub addr: SocketAddr,
    /// Reached over RPC-over-RDMA (netid "rdma") rather than TCP.
    pub rdma: bool,
    /// Where its health is probed (an NFSv3 NULL over TCP); `None`: never probed,
    /// always taken as up (an RDMA data server with no `probe_address`).
    pub probe: Option<SocketAddr>,
}

impl DataServer {
    /// na_r_netid (RFC 5665 §4): "tcp"/"rdma", "tcp6"/"rdma6" for IPv6.
    pub fn netid(&self) -> &'static str {
        match (self.rdma, self.addr.is_ipv6()) {
            (false, false) => "tcp",
            (false, true) => "tcp6",
            (true, false) => "rdma",
            (true, true) => "rdma6",
        }
    }

    /// na_r_addr, the universal address (RFC 5665 §5.2.3.3/§5.2.3.4): the IP
    /// address then the port's two bytes, dot-separated.
    pub fn uaddr(&self) -> String {
        let p = self.addr.port();
        format!("{}.{}.{}", self.addr.ip(), p >> 8, p & 0xff)
    }

    /// deviceid4: a hash of the address and transport, so a data server keeps its
    /// id across restarts and reorderings of the list.
    pub fn device_id(&self) -> [u8; 16] {
        self.device_id_at(0)
    }

    /// The device id of generation `gen`: a data server declared down has its id
    /// deleted (CB_NOTIFY_DEVICEID, RFC 8881 §20.12: a deleted id is never used again
    /// for the client), so it comes back under the next generation's
    /// (`layouts_notify.rs`). Generation 0 is `device_id`.
    pub fn device_id_at(&self, gen: u32) -> [u8; 16] {
        let text = match gen {
            0 => format!("nfsgw-ds {} {}", self.netid(), self.addr),
            g => format!("nfsgw-ds {} {} #{g}", self.netid(), self.addr),
        };
        let h = blake3::hash(text.as_bytes());
        let mut id = [0u8; 16];
        id.copy_from_slice(&h.as_bytes()[..16]);
        id
    }
}

/// How the data servers' health is probed (`pnfs.probe_ms`, `probe_timeout_ms`,
/// `probe_failures`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// Between probes of one server; zero: no probing (every server always up).
    pub every: Duration,
    /// One probe's connect, send and reply, each at most this long.
    pub timeout: Duration,
    /// Failed probes in a row that mark a server down.
    pub failures: u32,
}

impl Default for Probe {
    /// Off (what a table built without `[pnfs]`'s keys gets: the tests').
    fn default() -> Probe {
        Probe {
            every: Duration::ZERO,
            timeout: Duration::from_millis(500),
            failures: 3,
        }
    }
}

/// The data servers and layout parameters of `[pnfs]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Devices {
    pub servers: Vec<DataServer>,
    pub stripe_unit: u32,
    pub rsize: u32,
    pub wsize: u32,
    pub read_mirrors: u32,
    /// Striped layouts: for whom, how wide (`layouts_stripe.rs`).
    pub stripe: Stripe,
    pub probe: Probe,
}

impl Devices {
    /// The data server a device id names.
    pub fn find(&self, id: &[u8; 16]) -> Option<&DataServer> {
        self.servers.iter().find(|d| d.device_id() == *id)
    }

    /// The index of the data server a device id names.
    pub fn index_of(&self, id: &[u8; 16]) -> Option<usize> {
        self.servers.iter().position(|d| d.device_id() == *id)
    }

    /// The data servers a layout of `fileid` names with every server up
    /// (`placement_up`).
    pub fn placement(&self, fileid: u64, write: bool) -> impl Iterator<Item = &DataServer> {
        self.placement_up(fileid, write, |_| true)
            .into_iter()
            .map(move |i| &self.servers[i])
    }

    /// The indexes of the data servers a layout of `fileid` names, one per mirror,
    /// among those `up` accepts: a write layout one (RFC 8435 §8.1: a client writes
    /// every mirror, so one mirror never makes it write twice), a read layout up to
    /// `read_mirrors` distinct ones. The first is chosen by a hash of the file id, so
    /// files spread over the data servers and every client writes a file through the
    /// same one; a server that is down is stepped over to the next one up, so only
    /// its files move while it is down. Empty when none is up.
    pub fn placement_up(&self, fileid: u64, write: bool, up: impl Fn(usize) -> bool) -> Vec<usize> {
        let want = if write { 1 } else { self.read_mirrors as usize };
        let mut ring = self.ring(fileid, up);
        ring.truncate(want);
        ring
    }

    /// The indexes of the data servers that are up, in placement order: from the one a
    /// hash of the file id picks, onwards round the list.
    fn ring(&self, fileid: u64, up: impl Fn(usize) -> bool) -> Vec<usize> {
        let n = self.servers.len();
        let h = blake3::hash(&fileid.to_le_bytes());
        let first = (u64::from_le_bytes(h.as_bytes()[..8].try_into().expect("8 bytes"))
            % n.max(1) as u64) as usize;
        (0..n).map(|k| (first + k) % n).filter(|i| up(*i)).collect()
    }
}

/// The data servers of `idx` as a layout's mask (one bit per index; at most
/// `config::MAX_DATA_SERVERS` = 64 of them).
pub fn mask_of(idx: &[usize]) -> u64 {
    idx.iter().filter(|i| **i < 64).fold(0, |m, i| m | 1 << i)
}

/// layoutiomode4 (RFC 8881 §3.3.20).
pub const IOMODE_READ: u32 = 1;
pub const IOMODE_RW: u32 = 2;
pub const IOMODE_ANY: u32 = 3;

#[derive(Debug, Clone)]
struct Layout {
    clientid: u64,
    fileid: u64,
    fsid: u64,
    seqid: u32,
    read: bool,
    rw: bool,
    /// The file's handle as the client has it (CB_LAYOUTRECALL's lor_fh).
    fh: Box<[u8]>,
    /// When its recall began; revoked a lease later if not returned.
    recalled: Option<Instant>,
    /// Its recall began because a data server it named went down (`recall_server`)
    /// and no conflicting operation has asked for it since: nothing waits on its
    /// return, so its holder's next LAYOUTGET lets it go (`check_recalling`).
    down_only: bool,
    /// The data servers its grants named (`mask_of`): recalled if one goes down.
    servers: u64,
    /// The I/O totals last reported under it, per data server index
    /// (`layouts_stats.rs`: only the increase is counted).
    io_seen: Vec<(u8, health::Io)>,
    /// How many LAYOUTRETURNs of it are under way (`layouts_stats.rs` `closing_io`):
    /// its LAYOUTSTATS are not counted while any is (the returns' reports count them).
    /// A count, not a flag: with two returns in flight, the first one's end must not
    /// reopen counting under the second's older snapshot.
    io_closing: u32,
}

impl Layout {
    fn stateid(&self, other: [u8; 12]) -> Stateid {
        Stateid {
            seqid: self.seqid,
            other,
        }
    }
}

#[derive(Default)]
struct Table {
    by_other: HashMap<[u8; 12], Layout>,
    by_file: HashMap<(u64, u64), [u8; 12]>,
    per_client: HashMap<u64, usize>,
    /// The layouts of each file, all clients (what a conflict recalls).
    holders: HashMap<u64, Vec<[u8; 12]>>,
    /// Files whose layouts are being recalled, since when (LAYOUTGET waits).
    recalling: HashMap<u64, Instant>,
    /// Files a layout recalled for a down data server was let go of unfenced
    /// (`release_down`), since when: a conflict within the lease fences the file
    /// before it proceeds (`break_conflicts`), as if that layout had stayed.
    released: HashMap<u64, Instant>,
    /// Files whose fence epoch moved, and until when a fenced client's call may still
    /// land at a data server that read the old epoch (the bump + `Fence::window`,
    /// `crate::fence`): a conflicting operation waits that out (`break_conflicts`).
    fenced: HashMap<u64, Instant>,
    /// Files whose layouts a client purge dropped and whose epoch is not moved yet
    /// (`purge_client`): conflicting operations wait, as for `fenced`.
    fencing: HashSet<u64>,
    /// Recalls begun and not yet taken by the callback thread.
    queued: VecDeque<[u8; 12]>,
    /// Clients that asked GETDEVICEINFO for device deletions, by (client, data
    /// server index): the device id generation they were told of (`layouts_notify.rs`).
    watches: HashMap<(u64, usize), u32>,
    /// CB_NOTIFY_DEVICEID deletions to send, by a key of their own.
    notices: HashMap<[u8; 12], notify::Notice>,
    notice_seq: u32,
}

impl Table {
    /// Removes layout `other`; false when the table had no such layout (another
    /// path revoked or returned it first).
    fn remove(&mut self, other: &[u8; 12]) -> bool {
        let Some(l) = self.by_other.remove(other) else {
            return false;
        };
        self.by_file.remove(&(l.clientid, l.fileid));
        if let Some(v) = self.holders.get_mut(&l.fileid) {
            v.retain(|o| o != other);
            if v.is_empty() {
                self.holders.remove(&l.fileid);
            }
        }
        if let Some(n) = self.per_client.get_mut(&l.clientid) {
            *n -= 1;
            if *n == 0 {
                self.per_client.remove(&l.clientid);
            }
        }
        true
    }
}

/// The file a layout operation is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayoutFile {
    pub clientid: u64,
    pub fileid: u64,
    pub fsid: u64,
    /// A digest of the client's owner (`owner_digest`), which a new layout stateid
    /// is bound to (`layouts_reclaim.rs`); 0 where no stateid is made.
    pub owner: u64,
}

/// The layout counters (`nfsgw_pnfs_layouts_total{event}`,
/// `nfsgw_pnfs_layoutget_errors_total`; docs/stats.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LayoutCounts {
    /// Layouts held now (the `nfsgw_pnfs_layouts` gauge).
    pub held: u64,
    /// LAYOUTGETs that granted a layout.
    pub granted: u64,
    /// Layouts whose recall began (a conflicting operation).
    pub recalled: u64,
    /// Layouts given back whole: LAYOUTRETURN, or the client's
    /// NFS4ERR_NOMATCHING_LAYOUT answer to a recall.
    pub returned: u64,
    /// Recalled layouts not returned within the lease, revoked.
    pub revoked: u64,
    /// LAYOUTGETs answered with an error (NFS4ERR_LAYOUTTRYLATER included).
    pub get_errors: u64,
    /// Layouts recalled because a data server they named went down.
    pub recalled_ds_down: u64,
    /// Of those, layouts let go unreturned when their holder asked for a new layout
    /// of the file (`Layouts::release_down`).
    pub released_ds_down: u64,
    /// Client reports (LAYOUTERROR, ff_ioerr4, LAYOUTSTATS, ff_iostats4) naming no
    /// configured device.
    pub unknown_device_reports: u64,
    /// I/O reports (LAYOUTSTATS, ff_iostats4) ignored for a count of 2^63 or more.
    pub stats_ignored: u64,
    /// Synthetic ids this gateway refused as a data server (`Fence::refused`).
    pub fence_refused: u64,
    /// Fence epoch values this gateway saw go back in the store (`Fence::backwards`).
    pub fence_backwards: u64,
}

#[derive(Default)]
struct Counters {
    granted: AtomicU64,
    recalled: AtomicU64,
    returned: AtomicU64,
    revoked: AtomicU64,
    get_errors: AtomicU64,
    recalled_ds_down: AtomicU64,
    released_ds_down: AtomicU64,
    unknown_device_reports: AtomicU64,
    stats_ignored: AtomicU64,
}

fn bump(c: &AtomicU64, n: usize) {
    c.fetch_add(n as u64, Ordering::Relaxed);
}

/// The layouts of every client, and the devices they name (`None`: pNFS is off).
#[derive(Default)]
pub struct Layouts {
    devices: Option<Devices>,
    /// Where revoked layouts' files are fenced (`crate::fence`; `None`: off).
    fence: Option<std::sync::Arc<crate::fence::Fence>>,
    table: Mutex<Table>,
    /// Layouts held, and files whose recall runs (read without the lock: a conflict
    /// check is free while neither exists).
    held: AtomicUsize,
    marked: AtomicUsize,
    counters: Counters,
    /// The data servers' health, by index in `devices` (empty when pNFS is off).
    health: health::Health,
    /// The key layout stateids are bound to their client and file under, to be
    /// reclaimed after a restart or a takeover (`layouts_reclaim.rs`; `None`: not
    /// bound). Set once at start, or under `[ha]` at each takeover (`crate::ha`).
    key: std::sync::RwLock<Option<[u8; 32]>>,
    /// The files' data generations layouts carry to the data servers (`gen`).
    data_gens: gen::DataGens,
    /// Shut from a start or takeover until earlier boots' ids are fenced
    /// (`layouts_boot.rs`).
    boot: boot::BootGate,
}

impl Layouts {
    pub fn new(devices: Option<Devices>) -> Layouts {
        let health = match &devices {
            Some(d) => health::Health::new(d.servers.len(), d.probe.failures),
            None => health::Health::default(),
        };
        Layouts {
            devices,
            health,
            ..Default::default()
        }
    }

    /// The data servers' health (`layouts_health.rs`).
    pub fn health(&self) -> &health::Health {
        &self.health
    }

    /// Fences revoked layouts' files through `fence` from now on.
    pub fn set_fence(&mut self, fence: Option<std::sync::Arc<crate::fence::Fence>>) {
        self.fence = fence;
    }

    /// The fence layouts' data server credentials come from (`None`: off).
    pub fn fence(&self) -> Option<&crate::fence::Fence> {
        self.fence.as_deref()
    }

    /// The data generation (`layouts_gen.rs`) a layout of `fileid` granted now
    /// carries, `attrs` the file's attributes here now, `write` whether it is RW.
    /// An RW grant's `Pending` must live until `grant_on` recorded (or refused) it.
    pub fn data_gen(
        &self,
        fileid: u64,
        attrs: &crate::fs::Attr,
        write: bool,
    ) -> (u16, Option<DataGenPending<'_>>) {
        let rw_held = {
            let t = self.lock();
            t.holders
                .get(&fileid)
                .is_some_and(|v| v.iter().any(|o| t.by_other.get(o).is_some_and(|l| l.rw)))
        };
        self.data_gens
            .for_grant(fileid, gen::attrs_digest(attrs), rw_held, write)
    }

    /// The data servers, when this gateway is a pNFS metadata server.
    pub fn devices(&self) -> Option<&Devices> {
        self.devices.as_ref()
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // A panic while holding it leaves only whole entries (each change is one
        // insert or remove): the table stays usable.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `s` is a layout stateid (by its kind byte; it may be unknown).
    pub fn owns(s: &Stateid) -> bool {
        Kind::of(&s.other) == Some(Kind::Layout)
    }

    /// `grant_on` naming no data server (the tests of stateids and returns).
    #[cfg(test)]
    pub fn grant(
        &self,
        f: LayoutFile,
        fh: &[u8],
        presented: Option<&Stateid>,
        iomode: u32,
        lease: Duration,
    ) -> Result<Stateid, StateError> {
        self.grant_on(f, fh, presented, iomode, lease, 0)
    }

    /// LAYOUTGET's state (RFC 8881 §18.43.3, §12.5.3): grants `iomode` on `f`
    /// through the data servers of `servers` (`mask_of` the placement).
    /// `presented` is the layout stateid the client sent, or `None` when it sent an
    /// open, lock or delegation stateid (checked by the caller): then the client's
    /// layout stateid of the file is reused, or a new one made. `fh` is the file's
    /// handle (for a recall). Returns the layout stateid with its seqid advanced.
    /// While the file's layouts are being recalled (for at most `lease`): the
    /// recalled client gets NFS4ERR_RECALLCONFLICT, others NFS4ERR_LAYOUTTRYLATER
    /// (RFC 8881 §12.5.5.2.1; `RecallConflict` and `Resource` here). The holder of a
    /// layout recalled only because a data server it named went down is let go
    /// instead (`release_down`): that layout is revoked at once, unfenced, and a
    /// LAYOUTGET that presented its stateid is NFS4ERR_BAD_STATEID (`BadStateid`:
    /// the client drops it and asks again with its open stateid). A data server of
    /// `servers` that went down since the placement was made: `Resource` (the
    /// client asks again and gets a placement without it; checked under the lock
    /// `recall_server` scans under, so no layout naming a down server escapes both).
    pub fn grant_on(
        &self,
        f: LayoutFile,
        fh: &[u8],
        presented: Option<&Stateid>,
        iomode: u32,
        lease: Duration,
        servers: u64,
    ) -> Result<Stateid, StateError> {
        // A start or takeover whose earlier boots' ids may still be trusted by a data
        // server: it would refuse the new ids too (`layouts_boot.rs`).
        if !self.boot_open() {
            return Err(StateError::Resource);
        }
        let mut t = self.lock();
        if let Some(old) = Self::check_recalling(&t, f, lease)? {
            self.release_down(&mut t, &old);
            if presented.is_some_and(|s| s.other == old) {
                return Err(StateError::BadStateid);
            }
        }
        if servers & !self.health.up_mask() != 0 {
            return Err(StateError::Resource);
        }
        let other = match presented {
            Some(s) => {
                Self::find(&t, f, s)?;
                s.other
            }
            None => match t.by_file.get(&(f.clientid, f.fileid)) {
                Some(o) => *o,
                None => self.insert(&mut t, f, fh)?,
            },
        };
        let l = t.by_other.get_mut(&other).ok_or(StateError::Inconsistent)?;
        l.seqid = stateids::next_seqid(l.seqid);
        l.servers |= servers;
        match iomode {
            IOMODE_RW => l.rw = true,
            _ => l.read = true,
        }
        let sid = l.stateid(other);
        self.publish(&t);
        bump(&self.counters.granted, 1);
        Ok(sid)
    }

    /// LAYOUTGET while `f`'s layouts are being recalled (§12.5.5.2.1): the client
    /// whose layout is recalled must return it first (RECALLCONFLICT), others wait.
    /// The client's own layout of the file being recalled for a conflict is
    /// RECALLCONFLICT whatever the file's state: it must be returned (or revoked,
    /// fenced) before another is granted. Its own layout recalled only because a
    /// data server went down, while no conflict recall of the file runs: `Some` of
    /// it, to be released (`release_down`) — the recall protects nothing then.
    fn check_recalling(
        t: &Table,
        f: LayoutFile,
        lease: Duration,
    ) -> Result<Option<[u8; 12]>, StateError> {
        // A file being fenced, or within its fence window, is as one being recalled:
        // a layout granted now would be recalled by the waiting conflict again, a
        // lease of DELAY each time (§12.5.5.2.1 lets the server refuse meanwhile).
        let conflict = t
            .recalling
            .get(&f.fileid)
            .is_some_and(|since| since.elapsed() < lease)
            || t.fencing.contains(&f.fileid)
            || t.fenced.get(&f.fileid).is_some_and(|u| Instant::now() < *u);
        let mine = t
            .by_file
            .get(&(f.clientid, f.fileid))
            .and_then(|o| Some((*o, t.by_other.get(o)?)));
        if let Some((other, l)) = mine.filter(|(_, l)| l.recalled.is_some()) {
            if l.down_only && !conflict {
                return Ok(Some(other));
            }
            return Err(StateError::RecallConflict);
        }
        if conflict {
            return Err(StateError::Resource);
        }
        Ok(None)
    }

    fn insert(&self, t: &mut Table, f: LayoutFile, fh: &[u8]) -> Result<[u8; 12], StateError> {
        let mine = t.per_client.get(&f.clientid).copied().unwrap_or(0);
        if t.by_other.len() >= MAX_LAYOUTS || mine >= MAX_PER_CLIENT {
            return Err(StateError::Resource);
        }
        let other = self.mint(t, f);
        let l = Layout {
            clientid: f.clientid,
            fileid: f.fileid,
            fsid: f.fsid,
            seqid: 0,
            read: false,
            rw: false,
            fh: fh.into(),
            recalled: None,
            down_only: false,
            servers: 0,
            io_seen: Vec::new(),
            io_closing: 0,
        };
        t.by_other.insert(other, l);
        t.by_file.insert((f.clientid, f.fileid), other);
        t.holders.entry(f.fileid).or_default().push(other);
        *t.per_client.entry(f.clientid).or_default() += 1;
        Ok(other)
    }

    /// The layout a presented layout stateid names: this client's, this file's, and
    /// not from the future (§8.2.2; seqid 0 means the current one, §8.2.2).
    fn find(t: &Table, f: LayoutFile, s: &Stateid) -> Result<Layout, StateError> {
        let l = t.by_other.get(&s.other).ok_or(StateError::BadStateid)?;
        if l.clientid != f.clientid || l.fileid != f.fileid {
            return Err(StateError::BadStateid);
        }
        if s.seqid != 0 && s.seqid > l.seqid {
            return Err(StateError::BadStateid);
        }
        if s.seqid != 0 && s.seqid < l.seqid {
            return Err(StateError::OldStateid);
        }
        Ok(l.clone())
    }

    /// LAYOUTRETURN4_FILE (RFC 8881 §18.44.3) of `iomode` (READ, RW or ANY) under
    /// layout stateid `s`. Returning what is not held is not an error (a return is
    /// idempotent, §12.5.5.1). The new layout stateid while layouts remain; `None`
    /// once none does (the stateid is freed: lrs_present false).
    pub fn give_back(
        &self,
        f: LayoutFile,
        s: &Stateid,
        iomode: u32,
    ) -> Result<Option<Stateid>, StateError> {
        let mut t = self.lock();
        if !t.by_other.contains_key(&s.other) && !t.by_file.contains_key(&(f.clientid, f.fileid)) {
            return Err(StateError::NoMatchingLayout);
        }
        Self::find(&t, f, s)?;
        let l = t
            .by_other
            .get_mut(&s.other)
            .ok_or(StateError::Inconsistent)?;
        match iomode {
            IOMODE_READ => l.read = false,
            IOMODE_RW => l.rw = false,
            _ => (l.read, l.rw) = (false, false),
        }
        if l.read || l.rw {
            l.seqid = stateids::next_seqid(l.seqid);
            return Ok(Some(l.stateid(s.other)));
        }
        t.remove(&s.other);
        self.publish(&t);
        bump(&self.counters.returned, 1);
        Ok(None)
    }

    /// LAYOUTRETURN4_FSID / _ALL (§18.44.3): every layout of the client (in one file
    /// system when `fsid` is given). Nothing held is not an error.
    pub fn give_back_all(&self, clientid: u64, fsid: Option<u64>) {
        let n = self.drop_where(clientid, fsid, false).len();
        bump(&self.counters.returned, n);
    }

    /// Removes every layout of `clientid` (in file system `fsid` when given): the
    /// files they were of.
    /// With `fencing`, the files are marked as being fenced under the same lock.
    fn drop_where(&self, clientid: u64, fsid: Option<u64>, fencing: bool) -> Vec<u64> {
        let mut t = self.lock();
        let gone: Vec<([u8; 12], u64)> = t
            .by_other
            .iter()
            .filter(|(_, l)| l.clientid == clientid && fsid.is_none_or(|x| x == l.fsid))
            .map(|(o, l)| (*o, l.fileid))
            .collect();
        for (o, f) in &gone {
            t.remove(o);
            if fencing {
                t.fencing.insert(*f);
            }
        }
        self.publish(&t);
        gone.into_iter().map(|(_, f)| f).collect()
    }

    /// Whether `s` names this client's layout of `f`, whatever its seqid (LAYOUTERROR
    /// and LAYOUTSTATS, which change no layout state): else NFS4ERR_BAD_STATEID.
    pub fn holds(&self, f: LayoutFile, s: &Stateid) -> Result<(), StateError> {
        match self.lock().by_other.get(&s.other) {
            Some(l) if l.clientid == f.clientid && l.fileid == f.fileid => Ok(()),
            _ => Err(StateError::BadStateid),
        }
    }

    /// LAYOUTCOMMIT's state check (§18.42.3): `s` must be the client's layout
    /// stateid of the file and hold an RW layout (else NFS4ERR_BADLAYOUT).
    pub fn check_commit(&self, f: LayoutFile, s: &Stateid) -> Result<(), StateError> {
        let t = self.lock();
        let l = Self::find(&t, f, s)?;
        if !l.rw {
            return Err(StateError::BadLayout);
        }
        Ok(())
    }

    /// Frees every layout of a client (lease expiry, DESTROY_CLIENTID) and fences
    /// their files (RFC 8435 §2.2: a client whose lease expired can no longer write
    /// through any data server; the file's other holders get NFS3ERR_ACCES there too
    /// and come back for a layout with the new credentials).
    /// Conflicting operations on those files wait from the drop until the fence's
    /// window ran out (`fencing`, then `fenced`), never in between.
    pub fn purge_client(&self, clientid: u64) {
        self.forget_watches(clientid);
        let mut files = self.drop_where(clientid, None, true);
        files.sort_unstable();
        files.dedup();
        for f in files {
            self.fence_file(f);
            let mut t = self.lock();
            t.fencing.remove(&f);
            self.publish(&t);
        }
    }

    /// Layouts held, all clients together.
    pub fn count(&self) -> usize {
        self.lock().by_other.len()
    }

    /// Whether any layout is held or any file's recall runs (no lock: the conflict
    /// checks' fast path; a recall's mark is cleared by the conflicting caller's next
    /// `break_conflicts`).
    /// While the restart gate is shut every file counts as laid out (`layouts_boot.rs`).
    pub fn any(&self) -> bool {
        self.held.load(Ordering::Acquire) > 0
            || self.marked.load(Ordering::Acquire) > 0
            || self.boot_shut()
    }

    /// Publishes the table's sizes for `any` (under the lock).
    fn publish(&self, t: &Table) {
        self.held.store(t.by_other.len(), Ordering::Release);
        self.marked.store(
            t.recalling.len() + t.released.len() + t.fenced.len() + t.fencing.len(),
            Ordering::Release,
        );
    }

    /// The counters and the gauge for the stats endpoint.
    pub fn counts(&self) -> LayoutCounts {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LayoutCounts {
            held: self.held.load(Ordering::Relaxed) as u64,
            granted: get(&c.granted),
            recalled: get(&c.recalled),
            returned: get(&c.returned),
            revoked: get(&c.revoked),
            get_errors: get(&c.get_errors),
            recalled_ds_down: get(&c.recalled_ds_down),
            released_ds_down: get(&c.released_ds_down),
            unknown_device_reports: get(&c.unknown_device_reports),
            stats_ignored: get(&c.stats_ignored),
            fence_refused: self.fence().map_or(0, |f| f.refused()),
            fence_backwards: self.fence().map_or(0, |f| f.backwards()),
        }
    }

    /// A LAYOUTGET answered with an error.
    pub fn get_failed(&self) {
        bump(&self.counters.get_errors, 1);
    }
}

#[path = "layouts_boot.rs"]
mod boot;
#[path = "layouts_failure.rs"]
mod failure;
#[path = "layouts_gen.rs"]
mod gen;
pub use gen::Pending as DataGenPending;
#[path = "layouts_health.rs"]
pub mod health;
#[path = "layouts_notify.rs"]
mod notify;
pub use notify::NOTIFY_DELETE;
#[path = "layouts_reclaim.rs"]
mod reclaim;
pub use reclaim::{load_key, owner_digest};
#[path = "layouts_recall.rs"]
mod recall;
#[path = "layouts_stats.rs"]
mod stats;
pub use stats::Reported;
#[path = "layouts_stripe.rs"]
mod stripe;
pub use stripe::Stripe;

#[cfg(test)]
#[path = "layouts_tests.rs"]
mod tests;
