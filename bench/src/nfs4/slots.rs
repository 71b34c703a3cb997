//! A session's fore-channel slot table, client side (RFC 8881 §2.10.6.1): one request
//! in flight per slot; a slot's next request carries its sequence id plus one, and the
//! id advances only when the server processed the SEQUENCE (a reply whose SEQUENCE
//! failed leaves it, so the retry reuses it).

#[derive(Debug, Default)]
pub struct Slots {
    /// Last sequence id the server processed, per slot.
    seq: Vec<u32>,
    /// Slots not in use (a stack: low slot ids are reused first).
    free: Vec<u32>,
}

impl Slots {
    /// A table of `n` slots (ids 0..n), every sequence id starting at 0 (so the first
    /// request on a slot carries 1, RFC 8881 §18.36.3: a new session's slots expect 1).
    pub fn new(n: u32) -> Slots {
        Slots {
            seq: vec![0; n as usize],
            free: (0..n).rev().collect(),
        }
    }

    pub fn len(&self) -> u32 {
        self.seq.len() as u32
    }

    /// Takes a free slot: its id and the sequence id to send on it.
    pub fn take(&mut self) -> Option<(u32, u32)> {
        let s = self.free.pop()?;
        Some((s, self.seq[s as usize].wrapping_add(1)))
    }

    /// Gives a slot back after its reply; `processed`: the reply's SEQUENCE succeeded,
    /// so `seqid` is now the slot's last.
    pub fn release(&mut self, slot: u32, seqid: u32, processed: bool) {
        let Some(last) = self.seq.get_mut(slot as usize) else {
            return;
        };
        if processed {
            *last = seqid;
        }
        if !self.free.contains(&slot) {
            self.free.push(slot);
        }
    }

    /// sa_highest_slotid: the highest slot id of the table.
    pub fn highest(&self) -> u32 {
        self.len().saturating_sub(1)
    }
}
