//! Skipping one operation's arguments in COMPOUND4args (RFC 8881 §16.2.1, §18)
//! without running or fully decoding it. Shared by the passes that look at a COMPOUND
//! before it runs: the COMPOUND's plan
//! (`plan`: how large its reply is, its operations, where its DDP-eligible items are,
//! RFC 8267 §6.1, for `crate::ulb::v4`).
//!
//! An operation this does not know (session setup, v4.0-only ones, NFSv4.2's
//! COPY, unknown numbers) is an error: callers treat what follows it as unknown.

use super::ops::*;
use engine::xdr::{XdrError, XdrReader, XdrResult};

pub const STATEID: usize = 16;
/// Longest bitmap4 accepted (words).
const BITMAP_MAX: usize = 8;
const NF4BLK: u32 = 3;
const NF4CHR: u32 = 4;
const NF4LNK: u32 = 5;

/// Skips the arguments of operation `op` at `r`. `eligible` is called with the reader
/// at the length word of each DDP-eligible opaque (WRITE data, CREATE NF4LNK
/// linkdata) before it is skipped.
#[inline]
pub fn op_args<F>(op: u32, r: &mut XdrReader, eligible: &mut F) -> XdrResult<()>
where
    F: FnMut(&XdrReader) -> XdrResult<()> + ?Sized,
{
    match op {
        OP_ACCESS | OP_SECINFO_NO_NAME | OP_RECLAIM_COMPLETE | OP_OPENATTR => r.skip(4),
        OP_CLOSE => r.skip(4 + STATEID),
        OP_COMMIT => r.skip(8 + 4),
        OP_CREATE => {
            match r.u32()? {
                NF4LNK => {
                    eligible(r)?;
                    opaque(r)?
                }
                NF4BLK | NF4CHR => r.skip(8)?,
                // NF4SOCK, NF4FIFO, NF4DIR: void; others are the server's to refuse.
                _ => {}
            }
            opaque(r)?;
            fattr(r)
        }
        OP_DELEGPURGE | OP_RENEW | OP_DESTROY_CLIENTID => r.skip(8),
        OP_DELEGRETURN | OP_FREE_STATEID => r.skip(STATEID),
        OP_GETATTR => bitmap(r),
        OP_GETFH | OP_LOOKUPP | OP_PUTPUBFH | OP_PUTROOTFH | OP_READLINK | OP_RESTOREFH
        | OP_SAVEFH => Ok(()),
        OP_LINK | OP_LOOKUP | OP_REMOVE | OP_SECINFO | OP_PUTFH => opaque(r),
        OP_RENAME => {
            opaque(r)?;
            opaque(r)
        }
        OP_LOCK => {
            r.skip(4 + 4 + 8 + 8)?;
            if r.bool()? {
                r.skip(4 + STATEID + 4 + 8)?;
                opaque(r)
            } else {
                r.skip(STATEID + 4)
            }
        }
        OP_LOCKT => {
            r.skip(4 + 8 + 8 + 8)?;
            opaque(r)
        }
        OP_LOCKU => r.skip(4 + 4 + STATEID + 8 + 8),
        OP_NVERIFY | OP_VERIFY => fattr(r),
        OP_OPEN => open(r),
        OP_OPEN_CONFIRM => r.skip(STATEID + 4),
        OP_OPEN_DOWNGRADE => r.skip(STATEID + 4 * 3),
        OP_READ => r.skip(STATEID + 8 + 4),
        OP_READDIR => {
            r.skip(8 + 8 + 4 + 4)?;
            bitmap(r)
        }
        OP_SETATTR => {
            r.skip(STATEID)?;
            fattr(r)
        }
        OP_WRITE => {
            r.skip(STATEID + 8 + 4)?;
            eligible(r)?;
            opaque(r)
        }
        OP_RELEASE_LOCKOWNER => {
            r.skip(8)?;
            opaque(r)
        }
        OP_SEQUENCE => r.skip(16 + 4 * 4),
        OP_DESTROY_SESSION => r.skip(16),
        OP_TEST_STATEID => {
            let n = r.u32()? as usize;
            r.skip(n.checked_mul(STATEID).ok_or(XdrError::Short)?)
        }
        // NFSv4.2 (RFC 7862 §15, RFC 8276 §8.4; none has a DDP-eligible item, RFC 8267
        // §6.1). COPY's source servers are not walked: what follows it is unknown.
        OP_ALLOCATE | OP_DEALLOCATE => r.skip(STATEID + 8 + 8),
        OP_SEEK | OP_READ_PLUS => r.skip(STATEID + 8 + 4),
        OP_CLONE => r.skip(2 * STATEID + 8 * 3),
        OP_OFFLOAD_CANCEL | OP_OFFLOAD_STATUS => r.skip(STATEID),
        OP_IO_ADVISE => {
            r.skip(STATEID + 8 + 8)?;
            bitmap(r)
        }
        OP_GETXATTR | OP_REMOVEXATTR => opaque(r),
        OP_SETXATTR => {
            r.skip(4)?;
            opaque(r)?;
            opaque(r)
        }
        OP_LISTXATTRS => r.skip(8 + 4),
        // pNFS (RFC 8881 §18.40–§18.44; no DDP-eligible item, RFC 8267 §6.1).
        OP_LAYOUTGET => r.skip(4 * 3 + 8 * 3 + STATEID + 4),
        OP_GETDEVICEINFO => {
            r.skip(16 + 4 + 4)?;
            bitmap(r)
        }
        OP_GETDEVICELIST => r.skip(4 + 4 + 8 + 8),
        OP_LAYOUTCOMMIT => layoutcommit(r),
        OP_LAYOUTRETURN => {
            r.skip(4 * 3)?;
            if r.u32()? == 1 {
                // LAYOUTRETURN4_FILE: range, stateid, lrf_body.
                r.skip(8 + 8 + STATEID)?;
                opaque(r)?;
            }
            Ok(())
        }
        _ => Err(XdrError::Short),
    }
}

/// LAYOUTCOMMIT4args (RFC 8881 §18.42.1): range, reclaim, stateid, newoffset4,
/// newtime4, layoutupdate4.
fn layoutcommit(r: &mut XdrReader) -> XdrResult<()> {
    r.skip(8 + 8 + 4 + STATEID)?;
    if r.bool()? {
        r.skip(8)?;
    }
    if r.bool()? {
        r.skip(12)?;
    }
    r.skip(4)?;
    opaque(r)
}

/// Skips an opaque<> or a string.
pub fn opaque(r: &mut XdrReader) -> XdrResult<()> {
    r.opaque_var(usize::MAX).map(|_| ())
}

fn bitmap(r: &mut XdrReader) -> XdrResult<()> {
    let n = r.u32()? as usize;
    if n > BITMAP_MAX {
        return Err(XdrError::TooLong);
    }
    r.skip(n * 4)
}

fn fattr(r: &mut XdrReader) -> XdrResult<()> {
    bitmap(r)?;
    opaque(r)
}

/// OPEN4args (RFC 8881 §18.16.1).
fn open(r: &mut XdrReader) -> XdrResult<()> {
    r.skip(4 * 3 + 8)?;
    opaque(r)?;
    if r.u32()? == 1 {
        // OPEN4_CREATE: createhow4.
        match r.u32()? {
            0 | 1 => fattr(r)?,
            2 => r.skip(8)?,
            3 => {
                r.skip(8)?;
                fattr(r)?
            }
            _ => return Err(XdrError::Short),
        }
    }
    // open_claim4: CLAIM_NULL 0, PREVIOUS 1, DELEGATE_CUR 2, DELEGATE_PREV 3, FH 4,
    // DELEG_CUR_FH 5 (a stateid), DELEG_PREV_FH 6.
    match r.u32()? {
        0 | 3 => opaque(r),
        1 => r.skip(4),
        2 => {
            r.skip(STATEID)?;
            opaque(r)
        }
        4 | 6 => Ok(()),
        5 => r.skip(STATEID),
        _ => Err(XdrError::Short),
    }
}
