//! Prometheus text exposition format 0.0.4: every metric of every reactor, rendered
//! on demand by the endpoint thread. Allocation here is fine: this never runs on a
//! reactor. Metric reference: docs/stats.md.

use super::counters::{slot_labels, ReactorStats, SLOTS, TRANSPORTS};
use super::histogram::{upper_us, BUCKETS};
use engine::mem::Pools;
use engine::reactor::Counters;
use std::fmt::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The Content-Type of this format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What one reactor exposes.
#[derive(Clone)]
pub struct ReactorSource {
    /// Written by the engine's run loop: polls, busy polls, sleeps, backpressure.
    pub counters: Arc<Counters>,
    pub stats: Arc<ReactorStats>,
    /// Buffer pools, read for occupancy (their free lists are shared with workers).
    pub pools: Pools,
    /// Per-client and per-export counters (`stats::tenants`).
    pub tenants: Arc<super::tenants::TenantTable>,
}

/// Everything the endpoint reads.
#[derive(Clone)]
pub struct Source {
    pub reactors: Vec<ReactorSource>,
    /// `rdma.credits`: credits granted per RDMA connection.
    pub rdma_credits: u32,
    /// NFSv4.1 callbacks and delegations (gateway-wide).
    pub callbacks: Arc<super::callbacks::CallbackStats>,
    /// NFSv4.1 clients, sessions, opens and locks, read at each scrape.
    pub nfs4: Option<super::nfs4_state::Reader>,
    /// QoS rules and what they held back (`crate::qos::render`).
    pub qos: Option<Arc<crate::qos::Table>>,
    /// The export table, for the `export` label's paths (`None`: ids are shown).
    pub exports: Option<Arc<crate::export::ExportTable>>,
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// One sample line per reactor of a per-reactor metric.
fn per_reactor(
    out: &mut String,
    src: &Source,
    name: &str,
    kind: &str,
    help: &str,
    value: impl Fn(&ReactorSource) -> u64,
) {
    header(out, name, kind, help);
    for (i, r) in src.reactors.iter().enumerate() {
        let _ = writeln!(out, "{name}{{reactor=\"{i}\"}} {}", value(r));
    }
}

/// Seconds as Prometheus prints floats (shortest round-trip form).
fn seconds_from_us(us: u64) -> String {
    format!("{}", us as f64 / 1e6)
}

/// Renders every metric.
pub fn render(src: &Source, out: &mut String) {
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    header(
        out,
        "nfsgw_reactors",
        "gauge",
        "Reactors running (one per engine.cores entry).",
    );
    let _ = writeln!(out, "nfsgw_reactors {}", src.reactors.len());
    header(
        out,
        "nfsgw_requests_panicked_total",
        "counter",
        "Requests whose handling panicked; each cost its call (SYSTEM_ERR) or its connection.",
    );
    let _ = writeln!(
        out,
        "nfsgw_requests_panicked_total {}",
        crate::supervise::requests_panicked()
    );
    header(
        out,
        "nfsgw_s3_endpoint_failovers_total",
        "counter",
        "Switches of the s3 backend from a failed endpoint to another of the cluster.",
    );
    let _ = writeln!(
        out,
        "nfsgw_s3_endpoint_failovers_total {}",
        crate::backend::s3::endpoint_failovers()
    );
    header(
        out,
        "nfsgw_s3_uploads_lost_total",
        "counter",
        "Multipart uploads the store lost (NoSuchUpload) with uncommitted writes: dropped, write verifier changed, clients resend.",
    );
    let _ = writeln!(
        out,
        "nfsgw_s3_uploads_lost_total {}",
        crate::backend::s3::uploads_lost()
    );
    render_s3_requests(out);
    crate::ha::stats::render(out);
    per_reactor(
        out,
        src,
        "nfsgw_reactor_polls_total",
        "counter",
        "Poll passes over every transport and ring the reactor owns.",
        |r| load(&r.counters.polls),
    );
    per_reactor(
        out,
        src,
        "nfsgw_reactor_busy_polls_total",
        "counter",
        "Poll passes that found work (busy ratio = busy_polls / polls).",
        |r| load(&r.counters.busy_polls),
    );
    per_reactor(
        out,
        src,
        "nfsgw_reactor_sleeps_total",
        "counter",
        "Adaptive-idle waits (engine.idle = \"adaptive\").",
        |r| load(&r.counters.sleeps),
    );
    per_reactor(
        out,
        src,
        "nfsgw_backpressure_total",
        "counter",
        "Calls held back on the reactor: job ring full or no buffer for an inline reply.",
        |r| load(&r.counters.parked),
    );
    per_reactor(
        out,
        src,
        "nfsgw_parked_requests",
        "gauge",
        "Calls handed to backend workers and not yet answered.",
        |r| r.stats.at_workers(),
    );
    per_reactor(
        out,
        src,
        "nfsgw_tcp_connections",
        "gauge",
        "Open TCP connections.",
        |r| r.stats.tcp_connections(),
    );
    per_reactor(
        out,
        src,
        "nfsgw_rdma_connections",
        "gauge",
        "Open RPC-over-RDMA connections.",
        |r| r.stats.rdma_connections(),
    );
    per_reactor(
        out,
        src,
        "nfsgw_rdma_credits_in_use",
        "gauge",
        "RPC-over-RDMA calls received and not yet answered (each holds one credit).",
        |r| r.stats.rdma_in_progress(),
    );
    per_reactor(
        out,
        src,
        "nfsgw_rdma_credits_granted",
        "gauge",
        "Credits granted to RDMA clients: rdma.credits per open connection.",
        |r| r.stats.rdma_connections() * src.rdma_credits as u64,
    );

    for (name, help, get) in [
        (
            "nfsgw_bytes_in_total",
            "Bytes of RPC calls received (record bodies, RDMA chunks pulled included).",
            ReactorStats::bytes_in_total as fn(&ReactorStats, _) -> u64,
        ),
        (
            "nfsgw_bytes_out_total",
            "Bytes of RPC replies sent (RDMA chunk data included).",
            ReactorStats::bytes_out_total,
        ),
    ] {
        header(out, name, "counter", help);
        for (i, r) in src.reactors.iter().enumerate() {
            for (t, tn) in TRANSPORTS {
                let _ = writeln!(
                    out,
                    "{name}{{reactor=\"{i}\",transport=\"{tn}\"}} {}",
                    get(&r.stats, t)
                );
            }
        }
    }

    header(
        out,
        "nfsgw_ops_total",
        "counter",
        "RPC calls received, by program and procedure (other = anything else).",
    );
    for (i, r) in src.reactors.iter().enumerate() {
        for (t, tn) in TRANSPORTS {
            for slot in 0..SLOTS {
                let (prog, proc_) = slot_labels(slot);
                let _ = writeln!(
                    out,
                    "nfsgw_ops_total{{reactor=\"{i}\",transport=\"{tn}\",prog=\"{prog}\",proc=\"{proc_}\"}} {}",
                    r.stats.ops(t, slot)
                );
            }
        }
    }

    // Only procedures that were called get histogram series (25 lines each).
    header(
        out,
        "nfsgw_request_duration_seconds",
        "histogram",
        "Time from a call's arrival on the reactor to its reply being handed to the transport.",
    );
    for (i, r) in src.reactors.iter().enumerate() {
        for (t, tn) in TRANSPORTS {
            for slot in 0..SLOTS {
                let (counts, sum_ns) = r.stats.latency(t, slot).read();
                let count: u64 = counts.iter().sum();
                if count == 0 {
                    continue;
                }
                let (prog, proc_) = slot_labels(slot);
                let labels =
                    format!("reactor=\"{i}\",transport=\"{tn}\",prog=\"{prog}\",proc=\"{proc_}\"");
                let mut cum = 0;
                for (b, c) in counts.iter().enumerate().take(BUCKETS) {
                    cum += c;
                    let le = upper_us(b).map_or("+Inf".to_string(), seconds_from_us);
                    let _ = writeln!(
                        out,
                        "nfsgw_request_duration_seconds_bucket{{{labels},le=\"{le}\"}} {cum}"
                    );
                }
                let _ = writeln!(
                    out,
                    "nfsgw_request_duration_seconds_sum{{{labels}}} {}",
                    sum_ns as f64 / 1e9
                );
                let _ = writeln!(
                    out,
                    "nfsgw_request_duration_seconds_count{{{labels}}} {count}"
                );
            }
        }
    }

    header(
        out,
        "nfsgw_guard_events_total",
        "counter",
        "Protective events: refusals, timeouts and reclaims that keep one client from exhausting shared resources (reason label).",
    );
    for (i, r) in src.reactors.iter().enumerate() {
        for (k, (transport, reason, _)) in super::counters::GUARDS.iter().enumerate() {
            let _ = writeln!(
                out,
                "nfsgw_guard_events_total{{reactor=\"{i}\",transport=\"{transport}\",reason=\"{reason}\"}} {}",
                r.stats.guard(k)
            );
        }
    }

    for (name, kind, help, pick) in [
        (
            "nfsgw_cache_hits_total",
            "counter",
            "GETATTR and READ calls (NFSv3, and NFSv4.1 SEQUENCE+PUTFH+GETATTR|READ) answered from the reactor's read cache.",
            0,
        ),
        (
            "nfsgw_cache_misses_total",
            "counter",
            "Lookups of the reactor's read cache that found nothing current (the call went to a worker or the ring).",
            1,
        ),
        (
            "nfsgw_cache_pages",
            "gauge",
            "4 KiB pages the reactor's read cache holds.",
            2,
        ),
    ] {
        header(out, name, kind, help);
        for (i, r) in src.reactors.iter().enumerate() {
            let (h, m, p) = r.stats.cache();
            let v = [h, m, p][pick];
            let _ = writeln!(out, "{name}{{reactor=\"{i}\"}} {v}");
        }
    }

    render_callbacks(&src.callbacks, out);
    super::nfs4_state::render(src.nfs4.as_ref(), out);
    super::status::render(out);
    super::backend_ops::render(out);
    if let Some(q) = &src.qos {
        crate::qos::render(q, out);
    }
    super::tenants_expo::render(src, out);
    header(
        out,
        "nfsgw_worker_data_jobs_total",
        "counter",
        "READ, WRITE and COMMIT calls run by backend workers (with backend.io = \"uring\" the reactors read file data themselves).",
    );
    let _ = writeln!(
        out,
        "nfsgw_worker_data_jobs_total {}",
        super::data_jobs::total()
    );
    header(
        out,
        "nfsgw_uring_revalidations_total",
        "counter",
        "Expired file-table entries revalidated by a statx on a reactor's io_uring: unchanged (the call stayed on the reactor) or changed (it went to a worker).",
    );
    let (kept, changed) = super::revalidations::totals();
    let _ = writeln!(
        out,
        "nfsgw_uring_revalidations_total{{result=\"unchanged\"}} {kept}"
    );
    let _ = writeln!(
        out,
        "nfsgw_uring_revalidations_total{{result=\"changed\"}} {changed}"
    );
    header(
        out,
        "nfsgw_fs_flushes_total",
        "counter",
        "Device flushes on the fs backend's namespace path: file (a new file before its name), dir (a directory after its entries changed), log (one force of the file system's log covering changes in every directory and stable writes' data; backend.fs.flush), data (a stable WRITE's or COMMIT's own fsync through a worker, where there is no log).",
    );
    for (i, kind) in super::fs_flushes::KINDS.iter().enumerate() {
        let _ = writeln!(
            out,
            "nfsgw_fs_flushes_total{{kind=\"{kind}\"}} {}",
            super::fs_flushes::total(i)
        );
    }
    header(
        out,
        "nfsgw_uring_failures_total",
        "counter",
        "Storage operations on a reactor's io_uring that failed or came back short, by operation; each call went to a worker, which redid it and answered.",
    );
    for (i, op) in super::uring_failures::OPS.iter().enumerate() {
        let _ = writeln!(
            out,
            "nfsgw_uring_failures_total{{op=\"{op}\"}} {}",
            super::uring_failures::total(i)
        );
    }

    let (lines, dropped) = crate::audit::totals();
    header(
        out,
        "nfsgw_audit_lines_total",
        "counter",
        "Lines written to the audit log ([audit]; 0 while it is off).",
    );
    let _ = writeln!(out, "nfsgw_audit_lines_total {lines}");
    header(
        out,
        "nfsgw_audit_dropped_total",
        "counter",
        "Audit lines dropped because the queue was full or the file could not be written (each is also logged, rate-limited).",
    );
    let _ = writeln!(out, "nfsgw_audit_dropped_total {dropped}");

    header(
        out,
        "nfsgw_tcp_spliced_bytes_total",
        "counter",
        "READ reply data sent over TCP by splice from the page cache (no copy; backend.splice).",
    );
    let _ = writeln!(
        out,
        "nfsgw_tcp_spliced_bytes_total {}",
        crate::uring::pipes::spliced_bytes()
    );
    header(
        out,
        "nfsgw_tcp_pipes_in_use",
        "gauge",
        "Splice pipes holding a READ reply's data (being filled or queued for a socket).",
    );
    let _ = writeln!(
        out,
        "nfsgw_tcp_pipes_in_use {}",
        crate::uring::pipes::in_use()
    );

    let pools: Vec<_> = src.reactors.iter().map(|r| r.pools.stats()).collect();
    for (name, kind, help, get) in [
        (
            "nfsgw_pool_buffers_in_use",
            "gauge",
            "Pool buffers handed out, by size class (bytes).",
            (|c: &engine::mem::ClassStats| (c.count - c.free) as u64) as fn(&_) -> u64,
        ),
        (
            "nfsgw_pool_buffers",
            "gauge",
            "Pool buffers configured, by size class (pools.small/medium/large).",
            |c| c.count as u64,
        ),
        (
            "nfsgw_pool_exhausted_total",
            "counter",
            "Allocations that found the size class empty.",
            |c| c.exhausted,
        ),
    ] {
        header(out, name, kind, help);
        for (i, classes) in pools.iter().enumerate() {
            for c in classes {
                let _ = writeln!(
                    out,
                    "{name}{{reactor=\"{i}\",size=\"{}\"}} {}",
                    c.size,
                    get(c)
                );
            }
        }
    }
}

/// The gateway-wide NFSv4.1 callback and delegation metrics.
/// The s3 backend's store requests by kind (`backend::s3::requests`).
fn render_s3_requests(out: &mut String) {
    use crate::backend::s3::requests::{sent, KINDS};
    header(
        out,
        "nfsgw_s3_requests_total",
        "counter",
        "Requests the s3 backend sent to the store, by kind; every attempt, retries and failovers included.",
    );
    for k in KINDS {
        let _ = writeln!(
            out,
            "nfsgw_s3_requests_total{{kind=\"{}\"}} {}",
            k.name(),
            sent(k)
        );
    }
}

fn render_callbacks(cb: &super::callbacks::CallbackStats, out: &mut String) {
    use super::callbacks::{CALLBACK_RESULTS, RECALL_RESULTS, RECALL_TRANSPORTS};
    header(
        out,
        "nfsgw_callbacks_total",
        "counter",
        "NFSv4.1 callback RPCs (CB_NULL, CB_COMPOUND) by back-channel transport and outcome; unmatched: replies whose XID matched no outstanding callback (dropped); failed: RDMA_ERROR or connection lost while outstanding.",
    );
    for (t, tname) in TRANSPORTS {
        for (r, name) in CALLBACK_RESULTS {
            let _ = writeln!(
                out,
                "nfsgw_callbacks_total{{transport=\"{tname}\",result=\"{name}\"}} {}",
                cb.callbacks_at(t as usize, r)
            );
        }
    }
    header(
        out,
        "nfsgw_delegation_recalls_total",
        "counter",
        "Delegation recalls by the transport their CB_RECALL went over (none: never sent) and outcome: sent (first CB_RECALL sent), answered (CB_RECALL replied NFS4_OK), returned (DELEGRETURN while recalled), revoked (not returned within the lease).",
    );
    for (t, tname) in RECALL_TRANSPORTS.iter().enumerate() {
        for (r, name) in RECALL_RESULTS {
            let _ = writeln!(
                out,
                "nfsgw_delegation_recalls_total{{transport=\"{tname}\",result=\"{name}\"}} {}",
                cb.recalls_at(t, r)
            );
        }
    }
    header(
        out,
        "nfsgw_delegations",
        "gauge",
        "NFSv4.1 delegations currently held by clients.",
    );
    let _ = writeln!(out, "nfsgw_delegations {}", cb.delegations());
    header(
        out,
        "nfsgw_nfs4_courtesy_clients",
        "gauge",
        "NFSv4.1 courtesy clients: lease run out, opens, locks and delegations kept until a conflict (nfs4.courtesy_s).",
    );
    let _ = writeln!(out, "nfsgw_nfs4_courtesy_clients {}", cb.courtesy_clients());
    header(
        out,
        "nfsgw_nfs4_courtesy_expired_total",
        "counter",
        "NFSv4.1 courtesy clients expired because another client's operation conflicted with their state (OPEN, LOCK, I/O with a special stateid, a delegation, EXCHANGE_ID of another principal).",
    );
    let _ = writeln!(
        out,
        "nfsgw_nfs4_courtesy_expired_total {}",
        cb.courtesy_expired_total()
    );
}

#[cfg(test)]
mod tests {
    use super::super::counters::{CallStat, Transport};
    use super::*;
    use engine::mem::{ClassSpec, HugePolicy};

    fn source() -> Source {
        let pools = Pools::new(
            &[ClassSpec {
                size: 8192,
                count: 4,
            }],
            HugePolicy::Off,
        )
        .unwrap();
        Source {
            reactors: vec![ReactorSource {
                counters: Arc::new(Counters::default()),
                stats: Arc::new(ReactorStats::default()),
                pools,
                tenants: Arc::new(super::super::tenants::TenantTable::new(8)),
            }],
            rdma_credits: 32,
            callbacks: Default::default(),
            nfs4: None,
            qos: None,
            exports: None,
        }
    }

    /// Every line is a comment (`# HELP`/`# TYPE`) or `name{labels} value` with a
    /// parseable value, names are prefixed, and every sample's family was declared.
    fn check_format(text: &str) {
        let mut declared = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut it = rest.split(' ');
                let name = it.next().unwrap();
                assert!(name.starts_with("nfsgw_"), "{line}");
                let kind = it.next().unwrap();
                assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
                if kind == "counter" {
                    assert!(name.ends_with("_total"), "{line}");
                }
                assert!(declared.insert(name.to_string()), "declared twice: {line}");
                continue;
            }
            if line.starts_with("# HELP ") {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').expect("name value");
            value
                .parse::<f64>()
                .unwrap_or_else(|_| panic!("value in {line}"));
            let name = series.split('{').next().unwrap();
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s).filter(|f| declared.contains(*f)))
                .unwrap_or(name);
            assert!(declared.contains(family), "undeclared {line}");
            if let Some(labels) = series.strip_prefix(name) {
                if !labels.is_empty() {
                    assert!(labels.starts_with('{') && labels.ends_with('}'), "{line}");
                    for pair in labels[1..labels.len() - 1].split(',') {
                        let (k, v) = pair.split_once('=').expect("k=v");
                        assert!(k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
                        assert!(v.starts_with('"') && v.ends_with('"'), "{line}");
                    }
                }
            }
        }
    }

    #[test]
    fn empty_gateway_renders_valid_text() {
        let mut out = String::new();
        render(&source(), &mut out);
        check_format(&out);
        assert!(out.contains("nfsgw_reactors 1\n"));
        assert!(out.contains("nfsgw_reactor_polls_total{reactor=\"0\"} 0\n"));
        assert!(out.contains(
            "nfsgw_ops_total{reactor=\"0\",transport=\"tcp\",prog=\"nfs3\",proc=\"GETATTR\"} 0\n"
        ));
        assert!(out.contains("nfsgw_pool_buffers{reactor=\"0\",size=\"8192\"} 4\n"));
        // No calls: no request histogram series (the backend's are process-wide, and
        // other tests in this binary call stores).
        assert!(!out.contains("nfsgw_request_duration_seconds_bucket{"));
        for name in ["nfsgw_nfs4_sessions 0", "nfsgw_nfs4_opens 0"] {
            assert!(out.contains(&format!("{name}\n")), "{name}");
        }
        assert!(out.contains("# TYPE nfsgw_nfs_errors_total counter\n"));
        assert!(out.contains("# TYPE nfsgw_backend_duration_seconds histogram\n"));
        // Every kind of store request has its series (zero without the s3 backend).
        for k in ["head", "get", "put", "copy", "delete", "list", "multipart"] {
            assert!(
                out.contains(&format!("nfsgw_s3_requests_total{{kind=\"{k}\"}} ")),
                "{k}"
            );
        }
    }

    #[test]
    fn callback_and_recall_counters_are_exposed() {
        use super::super::callbacks::{CallbackResult, RecallResult};
        let src = source();
        let cb = &src.callbacks;
        cb.callback(Transport::Tcp, CallbackResult::Sent);
        cb.callback(Transport::Rdma, CallbackResult::Sent);
        cb.callback(Transport::Rdma, CallbackResult::Sent);
        cb.callback(Transport::Rdma, CallbackResult::Replied);
        cb.callback(Transport::Tcp, CallbackResult::Unmatched);
        cb.callback(Transport::Rdma, CallbackResult::Failed);
        cb.recall(Some(Transport::Rdma), RecallResult::Sent);
        cb.recall(Some(Transport::Rdma), RecallResult::Answered);
        cb.recall(None, RecallResult::Revoked);
        cb.set_delegations(3);
        cb.set_courtesy_clients(2);
        cb.courtesy_expired(1);
        cb.courtesy_expired(0);
        let mut out = String::new();
        render(&src, &mut out);
        check_format(&out);
        let has = |l: &str| assert!(out.contains(&format!("{l}\n")), "{l}");
        has("nfsgw_callbacks_total{transport=\"tcp\",result=\"sent\"} 1");
        has("nfsgw_nfs4_courtesy_clients 2");
        has("nfsgw_nfs4_courtesy_expired_total 1");
        has("nfsgw_callbacks_total{transport=\"rdma\",result=\"sent\"} 2");
        has("nfsgw_callbacks_total{transport=\"rdma\",result=\"replied\"} 1");
        has("nfsgw_callbacks_total{transport=\"tcp\",result=\"unmatched\"} 1");
        has("nfsgw_callbacks_total{transport=\"rdma\",result=\"failed\"} 1");
        has("nfsgw_callbacks_total{transport=\"tcp\",result=\"timed_out\"} 0");
        has("nfsgw_delegation_recalls_total{transport=\"rdma\",result=\"sent\"} 1");
        has("nfsgw_delegation_recalls_total{transport=\"rdma\",result=\"answered\"} 1");
        has("nfsgw_delegation_recalls_total{transport=\"tcp\",result=\"answered\"} 0");
        has("nfsgw_delegation_recalls_total{transport=\"none\",result=\"revoked\"} 1");
        assert!(out.contains("nfsgw_delegations 3\n"));
    }

    #[test]
    fn histogram_series_are_cumulative_and_match_counts() {
        let src = source();
        let s = &src.reactors[0].stats;
        for ns in [300, 1_500, 1_600, 5_000_000] {
            s.call_in(Transport::Tcp, 1, 100);
            s.call_done(
                CallStat {
                    t0: 0,
                    slot: 1,
                    transport: Transport::Tcp as u8,
                    ..CallStat::default()
                },
                ns,
            );
        }
        s.bytes_out(Transport::Tcp, 120);
        let buf = src.reactors[0].pools.alloc(100).unwrap();
        let mut out = String::new();
        render(&src, &mut out);
        check_format(&out);
        let l = "reactor=\"0\",transport=\"tcp\",prog=\"nfs3\",proc=\"GETATTR\"";
        for (le, n) in [
            ("1e-6", 1),
            ("0.000001", 1),
            ("0.000002", 3),
            ("0.004096", 3),
            ("0.008192", 4),
            ("+Inf", 4),
        ] {
            let line = format!("nfsgw_request_duration_seconds_bucket{{{l},le=\"{le}\"}} {n}\n");
            if le == "1e-6" {
                assert!(!out.contains(&line), "le printed in exponent form");
                continue;
            }
            assert!(out.contains(&line), "missing {line}");
        }
        assert!(out.contains(&format!("nfsgw_request_duration_seconds_count{{{l}}} 4\n")));
        assert!(out.contains(&format!(
            "nfsgw_request_duration_seconds_sum{{{l}}} 0.0050034\n"
        )));
        assert!(out.contains(&format!("nfsgw_ops_total{{{l}}} 4\n")));
        assert!(out.contains("nfsgw_bytes_in_total{reactor=\"0\",transport=\"tcp\"} 400\n"));
        assert!(out.contains("nfsgw_bytes_out_total{reactor=\"0\",transport=\"tcp\"} 120\n"));
        assert!(out.contains("nfsgw_pool_buffers_in_use{reactor=\"0\",size=\"8192\"} 1\n"));
        drop(buf);
        // le bounds: 24 buckets (23 finite + Inf) per series.
        assert_eq!(out.matches(&format!("_bucket{{{l},")).count(), BUCKETS);
    }
}
