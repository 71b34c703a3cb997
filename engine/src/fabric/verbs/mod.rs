//! The `verbs` provider: a real RDMA device through libibverbs and librdmacm
//! (`rdma-sys` bindings; cargo feature `rdma`). All `unsafe` FFI of the crate's RDMA
//! path lives in this module.
//!
//! Shape (one `VerbsFabric` per reactor, all of one device in a group):
//! - `open_group(device, bind, n)` binds a listen id (on its own CM event channel) to
//!   `bind`, which resolves the RDMA device (a wildcard address falls back to the
//!   device named `device`, or the first one), opens **one protection domain** for the
//!   group and makes `n` fabrics. Each fabric has **its own completion queue** (with a
//!   completion channel used only for adaptive idle) and its own CM event channel; each
//!   reactor registers its pool region once, in the shared PD, through its fabric.
//!   `open(device, bind)` is a group of one (clients);
//! - fabric 0 is the acceptor: its `listen` is `rdma_listen` on the bound id (the RDMA
//!   CM binds an address to one id only, so there is one listener per process) and its
//!   `poll_cm` also drains the listener's channel. Each connection request goes to the
//!   accepting fabric with the fewest connections (ties round-robin): the new cm_id is
//!   moved onto that fabric's event channel with `rdma_migrate_id` and pushed on its
//!   lock-free inbox, and its doorbell (an eventfd in its epoll set) is rung. The
//!   owner reports `ConnectRequest` from its own `poll_cm` and creates the QP on its own
//!   CQ at `accept`; every later event of that connection arrives on its channel only;
//! - every connection is an RC QP made with `rdma_create_qp` on its cm_id, on the PD
//!   and the owner's CQ; `connect` is resolve address → resolve route → create QP +
//!   `rdma_connect`, each step driven from `poll_cm` by the previous step's event,
//!   never blocking;
//! - `poll_cq` is `ibv_poll_cq`; `poll_cm` reads the non-blocking event channels and
//!   acknowledges every event at once (after copying what it needs);
//! - `wait_fd` is an epoll set holding the fabric's event channel, completion channel
//!   and doorbell (and the listener's channel for the acceptor); `arm` consumes
//!   completion-channel events, calls `ibv_req_notify_cq` and re-checks the CQ (a
//!   completion found then is kept for the next `poll_cq`).
//!
//! Ordering guarantee for teardown: when a connection goes down (peer DISCONNECTED,
//! DEVICE_REMOVAL, a connect error, or a local `disconnect`), the provider posts a
//! zero-length marker Receive, moves the QP to the error state, and posts a marker
//! Send. Verbs completes each work queue in order, so once both markers were polled
//! every earlier work request of that QP has completed (flushes: `WcStatus::Flushed`)
//! and was returned by `poll_cq`. Only then does `poll_cm` report `Disconnected` (or
//! `Rejected` for an active connect that failed). The markers themselves are never
//! returned. If the markers do not come back within [`DRAIN_TIMEOUT`] (a device that
//! does not flush work posted after the error transition) the event is reported
//! anyway, with a warning.
//!
//! Negotiation of RDMA Read depths: see [`VerbsFabric::accept`]. Other
//! provider-specific behaviour:
//! - the passive side may post Receives and Sends between `accept` and `Established`;
//!   the active side may post Receives at once (they are queued until the QP exists,
//!   after route resolution) but Sends only after `Established`;
//! - connection requests arriving on another device than the group's (possible with
//!   a wildcard listen address) are refused; so are requests no fabric can take (every
//!   accepting inbox full): backpressure, never a block;
//! - a group's fabrics must listen on the group's address; only fabric 0 then really
//!   listens, and it must be polled for any fabric to get connections.

mod device;
mod post;

use super::{
    CmEvent, Completion, ConnRequest, Fabric, Mr, PostError, PrivateData, Qp, QpCaps, SendWr, Sge,
};
pub use device::device_names;
use device::{Group, Handoff, Local};
use rdma_sys::*;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::RawFd;
use std::ptr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a draining QP may take to return its marker completions.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);
/// Address and route resolution timeout of `connect`.
const RESOLVE_TIMEOUT_MS: i32 = 2000;
/// Marker work-request ids (recognised only on QPs that are draining).
const DRAIN_RECV: u64 = 0xd4a1_4ecf_0000_0001;
const DRAIN_SEND: u64 = 0xd4a1_4ecf_0000_0002;
/// `rdma_listen` backlog.
const BACKLOG: i32 = 128;
/// `poll_cm` reads the CM event channels (a system call each) on one call in this many
/// while they are quiet: connection setup may wait a few reactor passes, the data path
/// (completions) never does.
const CM_POLL_EVERY: u32 = 8;
/// Completions taken from the device per `ibv_poll_cq` call.
const POLL_BATCH: usize = 64;

fn os_err(what: &str, rc: i32) -> io::Error {
    let e = if rc > 0 {
        io::Error::from_raw_os_error(rc)
    } else {
        io::Error::last_os_error()
    };
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

fn errno_err(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    /// Active: waiting for ADDR_RESOLVED / ROUTE_RESOLVED (no QP yet).
    Resolving,
    /// Active: `rdma_connect` sent. Passive: `rdma_accept` sent.
    Connecting,
    Up,
    /// Markers posted; waiting for them (see the module docs).
    Draining,
    /// Reported (or nothing left to report); waiting for `release`.
    Down,
}

struct Conn {
    id: *mut rdma_cm_id,
    /// `ibv_qp::qp_num`, 0 until the QP exists.
    qpn: u32,
    st: St,
    active: bool,
    caps: QpCaps,
    /// Active side: what `rdma_connect` offers.
    offer: PrivateData,
    /// Negotiated RDMA Read depth as initiator.
    depth: u8,
    /// Active side: Receives posted before the QP existed.
    early: Vec<(u64, Sge)>,
    since: Instant,
    rq_done: bool,
    sq_done: bool,
    /// When drained, report `Rejected` (failed connect) instead of `Disconnected`.
    rejected: bool,
    /// Report nothing when drained (`release` of a live QP).
    silent: bool,
}

impl Conn {
    fn qp(&self) -> *mut ibv_qp {
        // SAFETY: `id` is live until `release`; `qp` is null until rdma_create_qp.
        unsafe { (*self.id).qp }
    }
}

struct Request {
    id: *mut rdma_cm_id,
    peer: SocketAddr,
    /// Reads the peer may issue towards us.
    peer_issues: u8,
    /// Reads the peer serves for us (0: "as the device allows").
    peer_serves: u8,
}

/// One reactor's RDMA device context. See the module docs.
pub struct VerbsFabric {
    /// Index in the group (0: the acceptor).
    index: usize,
    listening: bool,
    conns: HashMap<u32, Conn>,
    by_qpn: HashMap<u32, u32>,
    next_qp: u32,
    requests: HashMap<u64, Request>,
    next_req: u64,
    mrs: HashMap<u32, *mut ibv_mr>,
    events: VecDeque<CmEvent>,
    stash: VecDeque<Completion>,
    wc: Vec<ibv_wc>,
    chain: post::Chain,
    /// CQ entries promised to live QPs (sum of their queue depths).
    cq_used: u32,
    /// `poll_cm` calls left before the CM channels are read again (see `poll_cm`).
    cm_quiet: u32,
    /// Declared before `group`: the CQ goes before the PD and channels.
    local: Local,
    group: Arc<Group>,
}

// SAFETY: the fabric exclusively owns every verbs/CM object it points to except the
// group's (see `Group`'s own Send/Sync argument); libibverbs and librdmacm objects may
// be used from any thread (one at a time here, as `&mut self` guarantees).
unsafe impl Send for VerbsFabric {}

fn sockaddr_of(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    // SAFETY: a sockaddr_storage is valid for its full size; the family field says
    // which prefix is meaningful and SockAddr checks it.
    let sa = unsafe {
        socket2::SockAddr::new(
            *storage,
            std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t,
        )
    };
    sa.as_socket()
}

fn copy_private(p: &rdma_conn_param) -> PrivateData {
    if p.private_data.is_null() || p.private_data_len == 0 {
        return PrivateData::new(&[]);
    }
    // SAFETY: librdmacm guarantees `private_data_len` readable bytes until the event is
    // acknowledged; we copy before that.
    let bytes = unsafe {
        std::slice::from_raw_parts(p.private_data as *const u8, p.private_data_len as usize)
    };
    PrivateData::new(bytes)
}

/// What a CM event's connection parameters carry, copied out of the event.
#[derive(Clone, Copy)]
struct ConnParams {
    private_data: PrivateData,
    responder_resources: u8,
    initiator_depth: u8,
}

impl ConnParams {
    fn of(p: &rdma_conn_param) -> ConnParams {
        ConnParams {
            private_data: copy_private(p),
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
        }
    }
}

impl VerbsFabric {
    /// Opens the device owning `bind` (or named `device` for a wildcard address) as a
    /// group of one fabric (a client, or a one-reactor server).
    pub fn open(device: Option<&str>, bind: SocketAddr) -> io::Result<VerbsFabric> {
        VerbsFabric::open_group(device, bind, 1)?
            .pop()
            .ok_or_else(|| io::Error::other("verbs: empty fabric group"))
    }

    /// Opens the device owning `bind` (or named `device`; with both, they must agree)
    /// once, with one protection domain, and returns `n` fabrics on it, one per
    /// reactor, each with its own completion queue and CM event channel. Fabric 0 is
    /// the acceptor: its [`Fabric::listen`] listens on `bind`, and every connection
    /// request is handed to the fabric with the fewest connections (see the module
    /// docs); the others' `listen` only checks the address.
    pub fn open_group(
        device: Option<&str>,
        bind: SocketAddr,
        n: usize,
    ) -> io::Result<Vec<VerbsFabric>> {
        let group = Arc::new(Group::open(device, bind, n)?);
        tracing::debug!(device = %group.name, %bind, limits = ?group.limits, fabrics = n.max(1), "verbs: device opened");
        (0..n.max(1))
            .map(|index| {
                Ok(VerbsFabric {
                    index,
                    listening: false,
                    conns: HashMap::new(),
                    by_qpn: HashMap::new(),
                    next_qp: 1,
                    requests: HashMap::new(),
                    next_req: 1,
                    mrs: HashMap::new(),
                    events: VecDeque::new(),
                    stash: VecDeque::new(),
                    // SAFETY: ibv_wc is plain data; all-zero is valid.
                    wc: (0..POLL_BATCH)
                        .map(|_| unsafe { std::mem::zeroed() })
                        .collect(),
                    chain: post::Chain::default(),
                    cq_used: 0,
                    cm_quiet: 0,
                    local: Local::open(&group, index)?,
                    group: group.clone(),
                })
            })
            .collect()
    }

    /// The RDMA device name (for example `rxe0`).
    pub fn device_name(&self) -> &str {
        &self.group.name
    }

    fn new_qp_id(&mut self) -> u32 {
        loop {
            let id = self.next_qp;
            self.next_qp = self.next_qp.wrapping_add(1).max(1);
            if !self.conns.contains_key(&id) {
                return id;
            }
        }
    }

    fn cq_cost(&self, caps: &QpCaps) -> u32 {
        self.qp_send_wr(caps) + self.qp_recv_wr(caps)
    }

    fn qp_send_wr(&self, caps: &QpCaps) -> u32 {
        (caps.max_send_wr + 1).min(self.group.limits.max_qp_wr)
    }

    fn qp_recv_wr(&self, caps: &QpCaps) -> u32 {
        (caps.max_recv_wr + 1).min(self.group.limits.max_qp_wr)
    }

    /// `rdma_create_qp` on `id` with this fabric's PD and CQ; returns the QP number.
    fn create_qp(&mut self, id: *mut rdma_cm_id, caps: &QpCaps) -> io::Result<u32> {
        let cost = self.cq_cost(caps);
        if self.cq_used + cost > self.local.cqe {
            return Err(io::Error::new(
                io::ErrorKind::OutOfMemory,
                "completion queue full: too many connections for this fabric",
            ));
        }
        let sge = caps.max_sge.clamp(1, self.group.limits.max_sge);
        // SAFETY: ibv_qp_init_attr is plain data; all-zero is valid before we fill it.
        let mut attr: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        attr.send_cq = self.local.cq;
        attr.recv_cq = self.local.cq;
        attr.qp_type = ibv_qp_type::IBV_QPT_RC;
        attr.sq_sig_all = 0;
        attr.cap.max_send_wr = self.qp_send_wr(caps);
        attr.cap.max_recv_wr = self.qp_recv_wr(caps);
        attr.cap.max_send_sge = sge;
        attr.cap.max_recv_sge = sge;
        // SAFETY: `id` is a live cm_id on this fabric's device; PD and CQ are live.
        if unsafe { rdma_create_qp(id, self.group.pd, &mut attr) } != 0 {
            return Err(errno_err("rdma_create_qp"));
        }
        self.cq_used += cost;
        // SAFETY: rdma_create_qp succeeded, so `(*id).qp` is a live QP.
        Ok(unsafe { (*(*id).qp).qp_num })
    }

    /// The connection whose cm_id is `id` (its context holds our QP number).
    fn qp_of(&self, id: *mut rdma_cm_id) -> Option<u32> {
        if id.is_null() {
            return None;
        }
        // SAFETY: the id comes from an event of our channel and is still live.
        let q = unsafe { (*id).context } as usize as u32;
        (q != 0 && self.conns.contains_key(&q)).then_some(q)
    }

    /// Starts the teardown of `q` (see the module docs). Idempotent.
    fn start_drain(&mut self, q: u32, rejected: bool) {
        let Some(c) = self.conns.get_mut(&q) else {
            return;
        };
        if matches!(c.st, St::Draining | St::Down) {
            return;
        }
        c.rejected = rejected;
        c.early.clear();
        let qp = c.qp();
        if qp.is_null() {
            c.st = St::Down;
            if !c.silent {
                self.events.push_back(if rejected {
                    CmEvent::Rejected { qp: Qp(q) }
                } else {
                    CmEvent::Disconnected { qp: Qp(q) }
                });
            }
            return;
        }
        c.st = St::Draining;
        c.since = Instant::now();
        // The marker Receive goes in before the error transition: some devices (rxe)
        // flush only what was queued when the QP entered the error state.
        c.rq_done = post::post_recv(qp, DRAIN_RECV, None).is_err();
        // SAFETY: ibv_qp_attr is plain data; only `qp_state` is read (IBV_QP_STATE).
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = ibv_qp_state::IBV_QPS_ERR;
        // SAFETY: `qp` is live; `attr` lives for the call.
        let rc = unsafe { ibv_modify_qp(qp, &mut attr, ibv_qp_attr_mask::IBV_QP_STATE.0 as i32) };
        if rc != 0 {
            tracing::debug!(
                "verbs: moving QP {q} to the error state failed: {}",
                os_err("ibv_modify_qp", rc)
            );
        }
        c.sq_done = post::post_marker_send(qp, DRAIN_SEND).is_err();
        self.check_drained(q);
    }

    fn check_drained(&mut self, q: u32) {
        let Some(c) = self.conns.get_mut(&q) else {
            return;
        };
        let timed_out = c.since.elapsed() >= DRAIN_TIMEOUT;
        if c.st == St::Draining && ((c.rq_done && c.sq_done) || timed_out) {
            if timed_out && !(c.rq_done && c.sq_done) {
                tracing::warn!(
                    qp = q,
                    "verbs: flushes did not complete within {DRAIN_TIMEOUT:?}; reporting the disconnect anyway"
                );
            }
            c.st = St::Down;
            tracing::debug!(
                reactor = self.index,
                qp = q,
                drained = c.rq_done && c.sq_done,
                rejected = c.rejected,
                "verbs: connection down"
            );
            if !c.silent {
                self.events.push_back(if c.rejected {
                    CmEvent::Rejected { qp: Qp(q) }
                } else {
                    CmEvent::Disconnected { qp: Qp(q) }
                });
            }
        }
    }

    /// Maps one polled entry; `None` for markers and entries of released QPs.
    fn map_wc(&mut self, i: usize) -> Option<Completion> {
        let wc = &self.wc[i];
        let q = *self.by_qpn.get(&wc.qp_num)?;
        let c = self.conns.get_mut(&q)?;
        if c.st == St::Draining && (wc.wr_id == DRAIN_RECV || wc.wr_id == DRAIN_SEND) {
            if wc.wr_id == DRAIN_RECV {
                c.rq_done = true;
            } else {
                c.sq_done = true;
            }
            self.check_drained(q);
            return None;
        }
        Some(post::completion(wc, Qp(q)))
    }

    fn poll_device(&mut self, max: usize) -> usize {
        let max = max.min(POLL_BATCH);
        // SAFETY: the CQ is live and `self.wc` has room for `max` entries.
        let n = unsafe { ibv_poll_cq(self.local.cq, max as i32, self.wc.as_mut_ptr()) };
        if n < 0 {
            tracing::warn!("verbs: ibv_poll_cq failed ({n})");
            return 0;
        }
        n as usize
    }

    fn on_event(&mut self, ev: &rdma_cm_event) {
        use rdma_cm_event_type::*;
        // SAFETY: `param.conn` is the active member for connection events; it is plain
        // data (its private-data pointer is read by `copy_private` only).
        let conn = unsafe { ev.param.conn };
        let kind = ev.event;
        match kind {
            // Requests arrive on the listener's channel only (`poll_listener`); one on
            // a connection channel would be a librdmacm surprise: refuse it.
            RDMA_CM_EVENT_CONNECT_REQUEST => {
                tracing::warn!("verbs: connection request on a connection channel; refused");
                // SAFETY: the new id is ours, has no QP, and its event counts against
                // the listen id; destroyed once.
                unsafe {
                    rdma_reject(ev.id, ptr::null(), 0);
                    rdma_destroy_id(ev.id);
                }
            }
            RDMA_CM_EVENT_ADDR_RESOLVED => {
                let Some(q) = self.qp_of(ev.id) else { return };
                // SAFETY: live id.
                if unsafe { (*ev.id).verbs } != self.group.ctx {
                    tracing::warn!("verbs: route to the peer is on another RDMA device");
                    self.start_drain(q, true);
                    return;
                }
                // SAFETY: live id whose address was resolved.
                if unsafe { rdma_resolve_route(ev.id, RESOLVE_TIMEOUT_MS) } != 0 {
                    tracing::debug!("verbs: {}", errno_err("rdma_resolve_route"));
                    self.start_drain(q, true);
                }
            }
            RDMA_CM_EVENT_ROUTE_RESOLVED => {
                let Some(q) = self.qp_of(ev.id) else { return };
                if let Err(e) = self.connect_resolved(q) {
                    tracing::debug!("verbs: connect: {e}");
                    self.start_drain(q, true);
                }
            }
            RDMA_CM_EVENT_ESTABLISHED => {
                let Some(q) = self.qp_of(ev.id) else { return };
                let c = self.conns.get_mut(&q).expect("qp_of checked");
                if c.st != St::Connecting {
                    return;
                }
                c.st = St::Up;
                let private_data = if c.active {
                    // The peer's responder resources (the CM swaps the fields into our
                    // point of view); 0 means "as the device allows".
                    let serves = match conn.initiator_depth {
                        0 => self.group.limits.max_init_rd_atom,
                        n => n,
                    };
                    c.depth = c.depth.min(serves).max(1);
                    copy_private(&conn)
                } else {
                    PrivateData::new(&[])
                };
                self.events.push_back(CmEvent::Established {
                    qp: Qp(q),
                    private_data,
                    initiator_depth: c.depth,
                });
            }
            RDMA_CM_EVENT_REJECTED
            | RDMA_CM_EVENT_UNREACHABLE
            | RDMA_CM_EVENT_ADDR_ERROR
            | RDMA_CM_EVENT_ROUTE_ERROR
            | RDMA_CM_EVENT_CONNECT_ERROR => {
                let Some(q) = self.qp_of(ev.id) else { return };
                let c = &self.conns[&q];
                // A passive connection that never completed is a disconnect for the
                // owner (it has a QP and posted work); an active one is a rejection.
                let rejected = c.active && c.st != St::Up;
                tracing::debug!(
                    qp = q,
                    event = kind,
                    status = ev.status,
                    "verbs: connection failed"
                );
                self.start_drain(q, rejected);
            }
            RDMA_CM_EVENT_DISCONNECTED | RDMA_CM_EVENT_DEVICE_REMOVAL => {
                let Some(q) = self.qp_of(ev.id) else { return };
                self.start_drain(q, false);
            }
            _ => {}
        }
    }

    /// Acceptor (fabric 0), one CONNECT_REQUEST from the listener's channel, already
    /// acknowledged: refuse a request on another device (possible with a wildcard
    /// listen address); otherwise pick the owner (fewest connections, ties
    /// round-robin), move the new id onto the owner's event channel
    /// (`rdma_migrate_id`: its later events reach the owner only) and hand it over
    /// through the owner's inbox, ringing its doorbell. The owner answers it
    /// (`accept`/`reject`) after reporting `ConnectRequest` from its own `poll_cm`.
    /// A request that cannot be handed over (every inbox full, fabrics closed) is
    /// rejected here: backpressure, never a block.
    fn dispatch(&mut self, id: *mut rdma_cm_id, conn: &ConnParams) {
        // SAFETY: the new id is live and ours until it is handed over.
        let (verbs, dst) = unsafe { ((*id).verbs, (*id).route.addr.dst_addr_union.dst_storage) };
        let peer =
            sockaddr_of(&dst).unwrap_or(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0));
        let refuse = |why: &str| {
            tracing::warn!(%peer, "verbs: connection request refused: {why}");
            // SAFETY: the id is ours, has no QP and no unacknowledged event (the
            // request's event counts against the listener); destroyed once.
            unsafe {
                rdma_reject(id, ptr::null(), 0);
                rdma_destroy_id(id);
            }
        };
        if verbs != self.group.ctx {
            return refuse("it arrived on another RDMA device");
        }
        let g = self.group.clone();
        // Single producer: only the acceptor pushes, so an inbox seen with room keeps it.
        let Some(k) = g.pick().filter(|&k| !g.inbox[k].is_full()) else {
            return refuse("no reactor can take it (inboxes full or closed)");
        };
        // SAFETY: the id is live; its one event (the request) was counted against the
        // listener, so the migration does not wait; the target channel lives as long
        // as the group.
        if unsafe { rdma_migrate_id(id, g.chans[k]) } != 0 {
            return refuse(&errno_err("rdma_migrate_id").to_string());
        }
        g.load[k].fetch_add(1, Ordering::AcqRel);
        let loads: Vec<usize> = g.load.iter().map(|l| l.load(Ordering::Relaxed)).collect();
        tracing::info!(%peer, reactor = k, ?loads, "verbs: connection request assigned");
        let h = Handoff {
            id,
            peer,
            private_data: conn.private_data,
            peer_issues: conn.responder_resources,
            peer_serves: conn.initiator_depth,
        };
        if let Err(h) = g.inbox[k].push(h) {
            // Not reachable (room was checked by the only producer); answer anyway.
            g.load[k].fetch_sub(1, Ordering::AcqRel);
            // SAFETY: as in `refuse`.
            unsafe {
                rdma_reject(h.id, ptr::null(), 0);
                rdma_destroy_id(h.id);
            }
            return;
        }
        g.ring(k);
    }

    /// Owner, one hand-off from its inbox: record the request and report it. The CM
    /// reports the peer's values from our point of view: `responder_resources` is what
    /// the peer may issue towards us, `initiator_depth` what it serves.
    fn on_handoff(&mut self, h: Handoff) {
        let req = Request {
            id: h.id,
            peer: h.peer,
            peer_issues: h.peer_issues,
            peer_serves: h.peer_serves,
        };
        let rid = self.next_req;
        self.next_req += 1;
        self.events.push_back(CmEvent::ConnectRequest(ConnRequest {
            id: rid,
            peer: h.peer,
            private_data: h.private_data,
            initiator_depth: req.peer_issues,
            responder_resources: req.peer_serves,
        }));
        self.requests.insert(rid, req);
    }

    /// Acceptor: drains the listener's channel. Each event is copied and acknowledged
    /// before it is acted on; anything but a connection request (for example an
    /// address change of the listen id) is only logged.
    fn poll_listener(&mut self) {
        loop {
            let mut ev = ptr::null_mut();
            // SAFETY: the listener's channel is live and non-blocking.
            if unsafe { rdma_get_cm_event(self.group.listen_ch, &mut ev) } != 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::WouldBlock {
                    tracing::warn!("verbs: rdma_get_cm_event (listener): {e}");
                }
                return;
            }
            // SAFETY: on success `ev` is live until acknowledged; we copy what we keep
            // (the private data into `ConnParams`) and acknowledge it at once.
            let (kind, id, params) = unsafe {
                let e = &*ev;
                let p = ConnParams::of(&e.param.conn);
                let out = (e.event, e.id, p);
                rdma_ack_cm_event(ev);
                out
            };
            if kind == rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST {
                self.dispatch(id, &params);
            } else {
                tracing::debug!(event = kind, "verbs: listener event ignored");
            }
        }
    }

    /// Active side, after ROUTE_RESOLVED: QP, early Receives, `rdma_connect`.
    fn connect_resolved(&mut self, q: u32) -> io::Result<()> {
        let (id, caps) = {
            let c = &self.conns[&q];
            (c.id, c.caps)
        };
        let qpn = self.create_qp(id, &caps)?;
        self.by_qpn.insert(qpn, q);
        let lim = self.group.limits;
        let c = self.conns.get_mut(&q).expect("live");
        c.qpn = qpn;
        let qp = c.qp();
        for (wr_id, sge) in std::mem::take(&mut c.early) {
            post::post_recv(qp, wr_id, Some(sge)).map_err(|e| io::Error::other(e.to_string()))?;
        }
        c.depth = caps.initiator_depth.min(lim.max_init_rd_atom).max(1);
        let offer = c.offer;
        let mut param = rdma_conn_param {
            private_data: offer.as_bytes().as_ptr().cast(),
            private_data_len: offer.as_bytes().len() as u8,
            responder_resources: caps.responder_resources.min(lim.max_rd_atom),
            initiator_depth: c.depth,
            flow_control: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: 0,
            qp_num: 0,
        };
        // SAFETY: the id has a resolved route and a QP; `param` and the private data
        // (in `offer`, a local copy) live for the call, which copies them.
        if unsafe { rdma_connect(id, &mut param) } != 0 {
            return Err(errno_err("rdma_connect"));
        }
        c.st = St::Connecting;
        Ok(())
    }

    /// One accepted connection or handed-off request of this fabric is gone (the
    /// acceptor's least-connections count).
    fn unload(&self) {
        let l = &self.group.load[self.index];
        let _ = l.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| v.checked_sub(1));
    }

    fn destroy_conn(&mut self, q: u32) {
        let Some(c) = self.conns.remove(&q) else {
            return;
        };
        if c.qpn != 0 {
            self.by_qpn.remove(&c.qpn);
            self.cq_used = self.cq_used.saturating_sub(self.cq_cost(&c.caps));
        }
        if !c.active {
            self.unload();
        }
        // SAFETY: the id (and its QP, if any) belong to this connection only; all its
        // events were acknowledged, so rdma_destroy_id does not block.
        unsafe {
            if !c.qp().is_null() {
                rdma_destroy_qp(c.id);
            }
            rdma_destroy_id(c.id);
        }
    }
}

impl Fabric for VerbsFabric {
    fn name(&self) -> &'static str {
        "verbs"
    }

    unsafe fn register(&mut self, addr: *mut u8, len: usize, access: u32) -> io::Result<Mr> {
        use super::access as a;
        let mut flags = 0u32;
        if access & a::LOCAL_WRITE != 0 {
            flags |= ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
        }
        if access & a::REMOTE_WRITE != 0 {
            flags |= ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
        }
        if access & a::REMOTE_READ != 0 {
            flags |= ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
        }
        // SAFETY: the caller keeps the memory valid until deregister/drop (trait
        // contract); the PD is live.
        let mr = unsafe { ibv_reg_mr(self.group.pd, addr.cast(), len, flags as i32) };
        if mr.is_null() {
            return Err(errno_err("ibv_reg_mr"));
        }
        // SAFETY: ibv_reg_mr succeeded; the MR is live until ibv_dereg_mr.
        let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
        self.mrs.insert(lkey, mr);
        Ok(Mr {
            addr: addr as u64,
            len: len as u64,
            lkey,
            rkey,
            access,
        })
    }

    fn deregister(&mut self, mr: &Mr) {
        if let Some(p) = self.mrs.remove(&mr.lkey) {
            // SAFETY: `p` came from ibv_reg_mr and is deregistered once.
            let rc = unsafe { ibv_dereg_mr(p) };
            if rc != 0 {
                tracing::warn!("verbs: {}", os_err("ibv_dereg_mr", rc));
            }
        }
    }

    fn listen(&mut self, addr: SocketAddr) -> io::Result<()> {
        if addr != self.group.bind {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "verbs: this fabric was opened for {}, cannot listen on {addr}",
                    self.group.bind
                ),
            ));
        }
        if self.listening {
            return Ok(());
        }
        // Only the acceptor listens (the RDMA CM binds an address to one id); the
        // others take the requests it hands them.
        // SAFETY: the listen id is live and bound.
        if self.index == 0 && unsafe { rdma_listen(self.group.listen_id, BACKLOG) } != 0 {
            return Err(errno_err("rdma_listen"));
        }
        self.listening = true;
        self.group.accepting[self.index].store(true, Ordering::Release);
        Ok(())
    }

    /// Read depths: our initiator depth (RDMA Reads we issue, towards the client's
    /// memory) is `min(caps.initiator_depth, device max_qp_init_rd_atom, what the peer
    /// serves)`, at least 1; a peer that announces 0 responder resources means "as the
    /// device allows" (the Linux NFS client does), so 0 is taken as the device maximum.
    /// Our responder resources are `min(caps.responder_resources, max_qp_rd_atom)`.
    fn accept(&mut self, req: u64, caps: &QpCaps, private_data: &[u8]) -> io::Result<Qp> {
        let Some(r) = self.requests.remove(&req) else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "no such connection request",
            ));
        };
        let q = self.new_qp_id();
        // SAFETY: the request's id is live and ours; the context is an opaque integer.
        unsafe { (*r.id).context = q as usize as *mut libc::c_void };
        let qpn = match self.create_qp(r.id, caps) {
            Ok(n) => n,
            Err(e) => {
                // SAFETY: the id is ours, with no QP; destroyed once.
                unsafe {
                    rdma_reject(r.id, ptr::null(), 0);
                    rdma_destroy_id(r.id);
                }
                self.unload();
                return Err(e);
            }
        };
        let lim = self.group.limits;
        let serves = match r.peer_serves {
            0 => lim.max_init_rd_atom,
            n => n,
        };
        let depth = caps
            .initiator_depth
            .min(lim.max_init_rd_atom)
            .min(serves)
            .max(1);
        let offer = PrivateData::new(private_data);
        let mut param = rdma_conn_param {
            private_data: offer.as_bytes().as_ptr().cast(),
            private_data_len: offer.as_bytes().len() as u8,
            responder_resources: caps.responder_resources.min(lim.max_rd_atom),
            initiator_depth: depth,
            flow_control: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: 0,
            qp_num: 0,
        };
        self.conns.insert(
            q,
            Conn {
                id: r.id,
                qpn,
                st: St::Connecting,
                active: false,
                caps: *caps,
                offer,
                depth,
                early: Vec::new(),
                since: Instant::now(),
                rq_done: false,
                sq_done: false,
                rejected: false,
                silent: false,
            },
        );
        self.by_qpn.insert(qpn, q);
        // SAFETY: the id has a QP; `param` and `offer` live for the call (copied).
        if unsafe { rdma_accept(r.id, &mut param) } != 0 {
            let e = errno_err("rdma_accept");
            self.destroy_conn(q);
            return Err(e);
        }
        tracing::debug!(peer = %r.peer, reactor = self.index, qp = q, qpn, depth, peer_issues = r.peer_issues, peer_serves = r.peer_serves, "verbs: accepted");
        Ok(Qp(q))
    }

    fn reject(&mut self, req: u64) {
        if let Some(r) = self.requests.remove(&req) {
            // SAFETY: the id is ours and has no QP; destroyed once.
            unsafe {
                rdma_reject(r.id, ptr::null(), 0);
                rdma_destroy_id(r.id);
            }
            self.unload();
        }
    }

    fn connect(&mut self, addr: SocketAddr, caps: &QpCaps, private_data: &[u8]) -> io::Result<Qp> {
        let q = self.new_qp_id();
        let mut id = ptr::null_mut();
        // SAFETY: the channel is live; the context is an opaque integer.
        if unsafe {
            rdma_create_id(
                self.group.chans[self.index],
                &mut id,
                q as usize as *mut libc::c_void,
                rdma_port_space::RDMA_PS_TCP,
            )
        } != 0
        {
            return Err(errno_err("rdma_create_id"));
        }
        let dst = socket2::SockAddr::from(addr);
        // SAFETY: `id` is live; `dst` is a valid sockaddr for the call (copied).
        if unsafe {
            rdma_resolve_addr(
                id,
                ptr::null_mut(),
                dst.as_ptr() as *mut libc::sockaddr,
                RESOLVE_TIMEOUT_MS,
            )
        } != 0
        {
            let e = errno_err("rdma_resolve_addr");
            // SAFETY: our id, no events pending for it.
            unsafe { rdma_destroy_id(id) };
            return Err(e);
        }
        self.conns.insert(
            q,
            Conn {
                id,
                qpn: 0,
                st: St::Resolving,
                active: true,
                caps: *caps,
                offer: PrivateData::new(private_data),
                depth: 1,
                early: Vec::new(),
                since: Instant::now(),
                rq_done: false,
                sq_done: false,
                rejected: false,
                silent: false,
            },
        );
        Ok(Qp(q))
    }

    fn disconnect(&mut self, qp: Qp) {
        let Some(c) = self.conns.get(&qp.0) else {
            return;
        };
        let (id, st) = (c.id, c.st);
        match st {
            St::Draining | St::Down => {}
            St::Resolving => self.start_drain(qp.0, false),
            St::Connecting | St::Up => {
                // Markers first (see start_drain), then tell the peer.
                self.start_drain(qp.0, false);
                // SAFETY: live id.
                unsafe { rdma_disconnect(id) };
            }
        }
    }

    fn release(&mut self, qp: Qp) {
        if let Some(c) = self.conns.get_mut(&qp.0) {
            if matches!(c.st, St::Connecting | St::Up) {
                c.silent = true;
                let id = c.id;
                self.start_drain(qp.0, false);
                // SAFETY: live id.
                unsafe { rdma_disconnect(id) };
            }
        }
        self.destroy_conn(qp.0);
    }

    fn post_recv(&mut self, qp: Qp, wr_id: u64, sge: Sge) -> Result<(), PostError> {
        let c = self.conns.get_mut(&qp.0).ok_or(PostError::NotConnected)?;
        match c.st {
            St::Resolving => {
                if c.early.len() >= c.caps.max_recv_wr as usize {
                    return Err(PostError::QueueFull);
                }
                c.early.push((wr_id, sge));
                Ok(())
            }
            St::Connecting | St::Up => post::post_recv(c.qp(), wr_id, Some(sge)),
            St::Draining | St::Down => Err(PostError::NotConnected),
        }
    }

    fn post_send(&mut self, qp: Qp, wrs: &[SendWr]) -> Result<(), PostError> {
        let c = self.conns.get(&qp.0).ok_or(PostError::NotConnected)?;
        let ok = match c.st {
            St::Up => true,
            St::Connecting => !c.active,
            _ => false,
        };
        if !ok {
            return Err(PostError::NotConnected);
        }
        let max_sge = c.caps.max_sge.clamp(1, self.group.limits.max_sge);
        let qpp = c.qp();
        self.chain.post(qpp, wrs, max_sge)
    }

    fn poll_cq(&mut self, out: &mut [Completion]) -> usize {
        let mut n = 0;
        while n < out.len() {
            match self.stash.pop_front() {
                Some(c) => {
                    out[n] = c;
                    n += 1;
                }
                None => break,
            }
        }
        while n < out.len() {
            let want = (out.len() - n).min(POLL_BATCH);
            let got = self.poll_device(want);
            for i in 0..got {
                if let Some(c) = self.map_wc(i) {
                    out[n] = c;
                    n += 1;
                }
            }
            if got < want {
                break;
            }
        }
        n
    }

    /// Queued events first, then hand-offs (an atomic pop, every call); the CM event
    /// channels (system calls) are read only every [`CM_POLL_EVERY`]th call while they
    /// are quiet, and at once after `arm` (their fds wake an adaptive reactor).
    fn poll_cm(&mut self) -> Option<CmEvent> {
        if let Some(ev) = self.events.pop_front() {
            return Some(ev);
        }
        // Requests handed to this fabric.
        while let Some(h) = self.group.inbox[self.index].pop() {
            self.on_handoff(h);
        }
        if self.cm_quiet > 0 {
            self.cm_quiet -= 1;
            return self.events.pop_front();
        }
        // Draining connections whose markers are late.
        let late: Vec<u32> = self
            .conns
            .iter()
            .filter(|(_, c)| c.st == St::Draining && c.since.elapsed() >= DRAIN_TIMEOUT)
            .map(|(&q, _)| q)
            .collect();
        for q in late {
            self.check_drained(q);
        }
        // Acceptor: new requests from the listener (its own come back through its inbox).
        if self.index == 0 && self.listening {
            self.poll_listener();
            while let Some(h) = self.group.inbox[0].pop() {
                self.on_handoff(h);
            }
        }
        loop {
            if let Some(ev) = self.events.pop_front() {
                return Some(ev);
            }
            let mut ev = ptr::null_mut();
            // SAFETY: the channel is live and non-blocking.
            if unsafe { rdma_get_cm_event(self.group.chans[self.index], &mut ev) } != 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::WouldBlock {
                    tracing::warn!("verbs: rdma_get_cm_event: {e}");
                }
                self.cm_quiet = CM_POLL_EVERY - 1;
                return None;
            }
            // SAFETY: on success `ev` is a live event until acknowledged. We handle it
            // (copying what we keep) and acknowledge it before touching the next one;
            // handlers never destroy the event's id.
            unsafe {
                tracing::debug!(
                    event = (*ev).event,
                    status = (*ev).status,
                    "verbs: cm event"
                );
                self.on_event(&*ev);
                rdma_ack_cm_event(ev);
            }
        }
    }

    fn wait_fd(&self) -> Option<RawFd> {
        Some(self.local.epfd)
    }

    /// Adaptive idle: false when anything is pending (events, stashed completions,
    /// hand-offs); the doorbell is emptied before the inbox is checked, so a hand-off
    /// pushed meanwhile either is seen now or rings the doorbell again.
    fn arm(&mut self) -> bool {
        if !self.events.is_empty() || !self.stash.is_empty() {
            return false;
        }
        self.group.quiet(self.index);
        if !self.group.inbox[self.index].is_empty() {
            return false;
        }
        // After a wake-up, read the CM channels on the first pass.
        self.cm_quiet = 0;
        // Consume pending completion-channel events (the fd is non-blocking).
        loop {
            let mut cq = ptr::null_mut();
            let mut ctx = ptr::null_mut();
            // SAFETY: the channel is live; returns -1 (EAGAIN) when empty.
            if unsafe { ibv_get_cq_event(self.local.comp, &mut cq, &mut ctx) } != 0 {
                break;
            }
            // SAFETY: `cq` is our CQ; every event is acknowledged once.
            unsafe { ibv_ack_cq_events(cq, 1) };
        }
        // SAFETY: the CQ is live.
        let rc = unsafe { ibv_req_notify_cq(self.local.cq, 0) };
        if rc != 0 {
            return false;
        }
        // A completion that arrived before the request would not raise an event.
        let got = self.poll_device(1);
        if got == 1 {
            if let Some(c) = self.map_wc(0) {
                self.stash.push_back(c);
            }
            return false;
        }
        self.events.is_empty() && !self.conns.values().any(|c| c.st == St::Draining)
    }
}

impl Drop for VerbsFabric {
    fn drop(&mut self) {
        // No more hand-offs to this fabric; answer those already here.
        self.group.accepting[self.index].store(false, Ordering::Release);
        while let Some(h) = self.group.inbox[self.index].pop() {
            self.on_handoff(h);
        }
        let qs: Vec<u32> = self.conns.keys().copied().collect();
        for q in qs {
            if let Some(c) = self.conns.get(&q) {
                if matches!(c.st, St::Connecting | St::Up) {
                    // SAFETY: live id.
                    unsafe { rdma_disconnect(c.id) };
                }
            }
            self.destroy_conn(q);
        }
        let reqs: Vec<u64> = self.requests.keys().copied().collect();
        for r in reqs {
            self.reject(r);
        }
        for (_, mr) in self.mrs.drain() {
            // SAFETY: each MR came from ibv_reg_mr and is deregistered once.
            unsafe { ibv_dereg_mr(mr) };
        }
        // `local` drops next (CQ, completion channel), then this fabric's share of the
        // group (the last one destroys channels, listener and PD).
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_without_a_device_fails_cleanly() {
        // On hosts without an RDMA device (CI) this must be an error, not a crash;
        // with one, binding the unspecified address picks a device.
        let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
        match VerbsFabric::open(None, addr) {
            Ok(f) => assert!(!f.device_name().is_empty()),
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn connections_go_to_the_least_loaded_accepting_fabric() {
        use device::least_loaded;
        let pick = |start, acc: &[bool], load: &[usize]| {
            least_loaded(load.len(), start, |k| acc[k], |k| load[k])
        };
        // fewest connections wins
        assert_eq!(pick(0, &[true, true, true], &[3, 1, 2]), Some(1));
        // ties: the first at or after the cursor, wrapping
        assert_eq!(pick(0, &[true, true], &[1, 1]), Some(0));
        assert_eq!(pick(1, &[true, true], &[1, 1]), Some(1));
        assert_eq!(pick(3, &[true, true, true], &[0, 0, 0]), Some(0));
        assert_eq!(pick(2, &[true, true, true], &[0, 0, 0]), Some(2));
        // fabrics that do not accept (never listened, or dropped) are skipped
        assert_eq!(pick(0, &[false, true], &[0, 5]), Some(1));
        assert_eq!(pick(0, &[false, false], &[0, 0]), None);
        // a kernel mount, then bench's three connections, on two reactors (the VM test)
        let (mut load, mut next) = ([0usize; 2], 0usize);
        let mut got = Vec::new();
        for _ in 0..4 {
            let k = pick(next, &[true, true], &load).unwrap();
            load[k] += 1;
            next = k + 1;
            got.push(k);
        }
        assert_eq!(got, [0, 1, 0, 1]);
    }

    #[test]
    fn status_mapping() {
        use crate::fabric::WcStatus;
        assert_eq!(
            post::status(ibv_wc_status::IBV_WC_WR_FLUSH_ERR),
            WcStatus::Flushed
        );
        assert_eq!(
            post::status(ibv_wc_status::IBV_WC_SUCCESS),
            WcStatus::Success
        );
        assert_eq!(
            post::status(ibv_wc_status::IBV_WC_REM_ACCESS_ERR),
            WcStatus::RemoteAccess
        );
        assert_eq!(
            post::status(ibv_wc_status::IBV_WC_RETRY_EXC_ERR),
            WcStatus::Fatal
        );
    }
}
