//! "Try again later" answers — NFSv3 NFS3ERR_JUKEBOX, NFSv4.1 NFS4ERR_DELAY — are not
//! failures: a server whose store is briefly unavailable (an s3 backend failing over,
//! a Garage node restarting) sends them, and the kernel client waits and resends the
//! same call. bench does the same: a pause of 100 ms doubling to 2 s, the call resent
//! (new xid) until it gets another answer or `--jukebox-timeout` has passed since the
//! first "later" answer (then the call fails with a message that says so). Every
//! resend is counted (`jukebox` in the table and the JSON).

use std::time::{Duration, Instant};

/// NFSv3 NFS3ERR_JUKEBOX and NFSv4 NFS4ERR_DELAY share the number.
pub const JUKEBOX: u32 = 10008;

/// When and for how long to resend.
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    pub first: Duration,
    pub max: Duration,
    /// Give up on a call this long after its first JUKEBOX/DELAY.
    pub timeout: Duration,
}

impl Policy {
    pub fn new(timeout: Duration) -> Policy {
        Policy {
            first: Duration::from_millis(100),
            max: Duration::from_secs(2),
            timeout,
        }
    }

    /// The pause before resend number `tries` (0 = the first).
    pub fn pause(&self, tries: u32) -> Duration {
        self.first.saturating_mul(1 << tries.min(16)).min(self.max)
    }

    /// Whether a call first answered "later" at `since` may still be resent at `now`.
    pub fn may_resend(&self, since: Instant, now: Instant) -> bool {
        now.saturating_duration_since(since) < self.timeout
    }

    /// Why a call failed after all.
    pub fn gave_up(&self, what: &str) -> String {
        format!(
            "{what}: the server kept answering JUKEBOX/DELAY (try again later) for {:.1} s; \
             giving up (--jukebox-timeout)",
            self.timeout.as_secs_f64()
        )
    }
}

impl Default for Policy {
    fn default() -> Self {
        Policy::new(Duration::from_secs(60))
    }
}

/// A call's resend state.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tries {
    pub since: Option<Instant>,
    pub n: u32,
}

impl Tries {
    /// After a JUKEBOX/DELAY at `now`: the pause before resending, or `None` when the
    /// policy's time is up.
    pub fn next(&mut self, p: &Policy, now: Instant) -> Option<Duration> {
        let since = *self.since.get_or_insert(now);
        if !p.may_resend(since, now) {
            return None;
        }
        let d = p.pause(self.n);
        self.n = self.n.saturating_add(1);
        Some(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_to_the_cap_and_time_runs_out() {
        let p = Policy::new(Duration::from_secs(3));
        let ms: Vec<u128> = (0..7).map(|t| p.pause(t).as_millis()).collect();
        assert_eq!(ms, vec![100, 200, 400, 800, 1600, 2000, 2000]);
        assert_eq!(p.pause(u32::MAX), Duration::from_secs(2));
        let t0 = Instant::now();
        let mut t = Tries::default();
        assert_eq!(t.next(&p, t0), Some(Duration::from_millis(100)));
        assert_eq!(
            t.next(&p, t0 + Duration::from_secs(1)),
            Some(Duration::from_millis(200))
        );
        assert_eq!(t.next(&p, t0 + Duration::from_secs(3)), None);
        assert!(p.gave_up("COMMIT").contains("--jukebox-timeout"));
    }
}
