"""TCP resource exhaustion against the real binary: connection floods over
tcp.max_connections are refused at once with a rate-limited log line, the open-file
limit is raised at start, and record marks that announce more than is sent do not
keep a well-behaved client from writing 1 MiB blocks."""

import socket
import struct
import time

import pytest

import nfsclient as N
import statsutil
from conftest import free_port


def raw_sock(g, timeout=5.0):
    s = socket.create_connection((g.host, g.port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def closed_by_peer(s) -> bool:
    """True when the gateway closed the connection (EOF or reset) within the timeout."""
    try:
        return s.recv(64) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_connection_flood_is_refused_at_once_with_one_log_line(gw_factory):
    stats_port = free_port()
    # Idle connections give way to newcomers only after tcp.stall_reclaim_ms: kept long
    # here, so the three kept ones stay and every newcomer is refused.
    g = gw_factory(tcp={"max_connections": 3, "stall_reclaim_ms": 60000},
                   extra={"stats": {"listen": f"127.0.0.1:{stats_port}"}})
    time.sleep(0.5)  # the harness's readiness probe is closed and forgotten
    kept = [raw_sock(g) for _ in range(3)]
    time.sleep(0.2)
    refused = 0
    for _ in range(40):
        s = raw_sock(g, timeout=3.0)
        assert closed_by_peer(s), "a connection over tcp.max_connections was not closed"
        refused += 1
        s.close()
    log = g.log_path.read_text(errors="replace")
    lines = [l for l in log.splitlines() if "refusing connection from" in l]
    assert lines, f"no refusal log line; log:\n{g.log_tail()}"
    assert "tcp.max_connections = 3 reached" in lines[0]
    # Rate-limited: 40 refusals in well under a few seconds give a handful of lines.
    assert len(lines) <= 5, f"{len(lines)} refusal lines for {refused} refusals"
    # The refusals are counted on the stats endpoint (published before the reactor
    # sleeps, so within a moment of the flood).
    deadline = time.monotonic() + 5
    while True:
        m = statsutil.scrape(stats_port)
        got = m.sum("nfsgw_guard_events_total", transport="tcp", reason="refused_max_connections")
        if got >= refused or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert got >= refused, f"nfsgw_guard_events_total refused = {got}, expected >= {refused}"
    for s in kept:
        s.close()
    time.sleep(0.3)
    with g.client(timeout=10) as c:
        assert c.null().accept_stat == N.SUCCESS


def test_open_file_soft_limit_is_raised_to_the_hard_limit(gw_factory):
    g = gw_factory()
    limits = open(f"/proc/{g.proc.pid}/limits").read()
    row = next(l for l in limits.splitlines() if l.startswith("Max open files"))
    soft, hard = row.split()[3:5]
    assert soft == hard, row


def test_record_marks_do_not_starve_a_1mib_writer(gw_factory):
    g = gw_factory()
    attackers = []
    for _ in range(200):
        s = raw_sock(g)
        s.sendall(struct.pack(">I", 0x8000_0000 | (1 << 20)) + b"\0\0\0\0")
        attackers.append(s)
    time.sleep(0.3)
    data = bytes(range(256)) * 4096  # 1 MiB
    with g.client(timeout=10) as c:
        root = c.mount("/")
        f = c.create(root, "big", 0o644).check().fh
        for i in range(3):
            c.write(f, i << 20, data, N.FILE_SYNC).check()
        assert c.read(f, 2 << 20, 1 << 20).check().data == data
    for s in attackers:
        s.close()


LARGE = str((1 << 20) + (4 << 10))  # the large pool class (1 MiB + 4 KiB), a stats label


def _read_call(c, fh: bytes, offset: int, count: int) -> bytes:
    _, msg = c.build_call(N.NFS_PROGRAM, N.NFS_V3, N.NFSPROC3_READ, N.a_read(fh, offset, count))
    return N.record(msg)


def _wait_metric(port: int, what: str, cond, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        m = statsutil.scrape(port)
        if cond(m):
            return m
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _gw_with_stats(gw_factory):
    """A gateway whose send timeout (8 s) closes a client reading nothing within a
    test, with its stats endpoint; returns (gateway, stats port)."""
    stats_port = free_port()
    g = gw_factory(tcp={"send_timeout_s": 8},
                   extra={"stats": {"listen": f"127.0.0.1:{stats_port}"}})
    return g, stats_port


def _big_file(c, stats_port, mib, data):
    """A file of `mib` copies of the 1 MiB `data`, committed; the reactor's 48 large
    buffers all free before the attack."""
    f = c.create(c.mount("/"), "big", 0o644).check().fh
    for i in range(mib):
        c.write(f, i << 20, data, N.UNSTABLE).check()
    c.commit(f).check()
    assert statsutil.scrape(stats_port).sum("nfsgw_pool_buffers", size=LARGE) == 48
    return f


def _full_reads_beside(c, f, offs, data):
    """A well-behaved client's pipelined 1 MiB READs (eight in flight, as a kernel
    client reading ahead would have) beside a hostile one: every one full."""
    reads = c.pipeline([(N.NFSPROC3_READ, N.a_read(f, i << 20, 1 << 20), N.d_read) for i in offs],
                       window=len(offs))
    for i, r in zip(offs, reads):
        assert r.status == 0, f"READ at {i} MiB: status {r.status}"
        assert r.count == 1 << 20, f"READ of 1 MiB at {i} MiB answered {r.count} bytes"
        assert r.data == data


def test_pipelined_reads_that_are_never_read_do_not_pin_the_large_buffers(gw_factory):
    """Standards: a client must not pin shared buffers by reading nothing. A raw socket
    pipelines tcp.max_inflight (64) READs of 1 MiB and never reads a reply: without a
    per-connection bound on replies being produced, each took one of the reactor's 48
    large buffers until tcp.send_timeout_s, and a second client's 1 MiB READs came back
    short (64 KiB). With replies in production counted against tcp.max_queued_mib, the
    hostile connection holds at most its budget (4 MiB + one call), the second client
    gets full READs and prompt 1 MiB WRITEs, the stats show the connection held back,
    tcp.send_timeout_s still closes it, and every buffer comes back."""
    g, stats_port = _gw_with_stats(gw_factory)
    data = bytes(range(256)) * 4096  # 1 MiB
    with g.client(timeout=20) as c:
        f = _big_file(c, stats_port, 64, data)
        baseline = statsutil.scrape(stats_port)

        hostile = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # A small receive window: the kernel takes few reply bytes off the gateway.
        hostile.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        hostile.connect((g.host, g.port))
        hostile.sendall(b"".join(_read_call(c, f, i << 20, 1 << 20) for i in range(64)))
        time.sleep(1.0)  # every call the gateway admits is answered by now

        # The second client on the same reactor: full 1 MiB READs, prompt 1 MiB WRITEs.
        # Eight READs in flight at once (a kernel client reading ahead would have more):
        # with one free large buffer, all but one came back short.
        _full_reads_beside(c, f, (3, 17, 40, 63, 5, 9, 22, 31), data)
        for i in range(8):
            t0 = time.monotonic()
            c.write(f, (64 + i) << 20, data, N.FILE_SYNC).check()
            took = time.monotonic() - t0
            assert took < 3.0, f"1 MiB FILE_SYNC WRITE took {took:.1f} s beside the hostile client"
        # The hostile connection holds its budget (4 MiB + one call), and the stats show
        # it held back.
        m = statsutil.scrape(stats_port)
        held = m.sum("nfsgw_pool_buffers_in_use", size=LARGE)
        assert held <= 5, f"one connection reading nothing holds {held} large buffers"
        _wait_metric(stats_port, "the held-back connection in nfsgw_guard_events_total",
                     lambda m: m.sum("nfsgw_guard_events_total", transport="tcp",
                                     reason="reply_budget") >= 1)

        # No progress: tcp.send_timeout_s still closes it, and everything comes back.
        hostile.settimeout(15)
        t0 = time.monotonic()
        _wait_metric(stats_port, "the send timeout",
                     lambda m: m.sum("nfsgw_guard_events_total", transport="tcp",
                                     reason="send_timeout") >= 1, timeout=20)
        assert time.monotonic() - t0 < 15
        hostile.close()
        # Every pool buffer is back (no class holds more than before the attack).
        before = {l["size"]: v for l, v in baseline.series("nfsgw_pool_buffers_in_use")}
        _wait_metric(stats_port, "every pool buffer back", lambda m: all(
            v <= before[l["size"]] for l, v in m.series("nfsgw_pool_buffers_in_use")))
        assert c.read(f, 5 << 20, 1 << 20).check().count == 1 << 20


def test_pipelined_v4_reads_that_are_never_read_do_not_pin_the_large_buffers(gw_factory):
    """The same bound for NFSv4.1: READs inside COMPOUNDs reserve their reply buffers
    too. Three sessions, each pipelining a READ of ~1 MiB on every one of its 16 slots
    and reading nothing: without the bound every call took a large buffer (the build
    before the bound still held 23 of the 48 when this test looks; the rest sat in
    socket buffers); with it each connection holds its 4 MiB budget (5 buffers at
    most), and a v3 client's 1 MiB READs meanwhile stay full."""
    from test_uring_v4 import Client as V4, OP_READ, BIG
    g, stats_port = _gw_with_stats(gw_factory)
    data = bytes(range(256)) * 4096  # 1 MiB
    with g.client(timeout=20) as c:
        f = _big_file(c, stats_port, 16, data)

        hostiles = []
        for _ in range(3):
            h = V4(g)
            h.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            recs = []
            for slot in range(16):
                # SEQUENCE on its own slot (fresh slots start at sequence id 1; slot 0
                # is past its first use), highest slot 15, no reply caching.
                seq = h.seqid if slot == 0 else 1
                ops = N.Packer().u32(53).fopaque(h.session, 16).u32(seq).u32(slot) \
                    .u32(15).bool(False).u32(22).opaque(f).u32(OP_READ) \
                    .fopaque(b"\0" * 16, 16).u64(slot << 20).u32(BIG).get()
                recs.append(h.record(ops, 3))
            h.sock.sendall(b"".join(struct.pack(">I", 0x80000000 | len(r)) + r for r in recs))
            hostiles.append(h)
        time.sleep(1.5)  # every call the gateway admits is answered by now

        _full_reads_beside(c, f, (3, 9, 12, 15, 0, 5, 7, 11), data)
        m = statsutil.scrape(stats_port)
        held = m.sum("nfsgw_pool_buffers_in_use", size=LARGE)
        assert held <= 3 * 5, f"three NFSv4.1 connections reading nothing hold {held} large buffers"
        assert m.sum("nfsgw_guard_events_total", transport="tcp", reason="reply_budget") >= 3
        for h in hostiles:
            h.sock.close()
        _wait_metric(stats_port, "every large buffer back", lambda m: m.sum(
            "nfsgw_pool_buffers_in_use", size=LARGE) == 0, timeout=20)


def _closed_eventually(s, timeout: float) -> bool:
    """True when the gateway closes `s` within `timeout`: whatever reply bytes reached
    the socket are read and thrown away until EOF or a reset."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        s.settimeout(left)
        try:
            if s.recv(1 << 16) == b"":
                return True
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False


@pytest.mark.parametrize("io", ["workers", "auto", "splice"])
def test_many_connections_that_never_read_are_reclaimed_under_pressure(gw_factory, io):
    """Standards: no starved neighbour. The per-connection reply budget bounds one
    connection, but 14 raw sockets each pipelining 1 MiB READs and reading nothing
    hold up to 14 x 4 MiB, more than the reactor's 48 large buffers: without a
    send-side reclaim a well-behaved client's 1 MiB READs came back short (64 KiB)
    until tcp.send_timeout_s (30 s) closed them. With it, once an allocation is
    starved, each connection whose queued replies hold pool memory and made no write
    progress for tcp.stall_reclaim_ms (default 1 s) is closed: the client gets full,
    byte-exact READs and a prompt FILE_SYNC WRITE within a few seconds, the hostile
    sockets see their connection closed, and the stats count the reclaims. Runs on the
    worker path, the io_uring path, and io_uring with spliced replies (pipes: 20
    sockets, since the pipes take four connections' READs first)."""
    stats_port = free_port()
    backend = {"io": "workers"} if io == "workers" else {"io": "auto"}
    if io == "splice":
        backend["splice"] = True
    # Default tcp.stall_reclaim_ms and tcp.send_timeout_s (30 s): the reclaim, not
    # the send timeout, must free the buffers.
    g = gw_factory(backend_opts=backend, extra={"stats": {"listen": f"127.0.0.1:{stats_port}"}})
    data = bytes(range(256)) * 4096  # 1 MiB
    with g.client(timeout=20) as c:
        f = _big_file(c, stats_port, 16, data)
        hostiles = []
        # With splice, the reactor's 16 pipes (at most 4 per connection) take the
        # first four connections' READs: six more to take the large buffers too.
        for k in range(20 if io == "splice" else 14):
            h = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            # A small receive window: the kernel takes few reply bytes off the gateway.
            h.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            h.connect((g.host, g.port))
            h.sendall(b"".join(_read_call(c, f, ((k + i) % 16) << 20, 1 << 20) for i in range(8)))
            hostiles.append(h)
        time.sleep(0.5)  # the hostile calls are answered (or held back) by now

        # Full, byte-exact 1 MiB READs within a few seconds (a READ answered while the
        # large buffers are all taken comes back short: that starvation is what
        # triggers the reclaim).
        t0 = time.monotonic()
        short = 0
        while True:
            r = c.read(f, 7 << 20, 1 << 20).check()
            if r.count == 1 << 20:
                assert r.data == data
                break
            short += 1
            assert time.monotonic() - t0 < 6.0, \
                f"1 MiB READs still short ({r.count} bytes) after 6 s beside {len(hostiles)} hostile connections"
            time.sleep(0.1)
        took = time.monotonic() - t0
        # Then eight pipelined ones, all full, within the same few seconds. A reclaim
        # closes only enough stalled connections to free what the starved allocation
        # needed, so a batch sent right after the first full READ may starve once more
        # (a short READ: the next reclaim's trigger) before every buffer is free.
        offs = (3, 9, 12, 15, 0, 5, 7, 11)
        while True:
            reads = c.pipeline([(N.NFSPROC3_READ, N.a_read(f, i << 20, 1 << 20), N.d_read)
                                for i in offs], window=len(offs))
            assert all(r.status == 0 for r in reads), [r.status for r in reads]
            if all(r.count == 1 << 20 for r in reads):
                assert all(r.data == data for r in reads)
                break
            assert time.monotonic() - t0 < 6.0, \
                f"pipelined 1 MiB READs still short ({[r.count for r in reads]}) after 6 s"
            time.sleep(0.1)
        t1 = time.monotonic()
        c.write(f, 16 << 20, data, N.FILE_SYNC).check()
        assert time.monotonic() - t1 < 3.0, "1 MiB FILE_SYNC WRITE slow beside the hostile clients"
        assert c.read(f, 16 << 20, 1 << 20).check().data == data

        # The hostile connections were closed by the gateway (well before the send
        # timeout), and the reclaims are counted.
        until = time.monotonic() + 5.0
        closed = [i for i, h in enumerate(hostiles)
                  if _closed_eventually(h, max(0.2, until - time.monotonic()))]
        m = statsutil.scrape(stats_port)
        reclaimed = m.sum("nfsgw_guard_events_total", transport="tcp", reason="send_reclaimed")
        # Enough of them to free the large buffers the client needed (a connection
        # that starves no one may stay open: tcp.send_timeout_s is for it), each one
        # closed by this reclaim and counted.
        assert reclaimed >= 3, f"{reclaimed} send_reclaimed events; log:\n{g.log_tail()}"
        assert len(closed) == reclaimed, (closed, reclaimed)
        assert m.sum("nfsgw_guard_events_total", transport="tcp", reason="send_timeout") == 0
        log = g.log_path.read_text(errors="replace")
        assert "closing to reclaim them" in log, g.log_tail()
        print(f"io={io}: full READs after {took:.2f} s ({short} short), "
              f"{int(reclaimed)} reclaimed")
        for h in hostiles:
            h.close()
        _wait_metric(stats_port, "every large buffer back", lambda m: m.sum(
            "nfsgw_pool_buffers_in_use", size=LARGE) == 0, timeout=20)
