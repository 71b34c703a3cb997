"""Handles and committed data across gateway restarts (fs backend), forged handles."""

import os
import signal

import pytest

import nfsclient as N


def _setup(g):
    c = g.client()
    root = c.mount("/")
    d = c.mkdir(root, "keep").check().fh
    f = c.create(d, "data.bin", 0o644).check().fh
    return c, root, d, f


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_handles_and_committed_data_survive_restart(gw_fs, sig):
    g = gw_fs
    c, root, d, f = _setup(g)
    data = os.urandom((3 << 20) + 1234)
    ws = c.write_all(f, data, stable=N.UNSTABLE)
    verf1 = ws[0].verf
    cm = c.commit(f).check()
    assert cm.verf == verf1
    f2 = c.create(d, "sync.bin", 0o644).check().fh
    fsync_data = os.urandom(100_000)
    c.write(f2, 0, fsync_data, N.FILE_SYNC).check()
    c.close()

    g.restart(sig)

    c = g.client()
    # the held handles work without a new MNT or LOOKUP
    assert c.getattr(root).check().attr.type == N.NF3DIR
    assert c.getattr(d).check().attr.type == N.NF3DIR
    a = c.getattr(f).check().attr
    assert a.size == len(data), f"size after restart {a.size}, committed {len(data)}"
    assert c.read_all(f) == data, "committed data not byte-exact after restart"
    assert c.read_all(f2) == fsync_data, "FILE_SYNC data not byte-exact after restart"
    # and still name the same objects
    assert c.lookup(d, "data.bin").check().attr.fileid == a.fileid
    assert c.mount("/") == root or c.getattr(c.mount("/")).check().attr.fileid == c.getattr(root).attr.fileid
    w = c.write(f, len(data), b"more", N.UNSTABLE).check()
    assert w.verf != verf1, "write verifier did not change across a restart"
    assert c.commit(f).check().verf == w.verf
    c.close()
    if sig == signal.SIGTERM:
        g.stop()
        assert (g.data_dir / "keep" / "data.bin").read_bytes() == data + b"more"


def test_uncommitted_unstable_after_sigterm_flushes(gw_fs):
    """SIGTERM is a clean shutdown that flushes staged data."""
    g = gw_fs
    c, root, d, f = _setup(g)
    data = os.urandom(2 << 20)
    c.write_all(f, data, stable=N.UNSTABLE)
    c.close()
    g.stop()
    assert (g.data_dir / "keep" / "data.bin").read_bytes() == data


def test_linked_file_handle_survives_sigkill(gw_fs):
    """A hard-linked file (LINK, RFC 1813 3.3.15) after a kill -9: the handle from
    before the LINK names it through both names, with its count and data; removing
    the first name leaves it to the other."""
    g = gw_fs
    c, root, d, f = _setup(g)
    c.write(f, 0, b"linked", N.FILE_SYNC).check()
    c.link(f, root, "hard").check()
    c.close()
    g.restart(signal.SIGKILL)
    c = g.client()
    assert c.getattr(f).check().attr.nlink == 2
    assert c.lookup(root, "hard").check().fh == f
    assert c.lookup(d, "data.bin").check().fh == f
    c.remove(d, "data.bin").check()
    assert c.getattr(f).check().attr.nlink == 1
    assert c.read_all(f) == b"linked"
    c.close()


def test_deleted_recreated_stale_across_restart(gw_fs):
    g = gw_fs
    c, root, d, f = _setup(g)
    c.remove(d, "data.bin").check()
    nf = c.create(d, "data.bin", 0o644).check().fh
    c.close()
    g.restart()
    c = g.client()
    assert c.getattr(f).status == N.NFS3ERR_STALE
    assert c.getattr(nf).check()
    c.close()


def test_file_replaced_on_disk_old_handle_stale(gw_fs):
    """Out-of-band change in the fs root: the name now refers to a different file."""
    g = gw_fs
    c, root, d, f = _setup(g)
    c.write(f, 0, b"v1", N.FILE_SYNC).check()
    c.close()
    g.stop()
    p = g.data_dir / "keep" / "data.bin"
    p.unlink()
    p.write_bytes(b"v2")
    g.start()
    c = g.client()
    r = c.getattr(f)
    assert r.status == N.NFS3ERR_STALE or (r.ok and c.read_all(f) == b"v2"), \
        f"old handle after on-disk replacement: {r}"
    c.close()


def _forged_variants(fh):
    out = {}
    for pos in sorted({0, len(fh) // 2, len(fh) - 1}):
        b = bytearray(fh)
        b[pos] ^= 0x01
        out[f"flip{pos}"] = bytes(b)
    out["truncated"] = fh[:-1]
    out["extended"] = fh + b"\0" if len(fh) < 64 else fh[:-1] + b"\xff"
    out["zeros"] = b"\0" * len(fh)
    out["random"] = os.urandom(len(fh))
    out["empty"] = b""
    out["short"] = b"\x01\x02\x03\x04"
    return out


def test_forged_handles_rejected(gw):
    c = gw.client()
    root = c.mount("/")
    f = c.create(root, "victim", 0o644).check().fh
    c.write(f, 0, b"secret").check()
    for name, bad in list(_forged_variants(f).items()) + [("root-" + k, v) for k, v in _forged_variants(root).items()]:
        if bad in (f, root):
            continue
        for what, r in (("GETATTR", c.getattr(bad)), ("READ", c.read(bad, 0, 10)),
                        ("LOOKUP", c.lookup(bad, "victim")), ("WRITE", c.write(bad, 0, b"x"))):
            assert r.status in (N.NFS3ERR_BADHANDLE, N.NFS3ERR_STALE), \
                f"{what} with forged handle {name} ({bad.hex()}) -> {N.status_name(r.status)}"
    assert c.read(f, 0, 10).check().data == b"secret"
    c.close()


def test_handle_from_other_gateway_rejected(gw_factory):
    """Two gateways with separate state dirs: one's handles are not valid on the other."""
    a = gw_factory(backend="fs")
    b = gw_factory(backend="fs")
    (a.data_dir / "same").write_bytes(b"A")
    (b.data_dir / "same").write_bytes(b"B")
    ca, cb = a.client(), b.client()
    fa = ca.lookup(ca.mount("/"), "same").check().fh
    r = cb.getattr(fa)
    assert r.status in (N.NFS3ERR_BADHANDLE, N.NFS3ERR_STALE), f"foreign handle accepted: {r}"
    ca.close()
    cb.close()
