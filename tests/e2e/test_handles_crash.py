"""Handles across kill -9 under a create/remove/rename storm (fs backend).

The handle table journals every change with one write(2) before the reply and folds
the journal into its index in batches (gateway/src/fs/imp/handles/mod.rs, "Crash
argument"). This kills the gateway mid-storm from several connections, restarts it on
the same state dir and checks, for every handle a client was given: a name that still
exists resolves to the same handle (LOOKUP) and object (GETATTR fileid), and a handle
of a removed or replaced name is STALE, never another file. Two rounds, so the second
replays a journal written after a replay.

A second storm creates and removes in ONE directory from several connections, where
the fs backend's workers share directory fsyncs (backend/fs/dirsync.rs, group commit):
every name whose CREATE was answered, and not removed since, still resolves to the
handle the client was given after the kill, and every answered REMOVE stays removed.
"""

import random
import threading
import time

import nfsclient as N

WORKERS = 4
STORM_S = 2.0


class Worker:
    """One connection's storm in its own directory, with what it was told."""

    def __init__(self, g, dirfh: bytes, seed: int, prefix: str = "n", renames: bool = True):
        self.g, self.dirfh, self.rng = g, dirfh, random.Random(seed)
        self.prefix, self.renames = prefix, renames
        self.live: dict[str, bytes] = {}   # name -> handle, as replied
        self.dead: list[bytes] = []         # handles of removed or replaced names
        self.unsure: list[tuple[bytes, tuple[str, ...]]] = []  # the op in flight at the kill
        self.ops = 0
        self.next = 0
        self.error: BaseException | None = None

    def run(self, stop: threading.Event) -> None:
        try:
            c = self.g.client(timeout=10)
        except OSError:
            return
        try:
            while not stop.is_set():
                self.step(c)
        except (OSError, EOFError, N.RpcError):
            pass  # the kill
        except BaseException as e:  # a wrong reply: reported by the test
            self.error = e
        finally:
            c.close()

    def fresh(self) -> str:
        self.next += 1
        return f"{self.prefix}{self.next}"

    def step(self, c) -> None:
        r = self.rng.random()
        names = list(self.live)
        if r < 0.45 or len(names) < 4:
            name = self.fresh()
            self.unsure = [(b"", (name,))]
            fh = c.create(self.dirfh, name, 0o644).check().fh
            self.live[name] = fh
        elif r < 0.75 or not self.renames:
            name = self.rng.choice(names)
            self.unsure = [(self.live[name], (name,))]
            c.remove(self.dirfh, name).check()
            self.dead.append(self.live.pop(name))
        else:
            a = self.rng.choice(names)
            b = self.rng.choice(names) if self.rng.random() < 0.3 else self.fresh()
            if a == b:
                return
            self.unsure = [(self.live[a], (a, b))] + ([(self.live[b], (b,))] if b in self.live else [])
            c.rename(self.dirfh, a, self.dirfh, b).check()
            if b in self.live:
                self.dead.append(self.live.pop(b))
            self.live[b] = self.live.pop(a)
        self.unsure = []
        self.ops += 1

    def settle(self, c) -> None:
        """After the restart: resolve the op the kill interrupted from what the
        server now says, checking it is one of its two outcomes."""
        for fh, names in self.unsure:
            for n in list(names):
                self.live.pop(n, None)
            if fh:
                self.check_maybe(c, fh, names)
        for n in [n for _, ns in self.unsure for n in ns]:
            lk = c.lookup(self.dirfh, n)
            if lk.ok:
                self.live[n] = lk.fh
        self.unsure = []

    def check_maybe(self, c, fh: bytes, names) -> None:
        ga = c.getattr(fh)
        if ga.status == N.NFS3ERR_STALE:
            return
        assert ga.ok, f"handle of {names}: {ga!r}"
        ok = [n for n in names if (lk := c.lookup(self.dirfh, n)).ok and lk.fh == fh]
        assert ok, f"a handle of {names} resolves to fileid {ga.attr.fileid}, which none of them is"

    def check(self, c) -> None:
        for name, fh in self.live.items():
            lk = c.lookup(self.dirfh, name)
            assert lk.ok, f"{name}: the client was given a handle; LOOKUP says {lk!r}"
            assert lk.fh == fh, f"{name}: LOOKUP gives another handle after the kill"
            ga = c.getattr(fh).check()
            assert ga.attr.fileid == lk.attr.fileid, f"{name}: the handle resolves to another file"
        for fh in self.dead:
            st = c.getattr(fh).status
            assert st == N.NFS3ERR_STALE, f"a removed or replaced name's handle answers {N.status_name(st)}"


def test_handles_survive_kill_under_a_namespace_storm(gw_fs):
    g = gw_fs
    c = g.client()
    root = c.mount("/")
    dirs = [c.mkdir(root, f"w{i}").check().fh for i in range(WORKERS)]
    c.close()
    workers = [Worker(g, d, seed=i) for i, d in enumerate(dirs)]
    for rnd in range(2):
        stop = threading.Event()
        ts = [threading.Thread(target=w.run, args=(stop,)) for w in workers]
        before = sum(w.ops for w in workers)
        for t in ts:
            t.start()
        time.sleep(STORM_S)
        g.kill()  # SIGKILL mid-storm: no flush, no clean close of the index
        stop.set()
        for t in ts:
            t.join(30)
        for w in workers:
            assert w.error is None, f"round {rnd}: {w.error!r}"
        done = sum(w.ops for w in workers) - before
        assert done >= 200, f"round {rnd}: only {done} operations before the kill"
        g.start()
        c = g.client()
        for w in workers:
            w.settle(c)
            w.check(c)
        c.close()


def test_creates_in_one_directory_survive_kill(gw_fs):
    """Group commit: 6 connections creating and removing in one directory (their
    directory fsyncs shared), kill -9 mid-storm, every acknowledged name resolves."""
    g = gw_fs
    c = g.client()
    root = c.mount("/")
    shared = c.mkdir(root, "shared").check().fh
    c.close()
    workers = [Worker(g, shared, seed=10 + i, prefix=f"c{i}-", renames=False) for i in range(6)]
    stop = threading.Event()
    ts = [threading.Thread(target=w.run, args=(stop,)) for w in workers]
    for t in ts:
        t.start()
    time.sleep(STORM_S)
    g.kill()
    stop.set()
    for t in ts:
        t.join(30)
    for w in workers:
        assert w.error is None, repr(w.error)
    done = sum(w.ops for w in workers)
    assert done >= 200, f"only {done} operations before the kill"
    g.start()
    c = g.client()
    for w in workers:
        w.settle(c)
        w.check(c)
    # Nothing but what the clients were told (and the op each had in flight) is there.
    told = {n for w in workers for n in w.live}
    names = (e.name.decode() if isinstance(e.name, bytes) else e.name for e in c.readdir_all(shared))
    listed = set(names) - {".", ".."}
    assert listed == told, f"names the clients were not told of: {sorted(listed - told)[:5]}"
    c.close()
