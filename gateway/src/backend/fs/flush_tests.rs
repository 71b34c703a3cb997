//! `flush`: detection on loop-mounted file systems (root with loop devices; skipped
//! with the reason printed where `mount` is refused) and the journal mode's shared log
//! forces.

use super::super::{Backend, BackendError, FsBackend, UserMeta};
use super::*;
use crate::config::FlushMode;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Barrier};

/// A file system image mounted on a loop device, unmounted and removed on drop.
struct LoopFs {
    dir: tempfile::TempDir,
    mnt: PathBuf,
}

impl LoopFs {
    /// `mkfs` (program and arguments before the image path) on a sparse image of
    /// `mib` MiB, mounted with `-o loop`. None, with the reason printed, where this
    /// machine refuses (no mkfs, not root, no loop devices).
    fn make(mkfs: &[&str], mib: u64) -> Option<LoopFs> {
        let dir = tempfile::Builder::new()
            .prefix("nfsgw-flush")
            .tempdir_in("/var/tmp")
            .ok()?;
        let img = dir.path().join("fs.img");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        std::fs::File::create(&img)
            .unwrap()
            .set_len(mib << 20)
            .unwrap();
        let out = Command::new(mkfs[0]).args(&mkfs[1..]).arg(&img).output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => {
                eprintln!(
                    "SKIP: {mkfs:?} failed: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                return None;
            }
            Err(e) => {
                eprintln!("SKIP: {}: {e}", mkfs[0]);
                return None;
            }
        }
        let out = Command::new("mount")
            .args(["-o", "loop"])
            .arg(&img)
            .arg(&mnt)
            .output();
        match out {
            Ok(o) if o.status.success() => Some(LoopFs { dir, mnt }),
            Ok(o) => {
                eprintln!(
                    "SKIP: mount -o loop not permitted here: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("SKIP: mount: {e}");
                None
            }
        }
    }

    fn ext4_journal() -> Option<LoopFs> {
        Self::make(&["mkfs.ext4", "-q", "-F"], 64)
    }

    fn detect(&self) -> Detected {
        let f = std::fs::File::open(&self.mnt).unwrap();
        detect(f.as_fd()).unwrap()
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.mnt)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            // Busy (a test thread still holds a descriptor): detach lazily, the
            // loop device goes with the last reference.
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
        let _ = std::fs::remove_file(self.dir.path().join("fs.img"));
    }
}

/// ext4 with a journal and XFS log their metadata; ext4 made without a journal does
/// not (`journal_task` reads `<none>`), and neither does tmpfs.
#[test]
fn detection_finds_the_log_on_loop_mounts() {
    let Some(j) = LoopFs::ext4_journal() else {
        return;
    };
    let d = j.detect();
    assert_eq!(d.fs, "ext4");
    assert!(d.journaled, "journaled ext4 not detected: {d:?}");
    let Some(n) = LoopFs::make(&["mkfs.ext4", "-q", "-F", "-O", "^has_journal"], 64) else {
        return;
    };
    let d = n.detect();
    assert_eq!(d.fs, "ext4");
    assert!(!d.journaled, "no-journal ext4 taken for journaled: {d:?}");
    // mkfs.xfs refuses file systems under 300 MiB (the image is sparse).
    match LoopFs::make(&["mkfs.xfs", "-q", "-f"], 320) {
        Some(x) => {
            let d = x.detect();
            assert_eq!(d.fs, "xfs");
            assert!(d.journaled);
        }
        None => eprintln!("SKIP: the XFS case (above)"),
    }
    let shm = std::fs::File::open("/dev/shm").unwrap();
    let d = detect(shm.as_fd()).unwrap();
    assert!(!d.journaled, "/dev/shm: {d:?}");
}

/// The root file system's answer agrees with jbd2's own witness: this machine's root
/// is ext4 without a journal, so it says per directory.
#[test]
fn the_root_is_detected_as_jbd2_sees_it() {
    let root = std::fs::File::open("/").unwrap();
    let d = detect(root.as_fd()).unwrap();
    eprintln!("/: {d:?}");
    if d.fs != "ext4" {
        eprintln!("SKIP: / is {}, not ext4", d.fs);
        return;
    }
    let st = sys::fstat(root.as_fd()).unwrap();
    let name = device_name(st.st_dev).expect("the root's block device");
    let jbd2 = std::fs::read_dir("/proc/fs/jbd2").is_ok_and(|d| {
        d.flatten().any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{name}-"))
        })
    });
    assert_eq!(d.journaled, jbd2, "{d:?}, /proc/fs/jbd2 has {name}: {jbd2}");
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let b = FsBackend::open(dir.path()).unwrap();
    assert_eq!(b.flush.journal(), jbd2);
    assert_eq!(dir.path().join(MARKER).exists(), jbd2);
}

/// `backend.fs.flush = "journal"` is refused where there is no log; `per-directory`
/// is taken anywhere; `auto` follows detection.
#[test]
fn journal_mode_is_refused_without_a_log() {
    let Some(n) = LoopFs::make(&["mkfs.ext4", "-q", "-F", "-O", "^has_journal"], 64) else {
        return;
    };
    let e = FsBackend::open_configured(&n.mnt.join("o"), false, FlushMode::Journal)
        .err()
        .expect("journal mode on a file system without a journal");
    let e = format!("{e:#}");
    assert!(
        e.contains("backend.fs.flush") && e.contains("no journal"),
        "{e}"
    );
    let b = FsBackend::open_configured(&n.mnt.join("o"), false, FlushMode::Auto).unwrap();
    assert!(!b.flush.journal());
    let Some(j) = LoopFs::ext4_journal() else {
        return;
    };
    let b = FsBackend::open_configured(&j.mnt.join("o"), false, FlushMode::Journal).unwrap();
    assert!(b.flush.journal());
    let b = FsBackend::open_configured(&j.mnt.join("o"), false, FlushMode::PerDirectory).unwrap();
    assert!(!b.flush.journal());
    let b = FsBackend::open_configured(&j.mnt.join("o"), false, FlushMode::Auto).unwrap();
    assert!(b.flush.journal());
    // The marker is a temporary's name: never listed.
    assert!(j.mnt.join("o").join(MARKER).is_dir());
    assert!(b.list("", None, None, 100).unwrap().objects.is_empty());
    assert!(b
        .list("", Some('/'), None, 100)
        .unwrap()
        .prefixes
        .is_empty());
}

/// Runs `threads` writers, each creating `each` empty files in its own directory and
/// removing them, all at once; returns the backend's flushes (file, dir, log).
fn creates_in_own_dirs(b: Arc<FsBackend>, threads: usize, each: usize) -> [u64; 3] {
    let go = Arc::new(Barrier::new(threads));
    let ts: Vec<_> = (0..threads)
        .map(|t| {
            let (b, go) = (b.clone(), go.clone());
            std::thread::spawn(move || {
                b.put(&format!("d{t}/"), b"", &UserMeta::new(), false)
                    .unwrap();
                go.wait();
                for i in 0..each {
                    b.put(&format!("d{t}/f{i}"), b"", &UserMeta::new(), true)
                        .unwrap();
                }
                for i in 0..each {
                    b.delete(&format!("d{t}/f{i}")).unwrap();
                }
                assert_eq!(
                    b.head(&format!("d{t}/f0")).unwrap_err(),
                    BackendError::NotFound
                );
            })
        })
        .collect();
    for t in ts {
        t.join().unwrap();
    }
    [Kind::File, Kind::Dir, Kind::Log].map(|k| b.flush.flushes(k))
}

/// The journal mode's group commit spans directories: N writers creating and
/// removing in N directories at once share log forces (fewer than one per change),
/// and an empty new file costs no fsync of its own. The same run per directory pays
/// one file fsync per create and one directory fsync per change (nothing to share:
/// each directory has one writer).
#[test]
fn creates_in_different_directories_share_log_forces() {
    let Some(j) = LoopFs::ext4_journal() else {
        return;
    };
    let (threads, each) = (8, 25);
    let changes = (threads * each * 2) as u64;
    let b = FsBackend::open_configured(&j.mnt.join("log"), false, FlushMode::Auto).unwrap();
    assert!(b.flush.journal());
    let [file, dir, log] = creates_in_own_dirs(Arc::new(b), threads, each);
    eprintln!("journal: {changes} changes, {file} file, {dir} dir, {log} log flushes");
    assert_eq!(file, 0, "an empty create fsynced its file");
    assert_eq!(dir, 0, "a directory fsynced on its own");
    assert!(
        log < changes,
        "{changes} changes in {threads} directories shared no log force ({log})"
    );
    // Per directory, on the same file system.
    let b =
        FsBackend::open_configured(&j.mnt.join("dirs"), false, FlushMode::PerDirectory).unwrap();
    let [file, dir, log] = creates_in_own_dirs(Arc::new(b), threads, each);
    eprintln!("per directory: {changes} changes, {file} file, {dir} dir, {log} log flushes");
    assert_eq!(log, 0);
    // One per create and one per put_dir; then one per change plus the put_dirs'.
    assert_eq!(file, (threads * each + threads) as u64);
    assert!(
        dir >= changes,
        "{dir} directory fsyncs for {changes} changes"
    );
}

/// The backend's conformance suite in journal mode (no file fsync before an empty
/// create's name, shared log forces for every namespace change, renames included).
#[test]
fn conformance_in_journal_mode() {
    let Some(j) = LoopFs::ext4_journal() else {
        return;
    };
    let b = FsBackend::open_configured(&j.mnt.join("o"), false, FlushMode::Journal).unwrap();
    crate::backend::conformance::run(&b);
    assert!(b.flush.flushes(Kind::Log) > 0);
}

/// Journal mode's system calls: an empty create makes no fsync of its file, one
/// `futimens` + `fsync` of the marker (the log force) and one `fstat` more (the
/// parent's device, before the rename); a create with data keeps its file's fsync; a
/// delete is one log force. Per directory they are `backend::fs::tests`'
/// `a_new_object_and_its_delete_make_only_the_needed_system_calls`.
#[test]
fn journal_mode_makes_one_log_force_per_change() {
    use std::collections::BTreeMap;
    let Some(j) = LoopFs::ext4_journal() else {
        return;
    };
    let b = FsBackend::open_configured(&j.mnt.join("o"), false, FlushMode::Journal).unwrap();
    let mut m = UserMeta::new();
    for (k, v) in [("mode", "100600"), ("uid", "7"), ("gid", "8")] {
        m.insert(k.into(), v.into());
    }
    sys::calls::take();
    b.put("f", b"", &m, true).unwrap();
    let want: BTreeMap<&str, u32> = [
        ("lstatat", 1),
        ("openat", 1),
        ("fsetxattr", 3),
        ("fstat", 3),
        ("renameat2", 1),
        ("futimens", 1),
        ("fsync", 1),
    ]
    .into_iter()
    .collect();
    assert_eq!(sys::calls::take(), want);
    b.put("g", b"data", &m, true).unwrap();
    let calls = sys::calls::take();
    assert_eq!(calls.get("fsync"), Some(&2), "{calls:?}");
    b.delete("f").unwrap();
    let want: BTreeMap<&str, u32> = [
        ("lstatat", 1),
        ("unlinkat", 1),
        ("fstat", 1),
        ("futimens", 1),
        ("fsync", 1),
    ]
    .into_iter()
    .collect();
    assert_eq!(sys::calls::take(), want);
    assert_eq!(b.flush.flushes(Kind::File), 1);
    assert_eq!(b.flush.flushes(Kind::Log), 3);
}

/// A stable WRITE's sync (`RandomWrite::sync`, what FILE_SYNC WRITE and COMMIT call
/// through a worker) in journal mode: the file's pages written back and waited on
/// (`sync_file_range`), then one log force (the marker's `futimens` + `fsync`), no
/// fsync of the file itself; per directory: the file's own fsync, counted as `data`.
/// The bytes are there either way.
#[test]
fn a_stable_write_shares_the_log_force_in_journal_mode() {
    use crate::backend::RandomWrite;
    use std::collections::BTreeMap;
    let Some(j) = LoopFs::ext4_journal() else {
        return;
    };
    for mode in [FlushMode::Journal, FlushMode::PerDirectory] {
        let root = j.mnt.join(format!("{mode:?}"));
        let b = FsBackend::open_configured(&root, false, mode).unwrap();
        b.put("f", b"", &UserMeta::new(), true).unwrap();
        b.write_at("f", 4096, b"stable bytes").unwrap();
        let before = [Kind::Log, Kind::Data].map(|k| b.flush.flushes(k));
        sys::calls::take();
        b.sync("f").unwrap();
        let calls = sys::calls::take();
        let after = [Kind::Log, Kind::Data].map(|k| b.flush.flushes(k));
        let want: BTreeMap<&str, u32> = match mode {
            FlushMode::Journal => [("sync_file_range", 1), ("futimens", 1), ("fsync", 1)]
                .into_iter()
                .collect(),
            _ => [("fsync", 1)].into_iter().collect(),
        };
        // `entry` may stat the file to check it is current (after 1 s): `fstat` is
        // left out, the other calls are the sync's own.
        let got: BTreeMap<&str, u32> = calls
            .into_iter()
            .filter(|(k, _)| want.contains_key(k))
            .collect();
        assert_eq!(got, want, "{mode:?}");
        let flushed = match mode {
            FlushMode::Journal => [before[0] + 1, before[1]],
            _ => [before[0], before[1] + 1],
        };
        assert_eq!(after, flushed, "{mode:?}: (log, data) flushes");
        let mut bytes = [0xffu8; 4108];
        assert_eq!(b.get_range("f", 0, &mut bytes).unwrap(), 4108);
        assert_eq!(&bytes[4096..], b"stable bytes");
        assert!(bytes[..4096].iter().all(|&x| x == 0));
    }
}

/// Concurrent stable WRITEs to different files in journal mode share log forces:
/// fewer forces than syncs, and no per-file fsync at all.
#[test]
fn concurrent_stable_writes_share_log_forces() {
    use crate::backend::RandomWrite;
    let Some(j) = LoopFs::ext4_journal() else {
        return;
    };
    let b =
        Arc::new(FsBackend::open_configured(&j.mnt.join("w"), false, FlushMode::Journal).unwrap());
    let (threads, each) = (8usize, 20usize);
    for t in 0..threads {
        b.put(&format!("f{t}"), b"", &UserMeta::new(), true)
            .unwrap();
    }
    let log0 = b.flush.flushes(Kind::Log);
    let go = Arc::new(Barrier::new(threads));
    let ts: Vec<_> = (0..threads)
        .map(|t| {
            let (b, go) = (b.clone(), go.clone());
            std::thread::spawn(move || {
                go.wait();
                for i in 0..each {
                    let key = format!("f{t}");
                    b.write_at(&key, (i * 3901) as u64, &[t as u8 + 1; 3901])
                        .unwrap();
                    b.sync(&key).unwrap();
                }
            })
        })
        .collect();
    for t in ts {
        t.join().unwrap();
    }
    let forces = b.flush.flushes(Kind::Log) - log0;
    let syncs = (threads * each) as u64;
    eprintln!("{syncs} stable writes, {forces} log forces");
    assert_eq!(b.flush.flushes(Kind::Data), 0, "a file fsynced on its own");
    assert!(
        forces > 0 && forces < syncs,
        "{syncs} syncs, {forces} forces"
    );
    for t in 0..threads {
        let mut bytes = vec![0u8; each * 3901 + 1];
        assert_eq!(
            b.get_range(&format!("f{t}"), 0, &mut bytes).unwrap(),
            each * 3901
        );
        assert!(bytes[..each * 3901].iter().all(|&x| x == t as u8 + 1));
    }
}

/// `lazytime` is read from either option list of a mountinfo line; a line without it
/// (or cut short) is not lazytime; the loop ext4 here is mounted without it.
#[test]
fn lazytime_is_read_from_mountinfo() {
    let line =
        |mo: &str, so: &str| format!("36 25 7:0 / /mnt rw,{mo} shared:1 - ext4 /dev/loop0 rw,{so}");
    assert!(mount_line_has_lazytime(&line("lazytime", "data=ordered")));
    assert!(mount_line_has_lazytime(&line(
        "relatime",
        "lazytime,data=ordered"
    )));
    assert!(!mount_line_has_lazytime(&line("relatime", "data=ordered")));
    assert!(!mount_line_has_lazytime(&line("relatime", "nolazytime")));
    assert!(!mount_line_has_lazytime("36 25 7:0 / /mnt"));
    let Some(j) = LoopFs::ext4_journal() else {
        return;
    };
    let f = std::fs::File::open(&j.mnt).unwrap();
    assert!(!lazytime(f.as_fd()), "a plain loop mount read as lazytime");
}

/// Runs `cmd`; None (with the reason printed) where this machine refuses it.
fn run_ok(cmd: &mut Command) -> Option<String> {
    match cmd.output() {
        Ok(o) if o.status.success() => Some(String::from_utf8_lossy(&o.stdout).into_owned()),
        Ok(o) => {
            eprintln!(
                "SKIP: {cmd:?}: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            None
        }
        Err(e) => {
            eprintln!("SKIP: {cmd:?}: {e}");
            None
        }
    }
}

/// XFS's realtime section decides whether a stable write asks where its file's data
/// lives (module doc (c)). Without a section (the usual XFS) no `ioctl` per stable
/// write; with one (an external realtime device on a second loop device), a file
/// whose data is on it gets its own fsync (the log force does not flush that device)
/// and a file on the data device shares the force.
#[test]
fn xfs_realtime_files_keep_their_fsync_and_others_share_the_force() {
    use crate::backend::RandomWrite;
    let Some(plain) = LoopFs::make(&["mkfs.xfs", "-q", "-f"], 320) else {
        return;
    };
    let f = std::fs::File::open(&plain.mnt).unwrap();
    assert!(
        !sys::xfs_has_realtime(f.as_fd()).unwrap(),
        "a plain XFS has no realtime section"
    );
    let b = FsBackend::open_configured(&plain.mnt.join("p"), false, FlushMode::Journal).unwrap();
    b.put("f", b"", &UserMeta::new(), true).unwrap();
    b.write_at("f", 0, b"x").unwrap();
    sys::calls::take();
    b.sync("f").unwrap();
    let calls = sys::calls::take();
    assert!(
        !calls.contains_key("ioctl"),
        "no realtime section, no ioctl: {calls:?}"
    );
    drop(b);

    // An XFS with an external realtime device: data image + realtime image.
    let dir = tempfile::Builder::new()
        .prefix("nfsgw-flush-rt")
        .tempdir_in("/var/tmp")
        .unwrap();
    let (img, rtimg, mnt) = (
        dir.path().join("d.img"),
        dir.path().join("rt.img"),
        dir.path().join("m"),
    );
    std::fs::create_dir(&mnt).unwrap();
    for (p, mib) in [(&img, 320u64), (&rtimg, 64)] {
        std::fs::File::create(p)
            .unwrap()
            .set_len(mib << 20)
            .unwrap();
    }
    let Some(rtdev) = run_ok(Command::new("losetup").args(["-f", "--show"]).arg(&rtimg)) else {
        return;
    };
    let rtdev = rtdev.trim().to_string();
    let detach = || {
        let _ = Command::new("losetup").args(["-d", &rtdev]).status();
    };
    let made = run_ok(
        Command::new("mkfs.xfs")
            .args(["-q", "-f", "-r", &format!("rtdev={rtdev}")])
            .arg(&img),
    )
    .and_then(|_| {
        run_ok(
            Command::new("mount")
                .args(["-o", &format!("loop,rtdev={rtdev}")])
                .arg(&img)
                .arg(&mnt),
        )
    });
    if made.is_none() {
        detach();
        return;
    }
    let result = std::panic::catch_unwind(|| {
        let f = std::fs::File::open(&mnt).unwrap();
        assert!(
            sys::xfs_has_realtime(f.as_fd()).unwrap(),
            "the realtime section not seen"
        );
        let root = mnt.join("r");
        let b = FsBackend::open_configured(&root, false, FlushMode::Journal).unwrap();
        // A directory marked realtime-inherit: files created in it keep their data on
        // the realtime device.
        b.put("rt/", b"", &UserMeta::new(), true).unwrap();
        let inherit = run_ok(
            Command::new("xfs_io")
                .args(["-c", "chattr +t"])
                .arg(root.join("rt")),
        );
        for (name, on_rt) in [("plain", false), ("rt/file", true)] {
            if on_rt && inherit.is_none() {
                continue;
            }
            b.put(name, b"", &UserMeta::new(), true).unwrap();
            b.write_at(name, 0, b"realtime or not").unwrap();
            let before = [Kind::Log, Kind::Data].map(|k| b.flush.flushes(k));
            b.sync(name).unwrap();
            let after = [Kind::Log, Kind::Data].map(|k| b.flush.flushes(k));
            let want = if on_rt {
                [before[0], before[1] + 1]
            } else {
                [before[0] + 1, before[1]]
            };
            assert_eq!(after, want, "{name}: (log, data) flushes");
        }
    });
    let _ = Command::new("umount").arg(&mnt).status();
    detach();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}
