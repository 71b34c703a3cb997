//! Walking an NFSv4.1 COMPOUND4res (RFC 8881 §16.2.2) as a client: the header, each
//! result's operation number and status, and the resok bodies tests look into
//! (SEQUENCE, EXCHANGE_ID, CREATE_SESSION, OPEN, stateids, LOCK4denied). Every
//! length is checked against its RFC bound before use; a short or malformed reply is
//! an [`XdrError`], never a panic.

use crate::nfs4args::*;
use engine::xdr::{XdrError, XdrReader, XdrResult};

/// Longest tag accepted back (the server echoes the call's; RFC 8881 §16.2.3).
pub const MAX_TAG: usize = 1024;
/// Longest opaque owner or ACE `who` accepted back (NFS4_OPAQUE_LIMIT, RFC 8881 §2.2).
pub const MAX_OPAQUE: usize = 1024;
/// Longest file handle (NFS4_FHSIZE, RFC 8881 §4.2.1).
pub const NFS4_FHSIZE: usize = 128;
/// Most bitmap4 words accepted back (no attribute numbered past 32 × 8 exists).
const MAX_BITMAP_WORDS: usize = 8;

/// A COMPOUND4res: its status and the results after the count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Res {
    pub status: u32,
    /// Results returned (resarray's count).
    pub count: u32,
    /// The results, from the first one on.
    pub body: Vec<u8>,
    raw: Vec<u8>,
}

impl Res {
    /// Decodes the COMPOUND4res that follows an accepted RPC reply header.
    pub fn parse(rep: &[u8]) -> XdrResult<Res> {
        let mut r = XdrReader::new(rep);
        let status = r.u32()?;
        r.opaque_var(MAX_TAG)?;
        let count = r.u32()?;
        Ok(Res {
            status,
            count,
            body: r.rest().to_vec(),
            raw: rep.to_vec(),
        })
    }

    /// A reader at the first result.
    pub fn reader(&self) -> XdrReader<'_> {
        XdrReader::new(&self.body)
    }

    /// The whole COMPOUND4res as received: the bytes a replay must repeat.
    pub fn whole(&self) -> &[u8] {
        &self.raw
    }
}

/// One result's header: checks it answers `op` and returns its status.
pub fn expect_op(r: &mut XdrReader, op: u32) -> XdrResult<u32> {
    if r.u32()? != op {
        return Err(XdrError::BadValue);
    }
    r.u32()
}

/// SEQUENCE4resok (RFC 8881 §18.46.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SequenceOk {
    pub sessionid: [u8; 16],
    pub sequenceid: u32,
    pub slotid: u32,
    pub highest_slotid: u32,
    pub target_highest_slotid: u32,
    pub status_flags: u32,
}

pub fn sequence_ok(r: &mut XdrReader) -> XdrResult<SequenceOk> {
    Ok(SequenceOk {
        sessionid: fixed16(r)?,
        sequenceid: r.u32()?,
        slotid: r.u32()?,
        highest_slotid: r.u32()?,
        target_highest_slotid: r.u32()?,
        status_flags: r.u32()?,
    })
}

/// The head of EXCHANGE_ID4resok (RFC 8881 §18.35.2): clientid, sequence id for
/// CREATE_SESSION, flags. The rest (state protection, owner, scope) stays unread.
pub fn exchange_id_ok(r: &mut XdrReader) -> XdrResult<(u64, u32, u32)> {
    Ok((r.u64()?, r.u32()?, r.u32()?))
}

/// The fore channel a CREATE_SESSION granted (channel_attrs4, RFC 8881 §18.36.2)
/// after ca_headerpadsize.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fore {
    pub max_request: u32,
    pub max_response: u32,
    pub max_cached: u32,
    pub max_ops: u32,
    pub slots: u32,
}

/// CREATE_SESSION4resok up to the fore channel: (session id, sequence id, flags, fore).
pub fn create_session_ok(r: &mut XdrReader) -> XdrResult<([u8; 16], u32, u32, Fore)> {
    let sid = fixed16(r)?;
    let seq = r.u32()?;
    let flags = r.u32()?;
    r.u32()?; // ca_headerpadsize
    let fore = Fore {
        max_request: r.u32()?,
        max_response: r.u32()?,
        max_cached: r.u32()?,
        max_ops: r.u32()?,
        slots: r.u32()?,
    };
    Ok((sid, seq, flags, fore))
}

/// A stateid4 (RFC 8881 §3.3.12): what OPEN_DOWNGRADE, CLOSE, LOCKU and LOCK return.
pub fn stateid(r: &mut XdrReader) -> XdrResult<[u8; 16]> {
    fixed16(r)
}

fn fixed16(r: &mut XdrReader) -> XdrResult<[u8; 16]> {
    let mut s = [0u8; 16];
    s.copy_from_slice(r.opaque_fixed(16)?);
    Ok(s)
}

/// A file handle (GETFH4resok, RFC 8881 §18.8.2).
pub fn fh(r: &mut XdrReader) -> XdrResult<Vec<u8>> {
    Ok(r.opaque_var(NFS4_FHSIZE)?.to_vec())
}

/// What an OPEN granted: its stateid and a delegation's, if any (`write`: a write
/// delegation), the OPEN4_RESULT_* flags, and the open_delegation_type4 (RFC 8881
/// §18.16.2; RFC 9754 §6 adds the `*_ATTRS_DELEG` types 4 and 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opened {
    pub stateid: [u8; 16],
    pub deleg: Option<[u8; 16]>,
    pub write: bool,
    pub rflags: u32,
    pub kind: u32,
}

/// OPEN4resok (RFC 8881 §18.16.2), with open_read_delegation4 or
/// open_write_delegation4 (its nfs_space_limit4 read past), also as the bodies of
/// RFC 9754's OPEN_DELEGATE_READ_ATTRS_DELEG / _WRITE_ATTRS_DELEG.
pub fn open_ok(r: &mut XdrReader) -> XdrResult<Opened> {
    use crate::delstid::{OPEN_DELEGATE_READ_ATTRS_DELEG, OPEN_DELEGATE_WRITE_ATTRS_DELEG};
    let stateid = fixed16(r)?;
    r.skip(4 + 16)?; // change_info4
    let rflags = r.u32()?;
    let n = r.u32()? as usize;
    if n > MAX_BITMAP_WORDS {
        return Err(XdrError::TooLong);
    }
    r.skip(4 * n)?; // attrset
    let kind = r.u32()?;
    let (deleg, write) = match kind {
        OPEN_DELEGATE_NONE => (None, false),
        OPEN_DELEGATE_NONE_EXT => {
            // open_none_delegation4: only these two reasons carry a bool.
            if matches!(r.u32()?, WND4_CONTENTION | WND4_RESOURCE) {
                r.u32()?;
            }
            (None, false)
        }
        OPEN_DELEGATE_READ
        | OPEN_DELEGATE_WRITE
        | OPEN_DELEGATE_READ_ATTRS_DELEG
        | OPEN_DELEGATE_WRITE_ATTRS_DELEG => {
            let write = matches!(kind, OPEN_DELEGATE_WRITE | OPEN_DELEGATE_WRITE_ATTRS_DELEG);
            let s = fixed16(r)?;
            r.u32()?; // recall
            if write {
                // nfs_space_limit4: NFS_LIMIT_SIZE a u64, NFS_LIMIT_BLOCKS two u32s.
                match r.u32()? {
                    NFS_LIMIT_SIZE | NFS_LIMIT_BLOCKS => r.skip(8)?,
                    _ => return Err(XdrError::BadValue),
                }
            }
            r.skip(12)?; // nfsace4 type, flag, mask
            r.opaque_var(MAX_OPAQUE)?; // who
            (Some(s), write)
        }
        _ => return Err(XdrError::BadValue),
    };
    Ok(Opened {
        stateid,
        deleg,
        write,
        rflags,
        kind,
    })
}

/// LOCK4denied (RFC 8881 §18.10.2): offset, length, type, owner's clientid and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    pub offset: u64,
    pub length: u64,
    pub kind: u32,
    pub clientid: u64,
    pub owner: Vec<u8>,
}

pub fn denied(r: &mut XdrReader) -> XdrResult<Denied> {
    Ok(Denied {
        offset: r.u64()?,
        length: r.u64()?,
        kind: r.u32()?,
        clientid: r.u64()?,
        owner: r.opaque_var(MAX_OPAQUE)?.to_vec(),
    })
}
