//! `nfsgw_rdma_connections` against the real gateway over the `soft` provider: the
//! gauge is the number of live RPC-over-RDMA connections at any time, whatever the
//! connections do — one that never sends a call, one whose reply the peer never takes
//! (the `bench stall` shape: its Send stays outstanding) — and 0 once they are gone.

mod common;

use common::*;
use engine::rpcrdma::wire::Chunks;
use std::time::{Duration, Instant};

/// What the stats endpoint reports, summed over reactors.
fn gauge(gw: &Gw) -> u64 {
    let src = gw.server.as_ref().unwrap().stats_source();
    src.reactors
        .iter()
        .map(|r| r.stats.rdma_connections())
        .sum()
}

/// Waits (briefly: the accept or close is in flight) for the gauge to read `want`, then
/// checks it keeps reading `want` for `hold` while nothing connects or closes (the
/// reactor goes idle and sleeps meanwhile).
fn settles_at(gw: &Gw, want: u64, hold: Duration) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while gauge(gw) != want {
        assert!(Instant::now() < deadline, "gauge {} != {want}", gauge(gw));
        std::thread::sleep(Duration::from_millis(1));
    }
    let end = Instant::now() + hold;
    while Instant::now() < end {
        assert_eq!(gauge(gw), want, "the gauge moved with no connection change");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_rdma_connection_gauge_counts_every_live_connection_at_any_time() {
    // Two reactors: the gauge is per reactor; the total is what a user reads.
    let gw = Gw::start(&GwOpts {
        cores: 2,
        ..GwOpts::default()
    });
    settles_at(&gw, 0, Duration::from_millis(100));
    // Connected, never sends anything.
    let idle = Raw::connect(gw.rdma);
    settles_at(&gw, 1, Duration::from_millis(300));
    // Sends a NULL, then never polls again: the gateway's reply Send stays
    // outstanding (soft: the peer's "NIC" works only when the peer polls).
    let mut stalled = Raw::connect(gw.rdma);
    assert!(stalled.send(&msg(5, &Chunks::default(), &rpc_call(5, NFS, 0, &[]))));
    settles_at(&gw, 2, Duration::from_millis(300));
    // A third that is served normally, then leaves.
    null_ok(gw.rdma);
    settles_at(&gw, 2, Duration::from_millis(100));
    drop(idle);
    settles_at(&gw, 1, Duration::from_millis(100));
    drop(stalled);
    settles_at(&gw, 0, Duration::from_millis(100));
    gw.assert_buffers_back(Duration::from_secs(10));
}
