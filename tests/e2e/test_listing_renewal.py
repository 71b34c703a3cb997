"""A big directory listed again past the reactor's 1 s TTL (issue 30, docs/performance.md
"the readdir cliff"): the reactor's complete listing of a directory the gateway filled
answers again once a worker's first page proves the directory's names unchanged (the
`fs` backend's window, `cache_dirs::Listings::renew`), so the rest of the listing costs
no store listing and a listing past the TTL waits for no worker (the first page is
listed again behind the reply, as cached attributes are revalidated); and a name made
or removed behind the gateway's back is listed exactly once that page is back, never
hidden by a renewed listing.
"""
import os
import time

from conftest import free_port
from statsutil import scrape

import nfsclient as N

FILES = 1300
# Replies of about 100 entries (`maxcount`): a 1,302-entry listing is 13 calls. The
# revalidation behind the first one lists 1,024 entries ahead (`LIST_AHEAD`: no client
# waits for it), which is not the whole directory, so only the digest of its names
# (`DirPage::names`) can renew the run: 2 store calls (the first page's are two: the
# first call's items begin with the directory's own marker, which a listing skips),
# after which every call is the reactor's; without the renewal the page replaces the
# run and every call past its 1,024 entries is a worker's page and a store listing (5).
MAXCOUNT = 16384


def lists(port: int) -> float:
    return scrape(port).sum("nfsgw_backend_duration_seconds_count", backend="fs", op="list")


def names(c, dirfh) -> list:
    got = [e.name for e in c.readdir_all(dirfh, plus=True, maxcount=MAXCOUNT)]
    got = [n.decode() if isinstance(n, bytes) else n for n in got]
    assert len(got) == len(set(got)), "a name listed twice"
    return sorted(n for n in got if n not in (".", ".."))


def past_ttl_with_fresh_attributes(c, fhs):
    """Past the runs' TTL, then every file's attributes fetched again (a stat of each,
    as `ls -l` or bench md's stat phase): the attribute table holds them young."""
    time.sleep(1.3)
    for _ in range(2):  # the first GETATTR past the TTL may answer while it revalidates
        for fh in fhs:
            c.getattr(fh).check("GETATTR")
        time.sleep(0.2)


def test_a_big_directory_listed_again_past_the_ttl(gw_factory):
    port = free_port()
    g = gw_factory(backend="fs", extra={"stats": {"listen": f"127.0.0.1:{port}"}})
    with g.client() as c:
        root = c.mount("/")
        d = c.mkdir(root, "big").check("MKDIR").fh
        want = [f"f{i:04}" for i in range(FILES)]
        fhs = [c.create(d, n, 0o644).check("CREATE").fh for n in want]
        assert names(c, d) == want, "the listing the creates kept"

        # Past the TTL: the listing's first call is answered from the reactor's run
        # while a worker lists the first page again behind it (stale-while-revalidate,
        # `cache::STALE_MAX`), whose names renew the run: one worker page in all.
        past_ttl_with_fresh_attributes(c, fhs)
        l0 = lists(port)
        assert names(c, d) == want
        deadline = time.monotonic() + 3
        while lists(port) - l0 < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        l1 = lists(port)
        assert l1 - l0 == 2, f"{l1 - l0} store listing calls for a renewed listing (2; 5 without it)"

        # A name made behind the gateway's back, after the renewal: every other entry's
        # attributes stay young in the table, so only the names' proof can tell.
        outside = g.data_dir / "big"
        (outside / "zz-outside").write_bytes(b"x")
        want2 = sorted(want + ["zz-outside"])
        seen_within_a_revalidation(c, d, fhs, want, want2)
        # And one removed: the names differ again.
        os.unlink(outside / "f0150")
        want3 = [n for n in want2 if n != "f0150"]
        seen_within_a_revalidation(c, d, fhs[:150] + fhs[151:], want2, want3)

        # The workers' pages made a new run; listed again now (young), the same.
        assert names(c, d) == want3


def seen_within_a_revalidation(c, d, fhs, before, after):
    """Past the TTL, with every file's attributes young: as for attributes, a listing
    call past the TTL may still be answered from what the reactor held while ONE
    revalidation runs; the change shows as soon as it is back, and never later than
    ATTR_TTL + STALE_MAX (3 s) after the run's last renewal."""
    past_ttl_with_fresh_attributes(c, fhs)
    deadline = time.monotonic() + 3.5
    while (got := names(c, d)) != after:
        assert got == before, "neither the names before nor after the change"
        assert time.monotonic() < deadline, "a change behind the gateway hidden by its listing"
        # The files' attributes kept young, so no entry's expiry sends a page to the
        # workers: only the proof of the names may end what the reactor shows.
        for fh in fhs:
            c.getattr(fh).check("GETATTR")
