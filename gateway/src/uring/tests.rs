//! The ring on this kernel: reads into registered pool buffers and into plain memory,
//! results and errors as completions, and a drop that waits for reads in flight.

use super::*;
use engine::mem::{ClassSpec, HugePolicy, Pools};
use std::io::Write;

fn pools() -> Pools {
    Pools::new(
        &[ClassSpec {
            size: 65536,
            count: 8,
        }],
        HugePolicy::Off,
    )
    .unwrap()
}

fn file_with(data: &[u8]) -> std::fs::File {
    let mut f = tempfile::tempfile().unwrap();
    f.write_all(data).unwrap();
    f
}

/// Waits (bounded) for `n` completions.
fn wait(r: &mut Uring, n: usize) -> Vec<Completion> {
    let mut out = Vec::new();
    let start = std::time::Instant::now();
    while out.len() < n {
        r.submit();
        r.reap(&mut out);
        assert!(start.elapsed().as_secs() < 10, "completions never came");
    }
    out
}

fn ring(p: &Pools) -> Option<Uring> {
    match Uring::open(p.region()) {
        Ok(r) => Some(r),
        // A kernel or sandbox without io_uring: what `open` reports is the test.
        Err(why) => {
            eprintln!("io_uring unavailable here: {why}");
            assert!(!why.is_empty());
            None
        }
    }
}

#[test]
fn reads_into_a_registered_pool_buffer_and_into_plain_memory() {
    let p = pools();
    let Some(mut r) = ring(&p) else { return };
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let f = file_with(&data);
    let mut buf = p.alloc(65536).unwrap();
    let dst = buf.spare_mut().as_mut_ptr();
    // SAFETY: `buf` and `f` outlive the completion waited for below.
    assert!(unsafe { r.read(f.as_raw_fd(), dst, 4096, 12345, 7) });
    let mut plain = vec![0u8; 1000];
    // SAFETY: as above, for `plain`.
    assert!(unsafe { r.read(f.as_raw_fd(), plain.as_mut_ptr(), 1000, 99_500, 8) });
    assert_eq!(r.inflight(), 2);
    let mut got = wait(&mut r, 2);
    got.sort_by_key(|c| c.tag);
    assert_eq!((got[0].tag, got[0].result), (7, 4096));
    // Short at the end of the file.
    assert_eq!((got[1].tag, got[1].result), (8, 500));
    assert_eq!(&buf.spare_mut()[..4096], &data[12345..12345 + 4096]);
    assert_eq!(&plain[..500], &data[99_500..]);
    assert_eq!(r.inflight(), 0);
}

#[test]
fn a_bad_descriptor_completes_with_an_error() {
    let p = pools();
    let Some(mut r) = ring(&p) else { return };
    let mut buf = p.alloc(4096).unwrap();
    let dst = buf.spare_mut().as_mut_ptr();
    // SAFETY: `buf` outlives the completion; -1 is never a valid descriptor.
    assert!(unsafe { r.read(-1, dst, 16, 0, 1) });
    let got = wait(&mut r, 1);
    assert_eq!(got[0].result, -libc::EBADF);
}

#[test]
fn the_ring_refuses_more_than_its_entries_and_drop_waits_for_reads() {
    let p = pools();
    let Some(mut r) = ring(&p) else { return };
    let f = file_with(&[1u8; 8192]);
    let mut bufs: Vec<Vec<u8>> = (0..ENTRIES).map(|_| vec![0u8; 16]).collect();
    for (i, b) in bufs.iter_mut().enumerate() {
        // SAFETY: `bufs` and `f` outlive the ring (dropped first, waiting).
        assert!(unsafe { r.read(f.as_raw_fd(), b.as_mut_ptr(), 16, 0, i as u64) });
    }
    let mut extra = [0u8; 16];
    // SAFETY: refused, so nothing is queued.
    assert!(!unsafe { r.read(f.as_raw_fd(), extra.as_mut_ptr(), 16, 0, 999) });
    r.submit();
    drop(r);
    assert!(bufs.iter().all(|b| b == &[1u8; 16]));
}

#[test]
fn a_write_and_its_linked_statx_then_fdatasync() {
    let p = pools();
    let Some(mut r) = ring(&p) else { return };
    assert!(r.writes(), "this kernel has WRITE, STATX and FSYNC");
    let f = file_with(&[0u8; 100]);
    let mut buf = p.alloc(65536).unwrap();
    buf.spare_mut()[..5000].fill(0xab);
    let src = buf.spare_mut().as_ptr();
    // SAFETY: `buf` and `f` outlive the completions waited for below.
    assert!(unsafe { r.write_then_statx(f.as_raw_fd(), src, 5000, 50, 10, 3, 11) });
    let mut got = wait(&mut r, 2);
    got.sort_by_key(|c| c.tag);
    assert_eq!((got[0].tag, got[0].result), (10, 5000));
    assert_eq!((got[1].tag, got[1].result), (11, 0));
    let st = r.statx(3).unwrap();
    assert_eq!(st.stx_size, 5050);
    let meta = f.metadata().unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        (st.stx_mtime.tv_sec, st.stx_mtime.tv_nsec as i64),
        (meta.mtime(), meta.mtime_nsec())
    );
    // SAFETY: `f` outlives the completion.
    assert!(unsafe { r.fdatasync(f.as_raw_fd(), 12) });
    assert_eq!(wait(&mut r, 1)[0].result, 0);
    let mut on_disk = Vec::new();
    use std::io::{Read, Seek};
    let mut f = f;
    f.seek(std::io::SeekFrom::Start(0)).unwrap();
    f.read_to_end(&mut on_disk).unwrap();
    assert_eq!(&on_disk[..50], &[0u8; 50]);
    assert!(on_disk[50..].iter().all(|&b| b == 0xab));
}

#[test]
fn a_failed_write_cancels_its_statx() {
    let p = pools();
    let Some(mut r) = ring(&p) else { return };
    let f = tempfile::tempfile().unwrap();
    let ro = std::fs::File::open(format!("/proc/self/fd/{}", f.as_raw_fd())).unwrap();
    let data = [1u8; 16];
    // SAFETY: `data` and `ro` outlive the completions.
    assert!(unsafe { r.write_then_statx(ro.as_raw_fd(), data.as_ptr(), 16, 0, 1, 0, 2) });
    let mut got = wait(&mut r, 2);
    got.sort_by_key(|c| c.tag);
    assert_eq!(got[0].result, -libc::EBADF, "read-only descriptor");
    assert_eq!(got[1].result, -libc::ECANCELED);
}

#[test]
fn a_stable_write_chain_writes_syncs_then_statx() {
    let p = pools();
    let Some(mut r) = ring(&p) else { return };
    let f = file_with(&[0u8; 10]);
    let data = [7u8; 3000];
    for (datasync, tag) in [(true, 20u64), (false, 30)] {
        let sync = StableSync {
            datasync,
            tag: tag + 1,
        };
        // SAFETY: `data` and `f` outlive the completions waited for below.
        assert!(unsafe {
            r.write_sync_statx(
                f.as_raw_fd(),
                data.as_ptr(),
                3000,
                10,
                tag,
                sync,
                5,
                tag + 2,
            )
        });
        assert_eq!(r.inflight(), 3, "three linked operations");
        let mut got = wait(&mut r, 3);
        got.sort_by_key(|c| c.tag);
        let res: Vec<_> = got.iter().map(|c| (c.tag, c.result)).collect();
        assert_eq!(res, [(tag, 3000), (tag + 1, 0), (tag + 2, 0)]);
        assert_eq!(r.statx(5).unwrap().stx_size, 3010);
    }
}

#[test]
fn a_failed_stable_write_cancels_its_sync_and_statx() {
    let p = pools();
    let Some(mut r) = ring(&p) else { return };
    let f = tempfile::tempfile().unwrap();
    let ro = std::fs::File::open(format!("/proc/self/fd/{}", f.as_raw_fd())).unwrap();
    let data = [1u8; 16];
    let sync = StableSync {
        datasync: false,
        tag: 2,
    };
    // SAFETY: `data` and `ro` outlive the completions.
    assert!(unsafe { r.write_sync_statx(ro.as_raw_fd(), data.as_ptr(), 16, 0, 1, sync, 0, 3) });
    let mut got = wait(&mut r, 3);
    got.sort_by_key(|c| c.tag);
    assert_eq!(got[0].result, -libc::EBADF, "read-only descriptor");
    // The sync and the statx never ran: a stable reply can never be built from it.
    assert_eq!(
        (got[1].result, got[2].result),
        (-libc::ECANCELED, -libc::ECANCELED)
    );
}

/// A short write (what a full file system gives: the bytes that fit, then ENOSPC)
/// breaks the link: a stable write's sync and statx are cancelled, so `direct`
/// never builds a stable reply from it (and its own check wants the whole count).
/// Made deterministic with the file system's largest offset (`s_maxbytes`), where
/// the kernel cuts a write short the same way; skipped where neither candidate
/// limit is this file system's.
#[test]
fn a_short_write_cancels_its_sync_and_statx() {
    use std::os::unix::fs::FileExt;
    let p = pools();
    let Some(mut r) = ring(&p) else { return };
    let f = tempfile::tempfile().unwrap();
    let data = [9u8; 16];
    // tmpfs, xfs, btrfs: the largest off_t; ext4 (4 KiB blocks): 16 TiB less a block.
    let Some(limit) = [i64::MAX as u64, (1u64 << 44) - 4096]
        .into_iter()
        .find(|&l| f.write_at(&data, l - 8).ok() == Some(8))
    else {
        eprintln!("no known file-size limit on this file system: skipped");
        return;
    };
    for datasync in [false, true] {
        let sync = StableSync { datasync, tag: 2 };
        // SAFETY: `data` and `f` outlive the completions waited for below.
        assert!(unsafe {
            r.write_sync_statx(f.as_raw_fd(), data.as_ptr(), 16, limit - 8, 1, sync, 0, 3)
        });
        let mut got = wait(&mut r, 3);
        got.sort_by_key(|c| c.tag);
        let res: Vec<_> = got.iter().map(|c| c.result).collect();
        // Short (8 of 16), or an error where a kernel retries the rest on io-wq.
        assert!(res[0] == 8 || res[0] < 0, "datasync {datasync}: {res:?}");
        assert_eq!(
            res[1..],
            [-libc::ECANCELED, -libc::ECANCELED],
            "datasync {datasync}"
        );
    }
    // The unstable chain too.
    // SAFETY: as above.
    assert!(unsafe { r.write_then_statx(f.as_raw_fd(), data.as_ptr(), 16, limit - 8, 1, 0, 3) });
    let mut got = wait(&mut r, 2);
    got.sort_by_key(|c| c.tag);
    assert!(got[0].result == 8 || got[0].result < 0, "{got:?}");
    assert_eq!(got[1].result, -libc::ECANCELED);
}

/// The revalidation rule on a real file, its path looked up by a ring `statx`:
/// unchanged until its data, its mode, an xattr or its name changes.
#[test]
fn a_path_statx_revalidates_an_open_file_until_it_changes() {
    use super::files::{unchanged, Validator, CTIME_SLACK};
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let p = pools();
    let Some(mut r) = ring(&p) else { return };
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::File::open(dir.path()).unwrap();
    std::fs::write(dir.path().join("f"), b"hello").unwrap();
    let held = std::fs::File::open(dir.path().join("f")).unwrap();
    let m = held.metadata().unwrap();
    let path = c"f";
    let look = |r: &mut Uring| {
        // SAFETY: `root` and `path` outlive the completion waited for below.
        assert!(unsafe { r.statx_path(root.as_raw_fd(), path.as_ptr(), 9, 77) });
        let c = wait(r, 1);
        (c[0].result, *r.statx(9).unwrap())
    };
    let now = || {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        d.as_nanos() as i64
    };
    std::thread::sleep(std::time::Duration::from_millis(50));
    let v = Validator {
        since_ns: now(),
        dev: m.dev(),
        ino: m.ino(),
    };
    let (res, st) = look(&mut r);
    assert_eq!(res, 0);
    assert!(unchanged(&v, 5, &st), "nothing changed since");
    assert!(!unchanged(&v, 6, &st), "another size than the entry's");
    // A validator taken right after the last change (within the slack): not trusted.
    let just = Validator {
        since_ns: st.stx_ctime.tv_sec * 1_000_000_000
            + st.stx_ctime.tv_nsec as i64
            + CTIME_SLACK / 2,
        ..v
    };
    assert!(!unchanged(&just, 5, &st));
    // Each change behind the holder's back fails it.
    std::fs::set_permissions(dir.path().join("f"), std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(!unchanged(&v, 5, &look(&mut r).1), "chmod moves the ctime");
    let v = Validator {
        since_ns: now() + 50_000_000,
        ..v
    };
    assert!(unchanged(&v, 5, &look(&mut r).1));
    std::fs::write(dir.path().join("g"), b"other").unwrap();
    std::fs::rename(dir.path().join("g"), dir.path().join("f")).unwrap();
    assert!(
        !unchanged(&v, 5, &look(&mut r).1),
        "replaced: another inode"
    );
    std::fs::remove_file(dir.path().join("f")).unwrap();
    assert_eq!(look(&mut r).0, -libc::ENOENT);
}

/// Registered files: a read names the table's slot, not a descriptor (here -1, so
/// only the slot can reach the file); an emptied slot reaches nothing.
#[test]
fn reads_through_a_registered_file_slot_until_it_is_emptied() {
    let p = pools();
    let Some(mut r) = ring(&p) else { return };
    if r.file_slots() == 0 {
        eprintln!("no registered file table here");
        return;
    }
    let data: Vec<u8> = (0..5000u32).map(|i| (i % 253) as u8).collect();
    let f = file_with(&data);
    let last = r.file_slots() - 1;
    assert!(r.set_file(last, f.as_raw_fd()));
    assert!(!r.set_file(r.file_slots(), f.as_raw_fd()), "past the table");
    let only_slot = FileRef {
        fd: -1,
        fixed: Some(last),
    };
    let mut buf = vec![0u8; 100];
    // SAFETY: `buf` outlives the completion; the table holds the file.
    assert!(unsafe { r.read(only_slot, buf.as_mut_ptr(), 100, 4000, 1) });
    assert_eq!(wait(&mut r, 1)[0].result, 100);
    assert_eq!(&buf[..], &data[4000..4100]);
    // The table keeps its own reference: closing the descriptor changes nothing.
    drop(f);
    // SAFETY: as above.
    assert!(unsafe { r.fdatasync(only_slot, 2) });
    assert_eq!(wait(&mut r, 1)[0].result, 0);
    assert!(r.clear_file(last));
    // SAFETY: as above.
    assert!(unsafe { r.read(only_slot, buf.as_mut_ptr(), 100, 0, 3) });
    assert_eq!(wait(&mut r, 1)[0].result, -libc::EBADF);
}

/// io-wq worker threads serving this thread's rings (named `iou-wrk-<submitter's
/// tid>`: other tests' threads have their own).
fn io_wq_threads() -> usize {
    // SAFETY: plain syscall without arguments.
    let me = format!("iou-wrk-{}", unsafe { libc::gettid() });
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|c| c.trim_end() == me)
        .count()
}

#[test]
fn large_reads_are_offloaded_to_io_wq_and_stay_exact() {
    let p = pools();
    let Some(mut r) = ring(&p) else { return };
    r.set_offload_min(32768);
    assert_eq!(io_wq_threads(), 0);
    let data: Vec<u8> = (0..200_000u32).map(|i| (i * 13 % 251) as u8).collect();
    let f = file_with(&data);
    let mut big = p.alloc(65536).unwrap();
    let mut small = p.alloc(4096).unwrap();
    // SAFETY: the buffers and `f` outlive the completions waited for below.
    unsafe {
        assert!(r.read(
            f.as_raw_fd(),
            big.spare_mut().as_mut_ptr(),
            65536,
            70_001,
            1
        ));
        assert!(r.read(f.as_raw_fd(), small.spare_mut().as_mut_ptr(), 4096, 3, 2));
    }
    let mut got = wait(&mut r, 2);
    got.sort_by_key(|c| c.tag);
    assert_eq!((got[0].result, got[1].result), (65536, 4096));
    assert_eq!(&big.spare_mut()[..65536], &data[70_001..70_001 + 65536]);
    assert_eq!(&small.spare_mut()[..4096], &data[3..4099]);
    // The 64 KiB read ran on an io-wq thread (they linger a few seconds when idle);
    // cached reads without IOSQE_ASYNC complete inline and start none.
    assert!(
        io_wq_threads() > 0,
        "no io-wq worker: the read was not offloaded"
    );
}

/// `bulk()` is true while a read of `BULK_BYTES` or more is in flight (the reactor
/// then sleeps instead of spinning) and false once the ring is empty again; small
/// reads never set it.
#[test]
fn bulk_is_set_by_large_reads_until_the_ring_is_empty() {
    let p = pools();
    let Some(mut r) = ring(&p) else { return };
    let data = vec![7u8; 100_000];
    let f = file_with(&data);
    let mut big = p.alloc(65536).unwrap();
    let mut small = p.alloc(4096).unwrap();
    // SAFETY: the buffers and `f` outlive the completions waited for below.
    unsafe {
        assert!(r.read(f.as_raw_fd(), small.spare_mut().as_mut_ptr(), 4096, 0, 1));
    }
    assert!(!r.bulk(), "a 4 KiB read is not bulk");
    wait(&mut r, 1);
    // SAFETY: as above.
    unsafe {
        assert!(r.read(
            f.as_raw_fd(),
            big.spare_mut().as_mut_ptr(),
            BULK_BYTES,
            0,
            2
        ));
    }
    assert!(r.bulk(), "a queued {BULK_BYTES}-byte read is bulk");
    assert_eq!(wait(&mut r, 1)[0].result, BULK_BYTES as i32);
    assert!(!r.bulk(), "an empty ring is not bulk");
}

/// A failed fsync does NOT cancel the statx linked after it (this kernel: the link
/// breaks on a failed or short write, not on IORING_OP_FSYNC's error), so `direct`
/// checks the sync's own result before it answers a stable WRITE (found with an
/// EIO-injecting FUSE file system, tests/e2e/test_uring_fault.py; here /dev/null,
/// whose writes succeed and whose fsync is EINVAL).
#[test]
fn a_failed_sync_does_not_cancel_its_statx() {
    let p = pools();
    let Some(mut r) = ring(&p) else { return };
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .unwrap();
    let data = [1u8; 4096];
    for datasync in [false, true] {
        let sync = StableSync { datasync, tag: 2 };
        // SAFETY: `data` and `f` outlive the completions waited for below.
        assert!(unsafe {
            r.write_sync_statx(f.as_raw_fd(), data.as_ptr(), 4096, 0, 1, sync, 0, 3)
        });
        let mut got = wait(&mut r, 3);
        got.sort_by_key(|c| c.tag);
        let res: Vec<_> = got.iter().map(|c| c.result).collect();
        assert_eq!(res[0], 4096, "the write succeeded");
        assert!(res[1] < 0, "the sync failed: {res:?}");
        // Were the kernel to cancel it, -ECANCELED: either way `direct` answers
        // from the sync's result, never from the statx's alone.
        assert!(res[2] == 0 || res[2] == -libc::ECANCELED, "{res:?}");
    }
}
