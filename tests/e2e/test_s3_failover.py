"""The `s3` backend with several endpoints of one cluster, and its retry budget.

Two fault proxies (tests/e2e/s3proxy.py) in front of ONE S3 server stand for two nodes
of one cluster: same buckets, same data. The gateway lists both in
`[backend.s3] endpoints`. Killing (or resetting every request of) the node it talks to
must not turn COMMITs into JUKEBOX: the call moves to the other endpoint at once, and
the dead one is not retried on every request. `retry_budget_s` bounds the time of one
store call: a store that stalls longer answers JUKEBOX in about the budget.
The garage slice reruns these against a real Garage cluster.
"""

from __future__ import annotations

import os
import time

import pytest

if os.environ.get("E2E_NO_S3") == "1":
    pytest.skip("E2E_NO_S3=1: no S3 server on this machine", allow_module_level=True)

import nfsclient as N  # noqa: E402
from conftest import free_port  # noqa: E402
from s3proxy import FaultProxy  # noqa: E402
from s3server import get_bytes  # noqa: E402
from statsutil import scrape  # noqa: E402
from test_s3 import make_file  # noqa: E402

MiB = 1 << 20


@pytest.fixture
def two_nodes(s3_server, gw_factory):
    """Two proxies to the one S3 server: two "nodes" of one cluster."""
    ps = [FaultProxy((s3_server.host, s3_server.port)).start() for _ in range(2)]
    yield ps
    for p in ps:
        p.clear()
    gw_factory.stop_all()       # their shutdown flush may need a proxy
    for p in ps:
        p.stop()


def cluster_gateway(gw_factory, s3_server, bucket, endpoints, **over):
    cfg = s3_server.gateway_s3_config(bucket, **over)
    del cfg["endpoint"]
    cfg["endpoints"] = endpoints
    port = free_port()
    g = gw_factory(backend="s3", s3=cfg, backend_opts={"workers": 4},
                   extra={"stats": {"listen": f"127.0.0.1:{port}"}})
    g.stats_port = port
    return g


def failovers(g) -> float:
    return scrape(g.stats_port).sum("nfsgw_s3_endpoint_failovers_total")


def commit_timed(c, fh):
    t0 = time.monotonic()
    r = c.commit(fh)
    return r, time.monotonic() - t0


def test_killing_the_current_endpoint_fails_over_without_jukebox(gw_factory, s3_server, s3_bucket, s3, two_nodes):
    a, b = two_nodes
    g = cluster_gateway(gw_factory, s3_server, s3_bucket, [a.endpoint, b.endpoint],
                        timeout_s=5, connect_timeout_s=2, flush_idle_s=60)
    c = g.client()
    root = c.mount("/")
    written = {}
    d = os.urandom(100_000)
    make_file(c, root, "before.bin", d)
    written["before.bin"] = d
    assert a.counts["PUT"] >= 1 and b.counts["PUT"] == 0, (a.counts, b.counts)
    f0 = failovers(g)

    # node a dies: every request to it is reset (a crashed process / refused connection)
    a.reset_counts()
    a.reset(times=None)
    for i in range(10):
        d = os.urandom(50_000 + i)
        fh = make_file(c, root, f"during{i}.bin", d, commit=False)
        r, took = commit_timed(c, fh)
        assert r.status == N.NFS3_OK, f"COMMIT {i} with one endpoint dead -> {N.status_name(r.status)}"
        assert took < 3, f"COMMIT {i} took {took:.1f}s with a healthy endpoint available"
        written[f"during{i}.bin"] = d
    # a multipart upload (parts may go to either node: one cluster, one upload id)
    big = os.urandom(12 * MiB)
    fh = make_file(c, root, "big.bin", big, commit=False)
    c.commit(fh).check()
    written["big.bin"] = big
    # the dead node is not retried on every request: one failure, then skipped
    assert a.injected["reset"] <= 2, f"dead endpoint tried {a.injected['reset']} times"
    assert b.counts["PUT"] >= 10, b.counts
    assert failovers(g) >= f0 + 1

    # a comes back and b dies: back to a
    a.clear()
    b.reset(times=None)
    for i in range(3):
        d = os.urandom(70_000)
        fh = make_file(c, root, f"after{i}.bin", d, commit=False)
        r, took = commit_timed(c, fh)
        assert r.status == N.NFS3_OK, f"COMMIT after the second failover -> {N.status_name(r.status)}"
        written[f"after{i}.bin"] = d
    assert failovers(g) >= f0 + 2
    assert "switching to the next one" in g.log_path.read_text(errors="replace")
    b.clear()
    for k, v in written.items():
        assert get_bytes(s3, s3_bucket, k) == v, f"{k} differs in the store"
    c.close()


def test_stopped_endpoint_refusing_connections(gw_factory, s3_server, s3_bucket, s3, two_nodes):
    a, b = two_nodes
    g = cluster_gateway(gw_factory, s3_server, s3_bucket, [a.endpoint, b.endpoint],
                        timeout_s=5, connect_timeout_s=2)
    c = g.client()
    root = c.mount("/")
    make_file(c, root, "x.bin", b"x" * 1000)
    a.stop()                     # listener closed: connection refused, pooled ones closed
    d = os.urandom(200_000)
    fh = make_file(c, root, "y.bin", d, commit=False)
    r, took = commit_timed(c, fh)
    assert r.status == N.NFS3_OK, N.status_name(r.status)
    assert took < 3, took
    assert get_bytes(s3, s3_bucket, "y.bin") == d
    c.close()


def test_a_stall_longer_than_the_budget_answers_jukebox_in_about_the_budget(gw_factory, s3_server, s3_bucket, s3_proxy):
    p = s3_proxy
    budget = 3.0
    # timeout_s far above the budget: the budget, not the per-request timeout, decides
    cfg = s3_server.gateway_s3_config(s3_bucket, endpoint=p.endpoint, timeout_s=60,
                                      retries=100, retry_budget_s=budget, flush_idle_s=60)
    g = gw_factory(backend="s3", s3=cfg, backend_opts={"workers": 4})
    c = g.client()
    root = c.mount("/")
    d = os.urandom(40_000)
    fh = make_file(c, root, "s.bin", d, commit=False)
    p.stall(120, times=None, method="PUT")
    r, took = commit_timed(c, fh)
    assert r.status == N.NFS3ERR_JUKEBOX, N.status_name(r.status)
    assert budget - 0.5 <= took < budget + 2.5, f"JUKEBOX after {took:.1f}s, budget {budget}s"
    # a store answering 503 forever: retried (many times) for the budget, then JUKEBOX
    p.clear()
    p.reset_counts()
    p.fail(503, times=None, method="PUT")
    r, took = commit_timed(c, fh)
    assert r.status == N.NFS3ERR_JUKEBOX, N.status_name(r.status)
    assert budget - 0.5 <= took < budget + 2.5, f"JUKEBOX after {took:.1f}s, budget {budget}s"
    assert p.injected["503"] >= 4, p.injected
    # an outage shorter than the budget is invisible: COMMIT just succeeds
    p.clear()
    p.fail(503, times=None, method="PUT")
    import threading
    threading.Timer(1.0, p.clear).start()
    r, took = commit_timed(c, fh)
    assert r.status == N.NFS3_OK, f"COMMIT through a 1 s outage, budget {budget}s -> {N.status_name(r.status)}"
    c.close()


# ---------------------------------------------------------------------------- bench


def run_bench(g, *args, timeout=120):
    import json
    import subprocess
    from statsutil import BENCH
    assert BENCH.exists(), f"build bench first: {BENCH}"
    r = subprocess.run([str(BENCH), "--target", f"tcp://127.0.0.1:{g.port}", "--json", *map(str, args)],
                       capture_output=True, text=True, timeout=timeout)
    lines = r.stdout.strip().splitlines()
    return r, (json.loads(lines[-1]) if lines else None)


@pytest.mark.serial  # time bounds: needs a quiet CPU (tests/README.md)
@pytest.mark.parametrize("nfs", ["3", "4.1"])
def test_bench_rides_out_a_jukebox_window(gw_factory, s3_server, s3_bucket, s3_proxy, nfs, tmp_path):
    import threading
    p = s3_proxy
    v = ("--nfs", nfs)
    # The operator's handle key (backend.s3.handle_key_file): the handle key is not what
    # this test is about, and agreeing on one through the bucket waits out its settle
    # time (2 s, handlekey.rs) at each of the three starts below.
    key = tmp_path / "handle.key"
    key.write_text(os.urandom(32).hex() + "\n")
    # JUKEBOX quickly (0.5 s budget) so the window yields many of them
    cfg = s3_server.gateway_s3_config(s3_bucket, endpoint=p.endpoint, timeout_s=2,
                                      retries=100, retry_budget_s=0.5, handle_key_file=str(key))
    g = gw_factory(backend="s3", s3=cfg, backend_opts={"workers": 4})
    # setup under fire: every PUT fails for 2 s, so CREATE and the prepare's COMMIT are
    # answered JUKEBOX and must be resent
    p.fail(503, times=None, method="PUT")
    threading.Timer(2.0, p.clear).start()
    r, j = run_bench(g, *v, "--workload", "randread", "--verify", "--file", "j.dat", "--file-size", "2m",
                     "--ops", 200, "--qd", 4)
    assert r.returncode == 0, f"bench -> {r.returncode}\n{r.stderr[-3000:]}"
    assert j["total"]["jukebox"] > 0 and j["total"]["errors"] == 0, j["total"]
    assert j["total"]["verify_failures"] == 0 and j["total"]["verified_bytes"] > 0, j["total"]
    # the load under fire: a fresh gateway process (nothing cached) whose GETs fail
    # for 2 s of a 4 s run; every READ is answered in the end and verified
    g.restart()
    p.reset_counts()
    p.fail(503, times=None, method="GET")
    threading.Timer(2.0, p.clear).start()
    r, j = run_bench(g, *v, "--workload", "randread", "--verify", "--file", "j.dat", "--file-size", "2m",
                     "--duration", 4, "--qd", 4)
    assert r.returncode == 0, f"bench -> {r.returncode}\n{r.stderr[-3000:]}"
    t = j["total"]
    assert p.injected["503"] > 0, p.injected
    assert t["jukebox"] > 0 and t["errors"] == 0, t
    assert t["verify_failures"] == 0 and t["verified_bytes"] > 0, t
    # a window longer than --jukebox-timeout: bench fails, saying why (one READ is
    # enough: it gives up after 1.5 s; a second one waited 1.5 s more, one after the other)
    g.restart()
    p.fail(503, times=None, method="GET")
    t0 = time.monotonic()
    r, j = run_bench(g, *v, "--workload", "randread", "--file", "j.dat", "--file-size", "2m",
                     "--ops", 1, "--jukebox-timeout", 1.5)
    took = time.monotonic() - t0
    p.clear()
    assert r.returncode != 0
    assert "--jukebox-timeout" in r.stderr, (took, p.injected, r.stderr[-2000:], g.log_tail())


def test_a_hung_endpoint_fails_over_after_timeout_s(gw_factory, s3_server, s3_bucket, s3, two_nodes):
    # a node that accepts and never answers (a partition, a wedged process): the attempt
    # is cut at timeout_s, well inside the budget, and the call moves on
    a, b = two_nodes
    g = cluster_gateway(gw_factory, s3_server, s3_bucket, [a.endpoint, b.endpoint],
                        timeout_s=1, connect_timeout_s=1, retry_budget_s=10)
    c = g.client()
    root = c.mount("/")
    make_file(c, root, "x.bin", b"x" * 1000)
    a.stall(120, times=None)
    d = os.urandom(150_000)
    t0 = time.monotonic()
    fh = make_file(c, root, "hung.bin", d, commit=False)   # its CREATE meets the hang
    r = c.commit(fh)
    took = time.monotonic() - t0
    assert r.status == N.NFS3_OK, N.status_name(r.status)
    assert 0.8 <= took < 4, took
    assert a.injected["stall"] >= 1, a.injected
    r, took = commit_timed(c, make_file(c, root, "next.bin", b"n" * 5000, commit=False))
    assert r.status == N.NFS3_OK and took < 1.0, (N.status_name(r.status), took)
    a.clear()
    assert get_bytes(s3, s3_bucket, "hung.bin") == d
    c.close()
