"""Fixtures for the gateway end-to-end suites.

* `gateway_bin`  - the binary: $GATEWAY_BIN or $CARGO_TARGET_DIR/release/gateway (target dir
                   default <repo>/target) (fails, never skips).
* `gw_factory`   - `gw_factory(backend="fs", exports=[...], tcp={...})` -> a started `Gateway`;
                   every gateway it made is stopped with SIGTERM at teardown (exit 0 asserted).
* `gw`           - a started gateway with one rw "/" export, parametrized over fs, memory and
                   s3 (a fresh bucket per test on the session's S3 server).
* `gw_fs`        - the same, fs backend only.
* Modules that set `OVER_RDMA = True` also run every `gw` test as "fs+rdma": the gateway
  serves RPC-over-RDMA with the `soft` provider and the test's clients (our Python
  client, the libnfs utilities) reach it through `bench --bridge-listen`, which carries
  each TCP RPC over its own RDMA connection with RFC 8267 chunks (WRITE data in read
  chunks, READ data in write chunks, long replies in reply chunks).

* s3: `s3_server` (session: ONE moto server on loopback, tests/e2e/s3server.py),
  `s3_bucket` (a fresh bucket per test), `s3` (boto3 client), `s3_proxy` (a fault-injecting
  proxy to the server, tests/e2e/s3proxy.py). `gw_factory(backend="s3")` makes a fresh
  bucket unless given `s3={...}` (the `[backend.s3]` table; see `S3Server.gateway_s3_config`),
  and gives that gateway a `handle_key_file` of its own (`handle_key_file`: no 2 s key
  agreement through the bucket at each start; a given `s3={...}` is used as it is).
* garage: `garage_cluster` (session: ONE three-node Garage cluster on loopback,
  tests/e2e/garage.py; skipped with the reason when tools/garage/install.sh has not cached
  the binary or NFSGW_GARAGE=0). `gw_factory(backend="garage")` makes an s3 gateway
  (`gw.backend == "s3"`) on a fresh bucket of that cluster, with every node as an endpoint;
  `gw.garage` is the cluster. The generic `gw`/`backend` tests run as `[garage]` too.

`Gateway` offers start/stop/kill/restart on the same port, data and state dirs, `client()`
(an `NfsClient`), `mount_url()` for libnfs utilities, and `rss_kib()` from /proc.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nfsclient import NfsClient  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
# Cargo's output directory: tests/run-all.sh keeps it outside the checkout.
RELEASE = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target") / "release"
DEFAULT_EXPORT = {"path": "/", "clients": ["127.0.0.0/8"], "access": "rw", "squash": "none"}


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(v)


# ---- parallel runs (pytest-xdist: tests/README.md "Parallel runs") ---------------------
# Each process hands out ports from its own range, all below the kernel's ephemeral range
# (net.ipv4.ip_local_port_range, 32768 up by default). A port taken with bind(port 0) and
# released before the gateway binds it could meanwhile be taken by another xdist worker,
# or become the source port of some client's connect(); neither can happen here.
# E2E_PORT_BASE moves the ranges: two checkouts' suites at once on one machine.
PORT_BASE = int(os.environ.get("E2E_PORT_BASE", "10000"))
PORTS_PER_SLOT = 1500


def _xdist_slot() -> int:
    """0 outside xdist (and in the serial pass), 1 + N in xdist worker gwN."""
    w = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(w[2:]) + 1 if w.startswith("gw") and w[2:].isdigit() else 0


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_SLOT = _xdist_slot()
_PORT_LO = PORT_BASE + _SLOT * PORTS_PER_SLOT
_next_port = itertools.count()


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody holds now, from this process's own range."""
    if _PORT_LO + PORTS_PER_SLOT > _ephemeral_low():   # too many workers for the range
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    for _ in range(PORTS_PER_SLOT):
        port = _PORT_LO + next(_next_port) % PORTS_PER_SLOT
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:   # no SO_REUSEADDR: a port still in TIME_WAIT is skipped too
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {_PORT_LO}..{_PORT_LO + PORTS_PER_SLOT - 1}")


def _spread_reactor_core() -> None:
    """Each xdist worker's gateways run their reactor on their own CPU (the gateway config's
    engine.cores; E2E_CORE), not all of them on the first."""
    if _SLOT and "E2E_CORE" not in os.environ:
        cpus = sorted(os.sched_getaffinity(0))
        os.environ["E2E_CORE"] = str(cpus[(_SLOT - 1) % len(cpus)])


_spread_reactor_core()

# Whole modules that need a quiet CPU (they assert rates and time bounds): run in the
# serial pass, as if each of their tests carried @pytest.mark.serial.
SERIAL_MODULES = {
    "test_bench",         # ops/s within 35 % of --rate, durations
    "test_bench_md",
    "test_bench_nfs41",
    "test_big_dirs",      # 100,000-entry listings: CPU-bound, minutes, near the 300 s bound
    "test_exhaustion_tcp",  # a 1 MiB WRITE within 3 s beside hostile clients
    "test_handles_crash",   # at least 200 operations before each kill
    "test_splice",        # the other client served within 10 s
}


# Tests that must share one xdist worker, run in file order (tests/run-e2e.sh's parallel
# pass): a module's tests that share a module-scoped fixture (test_hostile.py's canary,
# written by its first test; test_package.py's .deb, built in a shared target dir), and
# every Garage test (one three-node cluster per session, not one per worker). Decided from
# the node id alone, on the controller: xdist's own `--dist loadgroup` does not group on
# pytest 9.2 (pytest-dev/pytest-xdist#1386), so the scheduler below does it.
GROUP_MODULES = {"test_hostile.py", "test_package.py", "test_garage.py"}
_GARAGE_ID = re.compile(r"\[(?:.*-)?garage(?:-.*)?\]$")


def xdist_group_of(nodeid: str) -> Optional[str]:
    module = nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
    if module in ("test_garage.py", "test_garage_ha.py") or _GARAGE_ID.search(nodeid):
        return "garage"
    return module if module in GROUP_MODULES else None


# Single parametrized cases for the serial pass (node ids), where the other cases of the
# test run in parallel: the [s3] listing sends a HEAD per entry to moto, CPU-bound
# Python, and timed out in each of three parallel runs on a loaded machine.
SERIAL_IDS = {"test_ops.py::test_readdir_paging_10000[s3]"}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        """Load balancing one test at a time, except the groups of `xdist_group_of`."""

        def _split_scope(self, nodeid: str) -> str:
            return xdist_group_of(nodeid) or nodeid

    return GroupScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """E2E_PASS=parallel keeps the tests without the `serial` mark, E2E_PASS=serial the
    ones with it (tests/run-e2e.sh runs both passes); unset: every test."""
    for item in items:
        if item.module.__name__ in SERIAL_MODULES or item.nodeid in SERIAL_IDS:
            item.add_marker(pytest.mark.serial)
        _check_group(item)
    want = os.environ.get("E2E_PASS", "")
    if want not in ("parallel", "serial"):
        return
    keep, drop = [], []
    for item in items:
        serial = item.get_closest_marker("serial") is not None
        (keep if serial == (want == "serial") else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _check_group(item) -> None:
    """A new module-scoped fixture or Garage test that `xdist_group_of` does not place
    would be split over workers: fail its collection instead."""
    group = xdist_group_of(item.nodeid)
    if item.get_closest_marker("garage") is not None and group != "garage":
        raise pytest.UsageError(f"{item.nodeid}: a garage test outside the garage group (conftest.xdist_group_of)")
    info = getattr(item, "_fixtureinfo", None)
    for name in info.names_closure if info else ():
        for d in info.name2fixturedefs.get(name) or ():
            if d.scope in ("module", "class", "package") and group is None:
                raise pytest.UsageError(f"{item.nodeid}: module-scoped fixture {name!r}; add the module "
                                        f"to GROUP_MODULES in conftest.py")


def free_rdma_port() -> int:
    """A port for the soft provider's listener (a host-local name; any unused TCP port
    number is as good as another)."""
    return free_port()


def find_bench_bin() -> Path:
    env = os.environ.get("BENCH_BIN")
    return Path(env) if env else RELEASE / "bench"


class Bridge:
    """`bench --bridge-listen`: TCP clients in, RPC-over-RDMA (soft) out."""

    def __init__(self, workdir: Path, rdma_port: int):
        self.port = free_port()
        self.log = workdir / "bridge.log"
        self.proc = subprocess.Popen(
            [str(find_bench_bin()), "--bridge-listen", f"127.0.0.1:{self.port}",
             "--target", f"rdma://127.0.0.1:{rdma_port}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=open(self.log, "wb"))
        line = self.proc.stdout.readline().decode(errors="replace")
        assert "listening" in line, f"bridge did not start: {line!r}; log:\n{self.log.read_text(errors='replace')}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def find_gateway_bin() -> Path:
    env = os.environ.get("GATEWAY_BIN")
    p = Path(env) if env else RELEASE / "gateway"
    return p


class Gateway:
    def __init__(self, binary: Path, workdir: Path, backend: str = "fs",
                 exports: Optional[list] = None, tcp: Optional[dict] = None,
                 engine: Optional[dict] = None, extra: Optional[dict] = None,
                 s3: Optional[dict] = None, backend_opts: Optional[dict] = None):
        self.binary = binary
        self.workdir = workdir
        self.backend = backend
        self.exports = exports if exports is not None else [dict(DEFAULT_EXPORT)]
        self.tcp = dict(tcp or {})
        self.engine = dict(engine or {})
        self.extra = extra or {}
        # s3: the [backend.s3] table; backend_opts: more [backend] keys (workers, ...)
        self.s3 = dict(s3) if s3 is not None else None
        self.backend_opts = dict(backend_opts or {})
        self.s3_endpoint_direct: Optional[str] = None   # the server itself (not a proxy)
        self.garage = None   # the GarageCluster behind a backend="garage" gateway
        self.data_dir = workdir / "data"
        self.state_dir = workdir / "state"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.host = "127.0.0.1"
        self.config_path = workdir / "gateway.toml"
        self.proc: Optional[subprocess.Popen] = None
        self.starts = 0
        self.returncodes: list = []
        self.write_config()

    # -- config ----------------------------------------------------------------------
    def config_text(self) -> str:
        engine = {"cores": [int(os.environ.get("E2E_CORE", "0"))], "idle": "adaptive", "hugepages": "auto"}
        engine.update(self.engine)
        tcp = {"listen": f"{self.host}:{self.port}"}
        tcp.update(self.tcp)
        sections = [
            ("engine", engine),
            ("tcp", tcp),
        ]
        backend = {"kind": self.backend}
        if self.backend != "s3":
            backend["root"] = str(self.data_dir)
        if self.backend == "fs" and os.environ.get("NFSGW_E2E_IO"):
            # The fs data path under test (backend.io): CI runs core suites both ways.
            backend["io"] = os.environ["NFSGW_E2E_IO"]
        backend.update(self.backend_opts)
        sections.append(("backend", backend))
        if self.s3 is not None:
            sections.append(("backend.s3", self.s3))
        sections.append(("state", {"dir": str(self.state_dir)}))
        for k, v in self.extra.items():
            sections.append((k, v))
        lines = []
        for name, kv in sections:
            lines.append(f"[{name}]")
            lines += [f"{k} = {_toml_value(v)}" for k, v in kv.items()]
            lines.append("")
        for e in self.exports:
            lines.append("[[exports]]")
            lines += [f"{k} = {_toml_value(v)}" for k, v in e.items()]
            lines.append("")
        return "\n".join(lines)

    def write_config(self) -> None:
        self.config_path.write_text(self.config_text())

    # -- lifecycle -------------------------------------------------------------------
    @property
    def log_path(self) -> Path:
        return self.workdir / f"gateway.{self.starts}.log"

    def log_tail(self, n: int = 40) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-n:])

    def start(self, timeout: float = 20.0) -> "Gateway":
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.starts += 1
        logf = open(self.log_path, "wb")
        env = dict(os.environ)
        env.setdefault("RUST_BACKTRACE", "1")
        self.proc = subprocess.Popen([str(self.binary), "--config", str(self.config_path)],
                                     stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                     env=env)
        logf.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"gateway exited with {self.proc.returncode} during start-up; "
                                     f"config:\n{self.config_text()}\nlog:\n{self.log_tail()}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.proc.kill()
        raise AssertionError(f"gateway did not accept on {self.port} within {timeout}s; log:\n{self.log_tail()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0, expect_rc: Optional[int] = 0) -> int:
        """Signal the gateway and wait; asserts the exit status (None: don't check)."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            rc = self.proc.returncode
            self.returncodes.append(rc)
            if expect_rc is not None:
                raise AssertionError(f"gateway had already exited with {rc} before {signal.Signals(sig).name}; "
                                     f"log:\n{self.log_tail()}")
            return rc
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"gateway did not exit within {timeout}s of {signal.Signals(sig).name}; "
                                 f"log:\n{self.log_tail()}")
        self.returncodes.append(rc)
        if expect_rc is not None:
            assert rc == expect_rc, (f"gateway exit status {rc} after {signal.Signals(sig).name}, "
                                     f"expected {expect_rc}; log:\n{self.log_tail()}")
        return rc

    def kill(self) -> int:
        return self.stop(signal.SIGKILL, expect_rc=None)

    def restart(self, sig: int = signal.SIGTERM) -> "Gateway":
        if sig == signal.SIGKILL:
            self.kill()
        else:
            self.stop(sig)
        return self.start()

    # -- helpers ---------------------------------------------------------------------
    def client(self, **kw) -> NfsClient:
        return NfsClient(self.host, self.port, **kw)

    def mount_url(self, path: str = "/") -> str:
        if not path.startswith("/"):
            path = "/" + path
        url = f"nfs://127.0.0.1{path}?version=3&nfsport={self.port}&mountport={self.port}"
        # libnfs splits a file URL into export (dirname) and file; for a file directly
        # under "/" the export becomes "" and libnfs's nested-mount discovery refuses
        # it client-side ("Export is empty") with any server. Files deeper down, and
        # directory listings, keep the discovery (and so MOUNT EXPORT) in play.
        if path != "/" and path.count("/") == 1:
            url += "&auto-traverse-mounts=0"
        return url

    def rss_kib(self) -> int:
        return rss_kib(self.proc.pid)

    # -- s3 --------------------------------------------------------------------------
    @property
    def bucket(self) -> str:
        assert self.s3 is not None, "not an s3 gateway"
        return self.s3["bucket"]

    @property
    def s3_prefix(self) -> str:
        return (self.s3 or {}).get("prefix", "")

    def s3_client(self, **kw):
        """boto3 client straight to the S3 server (bypassing any fault proxy)."""
        if self.garage is not None:
            return self.garage.client(**kw)
        from s3server import client as s3client
        return s3client(self.s3_endpoint_direct or self.s3["endpoint"], **kw)


class RdmaGateway(Gateway):
    """A gateway that also serves RPC-over-RDMA (soft); `client()` and `mount_url()` go
    through a bridge so every NFS call of a test crosses the RDMA transport."""

    def __init__(self, *a, **kw):
        self.rdma_port = free_rdma_port()
        extra = dict(kw.pop("extra", None) or {})
        extra["rdma"] = {"provider": "soft", "listen": f"127.0.0.1:{self.rdma_port}"}
        super().__init__(*a, extra=extra, **kw)
        self.bridge: Optional[Bridge] = None

    def start(self, timeout: float = 20.0) -> "Gateway":
        super().start(timeout)
        self.wait_rdma_listener(timeout)
        if self.bridge is None:
            self.bridge = Bridge(self.workdir, self.rdma_port)
        return self

    def wait_rdma_listener(self, timeout: float) -> None:
        """The gateway binds its TCP port before its soft RDMA listener (the abstract Unix
        socket `@nfsgw-soft/ADDR`, engine/src/fabric/soft/cm.rs), so a TCP accept is no
        proof the bridge can connect yet: wait until the kernel lists the name."""
        name = f"@nfsgw-soft/127.0.0.1:{self.rdma_port}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open("/proc/net/unix") as f:
                if any(line.rstrip().endswith(" " + name) for line in f):
                    return
            if self.proc is not None and self.proc.poll() is not None:
                break
            time.sleep(0.01)
        raise AssertionError(f"soft RDMA listener {name} not bound within {timeout}s; "
                             f"log:\n{self.log_tail()}")

    def client(self, **kw) -> NfsClient:
        return NfsClient(self.host, self.bridge.port, **kw)

    def mount_url(self, path: str = "/") -> str:
        return super().mount_url(path).replace(f"port={self.port}", f"port={self.bridge.port}")

    def stop(self, *a, **kw) -> int:
        return super().stop(*a, **kw)

    def close_bridge(self) -> None:
        if self.bridge is not None:
            self.bridge.stop()


def rss_kib(pid: int) -> int:
    """Resident set size of a process in KiB (VmRSS from /proc/PID/status)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def gateway_bin() -> Path:
    p = find_gateway_bin()
    if not (p.is_file() and os.access(p, os.X_OK)):
        pytest.fail(f"gateway binary not found or not executable: {p} "
                    f"(build it with `cargo build --release -p gateway` or set GATEWAY_BIN)", pytrace=False)
    return p


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """ONE moto S3 server for the whole session (started on first use)."""
    from s3server import S3Server
    srv = S3Server(tmp_path_factory.mktemp("moto"))
    # a port from this worker's range (free_port), not one the kernel picked
    srv.port = free_port()
    srv.endpoint = f"http://{srv.host}:{srv.port}"
    try:
        srv.start()
    except (FileNotFoundError, RuntimeError) as e:
        pytest.fail(f"cannot start the S3 server: {e}", pytrace=False)
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def garage_cluster(tmp_path_factory):
    """ONE three-node Garage cluster (rf=3) for the whole session; skips without the binary."""
    from garage import SKIP_REASON, GarageCluster, garage_bin
    if garage_bin() is None:
        pytest.skip(SKIP_REASON)
    g = GarageCluster(tmp_path_factory.mktemp("garage"))
    try:
        g.start()
    except RuntimeError as e:
        g.stop()
        pytest.fail(f"cannot start the Garage cluster: {e}", pytrace=False)
    yield g
    g.stop()
    # buckets are not emptied one by one (Garage deletes 10,000 keys in about a minute)
    shutil.rmtree(g.workdir, ignore_errors=True)


@pytest.fixture
def s3_bucket(s3_server, request):
    """A fresh, empty bucket; emptied and deleted at teardown."""
    name = s3_server.new_bucket(request.node.name[:20])
    yield name
    s3_server.empty_bucket(name)


@pytest.fixture
def s3(s3_server):
    """A boto3 client to the session's S3 server."""
    return s3_server.client()


def handle_key_file(wd: Path) -> str:
    """A fresh `backend.s3.handle_key_file` in `wd`, for a gateway on a bucket of its own.

    Without it an s3 gateway on a fresh bucket agrees on the handle key through the
    bucket and waits `SETTLE` (2 s, gateway/src/backend/s3/handlekey.rs) before its
    listing decides: 2 s of each [s3]/[garage] test's setup, most of the garage group's
    setup time (tests/run-e2e.sh's parallel pass waits for that one worker). Agreement
    through the bucket is what test_s3_handles.py and test_garage.py check, with
    configurations of their own (`s3={...}`), which this leaves as they are; a restart of
    the same `Gateway` keeps its table, so the same key."""
    p = wd / "handle.key"
    p.write_text(os.urandom(32).hex() + "\n")
    p.chmod(0o600)
    return str(p)


@pytest.fixture
def gw_factory(gateway_bin, tmp_path, request):
    made: list = []
    buckets: list = []
    garage_buckets: list = []   # left in place: the session's cluster is deleted at its end

    def make(backend: str = "fs", exports: Optional[list] = None, tcp: Optional[dict] = None,
             start: bool = True, **kw) -> Gateway:
        wd = tmp_path / f"gw{len(made)}"
        wd.mkdir()
        direct = None
        garage = None
        if backend == "garage":
            garage = request.getfixturevalue("garage_cluster")
            backend = "s3"
            if kw.get("s3") is None:
                b = garage.new_bucket(request.node.name[:20])
                garage_buckets.append(b)
                kw["s3"] = garage.gateway_s3_config(b, handle_key_file=handle_key_file(wd))
        elif backend.split("+")[0] == "s3":
            srv = request.getfixturevalue("s3_server")
            direct = srv.endpoint
            if kw.get("s3") is None:
                b = srv.new_bucket(request.node.name[:20])
                buckets.append(b)
                kw["s3"] = srv.gateway_s3_config(b, handle_key_file=handle_key_file(wd))
        if backend.endswith("+rdma"):
            g = RdmaGateway(gateway_bin, wd, backend=backend[:-len("+rdma")], exports=exports, tcp=tcp, **kw)
        else:
            g = Gateway(gateway_bin, wd, backend=backend, exports=exports, tcp=tcp, **kw)
        g.s3_endpoint_direct = direct
        g.garage = garage
        made.append(g)
        if start:
            g.start()
        return g

    errors: list = []

    def stop_all() -> None:
        """Stops every gateway made (idempotent): fixtures that must outlive the gateways'
        shutdown flush (the s3 fault proxy) call it before they go away."""
        for g in made:
            if isinstance(g, RdmaGateway):
                g.close_bridge()
        for g in made:
            if g.alive():
                try:
                    g.stop()
                except AssertionError as e:
                    errors.append(str(e))

    make.stop_all = stop_all
    make.made = made
    yield make
    stop_all()
    if buckets:
        srv = request.getfixturevalue("s3_server")
        for b in buckets:
            srv.empty_bucket(b)
    if errors:
        pytest.fail("gateway shutdown failed:\n" + "\n".join(errors), pytrace=False)


@pytest.fixture
def s3_proxy(s3_server, gw_factory):
    """A fault-injecting HTTP proxy in front of the session's S3 server. At teardown the
    rules are cleared and the test's gateways stopped (their shutdown flush may need the
    proxy) before the proxy goes."""
    from s3proxy import FaultProxy
    p = FaultProxy((s3_server.host, s3_server.port)).start()
    yield p
    p.clear()
    gw_factory.stop_all()
    p.stop()


def pytest_generate_tests(metafunc):
    if "backend" in metafunc.fixturenames:
        params = ["fs", "memory", "s3"]
        if os.environ.get("E2E_NO_S3") == "1":   # a machine without moto: tests/README.md
            params.remove("s3")
        # garage: a real three-node cluster (skipped, with the reason, without the binary)
        if os.environ.get("NFSGW_GARAGE") != "0":
            params.append(pytest.param("garage", marks=pytest.mark.garage))
        if getattr(metafunc.module, "OVER_RDMA", False):
            params.append("fs+rdma")
        metafunc.parametrize("backend", params, indirect=True)
    if "fs_backend" in metafunc.fixturenames:
        params = ["fs"]
        if getattr(metafunc.module, "OVER_RDMA", False):
            params.append("fs+rdma")
        metafunc.parametrize("fs_backend", params, indirect=True)


@pytest.fixture
def fs_backend(request) -> str:
    return request.param


@pytest.fixture
def backend(request) -> str:
    return request.param


@pytest.fixture
def gw(gw_factory, backend) -> Gateway:
    return gw_factory(backend=backend)


@pytest.fixture
def gw_fs(gw_factory, fs_backend) -> Gateway:
    return gw_factory(backend=fs_backend)
