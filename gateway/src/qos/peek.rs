//! What a call costs, read from its record before it is classified: the export its
//! handle names and, for a READ or WRITE, its byte count (NFSv3: RFC 1813 §3.3.6,
//! §3.3.7; NFSv4.1: the `SEQUENCE, PUTFH, READ|WRITE` COMPOUNDs clients send for data,
//! RFC 8881 §18.22, §18.32, §18.46). Every value is the client's: an undecodable record costs one operation
//! and names no export (`classify` answers it as it would anyway), counts are capped
//! at the largest transfer the gateway makes (`limits::MAX_IO`).

use engine::rpc;
use engine::xdr::XdrReader;
use nfs_wire::nfs3::{NFSPROC3_READ, NFSPROC3_WRITE};
use nfs_wire::nfs4::{OP_PUTFH, OP_READ, OP_SEQUENCE, OP_WRITE};
use nfs_wire::{NFS_PROGRAM, NFS_V3, NFS_V4};

/// A call's charge beyond its one operation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cost {
    /// The export id its first file handle names (unauthenticated: a bucket choice).
    pub export: Option<u16>,
    /// Bytes a READ asks for.
    pub read: u32,
    /// Bytes a WRITE carries.
    pub write: u32,
}

/// NFSv3 file handles are at most this long (RFC 1813 §2.5, NFS3_FHSIZE).
const FHSIZE3: usize = 64;

/// NFSv4 file handles are at most this long (RFC 8881 §3.2, NFS4_FHSIZE).
const FHSIZE4: usize = 128;
/// A COMPOUND tag longer than this is not a data call's (clients send none).
const TAG_MAX: usize = 64;

/// The cost of the call in `record`: NFSv3 calls and NFSv4.1 data COMPOUNDs are
/// charged their bytes and export; other COMPOUNDs and MOUNT calls one operation to
/// their client's rule.
pub fn peek(record: &[u8]) -> Cost {
    let Ok((h, at)) = rpc::decode_call(record) else {
        return Cost::default();
    };
    let args = record.get(at..).unwrap_or_default();
    match (h.prog, h.vers, h.proc_) {
        (NFS_PROGRAM, NFS_V3, p) if p != 0 => v3(p, args),
        (NFS_PROGRAM, NFS_V4, 1) => v4(args).unwrap_or_default(),
        _ => Cost::default(),
    }
}

/// An NFSv4.1 COMPOUND that starts `SEQUENCE, PUTFH`: its export, and the count of a
/// READ or the data of a WRITE right after (the shape of every data call; anything
/// else is one operation on the export).
fn v4(args: &[u8]) -> Option<Cost> {
    let mut r = XdrReader::new(args);
    r.opaque_var(TAG_MAX).ok()?;
    r.u32().ok()?; // minorversion
    let n = r.u32().ok()?;
    if n < 2 || r.u32().ok()? != OP_SEQUENCE {
        return None;
    }
    // sessionid, sequenceid, slotid, highest_slotid, cachethis (§18.46.1).
    r.skip(16 + 4 * 4).ok()?;
    if r.u32().ok()? != OP_PUTFH {
        return None;
    }
    let fh = r.opaque_var(FHSIZE4).ok()?;
    let mut cost = Cost {
        export: crate::fs::FileModel::peek_handle(fh).map(|(e, _)| e),
        ..Cost::default()
    };
    if n < 3 {
        return Some(cost);
    }
    let cap = |c: u32| c.min(crate::limits::MAX_IO as u32);
    match r.u32().ok()? {
        OP_READ => {
            r.skip(16 + 8).ok()?; // stateid, offset
            cost.read = cap(r.u32().ok()?);
        }
        OP_WRITE => {
            r.skip(16 + 8 + 4).ok()?; // stateid, offset, stable
            cost.write = cap(r.u32().ok()?); // the data's length
        }
        _ => {}
    }
    Some(cost)
}

fn v3(proc_: u32, args: &[u8]) -> Cost {
    let mut r = XdrReader::new(args);
    // Every NFSv3 procedure but NULL starts with a file handle (RFC 1813 §3.3).
    let Ok(fh) = r.opaque_var(FHSIZE3) else {
        return Cost::default();
    };
    let mut cost = Cost {
        export: crate::fs::FileModel::peek_handle(fh).map(|(e, _)| e),
        ..Cost::default()
    };
    let count = |r: &mut XdrReader| -> u32 {
        let n = r.u64().and_then(|_| r.u32()).unwrap_or(0);
        n.min(crate::limits::MAX_IO as u32)
    };
    match proc_ {
        NFSPROC3_READ => cost.read = count(&mut r),
        NFSPROC3_WRITE => cost.write = count(&mut r),
        _ => {}
    }
    cost
}
