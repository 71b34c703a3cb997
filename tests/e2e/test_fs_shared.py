"""Several gateways on one `fs` directory (`backend.shared = true`, README "Several
gateways on one directory"): two gateway processes with their own state dirs on one
backend.root accept each other's NFSv3 handles at once — for files the second one has
never looked up — for GETATTR, READ, WRITE and READDIR; a name removed and re-created
through one is STALE at the other; forged handles are BADHANDLE; gateways started at
the same moment end with one handle key. Mirrors tests/e2e/test_s3_handles.py.
"""

from __future__ import annotations

import threading
import time

import nfsclient as N

LONG = "a-name-long-enough-that-the-key-does-not-fit-in-a-handle"


def pair(gw_factory, root, start=True, shared=(True, True)):
    root.mkdir(exist_ok=True)
    return [gw_factory(backend="fs", start=start, backend_opts={"root": str(root), "shared": s})
            for s in shared]


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


def test_a_handle_from_a_works_on_b_at_once(gw_factory, tmp_path):
    a, b = pair(gw_factory, tmp_path / "shared-root")
    ca, cb = a.client(), b.client()
    ra, rb = ca.mount("/"), cb.mount("/")
    assert ra == rb, "the two gateways hand out different root handles"
    d = ca.mkdir(ra, "d").check().fh
    for name in ["short", LONG]:
        fh = ca.create(d, name).check().fh
        ca.write(fh, 0, b"written at A").check()
        # B never looked the name up.
        assert cb.getattr(fh).check().attr.size == 12
        assert cb.read(fh, 0, 100).check().data == b"written at A"
        cb.write(fh, 0, b"WRITTEN").check()
        assert ca.read(fh, 0, 100).check().data == b"WRITTEN at A"
        assert cb.lookup(d, name).check().fh == fh, "B hands out the same handle"
    names = sorted(e.name for e in cb.readdir_all(d) if e.name not in (".", ".."))
    assert names == sorted(["short", LONG]), names
    assert not [e for e in cb.readdir_all(rb) if e.name.startswith(".nfsgw")]
    ca.close()
    cb.close()


def test_removed_and_recreated_on_a_is_stale_on_b(gw_factory, tmp_path):
    a, b = pair(gw_factory, tmp_path / "shared-root")
    ca, cb = a.client(), b.client()
    ra = ca.mount("/")
    cb.mount("/")
    for name in ["x", LONG]:
        old = ca.create(ra, name).check().fh
        ca.write(old, 0, b"old").check()
        assert cb.read(old, 0, 10).check().data == b"old"
        ca.remove(ra, name).check()
        new = ca.create(ra, name).check().fh
        ca.write(new, 0, b"new one").check()
        assert new != old
        stale_within(cb, old, name)
        assert cb.read(new, 0, 10).check().data == b"new one"
    ca.close()
    cb.close()


def stale_within(c, fh, name, bound=3.0):
    """B's reactor may answer from what it cached of the old file for up to about 2 s
    (README "How soon B sees what A wrote"): the old bytes, never the new file's; then
    STALE."""
    deadline = time.monotonic() + bound
    while True:
        r = c.read(fh, 0, 10)
        if r.status == N.NFS3ERR_STALE:
            assert c.getattr(fh).status == N.NFS3ERR_STALE, name
            return
        assert r.status == 0 and r.data == b"old", (name, r)
        assert time.monotonic() < deadline, f"{name}: still served {bound} s after its removal"
        time.sleep(0.1)


def test_forged_handles_are_badhandle(gw_factory, tmp_path):
    a, b = pair(gw_factory, tmp_path / "shared-root")
    ca, cb = a.client(), b.client()
    fh = ca.create(ca.mount("/"), "f").check().fh
    cb.mount("/")
    for i in (0, 3, 12, 20, len(fh) - 1):
        bad = bytearray(fh)
        bad[i] ^= 0x40
        assert cb.getattr(bytes(bad)).status == N.NFS3ERR_BADHANDLE, i
    ca.close()
    cb.close()


def test_without_shared_b_refuses_a_handles(gw_factory, tmp_path):
    """What the option changes: a gateway with it off on the same directory keeps its
    own (version-1) handles and refuses the shared ones, and says so at start."""
    a, b = pair(gw_factory, tmp_path / "shared-root", shared=(True, False))
    ca, cb = a.client(), b.client()
    fh = ca.create(ca.mount("/"), "f").check().fh
    rb = cb.mount("/")
    assert cb.getattr(fh).status == N.NFS3ERR_BADHANDLE
    assert len(cb.lookup(rb, "f").check().fh) == 31
    assert "holds a shared handle key" in b.log_path.read_text(errors="replace")
    ca.close()
    cb.close()


def test_switching_on_keeps_this_gateways_earlier_handles(gw_factory, tmp_path):
    """README: handles given out before `shared` was switched on stay valid on the
    gateway that gave them (and it says so at start); another gateway refuses them."""
    a, = pair(gw_factory, tmp_path / "shared-root", shared=(False,))
    c = a.client()
    old = c.create(c.mount("/"), "f").check().fh
    c.write(old, 0, b"kept").check()
    c.close()
    a.stop()
    a.backend_opts["shared"] = True
    a.write_config()
    a.start()
    assert "stay valid here, but only here" in a.log_path.read_text(errors="replace")
    c = a.client()
    assert c.read(old, 0, 10).check().data == b"kept"
    new = c.lookup(c.mount("/"), "f").check().fh
    assert new != old and len(old) == 31
    b, = pair(gw_factory, tmp_path / "shared-root", shared=(True,))
    cb = b.client()
    cb.mount("/")
    assert cb.getattr(old).status == N.NFS3ERR_BADHANDLE
    assert cb.read(new, 0, 10).check().data == b"kept"
    c.close()
    cb.close()


def test_gateways_starting_together_end_with_one_key(gw_factory, tmp_path):
    for i in range(3):
        gws = pair(gw_factory, tmp_path / f"root{i}", start=False)
        start_together(gws)
        c1, c2 = gws[0].client(), gws[1].client()
        r1, r2 = c1.mount("/"), c2.mount("/")
        assert r1 == r2, "two keys"
        fh = c1.create(r1, f"f{i}").check().fh
        assert c2.getattr(fh).ok
        c1.close()
        c2.close()
        for g in gws:
            g.stop()
