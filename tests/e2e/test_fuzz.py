"""`nfsgw-tools fuzz` in CI mode (docs/fuzzing.md): each campaign, with the fixed CI seed,
against the real gateway binary that the fuzzer starts with a temporary config. The
fuzzer itself checks, after every call and after the campaign, that the gateway is alive,
logged no `panicked`, still serves the canary byte-exact and is back to its baseline
pool buffers and RSS; it exits non-zero with the seed and the failing call in hex.

The page cache is on (cache.size_mib = 16, the fuzzer's default) in one run and off in
the other, so READs reach both the reactor's cache and the backend."""

import os
import subprocess

import pytest

from conftest import find_gateway_bin
from statsutil import TOOLS

# The fuzzer's default seed and call count (docs/fuzzing.md "CI mode and night mode").
CI_SEED = 3
CI_CALLS = 10000


@pytest.mark.parametrize("campaign,cache_mib", [("structured", 16), ("structured", 0),
                                                ("mutate", 16)])
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
