//! READDIRPLUS3resok (RFC 1813 §3.3.17) from listed entries: one encoder for the
//! worker's procedure (`procs::readdirplus`) and the reactor's answer from its
//! listings (`fast::readdirplus`), so both cut and encode a page the same way.

use super::proto::*;
use crate::cache::ListedEntry;
use crate::fs::Attr;
use engine::xdr::{padded, XdrResult, XdrWriter};

/// status, dir post_op_attr, cookieverf, end-of-list marker and eof.
pub(super) const READDIR_OVERHEAD: usize = 4 + POST_OP_ATTR_SIZE + 8 + 4 + 4;

/// Bytes of the fileid, name and cookie of an entry (without the list marker).
pub(super) fn entry_base_size(name: &[u8]) -> usize {
    8 + 4 + padded(name.len()) + 8
}

/// READDIRPLUS's dircount as a bound: 0 means "no separate bound".
pub(super) fn plus_dlimit(dircount: usize) -> usize {
    if dircount == 0 {
        usize::MAX
    } else {
        dircount
    }
}

/// How many of `entries` a reply of `limit` bytes holds when their fileid/name/cookie
/// parts may take `dlimit` bytes (dircount; at least one entry whatever it says),
/// and the reply's bytes with them.
pub(super) fn plus_fit<'a>(
    entries: impl Iterator<Item = &'a ListedEntry>,
    limit: usize,
    dlimit: usize,
) -> (usize, usize) {
    let mut used = READDIR_OVERHEAD;
    let mut dused = 0usize;
    let mut fit = 0;
    for e in entries {
        let (a, fh) = split(e);
        let base = entry_base_size(&e.name);
        let size = 4 + base + post_op_attr_size(a) + post_op_fh_size(fh);
        if used + size > limit || (fit > 0 && dused + base > dlimit) {
            break;
        }
        used += size;
        dused += base;
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
