"""Namespace operations through libnfs itself (the PyPI `libnfs` bindings over the
same C library as nfs-cp): a client none of us wrote, for what the command-line
utilities cannot do. Checked against the objects on disk (fs backend)."""
import os
import stat

import pytest

libnfs = pytest.importorskip("libnfs", reason="tests/setup.sh could not build the libnfs bindings")


def test_namespace_ops_through_libnfs(gw_fs):
    url = f"nfs://127.0.0.1/?version=3&nfsport={gw_fs.port}&mountport={gw_fs.port}"
    nfs = libnfs.NFS(url)
    ctx = nfs._nfs
    root = gw_fs.data_dir

    assert nfs.mkdir("/d") == 0
    assert (root / "d").is_dir()
    f = nfs.open("/d/a.txt", mode="w")
    f.write("hello libnfs")
    f.close()
    assert (root / "d" / "a.txt").read_bytes() == b"hello libnfs"

    assert libnfs.nfs_rename(ctx, "/d/a.txt", "/d/b.txt") == 0
    assert not (root / "d" / "a.txt").exists()
    assert (root / "d" / "b.txt").read_bytes() == b"hello libnfs"

    assert libnfs.nfs_symlink(ctx, "b.txt", "/d/link") == 0
    st = nfs.lstat("/d/link")
    assert stat.S_ISLNK(st["mode"]), st
    assert nfs.open("/d/link").read() == "hello libnfs"  # libnfs follows it

    assert libnfs.nfs_chmod(ctx, "/d/b.txt", 0o600) == 0
    assert stat.S_IMODE(nfs.stat("/d/b.txt")["mode"]) == 0o600

    assert libnfs.nfs_truncate(ctx, "/d/b.txt", 5) == 0
    assert (root / "d" / "b.txt").read_bytes() == b"hello"

    assert sorted(nfs.listdir("/d")) == sorted([".", "..", "b.txt", "link"])
    assert libnfs.nfs_link(ctx, "/d/b.txt", "/d/hard") == 0
    assert nfs.unlink("/d/hard") == 0
    assert nfs.unlink("/d/link") == 0 and nfs.unlink("/d/b.txt") == 0
    assert nfs.rmdir("/d") == 0
    assert not (root / "d").exists()
