//! Which byte ranges of an object hold data (the rest are holes): the sparse map of
//! the `memory` backend, answering SEEK_DATA/SEEK_HOLE as a sparse local file does
//! (RFC 7862 §4, §15.11). Ranges are half-open, kept disjoint and merged.

use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extents {
    /// start -> end of each data range.
    map: BTreeMap<u64, u64>,
}

impl Extents {
    /// All of `[0, size)` is data (a fully written object).
    pub fn full(size: u64) -> Extents {
        let mut e = Extents::default();
        e.add(0, size);
        e
    }

    /// Marks `[start, end)` as data.
    pub fn add(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let (mut s, mut e) = (start, end);
        // Absorb every range touching [s, e].
        let touching: Vec<(u64, u64)> = self
            .map
            .range(..=e)
            .rev()
            .take_while(|(_, &re)| re >= s)
            .map(|(&a, &b)| (a, b))
            .collect();
        for (a, b) in touching {
            self.map.remove(&a);
            s = s.min(a);
            e = e.max(b);
        }
        self.map.insert(s, e);
    }

    /// Makes `[start, end)` a hole.
    pub fn punch(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let hit: Vec<(u64, u64)> = self
            .map
            .range(..end)
            .rev()
            .take_while(|(_, &re)| re > start)
            .map(|(&a, &b)| (a, b))
            .collect();
        for (a, b) in hit {
            self.map.remove(&a);
            if a < start {
                self.map.insert(a, start);
            }
            if b > end {
                self.map.insert(end, b);
            }
        }
    }

    /// Drops everything at or past `size` (a truncation).
    pub fn truncate(&mut self, size: u64) {
        self.punch(size, u64::MAX);
    }

    /// The first data offset at or after `off`, below `size`.
    pub fn next_data(&self, off: u64, size: u64) -> Option<u64> {
        if let Some((_, &e)) = self.map.range(..=off).next_back() {
            if e > off {
                return (off < size).then_some(off);
            }
        }
        let (&s, _) = self.map.range(off..).next()?;
        (s < size).then_some(s)
    }

    /// The first hole offset at or after `off` (`size` itself is the virtual hole at
    /// the end), `None` when `off >= size`.
    pub fn next_hole(&self, off: u64, size: u64) -> Option<u64> {
        if off >= size {
            return None;
        }
        match self.map.range(..=off).next_back() {
            Some((_, &e)) if e > off => Some(e.min(size)),
            _ => Some(off),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_punch_and_seek() {
        let mut x = Extents::default();
        x.add(10, 20);
        x.add(30, 40);
        x.add(20, 30); // merges all three
        assert_eq!(x.map.len(), 1);
        x.punch(15, 35);
        assert_eq!(x.next_data(0, 100), Some(10));
        assert_eq!(x.next_data(15, 100), Some(35));
        assert_eq!(x.next_hole(10, 100), Some(15));
        assert_eq!(x.next_hole(0, 100), Some(0));
        assert_eq!(x.next_hole(36, 38), Some(38));
        assert_eq!(x.next_data(40, 100), None);
        assert_eq!(x.next_hole(100, 100), None);
        x.truncate(12);
        assert_eq!(x.next_data(0, 100), Some(10));
        assert_eq!(x.next_hole(10, 100), Some(12));
        x.add(u64::MAX - 1, u64::MAX);
        x.punch(0, u64::MAX);
        assert_eq!(x, Extents::default());
        x.add(5, 5);
        assert_eq!(x, Extents::default());
    }
}
