//! The file model's status as nfsstat3 (RFC 1813 §2.6): one explicit table, so a
//! status never reaches the wire by the enum's numbering. Every NFSv3 reply status the
//! front end writes goes through `nfsstat3`, so it is also where a failed answer is
//! noted for `nfsgw_nfs_errors_total` (`stats::status`).

use crate::fs::Status;

/// nfsstat3 of a file-model status (RFC 1813 §2.6), noting an error for the stats.
#[inline]
pub fn nfsstat3(s: Status) -> u32 {
    let code = code_of(s);
    if code != 0 {
        crate::stats::status::note_v3(code);
    }
    code
}

fn code_of(s: Status) -> u32 {
    match s {
        Status::Ok => 0,
        Status::Perm => 1,
        Status::NoEnt => 2,
        Status::Io => 5,
        Status::NxIo => 6,
        Status::Acces => 13,
        Status::Exist => 17,
        Status::XDev => 18,
        Status::NoDev => 19,
        Status::NotDir => 20,
        Status::IsDir => 21,
        Status::Inval => 22,
        Status::FBig => 27,
        Status::NoSpc => 28,
        Status::Rofs => 30,
        Status::MLink => 31,
        Status::NameTooLong => 63,
        Status::NotEmpty => 66,
        Status::DQuot => 69,
        Status::Stale => 70,
        Status::Remote => 71,
        Status::BadHandle => 10001,
        Status::NotSync => 10002,
        Status::BadCookie => 10003,
        Status::NotSupp => 10004,
        Status::TooSmall => 10005,
        Status::ServerFault => 10006,
        Status::BadType => 10007,
        Status::Jukebox => 10008,
        // NFSv3 has no extended attributes: never answered, but the table is total.
        Status::NoXattr => 2,
        Status::Xattr2Big => 22,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each code as RFC 1813 §2.6 lists it, written out rather than derived.
    #[test]
    fn every_status_has_its_rfc_1813_code() {
        let table = [
            (Status::Ok, 0, "NFS3_OK"),
            (Status::Perm, 1, "NFS3ERR_PERM"),
            (Status::NoEnt, 2, "NFS3ERR_NOENT"),
            (Status::Io, 5, "NFS3ERR_IO"),
            (Status::NxIo, 6, "NFS3ERR_NXIO"),
            (Status::Acces, 13, "NFS3ERR_ACCES"),
            (Status::Exist, 17, "NFS3ERR_EXIST"),
            (Status::XDev, 18, "NFS3ERR_XDEV"),
            (Status::NoDev, 19, "NFS3ERR_NODEV"),
            (Status::NotDir, 20, "NFS3ERR_NOTDIR"),
            (Status::IsDir, 21, "NFS3ERR_ISDIR"),
            (Status::Inval, 22, "NFS3ERR_INVAL"),
            (Status::FBig, 27, "NFS3ERR_FBIG"),
            (Status::NoSpc, 28, "NFS3ERR_NOSPC"),
            (Status::Rofs, 30, "NFS3ERR_ROFS"),
            (Status::MLink, 31, "NFS3ERR_MLINK"),
            (Status::NameTooLong, 63, "NFS3ERR_NAMETOOLONG"),
            (Status::NotEmpty, 66, "NFS3ERR_NOTEMPTY"),
            (Status::DQuot, 69, "NFS3ERR_DQUOT"),
            (Status::Stale, 70, "NFS3ERR_STALE"),
            (Status::Remote, 71, "NFS3ERR_REMOTE"),
            (Status::BadHandle, 10001, "NFS3ERR_BADHANDLE"),
            (Status::NotSync, 10002, "NFS3ERR_NOT_SYNC"),
            (Status::BadCookie, 10003, "NFS3ERR_BAD_COOKIE"),
            (Status::NotSupp, 10004, "NFS3ERR_NOTSUPP"),
            (Status::TooSmall, 10005, "NFS3ERR_TOOSMALL"),
            (Status::ServerFault, 10006, "NFS3ERR_SERVERFAULT"),
            (Status::BadType, 10007, "NFS3ERR_BADTYPE"),
            (Status::Jukebox, 10008, "NFS3ERR_JUKEBOX"),
            (Status::NoXattr, 2, "NFS3ERR_NOENT"),
            (Status::Xattr2Big, 22, "NFS3ERR_INVAL"),
        ];
        for (s, code, name) in table {
            assert_eq!(nfsstat3(s), code, "{name}");
        }
    }
}
