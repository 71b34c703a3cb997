//! A pipe that carries one reply's data from the page cache to a socket without a
//! copy through user space (zero-copy TCP READ replies): the caller splices
//! file pages into it (they are referenced, not copied), says how many bytes it holds
//! (`set_filled`), and hands it to [`super::TcpTransport::send_pipe`]; the transport
//! splices it into the socket as the socket accepts (`SPLICE_F_NONBLOCK`) and hands it
//! back through [`super::TcpTransport::take_released_pipes`] — empty when every byte
//! was sent, still holding pages when the connection went away first (the caller then
//! closes it and opens a fresh one: its pages must not reach another reply).
//!
//! Everything here is safe to call: the pipe owns its two descriptors.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Pipe capacity pages are this large (the kernel's pipe buffer unit on x86-64 and
/// arm64 with 4 KiB pages; only used to decide whether a range fits).
pub const PAGE: usize = 4096;

/// One pipe (both ends) and the bytes it holds.
#[derive(Debug)]
pub struct Pipe {
    rd: OwnedFd,
    wr: OwnedFd,
    cap: usize,
    filled: usize,
    /// The owner's name for this pipe (a pool index); the transport ignores it.
    pub id: u32,
}

impl Pipe {
    /// A new pipe of at least `size` bytes of capacity (`F_SETPIPE_SZ`; the kernel
    /// rounds up to a power of two pages and refuses sizes over
    /// `/proc/sys/fs/pipe-max-size` or, for unprivileged users, beyond their
    /// `pipe-user-pages` allowance: then the error is returned).
    pub fn new(size: usize, id: u32) -> io::Result<Pipe> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe2 writes two descriptors into `fds`, which has room for them.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors are fresh and owned by nothing else.
        let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let want = libc::c_int::try_from(size).map_err(|_| io::ErrorKind::InvalidInput)?;
        // SAFETY: fcntl on our own descriptor; no pointers.
        let got = unsafe { libc::fcntl(wr.as_raw_fd(), libc::F_SETPIPE_SZ, want) };
        if got < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Pipe {
            rd,
            wr,
            cap: got as usize,
            filled: 0,
            id,
        })
    }

    /// The write end, for splicing file pages in.
    pub fn write_fd(&self) -> RawFd {
        self.wr.as_raw_fd()
    }

    /// Bytes the pipe can hold.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Whether `len` bytes starting at file offset `offset` fit: a range not starting
    /// on a page boundary occupies one more pipe buffer than its length says.
    pub fn fits(&self, offset: u64, len: usize) -> bool {
        (offset % PAGE as u64) as usize + len <= self.cap
    }

    /// Bytes in the pipe now (as far as its owner said and the transport sent).
    pub fn filled(&self) -> usize {
        self.filled
    }

    /// Records that `n` bytes were spliced in (a completion's result).
    pub fn set_filled(&mut self, n: usize) {
        self.filled = n;
    }

    /// Whether the pipe holds nothing (may be used for the next reply).
    pub fn is_empty(&self) -> bool {
        self.filled == 0
    }

    /// Bytes the kernel says the pipe holds (`FIONREAD`; one system call: checks
    /// and tests, not the reply path).
    pub fn queued(&self) -> usize {
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes one c_int to `n`; the descriptor is our read end.
        let rc = unsafe { libc::ioctl(self.rd.as_raw_fd(), libc::FIONREAD, &mut n) };
        if rc == 0 {
            n as usize
        } else {
            usize::MAX
        }
    }

    /// Moves up to `len` bytes (at most what it holds) from the pipe to the socket
    /// `sock` without blocking (`SPLICE_F_NONBLOCK`; the socket is non-blocking too):
    /// the pages move by reference. `more`: further bytes of the record follow (the
    /// stack may hold back a short segment).
    pub(super) fn splice_to(&mut self, sock: RawFd, len: usize, more: bool) -> io::Result<usize> {
        let len = len.min(self.filled);
        if len == 0 {
            return Ok(0);
        }
        let mut flags = libc::SPLICE_F_NONBLOCK | libc::SPLICE_F_MOVE;
        if more {
            flags |= libc::SPLICE_F_MORE;
        }
        // SAFETY: plain splice between two descriptors we own or the caller's open
        // socket; null offsets (pipes and sockets have none); no memory is passed.
        let n = unsafe {
            libc::splice(
                self.rd.as_raw_fd(),
                std::ptr::null_mut(),
                sock,
                std::ptr::null_mut(),
                len,
                flags,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        self.filled -= n as usize;
        Ok(n as usize)
    }
}
