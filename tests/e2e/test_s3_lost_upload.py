"""A multipart upload that really vanished behind the gateway (s3 backend).

A file over one part (8 MiB) goes up as a multipart upload while it is written; COMMIT
completes it. If the upload is aborted meanwhile (a lifecycle rule's
AbortIncompleteMultipartUpload, another gateway or an operator), its parts' bytes are
gone from the store and no longer in the gateway's memory. What NFS offers for exactly
this (RFC 1813 §3.3.7 and §3.3.21, RFC 8881 §18.32.3): the server that lost
uncommitted data changes its write verifier, and a client that sees a new verifier in
COMMIT's reply resends every WRITE it has not seen committed. So the user sees: COMMIT
OK with a new verifier (not STALE, not EIO, not a hang), and after the resend the object
in the bucket is exactly the bytes written. The abort is done with a plain S3 client
straight to the server, as a lifecycle rule would do it; the fault proxy in front of the
server then answers every request naming the dead upload with 404 NoSuchUpload, as AWS
does (moto answers 500 for an aborted upload, which the gateway would rightly retry), and
counts them: exactly one, the one that finds the loss. Nothing uses the dead id again.
"""

from __future__ import annotations

import os
import re

import pytest

if os.environ.get("E2E_NO_S3") == "1":
    pytest.skip("E2E_NO_S3=1: no S3 server on this machine", allow_module_level=True)

import nfsclient as N  # noqa: E402
from conftest import free_port  # noqa: E402
from statsutil import scrape  # noqa: E402
from test_s3 import assert_object, nfs_read, s3_gateway, uploads_left  # noqa: E402

MiB = 1 << 20


def abort_upload_of(s3, bucket, key, proxy):
    """AbortMultipartUpload of the one open upload of `key`, then AWS's answer to any
    later request naming it (404 NoSuchUpload) from the proxy."""
    ups = [u for u in uploads_left(s3, bucket) if u["Key"] == key]
    assert len(ups) == 1, f"expected one streaming upload of {key}: {ups}"
    uid = ups[0]["UploadId"]
    s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=uid)
    proxy.fail(404, times=None, path="uploadId=" + re.escape(uid[:16]), code="NoSuchUpload")


def gateway(gw_factory, s3_server, bucket, proxy):
    # No idle upload during the test (flush_idle_s); metrics on to read the counter.
    port = free_port()
    cfg = s3_server.gateway_s3_config(bucket, endpoint=proxy.endpoint, flush_idle_s=60)
    g = gw_factory(backend="s3", s3=cfg, backend_opts={"workers": 4},
                   extra={"stats": {"listen": f"127.0.0.1:{port}"}})
    g.stats_port = port
    return g


def lost(g) -> float:
    return scrape(g.stats_port).sum("nfsgw_s3_uploads_lost_total")


def resend_and_commit(c, fh, data, verf):
    """What a client does on a new verifier: every uncommitted WRITE again, then COMMIT,
    which must now answer with that same verifier."""
    res = c.write_all(fh, data, chunk=MiB, stable=N.UNSTABLE, window=8)
    assert all(w.verf == verf for w in res), "verifier moved again while resending"
    r = c.commit(fh)
    assert r.status == N.NFS3_OK, f"COMMIT after the resend -> {N.status_name(r.status)}"
    assert r.verf == verf, "verifier moved again at the second COMMIT"


@pytest.mark.parametrize("size", [20 * MiB + 5, 16 * MiB], ids=["tail-UploadPart", "Complete"])
def test_an_upload_aborted_before_commit_changes_the_verifier_and_the_resend_lands(
        gw_factory, s3_server, s3_bucket, s3, s3_proxy, size):
    """Two full parts stream up while the file is written; the upload is aborted; COMMIT
    meets NoSuchUpload on the tail's UploadPart (20 MiB + 5) or on Complete (16 MiB,
    whole parts only: a Complete whose answer was lost is told apart by its ETag)."""
    g = gateway(gw_factory, s3_server, s3_bucket, s3_proxy)
    c = g.client()
    root = c.mount("/")
    data = os.urandom(size)
    fh = c.create(root, "f.bin", 0o644).check().fh
    verf = c.write_all(fh, data, chunk=MiB, stable=N.UNSTABLE, window=8)[0].verf
    abort_upload_of(s3, s3_bucket, "f.bin", s3_proxy)
    r = c.commit(fh)
    assert r.status == N.NFS3_OK, f"COMMIT of an aborted upload -> {N.status_name(r.status)}\n{g.log_tail(20)}"
    assert r.verf != verf, "COMMIT answered OK with the old verifier: the written data is lost"
    assert lost(g) == 1
    # Never wedged: the file is what the store holds until the client resends.
    assert c.getattr(fh).check().attr.size == 0
    resend_and_commit(c, fh, data, r.verf)
    assert_object(s3, s3_bucket, "f.bin", data)
    assert nfs_read(c, fh, len(data)) == data
    assert uploads_left(s3, s3_bucket) == []
    assert lost(g) == 1
    assert s3_proxy.injected["404"] == 1, "the dead upload was used again"
    assert "the store lost a multipart upload" in g.log_path.read_text(errors="replace")
    c.close()


def test_an_upload_aborted_while_parts_stream_changes_the_verifier_and_the_resend_lands(
        gw_factory, s3_server, s3_bucket, s3, s3_proxy):
    """The abort lands between two parts: the second part's UploadPart, sent while the
    file is still being written, meets NoSuchUpload. The WRITEs go on into a fresh
    upload, COMMIT answers OK with a new verifier, the resend makes the object whole."""
    g = gateway(gw_factory, s3_server, s3_bucket, s3_proxy)
    c = g.client()
    root = c.mount("/")
    data = os.urandom(26 * MiB + 3)
    fh = c.create(root, "g.bin", 0o644).check().fh
    verf = c.write_all(fh, data[:9 * MiB], chunk=MiB, stable=N.UNSTABLE, window=8)[0].verf
    abort_upload_of(s3, s3_bucket, "g.bin", s3_proxy)
    rest = c.write_all(fh, data[9 * MiB:], offset=9 * MiB, chunk=MiB, stable=N.UNSTABLE, window=8)
    assert all(w.ok for w in rest)
    # Parts already in flight when the first NoSuchUpload came back may meet it too;
    # none is sent with the dead id after that.
    dead = s3_proxy.injected["404"]
    assert dead >= 1, "no part met the aborted upload"
    r = c.commit(fh)
    assert r.status == N.NFS3_OK, f"COMMIT after a part met NoSuchUpload -> {N.status_name(r.status)}"
    assert r.verf != verf, "COMMIT answered OK with the old verifier: the first parts are lost"
    assert lost(g) == 1
    resend_and_commit(c, fh, data, r.verf)
    assert_object(s3, s3_bucket, "g.bin", data)
    assert uploads_left(s3, s3_bucket) == []
    assert s3_proxy.injected["404"] == dead, "the dead upload was used again"
    c.close()
