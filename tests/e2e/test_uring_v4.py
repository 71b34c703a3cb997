"""backend.io = "uring" for NFSv4.1: `SEQUENCE, PUTFH, READ`,
`SEQUENCE, PUTFH, WRITE [, GETATTR]` (UNSTABLE) and `SEQUENCE, PUTFH, COMMIT` of fs
files run on the reactor's io_uring (server/direct/v4.rs, nfs4/fast_io.rs), not on a
backend worker: `nfsgw_worker_data_jobs_total` stays put, the data is byte-exact,
READ replies are byte-identical to the worker path's (io = "workers"), a
retransmission on the same slot and sequence id gets the cached reply (RFC 8881
§2.10.6.1.3), a bad or closed stateid gets the worker's error, and kill -9 after
COMMIT loses nothing.

The raw NFSv4.1 client is test_deleg.py's (one TCP connection, one session). Write
delegations are on by default (docs/delegations.md "Default"): the ring tests open with
OPEN4_SHARE_ACCESS_WANT_NO_DELEG (RFC 8881 §18.16.3), as bench does, and get
OPEN_DELEGATE_NONE_EXT / WND4_NOT_WANTED; one test takes the write delegation an OPEN
without a preference gets and checks the holder's path: its READ/WRITE go to a worker
(the file is held in the reactors' caches), and an NFSv3 GETATTR is answered from the
holder's CB_GETATTR reply (§10.4.3) without a recall.
"""
from __future__ import annotations

import os
import signal
import struct
import time

import pytest

import nfsclient as N
from nfsclient import Packer, Unpacker
from conftest import free_port
from statsutil import scrape
from test_deleg import (V4Client, OP_GETFH, OP_OPEN, OP_PUTFH, OP_PUTROOTFH, OP_SEQUENCE,
                        wait_metric)

OP_CLOSE, OP_COMMIT, OP_GETATTR, OP_READ, OP_WRITE = 4, 5, 9, 25, 38
UNSTABLE4, DATA_SYNC4, FILE_SYNC4 = 0, 1, 2
NFS4ERR_BAD_STATEID, NFS4ERR_RETRY_UNCACHED_REP, NFS4ERR_DELAY = 10025, 10068, 10008
NFS4ERR_FBIG = 27
ANON = b"\0" * 16
# GETATTR after WRITE as Linux asks it: change, size, time_metadata, time_modify.
POST_ATTRS = ((1 << 3) | (1 << 4), (1 << 20) | (1 << 21))
SIZE = 3 * (1 << 20) + 12345
# (offset, count): small and large, unaligned, the end of the file, at and past it, 0.
# The session's ca_maxresponsesize is 1 MiB (test_deleg's CREATE_SESSION): larger
# READs get NFS4ERR_REP_TOO_BIG from the worker, checked once.
BIG = (1 << 20) - 4096
READS = [(0, 1), (1, 4096), (4095, 5000), (65536, 65536), (100, 65537), (0, BIG),
         ((1 << 20) + 3, BIG), (SIZE - 10, 4096), (SIZE - 70000, BIG), (SIZE, 100),
         (SIZE + 100, 10), (5, 0), (2 << 20, BIG), ((1 << 64) - 1, 100), ((1 << 63) - 1, 1 << 30),
         (0, 1 << 20)]
NFS4ERR_REP_TOO_BIG = 10066
# OPEN (RFC 8881 §18.16): share access BOTH, with or without WANT_NO_DELEG; the
# delegation types of the reply and WND4_NOT_WANTED.
SHARE_BOTH, WANT_NO_DELEG = 3, 0x0400
OPEN_DELEGATE_NONE, OPEN_DELEGATE_WRITE, OPEN_DELEGATE_NONE_EXT = 0, 2, 3
WND4_NOT_WANTED = 0
OP_DELEGRETURN = 8


def _gw(gw_factory, io):
    port = free_port()
    g = gw_factory(backend="fs", backend_opts={"io": io},
                   extra={"stats": {"listen": f"127.0.0.1:{port}"}})
    g.stats_port = port
    return g


def _data_jobs(g) -> float:
    return scrape(g.stats_port).sum("nfsgw_worker_data_jobs_total")


class Client(V4Client):
    """V4Client plus raw records (for retransmissions) and the data operations."""

    def __init__(self, g):
        super().__init__(g.host, g.port)
        st = self.exchange_id()
        if st != 0:
            pytest.skip(f"NFSv4.1 sessions not served (EXCHANGE_ID: {st})")
        assert self.create_session() == 0
        assert self.reclaim_complete() == 0

    def record(self, ops: bytes, nops: int) -> bytes:
        self.xid += 1
        p = Packer().u32(self.xid).u32(0).u32(2).u32(100003).u32(4).u32(1)
        p.u32(1).opaque(self.cred).u32(0).u32(0)
        p.opaque(b"uring-v4").u32(1).u32(nops).raw(ops)
        return p.get()

    def call(self, rec: bytes) -> bytes:
        """Sends one call record; returns the reply record (callbacks answered)."""
        self.send_record(rec)
        rep = self.recv_reply()
        assert rep[:4] == rec[:4], "reply to this call"
        return rep

    def recv_reply(self) -> bytes:
        """The next REPLY record; CALLs the gateway sends meanwhile (its CB_NULL probe
        of the back channel may come late) are answered."""
        while True:
            rep = self.recv_record()
            if struct.unpack(">I", rep[4:8])[0] == 0:
                self.answer_callback(rep)
                continue
            return rep

    @staticmethod
    def results(rep: bytes) -> Unpacker:
        """At the first result; `.status` on the Unpacker is the COMPOUND status."""
        u = Unpacker(rep, 8)
        assert u.u32() == 0
        u.u32()
        u.opaque()
        assert u.u32() == 0
        u.status = u.u32()
        u.opaque()
        u.u32()
        return u

    def putfh(self, fh: bytes) -> bytes:
        return self.sequence() + Packer().u32(OP_PUTFH).opaque(fh).get()

    def read_rec(self, fh, off, count, sid=ANON) -> bytes:
        return self.record(self.putfh(fh) + Packer().u32(OP_READ).fopaque(sid, 16)
                           .u64(off).u32(count).get(), 3)

    def write_rec(self, fh, off, data, sid, stable=UNSTABLE4, getattr=False) -> bytes:
        ops = self.putfh(fh) + Packer().u32(OP_WRITE).fopaque(sid, 16).u64(off).u32(stable) \
            .opaque(data).get()
        if getattr:
            p = Packer().u32(OP_GETATTR).u32(len(POST_ATTRS))
            for w in POST_ATTRS:
                p.u32(w)
            ops += p.get()
        return self.record(ops, 4 if getattr else 3)

    def commit_rec(self, fh) -> bytes:
        return self.record(self.putfh(fh) + Packer().u32(OP_COMMIT).u64(0).u32(0).get(), 3)

    @staticmethod
    def skip_putfh(u: Unpacker) -> None:
        V4Client.skip_sequence(u)
        assert (u.u32(), u.u32()) == (OP_PUTFH, 0)

    def read(self, fh, off, count, sid=ANON):
        u = self.results(self.call(self.read_rec(fh, off, count, sid)))
        assert u.status == 0, f"READ({off}, {count}): {u.status}"
        self.skip_putfh(u)
        assert (u.u32(), u.u32()) == (OP_READ, 0)
        eof = u.bool()
        return u.opaque(), eof

    def write(self, fh, off, data, sid, getattr=False, stable=UNSTABLE4):
        """(count, committed, verifier, (change, size, ctime, mtime) or None)."""
        u = self.results(self.call(self.write_rec(fh, off, data, sid, stable=stable,
                                                  getattr=getattr)))
        assert u.status == 0, f"WRITE({off}, {len(data)}): {u.status}"
        self.skip_putfh(u)
        assert (u.u32(), u.u32()) == (OP_WRITE, 0)
        count, committed, verf = u.u32(), u.u32(), u.fopaque(8)
        post = None
        if getattr:
            assert (u.u32(), u.u32()) == (OP_GETATTR, 0)
            assert tuple(u.u32() for _ in range(u.u32())) == POST_ATTRS
            a = Unpacker(u.opaque())
            post = (a.u64(), a.u64(), (a.u64(), a.u32()), (a.u64(), a.u32()))
        return count, committed, verf, post

    def getattr(self, fh):
        """POST_ATTRS of `fh` by `SEQUENCE, PUTFH, GETATTR` (a worker's or the read
        cache's answer; the ring takes no GETATTR of its own)."""
        p = Packer().u32(OP_GETATTR).u32(len(POST_ATTRS))
        for w in POST_ATTRS:
            p.u32(w)
        u = self.results(self.call(self.record(self.putfh(fh) + p.get(), 3)))
        assert u.status == 0
        self.skip_putfh(u)
        assert (u.u32(), u.u32()) == (OP_GETATTR, 0)
        assert tuple(u.u32() for _ in range(u.u32())) == POST_ATTRS
        a = Unpacker(u.opaque())
        return (a.u64(), a.u64(), (a.u64(), a.u32()), (a.u64(), a.u32()))

    def commit(self, fh) -> bytes:
        u = self.results(self.call(self.commit_rec(fh)))
        assert u.status == 0, f"COMMIT: {u.status}"
        self.skip_putfh(u)
        assert (u.u32(), u.u32()) == (OP_COMMIT, 0)
        return u.fopaque(8)

    def open_rw(self, name: bytes) -> tuple[bytes, bytes]:
        """OPEN for reading and writing with WANT_NO_DELEG: the ring's files are
        never held (a write delegation's holder goes to a worker)."""
        sid, deleg, fh = self.open_both(name, SHARE_BOTH | WANT_NO_DELEG)
        assert deleg == (OPEN_DELEGATE_NONE_EXT, WND4_NOT_WANTED), \
            f"WANT_NO_DELEG: no delegation, and why (§18.16.3): {deleg}"
        return sid, fh

    def open_both(self, name: bytes, share: int):
        """(open stateid, delegation, fh): the delegation is (NONE_EXT, why), (NONE,
        None) or (WRITE, its stateid)."""
        ops = self.sequence() + Packer().u32(OP_PUTROOTFH).get()
        ops += (Packer().u32(OP_OPEN).u32(0).u32(share).u32(0)       # seqid, access, DENY_NONE
                .u64(self.clientid).opaque(b"owner-rw").u32(0)      # owner, NOCREATE
                .u32(0).opaque(name).get())                          # CLAIM_NULL
        ops += Packer().u32(OP_GETFH).get()
        u = self.compound(ops, 4)
        assert self.status == 0, f"OPEN failed: {self.status}"
        self.skip_sequence(u)
        assert (u.u32(), u.u32()) == (OP_PUTROOTFH, 0)
        assert (u.u32(), u.u32()) == (OP_OPEN, 0)
        sid = u.fopaque(16)
        u.bool(), u.u64(), u.u64()
        u.u32()
        for _ in range(u.u32()):
            u.u32()
        dtype = u.u32()
        assert dtype in (OPEN_DELEGATE_NONE, OPEN_DELEGATE_WRITE, OPEN_DELEGATE_NONE_EXT), dtype
        deleg = (dtype, None)
        if dtype == OPEN_DELEGATE_NONE_EXT:
            why = u.u32()
            assert why == WND4_NOT_WANTED, why   # no CONTENTION/RESOURCE bool follows
            deleg = (dtype, why)
        elif dtype == OPEN_DELEGATE_WRITE:
            deleg = (dtype, write_delegation(u))
        assert (u.u32(), u.u32()) == (OP_GETFH, 0)
        return sid, deleg, u.opaque()

    def delegreturn(self, fh: bytes, sid: bytes) -> int:
        self.compound(self.putfh(fh) + Packer().u32(OP_DELEGRETURN).fopaque(sid, 16).get(), 3)
        return self.status

    def close(self, fh, sid) -> int:
        self.compound(self.putfh(fh) + Packer().u32(OP_CLOSE).u32(0).fopaque(sid, 16).get(), 3)
        return self.status


def write_delegation(u) -> bytes:
    """open_write_delegation4 (RFC 8881 §18.16.2) after its type: the stateid; the
    recall flag, nfs_space_limit4 and nfsace4 read past."""
    sid = u.fopaque(16)
    u.bool()
    if u.u32() == 1:      # NFS_LIMIT_SIZE
        u.u64()
    else:                 # NFS_LIMIT_BLOCKS
        u.u32(), u.u32()
    u.u32(), u.u32(), u.u32()
    u.opaque()
    return sid


def _masked(rep: bytes) -> bytes:
    """A READ reply without what differs between two gateways: the XID and the
    session id (SEQUENCE4resok's first field)."""
    u = Client.results(rep)
    at = u.pos + 8   # SEQUENCE's opcode and status
    return rep[4:at] + rep[at + 16:]


def _v3_file(g, name, data):
    c = g.client()
    root = c.mount("/")
    fh = c.create(root, name, 0o644).check().fh
    if data:
        c.write_all(fh, data)
    return c, fh


def _script(g):
    """What both io modes answer: READ replies of the same file (masked)."""
    data = bytes((i * 7 + i // 4096) % 251 for i in range(SIZE))
    _, fh = _v3_file(g, "big", data)
    c = Client(g)
    c.read(fh, 0, 100)   # a worker READ teaches the reactor the file
    before, t0 = _data_jobs(g), time.monotonic()
    out = []
    for off, count in READS:
        rep = c.call(c.read_rec(fh, off, count))
        got = c.results(rep)
        if count == 1 << 20:
            assert got.status == NFS4ERR_REP_TOO_BIG
            out.append(_masked(rep))
            continue
        assert got.status == 0
        out.append(_masked(rep))
        body, eof = c.read(fh, off, count)
        assert body == data[off:off + count], f"READ({off}, {count})"
        assert eof == (off + len(body) >= SIZE), f"eof of READ({off}, {count})"
    return out, _data_jobs(g) - before, time.monotonic() - t0


@pytest.mark.serial  # time bounds: needs a quiet CPU (tests/README.md)
def test_v4_reads_on_the_ring_are_the_workers_bytes(gw_factory):
    gu = _gw(gw_factory, "uring")
    ring, jobs, elapsed = _script(gu)
    # The one too big for the session (the worker answers it), and at most one
    # refresh per second of the file table entry.
    assert jobs <= 1 + int(elapsed) + 1, f"{jobs} READs ran on workers"
    gw = _gw(gw_factory, "workers")
    workers, jobs, _ = _script(gw)
    assert jobs >= len(READS)
    for (off, count), a, b in zip(READS, ring, workers):
        assert a == b, f"READ({off}, {count}): the ring's reply differs from the worker's"


@pytest.mark.serial  # time bounds: needs a quiet CPU (tests/README.md)
def test_v4_writes_commit_on_the_ring(gw_factory):
    g = _gw(gw_factory, "uring")
    v3, fh = _v3_file(g, "w", b"")
    c = Client(g)
    sid, fh4 = c.open_rw(b"w")
    assert fh4 == fh
    # The first WRITE runs on a worker (the gateway drops the object's stored times);
    # it teaches the reactor the file.
    _, _, _, first = c.write(fh, 0, b"x" * 100, sid, getattr=True)
    before = _data_jobs(g)
    data = os.urandom(2 * (1 << 20) + 777)
    t0 = time.monotonic()
    posts, verfs = [], set()
    for k, off in enumerate(range(0, len(data), 65536)):
        count, committed, verf, post = c.write(fh, off, data[off:off + 65536], sid,
                                               getattr=k % 2 == 0)
        assert (count, committed) == (len(data[off:off + 65536]), UNSTABLE4)
        verfs.add(verf)
        if post:
            # Writes in order: the file ends where this one ended.
            assert post[1] == off + count, "size after the WRITE"
            posts.append(post)
            if k % 8 == 0:
                # The ring's post-write attributes are the file model's (what a
                # worker's GETATTR answers next), change attribute included.
                assert c.getattr(fh) == post, f"GETATTR after WRITE({off})"

    verfs.add(c.commit(fh))
    for off, count in [(0, BIG), (12345, 70000), (len(data) - 5, 100)]:
        body, _ = c.read(fh, off, count, sid)
        assert body == data[off:off + count]
    elapsed = time.monotonic() - t0
    jobs = _data_jobs(g) - before
    # Entries live a second: at most one worker call per second refreshes them.
    assert jobs <= int(elapsed) + 2, f"{jobs} data COMPOUNDs ran on workers"
    assert len(verfs) == 1, "one write verifier per run, v4 WRITE and COMMIT alike"
    # The v3 COMMIT verifier of the same run is the same.
    assert v3.commit(fh).check().verf in verfs
    # The change attribute moves with the writes, never back (ctime-based).
    changes = [first[0]] + [p[0] for p in posts]
    assert changes == sorted(changes) and changes[-1] != changes[0]
    assert (g.data_dir / "w").read_bytes() == data
    # A worker's GETATTR (v3) agrees with the post-write attributes the ring gave.
    a = v3.getattr(fh).check().attr
    assert a.size == len(data)
    assert a.mtime >= posts[-1][3]


def test_v4_retransmissions_get_the_cached_reply(gw_factory):
    g = _gw(gw_factory, "uring")
    _, fh = _v3_file(g, "r", os.urandom(200000))
    c = Client(g)
    sid, _ = c.open_rw(b"r")
    c.write(fh, 0, b"warm", sid)
    before = _data_jobs(g)
    # A WRITE on the ring, then the same record again (same slot, same seqid): the
    # same bytes, not a second write (the file keeps the first data).
    rec = c.write_rec(fh, 10, b"A" * 1000, sid)
    first = c.call(rec)
    assert c.results(first).status == 0
    again = c.call(rec)
    assert again == first, "a retransmitted WRITE gets the cached reply"
    # A small READ: cached (fits ca_maxresponsesize_cached, 8192 here).
    rec = c.read_rec(fh, 5, 2000)
    first = c.call(rec)
    assert c.call(rec) == first
    # A large one is not cached: NFS4ERR_RETRY_UNCACHED_REP, as the worker answers.
    rec = c.read_rec(fh, 0, 100000)
    assert c.results(c.call(rec)).status == 0
    assert c.results(c.call(rec)).status == NFS4ERR_RETRY_UNCACHED_REP
    # A COMMIT too.
    rec = c.commit_rec(fh)
    first = c.call(rec)
    assert c.results(first).status == 0 and c.call(rec) == first
    # Retransmissions go to a worker (4 here: it replays or answers the error); the
    # new requests ran on the ring (one refresh of the file's entry allowed).
    assert _data_jobs(g) - before <= 4 + 1, "the data calls ran on the ring"
    assert (g.data_dir / "r").read_bytes()[10:1010] == b"A" * 1000
    # The session goes on: the next sequence id is a new request.
    body, _ = c.read(fh, 10, 1000)
    assert body == b"A" * 1000


def test_v4_pipelined_same_slot_gets_delay_or_the_reply(gw_factory):
    """A retransmission that arrives while the WRITE is still in flight on the ring:
    NFS4ERR_DELAY (the slot is busy, RFC 8881 §2.10.6.2) or, if the first finished
    already, the cached reply — never a second execution or a lost reply."""
    g = _gw(gw_factory, "uring")
    _, fh = _v3_file(g, "d", b"")
    c = Client(g)
    sid, _ = c.open_rw(b"d")
    c.write(fh, 0, b"warm", sid)
    delays = 0
    for k in range(20):
        rec = c.write_rec(fh, k << 19, os.urandom(1 << 19), sid)
        c.send_record(rec)
        c.send_record(rec)
        # Either order: the DELAY may leave first.
        a, b = sorted((c.recv_reply(), c.recv_reply()), key=lambda r: c.results(r).status)
        assert c.results(a).status == 0
        st = c.results(b).status
        assert st == NFS4ERR_DELAY or b == a, st
        delays += st == NFS4ERR_DELAY
    assert (g.data_dir / "d").stat().st_size == 20 << 19
    print(f"{delays} of 20 retransmissions arrived while the WRITE was in flight")


def test_v4_bad_and_closed_stateids_get_the_workers_error(gw_factory):
    g = _gw(gw_factory, "uring")
    _, fh = _v3_file(g, "s", b"")
    c = Client(g)
    sid, _ = c.open_rw(b"s")
    c.write(fh, 0, b"warm", sid)
    c.write(fh, 0, b"ring", sid)
    bogus = bytes(4) + os.urandom(12)
    for rec in (c.write_rec(fh, 0, b"nope", bogus), c.read_rec(fh, 0, 10, bogus)):
        assert c.results(c.call(rec)).status == NFS4ERR_BAD_STATEID
    assert c.close(fh, sid) == 0
    st = c.results(c.call(c.write_rec(fh, 0, b"closed", sid))).status
    assert st in (NFS4ERR_BAD_STATEID, 10024), st   # BAD_STATEID or OLD_STATEID
    assert (g.data_dir / "s").read_bytes() == b"ring"
    # Offsets near 2^63 and 2^64: the worker's NFS4ERR_FBIG (offset + count past
    # the largest file), never a panic or a wrapped offset.
    sid2, _ = c.open_rw(b"s")
    for off in ((1 << 63) - 2, (1 << 64) - 2):
        assert c.results(c.call(c.write_rec(fh, off, b"four", sid2))).status == NFS4ERR_FBIG
    assert (g.data_dir / "s").read_bytes() == b"ring"
    # The session is not wedged by any of that.
    body, _ = c.read(fh, 0, 4)
    assert body == b"ring"


def test_v4_kill9_after_commit_loses_nothing(gw_factory):
    g = _gw(gw_factory, "uring")
    _, fh = _v3_file(g, "k", b"")
    c = Client(g)
    sid, _ = c.open_rw(b"k")
    c.write(fh, 0, b"y" * 10, sid)
    committed = os.urandom(3 << 20)
    before = _data_jobs(g)
    for off in range(0, len(committed), 262144):
        c.write(fh, off, committed[off:off + 262144], sid)
    verf = c.commit(fh)
    assert _data_jobs(g) - before <= 2
    # More staged data, then the process dies without a chance to sync.
    for off in range(0, 1 << 20, 262144):
        c.write(fh, len(committed) + off, os.urandom(262144), sid)
    g.restart(sig=signal.SIGKILL)
    v3 = g.client()
    fh = v3.lookup_path(v3.mount("/"), "k")
    assert v3.read_all(fh)[:len(committed)] == committed
    # (v3: v4 OPENs wait for the grace period after a restart.)
    v3.write(fh, 0, committed[:100], stable=N.UNSTABLE).check()
    assert v3.commit(fh).check().verf != verf, "a new run has a new verifier"


@pytest.mark.serial  # time bounds: needs a quiet CPU (tests/README.md)
def test_v4_stable_writes_on_the_ring_survive_kill9(gw_factory):
    """FILE_SYNC4 / DATA_SYNC4 WRITEs (what Linux sends for a one-WRITE flush) run on
    the ring with the sync linked: answered only once durable, so every byte of an
    answered stable WRITE survives SIGKILL with no COMMIT."""
    g = _gw(gw_factory, "uring")
    _, fh = _v3_file(g, "s", b"")
    c = Client(g)
    sid, _ = c.open_rw(b"s")
    c.write(fh, 0, b"z" * 10, sid)
    data = os.urandom(1 << 20)
    before = _data_jobs(g)
    t0 = time.monotonic()
    for k, off in enumerate(range(0, len(data), 131072)):
        how = FILE_SYNC4 if k % 2 == 0 else DATA_SYNC4
        count, committed, _, post = c.write(fh, off, data[off:off + 131072], sid,
                                            stable=how, getattr=k % 3 == 0)
        assert count == 131072 and committed >= how, (count, committed, how)
        if post:
            assert post[1] == off + count, "size after the WRITE"
    jobs = _data_jobs(g) - before
    assert jobs <= int(time.monotonic() - t0) + 1, f"{jobs} stable WRITEs ran on workers"
    g.restart(sig=signal.SIGKILL)
    v3 = g.client()
    fh = v3.lookup_path(v3.mount("/"), "s")
    assert v3.read_all(fh) == data


@pytest.mark.serial  # time bounds: needs a quiet CPU (tests/README.md)
@pytest.mark.parametrize("transport", ["tcp", "rdma"])
def test_v4_bench_on_the_ring_verified(gw_factory, transport):
    """`bench --nfs 4.1` (sequential then random UNSTABLE writes and a COMMIT, random
    and sequential reads, every byte verified) over TCP and RPC-over-RDMA (WRITE data
    from read chunks, READ data into write chunks from the ring's reply): the data
    COMPOUNDs stay off the workers, apart from the file's first ones and a refresh
    per second of its entry."""
    from statsutil import bench, total
    port = free_port()
    g = gw_factory(backend="fs+rdma", backend_opts={"io": "uring"},
                   extra={"stats": {"listen": f"127.0.0.1:{port}"}})
    target = (f"tcp://127.0.0.1:{g.port}" if transport == "tcp"
              else f"rdma://127.0.0.1:{g.rdma_port}")
    before = scrape(port).sum("nfsgw_worker_data_jobs_total")
    t0 = time.monotonic()
    ops = 0
    for workload, bs, n in [("seqwrite", 1 << 19, 16), ("randwrite", 65536, 600),
                            ("randread", 65536, 600), ("randread", 4096, 600),
                            ("seqread", 1 << 19, 16)]:
        out = bench(target, "--nfs", "4.1", "--workload", workload, "--bs", str(bs),
                    "--ops", str(n), "--qd", "8", "--file-size", "8m",
                    "--file", f"v4-{transport}.dat", "--verify")
        assert total(out, "ops") == n and total(out, "errors") == 0, out
        ops += n
    elapsed = time.monotonic() - t0
    jobs = scrape(port).sum("nfsgw_worker_data_jobs_total") - before
    print(f"bench v4.1 {transport}: {jobs} of {ops} data COMPOUNDs on workers in {elapsed:.1f} s")
    # Each bench run is a new connection, maybe on another reactor, whose file table
    # learns the file from its first calls (a queue depth's worth, 8); the first
    # WRITEs and those racing with them teach nothing (as for NFSv3); then one
    # refresh per second.
    assert jobs <= 40 + 5 * 8 + 4 * elapsed, f"{jobs} of {ops} data COMPOUNDs on workers"
    assert (g.data_dir / f"v4-{transport}.dat").stat().st_size == 8 << 20


def test_v4_write_delegation_holder_goes_to_workers_and_answers_cb_getattr(gw_factory):
    """Write delegations at the default (on): an OPEN for BOTH with no preference, once
    the back channel answered its CB_NULL, gets OPEN_DELEGATE_WRITE (RFC 8881 §10.4).
    The file is then held in the reactors' caches: the holder's READ and WRITE run on
    workers, byte-exact. An NFSv3 GETATTR of it asks the holder by CB_GETATTR (§10.4.3,
    §20.1) and reports the size the holder answered (bytes it holds and never sent),
    with no CB_RECALL; after DELEGRETURN the ring serves the file again."""
    g = _gw(gw_factory, "uring")
    v3, fh = _v3_file(g, "held", b"")
    c = Client(g)
    c.pump(lambda: ("CB_NULL", None) in c.callbacks)
    wait_metric(g.stats_port, "nfsgw_callbacks_total", 1, result="replied")
    sid, (dtype, dsid), fh4 = c.open_both(b"held", SHARE_BOTH)
    assert fh4 == fh and dtype == OPEN_DELEGATE_WRITE, dtype
    change0, size0, _, _ = c.getattr(fh)
    assert size0 == 0
    c.hold(fh, size0, change0)

    before = _data_jobs(g)
    data = os.urandom(256 << 10)
    for off in range(0, len(data), 65536):
        c.write(fh, off, data[off:off + 65536], dsid)
        c.note_write(fh, off, 65536)
    body, _ = c.read(fh, 0, len(data), dsid)
    assert body == data
    jobs = _data_jobs(g) - before
    assert jobs >= 5, f"the holder's 4 WRITEs and READ ran on workers ({jobs} data jobs)"

    # Bytes the holder keeps and has not sent (§10.4.3): the server's size is 256 KiB,
    # the holder's 300000.
    c.note_write(fh, len(data), 300000 - len(data))
    recalls = scrape(g.stats_port).sum("nfsgw_delegation_recalls_total", result="sent")
    size = None
    for _ in range(50):
        r = v3.getattr(fh)
        if r.status == N.NFS3ERR_JUKEBOX:
            # The gateway waits 100 ms for the answer; ours comes once we read it.
            c.pump(lambda: any(k == "CB_GETATTR" for k, _ in c.callbacks), timeout=5)
            continue
        size = r.check("GETATTR").attr.size
        break
    assert size == 300000, "the holder's size, from its CB_GETATTR answer"
    ask = next(d for k, d in c.callbacks if k == "CB_GETATTR")
    assert ask["fh"] == fh and ask["bitmap"][0] & 0x18 == 0x18, ask
    assert not any(k == "CB_RECALL" for k, _ in c.callbacks), "GETATTR recalls nothing"
    assert scrape(g.stats_port).sum("nfsgw_delegation_recalls_total", result="sent") == recalls
    assert (g.data_dir / "held").stat().st_size == len(data), "never written to the file"

    # The holder flushes and returns the delegation; the ring serves the file again.
    tail = os.urandom(300000 - len(data))
    c.write(fh, len(data), tail, sid)
    c.commit(fh)
    assert c.delegreturn(fh, dsid) == 0
    c.read(fh, 0, 100, sid)   # a worker READ teaches the reactor the file again
    before = _data_jobs(g)
    for _ in range(8):
        body, _ = c.read(fh, 0, 4096, sid)
        assert body == data[:4096]
    assert _data_jobs(g) - before <= 2, "released: the ring answers again"
    assert v3.read_all(fh) == data + tail
