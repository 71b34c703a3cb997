//! Delete on last close (RFC 8881 §18.25, §18.26; `fs::imp::orphans`): the file
//! model asks the NFSv4 open table whether a file it is about to delete is open, and
//! the open table tells the model when a file's last open goes, so a file removed or
//! renamed over while open is deleted then.
//!
//! Both directions hold a `Weak` to the server's shared state (the model and the open
//! table live in it): no cycle, and nothing happens once the server is gone.
//!
//! Files a previous run kept for their opens stay through the grace period (their
//! opens may be reclaimed: OPEN4_RESULT_PRESERVE_UNLINKED, RFC 8881 §18.16.4); a
//! thread waits for its end, then has the model delete those no open holds.

use super::Shared;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How often the grace watcher asks whether the grace period is over.
const GRACE_POLL: Duration = Duration::from_millis(500);

struct OpenQuery(Weak<Shared>);

impl crate::fs::OpenFiles for OpenQuery {
    fn is_open(&self, fileid: u64) -> bool {
        self.0
            .upgrade()
            .is_some_and(|s| s.state.opens.is_open(fileid))
    }
}

/// Connects `shared.model` and `shared.state.opens` (once, at start).
pub(super) fn wire(shared: &Arc<Shared>) {
    shared
        .model
        .track_opens(Arc::new(OpenQuery(Arc::downgrade(shared))));
    let w = Arc::downgrade(shared);
    shared.state.opens.on_last_close(Arc::new(move |fileid| {
        if let Some(s) = w.upgrade() {
            s.model.release(fileid);
        }
    }));
    let w = Arc::downgrade(shared);
    let spawned = std::thread::Builder::new()
        .name("orphan-grace".into())
        .spawn(move || after_grace(&w));
    if let Err(e) = spawned {
        // Without it the kept orphans wait for the next start (module doc).
        tracing::warn!(error = %e, "cannot start the orphan grace watcher");
    }
}

/// Waits for the grace period's end (or the server's), then releases the orphans no
/// open holds.
fn after_grace(w: &Weak<Shared>) {
    loop {
        let Some(s) = w.upgrade() else { return };
        if !s.state.clients.in_grace() {
            let n = s.model.release_unopened_orphans();
            if n > 0 {
                tracing::info!(
                    deleted = n,
                    "grace period over: deleted orphans no open reclaimed"
                );
            }
            return;
        }
        drop(s);
        std::thread::sleep(GRACE_POLL);
    }
}
