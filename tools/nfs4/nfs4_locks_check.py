#!/usr/bin/env python3
"""NFSv4.1 opens and byte-range locks end to end, with the pynfs 4.1 client.

Two clients on one file over TCP: a WRITE_LT conflict reported as LOCK4denied
(offset, length, type, owner), LOCKT, LOCKU splitting a range, a blocking lock type
served as non-blocking, CLOSE with locks held (NFS4ERR_LOCKS_HELD), TEST_STATEID
per-stateid statuses, FREE_STATEID of an unlocked lock stateid, OPEN_DOWNGRADE to a
mode never opened (NFS4ERR_INVAL), WRITE with an open stateid.

Usage: nfs4_locks_check.py HOST PORT  (PYNFS=/path/to/pynfs, default
/work/pynfs-src/pynfs). The export root must be writable by uid 0. Prints
"locks e2e: OK" or raises.
"""
import os
import sys

PYNFS = os.environ.get("PYNFS", "/work/pynfs-src/pynfs")
sys.path.insert(0, PYNFS + "/nfs4.1")
sys.path.insert(0, PYNFS)
host = sys.argv[1].encode() if len(sys.argv) > 1 else b"127.0.0.1"
port = int(sys.argv[2]) if len(sys.argv) > 2 else 2049
import nfs4client, nfs_ops
from xdrdef.nfs4_const import *
from xdrdef.nfs4_type import *
from server41tests.environment import create_file, open_file, close_file, check
op = nfs_ops.NFS4ops()

c = nfs4client.NFS4Client(host, port, 1)
c.homedir = []
from rpc.security import AuthSys
c.set_cred(AuthSys().init_cred(uid=0, gid=0, name=b"e2e"))
s1 = c.new_client_session(b"lk1_%d" % os.getpid())
s2 = c.new_client_session(b"lk2_%d" % os.getpid())
name = b"locks_%d" % os.getpid()
res = create_file(s1, b"o1", [name], access=OPEN4_SHARE_ACCESS_BOTH)
check(res)
fh = res.resarray[-1].object
sid1 = res.resarray[-2].stateid
res = open_file(s2, b"o2", [name], access=OPEN4_SHARE_ACCESS_BOTH)
check(res)
sid2 = res.resarray[-2].stateid

def lock(sess, sid, owner, t, off, ln):
    otl = open_to_lock_owner4(0, sid, 0, lock_owner4(0, owner))
    return sess.compound([op.putfh(fh), op.lock(t, False, off, ln, locker4(TRUE, open_owner=otl))])

res = lock(s1, sid1, b"L1", WRITE_LT, 0, 100)
check(res)
l1 = res.resarray[-1].lock_stateid
res = lock(s2, sid2, b"L2", READ_LT, 50, 10)
check(res, NFS4ERR_DENIED)
d = res.resarray[-1].denied
assert (d.offset, d.length, d.locktype, d.owner.owner) == (0, 100, WRITE_LT, b"L1"), d
res = s2.compound([op.putfh(fh), op.lockt(READ_LT, 50, 10, lock_owner4(0, b"L2"))])
check(res, NFS4ERR_DENIED)
res = s1.compound([op.putfh(fh), op.locku(WRITE_LT, 0, l1, 40, 20)])
check(res)
l1 = res.resarray[-1].lock_stateid
res = lock(s2, sid2, b"L2", WRITEW_LT, 45, 10)
check(res)
res = s1.compound([op.putfh(fh), op.close(0, sid1)])
check(res, NFS4ERR_LOCKS_HELD)
res = s1.compound([op.test_stateid([sid1, l1, sid2, stateid4(0, b"\0" * 12)])])
check(res)
assert res.resarray[-1].tsr_status_codes == [NFS4_OK, NFS4_OK, NFS4ERR_BAD_STATEID, NFS4ERR_BAD_STATEID], res.resarray[-1]
res = s1.compound([op.putfh(fh), op.locku(WRITE_LT, 0, l1, 0, NFS4_UINT64_MAX)])
check(res)
l1 = res.resarray[-1].lock_stateid
res = s1.compound([op.free_stateid(l1)])
check(res)
res = s1.compound([op.putfh(fh), op.open_downgrade(sid1, 0, OPEN4_SHARE_ACCESS_READ, 0)])
check(res, NFS4ERR_INVAL)  # READ alone was never opened
res = s1.compound([op.putfh(fh), op.close(0, sid1)])
check(res)
res = s2.compound([op.putfh(fh), op.write(sid2, 0, FILE_SYNC4, b"x")])
check(res)
res = s2.compound([op.putfh(fh), op.close(0, sid2)])
check(res, NFS4ERR_LOCKS_HELD)
print("locks e2e: OK")
