//! The identity's recovery record in the store (`ha/<identity>/record`, docs/ha.md):
//! the client owners that may reclaim from whichever gateway serves the identity next.
//!
//! Format (text, one item a line): `nfsgw-recovery 1`, `holder <who wrote it>`, one
//! `owner <hex>` per owner, `end <count>`. A record whose first or last line is wrong,
//! or whose count disagrees, is torn (`RecordError::Torn`): nothing in it is trusted.
//! Every write is conditional on the version this gateway last read or wrote, so a
//! gateway that lost the identity cannot overwrite its successor's record.

use crate::backend::{Backend, BackendError, Cas};
use crate::state::recovery::{hex, unhex, Fence, RecordError, Records};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

const HEAD: &str = "nfsgw-recovery 1";
/// Most owners a record may hold (`nfs4.max_clients` is far below).
pub const MAX_OWNERS: usize = 100_000;
/// Longest owner (RFC 8881 NFS4_OPAQUE_LIMIT).
const MAX_OWNER: usize = 1024;

/// Clones share the version: the keeper's takeover write and the client table's later
/// writes are one writer's.
#[derive(Clone)]
pub struct StoreRecords {
    /// The store's conditional writes, or etcd's (`ha::etcd`).
    cas: Arc<dyn Cas>,
    name: String,
    holder: String,
    fence: Arc<Fence>,
    /// The version last read or written, and the writes since whose answer was lost.
    version: Arc<Mutex<Version>>,
    /// Writes so far, in every record's bytes: two writes never have the same bytes
    /// (the s3 version is the ETag, a digest of them).
    writes: Arc<std::sync::atomic::AtomicU64>,
}

impl StoreRecords {
    /// The record in `backend`'s own conditional writes.
    pub fn new(backend: Arc<dyn Backend>, identity: &str, holder: &str, fence: Arc<Fence>) -> Self {
        Self::with_cas(
            Arc::new(super::ViaBackend(backend)),
            identity,
            holder,
            fence,
        )
    }

    /// The record in `cas` (the store's, or etcd's).
    pub fn with_cas(cas: Arc<dyn Cas>, identity: &str, holder: &str, fence: Arc<Fence>) -> Self {
        StoreRecords {
            cas,
            name: format!("ha/{identity}/record"),
            holder: holder.to_string(),
            fence,
            version: Default::default(),
            writes: Default::default(),
        }
    }

    fn version(&self) -> std::sync::MutexGuard<'_, Version> {
        self.version.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn encode(&self, owners: &[Vec<u8>]) -> Vec<u8> {
        let n = self
            .writes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut s = format!("{HEAD}\nholder {} {n}\n", self.holder);
        for o in owners {
            s.push_str("owner ");
            s.push_str(&hex(o));
            s.push('\n');
        }
        s.push_str(&format!("end {}\n", owners.len()));
        s.into_bytes()
    }
}

/// What this writer knows of the stored record.
#[derive(Default)]
struct Version {
    /// The version last read or written; `None`: the record does not exist (yet).
    current: Option<String>,
    /// The bytes of writes since `current` that got no answer (a store that timed out
    /// while they were written, docs/ha.md "Faults in the records"). Each was
    /// conditional on `current`, so at most one of them landed; if one did, the stored
    /// bytes are exactly its own (holder and write number make them unique).
    unanswered: Vec<Vec<u8>>,
}

/// Unanswered writes remembered; past it the oldest is forgotten (a write that then
/// turns out to have landed reads as another writer's: the fence shuts, safe).
const UNANSWERED: usize = 8;

/// The owners of a record's bytes, or why it is torn.
pub fn parse(b: &[u8]) -> Result<HashSet<Vec<u8>>, RecordError> {
    let torn = |why: &str| Err(RecordError::Torn(why.to_string()));
    let Ok(text) = std::str::from_utf8(b) else {
        return torn("not text");
    };
    let mut lines = text.lines();
    if lines.next() != Some(HEAD) {
        return torn("no header");
    }
    let mut owners = HashSet::new();
    let mut n = 0usize;
    for l in lines {
        if let Some(h) = l.strip_prefix("owner ") {
            let o = unhex(h).filter(|o| !o.is_empty() && o.len() <= MAX_OWNER);
            let Some(o) = o else {
                return torn("a bad owner line");
            };
            n += 1;
            if n > MAX_OWNERS {
                return torn("too many owners");
            }
            owners.insert(o);
        } else if let Some(c) = l.strip_prefix("end ") {
            return if c.parse::<usize>().ok() == Some(n) && text.ends_with(&format!("{l}\n")) {
                Ok(owners)
            } else {
                torn("the count disagrees with the owners")
            };
        } else if !l.starts_with("holder ") {
            return torn("an unknown line");
        }
    }
    torn("no end line")
}

impl Records for StoreRecords {
    fn load(&self) -> Result<HashSet<Vec<u8>>, RecordError> {
        let got = self
            .cas
            .cas_get(&self.name)
            .map_err(|e| RecordError::Store(e.to_string()))?;
        let Some((bytes, v)) = got else {
            *self.version() = Version::default();
            return Ok(HashSet::new());
        };
        *self.version() = Version {
            current: Some(v),
            unanswered: Vec::new(),
        };
        parse(&bytes)
    }

    fn save(&self, owners: &[Vec<u8>]) -> Result<(), RecordError> {
        if !self.fence.serving() {
            return Err(RecordError::Store(
                "this gateway does not hold its identity".into(),
            ));
        }
        self.write_while(owners, true)
    }
}

impl StoreRecords {
    /// `save` with the fence not asked: the takeover's write, made before the fence
    /// opens (`ha::Keeper::take_over`).
    pub fn write(&self, owners: &[Vec<u8>]) -> Result<(), RecordError> {
        self.write_while(owners, false)
    }

    /// The write; `fenced`: a serving gateway's (`save`), which asks the fence again
    /// before each further store call of the adopt path. Each call is bounded by
    /// `L/4` ("Lease and clocks"), but the adopt path makes up to three more after the
    /// first, so without the re-check its last put could land after a standby took
    /// the identity.
    fn write_while(&self, owners: &[Vec<u8>], fenced: bool) -> Result<(), RecordError> {
        let stopped = || {
            Err(RecordError::Store(
                "this gateway stopped holding its identity during the write".into(),
            ))
        };
        let cas = &*self.cas;
        let data = self.encode(owners);
        let mut v = self.version();
        let mut r = super::put_checked(cas, &self.name, &data, v.current.as_deref());
        if r == Err(BackendError::AlreadyExists) && !v.unanswered.is_empty() {
            // The condition failed: perhaps because an earlier write of ours landed
            // though its answer was lost. Then the record holds its bytes: adopt that
            // version and write again on top of it.
            if fenced && !self.fence.serving() {
                return stopped();
            }
            match cas.cas_get(&self.name) {
                Ok(Some((b, cur))) if v.unanswered.contains(&b) => {
                    if fenced && !self.fence.serving() {
                        return stopped();
                    }
                    tracing::info!(record = %self.name, "ha: an earlier write of the recovery record had landed though the store did not answer it");
                    v.current = Some(cur);
                    v.unanswered.clear();
                    r = super::put_checked(cas, &self.name, &data, v.current.as_deref());
                }
                Ok(_) => {}
                Err(e) => r = Err(e),
            }
        }
        match r {
            Ok(new) => {
                v.current = Some(new);
                v.unanswered.clear();
                Ok(())
            }
            Err(BackendError::AlreadyExists) => {
                // Someone else wrote the record: another gateway holds the identity.
                self.fence.close();
                tracing::error!(record = %self.name, "ha: the recovery record changed under this gateway: it no longer holds its identity; stopped serving NFSv4");
                Err(RecordError::Store(
                    "the record changed under this gateway".into(),
                ))
            }
            Err(e) => {
                if v.unanswered.len() == UNANSWERED {
                    v.unanswered.remove(0);
                }
                v.unanswered.push(data);
                Err(RecordError::Store(e.to_string()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MemoryBackend;
    use crate::backend::Cas;

    fn rec(b: &Arc<dyn Backend>, fence: &Arc<Fence>) -> StoreRecords {
        StoreRecords::new(b.clone(), "t", "host-1", fence.clone())
    }

    #[test]
    fn round_trip_and_torn_records() {
        let b: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
        let fence = Arc::new(Fence::open());
        let r = rec(&b, &fence);
        assert_eq!(r.load(), Ok(HashSet::new()));
        r.save(&[b"a".to_vec(), vec![0, 255]]).unwrap();
        let got = rec(&b, &fence).load().unwrap();
        assert!(got.contains(b"a".as_slice()) && got.contains(&vec![0, 255]));
        for bad in [
            &b""[..],
            b"nfsgw-recovery 1\nowner 61\n",
            b"nfsgw-recovery 1\nowner 61\nend 2\n",
            b"nfsgw-recovery 1\nowner 6\nend 1\n",
            b"nfsgw-recovery 2\nend 0\n",
            b"nfsgw-recovery 1\nowner 61\nend 1",
            b"\xff\xfe",
        ] {
            assert!(matches!(parse(bad), Err(RecordError::Torn(_))), "{bad:?}");
        }
    }

    /// A store that took a write but lost its answer (it timed out): the next write
    /// finds the record changed, recognises its own bytes, and goes on from there
    /// instead of taking it for another gateway's; a foreign write still shuts the fence.
    #[test]
    fn a_write_whose_answer_was_lost_is_recognised() {
        let m = Arc::new(MemoryBackend::new());
        let b: Arc<dyn Backend> = m.clone();
        let fence = Arc::new(Fence::open());
        let r = rec(&b, &fence);
        r.save(&[b"a".to_vec()]).unwrap();
        // What the lost write did in the store, and what the writer saw of it.
        let data = r.encode(&[b"a".to_vec(), b"b".to_vec()]);
        let cur = r.version().current.clone();
        m.cas_put("ha/t/record", &data, cur.as_deref()).unwrap();
        r.version().unanswered.push(data);
        r.save(&[b"a".to_vec(), b"b".to_vec(), b"c".to_vec()])
            .unwrap();
        assert!(fence.serving());
        assert_eq!(rec(&b, &fence).load().unwrap().len(), 3);
        // Bytes the writer never sent: another writer's.
        r.version().unanswered.push(b"not what is stored".to_vec());
        let other = rec(&b, &Arc::new(Fence::open()));
        other.load().unwrap();
        other.save(&[]).unwrap();
        assert!(r.save(&[]).is_err());
        assert!(!fence.serving());
    }

    /// A gateway whose successor rewrote the record can no longer write it, and its
    /// fence shuts; a shut fence writes nothing.
    #[test]
    fn a_predecessor_cannot_overwrite() {
        let b: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
        let (f1, f2) = (Arc::new(Fence::open()), Arc::new(Fence::open()));
        let (old, new) = (rec(&b, &f1), rec(&b, &f2));
        old.save(&[b"x".to_vec()]).unwrap();
        new.load().unwrap();
        new.save(&[b"x".to_vec()]).unwrap();
        assert!(old.save(&[]).is_err());
        assert!(!f1.serving());
        assert!(old.save(&[]).is_err());
        assert_eq!(new.load().unwrap().len(), 1);
    }
}
