//! The file service's NFSv4.2 operations (RFC 7862, RFC 8276), protocol-neutral:
//! sparse files (SEEK, the extents READ_PLUS answers with, ALLOCATE, DEALLOCATE),
//! server-side COPY and CLONE, and extended attributes. Each call checks the caller
//! (`fs::access`: unlike the older calls, the operation itself decides, so a front
//! end only decodes and encodes), executes, and reports what it changed to the
//! caches (`ChangeObserver`) in one function (`imp::v42`). What each store can do:
//! docs/nfs42.md. COPY is synchronous here; the asynchronous form and CB_OFFLOAD are
//! the front end's.

use super::access::{Caller, Grant};
use super::{FileModel, FsResult, Node, Stable};
/// IO_ADVISE's hints as a store's read-ahead takes them.
pub use crate::backend::ReadAdvice;

/// The largest extended attribute value (RFC 8276 leaves it to the server; the
/// Linux limit, XATTR_SIZE_MAX). A store may keep less (`Backend::xattr_max_value`;
/// s3: 1.5 KiB in all): past it, `Xattr2Big`.
pub const XATTR_MAX_VALUE: usize = 65536;
/// The longest extended attribute name (a component, RFC 8276 §8.2).
pub const XATTR_MAX_NAME: usize = 255;
/// The most extents one `extents` call returns.
pub const MAX_EXTENTS: usize = 1024;

/// What a byte range holds (data_content4, RFC 7862 §4, §15.11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Content {
    Data,
    Hole,
}

/// SEEK's answer (seek_res4): where the content starts, and whether that is at or
/// past the end of the file (`eof`, with `offset` the size when none was found).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeekDone {
    pub eof: bool,
    pub offset: u64,
}

/// One extent of a file (READ_PLUS's read_plus_content4, RFC 7862 §15.10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub what: Content,
    pub offset: u64,
    pub len: u64,
}

/// The extents of a range, in order and adjacent; `eof` when the last one ends at
/// the end of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extents {
    pub extents: Vec<Extent>,
    pub eof: bool,
}

/// A COPY or CLONE (RFC 7862 §15.2, §15.13): `count` 0 is "to the source's end". The
/// grants are how each file's access is checked (its stateid's open, or the mode).
#[derive(Debug, Clone, Copy)]
pub struct CopyArgs<'a> {
    pub src: &'a Node,
    pub src_grant: Grant,
    pub src_off: u64,
    pub dst: &'a Node,
    pub dst_grant: Grant,
    pub dst_off: u64,
    pub count: u64,
}

/// COPY's answer: bytes copied and how durable they are (write_response4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyDone {
    pub count: u64,
    pub committed: Stable,
}

/// setxattr_option4 (RFC 8276 §8.4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XattrHow {
    /// Only a new one (else `Exist`).
    Create,
    /// Only an existing one (else `NoXattr`).
    Replace,
    Either,
}

/// A LISTXATTRS page: names, the cookie to resume after them, and whether they end
/// the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XattrPage {
    pub names: Vec<Vec<u8>>,
    pub cookie: u64,
    pub eof: bool,
}

impl FileModel {
    /// SEEK (RFC 7862 §15.11): the first `what` at or after `offset`. An offset at
    /// or past the end is `NxIo`; no data after it is OK with `eof` (the size).
    pub fn seek(
        &self,
        c: &Caller,
        g: Grant,
        node: &Node,
        offset: u64,
        what: Content,
    ) -> FsResult<SeekDone> {
        self.inner.seek(c, g, node, offset, what)
    }

    /// The data and holes of `[offset, offset + len)` up to the end of the file, at
    /// most `max` (and [`MAX_EXTENTS`]) of them: what READ_PLUS answers with.
    pub fn extents(
        &self,
        c: &Caller,
        g: Grant,
        node: &Node,
        offset: u64,
        len: u64,
    ) -> FsResult<Extents> {
        self.inner.extents(c, g, node, offset, len)
    }

    /// IO_ADVISE (RFC 7862 §15.5): how `node` will be read. `true` when the store
    /// acts on it (s3: its read-ahead for the file); the caller checked the stateid.
    pub fn advise(&self, node: &Node, how: ReadAdvice) -> bool {
        self.inner.advise(node, how)
    }

    /// ALLOCATE (RFC 7862 §15.1): reserves the range, extending the file when it
    /// ends past it. Durable on return.
    pub fn allocate(&self, c: &Caller, g: Grant, node: &Node, off: u64, len: u64) -> FsResult<()> {
        self.inner.space(c, g, node, off, len, true)
    }

    /// DEALLOCATE (RFC 7862 §15.4): the range reads as zeros after, the size stays.
    /// Durable on return.
    pub fn deallocate(
        &self,
        c: &Caller,
        g: Grant,
        node: &Node,
        off: u64,
        len: u64,
    ) -> FsResult<()> {
        self.inner.space(c, g, node, off, len, false)
    }

    /// COPY (RFC 7862 §15.2), synchronous, inside the store.
    pub fn copy(&self, c: &Caller, a: &CopyArgs<'_>) -> FsResult<CopyDone> {
        self.inner.copy(c, a, false)
    }

    /// CLONE (RFC 7862 §15.13): all of the range or nothing, offsets and count
    /// aligned to [`FileModel::clone_block`] (the count may end at the source's end).
    pub fn clone_range(&self, c: &Caller, a: &CopyArgs<'_>) -> FsResult<()> {
        self.inner.copy(c, a, true).map(|_| ())
    }

    /// The clone_blksize attribute (RFC 7862 §12.2.1).
    pub fn clone_block(&self) -> u64 {
        self.inner.clone_block()
    }

    /// GETXATTR (RFC 8276 §8.4.2): `NoXattr` when there is none.
    pub fn getxattr(&self, c: &Caller, node: &Node, name: &[u8]) -> FsResult<Vec<u8>> {
        self.inner.getxattr(c, node, name)
    }

    /// SETXATTR (RFC 8276 §8.4.3).
    pub fn setxattr(
        &self,
        c: &Caller,
        node: &Node,
        name: &[u8],
        value: &[u8],
        how: XattrHow,
    ) -> FsResult<()> {
        self.inner.setxattr(c, node, name, value, how)
    }

    /// LISTXATTRS (RFC 8276 §8.4.4): names after `cookie` (0: from the start) whose
    /// XDR encoding fits `max_bytes`; `TooSmall` when not even the first one does.
    pub fn listxattrs(
        &self,
        c: &Caller,
        node: &Node,
        cookie: u64,
        max_bytes: usize,
    ) -> FsResult<XattrPage> {
        self.inner.listxattrs(c, node, cookie, max_bytes)
    }

    /// REMOVEXATTR (RFC 8276 §8.4.5): `NoXattr` when there is none.
    pub fn removexattr(&self, c: &Caller, node: &Node, name: &[u8]) -> FsResult<()> {
        self.inner.removexattr(c, node, name)
    }
}
