//! Delete on last close (RFC 8881 §18.25, §18.26; `fs::imp::orphans`): the file
//! model asks the NFSv4 open table whether a file it is about to delete is open, and
//! the open table tells the model when a file's last open goes, so a file removed or
//! renamed over while open is deleted then.
//!
//! Both directions hold a `Weak` to the server's shared state (the model and the open
//! table live in it): no cycle, and nothing happens once the server is gone.

use super::Shared;
use std::sync::{Arc, Weak};

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
}
