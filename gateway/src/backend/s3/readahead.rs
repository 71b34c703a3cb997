//! Sequential read-ahead and a short-lived attribute cache for the s3 backend.
//!
//! Read-ahead: a GET costs a round trip to the store (milliseconds), so a file read
//! front to back in 1 MiB NFS READs would pay one per READ. When a reader walks a key
//! sequentially, its READs are served from `block`-sized ranged GETs fetched ahead of
//! it on the async runtime (`DEPTH` blocks in flight), so the reader waits only for
//! the first block. Random reads bypass it (one ranged GET each, exactly what the
//! READ asked). At most `MAX_STREAMS` readers are tracked; memory is bounded by
//! `MAX_STREAMS x (ADVISED_DEPTH + 2) x block`. These blocks are transient: what clients read
//! is kept by the reactors' page cache (registered memory, sent without copying).
//!
//! Advice (IO_ADVISE, RFC 7862 §15.5; `advise`): a key advised `Ahead` (SEQUENTIAL,
//! WILLNEED) is read ahead from its first read, `ADVISED_DEPTH` blocks deep; a key
//! advised `NoAhead` (RANDOM, DONTNEED) is never read ahead (each READ one ranged GET
//! of what it asked). At most `MAX_ADVISED` keys keep advice; past that the oldest
//! is forgotten (advice is only a hint).
//!
//! Attributes: a HEAD per READ/GETATTR would double the requests, so HEAD results are
//! kept for `ATTR_TTL` (as an NFS client keeps attributes). Everything this gateway
//! changes is invalidated at once; changes by other writers to the bucket show within
//! the TTL, and a changed ETag also drops the key's read-ahead.

use super::super::{BResult, ObjectMeta, ReadAdvice};
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

const MAX_STREAMS: usize = 16;
const DEPTH: u64 = 2;
/// Blocks fetched ahead of a reader whose key was advised `Ahead`.
const ADVISED_DEPTH: u64 = 8;
const MAX_ADVISED: usize = 256;
const STREAM_IDLE: Duration = Duration::from_secs(2);
pub(super) const ATTR_TTL: Duration = Duration::from_secs(1);
const MAX_ATTRS: usize = 65536;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One block being fetched or fetched.
pub(super) struct Block {
    data: Mutex<Option<BResult<Bytes>>>,
    ready: Condvar,
}

impl Block {
    pub fn new() -> Arc<Block> {
        Arc::new(Block {
            data: Mutex::new(None),
            ready: Condvar::new(),
        })
    }

    /// Called by the fetch when it ends.
    pub fn set(&self, r: BResult<Bytes>) {
        *lock(&self.data) = Some(r);
        self.ready.notify_all();
    }

    fn wait(&self) -> BResult<Bytes> {
        let mut g = lock(&self.data);
        loop {
            if let Some(r) = g.as_ref() {
                return r.clone();
            }
            g = self.ready.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }
}

struct Stream {
    key: String,
    /// Block index -> block, for the blocks around the reader.
    blocks: HashMap<u64, Arc<Block>>,
    /// End of the last read served: where a sequential reader comes next.
    next: u64,
    /// Index past the last block of the object, once a short block showed the end.
    eof_block: Option<u64>,
    used: Instant,
}

pub(super) struct ReadAhead {
    block: u64,
    streams: Mutex<VecDeque<Stream>>,
    /// HEAD results by key; `None` = the key was absent.
    attrs: Mutex<HashMap<String, (Option<ObjectMeta>, Instant)>>,
    /// IO_ADVISE per key, oldest first (`Normal` is never kept).
    advised: Mutex<VecDeque<(String, ReadAdvice)>>,
    /// Objects this gateway wrote and prefixes found empty (`known.rs`); `invalidate`
    /// keeps it current.
    pub known: super::known::Known,
}

impl ReadAhead {
    /// `block` = 0 turns read-ahead off (the attribute cache stays).
    pub fn new(block: u64) -> ReadAhead {
        ReadAhead {
            block,
            streams: Mutex::new(VecDeque::new()),
            attrs: Mutex::new(HashMap::new()),
            advised: Mutex::new(VecDeque::new()),
            known: Default::default(),
        }
    }

    /// IO_ADVISE for `key`: whether it changes what is read ahead (with read-ahead
    /// off, `block` 0, nothing is, so no advice is acted on).
    pub fn advise(&self, key: &str, how: ReadAdvice) -> bool {
        if self.block == 0 {
            return false;
        }
        let mut a = lock(&self.advised);
        a.retain(|(k, _)| k != key);
        if how != ReadAdvice::Normal {
            if a.len() >= MAX_ADVISED {
                a.pop_front();
            }
            a.push_back((key.to_string(), how));
        }
        drop(a);
        // The stream starts again under the new advice.
        self.drop_stream(key);
        true
    }

    fn advice(&self, key: &str) -> ReadAdvice {
        lock(&self.advised)
            .iter()
            .find(|(k, _)| k == key)
            .map_or(ReadAdvice::Normal, |&(_, a)| a)
    }

    /// A fresh HEAD result: `Some(None)` = known absent.
    pub fn attr(&self, key: &str) -> Option<Option<ObjectMeta>> {
        let a = lock(&self.attrs);
        let (m, at) = a.get(key)?;
        (at.elapsed() < ATTR_TTL).then(|| m.clone())
    }

    pub fn remember_attr(&self, m: &ObjectMeta) {
        let mut a = lock(&self.attrs);
        if a.len() >= MAX_ATTRS {
            a.clear();
        }
        if let Some((Some(old), _)) = a.insert(m.key.clone(), (Some(m.clone()), Instant::now())) {
            if old.etag != m.etag {
                drop(a);
                self.drop_stream(&m.key);
            }
        }
    }

    /// `key` is absent (negative entries expire like positive ones).
    pub fn remember_absent(&self, key: &str) {
        let mut a = lock(&self.attrs);
        if a.len() >= MAX_ATTRS {
            a.clear();
        }
        a.insert(key.to_string(), (None, Instant::now()));
    }

    /// This gateway changed `key`: forget what was read of it.
    pub fn invalidate(&self, key: &str) {
        lock(&self.attrs).remove(key);
        self.known.changed(key);
        self.drop_stream(key);
    }

    fn drop_stream(&self, key: &str) {
        lock(&self.streams).retain(|s| s.key != key);
    }

    /// Serves `dst` at `offset` from read-ahead blocks when the key is being read
    /// sequentially; `fetch(start, len, block)` starts one ranged GET that ends with
    /// `block.set(..)`. `size`, when known, keeps read-ahead from fetching past the
    /// end. `None`: not sequential (or off): do a plain GET.
    pub fn read(
        &self,
        key: &str,
        offset: u64,
        dst: &mut [u8],
        size: Option<u64>,
        fetch: &dyn Fn(u64, u64, Arc<Block>),
    ) -> Option<BResult<usize>> {
        if self.block == 0 || dst.is_empty() {
            return None;
        }
        let advice = self.advice(key);
        if advice == ReadAdvice::NoAhead {
            return None;
        }
        let (depth, from_first) = match advice {
            ReadAdvice::Ahead => (ADVISED_DEPTH, true),
            _ => (DEPTH, false),
        };
        let bs = self.block;
        let mut done = 0usize;
        while done < dst.len() {
            let at = offset + done as u64;
            let idx = at / bs;
            let block = {
                let mut streams = lock(&self.streams);
                streams.retain(|s| s.used.elapsed() < STREAM_IDLE);
                let pos = streams.iter().position(|s| s.key == key);
                let s = match pos {
                    Some(p) => &mut streams[p],
                    None => {
                        if streams.len() >= MAX_STREAMS {
                            streams.pop_front();
                        }
                        streams.push_back(Stream {
                            key: key.to_string(),
                            blocks: HashMap::new(),
                            next: u64::MAX,
                            eof_block: size.map(|n| n.div_ceil(bs)),
                            used: Instant::now(),
                        });
                        streams.back_mut().expect("just pushed")
                    }
                };
                s.used = Instant::now();
                // Sequential: the reader continues near where it stopped (clients
                // send READs in parallel, so slightly out of order).
                // An `Ahead` key counts as sequential from its first read.
                let sequential = s.blocks.contains_key(&idx)
                    || (s.next != u64::MAX && at.abs_diff(s.next) <= bs)
                    || (from_first && s.next == u64::MAX);
                if !sequential {
                    s.next = offset + dst.len() as u64;
                    return None;
                }
                if s.eof_block.is_some_and(|e| idx >= e) {
                    s.next = at;
                    return Some(Ok(done));
                }
                s.blocks.retain(|&i, _| i + 1 >= idx);
                for i in idx..=idx + depth {
                    if s.eof_block.is_some_and(|e| i >= e) {
                        break;
                    }
                    s.blocks.entry(i).or_insert_with(|| {
                        let b = Block::new();
                        fetch(i * bs, bs, b.clone());
                        b
                    });
                }
                s.blocks[&idx].clone()
            };
            let data = match block.wait() {
                Ok(d) => d,
                Err(e) => {
                    self.drop_stream(key);
                    return Some(Err(e));
                }
            };
            let within = (at - idx * bs) as usize;
            let short = (data.len() as u64) < bs;
            let n = data.len().saturating_sub(within).min(dst.len() - done);
            if n > 0 {
                dst[done..done + n].copy_from_slice(&data[within..within + n]);
            }
            done += n;
            let mut streams = lock(&self.streams);
            if let Some(s) = streams.iter_mut().find(|s| s.key == key) {
                s.next = offset + done as u64;
                if short {
                    s.eof_block = Some(idx + 1);
                }
            }
            if n == 0 || (short && within + n >= data.len()) {
                break;
            }
        }
        Some(Ok(done))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn object(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i % 251) as u8).collect()
    }

    #[test]
    fn sequential_reads_come_from_blocks_fetched_ahead() {
        let obj = Arc::new(object(10_000));
        let fetches = Arc::new(AtomicUsize::new(0));
        let ra = ReadAhead::new(1024);
        let (o, f) = (obj.clone(), fetches.clone());
        let fetch = move |start: u64, len: u64, b: Arc<Block>| {
            f.fetch_add(1, Ordering::Relaxed);
            let s = (start as usize).min(o.len());
            let e = ((start + len) as usize).min(o.len());
            b.set(Ok(Bytes::copy_from_slice(&o[s..e])));
        };
        // First read: not known to be sequential yet.
        let mut buf = vec![0u8; 300];
        for (key, size) in [("k", Some(10_000)), ("unknown-size", None)] {
            fetches.store(0, Ordering::Relaxed);
            assert!(ra.read(key, 0, &mut buf, size, &fetch).is_none());
            let mut at = 300u64;
            let mut back = obj[..300].to_vec();
            while at < 10_000 {
                let n = ra.read(key, at, &mut buf, size, &fetch).unwrap().unwrap();
                assert!(n > 0);
                back.extend_from_slice(&buf[..n]);
                at += n as u64;
            }
            assert_eq!(back, *obj);
            // 10 blocks, each fetched once; without the size, at most DEPTH past the end.
            let n = fetches.load(Ordering::Relaxed);
            assert!(
                n == 10 || (size.is_none() && n <= 10 + DEPTH as usize),
                "{n}"
            );
            assert_eq!(
                ra.read(key, 10_000, &mut buf, size, &fetch)
                    .unwrap()
                    .unwrap(),
                0
            );
        }
        // A random read far away is not served from read-ahead.
        assert!(ra.read("k", 3, &mut buf, Some(10_000), &fetch).is_none());
    }

    #[test]
    fn fetch_errors_reach_the_reader_and_reset_the_stream() {
        let ra = ReadAhead::new(1024);
        let fetch = |_: u64, _: u64, b: Arc<Block>| {
            b.set(Err(crate::backend::BackendError::Retryable("503".into())))
        };
        let mut buf = vec![0u8; 10];
        assert!(ra.read("k", 0, &mut buf, None, &fetch).is_none());
        assert!(matches!(
            ra.read("k", 10, &mut buf, None, &fetch),
            Some(Err(_))
        ));
        assert!(
            ra.read("k", 20, &mut buf, None, &fetch).is_none(),
            "stream was reset"
        );
    }

    #[test]
    fn attributes_expire_and_a_new_etag_drops_read_ahead() {
        let ra = ReadAhead::new(0);
        let m = ObjectMeta {
            key: "k".into(),
            size: 1,
            mtime_ns: 1,
            etag: "a".into(),
            user: Default::default(),
        };
        ra.remember_attr(&m);
        assert_eq!(ra.attr("k"), Some(Some(m.clone())));
        ra.invalidate("k");
        assert_eq!(ra.attr("k"), None);
        ra.remember_absent("k");
        assert_eq!(ra.attr("k"), Some(None));
    }
}

#[cfg(test)]
mod advice_tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A fetch of an object of `n` bytes that counts its calls.
    fn counting(n: usize) -> (Arc<AtomicUsize>, impl Fn(u64, u64, Arc<Block>)) {
        let obj: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        let fetches = Arc::new(AtomicUsize::new(0));
        let f = fetches.clone();
        let fetch = move |start: u64, len: u64, b: Arc<Block>| {
            f.fetch_add(1, Ordering::Relaxed);
            let s = (start as usize).min(obj.len());
            let e = ((start + len) as usize).min(obj.len());
            b.set(Ok(Bytes::copy_from_slice(&obj[s..e])));
        };
        (fetches, fetch)
    }

    #[test]
    fn ahead_reads_ahead_from_the_first_read_and_deeper() {
        let ra = ReadAhead::new(1024);
        let (fetches, fetch) = counting(64 << 10);
        let mut buf = vec![0u8; 100];
        assert!(ra.advise("k", ReadAdvice::Ahead));
        // Unadvised, a first read is a plain GET (None); advised, it is served from
        // blocks fetched ahead: its own and ADVISED_DEPTH more.
        let n = ra.read("k", 5000, &mut buf, Some(64 << 10), &fetch);
        assert_eq!(n.unwrap().unwrap(), 100);
        assert_eq!(buf[0], (5000 % 251) as u8);
        assert_eq!(fetches.load(Ordering::Relaxed), 1 + ADVISED_DEPTH as usize);
        // Another key, not advised: the first read is not read ahead.
        assert!(ra
            .read("other", 0, &mut buf, Some(64 << 10), &fetch)
            .is_none());
        // Back to normal: the stream starts again, unadvised.
        assert!(ra.advise("k", ReadAdvice::Normal));
        assert!(ra
            .read("k", 9000, &mut buf, Some(64 << 10), &fetch)
            .is_none());
    }

    #[test]
    fn no_ahead_turns_read_ahead_off_for_the_key() {
        let ra = ReadAhead::new(1024);
        let (fetches, fetch) = counting(10_000);
        let mut buf = vec![0u8; 300];
        assert!(ra.advise("k", ReadAdvice::NoAhead));
        // Sequential reads that would be read ahead (see the test above) all go
        // to plain GETs; nothing is fetched ahead.
        for at in (0..3000).step_by(300) {
            assert!(ra.read("k", at, &mut buf, Some(10_000), &fetch).is_none());
        }
        assert_eq!(fetches.load(Ordering::Relaxed), 0);
        // Advice is bounded: the oldest key's is forgotten first.
        for i in 0..MAX_ADVISED {
            ra.advise(&format!("x{i}"), ReadAdvice::Ahead);
        }
        assert_eq!(ra.advice("k"), ReadAdvice::Normal);
        assert_eq!(ra.advice("x0"), ReadAdvice::Ahead);
        assert_eq!(lock(&ra.advised).len(), MAX_ADVISED);
    }

    #[test]
    fn with_read_ahead_off_no_advice_is_acted_on() {
        let ra = ReadAhead::new(0);
        for a in [ReadAdvice::Ahead, ReadAdvice::NoAhead, ReadAdvice::Normal] {
            assert!(!ra.advise("k", a));
        }
        assert!(lock(&ra.advised).is_empty());
    }
}
