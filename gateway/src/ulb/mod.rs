//! The NFS upper-layer binding for RPC-over-RDMA (RFC 8267): which items are
//! DDP-eligible, checked on calls; a reply's are noted by the encoder that wrote them
//! (`crate::ddp`). Nothing else may travel in a read or write chunk (R8166-58,
//! R8267-01, R8267-10, R8267-12).
//!
//! A transport concern: it imports no front end and no front end imports it
//! (`tests/arch/check.py`); the two meet in the neutral `crate::ddp` and the caller
//! hands in the COMPOUND's walk (`front::V4_PATHS.plan_ddp`).
//!
//! - [`v3`]: NFSv3 (§4): one eligible item per call or reply, always the last.
//! - [`v4`]: NFSv4.1 COMPOUND (§6.1, §6.4): WRITE data and CREATE(NF4LNK) linkdata in
//!   calls (anywhere in the COMPOUND), READ data and READLINK text in replies, paired
//!   with the write list in COMPOUND order.

pub mod v3;
pub mod v4;

pub use v3::check_call_planned;
#[cfg(test)]
pub use v3::{check_call, reply_data};

/// The DDP-eligible results a reply to a call may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyItem {
    None,
    /// NFSv3 READ data.
    ReadData,
    /// NFSv3 READLINK path.
    ReadlinkPath,
    /// An NFSv4 COMPOUND: its READ-class results are noted by the COMPOUND loop from
    /// what its READ and READLINK report (`crate::ddp::note`) or kept with a reply the
    /// slot's cache replays (`crate::ddp::replayed`), or passed by the executor that
    /// answered (the cache's and the io_uring READ's outcome).
    Compound,
}

/// A call whose reduced items break the binding: answer GARBAGE_ARGS with this xid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Violation {
    pub xid: u32,
}
