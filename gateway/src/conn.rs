//! The connection a call arrived on, named without any protocol: NFSv4.1 sessions bind
//! it as their back channel (RFC 8881 §2.10.3.1), and the NFSv3 front end carries it so
//! a v3 call that recalls a delegation knows where it came from. Owned by no front end,
//! so `state`, `nfs3` and `nfs4` can all name it (docs/architecture.md §2, layering rules).

/// A connection, as the reactor that owns it knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnRef {
    /// The reactor that owns the connection.
    pub reactor: usize,
    pub kind: ConnKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConnKind {
    Tcp(engine::tcp::ConnId),
    /// RPC-over-RDMA (callbacks as RFC 8167 reverse calls on it).
    Rdma(engine::rdma::server::ConnId),
}
