//! The identity lease (`ha/<identity>/lease`, docs/ha.md "Lease and clocks"): who
//! serves the identity now. The holder renews it every `L/4` by a conditional write and
//! serves until `3L/4` after sending the last one that succeeded; a contender takes it
//! when it has seen one version unchanged for `L` on its own clock.

use crate::backend::{BackendError, Cas};
use std::time::{Duration, Instant};

/// The lease object's bytes: who holds it, a sequence number (every renewal's bytes
/// differ, so does its s3 ETag) and the lease length the holder runs with.
pub fn encode(holder: &str, seq: u64, lease: Duration) -> Vec<u8> {
    format!(
        "nfsgw-lease 1\nholder {holder}\nseq {seq}\nlease_ms {}\n",
        lease.as_millis()
    )
    .into_bytes()
}

/// (holder, lease length) of a lease object; `None` when it does not parse (it is then
/// watched like any other version, with this gateway's own lease length).
pub fn decode(b: &[u8]) -> Option<(String, Duration)> {
    let t = std::str::from_utf8(b).ok()?;
    let mut lines = t.lines();
    (lines.next()? == "nfsgw-lease 1").then_some(())?;
    let holder = lines.next()?.strip_prefix("holder ")?.to_string();
    lines.next()?.strip_prefix("seq ")?;
    let ms: u64 = lines.next()?.strip_prefix("lease_ms ")?.parse().ok()?;
    Some((holder, Duration::from_millis(ms.min(3_600_000))))
}

/// The lease as this gateway holds it.
#[derive(Clone)]
pub struct Held {
    pub version: String,
    /// When the write that made `version` was sent (this gateway's clock).
    pub sent: Instant,
    pub seq: u64,
    /// The renewal to `seq + 1` under way: when its first attempt was sent. A retry
    /// sends the same bytes; if an earlier attempt landed (its answer lost) the retry
    /// finds them by read-back (`ha::put_checked_how`), and the new version has been
    /// in the store — seen by standbys, whose clocks run from then — since some time
    /// after that *first* send, which is what the deadline must run from.
    pub first_try: Option<(u64, Instant)>,
}

impl Held {
    pub fn new(version: String, sent: Instant, seq: u64) -> Held {
        Held {
            version,
            sent,
            seq,
            first_try: None,
        }
    }

    /// Notes an attempt of the next renewal; the send time of its first attempt.
    pub fn attempt(&mut self) -> Instant {
        let next = self.seq + 1;
        match self.first_try {
            Some((s, t)) if s == next => t,
            _ => {
                let now = Instant::now();
                self.first_try = Some((next, now));
                now
            }
        }
    }
}

/// What a look at the lease found (`Watch::look`).
pub enum Look {
    /// Ours now.
    Won(Held),
    /// Held by `holder`, renewed since the last look (or first seen); `overdue`: its
    /// version has been unchanged for longer than a live holder's renewal can take
    /// (`overdue`), so a takeover is in sight.
    Held {
        holder: String,
        changed: bool,
        overdue: bool,
    },
    /// The store did not answer.
    Unreachable(BackendError),
}

/// A contender's view of the lease: the version it sees and since when.
pub struct Watch<'a> {
    pub cas: &'a dyn Cas,
    pub name: String,
    pub holder: String,
    pub lease: Duration,
    seen: Option<(Option<String>, Instant)>,
}

impl<'a> Watch<'a> {
    pub fn new(cas: &'a dyn Cas, name: String, holder: String, lease: Duration) -> Self {
        Watch {
            cas,
            name,
            holder,
            lease,
            seen: None,
        }
    }

    /// Reads the lease once; takes it when it is absent or its version has not changed
    /// for a lease (the longer of ours and the holder's).
    pub fn look(&mut self) -> Look {
        let sent = Instant::now();
        let got = match self.cas.cas_get(&self.name) {
            Ok(g) => g,
            Err(e) => return Look::Unreachable(e),
        };
        let (version, holder, lease) = match &got {
            None => (None, String::new(), self.lease),
            Some((b, v)) => {
                let (h, l) = decode(b).unwrap_or_else(|| ("?".into(), self.lease));
                (Some(v.clone()), h, l.max(self.lease))
            }
        };
        let changed = self.seen.as_ref().is_none_or(|(v, _)| *v != version);
        if changed {
            self.seen = Some((version.clone(), Instant::now()));
        }
        let since = self.seen.as_ref().map_or(sent, |s| s.1);
        if version.is_some() && since.elapsed() < lease {
            // The version is known unchanged from `since` (the end of the read that
            // first saw it: it was written before) to `sent` (this read's start: its
            // snapshot is later), not to now: a slow read must not stretch the
            // interval a live holder had no renewal in.
            let overdue = sent.saturating_duration_since(since) >= overdue_after(lease);
            return Look::Held {
                holder,
                changed,
                overdue,
            };
        }
        let data = encode(&self.holder, 0, self.lease);
        match super::put_checked(self.cas, &self.name, &data, version.as_deref()) {
            Ok(v) => Look::Won(Held::new(v, sent, 0)),
            Err(BackendError::AlreadyExists) => Look::Held {
                holder,
                changed: true,
                overdue: false,
            },
            Err(e) => Look::Unreachable(e),
        }
    }
}

/// How long a lease version must stay unchanged, on a watcher's clock, before the
/// watcher calls its holder overdue (a takeover in sight: docs/ha.md "Moving the
/// address"). A live holder sends its next renewal `L/4` after the last one was sent
/// (at `t`), and that write ends within `L/4` (every store call is bounded below
/// `L/4`, `HaConfig::validate`): its new version is in the store by `t + L/2`. The
/// watcher first saw the old version after it was written, so at or after `t`, and
/// counts from there to the start of its latest read (`Watch::look`): a
/// version it has seen for `L/2 + L/10` (one more look of the standby as margin for
/// scheduling and clock rate) is one whose holder missed a renewal. A live holder is
/// never called overdue; a holder that missed one renewal may be (its fence still
/// serves until `t + 3L/4`), which is why the address follows the holder while it
/// serves (keepalived `nopreempt`) and a standby only parks until it holds the lease.
pub fn overdue_after(lease: Duration) -> Duration {
    lease / 2 + lease / 10
}

/// One renewal of a held lease: `Ok` renewed (the new deadline runs from when this
/// attempt was sent, or, when an earlier attempt of the same renewal is what landed,
/// from when the first one was: `Held::first_try`), `Err(AlreadyExists)` taken by
/// someone else, other errors the store's (`h` then keeps the first attempt's time).
pub fn renew(
    cas: &dyn Cas,
    name: &str,
    holder: &str,
    lease: Duration,
    h: &mut Held,
) -> Result<(), BackendError> {
    let first = h.attempt();
    let sent = Instant::now();
    let seq = h.seq + 1;
    let data = encode(holder, seq, lease);
    let (v, read_back) = super::put_checked_how(cas, name, &data, Some(&h.version))?;
    // A read-back match: the landed write may be any earlier attempt, the first one
    // included (a split brain if the fence ran from this retry, review of issue 28).
    *h = Held::new(v, if read_back { first } else { sent }, seq);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MemoryBackend;

    const L: Duration = Duration::from_millis(300);

    fn watch<'a>(m: &'a MemoryBackend, who: &str) -> Watch<'a> {
        Watch::new(m, "ha/t/lease".into(), who.into(), L)
    }

    #[test]
    fn encode_decode() {
        let b = encode("h 1", 7, Duration::from_secs(10));
        assert_eq!(decode(&b), Some(("h 1".into(), Duration::from_secs(10))));
        assert_eq!(decode(b"junk"), None);
    }

    /// An absent lease is taken at once; a renewed one never; one left alone for a
    /// lease is taken by exactly one contender, and its old holder's renewal fails.
    #[test]
    fn takeover_only_after_a_silent_lease() {
        let m = MemoryBackend::new();
        let Look::Won(mut a) = watch(&m, "a").look() else {
            panic!("absent lease not taken")
        };
        let (mut b, mut c) = (watch(&m, "b"), watch(&m, "c"));
        let t0 = Instant::now();
        let mut renewed = t0;
        while t0.elapsed() < L * 2 {
            renew(&m, "ha/t/lease", "a", L, &mut a).unwrap();
            renewed = Instant::now();
            assert!(
                matches!(b.look(), Look::Held { overdue: false, .. }),
                "renewed: never taken, never overdue"
            );
            std::thread::sleep(L / 6);
        }
        let (mut bw, mut cw) = (None, None);
        let t0 = Instant::now();
        while bw.is_none() && cw.is_none() && t0.elapsed() < L * 4 {
            if let Look::Won(h) = b.look() {
                bw = Some(h);
            }
            if let Look::Won(h) = c.look() {
                cw = Some(h);
            }
            std::thread::sleep(L / 10);
        }
        // From the last renewal's completion (what a watcher can first see), not from
        // the end of the renewing loop: b saw that version up to L/6 before it.
        assert!(renewed.elapsed() >= L, "not before a lease");
        assert!(bw.is_some() != cw.is_some(), "exactly one takes it");
        assert_eq!(
            renew(&m, "ha/t/lease", "a", L, &mut a).unwrap_err(),
            BackendError::AlreadyExists
        );
    }

    /// A store whose next conditional write lands and then loses its answer
    /// (`Retryable`), as an etcd Txn whose reply is cut off.
    struct LosesAReply(MemoryBackend, std::sync::atomic::AtomicBool);

    impl Cas for LosesAReply {
        fn cas_get(&self, name: &str) -> Result<Option<(Vec<u8>, String)>, BackendError> {
            self.0.cas_get(name)
        }
        fn cas_put(
            &self,
            name: &str,
            data: &[u8],
            expect: Option<&str>,
        ) -> Result<String, BackendError> {
            let v = self.0.cas_put(name, data, expect)?;
            if self.1.swap(false, std::sync::atomic::Ordering::Relaxed) {
                return Err(BackendError::Retryable("the reply was lost".into()));
            }
            Ok(v)
        }
    }

    /// A renewal that landed but lost its reply, found by the retry's read-back, runs
    /// the deadline from the *first* attempt: a standby has counted from when it saw
    /// that version, and a deadline from the retry would let the old holder serve past
    /// the standby's takeover (review of issue 28, finding 1).
    #[test]
    fn a_read_back_renewal_counts_from_the_first_attempt() {
        let m = LosesAReply(MemoryBackend::new(), false.into());
        let Look::Won(mut a) = Watch::new(&m, "ha/t/lease".into(), "a".into(), L).look() else {
            panic!("absent lease not taken")
        };
        m.1.store(true, std::sync::atomic::Ordering::Relaxed);
        let before = Instant::now();
        let e = renew(&m, "ha/t/lease", "a", L, &mut a).unwrap_err();
        assert!(matches!(e, BackendError::Retryable(_)), "{e:?}");
        std::thread::sleep(L / 3);
        let retry = Instant::now();
        renew(&m, "ha/t/lease", "a", L, &mut a).unwrap();
        assert_eq!(a.seq, 1);
        assert!(
            a.sent >= before && a.sent < retry,
            "deadline from the retry"
        );
        // The next renewal is a new one: its own first attempt.
        let next = Instant::now();
        renew(&m, "ha/t/lease", "a", L, &mut a).unwrap();
        assert!(a.sent >= next && a.seq == 2);
    }

    /// A store whose conditional writes each take `.1` (below `L/4`, as
    /// `HaConfig::validate` requires of every store call).
    /// A store whose writes land after a delay, every other one almost `L/4` (the
    /// bound) and the rest at once, so two renewals can land almost `L/2` apart; and
    /// whose reads return a snapshot taken when they began, two in three a delay later
    /// (a slow read after a fast one is what stretched the old measure).
    struct Slow(
        MemoryBackend,
        Duration,
        std::sync::atomic::AtomicU64,
        std::sync::atomic::AtomicU32,
        std::sync::atomic::AtomicU32,
    );

    impl Cas for Slow {
        fn cas_get(&self, name: &str) -> Result<Option<(Vec<u8>, String)>, BackendError> {
            let got = self.0.cas_get(name);
            // Every third read returns at once, the others `self.2` late.
            let nanos = self.2.load(std::sync::atomic::Ordering::Relaxed);
            if !self
                .4
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                .is_multiple_of(3)
            {
                std::thread::sleep(Duration::from_nanos(nanos));
            }
            got
        }
        fn cas_put(
            &self,
            name: &str,
            data: &[u8],
            expect: Option<&str>,
        ) -> Result<String, BackendError> {
            if self.3.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 2 == 1 {
                std::thread::sleep(self.1);
            }
            self.0.cas_put(name, data, expect)
        }
    }

    /// A holder that renews every `L/4` through writes of up to almost `L/4` is never
    /// overdue to a standby that looks every `L/10` through reads of `L/5` (a false
    /// "overdue" when the interval ran to the end of a slow read, review of the
    /// parking change); once it stops, the standby calls it overdue at
    /// `overdue_after` (before it may take the lease), never earlier.
    #[test]
    fn a_live_holder_is_never_overdue() {
        let l = Duration::from_secs(1);
        let read = (l / 5).as_nanos() as u64;
        let slow = Slow(
            MemoryBackend::new(),
            l * 23 / 100,
            read.into(),
            Default::default(),
            Default::default(),
        );
        let mut b = Watch::new(&slow, "ha/t/lease".into(), "b".into(), l);
        let Look::Won(a) = Watch::new(&slow, "ha/t/lease".into(), "a".into(), l).look() else {
            panic!("absent lease not taken")
        };
        let stop = std::sync::atomic::AtomicBool::new(false);
        let last = std::sync::Mutex::new(Instant::now());
        let mut wrong = None;
        std::thread::scope(|sc| {
            sc.spawn(|| {
                let mut a = a;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let next = a.sent + l / 4;
                    std::thread::sleep(next.saturating_duration_since(Instant::now()));
                    renew(&slow, "ha/t/lease", "a", l, &mut a).unwrap();
                    *last.lock().unwrap() = Instant::now();
                }
            });
            // Judged after the scope: a panic here would leave the renewer running
            // and the scope waiting for it forever.
            let t0 = Instant::now();
            while t0.elapsed() < l * 3 {
                match b.look() {
                    Look::Held { overdue: false, .. } => {}
                    Look::Held { .. } => {
                        wrong = Some("overdue");
                        break;
                    }
                    _ => {
                        wrong = Some("taken or unreachable");
                        break;
                    }
                }
                std::thread::sleep(l / 10);
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        assert_eq!(wrong, None, "a live holder overdue, or its lease taken");
        let stopped = *last.lock().unwrap();
        // Fast reads from here: the standby's looks then come every `L/10`, so one
        // lands between `overdue_after` and the lease's end (with `L/5` reads the
        // step could jump over it and the lease be taken first, which is also safe).
        slow.2.store(0, std::sync::atomic::Ordering::Relaxed);
        loop {
            match b.look() {
                Look::Held { overdue: true, .. } => break,
                Look::Held { .. } => {}
                _ => panic!("taken before it was ever overdue"),
            }
            std::thread::sleep(l / 10);
        }
        let age = stopped.elapsed();
        assert!(age >= overdue_after(l) && age < l, "overdue {age:?} after");
    }
}
