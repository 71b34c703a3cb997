//! Process-wide counts of the requests the s3 backend sends to the store, by kind
//! (`nfsgw_s3_requests_total{kind=...}`, docs/stats.md): every attempt counts, a retry
//! or a failover to another endpoint included, so the counts are the store round trips
//! NFS operations cost (`bench md --stats-url` divides them by the ops of each phase).

use std::sync::atomic::{AtomicU64, Ordering};

/// What a request does at the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Req {
    /// HeadObject.
    Head,
    /// GetObject (ranged or whole).
    Get,
    /// PutObject and UploadPart.
    Put,
    /// CopyObject and UploadPartCopy.
    Copy,
    /// DeleteObject.
    Delete,
    /// ListObjectsV2.
    List,
    /// CreateMultipartUpload, CompleteMultipartUpload, AbortMultipartUpload.
    Multipart,
}

pub const KINDS: [Req; 7] = [
    Req::Head,
    Req::Get,
    Req::Put,
    Req::Copy,
    Req::Delete,
    Req::List,
    Req::Multipart,
];

static COUNTS: [AtomicU64; 7] = [const { AtomicU64::new(0) }; 7];

impl Req {
    /// The `kind` label.
    pub fn name(self) -> &'static str {
        match self {
            Req::Head => "head",
            Req::Get => "get",
            Req::Put => "put",
            Req::Copy => "copy",
            Req::Delete => "delete",
            Req::List => "list",
            Req::Multipart => "multipart",
        }
    }
}

/// Counts one request about to be sent.
pub fn count(r: Req) {
    COUNTS[r as usize].fetch_add(1, Ordering::Relaxed);
}

/// Requests of kind `r` sent so far.
pub fn sent(r: Req) -> u64 {
    COUNTS[r as usize].load(Ordering::Relaxed)
}

/// One backend's own counts (the process-wide ones mix every backend a test
/// process opens): what the request-counting tests read.
#[derive(Default)]
pub struct Tally([AtomicU64; 7]);

impl Tally {
    /// Counts one request about to be sent, here and process-wide.
    pub fn count(&self, r: Req) {
        count(r);
        self.0[r as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Requests of kind `r` this backend sent.
    pub fn sent(&self, r: Req) -> u64 {
        self.0[r as usize].load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_counts_apart() {
        let before: Vec<u64> = KINDS.iter().map(|&k| sent(k)).collect();
        count(Req::List);
        count(Req::List);
        count(Req::Copy);
        let after: Vec<u64> = KINDS.iter().map(|&k| sent(k)).collect();
        // Other tests may count concurrently: at least these, in their own slots.
        assert!(after[5] >= before[5] + 2 && after[3] > before[3]);
        let names: Vec<&str> = KINDS.iter().map(|k| k.name()).collect();
        assert_eq!(
            names,
            ["head", "get", "put", "copy", "delete", "list", "multipart"]
        );
    }
}
