"""`[ha]` on Garage (docs/ha.md "Fencing: etcd"): Garage ignores `If-None-Match`, so the
store cannot fence an identity and `[ha]` on it alone is refused at start; with
`ha.etcd` the identity's lease and record live in a real etcd (one member on loopback,
started here) and a standby takes the identity over when the active is killed.

Skips with the Garage tests (no cached binary); skips without the etcd binary outside
CI only (tests/setup.sh installs etcd-server; in CI its absence fails).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request

import pytest

from conftest import free_port
from statsutil import scrape

pytestmark = pytest.mark.garage

LEASE_S = 6
# Every store call below lease_s / 4 (docs/ha.md "Lease and clocks"): 1 s < 1.5 s.
S3_BOUND = dict(timeout_s=1, retry_budget_s=1.0, connect_timeout_s=1)


class Etcd:
    """One etcd member on loopback with free ports and a data dir under `tmp`."""

    def __init__(self, tmp):
        self.port, peer = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        purl = f"http://127.0.0.1:{peer}"
        self.log = open(tmp / "etcd.log", "wb")
        self.proc = subprocess.Popen(
            ["etcd", "--name", "default", "--data-dir", str(tmp / "etcd"),
             "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
             "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
             "--initial-cluster", f"default={purl}"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while self.get("probe") is None:
            assert self.proc.poll() is None, "etcd exited"
            assert time.monotonic() < deadline, "etcd did not answer within 30 s"
            time.sleep(0.1)

    def get(self, key: str):
        """The range answer for `key` (a dict), None when etcd does not answer."""
        body = json.dumps({"key": base64.b64encode(key.encode()).decode()}).encode()
        try:
            with urllib.request.urlopen(f"{self.url}/v3/kv/range", body, timeout=2) as r:
                return json.loads(r.read())
        except OSError:
            return None

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        self.log.close()


@pytest.fixture
def etcd(tmp_path):
    if shutil.which("etcd") is None:
        if os.environ.get("CI"):
            pytest.fail("etcd is not installed (tests/setup.sh installs etcd-server)")
        pytest.skip("no etcd binary (apt-get install etcd-server; tests/setup.sh does)")
    e = Etcd(tmp_path)
    yield e
    e.stop()


def ha_gateway(gw_factory, cluster, bucket, role, ha_extra, start=True):
    stats = free_port()
    g = gw_factory(backend="garage", s3=cluster.gateway_s3_config(bucket, **S3_BOUND),
                   start=start, backend_opts={"workers": 4},
                   extra={"ha": {"identity": "g", "lease_s": LEASE_S, "role": role, **ha_extra},
                          "stats": {"listen": f"127.0.0.1:{stats}"}})
    g.stats_port = stats
    return g


def held(g) -> float:
    try:
        return scrape(g.stats_port).sum("nfsgw_ha_identity_held")
    except OSError:
        return -1


def wait_for(what, cond, timeout):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.1)


def test_ha_on_garage_is_refused_alone_and_fails_over_through_etcd(gw_factory, garage_cluster, etcd):
    bucket = garage_cluster.new_bucket("ha-etcd")
    # The store alone: its conditional writes are ignored, so [ha] is refused.
    alone = ha_gateway(gw_factory, garage_cluster, bucket, "active", {}, start=False)
    with pytest.raises(AssertionError) as refused:
        alone.start()
    assert "does not honour conditional writes" in str(refused.value), str(refused.value)

    on = {"etcd": [etcd.url], "etcd_prefix": "garage-test/"}
    a = ha_gateway(gw_factory, garage_cluster, bucket, "active", on)
    wait_for("the active holds the identity", lambda: held(a) == 1, 20)
    assert "ha: etcd is the fence" in a.log_path.read_text()
    lease = etcd.get("garage-test/ha/g/lease")
    assert lease and lease.get("kvs"), f"no lease in etcd: {lease}"
    b = ha_gateway(gw_factory, garage_cluster, bucket, "standby", on)
    wait_for("the standby watches the holder",
             lambda: "identity held by another gateway" in b.log_path.read_text(), 20)
    assert held(b) == 0

    a.stop(signal.SIGKILL, expect_rc=None)
    t0 = time.monotonic()
    wait_for("the standby takes the identity", lambda: held(b) == 1, LEASE_S * 4)
    took = time.monotonic() - t0
    log = b.log_path.read_text()
    assert "ha: took the identity" in log, log
    # The lease in etcd now names the standby's holder, not the killed active's.
    after = etcd.get("garage-test/ha/g/lease")
    assert after["kvs"][0]["mod_revision"] != lease["kvs"][0]["mod_revision"]
    print(f"kill -9 -> standby holds the identity after {took:.1f} s (lease {LEASE_S} s)")
