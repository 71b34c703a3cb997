//! Layouts after a metadata server restart (RFC 8881 §12.7.4, §18.42.3, §18.43.3).
//! Layouts are not kept across restarts, so during the grace period LAYOUTGET is
//! NFS4ERR_GRACE (§18.43.3: a server that does not persist layouts must), and a client
//! whose writes through a data server were not yet LAYOUTCOMMITted before the restart
//! commits them with loca_reclaim set (§18.42.3), under the layout stateid the previous
//! run gave it. The server must tell such a stateid from a forged one and from one of
//! another file: a layout stateid's `other` carries, after the boot verifier and kind
//! byte, a 24-bit number and a 32-bit keyed MAC of (client owner, file id, the first
//! eight bytes) under a key kept in `state.dir` (`pnfs-layout.key`), which survives the
//! restart; the client owner (co_ownerid) is the one thing of the client that does.
//! A reclaim whose stateid does not verify is NFS4ERR_RECLAIM_BAD; the MAC cannot say
//! whether the layout was RW, so the change is still the file model's SETATTR under the
//! caller's credentials. Under `[ha]` the key is the identity's, not a host's: it
//! lives in the store next to the recovery record (`ha/<identity>/layout-key`,
//! `crate::ha::layout_key`), and a gateway that takes the identity over reads it
//! before it serves, so the previous holder's layout stateids verify there too.

use super::{LayoutFile, Layouts, Table};
use crate::state::opens::stateids::{self, Kind};
use crate::state::stateid::Stateid;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

/// The file of the MAC key in `state.dir`.
const KEY_FILE: &str = "pnfs-layout.key";

/// A digest of a client owner (co_ownerid), what a layout stateid is bound to.
pub fn owner_digest(owner: &[u8]) -> u64 {
    let h = blake3::hash(owner);
    u64::from_le_bytes(h.as_bytes()[..8].try_into().expect("8 bytes"))
}

/// The layout stateid key of `dir` (made and written on first use, 0600); `None`
/// when it can be neither read nor written (layout stateids then carry no MAC and
/// no reclaim verifies).
pub fn load_key(dir: &Path) -> Option<[u8; 32]> {
    let path = dir.join(KEY_FILE);
    if let Ok(b) = std::fs::read(&path) {
        if let Ok(k) = <[u8; 32]>::try_from(b.as_slice()) {
            return Some(k);
        }
    }
    let k: [u8; 32] = rand::random();
    let tmp = path.with_extension("tmp");
    let write = || -> std::io::Result<()> {
        use std::io::Write;
        let mut o = std::fs::OpenOptions::new();
        o.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
        let mut f = o.open(&tmp)?;
        f.write_all(&k)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    };
    match write() {
        Ok(()) => Some(k),
        Err(e) => {
            tracing::warn!(error = %e, path = %path.display(), "pNFS: no layout stateid key; layouts cannot be reclaimed after a restart");
            None
        }
    }
}

fn mac(key: &[u8; 32], owner: u64, fileid: u64, head: &[u8]) -> [u8; 4] {
    let mut h = blake3::Hasher::new_keyed(key);
    h.update(b"nfsgw pnfs layout stateid");
    h.update(&owner.to_le_bytes());
    h.update(&fileid.to_le_bytes());
    h.update(head);
    let mut m = [0u8; 4];
    m.copy_from_slice(&h.finalize().as_bytes()[..4]);
    m
}

impl Layouts {
    /// Layout stateids carry a MAC under `key` from now on (`None`: they do not).
    /// `&self`: a takeover sets the identity's key on a table already serving
    /// (`crate::ha`), before its fence opens.
    pub fn set_key(&self, key: Option<[u8; 32]>) {
        *self.key.write().unwrap_or_else(|e| e.into_inner()) = key;
    }

    pub(super) fn key(&self) -> Option<[u8; 32]> {
        *self.key.read().unwrap_or_else(|e| e.into_inner())
    }

    /// A fresh layout stateid `other` for `f` not in use in `t`.
    pub(super) fn mint(&self, t: &Table, f: LayoutFile) -> [u8; 12] {
        static NEXT: AtomicU32 = AtomicU32::new(1);
        let Some(key) = self.key() else {
            return stateids::fresh_other(stateids::boot_verifier(), Kind::Layout);
        };
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let mut o = [0u8; 12];
            o[..4].copy_from_slice(&stateids::boot_verifier().to_be_bytes());
            o[4] = Kind::Layout as u8;
            o[5..8].copy_from_slice(&n.to_be_bytes()[1..]);
            let m = mac(&key, f.owner, f.fileid, &o[..8]);
            o[8..].copy_from_slice(&m);
            if !t.by_other.contains_key(&o) {
                return o;
            }
        }
    }

    /// Whether `s` is a layout stateid this server (this run or an earlier one) gave
    /// the client of owner digest `f.owner` for `f.fileid`, and is not a layout held
    /// now (a reclaim is of a layout the restart lost).
    pub fn reclaimable(&self, f: LayoutFile, s: &Stateid) -> bool {
        let Some(key) = self.key() else {
            return false;
        };
        Kind::of(&s.other) == Some(Kind::Layout)
            && mac(&key, f.owner, f.fileid, &s.other[..8]) == s.other[8..]
            && !self.lock().by_other.contains_key(&s.other)
    }
}
