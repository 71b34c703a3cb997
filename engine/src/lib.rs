//! The polled-mode engine: pinned run-to-completion reactors, lock-free rings, hugepage
//! buffer pools, a zero-copy XDR cursor, ONC RPC and record-marked RPC over TCP.
//!
//! This crate knows nothing about NFS: programs are dispatched by the caller.

pub mod fabric;
pub mod mem;
pub mod rdma;
pub mod reactor;
pub mod ring;
pub mod rpc;
pub mod rpcrdma;
pub mod tcp;
pub mod xdr;
