//! The fs backend's system calls: the only `unsafe` of the backend.
//!
//! Each function is a safe wrapper around one libc call (or a short fixed sequence):
//! names are `&CStr`, descriptors are `BorrowedFd` (open for the duration of the call,
//! so never a closed or reused number), buffers are slices (the kernel is told their
//! exact length), and failures are `io::Error` from `errno`. Nothing here keeps a
//! pointer past the call, except [`Dir`], which owns its `DIR *`.
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

fn last_err() -> io::Error {
    io::Error::last_os_error()
}

/// `0` is success, anything else a failure described by `errno`.
fn check(r: libc::c_int) -> io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(last_err())
    }
}

/// A byte count returned by the kernel (negative: failure in `errno`).
fn check_len(n: libc::ssize_t) -> io::Result<usize> {
    usize::try_from(n).map_err(|_| last_err())
}

/// The soft limit on open descriptors.
pub fn nofile_limit() -> io::Result<u64> {
    soft_limit(libc::RLIMIT_NOFILE)
}

/// The soft limit on a file's size (RLIMIT_FSIZE; `RLIM_INFINITY` = none): growing a
/// file past it raises SIGXFSZ, which kills the process.
pub fn fsize_limit() -> io::Result<u64> {
    soft_limit(libc::RLIMIT_FSIZE)
}

fn soft_limit(which: libc::__rlimit_resource_t) -> io::Result<u64> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `rl` is a valid, writable rlimit for the duration of the call.
    check(unsafe { libc::getrlimit(which, &mut rl) })?;
    Ok(rl.rlim_cur)
}

/// `open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)`: a directory by absolute path.
pub fn open_dir(path: &CStr) -> io::Result<OwnedFd> {
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    // SAFETY: `path` is a NUL-terminated string that outlives the call.
    let fd = unsafe { libc::open(path.as_ptr(), flags) };
    owned(fd)
}

/// Takes ownership of a descriptor a call just returned (negative: failure).
fn owned(fd: libc::c_int) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(last_err());
    }
    // SAFETY: `fd` was just returned open by the kernel and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `openat(dir, name, flags | O_CLOEXEC | O_NOFOLLOW, mode)`, retried on EINTR. The
/// last component is never followed if it is a symlink (the backend's no-escape rule).
pub fn openat(
    dir: BorrowedFd<'_>,
    name: &CStr,
    flags: libc::c_int,
    mode: libc::mode_t,
) -> io::Result<OwnedFd> {
    calls::note("openat");
    let flags = flags | libc::O_CLOEXEC | libc::O_NOFOLLOW;
    loop {
        // SAFETY: `dir` is open for the call and `name` is NUL-terminated.
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                name.as_ptr(),
                flags,
                libc::c_uint::from(mode),
            )
        };
        match owned(fd) {
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            r => return r,
        }
    }
}

/// A zeroed `stat` for the kernel to fill.
fn empty_stat() -> libc::stat {
    // SAFETY: `stat` is plain integers, for which all-zero bytes are a valid value.
    unsafe { std::mem::zeroed() }
}

pub fn fstat(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    calls::note("fstat");
    let mut st = empty_stat();
    // SAFETY: `fd` is open and `st` is a valid, writable stat.
    check(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(st)
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`: a symlink is described, not followed.
pub fn lstatat(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<libc::stat> {
    calls::note("lstatat");
    let mut st = empty_stat();
    // SAFETY: `dir` is open, `name` NUL-terminated and `st` a valid, writable stat.
    let r = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    check(r)?;
    Ok(st)
}

pub fn fstatvfs(fd: BorrowedFd<'_>) -> io::Result<libc::statvfs> {
    // SAFETY: `statvfs` is plain integers, for which all-zero bytes are a valid value.
    let mut sv: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open and `sv` a valid, writable statvfs.
    check(unsafe { libc::fstatvfs(fd.as_raw_fd(), &mut sv) })?;
    Ok(sv)
}

/// `fstatfs`: the file system's type (`f_type`, a `*_SUPER_MAGIC`), for `flush`.
pub fn fstatfs(fd: BorrowedFd<'_>) -> io::Result<libc::statfs> {
    // SAFETY: `statfs` is plain integers, for which all-zero bytes are a valid value.
    let mut sf: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open and `sf` a valid, writable statfs.
    check(unsafe { libc::fstatfs(fd.as_raw_fd(), &mut sf) })?;
    Ok(sf)
}

/// `futimens(fd, [UTIME_NOW, UTIME_NOW])`: a metadata change of the inode (one
/// journaled transaction on ext4 and XFS), for `flush`'s log forces.
pub fn touch(fd: BorrowedFd<'_>) -> io::Result<()> {
    calls::note("futimens");
    let now = libc::timespec {
        tv_sec: 0,
        tv_nsec: libc::UTIME_NOW,
    };
    let times = [now, now];
    // SAFETY: `fd` is open and `times` two valid timespecs read by the call only.
    check(unsafe { libc::futimens(fd.as_raw_fd(), times.as_ptr()) })
}

pub fn fsync(fd: BorrowedFd<'_>) -> io::Result<()> {
    calls::note("fsync");
    // SAFETY: `fd` is open for the call; fsync touches no memory of ours.
    check(unsafe { libc::fsync(fd.as_raw_fd()) })
}

/// `sync_file_range(fd, 0, 0, WAIT_BEFORE | WRITE | WAIT_AFTER)`: every dirty page of
/// the file written and its I/O completed (no device cache flush, no metadata of its
/// own: `flush::Flush::data` says what makes it durable). A writeback error since the
/// file was opened is reported here, as by `fsync`.
pub fn sync_file_range_wait(fd: BorrowedFd<'_>) -> io::Result<()> {
    calls::note("sync_file_range");
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | libc::SYNC_FILE_RANGE_WRITE
        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    // SAFETY: `fd` is open for the call; the call touches no memory of ours.
    check(unsafe { libc::sync_file_range(fd.as_raw_fd(), 0, 0, flags) })
}

/// `FS_IOC_FSGETXATTR` (`_IOR('X', 31, struct fsxattr)`, 28 bytes), not in libc.
const FS_IOC_FSGETXATTR: libc::c_ulong = 0x801c_581f;
/// `FS_XFLAG_REALTIME`: the file's data lives on XFS's realtime device.
const FS_XFLAG_REALTIME: u32 = 0x1;

/// Whether the file's data is on XFS's realtime device (`fsx_xflags`), whose cache a
/// log force does not flush. An error: the caller treats the file as realtime.
pub fn xfs_realtime(fd: BorrowedFd<'_>) -> io::Result<bool> {
    calls::note("ioctl");
    // struct fsxattr: fsx_xflags first, 28 bytes in all.
    let mut fsx = [0u32; 7];
    // SAFETY: `fd` is open; the kernel writes at most 28 bytes into `fsx` (28 bytes).
    check(unsafe { libc::ioctl(fd.as_raw_fd(), FS_IOC_FSGETXATTR as _, fsx.as_mut_ptr()) })?;
    Ok(fsx[0] & FS_XFLAG_REALTIME != 0)
}

/// `XFS_IOC_FSGEOMETRY_V1` (`_IOR('X', 100, struct xfs_fsop_geom_v1)`, 112 bytes), not
/// in libc; the v1 layout is the oldest and every XFS kernel answers it.
const XFS_IOC_FSGEOMETRY_V1: libc::c_ulong = 0x8070_5864;

/// Whether the XFS file system of `fd` has a realtime section (`rtblocks`, the sixth
/// 8-byte word of `struct xfs_fsop_geom_v1`: eight `__u32`, then `datablocks`,
/// `rtblocks`), internal or on its own device. Without one no file's data can be on
/// it, and no stable write needs to ask (`xfs_realtime`).
pub fn xfs_has_realtime(fd: BorrowedFd<'_>) -> io::Result<bool> {
    calls::note("ioctl");
    let mut geom = [0u64; 14];
    // SAFETY: `fd` is open; the kernel writes at most 112 bytes into `geom` (112 bytes).
    check(unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            XFS_IOC_FSGEOMETRY_V1 as _,
            geom.as_mut_ptr(),
        )
    })?;
    Ok(geom[5] != 0)
}

/// The mount id of the mount `fd` is on (`statx` `STATX_MNT_ID`, Linux 5.8+).
pub fn mount_id(fd: BorrowedFd<'_>) -> io::Result<u64> {
    calls::note("statx");
    // SAFETY: an all-zero statx is a valid value to be overwritten.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let empty = c"";
    // SAFETY: `fd` is open, `empty` a NUL-terminated path, `stx` writable.
    check(unsafe {
        libc::statx(
            fd.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_MNT_ID,
            &mut stx,
        )
    })?;
    if stx.stx_mask & libc::STATX_MNT_ID == 0 {
        return Err(io::Error::from_raw_os_error(libc::ENOSYS));
    }
    Ok(stx.stx_mnt_id)
}

pub fn mkdirat(dir: BorrowedFd<'_>, name: &CStr, mode: libc::mode_t) -> io::Result<()> {
    calls::note("mkdirat");
    // SAFETY: `dir` is open and `name` NUL-terminated.
    check(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) })
}

/// `unlinkat(dir, name, flags)` (`AT_REMOVEDIR` for a directory).
pub fn unlinkat(dir: BorrowedFd<'_>, name: &CStr, flags: libc::c_int) -> io::Result<()> {
    calls::note("unlinkat");
    // SAFETY: `dir` is open and `name` NUL-terminated.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) })
}

pub fn renameat(
    from_dir: BorrowedFd<'_>,
    from: &CStr,
    to_dir: BorrowedFd<'_>,
    to: &CStr,
) -> io::Result<()> {
    calls::note("renameat");
    // SAFETY: both descriptors are open and both names NUL-terminated.
    check(unsafe {
        libc::renameat(
            from_dir.as_raw_fd(),
            from.as_ptr(),
            to_dir.as_raw_fd(),
            to.as_ptr(),
        )
    })
}

/// `linkat(.., 0)`: a new name for an existing file; EEXIST when `to` exists.
pub fn linkat(
    from_dir: BorrowedFd<'_>,
    from: &CStr,
    to_dir: BorrowedFd<'_>,
    to: &CStr,
) -> io::Result<()> {
    calls::note("linkat");
    // SAFETY: both descriptors are open and both names NUL-terminated.
    check(unsafe {
        libc::linkat(
            from_dir.as_raw_fd(),
            from.as_ptr(),
            to_dir.as_raw_fd(),
            to.as_ptr(),
            0,
        )
    })
}

/// `renameat2(.., RENAME_NOREPLACE)`: moves `from` to `to` only if `to` does not
/// exist (EEXIST otherwise), in one step. EINVAL (or ENOSYS) where the file system or
/// kernel does not offer the flag: the caller falls back to `linkat` + `unlinkat`.
pub fn rename_noreplace(
    from_dir: BorrowedFd<'_>,
    from: &CStr,
    to_dir: BorrowedFd<'_>,
    to: &CStr,
) -> io::Result<()> {
    calls::note("renameat2");
    // SAFETY: both descriptors are open and both names NUL-terminated; the raw
    // system call (glibc and musl both have the number, not always the wrapper)
    // reads the names and writes nothing of ours.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            from_dir.as_raw_fd(),
            from.as_ptr(),
            to_dir.as_raw_fd(),
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(last_err())
    }
}

/// The NUL-separated attribute names of an open file into `buf`; ERANGE when it is
/// too small.
pub fn flistxattr(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    calls::note("flistxattr");
    // SAFETY: `fd` is open; the kernel writes at most `buf.len()` bytes into `buf`.
    check_len(unsafe { libc::flistxattr(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) })
}

/// The value of attribute `name` into `buf`; ERANGE when it is too small, ENODATA
/// when there is no such attribute.
pub fn fgetxattr(fd: BorrowedFd<'_>, name: &CStr, buf: &mut [u8]) -> io::Result<usize> {
    calls::note("fgetxattr");
    // SAFETY: `fd` is open, `name` NUL-terminated; the kernel writes at most
    // `buf.len()` bytes into `buf`.
    check_len(unsafe {
        libc::fgetxattr(
            fd.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    })
}

/// Creates or replaces attribute `name`.
pub fn fsetxattr(fd: BorrowedFd<'_>, name: &CStr, value: &[u8]) -> io::Result<()> {
    calls::note("fsetxattr");
    // SAFETY: `fd` is open, `name` NUL-terminated; the kernel reads exactly
    // `value.len()` bytes from `value`.
    check(unsafe {
        libc::fsetxattr(
            fd.as_raw_fd(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    })
}

/// Removes attribute `name`; ENODATA when there is none.
pub fn fremovexattr(fd: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    calls::note("fremovexattr");
    // SAFETY: `fd` is open and `name` NUL-terminated.
    check(unsafe { libc::fremovexattr(fd.as_raw_fd(), name.as_ptr()) })
}

/// An open directory stream with its own open file description.
///
/// Rule: a listing never shares a file offset with another. A `dup` of a directory
/// descriptor (`F_DUPFD`, `try_clone`) shares the offset that `getdents` advances,
/// so concurrent listings through dups of one descriptor skip or repeat entries.
/// [`Dir::open`] re-opens the directory itself (`openat(dir, ".")`) instead.
pub struct Dir {
    dp: NonNull<libc::DIR>,
}

impl Dir {
    /// A fresh stream over the directory `dir` refers to, positioned at its start.
    pub fn open(dir: BorrowedFd<'_>) -> io::Result<Dir> {
        let fd = openat(dir, c".", libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
        // SAFETY: `fd` is an open directory; fdopendir takes it over on success (it is
        // released from the OwnedFd only then) and closedir in Drop closes it.
        let dp = unsafe { libc::fdopendir(fd.as_raw_fd()) };
        let dp = NonNull::new(dp).ok_or_else(last_err)?;
        // Owned by the stream from here on.
        std::mem::forget(fd);
        Ok(Dir { dp })
    }

    /// Calls `f` with each entry's name (without the NUL) and `d_type` ("." and ".."
    /// included), borrowing the name from the stream: no allocation per entry, so a
    /// listing that looks at a whole large directory for one page stays cheap.
    pub fn each(&mut self, mut f: impl FnMut(&[u8], u8)) -> io::Result<()> {
        self.each_until(|name, kind| {
            f(name, kind);
            false
        })
    }

    /// `each` until `f` returns true (then the rest of the stream is not read).
    pub fn each_until(&mut self, mut f: impl FnMut(&[u8], u8) -> bool) -> io::Result<()> {
        loop {
            // SAFETY: readdir reports errors only through errno, so clear it first;
            // errno is this thread's own variable, writing it has no other effect.
            unsafe { *libc::__errno_location() = 0 };
            // SAFETY: `dp` is a live stream owned by `self` (`&mut self`).
            let ent = unsafe { libc::readdir(self.dp.as_ptr()) };
            if ent.is_null() {
                let e = last_err();
                return match e.raw_os_error() {
                    Some(0) | None => Ok(()),
                    Some(_) => Err(e),
                };
            }
            // SAFETY: a non-null readdir result stays valid until the next
            // readdir/closedir on this stream; `f` returns before either, and
            // `d_name` is NUL-terminated.
            let (name, kind) = unsafe {
                let ent = &*ent;
                (CStr::from_ptr(ent.d_name.as_ptr()).to_bytes(), ent.d_type)
            };
            if f(name, kind) {
                return Ok(());
            }
        }
    }
}

impl Dir {
    /// Whether the stream has any entry besides "." and "..": reads only until the
    /// first one (`readdir` fills its buffer with one `getdents64` at a time).
    pub fn has_entries(&mut self) -> io::Result<bool> {
        let mut any = false;
        self.each_until(|name, _| {
            any = name != b"." && name != b"..";
            any
        })?;
        Ok(any)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        // SAFETY: `dp` came from fdopendir and is closed exactly once, here.
        unsafe { libc::closedir(self.dp.as_ptr()) };
    }
}

/// Sets attribute `name` with `flags` (0, XATTR_CREATE: EEXIST if present,
/// XATTR_REPLACE: ENODATA if absent).
pub fn fsetxattr_flags(
    fd: BorrowedFd<'_>,
    name: &CStr,
    value: &[u8],
    flags: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `fd` is open, `name` NUL-terminated; the kernel reads exactly
    // `value.len()` bytes from `value`.
    check(unsafe {
        libc::fsetxattr(
            fd.as_raw_fd(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    })
}

/// `lseek(fd, offset, whence)` (SEEK_DATA / SEEK_HOLE); ENXIO: none past `offset`.
pub fn lseek(fd: BorrowedFd<'_>, offset: u64, whence: libc::c_int) -> io::Result<u64> {
    let off =
        libc::off_t::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::ENXIO))?;
    // SAFETY: `fd` is open for the call; lseek touches no memory of ours.
    let r = unsafe { libc::lseek(fd.as_raw_fd(), off, whence) };
    u64::try_from(r).map_err(|_| last_err())
}

/// `fallocate(fd, mode, offset, len)`.
pub fn fallocate(fd: BorrowedFd<'_>, mode: libc::c_int, offset: u64, len: u64) -> io::Result<()> {
    let big = || io::Error::from_raw_os_error(libc::EFBIG);
    let off = libc::off_t::try_from(offset).map_err(|_| big())?;
    let len = libc::off_t::try_from(len).map_err(|_| big())?;
    // SAFETY: `fd` is open for the call; fallocate touches no memory of ours.
    check(unsafe { libc::fallocate(fd.as_raw_fd(), mode, off, len) })
}

/// One `copy_file_range` from `src` at `src_off` to `dst` at `dst_off`: bytes copied
/// (0 at the source's end).
pub fn copy_file_range(
    src: BorrowedFd<'_>,
    src_off: u64,
    dst: BorrowedFd<'_>,
    dst_off: u64,
    len: usize,
) -> io::Result<usize> {
    let big = || io::Error::from_raw_os_error(libc::EFBIG);
    let mut so = libc::loff_t::try_from(src_off).map_err(|_| big())?;
    let mut d = libc::loff_t::try_from(dst_off).map_err(|_| big())?;
    // SAFETY: both descriptors are open; `so` and `d` are valid, writable offsets the
    // kernel updates during the call only.
    check_len(unsafe {
        libc::copy_file_range(src.as_raw_fd(), &mut so, dst.as_raw_fd(), &mut d, len, 0)
    })
}

/// `ioctl(dst, FICLONERANGE)`: shares `len` bytes of `src` at `src_off` into `dst` at
/// `dst_off` (0 = to the source's end); EOPNOTSUPP/EXDEV/EINVAL where the file system
/// cannot.
pub fn ficlonerange(
    src: BorrowedFd<'_>,
    src_off: u64,
    dst: BorrowedFd<'_>,
    dst_off: u64,
    len: u64,
) -> io::Result<()> {
    let arg = libc::file_clone_range {
        src_fd: i64::from(src.as_raw_fd()),
        src_offset: src_off,
        src_length: len,
        dest_offset: dst_off,
    };
    // SAFETY: `dst` and `src` are open; `arg` is a valid file_clone_range the
    // kernel only reads during the call.
    check(unsafe { libc::ioctl(dst.as_raw_fd(), libc::FICLONERANGE, &arg) })
}

/// What the tests of the create and remove paths count: this thread's system calls
/// by name (`calls::take`). Counted in test builds only.
pub mod calls {
    #[cfg(test)]
    use std::cell::RefCell;
    #[cfg(test)]
    use std::collections::BTreeMap;

    #[cfg(test)]
    thread_local! {
        static CALLS: RefCell<BTreeMap<&'static str, u32>> = const { RefCell::new(BTreeMap::new()) };
    }

    #[inline(always)]
    pub fn note(name: &'static str) {
        #[cfg(test)]
        CALLS.with(|c| *c.borrow_mut().entry(name).or_default() += 1);
        #[cfg(not(test))]
        let _ = name;
    }

    /// This thread's counts since the last `take`, which clears them.
    #[cfg(test)]
    pub fn take() -> BTreeMap<&'static str, u32> {
        CALLS.with(|c| std::mem::take(&mut *c.borrow_mut()))
    }
}
