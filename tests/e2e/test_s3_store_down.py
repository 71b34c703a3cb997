"""Starting while the object store is down (README "The s3 backend", "Starting while
the store is down"; gateway/src/fs/imp/mac_key.rs).

A gateway on a shared bucket makes handles with the key every gateway on the bucket
agrees on, kept in the bucket. It remembers that key in state.dir after each agreement,
so a restart while the store is unreachable still serves: every call answers JUKEBOX
until the store is back, then the handles clients held before the restart work. On the
very first start (nothing remembered) it waits for the store instead of inventing a key
of its own, says so in the log, and serves once the store answers.

A gateway given the key (`handle_key_file`) needs nothing from the store to start: it
starts at once during an outage, says so, answers NFS3ERR_JUKEBOX (NFSv3) and
NFS4ERR_DELAY (NFSv4.1) - "try again", which clients do, never an error that makes them
give up - and the same mount serves once the store answers (docs/operations.md
"Starting while the store is down").

A fault proxy (tests/e2e/s3proxy.py) that resets every request stands for the store
being down.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

if os.environ.get("E2E_NO_S3") == "1":
    pytest.skip("E2E_NO_S3=1: no S3 server on this machine", allow_module_level=True)

import nfsclient as N  # noqa: E402
from nfsclient import Packer  # noqa: E402
from test_deleg import OP_PUTROOTFH, V4Client  # noqa: E402
from test_s3 import make_file  # noqa: E402

OP_GETATTR, OP_LOOKUP = 9, 15
NFS4ERR_DELAY = 10008


def v4_client(g) -> V4Client:
    """An NFSv4.1 client with a session (none of which needs the store)."""
    v4 = V4Client(g.host, g.port)
    assert v4.exchange_id() == 0 and v4.create_session() == 0 and v4.reclaim_complete() == 0
    return v4


def v4_lookup_getattr(v4: V4Client, name: bytes) -> int:
    """SEQUENCE, PUTROOTFH, LOOKUP name, GETATTR (type, size): the COMPOUND's status."""
    ops = Packer().u32(OP_PUTROOTFH).u32(OP_LOOKUP).opaque(name)
    ops.u32(OP_GETATTR).u32(1).u32(1 << 4)
    v4.compound(v4.sequence() + ops.get(), 4)
    return v4.status


def s3_cfg(s3_server, bucket, proxy):
    # a small retry budget: a call on a dead store answers JUKEBOX within seconds
    return s3_server.gateway_s3_config(bucket, endpoint=proxy.endpoint, timeout_s=2,
                                       retries=1, retry_budget_s=2, flush_idle_s=60)


def test_first_start_with_the_store_down_waits_then_serves(gw_factory, s3_server, s3_bucket, s3_proxy):
    p = s3_proxy
    p.reset(times=None)
    g = gw_factory(backend="s3", s3=s3_cfg(s3_server, s3_bucket, p), start=False)
    started: dict = {}

    def start():
        try:
            g.start(timeout=90)
            started["ok"] = True
        except AssertionError as e:
            started["err"] = str(e)

    t = threading.Thread(target=start)
    t.start()
    deadline = time.monotonic() + 45
    while time.monotonic() < deadline and "waiting for it to agree" not in g.log_tail(200):
        assert t.is_alive(), started
        time.sleep(0.5)
    assert "waiting for it to agree" in g.log_tail(200), g.log_tail()
    assert g.alive() and not started, "served before it had the bucket's handle key"
    p.clear()
    t.join(90)
    assert started.get("ok"), started
    c = g.client()
    root = c.mount("/")
    fh = make_file(c, root, "after-wait.bin", b"x" * 1000)
    assert c.getattr(fh).check("GETATTR").attr.size == 1000
    assert (g.state_dir / "shared-handle.key").stat().st_mode & 0o777 == 0o600
    c.close()


def test_restart_with_the_store_down_answers_jukebox_then_serves_old_handles(
        gw_factory, s3_server, s3_bucket, s3_proxy):
    p = s3_proxy
    g = gw_factory(backend="s3", s3=s3_cfg(s3_server, s3_bucket, p))
    c = g.client()
    root = c.mount("/")
    data = os.urandom(5000)
    fh = make_file(c, root, "kept.bin", data)
    c.close()
    g.stop()
    p.reset(times=None)
    g.start(timeout=60)
    assert "serving with the handle key remembered" in g.log_tail(200), g.log_tail()
    c = g.client()
    r = c.getattr(fh)
    assert r.status == N.NFS3ERR_JUKEBOX, N.status_name(r.status)
    v4 = v4_client(g)
    assert v4_lookup_getattr(v4, b"kept.bin") == NFS4ERR_DELAY
    p.clear()
    deadline = time.monotonic() + 30
    while True:
        r = c.read(fh, 0, len(data))
        if r.status != N.NFS3ERR_JUKEBOX or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert r.status == N.NFS3_OK, N.status_name(r.status)
    assert r.data == data
    deadline = time.monotonic() + 15
    while "the bucket's handle key is the one this gateway serves with" not in g.log_tail(200):
        assert time.monotonic() < deadline, g.log_tail()
        time.sleep(0.5)
    c.close()


def test_first_start_with_a_key_file_and_the_store_down_serves_jukebox_then_data(
        gw_factory, s3_server, s3_bucket, s3_proxy, tmp_path):
    p = s3_proxy
    key = tmp_path / "handle.key"
    key.write_text(os.urandom(32).hex() + "\n")
    key.chmod(0o600)
    p.reset(times=None)
    cfg = s3_cfg(s3_server, s3_bucket, p)
    cfg["handle_key_file"] = str(key)
    g = gw_factory(backend="s3", s3=cfg, start=False)
    g.start(timeout=60)
    assert "bucket not reachable at start; serving anyway" in g.log_tail(200), g.log_tail()
    c = g.client()
    root = c.mount("/")
    r = c.lookup(root, "made-later.bin")
    assert r.status == N.NFS3ERR_JUKEBOX, N.status_name(r.status)
    v4 = v4_client(g)
    assert v4_lookup_getattr(v4, b"made-later.bin") == NFS4ERR_DELAY
    p.clear()
    # The same mount (root handle) and the same session serve once the store answers.
    deadline = time.monotonic() + 30
    while True:
        r = c.lookup(root, "made-later.bin")
        if r.status != N.NFS3ERR_JUKEBOX or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert r.status == N.NFS3ERR_NOENT, N.status_name(r.status)
    data = os.urandom(3000)
    fh = make_file(c, root, "made-later.bin", data)
    assert c.read(fh, 0, len(data)).check("READ").data == data
    assert v4_lookup_getattr(v4, b"made-later.bin") == 0
    c.close()
