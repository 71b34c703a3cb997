"""Export access control: ro exports, client networks, squashing, Unix permissions."""

import os
import stat

import pytest

import nfsclient as N
from conftest import DEFAULT_EXPORT


def export(**kw):
    e = dict(DEFAULT_EXPORT)
    e.update(kw)
    return e


def test_ro_export_rejects_modifications(gw_factory, backend):
    # seed content through a rw run on the same dirs, then serve it read-only
    g = gw_factory(backend=backend)
    c = g.client()
    root = c.mount("/")
    if backend == "fs":
        (g.data_dir / "dir").mkdir()
        (g.data_dir / "dir" / "f").write_bytes(b"read me")
    elif backend in ("s3", "garage"):   # put by a plain S3 client: a marker and an object
        s3 = g.s3_client()
        s3.put_object(Bucket=g.bucket, Key="dir/", Body=b"")
        s3.put_object(Bucket=g.bucket, Key="dir/f", Body=b"read me")
    c.close()
    g.stop()
    g.exports = [export(access="ro")]
    g.write_config()
    g.start()
    c = g.client()
    root = c.mount("/")
    assert c.getattr(root).check().attr.type == N.NF3DIR
    assert c.create(root, "new", 0o644).status == N.NFS3ERR_ROFS
    assert c.create(root, "new", how=N.EXCLUSIVE, verf=b"12345678").status == N.NFS3ERR_ROFS
    assert c.mkdir(root, "newdir").status == N.NFS3ERR_ROFS
    assert c.symlink(root, "ln", "x").status == N.NFS3ERR_ROFS
    assert c.setattr(root, mode=0o700).status == N.NFS3ERR_ROFS
    assert c.lookup(root, "new").status == N.NFS3ERR_NOENT
    acc = c.access(root, N.ACCESS3_MODIFY | N.ACCESS3_EXTEND | N.ACCESS3_DELETE | N.ACCESS3_LOOKUP).check()
    assert acc.access & (N.ACCESS3_MODIFY | N.ACCESS3_EXTEND | N.ACCESS3_DELETE) == 0, \
        f"ACCESS on ro export grants {acc.access:#x}"
    if backend in ("fs", "s3", "garage"):
        d = c.lookup(root, "dir").check().fh
        f = c.lookup(d, "f").check().fh
        assert c.read(f, 0, 100).check().data == b"read me"
        assert c.write(f, 0, b"X", N.FILE_SYNC).status == N.NFS3ERR_ROFS
        assert c.write(f, 0, b"X", N.UNSTABLE).status == N.NFS3ERR_ROFS
        assert c.setattr(f, size=0).status == N.NFS3ERR_ROFS
        assert c.remove(d, "f").status == N.NFS3ERR_ROFS
        assert c.rename(d, "f", root, "g").status == N.NFS3ERR_ROFS
        assert c.rmdir(root, "dir").status == N.NFS3ERR_ROFS
        c.close()
        if backend == "fs":
            assert (g.data_dir / "dir" / "f").read_bytes() == b"read me"
        else:
            s3 = g.s3_client()
            assert s3.get_object(Bucket=g.bucket, Key="dir/f")["Body"].read() == b"read me"
            from s3server import list_keys
            assert sorted(list_keys(s3, g.bucket)) == ["dir/", "dir/f"], list_keys(s3, g.bucket)


def test_client_not_allowed(gw_factory):
    g = gw_factory(backend="fs")
    (g.data_dir / "f").write_bytes(b"secret")
    c = g.client()
    root = c.mount("/")
    fh = c.lookup(root, "f").check().fh
    c.close()
    g.stop()
    g.exports = [export(clients=["10.9.9.9/32"])]
    g.write_config()
    g.start()
    c = g.client()
    m = c.mnt("/")
    assert m.status == N.MNT3ERR_ACCES, f"MNT from a refused client -> mountstat3 {m.status}, expected 13"
    # handles minted earlier (same state dir) do not help either
    assert c.getattr(root).status == N.NFS3ERR_ACCES
    assert c.getattr(fh).status == N.NFS3ERR_ACCES
    assert c.read(fh, 0, 10).status == N.NFS3ERR_ACCES
    assert c.lookup(root, "f").status == N.NFS3ERR_ACCES
    assert c.write(fh, 0, b"x").status == N.NFS3ERR_ACCES
    assert c.create(root, "g", 0o644).status == N.NFS3ERR_ACCES
    c.close()
    assert (g.data_dir / "f").read_bytes() == b"secret"
    assert not (g.data_dir / "g").exists()


def squashed_export(gw_factory, backend, **exp):
    """A gateway whose squashed export root is world-writable, and that export's path.

    fs: the data dir is made 0777 on disk and exported as "/". memory, s3: "/" (squash
    none) plus "/sq" (squashed); "/sq" is created 0777 through the unsquashed export first."""
    if backend == "fs":
        g = gw_factory(backend="fs", exports=[export(**exp)], start=False)
        os.chmod(g.data_dir, 0o777)
        g.start()
        return g, "/"
    g = gw_factory(backend=backend, exports=[export(), export(path="/sq", **exp)])
    with g.client() as c:
        root = c.mount("/")
        # The gateway creates a configured export's root at start if it is missing.
        made = c.mkdir(root, "sq", 0o777)
        d = made.fh if made.ok else c.lookup(root, "sq").check().fh
        c.setattr(d, mode=0o777).check()
    return g, "/sq"


def test_squash_root(gw_factory, backend):
    g, path = squashed_export(gw_factory, backend, squash="root")
    c = g.client(uid=0, gid=0)
    root = c.mount(path)
    d = c.mkdir(root, "sq", 0o777)
    if d.status != N.NFS3_OK:
        pytest.fail(f"MKDIR as squashed root in the export root -> {N.status_name(d.status)}; "
                    f"root attrs {c.getattr(root).attr}")
    a = d.attr or c.getattr(d.fh).check().attr
    assert (a.uid, a.gid) == (65534, 65534), f"dir made by uid 0 under squash=root owned by {a.uid}:{a.gid}"
    f = c.create(d.fh, "byroot", 0o644).check()
    a = c.getattr(f.fh).check().attr
    assert (a.uid, a.gid) == (65534, 65534), f"file made by uid 0 under squash=root owned by {a.uid}:{a.gid}"
    # an ordinary uid is kept
    u = g.client(uid=1000, gid=1000)
    f2 = u.create(d.fh, "byuser", 0o644).check()
    a = u.getattr(f2.fh).check().attr
    assert (a.uid, a.gid) == (1000, 1000)
    # squashed root cannot chown files to itself
    assert c.setattr(f2.fh, uid=0).status in (N.NFS3ERR_PERM, N.NFS3ERR_ACCES)
    c.close()
    u.close()


def test_squash_all_with_anon_ids(gw_factory, backend):
    g, path = squashed_export(gw_factory, backend, squash="all", anon_uid=4321, anon_gid=4322)
    c = g.client(uid=1000, gid=1000)
    root = c.mount(path)
    d = c.mkdir(root, "all", 0o777)
    assert d.status == N.NFS3_OK, f"MKDIR under squash=all -> {N.status_name(d.status)}"
    f = c.create(d.fh, "x", 0o644).check()
    a = c.getattr(f.fh).check().attr
    assert (a.uid, a.gid) == (4321, 4322), f"squash=all anon 4321:4322 but file owned by {a.uid}:{a.gid}"
    r = g.client(uid=0, gid=0)
    f = r.create(d.fh, "y", 0o644).check()
    a = r.getattr(f.fh).check().attr
    assert (a.uid, a.gid) == (4321, 4322)
    c.close()
    r.close()


def test_unix_permissions(gw_factory, backend):
    g = gw_factory(backend=backend, exports=[export(squash="none")])
    root_c = g.client(uid=0, gid=0)
    root = root_c.mount("/")
    home = root_c.mkdir(root, "home", 0o755).check().fh
    root_c.setattr(home, uid=1000, gid=1000).check()
    owner = g.client(uid=1000, gid=1000)
    other = g.client(uid=2000, gid=2000)
    priv = owner.create(home, "private", 0o600).check().fh
    owner.write(priv, 0, b"mine").check()
    a = owner.getattr(priv).check().attr
    assert (a.uid, a.gid, stat.S_IMODE(a.mode)) == (1000, 1000, 0o600)

    assert owner.read(priv, 0, 10).check().data == b"mine"
    assert other.read(priv, 0, 10).status == N.NFS3ERR_ACCES
    assert other.write(priv, 0, b"theirs").status == N.NFS3ERR_ACCES
    assert other.setattr(priv, mode=0o666).status in (N.NFS3ERR_PERM, N.NFS3ERR_ACCES)
    assert other.setattr(priv, size=0).status == N.NFS3ERR_ACCES
    acc = other.access(priv, N.ACCESS3_READ | N.ACCESS3_MODIFY).check()
    assert acc.access & (N.ACCESS3_READ | N.ACCESS3_MODIFY) == 0
    # directory 0755 owned by 1000: others may look up but not create or delete
    assert other.lookup(home, "private").status == N.NFS3_OK
    assert other.create(home, "intruder", 0o644).status == N.NFS3ERR_ACCES
    assert other.mkdir(home, "intruderdir").status == N.NFS3ERR_ACCES
    assert other.remove(home, "private").status == N.NFS3ERR_ACCES
    assert other.rename(home, "private", home, "p2").status == N.NFS3ERR_ACCES
    # a group member gets group rights
    owner.setattr(priv, mode=0o640).check()
    grp = g.client(uid=3000, gid=3000, gids=[1000])
    assert grp.read(priv, 0, 10).check().data == b"mine"
    assert grp.write(priv, 0, b"x").status == N.NFS3ERR_ACCES
    # root (not squashed) may read anything
    assert root_c.read(priv, 0, 10).check().data == b"mine"
    assert owner.read(priv, 0, 10).check().data == b"mine"
    for cl in (root_c, owner, other, grp):
        cl.close()
