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
            Ok(v) => Look::Won(Held {
                version: v,
                sent,
                seq: 0,
            }),
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

/// One renewal of a held lease: `Ok` renewed (the new deadline runs from `sent`),
/// `Err(AlreadyExists)` taken by someone else, other errors the store's.
pub fn renew(
    cas: &dyn Cas,
    name: &str,
    holder: &str,
    lease: Duration,
    h: &mut Held,
) -> Result<(), BackendError> {
    let sent = Instant::now();
    let seq = h.seq + 1;
    let v = super::put_checked(cas, name, &encode(holder, seq, lease), Some(&h.version))?;
    *h = Held {
        version: v,
        sent,
        seq,
    };
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
