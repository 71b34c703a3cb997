//! The effective configuration as TOML (`gateway --print-config`): every key with the
//! value the gateway runs with, defaults filled in, export ids resolved, secrets
//! redacted. The output is itself a valid configuration file (the e2e tests feed it
//! back to `--check-config`), so an operator can start from it.

use crate::config::Config;
use toml::Value;

/// What a redacted secret prints as. Still a string, so the output parses and
/// validates; a gateway started from it would present this as a credential and fail
/// to authenticate, never leak the real one.
pub const REDACTED: &str = "<redacted>";

/// Whether a key holds a secret. By name rather than by a list of struct fields, so a
/// credential key added later (any `*secret*`, `*token*`, `*password*`, or an inline
/// handle key) is redacted without touching this module. `handle_key_file` is a path,
/// not the key itself, and stays visible.
fn is_secret(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    k.contains("secret") || k.contains("token") || k.contains("password") || k == "handle_key"
}

fn redact(v: &mut Value) {
    match v {
        Value::Table(t) => {
            for (k, v) in t.iter_mut() {
                if is_secret(k) && !matches!(v, Value::Table(_) | Value::Array(_)) {
                    *v = Value::String(REDACTED.into());
                } else {
                    redact(v);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(redact),
        _ => {}
    }
}

/// The effective configuration of a validated `cfg` as a TOML document.
pub fn render(cfg: &Config) -> Result<String, String> {
    let mut v = Value::try_from(cfg).map_err(|e| format!("cannot render: {e}"))?;
    // Each export's handle id, as derived from its path when the file leaves it out:
    // printing it pins it, which is what keeps handles valid if the path changes.
    let exports = cfg.exports().map_err(|e| e.to_string())?;
    if let Some(Value::Array(list)) = v.get_mut("exports") {
        for (x, e) in list.iter_mut().zip(&exports) {
            if let Value::Table(t) = x {
                t.insert("id".into(), Value::Integer(e.id.into()));
            }
        }
    }
    redact(&mut v);
    let body = toml::to_string(&v).map_err(|e| format!("cannot render: {e}"))?;
    Ok(format!(
        "# Effective configuration (gateway --print-config): defaults filled in, secrets \
         redacted.\n# Every key is described in README.md (\"Configuration reference\").\n\n{body}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S3: &str = "[backend]\nkind = \"s3\"\n[backend.s3]\nbucket = \"b\"\n\
        access_key_id = \"AKIDVISIBLE\"\nsecret_access_key = \"SECRETVALUE1\"\n\
        session_token = \"TOKENVALUE2\"\n[[exports]]\npath = \"/\"\n[[exports]]\npath = \"/a\"\n";

    #[test]
    fn defaults_filled_ids_pinned_and_round_trip() {
        let cfg = Config::parse("[[exports]]\npath = \"/data\"\n").unwrap();
        let out = render(&cfg).unwrap();
        let again = Config::parse(&out).expect("the output is a valid config");
        assert_eq!(again.tcp.listen, "127.0.0.1:2049");
        assert_eq!(again.engine.idle_spins, cfg.engine.idle_spins);
        assert_eq!(again.exports[0].id, Some(crate::config::export_id("/data")));
        assert!(out.contains("max_connections = 1024"), "{out}");
        assert_eq!(again.exports().unwrap(), cfg.exports().unwrap());
    }

    #[test]
    fn secrets_never_printed() {
        let cfg = Config::parse(S3).unwrap();
        let out = render(&cfg).unwrap();
        assert!(
            !out.contains("SECRETVALUE1") && !out.contains("TOKENVALUE2"),
            "{out}"
        );
        assert!(out.contains("AKIDVISIBLE"));
        assert_eq!(out.matches(REDACTED).count(), 2, "{out}");
        Config::parse(&out).expect("redacted output still validates");
    }

    #[test]
    fn secret_key_names() {
        for k in [
            "secret_access_key",
            "session_token",
            "handle_key",
            "admin_password",
        ] {
            assert!(is_secret(k), "{k}");
        }
        for k in ["access_key_id", "handle_key_file", "bucket", "endpoint"] {
            assert!(!is_secret(k), "{k}");
        }
    }
}
