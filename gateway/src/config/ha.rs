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
        Ok(())
    }
}
