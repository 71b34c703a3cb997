"""Supervision policy (README "Failures and supervision"), with the gateway's test-only
fault hooks (NFSGW_TEST_HOOKS=1: an NFS NULL call with XID 0xDEAD000n triggers hook n):

- a panic while the reactor classifies a call costs that connection only;
- a panic inside a procedure on a worker answers SYSTEM_ERR for that call only;
- a reactor or worker thread dying outside a request stops the process with status 70
  and a FATAL log line, after flushing; a restart serves the old handles and data;
- with hooks off (the default) those XIDs are ordinary NULL calls.
"""

import os
import socket
import time

import pytest

import nfsclient as N
import statsutil
from conftest import Gateway, find_gateway_bin, free_port

HOOK = 0xDEAD0000
SYSTEM_ERR = 5
EXIT_FATAL = 70


def gateway(tmp_path, monkeypatch, hooks=True, stats_port=None):
    binary = find_gateway_bin()
    if hooks:
        monkeypatch.setenv("NFSGW_TEST_HOOKS", "1")
    else:
        monkeypatch.delenv("NFSGW_TEST_HOOKS", raising=False)
    extra = {"stats": {"listen": f"127.0.0.1:{stats_port}"}} if stats_port else None
    return Gateway(binary, tmp_path, backend="fs", extra=extra).start()


def null_with_xid(c, xid):
    c.send_record(c.build_call(N.NFS_PROGRAM, N.NFS_V3, 0, b"", xid=xid)[1])


def connection_closed(c, timeout=5.0):
    """True when the server closed the connection (EOF or reset) without a reply."""
    c.sock.settimeout(timeout)
    try:
        return c.sock.recv(4) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def good_client_works(g):
    with g.client() as c:
        assert c.null().accept_stat == N.SUCCESS
        root = c.mount("/")
        c.getattr(root).check("GETATTR")


def test_reactor_request_panic_costs_only_its_connection(tmp_path, monkeypatch):
    port = free_port()
    g = gateway(tmp_path, monkeypatch, stats_port=port)
    try:
        bystander = g.client()
        root = bystander.mount("/")
        bad = g.client()
        null_with_xid(bad, HOOK | 1)
        assert connection_closed(bad), "the connection whose call panicked must be closed"
        bad.close()
        # The other connection, opened before, is untouched; new ones work.
        bystander.getattr(root).check("GETATTR")
        good_client_works(g)
        assert g.alive()
        log = g.log_path.read_text(errors="replace")
        assert "panicked" in log and "closing a TCP connection whose call panicked" in log, log[-3000:]
        m = statsutil.scrape(port)
        assert m.sum("nfsgw_requests_panicked_total") == 1
        bystander.close()
    finally:
        g.stop()


def test_worker_request_panic_answers_system_err(tmp_path, monkeypatch):
    g = gateway(tmp_path, monkeypatch)
    try:
        with g.client() as c:
            root = c.mount("/")
            null_with_xid(c, HOOK | 2)
            r = c.recv_reply(HOOK | 2)
            assert r.reply_stat == N.MSG_ACCEPTED and r.accept_stat == SYSTEM_ERR, r
            # Same connection, next call: served.
            c.getattr(root).check("GETATTR")
        good_client_works(g)
        assert "procedure panicked; answering SYSTEM_ERR" in g.log_path.read_text(errors="replace")
    finally:
        g.stop()


def wait_exit(g, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if g.proc.poll() is not None:
            return g.proc.returncode
        time.sleep(0.05)
    return None


@pytest.mark.parametrize("hook,thread", [(3, "reactor-0"), (4, "worker-")])
def test_thread_death_stops_the_process_and_restart_is_safe(tmp_path, monkeypatch, hook, thread):
    g = gateway(tmp_path, monkeypatch)
    with g.client() as c:
        root = c.mount("/")
        fh = c.create(root, "kept").check("CREATE").fh
        payload = b"committed before the crash\n" * 100
        c.write(fh, 0, payload, stable=N.UNSTABLE).check("WRITE")
        c.commit(fh, 0, 0).check("COMMIT")
        null_with_xid(c, HOOK | hook)
        rc = wait_exit(g)
    log = g.log_path.read_text(errors="replace")
    assert rc == EXIT_FATAL, f"exit status {rc}, expected {EXIT_FATAL}; log:\n{log[-3000:]}"
    assert f"FATAL: thread {thread}" in log and "died: panicked" in log, log[-3000:]
    g.returncodes.append(rc)
    # What a supervisor does: start it again. Old handles and committed data survive.
    g.start()
    try:
        with g.client() as c:
            c.mount("/")
            assert c.read(fh, 0, len(payload)).check("READ").data == payload
    finally:
        g.stop()


def test_hooks_are_off_by_default(tmp_path, monkeypatch):
    g = gateway(tmp_path, monkeypatch, hooks=False)
    try:
        with g.client() as c:
            for n in (1, 2, 3, 4):
                null_with_xid(c, HOOK | n)
                r = c.recv_reply(HOOK | n)
                assert r.accept_stat == N.SUCCESS
        time.sleep(0.3)
        assert g.alive()
        assert "panicked" not in g.log_path.read_text(errors="replace")
    finally:
        g.stop()


def test_sigterm_with_more_finished_calls_than_the_completion_ring_exits(tmp_path, monkeypatch):
    """Shutdown stops the reactors first; workers still finishing calls used to spin for
    ever on a full completion ring nobody drained (SIGTERM hung before staged writes
    were flushed). 40 slow calls (hook 5: half a second each on a worker) fill the job
    ring (16) and the workers (4); SIGTERM while they run: the 20 completions that no
    reactor will drain must not hang the exit (seen hanging with the alive check
    removed from worker::push_done)."""
    g = gateway(tmp_path, monkeypatch)
    g.stop()
    g.backend_opts.update({"ring_depth": 16, "workers": 4})
    g.write_config()
    g.start()
    with g.client() as c:
        root = c.mount("/")
        fh = c.create(root, "kept").check("CREATE").fh
        c.write(fh, 0, b"durable", N.UNSTABLE).check("WRITE")
        for _ in range(40):
            null_with_xid(c, HOOK | 5)
        time.sleep(0.2)
        g.stop(timeout=30)   # asserts exit status 0 within 30 s
    log = g.log_path.read_text(errors="replace")
    assert "clean shutdown" in log, log[-2000:]
    g.start()
    try:
        with g.client() as c:
            c.mount("/")
            assert c.read(fh, 0, 7).check("READ").data == b"durable"
    finally:
        g.stop()
