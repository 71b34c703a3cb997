//! SIGHUP reload (like `exportfs -r`): what differs between the running configuration
//! and the file re-read, what of it applies live, and the `reloaded: ...` log line.
//!
//! Applied live: the `[[exports]]` list (added, removed and changed exports, matched
//! by their stable id), `[stats]` (the metrics endpoint is re-bound), `log.level` and
//! `[qos]` (new rules, buckets full; connections and held calls stay).
//! Everything else sizes or binds something at start (reactors, listeners, pools,
//! backend, state): a change there is named in the log line and not applied.
//! Applying is `main`'s job; this module only compares, so it is unit-tested without
//! a server.

use crate::config::{Config, Export};
use toml::Value;

/// The top-level sections a reload applies.
const LIVE: [&str; 5] = ["exports", "stats", "log", "audit", "qos"];

/// The differences a reload found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The new export list, when it differs from the running one.
    pub exports: Option<Vec<Export>>,
    /// Human-readable export changes: "+/b", "-/a", "~/ (access, clients)".
    pub export_changes: Vec<String>,
    /// `[stats]` differs.
    pub stats: bool,
    /// `log.level` differs.
    pub log: bool,
    /// `[audit]` differs (its `queue` needs a restart: `crate::audit::configure`).
    pub audit: bool,
    /// `[qos]` differs, or the exports it names do (its rules are rebuilt).
    pub qos: bool,
    /// Keys that differ but need a restart ("tcp.listen", "engine.cores").
    pub restart: Vec<String>,
}

/// Compares the running configuration with a validated new one.
pub fn plan(running: &Config, new: &Config) -> Result<Plan, String> {
    let old_x = running.exports().map_err(|e| e.to_string())?;
    let new_x = new.exports().map_err(|e| e.to_string())?;
    let mut p = Plan {
        export_changes: export_changes(&old_x, &new_x),
        stats: running.stats.listen != new.stats.listen
            || running.stats.allow_remote != new.stats.allow_remote,
        log: running.log.level != new.log.level,
        audit: running.audit != new.audit,
        qos: running.qos != new.qos || (!new.qos.is_empty() && old_x != new_x),
        restart: restart_keys(running, new)?,
        ..Plan::default()
    };
    if old_x != new_x {
        p.exports = Some(new_x);
    }
    if queue_needs_restart(running, new) {
        p.restart.push("audit.queue".into());
    }
    // The client tables are sized at start (`stats::TenantTable::new`).
    if running.stats.client_slots != new.stats.client_slots {
        p.restart.push("stats.client_slots".into());
    }
    if running.stats.per_client != new.stats.per_client {
        p.restart.push("stats.per_client".into());
    }
    Ok(p)
}

/// The configuration running after a reload: the live sections from `new`, the rest
/// (not applied) still from `running`, so a later reload compares against what runs.
pub fn merged(running: &Config, new: &Config) -> Config {
    let mut c = running.clone();
    c.exports = new.exports.clone();
    c.stats = new.stats.clone();
    c.stats.client_slots = running.stats.client_slots;
    c.stats.per_client = running.stats.per_client;
    c.log = new.log.clone();
    c.audit = new.audit.clone();
    c.qos = new.qos.clone();
    if queue_needs_restart(running, new) {
        c.audit.queue = running.audit.queue;
    }
    c
}

/// The audit queue is sized once, when the log first runs (`crate::audit::configure`).
fn queue_needs_restart(running: &Config, new: &Config) -> bool {
    running.audit.enabled && running.audit.queue != new.audit.queue
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.exports.is_none()
            && !self.stats
            && !self.log
            && !self.audit
            && !self.qos
            && self.restart.is_empty()
    }

    /// The `reloaded: ...` log line.
    pub fn summary(&self, new: &Config) -> String {
        let mut parts = Vec::new();
        if !self.export_changes.is_empty() {
            parts.push(format!("exports {}", self.export_changes.join(" ")));
        }
        if self.stats {
            let l = &new.stats.listen;
            parts.push(if l.is_empty() {
                "stats endpoint off".to_string()
            } else {
                format!("stats.listen = \"{l}\"")
            });
        }
        if self.log {
            parts.push(format!("log.level = \"{}\"", new.log.level));
        }
        if self.audit {
            parts.push(if new.audit.enabled {
                format!(
                    "audit log on ({})",
                    new.audit.file(&new.state.dir).display()
                )
            } else {
                "audit log off".to_string()
            });
        }
        if self.qos {
            let q = &new.qos;
            parts.push(format!(
                "qos {} client and {} export rules",
                q.client.len(),
                q.export.len()
            ));
        }
        if parts.is_empty() {
            parts.push("nothing to apply".into());
        }
        let mut s = format!("reloaded: {}", parts.join("; "));
        if !self.restart.is_empty() {
            s.push_str(&format!(
                "; NOT applied (need a restart): {}",
                self.restart.join(", ")
            ));
        }
        s
    }
}

/// "+path" for an added export, "-path" for a removed one, "~path (fields)" for a
/// changed one. Exports are matched by id: the identity handles carry.
fn export_changes(old: &[Export], new: &[Export]) -> Vec<String> {
    let mut out = Vec::new();
    for o in old {
        if !new.iter().any(|n| n.id == o.id) {
            out.push(format!("-{}", o.path));
        }
    }
    for n in new {
        let Some(o) = old.iter().find(|o| o.id == n.id) else {
            out.push(format!("+{}", n.path));
            continue;
        };
        let mut f = Vec::new();
        if o.path != n.path {
            f.push("path");
        }
        if o.prefix != n.prefix {
            f.push("store_path");
        }
        if o.clients != n.clients {
            f.push("clients");
        }
        if o.access != n.access {
            f.push("access");
        }
        if o.squash != n.squash {
            f.push("squash");
        }
        if (o.anon_uid, o.anon_gid) != (n.anon_uid, n.anon_gid) {
            f.push("anon");
        }
        if !f.is_empty() {
            out.push(format!("~{} ({})", n.path, f.join(", ")));
        }
    }
    out
}

/// Keys outside the live sections whose values differ, as "section.key" (whole
/// nested tables such as `backend.s3` are named once).
fn restart_keys(running: &Config, new: &Config) -> Result<Vec<String>, String> {
    let a = Value::try_from(running).map_err(|e| e.to_string())?;
    let b = Value::try_from(new).map_err(|e| e.to_string())?;
    let (Value::Table(a), Value::Table(b)) = (a, b) else {
        return Err("configuration is not a table".into());
    };
    let empty = toml::map::Map::new();
    let mut out = Vec::new();
    let mut sections: Vec<&String> = a.keys().chain(b.keys()).collect();
    sections.sort();
    sections.dedup();
    for s in sections {
        if LIVE.contains(&s.as_str()) || a.get(s) == b.get(s) {
            continue;
        }
        match (a.get(s), b.get(s)) {
            (Some(Value::Table(x)), Some(Value::Table(y))) => {
                let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
                keys.sort();
                keys.dedup();
                for k in keys {
                    if x.get(k) != y.get(k) {
                        out.push(format!("{s}.{k}"));
                    }
                }
            }
            (x, y) => {
                let x = x.and_then(Value::as_table).unwrap_or(&empty);
                let y = y.and_then(Value::as_table).unwrap_or(&empty);
                if x != y {
                    out.push(s.clone());
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(extra: &str) -> Config {
        Config::parse(&format!(
            "[tcp]\nlisten = \"127.0.0.1:2049\"\n{extra}\n[[exports]]\npath = \"/\"\n\
             clients = [\"127.0.0.0/8\"]\naccess = \"rw\"\n"
        ))
        .unwrap()
    }

    #[test]
    fn identical_files_plan_nothing() {
        let p = plan(&cfg(""), &cfg("")).unwrap();
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(p.summary(&cfg("")), "reloaded: nothing to apply");
    }

    #[test]
    fn export_add_remove_change() {
        let old = cfg("[[exports]]\npath = \"/old\"\n");
        let new = Config::parse(
            "[[exports]]\npath = \"/\"\nclients = [\"10.0.0.0/8\"]\naccess = \"ro\"\n\
             [[exports]]\npath = \"/new\"\n",
        )
        .unwrap();
        let p = plan(&old, &new).unwrap();
        assert_eq!(p.export_changes, ["-/old", "~/ (clients, access)", "+/new"]);
        assert_eq!(p.exports.as_ref().unwrap().len(), 2);
        assert!(p.restart.is_empty(), "{:?}", p.restart);
        let line = p.summary(&new);
        assert!(line.starts_with("reloaded: exports -/old ~/ (clients, access) +/new"));
    }

    #[test]
    fn restart_only_keys_named_not_applied() {
        let old = cfg("[stats]\nlisten = \"127.0.0.1:9108\"\n");
        let new = Config::parse(
            "[tcp]\nlisten = \"127.0.0.1:2050\"\n[pools]\nlarge = 8\n[log]\nlevel = \"debug\"\n\
             [[exports]]\npath = \"/\"\nclients = [\"127.0.0.0/8\"]\naccess = \"rw\"\n",
        )
        .unwrap();
        let p = plan(&old, &new).unwrap();
        assert_eq!(p.restart, ["pools.large", "tcp.listen"]);
        assert!(p.stats && p.log && p.exports.is_none());
        let line = p.summary(&new);
        assert!(
            line.contains("stats endpoint off")
                && line.contains("log.level = \"debug\"")
                && line.ends_with("NOT applied (need a restart): pools.large, tcp.listen"),
            "{line}"
        );
        // What runs afterwards keeps the old listen address: a second identical reload
        // still reports it, and applies nothing new.
        let running = merged(&old, &new);
        assert_eq!(running.tcp.listen, "127.0.0.1:2049");
        let again = plan(&running, &new).unwrap();
        assert!(again.exports.is_none() && !again.stats && !again.log);
        assert_eq!(again.restart, ["pools.large", "tcp.listen"]);
    }

    /// `top_clients`/`top_exports` apply live (`stats::set_top`); the client tables
    /// are sized at start, so `client_slots` waits for a restart and is not merged.
    #[test]
    fn client_slots_need_a_restart_top_n_does_not() {
        let old = cfg("");
        let new = cfg("[stats]\ntop_clients = 5\nclient_slots = 64\n");
        let p = plan(&old, &new).unwrap();
        assert_eq!(p.restart, ["stats.client_slots"]);
        let running = merged(&old, &new);
        assert_eq!(running.stats.top_clients, 5);
        assert_eq!(running.stats.client_slots, 1024);
    }

    #[test]
    fn qos_change_is_applied_live() {
        let old = cfg("");
        let new = cfg("[[qos.client]]\nmatch = \"127.0.0.2\"\nops_per_s = 100\n");
        let p = plan(&old, &new).unwrap();
        assert!(p.qos && p.restart.is_empty(), "{p:?}");
        assert_eq!(p.summary(&new), "reloaded: qos 1 client and 0 export rules");
        let running = merged(&old, &new);
        assert_eq!(running.qos, new.qos);
        assert!(plan(&running, &new).unwrap().is_empty());
    }

    #[test]
    fn nested_backend_table_named_once() {
        let old = cfg("[backend]\nkind = \"s3\"\n[backend.s3]\nbucket = \"a\"\n");
        let new = cfg("[backend]\nkind = \"s3\"\n[backend.s3]\nbucket = \"b\"\n");
        assert_eq!(plan(&old, &new).unwrap().restart, ["backend.s3"]);
    }
}
