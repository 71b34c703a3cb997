//! Per-client and per-export statistics: operations by class, bytes in and out and a
//! latency histogram for each client address and each export a reactor has seen.
//!
//! Counted once per call, by (client, export) pair: a call bumps one pair's slot, and
//! the reader sums the pairs into clients and into exports (the series show both; a
//! client mostly talks to one export, so the pairs number about the clients).
//!
//! Sharing: one [`TenantTable`] per reactor, written only by that reactor (relaxed
//! load + store, as `counters`) and read by the stats endpoint, which sums the
//! reactors and keeps the top N (`tenants_expo`). The table has a fixed capacity
//! chosen at start (`stats.client_slots`): claiming a client, export or pair slot
//! writes its key and then publishes it with a release store of its `*_used`, so a
//! reader that sees a slot counted sees its key. An address that finds the table full
//! is folded into client slot 0 (`client="other"`) and counted (`full`), as is a pair
//! that finds the pair table full; nothing is allocated after start. Slots are never
//! reclaimed: the table holds the addresses of the process's life, which is what the
//! top N ranks by (docs/stats.md "Per client and per export").
//!
//! The reactor side ([`Tenants`]) keeps one line per connection (direct-mapped by its
//! id, which carries the transport's generation, so a reused id is another key): the
//! client slot, resolved at the connection's first call, and the pair of the export
//! its last call named. A call whose export is the line's costs one indexed compare
//! and its counters; the address and pair lookups run only when a connection starts
//! or changes export (counted: `nfsgw_client_lookups_total`).
//!
//! What a call is (its class and export) comes from what `classify` decoded anyway
//! ([`Seen`], after the call is classified: [`Tenants::classified`]), so counting a
//! call reads no part of its record again. Only a QoS rule needs a call's cost before
//! it is classified (to hold it); then the record is peeked once on arrival
//! ([`Tenants::call_in`], counted: `nfsgw_client_record_peeks_total`) and that peek
//! counts the call.

use super::counters::NFS3_PROCS;
use super::histogram::{Hist, BUCKETS};
use super::tenants_peek::Class;
use crate::export::ExportTable;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

pub use super::tenants_peek::{peek, peek_v3, Peek, Seen, CLASSES};

/// The pair of a call not counted yet (`CallStat::pair` until `Tenants::classified`);
/// never a slot: a table holds at most `u16::MAX` pairs.
pub const UNCOUNTED: u16 = u16::MAX;

/// Export slots per reactor. Exports are configured, not client-chosen (a handle
/// naming an unknown export counts under `export="none"`), so this bounds nothing a
/// client controls; exports past it also count under "none".
pub const EXPORT_SLOTS: usize = 256;
/// Connections whose line a reactor keeps (direct-mapped; a collision only costs
/// the evicted connection one more lookup).
const CONN_CACHE: usize = 1024;

/// One pair's counters (single writer: the owning reactor).
#[derive(Debug, Default)]
pub struct Slot {
    ops: [AtomicU64; 3],
    /// Call bytes received, reply bytes sent.
    bytes: [AtomicU64; 2],
    latency: Hist,
}

impl Slot {
    #[inline]
    fn arrive(&self, class: Class, bytes: u64) {
        super::histogram::bump(&self.ops[class as usize], 1);
        super::histogram::bump(&self.bytes[0], bytes);
    }

    #[inline]
    fn answered(&self, bucket: usize, ns: u64, out: u64) {
        super::histogram::bump(&self.bytes[1], out);
        self.latency.record_at(bucket, ns);
    }
}

/// One client's or export's counters, summed over pairs (and by the endpoint over
/// reactors).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counts {
    /// Operations by class, in [`CLASSES`] order.
    pub ops: [u64; 3],
    /// (bytes in, bytes out).
    pub bytes: (u64, u64),
    pub buckets: [u64; BUCKETS],
    pub sum_ns: u64,
}

impl Counts {
    fn add_slot(&mut self, s: &Slot) {
        for (a, b) in self.ops.iter_mut().zip(&s.ops) {
            *a += b.load(Ordering::Relaxed);
        }
        let [i, o] = &s.bytes;
        self.bytes.0 += i.load(Ordering::Relaxed);
        self.bytes.1 += o.load(Ordering::Relaxed);
        let (b, sum) = s.latency.read();
        for (a, c) in self.buckets.iter_mut().zip(b) {
            *a += c;
        }
        self.sum_ns += sum;
    }

    pub fn add(&mut self, other: &Counts) {
        for (a, b) in self.ops.iter_mut().zip(other.ops) {
            *a += b;
        }
        self.bytes.0 += other.bytes.0;
        self.bytes.1 += other.bytes.1;
        for (a, c) in self.buckets.iter_mut().zip(other.buckets) {
            *a += c;
        }
        self.sum_ns += other.sum_ns;
    }

    /// Operations of every class.
    pub fn total(&self) -> u64 {
        self.ops.iter().sum()
    }
}

/// One reactor's client, export and pair slots. See the module docs for the sharing
/// rule.
#[derive(Debug)]
pub struct TenantTable {
    /// The address of each claimed client slot, as an IPv6 address (IPv4 mapped);
    /// slot 0 is "other" (addresses that found the table full).
    keys: Box<[[AtomicU64; 2]]>,
    /// Client slots claimed, slot 0 included (published with release).
    clients_used: AtomicUsize,
    /// Connections whose address (or pair) found the table full.
    full: AtomicU64,
    /// Line misses (`Tenants::line_miss`, `Tenants::client`) and records peeked before
    /// classification (`Tenants::call_in`, only under a QoS rule): what a settled
    /// connection's call must not cost (`nfsgw_client_lookups_total`,
    /// `nfsgw_client_record_peeks_total`).
    lookups: AtomicU64,
    peeks: AtomicU64,
    /// Export slot 0 is "none": calls that name no export (NULL, MOUNT, COMPOUNDs
    /// without `SEQUENCE, PUTFH`) or an export id the export table does not hold.
    export_ids: Box<[AtomicU32]>,
    exports_used: AtomicUsize,
    /// The counters, by (client slot, export slot) pair. Pair `e < EXPORT_SLOTS` is
    /// (other, export slot `e`), claimed at start.
    pairs: Box<[Slot]>,
    /// Each claimed pair's client slot << 16 | export slot.
    pair_keys: Box<[AtomicU32]>,
    pairs_used: AtomicUsize,
}

impl TenantTable {
    /// A table with room for `client_slots` addresses besides "other".
    pub fn new(client_slots: usize) -> TenantTable {
        let clients = client_slots + 1;
        // Twice the clients (a client on two exports), the "other" pairs, within
        // what a u16 indexes, `UNCOUNTED` excluded.
        let pairs = (2 * clients + EXPORT_SLOTS).min(usize::from(UNCOUNTED));
        TenantTable {
            keys: (0..clients)
                .map(|_| [AtomicU64::new(0), AtomicU64::new(0)])
                .collect(),
            clients_used: AtomicUsize::new(1),
            full: AtomicU64::new(0),
            lookups: AtomicU64::new(0),
            peeks: AtomicU64::new(0),
            export_ids: (0..EXPORT_SLOTS).map(|_| AtomicU32::new(0)).collect(),
            exports_used: AtomicUsize::new(1),
            pairs: (0..pairs).map(|_| Slot::default()).collect(),
            pair_keys: (0..pairs as u32).map(AtomicU32::new).collect(),
            pairs_used: AtomicUsize::new(EXPORT_SLOTS),
        }
    }

    // Reader side (the stats endpoint).

    /// Every claimed client slot with its address (`None` is "other") and its
    /// counters summed over its pairs.
    pub fn clients(&self) -> Vec<(Option<IpAddr>, Counts)> {
        let (sums, _) = self.sums();
        sums.into_iter()
            .enumerate()
            .map(|(i, c)| {
                let addr = (i > 0).then(|| {
                    let [hi, lo] = &self.keys[i];
                    let v6 = (u128::from(hi.load(Ordering::Relaxed)) << 64)
                        | u128::from(lo.load(Ordering::Relaxed));
                    unmap(v6)
                });
                (addr, c)
            })
            .collect()
    }

    /// Every claimed export slot with its export id (`None` is "none") and its
    /// counters summed over its pairs.
    pub fn exports(&self) -> Vec<(Option<u16>, Counts)> {
        let (_, sums) = self.sums();
        sums.into_iter()
            .enumerate()
            .map(|(i, c)| {
                let id = (i > 0).then(|| self.export_ids[i].load(Ordering::Relaxed) as u16);
                (id, c)
            })
            .collect()
    }

    /// The pairs summed by client slot and by export slot.
    fn sums(&self) -> (Vec<Counts>, Vec<Counts>) {
        // Pairs first: a pair seen claimed names slots claimed before it.
        let pairs = self.pairs_used.load(Ordering::Acquire);
        let clients = self.clients_used.load(Ordering::Acquire);
        let exports = self.exports_used.load(Ordering::Acquire);
        let mut c = vec![Counts::default(); clients];
        let mut e = vec![Counts::default(); exports];
        for (s, k) in self.pairs[..pairs].iter().zip(&self.pair_keys[..pairs]) {
            let k = k.load(Ordering::Relaxed) as usize;
            let (ci, ei) = (k >> 16, k & 0xffff);
            if ei >= exports {
                continue; // an "other" pair of an export slot not claimed: empty
            }
            c[ci].add_slot(s);
            e[ei].add_slot(s);
        }
        (c, e)
    }

    /// Connections whose address found the table full (their calls count as "other").
    pub fn full(&self) -> u64 {
        self.full.load(Ordering::Relaxed)
    }

    /// Line misses so far (address or pair lookups).
    pub fn lookups(&self) -> u64 {
        self.lookups.load(Ordering::Relaxed)
    }

    /// Records peeked before classification so far.
    pub fn peeks(&self) -> u64 {
        self.peeks.load(Ordering::Relaxed)
    }

    /// Client addresses held (not counting "other").
    pub fn clients_held(&self) -> usize {
        self.clients_used.load(Ordering::Acquire) - 1
    }
}

fn key_of(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().to_bits(),
        IpAddr::V6(v6) => v6.to_bits(),
    }
}

fn unmap(key: u128) -> IpAddr {
    let v6 = std::net::Ipv6Addr::from_bits(key);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// A connection's line: its key, the export id its last call named (`NO_EXPORT`: none,
/// `UNSET`: no call yet), its client slot and that pair.
#[derive(Debug, Clone, Copy)]
struct Line {
    key: u64,
    export: u32,
    client: u16,
    pair: u16,
}

const NO_EXPORT: u32 = 1 << 16;
const UNSET: u32 = u32::MAX;
const EMPTY: Line = Line {
    key: 0,
    export: UNSET,
    client: 0,
    pair: 0,
};

/// The reactor's side of its table: the lines and lookups that pick a call's pair.
/// Owned by the reactor thread (plain memory); only `TenantTable` is shared.
pub struct Tenants {
    table: Arc<TenantTable>,
    exports: Arc<ExportTable>,
    /// A fixed-size array: indexing by a masked hash needs no bounds check.
    lines: Box<[Line; CONN_CACHE]>,
    /// Open addressing over claimed client slots by address (0 = empty).
    index: Box<[u16]>,
    /// The address of each client slot (a plain copy of `TenantTable::keys`).
    addrs: Box<[u128]>,
    /// Export id -> slot (0 = not seen yet or unknown).
    export_slot: Box<[u16]>,
    /// Open addressing over claimed pairs (past the "other" ones) by key (0 = empty).
    pair_index: Box<[u16]>,
    /// `stats.per_client`: off, a call costs the one branch on it (`call_in`,
    /// `answered`).
    on: bool,
}

const OCCUPIED: u64 = 1 << 63;

impl Tenants {
    pub fn new(table: Arc<TenantTable>, exports: Arc<ExportTable>, on: bool) -> Tenants {
        let cap = table.keys.len();
        Tenants {
            lines: Box::new([EMPTY; CONN_CACHE]),
            index: vec![0; (cap * 2).next_power_of_two()].into_boxed_slice(),
            addrs: vec![0; cap].into_boxed_slice(),
            export_slot: vec![0; 1 << 16].into_boxed_slice(),
            pair_index: vec![0; (table.pairs.len() * 2).next_power_of_two()].into_boxed_slice(),
            table,
            exports,
            on,
        }
    }

    /// A call arrived in `rec` (its `stats::slot_of` is `slot`) on connection `conn`
    /// from `peer`, before it is classified. Without a QoS rule (`qos` false) nothing
    /// happens here: (`UNCOUNTED`, `Peek::NONE`), and `classified` counts the call from
    /// what `classify` decodes. Under a rule the gate needs the call's cost now: the
    /// record is peeked (once, for the gate and these counters) and the call counted
    /// for its pair, returned (for `answered`) with the peek.
    #[inline]
    pub fn call_in(
        &mut self,
        conn: u64,
        rdma: bool,
        peer: &SocketAddr,
        rec: &[u8],
        slot: u8,
        qos: bool,
    ) -> (u16, Peek) {
        if !qos {
            return (UNCOUNTED, Peek::NONE);
        }
        super::histogram::bump(&self.table.peeks, 1);
        // A slot below the NFSv3 procedures' is an NFSv3 call whose header
        // `slot_of` checked: the peek starts at its credential.
        let p = if usize::from(slot) < NFS3_PROCS.len() {
            peek_v3(rec, u32::from(slot))
        } else {
            peek(rec)
        };
        let mut pair = UNCOUNTED;
        let seen = Seen {
            class: p.class,
            export: p.export,
        };
        self.classified(&mut pair, conn, rdma, peer, seen, rec.len());
        (pair, p)
    }

    /// A call of `len` bytes on connection `conn` from `peer` was classified, and
    /// `classify` saw `seen`: counts it for its pair, stored in `pair`, unless it was
    /// counted already (`pair` is not `UNCOUNTED`: peeked on arrival under a QoS rule,
    /// or classified before and parked).
    #[inline]
    pub fn classified(
        &mut self,
        pair: &mut u16,
        conn: u64,
        rdma: bool,
        peer: &SocketAddr,
        seen: Seen,
        len: usize,
    ) {
        if !self.on || *pair != UNCOUNTED {
            return;
        }
        *pair = self.pair_of(conn, rdma, peer, seen.export);
        if let Some(s) = self.table.pairs.get(usize::from(*pair)) {
            s.arrive(seen.class, len as u64);
        }
    }

    /// A call was answered `ns` (in histogram bucket `bucket`, `bucket_of(ns)`, which
    /// the reactor's own histogram shares) after it arrived, with a reply of `out`
    /// bytes.
    #[inline]
    pub fn answered(&self, pair: u16, bucket: usize, ns: u64, out: usize) {
        if !self.on {
            return;
        }
        if let Some(s) = self.table.pairs.get(usize::from(pair)) {
            s.answered(bucket, ns, out as u64);
        }
    }

    /// Whether calls are counted (`stats.per_client`): `classify` decodes what
    /// `classified` needs only then.
    #[inline]
    pub fn counting(&self) -> bool {
        self.on
    }

    pub fn table(&self) -> &Arc<TenantTable> {
        &self.table
    }

    /// Line misses so far (`TenantTable::lookups`).
    pub fn lookups(&self) -> u64 {
        self.table.lookups()
    }

    /// The pair of a call on connection `conn` (a transport's connection id as a
    /// number: slot and generation, unique among this reactor's connections of that
    /// transport over its life; `rdma` tells the two apart) from `peer` naming
    /// `export`.
    #[inline]
    fn pair_of(&mut self, conn: u64, rdma: bool, peer: &SocketAddr, export: Option<u16>) -> u16 {
        let key = conn | OCCUPIED | (u64::from(rdma) << 62);
        let want = export.map_or(NO_EXPORT, u32::from);
        let at = (mix(key) as usize) & (CONN_CACHE - 1);
        let l = &self.lines[at];
        if l.key == key && l.export == want {
            return l.pair;
        }
        self.line_miss(at, key, peer, export)
    }

    /// The connection's first call, a change of export, or an evicted line.
    #[cold]
    fn line_miss(&mut self, at: usize, key: u64, peer: &SocketAddr, export: Option<u16>) -> u16 {
        super::histogram::bump(&self.table.lookups, 1);
        let l = self.lines[at];
        let client = if l.key == key {
            l.client
        } else {
            self.resolve(key_of(peer.ip()))
        };
        let e = self.export(export);
        let pair = self.pair(client, e);
        self.lines[at] = Line {
            key,
            export: export.map_or(NO_EXPORT, u32::from),
            client,
            pair,
        };
        pair
    }

    /// The client slot of connection `conn` from `peer` (resolved once per
    /// connection, as `pair_of` does).
    pub fn client(&mut self, conn: u64, rdma: bool, peer: IpAddr) -> u16 {
        let key = conn | OCCUPIED | (u64::from(rdma) << 62);
        let at = (mix(key) as usize) & (CONN_CACHE - 1);
        if self.lines[at].key == key {
            return self.lines[at].client;
        }
        super::histogram::bump(&self.table.lookups, 1);
        let client = self.resolve(key_of(peer));
        self.lines[at] = Line {
            key,
            client,
            ..EMPTY
        };
        client
    }

    /// The slot of an address: found, claimed, or 0 ("other") when the table is full.
    fn resolve(&mut self, addr: u128) -> u16 {
        let mask = self.index.len() - 1;
        let mut at = (mix((addr as u64) ^ ((addr >> 64) as u64)) as usize) & mask;
        loop {
            match self.index[at] {
                0 => break,
                s if self.addrs[s as usize] == addr => return s,
                _ => at = (at + 1) & mask,
            }
        }
        let t = &self.table;
        let used = t.clients_used.load(Ordering::Relaxed);
        if used >= t.keys.len() || used > usize::from(u16::MAX) {
            super::histogram::bump(&t.full, 1);
            return 0;
        }
        let [hi, lo] = &t.keys[used];
        hi.store((addr >> 64) as u64, Ordering::Relaxed);
        lo.store(addr as u64, Ordering::Relaxed);
        t.clients_used.store(used + 1, Ordering::Release);
        self.addrs[used] = addr;
        self.index[at] = used as u16;
        used as u16
    }

    /// The pair of client slot `client` and export slot `e`: found, claimed, or the
    /// (other, `e`) pair when the pair table is full (counted as `full`).
    fn pair(&mut self, client: u16, e: u16) -> u16 {
        if client == 0 {
            return e;
        }
        let key = (u32::from(client) << 16) | u32::from(e);
        let t = &self.table;
        let mask = self.pair_index.len() - 1;
        let mut at = (mix(u64::from(key)) as usize) & mask;
        loop {
            match self.pair_index[at] {
                0 => break,
                p if t.pair_keys[usize::from(p)].load(Ordering::Relaxed) == key => return p,
                _ => at = (at + 1) & mask,
            }
        }
        let used = t.pairs_used.load(Ordering::Relaxed);
        if used >= t.pairs.len() {
            super::histogram::bump(&t.full, 1);
            return e;
        }
        t.pair_keys[used].store(key, Ordering::Relaxed);
        t.pairs_used.store(used + 1, Ordering::Release);
        self.pair_index[at] = used as u16;
        used as u16
    }

    /// The export slot of export id `id` (`None`: the call names no export).
    #[inline]
    pub fn export(&mut self, id: Option<u16>) -> u16 {
        let Some(id) = id else { return 0 };
        match self.export_slot[usize::from(id)] {
            0 => self.claim_export(id),
            s => s,
        }
    }

    /// First call naming export `id`: a slot if the export table holds the id (a
    /// forged handle's id does not claim one; it counts under "none").
    #[cold]
    fn claim_export(&mut self, id: u16) -> u16 {
        if self.exports.load().get(id).is_none() {
            return 0;
        }
        let t = &self.table;
        let used = t.exports_used.load(Ordering::Relaxed);
        if used >= t.export_ids.len() {
            return 0;
        }
        t.export_ids[used].store(u32::from(id), Ordering::Relaxed);
        t.exports_used.store(used + 1, Ordering::Release);
        self.export_slot[usize::from(id)] = used as u16;
        used as u16
    }
}

/// A multiplicative hash (Fibonacci hashing): the top bits of `x * 2^64/φ`, folded.
#[inline]
fn mix(x: u64) -> u64 {
    let h = x.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    h ^ (h >> 32)
}

/// A connection id as the number [`Tenants::client`] keys by: `Hash` of the
/// engine's id (its slot and generation) into a hasher that keeps the words.
pub fn conn_key(id: &impl std::hash::Hash) -> u64 {
    let mut h = Words(0);
    id.hash(&mut h);
    h.0
}

/// A hasher that keeps the last 64 bits written (two u32 words: slot, generation).
struct Words(u64);

impl std::hash::Hasher for Words {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | u64::from(*b);
        }
    }

    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0 << 32) | u64::from(n);
    }
}

#[cfg(test)]
#[path = "tenants_tests.rs"]
mod tests;
