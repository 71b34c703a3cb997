//! The identity's pNFS layout stateid key in the store (`ha/<identity>/layout-key`,
//! docs/ha.md "pNFS"): what a layout stateid's MAC is keyed with
//! (`state/layouts_reclaim.rs`), so that a client's LAYOUTCOMMIT with loca_reclaim
//! (RFC 8881 §18.42.3, §12.7.4) verifies at whichever gateway serves the identity
//! after a takeover, as it does at one gateway after a restart.
//!
//! Created once, by the gateway that holds the identity lease, with a *create only if
//! absent* write before its fence opens; never replaced (a key rotated while layout
//! stateids under the old one are out would turn their reclaims into
//! NFS4ERR_RECLAIM_BAD). Two takers racing to create it: one create wins, the other
//! reads the winner's. Format: `nfsgw-layout-key 1`, then the key in hex, each line
//! ended by a newline; anything else is torn, and a torn key is never replaced by the
//! gateway: layout stateids then carry no MAC and no layout is reclaimed (the client
//! writes its data again through the metadata server) until the operator removes the
//! object.

use crate::backend::{BackendError, Cas};
use crate::state::recovery::{hex, unhex};

const HEAD: &str = "nfsgw-layout-key 1";

/// The key object's name for `identity`.
pub fn name(identity: &str) -> String {
    format!("ha/{identity}/layout-key")
}

fn encode(key: &[u8; 32]) -> Vec<u8> {
    format!("{HEAD}\n{}\n", hex(key)).into_bytes()
}

/// The key in a key object's bytes; `None`: torn or foreign.
pub fn decode(b: &[u8]) -> Option<[u8; 32]> {
    let t = std::str::from_utf8(b).ok()?;
    let rest = t.strip_prefix(HEAD)?.strip_prefix('\n')?;
    let line = rest.strip_suffix('\n')?;
    <[u8; 32]>::try_from(unhex(line)?.as_slice()).ok()
}

/// What the store holds for the identity's key.
#[derive(Debug, PartialEq, Eq)]
pub enum Key {
    /// The key (read, or created now).
    Key([u8; 32]),
    /// An object that does not decode (docs/ha.md "Faults in the records").
    Torn,
}

/// Reads `identity`'s key, creating it when there is none. Only the holder of the
/// identity lease calls this (`ha::Keeper::take_over`). Store errors are returned:
/// the takeover is retried with its fence shut.
pub fn load_or_create(cas: &dyn Cas, identity: &str) -> Result<Key, BackendError> {
    let name = name(identity);
    // A lost create race is followed by a read that finds the winner's key; a third
    // round only if that object vanished meanwhile (an operator removing it).
    for _ in 0..3 {
        if let Some((b, _)) = cas.cas_get(&name)? {
            return Ok(decode(&b).map_or(Key::Torn, Key::Key));
        }
        let key: [u8; 32] = rand::random();
        match super::put_checked(cas, &name, &encode(&key), None) {
            Ok(_) => return Ok(Key::Key(key)),
            Err(BackendError::AlreadyExists) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(BackendError::AlreadyExists)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MemoryBackend;

    /// Created once, then read back unchanged by every later taker; another identity
    /// has its own.
    #[test]
    fn created_once_and_read_by_the_next_holder() {
        let m = MemoryBackend::new();
        let Key::Key(k) = load_or_create(&m, "t").unwrap() else {
            panic!("no key made")
        };
        assert_eq!(load_or_create(&m, "t").unwrap(), Key::Key(k));
        let (b, _) = m.cas_get(&name("t")).unwrap().unwrap();
        assert_eq!(decode(&b), Some(k));
        assert_ne!(load_or_create(&m, "u").unwrap(), Key::Key(k));
    }

    /// A torn object is reported, never replaced: the bytes stay as they were.
    #[test]
    fn a_torn_key_is_not_replaced() {
        let m = MemoryBackend::new();
        let good = encode(&[7; 32]);
        for bad in [
            &good[..good.len() - 1],
            &good[..20],
            b"nfsgw-layout-key 2\n00\n",
            b"",
            b"\xff",
        ] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
        m.cas_put(&name("t"), &good[..30], None).unwrap();
        assert_eq!(load_or_create(&m, "t").unwrap(), Key::Torn);
        let (b, _) = m.cas_get(&name("t")).unwrap().unwrap();
        assert_eq!(b, &good[..30], "left as found");
    }

    /// Two takers racing to create the key end with one key: the loser's create fails
    /// its condition and it reads the winner's.
    #[test]
    fn a_lost_create_race_reads_the_winners_key() {
        struct Racer {
            m: MemoryBackend,
            raced: std::sync::atomic::AtomicBool,
        }
        impl Cas for Racer {
            fn cas_get(&self, name: &str) -> Result<Option<(Vec<u8>, String)>, BackendError> {
                self.m.cas_get(name)
            }
            fn cas_put(
                &self,
                name: &str,
                data: &[u8],
                expect: Option<&str>,
            ) -> Result<String, BackendError> {
                if !self.raced.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    // The other taker's create lands first.
                    self.m.cas_put(name, &encode(&[9; 32]), None)?;
                }
                self.m.cas_put(name, data, expect)
            }
        }
        let r = Racer {
            m: MemoryBackend::new(),
            raced: Default::default(),
        };
        assert_eq!(load_or_create(&r, "t").unwrap(), Key::Key([9; 32]));
    }
}
