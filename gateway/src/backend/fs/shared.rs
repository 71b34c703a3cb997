//! `backend.shared = true`: the `fs` backend as a store several gateways serve at once
//! (one directory on NFS or CephFS that every gateway mounts, or a local directory two
//! gateways on one host point at), so that every gateway accepts every other one's file
//! handles, as on s3 (`SharedState`, docs/architecture.md §10).
//!
//! What the gateways share lives in the directory itself, under [`DIR`] — a
//! [`TEMP_PREFIX`] name, so never listed, never a valid key (`check_key`), and no client
//! can look it up, create it or read it:
//!
//! - `handle.key`: the store-wide handle MAC key, 32 bytes, mode 0600, made by whichever
//!   gateway starts first;
//! - `cas/<name>/<generation>`: the versions of a `Cas` object (`[ha]`'s identity
//!   lease and recovery record, `cas.rs`);
//! - `ids/<fileid as 16 hex digits>`: the key of a file whose handle is too short to
//!   carry it (`SharedState::put_id`), first writer wins (ids derive from keys: every
//!   gateway writes the same key for an id; `resolve_shared` re-derives the id from the
//!   key it reads and answers STALE on a mismatch, never another file).
//!
//! Race-free creation: a file is written whole under a name of its own (`tmp.<random>`,
//! O_EXCL), fsynced, then given its final name with link(2), which fails with EEXIST when
//! another gateway got there first. No reader ever sees a partial file, and of gateways
//! starting at once each ends with the one key linked first. link(2) rather than an
//! O_EXCL create of the final name (visible empty before it is written) or rename(2)
//! (which replaces): it is the creation primitive that stays atomic on NFS. The directory
//! is fsynced after the link — and again by a gateway that finds the key, whose creator
//! may have died before its own fsync — so the key is durable before any handle made
//! with it is given out.
//!
//! Temporaries all live in [`DIR`] itself (an id is linked across into `ids/`), so the
//! leftovers of a gateway killed mid-write are found without listing `ids/`: each start
//! removes those older than [`TMP_STALE`].

use super::*;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};

/// The shared state's directory under the store root.
pub(super) const DIR: &str = ".nfsgw-tmp.shared";
const KEY: &str = "handle.key";
const IDS: &str = "ids";
/// A temporary this old is a killed writer's (a live one links within milliseconds).
const TMP_STALE: Duration = Duration::from_secs(600);
/// Longest key an id file holds (PATH_MAX); a longer file is not the gateway's.
const KEY_MAX: u64 = 4096;

/// The shared state of one store root, opened (and the key made or read) at start.
pub(super) struct Shared {
    pub(super) dir: PathBuf,
    key: [u8; 32],
}

/// Whether `root` holds a shared handle key (a gateway serves it with `shared = true`).
pub(super) fn present(root: &Path) -> bool {
    root.join(DIR).join(KEY).exists()
}

impl Shared {
    /// Opens `root`'s shared state, creating the directory and the key if this is the
    /// first gateway: see the module doc.
    pub(super) fn open(root: &Path) -> anyhow::Result<Shared> {
        use anyhow::Context;
        let dir = root.join(DIR);
        let ids = dir.join(IDS);
        for d in [&dir, &ids] {
            make_dir(d)
                .with_context(|| format!("backend.shared: cannot create {}", d.display()))?;
        }
        sweep(&dir);
        let key = obtain_key(&dir)
            .with_context(|| format!("backend.shared: the handle key in {}", dir.display()))?;
        Ok(Shared { dir, key })
    }

    fn id_path(&self, fileid: u64) -> PathBuf {
        self.dir.join(IDS).join(format!("{fileid:016x}"))
    }
}

/// Creates directory `d` if missing (another gateway may do it at the same moment),
/// refusing anything else at that name; a new one is made durable in its parent.
pub(super) fn make_dir(d: &Path) -> io::Result<()> {
    match std::fs::create_dir(d) {
        Ok(()) => {
            std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
            fsync_dir(d.parent().expect("a parent"))
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            // Not followed: a symlink planted there is refused, not used.
            if std::fs::symlink_metadata(d)?.is_dir() {
                Ok(())
            } else {
                Err(io::Error::other("exists and is not a directory"))
            }
        }
        Err(e) => Err(e),
    }
}

fn fsync_dir(d: &Path) -> io::Result<()> {
    File::open(d)?.sync_all()
}

/// The key in `dir`, made by this gateway when no other one has yet.
fn obtain_key(dir: &Path) -> anyhow::Result<[u8; 32]> {
    let path = dir.join(KEY);
    if let Some(k) = read_key(&path)? {
        return Ok(k);
    }
    let mine: [u8; 32] = rand::random();
    if !link_new(dir, &path, &mine)? {
        tracing::info!(
            "backend.shared: another gateway made the shared handle key first; adopting it"
        );
    }
    read_key(&path)?.ok_or_else(|| anyhow::anyhow!("{}: vanished after creation", path.display()))
}

/// The key at `path`, made durable here too (see the module doc); `None` when absent.
fn read_key(path: &Path) -> anyhow::Result<Option<[u8; 32]>> {
    let b = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let k = <[u8; 32]>::try_from(b.as_slice()).map_err(|_| {
        anyhow::anyhow!(
            "{}: expected 32 bytes, found {}; restore it (or delete it: every handle any gateway on this directory gave out becomes invalid)",
            path.display(),
            b.len()
        )
    })?;
    fsync_dir(path.parent().expect("a parent"))?;
    Ok(Some(k))
}

/// Writes `data` whole and durable under a temporary name in `tmp_dir`, then links it
/// at `path` (same file system). `Ok(false)`: `path` already existed (another writer
/// won); `path`'s directory is fsynced after a link of ours.
pub(super) fn link_new(tmp_dir: &Path, path: &Path, data: &[u8]) -> io::Result<bool> {
    let tmp = tmp_dir.join(format!("tmp.{:016x}", rand::random::<u64>()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    let linked = (|| {
        f.write_all(data)?;
        f.sync_all()?;
        match std::fs::hard_link(&tmp, path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        }
    })();
    // Best effort: a leftover is swept at a later start.
    let _ = std::fs::remove_file(&tmp);
    if linked? {
        fsync_dir(path.parent().expect("a parent"))?;
        return Ok(true);
    }
    Ok(false)
}

/// Removes the temporaries of writers killed mid-way (older than [`TMP_STALE`]).
fn sweep(dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let now = std::time::SystemTime::now();
    for e in rd.flatten() {
        let stale = e.file_name().as_encoded_bytes().starts_with(b"tmp.")
            && e.metadata().is_ok_and(|m| {
                m.is_file()
                    && std::time::UNIX_EPOCH
                        .checked_add(Duration::from_secs(m.mtime().max(0) as u64))
                        .and_then(|t| now.duration_since(t).ok())
                        .is_some_and(|age| age > TMP_STALE)
            });
        if stale {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

pub(super) fn io_err(e: io::Error, what: &str, path: &Path) -> BackendError {
    map_io(e, what, &path.display().to_string())
}

impl SharedState for Shared {
    fn mac_key(&self) -> BResult<[u8; 32]> {
        Ok(self.key)
    }

    fn put_id(&self, fileid: u64, key: &str) -> BResult<()> {
        let path = self.id_path(fileid);
        if path.exists() {
            return Ok(());
        }
        link_new(&self.dir, &path, key.as_bytes())
            .map(|_| ())
            .map_err(|e| io_err(e, "id index", &path))
    }

    fn get_id(&self, fileid: u64) -> BResult<String> {
        let path = self.id_path(fileid);
        let f = File::open(&path).map_err(|e| io_err(e, "id index", &path))?;
        let mut buf = Vec::new();
        f.take(KEY_MAX + 1)
            .read_to_end(&mut buf)
            .map_err(|e| io_err(e, "id index", &path))?;
        if buf.len() as u64 > KEY_MAX {
            return Err(BackendError::Permanent(format!(
                "{}: too long",
                path.display()
            )));
        }
        String::from_utf8(buf)
            .map_err(|_| BackendError::Permanent(format!("{}: not UTF-8", path.display())))
    }
}
