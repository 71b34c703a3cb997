//! The gateway's TOML configuration: parsing, defaults and validation.
//!
//! Every key is checked at start; an error names the key and the fix. Key names are a
//! contract with operators and scripts (`engine.cores`, `engine.idle`,
//! `engine.hugepages`, `tcp.listen`, `backend.kind`, `backend.root`, `state.dir`,
//! `[[exports]]` with `path`, `clients`, `access`, `squash`, `id`).
//!
//! One file per part of the file: `reactors` (`[engine]`, pools, `[cache]`), `transport`
//! (`[tcp]`, `[rdma]`), `backend` (`[backend]`, `[backend.s3]`), `state` (`[state]`,
//! `[nfs4]`), `exports` (`[[exports]]`), `observability` (`[log]`, `[stats]`), `qos`
//! (`[[qos.client]]`, `[[qos.export]]`), `pnfs` (`[pnfs]`), `ha` (`[ha]`). This file
//! holds the whole `Config` and the validation that needs more than one section.

use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

mod backend;
mod exports;
mod ha;
mod observability;
mod pnfs;
mod qos;
mod reactors;
mod state;
mod transport;

pub use backend::*;
pub use exports::*;
pub use ha::*;
pub use observability::*;
pub use pnfs::*;
pub use qos::*;
pub use reactors::*;
pub use state::*;
pub use transport::*;

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
    #[serde(default)]
    pub audit: AuditConfig,
    /// Rate limits per client network and per export (`crate::qos`).
    #[serde(default, skip_serializing_if = "QosConfig::is_empty")]
    pub qos: QosConfig,
    /// The pNFS metadata server role (flexible files, RFC 8435); off by default.
    #[serde(default)]
    pub pnfs: PnfsConfig,
    /// The NFSv4.1 server identity in the store, served by one gateway at a time
    /// (docs/ha.md); off by default.
    #[serde(default)]
    pub ha: HaConfig,
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
        if self.backend.shared && self.backend.kind == BackendKind::Memory {
            return err(
                "backend.shared",
                "the memory backend lives in one process and cannot be shared; use kind = \"fs\" on a directory every gateway mounts, or \"s3\"",
            );
        }
        // `[backend.fs]` set for another kind would be a setting nobody applies: an
        // operator who asked for per-directory flushes on s3 must hear it does nothing.
        if self.backend.kind != BackendKind::Fs && self.backend.fs.flush != FlushMode::Auto {
            return err(
                "backend.fs.flush",
                "only used with kind = \"fs\"; remove [backend.fs] or set kind",
            );
        }
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
                "must be between 1000 and 100000000 (default 1000000, about 125 bytes plus the key each)",
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
        let exports = self.exports()?;
        self.qos.validate(&exports)?;
        self.stats.validate()?;
        self.audit.validate()?;
        self.nfs4.validate()?;
        self.pnfs.validate()?;
        self.ha.validate(&self.backend)?;
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
mod tests;
