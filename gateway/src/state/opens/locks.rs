//! Byte-range lock arithmetic (RFC 8881 §9, §18.10-§18.12), sans-IO and sans-table:
//! ranges, conflicts, and POSIX-style set/unset of one owner's ranges with splitting
//! and merging. A lock is owned by its lock stateid (one per lock-owner and file,
//! §9), so two locks of different stateids belong to different owners.

use crate::state::StateError;

/// An inclusive byte range; `last == u64::MAX` means "to end of file and beyond".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub start: u64,
    pub last: u64,
}

impl Range {
    /// offset4/length4 → range (RFC 8881 §18.10.4): length 0 → NFS4ERR_INVAL; length
    /// all ones → to EOF; otherwise the last byte, offset + length - 1, must fit in 64
    /// bits (offset + length may reach 2^64, not pass it) → NFS4ERR_INVAL.
    pub fn new(offset: u64, length: u64) -> Result<Range, StateError> {
        if length == 0 {
            return Err(StateError::Invalid);
        }
        if length == u64::MAX {
            return Ok(Range {
                start: offset,
                last: u64::MAX,
            });
        }
        let last = offset.checked_add(length - 1).ok_or(StateError::Invalid)?;
        Ok(Range {
            start: offset,
            last,
        })
    }

    /// length4 of the range as LOCK4denied reports it (all ones for "to EOF").
    pub fn length(&self) -> u64 {
        if self.last == u64::MAX {
            u64::MAX
        } else {
            self.last - self.start + 1
        }
    }

    pub fn overlaps(&self, o: &Range) -> bool {
        self.start <= o.last && o.start <= self.last
    }
}

/// One held lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lock {
    /// `other` of the lock stateid that holds it.
    pub owner: [u8; 12],
    pub range: Range,
    pub write: bool,
}

/// The first lock of `locks` that a new lock (`range`, `write`) by an owner for
/// which `same_owner` is true would conflict with: overlapping, another owner, and
/// at least one of the two a write lock (§18.10.3: READ_LT locks are shared).
pub fn conflict<'a>(
    locks: &'a [Lock],
    same_owner: impl Fn(&Lock) -> bool,
    range: &Range,
    write: bool,
) -> Option<&'a Lock> {
    locks
        .iter()
        .find(|l| l.range.overlaps(range) && (write || l.write) && !same_owner(l))
}

/// Number of ranges `owner` holds in `locks`.
pub fn count(locks: &[Lock], owner: &[u8; 12]) -> usize {
    locks.iter().filter(|l| &l.owner == owner).count()
}

/// The owner's ranges with `cut` removed (splitting a range that contains it).
fn subtract(mine: Vec<Lock>, cut: &Range) -> Vec<Lock> {
    let mut out = Vec::with_capacity(mine.len() + 1);
    for l in mine {
        if !l.range.overlaps(cut) {
            out.push(l);
            continue;
        }
        if l.range.start < cut.start {
            out.push(Lock {
                range: Range {
                    start: l.range.start,
                    last: cut.start - 1,
                },
                ..l
            });
        }
        if l.range.last > cut.last {
            out.push(Lock {
                range: Range {
                    start: cut.last + 1,
                    last: l.range.last,
                },
                ..l
            });
        }
    }
    out
}

/// Merges overlapping or adjacent ranges of the same type (input: one owner's).
fn merge(mut mine: Vec<Lock>) -> Vec<Lock> {
    mine.sort_by_key(|l| (l.write, l.range.start));
    let mut out: Vec<Lock> = Vec::with_capacity(mine.len());
    for l in mine {
        if let Some(p) = out.last_mut() {
            if p.write == l.write && l.range.start <= p.range.last.saturating_add(1) {
                p.range.last = p.range.last.max(l.range.last);
                continue;
            }
        }
        out.push(l);
    }
    out
}

/// Replaces `owner`'s ranges with `f(owner's ranges)` when the result holds at most
/// `max` ranges; otherwise leaves `locks` as it was and returns `false`.
fn rewrite(
    locks: &mut Vec<Lock>,
    owner: &[u8; 12],
    max: usize,
    f: impl FnOnce(Vec<Lock>) -> Vec<Lock>,
) -> bool {
    let mine: Vec<Lock> = locks
        .iter()
        .filter(|l| &l.owner == owner)
        .copied()
        .collect();
    let new = f(mine);
    if new.len() > max {
        return false;
    }
    locks.retain(|l| &l.owner != owner);
    locks.extend(new);
    true
}

/// LOCK by `owner` (conflicts already checked): the new range replaces whatever the
/// owner held there (upgrade or downgrade of a sub-range, POSIX semantics as
/// OPEN4_RESULT_LOCKTYPE_POSIX promises), then same-type neighbours merge. `false`:
/// the owner would hold more than `max` ranges (NFS4ERR_RESOURCE), nothing changed.
pub fn set(locks: &mut Vec<Lock>, owner: [u8; 12], range: Range, write: bool, max: usize) -> bool {
    rewrite(locks, &owner, max, |mine| {
        let mut v = subtract(mine, &range);
        v.push(Lock {
            owner,
            range,
            write,
        });
        merge(v)
    })
}

/// LOCKU by `owner`: removes the range from whatever the owner holds (splitting);
/// unlocking what is not locked is not an error (§18.12.4). `false`: the split would
/// exceed `max` ranges, nothing changed.
pub fn unset(locks: &mut Vec<Lock>, owner: [u8; 12], range: Range, max: usize) -> bool {
    rewrite(locks, &owner, max, |mine| subtract(mine, &range))
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: [u8; 12] = [1; 12];
    const B: [u8; 12] = [2; 12];

    fn r(o: u64, l: u64) -> Range {
        Range::new(o, l).unwrap()
    }

    fn mine(locks: &[Lock], o: [u8; 12]) -> Vec<(u64, u64, bool)> {
        let mut v: Vec<_> = locks
            .iter()
            .filter(|l| l.owner == o)
            .map(|l| (l.range.start, l.range.last, l.write))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn range_rules() {
        assert_eq!(Range::new(0, 0), Err(StateError::Invalid));
        assert_eq!(Range::new(u64::MAX, 1).unwrap().last, u64::MAX);
        assert_eq!(Range::new(u64::MAX, 2), Err(StateError::Invalid));
        assert_eq!(Range::new(3, u64::MAX - 1), Err(StateError::Invalid));
        assert_eq!(Range::new(2, u64::MAX - 1).unwrap().last, u64::MAX);
        assert_eq!(Range::new(1, u64::MAX - 1).unwrap().last, u64::MAX - 1);
        let eof = Range::new(5, u64::MAX).unwrap();
        assert_eq!((eof.last, eof.length()), (u64::MAX, u64::MAX));
        assert_eq!(Range::new(10, 5).unwrap().length(), 5);
        assert!(r(0, 10).overlaps(&r(9, 1)));
        assert!(!r(0, 10).overlaps(&r(10, 1)));
    }

    #[test]
    fn conflicts_need_overlap_other_owner_and_a_writer() {
        let locks = vec![Lock {
            owner: A,
            range: r(0, 10),
            write: false,
        }];
        let same = |l: &Lock| l.owner == B;
        assert!(conflict(&locks, same, &r(5, 1), false).is_none());
        assert_eq!(conflict(&locks, same, &r(5, 1), true), Some(&locks[0]));
        assert!(conflict(&locks, same, &r(10, 1), true).is_none());
        assert!(conflict(&locks, |l| l.owner == A, &r(0, 1), true).is_none());
    }

    #[test]
    fn unlock_splits_and_lock_merges() {
        let mut v = Vec::new();
        assert!(set(&mut v, A, r(0, 100), true, 8));
        assert!(unset(&mut v, A, r(40, 10), 8));
        assert_eq!(mine(&v, A), vec![(0, 39, true), (50, 99, true)]);
        assert!(set(&mut v, A, r(40, 10), true, 8));
        assert_eq!(mine(&v, A), vec![(0, 99, true)]);
        // downgrade of the middle: three ranges, types alternate
        assert!(set(&mut v, A, r(10, 10), false, 8));
        assert_eq!(
            mine(&v, A),
            vec![(0, 9, true), (10, 19, false), (20, 99, true)]
        );
        // upgrade back merges into one
        assert!(set(&mut v, A, r(5, 20), true, 8));
        assert_eq!(mine(&v, A), vec![(0, 99, true)]);
        // unlock of something not held is fine; to-EOF unlock clears the tail
        assert!(unset(&mut v, A, r(500, 1), 8));
        assert!(unset(&mut v, A, Range::new(50, u64::MAX).unwrap(), 8));
        assert_eq!(mine(&v, A), vec![(0, 49, true)]);
    }

    #[test]
    fn other_owners_ranges_are_untouched() {
        let mut v = Vec::new();
        assert!(set(&mut v, A, r(0, 10), false, 8));
        assert!(set(&mut v, B, r(0, 10), false, 8));
        assert!(unset(&mut v, A, r(0, 10), 8));
        assert_eq!(mine(&v, A), vec![]);
        assert_eq!(mine(&v, B), vec![(0, 9, false)]);
    }

    #[test]
    fn range_cap_refuses_without_change() {
        let mut v = Vec::new();
        assert!(set(&mut v, A, r(0, 1), true, 2));
        assert!(set(&mut v, A, r(10, 1), true, 2));
        assert!(!set(&mut v, A, r(20, 1), true, 2));
        assert_eq!(count(&v, &A), 2);
        let mut w = Vec::new();
        assert!(set(&mut w, A, r(0, 100), true, 1));
        assert!(!unset(&mut w, A, r(50, 1), 1));
        assert_eq!(mine(&w, A), vec![(0, 99, true)]);
    }

    #[test]
    fn eof_ranges_merge_without_overflow() {
        let mut v = Vec::new();
        assert!(set(&mut v, A, Range::new(10, u64::MAX).unwrap(), true, 4));
        assert!(set(&mut v, A, Range::new(u64::MAX, 1).unwrap(), true, 4));
        assert_eq!(mine(&v, A), vec![(10, u64::MAX, true)]);
        assert!(unset(&mut v, A, Range::new(u64::MAX, 1).unwrap(), 4));
        assert_eq!(mine(&v, A), vec![(10, u64::MAX - 1, true)]);
    }
}
