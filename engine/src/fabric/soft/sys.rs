//! The only `unsafe` of the soft provider: the shared-memory segment (memfd + mmap),
//! raw copies between registered memory and that segment, and `SCM_RIGHTS` fd passing.
//!
//! Soundness rests on three rules:
//! - every offset into the segment is checked against its length here (`assert!`: a
//!   failure is a bug of ours, never peer input, which `ring.rs` validates first);
//! - registered memory is only reached through a [`Span`], which `mr.rs` builds solely
//!   after checking it lies inside a live registration, whose validity the caller of
//!   the unsafe `Fabric::register` guaranteed;
//! - the segment is shared with a peer process that may write it at any time, so it is
//!   never viewed as a Rust slice: only atomics and `ptr::copy` touch it (the bytes are
//!   treated like device memory; a hostile peer can only make us read garbage, which
//!   the frame decoder rejects). Seals stop the peer from shrinking the file under our
//!   mapping (which would turn our accesses into SIGBUS).

use super::mr::Span;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr;
use std::sync::atomic::{AtomicU32, AtomicU64};

/// A `MAP_SHARED` mapping of a sealed memfd.
pub struct Shm {
    ptr: *mut u8,
    len: usize,
    /// Kept by the creator until it has been passed to the peer.
    fd: Option<OwnedFd>,
}

// SAFETY: the mapping is owned by this value (unmapped on drop) and only accessed
// through atomics and bounds-checked copies; nothing ties it to a thread.
unsafe impl Send for Shm {}

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

const SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;

impl Shm {
    /// Creates a zero-filled, sealed (no shrink, no grow) segment of `len` bytes.
    pub fn create(len: usize) -> io::Result<Shm> {
        let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
        // SAFETY: the name is a valid NUL-terminated string; the returned fd is owned.
        let fd = unsafe {
            OwnedFd::from_raw_fd(cvt(libc::memfd_create(c"nfsgw-soft".as_ptr(), flags))?)
        };
        let size = libc::off_t::try_from(len).map_err(|_| io::ErrorKind::InvalidInput)?;
        // SAFETY: plain syscalls on an fd we own.
        unsafe {
            cvt(libc::ftruncate(fd.as_raw_fd(), size))?;
            cvt(libc::fcntl(
                fd.as_raw_fd(),
                libc::F_ADD_SEALS,
                SEALS | libc::F_SEAL_SEAL,
            ))?;
        }
        Shm::map(fd, len, true)
    }

    /// Maps a segment received from a peer after checking its size and seals.
    pub fn open(fd: OwnedFd, len: usize) -> io::Result<Shm> {
        // SAFETY: fstat/fcntl on an fd we own, into a zeroed stat buffer.
        let (size, seals) = unsafe {
            let mut st: libc::stat = zeroed();
            cvt(libc::fstat(fd.as_raw_fd(), &mut st))?;
            (
                st.st_size,
                cvt(libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS))?,
            )
        };
        if usize::try_from(size).ok() != Some(len) || seals & SEALS != SEALS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "shared segment has the wrong size or is not sealed",
            ));
        }
        Shm::map(fd, len, false)
    }

    fn map(fd: OwnedFd, len: usize, keep_fd: bool) -> io::Result<Shm> {
        if len == 0 {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: a fresh shared mapping of `len` bytes of a file that is sealed at
        // exactly `len` bytes; we own the result and unmap it on drop.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Shm {
            ptr: p.cast(),
            len,
            fd: keep_fd.then_some(fd),
        })
    }

    /// The memfd, while we still hold it (creator side, before it is passed on).
    pub fn fd(&self) -> Option<RawFd> {
        self.fd.as_ref().map(|f| f.as_raw_fd())
    }

    /// Closes our memfd once the peer has its own (the mapping stays).
    pub fn close_fd(&mut self) {
        self.fd = None;
    }

    fn at(&self, off: usize, len: usize) -> *mut u8 {
        assert!(
            off.checked_add(len).is_some_and(|end| end <= self.len),
            "shm access out of range"
        );
        // SAFETY: in bounds of our mapping (checked above).
        unsafe { self.ptr.add(off) }
    }

    /// A 64-bit atomic control word at `off` (8-byte aligned).
    pub fn atomic_u64(&self, off: usize) -> &AtomicU64 {
        assert_eq!(off % 8, 0);
        // SAFETY: aligned, in bounds, lives as long as `self`; shared memory is only
        // ever accessed atomically at control offsets.
        unsafe { &*(self.at(off, 8) as *const AtomicU64) }
    }

    /// A 32-bit atomic flag at `off` (4-byte aligned).
    pub fn atomic_u32(&self, off: usize) -> &AtomicU32 {
        assert_eq!(off % 4, 0);
        // SAFETY: as for `atomic_u64`.
        unsafe { &*(self.at(off, 4) as *const AtomicU32) }
    }

    /// Copies `src` into the segment at `off`.
    pub fn write(&self, off: usize, src: &[u8]) {
        let dst = self.at(off, src.len());
        // SAFETY: `dst` has room for `src.len()` bytes (checked); a local slice cannot
        // overlap the mapping.
        unsafe { ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) }
    }

    /// Copies segment bytes at `off` into `dst`.
    pub fn read(&self, off: usize, dst: &mut [u8]) {
        let src = self.at(off, dst.len());
        // SAFETY: as for `write`, in the other direction.
        unsafe { ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) }
    }

    /// Copies `len` bytes of registered memory, `src` from `src_off`, into the segment.
    pub fn copy_from_mem(&self, off: usize, src: &Span, src_off: usize, len: usize) {
        assert!(src_off.checked_add(len).is_some_and(|end| end <= src.len()));
        let dst = self.at(off, len);
        // SAFETY: the span lies inside a live registration (see module docs) and the
        // range inside it was checked; `ptr::copy` tolerates a (silly) registration of
        // the mapping itself.
        unsafe { ptr::copy((src.addr() as usize + src_off) as *const u8, dst, len) }
    }

    /// Copies `len` segment bytes at `off` into registered memory, `dst` from `dst_off`.
    pub fn copy_to_mem(&self, off: usize, dst: &Span, dst_off: usize, len: usize) {
        assert!(dst_off.checked_add(len).is_some_and(|end| end <= dst.len()));
        let src = self.at(off, len);
        // SAFETY: as for `copy_from_mem`; the registration has LOCAL_WRITE or
        // REMOTE_WRITE as the caller of `mr.rs` demanded.
        unsafe { ptr::copy(src, (dst.addr() as usize + dst_off) as *mut u8, len) }
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        // SAFETY: we mapped exactly this range and nothing borrows it past `self`.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

/// Room for one fd in a control message (aligned for `cmsghdr`).
#[repr(C, align(8))]
struct CmsgBuf([u8; 64]);

/// Sends `bytes` with `fd` attached (`SCM_RIGHTS`), never raising SIGPIPE.
pub fn send_with_fd(sock: RawFd, bytes: &[u8], fd: RawFd) -> io::Result<usize> {
    let mut cbuf = CmsgBuf([0; 64]);
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: msghdr points at live locals; the control buffer is large enough for
    // one fd (asserted) and suitably aligned; CMSG_* walk inside it.
    unsafe {
        let space = libc::CMSG_SPACE(size_of::<libc::c_int>() as u32) as usize;
        assert!(space <= cbuf.0.len());
        let mut msg: libc::msghdr = zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.0.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<libc::c_int>() as u32) as _;
        ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>(), fd);
        let n = libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }
}

/// Receives into `buf`, returning the byte count and the first fd passed along (any
/// further fds are closed). `Ok((0, _))` is end of stream.
pub fn recv_with_fd(sock: RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    let mut cbuf = CmsgBuf([0; 64]);
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: as in `send_with_fd`; every fd the kernel installed is wrapped in an
    // OwnedFd exactly once (kept or dropped).
    unsafe {
        let mut msg: libc::msghdr = zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.0.as_mut_ptr().cast();
        msg.msg_controllen = cbuf.0.len() as _;
        let n = libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC | libc::MSG_DONTWAIT);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut first = None;
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg);
                let header = data as usize - cmsg as usize;
                let bytes = ((*cmsg).cmsg_len as usize).saturating_sub(header);
                for i in 0..bytes / size_of::<libc::c_int>() {
                    let raw = ptr::read_unaligned(data.cast::<libc::c_int>().add(i));
                    let owned = OwnedFd::from_raw_fd(raw);
                    if first.is_none() {
                        first = Some(owned);
                    }
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        Ok((n as usize, first))
    }
}

/// A non-blocking send that never raises SIGPIPE (a dead peer is an `Err`).
pub fn send_nosignal(sock: RawFd, bytes: &[u8]) -> io::Result<usize> {
    // SAFETY: `bytes` is a live buffer of the given length.
    let n = unsafe {
        libc::send(
            sock,
            bytes.as_ptr().cast(),
            bytes.len(),
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}
