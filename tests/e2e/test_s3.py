"""The `s3` backend against a real S3-compatible server (moto) on loopback.

Object-level truth is checked with a plain S3 client (boto3) straight to the server:
what NFS clients COMMITted is exactly what any S3 tool reads, and what S3 tools put is
what NFS clients see. Faults come from the proxy in s3proxy.py between the gateway and
the server (5xx answers, stalls past the gateway's timeout, reset connections).

Mapping under test (README "The s3 backend"): one file = one object with the same key
under `prefix`; a directory = a zero-byte "dir/" marker object (or just a key prefix);
user metadata (x-amz-meta-*) "mode" (octal st_mode, "100644"), "uid", "gid"; objects
without metadata are files 0644 / directories 0755 owned by 0:0; handles are
deterministic from bucket and key; COMMIT replies after the upload completed; retryable
store failures are NFS3ERR_JUKEBOX, never silent corruption.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
import time

import pytest

if os.environ.get("E2E_NO_S3") == "1":
    pytest.skip("E2E_NO_S3=1: no S3 server on this machine", allow_module_level=True)

import nfsclient as N  # noqa: E402
from s3server import get_bytes, head, list_keys  # noqa: E402

MiB = 1 << 20


# ---------------------------------------------------------------------------- helpers


def s3_gateway(gw_factory, s3_server, bucket, endpoint=None, start=True, backend_opts=None, **over):
    """A gateway on `bucket` (through `endpoint`, e.g. a fault proxy, when given)."""
    cfg = s3_server.gateway_s3_config(bucket, endpoint=endpoint, **over)
    return gw_factory(backend="s3", s3=cfg, start=start, backend_opts=backend_opts or {"workers": 4})


def commit_until_ok(c, fh, timeout=30.0):
    """COMMIT as a client does: NFS3ERR_JUKEBOX means "try again later". Returns the OK
    result and the statuses seen before it."""
    seen = []
    deadline = time.monotonic() + timeout
    while True:
        r = c.commit(fh)
        if r.ok:
            return r, seen
        seen.append(r.status)
        assert r.status == N.NFS3ERR_JUKEBOX, f"COMMIT -> {N.status_name(r.status)} (seen {seen})"
        assert time.monotonic() < deadline, f"COMMIT still JUKEBOX after {timeout}s"
        time.sleep(0.2)


def make_file(c, dirfh, name, data, mode=0o644, stable=N.UNSTABLE, commit=True, chunk=MiB):
    fh = c.create(dirfh, name, mode).check("CREATE " + name).fh
    if data:
        c.write_all(fh, data, chunk=chunk, stable=stable, window=8)
    if commit:
        c.commit(fh).check("COMMIT " + name)
    return fh


def nfs_read(c, fh, size):
    return c.read_all(fh, size)


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()[:16]


def assert_object(s3, bucket, key, want: bytes):
    got = get_bytes(s3, bucket, key)
    assert len(got) == len(want) and got == want, (
        f"s3://{bucket}/{key}: {len(got)} bytes sha {sha(got)}, expected {len(want)} bytes sha {sha(want)}")


# ---------------------------------------------------------------------------- object-level truth


def test_committed_files_are_plain_objects_with_metadata(gw_factory, s3_server, s3_bucket, s3):
    g = s3_gateway(gw_factory, s3_server, s3_bucket)
    c = g.client()
    root = c.mount("/")
    # a small file, written UNSTABLE out of order with an overwrite, then COMMITted
    data = bytearray(os.urandom(300_000))
    fh = c.create(root, "small.bin", 0o640).check().fh
    c.write(fh, 100_000, bytes(data[100_000:]), stable=N.UNSTABLE).check()
    c.write(fh, 0, bytes(data[:100_000]), stable=N.UNSTABLE).check()
    patch = os.urandom(5000)
    data[2000:7000] = patch
    c.write(fh, 2000, patch, stable=N.UNSTABLE).check()
    c.commit(fh).check()
    assert_object(s3, s3_bucket, "small.bin", bytes(data))
    h = head(s3, s3_bucket, "small.bin")
    assert h["ContentLength"] == len(data)
    assert h["Metadata"].get("mode") == "100640", h["Metadata"]
    assert (h["Metadata"].get("uid"), h["Metadata"].get("gid")) == ("0", "0"), h["Metadata"]

    # ownership from the caller's credentials; a FILE_SYNC write is durable at its reply
    u = g.client(uid=1000, gid=1001)
    d = c.mkdir(root, "dir", 0o777).check().fh
    uf = u.create(d, "owned.txt", 0o600).check().fh
    u.write(uf, 0, b"file sync data", stable=N.FILE_SYNC).check()
    assert_object(s3, s3_bucket, "dir/owned.txt", b"file sync data")
    m = head(s3, s3_bucket, "dir/owned.txt")["Metadata"]
    assert (m.get("mode"), m.get("uid"), m.get("gid")) == ("100600", "1000", "1001"), m

    # the directory is a zero-byte marker carrying its own mode
    marker = head(s3, s3_bucket, "dir/")
    assert marker is not None, f"no dir/ marker; keys {list_keys(s3, s3_bucket)}"
    assert marker["ContentLength"] == 0
    assert marker["Metadata"].get("mode") == "40777", marker["Metadata"]
    e = c.mkdir(d, "empty", 0o750).check().fh
    assert head(s3, s3_bucket, "dir/empty/") is not None
    assert head(s3, s3_bucket, "dir/empty/")["Metadata"].get("mode") == "40750"
    assert c.readdir_all(e)  # lists . and .. at least, no error

    # SETATTR is reflected in the object's metadata at its reply
    c.setattr(fh, mode=0o604).check()
    c.setattr(uf, uid=2000, gid=2001).check()
    assert head(s3, s3_bucket, "small.bin")["Metadata"].get("mode") == "100604"
    m = head(s3, s3_bucket, "dir/owned.txt")["Metadata"]
    assert (m.get("uid"), m.get("gid")) == ("2000", "2001"), m
    assert_object(s3, s3_bucket, "small.bin", bytes(data))          # content untouched
    # truncation and extension are the object's new content after COMMIT
    c.setattr(fh, size=1000).check()
    c.commit(fh).check()
    assert_object(s3, s3_bucket, "small.bin", bytes(data[:1000]))

    # rename = the object under the new key, none under the old one; remove = gone
    c.rename(root, "small.bin", d, "moved.bin").check()
    c.commit(c.lookup(d, "moved.bin").check().fh).check()
    assert_object(s3, s3_bucket, "dir/moved.bin", bytes(data[:1000]))
    assert head(s3, s3_bucket, "small.bin") is None
    c.remove(d, "moved.bin").check()
    assert head(s3, s3_bucket, "dir/moved.bin") is None
    c.rmdir(d, "empty").check()
    assert head(s3, s3_bucket, "dir/empty/") is None
    # symlinks: an object whose mode carries S_IFLNK and whose content is the target
    c.symlink(d, "ln", "owned.txt").check()
    assert get_bytes(s3, s3_bucket, "dir/ln") == b"owned.txt"
    assert head(s3, s3_bucket, "dir/ln")["Metadata"].get("mode", "").startswith("120")
    assert sorted(list_keys(s3, s3_bucket)) == ["dir/", "dir/ln", "dir/owned.txt"], list_keys(s3, s3_bucket)
    c.close()
    u.close()


def test_large_file_is_uploaded_multipart_byte_exact(gw_factory, s3_server, s3_bucket, s3):
    g = s3_gateway(gw_factory, s3_server, s3_bucket, part_size_mib=8)
    c = g.client()
    root = c.mount("/")
    data = os.urandom(40 * MiB + 12345)
    t0 = time.monotonic()
    fh = make_file(c, root, "big.bin", data, commit=False)
    r = c.commit(fh).check()
    took = time.monotonic() - t0
    h = head(s3, s3_bucket, "big.bin")
    assert h is not None and h["ContentLength"] == len(data)
    # an S3 multipart ETag is "<md5 of part md5s>-<part count>"
    etag = h["ETag"].strip('"')
    assert "-" in etag, f"40 MiB with part_size_mib = 8 was not a multipart upload (ETag {etag})"
    assert int(etag.rsplit("-", 1)[1]) >= 5
    assert_object(s3, s3_bucket, "big.bin", data)
    # and read back over NFS, through the gateway's ranged GETs
    assert nfs_read(c, fh, len(data)) == data
    assert c.getattr(fh).check().attr.size == len(data)
    # a second COMMIT with nothing new is cheap and keeps the verifier
    assert c.commit(fh).check().verf == r.verf
    print(f"40 MiB write+commit {took:.1f}s")
    c.close()


def test_prefix_confines_the_gateway(gw_factory, s3_server, s3_bucket, s3):
    s3.put_object(Bucket=s3_bucket, Key="outside.txt", Body=b"not mine")
    s3.put_object(Bucket=s3_bucket, Key="gw1/inside.txt", Body=b"mine")
    g = s3_gateway(gw_factory, s3_server, s3_bucket, prefix="gw1/")
    with g.client() as c:
        root = c.mount("/")
        names = {e.name for e in c.readdir_all(root)} - {".", ".."}
        assert names == {"inside.txt"}
        assert c.read(c.lookup(root, "inside.txt").check().fh, 0, 100).check().data == b"mine"
        make_file(c, root, "new.txt", b"hello")
        c.mkdir(root, "sub").check()
    assert_object(s3, s3_bucket, "gw1/new.txt", b"hello")
    assert head(s3, s3_bucket, "gw1/sub/") is not None
    assert sorted(list_keys(s3, s3_bucket)) == ["gw1/inside.txt", "gw1/new.txt", "gw1/sub/", "outside.txt"]


def test_objects_put_by_s3_clients_appear_over_nfs(gw_factory, s3_server, s3_bucket, s3):
    big = os.urandom(3 * MiB + 7)
    objs = {
        "top.txt": b"top level\n",
        "a/b/c.bin": big,                 # nested, no markers for a/ or a/b/
        "a/b/d.txt": b"d",
        "a/x.txt": b"",                   # zero-byte file
        "empty/": b"",                    # an empty directory's marker
        "m.txt": b"with metadata",
    }
    for k, v in objs.items():
        meta = {"mode": "100600", "uid": "42", "gid": "43"} if k == "m.txt" else {}
        s3.put_object(Bucket=s3_bucket, Key=k, Body=v, Metadata=meta)
    lm = head(s3, s3_bucket, "top.txt")["LastModified"].timestamp()
    g = s3_gateway(gw_factory, s3_server, s3_bucket)
    c = g.client()
    root = c.mount("/")
    ents = {e.name: e for e in c.readdir_all(root, plus=True)}
    assert set(ents) - {".", ".."} == {"top.txt", "a", "empty", "m.txt"}, sorted(ents)
    t = ents["top.txt"]
    assert t.attr.type == N.NF3REG and stat.S_IMODE(t.attr.mode) == 0o644
    assert (t.attr.uid, t.attr.gid, t.attr.size) == (0, 0, len(objs["top.txt"]))
    assert abs(t.attr.mtime[0] - lm) <= 2, f"mtime {t.attr.mtime} vs LastModified {lm}"
    for dname in ("a", "empty"):
        a = ents[dname].attr
        assert a.type == N.NF3DIR and stat.S_IMODE(a.mode) == 0o755, (dname, a)
    m = ents["m.txt"].attr
    assert (stat.S_IMODE(m.mode), m.uid, m.gid) == (0o600, 42, 43)
    # READDIRPLUS handles work, and equal LOOKUP's
    assert c.lookup(root, "top.txt").check().fh == t.fh
    assert c.read(t.fh, 0, 100).check().data == objs["top.txt"]
    cf = c.lookup_path(root, "a/b/c.bin")
    assert c.getattr(cf).check().attr.size == len(big)
    assert nfs_read(c, cf, len(big)) == big
    r = c.read(cf, MiB + 3, 5000).check()                 # an unaligned range in the middle
    assert r.data == big[MiB + 3:MiB + 5003]
    assert {e.name for e in c.readdir_all(c.lookup_path(root, "a/b"))} - {".", ".."} == {"c.bin", "d.txt"}
    x = c.lookup_path(root, "a/x.txt")
    assert c.getattr(x).check().attr.size == 0
    r = c.read(x, 0, 100).check()
    assert (r.data, r.eof) == (b"", True)
    assert {e.name for e in c.readdir_all(c.lookup(root, "empty").check().fh)} - {".", ".."} == set()

    # an object replaced behind the gateway's back is seen (attributes revalidated by ETag)
    c.read(t.fh, 0, 100).check()
    s3.put_object(Bucket=s3_bucket, Key="top.txt", Body=b"replaced by another S3 client")
    s3.put_object(Bucket=s3_bucket, Key="later.txt", Body=b"new object")
    t0 = time.monotonic()
    while True:
        r = c.read(t.fh, 0, 100)
        if r.ok and r.data == b"replaced by another S3 client":
            break
        assert r.status in (N.NFS3_OK, N.NFS3ERR_STALE), N.status_name(r.status)
        assert time.monotonic() - t0 < 10, f"still {r} 10 s after the object was replaced"
        time.sleep(0.1)
    seen_after = time.monotonic() - t0
    while c.lookup(root, "later.txt").status != N.NFS3_OK:
        assert time.monotonic() - t0 < 10, "an object put by another client never appeared"
        time.sleep(0.1)
    print(f"replacement seen after {seen_after:.2f}s")
    c.close()


# ---------------------------------------------------------------------------- scale-out


def test_two_gateways_hand_out_the_same_handles(gw_factory, s3_server, s3_bucket, s3):
    """Handles are deterministic from bucket and key: two gateways with nothing shared
    but the bucket (each its own state dir, as on two hosts) agree on them."""
    g1 = s3_gateway(gw_factory, s3_server, s3_bucket, start=False)
    g2 = s3_gateway(gw_factory, s3_server, s3_bucket, start=False)
    # first start of both at once on a fresh bucket: whatever they set up there, they agree
    starters = [threading.Thread(target=g.start) for g in (g1, g2)]
    for t in starters:
        t.start()
    for t in starters:
        t.join(30)
    assert g1.alive() and g2.alive(), (g1.log_tail(), g2.log_tail())
    c1, c2 = g1.client(), g2.client()
    r1, r2 = c1.mount("/"), c2.mount("/")
    d1 = c1.mkdir(r1, "shared", 0o755).check().fh
    data = os.urandom(100_000)
    f1 = make_file(c1, d1, "f.bin", data)            # COMMITted through gw1
    f2 = c2.lookup_path(r2, "shared/f.bin")
    # gw1's handle works on gw2 (a client moving between gateways never sees ESTALE)
    g = c2.getattr(f1)
    assert g.status == N.NFS3_OK, f"gw2 answers {N.status_name(g.status)} for gw1's handle of shared/f.bin"
    assert c2.read(f1, 0, len(data)).check().data == data
    assert (r1, c2.lookup(r2, "shared").check().fh, f2) == (r2, d1, f1), \
        "gw1 and gw2 hand out different handles for the same keys"
    c1.close()
    c2.close()


def test_two_gateways_on_one_bucket_share_files(gw_factory, s3_server, s3_bucket, s3):
    g1 = s3_gateway(gw_factory, s3_server, s3_bucket)
    g2 = s3_gateway(gw_factory, s3_server, s3_bucket)
    c1, c2 = g1.client(), g2.client()
    r1, r2 = c1.mount("/"), c2.mount("/")
    d1 = c1.mkdir(r1, "shared", 0o755).check().fh
    data = os.urandom(2 * MiB + 1)
    f1 = make_file(c1, d1, "f.bin", data)            # COMMITted through gw1
    c2.lookup_path(r2, "shared/f.bin")
    assert nfs_read(c2, f1, len(data)) == data
    assert c2.getattr(f1).check().attr.size == len(data)
    # a write through gw2 on gw1's handle, committed, is what gw1 and S3 read
    c2.write(f1, 0, b"GW2!", stable=N.UNSTABLE).check()
    c2.commit(f1).check()
    want = b"GW2!" + data[4:]
    assert_object(s3, s3_bucket, "shared/f.bin", want)
    t0 = time.monotonic()
    while c1.read(f1, 0, 4).check().data != b"GW2!":
        assert time.monotonic() - t0 < 10, "gw1 still serves its old copy 10 s after gw2's COMMIT"
        time.sleep(0.1)
    # exclusive creation is decided by the store, not by one gateway's view
    assert c1.create(d1, "once", 0o644, how=N.GUARDED).status == N.NFS3_OK
    assert c2.create(d1, "once", 0o644, how=N.GUARDED).status == N.NFS3ERR_EXIST
    ex1 = c1.create(d1, "ex", how=N.EXCLUSIVE, verf=b"verf-one")
    ex2 = c2.create(d1, "ex", how=N.EXCLUSIVE, verf=b"verf-two")
    assert (ex1.status, ex2.status) == (N.NFS3_OK, N.NFS3ERR_EXIST), (ex1, ex2)
    # a retransmitted EXCLUSIVE CREATE (same verifier) through the other gateway succeeds
    ex3 = c2.create(d1, "ex", how=N.EXCLUSIVE, verf=b"verf-one")
    assert ex3.status == N.NFS3_OK and ex3.fh in (None, ex1.fh), ex3
    # removal through gw2: gw1's handle goes stale (or the file is gone), never old data
    c2.remove(d1, "f.bin").check()
    assert head(s3, s3_bucket, "shared/f.bin") is None
    t0 = time.monotonic()
    while True:
        st = c1.getattr(f1).status
        if st in (N.NFS3ERR_STALE, N.NFS3ERR_NOENT):
            break
        assert st == N.NFS3_OK
        assert time.monotonic() - t0 < 10, "gw1 still serves a file removed through gw2 after 10 s"
        time.sleep(0.1)
    c1.close()
    c2.close()


# ---------------------------------------------------------------------------- faults


FAULT_CFG = dict(timeout_s=2, connect_timeout_s=2, retries=2, flush_idle_s=60)


@pytest.fixture
def faulty(gw_factory, s3_server, s3_bucket, s3_proxy):
    """A gateway whose S3 traffic goes through the fault proxy (2 s timeout, 2 retries)."""
    g = s3_gateway(gw_factory, s3_server, s3_bucket, endpoint=s3_proxy.endpoint, **FAULT_CFG)
    return g


@pytest.mark.serial  # time bounds: needs a quiet CPU (tests/README.md)
def test_5xx_retried_transparently_then_jukebox_then_recovery(faulty, s3_proxy, s3_bucket, s3):
    p = s3_proxy
    c = faulty.client()
    root = c.mount("/")
    committed = {}
    a = os.urandom(200_000)
    make_file(c, root, "a.bin", a)
    committed["a.bin"] = a

    # a short burst of 503/500 is absorbed by the backend's retries: COMMIT just succeeds
    b = os.urandom(300_000)
    fb = make_file(c, root, "b.bin", b, commit=False)
    p.fail(503, times=1, method="PUT")
    p.fail(500, times=1, method="PUT")
    r = c.commit(fb)
    assert r.status == N.NFS3_OK, f"COMMIT after two transient 5xx -> {N.status_name(r.status)}"
    assert p.injected["503"] == 1 and p.injected["500"] == 1, p.injected
    committed["b.bin"] = b
    assert_object(s3, s3_bucket, "b.bin", b)

    # the store answers only 503 for a while: COMMIT answers JUKEBOX (not OK, not IO)
    p.reset_counts()
    big = os.urandom(12 * MiB)              # multipart with 8 MiB parts
    small = os.urandom(50_000)
    fbig = make_file(c, root, "big.bin", big, commit=False)
    fsmall = make_file(c, root, "small.bin", small, commit=False)
    p.fail(503, times=None)
    t0 = time.monotonic()
    r = c.commit(fsmall)
    took = time.monotonic() - t0
    assert r.status == N.NFS3ERR_JUKEBOX, f"COMMIT while the store answers 503 -> {N.status_name(r.status)}"
    assert took < 20, f"JUKEBOX only after {took:.1f}s"
    assert p.injected["503"] >= 2, f"no retry before JUKEBOX: {p.injected}"
    r = c.commit(fbig)
    assert r.status == N.NFS3ERR_JUKEBOX, N.status_name(r.status)
    assert c.create(root, "new.txt", 0o644).status in (N.NFS3ERR_JUKEBOX, N.NFS3_OK)
    # the gateway keeps answering what it can (the root's attributes) meanwhile
    with faulty.client() as other:
        t1 = time.monotonic()
        other.getattr(root).check()
        assert time.monotonic() - t1 < 1.0
    # reads of data the gateway does not hold: JUKEBOX, never a short or empty READ
    cold = os.urandom(2 * MiB)
    p.clear()
    s3.put_object(Bucket=s3_bucket, Key="cold.bin", Body=cold)
    fcold = c.lookup(root, "cold.bin").check().fh
    p.fail(503, times=None, method="GET")
    r = c.read(fcold, MiB, 65536)
    assert r.status == N.NFS3ERR_JUKEBOX or (r.ok and r.data == cold[MiB:MiB + 65536]), \
        f"READ while every GET answers 503 -> {N.status_name(r.status)}, " \
        f"{len(r.data or b'')} bytes, eof {r.eof}"
    assert r.status == N.NFS3ERR_JUKEBOX, f"READ served {len(r.data)} bytes while every GET failed"
    # recovery: the client's retries succeed and the data is exact
    p.clear()
    assert c.read(fcold, MiB, 65536).check().data == cold[MiB:MiB + 65536]
    commit_until_ok(c, fsmall)
    commit_until_ok(c, fbig)
    committed["small.bin"] = small
    committed["big.bin"] = big
    for k, v in committed.items():
        assert_object(s3, s3_bucket, k, v)
        fh = c.lookup(root, k).check().fh
        assert nfs_read(c, fh, len(v)) == v, f"{k} read back over NFS differs"
    c.close()


@pytest.mark.serial  # time bounds: needs a quiet CPU (tests/README.md)
def test_stalled_store_gives_jukebox_and_the_gateway_keeps_serving(faulty, s3_proxy, s3_bucket, s3):
    p = s3_proxy
    c = faulty.client()
    root = c.mount("/")
    hot = os.urandom(8192)
    fhot = make_file(c, root, "hot.bin", hot)
    assert c.read(fhot, 0, 8192).check().data == hot          # cached now
    cold = os.urandom(2 * MiB)
    s3.put_object(Bucket=s3_bucket, Key="cold.bin", Body=cold)    # never read through the gateway
    fcold = c.lookup(root, "cold.bin").check().fh
    data = os.urandom(100_000)
    fw = make_file(c, root, "w.bin", data, commit=False)

    # every PUT (and part upload) hangs: COMMIT answers JUKEBOX after timeout x attempts,
    # while other clients are answered at once
    p.stall(60, times=None, method="PUT")
    p.stall(60, times=None, method="GET", path=r"/cold\.bin")
    results = {}

    def run(name, fn):
        with faulty.client() as cl:
            cl.mount("/")
            t = time.monotonic()
            results[name] = (fn(cl), time.monotonic() - t)

    th = [threading.Thread(target=run, args=("commit", lambda cl: cl.commit(fw).status)),
          threading.Thread(target=run, args=("read", lambda cl: cl.read(fcold, MiB, 65536).status))]
    for t in th:
        t.start()
    assert p.wait_for(lambda q: q.injected["stall"] >= 2, 10), f"requests did not reach the store: {p.log}"
    with faulty.client() as other:
        for _ in range(5):
            t1 = time.monotonic()
            assert other.getattr(fhot).check().attr.size == len(hot)
            assert other.read(fhot, 0, 8192).check().data == hot
            assert other.getattr(root).ok
            assert time.monotonic() - t1 < 1.0, "a cached GETATTR/READ waited behind a stalled store request"
            other.null()
    for t in th:
        t.join(60)
    assert results["commit"][0] == N.NFS3ERR_JUKEBOX, (N.status_name(results["commit"][0]), results)
    assert results["read"][0] == N.NFS3ERR_JUKEBOX, (N.status_name(results["read"][0]), results)
    # bounded by timeout_s x (retries + 1) plus backoff
    assert results["commit"][1] < 20 and results["read"][1] < 20, results
    p.clear()
    commit_until_ok(c, fw)
    assert_object(s3, s3_bucket, "w.bin", data)
    assert c.read(fcold, MiB, 65536).check().data == cold[MiB:MiB + 65536]
    assert_object(s3, s3_bucket, "hot.bin", hot)
    # a slow (not failing) store: COMMIT waits for the upload, however long it takes
    d2 = os.urandom(60_000)
    f2 = make_file(c, root, "slow.bin", d2, commit=False)
    p.stall(1.5, times=1, method="PUT", then="forward")
    t0 = time.monotonic()
    c.commit(f2).check()
    assert time.monotonic() - t0 >= 1.5, "COMMIT replied before its (delayed) upload could have completed"
    assert_object(s3, s3_bucket, "slow.bin", d2)
    c.close()


def test_reset_connections_and_lost_responses(faulty, s3_proxy, s3_bucket, s3):
    p = s3_proxy
    c = faulty.client()
    root = c.mount("/")
    files = {}
    # one reset per kind of request: retried, the client never notices
    d1 = os.urandom(70_000)
    f1 = make_file(c, root, "r1.bin", d1, commit=False)
    p.reset(times=1, method="PUT")
    c.commit(f1).check()
    files["r1.bin"] = d1
    # a PUT the store applied whose response was lost: the retry is idempotent
    d2 = os.urandom(90_000)
    f2 = make_file(c, root, "r2.bin", d2, commit=False)
    p.reset(times=1, method="PUT", after_forward=True)
    c.commit(f2).check()
    files["r2.bin"] = d2
    # a part upload reset mid-way through a multipart upload
    # (set before writing: parts may be uploaded while the file is written)
    d3 = os.urandom(17 * MiB)
    p.reset(times=1, method="PUT", path=r"partNumber=2")
    f3 = make_file(c, root, "r3.bin", d3, commit=False)
    c.commit(f3).check()
    files["r3.bin"] = d3
    assert p.injected["reset"] == 3, p.injected
    # a GET whose body is cut short: the reader gets the right bytes or an error, never less
    cold = os.urandom(MiB)
    s3.put_object(Bucket=s3_bucket, Key="cold.bin", Body=cold)
    fc = c.lookup(root, "cold.bin").check().fh
    p.truncate(times=1, method="GET")
    r = c.read(fc, 0, 65536)
    assert r.status in (N.NFS3_OK, N.NFS3ERR_JUKEBOX, N.NFS3ERR_IO), r
    if r.ok:
        assert r.data == cold[:len(r.data)] and (len(r.data) == 65536), "truncated GET served short/corrupt data"
    assert nfs_read(c, fc, len(cold)) == cold
    # every GET reset: READ answers JUKEBOX, never a short or empty READ
    cold2 = os.urandom(MiB)
    s3.put_object(Bucket=s3_bucket, Key="cold2.bin", Body=cold2)
    fc2 = c.lookup(root, "cold2.bin").check().fh
    p.reset(times=None, method="GET")
    r = c.read(fc2, 300_000, 4096)
    assert r.status == N.NFS3ERR_JUKEBOX, (
        f"READ while every GET is reset -> {N.status_name(r.status)}, {len(r.data or b'')} bytes, eof {r.eof}")
    p.clear()
    assert c.read(fc2, 300_000, 4096).check().data == cold2[300_000:304_096]
    # every connection reset, for good: JUKEBOX; then recovery
    d4 = os.urandom(40_000)
    f4 = make_file(c, root, "r4.bin", d4, commit=False)
    p.reset(times=None)
    r = c.commit(f4)
    assert r.status == N.NFS3ERR_JUKEBOX, N.status_name(r.status)
    p.clear()
    commit_until_ok(c, f4)
    files["r4.bin"] = d4
    for k, v in files.items():
        assert_object(s3, s3_bucket, k, v)
    assert not [k for k in list_keys(s3, s3_bucket) if k not in files and not k.startswith("cold")], \
        list_keys(s3, s3_bucket)
    # no multipart upload left behind by the retries once everything is committed
    ups = s3.list_multipart_uploads(Bucket=s3_bucket).get("Uploads", [])
    assert not ups, f"abandoned multipart uploads: {[u['Key'] for u in ups]}"
    c.close()


# ---------------------------------------------------------------------------- crash


def test_kill_9_during_writes_keeps_everything_committed(gw_factory, s3_server, s3_bucket, s3):
    g = s3_gateway(gw_factory, s3_server, s3_bucket, flush_idle_s=60, part_size_mib=5)
    c = g.client()
    root = c.mount("/")
    committed, pending, handles = {}, {}, {}
    for i in range(4):
        data = os.urandom([100_000, 3 * MiB, 11 * MiB, 1][i])
        handles[f"c{i}"] = fh = make_file(c, root, f"c{i}", data, commit=False)
        r = c.commit(fh).check()
        committed[f"c{i}"] = data
    verf1 = r.verf
    for i in range(3):
        data = os.urandom([60_000, 2 * MiB, 6 * MiB][i])
        handles[f"u{i}"] = fh = make_file(c, root, f"u{i}", data, commit=False)
        w = c.write(fh, 0, data[:1], stable=N.UNSTABLE).check()
        assert w.verf == verf1
        pending[f"u{i}"] = data
    # an overwrite of a committed file, not committed: the object is the committed
    # content, or (if the gateway happened to upload it early) the overwritten one
    patch = b"X" * 4096
    c.write(handles["c1"], 0, patch, stable=N.UNSTABLE).check()
    patched_c1 = patch + committed["c1"][len(patch):]
    # a writer keeps writing UNSTABLE while the gateway is killed
    stop = threading.Event()
    busy = {"writes": 0}

    def writer():
        with g.client() as wc:
            wc.mount("/")
            fh = wc.create(root, "busy", 0o644).check().fh
            blob = os.urandom(256 * 1024)
            off = 0
            try:
                while not stop.is_set():
                    wc.write(fh, off, blob, stable=N.UNSTABLE)
                    busy["writes"] += 1
                    off += len(blob)
            except (N.RpcError, OSError):
                pass

    t = threading.Thread(target=writer)
    t.start()
    deadline = time.monotonic() + 10
    while busy["writes"] < 8 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert busy["writes"] >= 8, "the writer made no progress"
    g.kill()
    stop.set()
    t.join(10)
    c.close()

    # straight after the crash, before any restart: the bucket already holds every
    # COMMITted file byte-exact
    for k, v in committed.items():
        if k == "c1":
            got = get_bytes(s3, s3_bucket, k)
            assert got in (v, patched_c1), f"c1: {len(got)} bytes, neither committed nor patched content"
            continue
        assert_object(s3, s3_bucket, k, v)
    g.start()
    c = g.client()
    root2 = c.mount("/")
    assert root2 == root
    for k, v in committed.items():
        fh = c.lookup(root2, k).check().fh
        assert fh == handles[k], f"{k}: handle changed across the restart"
        assert nfs_read(c, fh, len(v)) in ((v, patched_c1) if k == "c1" else (v,))
    # the verifier changed: a client resends what it had not seen committed
    w = c.write(handles["u0"], 0, pending["u0"][:1], stable=N.UNSTABLE).check()
    assert w.verf != verf1, "write verifier unchanged after kill -9 and restart"
    pending["c1"] = patched_c1
    for k, v in pending.items():
        c.write_all(handles[k], v if k != "c1" else patch, stable=N.UNSTABLE, window=8)
        r = c.commit(handles[k]).check()
        assert r.verf == w.verf
    committed.pop("c1")
    for k, v in {**committed, **pending}.items():
        assert_object(s3, s3_bucket, k, v)
    c.close()


def test_verifier_changes_at_every_start(gw_factory, s3_server, s3_bucket):
    g = s3_gateway(gw_factory, s3_server, s3_bucket)
    verfs = []
    for i in range(3):
        with g.client() as c:
            root = c.mount("/")
            fh = c.create(root, f"v{i}", 0o644).check().fh
            verfs.append(c.write(fh, 0, b"x", stable=N.UNSTABLE).check().verf)
            assert c.commit(fh).check().verf == verfs[-1]
        if i < 2:
            g.restart()
    assert len(set(verfs)) == 3, verfs


# ---------------------------------------------------------------------------- request economy


def test_sequential_reads_use_read_ahead_blocks_and_readdirplus_stays_correct(
        gw_factory, s3_server, s3_bucket, s3_proxy, s3):
    """A cold file read front to back in 1 MiB READs is fetched in 4 MiB read-ahead
    blocks (a few GETs, not one per READ), byte-exact; a READDIRPLUS page (whose entry
    metadata is fetched concurrently) returns every entry with its real attributes."""
    g = s3_gateway(gw_factory, s3_server, s3_bucket, endpoint=s3_proxy.endpoint, read_block_mib=4)
    data = os.urandom(16 * MiB + 12345)
    s3.put_object(Bucket=s3_bucket, Key="seq.bin", Body=data)
    for i in range(40):
        s3.put_object(Bucket=s3_bucket, Key=f"d/f{i:02}", Body=b"x" * i,
                      Metadata={"mode": "100600", "uid": "7"})
    c = g.client()
    root = c.mount("/")
    fh = c.lookup(root, "seq.bin").check().fh
    s3_proxy.reset_counts()
    got = bytearray()
    while len(got) < len(data):
        r = c.read(fh, len(got), MiB).check()
        got += r.data
        if r.eof:
            break
    assert bytes(got) == data
    gets = s3_proxy.counts["GET"]
    # 17 READs; read-ahead: the first READ is a plain GET, then 4 MiB blocks.
    assert gets <= 8, f"{gets} GETs for 17 sequential 1 MiB READs: read-ahead not used"

    d = c.lookup(root, "d").check().fh
    names, cookie, verf = {}, 0, N.ZERO_VERF
    while True:
        r = c.readdirplus(d, cookie, verf, maxcount=65536).check()
        for e in r.entries:
            name = e.name.decode() if isinstance(e.name, bytes) else e.name
            if name not in (".", ".."):
                names[name] = e.attr
            cookie = e.cookie
        verf = r.cookieverf
        if r.eof:
            break
    assert sorted(names) == [f"f{i:02}" for i in range(40)]
    for n, a in names.items():
        assert a is not None and a.size == int(n[1:]) and a.mode & 0o7777 == 0o600 and a.uid == 7, (n, a)
    c.close()


# ---------------------------------------------------------------------------- copies over CopyObject's limit

# CopyObject refuses sources over 5 GiB; renames and SETATTR copy such objects part by
# part (UploadPartCopy). The threshold is configurable, so a 12 MiB object stands in for
# a 6 GiB one: over 5 MiB it is copied in 5 MiB parts (three, the last short).
BIG_COPY = dict(multipart_copy_over_mib=5, copy_part_mib=5)


def part_copies(p):
    """UploadPartCopy requests the proxy forwarded (PUT ...?partNumber=N&uploadId=...)."""
    return [t for (_, m, t, outcome) in list(p.log) if m == "PUT" and "partNumber=" in t and outcome == "200"]


def uploads_left(s3, bucket):
    return s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])


def is_multipart_etag(h, parts):
    return h["ETag"].strip('"').endswith(f"-{parts}")


def test_rename_and_setattr_of_objects_over_the_copy_limit_copy_part_by_part(
        gw_factory, s3_server, s3_bucket, s3, s3_proxy):
    p = s3_proxy
    g = s3_gateway(gw_factory, s3_server, s3_bucket, endpoint=p.endpoint, **BIG_COPY)
    c = g.client()
    root = c.mount("/")
    data = os.urandom(12 * MiB + 777)
    make_file(c, root, "big.bin", data, mode=0o640)
    before = head(s3, s3_bucket, "big.bin")
    assert not is_multipart_etag(before, 3)

    # rename: every byte under the new key, the metadata (mode, owner, the handle's
    # incarnation) carried over, nothing under the old key, no upload left behind
    d = c.mkdir(root, "d", 0o755).check().fh
    p.log.clear()
    c.rename(root, "big.bin", d, "moved.bin").check("RENAME of a file over the copy limit")
    assert len(part_copies(p)) == 3, f"expected 3 part copies, proxy saw {[x[1:] for x in p.log]}"
    after = head(s3, s3_bucket, "d/moved.bin")
    assert after is not None and is_multipart_etag(after, 3), after and after["ETag"]
    assert after["ContentLength"] == len(data)
    assert_object(s3, s3_bucket, "d/moved.bin", data)
    assert head(s3, s3_bucket, "big.bin") is None
    for k in ("mode", "uid", "gid", "nfsgw-id"):
        assert after["Metadata"].get(k) == before["Metadata"].get(k), (k, before["Metadata"], after["Metadata"])
    assert uploads_left(s3, s3_bucket) == []
    # the new handle reads the exact bytes (sha256 over the whole file)
    fh = c.lookup(d, "moved.bin").check().fh
    a = c.getattr(fh).check().attr
    assert (a.size, a.mode & 0o7777) == (len(data), 0o640)
    got = nfs_read(c, fh, len(data))
    assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest(), "renamed file's bytes differ"

    # chmod: the object is copied onto itself with the new metadata, bytes untouched
    p.log.clear()
    c.setattr(fh, mode=0o600).check("chmod of a file over the copy limit")
    assert len(part_copies(p)) == 3, [x[1:] for x in p.log]
    h = head(s3, s3_bucket, "d/moved.bin")
    assert h["Metadata"].get("mode") == "100600", h["Metadata"]
    assert h["Metadata"].get("nfsgw-id") == before["Metadata"].get("nfsgw-id")
    assert c.getattr(fh).check().attr.mode & 0o7777 == 0o600
    assert_object(s3, s3_bucket, "d/moved.bin", data)

    # touch (utimes): the new mtime is the file's, bytes untouched
    t = int(time.time()) - 86400 * 3
    c.setattr(fh, mtime=(t, 500), atime=(t, 0)).check("utimes of a file over the copy limit")
    a = c.getattr(fh).check().attr
    assert a.mtime == (t, 500), a.mtime
    assert head(s3, s3_bucket, "d/moved.bin")["Metadata"].get("mtime", "").startswith(f"{t}."), \
        head(s3, s3_bucket, "d/moved.bin")["Metadata"]
    assert_object(s3, s3_bucket, "d/moved.bin", data)
    assert uploads_left(s3, s3_bucket) == []
    assert nfs_read(c, fh, len(data)) == data

    # at or under the threshold a copy stays one CopyObject
    small = os.urandom(5 * MiB)
    make_file(c, root, "small.bin", small)
    p.log.clear()
    c.rename(root, "small.bin", d, "small.bin").check()
    assert part_copies(p) == [], [x[1:] for x in p.log]
    assert not is_multipart_etag(head(s3, s3_bucket, "d/small.bin"), 1)
    assert_object(s3, s3_bucket, "d/small.bin", small)
    c.close()


def test_a_failed_part_copy_aborts_the_upload_and_keeps_the_source(
        gw_factory, s3_server, s3_bucket, s3, s3_proxy):
    p = s3_proxy
    g = s3_gateway(gw_factory, s3_server, s3_bucket, endpoint=p.endpoint, **FAULT_CFG, **BIG_COPY)
    c = g.client()
    root = c.mount("/")
    data = os.urandom(12 * MiB + 5)
    fh = make_file(c, root, "big.bin", data, mode=0o644)
    # a transient 503 on one part is retried: the rename just succeeds
    p.fail(503, times=1, method="PUT", path=r"partNumber=2&")
    c.rename(root, "big.bin", root, "b2.bin").check("RENAME with one 503 on a part copy")
    assert p.injected["503"] == 1, p.injected
    assert_object(s3, s3_bucket, "b2.bin", data)
    assert uploads_left(s3, s3_bucket) == []

    # a part the store refuses for good: the client gets an error, the upload is
    # aborted, the source is intact and nothing appears under the target name
    p.reset_counts()
    p.fail(400, times=None, method="PUT", path=r"partNumber=2&")
    r = c.rename(root, "b2.bin", root, "b3.bin")
    assert r.status == N.NFS3ERR_IO, f"RENAME with a refused part copy -> {N.status_name(r.status)}"
    assert p.injected["400"] >= 1, p.injected
    assert uploads_left(s3, s3_bucket) == [], uploads_left(s3, s3_bucket)
    assert head(s3, s3_bucket, "b3.bin") is None
    assert_object(s3, s3_bucket, "b2.bin", data)
    fh = c.lookup(root, "b2.bin").check().fh
    # the same for a chmod: an error, the old mode kept, no upload left
    r = c.setattr(fh, mode=0o600)
    assert r.status == N.NFS3ERR_IO, f"chmod with a refused part copy -> {N.status_name(r.status)}"
    assert uploads_left(s3, s3_bucket) == []
    h = head(s3, s3_bucket, "b2.bin")
    assert h["Metadata"].get("mode") == "100644", h["Metadata"]
    assert_object(s3, s3_bucket, "b2.bin", data)

    # the store back to normal: both work
    p.clear()
    c.setattr(fh, mode=0o600).check()
    c.rename(root, "b2.bin", root, "b3.bin").check()
    assert_object(s3, s3_bucket, "b3.bin", data)
    assert head(s3, s3_bucket, "b3.bin")["Metadata"].get("mode") == "100600"
    assert uploads_left(s3, s3_bucket) == []
    c.close()


def test_a_lost_complete_answer_still_finishes_the_copy(gw_factory, s3_server, s3_bucket, s3, s3_proxy):
    """CompleteMultipartUpload applied by the store but its answer lost: the retried
    Complete gets NoSuchUpload, and the gateway accepts the copy only because the
    target's ETag is the one these parts make (never on a guess: the rename then
    deletes its source)."""
    p = s3_proxy
    g = s3_gateway(gw_factory, s3_server, s3_bucket, endpoint=p.endpoint, **FAULT_CFG, **BIG_COPY)
    c = g.client()
    root = c.mount("/")
    data = os.urandom(12 * MiB + 7)
    make_file(c, root, "big.bin", data)
    # The first Complete is applied and its answer lost; the retry finds no upload
    # (AWS may also answer a repeated Complete with 200; moto would: the proxy makes
    # it the 404 case).
    p.reset(times=1, method="POST", path=r"uploadId=", after_forward=True)
    p.fail(404, times=1, method="POST", path=r"uploadId=", code="NoSuchUpload")
    c.rename(root, "big.bin", root, "moved.bin").check("RENAME whose Complete answer was lost")
    assert p.injected["reset"] == 1 and p.injected["404"] == 1, p.injected
    assert is_multipart_etag(head(s3, s3_bucket, "moved.bin"), 3)
    assert_object(s3, s3_bucket, "moved.bin", data)
    assert head(s3, s3_bucket, "big.bin") is None
    assert uploads_left(s3, s3_bucket) == []
    fh = c.lookup(root, "moved.bin").check().fh
    assert nfs_read(c, fh, len(data)) == data
    c.close()


def test_a_lost_complete_answer_of_written_data_still_commits(gw_factory, s3_server, s3_bucket, s3, s3_proxy):
    """The same lost answer on the write path: 20 MiB written and COMMITted goes up as a
    multipart upload (8 MiB parts); its Complete is applied by the store, the answer is
    lost and the retry finds no upload. COMMIT must answer OK (the data is there, its
    ETag is the one these parts make), not an error the application sees as EIO."""
    p = s3_proxy
    g = s3_gateway(gw_factory, s3_server, s3_bucket, endpoint=p.endpoint, **FAULT_CFG)
    c = g.client()
    root = c.mount("/")
    data = os.urandom(20 * MiB + 5)
    fh = make_file(c, root, "w.bin", data, commit=False)
    p.reset(times=1, method="POST", path=r"uploadId=", after_forward=True)
    p.fail(404, times=1, method="POST", path=r"uploadId=", code="NoSuchUpload")
    r = c.commit(fh)
    assert r.status == N.NFS3_OK, f"COMMIT whose Complete answer was lost -> {N.status_name(r.status)}"
    assert p.injected["reset"] == 1 and p.injected["404"] == 1, p.injected
    assert is_multipart_etag(head(s3, s3_bucket, "w.bin"), 3)
    assert_object(s3, s3_bucket, "w.bin", data)
    assert uploads_left(s3, s3_bucket) == []
    assert nfs_read(c, fh, len(data)) == data
    c.close()


def test_copy_refused_as_too_large_is_redone_part_by_part(gw_factory, s3_server, s3_bucket, s3, s3_proxy):
    """A store that refuses CopyObject for a source the gateway thought small enough (its
    size as last seen, or a store with a lower limit) gets the copy part by part: as AWS
    answers CopyObject over 5 GiB, simulated by the proxy."""
    p = s3_proxy
    g = s3_gateway(gw_factory, s3_server, s3_bucket, endpoint=p.endpoint, copy_part_mib=5)
    c = g.client()
    root = c.mount("/")
    data = os.urandom(11 * MiB)
    make_file(c, root, "big.bin", data)
    p.fail(400, times=None, method="PUT", path=rf"^/{s3_bucket}/moved\.bin$", code="EntityTooLarge")
    p.log.clear()
    c.rename(root, "big.bin", root, "moved.bin").check("RENAME after CopyObject refused the source")
    assert p.injected["400"] == 1, p.injected
    assert len(part_copies(p)) == 3, [x[1:] for x in p.log]
    assert_object(s3, s3_bucket, "moved.bin", data)
    assert head(s3, s3_bucket, "big.bin") is None
    assert uploads_left(s3, s3_bucket) == []
    c.close()
