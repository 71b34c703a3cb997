"""A small NFSv3 + MOUNT v3 client over TCP, in pure Python (RFC 1813, RFC 5531, RFC 4506).

Written for the gateway's end-to-end tests: every procedure returns a `Res` carrying
the NFS status and the decoded results; file handles are plain `bytes`, so a test can
keep them across gateway restarts or alter them. `call()` exposes the raw RPC layer and
`sock` / `send_record()` / `send_raw()` / `recv_record()` the raw connection, for
hostile-input tests.

    c = NfsClient("127.0.0.1", port)              # AUTH_SYS uid 0 gid 0
    root = c.mount("/")                           # bytes; raises MountError
    r = c.create(root, "f", mode=0o644)           # Res(status, fh, attr, dir_wcc)
    c.write(r.fh, 0, b"data", stable=FILE_SYNC)
"""

from __future__ import annotations

import os
import socket
import struct
import time
from types import SimpleNamespace
from typing import Callable, Iterable, Optional

# ---------------------------------------------------------------------------- constants

NFS_PROGRAM = 100003
NFS_V3 = 3
MOUNT_PROGRAM = 100005
MOUNT_V3 = 3

# RPC
CALL, REPLY = 0, 1
MSG_ACCEPTED, MSG_DENIED = 0, 1
SUCCESS, PROG_UNAVAIL, PROG_MISMATCH, PROC_UNAVAIL, GARBAGE_ARGS, SYSTEM_ERR = range(6)
RPC_MISMATCH, AUTH_ERROR = 0, 1
AUTH_NONE, AUTH_SYS, AUTH_SHORT = 0, 1, 2
# auth_stat
AUTH_OK, AUTH_BADCRED, AUTH_REJECTEDCRED, AUTH_BADVERF, AUTH_REJECTEDVERF, AUTH_TOOWEAK = range(6)

# NFS procedures
(NFSPROC3_NULL, NFSPROC3_GETATTR, NFSPROC3_SETATTR, NFSPROC3_LOOKUP, NFSPROC3_ACCESS,
 NFSPROC3_READLINK, NFSPROC3_READ, NFSPROC3_WRITE, NFSPROC3_CREATE, NFSPROC3_MKDIR,
 NFSPROC3_SYMLINK, NFSPROC3_MKNOD, NFSPROC3_REMOVE, NFSPROC3_RMDIR, NFSPROC3_RENAME,
 NFSPROC3_LINK, NFSPROC3_READDIR, NFSPROC3_READDIRPLUS, NFSPROC3_FSSTAT, NFSPROC3_FSINFO,
 NFSPROC3_PATHCONF, NFSPROC3_COMMIT) = range(22)

# MOUNT procedures
MOUNTPROC3_NULL, MOUNTPROC3_MNT, MOUNTPROC3_DUMP, MOUNTPROC3_UMNT, MOUNTPROC3_UMNTALL, MOUNTPROC3_EXPORT = range(6)

# nfsstat3
NFS3_OK = 0
NFS3ERR_PERM = 1
NFS3ERR_NOENT = 2
NFS3ERR_IO = 5
NFS3ERR_NXIO = 6
NFS3ERR_ACCES = 13
NFS3ERR_EXIST = 17
NFS3ERR_XDEV = 18
NFS3ERR_NODEV = 19
NFS3ERR_NOTDIR = 20
NFS3ERR_ISDIR = 21
NFS3ERR_INVAL = 22
NFS3ERR_FBIG = 27
NFS3ERR_NOSPC = 28
NFS3ERR_ROFS = 30
NFS3ERR_MLINK = 31
NFS3ERR_NAMETOOLONG = 63
NFS3ERR_NOTEMPTY = 66
NFS3ERR_DQUOT = 69
NFS3ERR_STALE = 70
NFS3ERR_REMOTE = 71
NFS3ERR_BADHANDLE = 10001
NFS3ERR_NOT_SYNC = 10002
NFS3ERR_BAD_COOKIE = 10003
NFS3ERR_NOTSUPP = 10004
NFS3ERR_TOOSMALL = 10005
NFS3ERR_SERVERFAULT = 10006
NFS3ERR_BADTYPE = 10007
NFS3ERR_JUKEBOX = 10008

NFS_STATUS_NAMES = {v: k for k, v in globals().items() if k.startswith("NFS3ERR_") or k == "NFS3_OK"}

# mountstat3
MNT3_OK = 0
MNT3ERR_PERM = 1
MNT3ERR_NOENT = 2
MNT3ERR_IO = 5
MNT3ERR_ACCES = 13
MNT3ERR_NOTDIR = 20
MNT3ERR_INVAL = 22
MNT3ERR_NAMETOOLONG = 63
MNT3ERR_NOTSUPP = 10004
MNT3ERR_SERVERFAULT = 10006

# ftype3
NF3REG, NF3DIR, NF3BLK, NF3CHR, NF3LNK, NF3SOCK, NF3FIFO = range(1, 8)

# stable_how
UNSTABLE, DATA_SYNC, FILE_SYNC = 0, 1, 2

# createmode3
UNCHECKED, GUARDED, EXCLUSIVE = 0, 1, 2

# time_how
DONT_CHANGE, SET_TO_SERVER_TIME, SET_TO_CLIENT_TIME = 0, 1, 2

# ACCESS bits
ACCESS3_READ = 0x01
ACCESS3_LOOKUP = 0x02
ACCESS3_MODIFY = 0x04
ACCESS3_EXTEND = 0x08
ACCESS3_DELETE = 0x10
ACCESS3_EXECUTE = 0x20
ACCESS3_ALL = 0x3F

# FSINFO properties
FSF3_LINK, FSF3_SYMLINK, FSF3_HOMOGENEOUS, FSF3_CANSETTIME = 0x1, 0x2, 0x8, 0x10

NFS3_FHSIZE = 64
NFS3_COOKIEVERFSIZE = 8
NFS3_CREATEVERFSIZE = 8
NFS3_WRITEVERFSIZE = 8

ZERO_VERF = b"\0" * 8


def status_name(st: int) -> str:
    return NFS_STATUS_NAMES.get(st, f"status {st}")


# ---------------------------------------------------------------------------- errors


class RpcError(Exception):
    """The RPC layer did not return SUCCESS (or the reply could not be parsed)."""

    def __init__(self, msg: str, reply: "Optional[RpcReply]" = None):
        super().__init__(msg)
        self.reply = reply


class MountError(Exception):
    def __init__(self, status: int, path: str):
        super().__init__(f"MNT {path!r} failed: mountstat3 {status}")
        self.status = status


class NfsError(Exception):
    def __init__(self, proc: str, status: int):
        super().__init__(f"{proc} failed: {status_name(status)} ({status})")
        self.status = status


class ConnectionClosed(RpcError):
    pass


# ---------------------------------------------------------------------------- XDR


class Packer:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def get(self) -> bytes:
        return b"".join(self.parts)

    def u32(self, v: int) -> "Packer":
        self.parts.append(struct.pack(">I", v & 0xFFFFFFFF))
        return self

    def i32(self, v: int) -> "Packer":
        self.parts.append(struct.pack(">i", v))
        return self

    def u64(self, v: int) -> "Packer":
        self.parts.append(struct.pack(">Q", v & 0xFFFFFFFFFFFFFFFF))
        return self

    def bool(self, v: bool) -> "Packer":
        return self.u32(1 if v else 0)

    def fopaque(self, data: bytes, n: int) -> "Packer":
        """Fixed-length opaque[n]."""
        if len(data) != n:
            raise ValueError(f"fixed opaque needs {n} bytes, got {len(data)}")
        self.parts.append(data)
        pad = (-n) % 4
        if pad:
            self.parts.append(b"\0" * pad)
        return self

    def opaque(self, data: bytes) -> "Packer":
        """Variable-length opaque<>."""
        self.u32(len(data))
        self.parts.append(bytes(data))
        pad = (-len(data)) % 4
        if pad:
            self.parts.append(b"\0" * pad)
        return self

    def string(self, s) -> "Packer":
        if isinstance(s, str):
            s = s.encode()
        return self.opaque(s)

    def raw(self, b: bytes) -> "Packer":
        self.parts.append(b)
        return self


class XdrError(Exception):
    pass


class Unpacker:
    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = memoryview(data)
        self.pos = pos

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def done(self) -> bool:
        return self.pos == len(self.data)

    def _take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise XdrError(f"short XDR: need {n} bytes at {self.pos}, have {len(self.data) - self.pos}")
        b = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        return b

    def u32(self) -> int:
        return struct.unpack(">I", self._take(4))[0]

    def i32(self) -> int:
        return struct.unpack(">i", self._take(4))[0]

    def u64(self) -> int:
        return struct.unpack(">Q", self._take(8))[0]

    def bool(self) -> bool:
        v = self.u32()
        if v not in (0, 1):
            raise XdrError(f"bad XDR bool {v}")
        return v == 1

    def fopaque(self, n: int) -> bytes:
        b = self._take(n)
        self._take((-n) % 4)
        return b

    def opaque(self, maxlen: Optional[int] = None) -> bytes:
        n = self.u32()
        if maxlen is not None and n > maxlen:
            raise XdrError(f"opaque length {n} > max {maxlen}")
        return self.fopaque(n)

    def string(self) -> str:
        return self.opaque().decode("utf-8", "surrogateescape")


# ---------------------------------------------------------------------------- NFS types


def pack_fh(p: Packer, fh: bytes) -> None:
    p.opaque(fh)


def unpack_fh(u: Unpacker) -> bytes:
    return u.opaque(NFS3_FHSIZE)


def unpack_nfstime(u: Unpacker) -> tuple:
    return (u.u32(), u.u32())


def unpack_fattr3(u: Unpacker) -> SimpleNamespace:
    a = SimpleNamespace()
    a.type = u.u32()
    a.mode = u.u32()
    a.nlink = u.u32()
    a.uid = u.u32()
    a.gid = u.u32()
    a.size = u.u64()
    a.used = u.u64()
    a.rdev = (u.u32(), u.u32())
    a.fsid = u.u64()
    a.fileid = u.u64()
    a.atime = unpack_nfstime(u)
    a.mtime = unpack_nfstime(u)
    a.ctime = unpack_nfstime(u)
    return a


def unpack_post_op_attr(u: Unpacker) -> Optional[SimpleNamespace]:
    return unpack_fattr3(u) if u.bool() else None


def unpack_pre_op_attr(u: Unpacker) -> Optional[SimpleNamespace]:
    if not u.bool():
        return None
    return SimpleNamespace(size=u.u64(), mtime=unpack_nfstime(u), ctime=unpack_nfstime(u))


def unpack_wcc_data(u: Unpacker) -> SimpleNamespace:
    return SimpleNamespace(before=unpack_pre_op_attr(u), after=unpack_post_op_attr(u))


def unpack_post_op_fh(u: Unpacker) -> Optional[bytes]:
    return unpack_fh(u) if u.bool() else None


def pack_time_how(p: Packer, t) -> None:
    """t: None (DONT_CHANGE), "server" (SET_TO_SERVER_TIME) or (sec, nsec)."""
    if t is None:
        p.u32(DONT_CHANGE)
    elif t == "server":
        p.u32(SET_TO_SERVER_TIME)
    else:
        p.u32(SET_TO_CLIENT_TIME).u32(t[0]).u32(t[1])


def pack_sattr3(p: Packer, mode=None, uid=None, gid=None, size=None, atime=None, mtime=None) -> None:
    for v in (mode, uid, gid):
        if v is None:
            p.bool(False)
        else:
            p.bool(True).u32(v)
    if size is None:
        p.bool(False)
    else:
        p.bool(True).u64(size)
    pack_time_how(p, atime)
    pack_time_how(p, mtime)


def pack_diropargs(p: Packer, dirfh: bytes, name) -> None:
    pack_fh(p, dirfh)
    p.string(name)


# ---------------------------------------------------------------------------- results


class Res(SimpleNamespace):
    """Result of one NFS/MOUNT procedure: `.status` plus decoded fields."""

    @property
    def ok(self) -> bool:
        return self.status == 0

    def check(self, proc: str = "") -> "Res":
        if self.status != 0:
            raise NfsError(proc or getattr(self, "proc", "?"), self.status)
        return self

    def __repr__(self) -> str:
        d = dict(self.__dict__)
        st = d.pop("status", None)
        return f"Res({status_name(st) if st is not None else '?'}, {d})"


class RpcReply(SimpleNamespace):
    """Decoded RPC reply header.

    Fields: xid, reply_stat (MSG_ACCEPTED/MSG_DENIED); when accepted: verf, accept_stat,
    and low/high for PROG_MISMATCH; when denied: reject_stat and low/high (RPC_MISMATCH)
    or auth_stat (AUTH_ERROR). `body` holds the procedure results (bytes) on SUCCESS.
    """


def parse_reply(data: bytes) -> RpcReply:
    u = Unpacker(data)
    r = RpcReply(xid=u.u32(), body=b"", accept_stat=None, reject_stat=None,
                 low=None, high=None, auth_stat=None, verf=None)
    mtype = u.u32()
    if mtype != REPLY:
        raise RpcError(f"message type {mtype} is not REPLY")
    r.reply_stat = u.u32()
    if r.reply_stat == MSG_ACCEPTED:
        r.verf = (u.u32(), u.opaque(400))
        r.accept_stat = u.u32()
        if r.accept_stat == SUCCESS:
            r.body = bytes(u.data[u.pos:])
        elif r.accept_stat == PROG_MISMATCH:
            r.low, r.high = u.u32(), u.u32()
    elif r.reply_stat == MSG_DENIED:
        r.reject_stat = u.u32()
        if r.reject_stat == RPC_MISMATCH:
            r.low, r.high = u.u32(), u.u32()
        elif r.reject_stat == AUTH_ERROR:
            r.auth_stat = u.u32()
        else:
            raise RpcError(f"unknown reject_stat {r.reject_stat}")
    else:
        raise RpcError(f"unknown reply_stat {r.reply_stat}")
    r.trailing = u.remaining() if r.accept_stat != SUCCESS else 0
    return r


# ---------------------------------------------------------------------------- credentials


def auth_sys_body(uid: int, gid: int, gids: Iterable[int] = (), machine: str = "e2e", stamp: int = 0) -> bytes:
    p = Packer().u32(stamp).string(machine).u32(uid).u32(gid)
    gids = list(gids)
    p.u32(len(gids))
    for g in gids:
        p.u32(g)
    return p.get()


def pack_call_header(xid: int, prog: int, vers: int, proc: int, cred_flavor: int, cred_body: bytes,
                     verf_flavor: int = AUTH_NONE, verf_body: bytes = b"", rpcvers: int = 2) -> bytes:
    p = Packer().u32(xid).u32(CALL).u32(rpcvers).u32(prog).u32(vers).u32(proc)
    p.u32(cred_flavor).opaque(cred_body)
    p.u32(verf_flavor).opaque(verf_body)
    return p.get()


def record(payload: bytes, last: bool = True) -> bytes:
    """One record-marking fragment."""
    return struct.pack(">I", (0x80000000 if last else 0) | len(payload)) + payload


# ---------------------------------------------------------------------------- the client


class NfsClient:
    def __init__(self, host: str = "127.0.0.1", port: int = 2049, uid: int = 0, gid: int = 0,
                 gids: Iterable[int] = (), auth: str = "sys", timeout: float = 30.0,
                 machine: str = "e2e"):
        self.host, self.port = host, port
        self.timeout = timeout
        self.set_cred(uid, gid, gids, auth, machine)
        self.xid = int.from_bytes(os.urandom(4), "big") & 0x7FFFFFFF
        self.sock: Optional[socket.socket] = None
        self._rbuf = bytearray()
        self._pending: dict[int, bytes] = {}
        self.connect()

    # -- connection ------------------------------------------------------------------
    def connect(self) -> None:
        self.close()
        s = socket.create_connection((self.host, self.port), timeout=self.timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.settimeout(self.timeout)
        self.sock = s
        self._rbuf = bytearray()
        self._pending = {}

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def set_cred(self, uid: int = 0, gid: int = 0, gids: Iterable[int] = (), auth: str = "sys",
                 machine: str = "e2e") -> None:
        self.uid, self.gid, self.gids, self.auth = uid, gid, list(gids), auth
        if auth == "none":
            self.cred = (AUTH_NONE, b"")
        elif auth == "sys":
            self.cred = (AUTH_SYS, auth_sys_body(uid, gid, self.gids, machine))
        else:
            raise ValueError(auth)

    def next_xid(self) -> int:
        self.xid = (self.xid + 1) & 0xFFFFFFFF
        return self.xid

    # -- raw I/O ---------------------------------------------------------------------
    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_record(self, payload: bytes) -> None:
        self.sock.sendall(record(payload))

    def _recv_exact(self, n: int) -> bytes:
        while len(self._rbuf) < n:
            try:
                chunk = self.sock.recv(max(65536, n - len(self._rbuf)))
            except ConnectionResetError as e:
                raise ConnectionClosed(f"connection reset: {e}")
            if not chunk:
                raise ConnectionClosed("connection closed by server")
            self._rbuf += chunk
        out = bytes(self._rbuf[:n])
        del self._rbuf[:n]
        return out

    def recv_record(self) -> bytes:
        frags = []
        total = 0
        while True:
            (hdr,) = struct.unpack(">I", self._recv_exact(4))
            n = hdr & 0x7FFFFFFF
            total += n
            if total > 64 << 20:
                raise RpcError(f"reply record too large ({total})")
            frags.append(self._recv_exact(n))
            if hdr & 0x80000000:
                return b"".join(frags)

    def recv_reply(self, xid: int) -> RpcReply:
        if xid in self._pending:
            return parse_reply(self._pending.pop(xid))
        while True:
            data = self.recv_record()
            if len(data) < 4:
                raise RpcError(f"runt reply record ({len(data)} bytes)")
            rx = struct.unpack(">I", data[:4])[0]
            if rx == xid:
                return parse_reply(data)
            self._pending[rx] = data

    # -- RPC -------------------------------------------------------------------------
    def build_call(self, prog: int, vers: int, proc: int, args: bytes = b"", xid: Optional[int] = None,
                   cred: Optional[tuple] = None, verf: tuple = (AUTH_NONE, b""), rpcvers: int = 2) -> tuple:
        xid = self.next_xid() if xid is None else xid
        cf, cb = cred if cred is not None else self.cred
        return xid, pack_call_header(xid, prog, vers, proc, cf, cb, verf[0], verf[1], rpcvers) + args

    def call(self, prog: int, vers: int, proc: int, args: bytes = b"", **kw) -> RpcReply:
        """Raw RPC call; returns the decoded reply header (whatever it says)."""
        xid, msg = self.build_call(prog, vers, proc, args, **kw)
        self.send_record(msg)
        return self.recv_reply(xid)

    def call_ok(self, prog: int, vers: int, proc: int, args: bytes = b"") -> Unpacker:
        r = self.call(prog, vers, proc, args)
        if r.reply_stat != MSG_ACCEPTED or r.accept_stat != SUCCESS:
            raise RpcError(f"RPC prog {prog} v{vers} proc {proc}: reply_stat={r.reply_stat} "
                           f"accept_stat={r.accept_stat} reject_stat={r.reject_stat} "
                           f"auth_stat={r.auth_stat}", r)
        return Unpacker(r.body)

    def nfs(self, proc: int, args: bytes, decode: Callable[[Unpacker, int], Res]) -> Res:
        u = self.call_ok(NFS_PROGRAM, NFS_V3, proc, args)
        st = u.u32()
        res = decode(u, st)
        res.status = st
        res.proc = PROC_NAMES.get(proc, str(proc))
        if not u.done():
            raise RpcError(f"{res.proc}: {u.remaining()} trailing bytes in reply")
        return res

    def pipeline(self, calls: list, window: int = 32) -> list:
        """Issue many NFS calls with up to `window` in flight.

        calls: list of (proc, args_bytes, decoder); returns the list of Res in order.
        """
        out: list = [None] * len(calls)
        inflight: dict[int, int] = {}
        i = 0
        while i < len(calls) or inflight:
            while i < len(calls) and len(inflight) < window:
                proc, args, _ = calls[i]
                xid, msg = self.build_call(NFS_PROGRAM, NFS_V3, proc, args)
                self.send_record(msg)
                inflight[xid] = i
                i += 1
            data = self.recv_record()
            rx = struct.unpack(">I", data[:4])[0]
            if rx not in inflight:
                raise RpcError(f"unexpected xid {rx} in pipeline")
            idx = inflight.pop(rx)
            r = parse_reply(data)
            if r.reply_stat != MSG_ACCEPTED or r.accept_stat != SUCCESS:
                raise RpcError(f"pipelined call {idx} rejected: {r}", r)
            u = Unpacker(r.body)
            st = u.u32()
            res = calls[idx][2](u, st)
            res.status = st
            out[idx] = res
        return out

    # -- MOUNT -----------------------------------------------------------------------
    def mnt_null(self) -> RpcReply:
        return self.call(MOUNT_PROGRAM, MOUNT_V3, MOUNTPROC3_NULL)

    def mnt(self, path: str) -> Res:
        u = self.call_ok(MOUNT_PROGRAM, MOUNT_V3, MOUNTPROC3_MNT, Packer().string(path).get())
        st = u.u32()
        res = Res(status=st, fh=None, flavors=[])
        if st == MNT3_OK:
            res.fh = unpack_fh(u)
            res.flavors = [u.u32() for _ in range(u.u32())]
        return res

    def mount(self, path: str = "/") -> bytes:
        r = self.mnt(path)
        if r.status != MNT3_OK:
            raise MountError(r.status, path)
        return r.fh

    def umnt(self, path: str) -> None:
        self.call_ok(MOUNT_PROGRAM, MOUNT_V3, MOUNTPROC3_UMNT, Packer().string(path).get())

    def umntall(self) -> None:
        self.call_ok(MOUNT_PROGRAM, MOUNT_V3, MOUNTPROC3_UMNTALL)

    def dump(self) -> list:
        u = self.call_ok(MOUNT_PROGRAM, MOUNT_V3, MOUNTPROC3_DUMP)
        out = []
        while u.bool():
            out.append((u.string(), u.string()))
        return out

    def export(self) -> list:
        """[(dir, [groups])]"""
        u = self.call_ok(MOUNT_PROGRAM, MOUNT_V3, MOUNTPROC3_EXPORT)
        out = []
        while u.bool():
            d = u.string()
            groups = []
            while u.bool():
                groups.append(u.string())
            out.append((d, groups))
        return out

    # -- NFS -------------------------------------------------------------------------
    def null(self) -> RpcReply:
        return self.call(NFS_PROGRAM, NFS_V3, NFSPROC3_NULL)

    def getattr(self, fh: bytes) -> Res:
        return self.nfs(NFSPROC3_GETATTR, a_getattr(fh), d_getattr)

    def setattr(self, fh: bytes, guard_ctime=None, **sattr) -> Res:
        return self.nfs(NFSPROC3_SETATTR, a_setattr(fh, guard_ctime, **sattr), d_wcc)

    def lookup(self, dirfh: bytes, name) -> Res:
        return self.nfs(NFSPROC3_LOOKUP, a_lookup(dirfh, name), d_lookup)

    def access(self, fh: bytes, bits: int = ACCESS3_ALL) -> Res:
        return self.nfs(NFSPROC3_ACCESS, Packer().opaque(fh).u32(bits).get(), d_access)

    def readlink(self, fh: bytes) -> Res:
        return self.nfs(NFSPROC3_READLINK, Packer().opaque(fh).get(), d_readlink)

    def read(self, fh: bytes, offset: int, count: int) -> Res:
        return self.nfs(NFSPROC3_READ, a_read(fh, offset, count), d_read)

    def write(self, fh: bytes, offset: int, data: bytes, stable: int = FILE_SYNC, count: Optional[int] = None) -> Res:
        return self.nfs(NFSPROC3_WRITE, a_write(fh, offset, data, stable, count), d_write)

    def create(self, dirfh: bytes, name, mode: Optional[int] = 0o644, how: int = UNCHECKED,
               verf: bytes = b"", **sattr) -> Res:
        return self.nfs(NFSPROC3_CREATE, a_create(dirfh, name, mode, how, verf, **sattr), d_create)

    def mkdir(self, dirfh: bytes, name, mode: Optional[int] = 0o755, **sattr) -> Res:
        p = Packer()
        pack_diropargs(p, dirfh, name)
        pack_sattr3(p, mode=mode, **sattr)
        return self.nfs(NFSPROC3_MKDIR, p.get(), d_create)

    def symlink(self, dirfh: bytes, name, target, mode: Optional[int] = None, **sattr) -> Res:
        p = Packer()
        pack_diropargs(p, dirfh, name)
        pack_sattr3(p, mode=mode, **sattr)
        p.string(target)
        return self.nfs(NFSPROC3_SYMLINK, p.get(), d_create)

    def mknod(self, dirfh: bytes, name, ftype: int = NF3FIFO, mode: Optional[int] = 0o644,
              spec: tuple = (0, 0)) -> Res:
        p = Packer()
        pack_diropargs(p, dirfh, name)
        p.u32(ftype)
        if ftype in (NF3CHR, NF3BLK):
            pack_sattr3(p, mode=mode)
            p.u32(spec[0]).u32(spec[1])
        elif ftype in (NF3SOCK, NF3FIFO):
            pack_sattr3(p, mode=mode)
        return self.nfs(NFSPROC3_MKNOD, p.get(), d_create)

    def remove(self, dirfh: bytes, name) -> Res:
        p = Packer()
        pack_diropargs(p, dirfh, name)
        return self.nfs(NFSPROC3_REMOVE, p.get(), d_wcc)

    def rmdir(self, dirfh: bytes, name) -> Res:
        p = Packer()
        pack_diropargs(p, dirfh, name)
        return self.nfs(NFSPROC3_RMDIR, p.get(), d_wcc)

    def rename(self, fromdir: bytes, fromname, todir: bytes, toname) -> Res:
        p = Packer()
        pack_diropargs(p, fromdir, fromname)
        pack_diropargs(p, todir, toname)
        return self.nfs(NFSPROC3_RENAME, p.get(), d_rename)

    def link(self, fh: bytes, dirfh: bytes, name) -> Res:
        p = Packer().opaque(fh)
        pack_diropargs(p, dirfh, name)
        return self.nfs(NFSPROC3_LINK, p.get(), d_link)

    def readdir(self, dirfh: bytes, cookie: int = 0, cookieverf: bytes = ZERO_VERF, count: int = 4096) -> Res:
        p = Packer().opaque(dirfh).u64(cookie).fopaque(cookieverf, 8).u32(count)
        return self.nfs(NFSPROC3_READDIR, p.get(), d_readdir)

    def readdirplus(self, dirfh: bytes, cookie: int = 0, cookieverf: bytes = ZERO_VERF,
                    dircount: int = 4096, maxcount: int = 16384) -> Res:
        p = Packer().opaque(dirfh).u64(cookie).fopaque(cookieverf, 8).u32(dircount).u32(maxcount)
        return self.nfs(NFSPROC3_READDIRPLUS, p.get(), d_readdirplus)

    def fsstat(self, fh: bytes) -> Res:
        return self.nfs(NFSPROC3_FSSTAT, Packer().opaque(fh).get(), d_fsstat)

    def fsinfo(self, fh: bytes) -> Res:
        return self.nfs(NFSPROC3_FSINFO, Packer().opaque(fh).get(), d_fsinfo)

    def pathconf(self, fh: bytes) -> Res:
        return self.nfs(NFSPROC3_PATHCONF, Packer().opaque(fh).get(), d_pathconf)

    def commit(self, fh: bytes, offset: int = 0, count: int = 0) -> Res:
        return self.nfs(NFSPROC3_COMMIT, Packer().opaque(fh).u64(offset).u32(count).get(), d_commit)

    # -- conveniences ----------------------------------------------------------------
    def lookup_path(self, root: bytes, path: str) -> bytes:
        fh = root
        for part in [p for p in path.split("/") if p]:
            fh = self.lookup(fh, part).check("LOOKUP " + part).fh
        return fh

    def write_all(self, fh: bytes, data: bytes, offset: int = 0, chunk: int = 1 << 20,
                  stable: int = FILE_SYNC, window: int = 4) -> list:
        calls = []
        for off in range(0, len(data), chunk):
            calls.append((NFSPROC3_WRITE, a_write(fh, offset + off, data[off:off + chunk], stable), d_write))
        res = self.pipeline(calls, window=window)
        for r, (_, _, _) in zip(res, calls):
            r.check("WRITE")
        return res

    def read_all(self, fh: bytes, size: Optional[int] = None, chunk: int = 1 << 20) -> bytes:
        out = []
        off = 0
        while True:
            n = chunk if size is None else min(chunk, size - off)
            if size is not None and n <= 0:
                break
            r = self.read(fh, off, n).check("READ")
            out.append(r.data)
            off += len(r.data)
            if r.eof or not r.data:
                break
        return b"".join(out)

    def readdir_all(self, dirfh: bytes, count: int = 4096, plus: bool = False,
                    maxcount: int = 16384) -> list:
        """All entries (SimpleNamespace with fileid, name, cookie[, attr, fh]) in server order."""
        out = []
        cookie, verf = 0, ZERO_VERF
        for _ in range(10_000_000):
            if plus:
                r = self.readdirplus(dirfh, cookie, verf, count, maxcount).check("READDIRPLUS")
            else:
                r = self.readdir(dirfh, cookie, verf, count).check("READDIR")
            out.extend(r.entries)
            verf = r.cookieverf
            if r.eof:
                return out
            if not r.entries:
                raise RpcError("READDIR returned no entries and no eof")
            cookie = r.entries[-1].cookie
        raise RpcError("READDIR did not terminate")


# ---------------------------------------------------------------------------- arg builders


def a_getattr(fh: bytes) -> bytes:
    return Packer().opaque(fh).get()


def a_setattr(fh: bytes, guard_ctime=None, **sattr) -> bytes:
    p = Packer().opaque(fh)
    pack_sattr3(p, **sattr)
    if guard_ctime is None:
        p.bool(False)
    else:
        p.bool(True).u32(guard_ctime[0]).u32(guard_ctime[1])
    return p.get()


def a_lookup(dirfh: bytes, name) -> bytes:
    p = Packer()
    pack_diropargs(p, dirfh, name)
    return p.get()


def a_read(fh: bytes, offset: int, count: int) -> bytes:
    return Packer().opaque(fh).u64(offset).u32(count).get()


def a_write(fh: bytes, offset: int, data: bytes, stable: int = FILE_SYNC, count: Optional[int] = None) -> bytes:
    return Packer().opaque(fh).u64(offset).u32(len(data) if count is None else count).u32(stable).opaque(data).get()


def a_create(dirfh: bytes, name, mode: Optional[int] = 0o644, how: int = UNCHECKED, verf: bytes = b"",
             **sattr) -> bytes:
    p = Packer()
    pack_diropargs(p, dirfh, name)
    p.u32(how)
    if how == EXCLUSIVE:
        p.fopaque(verf or b"\x01" * 8, 8)
    else:
        pack_sattr3(p, mode=mode, **sattr)
    return p.get()


# ---------------------------------------------------------------------------- decoders


def d_getattr(u: Unpacker, st: int) -> Res:
    return Res(attr=unpack_fattr3(u) if st == 0 else None)


def d_wcc(u: Unpacker, st: int) -> Res:
    return Res(wcc=unpack_wcc_data(u))


def d_lookup(u: Unpacker, st: int) -> Res:
    if st == 0:
        return Res(fh=unpack_fh(u), attr=unpack_post_op_attr(u), dir_attr=unpack_post_op_attr(u))
    return Res(fh=None, attr=None, dir_attr=unpack_post_op_attr(u))


def d_access(u: Unpacker, st: int) -> Res:
    attr = unpack_post_op_attr(u)
    return Res(attr=attr, access=u.u32() if st == 0 else None)


def d_readlink(u: Unpacker, st: int) -> Res:
    attr = unpack_post_op_attr(u)
    return Res(attr=attr, path=u.string() if st == 0 else None)


def d_read(u: Unpacker, st: int) -> Res:
    attr = unpack_post_op_attr(u)
    if st != 0:
        return Res(attr=attr, count=None, eof=None, data=None)
    count = u.u32()
    eof = u.bool()
    data = u.opaque()
    return Res(attr=attr, count=count, eof=eof, data=data)


def d_write(u: Unpacker, st: int) -> Res:
    wcc = unpack_wcc_data(u)
    if st != 0:
        return Res(wcc=wcc, count=None, committed=None, verf=None)
    return Res(wcc=wcc, count=u.u32(), committed=u.u32(), verf=u.fopaque(8))


def d_create(u: Unpacker, st: int) -> Res:
    if st == 0:
        return Res(fh=unpack_post_op_fh(u), attr=unpack_post_op_attr(u), dir_wcc=unpack_wcc_data(u))
    return Res(fh=None, attr=None, dir_wcc=unpack_wcc_data(u))


def d_rename(u: Unpacker, st: int) -> Res:
    return Res(from_wcc=unpack_wcc_data(u), to_wcc=unpack_wcc_data(u))


def d_link(u: Unpacker, st: int) -> Res:
    return Res(attr=unpack_post_op_attr(u), dir_wcc=unpack_wcc_data(u))


def d_readdir(u: Unpacker, st: int) -> Res:
    attr = unpack_post_op_attr(u)
    if st != 0:
        return Res(dir_attr=attr, cookieverf=None, entries=[], eof=None)
    verf = u.fopaque(8)
    entries = []
    while u.bool():
        entries.append(SimpleNamespace(fileid=u.u64(), name=u.string(), cookie=u.u64()))
    return Res(dir_attr=attr, cookieverf=verf, entries=entries, eof=u.bool())


def d_readdirplus(u: Unpacker, st: int) -> Res:
    attr = unpack_post_op_attr(u)
    if st != 0:
        return Res(dir_attr=attr, cookieverf=None, entries=[], eof=None)
    verf = u.fopaque(8)
    entries = []
    while u.bool():
        e = SimpleNamespace(fileid=u.u64(), name=u.string(), cookie=u.u64())
        e.attr = unpack_post_op_attr(u)
        e.fh = unpack_post_op_fh(u)
        entries.append(e)
    return Res(dir_attr=attr, cookieverf=verf, entries=entries, eof=u.bool())


def d_fsstat(u: Unpacker, st: int) -> Res:
    attr = unpack_post_op_attr(u)
    if st != 0:
        return Res(attr=attr)
    return Res(attr=attr, tbytes=u.u64(), fbytes=u.u64(), abytes=u.u64(), tfiles=u.u64(),
               ffiles=u.u64(), afiles=u.u64(), invarsec=u.u32())


def d_fsinfo(u: Unpacker, st: int) -> Res:
    attr = unpack_post_op_attr(u)
    if st != 0:
        return Res(attr=attr)
    return Res(attr=attr, rtmax=u.u32(), rtpref=u.u32(), rtmult=u.u32(), wtmax=u.u32(),
               wtpref=u.u32(), wtmult=u.u32(), dtpref=u.u32(), maxfilesize=u.u64(),
               time_delta=unpack_nfstime(u), properties=u.u32())


def d_pathconf(u: Unpacker, st: int) -> Res:
    attr = unpack_post_op_attr(u)
    if st != 0:
        return Res(attr=attr)
    return Res(attr=attr, linkmax=u.u32(), name_max=u.u32(), no_trunc=u.bool(),
               chown_restricted=u.bool(), case_insensitive=u.bool(), case_preserving=u.bool())


def d_commit(u: Unpacker, st: int) -> Res:
    wcc = unpack_wcc_data(u)
    return Res(wcc=wcc, verf=u.fopaque(8) if st == 0 else None)


PROC_NAMES = {
    NFSPROC3_NULL: "NULL", NFSPROC3_GETATTR: "GETATTR", NFSPROC3_SETATTR: "SETATTR",
    NFSPROC3_LOOKUP: "LOOKUP", NFSPROC3_ACCESS: "ACCESS", NFSPROC3_READLINK: "READLINK",
    NFSPROC3_READ: "READ", NFSPROC3_WRITE: "WRITE", NFSPROC3_CREATE: "CREATE",
    NFSPROC3_MKDIR: "MKDIR", NFSPROC3_SYMLINK: "SYMLINK", NFSPROC3_MKNOD: "MKNOD",
    NFSPROC3_REMOVE: "REMOVE", NFSPROC3_RMDIR: "RMDIR", NFSPROC3_RENAME: "RENAME",
    NFSPROC3_LINK: "LINK", NFSPROC3_READDIR: "READDIR", NFSPROC3_READDIRPLUS: "READDIRPLUS",
    NFSPROC3_FSSTAT: "FSSTAT", NFSPROC3_FSINFO: "FSINFO", NFSPROC3_PATHCONF: "PATHCONF",
    NFSPROC3_COMMIT: "COMMIT",
}


def wait_for_port(host: str, port: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False
