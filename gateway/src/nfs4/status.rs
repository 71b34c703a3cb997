//! nfsstat4 (RFC 8881 §15.1; RFC 7862 §11.2 and RFC 8276 §8.1 add NFSv4.2's) as a
//! type, `Nfsstat4`, and the mappings to it from the file model's status (`from_fs`) and from NFSv4.1 state's errors (`from_state`).
//!
//! An `Nfsstat4` holds only a number RFC 8881 §15.1 defines: the constants below are
//! the only way to name one, `Nfsstat4::new`/`decode` the only way to read one from a
//! peer (a callback reply, a test's view of a reply), and `put`/`patch` the only way
//! one becomes wire bytes. An nfsstat3, an opcode or an ordinal cannot pass for it.

use crate::fs::Status;
use crate::state::StateError;
use engine::xdr::{XdrError, XdrReader, XdrResult, XdrWriter};

/// An nfsstat4 (RFC 8881 §15.1); `NFS4_OK` or one of the `NFS4ERR_*` constants.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct Nfsstat4(u32);

/// The constants, each as RFC 8881 §15.1 names it, and `Nfsstat4::ALL`, their table.
macro_rules! nfsstat4 {
    ($($name:ident = $n:literal,)*) => {
        $(pub const $name: Nfsstat4 = Nfsstat4($n);)*
        impl Nfsstat4 {
            /// Every nfsstat4 RFC 8881 §15.1 defines, with its name, ascending.
            pub const ALL: &[(Nfsstat4, &str)] = &[$(($name, stringify!($name)),)*];
        }
    };
}

nfsstat4! {
    NFS4_OK = 0,
    NFS4ERR_PERM = 1,
    NFS4ERR_NOENT = 2,
    NFS4ERR_IO = 5,
    NFS4ERR_NXIO = 6,
    NFS4ERR_ACCESS = 13,
    NFS4ERR_EXIST = 17,
    NFS4ERR_XDEV = 18,
    NFS4ERR_NOTDIR = 20,
    NFS4ERR_ISDIR = 21,
    NFS4ERR_INVAL = 22,
    NFS4ERR_FBIG = 27,
    NFS4ERR_NOSPC = 28,
    NFS4ERR_ROFS = 30,
    NFS4ERR_MLINK = 31,
    NFS4ERR_NAMETOOLONG = 63,
    NFS4ERR_NOTEMPTY = 66,
    NFS4ERR_DQUOT = 69,
    NFS4ERR_STALE = 70,
    NFS4ERR_BADHANDLE = 10001,
    NFS4ERR_BAD_COOKIE = 10003,
    NFS4ERR_NOTSUPP = 10004,
    NFS4ERR_TOOSMALL = 10005,
    NFS4ERR_SERVERFAULT = 10006,
    NFS4ERR_BADTYPE = 10007,
    NFS4ERR_DELAY = 10008,
    NFS4ERR_SAME = 10009,
    NFS4ERR_DENIED = 10010,
    NFS4ERR_EXPIRED = 10011,
    NFS4ERR_LOCKED = 10012,
    NFS4ERR_GRACE = 10013,
    NFS4ERR_FHEXPIRED = 10014,
    NFS4ERR_SHARE_DENIED = 10015,
    NFS4ERR_WRONGSEC = 10016,
    NFS4ERR_CLID_INUSE = 10017,
    NFS4ERR_RESOURCE = 10018,
    NFS4ERR_MOVED = 10019,
    NFS4ERR_NOFILEHANDLE = 10020,
    NFS4ERR_MINOR_VERS_MISMATCH = 10021,
    NFS4ERR_STALE_CLIENTID = 10022,
    NFS4ERR_STALE_STATEID = 10023,
    NFS4ERR_OLD_STATEID = 10024,
    NFS4ERR_BAD_STATEID = 10025,
    NFS4ERR_BAD_SEQID = 10026,
    NFS4ERR_NOT_SAME = 10027,
    NFS4ERR_LOCK_RANGE = 10028,
    NFS4ERR_SYMLINK = 10029,
    NFS4ERR_RESTOREFH = 10030,
    NFS4ERR_LEASE_MOVED = 10031,
    NFS4ERR_ATTRNOTSUPP = 10032,
    NFS4ERR_NO_GRACE = 10033,
    NFS4ERR_RECLAIM_BAD = 10034,
    NFS4ERR_RECLAIM_CONFLICT = 10035,
    NFS4ERR_BADXDR = 10036,
    NFS4ERR_LOCKS_HELD = 10037,
    NFS4ERR_OPENMODE = 10038,
    NFS4ERR_BADOWNER = 10039,
    NFS4ERR_BADCHAR = 10040,
    NFS4ERR_BADNAME = 10041,
    NFS4ERR_BAD_RANGE = 10042,
    NFS4ERR_LOCK_NOTSUPP = 10043,
    NFS4ERR_OP_ILLEGAL = 10044,
    NFS4ERR_DEADLOCK = 10045,
    NFS4ERR_FILE_OPEN = 10046,
    NFS4ERR_ADMIN_REVOKED = 10047,
    NFS4ERR_CB_PATH_DOWN = 10048,
    NFS4ERR_BADIOMODE = 10049,
    NFS4ERR_BADLAYOUT = 10050,
    NFS4ERR_BAD_SESSION_DIGEST = 10051,
    NFS4ERR_BADSESSION = 10052,
    NFS4ERR_BADSLOT = 10053,
    NFS4ERR_COMPLETE_ALREADY = 10054,
    NFS4ERR_CONN_NOT_BOUND_TO_SESSION = 10055,
    NFS4ERR_DELEG_ALREADY_WANTED = 10056,
    NFS4ERR_BACK_CHAN_BUSY = 10057,
    NFS4ERR_LAYOUTTRYLATER = 10058,
    NFS4ERR_LAYOUTUNAVAILABLE = 10059,
    NFS4ERR_NOMATCHING_LAYOUT = 10060,
    NFS4ERR_RECALLCONFLICT = 10061,
    NFS4ERR_UNKNOWN_LAYOUTTYPE = 10062,
    NFS4ERR_SEQ_MISORDERED = 10063,
    NFS4ERR_SEQUENCE_POS = 10064,
    NFS4ERR_REQ_TOO_BIG = 10065,
    NFS4ERR_REP_TOO_BIG = 10066,
    NFS4ERR_REP_TOO_BIG_TO_CACHE = 10067,
    NFS4ERR_RETRY_UNCACHED_REP = 10068,
    NFS4ERR_UNSAFE_COMPOUND = 10069,
    NFS4ERR_TOO_MANY_OPS = 10070,
    NFS4ERR_OP_NOT_IN_SESSION = 10071,
    NFS4ERR_HASH_ALG_UNSUPP = 10072,
    NFS4ERR_CLIENTID_BUSY = 10074,
    NFS4ERR_PNFS_IO_HOLE = 10075,
    NFS4ERR_SEQ_FALSE_RETRY = 10076,
    NFS4ERR_BAD_HIGH_SLOT = 10077,
    NFS4ERR_DEADSESSION = 10078,
    NFS4ERR_ENCR_ALG_UNSUPP = 10079,
    NFS4ERR_PNFS_NO_LAYOUT = 10080,
    NFS4ERR_NOT_ONLY_OP = 10081,
    NFS4ERR_WRONG_CRED = 10082,
    NFS4ERR_WRONG_TYPE = 10083,
    NFS4ERR_DIRDELEG_UNAVAIL = 10084,
    NFS4ERR_REJECT_DELEG = 10085,
    NFS4ERR_RETURNCONFLICT = 10086,
    NFS4ERR_DELEG_REVOKED = 10087,
    // RFC 7862 §11.2 (NFSv4.2).
    NFS4ERR_PARTNER_NOTSUPP = 10088,
    NFS4ERR_PARTNER_NO_AUTH = 10089,
    NFS4ERR_UNION_NOTSUPP = 10090,
    NFS4ERR_OFFLOAD_DENIED = 10091,
    NFS4ERR_WRONG_LFS = 10092,
    NFS4ERR_BADLABEL = 10093,
    NFS4ERR_OFFLOAD_NO_REQS = 10094,
    // RFC 8276 §8.1 (extended attributes, NFSv4.2).
    NFS4ERR_NOXATTR = 10095,
    NFS4ERR_XATTR2BIG = 10096,
}

impl Nfsstat4 {
    /// The status a peer sent, when RFC 8881 §15.1 defines it (10002, 10073 and
    /// NFSv3's 19 are not nfsstat4).
    pub fn new(n: u32) -> Option<Nfsstat4> {
        let all = Nfsstat4::ALL;
        all.binary_search_by_key(&n, |(s, _)| s.0)
            .ok()
            .map(|i| all[i].0)
    }

    /// Reads an nfsstat4: an undefined number is `XdrError::BadValue`.
    pub fn decode(r: &mut XdrReader) -> XdrResult<Nfsstat4> {
        Nfsstat4::new(r.u32()?).ok_or(XdrError::BadValue)
    }

    /// Writes the status.
    #[inline]
    pub fn put(self, w: &mut XdrWriter) -> XdrResult<()> {
        w.u32(self.0)
    }

    /// Writes the status over the word reserved at `at` (`XdrWriter::reserve_u32`).
    #[inline]
    pub fn patch(self, w: &mut XdrWriter, at: usize) {
        w.patch_u32(at, self.0)
    }

    /// The number on the wire, for the code that reads or writes replies as words
    /// (the reactor fast paths, the RDMA binding).
    pub const fn as_u32(self) -> u32 {
        self.0
    }

    /// Whether this is NFS4_OK.
    pub const fn is_ok(self) -> bool {
        self.0 == NFS4_OK.0
    }

    /// The name RFC 8881 §15.1 gives it.
    pub fn name(self) -> &'static str {
        Nfsstat4::ALL
            .iter()
            .find(|(s, _)| *s == self)
            .map_or("?", |(_, n)| n)
    }
}

impl std::fmt::Debug for Nfsstat4 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}({})", self.name(), self.0)
    }
}

/// The file model's status as nfsstat4 (RFC 8881 §15.1): one explicit table. The
/// NFSv3-only meanings map to their NFSv4 equivalent: NODEV and REMOTE have none
/// (NFS4ERR_IO), NOT_SYNC cannot happen in v4 (SERVERFAULT), JUKEBOX is DELAY.
pub fn from_fs(s: Status) -> Nfsstat4 {
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
        Status::NoXattr => NFS4ERR_NOXATTR,
        Status::Xattr2Big => NFS4ERR_XATTR2BIG,
        Status::Jukebox => NFS4ERR_DELAY,
    }
}

/// A state error as nfsstat4 (RFC 8881 §15.1): one explicit table, total over
/// `StateError` (a new variant does not compile until it is placed here).
pub fn from_state(e: StateError) -> Nfsstat4 {
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
        StateError::BadLayout => NFS4ERR_BADLAYOUT,
        StateError::NoMatchingLayout => NFS4ERR_NOMATCHING_LAYOUT,
        StateError::RecallConflict => NFS4ERR_RECALLCONFLICT,
    }
}

/// `?` on a state result inside an operation that answers nfsstat4.
impl From<StateError> for Nfsstat4 {
    fn from(e: StateError) -> Nfsstat4 {
        from_state(e)
    }
}

/// A state check's outcome as nfsstat4: NFS4_OK when it passed.
pub fn of_state(r: Result<(), StateError>) -> Nfsstat4 {
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
            (StateError::BadLayout, 10050),
            (StateError::NoMatchingLayout, 10060),
            (StateError::RecallConflict, 10061),
        ];
        assert_eq!(
            want.map(|(e, _)| e),
            StateError::ALL,
            "one row per variant, in order"
        );
        for (e, n) in want {
            assert_eq!(from_state(e).as_u32(), n, "{e:?}");
            assert_eq!(Nfsstat4::from(e).as_u32(), n, "{e:?} through From");
            assert_eq!(of_state(Err(e)).as_u32(), n, "{e:?} through of_state");
        }
        assert_eq!(of_state(Ok(())), NFS4_OK);
    }

    /// The file model's table, variant by variant, each number and name as RFC 8881
    /// §15.1 lists them (written out, not derived from the constants).
    #[test]
    fn every_fs_status_has_its_nfsstat4() {
        let table = [
            (Status::Ok, 0, "NFS4_OK"),
            (Status::Perm, 1, "NFS4ERR_PERM"),
            (Status::NoEnt, 2, "NFS4ERR_NOENT"),
            (Status::Io, 5, "NFS4ERR_IO"),
            (Status::NxIo, 6, "NFS4ERR_NXIO"),
            (Status::Acces, 13, "NFS4ERR_ACCESS"),
            (Status::Exist, 17, "NFS4ERR_EXIST"),
            (Status::XDev, 18, "NFS4ERR_XDEV"),
            (Status::NoDev, 5, "NFS4ERR_IO"),
            (Status::NotDir, 20, "NFS4ERR_NOTDIR"),
            (Status::IsDir, 21, "NFS4ERR_ISDIR"),
            (Status::Inval, 22, "NFS4ERR_INVAL"),
            (Status::FBig, 27, "NFS4ERR_FBIG"),
            (Status::NoSpc, 28, "NFS4ERR_NOSPC"),
            (Status::Rofs, 30, "NFS4ERR_ROFS"),
            (Status::MLink, 31, "NFS4ERR_MLINK"),
            (Status::NameTooLong, 63, "NFS4ERR_NAMETOOLONG"),
            (Status::NotEmpty, 66, "NFS4ERR_NOTEMPTY"),
            (Status::DQuot, 69, "NFS4ERR_DQUOT"),
            (Status::Stale, 70, "NFS4ERR_STALE"),
            (Status::Remote, 5, "NFS4ERR_IO"),
            (Status::BadHandle, 10001, "NFS4ERR_BADHANDLE"),
            (Status::NotSync, 10006, "NFS4ERR_SERVERFAULT"),
            (Status::BadCookie, 10003, "NFS4ERR_BAD_COOKIE"),
            (Status::NotSupp, 10004, "NFS4ERR_NOTSUPP"),
            (Status::TooSmall, 10005, "NFS4ERR_TOOSMALL"),
            (Status::ServerFault, 10006, "NFS4ERR_SERVERFAULT"),
            (Status::BadType, 10007, "NFS4ERR_BADTYPE"),
            (Status::Jukebox, 10008, "NFS4ERR_DELAY"),
            (Status::NoXattr, 10095, "NFS4ERR_NOXATTR"),
            (Status::Xattr2Big, 10096, "NFS4ERR_XATTR2BIG"),
        ];
        for (s, n, name) in table {
            assert_eq!(from_fs(s).as_u32(), n, "{s:?}");
            assert_eq!(from_fs(s).name(), name, "{s:?}");
        }
        // A new `Status` variant stops this match compiling: give it a row above.
        let _listed = |s: Status| match s {
            Status::Ok | Status::Perm | Status::NoEnt | Status::Io | Status::NxIo => (),
            Status::Acces | Status::Exist | Status::XDev | Status::NoDev | Status::NotDir => (),
            Status::IsDir | Status::Inval | Status::FBig | Status::NoSpc | Status::Rofs => (),
            Status::MLink | Status::NameTooLong | Status::NotEmpty | Status::DQuot => (),
            Status::Stale | Status::Remote | Status::BadHandle | Status::NotSync => (),
            Status::BadCookie | Status::NotSupp | Status::TooSmall | Status::ServerFault => (),
            Status::BadType | Status::Jukebox | Status::NoXattr | Status::Xattr2Big => (),
        };
        assert_eq!(table.len(), 31);
    }

    /// The checked constructor takes exactly the numbers of RFC 8881 §15.1.
    #[test]
    fn only_defined_numbers_are_nfsstat4() {
        let all = Nfsstat4::ALL;
        assert!(all.windows(2).all(|p| p[0].0 .0 < p[1].0 .0), "ascending");
        assert_eq!(
            all.len(),
            19 + 85 + 7 + 2,
            "19 up to 70; 10001..=10087 less 10002, 10073; RFC 7862's 10088..=10094; \
             RFC 8276's 10095, 10096"
        );
        for &(s, name) in all {
            assert_eq!(Nfsstat4::new(s.as_u32()), Some(s), "{name}");
            assert_eq!(format!("{s:?}"), format!("{name}({})", s.as_u32()));
        }
        for n in [3, 4, 19, 71, 10000, 10002, 10073, 10097, u32::MAX] {
            assert_eq!(Nfsstat4::new(n), None, "{n}");
            let b = n.to_be_bytes();
            assert_eq!(
                Nfsstat4::decode(&mut XdrReader::new(&b)),
                Err(XdrError::BadValue)
            );
        }
        let mut buf = [0u8; 8];
        let mut w = XdrWriter::new(&mut buf);
        NFS4ERR_DELAY.put(&mut w).unwrap();
        let at = w.reserve_u32().unwrap();
        NFS4ERR_BADXDR.patch(&mut w, at);
        assert_eq!(buf, [0, 0, 0x27, 0x18, 0, 0, 0x27, 0x34]);
        let mut r = XdrReader::new(&buf);
        assert_eq!(Nfsstat4::decode(&mut r), Ok(NFS4ERR_DELAY));
        assert_eq!(Nfsstat4::decode(&mut r), Ok(NFS4ERR_BADXDR));
    }

    /// No two meanings share a number: a client can tell every one apart.
    #[test]
    fn state_errors_map_to_distinct_errors() {
        let mut seen = std::collections::HashSet::new();
        for e in StateError::ALL {
            let n = from_state(e);
            assert_ne!(n, NFS4_OK, "{e:?}");
            assert!(seen.insert(n), "{e:?} shares {n:?}");
        }
    }
}
