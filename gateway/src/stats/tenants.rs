//! Per-client and per-export statistics: operations by class, bytes in and out and a
//! latency histogram for each client address and each export a reactor has seen.
//!
//! Sharing: one [`TenantTable`] per reactor, written only by that reactor (relaxed
//! load + store, as `counters`) and read by the stats endpoint, which sums the
//! reactors and keeps the top N (`tenants_expo`). The table has a fixed capacity
//! chosen at start (`stats.client_slots`): claiming a slot writes its address and
//! then publishes it with a release store of `clients_used`, so a reader that sees a
//! slot counted sees its address. An address that finds the table full is folded
//! into slot 0 (`client="other"`) and counted (`full`); nothing is allocated after
//! start. Slots are never reclaimed: the table holds the addresses of the process's
//! life, which is what the top N ranks by (docs/stats.md "Per client and per export").
//!
//! The reactor side ([`Tenants`]) resolves a connection's slot at its first call and
//! keeps it in a direct-mapped cache keyed by the connection, so a call pays one
//! indexed compare, not an address lookup.

use super::histogram::{bucket_of, Hist};
use super::tenants_peek::Class;
use crate::export::ExportTable;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

pub use super::tenants_peek::{peek, Peek, CLASSES};

/// Export slots per reactor. Exports are configured, not client-chosen (a handle
/// naming an unknown export counts under `export="none"`), so this bounds nothing a
/// client controls; exports past it also count under "none".
pub const EXPORT_SLOTS: usize = 256;
/// Connections whose client slot a reactor remembers (direct-mapped; a collision
/// only costs the evicted connection one more address lookup).
const CONN_CACHE: usize = 1024;

/// One client's or one export's counters (single writer: the owning reactor).
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

    /// Operations by class, in [`CLASSES`] order.
    pub fn ops(&self) -> [u64; 3] {
        self.ops.each_ref().map(|a| a.load(Ordering::Relaxed))
    }

    /// (bytes in, bytes out).
    pub fn bytes(&self) -> (u64, u64) {
        let [i, o] = &self.bytes;
        (i.load(Ordering::Relaxed), o.load(Ordering::Relaxed))
    }

    pub fn latency(&self) -> &Hist {
        &self.latency
    }
}

/// One reactor's client and export slots. See the module docs for the sharing rule.
#[derive(Debug)]
pub struct TenantTable {
    /// Slot 0 is "other" (addresses that found the table full).
    clients: Box<[Slot]>,
    /// The address of each claimed client slot, as an IPv6 address (IPv4 mapped).
    keys: Box<[[AtomicU64; 2]]>,
    /// Client slots claimed, slot 0 included (published with release).
    clients_used: AtomicUsize,
    /// Connections whose address found the table full.
    full: AtomicU64,
    /// Slot 0 is "none": calls that name no export (NULL, MOUNT, COMPOUNDs without
    /// `SEQUENCE, PUTFH`) or an export id the export table does not hold.
    exports: Box<[Slot]>,
    export_ids: Box<[AtomicU32]>,
    exports_used: AtomicUsize,
}

impl TenantTable {
    /// A table with room for `client_slots` addresses besides "other".
    pub fn new(client_slots: usize) -> TenantTable {
        let slots = |n: usize| (0..n).map(|_| Slot::default()).collect::<Box<[_]>>();
        TenantTable {
            clients: slots(client_slots + 1),
            keys: (0..client_slots + 1)
                .map(|_| [AtomicU64::new(0), AtomicU64::new(0)])
                .collect(),
            clients_used: AtomicUsize::new(1),
            full: AtomicU64::new(0),
            exports: slots(EXPORT_SLOTS),
            export_ids: (0..EXPORT_SLOTS).map(|_| AtomicU32::new(0)).collect(),
            exports_used: AtomicUsize::new(1),
        }
    }

    // Reader side (the stats endpoint).

    /// Every claimed client slot with its address; `None` is "other".
    pub fn clients(&self) -> impl Iterator<Item = (Option<IpAddr>, &Slot)> {
        let used = self.clients_used.load(Ordering::Acquire);
        self.clients[..used].iter().enumerate().map(|(i, s)| {
            let addr = (i > 0).then(|| {
                let [hi, lo] = &self.keys[i];
                let v6 = (u128::from(hi.load(Ordering::Relaxed)) << 64)
                    | u128::from(lo.load(Ordering::Relaxed));
                unmap(v6)
            });
            (addr, s)
        })
    }

    /// Every claimed export slot with its export id; `None` is "none".
    pub fn exports(&self) -> impl Iterator<Item = (Option<u16>, &Slot)> {
        let used = self.exports_used.load(Ordering::Acquire);
        self.exports[..used].iter().enumerate().map(|(i, s)| {
            let id = (i > 0).then(|| self.export_ids[i].load(Ordering::Relaxed) as u16);
            (id, s)
        })
    }

    /// Connections whose address found the table full (their calls count as "other").
    pub fn full(&self) -> u64 {
        self.full.load(Ordering::Relaxed)
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

/// The reactor's side of its table: the lookups that pick a call's slots. Owned by
/// the reactor thread (plain memory); only `TenantTable` is shared.
pub struct Tenants {
    table: Arc<TenantTable>,
    exports: Arc<ExportTable>,
    /// (connection key | OCCUPIED, address, slot) by connection key.
    conns: Box<[(u64, u128, u16)]>,
    /// Open addressing over claimed client slots by address (0 = empty).
    index: Box<[u16]>,
    /// The address of each client slot (a plain copy of `TenantTable::keys`).
    addrs: Box<[u128]>,
    /// Export id -> slot (0 = not seen yet or unknown).
    export_slot: Box<[u16]>,
    /// `stats.per_client`: off, a call costs the one branch on it (`call_in`,
    /// `answered`).
    on: bool,
}

const OCCUPIED: u64 = 1 << 63;

impl Tenants {
    pub fn new(table: Arc<TenantTable>, exports: Arc<ExportTable>, on: bool) -> Tenants {
        let cap = table.clients.len();
        Tenants {
            conns: vec![(0, 0, 0); CONN_CACHE].into_boxed_slice(),
            index: vec![0; (cap * 2).next_power_of_two()].into_boxed_slice(),
            addrs: vec![0; cap].into_boxed_slice(),
            export_slot: vec![0; 1 << 16].into_boxed_slice(),
            table,
            exports,
            on,
        }
    }

    /// A call arrived in `rec` on connection `conn` from `peer`: picks its client
    /// and export slots (`client`, `export`), counts it and returns them, or
    /// (0, 0) uncounted when `stats.per_client` is off.
    #[inline]
    pub fn call_in(&mut self, conn: u64, rdma: bool, peer: IpAddr, rec: &[u8]) -> (u16, u16) {
        if !self.on {
            return (0, 0);
        }
        let client = self.client(conn, rdma, peer);
        let call = peek(rec);
        let export = self.export(call.export);
        self.arrive(client, export, call.class, rec.len());
        (client, export)
    }

    pub fn table(&self) -> &Arc<TenantTable> {
        &self.table
    }

    /// The client slot of a call on connection `conn` (a transport's connection id
    /// as a number, unique among this reactor's live connections of that
    /// transport; `rdma` tells the two apart) from `peer`. The address is compared
    /// too, so a connection id reused by a later connection is resolved again.
    #[inline]
    pub fn client(&mut self, conn: u64, rdma: bool, peer: IpAddr) -> u16 {
        let key = conn | OCCUPIED | (u64::from(rdma) << 62);
        let addr = key_of(peer);
        let at = (mix(key) as usize) & (CONN_CACHE - 1);
        let e = &self.conns[at];
        if e.0 == key && e.1 == addr {
            return e.2;
        }
        let slot = self.resolve(addr);
        self.conns[at] = (key, addr, slot);
        slot
    }

    /// The slot of an address: found, claimed, or 0 ("other") when the table is full.
    #[cold]
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
        if used >= t.clients.len() || used > usize::from(u16::MAX) {
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
        if used >= t.exports.len() {
            return 0;
        }
        t.export_ids[used].store(u32::from(id), Ordering::Relaxed);
        t.exports_used.store(used + 1, Ordering::Release);
        self.export_slot[usize::from(id)] = used as u16;
        used as u16
    }

    /// A call arrived: counts it and its bytes for its client and export.
    #[inline]
    pub fn arrive(&self, client: u16, export: u16, class: Class, bytes: usize) {
        let t = &self.table;
        if let Some(s) = t.clients.get(usize::from(client)) {
            s.arrive(class, bytes as u64);
        }
        if let Some(s) = t.exports.get(usize::from(export)) {
            s.arrive(class, bytes as u64);
        }
    }

    /// A call was answered `ns` after it arrived with a reply of `out` bytes.
    #[inline]
    pub fn answered(&self, client: u16, export: u16, ns: u64, out: usize) {
        if !self.on {
            return;
        }
        let t = &self.table;
        let b = bucket_of(ns);
        if let Some(s) = t.clients.get(usize::from(client)) {
            s.answered(b, ns, out as u64);
        }
        if let Some(s) = t.exports.get(usize::from(export)) {
            s.answered(b, ns, out as u64);
        }
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
