//! Argument decoding of the stateful operations (RFC 8881 §18.2, §18.10-§18.12,
//! §18.16, §18.18, §18.38, §18.48). A decode failure is NFS4ERR_BADXDR; semantic
//! errors found while decoding createattrs are carried to the operation so the whole
//! argument is consumed first.

use super::fattr::{self, NewAttrs};
use crate::nfs4::status::Nfsstat4;
use crate::state::stateid::Stateid;
use engine::xdr::{XdrError, XdrReader, XdrResult};

/// NFS4_OPAQUE_LIMIT: largest open-owner / lock-owner.
pub const OWNER_MAX: usize = 1024;
/// Largest component4 decoded (longer names are NFS4ERR_NAMETOOLONG after decode).
pub const NAME_DECODE_MAX: usize = 4096;
/// Most stateids one TEST_STATEID may carry.
pub const TEST_STATEID_MAX: usize = 1024;

/// createhow4 (§18.16.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateHow {
    Unchecked(Result<NewAttrs, Nfsstat4>),
    Guarded(Result<NewAttrs, Nfsstat4>),
    Exclusive([u8; 8]),
    Exclusive41([u8; 8], Result<NewAttrs, Nfsstat4>),
}

/// open_claim4 (§18.16.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim<'a> {
    Null(&'a [u8]),
    Previous(u32),
    DelegateCur(Stateid, &'a [u8]),
    DelegatePrev(&'a [u8]),
    Fh,
    DelegPrevFh,
    DelegCurFh(Stateid),
}

/// OPEN4args.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenArgs<'a> {
    /// The whole share_access word (access bits, want and signal flags).
    pub share_access: u32,
    pub share_deny: u32,
    pub owner: &'a [u8],
    /// `None`: OPEN4_NOCREATE.
    pub create: Option<CreateHow>,
    pub claim: Claim<'a>,
}

/// A discriminant outside its union: the argument cannot be decoded (BADXDR).
fn bad<T>() -> XdrResult<T> {
    Err(XdrError::BadValue)
}

fn verifier(r: &mut XdrReader) -> XdrResult<[u8; 8]> {
    let mut v = [0; 8];
    v.copy_from_slice(r.opaque_fixed(8)?);
    Ok(v)
}

pub fn open<'a>(r: &mut XdrReader<'a>) -> XdrResult<OpenArgs<'a>> {
    let _seqid = r.u32()?; // ignored in NFSv4.1 (§18.16.3)
    let share_access = r.u32()?;
    let share_deny = r.u32()?;
    let _clientid = r.u64()?; // the session's client is used (§18.16.3)
    let owner = r.opaque_var(OWNER_MAX)?;
    let create = match r.u32()? {
        0 => None,
        1 => Some(match r.u32()? {
            0 => CreateHow::Unchecked(fattr::decode(r)?),
            1 => CreateHow::Guarded(fattr::decode(r)?),
            2 => CreateHow::Exclusive(verifier(r)?),
            3 => {
                let v = verifier(r)?;
                CreateHow::Exclusive41(v, fattr::decode(r)?)
            }
            _ => return bad(),
        }),
        _ => return bad(),
    };
    let claim = match r.u32()? {
        0 => Claim::Null(r.opaque_var(NAME_DECODE_MAX)?),
        1 => Claim::Previous(r.u32()?),
        2 => {
            let s = Stateid::decode(r)?;
            Claim::DelegateCur(s, r.opaque_var(NAME_DECODE_MAX)?)
        }
        3 => Claim::DelegatePrev(r.opaque_var(NAME_DECODE_MAX)?),
        4 => Claim::Fh,
        // RFC 8881 §18.16.1: CLAIM_DELEG_CUR_FH (5) carries the delegation stateid,
        // CLAIM_DELEG_PREV_FH (6) nothing.
        5 => Claim::DelegCurFh(Stateid::decode(r)?),
        6 => Claim::DelegPrevFh,
        _ => return bad(),
    };
    Ok(OpenArgs {
        share_access,
        share_deny,
        owner,
        create,
        claim,
    })
}

/// OPEN_DOWNGRADE4args: (stateid, share_access, share_deny).
pub fn open_downgrade(r: &mut XdrReader) -> XdrResult<(Stateid, u32, u32)> {
    let s = Stateid::decode(r)?;
    let _seqid = r.u32()?;
    Ok((s, r.u32()?, r.u32()?))
}

/// CLOSE4args: the open stateid.
pub fn close(r: &mut XdrReader) -> XdrResult<Stateid> {
    let _seqid = r.u32()?;
    Stateid::decode(r)
}

/// nfs_lock_type4 → write?  READ_LT 1, WRITE_LT 2, READW_LT 3, WRITEW_LT 4; the
/// blocking ones are served as non-blocking (§18.10.3 allows it).
pub fn lock_type(t: u32) -> XdrResult<bool> {
    match t {
        1 | 3 => Ok(false),
        2 | 4 => Ok(true),
        _ => bad(),
    }
}

/// The locker4 of a LOCK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockerArg<'a> {
    New { open: Stateid, owner: &'a [u8] },
    Existing(Stateid),
}

/// LOCK4args.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockArgs<'a> {
    pub write: bool,
    pub reclaim: bool,
    pub offset: u64,
    pub length: u64,
    pub locker: LockerArg<'a>,
}

pub fn lock<'a>(r: &mut XdrReader<'a>) -> XdrResult<LockArgs<'a>> {
    let write = lock_type(r.u32()?)?;
    let reclaim = r.bool()?;
    let offset = r.u64()?;
    let length = r.u64()?;
    let locker = if r.bool()? {
        let _open_seqid = r.u32()?;
        let open = Stateid::decode(r)?;
        let _lock_seqid = r.u32()?;
        let _clientid = r.u64()?;
        LockerArg::New {
            open,
            owner: r.opaque_var(OWNER_MAX)?,
        }
    } else {
        let s = Stateid::decode(r)?;
        let _lock_seqid = r.u32()?;
        LockerArg::Existing(s)
    };
    Ok(LockArgs {
        write,
        reclaim,
        offset,
        length,
        locker,
    })
}

/// LOCKT4args: (write, offset, length, owner).
pub fn lockt<'a>(r: &mut XdrReader<'a>) -> XdrResult<(bool, u64, u64, &'a [u8])> {
    let write = lock_type(r.u32()?)?;
    let offset = r.u64()?;
    let length = r.u64()?;
    let _clientid = r.u64()?;
    Ok((write, offset, length, r.opaque_var(OWNER_MAX)?))
}

/// LOCKU4args: (stateid, offset, length); the lock type is not used.
pub fn locku(r: &mut XdrReader) -> XdrResult<(Stateid, u64, u64)> {
    let _type = lock_type(r.u32()?)?;
    let _seqid = r.u32()?;
    let s = Stateid::decode(r)?;
    Ok((s, r.u64()?, r.u64()?))
}

/// TEST_STATEID4args (at most `TEST_STATEID_MAX`).
pub fn test_stateid(r: &mut XdrReader) -> XdrResult<Vec<Stateid>> {
    let n = r.u32()? as usize;
    if n > TEST_STATEID_MAX || n.saturating_mul(16) > r.remaining() {
        return bad();
    }
    (0..n).map(|_| Stateid::decode(r)).collect()
}
