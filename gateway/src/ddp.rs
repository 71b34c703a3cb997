//! Direct data placement (RFC 8267) as plain data, between the front ends that find
//! and encode the DDP-eligible items and the RPC-over-RDMA binding (`ulb`) that pairs
//! them with chunks. Neither side imports the other (docs/architecture.md §2): the
//! front ends describe, the binding and the transport consume.
//!
//! - Calls: the eligible items a COMPOUND's one walk passed (`Eligibles`, made by
//!   `nfs4::plan`), which `ulb::v4` matches with the reduced chunks (RFC 8267 §6.1).
//! - Replies: where each READ-class result's data went, noted by the encoder that
//!   wrote it (NFSv3 READ and READLINK, RFC 8267 §4; the NFSv4 COMPOUND loop from
//!   what its READ and READLINK report, §6.4.1) on the worker thread that runs the
//!   call ([`note`], [`take`]); the list travels with the reply to the transport,
//!   which never reads the reply to find them.

use engine::rpcrdma::responder::DdpList;
use std::cell::Cell;
use std::ops::Range;

/// DDP-eligible call items a COMPOUND's walk keeps; an RPC-over-RDMA call carries at
/// most `engine::rpcrdma::responder::MAX_DDP` (4) reduced items.
pub const ELIGIBLE_MAX: usize = 16;

/// A DDP-eligible opaque of a call (RFC 8267 §6.1): where its data starts in the
/// procedure's arguments (right after its length word) and the length the call
/// declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Eligible {
    pub data_at: u32,
    pub len: u32,
}

/// The DDP-eligible items of one call in argument order, as its front end's walk
/// found them (fixed size, no allocation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Eligibles {
    items: [Eligible; ELIGIBLE_MAX],
    n: u8,
    /// More eligible items were walked than `ELIGIBLE_MAX`.
    cut: bool,
}

impl Default for Eligibles {
    fn default() -> Self {
        Eligibles {
            items: [Eligible::default(); ELIGIBLE_MAX],
            n: 0,
            cut: false,
        }
    }
}

impl Eligibles {
    /// The eligible items walked, in argument order (at most `ELIGIBLE_MAX`).
    pub fn eligible(&self) -> &[Eligible] {
        &self.items[..self.n as usize]
    }

    /// Whether eligible items past `eligible()` were walked and not kept.
    pub fn cut(&self) -> bool {
        self.cut
    }

    /// The next item in argument order; past `ELIGIBLE_MAX` only `cut` is kept.
    pub fn push(&mut self, e: Eligible) {
        match self.items.get_mut(self.n as usize) {
            Some(slot) => {
                *slot = e;
                self.n += 1;
            }
            None => self.cut = true,
        }
    }
}

thread_local! {
    /// The READ-class results of the reply being encoded on this worker thread
    /// (positions in its reply buffer), or `None` when it noted none.
    static PLACED: Cell<Option<DdpList>> = const { Cell::new(None) };
}

/// A reply that may carry several READ-class results starts (an NFSv4 COMPOUND
/// runs its operations): results are noted from here, in reply order, and a
/// COMPOUND that noted none still passes its (empty) list.
pub fn begin() {
    PLACED.with(|l| l.set(Some(DdpList::new())));
}

/// The encoder of a READ-class result noted where its data went in the reply buffer
/// (`None`: the result carries no data, a failed READ, whose write chunk then comes
/// back empty, RFC 8267 §6.4.1 R8267-21). Without [`begin`] it is the reply's only
/// one (NFSv3, RFC 8267 §4). Past `MAX_DDP` results the entry is dropped: those go
/// inline.
pub fn note(data: Option<Range<usize>>) {
    PLACED.with(|l| {
        let mut list = l.get().unwrap_or_default();
        list.push(data);
        l.set(Some(list));
    });
}

/// Takes (and clears) what this thread noted since the last `take`: taken after
/// every call, so no note outlives its reply.
pub fn take() -> Option<DdpList> {
    PLACED.with(|l| l.take())
}

/// What this thread noted, each range moved `by` bytes towards the start (positions
/// from a COMPOUND4res written at `by`, for the slot's reply cache:
/// `state::sessions::CachedReply::data`); still there for [`take`].
pub fn noted_from(by: usize) -> DdpList {
    PLACED
        .with(|l| l.get())
        .unwrap_or_default()
        .shifted_down(by)
}

/// A reply replayed from a slot's reply cache, written at `at`: its READ-class
/// results are those the first reply noted (`data`, positions from where it was
/// written), so the transport places them as it did then without reading the reply.
pub fn replayed(data: DdpList, at: usize) {
    let mut list = DdpList::new();
    for k in 0..data.len() {
        let r = data.get(k).flatten();
        list.push(r.and_then(|r| Some(r.start.checked_add(at)?..r.end.checked_add(at)?)));
    }
    PLACED.with(|l| l.set(Some(list)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_nfsv3_note_is_the_replys_only_item_and_take_clears_it() {
        let _ = take();
        note(Some(100..108));
        let got = take().expect("noted");
        assert_eq!((got.len(), got.get(0)), (1, Some(Some(100..108))));
        assert_eq!(take(), None, "a note never outlives its reply");
    }

    #[test]
    fn a_compound_keeps_its_results_in_order_failed_ones_without_data() {
        begin();
        assert_eq!(
            take(),
            Some(DdpList::new()),
            "a COMPOUND that noted nothing"
        );
        begin();
        note(Some(40..48));
        note(None);
        note(Some(60..61));
        let slot = noted_from(8);
        assert_eq!(slot.get(0), Some(Some(32..40)));
        assert_eq!(slot.get(1), Some(None));
        replayed(slot, 100);
        let got = take().unwrap();
        assert_eq!(got.get(0), Some(Some(132..140)));
        assert_eq!(got.get(1), Some(None));
        assert_eq!(got.get(2), Some(Some(152..153)));
    }

    #[test]
    fn eligibles_keep_the_first_items_and_say_when_they_cut() {
        let mut e = Eligibles::default();
        for k in 0..ELIGIBLE_MAX as u32 + 1 {
            e.push(Eligible { data_at: k, len: 1 });
        }
        assert_eq!(e.eligible().len(), ELIGIBLE_MAX);
        assert!(e.cut());
    }
}
