//! Decoding COMPOUND4res (RFC 8881 §16.2.2): the status, and the results of the ops
//! bench sends, walked in order. Every length is bounded; a malformed reply is an
//! error, never a panic.

use super::{op, status, SessionId, Stateid, FATTR4_SIZE, FATTR4_TYPE, FHSIZE};
use engine::xdr::{XdrReader, XdrResult};
use nfs_wire::v3call::{DirEntry, DirPage};

/// Results bench accepts in one COMPOUND reply (it never sends more than 8 ops).
const MAX_RESULTS: u32 = 64;
/// Largest READ data accepted (bench reads at most 1 MiB).
const MAX_READ: usize = 2 << 20;

/// What a COMPOUND reply said, as far as bench cares.
#[derive(Debug, Default)]
pub struct Decoded<'a> {
    /// The COMPOUND status: that of the first op that failed, or OK.
    pub status: u32,
    /// The op that failed (0 when none did).
    pub failed_op: u32,
    /// SEQUENCE was processed (its slot's sequence id advanced: RFC 8881 §2.10.6.1).
    pub seq_done: bool,
    pub fh: Option<&'a [u8]>,
    pub size: Option<u64>,
    /// OPEN's stateid.
    pub open: Option<Stateid>,
    /// A delegation OPEN granted.
    pub deleg: Option<Stateid>,
    /// READ data.
    pub data: Option<&'a [u8]>,
    /// A synchronous COPY's write_response4 (RFC 7862 §15.2.2): bytes copied and
    /// stable_how4; `None` when the server made the copy asynchronous (a callback id).
    pub copied: Option<(u64, u32)>,
    /// COPY answered with a callback id: the copy runs on after the reply.
    pub copy_async: bool,
    /// READDIR: one page of the listing.
    pub dir: Option<DirPage>,
    /// EXCHANGE_ID: clientid and the sequence id for CREATE_SESSION.
    pub clientid: Option<(u64, u32)>,
    /// CREATE_SESSION: the session, the fore-channel slots granted and the largest
    /// request and reply.
    pub session: Option<(SessionId, u32, u32, u32)>,
    /// A pNFS operation's results (LAYOUTGET, GETDEVICEINFO, LAYOUTCOMMIT,
    /// LAYOUTRETURN: always last), for `nfs_wire::v4pnfs` to read.
    pub rest: Option<&'a [u8]>,
}

impl Decoded<'_> {
    pub fn ok(&self) -> bool {
        self.status == status::OK
    }
}

fn stateid(r: &mut XdrReader) -> XdrResult<Stateid> {
    let seqid = r.u32()?;
    let mut other = [0u8; 12];
    other.copy_from_slice(r.opaque_fixed(12)?);
    Ok(Stateid { seqid, other })
}

fn bitmap(r: &mut XdrReader) -> XdrResult<[u32; 2]> {
    let n = r.u32()?;
    if n > 8 {
        return Err(engine::xdr::XdrError::BadValue);
    }
    let mut words = [0u32; 2];
    for i in 0..n as usize {
        let v = r.u32()?;
        if let Some(w) = words.get_mut(i) {
            *w = v;
        }
    }
    Ok(words)
}

/// fattr4 holding at most TYPE and SIZE (what bench asks for); the size if present.
fn fattr_size(r: &mut XdrReader) -> XdrResult<Option<u64>> {
    let words = bitmap(r)?;
    let vals = r.opaque_var(1 << 16)?;
    // Any attribute other than the two asked for (and below them) makes the layout
    // unknown to bench: no size then.
    let known = (1 << FATTR4_TYPE) | (1 << FATTR4_SIZE);
    if words[0] & !known != 0 || words[1] != 0 || words[0] & (1 << FATTR4_SIZE) == 0 {
        return Ok(None);
    }
    let mut v = XdrReader::new(vals);
    if words[0] & (1 << FATTR4_TYPE) != 0 {
        v.u32()?;
    }
    Ok(Some(v.u64()?))
}

/// open_delegation4 (RFC 8881 §18.16.2): the delegation's stateid, if one was given.
pub fn delegation(r: &mut XdrReader) -> XdrResult<Option<Stateid>> {
    let nfsace = |r: &mut XdrReader| -> XdrResult<()> {
        r.skip(12)?; // type, flag, access mask
        r.opaque_var(1024)?; // who
        Ok(())
    };
    match r.u32()? {
        0 => Ok(None), // OPEN_DELEGATE_NONE
        1 => {
            let s = stateid(r)?;
            r.bool()?; // recall
            nfsace(r)?;
            Ok(Some(s))
        }
        2 => {
            let s = stateid(r)?;
            r.bool()?;
            match r.u32()? {
                1 => r.skip(8)?, // NFS_LIMIT_SIZE
                2 => r.skip(8)?, // NFS_LIMIT_BLOCKS
                _ => return Err(engine::xdr::XdrError::BadValue),
            }
            nfsace(r)?;
            Ok(Some(s))
        }
        3 => {
            // OPEN_DELEGATE_NONE_EXT: why, and a bool for CONTENTION (7) / RESOURCE (8)
            if matches!(r.u32()?, 7 | 8) {
                r.bool()?;
            }
            Ok(None)
        }
        _ => Err(engine::xdr::XdrError::BadValue),
    }
}

/// Longest entry name accepted in a listing (NFS4 names are bounded by the server's
/// FATTR4_MAXNAME; no server this talks to allows more than 255 bytes).
const MAX_NAME: usize = 1024;

/// READDIR4resok (RFC 8881 §18.23.2): cookieverf, then dirlist4 (entry4 list, eof).
fn readdir(r: &mut XdrReader) -> XdrResult<DirPage> {
    let mut page = DirPage::default();
    page.verf.copy_from_slice(r.opaque_fixed(8)?);
    while r.bool()? {
        let cookie = r.u64()?;
        let name = r.string(MAX_NAME)?.to_vec();
        let size = fattr_size(r)?;
        page.entries.push(DirEntry { name, cookie, size });
    }
    page.eof = r.bool()?;
    Ok(page)
}

/// Decodes the results of one op into `d`; `false`: stop walking (an op whose rest
/// bench does not need and that is always last).
/// READ_PLUS's rpr_contents (RFC 7862 §15.10.2) as READ's data: no segment (at the
/// end) or one data segment (content 0: offset, data). bench reads files it wrote
/// whole, so a hole or a second segment is a reply it does not take.
fn read_plus_data<'a>(r: &mut XdrReader<'a>) -> XdrResult<&'a [u8]> {
    match r.u32()? {
        0 => Ok(&[]),
        1 if r.u32()? == 0 => {
            r.u64()?; // d_offset: the READ's offset
            r.opaque_var(MAX_READ)
        }
        _ => Err(engine::xdr::XdrError::BadValue),
    }
}

fn op_result<'a>(opnum: u32, r: &mut XdrReader<'a>, d: &mut Decoded<'a>) -> XdrResult<bool> {
    match opnum {
        op::SEQUENCE => {
            r.skip(16 + 4 * 5)?; // session, seqid, slot, highest, target, flags
            d.seq_done = true;
        }
        op::PUTFH
        | op::SAVEFH
        | op::PUTROOTFH
        | op::LOOKUP
        | op::DELEGRETURN
        | op::RECLAIM_COMPLETE
        | op::DESTROY_SESSION
        | op::DESTROY_CLIENTID => {}
        op::GETFH => d.fh = Some(r.opaque_var(FHSIZE)?),
        op::GETATTR => d.size = fattr_size(r)?,
        op::REMOVE => r.skip(20)?, // change_info4
        op::COMMIT => r.skip(8)?,
        op::CREATE => {
            r.skip(20)?; // change_info4
            bitmap(r)?; // attrset
        }
        op::READDIR => {
            d.dir = Some(readdir(r)?);
            return Ok(false);
        }
        op::WRITE => r.skip(16)?, // count, committed, verifier
        op::CLOSE => {
            stateid(r)?;
        }
        op::READ => {
            r.bool()?; // eof
            d.data = Some(r.opaque_var(MAX_READ)?);
        }
        op::READ_PLUS => {
            r.bool()?; // rpr_eof
            d.data = Some(read_plus_data(r)?);
        }
        op::COPY => {
            // write_response4: wr_callback_id<1>, wr_count, wr_committed, verifier;
            // then copy_requirements4 (consecutive, synchronous).
            match r.u32()? {
                0 => {}
                1 => {
                    stateid(r)?;
                    d.copy_async = true;
                }
                _ => return Err(engine::xdr::XdrError::BadValue),
            }
            let count = r.u64()?;
            let committed = r.u32()?;
            r.skip(8 + 8)?;
            if !d.copy_async {
                d.copied = Some((count, committed));
            }
        }
        op::OPEN => {
            d.open = Some(stateid(r)?);
            r.skip(20)?; // change_info4
            r.u32()?; // rflags
            bitmap(r)?; // attrset
            d.deleg = delegation(r)?;
        }
        op::EXCHANGE_ID => {
            d.clientid = Some((r.u64()?, r.u32()?));
            return Ok(false);
        }
        op::CREATE_SESSION => {
            let mut sid = [0u8; 16];
            sid.copy_from_slice(r.opaque_fixed(16)?);
            r.skip(8)?; // sequence, flags
            r.u32()?; // headerpadsize
            let max_req = r.u32()?;
            let max_resp = r.u32()?;
            r.u32()?; // cached
            r.u32()?; // max ops
            let slots = r.u32()?;
            d.session = Some((sid, slots, max_req, max_resp));
            return Ok(false);
        }
        nfs_wire::nfs4::OP_LAYOUTGET
        | nfs_wire::nfs4::OP_GETDEVICEINFO
        | nfs_wire::nfs4::OP_LAYOUTCOMMIT
        | nfs_wire::nfs4::OP_LAYOUTRETURN => {
            d.rest = Some(r.rest());
            return Ok(false);
        }
        _ => return Ok(false), // anything else: not looked into
    }
    Ok(true)
}

/// Decodes a COMPOUND4res (the procedure results of an accepted RPC reply).
pub fn decode(body: &[u8]) -> Result<Decoded<'_>, String> {
    walk(body).map_err(|e| format!("malformed COMPOUND reply: {e:?}"))
}

fn walk(body: &[u8]) -> XdrResult<Decoded<'_>> {
    let mut r = XdrReader::new(body);
    let mut d = Decoded {
        status: r.u32()?,
        ..Decoded::default()
    };
    r.opaque_var(1024)?; // tag
    let n = r.u32()?;
    if n > MAX_RESULTS {
        return Err(engine::xdr::XdrError::BadValue);
    }
    for _ in 0..n {
        let opnum = r.u32()?;
        let st = r.u32()?;
        if st != status::OK {
            d.status = st;
            d.failed_op = opnum;
            return Ok(d);
        }
        if !op_result(opnum, &mut r, &mut d)? {
            break;
        }
    }
    Ok(d)
}

/// A short name of an nfsstat4 for messages.
pub fn status_name(st: u32) -> String {
    let name = match st {
        0 => "NFS4_OK",
        1 => "NFS4ERR_PERM",
        2 => "NFS4ERR_NOENT",
        5 => "NFS4ERR_IO",
        13 => "NFS4ERR_ACCES",
        22 => "NFS4ERR_INVAL",
        70 => "NFS4ERR_STALE",
        10001 => "NFS4ERR_BADHANDLE",
        10004 => "NFS4ERR_NOTSUPP",
        10006 => "NFS4ERR_SERVERFAULT",
        10008 => "NFS4ERR_DELAY",
        10013 => "NFS4ERR_GRACE",
        10025 => "NFS4ERR_BAD_STATEID",
        10036 => "NFS4ERR_BADXDR",
        10044 => "NFS4ERR_OP_ILLEGAL",
        10052 => "NFS4ERR_BADSESSION",
        10053 => "NFS4ERR_BADSLOT",
        10054 => "NFS4ERR_COMPLETE_ALREADY",
        10063 => "NFS4ERR_SEQ_MISORDERED",
        10071 => "NFS4ERR_OP_NOT_IN_SESSION",
        10022 => "NFS4ERR_STALE_CLIENTID",
        _ => return format!("nfsstat4 {st}"),
    };
    name.to_string()
}
