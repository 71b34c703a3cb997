"""SIGHUP reload (`exportfs -r` for the gateway): exports and [stats] change live, on
connections that stay open; a bad file is refused whole; keys that need a restart are
named, not applied. Checked with a real client (the libnfs bindings over the same C
library as nfs-cp) and with the suite's own client, whose single socket would raise if
the gateway dropped it."""

import signal
import time
import urllib.request

import pytest

import nfsclient as N
from conftest import DEFAULT_EXPORT, free_port


def export(**kw):
    e = dict(DEFAULT_EXPORT)
    e.update(kw)
    return e


def reload(g, timeout=10.0):
    """Rewrites the config from g.exports/g.extra, sends SIGHUP and returns the log line
    the reload printed (`reloaded: ...` or `reload refused ...`)."""
    before = g.log_path.read_text(errors="replace").count("reload")
    g.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = [l for l in g.log_path.read_text(errors="replace").splitlines() if "reload" in l]
        if len(lines) > before:
            return lines[-1]
        time.sleep(0.05)
    raise AssertionError(f"no reload log line within {timeout}s; log:\n{g.log_tail()}")


def hup(g, **changes):
    for k, v in changes.items():
        setattr(g, k, v)
    g.write_config()
    return reload(g)


def test_rw_to_ro_and_back_on_a_live_connection(gw_factory):
    g = gw_factory(backend="fs")
    c = g.client()
    root = c.mount("/")
    f = c.create(root, "f", 0o644).check().fh
    c.write(f, 0, b"before", N.FILE_SYNC).check()
    assert c.read(f, 0, 100).check().data == b"before"  # now in the reactor's cache

    line = hup(g, exports=[export(access="ro")])
    assert "reloaded: exports ~/ (access)" in line, line
    # Same socket: the next WRITE gets ROFS; reads (cache hits) still work.
    assert c.write(f, 0, b"X", N.FILE_SYNC).status == N.NFS3ERR_ROFS
    assert c.create(root, "g", 0o644).status == N.NFS3ERR_ROFS
    assert c.read(f, 0, 100).check().data == b"before"
    acc = c.access(root, N.ACCESS3_MODIFY | N.ACCESS3_LOOKUP).check()
    assert acc.access & N.ACCESS3_MODIFY == 0

    line = hup(g, exports=[export(access="rw")])
    assert "~/ (access)" in line, line
    c.write(f, 0, b"after!", N.FILE_SYNC).check()
    assert c.read(f, 0, 100).check().data == b"after!"
    c.close()
    assert (g.data_dir / "f").read_bytes() == b"after!"


def test_libnfs_client_sees_ro_after_reload(gw_factory):
    libnfs = pytest.importorskip("libnfs", reason="tests/setup.sh could not build the libnfs bindings")
    g = gw_factory(backend="fs")
    nfs = libnfs.NFS(f"nfs://127.0.0.1/?version=3&nfsport={g.port}&mountport={g.port}")
    f = nfs.open("/a.txt", mode="w")
    f.write("one")
    f.close()
    assert (g.data_dir / "a.txt").read_bytes() == b"one"
    hup(g, exports=[export(access="ro")])
    # The same mounted context, its connection kept: a write now fails, a read works.
    with pytest.raises(Exception):
        f = nfs.open("/a.txt", mode="w")
        f.write("two")
        f.close()
    assert nfs.open("/a.txt").read() == "one"
    assert (g.data_dir / "a.txt").read_bytes() == b"one"
    hup(g, exports=[export(access="rw")])
    f = nfs.open("/b.txt", mode="w")
    f.write("three")
    f.close()
    assert (g.data_dir / "b.txt").read_bytes() == b"three"


def test_client_network_removed_then_restored(gw_factory):
    g = gw_factory(backend="fs")
    (g.data_dir / "f").write_bytes(b"secret")
    c = g.client()
    root = c.mount("/")
    fh = c.lookup(root, "f").check().fh
    assert c.read(fh, 0, 10).check().data == b"secret"   # cached by the reactor
    assert c.read(fh, 0, 10).check().data == b"secret"

    line = hup(g, exports=[export(clients=["10.9.9.9/32"])])
    assert "~/ (clients)" in line, line
    # Every call on the open connection, cache hits included, is refused now.
    assert c.read(fh, 0, 10).status == N.NFS3ERR_ACCES
    assert c.getattr(fh).status == N.NFS3ERR_ACCES
    assert c.getattr(root).status == N.NFS3ERR_ACCES
    assert c.write(fh, 0, b"x").status == N.NFS3ERR_ACCES
    assert c.mnt("/").status == N.MNT3ERR_ACCES
    with g.client() as c2:
        assert c2.mnt("/").status == N.MNT3ERR_ACCES

    hup(g, exports=[export()])
    assert c.read(fh, 0, 10).check().data == b"secret"
    c.close()
    assert (g.data_dir / "f").read_bytes() == b"secret"


def test_export_added_and_removed(gw_factory):
    g = gw_factory(backend="fs")
    c = g.client()
    root = c.mount("/")
    assert c.mnt("/extra").status != N.MNT3_OK
    line = hup(g, exports=[export(), export(path="/extra")])
    assert "exports +/extra" in line, line
    x = c.mount("/extra")
    c.create(x, "in-extra", 0o644).check()
    assert (g.data_dir / "extra" / "in-extra").exists()
    assert {e[0] for e in c.export()} == {"/", "/extra"}, c.export()
    # The root export's handles were never affected.
    assert c.getattr(root).check().attr.type == N.NF3DIR

    line = hup(g, exports=[export()])
    assert "exports -/extra" in line, line
    assert c.getattr(x).status in (N.NFS3ERR_STALE, N.NFS3ERR_ACCES)
    # MNT "/extra" now reaches the directory inside the "/" export (MNT of a
    # subdirectory is allowed), never the removed export's root handle.
    m = c.mnt("/extra")
    assert m.status != N.MNT3_OK or m.fh != x
    # Added back: the same path gets the same id, so the old handle works again.
    hup(g, exports=[export(), export(path="/extra")])
    assert c.getattr(x).check().attr.type == N.NF3DIR
    c.close()


def test_bad_file_refused_old_rules_kept(gw_factory):
    g = gw_factory(backend="fs", exports=[export(access="ro")])
    c = g.client()
    root = c.mount("/")
    good = g.config_text()
    for bad, why in [
        ("[[[", "invalid configuration"),
        (good.replace('access = "ro"', 'access = "rw"').replace('"127.0.0.0/8"', '"127.0.0.0/99"'),
         "exports[0].clients"),
    ]:
        g.config_path.write_text(bad)
        line = reload(g)
        assert "reload refused" in line and why in line, line
        assert c.create(root, "new", 0o644).status == N.NFS3ERR_ROFS  # still ro
    assert g.alive()
    c.close()


def test_restart_keys_named_and_stats_rebound(gw_factory):
    g = gw_factory(backend="memory")
    c = g.client()
    root = c.mount("/")
    port = free_port()
    g.extra = {"stats": {"listen": f"127.0.0.1:{port}"}, "pools": {"large": 40}}
    g.write_config()
    line = reload(g)
    assert f'stats.listen = "127.0.0.1:{port}"' in line, line
    assert line.endswith("NOT applied (need a restart): pools.large"), line
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert "nfsgw_" in body
    # Stats off again; the restart-only key is still reported, since it still differs.
    g.extra = {"pools": {"large": 40}}
    line = hup(g)
    assert "stats endpoint off" in line and "pools.large" in line, line
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)
    assert c.getattr(root).ok
    c.close()
