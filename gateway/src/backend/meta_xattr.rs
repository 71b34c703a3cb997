//! Extended attributes (RFC 8276) kept in object user metadata, for stores whose only
//! per-object storage besides the bytes is that metadata (`s3`; `memory` does the
//! same so that tests see the s3 rules without a server).
//!
//! Attribute `name` is the metadata entry `xa-<hex(name)>`: S3 lowercases metadata
//! names and allows only header characters in them, and hex keeps both the bytes and
//! their order. The gateway's own entries (mode, uid, gid, times: `fs::imp::attrs`)
//! never start with `xa-`, so a client's attribute can never be taken for one of
//! them, nor replace one. A value that is printable ASCII without edge spaces is
//! stored as `=value`, anything else as `~hex(value)`.
//!
//! Limits: every entry counts against `budget` bytes (its name and encoded value), so
//! the gateway's own metadata still fits S3's 2 KiB of user metadata per object;
//! a set past it is `TooLarge` (NFS4ERR_XATTR2BIG).

use super::{BResult, BackendError, UserMeta, XattrSet};

const PREFIX: &str = "xa-";

/// Lower-case hex of `b` (also the audit log's file handles and odd names).
pub(crate) fn hex(b: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn entry_name(name: &[u8]) -> String {
    format!("{PREFIX}{}", hex(name))
}

fn encode(val: &[u8]) -> String {
    let plain = val.iter().all(|b| (0x20..0x7f).contains(b))
        && val.first().is_none_or(|b| *b != b' ')
        && val.last().is_none_or(|b| *b != b' ');
    if plain {
        format!("={}", String::from_utf8_lossy(val))
    } else {
        format!("~{}", hex(val))
    }
}

/// A stored value, `None` when it is not one this module wrote (ignored).
fn decode(s: &str) -> Option<Vec<u8>> {
    if let Some(p) = s.strip_prefix('=') {
        return Some(p.as_bytes().to_vec());
    }
    unhex(s.strip_prefix('~')?)
}

/// The bytes the attribute entries of `meta` take.
fn used(meta: &UserMeta) -> usize {
    meta.iter()
        .filter(|(k, _)| k.starts_with(PREFIX))
        .map(|(k, v)| k.len() + v.len())
        .sum()
}

pub fn get(meta: &UserMeta, name: &[u8]) -> Option<Vec<u8>> {
    decode(meta.get(&entry_name(name))?)
}

/// Sets `name` in `meta` per `how` (see `Backend::xattr_set`) within `budget` bytes.
pub fn set(
    meta: &mut UserMeta,
    name: &[u8],
    val: &[u8],
    how: XattrSet,
    budget: usize,
) -> BResult<bool> {
    let k = entry_name(name);
    match (how, meta.contains_key(&k)) {
        (XattrSet::Create, true) => return Err(BackendError::AlreadyExists),
        (XattrSet::Replace, false) => return Ok(false),
        _ => {}
    }
    let v = encode(val);
    let old = meta.get(&k).map_or(0, |o| k.len() + o.len());
    if used(meta) - old + k.len() + v.len() > budget {
        return Err(BackendError::TooLarge);
    }
    meta.insert(k, v);
    Ok(true)
}

/// The names in `meta`, sorted by their bytes (hex keeps the order).
pub fn list(meta: &UserMeta) -> Vec<Vec<u8>> {
    meta.iter()
        .filter_map(|(k, v)| {
            let n = unhex(k.strip_prefix(PREFIX)?)?;
            decode(v).map(|_| n)
        })
        .collect()
}

pub fn remove(meta: &mut UserMeta, name: &[u8]) -> bool {
    meta.remove(&entry_name(name)).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_keeps_apart_from_gateway_metadata() {
        let mut m = UserMeta::new();
        m.insert("mode".into(), "100644".into());
        let names: [&[u8]; 3] = [b"mode", b"a b/\xff", b"Z"];
        for (i, n) in names.iter().enumerate() {
            let v = vec![i as u8; i * 3];
            assert_eq!(set(&mut m, n, &v, XattrSet::Either, 1000), Ok(true));
            assert_eq!(get(&m, n), Some(v));
        }
        assert_eq!(m.get("mode").map(String::as_str), Some("100644"));
        set(&mut m, b"t", b"text/plain", XattrSet::Either, 1000).unwrap();
        assert_eq!(m.get("xa-74").map(String::as_str), Some("=text/plain"));
        let mut want: Vec<Vec<u8>> = names.iter().map(|n| n.to_vec()).collect();
        want.push(b"t".to_vec());
        want.sort();
        assert_eq!(list(&m), want);
        assert_eq!(
            set(&mut m, b"Z", b"", XattrSet::Create, 1000),
            Err(BackendError::AlreadyExists)
        );
        assert_eq!(set(&mut m, b"no", b"", XattrSet::Replace, 1000), Ok(false));
        assert_eq!(
            set(&mut m, b"big", &[1; 600], XattrSet::Either, 1000),
            Err(BackendError::TooLarge)
        );
        assert!(remove(&mut m, b"Z"));
        assert!(!remove(&mut m, b"Z"));
        // Foreign entries that look like ours but do not decode are not listed.
        m.insert("xa-zz".into(), "=x".into());
        m.insert("xa-41".into(), "junk".into());
        assert!(!list(&m).contains(&b"A".to_vec()));
    }
}
