//! `[engine]`, `[engine.pools]` and `[cache]`: reactors, their idle policy, buffer pools
//! and the reactor-side read cache.

use super::*;

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

pub(super) fn default_cores() -> Vec<usize> {
    vec![0]
}
pub(super) fn default_idle() -> Idle {
    Idle::Adaptive
}
pub(super) fn default_hugepages() -> Hugepages {
    Hugepages::Auto
}
pub(super) fn default_idle_spins() -> u32 {
    // Time (`idle_spin_us`) is the limit that matters; one empty poll at least.
    1
}
pub(super) fn default_idle_spin_us() -> u64 {
    DEFAULT_IDLE_SPIN_US
}
/// Default of `engine.idle_spin_us` (measured: docs/tuning.md, "Idle spin").
pub const DEFAULT_IDLE_SPIN_US: u64 = 200;
pub(super) fn default_idle_bulk_spin_us() -> u64 {
    0
}
pub(super) fn default_idle_sleep_us() -> u64 {
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

pub(super) fn default_small() -> usize {
    // 32 MiB per reactor: RPC-over-RDMA Receives come from this class (credits per
    // connection, within a 3/4 budget that keeps rdma.min_credits for every allowed
    // connection), so ~20 connections get the full 128 credits; TCP records and
    // small replies use it too.
    4096
}
pub(super) fn default_medium() -> usize {
    128
}
pub(super) fn default_large() -> usize {
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

/// The reactor-side read cache (see `gateway::cache`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CacheConfig {
    /// Page cache per reactor in MiB (0 = attributes only). Mapped once at start.
    #[serde(default = "default_cache_mib")]
    pub size_mib: usize,
}

pub(super) fn default_cache_mib() -> usize {
    256
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            size_mib: default_cache_mib(),
        }
    }
}
