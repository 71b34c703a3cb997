//! systemd's service notification protocol (sd_notify(3)), written by hand: one
//! datagram per state change to the socket named by `$NOTIFY_SOCKET`.
//!
//! Used by `configs/nfsgw.service` (`Type=notify`, `WatchdogSec=`): `READY=1` once the
//! listeners are up, `STOPPING=1` at shutdown, and `WATCHDOG=1` pings while every
//! reactor keeps making passes — a reactor stuck in a loop stops the pings, and systemd
//! restarts the service. Without `$NOTIFY_SOCKET` (not under systemd) every call is a
//! no-op.

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

pub struct Notifier {
    sock: Option<(UnixDatagram, std::os::unix::net::SocketAddr)>,
    /// Ping period (half of `$WATCHDOG_USEC`), when the watchdog is on.
    watchdog: Option<Duration>,
    last_ping: Instant,
}

impl Notifier {
    /// Reads `$NOTIFY_SOCKET` and `$WATCHDOG_USEC` (and `$WATCHDOG_PID`, which must be
    /// ours when set).
    pub fn from_env() -> Notifier {
        let sock = std::env::var_os("NOTIFY_SOCKET").and_then(|p| {
            let addr = socket_addr(p.as_encoded_bytes())?;
            let s = UnixDatagram::unbound().ok()?;
            Some((s, addr))
        });
        let pid_ok = std::env::var("WATCHDOG_PID")
            .ok()
            .and_then(|p| p.parse::<u32>().ok())
            .is_none_or(|p| p == std::process::id());
        let watchdog = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|u| u.parse::<u64>().ok())
            .filter(|&u| u > 0 && pid_ok && sock.is_some())
            .map(|u| Duration::from_micros(u / 2));
        Notifier {
            sock,
            watchdog,
            last_ping: Instant::now(),
        }
    }

    /// Whether systemd listens (tests and logs).
    pub fn active(&self) -> bool {
        self.sock.is_some()
    }

    /// Sends one state string; errors are logged once per call and otherwise ignored
    /// (a lost notification must not stop the server).
    pub fn notify(&self, state: &str) {
        if let Some((s, addr)) = &self.sock {
            if let Err(e) = s.send_to_addr(state.as_bytes(), addr) {
                tracing::warn!("sd_notify {state:?}: {e}");
            }
        }
    }

    /// Pings the watchdog when its period has elapsed and `healthy` says every reactor
    /// made progress since the last ping.
    pub fn tick(&mut self, healthy: impl FnOnce() -> bool) {
        let Some(period) = self.watchdog else { return };
        if self.last_ping.elapsed() < period {
            return;
        }
        if healthy() {
            self.notify("WATCHDOG=1");
            self.last_ping = Instant::now();
        }
    }
}

/// `$NOTIFY_SOCKET` as an address: a path, or `@name` for the abstract namespace.
fn socket_addr(p: &[u8]) -> Option<std::os::unix::net::SocketAddr> {
    use std::os::linux::net::SocketAddrExt;
    match p.split_first()? {
        (b'@', name) => std::os::unix::net::SocketAddr::from_abstract_name(name).ok(),
        (b'/', _) => {
            use std::os::unix::ffi::OsStrExt;
            std::os::unix::net::SocketAddr::from_pathname(std::ffi::OsStr::from_bytes(p)).ok()
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_states_to_a_path_socket() {
        let dir = std::env::temp_dir().join(format!("nfsgw-sdnotify-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let rx = UnixDatagram::bind(&path).unwrap();
        let addr = socket_addr(path.as_os_str().as_encoded_bytes()).unwrap();
        let n = Notifier {
            sock: Some((UnixDatagram::unbound().unwrap(), addr)),
            watchdog: Some(Duration::ZERO),
            last_ping: Instant::now(),
        };
        n.notify("READY=1");
        let mut buf = [0u8; 64];
        let got = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..got], b"READY=1");
        let mut n = n;
        n.tick(|| false);
        n.tick(|| true);
        let got = rx.recv(&mut buf).unwrap();
        assert_eq!(
            &buf[..got],
            b"WATCHDOG=1",
            "an unhealthy tick sends nothing"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_addresses_are_ignored() {
        assert!(socket_addr(b"").is_none());
        assert!(socket_addr(b"relative").is_none());
        assert!(socket_addr(b"@abstract").is_some());
    }
}
