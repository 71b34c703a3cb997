//! `[state]` and `[nfs4]`: the state directory, handle table, leases, sessions and
//! reply-cache budgets.

use super::*;

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

pub(super) fn default_handle_cache_entries() -> usize {
    DEFAULT_HANDLE_CACHE_ENTRIES
}

pub(super) fn default_state_dir() -> PathBuf {
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
    /// The longest the grace period runs while reclaims keep arriving, counted from
    /// the start (0 = twice the grace time, as knfsd).
    #[serde(default)]
    pub grace_max_s: u64,
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
    /// The highest NFSv4 minor version served: 2 (NFSv4.2, RFC 7862, what a Linux
    /// client asks for first) or 1 (clients then settle for NFSv4.1).
    #[serde(default = "default_max_minor_version")]
    pub max_minor_version: u32,
    /// Grant write delegations to OPENs for writing (RFC 8881 §10.4; another
    /// client's or NFSv3's GETATTR asks the holder, CB_GETATTR; their other accesses,
    /// reads included, recall it: docs/delegations.md).
    #[serde(default = "default_write_delegations")]
    pub write_delegations: bool,
}

/// 60 s, NFS-Ganesha's default (knfsd's is 90 s): a delegation whose recall is not
/// answered is revoked one lease after the recall, and a client that loses a
/// fore-channel slot per call still NFS4ERR_DELAY after ten 1 s retries (pynfs DELEG8,
/// 8 slots ≈ 80 s) must see it revoked first (docs/delegations.md "Default"). The
/// default grace period after a restart or takeover is one lease too.
pub(super) fn default_lease_time_s() -> u64 {
    60
}
pub(super) fn default_max_clients() -> usize {
    4096
}
pub(super) fn default_max_sessions() -> usize {
    4096
}
pub(super) fn default_reply_cache_mib() -> u64 {
    128
}
pub(super) fn default_courtesy_s() -> u64 {
    86_400
}
pub(super) fn default_max_sessions_per_client() -> usize {
    16
}
pub(super) fn default_max_minor_version() -> u32 {
    2
}
/// On by default (issue 31: write delegations at the defaults users run): the
/// Linux 4.1/4.2 clients' recalls and CB_GETATTRs are answered over TCP and RDMA
/// (docs/delegations.md "Default"; a client that wants none says so in OPEN).
pub(super) fn default_write_delegations() -> bool {
    true
}
pub(super) fn default_max_cached_reply() -> u32 {
    8192
}

impl Default for Nfs4Config {
    fn default() -> Self {
        Nfs4Config {
            lease_time_s: default_lease_time_s(),
            grace_time_s: 0,
            grace_max_s: 0,
            max_clients: default_max_clients(),
            max_sessions: default_max_sessions(),
            max_sessions_per_client: default_max_sessions_per_client(),
            max_cached_reply: default_max_cached_reply(),
            reply_cache_mib: default_reply_cache_mib(),
            courtesy_s: default_courtesy_s(),
            max_minor_version: default_max_minor_version(),
            write_delegations: default_write_delegations(),
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
            grace_max: (self.grace_max_s != 0)
                .then(|| std::time::Duration::from_secs(self.grace_max_s)),
            max_clients: self.max_clients,
            max_sessions: self.max_sessions,
            max_sessions_per_client: self.max_sessions_per_client,
            max_cached_reply: self.max_cached_reply,
            reply_cache_bytes: self.reply_cache_mib << 20,
            courtesy: std::time::Duration::from_secs(self.courtesy_s),
            // Within a lease: a client that renews through one session still gives
            // back the reply cache of the sessions it left idle.
            session_idle: crate::state::clients::SESSION_IDLE.min(lease),
            max_minor: self.max_minor_version,
        }
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let bad = |k: &str, why: &str| Err(ConfigError(format!("nfs4.{k}: {why}")));
        if !(10..=3600).contains(&self.lease_time_s) {
            return bad("lease_time_s", "must be 10..=3600 seconds");
        }
        if self.grace_time_s > 3600 {
            return bad("grace_time_s", "must be at most 3600 seconds");
        }
        let grace = match self.grace_time_s {
            0 => self.lease_time_s,
            g => g,
        };
        if self.grace_max_s != 0 && !(grace..=7200).contains(&self.grace_max_s) {
            return bad(
                "grace_max_s",
                "must be 0 (twice the grace time) or from the grace time to 7200 seconds",
            );
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
        if !(1..=2).contains(&self.max_minor_version) {
            return bad("max_minor_version", "must be 1 (NFSv4.1) or 2 (NFSv4.2)");
        }
        if self.courtesy_s > 30 * 86_400 {
            return bad("courtesy_s", "must be at most 2592000 seconds (30 days)");
        }
        Ok(())
    }
}
