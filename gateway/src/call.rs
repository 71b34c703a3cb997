//! What every front end's procedure runs with, and what it tells its caller: the
//! per-call context (file model, export table, client address, credential, connection)
//! and the outcome the worker turns into an RPC reply. Protocol-neutral, so NFSv3,
//! MOUNT and NFSv4.1 share it without importing each other (docs/architecture.md §2).

use crate::export::Exports;
use crate::fs::FileModel;

/// Everything a call needs besides its arguments.
pub struct Ctx<'a> {
    pub model: &'a FileModel,
    pub exports: &'a Exports,
    pub mounts: &'a crate::mount::MountTable,
    pub client: std::net::SocketAddr,
    pub cred: engine::rpc::Cred,
    /// The connection the call arrived on (NFSv4.1 binds back channels to it).
    pub conn: Option<crate::conn::ConnRef>,
}

/// What the caller should send (RFC 5531 §9: accept_stat).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The results are in `out`.
    Done,
    /// Rewind and reply GARBAGE_ARGS.
    GarbageArgs,
    /// Rewind and reply PROC_UNAVAIL.
    ProcUnavail,
}
