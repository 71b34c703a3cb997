//! Namespace changes invalidate exactly the files they touch (the module doc's "What
//! bumps what"): the file model over a memory store reports to the `Generations` the
//! server gives it, and a `ReadCache` filled as a worker fills it must keep answering
//! for every file the change does not touch, and never for one it does.

use super::*;
use crate::backend::memory::MemoryBackend;
use crate::config::{Access, Cidr, Export, Squash};
use crate::fs::{CreateMode, ExportRoot, FileModel, Node, Owner, SetAttr};
use engine::rpc::AuthSys;
use std::sync::Arc;

const ROOT: Owner = Owner { uid: 0, gid: 0 };

struct World {
    model: FileModel,
    gens: Arc<Generations>,
    cache: ReadCache,
    exports: Exports,
    /// The handle each file was cached under (by file id): asked again after the
    /// change, as a client holding it would.
    handles: std::collections::HashMap<u64, crate::fs::FileHandle>,
    _state: tempfile::TempDir,
}

fn world() -> World {
    let state = tempfile::tempdir().unwrap();
    let model = FileModel::open(
        Arc::new(MemoryBackend::new()),
        state.path(),
        &[ExportRoot {
            id: 0,
            prefix: String::new(),
        }],
    )
    .unwrap();
    let gens = Arc::new(Generations::new());
    model.observe_changes(gens.clone());
    let exports = Exports::new(vec![Export {
        id: 0,
        path: "/".into(),
        prefix: String::new(),
        clients: vec![Cidr::parse("127.0.0.0/8").unwrap()],
        access: Access::Rw,
        squash: Squash::None,
        anon_uid: 65534,
        anon_gid: 65534,
    }]);
    World {
        model,
        gens,
        cache: ReadCache::new(0, engine::mem::HugePolicy::Off).unwrap(),
        exports,
        handles: Default::default(),
        _state: state,
    }
}

impl World {
    fn root(&self) -> Node {
        self.model.root(0).unwrap()
    }

    fn dir(&self, parent: &Node, name: &str) -> Node {
        self.model
            .mkdir(parent, name.as_bytes(), &SetAttr::default(), ROOT)
            .unwrap()
    }

    fn file(&self, parent: &Node, name: &str) -> Node {
        self.model
            .create(
                parent,
                name.as_bytes(),
                &CreateMode::Unchecked(SetAttr::default()),
                ROOT,
            )
            .unwrap()
    }

    /// What a worker's GETATTR teaches the reactor: the stamp taken before it reads.
    fn cache(&mut self, n: &Node) {
        let stamp = self.gens.stamp(n.fileid);
        let attr = self.model.getattr(n).unwrap();
        let fh = self.model.handle(n);
        self.handles.insert(n.fileid, fh);
        let fill = Fill {
            fh: FhKey::new(fh.as_bytes()).unwrap(),
            export: 0,
            attr,
            stamp,
            data: None,
            exact: true,
        };
        self.cache.fill(&self.gens, fill, None);
        assert!(self.hits(n), "just cached");
    }

    /// Whether the reactor answers a GETATTR of `n` from its cache.
    fn hits(&mut self, n: &Node) -> bool {
        let fh = self.handles[&n.fileid];
        let cred = Cred::Sys(AuthSys::new(0, 0, &[]));
        let req = Request {
            fh: fh.as_bytes(),
            client: "127.0.0.1".parse().unwrap(),
            cred: &cred,
        };
        self.cache.attrs(&self.gens, &self.exports, &req).is_some()
    }
}

/// root/{a/{a1, a2}, b/{b1}}, every one cached.
fn tree(w: &mut World) -> [Node; 6] {
    let root = w.root();
    let a = w.dir(&root, "a");
    let b = w.dir(&root, "b");
    let a1 = w.file(&a, "a1");
    let a2 = w.file(&a, "a2");
    let b1 = w.file(&b, "b1");
    let all = [root, a, b, a1, a2, b1];
    for n in &all {
        w.cache(n);
    }
    all
}

#[test]
fn a_create_in_one_directory_leaves_other_files_cached() {
    let mut w = world();
    let [root, a, b, a1, a2, b1] = tree(&mut w);
    let new = w.file(&a, "new");
    assert!(!w.hits(&a), "the parent's mtime, ctime and size moved");
    w.cache(&new);
    for n in [&root, &b, &a1, &a2, &b1] {
        assert!(w.hits(n), "{} untouched by a create in a/", n.key);
    }
    // MKDIR, SYMLINK and MKNOD the same way.
    w.cache(&a);
    w.dir(&b, "sub");
    w.model
        .symlink(&b, b"ln", b"a1", &SetAttr::default(), ROOT)
        .unwrap();
    assert!(!w.hits(&b), "mkdir and symlink change b/");
    for n in [&root, &a, &a1, &a2, &b1, &new] {
        assert!(w.hits(n), "{} untouched by changes in b/", n.key);
    }
}

#[test]
fn a_remove_drops_its_parent_and_victim_only() {
    let mut w = world();
    let [root, a, b, a1, a2, b1] = tree(&mut w);
    w.model.remove(&a, b"a1").unwrap();
    assert!(!w.hits(&a), "parent");
    assert!(
        !w.hits(&a1),
        "the removed file: its handle must answer STALE"
    );
    for n in [&root, &b, &a2, &b1] {
        assert!(w.hits(n), "{} untouched by the remove", n.key);
    }
    // RMDIR: the removed directory and its parent.
    let sub = w.dir(&b, "sub");
    w.cache(&a);
    w.cache(&b);
    w.cache(&sub);
    w.model.rmdir(&b, b"sub").unwrap();
    assert!(!w.hits(&b) && !w.hits(&sub));
    for n in [&root, &a, &a2, &b1] {
        assert!(w.hits(n), "{} untouched by the rmdir", n.key);
    }
}

#[test]
fn a_rename_over_a_file_drops_both_parents_the_moved_and_the_replaced() {
    let mut w = world();
    let [root, a, b, a1, a2, b1] = tree(&mut w);
    let c = w.dir(&root, "c");
    let c1 = w.file(&c, "c1");
    w.cache(&root);
    w.cache(&c);
    w.cache(&c1);
    w.model.rename(&a, b"a1", &b, b"b1").unwrap();
    for n in [&a, &b, &a1, &b1] {
        assert!(!w.hits(n), "{} is touched by the rename", n.key);
    }
    for n in [&root, &a2, &c, &c1] {
        assert!(w.hits(n), "{} untouched by the rename", n.key);
    }
    // The moved file keeps its id (its handle works) and the old one is STALE.
    let moved = w.model.lookup(&b, b"b1").unwrap();
    assert_eq!(moved.fileid, a1.fileid);
    assert_eq!(
        w.model.resolve(w.handles[&b1.fileid].as_bytes()),
        Err(crate::fs::Status::Stale)
    );
}

#[test]
fn a_directory_rename_drops_its_descendants() {
    let mut w = world();
    let [root, a, b, a1, a2, b1] = tree(&mut w);
    w.model.rename(&root, b"a", &root, b"z").unwrap();
    // Same ids under new keys: every cached entry below the directory is dropped
    // (stores that rename by copying give the objects new times).
    for n in [&root, &a, &a1, &a2] {
        assert!(!w.hits(n), "{} is touched by the directory rename", n.key);
    }
    for n in [&b, &b1] {
        assert!(w.hits(n), "{} untouched by the directory rename", n.key);
    }
}

#[test]
fn a_truncating_create_of_an_existing_file_drops_it() {
    let mut w = world();
    let [root, a, b, a1, a2, b1] = tree(&mut w);
    w.model
        .write(&a1, 0, b"data", crate::fs::Stable::FileSync)
        .unwrap();
    w.cache(&a1);
    let again = w
        .model
        .create(
            &a,
            b"a1",
            &CreateMode::Unchecked(SetAttr {
                size: Some(0),
                ..SetAttr::default()
            }),
            ROOT,
        )
        .unwrap();
    assert_eq!(again.fileid, a1.fileid);
    assert!(!w.hits(&a1), "truncated: size and times moved");
    for n in [&root, &b, &a2, &b1] {
        assert!(w.hits(n), "{} untouched", n.key);
    }
}
