//! Rate limits (QoS): per client network and per export, on operations/s and read and
//! write bytes/s, enforced on the reactors by delaying calls, never failing them
//! (docs/operations.md "Limit").
//!
//! - `bucket`: one rate as one atomic word (GCRA), charged by every reactor without a
//!   lock: a rule's rate is the gateway's, however its clients' connections are spread
//!   over the reactors (each reactor accepts on its own listener, so one client's
//!   connections may land on several);
//! - `Rules`: the buckets of a configuration, built once per start or SIGHUP reload and
//!   published through a `Table` (an `arc_swap` and an epoch, like the export table);
//! - `gate::Gate`: a reactor's side: which rules a call falls under (its `Cost`: the
//!   handle's export and the count of an NFSv3 or NFSv4.1 data call, from a peek at
//!   the record on arrival, made only while a rule exists and shared with the
//!   per-client statistics, `stats::Tenants::call_in`), whether it
//!   may start now, and the calls it holds back
//!   until their buckets refill, in arrival order. A held TCP call stays in flight on
//!   its connection and reserves its record's bytes in the connection's reply budget,
//!   so past `tcp.max_inflight` of them (or `tcp.max_queued_mib` of records) the
//!   reactor stops reading the socket and TCP flow control holds the client; a held RPC-over-RDMA call keeps
//!   its credit until it is answered, so the client's credits run out the same way
//!   (RFC 8166 §3.3.1).
//!
//! With no rule configured the reactor pays one predictable branch per call
//! (`Gate::on`) and one atomic load per pass (`Gate::refresh`).

mod bucket;
mod gate;
mod peek;
#[cfg(test)]
mod tests;

pub use bucket::{Bucket, BURST_NS};
pub use gate::Gate;
pub use peek::{peek, Cost};

use crate::config::{Cidr, Config, ConfigError, Rates};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// Nanoseconds since the first call in this process: the one clock every reactor's
/// buckets are charged on (an `Instant` read, only for calls a rule covers).
pub fn now_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let e = *EPOCH.get_or_init(Instant::now);
    u64::try_from(e.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Which kind of rule: the metric's `scope` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Client,
    Export,
}

impl Scope {
    pub fn name(self) -> &'static str {
        match self {
            Scope::Client => "client",
            Scope::Export => "export",
        }
    }
}

/// One configured rule: its buckets and what it held back.
///
/// Sharing: read by every reactor; the buckets and counters are atomics.
#[derive(Debug)]
pub struct Rule {
    pub scope: Scope,
    /// The metric's `name` label: the client rule's `match`, the export's path.
    pub name: String,
    ops: Option<Bucket>,
    read: Option<Bucket>,
    write: Option<Bucket>,
    /// Calls this rule made wait (`nfsgw_qos_delayed_total`).
    pub delayed: AtomicU64,
    /// Nanoseconds they waited, summed (`nfsgw_qos_delay_seconds_total`).
    pub delay_ns: AtomicU64,
}

impl Rule {
    fn new(scope: Scope, name: String, (ops, read, write): Rates) -> Rule {
        Rule {
            scope,
            name,
            ops: ops.map(Bucket::new),
            read: read.map(Bucket::new),
            write: write.map(Bucket::new),
            delayed: AtomicU64::new(0),
            delay_ns: AtomicU64::new(0),
        }
    }

    /// Nanoseconds `cost` must wait at `now` under this rule (0: it may start).
    #[inline]
    fn wait(&self, now: u64, cost: &Cost) -> u64 {
        let w = |b: &Option<Bucket>, units: u32| match b {
            Some(b) if units > 0 => b.wait(now),
            _ => 0,
        };
        w(&self.ops, 1)
            .max(w(&self.read, cost.read))
            .max(w(&self.write, cost.write))
    }

    /// Charges `cost` at `now` (the call starts).
    #[inline]
    fn charge(&self, now: u64, cost: &Cost) {
        if let Some(b) = &self.ops {
            b.charge(now, 1);
        }
        if let (Some(b), true) = (&self.read, cost.read > 0) {
            b.charge(now, u64::from(cost.read));
        }
        if let (Some(b), true) = (&self.write, cost.write > 0) {
            b.charge(now, u64::from(cost.write));
        }
    }
}

/// The rules of one configuration. Rule `i` of `all` is client rule `i` for
/// `i < clients.len()`, export rules follow.
#[derive(Debug, Default)]
pub struct Rules {
    pub all: Vec<Rule>,
    /// Client networks in configuration order (first match wins).
    clients: Vec<Cidr>,
    /// Per export rule: the export id, and the networks the export admits (a call
    /// is charged to an export only from a client the export admits: the id comes
    /// from an unauthenticated handle, and a forged one must not drain another
    /// export's bucket).
    exports: Vec<(u16, Vec<Cidr>)>,
}

/// The rules a call falls under: indexes into `Rules::all`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Matched {
    pub client: Option<u16>,
    pub export: Option<u16>,
}

impl Matched {
    pub fn any(self) -> bool {
        self.client.is_some() || self.export.is_some()
    }

    pub fn each(self) -> impl Iterator<Item = usize> {
        self.client.into_iter().chain(self.export).map(usize::from)
    }
}

impl Rules {
    /// Builds the rules of a validated configuration; counters of rules with the same
    /// scope and name in `old` carry over (a reload does not reset the metrics).
    pub fn build(cfg: &Config, old: Option<&Rules>) -> Result<Rules, ConfigError> {
        let exports = cfg.exports()?;
        let mut r = Rules::default();
        for (i, c) in cfg.qos.client.iter().enumerate() {
            let rates = c.limits().rates(&format!("qos.client[{i}]"))?;
            let net = Cidr::parse(&c.matches).map_err(ConfigError)?;
            r.clients.push(net);
            r.all
                .push(Rule::new(Scope::Client, c.matches.clone(), rates));
        }
        for (i, x) in cfg.qos.export.iter().enumerate() {
            let rates = x.limits().rates(&format!("qos.export[{i}]"))?;
            let path = crate::export::normalize_path(x.path.as_bytes());
            let Some(e) = exports.iter().find(|e| Some(&e.path) == path.as_ref()) else {
                return Err(ConfigError(format!(
                    "qos.export[{i}].path: \"{}\" is not exported",
                    x.path
                )));
            };
            r.exports.push((e.id, e.clients.clone()));
            r.all.push(Rule::new(Scope::Export, e.path.clone(), rates));
        }
        if let Some(old) = old {
            r.carry_counters(old);
        }
        Ok(r)
    }

    fn carry_counters(&self, old: &Rules) {
        for n in &self.all {
            if let Some(o) = old
                .all
                .iter()
                .find(|o| o.scope == n.scope && o.name == n.name)
            {
                let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
                n.delayed.store(load(&o.delayed), Ordering::Relaxed);
                n.delay_ns.store(load(&o.delay_ns), Ordering::Relaxed);
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    /// The rules a call from `peer` on export `export` (if its handle names one)
    /// falls under.
    pub fn matched(&self, peer: IpAddr, export: Option<u16>) -> Matched {
        let client = self
            .clients
            .iter()
            .position(|n| n.contains(peer))
            .map(|i| i as u16);
        let base = self.clients.len();
        let export = export.and_then(|id| {
            let i = self
                .exports
                .iter()
                .position(|(e, nets)| *e == id && nets.iter().any(|n| n.contains(peer)))?;
            Some((base + i) as u16)
        });
        Matched { client, export }
    }

    /// Nanoseconds a call under `m` must wait at `now` (0: it may start).
    pub fn wait(&self, m: Matched, now: u64, cost: &Cost) -> u64 {
        m.each()
            .map(|i| self.all[i].wait(now, cost))
            .max()
            .unwrap_or(0)
    }

    /// Charges a call under `m` that starts at `now`.
    pub fn charge(&self, m: Matched, now: u64, cost: &Cost) {
        for i in m.each() {
            self.all[i].charge(now, cost);
        }
    }
}

/// The rules every reactor reads, replaced whole by a SIGHUP reload.
///
/// Sharing: read-mostly, like `export::ExportTable`: `publish` swaps the rules in,
/// then bumps the epoch; each reactor checks the epoch once per pass (`Gate::refresh`).
pub struct Table {
    cur: arc_swap::ArcSwap<Rules>,
    epoch: AtomicU64,
}

impl Table {
    pub fn new(rules: Rules) -> Table {
        Table {
            cur: arc_swap::ArcSwap::from_pointee(rules),
            epoch: AtomicU64::new(0),
        }
    }

    /// The current rules (stats, reload).
    pub fn load(&self) -> Arc<Rules> {
        self.cur.load_full()
    }

    /// Replaces the rules: buckets start full, counters carry over by name.
    pub fn publish(&self, rules: Rules) {
        self.cur.store(Arc::new(rules));
        self.epoch.fetch_add(1, Ordering::Release);
    }

    fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }
}

/// The metrics: one series per rule and metric (docs/stats.md "QoS").
pub fn render(table: &Table, out: &mut String) {
    use std::fmt::Write;
    let rules = table.load();
    let series = |out: &mut String, name: &str, help: &str, v: &dyn Fn(&Rule) -> String| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} counter");
        for r in &rules.all {
            let _ = writeln!(
                out,
                "{name}{{scope=\"{}\",name=\"{}\"}} {}",
                r.scope.name(),
                r.name.replace('\\', "\\\\").replace('"', "\\\""),
                v(r)
            );
        }
    };
    series(
        out,
        "nfsgw_qos_delayed_total",
        "Calls a QoS rule ([[qos.client]], [[qos.export]]) held back until its rate allowed them.",
        &|r| r.delayed.load(Ordering::Relaxed).to_string(),
    );
    series(
        out,
        "nfsgw_qos_delay_seconds_total",
        "Seconds the calls a QoS rule held back waited, summed.",
        &|r| format!("{}", r.delay_ns.load(Ordering::Relaxed) as f64 / 1e9),
    );
}
