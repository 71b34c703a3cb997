//! Memory registrations: one fabric's protection domain.
//!
//! Keys come from a process-wide bijective scramble of a counter (murmur3's finaliser,
//! keyed with per-process randomness from `RandomState`): unpredictable to a peer,
//! never repeated within a process (so a stale key can't name a newer region, and an
//! rkey of one fabric is never valid in another fabric of the same process).
//!
//! Every byte the provider touches in local memory is reached through a [`Span`], and
//! only this module builds spans, after checking key, access rights and bounds.

use crate::fabric::{access, Mr};
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// A checked range of registered memory, valid until the registration is removed (so
/// use it at once: spans are never stored).
pub struct Span {
    addr: u64,
    len: usize,
}

impl Span {
    pub fn addr(&self) -> u64 {
        self.addr
    }

    pub fn len(&self) -> usize {
        self.len
    }
}

/// Keys are already random: hashing them again is wasted time, spreading is enough.
#[derive(Default)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

pub type KeyMap<V> = HashMap<u32, V, BuildHasherDefault<KeyHasher>>;

#[derive(Debug, Clone, Copy)]
struct Region {
    addr: u64,
    len: u64,
    access: u32,
    rkey: u32,
}

impl Region {
    fn span(&self, addr: u64, len: u64, need: u32) -> Option<Span> {
        let end = addr.checked_add(len)?;
        let ok = self.access & need == need && addr >= self.addr && end <= self.addr + self.len;
        ok.then_some(Span {
            addr,
            len: usize::try_from(len).ok()?,
        })
    }
}

/// The registrations of one fabric, by lkey and by rkey.
#[derive(Default)]
pub struct MrTable {
    by_lkey: KeyMap<Region>,
    lkey_of_rkey: KeyMap<u32>,
}

impl MrTable {
    pub fn register(&mut self, addr: u64, len: u64, acc: u32) -> io::Result<Mr> {
        let all = access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ;
        // As ibv_reg_mr: remote write needs local write; unknown bits are refused.
        let bad_access =
            acc & !all != 0 || (acc & access::REMOTE_WRITE != 0 && acc & access::LOCAL_WRITE == 0);
        if bad_access || (addr == 0 && len > 0) || addr.checked_add(len).is_none() {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        let lkey = self.fresh_key();
        let rkey = self.fresh_key();
        self.by_lkey.insert(
            lkey,
            Region {
                addr,
                len,
                access: acc,
                rkey,
            },
        );
        self.lkey_of_rkey.insert(rkey, lkey);
        Ok(Mr {
            addr,
            len,
            lkey,
            rkey,
            access: acc,
        })
    }

    fn fresh_key(&self) -> u32 {
        loop {
            let k = next_key();
            if k != 0 && !self.by_lkey.contains_key(&k) && !self.lkey_of_rkey.contains_key(&k) {
                return k;
            }
        }
    }

    /// Removes the registration named by `lkey` (idempotent).
    pub fn deregister(&mut self, lkey: u32) {
        if let Some(r) = self.by_lkey.remove(&lkey) {
            self.lkey_of_rkey.remove(&r.rkey);
        }
    }

    /// Remote invalidation (Send-With-Invalidate): false if no region has `rkey`.
    pub fn invalidate(&mut self, rkey: u32) -> bool {
        match self.lkey_of_rkey.remove(&rkey) {
            Some(lkey) => {
                self.by_lkey.remove(&lkey);
                true
            }
            None => false,
        }
    }

    /// `[addr, addr+len)` of the region `lkey`, if it lies inside and has `need` rights.
    pub fn local(&self, lkey: u32, addr: u64, len: u64, need: u32) -> Option<Span> {
        self.by_lkey.get(&lkey)?.span(addr, len, need)
    }

    /// As [`MrTable::local`], for a peer naming the region by `rkey`.
    pub fn remote(&self, rkey: u32, addr: u64, len: u64, need: u32) -> Option<Span> {
        let lkey = self.lkey_of_rkey.get(&rkey)?;
        self.by_lkey.get(lkey)?.span(addr, len, need)
    }
}

/// murmur3 fmix32: a bijection on u32, so distinct counters give distinct keys.
fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

fn next_key() -> u32 {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    static SECRET: OnceLock<(u32, u32)> = OnceLock::new();
    let (add, xor) = *SECRET.get_or_init(|| {
        let mut h = RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        h.write_u64(nanos);
        let r = h.finish();
        (r as u32, (r >> 32) as u32)
    });
    fmix32(COUNTER.fetch_add(1, Ordering::Relaxed).wrapping_add(add)) ^ xor
}
