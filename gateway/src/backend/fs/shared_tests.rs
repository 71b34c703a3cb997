//! `backend.shared`: several gateways (file models with their own state dirs, over
//! their own `FsBackend`s) on one directory accept each other's handles at once; a name
//! removed and re-created through one is STALE at the other; forged handles are
//! BADHANDLE; gateways starting together end with one key.

use super::*;
use crate::fs::{CreateMode, ExportRoot, FileModel, Node, Owner, SetAttr, Stable, Status};

const OWNER: Owner = Owner {
    uid: 1000,
    gid: 100,
};
const LONG: &str = "a-name-long-enough-that-the-key-does-not-fit-in-a-handle";

fn exports() -> Vec<ExportRoot> {
    vec![
        ExportRoot {
            id: 0,
            prefix: String::new(),
        },
        ExportRoot {
            id: 1,
            prefix: "sub/".into(),
        },
    ]
}

/// A gateway on `root` with its own state dir under `d`.
fn gateway(root: &Path, d: &Path, shared: bool) -> FileModel {
    let b: Arc<dyn Backend> = Arc::new(FsBackend::open_with(root, shared).unwrap());
    FileModel::open(b, d, &exports()).unwrap()
}

fn two(shared_b: bool) -> (tempfile::TempDir, FileModel, FileModel) {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("data");
    let a = gateway(&root, &d.path().join("state-a"), true);
    let b = gateway(&root, &d.path().join("state-b"), shared_b);
    (d, a, b)
}

fn mkfile(m: &FileModel, dir: &Node, name: &str) -> Node {
    let how = CreateMode::Guarded(SetAttr::default());
    m.create(dir, name.as_bytes(), &how, OWNER).unwrap()
}

#[test]
fn a_handle_from_one_gateway_works_at_the_other_at_once() {
    let (_d, a, b) = two(true);
    let ra = a.root(0).unwrap();
    assert_eq!(
        a.handle(&ra).as_bytes(),
        b.handle(&b.root(0).unwrap()).as_bytes()
    );
    let dir = a.mkdir(&ra, b"d", &SetAttr::default(), OWNER).unwrap();
    let hdir = a.handle(&dir);
    for name in ["short", LONG] {
        let f = mkfile(&a, &dir, name);
        a.write(&f, 0, b"written at A", Stable::FileSync).unwrap();
        let h = a.handle(&f);
        // B never looked the name up: the handle alone names the file.
        let nb = b.resolve(h.as_bytes()).unwrap();
        assert_eq!(nb.key, f.key, "{name}");
        assert_eq!(b.getattr(&nb).unwrap().size, 12);
        let mut buf = [0u8; 64];
        let (n, eof) = b.read(&nb, 0, &mut buf).unwrap();
        assert_eq!((&buf[..n], eof), (&b"written at A"[..], true));
        b.write(&nb, 0, b"WRITTEN", Stable::FileSync).unwrap();
        let (n, _) = a.read(&f, 0, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"WRITTEN at A");
        // And B hands out the very same handle for it.
        let db = b.resolve(hdir.as_bytes()).unwrap();
        let via_b = b.lookup(&db, name.as_bytes()).unwrap();
        assert_eq!(b.handle(&via_b).as_bytes(), h.as_bytes(), "{name}");
    }
    let db = b.resolve(hdir.as_bytes()).unwrap();
    let page = b.readdir(&db, 0, [0; 8], 100_000).unwrap();
    let mut names: Vec<_> = page.entries.iter().map(|e| e.name.clone()).collect();
    names.retain(|n| n != b"." && n != b"..");
    names.sort();
    assert_eq!(names, [LONG.as_bytes().to_vec(), b"short".to_vec()]);
    // The shared state is never listed.
    let top = b.readdir(&b.root(0).unwrap(), 0, [0; 8], 100_000).unwrap();
    assert!(top.entries.iter().all(|e| !e.name.starts_with(b".nfsgw")));
}

#[test]
fn removed_and_recreated_on_one_is_stale_on_the_other() {
    let (d, a, b) = two(true);
    let ra = a.root(0).unwrap();
    for name in ["x", LONG] {
        let f = mkfile(&a, &ra, name);
        let old = a.handle(&f);
        // Once B has resolved it (its table maps the id), and once it has not.
        b.resolve(old.as_bytes()).unwrap();
        a.remove(&ra, name.as_bytes()).unwrap();
        let again = mkfile(&a, &ra, name);
        let new = a.handle(&again);
        assert_ne!(old.as_bytes(), new.as_bytes());
        assert_eq!(b.resolve(old.as_bytes()), Err(Status::Stale), "{name}");
        assert_eq!(b.resolve(new.as_bytes()).unwrap().key, again.key);
        // A third gateway that never saw either.
        let fresh = gateway(&a_root(&d), &d.path().join(format!("state-c-{name}")), true);
        assert_eq!(fresh.resolve(old.as_bytes()), Err(Status::Stale), "{name}");
        assert_eq!(fresh.resolve(new.as_bytes()).unwrap().key, again.key);
    }
}

/// What README says of renames: the renaming gateway follows them, the others know the
/// file by its new name only (the old handle is STALE there, never another file).
/// (`a.rename` below moves the object; B's cache learns it within REVALIDATE.)
#[test]
fn a_file_renamed_on_one_is_found_by_its_new_name_on_the_other() {
    let (_d, a, b) = two(true);
    let ra = a.root(0).unwrap();
    let f = mkfile(&a, &ra, "before");
    let h = a.handle(&f);
    b.resolve(h.as_bytes()).unwrap();
    a.rename(&ra, b"before", &ra, b"after").unwrap();
    assert_eq!(a.resolve(h.as_bytes()).unwrap().key, "after");
    // B's open-object cache holds the (same) inode for up to REVALIDATE, then walks
    // the path again and finds nothing there.
    std::thread::sleep(REVALIDATE + Duration::from_millis(100));
    assert_eq!(b.resolve(h.as_bytes()), Err(Status::Stale));
    let rb = b.root(0).unwrap();
    let nb = b.lookup(&rb, b"after").unwrap();
    assert_eq!(b.getattr(&nb).unwrap().size, 0);
    // Not yet: a file id derives from the key a gateway first saw, so after the rename
    // A and B know the file under different ids, and each refuses the other's handle
    // (STALE, never another file). README "Several gateways on one directory".
    assert_eq!(a.resolve(b.handle(&nb).as_bytes()), Err(Status::Stale));
}

fn a_root(d: &tempfile::TempDir) -> PathBuf {
    d.path().join("data")
}

#[test]
fn forged_and_foreign_handles_are_badhandle() {
    let (d, a, b) = two(true);
    let f = mkfile(&a, &a.root(0).unwrap(), "f");
    let h = a.handle(&f).as_bytes().to_vec();
    for i in 0..h.len() {
        let mut bad = h.clone();
        bad[i] ^= 0x40;
        assert_eq!(b.resolve(&bad), Err(Status::BadHandle), "byte {i}");
    }
    // A gateway on the directory with `shared` off: its own version-1 handles are
    // refused by the shared ones, and theirs by it (what this option changes).
    let solo = gateway(&a_root(&d), &d.path().join("state-solo"), false);
    let hs = solo.handle(&solo.lookup(&solo.root(0).unwrap(), b"f").unwrap());
    assert_eq!(hs.as_bytes().len(), 31, "off: today's handles");
    assert_eq!(b.resolve(hs.as_bytes()), Err(Status::BadHandle));
    assert_eq!(solo.resolve(&h), Err(Status::BadHandle));
}

#[test]
fn gateways_starting_together_end_with_one_key() {
    for _ in 0..4 {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("data");
        std::fs::create_dir(&root).unwrap();
        let go = Arc::new(std::sync::Barrier::new(8));
        let keys: Vec<[u8; 32]> = (0..8)
            .map(|_| {
                let (root, go) = (root.clone(), go.clone());
                std::thread::spawn(move || {
                    go.wait();
                    let b = FsBackend::open_with(&root, true).unwrap();
                    b.shared().unwrap().mac_key().unwrap()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        assert!(keys.iter().all(|k| *k == keys[0]));
        let dir = root.join(shared::DIR);
        assert_eq!(std::fs::read(dir.join("handle.key")).unwrap(), keys[0]);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join("handle.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
        assert_eq!(
            left.len(),
            2,
            "handle.key and ids/, no temporaries: {left:?}"
        );
    }
}

#[test]
fn the_key_and_the_id_index_are_refused_to_clients() {
    let d = tempfile::tempdir().unwrap();
    let b = FsBackend::open_with(&d.path().join("data"), true).unwrap();
    let st = b.shared().unwrap();
    st.put_id(7, "some/long/key").unwrap();
    st.put_id(7, "first/writer/wins").unwrap();
    assert_eq!(st.get_id(7).unwrap(), "some/long/key");
    assert_eq!(st.get_id(8), Err(BackendError::NotFound));
    for key in [
        format!("{}/handle.key", shared::DIR),
        format!("{}/ids/0000000000000007", shared::DIR),
    ] {
        assert!(b.head(&key).is_err(), "{key}");
        assert!(b.put(&key, b"x", &UserMeta::new(), false).is_err(), "{key}");
    }
    assert!(b.list("", None, None, 100).unwrap().objects.is_empty());
    assert_eq!(b.count_subdirs("", 100).unwrap(), Some(0));
}

#[test]
fn a_damaged_key_stops_the_start_and_says_what_to_do() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("data");
    drop(FsBackend::open_with(&root, true).unwrap());
    std::fs::write(root.join(shared::DIR).join("handle.key"), [1u8; 5]).unwrap();
    let e = FsBackend::open_with(&root, true).err().unwrap();
    let msg = format!("{e:#}");
    assert!(msg.contains("expected 32 bytes, found 5"), "{msg}");
    // With the option off the directory still serves (its own handles).
    assert!(FsBackend::open_with(&root, false).is_ok());
}

/// Switching `shared` on keeps the handles this gateway gave out before (version 1)
/// valid here; other gateways refuse them.
#[test]
fn handles_given_out_before_switching_on_stay_valid_here_only() {
    let d = tempfile::tempdir().unwrap();
    let root = a_root(&d);
    let st = d.path().join("state-a");
    let before = gateway(&root, &st, false);
    let f = mkfile(&before, &before.root(0).unwrap(), "old");
    let h1 = before.handle(&f);
    drop(before);
    let a = gateway(&root, &st, true);
    assert_eq!(a.resolve(h1.as_bytes()).unwrap().key, "old");
    let h2 = a.handle(&a.lookup(&a.root(0).unwrap(), b"old").unwrap());
    assert_ne!(h1.as_bytes(), h2.as_bytes(), "version 2 from now on");
    let b = gateway(&root, &d.path().join("state-b"), true);
    assert_eq!(b.resolve(h1.as_bytes()), Err(Status::BadHandle));
    assert_eq!(b.resolve(h2.as_bytes()).unwrap().key, "old");
}
