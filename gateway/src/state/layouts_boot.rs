//! A metadata server's start, or an `[ha]` takeover, in the layout table (issue 27;
//! RFC 8881 §12.7.4, RFC 8435 §2.2). Layouts are not kept across either, so the
//! table knows nothing of what a client of the previous run holds: the store's boot
//! epoch moves (`crate::fence::Fence::bump_boot`), which kills every synthetic id
//! issued before at every data server within `Fence::window`, and until then every
//! file counts as possibly laid out: a truncate, REMOVE, RENAME over a file or SETATTR
//! of its size waits (NFS4ERR_DELAY / NFS3ERR_JUKEBOX, as after a file's own fence in
//! `break_conflicts`), and LAYOUTGET is NFS4ERR_LAYOUTTRYLATER (a data server that
//! read the old boot epoch would refuse the new ids meanwhile). When the previous boot
//! granted no layout (the store says so), nothing waits. A store that refuses the move
//! keeps the gate shut; each conflicting call tries it again.

use super::Layouts;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// The restart gate: open (the fast path, one atomic load) or shut until the boot
/// epoch moved and the window after it ran out.
#[derive(Default)]
pub(super) struct BootGate {
    shut: AtomicBool,
    /// `None`: the boot epoch has not moved yet; else when the gate opens.
    until: Mutex<Option<Instant>>,
}

impl Layouts {
    /// At a metadata server's start (or an `[ha]` takeover, before its fence opens):
    /// shuts the gate and moves the boot epoch. False when the store refused (logged;
    /// the gate stays shut and the move is tried again by the next conflicting call
    /// or LAYOUTGET). Nothing to do without pNFS or fencing.
    pub fn restart_fence(&self) -> bool {
        if self.devices().is_none() || self.fence().is_none() {
            return true;
        }
        {
            // Under the lock `boot_open` opens the gate under: an opening decided
            // before this restart cannot land after it.
            let mut until = self.gate_until();
            *until = None;
            self.boot.shut.store(true, Ordering::Release);
        }
        let moved = self.boot_moved();
        // Nothing to wait for (no layout at the previous boot): open at once.
        self.boot_open();
        moved
    }

    fn gate_until(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.boot.until.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Moves the boot epoch when it has not moved yet; whether it has.
    fn boot_moved(&self) -> bool {
        let mut until = self.gate_until();
        if until.is_some() {
            return true;
        }
        let Some(f) = self.fence() else {
            return true;
        };
        match f.bump_boot() {
            Ok((epoch, used)) => {
                // Nothing granted at the previous boot: no id to outlive.
                let wait = if used { f.window() } else { Default::default() };
                tracing::info!(
                    epoch,
                    wait_ms = wait.as_millis() as u64,
                    "pNFS: boot epoch moved: earlier layouts' data server ids are fenced"
                );
                *until = Some(Instant::now() + wait);
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "pNFS: cannot move the boot epoch; conflicting operations and LAYOUTGET wait");
                false
            }
        }
    }

    /// Whether the gate is open: the boot epoch moved and the window after it ran
    /// out (or this table never shut it). One atomic load once open.
    pub(super) fn boot_open(&self) -> bool {
        if !self.boot.shut.load(Ordering::Acquire) {
            return true;
        }
        if !self.boot_moved() {
            return false;
        }
        // Decided and opened under the lock `restart_fence` shuts it under.
        let until = self.gate_until();
        let open = until.is_some_and(|u| Instant::now() >= u);
        if open {
            self.boot.shut.store(false, Ordering::Release);
        }
        open
    }

    /// Whether the gate is shut, without I/O (`any`'s fast path).
    pub(super) fn boot_shut(&self) -> bool {
        self.boot.shut.load(Ordering::Acquire)
    }
}

#[cfg(test)]
#[path = "layouts_boot_tests.rs"]
mod tests;
