#!/usr/bin/env python3
"""A big fs directory listed through the gateway: RSS before and after, and LOOKUP
rates in it against a small one (docs/performance.md "Big directories and trees").

    tools/perf/bigdir-rss.py [--n 1000000] [--gateway BIN] [--keep DIR] [--lookups 20000]

Makes N empty files straight in a fresh fs export (or reuses --keep DIR when it
already holds them), starts the gateway (tests/e2e/conftest.py's configuration: one
reactor, adaptive idle), lists the directory completely over NFSv3 READDIR, then
READDIRPLUS, printing the gateway's VmRSS after each and the
entries per second; then LOOKUPs, pipelined (64 in flight), of random names in it,
of the same 10 names in it, and of the 10 names of a 10-entry directory, as calls per
second and the gateway's CPU per call: the second against the third is the cost of the
directory's size, the first against the second that of touching N distinct names.
The client is the e2e suite's Python client, so rates are the client's as much as the
server's: compare them with each other, not with bench's.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "e2e"))

import nfsclient as N  # noqa: E402
from conftest import Gateway, rss_kib  # noqa: E402
from test_big_dirs import v3_names  # noqa: E402


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def maps(pid: int) -> dict:
    """Resident KiB per mapping: {"start-end name": kib}."""
    out, cur = {}, None
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split()
        if "-" in head[0] and not head[0].endswith(":"):
            cur = f"{head[0]} {head[5] if len(head) > 5 else '[anon]'}"
        elif head[0] == "Rss:":
            out[cur] = out.get(cur, 0) + int(head[1])
    return out


def grown(before: dict, after: dict, top: int = 4) -> str:
    """The mappings whose resident size grew most."""
    d = sorted(((after[k] - before.get(k, 0), k) for k in after), reverse=True)[:top]
    return ", ".join(f"{k.split()[1]} {k.split()[0][:12]} +{v}" for v, k in d if v > 0)


def fill(d: Path, n: int) -> None:
    have = sum(1 for _ in os.scandir(d))
    for i in range(have, n):
        os.close(os.open(d / f"entry-{i:07d}", os.O_CREAT | os.O_WRONLY, 0o644))


def lookups(gw, c, dirfh: bytes, names: list, count: int) -> tuple:
    """`count` LOOKUPs of random `names` in `dirfh`: (calls/s, server CPU µs per call)."""
    calls = [(N.NFSPROC3_LOOKUP, N.a_lookup(dirfh, random.choice(names)), N.d_lookup)
             for _ in range(count)]
    cpu0, t0 = cpu_s(gw.proc.pid), time.monotonic()
    for r in c.pipeline(calls, window=64):
        r.check("LOOKUP")
    dt, cpu = time.monotonic() - t0, cpu_s(gw.proc.pid) - cpu0
    return count / dt, cpu / count * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--gateway", default=os.environ.get("GATEWAY_BIN", ""))
    ap.add_argument("--keep", help="work directory kept between runs (its data/ holds the files)")
    ap.add_argument("--lookups", type=int, default=20_000, help="0: none")
    ap.add_argument("--verbose", action="store_true", help="which mappings grew")
    ap.add_argument("--passes", type=int, default=1, help="READDIR listings")
    ap.add_argument("--no-plus", action="store_true", help="READDIR only")
    a = ap.parse_args()
    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="bigdir-"))
    work.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(work / "state", ignore_errors=True)  # a fresh handle table each run
    gw = Gateway(Path(a.gateway), work)
    big = gw.data_dir / "big"
    small = gw.data_dir / "small"
    big.mkdir(exist_ok=True)
    small.mkdir(exist_ok=True)
    t0 = time.monotonic()
    fill(big, a.n)
    fill(small, 10)
    print(f"fill: {a.n} files, {time.monotonic() - t0:.1f} s", flush=True)
    gw.start()
    try:
        with gw.client() as c:
            root = c.mount("/")
            bigfh = c.lookup(root, "big").check("LOOKUP").fh
            smallfh = c.lookup(root, "small").check("LOOKUP").fh
            c.readdir(smallfh, count=4096).check("READDIR")
            base = rss_kib(gw.proc.pid)
            print(f"rss at start: {base} KiB", flush=True)
            runs = [("v3 READDIR", lambda: v3_names(c, bigfh, plus=False))] * a.passes
            if not a.no_plus:
                runs.append(("v3 READDIRPLUS", lambda: v3_names(c, bigfh, plus=True)))
            for what, run in runs:
                m0 = maps(gw.proc.pid)
                t0 = time.monotonic()
                got = run()
                dt = time.monotonic() - t0
                assert len(got) == a.n == len(set(got)), (what, len(got))
                rss = rss_kib(gw.proc.pid)
                print(f"{what}: {a.n / dt:,.0f} entries/s ({dt:.1f} s), "
                      f"rss {rss} KiB (+{rss - base})", flush=True)
                if a.verbose:
                    print(f"  grew: {grown(m0, maps(gw.proc.pid))}", flush=True)
            if not a.lookups:
                return
            names = [f"entry-{i:07d}" for i in range(a.n)]
            ten = names[:10]
            for _ in range(2):  # the first round warms all three (handles, caches)
                rb = lookups(gw, c, bigfh, names, a.lookups)
                rt = lookups(gw, c, bigfh, ten, a.lookups)
                rs = lookups(gw, c, smallfh, ten, a.lookups)
            for what, r in ((f"random names in {a.n:,}", rb), (f"10 names in {a.n:,}", rt),
                            ("10 names in 10", rs)):
                print(f"LOOKUP, {what}: {r[0]:,.0f}/s, {r[1]:.1f} µs CPU/call", flush=True)
            rss = rss_kib(gw.proc.pid)
            print(f"rss at end: {rss} KiB (+{rss - base})", flush=True)
    finally:
        gw.stop()


if __name__ == "__main__":
    main()
