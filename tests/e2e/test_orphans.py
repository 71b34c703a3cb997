"""Delete on last close (RFC 8881 §18.25 REMOVE, §18.26 RENAME; gateway/src/fs/imp/orphans.rs):
client A holds a file open over NFSv4.1 while client B replaces it with `mv new old`
(RENAME over it) or removes it. A keeps reading the old bytes through its filehandle
and stateid, and its CLOSE succeeds; the name is gone for everyone at once (B's LOOKUP
finds the new file or NOENT, READDIR never shows the kept object); after A's CLOSE the
kept object is deleted from the store (fs backend: the data directory). A gateway
killed while the open is held keeps it through the next start's grace period (the
open may be reclaimed), then deletes it.

Client A is the raw NFSv4.1 client of test_uring_v4.py (one session), B an NFSv3
client on another connection (NFSv3 has no opens: its REMOVE follows the v4 holder).
"""
from __future__ import annotations

import signal
import time

import pytest

from test_uring_v4 import Client

NFS4ERR_STALE = 70
NFS3ERR_NOENT = 2


def _orphans(g) -> list:
    return sorted(p.name for p in g.data_dir.iterdir() if p.name.startswith(".nfsgw-orphan."))


def _setup(g, files: dict):
    b = g.client()
    root = b.mount("/")
    for name, data in files.items():
        fh = b.create(root, name, 0o644).check().fh
        b.write_all(fh, data)
    return b, root


def _names(b, root) -> list:
    return sorted(e.name if isinstance(e.name, str) else e.name.decode()
                  for e in b.readdir_all(root) if e.name not in (".", "..", b".", b".."))


def _read_status(a: Client, fh: bytes, sid: bytes) -> int:
    return a.results(a.call(a.read_rec(fh, 0, 100, sid))).status


@pytest.mark.parametrize("store", ["fs", "memory", "s3"])
def test_file_renamed_over_while_open_keeps_its_bytes_until_close(gw_factory, store):
    g = gw_factory(backend=store)
    b, root = _setup(g, {"app.conf": b"version 1", "app.conf.new": b"version 2"})
    a = Client(g)
    sid, fh = a.open_rw(b"app.conf")
    assert a.read(fh, 0, 100, sid)[0] == b"version 1"

    b.rename(root, "app.conf.new", root, "app.conf").check("RENAME")

    # A: still the old file, through its handle and stateid.
    assert a.read(fh, 0, 100, sid)[0] == b"version 1"
    # B (and everyone): the name is the new file; the kept object is listed nowhere.
    new = b.lookup(root, "app.conf").check().fh
    assert b.read(new, 0, 100).check().data == b"version 2"
    assert _names(b, root) == ["app.conf"]
    if store == "fs":
        assert len(_orphans(g)) == 1, sorted(p.name for p in g.data_dir.iterdir())
        assert (g.data_dir / "app.conf").read_bytes() == b"version 2"

    assert a.close(fh, sid) == 0, "CLOSE of the replaced file"
    if store == "fs":
        assert _orphans(g) == [], "the replaced file is deleted at its last close"
    assert _read_status(a, fh, b"\0" * 16) == NFS4ERR_STALE
    assert b.read(new, 0, 100).check().data == b"version 2"


def test_file_removed_while_open_is_readable_and_writable_until_close(gw_factory):
    g = gw_factory(backend="fs")
    b, root = _setup(g, {"log.txt": b"line one\n"})
    a = Client(g)
    sid, fh = a.open_rw(b"log.txt")

    b.remove(root, "log.txt").check("REMOVE")
    assert b.lookup(root, "log.txt").status == NFS3ERR_NOENT
    assert _names(b, root) == []

    a.write(fh, 9, b"line two\n", sid)
    assert a.read(fh, 0, 100, sid)[0] == b"line one\nline two\n"
    # The name is free at once.
    fresh = b.create(root, "log.txt", 0o644).check().fh
    assert b.read(fresh, 0, 100).check().data == b""
    assert len(_orphans(g)) == 1

    assert a.close(fh, sid) == 0
    assert _orphans(g) == []
    assert _names(b, root) == ["log.txt"]


@pytest.mark.serial  # time bounds: needs a quiet CPU (tests/README.md)
def test_orphans_of_a_killed_gateway_are_kept_through_the_grace_period(gw_factory):
    """OPEN4_RESULT_PRESERVE_UNLINKED (RFC 8881 §18.16.4): the open file removed
    before a kill -9 is kept while its client may reclaim the open, then deleted when
    the grace period ends with no reclaim."""
    g = gw_factory(backend="fs", extra={"nfs4": {"lease_time_s": 10, "grace_time_s": 3}})
    b, root = _setup(g, {"held": b"x" * 1000})
    a = Client(g)
    sid, fh = a.open_rw(b"held")
    b.remove(root, "held").check("REMOVE")
    assert len(_orphans(g)) == 1
    g.restart(signal.SIGKILL)
    assert len(_orphans(g)) == 1, "the orphan was deleted before the grace period ended"
    assert "kept an orphan of the previous run" in g.log_tail(200)
    deadline = time.monotonic() + 30
    # The watcher deletes, then logs: wait for both.
    logged = "deleted orphans no open reclaimed"
    while (_orphans(g) or logged not in g.log_tail(200)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _orphans(g) == [], "an orphan survived the grace period"
    assert logged in g.log_tail(200)
