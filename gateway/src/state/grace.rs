//! Persistence of the client records that may reclaim after a restart (RFC 8881
//! §8.4.2.1: the server must know which clients held state before it restarted).
//!
//! The file `nfs4-clients` in the state directory holds one hex-encoded client owner
//! per line; it is rewritten atomically (temporary file, fsync, rename) whenever the
//! set of confirmed clients changes. The default `recovery::Records` (without `[ha]`,
//! whose record lives in the store: `crate::ha::record`). Writers serialise in the
//! client table (`Clients::save`), which takes a fresh snapshot under that lock.

use super::recovery::{RecordError, Records};
use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Most owners loaded from the file (a corrupt or foreign file cannot grow memory).
const MAX_LOADED: usize = 100_000;
/// Longest client owner (RFC 8881 NFS4_OPAQUE_LIMIT).
const MAX_OWNER: usize = 1024;

pub struct Persist {
    path: PathBuf,
}

impl Persist {
    pub fn new(dir: &Path) -> Persist {
        Persist {
            path: dir.join("nfs4-clients"),
        }
    }
}

impl Records for Persist {
    /// The owners recorded by the previous run (empty when there is no file; bad
    /// lines are skipped: the local file predates the torn-record rule of `[ha]`).
    fn load(&self) -> Result<HashSet<Vec<u8>>, RecordError> {
        let Ok(text) = std::fs::read_to_string(&self.path) else {
            return Ok(HashSet::new());
        };
        Ok(text
            .lines()
            .filter_map(unhex)
            .filter(|o| !o.is_empty() && o.len() <= MAX_OWNER)
            .take(MAX_LOADED)
            .collect())
    }

    fn save(&self, owners: &[Vec<u8>]) -> Result<(), RecordError> {
        let mut text = String::new();
        for o in owners {
            text.push_str(&hex(o));
            text.push('\n');
        }
        write_atomic(&self.path, text.as_bytes())
            .map_err(|e| RecordError::Store(format!("{}: {e}", self.path.display())))
    }
}

/// `b` as lowercase hex digits.
pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
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

pub(crate) fn unhex(line: &str) -> Option<Vec<u8>> {
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
        assert!(p.load().unwrap().is_empty());
        p.save(&[b"abc".to_vec(), vec![0, 255]]).unwrap();
        let got = p.load().unwrap();
        assert!(got.contains(b"abc".as_slice()) && got.contains(&vec![0, 255]));
        std::fs::write(dir.path().join("nfs4-clients"), "zz\n616\n61\n").unwrap();
        let got = p.load().unwrap();
        assert_eq!(got.len(), 1);
        assert!(got.contains(b"a".as_slice()));
    }
}
