"""The floor server (tools/src/bin/nfs-floor): the benchmarks' reference must keep
answering the clients they use — bench's verified reads and libnfs (fio's nfs engine;
here its utilities) — so a change to the wire crates cannot silently break it."""

import os
import shutil
import socket
import struct
import subprocess

import pytest

from conftest import RELEASE, find_bench_bin


def floor_bin():
    return os.environ.get("FLOOR_BIN") or str(RELEASE / "nfs-floor")


@pytest.fixture
def floor():
    if not os.path.exists(floor_bin()):
        pytest.fail(f"no nfs-floor at {floor_bin()} (cargo build --release -p tools)", pytrace=False)
    p = subprocess.Popen([floor_bin(), "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert line.startswith("listening on 127.0.0.1:"), line
        yield int(line.rsplit(":", 1)[1])
        assert p.poll() is None, "the floor died"
    finally:
        p.kill()
        p.wait()


def test_bench_verified_read(floor):
    """bench mounts (MOUNT EXPORT + MNT), creates and fills two files (CREATE, WRITE,
    COMMIT), then reads them at QD4 and checks every byte."""
    out = subprocess.run(
        [str(find_bench_bin()), "--target", f"tcp://127.0.0.1:{floor}", "--workload", "randread",
         "--bs", "1m", "--qd", "4", "--files", "2", "--file-size", "4m", "--ops", "64", "--verify",
         "--cpus", str(min(os.sched_getaffinity(0)))],
        capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert " 0 failure(s)" in out.stdout + out.stderr


@pytest.mark.skipif(shutil.which("nfs-cp") is None, reason="libnfs-utils missing: run tests/setup.sh")
def test_libnfs_roundtrip(floor, tmp_path):
    """libnfs's mount (MNT, FSINFO, GETATTR), open-for-write (LOOKUP, CREATE, ACCESS) and
    reads: the calls fio's nfs engine makes."""
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(3 * (1 << 20) + 5))
    # A file directly under the export: libnfs's mount discovery must be off (conftest).
    url = f"nfs://127.0.0.1/f.bin?version=3&nfsport={floor}&mountport={floor}&auto-traverse-mounts=0"
    subprocess.run(["nfs-cp", str(src), url], check=True, timeout=30, capture_output=True)
    back = subprocess.run(["nfs-cat", url], check=True, timeout=30, capture_output=True).stdout
    assert back == src.read_bytes()


def rpc_call(sock, body):
    sock.sendall(struct.pack(">I", 0x80000000 | len(body)) + body)
    mark = struct.unpack(">I", sock.recv(4, socket.MSG_WAITALL))[0]
    return sock.recv(mark & 0x7FFFFFFF, socket.MSG_WAITALL)


def test_garbage_answered_and_survived(floor):
    """A READ whose arguments are cut short is GARBAGE_ARGS (RFC 5531 §9); an absurd
    record length closes only that connection."""
    head = struct.pack(">IIIIII", 7, 0, 2, 100003, 3, 6) + struct.pack(">IIII", 0, 0, 0, 0)
    with socket.create_connection(("127.0.0.1", floor), timeout=5) as s:
        reply = rpc_call(s, head + struct.pack(">I", 8))
        assert struct.unpack(">IIIIII", reply[:24]) == (7, 1, 0, 0, 0, 4)
    with socket.create_connection(("127.0.0.1", floor), timeout=5) as s:
        s.sendall(struct.pack(">I", 0x80000000 | (1 << 30)))
        assert s.recv(4) == b""
    with socket.create_connection(("127.0.0.1", floor), timeout=5) as s:
        null = struct.pack(">IIIIII", 9, 0, 2, 100003, 3, 0) + struct.pack(">IIII", 0, 0, 0, 0)
        assert struct.unpack(">IIIIII", rpc_call(s, null)[:24]) == (9, 1, 0, 0, 0, 0)
