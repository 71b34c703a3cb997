//! The 12-byte `other` field of the stateids this gateway issues (RFC 8881 §8.2.2):
//! a boot verifier, the kind of state, and a counter unique in this process.
//!
//! `[0..4]` boot verifier (seconds at start, never 0, so no issued stateid can equal
//! a special one), `[4]` kind, `[5..12]` a 56-bit counter. A stateid whose boot
//! verifier is not ours comes from a previous run: NFSv4.1 answers
//! NFS4ERR_BAD_STATEID for it (the client reclaims by CLAIM_PREVIOUS instead,
//! §8.4.2.1), as knfsd does when a session is present.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// What a stateid names (byte 4 of `other`): lets TEST_STATEID / FREE_STATEID route a
/// stateid to the table that owns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Open = 1,
    Lock = 2,
    Delegation = 3,
    /// An asynchronous COPY's callback id (RFC 7862 §15.2.3, `state::offload`).
    Copy = 4,
    /// A pNFS layout stateid (RFC 8881 §12.5.3, `state::layouts`).
    Layout = 5,
}

impl Kind {
    pub fn of(other: &[u8; 12]) -> Option<Kind> {
        match other[4] {
            1 => Some(Kind::Open),
            2 => Some(Kind::Lock),
            3 => Some(Kind::Delegation),
            4 => Some(Kind::Copy),
            5 => Some(Kind::Layout),
            _ => None,
        }
    }
}

/// The boot verifier of this process: seconds since the epoch at first use (never 0).
pub fn boot_verifier() -> u32 {
    static BOOT: OnceLock<u32> = OnceLock::new();
    *BOOT.get_or_init(|| {
        let s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as u32)
            .unwrap_or(1);
        s.max(1)
    })
}

/// A fresh `other` of `kind` under `boot` (process-wide counter: unique across the
/// open, lock and delegation tables).
pub fn fresh_other(boot: u32, kind: Kind) -> [u8; 12] {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut o = [0u8; 12];
    o[..4].copy_from_slice(&boot.to_be_bytes());
    o[4] = kind as u8;
    o[5..].copy_from_slice(&n.to_be_bytes()[1..]);
    o
}

/// The boot verifier an `other` was issued under.
pub fn boot_of(other: &[u8; 12]) -> u32 {
    u32::from_be_bytes([other[0], other[1], other[2], other[3]])
}

/// The next seqid of a stateid (RFC 8881 §8.2.2: wraps from 0xffffffff to 1; 0 is
/// reserved for "the current one").
pub fn next_seqid(s: u32) -> u32 {
    if s == u32::MAX {
        1
    } else {
        s + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_encodes_boot_kind_and_is_unique() {
        let a = fresh_other(7, Kind::Open);
        let b = fresh_other(7, Kind::Lock);
        assert_ne!(a, b);
        assert_eq!(boot_of(&a), 7);
        assert_eq!(Kind::of(&a), Some(Kind::Open));
        assert_eq!(Kind::of(&b), Some(Kind::Lock));
        assert_eq!(Kind::of(&[0; 12]), None);
        assert_ne!(boot_verifier(), 0);
    }

    #[test]
    fn seqid_wraps_past_zero() {
        assert_eq!(next_seqid(1), 2);
        assert_eq!(next_seqid(u32::MAX), 1);
    }
}
