"""Hostile input on the wire. One gateway (fs backend, tcp.record_timeout_s = 2) serves the
whole module; after each category a separate well-behaved client must still get correct
answers, and at the end the gateway's RSS must not have grown by more than RSS_BOUND_KIB
since warm-up. The tests run in file order (pytest's default)."""

import os
import random
import socket
import struct
import time

import pytest

import nfsclient as N
from conftest import Gateway, find_gateway_bin

RSS_BOUND_KIB = 32 * 1024
MAX_RECORD = (1 << 20) + (4 << 10)
RECORD_TIMEOUT_S = 2

state = {}


@pytest.fixture(scope="module")
def hg(tmp_path_factory):
    binary = find_gateway_bin()
    if not binary.is_file():
        pytest.fail(f"gateway binary not found: {binary}", pytrace=False)
    g = Gateway(binary, tmp_path_factory.mktemp("hostile"), backend="fs",
                tcp={"record_timeout_s": RECORD_TIMEOUT_S})
    g.start()
    yield g
    if g.alive():
        g.stop()
    else:
        pytest.fail(f"gateway died during the hostile run (status {g.proc.returncode}); log:\n{g.log_tail()}")


def good_check(g, tag=""):
    """A fresh, well-behaved client gets correct answers."""
    assert g.alive(), f"gateway died ({tag}); status {g.proc.returncode}; log:\n{g.log_tail()}"
    with g.client(timeout=10) as c:
        r = c.null()
        assert r.accept_stat == N.SUCCESS, f"{tag}: NULL -> {r}"
        root = c.mount("/")
        f = c.lookup(root, "canary").check(f"{tag}: LOOKUP canary").fh
        assert c.read(f, 0, 100).check().data == state["canary"], f"{tag}: canary data wrong"
        name = f"ok-{tag}-{random.randrange(1 << 30)}"
        nf = c.create(root, name, 0o644).check().fh
        c.write(nf, 0, b"x" * 5000, N.FILE_SYNC).check()
        assert c.read(nf, 0, 5000).check().data == b"x" * 5000
        c.remove(root, name).check()


def raw_sock(g, timeout=5.0):
    s = socket.create_connection((g.host, g.port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def expect_closed(s, within: float):
    """The server closes the connection within `within` seconds (no reply data)."""
    s.settimeout(within)
    t0 = time.monotonic()
    got = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                return time.monotonic() - t0, got
            got += b
    except ConnectionResetError:
        return time.monotonic() - t0, got
    except socket.timeout:
        raise AssertionError(f"connection still open after {within}s (received {len(got)} bytes)")
    finally:
        s.close()


def reply_of(c, payload: bytes) -> N.RpcReply:
    xid = struct.unpack(">I", payload[:4])[0]
    c.send_record(payload)
    return c.recv_reply(xid)


def nfs_call(c, proc, args, **kw):
    xid, msg = c.build_call(N.NFS_PROGRAM, N.NFS_V3, proc, args, **kw)
    return msg


def test_warmup(hg):
    c = hg.client()
    root = c.mount("/")
    state["canary"] = os.urandom(77)
    f = c.create(root, "canary", 0o644).check().fh
    c.write(f, 0, state["canary"], N.FILE_SYNC).check()
    # exercise the buffer pools: big writes/reads, directory pages, many small calls
    big = c.create(root, "warm.bin", 0o644).check().fh
    data = os.urandom(8 << 20)
    for _ in range(2):
        c.write_all(big, data, stable=N.UNSTABLE, window=8)
        c.commit(big).check()
        assert c.read_all(big) == data
    c.pipeline([(N.NFSPROC3_GETATTR, N.a_getattr(root), N.d_getattr)] * 2000, window=64)
    c.readdir_all(root, count=512)
    c.close()
    # a few rounds of the hostile patterns so lazily-grown structures reach steady state
    for _ in range(20):
        s = raw_sock(hg)
        s.sendall(os.urandom(64))
        s.close()
    time.sleep(0.5)
    good_check(hg, "warmup")
    state["rss0"] = hg.rss_kib()


def test_truncated_records(hg):
    # a record mark promising more than is sent, then EOF
    for n in (1, 100, 4000, 70000):
        s = raw_sock(hg)
        s.sendall(struct.pack(">I", 0x80000000 | n) + os.urandom(n // 2))
        s.close()
    # a well-framed record holding a truncated RPC header: no successful reply, no crash
    c = hg.client()
    _, full = c.build_call(N.NFS_PROGRAM, 3, N.NFSPROC3_GETATTR, N.a_getattr(b"x" * 8))
    for cut in (0, 3, 4, 8, 12, 20, 27, 36):
        s = raw_sock(hg, timeout=2)
        s.sendall(N.record(full[:cut]))
        s.settimeout(2)
        try:
            data = s.recv(65536)
        except (socket.timeout, ConnectionResetError):
            data = b""
        if len(data) >= 28:
            r = N.parse_reply(data[4:])
            assert not (r.reply_stat == N.MSG_ACCEPTED and r.accept_stat == N.SUCCESS), \
                f"truncated header (cut {cut}) got a SUCCESS reply"
        s.close()
    # a non-last fragment followed by EOF
    s = raw_sock(hg)
    s.sendall(N.record(full[:20], last=False))
    s.close()
    c.close()
    good_check(hg, "truncated")


def test_garbage_records(hg):
    rnd = random.Random(1)
    for i in range(50):
        s = raw_sock(hg, timeout=2)
        payload = bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 600)))
        try:
            s.sendall(N.record(payload))
            s.settimeout(0.2)
            try:
                s.recv(65536)
            except (socket.timeout, ConnectionResetError):
                pass
        except (BrokenPipeError, ConnectionResetError):
            pass
        s.close()
    # a REPLY-type message sent to the server is not answered as a call
    s = raw_sock(hg, timeout=2)
    s.sendall(N.record(struct.pack(">IIIIII", 1, N.REPLY, 0, 0, 0, 0)))
    s.settimeout(1)
    try:
        data = s.recv(65536)
    except (socket.timeout, ConnectionResetError):
        data = b""
    s.close()
    assert data == b"", f"the gateway answered a REPLY-type message: {data[:32].hex()}"
    # many pipelined calls, then a disconnect without reading any reply
    c = hg.client()
    root = c.mount("/")
    for _ in range(200):
        _, msg = c.build_call(N.NFS_PROGRAM, 3, N.NFSPROC3_READ, N.a_read(root, 0, 1 << 20))
        c.send_record(msg)
    c.close()
    # a zero-length record
    s = raw_sock(hg, timeout=2)
    s.sendall(N.record(b""))
    s.close()
    good_check(hg, "garbage")


def test_oversized_record_mark(hg):
    for n in (MAX_RECORD + 1, 16 << 20, 0x7FFFFFFF):
        for last in (True, False):
            s = raw_sock(hg)
            s.sendall(struct.pack(">I", (0x80000000 if last else 0) | n) + b"\0" * 1000)
            dt, got = expect_closed(s, 5)
            assert got == b"", f"reply data to an oversized record mark {n}"
    # many non-last fragments adding up past the limit
    s = raw_sock(hg)
    frag = b"\0" * 65536
    try:
        for _ in range((MAX_RECORD // len(frag)) + 4):
            s.sendall(N.record(frag, last=False))
    except (BrokenPipeError, ConnectionResetError):
        pass
    expect_closed(s, 5)
    # a record of exactly max_record is still fine for framing (a WRITE of wtmax fits)
    good_check(hg, "oversized")


def test_unknown_program_version_procedure(hg):
    c = hg.client()
    r = c.call(100099, 1, 0)
    assert (r.reply_stat, r.accept_stat) == (N.MSG_ACCEPTED, N.PROG_UNAVAIL), r
    r = c.call(100000, 2, 0)    # portmapper is not served
    assert (r.reply_stat, r.accept_stat) == (N.MSG_ACCEPTED, N.PROG_UNAVAIL), r
    for v in (2, 5, 0, 0xFFFFFFFF):
        r = c.call(N.NFS_PROGRAM, v, 0)
        assert (r.reply_stat, r.accept_stat, r.low, r.high) == (N.MSG_ACCEPTED, N.PROG_MISMATCH, 3, 4), \
            f"NFS version {v}: {r}"
    r = c.call(N.MOUNT_PROGRAM, 99, 0)
    assert (r.reply_stat, r.accept_stat) == (N.MSG_ACCEPTED, N.PROG_MISMATCH), r
    assert r.low <= 3 <= r.high
    for p in (22, 23, 1000, 0xFFFFFFFF):
        r = c.call(N.NFS_PROGRAM, 3, p)
        assert (r.reply_stat, r.accept_stat) == (N.MSG_ACCEPTED, N.PROC_UNAVAIL), f"NFS proc {p}: {r}"
    for p in (6, 100):
        r = c.call(N.MOUNT_PROGRAM, 3, p)
        assert (r.reply_stat, r.accept_stat) == (N.MSG_ACCEPTED, N.PROC_UNAVAIL), f"MOUNT proc {p}: {r}"
    # the connection stays usable after rejections
    assert c.null().accept_stat == N.SUCCESS
    c.close()
    good_check(hg, "unknown-prog")


def test_malformed_args(hg):
    c = hg.client()
    root = c.mount("/")
    P = N.Packer
    cases = {
        "GETATTR no args": (N.NFSPROC3_GETATTR, b""),
        "GETATTR fh len 2^31": (N.NFSPROC3_GETATTR, P().u32(0x80000000).get()),
        "GETATTR fh len past end": (N.NFSPROC3_GETATTR, P().u32(40).get() + b"\0" * 8),
        "LOOKUP no name": (N.NFSPROC3_LOOKUP, P().opaque(root).get()),
        "LOOKUP name len huge": (N.NFSPROC3_LOOKUP, P().opaque(root).u32(0xFFFFFFF0).get()),
        "READ short": (N.NFSPROC3_READ, P().opaque(root).u32(0).get()),
        "WRITE data past end": (N.NFSPROC3_WRITE, P().opaque(root).u64(0).u32(100).u32(2).u32(100).get() + b"x" * 10),
        "SETATTR bad bool": (N.NFSPROC3_SETATTR, P().opaque(root).u32(7).get() + b"\0" * 40),
        "CREATE bad mode": (N.NFSPROC3_CREATE, P().opaque(root).string("z").u32(9).get()),
        "READDIR short": (N.NFSPROC3_READDIR, P().opaque(root).u64(0).get()),
        "RENAME half": (N.NFSPROC3_RENAME, P().opaque(root).string("a").get()),
        "fh > 64 bytes": (N.NFSPROC3_GETATTR, P().opaque(b"\1" * 65).get()),
    }
    for name, (proc, args) in cases.items():
        r = c.call(N.NFS_PROGRAM, 3, proc, args)
        ok = (r.reply_stat, r.accept_stat) == (N.MSG_ACCEPTED, N.GARBAGE_ARGS)
        if name == "fh > 64 bytes" and not ok and r.accept_stat == N.SUCCESS:
            st = struct.unpack(">I", r.body[:4])[0]
            ok = st == N.NFS3ERR_BADHANDLE
        assert ok, f"{name}: expected GARBAGE_ARGS, got reply_stat={r.reply_stat} accept_stat={r.accept_stat} " \
                   f"body={r.body[:16].hex()}"
    for name, args in (("MNT no path", b""), ("MNT path len huge", N.Packer().u32(0x7FFFFFFF).get())):
        r = c.call(N.MOUNT_PROGRAM, 3, N.MOUNTPROC3_MNT, args)
        assert (r.reply_stat, r.accept_stat) == (N.MSG_ACCEPTED, N.GARBAGE_ARGS), f"{name}: {r}"
    assert c.getattr(root).check()
    c.close()
    good_check(hg, "garbage-args")


def test_rpc_version_mismatch(hg):
    c = hg.client()
    for rv in (3, 1, 0):
        xid, msg = c.build_call(N.NFS_PROGRAM, 3, 0, rpcvers=rv)
        r = reply_of(c, msg)
        assert (r.reply_stat, r.reject_stat, r.low, r.high) == (N.MSG_DENIED, N.RPC_MISMATCH, 2, 2), \
            f"rpcvers {rv}: {r}"
    c.close()
    good_check(hg, "rpcvers")


def test_bad_credentials(hg):
    c = hg.client()
    root = c.mount("/")
    bad = {
        "flavor 99": (99, b""),
        "flavor 0x7fffffff": (0x7FFFFFFF, b"abcd"),
        "AUTH_SYS truncated": (N.AUTH_SYS, b"\0\0\0\0"),
        "AUTH_SYS machinename past end": (N.AUTH_SYS, N.Packer().u32(0).u32(1000).get()),
        "AUTH_SYS 17 gids": (N.AUTH_SYS, N.auth_sys_body(1, 1, list(range(17)))),
        "AUTH_SYS machinename 300": (N.AUTH_SYS, N.auth_sys_body(1, 1, machine="m" * 300)),
    }
    for name, cred in bad.items():
        for prog, vers, proc, args in ((N.NFS_PROGRAM, 3, N.NFSPROC3_GETATTR, N.a_getattr(root)),
                                       (N.MOUNT_PROGRAM, 3, N.MOUNTPROC3_MNT, N.Packer().string("/").get())):
            r = c.call(prog, vers, proc, args, cred=cred)
            assert (r.reply_stat, r.reject_stat) == (N.MSG_DENIED, N.AUTH_ERROR), f"{name} prog {prog}: {r}"
            assert r.auth_stat in (N.AUTH_BADCRED, N.AUTH_REJECTEDCRED, N.AUTH_TOOWEAK), f"{name}: {r}"
    # a cred body longer than 400 bytes (RFC 5531 opaque_auth limit)
    r = c.call(N.NFS_PROGRAM, 3, 0, cred=(N.AUTH_SYS, b"\0" * 404))
    assert r.reply_stat == N.MSG_DENIED or r.accept_stat == N.GARBAGE_ARGS, f"cred body 404: {r}"
    # AUTH_NONE NULL is fine
    r = c.call(N.NFS_PROGRAM, 3, 0, cred=(N.AUTH_NONE, b""))
    assert (r.reply_stat, r.accept_stat) == (N.MSG_ACCEPTED, N.SUCCESS), r
    assert c.getattr(root).check()
    c.close()
    good_check(hg, "badcred")


def test_bad_verifier(hg):
    c = hg.client()
    root = c.mount("/")
    r = c.call(N.NFS_PROGRAM, 3, N.NFSPROC3_GETATTR, N.a_getattr(root), verf=(77, b"xxxx"))
    assert (r.reply_stat, r.reject_stat) == (N.MSG_DENIED, N.AUTH_ERROR), f"verifier flavor 77: {r}"
    assert r.auth_stat in (N.AUTH_BADVERF, N.AUTH_REJECTEDVERF, N.AUTH_BADCRED), r
    c.close()
    good_check(hg, "badverf")


def test_half_record_stall_closed(hg):
    s = raw_sock(hg)
    t0 = time.monotonic()
    s.sendall(struct.pack(">I", 0x80000000 | 200) + b"\0" * 50)
    dt, got = expect_closed(s, RECORD_TIMEOUT_S + 8)
    elapsed = time.monotonic() - t0
    assert got == b""
    assert elapsed >= RECORD_TIMEOUT_S * 0.5, f"closed after {elapsed:.2f}s, before the record timeout"
    # half a record mark
    s = raw_sock(hg)
    s.sendall(b"\x80\x00")
    expect_closed(s, RECORD_TIMEOUT_S + 8)
    # an idle connection holding no partial record is not closed by the record timeout
    c = hg.client()
    time.sleep(RECORD_TIMEOUT_S + 1)
    assert c.null().accept_stat == N.SUCCESS, "idle connection (no partial record) was closed"
    c.close()
    good_check(hg, "stall")


def test_random_garbage_200_rounds(hg):
    rnd = random.Random(1813)
    for i in range(200):
        s = raw_sock(hg, timeout=2)
        kind = rnd.randrange(4)
        if kind == 0:      # pure noise
            data = rnd.randbytes(rnd.randrange(1, 4096))
        elif kind == 1:    # plausible framing, random body
            body = rnd.randbytes(rnd.randrange(0, 2048))
            data = N.record(body)
        elif kind == 2:    # a real call header with random args
            hdr = N.pack_call_header(rnd.randrange(1 << 32), rnd.choice([N.NFS_PROGRAM, N.MOUNT_PROGRAM]),
                                     3, rnd.randrange(24), N.AUTH_SYS, N.auth_sys_body(0, 0))
            data = N.record(hdr + rnd.randbytes(rnd.randrange(0, 512)))
        else:              # a real call with one byte flipped
            hdr = N.pack_call_header(rnd.randrange(1 << 32), N.NFS_PROGRAM, 3, N.NFSPROC3_LOOKUP,
                                     N.AUTH_SYS, N.auth_sys_body(0, 0))
            msg = bytearray(hdr + N.Packer().opaque(b"\1" * 32).string("name").get())
            msg[rnd.randrange(len(msg))] ^= 1 << rnd.randrange(8)
            data = N.record(bytes(msg))
        try:
            s.sendall(data)
            if rnd.random() < 0.3:
                s.settimeout(0.1)
                try:
                    s.recv(65536)
                except (socket.timeout, ConnectionResetError):
                    pass
        except (BrokenPipeError, ConnectionResetError):
            pass
        s.close()
        if i % 50 == 49:
            good_check(hg, f"random-{i}")
    good_check(hg, "random")


U64 = (1 << 64) - 1
HOSTILE_OFFSETS = [U64, U64 - 1, U64 - 4095, 0xFFFFFFFFFFFFF001, 0xFFFFFFFFFFFFF000,
                   U64 - 65535, 1 << 63, (1 << 63) - 1, 1 << 32, (1 << 32) - 1]
HOSTILE_COUNTS = [0, 1, 4095, 4096, 65536, 1 << 20, (1 << 31), (1 << 32) - 1]


def test_hostile_values_read_family(hg):
    """One READ at 0xFFFFFFFFFFFFF001 took the whole server down (the read
    cache's page rounding overflowed on the reactor). Every offset near 2^63/2^64 with
    every count, on a file whose attributes and pages are cached (so the reactor path
    runs, over and over), answers OK, no data, eof — and the server stays up."""
    with hg.client(timeout=10) as c:
        root = c.mount("/")
        data = os.urandom(10000)
        f = c.create(root, "hostile-read", 0o644).check().fh
        c.write(f, 0, data, N.FILE_SYNC).check()
        for _ in range(3):
            assert c.read(f, 0, 10000).check().data == data   # fills the reactor cache
            for off in HOSTILE_OFFSETS:
                for count in HOSTILE_COUNTS:
                    r = c.read(f, off, count).check(f"READ {off:#x} {count}")
                    assert r.data == b"" and r.eof, (hex(off), count, r)
        # WRITE whose end passes the largest file size: FBIG, and nothing changed.
        for off in (U64, U64 - 4095, 0xFFFFFFFFFFFFF001, 1 << 63):
            r = c.write(f, off, b"x", N.FILE_SYNC)
            assert r.status == N.NFS3ERR_FBIG, (hex(off), r)
        # COMMIT of any range commits the file (the range is advisory, RFC 1813 §3.3.21).
        for off, count in ((U64, (1 << 32) - 1), (0xFFFFFFFFFFFFF001, 1)):
            c.commit(f, off, count).check("COMMIT")
        # READDIR with hostile cookies and counts: an error or a page, never a crash.
        for cookie in (U64, U64 - 1, 1 << 63, 3):
            for count in (0, 1, 8, (1 << 32) - 1):
                r = c.readdir(root, cookie=cookie, count=count)
                assert r.status in (0, N.NFS3ERR_BAD_COOKIE, N.NFS3ERR_TOOSMALL), (cookie, count, r)
        assert c.read(f, 0, 10000).check().data == data
    good_check(hg, "read-family")
    assert "panicked" not in hg.log_path.read_text(errors="replace")


def test_rss_bounded_after_hostile_run(hg):
    assert "rss0" in state, "warm-up did not run"
    time.sleep(1)
    good_check(hg, "final")
    rss1 = hg.rss_kib()
    grew = rss1 - state["rss0"]
    assert grew <= RSS_BOUND_KIB, f"RSS grew by {grew} KiB ({state['rss0']} -> {rss1}) over the hostile run"
