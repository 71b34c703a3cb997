"""`bench --nfs 4.1` against the gateway over TCP: a client (EXCHANGE_ID), one session
per connection (CREATE_SESSION, SEQUENCE on every COMPOUND), the file set OPENed,
verified reads and writes, GETATTR, COMMIT, and the teardown (CLOSE, DESTROY_SESSION,
DESTROY_CLIENTID) all succeed; `--nfs 4.1` with an rdma:// target is refused.

NOTE: the NFSv4.1 server (issue 14: sessions in h-sess, OPEN/LOCK in h-opens) is being
written in parallel; the tests that need it pass once those slices are merged into the
branch under test. Until then they fail at EXCHANGE_ID (NFS4ERR_NOTSUPP) -- they are
not skipped, on purpose, so the merge shows whether v4.1 works."""

import subprocess

from conftest import find_bench_bin
from test_bench import bench, tcp

BENCH = find_bench_bin()


def test_nfs41_reads_and_writes_verified(gw_fs):
    j, err = bench(tcp(gw_fs), "--nfs", "4.1", "--workload", "randread", "--files", 2,
                   "--file-size", "256k", "--qd", 4, "--ops", 400, "--verify")
    t = j["total"]
    assert t["ops"] == 400 and t["errors"] == 0 and t["verify_failures"] == 0, (t, err)
    assert t["verified_bytes"] == 400 * 4096, t
    # Two connections (two sessions), writes read back after COMMIT.
    j, err = bench(tcp(gw_fs), "--nfs", "4.1", "--workload", "seqwrite", "--bs", "64k", "--file", "w41.dat",
                   "--file-size", "1m", "--conns", 2, "--qd", 4, "--ops", 16, "--verify")
    t = j["total"]
    assert t["ops"] == 16 and t["errors"] == 0 and t["verify_failures"] == 0, (t, err)
    assert t["verified_bytes"] == 1 << 20, t
    with gw_fs.client() as c:
        fh = c.lookup(c.mount("/"), "w41.dat").check().fh
        assert c.getattr(fh).check().attr.size == 1 << 20


def test_nfs41_mix_with_getattr_for_a_few_seconds(gw_fs):
    j, err = bench(tcp(gw_fs), "--nfs", "4.1", "--mix", "randread:2,randwrite:1,getattr:1", "--files", 2,
                   "--file-size", "512k", "--qd", 8, "--duration", 2, "--verify")
    t = j["total"]
    assert t["ops"] > 0 and t["errors"] == 0 and t["verify_failures"] == 0, (t, err)
    assert set(j["per_op"]) == {"read", "write", "getattr"}, j["per_op"].keys()
    assert 1 <= j["qd"] <= 8


def test_nfs41_over_rdma_is_refused_clearly():
    r = subprocess.run([str(BENCH), "--nfs", "4.1", "--target", "rdma://127.0.0.1:20049", "--ops", "1"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "panicked" not in r.stderr, r.stderr
    assert "--nfs 4.1 needs a tcp:// target" in r.stderr, r.stderr
