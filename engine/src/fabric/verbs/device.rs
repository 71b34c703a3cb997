//! The device side of the `verbs` provider, split by owner:
//! - [`Group`]: what every fabric of one device shares for its whole life — the device
//!   context, the one protection domain and its limits, the listener (the CM id bound to
//!   the listen address, on its own event channel), one CM event channel per fabric
//!   (connection ids are migrated onto the owner's channel) and the hand-off inboxes and
//!   doorbells through which the acceptor gives connection requests to their owners.
//!   Read-only after `open_group` except the lock-free inboxes and atomics;
//! - [`Local`]: what one fabric (one reactor) owns alone — its completion queue, the
//!   completion channel used only for adaptive idle, and the epoll set behind
//!   `Fabric::wait_fd`.
//!
//! Teardown order (the PD outlives every MR and QP, a channel every id on it): each
//! fabric destroys its QPs, ids and MRs, then its `Local`; the `Group` goes with the
//! last fabric and destroys leftover handed-off ids, the listener, the channels and
//! finally the PD.

use super::{errno_err, os_err};
use crate::fabric::PrivateData;
use crossbeam_queue::ArrayQueue;
use rdma_sys::*;
use std::ffi::CStr;
use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Completion-queue entries each fabric asks for (clamped to the device's `max_cqe`).
const CQ_ENTRIES: i32 = 32 * 1024;
/// Connection requests that may wait in one fabric's inbox.
pub(super) const INBOX: usize = 128;

/// Device limits the QPs are sized and negotiated against.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub max_qp_wr: u32,
    pub max_sge: u32,
    /// RDMA Reads this device serves per QP (`max_qp_rd_atom`).
    pub max_rd_atom: u8,
    /// RDMA Reads this device may issue per QP (`max_qp_init_rd_atom`).
    pub max_init_rd_atom: u8,
    pub cqe: u32,
}

/// A connection request the acceptor handed to its owner: the cm_id (already migrated
/// onto the owner's event channel) and what the request carried.
pub(super) struct Handoff {
    pub id: *mut rdma_cm_id,
    pub peer: SocketAddr,
    pub private_data: PrivateData,
    /// Reads the peer may issue towards us.
    pub peer_issues: u8,
    /// Reads the peer serves for us (0: "as the device allows").
    pub peer_serves: u8,
}

// SAFETY: a handed-off id is used by exactly one thread at a time: the acceptor until it
// pushes the hand-off, the owner after it pops it (the queue orders the two).
unsafe impl Send for Handoff {}

/// Shared by the fabrics of one device (see the module docs).
pub(super) struct Group {
    pub ctx: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub limits: Limits,
    pub name: String,
    pub bind: SocketAddr,
    /// Listener: the id bound to `bind` and its own event channel. Polled by fabric 0
    /// (the acceptor) only.
    pub listen_ch: *mut rdma_event_channel,
    pub listen_id: *mut rdma_cm_id,
    /// Per fabric: its CM event channel (ids of its connections).
    pub chans: Vec<*mut rdma_event_channel>,
    /// Per fabric: connection requests handed to it (single producer: the acceptor;
    /// single consumer: the owner).
    pub inbox: Vec<ArrayQueue<Handoff>>,
    /// Per fabric: an eventfd the acceptor rings after a hand-off (wakes an adaptive
    /// reactor; part of the owner's epoll set).
    pub bells: Vec<RawFd>,
    /// Per fabric: connections it owns plus requests handed to it and not yet
    /// answered (the acceptor balances on this: least connections).
    pub load: Vec<AtomicUsize>,
    /// Per fabric: set by its `listen`, cleared when it is dropped; the acceptor
    /// hands requests only to accepting fabrics.
    pub accepting: Vec<AtomicBool>,
    /// Round-robin cursor for ties (touched by the acceptor only).
    pub next: AtomicUsize,
}

// SAFETY: the raw pointers are libibverbs/librdmacm objects created in `open_group` and
// destroyed only in `Drop` (when no fabric is left). After `open_group` they are only
// read; the calls made on them from several threads (ibv_reg_mr and rdma_create_qp on
// the PD, rdma_migrate_id onto a channel, rdma_get_cm_event on a channel by its one
// poller) are thread-safe in both libraries. Everything mutable is an atomic or a
// lock-free queue.
unsafe impl Send for Group {}
// SAFETY: as above.
unsafe impl Sync for Group {}

/// One fabric's own device objects (see the module docs).
pub(super) struct Local {
    pub comp: *mut ibv_comp_channel,
    pub cq: *mut ibv_cq,
    pub epfd: RawFd,
    pub cqe: u32,
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own; no memory is passed.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if fl < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The name of the device behind `ctx`.
fn device_name(ctx: *mut ibv_context) -> String {
    // SAFETY: `ctx` is a live device context (from librdmacm); its `device` pointer and
    // the NUL-terminated name it returns live as long as the context.
    unsafe {
        let p = ibv_get_device_name((*ctx).device);
        if p.is_null() {
            return String::new();
        }
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

/// librdmacm's open device contexts (kept open for the life of the process).
fn devices() -> Vec<*mut ibv_context> {
    let mut n = 0;
    // SAFETY: returns a NULL-terminated array of contexts owned by librdmacm; we free
    // only the array.
    let list = unsafe { rdma_get_devices(&mut n) };
    if list.is_null() {
        return Vec::new();
    }
    // SAFETY: the array has `n` entries.
    let v = (0..n.max(0) as usize)
        .map(|i| unsafe { *list.add(i) })
        .collect();
    // SAFETY: the array came from rdma_get_devices; the contexts stay open.
    unsafe { rdma_free_devices(list) };
    v
}

/// Names of the RDMA devices present (for error messages and `rdma.device` checks).
pub fn device_names() -> Vec<String> {
    devices().into_iter().map(device_name).collect()
}

/// The device context named `want` (any if `None`).
fn find_device(want: Option<&str>) -> io::Result<*mut ibv_context> {
    let all = devices();
    if all.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "no RDMA device (is a driver loaded and a link added?)",
        ));
    }
    all.into_iter()
        .find(|&c| want.is_none_or(|w| device_name(c) == w))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "no RDMA device named {:?} (present: {})",
                    want.unwrap_or(""),
                    device_names().join(", ")
                ),
            )
        })
}

fn new_eventfd() -> io::Result<RawFd> {
    // SAFETY: plain syscall.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

fn new_channel() -> io::Result<*mut rdma_event_channel> {
    // SAFETY: plain constructor; NULL on failure (errno set).
    let ch = unsafe { rdma_create_event_channel() };
    if ch.is_null() {
        return Err(errno_err("rdma_create_event_channel"));
    }
    // SAFETY: the channel is live; its fd is a plain integer.
    set_nonblocking(unsafe { (*ch).fd })?;
    Ok(ch)
}

impl Group {
    /// Opens the device owning `bind` (or named `want` for a wildcard address; with
    /// both, they must agree), its protection domain, and `n` fabrics' channels,
    /// inboxes and doorbells.
    pub fn open(want: Option<&str>, bind: SocketAddr, n: usize) -> io::Result<Group> {
        let n = n.max(1);
        let mut g = Group {
            ctx: ptr::null_mut(),
            pd: ptr::null_mut(),
            limits: Limits {
                max_qp_wr: 0,
                max_sge: 0,
                max_rd_atom: 0,
                max_init_rd_atom: 0,
                cqe: 0,
            },
            name: String::new(),
            bind,
            listen_ch: ptr::null_mut(),
            listen_id: ptr::null_mut(),
            chans: Vec::with_capacity(n),
            inbox: (0..n).map(|_| ArrayQueue::new(INBOX)).collect(),
            bells: Vec::with_capacity(n),
            load: (0..n).map(|_| AtomicUsize::new(0)).collect(),
            accepting: (0..n).map(|_| AtomicBool::new(false)).collect(),
            next: AtomicUsize::new(0),
        };
        // From here on `g`'s Drop frees whatever was created.
        g.listen_ch = new_channel()?;
        // SAFETY: the channel is live; the id is written on success.
        if unsafe {
            rdma_create_id(
                g.listen_ch,
                &mut g.listen_id,
                ptr::null_mut(),
                rdma_port_space::RDMA_PS_TCP,
            )
        } != 0
        {
            return Err(errno_err("rdma_create_id"));
        }
        let sa = socket2::SockAddr::from(bind);
        // SAFETY: `sa` is a valid sockaddr for the duration of the call (librdmacm copies it).
        if unsafe { rdma_bind_addr(g.listen_id, sa.as_ptr() as *mut libc::sockaddr) } != 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("rdma_bind_addr({bind}): {e} (no RDMA device has this address?)"),
            ));
        }
        // SAFETY: the id is live; `verbs` is set when the address belongs to a device.
        let bound = unsafe { (*g.listen_id).verbs };
        g.ctx = if bound.is_null() {
            find_device(want)?
        } else {
            if let Some(w) = want {
                let have = device_name(bound);
                if have != w {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("{bind} belongs to RDMA device {have}, not {w}"),
                    ));
                }
            }
            bound
        };
        g.name = device_name(g.ctx);
        // SAFETY: zeroed is a valid ibv_device_attr (plain integers).
        let mut attr: ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: ctx is live and `attr` is writable.
        let rc = unsafe { ibv_query_device(g.ctx, &mut attr) };
        if rc != 0 {
            return Err(os_err("ibv_query_device", rc));
        }
        g.limits = Limits {
            max_qp_wr: attr.max_qp_wr.max(1) as u32,
            max_sge: attr.max_sge.max(1) as u32,
            max_rd_atom: attr.max_qp_rd_atom.clamp(0, 255) as u8,
            max_init_rd_atom: attr.max_qp_init_rd_atom.clamp(0, 255) as u8,
            cqe: CQ_ENTRIES.min(attr.max_cqe.max(1)) as u32,
        };
        // SAFETY: ctx is live.
        g.pd = unsafe { ibv_alloc_pd(g.ctx) };
        if g.pd.is_null() {
            return Err(errno_err("ibv_alloc_pd"));
        }
        for _ in 0..n {
            g.chans.push(new_channel()?);
            g.bells.push(new_eventfd()?);
        }
        Ok(g)
    }

    /// Rings fabric `k`'s doorbell (after a hand-off).
    pub fn ring(&self, k: usize) {
        let one: u64 = 1;
        // SAFETY: the eventfd is open for the group's life; 8 readable bytes.
        unsafe { libc::write(self.bells[k], (&one as *const u64).cast(), 8) };
    }

    /// Empties fabric `k`'s doorbell (before waiting).
    pub fn quiet(&self, k: usize) {
        let mut v: u64 = 0;
        // SAFETY: as above; non-blocking, 8 writable bytes.
        unsafe { libc::read(self.bells[k], (&mut v as *mut u64).cast(), 8) };
    }

    /// The fabric that gets the next connection (see [`least_loaded`]); advances the
    /// round-robin cursor past it.
    pub fn pick(&self) -> Option<usize> {
        let k = least_loaded(
            self.load.len(),
            self.next.load(Ordering::Relaxed),
            |k| self.accepting[k].load(Ordering::Acquire),
            |k| self.load[k].load(Ordering::Acquire),
        )?;
        self.next.store(k + 1, Ordering::Relaxed);
        Some(k)
    }
}

/// Least connections, ties round-robin: among the `n` fabrics that are `accepting`, the
/// one with the smallest `load`; of equal ones the first at or after `start` (mod n).
/// `None` if none accepts.
pub(super) fn least_loaded(
    n: usize,
    start: usize,
    accepting: impl Fn(usize) -> bool,
    load: impl Fn(usize) -> usize,
) -> Option<usize> {
    let mut best: Option<(usize, usize)> = None;
    for i in 0..n {
        let k = (start + i) % n;
        if !accepting(k) {
            continue;
        }
        let l = load(k);
        if best.is_none_or(|(_, bl)| l < bl) {
            best = Some((k, l));
        }
    }
    best.map(|(k, _)| k)
}

impl Drop for Group {
    fn drop(&mut self) {
        // SAFETY: every object was created by `open` and is destroyed once, ids before
        // their channels, the PD last; every fabric (with its QPs and MRs) is gone.
        unsafe {
            for q in &self.inbox {
                while let Some(h) = q.pop() {
                    rdma_reject(h.id, ptr::null(), 0);
                    rdma_destroy_id(h.id);
                }
            }
            if !self.listen_id.is_null() {
                rdma_destroy_id(self.listen_id);
            }
            if !self.listen_ch.is_null() {
                rdma_destroy_event_channel(self.listen_ch);
            }
            for &ch in &self.chans {
                rdma_destroy_event_channel(ch);
            }
            for &fd in &self.bells {
                libc::close(fd);
            }
            if !self.pd.is_null() {
                ibv_dealloc_pd(self.pd);
            }
        }
    }
}

impl Local {
    /// Fabric `k`'s CQ (with its completion channel) and its epoll set: its CM
    /// channel, completion channel and doorbell, plus the listener's channel for the
    /// acceptor (`k == 0`).
    pub fn open(g: &Group, k: usize) -> io::Result<Local> {
        let mut l = Local {
            comp: ptr::null_mut(),
            cq: ptr::null_mut(),
            epfd: -1,
            cqe: g.limits.cqe,
        };
        // SAFETY: ctx is live.
        l.comp = unsafe { ibv_create_comp_channel(g.ctx) };
        if l.comp.is_null() {
            return Err(errno_err("ibv_create_comp_channel"));
        }
        // SAFETY: ctx and the completion channel are live.
        l.cq = unsafe { ibv_create_cq(g.ctx, l.cqe as i32, ptr::null_mut(), l.comp, 0) };
        if l.cq.is_null() {
            return Err(errno_err("ibv_create_cq"));
        }
        // SAFETY: the CQ is live; `cqe` is what the device granted (at least asked).
        l.cqe = unsafe { (*l.cq).cqe }.max(1) as u32;
        // SAFETY: the channels are live; their fds are plain integers.
        let (chfd, compfd, lfd) = unsafe { ((*g.chans[k]).fd, (*l.comp).fd, (*g.listen_ch).fd) };
        set_nonblocking(compfd)?;
        // SAFETY: plain syscall.
        l.epfd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if l.epfd < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut fds = vec![chfd, compfd, g.bells[k]];
        if k == 0 {
            fds.push(lfd);
        }
        for fd in fds {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: fd as u64,
            };
            // SAFETY: epfd and fd are open; `ev` is read during the call only.
            if unsafe { libc::epoll_ctl(l.epfd, libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(l)
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        // SAFETY: created by `open`, destroyed once, the CQ before its channel; the
        // fabric destroyed the QPs using this CQ first.
        unsafe {
            if self.epfd >= 0 {
                libc::close(self.epfd);
            }
            if !self.cq.is_null() {
                ibv_destroy_cq(self.cq);
            }
            if !self.comp.is_null() {
                ibv_destroy_comp_channel(self.comp);
            }
        }
    }
}
