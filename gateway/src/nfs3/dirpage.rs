//! READDIRPLUS3resok (RFC 1813 §3.3.17) from listed entries: one encoder for the
//! worker's procedure (`procs::readdirplus`) and the reactor's answer from its
//! listings (`fast::readdirplus`), so both cut and encode a page the same way.

use super::proto::*;
use crate::cache::ListedEntry;
use crate::fs::Attr;
use engine::xdr::{padded, XdrResult, XdrWriter};

/// status, dir post_op_attr, cookieverf, end-of-list marker and eof.
pub(super) const READDIR_OVERHEAD: usize = 4 + POST_OP_ATTR_SIZE + 8 + 4 + 4;

/// The fewest bytes an entryplus3 takes: list marker, fileid, a one-byte name,
/// cookie, and neither attributes nor handle.
pub(super) const MIN_ENTRY: usize = 4 + 8 + 4 + 4 + 8 + 4 + 4;

/// Bytes of the fileid, name and cookie of an entry (without the list marker).
pub(super) fn entry_base_size(name: &[u8]) -> usize {
    8 + 4 + padded(name.len()) + 8
}

/// How many of `entries` a reply of `limit` bytes (maxcount) holds, and the reply's
/// bytes with them. `dircount` is taken as a hint: RFC 1813 §3.3.17 (IMPLEMENTATION)
/// gives it to spare the server attribute reads it does not need, and the Linux client
/// sends maxcount / 8, which would cut a page of short names at a third of what
/// maxcount holds; so only maxcount bounds a page, as nfs-ganesha fills it (a
/// directory of 1,000 files in 5 pages rather than 7: docs/performance.md "Listing,
/// third pass").
pub(super) fn plus_fit<'a>(
    entries: impl Iterator<Item = &'a ListedEntry>,
    limit: usize,
) -> (usize, usize) {
    let mut used = READDIR_OVERHEAD;
    let mut fit = 0;
    for e in entries {
        let (a, fh) = split(e);
        let size = 4 + entry_base_size(&e.name) + post_op_attr_size(a) + post_op_fh_size(fh);
        if used + size > limit {
            break;
        }
        used += size;
        fit += 1;
    }
    (fit, used)
}

fn split(e: &ListedEntry) -> (Option<&Attr>, Option<&crate::fs::FileHandle>) {
    match &e.plus {
        Some((a, fh)) => (Some(a), Some(fh)),
        None => (None, None),
    }
}

/// READDIRPLUS3resok with `entries` (all of which fit, `plus_fit`); `eof` when
/// they end the directory.
pub(super) fn put_plus_ok<'a>(
    out: &mut XdrWriter,
    dir: &Attr,
    verf: &[u8; 8],
    entries: impl Iterator<Item = &'a ListedEntry>,
    eof: bool,
) -> XdrResult<()> {
    out.u32(0)?;
    put_post_op_attr(out, Some(dir))?;
    out.opaque_fixed(verf)?;
    for e in entries {
        let (a, fh) = split(e);
        out.bool(true)?;
        out.u64(e.fileid)?;
        out.string(&e.name)?;
        out.u64(e.cookie)?;
        put_post_op_attr(out, a)?;
        put_post_op_fh(out, fh)?;
    }
    out.bool(false)?;
    out.bool(eof)
}
