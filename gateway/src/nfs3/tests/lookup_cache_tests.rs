//! LOOKUP answered on the reactor from its names (`cache::names`, `fast::lookup`):
//! filled exactly as a worker fills it (the stamps snapshotted before the procedure
//! runs, `EntrySeen::before`, and what the procedure noted, `call::note_named`), over
//! the file model reporting to the same `Generations` the server gives it. A hit is
//! the worker's reply byte for byte with no system call; every change of the name
//! (RFC 1813 §3.3.12 REMOVE, §3.3.13 RMDIR, §3.3.14 RENAME, §3.3.15 LINK) makes the
//! next LOOKUP the worker's, a new name elsewhere in the directory does not; access
//! (export admission, squashing, search permission on the directory, RFC 1813 §4.4)
//! is checked on every hit; names a worker refuses never hit.

use super::*;
use crate::backend::fs::FsBackend;
use crate::cache::names::EntrySeen;
use crate::cache::{Generations, ReadCache, Request, ATTR_TTL};
use crate::call::take_named;

struct W {
    h: H,
    gens: Arc<Generations>,
    cache: ReadCache,
    data: std::path::PathBuf,
    _d: tempfile::TempDir,
}

fn world() -> W {
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
    let gens = Arc::new(Generations::new());
    h.model.observe_changes(gens.clone());
    W {
        h,
        gens,
        cache: ReadCache::new(0, engine::mem::HugePolicy::Off).unwrap(),
        data,
        _d: d,
    }
}

impl W {
    /// A call run as a worker runs it: stamps before, the procedure, then the fill
    /// the reactor receives (`server::worker::run_job`).
    fn worker(&mut self, cred: Cred, proc_: u32, a: &[u8]) -> Vec<u8> {
        let seen = fast::parse_entry(proc_, a).and_then(|ask| EntrySeen::before(&self.gens, &ask));
        let _ = take_named();
        let (_, rep) = call(&self.h, cred, proc_, a);
        let named = take_named();
        if let Some(fill) = seen.and_then(|s| s.learned(&self.gens, named)) {
            self.cache.fill(&self.gens, fill, None);
        }
        rep
    }

    fn lookup(&mut self, cred: Cred, dir: &[u8], name: &[u8]) -> Vec<u8> {
        self.worker(cred, 3, &args(|w| diropargs(w, dir, name)))
    }

    /// The reactor's answer, or `None` (nothing written) on a miss.
    fn cached(&mut self, cred: &Cred, client: &str, dir: &[u8], name: &[u8]) -> Option<Vec<u8>> {
        self.cached_in(None, cred, client, dir, name)
    }

    /// `cached` under another export table (`None`: the harness's).
    fn cached_in(
        &mut self,
        exports: Option<&Exports>,
        cred: &Cred,
        client: &str,
        dir: &[u8],
        name: &[u8],
    ) -> Option<Vec<u8>> {
        let req = Request {
            fh: dir,
            client: client.parse().unwrap(),
            cred,
        };
        let exports = exports.unwrap_or(&self.h.exports);
        let mut buf = vec![0u8; 4096];
        let mut w = XdrWriter::new(&mut buf);
        let hit = fast::lookup(&mut self.cache, &self.gens, exports, &req, name, &mut w);
        let n = w.position();
        assert_eq!(hit, n > 0, "a miss writes nothing");
        hit.then(|| buf[..n].to_vec())
    }

    fn hit(&mut self, dir: &[u8], name: &[u8]) -> Option<Vec<u8>> {
        self.cached(&user(0), "127.0.0.1", dir, name)
    }

    fn mkdir(&mut self, dir: &[u8], name: &[u8], mode: u32) -> Vec<u8> {
        let rep = self.worker(
            user(0),
            9,
            &args(|w| {
                diropargs(w, dir, name)?;
                sattr_mode(w, Some(mode))
            }),
        );
        assert_eq!(status(&rep), 0, "MKDIR");
        let mut r = XdrReader::new(&rep[4..]);
        assert!(r.bool().unwrap());
        r.opaque_var(64).unwrap().to_vec()
    }

    fn create(&mut self, dir: &[u8], name: &[u8]) -> Vec<u8> {
        let rep = self.worker(
            user(0),
            8,
            &args(|w| {
                diropargs(w, dir, name)?;
                w.u32(0)?;
                sattr_mode(w, Some(0o644))
            }),
        );
        assert_eq!(status(&rep), 0, "CREATE");
        let mut r = XdrReader::new(&rep[4..]);
        assert!(r.bool().unwrap());
        r.opaque_var(64).unwrap().to_vec()
    }

    fn rename(&mut self, from: (&[u8], &[u8]), to: (&[u8], &[u8])) {
        let a = args(|w| {
            diropargs(w, from.0, from.1)?;
            diropargs(w, to.0, to.1)
        });
        assert_eq!(status(&self.worker(user(0), 14, &a)), 0, "RENAME");
    }

    /// A LOOKUP the reactor answers, then its handle.
    fn hit_fh(&mut self, dir: &[u8], name: &[u8]) -> Vec<u8> {
        let rep = self.hit(dir, name).expect("a reactor hit");
        let mut r = XdrReader::new(&rep);
        assert_eq!(r.u32().unwrap(), 0);
        r.opaque_var(64).unwrap().to_vec()
    }
}

/// A directory `top` with a file `f` of 5 bytes, `f` looked up once by a worker.
fn top_with_f(w: &mut W) -> (Vec<u8>, Vec<u8>) {
    let root = mnt(&w.h, "/");
    let top = w.mkdir(&root, b"top", 0o755);
    let f = w.create(&top, b"f");
    assert_eq!(write(&w.h, &f, 0, b"12345", 2).0, 0);
    w.lookup(user(0), &top, b"f");
    (top, f)
}

#[test]
fn a_cached_lookup_is_the_workers_reply_with_no_system_call() {
    let mut w = world();
    let (top, f) = top_with_f(&mut w);
    let by_worker = w.lookup(user(0), &top, b"f");
    FsBackend::take_calls();
    let hit = w.hit(&top, b"f").expect("answered from the names");
    let calls = FsBackend::take_calls();
    assert!(calls.is_empty(), "no system call: {calls:?}");
    assert_eq!(hit, by_worker, "the worker's bytes");
    assert_eq!(w.hit_fh(&top, b"f"), f);
    assert_eq!(w.cache.stats().lookups, 2);
    // A directory's name too (MKDIR taught it; its attributes came with a LOOKUP).
    let root = mnt(&w.h, "/");
    w.lookup(user(0), &root, b"top");
    assert_eq!(w.hit_fh(&root, b"top"), top);
}

#[test]
fn another_name_made_in_the_directory_leaves_the_entry_answering() {
    let mut w = world();
    let (top, f) = top_with_f(&mut w);
    for i in 0..20 {
        let g = w.create(&top, format!("g{i}").as_bytes());
        // The create taught its own name and the directory's new attributes.
        assert_eq!(w.hit_fh(&top, b"f"), f, "after creating g{i}");
        assert_eq!(
            status(&w.lookup(user(0), &top, format!("g{i}").as_bytes())),
            0
        );
        assert_eq!(w.hit_fh(&top, format!("g{i}").as_bytes()), g);
    }
    // A WRITE to the file moves its attributes, not its name: the next LOOKUP
    // shows the new size once the attributes are known again.
    assert_eq!(write(&w.h, &f, 0, b"1234567", 2).0, 0);
    assert!(w.hit(&top, b"f").is_none(), "old attributes never answer");
    w.lookup(user(0), &top, b"f");
    let rep = w.hit(&top, b"f").unwrap();
    let mut r = XdrReader::new(&rep[4..]);
    r.opaque_var(64).unwrap();
    assert_eq!(post_op(&mut r).unwrap().size, 7);
}

#[test]
fn remove_rename_rmdir_and_link_make_the_name_the_workers_again() {
    let mut w = world();
    let (top, f) = top_with_f(&mut w);
    // REMOVE: the name is gone at once.
    assert_eq!(w.hit_fh(&top, b"f"), f);
    let rm = args(|a| diropargs(a, &top, b"f"));
    assert_eq!(status(&w.worker(user(0), 12, &rm)), 0, "REMOVE");
    assert!(w.hit(&top, b"f").is_none());
    assert_eq!(status(&w.lookup(user(0), &top, b"f")), 2, "NOENT");
    assert!(w.hit(&top, b"f").is_none(), "no negative entries");

    // The name made again: the new object, never the old one.
    let f2 = w.create(&top, b"f");
    assert_ne!(f2, f);
    w.lookup(user(0), &top, b"f");
    assert_eq!(w.hit_fh(&top, b"f"), f2);

    // RENAME away: the source name goes, the target name is the moved object.
    let a = w.create(&top, b"a");
    w.lookup(user(0), &top, b"a");
    assert_eq!(w.hit_fh(&top, b"a"), a);
    w.rename((&top, b"a"), (&top, b"b"));
    assert!(w.hit(&top, b"a").is_none());
    // The moved file's attributes known again (its new name looked up): the old
    // name's entry must not answer with them (the name itself was reported, not
    // only the object, whose stamp a LOOKUP refreshes).
    w.lookup(user(0), &top, b"b");
    assert_eq!(w.hit_fh(&top, b"b"), a);
    assert!(w.hit(&top, b"a").is_none(), "the renamed-away name");
    assert_eq!(status(&w.lookup(user(0), &top, b"a")), 2);
    // RENAME onto a cached name: it is the object moved there.
    w.rename((&top, b"b"), (&top, b"f"));
    assert!(w.hit(&top, b"f").is_none());
    w.lookup(user(0), &top, b"f");
    assert_eq!(w.hit_fh(&top, b"f"), a);

    // RMDIR.
    let sub = w.mkdir(&top, b"sub", 0o755);
    w.lookup(user(0), &top, b"sub");
    assert_eq!(w.hit_fh(&top, b"sub"), sub);
    let rd = args(|x| diropargs(x, &top, b"sub"));
    assert_eq!(status(&w.worker(user(0), 13, &rd)), 0, "RMDIR");
    assert!(w.hit(&top, b"sub").is_none());
    assert_eq!(status(&w.lookup(user(0), &top, b"sub")), 2);

    // LINK at a name: refused over a cached name (EXIST), and a cached name stays
    // right; a new link name is the linked file's.
    let ln = |fh: &[u8], name: &[u8]| {
        args(|x| {
            x.opaque_var(fh)?;
            diropargs(x, &top, name)
        })
    };
    assert_eq!(status(&w.worker(user(0), 15, &ln(&a, b"f"))), 17, "EXIST");
    w.lookup(user(0), &top, b"f");
    assert_eq!(w.hit_fh(&top, b"f"), a);
    assert_eq!(status(&w.worker(user(0), 15, &ln(&a, b"l"))), 0, "LINK");
    w.lookup(user(0), &top, b"l");
    let l = w.hit_fh(&top, b"l");
    assert_eq!(
        FileModel::peek_handle(&l).map(|p| p.1),
        FileModel::peek_handle(&a).map(|p| p.1)
    );
    // One name of a linked file removed: the file lives on under "f", whose LOOKUP
    // refreshes its attributes; the removed name still never answers.
    let rl = args(|x| diropargs(x, &top, b"l"));
    assert_eq!(status(&w.worker(user(0), 12, &rl)), 0, "REMOVE of a link");
    w.lookup(user(0), &top, b"f");
    assert!(w.hit(&top, b"f").is_some());
    assert!(w.hit(&top, b"l").is_none(), "the removed link name");
    assert_eq!(status(&w.lookup(user(0), &top, b"l")), 2);
}

#[test]
fn search_permission_admission_and_squashing_are_checked_on_every_hit() {
    let mut w = world();
    let root = mnt(&w.h, "/");
    let private = w.mkdir(&root, b"private", 0o700);
    w.create(&private, b"f");
    w.lookup(user(0), &private, b"f");
    assert!(w.hit(&private, b"f").is_some(), "root may search it");
    // No X on the directory: the cache path answers nothing; the worker, ACCES.
    assert!(w.cached(&user(1000), "127.0.0.1", &private, b"f").is_none());
    assert_eq!(status(&w.lookup(user(1000), &private, b"f")), 13, "ACCES");
    assert!(w.hit(&private, b"f").is_some(), "root's entry stays");
    // A client outside the export's networks.
    assert!(w.cached(&user(0), "10.1.2.3", &private, b"f").is_none());
    // The same export root-squashed (a reload): root is nobody, who may not search.
    let squashed = Exports::new(vec![mk_export(
        0,
        "/",
        Access::Rw,
        Squash::Root,
        &["127.0.0.0/8"],
    )]);
    assert!(w
        .cached_in(Some(&squashed), &user(0), "127.0.0.1", &private, b"f")
        .is_none());
    // A directory that is not one, and a name under a file, are the worker's.
    let (top, f) = top_with_f(&mut w);
    assert!(w.hit(&f, b"f").is_none());
    assert!(w.hit(&top, b"f").is_some());
}

#[test]
fn hostile_names_never_hit() {
    let mut w = world();
    let (top, _) = top_with_f(&mut w);
    let long = vec![b'x'; 256];
    for name in [&b"."[..], b"..", b"", b"f/", b"a/f", b"f\0", &long] {
        assert!(fast::parse_entry(3, &args(|x| diropargs(x, &top, name))).is_none());
        assert!(w.hit(&top, name).is_none(), "{name:?}");
        // The worker answers (an error, or for "." and ".." the directory and its
        // parent); still never the cache.
        w.lookup(user(0), &top, name);
        assert!(
            w.hit(&top, name).is_none(),
            "{name:?} after the worker's answer"
        );
    }
    // A name that differs by a byte is another entry.
    assert!(w.hit(&top, b"F").is_none());
    assert!(w.hit(&top, b"f").is_some());
}

/// A create while another name sharing its generation slot changed (65,536 slots for
/// every name, `Generations::name_hash`): the name is not cached, but the directory's
/// run still takes the create (`NameFill::made`), or a run missing it would never
/// answer again (`cache_dirs::Listings::made`).
#[test]
fn a_create_whose_name_slot_moved_meanwhile_still_tells_the_directorys_run() {
    let mut w = world();
    let root = mnt(&w.h, "/");
    let top = w.mkdir(&root, b"top", 0o755);
    let a = args(|w| {
        diropargs(w, &top, b"n")?;
        w.u32(0)?;
        sattr_mode(w, Some(0o644))
    });
    let seen = fast::parse_entry(8, &a)
        .and_then(|ask| EntrySeen::before(&w.gens, &ask))
        .unwrap();
    // Another name in the same slot changes while the create runs.
    let (_, dir_id) = FileModel::peek_handle(&top).unwrap();
    w.gens.bump_name(w.gens.name_hash(dir_id, b"n"));
    let _ = take_named();
    let (_, rep) = call(&w.h, user(0), 8, &a);
    assert_eq!(status(&rep), 0, "CREATE");
    let fill = seen
        .learned(&w.gens, take_named())
        .expect("the create's fill");
    match &fill.data {
        Some(crate::cache::FillData::Name(n)) => {
            assert!(n.made.is_some(), "the run's create");
            assert_eq!(&*n.name, b"n");
        }
        other => panic!("a name fill, not {other:?}"),
    }
    w.cache.fill(&w.gens, fill, None);
    assert!(w.hit(&top, b"n").is_none(), "the name itself is not cached");
}

#[test]
fn a_name_removed_behind_the_gateways_back_is_noent_after_attr_ttl() {
    let mut w = world();
    let (top, _) = top_with_f(&mut w);
    assert!(w.hit(&top, b"f").is_some());
    std::fs::remove_file(w.data.join("top/f")).unwrap();
    std::thread::sleep(ATTR_TTL + std::time::Duration::from_millis(50));
    assert!(w.hit(&top, b"f").is_none(), "past ATTR_TTL");
    assert_eq!(status(&w.lookup(user(0), &top, b"f")), 2, "NOENT");
}
