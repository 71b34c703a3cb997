"""Per-client and per-export series (docs/stats.md "Per client and per export"): two
clients bound to 127.0.0.2 and 127.0.0.3 on two exports get their own series with the
right operations and bytes; 1,000 distinct 127.x.y.z addresses stay within
`stats.top_clients` + "other" with every sum intact; `nfsgw-tools top --once` shows
the heaviest clients and exports of a live gateway under load; counting a call reads
no record again and looks a settled connection up no more (NFSv3 and NFSv4.1)."""

import socket
import subprocess
import threading
import time

import pytest

from conftest import free_port
from nfsclient import NfsClient
from statsutil import TOOLS, bench, scrape, wait_idle

EXPORTS = [
    {"path": "/a", "clients": ["127.0.0.0/8"], "access": "rw", "squash": "none"},
    {"path": "/b", "clients": ["127.0.0.0/8"], "access": "rw", "squash": "none"},
]


class BoundClient(NfsClient):
    """The e2e client with its socket bound to a source address of 127/8 (loopback
    accepts any of them), so the gateway sees a distinct client per address."""

    def __init__(self, source: str, **kw):
        self.source = source
        super().__init__(**kw)

    def connect(self) -> None:
        self.close()
        s = socket.create_connection((self.host, self.port), timeout=self.timeout,
                                     source_address=(self.source, 0))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.settimeout(self.timeout)
        self.sock = s
        self._rbuf = bytearray()
        self._pending = {}


def gateway(gw_factory, qos: str = "", **stats):
    """A gateway on EXPORTS with its stats endpoint; `qos`: TOML appended ([[qos.*]])."""
    port = free_port()
    g = gw_factory(exports=[dict(e) for e in EXPORTS], start=False,
                   extra={"stats": {"listen": f"127.0.0.1:{port}", **stats}})
    if qos:
        base = type(g).config_text
        g.config_text = lambda: base(g) + "\n" + qos
        g.write_config()
    g.start()
    g.stats_port = port
    return g


def check_sums(m, what: str):
    """Every family of `what` (client or export) sums to the gateway's totals: ops to
    `nfsgw_ops_total`, bytes in and out to `nfsgw_bytes_*_total` (TCP, no callbacks
    here), and each histogram's count to its ops."""
    assert m.sum(f"nfsgw_{what}_ops_total") == m.sum("nfsgw_ops_total")
    assert m.sum(f"nfsgw_{what}_bytes_total", direction="in") == m.sum("nfsgw_bytes_in_total")
    assert m.sum(f"nfsgw_{what}_bytes_total", direction="out") == m.sum("nfsgw_bytes_out_total")
    for labels, count in m.series(f"nfsgw_{what}_request_duration_seconds_count"):
        assert count == m.sum(f"nfsgw_{what}_ops_total", **labels), labels


def test_two_clients_two_exports_have_their_series(gw_factory):
    g = gateway(gw_factory)
    m0 = scrape(g.stats_port)
    data = b"x" * 4096
    a = BoundClient("127.0.0.2", port=g.port)
    root_a = a.mount("/a")
    fa = a.create(root_a, "f").check().fh
    for i in range(10):
        a.write(fa, i * 4096, data).check()
    for i in range(5):
        assert a.read(fa, i * 4096, 4096).check().data == data
    b = BoundClient("127.0.0.3", port=g.port)
    root_b = b.mount("/b")
    for _ in range(20):
        b.getattr(root_b).check()
    a.close()
    b.close()
    m = wait_idle(g.stats_port, m0)

    ops = lambda who, cls: m.sum("nfsgw_client_ops_total", client=who, **{"class": cls})
    assert ops("127.0.0.2", "write") == 10
    assert ops("127.0.0.2", "read") == 5
    assert ops("127.0.0.3", "read") == 0 and ops("127.0.0.3", "write") == 0
    # MNT and 20 GETATTRs (and nothing else) from the second client.
    assert ops("127.0.0.3", "metadata") == 21
    exp = lambda path, cls: m.sum("nfsgw_export_ops_total", export=path, **{"class": cls})
    assert exp("/a", "write") == 10 and exp("/a", "read") == 5
    assert exp("/b", "metadata") == 20 and exp("/b", "write") == 0
    # MNT names a path, not a handle: counted under export="none".
    assert exp("none", "metadata") == 2
    bytes_ = lambda who, d: m.sum("nfsgw_client_bytes_total", client=who, direction=d)
    assert bytes_("127.0.0.2", "in") > 10 * 4096 > bytes_("127.0.0.3", "in") > 0
    assert bytes_("127.0.0.2", "out") > 5 * 4096 > bytes_("127.0.0.3", "out") > 0
    assert m.sum("nfsgw_export_bytes_total", export="/a", direction="in") > 10 * 4096
    for who in ("127.0.0.2", "127.0.0.3"):
        assert m.sum("nfsgw_client_request_duration_seconds_count", client=who) == \
            m.sum("nfsgw_client_ops_total", client=who)
    check_sums(m, "client")
    check_sums(m, "export")


@pytest.mark.serial
def test_a_thousand_addresses_stay_within_top_clients(gw_factory):
    # 256 slots: the table fills too, and its folded addresses join "other".
    g = gateway(gw_factory, top_clients=20, client_slots=256)
    m0 = scrape(g.stats_port)
    c = NfsClient(port=g.port)
    root = c.mount("/a")
    c.close()
    addrs = [f"127.{10 + i // 250}.{i % 250}.{1 + i % 7}" for i in range(1000)]
    assert len(set(addrs)) == 1000
    for n, addr in enumerate(addrs):
        with BoundClient(addr, port=g.port) as x:
            # The first 30 addresses make more calls, so they are the top 20.
            for _ in range(3 if n < 30 else 1):
                x.getattr(root).check()
    m = wait_idle(g.stats_port, m0)
    clients = {l["client"] for l, _ in m.series("nfsgw_client_ops_total")}
    assert "other" in clients and len(clients) <= 21, sorted(clients)
    # Ties among the 30 busiest are broken by address: 20 of them, and no one else.
    assert len(clients & set(addrs[:30])) == 20, sorted(clients)
    # 1,001 addresses seen (the mount came from 127.0.0.1), 256 held, the rest folded.
    assert m.sum("nfsgw_clients") == 256
    assert m.sum("nfsgw_client_table_full_total") == 1001 - 256
    top = sum(m.sum("nfsgw_client_ops_total", client=a) for a in clients - {"other"})
    assert top == 20 * 3
    assert m.sum("nfsgw_client_ops_total", client="other") == m.sum("nfsgw_ops_total") - top
    check_sums(m, "client")
    check_sums(m, "export")


@pytest.mark.serial
def test_top_once_shows_heaviest_clients_and_exports(gw_factory):
    g = gateway(gw_factory)
    stop = threading.Event()

    def load(addr: str, path: str):
        with BoundClient(addr, port=g.port) as x:
            root = x.mount(path)
            while not stop.is_set():
                x.getattr(root).check()

    threads = [threading.Thread(target=load, args=a, daemon=True)
               for a in (("127.0.0.2", "/a"), ("127.0.0.3", "/b"))]
    for t in threads:
        t.start()
    try:
        time.sleep(0.5)
        r = subprocess.run([str(TOOLS), "top", "--once", "--interval", "1",
                            "--url", f"http://127.0.0.1:{g.stats_port}/metrics"],
                           capture_output=True, text=True, timeout=30)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert r.returncode == 0, r.stderr
    frame = r.stdout
    assert "\x1b" not in frame
    rows = {line.split()[0]: line.split() for line in frame.splitlines() if line.strip()}
    for key in ("127.0.0.2", "127.0.0.3", "/a", "/b"):
        assert key in rows, frame
        assert float(rows[key][1]) > 0, frame   # ops/s
        assert rows[key][-1] != "-", frame       # a p99


@pytest.mark.parametrize("rule", [False, True])
def test_counting_reads_no_record_again_and_looks_nothing_up_per_call(gw_factory, rule):
    # Without a QoS rule a call is counted from what classification decoded
    # (stats::tenants::Seen): no record is read a second time (no COMPOUND walked
    # again) and a settled connection's client and pair are not looked up again.
    # Under a rule (here for an address no client uses) the gate needs each call's
    # cost before classification: one record peek per call, which counts it.
    qos = '[[qos.client]]\nmatch = "127.0.0.9"\nops_per_s = 1000000\n' if rule else ""
    g = gateway(gw_factory, qos=qos)
    m0 = scrape(g.stats_port)
    a = BoundClient("127.0.0.2", port=g.port)
    root = a.mount("/a")
    fh = a.create(root, "f").check().fh
    a.write(fh, 0, b"x" * 4096).check()
    for _ in range(300):
        a.getattr(fh).check()
        a.read(fh, 0, 4096).check()
    a.close()
    target = f"tcp://127.0.0.1:{g.port}"
    for wl in ("getattr", "randread"):
        bench(target, "--nfs", "4.1", "--export", "/b", "--workload", wl, "--files", "1",
              "--size-mib", "1", "--ops", "600")
    m = wait_idle(g.stats_port, m0)
    calls = m.sum("nfsgw_client_ops_total")
    assert calls >= 600 + 2 * 600, calls
    assert calls == m.sum("nfsgw_ops_total")
    peeks = m.sum("nfsgw_client_record_peeks_total")
    assert peeks == (calls if rule else 0), (peeks, calls)
    # A lookup per connection and per change of export (setup calls name none), far
    # fewer than one per call.
    lookups = m.sum("nfsgw_client_lookups_total")
    assert 1 <= lookups <= 40, lookups
    check_sums(m, "client")
    check_sums(m, "export")
