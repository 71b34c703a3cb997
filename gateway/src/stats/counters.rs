//! Per-reactor statistics: calls by program/procedure and transport, bytes, latency
//! histograms and a few gauges.
//!
//! Sharing: one `ReactorStats` per reactor, written only by that reactor (relaxed
//! load + store: no locked instruction, no allocation, no system call) and read by the
//! stats endpoint thread with relaxed loads. Fields are monotonic counters or gauges;
//! a scrape is not a consistent snapshot across fields, which Prometheus tolerates.
//! The struct is cache-line aligned so no other data shares its first line with it.

use super::histogram::{bump, Hist};
use std::sync::atomic::{AtomicU64, Ordering};

/// NFSv3 procedure names by number (RFC 1813).
pub const NFS3_PROCS: [&str; 22] = [
    "NULL",
    "GETATTR",
    "SETATTR",
    "LOOKUP",
    "ACCESS",
    "READLINK",
    "READ",
    "WRITE",
    "CREATE",
    "MKDIR",
    "SYMLINK",
    "MKNOD",
    "REMOVE",
    "RMDIR",
    "RENAME",
    "LINK",
    "READDIR",
    "READDIRPLUS",
    "FSSTAT",
    "FSINFO",
    "PATHCONF",
    "COMMIT",
];
/// MOUNT v3 procedure names by number (RFC 1813 appendix I).
pub const MOUNT3_PROCS: [&str; 6] = ["NULL", "MNT", "DUMP", "UMNT", "UMNTALL", "EXPORT"];

/// Counting slots: every NFSv3 procedure, every MOUNT procedure, then one for
/// everything else (other programs, versions, unknown procedures, undecodable records).
pub const SLOTS: usize = NFS3_PROCS.len() + MOUNT3_PROCS.len() + 1;
const OTHER: u8 = (SLOTS - 1) as u8;

use nfs_wire::{MOUNT_PROGRAM, NFS_PROGRAM};

/// The transports a call can arrive on (label `transport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Transport {
    Tcp = 0,
    Rdma = 1,
}

pub const TRANSPORTS: [(Transport, &str); 2] = [(Transport::Tcp, "tcp"), (Transport::Rdma, "rdma")];

/// The slot of an RPC call record (which starts at the XID): a peek at the fixed
/// header words (msg type, program, version, procedure), no decoding.
#[inline]
pub fn slot_of(record: &[u8]) -> u8 {
    // One length check, then fixed offsets (no per-word bounds checks).
    let Some(h) = record.get(..24).and_then(|h| <&[u8; 24]>::try_from(h).ok()) else {
        return OTHER;
    };
    let word = |at: usize| u32::from_be_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
    match (word(4), word(12), word(16), word(20)) {
        (0, NFS_PROGRAM, 3, p) if (p as usize) < NFS3_PROCS.len() => p as u8,
        (0, MOUNT_PROGRAM, 3, p) if (p as usize) < MOUNT3_PROCS.len() => {
            (NFS3_PROCS.len() + p as usize) as u8
        }
        _ => OTHER,
    }
}

/// The `prog` and `proc` labels of a slot.
pub fn slot_labels(slot: usize) -> (&'static str, &'static str) {
    if slot < NFS3_PROCS.len() {
        ("nfs3", NFS3_PROCS[slot])
    } else if slot < NFS3_PROCS.len() + MOUNT3_PROCS.len() {
        ("mount3", MOUNT3_PROCS[slot - NFS3_PROCS.len()])
    } else {
        ("other", "OTHER")
    }
}

/// What a reactor remembers about a call until it answers it: when it arrived (clock
/// ticks), its slot and its transport, and its (client, export) pair in the
/// reactor's `tenants::TenantTable`.
#[derive(Debug, Clone, Copy, Default)]
pub struct CallStat {
    pub t0: u64,
    pub slot: u8,
    pub transport: u8,
    pub pair: u16,
}

/// One reactor's statistics. See the module docs for the sharing rule.
#[repr(align(128))]
#[derive(Debug)]
pub struct ReactorStats {
    ops: [[AtomicU64; SLOTS]; 2],
    latency: [[Hist; SLOTS]; 2],
    bytes_in: [AtomicU64; 2],
    bytes_out: [AtomicU64; 2],
    /// Gauge: calls handed to backend workers and not yet answered.
    at_workers: AtomicU64,
    /// Gauge: RPC-over-RDMA calls received and not yet answered (each holds a credit).
    rdma_in_progress: AtomicU64,
    /// Gauge: open TCP connections, copied by the reactor on some passes.
    tcp_connections: AtomicU64,
    /// Gauge: live RDMA connections, stored by the RDMA transport itself at every
    /// accept and every close (`RdmaServer::publish_connections`).
    rdma_connections: AtomicU64,
    /// Protective events of this reactor's transports (see [`GUARDS`]), copied from
    /// their own counters now and then by the reactor.
    guards: [AtomicU64; GUARDS.len()],
    /// The reactor's read cache: calls answered from it, calls it could not answer
    /// (lookups that missed), pages held. Copied from the cache's own counters with
    /// the guards.
    cache: [AtomicU64; 3],
}

/// Protective events counted by the transports (limits a hostile or broken
/// client cannot exhaust for others): `(transport label, reason label, meaning)`.
pub const GUARDS: [(&str, &str, &str); 18] = [
    (
        "tcp",
        "refused_max_connections",
        "connection refused: tcp.max_connections reached",
    ),
    (
        "tcp",
        "evicted_max_connections",
        "idle or stalled connection closed at tcp.max_connections to admit a new one",
    ),
    (
        "tcp",
        "oversize_record",
        "record mark over tcp.max_record: connection closed",
    ),
    (
        "tcp",
        "record_timeout",
        "partial record held past tcp.record_timeout_s: connection closed",
    ),
    (
        "tcp",
        "send_timeout",
        "replies not read for tcp.send_timeout_s: connection closed",
    ),
    (
        "tcp",
        "stall_reclaimed",
        "stalled partial record closed to free buffers for another client",
    ),
    (
        "tcp",
        "send_reclaimed",
        "queued replies holding shared buffers not read while buffers were short: connection closed to free them for another client",
    ),
    (
        "tcp",
        "output_stalled",
        "reading paused: queued replies over tcp.max_queued_mib",
    ),
    (
        "tcp",
        "reply_budget",
        "reading paused: replies being produced plus queued over tcp.max_queued_mib (a client pipelining large READs faster than it reads)",
    ),
    (
        "rdma",
        "refused_max_connections",
        "connection rejected: rdma.max_connections reached",
    ),
    (
        "rdma",
        "refused_no_buffers",
        "connection rejected: the receive budget cannot hold rdma.min_credits more",
    ),
    (
        "rdma",
        "credits_reduced",
        "connection granted fewer than rdma.credits (receive budget)",
    ),
    (
        "rdma",
        "read_timeout",
        "peer left RDMA Reads unanswered for rdma.read_timeout_s: connection closed",
    ),
    (
        "rdma",
        "rejected",
        "connection requests rejected for any reason",
    ),
    (
        "rdma",
        "reply_budget",
        "calls held back: replies being produced or awaiting Send completion over rdma.max_reply_mib",
    ),
    (
        "rdma",
        "send_timeout",
        "peer completed none of its outstanding replies for rdma.send_timeout_s: connection closed",
    ),
    (
        "rdma",
        "send_reclaimed",
        "outstanding replies holding shared buffers not taken while buffers were short: connection closed to free them for another client",
    ),
    (
        "rdma",
        "read_reclaimed",
        "calls holding shared buffers while their RDMA Reads went unanswered, while buffers were short: connection closed to free them for another client",
    ),
];

impl Default for ReactorStats {
    fn default() -> Self {
        let z = || AtomicU64::new(0);
        ReactorStats {
            ops: std::array::from_fn(|_| std::array::from_fn(|_| z())),
            latency: std::array::from_fn(|_| std::array::from_fn(|_| Hist::default())),
            bytes_in: [z(), z()],
            bytes_out: [z(), z()],
            at_workers: z(),
            rdma_in_progress: z(),
            tcp_connections: z(),
            rdma_connections: z(),
            guards: std::array::from_fn(|_| z()),
            cache: [z(), z(), z()],
        }
    }
}

/// Single-writer gauge decrement (never below 0).
#[inline]
fn drop_one(c: &AtomicU64) {
    c.store(
        c.load(Ordering::Relaxed).saturating_sub(1),
        Ordering::Relaxed,
    );
}

impl ReactorStats {
    // Writer side: the owning reactor only.

    /// A call arrived: count it and its bytes.
    #[inline]
    pub fn call_in(&self, transport: Transport, slot: u8, bytes: usize) {
        let t = transport as usize;
        bump(&self.ops[t][slot as usize], 1);
        bump(&self.bytes_in[t], bytes as u64);
        if transport == Transport::Rdma {
            bump(&self.rdma_in_progress, 1);
        }
    }

    /// A call was answered (or dropped) `ns` after it arrived.
    #[inline]
    pub fn call_done(&self, call: CallStat, ns: u64) {
        self.call_done_at(call, super::histogram::bucket_of(ns), ns);
    }

    /// `call_done` with `ns`'s bucket computed once by the caller (it shares it
    /// with the per-client histogram, `tenants::Tenants::answered`).
    #[inline]
    pub fn call_done_at(&self, call: CallStat, bucket: usize, ns: u64) {
        // Slots come from `slot_of`, so `get` never misses; it only spares a panic path.
        if let Some(h) = self.latency[call.transport as usize & 1].get(call.slot as usize) {
            h.record_at(bucket, ns);
        }
    }

    /// Reply bytes sent (RDMA: header, inline reply and chunk data).
    #[inline]
    pub fn bytes_out(&self, transport: Transport, bytes: usize) {
        bump(&self.bytes_out[transport as usize], bytes as u64);
    }

    /// An RDMA call's reply (or its release) went to the transport.
    #[inline]
    pub fn rdma_answered(&self) {
        drop_one(&self.rdma_in_progress);
    }

    #[inline]
    pub fn to_worker(&self) {
        bump(&self.at_workers, 1);
    }

    #[inline]
    pub fn from_worker(&self) {
        drop_one(&self.at_workers);
    }

    #[inline]
    pub fn set_tcp_connections(&self, tcp: usize) {
        self.tcp_connections.store(tcp as u64, Ordering::Relaxed);
    }

    pub fn set_rdma_connections(&self, rdma: usize) {
        self.rdma_connections.store(rdma as u64, Ordering::Relaxed);
    }

    /// Publishes the transports' protective counters, in [`GUARDS`] order.
    pub fn set_guards(&self, values: [u64; GUARDS.len()]) {
        for (g, v) in self.guards.iter().zip(values) {
            g.store(v, Ordering::Relaxed);
        }
    }

    /// Publishes the read cache's hits, misses and pages held.
    pub fn set_cache(&self, hits: u64, misses: u64, pages: u64) {
        for (c, v) in self.cache.iter().zip([hits, misses, pages]) {
            c.store(v, Ordering::Relaxed);
        }
    }

    // Reader side.

    /// The read cache's (hits, misses, pages) as last published.
    pub fn cache(&self) -> (u64, u64, u64) {
        let [h, m, p] = &self.cache;
        (
            h.load(Ordering::Relaxed),
            m.load(Ordering::Relaxed),
            p.load(Ordering::Relaxed),
        )
    }

    pub fn guard(&self, i: usize) -> u64 {
        self.guards[i].load(Ordering::Relaxed)
    }

    pub fn ops(&self, transport: Transport, slot: usize) -> u64 {
        self.ops[transport as usize][slot].load(Ordering::Relaxed)
    }

    pub fn latency(&self, transport: Transport, slot: usize) -> &Hist {
        &self.latency[transport as usize][slot]
    }

    pub fn bytes_in_total(&self, transport: Transport) -> u64 {
        self.bytes_in[transport as usize].load(Ordering::Relaxed)
    }

    pub fn bytes_out_total(&self, transport: Transport) -> u64 {
        self.bytes_out[transport as usize].load(Ordering::Relaxed)
    }

    pub fn at_workers(&self) -> u64 {
        self.at_workers.load(Ordering::Relaxed)
    }

    pub fn rdma_in_progress(&self) -> u64 {
        self.rdma_in_progress.load(Ordering::Relaxed)
    }

    pub fn tcp_connections(&self) -> u64 {
        self.tcp_connections.load(Ordering::Relaxed)
    }

    pub fn rdma_connections(&self) -> u64 {
        self.rdma_connections.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(prog: u32, vers: u32, proc_: u32) -> Vec<u8> {
        let mut v = Vec::new();
        for w in [7u32, 0, 2, prog, vers, proc_, 0, 0, 0, 0] {
            v.extend_from_slice(&w.to_be_bytes());
        }
        v
    }

    #[test]
    fn slots_from_call_headers() {
        assert_eq!(
            slot_labels(slot_of(&call(100003, 3, 1)) as usize),
            ("nfs3", "GETATTR")
        );
        assert_eq!(
            slot_labels(slot_of(&call(100003, 3, 21)) as usize),
            ("nfs3", "COMMIT")
        );
        assert_eq!(
            slot_labels(slot_of(&call(100005, 3, 1)) as usize),
            ("mount3", "MNT")
        );
        assert_eq!(
            slot_labels(slot_of(&call(100005, 3, 5)) as usize),
            ("mount3", "EXPORT")
        );
        for odd in [
            call(100003, 3, 22),
            call(100003, 4, 1),
            call(100005, 3, 6),
            call(100000, 2, 0),
            call(100003, 3, 1)[..20].to_vec(),
            Vec::new(),
        ] {
            assert_eq!(slot_of(&odd) as usize, SLOTS - 1);
        }
        // A reply (msg type 1) is not a call.
        let mut reply = call(100003, 3, 1);
        reply[7] = 1;
        assert_eq!(slot_of(&reply) as usize, SLOTS - 1);
    }

    #[test]
    fn gauges_never_go_negative() {
        let s = ReactorStats::default();
        s.from_worker();
        s.rdma_answered();
        assert_eq!(s.at_workers(), 0);
        assert_eq!(s.rdma_in_progress(), 0);
        s.call_in(Transport::Rdma, 1, 100);
        s.to_worker();
        assert_eq!(s.rdma_in_progress(), 1);
        assert_eq!(s.at_workers(), 1);
        assert_eq!(s.ops(Transport::Rdma, 1), 1);
        assert_eq!(s.bytes_in_total(Transport::Rdma), 100);
        assert_eq!(std::mem::align_of::<ReactorStats>(), 128);
    }

    /// The per-call hook sequence of a call answered by a worker (what the reactor
    /// runs: slot peek, arrival counters, two clock readings, histogram, bytes out),
    /// in a loop for `valgrind --tool=callgrind`: instructions per call = (Ir with
    /// NFSGW_COST_ITERS=N) - (Ir with 0), over N. See docs/stats.md.
    #[test]
    #[ignore]
    fn hot_path_cost_loop() {
        use crate::stats::Clock;
        use std::hint::black_box;
        let n: u64 = std::env::var("NFSGW_COST_ITERS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1_000_000);
        let s = ReactorStats::default();
        let clock = Clock::get();
        let rec = call(100003, 3, 1);
        for _ in 0..n {
            let rec = black_box(&rec[..]);
            let slot = slot_of(rec);
            s.call_in(Transport::Tcp, slot, rec.len());
            let st = CallStat {
                t0: clock.now(),
                slot,
                transport: Transport::Tcp as u8,
                ..CallStat::default()
            };
            s.to_worker();
            let st = black_box(st);
            s.from_worker();
            s.call_done(st, clock.ns_between(st.t0, clock.now()));
            s.bytes_out(Transport::Tcp, black_box(120));
        }
        assert_eq!(s.ops(Transport::Tcp, 1), n);
    }
}
