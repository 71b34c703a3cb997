//! Which slots of a ring's registered file table are free, installed, or waiting to
//! be emptied (registered files).
//!
//! The rule it implements: a slot is emptied (and given to another file) only once
//! no operation names it — counted from when an SQE naming it is queued until the
//! call it belongs to has reaped its last completion. The kernel resolves a
//! registered index when it issues an operation, which for a linked operation (the
//! sync after a write) is only after the one before it completes, so re-pointing a
//! slot any earlier could aim a queued operation at another file. A slot whose
//! entry left the file table while operations still name it is marked retiring and
//! emptied by the release of the last one.

/// Slot bookkeeping of one reactor's registered file table.
pub struct FixedSlots {
    /// Operations (calls) queued or in flight naming each slot.
    busy: Vec<u16>,
    /// The slot's file-table entry is gone: empty it once `busy` drops to 0.
    retiring: Vec<bool>,
    free: Vec<u32>,
}

impl FixedSlots {
    /// `n` slots, all free (0: no registered table, nothing is ever allocated).
    pub fn new(n: u32) -> FixedSlots {
        FixedSlots {
            busy: vec![0; n as usize],
            retiring: vec![false; n as usize],
            free: (0..n).rev().collect(),
        }
    }

    /// A free slot to install a file in, if any.
    pub fn alloc(&mut self) -> Option<u32> {
        self.free.pop()
    }

    /// The slot was emptied (or never filled): free again.
    pub fn cleared(&mut self, i: u32) {
        if let Some(r) = self.retiring.get_mut(i as usize) {
            *r = false;
            self.free.push(i);
        }
    }

    /// A call naming slot `i` was queued.
    pub fn hold(&mut self, i: u32) {
        if let Some(b) = self.busy.get_mut(i as usize) {
            *b = b.saturating_add(1);
        }
    }

    /// A call naming slot `i` reaped its last completion. True: the slot must be
    /// emptied now (its entry is gone and nothing names it any more).
    pub fn release(&mut self, i: u32) -> bool {
        let i = i as usize;
        let Some(b) = self.busy.get_mut(i) else {
            return false;
        };
        *b = b.saturating_sub(1);
        *b == 0 && self.retiring[i]
    }

    /// Slot `i`'s file-table entry is gone. True: empty it now (nothing names it);
    /// otherwise the last `release` says so.
    pub fn retire(&mut self, i: u32) -> bool {
        let i = i as usize;
        match self.busy.get(i) {
            Some(0) => true,
            Some(_) => {
                self.retiring[i] = true;
                false
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_emptied_only_when_nothing_names_it() {
        let mut s = FixedSlots::new(2);
        let a = s.alloc().unwrap();
        let b = s.alloc().unwrap();
        assert_ne!(a, b);
        assert!(s.alloc().is_none(), "two slots");
        // Idle: emptied at once.
        assert!(s.retire(b));
        s.cleared(b);
        assert_eq!(s.alloc(), Some(b));
        // Two calls in flight on `a` when its entry goes: the second release empties.
        s.hold(a);
        s.hold(a);
        assert!(!s.retire(a));
        assert!(!s.release(a));
        assert!(s.alloc().is_none(), "not free while named");
        assert!(s.release(a));
        s.cleared(a);
        assert_eq!(s.alloc(), Some(a));
        // A release on a live slot never empties it.
        s.hold(a);
        assert!(!s.release(a));
        // Out-of-range indices are ignored.
        s.hold(99);
        assert!(!s.release(99) && !s.retire(99));
        assert!(FixedSlots::new(0).alloc().is_none());
    }
}
