//! `[ha]`: the NFSv4.1 server identity this gateway serves, one gateway at a time, with
//! its recovery record and lease in the store (docs/ha.md). Off by default (no
//! `identity`): the record is the local `state.dir/nfs4-clients`. Read at start only.

use super::*;

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
}

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
        }
    }
}

impl HaConfig {
    /// The identity when `[ha]` is on.
    pub fn on(&self) -> Option<&str> {
        self.identity.as_deref()
    }

    pub(super) fn validate(&self, backend: &BackendConfig) -> Result<(), ConfigError> {
        let Some(id) = &self.identity else {
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
        Ok(())
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
