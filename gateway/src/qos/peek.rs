//! What a call costs, read from its record before it is classified: the export its
//! handle names and, for an NFSv3 READ or WRITE, its byte count (RFC 1813 §3.3.6,
//! §3.3.7). Every value is the client's: an undecodable record costs one operation
//! and names no export (`classify` answers it as it would anyway), counts are capped
//! at the largest transfer the gateway makes (`limits::MAX_IO`).

use engine::rpc;
use engine::xdr::XdrReader;
use nfs_wire::nfs3::{NFSPROC3_READ, NFSPROC3_WRITE};
use nfs_wire::{NFS_PROGRAM, NFS_V3};

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

/// The cost of the call in `record`. NFSv3 calls are charged their bytes and
/// export; NFSv4.1 COMPOUNDs and MOUNT calls one operation to their client's rule.
pub fn peek(record: &[u8]) -> Cost {
    let Ok((h, at)) = rpc::decode_call(record) else {
        return Cost::default();
    };
    if h.prog != NFS_PROGRAM || h.vers != NFS_V3 || h.proc_ == 0 {
        return Cost::default();
    }
    let mut r = XdrReader::new(record.get(at..).unwrap_or_default());
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
    match h.proc_ {
        NFSPROC3_READ => cost.read = count(&mut r),
        NFSPROC3_WRITE => cost.write = count(&mut r),
        _ => {}
    }
    cost
}
