"""NFSv3 over RPC-over-RDMA (soft provider) between two processes: `bench` drives the
gateway directly over `rdma://` with verified data at several block sizes (WRITE data
pulled from read chunks, READ data pushed into write chunks), and a client that dies in
the middle of a transfer leaves the gateway serving. The libnfs and Python-client suites
also run over RDMA through the bridge (`OVER_RDMA` in test_ops.py and
test_libnfs_utils.py)."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import Gateway

BENCH = Path(os.environ.get("BENCH_BIN", Path(__file__).resolve().parents[2] / "target/release/bench"))


def bench(gw, *args, timeout=300):
    r = subprocess.run([str(BENCH), "--target", f"rdma://127.0.0.1:{gw.rdma_port}", "--json", *args],
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"bench {args} -> {r.returncode}\nstdout: {r.stdout[-2000:]}\nstderr: {r.stderr[-2000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture
def gw_rdma(gw_factory):
    return gw_factory(backend="fs+rdma")


def test_256mib_written_and_read_back_verified_through_chunks(gw_rdma):
    # 1 MiB WRITEs: data pulled by RDMA Read from read chunks, verified read-back.
    out = bench(gw_rdma, "--workload", "seqwrite", "--bs", str(1 << 20), "--ops", "256", "--qd", "4",
                "--file", "big.dat", "--size-mib", "256", "--verify")
    assert out["total"]["ops"] == 256 and out["total"]["errors"] == 0, out
    on_disk = gw_rdma.data_dir / "big.dat"
    assert on_disk.stat().st_size == 256 << 20
    # Reads at three block sizes through write chunks, every byte checked.
    for bs, ops in ((4096, 4000), (65536, 2000), (1 << 20, 256)):
        out = bench(gw_rdma, "--workload", "seqread", "--bs", str(bs), "--ops", str(ops), "--qd", "8",
                    "--file", "rd.dat", "--size-mib", "256", "--verify")
        assert out["total"]["ops"] == ops and out["total"]["errors"] == 0, (bs, out)


def test_random_writes_at_several_block_sizes_verified(gw_rdma):
    for bs in (4096, 65536):
        out = bench(gw_rdma, "--workload", "randwrite", "--bs", str(bs), "--ops", "500", "--qd", "8",
                    "--file", f"rw{bs}.dat", "--size-mib", "8", "--verify")
        assert out["total"]["ops"] == 500 and out["total"]["errors"] == 0, (bs, out)


def test_null_and_getattr_over_rdma(gw_rdma):
    for wl in ("null", "getattr"):
        out = bench(gw_rdma, "--workload", wl, "--ops", "20000", "--qd", "16")
        assert out["total"]["ops"] == 20000 and out["total"]["errors"] == 0, out


def test_r8166_81_client_killed_mid_transfer_then_gateway_still_serves_rdma_and_tcp(gw_rdma):
    p = subprocess.Popen([str(BENCH), "--target", f"rdma://127.0.0.1:{gw_rdma.rdma_port}",
                          "--workload", "seqwrite", "--bs", str(1 << 20), "--qd", "8", "--duration", "30",
                          "--file", "killed.dat"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.5)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert gw_rdma.alive()
    out = bench(gw_rdma, "--workload", "randread", "--bs", "65536", "--ops", "500", "--qd", "8",
                "--file", "after.dat", "--size-mib", "8", "--verify")
    assert out["total"]["errors"] == 0
    # TCP is served all along, directly (RFC 8166 §8.2.2.1, R8166-81).
    with Gateway.client(gw_rdma) as c:
        assert c.null().accept_stat == 0


def test_rdma_disabled_by_default_and_verbs_needs_the_feature(gw_factory):
    g = gw_factory(backend="fs", start=False, extra={"rdma": {"provider": "verbs"}})
    r = subprocess.run([str(g.binary), "--config", str(g.config_path)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode != 0
    assert "--features rdma" in (r.stderr + r.stdout)


def test_second_gateway_on_the_same_rdma_address_is_refused(gw_rdma, gw_factory):
    g = gw_factory(backend="fs", start=False,
                   extra={"rdma": {"provider": "soft", "listen": f"127.0.0.1:{gw_rdma.rdma_port}"}})
    r = subprocess.run([str(g.binary), "--config", str(g.config_path)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode != 0
    assert "rdma.listen" in (r.stderr + r.stdout)
