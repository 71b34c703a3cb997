//! Connection-management plumbing: the host-local socket names, the process-wide
//! listener registry, and the pseudo addresses connectors call themselves.
//!
//! A listen address maps to the abstract Unix socket `"\0nfsgw-soft/<addr>"` (no file,
//! gone when the last descriptor closes). Within one process, every fabric that listens
//! on an address shares one listening socket, as `SO_REUSEPORT` does for TCP: each
//! registers it in its own epoll and whichever polls first accepts a connection. Another
//! process binding the same name gets `AddrInUse` from the kernel.

use mio::net::{UnixListener, UnixStream};
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::SocketAddr as UnixAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// A listening socket shared by the fabrics of this process that listen on one address.
pub struct SharedListener {
    pub sock: UnixListener,
}

fn unix_name(addr: SocketAddr) -> io::Result<UnixAddr> {
    UnixAddr::from_abstract_name(format!("nfsgw-soft/{addr}"))
}

/// The listener for `addr`: this process's existing one, or a freshly bound one.
pub fn listen_shared(addr: SocketAddr) -> io::Result<Arc<SharedListener>> {
    static REGISTRY: Mutex<Option<HashMap<SocketAddr, Weak<SharedListener>>>> = Mutex::new(None);
    let mut guard = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    let map = guard.get_or_insert_with(HashMap::new);
    let stale = match map.get(&addr).map(Weak::upgrade) {
        Some(Some(l)) => return Ok(l),
        Some(None) => true,
        None => false,
    };
    let name = unix_name(addr)?;
    // A listener of ours that is being dropped right now may still hold the name for a
    // moment: retry briefly in that case only.
    let mut tries = if stale { 50 } else { 1 };
    let sock = loop {
        match UnixListener::bind_addr(&name) {
            Ok(s) => break s,
            Err(e) if e.kind() == io::ErrorKind::AddrInUse && tries > 1 => {
                tries -= 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(e),
        }
    };
    let l = Arc::new(SharedListener { sock });
    map.insert(addr, Arc::downgrade(&l));
    Ok(l)
}

/// Starts a non-blocking connection to the listener of `addr`.
pub fn connect(addr: SocketAddr) -> io::Result<UnixStream> {
    UnixStream::connect_addr(&unix_name(addr)?)
}

/// A per-connection port for the address a connector reports (`ConnRequest::peer`):
/// distinct for 64 K connections of a process, spread across processes by the pid.
pub fn pseudo_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let spread = std::process::id().wrapping_mul(7919);
    1024 + (n.wrapping_add(spread) % (65536 - 1024)) as u16
}
