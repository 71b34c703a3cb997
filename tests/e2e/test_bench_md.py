"""`bench md` (the mdtest-style metadata run) against the gateway on the fs, memory and
s3 backends, over NFSv3 and NFSv4.1, both trees (a directory per connection, one shared
directory), with --verify and --stats-url: every phase completes every op, every read's
content, stat size and listing is what was created, the s3 backend's store requests are
reported per phase, and the run leaves the export as it found it. Once over
RPC-over-RDMA (soft). Small runs (2 connections x 200 files, 25 on s3): a functional
test, not a benchmark. The verifier's own failure paths are unit tests in
bench/src/md/verify.rs."""

import json
import os
import subprocess

import pytest

from conftest import find_bench_bin, free_port

BENCH = find_bench_bin()
CONNS, FILES = 2, 200
PHASES = ["mkdir", "create", "stat", "read", "readdir", "remove", "rmdir"]
PHASE_KEYS = {"ops", "errors", "bytes", "ops_per_s", "mib_per_s", "verified_bytes", "verify_failures",
              "jukebox", "latency_us", "wall_s", "store_requests"}
TOP_KEYS = {"schema", "target", "nfs", "tree", "conns", "qd", "files_per_conn", "write_size", "verify",
            "phases"}
BACKENDS = ["fs", "memory"] + ([] if os.environ.get("E2E_NO_S3") == "1" else ["s3"])
# On s3 (moto) every create, read and listing entry is a store round trip or several:
# 200 files per connection take minutes on a loaded CI machine, 25 keep the same paths.
FILES_ON = {"s3": 25}


def md(target, *args, rc=0, timeout=120):
    """Runs `bench md --json`; returns (the JSON object, stderr)."""
    assert BENCH.exists(), f"build bench first: {BENCH}"
    r = subprocess.run([str(BENCH), "md", "--target", target, "--json", *map(str, args)],
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == rc, f"bench md {args} -> {r.returncode}\nstdout: {r.stdout[-2000:]}\nstderr: {r.stderr[:3000]}"
    assert "panicked" not in r.stderr, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1, r.stdout
    return json.loads(lines[0]), r.stderr


def check_run(j, tree, err, files=FILES):
    assert set(j) == TOP_KEYS, sorted(set(j) ^ TOP_KEYS)
    assert j["schema"] == "nfsgw-bench-md/1" and j["tree"] == tree and j["verify"] is True
    assert list(j["phases"]) == PHASES, j["phases"].keys()
    dirs = CONNS if tree == "easy" else 1
    want = {"mkdir": dirs, "create": CONNS * files, "stat": CONNS * files, "read": CONNS * files,
            "remove": CONNS * files, "rmdir": dirs}
    for name, p in j["phases"].items():
        assert set(p) == PHASE_KEYS, (name, sorted(p))
        assert p["errors"] == 0 and p["verify_failures"] == 0, (name, p, err)
        assert p["wall_s"] > 0 and p["ops_per_s"] > 0, (name, p)
        lat = p["latency_us"]
        assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["p99_9"] <= lat["max"], (name, lat)
        if name in want:
            assert p["ops"] == want[name], (name, p)
    # Every connection listed its directory, page by page (at least one page each).
    assert j["phases"]["readdir"]["ops"] >= CONNS, j["phases"]["readdir"]
    assert j["phases"]["create"]["bytes"] == CONNS * files * 3901
    assert j["phases"]["read"]["bytes"] == CONNS * files * 3901


def left_in_root(gw):
    with gw.client() as c:
        root = c.mount("/")
        return [e.name for e in c.readdir_all(root) if str(e.name).startswith("bench-md.")]


def check_store_requests(j, store, files):
    """`--stats-url`: the s3 backend's store requests per phase (none on the others)."""
    p = j["phases"]
    kinds = {"head", "get", "put", "copy", "delete", "list", "multipart"}
    for name, ph in p.items():
        assert set(ph["store_requests"]) == kinds, (name, ph["store_requests"])
    total = {name: sum(ph["store_requests"].values()) for name, ph in p.items()}
    if store != "s3":
        assert set(total.values()) == {0}, total
        return
    # Every create puts an object; every remove deletes one. A listing lists at most
    # once per page it reads from the store: the directories bench just filled through
    # this gateway are listed on the reactor with no store request at all
    # (docs/performance.md "Listing, sixth pass"), the others once per page.
    assert p["create"]["store_requests"]["put"] >= CONNS * files, p["create"]
    assert p["remove"]["store_requests"]["delete"] >= CONNS * files, p["remove"]
    assert p["readdir"]["store_requests"]["list"] <= p["readdir"]["ops"] * 4, p["readdir"]


@pytest.mark.parametrize("store", BACKENDS)
def test_md_both_trees_both_versions_verified(gw_factory, store):
    port = free_port()
    gw = gw_factory(backend=store, extra={"stats": {"listen": f"127.0.0.1:{port}"}})
    target = f"tcp://127.0.0.1:{gw.port}"
    files = FILES_ON.get(store, FILES)
    for nfs in ("3", "4.1"):
        for tree in ("easy", "hard"):
            j, err = md(target, "--nfs", nfs, "--tree", tree, "--conns", CONNS, "--qd", 4,
                        "--files-per-conn", files, "--verify", "--stats-url", f"http://127.0.0.1:{port}/metrics")
            check_run(j, tree, err, files)
            check_store_requests(j, store, files)
            assert j["nfs"] == nfs
    assert left_in_root(gw) == []


def test_md_over_rdma_verified(gw_factory):
    gw = gw_factory(backend="fs+rdma")
    for nfs, tree in (("3", "hard"), ("4.1", "easy")):
        j, err = md(f"rdma://127.0.0.1:{gw.rdma_port}", "--provider", "soft", "--nfs", nfs, "--tree", tree,
                    "--conns", CONNS, "--qd", 4, "--files-per-conn", FILES, "--verify")
        check_run(j, tree, err)
    assert not [p for p in gw.data_dir.iterdir() if p.name.startswith("bench-md.")]


def test_md_table_reports_only_the_phases_asked_for(gw_factory):
    gw = gw_factory(backend="memory")
    r = subprocess.run([str(BENCH), "md", "--target", f"tcp://127.0.0.1:{gw.port}", "--phases", "stat,create",
                        "--files-per-conn", "20", "--write-size", "0", "--verify"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    rows = [l.split()[0] for l in r.stdout.splitlines()[2:] if l.strip()]
    assert rows == ["create", "stat", "verify:"], r.stdout
    # A directory that already exists is refused, not reused.
    r = subprocess.run([str(BENCH), "md", "--target", f"tcp://127.0.0.1:{gw.port}", "--dir", "taken",
                        "--files-per-conn", "1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    with gw.client() as c:
        c.mkdir(c.mount("/"), "taken").check()
    r = subprocess.run([str(BENCH), "md", "--target", f"tcp://127.0.0.1:{gw.port}", "--dir", "taken",
                        "--files-per-conn", "1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "making the top directory" in r.stderr, r.stderr
