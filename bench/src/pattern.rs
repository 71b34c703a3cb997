//! The deterministic content bench writes and checks.
//!
//! Every aligned 8-byte word of file `i` at offset `off` is
//! `(off / 8) * GOLDEN ^ seed(i)` (little-endian), with `seed(i)` a SplitMix64 hash of
//! the file's index in the file set. So data is only accepted at the offset and in the
//! file it was written for: a block from another offset differs (the multiplier is odd,
//! so word numbers map one-to-one), a block from another file differs by
//! `seed(i) ^ seed(j) != 0`, and zeros (a hole, a lost write) match almost nowhere.

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pattern {
    seed: u64,
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(GOLDEN);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Pattern {
    /// The pattern of file number `index` of the file set.
    pub fn for_file(index: u64) -> Pattern {
        Pattern {
            seed: splitmix64(index ^ 0x6e66_7367_7762_656e), // "nfsgwben"
        }
    }

    /// The eight pattern bytes of the aligned word holding `off`.
    fn word(&self, off: u64) -> [u8; 8] {
        ((off / 8).wrapping_mul(GOLDEN) ^ self.seed).to_le_bytes()
    }

    fn byte(&self, off: u64) -> u8 {
        self.word(off)[(off % 8) as usize]
    }

    /// Fills `dst` with the pattern bytes at `off..off + dst.len()`.
    pub fn fill(&self, off: u64, dst: &mut [u8]) {
        let head = ((8 - off % 8) % 8).min(dst.len() as u64) as usize;
        let (a, rest) = dst.split_at_mut(head);
        for (i, b) in a.iter_mut().enumerate() {
            *b = self.byte(off + i as u64);
        }
        let mut at = off + head as u64;
        let mut words = rest.chunks_exact_mut(8);
        for w in &mut words {
            w.copy_from_slice(&self.word(at));
            at += 8;
        }
        for (i, b) in words.into_remainder().iter_mut().enumerate() {
            *b = self.byte(at + i as u64);
        }
    }

    /// Whether `data` is exactly the pattern at `off..off + data.len()`.
    #[cfg(test)]
    pub fn check(&self, off: u64, data: &[u8]) -> bool {
        self.first_mismatch(off, data).is_none()
    }

    /// The offset (in the file) of the first byte of `data` that is not the pattern.
    pub fn first_mismatch(&self, off: u64, data: &[u8]) -> Option<u64> {
        let head = ((8 - off % 8) % 8).min(data.len() as u64) as usize;
        let (a, rest) = data.split_at(head);
        if let Some(i) = (0..a.len()).find(|&i| a[i] != self.byte(off + i as u64)) {
            return Some(off + i as u64);
        }
        let mut at = off + head as u64;
        let words = rest.chunks_exact(8);
        let tail = words.remainder();
        for w in words {
            if w != self.word(at) {
                let want = self.word(at);
                let i = (0..8).find(|&i| w[i] != want[i]).unwrap_or(0);
                return Some(at + i as u64);
            }
            at += 8;
        }
        (0..tail.len())
            .find(|&i| tail[i] != self.byte(at + i as u64))
            .map(|i| at + i as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_is_deterministic_and_position_dependent() {
        let p = Pattern::for_file(0);
        let mut a = [0u8; 64];
        p.fill(100, &mut a);
        assert!(p.check(100, &a));
        assert!(!p.check(101, &a));
        assert!(!p.check(108, &a));
        let mut b = [0u8; 32];
        p.fill(132, &mut b);
        assert_eq!(&a[32..], &b[..]);
        assert_eq!(Pattern::for_file(0), p);
    }

    #[test]
    fn pattern_depends_on_the_file() {
        let mut a = vec![0u8; 4096];
        Pattern::for_file(3).fill(8192, &mut a);
        assert!(Pattern::for_file(3).check(8192, &a));
        for other in [0, 2, 4, 1000] {
            assert!(!Pattern::for_file(other).check(8192, &a), "file {other}");
        }
        // Zeros (a hole) are not the pattern.
        assert!(!Pattern::for_file(3).check(0, &[0u8; 4096]));
    }

    #[test]
    fn unaligned_fills_match_aligned_ones_and_mismatches_are_located() {
        let p = Pattern::for_file(7);
        let mut whole = vec![0u8; 256];
        p.fill(0, &mut whole);
        for start in 0..20usize {
            for len in [0usize, 1, 7, 8, 9, 100] {
                let mut part = vec![0u8; len];
                p.fill(start as u64, &mut part);
                assert_eq!(&part[..], &whole[start..start + len], "{start}+{len}");
            }
        }
        let mut bad = whole.clone();
        bad[77] ^= 1;
        assert_eq!(p.first_mismatch(0, &bad), Some(77));
        assert_eq!(p.first_mismatch(5, &bad[5..]), Some(77));
        bad[3] ^= 1;
        assert_eq!(p.first_mismatch(0, &bad), Some(3));
        assert_eq!(p.first_mismatch(0, &whole), None);
    }
}
