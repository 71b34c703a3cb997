//! nfsstat4 (RFC 8881 §15.1) and the mappings from the file model's status
//! (`from_fs`) and from NFSv4.1 state's errors (`from_state`).

use crate::fs::Status;
use crate::state::StateError;

pub const NFS4_OK: u32 = 0;
pub const NFS4ERR_PERM: u32 = 1;
pub const NFS4ERR_NOENT: u32 = 2;
pub const NFS4ERR_IO: u32 = 5;
pub const NFS4ERR_NXIO: u32 = 6;
pub const NFS4ERR_ACCESS: u32 = 13;
pub const NFS4ERR_EXIST: u32 = 17;
pub const NFS4ERR_XDEV: u32 = 18;
pub const NFS4ERR_NOTDIR: u32 = 20;
pub const NFS4ERR_ISDIR: u32 = 21;
pub const NFS4ERR_INVAL: u32 = 22;
pub const NFS4ERR_FBIG: u32 = 27;
pub const NFS4ERR_NOSPC: u32 = 28;
pub const NFS4ERR_ROFS: u32 = 30;
pub const NFS4ERR_MLINK: u32 = 31;
pub const NFS4ERR_NAMETOOLONG: u32 = 63;
pub const NFS4ERR_NOTEMPTY: u32 = 66;
pub const NFS4ERR_DQUOT: u32 = 69;
pub const NFS4ERR_STALE: u32 = 70;
pub const NFS4ERR_BADHANDLE: u32 = 10001;
pub const NFS4ERR_BAD_COOKIE: u32 = 10003;
pub const NFS4ERR_NOTSUPP: u32 = 10004;
/// RFC 8276 §8.1 (extended attributes, NFSv4.2).
pub const NFS4ERR_NOXATTR: u32 = 10095;
pub const NFS4ERR_XATTR2BIG: u32 = 10096;
pub const NFS4ERR_TOOSMALL: u32 = 10005;
pub const NFS4ERR_SERVERFAULT: u32 = 10006;
pub const NFS4ERR_BADTYPE: u32 = 10007;
pub const NFS4ERR_DELAY: u32 = 10008;
pub const NFS4ERR_SAME: u32 = 10009;
pub const NFS4ERR_DENIED: u32 = 10010;
pub const NFS4ERR_EXPIRED: u32 = 10011;
pub const NFS4ERR_LOCKED: u32 = 10012;
pub const NFS4ERR_GRACE: u32 = 10013;
pub const NFS4ERR_FHEXPIRED: u32 = 10014;
pub const NFS4ERR_SHARE_DENIED: u32 = 10015;
pub const NFS4ERR_WRONGSEC: u32 = 10016;
pub const NFS4ERR_CLID_INUSE: u32 = 10017;
pub const NFS4ERR_RESOURCE: u32 = 10018;
pub const NFS4ERR_MOVED: u32 = 10019;
pub const NFS4ERR_NOFILEHANDLE: u32 = 10020;
pub const NFS4ERR_MINOR_VERS_MISMATCH: u32 = 10021;
pub const NFS4ERR_STALE_CLIENTID: u32 = 10022;
pub const NFS4ERR_STALE_STATEID: u32 = 10023;
pub const NFS4ERR_OLD_STATEID: u32 = 10024;
pub const NFS4ERR_BAD_STATEID: u32 = 10025;
pub const NFS4ERR_BAD_SEQID: u32 = 10026;
pub const NFS4ERR_NOT_SAME: u32 = 10027;
pub const NFS4ERR_LOCK_RANGE: u32 = 10028;
pub const NFS4ERR_SYMLINK: u32 = 10029;
pub const NFS4ERR_RESTOREFH: u32 = 10030;
pub const NFS4ERR_LEASE_MOVED: u32 = 10031;
pub const NFS4ERR_ATTRNOTSUPP: u32 = 10032;
pub const NFS4ERR_NO_GRACE: u32 = 10033;
pub const NFS4ERR_RECLAIM_BAD: u32 = 10034;
pub const NFS4ERR_RECLAIM_CONFLICT: u32 = 10035;
pub const NFS4ERR_BADXDR: u32 = 10036;
pub const NFS4ERR_LOCKS_HELD: u32 = 10037;
pub const NFS4ERR_OPENMODE: u32 = 10038;
pub const NFS4ERR_BADOWNER: u32 = 10039;
pub const NFS4ERR_BADCHAR: u32 = 10040;
pub const NFS4ERR_BADNAME: u32 = 10041;
pub const NFS4ERR_BAD_RANGE: u32 = 10042;
pub const NFS4ERR_LOCK_NOTSUPP: u32 = 10043;
pub const NFS4ERR_OP_ILLEGAL: u32 = 10044;
pub const NFS4ERR_DEADLOCK: u32 = 10045;
pub const NFS4ERR_FILE_OPEN: u32 = 10046;
pub const NFS4ERR_ADMIN_REVOKED: u32 = 10047;
pub const NFS4ERR_CB_PATH_DOWN: u32 = 10048;
pub const NFS4ERR_BADIOMODE: u32 = 10049;
pub const NFS4ERR_BADLAYOUT: u32 = 10050;
pub const NFS4ERR_BAD_SESSION_DIGEST: u32 = 10051;
pub const NFS4ERR_BADSESSION: u32 = 10052;
pub const NFS4ERR_BADSLOT: u32 = 10053;
pub const NFS4ERR_COMPLETE_ALREADY: u32 = 10054;
pub const NFS4ERR_CONN_NOT_BOUND_TO_SESSION: u32 = 10055;
pub const NFS4ERR_DELEG_ALREADY_WANTED: u32 = 10056;
pub const NFS4ERR_BACK_CHAN_BUSY: u32 = 10057;
pub const NFS4ERR_LAYOUTTRYLATER: u32 = 10058;
pub const NFS4ERR_LAYOUTUNAVAILABLE: u32 = 10059;
pub const NFS4ERR_NOMATCHING_LAYOUT: u32 = 10060;
pub const NFS4ERR_RECALLCONFLICT: u32 = 10061;
pub const NFS4ERR_UNKNOWN_LAYOUTTYPE: u32 = 10062;
pub const NFS4ERR_SEQ_MISORDERED: u32 = 10063;
pub const NFS4ERR_SEQUENCE_POS: u32 = 10064;
pub const NFS4ERR_REQ_TOO_BIG: u32 = 10065;
pub const NFS4ERR_REP_TOO_BIG: u32 = 10066;
pub const NFS4ERR_REP_TOO_BIG_TO_CACHE: u32 = 10067;
pub const NFS4ERR_RETRY_UNCACHED_REP: u32 = 10068;
pub const NFS4ERR_UNSAFE_COMPOUND: u32 = 10069;
pub const NFS4ERR_TOO_MANY_OPS: u32 = 10070;
pub const NFS4ERR_OP_NOT_IN_SESSION: u32 = 10071;
pub const NFS4ERR_HASH_ALG_UNSUPP: u32 = 10072;
pub const NFS4ERR_CLIENTID_BUSY: u32 = 10074;
pub const NFS4ERR_PNFS_IO_HOLE: u32 = 10075;
pub const NFS4ERR_SEQ_FALSE_RETRY: u32 = 10076;
pub const NFS4ERR_BAD_HIGH_SLOT: u32 = 10077;
pub const NFS4ERR_DEADSESSION: u32 = 10078;
pub const NFS4ERR_ENCR_ALG_UNSUPP: u32 = 10079;
pub const NFS4ERR_PNFS_NO_LAYOUT: u32 = 10080;
pub const NFS4ERR_NOT_ONLY_OP: u32 = 10081;
pub const NFS4ERR_WRONG_CRED: u32 = 10082;
pub const NFS4ERR_WRONG_TYPE: u32 = 10083;
pub const NFS4ERR_DIRDELEG_UNAVAIL: u32 = 10084;
pub const NFS4ERR_REJECT_DELEG: u32 = 10085;
pub const NFS4ERR_RETURNCONFLICT: u32 = 10086;
pub const NFS4ERR_DELEG_REVOKED: u32 = 10087;

/// The file model's status as nfsstat4 (RFC 8881 §15.1): one explicit table. The
/// NFSv3-only meanings map to their NFSv4 equivalent: NODEV and REMOTE have none
/// (NFS4ERR_IO), NOT_SYNC cannot happen in v4 (SERVERFAULT), JUKEBOX is DELAY.
pub fn from_fs(s: Status) -> u32 {
    match s {
        Status::Ok => NFS4_OK,
        Status::Perm => NFS4ERR_PERM,
        Status::NoEnt => NFS4ERR_NOENT,
        Status::Io => NFS4ERR_IO,
        Status::NxIo => NFS4ERR_NXIO,
        Status::Acces => NFS4ERR_ACCESS,
        Status::Exist => NFS4ERR_EXIST,
        Status::XDev => NFS4ERR_XDEV,
        Status::NotDir => NFS4ERR_NOTDIR,
        Status::IsDir => NFS4ERR_ISDIR,
        Status::Inval => NFS4ERR_INVAL,
        Status::FBig => NFS4ERR_FBIG,
        Status::NoSpc => NFS4ERR_NOSPC,
        Status::Rofs => NFS4ERR_ROFS,
        Status::MLink => NFS4ERR_MLINK,
        Status::NameTooLong => NFS4ERR_NAMETOOLONG,
        Status::NotEmpty => NFS4ERR_NOTEMPTY,
        Status::DQuot => NFS4ERR_DQUOT,
        Status::Stale => NFS4ERR_STALE,
        Status::BadHandle => NFS4ERR_BADHANDLE,
        Status::BadCookie => NFS4ERR_BAD_COOKIE,
        Status::NotSupp => NFS4ERR_NOTSUPP,
        Status::TooSmall => NFS4ERR_TOOSMALL,
        Status::ServerFault => NFS4ERR_SERVERFAULT,
        Status::BadType => NFS4ERR_BADTYPE,
        Status::NoDev | Status::Remote => NFS4ERR_IO,
        Status::NotSync => NFS4ERR_SERVERFAULT,
        Status::Jukebox => NFS4ERR_DELAY,
        // RFC 8276 §8.1 (v42: the file service's xattrs).
        Status::NoXattr => NFS4ERR_NOXATTR,
        Status::Xattr2Big => NFS4ERR_XATTR2BIG,
    }
}

/// A state error as nfsstat4 (RFC 8881 §15.1): one explicit table, total over
/// `StateError` (a new variant does not compile until it is placed here).
pub fn from_state(e: StateError) -> u32 {
    match e {
        StateError::BadSession => NFS4ERR_BADSESSION,
        StateError::BadSlot => NFS4ERR_BADSLOT,
        StateError::SeqMisordered => NFS4ERR_SEQ_MISORDERED,
        StateError::FalseRetry => NFS4ERR_SEQ_FALSE_RETRY,
        StateError::RetryUncached => NFS4ERR_RETRY_UNCACHED_REP,
        StateError::Delay => NFS4ERR_DELAY,
        StateError::StaleClientid => NFS4ERR_STALE_CLIENTID,
        StateError::CompleteAlready => NFS4ERR_COMPLETE_ALREADY,
        StateError::SessionLimit => NFS4ERR_NOSPC,
        StateError::Resource => NFS4ERR_RESOURCE,
        StateError::BadStateid => NFS4ERR_BAD_STATEID,
        StateError::OldStateid => NFS4ERR_OLD_STATEID,
        StateError::DelegRevoked => NFS4ERR_DELEG_REVOKED,
        StateError::Locked => NFS4ERR_LOCKED,
        StateError::OpenMode => NFS4ERR_OPENMODE,
        StateError::Invalid => NFS4ERR_INVAL,
        StateError::LocksHeld => NFS4ERR_LOCKS_HELD,
        StateError::ShareDenied => NFS4ERR_SHARE_DENIED,
        StateError::Inconsistent => NFS4ERR_SERVERFAULT,
    }
}

/// `?` on a state result inside an operation that answers nfsstat4.
impl From<StateError> for u32 {
    fn from(e: StateError) -> u32 {
        from_state(e)
    }
}

/// A state check's outcome as nfsstat4: NFS4_OK when it passed.
pub fn of_state(r: Result<(), StateError>) -> u32 {
    r.map_or_else(from_state, |()| NFS4_OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table, variant by variant, written out independently of `from_state`.
    #[test]
    fn every_state_error_has_its_nfsstat4() {
        let want = [
            (StateError::BadSession, 10052),
            (StateError::BadSlot, 10053),
            (StateError::SeqMisordered, 10063),
            (StateError::FalseRetry, 10076),
            (StateError::RetryUncached, 10068),
            (StateError::Delay, 10008),
            (StateError::StaleClientid, 10022),
            (StateError::CompleteAlready, 10054),
            (StateError::SessionLimit, 28),
            (StateError::Resource, 10018),
            (StateError::BadStateid, 10025),
            (StateError::OldStateid, 10024),
            (StateError::DelegRevoked, 10087),
            (StateError::Locked, 10012),
            (StateError::OpenMode, 10038),
            (StateError::Invalid, 22),
            (StateError::LocksHeld, 10037),
            (StateError::ShareDenied, 10015),
            (StateError::Inconsistent, 10006),
        ];
        assert_eq!(
            want.map(|(e, _)| e),
            StateError::ALL,
            "one row per variant, in order"
        );
        for (e, n) in want {
            assert_eq!(from_state(e), n, "{e:?}");
            assert_eq!(u32::from(e), n, "{e:?} through From");
            assert_eq!(of_state(Err(e)), n, "{e:?} through of_state");
        }
        assert_eq!(of_state(Ok(())), NFS4_OK);
    }

    /// No two meanings share a number: a client can tell every one apart.
    #[test]
    fn state_errors_map_to_distinct_errors() {
        let mut seen = std::collections::HashSet::new();
        for e in StateError::ALL {
            let n = from_state(e);
            assert_ne!(n, NFS4_OK, "{e:?}");
            assert!(seen.insert(n), "{e:?} shares {n}");
        }
    }
}
