//! What the recall driver (`recall.rs`) asks of the back channel, in state's terms:
//! the callbacks it decides to send (`CbCall`), the security a session's callbacks
//! carry (`CbSec`), and what a reply means for the recall (`RecallReply`). The bytes
//! are the front end's: `nfs4::callback` implements `CallbackWire` (RFC 8881 §20,
//! CB_COMPOUND with CB_SEQUENCE and CB_RECALL).

use super::offload::OffloadOutcome;
use super::stateid::Stateid;

/// The credential callbacks on a session carry (callback_sec_parms4, RFC 8881 §18.36).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CbSec {
    /// AUTH_NONE.
    None,
    /// AUTH_SYS with the client's authsys_parms (uid, gid, up to 16 groups; the
    /// machine name sent is always "nfsgw").
    Sys {
        stamp: u32,
        uid: u32,
        gid: u32,
        gids: Vec<u32>,
    },
}

/// One callback the driver wants sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CbCall<'a> {
    /// CB_NULL: a probe of the back channel.
    Null,
    /// A recall of the delegation `stateid` on `fh`, on back-channel slot 0 of
    /// `session` with sequence id `seqid` (CB_SEQUENCE then CB_RECALL).
    Recall {
        session: [u8; 16],
        /// The session's minor version (`BackChannelInfo::minor`).
        minor: u32,
        /// The back-channel slot 0 sequence id for this call.
        seqid: u32,
        stateid: Stateid,
        fh: &'a [u8],
    },
    /// A finished asynchronous COPY told to its client (RFC 7862 §16.1: CB_SEQUENCE
    /// then CB_OFFLOAD, in a minor version 2 CB_COMPOUND): the destination `fh`, the
    /// copy's callback id `stateid`, and how it ended.
    Offload {
        session: [u8; 16],
        seqid: u32,
        stateid: Stateid,
        fh: &'a [u8],
        outcome: OffloadOutcome,
    },
    /// A recall of the layout `stateid` (its seqid already advanced) of `fh`, the whole
    /// file, any iomode (RFC 8881 §20.3: CB_SEQUENCE then CB_LAYOUTRECALL of
    /// LAYOUT4_FLEX_FILES, LAYOUTRECALL4_FILE).
    LayoutRecall {
        session: [u8; 16],
        minor: u32,
        seqid: u32,
        stateid: Stateid,
        fh: &'a [u8],
    },
    /// The deletion of data server device id `deviceid` (RFC 8881 §20.12:
    /// CB_SEQUENCE then CB_NOTIFY_DEVICEID with one NOTIFY_DEVICEID4_DELETE of
    /// LAYOUT4_FLEX_FILES).
    NotifyDelete {
        session: [u8; 16],
        minor: u32,
        seqid: u32,
        deviceid: [u8; 16],
    },
    /// CB_GETATTR of `fh`'s size and change (RFC 8881 §20.1, §10.4.3): what the
    /// holder of a write delegation on it has, asked when another client or NFSv3
    /// reads the file's attributes (CB_SEQUENCE then CB_GETATTR).
    Getattr {
        session: [u8; 16],
        minor: u32,
        seqid: u32,
        fh: &'a [u8],
        /// Ask time_deleg_access and time_deleg_modify too (RFC 9754 §6.1): the
        /// delegation delegated the file's times.
        times: bool,
    },
}

/// What a write delegation's holder answered CB_GETATTR (RFC 8881 §20.1.3): its
/// size and change attributes of the file, and the delegated times it sent (RFC 9754
/// §6.1: valid nfstime4s; `None` when not sent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CbAttrs {
    pub size: u64,
    pub change: u64,
    pub atime: Option<crate::fs::NfsTime>,
    pub mtime: Option<crate::fs::NfsTime>,
}

/// What the client's reply to a recall says (RFC 8881 §20.9.3 for CB_SEQUENCE,
/// §20.2.3 for CB_RECALL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecallReply {
    /// No usable answer: an RPC-level error, or a reply that does not decode.
    NoAnswer,
    /// CB_SEQUENCE failed in another way, or is missing: the slot did not move.
    SeqFailed,
    /// CB_SEQUENCE: the client's slot expects another sequence id
    /// (NFS4ERR_SEQ_MISORDERED).
    SeqMisordered,
    /// CB_SEQUENCE: the client ran our previous request on this slot and has no
    /// cached reply (NFS4ERR_RETRY_UNCACHED_REP): the recall got there.
    SeqUncached,
    /// CB_SEQUENCE succeeded; what CB_RECALL answered.
    Sequenced(RecallAnswer),
}

/// CB_RECALL's outcome once CB_SEQUENCE succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecallAnswer {
    /// The client will return the delegation.
    Accepted,
    /// The client does not know the stateid or handle (yet: it may not have seen
    /// the OPEN reply; NFS4ERR_BAD_STATEID, NFS4ERR_BADHANDLE).
    Unknown,
    /// Try again later (NFS4ERR_DELAY), or no CB_RECALL result came back.
    Later,
    /// Any other refusal; the client's status, for the log.
    Refused(u32),
}

/// The back channel's codec, as the recall driver uses it.
pub trait CallbackWire {
    /// The whole RPC record of `call` (no record mark) for `cb_program` with `sec`
    /// (`None`: AUTH_SYS as root); `None` when it does not fit `max` bytes.
    fn encode(
        &self,
        xid: u32,
        cb_program: u32,
        call: &CbCall,
        max: u32,
        sec: Option<&CbSec>,
    ) -> Option<Vec<u8>>;

    /// Whether a CB_NULL reply accepts the call.
    fn probe_ok(&self, record: &[u8]) -> bool;

    /// What a CB_COMPOUND reply to a recall (or to a CB_OFFLOAD: its status in the
    /// place of CB_RECALL's) says.
    fn recall_reply(&self, record: &[u8]) -> RecallReply;

    /// What a CB_COMPOUND reply to CB_GETATTR says: the sequencing and status as for
    /// a recall (`Sequenced(Accepted)` when CB_GETATTR succeeded) and, only then, the
    /// holder's attributes; `None` for anything unusable (a failed CB_GETATTR).
    fn getattr_reply(&self, record: &[u8]) -> (RecallReply, Option<CbAttrs>);
}
