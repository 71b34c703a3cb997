//! What an executor hands a front end to encode: the protocol-neutral results of the
//! operations every placement runs (the reactor's read cache, its io_uring data path,
//! a worker). An executor returns these; only `nfs3/` and `nfs4/` turn them into reply
//! bytes (docs/architecture.md §2). The rules both NFS versions share about a read's
//! extent live here once: how many bytes a READ takes from a file and when it reached
//! the end (RFC 1813 §3.3.6 READ3resok `eof`, RFC 8881 §18.22.3 READ4resok `eof`).

use crate::fs::Attr;

/// A READ answered: the file's attributes it was answered under, the bytes it
/// returns and whether they reach the end of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadDone {
    pub attr: Attr,
    pub n: usize,
    pub eof: bool,
}

impl ReadDone {
    /// A READ of `count` bytes at `offset` answered whole from data known to hold the
    /// file up to `attr.size` (the read cache: every page of the range is present).
    pub fn whole(attr: Attr, offset: u64, count: u64) -> ReadDone {
        let end = offset.saturating_add(count).min(attr.size);
        ReadDone {
            attr,
            n: end.saturating_sub(offset) as usize,
            eof: end >= attr.size,
        }
    }
}

/// A WRITE done: the attributes before it and after it (`None` when not known
/// exactly: the client then asks), the bytes written, how they were committed
/// (the stable_how of RFC 1813 §3.3.7 / RFC 8881 §18.32: 0 UNSTABLE, 1 DATA_SYNC,
/// 2 FILE_SYNC) and the write verifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteDone {
    pub before: Attr,
    pub after: Option<Attr>,
    pub count: u32,
    pub committed: u32,
    pub verf: [u8; 8],
}

/// A COMMIT done: the file's attributes (a COMMIT changes none of them) and the
/// write verifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitDone {
    pub attr: Attr,
    pub verf: [u8; 8],
}

/// What a GETATTR or READ call asks (decoded by its front end): the handle, and a
/// READ's offset and count.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    pub fh: &'a [u8],
    pub read: Option<(u64, u32)>,
}

/// What a directory listing call asks (decoded by its front end): the directory's
/// handle, where to resume (cookie and verifier) and the reply's bounds.
#[derive(Debug, Clone, Copy)]
pub struct ListAsk<'a> {
    pub fh: &'a [u8],
    pub cookie: u64,
    pub verf: [u8; 8],
    /// Bytes of the entries' names and cookies (RFC 1813 §3.3.17 dircount; 0: none).
    pub dircount: usize,
    pub maxcount: usize,
}

/// What a call naming one directory entry asks (decoded by its front end): the
/// directory's handle and the name, and whether the call makes the entry (CREATE,
/// MKDIR) or only looks it up (LOOKUP).
#[derive(Debug, Clone, Copy)]
pub struct EntryAsk<'a> {
    pub dir: &'a [u8],
    pub name: &'a [u8],
    pub makes: bool,
}

/// Where a READ reply encoded before its I/O left its count, eof and data length to
/// fill in once the read is done (positions in the reply buffer; the data follows).
#[derive(Debug, Clone, Copy)]
pub struct ReadSlots {
    pub count_at: usize,
    pub eof_at: usize,
    pub len_at: usize,
}

/// Bytes a READ of `count` at `offset` asks of a file of `size` bytes: at most
/// `MAX_IO` (the reply buffers' room, both versions), none at or past the end.
pub fn read_want(size: u64, offset: u64, count: u32) -> usize {
    let n = (count as usize).min(crate::limits::MAX_IO);
    if offset >= size {
        0
    } else {
        n.min(usize::try_from(size - offset).unwrap_or(usize::MAX))
    }
}

/// Whether a read that asked `want` bytes at `offset` of a file of `size` bytes and got
/// `got` reached the end, as the file model says it: short means the end was reached.
pub fn read_eof(size: u64, offset: u64, want: usize, got: usize) -> bool {
    got < want || offset.saturating_add(got as u64) >= size
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(size: u64) -> Attr {
        let t = crate::fs::NfsTime::default();
        Attr {
            kind: crate::fs::FileKind::Reg,
            mode: 0o644,
            nlink: 1,
            uid: 0,
            gid: 0,
            size,
            used: size,
            rdev: (0, 0),
            fsid: 1,
            fileid: 7,
            atime: t,
            mtime: t,
            ctime: t,
            change: 0,
        }
    }

    #[test]
    fn a_whole_read_stops_at_the_end_and_says_so() {
        let d = ReadDone::whole(attr(10), 0, 4);
        assert_eq!((d.n, d.eof), (4, false));
        let d = ReadDone::whole(attr(10), 6, 100);
        assert_eq!((d.n, d.eof), (4, true));
        let d = ReadDone::whole(attr(10), 10, 4);
        assert_eq!((d.n, d.eof), (0, true));
        let d = ReadDone::whole(attr(10), u64::MAX, u64::MAX);
        assert_eq!((d.n, d.eof), (0, true));
    }

    #[test]
    fn a_read_asks_at_most_max_io_and_nothing_past_the_end() {
        assert_eq!(read_want(100, 0, 10), 10);
        assert_eq!(read_want(100, 95, 10), 5);
        assert_eq!(read_want(100, 100, 10), 0);
        assert_eq!(read_want(u64::MAX, 0, u32::MAX), crate::limits::MAX_IO);
        assert!(read_eof(100, 0, 10, 9));
        assert!(!read_eof(100, 0, 10, 10));
        assert!(read_eof(100, 90, 10, 10));
    }
}
