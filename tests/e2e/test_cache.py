"""The reactor-side read cache must never serve stale or forbidden data.

Each test first makes the gateway cache a file (GETATTR and small READs are then
answered on the reactor), then changes the file in a way the cache must notice.
"""
import os
import time

import nfsclient as N


def _file(c, root, name, data):
    fh = c.create(root, name, 0o644).check().fh
    c.write(fh, 0, data, stable=N.FILE_SYNC).check()
    return fh


def _warm(c, fh, size):
    """Reads the file in 4 KiB pieces twice so the cache holds it."""
    for _ in range(2):
        for off in range(0, size, 4096):
            c.read(fh, off, 4096).check()
        c.getattr(fh).check()


def test_writes_are_never_served_stale(gw):
    size = 256 << 10
    with gw.client() as c, gw.client() as other:
        root = c.mount("/")
        fh = _file(c, root, "hot.bin", os.urandom(size))
        _warm(c, fh, size)
        for rnd in range(20):
            new = os.urandom(4096)
            off = (rnd * 37 % 64) * 4096
            stable = N.UNSTABLE if rnd % 2 else N.FILE_SYNC
            # Written through one connection, read back through another.
            c.write(fh, off, new, stable=stable).check()
            got = other.read(fh, off, 4096).check()
            assert got.data == new, f"round {rnd}: stale data after WRITE at {off}"
            assert other.read(fh, off, 4096).check().data == new


def test_truncate_and_extend_are_seen(gw):
    size = 64 << 10
    with gw.client() as c:
        root = c.mount("/")
        fh = _file(c, root, "t.bin", os.urandom(size))
        _warm(c, fh, size)
        c.setattr(fh, size=1000).check()
        r = c.read(fh, 0, 4096).check()
        assert (len(r.data), r.eof) == (1000, True)
        assert c.getattr(fh).check().attr.size == 1000
        c.setattr(fh, size=8192).check()
        r = c.read(fh, 4096, 4096).check()
        assert r.data == b"\0" * 4096


def test_removed_and_recreated_file(gw):
    with gw.client() as c:
        root = c.mount("/")
        fh = _file(c, root, "gone.bin", b"a" * 8192)
        _warm(c, fh, 8192)
        c.remove(root, "gone.bin").check()
        assert c.getattr(fh).status == N.NFS3ERR_STALE
        assert c.read(fh, 0, 4096).status == N.NFS3ERR_STALE
        fh2 = _file(c, root, "gone.bin", b"b" * 8192)
        assert c.read(fh2, 0, 4096).check().data == b"b" * 4096


def test_permissions_checked_on_cache_hits(gw):
    with gw.client() as root_c, gw.client(uid=1000, gid=1000) as user:
        root = root_c.mount("/")
        fh = _file(root_c, root, "secret.bin", b"s" * 8192)
        root_c.setattr(fh, mode=0o600).check()
        _warm(root_c, fh, 8192)  # cached by root's reads
        user.mount("/")
        r = user.read(fh, 0, 4096)
        assert r.status == N.NFS3ERR_ACCES, f"uid 1000 read a 0600 root file: {N.status_name(r.status)}"


def test_changes_behind_the_gateway_are_seen_within_a_second(gw_fs):
    with gw_fs.client() as c:
        root = c.mount("/")
        fh = _file(c, root, "ext.bin", b"1" * 8192)
        _warm(c, fh, 8192)
        path = gw_fs.data_dir / "ext.bin"
        with open(path, "r+b") as f:
            f.write(b"2" * 8192)
        time.sleep(1.3)
        assert c.read(fh, 0, 4096).check().data == b"2" * 4096
        assert c.read(fh, 4096, 4096).check().data == b"2" * 4096


def test_large_reads_keep_attributes_exact(gw_fs):
    """READs too large for the page cache still teach the cache attributes: they must
    be the file's real ones. The file is made on disk, so no gateway mutation has
    touched the invalidation counters."""
    size = 300 << 10
    data = os.urandom(size)
    path = gw_fs.data_dir / "big.bin"
    path.write_bytes(data)
    os.chmod(path, 0o640)
    with gw_fs.client() as c:
        root = c.mount("/")
        fh = c.lookup(root, "big.bin").check().fh
        got = b""
        for off in range(0, size, 128 << 10):
            got += c.read(fh, off, 128 << 10).check().data
        assert got == data
        for _ in range(3):
            a = c.getattr(fh).check().attr
            assert (a.type, a.size, a.mode & 0o7777) == (1, size, 0o640), a


def test_sequential_small_reads_are_exact(gw):
    """Sequential 4 KiB reads trigger read-ahead into the cache; every byte must match."""
    size = 1 << 20
    with gw.client() as c:
        root = c.mount("/")
        data = os.urandom(size)
        fh = _file(c, root, "seq.bin", data)
        for _ in range(2):
            got = b"".join(c.read(fh, off, 4096).check().data for off in range(0, size, 4096))
            assert got == data
