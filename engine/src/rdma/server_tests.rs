//! The receive budget and connection limits of the responder transport, with a
//! `soft` requester in the same thread: what is refused is an RDMA-CM reject (never an
//! accepted connection without Receives), counted; reservations come back at
//! disconnect, and so does every pool buffer.

use super::*;
use crate::fabric::soft::SoftFabric;
use crate::mem::{ClassSpec, HugePolicy};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

fn addr() -> SocketAddr {
    // Unique per process (the soft provider names its listener after the address) and
    // per test: tests run in parallel, and two sharing an address would reach each
    // other's servers. Each test module has its own port range.
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    let ip = std::net::Ipv4Addr::new(127, (pid >> 16) as u8, (pid >> 8) as u8, pid as u8);
    SocketAddr::new(ip.into(), 50000 + n)
}

/// A server whose Receive class (8 KiB) has `small` buffers.
fn server(small: usize, credits: u32, max_connections: usize) -> (RdmaServer, Pools) {
    server_with(small, credits, max_connections, Duration::from_secs(30))
}

fn server_with(
    small: usize,
    credits: u32,
    max_connections: usize,
    read_timeout: Duration,
) -> (RdmaServer, Pools) {
    let pools = Pools::new(
        &[
            ClassSpec {
                size: 8192,
                count: small,
            },
            ClassSpec {
                size: 1 << 20,
                count: 2,
            },
        ],
        HugePolicy::Off,
    )
    .unwrap();
    let opts = ServerOptions {
        credits,
        min_credits: 8,
        max_connections,
        read_timeout,
        ..ServerOptions::default()
    };
    let fabric = Box::new(SoftFabric::new().unwrap());
    let s = RdmaServer::new(fabric, pools.clone(), opts, addr()).unwrap();
    (s, pools)
}

fn poll(s: &mut RdmaServer) {
    s.poll(&mut |_, _, _, _: &[Reduced], _| {});
}

/// Connects a requester, polling the server meanwhile: `Ok` once established, `Err`
/// when rejected.
fn connect(s: &mut RdmaServer) -> Result<(SoftFabric, Qp), ()> {
    let mut f = SoftFabric::new().unwrap();
    let qp = f.connect(s.local_addr(), &QpCaps::default(), &[]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        poll(s);
        match f.poll_cm() {
            Some(CmEvent::Established { .. }) => {
                poll(s);
                return Ok((f, qp));
            }
            Some(CmEvent::Rejected { .. }) | Some(CmEvent::Disconnected { .. }) => return Err(()),
            _ => assert!(Instant::now() < deadline, "no answer to a connect"),
        }
    }
}

/// Polls the server until `live` connections are left.
fn settle(s: &mut RdmaServer, live: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.connections() != live {
        assert!(Instant::now() < deadline, "{} connections", s.connections());
        poll(s);
        std::thread::yield_now();
    }
}

#[test]
fn max_connections_is_a_counted_reject_and_a_disconnect_frees_the_slot() {
    let (mut s, pools) = server(1024, 16, 3);
    let mut clients: Vec<_> = (0..3).map(|_| connect(&mut s).unwrap()).collect();
    assert_eq!(s.stats().credits_reduced, 0, "budget 768 holds 3 x 16");
    assert_eq!(pools.in_use(), 3 * 16, "each connection posted its credits");
    assert!(connect(&mut s).is_err());
    assert!(connect(&mut s).is_err());
    let st = s.stats();
    assert_eq!((st.rejected, st.refused_full, st.accepted), (2, 2, 3));
    clients.pop();
    settle(&mut s, 2);
    clients.push(connect(&mut s).unwrap());
    assert_eq!(s.stats().accepted, 4);
    clients.clear();
    settle(&mut s, 0);
    assert_eq!(s.admission.reserved(), 0);
    assert_eq!(pools.in_use(), 0);
}

#[test]
fn a_short_receive_budget_lowers_grants_to_the_floor_then_rejects() {
    // 40 buffers: budget 30 → three connections at the floor of 8, then a reject.
    let (mut s, pools) = server(40, 16, 64);
    let mut clients: Vec<_> = (0..3).map(|_| connect(&mut s).unwrap()).collect();
    assert_eq!(s.stats().credits_reduced, 3);
    assert_eq!(pools.in_use(), 24, "8 Receives each, nothing more");
    assert!(connect(&mut s).is_err());
    let st = s.stats();
    assert_eq!((st.refused_no_buffers, st.refused_full), (1, 0));
    assert!(s.admission.reserved() <= s.admission.budget());
    clients.remove(0);
    settle(&mut s, 2);
    clients.push(connect(&mut s).unwrap());
    clients.clear();
    settle(&mut s, 0);
    assert_eq!(s.admission.reserved(), 0);
    assert_eq!(pools.in_use(), 0);
}

/// A peer that stops answering the RDMA Reads of its chunked call is disconnected
/// after `read_timeout`, counted, and every buffer it held comes back.
#[test]
fn a_peer_that_never_answers_rdma_reads_is_closed_after_the_read_timeout() {
    use crate::rpcrdma::wire::{Chunks, Fixed, ReadSegment};
    use crate::xdr::XdrWriter;
    let (mut s, pools) = server_with(64, 16, 4, Duration::from_millis(300));
    let mut mem = vec![0u8; 64 * 1024];
    let (mut f, qp) = connect(&mut s).unwrap();
    // SAFETY: `mem` outlives `f` (dropped at the end of the test, after `f`).
    let mr = unsafe {
        f.register(
            mem.as_mut_ptr(),
            mem.len(),
            access::LOCAL_WRITE | access::REMOTE_READ,
        )
        .unwrap()
    };
    let mut c = Chunks::default();
    c.reads.push(ReadSegment {
        position: 40,
        seg: Segment {
            handle: mr.rkey,
            length: 4096,
            offset: mr.addr + 8192,
        },
    });
    let fixed = Fixed {
        xid: 9,
        vers: 1,
        credit: 8,
        proc_: wire::RDMA_MSG,
    };
    let n = wire::encode_msg(&mut XdrWriter::new(&mut mem[..4096]), fixed, &c).unwrap();
    // An RPC CALL (xid 9) of 40 bytes; the chunk is its last argument.
    for (i, w) in [9u32, 0, 2, 100003, 3, 7, 0, 0, 0, 0].iter().enumerate() {
        mem[n + 4 * i..n + 4 * i + 4].copy_from_slice(&w.to_be_bytes());
    }
    let sge = Sge {
        addr: mr.addr,
        len: (n + 40) as u32,
        lkey: mr.lkey,
    };
    let wr = SendWr {
        wr_id: 1,
        op: Op::Send,
        sges: std::slice::from_ref(&sge),
        signaled: false,
    };
    f.post_send(qp, &[wr]).unwrap();
    // `f` is never polled again: the Read is never answered.
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.stats().read_timeouts == 0 {
        assert!(
            Instant::now() < deadline,
            "never timed out: {:?}",
            s.stats()
        );
        poll(&mut s);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(s.stats().rdma_reads, 1);
    settle(&mut s, 0);
    assert_eq!(pools.in_use(), 0);
    drop(f);
}

/// A failed work request is logged by the kind our `wr_id` encodes (verbs leaves an
/// error completion's opcode undefined): every kind we post decodes back to itself,
/// whatever the slot and index, and anything else is `Unknown`.
#[test]
fn a_work_request_kind_is_decoded_from_its_wr_id() {
    for (kind, want) in [
        (KIND_RECV, WrKind::Receive),
        (KIND_READ, WrKind::RdmaRead),
        (KIND_SEND, WrKind::ReplySend),
        (KIND_WRITE, WrKind::RdmaWrite),
        (KIND_CB_SEND, WrKind::CallbackSend),
    ] {
        for (slot, idx) in [(0, 0), (1, 7), (0x00ff_ffff, u32::MAX)] {
            let id = wr_id(kind, slot, idx);
            assert_eq!(WrKind::of(id), want, "{id:#x}");
            assert_eq!(wr_parts(id), (kind, slot, idx));
        }
    }
    assert_eq!(WrKind::of(0), WrKind::Unknown);
    assert_eq!(WrKind::of(9 << 56), WrKind::Unknown);
    assert_eq!(WrKind::RdmaRead.name(), "RDMA Read");
    assert_eq!(WrKind::RdmaWrite.name(), "RDMA Write");
    assert_eq!(WrKind::ReplySend.name(), "Send (reply)");
}
