"""POSIX semantics through the real binary (found missing by pjdfstest over the Linux
client): set-id bits, chown/chmod by non-owners, parent directory times, data that
follows a rename before COMMIT, hostile sizes and times, stable export ids."""

import stat
import time

import pytest

import nfsclient as N
from conftest import DEFAULT_EXPORT


def export(**kw):
    e = dict(DEFAULT_EXPORT)
    e.update(kw)
    return e


def mode(c, fh):
    return stat.S_IMODE(c.getattr(fh).check().attr.mode)


def setup(gw_factory, backend):
    """squash=none export; root makes /t 0777 and a root-owned 06777 file in it."""
    g = gw_factory(backend=backend, exports=[export(squash="none")])
    r = g.client(uid=0, gid=0)
    root = r.mount("/")
    made = r.mkdir(root, "t", 0o777)
    t = made.fh if made.ok else r.lookup(root, "t").check().fh
    r.setattr(t, mode=0o777).check()
    return g, r, t


def test_write_by_non_root_clears_set_id_bits(gw_factory, backend):
    g, r, t = setup(gw_factory, backend)
    f = r.create(t, "suid", 0o644).check().fh
    r.setattr(f, mode=0o6777).check()
    # root writes: the bits stay (chmod/12 is about unprivileged writers)
    r.write(f, 0, b"root", N.FILE_SYNC).check()
    assert mode(r, f) == 0o6777
    u = g.client(uid=65534, gid=65534)
    u.mount("/")
    u.write(f, 0, b"user", N.UNSTABLE).check()
    assert mode(r, f) == 0o0777, oct(mode(r, f))
    # S_ISGID without group execute is not a privilege bit: it stays
    r.setattr(f, mode=0o6745).check()
    r.setattr(f, mode=0o6747).check()
    u.write(f, 0, b"again", N.FILE_SYNC).check()
    assert mode(r, f) == 0o2747, oct(mode(r, f))
    # a size change by a non-root writer clears them too
    r.setattr(f, mode=0o6777).check()
    u.setattr(f, size=1).check()
    assert mode(r, f) == 0o0777
    # chown (by root) of a file clears them; of a directory not
    r.setattr(f, mode=0o6777).check()
    r.setattr(f, uid=65534, gid=65534).check()
    assert mode(r, f) == 0o0777
    d = r.mkdir(t, "sgiddir", 0o755).check().fh
    r.setattr(d, mode=0o2775).check()
    r.setattr(d, uid=65534).check()
    assert mode(r, d) == 0o2775
    assert u.read(f, 0, 10).check().data == b"a"   # "again", truncated to 1
    r.close()
    u.close()


def test_chown_and_chmod_by_non_owner(gw_factory, backend):
    g, r, t = setup(gw_factory, backend)
    f = r.create(t, "owned", 0o644).check().fh
    r.setattr(f, uid=65534, gid=65534).check()
    other = g.client(uid=65533, gid=65533)
    other.mount("/")
    # chown/07: a non-owner "setting" the current owner and group gets EPERM
    assert other.setattr(f, uid=65534, gid=65534).status == N.NFS3ERR_PERM
    assert other.setattr(f, gid=65534).status == N.NFS3ERR_PERM
    assert other.setattr(f, uid=65533).status == N.NFS3ERR_PERM
    assert other.setattr(f, mode=0o777).status == N.NFS3ERR_PERM
    assert other.setattr(f, mtime=(1000, 0)).status == N.NFS3ERR_PERM
    a = r.getattr(f).check().attr
    assert (a.uid, a.gid, stat.S_IMODE(a.mode)) == (65534, 65534, 0o644)
    owner = g.client(uid=65534, gid=65534, gids=[100])
    owner.mount("/")
    owner.setattr(f, uid=65534, gid=65534).check()      # no-op by the owner: fine
    owner.setattr(f, gid=100).check()                    # into one of its groups
    assert owner.setattr(f, gid=200).status == N.NFS3ERR_PERM
    assert owner.setattr(f, uid=0).status == N.NFS3ERR_PERM
    # chmod/00: an owner outside the file's group cannot set S_ISGID
    r.setattr(f, gid=300).check()
    owner.setattr(f, mode=0o2755).check()
    assert mode(r, f) == 0o755
    owner.setattr(f, gid=100).check()
    owner.setattr(f, mode=0o2755).check()                # now in the group: kept
    assert mode(r, f) == 0o2755
    # a chgrp with a mode in the same SETATTR clears the set-id bits (knfsd)
    owner.setattr(f, gid=65534, mode=0o2755).check()
    assert mode(r, f) == 0o755
    for cl in (r, other, owner):
        cl.close()


def test_entry_changes_advance_parent_times(gw_factory, backend):
    g, r, t = setup(gw_factory, backend)
    d = r.mkdir(t, "p", 0o777).check().fh
    e = r.mkdir(t, "q", 0o777).check().fh
    for x in (d, e):
        r.setattr(x, mtime=(1_000_000_000, 0)).check()

    def advances(dirs, what, op):
        before = [r.getattr(x).check().attr for x in dirs]
        time.sleep(0.01)
        op()
        for x, b in zip(dirs, before):
            a = r.getattr(x).check().attr
            assert a.mtime > b.mtime and a.ctime > b.ctime, (what, b.mtime, a.mtime, b.ctime, a.ctime)

    advances([d], "create", lambda: r.create(d, "f", 0o644).check())
    advances([d], "mkdir", lambda: r.mkdir(d, "sub", 0o755).check())
    advances([d], "symlink", lambda: r.symlink(d, "l", "f").check())
    advances([d], "rename", lambda: r.rename(d, "f", d, "g").check())
    advances([d, e], "rename across", lambda: r.rename(d, "g", e, "g").check())
    advances([e], "remove", lambda: r.remove(e, "g").check())
    advances([d], "rmdir", lambda: r.rmdir(d, "sub").check())
    # wcc data of the change shows the new times too
    res = r.create(d, "h", 0o644).check()
    assert res.dir_wcc.after.mtime > res.dir_wcc.before.mtime
    r.close()


def test_data_follows_silly_rename_before_commit(gw_factory, backend):
    g = gw_factory(backend=backend)
    c = g.client()
    root = c.mount("/")
    d = c.mkdir(root, "u", 0o755).check().fh
    f = c.create(d, "f", 0o644).check().fh
    w = c.write(f, 0, b"Hello, World!", N.UNSTABLE).check()
    c.rename(d, "f", d, ".nfs000000000001").check()
    got = c.read(f, 0, 100).check()
    assert got.data == b"Hello, World!", got.data
    assert c.getattr(f).check().attr.size == 13
    cm = c.commit(f).check()
    assert cm.verf == w.verf
    assert c.lookup(d, "f").status == N.NFS3ERR_NOENT
    c.close()
    if backend == "memory":     # nothing survives a restart there
        return
    g.restart()
    c = g.client()
    root = c.mount("/")
    d = c.lookup(root, "u").check().fh
    n = c.lookup(d, ".nfs000000000001").check().fh
    assert c.read(n, 0, 100).check().data == b"Hello, World!"
    assert c.read(f, 0, 100).check().data == b"Hello, World!"   # the old handle too
    c.close()


def test_hostile_sizes_and_times(gw_factory, backend):
    g = gw_factory(backend=backend)
    c = g.client()
    root = c.mount("/")
    f = c.create(root, "h", 0o644).check().fh
    c.write(f, 0, b"abc").check()
    for size in (2**64 - 1, 2**63, 2**64 - 4096):
        assert c.setattr(f, size=size).status == N.NFS3ERR_FBIG, size
    assert c.write(f, 2**63 - 2, b"xyz").status == N.NFS3ERR_FBIG
    assert c.write(f, 2**64 - 1, b"x").status == N.NFS3ERR_FBIG
    assert c.setattr(f, mtime=(5, 1_000_000_000)).status == N.NFS3ERR_INVAL
    assert c.setattr(f, atime=(5, 2**32 - 1)).status == N.NFS3ERR_INVAL
    assert c.mkdir(root, "badtime", 0o755, mtime=(5, 10**9)).status == N.NFS3ERR_INVAL
    a = c.getattr(f).check().attr
    assert a.size == 3 and a.mtime[0] > 5
    assert c.lookup(root, "badtime").status == N.NFS3ERR_NOENT
    c.close()


def test_export_ids_survive_adding_an_export_in_front(gw_factory, backend):
    if backend == "memory":
        pytest.skip("the memory backend keeps no files across a restart")
    g = gw_factory(backend=backend, exports=[export(path="/b")])
    c = g.client()
    root = c.mount("/b")
    f = c.create(root, "kept", 0o644).check().fh
    c.write(f, 0, b"still here").check()
    c.close()
    g.stop()
    g.exports = [export(path="/a"), export(), export(path="/b")]
    g.write_config()
    g.start()
    c = g.client()
    assert c.read(f, 0, 100).check().data == b"still here"
    assert c.read(root, 0, 1).status == N.NFS3ERR_ISDIR    # the root handle resolves too
    c.close()
