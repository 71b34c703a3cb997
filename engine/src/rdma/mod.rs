//! RPC over RDMA at the I/O edge: drives the sans-IO protocol core
//! (`crate::rpcrdma`) over a `crate::fabric::Fabric`.
//!
//! - [`server`]: the responder transport a reactor polls (the RDMA analog of
//!   `crate::tcp::TcpTransport`);
//! - [`client`]: a requester connection for `bench` and tests.

pub mod admit;
pub mod client;
mod reclaim;
mod reply_budget;
pub mod server;
mod timeouts;
