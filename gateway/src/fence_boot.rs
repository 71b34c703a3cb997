//! The store-wide *boot epoch* of pNFS fencing (issue 27; RFC 8881 §12.7.4, RFC 8435
//! §2.2): layouts are not kept across a metadata server restart or an `[ha]`
//! takeover, so after one the metadata server knows of no layout to recall or fence,
//! while a client of the previous run may still hold synthetic ids the data servers
//! accept. Every synthetic id therefore also depends on a boot epoch `b`, one small
//! object of the gateways' own (`pnfs-fence/boot`, written through `backend::Cas`;
//! never a file's name: those are 16 hex digits), which a metadata server moves when
//! it starts (or takes an `[ha]` identity) before it grants anything. The data
//! servers read and cache `b` like a file's epoch (`WINDOW`), folded into each file's
//! cached entry (`Known::at` is the older of the two reads), so the hot path stays one
//! lookup with no store call; after the move + `WINDOW` no id of an earlier boot is
//! accepted anywhere, and until then the metadata server makes every conflicting
//! operation wait (`state::layouts_boot`).
//!
//! The object is `"<b> <used>"`: `used` is 1 once a layout may have been granted at
//! `b` (written, conditionally, before the first grant of a boot: `mark_used`). A
//! metadata server starting over a boot at which nothing was granted (a fresh store,
//! or a restart before any LAYOUTGET) has no ids to outlive, so nothing waits.

use super::{Fence, BUMP_TRIES};
use crate::backend::{BackendError, Cas};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The boot epoch's object (`pnfs-fence/<16 hex digits>` are the files').
pub const NAME: &str = "pnfs-fence/boot";

/// What this gateway last read (or wrote) of the boot epoch: the value, when the
/// store call that read it began, and the epoch this gateway marked used (if any).
#[derive(Default)]
pub(super) struct Boot {
    seen: Mutex<Option<(u64, Instant)>>,
    marked: Mutex<Option<u64>>,
}

/// The boot object's (epoch, used); an absent object is (0, unused): no id of a
/// boot epoch was ever issued on the store.
fn parse(data: &[u8]) -> Result<(u64, bool), BackendError> {
    let bad = || BackendError::Permanent("pnfs boot epoch: not \"<epoch> <used>\"".into());
    let s = std::str::from_utf8(data).map_err(|_| bad())?;
    let mut it = s.split_whitespace();
    let b = it.next().and_then(|w| w.parse().ok()).ok_or_else(bad)?;
    let used = match it.next() {
        Some("0") => false,
        Some("1") => true,
        _ => return Err(bad()),
    };
    Ok((b, used))
}

fn text(b: u64, used: bool) -> String {
    format!("{b} {}", u8::from(used))
}

type Read = (u64, bool, Option<String>);

fn read(cas: &dyn Cas) -> Result<Read, BackendError> {
    Ok(match cas.cas_get(NAME)? {
        None => (0, false, None),
        Some((data, v)) => {
            let (b, used) = parse(&data)?;
            (b, used, Some(v))
        }
    })
}

impl Boot {
    /// Caches `b`, read by a call that began at `asked`. Epochs only grow: a lower one
    /// never replaces a higher one (a slow read answering after a bump).
    fn remember(&self, b: u64, asked: Instant) -> (u64, Instant) {
        let mut s = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        match *s {
            Some((old, at)) if old > b || (old == b && at > asked) => (old, at),
            _ => {
                *s = Some((b, asked));
                (b, asked)
            }
        }
    }

    /// The boot epoch last seen (0 before any read), with when, without I/O.
    pub(super) fn last(&self) -> Option<(u64, Instant)> {
        *self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The boot epoch read less than `window` ago, else read from the store now.
    pub(super) fn current(
        &self,
        cas: &dyn Cas,
        window: Duration,
    ) -> Result<(u64, Instant), BackendError> {
        if let Some((b, at)) = self.last() {
            if at.elapsed() < window {
                return Ok((b, at));
            }
        }
        let asked = Instant::now();
        let (b, _, _) = read(cas)?;
        Ok(self.remember(b, asked))
    }
}

impl Fence {
    /// Moves the store's boot epoch on (a metadata server's start, or an `[ha]`
    /// takeover, before any grant): every synthetic id issued at an earlier boot is
    /// refused at every data server from this call's return + the window. Returns the
    /// new epoch and whether a layout may have been granted at the one it replaces or
    /// any earlier one (then conflicting operations must wait the window out; the
    /// mark is carried to the new epoch, never cleared). This gateway's own
    /// cache is written through (its data server role sees the new epoch at once).
    pub fn bump_boot(&self) -> Result<(u64, bool), BackendError> {
        let cas = self.cas();
        for _ in 0..BUMP_TRIES {
            let asked = Instant::now();
            let (b, used, ver) = read(cas)?;
            let next = b.checked_add(1).ok_or(BackendError::TooLarge)?;
            // `used` carries over: a layout granted at `b` is fenced only at this
            // move's return + the window, so a second move inside that window (a
            // restart loop, a retried takeover) must wait too. A store where a
            // layout was ever granted makes every later start wait the window.
            match cas.cas_put(NAME, text(next, used).as_bytes(), ver.as_deref()) {
                Ok(_) => {
                    self.boot.remember(next, asked);
                    // Files' entries were computed at the old boot epoch.
                    self.forget_all();
                    return Ok((next, used));
                }
                Err(BackendError::AlreadyExists) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(BackendError::Retryable("pnfs boot epoch: contended".into()))
    }

    /// The synthetic ids a layout of `fileid` granted now carries (LAYOUTGET), at
    /// the file's `epoch` (read from the store just before) and data generation
    /// `gen`, at a boot epoch the store records as used first: a layout may exist at
    /// it, so the next metadata server start waits the window out (`bump_boot`). One
    /// conditional write per boot epoch; free afterwards.
    pub fn grant_ids(&self, fileid: u64, epoch: u64, gen: u16) -> Result<(u32, u32), BackendError> {
        let b = self.mark_used()?;
        Ok(self.ids_at(b, fileid, epoch, gen))
    }

    /// Marks the boot epoch this gateway last saw used (read from the store when it
    /// never read one, or when it is not the one marked); the epoch marked.
    pub fn mark_used(&self) -> Result<u64, BackendError> {
        let now = self.boot.last().map(|(b, _)| b);
        if now.is_some() && *self.boot.marked.lock().unwrap_or_else(|e| e.into_inner()) == now {
            return Ok(now.unwrap_or_default());
        }
        let cas = self.cas();
        for _ in 0..BUMP_TRIES {
            let asked = Instant::now();
            let (b, used, ver) = read(cas)?;
            self.boot.remember(b, asked);
            if !used {
                match cas.cas_put(NAME, text(b, true).as_bytes(), ver.as_deref()) {
                    Ok(_) => {}
                    Err(BackendError::AlreadyExists) => continue,
                    Err(e) => return Err(e),
                }
            }
            *self.boot.marked.lock().unwrap_or_else(|e| e.into_inner()) = Some(b);
            return Ok(b);
        }
        Err(BackendError::Retryable("pnfs boot epoch: contended".into()))
    }

    /// The boot epoch as this gateway checks ids against it (cached within the
    /// window, else read).
    pub fn boot_epoch(&self) -> Result<u64, BackendError> {
        self.boot.current(self.cas(), self.window).map(|(b, _)| b)
    }
}

#[cfg(test)]
#[path = "fence_boot_tests.rs"]
mod tests;
