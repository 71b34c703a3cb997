//! The device context of one `VerbsFabric`: the CM event channel and the bound listen
//! id (which picks the device), the protection domain, the completion queue with its
//! completion channel, and the epoll set behind `Fabric::wait_fd`.

use super::{errno_err, os_err};
use rdma_sys::*;
use std::ffi::CStr;
use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::ptr;

/// Completion-queue entries we ask for (clamped to the device's `max_cqe`).
const CQ_ENTRIES: i32 = 32 * 1024;

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

pub(super) struct Device {
    pub ch: *mut rdma_event_channel,
    pub listen_id: *mut rdma_cm_id,
    pub bind: SocketAddr,
    pub ctx: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub comp: *mut ibv_comp_channel,
    pub cq: *mut ibv_cq,
    pub epfd: RawFd,
    pub limits: Limits,
    pub name: String,
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

/// The device context named `want` among librdmacm's open devices (any if `None`).
fn find_device(want: Option<&str>) -> io::Result<*mut ibv_context> {
    let mut n = 0;
    // SAFETY: returns a NULL-terminated array of contexts owned by librdmacm (kept open
    // for the life of the process); we free only the array.
    let list = unsafe { rdma_get_devices(&mut n) };
    if list.is_null() || n == 0 {
        if !list.is_null() {
            // SAFETY: the array came from rdma_get_devices.
            unsafe { rdma_free_devices(list) };
        }
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "no RDMA device (is a driver loaded and a link added?)",
        ));
    }
    let mut found = ptr::null_mut();
    for i in 0..n as usize {
        // SAFETY: i < n entries.
        let ctx = unsafe { *list.add(i) };
        if want.is_none_or(|w| device_name(ctx) == w) {
            found = ctx;
            break;
        }
    }
    // SAFETY: the array came from rdma_get_devices; the contexts stay open.
    unsafe { rdma_free_devices(list) };
    if found.is_null() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no RDMA device named {:?}", want.unwrap_or("")),
        ));
    }
    Ok(found)
}

impl Device {
    pub fn open(want: Option<&str>, bind: SocketAddr) -> io::Result<Device> {
        let mut d = Device {
            ch: ptr::null_mut(),
            listen_id: ptr::null_mut(),
            bind,
            ctx: ptr::null_mut(),
            pd: ptr::null_mut(),
            comp: ptr::null_mut(),
            cq: ptr::null_mut(),
            epfd: -1,
            limits: Limits {
                max_qp_wr: 0,
                max_sge: 0,
                max_rd_atom: 0,
                max_init_rd_atom: 0,
                cqe: 0,
            },
            name: String::new(),
        };
        // From here on `d`'s Drop frees whatever was created.
        // SAFETY: plain constructor; NULL on failure (errno set).
        d.ch = unsafe { rdma_create_event_channel() };
        if d.ch.is_null() {
            return Err(errno_err("rdma_create_event_channel"));
        }
        // SAFETY: `d.ch` is a live channel; the id is written on success.
        if unsafe {
            rdma_create_id(
                d.ch,
                &mut d.listen_id,
                ptr::null_mut(),
                rdma_port_space::RDMA_PS_TCP,
            )
        } != 0
        {
            return Err(errno_err("rdma_create_id"));
        }
        let sa = socket2::SockAddr::from(bind);
        // SAFETY: `sa` is a valid sockaddr for the duration of the call (librdmacm copies it).
        if unsafe { rdma_bind_addr(d.listen_id, sa.as_ptr() as *mut libc::sockaddr) } != 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("rdma_bind_addr({bind}): {e} (no RDMA device has this address?)"),
            ));
        }
        // SAFETY: the id is live; `verbs` is set when the address belongs to a device.
        let bound = unsafe { (*d.listen_id).verbs };
        d.ctx = if bound.is_null() {
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
        d.name = device_name(d.ctx);
        // SAFETY: zeroed is a valid ibv_device_attr (plain integers); ctx is live.
        let mut attr: ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: ctx is live and `attr` is writable.
        let rc = unsafe { ibv_query_device(d.ctx, &mut attr) };
        if rc != 0 {
            return Err(os_err("ibv_query_device", rc));
        }
        let cqe = CQ_ENTRIES.min(attr.max_cqe.max(1));
        d.limits = Limits {
            max_qp_wr: attr.max_qp_wr.max(1) as u32,
            max_sge: attr.max_sge.max(1) as u32,
            max_rd_atom: attr.max_qp_rd_atom.clamp(0, 255) as u8,
            max_init_rd_atom: attr.max_qp_init_rd_atom.clamp(0, 255) as u8,
            cqe: cqe as u32,
        };
        // SAFETY: ctx is live.
        d.pd = unsafe { ibv_alloc_pd(d.ctx) };
        if d.pd.is_null() {
            return Err(errno_err("ibv_alloc_pd"));
        }
        // SAFETY: ctx is live.
        d.comp = unsafe { ibv_create_comp_channel(d.ctx) };
        if d.comp.is_null() {
            return Err(errno_err("ibv_create_comp_channel"));
        }
        // SAFETY: ctx and the completion channel are live.
        d.cq = unsafe { ibv_create_cq(d.ctx, cqe, ptr::null_mut(), d.comp, 0) };
        if d.cq.is_null() {
            return Err(errno_err("ibv_create_cq"));
        }
        // SAFETY: both channels are live; their fds are plain integers.
        let (chfd, compfd) = unsafe { ((*d.ch).fd, (*d.comp).fd) };
        set_nonblocking(chfd)?;
        set_nonblocking(compfd)?;
        // SAFETY: plain syscall.
        d.epfd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if d.epfd < 0 {
            return Err(io::Error::last_os_error());
        }
        for fd in [chfd, compfd] {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: fd as u64,
            };
            // SAFETY: epfd and fd are open; `ev` is read during the call only.
            if unsafe { libc::epoll_ctl(d.epfd, libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(d)
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: each object was created by `open` and is destroyed once, children
        // (CQ) before parents (channel, PD); the fabric destroyed its QPs, ids and MRs
        // before dropping the device.
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
            if !self.pd.is_null() {
                ibv_dealloc_pd(self.pd);
            }
            if !self.listen_id.is_null() {
                rdma_destroy_id(self.listen_id);
            }
            if !self.ch.is_null() {
                rdma_destroy_event_channel(self.ch);
            }
        }
    }
}
