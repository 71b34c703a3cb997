"""Running as a service (README "Running as a service"): the shipped systemd unit is
valid, and the gateway speaks systemd's notification protocol to $NOTIFY_SOCKET:
READY=1 once it serves, WATCHDOG=1 pings while its reactors run, STOPPING=1 at SIGTERM."""

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import Gateway, find_gateway_bin

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "configs" / "nfsgw.service"


def test_unit_file_verifies(tmp_path):
    exe = shutil.which("systemd-analyze")
    assert exe, "systemd-analyze missing: tests/setup.sh installs systemd"
    text = UNIT.read_text()
    assert "Restart=on-failure" in text and "Type=notify" in text and "WatchdogSec=" in text
    # Point the unit at this build so verify can check the executables exist.
    unit = tmp_path / "nfsgw.service"
    unit.write_text(text.replace("/usr/local/bin/nfsgw", str(find_gateway_bin())))
    r = subprocess.run([exe, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    # No warnings either (unknown keys, keys in the wrong section).
    noise = [l for l in (r.stdout + r.stderr).splitlines() if "nfsgw.service" in l]
    assert not noise, noise


def test_sd_notify_ready_watchdog_stopping(tmp_path, monkeypatch):
    path = str(tmp_path / "notify.sock")
    rx = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    rx.bind(path)
    rx.settimeout(10)
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    monkeypatch.setenv("WATCHDOG_USEC", "400000")  # ping every 0.2 s
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    g = Gateway(find_gateway_bin(), tmp_path / "gw", backend="fs").start()
    got = []
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and got.count("WATCHDOG=1") < 3:
            got.append(rx.recv(256).decode())
        assert got[0] == "READY=1", got
        assert got.count("WATCHDOG=1") >= 3, got
    finally:
        g.stop()
    rx.settimeout(2)
    rest = []
    try:
        while True:
            rest.append(rx.recv(256).decode())
    except socket.timeout:
        pass
    assert "STOPPING=1" in rest, rest
    rx.close()
