"""backend.io = "uring": NFSv3 READs of fs files are read by the reactor
through its io_uring, not by a backend worker, byte-exact; what the reactor cannot
answer (unknown handles, refused callers, directories, stale handles) still gets the
worker's exact answer; `nfsgw_worker_data_jobs_total` shows the difference.

The rest of the suite runs on this path too with NFSGW_E2E_IO=uring (tests/run-e2e.sh
runs test_ops, test_posix, test_restart and test_cache that way as well).
"""
import os
import signal
import threading
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


def _log_has(g, text, timeout=5.0) -> bool:
    """The start-up log line may follow the listener by a moment."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in g.log_path.read_text(errors="replace"):
            return True
        time.sleep(0.05)
    return False


def _data_jobs(g) -> float:
    return scrape(g.stats_port).sum("nfsgw_worker_data_jobs_total")


IO_URING_DISABLED = "/proc/sys/kernel/io_uring_disabled"


# Serial: the sysctl is machine-wide. On parallel workers the two cases raced (one saved
# the other's "2" and restored it), leaving io_uring off for every later test.
@pytest.mark.serial
@pytest.mark.parametrize("io", ["auto", "uring"])
def test_io_uring_switched_off_by_the_kernel_falls_back_to_the_workers(gw_factory, io):
    """Where the kernel refuses io_uring (kernel.io_uring_disabled = 2),
    the gateway serves from its backend workers, byte-exact, and says so and why in
    its log (a warning when `uring` was asked for). The sysctl is machine-wide and
    restored at once after the gateway has started (rings are made at start)."""
    if os.geteuid() != 0 or not os.path.exists(IO_URING_DISABLED):
        pytest.skip("needs root and kernel.io_uring_disabled (Linux >= 6.6)")
    with open(IO_URING_DISABLED) as f:
        saved = f.read().strip()
    if saved == "2":
        pytest.fail("kernel.io_uring_disabled is already 2 before this test switched it "
                    "off: something else left it so (every io_uring test would fall back)")
    try:
        with open(IO_URING_DISABLED, "w") as f:
            f.write("2")
        g = _gw(gw_factory, io)
        assert _log_has(g, "data I/O: backend workers"), g.log_tail()
    finally:
        with open(IO_URING_DISABLED, "w") as f:
            f.write(saved)
    log = g.log_path.read_text(errors="replace")
    said = f'backend.io = "{io}": io_uring unavailable (kernel.io_uring_disabled = 2'
    line = next((ln for ln in log.splitlines() if said in ln), None)
    assert line is not None, g.log_tail()
    assert ("WARN" in line) == (io == "uring"), line
    c = g.client()
    root = c.mount("/")
    data = os.urandom(SIZE)
    fh = _file(c, root, "big", data)
    c.commit(fh).check()
    before = _data_jobs(g)
    _check_reads(c, fh, data)
    # No ring: every READ over the cache's 64 KiB limit, at least, is a worker job.
    assert _data_jobs(g) - before >= sum(1 for _, n in READS if n > 65536)


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


@pytest.mark.serial  # time bounds: needs a quiet CPU (tests/README.md)
def test_reads_run_on_the_reactor_and_are_byte_exact(gw_factory):
    g = _gw(gw_factory, "uring")
    assert _log_has(g, "through io_uring"), g.log_tail()
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
    assert _log_has(g, "data I/O: backend workers"), g.log_tail()
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
    # Removed: stale at once, though the reactor held the file open; the reactor
    # closes it within about a second (the removed file's space is freed).
    owner.remove(root, "private").check()
    assert owner.read(fh, 0, 100000).status == N.NFS3ERR_STALE
    deadline = time.monotonic() + 5
    while True:
        held = []
        for fd in os.listdir(f"/proc/{g.proc.pid}/fd"):
            try:
                held.append(os.readlink(f"/proc/{g.proc.pid}/fd/{fd}"))
            except OSError:
                pass
        if not any("private" in h for h in held):
            break
        assert time.monotonic() < deadline, f"removed file still open: {held}"
        time.sleep(0.1)


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
    # Which path is in force is said once at start.
    assert _log_has(g, "data I/O:"), g.log_tail()
    c = g.client()
    root = c.mount("/")
    data = os.urandom(70000)
    fh = _file(c, root, "f", data)
    c.getattr(fh).check()
    assert c.read(fh, 0, 70000).check().data == data


def _write_chunks(c, fh, data, chunk, stable=N.UNSTABLE, at=0):
    """Sequential WRITEs of `data` at `at`; returns their results."""
    out = []
    for off in range(0, len(data), chunk):
        piece = data[off:off + chunk]
        r = c.write(fh, at + off, piece, stable=stable).check()
        assert r.count == len(piece)
        post = r.wcc.after
        assert post is not None and post.size >= at + off + len(piece)
        out.append(r)
    return out


@pytest.mark.serial  # time bounds: needs a quiet CPU (tests/README.md)
def test_writes_and_commit_run_on_the_reactor(gw_factory):
    g = _gw(gw_factory, "uring")
    c = g.client()
    root = c.mount("/")
    fh = c.create(root, "w", 0o644).check().fh
    # The first WRITE runs on a worker (the gateway drops the object's stored times
    # then); its reply teaches the reactor the file.
    c.write(fh, 0, b"x" * 100, stable=N.UNSTABLE).check()
    before = _data_jobs(g)
    data = os.urandom(2 * (1 << 20) + 777)
    t0 = time.monotonic()
    results = _write_chunks(c, fh, data, 65536)
    commit = c.commit(fh).check()
    elapsed = time.monotonic() - t0
    jobs = _data_jobs(g) - before
    # Entries live a second: at most one worker WRITE per second refreshes them.
    assert jobs <= int(elapsed) + 1, f"{jobs} of {len(results) + 1} data calls ran on workers"
    assert all(r.committed == N.UNSTABLE for r in results)
    assert all(r.verf == commit.verf for r in results), "one verifier per run"
    # Post-operation attributes: growing size, mtime never going back.
    sizes = [r.wcc.after.size for r in results]
    assert sizes == sorted(sizes) and sizes[-1] == len(data)
    mtimes = [r.wcc.after.mtime for r in results]
    assert mtimes == sorted(mtimes)
    # What a worker says afterwards agrees with what the reactor answered.
    a = c.getattr(fh).check().attr
    assert (a.size, a.mtime) == (len(data), results[-1].wcc.after.mtime)
    assert (g.data_dir / "w").read_bytes() == data
    assert c.read_all(fh) == data


@pytest.mark.serial  # time bounds: needs a quiet CPU (tests/README.md)
def test_pipelined_writes_and_overlaps_stay_exact(gw_factory):
    """Many writers at once on one file (each its own connection): whichever path
    takes each WRITE, the file ends as the last writer of each byte left it."""
    g = _gw(gw_factory, "uring")
    c = g.client()
    root = c.mount("/")
    fh = c.create(root, "p", 0o644).check().fh
    c.write(fh, 0, b"\0" * 4096, stable=N.UNSTABLE).check()
    c.getattr(fh).check()
    size = 8 << 20
    pieces = [os.urandom(size // 8) for _ in range(8)]

    def writer(k):
        cc = g.client()
        for off in range(0, size // 8, 32768):
            cc.write(fh, k * (size // 8) + off, pieces[k][off:off + 32768], stable=N.UNSTABLE).check()
        cc.close()

    before = _data_jobs(g)
    t0 = time.monotonic()
    threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    c.commit(fh).check()
    elapsed = time.monotonic() - t0
    jobs = _data_jobs(g) - before
    print(f"pipelined: {jobs} of {size // 32768 + 1} data calls on workers in {elapsed:.2f} s")
    # Writes in flight together stay on the reactor (each counts its own bumps);
    # a refresh per second and the relearn after it may take a few to workers.
    assert jobs <= 4 * (int(elapsed) + 1), jobs
    want = b"".join(pieces)
    assert c.getattr(fh).check().attr.size == size
    assert c.read_all(fh) == want
    assert (g.data_dir / "p").read_bytes() == want


def test_kill9_after_commit_loses_nothing(gw_factory):
    g = _gw(gw_factory, "uring")
    c = g.client()
    root = c.mount("/")
    fh = c.create(root, "k", 0o644).check().fh
    c.write(fh, 0, b"y" * 10, stable=N.UNSTABLE).check()
    committed = os.urandom(3 << 20)
    _write_chunks(c, fh, committed, 262144)
    verf = c.commit(fh).check().verf
    # More staged data, then the process dies without a chance to sync.
    _write_chunks(c, fh, os.urandom(1 << 20), 262144, at=len(committed))
    g.restart(sig=signal.SIGKILL)
    c = g.client()
    fh = c.lookup_path(c.mount("/"), "k")
    assert c.read_all(fh)[:len(committed)] == committed
    # A new run has a new verifier: the client resends what was not committed.
    c.write(fh, 0, committed[:100], stable=N.UNSTABLE).check()
    assert c.commit(fh).check().verf != verf


@pytest.mark.serial  # time bounds: needs a quiet CPU (tests/README.md)
@pytest.mark.parametrize("stable", [N.FILE_SYNC, N.DATA_SYNC])
def test_stable_writes_run_on_the_reactor_and_survive_kill9(gw_factory, stable):
    """FILE_SYNC / DATA_SYNC WRITEs: write, sync and statx linked on the reactor's
    ring; the reply says the data is stable, and it is there after kill -9 right
    after the last reply (no COMMIT, no shutdown sync)."""
    g = _gw(gw_factory, "uring")
    c = g.client()
    root = c.mount("/")
    fh = c.create(root, "s", 0o644).check().fh
    c.write(fh, 0, b"a" * 10, stable=N.UNSTABLE).check()   # taught to the reactor
    before = _data_jobs(g)
    data = os.urandom((1 << 20) + 4321)
    t0 = time.monotonic()
    results = _write_chunks(c, fh, data, 65536, stable=stable)
    elapsed = time.monotonic() - t0
    jobs = _data_jobs(g) - before
    print(f"stable {stable}: {jobs} of {len(results)} WRITEs on workers in {elapsed:.2f} s")
    # Entries live a second: at most one worker WRITE per second refreshes them.
    assert jobs <= int(elapsed) + 1, f"{jobs} of {len(results)} stable WRITEs ran on workers"
    assert all(r.committed == stable for r in results), [r.committed for r in results]
    sizes = [r.wcc.after.size for r in results]
    assert sizes == sorted(sizes) and sizes[-1] == len(data)
    a = c.getattr(fh).check().attr
    assert (a.size, a.mtime) == (len(data), results[-1].wcc.after.mtime)
    g.restart(sig=signal.SIGKILL)
    c = g.client()
    fh = c.lookup_path(c.mount("/"), "s")
    assert c.read_all(fh) == data
    assert (g.data_dir / "s").read_bytes() == data


def test_setid_writes_take_the_worker_path(gw_factory):
    g = _gw(gw_factory, "uring")
    c = g.client()
    root = c.mount("/")
    # A set-id file written by a non-root user loses the bits: the worker does it.
    os.chmod(g.data_dir, 0o777)
    u = g.client(uid=1000, gid=1000)
    f2 = u.create(root, "suid", 0o644).check().fh
    u.write(f2, 0, b"z", stable=N.UNSTABLE).check()
    u.setattr(f2, mode=0o6755).check()
    u.getattr(f2).check()
    u.write(f2, 0, b"q" * 100, stable=N.UNSTABLE).check()
    assert u.getattr(f2).check().attr.mode & 0o6000 == 0


@pytest.mark.serial  # time bounds: needs a quiet CPU (tests/README.md)
@pytest.mark.parametrize("io", ["uring", "workers"])
@pytest.mark.parametrize("transport", ["tcp", "rdma"])
def test_bench_writes_commit_and_reads_verified(gw_factory, transport, io):
    """bench (sequential then random UNSTABLE writes with a COMMIT at the end of each
    run, then cold and warm random reads and sequential 1 MiB reads, every byte
    verified) over TCP and RPC-over-RDMA, on both data paths. With io_uring the data
    calls stay off the workers, apart from the file's first WRITE and a refresh per
    second; on the workers every uncached one is counted."""
    from statsutil import bench, total
    port = free_port()
    g = gw_factory(backend="fs+rdma", backend_opts={"io": io},
                   extra={"stats": {"listen": f"127.0.0.1:{port}"}})
    target = (f"tcp://127.0.0.1:{g.port}" if transport == "tcp"
              else f"rdma://127.0.0.1:{g.rdma_port}")
    before = scrape(port).sum("nfsgw_worker_data_jobs_total")
    t0 = time.monotonic()
    ops = 0
    for workload, bs, n in [("seqwrite", 1 << 20, 8), ("randwrite", 65536, 600),
                            ("randread", 65536, 600), ("randread", 4096, 600),
                            ("seqread", 1 << 20, 24)]:
        out = bench(target, "--workload", workload, "--bs", str(bs), "--ops", str(n), "--qd", "8",
                    "--size-mib", "8", "--file", f"u-{transport}.dat", "--verify")
        assert total(out, "ops") == n and total(out, "errors") == 0, out
        ops += n
    elapsed = time.monotonic() - t0
    jobs = scrape(port).sum("nfsgw_worker_data_jobs_total") - before
    print(f"bench {transport} {io}: {jobs} of {ops} data calls on workers in {elapsed:.1f} s")
    if io == "uring":
        # Before the first WRITE reply teaches the reactor the new file, a queue
        # depth's worth of WRITEs (and the ones racing with them, which teach
        # nothing) take workers; then one refresh per second.
        assert jobs <= 40 + 4 * elapsed, f"{jobs} of {ops} data calls on workers in {elapsed:.1f} s"
    else:
        # Writes, COMMITs and reads over 64 KiB never skip the workers.
        assert jobs >= 8 + 600 + 24, jobs
    assert (g.data_dir / f"u-{transport}.dat").stat().st_size == 8 << 20


@pytest.mark.serial  # time bounds: needs a quiet CPU (tests/README.md)
def test_a_sleeping_reactor_wakes_for_its_completions(gw_factory):
    """An adaptive reactor that sleeps after 1 empty poll (up to 100 ms): COMMITs
    whose fdatasync completes while it sleeps are still answered within a few
    milliseconds (the ring's eventfd is in the reactor's epoll set). On this host the
    TCP transport's own wait cap with a live connection also bounds the sleep, so
    this checks liveness and latency with a sleeping reactor rather than isolating
    the eventfd."""
    port = free_port()
    g = gw_factory(backend="fs", backend_opts={"io": "uring"},
                   engine={"idle": "adaptive", "idle_spins": 1, "idle_sleep_us": 100_000},
                   extra={"stats": {"listen": f"127.0.0.1:{port}"}})
    c = g.client()
    root = c.mount("/")
    fh = c.create(root, "z", 0o644).check().fh
    c.write(fh, 0, b"0", stable=N.UNSTABLE).check()
    before = scrape(port).sum("nfsgw_worker_data_jobs_total")
    commits = []
    for i in range(8):
        _write_chunks(c, fh, os.urandom(8 << 20), 1 << 20, at=i << 23)
        time.sleep(0.05)   # the reactor goes to sleep
        t = time.monotonic()
        c.commit(fh).check()
        commits.append(time.monotonic() - t)
        assert len(c.read(fh, 0, 1 << 20).check().data) == 1 << 20
    commits.sort()
    print("commit latencies", [f"{x * 1000:.1f}ms" for x in commits])
    median = commits[len(commits) // 2]
    assert median < 0.05, f"COMMITs waited for a sleeping reactor: {commits}"
    assert scrape(port).sum("nfsgw_worker_data_jobs_total") - before <= 4


@pytest.mark.parametrize("io", ["uring", "workers"])
def test_expired_entries_are_revalidated_on_the_ring(gw_factory, io):
    """Past the attributes' TTL (1 s) a file the reactor holds open is revalidated
    by a statx of its path on the reactor's ring, not by a worker: a steady
    GETATTR/READ workload keeps the worker data jobs at 0 for seconds. Changes made
    directly in the export directory are still seen within the documented bound
    (README "The read cache": about a second): new data, a chmod, a replacement,
    a removal — as on the workers."""
    g = _gw(gw_factory, io)
    c = g.client()
    root = c.mount("/")
    data = os.urandom(300000)
    (g.data_dir / "r").write_bytes(data)
    time.sleep(0.1)   # the file's ctime well before the worker's look at it
    fh = c.lookup_path(root, "r")
    c.getattr(fh).check()
    # A worker's READ teaches the reactor's file table the file (the GETATTR may
    # already be answered from attributes the LOOKUP taught the read cache: then no
    # worker saw the file yet, and the first READ would be its lesson).
    c.read(fh, 0, 1).check()
    before = _data_jobs(g)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 3.5:
        assert c.getattr(fh).check().attr.size == len(data)
        assert c.read(fh, 0, 200000).check().data == data[:200000]
        time.sleep(0.02)
    jobs = _data_jobs(g) - before
    m = scrape(g.stats_port)
    kept = m.sum("nfsgw_uring_revalidations_total", result="unchanged")
    if io == "uring":
        assert jobs == 0, f"{jobs} READs went to workers past the TTL"
        # One statx per file per second (the read cache's revalidation GETATTRs
        # and the expired entry's READs both land on it).
        assert 2 <= kept <= 8, kept
        assert m.sum("nfsgw_uring_revalidations_total", result="changed") == 0
    else:
        assert jobs > 50 and kept == 0

    def seen(check, what, bound=2.5):
        # ATTR_TTL, plus STALE_MAX for the read cache's stale-while-revalidate
        # answers where a revalidation finds nothing (a removal).
        deadline = time.monotonic() + bound
        while not check():
            assert time.monotonic() < deadline, f"{what} not seen within the bound"
            time.sleep(0.05)

    # New data written behind the gateway's back (same size: only times move).
    new = os.urandom(len(data))
    with open(g.data_dir / "r", "r+b") as f:
        f.write(new)
    seen(lambda: c.read(fh, 0, 200000).check().data == new[:200000], "new data")
    # (Same inode, same size: the reactor's reads see the new bytes at once.)
    # A chmod behind its back.
    os.chmod(g.data_dir / "r", 0o600)
    seen(lambda: c.getattr(fh).check().attr.mode & 0o777 == 0o600, "chmod")
    if io == "uring":
        # The revalidation saw the ctime move: the entry went, a worker relearned it.
        assert scrape(g.stats_port).sum("nfsgw_uring_revalidations_total", result="changed") >= 1
    # Replaced by another file under the same name: the handle names the path's
    # object (a key), so the new file's bytes and size show.
    other = os.urandom(1000)
    (g.data_dir / "r.new").write_bytes(other)
    os.rename(g.data_dir / "r.new", g.data_dir / "r")
    seen(lambda: c.getattr(fh).status != 0 or c.getattr(fh).attr.size == 1000, "replacement")
    # Removed: stale once the read cache's stale answers end (ATTR_TTL + STALE_MAX),
    # and the reactor closes it within ATTR_TTL + KEEP_EXPIRED.
    os.remove(g.data_dir / "r")
    seen(lambda: c.getattr(fh).status == N.NFS3ERR_STALE, "removal", bound=4.0)
    deadline = time.monotonic() + 5
    while True:
        held = []
        for fd in os.listdir(f"/proc/{g.proc.pid}/fd"):
            try:
                held.append(os.readlink(f"/proc/{g.proc.pid}/fd/{fd}"))
            except OSError:
                pass
        if not any(h.endswith("/r (deleted)") for h in held):
            break
        assert time.monotonic() < deadline, f"removed file still open: {held}"
        time.sleep(0.1)


def _registered_files(pid) -> list[str]:
    """The files in the gateway's io_uring registered file tables (fdinfo)."""
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if "io_uring" not in os.readlink(f"/proc/{pid}/fd/{fd}"):
                continue
            info = open(f"/proc/{pid}/fdinfo/{fd}").read()
        except OSError:
            continue
        lines = info.splitlines()
        for i, line in enumerate(lines):
            if line.startswith("UserFiles:"):
                for entry in lines[i + 1:]:
                    if ":" not in entry or not entry.startswith(" "):
                        break
                    out.append(entry.split(":", 1)[1].strip())
    return out


def test_held_files_are_registered_with_the_ring_and_unregistered_when_dropped(gw_factory):
    """The reactor installs the files it holds open in its ring's registered file
    table (reads, writes and syncs name the slot); a file removed through the
    gateway leaves the table (and is closed) within about a second."""
    g = _gw(gw_factory, "uring")
    assert _log_has(g, "through io_uring"), g.log_tail()
    c = g.client()
    root = c.mount("/")
    data = os.urandom(100000)
    fh = _file(c, root, "reg", data)
    c.getattr(fh).check()
    if "UserFiles:" not in "".join(
            open(f"/proc/{g.proc.pid}/fdinfo/{fd}").read()
            for fd in os.listdir(f"/proc/{g.proc.pid}/fd")
            if "io_uring" in os.readlink(f"/proc/{g.proc.pid}/fd/{fd}")):
        pytest.skip("this kernel's io_uring fdinfo lists no registered files")
    assert any(f.endswith("/reg") for f in _registered_files(g.proc.pid)), \
        _registered_files(g.proc.pid)
    before = _data_jobs(g)
    for _ in range(20):
        assert c.read(fh, 0, 100000).check().data == data
        c.write(fh, 0, data[:70000], stable=N.FILE_SYNC).check()
    assert _data_jobs(g) - before <= 2
    c.remove(root, "reg").check()
    deadline = time.monotonic() + 5
    while any("reg" in f for f in _registered_files(g.proc.pid)):
        assert time.monotonic() < deadline, _registered_files(g.proc.pid)
        time.sleep(0.1)


def _io_wq_threads(g) -> int:
    """io_uring's io-wq worker threads in the gateway (named iou-wrk-<reactor tid>)."""
    n = 0
    for t in os.listdir(f"/proc/{g.proc.pid}/task"):
        try:
            with open(f"/proc/{g.proc.pid}/task/{t}/comm") as f:
                n += f.read().startswith("iou-wrk")
        except OSError:
            pass
    return n


def test_large_reads_leave_the_reactor_core_small_ones_stay_inline(gw_factory):
    """READs of 64 KiB and more are offloaded (IOSQE_ASYNC) to io_uring's
    io-wq threads, so the page-cache copy does not run on the reactor's core; small
    reads complete inline in the reactor (no io-wq thread is started for them)."""
    g = _gw(gw_factory, "uring")
    c = g.client()
    root = c.mount("/")
    data = os.urandom(4 << 20)
    # Written behind the gateway: NFS stable WRITEs would run fsyncs on the ring,
    # which io_uring always hands to io-wq threads (they linger a few seconds).
    (g.data_dir / "f").write_bytes(data)
    fh = c.lookup_path(root, "f")
    c.getattr(fh).check()
    before = _data_jobs(g)
    for off in range(0, 1 << 20, 4096 * 7):
        assert c.read(fh, off, 4096).check().data == data[off:off + 4096]
    assert _io_wq_threads(g) == 0, "small reads were offloaded"
    calls = [(N.NFSPROC3_READ, N.a_read(fh, off, 1 << 20), N.d_read)
             for off in range(0, len(data), 1 << 20)] * 2
    for r, (_, a, _) in zip(c.pipeline(calls, window=4), calls):
        off = int.from_bytes(a[-12:-4], "big")
        assert r.check().data == data[off:off + (1 << 20)]
    assert _io_wq_threads(g) > 0, "1 MiB reads ran inline on the reactor"
    assert _data_jobs(g) - before <= 2, "the reads went to workers"
