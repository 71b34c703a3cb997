//! What a worker's NFSv3 GETATTR, ACCESS and LOOKUP cost the `fs` backend
//! (docs/performance.md "Stat and listing CPU"): the metadata read to resolve a
//! handle gives its attributes, and the look-up's read gives the found object's, so
//! GETATTR and ACCESS are one `fstat` and LOOKUP two (the directory, the object),
//! where each was twice that. What the client sees is unchanged: the same handle and
//! attributes, and a change made behind the gateway's back in the very next reply.

use super::*;
use crate::backend::fs::FsBackend;

fn fs_harness() -> (H, std::path::PathBuf, tempfile::TempDir) {
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("data");
    let b = Arc::new(FsBackend::open(&data).unwrap());
    let h = harness_on(
        b,
        vec![mk_export(
            0,
            "/",
            Access::Rw,
            Squash::None,
            &["127.0.0.0/8"],
        )],
    );
    (h, data, d)
}

/// LOOKUP's reply: handle, object attributes, directory attributes.
fn lookup_full(h: &H, dir: &[u8], name: &str) -> (Vec<u8>, A, A) {
    let (o, rep) = call(h, user(0), 3, &args(|w| diropargs(w, dir, name.as_bytes())));
    assert_eq!(o, Outcome::Done);
    let mut r = XdrReader::new(&rep);
    assert_eq!(r.u32().unwrap(), 0, "LOOKUP {name}");
    let fh = r.opaque_var(64).unwrap().to_vec();
    let a = post_op(&mut r).expect("object attributes");
    let d = post_op(&mut r).expect("directory attributes");
    assert_eq!(r.remaining(), 0);
    (fh, a, d)
}

#[test]
fn lookup_getattr_and_access_read_each_object_once_on_fs() {
    let (h, data, _d) = fs_harness();
    let root = mnt(&h, "/");
    let (o, rep) = call(
        &h,
        user(0),
        9,
        &args(|w| {
            diropargs(w, &root, b"top")?;
            sattr_mode(w, Some(0o755))
        }),
    );
    assert_eq!((o, status(&rep)), (Outcome::Done, 0), "MKDIR");
    let dir = lookup(&h, user(0), &root, "top").unwrap();
    let f = create(&h, user(0), &dir, "f", 0o644).unwrap();
    std::fs::write(data.join("top/f"), b"12345").unwrap();
    // Warm the backend's open objects, as the create phase leaves them.
    lookup_full(&h, &dir, "f");

    FsBackend::take_calls();
    let (fh, a, da) = lookup_full(&h, &dir, "f");
    let calls = FsBackend::take_calls();
    assert_eq!(
        calls.get("fstat"),
        Some(&2),
        "directory + object: {calls:?}"
    );
    assert_eq!(calls.values().sum::<u32>(), 2, "{calls:?}");
    assert_eq!(fh, f);
    assert_eq!((a.size, a.kind), (5, FileKind::Reg as u32));
    assert_eq!(da.kind, FileKind::Dir as u32);
    let g = getattr(&h, &f);
    assert_eq!((g.size, g.fileid, g.mode), (a.size, a.fileid, a.mode));
    let calls = FsBackend::take_calls();
    assert_eq!(calls.get("fstat"), Some(&1), "GETATTR: {calls:?}");
    assert_eq!(calls.values().sum::<u32>(), 1, "{calls:?}");
    let (o, rep) = call(
        &h,
        user(0),
        4,
        &args(|w| {
            w.opaque_var(&f)?;
            w.u32(0x3f)
        }),
    );
    assert_eq!((o, status(&rep)), (Outcome::Done, 0));
    let calls = FsBackend::take_calls();
    assert_eq!(calls.get("fstat"), Some(&1), "ACCESS: {calls:?}");

    // Changed behind the gateway's back: the next LOOKUP and GETATTR show it.
    std::fs::write(data.join("top/f"), b"1234567890").unwrap();
    assert_eq!(lookup_full(&h, &dir, "f").1.size, 10);
    assert_eq!(getattr(&h, &f).size, 10);
    std::fs::remove_file(data.join("top/f")).unwrap();
    assert_eq!(lookup(&h, user(0), &dir, "f"), Err(nfsstat3(Status::NoEnt)));
}
