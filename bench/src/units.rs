//! Sizes on the command line ("4k", "1m", "64m", "4096") and their display.

/// Parses a byte count: a plain number, or a number with a binary suffix
/// `k`/`m`/`g`/`t` (KiB, MiB, GiB, TiB; case-insensitive, an optional trailing `b`/`ib`
/// is accepted, so `64MiB` and `64m` are the same).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t
        .strip_suffix("ib")
        .or_else(|| t.strip_suffix('b'))
        .unwrap_or(&t);
    let (num, shift) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 10),
        Some('m') => (&t[..t.len() - 1], 20),
        Some('g') => (&t[..t.len() - 1], 30),
        Some('t') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let n: u64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a size (examples: 4096, 4k, 1m, 64m, 2g)"))?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// A byte count in the largest binary unit that divides it exactly ("64m", "4k", "1000").
pub fn format_size(n: u64) -> String {
    for (shift, unit) in [(40, "t"), (30, "g"), (20, "m"), (10, "k")] {
        if n >= 1 << shift && n.is_multiple_of(1 << shift) {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_and_without_suffixes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("64m"), Ok(64 << 20));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert_eq!(parse_size("1t"), Ok(1 << 40));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("512b"), Ok(512));
        for bad in ["", "k", "1.5m", "-1", "4x", "m4", "99999999999999999999"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
        assert!(parse_size("100000000t").is_err());
    }

    #[test]
    fn sizes_format_in_the_largest_exact_unit() {
        assert_eq!(format_size(4096), "4k");
        assert_eq!(format_size(64 << 20), "64m");
        assert_eq!(format_size(1000), "1000");
        assert_eq!(format_size(1536), "1536");
        assert_eq!(format_size(0), "0");
        for n in [1u64, 4096, 3 << 30, 12345] {
            assert_eq!(parse_size(&format_size(n)), Ok(n));
        }
    }
}
