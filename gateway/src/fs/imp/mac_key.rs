//! Which MAC key handles are made with, and how a gateway gets it when its store is
//! down at start.
//!
//! A local store (`fs`, `memory`) uses `state.dir/handle.key` (`handles::load_mac_key`).
//! A shared store uses the key every gateway on it agrees on (s3:
//! `backend::s3::handlekey`; `fs` with `backend.shared`: `backend::fs::shared`), which
//! needs the store. So that a gateway restarted while
//! its store is unreachable still starts — and answers JUKEBOX / NFS4ERR_DELAY until the
//! store is back, as it does for a store lost while serving — it remembers the agreed key
//! in `state.dir/shared-handle.key` (mode 0600) after every agreement:
//!
//! - store reachable: agree (or read) the key, remember it, serve;
//! - store unreachable, a key remembered: serve with it at once (the log says so) and
//!   check it against the bucket's in the background once the store answers: a bucket
//!   whose key changed (wiped and recreated) is logged as an error, since this gateway's
//!   handles then disagree with its peers' until it restarts;
//! - store unreachable, nothing remembered (the first start): wait, retrying every
//!   `RETRY`, logging every `LOG_EVERY` and telling systemd it is still starting
//!   (`EXTEND_TIMEOUT_USEC`, so `TimeoutStartSec` does not kill the wait), because a
//!   handle made under a key of its own would be BADHANDLE at every other gateway.
//!
//! A store that refuses for good (credentials, missing bucket: `Permanent`) stops
//! start-up with the store's message, as before.

use crate::backend::{Backend, BackendError};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The remembered key's file name in `state.dir`.
pub(super) const REMEMBERED: &str = "shared-handle.key";
/// Wait between two attempts to reach the store at start.
const RETRY: Duration = Duration::from_secs(2);
/// How often the wait says so in the log.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// The handle MAC key for `backend`, as the module comment says.
pub(super) fn obtain(backend: &Arc<dyn Backend>, state_dir: &Path) -> anyhow::Result<[u8; 32]> {
    let Some(shared) = backend.shared() else {
        return super::handles::load_mac_key(state_dir);
    };
    let remembered = read_remembered(state_dir);
    let t0 = Instant::now();
    let mut logged: Option<Instant> = None;
    loop {
        match shared.mac_key() {
            Ok(k) => {
                if remembered.is_some_and(|r| r != k) {
                    tracing::warn!(
                        "the bucket's handle key differs from the one remembered in {}/{REMEMBERED} (the bucket was replaced?): handles issued before are now invalid",
                        state_dir.display()
                    );
                }
                if remembered != Some(k) {
                    remember(state_dir, &k)?;
                }
                return Ok(k);
            }
            Err(BackendError::Retryable(e)) => {
                if let Some(k) = remembered {
                    tracing::warn!(error = %e, "store unreachable at start: serving with the handle key remembered from an earlier start ({}/{REMEMBERED}); calls answer JUKEBOX/NFS4ERR_DELAY until the store answers", state_dir.display());
                    verify_later(backend.clone(), k);
                    return Ok(k);
                }
                if logged.is_none_or(|l| l.elapsed() >= LOG_EVERY) {
                    tracing::warn!(error = %e, waited_s = t0.elapsed().as_secs(), "store unreachable at first start: waiting for it to agree on the shared handle key (nothing remembered in state.dir yet); not serving until then");
                    logged = Some(Instant::now());
                }
                still_starting(t0);
                std::thread::sleep(RETRY);
            }
            Err(e) => {
                anyhow::bail!("backend: cannot read or create the shared handle key: {e}")
            }
        }
    }
}

/// On a shared `fs` store: the key of `state.dir/handle.key`, which this gateway made
/// its version-1 handles with before `backend.shared` was switched on, so that they
/// still resolve here (never created here; other gateways answer BADHANDLE for them).
/// `None` elsewhere: an s3 gateway never made version-1 handles of its bucket.
pub(super) fn earlier_local(backend: &Arc<dyn Backend>, state_dir: &Path) -> Option<[u8; 32]> {
    let path = state_dir.join("handle.key");
    if backend.name() != "fs" || !path.exists() {
        return None;
    }
    match super::handles::load_mac_key(state_dir) {
        Ok(k) => {
            tracing::warn!(
                "backend.shared: file handles this gateway gave out before it was switched on (version 1, {}) stay valid here, but only here: other gateways on the directory answer NFS3ERR_BADHANDLE / NFS4ERR_BADHANDLE for them, so a client that moves to another gateway must mount again",
                path.display()
            );
            Some(k)
        }
        Err(e) => {
            tracing::warn!(error = %e, "backend.shared: the earlier handle key cannot be read; handles given out before are NFS3ERR_BADHANDLE");
            None
        }
    }
}

/// The key remembered by an earlier start, if its file holds one.
fn read_remembered(state_dir: &Path) -> Option<[u8; 32]> {
    let path = state_dir.join(REMEMBERED);
    match std::fs::read(&path) {
        Ok(b) => match <[u8; 32]>::try_from(b.as_slice()) {
            Ok(k) => Some(k),
            Err(_) => {
                tracing::warn!(
                    "{}: expected 32 bytes, found {}; ignored (the key is read from the bucket)",
                    path.display(),
                    b.len()
                );
                None
            }
        },
        Err(_) => None,
    }
}

/// Writes the key durably (temp file, fsync, rename, fsync of the directory).
fn remember(state_dir: &Path, key: &[u8; 32]) -> anyhow::Result<()> {
    use anyhow::Context;
    let path = state_dir.join(REMEMBERED);
    let tmp = state_dir.join(format!("{REMEMBERED}.tmp"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(key)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, &path).with_context(|| format!("replacing {}", path.display()))?;
    std::fs::File::open(state_dir)?.sync_all()?;
    Ok(())
}

/// Tells systemd (when it listens) that start-up goes on, so `TimeoutStartSec` does not
/// end the wait for the store.
fn still_starting(t0: Instant) {
    let n = crate::sdnotify::Notifier::from_env();
    n.notify(&format!(
        "EXTEND_TIMEOUT_USEC={}\nSTATUS=waiting for the store (shared handle key), {} s",
        (RETRY * 5).as_micros(),
        t0.elapsed().as_secs()
    ));
}

/// Once the store answers, compares its key with the one this gateway serves with.
fn verify_later(backend: Arc<dyn Backend>, serving: [u8; 32]) {
    let spawned = std::thread::Builder::new()
        .name("handle-key-check".into())
        .spawn(move || loop {
            std::thread::sleep(RETRY);
            let Some(shared) = backend.shared() else {
                return;
            };
            match shared.mac_key() {
                Ok(k) if k == serving => {
                    tracing::info!("store reachable again: the bucket's handle key is the one this gateway serves with");
                    return;
                }
                Ok(_) => {
                    tracing::error!("the bucket's handle key is not the one this gateway remembered and serves with (the bucket was replaced?): its handles are BADHANDLE at other gateways; restart it to adopt the bucket's key");
                    return;
                }
                Err(BackendError::Retryable(_)) => continue,
                Err(e) => {
                    tracing::error!(error = %e, "checking the bucket's handle key failed");
                    return;
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the handle key check");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remembered_key_reads_back_and_a_torn_one_is_ignored() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(read_remembered(d.path()), None);
        let k = [7u8; 32];
        remember(d.path(), &k).unwrap();
        assert_eq!(read_remembered(d.path()), Some(k));
        std::fs::write(d.path().join(REMEMBERED), [1u8; 5]).unwrap();
        assert_eq!(read_remembered(d.path()), None);
    }
}
