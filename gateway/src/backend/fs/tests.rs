//! The fs backend's own tests: conformance, symlink containment, the open-object
//! cache, concurrency, hostile values.

use super::*;

#[test]
fn conformance() {
    let dir = tempfile::tempdir().unwrap();
    let b = FsBackend::open(&dir.path().join("objects")).unwrap();
    crate::backend::conformance::run(&b);
    // Directory markers are real directories; files are where the key says.
    assert!(dir.path().join("objects/d").is_dir());
    assert_eq!(
        std::fs::read(dir.path().join("objects/a/b/file")).unwrap(),
        b"hello world"
    );
}

#[test]
fn symlinks_do_not_escape() {
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret"), b"s").unwrap();
    let b = FsBackend::open(&dir.path().join("objects")).unwrap();
    std::os::unix::fs::symlink(&outside, dir.path().join("objects/link")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret"), dir.path().join("objects/flink")).unwrap();
    assert_eq!(b.head("link/secret"), Err(BackendError::NotFound));
    assert_eq!(b.head("flink"), Err(BackendError::NotFound));
    assert!(b.put("link/new", b"x", &UserMeta::new(), false).is_err());
    assert!(!outside.join("new").exists());
    assert!(b.list("", None, None, 100).unwrap().objects.is_empty());
    assert!(b.list("link/", None, None, 100).unwrap().objects.is_empty());
    assert_eq!(b.delete("flink"), Err(BackendError::NotFound));
    assert!(outside.join("secret").exists());
}

fn meta(pairs: &[(&str, &str)]) -> UserMeta {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn backend() -> (tempfile::TempDir, PathBuf, FsBackend) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("objects");
    let b = FsBackend::open(&root).unwrap();
    let root = b.root().to_path_buf();
    (dir, root, b)
}

fn cached(b: &FsBackend, key: &str) -> bool {
    b.cache.get(key).is_some()
}

/// Makes the cached entry of `key` due for revalidation.
fn age(b: &FsBackend, key: &str) {
    let e = b.cache.get(key).expect("cached");
    b.cache.update(key, &e.file, |c| {
        c.validated = Instant::now() - 2 * REVALIDATE;
    });
}

fn setxattr(path: &Path, name: &str, val: &str) {
    setxattr_raw(path, name, val.as_bytes());
}

/// Sets user.nfsgw.`name` to any bytes, as another tool could.
fn setxattr_raw(path: &Path, name: &str, val: &[u8]) {
    let f = File::open(path).unwrap();
    let n = CString::new(format!("{}{name}", xattr::XATTR_PREFIX)).unwrap();
    sys::fsetxattr(f.as_fd(), &n, val).unwrap();
}

fn read_all(b: &FsBackend, key: &str) -> Vec<u8> {
    let mut buf = vec![0u8; 1 << 16];
    let n = b.get_range(key, 0, &mut buf).unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn cache_hit_returns_same_metadata() {
    let (_d, _root, b) = backend();
    b.put("a/f", b"hello", &meta(&[("mode", "100600")]), false)
        .unwrap();
    let h1 = b.head("a/f").unwrap();
    assert!(cached(&b, "a/f"));
    let h2 = b.head("a/f").unwrap();
    assert_eq!(h1, h2);
    assert_eq!(h1.size, 5);
    assert_eq!(h1.user.get("mode").map(String::as_str), Some("100600"));
    assert_eq!(read_all(&b, "a/f"), b"hello");
    // The root and directory markers are cached too.
    let r1 = b.head("").unwrap();
    assert_eq!(b.head("").unwrap(), r1);
    b.put("d/", b"", &meta(&[("mode", "40700")]), false)
        .unwrap();
    let d1 = b.head("d/").unwrap();
    assert!(cached(&b, "d/"));
    assert_eq!(b.head("d/").unwrap(), d1);
    assert_eq!(read_all(&b, "d/"), b"");
    // Aged entries revalidate and stay correct.
    age(&b, "a/f");
    assert_eq!(b.head("a/f").unwrap(), h1);
    assert!(b.cache.get("a/f").unwrap().validated.elapsed() < REVALIDATE);
}

/// A cached object due for revalidation whose parent directory the cache holds
/// validated is checked by one `lstatat` in that directory, not a walk of its path
/// (an `openat` and a `close` per level): what a LOOKUP or GETATTR of a file not
/// touched for a second costs. A parent due itself is walked as before, and a name
/// replaced or removed behind the gateway's back is seen either way.
#[test]
fn revalidation_checks_the_name_in_a_validated_parent() {
    let (_d, root, b) = backend();
    let m = meta(&[("mode", "100644")]);
    b.put("a/b/f", b"hello", &m, false).unwrap();
    b.head("a/b/").unwrap();
    b.head("a/b/f").unwrap();
    age(&b, "a/b/f");
    FsBackend::take_calls();
    assert_eq!(b.head("a/b/f").unwrap().size, 5);
    let calls = FsBackend::take_calls();
    assert_eq!(calls.get("openat"), None, "{calls:?}");
    assert_eq!(calls.get("lstatat"), Some(&1), "{calls:?}");
    assert!(b.cache.get("a/b/f").unwrap().validated.elapsed() < REVALIDATE);
    // The parent due too: the path is walked.
    age(&b, "a/b/f");
    age(&b, "a/b/");
    FsBackend::take_calls();
    assert_eq!(b.head("a/b/f").unwrap().size, 5);
    let calls = FsBackend::take_calls();
    assert_eq!(calls.get("openat"), Some(&2), "a, b: {calls:?}");
    assert_eq!(calls.get("lstatat"), Some(&1), "{calls:?}");
    // Replaced, then removed, behind the gateway's back (parent validated).
    b.head("a/b/").unwrap();
    std::fs::remove_file(root.join("a/b/f")).unwrap();
    std::fs::write(root.join("a/b/f"), b"xy").unwrap();
    age(&b, "a/b/f");
    assert_eq!(b.head("a/b/f").unwrap().size, 2);
    std::fs::remove_file(root.join("a/b/f")).unwrap();
    age(&b, "a/b/f");
    assert_eq!(b.head("a/b/f"), Err(BackendError::NotFound));
}

/// The revalidation through a cached parent trusts the parent's descriptor only as long
/// as the parent's own validation (the child's trust is dated from it): a directory
/// renamed behind the gateway's back, the parent or an ancestor above it, is seen once
/// that trust runs out — never served longer because the child was checked in it.
#[test]
fn a_renamed_ancestor_is_seen_when_the_parents_trust_runs_out() {
    let (_d, root, b) = backend();
    b.put("p/q/x", b"x", &UserMeta::new(), false).unwrap();
    b.head("p/q/").unwrap();
    b.head("p/q/x").unwrap();
    // The parent validated most of a REVALIDATE ago, then renamed: its cached
    // descriptor follows the directory to "p/r".
    let parent = b.cache.get("p/q/").expect("parent cached");
    let parent_at = Instant::now() - REVALIDATE / 2;
    b.cache
        .update("p/q/", &parent.file, |c| c.validated = parent_at);
    std::fs::rename(root.join("p/q"), root.join("p/r")).unwrap();
    age(&b, "p/q/x");
    // Within the parent's trust, the name checked in it may still be served (the
    // documented window for changes behind the gateway's back), but its trust is the
    // parent's, not renewed to now: it ends when the parent's does.
    let _ = b.head("p/q/x");
    if let Some(child) = b.cache.get("p/q/x") {
        assert!(
            child.validated <= parent_at,
            "the child's trust outlives its parent's"
        );
    }
    // ...and not one revalidation later: the parent is walked and is gone.
    age(&b, "p/q/x");
    if b.cache.get("p/q/").is_some() {
        age(&b, "p/q/");
    }
    assert_eq!(b.head("p/q/x"), Err(BackendError::NotFound));
    assert_eq!(b.head("p/r/x").unwrap().size, 1);

    // An ancestor above the parent renamed, the parent's own name unchanged.
    b.put("g/h/y", b"yy", &UserMeta::new(), false).unwrap();
    b.head("g/").unwrap();
    b.head("g/h/").unwrap();
    b.head("g/h/y").unwrap();
    std::fs::rename(root.join("g"), root.join("g2")).unwrap();
    for key in ["g/h/y", "g/h/", "g/"] {
        if b.cache.get(key).is_some() {
            age(&b, key);
        }
    }
    assert_eq!(b.head("g/h/y"), Err(BackendError::NotFound));
    assert_eq!(b.head("g2/h/y").unwrap().size, 2);
}

#[test]
fn external_changes_are_seen() {
    let (_d, root, b) = backend();
    b.put("f", b"one", &meta(&[("mode", "100644")]), false)
        .unwrap();
    assert_eq!(b.head("f").unwrap().size, 3);
    // Content rewritten in place (same inode).
    std::fs::write(root.join("f"), b"longer content").unwrap();
    let h = b.head("f").unwrap();
    assert_eq!(h.size, 14);
    assert_eq!(read_all(&b, "f"), b"longer content");
    // Metadata changed behind our back: the ctime moves, the xattrs are re-read.
    setxattr(&root.join("f"), "mode", "100600");
    setxattr(&root.join("f"), "uid", "42");
    let h = b.head("f").unwrap();
    assert_eq!(h.user.get("mode").map(String::as_str), Some("100600"));
    assert_eq!(h.user.get("uid").map(String::as_str), Some("42"));
    // Deleted behind our back: the cached inode has no links left.
    assert!(cached(&b, "f"));
    std::fs::remove_file(root.join("f")).unwrap();
    assert_eq!(b.head("f"), Err(BackendError::NotFound));
    assert!(!cached(&b, "f"));
    let mut buf = [0u8; 4];
    assert_eq!(b.get_range("f", 0, &mut buf), Err(BackendError::NotFound));
    // Recreated behind our back.
    std::fs::write(root.join("f"), b"new").unwrap();
    assert_eq!(read_all(&b, "f"), b"new");
    assert_eq!(b.head("f").unwrap().size, 3);
}

#[test]
fn external_rename_over_is_detected() {
    let (_d, root, b) = backend();
    b.put("a", b"aaaa", &meta(&[("uid", "1")]), false).unwrap();
    b.put("b", b"bb", &meta(&[("uid", "2")]), false).unwrap();
    assert_eq!(b.head("a").unwrap().size, 4);
    assert_eq!(b.head("b").unwrap().size, 2);
    // "b" replaces "a": a's cached inode is unlinked, seen at once.
    std::fs::rename(root.join("b"), root.join("a")).unwrap();
    let h = b.head("a").unwrap();
    assert_eq!(h.size, 2);
    assert_eq!(h.user.get("uid").map(String::as_str), Some("2"));
    assert_eq!(read_all(&b, "a"), b"bb");
    // "b" still names its (linked) inode in the cache until it is revalidated.
    age(&b, "b");
    assert_eq!(b.head("b"), Err(BackendError::NotFound));
    assert!(!cached(&b, "b"));
    // A parent directory renamed behind our back: noticed on revalidation.
    b.put("p/q/x", b"x", &UserMeta::new(), false).unwrap();
    b.head("p/q/x").unwrap();
    std::fs::rename(root.join("p/q"), root.join("p/r")).unwrap();
    age(&b, "p/q/x");
    assert_eq!(b.head("p/q/x"), Err(BackendError::NotFound));
    assert_eq!(b.head("p/r/x").unwrap().size, 1);
}

#[test]
fn gateway_changes_invalidate() {
    let (_d, _root, b) = backend();
    // put over an existing key
    b.put("k", b"aa", &meta(&[("mode", "100644")]), false)
        .unwrap();
    assert_eq!(b.head("k").unwrap().size, 2);
    assert_eq!(read_all(&b, "k"), b"aa");
    b.put("k", b"bbbb", &meta(&[("mode", "100600")]), false)
        .unwrap();
    let h = b.head("k").unwrap();
    assert_eq!(h.size, 4);
    assert_eq!(h.user.get("mode").map(String::as_str), Some("100600"));
    assert_eq!(read_all(&b, "k"), b"bbbb");
    // multipart over it
    let mut up = b.multipart("k", &meta(&[("uid", "9")])).unwrap();
    up.put_part(b"ccc").unwrap();
    up.complete().unwrap();
    let h = b.head("k").unwrap();
    assert_eq!(h.size, 3);
    assert_eq!(h.user.get("uid").map(String::as_str), Some("9"));
    assert_eq!(read_all(&b, "k"), b"ccc");
    // copy onto it
    b.put("src", b"source", &meta(&[("uid", "5")]), false)
        .unwrap();
    b.copy("src", "k").unwrap();
    assert_eq!(read_all(&b, "k"), b"source");
    assert_eq!(
        b.head("k").unwrap().user.get("uid").map(String::as_str),
        Some("5")
    );
    // set_meta
    b.set_meta("k", &meta(&[("uid", "6")])).unwrap();
    let h = b.head("k").unwrap();
    assert_eq!(h.user.get("uid").map(String::as_str), Some("6"));
    assert_eq!(h.user.get("mode"), b.head("k").unwrap().user.get("mode"));
    // writes through the cached descriptor
    let rw = b.random_write().unwrap();
    rw.write_at("k", 6, b"!!").unwrap();
    assert_eq!(b.head("k").unwrap().size, 8);
    assert_eq!(read_all(&b, "k"), b"source!!");
    rw.set_size("k", 3).unwrap();
    rw.sync("k").unwrap();
    assert_eq!(b.head("k").unwrap().size, 3);
    // delete
    b.delete("k").unwrap();
    assert_eq!(b.head("k"), Err(BackendError::NotFound));
    assert_eq!(rw.write_at("k", 0, b"x"), Err(BackendError::NotFound));
    // file rename: both names
    b.put("m", b"m", &UserMeta::new(), false).unwrap();
    b.put("n", b"nn", &UserMeta::new(), false).unwrap();
    b.head("m").unwrap();
    b.head("n").unwrap();
    b.rename("m", "n").unwrap();
    assert_eq!(b.head("m"), Err(BackendError::NotFound));
    assert_eq!(read_all(&b, "n"), b"m");
    // directory rename: every cached child under both prefixes
    b.put("d/x", b"x", &UserMeta::new(), false).unwrap();
    b.put("d/s/y", b"yy", &UserMeta::new(), false).unwrap();
    b.put("e/", b"", &UserMeta::new(), false).unwrap();
    for k in ["d/", "d/x", "d/s/", "d/s/y", "e/"] {
        b.head(k).unwrap();
        assert!(cached(&b, k), "{k}");
    }
    let e_ino = b.cache.get("e/").unwrap().ino;
    b.rename("d/", "e/").unwrap();
    for k in ["d/", "d/x", "d/s/", "d/s/y"] {
        assert_eq!(b.head(k), Err(BackendError::NotFound), "{k}");
    }
    assert_eq!(read_all(&b, "e/x"), b"x");
    assert_eq!(b.head("e/s/y").unwrap().size, 2);
    assert_ne!(b.cache.get("e/").map(|e| e.ino), Some(e_ino));
    b.head("e/").unwrap();
    assert_ne!(b.cache.get("e/").unwrap().ino, e_ino);
    // a new object where an old one was
    b.put("d/x", b"again", &UserMeta::new(), false).unwrap();
    assert_eq!(read_all(&b, "d/x"), b"again");
    // directory delete
    b.delete("e/s/y").unwrap();
    b.head("e/s/").unwrap();
    b.delete("e/s/").unwrap();
    assert_eq!(b.head("e/s/"), Err(BackendError::NotFound));
}

#[test]
fn cache_is_bounded() {
    let (_d, _root, mut b) = backend();
    b.cache = Arc::new(ObjCache::new(64));
    let cap = b.cache.per_shard * CACHE_SHARDS;
    for i in 0..cap + 200 {
        let k = format!("f{i}");
        b.put(&k, b"x", &UserMeta::new(), false).unwrap();
        b.head(&k).unwrap();
    }
    let n: usize = b.cache.shards.iter().map(|s| lock(s).len()).sum();
    assert!(n <= cap, "{n} > {cap}");
    for i in 0..cap + 200 {
        assert_eq!(b.head(&format!("f{i}")).unwrap().size, 1);
    }
}

#[test]
fn concurrent_smoke() {
    let (_d, _root, b) = backend();
    let b = Arc::new(b);
    let keys: Vec<String> = (0..6).map(|i| format!("c/k{i}")).collect();
    for k in &keys {
        b.put(k, b"0123", &UserMeta::new(), false).unwrap();
    }
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let b = b.clone();
            let keys = keys.clone();
            std::thread::spawn(move || {
                let rw = b.random_write().unwrap();
                for i in 0..400usize {
                    let k = &keys[(i * 7 + t) % keys.len()];
                    let ok_or_gone = |r: BResult<()>| {
                        assert!(matches!(r, Ok(()) | Err(BackendError::NotFound)), "{r:?}")
                    };
                    match (i + t) % 6 {
                        0 | 1 => match b.head(k) {
                            Ok(h) => assert!(h.size <= 64, "{h:?}"),
                            Err(e) => assert_eq!(e, BackendError::NotFound),
                        },
                        2 => ok_or_gone(rw.write_at(k, (i % 60) as u64, b"w")),
                        3 => ok_or_gone(b.delete(k)),
                        4 => {
                            b.put(k, b"fresh", &UserMeta::new(), false).unwrap();
                        }
                        _ => {
                            let mut buf = [0u8; 8];
                            if let Err(e) = b.get_range(k, 0, &mut buf) {
                                assert_eq!(e, BackendError::NotFound);
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // Quiet now: every answer matches the disk.
    for k in &keys {
        let disk = std::fs::metadata(b.root().join(k)).ok().map(|m| m.len());
        let cached_size = b.head(k).ok().map(|h| h.size);
        assert_eq!(cached_size, disk, "{k}");
        if let Some(n) = disk {
            let mut buf = vec![0u8; 128];
            let got = b.get_range(k, 0, &mut buf).unwrap();
            assert_eq!(got as u64, n);
            assert_eq!(&buf[..got], &std::fs::read(b.root().join(k)).unwrap()[..]);
        }
    }
}

/// Regression: listings of the root went through dups of the root's descriptor, which
/// share one directory offset, so concurrent READDIRs lost or repeated entries. Every
/// listing must see every entry exactly once.
#[test]
fn concurrent_listings_see_every_entry_once() {
    const N: usize = 2000;
    let (_d, root, b) = backend();
    std::fs::create_dir(root.join("sub")).unwrap();
    let name = |i: usize| format!("entry-with-a-long-name-to-need-many-getdents-{i:05}");
    for i in 0..N {
        std::fs::write(root.join(name(i)), b"").unwrap();
        std::fs::write(root.join("sub").join(name(i)), b"").unwrap();
    }
    let want_root: Vec<String> = (0..N).map(name).collect();
    let want_sub: Vec<String> = (0..N).map(|i| format!("sub/{}", name(i))).collect();
    let b = Arc::new(b);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let b = b.clone();
            let (want_root, want_sub) = (want_root.clone(), want_sub.clone());
            std::thread::spawn(move || {
                for i in 0..12 {
                    let (prefix, want) = if (i + t) % 3 == 2 {
                        ("sub/", &want_sub)
                    } else {
                        ("", &want_root)
                    };
                    let page = b.list(prefix, Some('/'), None, 3 * N).unwrap();
                    assert!(page.next.is_none());
                    let mut got: Vec<&str> = page
                        .objects
                        .iter()
                        .map(|o| o.key.as_str())
                        .filter(|k| *k != prefix)
                        .collect();
                    let listed = got.len();
                    got.dedup();
                    assert_eq!(got.len(), listed, "{prefix:?}: an entry listed twice");
                    assert_eq!(got, *want, "{prefix:?}: entries lost");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// Rule: offset + length near 2^64 is an error (EINVAL/EFBIG), never a wrapped offset
/// or a panic, and nothing is written.
#[test]
fn hostile_offsets_are_errors() {
    let (_d, root, b) = backend();
    b.put("f", b"data", &UserMeta::new(), false).unwrap();
    let big = i64::MAX as u64;
    let mut buf = [0u8; 16];
    // EFBIG: answered NFS3ERR_FBIG / NFS4ERR_FBIG, not an I/O error.
    let too_large = |r: BResult<()>| match r {
        Err(BackendError::TooLarge) => {}
        r => panic!("{r:?}"),
    };
    // Reads past the largest file size: an offset no file has is EINVAL; a read
    // that merely runs past it ends there (end of file).
    for off in [u64::MAX, u64::MAX - 3, big + 1] {
        assert!(
            matches!(
                b.get_range("f", off, &mut buf),
                Err(BackendError::Permanent(_))
            ),
            "{off}"
        );
    }
    assert_eq!(b.get_range("f", big - 4, &mut buf), Ok(0));
    assert_eq!(b.get_range("f", big, &mut buf), Ok(0));
    assert_eq!(b.get_range("f", 1, &mut buf), Ok(3));
    let rw = b.random_write().unwrap();
    too_large(rw.write_at("f", big - 1, b"abcd"));
    too_large(rw.write_at("f", big, b"a"));
    assert!(matches!(
        rw.write_at("f", u64::MAX - 1, b"abcd"),
        Err(BackendError::Permanent(_))
    ));
    too_large(rw.set_size("f", u64::MAX));
    too_large(rw.set_size("f", big + 1));
    assert_eq!(std::fs::read(root.join("f")).unwrap(), b"data");
    assert_eq!(b.head("f").unwrap().size, 4);
}

#[test]
fn malformed_values_are_rejected() {
    use xattr::reject;
    for (name, val) in [
        ("mode", &b"100644"[..]),
        ("mode", b"33188"),
        ("uid", b"0"),
        ("mtime", b"1700000000.123456789"),
        ("atime", b"2023-11-14T22:13:20.5Z"),
        ("ctime", b"1700000000"),
        // Before 1970 (NFSv4 times are signed).
        ("atime", b"-5"),
        ("mtime", b"-1.500000000"),
        ("nfsgw-verf", b"00112233aabbccdd"),
        ("other", b"any printable text"),
    ] {
        assert_eq!(reject(name, val), None, "{name}={val:?}");
    }
    for (name, val) in [
        ("mode", &b""[..]),
        ("other", b""),
        ("mode", b"rwxr-xr-x"),
        ("uid", "\u{ff11}\u{ff12}".as_bytes()),
        ("gid", b"-1"),
        ("uid", b"123456789012345678901"),
        ("mtime", b"yesterday"),
        ("mtime", b"17e8"),
        ("atime", b"-"),
        ("atime", b"--5"),
        ("other", b"caf\xc3\xa9"),
        ("other", b"\xff\xfe"),
        ("other", b"tab\there"),
    ] {
        assert!(reject(name, val).is_some(), "{name}={val:?}");
    }
    assert_eq!(reject("other", &[b'x'; xattr::MAX_VALUE]), None);
    assert!(reject("other", &[b'x'; xattr::MAX_VALUE + 1]).is_some());
}

/// Rule: malformed metadata written by another tool is ignored (the on-disk stat
/// values show through), never a failed GETATTR or listing; the next metadata update
/// removes it.
#[test]
fn malformed_xattrs_are_ignored() {
    let (_d, root, b) = backend();
    b.put("d/f", b"12345", &meta(&[("note", "kept")]), false)
        .unwrap();
    let path = root.join("d/f");
    setxattr_raw(&path, "mode", b"junk");
    setxattr_raw(&path, "uid", "\u{ff11}\u{ff12}".as_bytes());
    setxattr_raw(&path, "gid", b"");
    setxattr_raw(&path, "mtime", b"not a time");
    setxattr_raw(&path, "atime", b"\xff\x00\x01");
    setxattr_raw(&path, "big", &vec![b'7'; xattr::MAX_VALUE + 500]);
    setxattr_raw(&path, "ok", b"1700000000");
    let st = std::fs::metadata(&path).unwrap();
    use std::os::unix::fs::MetadataExt;
    let want = meta(&[
        ("mode", &format!("{:o}", st.mode())),
        ("uid", &st.uid().to_string()),
        ("gid", &st.gid().to_string()),
        ("note", "kept"),
        ("ok", "1700000000"),
    ]);
    let h = b.head("d/f").unwrap();
    assert_eq!(h.user, want);
    assert_eq!(h.size, 5);
    let page = b.list("d/", None, None, 100).unwrap();
    let f = page.objects.iter().find(|o| o.key == "d/f").unwrap();
    assert_eq!(f.user, want);
    // The same on a directory marker, and the root.
    setxattr_raw(&root.join("d"), "mode", b"40755x");
    setxattr_raw(&root, "uid", b"root");
    let dm = b.head("d/").unwrap();
    assert_eq!(
        dm.user.get("mode"),
        Some(&format!("{:o}", root.join("d").metadata().unwrap().mode()))
    );
    assert_eq!(
        b.head("").unwrap().user.get("uid"),
        Some(&root.metadata().unwrap().uid().to_string())
    );
    b.list("", None, None, 100).unwrap();
    // Replacing the metadata drops the malformed attributes from disk.
    b.set_meta("d/f", &meta(&[("mode", "100600")])).unwrap();
    let f = File::open(&path).unwrap();
    let mut names = vec![0u8; 4096];
    let n = sys::flistxattr(f.as_fd(), &mut names).unwrap();
    let names: Vec<&[u8]> = names[..n]
        .split(|c| *c == 0)
        .filter(|s| s.starts_with(xattr::XATTR_PREFIX.as_bytes()))
        .collect();
    assert_eq!(names, [b"user.nfsgw.mode".as_slice()]);
    assert_eq!(
        b.head("d/f").unwrap().user.get("mode").map(String::as_str),
        Some("100600")
    );
    // What a write returns (and caches) is what a re-read shows.
    let put = b
        .put("g", b"", &meta(&[("mtime", "junk"), ("x", "1")]), false)
        .unwrap();
    assert_eq!(put.user.get("mtime"), None);
    assert_eq!(b.head("g").unwrap(), put);
    b.set_meta("g", &meta(&[("uid", "")])).unwrap();
    assert_eq!(b.head("g").unwrap().user.get("uid"), put.user.get("uid"));
}

/// A put killed mid-way leaves a hidden temporary; the directory it sits in must still
/// be removable once it looks empty (seen after a SIGKILL restart in the VM stage), but
/// a temporary of this run (a put in flight) is never deleted under it.
#[test]
fn rmdir_removes_temporaries_of_earlier_runs_only() {
    let dir = tempfile::tempdir().unwrap();
    let b = FsBackend::open(&dir.path().join("objects")).unwrap();
    b.put("d/", b"", &UserMeta::new(), false).unwrap();
    let d = dir.path().join("objects/d");
    std::fs::write(d.join(".nfsgw-tmp.0badc0de.0123456789abcdef"), b"old").unwrap();
    let listed = b.list("d/", None, None, 100).unwrap();
    assert!(
        listed.objects.iter().all(|o| !o.key.contains(TEMP_PREFIX)),
        "temporaries are never listed: {listed:?}"
    );
    assert_eq!(b.delete("d/"), Ok(()));
    assert!(!d.exists());

    b.put("e/", b"", &UserMeta::new(), false).unwrap();
    let e = dir.path().join("objects/e");
    let mine = format!("{}0123456789abcdef", run_temp_prefix());
    std::fs::write(e.join(&mine), b"in flight").unwrap();
    assert!(matches!(b.delete("e/"), Err(BackendError::Permanent(_))));
    assert!(
        e.join(&mine).exists(),
        "a temporary of this run is left alone"
    );
}

/// A write past the file system's largest file (EFBIG: ext4 stops at 16 TiB) is the
/// protocol's FBIG, not an I/O error logged per call (hostile offsets, found by
/// `nfsgw-tools fuzz --campaign v4`).
#[test]
fn efbig_is_too_large_not_permanent() {
    let e = |n| map_io(io::Error::from_raw_os_error(n), "write", "k");
    assert_eq!(e(libc::EFBIG), BackendError::TooLarge);
    assert!(matches!(e(libc::EIO), BackendError::Permanent(_)));
}

/// A put object is cached as written (`ObjCache::replace`) and a put or delete in a
/// directory records the directory's new ctime (`note_entries_change`): the HEADs of
/// a create's or a remove's reply attributes read no metadata. Metadata changed by
/// another tool is still seen.
#[test]
fn heads_after_own_puts_and_deletes_read_no_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let b = FsBackend::open(&dir.path().join("objects")).unwrap();
    let m = meta(&[("mode", "100600"), ("uid", "7")]);
    b.put("d/", b"", &meta(&[("mode", "40755")]), true).unwrap();
    b.head("d/").unwrap();
    b.head("").unwrap();
    let reads = b.meta_reads();
    let put = b.put("d/f", b"abc", &m, true).unwrap();
    let head = b.head("d/f").unwrap();
    assert_eq!(head, put);
    assert_eq!(head.user.get("uid").map(String::as_str), Some("7"));
    b.head("d/").unwrap();
    b.put("g", b"", &m, true).unwrap();
    b.head("").unwrap();
    b.delete("d/f").unwrap();
    assert_eq!(b.head("d/f"), Err(BackendError::NotFound));
    b.head("d/").unwrap();
    assert_eq!(b.meta_reads(), reads, "no metadata read");
    // Another tool's change moves the ctime (a clock tick later): read again.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let path = dir.path().join("objects/g");
    xattr::set(File::open(&path).unwrap().as_fd(), &meta(&[("uid", "8")])).unwrap();
    assert_eq!(
        b.head("g").unwrap().user.get("uid").map(String::as_str),
        Some("8")
    );
}

/// Pages of a listing are cut from the directory's window (`list` module docs): a
/// directory is read once per window, not once per page, and a change made between
/// pages — by the gateway or by another tool — shows in the next page.
#[test]
fn listing_pages_are_cut_from_one_scan_and_see_changes() {
    let (_d, root, b) = backend();
    std::fs::create_dir(root.join("d")).unwrap();
    for i in 0..3000 {
        File::create(root.join(format!("d/f{i:05}"))).unwrap();
    }
    let settle = || std::thread::sleep(Duration::from_millis(60));
    settle();
    let scans = b.dir_scans();
    let page = |after: &Option<String>| b.list("d/", Some('/'), after.as_deref(), 97).unwrap();
    let (mut after, mut keys) = (None, Vec::new());
    loop {
        let p = page(&after);
        keys.extend(p.objects.into_iter().map(|o| o.key));
        match p.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!(keys.len(), 3001, "the marker and every file");
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "in key order, once");
    assert_eq!(b.dir_scans() - scans, 1, "one scan for 31 pages");
    // Changes between pages, ahead of the resume point.
    let mid = Some("d/f01000".to_string());
    assert_eq!(page(&mid).objects[0].key, "d/f01001");
    b.put("d/f01000a", b"", &UserMeta::new(), true).unwrap();
    assert_eq!(
        page(&mid).objects[0].key,
        "d/f01000a",
        "the gateway's own put"
    );
    settle();
    assert_eq!(page(&mid).objects[0].key, "d/f01000a");
    File::create(root.join("d/f01000-")).unwrap();
    assert_eq!(
        page(&mid).objects[0].key,
        "d/f01000-",
        "another tool's create"
    );
    std::fs::remove_file(root.join("d/f01001")).unwrap();
    settle();
    let p = page(&mid);
    let p2 = page(&Some("d/f01000a".into()));
    assert_eq!(p2.objects[0].key, "d/f01002", "another tool's remove");
    assert_eq!(p.objects[1].key, "d/f01000a");
}

/// The system calls of a new object and of its delete (docs/performance.md, "Create
/// and remove system calls"): no metadata read of the fresh temp file, one
/// `renameat2(RENAME_NOREPLACE)` (no `linkat` + `unlinkat`, no reopen by name: the
/// descriptor was renamed with the file), one fsync of the file and one of the
/// directory; a delete is `lstat`, `unlinkat` and the directory's fstat and fsync
/// (`backend.fs.flush` = per-directory).
#[test]
fn a_new_object_and_its_delete_make_only_the_needed_system_calls() {
    use std::collections::BTreeMap;
    // Per directory whatever the temp directory's file system (journal mode's calls:
    // `flush::tests`).
    let d = tempfile::tempdir().unwrap();
    let b = FsBackend::open_configured(
        &d.path().join("objects"),
        false,
        crate::config::FlushMode::PerDirectory,
    )
    .unwrap();
    let root = b.root().to_path_buf();
    let m = meta(&[("mode", "100600"), ("uid", "7"), ("gid", "8")]);
    sys::calls::take();
    b.put("f", b"", &m, true).unwrap();
    let want: BTreeMap<&str, u32> = [
        ("lstatat", 1),
        ("openat", 1),
        ("fsetxattr", 3),
        ("fsync", 2),
        ("renameat2", 1),
        ("fstat", 2),
    ]
    .into_iter()
    .collect();
    assert_eq!(sys::calls::take(), want);
    // The cached entry's descriptor names the object, not a temp name.
    let e = b.cache.get("f").expect("the put's entry is cached");
    let fd_path = std::fs::read_link(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&*e.file)
    ))
    .unwrap();
    assert_eq!(fd_path, root.join("f"));
    assert_eq!(
        b.head("f").unwrap().user.get("uid").map(String::as_str),
        Some("7")
    );
    // An existing name: AlreadyExists after one probe (no temp file, no fsync), the
    // file untouched, no temp file left behind.
    sys::calls::take();
    assert_eq!(b.put("f", b"x", &m, true), Err(BackendError::AlreadyExists));
    let want: BTreeMap<&str, u32> = [("lstatat", 1)].into_iter().collect();
    assert_eq!(sys::calls::take(), want);
    assert_eq!(std::fs::read(root.join("f")).unwrap(), b"");
    let names: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("f")]);
    sys::calls::take();
    b.delete("f").unwrap();
    let want: BTreeMap<&str, u32> = [("lstatat", 1), ("unlinkat", 1), ("fstat", 1), ("fsync", 1)]
        .into_iter()
        .collect();
    assert_eq!(sys::calls::take(), want);
}

/// MKDIR's put and RMDIR's delete (docs/performance.md "Mkdir and rmdir"): the new
/// directory is opened once in the parent just walked (not walked again), the parent
/// stat'ed once, and the directory stays cached with the metadata it was given, so the
/// HEAD for the reply's attributes is one fstat (no xattr read). A directory's delete
/// is one unlinkat: rmdir(2) itself refuses a file (ENOTDIR) and a non-empty
/// directory (ENOTEMPTY), so no lstat first.
#[test]
fn a_directory_and_its_delete_make_only_the_needed_system_calls() {
    use std::collections::BTreeMap;
    let d = tempfile::tempdir().unwrap();
    let b = FsBackend::open_configured(
        &d.path().join("objects"),
        false,
        crate::config::FlushMode::PerDirectory,
    )
    .unwrap();
    let root = b.root().to_path_buf();
    let m = meta(&[("mode", "40700"), ("uid", "7"), ("gid", "8")]);
    sys::calls::take();
    b.put("d/", b"", &m, true).unwrap();
    let want: BTreeMap<&str, u32> = [
        ("mkdirat", 1),
        ("openat", 1),
        ("fsetxattr", 3),
        ("fstat", 2),
        // The new directory's inode, then its parent's entry (per directory).
        ("fsync", 2),
    ]
    .into_iter()
    .collect();
    assert_eq!(sys::calls::take(), want);
    assert_eq!(
        b.head("d/").unwrap().user.get("uid").map(String::as_str),
        Some("7")
    );
    let want: BTreeMap<&str, u32> = [("fstat", 1)].into_iter().collect();
    assert_eq!(
        sys::calls::take(),
        want,
        "the reply's HEAD reads no metadata"
    );
    // A taken name: refused by mkdirat alone.
    assert_eq!(b.put("d/", b"", &m, true), Err(BackendError::AlreadyExists));
    let want: BTreeMap<&str, u32> = [("mkdirat", 1)].into_iter().collect();
    assert_eq!(sys::calls::take(), want);
    // Not empty: refused, the directory and its file stay.
    b.put("d/f", b"x", &meta(&[]), true).unwrap();
    assert!(matches!(b.delete("d/"), Err(BackendError::Permanent(_))));
    assert!(root.join("d/f").is_file());
    b.delete("d/f").unwrap();
    // A file named as a directory: not found, the file stays.
    b.put("g", b"", &meta(&[]), true).unwrap();
    assert_eq!(b.delete("g/"), Err(BackendError::NotFound));
    assert!(root.join("g").is_file());
    // A symlink to a directory is no directory here.
    std::os::unix::fs::symlink(root.join("d"), root.join("s")).unwrap();
    assert_eq!(b.delete("s/"), Err(BackendError::NotFound));
    assert!(root.join("d").is_dir());
    sys::calls::take();
    b.delete("d/").unwrap();
    let want: BTreeMap<&str, u32> = [("unlinkat", 1), ("fstat", 1), ("fsync", 1)]
        .into_iter()
        .collect();
    assert_eq!(sys::calls::take(), want);
    assert!(!root.join("d").exists());
    assert!(!cached(&b, "d/"));
    assert_eq!(b.delete("d/"), Err(BackendError::NotFound));
    assert_eq!(b.head("d/"), Err(BackendError::NotFound));
}

/// The `maxfilesize` the front ends advertise (RFC 8881 §5.8.2, attribute 27, RFC 1813 FSINFO)
/// is the root file system's own largest file, not 2^63 - 1: on ext4 (16 TiB - 4 KiB)
/// a client told 2^63 - 1 accepted a write past 16 TiB into its page cache and failed
/// it only at writeback (xfstests generic/285 test 12, docs/nfs42.md). A file of the
/// advertised size can be made in the root; one byte more is refused.
#[test]
fn max_file_size_is_the_file_systems() {
    let (_d, root, b) = backend();
    let max = b.max_file_size();
    let f = File::create(root.join("big")).unwrap();
    f.set_len(max).expect("the advertised size fits");
    if max < MAX_END {
        let e = f.set_len(max + 1).expect_err("one byte more is refused");
        assert_eq!(e.raw_os_error(), Some(libc::EFBIG));
    }
    f.set_len(0).unwrap();
}

/// A listing's metadata of a file the open-object cache holds fresh (validated less
/// than REVALIDATE ago: `listed_head` uses the entry in hand and fstats it) shows
/// what changed behind the gateway's back since: the size, the metadata (its ctime
/// moved), and a file unlinked and recreated under the same name.
#[test]
fn a_listing_of_fresh_cached_files_sees_changes_behind_our_back() {
    let (_d, root, b) = backend();
    b.put("d/", b"", &UserMeta::new(), false).unwrap();
    for n in ["a", "b", "c"] {
        b.put(
            &format!("d/{n}"),
            b"one",
            &meta(&[("mode", "100644")]),
            false,
        )
        .unwrap();
        assert!(cached(&b, &format!("d/{n}")));
    }
    let listed = |b: &FsBackend| -> Vec<ObjectMeta> {
        b.list("d/", Some('/'), None, 100)
            .unwrap()
            .objects
            .into_iter()
            .filter(|o| o.key != "d/")
            .collect()
    };
    let l = listed(&b);
    assert_eq!(l.iter().map(|o| o.size).collect::<Vec<_>>(), [3, 3, 3]);
    std::fs::write(root.join("d/a"), b"longer content").unwrap();
    setxattr(&root.join("d/b"), "mode", "100600");
    std::fs::remove_file(root.join("d/c")).unwrap();
    std::fs::write(root.join("d/c"), b"new!!").unwrap();
    let l = listed(&b);
    let keys: Vec<&str> = l.iter().map(|o| o.key.as_str()).collect();
    assert_eq!(keys, ["d/a", "d/b", "d/c"]);
    assert_eq!(l[0].size, 14, "size changed in place");
    assert_eq!(
        l[1].user.get("mode").map(String::as_str),
        Some("100600"),
        "metadata changed: ctime moved, xattrs re-read"
    );
    assert_eq!(l[2].size, 5, "another inode at the name");
    std::fs::remove_file(root.join("d/a")).unwrap();
    let keys: Vec<String> = listed(&b).into_iter().map(|o| o.key).collect();
    assert_eq!(keys, ["d/b", "d/c"], "unlinked behind our back: not listed");
}

/// `dir_is_empty` (the start of a new directory's listing after MKDIR): true only
/// for a directory holding nothing at all — a file, a subdirectory or a temporary
/// (which a listing hides) makes it false — read with one walk and one readdir,
/// without the marker's xattrs a one-entry listing reads; a missing directory, a file
/// and a symlink are errors, a key without the trailing '/' is refused.
#[test]
fn an_empty_directory_is_told_by_one_readdir_without_its_metadata() {
    use std::collections::BTreeMap;
    let d = tempfile::tempdir().unwrap();
    let b = FsBackend::open(&d.path().join("objects")).unwrap();
    let root = b.root().to_path_buf();
    b.put("a/", b"", &meta(&[("mode", "40755")]), true).unwrap();
    b.put("a/d/", b"", &meta(&[("mode", "40755")]), true)
        .unwrap();
    sys::calls::take();
    assert_eq!(b.dir_is_empty("a/d/"), Some(Ok(true)));
    let calls = sys::calls::take();
    // The walk (a, d) and the stream's own open of ".".
    let want: BTreeMap<&str, u32> = [("openat", 3)].into_iter().collect();
    assert_eq!(calls, want, "no xattr read, no stat: {calls:?}");
    // The same answer a listing gives, for what a listing shows.
    let listed = |k: &str| b.list(k, Some('/'), None, 10).unwrap();
    let l = listed("a/d/");
    assert!(l.prefixes.is_empty() && l.objects.iter().all(|o| o.key == "a/d/"));
    assert_eq!(b.dir_is_empty("a/"), Some(Ok(false)), "holds d/");
    b.put("a/d/f", b"x", &meta(&[]), true).unwrap();
    assert_eq!(b.dir_is_empty("a/d/"), Some(Ok(false)));
    b.delete("a/d/f").unwrap();
    assert_eq!(b.dir_is_empty("a/d/"), Some(Ok(true)));
    // A temporary is never listed, but the directory is not empty.
    std::fs::write(root.join("a/d/.nfsgw-tmp.other.1"), b"in flight").unwrap();
    let l = listed("a/d/");
    assert!(l.prefixes.is_empty() && l.objects.iter().all(|o| o.key == "a/d/"));
    assert_eq!(b.dir_is_empty("a/d/"), Some(Ok(false)));
    std::fs::remove_file(root.join("a/d/.nfsgw-tmp.other.1")).unwrap();
    // The root: holds a/.
    assert_eq!(b.dir_is_empty(""), Some(Ok(false)));
    // Hostile or wrong keys.
    assert_eq!(
        b.dir_is_empty("a/missing/"),
        Some(Err(BackendError::NotFound))
    );
    b.put("a/file", b"x", &meta(&[]), true).unwrap();
    assert!(matches!(b.dir_is_empty("a/file/"), Some(Err(_))));
    std::os::unix::fs::symlink(root.join("a/d"), root.join("a/s")).unwrap();
    assert!(
        matches!(b.dir_is_empty("a/s/"), Some(Err(_))),
        "a symlink is no directory"
    );
    assert!(matches!(
        b.dir_is_empty("a/d"),
        Some(Err(BackendError::Permanent(_)))
    ));
    assert!(matches!(b.dir_is_empty("a/../"), Some(Err(_))));
}
