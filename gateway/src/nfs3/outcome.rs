//! NFSv3 replies (RFC 1813 §3.3) of the neutral outcomes every executor returns
//! (`crate::outcome`, the read cache's hits): the reactor's cache and io_uring
//! path and the workers hand these over, and only this module turns them into
//! NFSv3 bytes.

use super::proto::{put_fattr, put_post_op_attr, put_wcc};
use crate::fs::Attr;
use crate::outcome::{CommitDone, ReadDone, ReadSlots, WriteDone};
use engine::xdr::{XdrResult, XdrWriter};
use std::ops::Range;

/// GETATTR3resok after its status (RFC 1813 §3.3.1): NFS3_OK and the attributes.
pub fn put_getattr_ok(w: &mut XdrWriter, attr: &Attr) -> XdrResult<()> {
    w.u32(0)?;
    put_fattr(w, attr)
}

/// READ3resok (RFC 1813 §3.3.6) up to the data's length word: status, attributes,
/// count, eof and the data's length. The data follows (copied or sent from pages).
pub fn put_read_head(w: &mut XdrWriter, d: &ReadDone) -> XdrResult<()> {
    w.u32(0)?;
    put_post_op_attr(w, Some(&d.attr))?;
    w.u32(d.n as u32)?;
    w.bool(d.eof)?;
    w.u32(d.n as u32)
}

/// READ3resok whole: `put_read_head`, then room for the data (and its padding),
/// which `data` fills. Returns where the data went in the writer's buffer (the
/// reply's DDP item, RFC 8267 §4). Nothing written (`w` rewound) when it does not fit.
pub fn put_read_ok(
    w: &mut XdrWriter,
    d: &ReadDone,
    data: impl FnOnce(&mut [u8]),
) -> XdrResult<Range<usize>> {
    let start = w.position();
    let r = put_read_head(w, d).and_then(|_| {
        let at = w.position();
        w.reserve_opaque_fixed(d.n).map(|dst| (at, dst))
    });
    match r {
        Ok((at, dst)) => {
            data(dst);
            Ok(at..at + d.n)
        }
        Err(e) => {
            w.rewind(start);
            Err(e)
        }
    }
}

/// READ3resok's head with count, eof and length reserved (`patch_read`): the data
/// starts at the position it leaves.
pub fn put_read_slots(w: &mut XdrWriter, attr: &Attr) -> XdrResult<ReadSlots> {
    w.u32(0)?;
    put_post_op_attr(w, Some(attr))?;
    Ok(ReadSlots {
        count_at: w.reserve_u32()?,
        eof_at: w.reserve_u32()?,
        len_at: w.reserve_u32()?,
    })
}

/// Fills in the slots `put_read_slots` reserved with the read's outcome.
pub fn patch_read(w: &mut XdrWriter, at: &ReadSlots, n: usize, eof: bool) {
    w.patch_u32(at.count_at, n as u32);
    w.patch_u32(at.eof_at, eof as u32);
    w.patch_u32(at.len_at, n as u32);
}

/// WRITE3resok (RFC 1813 §3.3.7): status, wcc_data, count, committed, verifier.
pub fn put_write_ok(w: &mut XdrWriter, d: &WriteDone) -> XdrResult<()> {
    w.u32(0)?;
    put_wcc(w, Some(&d.before), d.after.as_ref())?;
    w.u32(d.count)?;
    w.u32(d.committed)?;
    w.opaque_fixed(&d.verf)
}

/// COMMIT3resok (RFC 1813 §3.3.21): status, wcc_data (a COMMIT changes no
/// attribute: the same before and after), verifier.
pub fn put_commit_ok(w: &mut XdrWriter, d: &CommitDone) -> XdrResult<()> {
    w.u32(0)?;
    put_wcc(w, Some(&d.attr), Some(&d.attr))?;
    w.opaque_fixed(&d.verf)
}
