//! `[tcp]` and `[rdma]`: listeners, connection and record limits, timeouts, RDMA credits.

use super::*;

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

pub(super) fn default_listen() -> String {
    "127.0.0.1:2049".into()
}
pub(super) fn default_max_record() -> usize {
    LARGE_BUF
}
pub(super) fn default_max_connections() -> usize {
    1024
}
pub(super) fn default_max_inflight() -> usize {
    64
}
pub(super) fn default_record_timeout() -> u64 {
    30
}
pub(super) fn default_send_timeout() -> u64 {
    30
}
pub(super) fn default_stall_reclaim() -> u64 {
    1000
}
pub(super) fn default_max_queued() -> usize {
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

pub(super) fn default_rdma_provider() -> RdmaProvider {
    RdmaProvider::Off
}
pub(super) fn default_rdma_listen() -> String {
    "127.0.0.1:20049".into()
}
pub(super) fn default_credits() -> u32 {
    128
}
pub(super) fn default_min_credits() -> u32 {
    8
}
pub(super) fn default_inline() -> usize {
    4096
}
pub(super) fn default_read_depth() -> u8 {
    16
}
pub(super) fn default_rdma_conns() -> usize {
    64
}
pub(super) fn default_rdma_read_timeout() -> u64 {
    30
}
pub(super) fn default_rdma_send_timeout() -> u64 {
    // As `tcp.send_timeout_s`: long enough for any live client's pause.
    30
}
pub(super) fn default_rdma_max_reply() -> usize {
    // 8, not TCP's 4: on soft RDMA a 4 MiB budget cost 1 MiB READs at QD32 ~20% CPU
    // per op (replies complete only when the client polls), 8 matched the unbounded
    // build (docs/tuning.md); one peer then holds at most 8 of the 48 large buffers.
    8
}
pub(super) fn default_true() -> bool {
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
