"""The audit log (`[audit]`, docs/operations.md "Audit log") of the real gateway binary,
over NFSv3 and MOUNT with the suite's own client: every namespace or permission change
appears exactly once with who, what and where; a refused access appears once; what
changes nothing appears not at all; the file rotates by size; SIGHUP turns it on and
off; the metrics count it. NFSv4.1 is gateway/tests/audit.rs's (an in-process client
with sessions)."""

import json
import os
import time
import urllib.request

import nfsclient as N
from conftest import free_port
from test_reload import hup


def lines(path, n, timeout=5.0):
    """The log's JSON lines once there are at least `n` (the writer drains every ~20 ms)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            text = path.read_text()
        except FileNotFoundError:
            text = ""
        got = [json.loads(l) for l in text.splitlines()]
        if len(got) >= n or time.monotonic() > deadline:
            return got
        time.sleep(0.02)


def one(log, event, path):
    hits = [l for l in log if l["event"] == event and l.get("path") == path]
    assert len(hits) == 1, f"{event} {path}: {hits} in {log}"
    return hits[0]


def audited(gw_factory, tmp_path, **audit):
    path = tmp_path / "logs" / "audit.log"
    port = free_port()
    cfg = {"enabled": True, "path": str(path)}
    cfg.update(audit)
    g = gw_factory("fs", extra={"audit": cfg, "stats": {"listen": f"127.0.0.1:{port}"}})
    return g, path, port


def metric(port, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    for l in text.splitlines():
        if l.startswith(name + " "):
            return float(l.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def test_every_nfs3_change_and_refusal_is_logged_once(gw_factory, tmp_path):
    g, path, port = audited(gw_factory, tmp_path)
    with N.NfsClient(port=g.port, gids=[0, 42]) as c:
        root = c.mount("/")
        d = c.mkdir(root, "d", 0o777).check().fh
        f = c.create(d, "f", 0o644).check().fh
        c.symlink(d, "l", "f").check()
        c.mknod(d, "p", ftype=N.NF3FIFO, mode=0o644).check()
        c.setattr(f, mode=0o600).check()
        c.setattr(f, uid=1000, gid=1000).check()
        c.setattr(f, size=3).check()
        c.setattr(f, mtime="server").check()      # times alone: not logged
        c.lookup(d, "f").check()
        c.getattr(f).check()
        c.write(f, 0, b"abc").check()
        c.rename(d, "f", d, "g").check()
        c.remove(d, "l").check()
        c.remove(d, "p").check()
        e = c.mkdir(d, "e").check().fh
        assert e
        c.rmdir(d, "e").check()
        p = c.mkdir(root, "p", 0o755).check().fh
        c.set_cred(uid=1000, gid=1000, gids=[1000])
        assert c.create(p, "x", 0o644).status == N.NFS3ERR_ACCES
    log = lines(path, 14)
    for l in log:
        assert l["proto"] == "nfs3" and l["client"].startswith("127.0.0.1:"), l
        assert l["time"].endswith("Z"), l
    assert one(log, "mkdir", "d")["gids"] == [0, 42]
    assert one(log, "mkdir", "d")["export"] == "/"
    assert one(log, "create", "d/f")["proc"] == "CREATE"
    one(log, "symlink", "d/l")
    assert one(log, "mknod", "d/p")["proc"] == "MKNOD"
    sets = [l for l in log if l["event"] == "setattr"]
    assert [(s.get("mode"), s.get("owner"), s.get("group"), s.get("size")) for s in sets] == [
        ("0600", None, None, None), (None, 1000, 1000, None), (None, None, None, 3)], sets
    assert all(s["path"] == "d/f" and s["fh"] for s in sets), sets
    assert one(log, "rename", "d/f")["to"] == "d/g"
    one(log, "remove", "d/l")
    one(log, "remove", "d/p")
    one(log, "mkdir", "d/e")
    assert one(log, "rmdir", "d/e")["proc"] == "RMDIR"
    one(log, "mkdir", "p")
    refused = [l for l in log if l["event"] == "refused"]
    assert len(refused) == 1, refused
    r = refused[0]
    assert (r["uid"], r["status"], r["proc"], r["right"]) == (1000, "ACCES", "CREATE",
                                                            "modify directory"), r
    assert len(log) == 14, log
    assert metric(port, "nfsgw_audit_lines_total") == 14
    assert metric(port, "nfsgw_audit_dropped_total") == 0


def test_a_read_only_export_refusal_and_a_mount_refusal(gw_factory, tmp_path):
    g, path, _ = audited(gw_factory, tmp_path)
    g.exports = [{"path": "/", "clients": ["127.0.0.0/8"], "access": "ro", "squash": "none"}]
    hup(g)
    with N.NfsClient(port=g.port) as c:
        root = c.mount("/")
        assert c.mkdir(root, "nope").status == N.NFS3ERR_ROFS
    log = lines(path, 1)
    assert [(l["event"], l["status"], l["right"]) for l in log] == [
        ("refused", "ROFS", "write on a read-only export")], log


def test_rotation_keeps_the_newest_files(gw_factory, tmp_path):
    g, path, port = audited(gw_factory, tmp_path, max_mib=1, keep=1)
    with N.NfsClient(port=g.port) as c:
        root = c.mount("/")
        f = c.create(root, "f", 0o644).check().fh
        # ~250 bytes a line: 16,000 chmods make ~4 MiB, three rotations at least.
        calls = [(N.NFSPROC3_SETATTR, N.a_setattr(f, None, mode=0o600 + (i % 2)), N.d_wcc)
                 for i in range(16000)]
        for res in c.pipeline(calls):
            assert res.status == 0
    deadline = time.monotonic() + 10
    while metric(port, "nfsgw_audit_lines_total") < 16001 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert metric(port, "nfsgw_audit_lines_total") == 16001
    files = sorted(p.name for p in path.parent.iterdir())
    assert files == ["audit.log", "audit.log.1"], files
    for p in path.parent.iterdir():
        assert p.stat().st_size <= 1 << 20, (p, p.stat().st_size)
    # The newest line is in audit.log, and every line of every file is whole JSON.
    total = 0
    for p in path.parent.iterdir():
        total += sum(1 for l in p.read_text().splitlines() if json.loads(l))
    assert 4000 < total < 16001   # older files were dropped
    assert json.loads(path.read_text().splitlines()[-1])["event"] == "setattr"


def test_reload_turns_it_off_and_on(gw_factory, tmp_path):
    g, path, _ = audited(gw_factory, tmp_path)
    with N.NfsClient(port=g.port) as c:
        root = c.mount("/")
        c.mkdir(root, "a").check()
        assert len(lines(path, 1)) == 1
        g.extra["audit"]["enabled"] = False
        assert "audit log off" in hup(g)
        c.mkdir(root, "b").check()
        g.extra["audit"]["enabled"] = True
        assert "audit log on" in hup(g)
        c.mkdir(root, "c").check()
    log = lines(path, 2)
    assert [l["path"] for l in log] == ["a", "c"], log


def test_a_bad_audit_path_refuses_to_start(gw_factory, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    g = gw_factory("fs", start=False, extra={"audit": {"enabled": True,
                                                        "path": str(blocker / "audit.log")}})
    g.proc = None
    import subprocess
    out = subprocess.run([str(g.binary), "--config", str(g.config_path)], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode != 0
    assert "audit.path" in out.stderr and "audit.enabled = false" in out.stderr, out.stderr


def test_a_log_that_cannot_be_written_drops_counts_and_says_so(gw_factory, tmp_path):
    """/dev/full takes the open and refuses every write (ENOSPC): clients are answered
    as usual, each lost line is counted, the gateway's log says why."""
    port = free_port()
    g = gw_factory("fs", extra={"audit": {"enabled": True, "path": "/dev/full"},
                                "stats": {"listen": f"127.0.0.1:{port}"}})
    with N.NfsClient(port=g.port) as c:
        root = c.mount("/")
        for i in range(5):
            c.mkdir(root, f"d{i}").check()
    deadline = time.monotonic() + 5
    while metric(port, "nfsgw_audit_dropped_total") < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert metric(port, "nfsgw_audit_dropped_total") == 5
    assert metric(port, "nfsgw_audit_lines_total") == 0
    assert "audit: cannot write the log" in g.log_path.read_text(errors="replace")


def test_a_stalled_writer_drops_counts_and_says_so_while_calls_are_answered(gw_factory, tmp_path):
    """The log is a FIFO opened for reading but never read, its pipe filled before the
    gateway starts: the writer thread's first write(2) blocks, as on a hung disk, before
    any line was dropped. The queue (16 lines) fills; every further line is dropped,
    counted and reported in the gateway's log by the worker that dropped it (the stuck
    writer cannot), while 1,000 CREATEs (each a line) and 1,000 GETATTRs are all
    answered. Once the FIFO is read again the writer resumes and every line is
    accounted for: written + dropped = changes made."""
    fifo = tmp_path / "audit.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    filler = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    try:
        while True:
            os.write(filler, b"#" * 4096)
    except BlockingIOError:
        os.close(filler)
    try:
        port = free_port()
        g = gw_factory("fs", extra={"audit": {"enabled": True, "path": str(fifo), "queue": 16},
                                    "stats": {"listen": f"127.0.0.1:{port}"}})
        with N.NfsClient(port=g.port, timeout=10.0) as c:
            root = c.mount("/")
            creates = [(N.NFSPROC3_CREATE, N.a_create(root, f"f{i}"), N.d_create)
                       for i in range(1000)]
            made = c.pipeline(creates)
            assert [r.status for r in made] == [0] * 1000
            getattrs = [(N.NFSPROC3_GETATTR, N.a_getattr(r.fh), N.d_getattr) for r in made]
            assert [r.status for r in c.pipeline(getattrs)] == [0] * 1000
            # Still stuck: nothing read the FIFO, so nearly every line was dropped (the
            # writer's 8 KiB buffer and the queue hold 60 lines of ~200 bytes at most).
            dropped = metric(port, "nfsgw_audit_dropped_total")
            assert dropped >= 900, dropped
            assert metric(port, "nfsgw_audit_lines_total") == 0
        assert "audit: queue full, lines dropped" in g.log_path.read_text(errors="replace")
        # Drain: the writer's blocked write completes and the queue empties.
        deadline = time.monotonic() + 10
        total = 0
        while time.monotonic() < deadline:
            try:
                os.read(reader, 1 << 20)
            except BlockingIOError:
                pass
            total = (metric(port, "nfsgw_audit_lines_total")
                     + metric(port, "nfsgw_audit_dropped_total"))
            if total == 1000:
                break
            time.sleep(0.05)
        assert total == 1000
    finally:
        os.close(reader)
