//! The largest file the file system under `backend.root` holds, found once at open.
//!
//! Why: clients size their writes by the `maxfilesize` attribute (RFC 8881 §5.8.2, attribute 27,
//! RFC 1813 FSINFO `maxfilesize`); the Linux client makes it its superblock's
//! `s_maxbytes`, so a write past it fails at once with EFBIG. Advertising 2^63 - 1 on
//! ext4 (16 TiB - 4 KiB with 4 KiB blocks) let a buffered write past 16 TiB succeed
//! in the client's page cache and fail only at writeback, where the error surfaced
//! from an unrelated call (xfstests generic/285, test 12: SEEK_HOLE after such a
//! write returned -1; knfsd advertises the local `s_maxbytes`, so the client refused
//! the write up front). A sparse `ftruncate` is the kernel's own `s_maxbytes` check
//! (`inode_newsize_ok`: EFBIG past it) and writes no data on file systems with holes.

use std::fs::File;
use std::io;

/// The largest length `accepts` takes, searched over `[0, ceiling]`; `accepts(0)`
/// is assumed. `Ok(false)` is "too large" (EFBIG, EINVAL); an error of another kind
/// ends the search with `None` (the caller keeps its default).
pub(super) fn search(
    ceiling: u64,
    mut accepts: impl FnMut(u64) -> io::Result<bool>,
) -> Option<u64> {
    if accepts(ceiling).ok()? {
        return Some(ceiling);
    }
    // Invariant: `lo` accepted, `hi` refused.
    let (mut lo, mut hi) = (0u64, ceiling);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if accepts(mid).ok()? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(lo)
}

/// `f.set_len(len)` as a probe: EFBIG or EINVAL is a refusal. A file system that
/// fills the gap with real blocks (vfat, some FUSE mounts) is no answer: the probe
/// stops before it writes gigabytes of zeros.
fn truncate_to(f: &File, len: u64) -> io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    match f.set_len(len) {
        Ok(()) if len > 0 && f.metadata()?.blocks() > 0 => {
            let _ = f.set_len(0);
            Err(io::Error::other("extending a file allocates blocks here"))
        }
        Ok(()) => Ok(true),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EFBIG) | Some(libc::EINVAL)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The largest size `f`'s file system allows, at most `ceiling`; `f` (an empty
/// scratch file open for writing) is left empty. `None` when the probe failed for
/// another reason than the size. Never past the process's RLIMIT_FSIZE (`ulimit -f`,
/// systemd `LimitFSIZE=`): a length over it raises SIGXFSZ, which would kill the
/// gateway at start; no file can grow past it anyway.
pub(super) fn probe(f: &File, ceiling: u64) -> Option<u64> {
    let ceiling = match super::sys::fsize_limit() {
        Ok(lim) if lim != libc::RLIM_INFINITY => ceiling.min(lim),
        _ => ceiling,
    };
    let found = search(ceiling, |len| truncate_to(f, len));
    f.set_len(0).ok()?;
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The search finds the exact limit wherever it lies, including the ends, in at
    /// most 65 probes (it runs at every start).
    #[test]
    fn search_finds_the_exact_limit() {
        let ceiling = i64::MAX as u64;
        let ext4_4k = ((1u64 << 32) - 1) * 4096;
        for limit in [0, 1, 4095, ext4_4k, 1 << 40, ceiling - 1, ceiling] {
            let mut calls = 0;
            let got = search(ceiling, |len| {
                calls += 1;
                Ok(len <= limit)
            });
            assert_eq!(got, Some(limit), "limit {limit}");
            assert!(calls <= 65, "{calls} probes for {limit}");
        }
    }

    /// Another error than "too large" is no answer: the caller keeps its default
    /// rather than take a transient failure for a small limit.
    #[test]
    fn search_gives_up_on_other_errors() {
        let got = search(1 << 40, |len| {
            if len > 1 << 20 {
                Err(io::Error::from_raw_os_error(libc::EIO))
            } else {
                Ok(true)
            }
        });
        assert_eq!(got, None);
    }

    /// On a real file system: the probed size is accepted, one more byte refused
    /// (unless it is the ceiling), and the scratch file is left empty.
    #[test]
    fn probe_matches_the_file_system() {
        let dir = tempfile::tempdir().unwrap();
        let f = File::create(dir.path().join("p")).unwrap();
        let ceiling = i64::MAX as u64;
        let max = probe(&f, ceiling).expect("probe");
        assert_eq!(f.metadata().unwrap().len(), 0);
        assert!(truncate_to(&f, max).unwrap());
        if max < ceiling {
            assert!(!truncate_to(&f, max + 1).unwrap());
        }
    }
}
