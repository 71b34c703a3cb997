//! The metadata servers' *boot epochs* of pNFS fencing (issue 27; RFC 8881 §12.7.4,
//! RFC 8435 §2.2): layouts are not kept across a metadata server restart or an `[ha]`
//! takeover, so after one the metadata server knows of no layout to recall or fence,
//! while a client of the previous run may still hold synthetic ids the data servers
//! accept. Every synthetic id therefore also depends on the boot epoch `b` of the
//! metadata server that granted it, which that metadata server moves when it starts
//! (or takes an `[ha]` identity over) before it grants anything.
//!
//! Several metadata servers may share one store (clients mount either; every gateway
//! is a data server), and one's restart must not fence the others' layouts. So each
//! metadata server *identity* has a boot epoch of its own, in one of 256 *slots*:
//! `pnfs-fence/boot-<slot, 2 hex digits>` (objects of the gateways' own, written
//! through `backend::Cas`; a file's fence object is 16 hex digits). The identity is a
//! digest of the layout stateid key (`state.dir/pnfs-layout.key`, or under `[ha]` the
//! identity's key in the store), so it follows the `[ha]` identity, not the host: a
//! takeover's successor moves the previous holder's epoch. A metadata server finds
//! its slot by probing from the first byte of its identity: the first slot that names
//! it, or the first free one, which it claims with a conditional create (slots are
//! never given back). The slot rides in every synthetic uid (`fence::slot_of`), so a
//! data server reads and caches the one boot epoch that applies (`WINDOW`), folded
//! into the file's cached pair: the reactor's check stays one lookup, no store call.
//! After a move + `WINDOW` no id of that metadata server's earlier boots is accepted
//! anywhere; until then the metadata server makes every conflicting operation wait
//! (`state::layouts_boot`). Other metadata servers' ids are untouched.
//!
//! The object is `"<b> <used> <identity>"`: `used` is 1 once a layout may have been
//! granted at `b` (written, conditionally, before the first grant of a boot:
//! `mark_used`). A metadata server starting over a boot at which nothing was granted
//! (a fresh slot, or a restart before any LAYOUTGET) has no ids to outlive, so
//! nothing waits. A metadata server whose epoch another gateway moved (a takeover's
//! successor; or a second gateway with the same identity, a copied `state.dir`)
//! grants no more layouts: its ids would be refused.

use super::{Fence, BUMP_TRIES};
use crate::backend::{BackendError, Cas};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Metadata server slots on one store (the uid carries 8 bits of it).
pub const SLOTS: usize = 256;

/// The boot epoch object of `slot`.
pub fn object(slot: u8) -> String {
    format!("pnfs-fence/boot-{slot:02x}")
}

/// A metadata server identity (16 bytes).
pub type Identity = [u8; 16];

/// This gateway's own boot epoch, as a metadata server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Own {
    pub slot: u8,
    pub boot: u64,
    pub id: Identity,
    /// Marked used in the store (`mark_used`).
    pub marked: bool,
}

/// What this gateway last read (or wrote) of each slot's boot epoch, with when the
/// store call that read it began; and its own, as a metadata server.
#[derive(Default)]
pub(super) struct Boot {
    seen: Mutex<HashMap<u8, (u64, Instant)>>,
    own: Mutex<Option<Own>>,
}

/// A slot object's (epoch, used, owner); an absent object is (0, unused, none): no id
/// of a boot epoch of the slot was ever issued on the store.
type Read = (u64, bool, Option<Identity>, Option<String>);

fn hex(id: &Identity) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse(data: &[u8]) -> Result<(u64, bool, Identity), BackendError> {
    let bad =
        || BackendError::Permanent("pnfs boot epoch: not \"<epoch> <used> <identity>\"".into());
    let s = std::str::from_utf8(data).map_err(|_| bad())?;
    let mut it = s.split_whitespace();
    let b = it.next().and_then(|w| w.parse().ok()).ok_or_else(bad)?;
    let used = match it.next() {
        Some("0") => false,
        Some("1") => true,
        _ => return Err(bad()),
    };
    let w = it.next().filter(|w| w.len() == 32).ok_or_else(bad)?;
    let mut id = [0u8; 16];
    for (i, o) in id.iter_mut().enumerate() {
        *o = u8::from_str_radix(w.get(2 * i..2 * i + 2).ok_or_else(bad)?, 16).map_err(|_| bad())?;
    }
    if it.next().is_some() {
        return Err(bad());
    }
    Ok((b, used, id))
}

fn text(b: u64, used: bool, id: &Identity) -> String {
    format!("{b} {} {}", u8::from(used), hex(id))
}

fn read(cas: &dyn Cas, slot: u8) -> Result<Read, BackendError> {
    Ok(match cas.cas_get(&object(slot))? {
        None => (0, false, None, None),
        Some((data, v)) => {
            let (b, used, id) = parse(&data)?;
            (b, used, Some(id), Some(v))
        }
    })
}

impl Boot {
    fn seen(&self) -> std::sync::MutexGuard<'_, HashMap<u8, (u64, Instant)>> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn own_lock(&self) -> std::sync::MutexGuard<'_, Option<Own>> {
        self.own.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Caches `b` of `slot`, read by a call that began at `asked`. Epochs only grow:
    /// a lower one never replaces a higher one (a slow read answering after a bump).
    fn remember(&self, slot: u8, b: u64, asked: Instant) -> (u64, Instant) {
        let mut s = self.seen();
        match s.get(&slot) {
            Some(&(old, at)) if old > b || (old == b && at > asked) => (old, at),
            _ => {
                s.insert(slot, (b, asked));
                (b, asked)
            }
        }
    }

    /// The boot epoch of `slot` last seen, with when, without I/O.
    pub(super) fn last(&self, slot: u8) -> Option<(u64, Instant)> {
        self.seen().get(&slot).copied()
    }

    /// This gateway's own boot epoch, once it moved one.
    pub(super) fn own(&self) -> Option<Own> {
        *self.own_lock()
    }

    /// The boot epoch of `slot` read less than `window` ago, else read from the
    /// store now.
    pub(super) fn current(
        &self,
        cas: &dyn Cas,
        slot: u8,
        window: Duration,
    ) -> Result<(u64, Instant), BackendError> {
        if let Some((b, at)) = self.last(slot) {
            if at.elapsed() < window {
                return Ok((b, at));
            }
        }
        let asked = Instant::now();
        let (b, _, _, _) = read(cas, slot)?;
        Ok(self.remember(slot, b, asked))
    }
}

/// One slot's move: done (the new epoch, whether used), or the slot is another
/// identity's.
enum Move {
    Done(u64, bool),
    Taken,
}

impl Fence {
    /// Moves the boot epoch of metadata server identity `id` on (a metadata server's
    /// start, or an `[ha]` takeover, before any grant), claiming a slot first if the
    /// identity has none: every synthetic id this identity issued at an earlier boot
    /// is refused at every data server from this call's return + the window; other
    /// identities' ids are untouched. Returns the slot, the new epoch and whether a
    /// layout may have been granted at the one it replaces or any earlier one (then
    /// conflicting operations must wait the window out; the mark is carried to the
    /// new epoch, never cleared). This gateway's own cache is written through (its
    /// data server role sees the new epoch at once).
    pub fn bump_boot(&self, id: &Identity) -> Result<(u8, u64, bool), BackendError> {
        for i in 0..SLOTS {
            let slot = id[0].wrapping_add(i as u8);
            if let Move::Done(b, used) = self.move_slot(slot, id)? {
                *self.boot.own_lock() = Some(Own {
                    slot,
                    boot: b,
                    id: *id,
                    marked: false,
                });
                // Files' pairs were computed at the old boot epoch.
                self.forget_all();
                return Ok((slot, b, used));
            }
        }
        Err(BackendError::Permanent(
            "pnfs boot epoch: every metadata server slot is taken".into(),
        ))
    }

    /// Moves `slot`'s epoch on when it is `id`'s or free (claimed then).
    fn move_slot(&self, slot: u8, id: &Identity) -> Result<Move, BackendError> {
        let cas = self.cas();
        for _ in 0..BUMP_TRIES {
            let asked = Instant::now();
            let (b, used, owner, ver) = read(cas, slot)?;
            if owner.is_some_and(|o| o != *id) {
                return Ok(Move::Taken);
            }
            let next = b.checked_add(1).ok_or(BackendError::TooLarge)?;
            // `used` carries over: a layout granted at `b` is fenced only at this
            // move's return + the window, so a second move inside that window (a
            // restart loop, a retried takeover) must wait too. A slot where a
            // layout was ever granted makes every later start wait the window.
            match cas.cas_put(
                &object(slot),
                text(next, used, id).as_bytes(),
                ver.as_deref(),
            ) {
                Ok(_) => {
                    self.boot.remember(slot, next, asked);
                    return Ok(Move::Done(next, used));
                }
                Err(BackendError::AlreadyExists) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(BackendError::Retryable("pnfs boot epoch: contended".into()))
    }

    /// The synthetic ids a layout of `fileid` granted now carries (LAYOUTGET), at
    /// the file's `epoch` (read from the store just before) and data generation
    /// `gen`, at this metadata server's slot and boot epoch, which the store records
    /// as used first: a layout may exist at it, so the next start waits the window
    /// out (`bump_boot`). One conditional write per boot epoch; free afterwards.
    pub fn grant_ids(&self, fileid: u64, epoch: u64, gen: u16) -> Result<(u32, u32), BackendError> {
        let (slot, b) = self.mark_used()?;
        Ok(self.ids_at(slot, b, fileid, epoch, gen))
    }

    /// Marks this metadata server's boot epoch used (once per boot); its slot and
    /// epoch. An error before `bump_boot`, or when another gateway moved the epoch
    /// since (a takeover's successor, or a gateway with the same identity): the ids
    /// it would grant are refused at the data servers.
    pub fn mark_used(&self) -> Result<(u8, u64), BackendError> {
        let Some(own) = self.boot.own() else {
            return Err(BackendError::Retryable(
                "pnfs boot epoch: not moved yet".into(),
            ));
        };
        if own.marked {
            return Ok((own.slot, own.boot));
        }
        let cas = self.cas();
        for _ in 0..BUMP_TRIES {
            let asked = Instant::now();
            let (b, used, owner, ver) = read(cas, own.slot)?;
            if b != own.boot || owner != Some(own.id) {
                tracing::error!(
                    slot = own.slot,
                    ours = own.boot,
                    store = b,
                    "pNFS: another gateway moved this metadata server's boot epoch (a takeover of its identity, or a copy of its state.dir): no more layouts are granted here"
                );
                return Err(BackendError::Permanent(
                    "pnfs boot epoch: moved by another gateway".into(),
                ));
            }
            self.boot.remember(own.slot, b, asked);
            if !used {
                let t = text(b, true, &own.id);
                match cas.cas_put(&object(own.slot), t.as_bytes(), ver.as_deref()) {
                    Ok(_) => {}
                    Err(BackendError::AlreadyExists) => continue,
                    Err(e) => return Err(e),
                }
            }
            let mut o = self.boot.own_lock();
            if let Some(o) = o.as_mut().filter(|o| o.boot == own.boot) {
                o.marked = true;
            }
            return Ok((own.slot, b));
        }
        Err(BackendError::Retryable("pnfs boot epoch: contended".into()))
    }

    /// The boot epoch of `slot` as this gateway checks ids against it (cached within
    /// the window, else read).
    pub fn boot_epoch(&self, slot: u8) -> Result<u64, BackendError> {
        self.boot
            .current(self.cas(), slot, self.window)
            .map(|(b, _)| b)
    }

    /// This gateway's own slot and boot epoch as a metadata server, once moved.
    pub fn own_boot(&self) -> Option<(u8, u64)> {
        self.boot.own().map(|o| (o.slot, o.boot))
    }
}

#[cfg(test)]
#[path = "fence_boot_tests.rs"]
mod tests;
