//! Which files an NFSv3 call changes that an NFSv4.1 delegation may cover (RFC 8881
//! §10.2): WRITE and SETATTR of a file, REMOVE of it, RENAME of it or over it, CREATE
//! over an existing name; and which it reads that a write delegation covers (READ,
//! and GETATTR, for which the holder is asked: the holder may cache writes the
//! server has not seen, §10.4.3). Only
//! the decoding is here; whether the call waits for a recall is decided by the worker
//! (`server::v3_recall`), whichever protocol.

use super::proto::{get_fh, NAME_MAX};
use crate::call::{Target, Touch, Touches};
use engine::xdr::XdrReader;
use nfs_wire::nfs3::{
    NFSPROC3_CREATE as CREATE, NFSPROC3_GETATTR as GETATTR, NFSPROC3_READ as READ,
    NFSPROC3_REMOVE as REMOVE, NFSPROC3_RENAME as RENAME, NFSPROC3_SETATTR as SETATTR,
    NFSPROC3_WRITE as WRITE,
};

/// Whether `proc_` is one that may conflict with a delegation (no decoding).
pub fn may_touch(proc_: u32) -> bool {
    matches!(
        proc_,
        GETATTR | READ | SETATTR | WRITE | CREATE | REMOVE | RENAME
    )
}

/// The files `proc_` with `args` names; `None` for other procedures. A target whose
/// arguments do not decode is left out (the procedure answers it).
pub fn touches(proc_: u32, args: &[u8]) -> Option<Touches<'_>> {
    if !may_touch(proc_) {
        return None;
    }
    let mut r = XdrReader::new(args);
    let mut targets = [None, None];
    match proc_ {
        GETATTR | READ | SETATTR | WRITE => targets[0] = get_fh(&mut r).ok().map(Target::File),
        CREATE | REMOVE => targets[0] = entry(&mut r),
        _ => {
            targets[0] = entry(&mut r);
            targets[1] = entry(&mut r);
        }
    }
    let how = match proc_ {
        GETATTR => Touch::Attrs,
        READ => Touch::Read,
        SETATTR | WRITE => Touch::Write,
        _ => Touch::Namespace,
    };
    // Layouts map data (RFC 8881 §12.5.5): reads and WRITE (a data server's own
    // traffic) leave them alone.
    let layout = !matches!(proc_, GETATTR | READ | WRITE);
    Some(Touches {
        how,
        layout,
        targets,
    })
}

/// diropargs3 (RFC 1813 §2.6): the directory's handle and the name.
fn entry<'a>(r: &mut XdrReader<'a>) -> Option<Target<'a>> {
    let dir = get_fh(r).ok();
    let name = r.opaque_var(NAME_MAX).ok()?;
    Some(Target::Entry(dir?, name))
}
