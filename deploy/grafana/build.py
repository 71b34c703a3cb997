#!/usr/bin/env python3
"""Writes the Grafana dashboards of deploy/grafana/*.json from the panel lists below.

    python3 deploy/grafana/build.py            # rewrite the JSON files
    python3 deploy/grafana/build.py --check    # exit 1 if a file differs (CI)

Every query uses only series the gateway exports (docs/stats.md, gateway/src/stats/);
tests/e2e/test_dashboards.py evaluates each panel's `expr` with a real Prometheus
scraping a gateway under bench load and requires data. Variables: `$datasource`
(a Prometheus data source), `$instance` (scrape targets exposing nfsgw_reactors) and,
on the per-reactor dashboard, `$reactor`.
"""
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
SEL = 'instance=~"$instance"'
R = "$__rate_interval"


def rate(metric, extra="", by=None, fn="rate"):
    sel = SEL + ("," + extra if extra else "")
    inner = f"{fn}({metric}{{{sel}}}[{R}])"
    return f"sum by ({by}) ({inner})" if by else f"sum({inner})"


def gauge(metric, extra="", by=None):
    sel = SEL + ("," + extra if extra else "")
    return f"sum by ({by}) ({metric}{{{sel}}})" if by else f"sum({metric}{{{sel}}})"


def quantile(q, by, extra=""):
    sel = SEL + ("," + extra if extra else "")
    return (f"histogram_quantile({q}, sum by (le, {by}) "
            f"(rate(nfsgw_request_duration_seconds_bucket{{{sel}}}[{R}])))")


def backend_quantile(q, by="op"):
    return (f"histogram_quantile({q}, sum by (le, {by}) "
            f"(rate(nfsgw_backend_duration_seconds_bucket{{{SEL}}}[{R}])))")


def ts(title, targets, unit="short", desc="", stack=False):
    """A time-series panel; targets are (expr, legend) pairs."""
    return {"type": "timeseries", "title": title, "description": desc, "unit": unit,
            "stack": stack, "targets": targets}


def stat(title, expr, unit="short", desc=""):
    return {"type": "stat", "title": title, "description": desc, "unit": unit,
            "targets": [(expr, "")]}


def row(title):
    return {"type": "row", "title": title}


OPS = rate("nfsgw_ops_total")
BUSY = (f"sum by (reactor) (rate(nfsgw_reactor_busy_polls_total{{{SEL}}}[{R}])) / "
        f"sum by (reactor) (rate(nfsgw_reactor_polls_total{{{SEL}}}[{R}]))")
HIT = (f"sum(rate(nfsgw_cache_hits_total{{{SEL}}}[{R}])) / "
       f"clamp_min(sum(rate(nfsgw_cache_hits_total{{{SEL}}}[{R}])) + "
       f"sum(rate(nfsgw_cache_misses_total{{{SEL}}}[{R}])), 1e-9)")
# JUKEBOX/DELAY: "the server is busy, retry" answers (RFC 1813 §2.6, RFC 8881 §15.1);
# zero on a healthy gateway, so `or vector(0)` keeps the panel drawn when none came.
BUSY_ANSWERS = (rate("nfsgw_nfs_errors_total", 'status=~"NFS3ERR_JUKEBOX|NFS4ERR_DELAY"',
                     by="prog, proc") + " or vector(0)")
POOL = (f"sum by (size) (nfsgw_pool_buffers_in_use{{{SEL}}}) / "
        f"clamp_min(sum by (size) (nfsgw_pool_buffers{{{SEL}}}), 1)")

OVERVIEW = ("nfsgw-overview", "nfsgw: overview", [
    row("Load"),
    stat("Reactors", gauge("nfsgw_reactors")),
    stat("Operations/s", OPS, "ops"),
    stat("MiB/s out", rate("nfsgw_bytes_out_total") + " / 2^20", "MiBs"),
    stat("Connections", gauge("nfsgw_tcp_connections") + " + " + gauge("nfsgw_rdma_connections")),
    ts("Operations/s by procedure", [(rate("nfsgw_ops_total", by="prog, proc"), "{{prog}} {{proc}}")],
       "ops", "Calls received (counted on arrival), docs/stats.md nfsgw_ops_total.", stack=True),
    ts("Throughput", [(rate("nfsgw_bytes_in_total", by="transport"), "in {{transport}}"),
                      (rate("nfsgw_bytes_out_total", by="transport"), "out {{transport}}")],
       "Bps", "RPC call and reply bytes (TCP records, RDMA calls and replies with chunk data)."),
    row("Latency (the server's share: arrival on the reactor to reply handed to the transport)"),
    ts("p50 by procedure", [(quantile(0.5, "proc"), "{{proc}}")], "s"),
    ts("p99 by procedure", [(quantile(0.99, "proc"), "{{proc}}")], "s",
       "Upper bounds within a factor of two (power-of-two buckets)."),
    ts("p99.9 by transport", [(quantile(0.999, "transport"), "{{transport}}")], "s"),
    row("Trouble"),
    ts("Guard events/s", [(rate("nfsgw_guard_events_total", by="transport, reason"),
                           "{{transport}} {{reason}}")], "short",
       "Protective closes and refusals (README 'Failures and supervision')."),
    ts("Errors", [(rate("nfsgw_requests_panicked_total", fn="increase"), "requests panicked"),
                  (rate("nfsgw_uring_failures_total", by="op", fn="increase"), "io_uring {{op}}"),
                  (rate("nfsgw_s3_uploads_lost_total", fn="increase"), "s3 uploads lost")],
       "short", "Events per rate interval; any panic is a bug worth a report."),
    ts("NFS errors/s by procedure and status",
       [(rate("nfsgw_nfs_errors_total", by="prog, proc, status"), "{{prog}} {{proc}} {{status}}")],
       "short", "Answers whose status was not OK (NFSv3 procedure, or the NFSv4.1 operation a "
       "COMPOUND failed at). NOENT from LOOKUP is routine; STALE, IO, SERVERFAULT are not."),
    ts("JUKEBOX / DELAY answers/s", [(BUSY_ANSWERS, "{{prog}} {{proc}}")], "short",
       "NFS3ERR_JUKEBOX / NFS4ERR_DELAY: a store that is down or throttling (backend.retry_budget_s), "
       "a delegation being recalled, a busy session slot. Clients retry after a pause."),
    ts("Backpressure (calls held on the reactor)/s", [(rate("nfsgw_backpressure_total"), "held")],
       "short", "Job ring full or no buffer for an inline reply: the store or the workers lag."),
    ts("Read cache hit ratio", [(HIT, "hit ratio")], "percentunit"),
])

REACTORS = ("nfsgw-reactors", "nfsgw: per reactor (core)", [
    ts("Busy ratio", [(BUSY, "reactor {{reactor}}")], "percentunit",
       "Poll passes that found work / all passes."),
    ts("Adaptive sleeps/s", [(rate("nfsgw_reactor_sleeps_total", 'reactor=~"$reactor"', by="reactor"),
                              "reactor {{reactor}}")]),
    ts("Operations/s", [(rate("nfsgw_ops_total", 'reactor=~"$reactor"', by="reactor"), "reactor {{reactor}}")],
       "ops"),
    ts("MiB/s out", [(rate("nfsgw_bytes_out_total", 'reactor=~"$reactor"', by="reactor") + " / 2^20",
                      "reactor {{reactor}}")], "MiBs"),
    ts("p99 latency", [(quantile(0.99, "reactor", 'reactor=~"$reactor"'), "reactor {{reactor}}")], "s"),
    ts("Parked calls (at workers)", [(gauge("nfsgw_parked_requests", 'reactor=~"$reactor"', by="reactor"),
                                      "reactor {{reactor}}")]),
    ts("Pool occupancy by buffer size", [(POOL, "{{size}} B")], "percentunit",
       "Buffers in use / configured ([pools]); RDMA connections hold credits' Receives by design."),
    ts("Pool exhaustion/s", [(rate("nfsgw_pool_exhausted_total", 'reactor=~"$reactor"', by="reactor, size"),
                              "reactor {{reactor}} {{size}} B")]),
    ts("TCP connections", [(gauge("nfsgw_tcp_connections", 'reactor=~"$reactor"', by="reactor"),
                            "reactor {{reactor}}")]),
    ts("Read cache pages", [(gauge("nfsgw_cache_pages", 'reactor=~"$reactor"', by="reactor"),
                             "reactor {{reactor}}")], "short", "4 KiB pages (cache.size_mib bounds them)."),
])

BACKEND = ("nfsgw-backend", "nfsgw: backend and storage path", [
    ts("Worker data jobs/s", [(rate("nfsgw_worker_data_jobs_total"), "READ/WRITE/COMMIT on workers")],
       "ops", "Near 0 with backend.io = uring on a steady workload."),
    ts("Read cache hits and misses/s", [(rate("nfsgw_cache_hits_total"), "hits"),
                                        (rate("nfsgw_cache_misses_total"), "misses")], "ops"),
    ts("io_uring revalidations/s", [(rate("nfsgw_uring_revalidations_total", by="result"), "{{result}}")]),
    ts("io_uring failures/s", [(rate("nfsgw_uring_failures_total", by="op"), "{{op}}")]),
    ts("Spliced READ bytes/s", [(rate("nfsgw_tcp_spliced_bytes_total"), "spliced")], "Bps"),
    ts("Splice pipes in use", [(gauge("nfsgw_tcp_pipes_in_use"), "pipes")]),
    ts("Latency of worker-bound procedures (p99)",
       [(quantile(0.99, "proc", 'proc=~"READ|WRITE|COMMIT|CREATE|REMOVE|LOOKUP"'), "{{proc}}")], "s",
       "Includes the ring hops and the backend: the closest series to backend latency."),
    ts("Backend latency p50 by operation", [(backend_quantile(0.5), "{{op}}")], "s",
       "Each call the file model makes to the store (nfsgw_backend_duration_seconds)."),
    ts("Backend latency p99 by operation", [(backend_quantile(0.99), "{{op}}")], "s",
       "Upper bounds within a factor of two (power-of-two buckets)."),
    ts("Backend calls/s by operation",
       [(rate("nfsgw_backend_duration_seconds_count", by="op"), "{{op}}")], "ops"),
    ts("Backend errors/s by operation", [(rate("nfsgw_backend_errors_total", by="op, error"),
                                          "{{op}} {{error}}")], "short",
       "not_found is routine (a LOOKUP of a missing name asks the store); retryable answers "
       "JUKEBOX/DELAY once backend.retry_budget_s runs out."),
    ts("S3 endpoint failovers", [(rate("nfsgw_s3_endpoint_failovers_total", fn="increase"), "failovers")]),
    ts("S3 uploads lost", [(rate("nfsgw_s3_uploads_lost_total", fn="increase"), "lost")]),
])

RDMA = ("nfsgw-rdma", "nfsgw: RPC-over-RDMA", [
    ts("RDMA connections", [(gauge("nfsgw_rdma_connections", by="reactor"), "reactor {{reactor}}")]),
    ts("Credits in use / granted", [(gauge("nfsgw_rdma_credits_in_use"), "in use"),
                                    (gauge("nfsgw_rdma_credits_granted"), "granted")], "short",
       "Calls received and not yet answered hold one of the client's credits (RFC 8166 §3.3)."),
    ts("RDMA operations/s", [(rate("nfsgw_ops_total", 'transport="rdma"', by="proc"), "{{proc}}")], "ops"),
    ts("RDMA throughput", [(rate("nfsgw_bytes_in_total", 'transport="rdma"'), "in"),
                           (rate("nfsgw_bytes_out_total", 'transport="rdma"'), "out")], "Bps"),
    ts("RDMA p99 by procedure", [(quantile(0.99, "proc", 'transport="rdma"'), "{{proc}}")], "s"),
    ts("RDMA guard events/s", [(rate("nfsgw_guard_events_total", 'transport="rdma"', by="reason"),
                                "{{reason}}")]),
])

NFS4 = ("nfsgw-nfs4", "nfsgw: NFSv4.1 state", [
    ts("Clients", [(gauge("nfsgw_nfs4_clients", by="state"), "{{state}}")], "short",
       "Client records: confirmed, courtesy (lease run out, state kept), unconfirmed."),
    ts("Sessions", [(gauge("nfsgw_nfs4_sessions"), "sessions")]),
    ts("Opens and locks", [(gauge("nfsgw_nfs4_opens"), "open stateids"),
                           (gauge("nfsgw_nfs4_lock_stateids"), "lock stateids"),
                           (gauge("nfsgw_nfs4_locked_ranges"), "locked ranges")]),
    ts("NFSv4.1 errors/s by operation", [(rate("nfsgw_nfs_errors_total", 'prog="nfs4"', by="proc, status"),
                                          "{{proc}} {{status}}")], "short",
       "COMPOUNDs by the operation they failed at (RFC 8881 §16.2.3)."),
    ts("Delegations held", [(gauge("nfsgw_delegations"), "delegations")]),
    ts("Courtesy clients", [(gauge("nfsgw_nfs4_courtesy_clients"), "courtesy")], "short",
       "Lease run out, state kept until a conflict (RFC 8881 §8.4.2.1)."),
    ts("Courtesy clients expired by conflicts", [(rate("nfsgw_nfs4_courtesy_expired_total", fn="increase"),
                                                  "expired")]),
    ts("Delegation recalls/s", [(rate("nfsgw_delegation_recalls_total", by="result"), "{{result}}")]),
    ts("Callbacks/s", [(rate("nfsgw_callbacks_total", by="transport, result"), "{{transport}} {{result}}")]),
])


def qos():
    """QoS ([[qos.client]], [[qos.export]]; docs/operations.md "Limit"): who is held back."""
    by = "scope, name"
    mean = (f"sum by ({by}) (rate(nfsgw_qos_delay_seconds_total{{{SEL}}}[{R}])) / "
            f"clamp_min(sum by ({by}) (rate(nfsgw_qos_delayed_total{{{SEL}}}[{R}])), 1e-9)")
    return ("nfsgw-qos", "nfsgw: QoS rate limits", [
        ts("Calls held back/s by rule", [(rate("nfsgw_qos_delayed_total", by=by), "{{scope}} {{name}}")],
           "ops", "Calls a rule made wait for its bucket (docs/stats.md nfsgw_qos_delayed_total); "
           "0 for a rule whose clients stay under their limit."),
        ts("Mean wait of a held call", [(mean, "{{scope}} {{name}}")], "s",
           "Seconds waited / calls held, per rule."),
        ts("Calls waiting (seconds held per second)",
           [(rate("nfsgw_qos_delay_seconds_total", by=by), "{{scope}} {{name}}")], "short",
           "About the number of calls a rule holds at any moment."),
    ])



def tenant_p99(what):
    """p99 by client or export, from their own histograms (docs/stats.md)."""
    return (f"histogram_quantile(0.99, sum by (le, {what}) "
            f"(rate(nfsgw_{what}_request_duration_seconds_bucket{{{SEL}}}[{R}])))")


def tenant_panels(what, label):
    return [
        row(f"Per {what} (the gateway's stats.top_{what}s by calls, the rest as \"other\")"),
        ts(f"Operations/s by {what}", [(rate(f"nfsgw_{what}_ops_total", by=what), label)], "ops",
           f"nfsgw_{what}_ops_total: calls on arrival.", stack=True),
        ts(f"Operations/s by {what} and class",
           [(rate(f"nfsgw_{what}_ops_total", by=f"{what}, class"), label + " {{class}}")], "ops",
           "read, write (WRITE, COMMIT) or metadata; an NFSv4.1 COMPOUND by its main operation."),
        ts(f"MiB/s by {what}", [(rate(f"nfsgw_{what}_bytes_total", by=f"{what}, direction") + " / 2^20",
                                 label + " {{direction}}")], "MiBs"),
        ts(f"p99 by {what}", [(tenant_p99(what), label)], "s",
           "Arrival on the reactor to reply; upper bounds within a factor of two."),
    ]


CLIENTS = ("nfsgw-clients", "nfsgw: clients and exports",
           tenant_panels("client", "{{client}}") + tenant_panels("export", "{{export}}") + [
               row("Client tables"),
               ts("Client addresses held", [(gauge("nfsgw_clients"), "held")], "short",
                  "Distinct addresses in the reactors' tables (stats.client_slots each)."),
               ts("Connections folded into \"other\" (table full)",
                  [(rate("nfsgw_client_table_full_total", fn="increase"), "folded")]),
           ])

DASHBOARDS = [OVERVIEW, REACTORS, BACKEND, RDMA, NFS4, CLIENTS, qos()]


def variable(name, query, multi=True):
    return {"name": name, "type": "query", "label": name,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "query": {"query": query, "refId": name}, "definition": query,
            "refresh": 2, "includeAll": True, "multi": multi, "allValue": ".+",
            "current": {"text": "All", "value": "$__all"}, "sort": 1}


def panel(p, pid, x, y):
    w, h = (24, 1) if p["type"] == "row" else ((6, 4) if p["type"] == "stat" else (12, 8))
    out = {"id": pid, "type": p["type"], "title": p["title"],
           "gridPos": {"h": h, "w": w, "x": x, "y": y}}
    if p["type"] == "row":
        out["collapsed"] = False
        out["panels"] = []
        return out, w, h
    out["datasource"] = {"type": "prometheus", "uid": "${datasource}"}
    if p["description"]:
        out["description"] = p["description"]
    custom = {"stacking": {"mode": "normal" if p.get("stack") else "none"}} if p["type"] == "timeseries" else {}
    out["fieldConfig"] = {"defaults": {"unit": p["unit"], "custom": custom}, "overrides": []}
    out["options"] = {"legend": {"displayMode": "list", "placement": "bottom"}} \
        if p["type"] == "timeseries" else {"reduceOptions": {"calcs": ["lastNotNull"]}}
    out["targets"] = [{"refId": chr(65 + i), "expr": e, "legendFormat": l or "__auto",
                       "datasource": {"type": "prometheus", "uid": "${datasource}"}}
                      for i, (e, l) in enumerate(p["targets"])]
    return out, w, h


def dashboard(uid, title, panels):
    out, x, y, rowh = [], 0, 0, 0
    for i, p in enumerate(panels, 1):
        w = 24 if p["type"] == "row" else (6 if p["type"] == "stat" else 12)
        if x + w > 24:
            x, y, rowh = 0, y + rowh, 0
        q, w, h = panel(p, i, x, y)
        out.append(q)
        x, rowh = x + w, max(rowh, h)
    templating = [{"name": "datasource", "type": "datasource", "query": "prometheus",
                   "label": "data source", "current": {}},
                  variable("instance", "label_values(nfsgw_reactors, instance)")]
    if uid == "nfsgw-reactors":
        templating.append(variable("reactor", 'label_values(nfsgw_reactor_polls_total{instance=~"$instance"}, reactor)'))
    return {"uid": uid, "title": title, "tags": ["nfsgw"], "editable": True,
            "schemaVersion": 39, "version": 1, "refresh": "10s", "timezone": "",
            "time": {"from": "now-1h", "to": "now"},
            "links": [{"type": "dashboards", "tags": ["nfsgw"], "title": "nfsgw", "asDropdown": True}],
            "templating": {"list": templating}, "annotations": {"list": []}, "panels": out}


def render():
    return {f"{uid.removeprefix('nfsgw-')}.json": json.dumps(dashboard(uid, t, p), indent=2) + "\n"
            for uid, t, p in DASHBOARDS}


def main():
    check = "--check" in sys.argv[1:]
    stale = []
    for name, text in render().items():
        path = HERE / name
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(f"stale: {', '.join(stale)}: run python3 deploy/grafana/build.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
