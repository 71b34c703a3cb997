//! Hostile argument values: the edges of every integer width, names that break path
//! rules, mangled file handles, impossible times, every `sattr3` combination and
//! hostile AUTH_SYS credentials. Each generator mixes in ordinary values too, so
//! calls still reach the code behind the argument checks.

use super::rng::Rng;
use super::wire::{Cred, Enc};

/// 64-bit offsets, sizes and cookies around every boundary a server computes with.
pub const U64_EDGES: &[u64] = &[
    0,
    1,
    2,
    4095,
    4096,
    4097,
    8191,
    8192,
    (1 << 20) - 1,
    1 << 20,
    (1 << 20) + 1,
    (1 << 31) - 1,
    1 << 31,
    (1 << 31) + 1,
    (1 << 32) - 2,
    (1 << 32) - 1,
    1 << 32,
    (1 << 32) + 1,
    (1 << 63) - 1,
    1 << 63,
    (1 << 63) + 1,
    u64::MAX - 4096,
    u64::MAX - 4095, // 2^64 - 4096
    u64::MAX - 4094, // 2^64 - 4095
    u64::MAX - 4093,
    u64::MAX - 1,
    u64::MAX,
];

/// 32-bit counts, modes, ids and lengths.
pub const U32_EDGES: &[u32] = &[
    0,
    1,
    2,
    3,
    511,
    512,
    4095,
    4096,
    4097,
    8192,
    65535,
    65536,
    (1 << 20) - 1,
    1 << 20,
    (1 << 20) + 1,
    (1 << 20) + 4096,
    (1 << 31) - 1,
    1 << 31,
    (1 << 31) + 1,
    u32::MAX - 4095,
    u32::MAX - 1,
    u32::MAX,
];

/// Names a well-formed workload would also use, so hostile calls meet real entries.
pub const PLAIN_NAMES: &[&[u8]] = &[b"f0", b"f1", b"f2", b"f3", b"d0", b"d1", b"l0", b"n0"];

/// A u64: an edge (maybe nudged by ±1..3) or a small ordinary value.
pub fn u64v(r: &mut Rng) -> u64 {
    match r.below(6) {
        0 => r.below(1 << 18) as u64,
        1 => r.next_u64(),
        2 => r
            .pick(U64_EDGES)
            .wrapping_add(r.below(7) as u64)
            .wrapping_sub(3),
        _ => *r.pick(U64_EDGES),
    }
}

/// A u32: an edge (maybe nudged) or a small ordinary value.
pub fn u32v(r: &mut Rng) -> u32 {
    match r.below(6) {
        0 => r.below(1 << 16) as u32,
        1 => r.u32(),
        2 => r
            .pick(U32_EDGES)
            .wrapping_add(r.below(7) as u32)
            .wrapping_sub(3),
        _ => *r.pick(U32_EDGES),
    }
}

/// A file name: plain, empty, at and past NAME_MAX, path-like, with NUL, dot names,
/// non-UTF-8.
pub fn name(r: &mut Rng) -> Vec<u8> {
    match r.below(16) {
        0 => Vec::new(),
        1 => vec![b'a'; 255],
        2 => vec![b'b'; 256],
        3 => vec![b'c'; 1024],
        4 => b"a/b".to_vec(),
        5 => b"/".to_vec(),
        6 => b"x\0y".to_vec(),
        7 => b"..".to_vec(),
        8 => b".".to_vec(),
        9 => vec![0xff, 0xfe, 0x80, b'z'],
        10 => {
            let n = 1 + r.below(40);
            r.bytes(n)
        }
        11 => b"../../../etc/passwd".to_vec(),
        _ => r.pick(PLAIN_NAMES).to_vec(),
    }
}

/// A path for MOUNT or SYMLINK: real, relative, long, with NUL, non-UTF-8.
pub fn path(r: &mut Rng) -> Vec<u8> {
    match r.below(10) {
        0 => Vec::new(),
        1 => b"/".to_vec(),
        2 => b"/d0".to_vec(),
        3 => b"/../..".to_vec(),
        4 => vec![b'/'; 1024],
        5 => {
            let mut p = b"/".to_vec();
            p.extend([b'p'; 1100]);
            p
        }
        6 => b"/a\0b".to_vec(),
        7 => vec![b'/', 0xff, 0xfe],
        8 => b"f0".to_vec(),
        _ => b"/nope/./../x".to_vec(),
    }
}

/// A file handle: one of the real ones, or a real one truncated, bit-flipped or
/// extended, or garbage of a hostile length.
pub fn handle(r: &mut Rng, real: &[Vec<u8>]) -> Vec<u8> {
    let base = if real.is_empty() {
        r.bytes(32)
    } else {
        r.pick(real).clone()
    };
    match r.below(16) {
        0 => {
            let n = r.below(base.len().max(1));
            base[..n].to_vec()
        }
        1 => {
            let mut h = base;
            if !h.is_empty() {
                let i = r.below(h.len());
                h[i] ^= 1 << r.below(8);
            }
            h
        }
        2 => r.bytes(64),
        3 => r.bytes(65),
        4 => Vec::new(),
        5 => {
            let mut h = base;
            let n = 1 + r.below(40);
            h.extend(r.bytes(n));
            h
        }
        _ => base,
    }
}

/// nfstime3, sometimes with nanoseconds >= 10^9.
fn time(r: &mut Rng, e: &mut Enc) {
    let secs = if r.chance(1, 2) {
        r.u32()
    } else {
        *r.pick(U32_EDGES)
    };
    let nsecs = *r.pick(&[0, 1, 999_999_999, 1_000_000_000, 1_000_000_001, u32::MAX]);
    e.u32(secs).u32(nsecs);
}

/// A time_how discriminant for set_atime/set_mtime: 0 don't change, 1 server time,
/// 2 client time (followed by an nfstime3), or an invalid one.
fn set_time(r: &mut Rng, how: u32, e: &mut Enc) {
    e.u32(how);
    if how == 2 {
        time(r, e);
    }
}

/// sattr3. `combo` (mod 144) walks every combination of the four set_* booleans and
/// the two three-way time discriminants; a few calls use invalid discriminants.
pub fn sattr(r: &mut Rng, combo: usize, e: &mut Enc) {
    let c = combo % 144;
    let bits = c % 16;
    let (at, mt) = ((c / 16) % 3, c / 48);
    let bad = r.chance(1, 32);
    let flag = |r: &mut Rng, on: bool| {
        if bad && r.chance(1, 4) {
            *r.pick(&[2u32, u32::MAX])
        } else {
            on as u32
        }
    };
    let f = flag(r, bits & 1 != 0);
    e.u32(f);
    if f == 1 {
        e.u32(*r.pick(&[0o644, 0o7777, 0, u32::MAX, 0o40755, 0o777]));
    }
    for bit in [2, 4] {
        let f = flag(r, bits & bit != 0);
        e.u32(f);
        if f == 1 {
            e.u32(*r.pick(&[0, 65534, u32::MAX, 1000]));
        }
    }
    let f = flag(r, bits & 8 != 0);
    e.u32(f);
    if f == 1 {
        e.u64(u64v(r));
    }
    let at = if bad && r.chance(1, 3) { 3 } else { at as u32 };
    set_time(r, at, e);
    let mt = if bad && r.chance(1, 3) {
        u32::MAX
    } else {
        mt as u32
    };
    set_time(r, mt, e);
}

/// A credential: mostly root (so calls reach deep code), sometimes nobody, uid
/// 2^32-1, many groups, AUTH_NONE, or an over-long machine name.
pub fn cred(r: &mut Rng) -> Cred {
    if r.chance(1, 20) {
        return Cred::None;
    }
    let uid = *r.pick(&[0, 0, 0, 0, 0, 0, 0, 65534, u32::MAX, 1000]);
    let ngids = *r.pick(&[0usize, 1, 1, 1, 1, 1, 1, 16, 16, 17, 64]);
    let machine = match r.below(24) {
        0 => vec![b'm'; 256],
        1 => Vec::new(),
        _ => b"fuzz".to_vec(),
    };
    Cred::Sys {
        machine,
        uid,
        gid: *r.pick(&[0, 0, 0, 65534, u32::MAX]),
        gids: (0..ngids).map(|i| i as u32).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sattr_walks_all_combinations_with_well_formed_lengths() {
        let mut r = Rng::new(1);
        let mut lens = std::collections::BTreeSet::new();
        for c in 0..144 {
            let mut e = Enc::default();
            sattr(&mut r, c, &mut e);
            assert_eq!(e.0.len() % 4, 0);
            lens.insert(e.0.len());
        }
        // From all-off (6 words) to all-on with client times (6+1+2+2+3+ (1+2)*2 ...).
        assert!(lens.contains(&24));
        assert!(lens.len() > 5);
    }

    #[test]
    fn handles_cover_hostile_lengths() {
        let mut r = Rng::new(3);
        let real = vec![vec![7u8; 36]];
        let lens: std::collections::BTreeSet<usize> =
            (0..500).map(|_| handle(&mut r, &real).len()).collect();
        for l in [0, 36, 64, 65] {
            assert!(lens.contains(&l), "{l} in {lens:?}");
        }
    }
}
