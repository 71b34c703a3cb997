//! A session's fore-channel slot table, client side (RFC 8881 §2.10.6.1): one request
//! in flight per slot; a slot's next request carries its sequence id plus one, and the
//! id advances only when the server processed the SEQUENCE (a reply whose SEQUENCE
//! failed leaves it, so the retry reuses it). A table may be a range of a session's
//! slots (`base..base + n`) when connections share a session.

#[derive(Debug, Default)]
pub struct Slots {
    base: u32,
    /// sa_highest_slotid to send: the session's highest slot id.
    highest: u32,
    /// Last sequence id the server processed, per slot of the range.
    seq: Vec<u32>,
    /// Slots not in use, as indices into `seq` (a stack: low slot ids are reused first).
    free: Vec<u32>,
}

impl Slots {
    /// A table of `n` slots (ids 0..n), every sequence id starting at 0 (so the first
    /// request on a slot carries 1: a new session's slots expect 1, RFC 8881 §18.36.3).
    pub fn new(n: u32) -> Slots {
        Slots::range(0, n, n.saturating_sub(1))
    }

    /// Slots `base..base + n` of a session whose highest slot id is `highest`.
    pub fn range(base: u32, n: u32, highest: u32) -> Slots {
        Slots {
            base,
            highest,
            seq: vec![0; n as usize],
            free: (0..n).rev().collect(),
        }
    }

    pub fn len(&self) -> u32 {
        self.seq.len() as u32
    }

    /// Takes a free slot: its id and the sequence id to send on it.
    pub fn take(&mut self) -> Option<(u32, u32)> {
        let i = self.free.pop()?;
        Some((self.base + i, self.seq[i as usize].wrapping_add(1)))
    }

    /// Gives a slot back after its reply; `processed`: the reply's SEQUENCE succeeded,
    /// so `seqid` is now the slot's last.
    pub fn release(&mut self, slot: u32, seqid: u32, processed: bool) {
        let Some(i) = slot.checked_sub(self.base) else {
            return;
        };
        let Some(last) = self.seq.get_mut(i as usize) else {
            return;
        };
        if processed {
            *last = seqid;
        }
        if !self.free.contains(&i) {
            self.free.push(i);
        }
    }

    /// sa_highest_slotid (RFC 8881 §18.46.3).
    pub fn highest(&self) -> u32 {
        self.highest
    }
}
