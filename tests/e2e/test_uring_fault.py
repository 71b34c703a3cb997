"""Failed storage I/O under a running gateway, on the reactor's io_uring and on the
workers (README "Data I/O on io_uring"): real faults, no mocks.

* ENOSPC: the fs backend's root is a small tmpfs (root only: `mount -t tmpfs`),
  filled behind the gateway's back. NFSv3 and NFSv4.1 WRITEs (UNSTABLE, DATA_SYNC,
  FILE_SYNC; 4 KiB inline and 1 MiB on io-wq) then get NFS3ERR_NOSPC / NFS4ERR_NOSPC
  with the worker path's answer (status, wcc sizes, the same on `io = "workers"`);
  a write into a page the file already has still succeeds on the ring; a short
  write (tmpfs takes the pages that fit, then says ENOSPC) is never answered as a
  full write; a v4.1 slot is usable afterwards and a retransmission of the failed
  call gets the same bytes; COMMIT afterwards claims only acknowledged bytes;
  once space is freed the same file is written on the ring again
  (`nfsgw_worker_data_jobs_total` flat) and reads back exactly what was
  acknowledged.
* A file truncated or replaced behind the gateway while the reactor holds it open:
  READs never return bytes the file does not have, and after the revalidation
  bound (README "The read cache") they return the file's current bytes and size.

* EIO: the backend root is a FUSE pass-through file system (tests/e2e/faultfs.py)
  that fails chosen reads, writes or fsyncs with EIO. A stable WRITE whose sync
  fails and a COMMIT whose fdatasync fails are never answered as durable
  (NFS3ERR_IO / NFS4ERR_IO, as on the workers); the staged data is synced by the
  next COMMIT once the fault is gone; a failed READ gets NFS3ERR_IO, never bytes.

* EROFS: the tmpfs remounted read-only behind the gateway (the kernel refuses that,
  EBUSY, while the gateway holds a file open for writing, so only files it read):
  NFS3ERR_ROFS / NFS4ERR_ROFS for changes, READs go on.

Not here: block-device EIO (device-mapper's dm-error is not in this kernel); the
FUSE file system stands in for it.
"""
from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import nfsclient as N
from conftest import free_port
from statsutil import scrape
from test_uring_v4 import BIG, Client, UNSTABLE4, DATA_SYNC4, FILE_SYNC4

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="mounts a small tmpfs as the backend root: needs root")

NFS4ERR_NOSPC = 28
TMPFS = "8m"
PAGE = 4096
FILLER = "zz-filler"
# (stable_how, bytes): inline (4 KiB) and io-wq (1 MiB) writes of each kind.
CASES = list(itertools.product([N.UNSTABLE, N.DATA_SYNC, N.FILE_SYNC], [PAGE, 1 << 20]))


@pytest.fixture
def small_gw(gw_factory):
    """`small_gw(io)`: an fs gateway whose backend root is a fresh 8 MiB tmpfs."""
    mounted = []

    def make(io):
        port = free_port()
        g = gw_factory(backend="fs", backend_opts={"io": io}, start=False,
                       extra={"stats": {"listen": f"127.0.0.1:{port}"}})
        g.stats_port = port
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS},mode=0755", "tmpfs",
                            str(g.data_dir)], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
        mounted.append(g.data_dir)
        return g.start()

    yield make
    gw_factory.stop_all()
    for d in mounted:
        subprocess.run(["umount", "-l", str(d)], check=False)


def _jobs(g) -> float:
    return scrape(g.stats_port).sum("nfsgw_worker_data_jobs_total")


def fill(g, leave: int = 0) -> None:
    """Fills the tmpfs behind the gateway's back, then frees `leave` bytes (whole
    pages): the next write that needs more pages than that gets ENOSPC."""
    path = g.data_dir / FILLER
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        off = os.fstat(fd).st_size
        chunk = b"\xee" * (1 << 20)
        while True:
            try:
                n = os.pwrite(fd, chunk, off)
            except OSError as e:
                assert e.errno == 28, e
                break
            off += n
        assert off % PAGE == 0, off
        if leave:
            os.ftruncate(fd, off - leave)
    finally:
        os.close(fd)


def free(g) -> None:
    os.unlink(g.data_dir / FILLER)


def _failures(g) -> dict:
    m = scrape(g.stats_port)
    return {labels["op"]: v for labels, v in m.series("nfsgw_uring_failures_total")}


def _log(g) -> str:
    return g.log_path.read_text(errors="replace")


def _v3_script(g):
    """NFSv3 WRITEs on a full tmpfs; returns what the client saw, in a form both io
    modes must give alike (statuses, wcc sizes, counts)."""
    c = g.client()
    root = c.mount("/")
    fh = c.create(root, "f", 0o644).check().fh
    acked = bytearray(os.urandom(3 * PAGE))
    c.write(fh, 0, bytes(acked), stable=N.UNSTABLE).check()   # a worker's: teaches the ring
    c.getattr(fh).check()
    c.write(fh, 0, bytes(acked[:PAGE]), stable=N.UNSTABLE).check()
    seen = []
    fill(g)
    disk = g.data_dir / "f"
    for stable, n in CASES:
        end = len(acked)
        r = c.write(fh, end, os.urandom(n), stable=stable)
        assert r.status == N.NFS3ERR_NOSPC, (stable, n, r.status)
        # wcc: the file as it was and as it is (nothing was added).
        assert r.wcc.before is not None and r.wcc.before.size == end
        assert r.wcc.after is not None and r.wcc.after.size == disk.stat().st_size == end
        seen.append((stable, n, r.status, r.wcc.before.size, r.wcc.after.size))
        # Into pages the file has: no space needed, so it succeeds (on the ring).
        patch = os.urandom(PAGE)
        w = c.write(fh, PAGE, patch, stable=stable).check()
        # (A worker answers DATA_SYNC as FILE_SYNC: at least as stable as asked.)
        assert w.count == PAGE and w.committed >= stable
        acked[PAGE:2 * PAGE] = patch
        seen.append((stable, PAGE, 0, w.wcc.before.size, w.wcc.after.size))
    # Short writes: two pages free, a 1 MiB WRITE gets them and then ENOSPC. The
    # client must never hear that 1 MiB was written.
    for stable in (N.UNSTABLE, N.FILE_SYNC):
        free(g)
        fill(g, leave=2 * PAGE)
        # (Re)teaches the ring the file (a WRITE into its pages: no space needed).
        c.write(fh, 0, bytes(acked[:PAGE]), stable=N.UNSTABLE).check()
        end = disk.stat().st_size
        r = c.write(fh, end, os.urandom(1 << 20), stable=stable)
        on_disk = disk.stat().st_size
        if r.status == 0:
            # Legal only if the count says what was written.
            assert r.count == on_disk - end < 1 << 20, (r.count, on_disk, end)
        else:
            assert r.status == N.NFS3ERR_NOSPC, r.status
            assert r.wcc.after is not None and r.wcc.after.size == on_disk
        # Whatever landed past the acknowledged bytes is not acknowledged: cut it
        # off again so the next round starts at a known end.
        seen.append((stable, 1 << 20, r.status, on_disk - end))
        c.setattr(fh, size=len(acked)).check()
    # COMMIT after the failures: succeeds, and claims the acknowledged bytes (all
    # there).
    verf = c.commit(fh).check().verf
    assert disk.read_bytes() == bytes(acked)
    # Space back: the same file is written on the ring again.
    free(g)
    before = _jobs(g)
    c.getattr(fh).check()
    more = os.urandom(8 * 65536)
    for k, off in enumerate(range(0, len(more), 65536)):
        stable = (N.UNSTABLE, N.FILE_SYNC)[k % 2]
        w = c.write(fh, len(acked) + off, more[off:off + 65536], stable=stable).check()
        assert w.count == 65536 and w.verf == verf
    acked += more
    assert c.commit(fh).check().verf == verf
    jobs = _jobs(g) - before
    assert c.read_all(fh) == bytes(acked)
    assert disk.read_bytes() == bytes(acked)
    return seen, jobs


def test_v3_nospc_on_the_ring_answers_as_the_workers(small_gw):
    ring = small_gw("uring")
    got, jobs = _v3_script(ring)
    # After space is back: the GETATTR's relearn and at most a refresh or two.
    assert jobs <= 3, f"{jobs} WRITEs went to workers after the space came back"
    # The failed WRITEs ran on the ring first (each then on a worker): ENOSPC for
    # every kind and size, and the 1 MiB ones into two free pages short.
    f = _failures(ring)
    print("ring failures", f)
    assert f["write"] >= len(CASES) and f["short_write"] >= 2, f
    log = _log(ring)
    assert "panicked" not in log
    # One line per kind of failure (rate-limited), naming the error.
    assert "io_uring write failed (No space left on device (os error 28))" in log, log[-3000:]
    assert "io_uring write failed: short (8192 of 1048576 bytes" in log, log[-3000:]
    workers = small_gw("workers")
    want, _ = _v3_script(workers)
    assert got == want
    assert not any(_failures(workers).values()), "no ring, no ring failures"


def _v4_script(g):
    """The NFSv4.1 counterpart: statuses, a retransmission of each failed WRITE, the
    slot's next sequence id, and the file after space is freed."""
    v3 = g.client()
    root = v3.mount("/")
    fh = v3.create(root, "f4", 0o644).check().fh
    c = Client(g)
    sid, _ = c.open_rw(b"f4")
    acked = bytearray(os.urandom(3 * PAGE))
    c.write(fh, 0, bytes(acked), sid)                 # a worker's: teaches the ring
    c.write(fh, 0, bytes(acked[:PAGE]), sid)
    disk = g.data_dir / "f4"
    seen = []
    fill(g)
    how4 = {N.UNSTABLE: UNSTABLE4, N.DATA_SYNC: DATA_SYNC4, N.FILE_SYNC: FILE_SYNC4}
    for stable, n in CASES:
        # The session's ca_maxrequestsize is 1 MiB: the large WRITE a page less.
        n = min(n, BIG)
        rec = c.write_rec(fh, len(acked), os.urandom(n), sid, stable=how4[stable],
                          getattr=n == PAGE)
        rep = c.call(rec)
        st = c.results(rep).status
        assert st == NFS4ERR_NOSPC, (stable, n, st)
        # The retransmission (same slot, same sequence id): the same reply.
        assert c.call(rec) == rep, "a retransmitted failed WRITE gets the same reply"
        assert disk.stat().st_size == len(acked)
        # The slot goes on: the next sequence id is a new request, on the ring.
        patch = os.urandom(PAGE)
        count, committed, _, post = c.write(fh, PAGE, patch, sid, stable=how4[stable],
                                            getattr=True)
        assert count == PAGE and committed >= how4[stable]
        assert post[1] == len(acked)
        acked[PAGE:2 * PAGE] = patch
        seen.append((stable, n, st))
    # A short write: two pages free, 1 MiB asked.
    free(g)
    fill(g, leave=2 * PAGE)
    rep = c.call(c.write_rec(fh, len(acked), os.urandom(BIG), sid))
    u = c.results(rep)
    if u.status == 0:
        c.skip_putfh(u)
        assert (u.u32(), u.u32()) == (38, 0)
        assert u.u32() == disk.stat().st_size - len(acked) < BIG
    else:
        assert u.status == NFS4ERR_NOSPC, u.status
    seen.append(("short", u.status))
    v3.setattr(fh, size=len(acked)).check()
    verf = c.commit(fh)
    assert disk.read_bytes() == bytes(acked)
    free(g)
    before = _jobs(g)
    more = os.urandom(8 * 65536)
    for k, off in enumerate(range(0, len(more), 65536)):
        how = (UNSTABLE4, FILE_SYNC4)[k % 2]
        count, _, v, _ = c.write(fh, len(acked) + off, more[off:off + 65536], sid, stable=how)
        assert count == 65536 and v == verf
    acked += more
    assert c.commit(fh) == verf
    jobs = _jobs(g) - before
    body, eof = c.read(fh, 0, len(acked))
    assert body == bytes(acked) and eof
    assert disk.read_bytes() == bytes(acked)
    return seen, jobs


def test_v4_nospc_on_the_ring_answers_as_the_workers(small_gw):
    ring = small_gw("uring")
    got, jobs = _v4_script(ring)
    # The SETATTR above made the entry stale: one worker WRITE relearns it.
    assert jobs <= 3, f"{jobs} data COMPOUNDs went to workers after the space came back"
    f = _failures(ring)
    print("ring failures", f)
    assert f["write"] >= len(CASES) and f["short_write"] >= 1, f
    log = _log(ring)
    assert "panicked" not in log
    assert "io_uring write failed (No space left on device (os error 28))" in log, log[-3000:]
    workers = small_gw("workers")
    want, _ = _v4_script(workers)
    assert got == want


def _seen(check, what, bound=2.5):
    """Within the bound: ATTR_TTL, plus the read cache's stale-while-revalidate."""
    deadline = time.monotonic() + bound
    while not check():
        assert time.monotonic() < deadline, f"{what} not seen within {bound} s"
        time.sleep(0.05)


@pytest.mark.parametrize("io", ["uring", "workers"])
def test_files_truncated_or_replaced_behind_the_gateway(small_gw, io):
    g = small_gw(io)
    c = g.client()
    root = c.mount("/")
    data = os.urandom(300000)
    path = g.data_dir / "t"
    path.write_bytes(data)
    time.sleep(0.1)   # the file's ctime well before the worker's look at it
    fh = c.lookup_path(root, "t")
    c.getattr(fh).check()
    assert c.read(fh, 0, 200000).check().data == data[:200000]
    assert c.read(fh, 4096, 4096).check().data == data[4096:8192]   # now in the read cache
    # Truncated behind the gateway's back, while the reactor holds the file open.
    os.truncate(path, 1000)
    for off, n in [(0, 200000), (500, 100000), (2000, 100000)]:
        r = c.read(fh, off, n).check()
        # Never bytes the file does not have (no zeros, no old data past the end):
        # during the bound the short read says eof.
        assert r.data == data[off:1000], (off, n, len(r.data))
        assert r.eof
    # After the bound: the size and the bytes are the file's, small reads too.
    _seen(lambda: c.getattr(fh).check().attr.size == 1000, "the new size")
    _seen(lambda: c.read(fh, 0, 4096).check().data == data[:1000], "a small read's bytes")
    r = c.read(fh, 0, 200000).check()
    assert (r.data, r.eof, r.attr.size) == (data[:1000], True, 1000)
    # Replaced by another file under the same name (same size, other bytes).
    other = os.urandom(1000)
    (g.data_dir / "t.new").write_bytes(other)
    os.rename(g.data_dir / "t.new", path)
    _seen(lambda: c.read(fh, 0, 200000).check().data == other, "the replacement's bytes")
    _seen(lambda: c.read(fh, 0, 4096).check().data == other, "the replacement's bytes (small)")
    # Writes through the gateway land in the new file, never the old inode.
    c.write(fh, 0, b"N" * 10, stable=N.FILE_SYNC).check()
    assert path.read_bytes() == b"N" * 10 + other[10:]
    assert "panicked" not in _log(g)


# ---------------------------------------------------------------------------- EIO

NFS3ERR_IO = NFS4ERR_IO = 5


@pytest.fixture
def eio_gw(gw_factory):
    """`eio_gw(io)`: an fs gateway whose backend root is faultfs over a plain
    directory; `g.faults(*ops)` switches which operations fail (files `eio-*`)."""
    pytest.importorskip("mfusepy", reason="FUSE bindings (tests/setup.sh installs mfusepy)")
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse")
    procs = []

    def make(io, **opts):
        port = free_port()
        g = gw_factory(backend="fs", backend_opts={"io": io, **opts}, start=False,
                       extra={"stats": {"listen": f"127.0.0.1:{port}"}})
        g.stats_port = port
        src = g.workdir / "src"
        src.mkdir()
        control = g.workdir / "faults"
        control.write_text("")
        p = subprocess.Popen([sys.executable, str(Path(__file__).with_name("faultfs.py")),
                              str(src), str(g.data_dir), str(control)],
                             stdout=subprocess.DEVNULL, stderr=open(g.workdir / "faultfs.log", "wb"))
        procs.append((p, g.data_dir))
        deadline = time.monotonic() + 10
        while not any(line.split()[1] == str(g.data_dir) for line in open("/proc/mounts")):
            if p.poll() is not None or time.monotonic() > deadline:
                pytest.skip("cannot mount FUSE here: "
                            + (g.workdir / "faultfs.log").read_text(errors="replace")[-500:])
            time.sleep(0.05)
        g.faults = lambda *ops: control.write_text(" ".join(ops))
        return g.start()

    yield make
    gw_factory.stop_all()
    for p, d in procs:
        subprocess.run(["umount", "-l", str(d)], check=False)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _v3_eio_script(g):
    c = g.client()
    root = c.mount("/")
    fh = c.create(root, "eio-f", 0o644).check().fh
    data = bytearray(os.urandom(256 * 1024))
    v0 = c.write(fh, 0, bytes(data), stable=N.UNSTABLE).check().verf   # a worker's: teaches the ring
    assert c.commit(fh).check().verf == v0
    c.getattr(fh).check()
    seen = []
    # Syncs fail: no stable WRITE and no COMMIT may say the data is durable.
    g.faults("fsync")
    for stable, n in [(N.FILE_SYNC, PAGE), (N.DATA_SYNC, 1 << 17)]:
        c.write(fh, 0, bytes(data[:PAGE]), stable=N.UNSTABLE).check()   # (re)teaches the ring
        r = c.write(fh, 0, os.urandom(n), stable=stable)
        assert r.status == NFS3ERR_IO, (stable, n, r.status)
        seen.append(("stable", stable, n, r.status))
    # The bytes of those failed WRITEs may be in the file (not acknowledged): put
    # the acknowledged ones back, staged, then COMMIT while syncs fail.
    c.write(fh, 0, bytes(data[:1 << 17]), stable=N.UNSTABLE).check()
    staged = os.urandom(PAGE)
    c.write(fh, 8 * PAGE, staged, stable=N.UNSTABLE).check()
    data[8 * PAGE:9 * PAGE] = staged
    r = c.commit(fh)
    assert r.status == NFS3ERR_IO, r.status
    seen.append(("commit", r.status))
    # The fault gone: the next COMMIT syncs the staged data (it stayed staged), with
    # a new write verifier: what the failed syncs lost may be any WRITE acknowledged
    # under the old one, and the client resends those (RFC 1813 §3.3.7).
    g.faults()
    verf = c.commit(fh).check().verf
    assert verf != v0, "a failed sync changes the write verifier"
    seen.append(("verifier changed", verf != v0))
    # Writes fail.
    g.faults("write")
    for stable, n in [(N.UNSTABLE, PAGE), (N.FILE_SYNC, 1 << 17)]:
        # (Re)teaches the ring the file: a failed write makes it forget the file,
        # and a large READ is never answered from the read cache.
        assert c.read(fh, 0, 1 << 17).check().data == bytes(data[:1 << 17])
        r = c.write(fh, 0, os.urandom(n), stable=stable)
        assert r.status == NFS3ERR_IO, (stable, n, r.status)
        seen.append(("write", stable, n, r.status))
    # Reads fail (ranges never read before: nothing in the read cache).
    g.faults()
    assert c.read(fh, 0, 1 << 17).check().data == bytes(data[:1 << 17])
    g.faults("read")
    for off, n in [(100 * 1024, PAGE), (120 * 1024, 1 << 17)]:
        r = c.read(fh, off, n)
        assert r.status == NFS3ERR_IO and r.data is None, (off, n, r.status)
        seen.append(("read", n, r.status))
    # All gone: the same file on the ring again, byte-exact.
    g.faults()
    before = _jobs(g)
    c.getattr(fh).check()
    for off in range(0, len(data), 65536):
        w = c.write(fh, off, bytes(data[off:off + 65536]), stable=N.FILE_SYNC).check()
        assert w.count == 65536 and w.verf == verf
    assert c.read_all(fh) == bytes(data)
    jobs = _jobs(g) - before
    assert (g.workdir / "src" / "eio-f").read_bytes() == bytes(data)
    return seen, jobs


def test_v3_eio_on_the_ring_answers_as_the_workers(eio_gw):
    ring = eio_gw("uring")
    got, jobs = _v3_eio_script(ring)
    assert jobs <= 3, f"{jobs} data calls went to workers after the faults ended"
    f = _failures(ring)
    print("ring failures", f)
    assert f["sync"] >= 2 and f["commit"] >= 1 and f["write"] >= 2 and f["read"] >= 2, f
    log = _log(ring)
    assert "panicked" not in log
    assert ("io_uring stable write's fsync/fdatasync failed (Input/output error (os error 5))"
            in log), log[-3000:]
    assert "io_uring fdatasync failed (Input/output error (os error 5))" in log, log[-3000:]
    assert "io_uring read failed (Input/output error (os error 5))" in log, log[-3000:]
    workers = eio_gw("workers")
    want, _ = _v3_eio_script(workers)
    assert got == want


def test_v4_eio_sync_and_commit_fail_and_the_slot_goes_on(eio_gw):
    got = {}
    for io in ("uring", "workers"):
        g = eio_gw(io)
        v3 = g.client()
        fh = v3.create(v3.mount("/"), "eio-4", 0o644).check().fh
        c = Client(g)
        sid, _ = c.open_rw(b"eio-4")
        data = os.urandom(1 << 17)
        c.write(fh, 0, data, sid)                        # a worker's: teaches the ring
        _, _, v0, _ = c.write(fh, 0, data[:PAGE], sid)
        assert c.commit(fh) == v0
        g.faults("fsync")
        seen = []
        for how in (FILE_SYNC4, DATA_SYNC4):
            rec = c.write_rec(fh, 0, data[:PAGE], sid, stable=how, getattr=True)
            rep = c.call(rec)
            seen.append(c.results(rep).status)
            assert c.call(rec) == rep, "a retransmission gets the same reply"
            c.write(fh, 0, data[:PAGE], sid)             # the slot goes on; (re)teaches
        rep = c.call(c.commit_rec(fh))
        seen.append(c.results(rep).status)
        # A READ whose data cannot be read: the worker's error, retransmitted alike.
        g.faults("read")
        rec = c.read_rec(fh, 8192, 70000)
        rep = c.call(rec)
        seen.append(c.results(rep).status)
        assert c.call(rec) == rep
        g.faults()
        verf = c.commit(fh)
        assert verf != v0, "a failed sync changes the write verifier"
        count, committed, v, _ = c.write(fh, 0, data, sid, stable=FILE_SYNC4)
        assert (count, committed, v) == (len(data), FILE_SYNC4, verf)
        body, _ = c.read(fh, 0, len(data))
        assert body == data
        assert seen == [NFS4ERR_IO] * 4, seen
        if io == "uring":
            f = _failures(g)
            assert f["sync"] >= 2 and f["commit"] >= 1 and f["read"] >= 1, f
        got[io] = seen
    assert got["uring"] == got["workers"]


def test_spliced_reads_that_fail_get_the_error_and_the_pipes_recover(eio_gw):
    """`backend.splice`: a large READ whose splice from the file fails (EIO) gets
    NFS3ERR_IO from the worker, never a reply with data it does not have; the pipe
    it used is replaced, and once the fault is gone READs are spliced again."""
    g = eio_gw("uring", splice=True)
    c = g.client()
    fh = c.create(c.mount("/"), "eio-s", 0o644).check().fh
    data = os.urandom(1 << 20)
    c.write(fh, 0, data, stable=N.FILE_SYNC).check()
    c.getattr(fh).check()
    g.faults("read")
    for k in range(20):   # more than a reactor's pipes (16)
        off = (k * 40960) % (1 << 19)
        r = c.read(fh, off, 1 << 18)
        assert r.status == NFS3ERR_IO and r.data is None, (k, r.status)
    g.faults()
    before = scrape(g.stats_port).sum("nfsgw_tcp_spliced_bytes_total")
    for off in range(0, 1 << 20, 1 << 18):
        assert c.read(fh, off, 1 << 18).check().data == data[off:off + (1 << 18)]
    f = _failures(g)
    assert f["splice"] >= 1, f
    if "spliced from the page cache" in _log(g):
        assert scrape(g.stats_port).sum("nfsgw_tcp_spliced_bytes_total") > before
    assert "panicked" not in _log(g)


# ---------------------------------------------------------------------------- EROFS


@pytest.mark.parametrize("io", ["uring", "workers"])
def test_a_read_only_backend_gets_rofs_and_reads_go_on(small_gw, io):
    """The backend's file system remounted read-only behind the gateway (possible
    while the gateway holds no file open for writing: files it only read): WRITE,
    CREATE and SETATTR get NFS3ERR_ROFS (not NFS3ERR_IO), NFSv4.1 WRITE
    NFS4ERR_ROFS; READs go on, on the ring; back read-write, writes work again."""
    g = small_gw(io)
    data = os.urandom(200000)
    (g.data_dir / "ro").write_bytes(data)
    time.sleep(0.1)
    c = g.client()
    root = c.mount("/")
    fh = c.lookup_path(root, "ro")
    assert c.read(fh, 0, 100000).check().data == data[:100000]
    r = subprocess.run(["mount", "-o", "remount,ro", str(g.data_dir)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail(f"remount ro refused (the gateway holds a file open for writing?): "
                    f"{r.stderr.strip()}")
    try:
        before = _jobs(g)
        for off in range(0, len(data), 65536):
            assert c.read(fh, off, 65536).check().data == data[off:off + 65536]
        if io == "uring":
            assert _jobs(g) - before <= 1, "READs of a read-only store stay on the ring"
        for stable in (N.UNSTABLE, N.FILE_SYNC):
            r = c.write(fh, 0, b"x" * 100, stable=stable)
            assert r.status == N.NFS3ERR_ROFS, r.status
            assert r.wcc.after is not None and r.wcc.after.size == len(data)
        assert c.create(root, "new", 0o644).status == N.NFS3ERR_ROFS
        assert c.setattr(fh, size=10).status == N.NFS3ERR_ROFS
        v4 = Client(g)
        # (The anonymous stateid: no OPEN, which a read-only store may refuse too.)
        st = Client.results(v4.call(v4.write_rec(fh, 0, b"y" * 10, b"\0" * 16))).status
        assert st == 30, st   # NFS4ERR_ROFS
        body, _ = v4.read(fh, 0, 1000)
        assert body == data[:1000]
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(g.data_dir)], check=True)
    c.write(fh, 0, b"z" * 100, stable=N.FILE_SYNC).check()
    assert (g.data_dir / "ro").read_bytes() == b"z" * 100 + data[100:]
    assert "panicked" not in _log(g)
