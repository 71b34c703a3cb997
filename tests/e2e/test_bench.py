"""`bench` against the gateway: verified reads, and the JSON it prints."""
import json
import os
import subprocess
from pathlib import Path

BENCH = Path(os.environ.get("BENCH_BIN", Path(__file__).resolve().parents[2] / "target/release/bench"))


def run_bench(gw, *args):
    r = subprocess.run([str(BENCH), "--target", f"tcp://127.0.0.1:{gw.port}", "--json", *args],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_bench_verified_random_and_sequential_reads(gw):
    assert BENCH.exists(), f"build bench first: {BENCH}"
    for wl, qd in (("randread", 8), ("seqread", 4)):
        out = run_bench(gw, "--workload", wl, "--qd", str(qd), "--ops", "3000", "--size-mib", "8",
                        "--file", "b.dat", "--verify")
        assert out["ops"] == 3000 and out["errors"] == 0, out
        assert out["p50_us"] > 0 and out["ops_per_s"] > 0


def test_bench_writes_then_reads_back(gw):
    out = run_bench(gw, "--workload", "seqwrite", "--bs", "65536", "--ops", "256", "--file", "w.dat")
    assert out["ops"] == 256 and out["errors"] == 0
    with gw.client() as c:
        fh = c.lookup(c.mount("/"), "w.dat").check().fh
        assert c.getattr(fh).check().attr.size == 256 * 65536
