"""Big directories stream through NFSv3 READDIR/READDIRPLUS and NFSv4.1 READDIR with
memory that does not grow with their size, and a listing interrupted by creates and
removes returns every name that stayed exactly once (gateway/src/fs/imp/listing.rs,
docs/architecture.md "Directory listings").

Entries are made straight in the store where it allows (files in the fs root; objects
put by an S3 client), through pipelined NFS CREATEs for the memory backend. Sizes:
100,000 on fs (`E2E_BIG_DIR_FS_N`); 20,000 on memory (`E2E_BIG_DIR_N`); 2,000 on s3
(`E2E_BIG_DIR_S3_N`: moto lists a large bucket slowly, 20,000 took over 300 s on a loaded
machine). The RSS bound (`E2E_BIG_DIR_RSS_KIB`, 24 MiB) is what a listing may hold
whatever the directory's size: the cursor table (4 MiB, a page in three blocks), the fs
windows (16,384 names, three blocks each), the open-object cache (which a big listing
no longer fills) and the allocator's arenas around them. Listing 100,000 fs entries once
over NFSv3 grew the gateway by 12 MiB (20 MiB before those changes), 1,000,000 by nothing
more (docs/performance.md "Big directories and trees").
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

import nfsclient as N
from nfsclient import Packer, Unpacker
from test_deleg import OP_PUTROOTFH, OP_SEQUENCE, V4Client

FS_N = int(os.environ.get("E2E_BIG_DIR_FS_N", "100000"))
MEM_N = int(os.environ.get("E2E_BIG_DIR_N", "20000"))
S3_N = int(os.environ.get("E2E_BIG_DIR_S3_N", "2000"))
OP_READDIR = 26
# RSS growth allowed while listing (KiB). A materialised listing of 100,000 names
# (names, keys, the de-duplication set, the sorted backend pages) takes several
# times this.
RSS_SLACK_KIB = int(os.environ.get("E2E_BIG_DIR_RSS_KIB", str(24 * 1024)))


def names(n: int) -> list:
    return [f"entry-{i:07d}" for i in range(n)]


def fill(gw, n: int) -> None:
    """`n` empty files in the export root, made in the store itself where it can."""
    if gw.backend == "fs":
        for name in names(n):
            (gw.data_dir / name).touch()
    elif gw.backend == "s3":
        s3 = gw.s3_client()
        pre = gw.s3_prefix
        with ThreadPoolExecutor(16) as ex:
            list(ex.map(lambda k: s3.put_object(Bucket=gw.bucket, Key=pre + k, Body=b""), names(n)))
    else:
        with gw.client() as c:
            root = c.mount("/")
            calls = [(N.NFSPROC3_CREATE, N.a_create(root, k), N.d_create) for k in names(n)]
            for r in c.pipeline(calls, window=64):
                r.check("CREATE")


def v4_readdir_all(gw) -> list:
    """Every name of the export root through NFSv4.1 READDIR (no attributes)."""
    c = V4Client("127.0.0.1", gw.port)
    c.sock.settimeout(120)  # a page of a moto bucket can take seconds on a loaded machine
    assert c.exchange_id() == 0 and c.create_session() == 0 and c.reclaim_complete() == 0
    out, cookie, verf = [], 0, b"\0" * 8
    while True:
        ops = c.sequence() + Packer().u32(OP_PUTROOTFH).get()
        ops += Packer().u32(OP_READDIR).u64(cookie).fopaque(verf, 8).u32(8192).u32(32768).u32(0).get()
        u = c.compound(ops, 3)
        assert c.status == 0, f"READDIR failed: {c.status}"
        c.skip_sequence(u)
        assert (u.u32(), u.u32()) == (OP_PUTROOTFH, 0)
        assert (u.u32(), u.u32()) == (OP_READDIR, 0)
        verf = u.fopaque(8)
        while u.bool():
            cookie = u.u64()
            out.append(u.string())
            for _ in range(u.u32()):
                u.u32()
            u.opaque()
        if u.bool():
            return out


def v3_names(c, root, plus: bool) -> list:
    ents = c.readdir_all(root, count=32768, plus=plus, maxcount=65536)
    if plus:
        # READDIRPLUS: every entry carries its attributes and handle.
        assert all(e.attr is not None and e.fh for e in ents if e.name not in (".", ".."))
    return [e.name for e in ents if e.name not in (".", "..")]


@pytest.mark.parametrize("kind", ["fs", "memory", "s3"])
def test_big_directory_lists_exactly_with_bounded_memory(gw_factory, kind):
    gw = gw_factory(kind)
    n = {"fs": FS_N, "memory": MEM_N, "s3": S3_N}[kind]
    fill(gw, n)
    want = names(n)
    with gw.client() as c:
        root = c.mount("/")
        # A first short listing warms what any listing needs (pools, caches).
        c.readdir(root, count=4096).check("READDIR")
        before = gw.rss_kib()
        got = v3_names(c, root, plus=False)
        assert sorted(got) == want and len(got) == n
        got4 = v4_readdir_all(gw)
        assert sorted(got4) == want and len(got4) == n
        grown = gw.rss_kib() - before
        assert grown < RSS_SLACK_KIB, f"RSS grew {grown} KiB listing {n} entries"
        # READDIRPLUS records a handle per entry (the handle table's own bounded
        # cache, state.handle_cache_entries): checked for exactness only.
        got = v3_names(c, root, plus=True)
        assert sorted(got) == want


@pytest.mark.parametrize("kind", ["fs", "memory"])
def test_interrupted_listing_returns_staying_names_once(gw_factory, kind):
    gw = gw_factory(kind)
    n = 5000
    fill(gw, n)
    staying = set(names(n))
    seen: list = []
    with gw.client() as c:
        root = c.mount("/")
        cookie, verf, round_ = 0, N.ZERO_VERF, 0
        while True:
            r = c.readdirplus(root, cookie, verf, 2048, 8192).check("READDIRPLUS")
            seen += [e.name for e in r.entries if e.name not in (".", "..")]
            if r.eof:
                break
            cookie, verf, round_ = r.entries[-1].cookie, r.cookieverf, round_ + 1
            # Removes behind and ahead of the resume point, creates everywhere.
            for k in (round_ * 37 % n, (round_ * 101 + n // 2) % n):
                name = f"entry-{k:07d}"
                if name in staying:
                    staying.discard(name)
                    c.remove(root, name).check("REMOVE")
            for name in (f"a-{round_}", f"entry-{round_ * 13 % n:07d}x", f"z-{round_}"):
                c.create(root, name).check("CREATE")
    assert len(seen) == len(set(seen)), "a name was listed twice"
    missing = staying - set(seen)
    assert not missing, f"{len(missing)} staying names missing, e.g. {sorted(missing)[:3]}"
