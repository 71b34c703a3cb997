//! `[log]` and `[stats]`: the log level and the Prometheus endpoint.

use super::*;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// tracing filter ("info", "gateway=debug,engine=info").
    #[serde(default = "default_level")]
    pub level: String,
}

pub(super) fn default_level() -> String {
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
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StatsConfig {
    /// address:port of the HTTP endpoint serving /metrics; empty (the default) = off.
    #[serde(default)]
    pub listen: String,
    /// Allow a non-loopback `listen` (the endpoint has no authentication).
    #[serde(default)]
    pub allow_remote: bool,
    /// Clients exposed by address (the most calls over the process life); the rest
    /// are summed under `client="other"`. Applies on reload.
    #[serde(default = "default_top")]
    pub top_clients: usize,
    /// Exports exposed by path; the rest under `export="other"`. Applies on reload.
    #[serde(default = "default_top")]
    pub top_exports: usize,
    /// Client addresses each reactor keeps counters for; more distinct addresses
    /// count under "other" (`nfsgw_client_table_full_total`). Applies at start.
    #[serde(default = "default_client_slots")]
    pub client_slots: usize,
    /// Count calls per client and per export at all (`stats::Tenants`); `false`
    /// leaves the reactor one predictable branch per call. Applies at start.
    #[serde(default = "default_per_client")]
    pub per_client: bool,
}

fn default_per_client() -> bool {
    true
}

fn default_top() -> usize {
    20
}
fn default_client_slots() -> usize {
    1024
}

impl Default for StatsConfig {
    fn default() -> Self {
        StatsConfig {
            listen: String::new(),
            allow_remote: false,
            top_clients: default_top(),
            top_exports: default_top(),
            client_slots: default_client_slots(),
            per_client: default_per_client(),
        }
    }
}

impl StatsConfig {
    /// The endpoint address, or `None` when stats are off (validated by `Config`).
    pub fn addr(&self) -> Option<SocketAddr> {
        self.listen.parse().ok()
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        self.validate_tenants()?;
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

impl StatsConfig {
    /// Bounds of the per-client and per-export series: each label value costs ~30
    /// series per scrape, and a slot ~250 bytes per reactor.
    fn validate_tenants(&self) -> Result<(), ConfigError> {
        if self.top_clients > 1000 {
            return err(
                "stats.top_clients",
                "must be 0 to 1000 (clients exposed by address; the rest are summed as \"other\")",
            );
        }
        if self.top_exports > 1000 {
            return err(
                "stats.top_exports",
                "must be 0 to 1000 (exports exposed by path; the rest are summed as \"other\")",
            );
        }
        if !(16..=65_535).contains(&self.client_slots) {
            return err(
                "stats.client_slots",
                "must be 16 to 65535 (client addresses counted per reactor)",
            );
        }
        Ok(())
    }
}

/// `[audit]`: the audit log (`crate::audit`; docs/operations.md "Audit log"). Off by
/// default; `enabled`, `path`, `max_mib` and `keep` apply on reload, `queue` at start.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AuditConfig {
    #[serde(default)]
    pub enabled: bool,
    /// The log file; empty (the default) = `audit.log` in `state.dir`.
    #[serde(default)]
    pub path: String,
    /// The file is rotated when it would grow past this many MiB.
    #[serde(default = "default_audit_max_mib")]
    pub max_mib: u64,
    /// Rotated files kept (`audit.log.1` … `audit.log.<keep>`); 0 = none.
    #[serde(default = "default_audit_keep")]
    pub keep: u32,
    /// Lines that may wait for the writer; beyond it lines are dropped and counted
    /// (`nfsgw_audit_dropped_total`), never waited for.
    #[serde(default = "default_audit_queue")]
    pub queue: usize,
}

fn default_audit_max_mib() -> u64 {
    64
}
fn default_audit_keep() -> u32 {
    4
}
fn default_audit_queue() -> usize {
    65_536
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            enabled: false,
            path: String::new(),
            max_mib: default_audit_max_mib(),
            keep: default_audit_keep(),
            queue: default_audit_queue(),
        }
    }
}

impl AuditConfig {
    /// The log file: `path`, or `audit.log` in `state_dir`.
    pub fn file(&self, state_dir: &std::path::Path) -> std::path::PathBuf {
        if self.path.is_empty() {
            state_dir.join("audit.log")
        } else {
            std::path::PathBuf::from(&self.path)
        }
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=1 << 20).contains(&self.max_mib) {
            return err(
                "audit.max_mib",
                "must be 1 to 1048576 (MiB per file before rotation)",
            );
        }
        if self.keep > 1000 {
            return err("audit.keep", "must be 0 to 1000 (rotated files kept)");
        }
        if !(16..=1 << 22).contains(&self.queue) {
            return err(
                "audit.queue",
                "must be 16 to 4194304 (lines waiting for the writer)",
            );
        }
        if self.path.ends_with('/') {
            return err(
                "audit.path",
                "names a file, not a directory (e.g. \"/var/log/nfsgw/audit.log\")",
            );
        }
        Ok(())
    }
}
