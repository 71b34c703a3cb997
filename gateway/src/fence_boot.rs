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
//! The object is `"<b> <used> <nonce>"`: `used` is 1 once a layout may have been
//! granted at `b` (written, conditionally, before the first grant of a boot:
//! `mark_used`); `nonce` is the random word each move writes (`fence_epoch.rs`: a
//! restart after a restore never re-creates an earlier boot's ids; an object of
//! before nonces, `"<b> <used>"`, reads as nonce 0). A
//! metadata server starting over a boot at which nothing was granted (a fresh store,
//! or a restart before any LAYOUTGET) has no ids to outlive, so nothing waits.
//!
//! The epoch is one per store, not one per metadata server: several metadata servers
//! on one store (clients mount either; every gateway is a data server) fence each
//! other's layouts at each one's start. A metadata server whose epoch another moved
//! finds out as a data server does, by reading it again once its own read is a
//! window old (`mark_used`, before a grant); it then adopts the new epoch and grants
//! nothing for a window (a data server may still trust the old one meanwhile, and
//! would refuse the new ids), then goes on. Its earlier layouts' ids are refused at
//! the data servers from the other's move + the window; its clients meet
//! NFS3ERR_ACCES there, report it (LAYOUTERROR / LAYOUTRETURN) and ask again.

use super::epoch::{self, Backwards, Epoch, Pending, Take};
use super::{Fence, BUMP_TRIES, READ_TRIES};
use crate::backend::{BackendError, Cas};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The boot epoch's object (`pnfs-fence/<16 hex digits>` are the files').
pub const NAME: &str = "pnfs-fence/boot";

/// What this gateway last read (or wrote) of the boot epoch: the value, when the
/// store call that read it began; and its own, as a metadata server.
#[derive(Default)]
pub(super) struct Boot {
    seen: Mutex<Option<Seen>>,
    own: Mutex<Own>,
    /// Epoch values (the boot's and files') seen going back (`fence_epoch.rs`).
    pub(super) backwards: Backwards,
}

/// A boot epoch read: the value, when the read began (trusted from then for a
/// window), and a read below it not yet confirmed (`fence_epoch::take`).
#[derive(Clone, Copy)]
struct Seen {
    epoch: Epoch,
    asked: Instant,
    pending: Pending,
}

/// The boot epoch this gateway grants at, as a metadata server.
#[derive(Default, Clone, Copy, Debug)]
struct Own {
    /// The epoch it moved the store's to, or adopted (`None`: neither yet).
    epoch: Option<Epoch>,
    /// When the store last said `epoch` is current and marked used (the start of
    /// that read); grants need no store call for a window after it.
    checked: Option<Instant>,
    /// Adopted after another gateway moved the epoch: no grant before this.
    settle: Option<Instant>,
}

/// What `mark_used` allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// Grant at this boot epoch (marked used in the store).
    At(Epoch),
    /// Another gateway moved the boot epoch; this one adopted it and grants nothing
    /// until a window after that (NFS4ERR_LAYOUTTRYLATER).
    Later,
}

/// The boot object's (epoch, used); an absent object is (0, unused): no id of a
/// boot epoch was ever issued on the store.
fn parse(data: &[u8]) -> Result<(Epoch, bool), BackendError> {
    let bad =
        || BackendError::Permanent("pnfs boot epoch: not \"<epoch> <used> [<nonce>]\"".into());
    let s = std::str::from_utf8(data).map_err(|_| bad())?;
    let mut it = s.split_whitespace();
    let n = it.next().and_then(epoch::parse_n).ok_or_else(bad)?;
    let used = match it.next() {
        Some("0") => false,
        Some("1") => true,
        _ => return Err(bad()),
    };
    let nonce = match it.next() {
        None => 0,
        Some(w) => epoch::parse_nonce(w).ok_or_else(bad)?,
    };
    if it.next().is_some() {
        return Err(bad());
    }
    Ok((Epoch { n, nonce }, used))
}

fn text(b: Epoch, used: bool) -> String {
    format!("{} {}{}", b.n, u8::from(used), epoch::nonce_word(b))
}

type Read = (Epoch, bool, Option<String>);

fn read(cas: &dyn Cas) -> Result<Read, BackendError> {
    Ok(match cas.cas_get(NAME)? {
        None => (Epoch::default(), false, None),
        Some((data, v)) => {
            let (b, used) = parse(&data)?;
            (b, used, Some(v))
        }
    })
}

impl Boot {
    /// Caches `b`, read by a call that began at `asked`, for a window of `window`;
    /// what is cached after (`None`: the cached value was kept against a lower read,
    /// `fence_epoch::take`, and is out of its window: read again). A lower value (or
    /// the same number with another nonce) is followed only once a second read
    /// confirms it: the store went back, counted and logged.
    fn remember(&self, b: Epoch, asked: Instant, window: Duration) -> Option<(Epoch, Instant)> {
        let mut s = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = s.as_mut() {
            match epoch::take(old.epoch, &mut old.pending, b, asked) {
                Take::Replace if old.epoch == b && old.asked > asked => {
                    return Some((old.epoch, old.asked));
                }
                Take::Keep => {
                    let fresh = old.asked.elapsed() < window;
                    return fresh.then_some((old.epoch, old.asked));
                }
                Take::Backwards => self.backwards.saw("boot", 0, old.epoch, b),
                Take::Replace => {}
            }
        }
        *s = Some(Seen {
            epoch: b,
            asked,
            pending: None,
        });
        Some((b, asked))
    }

    /// Caches `b`, written by a successful conditional write whose read began at
    /// `asked`: the store's current value, whatever was cached (a concurrent read
    /// may have cached a higher value of before a restore); one below the cached
    /// value is counted as gone back.
    fn wrote(&self, b: Epoch, asked: Instant) {
        let mut s = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = *s {
            if epoch::wrote_back(old.epoch, b) {
                self.backwards.saw("boot", 0, old.epoch, b);
            }
        }
        *s = Some(Seen {
            epoch: b,
            asked,
            pending: None,
        });
    }

    fn own(&self) -> std::sync::MutexGuard<'_, Own> {
        self.own.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The boot epoch last seen (0 before any read), with when, without I/O.
    pub(super) fn last(&self) -> Option<(Epoch, Instant)> {
        let s = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        s.map(|s| (s.epoch, s.asked))
    }

    /// The boot epoch read less than `window` ago, else read from the store now.
    pub(super) fn current(
        &self,
        cas: &dyn Cas,
        window: Duration,
    ) -> Result<(Epoch, Instant), BackendError> {
        if let Some((b, at)) = self.last() {
            if at.elapsed() < window {
                return Ok((b, at));
            }
        }
        // A lower read kept against a value out of its window is read again at once
        // (this read begins after it returned: `fence_epoch::take`).
        for _ in 0..READ_TRIES {
            let asked = Instant::now();
            let (b, _, _) = read(cas)?;
            if let Some(r) = self.remember(b, asked, window) {
                return Ok(r);
            }
        }
        Err(BackendError::Retryable(
            "pnfs boot epoch: the store's reads disagree".into(),
        ))
    }
}

impl Fence {
    /// Moves the store's boot epoch on (a metadata server's start, or an `[ha]`
    /// takeover, before any grant): every synthetic id issued at an earlier boot is
    /// refused at every data server from this call's return + the window; the value
    /// written (the next number, a fresh nonce) is one no earlier boot had, even on a
    /// store restored from a backup (`fence_epoch.rs`). Returns the new number and
    /// whether a layout may have been granted at the one it replaces or
    /// any earlier one (then conflicting operations must wait the window out; the
    /// mark is carried to the new epoch, never cleared). This gateway's own
    /// cache is written through (its data server role sees the new epoch at once).
    pub fn bump_boot(&self) -> Result<(u64, bool), BackendError> {
        let cas = self.cas();
        for _ in 0..BUMP_TRIES {
            let asked = Instant::now();
            let (b, used, ver) = read(cas)?;
            let next = b.next()?;
            // `used` carries over: a layout granted at `b` is fenced only at this
            // move's return + the window, so a second move inside that window (a
            // restart loop, a retried takeover) must wait too. A store where a
            // layout was ever granted makes every later start wait the window.
            match cas.cas_put(NAME, text(next, used).as_bytes(), ver.as_deref()) {
                Ok(_) => {
                    self.boot.wrote(next, asked);
                    *self.boot.own() = Own {
                        epoch: Some(next),
                        checked: None,
                        settle: None,
                    };
                    // Files' entries were computed at the old boot epoch.
                    self.forget_all();
                    return Ok((next.n, used));
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
    /// store read per window of grants (`mark_used`); `None`: grant nothing yet.
    pub fn grant_ids(
        &self,
        fileid: u64,
        epoch: Epoch,
        gen: u16,
    ) -> Result<Option<(u32, u32)>, BackendError> {
        Ok(match self.mark_used()? {
            Grant::At(b) => Some(self.ids_at(b, fileid, epoch, gen)),
            Grant::Later => None,
        })
    }

    /// Before a grant: this metadata server's boot epoch, still the store's and marked
    /// used there. The store is read again once the last check is a window old (as
    /// a data server reads it again), so an epoch another gateway moved (its start,
    /// or an `[ha]` takeover) is found within a window of grants: this gateway then
    /// adopts it, logs, and answers `Grant::Later` until a window after (a data server
    /// that read the old epoch less than a window ago would refuse the new ids).
    /// A gateway that never moved the epoch (a test's fence) adopts the one it reads.
    pub fn mark_used(&self) -> Result<Grant, BackendError> {
        let now = Instant::now();
        {
            let o = *self.boot.own();
            if let (Some(b), Some(at)) = (o.epoch, o.checked) {
                if now.saturating_duration_since(at) < self.window {
                    return Ok(Grant::At(b));
                }
            }
            if o.settle.is_some_and(|u| now < u) {
                return Ok(Grant::Later);
            }
        }
        let cas = self.cas();
        let mut backwards = None;
        for _ in 0..BUMP_TRIES {
            let asked = Instant::now();
            let (b, used, ver) = read(cas)?;
            if self.boot.remember(b, asked, self.window).map(|r| r.0) != Some(b) {
                // A lower value (or another nonce) than the one cached, not yet
                // confirmed by a second read (`fence_epoch::take`): read again.
                continue;
            }
            {
                let mut o = self.boot.own();
                match o.epoch {
                    // A higher number, or the same number with another nonce (the
                    // store went back and another gateway moved it again since).
                    Some(ours) if b.n > ours.n || (b.n == ours.n && b != ours) => {
                        *o = Own {
                            epoch: Some(b),
                            checked: None,
                            settle: Some(Instant::now() + self.window),
                        };
                        drop(o);
                        // Files' entries were computed at the old boot epoch.
                        self.forget_all();
                        // Logged once per move seen (each is another gateway's start).
                        tracing::warn!(
                            ours = ours.n,
                            store = b.n,
                            wait_ms = self.window.as_millis() as u64,
                            "pNFS: another gateway moved the store's boot epoch (a metadata server started on the same store, or took an [ha] identity over): this gateway's earlier layouts are fenced at the data servers; it adopts the new epoch and grants no layout for the fence window"
                        );
                        return Ok(Grant::Later);
                    }
                    Some(ours) if b.n < ours.n => {
                        // A read that began before another call adopted `ours`:
                        // read again. Epochs only grow, so one still below after
                        // every try is a store that went back (restored, or another
                        // store under the same name): not trusted.
                        backwards = Some((b, ours));
                        continue;
                    }
                    Some(_) => {}
                    None => o.epoch = Some(b),
                }
                // Another call adopted `b` while this one read it: its window holds.
                if o.settle.is_some_and(|u| Instant::now() < u) {
                    return Ok(Grant::Later);
                }
            }
            if !used {
                match cas.cas_put(NAME, text(b, true).as_bytes(), ver.as_deref()) {
                    Ok(_) => {}
                    Err(BackendError::AlreadyExists) => continue,
                    Err(e) => return Err(e),
                }
            }
            let mut o = self.boot.own();
            if o.epoch != Some(b) {
                // Another call adopted a newer epoch while this one marked `b`: ids
                // under `b` would be refused within a window; its window holds here too.
                return Ok(Grant::Later);
            }
            o.checked = Some(asked);
            o.settle = None;
            return Ok(Grant::At(b));
        }
        if let Some((b, ours)) = backwards {
            return Err(BackendError::Permanent(format!(
                "pnfs boot epoch: the store's ({}) is below this gateway's ({})",
                b.n, ours.n
            )));
        }
        Err(BackendError::Retryable("pnfs boot epoch: contended".into()))
    }

    /// The boot epoch as this gateway checks ids against it (cached within the
    /// window, else read).
    pub fn boot_epoch(&self) -> Result<u64, BackendError> {
        self.boot.current(self.cas(), self.window).map(|(b, _)| b.n)
    }
}

#[cfg(test)]
#[path = "fence_boot_tests.rs"]
mod tests;
