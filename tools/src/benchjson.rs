//! The figures a sweep keeps from `bench --json`. Two shapes are understood: the
//! documented `nfsgw-bench/1` schema (`total.ops_per_s`, `total.mib_per_s`,
//! `total.latency_us.p99`, `total.errors`) and the older flat object (`ops_per_s`,
//! `mib_per_s`, `p99_us`, `errors`).

use anyhow::{bail, Context};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figures {
    pub ops_per_s: f64,
    pub mib_per_s: f64,
    pub p99_us: f64,
    pub errors: u64,
}

/// Extracts the figures from bench's standard output (the JSON object in it).
pub fn parse(stdout: &str) -> anyhow::Result<Figures> {
    let (Some(a), Some(b)) = (stdout.find('{'), stdout.rfind('}')) else {
        bail!("no JSON object in bench output");
    };
    if b < a {
        bail!("no JSON object in bench output");
    }
    let v: Value = serde_json::from_str(&stdout[a..=b]).context("bench output is not JSON")?;
    let num = |v: Option<&Value>, what: &str| -> anyhow::Result<f64> {
        v.and_then(Value::as_f64)
            .with_context(|| format!("bench JSON has no number {what}"))
    };
    if let Some(t) = v.get("total") {
        Ok(Figures {
            ops_per_s: num(t.get("ops_per_s"), "total.ops_per_s")?,
            mib_per_s: num(t.get("mib_per_s"), "total.mib_per_s").unwrap_or(0.0),
            p99_us: num(
                t.get("latency_us").and_then(|l| l.get("p99")),
                "total.latency_us.p99",
            )?,
            errors: num(t.get("errors"), "total.errors")? as u64,
        })
    } else {
        Ok(Figures {
            ops_per_s: num(v.get("ops_per_s"), "ops_per_s")?,
            mib_per_s: num(v.get("mib_per_s"), "mib_per_s").unwrap_or(0.0),
            p99_us: num(v.get("p99_us"), "p99_us")?,
            errors: num(v.get("errors"), "errors")? as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_shape() {
        let f = parse(
            "{\"workload\":\"Getattr\",\"ops\":500,\"errors\":0,\"ops_per_s\":9000.5,\"mib_per_s\":0.00,\"p50_us\":90.0,\"p99_us\":210.0}\n",
        )
        .unwrap();
        assert_eq!(f.ops_per_s, 9000.5);
        assert_eq!(f.p99_us, 210.0);
        assert_eq!(f.errors, 0);
    }

    #[test]
    fn schema_v1_shape() {
        let f = parse(
            r#"{"schema":"nfsgw-bench/1","workload":{"kind":"randread"},
                "total":{"ops":100,"errors":2,"bytes":409600,"ops_per_s":50.0,"mib_per_s":0.2,
                "verified_bytes":0,"verify_failures":0,
                "latency_us":{"p50":10,"p90":20,"p99":30.5,"p99_9":40,"max":50,"mean":12}},
                "per_op":{"read":{}}}"#,
        )
        .unwrap();
        assert_eq!(
            f,
            Figures {
                ops_per_s: 50.0,
                mib_per_s: 0.2,
                p99_us: 30.5,
                errors: 2
            }
        );
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(parse("").is_err());
        assert!(parse("} nope {").is_err());
        assert!(parse("{\"x\":1}").is_err());
    }
}
