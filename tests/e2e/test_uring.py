"""backend.io = "uring" (issue 12): NFSv3 READs of fs files are read by the reactor
through its io_uring, not by a backend worker, byte-exact; what the reactor cannot
answer (unknown handles, refused callers, directories, stale handles) still gets the
worker's exact answer; `nfsgw_worker_data_jobs_total` shows the difference.

The rest of the suite runs on this path too with NFSGW_E2E_IO=uring (tests/run-e2e.sh
runs test_ops, test_posix, test_restart and test_cache that way as well).
"""
import os
import time

import pytest

import nfsclient as N
from conftest import free_port
from statsutil import scrape

SIZE = 3 * (1 << 20) + 12345
# (offset, count): unaligned, crossing pages, 64 KiB and 1 MiB reads, the end of the
# file, at and past it, count 0.
READS = [(0, 1), (1, 4096), (4095, 5000), (65536, 65536), (100, 65537), (0, 1 << 20),
         ((1 << 20) + 3, 1 << 20), (SIZE - 10, 4096), (SIZE - 70000, 1 << 20), (SIZE, 100),
         (SIZE + 100, 10), (5, 0), (2 << 20, 1 << 20)]


def _gw(gw_factory, io):
    port = free_port()
    g = gw_factory(backend="fs", backend_opts={"io": io},
                   extra={"stats": {"listen": f"127.0.0.1:{port}"}})
    g.stats_port = port
    return g


def _data_jobs(g) -> float:
    return scrape(g.stats_port).sum("nfsgw_worker_data_jobs_total")


def _file(c, root, name, data):
    fh = c.create(root, name, 0o644).check().fh
    c.write_all(fh, data)
    return fh


def _check_reads(c, fh, data):
    for off, count in READS:
        r = c.read(fh, off, count).check()
        want = data[off:off + count]
        assert r.data == want, f"READ({off}, {count}): {len(r.data)} bytes, differ from the file"
        assert r.count == len(want)
        assert r.eof == (off + len(want) >= len(data)), (off, count, r.eof)
        assert r.attr.size == len(data)


def test_reads_run_on_the_reactor_and_are_byte_exact(gw_factory):
    g = _gw(gw_factory, "uring")
    assert "through io_uring" in g.log_path.read_text(errors="replace"), g.log_tail()
    c = g.client()
    root = c.mount("/")
    data = os.urandom(SIZE)
    fh = _file(c, root, "big", data)
    before = _data_jobs(g)
    assert before >= 4, "the writes ran on workers and were counted"
    # A GETATTR authenticates the handle on a worker: from then on READs stay on the
    # reactor (entries live a second, as the read cache's: at most one worker READ
    # per second per file refreshes them).
    c.getattr(fh).check()
    t0 = time.monotonic()
    _check_reads(c, fh, data)   # cold: from the file
    _check_reads(c, fh, data)   # warm: small ones from the cache
    elapsed = time.monotonic() - t0
    jobs = _data_jobs(g) - before
    assert jobs <= int(elapsed), f"{jobs} READs went to workers in {elapsed:.2f} s"
    # The same bytes after a restart (fresh rings, fresh table).
    g.restart()
    c = g.client()
    fh = c.lookup_path(c.mount("/"), "big")
    c.getattr(fh).check()
    _check_reads(c, fh, data)


def test_workers_mode_reads_on_workers(gw_factory):
    g = _gw(gw_factory, "workers")
    assert "data I/O: backend workers" in g.log_path.read_text(errors="replace")
    c = g.client()
    root = c.mount("/")
    data = os.urandom(SIZE)
    fh = _file(c, root, "big", data)
    c.getattr(fh).check()
    before = _data_jobs(g)
    _check_reads(c, fh, data)
    # Reads over 64 KiB are never answered from the reactor's cache.
    assert _data_jobs(g) - before >= sum(1 for _, n in READS if n > 65536)


def test_what_the_reactor_cannot_answer_gets_the_workers_answer(gw_factory):
    g = _gw(gw_factory, "uring")
    os.chmod(g.data_dir, 0o777)   # the export root's mode is the directory's own
    owner = g.client(uid=1000, gid=1000)
    root = owner.mount("/")
    data = os.urandom(200000)
    fh = _file(owner, root, "private", data)
    owner.setattr(fh, mode=0o600).check()
    owner.getattr(fh).check()
    assert owner.read(fh, 0, 100000).check().data == data[:100000]
    # Another user: the reactor's permission check refuses, the worker answers ACCES.
    other = g.client(uid=2000, gid=2000)
    assert other.read(fh, 0, 100000).status == N.NFS3ERR_ACCES
    # A directory is never in the reactor's table.
    d = owner.mkdir(root, "d", 0o755).check().fh
    owner.getattr(d).check()
    assert owner.read(d, 0, 100).status == N.NFS3ERR_ISDIR
    # A forged handle (one byte of the MAC changed) never reaches a file.
    bad = bytearray(fh)
    bad[-1] ^= 1
    assert owner.read(bytes(bad), 0, 100).status == N.NFS3ERR_BADHANDLE
    # Removed: stale at once, though the reactor held the file open.
    owner.remove(root, "private").check()
    assert owner.read(fh, 0, 100000).status == N.NFS3ERR_STALE


def test_reads_see_every_completed_change(gw_factory):
    g = _gw(gw_factory, "uring")
    c = g.client()
    root = c.mount("/")
    data = bytearray(os.urandom(300000))
    fh = _file(c, root, "f", bytes(data))
    c.getattr(fh).check()
    assert c.read(fh, 0, 300000).check().data == bytes(data)
    for i in range(20):
        off = (i * 7919) % 290000
        patch = os.urandom(5000)
        c.write(fh, off, patch, stable=N.UNSTABLE).check()
        data[off:off + len(patch)] = patch
        # Read back at once, large (reactor or worker) and small (cache): never stale.
        assert c.read(fh, 0, 300000).check().data == bytes(data), i
        assert c.read(fh, off, 4096).check().data == bytes(data[off:off + 4096]), i
    c.commit(fh).check()
    c.setattr(fh, size=1000).check()
    r = c.read(fh, 0, 300000).check()
    assert (r.data, r.eof, r.attr.size) == (bytes(data[:1000]), True, 1000)


@pytest.mark.parametrize("io", ["uring", "auto"])
def test_io_modes_start_and_serve(gw_factory, io):
    g = _gw(gw_factory, io)
    log = g.log_path.read_text(errors="replace")
    # Which path is in force is said once at start; here io_uring is available.
    assert "data I/O:" in log, log
    c = g.client()
    root = c.mount("/")
    data = os.urandom(70000)
    fh = _file(c, root, "f", data)
    c.getattr(fh).check()
    assert c.read(fh, 0, 70000).check().data == data
