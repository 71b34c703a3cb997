//! Which pNFS data generations (`crate::fence`: the 16 bits a layout's synthetic gid
//! carries, moved by the metadata server whenever data written through a layout may
//! have become visible) this gateway, as a data server, has already dropped a file's
//! caches for. Read lock-free by the reactors before a cached answer to a layout's
//! call (`Generations::data_seen`), written by a worker after the drop
//! (`fs::FileModel::fresh_data`).
//!
//! One slot per hash of the file id: a tag of the id, a valid bit and the last two
//! generations noted. "Seen" is only ever claimed for a generation a worker noted
//! after it dropped the file's caches, so every error here is on the safe side: a
//! slot shared by two files, a lost race between two noters or a table that never
//! saw the file answers "not seen", which costs one more drop, never a stale answer.
//! The two generations kept let a writer's older layout and a reader's newer one use
//! one data server side by side without a drop per call.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

const SLOTS: usize = 1 << 14;
const VALID: u64 = 1 << 32;

/// The per-file memory of generations seen.
pub struct DataSeen {
    slots: Box<[AtomicU64]>,
    /// Off (no pNFS fencing on this gateway, so no generation is ever verified):
    /// every generation counts as seen, and uids from 2^31 keep the caches.
    on: AtomicBool,
}

impl Default for DataSeen {
    fn default() -> Self {
        DataSeen {
            slots: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
            on: AtomicBool::new(false),
        }
    }
}

/// The slot index and the tag (31 bits of the id, other bits than the index's).
fn place(fileid: u64) -> (usize, u64) {
    let h = fileid.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    ((h >> 50) as usize % SLOTS, (h >> 1) & 0x7fff_ffff)
}

impl DataSeen {
    /// Generations are checked from now on (the server installs pNFS fencing).
    pub fn enable(&self) {
        self.on.store(true, Ordering::Release);
    }

    /// Whether the caches of `fileid` were dropped for generation `gen` (one atomic
    /// load; always true while off).
    #[inline]
    pub fn seen(&self, fileid: u64, gen: u16) -> bool {
        if !self.on.load(Ordering::Relaxed) {
            return true;
        }
        let (i, tag) = place(fileid);
        let v = self.slots[i].load(Ordering::Acquire);
        let g = u64::from(gen);
        v >> 33 == tag && v & VALID != 0 && (v & 0xffff == g || (v >> 16) & 0xffff == g)
    }

    /// Notes `gen` for `fileid`: call only after the file's caches were dropped.
    pub fn note(&self, fileid: u64, gen: u16) {
        let (i, tag) = place(fileid);
        let slot = &self.slots[i];
        let old = slot.load(Ordering::Acquire);
        // The previous generation stays when the slot is this file's.
        let prev = if old >> 33 == tag && old & VALID != 0 {
            old & 0xffff
        } else {
            u64::from(gen)
        };
        slot.store(
            tag << 33 | VALID | prev << 16 | u64::from(gen),
            Ordering::Release,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_everything_is_seen_on_only_what_was_noted() {
        let d = DataSeen::default();
        assert!(d.seen(7, 3), "off: no generation is checked");
        d.enable();
        assert!(!d.seen(7, 3), "never noted");
        assert!(!d.seen(7, 0), "an empty slot is not generation 0");
        d.note(7, 3);
        assert!(d.seen(7, 3));
        assert!(!d.seen(7, 4), "a newer one is not seen");
        assert!(!d.seen(8, 3), "another file");
    }

    #[test]
    fn the_last_two_generations_are_kept() {
        let d = DataSeen::default();
        d.enable();
        d.note(9, 1);
        d.note(9, 2);
        assert!(
            d.seen(9, 1) && d.seen(9, 2),
            "an older layout beside a newer one"
        );
        d.note(9, 3);
        assert!(d.seen(9, 2) && d.seen(9, 3));
        assert!(!d.seen(9, 1), "the third back is dropped for again");
    }

    #[test]
    fn files_sharing_a_slot_only_cost_drops() {
        let d = DataSeen::default();
        d.enable();
        let a = 11u64;
        let b = (1u64..)
            .map(|k| a + k)
            .find(|b| place(*b).0 == place(a).0 && place(*b).1 != place(a).1)
            .expect("a neighbour in the slot");
        d.note(a, 5);
        assert!(!d.seen(b, 5), "the tag tells them apart");
        d.note(b, 5);
        assert!(!d.seen(a, 5), "evicted: a drops again, never answers stale");
    }
}
