"""Unit tests of our client's XDR / RPC encoding (no gateway needed)."""

import socket
import struct
import threading

import nfsclient as N
from nfsclient import Packer, Unpacker


def test_xdr_padding_and_roundtrip():
    p = Packer().u32(7).u64(1 << 40).opaque(b"abcde").string("xy").bool(True).fopaque(b"123", 3)
    b = p.get()
    assert b == (struct.pack(">I", 7) + struct.pack(">Q", 1 << 40) + struct.pack(">I", 5) + b"abcde\0\0\0"
                 + struct.pack(">I", 2) + b"xy\0\0" + struct.pack(">I", 1) + b"123\0")
    u = Unpacker(b)
    assert (u.u32(), u.u64(), u.opaque(), u.string(), u.bool(), u.fopaque(3)) == (7, 1 << 40, b"abcde", "xy", True, b"123")
    assert u.done()


def test_call_header_auth_sys():
    body = N.auth_sys_body(1000, 100, [5, 6], machine="m", stamp=9)
    assert body == struct.pack(">II", 9, 1) + b"m\0\0\0" + struct.pack(">IIIII", 1000, 100, 2, 5, 6)
    hdr = N.pack_call_header(0x11, N.NFS_PROGRAM, 3, 1, N.AUTH_SYS, body)
    u = Unpacker(hdr)
    assert [u.u32() for _ in range(6)] == [0x11, 0, 2, 100003, 3, 1]
    assert u.u32() == N.AUTH_SYS and u.opaque() == body
    assert u.u32() == N.AUTH_NONE and u.opaque() == b""
    assert u.done()


def test_record_mark():
    assert N.record(b"abcd") == b"\x80\0\0\x04abcd"
    assert N.record(b"ab", last=False) == b"\0\0\0\x02ab"


def test_sattr_and_args():
    p = Packer()
    N.pack_sattr3(p, mode=0o644, size=10, mtime=(1, 2), atime="server")
    u = Unpacker(p.get())
    assert (u.bool(), u.u32()) == (True, 0o644)
    assert u.bool() is False and u.bool() is False
    assert (u.bool(), u.u64()) == (True, 10)
    assert u.u32() == N.SET_TO_SERVER_TIME
    assert (u.u32(), u.u32(), u.u32()) == (N.SET_TO_CLIENT_TIME, 1, 2)
    assert u.done()

    w = N.a_write(b"F" * 8, 5, b"xyz", N.UNSTABLE)
    u = Unpacker(w)
    assert u.opaque() == b"F" * 8 and u.u64() == 5 and u.u32() == 3 and u.u32() == 0 and u.opaque() == b"xyz"
    c = N.a_create(b"D", "n", how=N.EXCLUSIVE, verf=b"12345678")
    u = Unpacker(c)
    assert u.opaque() == b"D" and u.string() == "n" and u.u32() == 2 and u.fopaque(8) == b"12345678" and u.done()


def _fattr(fileid=1):
    return struct.pack(">IIIII", 1, 0o644, 1, 0, 0) + struct.pack(">QQ", 3, 4096) + struct.pack(">II", 0, 0) \
        + struct.pack(">QQ", 1, fileid) + struct.pack(">IIIIII", 0, 0, 0, 0, 0, 0)


def test_parse_replies():
    ok = struct.pack(">IIIIII", 5, 1, 0, 0, 0, 0) + b"BODY"
    r = N.parse_reply(ok)
    assert r.xid == 5 and r.accept_stat == N.SUCCESS and r.body == b"BODY"
    mm = struct.pack(">IIIIIIII", 6, 1, 0, 0, 0, 2, 3, 3)
    r = N.parse_reply(mm)
    assert r.accept_stat == N.PROG_MISMATCH and (r.low, r.high) == (3, 3)
    den = struct.pack(">IIIIII", 7, 1, 1, 0, 2, 2)
    r = N.parse_reply(den)
    assert r.reject_stat == N.RPC_MISMATCH and (r.low, r.high) == (2, 2)
    au = struct.pack(">IIIII", 8, 1, 1, 1, 1)
    r = N.parse_reply(au)
    assert r.reject_stat == N.AUTH_ERROR and r.auth_stat == N.AUTH_BADCRED


def test_decoders():
    # READDIRPLUS with one entry carrying attrs and a handle
    b = struct.pack(">II", 0, 0) + b"V" * 8 + struct.pack(">I", 1) + struct.pack(">Q", 42) \
        + struct.pack(">I", 1) + b"a\0\0\0" + struct.pack(">Q", 9) + struct.pack(">I", 1) + _fattr(42) \
        + struct.pack(">II", 1, 4) + b"HHHH" + struct.pack(">II", 0, 1)
    u = Unpacker(b)
    st = u.u32()
    r = N.d_readdirplus(u, st)
    assert u.done() and r.eof and r.cookieverf == b"V" * 8
    (e,) = r.entries
    assert (e.fileid, e.name, e.cookie, e.attr.fileid, e.fh) == (42, "a", 9, 42, b"HHHH")


def test_client_against_fake_server():
    """The client's framing over a real socket, against a one-shot fake server that
    answers with a two-fragment record and an out-of-order xid."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]

    def serve():
        c, _ = srv.accept()
        buf = b""
        xids = []
        while len(xids) < 2:
            while len(buf) < 4 or len(buf) < 4 + (struct.unpack(">I", buf[:4])[0] & 0x7FFFFFFF):
                buf += c.recv(4096)
            n = struct.unpack(">I", buf[:4])[0] & 0x7FFFFFFF
            xids.append(struct.unpack(">I", buf[4:8])[0])
            buf = buf[4 + n:]
        for x in reversed(xids):
            body = struct.pack(">IIIIII", x, 1, 0, 0, 0, 0) + struct.pack(">I", 0) + _fattr(x)
            c.sendall(N.record(body[:10], last=False) + N.record(body[10:]))
        c.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    cl = N.NfsClient("127.0.0.1", port, timeout=5)
    res = cl.pipeline([(N.NFSPROC3_GETATTR, N.a_getattr(b"x"), N.d_getattr)] * 2)
    assert all(r.ok for r in res)
    assert res[0].attr.fileid + 1 == res[1].attr.fileid
    cl.close()
    t.join(5)
    srv.close()
