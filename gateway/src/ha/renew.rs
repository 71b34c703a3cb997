//! The holder's renewals, watched against the deadline (docs/ha.md "Lease and
//! clocks"): a store that hangs holds a renewal, never the stop. The fence already
//! refuses every COMPOUND past `t + 3L/4` by itself (`Fence::serving`, one clock
//! read); what must not wait for the store is the rest of the stop: the log line, the
//! count and `nfsgw_ha_identity_held`, which the operator's tool follows
//! (tools/ha/check.sh) to move the address away. So each renewal runs on a thread of
//! its own, one at a time, and the keeper looks at the fence while it waits.

use super::{lease, stats};
use crate::backend::{BackendError, Cas};
use crate::state::recovery::Fence;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the keeper looks at the fence while it waits for the store.
pub(super) const TICK: Duration = Duration::from_millis(20);

/// What the keeper last told the world about its fence.
pub(super) struct Watch {
    identity: String,
    serving: bool,
    /// The fence's deadline (`t + 3L/4` of the last successful renewal).
    deadline: Option<Instant>,
    /// When the last stop was noticed.
    pub(super) stopped_at: Option<Instant>,
}

impl Watch {
    pub(super) fn new(identity: &str) -> Watch {
        Watch {
            identity: identity.to_string(),
            serving: false,
            deadline: None,
            stopped_at: None,
        }
    }

    /// The fence now serves until `at`.
    pub(super) fn serve_until(&mut self, fence: &Fence, at: Instant) {
        fence.serve_until(at);
        self.deadline = Some(at);
        self.look(fence);
    }

    /// Publishes whether the fence serves; logs and counts the stop once, with how
    /// late it was noticed (`late_ms`: at most a `TICK` when nothing blocks the keeper).
    pub(super) fn look(&mut self, fence: &Fence) {
        let serving = fence.serving();
        stats::set_held(serving);
        if self.serving && !serving {
            stats::count_fenced();
            self.stopped_at = Some(Instant::now());
            let late = self.deadline.map_or(0, |d| d.elapsed().as_millis() as u64);
            tracing::error!(identity = %self.identity, late_ms = late, "ha: cannot renew the identity lease: stopped serving NFSv4");
        } else if !self.serving && serving && self.stopped_at.is_some() {
            tracing::info!(identity = %self.identity, "ha: identity lease renewed again: serving NFSv4");
        }
        self.serving = serving;
    }
}

/// What one renewal came to.
pub(super) enum Renewal {
    Done(Result<(), BackendError>),
    /// `stop` was set while the store had not answered (the call is left to finish).
    Stopped,
}

/// Runs `lease::renew` of `h` on a thread of its own and waits for it, looking at
/// the fence every `TICK` meanwhile. A renewal that succeeds after a hang renews from
/// when it was *sent*: its deadline may already be past, and the fence stays shut.
#[allow(clippy::too_many_arguments)]
pub(super) fn renew(
    cas: &Arc<dyn Cas>,
    name: &str,
    holder: &str,
    lease: Duration,
    h: &mut lease::Held,
    fence: &Fence,
    watch: &mut Watch,
    stop: &AtomicBool,
) -> Renewal {
    // Noted here, in the keeper's `h`: a renewal that fails is retried from it.
    h.attempt();
    let (tx, rx) = mpsc::sync_channel(1);
    let (cas, name, holder, mut mine) =
        (cas.clone(), name.to_string(), holder.to_string(), h.clone());
    let spawned = std::thread::Builder::new()
        .name("ha-renew".into())
        .spawn(move || {
            let r = lease::renew(&*cas, &name, &holder, lease, &mut mine);
            let _ = tx.send(r.map(|()| mine));
        });
    if let Err(e) = spawned {
        return Renewal::Done(Err(BackendError::Retryable(format!(
            "ha: cannot start a renewal thread: {e}"
        ))));
    }
    loop {
        match rx.recv_timeout(TICK) {
            Ok(r) => {
                return Renewal::Done(r.map(|renewed| {
                    *h = renewed;
                }))
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Renewal::Done(Err(BackendError::Retryable(
                    "ha: the renewal thread ended without an answer".into(),
                )))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                watch.look(fence);
                if stop.load(Ordering::Relaxed) {
                    return Renewal::Stopped;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::MemoryBackend;
    use crate::backend::BResult;
    use std::sync::{Condvar, Mutex};

    /// A memory store whose writes can be held (a hung store) and released.
    #[derive(Default)]
    struct Hangs {
        m: MemoryBackend,
        held: Mutex<bool>,
        cv: Condvar,
    }

    impl Hangs {
        fn hold(&self, on: bool) {
            *self.held.lock().unwrap() = on;
            self.cv.notify_all();
        }
    }

    impl Cas for Hangs {
        fn cas_get(&self, name: &str) -> BResult<Option<(Vec<u8>, String)>> {
            self.m.cas_get(name)
        }
        fn cas_put(&self, name: &str, data: &[u8], expect: Option<&str>) -> BResult<String> {
            let mut g = self.held.lock().unwrap();
            while *g {
                g = self.cv.wait(g).unwrap();
            }
            drop(g);
            self.m.cas_put(name, data, expect)
        }
    }

    /// The stop is noticed at the deadline while the renewal hangs, not when the store
    /// answers; a renewal that lands after its deadline leaves the fence shut.
    #[test]
    fn a_hung_renewal_does_not_hold_the_stop() {
        let hangs = Arc::new(Hangs {
            m: MemoryBackend::new(),
            ..Default::default()
        });
        let cas: Arc<dyn Cas> = hangs.clone();
        let l = Duration::from_millis(400);
        let mut w = lease::Watch::new(&*cas, "ha/t/lease".into(), "a".into(), l);
        let lease::Look::Won(mut h) = w.look() else {
            panic!("absent lease not taken")
        };
        let fence = Fence::shut();
        let mut watch = Watch::new("t");
        let deadline = h.sent + l * 3 / 4;
        watch.serve_until(&fence, deadline);
        assert!(fence.serving());
        hangs.hold(true);
        let release = {
            let hangs = hangs.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(900));
                hangs.hold(false);
            })
        };
        let was = h.seq;
        let stop = AtomicBool::new(false);
        let r = renew(
            &cas,
            "ha/t/lease",
            "a",
            l,
            &mut h,
            &fence,
            &mut watch,
            &stop,
        );
        release.join().unwrap();
        let stopped = watch
            .stopped_at
            .expect("no stop noticed while the store hung");
        let late = stopped.saturating_duration_since(deadline);
        assert!(
            stopped >= deadline && late < Duration::from_millis(150),
            "stop noticed {late:?} after the deadline"
        );
        assert!(
            matches!(r, Renewal::Done(Ok(()))),
            "the store answered at last"
        );
        assert_eq!(h.seq, was + 1);
        // Renewed from when it was sent, 900 ms ago: past its own deadline already.
        watch.serve_until(&fence, h.sent + l * 3 / 4);
        assert!(!fence.serving());
    }

    /// `stop` ends the wait even when the store never answers.
    #[test]
    fn stop_ends_a_hung_renewal_wait() {
        let hangs = Arc::new(Hangs::default());
        let cas: Arc<dyn Cas> = hangs.clone();
        let l = Duration::from_millis(400);
        let lease::Look::Won(mut h) =
            lease::Watch::new(&*cas, "ha/t/lease".into(), "a".into(), l).look()
        else {
            panic!("absent lease not taken")
        };
        hangs.hold(true);
        let stop = AtomicBool::new(true);
        let (fence, mut watch) = (Fence::shut(), Watch::new("t"));
        let r = renew(
            &cas,
            "ha/t/lease",
            "a",
            l,
            &mut h,
            &fence,
            &mut watch,
            &stop,
        );
        assert!(matches!(r, Renewal::Stopped));
        hangs.hold(false);
    }
}
