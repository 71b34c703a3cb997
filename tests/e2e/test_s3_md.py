"""Store requests the s3 backend sends per NFS operation (`nfsgw_s3_requests_total`),
through the gateway on moto: the round trips docs/s3.md "Store requests per NFS
operation" says are gone stay gone.

- CREATE (size 0, as an O_TRUNC open sends it) then a FILE_SYNC WRITE: the CREATE's
  look-up HEADs the name and its directory marker and lists `name/` once; the create
  PUTs; the WRITE uploads. No HEAD of the name it just created, no second listing.
- READDIRPLUS of files this gateway wrote, after their cached attributes expired: one
  LIST, no HEAD per entry (the listing's ETag, size and time match what was written).
"""

from __future__ import annotations

import os
import time

import pytest

if os.environ.get("E2E_NO_S3") == "1":
    pytest.skip("E2E_NO_S3=1: no S3 server on this machine", allow_module_level=True)

from conftest import free_port  # noqa: E402
from statsutil import scrape  # noqa: E402

FILES = 20
KINDS = ("head", "list", "put", "get", "delete", "copy", "multipart")


def counts(port):
    m = scrape(port)
    return {k: m.sum("nfsgw_s3_requests_total", kind=k) for k in KINDS}


def delta(port, before):
    now = counts(port)
    return {k: now[k] - before[k] for k in KINDS}


@pytest.fixture
def gw_stats(gw_factory):
    port = free_port()
    gw = gw_factory(backend="s3", extra={"stats": {"listen": f"127.0.0.1:{port}"}})
    return gw, port


def test_create_and_first_write_cost_five_round_trips(gw_stats):
    gw, port = gw_stats
    with gw.client() as c:
        root = c.mount("/")
        d = c.mkdir(root, "md").check().fh
        before = counts(port)
        for i in range(FILES):
            fh = c.create(d, f"f{i}", size=0).check().fh
            c.write(fh, 0, b"x" * 3901).check()
        got = delta(port, before)
    # Per file: HEAD name, HEAD name/, LIST name/ (the look-up), PUT (create), PUT
    # (upload). Before: 4 HEADs and 2 LISTs. The directory's own attributes (the
    # reply's wcc data) are HEADed again each second, and a slow machine may let a
    # cached answer expire (1 s) between look-up and create now and then: a quarter
    # of slack, less than one request per create.
    assert got["put"] == 2 * FILES, got
    assert got["head"] <= 2 * FILES + FILES // 4, got
    assert got["list"] <= FILES + FILES // 4, got
    assert got["get"] == got["copy"] == got["multipart"] == 0, got


def test_readdirplus_of_what_the_gateway_wrote_heads_nothing(gw_stats):
    gw, port = gw_stats
    with gw.client() as c:
        root = c.mount("/")
        d = c.mkdir(root, "plus").check().fh
        for i in range(FILES):
            fh = c.create(d, f"f{i:02}", mode=0o640).check().fh
            c.write(fh, 0, b"y" * (i + 1)).check()
        time.sleep(2.2)   # past the attribute cache (1 s) and the PUTs' second
        before = counts(port)
        ents = [e for e in c.readdir_all(d, plus=True, count=65536, maxcount=1 << 20)
                if e.name not in (b".", b"..", ".", "..")]
        got = delta(port, before)
    assert len(ents) == FILES
    for e in ents:
        n = int(str(e.name.decode() if isinstance(e.name, bytes) else e.name)[1:])
        assert e.attr.size == n + 1 and e.attr.mode & 0o7777 == 0o640, (e.name, e.attr)
    # One LIST for the page; HEADs only for "." and ".." (the directory markers), not
    # one per entry (before: FILES).
    assert got["list"] >= 1 and got["head"] <= 3, got
