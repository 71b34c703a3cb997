//! The handle MAC key of an s3 bucket: every gateway serving the bucket must use the
//! same one, or handles one gateway hands out are BADHANDLE at another.
//!
//! Two ways to agree:
//! - `handle_key_file`: the operator gives every gateway the same secret (64 hex
//!   digits). Nothing to agree on; recommended for several gateways.
//! - Through the bucket, without relying on `If-None-Match: *` (Garage ignores it, so
//!   "create if absent" is not atomic there and two gateways starting together would
//!   each keep their own key). Each gateway that finds no key writes a candidate under
//!   a name of its own (`.nfsgw-tmp.handle-keys/<random>`: candidates are never
//!   overwritten, so nothing one gateway saw can change under it), waits `SETTLE`,
//!   lists the candidates again and adopts the EARLIEST one (store Last-Modified, then
//!   name). Every gateway that lists after all concurrent candidates are visible makes
//!   the same pick; a candidate written later than someone's final listing carries a
//!   later timestamp (it was written at least `SETTLE` after the picked one), so it
//!   never wins. A gateway adopts only a candidate it read back from the store, so it
//!   never serves handles under a key that is not the stored one.
//!
//! Assumptions (stated, not checked): a candidate PUT becomes visible within `SETTLE`
//! of its timestamp — the writer checks its own round trip and withdraws its candidate
//! when it took longer; and the store's nodes agree on time to well under `SETTLE`.
//! Buckets set up by earlier versions keep their `.nfsgw-tmp.handle-key`, adopted first.

use super::super::{BResult, BackendError};
use std::time::{Duration, Instant};

/// The single key object of earlier versions (read, never written now).
pub const LEGACY: &str = "handle-key";
/// Candidates: `<TEMP_PREFIX>handle-keys/<16 hex digits>`.
pub const CANDIDATES: &str = "handle-keys/";
/// Wait between writing a candidate and the listing that decides.
pub const SETTLE: Duration = Duration::from_secs(2);
/// A candidate this old (store clock) is settled: adopted without waiting.
const SETTLED_AGE: Duration = Duration::from_secs(30);
/// Candidates considered (one listing page; a fresh bucket has a handful).
pub const MAX_CANDIDATES: usize = 1000;

/// A candidate as listed: name under `CANDIDATES`, store Last-Modified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub name: String,
    pub mtime_ns: u64,
}

/// What the protocol needs from the store (names are relative to the gateway's
/// `TEMP_PREFIX` under the bucket prefix).
pub trait KeyStore {
    /// The object's bytes (at most 64), or `None` when it does not exist.
    fn get(&self, name: &str) -> BResult<Option<Vec<u8>>>;
    /// Unconditional PUT.
    fn put(&self, name: &str, data: &[u8]) -> BResult<()>;
    fn delete(&self, name: &str) -> BResult<()>;
    /// Candidates under `CANDIDATES`, and the store's clock (ns) when it answered.
    fn list(&self) -> BResult<(Vec<Candidate>, Option<u64>)>;
    fn sleep(&self, d: Duration);
}

/// The candidate every gateway picks: earliest Last-Modified, then smallest name.
pub fn pick(c: &[Candidate]) -> Option<&Candidate> {
    c.iter()
        .min_by(|a, b| (a.mtime_ns, &a.name).cmp(&(b.mtime_ns, &b.name)))
}

/// Parses a `handle_key_file`: 64 hex digits, surrounding whitespace allowed. The
/// error never quotes the content (it is a secret).
pub fn parse_key_file(text: &str) -> Result<[u8; 32], String> {
    let t = text.trim();
    if t.len() != 64 || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "must hold exactly 64 hex digits (32 bytes; e.g. `openssl rand -hex 32`), found {} characters",
            t.len()
        ));
    }
    let mut k = [0u8; 32];
    for (i, byte) in k.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&t[2 * i..2 * i + 2], 16).map_err(|e| e.to_string())?;
    }
    Ok(k)
}

fn key_of(name: &str, b: Vec<u8>) -> BResult<[u8; 32]> {
    b.try_into().map_err(|b: Vec<u8>| {
        BackendError::Retryable(format!(
            "{name}: {} bytes, expected 32; restore it (or delete it: every handle clients hold becomes invalid)",
            b.len()
        ))
    })
}

/// Rounds of `agree` before giving up (a round ends without a key only when this
/// gateway withdrew a slow candidate and saw no other).
const ROUNDS: usize = 5;

/// Agrees on the bucket's key with every other gateway (see the module comment).
pub fn agree(s: &impl KeyStore, fresh: [u8; 32], mine: &str) -> BResult<[u8; 32]> {
    if let Some(b) = s.get(LEGACY)? {
        return key_of(LEGACY, b);
    }
    for round in 0..ROUNDS {
        let (found, store_now) = s.list()?;
        if let (Some(p), Some(now)) = (pick(&found), store_now) {
            if now >= p.mtime_ns.saturating_add(SETTLED_AGE.as_nanos() as u64) {
                return adopt(s, p);
            }
        }
        if found.is_empty() {
            let name = format!("{CANDIDATES}{mine}-{round}");
            let t0 = Instant::now();
            s.put(&name, &fresh)?;
            if t0.elapsed() > SETTLE / 2 {
                // Our candidate may have become visible after someone's deciding
                // listing: withdraw it and take part as a reader.
                tracing::warn!("s3: handle key candidate PUT was slow; withdrawing it");
                s.delete(&name)?;
            }
        }
        s.sleep(SETTLE);
        let (found, _) = s.list()?;
        if let Some(p) = pick(&found) {
            return adopt(s, p);
        }
    }
    Err(BackendError::Retryable(format!(
        "handle key: no key agreed after {ROUNDS} rounds (the store is too slow); retry, or set handle_key_file"
    )))
}

fn adopt(s: &impl KeyStore, p: &Candidate) -> BResult<[u8; 32]> {
    let name = format!("{CANDIDATES}{}", p.name);
    match s.get(&name)? {
        Some(b) => key_of(&name, b),
        None => Err(BackendError::Retryable(format!(
            "{name}: listed but not readable; retry"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::{Arc, Barrier, Mutex};

    #[test]
    fn key_file_format() {
        let hex = "00ff".repeat(16);
        let k = parse_key_file(&format!("  {hex}\n")).unwrap();
        assert_eq!(k[0], 0);
        assert_eq!(k[1], 0xff);
        for bad in ["", "abc", &"g".repeat(64), &"0".repeat(63), &"0".repeat(65)] {
            let e = parse_key_file(bad).unwrap_err();
            assert!(
                !e.contains(bad) || bad.is_empty(),
                "error quotes the secret: {e}"
            );
        }
    }

    #[test]
    fn pick_is_earliest_then_name_and_order_free() {
        let c = |n: &str, t| Candidate {
            name: n.into(),
            mtime_ns: t,
        };
        let a = vec![c("b", 5), c("a", 7), c("c", 5)];
        let mut r = a.clone();
        r.reverse();
        assert_eq!(pick(&a).unwrap().name, "b");
        assert_eq!(pick(&r).unwrap().name, "b");
        assert!(pick(&[]).is_none());
    }

    /// A store that ignores preconditions and stamps objects with a logical clock.
    #[derive(Default)]
    struct Mem {
        objs: Mutex<BTreeMap<String, (Vec<u8>, u64)>>,
        clock: Mutex<u64>,
        /// PUTs still to take longer than SETTLE / 2.
        slow_puts: std::sync::atomic::AtomicUsize,
    }

    impl KeyStore for Arc<Mem> {
        fn get(&self, name: &str) -> BResult<Option<Vec<u8>>> {
            Ok(self.objs.lock().unwrap().get(name).map(|o| o.0.clone()))
        }
        fn put(&self, name: &str, data: &[u8]) -> BResult<()> {
            use std::sync::atomic::Ordering::Relaxed;
            if self
                .slow_puts
                .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
                .is_ok()
            {
                std::thread::sleep(SETTLE / 2 + Duration::from_millis(50));
            }
            // One lock at a time (`list` takes `objs` then `clock`): holding the
            // clock across the insert deadlocked against a concurrent listing.
            let t = {
                let mut c = self.clock.lock().unwrap();
                *c += 1;
                *c * 1_000_000
            };
            self.objs
                .lock()
                .unwrap()
                .insert(name.into(), (data.to_vec(), t));
            Ok(())
        }
        fn delete(&self, name: &str) -> BResult<()> {
            self.objs.lock().unwrap().remove(name);
            Ok(())
        }
        fn list(&self) -> BResult<(Vec<Candidate>, Option<u64>)> {
            let now = *self.clock.lock().unwrap() * 1_000_000;
            let o = self.objs.lock().unwrap();
            let c = o
                .iter()
                .filter_map(|(k, v)| {
                    k.strip_prefix(CANDIDATES).map(|n| Candidate {
                        name: n.into(),
                        mtime_ns: v.1,
                    })
                })
                .collect();
            Ok((c, Some(now)))
        }
        fn sleep(&self, _: Duration) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn gateways_starting_together_agree_and_a_late_one_adopts() {
        for _ in 0..20 {
            let m = Arc::new(Mem::default());
            let n = 4;
            let bar = Arc::new(Barrier::new(n));
            let ts: Vec<_> = (0..n)
                .map(|i| {
                    let (m, bar) = (m.clone(), bar.clone());
                    std::thread::spawn(move || {
                        bar.wait();
                        agree(&m, [i as u8 + 1; 32], &format!("{i:016x}")).unwrap()
                    })
                })
                .collect();
            let keys: Vec<_> = ts.into_iter().map(|t| t.join().unwrap()).collect();
            assert!(keys.iter().all(|k| *k == keys[0]), "{keys:?}");
            let late = agree(&m, [99; 32], "late").unwrap();
            assert_eq!(late, keys[0]);
        }
    }

    #[test]
    fn a_slow_candidate_is_withdrawn_and_the_next_round_agrees() {
        let m = Arc::new(Mem::default());
        m.slow_puts.store(1, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(agree(&m, [5; 32], "g").unwrap(), [5; 32]);
        let names: Vec<String> = m.objs.lock().unwrap().keys().cloned().collect();
        assert_eq!(
            names,
            vec![format!("{CANDIDATES}g-1")],
            "slow candidate left behind"
        );
        assert_eq!(agree(&m, [6; 32], "h").unwrap(), [5; 32]);
    }

    #[test]
    fn legacy_key_wins_and_a_bad_one_is_an_error() {
        let m = Arc::new(Mem::default());
        m.put(LEGACY, &[7; 32]).unwrap();
        assert_eq!(agree(&m, [1; 32], "x").unwrap(), [7; 32]);
        m.put(LEGACY, &[7; 5]).unwrap();
        assert!(matches!(
            agree(&m, [1; 32], "x"),
            Err(BackendError::Retryable(_))
        ));
    }
}
