//! The NFSv4.2 operations of the `fs` backend (docs/nfs42.md), with the local file
//! system's own calls: SEEK_DATA/SEEK_HOLE (RFC 7862 §15.11), fallocate for ALLOCATE
//! and, with PUNCH_HOLE|KEEP_SIZE, DEALLOCATE (§15.1, §15.4), copy_file_range for COPY
//! (§15.2: the kernel moves the bytes, or shares them where the file system can),
//! FICLONERANGE for CLONE (§15.13: reflink on btrfs/xfs; elsewhere a
//! copy_file_range, which has CLONE's result without the sharing), and client extended
//! attributes (RFC 8276) under `xattr::CLIENT_PREFIX`.

use super::*;

/// A file system that cannot do the call: the operation is `Unsupported`.
fn unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) | Some(libc::ENOTTY)
    )
}

/// Attribute storage full or a value over the file system's limit: XATTR2BIG.
fn xattr_err(e: io::Error, what: &str, key: &str) -> BackendError {
    match e.raw_os_error() {
        Some(libc::E2BIG) | Some(libc::ENOSPC) | Some(libc::ERANGE) => BackendError::TooLarge,
        Some(libc::EOPNOTSUPP) => BackendError::Unsupported,
        _ => map_io(e, what, key),
    }
}

impl FsBackend {
    /// A regular file's descriptor, read-only or better (the cached entry).
    fn reg_file(&self, key: &str) -> BResult<Arc<File>> {
        check_key(key)?;
        let (e, _) = self.entry(key, false)?;
        if e.dir {
            return Err(BackendError::NotFound);
        }
        Ok(e.file)
    }

    /// Any object's descriptor (a directory's too: xattrs live on both).
    fn any_file(&self, key: &str) -> BResult<Arc<File>> {
        if !key.is_empty() {
            check_key(key)?;
        }
        Ok(self.entry(key, false)?.0.file)
    }

    /// Runs a space call on `key` open for writing; `Ok(false)`: the file system
    /// cannot do it.
    fn space_op(&self, key: &str, op: impl Fn(&File) -> io::Result<()>) -> BResult<()> {
        let done = self.with_writable(key, |f| match op(f) {
            Err(e) if unsupported(&e) => Ok(false),
            r => r.map(|_| true),
        })?;
        done.then_some(()).ok_or(BackendError::Unsupported)
    }

    pub(super) fn seek_impl(&self, key: &str, offset: u64, data: bool) -> BResult<Option<u64>> {
        let f = self.reg_file(key)?;
        let size = fstat(f.as_fd())
            .map_err(|e| map_io(e, "stat", key))?
            .st_size as u64;
        if offset >= size {
            return Ok(None);
        }
        let whence = if data {
            libc::SEEK_DATA
        } else {
            libc::SEEK_HOLE
        };
        match sys::lseek(f.as_fd(), offset, whence) {
            Ok(p) if p < size || (!data && p == size) => Ok(Some(p)),
            Ok(_) => Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => Ok(None),
            Err(e) => Err(map_io(e, "lseek", key)),
        }
    }

    pub(super) fn allocate_impl(&self, key: &str, offset: u64, len: u64) -> BResult<()> {
        if offset.checked_add(len).is_none_or(|e| e > MAX_END) {
            return Err(map_io(efbig(), "fallocate", key));
        }
        self.space_op(key, |f| sys::fallocate(f.as_fd(), 0, offset, len))
    }

    pub(super) fn deallocate_impl(&self, key: &str, offset: u64, len: u64) -> BResult<()> {
        if offset >= MAX_END || len == 0 {
            return Ok(());
        }
        let len = len.min(MAX_END - offset);
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        self.space_op(key, |f| sys::fallocate(f.as_fd(), mode, offset, len))
    }

    pub(super) fn copy_range_impl(
        &self,
        src: &str,
        s: u64,
        dst: &str,
        d: u64,
        count: u64,
    ) -> BResult<u64> {
        if d.checked_add(count).is_none_or(|e| e > MAX_END) || s > MAX_END {
            return Err(map_io(efbig(), "copy_file_range", dst));
        }
        let from = self.reg_file(src)?;
        self.with_writable(dst, |to| {
            let mut done = 0u64;
            while done < count {
                let want = (count - done).min(1 << 30) as usize;
                let n = sys::copy_file_range(from.as_fd(), s + done, to.as_fd(), d + done, want)?;
                if n == 0 {
                    break;
                }
                done += n as u64;
            }
            Ok(done)
        })
    }

    pub(super) fn clone_range_impl(
        &self,
        src: &str,
        s: u64,
        dst: &str,
        d: u64,
        count: u64,
    ) -> BResult<()> {
        if count == 0 {
            return Ok(());
        }
        if d.checked_add(count).is_none_or(|e| e > MAX_END) || s > MAX_END {
            return Err(map_io(efbig(), "clone", dst));
        }
        let from = self.reg_file(src)?;
        let shared = self.with_writable(dst, |to| {
            match sys::ficlonerange(from.as_fd(), s, to.as_fd(), d, count) {
                Ok(()) => Ok(true),
                // No reflink here (ext4, tmpfs) or not across these files.
                Err(e)
                    if unsupported(&e)
                        || matches!(e.raw_os_error(), Some(libc::EXDEV | libc::EINVAL)) =>
                {
                    Ok(false)
                }
                Err(e) => Err(e),
            }
        })?;
        if shared {
            return Ok(());
        }
        let n = self.copy_range_impl(src, s, dst, d, count)?;
        if n == count {
            Ok(())
        } else {
            Err(BackendError::Permanent(format!(
                "clone {src:?}: source shrank during the copy"
            )))
        }
    }

    pub(super) fn clone_block_impl(&self) -> u64 {
        fstat(self.root_fd.as_fd()).map_or(4096, |st| (st.st_blksize as u64).max(1))
    }

    pub(super) fn xattr_get_impl(&self, key: &str, name: &[u8]) -> BResult<Option<Vec<u8>>> {
        let f = self.any_file(key)?;
        xattr::client_get(f.as_fd(), name).map_err(|e| xattr_err(e, "getxattr", key))
    }

    pub(super) fn xattr_set_impl(
        &self,
        key: &str,
        name: &[u8],
        val: &[u8],
        how: XattrSet,
    ) -> BResult<bool> {
        if name.len() > xattr::CLIENT_MAX_NAME || val.len() > xattr::CLIENT_MAX_VALUE {
            return Err(BackendError::TooLarge);
        }
        let f = self.any_file(key)?;
        let r = xattr::client_set(f.as_fd(), name, val, how);
        r.map_err(|e| xattr_err(e, "setxattr", key))
    }

    pub(super) fn xattr_list_impl(&self, key: &str) -> BResult<Vec<Vec<u8>>> {
        let f = self.any_file(key)?;
        xattr::client_list(f.as_fd()).map_err(|e| xattr_err(e, "listxattr", key))
    }

    pub(super) fn xattr_remove_impl(&self, key: &str, name: &[u8]) -> BResult<bool> {
        let f = self.any_file(key)?;
        xattr::client_remove(f.as_fd(), name).map_err(|e| xattr_err(e, "removexattr", key))
    }
}
