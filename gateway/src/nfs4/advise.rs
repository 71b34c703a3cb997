//! IO_ADVISE's hints (RFC 7862 §15.5.1, IO_ADVISE_type4: bit numbers of a bitmap4)
//! as the file service's read advice (`fs::v42::ReadAdvice`), and the hints a
//! reply names as acted on (§15.5.3: "the server MAY ignore the advice"; the reply's
//! bitmap holds only the hints it honours).

use crate::fs::v42::ReadAdvice;

pub const NORMAL: u32 = 0;
pub const SEQUENTIAL: u32 = 1;
pub const RANDOM: u32 = 3;
pub const WILLNEED: u32 = 4;
pub const DONTNEED: u32 = 6;

/// The advice the first bitmap word asks for and the hints it stands for (the
/// reply's word when the store acts on it). SEQUENTIAL and WILLNEED raise
/// read-ahead, RANDOM and DONTNEED turn it off, NORMAL alone clears earlier advice.
/// Hints that pull both ways are advice no store can follow: `None`, as is a set
/// with none of these (SEQUENTIAL_BACKWARDS, NOREUSE, READ, WRITE, INIT_PROXIMITY,
/// WILLNEED_OPPORTUNISTIC are not acted on).
pub fn of(word: u32) -> Option<(ReadAdvice, u32)> {
    let ahead = word & (1 << SEQUENTIAL | 1 << WILLNEED);
    let no = word & (1 << RANDOM | 1 << DONTNEED);
    match (ahead != 0, no != 0) {
        (true, false) => Some((ReadAdvice::Ahead, ahead)),
        (false, true) => Some((ReadAdvice::NoAhead, no)),
        (true, true) => None,
        (false, false) if word & 1 << NORMAL != 0 => Some((ReadAdvice::Normal, 1 << NORMAL)),
        (false, false) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_map_to_read_advice_and_the_bits_honoured() {
        let b = |n: u32| 1u32 << n;
        assert_eq!(of(b(SEQUENTIAL)), Some((ReadAdvice::Ahead, b(SEQUENTIAL))));
        // Bits not acted on (READ = 8, NOREUSE = 7) are left out of the answer.
        assert_eq!(
            of(b(WILLNEED) | b(SEQUENTIAL) | b(8) | b(7)),
            Some((ReadAdvice::Ahead, b(WILLNEED) | b(SEQUENTIAL)))
        );
        assert_eq!(
            of(b(RANDOM) | b(DONTNEED) | b(NORMAL)),
            Some((ReadAdvice::NoAhead, b(RANDOM) | b(DONTNEED)))
        );
        assert_eq!(of(b(NORMAL)), Some((ReadAdvice::Normal, b(NORMAL))));
        // Contradictory, or nothing this server acts on.
        assert_eq!(of(b(SEQUENTIAL) | b(RANDOM)), None);
        assert_eq!(of(b(WILLNEED) | b(DONTNEED)), None);
        assert_eq!(of(0), None);
        assert_eq!(of(b(2) | b(5) | b(9) | b(10) | b(31)), None);
    }
}
