"""`nfsgw-tools sweep`: two tiny variants produce a table, a plot and a config the
gateway accepts that differs from the base only in the varied key; a variant the
gateway refuses is reported and excluded."""

import os
import subprocess
import tomllib
from pathlib import Path

from conftest import find_gateway_bin, free_port
from statsutil import BENCH, TOOLS


def base_config(tmp_path: Path) -> Path:
    core = int(os.environ.get("E2E_CORE", "0"))
    text = f"""# sweep base (e2e)
[engine]
cores = [{core}]
idle = "adaptive"

[pools]
small = 1024

[tcp]
listen = "127.0.0.1:{free_port()}"

[rdma]
provider = "soft"
listen = "127.0.0.1:{free_port()}"
credits = 128

[backend]
kind = "fs"
root = "{tmp_path / 'base-data'}"

[state]
dir = "{tmp_path / 'base-state'}"

[stats]
listen = "127.0.0.1:{free_port()}"

[[exports]]
path = "/"
clients = ["127.0.0.0/8"]
access = "rw"
squash = "none"
"""
    p = tmp_path / "base.toml"
    p.write_text(text)
    return p


def sweep(tmp_path, *args, timeout=600):
    assert TOOLS.exists(), f"build the tools crate first: {TOOLS}"
    return subprocess.run([str(TOOLS), "sweep", "--gateway", str(find_gateway_bin()),
                           "--bench-bin", str(BENCH), *args],
                          capture_output=True, text=True, timeout=timeout, cwd=tmp_path)


def flatten(d, prefix=""):
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def test_sweep_two_variants_writes_a_valid_tuned_config(tmp_path):
    base = base_config(tmp_path)
    out = tmp_path / "configs" / "tuned.toml"
    r = sweep(tmp_path, "--base", str(base), "--vary", "rdma.credits=16,64",
              "--transport", "rdma", "--bench", "--workload getattr --ops 500", "--out", str(out))
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    lines = [l for l in r.stdout.splitlines() if l.split() and l.split()[0].isdigit()]
    assert any("rdma.credits=16" in l for l in lines) and any("rdma.credits=64" in l for l in lines), r.stdout
    assert sum("best" in l for l in lines if "rdma.credits=" in l) == 1, r.stdout
    svg = out.with_suffix(".svg")
    assert svg.stat().st_size > 0 and svg.read_text().count("<rect x=") == 2
    check = subprocess.run([str(find_gateway_bin()), "--check-config", str(out)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    tuned = flatten(tomllib.loads(out.read_text()))
    orig = flatten(tomllib.loads(base.read_text()))
    diff = {k for k in set(tuned) | set(orig) if tuned.get(k) != orig.get(k)}
    assert diff <= {"rdma.credits"}, diff
    assert tuned["rdma.credits"] in (16, 64)
    # The ports and directories are the base's, not the sweep's private ones.
    assert tuned["tcp.listen"] == orig["tcp.listen"] and tuned["state.dir"] == orig["state.dir"]


def test_refused_variant_is_reported_and_excluded(tmp_path):
    base = base_config(tmp_path)
    out = tmp_path / "tuned.toml"
    r = sweep(tmp_path, "--base", str(base), "--vary", "pools.small=0,512",
              "--bench", "--workload getattr --ops 300", "--out", str(out), "--objective", "p99")
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    bad = next(l for l in r.stdout.splitlines() if "pools.small=0" in l)
    assert "failed" in bad and "pools.small" in bad, bad
    good = next(l for l in r.stdout.splitlines() if "pools.small=512" in l)
    assert "best" in good, good
    assert tomllib.loads(out.read_text())["pools"]["small"] == 512
