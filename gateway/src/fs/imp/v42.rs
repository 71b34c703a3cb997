//! `fs::v42`'s operations: each checks its values (hostile: offsets and counts near
//! 2^64, names), the file kinds and the caller's access, runs the store's call
//! (`Backend`'s NFSv4.2 methods) inside `changing_file` so the caches hear of it, and
//! makes a data change durable before it returns (as knfsd commits after a fallocate
//! or a copy).

use super::*;
use crate::fs::access::{self, Caller, Grant};
use crate::fs::v42::*;

/// The XDR size of a name in a LISTXATTRS reply (a length and padded bytes).
fn xdr_len(name: &[u8]) -> usize {
    4 + name.len().next_multiple_of(4)
}

fn xattr_status(e: Status, big: bool) -> Status {
    match e {
        Status::FBig if big => Status::Xattr2Big,
        e => e,
    }
}

impl Inner {
    /// A regular file's attributes: a directory is `IsDir`, any other kind `Inval`.
    fn regular(&self, node: &Node) -> FsResult<Attr> {
        let a = self.getattr(node)?;
        match a.kind {
            FileKind::Reg => Ok(a),
            FileKind::Dir => Err(Status::IsDir),
            _ => Err(Status::Inval),
        }
    }

    /// A data change made directly in the store: the stored mtime/ctime go, so the
    /// object's own modification time speaks for both (as for WRITE, `write_data`).
    fn data_changed(&self, key: &str) -> FsResult<()> {
        let m = self.file_meta(key)?.ok_or(Status::Stale)?;
        if m.user.contains_key(M_MTIME) || m.user.contains_key(M_CTIME) {
            let mut user = m.user.clone();
            user.remove(M_MTIME);
            user.remove(M_CTIME);
            self.backend
                .set_meta(key, &user)
                .map_err(|e| self.nerr(e, key))?;
        }
        Ok(())
    }

    /// Makes a data change of `key` durable now (a failed sync moves the verifier).
    fn sync_now(&self, key: &str) -> FsResult<()> {
        let Some(rw) = self.backend.random_write() else {
            return Ok(());
        };
        self.begin_sync(key, true);
        let synced = rw.sync(key);
        self.synced(key, &synced);
        synced.map_err(|e| self.nerr(e, key))
    }

    /// IO_ADVISE: a hint to the store, never a store call.
    pub fn advise(&self, node: &Node, how: ReadAdvice) -> bool {
        self.backend.advise(&node.key, how)
    }

    pub fn seek(
        &self,
        c: &Caller,
        g: Grant,
        node: &Node,
        offset: u64,
        what: Content,
    ) -> FsResult<SeekDone> {
        let a = self.regular(node)?;
        access::check_read_by(&a, c, g)?;
        if offset >= a.size {
            return Err(Status::NxIo);
        }
        let data = what == Content::Data;
        let found = self
            .backend
            .seek(&node.key, offset, data)
            .map_err(|e| self.nerr(e, &node.key))?;
        let done = match found {
            Some(p) => SeekDone {
                eof: p >= a.size,
                offset: p,
            },
            None => SeekDone {
                eof: true,
                offset: a.size,
            },
        };
        debug_assert!(done.offset >= offset && done.offset <= a.size.max(offset));
        Ok(done)
    }

    pub fn extents(
        &self,
        c: &Caller,
        g: Grant,
        node: &Node,
        offset: u64,
        len: u64,
    ) -> FsResult<Extents> {
        let a = self.regular(node)?;
        access::check_read_by(&a, c, g)?;
        let end = offset.saturating_add(len).min(a.size);
        let mut out = Vec::new();
        let mut at = offset;
        while at < end && out.len() < MAX_EXTENTS {
            let seek = |data| self.backend.seek(&node.key, at, data);
            let d = seek(true).map_err(|e| self.nerr(e, &node.key))?;
            let (what, stop) = if d == Some(at) {
                let h = seek(false).map_err(|e| self.nerr(e, &node.key))?;
                (Content::Data, h.unwrap_or(a.size))
            } else {
                (Content::Hole, d.unwrap_or(a.size))
            };
            let stop = stop.clamp(at + 1, end);
            out.push(Extent {
                what,
                offset: at,
                len: stop - at,
            });
            at = stop;
        }
        let eof = at >= a.size;
        debug_assert!(out
            .windows(2)
            .all(|w| w[0].offset + w[0].len == w[1].offset));
        Ok(Extents { extents: out, eof })
    }

    /// ALLOCATE (`alloc`) or DEALLOCATE of `[off, off + len)`.
    pub fn space(
        &self,
        c: &Caller,
        g: Grant,
        node: &Node,
        off: u64,
        len: u64,
        alloc: bool,
    ) -> FsResult<()> {
        if len == 0 {
            return Err(Status::Inval);
        }
        if off
            .checked_add(len)
            .is_none_or(|e| e > self.max_file_size())
        {
            return Err(Status::FBig);
        }
        let a = self.regular(node)?;
        access::check_write_by(&a, c, g)?;
        let key = node.key.as_str();
        self.changing_file(node, || {
            self.data_changed(key)?;
            let r = if alloc {
                self.backend.allocate(key, off, len)
            } else {
                self.backend.deallocate(key, off, len)
            };
            r.map_err(|e| self.nerr(e, key))?;
            self.sync_now(key)
        })
    }

    /// The range rules of COPY and CLONE (RFC 7862 §15.2.3, §15.13.3): the count
    /// resolved ("to the end" for 0), inside the source, the target within the
    /// largest file, no overlap within one file, CLONE's alignment.
    fn copy_count(&self, a: &CopyArgs<'_>, src_size: u64, clone: bool) -> FsResult<u64> {
        if a.src_off > src_size {
            return Err(Status::Inval);
        }
        let count = if a.count == 0 {
            src_size - a.src_off
        } else {
            a.count
        };
        let src_end = a.src_off.checked_add(count).ok_or(Status::Inval)?;
        if src_end > src_size {
            return Err(Status::Inval);
        }
        let dst_end = a.dst_off.checked_add(count).ok_or(Status::FBig)?;
        if dst_end > self.max_file_size() {
            return Err(Status::FBig);
        }
        let same = a.src.fileid == a.dst.fileid;
        if same && a.src_off < dst_end && a.dst_off < src_end {
            return Err(Status::Inval);
        }
        let b = self.clone_block().max(1);
        let aligned = |v: u64| v.is_multiple_of(b);
        if clone
            && !(aligned(a.src_off)
                && aligned(a.dst_off)
                && (aligned(count) || src_end == src_size))
        {
            return Err(Status::Inval);
        }
        Ok(count)
    }

    pub fn clone_block(&self) -> u64 {
        self.backend.clone_block()
    }

    /// COPY, or with `clone` CLONE (all or nothing).
    pub fn copy(&self, c: &Caller, a: &CopyArgs<'_>, clone: bool) -> FsResult<CopyDone> {
        let sa = self.regular(a.src)?;
        let da = self.regular(a.dst)?;
        access::check_read_by(&sa, c, a.src_grant)?;
        access::check_write_by(&da, c, a.dst_grant)?;
        let count = self.copy_count(a, sa.size, clone)?;
        let (src, dst) = (a.src.key.as_str(), a.dst.key.as_str());
        let done = self.changing_file(a.dst, || {
            self.data_changed(dst)?;
            let n = if clone {
                self.backend
                    .clone_range(src, a.src_off, dst, a.dst_off, count)
                    .map(|_| count)
            } else {
                self.backend
                    .copy_range(src, a.src_off, dst, a.dst_off, count)
            };
            let n = n.map_err(|e| self.nerr(e, dst))?;
            self.sync_now(dst)?;
            Ok(n)
        })?;
        debug_assert!(done <= count && (!clone || done == count));
        Ok(CopyDone {
            count: done,
            committed: Stable::FileSync,
        })
    }

    /// An attribute's name: UTF-8 (a component, RFC 8276 §8.2), not empty, no '/' or
    /// NUL, within what the store keeps.
    fn xattr_name<'a>(&self, name: &'a [u8]) -> FsResult<&'a [u8]> {
        if name.len() > XATTR_MAX_NAME.min(self.backend.xattr_max_name()) {
            return Err(Status::NameTooLong);
        }
        if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
            return Err(Status::Inval);
        }
        std::str::from_utf8(name).map_err(|_| Status::Inval)?;
        Ok(name)
    }

    /// Extended attributes live on regular files and directories (as Linux keeps
    /// user.* attributes): another kind is `Perm`.
    fn xattr_target(&self, node: &Node) -> FsResult<Attr> {
        let a = self.getattr(node)?;
        match a.kind {
            FileKind::Reg | FileKind::Dir => Ok(a),
            _ => Err(Status::Perm),
        }
    }

    pub fn getxattr(&self, c: &Caller, node: &Node, name: &[u8]) -> FsResult<Vec<u8>> {
        let name = self.xattr_name(name)?;
        let a = self.xattr_target(node)?;
        access::check(&a, c, access::R)?;
        let v = self
            .backend
            .xattr_get(&node.key, name)
            .map_err(|e| self.nerr(e, &node.key))?;
        v.ok_or(Status::NoXattr)
    }

    pub fn setxattr(
        &self,
        c: &Caller,
        node: &Node,
        name: &[u8],
        value: &[u8],
        how: XattrHow,
    ) -> FsResult<()> {
        let name = self.xattr_name(name)?;
        if value.len() > XATTR_MAX_VALUE.min(self.backend.xattr_max_value()) {
            return Err(match self.backend.xattr_max_value() {
                0 => Status::NotSupp,
                _ => Status::Xattr2Big,
            });
        }
        let a = self.xattr_target(node)?;
        access::check_writable(c)?;
        access::check(&a, c, access::W)?;
        let how = match how {
            XattrHow::Create => crate::backend::XattrSet::Create,
            XattrHow::Replace => crate::backend::XattrSet::Replace,
            XattrHow::Either => crate::backend::XattrSet::Either,
        };
        let key = node.key.as_str();
        self.changing_file(node, || {
            let set = self.backend.xattr_set(key, name, value, how);
            match set.map_err(|e| xattr_status(self.nerr(e, key), true))? {
                true => Ok(()),
                false => Err(Status::NoXattr),
            }
        })
    }

    pub fn listxattrs(
        &self,
        c: &Caller,
        node: &Node,
        cookie: u64,
        max_bytes: usize,
    ) -> FsResult<XattrPage> {
        let a = self.xattr_target(node)?;
        access::check(&a, c, access::R)?;
        let all = self
            .backend
            .xattr_list(&node.key)
            .map_err(|e| self.nerr(e, &node.key))?;
        let start = usize::try_from(cookie)
            .ok()
            .filter(|s| *s <= all.len())
            .ok_or(Status::BadCookie)?;
        let (mut names, mut used) = (Vec::new(), 0usize);
        for n in &all[start..] {
            if used + xdr_len(n) > max_bytes {
                break;
            }
            used += xdr_len(n);
            names.push(n.clone());
        }
        let end = start + names.len();
        if names.is_empty() && end < all.len() {
            return Err(Status::TooSmall);
        }
        Ok(XattrPage {
            names,
            cookie: end as u64,
            eof: end == all.len(),
        })
    }

    pub fn removexattr(&self, c: &Caller, node: &Node, name: &[u8]) -> FsResult<()> {
        let name = self.xattr_name(name)?;
        let a = self.xattr_target(node)?;
        access::check_writable(c)?;
        access::check(&a, c, access::W)?;
        let key = node.key.as_str();
        self.changing_file(node, || {
            match self
                .backend
                .xattr_remove(key, name)
                .map_err(|e| self.nerr(e, key))?
            {
                true => Ok(()),
                false => Err(Status::NoXattr),
            }
        })
    }
}

#[cfg(test)]
#[path = "v42_tests.rs"]
mod tests;
