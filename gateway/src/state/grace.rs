//! Persistence of the client records that may reclaim after a restart (RFC 8881
//! §8.4.2.1: the server must know which clients held state before it restarted).
//!
//! The file `nfs4-clients` in the state directory holds one hex-encoded client owner
//! per line; it is rewritten atomically (temporary file, fsync, rename) whenever the
//! set of confirmed clients changes. Writers serialise on their own mutex and take a
//! fresh snapshot after acquiring it, so the last write always reflects the latest set.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Most owners loaded from the file (a corrupt or foreign file cannot grow memory).
const MAX_LOADED: usize = 100_000;
/// Longest client owner (RFC 8881 NFS4_OPAQUE_LIMIT).
const MAX_OWNER: usize = 1024;

pub struct Persist {
    path: PathBuf,
    write: Mutex<()>,
}

impl Persist {
    pub fn new(dir: &Path) -> Persist {
        Persist {
            path: dir.join("nfs4-clients"),
            write: Mutex::new(()),
        }
    }

    /// The owners recorded by the previous run (empty when there is no file; bad
    /// lines are skipped).
    pub fn load(&self) -> HashSet<Vec<u8>> {
        let Ok(text) = std::fs::read_to_string(&self.path) else {
            return HashSet::new();
        };
        text.lines()
            .filter_map(unhex)
            .filter(|o| !o.is_empty() && o.len() <= MAX_OWNER)
            .take(MAX_LOADED)
            .collect()
    }

    /// Rewrites the file with the owners `snapshot` returns (called with the write
    /// lock held, so concurrent saves cannot reorder).
    pub fn save(&self, snapshot: impl FnOnce() -> Vec<Vec<u8>>) {
        let _w = self.write.lock().unwrap_or_else(|e| e.into_inner());
        let owners = snapshot();
        let mut text = String::new();
        for o in owners {
            for b in o {
                text.push_str(&format!("{b:02x}"));
            }
            text.push('\n');
        }
        if let Err(e) = write_atomic(&self.path, text.as_bytes()) {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot record NFSv4.1 clients");
        }
    }
}

fn write_atomic(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

fn unhex(line: &str) -> Option<Vec<u8>> {
    let s = line.trim().as_bytes();
    if !s.len().is_multiple_of(2) {
        return None;
    }
    s.chunks(2)
        .map(|p| {
            let h = (p[0] as char).to_digit(16)?;
            let l = (p[1] as char).to_digit(16)?;
            Some((h * 16 + l) as u8)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_garbage_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = Persist::new(dir.path());
        assert!(p.load().is_empty());
        p.save(|| vec![b"abc".to_vec(), vec![0, 255]]);
        let got = p.load();
        assert!(got.contains(b"abc".as_slice()) && got.contains(&vec![0, 255]));
        std::fs::write(dir.path().join("nfs4-clients"), "zz\n616\n61\n").unwrap();
        let got = p.load();
        assert_eq!(got.len(), 1);
        assert!(got.contains(b"a".as_slice()));
    }
}
