"""The status, backend and NFSv4.1 state series (docs/stats.md), read back exactly from
/metrics after provoking each: NFS3ERR_NOENT from an NFSv3 LOOKUP and NFS4ERR_NOENT
from an NFSv4.1 COMPOUND's LOOKUP (counted by the operation the COMPOUND failed at,
RFC 8881 §16.2.3), NFS3ERR_JUKEBOX from an NFSv3 WRITE while a read delegation is
recalled (RFC 8881 §10.2), the store calls a CREATE and a WRITE make, and the client
and session a raw NFSv4.1 client holds."""

from __future__ import annotations

import time

from conftest import free_port
from nfsclient import NfsClient, Packer
from statsutil import scrape
from test_deleg import OP_PUTROOTFH, V4Client

OP_LOOKUP = 15
NFS3ERR_NOENT, NFS4ERR_NOENT, NFS3ERR_JUKEBOX = 2, 2, 10008


def errors(m, prog, proc, status):
    return m.sum("nfsgw_nfs_errors_total", prog=prog, proc=proc, status=status)


def wait_for(port, pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        m = scrape(port)
        if pred(m):
            return m
        assert time.monotonic() < deadline, "series never reached the expected value"
        time.sleep(0.05)


def v4_lookup(c: V4Client, name: bytes) -> int:
    c.compound(c.sequence() + Packer().u32(OP_PUTROOTFH).u32(OP_LOOKUP).opaque(name).get(), 3)
    return c.status


def test_status_backend_and_nfs4_series(gw_factory):
    port = free_port()
    g = gw_factory(backend="fs", extra={"stats": {"listen": f"127.0.0.1:{port}"}})
    m0 = scrape(port)
    assert m0.sum("nfsgw_nfs4_sessions") == 0
    assert m0.sum("nfsgw_nfs4_clients", state="confirmed") == 0
    assert errors(m0, "nfs3", "LOOKUP", "NFS3ERR_NOENT") == 0

    v3 = NfsClient(g.host, g.port)
    root = v3.mount("/")
    for _ in range(3):
        assert v3.lookup(root, "missing-v3").status == NFS3ERR_NOENT
    # Worker answers are counted as the worker hands them back: already there.
    m1 = scrape(port)
    assert errors(m1, "nfs3", "LOOKUP", "NFS3ERR_NOENT") == 3
    # An OK answer counts nothing.
    assert m1.sum("nfsgw_nfs_errors_total") == 3

    # The store's own calls: a CREATE and a stable WRITE go to the fs store.
    fh = v3.create(root, "series.txt").check("CREATE").fh
    v3.write(fh, 0, b"version 1").check("WRITE")
    m2 = scrape(port)
    calls = {l["op"]: v for l, v in m2.series("nfsgw_backend_duration_seconds_count")
             if l["backend"] == "fs"}
    assert calls and sum(calls.values()) > 0, calls
    for op in calls:
        # Each called operation has its error counters (zeros included) and buckets.
        assert m2.sum("nfsgw_backend_errors_total", backend="fs", op=op, error="permanent") == 0
        assert m2.sum("nfsgw_backend_duration_seconds_bucket", backend="fs", op=op, le="+Inf") \
            == calls[op]

    # NFSv4.1: a client with a session, then a LOOKUP of a missing name.
    c = V4Client(g.host, g.port)
    assert c.exchange_id() == 0
    m = scrape(port)
    assert m.sum("nfsgw_nfs4_clients", state="unconfirmed") == 1
    assert c.create_session() == 0
    c.pump(lambda: ("CB_NULL", None) in c.callbacks)
    assert c.reclaim_complete() == 0
    m = scrape(port)
    assert m.sum("nfsgw_nfs4_clients", state="confirmed") == 1
    assert m.sum("nfsgw_nfs4_clients", state="unconfirmed") == 0
    assert m.sum("nfsgw_nfs4_sessions") == 1
    for _ in range(2):
        assert v4_lookup(c, b"missing-v4") == NFS4ERR_NOENT
    m3 = scrape(port)
    assert errors(m3, "nfs4", "LOOKUP", "NFS4ERR_NOENT") == 2
    # The SEQUENCE and PUTROOTFH before it succeeded: not counted.
    assert m3.sum("nfsgw_nfs_errors_total", prog="nfs4") == 2

    # An open holds an open stateid; with the back channel up, a read delegation.
    _sid, deleg, fh4 = c.open_read(b"series.txt")
    m = scrape(port)
    assert m.sum("nfsgw_nfs4_opens") == 1
    assert deleg is not None
    # An NFSv3 writer conflicts: JUKEBOX while the delegation is recalled.
    assert v3.write(fh, 0, b"version 2").status == NFS3ERR_JUKEBOX
    m4 = scrape(port)
    assert errors(m4, "nfs3", "WRITE", "NFS3ERR_JUKEBOX") == 1
    c.pump(lambda: any(k == "CB_RECALL" for k, _ in c.callbacks))
    assert c.delegreturn(fh4, deleg) == 0
    v3.write(fh, 0, b"version 2").check("WRITE after DELEGRETURN")
    m5 = scrape(port)
    assert errors(m5, "nfs3", "WRITE", "NFS3ERR_JUKEBOX") == 1
    assert errors(m5, "nfs3", "LOOKUP", "NFS3ERR_NOENT") == 3


def test_backend_series_name_the_store(gw_factory, backend):
    """Every store is timed under its own name (`backend` label; garage is an s3
    store): a CREATE, WRITE and COMMIT reach it, and a LOOKUP of a missing name asks it."""
    port = free_port()
    g = gw_factory(backend=backend, extra={"stats": {"listen": f"127.0.0.1:{port}"}})
    name = {"garage": "s3"}.get(backend, backend)
    v3 = NfsClient(g.host, g.port)
    root = v3.mount("/")
    fh = v3.create(root, "timed.txt").check("CREATE").fh
    v3.write(fh, 0, b"x" * 10000).check("WRITE")
    v3.commit(fh).check("COMMIT")
    assert v3.lookup(root, "not-there").status == NFS3ERR_NOENT
    m = scrape(port)
    calls = {l["op"]: v for l, v in m.series("nfsgw_backend_duration_seconds_count")
             if l["backend"] == name}
    assert calls.get("head", 0) > 0, calls
    assert sum(calls.values()) >= 3, calls
    assert not [l for l, _ in m.series("nfsgw_backend_duration_seconds_count")
                if l["backend"] not in (name,)], "only the configured store is timed"
    # Each called operation has all its error series.
    errs = [l for l, _ in m.series("nfsgw_backend_errors_total") if l["backend"] == name]
    assert len(errs) == 9 * len(calls), (len(errs), calls)
