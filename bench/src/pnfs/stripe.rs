//! A striped flexfiles mirror (RFC 8435 §6, "Striping via Sparse Mapping"): its W
//! data servers (`ffm_data_servers`) each hold the stripe units i of the file with
//! i mod W equal to their place in the list, at the file's own offsets (sparse: the
//! logical offset is the offset at the data server). [`View`] is one data server's
//! share: which of bench's blocks touch it and which bytes of a block it carries. A
//! block that crosses a unit boundary is split: each side goes to its own server.
//!
//! Blocks are at most one stripe unit (bench refuses `--bs` above the unit of a
//! striped layout), so a block touches at most two units, which are on different
//! servers when W > 1: a block has at most one piece on any server. Values come from
//! the metadata server, so every product is checked: a unit so large that the
//! arithmetic would overflow simply has nothing past the overflow.

/// Data server `index` of a mirror of `width` striped in units of `unit` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct View {
    pub unit: u64,
    pub width: u64,
    pub index: u64,
}

impl View {
    /// A view for server `index` of `width`, when the values make one (a unit of at
    /// least one byte, an index in the width).
    pub fn new(unit: u64, width: u64, index: u64) -> Option<View> {
        (unit > 0 && index < width).then_some(View { unit, width, index })
    }

    fn mine(&self, unit_no: u64) -> bool {
        unit_no % self.width == self.index
    }

    /// The bytes of block `block` (`bs` bytes at `block × bs`) this server carries:
    /// (offset, length), or `None` when the block is all other servers'.
    pub fn piece(&self, bs: u32, block: u64) -> Option<(u64, u32)> {
        let bs64 = u64::from(bs.max(1));
        let off = block.checked_mul(bs64)?;
        let end = off.saturating_add(bs64);
        if self.width == 1 {
            return Some((off, bs));
        }
        let u0 = off / self.unit;
        let u1 = (end - 1) / self.unit;
        let (start, stop) = if self.mine(u0) {
            (off, end.min(u0.saturating_add(1).saturating_mul(self.unit)))
        } else if u1 != u0 && self.mine(u1) {
            (u1 * self.unit, end)
        } else {
            return None;
        };
        Some((start, (stop - start) as u32))
    }

    /// The first block from `block` on (before `blocks`) with a piece here.
    pub fn next_block(&self, bs: u32, blocks: u64, block: u64) -> Option<u64> {
        if block >= blocks {
            return None;
        }
        if self.piece(bs, block).is_some() {
            return Some(block);
        }
        // The next unit of this server past the block's first, and the block where
        // that unit starts (it has a piece here: it holds the unit's first byte).
        let bs64 = u64::from(bs.max(1));
        let u = block.checked_mul(bs64)? / self.unit;
        let ahead = (self.index + self.width - u % self.width) % self.width;
        let m = u.checked_add(if ahead == 0 { self.width } else { ahead })?;
        let b = m.checked_mul(self.unit)? / bs64;
        (b < blocks).then_some(b)
    }

    /// A block with a piece here, chosen by `r`: a unit of this server's among those
    /// the file's `blocks` touch, then a block of it. `None` when there is none.
    pub fn pick(&self, bs: u32, blocks: u64, r: u64) -> Option<u64> {
        let bs64 = u64::from(bs.max(1));
        let bytes = blocks.checked_mul(bs64)?;
        let units = bytes.div_ceil(self.unit);
        if units <= self.index {
            return None;
        }
        let count = (units - self.index).div_ceil(self.width);
        let m = (r % count) * self.width + self.index;
        let first = m.checked_mul(self.unit)? / bs64;
        let last = (m.checked_add(1)?.checked_mul(self.unit)? - 1) / bs64;
        let last = last.min(blocks - 1);
        let span = last.checked_sub(first)? + 1;
        Some(first + (r / count) % span)
    }

    /// This server's bytes of the file's first `size` bytes, in pieces of at most
    /// `chunk` (a unit is cut at its end): what a fill writes through it.
    pub fn pieces(&self, size: u64, chunk: u32) -> impl Iterator<Item = (u64, u32)> + '_ {
        let chunk = u64::from(chunk.max(1));
        let units = size.div_ceil(self.unit);
        (self.index..units)
            .step_by(self.width.max(1) as usize)
            .flat_map(move |u| {
                let start = u.saturating_mul(self.unit);
                let end = u.saturating_add(1).saturating_mul(self.unit).min(size);
                (start..end)
                    .step_by(chunk as usize)
                    .map(move |o| (o, (end - o).min(chunk) as u32))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: u64 = 1024;

    /// Every byte of the file goes to exactly one server: the one RFC 8435 §6 names
    /// ((offset / unit) mod width), whatever the block size (aligned to the unit or
    /// not) — the pieces of each block over all servers tile it exactly.
    #[test]
    fn the_pieces_of_a_block_tile_it_by_the_rfcs_mapping() {
        for (unit, width, bs) in [
            (64 * K, 3, 64 * K as u32),
            (64 * K, 3, 48 * K as u32),
            (64 * K, 2, 4096),
            (4096, 5, 4096),
            (1 << 20, 3, 768 * K as u32),
        ] {
            let views: Vec<View> = (0..width)
                .map(|i| View::new(unit, width, i).unwrap())
                .collect();
            for block in 0..200u64 {
                let off = block * u64::from(bs);
                let mut covered = 0u64;
                let mut pieces: Vec<(u64, u32, u64)> = views
                    .iter()
                    .filter_map(|v| v.piece(bs, block).map(|(o, l)| (o, l, v.index)))
                    .collect();
                pieces.sort();
                let mut at = off;
                for (o, l, i) in pieces {
                    assert_eq!(o, at, "unit {unit} width {width} bs {bs} block {block}");
                    assert!(l > 0);
                    // Every byte of the piece is in a unit of server i.
                    assert_eq!((o / unit) % width, i);
                    assert_eq!(((o + u64::from(l) - 1) / unit) % width, i);
                    at += u64::from(l);
                    covered += u64::from(l);
                }
                assert_eq!(covered, u64::from(bs), "block {block} not tiled");
            }
        }
    }

    /// Walking `next_block` visits exactly the blocks with a piece, in order; `pick`
    /// only ever picks those and, over many draws, every one of them.
    #[test]
    fn next_block_and_pick_find_exactly_the_servers_blocks() {
        for (unit, width, bs, blocks) in [
            (64 * K, 3, 16 * K as u32, 50u64),
            (64 * K, 3, 48 * K as u32, 41),
            (4096, 4, 4096, 9),
            (64 * K, 3, 64 * K as u32, 2),
        ] {
            for index in 0..width {
                let v = View::new(unit, width, index).unwrap();
                let want: Vec<u64> = (0..blocks).filter(|b| v.piece(bs, *b).is_some()).collect();
                let mut got = Vec::new();
                let mut b = 0;
                while let Some(n) = v.next_block(bs, blocks, b) {
                    got.push(n);
                    b = n + 1;
                }
                assert_eq!(got, want, "unit {unit} width {width} bs {bs} index {index}");
                let mut seen = std::collections::BTreeSet::new();
                let mut r = 0x9e37_79b9_7f4a_7c15u64;
                for _ in 0..4000 {
                    r ^= r << 13;
                    r ^= r >> 7;
                    r ^= r << 17;
                    match v.pick(bs, blocks, r) {
                        Some(b) => {
                            assert!(want.contains(&b), "picked {b}, not the server's");
                            seen.insert(b);
                        }
                        None => assert!(want.is_empty()),
                    }
                }
                assert_eq!(seen.into_iter().collect::<Vec<_>>(), want);
            }
        }
    }

    /// A fill through every server writes each byte of the file once.
    #[test]
    fn the_fill_pieces_cover_the_file_once() {
        let (unit, width, size) = (64 * K, 3, 300 * K + 100);
        let mut all: Vec<(u64, u32)> = (0..width)
            .flat_map(|i| {
                let v = View::new(unit, width, i).unwrap();
                v.pieces(size, 48 * 1024).collect::<Vec<_>>()
            })
            .collect();
        all.sort();
        let mut at = 0;
        for (o, l) in all {
            assert_eq!(o, at);
            assert!(l as u64 <= 48 * K);
            at += u64::from(l);
        }
        assert_eq!(at, size);
    }

    /// Hostile layouts: a unit of 0 or an index past the width make no view; a unit
    /// near 2^64 does not overflow (only unit 0 holds anything).
    #[test]
    fn hostile_units_do_not_overflow() {
        assert!(View::new(0, 3, 0).is_none());
        assert!(View::new(4096, 3, 3).is_none());
        let huge = View::new(u64::MAX - 7, 2, 0).unwrap();
        assert_eq!(huge.piece(4096, 5), Some((5 * 4096, 4096)));
        assert_eq!(huge.piece(4096, u64::MAX), None);
        let other = View::new(u64::MAX - 7, 2, 1).unwrap();
        assert_eq!(other.piece(4096, 5), None);
        assert_eq!(other.next_block(4096, 100, 0), None);
        assert_eq!(other.pick(4096, 100, 12345), None);
        assert_eq!(huge.pick(4096, 100, 12345).map(|b| b < 100), Some(true));
        assert_eq!(other.pieces(1 << 30, 65536).count(), 0);
    }
}
