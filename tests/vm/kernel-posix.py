"""POSIX rules an outside pjdfstest run found broken, replayed through the Linux kernel
NFSv3 client (run in the guest by kernel-nfs-smoke.sh on a `noac` mount of the gateway's
fs backend, as root). Each check prints "ok <name>" or raises.

  python3 kernel-posix.py MOUNTED_DIR
"""

import os
import stat
import sys
import time

D = sys.argv[1]


def as_user(uid, gid, fn, groups=()):
    """Runs fn in a child with uid/gid (AUTH_SYS carries them); returns its exit code
    (0 ok, 13 EACCES/EPERM, 1 anything else)."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups(list(groups))
            os.setgid(gid)
            os.setuid(uid)
            fn()
            os._exit(0)
        except PermissionError:
            os._exit(13)
        except BaseException as e:  # noqa: BLE001 - report anything else
            print(f"child error: {e!r}", flush=True)
            os._exit(1)
    _, st = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(st)


def ok(name):
    print(f"ok   {name}", flush=True)


def mode_of(p):
    return stat.S_IMODE(os.stat(p).st_mode)


# unlink/14: data written to an open file, then the file unlinked (the client
# silly-renames it to .nfsXXXX), reads back through the descriptor.
p = f"{D}/unlink14"
fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
assert os.write(fd, b"Hello, World!") == 13
os.unlink(p)
got = os.pread(fd, 13, 0)
assert got == b"Hello, World!", f"unlink/14: pread after unlink gave {got!r}"
os.fsync(fd)
assert os.pread(fd, 13, 0) == b"Hello, World!", "unlink/14: after fsync"
os.close(fd)
ok("unlink/14: an unlinked open file reads back what was written")

# chmod/12: a write by a non-owner clears S_ISUID and S_ISGID.
p = f"{D}/setid"
open(p, "w").close()
os.chmod(p, 0o6777)
assert mode_of(p) == 0o6777


def write_one():
    f = os.open(p, os.O_WRONLY)
    os.write(f, b"x")
    os.close(f)


assert as_user(65534, 65534, write_one) == 0, "the unprivileged write itself failed"
m = mode_of(p)
assert m & (stat.S_ISUID | stat.S_ISGID) == 0, f"chmod/12: mode {m:o} after a non-owner's write"
ok("chmod/12: a non-owner's write clears the set-id bits")

# chown/07: a user who owns neither the file nor is root cannot chown it.
p = f"{D}/owned"
open(p, "w").close()
os.chown(p, 65534, 65534)
rc = as_user(65533, 65533, lambda: os.chown(p, 65534, 65534))
assert rc == 13, f"chown/07: non-owner chown gave exit {rc}, expected EPERM"
st = os.stat(p)
assert (st.st_uid, st.st_gid) == (65534, 65534)
ok("chown/07: a non-owner's chown gets EPERM")

# chmod/00 #117: chmod by the owner who is not in the file's group drops S_ISGID.
p = f"{D}/sgid"
open(p, "w").close()
os.chown(p, 65534, 100)
assert as_user(65534, 65534, lambda: os.chmod(p, 0o2755)) == 0
m = mode_of(p)
assert m & stat.S_ISGID == 0, f"chmod/00: mode {m:o}: S_ISGID kept by a non-member"
ok("chmod/00: S_ISGID dropped when the caller is not in the file's group")

# mkdir/00, open/00: creating an entry advances the parent's mtime and ctime.
parent = f"{D}/parent"
os.mkdir(parent)
before = os.stat(parent)
time.sleep(1.1)
os.mkdir(f"{parent}/child")
after = os.stat(parent)
assert after.st_ctime_ns > before.st_ctime_ns, "mkdir/00: parent ctime did not advance"
assert after.st_mtime_ns > before.st_mtime_ns, "mkdir/00: parent mtime did not advance"
time.sleep(1.1)
open(f"{parent}/file", "w").close()
again = os.stat(parent)
assert again.st_ctime_ns > after.st_ctime_ns, "open/00: parent ctime did not advance on create"
ok("mkdir/00, open/00: creating entries advances the parent's times")
print("POSIX CHECKS: PASS", flush=True)
