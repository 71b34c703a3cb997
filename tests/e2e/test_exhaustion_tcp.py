"""TCP resource exhaustion against the real binary (issue 15): connection floods over
tcp.max_connections are refused at once with a rate-limited log line, the open-file
limit is raised at start, and record marks that announce more than is sent do not
keep a well-behaved client from writing 1 MiB blocks."""

import socket
import struct
import time

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
    g = gw_factory(tcp={"max_connections": 3}, extra={"stats": {"listen": f"127.0.0.1:{stats_port}"}})
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
