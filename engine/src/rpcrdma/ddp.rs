//! Where the DDP-eligible results of one reply lie, and the inline pieces left around
//! them: the fixed-capacity lists the responder's reply planner works with (no
//! allocation per reply).
//!
//! RFC 8267 §6.4.1: write chunk k belongs to the k-th READ-class
//! operation of a COMPOUND. A [`DdpList`] has one entry per READ-class result in reply
//! order; an entry without data (a failed READ) still takes its chunk, which then
//! comes back empty (R8267-21). NFSv3 replies have at most one entry (RFC 8267 §4).

use std::ops::{Index, Range};

/// Most READ-class results one reply tracks: the default limit on write chunks per
/// call (`wire::Limits::max_write_chunks`). Results beyond it go inline.
pub const MAX_DDP: usize = 4;
/// Inline pieces of a reply: one more than its holes.
pub const MAX_INLINE: usize = MAX_DDP + 1;

/// Marks an entry whose operation returned no eligible item.
const NONE: (u32, u32) = (u32::MAX, u32::MAX);

/// The DDP-eligible items of one reply, in order (byte ranges of the reply buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DdpList {
    items: [(u32, u32); MAX_DDP],
    n: u8,
}

impl Default for DdpList {
    fn default() -> Self {
        DdpList::new()
    }
}

impl DdpList {
    pub const fn new() -> DdpList {
        DdpList {
            items: [NONE; MAX_DDP],
            n: 0,
        }
    }

    /// Appends the next READ-class result: `Some(data)` where its data bytes lie,
    /// `None` when it has no eligible item. Returns false (and drops the entry) when
    /// the list is full or the range does not fit 32 bits.
    pub fn push(&mut self, item: Option<Range<usize>>) -> bool {
        if self.n as usize >= MAX_DDP {
            return false;
        }
        let e = match item {
            Some(r) => match (u32::try_from(r.start), u32::try_from(r.end)) {
                (Ok(s), Ok(e)) if s <= e && e != u32::MAX => (s, e),
                _ => return false,
            },
            None => NONE,
        };
        self.items[self.n as usize] = e;
        self.n += 1;
        true
    }

    pub fn len(&self) -> usize {
        self.n as usize
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Entry `k`: `None` past the end, `Some(None)` for a result without data.
    pub fn get(&self, k: usize) -> Option<Option<Range<usize>>> {
        let &(s, e) = self.items[..self.n as usize].get(k)?;
        Some(((s, e) != NONE).then_some(s as usize..e as usize))
    }

    /// The same list with every range moved `by` bytes towards the start (a reply
    /// buffer that lost its record-mark slot); ranges that would go negative become
    /// entries without data.
    pub fn shifted_down(&self, by: usize) -> DdpList {
        let mut out = DdpList::new();
        for k in 0..self.len() {
            let r = self
                .get(k)
                .flatten()
                .and_then(|r| Some(r.start.checked_sub(by)?..r.end.checked_sub(by)?));
            out.push(r);
        }
        out
    }
}

impl From<Option<Range<usize>>> for DdpList {
    /// The one eligible result of an NFSv3 reply (or none).
    fn from(r: Option<Range<usize>>) -> DdpList {
        let mut l = DdpList::new();
        if r.is_some() {
            l.push(r);
        }
        l
    }
}

/// The pieces of a reply that travel in the Send (or the Reply chunk), in order.
/// Indexing past the used pieces gives empty ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inline {
    parts: [Range<usize>; MAX_INLINE],
    n: usize,
}

impl Inline {
    pub fn new() -> Inline {
        Inline {
            parts: std::array::from_fn(|_| 0..0),
            n: 0,
        }
    }

    pub fn clear(&mut self) {
        self.n = 0;
        for p in self.parts.iter_mut() {
            *p = 0..0;
        }
    }

    /// Appends a piece; false when full.
    pub fn push(&mut self, r: Range<usize>) -> bool {
        if self.n >= MAX_INLINE {
            return false;
        }
        self.parts[self.n] = r;
        self.n += 1;
        true
    }

    pub fn as_slice(&self) -> &[Range<usize>] {
        &self.parts[..self.n]
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Range<usize>> {
        self.as_slice().iter()
    }

    /// Bytes in all pieces.
    pub fn total(&self) -> usize {
        self.iter().map(|r| r.len()).sum()
    }
}

impl Default for Inline {
    fn default() -> Self {
        Inline::new()
    }
}

impl Index<usize> for Inline {
    type Output = Range<usize>;
    fn index(&self, i: usize) -> &Range<usize> {
        &self.parts[i]
    }
}

/// Compares the first `N` pieces (unused ones are `0..0` or the empty tail piece).
impl<const N: usize> PartialEq<[Range<usize>; N]> for Inline {
    fn eq(&self, other: &[Range<usize>; N]) -> bool {
        N <= MAX_INLINE && self.n <= N && self.parts[..N] == other[..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_keeps_order_marks_missing_data_and_refuses_overflow() {
        let mut l = DdpList::new();
        assert!(l.push(Some(10..20)));
        assert!(l.push(None));
        assert!(l.push(Some(30..30)));
        assert!(l.push(Some(40..44)));
        assert!(!l.push(Some(50..60)), "full");
        assert_eq!(l.len(), MAX_DDP);
        assert_eq!(l.get(0), Some(Some(10..20)));
        assert_eq!(l.get(1), Some(None));
        assert_eq!(l.get(2), Some(Some(30..30)));
        assert_eq!(l.get(4), None);
        let s = l.shifted_down(12);
        assert_eq!(s.get(0), Some(None), "would go negative");
        assert_eq!(s.get(3), Some(Some(28..32)));
        let mut big = DdpList::new();
        assert!(!big.push(Some(0..(u32::MAX as usize + 1))));
        assert!(big.is_empty());
    }
}
