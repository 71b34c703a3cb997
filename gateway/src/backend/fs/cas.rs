//! `Cas` on a shared directory (`backend.shared = true`; docs/ha.md "Fencing"): each
//! object is a directory `cas/<name>/` under the shared state's directory, each version
//! a file named by its generation (16 hex digits), written whole under a temporary name
//! and given its name with link(2) (`shared::link_new`), which fails with EEXIST when
//! another writer made that generation first: atomic on a local file system and on NFS.
//!
//! - create: link generation 1. Generation 1 is never removed, so a create after any
//!   number of versions still fails.
//! - replace version g: link generation g + 1, then check that no generation above
//!   g + 1 exists and that g does. Old generations are pruned (all but 1 and the newest `KEEP`), so a
//!   stale writer may find g + 1 free again; but pruning g + 1 needs a newest
//!   generation of at least g + 1 + `KEEP`, which never goes away, so the check after
//!   the link sees it and the stale write is refused (its file removed: readers take
//!   the highest generation, which is not it).

use super::shared::{io_err, link_new, make_dir, Shared};
use super::*;

const DIR: &str = "cas";
/// Newest generations kept besides generation 1.
const KEEP: u64 = 3;
/// Reads retried when the version listed was pruned before it was read.
const READ_TRIES: usize = 5;

impl Shared {
    /// The directory of object `name` ('/' in names becomes '~': one level per object).
    fn cas_dir(&self, name: &str) -> BResult<PathBuf> {
        let ok = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_./".contains(&b))
            && !name.contains("..");
        if !ok {
            return Err(BackendError::Permanent(format!(
                "invalid cas name {name:?}"
            )));
        }
        Ok(self.dir.join(DIR).join(name.replace('/', "~")))
    }
}

/// The generations present in `dir`, ascending (none when it does not exist).
fn generations(dir: &Path) -> io::Result<Vec<u64>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut g: Vec<u64> = rd
        .flatten()
        .filter_map(|e| {
            let n = e.file_name();
            let n = n.to_str()?;
            (n.len() == 16).then(|| u64::from_str_radix(n, 16).ok())?
        })
        .collect();
    g.sort_unstable();
    Ok(g)
}

fn gen_path(dir: &Path, g: u64) -> PathBuf {
    dir.join(format!("{g:016x}"))
}

impl Cas for Shared {
    fn cas_get(&self, name: &str) -> BResult<Option<(Vec<u8>, String)>> {
        let dir = self.cas_dir(name)?;
        for _ in 0..READ_TRIES {
            let Some(&g) = generations(&dir)
                .map_err(|e| io_err(e, "cas", &dir))?
                .last()
            else {
                return Ok(None);
            };
            match std::fs::read(gen_path(&dir, g)) {
                Ok(b) => return Ok(Some((b, g.to_string()))),
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err(e, "cas", &dir)),
            }
        }
        Err(BackendError::Retryable(format!(
            "{name}: versions pruned faster than read"
        )))
    }

    fn cas_put(&self, name: &str, data: &[u8], expect: Option<&str>) -> BResult<String> {
        let dir = self.cas_dir(name)?;
        let err = |e| io_err(e, "cas", &dir);
        make_dir(&self.dir.join(DIR)).map_err(err)?;
        make_dir(&dir).map_err(err)?;
        let next = match expect {
            None => 1,
            Some(v) => v
                .parse::<u64>()
                .ok()
                .and_then(|g| g.checked_add(1))
                .ok_or(BackendError::AlreadyExists)?,
        };
        let path = gen_path(&dir, next);
        if !link_new(&self.dir, &path, data).map_err(err)? {
            return Err(BackendError::AlreadyExists);
        }
        let gens = generations(&dir).map_err(err)?;
        // Ours is the newest, and the version we replaced is there (a version that
        // never existed, or one pruned, which needs a newer one: refused).
        let newest = gens.last().is_some_and(|&top| top == next);
        if !newest || (next > 1 && !gens.contains(&(next - 1))) {
            let _ = std::fs::remove_file(&path);
            return Err(BackendError::AlreadyExists);
        }
        for &g in gens.iter().filter(|&&g| g > 1 && g + KEEP <= next) {
            let _ = std::fs::remove_file(gen_path(&dir, g));
        }
        Ok(next.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared_fs() -> (tempfile::TempDir, FsBackend) {
        let d = tempfile::tempdir().unwrap();
        let b = FsBackend::open_with(&d.path().join("objects"), true).unwrap();
        (d, b)
    }

    #[test]
    fn conformance_and_only_when_shared() {
        let (_d, b) = shared_fs();
        crate::backend::conformance::cas(b.cas().unwrap());
        let d = tempfile::tempdir().unwrap();
        assert!(FsBackend::open(d.path()).unwrap().cas().is_none());
    }

    /// Two gateways on one directory replacing the same version: exactly one wins,
    /// whatever the interleaving; a stale writer whose generation was pruned is
    /// refused (the check after the link).
    #[test]
    fn one_winner_and_stale_writers_refused() {
        let (d, b) = shared_fs();
        let b2 = FsBackend::open_with(&d.path().join("objects"), true).unwrap();
        let v0 = b.cas().unwrap().cas_put("ha/i/lease", b"0", None).unwrap();
        for round in 0..20 {
            let (c1, c2) = (b.cas().unwrap(), b2.cas().unwrap());
            let v = c1.cas_get("ha/i/lease").unwrap().unwrap().1;
            let (r1, r2) = std::thread::scope(|s| {
                let h = s.spawn(|| c2.cas_put("ha/i/lease", b"two", Some(&v)));
                (
                    c1.cas_put("ha/i/lease", b"one", Some(&v)),
                    h.join().unwrap(),
                )
            });
            assert!(r1.is_ok() != r2.is_ok(), "round {round}: {r1:?} {r2:?}");
        }
        // v0's successor generation was pruned long ago: still refused.
        let c = b.cas().unwrap();
        assert_eq!(
            c.cas_put("ha/i/lease", b"late", Some(&v0)),
            Err(BackendError::AlreadyExists)
        );
        let dir = b.shared.as_ref().unwrap().cas_dir("ha/i/lease").unwrap();
        assert!(generations(&dir).unwrap().len() <= 1 + KEEP as usize);
        assert!(c.cas_get("../x").is_err());
    }
}
