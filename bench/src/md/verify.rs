//! `md --verify`: what a file holds (a pattern derived from its name, so a file with
//! another file's content fails), what stat reports of it, and what a listing of a
//! directory shows (exactly the names created: none missing, none extra, none twice).

use crate::pattern::Pattern;
use std::collections::HashMap;

/// FNV-1a of the name: the pattern's file number, so every name has its own content.
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The `size` bytes the create phase writes into `name`.
pub fn content(name: &str, size: usize) -> Vec<u8> {
    let mut v = vec![0u8; size];
    Pattern::for_file(name_hash(name)).fill(0, &mut v);
    v
}

/// A read of `name` returned `data`: it must be exactly what was written.
pub fn check_content(name: &str, size: usize, data: &[u8]) -> Result<(), String> {
    if data.len() != size {
        return Err(format!(
            "{name}: read {} bytes, {size} were written",
            data.len()
        ));
    }
    match Pattern::for_file(name_hash(name)).first_mismatch(0, data) {
        None => Ok(()),
        Some(at) => Err(format!(
            "{name}: content differs from what was written at byte {at}"
        )),
    }
}

/// Stat of `name` reported `size` (`None`: the server sent no size).
pub fn check_size(name: &str, want: u64, size: Option<u64>) -> Result<(), String> {
    match size {
        Some(s) if s == want => Ok(()),
        Some(s) => Err(format!("{name}: stat says {s} bytes, {want} were written")),
        None => Err(format!("{name}: stat returned no size")),
    }
}

/// At most this many names are quoted per problem.
const QUOTE: usize = 5;

fn quote(what: &str, names: &[String]) -> String {
    let mut shown: Vec<&str> = names.iter().take(QUOTE).map(String::as_str).collect();
    if names.len() > QUOTE {
        shown.push("...");
    }
    format!("{} {what} ({})", names.len(), shown.join(", "))
}

/// A listing of `dir` (every page's names, in order) against the names created in it.
/// "." and ".." are not counted (NFSv3 servers list them, NFSv4.1 servers do not).
pub fn check_listing(dir: &str, expected: &[String], listed: &[Vec<u8>]) -> Result<(), String> {
    let mut seen: HashMap<&[u8], usize> = HashMap::new();
    for n in listed
        .iter()
        .filter(|n| !matches!(n.as_slice(), b"." | b".."))
    {
        *seen.entry(n.as_slice()).or_default() += 1;
    }
    let missing: Vec<String> = expected
        .iter()
        .filter(|n| !seen.contains_key(n.as_bytes()))
        .cloned()
        .collect();
    let want: std::collections::HashSet<&[u8]> = expected.iter().map(|n| n.as_bytes()).collect();
    let lossy = |n: &[u8]| String::from_utf8_lossy(n).into_owned();
    let mut extra: Vec<String> = seen
        .keys()
        .filter(|n| !want.contains(*n))
        .map(|n| lossy(n))
        .collect();
    let mut twice: Vec<String> = seen
        .iter()
        .filter(|(_, &k)| k > 1)
        .map(|(n, _)| lossy(n))
        .collect();
    extra.sort();
    twice.sort();
    let mut bad = Vec::new();
    if !missing.is_empty() {
        bad.push(quote("missing", &missing));
    }
    if !extra.is_empty() {
        bad.push(quote("not created but listed", &extra));
    }
    if !twice.is_empty() {
        bad.push(quote("listed more than once", &twice));
    }
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!("listing of {dir}: {}", bad.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn listed(v: &[&str]) -> Vec<Vec<u8>> {
        v.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    #[test]
    fn a_right_listing_passes_with_or_without_dot_entries() {
        let want = names(&["a", "b", "c"]);
        assert_eq!(check_listing("d", &want, &listed(&["c", "a", "b"])), Ok(()));
        assert_eq!(
            check_listing("d", &want, &listed(&[".", "..", "b", "a", "c"])),
            Ok(())
        );
        assert_eq!(check_listing("d", &[], &listed(&[".", ".."])), Ok(()));
    }

    #[test]
    fn wrong_listings_fail_and_say_why() {
        let want = names(&["a", "b", "c"]);
        let e = check_listing("d", &want, &listed(&["a", "b"])).unwrap_err();
        assert!(e.contains("1 missing (c)"), "{e}");
        let e = check_listing("d", &want, &listed(&["a", "b", "c", "x"])).unwrap_err();
        assert!(e.contains("1 not created but listed (x)"), "{e}");
        let e = check_listing("d", &want, &listed(&["a", "b", "b", "c"])).unwrap_err();
        assert!(e.contains("1 listed more than once (b)"), "{e}");
        // A page listed twice (a cookie not honoured) is caught as duplicates.
        let e = check_listing("d", &want, &listed(&["a", "b", "c", "a", "b", "c"])).unwrap_err();
        assert!(e.contains("3 listed more than once"), "{e}");
        let many: Vec<String> = (0..9).map(|i| format!("f{i}")).collect();
        let e = check_listing("d", &many, &[]).unwrap_err();
        assert!(e.contains("9 missing (f0, f1, f2, f3, f4, ...)"), "{e}");
    }

    #[test]
    fn content_is_per_name_and_checked_exactly() {
        let a = content("f.0.1", 3901);
        assert_eq!(a.len(), 3901);
        assert_ne!(a, content("f.0.2", 3901));
        assert_eq!(check_content("f.0.1", 3901, &a), Ok(()));
        let e = check_content("f.0.2", 3901, &a).unwrap_err();
        assert!(e.contains("content differs"), "{e}");
        let mut b = a.clone();
        b[3900] ^= 1;
        assert!(check_content("f.0.1", 3901, &b)
            .unwrap_err()
            .contains("at byte 3900"));
        assert!(check_content("f.0.1", 3901, &a[..100])
            .unwrap_err()
            .contains("read 100 bytes"));
        assert_eq!(check_content("x", 0, &[]), Ok(()));
    }

    #[test]
    fn sizes_must_match() {
        assert_eq!(check_size("f", 3901, Some(3901)), Ok(()));
        assert!(check_size("f", 3901, Some(0))
            .unwrap_err()
            .contains("stat says 0"));
        assert!(check_size("f", 3901, None).unwrap_err().contains("no size"));
    }
}
