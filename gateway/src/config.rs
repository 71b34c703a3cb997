//! The gateway's TOML configuration: parsing, defaults and validation.
//!
//! Every key is checked at start; an error names the key and the fix. Key names are a
//! contract with operators and scripts (`engine.cores`, `engine.idle`,
//! `engine.hugepages`, `tcp.listen`, `backend.kind`, `backend.root`, `state.dir`,
//! `[[exports]]` with `path`, `clients`, `access`, `squash`, `id`).

use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub engine: EngineConfig,
    #[serde(default)]
    pub pools: PoolsConfig,
    #[serde(default)]
    pub tcp: TcpConfig,
    #[serde(default)]
    pub rdma: RdmaConfig,
    #[serde(default)]
    pub backend: BackendConfig,
    #[serde(default)]
    pub state: StateConfig,
    #[serde(default)]
    pub nfs4: Nfs4Config,
    #[serde(default)]
    pub exports: Vec<ExportConfig>,
    #[serde(default)]
    pub cache: CacheConfig,
    #[serde(default)]
    pub log: LogConfig,
    #[serde(default)]
    pub stats: StatsConfig,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Idle {
    Busy,
    Adaptive,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Hugepages {
    Require,
    Auto,
    Off,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EngineConfig {
    /// CPU ids, one reactor each.
    #[serde(default = "default_cores")]
    pub cores: Vec<usize>,
    #[serde(default = "default_idle")]
    pub idle: Idle,
    #[serde(default = "default_hugepages")]
    pub hugepages: Hugepages,
    /// Empty polls before an adaptive reactor sleeps (at least; see `idle_spin_us`).
    #[serde(default = "default_idle_spins")]
    pub idle_spins: u32,
    /// Time an adaptive reactor keeps polling after its last work before it sleeps,
    /// microseconds (0 = only `idle_spins` counts). Both limits must be reached.
    #[serde(default = "default_idle_spin_us")]
    pub idle_spin_us: u64,
    /// The spin instead of `idle_spin_us` while the reactor's recent work was bulk
    /// transfer (records or replies of 32 KiB and more per message, or large copies on
    /// io_uring's threads), microseconds. 0: sleep at the first empty poll, leaving the
    /// core to the client and the kernel's copy threads (measured: docs/tuning.md).
    #[serde(default = "default_idle_bulk_spin_us")]
    pub idle_bulk_spin_us: u64,
    /// Longest adaptive sleep, microseconds.
    #[serde(default = "default_idle_sleep_us")]
    pub idle_sleep_us: u64,
}

fn default_cores() -> Vec<usize> {
    vec![0]
}
fn default_idle() -> Idle {
    Idle::Adaptive
}
fn default_hugepages() -> Hugepages {
    Hugepages::Auto
}
fn default_idle_spins() -> u32 {
    // Time (`idle_spin_us`) is the limit that matters; one empty poll at least.
    1
}
fn default_idle_spin_us() -> u64 {
    DEFAULT_IDLE_SPIN_US
}
/// Default of `engine.idle_spin_us` (measured: docs/tuning.md, "Idle spin").
pub const DEFAULT_IDLE_SPIN_US: u64 = 200;
fn default_idle_bulk_spin_us() -> u64 {
    0
}
fn default_idle_sleep_us() -> u64 {
    10_000
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            cores: default_cores(),
            idle: default_idle(),
            hugepages: default_hugepages(),
            idle_spins: default_idle_spins(),
            idle_spin_us: default_idle_spin_us(),
            idle_bulk_spin_us: default_idle_bulk_spin_us(),
            idle_sleep_us: default_idle_sleep_us(),
        }
    }
}

/// Buffer counts per reactor, per size class.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PoolsConfig {
    /// 8 KiB buffers: small calls and replies.
    #[serde(default = "default_small")]
    pub small: usize,
    /// 64 KiB buffers: directory pages, mid-size I/O.
    #[serde(default = "default_medium")]
    pub medium: usize,
    /// 1 MiB + 4 KiB buffers: 1 MiB READ/WRITE payloads with their headers.
    #[serde(default = "default_large")]
    pub large: usize,
}

pub const SMALL_BUF: usize = 8 << 10;
pub const MEDIUM_BUF: usize = 64 << 10;
pub const LARGE_BUF: usize = (1 << 20) + (4 << 10);

fn default_small() -> usize {
    // 32 MiB per reactor: RPC-over-RDMA Receives come from this class (credits per
    // connection, within a 3/4 budget that keeps rdma.min_credits for every allowed
    // connection), so ~20 connections get the full 128 credits; TCP records and
    // small replies use it too.
    4096
}
fn default_medium() -> usize {
    128
}
fn default_large() -> usize {
    48
}

impl Default for PoolsConfig {
    fn default() -> Self {
        PoolsConfig {
            small: default_small(),
            medium: default_medium(),
            large: default_large(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TcpConfig {
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Largest RPC record accepted; a larger record mark closes the connection.
    #[serde(default = "default_max_record")]
    pub max_record: usize,
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Calls in flight per connection before the gateway stops reading it.
    #[serde(default = "default_max_inflight")]
    pub max_inflight: usize,
    /// A connection holding a partial record this long is closed (seconds).
    #[serde(default = "default_record_timeout")]
    pub record_timeout_s: u64,
    /// Queued replies without write progress this long close the connection (seconds).
    #[serde(default = "default_send_timeout")]
    pub send_timeout_s: u64,
    /// While buffers are short, a partial record holding a pool buffer without input
    /// this long closes its connection (milliseconds).
    #[serde(default = "default_stall_reclaim")]
    pub stall_reclaim_ms: u64,
    /// Pool memory of queued replies per connection before its calls stop being read
    /// (MiB).
    #[serde(default = "default_max_queued")]
    pub max_queued_mib: usize,
}

fn default_listen() -> String {
    "127.0.0.1:2049".into()
}
fn default_max_record() -> usize {
    LARGE_BUF
}
fn default_max_connections() -> usize {
    1024
}
fn default_max_inflight() -> usize {
    64
}
fn default_record_timeout() -> u64 {
    30
}
fn default_send_timeout() -> u64 {
    30
}
fn default_stall_reclaim() -> u64 {
    1000
}
fn default_max_queued() -> usize {
    4
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            listen: default_listen(),
            max_record: default_max_record(),
            max_connections: default_max_connections(),
            max_inflight: default_max_inflight(),
            record_timeout_s: default_record_timeout(),
            send_timeout_s: default_send_timeout(),
            stall_reclaim_ms: default_stall_reclaim(),
            max_queued_mib: default_max_queued(),
        }
    }
}

/// `rdma.provider`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RdmaProvider {
    /// No RPC-over-RDMA listener.
    Off,
    /// The pure-Rust software provider (host-local; `bench` and tests reach it).
    Soft,
    /// Real RDMA verbs (needs a build with `--features rdma`).
    Verbs,
    /// Verbs when built in and a device is usable, else soft; says which in the log.
    Auto,
}

/// `[rdma]`: RPC-over-RDMA v1 (RFC 8166) listener settings.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RdmaConfig {
    #[serde(default = "default_rdma_provider")]
    pub provider: RdmaProvider,
    /// NFS/RDMA port 20049 by default (RFC 8267 §4.2).
    #[serde(default = "default_rdma_listen")]
    pub listen: String,
    /// RDMA device for `verbs` (for example "rxe0"); default: the device that owns
    /// `listen`.
    #[serde(default)]
    pub device: Option<String>,
    /// Credits granted per connection (Receives posted per connection).
    #[serde(default = "default_credits")]
    pub credits: u32,
    /// Fewest credits a connection is accepted with when the reactor's receive budget
    /// (3/4 of the pool class Receives come from) is short; below that it is refused.
    #[serde(default = "default_min_credits")]
    pub min_credits: u32,
    /// Inline threshold we advertise (RFC 8797), bytes: 1024..=65536.
    #[serde(default = "default_inline")]
    pub inline_size: usize,
    /// RDMA Reads in flight per connection when pulling WRITE data.
    #[serde(default = "default_read_depth")]
    pub read_depth: u8,
    #[serde(default = "default_rdma_conns")]
    pub max_connections: usize,
    /// A connection whose peer answers none of its outstanding RDMA Reads for this
    /// many seconds is closed.
    #[serde(default = "default_rdma_read_timeout")]
    pub read_timeout_s: u64,
    /// A connection whose peer completes none of its outstanding Sends (replies,
    /// callbacks) for this many seconds is closed (a peer that never takes its
    /// replies must not keep its reply budget of buffers for ever).
    #[serde(default = "default_rdma_send_timeout")]
    pub send_timeout_s: u64,
    /// While buffers are short, a connection whose outstanding Sends hold 64 KiB or
    /// more and whose peer completed less than 64 KiB of them this long is closed
    /// (milliseconds; as `tcp.stall_reclaim_ms`).
    #[serde(default = "default_stall_reclaim")]
    pub stall_reclaim_ms: u64,
    /// Reply bytes (MiB) a connection may have in production or awaiting Send
    /// completion before its next calls wait (each call charged the write and reply
    /// chunks it offers): what one peer that never completes its replies can hold.
    #[serde(default = "default_rdma_max_reply")]
    pub max_reply_mib: usize,
    /// Allow replies with Send-With-Invalidate when the client also sets the R bit.
    #[serde(default = "default_true")]
    pub remote_invalidate: bool,
}

fn default_rdma_provider() -> RdmaProvider {
    RdmaProvider::Off
}
fn default_rdma_listen() -> String {
    "127.0.0.1:20049".into()
}
fn default_credits() -> u32 {
    128
}
fn default_min_credits() -> u32 {
    8
}
fn default_inline() -> usize {
    4096
}
fn default_read_depth() -> u8 {
    16
}
fn default_rdma_conns() -> usize {
    64
}
fn default_rdma_read_timeout() -> u64 {
    30
}
fn default_rdma_send_timeout() -> u64 {
    // As `tcp.send_timeout_s`: long enough for any live client's pause.
    30
}
fn default_rdma_max_reply() -> usize {
    // 8, not TCP's 4: on soft RDMA a 4 MiB budget cost 1 MiB READs at QD32 ~20% CPU
    // per op (replies complete only when the client polls), 8 matched the unbounded
    // build (docs/tuning.md); one peer then holds at most 8 of the 48 large buffers.
    8
}
fn default_true() -> bool {
    true
}

impl Default for RdmaConfig {
    fn default() -> Self {
        RdmaConfig {
            provider: default_rdma_provider(),
            listen: default_rdma_listen(),
            device: None,
            credits: default_credits(),
            min_credits: default_min_credits(),
            inline_size: default_inline(),
            read_depth: default_read_depth(),
            max_connections: default_rdma_conns(),
            read_timeout_s: default_rdma_read_timeout(),
            send_timeout_s: default_rdma_send_timeout(),
            stall_reclaim_ms: default_stall_reclaim(),
            max_reply_mib: default_rdma_max_reply(),
            remote_invalidate: true,
        }
    }
}

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

fn default_region() -> String {
    "us-east-1".into()
}
fn default_s3_timeout() -> u64 {
    30
}
fn default_s3_connect_timeout() -> u64 {
    5
}
fn default_s3_retries() -> usize {
    10
}
/// A Garage node restart takes a few seconds: failover to another endpoint is at once,
/// and with one endpoint the call waits out a short outage instead of answering JUKEBOX
/// (which costs the Linux v3 client 5 s). Longer ties up a backend worker.
fn default_s3_retry_budget() -> f64 {
    10.0
}
fn default_s3_concurrency() -> usize {
    64
}
fn default_s3_threads() -> usize {
    2
}
fn default_s3_write_buffer() -> usize {
    256
}
fn default_s3_flush_idle() -> u64 {
    5
}
fn default_s3_part() -> usize {
    8
}
fn default_s3_read_block() -> usize {
    4
}
/// Far below CopyObject's 5 GiB limit: one CopyObject is one request that must finish
/// within the retry budget (default 10 s), and stores copy server-side at tens to a
/// few hundred MB/s, so a multi-GiB CopyObject would time out on every attempt and
/// the client's RENAME or SETATTR would get JUKEBOX for ever. 256 MiB takes seconds.
fn default_s3_multipart_copy_over() -> usize {
    256
}
/// One part copy is one request under `timeout_s` and the retry budget: 64 MiB is a
/// few seconds of server-side copying even on a slow store, and 10,000 of them cover
/// 625 GiB (larger objects get larger parts).
fn default_s3_copy_part() -> usize {
    64
}

fn default_kind() -> BackendKind {
    BackendKind::Fs
}
fn default_root() -> PathBuf {
    "./data".into()
}
fn default_workers() -> usize {
    4
}
fn default_ring() -> usize {
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
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StateConfig {
    /// Handle key, handle table and staging live here; keep it across restarts.
    #[serde(default = "default_state_dir")]
    pub dir: PathBuf,
    /// Handle-table entries kept in memory; the rest are read from the on-disk index.
    #[serde(default = "default_handle_cache_entries")]
    pub handle_cache_entries: usize,
}

/// Bounds of `state.handle_cache_entries`: below the minimum a hot working set thrashes
/// the index; above the maximum the cache alone could take tens of GiB.
pub const HANDLE_CACHE_MIN: usize = 1_000;
pub const HANDLE_CACHE_MAX: usize = 100_000_000;

/// Default of `state.handle_cache_entries`.
pub const DEFAULT_HANDLE_CACHE_ENTRIES: usize = 1_000_000;

fn default_handle_cache_entries() -> usize {
    DEFAULT_HANDLE_CACHE_ENTRIES
}

fn default_state_dir() -> PathBuf {
    "./state".into()
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            dir: default_state_dir(),
            handle_cache_entries: default_handle_cache_entries(),
        }
    }
}

/// NFSv4.1 state: leases, grace period and table limits (`[nfs4]`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Nfs4Config {
    /// Lease time (RFC 8881 §8.3): a client silent this long loses its state.
    #[serde(default = "default_lease_time_s")]
    pub lease_time_s: u64,
    /// Grace period after a restart during which clients of the previous run
    /// reclaim (0 = the lease time).
    #[serde(default)]
    pub grace_time_s: u64,
    /// Client records kept (confirmed and unconfirmed).
    #[serde(default = "default_max_clients")]
    pub max_clients: usize,
    /// Sessions kept, all clients together.
    #[serde(default = "default_max_sessions")]
    pub max_sessions: usize,
    /// Sessions per client.
    #[serde(default = "default_max_sessions_per_client")]
    pub max_sessions_per_client: usize,
    /// Bytes of reply cached per session slot (ca_maxresponsesize_cached bound).
    #[serde(default = "default_max_cached_reply")]
    pub max_cached_reply: u32,
    /// MiB all sessions' slots together may hold in their reply caches; new sessions
    /// get fewer slots when it runs short.
    #[serde(default = "default_reply_cache_mib")]
    pub reply_cache_mib: u64,
    /// Seconds a client whose lease ran out keeps its opens, locks and delegations as
    /// a courtesy client (RFC 8881 §8.4.2.1), until another client conflicts with them
    /// or the client table / reply cache runs short; 0 = freed when the lease runs out.
    #[serde(default = "default_courtesy_s")]
    pub courtesy_s: u64,
}

fn default_lease_time_s() -> u64 {
    90
}
fn default_max_clients() -> usize {
    4096
}
fn default_max_sessions() -> usize {
    4096
}
fn default_reply_cache_mib() -> u64 {
    128
}
fn default_courtesy_s() -> u64 {
    86_400
}
fn default_max_sessions_per_client() -> usize {
    16
}
fn default_max_cached_reply() -> u32 {
    8192
}

impl Default for Nfs4Config {
    fn default() -> Self {
        Nfs4Config {
            lease_time_s: default_lease_time_s(),
            grace_time_s: 0,
            max_clients: default_max_clients(),
            max_sessions: default_max_sessions(),
            max_sessions_per_client: default_max_sessions_per_client(),
            max_cached_reply: default_max_cached_reply(),
            reply_cache_mib: default_reply_cache_mib(),
            courtesy_s: default_courtesy_s(),
        }
    }
}

impl Nfs4Config {
    /// The state limits these settings describe.
    pub fn limits(&self) -> crate::state::clients::Limits {
        let lease = std::time::Duration::from_secs(self.lease_time_s);
        crate::state::clients::Limits {
            lease,
            grace: if self.grace_time_s == 0 {
                lease
            } else {
                std::time::Duration::from_secs(self.grace_time_s)
            },
            max_clients: self.max_clients,
            max_sessions: self.max_sessions,
            max_sessions_per_client: self.max_sessions_per_client,
            max_cached_reply: self.max_cached_reply,
            reply_cache_bytes: self.reply_cache_mib << 20,
            courtesy: std::time::Duration::from_secs(self.courtesy_s),
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let bad = |k: &str, why: &str| Err(ConfigError(format!("nfs4.{k}: {why}")));
        if !(10..=3600).contains(&self.lease_time_s) {
            return bad("lease_time_s", "must be 10..=3600 seconds");
        }
        if self.grace_time_s > 3600 {
            return bad("grace_time_s", "must be at most 3600 seconds");
        }
        if !(1..=1_000_000).contains(&self.max_clients) {
            return bad("max_clients", "must be 1..=1000000");
        }
        if !(1..=100_000).contains(&self.max_sessions) {
            return bad("max_sessions", "must be 1..=100000");
        }
        if !(1..=1024).contains(&self.max_sessions_per_client) {
            return bad("max_sessions_per_client", "must be 1..=1024");
        }
        if !(512..=1 << 20).contains(&self.max_cached_reply) {
            return bad("max_cached_reply", "must be 512..=1048576 bytes");
        }
        if !(1..=65536).contains(&self.reply_cache_mib) {
            return bad("reply_cache_mib", "must be 1..=65536 MiB");
        }
        if self.courtesy_s > 30 * 86_400 {
            return bad("courtesy_s", "must be at most 2592000 seconds (30 days)");
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    Rw,
    Ro,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Squash {
    /// Trust client uids.
    None,
    /// uid 0 becomes the anonymous uid/gid.
    Root,
    /// Every uid becomes the anonymous uid/gid.
    All,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ExportConfig {
    /// The path clients mount ("/" or "/a/b"); it serves backend keys under "a/b/".
    pub path: String,
    /// The export id carried in file handles; default derived from `path` (see
    /// `export_id`). Set it to keep handles when a path changes.
    #[serde(default)]
    pub id: Option<u16>,
    /// The directory of the store this export serves: "/" for the whole store, "/a/b"
    /// for keys under "a/b/". Default: the same as `path`. Lets a name that is not the
    /// store's layout be mounted (the shipped config serves the whole store as "/data",
    /// so libnfs URLs of files at its top level have a non-empty export part).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_path: Option<String>,
    /// Client networks in CIDR form ("127.0.0.1/32", "10.0.0.0/8", "::1/128") or "*".
    #[serde(default = "default_clients")]
    pub clients: Vec<String>,
    #[serde(default = "default_access")]
    pub access: Access,
    #[serde(default = "default_squash")]
    pub squash: Squash,
    #[serde(default = "default_anon")]
    pub anon_uid: u32,
    #[serde(default = "default_anon")]
    pub anon_gid: u32,
}

fn default_clients() -> Vec<String> {
    vec!["127.0.0.0/8".into(), "::1/128".into()]
}
fn default_access() -> Access {
    Access::Rw
}
fn default_squash() -> Squash {
    Squash::Root
}
fn default_anon() -> u32 {
    65534
}

/// The reactor-side read cache (see `gateway::cache`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CacheConfig {
    /// Page cache per reactor in MiB (0 = attributes only). Mapped once at start.
    #[serde(default = "default_cache_mib")]
    pub size_mib: usize,
}

fn default_cache_mib() -> usize {
    256
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            size_mib: default_cache_mib(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// tracing filter ("info", "gateway=debug,engine=info").
    #[serde(default = "default_level")]
    pub level: String,
}

fn default_level() -> String {
    "info".into()
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: default_level(),
        }
    }
}

/// `[stats]`: the Prometheus endpoint (see docs/stats.md). Counters are always kept;
/// only the HTTP listener is optional.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StatsConfig {
    /// address:port of the HTTP endpoint serving /metrics; empty (the default) = off.
    #[serde(default)]
    pub listen: String,
    /// Allow a non-loopback `listen` (the endpoint has no authentication).
    #[serde(default)]
    pub allow_remote: bool,
}

impl StatsConfig {
    /// The endpoint address, or `None` when stats are off (validated by `Config`).
    pub fn addr(&self) -> Option<SocketAddr> {
        self.listen.parse().ok()
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.listen.is_empty() {
            return Ok(());
        }
        let Ok(addr) = self.listen.parse::<SocketAddr>() else {
            return err(
                "stats.listen",
                format!(
                    "\"{}\" is not an address:port such as \"127.0.0.1:9108\" (or leave it empty to turn stats off)",
                    self.listen
                ),
            );
        };
        if !addr.ip().is_loopback() && !self.allow_remote {
            return err(
                "stats.listen",
                format!(
                    "\"{addr}\" is not a loopback address and the endpoint has no authentication; \
                     use 127.0.0.1 (or ::1), or set stats.allow_remote = true to expose it"
                ),
            );
        }
        Ok(())
    }
}

/// A client network: address and prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Cidr {
    pub fn parse(s: &str) -> Result<Cidr, String> {
        if s == "*" {
            return Ok(Cidr {
                addr: IpAddr::from([0u8, 0, 0, 0]),
                prefix: 0,
            });
        }
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = a
            .parse()
            .map_err(|_| format!("\"{s}\" is not an address or CIDR network"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|&p| p <= max)
                .ok_or_else(|| format!("\"{s}\": prefix length must be 0..={max}"))?,
            None => max,
        };
        Ok(Cidr { addr, prefix })
    }

    /// Whether `ip` is inside this network (IPv4-mapped IPv6 clients match IPv4 nets;
    /// "*" matches everything).
    pub fn contains(&self, ip: IpAddr) -> bool {
        if self.prefix == 0 && self.addr == IpAddr::from([0u8, 0, 0, 0]) {
            return true;
        }
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = if self.prefix == 0 {
                    0
                } else {
                    u32::MAX << (32 - self.prefix)
                };
                (u32::from(n) & mask) == (u32::from(a) & mask)
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = if self.prefix == 0 {
                    0
                } else {
                    u128::MAX << (128 - self.prefix)
                };
                (u128::from(n) & mask) == (u128::from(a) & mask)
            }
            _ => false,
        }
    }
}

/// A configuration error: the key, what is wrong, and the fix.
#[derive(Debug)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

fn err<T>(key: &str, msg: impl std::fmt::Display) -> Result<T, ConfigError> {
    Err(ConfigError(format!("{key}: {msg}")))
}

/// Validated, derived view of an export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    pub id: u16,
    pub path: String,
    /// Backend key prefix ("" or "a/b/").
    pub prefix: String,
    pub clients: Vec<Cidr>,
    pub access: Access,
    pub squash: Squash,
    pub anon_uid: u32,
    pub anon_gid: u32,
}

impl Config {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError(format!(
                "cannot read config file {}: {e}; pass an existing file with --config",
                path.display()
            ))
        })?;
        Config::parse(&text)
    }

    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let cfg: Config = toml::from_str(text).map_err(|e| {
            ConfigError(format!(
                "invalid configuration: {}; see the configuration reference in README.md",
                e.to_string().trim()
            ))
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn listen_addr(&self) -> SocketAddr {
        self.tcp.listen.parse().expect("validated")
    }

    pub fn rdma_addr(&self) -> SocketAddr {
        self.rdma.listen.parse().expect("validated")
    }

    /// `[backend.s3]` is required with kind = "s3" and refused otherwise.
    fn validate_s3(&self) -> Result<(), ConfigError> {
        let s3 = match (&self.backend.s3, self.backend.kind) {
            (None, BackendKind::S3) => {
                return err(
                    "backend.s3",
                    "kind = \"s3\" needs a [backend.s3] table with at least bucket = \"NAME\"",
                )
            }
            (Some(_), k) if k != BackendKind::S3 => {
                return err(
                    "backend.s3",
                    "only used with kind = \"s3\"; remove it or set kind",
                )
            }
            (None, _) => return Ok(()),
            (Some(s), _) => s,
        };
        if s3.bucket.is_empty() || s3.bucket.contains('/') {
            return err("backend.s3.bucket", "set the bucket name (no '/')");
        }
        if !(s3.prefix.is_empty() || s3.prefix.ends_with('/'))
            || s3.prefix.starts_with('/')
            || s3.prefix.contains("//")
        {
            return err(
                "backend.s3.prefix",
                "must be \"\" or a key prefix ending in '/', e.g. \"gateway/\"",
            );
        }
        if s3.endpoint.is_some() && !s3.endpoints.is_empty() {
            return err(
                "backend.s3.endpoints",
                "set either endpoint (one) or endpoints (several of one cluster), not both",
            );
        }
        if s3.endpoints.len() > 64 {
            return err("backend.s3.endpoints", "at most 64 endpoints");
        }
        let named = s3
            .endpoint
            .iter()
            .map(|e| ("backend.s3.endpoint", e))
            .chain(s3.endpoints.iter().map(|e| ("backend.s3.endpoints", e)));
        for (key, e) in named {
            let http = e.starts_with("http://");
            if !http && !e.starts_with("https://") {
                return err(
                    key,
                    format!(
                        "{e:?} must be an http:// or https:// URL, e.g. \"https://s3.example.com\""
                    ),
                );
            }
            if http && !s3.allow_http {
                return err(
                    key,
                    format!("{e:?} is plain HTTP; use https:// or set allow_http = true"),
                );
            }
        }
        if s3.access_key_id.is_some() != s3.secret_access_key.is_some() {
            return err(
                "backend.s3.secret_access_key",
                "set both access_key_id and secret_access_key, or neither (environment)",
            );
        }
        if s3.timeout_s == 0 || s3.timeout_s > 3600 {
            return err("backend.s3.timeout_s", "must be 1..=3600 seconds");
        }
        if s3.connect_timeout_s == 0 || s3.connect_timeout_s > 600 {
            return err("backend.s3.connect_timeout_s", "must be 1..=600 seconds");
        }
        if s3.retries > 100 {
            return err("backend.s3.retries", "must be 0..=100");
        }
        if !(0.1..=3600.0).contains(&s3.retry_budget_s) {
            return err("backend.s3.retry_budget_s", "must be 0.1..=3600 seconds");
        }
        if s3.max_concurrency == 0 || s3.max_concurrency > 4096 {
            return err("backend.s3.max_concurrency", "must be 1..=4096");
        }
        if s3.runtime_threads == 0 || s3.runtime_threads > 64 {
            return err("backend.s3.runtime_threads", "must be 1..=64");
        }
        if s3.write_buffer_mib < 16 || s3.write_buffer_mib > 1 << 20 {
            return err("backend.s3.write_buffer_mib", "must be 16..=1048576 MiB");
        }
        if !(5..=5120).contains(&s3.part_size_mib) {
            return err(
                "backend.s3.part_size_mib",
                "must be 5..=5120 (S3 parts are at least 5 MiB)",
            );
        }
        if s3.read_block_mib > 256 {
            return err("backend.s3.read_block_mib", "must be 0..=256 MiB");
        }
        if !(1..=5120).contains(&s3.multipart_copy_over_mib) {
            return err(
                "backend.s3.multipart_copy_over_mib",
                "must be 1..=5120 (CopyObject refuses sources over 5 GiB)",
            );
        }
        if !(5..=5120).contains(&s3.copy_part_mib) {
            return err(
                "backend.s3.copy_part_mib",
                "must be 5..=5120 (S3 parts are 5 MiB to 5 GiB)",
            );
        }
        if s3.part_size_mib * 2 > s3.write_buffer_mib {
            return err(
                "backend.s3.write_buffer_mib",
                "must hold at least two parts (2 x part_size_mib)",
            );
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let e = &self.engine;
        if e.cores.is_empty() {
            return err(
                "engine.cores",
                "must name at least one CPU, e.g. cores = [0]",
            );
        }
        // CPU ids that exist, not how many this process may use: under `taskset` or
        // systemd's CPUAffinity= the affinity mask is smaller than the machine, and
        // pinning then fails at start with its own clear error.
        let ncpu = possible_cpus().unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        });
        for (i, c) in e.cores.iter().enumerate() {
            if *c >= ncpu {
                return err(
                    "engine.cores",
                    format!("CPU {c} does not exist (this machine has CPUs 0..={}); list existing CPU ids", ncpu - 1),
                );
            }
            if e.cores[..i].contains(c) {
                return err(
                    "engine.cores",
                    format!("CPU {c} is listed twice; one reactor per core"),
                );
            }
        }
        if e.idle_spins == 0 {
            return err("engine.idle_spins", "must be at least 1");
        }
        if e.idle_spin_us > 1_000_000 {
            return err("engine.idle_spin_us", "must be 0..=1000000 microseconds");
        }
        if e.idle_bulk_spin_us > 1_000_000 {
            return err(
                "engine.idle_bulk_spin_us",
                "must be 0..=1000000 microseconds",
            );
        }
        if e.idle_sleep_us == 0 || e.idle_sleep_us > 100_000 {
            return err("engine.idle_sleep_us", "must be 1..=100000 microseconds");
        }
        let p = &self.pools;
        for (k, v) in [
            ("pools.small", p.small),
            ("pools.medium", p.medium),
            ("pools.large", p.large),
        ] {
            if v == 0 || v > 1 << 20 {
                return err(k, "buffer count must be 1..=1048576");
            }
        }
        if self.tcp.listen.parse::<SocketAddr>().is_err() {
            return err(
                "tcp.listen",
                format!(
                    "\"{}\" is not an address:port such as \"127.0.0.1:2049\"",
                    self.tcp.listen
                ),
            );
        }
        if self.tcp.max_record < 1024 || self.tcp.max_record > LARGE_BUF {
            return err(
                "tcp.max_record",
                format!("must be 1024..={LARGE_BUF} bytes (1 MiB of data plus headers)"),
            );
        }
        if self.tcp.max_connections == 0 {
            return err("tcp.max_connections", "must be at least 1");
        }
        if self.tcp.max_inflight == 0 || self.tcp.max_inflight > 4096 {
            return err("tcp.max_inflight", "must be 1..=4096");
        }
        if self.tcp.record_timeout_s == 0 {
            return err("tcp.record_timeout_s", "must be at least 1 second");
        }
        if self.tcp.send_timeout_s == 0 || self.tcp.send_timeout_s > 86_400 {
            return err("tcp.send_timeout_s", "must be 1..=86400 seconds");
        }
        if self.tcp.stall_reclaim_ms < 10 || self.tcp.stall_reclaim_ms > 3_600_000 {
            return err("tcp.stall_reclaim_ms", "must be 10..=3600000 milliseconds");
        }
        if self.tcp.max_queued_mib == 0 || self.tcp.max_queued_mib > 4096 {
            return err("tcp.max_queued_mib", "must be 1..=4096 MiB");
        }
        let r = &self.rdma;
        if r.listen.parse::<SocketAddr>().is_err() {
            return err(
                "rdma.listen",
                format!(
                    "\"{}\" is not an address:port such as \"127.0.0.1:20049\"",
                    r.listen
                ),
            );
        }
        if r.device
            .as_deref()
            .is_some_and(|d| d.is_empty() || d.len() > 64)
        {
            return err(
                "rdma.device",
                "must be an RDMA device name such as \"rxe0\" (see `rdma link show`), or left out",
            );
        }
        if r.credits == 0 || r.credits > 1024 {
            return err(
                "rdma.credits",
                "must be 1..=1024 (a grant of 0 deadlocks clients)",
            );
        }
        if r.min_credits == 0 || r.min_credits > r.credits {
            return err("rdma.min_credits", "must be 1..=rdma.credits");
        }
        if !(1024..=65536).contains(&r.inline_size) || !r.inline_size.is_multiple_of(1024) {
            return err(
                "rdma.inline_size",
                "must be a multiple of 1024 in 1024..=65536 bytes (RFC 8797 sizes)",
            );
        }
        if r.inline_size > SMALL_BUF && r.provider != RdmaProvider::Off && self.pools.medium < 4 {
            return err(
                "pools.medium",
                "rdma.inline_size above 8 KiB needs medium buffers for Receives",
            );
        }
        if r.read_depth == 0 {
            return err("rdma.read_depth", "must be 1..=255");
        }
        if r.max_connections == 0 {
            return err("rdma.max_connections", "must be at least 1");
        }
        if r.max_reply_mib == 0 || r.max_reply_mib > 4096 {
            return err("rdma.max_reply_mib", "must be 1..=4096 MiB");
        }
        if r.read_timeout_s == 0 {
            return err("rdma.read_timeout_s", "must be at least 1 second");
        }
        if r.send_timeout_s == 0 || r.send_timeout_s > 86_400 {
            return err("rdma.send_timeout_s", "must be 1..=86400 seconds");
        }
        if r.stall_reclaim_ms < 10 || r.stall_reclaim_ms > 3_600_000 {
            return err("rdma.stall_reclaim_ms", "must be 10..=3600000 milliseconds");
        }
        if self.backend.workers == 0 || self.backend.workers > 256 {
            return err("backend.workers", "must be 1..=256");
        }
        if self.cache.size_mib > 1 << 20 {
            return err("cache.size_mib", "must be 0..=1048576 (MiB per reactor)");
        }
        if self.backend.worker_spin_us > 10_000 {
            return err("backend.worker_spin_us", "must be 0..=10000 microseconds");
        }
        if self.backend.ring_depth < 16 || self.backend.ring_depth > 1 << 20 {
            return err("backend.ring_depth", "must be 16..=1048576");
        }
        self.validate_s3()?;
        if self.backend.kind == BackendKind::Fs && self.backend.root.as_os_str().is_empty() {
            return err(
                "backend.root",
                "set the directory of objects, e.g. root = \"./data\"",
            );
        }
        if self.state.dir.as_os_str().is_empty() {
            return err(
                "state.dir",
                "set a directory that persists across restarts, e.g. dir = \"./state\"",
            );
        }
        if !(HANDLE_CACHE_MIN..=HANDLE_CACHE_MAX).contains(&self.state.handle_cache_entries) {
            return err(
                "state.handle_cache_entries",
                "must be between 1000 and 100000000 (default 1000000, about 100 bytes plus the key each)",
            );
        }
        if self.exports.is_empty() {
            return err(
                "exports",
                "no [[exports]]; add one, e.g. [[exports]] path = \"/\" clients = [\"127.0.0.1/32\"]",
            );
        }
        if self.exports.len() > 1000 {
            return err("exports", "at most 1000 exports");
        }
        self.exports()?;
        self.stats.validate()?;
        self.nfs4.validate()?;
        if tracing_subscriber::EnvFilter::try_new(&self.log.level).is_err() {
            return err(
                "log.level",
                format!(
                    "\"{}\" is not a filter such as \"info\" or \"gateway=debug\"",
                    self.log.level
                ),
            );
        }
        Ok(())
    }

    /// The validated exports with their ids and key prefixes. Ids are stable: an
    /// explicit `id`, else derived from the path (`export_id`), never the position in
    /// the list, so adding or reordering exports keeps every issued handle valid. Two
    /// exports with one id fail the load with the fix in the message.
    pub fn exports(&self) -> Result<Vec<Export>, ConfigError> {
        let mut out: Vec<Export> = Vec::with_capacity(self.exports.len());
        for (i, x) in self.exports.iter().enumerate() {
            let key = format!("exports[{i}].path");
            if !x.path.starts_with('/') {
                return err(
                    &key,
                    format!(
                        "\"{}\" must be absolute, like \"/\" or \"/projects\"",
                        x.path
                    ),
                );
            }
            let parts: Vec<&str> = x.path.split('/').filter(|s| !s.is_empty()).collect();
            if parts.iter().any(|p| *p == "." || *p == "..") {
                return err(&key, "must not contain \".\" or \"..\"");
            }
            let path = format!("/{}", parts.join("/"));
            if out.iter().any(|o| o.path == path) {
                return err(&key, format!("\"{path}\" is exported twice"));
            }
            let dir: Vec<&str> = match &x.store_path {
                None => parts.clone(),
                Some(sp) => {
                    let key = format!("exports[{i}].store_path");
                    if !sp.starts_with('/') {
                        return err(
                            &key,
                            format!("\"{sp}\" must be absolute, like \"/\" or \"/projects\""),
                        );
                    }
                    let d: Vec<&str> = sp.split('/').filter(|s| !s.is_empty()).collect();
                    if d.iter().any(|p| *p == "." || *p == "..") {
                        return err(&key, "must not contain \".\" or \"..\"");
                    }
                    d
                }
            };
            let prefix = if dir.is_empty() {
                String::new()
            } else {
                format!("{}/", dir.join("/"))
            };
            if x.clients.is_empty() {
                return err(
                    &format!("exports[{i}].clients"),
                    "empty: list client networks, e.g. [\"127.0.0.1/32\"], or [\"*\"] for any",
                );
            }
            let mut clients = Vec::new();
            for c in &x.clients {
                clients.push(Cidr::parse(c).or_else(|m| err(&format!("exports[{i}].clients"), m))?);
            }
            let id = x.id.unwrap_or_else(|| export_id(&path));
            if let Some(o) = out.iter().find(|o| o.id == id) {
                return err(
                    &format!("exports[{i}].id"),
                    format!(
                        "exports \"{}\" and \"{path}\" both get handle id {id}; give one of them \
                         an explicit `id = N` (0-65535) that no other export uses",
                        o.path
                    ),
                );
            }
            out.push(Export {
                id,
                path,
                prefix,
                clients,
                access: x.access,
                squash: x.squash,
                anon_uid: x.anon_uid,
                anon_gid: x.anon_gid,
            });
        }
        Ok(out)
    }
}

/// The default export id of a canonical export path: 0 for "/" (what the single root
/// export always had, so its handles survive the change from positional ids), else a
/// hash of the path in 1..=65535.
pub fn export_id(path: &str) -> u16 {
    if path == "/" {
        return 0;
    }
    let h = blake3::hash(path.as_bytes());
    let v = u16::from_le_bytes([h.as_bytes()[0], h.as_bytes()[1]]);
    (v % u16::MAX) + 1
}

/// How many CPU ids the kernel knows (`/sys/devices/system/cpu/possible`, e.g. "0-3"
/// or "0,2-5": the highest id + 1); `None` where that file cannot be read.
fn possible_cpus() -> Option<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible").ok()?;
    parse_cpu_list_max(&text).map(|m| m + 1)
}

/// The highest CPU id in a kernel CPU list ("0-3", "0,2-5", "0").
fn parse_cpu_list_max(text: &str) -> Option<usize> {
    text.trim()
        .split([',', '-'])
        .map(|n| n.trim().parse::<usize>().ok())
        .try_fold(None::<usize>, |m, n| {
            n.map(|n| Some(m.map_or(n, |m| m.max(n))))
        })?
}

#[cfg(test)]
mod tests {
    #[test]
    fn cpu_lists_give_their_highest_id() {
        assert_eq!(super::parse_cpu_list_max("0-3\n"), Some(3));
        assert_eq!(super::parse_cpu_list_max("0,2-5"), Some(5));
        assert_eq!(super::parse_cpu_list_max("0"), Some(0));
        assert_eq!(super::parse_cpu_list_max("x"), None);
    }

    use super::*;

    const MIN: &str = "[[exports]]\npath = \"/\"\n";

    #[test]
    fn defaults_from_minimal_file() {
        let c = Config::parse(MIN).unwrap();
        assert_eq!(c.engine.cores, vec![0]);
        assert_eq!(c.engine.idle, Idle::Adaptive);
        assert_eq!(c.tcp.listen, "127.0.0.1:2049");
        assert_eq!(c.backend.kind, BackendKind::Fs);
        let x = c.exports().unwrap();
        assert_eq!(x[0].prefix, "");
        assert_eq!(x[0].squash, Squash::Root);
        assert_eq!(c.state.handle_cache_entries, 1_000_000);
    }

    #[test]
    fn rdma_send_timeout_defaults_to_30_s_and_is_bounded() {
        let c = Config::parse(MIN).unwrap();
        assert_eq!(c.rdma.send_timeout_s, 30);
        let c = Config::parse(&format!("[rdma]\nsend_timeout_s = 1\n{MIN}")).unwrap();
        assert_eq!(c.rdma.send_timeout_s, 1);
        for bad in ["0", "86401", "18446744073709551615"] {
            let e = Config::parse(&format!("[rdma]\nsend_timeout_s = {bad}\n{MIN}"))
                .err()
                .unwrap_or_else(|| panic!("{bad} accepted"));
            assert!(e.to_string().contains("send_timeout_s"), "{bad}: {e}");
        }
    }

    #[test]
    fn rdma_stall_reclaim_defaults_to_1_s_and_is_bounded() {
        let c = Config::parse(MIN).unwrap();
        assert_eq!(c.rdma.stall_reclaim_ms, 1000);
        let c = Config::parse(&format!("[rdma]\nstall_reclaim_ms = 10\n{MIN}")).unwrap();
        assert_eq!(c.rdma.stall_reclaim_ms, 10);
        for bad in ["0", "9", "3600001", "18446744073709551615"] {
            let e = Config::parse(&format!("[rdma]\nstall_reclaim_ms = {bad}\n{MIN}"))
                .err()
                .unwrap_or_else(|| panic!("{bad} accepted"));
            assert!(e.to_string().contains("stall_reclaim_ms"), "{bad}: {e}");
        }
    }

    #[test]
    fn store_path_names_the_served_directory() {
        let c = Config::parse(
            "[[exports]]\npath = \"/data\"\nstore_path = \"/\"\n\
             [[exports]]\npath = \"/p\"\nstore_path = \"//proj/a/\"\n[[exports]]\npath = \"/q/r\"\n",
        )
        .unwrap();
        let x = c.exports().unwrap();
        assert_eq!((x[0].path.as_str(), x[0].prefix.as_str()), ("/data", ""));
        assert_eq!(x[0].id, export_id("/data"));
        assert_eq!(x[1].prefix, "proj/a/");
        assert_eq!(x[2].prefix, "q/r/");
        for bad in ["\"rel\"", "\"/a/../b\""] {
            let e = Config::parse(&format!("[[exports]]\npath = \"/x\"\nstore_path = {bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("exports[0].store_path"), "{e}");
        }
    }

    #[test]
    fn s3_endpoints_and_retry_budget() {
        let s3 = |extra: &str| {
            Config::parse(&format!(
                "[backend]\nkind = \"s3\"\n[backend.s3]\nbucket = \"b\"\nallow_http = true\n{extra}\n{MIN}"
            ))
        };
        let c = s3("endpoints = [\"http://a:3900\", \"http://b:3900\"]").unwrap();
        let b = c.backend.s3.unwrap();
        assert_eq!(b.endpoints.len(), 2);
        assert_eq!((b.retries, b.retry_budget_s), (10, 10.0));
        assert_eq!((b.multipart_copy_over_mib, b.copy_part_mib), (256, 64));
        assert!(b.handle_key_file.is_none());
        for (bad, key) in [
            (
                "endpoint = \"http://a\"\nendpoints = [\"http://b\"]",
                "backend.s3.endpoints",
            ),
            ("endpoints = [\"ftp://a\"]", "backend.s3.endpoints"),
            ("retry_budget_s = 0.0", "backend.s3.retry_budget_s"),
            ("retry_budget_s = nan", "backend.s3.retry_budget_s"),
            ("retry_budget_s = 1e9", "backend.s3.retry_budget_s"),
            (
                "multipart_copy_over_mib = 0",
                "backend.s3.multipart_copy_over_mib",
            ),
            (
                "multipart_copy_over_mib = 5121",
                "backend.s3.multipart_copy_over_mib",
            ),
            ("copy_part_mib = 4", "backend.s3.copy_part_mib"),
            ("copy_part_mib = 5121", "backend.s3.copy_part_mib"),
        ] {
            let e = s3(bad).err().unwrap_or_else(|| panic!("{bad} accepted"));
            assert!(e.to_string().contains(key), "{bad}: {e}");
        }
        let many: Vec<String> = (0..65).map(|i| format!("\"http://h{i}\"")).collect();
        assert!(s3(&format!("endpoints = [{}]", many.join(","))).is_err());
    }

    #[test]
    fn shipped_default_config_is_valid() {
        let text = include_str!("../../configs/default.toml");
        let c = Config::parse(text).unwrap();
        assert_eq!(c.backend.root, PathBuf::from("./data"));
        // README "Two commands": the whole store is mounted as /data.
        let x = c.exports().unwrap();
        assert_eq!((x[0].path.as_str(), x[0].prefix.as_str()), ("/data", ""));
        assert_eq!(c.listen_addr(), "127.0.0.1:2049".parse().unwrap());
    }

    #[test]
    fn shipped_small_config_is_valid() {
        // configs/small.toml (docs/tuning.md "Small machines"): one adaptive reactor
        // with the measured spin, data I/O on io_uring.
        let c = Config::parse(include_str!("../../configs/small.toml")).unwrap();
        assert_eq!(c.engine.cores, vec![0]);
        assert_eq!(c.engine.idle, Idle::Adaptive);
        assert_eq!(c.engine.idle_spin_us, 200);
        assert_eq!(c.backend.io, IoMode::Auto);
    }

    #[test]
    fn errors_name_the_key() {
        let cases = [
            (
                "[engine]\ncores = []\n[[exports]]\npath=\"/\"",
                "engine.cores",
            ),
            ("[engine]\nidle = \"lazy\"\n[[exports]]\npath=\"/\"", "idle"),
            (
                "[tcp]\nlisten = \"nowhere\"\n[[exports]]\npath=\"/\"",
                "tcp.listen",
            ),
            (
                "[backend]\nkind = \"tape\"\n[[exports]]\npath=\"/\"",
                "kind",
            ),
            ("[[exports]]\npath = \"rel\"", "exports[0].path"),
            (
                "[[exports]]\npath = \"/\"\nclients = [\"10.0.0.0/33\"]",
                "exports[0].clients",
            ),
            ("[[exports]]\npath = \"/\"\nsquash = \"some\"", "squash"),
            ("", "exports"),
            (
                "[state]\nhandle_cache_entries = 10\n[[exports]]\npath=\"/\"",
                "state.handle_cache_entries",
            ),
            ("[engine]\nbogus = 1\n[[exports]]\npath=\"/\"", "bogus"),
        ];
        for (text, key) in cases {
            let e = Config::parse(text).unwrap_err().to_string();
            assert!(e.contains(key), "{text:?}: error {e:?} does not name {key}");
        }
    }

    #[test]
    fn prefixes_from_paths() {
        let c = Config::parse("[[exports]]\npath = \"/a//b/\"\n[[exports]]\npath=\"/c\"").unwrap();
        let x = c.exports().unwrap();
        assert_eq!((x[0].path.as_str(), x[0].prefix.as_str()), ("/a/b", "a/b/"));
        assert_eq!(x[1].prefix, "c/");
        assert_eq!(x[1].id, export_id("/c"));
    }

    #[test]
    fn export_ids_are_stable_and_unique() {
        let one = Config::parse("[[exports]]\npath = \"/b\"\n[[exports]]\npath = \"/\"").unwrap();
        let two = Config::parse(
            "[[exports]]\npath = \"/a\"\n[[exports]]\npath = \"/\"\n[[exports]]\npath = \"/b/\"",
        )
        .unwrap();
        let ids = |c: &Config| -> Vec<(String, u16)> {
            c.exports()
                .unwrap()
                .into_iter()
                .map(|e| (e.path, e.id))
                .collect()
        };
        let (one, two) = (ids(&one), ids(&two));
        // Inserting "/a" in front changes no other export's id.
        for (p, id) in &one {
            assert!(two.contains(&(p.clone(), *id)), "{p}: {one:?} vs {two:?}");
        }
        assert!(one.contains(&("/".to_string(), 0)));
        assert_ne!(export_id("/a"), 0);
        // An explicit id wins, and a clash names both exports and the fix.
        let c = Config::parse("[[exports]]\npath = \"/x\"\nid = 7").unwrap();
        assert_eq!(c.exports().unwrap()[0].id, 7);
        let e = Config::parse("[[exports]]\npath = \"/x\"\nid = 0\n[[exports]]\npath = \"/\"")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("exports[1].id") && e.contains("\"/x\"") && e.contains("id = N"),
            "{e}"
        );
    }

    #[test]
    fn cidr_matching() {
        let n = Cidr::parse("10.1.0.0/16").unwrap();
        assert!(n.contains("10.1.2.3".parse().unwrap()));
        assert!(!n.contains("10.2.0.1".parse().unwrap()));
        assert!(n.contains("::ffff:10.1.9.9".parse().unwrap()));
        let h = Cidr::parse("127.0.0.1").unwrap();
        assert!(h.contains("127.0.0.1".parse().unwrap()));
        assert!(!h.contains("127.0.0.2".parse().unwrap()));
        assert!(Cidr::parse("*").unwrap().contains("::1".parse().unwrap()));
        let v6 = Cidr::parse("::1/128").unwrap();
        assert!(v6.contains("::1".parse().unwrap()));
        assert!(!v6.contains("127.0.0.1".parse().unwrap()));
    }

    #[test]
    fn stats_endpoint_off_by_default_and_loopback_only() {
        let c = Config::parse(MIN).unwrap();
        assert_eq!(c.stats.addr(), None);
        let on = format!("[stats]\nlisten = \"127.0.0.1:9108\"\n{MIN}");
        assert_eq!(
            Config::parse(&on).unwrap().stats.addr(),
            Some("127.0.0.1:9108".parse().unwrap())
        );
        let remote = format!("[stats]\nlisten = \"0.0.0.0:9108\"\n{MIN}");
        let e = Config::parse(&remote).unwrap_err().to_string();
        assert!(
            e.contains("stats.listen") && e.contains("allow_remote"),
            "{e}"
        );
        let allowed = format!("[stats]\nlisten = \"0.0.0.0:9108\"\nallow_remote = true\n{MIN}");
        assert!(Config::parse(&allowed).is_ok());
        let bad = format!("[stats]\nlisten = \"localhost\"\n{MIN}");
        assert!(Config::parse(&bad)
            .unwrap_err()
            .to_string()
            .contains("stats.listen"));
    }
}
