//! Failed storage I/O on the reactor's ring: what it is called, counted
//! and logged as. What the call gets is decided in `direct`: a ring operation that
//! fails or comes back short never answers its call; the call goes to a backend
//! worker with its record untouched, and the worker redoes it with the file model
//! (a WRITE from its first byte, with `write_all_at`) and answers — so a client sees
//! exactly the worker path's reply (NFS3ERR_NOSPC / NFS4ERR_NOSPC / NFS3ERR_IO with
//! wcc, or success if the retry got through), and an NFSv4.1 slot the ring claimed
//! is given back untouched first (`fast_io::Started`).
//!
//! A WRITE chain answers only when every result says so ([`write_outcome`]): the
//! whole count written (tmpfs and most file systems take the pages that fit, then
//! say ENOSPC; a file-size limit cuts a write too), the linked fsync/fdatasync of a
//! stable one succeeded, and the statx ran. Each is checked on its own: the kernel
//! cancels what follows a failed or short write
//! (`uring::tests::a_short_write_cancels_its_sync_and_statx`) but runs the statx
//! after a failed fsync (`uring::tests::a_failed_sync_does_not_cancel_its_statx`).
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
    /// A stable WRITE's linked fsync/fdatasync failed (the write succeeded).
    Sync(i32),
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
            Failure::Sync(_) => 4,
            Failure::Statx(_) => 5,
            Failure::Commit(_) => 6,
        }
    }
}

/// What a WRITE chain's reaped results — the write's, the sync's (0 for an
/// UNSTABLE write, which has none) and the statx's — say: `None` for success (the
/// whole count written, synced, the statx done), else the first failure in the
/// chain.
pub(crate) fn write_outcome(count: u32, [wrote, synced, stat]: [i32; 3]) -> Option<Failure> {
    if wrote < 0 {
        return Some(Failure::Write(errno(wrote)));
    }
    if wrote as u32 != count {
        return Some(Failure::ShortWrite {
            wrote: wrote as u32,
            of: count,
        });
    }
    if synced != 0 {
        return Some(Failure::Sync(errno(synced)));
    }
    (stat != 0).then(|| Failure::Statx(errno(stat)))
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
            Failure::Sync(e) => tracing::warn!(
                held,
                "io_uring stable write's fsync/fdatasync failed ({}); a worker redoes the WRITE and answers",
                err(e)
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
    fn only_a_whole_synced_write_with_its_statx_is_a_success() {
        let cancelled = -libc::ECANCELED;
        assert_eq!(write_outcome(4096, [4096, 0, 0]), None);
        assert_eq!(
            write_outcome(4096, [-libc::ENOSPC, cancelled, cancelled]),
            Some(Failure::Write(libc::ENOSPC))
        );
        // ENOSPC after two pages: never a full write, whatever follows says.
        for rest in [0, cancelled] {
            assert_eq!(
                write_outcome(1 << 20, [8192, rest, rest]),
                Some(Failure::ShortWrite {
                    wrote: 8192,
                    of: 1 << 20
                })
            );
        }
        assert_eq!(
            write_outcome(10, [0, 0, 0]),
            Some(Failure::ShortWrite { wrote: 0, of: 10 })
        );
        // A failed sync whose statx ran anyway (what the kernel does): never a
        // stable reply.
        assert_eq!(
            write_outcome(10, [10, -libc::EIO, 0]),
            Some(Failure::Sync(libc::EIO))
        );
        assert_eq!(
            write_outcome(10, [10, 0, -libc::ENOMEM]),
            Some(Failure::Statx(libc::ENOMEM))
        );
        // Hostile values: a result past the count, i32::MIN.
        assert!(write_outcome(10, [i32::MAX, 0, 0]).is_some());
        assert_eq!(
            write_outcome(10, [10, 0, i32::MIN]),
            Some(Failure::Statx(i32::MAX))
        );
        assert!(matches!(
            write_outcome(10, [i32::MIN, 0, 0]),
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
