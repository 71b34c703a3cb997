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

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
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
