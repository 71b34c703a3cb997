#!/usr/bin/env python3
"""The layering rules of docs/architecture.md §2, checked on the source tree.

    python3 tests/arch/check.py            # verdict, one line per rule
    python3 tests/arch/check.py --list     # also every offending line

Each rule counts the lines that break it. The rules the code keeps today must stay at zero;
the ones it does not keep yet have a ceiling in tests/arch/ceilings (rule name, count), so a
change may lower a count but never raise it. A count below its ceiling prints a reminder to
lower the ceiling, so the ratchet only turns one way.

A line counts when it is code (not a `//` comment) in a non-test source file of the rule's
scope (files named `*tests*.rs` and `tests/` directories are tests: they may reach across
layers to check them).
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
GW = ROOT / "gateway" / "src"


def sources(*paths):
    for p in paths:
        p = ROOT / p
        files = [p] if p.is_file() else sorted(p.rglob("*.rs"))
        for f in files:
            rel = f.relative_to(ROOT).as_posix()
            if "tests" in f.name or "/tests/" in rel:
                continue
            yield f


def code_lines(f):
    for n, line in enumerate(f.read_text().splitlines(), 1):
        s = line.strip()
        if s.startswith("//") or not s:
            continue
        yield n, line


def imports(module):
    """A path into `module` from elsewhere in the gateway crate (`nfs_wire::nfs3`, the
    workspace's procedure numbers, is not the front end)."""
    return re.compile(r"(crate|super)::%s\b|(?<!nfs_wire::)\b%s::" % (module, module))


def front_ends():
    """A path into any NFS front end (NFSv3, NFSv4, MOUNT), or into the table of them
    (`front`): `nfs_wire`'s numbers are not a front end."""
    return re.compile(
        r"(crate|super)::(nfs3|nfs4|mount|front)\b|(?<!nfs_wire::)\b(nfs3|nfs4|mount)::"
    )


def hits(paths, pattern):
    out = []
    for f in sources(*paths):
        for n, line in code_lines(f):
            if pattern.search(line):
                out.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()}")
    return out


def program_numbers():
    """Definitions (not uses) of the ONC RPC program numbers: one each in the workspace."""
    pat = re.compile(r"const\s+\w+\s*:\s*u32\s*=\s*(100003|100005|100000)\b")
    out = []
    for crate in ("engine", "gateway", "bench", "tools", "wire"):
        base = ROOT / crate
        if not base.exists():
            continue
        for f in sorted(base.rglob("*.rs")):
            if "/target/" in f.as_posix():
                continue
            for n, line in code_lines(f):
                if pat.search(line):
                    out.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()}")
    # One definition per number is allowed.
    seen, extra = set(), []
    for h in out:
        num = re.search(r"(100003|100005|100000)", h).group(1)
        if num in seen:
            extra.append(h)
        seen.add(num)
    return extra


def status_casts():
    """`fs::Status` cast to a number anywhere in the gateway, tests included: its
    variants carry no wire numbers (fs/types.rs), only the front ends' tables do."""
    pat = re.compile(r"Status::[A-Za-z]+\s+as\s+[ui]\d+")
    out = []
    for f in sorted((ROOT / "gateway").rglob("*.rs")):
        for n, line in code_lines(f):
            if pat.search(line):
                out.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()}")
    return out


CLIENT_ENCODING = re.compile(
    r"\bwrite_call\s*\(\s*(&mut\s+)?w\b"  # engine's call-header writer, called directly
    r"|\.u32\(\s*(rpc::)?MSG_CALL\s*\)"  # msg_type CALL written by hand
    r"|\.u32\(\s*xid\s*\)\s*\.u32\(\s*0\s*\)"  # xid, CALL chained by hand
    r"|\.u32\(\s*OP_[A-Z_0-9]+\s*\)"  # an operation number in encode position
    r"|\b0x4000_0000\b|\b0x40000000\b"  # the callback program as a literal
)


def client_encoders():
    """RPC calls and NFSv4 operations encoded by a client outside nfs-wire: the tests,
    the fuzzer and bench (their `tests` files included, unlike the other rules) build
    calls with `nfs_wire::{rpccall, v3call, v3more, v4call, v4cb}`. Test-local and
    fuzz-local encodings that deliberately break the XDR stay, under the ceiling."""
    out = []
    for d in ("gateway/tests", "tools/src", "bench/src"):
        for f in sorted((ROOT / d).rglob("*.rs")):
            for n, line in code_lines(f):
                if CLIENT_ENCODING.search(line):
                    out.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()}")
    return out


NFS4_STATUS_AS_U32 = re.compile(
    r"Result<.*,\s*u32>"  # a u32 error: an operation's failure is an Nfsstat4
    r"|\b(st|status|err|\w+_err)\s*:\s*u32\b"  # a status-named u32 binding or field
    r"|fn\s+\w*(status|err)\s*\(.*->\s*u32\b"  # a function answering a status as u32
    r"|const\s+NFS4(_OK|ERR_\w+)\s*:\s*u32"  # an nfsstat4 constant as a bare number
)


def nfs4_status_as_u32():
    """nfsstat4 travels through nfs4/ as `status::Nfsstat4`, never as a bare u32 (which
    would let an nfsstat3, an opcode or an ordinal pass for a status): the reactor fast
    paths and the RDMA binding that compare reply words use `Nfsstat4::as_u32`."""
    return hits(["gateway/src/nfs4"], NFS4_STATUS_AS_U32)


def transport_matches():
    """The server names a call's transport only in the transport seam
    (`gateway/src/server/transport.rs`): a match on `Link`'s variants (`Link::Tcp`,
    `Link::Rdma`) or the transports' own per-call names anywhere else in the server
    is one more site a new transport would have to find. Constructors (`Link::tcp`,
    `Link::rdma`, lowercase) are how a transport's poll names its calls, not matches."""
    pat = re.compile(r"\bLink::[A-Z]|\bKind::(Tcp|Rdma)\b")
    seam = GW / "server" / "transport.rs"
    out = []
    for f in sources("gateway/src", "engine/src"):
        if f == seam:
            continue
        for n, line in code_lines(f):
            if pat.search(line):
                out.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()}")
    return out


RULES = {
    # Front ends and executors stand on the neutral file service, not on NFSv3.
    "nfs4-imports-nfs3": lambda: hits(["gateway/src/nfs4"], imports("nfs3")),
    # The read cache stores attributes and pages and encodes no protocol's reply;
    # the executors in server/ reach the front ends through `front.rs`'s tables.
    "cache-imports-nfs3": lambda: hits(["gateway/src/cache.rs"], imports("nfs3")),
    "cache-imports-nfs4": lambda: hits(["gateway/src/cache.rs"], imports("nfs4")),
    "server-imports-nfs3": lambda: hits(["gateway/src/server"], imports("nfs3")),
    # NFSv4.1's reactor paths (the plan, the cache answers, the io_uring shapes) are
    # reached through `front::V4_PATHS`; the ring's v4 executor still names fast_io.
    "server-names-nfs4-paths": lambda: hits(
        ["gateway/src/server"], re.compile(r"\bnfs4::(fast|fast_io|plan|scan)\b")
    ),
    "uring-imports-nfs3": lambda: hits(["gateway/src/uring"], imports("nfs3")),
    # NFSv4 state returns domain errors; nfs4 encodes them.
    "state-imports-nfs4": lambda: hits(["gateway/src/state"], imports("nfs4")),
    # The two NFS front ends import nothing from each other, nor MOUNT from NFSv3.
    "nfs3-imports-nfs4": lambda: hits(["gateway/src/nfs3"], imports("nfs4")),
    "mount-imports-nfs3": lambda: hits(["gateway/src/mount.rs"], imports("nfs3")),
    # The RPC-over-RDMA binding is a transport concern: it and the front ends import
    # nothing from each other. They meet in the neutral `ddp.rs` (the eligible call
    # items a front end's walk found, where an encoder put a reply's data), and the
    # caller hands the binding the COMPOUND's walk (`front::V4_PATHS.plan_ddp`).
    "ulb-imports-front-ends": lambda: hits(["gateway/src/ulb"], front_ends()),
    "front-ends-import-ulb": lambda: hits(
        ["gateway/src/nfs3", "gateway/src/nfs4", "gateway/src/mount.rs"], imports("ulb")
    ),
    # The engine knows no NFS.
    "engine-imports-gateway": lambda: hits(["engine/src"], re.compile(r"\bgateway::|\bnfs3\b|\bnfs4\b::")),
    # One definition of each RPC program number in the workspace.
    "duplicate-program-numbers": program_numbers,
    # The file model's status reaches the wire only through nfs3::status / nfs4::status.
    "status-casts": status_casts,
    # One client encoder: calls and COMPOUND operations are written by nfs-wire.
    "one-client-encoder": client_encoders,
    # nfs4/ passes nfsstat4 as the type `nfs4::status::Nfsstat4`, not as u32.
    "nfs4-status-as-u32": nfs4_status_as_u32,
    # The transport seam: only server/transport.rs matches on a call's transport.
    "link-matches-outside-seam": transport_matches,
}


def ceilings():
    path = pathlib.Path(__file__).with_name("ceilings")
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, n = line.split()
            out[name] = int(n)
    return out


def main():
    listing = "--list" in sys.argv
    caps = ceilings()
    unknown = set(caps) - set(RULES)
    if unknown:
        print(f"arch: ceilings name unknown rules: {sorted(unknown)}")
        return 1
    bad = 0
    for name, rule in RULES.items():
        found = rule()
        cap = caps.get(name, 0)
        if len(found) > cap:
            verdict = f"FAIL ({len(found)} > ceiling {cap})"
            bad += 1
        elif len(found) < cap:
            verdict = f"ok, below ceiling {cap}: lower it to {len(found)} in tests/arch/ceilings"
        else:
            verdict = "ok" if cap == 0 else f"ok (at ceiling {cap})"
        print(f"arch: {name:28} {len(found):4}  {verdict}")
        if listing or len(found) > cap:
            for h in found:
                print(f"    {h}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
