//! RPC-over-RDMA version 1 (RFC 8166, RFC 8267's NFS binding rules as data, RFC 8797)
//! as a sans-IO protocol core: bytes and completions in, work to do out. No I/O here;
//! `crate::rdma` drives it over a `crate::fabric::Fabric`.
//!
//! - [`wire`]: the transport header codec with hard limits;
//! - [`privdata`]: RFC 8797 connection private data and inline thresholds;
//! - [`responder`]: the server side (credits, call reassembly plans, reply plans,
//!   RDMA_ERROR and silent drops);
//! - [`requester`]: the client side (chunk building, credit accounting, reply decoding);
//! - [`reverse`]: RFC 8167 on the responder (direction by `msg_type`, callback
//!   headers, the callback XID table and reverse credits).

pub mod ddp;
pub mod privdata;
pub mod requester;
pub mod responder;
pub mod reverse;
pub mod wire;
