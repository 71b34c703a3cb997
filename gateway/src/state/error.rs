//! Why a state operation failed, in state's terms (RFC 8881 §15.1 gives each meaning;
//! `nfs4::status::from_state` is the one table that turns them into nfsstat4).

/// A state operation's failure. Each variant names what went wrong; the wire number
/// is the front end's business (`nfs4::status::from_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StateError {
    /// The session is unknown or destroyed, or its client is gone (§2.10.4).
    BadSession,
    /// The slot is beyond the session's slot table (§2.10.6.1).
    BadSlot,
    /// A sequence id neither the current request's nor the next one (§2.10.6.1).
    SeqMisordered,
    /// A retransmission whose request differs from the one the slot ran
    /// (§2.10.6.1.3.1): never answered with another request's cached reply.
    FalseRetry,
    /// A retransmission whose reply was not cached (§2.10.6.1.3).
    RetryUncached,
    /// Try again later: a slot still busy, a budget exhausted for now, a conflict
    /// being resolved (§15.1.1.3).
    Delay,
    /// The client ID is not (or no longer) known (§15.1.9.2).
    StaleClientid,
    /// RECLAIM_COMPLETE already done by this client (§18.51.4).
    CompleteAlready,
    /// The client holds as many sessions as it may: its own doing, not the server's
    /// shortage (NFS4ERR_NOSPC, §18.36.4).
    SessionLimit,
    /// A table this client (or all clients) may grow is full (NFS4ERR_RESOURCE).
    Resource,
    /// The stateid was never issued, is of another kind, client or file, or is
    /// special where that is not allowed (§8.2.3).
    BadStateid,
    /// The stateid's seqid is older than the current one (§8.2.2).
    OldStateid,
    /// The delegation was revoked (§10.2.1).
    DelegRevoked,
    /// I/O refused by a share reservation or lock of another owner (§9.7).
    Locked,
    /// The stateid's access does not allow the I/O (§8.2.3, NFS4ERR_OPENMODE).
    OpenMode,
    /// An argument state cannot accept: a zero or overflowing byte range, share
    /// bits out of range, a downgrade that is no union of earlier opens.
    Invalid,
    /// Locks are still held: CLOSE or FREE_STATEID refused (§18.2.4, §18.38.4).
    LocksHeld,
    /// The share reservation conflicts with another open (§9.7).
    ShareDenied,
    /// The tables disagree with themselves (a bug, answered rather than panicked).
    Inconsistent,
    /// LAYOUTCOMMIT under a layout stateid that holds no RW layout (§18.42.3).
    BadLayout,
    /// LAYOUTRETURN of a file the client holds no layout of (§18.44.3).
    NoMatchingLayout,
    /// LAYOUTGET by a client whose layout of the file is being recalled: it must
    /// return that one first (NFS4ERR_RECALLCONFLICT, §12.5.5.2.1).
    RecallConflict,
}

impl StateError {
    /// Every variant once, in declaration order (the mapping's tests walk it).
    pub const ALL: [StateError; 22] = [
        StateError::BadSession,
        StateError::BadSlot,
        StateError::SeqMisordered,
        StateError::FalseRetry,
        StateError::RetryUncached,
        StateError::Delay,
        StateError::StaleClientid,
        StateError::CompleteAlready,
        StateError::SessionLimit,
        StateError::Resource,
        StateError::BadStateid,
        StateError::OldStateid,
        StateError::DelegRevoked,
        StateError::Locked,
        StateError::OpenMode,
        StateError::Invalid,
        StateError::LocksHeld,
        StateError::ShareDenied,
        StateError::Inconsistent,
        StateError::BadLayout,
        StateError::NoMatchingLayout,
        StateError::RecallConflict,
    ];
}

/// A state check with nothing to return but whether it passed.
pub type Checked = Result<(), StateError>;
