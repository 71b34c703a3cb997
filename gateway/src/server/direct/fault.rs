//! Failed storage I/O on the reactor's ring (issue 12): what it is called, counted
//! and logged as. What the call gets is decided in `direct`: a ring operation that
//! fails or comes back short never answers its call; the call goes to a backend
//! worker with its record untouched, and the worker redoes it with the file model
//! (a WRITE from its first byte, with `write_all_at`) and answers — so a client sees
//! exactly the worker path's reply (NFS3ERR_NOSPC / NFS4ERR_NOSPC with wcc, or
//! success if the retry got through), and an NFSv4.1 slot the ring claimed is given
//! back untouched first (`fast_io::Started`).
//!
//! A short write (tmpfs and most file systems take the pages that fit, then say
//! ENOSPC; a file-size limit cuts a write too) is never answered as a full write:
//! the reply needs the write's result to equal the count asked, and the kernel
//! fails the link after a short write, so a stable WRITE's fsync and statx never run
//! (`uring::tests::a_short_write_cancels_its_sync_and_statx`).
//!
//! Each failure is counted (`nfsgw_uring_failures_total{op}`) and logged at most
//! once a second per kind per reactor, with how many lines were held back (a full
//! disk fails every write: the log must not grow with the load).

use engine::rdma::admit::Throttle;
use std::io;
use std::time::{Duration, Instant};

/// How often each kind may be logged (per reactor), as the RDMA refusals are.
const EVERY: Duration = Duration::from_secs(1);

/// A failed ring operation; errors are positive errno values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    Read(i32),
    Splice(i32),
    Write(i32),
    /// The write took `wrote` of `of` bytes.
    ShortWrite {
        wrote: u32,
        of: u32,
    },
    /// A stable WRITE's linked fsync/fdatasync failed (the write succeeded; its
    /// statx was cancelled). Its errno is not kept: the sync's completion carries
    /// no slot (`direct::SYNC_TAG`).
    Sync,
    Statx(i32),
    Commit(i32),
}

impl Failure {
    /// The index into `stats::uring_failures::OPS`.
    fn kind(self) -> usize {
        match self {
            Failure::Read(_) => 0,
            Failure::Splice(_) => 1,
            Failure::Write(_) => 2,
            Failure::ShortWrite { .. } => 3,
            Failure::Sync => 4,
            Failure::Statx(_) => 5,
            Failure::Commit(_) => 6,
        }
    }
}

/// What a WRITE chain's two reaped results (the write's and the statx's) say:
/// `None` for success (the whole count written, the statx done), else the first
/// failure in the chain.
pub(crate) fn write_outcome(count: u32, wrote: i32, stat: i32) -> Option<Failure> {
    if wrote < 0 {
        return Some(Failure::Write(errno(wrote)));
    }
    if wrote as u32 != count {
        return Some(Failure::ShortWrite {
            wrote: wrote as u32,
            of: count,
        });
    }
    match stat {
        0 => None,
        // The write succeeded and the statx never ran: the sync linked between
        // them failed (an unstable chain links the statx straight to the write).
        e if e == -libc::ECANCELED => Some(Failure::Sync),
        e => Some(Failure::Statx(errno(e))),
    }
}

/// The errno of a negative completion result (never overflowing).
pub(crate) fn errno(result: i32) -> i32 {
    result.checked_neg().unwrap_or(i32::MAX)
}

/// One reactor's failure log: a throttle per kind.
pub(crate) struct Faults {
    throttles: [Throttle; crate::stats::uring_failures::OPS.len()],
}

impl Default for Faults {
    fn default() -> Faults {
        Faults {
            throttles: std::array::from_fn(|_| Throttle::new(EVERY)),
        }
    }
}

impl Faults {
    /// Counts `f` and logs it unless its kind was logged within `EVERY`.
    pub fn note(&mut self, f: Failure) {
        let kind = f.kind();
        crate::stats::uring_failures::count(kind);
        let Some(held) = self.throttles[kind].ready(Instant::now()) else {
            return;
        };
        let err = |e: i32| io::Error::from_raw_os_error(e);
        match f {
            Failure::Read(e) | Failure::Splice(e) => tracing::warn!(
                held,
                "io_uring read failed ({}); a worker retries it",
                err(e)
            ),
            Failure::Write(e) => tracing::warn!(
                held,
                "io_uring write failed ({}); a worker redoes it and answers",
                err(e)
            ),
            Failure::ShortWrite { wrote, of } => tracing::warn!(
                held,
                "io_uring write failed: short ({wrote} of {of} bytes, as on a full file system); a worker redoes it and answers"
            ),
            Failure::Sync => tracing::warn!(
                held,
                "io_uring write failed: its linked fsync/fdatasync failed; a worker redoes the stable WRITE and answers"
            ),
            Failure::Statx(e) => tracing::warn!(
                held,
                "io_uring statx after a write failed ({}); a worker redoes the WRITE and answers",
                err(e)
            ),
            Failure::Commit(e) => tracing::warn!(
                held,
                "io_uring fdatasync failed ({}); a worker answers the COMMIT",
                err(e)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_whole_write_with_its_statx_is_a_success() {
        assert_eq!(write_outcome(4096, 4096, 0), None);
        assert_eq!(
            write_outcome(4096, -libc::ENOSPC, -libc::ECANCELED),
            Some(Failure::Write(libc::ENOSPC))
        );
        // ENOSPC after two pages: never a full write, whatever the statx says.
        for stat in [0, -libc::ECANCELED] {
            assert_eq!(
                write_outcome(1 << 20, 8192, stat),
                Some(Failure::ShortWrite {
                    wrote: 8192,
                    of: 1 << 20
                })
            );
        }
        assert_eq!(
            write_outcome(10, 0, 0),
            Some(Failure::ShortWrite { wrote: 0, of: 10 })
        );
        assert_eq!(write_outcome(10, 10, -libc::ECANCELED), Some(Failure::Sync));
        assert_eq!(
            write_outcome(10, 10, -libc::ENOMEM),
            Some(Failure::Statx(libc::ENOMEM))
        );
        // Hostile values: a result past the count, i32::MIN.
        assert!(write_outcome(10, i32::MAX, 0).is_some());
        assert_eq!(
            write_outcome(10, 10, i32::MIN),
            Some(Failure::Statx(i32::MAX))
        );
        assert!(matches!(
            write_outcome(10, i32::MIN, 0),
            Some(Failure::Write(_))
        ));
    }

    #[test]
    fn each_kind_is_logged_once_a_second_and_always_counted() {
        use crate::stats::uring_failures::total;
        let mut f = Faults::default();
        let before = total(3);
        for _ in 0..5 {
            f.note(Failure::ShortWrite { wrote: 1, of: 2 });
        }
        // Counted every time (other tests may count too: at least ours).
        assert!(total(3) - before >= 5);
        // The first line went out, the rest are held until a second passed.
        assert!(f.throttles[3].ready(Instant::now()).is_none());
        assert!(f.throttles[2].ready(Instant::now()).is_some());
    }
}
