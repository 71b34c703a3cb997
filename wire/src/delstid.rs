//! RFC 9754 ("Extending the Opening of Files in NFSv4.2"): the numbers of its OPEN
//! flags, delegation types and attributes, and the XDR of the two attribute types it
//! adds — `open_arguments4` (what OPEN supports, §4.1) and the `nfstime4` of
//! `time_deleg_access` / `time_deleg_modify` (§6.1). Plain bytes, no XDR cursor, so
//! the server (which writes them in GETATTR and reads them from CB_GETATTR replies)
//! and the clients of the tests share one definition without the `client` feature.
//! Minor version 2 only: a 4.1 COMPOUND knows none of this.

/// OPEN4_SHARE_ACCESS_WANT_DELEG_TIMESTAMPS (RFC 9754 §6): the client would hold the
/// file's access and modify times with its delegation.
pub const OPEN4_SHARE_ACCESS_WANT_DELEG_TIMESTAMPS: u32 = 0x10_0000;
/// OPEN4_SHARE_ACCESS_WANT_OPEN_XOR_DELEGATION (RFC 9754 §5): a delegation stateid or
/// an open stateid, never both.
pub const OPEN4_SHARE_ACCESS_WANT_OPEN_XOR_DELEGATION: u32 = 0x20_0000;
/// OPEN4_RESULT_NO_OPEN_STATEID (RFC 9754 §5): the reply's open stateid is not one
/// (a delegation was granted to an OPEN asking for one xor the other).
pub const OPEN4_RESULT_NO_OPEN_STATEID: u32 = 0x10;

/// open_delegation_type4 values RFC 9754 §6 adds: a read / write delegation that
/// also delegates the file's times to the client.
pub const OPEN_DELEGATE_READ_ATTRS_DELEG: u32 = 4;
pub const OPEN_DELEGATE_WRITE_ATTRS_DELEG: u32 = 5;

/// The attributes (RFC 9754 §6.1, §4.1): recommended, minor version 2.
pub const FATTR4_TIME_DELEG_ACCESS: u32 = 84;
pub const FATTR4_TIME_DELEG_MODIFY: u32 = 85;
pub const FATTR4_OPEN_ARGUMENTS: u32 = 86;

/// open_args_share_access4 (RFC 9754 §4.1): bit numbers in `oa_share_access`.
pub const OPEN_ARGS_SHARE_ACCESS_READ: u32 = 1;
pub const OPEN_ARGS_SHARE_ACCESS_WRITE: u32 = 2;
pub const OPEN_ARGS_SHARE_ACCESS_BOTH: u32 = 3;
/// open_args_share_deny4: bit numbers in `oa_share_deny`.
pub const OPEN_ARGS_SHARE_DENY_NONE: u32 = 0;
pub const OPEN_ARGS_SHARE_DENY_READ: u32 = 1;
pub const OPEN_ARGS_SHARE_DENY_WRITE: u32 = 2;
pub const OPEN_ARGS_SHARE_DENY_BOTH: u32 = 3;
/// open_args_share_access_want4: bit numbers in `oa_share_access_want`.
pub const OPEN_ARGS_SHARE_ACCESS_WANT_ANY_DELEG: u32 = 3;
pub const OPEN_ARGS_SHARE_ACCESS_WANT_NO_DELEG: u32 = 4;
pub const OPEN_ARGS_SHARE_ACCESS_WANT_CANCEL: u32 = 5;
pub const OPEN_ARGS_SHARE_ACCESS_WANT_SIGNAL_DELEG_WHEN_RESRC_AVAIL: u32 = 17;
pub const OPEN_ARGS_SHARE_ACCESS_WANT_PUSH_DELEG_WHEN_UNCONTENDED: u32 = 18;
pub const OPEN_ARGS_SHARE_ACCESS_WANT_DELEG_TIMESTAMPS: u32 = 20;
pub const OPEN_ARGS_SHARE_ACCESS_WANT_OPEN_XOR_DELEGATION: u32 = 21;
/// open_args_open_claim4: bit numbers in `oa_open_claim` (the claim types' values).
pub const OPEN_ARGS_OPEN_CLAIM_NULL: u32 = 0;
pub const OPEN_ARGS_OPEN_CLAIM_PREVIOUS: u32 = 1;
pub const OPEN_ARGS_OPEN_CLAIM_DELEGATE_CUR: u32 = 2;
pub const OPEN_ARGS_OPEN_CLAIM_DELEGATE_PREV: u32 = 3;
pub const OPEN_ARGS_OPEN_CLAIM_FH: u32 = 4;
pub const OPEN_ARGS_OPEN_CLAIM_DELEG_CUR_FH: u32 = 5;
pub const OPEN_ARGS_OPEN_CLAIM_DELEG_PREV_FH: u32 = 6;
/// open_args_createmode4: bit numbers in `oa_create_mode`.
pub const OPEN_ARGS_CREATEMODE_UNCHECKED4: u32 = 0;
pub const OPEN_ARGS_CREATE_MODE_GUARDED: u32 = 1;
pub const OPEN_ARGS_CREATEMODE_EXCLUSIVE4: u32 = 2;
pub const OPEN_ARGS_CREATE_MODE_EXCLUSIVE4_1: u32 = 3;

/// Largest bitmap4 length `OpenArguments::decode` reads (a longer one is hostile).
const MAX_WORDS: usize = 8;

/// The bit of one enum value in a one-word bitmap (every value above is below 32).
pub const fn bit(v: u32) -> u32 {
    1 << v
}

/// open_arguments4 (RFC 9754 §4.1): five bitmap4s, each naming the values of one OPEN
/// argument the server supports. Every value RFC 9754 defines is below 32, so each
/// bitmap is one word here; `decode` refuses bits past the first word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpenArguments {
    pub share_access: u32,
    pub share_deny: u32,
    pub share_access_want: u32,
    pub open_claim: u32,
    pub create_mode: u32,
}

impl OpenArguments {
    fn fields(&self) -> [u32; 5] {
        [
            self.share_access,
            self.share_deny,
            self.share_access_want,
            self.open_claim,
            self.create_mode,
        ]
    }

    /// The XDR: each bitmap4 as its shortest form (no words when empty, RFC 8881
    /// §3.3.7 allows trailing zero words to be left out).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(40);
        for w in self.fields() {
            if w == 0 {
                out.extend_from_slice(&0u32.to_be_bytes());
            } else {
                out.extend_from_slice(&1u32.to_be_bytes());
                out.extend_from_slice(&w.to_be_bytes());
            }
        }
        out
    }

    /// Decodes one from the front of `b`: the value and the bytes it took. `None`
    /// when short, a bitmap longer than 8 words, or a bit past the first word.
    pub fn decode(b: &[u8]) -> Option<(OpenArguments, usize)> {
        let mut at = 0;
        let mut word = || -> Option<u32> {
            let v = u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?);
            at += 4;
            Some(v)
        };
        let mut f = [0u32; 5];
        for slot in f.iter_mut() {
            let n = word()? as usize;
            if n > MAX_WORDS {
                return None;
            }
            for i in 0..n {
                let v = word()?;
                if i == 0 {
                    *slot = v;
                } else if v != 0 {
                    return None;
                }
            }
        }
        let [share_access, share_deny, share_access_want, open_claim, create_mode] = f;
        Some((
            OpenArguments {
                share_access,
                share_deny,
                share_access_want,
                open_claim,
                create_mode,
            },
            at,
        ))
    }
}

/// nfstime4 (RFC 8881 §3.3.1), the type of time_deleg_access and time_deleg_modify:
/// int64 seconds, uint32 nanoseconds.
pub fn encode_time(sec: i64, nsec: u32) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[..8].copy_from_slice(&sec.to_be_bytes());
    b[8..].copy_from_slice(&nsec.to_be_bytes());
    b
}

/// An nfstime4 from the front of `b`, or `None` when short. Its validity is
/// `time_valid`'s question: the XDR decodes any nanoseconds.
pub fn decode_time(b: &[u8]) -> Option<(i64, u32)> {
    let sec = i64::from_be_bytes(b.get(..8)?.try_into().ok()?);
    let nsec = u32::from_be_bytes(b.get(8..12)?.try_into().ok()?);
    Some((sec, nsec))
}

/// Whether an nfstime4 names a time: nanoseconds below 10^9 (RFC 8881 §3.3.1; a
/// server answers NFS4ERR_INVAL to one that does not).
pub fn time_valid(_sec: i64, nsec: u32) -> bool {
    nsec < 1_000_000_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_arguments_are_five_bitmaps_in_order() {
        let oa = OpenArguments {
            share_access: bit(OPEN_ARGS_SHARE_ACCESS_READ) | bit(OPEN_ARGS_SHARE_ACCESS_BOTH),
            share_deny: 0,
            share_access_want: bit(OPEN_ARGS_SHARE_ACCESS_WANT_OPEN_XOR_DELEGATION),
            open_claim: bit(OPEN_ARGS_OPEN_CLAIM_NULL),
            create_mode: bit(OPEN_ARGS_CREATE_MODE_EXCLUSIVE4_1),
        };
        let b = oa.encode();
        let words: Vec<u32> = b
            .chunks(4)
            .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
            .collect();
        // share_access {1, 0b1010}, share_deny {} (no words), want {1, 1 << 21}, ...
        assert_eq!(words, [1, 0b1010, 0, 1, 1 << 21, 1, 1, 1, 1 << 3]);
        assert_eq!(OpenArguments::decode(&b), Some((oa, b.len())));
        // What follows is left for the caller.
        let mut more = b.clone();
        more.extend_from_slice(&[0, 0, 0, 7]);
        assert_eq!(OpenArguments::decode(&more), Some((oa, b.len())));
    }

    #[test]
    fn open_arguments_decode_refuses_short_long_and_unknown_bits() {
        let b = OpenArguments::default().encode();
        assert_eq!(b, [0u8; 20], "five empty bitmaps");
        assert!(OpenArguments::decode(&b[..16]).is_none(), "short");
        // A second word of zero is the same bitmap; a non-zero one is a value of 32
        // or more, which RFC 9754 does not define.
        let mut two = vec![0, 0, 0, 2, 0, 0, 0, 8, 0, 0, 0, 0];
        two.extend_from_slice(&[0; 16]);
        assert_eq!(
            OpenArguments::decode(&two).map(|(o, _)| o.share_access),
            Some(8)
        );
        two[11] = 1;
        assert!(OpenArguments::decode(&two).is_none());
        let mut huge = 9u32.to_be_bytes().to_vec();
        huge.extend_from_slice(&[0; 64]);
        assert!(OpenArguments::decode(&huge).is_none(), "nine words");
        assert!(OpenArguments::decode(&u32::MAX.to_be_bytes()).is_none());
    }

    #[test]
    fn the_numbers_are_rfc_9754s() {
        // §5, §6: the two new want flags sit above the 4.1 ones (0xff00 want,
        // 0x30000 when-flags), each its own bit.
        assert_eq!(OPEN4_SHARE_ACCESS_WANT_DELEG_TIMESTAMPS & 0x3_ff03, 0);
        assert_eq!(OPEN4_SHARE_ACCESS_WANT_OPEN_XOR_DELEGATION & 0x3_ff03, 0);
        assert_eq!(
            OPEN4_SHARE_ACCESS_WANT_DELEG_TIMESTAMPS & OPEN4_SHARE_ACCESS_WANT_OPEN_XOR_DELEGATION,
            0
        );
        // The attributes follow 4.2's last (xattr_support 82, offline 83).
        assert_eq!(
            [
                FATTR4_TIME_DELEG_ACCESS,
                FATTR4_TIME_DELEG_MODIFY,
                FATTR4_OPEN_ARGUMENTS
            ],
            [84, 85, 86]
        );
        assert_eq!(
            [
                OPEN_DELEGATE_READ_ATTRS_DELEG,
                OPEN_DELEGATE_WRITE_ATTRS_DELEG
            ],
            [4, 5]
        );
        // The want enum mirrors the share_access want values (0x300 → 3, ...).
        assert_eq!(OPEN_ARGS_SHARE_ACCESS_WANT_ANY_DELEG, 0x300 >> 8);
        assert_eq!(OPEN_ARGS_SHARE_ACCESS_WANT_CANCEL, 0x500 >> 8);
    }

    #[test]
    fn nfstime4_round_trips_and_checks_nanoseconds() {
        for (s, n) in [(0, 0), (-1, 999_999_999), (i64::MAX, 1), (1 << 40, 5)] {
            let b = encode_time(s, n);
            assert_eq!(decode_time(&b), Some((s, n)));
            assert!(time_valid(s, n));
        }
        assert_eq!(encode_time(1, 2), [0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2]);
        assert!(decode_time(&[0; 11]).is_none());
        assert!(!time_valid(0, 1_000_000_000));
        assert!(!time_valid(7, u32::MAX));
    }
}
