"""The s3 backend on a real distributed store: a three-node Garage cluster on loopback,
replication factor 3 (tests/e2e/garage.py, tools/garage/cluster.sh).

What moto cannot show: a node of the store killed, restarted or stalled while NFS
clients write and read through the gateway. The promise under test:
  * every COMMITted byte is in the bucket, byte-exact, whatever happened to one node;
  * the reactor never waits on the store: NULL and cached GETATTR are answered quickly
    throughout (a stalled store is the workers' problem, not the clients');
  * a client sees at most NFS3ERR_JUKEBOX (retry later), and goes on when it retries;
  * with every node as an endpoint (`backend.s3.endpoints`), losing the node the gateway
    talks to first is invisible beyond JUKEBOX.
Plus object-level truth both ways, and several gateways on one bucket (the same handles,
a client moving between them).

The cluster is one per session (about 2 s to start once the binary is cached); each test
gets fresh buckets, and a test that kills or stalls nodes brings them back before it ends.
Workloads are small (16-32 MiB) and store timeouts short so that faults show in seconds.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path

import pytest

import nfsclient as N
from conftest import handle_key_file
from garage import multi_endpoint_supported
from s3server import get_bytes, head, list_keys

pytestmark = pytest.mark.garage

MiB = 1 << 20

# Short store timeouts: a dead or stalled node shows within a few seconds. flush_idle_s is
# long so that only COMMIT uploads (the test decides when the store is touched).
FAULT_CFG = dict(timeout_s=2, connect_timeout_s=1, retries=2, flush_idle_s=60)

needs_failover = pytest.mark.skipif(
    not multi_endpoint_supported(),
    reason="needs backend.s3.endpoints (failover between nodes, the s3 slice): this gateway "
           "talks to one endpoint, so losing that node stops it")


def gateway(gw_factory, cluster, bucket, start=True, endpoints=None, extra=None, own_key=False, **over):
    """A gateway on `bucket` of the cluster, every node an endpoint (endpoints[0] first).

    own_key: a `handle_key_file` of its own (conftest.handle_key_file), for a test with one
    gateway on its bucket that is not about the key: no 2 s agreement at its start (the
    Garage group is the parallel pass's longest worker). The tests of several gateways on
    one bucket leave it off: they check the agreement through the bucket."""
    if own_key:
        over["handle_key_file"] = handle_key_file(Path(tempfile.mkdtemp(dir=cluster.workdir)))
    cfg = cluster.gateway_s3_config(bucket, endpoints=endpoints, **over)
    return gw_factory(backend="garage", s3=cfg, start=start, backend_opts={"workers": 4},
                      extra=extra or {})


@pytest.fixture
def bucket(garage_cluster, request):
    return garage_cluster.new_bucket(request.node.name[:20])   # dropped with the cluster


@pytest.fixture
def s3(garage_cluster):
    """boto3 to node 2 (index 1): a node the fault tests leave alone."""
    return garage_cluster.client(garage_cluster.endpoints[1])


@pytest.fixture
def healed(garage_cluster):
    """Whatever a test did to the nodes, they are all up and resumed afterwards."""
    yield garage_cluster
    garage_cluster.heal()


def make_file(c, dirfh, name, data, stable=N.UNSTABLE, commit=True):
    fh = c.create(dirfh, name, 0o644).check("CREATE " + name).fh
    if data:
        c.write_all(fh, data, chunk=MiB, stable=stable, window=8)
    if commit:
        c.commit(fh).check("COMMIT " + name)
    return fh


def retry_jukebox(fn, what, timeout=60.0, seen=None):
    """Call fn() (an NFS call returning a Res) until it is not JUKEBOX, as a client does.
    Any status other than OK/JUKEBOX fails; the JUKEBOXes go into `seen`."""
    deadline = time.monotonic() + timeout
    while True:
        r = fn()
        if r.status != N.NFS3ERR_JUKEBOX:
            assert r.ok, f"{what} -> {N.status_name(r.status)}"
            return r
        if seen is not None:
            seen.append(what)
        assert time.monotonic() < deadline, f"{what} still JUKEBOX after {timeout}s"
        time.sleep(0.2)


def assert_object(s3, bucket, key, want: bytes):
    got = get_bytes(s3, bucket, key)
    assert got == want, f"s3://{bucket}/{key}: {len(got)} bytes, expected {len(want)} (or different bytes)"


class Prober:
    """A second client that keeps asking NULL and GETATTR of a (cached) file while a fault
    runs. NULL never leaves the reactor: its latency shows whether the reactor waited on
    the store. GETATTR is answered from the reactor's cache for up to 1 s, then by a
    worker that asks the store: OK, or JUKEBOX (only when `jukebox_ok`) while the store
    cannot answer."""

    def __init__(self, g, fh, jukebox_ok=False):
        self.g, self.fh, self.jukebox_ok = g, fh, jukebox_ok
        self.null_worst = 0.0
        self.getattr_worst = 0.0
        self.calls = 0
        self.jukebox = 0
        self.errors: list = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        try:
            with self.g.client(timeout=30) as c:
                while not self._stop.is_set():
                    t = time.monotonic()
                    c.null()
                    t1 = time.monotonic()
                    st = c.getattr(self.fh).status
                    t2 = time.monotonic()
                    self.null_worst = max(self.null_worst, t1 - t)
                    self.getattr_worst = max(self.getattr_worst, t2 - t1)
                    self.calls += 1
                    if st == N.NFS3ERR_JUKEBOX and self.jukebox_ok:
                        self.jukebox += 1
                    elif st != N.NFS3_OK:
                        self.errors.append(N.status_name(st))
                    time.sleep(0.05)
        except Exception as e:  # a timeout here is the failure this class exists to catch
            self.errors.append(repr(e))

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *a):
        self._stop.set()
        self._t.join(40)

    def check(self, null_bound=1.0, getattr_bound=2.0):
        assert not self.errors, f"NULL/GETATTR failed during the fault: {self.errors[:5]}"
        assert self.calls > 3, f"only {self.calls} probes answered"
        assert self.null_worst < null_bound, \
            f"a NULL took {self.null_worst:.2f}s during the fault: the reactor waited on the store"
        assert self.getattr_worst < getattr_bound, f"a GETATTR took {self.getattr_worst:.2f}s during the fault"


# ---------------------------------------------------------------------------- object-level truth


def test_nfs_file_is_a_byte_exact_object_and_s3_objects_appear(gw_factory, garage_cluster, bucket, s3):
    g = gateway(gw_factory, garage_cluster, bucket, own_key=True)
    c = g.client()
    root = c.mount("/")
    d = c.mkdir(root, "dir", 0o755).check().fh
    big = os.urandom(32 * MiB + 12345)            # multipart (8 MiB parts) + a tail
    small = os.urandom(1000)
    make_file(c, d, "big.bin", big)
    make_file(c, root, "small.txt", small)
    # read back through another node than the gateway's first endpoint
    assert_object(s3, bucket, "dir/big.bin", big)
    assert_object(s3, bucket, "small.txt", small)
    # the gateway's own objects (".nfsgw-tmp." anywhere in the key) left out
    keys = [k for k in list_keys(s3, bucket, internal=True) if ".nfsgw-tmp." not in k]
    assert sorted(keys) == ["dir/", "dir/big.bin", "small.txt"]
    # the other way: objects put by an S3 client through the third node
    s3c = garage_cluster.client(garage_cluster.endpoints[2])
    put = os.urandom(5 * MiB + 7)
    s3c.put_object(Bucket=bucket, Key="from-s3/obj.bin", Body=put)
    s3c.put_object(Bucket=bucket, Key="from-s3/note.txt", Body=b"hello from s3\n")
    fh = c.lookup_path(root, "from-s3/obj.bin")
    assert c.getattr(fh).check().attr.size == len(put)
    assert c.read_all(fh, len(put)) == put
    names = {e.name for e in c.readdir_all(c.lookup_path(root, "from-s3"))} - {".", ".."}
    assert names == {"obj.bin", "note.txt"}, names
    c.close()


def test_large_rename_and_chmod_copy_part_by_part_on_garage(gw_factory, garage_cluster, bucket, s3):
    """Garage's UploadPartCopy with ranges (moto's is checked in test_s3.py): copies of
    objects over `multipart_copy_over_mib` (CopyObject's 5 GiB limit, 5 MiB here) go part
    by part and keep every byte and the metadata."""
    g = gateway(gw_factory, garage_cluster, bucket, own_key=True, multipart_copy_over_mib=5, copy_part_mib=5)
    c = g.client()
    root = c.mount("/")
    data = os.urandom(12 * MiB + 3)
    make_file(c, root, "big.bin", data)
    c.rename(root, "big.bin", root, "moved.bin").check("RENAME over the copy limit")
    h = head(s3, bucket, "moved.bin")
    assert h is not None and h["ETag"].strip('"').endswith("-3"), h and h["ETag"]
    assert head(s3, bucket, "big.bin") is None
    assert_object(s3, bucket, "moved.bin", data)
    fh = c.lookup(root, "moved.bin").check().fh
    c.setattr(fh, mode=0o600).check("chmod over the copy limit")
    assert head(s3, bucket, "moved.bin")["Metadata"].get("mode") == "100600"
    assert c.getattr(fh).check().attr.mode & 0o7777 == 0o600
    assert_object(s3, bucket, "moved.bin", data)
    assert c.read_all(fh, len(data)) == data
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    c.close()


def test_source_rewritten_during_a_part_copy_fails_the_copy_not_mixes_it(gw_factory, garage_cluster, bucket, s3):
    """Every part copy names the source's ETag (x-amz-copy-source-if-match), which Garage
    checks (moto does not): a source rewritten between two parts fails the copy with
    JUKEBOX and aborts the upload, instead of assembling an object from two versions;
    the client's retry copies the new content."""
    from s3proxy import FaultProxy

    host, port = garage_cluster.endpoints[0].split("://")[1].rsplit(":", 1)
    p = FaultProxy((host, int(port))).start()
    try:
        g = gateway(gw_factory, garage_cluster, bucket, own_key=True, endpoints=[p.endpoint],
                    multipart_copy_over_mib=5, copy_part_mib=5, timeout_s=30)
        c = g.client()
        root = c.mount("/")
        old = os.urandom(12 * MiB)
        make_file(c, root, "src.bin", old)
        # hold the second part copy until an S3 client rewrote the source
        p.stall(60, times=1, method="PUT", path=r"partNumber=2&", then="forward")
        new = os.urandom(12 * MiB)

        def rewrite():
            assert p.wait_for(lambda q: q.injected["stall"] >= 1, timeout=30)
            s3.put_object(Bucket=bucket, Key="src.bin", Body=new)
            p.release()

        t = threading.Thread(target=rewrite, daemon=True)
        t.start()
        r = c.rename(root, "src.bin", root, "dst.bin")
        t.join(60)
        assert r.status == N.NFS3ERR_JUKEBOX, f"RENAME while the source changed -> {N.status_name(r.status)}"
        assert head(s3, bucket, "dst.bin") is None, "an object was assembled from two versions"
        # The abort is sent before the reply, but Garage's upload listing is eventually
        # consistent across its nodes: a loaded CI machine saw it a moment later.
        deadline = time.monotonic() + 15
        while s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
        assert_object(s3, bucket, "src.bin", new)
        # the client retries: the new content moves
        retry_jukebox(lambda: c.rename(root, "src.bin", root, "dst.bin"), "RENAME retried")
        assert_object(s3, bucket, "dst.bin", new)
        assert head(s3, bucket, "src.bin") is None
        c.close()
        g.stop()
    finally:
        p.clear()
        p.stop()


def test_two_gateways_hand_out_identical_handles(gw_factory, garage_cluster, bucket):
    """Started one after the other (the second finds the first's handle key), two gateways
    agree on every handle and accept each other's."""
    g1 = gateway(gw_factory, garage_cluster, bucket)
    g2 = gateway(gw_factory, garage_cluster, bucket, endpoints=garage_cluster.endpoints[::-1])
    c1, c2 = g1.client(), g2.client()
    r1, r2 = c1.mount("/"), c2.mount("/")
    assert r1 == r2, "root handles differ"
    d1 = c1.mkdir(r1, "shared", 0o755).check().fh
    long = "a-name-long-enough-that-the-key-does-not-fit-in-a-handle-" + "x" * 40
    data = os.urandom(300_000)
    fhs = {n: make_file(c1, d1, n, data) for n in ("f.bin", long)}
    assert c2.lookup(r2, "shared").check().fh == d1
    for n, fh in fhs.items():
        assert c2.lookup_path(r2, "shared/" + n) == fh, f"gateways disagree on the handle of {n}"
        assert c2.read_all(fh, len(data)) == data
    c1.close()
    c2.close()


def test_two_gateways_started_together_agree(gw_factory, garage_cluster, bucket, tmp_path):
    """Garage ignores If-None-Match on PutObject, so two first starts racing to create the
    handle key in the bucket cannot be settled by the store: the operator's handle secret
    (`handle_key_file`, the same file on every gateway) makes them agree."""
    if not _supports("handle_key_file"):
        pytest.skip("needs backend.s3.handle_key_file (the s3 slice)")
    key = tmp_path / "handle.key"
    key.write_text(os.urandom(32).hex() + "\n")      # 64 hex digits
    key.chmod(0o600)
    gs = [gateway(gw_factory, garage_cluster, bucket, start=False, handle_key_file=str(key)) for _ in range(2)]
    ts = [threading.Thread(target=g.start) for g in gs]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    c1, c2 = gs[0].client(), gs[1].client()
    r1, r2 = c1.mount("/"), c2.mount("/")
    f = make_file(c1, r1, "f", b"x" * 100)
    assert r1 == r2 and c2.lookup(r2, "f").check().fh == f
    assert c2.getattr(f).status == N.NFS3_OK
    c1.close()
    c2.close()


def _supports(key: str) -> bool:
    """Whether the gateway under test accepts backend.s3.<key> (probed with --check-config)."""
    import subprocess
    import tempfile
    from pathlib import Path
    from conftest import find_gateway_bin
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "c.toml"
        kf = Path(d) / "k"
        kf.write_text(os.urandom(32).hex())
        kf.chmod(0o600)
        p.write_text(f'[backend]\nkind = "s3"\n[backend.s3]\nbucket = "b"\nendpoint = "http://127.0.0.1:1"\n'
                     f'allow_http = true\n{key} = "{kf}"\n[state]\ndir = "{d}"\n[[exports]]\npath = "/"\n')
        return subprocess.run([str(find_gateway_bin()), "--check-config", str(p)],
                              capture_output=True, timeout=30).returncode == 0


# ---------------------------------------------------------------------------- faults on the store


def _writer(g, files, committed, seen, stop_after=None):
    """Writes `files` (name -> bytes) in 1 MiB UNSTABLE WRITEs, COMMITs each (JUKEBOX
    retried), and records what was COMMITted."""
    with g.client(timeout=60) as c:
        root = c.mount("/")
        for name, data in files.items():
            fh = retry_jukebox(lambda: c.create(root, name, 0o644), "CREATE", seen=seen).fh
            for off in range(0, len(data), MiB):
                retry_jukebox(lambda: c.write(fh, off, data[off:off + MiB], N.UNSTABLE), "WRITE", seen=seen)
            retry_jukebox(lambda: c.commit(fh), "COMMIT", seen=seen)
            committed[name] = (fh, data)


@pytest.mark.parametrize("victim", [
    pytest.param(1, id="other-node"),
    pytest.param(0, id="first-endpoint", marks=needs_failover),
])
def test_node_killed_during_writes_then_restarted(gw_factory, healed, bucket, s3, victim):
    cluster = healed
    g = gateway(gw_factory, cluster, bucket, own_key=True, **FAULT_CFG)
    c = g.client()
    root = c.mount("/")
    hot = make_file(c, root, "hot", b"h" * 4096)
    c.getattr(hot).check()
    files = {f"w{i}.bin": os.urandom(4 * MiB) for i in range(8)}       # 32 MiB in all
    committed: dict = {}
    seen: list = []
    w = threading.Thread(target=_writer, args=(g, files, committed, seen), daemon=True)
    with Prober(g, hot) as probe:
        w.start()
        t0 = time.monotonic()
        while len(committed) < 2:
            assert w.is_alive() and time.monotonic() - t0 < 60, f"writer stuck: {len(committed)} files"
            time.sleep(0.05)
        cluster.kill(victim)
        while len(committed) < 5 and w.is_alive():
            time.sleep(0.05)
        # the node comes back (healing: it rejoins and catches up) while writes go on
        cluster.restart(victim)
        w.join(120)
        assert not w.is_alive(), "writer did not finish within 120 s"
    probe.check()
    assert sorted(committed) == sorted(files), f"committed only {sorted(committed)}; JUKEBOXes {len(seen)}"
    # every COMMITted byte, byte-exact: over NFS and as objects
    for name, (fh, data) in committed.items():
        assert c.read_all(fh, len(data)) == data, name
        assert_object(s3, bucket, name, data)
    # the restarted node takes part again: with another node down, writes need its vote
    other = 2 if victim != 2 else 1
    cluster.kill(other)
    late = os.urandom(MiB)
    fh = retry_jukebox(lambda: c.create(root, "late.bin", 0o644), "CREATE").fh
    c.write(fh, 0, late, N.UNSTABLE).check()
    retry_jukebox(lambda: c.commit(fh), "COMMIT late")
    s3v = cluster.client(cluster.endpoints[victim])
    assert_object(s3v, bucket, "late.bin", late)
    c.close()


@pytest.mark.parametrize("victim", [
    pytest.param(1, id="other-node"),
    pytest.param(0, id="first-endpoint", marks=needs_failover),
])
def test_node_killed_during_reads(gw_factory, healed, bucket, s3, victim):
    cluster = healed
    data = os.urandom(32 * MiB)
    s3.put_object(Bucket=bucket, Key="big.bin", Body=data)
    # no page cache: every READ goes to the store (read-ahead blocks still do)
    g = gateway(gw_factory, cluster, bucket, own_key=True, extra={"cache": {"size_mib": 0}}, **FAULT_CFG)
    c = g.client(timeout=60)
    root = c.mount("/")
    fh = c.lookup(root, "big.bin").check().fh
    seen: list = []
    got = bytearray()
    with Prober(g, root) as probe:
        for off in range(0, len(data), MiB):
            if off == 8 * MiB:
                cluster.kill(victim)
            if off == 24 * MiB:
                cluster.restart(victim)
            r = retry_jukebox(lambda: c.read(fh, off, MiB), "READ", seen=seen)
            got += r.data
    probe.check()
    assert bytes(got) == data, "read back differs"
    c.close()


def test_all_nodes_stalled_longer_than_the_timeout(gw_factory, healed, bucket, s3):
    cluster = healed
    over = dict(timeout_s=1, connect_timeout_s=1, retries=1, flush_idle_s=60)
    if multi_endpoint_supported():
        over["retry_budget_s"] = 4.0      # the whole call, all three endpoints included
    g = gateway(gw_factory, cluster, bucket, own_key=True, **over)
    c = g.client(timeout=60)
    root = c.mount("/")
    hot = os.urandom(8192)
    fhot = make_file(c, root, "hot.bin", hot)
    data = os.urandom(3 * MiB)
    fw = make_file(c, root, "w.bin", data, commit=False)
    assert c.read(fhot, 0, 8192).check().data == hot                 # cached now (for 1 s)
    cluster.stop_all_nodes()
    try:
        # JUKEBOX for what needs the store (attributes are revalidated after 1 s, so even
        # the hot file's GETATTR goes to the store then), answered within the store
        # timeout x attempts; NULL answered at once throughout
        with Prober(g, fhot, jukebox_ok=True) as probe:
            with g.client() as other:
                r = other.read(fhot, 0, 8192)      # within the attribute TTL: a cache hit
                assert r.status == N.NFS3_OK and r.data == hot, N.status_name(r.status)
            t0 = time.monotonic()
            r = c.commit(fw)
            took = time.monotonic() - t0
            time.sleep(1.5)
        probe.check(null_bound=1.0, getattr_bound=10.0)
        assert probe.jukebox > 0, "no GETATTR needed the stalled store: the stall was too short"
        assert r.status == N.NFS3ERR_JUKEBOX, N.status_name(r.status)
        assert took < 10, f"COMMIT against a stalled store took {took:.1f}s to answer JUKEBOX"

    finally:
        cluster.cont_all_nodes()
    # recovery: the retried COMMIT lands everything
    retry_jukebox(lambda: c.commit(fw), "COMMIT after resume", timeout=60)
    assert c.read_all(fw, len(data)) == data
    # Right after the resume a node may still answer NoSuchBucket for a bucket made
    # just before the stall (its bucket table catches up within seconds): S3 clients retry
    deadline = time.monotonic() + 20
    while True:
        try:
            assert_object(s3, bucket, "w.bin", data)
            break
        except s3.exceptions.NoSuchBucket:
            assert time.monotonic() < deadline, "bucket still unknown to node 2 20 s after the resume"
            time.sleep(0.5)
    assert head(s3, bucket, "hot.bin")["ContentLength"] == len(hot)
    c.close()


# ---------------------------------------------------------------------------- scale-out


@pytest.mark.serial  # time bounds: needs a quiet CPU (tests/README.md)
def test_three_gateways_one_bucket_client_moves_between_them(gw_factory, garage_cluster, bucket, s3):
    """Three gateways on one bucket, as an operator scales out: a client holding v3
    handles from A uses them on B and C; a file written and COMMITted through A is read
    byte-exact through B once B's cached attributes have expired (README "Several
    gateways on one bucket": about 2 s, the reactor's attribute cache and the s3
    backend's HEAD cache, one second each)."""
    eps = garage_cluster.endpoints
    a = gateway(gw_factory, garage_cluster, bucket)
    b = gateway(gw_factory, garage_cluster, bucket, endpoints=eps[1:] + eps[:1])
    cgw = gateway(gw_factory, garage_cluster, bucket, endpoints=eps[2:] + eps[:2])
    ca, cb, cc = a.client(), b.client(), cgw.client()
    ra = ca.mount("/")
    assert cb.mount("/") == ra and cc.mount("/") == ra
    d = ca.mkdir(ra, "proj", 0o755).check().fh
    v1 = os.urandom(2 * MiB)
    f = make_file(ca, d, "data.bin", v1)
    # A's handles work on B and C as they are (no LOOKUP first: the client just moved)
    for cl in (cb, cc):
        assert cl.getattr(d).check().attr.type == N.NF3DIR
        assert cl.getattr(f).check().attr.size == len(v1)
        assert cl.read_all(f, len(v1)) == v1
    # B now has v1's attributes and pages cached; A rewrites the file (same size) and COMMITs
    v2 = os.urandom(2 * MiB)
    ca.write_all(f, v2, chunk=MiB, stable=N.UNSTABLE, window=8)
    ca.commit(f).check()
    t0 = time.monotonic()
    assert_object(s3, bucket, "proj/data.bin", v2)
    while True:
        got = cb.read_all(f, len(v2))
        if got == v2:
            break
        assert got == v1, "B served bytes that are neither the old nor the new version"
        assert time.monotonic() - t0 < 3.0, "B still serves the old version 3 s after A's COMMIT"
        time.sleep(0.1)
    seen_after = time.monotonic() - t0
    # a file created through C is found through A and B by name, with C's handle
    v3 = os.urandom(100_000)
    f3 = make_file(cc, d, "from-c.bin", v3)
    t0 = time.monotonic()
    while ca.lookup(d, "from-c.bin").status == N.NFS3ERR_NOENT:     # negative entries expire too
        assert time.monotonic() - t0 < 3.0
        time.sleep(0.1)
    for cl in (ca, cb):
        assert cl.lookup(d, "from-c.bin").check().fh == f3
        assert cl.read_all(f3, len(v3)) == v3
    print(f"B saw A's committed rewrite after {seen_after:.2f}s")
    for cl in (ca, cb, cc):
        cl.close()
