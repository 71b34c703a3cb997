//! The `s3` backend: any S3-compatible bucket, through the `object_store` crate.
//!
//! Threads: backend workers (the NFS side, `backend.workers`) call the blocking
//! `Backend` methods; each call becomes a future spawned on this backend's own async
//! runtime (`runtime_threads`, optionally pinned to `runtime_cores`) and the worker
//! waits for its answer. A semaphore bounds the requests in flight to the store
//! (`max_concurrency`). Reactors never call a backend (docs/architecture.md §6).
//!
//! Copies (renames, metadata changes) of objects over `multipart_copy_over_mib` go part
//! by part (`copy.rs`): CopyObject refuses sources over 5 GiB.
//!
//! Data plane through `object_store`: ranged GETs (`ObjectStore::get_opts`) and the
//! parts of multipart uploads (`MultipartStore`), with its retry policy (jittered
//! backoff on 5xx, timeouts and resets). Control plane (HEAD, PUT, DELETE, copy,
//! listing, opening a multipart upload with metadata) as signed REST calls through
//! `object_store`'s HTTP client and signer: see `rest.rs` for why.
//!
//! Keys: the backend key under `prefix` (config); a directory is its zero-byte
//! `dir/` marker. Names starting with `.nfsgw-tmp.` are this gateway's own and never
//! listed. Writes are staged (`stage.rs`) and uploaded on `sync`.

mod cas;
mod chunk;
mod copy;
mod exclusive;
mod failover;
mod handlekey;
mod known;
mod list;
mod range;
mod readahead;
pub mod requests;
mod rest;
mod stage;

use super::{
    check_key, check_prefix, BResult, Backend, BackendError, Cas, ListPage, ObjectMeta,
    RandomWrite, SharedState, UserMeta, XattrSet, TEMP_PREFIX,
};
use crate::config::S3Config;
use anyhow::Context;
use bytes::Bytes;
pub use failover::failovers as endpoint_failovers;
use failover::{Endpoint, Pool};
use object_store::aws::AmazonS3Builder;
use object_store::client::HttpConnector;
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path as OsPath;
use object_store::{BackoffConfig, ClientOptions, GetOptions, GetRange, ObjectStore, RetryConfig};
use readahead::{Block, ReadAhead};
use rest::Rest;
pub use stage::uploads_lost;
use stage::{Store, WriteBack};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// What both the backend and its write-back stage use.
struct Core {
    rt: tokio::runtime::Runtime,
    /// One client per endpoint of the cluster; every call goes through `pool.run`.
    pool: Pool,
    /// Key prefix inside the bucket ("" or ending in '/').
    prefix: String,
    inflight: Arc<tokio::sync::Semaphore>,
    bucket: String,
    ra: ReadAhead,
    /// Whether the store refuses a `PUT` with `If-None-Match: *` over an existing
    /// object (AWS, moto, MinIO do; Garage ignores the header and overwrites). Probed
    /// once at open (`probe_if_none_match`); until then, and when the probe could not
    /// run, exclusive PUTs check with a HEAD first.
    honours_if_none_match: std::sync::atomic::AtomicBool,
    /// Keys whose exclusive create (between its HEAD and its PUT, where the store
    /// does not honour `If-None-Match`) or rename (its copy and delete) is in flight
    /// in this gateway (`exclusive.rs`).
    claimed: exclusive::Claims,
    /// Copies of objects larger than this go part by part (`copy.rs`), bytes.
    copy_over: u64,
    /// Their part size, bytes.
    copy_part: u64,
    /// This backend's store requests (its endpoints count into it), for the tests
    /// that count them (`md_tests.rs`).
    #[cfg(test)]
    tally: Arc<requests::Tally>,
}

pub struct S3Backend {
    core: Arc<Core>,
    wb: Arc<WriteBack>,
    /// `handle_key_file`'s key, read at open; `None` = agreed through the bucket.
    key_file: Option<[u8; 32]>,
    /// The key agreed through the bucket, once agreed: the file model and the pNFS
    /// fence both ask at start, and a second agreement found the first's candidate
    /// younger than `SETTLED_AGE` and waited out `SETTLE` again for the same pick.
    agreed: std::sync::OnceLock<[u8; 32]>,
}

fn os_err(e: object_store::Error, key: &str) -> BackendError {
    use object_store::Error as E;
    match e {
        E::NotFound { .. } => BackendError::NotFound,
        E::AlreadyExists { .. } | E::Precondition { .. } => BackendError::AlreadyExists,
        E::PermissionDenied { .. }
        | E::Unauthenticated { .. }
        | E::NotSupported { .. }
        | E::NotImplemented
        | E::InvalidPath { .. } => BackendError::Permanent(format!("{key}: {e}")),
        e => {
            // After object_store's own retries: a 4xx other than throttling is the
            // request's fault and will not heal; anything else may.
            let s = e.to_string();
            let client_fault =
                s.contains("status code: 4") && !s.contains("429") && !s.contains("408");
            if client_fault {
                BackendError::Permanent(format!("{key}: {s}"))
            } else {
                BackendError::Retryable(format!("{key}: {s}"))
            }
        }
    }
}

impl Core {
    /// Runs `fut` on the runtime (bounded by the in-flight limit) and waits for it.
    fn block<T: Send + 'static>(
        &self,
        fut: impl Future<Output = BResult<T>> + Send + 'static,
    ) -> BResult<T> {
        let sem = self.inflight.clone();
        self.block_free(async move {
            let _permit = sem.acquire_owned().await;
            fut.await
        })
    }

    /// As `block`, without taking an in-flight permit: for futures that issue several
    /// requests, each taking its own. Holding one across requests that wait for others
    /// would deadlock once every permit is held by such a future.
    fn block_free<T: Send + 'static>(
        &self,
        fut: impl Future<Output = BResult<T>> + Send + 'static,
    ) -> BResult<T> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        // The task carries whether its call was admitted under `[ha]`'s identity
        // (`backend::gate`): the pool gates only such a call's changes.
        let fut = super::gate::carry(fut);
        self.rt.spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv()
            .unwrap_or_else(|_| Err(BackendError::Permanent("s3 runtime task failed".into())))
    }

    fn endpoints(&self) -> String {
        self.pool.urls().collect::<Vec<_>>().join(", ")
    }

    fn skey(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    fn path(&self, key: &str) -> BResult<OsPath> {
        OsPath::parse(self.skey(key))
            .map_err(|e| BackendError::Permanent(format!("{key}: not addressable: {e}")))
    }
}

/// The store operations staging needs, on the runtime.
struct CoreStore(Arc<Core>);

impl Store for CoreStore {
    fn head(&self, key: &str) -> BResult<ObjectMeta> {
        head(&self.0, key)
    }

    fn get_range(&self, key: &str, offset: u64, dst: &mut [u8]) -> BResult<usize> {
        get_range(&self.0, key, offset, dst)
    }

    fn put(&self, key: &str, data: Bytes, meta: &UserMeta) -> BResult<ObjectMeta> {
        put(&self.0, key, data, meta, false, true)
    }

    fn mp_create(&self, key: &str, meta: &UserMeta) -> BResult<String> {
        let c = self.0.clone();
        let (sk, k, m) = (c.skey(key), key.to_string(), meta.clone());
        self.0
            .block(async move { c.pool.write(|ep| ep.rest.mp_create(&sk, &k, &m)).await })
    }

    fn mp_part(&self, key: &str, id: &str, idx: usize, data: Bytes) -> BResult<String> {
        let c = self.0.clone();
        let (path, k, id) = (self.0.path(key)?, key.to_string(), id.to_string());
        self.0.block(async move {
            let (path, id, k) = (&path, &id, &k);
            c.pool
                .write(move |ep| {
                    let data = data.clone();
                    async move {
                        ep.rest.tally.count(requests::Req::Put);
                        ep.s3
                            .put_part(path, id, idx, data.into())
                            .await
                            .map(|p| p.content_id)
                            .map_err(|e| os_err(e, k))
                    }
                })
                .await
        })
    }

    /// CompleteMultipartUpload of written data. A Complete the store applied but
    /// whose answer was lost is retried and then gets NoSuchUpload: the data is in the
    /// store, and answering COMMIT with an error would make the application see EIO for
    /// a write that landed. So NoSuchUpload is accepted exactly when the object's ETag
    /// is the one S3 gives an object assembled from these parts
    /// (`copy::assembled_from`), never on a guess.
    fn mp_complete(&self, key: &str, id: &str, etags: Vec<String>) -> BResult<()> {
        let c = self.0.clone();
        let (path, k, id) = (self.0.path(key)?, key.to_string(), id.to_string());
        let skey = self.0.skey(key);
        let parts: Vec<PartId> = etags
            .iter()
            .map(|e| PartId {
                content_id: e.clone(),
            })
            .collect();
        self.0.ra.invalidate(key);
        let r = self.0.block({
            let c = c.clone();
            async move {
                let (path, id, k, parts) = (&path, &id, &k, &parts);
                // The store assembles the parts now: `write_copy`'s time.
                c.pool
                    .write_copy(move |ep| async move {
                        ep.rest.tally.count(requests::Req::Multipart);
                        ep.s3
                            .complete_multipart(path, id, parts.clone())
                            .await
                            .map(|_| ())
                            .map_err(|e| os_err(e, k))
                    })
                    .await
            }
        });
        // A probe of the key sent meanwhile is not believed (`put`).
        self.0.ra.known.changed(key);
        if !matches!(r, Err(BackendError::NotFound)) {
            return r;
        }
        let k = key.to_string();
        let got = self.0.block(async move {
            let (s, k) = (&skey, &k);
            c.pool.run(|ep| ep.rest.head(s, k)).await
        });
        self.0.ra.invalidate(key);
        match got {
            Ok(m) if copy::assembled_from(&m.etag, &etags) => {
                tracing::info!(key, "s3: a multipart upload's Complete answer was lost; the object is complete (its ETag matches the parts)");
                Ok(())
            }
            _ => r,
        }
    }

    fn mp_abort(&self, key: &str, id: &str) {
        let c = self.0.clone();
        let Ok(path) = self.0.path(key) else {
            return;
        };
        let (k, id) = (key.to_string(), id.to_string());
        let r = self.0.block(async move {
            let (path, id, k) = (&path, &id, &k);
            c.pool
                .run(move |ep| async move {
                    ep.rest.tally.count(requests::Req::Multipart);
                    ep.s3
                        .abort_multipart(path, id)
                        .await
                        .map_err(|e| os_err(e, k))
                })
                .await
        });
        if let Err(e) = r {
            tracing::warn!(key, error = %e, "s3: abort of a multipart upload failed (the bucket's lifecycle rule cleans it up)");
        }
    }
}

fn head(c: &Arc<Core>, key: &str) -> BResult<ObjectMeta> {
    if let Some(m) = c.ra.attr(key) {
        return m.ok_or(BackendError::NotFound);
    }
    let c2 = c.clone();
    let (sk, k) = (c.skey(key), key.to_string());
    let r = c.block(async move { c2.pool.run(|ep| ep.rest.head(&sk, &k)).await });
    remember(c, key, &r);
    r
}

/// HEAD that bypasses the attribute cache.
fn fresh_head(c: &Arc<Core>, key: &str) -> BResult<ObjectMeta> {
    let c2 = c.clone();
    let (sk, k) = (c.skey(key), key.to_string());
    c.block(async move { c2.pool.run(|ep| ep.rest.head(&sk, &k)).await })
}

/// Finds out whether the store honours `If-None-Match: *` on PUT: a probe object is
/// put twice with it; a second success means the store ignores it (Garage), and
/// exclusive creates then use HEAD + PUT. Any failure (store unreachable at start)
/// leaves the HEAD + PUT way, which is correct on every store, only one round trip
/// slower.
fn probe_if_none_match(c: &Arc<Core>) {
    use std::sync::atomic::Ordering;
    let name = format!("{TEMP_PREFIX}probe-{:016x}", rand::random::<u64>());
    let try_put = |c: &Arc<Core>| {
        let c2 = c.clone();
        let (sk, k, m) = (c.skey(&name), name.clone(), UserMeta::new());
        c.block(async move {
            c2.pool
                .run(|ep| ep.rest.put(&sk, &k, Bytes::new(), &m, true))
                .await
        })
    };
    let verdict = match try_put(c) {
        Ok(_) => match try_put(c) {
            Err(BackendError::AlreadyExists) => Some(true),
            Ok(_) => Some(false),
            Err(_) => None,
        },
        Err(_) => None,
    };
    let c2 = c.clone();
    let (sk, k) = (c.skey(&name), name.clone());
    if let Err(e) = c.block(async move { c2.pool.run(|ep| ep.rest.delete(&sk, &k)).await }) {
        tracing::debug!(error = %e, key = %name, "s3: probe object not deleted");
    }
    match verdict {
        Some(true) => {
            c.honours_if_none_match.store(true, Ordering::Relaxed);
            tracing::info!("s3: the store honours If-None-Match: exclusive creates are atomic");
        }
        Some(false) => tracing::warn!(
            "s3: the store ignores If-None-Match on PUT (as Garage does): exclusive creates check with a HEAD first, which is not atomic between gateways on one bucket"
        ),
        None => tracing::warn!(
            "s3: could not probe If-None-Match at start; exclusive creates check with a HEAD first"
        ),
    }
}

fn remember(c: &Core, key: &str, r: &BResult<ObjectMeta>) {
    match r {
        Ok(m) => c.ra.remember_attr(m),
        Err(BackendError::NotFound) => c.ra.remember_absent(key),
        Err(_) => {}
    }
}

/// One ranged GET through object_store (failing over between endpoints); past the end
/// of the object = no bytes.
async fn get_bytes(c: &Core, path: &OsPath, key: &str, offset: u64, len: u64) -> BResult<Bytes> {
    c.pool
        .run(|ep| get_bytes_from(ep, path, key, offset, len))
        .await
}

async fn get_bytes_from(
    ep: &Endpoint,
    path: &OsPath,
    key: &str,
    offset: u64,
    len: u64,
) -> BResult<Bytes> {
    let opts = GetOptions {
        range: Some(GetRange::Bounded(offset..offset + len)),
        ..Default::default()
    };
    ep.rest.tally.count(requests::Req::Get);
    match ep.s3.get_opts(path, opts).await {
        Ok(r) => r.bytes().await.map_err(|e| os_err(e, key)),
        Err(e) => {
            // At or past the end of the object: S3 answers 416 (object_store reports
            // the status in its message). Anything else is an error, never "no bytes".
            let s = e.to_string();
            if s.contains("status code: 416") {
                Ok(Bytes::new())
            } else {
                Err(os_err(e, key))
            }
        }
    }
}

fn get_range(c: &Arc<Core>, key: &str, offset: u64, dst: &mut [u8]) -> BResult<usize> {
    if dst.is_empty() {
        return Ok(0);
    }
    let path = c.path(key);
    if let Ok(path) = &path {
        let fetch = |start: u64, len: u64, b: Arc<Block>| {
            let (c2, p, k) = (c.clone(), path.clone(), key.to_string());
            let sem = c.inflight.clone();
            c.rt.spawn(async move {
                let _permit = sem.acquire_owned().await;
                b.set(get_bytes(&c2, &p, &k, start, len).await);
            });
        };
        let size = c.ra.attr(key).flatten().map(|m| m.size);
        if let Some(r) = c.ra.read(key, offset, dst, size, &fetch) {
            return r;
        }
    }
    let c2 = c.clone();
    let k = key.to_string();
    let len = dst.len() as u64;
    let got: BResult<Bytes> = match path {
        Ok(path) => c.block(async move { get_bytes(&c2, &path, &k, offset, len).await }),
        // Keys object_store cannot name (control characters): plain signed GET.
        Err(_) => {
            let sk = c.skey(key);
            c.block(async move {
                c2.pool
                    .run(|ep| ep.rest.get_range(&sk, &k, offset, len))
                    .await
            })
        }
    };
    let b = got?;
    let n = b.len().min(dst.len());
    dst[..n].copy_from_slice(&b[..n]);
    Ok(n)
}

/// The PUT itself (`gated`: under `[ha]`'s gate), on the runtime.
fn put_request(
    c: &Arc<Core>,
    key: &str,
    data: Bytes,
    meta: &UserMeta,
    conditional: bool,
    gated: bool,
) -> BResult<rest::Response> {
    let c2 = c.clone();
    let (sk, k, m) = (c.skey(key), key.to_string(), meta.clone());
    c.block(async move {
        if gated {
            c2.pool
                .write(|ep| ep.rest.put(&sk, &k, data.clone(), &m, conditional))
                .await
        } else {
            c2.pool
                .run(|ep| ep.rest.put(&sk, &k, data.clone(), &m, conditional))
                .await
        }
    })
}

fn put(
    c: &Arc<Core>,
    key: &str,
    data: Bytes,
    meta: &UserMeta,
    if_absent: bool,
    gated: bool,
) -> BResult<ObjectMeta> {
    let size = data.len() as u64;
    let conditional = if_absent
        && c.honours_if_none_match
            .load(std::sync::atomic::Ordering::Relaxed);
    // A store that ignores If-None-Match would overwrite: look first (a fresh HEAD,
    // not the attribute cache), the key claimed in this gateway until the PUT is
    // answered (`exclusive.rs`). Not atomic between gateways; what depends on
    // atomicity across gateways (the handle key) does not use this.
    let _claim = (if_absent && !conditional).then(|| c.claimed.claim(key));
    // The look is spared when nothing was at the name by a probe that no change of
    // this gateway at it overlapped (`probe_absent`, `Known::is_absent`): the
    // CREATE's own look-up just now (each probe forgets what an earlier one noted,
    // so a note left by an operation that failed after its probe is not read). Read under the claim, before `invalidate` ends
    // it: an exclusive create of the key that held the claim before ended it too.
    let probed = _claim.is_some() && c.ra.known.is_absent(key.strip_suffix('/').unwrap_or(key));
    // A new directory's marker after its probe (or a LOOKUP's empty listing of it):
    // the directory holds nothing else (`Known::making_dir`, which also forgets an
    // older note of it), so the question after the MKDIR needs no listing
    // (`dir_is_empty`). Also read before `invalidate`; a failure below ends it.
    let marker = if_absent && key.ends_with('/');
    if marker {
        c.ra.known.making_dir(key);
    }
    c.ra.invalidate(key);
    if _claim.is_some() && !probed {
        let taken = match fresh_head(c, key) {
            Ok(_) => Some(BackendError::AlreadyExists),
            Err(BackendError::NotFound) => None,
            Err(e) => Some(e),
        };
        if let Some(e) = taken {
            if marker {
                c.ra.known.not_made(key);
            }
            return Err(e);
        }
    }
    let r = put_request(c, key, data, meta, conditional, gated);
    // Answered (or failed, perhaps after landing): a probe of the name sent since
    // `invalidate` above may not have seen it, and is not believed. Still under the
    // claim, so the next exclusive create of the key looks again.
    c.ra.known.changed(key);
    if marker && r.is_err() {
        c.ra.known.not_made(key);
    }
    let r = r?;
    let mut o = rest::meta_from_headers(key, &r.headers);
    o.size = size;
    o.user = meta.clone();
    if o.mtime_ns == 0 {
        // What Last-Modified will say: the store's clock when it answered (AWS sends
        // no Last-Modified on PUT), else this second (S3 keeps whole seconds).
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        o.mtime_ns = rest::date_ns(&r.headers).unwrap_or(now * 1_000_000_000);
    }
    if !o.etag.is_empty() {
        // The next HEAD (the handle, the reply's attributes) needs no round trip, nor
        // does a listing entry of it (`known.rs`).
        c.ra.remember_attr(&o);
        c.ra.known.wrote(&o);
    }
    Ok(o)
}

/// The configured endpoints: `endpoints`, or `endpoint`, or AWS's for the region.
fn endpoint_urls(cfg: &S3Config) -> Vec<String> {
    let urls = match (&cfg.endpoint, cfg.endpoints.is_empty()) {
        (_, false) => cfg.endpoints.clone(),
        (Some(e), true) => vec![e.clone()],
        (None, true) => vec![format!("https://s3.{}.amazonaws.com", cfg.region)],
    };
    urls.into_iter()
        .map(|u| u.trim_end_matches('/').to_string())
        .collect()
}

/// The clients of one endpoint. Neither retries by itself: `failover::Pool` does, so
/// the retry budget bounds the whole call (object_store would otherwise retry on its
/// own schedule, on this endpoint only).
fn endpoint(
    cfg: &S3Config,
    url: String,
    options: &ClientOptions,
    tally: &Arc<requests::Tally>,
) -> anyhow::Result<Endpoint> {
    let retry = RetryConfig {
        backoff: BackoffConfig::default(),
        max_retries: 0,
        retry_timeout: Duration::from_secs_f64(cfg.retry_budget_s),
    };
    let mut b = AmazonS3Builder::from_env()
        .with_bucket_name(&cfg.bucket)
        .with_region(&cfg.region)
        .with_endpoint(&url)
        .with_allow_http(cfg.allow_http)
        .with_virtual_hosted_style_request(!cfg.path_style)
        .with_client_options(options.clone())
        .with_retry(retry);
    if let (Some(id), Some(secret)) = (&cfg.access_key_id, &cfg.secret_access_key) {
        b = b.with_access_key_id(id).with_secret_access_key(secret);
        if let Some(t) = &cfg.session_token {
            b = b.with_token(t);
        }
    }
    let s3 = b
        .build()
        .with_context(|| format!("backend.s3: invalid settings for endpoint {url}"))?;
    let http = object_store::client::ReqwestConnector::default()
        .connect(options)
        .context("backend.s3: cannot build the HTTP client")?;
    let base = if cfg.path_style {
        format!("{url}/{}", cfg.bucket)
    } else {
        let (scheme, host) = url.split_once("://").unwrap_or(("https", &url));
        format!("{scheme}://{}.{host}", cfg.bucket)
    };
    let rest = Rest {
        http,
        creds: s3.credentials().clone(),
        region: cfg.region.clone(),
        base,
        timeout: Duration::from_secs(cfg.timeout_s),
        tally: tally.clone(),
    };
    Ok(Endpoint::new(url, s3, rest))
}

/// Holds the attributes of the root ("" key) in its metadata.
const ROOT_ATTRS: &str = ".nfsgw-tmp.root";

/// The gateway's own objects (temporaries, shared state, the id index): never listed.
fn is_own(store_key: &str) -> bool {
    store_key.split('/').any(|n| n.starts_with(TEMP_PREFIX))
}

impl S3Backend {
    /// Connects to the bucket described by `cfg`. A bucket that answers with a
    /// permanent error (missing, forbidden, bad credentials) is a start-up error; one
    /// that is unreachable right now only logs (it may come back).
    pub fn open(cfg: &S3Config) -> anyhow::Result<S3Backend> {
        let mut rtb = tokio::runtime::Builder::new_multi_thread();
        rtb.worker_threads(cfg.runtime_threads)
            .thread_name("s3-io")
            .enable_all();
        let cores = cfg.runtime_cores.clone();
        if !cores.is_empty() {
            let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            rtb.on_thread_start(move || {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let id = core_affinity::CoreId {
                    id: cores[i % cores.len()],
                };
                if !core_affinity::set_for_current(id) {
                    tracing::warn!(core = id.id, "s3: cannot pin a runtime thread");
                }
            });
        }
        let rt = rtb
            .build()
            .context("backend.s3: cannot start the async runtime")?;
        let options = ClientOptions::new()
            .with_allow_http(cfg.allow_http)
            .with_timeout(Duration::from_secs(cfg.timeout_s))
            .with_connect_timeout(Duration::from_secs(cfg.connect_timeout_s));
        let mut eps = Vec::new();
        let tally = Arc::new(requests::Tally::default());
        for url in endpoint_urls(cfg) {
            let _g = rt.enter();
            eps.push(endpoint(cfg, url, &options, &tally)?);
        }
        let pool = Pool::new(
            eps,
            Duration::from_secs_f64(cfg.retry_budget_s),
            cfg.retries,
            Duration::from_secs(cfg.timeout_s),
        );
        let core = Arc::new(Core {
            rt,
            pool,
            prefix: cfg.prefix.clone(),
            inflight: Arc::new(tokio::sync::Semaphore::new(cfg.max_concurrency)),
            bucket: cfg.bucket.clone(),
            ra: ReadAhead::new((cfg.read_block_mib as u64) << 20),
            honours_if_none_match: std::sync::atomic::AtomicBool::new(false),
            claimed: exclusive::Claims::default(),
            copy_over: (cfg.multipart_copy_over_mib as u64) << 20,
            copy_part: (cfg.copy_part_mib as u64) << 20,
            #[cfg(test)]
            tally,
        });
        let wb = Arc::new(WriteBack::new(
            Arc::new(CoreStore(core.clone())),
            cfg.part_size_mib << 20,
            cfg.write_buffer_mib << 20,
            Duration::from_secs(cfg.flush_idle_s),
            match &cfg.spill_dir {
                Some(d) => Some(stage::Spill::open(d).with_context(|| {
                    format!("backend.s3.spill_dir = {d:?}: cannot create a spill file there")
                })?),
                None => None,
            },
        ));
        let key_file = match &cfg.handle_key_file {
            None => None,
            Some(p) => {
                let text = std::fs::read_to_string(p).with_context(|| {
                    format!("backend.s3.handle_key_file = {p:?}: cannot read it")
                })?;
                Some(
                    handlekey::parse_key_file(&text)
                        .map_err(|e| anyhow::anyhow!("backend.s3.handle_key_file = {p:?}: {e}"))?,
                )
            }
        };
        let backend = S3Backend {
            core,
            wb,
            key_file,
            agreed: std::sync::OnceLock::new(),
        };
        match backend.list("", Some('/'), None, 1) {
            Ok(_) => {}
            Err(BackendError::Permanent(e)) => anyhow::bail!(
                "backend.s3: bucket {:?} at {} refused a listing: {e}; check bucket, region, endpoint and credentials",
                cfg.bucket,
                backend.core.endpoints()
            ),
            Err(BackendError::NotFound) => anyhow::bail!(
                "backend.s3: bucket {:?} does not exist at {}; create it or fix backend.s3.bucket",
                cfg.bucket,
                backend.core.endpoints()
            ),
            Err(e) => tracing::warn!(error = %e, "s3: bucket not reachable at start; serving anyway (calls answer JUKEBOX until it is)"),
        }
        probe_if_none_match(&backend.core);
        backend.start_flusher();
        Ok(backend)
    }

    /// Uploads staged files that nobody wrote for `flush_idle_s` (docs/architecture.md §6: an idle
    /// timeout is one of the write-back triggers).
    fn start_flusher(&self) {
        let wb = Arc::downgrade(&self.wb);
        std::thread::Builder::new()
            .name("s3-flush".into())
            .spawn(move || loop {
                std::thread::sleep(Duration::from_millis(500));
                let Some(wb) = wb.upgrade() else { return };
                // Supervision: a panic in one pass costs that pass (staged data stays
                // staged; COMMIT and the next pass retry), never the idle flusher.
                let _ = crate::supervise::request("s3: idle flush pass", || {
                    for k in wb.idle_keys() {
                        // A lost upload is logged by the stage and shows in the verifier.
                        if let Err(e) = wb.settle(&k) {
                            tracing::warn!(key = k, error = %e, "s3: idle upload failed; will retry");
                        }
                    }
                    wb.prune();
                });
            })
            .expect("spawn s3-flush");
    }

    /// Copies `from` to `to` on the store (onto itself with `meta`: a metadata change),
    /// `size` being the source's size as last seen: one CopyObject up to
    /// `multipart_copy_over_mib`, part by part beyond it or when CopyObject refuses the
    /// source as too large (a size remembered from before another writer grew it).
    fn copy_object(&self, from: &str, to: &str, meta: Option<&UserMeta>, size: u64) -> BResult<()> {
        if size <= self.core.copy_over {
            let c = self.core.clone();
            let (f, t, k, m) = (c.skey(from), c.skey(to), to.to_string(), meta.cloned());
            let r = self.core.block(async move {
                c.pool
                    .write_copy(|ep| ep.rest.copy(&f, &t, &k, m.as_ref()))
                    .await
            });
            match r {
                Err(e) if copy::too_large(&e) => {}
                r => return r,
            }
        }
        // The parts name the source's current ETag, so it must be fresh, not cached;
        // a rename's copy keeps the source's metadata (UploadPartCopy copies bytes only).
        let src = fresh_head(&self.core, from)?;
        let job = copy::Job {
            from: self.core.skey(from),
            to: self.core.skey(to),
            key: to.to_string(),
            base: 0,
            size: src.size,
            etag: src.etag,
            meta: meta.cloned().unwrap_or(src.user),
        };
        let r = self.core.block_free(copy::run(self.core.clone(), job));
        // The attributes of `to` (size, ETag, time) are the upload's now; a failure may
        // have been the source changing, which the next attempt must HEAD afresh.
        self.core.ra.invalidate(to);
        self.core.ra.invalidate(from);
        r
    }

    fn overlay(&self, mut m: ObjectMeta) -> ObjectMeta {
        if let Some(s) = self.wb.overlay(&m.key) {
            m.size = s.size;
            m.mtime_ns = s.mtime_ns;
            m.etag = s.etag;
        }
        m
    }
}

impl Drop for S3Backend {
    fn drop(&mut self) {
        for k in self.wb.staged_keys() {
            if let Err(e) = self.wb.sync(&k) {
                tracing::error!(key = k, error = %e, "s3: staged writes NOT uploaded at shutdown");
            }
        }
    }
}

impl Backend for S3Backend {
    fn name(&self) -> &'static str {
        "s3"
    }

    fn forget_cached(&self, key: &str) {
        self.core.ra.invalidate(key);
    }

    fn max_file_size(&self) -> u64 {
        self.wb.max_object()
    }

    /// Under `[ha]`: requests that change the store (PUT, DELETE, COPY, multipart
    /// create, parts and complete) and uploads of staged data go out only while the
    /// gate admits them (`failover::Pool::write`, `stage.rs`). Reads stay ungated: a
    /// late read changes nothing a successor relies on, and its answer goes to no
    /// client past the fence. The lease's and the record's own conditional writes
    /// (`cas.rs`) stay ungated too: their condition is what fences them, and a
    /// standby must write the lease to take it; so do the handle key's agreement
    /// and the file id map (`put_id`), written only if absent, facts every holder
    /// agrees on. An abort of an unfinished multipart
    /// upload changes no object and is not gated either.
    fn gate_writes(&self, gate: Arc<super::gate::Gate>) {
        self.core.pool.set_gate(gate.clone());
        self.wb.set_gate(gate);
    }

    fn lost_writes(&self) -> u64 {
        self.wb.lost()
    }

    fn identity(&self) -> String {
        // Feeds the fsid: with one endpoint as it always was; with several, the sorted
        // set, so gateways listing the same endpoints in any order agree.
        let mut eps: Vec<&str> = self.core.pool.urls().collect();
        eps.sort_unstable();
        format!(
            "s3:{}/{}/{}",
            eps.join(","),
            self.core.bucket,
            self.core.prefix
        )
    }

    fn head(&self, key: &str) -> BResult<ObjectMeta> {
        if key.is_empty() {
            // The bucket (or prefix) root has no object; its attributes live in ours.
            let mut m = head(&self.core, ROOT_ATTRS)?;
            m.key.clear();
            return Ok(m);
        }
        check_key(key)?;
        if let Some(m) = self.wb.overlay(key) {
            return Ok(m);
        }
        head(&self.core, key)
    }

    /// Only of a directory this gateway just made after its probe found nothing
    /// under it (`Known::take_bare`), once; otherwise `None`: a marker is an object
    /// like any other and children are keys under it, so the caller lists.
    fn dir_is_empty(&self, dkey: &str) -> Option<BResult<bool>> {
        self.core.ra.known.take_bare(dkey).then_some(Ok(true))
    }

    fn probe_absent(&self, name: &str) -> BResult<bool> {
        if name.is_empty() || name.ends_with('/') || check_key(name).is_err() {
            return Ok(false);
        }
        self.probe_absent_at_store(name)
    }

    /// IO_ADVISE: the key's read-ahead raised or turned off (`readahead.rs`).
    fn advise(&self, key: &str, how: crate::backend::ReadAdvice) -> bool {
        self.core.ra.advise(key, how)
    }

    /// HEADs of a directory page's entries, all at once (READDIRPLUS would otherwise
    /// pay one round trip per entry, one after the other).
    fn warm(&self, keys: &[String]) {
        let c = self.core.clone();
        let todo: Vec<String> = keys
            .iter()
            .filter(|k| check_key(k).is_ok() && c.ra.attr(k).is_none())
            .filter(|k| self.wb.overlay(k).is_none())
            .cloned()
            .collect();
        if todo.is_empty() {
            return;
        }
        let c2 = c.clone();
        // Each HEAD takes its own permit (see `block_free`).
        let _ = c.block_free(async move {
            let mut tasks = Vec::new();
            for k in todo {
                let c3 = c2.clone();
                let sem = c2.inflight.clone();
                tasks.push(tokio::spawn(async move {
                    let _permit = sem.acquire_owned().await;
                    let sk = c3.skey(&k);
                    let r = c3.pool.run(|ep| ep.rest.head(&sk, &k)).await;
                    remember(&c3, &k, &r);
                }));
            }
            for t in tasks {
                let _ = t.await;
            }
            Ok(())
        });
    }

    fn get_range(&self, key: &str, offset: u64, dst: &mut [u8]) -> BResult<usize> {
        check_key(key)?;
        if let Some(r) = self.wb.read(key, offset, dst) {
            return r;
        }
        get_range(&self.core, key, offset, dst)
    }

    fn put(&self, key: &str, data: &[u8], meta: &UserMeta, if_absent: bool) -> BResult<ObjectMeta> {
        check_key(key)?;
        // A whole-object put replaces whatever was staged.
        self.wb.discard(key);
        put(
            &self.core,
            key,
            Bytes::copy_from_slice(data),
            meta,
            if_absent,
            true,
        )
    }

    fn multipart(&self, key: &str, meta: &UserMeta) -> BResult<Box<dyn super::Upload>> {
        check_key(key)?;
        let store = CoreStore(self.core.clone());
        let id = store.mp_create(key, meta)?;
        Ok(Box::new(Upload {
            store,
            key: key.to_string(),
            id,
            etags: Vec::new(),
            buf: Vec::new(),
            meta: meta.clone(),
        }))
    }

    fn list(
        &self,
        prefix: &str,
        delimiter: Option<char>,
        start_after: Option<&str>,
        max: usize,
    ) -> BResult<ListPage> {
        check_prefix(prefix)?;
        // A whole listing of a directory-like prefix: one found empty just now needs
        // no second request (`known.rs`: LOOKUP then CREATE of a name list `name/`).
        let whole = delimiter.is_none() && start_after.is_none() && prefix.ends_with('/');
        if whole && self.core.ra.known.is_empty(prefix) {
            return Ok(ListPage::default());
        }
        let token = whole.then(|| self.core.ra.known.listing(prefix));
        let page = self.list_store(prefix, delimiter, start_after, max)?;
        if let Some(t) = token {
            let empty = page.objects.is_empty() && page.prefixes.is_empty() && page.next.is_none();
            self.core.ra.known.listed(prefix, t, empty);
        }
        Ok(page)
    }

    fn copy(&self, from: &str, to: &str) -> BResult<()> {
        check_key(from)?;
        check_key(to)?;
        self.wb.settle(from)?;
        self.core.ra.invalidate(to);
        let size = head(&self.core, from)?.size;
        let r = self.copy_object(from, to, None, size);
        // A probe of `to` sent during the copy is not believed (`put`).
        self.core.ra.known.changed(to);
        r?;
        self.wb.discard(to);
        Ok(())
    }

    /// Copy + delete (`backend::rename_by_copy`), with `from` claimed in this gateway
    /// (`exclusive.rs`): two renames of one source through this gateway would both
    /// copy it before either deleted it, and both answer OK — one name become two (a
    /// job claimed by renaming it, twice). Taking turns, the second finds the source
    /// gone (NFS3ERR_NOENT). Between gateways it stays a race (docs/s3.md).
    fn rename(&self, from: &str, to: &str) -> BResult<()> {
        let _claim = self.core.claimed.claim(from);
        super::rename_by_copy(self, from, to)
    }

    fn delete(&self, key: &str) -> BResult<()> {
        check_key(key)?;
        let staged = self.wb.overlay(key).is_some();
        self.wb.discard(key);
        // S3 deletes missing keys silently; the contract wants NotFound.
        match head(&self.core, key) {
            Ok(_) => {}
            Err(BackendError::NotFound) if staged => return Ok(()),
            Err(e) => return Err(e),
        }
        let c = self.core.clone();
        let (sk, k) = (c.skey(key), key.to_string());
        self.core.ra.invalidate(key);
        self.core
            .block(async move { c.pool.write(|ep| ep.rest.delete(&sk, &k)).await })
    }

    fn set_meta(&self, key: &str, meta: &UserMeta) -> BResult<()> {
        if key.is_empty() {
            return put(&self.core, ROOT_ATTRS, Bytes::new(), meta, false, true).map(|_| ());
        }
        check_key(key)?;
        if self.wb.set_meta(key, meta) {
            self.core.ra.invalidate(key);
            return Ok(());
        }
        // Streaming stages fixed their metadata at open: upload first, then replace.
        self.wb.settle(key)?;
        let size = head(&self.core, key)?.size;
        self.core.ra.invalidate(key);
        self.copy_object(key, key, Some(meta), size)
    }

    fn capacity(&self) -> BResult<(u64, u64, u64, u64)> {
        // Buckets have no size limit worth reporting: a large, constant figure.
        const PB: u64 = 1 << 50;
        Ok((PB, PB, 1 << 40, 1 << 40))
    }

    fn random_write(&self) -> Option<&dyn RandomWrite> {
        Some(self)
    }

    fn shared(&self) -> Option<&dyn SharedState> {
        Some(self)
    }

    fn cas(&self) -> Option<&dyn Cas> {
        Some(self)
    }

    // NFSv4.2 operations: `range.rs` (SEEK keeps the default: S3 has no holes).
    fn copy_range(&self, src: &str, s: u64, dst: &str, d: u64, count: u64) -> BResult<u64> {
        self.copy_range_impl(src, s, dst, d, count)
    }

    fn clone_range(&self, src: &str, s: u64, dst: &str, d: u64, count: u64) -> BResult<()> {
        match self.copy_range_impl(src, s, dst, d, count)? {
            n if n == count => Ok(()),
            _ => Err(BackendError::Unsupported),
        }
    }

    fn xattr_max_value(&self) -> usize {
        range::XATTR_BUDGET
    }

    fn xattr_get(&self, key: &str, name: &[u8]) -> BResult<Option<Vec<u8>>> {
        Ok(crate::backend::meta_xattr::get(&self.head(key)?.user, name))
    }

    fn xattr_set(&self, key: &str, name: &[u8], val: &[u8], how: XattrSet) -> BResult<bool> {
        self.xattr_set_impl(key, name, val, how)
    }

    fn xattr_list(&self, key: &str) -> BResult<Vec<Vec<u8>>> {
        Ok(crate::backend::meta_xattr::list(&self.head(key)?.user))
    }

    fn xattr_remove(&self, key: &str, name: &[u8]) -> BResult<bool> {
        self.xattr_remove_impl(key, name)
    }
}

/// The handle key (`handlekey.rs`: `handle_key_file`, or agreed through candidates
/// under `.nfsgw-tmp.handle-keys/`) and `.nfsgw-tmp.ids/<fileid hex>` (a key) under the
/// configured prefix. Anyone who can read the bucket can read a bucket-agreed MAC key,
/// which is fine: handles prove a gateway issued them, not who may read data.
impl SharedState for S3Backend {
    fn mac_key(&self) -> BResult<[u8; 32]> {
        if let Some(k) = self.key_file.or_else(|| self.agreed.get().copied()) {
            return Ok(k);
        }
        let mine = format!("{:016x}", rand::random::<u64>());
        let k = handlekey::agree(&KeyStoreOn(&self.core), rand::random(), &mine)?;
        // Two callers at once both agree; they adopt the same candidate (the pick is
        // a function of the listing), and the first to finish is kept.
        Ok(*self.agreed.get_or_init(|| k))
    }

    /// Without `If-None-Match` honoured (Garage), a second writer of the same id
    /// overwrites instead of failing. Harmless: ids derive from keys, so two gateways
    /// write the same key for an id, and `resolve_shared` re-derives the id from the
    /// key it reads and answers STALE on a mismatch (a collision), never another file.
    fn put_id(&self, fileid: u64, key: &str) -> BResult<()> {
        let name = format!("{TEMP_PREFIX}ids/{fileid:016x}");
        match put(
            &self.core,
            &name,
            Bytes::copy_from_slice(key.as_bytes()),
            &UserMeta::new(),
            true,
            // Not gated: an id's key is a fact every holder agrees on (ids derive from
            // keys), written only if absent; a standby resolves handles too.
            false,
        ) {
            Ok(_) | Err(BackendError::AlreadyExists) => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn get_id(&self, fileid: u64) -> BResult<String> {
        let name = format!("{TEMP_PREFIX}ids/{fileid:016x}");
        let mut buf = vec![0u8; 4096];
        let n = get_range(&self.core, &name, 0, &mut buf)?;
        buf.truncate(n);
        String::from_utf8(buf).map_err(|_| BackendError::Permanent(format!("{name}: not UTF-8")))
    }
}

/// `handlekey::KeyStore` on the bucket, names under `TEMP_PREFIX`.
struct KeyStoreOn<'a>(&'a Arc<Core>);

impl handlekey::KeyStore for KeyStoreOn<'_> {
    fn get(&self, name: &str) -> BResult<Option<Vec<u8>>> {
        let mut b = [0u8; 64];
        match get_range(self.0, &format!("{TEMP_PREFIX}{name}"), 0, &mut b) {
            Ok(n) => Ok(Some(b[..n].to_vec())),
            Err(BackendError::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn put(&self, name: &str, data: &[u8]) -> BResult<()> {
        let k = format!("{TEMP_PREFIX}{name}");
        put(
            self.0,
            &k,
            Bytes::copy_from_slice(data),
            &UserMeta::new(),
            false,
            // Not gated: the handle key is agreed at start, before any fence opens,
            // by every gateway of the bucket alike (`handlekey.rs`).
            false,
        )
        .map(|_| ())
    }

    fn delete(&self, name: &str) -> BResult<()> {
        let c = self.0.clone();
        let k = format!("{TEMP_PREFIX}{name}");
        let sk = c.skey(&k);
        c.ra.invalidate(&k);
        self.0
            .block(async move { c.pool.run(|ep| ep.rest.delete(&sk, &k)).await })
    }

    fn list(&self) -> BResult<(Vec<handlekey::Candidate>, Option<u64>)> {
        let c = self.0.clone();
        let sp = c.skey(&format!("{TEMP_PREFIX}{}", handlekey::CANDIDATES));
        let sp2 = sp.clone();
        let page = self.0.block(async move {
            c.pool
                .run(|ep| ep.rest.list(&sp2, None, None, handlekey::MAX_CANDIDATES))
                .await
        })?;
        let found = page
            .objects
            .into_iter()
            .filter_map(|o| {
                let name = o.key.strip_prefix(&sp)?;
                (!name.is_empty() && !name.contains('/')).then(|| handlekey::Candidate {
                    name: name.to_string(),
                    mtime_ns: o.mtime_ns,
                })
            })
            .collect();
        Ok((found, page.date_ns))
    }

    fn sleep(&self, d: Duration) {
        std::thread::sleep(d);
    }
}

impl RandomWrite for S3Backend {
    fn write_at(&self, key: &str, offset: u64, data: &[u8]) -> BResult<()> {
        check_key(key)?;
        // A new stage opens over the object as it is: the attributes this gateway's
        // own PUT left (a CREATE just before the first WRITE) are that, so no HEAD;
        // any other cached ones are read again. Once staged, `head` answers from the
        // stage, and the upload leaves the new object's attributes (`put`).
        let ra = &self.core.ra;
        if !ra
            .attr(key)
            .flatten()
            .is_some_and(|m| ra.known.is_written(&m))
        {
            ra.invalidate(key);
        }
        let r = self.wb.write_at(key, offset, data);
        ra.invalidate(key);
        r
    }

    fn set_size(&self, key: &str, size: u64) -> BResult<()> {
        check_key(key)?;
        self.core.ra.invalidate(key);
        self.wb.set_size(key, size)
    }

    /// `Err(Lost)` when the store lost the stage's upload: see `stage.rs`.
    fn sync(&self, key: &str) -> BResult<()> {
        check_key(key)?;
        let r = self.wb.sync(key);
        // A completed upload left the object's attributes: a single PUT remembers
        // what it wrote (`put`: the WRITE's reply needs no HEAD), a multipart one
        // forgot them (`mp_complete`). A failed one may have done part of it.
        if r.is_err() {
            self.core.ra.invalidate(key);
        }
        r
    }
}

/// `Backend::multipart`: data buffered into parts of at least `MIN_PART` (S3 refuses
/// smaller ones except the last), uploaded in order.
struct Upload {
    store: CoreStore,
    key: String,
    id: String,
    etags: Vec<String>,
    buf: Vec<u8>,
    meta: UserMeta,
}

const MIN_PART: usize = 8 << 20;

impl Upload {
    fn flush(&mut self) -> BResult<()> {
        let data = Bytes::from(std::mem::take(&mut self.buf));
        let e = self
            .store
            .mp_part(&self.key, &self.id, self.etags.len(), data)?;
        self.etags.push(e);
        Ok(())
    }
}

impl super::Upload for Upload {
    fn put_part(&mut self, data: &[u8]) -> BResult<()> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= MIN_PART {
            self.flush()?;
        }
        Ok(())
    }

    fn complete(mut self: Box<Self>) -> BResult<ObjectMeta> {
        if !self.buf.is_empty() || self.etags.is_empty() {
            self.flush()?;
        }
        self.store
            .mp_complete(&self.key, &self.id, self.etags.clone())?;
        let mut m = self.store.head(&self.key)?;
        m.user = self.meta.clone();
        Ok(m)
    }

    fn abort(self: Box<Self>) {
        self.store.mp_abort(&self.key, &self.id);
    }
}

#[cfg(test)]
#[path = "stage_tests.rs"]
mod stage_tests;

#[cfg(test)]
#[path = "md_tests.rs"]
mod md_tests;

/// The backend conformance suite against a real S3 server: tests/run-all.sh starts
/// one on loopback (moto) and sets NFSGW_S3_TEST_ENDPOINT=http://127.0.0.1:PORT.
#[cfg(test)]
pub(crate) mod live_tests {
    use super::*;
    use std::io::{Read, Write};

    /// Creates a bucket with a bare HTTP request (the server accepts unsigned ones).
    fn create_bucket(endpoint: &str, bucket: &str) {
        let hostport = endpoint.trim_start_matches("http://").trim_end_matches('/');
        let mut s = std::net::TcpStream::connect(hostport).expect("S3 test server reachable");
        write!(
            s,
            "PUT /{bucket} HTTP/1.1\r\nHost: {hostport}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut r = String::new();
        s.read_to_string(&mut r).unwrap();
        assert!(
            r.starts_with("HTTP/1.1 200") || r.contains("BucketAlreadyOwnedByYou"),
            "create bucket: {r}"
        );
    }

    /// A fresh bucket (unique per call) on the test server, or None without one.
    pub(crate) fn fresh(prefix: &str) -> Option<S3Backend> {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        live(&format!("t{}-{n}", std::process::id()), prefix)
    }

    /// The backend over `bucket` (created if missing) on the test server.
    ///
    /// Environment: `NFSGW_S3_TEST_ENDPOINT` (required, else the test does not run),
    /// `NFSGW_S3_TEST_ACCESS_KEY` / `NFSGW_S3_TEST_SECRET_KEY` (default `testing`, moto's),
    /// `NFSGW_S3_TEST_REGION` (default `us-east-1`) and `NFSGW_S3_TEST_BUCKET`: a
    /// pre-created bucket for stores that do not create buckets on an unsigned PUT
    /// (Garage: tools/garage/cluster.sh). With it, each logical `bucket` of a test is the
    /// prefix `bucket/` inside that one, so tests stay apart as with real buckets; the
    /// run's start time in the prefix keeps reruns on a kept cluster apart too.
    pub(crate) fn live(bucket: &str, prefix: &str) -> Option<S3Backend> {
        live_with(bucket, prefix, "")
    }

    /// As `live`, with more `[backend.s3]` settings (TOML lines).
    fn live_with(bucket: &str, prefix: &str, extra: &str) -> Option<S3Backend> {
        let Ok(ep) = std::env::var("NFSGW_S3_TEST_ENDPOINT") else {
            eprintln!(
                "NFSGW_S3_TEST_ENDPOINT unset: S3 live test not run (tests/run-all.sh sets it)"
            );
            return None;
        };
        let env_or = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_string());
        let (bucket, prefix) = match std::env::var("NFSGW_S3_TEST_BUCKET") {
            Ok(shared) => (shared, format!("{}-{bucket}/{prefix}", run_id())),
            Err(_) => {
                create_bucket(&ep, bucket);
                (bucket.to_string(), prefix.to_string())
            }
        };
        let cfg: S3Config = toml::from_str(&format!(
            "endpoint = {ep:?}\nbucket = {bucket:?}\nprefix = {prefix:?}\npath_style = true\n\
             allow_http = true\naccess_key_id = {:?}\nsecret_access_key = {:?}\n\
             region = {:?}\nretries = 1\ntimeout_s = 10\npart_size_mib = 5\nwrite_buffer_mib = 32\n{extra}\n",
            env_or("NFSGW_S3_TEST_ACCESS_KEY", "testing"),
            env_or("NFSGW_S3_TEST_SECRET_KEY", "testing"),
            env_or("NFSGW_S3_TEST_REGION", "us-east-1"),
        ))
        .unwrap();
        Some(S3Backend::open(&cfg).expect("open s3 backend"))
    }

    /// Seconds since the epoch at the first call: one value per test process.
    fn run_id() -> u64 {
        static ID: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        *ID.get_or_init(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        })
    }

    #[test]
    fn conformance_against_a_real_s3_server() {
        if let Some(b) = fresh("") {
            crate::backend::conformance::run(&b);
        }
        if let Some(b) = fresh("gw/") {
            crate::backend::conformance::run(&b);
        }
    }

    /// The bucket's handle key is agreed once per process: the file model and the pNFS
    /// fence both ask at start, and the second answer is the first's key without a
    /// second `handlekey::SETTLE` wait (every s3 start took two of them).
    #[test]
    fn the_handle_key_is_agreed_once_per_backend() {
        let bucket = format!("t{}-key-once", std::process::id());
        let Some(b) = live(&bucket, "") else { return };
        let t0 = std::time::Instant::now();
        let k = b.mac_key().unwrap();
        assert!(
            t0.elapsed() >= handlekey::SETTLE,
            "the first start agrees through the bucket"
        );
        let t1 = std::time::Instant::now();
        assert_eq!(b.mac_key().unwrap(), k);
        assert!(
            t1.elapsed() < handlekey::SETTLE / 2,
            "agreed again: {:?}",
            t1.elapsed()
        );
        // another gateway (a second backend on the bucket) adopts the same key
        let b2 = live(&bucket, "").unwrap();
        assert_eq!(b2.mac_key().unwrap(), k);
    }

    /// `Cas` (`[ha]`, docs/ha.md "Fencing"): moto honours `If-None-Match: *` and
    /// `If-Match` on PUT, so the conformance holds; a store that does not (Garage, the
    /// CI's other live run, which names its bucket) must fail `ha::probe` with the
    /// refusal, never pass it.
    #[test]
    fn conditional_writes_hold_or_ha_is_refused() {
        let Some(b) = fresh("gw/") else { return };
        let probe = crate::ha::probe(&b, "t", "live");
        if std::env::var_os("NFSGW_S3_TEST_BUCKET").is_none() {
            assert!(probe.is_ok(), "moto honours both headers: {probe:?}");
        }
        match probe {
            Ok(()) => crate::backend::conformance::cas(&b),
            Err(e) => {
                let e = format!("{e:#}");
                assert!(e.contains("does not honour conditional writes"), "{e}");
                eprintln!("this store refuses [ha]: {e}");
            }
        }
    }

    /// Copies over `multipart_copy_over_mib` (5 MiB here, standing in for CopyObject's
    /// 5 GiB) go part by part: a rename's copy keeps bytes and metadata, a metadata
    /// change keeps the bytes; at the threshold a copy is still one CopyObject.
    #[test]
    fn copies_over_the_threshold_go_part_by_part() {
        let Some(b) = live_with(
            "bigcopy",
            "",
            "multipart_copy_over_mib = 5\ncopy_part_mib = 5",
        ) else {
            return;
        };
        let data: Vec<u8> = (0..(12u64 << 20) + 1)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let mut m = UserMeta::new();
        m.insert("mode".into(), "100640".into());
        m.insert("uid".into(), "7".into());
        b.put("src", &data, &m, false).unwrap();
        b.copy("src", "dst").unwrap();
        let h = b.head("dst").unwrap();
        assert!(h.etag.ends_with("-3"), "not copied in 3 parts: {}", h.etag);
        assert_eq!((h.size, &h.user), (data.len() as u64, &m));
        let read = |k: &str| {
            let mut back = vec![0u8; data.len() + 1];
            let n = b.get_range(k, 0, &mut back).unwrap();
            back.truncate(n);
            back
        };
        assert!(read("dst") == data, "copy differs from its source");
        m.insert("mode".into(), "100600".into());
        b.set_meta("dst", &m).unwrap();
        let h = b.head("dst").unwrap();
        assert_eq!((h.size, &h.user), (data.len() as u64, &m));
        assert!(read("dst") == data, "metadata change altered the bytes");
        assert_eq!(b.copy("missing", "x"), Err(BackendError::NotFound));
        let small = vec![5u8; 5 << 20];
        b.put("small", &small, &m, false).unwrap();
        b.copy("small", "small2").unwrap();
        assert!(!b.head("small2").unwrap().etag.contains('-'));
        assert!(read("src") == data, "the source changed");
    }

    /// `warm` (READDIRPLUS's HEADs) used to hold an in-flight permit while its HEADs
    /// waited for more: with `max_concurrency` permits all held so, the backend hung.
    #[test]
    fn warm_needs_no_spare_permit() {
        let Some(b) = live_with("warm1", "", "max_concurrency = 1") else {
            return;
        };
        let keys: Vec<String> = (0..3).map(|i| format!("w{i}")).collect();
        for k in &keys {
            b.put(k, b"x", &UserMeta::new(), false).unwrap();
            b.core.ra.invalidate(k);
        }
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            b.warm(&keys);
            let _ = tx.send(());
        });
        rx.recv_timeout(Duration::from_secs(60))
            .expect("warm() hung with max_concurrency = 1");
    }

    #[test]
    fn large_streamed_file_lands_byte_exact() {
        let Some(b) = live("streamed", "") else {
            return;
        };
        b.put("f", b"", &UserMeta::new(), false).unwrap();
        let data: Vec<u8> = (0..(12u64 << 20) + 777)
            .map(|i| (i * 31 % 253) as u8)
            .collect();
        for (i, c) in data.chunks(1 << 20).enumerate() {
            b.write_at("f", (i as u64) << 20, c).unwrap();
        }
        assert_eq!(b.head("f").unwrap().size, data.len() as u64);
        b.sync("f").unwrap();
        let mut back = vec![0u8; data.len()];
        assert_eq!(b.get_range("f", 0, &mut back).unwrap(), data.len());
        assert!(back == data, "object differs from what was written");
    }
}
