"""README "Two commands", run verbatim: the gateway on configs/default.toml, then every
libnfs command and every bench line of that section as printed, in a fresh directory.
Only the port numbers change (so the test can run beside other gateways), the
`cargo run ... --` prefixes become the built binaries, and bench's --duration is
shortened. If the README or the shipped config drift apart, this fails."""

import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import REPO, find_bench_bin, free_port


def section(title: str) -> str:
    text = (REPO / "README.md").read_text()
    start = text.index(f"## {title}\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def sh_blocks(text: str) -> list:
    return re.findall(r"```sh\n(.*?)```", text, flags=re.S)


def wait_port(port: int, proc, log: Path, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"exited with {proc.returncode}:\n{log.read_text(errors='replace')}"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listening on {port}:\n{log.read_text(errors='replace')}")


def test_two_commands_verbatim(gateway_bin, tmp_path):
    blocks = sh_blocks(section("Two commands"))
    assert blocks[0].strip() == "cargo run --release -p gateway -- --config configs/default.toml"
    nfs, rdma, bridge = free_port(), free_port(), free_port()

    def ports(s: str) -> str:
        # Longest first: 20049 and 12049 contain 2049.
        return s.replace("20049", str(rdma)).replace("12049", str(bridge)).replace("2049", str(nfs))

    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "default.toml").write_text(
        ports((REPO / "configs" / "default.toml").read_text()))
    log = tmp_path / "gateway.log"
    gw = subprocess.Popen([str(gateway_bin), "--config", "configs/default.toml"], cwd=tmp_path,
                          stdin=subprocess.DEVNULL, stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    try:
        wait_port(nfs, gw, log)
        libnfs = blocks[1]
        assert "nfs-cp" in libnfs and "nfs-ls" in libnfs and "nfs-cat" in libnfs
        out = []
        for line in libnfs.strip().splitlines():
            r = subprocess.run(["bash", "-c", ports(line)], cwd=tmp_path, capture_output=True,
                               text=True, timeout=60)
            assert r.returncode == 0, (line, r.stdout, r.stderr, log.read_text(errors="replace"))
            out.append(r.stdout)
        joined = "\n".join(out)
        assert "hello.txt" in joined and joined.count("hello, object store") >= 2, joined
        assert (tmp_path / "data" / "hello.txt").read_text() == "hello, object store\n"

        # The kernel mounts need root and a kernel client: checked for the export name only.
        mounts = blocks[2]
        assert "127.0.0.1:/data " in mounts

        if os.environ.get("README_SKIP_BENCH"):
            return
        bench = str(find_bench_bin())
        if not Path(bench).exists():
            pytest.skip("bench binary not built (cargo build --release -p bench)")
        assert "-p bench" in blocks[3] and "--bridge-listen" in blocks[3]
        for line in blocks[3].strip().splitlines():
            cmd = ports(line).split("#")[0].strip()
            cmd = cmd.replace("cargo run --release -p bench --", bench)
            cmd = re.sub(r"--duration \d+", "--duration 1", cmd)
            if cmd.endswith("&"):  # the bridge: start it, wait for its port
                p = subprocess.Popen(["bash", "-c", f"exec {cmd[:-1]}"], cwd=tmp_path,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=open(tmp_path / "bridge.log", "wb"))
                try:
                    wait_port(bridge, p, tmp_path / "bridge.log")
                except AssertionError:
                    p.kill()
                    raise
                bridge_proc = p
                continue
            r = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, capture_output=True, text=True,
                               timeout=120)
            assert r.returncode == 0, (cmd, r.stdout[-2000:], r.stderr[-2000:])
            if cmd.startswith("nfs-ls"):
                assert "hello.txt" in r.stdout, r.stdout
        bridge_proc.terminate()
        bridge_proc.wait(10)
    finally:
        gw.send_signal(signal.SIGTERM)
        assert gw.wait(60) == 0, log.read_text(errors="replace")
