//! `[backend]` and `[backend.s3]`: which store, its workers and I/O mode, S3 endpoints,
//! retries, multipart sizes.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    Fs,
    Memory,
    S3,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BackendConfig {
    #[serde(default = "default_kind")]
    pub kind: BackendKind,
    /// Directory of objects for `fs`.
    #[serde(default = "default_root")]
    pub root: PathBuf,
    /// Backend worker threads.
    #[serde(default = "default_workers")]
    pub workers: usize,
    /// Depth of each reactor→worker and worker→reactor ring.
    #[serde(default = "default_ring")]
    pub ring_depth: usize,
    /// How long an idle worker spins before sleeping, microseconds (0 = sleep at once).
    #[serde(default)]
    pub worker_spin_us: u64,
    /// The `s3` backend's settings (`[backend.s3]`).
    #[serde(default)]
    pub s3: Option<S3Config>,
    /// Who runs the `fs` backend's data I/O (`backend.io`, see `crate::uring`).
    #[serde(default)]
    pub io: IoMode,
    /// With io_uring: large NFSv3 READ replies over TCP carry their data by splice
    /// (page cache → pipe → socket, no copy; `server::direct`). Off (the default
    /// until measured faster on loopback, see README): pool-buffer copies on
    /// io_uring's worker threads, as RDMA replies always are.
    #[serde(default)]
    pub splice: bool,
    /// `fs`: several gateways serve `root` at once (a directory on NFS/CephFS, or one
    /// local directory), so every gateway accepts every other one's file handles: the
    /// handle key and id index live in `root` (`backend::fs::shared`), handles carry the
    /// key below the export (version 2, as on s3). Off: handles of this gateway only.
    /// s3 is always shared; memory cannot be.
    #[serde(default)]
    pub shared: bool,
    /// The `fs` backend's own settings (`[backend.fs]`).
    #[serde(default)]
    pub fs: FsConfig,
}

/// `[backend.fs]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FsConfig {
    /// How a namespace change (create, remove, rename, mkdir) reaches stable storage
    /// (`backend::fs::flush`).
    #[serde(default)]
    pub flush: FlushMode,
}

/// `backend.fs.flush`: what makes a namespace change durable before the reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FlushMode {
    /// The default: `journal` where the root's file system orders its metadata through
    /// one log (XFS; ext4 with a journal), `per-directory` elsewhere.
    #[default]
    Auto,
    /// A new file's fsync before its name, then the directory's fsync (shared only by
    /// concurrent changes of that directory): right on any POSIX file system.
    PerDirectory,
    /// One log force of the file system, shared by concurrent changes in every
    /// directory, and no fsync of a new empty file before its name. Refused at start
    /// where detection finds no such log.
    Journal,
}

/// `backend.io`: the `fs` backend's NFSv3 READ, UNSTABLE WRITE and COMMIT run by the
/// reactor through its own io_uring (`uring`), or by backend workers (`workers`);
/// `auto` takes io_uring when the kernel allows it. Where io_uring cannot be set up the workers stay (logged).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IoMode {
    Workers,
    Uring,
    /// The default: io_uring where the kernel allows it, the workers elsewhere.
    #[default]
    Auto,
}

/// `[backend.s3]`: an S3-compatible bucket (see README "The s3 backend").
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct S3Config {
    /// Service URL; absent = AWS (`https://s3.<region>.amazonaws.com`). One endpoint;
    /// `endpoints` lists several of one cluster (set one of the two).
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Several endpoints of ONE cluster (same buckets, same data): a call that fails
    /// retryably on one moves to the next (README "The s3 backend", failover).
    #[serde(default)]
    pub endpoints: Vec<String>,
    #[serde(default = "default_region")]
    pub region: String,
    pub bucket: String,
    /// Key prefix inside the bucket ("" or ending in '/').
    #[serde(default)]
    pub prefix: String,
    /// Path-style URLs (`endpoint/bucket/key`), as most S3-compatible services want.
    #[serde(default)]
    pub path_style: bool,
    /// Allow plain-HTTP endpoints (TLS is verified otherwise).
    #[serde(default)]
    pub allow_http: bool,
    /// Credentials; when absent, the environment (AWS_ACCESS_KEY_ID, ...). Never logged.
    #[serde(default)]
    pub access_key_id: Option<String>,
    #[serde(default)]
    pub secret_access_key: Option<String>,
    #[serde(default)]
    pub session_token: Option<String>,
    /// Per-request timeout, seconds.
    #[serde(default = "default_s3_timeout")]
    pub timeout_s: u64,
    #[serde(default = "default_s3_connect_timeout")]
    pub connect_timeout_s: u64,
    /// Retries of one call against endpoints it already tried (after a jittered
    /// backoff); moving on to an endpoint not yet tried is not counted. Whichever of
    /// this and `retry_budget_s` runs out first answers JUKEBOX / NFS4ERR_DELAY.
    #[serde(default = "default_s3_retries")]
    pub retries: usize,
    /// Total time one store call may take, retries and failover included, before the
    /// NFS client is answered JUKEBOX / NFS4ERR_DELAY (and retries itself), seconds.
    #[serde(default = "default_s3_retry_budget")]
    pub retry_budget_s: f64,
    /// A file holding the handle secret (64 hex digits, `openssl rand -hex 32`) shared
    /// by every gateway on the bucket; absent = agreed through the bucket. Never logged.
    #[serde(default)]
    pub handle_key_file: Option<PathBuf>,
    /// Requests in flight to the store at once.
    #[serde(default = "default_s3_concurrency")]
    pub max_concurrency: usize,
    /// Threads of the async runtime that runs S3 requests.
    #[serde(default = "default_s3_threads")]
    pub runtime_threads: usize,
    /// CPUs to pin those threads to (empty = not pinned).
    #[serde(default)]
    pub runtime_cores: Vec<usize>,
    /// Unstable writes staged in memory before files are uploaded early, MiB.
    #[serde(default = "default_s3_write_buffer")]
    pub write_buffer_mib: usize,
    /// Staged data of a file not written for this long is uploaded, seconds (0 = only
    /// on COMMIT or a full buffer).
    #[serde(default = "default_s3_flush_idle")]
    pub flush_idle_s: u64,
    /// Multipart part size, MiB (5..=5120; files larger than one part use multipart).
    #[serde(default = "default_s3_part")]
    pub part_size_mib: usize,
    /// Staged writes beyond `write_buffer_mib` go to an (unlinked) file here instead of
    /// being uploaded early; absent = memory only.
    #[serde(default)]
    pub spill_dir: Option<PathBuf>,
    /// Sequential read-ahead: ranged GETs of this many MiB fetched ahead of a reader
    /// (0 = off: every READ is one GET of what it asked).
    #[serde(default = "default_s3_read_block")]
    pub read_block_mib: usize,
    /// Renames and metadata changes (SETATTR) of objects larger than this copy them
    /// part by part (UploadPartCopy) instead of with one CopyObject, which S3 refuses
    /// over 5 GiB, MiB (1..=5120).
    #[serde(default = "default_s3_multipart_copy_over")]
    pub multipart_copy_over_mib: usize,
    /// Part size of such a copy, MiB (5..=5120; grown when 10,000 parts would not
    /// cover the object).
    #[serde(default = "default_s3_copy_part")]
    pub copy_part_mib: usize,
}

impl std::fmt::Debug for S3Config {
    // Hand-written so credentials never reach a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Config")
            .field("endpoint", &self.endpoint)
            .field("endpoints", &self.endpoints)
            .field("region", &self.region)
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("path_style", &self.path_style)
            .field(
                "credentials",
                &self.access_key_id.as_ref().map(|_| "<config>"),
            )
            .finish_non_exhaustive()
    }
}

pub(super) fn default_region() -> String {
    "us-east-1".into()
}
pub(super) fn default_s3_timeout() -> u64 {
    30
}
pub(super) fn default_s3_connect_timeout() -> u64 {
    5
}
pub(super) fn default_s3_retries() -> usize {
    10
}
/// A Garage node restart takes a few seconds: failover to another endpoint is at once,
/// and with one endpoint the call waits out a short outage instead of answering JUKEBOX
/// (which costs the Linux v3 client 5 s). Longer ties up a backend worker.
pub(super) fn default_s3_retry_budget() -> f64 {
    10.0
}
pub(super) fn default_s3_concurrency() -> usize {
    64
}
pub(super) fn default_s3_threads() -> usize {
    2
}
pub(super) fn default_s3_write_buffer() -> usize {
    256
}
pub(super) fn default_s3_flush_idle() -> u64 {
    5
}
pub(super) fn default_s3_part() -> usize {
    8
}
pub(super) fn default_s3_read_block() -> usize {
    4
}
/// Far below CopyObject's 5 GiB limit: one CopyObject is one request that must finish
/// within the retry budget (default 10 s), and stores copy server-side at tens to a
/// few hundred MB/s, so a multi-GiB CopyObject would time out on every attempt and
/// the client's RENAME or SETATTR would get JUKEBOX for ever. 256 MiB takes seconds.
pub(super) fn default_s3_multipart_copy_over() -> usize {
    256
}
/// One part copy is one request under `timeout_s` and the retry budget: 64 MiB is a
/// few seconds of server-side copying even on a slow store, and 10,000 of them cover
/// 625 GiB (larger objects get larger parts).
pub(super) fn default_s3_copy_part() -> usize {
    64
}

pub(super) fn default_kind() -> BackendKind {
    BackendKind::Fs
}
pub(super) fn default_root() -> PathBuf {
    "./data".into()
}
/// 32: a worker waits out every flush a namespace change needs (RFC 1813 §3.3.8), so
/// the workers bound how many creates and removes share one log force
/// (`backend::fs::flush`). On a quiet 2-vCPU machine (docs/performance.md, "Backend
/// workers and the create path") 4 → 32 raised CREATE from 0.31–0.39× to 0.67–0.85×
/// nfs-ganesha's rate and REMOVE from 0.24–0.37× to 0.56–1.08×, with the same CPU per
/// op; 64 gained nothing more. Idle workers sleep (`worker_spin_us = 0`).
pub(super) fn default_workers() -> usize {
    32
}
pub(super) fn default_ring() -> usize {
    1024
}

impl Default for BackendConfig {
    fn default() -> Self {
        BackendConfig {
            kind: default_kind(),
            root: default_root(),
            workers: default_workers(),
            ring_depth: default_ring(),
            worker_spin_us: 0,
            s3: None,
            io: IoMode::default(),
            splice: false,
            shared: false,
            fs: FsConfig::default(),
        }
    }
}
