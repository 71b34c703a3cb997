//! Which data servers are up, as the metadata server sees them (README "Scaling out
//! with pNFS", "When a data server dies"). Sans-IO: the probes themselves (an NFSv3
//! NULL over TCP every `pnfs.probe_ms`) are sent by `server::ds_probe`, one thread
//! per data server, which reports each outcome here (`probed`); placement reads
//! `is_up` (`Devices::placement_up`), and clients' error reports (LAYOUTERROR, RFC
//! 7862 §15.6; ff_ioerr4 in LAYOUTRETURN, RFC 8435 §9.1.1) are counted and ask for a
//! probe at once (`reported`): a report is a hint, the probe decides.
//!
//! The state machine per data server: up until `failures` probes in a row fail, then
//! down until one succeeds. Each server has one writer (its probe thread) and many
//! readers (LAYOUTGET on the workers, the stats endpoint): atomics only, no lock.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::thread::Thread;
use std::time::Instant;

/// A change of a data server's state, for the caller to act on and log once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// `failures` probes in a row failed: leave it out of layouts, recall its own.
    Down,
    /// A probe succeeded after it was down: place files on it again.
    Up,
}

#[derive(Default)]
struct Server {
    /// Taken as down: left out of placement. Starts up (the gateway may start
    /// before its data servers; the first failed probes say otherwise).
    down: AtomicBool,
    /// Failed probes in a row.
    fails: AtomicU32,
    /// Failed probes, all told (`nfsgw_pnfs_data_server_probe_failures_total`).
    probe_failures: AtomicU64,
    /// Errors clients reported against it (`nfsgw_pnfs_data_server_errors_total`).
    reported: AtomicU64,
    /// The I/O clients reported through it when they gave their layouts back
    /// (`Io`; `nfsgw_pnfs_data_server_reported_{ops,bytes}_total`).
    io: [AtomicU64; 4],
    /// A client reported an error: probe now rather than at the next tick.
    asked: AtomicBool,
    /// When a report was last logged, ms after `Health::born` (0: never).
    logged_ms: AtomicU64,
    /// Its probe thread, woken by a report.
    prober: OnceLock<Thread>,
    /// The generation of its device id (`DataServer::device_id_at`): one on each
    /// time it goes down (its id is deleted then, `layouts_notify.rs`).
    gen: AtomicU32,
}

/// The health of every configured data server (index = place in `[pnfs]`).
pub struct Health {
    servers: Box<[Server]>,
    failures: u32,
    born: Instant,
}

impl Default for Health {
    fn default() -> Health {
        Health::new(0, 1)
    }
}

/// One data server's numbers for the stats endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ServerCounts {
    pub up: bool,
    pub reported: u64,
    pub probe_failures: u64,
    /// The I/O clients reported through it (`Health::add_io`).
    pub io: Io,
}

/// READs and WRITEs a client did through a data server, as it reports them in a
/// LAYOUTRETURN's ff_iostats4 (RFC 8435 §9.2.1: io_info4 ffis_read and ffis_write,
/// each a count of operations and of bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Io {
    pub read_ops: u64,
    pub read_bytes: u64,
    pub write_ops: u64,
    pub write_bytes: u64,
}

impl Io {
    fn parts(&self) -> [u64; 4] {
        [
            self.read_ops,
            self.read_bytes,
            self.write_ops,
            self.write_bytes,
        ]
    }
}

/// Reports against one data server are logged at most this often (each is counted).
const LOG_EVERY_MS: u64 = 10_000;

impl Health {
    /// `n` data servers, all up; `failures` failed probes in a row mark one down.
    pub fn new(n: usize, failures: u32) -> Health {
        Health {
            servers: (0..n).map(|_| Server::default()).collect(),
            failures: failures.max(1),
            born: Instant::now(),
        }
    }

    pub fn len(&self) -> usize {
        self.servers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Whether data server `i` may be placed in a layout (an unknown index: no).
    pub fn is_up(&self, i: usize) -> bool {
        self.servers
            .get(i)
            .is_some_and(|s| !s.down.load(Ordering::SeqCst))
    }

    /// The data servers up now, one bit per index (at most 64: `MAX_DATA_SERVERS`).
    pub fn up_mask(&self) -> u64 {
        (0..self.servers.len().min(64))
            .filter(|i| self.is_up(*i))
            .fold(0, |m, i| m | 1 << i)
    }

    /// The generation of server `i`'s device id now (0 for an unknown index).
    pub fn generation(&self, i: usize) -> u32 {
        self.servers
            .get(i)
            .map_or(0, |s| s.gen.load(Ordering::SeqCst))
    }

    /// Adds what a client reported doing through server `i`: a client's numbers, so
    /// saturating at 2^64 - 1 rather than wrapping (a counter that went down would
    /// read as a reset to Prometheus; a hostile report can only pin it at the top).
    pub fn add_io(&self, i: usize, io: &Io) {
        if let Some(s) = self.servers.get(i) {
            for (c, n) in s.io.iter().zip(io.parts()) {
                let _ = c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                    Some(v.saturating_add(n))
                });
            }
        }
    }

    /// Retires server `i`'s device id: the next generation's from now on. The
    /// generation it had.
    pub fn retire(&self, i: usize) -> u32 {
        self.servers
            .get(i)
            .map_or(0, |s| s.gen.fetch_add(1, Ordering::SeqCst))
    }

    /// The outcome of one probe of server `i` (called by its one probe thread): the
    /// transition it caused, if any.
    pub fn probed(&self, i: usize, ok: bool) -> Option<Transition> {
        let s = self.servers.get(i)?;
        if ok {
            s.fails.store(0, Ordering::Relaxed);
            return s
                .down
                .swap(false, Ordering::SeqCst)
                .then_some(Transition::Up);
        }
        s.probe_failures.fetch_add(1, Ordering::Relaxed);
        let n = s.fails.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        if n >= self.failures && !s.down.swap(true, Ordering::SeqCst) {
            return Some(Transition::Down);
        }
        None
    }

    /// A client reported an error with server `i`: counted, and its probe thread is
    /// woken to probe now. True when this report should be logged (the first, then
    /// at most one per `LOG_EVERY_MS` per server).
    pub fn reported(&self, i: usize) -> bool {
        let Some(s) = self.servers.get(i) else {
            return false;
        };
        s.reported.fetch_add(1, Ordering::Relaxed);
        s.asked.store(true, Ordering::Release);
        if let Some(t) = s.prober.get() {
            t.unpark();
        }
        let now = (self.born.elapsed().as_millis() as u64).max(1);
        let last = s.logged_ms.load(Ordering::Relaxed);
        (last == 0 || now.saturating_sub(last) >= LOG_EVERY_MS)
            && s.logged_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// Whether a report asked for a probe of `i` since the last call (cleared).
    pub fn take_asked(&self, i: usize) -> bool {
        self.servers
            .get(i)
            .is_some_and(|s| s.asked.swap(false, Ordering::AcqRel))
    }

    /// Registers the thread that probes `i` (woken by reports and at shutdown).
    pub fn set_prober(&self, i: usize, t: Thread) {
        if let Some(s) = self.servers.get(i) {
            let _ = s.prober.set(t);
        }
    }

    /// Wakes every probe thread (shutdown: they look at their stop flag).
    pub fn wake_all(&self) {
        for s in self.servers.iter() {
            if let Some(t) = s.prober.get() {
                t.unpark();
            }
        }
    }

    /// Server `i`'s numbers (zeros for an unknown index).
    pub fn counts(&self, i: usize) -> ServerCounts {
        self.servers
            .get(i)
            .map(|s| ServerCounts {
                up: !s.down.load(Ordering::Relaxed),
                reported: s.reported.load(Ordering::Relaxed),
                probe_failures: s.probe_failures.load(Ordering::Relaxed),
                io: {
                    let n = |k: usize| s.io[k].load(Ordering::Relaxed);
                    Io {
                        read_ops: n(0),
                        read_bytes: n(1),
                        write_ops: n(2),
                        write_bytes: n(3),
                    }
                },
            })
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn down_after_n_failures_in_a_row_and_up_after_one_success() {
        let h = Health::new(2, 3);
        assert!(h.is_up(0) && h.is_up(1));
        assert_eq!(h.up_mask(), 0b11);
        assert_eq!(h.probed(0, false), None);
        assert_eq!(h.probed(0, false), None);
        // A success in between starts the count again.
        assert_eq!(h.probed(0, true), None);
        assert_eq!(h.probed(0, false), None);
        assert_eq!(h.probed(0, false), None);
        assert!(h.is_up(0), "two in a row is not three");
        assert_eq!(h.probed(0, false), Some(Transition::Down));
        assert!(!h.is_up(0) && h.is_up(1));
        assert_eq!(h.up_mask(), 0b10);
        // Still failing: no second transition (logged once).
        assert_eq!(h.probed(0, false), None);
        assert_eq!(h.probed(0, true), Some(Transition::Up));
        assert_eq!(h.probed(0, true), None);
        assert!(h.is_up(0));
        // And the count starts from zero after coming back.
        assert_eq!(h.probed(0, false), None);
        assert!(h.is_up(0));
        assert_eq!(h.counts(0).probe_failures, 7);
        assert_eq!(
            h.counts(1),
            ServerCounts {
                up: true,
                reported: 0,
                probe_failures: 0,
                io: Io::default(),
            }
        );
        // Reported I/O adds up per server; an unknown index is ignored.
        let io = Io {
            read_ops: 1,
            read_bytes: 10,
            write_ops: 2,
            write_bytes: 20,
        };
        h.add_io(1, &io);
        h.add_io(1, &io);
        h.add_io(9, &io);
        let want = Io {
            read_ops: 2,
            read_bytes: 20,
            write_ops: 4,
            write_bytes: 40,
        };
        assert_eq!((h.counts(1).io, h.counts(0).io), (want, Io::default()));
        // A hostile report near 2^64 pins the counters at the top, never wraps them.
        let huge = Io {
            read_ops: u64::MAX - 1,
            read_bytes: u64::MAX,
            write_ops: 0,
            write_bytes: u64::MAX / 2 + 1,
        };
        h.add_io(1, &huge);
        h.add_io(1, &huge);
        let top = Io {
            read_ops: u64::MAX,
            read_bytes: u64::MAX,
            write_ops: 4,
            write_bytes: u64::MAX,
        };
        assert_eq!(h.counts(1).io, top);
    }

    #[test]
    fn one_failure_is_enough_when_configured_so_and_unknown_indexes_are_down() {
        let h = Health::new(1, 1);
        assert_eq!(h.probed(0, false), Some(Transition::Down));
        assert!(!h.is_up(5));
        assert_eq!(h.probed(5, false), None);
        assert!(!h.reported(5));
        assert_eq!(h.counts(5), ServerCounts::default());
        // failures = 0 is taken as 1 (never "down before any probe").
        let z = Health::new(1, 0);
        assert!(z.is_up(0));
        assert_eq!(z.probed(0, false), Some(Transition::Down));
    }

    #[test]
    fn reports_are_counted_ask_for_a_probe_and_log_sparingly() {
        let h = Health::new(2, 3);
        assert!(!h.take_asked(1));
        assert!(h.reported(1), "the first report is logged");
        assert!(!h.reported(1), "the next within the window is not");
        assert!(h.take_asked(1));
        assert!(!h.take_asked(1), "cleared");
        assert_eq!(h.counts(1).reported, 2);
        assert!(h.is_up(1), "a report alone does not mark a server down");
        assert_eq!(h.counts(0).reported, 0);
    }
}
