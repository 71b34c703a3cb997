//! Several endpoints of one cluster, and the retry policy of every store call.
//!
//! `object_store`'s `AmazonS3` talks to one endpoint, so there is one client (and one
//! `Rest`) per configured endpoint; `Pool::run` sends a call to the current endpoint
//! and, when it fails retryably (connection refused or reset, timeout, 5xx, 429),
//! moves it to the next healthy one at once. Neither client retries by itself: all
//! retrying happens here, so one budget (`retry_budget_s`) bounds the whole call.
//!
//! Health: an endpoint that failed is "down" for a back-off (1 s doubling per
//! consecutive failure, at most 30 s); calls skip it while another endpoint is up, so
//! a dead node costs one failed request per back-off period, not one per request.
//! When every endpoint is down a call still probes the one that comes back first,
//! after its own jittered backoff: the cluster may be restarting as a whole.
//!
//! Multipart uploads: parts of one upload may be sent to different endpoints. That is
//! correct for a cluster whose upload ids are cluster-wide — Garage keeps uploads in
//! its multipart-upload table, sharded and replicated across the cluster and keyed by
//! the upload id (the UUID of the object version it creates), not in the node that
//! answered CreateMultipartUpload; any node serves UploadPart / CompleteMultipartUpload
//! for it (the part data goes to the block store, also cluster-wide). Endpoints of
//! different clusters must never be listed together: nothing here could detect it.

use super::super::gate::Gate;
use super::super::{BResult, BackendError};
use super::rest::{backoff, Rest};
use object_store::aws::AmazonS3;
use std::future::Future;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Process-wide count of switches from a failed endpoint to another
/// (`nfsgw_s3_endpoint_failovers_total`).
static FAILOVERS: AtomicU64 = AtomicU64::new(0);

pub fn failovers() -> u64 {
    FAILOVERS.load(Ordering::Relaxed)
}

/// The back-off before retry `retries` with `left` of the budget, and whether that
/// retry is the call's last: the jittered `backoff`, unless it reaches the end of
/// the budget; then half of what is left, and again at each retry after, until that
/// half is below `LAST_NAP`, whose retry is the last. With full jitter alone, a draw
/// past the deadline (up to 5 s) slept the budget out and gave up untried, so an
/// outage of a third of the budget could still answer NFS3ERR_JUKEBOX; halving once
/// and giving up after ended a call that kept failing as early as half its budget.
/// Now a call that keeps failing fast retries until `LAST_NAP` before its deadline
/// (at most about log2(budget / `LAST_NAP`) attempts more: 6 for 3 s), and an outage
/// shorter than the budget is not seen by the client (README, the s3 backend's
/// retries).
fn nap(retries: usize, left: Duration) -> (Duration, bool) {
    let b = backoff(retries);
    if b < left {
        (b, false)
    } else {
        (left / 2, left / 2 < LAST_NAP)
    }
}

/// The shortest nap before the deadline after which the call tries once more.
const LAST_NAP: Duration = Duration::from_millis(50);

/// Longest an endpoint is skipped after failing.
const MAX_DOWN: Duration = Duration::from_secs(30);
/// At most one failover log line per this period (a flapping node must not flood).
const LOG_EVERY: Duration = Duration::from_secs(1);
/// `tried` is a bitmask; `config` limits endpoints to 64.
pub const MAX_ENDPOINTS: usize = 64;

pub(super) struct Endpoint {
    /// The URL, for logs and the backend identity.
    pub url: String,
    pub s3: AmazonS3,
    pub rest: Rest,
    /// Milliseconds since `Pool::epoch` before which calls avoid this endpoint.
    down_until_ms: AtomicU64,
    /// Consecutive failures (sets the back-off); 0 = healthy.
    fails: AtomicU32,
}

impl Endpoint {
    pub fn new(url: String, s3: AmazonS3, rest: Rest) -> Endpoint {
        Endpoint {
            url,
            s3,
            rest,
            down_until_ms: AtomicU64::new(0),
            fails: AtomicU32::new(0),
        }
    }
}

pub(super) struct Pool {
    eps: Vec<Endpoint>,
    current: AtomicUsize,
    epoch: Instant,
    budget: Duration,
    retries: usize,
    /// Longest single attempt (`timeout_s`), further capped by what is left of the budget.
    attempt_timeout: Duration,
    last_log_ms: AtomicU64,
    /// Under `[ha]`: the deadline every request that changes the store is checked
    /// against immediately before it is sent (`write`, `write_copy`; docs/ha.md).
    gate: OnceLock<Arc<Gate>>,
}

impl Pool {
    pub fn new(
        eps: Vec<Endpoint>,
        budget: Duration,
        retries: usize,
        attempt_timeout: Duration,
    ) -> Pool {
        assert!(!eps.is_empty() && eps.len() <= MAX_ENDPOINTS);
        Pool {
            eps,
            current: AtomicUsize::new(0),
            epoch: Instant::now(),
            budget,
            retries,
            attempt_timeout,
            last_log_ms: AtomicU64::new(0),
            gate: OnceLock::new(),
        }
    }

    /// Gates `write` and `write_copy` from now on (set once, by `[ha]` at start).
    pub fn set_gate(&self, gate: Arc<Gate>) {
        let _ = self.gate.set(gate);
    }

    pub fn urls(&self) -> impl Iterator<Item = &str> {
        self.eps.iter().map(|e| e.url.as_str())
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn is_up(&self, i: usize, now: u64) -> bool {
        self.eps[i].down_until_ms.load(Ordering::Relaxed) <= now
    }

    /// The first endpoint from the current one on that is up and not yet `tried` by
    /// this call.
    fn next_untried(&self, tried: u64) -> Option<usize> {
        let now = self.now_ms();
        let cur = self.current.load(Ordering::Relaxed);
        (0..self.eps.len())
            .map(|d| (cur + d) % self.eps.len())
            .find(|&i| tried & (1 << i) == 0 && self.is_up(i, now))
    }

    /// For a retry: an endpoint that is up (from the current one on), else the one
    /// whose back-off ends first.
    fn for_retry(&self) -> usize {
        let now = self.now_ms();
        let cur = self.current.load(Ordering::Relaxed);
        let n = self.eps.len();
        (0..n)
            .map(|d| (cur + d) % n)
            .find(|&i| self.is_up(i, now))
            .unwrap_or_else(|| {
                (0..n)
                    .min_by_key(|&i| self.eps[i].down_until_ms.load(Ordering::Relaxed))
                    .unwrap_or(0)
            })
    }

    fn succeeded(&self, i: usize) {
        let e = &self.eps[i];
        if e.fails.load(Ordering::Relaxed) != 0 {
            e.fails.store(0, Ordering::Relaxed);
            e.down_until_ms.store(0, Ordering::Relaxed);
        }
        // An endpoint that answered while the current one is down becomes current
        // (every endpoint was down and this one came back first).
        let cur = self.current.load(Ordering::Relaxed);
        if cur != i && !self.is_up(cur, self.now_ms()) {
            self.switch(cur, i, "it failed; this one answered again");
        }
    }

    fn failed(&self, i: usize, why: &str) {
        let e = &self.eps[i];
        let fails = e.fails.fetch_add(1, Ordering::Relaxed);
        let down = Duration::from_secs(1 << fails.min(5)).min(MAX_DOWN);
        e.down_until_ms
            .store(self.now_ms() + down.as_millis() as u64, Ordering::Relaxed);
        if let Some(next) = self.next_untried(1 << i) {
            if next != i {
                self.switch(i, next, why);
            }
        }
    }

    /// Makes `to` the current endpoint unless another call already moved on from
    /// `from`; counts the switch and logs it (at most once per `LOG_EVERY`).
    fn switch(&self, from: usize, to: usize, why: &str) {
        if self
            .current
            .compare_exchange(from, to, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        FAILOVERS.fetch_add(1, Ordering::Relaxed);
        let now = self.now_ms().max(1);
        let last = self.last_log_ms.load(Ordering::Relaxed);
        if (last == 0 || now >= last + LOG_EVERY.as_millis() as u64)
            && self
                .last_log_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(
                from = %self.eps[from].url,
                to = %self.eps[to].url,
                why,
                "s3: endpoint failed; switching to the next one"
            );
        }
    }

    /// Runs `call` against an endpoint, failing over and retrying retryable failures
    /// until it succeeds, fails for good, or the budget or the retries run out (then the
    /// last retryable error, which the NFS side answers with JUKEBOX / NFS4ERR_DELAY).
    pub async fn run<'s, T, F, Fut>(&'s self, call: F) -> BResult<T>
    where
        F: Fn(&'s Endpoint) -> Fut,
        Fut: Future<Output = BResult<T>> + 's,
    {
        self.run_within(self.budget, false, call).await
    }

    /// `run` for a request that changes the store (PUT, DELETE, multipart create and
    /// parts): under `[ha]` each attempt is sent only while the gate admits it. The
    /// check is here, per attempt, because this is after the caller's wait for an
    /// in-flight permit and after each retry's backoff: a request that passed the
    /// NFSv4.1 fence at its COMPOUND's start and then waited behind requests a hung
    /// store holds must not be sent past the deadline (its timeout only starts when
    /// it is sent, so it could reach the store after a standby took over). An attempt
    /// sent before the deadline is still cut at `timeout_s`, below `lease_s / 4`.
    pub async fn write<'s, T, F, Fut>(&'s self, call: F) -> BResult<T>
    where
        F: Fn(&'s Endpoint) -> Fut,
        Fut: Future<Output = BResult<T>> + 's,
    {
        self.run_within(self.budget, true, call).await
    }

    /// `write` for a request whose work the store does on its side (CopyObject,
    /// UploadPartCopy, CompleteMultipartUpload of copied or written parts): its time grows with the bytes the store
    /// copies, not with the gateway's traffic, so it gets at least one whole attempt
    /// (`timeout_s`) before it counts as failed. Under the retry budget alone a slow
    /// store's 64 MiB part copy ran out of it, the NFS COPY was answered NFS4ERR_DELAY
    /// and the client's resend started the whole copy again, for ever (moto, 1 GiB).
    /// Gated as `write`.
    pub async fn write_copy<'s, T, F, Fut>(&'s self, call: F) -> BResult<T>
    where
        F: Fn(&'s Endpoint) -> Fut,
        Fut: Future<Output = BResult<T>> + 's,
    {
        self.run_within(self.budget.max(self.attempt_timeout), true, call)
            .await
    }

    async fn run_within<'s, T, F, Fut>(
        &'s self,
        budget: Duration,
        gated: bool,
        call: F,
    ) -> BResult<T>
    where
        F: Fn(&'s Endpoint) -> Fut,
        Fut: Future<Output = BResult<T>> + 's,
    {
        let deadline = Instant::now() + budget;
        let mut tried: u64 = 0;
        let mut retries = 0usize;
        let mut last_try = false;
        let mut last = String::new();
        loop {
            let i = match self.next_untried(tried) {
                Some(i) => i,
                // Nothing tried yet and every endpoint down: try the likeliest at once.
                None if tried == 0 && retries == 0 => self.for_retry(),
                None => {
                    // Every endpoint was tried or is down: back off, then retry.
                    if retries >= self.retries || last_try {
                        return Err(BackendError::Retryable(last));
                    }
                    let left = deadline.saturating_duration_since(Instant::now());
                    let (pause, final_one) = nap(retries, left);
                    last_try = final_one;
                    tokio::time::sleep(pause).await;
                    retries += 1;
                    tried = 0;
                    self.for_retry()
                }
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(BackendError::Retryable(if last.is_empty() {
                    "retry budget spent before the first attempt".into()
                } else {
                    last
                }));
            }
            if gated && super::super::gate::admitted_task() {
                if let Some(g) = self.gate.get() {
                    g.check("a store change")?;
                }
            }
            tried |= 1 << i;
            let ep = &self.eps[i];
            let why = match tokio::time::timeout(left.min(self.attempt_timeout), call(ep)).await {
                Ok(Err(BackendError::Retryable(why))) => why,
                Ok(r) => {
                    // Any answer but a retryable one shows the endpoint is alive.
                    self.succeeded(i);
                    return r;
                }
                Err(_) => format!(
                    "{}: no answer within {:?}",
                    ep.url,
                    left.min(self.attempt_timeout)
                ),
            };
            tracing::debug!(endpoint = %ep.url, why, retries, "s3: call failed, retrying");
            self.failed(i, &why);
            last = why;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    /// A pool over `n` endpoints that are never contacted (the calls below decide
    /// each attempt's outcome by the endpoint's URL).
    fn pool(n: usize, budget_ms: u64, retries: usize) -> (tokio::runtime::Runtime, Pool) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let cfg: crate::config::S3Config = toml::from_str(
            "bucket = \"b\"\npath_style = true\nallow_http = true\n\
             access_key_id = \"k\"\nsecret_access_key = \"s\"\n",
        )
        .unwrap();
        let opts = object_store::ClientOptions::new().with_allow_http(true);
        let eps = {
            let _g = rt.enter();
            (0..n)
                .map(|i| {
                    super::super::endpoint(
                        &cfg,
                        format!("http://127.0.0.1:{}", 9 + i),
                        &opts,
                        &Default::default(),
                    )
                })
                .collect::<anyhow::Result<Vec<_>>>()
                .unwrap()
        };
        let p = Pool::new(
            eps,
            Duration::from_millis(budget_ms),
            retries,
            Duration::from_secs(30),
        );
        (rt, p)
    }

    fn port(ep: &Endpoint) -> usize {
        ep.url.rsplit(':').next().unwrap().parse::<usize>().unwrap() - 9
    }

    #[test]
    fn a_failing_endpoint_moves_calls_to_the_next_and_is_then_skipped() {
        let (rt, p) = pool(3, 5000, 3);
        let hits: Arc<Vec<AtomicUsize>> = Arc::new((0..3).map(|_| AtomicUsize::new(0)).collect());
        let before = failovers();
        for _ in 0..10 {
            let r = rt.block_on(p.run(|ep| {
                let i = port(ep);
                hits[i].fetch_add(1, Ordering::Relaxed);
                async move {
                    if i == 0 {
                        Err(BackendError::Retryable("refused".into()))
                    } else {
                        Ok(i)
                    }
                }
            }));
            assert_eq!(r.unwrap(), 1);
        }
        assert_eq!(
            hits[0].load(Ordering::Relaxed),
            1,
            "dead endpoint retried per call"
        );
        assert_eq!(hits[1].load(Ordering::Relaxed), 10);
        assert_eq!(hits[2].load(Ordering::Relaxed), 0);
        assert!(failovers() > before);
    }

    #[test]
    fn the_budget_bounds_a_call_that_keeps_failing_or_never_answers() {
        let (rt, p) = pool(2, 400, 100);
        let t = Instant::now();
        let r: BResult<()> =
            rt.block_on(p.run(|_| async { Err(BackendError::Retryable("503".into())) }));
        let took = t.elapsed();
        assert!(matches!(r, Err(BackendError::Retryable(_))));
        // Naps halve what is left until it is below `LAST_NAP` (`nap`): the call
        // gives up within about 2 * `LAST_NAP` of its deadline.
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_millis(900),
            "{took:?}"
        );
        // a stalled endpoint: the attempt is cut at what is left of the budget
        let t = Instant::now();
        let r: BResult<()> = rt.block_on(p.run(|_| std::future::pending()));
        let took = t.elapsed();
        assert!(matches!(r, Err(BackendError::Retryable(ref m)) if m.contains("no answer")));
        assert!(
            took >= Duration::from_millis(350) && took < Duration::from_millis(900),
            "{took:?}"
        );
    }

    /// A back-off that would reach the deadline becomes half of what is left; the
    /// last once that half is below `LAST_NAP`.
    #[test]
    fn a_back_off_past_the_budget_leaves_one_attempt_before_it_ends() {
        for retries in 0..12 {
            let (pause, last) = nap(retries, Duration::from_millis(10));
            assert!(pause <= Duration::from_millis(10));
            if last {
                assert_eq!(pause, Duration::from_millis(5));
            }
            assert!(last || pause < Duration::from_millis(10));
        }
        // 5 s of back-off at most: always past 1 ms, never past 10 s.
        // (A draw of exactly 0 ms, 1 in 5001, stays a draw.)
        let (pause, last) = nap(9, Duration::from_millis(1));
        assert!(last && pause == Duration::from_micros(500) || pause.is_zero());
        assert!(!nap(9, Duration::from_secs(10)).1);
        // Past the deadline with more than twice `LAST_NAP` left: halved, not the
        // last (a draw reaches 200 ms 24 times in 25).
        let naps: Vec<_> = (0..50)
            .map(|_| nap(9, Duration::from_millis(200)))
            .collect();
        assert!(naps
            .iter()
            .all(|&(p, last)| !last && p <= Duration::from_millis(200)));
        assert!(naps.contains(&(Duration::from_millis(100), false)));
        // Through the pool: a store that fails for half the budget (an outage of
        // 400 ms, a budget of 800 ms) and a back-off that soon draws past it: the call
        // succeeds every time. (With 150 of 300 ms, the attempt begun just before the
        // outage's end, descheduled for 150 ms on a loaded 2-core host, left no time
        // for the last one: a flake, not the rule.)
        let (rt, p) = pool(1, 800, 100);
        for _ in 0..3 {
            let t = Instant::now();
            let r = rt.block_on(p.run(|_| async move {
                if t.elapsed() < Duration::from_millis(400) {
                    Err(BackendError::Retryable("503".into()))
                } else {
                    Ok(())
                }
            }));
            assert!(r.is_ok(), "an outage of half the budget answered {r:?}");
        }
    }

    #[test]
    fn a_copy_request_gets_a_whole_attempt_beyond_the_retry_budget() {
        let (rt, p) = pool(1, 100, 3);
        let slow = || async {
            tokio::time::sleep(Duration::from_millis(400)).await;
            Ok(7)
        };
        let r: BResult<u32> = rt.block_on(p.write(|_| slow()));
        assert!(matches!(r, Err(BackendError::Retryable(ref m)) if m.contains("no answer")));
        assert_eq!(rt.block_on(p.write_copy(|_| slow())).unwrap(), 7);
        // still bounded: by the attempt timeout (30 s here), not for ever
        let t = Instant::now();
        let r: BResult<()> =
            rt.block_on(p.write_copy(|_| async { Err(BackendError::Retryable("503".into())) }));
        assert!(matches!(r, Err(BackendError::Retryable(_))));
        assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    }

    #[test]
    fn retries_count_attempts_on_endpoints_already_tried_and_final_answers_are_not_retried() {
        let (rt, p) = pool(1, 60_000, 2);
        let n = AtomicUsize::new(0);
        let r: BResult<()> = rt.block_on(p.run(|_| {
            n.fetch_add(1, Ordering::Relaxed);
            async { Err(BackendError::Retryable("reset".into())) }
        }));
        assert!(matches!(r, Err(BackendError::Retryable(ref m)) if m == "reset"));
        assert_eq!(n.load(Ordering::Relaxed), 3, "one attempt and two retries");
        for e in [
            BackendError::NotFound,
            BackendError::Permanent("403".into()),
        ] {
            let n = AtomicUsize::new(0);
            let want = std::mem::discriminant(&e);
            let e = std::sync::Mutex::new(Some(e));
            let r: BResult<()> = rt.block_on(p.run(|_| {
                n.fetch_add(1, Ordering::Relaxed);
                let e = e.lock().unwrap().take().unwrap();
                async move { Err(e) }
            }));
            assert_eq!(std::mem::discriminant(&r.unwrap_err()), want);
            assert_eq!(n.load(Ordering::Relaxed), 1);
        }
    }

    /// Under `[ha]` a request that changes the store is not sent past the gate's
    /// deadline, and every retry checks it again; reads are not gated.
    #[test]
    fn past_the_deadline_a_write_is_not_sent_and_each_retry_rechecks() {
        let (rt, p) = pool(1, 5000, 100);
        let gate = Arc::new(Gate::shut());
        p.set_gate(gate.clone());
        let n = AtomicUsize::new(0);
        let r: BResult<()> = rt.block_on(p.write(|_| {
            n.fetch_add(1, Ordering::Relaxed);
            async { Ok(()) }
        }));
        assert!(matches!(r, Err(BackendError::Retryable(ref m)) if m.contains("deadline")));
        assert_eq!(n.load(Ordering::Relaxed), 0, "sent past the deadline");
        let r: BResult<u8> = rt.block_on(p.run(|_| async { Ok(1) }));
        assert_eq!(r.unwrap(), 1, "a read is not gated");
        // Each attempt fails (a store that answers 503): the retries go on until the
        // deadline and not one attempt starts after it.
        let deadline = Instant::now() + Duration::from_millis(300);
        gate.serve_until(deadline);
        let starts = std::sync::Mutex::new(Vec::new());
        let r: BResult<()> = rt.block_on(p.write(|_| {
            starts.lock().unwrap().push(Instant::now());
            async { Err(BackendError::Retryable("503".into())) }
        }));
        assert!(matches!(r, Err(BackendError::Retryable(ref m)) if m.contains("deadline")));
        let starts = starts.into_inner().unwrap();
        assert!(
            starts.len() >= 2,
            "retried before the deadline: {}",
            starts.len()
        );
        assert!(
            starts.iter().all(|&t| t < deadline),
            "an attempt past the deadline"
        );
    }

    /// A write that waits for an in-flight permit behind requests a hung store holds
    /// is checked when it gets the permit, not when it was queued.
    #[test]
    fn a_write_whose_permit_wait_crosses_the_deadline_is_not_sent() {
        let (rt, p) = pool(1, 5000, 3);
        let p = Arc::new(p);
        let gate = Arc::new(Gate::shut());
        p.set_gate(gate.clone());
        gate.serve_until(Instant::now() + Duration::from_millis(150));
        let sem = Arc::new(tokio::sync::Semaphore::new(1));
        let held = rt.block_on(sem.clone().acquire_owned()).unwrap();
        let sent = Arc::new(AtomicUsize::new(0));
        let (p2, s2, sent2) = (p.clone(), sem.clone(), sent.clone());
        let queued = rt.spawn(async move {
            let _permit = s2.acquire_owned().await;
            p2.write(|_| {
                sent2.fetch_add(1, Ordering::Relaxed);
                async { Ok(()) }
            })
            .await
        });
        assert!(gate.admits(), "queued before the deadline");
        std::thread::sleep(Duration::from_millis(250));
        drop(held);
        let r = rt.block_on(queued).unwrap();
        assert!(matches!(r, Err(BackendError::Retryable(_))), "{r:?}");
        assert_eq!(
            sent.load(Ordering::Relaxed),
            0,
            "sent after its permit wait"
        );
    }
}
