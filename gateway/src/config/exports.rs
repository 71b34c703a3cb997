//! `[[exports]]`: paths, client networks (`Cidr`), access and squash, and the validated
//! `Export` view.

use super::*;

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

pub(super) fn default_clients() -> Vec<String> {
    vec!["127.0.0.0/8".into(), "::1/128".into()]
}
pub(super) fn default_access() -> Access {
    Access::Rw
}
pub(super) fn default_squash() -> Squash {
    Squash::Root
}
pub(super) fn default_anon() -> u32 {
    65534
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
