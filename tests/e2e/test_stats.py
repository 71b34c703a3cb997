"""The stats endpoint ([stats] listen): its numbers agree with what bench did over TCP
and over soft RDMA, it is off by default and loopback-only unless allowed, and
`nfsgw-tools top --once` renders it."""

import os
import subprocess

import pytest

from conftest import free_port
from statsutil import TOOLS, bench, scrape, total, wait_idle

# Calls a bench run makes besides its workload (MNT, LOOKUP/CREATE of its file, ...).
SETUP_SLACK = 50


@pytest.fixture
def gw_stats(gw_factory):
    port = free_port()
    g = gw_factory(backend="fs+rdma", extra={"stats": {"listen": f"127.0.0.1:{port}"}})
    g.stats_port = port
    return g


def check_histograms_match_counters(m):
    """Every histogram series counts exactly the calls of its (reactor, transport, proc)
    counter once the gateway is idle, and its buckets are cumulative."""
    seen = 0
    for labels, count in m.series("nfsgw_request_duration_seconds_count"):
        ops = m.sum("nfsgw_ops_total", **labels)
        assert count == ops, (labels, count, ops)
        buckets = [(l["le"], v) for l, v in m.series("nfsgw_request_duration_seconds_bucket")
                   if all(l.get(k) == x for k, x in labels.items())]
        values = [v for _, v in buckets]
        assert values == sorted(values) and buckets[-1] == ("+Inf", count), (labels, buckets)
        seen += 1
    # And no counter has calls without a histogram.
    for labels, ops in m.series("nfsgw_ops_total"):
        if ops:
            assert m.sum("nfsgw_request_duration_seconds_count", **labels) == ops, labels
    return seen


@pytest.mark.parametrize("transport", ["tcp", "rdma"])
def test_counters_agree_with_bench(gw_stats, transport):
    g = gw_stats
    target = (f"tcp://127.0.0.1:{g.port}" if transport == "tcp"
              else f"rdma://127.0.0.1:{g.rdma_port}")
    m0 = scrape(g.stats_port)
    assert m0.sum("nfsgw_reactors") == 1

    out = bench(target, "--workload", "getattr", "--ops", "2000")
    n = total(out, "ops")
    assert n == 2000 and total(out, "errors") == 0, out
    m1 = wait_idle(g.stats_port, m0)
    getattrs = (m1.sum("nfsgw_ops_total", transport=transport, proc="GETATTR")
                - m0.sum("nfsgw_ops_total", transport=transport, proc="GETATTR"))
    assert n <= getattrs <= n + SETUP_SLACK, getattrs
    calls = m1.sum("nfsgw_ops_total", transport=transport) - m0.sum("nfsgw_ops_total", transport=transport)
    assert n <= calls <= n + SETUP_SLACK, calls
    assert m1.sum("nfsgw_ops_total", transport="tcp" if transport == "rdma" else "rdma") == \
        m0.sum("nfsgw_ops_total", transport="tcp" if transport == "rdma" else "rdma")
    # GETATTRs of one file are answered from the reactor's read cache (the first one,
    # and one a second after attributes expire, miss).
    hits = m1.sum("nfsgw_cache_hits_total") - m0.sum("nfsgw_cache_hits_total")
    misses = m1.sum("nfsgw_cache_misses_total") - m0.sum("nfsgw_cache_misses_total")
    assert n // 2 <= hits <= n + SETUP_SLACK and misses >= 1, (hits, misses)
    # Every call was answered: bytes went both ways.
    assert m1.sum("nfsgw_bytes_in_total", transport=transport) - m0.sum("nfsgw_bytes_in_total", transport=transport) >= n * 40
    assert m1.sum("nfsgw_bytes_out_total", transport=transport) - m0.sum("nfsgw_bytes_out_total", transport=transport) >= n * 100

    bs = 4096
    out = bench(target, "--workload", "randread", "--bs", str(bs), "--ops", "1000", "--qd", "4",
                "--size-mib", "4", "--file", f"st-{transport}.dat", "--verify")
    reads = total(out, "ops")
    assert reads == 1000 and total(out, "errors") == 0, out
    m2 = wait_idle(g.stats_port, m0)
    read_calls = (m2.sum("nfsgw_ops_total", transport=transport, proc="READ")
                  - m1.sum("nfsgw_ops_total", transport=transport, proc="READ"))
    assert reads <= read_calls <= reads + SETUP_SLACK, read_calls
    # WRITEs prepared the file; the reads' data went out.
    written = m2.sum("nfsgw_bytes_in_total", transport=transport) - m1.sum("nfsgw_bytes_in_total", transport=transport)
    assert written >= 4 << 20, written
    sent = m2.sum("nfsgw_bytes_out_total", transport=transport) - m1.sum("nfsgw_bytes_out_total", transport=transport)
    assert reads * bs <= sent <= (reads + SETUP_SLACK) * (bs + 512) + (4 << 20) // 8, sent

    assert check_histograms_match_counters(m2) >= 3
    # The reads filled cache pages.
    assert m2.sum("nfsgw_cache_pages") > 0
    assert m2.sum("nfsgw_cache_hits_total") + m2.sum("nfsgw_cache_misses_total") > \
        m1.sum("nfsgw_cache_hits_total") + m1.sum("nfsgw_cache_misses_total")
    # Reactor loop counters move and busy polls are a subset of polls.
    assert m2.sum("nfsgw_reactor_polls_total") > m0.sum("nfsgw_reactor_polls_total")
    assert 0 < m2.sum("nfsgw_reactor_busy_polls_total") <= m2.sum("nfsgw_reactor_polls_total")
    # Idle: nothing parked, no credits held, no connections left.
    assert m2.sum("nfsgw_parked_requests") == 0
    assert m2.sum("nfsgw_rdma_credits_in_use") == 0
    # Pools are configured per reactor (defaults) and back to the baseline.
    assert m2.sum("nfsgw_pool_buffers", size="8192") == 4096  # pools.small default
    for labels, v in m0.series("nfsgw_pool_buffers_in_use"):
        assert m2.sum("nfsgw_pool_buffers_in_use", **labels) == v


def test_connection_gauges_while_a_client_is_connected(gw_stats):
    g = gw_stats
    with g.client() as c:  # through the RDMA bridge: one RDMA connection
        c.null()
        deadline = __import__("time").monotonic() + 10
        while True:
            m = scrape(g.stats_port)
            if m.sum("nfsgw_rdma_connections") == 1:
                break
            assert __import__("time").monotonic() < deadline, m.series("nfsgw_rdma_connections")
            __import__("time").sleep(0.05)
        assert m.sum("nfsgw_rdma_credits_granted") == 128  # rdma.credits default


def listening_ports(pid: int) -> set:
    """TCP ports process `pid` listens on (its socket inodes matched in /proc/net/tcp*)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            t = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if t.startswith("socket:["):
            inodes.add(t[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:
                    ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


def test_endpoint_off_by_default(gw_factory):
    g = gw_factory(backend="fs")
    assert listening_ports(g.proc.pid) == {g.port}
    assert "stats:" not in g.log_path.read_text(errors="replace")
    # An explicitly empty listen is off too.
    g2 = gw_factory(backend="fs", extra={"stats": {"listen": ""}})
    assert listening_ports(g2.proc.pid) == {g2.port}


def test_remote_address_refused_unless_allowed(gw_factory):
    g = gw_factory(backend="fs", start=False, extra={"stats": {"listen": "0.0.0.0:9108"}})
    r = subprocess.run([str(g.binary), "--check-config", str(g.config_path)], capture_output=True, text=True)
    assert r.returncode == 2, r
    assert "stats.listen" in r.stderr and "allow_remote" in r.stderr, r.stderr
    g2 = gw_factory(backend="fs", start=False,
                    extra={"stats": {"listen": "0.0.0.0:9108", "allow_remote": True}})
    r = subprocess.run([str(g2.binary), "--check-config", str(g2.config_path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_bad_paths_and_methods_get_http_errors(gw_stats):
    import urllib.error
    import urllib.request
    base = f"http://127.0.0.1:{gw_stats.stats_port}"
    with urllib.request.urlopen(base + "/", timeout=10) as r:
        assert b"/metrics" in r.read()
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(base + "/nope", timeout=10)
    assert e.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(urllib.request.Request(base + "/metrics", data=b"x", method="POST"), timeout=10)
    assert e.value.code == 405
    assert gw_stats.alive()


def test_top_once_shows_every_reactor(gw_factory):
    assert TOOLS.exists(), f"build the tools crate first: {TOOLS}"
    ncpu = os.cpu_count() or 1
    cores = [0, 1] if ncpu >= 2 else [0]
    port = free_port()
    g = gw_factory(backend="fs", engine={"cores": cores},
                   extra={"stats": {"listen": f"127.0.0.1:{port}"}})
    load = subprocess.Popen([str(bench.__globals__["BENCH"]), "--target", f"tcp://127.0.0.1:{g.port}",
                             "--workload", "getattr", "--duration", "3"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        r = subprocess.run([str(TOOLS), "top", "--once", "--interval", "1",
                            "--url", f"http://127.0.0.1:{port}/metrics"],
                           capture_output=True, text=True, timeout=30)
    finally:
        load.wait(30)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "\x1b" not in out
    assert "busy%" in out and "pools in use" in out, out
    rows = [l.split()[0] for l in out.splitlines() if l.split() and l.split()[0].isdigit()]
    assert rows == [str(i) for i in range(len(cores))], out
    assert "GETATTR" in out, out


def test_nfs42_read_plus_is_answered_from_the_read_cache(gw_stats):
    """A READ_PLUS-only client (Linux >= 6.2 reads with READ_PLUS) over TCP: its reads
    warm the reactor's read cache and are answered from it (one data segment, RFC 7862
    §15.10.3), verified byte for byte; the cache pages go out as READ's do."""
    g = gw_stats
    m0 = scrape(g.stats_port)
    out = bench(f"tcp://127.0.0.1:{g.port}", "--nfs", "4.2", "--read-plus", "--workload", "randread",
                "--file", "rp.dat", "--file-size", "64k", "--qd", "4", "--ops", "2000", "--verify")
    n = total(out, "ops")
    assert n == 2000 and total(out, "errors") == 0 and total(out, "verify_failures") == 0, out
    assert total(out, "verified_bytes") == n * 4096, out
    m1 = wait_idle(g.stats_port, m0)
    hits = m1.sum("nfsgw_cache_hits_total") - m0.sum("nfsgw_cache_hits_total")
    # The first READ_PLUS of each page misses and fills it; later ones hit.
    assert hits >= n // 2, hits
