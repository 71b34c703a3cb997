//! RDMA listeners that bind after start, for `[ha]` (docs/ha.md "RPC-over-RDMA
//! through a takeover").
//!
//! An RDMA connection manager binds only to an address one of this host's RDMA
//! devices has (there is no IP_FREEBIND for `rdma_bind_addr`), and refuses an
//! address and port another process listens on. A standby's service address is
//! usually not here yet (keepalived moves it with the identity), or, with two
//! gateways on one host, is still held by the active that is about to die. Without
//! `[ha]` that is a start-up error, as before. With `[ha]` the gateway starts on TCP
//! alone, says so, and one thread retries the RDMA listeners every `RETRY` until they
//! bind; each reactor adopts its own at an idle pass (`ReactorState::adopt_late_rdma`).
//!
//! Ownership: the thread builds every reactor's `RdmaServer` at once (all or none:
//! one address, one listener group) and hands each over through its reactor's
//! `LateRdma`; from then on the server is the reactor's alone, as if made at start.

use engine::rdma::server::RdmaServer;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the thread tries the listeners again.
pub const RETRY: Duration = Duration::from_millis(250);

/// One reactor's mailbox for its late RDMA server. The reactor reads `ready` (one
/// relaxed load) on idle passes only while it has no RDMA server; the lock is taken
/// once, at the hand-over.
#[derive(Default)]
pub struct LateRdma {
    ready: AtomicBool,
    slot: Mutex<Option<RdmaServer>>,
}

impl LateRdma {
    /// Whether a server waits to be adopted.
    pub fn pending(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    fn put(&self, r: RdmaServer) {
        *self.slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
        self.ready.store(true, Ordering::Release);
    }

    /// The server handed over, once.
    pub fn take(&self) -> Option<RdmaServer> {
        if !self.ready.swap(false, Ordering::Acquire) {
            return None;
        }
        self.slot.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// Whether opening the RDMA listener failed because the address is not ours to
/// listen on yet (not on any RDMA device of this host, or in use by another
/// process): what `[ha]` waits out. Any other failure stays a start-up error.
pub fn address_not_yet(e: &anyhow::Error) -> bool {
    e.chain()
        .filter_map(|c| c.downcast_ref::<io::Error>())
        .any(|io| {
            matches!(
                io.kind(),
                io::ErrorKind::AddrInUse | io::ErrorKind::AddrNotAvailable
            )
        })
}

/// Why the verbs provider could not open `addr`, the `io::Error` kept as the source,
/// not only its text: an address in use by the active gateway or not yet on this host
/// is then waited out under `[ha]` (`address_not_yet` looks for its kind). Only the
/// `rdma` build opens verbs.
#[cfg_attr(not(feature = "rdma"), allow(dead_code))]
pub fn verbs_open_error(want: Option<&str>, addr: SocketAddr, e: io::Error) -> anyhow::Error {
    let why = match want {
        Some(w) => format!(
            "rdma.device = \"{w}\" with rdma.listen = \"{addr}\"; set rdma.listen to an \
             address of {w} (or 0.0.0.0), or remove rdma.device"
        ),
        None => format!(
            "rdma.provider = \"verbs\": no RDMA device for rdma.listen = \"{addr}\"; load \
             rdma_rxe and add a link (rdma link add rxe0 type rxe netdev eth0), set \
             rdma.device, or use provider \"soft\""
        ),
    };
    anyhow::Error::new(e).context(why)
}

/// Starts the retry thread: `make` builds one server per reactor (in reactor order);
/// on success each goes to its reactor's mailbox and its doorbell is rung. Ends
/// when the servers are handed over or `stop` is set.
pub fn spawn(
    listen: String,
    mailboxes: Vec<(Arc<LateRdma>, Arc<engine::ring::Doorbell>)>,
    stop: Arc<AtomicBool>,
    make: impl Fn() -> anyhow::Result<Vec<RdmaServer>> + Send + 'static,
) -> io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("rdma-late".into())
        .spawn(move || {
            let mut tries = 0u64;
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(RETRY);
                tries += 1;
                match make() {
                    Ok(servers) => {
                        debug_assert_eq!(servers.len(), mailboxes.len());
                        tracing::info!(
                            listen = %listen,
                            after_s = (tries as f64 * RETRY.as_secs_f64()),
                            "rdma: the address is available now: serving NFSv3, MOUNT v3 and NFSv4.1 over RPC-over-RDMA"
                        );
                        for (r, (mailbox, bell)) in servers.into_iter().zip(&mailboxes) {
                            mailbox.put(r);
                            bell.ring();
                        }
                        return;
                    }
                    Err(e) if address_not_yet(&e) => {
                        if tries.is_multiple_of(240) {
                            tracing::info!(listen = %listen, "rdma: still waiting for the address ({e:#})");
                        }
                    }
                    Err(e) => {
                        tracing::error!(listen = %listen, "rdma: cannot listen ({e:#}); RPC-over-RDMA stays off, TCP serves");
                        return;
                    }
                }
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_address_that_is_not_ours_yet_is_waited_for() {
        let wrap = |k: io::ErrorKind| {
            anyhow::Error::from(io::Error::from(k)).context("rdma.listen = \"x\": cannot listen")
        };
        assert!(address_not_yet(&wrap(io::ErrorKind::AddrInUse)));
        assert!(address_not_yet(&wrap(io::ErrorKind::AddrNotAvailable)));
        assert!(!address_not_yet(&wrap(io::ErrorKind::PermissionDenied)));
        assert!(!address_not_yet(&anyhow::anyhow!("no device")));
    }

    /// The verbs provider's failure keeps its `io::Error`: a second gateway on the
    /// active's RDMA address (rdma_bind_addr: EADDRINUSE, as the VM stage `ha` met with
    /// Soft-RoCE) waits for it instead of failing to start; its message still says
    /// what to do.
    #[test]
    fn a_verbs_address_in_use_is_waited_for() {
        let addr: SocketAddr = "10.0.2.15:20049".parse().unwrap();
        let in_use = io::Error::new(io::ErrorKind::AddrInUse, "rdma_bind_addr: in use");
        let e = verbs_open_error(None, addr, in_use);
        assert!(address_not_yet(&e));
        assert!(format!("{e:#}").contains("rdma_bind_addr: in use"), "{e:#}");
        assert!(format!("{e:#}").contains("rdma link add"), "{e:#}");
        let denied = io::Error::from(io::ErrorKind::PermissionDenied);
        assert!(!address_not_yet(&verbs_open_error(
            Some("rxe0"),
            addr,
            denied
        )));
    }

    #[test]
    fn a_mailbox_hands_over_once() {
        let m = LateRdma::default();
        assert!(!m.pending());
        assert!(m.take().is_none());
    }
}
