//! The reactor-side read cache: attributes and 4 KiB pages of recently read files,
//! so a hot GETATTR or READ is answered on the reactor, run to completion, without a
//! round trip through a backend worker (docs/architecture.md §5).
//!
//! Ownership: each reactor owns its `ReadCache` (no locks). `Generations` is shared by
//! every reactor and worker, lock-free: one counter per file (file ids hashed into
//! slots; a collision only invalidates more) and one epoch for what cannot be named.
//!
//! What bumps what: every change is reported by whoever executes it, never guessed
//! from a call's arguments beforehand. The file model reports each data or
//! attribute change it runs — a write, a SETATTR (size, mode, owner, times), a size
//! set by CREATE or a truncating OPEN, a COMMIT that syncs staged data — as a change
//! of its file, before and after (`fs::ChangeObserver`), whichever front end,
//! operation or thread called it; the reactor bumps around its own io_uring writes
//! (`server::direct`). A namespace change (create,
//! mkdir, symlink, mknod, remove, rmdir, rename; NFSv3 or NFSv4) bumps exactly the
//! files whose cached state it can falsify, reported by the file model, which alone
//! knows them (`fs::ChangeObserver`, `fs/imp/observe.rs`): the parent directories
//! (mtime, ctime, size, link count; both for a rename), the object removed or
//! replaced at the name (its id is unmapped: its handles must answer STALE, never
//! from here), the object renamed (same id, but its ctime moves and a store that
//! renames by copying gives it new times) and, for a directory, every descendant the
//! handle table holds (same ids under new keys), and a new object's id. The epoch is
//! bumped only for what cannot be named: a reactor's cache left half-updated by a
//! panic, a directory rename that failed part way, a table error, a rename of more
//! than `observe::EXACT_MAX` mapped files.
//!
//! Consistency rule: a worker snapshots the stamp (file generation + epoch) BEFORE it
//! runs a READ or GETATTR, and the reactor caches what it learned only if the stamp is
//! still current. Every mutation bumps the stamp before it runs and again after it ran,
//! before its reply is sent. So anything cached from data read concurrently with a
//! mutation is invalid by the time the mutation's reply reaches the client, and no
//! cached answer is ever older than a completed mutation. Changes made behind the
//! gateway's back (another program writing the backend) are seen within `ATTR_TTL`:
//! attributes expire, and pages belong to the attributes (size, mtime, ctime) they were
//! read under.
//!
//! Directory entries have generations of their own (`name_stamp`: directory id and
//! name hashed with a per-process seed into a second slot array): the file model
//! reports each change of what a name refers to (`ChangeObserver::name`), so the
//! reactor's cached LOOKUPs (`cache_names`) stop answering for exactly that name,
//! and a new name in a directory invalidates no other.
//!
//! Only handles a worker has authenticated are ever inserted, and lookups use the exact
//! handle bytes, so a forged handle can never hit. Export access (client network and
//! squashing) and read permission are checked on every hit, exactly as a worker would.

use crate::export::{admit, Exports};
use crate::fs::access::{check_read, may, X};
use crate::fs::{Attr, FileKind, NfsTime, FH_MAX};
use crate::outcome::ReadDone;
use engine::mem::{Buf, ClassSpec, HugePolicy, Pools};
use engine::rdma::server::ExtSeg;
use engine::rpc::Cred;
// FxHash for handles: they carry a MAC keyed by the server's secret, so a client
// cannot choose two that collide. File ids are NOT safe for an unkeyed hasher: an
// fs file id is an unkeyed hash of its name (fs/imp/handles), so a client could
// grind names whose ids share FxHash buckets and make every lookup a long probe.
// Maps keyed by file ids start FxHash from a per-process random seed (`Keyed`): two
// ids then share a bucket only by chance, unless they agree in their low 58 bits
// (the bucket bits of an Fx product depend on nothing above them), which takes ~2^58
// names to grind. SipHash cost +12 % instructions per cached 4 KiB READ (callgrind).
use rustc_hash::FxHashMap as HashMap;
type Keyed<K, V> = std::collections::HashMap<K, V, rustc_hash::FxSeededState>;

/// A random seed for `Keyed` maps, drawn once per map from the OS-keyed SipHash state.
fn keyed_seed() -> rustc_hash::FxSeededState {
    use std::hash::BuildHasher;
    let seed = std::hash::RandomState::new().hash_one(0x6e66_7367_775f_6678_u64);
    rustc_hash::FxSeededState::with_seed(seed as usize)
}
use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Page size of the cache, and the largest READ it serves or fills (bigger reads
/// stream from the backend); checked against the engine's per-reply piece limit in
/// `crate::limits`.
pub use crate::limits::{CACHE_PAGE as PAGE, MAX_CACHED_READ};
/// How long cached attributes are trusted without asking the backend.
pub const ATTR_TTL: Duration = Duration::from_secs(1);
/// How long past `ATTR_TTL` an NFSv3 GETATTR or READ is still answered from the
/// cache while ONE revalidation of the file runs on a worker (stale-while-revalidate):
/// a store round trip (an S3 HEAD) then delays no client call. Past it,
/// calls go to workers again (a revalidation that failed or is stuck).
pub const STALE_MAX: Duration = Duration::from_secs(2);
/// Attribute entries per reactor before the table is cleared.
const MAX_ATTRS: usize = 65536;
const GEN_SLOTS: usize = 1 << 16;
/// Directory entries' generation slots (`Generations::name_stamp`).
const NAME_SLOTS: usize = 1 << 16;
/// Page lists kept for reuse: enough for the zero-copy READs a reactor usually has in
/// flight (TCP replies wait in socket queues), so a hit allocates none.
const SPARE_READS: usize = 1024;

/// A file's invalidation state at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    gen: u64,
    epoch: u64,
}

impl Stamp {
    /// This stamp after `n` bumps of its file's generation and nothing else: a
    /// writer that bumped `n` times and finds exactly this knows no other change
    /// raced with it (`server::direct`).
    pub fn after_bumps(self, n: u64) -> Stamp {
        Stamp {
            gen: self.gen.wrapping_add(n),
            epoch: self.epoch,
        }
    }
}

/// A held file's slot counts its holds from this bit up (`Generations::hold`); the
/// bits below are its generation (2^48 bumps of one slot before they would carry).
const HOLD: u64 = 1 << 48;
/// A slot whose holds belong to more than one client (`Generations::holders`).
const MIXED: u64 = u64::MAX;

/// Shared invalidation counters.
pub struct Generations {
    slots: Box<[AtomicU64]>,
    epoch: AtomicU64,
    /// Gives each stamp of a held file an epoch no other stamp has (`stamp`).
    held_seq: AtomicU64,
    /// Per slot: the one client whose holds are on it (`hold`), `MIXED` when holds of
    /// two clients share the slot, 0 when none is on. Written under `hold_lock`.
    holders: Box<[AtomicU64]>,
    hold_lock: std::sync::Mutex<()>,
    /// Moves with every bump of any file, name or of the epoch: a reactor keeps a
    /// listing only if no file changed while a worker listed it (`cache_dirs`).
    changes: AtomicU64,
    /// One counter per directory entry (directory file id and name, hashed with
    /// `name_seed` into slots; a collision only invalidates more): a change of what
    /// a name refers to bumps it (`cache_names`).
    names: Box<[AtomicU64]>,
    /// A per-process random key for `name_hash`: names are chosen by clients, and
    /// an unkeyed hash would let one grind names that share a slot or a bucket of
    /// the reactors' name maps. SipHash, not a seeded FxHash: FxHash folds a byte
    /// string with fixed constants before the seed enters, so two names of equal
    /// fold collide whatever the seed (trivially built for 16-byte names).
    name_seed: std::hash::RandomState,
    /// pNFS data generations this data server dropped a file's caches for
    /// (`cache_data.rs`): a layout's call with another one is not answered here.
    data: data::DataSeen,
}

impl Default for Generations {
    fn default() -> Self {
        Self::new()
    }
}

impl Generations {
    pub fn new() -> Generations {
        Generations {
            slots: (0..GEN_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            epoch: AtomicU64::new(0),
            held_seq: AtomicU64::new(0),
            holders: (0..GEN_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            hold_lock: std::sync::Mutex::new(()),
            changes: AtomicU64::new(0),
            names: (0..NAME_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            name_seed: std::hash::RandomState::new(),
            data: data::DataSeen::default(),
        }
    }

    /// pNFS data generations (`cache_data.rs`): checked from now on.
    pub fn check_data_gens(&self) {
        self.data.enable()
    }

    /// Whether a call with `cred` may be answered from what is cached of `fileid`:
    /// any caller but a pNFS layout's, and a layout's whose data generation this
    /// gateway already dropped the file's caches for (one atomic load).
    #[inline]
    pub fn data_ok(&self, fileid: u64, cred: &Cred) -> bool {
        match crate::fence::synthetic_gen(cred) {
            None => true,
            Some(g) => self.data.seen(fileid, g),
        }
    }

    /// The hash of directory entry `name` of directory `dir` (a file id): its
    /// generation slot here and its key in the reactors' name maps (`cache_names`).
    #[inline]
    pub fn name_hash(&self, dir: u64, name: &[u8]) -> u64 {
        use std::hash::BuildHasher;
        // Mixed once more: the slot index takes the top bits of a product.
        self.name_seed.hash_one((dir, name))
    }

    fn name_slot(&self, hash: u64) -> &AtomicU64 {
        let i = (hash.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 48) as usize % NAME_SLOTS;
        &self.names[i]
    }

    /// The stamp of the directory entry whose `name_hash` is `hash`: what the name
    /// refers to is what it referred to when the stamp was taken while it is current.
    #[inline]
    pub fn name_stamp(&self, hash: u64) -> Stamp {
        Stamp {
            gen: self.name_slot(hash).load(Ordering::Acquire),
            epoch: self.epoch.load(Ordering::Acquire),
        }
    }

    /// Invalidates what is cached about one directory entry (a create, remove,
    /// rename or link of the name, reported by the file model before and after).
    pub fn bump_name(&self, hash: u64) {
        self.changes.fetch_add(1, Ordering::SeqCst);
        self.name_slot(hash).fetch_add(1, Ordering::SeqCst);
    }

    fn index(fileid: u64) -> usize {
        let h = fileid.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 48;
        h as usize % GEN_SLOTS
    }

    fn slot(&self, fileid: u64) -> &AtomicU64 {
        &self.slots[Self::index(fileid)]
    }

    /// The file's stamp now, for a caller that holds nothing (every NFSv3 call). A
    /// held file's (`hold`) equals no other stamp, earlier or later: nothing is
    /// cached or answered from the cache for such a caller while it is held, and no
    /// comparison anywhere needs to know about holds.
    #[inline]
    pub fn stamp(&self, fileid: u64) -> Stamp {
        self.stamp_as(fileid, 0)
    }

    /// The file's stamp now as NFSv4.1 client `client` sees it (0: none). The client
    /// whose write delegation holds the file gets its plain stamp, so its own calls
    /// are cached and answered as if nothing were held (RFC 8881 §10.4: the holder's
    /// view is the one the server's caches may serve); everyone else gets a unique
    /// one. Holds of two clients on one slot serve neither from the cache.
    #[inline]
    pub fn stamp_as(&self, fileid: u64, client: u64) -> Stamp {
        let gen = self.slot(fileid).load(Ordering::Acquire);
        if gen >= HOLD {
            return self.held_stamp(fileid, gen, client);
        }
        Stamp {
            gen,
            epoch: self.epoch.load(Ordering::Acquire),
        }
    }

    #[cold]
    fn held_stamp(&self, fileid: u64, gen: u64, client: u64) -> Stamp {
        // The holder changes only with a bump of `gen` (`hold`), so a stamp taken
        // for the holder never matches one taken after another client's hold.
        let holder = self.holders[Self::index(fileid)].load(Ordering::Acquire);
        if client != 0 && holder == client {
            return Stamp {
                gen,
                epoch: self.epoch.load(Ordering::Acquire),
            };
        }
        let unique = self.held_seq.fetch_add(1, Ordering::Relaxed);
        Stamp {
            gen,
            epoch: !unique,
        }
    }

    /// Whether `s` is still the file's stamp for whoever took it (a fill's check:
    /// a holder's stamp is the plain one, any other caller's taken while the file
    /// was held was unique and matches nothing).
    #[inline]
    pub fn current(&self, fileid: u64, s: Stamp) -> bool {
        let now = Stamp {
            gen: self.slot(fileid).load(Ordering::Acquire),
            epoch: self.epoch.load(Ordering::Acquire),
        };
        now == s
    }

    /// Whether any hold is on `fileid`'s slot (one atomic load).
    #[inline]
    pub fn held(&self, fileid: u64) -> bool {
        self.slot(fileid).load(Ordering::Acquire) >= HOLD
    }

    /// Holds (`held`) or releases one file: while any hold is on, the reactors'
    /// caches neither answer for it nor learn it. A write delegation holds its file
    /// (RFC 8881 §10.4: the holder's cached writes make the server's attributes and
    /// data stale for every other client, so each such call must reach a worker,
    /// which recalls the delegation first: `state::delegations`). Both ends bump the
    /// generation, so nothing learned before the hold answers after it.
    /// `client` is the holder (its own calls keep the caches, `stamp_as`).
    pub fn hold(&self, fileid: u64, client: u64, held: bool) {
        let _serial = self.hold_lock.lock().unwrap_or_else(|e| e.into_inner());
        let i = Self::index(fileid);
        self.changes.fetch_add(1, Ordering::SeqCst);
        let holder = &self.holders[i];
        if held {
            // The holder first, then the bump that makes it count.
            let was = self.slots[i].load(Ordering::SeqCst);
            let now = holder.load(Ordering::SeqCst);
            let next = if was < HOLD || now == client {
                client
            } else {
                MIXED
            };
            holder.store(next, Ordering::SeqCst);
            self.slots[i].fetch_add(HOLD + 1, Ordering::SeqCst);
        } else {
            let after = self.slots[i].fetch_add(1u64.wrapping_sub(HOLD), Ordering::SeqCst);
            if after.wrapping_add(1u64.wrapping_sub(HOLD)) < HOLD {
                holder.store(0, Ordering::SeqCst);
            }
        }
    }

    /// Invalidates what is cached about one file (any change the file model or a
    /// reactor's own io_uring write makes to it).
    pub fn bump_file(&self, fileid: u64) {
        // `changes` first: whoever reads a file's stamp and then `changes` unmoved
        // knows no bump of that file completed in between (`cache_dirs`).
        self.changes.fetch_add(1, Ordering::SeqCst);
        self.slot(fileid).fetch_add(1, Ordering::SeqCst);
    }

    /// Bumps so far, of any file or of the epoch.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::SeqCst)
    }

    /// Invalidates everything: for what cannot be named (a reactor's cache left
    /// half-updated by a panic, a directory rename a store did only in part). Other
    /// changes bump the files they touch (`ChangeObserver` below).
    pub fn bump_all(&self) {
        self.changes.fetch_add(1, Ordering::SeqCst);
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }
}

/// The file model reports each change's files here (`fs::ChangeObserver`: a written
/// or SETATTR'd file; for namespace changes the parents, the removed or replaced
/// object, the moved one and a moved directory's descendants, the new one), before
/// and after the change, so a write, create or remove invalidates those files only
/// and every other cached file keeps answering.
impl crate::fs::ChangeObserver for Generations {
    fn file(&self, fileid: u64) {
        self.bump_file(fileid)
    }
    fn data_seen(&self, fileid: u64, gen: u16) -> bool {
        self.data.seen(fileid, gen)
    }
    fn note_data(&self, fileid: u64, gen: u16) {
        self.data.note(fileid, gen)
    }

    fn all(&self) {
        self.bump_all()
    }

    fn changes(&self) -> Option<u64> {
        Some(Generations::changes(self))
    }

    fn hold(&self, fileid: u64, client: u64, held: bool) {
        Generations::hold(self, fileid, client, held)
    }

    fn name(&self, dir: u64, name: &[u8]) {
        self.bump_name(self.name_hash(dir, name))
    }
}

/// A file handle as a map key (exact bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FhKey {
    len: u8,
    bytes: [u8; FH_MAX],
}

impl FhKey {
    /// The handle bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    /// The handle as the file model's type.
    pub fn handle(&self) -> crate::fs::FileHandle {
        crate::fs::FileHandle {
            len: self.len,
            bytes: self.bytes,
        }
    }

    pub fn new(fh: &[u8]) -> Option<FhKey> {
        if fh.len() > FH_MAX {
            return None;
        }
        let mut bytes = [0u8; FH_MAX];
        bytes[..fh.len()].copy_from_slice(fh);
        Some(FhKey {
            len: fh.len() as u8,
            bytes,
        })
    }
}

/// What a worker learned that the reactor may cache.
#[derive(Debug)]
pub struct Fill {
    pub fh: FhKey,
    pub export: u16,
    pub attr: Attr,
    pub stamp: Stamp,
    /// Data read at a file offset; its page-aligned parts are cached.
    pub data: Option<FillData>,
    /// `attr` is the file model's own (an NFSv4 worker's), not decoded from a fattr3
    /// (whose 32-bit times may have lost bits): only such entries answer NFSv4.
    pub exact: bool,
}

impl Fill {
    /// A copy for the other reactors of what a create taught: the name it made
    /// (`NameFill::made`), a new directory's empty start (`FillData::Empty`), or
    /// attributes alone (a created file's). Each reactor keeps its own runs of a
    /// directory (`dirs::Listings`), which stay complete only if they apply every
    /// create in it, whichever reactor's connection made it. `None` for what stays
    /// with the reactor that asked (pages, listings, a name no create made).
    pub fn for_other_reactors(&self) -> Option<Fill> {
        let data = match &self.data {
            None => None,
            Some(FillData::Name(n)) if n.made.is_some() => Some(FillData::Name(n.clone())),
            Some(FillData::Empty(e)) => Some(FillData::Empty(e.clone())),
            Some(_) => return None,
        };
        Some(Fill {
            fh: self.fh,
            export: self.export,
            attr: self.attr,
            stamp: self.stamp,
            data,
            exact: self.exact,
        })
    }
}

/// Where a fill's data is.
#[derive(Debug)]
pub enum FillData {
    /// A read-ahead block read at `offset`.
    Block(u64, Buf),
    /// The data of the READ reply travelling with the fill: file offset, and the byte
    /// range in the reply.
    InReply { offset: u64, at: usize, len: usize },
    /// A directory page a worker listed (the fill's attributes are the directory's).
    Listing(Box<dirs::ListingFill>),
    /// A directory entry a worker's LOOKUP, CREATE or MKDIR answered (the fill's
    /// attributes are the directory's, cached only when `NameFill::dir_attr`).
    Name(Box<names::NameFill>),
    /// A directory a MKDIR made, seen empty after its stamp was read (the fill's
    /// handle, attributes and stamp are the new directory's): its listing's start.
    Empty(Box<dirs::EmptyFill>),
}

/// The attributes a page was read under: a change behind the gateway's back changes
/// one of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fingerprint {
    size: u64,
    mtime: NfsTime,
    ctime: NfsTime,
}

impl From<&Attr> for Fingerprint {
    fn from(a: &Attr) -> Self {
        Fingerprint {
            size: a.size,
            mtime: a.mtime,
            ctime: a.ctime,
        }
    }
}

struct AttrEntry {
    export: u16,
    attr: Attr,
    stamp: Stamp,
    at: Instant,
    /// See `Fill::exact`.
    exact: bool,
    /// A revalidation (a GETATTR on a worker) was started for these attributes; its
    /// fill replaces the entry.
    revalidating: bool,
}

struct PageEntry {
    buf: Buf,
    len: usize,
    stamp: Stamp,
    fp: Fingerprint,
}

/// Hit/miss counters of one reactor's cache.
#[derive(Debug, Default, Clone, Copy)]
pub struct CacheStats {
    pub hits: u64,
    /// Of `hits`, listing pages (`cache_dirs`).
    pub listings: u64,
    /// Of `hits`, LOOKUPs (`cache_names`).
    pub lookups: u64,
    pub misses: u64,
    pub pages: usize,
}

/// One reactor's cache.
pub struct ReadCache {
    attrs: HashMap<FhKey, AttrEntry>,
    /// End of the last READ seen per file, to detect sequential access.
    last_end: Keyed<u64, u64>,
    pages: Keyed<(u64, u64), PageEntry>,
    /// Insertion order, for FIFO eviction when the page pool is empty.
    order: VecDeque<(u64, u64)>,
    pool: Option<Pools>,
    stats: CacheStats,
    /// Replies in flight reading each page (RDMA Write or TCP send), indexed by the
    /// page's slot in the page region, which is also the tag the transports hand back:
    /// a pinned slot's buffer is never freed, so the slot names the same memory until
    /// its last unpin. Arrays sized once (no hashing or allocation per pin).
    pins: Vec<u32>,
    /// Slots pinned: `pins` entries above zero.
    pinned: usize,
    /// Pinned pages already evicted or replaced, by slot: freed at their last unpin.
    zombies: Vec<Option<Buf>>,
    zombie_count: usize,
    /// Page lists handed back by `recycle` (no allocation per zero-copy READ); boxed
    /// because they travel by pointer through the reactor's queues.
    #[allow(clippy::vec_box)]
    spare_reads: Vec<Box<PageRead>>,
    /// The handle whose expired attributes a hit just served: the caller starts its
    /// revalidation (`take_revalidation`).
    revalidate: Option<FhKey>,
    /// A directory whose listing a hit past `ATTR_TTL` asked to revalidate
    /// (`revalidate_listing`).
    revalidate_listing: Option<FhKey>,
    /// Recently listed directories (`cache_dirs`).
    dirs: dirs::Listings,
    /// Recently looked-up or created names (`cache_names`).
    names: names::Names,
}

/// A cached READ answered without copying its data: the reply carries the header up
/// to the data's length word, and the data stays in these cache pages (pinned until
/// [`ReadCache::unpin`] of each piece's tag). The same list goes to the RDMA server
/// (`reply_external`) or the TCP transport (`send_external`).
pub type PageRead = engine::tcp::ExtList;

/// A handle `ReadCache::admit_v4` admitted: its attributes, their stamp, and whether
/// the caller may READ it.
#[derive(Debug, Clone, Copy)]
pub struct V4Hit {
    pub attr: Attr,
    stamp: Stamp,
    readable: bool,
}

/// Cached attributes that answer a GETATTR (`ReadCache::attrs`). The caller encodes
/// them, then reports the answer (`ReadCache::answered`).
#[derive(Debug, Clone, Copy)]
pub struct AttrHit {
    pub attr: Attr,
    /// Past `ATTR_TTL` (within `STALE_MAX`): answering starts one revalidation.
    pub stale: bool,
}

/// A READ the cached pages answer whole (`ReadCache::read`): its outcome, and where
/// its data is (`ReadCache::copy_read`, `ReadCache::pin_read`).
#[derive(Debug, Clone, Copy)]
pub struct ReadHit {
    pub done: ReadDone,
    offset: u64,
    /// As `AttrHit::stale`.
    pub stale: bool,
}

/// A LOOKUP the cache answers (`ReadCache::lookup`): the object's handle and
/// attributes, and the directory's attributes.
#[derive(Debug, Clone, Copy)]
pub struct LookupHit {
    pub obj: FhKey,
    pub attr: Attr,
    pub dir: Attr,
    /// The object's attributes are past `ATTR_TTL` (as `AttrHit::stale`).
    pub stale: bool,
    /// The object's attributes are the file model's own (`Fill::exact`): they may
    /// answer NFSv4.
    pub exact: bool,
    /// The entry was taught by an NFSv4.1 LOOKUP (`names::NameFill::v4`).
    pub v4: bool,
}

/// The parts of a READ or GETATTR call the cache needs.
pub struct Request<'a> {
    pub fh: &'a [u8],
    pub client: IpAddr,
    pub cred: &'a Cred,
}

impl ReadCache {
    /// A cache of `bytes` of pages (0 disables page caching; attributes are still
    /// cached). The pages are one region mapped at start.
    pub fn new(bytes: usize, policy: HugePolicy) -> Result<ReadCache, engine::mem::MemError> {
        let count = bytes / PAGE;
        let pool = if count == 0 {
            None
        } else {
            Some(Pools::new(&[ClassSpec { size: PAGE, count }], policy)?)
        };
        Ok(ReadCache {
            attrs: HashMap::with_capacity_and_hasher(1024, Default::default()),
            last_end: Keyed::with_capacity_and_hasher(1024, keyed_seed()),
            pages: Keyed::with_capacity_and_hasher(count.min(1 << 20), keyed_seed()),
            order: VecDeque::with_capacity(count.min(1 << 20)),
            pool,
            stats: CacheStats::default(),
            pins: vec![0; count],
            pinned: 0,
            zombies: (0..count).map(|_| None).collect(),
            zombie_count: 0,
            spare_reads: Vec::new(),
            revalidate: None,
            revalidate_listing: None,
            dirs: dirs::Listings::default(),
            names: names::Names::default(),
        })
    }

    pub fn stats(&self) -> CacheStats {
        CacheStats {
            pages: self.pages.len(),
            ..self.stats
        }
    }

    /// The valid attribute entry for `fh`, with the caller admitted to its export, and
    /// whether it is past `ATTR_TTL` (only with `stale_ok`, up to `STALE_MAX` more, and
    /// only while no revalidation failed to come back: see `note_stale`). An entry
    /// whose file changed through this gateway (stamp) is never served.
    fn admitted(
        &self,
        gens: &Generations,
        exports: &Exports,
        req: &Request,
        stale_ok: bool,
        holder: u64,
    ) -> Option<(&AttrEntry, crate::export::Caller, bool)> {
        let e = self.attrs.get(&FhKey::new(req.fh)?)?;
        if gens.stamp_as(e.attr.fileid, holder) != e.stamp {
            return None;
        }
        // A pNFS layout of a data generation not yet dropped for: to a worker.
        if !gens.data_ok(e.attr.fileid, req.cred) {
            return None;
        }
        let age = e.at.elapsed();
        let stale = age >= ATTR_TTL;
        if stale && !(stale_ok && age < ATTR_TTL + STALE_MAX) {
            return None;
        }
        let export = exports.get(e.export)?;
        let caller = admit(export, req.client, req.cred).ok()?;
        Some((e, caller, stale))
    }

    /// A hit served expired attributes of `fh`: the first such hit asks for one
    /// revalidation (`take_revalidation`); later ones wait for its fill.
    #[cold]
    fn note_stale(&mut self, fh: &[u8]) {
        if let Some(key) = FhKey::new(fh) {
            if let Some(e) = self.attrs.get_mut(&key) {
                if !e.revalidating {
                    e.revalidating = true;
                    self.revalidate = Some(key);
                }
            }
        }
    }

    /// The handle whose attributes need a revalidation now (at most one per hit; the
    /// caller hands a GETATTR of it to a worker, whose fill refreshes the entry and,
    /// when the file changed behind the gateway, orphans its pages).
    pub fn take_revalidation(&mut self) -> Option<FhKey> {
        self.revalidate.take()
    }

    /// The cached attributes of `req.fh` when they may answer a GETATTR: current
    /// (stamp), at most `STALE_MAX` past `ATTR_TTL`, and the caller admitted to the
    /// export. Counts nothing: the caller reports `answered` or `missed`.
    pub fn attrs(&self, gens: &Generations, exports: &Exports, req: &Request) -> Option<AttrHit> {
        let (e, _, stale) = self.admitted(gens, exports, req, true, 0)?;
        Some(AttrHit {
            attr: e.attr,
            stale,
        })
    }

    /// A READ of `count` bytes at `offset` when the cache answers it whole: access as
    /// a worker would check it, and every page of the range present, current and long
    /// enough. Counts nothing: the caller reports `answered` or `missed`.
    pub fn read(
        &self,
        gens: &Generations,
        exports: &Exports,
        req: &Request,
        offset: u64,
        count: u32,
    ) -> Option<ReadHit> {
        let (done, stale) = self.check_pages(gens, exports, req, offset, count, true)?;
        Some(ReadHit {
            done,
            offset,
            stale,
        })
    }

    /// `read` for a handle `admit_v4` just admitted (same COMPOUND, same reactor: the
    /// cache did not change in between), when the caller may read the file.
    pub fn read_admitted(&self, hit: &V4Hit, offset: u64, count: u32) -> Option<ReadHit> {
        if !hit.readable || count as usize > MAX_CACHED_READ {
            return None;
        }
        let done = self.pages_cover(&hit.attr, hit.stamp, offset, count as usize)?;
        Some(ReadHit {
            done,
            offset,
            stale: false,
        })
    }

    /// An answer from the cache went out (`stale`: from expired attributes, which
    /// asks for one revalidation of `fh`, `take_revalidation`).
    #[inline]
    pub fn answered(&mut self, fh: &[u8], stale: bool) {
        if stale {
            self.note_stale(fh);
        }
        self.stats.hits += 1;
    }

    /// The run of directory `req.fh` when it answers an NFSv3 listing call from
    /// `cookie` (`cache_dirs::Listings::lookup`; the directory's attributes current,
    /// as READDIRPLUS shows them). Counts nothing: the caller reports
    /// `answered_listing` or `missed`.
    /// `max`: the most entries the reply could show (each entry's attributes are
    /// made current first, from this cache's attribute table).
    #[allow(clippy::too_many_arguments)]
    pub fn listing(
        &mut self,
        gens: &Generations,
        exports: &Exports,
        req: &Request,
        cookie: u64,
        verf: [u8; 8],
        max: usize,
    ) -> Option<ListingHit<'_>> {
        self.listing_as(gens, exports, req, (cookie, verf, max), true)
    }

    /// `listing` for NFSv4.1's READDIR, whose reply shows no attributes of the
    /// directory (`ListingHit::dir` may be older than its current state: only the
    /// access check reads it, `cache_dirs::Listings::lookup`).
    pub fn listing_v4(
        &mut self,
        gens: &Generations,
        exports: &Exports,
        req: &Request,
        at: (u64, [u8; 8], usize),
    ) -> Option<ListingHit<'_>> {
        self.listing_as(gens, exports, req, at, false)
    }

    fn listing_as(
        &mut self,
        gens: &Generations,
        exports: &Exports,
        req: &Request,
        at: (u64, [u8; 8], usize),
        dir_shown: bool,
    ) -> Option<ListingHit<'_>> {
        let table = &self.attrs;
        // A run past its TTL answers while its revalidation lists the entries again
        // (`dirs::ListingHit::revalidate`): its entries' attributes may be as old as
        // the run, as a GETATTR's past the TTL are (`STALE_MAX`).
        let attrs = |fh: &[u8], stale: bool| {
            let e = table.get(&FhKey::new(fh)?)?;
            let max = if stale {
                ATTR_TTL + STALE_MAX
            } else {
                ATTR_TTL
            };
            (e.at.elapsed() < max && gens.stamp(e.attr.fileid) == e.stamp)
                .then_some((e.attr, e.stamp, e.exact))
        };
        self.dirs.lookup(gens, exports, req, at, dir_shown, attrs)
    }

    /// A listing page answered from a run past `ATTR_TTL` went out
    /// (`ListingHit::revalidate`): the directory's first page is to be listed again
    /// on a worker (`take_listing_revalidation`), whose fill renews or replaces the
    /// run.
    pub fn revalidate_listing(&mut self, fh: &[u8]) {
        if let Some(key) = FhKey::new(fh) {
            self.dirs.revalidating(&key);
            self.revalidate_listing = Some(key);
        }
    }

    /// The directory whose listing needs a revalidation now (at most one per hit; the
    /// caller hands a READDIRPLUS of its first page to a worker).
    pub fn take_listing_revalidation(&mut self) -> Option<FhKey> {
        self.revalidate_listing.take()
    }

    /// A listing page went out from the cache.
    pub fn answered_listing(&mut self) {
        self.stats.hits += 1;
        self.stats.listings += 1;
    }

    /// A call the cache could not answer.
    pub fn missed(&mut self) {
        self.stats.misses += 1;
    }

    /// Copies the data of `r` into `dst` (`r.done.n` bytes).
    pub fn copy_read(&self, r: &ReadHit, dst: &mut [u8]) {
        self.copy_pages(&r.done.attr, r.offset, &mut dst[..r.done.n]);
    }

    /// The cache pages holding the data of `r` (registered under `lkey`), each pinned
    /// until [`ReadCache::unpin`] of its tag: the reply's data goes from them without
    /// a copy.
    pub fn pin_read(&mut self, r: &ReadHit, lkey: u32) -> Box<PageRead> {
        self.pin_range(r.done.attr.fileid, r.offset, r.done.n, lkey)
    }

    /// NFSv4 fast path (`nfs4::fast`): the cached attributes of `req.fh` when they
    /// are current, exact (`Fill::exact`) and the caller is admitted to the export
    /// (the same admission as `attrs`). A miss is counted.
    pub fn attr_v4(
        &mut self,
        gens: &Generations,
        exports: &Exports,
        req: &Request,
    ) -> Option<Attr> {
        self.admit_v4(gens, exports, req, false, 0).map(|h| h.attr)
    }

    /// `attr_v4`, also saying, when the COMPOUND will `read`, whether the caller may
    /// READ the file (a regular file `check_read` admits, as `read` checks it), for
    /// `read_admitted`: the export admission runs once per COMPOUND. A GETATTR
    /// (`read` false) pays no access check. A miss is counted. `client`: the
    /// session's client, served a file its write delegation holds (`stamp_as`).
    pub fn admit_v4(
        &mut self,
        gens: &Generations,
        exports: &Exports,
        req: &Request,
        read: bool,
        client: u64,
    ) -> Option<V4Hit> {
        let got = self
            .admitted(gens, exports, req, false, client)
            .filter(|(e, _, _)| e.exact)
            .map(|(e, caller, _)| V4Hit {
                attr: e.attr,
                stamp: e.stamp,
                readable: read
                    && e.attr.kind == FileKind::Reg
                    && check_read(&e.attr, &caller).is_ok(),
            });
        if got.is_none() {
            self.stats.misses += 1;
        }
        got
    }

    /// Counts a hit answered from `attr_v4` alone (NFSv4 GETATTR).
    pub fn note_hit(&mut self) {
        self.stats.hits += 1;
    }

    /// Copies cached bytes from `offset` into `dst` (the range passed `check_pages`).
    fn copy_pages(&self, a: &Attr, offset: u64, dst: &mut [u8]) {
        let n = dst.len();
        let mut done = 0;
        while done < n {
            let pos = offset + done as u64;
            let (pg, within) = (pos / PAGE as u64, (pos % PAGE as u64) as usize);
            let page = &self.pages[&(a.fileid, pg)];
            let k = (page.len - within).min(n - done);
            dst[done..done + k].copy_from_slice(&page.buf[within..within + k]);
            done += k;
        }
    }

    /// The checks of a cached READ: access as a worker would check it, and every page
    /// of the range present, current and long enough. Returns the READ's outcome and
    /// whether the attributes are stale (see `admitted`).
    fn check_pages(
        &self,
        gens: &Generations,
        exports: &Exports,
        req: &Request,
        offset: u64,
        count: u32,
        stale_ok: bool,
    ) -> Option<(ReadDone, bool)> {
        let count = count as usize;
        if count > MAX_CACHED_READ {
            return None;
        }
        let (e, caller, stale) = self.admitted(gens, exports, req, stale_ok, 0)?;
        let a = e.attr;
        if a.kind != FileKind::Reg || check_read(&a, &caller).is_err() {
            return None;
        }
        Some((self.pages_cover(&a, e.stamp, offset, count)?, stale))
    }

    /// The outcome of a READ of `offset .. offset + count` (at most MAX_CACHED_READ) of
    /// the file `a` when every page of it is present, current (`stamp`, fingerprint)
    /// and long enough.
    fn pages_cover(&self, a: &Attr, stamp: Stamp, offset: u64, count: usize) -> Option<ReadDone> {
        let done = ReadDone::whole(*a, offset, count as u64);
        let end = offset + done.n as u64;
        let fp = Fingerprint::from(a);
        let mut p = offset / PAGE as u64;
        // p * PAGE <= offset < 2^64 on entry; saturating steps keep a range that
        // reaches 2^64 (hostile offset, or a store-reported size) from wrapping.
        while done.n > 0 && p.saturating_mul(PAGE as u64) < end {
            let from = p * PAGE as u64;
            let page_end = from.saturating_add(PAGE as u64);
            match self.pages.get(&(a.fileid, p)) {
                Some(pg)
                    if pg.stamp == stamp
                        && pg.fp == fp
                        && from.saturating_add(pg.len as u64) >= end.min(page_end) => {}
                _ => return None,
            }
            p += 1;
        }
        Some(done)
    }

    /// Notes a READ of `fileid` through handle `fh` and says whether it continues the
    /// previous one (sequential access: worth reading ahead). Only handles a worker
    /// already authenticated are tracked, so clients cannot choose the keys.
    pub fn note_read(&mut self, fh: &[u8], fileid: u64, offset: u64, count: u32) -> bool {
        if !FhKey::new(fh).is_some_and(|k| self.attrs.contains_key(&k)) {
            return false;
        }
        if self.last_end.len() >= MAX_ATTRS {
            self.last_end.clear();
        }
        let prev = self
            .last_end
            .insert(fileid, offset.saturating_add(count as u64));
        prev == Some(offset)
    }

    /// Caches what a worker learned, if nothing changed since it looked. `reply` is
    /// the encoded reply the fill came with (for `FillData::InReply`).
    pub fn fill(&mut self, gens: &Generations, mut fill: Fill, reply: Option<&[u8]>) {
        if let Some(FillData::Name(n)) = &fill.data {
            self.fill_name(gens, &fill, n);
            if !n.dir_attr {
                return;
            }
            fill.data = None;
        }
        if matches!(fill.data, Some(FillData::Empty(_))) {
            if let Some(FillData::Empty(e)) = fill.data.take() {
                // Started even when the stamp moved since (a create in flight): the
                // run answers once every create since it was applied (`dirs::made`).
                self.dirs
                    .start_empty(fill.fh, fill.export, &fill.attr, fill.stamp, *e);
            }
        }
        if !gens.current(fill.attr.fileid, fill.stamp) {
            return;
        }
        // Attributes that are not the model's own (a fattr3's, or the reactor's file
        // table's, as its io_uring READs fill) do not downgrade an entry the model
        // gave for the same state of the file (same stamp, equal attributes): it stays
        // able to answer NFSv4 (`admit_v4`), so ring READs of a v4 workload do not
        // send its next GETATTR to a worker.
        let exact = fill.exact
            || self.attrs.get(&fill.fh).is_some_and(|e| {
                e.exact && e.stamp == fill.stamp && e.attr == fill.attr && e.export == fill.export
            });
        if self.attrs.len() >= MAX_ATTRS {
            self.attrs.clear();
        }
        self.attrs.insert(
            fill.fh,
            AttrEntry {
                export: fill.export,
                attr: fill.attr,
                stamp: fill.stamp,
                at: Instant::now(),
                exact,
                revalidating: false,
            },
        );
        match fill.data {
            Some(FillData::Block(offset, data)) => {
                self.fill_pages(&fill.attr, fill.stamp, offset, &data)
            }
            Some(FillData::InReply { offset, at, len }) => {
                if let Some(data) = reply.and_then(|r| r.get(at..at.checked_add(len)?)) {
                    self.fill_pages(&fill.attr, fill.stamp, offset, data)
                }
            }
            Some(FillData::Listing(l)) => {
                self.dirs.fill(gens, fill.fh, fill.export, &fill.attr, *l);
            }
            Some(FillData::Name(_)) | Some(FillData::Empty(_)) | None => {}
        }
    }

    /// A directory entry a worker answered (`cache_names`), and the object's
    /// attributes its LOOKUP read when no change was made anywhere since the worker
    /// began (its stamp read now is then the one it read under).
    fn fill_name(&mut self, gens: &Generations, dir: &Fill, n: &names::NameFill) {
        if dir.attr.kind != FileKind::Dir {
            return;
        }
        if let Some(m) = &n.made {
            self.dirs.made(&dir.fh, &n.name, m);
        }
        self.names.fill(gens, dir.fh, dir.attr.fileid, n);
        let Some((attr, changes)) = n.obj_attr else {
            return;
        };
        if attr.fileid != n.obj_id {
            return;
        }
        // The stamp first, then the counter (as `cache_dirs`: a bump moves the
        // counter before the stamp).
        let stamp = gens.stamp(attr.fileid);
        if gens.changes() != changes {
            return;
        }
        // As `fill`: a LOOKUP's attributes (decoded from a fattr3) do not downgrade
        // an entry the model gave for the same state of the file, which stays able
        // to answer NFSv4.
        // An NFSv4.1 LOOKUP's are the model's own (`NameFill::v4`).
        let exact = n.v4
            || self.attrs.get(&n.obj).is_some_and(|e| {
                e.exact && e.stamp == stamp && e.attr == attr && e.export == dir.export
            });
        if self.attrs.len() >= MAX_ATTRS {
            self.attrs.clear();
        }
        self.attrs.insert(
            n.obj,
            AttrEntry {
                export: dir.export,
                attr,
                stamp,
                at: Instant::now(),
                exact,
                revalidating: false,
            },
        );
    }

    /// An NFSv3 LOOKUP of `name` in directory `req.fh` when the cache answers it
    /// (`cache_names`): the caller admitted to the export (squashing applied) and
    /// allowed to search the directory, as a worker checks them, the name's entry
    /// current and young, the directory's and the object's attributes current (the
    /// object's possibly past `ATTR_TTL` within `STALE_MAX`, as for GETATTR), and
    /// the object in the directory's export. Counts nothing: the caller reports
    /// `answered_lookup` or `missed`.
    pub fn lookup(
        &self,
        gens: &Generations,
        exports: &Exports,
        req: &Request,
        name: &[u8],
    ) -> Option<LookupHit> {
        // pNFS data-server credentials are fenced per file by the worker.
        if !names::cacheable(name) || crate::fence::synthetic_ids(req.cred).is_some() {
            return None;
        }
        let (d, caller, _) = self.admitted(gens, exports, req, false, 0)?;
        if d.attr.kind != FileKind::Dir || !may(&d.attr, &caller, X) {
            return None;
        }
        let named = self.names.get(gens, req.fh, d.attr.fileid, name)?;
        let o = self.attrs.get(named.obj)?;
        if o.export != d.export
            || o.attr.fileid != named.obj_id
            || !matches!(o.attr.kind, FileKind::Reg | FileKind::Dir)
            || gens.stamp(o.attr.fileid) != o.stamp
        {
            return None;
        }
        let age = o.at.elapsed();
        let stale = age >= ATTR_TTL;
        if stale && age >= ATTR_TTL + STALE_MAX {
            return None;
        }
        Some(LookupHit {
            obj: *named.obj,
            attr: o.attr,
            dir: d.attr,
            stale,
            exact: o.exact,
            v4: named.v4,
        })
    }

    /// A LOOKUP went out from the cache (`stale`: from the object's expired
    /// attributes, which asks for one revalidation of `obj`).
    pub fn answered_lookup(&mut self, obj: &[u8], stale: bool) {
        self.answered(obj, stale);
        self.stats.lookups += 1;
    }

    /// Copies the page-aligned parts of `data` (read at `offset`) into pages. A final
    /// partial page is cached only when it ends at the end of the file.
    fn fill_pages(&mut self, a: &Attr, stamp: Stamp, offset: u64, data: &[u8]) {
        if self.pool.is_none() {
            return;
        }
        let fp = Fingerprint::from(a);
        // Offsets come from clients (READ at any u64) and sizes from the store: every
        // step is checked, so a range touching 2^64 caches nothing instead of wrapping.
        let Some(end) = offset.checked_add(data.len() as u64) else {
            return;
        };
        let end = end.min(a.size);
        let mut p = offset.div_ceil(PAGE as u64);
        while let Some(from) = p.checked_mul(PAGE as u64).filter(|&f| f < end) {
            let len = ((end - from) as usize).min(PAGE);
            if len < PAGE && from.checked_add(len as u64) != Some(a.size) {
                break;
            }
            // `from >= offset` (p rounds offset up), so `at` is within `data`.
            let at = (from - offset) as usize;
            let Some(src) = data.get(at..at + len) else {
                return;
            };
            let Some(mut buf) = self.page_buf() else {
                return;
            };
            buf.spare_mut()[..len].copy_from_slice(src);
            buf.set_len(len);
            let entry = PageEntry {
                buf,
                len,
                stamp,
                fp,
            };
            match self.pages.insert((a.fileid, p), entry) {
                Some(old) => self.retire(old),
                None => self.order.push_back((a.fileid, p)),
            }
            p += 1;
        }
    }

    /// A free page, evicting the oldest cached pages when the pool is empty.
    fn page_buf(&mut self) -> Option<Buf> {
        let pool = self.pool.clone()?;
        loop {
            if let Some(b) = pool.alloc(PAGE) {
                return Some(b);
            }
            let victim = self.order.pop_front()?;
            if let Some(old) = self.pages.remove(&victim) {
                self.retire(old);
            }
        }
    }

    /// A page leaving the cache: freed now, or at its last unpin if an RDMA Write is
    /// still reading it (so the pool never hands out memory that is being sent).
    fn retire(&mut self, e: PageEntry) {
        let slot = e.buf.region_offset() / PAGE;
        if self.pins[slot] > 0 {
            debug_assert!(self.zombies[slot].is_none());
            self.zombies[slot] = Some(e.buf);
            self.zombie_count += 1;
        }
    }

    /// The page pools, for registering with the RDMA fabric once (the fabric keeps
    /// a handle, so the pages stay mapped while it may read them).
    pub fn page_pools(&self) -> Option<&Pools> {
        self.pool.as_ref()
    }

    /// The page memory.
    pub fn page_region(&self) -> Option<(*mut u8, usize)> {
        self.pool.as_ref().map(|p| p.region())
    }

    /// An RDMA Write from page `id` is over.
    pub fn unpin(&mut self, tag: u64) {
        let Some(n) = usize::try_from(tag).ok().and_then(|i| self.pins.get_mut(i)) else {
            debug_assert!(false, "unpin of a tag never handed out");
            return;
        };
        if *n == 0 {
            debug_assert!(false, "unpin of a page not pinned");
            return;
        }
        *n -= 1;
        if *n == 0 {
            self.pinned -= 1;
            if self.zombies[tag as usize].take().is_some() {
                self.zombie_count -= 1;
            }
        }
    }

    /// Returns a page list once its pieces were handed to the transport.
    pub fn recycle(&mut self, r: Box<PageRead>) {
        if self.spare_reads.len() < SPARE_READS {
            self.spare_reads.push(r);
        }
    }

    /// A TCP reply sent from cache pages is written (or dropped): unpins each of its
    /// pages and keeps the list for reuse.
    pub fn release(&mut self, r: Box<PageRead>) {
        for seg in r.as_slice() {
            self.unpin(seg.tag);
        }
        self.recycle(r);
    }

    /// Pages pinned by replies in flight (tests).
    pub fn pinned(&self) -> usize {
        self.pinned
    }

    /// Pinned pages that already left the cache (tests).
    pub fn zombies(&self) -> usize {
        self.zombie_count
    }

    /// Page list of `n` cached bytes of `fileid` from `offset` (checked present), each
    /// page pinned.
    fn pin_range(&mut self, fileid: u64, offset: u64, n: usize, lkey: u32) -> Box<PageRead> {
        let mut got = self
            .spare_reads
            .pop()
            .unwrap_or_else(|| Box::new(PageRead::EMPTY));
        got.n = 0;
        let mut done = 0;
        while done < n {
            let pos = offset + done as u64;
            let (pg, within) = (pos / PAGE as u64, (pos % PAGE as u64) as usize);
            let page = &self.pages[&(fileid, pg)];
            let k = (page.len - within).min(n - done);
            got.segs[got.n] = ExtSeg {
                addr: page.buf.addr() + within as u64,
                len: k as u32,
                lkey,
                tag: (page.buf.region_offset() / PAGE) as u64,
            };
            got.n += 1;
            done += k;
        }
        for seg in got.as_slice() {
            let n = &mut self.pins[seg.tag as usize];
            if *n == 0 {
                self.pinned += 1;
            }
            *n += 1;
        }
        got
    }
}

#[path = "cache_dirs.rs"]
pub mod dirs;
pub use dirs::{EmptyFill, ListedEntry, ListedPage, ListingFill, ListingHit, Made};

#[path = "cache_names.rs"]
pub mod names;

#[path = "cache_data.rs"]
mod data;
pub use names::NameFill;

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "cache_inval_tests.rs"]
mod inval_tests;
