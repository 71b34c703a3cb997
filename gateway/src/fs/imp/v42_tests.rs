//! The NFSv4.2 file-service operations (`fs::v42`) against every backend: memory,
//! fs, and s3 when the run has a server (tests/run-all.sh starts moto and sets
//! NFSGW_S3_TEST_ENDPOINT). Hostile values included.

use super::*;
use crate::backend::fs::FsBackend;
use crate::backend::memory::MemoryBackend;
use crate::export::{Caller, Groups};
use crate::fs::access::Grant;
use crate::fs::FileModel;
use std::sync::atomic::{AtomicUsize, Ordering};

const OWNER: Owner = Owner {
    uid: 1000,
    gid: 100,
};
const KIB: u64 = 1024;

fn who(uid: u32, writable: bool) -> Caller {
    Caller {
        uid,
        gid: 200,
        gids: Groups::NONE,
        writable,
    }
}

fn each(f: impl Fn(&FileModel, &str)) {
    let exports = [ExportRoot {
        id: 0,
        prefix: String::new(),
    }];
    let d = tempfile::tempdir().unwrap();
    let mem: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
    f(
        &FileModel::open(mem, &d.path().join("m"), &exports).unwrap(),
        "memory",
    );
    let fsb: Arc<dyn Backend> = Arc::new(FsBackend::open(&d.path().join("data")).unwrap());
    f(
        &FileModel::open(fsb, &d.path().join("f"), &exports).unwrap(),
        "fs",
    );
    if let Some(s3) = crate::backend::s3::live_tests::fresh("") {
        let s3: Arc<dyn Backend> = Arc::new(s3);
        f(
            &FileModel::open(s3, &d.path().join("s"), &exports).unwrap(),
            "s3",
        );
    }
}

fn file(m: &FileModel, name: &str, mode: u32) -> Node {
    let root = m.root(0).unwrap();
    let set = SetAttr {
        mode: Some(mode),
        ..SetAttr::default()
    };
    m.create(&root, name.as_bytes(), &CreateMode::Unchecked(set), OWNER)
        .unwrap()
}

fn pattern(len: u64, seed: u64) -> Vec<u8> {
    (0..len).map(|i| ((i * 7 + seed) % 251) as u8).collect()
}

fn read_all(m: &FileModel, n: &Node) -> Vec<u8> {
    let size = m.getattr(n).unwrap().size as usize;
    let mut buf = vec![0u8; size];
    let mut at = 0;
    while at < size {
        let (k, _) = m.read(n, at as u64, &mut buf[at..]).unwrap();
        assert!(k > 0);
        at += k;
    }
    buf
}

/// A 1 MiB file with data at [0, 64K) and [512K, 576K), holes elsewhere (none on s3).
fn sparse(m: &FileModel) -> Node {
    let f = file(m, "sparse", 0o644);
    m.write(&f, 0, &pattern(64 * KIB, 1), Stable::FileSync)
        .unwrap();
    m.write(&f, 512 * KIB, &pattern(64 * KIB, 2), Stable::FileSync)
        .unwrap();
    let size = SetAttr {
        size: Some(1024 * KIB),
        ..SetAttr::default()
    };
    m.setattr(&f, &size).unwrap();
    m.commit(&f).unwrap();
    f
}

#[test]
fn seek_and_extents_follow_rfc_7862() {
    each(|m, name| {
        let (me, g) = (who(1000, true), Grant::Mode);
        let f = sparse(m);
        let seek = |off, what| m.seek(&me, g, &f, off, what);
        let end = 1024 * KIB;
        let d = |off| seek(off, Content::Data).unwrap();
        let h = |off| seek(off, Content::Hole).unwrap();
        let at = |eof, offset| SeekDone { eof, offset };
        if name == "s3" {
            // No holes in S3: all data, and the virtual hole at the end.
            assert_eq!(d(100 * KIB), at(false, 100 * KIB));
            assert_eq!(h(0), at(true, end));
        } else {
            assert_eq!(d(0), at(false, 0), "{name}");
            assert_eq!(h(0), at(false, 64 * KIB), "{name}");
            assert_eq!(d(64 * KIB), at(false, 512 * KIB), "{name}");
            assert_eq!(h(520 * KIB), at(false, 576 * KIB), "{name}");
            // No data after the last extent: OK with eof (RFC 7862 §15.11.3).
            assert_eq!(d(600 * KIB), at(true, end), "{name}");
        }
        for off in [end, end + 1, u64::MAX, i64::MAX as u64] {
            assert_eq!(seek(off, Content::Data), Err(Status::NxIo), "{name}");
            assert_eq!(seek(off, Content::Hole), Err(Status::NxIo), "{name}");
        }
        let x = m.extents(&me, g, &f, 0, u64::MAX).unwrap();
        assert!(x.eof);
        let spans: Vec<(Content, u64, u64)> = x
            .extents
            .iter()
            .map(|e| (e.what, e.offset, e.len))
            .collect();
        if name == "s3" {
            assert_eq!(spans, vec![(Content::Data, 0, end)]);
        } else {
            use Content::*;
            let want = vec![
                (Data, 0, 64 * KIB),
                (Hole, 64 * KIB, 448 * KIB),
                (Data, 512 * KIB, 64 * KIB),
                (Hole, 576 * KIB, 448 * KIB),
            ];
            assert_eq!(spans, want, "{name}");
        }
        // A window inside the file: clipped to it, not at eof.
        let x = m.extents(&me, g, &f, 60 * KIB, 8 * KIB).unwrap();
        assert!(!x.eof);
        assert_eq!(x.extents.iter().map(|e| e.len).sum::<u64>(), 8 * KIB);
        assert!(m
            .extents(&me, g, &f, u64::MAX, u64::MAX)
            .unwrap()
            .extents
            .is_empty());
        // Not a regular file; no read access.
        let root = m.root(0).unwrap();
        assert_eq!(m.seek(&me, g, &root, 0, Content::Data), Err(Status::IsDir));
        let secret = file(m, "secret", 0o600);
        m.write(&secret, 0, b"x", Stable::FileSync).unwrap();
        let other = who(2000, true);
        assert_eq!(
            m.seek(&other, g, &secret, 0, Content::Data),
            Err(Status::Acces)
        );
        assert!(m
            .seek(&other, Grant::Open, &secret, 0, Content::Data)
            .is_ok());
    });
}

#[test]
fn allocate_and_deallocate() {
    each(|m, name| {
        let (me, g) = (who(1000, true), Grant::Mode);
        let f = file(m, "space", 0o644);
        let data = pattern(64 * KIB, 3);
        m.write(&f, 0, &data, Stable::FileSync).unwrap();
        let punched = m.deallocate(&me, g, &f, 4 * KIB, 8 * KIB);
        let grown = m.allocate(&me, g, &f, 64 * KIB, 16 * KIB);
        if name == "s3" {
            // S3 has no holes and reserves no space (docs/nfs42.md).
            assert_eq!(punched, Err(Status::NotSupp));
            assert_eq!(grown, Err(Status::NotSupp));
        } else {
            punched.unwrap();
            grown.unwrap();
            let back = read_all(m, &f);
            assert_eq!(back.len() as u64, 80 * KIB, "{name}: ALLOCATE extends");
            assert!(back[4096..12288].iter().all(|b| *b == 0), "{name}");
            assert_eq!(&back[..4096], &data[..4096]);
            assert_eq!(&back[12288..65536], &data[12288..]);
            let hole = m.seek(&me, g, &f, 0, Content::Hole).unwrap();
            assert_eq!(hole.offset, 4 * KIB, "{name}");
            // Past the end: the size stays.
            m.deallocate(&me, g, &f, 70 * KIB, 1 << 20).unwrap();
            assert_eq!(m.getattr(&f).unwrap().size, 80 * KIB);
        }
        // Hostile ranges.
        for (off, len, st) in [
            (0, 0, Status::Inval),
            (u64::MAX - 1, 10, Status::FBig),
            (i64::MAX as u64, 1, Status::FBig),
            (1, u64::MAX, Status::FBig),
        ] {
            assert_eq!(
                m.allocate(&me, g, &f, off, len),
                Err(st),
                "{name} {off} {len}"
            );
            assert_eq!(m.deallocate(&me, g, &f, off, len), Err(st), "{name}");
        }
        // Permission and read-only exports.
        let other = who(2000, true);
        assert_eq!(m.deallocate(&other, g, &f, 0, 1), Err(Status::Acces));
        assert_eq!(
            m.allocate(&who(1000, false), g, &f, 0, 1),
            Err(Status::Rofs)
        );
        let root = m.root(0).unwrap();
        assert_eq!(m.allocate(&me, g, &root, 0, 1), Err(Status::IsDir));
    });
}

fn ca<'a>(src: &'a Node, dst: &'a Node, src_off: u64, dst_off: u64, count: u64) -> CopyArgs<'a> {
    CopyArgs {
        src,
        src_grant: Grant::Mode,
        src_off,
        dst,
        dst_grant: Grant::Mode,
        dst_off,
        count,
    }
}

#[test]
fn copy_and_clone_stay_in_the_store() {
    each(|m, name| {
        let me = who(1000, true);
        let src = file(m, "src", 0o644);
        let data = pattern(100 * KIB, 5);
        m.write(&src, 0, &data, Stable::FileSync).unwrap();
        // Whole source (count 0 = to EOF) into a new, empty file; its mode stays.
        let whole = file(m, "whole", 0o600);
        let copies = crate::backend::s3::requests::sent(crate::backend::s3::requests::Req::Copy);
        let done = m.copy(&me, &ca(&src, &whole, 0, 0, 0)).unwrap();
        assert_eq!(
            done,
            CopyDone {
                count: 100 * KIB,
                committed: Stable::FileSync
            }
        );
        assert!(read_all(m, &whole) == data, "{name}");
        assert_eq!(m.getattr(&whole).unwrap().mode, 0o600, "{name}");
        if name == "s3" {
            let now = crate::backend::s3::requests::sent(crate::backend::s3::requests::Req::Copy);
            assert!(now > copies, "s3: no CopyObject was sent");
        }
        // A range of it into another new file (s3: UploadPartCopy of the range).
        let part = file(m, "part", 0o644);
        let done = m.copy(&me, &ca(&src, &part, 4 * KIB, 0, 8 * KIB)).unwrap();
        assert_eq!(done.count, 8 * KIB);
        assert!(read_all(m, &part) == data[4096..12288], "{name}");
        // Into the middle of an existing file: only where the store writes in place.
        let mid = m.copy(&me, &ca(&src, &whole, 0, 10, 100));
        if name == "s3" {
            assert_eq!(mid, Err(Status::NotSupp));
        } else {
            assert_eq!(mid.unwrap().count, 100);
            let back = read_all(m, &whole);
            assert_eq!(&back[10..110], &data[..100]);
            assert_eq!(&back[..10], &data[..10]);
        }
        // Hostile ranges and overlap.
        let size = 100 * KIB;
        for (s, d, c, st) in [
            (size + 1, 0, 0, Status::Inval),
            (size, 0, 1, Status::Inval),
            (1, 0, u64::MAX, Status::Inval),
            (u64::MAX, 0, 0, Status::Inval),
            (0, u64::MAX - 10, 100, Status::FBig),
            (0, i64::MAX as u64, 1, Status::FBig),
        ] {
            assert_eq!(
                m.copy(&me, &ca(&src, &part, s, d, c)),
                Err(st),
                "{name} {s} {d} {c}"
            );
        }
        let same = |s, d, c| ca(&src, &src, s, d, c);
        assert_eq!(m.copy(&me, &same(0, 100, 200)), Err(Status::Inval));
        assert_eq!(m.copy(&me, &same(100, 0, 200)), Err(Status::Inval));
        assert_eq!(m.copy(&me, &same(0, 0, 0)), Err(Status::Inval));
        assert_eq!(m.clone_range(&me, &same(0, 0, 4096)), Err(Status::Inval));
        // Access: read the source, write the target.
        let other = who(2000, true);
        assert_eq!(
            m.copy(&other, &ca(&src, &part, 0, 0, 1)),
            Err(Status::Acces)
        );
        let ro = who(1000, false);
        assert_eq!(m.copy(&ro, &ca(&src, &part, 0, 0, 1)), Err(Status::Rofs));
        let root = m.root(0).unwrap();
        assert_eq!(m.copy(&me, &ca(&src, &root, 0, 0, 1)), Err(Status::IsDir));
        // CLONE: alignment to clone_blksize, all or nothing.
        let b = m.clone_block();
        let cl = file(m, "clone", 0o644);
        m.clone_range(&me, &ca(&src, &cl, 0, 0, 0)).unwrap();
        assert!(read_all(m, &cl) == data, "{name}");
        if b > 1 {
            let r = m.clone_range(&me, &ca(&src, &cl, 1, 0, b));
            assert_eq!(r, Err(Status::Inval), "{name}: unaligned source");
            let r = m.clone_range(&me, &ca(&src, &cl, 0, 0, b + 1));
            assert_eq!(r, Err(Status::Inval), "{name}: unaligned count");
        }
        // A count ending at the source's end needs no alignment.
        let tail = file(m, "tail", 0o644);
        m.clone_range(&me, &ca(&src, &tail, 0, 0, size)).unwrap();
        assert_eq!(m.getattr(&tail).unwrap().size, size);
    });
}

#[test]
fn xattrs_keep_apart_from_gateway_metadata() {
    each(|m, name| {
        let me = who(1000, true);
        let f = file(m, "x", 0o640);
        let a0 = m.getattr(&f).unwrap();
        // Names that are the gateway's own metadata names elsewhere.
        for n in [
            &b"mode"[..],
            b"uid",
            b"nfsgw.mode",
            b"xa-6d6f6465",
            b"user.mode",
        ] {
            m.setxattr(&me, &f, n, b"0", XattrHow::Either).unwrap();
            assert_eq!(m.getxattr(&me, &f, n).unwrap(), b"0", "{name}");
        }
        let a1 = m.getattr(&f).unwrap();
        assert_eq!(
            (a1.mode, a1.uid, a1.gid),
            (a0.mode, a0.uid, a0.gid),
            "{name}"
        );
        let bin: Vec<u8> = (0..=255u8).collect();
        m.setxattr(&me, &f, "b\u{e9}".as_bytes(), &bin, XattrHow::Create)
            .unwrap();
        assert_eq!(m.getxattr(&me, &f, "b\u{e9}".as_bytes()).unwrap(), bin);
        assert_eq!(
            m.setxattr(&me, &f, b"mode", b"1", XattrHow::Create),
            Err(Status::Exist)
        );
        assert_eq!(
            m.setxattr(&me, &f, b"none", b"1", XattrHow::Replace),
            Err(Status::NoXattr)
        );
        m.setxattr(&me, &f, b"mode", b"2", XattrHow::Replace)
            .unwrap();
        assert_eq!(m.getxattr(&me, &f, b"mode").unwrap(), b"2");
        assert_eq!(m.getxattr(&me, &f, b"none"), Err(Status::NoXattr));
        // LISTXATTRS: sorted, paged by XDR bytes, resumed from the cookie.
        let mut seen = Vec::new();
        let mut cookie = 0;
        loop {
            let p = m.listxattrs(&me, &f, cookie, 24).unwrap();
            assert!(!p.names.is_empty() || p.eof);
            seen.extend(p.names);
            cookie = p.cookie;
            if p.eof {
                break;
            }
        }
        let mut want: Vec<Vec<u8>> = [&b"mode"[..], b"uid", b"nfsgw.mode", b"xa-6d6f6465"]
            .iter()
            .map(|n| n.to_vec())
            .chain([b"user.mode".to_vec(), "b\u{e9}".as_bytes().to_vec()])
            .collect();
        want.sort();
        assert_eq!(seen, want, "{name}");
        assert_eq!(m.listxattrs(&me, &f, 0, 3), Err(Status::TooSmall));
        assert_eq!(m.listxattrs(&me, &f, 999, 4096), Err(Status::BadCookie));
        assert_eq!(
            m.listxattrs(&me, &f, u64::MAX, 4096),
            Err(Status::BadCookie)
        );
        // REMOVEXATTR.
        m.removexattr(&me, &f, b"uid").unwrap();
        assert_eq!(m.removexattr(&me, &f, b"uid"), Err(Status::NoXattr));
        assert_eq!(m.getxattr(&me, &f, b"uid"), Err(Status::NoXattr));
        // Hostile names and values.
        let long = vec![b'n'; 256];
        for (n, st) in [
            (&b""[..], Status::Inval),
            (b"a/b", Status::Inval),
            (b"a\0b", Status::Inval),
            (b"\xff\xfe", Status::Inval),
            (&long[..], Status::NameTooLong),
        ] {
            assert_eq!(
                m.setxattr(&me, &f, n, b"v", XattrHow::Either),
                Err(st),
                "{name}"
            );
            assert_eq!(m.getxattr(&me, &f, n), Err(st), "{name}");
            assert_eq!(m.removexattr(&me, &f, n), Err(st), "{name}");
        }
        let huge = vec![7u8; crate::fs::v42::XATTR_MAX_VALUE + 1];
        assert_eq!(
            m.setxattr(&me, &f, b"big", &huge, XattrHow::Either),
            Err(Status::Xattr2Big)
        );
        if name == "s3" {
            // S3's 2 KiB of user metadata per object (docs/nfs42.md).
            let v = vec![b'v'; 2000];
            assert_eq!(
                m.setxattr(&me, &f, b"big", &v, XattrHow::Either),
                Err(Status::Xattr2Big)
            );
        } else {
            let v = vec![b'v'; 2000];
            m.setxattr(&me, &f, b"big", &v, XattrHow::Either).unwrap();
        }
        // Access: read for get/list, write for set/remove; read-only exports.
        let other = who(2000, true);
        assert_eq!(m.getxattr(&other, &f, b"mode"), Err(Status::Acces));
        assert_eq!(m.listxattrs(&other, &f, 0, 4096), Err(Status::Acces));
        let group = Caller {
            gid: 100,
            ..who(2000, true)
        };
        assert!(m.getxattr(&group, &f, b"mode").is_ok());
        assert_eq!(
            m.setxattr(&group, &f, b"g", b"1", XattrHow::Either),
            Err(Status::Acces)
        );
        let ro = who(1000, false);
        assert_eq!(m.removexattr(&ro, &f, b"mode"), Err(Status::Rofs));
        // Directories carry them too (an explicit one: a marker on every store).
        let root = m.root(0).unwrap();
        let dir = m.mkdir(&root, b"d", &SetAttr::default(), OWNER).unwrap();
        m.setxattr(&me, &dir, b"k", b"dv", XattrHow::Either)
            .unwrap();
        assert_eq!(m.getxattr(&me, &dir, b"k").unwrap(), b"dv");
    });
}

/// Counts the reports of one file id.
struct Count(u64, AtomicUsize);

impl ChangeObserver for Count {
    fn file(&self, fileid: u64) {
        if fileid == self.0 {
            self.1.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn all(&self) {}
}

#[test]
fn changes_are_reported_to_the_caches() {
    each(|m, name| {
        let me = who(1000, true);
        let src = file(m, "s", 0o644);
        m.write(&src, 0, b"hello", Stable::FileSync).unwrap();
        let dst = file(m, "d", 0o644);
        let c = Arc::new(Count(dst.fileid, AtomicUsize::new(0)));
        m.observe_changes(c.clone());
        let args = CopyArgs {
            src: &src,
            src_grant: Grant::Mode,
            src_off: 0,
            dst: &dst,
            dst_grant: Grant::Mode,
            dst_off: 0,
            count: 0,
        };
        m.copy(&me, &args).unwrap();
        let after_copy = c.1.load(Ordering::Relaxed);
        assert!(after_copy >= 2, "{name}: COPY reported before and after");
        m.setxattr(&me, &dst, b"k", b"v", XattrHow::Either).unwrap();
        m.removexattr(&me, &dst, b"k").unwrap();
        assert!(c.1.load(Ordering::Relaxed) >= after_copy + 4, "{name}");
        // A refused call changes nothing and reports nothing.
        let before = c.1.load(Ordering::Relaxed);
        let _ = m.setxattr(&me, &dst, b"", b"v", XattrHow::Either);
        assert_eq!(c.1.load(Ordering::Relaxed), before);
    });
}

#[test]
fn nfs4_codes_of_the_new_statuses() {
    use crate::nfs4::status::from_fs;
    assert_eq!(from_fs(Status::NoXattr).as_u32(), 10095);
    assert_eq!(from_fs(Status::Xattr2Big).as_u32(), 10096);
}
