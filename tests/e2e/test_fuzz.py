"""`nfsgw-tools fuzz` in CI mode (docs/fuzzing.md): each campaign, with the fixed CI seed,
against the real gateway binary that the fuzzer starts with a temporary config. The
fuzzer itself checks, after every call and after the campaign, that the gateway is alive,
logged no `panicked`, still serves the canary byte-exact and is back to its baseline
pool buffers and RSS; it exits non-zero with the seed and the failing call in hex.

The page cache is on (cache.size_mib = 16, the fuzzer's default) in one run and off in
the other, so READs reach both the reactor's cache and the backend. Campaign `v4`
(NFSv4.1 COMPOUNDs on sessions, a share of them mutated) also checks every COMPOUND4res
against the shape RFC 8881 §15.2 gives it; 10 000 of them take under 10 s. Campaign
`rdma` (RPC-over-RDMA over the `soft` provider: hostile transport headers, chunk lists
and peer behaviour) checks every message the gateway sends against RFC 8166 §4 and
that a fresh RDMA connection is served afterwards; 10 000 messages take 10-20 s."""

import os
import re
import subprocess

import pytest

from conftest import find_gateway_bin
from statsutil import TOOLS

# The fuzzer's default seed and call count (docs/fuzzing.md "CI mode and night mode").
CI_SEED = 3
CI_CALLS = 10000


@pytest.mark.parametrize("campaign,cache_mib", [("structured", 16), ("structured", 0),
                                                ("mutate", 16), ("v4", 16), ("v4", 0),
                                                ("rdma", 16)])
def test_fuzz_campaign(campaign, cache_mib, tmp_path):
    if not TOOLS.is_file():
        pytest.fail(f"{TOOLS} not built (cargo build --release -p tools)", pytrace=False)
    cmd = [str(TOOLS), "fuzz", "--seed", str(CI_SEED), "--calls", str(CI_CALLS),
           "--campaign", campaign, "--cache-mib", str(cache_mib),
           "--gateway", str(find_gateway_bin()), "--workdir", str(tmp_path),
           "--core", os.environ.get("E2E_CORE", "0")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"{' '.join(cmd)} -> {r.returncode}\n{out[-12000:]}"
    assert "fuzz: OK" in r.stdout and f"seed {CI_SEED}" in r.stdout, out
    assert f"{campaign}: {CI_CALLS} calls" in r.stdout, out
    assert "healthy" in r.stdout, out


KILLER = """#!/bin/sh
# Starts the real gateway, then SIGKILLs it once the structured campaign is under way
# (its work area is complete), as a crash in the middle of a campaign would.
"$REAL_GATEWAY" "$@" &
pid=$!
data="$(dirname "$2")/data"
i=0
while [ ! -e "$data/fz-{seed}-structured/l0" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done
sleep 0.3
kill -9 $pid
wait $pid
exit 137
"""


def test_fuzz_reports_a_gateway_that_dies(tmp_path):
    """A gateway that dies mid-campaign makes the fuzzer exit 1 with the seed, the call
    in hex and the line that reproduces it (the failure path CI relies on)."""
    if not TOOLS.is_file():
        pytest.fail(f"{TOOLS} not built (cargo build --release -p tools)", pytrace=False)
    wrapper = tmp_path / "dying-gateway.sh"
    wrapper.write_text(KILLER.replace("{seed}", str(CI_SEED)))
    wrapper.chmod(0o755)
    env = dict(os.environ, REAL_GATEWAY=str(find_gateway_bin()))
    cmd = [str(TOOLS), "fuzz", "--seed", str(CI_SEED), "--calls", "200000",
           "--campaign", "structured", "--cache-mib", "0", "--call-timeout-ms", "5000",
           "--gateway", str(wrapper), "--workdir", str(tmp_path),
           "--core", os.environ.get("E2E_CORE", "0")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out[-4000:]
    assert f"FUZZ FAILURE: seed {CI_SEED} campaign structured call #" in r.stderr, out[-4000:]
    assert re.search(r"call \(hex, record mark first\): 8[0-9a-f]{7}[0-9a-f]+", r.stderr), out[-4000:]
    assert re.search(rf"reproduce: nfsgw-tools fuzz --seed {CI_SEED} --campaign structured --calls \d+",
                     r.stderr), out[-4000:]
    assert "gateway directory kept" in r.stdout, out[-4000:]
