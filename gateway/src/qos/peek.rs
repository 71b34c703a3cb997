//! What a call costs: the export its handle names and, for a READ or WRITE, its byte
//! count (NFSv3: RFC 1813 §3.3.6, §3.3.7; NFSv4.1: the `SEQUENCE, PUTFH, READ|WRITE`
//! COMPOUNDs clients send for data, RFC 8881 §18.22, §18.32, §18.46). Read by the
//! one peek per call the per-client statistics share (`stats::tenants::peek`): while a
//! rule exists the reactor peeks a record once on arrival and hands the result to
//! both (without a rule nothing peeks: the statistics count from `classify`'s decode,
//! `stats::tenants::Seen`). Every value is the
//! client's: an undecodable record costs one operation and names no export
//! (`classify` answers it as it would anyway), counts are capped at the largest
//! transfer the gateway makes (`limits::MAX_IO`).

use crate::stats::tenants::Peek;

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

impl From<Peek> for Cost {
    #[inline]
    fn from(p: Peek) -> Cost {
        Cost {
            export: p.export,
            read: p.read,
            write: p.write,
        }
    }
}

/// The cost of the call in `record` (the reactor already has the peek; this is for
/// callers that have only the record).
pub fn peek(record: &[u8]) -> Cost {
    crate::stats::tenants::peek(record).into()
}
