"""Handle identity across gateways on one bucket when the store ignores
`If-None-Match: *` (as Garage does): the fault proxy strips the header, so moto
overwrites instead of answering 412.

Two gateways started together on a fresh bucket must agree on the handle key every
time (identical handles, each accepts the other's); with `handle_key_file` they agree
by construction, and a malformed file is a start-up error that never shows the secret.
"""

from __future__ import annotations

import os
import threading

import pytest

if os.environ.get("E2E_NO_S3") == "1":
    pytest.skip("E2E_NO_S3=1: no S3 server on this machine", allow_module_level=True)

from s3server import list_keys  # noqa: E402
from test_s3 import make_file  # noqa: E402

ROUNDS = int(os.environ.get("E2E_HANDLE_ROUNDS", "4"))


def pair(gw_factory, s3_server, bucket, endpoint, **over):
    cfg = s3_server.gateway_s3_config(bucket, endpoint=endpoint, **over)
    return [gw_factory(backend="s3", s3=cfg, start=False) for _ in range(2)]


def start_together(gws):
    errs = []

    def run(g):
        try:
            g.start(timeout=40)
        except AssertionError as e:
            errs.append(str(e))

    th = [threading.Thread(target=run, args=(g,)) for g in gws]
    for t in th:
        t.start()
    for t in th:
        t.join()
    assert not errs, errs


def assert_same_handles(gws, name):
    c1, c2 = gws[0].client(), gws[1].client()
    r1, r2 = c1.mount("/"), c2.mount("/")
    assert r1 == r2, "the two gateways hand out different root handles (different keys)"
    fh1 = make_file(c1, r1, name, b"x" * 100)
    fh2 = c2.lookup(r2, name).check().fh
    assert fh1 == fh2, "same file, different handles"
    assert c2.getattr(fh1).check().attr.size == 100     # each accepts the other's handle
    assert c1.getattr(fh2).check().attr.size == 100
    c1.close()
    c2.close()


def test_gateways_starting_together_agree_on_the_key_without_if_none_match(gw_factory, s3_server, s3_proxy):
    s3_proxy.strip_header("If-None-Match")
    for i in range(ROUNDS):
        bucket = s3_server.new_bucket(f"hk{i}")
        try:
            gws = pair(gw_factory, s3_server, bucket, s3_proxy.endpoint)
            start_together(gws)
            assert_same_handles(gws, f"f{i}")
            # a third gateway, later, adopts the same key
            g3 = pair(gw_factory, s3_server, bucket, s3_proxy.endpoint)[0]
            g3.start(timeout=40)
            c = g3.client()
            assert c.mount("/") == gws[0].client().mount("/")
            c.close()
            for g in gws + [g3]:
                g.stop()
        finally:
            s3_server.empty_bucket(bucket)


def test_handle_key_file_is_shared_and_never_logged(gw_factory, s3_server, s3_bucket, s3, tmp_path):
    secret = os.urandom(32).hex()
    kf = tmp_path / "handle.key"
    kf.write_text(secret + "\n")
    gws = pair(gw_factory, s3_server, s3_bucket, None, handle_key_file=str(kf))
    start_together(gws)
    assert_same_handles(gws, "f")
    # nothing agreed through the bucket: no key objects written
    assert not [k for k in list_keys(s3, s3_bucket, internal=True) if "handle-key" in k]
    for g in gws:
        g.stop()
        assert secret not in g.log_path.read_text(errors="replace")
    # a malformed file: start-up error naming the setting, not the content
    bad = "zz" + secret[2:]
    kf.write_text(bad)
    g = pair(gw_factory, s3_server, s3_bucket, None, handle_key_file=str(kf))[0]
    with pytest.raises(AssertionError) as e:
        g.start()
    assert "handle_key_file" in str(e.value) and "64 hex digits" in str(e.value), str(e.value)
    assert bad not in str(e.value)
    kf.unlink()
    with pytest.raises(AssertionError) as e:
        g.start()
    assert "handle_key_file" in str(e.value) and "cannot read" in str(e.value), str(e.value)
