//! Child processes the tools start (gateways, bench): stopped the way the gateway wants
//! to be stopped, so staged writes are flushed.

use std::process::Child;
use std::time::{Duration, Instant};

/// SIGTERM, then SIGKILL if the child has not exited after `grace`; reaps it either way.
/// A child that already exited is only reaped.
pub fn stop(child: &mut Child, grace: Duration) {
    if child.try_wait().ok().flatten().is_some() {
        return;
    }
    // SAFETY: kill(2) on our own child's pid, which has not been reaped yet.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let start = Instant::now();
    while start.elapsed() < grace {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// A loopback port free right now (for a child's listen address).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}
