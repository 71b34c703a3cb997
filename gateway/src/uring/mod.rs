//! One reactor's io_uring (run-to-completion storage I/O): the `fs`
//! backend's READ data is read by the reactor that owns the call, straight into the
//! reply's pool buffer, and the completion is reaped in the reactor's poll loop — no
//! hand-off to a worker thread.
//!
//! This module is the ring itself and the only `unsafe` of the data path: setting it
//! up, registering the reactor's pool region as one fixed buffer, pushing read SQEs
//! whose destination the caller guarantees, and reaping CQEs. What a completion means
//! (which call, which reply) is the caller's table, keyed by the `u64` user data.
//!
//! Availability: `open` fails (and the caller keeps the worker path, logging why)
//! when `/proc/sys/kernel/io_uring_disabled` forbids it, when the kernel has no
//! io_uring or lacks the READ opcode, or when set-up fails (seccomp, memlock).
//! Registering the pool region is tried and, where refused, plain buffers are used.
//!
//! Wake-ups: an eventfd is registered with the ring, so a completion makes it
//! readable; the reactor adds it to its epoll set, so an adaptive reactor sleeping in
//! epoll wakes for completions as it does for sockets.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod files;
pub mod fixed;
pub mod pipes;

use io_uring::{opcode, types, IoUring};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Submission queue entries per reactor ring. Bounds the reads in flight per reactor
/// (further READs go to the workers until completions free room).
pub const ENTRIES: u32 = 256;

/// A reactor's ring.
pub struct Uring {
    ring: IoUring,
    /// Readable when completions were posted (registered with the ring).
    eventfd: OwnedFd,
    /// The pool region registered as fixed buffer 0: (base, len).
    fixed: Option<(usize, usize)>,
    /// SQEs pushed since the last `submit`.
    unsubmitted: u32,
    /// Operations submitted and not yet reaped.
    inflight: u32,
    /// The kernel has WRITE, STATX and FSYNC too (reactor WRITE and COMMIT).
    writes: bool,
    /// One statx result per tag slot (`write_then_statx`), allocated once.
    stx: Box<[libc::statx]>,
    /// Slots of the sparse registered file table (0: none registered).
    file_slots: u32,
    /// Reads of at least this many bytes go with IOSQE_ASYNC (see `set_offload_min`).
    offload_min: u32,
    /// The kernel has SPLICE (zero-copy TCP READ replies, `pipes`).
    splice: bool,
    /// A read, write or splice of [`BULK_BYTES`] or more was queued since the ring
    /// was last empty (see [`Uring::bulk`]).
    bulk: bool,
}

/// Data operations of at least this many bytes are bulk transfer: while one is in
/// flight an adaptive reactor does not spin waiting for it (`engine.idle_bulk_spin_us`).
pub const BULK_BYTES: u32 = 32 << 10;

/// A file as a data operation names it: its descriptor, and its index in the ring's
/// registered file table when it has one (`types::Fixed`: the kernel then skips
/// the per-operation descriptor lookup and file reference count). A plain
/// descriptor converts into one without an index.
#[derive(Debug, Clone, Copy)]
pub struct FileRef {
    pub fd: RawFd,
    pub fixed: Option<u32>,
}

impl From<RawFd> for FileRef {
    fn from(fd: RawFd) -> FileRef {
        FileRef { fd, fixed: None }
    }
}

/// Builds an SQE on `$f`'s registered index if it has one, else on its descriptor
/// (the two target types differ, so each arm builds its own entry).
macro_rules! on_file {
    ($f:expr, $t:ident => $e:expr) => {
        match $f.fixed {
            Some(i) => {
                let $t = types::Fixed(i);
                $e
            }
            None => {
                let $t = types::Fd($f.fd);
                $e
            }
        }
    };
}

/// Registered file table sizes tried at set-up, largest first (the kernel refuses
/// more than the process's descriptor limit).
const FILE_TABLES: [u32; 2] = [files::MAX_FILES as u32, 1024];

/// The sync linked into a stable write's chain (`Uring::write_sync_statx`).
#[derive(Debug, Clone, Copy)]
pub struct StableSync {
    /// `fdatasync` (DATA_SYNC) rather than `fsync` (FILE_SYNC).
    pub datasync: bool,
    /// The sync's completion tag.
    pub tag: u64,
}

/// One finished operation: the caller's tag and the result (bytes, or `-errno`).
#[derive(Debug, Clone, Copy)]
pub struct Completion {
    pub tag: u64,
    pub result: i32,
}

/// Why io_uring is not used, for the start-up log line.
fn disabled_reason() -> Option<String> {
    match std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled") {
        // 1 = only members of io_uring_group may create rings; an attempt tells.
        Ok(s) if s.trim() == "2" => {
            Some("kernel.io_uring_disabled = 2 (io_uring switched off)".into())
        }
        _ => None,
    }
}

impl Uring {
    /// Sets up a ring of [`ENTRIES`] and registers `region` (the reactor's pool
    /// memory, mapped for the process's life) as fixed buffer 0 where allowed.
    pub fn open(region: (*mut u8, usize)) -> Result<Uring, String> {
        if let Some(why) = disabled_reason() {
            return Err(why);
        }
        let ring = IoUring::builder()
            .setup_clamp()
            .build(ENTRIES)
            .map_err(|e| format!("io_uring_setup failed: {e}"))?;
        let mut probe = io_uring::Probe::new();
        ring.submitter()
            .register_probe(&mut probe)
            .map_err(|e| format!("io_uring probe failed (kernel older than 5.6?): {e}"))?;
        for (op, name) in [
            (opcode::Read::CODE, "READ"),
            (opcode::ReadFixed::CODE, "READ_FIXED"),
        ] {
            if !probe.is_supported(op) {
                return Err(format!("io_uring without the {name} opcode"));
            }
        }
        let writes = [
            opcode::Write::CODE,
            opcode::WriteFixed::CODE,
            opcode::Statx::CODE,
            opcode::Fsync::CODE,
        ]
        .iter()
        .all(|&op| probe.is_supported(op));
        let splice = probe.is_supported(opcode::Splice::CODE);
        // SAFETY: plain syscall; the result is checked and owned at once.
        let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(format!("eventfd: {}", io::Error::last_os_error()));
        }
        // SAFETY: `efd` is a fresh descriptor nothing else owns.
        let eventfd = unsafe { OwnedFd::from_raw_fd(efd) };
        ring.submitter()
            .register_eventfd(eventfd.as_raw_fd())
            .map_err(|e| format!("io_uring eventfd registration failed: {e}"))?;
        let (base, len) = region;
        let iov = libc::iovec {
            iov_base: base.cast(),
            iov_len: len,
        };
        // SAFETY: the region is the reactor's pool mapping, which lives as long as the
        // process's pools (longer than this ring: the reactor drops the ring first) and
        // is never unmapped while registered.
        let fixed = match unsafe { ring.submitter().register_buffers(&[iov]) } {
            Ok(()) => Some((base as usize, len)),
            Err(e) => {
                tracing::info!(
                    "io_uring: registering the pool region ({} MiB) as a fixed buffer failed ({e}); plain buffers",
                    len >> 20
                );
                None
            }
        };
        // A sparse registered file table (5.19+; 6.1 has it): the reactor installs
        // the files it holds open there (`fixed`), else plain descriptors are used.
        let mut file_slots = 0;
        for n in FILE_TABLES {
            match ring.submitter().register_files_sparse(n) {
                Ok(()) => {
                    file_slots = n;
                    break;
                }
                Err(e) => tracing::debug!("io_uring: a registered file table of {n}: {e}"),
            }
        }
        if file_slots == 0 {
            tracing::info!("io_uring: no registered file table (refused); plain descriptors");
        }
        Ok(Uring {
            file_slots,
            ring,
            eventfd,
            fixed,
            unsubmitted: 0,
            inflight: 0,
            writes,
            // SAFETY: `statx` is plain old data; all-zero is a valid value.
            stx: (0..ENTRIES)
                .map(|_| unsafe { std::mem::zeroed() })
                .collect(),
            offload_min: u32::MAX,
            bulk: false,
            splice,
        })
    }

    /// Slots of the registered file table (0: none).
    pub fn file_slots(&self) -> u32 {
        self.file_slots
    }

    /// Installs `fd` at `index` of the registered file table (the table holds its
    /// own reference to the file until `clear_file`). One system call.
    pub fn set_file(&mut self, index: u32, fd: RawFd) -> bool {
        index < self.file_slots
            && self
                .ring
                .submitter()
                .register_files_update(index, &[fd])
                .is_ok()
    }

    /// Empties `index` of the registered file table, dropping its reference to the
    /// file. The caller makes sure no operation queued or in flight names it.
    pub fn clear_file(&mut self, index: u32) -> bool {
        index < self.file_slots
            && self
                .ring
                .submitter()
                .register_files_update(index, &[-1])
                .is_ok()
    }

    /// Whether the pool region is registered (reads use READ_FIXED).
    pub fn fixed(&self) -> bool {
        self.fixed.is_some()
    }

    /// The descriptor that turns readable when completions are posted.
    pub fn wait_fd(&self) -> RawFd {
        self.eventfd.as_raw_fd()
    }

    /// Operations submitted or queued and not yet reaped.
    pub fn inflight(&self) -> u32 {
        self.inflight
    }

    /// Whether a large copy (a read, write or splice of [`BULK_BYTES`] or more) may be
    /// in flight: one was queued since the ring was last empty. The reactor then
    /// gives its core away instead of spinning (io-wq does the copy, and on a small
    /// machine it may need that core).
    pub fn bulk(&self) -> bool {
        self.bulk && self.inflight > 0
    }

    /// Whether another operation can be queued now.
    pub fn has_room(&self) -> bool {
        self.inflight < ENTRIES
    }

    /// Reads of `n` bytes or more are queued with IOSQE_ASYNC: io_uring runs them on
    /// its io-wq worker threads (other cores) instead of completing them inline in
    /// the submitting reactor, which is what it does for cached buffered reads — the
    /// page-cache copy of a 1 MiB read would otherwise take the reactor's core.
    /// Smaller reads stay inline (cheaper than the hand-off). `u32::MAX`: never.
    pub fn set_offload_min(&mut self, n: u32) {
        self.offload_min = n;
    }

    /// Whether WRITE, STATX and FSYNC are there (else writes stay on the workers).
    pub fn writes(&self) -> bool {
        self.writes
    }

    /// The fixed-buffer index covering `p..p+len`, if the pool region is registered
    /// and holds it.
    fn fixed_index(&self, p: *const u8, len: u32) -> Option<u16> {
        let (base, rlen) = self.fixed?;
        ((p as usize) >= base && (p as usize) + len as usize <= base + rlen).then_some(0)
    }

    /// Queues `entries` back to back (a linked chain stays whole), submitting what
    /// is queued first when the SQ lacks room. False when nothing was queued.
    ///
    /// # Safety
    /// Every buffer and descriptor the entries name must stay valid until their
    /// completions are reaped (or the ring is dropped, which waits for them).
    unsafe fn push_all(&mut self, entries: &[io_uring::squeue::Entry]) -> bool {
        let n = entries.len() as u32;
        if self.inflight + n > ENTRIES {
            return false;
        }
        let free = {
            let sq = self.ring.submission();
            sq.capacity() - sq.len()
        };
        if free < entries.len() {
            self.submit();
        }
        // SAFETY: the caller keeps what the entries name valid (above).
        if unsafe { self.ring.submission().push_multiple(entries).is_err() } {
            return false;
        }
        self.unsubmitted += n;
        self.inflight += n;
        true
    }

    /// Queues a write of `len` bytes from `src` at `offset` of `fd`, tagged `tag`,
    /// linked to a statx of the file into statx slot `slot` (read it with
    /// [`Uring::statx`] once reaped), tagged `stx_tag`: the attributes after the
    /// write; cancelled with `-ECANCELED` when the write fails or is short.
    ///
    /// # Safety
    /// `fd` and `src..src+len` must stay valid until both completions are reaped (or
    /// the ring is dropped, which waits for them); `slot` must not be in use by
    /// another write in flight.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn write_then_statx(
        &mut self,
        file: impl Into<FileRef>,
        src: *const u8,
        len: u32,
        offset: u64,
        tag: u64,
        slot: usize,
        stx_tag: u64,
    ) -> bool {
        // SAFETY: forwarded to the caller (above).
        unsafe { self.write_chain(file.into(), src, len, offset, tag, None, slot, stx_tag) }
    }

    /// As [`Uring::write_then_statx`], with a sync linked between the write and the
    /// statx (a stable WRITE): `fdatasync` when `sync.datasync`, else a
    /// full `fsync`, its completion tagged `sync.tag`. A failed or short write
    /// cancels both; a failed sync cancels the statx, so a statx result of 0 means
    /// the data reached stable storage (durability: the reply waits for it).
    ///
    /// # Safety
    /// As [`Uring::write_then_statx`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn write_sync_statx(
        &mut self,
        file: impl Into<FileRef>,
        src: *const u8,
        len: u32,
        offset: u64,
        tag: u64,
        sync: StableSync,
        slot: usize,
        stx_tag: u64,
    ) -> bool {
        // SAFETY: forwarded to the caller (above).
        unsafe {
            self.write_chain(
                file.into(),
                src,
                len,
                offset,
                tag,
                Some(sync),
                slot,
                stx_tag,
            )
        }
    }

    /// WRITE, an optional sync, STATX: one linked chain (see the two callers).
    ///
    /// # Safety
    /// As [`Uring::write_then_statx`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn write_chain(
        &mut self,
        file: FileRef,
        src: *const u8,
        len: u32,
        offset: u64,
        tag: u64,
        sync: Option<StableSync>,
        slot: usize,
        stx_tag: u64,
    ) -> bool {
        let Some(stx) = self.stx.get_mut(slot) else {
            return false;
        };
        self.bulk |= len >= BULK_BYTES;
        let stx: *mut libc::statx = stx;
        let write = match self.fixed_index(src, len) {
            Some(i) => on_file!(file, t => opcode::WriteFixed::new(t, src, len, i)
                .offset(offset)
                .build()),
            None => on_file!(file, t => opcode::Write::new(t, src, len)
                .offset(offset)
                .build()),
        }
        .flags(io_uring::squeue::Flags::IO_LINK)
        .user_data(tag);
        // STATX takes no registered file: the descriptor.
        let statx = opcode::Statx::new(types::Fd(file.fd), c"".as_ptr(), stx.cast())
            .flags(libc::AT_EMPTY_PATH)
            .mask(libc::STATX_BASIC_STATS)
            .build()
            .user_data(stx_tag);
        match sync {
            // SAFETY: forwarded to the caller (above).
            None => unsafe { self.push_all(&[write, statx]) },
            Some(s) => {
                let flags = if s.datasync {
                    types::FsyncFlags::DATASYNC
                } else {
                    types::FsyncFlags::empty()
                };
                let fsync = on_file!(file, t => opcode::Fsync::new(t).flags(flags).build())
                    .flags(io_uring::squeue::Flags::IO_LINK)
                    .user_data(s.tag);
                // SAFETY: forwarded to the caller (above).
                unsafe { self.push_all(&[write, fsync, statx]) }
            }
        }
    }

    /// Queues a `statx` of `path` under the directory `dirfd` into statx slot
    /// `slot`, tagged `tag`: what the path names now, a final symlink not followed
    /// (revalidating an open file, `files::unchanged`).
    ///
    /// # Safety
    /// `dirfd` and the NUL-terminated `path` must stay valid until the completion is
    /// reaped (or the ring is dropped, which waits for it); `slot` must not be in
    /// use by another operation in flight.
    pub unsafe fn statx_path(
        &mut self,
        dirfd: RawFd,
        path: *const libc::c_char,
        slot: usize,
        tag: u64,
    ) -> bool {
        let Some(stx) = self.stx.get_mut(slot) else {
            return false;
        };
        let stx: *mut libc::statx = stx;
        let e = opcode::Statx::new(types::Fd(dirfd), path, stx.cast())
            .flags(libc::AT_SYMLINK_NOFOLLOW)
            .mask(libc::STATX_BASIC_STATS)
            .build()
            .user_data(tag);
        // SAFETY: forwarded to the caller (above).
        unsafe { self.push_all(&[e]) }
    }

    /// The statx a reaped `write_then_statx` wrote into `slot`.
    pub fn statx(&self, slot: usize) -> Option<&libc::statx> {
        self.stx.get(slot)
    }

    /// Whether SPLICE is there (else READ replies keep the pool-buffer path).
    pub fn splices(&self) -> bool {
        self.splice
    }

    /// Queues a splice of `len` bytes at `offset` of the file `fd` into the pipe
    /// whose write end is `pipe_wr` (page-cache pages referenced, not copied), tagged
    /// `tag`. Always with IOSQE_ASYNC: it runs on io-wq, so a page-cache miss waits
    /// there, never in the reactor. False when the ring is full (nothing queued).
    ///
    /// # Safety
    /// `fd` and `pipe_wr` must stay open until the completion is reaped (or the ring
    /// is dropped, which waits for it). No memory is named.
    pub unsafe fn splice(
        &mut self,
        fd: RawFd,
        offset: u64,
        pipe_wr: RawFd,
        len: u32,
        tag: u64,
    ) -> bool {
        let Ok(off) = i64::try_from(offset) else {
            return false;
        };
        self.bulk |= len >= BULK_BYTES;
        let e = opcode::Splice::new(types::Fd(fd), off, types::Fd(pipe_wr), -1, len)
            .flags(libc::SPLICE_F_MOVE)
            .build()
            .flags(io_uring::squeue::Flags::ASYNC)
            .user_data(tag);
        // SAFETY: forwarded to the caller (above).
        unsafe { self.push_all(&[e]) }
    }

    /// Queues an `fdatasync` of `fd`, tagged `tag`.
    ///
    /// # Safety
    /// `fd` must stay open until the completion is reaped.
    pub unsafe fn fdatasync(&mut self, file: impl Into<FileRef>, tag: u64) -> bool {
        let file = file.into();
        let e = on_file!(file, t => opcode::Fsync::new(t)
            .flags(types::FsyncFlags::DATASYNC)
            .build())
        .user_data(tag);
        // SAFETY: forwarded to the caller (above).
        unsafe { self.push_all(&[e]) }
    }

    /// Queues a read of `len` bytes at `offset` of `fd` into `dst`, tagged `tag`;
    /// it goes to the kernel at the next [`Uring::submit`]. False when the ring is
    /// full (nothing queued).
    ///
    /// # Safety
    /// `fd` must stay open and `dst..dst+len` valid for writes and untouched by
    /// anyone else until the completion tagged `tag` is reaped (or the ring is
    /// dropped, which waits for it).
    pub unsafe fn read(
        &mut self,
        file: impl Into<FileRef>,
        dst: *mut u8,
        len: u32,
        offset: u64,
        tag: u64,
    ) -> bool {
        if !self.has_room() {
            return false;
        }
        let file = file.into();
        let entry = match self.fixed_index(dst, len) {
            Some(i) => on_file!(file, t => opcode::ReadFixed::new(t, dst, len, i)
                .offset(offset)
                .build()),
            None => on_file!(file, t => opcode::Read::new(t, dst, len)
                .offset(offset)
                .build()),
        }
        .flags(if len >= self.offload_min {
            io_uring::squeue::Flags::ASYNC
        } else {
            io_uring::squeue::Flags::empty()
        })
        .user_data(tag);
        // SAFETY: the caller keeps `fd` and `dst` valid until the completion (above).
        let pushed = unsafe { self.ring.submission().push(&entry).is_ok() };
        if !pushed {
            // The SQ is full of unsubmitted entries: hand them over and retry once.
            self.submit();
            // SAFETY: as above.
            if unsafe { self.ring.submission().push(&entry).is_err() } {
                return false;
            }
        }
        self.unsubmitted += 1;
        self.inflight += 1;
        self.bulk |= len >= BULK_BYTES;
        true
    }

    /// Hands every queued SQE to the kernel in one `io_uring_enter` (one per poll
    /// pass, however many calls queued reads in it). Never waits.
    pub fn submit(&mut self) {
        if self.unsubmitted == 0 {
            return;
        }
        match self.ring.submit() {
            Ok(n) => self.unsubmitted = self.unsubmitted.saturating_sub(n as u32),
            // EBUSY/EAGAIN: the CQ is full or the kernel is short of memory; the
            // entries stay queued and go with the next pass's submit, after reaping.
            Err(e) => tracing::debug!("io_uring submit: {e}"),
        }
    }

    /// Reaps every posted completion into `out` (no system call).
    pub fn reap(&mut self, out: &mut Vec<Completion>) -> usize {
        if self.inflight == 0 {
            return 0;
        }
        let mut n = 0;
        for cqe in self.ring.completion() {
            out.push(Completion {
                tag: cqe.user_data(),
                result: cqe.result(),
            });
            n += 1;
        }
        self.inflight -= n as u32;
        if self.inflight == 0 {
            self.bulk = false;
        }
        n
    }

    /// Before a reactor sleeps: clears the eventfd, then says whether sleeping is
    /// safe (nothing queued unsubmitted, no completion posted and unreaped). A
    /// completion posted after the clear signals the eventfd again, so the sleep
    /// ends for it. Not on the busy path: no system call per pass.
    pub fn may_sleep(&mut self) -> bool {
        let mut v = 0u64;
        // SAFETY: reads 8 bytes into `v` from our non-blocking eventfd; EAGAIN
        // (nothing signalled) is fine and ignored.
        let _ = unsafe {
            libc::read(
                self.eventfd.as_raw_fd(),
                (&mut v as *mut u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
        self.unsubmitted == 0 && self.ring.completion().is_empty()
    }

    /// Waits until every operation in flight has completed, dropping the results
    /// (shutdown: the buffers they write into are then released).
    fn drain(&mut self) {
        let mut sink = Vec::new();
        while self.inflight > 0 {
            if let Err(e) = self.ring.submit_and_wait(1) {
                if e.raw_os_error() != Some(libc::EINTR) {
                    tracing::warn!("io_uring: waiting for reads in flight at shutdown: {e}");
                    // Leak the ring's memory rather than free buffers a read may fill.
                    return;
                }
            }
            sink.clear();
            self.reap(&mut sink);
        }
    }
}

impl Drop for Uring {
    fn drop(&mut self) {
        self.drain();
    }
}

#[cfg(test)]
mod tests;
