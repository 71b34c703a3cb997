"""The Grafana dashboards (deploy/grafana/*.json) against a real Prometheus: Debian's
`prometheus` (tests/setup.sh installs it) scrapes a live gateway every second while
bench drives NFSv3 over TCP and RDMA and NFSv4.1 over TCP (and a raw client LOOKUPs
missing names over both versions, for the error panels); then every panel's `expr`,
with the Grafana variables replaced by fixed values, is evaluated through Prometheus's
HTTP API at a moment inside the load and must return data. The panels that measure
the load itself must also be above zero."""

import json
import math
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import DEFAULT_EXPORT, free_port
from nfsclient import NfsClient, Packer
from statsutil import BENCH
from test_deleg import OP_PUTROOTFH, V4Client
from test_tenants import BoundClient

OP_LOOKUP = 15

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((REPO / "deploy" / "grafana").glob("*.json"))
# Grafana's variables as a query sees them with "All" selected; the rate window holds
# several 1 s scrapes.
VARIABLES = {"$__rate_interval": "10s", "$instance": ".+", "$reactor": ".+"}
# Panels whose value under bench load cannot be zero.
MUST_BE_POSITIVE = {
    ("nfsgw-overview", "Operations/s"), ("nfsgw-overview", "MiB/s out"),
    ("nfsgw-overview", "Operations/s by procedure"), ("nfsgw-overview", "Throughput"),
    ("nfsgw-overview", "p99 by procedure"), ("nfsgw-overview", "Reactors"),
    ("nfsgw-reactors", "Busy ratio"), ("nfsgw-reactors", "Operations/s"),
    ("nfsgw-rdma", "RDMA operations/s"), ("nfsgw-rdma", "RDMA throughput"),
    ("nfsgw-qos", "Calls held back/s by rule"),
    ("nfsgw-clients", "Operations/s by client"), ("nfsgw-clients", "Operations/s by export"),
    ("nfsgw-clients", "MiB/s by client"), ("nfsgw-clients", "p99 by export"),
}


def panels():
    for path in DASHBOARDS:
        d = json.loads(path.read_text())
        for p in d["panels"]:
            for t in p.get("targets", []):
                yield d["uid"], p["title"], t["expr"]


def expand(expr: str) -> str:
    for k, v in VARIABLES.items():
        expr = expr.replace(k, v)
    assert "$" not in expr, f"unreplaced variable in {expr}"
    return expr


def test_dashboards_are_generated_and_valid():
    r = subprocess.run([sys.executable, str(REPO / "deploy/grafana/build.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert len(DASHBOARDS) >= 6
    ids = [json.loads(p.read_text())["uid"] for p in DASHBOARDS]
    assert len(set(ids)) == len(ids)
    for uid, title in MUST_BE_POSITIVE:
        assert any(u == uid and t == title for u, t, _ in panels()), (uid, title)


class Prometheus:
    def __init__(self, workdir: Path, target: str):
        exe = shutil.which("prometheus")
        if not exe:
            pytest.fail("prometheus missing: tests/setup.sh installs Debian's prometheus")
        self.port = free_port()
        cfg = workdir / "prometheus.yml"
        cfg.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                       "scrape_configs:\n  - job_name: nfsgw\n"
                       f"    static_configs:\n      - targets: ['{target}']\n")
        self.log = workdir / "prometheus.log"
        self.proc = subprocess.Popen(
            [exe, f"--config.file={cfg}", f"--storage.tsdb.path={workdir / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(self.log, "wb"))
        self.wait(lambda: self.get("/-/ready") is not None, 30, "ready")

    def get(self, path: str):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return r.read().decode()
        except OSError:
            return None

    def wait(self, ok, secs: float, what: str):
        deadline = time.monotonic() + secs
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"prometheus exited:\n{self.log.read_text()[-2000:]}"
            if ok():
                return
            time.sleep(0.2)
        pytest.fail(f"prometheus not {what} after {secs}s:\n{self.log.read_text()[-2000:]}")

    def query(self, expr: str, at: float) -> list:
        q = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
        body = json.loads(self.get(f"/api/v1/query?{q}") or '{"status": "down"}')
        assert body["status"] == "success", (expr, body)
        return body["data"]["result"]

    def samples(self) -> int:
        r = self.query('count_over_time(up{job="nfsgw"}[1m])', time.time())
        return int(float(r[0]["value"][1])) if r else 0

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def run_bench(target: str, *args):
    r = subprocess.run([str(BENCH), "--target", target, "--export", "/", *args],
                       capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, f"bench {args}: {r.stderr[-2000:]}"


def provoke_errors(g, stop: threading.Event):
    """LOOKUPs of a missing name, NFSv3 and NFSv4.1, until `stop`: NFS3ERR_NOENT and
    NFS4ERR_NOENT answers (and the store's not_found) for the error panels."""
    v3 = NfsClient(g.host, g.port)
    root = v3.mount("/")
    v4 = V4Client(g.host, g.port)
    assert v4.exchange_id() == 0 and v4.create_session() == 0
    v4.reclaim_complete()
    while not stop.wait(0.1):
        assert v3.lookup(root, "no-such-name").status == 2
        v4.compound(v4.sequence() + Packer().u32(OP_PUTROOTFH).u32(OP_LOOKUP)
                    .opaque(b"no-such-name").get(), 3)
        assert v4.status == 2, v4.status


@pytest.fixture
def loaded(gw_factory, tmp_path):
    """A gateway with stats, scraped by Prometheus, after a few seconds of bench load;
    yields (prometheus, a time inside the load)."""
    stats = free_port()
    # Two exports, and a second client address (127.0.0.2) on the second one, for the
    # per-client and per-export panels (nfsgw-clients).
    g = gw_factory(backend="fs+rdma", extra={"stats": {"listen": f"127.0.0.1:{stats}"}},
                   exports=[dict(DEFAULT_EXPORT), dict(DEFAULT_EXPORT, path="/b")], start=False)
    # A QoS rule that bites (the qos dashboard's series exist only for configured rules).
    base = type(g).config_text
    g.config_text = lambda: base(g) + '\n[[qos.client]]\nmatch = "127.0.0.1"\nops_per_s = 3000\n'
    g.write_config()
    g.start()
    prom = Prometheus(tmp_path, f"127.0.0.1:{stats}")
    try:
        prom.wait(lambda: prom.samples() >= 2, 30, "scraping")
        tcp, rdma = f"tcp://127.0.0.1:{g.port}", f"rdma://127.0.0.1:{g.rdma_port}"
        loads = [
            (tcp, "--mix", "randread:60,randwrite:20,getattr:20", "--file-size", "4m",
             "--duration", "6", "--qd", "4"),
            (rdma, "--workload", "randread", "--file", "r.dat", "--file-size", "4m",
             "--duration", "6", "--qd", "4"),
            (tcp, "--nfs", "4.1", "--workload", "randread", "--file", "v4.dat", "--file-size", "4m",
             "--duration", "6"),
        ]
        errors = []

        def go(args):
            try:
                run_bench(*args)
            except AssertionError as e:
                errors.append(str(e))

        stop = threading.Event()

        def misses():
            try:
                provoke_errors(g, stop)
            except (AssertionError, OSError) as e:
                errors.append(f"provoke_errors: {e!r}")

        def second_client():
            try:
                with BoundClient("127.0.0.2", port=g.port) as c:
                    root = c.mount("/b")
                    end = time.monotonic() + 6
                    while time.monotonic() < end:
                        c.getattr(root).check()
            except Exception as e:  # noqa: BLE001 - reported with the bench errors
                errors.append(f"127.0.0.2 on /b: {e!r}")

        threads = [threading.Thread(target=go, args=(a,)) for a in loads]
        threads.append(threading.Thread(target=second_client))
        threads.append(threading.Thread(target=misses))
        for t in threads:
            t.start()
        # A moment inside the load with a full rate window of scrapes behind it.
        time.sleep(5)
        at = time.time()
        for t in threads[:-1]:
            t.join()
        stop.set()
        threads[-1].join()
        assert not errors, errors
        time.sleep(1.5)    # the scrape that covers `at`
        yield prom, at
    finally:
        prom.stop()


def test_every_panel_query_returns_data(loaded):
    prom, at = loaded
    empty, zero, n = [], [], 0
    for uid, title, expr in panels():
        n += 1
        result = prom.query(expand(expr), at)
        if not result:
            empty.append(f"{uid} / {title}: {expr}")
            continue
        if (uid, title) in MUST_BE_POSITIVE:
            values = [float(r["value"][1]) for r in result]
            if not any(v > 0 and math.isfinite(v) for v in values):
                zero.append(f"{uid} / {title}: {values}")
    assert n >= 40, n
    assert not empty, "queries without data:\n" + "\n".join(empty)
    assert not zero, "load panels at zero under load:\n" + "\n".join(zero)
