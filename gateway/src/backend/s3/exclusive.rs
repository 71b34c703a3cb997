//! Changes of one key that S3 makes in two requests, taking turns in this gateway.
//!
//! Exclusive creates on a store that does not refuse a taken key (`If-None-Match: *`
//! ignored, as Garage does: `probe_if_none_match`): the look (a HEAD) and the create
//! (a PUT) are two requests, so two creates of one key in flight together could both
//! find it absent and both succeed — two GUARDED or EXCLUSIVE CREATEs of one name both
//! answered NFS3_OK (RFC 1813 §3.3.8; an `O_EXCL` lock file taken twice).
//!
//! Renames (copy + delete, `backend::rename_by_copy`): two renames of one source
//! could both copy it before either deleted it, and both succeed — one name become
//! two, where POSIX gives the second ENOENT (a job claimed by renaming it, twice).
//!
//! Each holds a `Claim` on its key (the rename on its source) from its first request
//! to its last answer, so the second looks after the first is done. Between gateways
//! on one bucket both stay races (docs/s3.md); what needs atomicity across gateways —
//! the handle key, `[ha]`'s records — does not rely on this.

use std::collections::HashSet;
use std::sync::{Condvar, Mutex, MutexGuard};

/// Keys claimed by a create or rename in flight in this gateway.
/// Holds at most one key per call in flight (the backend workers bound them).
#[derive(Default)]
pub(super) struct Claims {
    held: Mutex<HashSet<String>>,
    freed: Condvar,
}

/// A key claimed until dropped.
pub(super) struct Claim<'a> {
    claims: &'a Claims,
    key: String,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Claims {
    /// Waits until no other call holds `key`, then holds it.
    pub fn claim(&self, key: &str) -> Claim<'_> {
        let mut held = lock(&self.held);
        while held.contains(key) {
            held = self.freed.wait(held).unwrap_or_else(|e| e.into_inner());
        }
        held.insert(key.to_string());
        Claim {
            claims: self,
            key: key.to_string(),
        }
    }

    #[cfg(test)]
    fn held(&self) -> usize {
        lock(&self.held).len()
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        lock(&self.claims.held).remove(&self.key);
        self.claims.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// One holder per key at a time; other keys never wait; nothing stays held.
    #[test]
    fn a_key_is_held_by_one_call_at_a_time() {
        let c = Claims::default();
        let inside = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    let _k = c.claim("d/f");
                    let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(n, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(2));
                    inside.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        assert_eq!(most.load(Ordering::SeqCst), 1);
        let a = c.claim("d/a");
        let _b = c.claim("d/b");
        assert_eq!(c.held(), 2);
        drop(a);
        drop(_b);
        assert_eq!(c.held(), 0);
    }
}
