"""Helpers shared by the stats and sweep suites: the tool binaries, bench runs that
read both bench JSON shapes, and a tiny Prometheus text parser."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = Path(os.environ.get("BENCH_BIN", REPO / "target/release/bench"))
TOOLS = Path(os.environ.get("TOOLS_BIN", BENCH.parent / "nfsgw-tools"))

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s+(\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"')


def bench(target: str, *args, timeout: int = 300) -> dict:
    r = subprocess.run([str(BENCH), "--target", target, "--json", *args],
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"bench {args} -> {r.returncode}\nstdout: {r.stdout[-2000:]}\nstderr: {r.stderr[-2000:]}"
    text = r.stdout
    return json.loads(text[text.index("{"):text.rindex("}") + 1])


def total(out: dict, key: str):
    """A figure from bench JSON: `total.<key>` (schema nfsgw-bench/1) or the flat key."""
    if "total" in out:
        return out["total"][key]
    return out[key]


class Metrics:
    def __init__(self, text: str):
        self.text = text
        self.samples = []
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            m = _SAMPLE.match(line)
            assert m, f"not a sample line: {line!r}"
            labels = dict(_LABEL.findall(m.group(3) or ""))
            self.samples.append((m.group(1), labels, float(m.group(4))))

    def sum(self, name: str, **labels) -> float:
        return sum(v for n, l, v in self.samples
                   if n == name and all(l.get(k) == str(x) for k, x in labels.items()))

    def series(self, name: str):
        return [(l, v) for n, l, v in self.samples if n == name]


def scrape(port: int) -> Metrics:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return Metrics(r.read().decode())


def wait_idle(port: int, baseline: Metrics, timeout: float = 15.0) -> Metrics:
    """Scrapes until nothing is in flight and pool occupancy is back to `baseline`."""
    deadline = time.monotonic() + timeout
    while True:
        m = scrape(port)
        pools_back = all(m.sum("nfsgw_pool_buffers_in_use", **l) == v
                         for l, v in baseline.series("nfsgw_pool_buffers_in_use"))
        idle = (m.sum("nfsgw_parked_requests") == 0 and m.sum("nfsgw_rdma_credits_in_use") == 0)
        if pools_back and idle:
            return m
        if time.monotonic() > deadline:
            raise AssertionError("gateway not idle: pools "
                                 f"{m.series('nfsgw_pool_buffers_in_use')} vs "
                                 f"{baseline.series('nfsgw_pool_buffers_in_use')}, parked "
                                 f"{m.sum('nfsgw_parked_requests')}, credits {m.sum('nfsgw_rdma_credits_in_use')}")
        time.sleep(0.1)
