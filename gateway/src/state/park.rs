//! Parking (`[ha]`, docs/ha.md "What a gateway that does not serve answers"): a
//! COMPOUND that reaches a gateway whose fence is shut is held, unanswered, until the
//! fence opens, and then runs as any other: the client gets the successor's real
//! answer (NFS4ERR_BADSESSION for the dead holder's session, RFC 8881 §18.46.3, and so
//! on) at the first moment it can, instead of NFS4ERR_DELAY, after which the Linux
//! client backs off 0.1 s doubling to 15 s and asks again long after the takeover.
//!
//! Bounded on every side: a COMPOUND parks at most `long` (a takeover in sight: the
//! standby watches a holder whose lease is overdue, or it holds the lease and is
//! reading the record) or `short` (none in sight: a standby with a live holder, a
//! holder past its deadline), then gets NFS4ERR_DELAY as before; at most
//! `per_conn` COMPOUNDs of one connection and `total` in all park (beyond: DELAY at
//! once). A parked COMPOUND holds its worker thread, its own connection's reply charge
//! (TCP) or credit (RPC-over-RDMA), its request (a WRITE's payload) and the pool buffer
//! its reply will go in (a large one for a READ or WRITE: `total` parks pin at most 16
//! of the pools' buffers, a third of one reactor's default 48 large ones), so `total`
//! is a quarter of the workers: NFSv3, which every gateway serves, keeps the rest.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a parked COMPOUND looks at the fence (one atomic load and a clock read).
const TICK: Duration = Duration::from_millis(5);

/// The bounds and the parked COMPOUNDs of one gateway.
pub struct Park {
    /// A takeover is in sight (set by the `ha` keeper at each look at the lease).
    in_sight: AtomicBool,
    short: Duration,
    long: Duration,
    per_conn: usize,
    total: usize,
    /// Parked COMPOUNDs per connection (the peer's address and port). The lock is
    /// taken twice per park, never on a serving gateway's path.
    parked: Mutex<HashMap<SocketAddr, usize>>,
}

/// What a park came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parked {
    /// The fence opened: run the COMPOUND.
    Serving,
    /// Not parked, or the bound passed: answer NFS4ERR_DELAY.
    Delay,
}

/// Times COMPOUNDs parked, and of those, how many then ran (`nfsgw_ha_parked_total`).
static PARKED: AtomicU64 = AtomicU64::new(0);
static PARKED_SERVED: AtomicU64 = AtomicU64::new(0);
/// COMPOUNDs answered NFS4ERR_DELAY at once because the bounds were full.
static PARK_FULL: AtomicU64 = AtomicU64::new(0);

/// (parked, parked then served, refused a park because the bounds were full).
pub fn counts() -> (u64, u64, u64) {
    (
        PARKED.load(Ordering::Relaxed),
        PARKED_SERVED.load(Ordering::Relaxed),
        PARK_FULL.load(Ordering::Relaxed),
    )
}

impl Park {
    /// Parks nothing (no `[ha]`: the fence never shuts).
    pub fn off() -> Park {
        Park::new(Duration::ZERO, Duration::ZERO, 0, 0)
    }

    /// `short`/`long`: the longest park without/with a takeover in sight; `per_conn`,
    /// `total`: how many may park at once.
    pub fn new(short: Duration, long: Duration, per_conn: usize, total: usize) -> Park {
        Park {
            in_sight: AtomicBool::new(false),
            short,
            long,
            per_conn,
            total,
            parked: Mutex::new(HashMap::new()),
        }
    }

    /// The bounds for an identity lease `lease` and `workers` backend workers.
    /// Without a takeover in sight, `4L/5`: a client that reconnects to the standby
    /// as soon as its holder dies (RPC-over-RDMA, both on one address) comes before
    /// the holder looks overdue (`L/2 + L/10` after its last renewal, plus a look),
    /// and an NFS4ERR_DELAY for its SEQUENCE would cost it Linux's 15 s retry
    /// (measured: 18.7 s of pause with `L/5` here); a client that reached a standby
    /// by mistake waits as long, then gets DELAY as before. With one in sight,
    /// `L + L/4`: the takeover comes within `L + L/5` of the holder's last renewal.
    /// A quarter of the workers park at most (none with fewer than 4: NFSv3 keeps
    /// them all), and no more than 16.
    pub fn for_lease(lease: Duration, workers: usize) -> Park {
        Park::new(lease * 4 / 5, lease + lease / 4, 4, (workers / 4).min(16))
    }

    /// Whether a takeover is in sight (`nfsgw_ha_takeover_imminent`).
    pub fn in_sight(&self) -> bool {
        self.in_sight.load(Ordering::Relaxed)
    }

    pub fn set_in_sight(&self, on: bool) {
        self.in_sight.store(on, Ordering::Relaxed);
    }

    /// Parks one COMPOUND of connection `conn` until `serving()` or its bound.
    pub fn wait(&self, conn: SocketAddr, serving: impl Fn() -> bool) -> Parked {
        if serving() {
            return Parked::Serving;
        }
        if self.total == 0 {
            return Parked::Delay;
        }
        if !self.enter(conn) {
            PARK_FULL.fetch_add(1, Ordering::Relaxed);
            return Parked::Delay;
        }
        PARKED.fetch_add(1, Ordering::Relaxed);
        let t0 = Instant::now();
        let r = loop {
            if serving() {
                PARKED_SERVED.fetch_add(1, Ordering::Relaxed);
                break Parked::Serving;
            }
            let bound = if self.in_sight() {
                self.long
            } else {
                self.short
            };
            if t0.elapsed() >= bound {
                break Parked::Delay;
            }
            std::thread::sleep(TICK);
        };
        self.leave(conn);
        r
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SocketAddr, usize>> {
        self.parked.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn enter(&self, conn: SocketAddr) -> bool {
        let mut m = self.lock();
        let all: usize = m.values().sum();
        let mine = m.get(&conn).copied().unwrap_or(0);
        if all >= self.total || mine >= self.per_conn {
            return false;
        }
        m.insert(conn, mine + 1);
        true
    }

    fn leave(&self, conn: SocketAddr) {
        let mut m = self.lock();
        if let Some(n) = m.get_mut(&conn) {
            *n -= 1;
            if *n == 0 {
                m.remove(&conn);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    /// A parked COMPOUND runs as soon as the fence opens, not at its bound.
    #[test]
    fn a_park_ends_when_the_fence_opens() {
        let p = Park::new(Duration::from_secs(5), Duration::from_secs(5), 1, 1);
        let open = Arc::new(AtomicBool::new(false));
        let o = open.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(150));
            o.store(true, Ordering::Relaxed);
        });
        let t0 = Instant::now();
        assert_eq!(
            p.wait(addr(1), || open.load(Ordering::Relaxed)),
            Parked::Serving
        );
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(150) && took < Duration::from_secs(1),
            "{took:?}"
        );
        t.join().unwrap();
    }

    /// Without a takeover in sight the short bound applies; with one, the long one.
    #[test]
    fn the_bound_follows_the_takeover_in_sight() {
        // Bounds far apart, so a late wake-up on a loaded machine is not the long one.
        let p = Park::new(
            Duration::from_millis(100),
            Duration::from_millis(2000),
            1,
            1,
        );
        let t0 = Instant::now();
        assert_eq!(p.wait(addr(1), || false), Parked::Delay);
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_millis(100) && took < Duration::from_millis(1500),
            "{took:?}"
        );
        p.set_in_sight(true);
        let t0 = Instant::now();
        assert_eq!(p.wait(addr(1), || false), Parked::Delay);
        assert!(t0.elapsed() >= Duration::from_millis(2000));
    }

    /// Past `per_conn` on one connection, or `total` in all, a COMPOUND is not parked
    /// (NFS4ERR_DELAY at once); a slot freed is taken again.
    #[test]
    fn parks_are_bounded_per_connection_and_in_total() {
        let p = Arc::new(Park::new(
            Duration::from_secs(5),
            Duration::from_secs(5),
            2,
            3,
        ));
        let open = Arc::new(AtomicBool::new(false));
        let mut held = Vec::new();
        for port in [1, 1, 2] {
            let (p, open) = (p.clone(), open.clone());
            held.push(std::thread::spawn(move || {
                p.wait(addr(port), || open.load(Ordering::Relaxed))
            }));
        }
        let t0 = Instant::now();
        while p.lock().values().sum::<usize>() < 3 {
            assert!(t0.elapsed() < Duration::from_secs(2), "never parked");
            std::thread::sleep(Duration::from_millis(5));
        }
        let t0 = Instant::now();
        // A third of connection 1 (its bound), and one of connection 3 (the total).
        assert_eq!(p.wait(addr(1), || false), Parked::Delay);
        assert_eq!(p.wait(addr(3), || false), Parked::Delay);
        // Parked, either would wait 5 s.
        assert!(t0.elapsed() < Duration::from_secs(2), "refused at once");
        open.store(true, Ordering::Relaxed);
        for h in held {
            assert_eq!(h.join().unwrap(), Parked::Serving);
        }
        assert!(p.lock().is_empty());
        assert_eq!(p.wait(addr(3), || true), Parked::Serving);
        let t0 = Instant::now();
        assert_eq!(Park::off().wait(addr(1), || false), Parked::Delay);
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    }
}
