//! The pNFS metadata server's data server probes (README "Scaling out with pNFS",
//! "When a data server dies"): one thread per configured data server with a probe
//! address, never on a reactor, that sends it an NFSv3 NULL over TCP every
//! `pnfs.probe_ms` (a new connection each time, so a dead listener is seen as well
//! as a dead host), each step bounded by `pnfs.probe_timeout_ms`, and reports the
//! outcome to the layout table's health (`state/layouts_health.rs`). A server that
//! goes down has the layouts naming it recalled (`Layouts::recall_server`, through
//! the callback thread); each transition is logged once. A client's error report
//! wakes the thread to probe at once.

use super::Shared;
use crate::state::layouts::health::Transition;
use engine::rpc::{self, Accept, Cred, ReplyStatus};
use engine::xdr::XdrWriter;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Starts the probe threads (none when pNFS or probing is off).
pub(crate) fn spawn(
    shared: &Arc<Shared>,
    stop: &Arc<AtomicBool>,
) -> std::io::Result<Vec<JoinHandle<()>>> {
    let Some(d) = shared.state.layouts.devices() else {
        return Ok(Vec::new());
    };
    let every = d.probe.every;
    if every.is_zero() {
        return Ok(Vec::new());
    }
    let mut threads = Vec::new();
    for (i, ds) in d.servers.iter().enumerate() {
        let Some(at) = ds.probe else {
            tracing::info!(
                data_server = %ds.addr,
                "pNFS: no probe_address for this RDMA data server; it is never marked down"
            );
            continue;
        };
        let (owner, stop, ds) = (shared.clone(), stop.clone(), *ds);
        let timeout = d.probe.timeout;
        // A client's report probes early, but at most once per `every / failures`:
        // reports cannot mark a server down faster than its probes would, nor make
        // the metadata server open connections to it back to back.
        let gap = every / d.probe.failures.max(1);
        let h = crate::supervise::spawn(format!("ds-probe-{i}"), None, move || {
            let layouts = &owner.state.layouts;
            let health = layouts.health();
            while !stop.load(Ordering::Acquire) {
                let started = Instant::now();
                let ok = null_ok(at, timeout, i as u32);
                match health.probed(i, ok) {
                    Some(Transition::Down) => {
                        let n = layouts.recall_server(i, &owner.state.delegations.inbox);
                        tracing::warn!(
                            data_server = %ds.addr,
                            probe = %at,
                            recalled = n,
                            "pNFS: data server down (no answer to its probes); left out of new layouts, layouts naming it recalled"
                        );
                    }
                    Some(Transition::Up) => tracing::info!(
                        data_server = %ds.addr,
                        "pNFS: data server answers again; placed in new layouts"
                    ),
                    None => {}
                }
                // Sleep to the next tick, or to the first moment past `gap` at which a
                // client's report asks for a probe.
                let (until, soonest) = (started + every, started + gap);
                while !stop.load(Ordering::Acquire) {
                    let now = Instant::now();
                    if now >= until || (now >= soonest && health.take_asked(i)) {
                        break;
                    }
                    std::thread::park_timeout(if now < soonest { soonest } else { until } - now);
                }
            }
        })?;
        shared
            .state
            .layouts
            .health()
            .set_prober(i, h.thread().clone());
        threads.push(h);
    }
    Ok(threads)
}

/// One NFSv3 NULL (RFC 1813 §3.3.0) to `at` over TCP, each step within `timeout`:
/// true when an accepted, successful reply with our xid came back.
pub(crate) fn null_ok(at: SocketAddr, timeout: Duration, xid: u32) -> bool {
    let attempt = || -> std::io::Result<bool> {
        let mut s = TcpStream::connect_timeout(&at, timeout)?;
        s.set_read_timeout(Some(timeout))?;
        s.set_write_timeout(Some(timeout))?;
        s.set_nodelay(true)?;
        let mut buf = [0u8; 64];
        let mut w = XdrWriter::new(&mut buf[4..]);
        let (prog, vers) = (nfs_wire::NFS_PROGRAM, nfs_wire::NFS_V3);
        let call = rpc::write_call(
            &mut w,
            xid,
            prog,
            vers,
            nfs_wire::nfs3::NFSPROC3_NULL,
            &Cred::None,
        );
        if call.is_err() {
            return Ok(false);
        }
        let n = w.position();
        // Record marking (RFC 5531 §11): the last fragment, n bytes.
        buf[..4].copy_from_slice(&(0x8000_0000 | n as u32).to_be_bytes());
        s.write_all(&buf[..4 + n])?;
        let mut mark = [0u8; 4];
        s.read_exact(&mut mark)?;
        let len = (u32::from_be_bytes(mark) & 0x7fff_ffff) as usize;
        // A NULL reply is a header and a verifier: far under 1 KiB.
        if len > 1024 {
            return Ok(false);
        }
        let mut rec = vec![0u8; len];
        s.read_exact(&mut rec)?;
        Ok(matches!(
            rpc::decode_reply(&rec),
            Ok((x, ReplyStatus::Accepted(Accept::Success), _)) if x == xid
        ))
    };
    attempt().unwrap_or(false)
}
