"""Zero-copy TCP READ replies (`backend.splice`): large NFSv3 READs of fs
files on the io_uring path are spliced page cache -> pipe -> socket. The bytes must be
exactly the file's (sizes not a multiple of 4, the end of the file, offsets near
2^64), stay exact while other ranges are written, and a client that pipelines 1 MiB
READs and reads no reply pins at most the per-connection pipe cap and does not
starve another client. `nfsgw_tcp_spliced_bytes_total` shows the path was taken.
"""
import os
import socket
import threading
import time

import nfsclient as N
from conftest import free_port
from statsutil import scrape

MIB = 1 << 20
SIZE = 5 * MIB + 4097
PER_CONN = 4   # uring::pipes::PER_CONN
# (offset, count): aligned 1 MiB, odd sizes (pad 1..3), 64 KiB (the threshold), the
# end of the file straddled, at and past it, and offsets near 2^64.
READS = [(0, MIB), (MIB, MIB), (4096, 65536), (8192, 65537), (12288, 65538),
         (3 * MIB, 999_999), (SIZE - 70001, MIB), (SIZE - 65536, 65536), (SIZE, MIB),
         (SIZE + 4096, MIB), ((1 << 64) - 4096, MIB), ((1 << 64) - 1, 65536),
         ((1 << 63) - 4096, MIB)]


def _gw(gw_factory, splice=True):
    port = free_port()
    g = gw_factory(backend="fs", backend_opts={"io": "uring", "splice": splice},
                   extra={"stats": {"listen": f"127.0.0.1:{port}"}})
    g.stats_port = port
    return g


def _metric(g, name) -> float:
    return scrape(g.stats_port).sum(name)


def _check(c, fh, data):
    for off, count in READS:
        r = c.read(fh, off, count).check()
        want = data[off:off + count]
        assert r.data == want, f"READ({off}, {count}): {len(r.data)} bytes, differ"
        assert r.count == len(want)
        assert r.eof == (off + len(want) >= len(data)), (off, count, r.eof)
        assert r.attr.size == len(data)


def _setup(g, name="f", size=SIZE):
    c = g.client()
    root = c.mount("/")
    data = os.urandom(size)
    fh = c.create(root, name, 0o644).check().fh
    c.write_all(fh, data)
    c.getattr(fh).check()   # the reactor learns the file
    return c, root, fh, data


def test_large_reads_are_spliced_and_byte_exact(gw_factory):
    g = _gw(gw_factory)
    assert "spliced from the page cache" in g.log_path.read_text(errors="replace") or \
        _wait_log(g, "spliced from the page cache"), g.log_tail()
    c, _, fh, data = _setup(g)
    before = _metric(g, "nfsgw_tcp_spliced_bytes_total")
    _check(c, fh, data)
    _check(c, fh, data)
    spliced = _metric(g, "nfsgw_tcp_spliced_bytes_total") - before
    # Every READ of 64 KiB or more with data, twice (none of them fills the cache).
    expect = 2 * sum(len(data[o:o + n]) for o, n in READS if n >= 65536 and o < SIZE)
    # (A worker answers the odd READ when the file entry is refreshed, each second.)
    assert expect / 2 <= spliced <= expect, (spliced, expect)
    assert _metric(g, "nfsgw_tcp_pipes_in_use") == 0


def test_splice_off_gives_the_same_bytes(gw_factory):
    g = _gw(gw_factory, splice=False)
    c, _, fh, data = _setup(g)
    _check(c, fh, data)
    assert _metric(g, "nfsgw_tcp_spliced_bytes_total") == 0


def _wait_log(g, text, timeout=5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in g.log_path.read_text(errors="replace"):
            return True
        time.sleep(0.05)
    return False


def test_reads_stay_exact_while_other_ranges_are_written(gw_factory):
    """Spliced pages are referenced until the client receives them: writes to OTHER
    ranges of the same file (their own pages) never show in a reply."""
    g = _gw(gw_factory)
    c, root, fh, data = _setup(g, size=8 * MIB)
    stop = threading.Event()
    errors = []

    def writer():
        w = g.client()
        i = 0
        try:
            while not stop.is_set():
                # Odd MiBs are rewritten; readers read even MiBs only.
                off = (2 * (i % 4) + 1) * MIB + (i * 4096) % (MIB - 8192)
                w.write(fh, off, os.urandom(8192), stable=N.UNSTABLE).check()
                i += 1
        except Exception as e:   # noqa: BLE001 - reported below
            errors.append(e)

    t = threading.Thread(target=writer)
    t.start()
    try:
        deadline = time.monotonic() + 4
        n = 0
        while time.monotonic() < deadline:
            calls = [(N.NFSPROC3_READ, N.a_read(fh, off, MIB), N.d_read)
                     for off in (0, 2 * MIB, 4 * MIB, 6 * MIB)]
            for r, (_, a, _) in zip(c.pipeline(calls, window=4), calls):
                off = int.from_bytes(a[-12:-4], "big")
                assert r.check().data == data[off:off + MIB], off
                n += 1
    finally:
        stop.set()
        t.join()
    assert not errors, errors
    assert n >= 8


def test_a_client_that_reads_nothing_pins_at_most_the_cap(gw_factory):
    g = _gw(gw_factory)
    c, _, fh, data = _setup(g, size=8 * MIB)
    # The hostile client: a small receive buffer, 64 pipelined 1 MiB READs, no reads.
    h = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    h.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    h.connect((g.host, g.port))
    hc = g.client()
    for i in range(64):
        _, msg = hc.build_call(N.NFS_PROGRAM, N.NFS_V3, N.NFSPROC3_READ,
                               N.a_read(fh, (i % 8) * MIB, MIB))
        h.sendall(N.record(msg))
    hc.close()
    time.sleep(1.0)
    peak = 0
    other = g.client()
    t0 = time.monotonic()
    for i in range(16):
        # Short READs are allowed (the hostile client's queued replies may hold the
        # large pool buffers: a worker then answers with what a smaller one holds);
        # the other client continues from where each one ended, as clients do.
        off, end = (i % 8) * MIB, (i % 8 + 1) * MIB
        while off < end:
            r = other.read(fh, off, end - off).check()
            assert 0 < len(r.data) and r.data == data[off:off + len(r.data)], (i, off)
            off += len(r.data)
        peak = max(peak, _metric(g, "nfsgw_tcp_pipes_in_use"))
    elapsed = time.monotonic() - t0
    assert elapsed < 10, f"the other client was starved: {elapsed:.1f} s for 16 MiB"
    assert 1 <= peak <= PER_CONN + 1, f"{peak} pipes in use (cap {PER_CONN} per connection)"
    # Gone: its pipes come back at once (replaced: they still held pages).
    h.close()
    deadline = time.monotonic() + 5
    while _metric(g, "nfsgw_tcp_pipes_in_use") > 0:
        assert time.monotonic() < deadline, "pipes of a closed connection not returned"
        time.sleep(0.05)
    # And the reactor still splices.
    before = _metric(g, "nfsgw_tcp_spliced_bytes_total")
    assert other.read(fh, 0, MIB).check().data == data[:MIB]
    assert _metric(g, "nfsgw_tcp_spliced_bytes_total") - before == MIB
