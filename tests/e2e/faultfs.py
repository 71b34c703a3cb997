"""A FUSE pass-through file system that fails chosen operations with EIO, for
test_uring_fault.py: a real kernel file system under the gateway (its own file
descriptors, io_uring, fsync and statx all go through the kernel's FUSE client),
whose storage errors the test switches on and off.

    python faultfs.py SOURCE MOUNTPOINT CONTROL

CONTROL is a file outside the mount holding the names of the operations that fail
(`read`, `write`, `fsync`, separated by white space), read on every call; only files
whose name starts with `eio-` fail. Runs in the foreground until unmounted.
Needs root (or fusermount3) and the `mfusepy` module (tests/setup.sh installs it).
"""
from __future__ import annotations

import errno
import os
import sys

import mfusepy as fuse


class FaultFs(fuse.Operations):
    use_ns = True

    def __init__(self, root: str, control: str):
        self.root = root
        self.control = control

    def _p(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def _fail(self, op: str, path: str) -> None:
        if not os.path.basename(path or "").startswith("eio-"):
            return
        try:
            with open(self.control) as f:
                ops = f.read().split()
        except OSError:
            return
        if op in ops:
            raise fuse.FuseOSError(errno.EIO)

    # -- attributes and names ---------------------------------------------------------
    def getattr(self, path, fh=None):
        st = os.fstat(fh) if fh is not None else os.lstat(self._p(path))
        d = {k: getattr(st, k) for k in ("st_mode", "st_ino", "st_nlink", "st_uid", "st_gid",
                                         "st_size", "st_blocks", "st_rdev")}
        d.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        return d

    def readdir(self, path, fh):
        return [".", ".."] + os.listdir(self._p(path))

    def access(self, path, amode):
        return 0

    def chmod(self, path, mode):
        os.chmod(self._p(path), mode)
        return 0

    def chown(self, path, uid, gid):
        os.lchown(self._p(path), uid, gid)
        return 0

    def utimens(self, path, times=None):
        os.utime(self._p(path), ns=times, follow_symlinks=False)
        return 0

    def mkdir(self, path, mode):
        os.mkdir(self._p(path), mode)
        return 0

    def rmdir(self, path):
        os.rmdir(self._p(path))
        return 0

    def unlink(self, path):
        os.unlink(self._p(path))
        return 0

    def rename(self, old, new):
        os.rename(self._p(old), self._p(new))
        return 0

    def link(self, target, source):
        os.link(self._p(source), self._p(target))
        return 0

    def symlink(self, target, source):
        os.symlink(source, self._p(target))
        return 0

    def readlink(self, path):
        return os.readlink(self._p(path))

    def statfs(self, path):
        s = os.statvfs(self._p(path))
        return {k: getattr(s, k) for k in ("f_bsize", "f_frsize", "f_blocks", "f_bfree",
                                           "f_bavail", "f_files", "f_ffree", "f_favail",
                                           "f_namemax")}

    # -- xattrs (the gateway keeps its metadata in user.nfsgw.*) -----------------------
    def getxattr(self, path, name, position=0):
        try:
            return os.getxattr(self._p(path), name, follow_symlinks=False)
        except OSError as e:
            raise fuse.FuseOSError(e.errno)

    def setxattr(self, path, name, value, options, position=0):
        os.setxattr(self._p(path), name, value, options, follow_symlinks=False)
        return 0

    def listxattr(self, path):
        return os.listxattr(self._p(path), follow_symlinks=False)

    def removexattr(self, path, name):
        try:
            os.removexattr(self._p(path), name, follow_symlinks=False)
        except OSError as e:
            raise fuse.FuseOSError(e.errno)
        return 0

    # -- data ---------------------------------------------------------------------------
    def open(self, path, flags):
        return os.open(self._p(path), flags & ~os.O_CREAT)

    def create(self, path, mode, flags):
        return os.open(self._p(path), flags | os.O_CREAT, mode)

    def read(self, path, size, offset, fh):
        self._fail("read", path)
        return os.pread(fh, size, offset)

    def write(self, path, data, offset, fh):
        self._fail("write", path)
        return os.pwrite(fh, data, offset)

    def truncate(self, path, length, fh=None):
        if fh is not None:
            os.ftruncate(fh, length)
        else:
            os.truncate(self._p(path), length)
        return 0

    def fsync(self, path, datasync, fh):
        self._fail("fsync", path)
        (os.fdatasync if datasync else os.fsync)(fh)
        return 0

    def flush(self, path, fh):
        return 0

    def release(self, path, fh):
        os.close(fh)
        return 0


def main() -> None:
    source, mountpoint, control = sys.argv[1:4]
    # direct_io: every read and write reaches this process (no page cache in the
    # way of a switched-on fault); no attribute or entry caching, as for a local
    # file system; default_permissions: the kernel checks modes as it would.
    fuse.FUSE(FaultFs(source, control), mountpoint, foreground=True, nothreads=False,
              direct_io=True, attr_timeout=0, entry_timeout=0, default_permissions=True,
              allow_other=True)


if __name__ == "__main__":
    main()
