//! How a namespace change (create, remove, rename, mkdir) reaches stable storage before
//! the reply (RFC 1813 §3.3.8, §3.3.12; RFC 8881 §18.16.3): `backend.fs.flush`.
//!
//! **Per directory** (any POSIX file system): a new file is fsynced before a name
//! points at it (without a log nothing orders the inode's write before the
//! directory's, and a name must never reach the disk before its inode: handles'
//! "Crash argument"), then the changed directory is fsynced; concurrent changes of one
//! directory share that fsync (`dirsync`).
//!
//! **Journal** (XFS; ext4 with a journal): such a file system writes every metadata
//! change (inodes, their extended attributes, directory entries) through one log,
//! committed in order, each change whole or not at all:
//! - jbd2 (ext4): every handle joins the running transaction; transactions commit in
//!   tid order, and replay stops at the first uncommitted one. A change made before a
//!   later one is in the same or an earlier transaction.
//! - XFS: a transaction is committed into the current CIL context, whose sequence only
//!   grows; a log force of sequence `s` writes every checkpoint up to `s` (commit
//!   records are ordered: `xlog_cil_force_seq`, `xlog_cil_write_commit_record`), and
//!   recovery replays checkpoints in order.
//!
//! So (a) a new **empty** file needs no fsync before its rename: its inode and
//! attributes are in the rename's transaction or an earlier one, and no crash can keep
//! the name without them. A file created with data keeps its fsync: data blocks are not
//! in the log (not even under ext4's `data=ordered`, which orders only the blocks a
//! committing transaction allocated, and delayed allocation may not have). This is
//! also why ext4's data mode (`ordered`, `writeback`, `journal`) does not enter the
//! decision: it orders file data, never metadata, and no data flush is skipped.
//! (b) One log force covers every change *completed before it started*, in any
//! directory, so the group commit spans the file system (one `DirSync` for the log,
//! not one per directory): concurrent creates in different directories share it.
//! (c) A stable WRITE's data (`data`) needs no device flush of its own either: once
//! its pages are written back and their I/O completed, the metadata that I/O changed
//! is in the log, and the log force's cache flush covers the data blocks completed
//! before it. An object put whole (`FsUpload::complete`) keeps its fsync before the
//! rename: a name must never point at a torn object, even one never acknowledged.
//! Two cases keep the file's own fsync: a mount with `lazytime` (a write's timestamp
//! change is then kept in memory, not logged, until the inode is written: only fsync
//! writes it) and an XFS file whose data is on the realtime device (the log force
//! flushes the data device only; `xfs_file_fsync` flushes the realtime one), asked
//! per file (one `ioctl`) only on an XFS whose geometry has a realtime section.
//! The reactor's own stable WRITE (`uring`: write, fsync and statx linked in one
//! submission) keeps its fsync: a log force there would be a blocking group wait.
//!
//! Which fsync forces the log matters: ext4 commits on a directory's fsync (since
//! Linux 5.10 `ext4_fsync_journal` forces a full commit for anything but a regular
//! file; before, `jbd2_complete_transaction` up to the inode's `i_sync_tid`), and XFS
//! (`xfs_dir_fsync` → `xfs_log_force_inode`) forces the log only up to that inode's
//! last change. The leader of a group cannot fsync "its own" directory: another
//! waiter's change, completed before the fsync started, may sit in a later
//! transaction (or CIL context) than that directory's last change. So a log force is
//! a metadata change of our own **marker** directory (`futimens`, one transaction
//! that begins after every covered change completed, hence in the same or a later
//! transaction) and then that directory's fsync, which commits the log up to it. A
//! directory, not a file: ext4's fast commits (`-O fast_commit`) would log a regular
//! file's inode alone.
//!
//! Detection: `fstatfs`'s type. XFS always has its log. ext4 (the driver also serving
//! ext2/ext3) has one when `/sys/fs/ext4/<dev>/journal_task` names a jbd2 thread
//! (`<none>` without a journal; `/proc/fs/jbd2/<dev>-*` as a second witness). Others
//! (btrfs, whose fsync goes through a per-subvolume log tree with its own rules;
//! tmpfs; no-journal ext4; unknown): per directory. A directory on another file
//! system than the root's (a mount inside the root) is always flushed per directory.

use super::dirsync::{DirSync, DirSyncs};
use super::sys;
use crate::config::FlushMode;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// The marker directory whose change and fsync force the log: a temporary's name, so
/// never listed and never a valid key.
pub(super) const MARKER: &str = ".nfsgw-tmp.flush";

const XFS_SUPER_MAGIC: i64 = 0x5846_5342;
const EXT4_SUPER_MAGIC: i64 = 0xEF53;
const BTRFS_SUPER_MAGIC: i64 = 0x9123_683E;
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// What detection found under the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detected {
    /// "xfs", "ext4", "btrfs", "tmpfs" or the type number.
    pub fs: String,
    /// Metadata goes through one ordered log.
    pub journaled: bool,
    /// Why, for the start-up log and errors.
    pub why: String,
}

/// `KINDS` index in `stats::fs_flushes`.
#[derive(Clone, Copy)]
pub(super) enum Kind {
    File = 0,
    Dir = 1,
    Log = 2,
    /// A stable WRITE's or COMMIT's own fsync (no log, or the file on another device).
    Data = 3,
}

/// Detects whether the file system of `root` orders its metadata through one log.
pub fn detect(root: BorrowedFd<'_>) -> io::Result<Detected> {
    let sf = sys::fstatfs(root)?;
    let st = sys::fstat(root)?;
    Ok(match sf.f_type as i64 {
        XFS_SUPER_MAGIC => Detected {
            fs: "xfs".into(),
            journaled: true,
            why: "XFS logs all metadata".into(),
        },
        EXT4_SUPER_MAGIC => ext4(st.st_dev),
        BTRFS_SUPER_MAGIC => no("btrfs", "btrfs fsyncs through per-subvolume log trees"),
        TMPFS_MAGIC => no("tmpfs", "tmpfs has no stable storage to order"),
        t => no(
            &format!("{t:#x}"),
            "not a file system known to log metadata",
        ),
    })
}

fn no(fs: &str, why: &str) -> Detected {
    Detected {
        fs: fs.into(),
        journaled: false,
        why: why.into(),
    }
}

/// glibc's `major`/`minor` encoding of a `dev_t`.
fn major_minor(dev: u64) -> (u64, u64) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    (major, minor)
}

/// The block device's kernel name (`loop0`, `vda1`, `dm-0`): ext4's `s_id`.
fn device_name(dev: u64) -> Option<String> {
    let (major, minor) = major_minor(dev);
    let link = std::fs::read_link(format!("/sys/dev/block/{major}:{minor}")).ok()?;
    Some(link.file_name()?.to_string_lossy().into_owned())
}

fn ext4(dev: u64) -> Detected {
    let Some(name) = device_name(dev) else {
        return no("ext4", "its block device is not in /sys/dev/block");
    };
    let task = std::fs::read_to_string(format!("/sys/fs/ext4/{name}/journal_task"));
    let jbd2 = std::fs::read_dir("/proc/fs/jbd2").ok().is_some_and(|d| {
        d.flatten().any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{name}-"))
        })
    });
    match task {
        Ok(t) if t.trim() == "<none>" => no("ext4", &format!("{name} has no journal")),
        Ok(t) => Detected {
            fs: "ext4".into(),
            journaled: true,
            why: format!("{name} has a journal (jbd2 thread {})", t.trim()),
        },
        // Older kernels lack journal_task: jbd2's own entry is the witness.
        Err(_) if jbd2 => Detected {
            fs: "ext4".into(),
            journaled: true,
            why: format!("{name} has a journal (/proc/fs/jbd2)"),
        },
        Err(_) => no("ext4", &format!("no journal found for {name}")),
    }
}

/// The file system's log, forced through the marker directory.
struct Log {
    dev: u64,
    marker: OwnedFd,
    group: DirSync,
    /// Stable writes' data may share the force (`data`): not under `lazytime`, whose
    /// write timestamps reach the log only when something writes the inode.
    data: bool,
    /// XFS with a realtime section: a file's data may be on it, and the force does
    /// not flush its device (`data` asks per file; without the section, never).
    realtime: bool,
}

/// The backend's flush policy and its counters.
pub(super) struct Flush {
    log: Option<Log>,
    counts: [AtomicU64; 4],
}

impl Flush {
    /// Decides the mode for `root` (open as `root_fd`) from `mode` and detection; logs
    /// the choice. `journal` on a file system without a log is an error: skipping the
    /// fsyncs there would lose acknowledged creates in a crash.
    pub fn open(root: &Path, root_fd: BorrowedFd<'_>, mode: FlushMode) -> anyhow::Result<Flush> {
        let det = detect(root_fd)?;
        let journal = match mode {
            FlushMode::PerDirectory => false,
            FlushMode::Auto => det.journaled,
            FlushMode::Journal if det.journaled => true,
            FlushMode::Journal => anyhow::bail!(
                "backend.fs.flush = \"journal\": backend.root {} is on {} ({}), which orders \
                 no metadata through a log; a create would be acknowledged before it is \
                 durable. Use \"auto\" or \"per-directory\"",
                root.display(),
                det.fs,
                det.why
            ),
        };
        let log =
            if journal {
                Some(Self::marker(root_fd).map_err(|e| {
                    anyhow::anyhow!("backend.root {}: {MARKER}: {e}", root.display())
                })?)
            } else {
                None
            };
        tracing::info!(
            "backend.root {}: {} ({}): namespace changes flushed {}",
            root.display(),
            det.fs,
            det.why,
            if journal {
                "by one shared log force (backend.fs.flush = journal)"
            } else {
                "per directory (backend.fs.flush = per-directory)"
            }
        );
        Ok(Flush {
            log,
            counts: Default::default(),
        })
    }

    fn marker(root: BorrowedFd<'_>) -> io::Result<Log> {
        let name = CString::new(MARKER).expect("no NUL");
        match sys::mkdirat(root, &name, 0o700) {
            Ok(()) => sys::fsync(root)?,
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
            Err(e) => return Err(e),
        }
        let marker = sys::openat(
            root,
            &name,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
        )?;
        let dev = sys::fstat(marker.as_fd())?.st_dev;
        let lazy = lazytime(root);
        // An XFS whose geometry cannot be read is treated as having the section.
        let realtime = sys::fstatfs(root)?.f_type as i64 == XFS_SUPER_MAGIC
            && sys::xfs_has_realtime(root).unwrap_or(true);
        if realtime && !lazy {
            tracing::info!(
                "backend.root's XFS has a realtime section: a stable WRITE or COMMIT asks \
                 whether its file's data is there (then fsyncs it) before sharing the log force"
            );
        }
        if lazy {
            tracing::info!(
                "backend.root is mounted lazytime (or its mount could not be read): stable \
                 WRITEs and COMMITs fsync their own file"
            );
        }
        Ok(Log {
            dev,
            marker,
            group: DirSync::default(),
            data: !lazy,
            realtime,
        })
    }

    /// The mode in force: true for one log force per group of changes.
    #[cfg(test)]
    pub fn journal(&self) -> bool {
        self.log.is_some()
    }

    fn count(&self, kind: Kind) {
        self.counts[kind as usize].fetch_add(1, Ordering::Relaxed);
        crate::stats::fs_flushes::count(kind as usize);
    }

    /// Flushes of `kind` this backend asked for.
    #[cfg(test)]
    pub fn flushes(&self, kind: Kind) -> u64 {
        self.counts[kind as usize].load(Ordering::Relaxed)
    }

    /// The log, when it covers changes on device `dev`.
    fn log_on(&self, dev: u64) -> Option<&Log> {
        self.log.as_ref().filter(|l| l.dev == dev)
    }

    /// Whether a new file made empty in directory `dir` needs its own fsync before its
    /// name points at it: not when the log orders it before the name (module doc, a).
    /// (No log: no stat. A failed stat: synced.)
    pub fn new_empty_file_needs_sync(&self, dir: BorrowedFd<'_>) -> bool {
        self.log.is_none()
            || sys::fstat(dir).map_or(true, |st| self.new_empty_file_needs_sync_on(st.st_dev))
    }

    /// `new_empty_file_needs_sync` for a directory on device `dev` (a stat the caller
    /// already has).
    pub fn new_empty_file_needs_sync_on(&self, dev: u64) -> bool {
        self.log_on(dev).is_none()
    }

    /// A new object's fsync before its name (the inode and its attributes first).
    pub fn new_file(&self, f: BorrowedFd<'_>) -> io::Result<()> {
        self.count(Kind::File);
        sys::fsync(f)
    }

    /// Returns once the change of the entries of directory `dir` (its stat `st`, taken
    /// after the change) is on stable storage: a log force that started after the
    /// change, or a fsync of `dir` (`dirs`' group commit).
    pub fn entries(&self, dirs: &DirSyncs, dir: BorrowedFd<'_>, st: &libc::stat) -> io::Result<()> {
        match self.log_on(st.st_dev) {
            Some(log) => self.force(log),
            None => dirs.sync((st.st_dev, st.st_ino), || self.fsync_dir(dir)),
        }
    }

    /// Both directories of a rename: one log force when the log covers both, else
    /// each directory's own fsync.
    pub fn two(&self, to: BorrowedFd<'_>, from: BorrowedFd<'_>) -> io::Result<()> {
        if let Some(log) = &self.log {
            let on = |d: BorrowedFd<'_>| sys::fstat(d).is_ok_and(|st| st.st_dev == log.dev);
            if on(to) && on(from) {
                return self.force(log);
            }
        }
        self.fsync_dir(to)?;
        self.fsync_dir(from)
    }

    /// A stable WRITE's or COMMIT's data and the file's metadata on stable storage
    /// before the reply (RFC 1813 §3.3.7 FILE_SYNC, §3.3.21; RFC 8881 §18.32.3).
    ///
    /// Without a log, `fsync`: one device flush per call. With the log (module doc (c)):
    /// `sync_file_range(WAIT_BEFORE | WRITE | WAIT_AFTER)` writes the file's dirty pages
    /// and waits for their I/O to complete, with no device flush; the metadata that I/O
    /// changes — blocks allocated, unwritten extents converted, the on-disk size moved —
    /// is committed into the log by the file system *before* the pages leave writeback
    /// (XFS `xfs_end_ioend` before `iomap_finish_ioends`; ext4's unwritten conversion
    /// before `ext4_finish_bio`), and the write's own timestamp change was logged at
    /// `write(2)`. Then one shared log force: its commit is written with a cache flush
    /// (`REQ_PREFLUSH`: XFS's checkpoint iclogs, jbd2's commit block), which makes every
    /// write *completed* before it durable, this file's data included. Concurrent
    /// stable WRITEs and namespace changes share that one flush instead of one each.
    /// `dev`: the file's device, as the caller's open entry recorded it.
    pub fn data(&self, f: BorrowedFd<'_>, dev: u64) -> io::Result<()> {
        let shares = |log: &Log| {
            log.data && dev == log.dev && !(log.realtime && sys::xfs_realtime(f).unwrap_or(true))
        };
        let log = self.log.as_ref().filter(|l| shares(l));
        match log {
            Some(log) => {
                sys::sync_file_range_wait(f)?;
                self.force(log)
            }
            None => {
                self.count(Kind::Data);
                sys::fsync(f)
            }
        }
    }

    /// A directory's fsync, counted.
    pub fn fsync_dir(&self, dir: BorrowedFd<'_>) -> io::Result<()> {
        self.count(Kind::Dir);
        sys::fsync(dir)
    }

    /// A log force shared by every change completed before it started (module doc):
    /// our own change of the marker joins the running transaction (CIL context) after
    /// all of theirs, and the marker's fsync commits the log up to it.
    fn force(&self, log: &Log) -> io::Result<()> {
        // Other calls in flight at the workers may be about to change the namespace
        // too: let them (module doc (b); `DirSync::sync_gathered`).
        let res = log
            .group
            .sync_gathered(crate::backend::pending::in_flight_others, || {
                self.count(Kind::Log);
                sys::touch(log.marker.as_fd())?;
                sys::fsync(log.marker.as_fd())
            });
        // Past its force the call changes nothing more that another force should wait
        // for (a compound's later change counts as a call not in flight: no wait).
        crate::backend::pending::settled();
        res
    }
}

/// Whether the mount of `fd` has `lazytime` among its options (`/proc/self/mountinfo`,
/// the line of its mount id: per-mount options, field 6, and the super block's, the
/// last field). Unknown (no `STATX_MNT_ID`, no line): true, the answer that keeps
/// stable writes' own fsync.
fn lazytime(fd: BorrowedFd<'_>) -> bool {
    let Ok(id) = sys::mount_id(fd) else {
        return true;
    };
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return true;
    };
    let id = id.to_string();
    info.lines()
        .find(|l| l.split(' ').next() == Some(id.as_str()))
        .is_none_or(mount_line_has_lazytime)
}

/// Whether one `/proc/self/mountinfo` line names `lazytime` in either option list.
fn mount_line_has_lazytime(line: &str) -> bool {
    let fields: Vec<&str> = line.split(' ').collect();
    let mount_opts = fields.get(5).copied().unwrap_or("");
    let super_opts = fields
        .iter()
        .position(|f| *f == "-")
        .and_then(|i| fields.get(i + 3))
        .copied()
        .unwrap_or("");
    [mount_opts, super_opts]
        .iter()
        .any(|o| o.split(',').any(|x| x == "lazytime"))
}

#[cfg(test)]
#[path = "flush_tests.rs"]
mod tests;
