//! `[ha]`: the NFSv4.1 server identity this gateway serves, one gateway at a time, with
//! its recovery record and lease in the store (docs/ha.md). Off by default (no
//! `identity`): the record is the local `state.dir/nfs4-clients`. Read at start only.

use super::*;
use std::time::Duration;

/// What a gateway does with its identity at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HaRole {
    /// Take the identity at start (after one lease, when a lease is found), or refuse
    /// to start when another gateway holds it.
    Active,
    /// Serve NFSv3 and wait: take the identity when its holder stops renewing it.
    Standby,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HaConfig {
    /// The identity's name (1 to 64 of A-Z a-z 0-9 . _ -): every gateway that may
    /// serve it sets the same; unset = `[ha]` off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
    /// The identity lease, seconds (docs/ha.md "Lease and clocks"): a holder cut off
    /// from the store stops within 3/4 of it, a standby takes over after it.
    #[serde(default = "default_lease_s")]
    pub lease_s: u64,
    /// "active" or "standby".
    #[serde(default = "default_role")]
    pub role: HaRole,
    /// etcd v3 endpoints (`http://host:port`, one cluster): the identity's lease,
    /// record, layout key and probe go there instead of the store (docs/ha.md
    /// "Fencing: etcd"). Empty: the store's own conditional writes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub etcd: Vec<String>,
    /// The etcd key prefix; default `nfsgw/<hash of the bucket and prefix, or the fs
    /// root>/`, so two deployments on one etcd never share keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_prefix: Option<String>,
    /// The bound of one etcd call (connect, send, answer, over every endpoint it
    /// tries), milliseconds: below `lease_s / 4` ("Lease and clocks"). Default
    /// `lease_s / 5`, at most 2000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_timeout_ms: Option<u64>,
}

/// Most etcd endpoints (a cluster has 3, 5 or 7 members).
pub const HA_ETCD_MAX_ENDPOINTS: usize = 9;

/// Bounds of `ha.lease_s`: shorter leases renew more often than a store round trip
/// can be trusted to take; longer ones make a takeover wait minutes.
pub const HA_LEASE_MIN_S: u64 = 2;
pub const HA_LEASE_MAX_S: u64 = 300;

fn default_lease_s() -> u64 {
    10
}

fn default_role() -> HaRole {
    HaRole::Standby
}

impl Default for HaConfig {
    fn default() -> Self {
        HaConfig {
            identity: None,
            lease_s: default_lease_s(),
            role: default_role(),
            etcd: Vec::new(),
            etcd_prefix: None,
            etcd_timeout_ms: None,
        }
    }
}

impl HaConfig {
    /// The bound of one etcd call (`etcd_timeout_ms` or its default).
    pub fn etcd_timeout(&self) -> Duration {
        let ms = self
            .etcd_timeout_ms
            .unwrap_or_else(|| (self.lease_s * 1000 / 5).min(2000));
        Duration::from_millis(ms)
    }

    /// The identity when `[ha]` is on.
    pub fn on(&self) -> Option<&str> {
        self.identity.as_deref()
    }

    pub(super) fn validate(&self, backend: &BackendConfig) -> Result<(), ConfigError> {
        // Without ha.etcd these would be silently ignored: a fence the operator
        // believes is in etcd and is not.
        if self.etcd.is_empty() {
            if self.etcd_prefix.is_some() {
                return err(
                    "ha.etcd_prefix",
                    "needs ha.etcd (it is ignored without etcd)",
                );
            }
            if self.etcd_timeout_ms.is_some() {
                return err(
                    "ha.etcd_timeout_ms",
                    "needs ha.etcd (it is ignored without etcd)",
                );
            }
        }
        let Some(id) = &self.identity else {
            if !self.etcd.is_empty() {
                return err(
                    "ha.etcd",
                    "needs ha.identity: etcd holds the identity's lease and record",
                );
            }
            return Ok(());
        };
        let name_ok = (1..=64).contains(&id.len())
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
            && !id.starts_with('.');
        if !name_ok {
            return err(
                "ha.identity",
                format!("{id:?}: 1 to 64 of A-Z a-z 0-9 . _ - (not starting with '.')"),
            );
        }
        if !(HA_LEASE_MIN_S..=HA_LEASE_MAX_S).contains(&self.lease_s) {
            return err(
                "ha.lease_s",
                format!(
                    "{}: must be {HA_LEASE_MIN_S} to {HA_LEASE_MAX_S} seconds",
                    self.lease_s
                ),
            );
        }
        let shared = match backend.kind {
            BackendKind::S3 => true,
            BackendKind::Fs => backend.shared,
            BackendKind::Memory => false,
        };
        if !shared {
            return err(
                "ha.identity",
                "[ha] needs a store several gateways share: backend.kind = \"s3\", or \"fs\" with backend.shared = true",
            );
        }
        if let (BackendKind::S3, Some(s3)) = (backend.kind, &backend.s3) {
            self.check_bound(&s3_call_bound(s3))?;
        }
        self.validate_etcd()
    }

    /// `ha.etcd`, `ha.etcd_prefix`, `ha.etcd_timeout_ms`: URLs, count, and every etcd
    /// call bounded below `lease_s / 4` as every store call is.
    fn validate_etcd(&self) -> Result<(), ConfigError> {
        if self.etcd.is_empty() {
            return Ok(());
        }
        if self.etcd.len() > HA_ETCD_MAX_ENDPOINTS {
            return err(
                "ha.etcd",
                format!(
                    "{} endpoints: at most {HA_ETCD_MAX_ENDPOINTS}",
                    self.etcd.len()
                ),
            );
        }
        let mut seen = std::collections::HashSet::new();
        for u in &self.etcd {
            let (hostport, _) = crate::ha::etcd::parse_url(u).or_else(|e| err("ha.etcd", e))?;
            if !seen.insert(hostport.to_ascii_lowercase()) {
                return err("ha.etcd", format!("{u:?}: listed twice"));
            }
        }
        if let Some(p) = &self.etcd_prefix {
            if p.is_empty() || p.len() > 256 || p.bytes().any(|b| !b.is_ascii_graphic()) {
                return err(
                    "ha.etcd_prefix",
                    format!("{p:?}: 1 to 256 printable ASCII characters, no spaces"),
                );
            }
        }
        let ms = self.etcd_timeout().as_millis() as u64;
        if ms < 50 {
            return err("ha.etcd_timeout_ms", format!("{ms}: at least 50"));
        }
        self.check_bound(&CallBound {
            secs: Some(ms as f64 / 1000.0),
            why: format!("ha.etcd_timeout_ms = {ms}, the bound of one etcd call"),
            keys: "ha.etcd_timeout_ms",
        })
    }

    /// The rule of docs/ha.md "Lease and clocks": a store call that passed the fence
    /// before the deadline (`t + 3L/4`) must end before a standby may take over
    /// (`t + L`), so the longest one must be below `L/4`.
    fn check_bound(&self, bound: &CallBound) -> Result<(), ConfigError> {
        let quarter = self.lease_s as f64 / 4.0;
        match bound.secs {
            Some(b) if b < quarter => Ok(()),
            Some(b) => err(
                "ha.lease_s",
                format!(
                    "{} s: a store call may last {b} s ({}), which must be below ha.lease_s / 4 = {quarter} s, \
                     or a call the active started before it stopped could still change the store after \
                     a standby took over (docs/ha.md \"Lease and clocks\"): lower {} below {quarter} s, \
                     or raise ha.lease_s to {} or more",
                    self.lease_s,
                    bound.why,
                    bound.keys,
                    (b * 4.0).floor() as u64 + 1
                ),
            ),
            None => err(
                "ha.identity",
                format!(
                    "{}: nothing bounds how long a store call may last, so ha.lease_s / 4 cannot exceed it \
                     (docs/ha.md \"Lease and clocks\")",
                    bound.why
                ),
            ),
        }
    }

    /// `check_bound` for the `fs` backend, whose calls are system calls the gateway
    /// cannot time out: allowed on a local file system (the gateways sharing it run on
    /// its host: no network between them and the store to partition or hang), refused
    /// on a network one (`remote`: its kind, e.g. "nfs"), where a hung server holds a
    /// call, or the kernel's write-back of its data, for as long as it likes.
    pub fn check_fs_root(&self, root: &Path, remote: Option<&str>) -> Result<(), ConfigError> {
        match (self.identity.as_ref(), remote) {
            (Some(_), Some(kind)) => self.check_bound(&CallBound {
                secs: None,
                why: format!(
                    "backend.kind = \"fs\" with backend.root = {root:?} on {kind}, a network file system"
                ),
                keys: "",
            }),
            _ => Ok(()),
        }
    }
}

/// How long one store call may last, and from which settings.
struct CallBound {
    /// `None`: unbounded.
    secs: Option<f64>,
    why: String,
    /// The settings that set it.
    keys: &'static str,
}

/// An s3 call (`backend::s3::failover::Pool`): attempts of at most `timeout_s` each,
/// retried within `retry_budget_s`; a server-side copy gets at least one whole attempt
/// (`run_copy`). So the longest is the larger of the two.
fn s3_call_bound(s3: &S3Config) -> CallBound {
    let b = (s3.timeout_s as f64).max(s3.retry_budget_s);
    CallBound {
        secs: Some(b),
        why: format!(
            "the larger of backend.s3.timeout_s = {} and backend.s3.retry_budget_s = {}",
            s3.timeout_s, s3.retry_budget_s
        ),
        keys: "backend.s3.timeout_s and backend.s3.retry_budget_s",
    }
}
