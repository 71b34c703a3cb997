//! `[qos]`: rate limits per client network (`[[qos.client]]`) and per export
//! (`[[qos.export]]`), on operations/s and read and write bytes/s. Semantics and how
//! they are enforced: `crate::qos` and docs/operations.md "Limit".

use super::*;

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct QosConfig {
    /// Limits of the clients whose address a network matches (first match wins).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub client: Vec<ClientLimit>,
    /// Limits of every call on an export, whoever makes it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub export: Vec<ExportLimit>,
}

/// `[[qos.client]]`: `match` is an address or CIDR network ("10.0.0.0/24", "::1").
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClientLimit {
    #[serde(rename = "match")]
    pub matches: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ops_per_s: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_bytes_per_s: Option<ByteRate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_bytes_per_s: Option<ByteRate>,
}

/// `[[qos.export]]`: `path` is an exported path of `[[exports]]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ExportLimit {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ops_per_s: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_bytes_per_s: Option<ByteRate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_bytes_per_s: Option<ByteRate>,
}

impl ClientLimit {
    pub fn limits(&self) -> LimitConfig {
        LimitConfig {
            ops_per_s: self.ops_per_s,
            read_bytes_per_s: self.read_bytes_per_s.clone(),
            write_bytes_per_s: self.write_bytes_per_s.clone(),
        }
    }
}

impl ExportLimit {
    pub fn limits(&self) -> LimitConfig {
        LimitConfig {
            ops_per_s: self.ops_per_s,
            read_bytes_per_s: self.read_bytes_per_s.clone(),
            write_bytes_per_s: self.write_bytes_per_s.clone(),
        }
    }
}

/// The three rates of a rule; a rate left out is unlimited.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LimitConfig {
    pub ops_per_s: Option<u64>,
    pub read_bytes_per_s: Option<ByteRate>,
    pub write_bytes_per_s: Option<ByteRate>,
}

/// Bytes per second: a number, or a string with a unit ("100MiB", "1GB", "512KiB").
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum ByteRate {
    Bytes(u64),
    Text(String),
}

/// Largest rate accepted (ops or bytes per second): beyond it a limit limits nothing
/// a reactor can serve, and the bucket's arithmetic stays far from overflow.
pub const RATE_MAX: u64 = 1 << 40;

impl ByteRate {
    /// The rate in bytes per second, or why it does not parse.
    pub fn bytes(&self) -> Result<u64, String> {
        let s = match self {
            ByteRate::Bytes(n) => return Ok(*n),
            ByteRate::Text(s) => s.trim(),
        };
        let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (num, unit) = s.split_at(digits);
        let n: u64 = num
            .parse()
            .map_err(|_| format!("\"{s}\" is not a byte rate such as \"100MiB\""))?;
        let mult: u64 = match unit.trim() {
            "" | "B" => 1,
            "KiB" => 1 << 10,
            "MiB" => 1 << 20,
            "GiB" => 1 << 30,
            "KB" | "kB" => 1_000,
            "MB" => 1_000_000,
            "GB" => 1_000_000_000,
            u => {
                return Err(format!(
                    "\"{s}\": unknown unit \"{u}\" (B, KiB, MiB, GiB, KB, MB, GB)"
                ))
            }
        };
        n.checked_mul(mult)
            .ok_or_else(|| format!("\"{s}\" is too large"))
    }
}

/// A rule's rates, checked: `(ops, read bytes, write bytes)` per second.
pub type Rates = (Option<u64>, Option<u64>, Option<u64>);

impl LimitConfig {
    /// Checks every rate (`key` names the rule) and returns them.
    pub fn rates(&self, key: &str) -> Result<Rates, ConfigError> {
        let check = |k: &str, v: Option<u64>| -> Result<Option<u64>, ConfigError> {
            match v {
                Some(n) if n == 0 || n > RATE_MAX => err(
                    &format!("{key}.{k}"),
                    format!("must be 1..={RATE_MAX} per second (leave it out for no limit)"),
                ),
                v => Ok(v),
            }
        };
        let bytes = |k: &str, r: &Option<ByteRate>| -> Result<Option<u64>, ConfigError> {
            let v = match r {
                None => None,
                Some(r) => Some(r.bytes().or_else(|e| err(&format!("{key}.{k}"), e))?),
            };
            check(k, v)
        };
        let r = (
            check("ops_per_s", self.ops_per_s)?,
            bytes("read_bytes_per_s", &self.read_bytes_per_s)?,
            bytes("write_bytes_per_s", &self.write_bytes_per_s)?,
        );
        if r == (None, None, None) {
            return err(
                key,
                "sets no limit; give ops_per_s, read_bytes_per_s or write_bytes_per_s",
            );
        }
        Ok(r)
    }
}

/// Rules per section, at most: the metrics carry one series per rule (bounded), and
/// the reactor matches a call's address against the client rules in order.
pub const QOS_RULES_MAX: usize = 256;

impl QosConfig {
    /// Checks every rule against the validated exports.
    pub fn validate(&self, exports: &[Export]) -> Result<(), ConfigError> {
        if self.client.len() > QOS_RULES_MAX || self.export.len() > QOS_RULES_MAX {
            return err(
                "qos",
                format!("at most {QOS_RULES_MAX} client and {QOS_RULES_MAX} export rules"),
            );
        }
        for (i, c) in self.client.iter().enumerate() {
            let key = format!("qos.client[{i}]");
            Cidr::parse(&c.matches).or_else(|e| err(&format!("{key}.match"), e))?;
            if self.client[..i].iter().any(|o| o.matches == c.matches) {
                return err(
                    &format!("{key}.match"),
                    format!("\"{}\" has two rules; merge them", c.matches),
                );
            }
            c.limits().rates(&key)?;
        }
        for (i, x) in self.export.iter().enumerate() {
            let key = format!("qos.export[{i}]");
            let path = crate::export::normalize_path(x.path.as_bytes());
            let Some(path) = path.filter(|p| exports.iter().any(|e| &e.path == p)) else {
                return err(
                    &format!("{key}.path"),
                    format!("\"{}\" is not the path of an [[exports]] entry", x.path),
                );
            };
            let dup = self.export[..i].iter().any(|o| {
                crate::export::normalize_path(o.path.as_bytes()).as_deref() == Some(&path)
            });
            if dup {
                return err(
                    &format!("{key}.path"),
                    format!("\"{path}\" has two rules; merge them"),
                );
            }
            x.limits().rates(&key)?;
        }
        Ok(())
    }
}

impl QosConfig {
    /// No rule: the reactors' gate is off (`crate::qos::Gate::on`).
    pub fn is_empty(&self) -> bool {
        self.client.is_empty() && self.export.is_empty()
    }
}
