//! NFSv4.1 operations written straight into a caller's buffer (RFC 8881 §16.2.1 for
//! COMPOUND4args, each operation's arguments in §18): the encoder under both
//! [`crate::v4call::Ops`] (tests and fuzzers, which collect operations in a vector)
//! and `bench`'s load loop, which encodes each call into its send buffer and must not
//! allocate per call. Every function writes the operation number and its arguments
//! exactly as given, so a caller can also send what a server must refuse.

use crate::nfs4::*;
use crate::nfs4args::*;
use crate::{NFS_PROGRAM, NFS_V4};
use engine::rpc::{Cred, AUTH_NONE};
use engine::xdr::{XdrError, XdrResult, XdrWriter};

/// channel_attrs4 (RFC 8881 §18.36.1) without RDMA IRD values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Channel {
    pub headerpad: u32,
    pub max_request: u32,
    pub max_response: u32,
    pub max_response_cached: u32,
    pub max_ops: u32,
    pub max_requests: u32,
}

impl Channel {
    fn write(&self, w: &mut XdrWriter) -> XdrResult<()> {
        for v in [
            self.headerpad,
            self.max_request,
            self.max_response,
            self.max_response_cached,
            self.max_ops,
            self.max_requests,
            0, // ca_rdma_ird<1>: none
        ] {
            w.u32(v)?;
        }
        Ok(())
    }
}

/// How an OPEN creates (openflag4 / createhow4, RFC 8881 §18.16.1), or `NoCreate`.
/// `Unchecked`, `Guarded` and `Exclusive41` carry no attributes (an empty fattr4);
/// `WithAttrs` is UNCHECKED4 or GUARDED4 (`mode`) with a fattr4.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How<'a> {
    NoCreate,
    Unchecked,
    Guarded,
    Exclusive41([u8; 8]),
    WithAttrs { mode: u32, attrs: Fattr<'a> },
}

/// A fattr4 (RFC 8881 §3.3.8): the attribute bitmap and the values it selects,
/// already XDR-encoded in attribute-number order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fattr<'a> {
    pub bitmap: &'a [u32],
    pub values: &'a [u8],
}

impl Fattr<'_> {
    /// No attributes: an empty bitmap and attrlist.
    pub const EMPTY: Fattr<'static> = Fattr {
        bitmap: &[],
        values: &[],
    };

    fn write(&self, w: &mut XdrWriter) -> XdrResult<()> {
        bitmap(w, self.bitmap)?;
        w.opaque_var(self.values)
    }

    /// Bytes beyond a fixed-size operation this fattr4 may take.
    pub fn variable_len(&self) -> usize {
        4 * self.bitmap.len() + self.values.len()
    }
}

/// A bitmap4 (RFC 8881 §3.3.7) of attribute numbers below 96, built without
/// allocating: `Bitmap::of(&[FATTR4_SIZE]).words()` is what GETATTR takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bitmap {
    words: [u32; 3],
    n: usize,
}

impl Bitmap {
    /// The bitmap of `attrs`, as short as its highest set word allows (at least one
    /// word); numbers of 96 and above are dropped.
    pub fn of(attrs: &[u32]) -> Bitmap {
        let mut b = Bitmap {
            words: [0; 3],
            n: 1,
        };
        for &a in attrs {
            let i = (a / 32) as usize;
            if let Some(word) = b.words.get_mut(i) {
                *word |= 1 << (a % 32);
                b.n = b.n.max(i + 1);
            }
        }
        b
    }

    pub fn words(&self) -> &[u32] {
        &self.words[..self.n]
    }
}

/// Which file an OPEN names (open_claim4, RFC 8881 §18.16.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim<'a> {
    Null(&'a [u8]),
    /// CLAIM_PREVIOUS with the delegation type held before the restart.
    Previous(u32),
    DelegateCur(&'a [u8; 16], &'a [u8]),
    DelegatePrev(&'a [u8]),
    Fh,
    DelegCurFh(&'a [u8; 16]),
    DelegPrevFh,
}

impl How<'_> {
    fn write(&self, w: &mut XdrWriter) -> XdrResult<()> {
        let (mode, verf, attrs) = match self {
            How::NoCreate => return w.u32(OPEN4_NOCREATE),
            How::Unchecked => (UNCHECKED4, None, Fattr::EMPTY),
            How::Guarded => (GUARDED4, None, Fattr::EMPTY),
            How::Exclusive41(v) => (EXCLUSIVE4_1, Some(v), Fattr::EMPTY),
            How::WithAttrs { mode, attrs } => (*mode, None, *attrs),
        };
        w.u32(OPEN4_CREATE)?;
        w.u32(mode)?;
        if let Some(v) = verf {
            w.opaque_fixed(v)?;
        }
        attrs.write(w)
    }

    /// Bytes beyond a fixed-size operation this createhow4 may take.
    pub fn variable_len(&self) -> usize {
        match self {
            How::WithAttrs { attrs, .. } => attrs.variable_len(),
            _ => 0,
        }
    }
}

impl Claim<'_> {
    fn write(&self, w: &mut XdrWriter) -> XdrResult<()> {
        match *self {
            Claim::Null(name) => {
                w.u32(CLAIM_NULL)?;
                w.opaque_var(name)
            }
            Claim::Previous(deleg) => {
                w.u32(CLAIM_PREVIOUS)?;
                w.u32(deleg)
            }
            Claim::DelegateCur(sid, name) => {
                w.u32(CLAIM_DELEGATE_CUR)?;
                w.opaque_fixed(sid)?;
                w.opaque_var(name)
            }
            Claim::DelegatePrev(name) => {
                w.u32(CLAIM_DELEGATE_PREV)?;
                w.opaque_var(name)
            }
            Claim::Fh => w.u32(CLAIM_FH),
            Claim::DelegCurFh(sid) => {
                w.u32(CLAIM_DELEG_CUR_FH)?;
                w.opaque_fixed(sid)
            }
            Claim::DelegPrevFh => w.u32(CLAIM_DELEG_PREV_FH),
        }
    }

    /// Bytes beyond a fixed-size operation this open_claim4 may take.
    pub fn variable_len(&self) -> usize {
        match self {
            Claim::Null(n) | Claim::DelegateCur(_, n) | Claim::DelegatePrev(n) => n.len(),
            _ => 0,
        }
    }
}

/// A lock's owner (locker4, RFC 8881 §18.10.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Locker<'a> {
    /// open_to_lock_owner4: a new lock owner for the open `open_stateid`.
    New {
        open_stateid: &'a [u8; 16],
        clientid: u64,
        owner: &'a [u8],
    },
    /// exist_lock_owner4: an owner that holds `lock_stateid`.
    Existing { lock_stateid: &'a [u8; 16] },
}

/// bitmap4 (RFC 8881 §3.3.7): count and words.
pub fn bitmap(w: &mut XdrWriter, words: &[u32]) -> XdrResult<()> {
    w.u32(u32::try_from(words.len()).map_err(|_| XdrError::Overflow)?)?;
    for v in words {
        w.u32(*v)?;
    }
    Ok(())
}

/// The RPC call header of a COMPOUND (program NFS, version 4, RFC 8881 §16.2) and
/// COMPOUND4args' tag, minor version and operation count; the operations follow.
pub fn compound_header(
    w: &mut XdrWriter,
    xid: u32,
    cred: &Cred,
    tag: &[u8],
    minor: u32,
    nops: u32,
) -> XdrResult<()> {
    crate::rpccall::header(w, xid, NFS_PROGRAM, NFS_V4, NFSPROC4_COMPOUND, cred)?;
    w.opaque_var(tag)?;
    w.u32(minor)?;
    w.u32(nops)
}

/// An operation that is only its number (PUTROOTFH, GETFH, SAVEFH, RESTOREFH, ...).
pub fn bare(w: &mut XdrWriter, op: u32) -> XdrResult<()> {
    w.u32(op)
}

/// EXCHANGE_ID (§18.35) with `flags` (EXCHGID4_FLAG_*), SP4_NONE, no implementation id.
pub fn exchange_id(
    w: &mut XdrWriter,
    verifier: &[u8; 8],
    owner: &[u8],
    flags: u32,
) -> XdrResult<()> {
    exchange_id_as(w, verifier, owner, flags, None)
}

/// EXCHANGE_ID naming the client's implementation (eia_client_impl_id, §18.35.1:
/// nfs_impl_id4's nii_domain and nii_name, nii_date zero) when `impl_id` is given.
pub fn exchange_id_as(
    w: &mut XdrWriter,
    verifier: &[u8; 8],
    owner: &[u8],
    flags: u32,
    impl_id: Option<(&str, &str)>,
) -> XdrResult<()> {
    w.u32(OP_EXCHANGE_ID)?;
    w.opaque_fixed(verifier)?;
    w.opaque_var(owner)?;
    w.u32(flags)?;
    w.u32(SP4_NONE)?;
    match impl_id {
        None => w.u32(0), // eia_client_impl_id<1>: none
        Some((domain, name)) => {
            w.u32(1)?;
            w.string(domain.as_bytes())?;
            w.string(name.as_bytes())?;
            w.i64(0)?; // nii_date: nfstime4 seconds, nseconds
            w.u32(0)
        }
    }
}

/// CREATE_SESSION (§18.36): the channels asked for, callback program
/// [`NFS4_CALLBACK`] and `cb_auth_none` AUTH_NONE entries in csa_sec_parms.
pub fn create_session(
    w: &mut XdrWriter,
    clientid: u64,
    seq: u32,
    flags: u32,
    channels: [&Channel; 2],
    cb_auth_none: u32,
) -> XdrResult<()> {
    w.u32(OP_CREATE_SESSION)?;
    w.u64(clientid)?;
    w.u32(seq)?;
    w.u32(flags)?;
    channels[0].write(w)?;
    channels[1].write(w)?;
    w.u32(NFS4_CALLBACK)?;
    w.u32(cb_auth_none)?;
    for _ in 0..cb_auth_none {
        w.u32(AUTH_NONE)?;
    }
    Ok(())
}

/// SEQUENCE (§18.46): session, sequence id, slot, sa_highest_slotid, sa_cachethis.
pub fn sequence(
    w: &mut XdrWriter,
    sid: &[u8; 16],
    seq: u32,
    slot: u32,
    highest: u32,
    cachethis: bool,
) -> XdrResult<()> {
    w.u32(OP_SEQUENCE)?;
    w.opaque_fixed(sid)?;
    w.u32(seq)?;
    w.u32(slot)?;
    w.u32(highest)?;
    w.bool(cachethis)
}

/// RECLAIM_COMPLETE (§18.51) with rca_one_fs.
pub fn reclaim_complete(w: &mut XdrWriter, one_fs: bool) -> XdrResult<()> {
    w.u32(OP_RECLAIM_COMPLETE)?;
    w.bool(one_fs)
}

/// BIND_CONN_TO_SESSION (§18.34) in direction `dir` (CDFC4_*), no RDMA mode.
pub fn bind_conn(w: &mut XdrWriter, sid: &[u8; 16], dir: u32) -> XdrResult<()> {
    w.u32(OP_BIND_CONN_TO_SESSION)?;
    w.opaque_fixed(sid)?;
    w.u32(dir)?;
    w.bool(false)
}

/// BACKCHANNEL_CTL (§18.33): program [`NFS4_CALLBACK`], one AUTH_NONE entry.
pub fn backchannel_ctl(w: &mut XdrWriter) -> XdrResult<()> {
    w.u32(OP_BACKCHANNEL_CTL)?;
    w.u32(NFS4_CALLBACK)?;
    w.u32(1)?;
    w.u32(AUTH_NONE)
}

/// DESTROY_SESSION (§18.37).
pub fn destroy_session(w: &mut XdrWriter, sid: &[u8; 16]) -> XdrResult<()> {
    w.u32(OP_DESTROY_SESSION)?;
    w.opaque_fixed(sid)
}

/// DESTROY_CLIENTID (§18.50).
pub fn destroy_clientid(w: &mut XdrWriter, clientid: u64) -> XdrResult<()> {
    w.u32(OP_DESTROY_CLIENTID)?;
    w.u64(clientid)
}

/// PUTFH (§18.19).
pub fn putfh(w: &mut XdrWriter, fh: &[u8]) -> XdrResult<()> {
    w.u32(OP_PUTFH)?;
    w.opaque_var(fh)
}

/// An operation whose argument is one component4 (LOOKUP §18.15, REMOVE §18.25).
pub fn named(w: &mut XdrWriter, op: u32, name: &[u8]) -> XdrResult<()> {
    w.u32(op)?;
    w.opaque_var(name)
}

/// GETATTR (§18.7) of the attributes in `words` (bitmap4 words; see [`Bitmap`]).
pub fn getattr(w: &mut XdrWriter, words: &[u32]) -> XdrResult<()> {
    w.u32(OP_GETATTR)?;
    bitmap(w, words)
}

/// SETATTR (§18.30): `stateid`, then `attrs`.
pub fn setattr(w: &mut XdrWriter, stateid: &[u8; 16], attrs: &Fattr) -> XdrResult<()> {
    w.u32(OP_SETATTR)?;
    w.opaque_fixed(stateid)?;
    attrs.write(w)
}

/// CREATE (§18.4) of a directory (NF4DIR) or, with `target`, a symlink (NF4LNK),
/// with `attrs` (createattrs).
pub fn create(
    w: &mut XdrWriter,
    name: &[u8],
    target: Option<&[u8]>,
    attrs: &Fattr,
) -> XdrResult<()> {
    w.u32(OP_CREATE)?;
    match target {
        Some(t) => {
            w.u32(NF4LNK)?;
            w.opaque_var(t)?;
        }
        None => w.u32(NF4DIR)?,
    }
    w.opaque_var(name)?;
    attrs.write(w)
}

/// RENAME (§18.26) of `from` in the saved directory to `to` in the current one.
pub fn rename(w: &mut XdrWriter, from: &[u8], to: &[u8]) -> XdrResult<()> {
    w.u32(OP_RENAME)?;
    w.opaque_var(from)?;
    w.opaque_var(to)
}

/// READDIR (§18.23) from `cookie` with `verifier`, `counts` = (dircount, maxcount),
/// the attributes in `words`.
pub fn readdir(
    w: &mut XdrWriter,
    cookie: u64,
    verifier: &[u8; 8],
    counts: (u32, u32),
    words: &[u32],
) -> XdrResult<()> {
    w.u32(OP_READDIR)?;
    w.u64(cookie)?;
    w.opaque_fixed(verifier)?;
    w.u32(counts.0)?;
    w.u32(counts.1)?;
    bitmap(w, words)
}

/// OPEN (§18.16.1): seqid 0 (ignored in 4.1), `share` = (access with want flags,
/// deny), the open owner, `how`, `claim`.
pub fn open(
    w: &mut XdrWriter,
    clientid: u64,
    owner: &[u8],
    share: (u32, u32),
    how: &How,
    claim: &Claim,
) -> XdrResult<()> {
    w.u32(OP_OPEN)?;
    w.u32(0)?;
    w.u32(share.0)?;
    w.u32(share.1)?;
    w.u64(clientid)?;
    w.opaque_var(owner)?;
    how.write(w)?;
    claim.write(w)
}

/// OPEN_DOWNGRADE (§18.18), seqid 0.
pub fn open_downgrade(
    w: &mut XdrWriter,
    stateid: &[u8; 16],
    access: u32,
    deny: u32,
) -> XdrResult<()> {
    w.u32(OP_OPEN_DOWNGRADE)?;
    w.opaque_fixed(stateid)?;
    w.u32(0)?;
    w.u32(access)?;
    w.u32(deny)
}

/// CLOSE (§18.2), seqid 0 (ignored in 4.1).
pub fn close(w: &mut XdrWriter, stateid: &[u8; 16]) -> XdrResult<()> {
    w.u32(OP_CLOSE)?;
    w.u32(0)?;
    w.opaque_fixed(stateid)
}

/// An operation whose argument is one stateid (DELEGRETURN §18.6, FREE_STATEID §18.38).
pub fn with_stateid(w: &mut XdrWriter, op: u32, stateid: &[u8; 16]) -> XdrResult<()> {
    w.u32(op)?;
    w.opaque_fixed(stateid)
}

/// LOCK (§18.10) of `kind` (nfs_lock_type4) over `range` = (offset, length) by `locker`.
pub fn lock(
    w: &mut XdrWriter,
    kind: u32,
    reclaim: bool,
    range: (u64, u64),
    locker: &Locker,
) -> XdrResult<()> {
    w.u32(OP_LOCK)?;
    w.u32(kind)?;
    w.bool(reclaim)?;
    w.u64(range.0)?;
    w.u64(range.1)?;
    match *locker {
        Locker::New {
            open_stateid,
            clientid,
            owner,
        } => {
            w.bool(true)?;
            w.u32(0)?; // open_seqid
            w.opaque_fixed(open_stateid)?;
            w.u32(0)?; // lock_seqid
            w.u64(clientid)?;
            w.opaque_var(owner)
        }
        Locker::Existing { lock_stateid } => {
            w.bool(false)?;
            w.opaque_fixed(lock_stateid)?;
            w.u32(0) // lock_seqid
        }
    }
}

/// LOCKT (§18.11).
pub fn lockt(
    w: &mut XdrWriter,
    kind: u32,
    range: (u64, u64),
    clientid: u64,
    owner: &[u8],
) -> XdrResult<()> {
    w.u32(OP_LOCKT)?;
    w.u32(kind)?;
    w.u64(range.0)?;
    w.u64(range.1)?;
    w.u64(clientid)?;
    w.opaque_var(owner)
}

/// LOCKU (§18.12), seqid 0.
pub fn locku(
    w: &mut XdrWriter,
    kind: u32,
    lock_sid: &[u8; 16],
    range: (u64, u64),
) -> XdrResult<()> {
    w.u32(OP_LOCKU)?;
    w.u32(kind)?;
    w.u32(0)?;
    w.opaque_fixed(lock_sid)?;
    w.u64(range.0)?;
    w.u64(range.1)
}

/// RELEASE_LOCKOWNER (NFSv4.0 only; RFC 8881 §18.52 makes it NOTSUPP in 4.1).
pub fn release_lockowner(w: &mut XdrWriter, clientid: u64, owner: &[u8]) -> XdrResult<()> {
    w.u32(OP_RELEASE_LOCKOWNER)?;
    w.u64(clientid)?;
    w.opaque_var(owner)
}

/// TEST_STATEID (§18.48).
pub fn test_stateid(w: &mut XdrWriter, sids: &[[u8; 16]]) -> XdrResult<()> {
    w.u32(OP_TEST_STATEID)?;
    w.u32(u32::try_from(sids.len()).map_err(|_| XdrError::Overflow)?)?;
    for s in sids {
        w.opaque_fixed(s)?;
    }
    Ok(())
}

/// READ (§18.22).
pub fn read(w: &mut XdrWriter, stateid: &[u8; 16], offset: u64, count: u32) -> XdrResult<()> {
    w.u32(OP_READ)?;
    w.opaque_fixed(stateid)?;
    w.u64(offset)?;
    w.u32(count)
}

/// WRITE (§18.32) with `stable` (stable_how4).
pub fn write(
    w: &mut XdrWriter,
    stateid: &[u8; 16],
    offset: u64,
    stable: u32,
    data: &[u8],
) -> XdrResult<()> {
    w.u32(OP_WRITE)?;
    w.opaque_fixed(stateid)?;
    w.u64(offset)?;
    w.u32(stable)?;
    w.opaque_var(data)
}

/// COMMIT (§18.3).
pub fn commit(w: &mut XdrWriter, offset: u64, count: u32) -> XdrResult<()> {
    w.u32(OP_COMMIT)?;
    w.u64(offset)?;
    w.u32(count)
}

// ---- NFSv4.2 (RFC 7862 §15, RFC 8276 §8.4): in COMPOUNDs of minor version 2 --------

/// ALLOCATE (RFC 7862 §15.1) or DEALLOCATE (§15.4): `op` is either.
pub fn space(
    w: &mut XdrWriter,
    op: u32,
    stateid: &[u8; 16],
    offset: u64,
    len: u64,
) -> XdrResult<()> {
    w.u32(op)?;
    w.opaque_fixed(stateid)?;
    w.u64(offset)?;
    w.u64(len)
}

/// SEEK (§15.11): `what` is data_content4 (0 data, 1 hole).
pub fn seek(w: &mut XdrWriter, stateid: &[u8; 16], offset: u64, what: u32) -> XdrResult<()> {
    w.u32(OP_SEEK)?;
    w.opaque_fixed(stateid)?;
    w.u64(offset)?;
    w.u32(what)
}

/// READ_PLUS (§15.10).
pub fn read_plus(w: &mut XdrWriter, stateid: &[u8; 16], offset: u64, count: u32) -> XdrResult<()> {
    w.u32(OP_READ_PLUS)?;
    w.opaque_fixed(stateid)?;
    w.u64(offset)?;
    w.u32(count)
}

/// A COPY (§15.2) or CLONE (§15.13) range: the source (SAVED_FH) and target
/// (CURRENT_FH) stateids, offsets and count.
#[derive(Debug, Clone, Copy)]
pub struct CopyRange {
    pub src_stateid: [u8; 16],
    pub dst_stateid: [u8; 16],
    pub src_offset: u64,
    pub dst_offset: u64,
    pub count: u64,
}

/// COPY (§15.2), consecutive, with `synchronous`; `sources` names source servers
/// (NL4_NAME netloc4s: an inter-server copy), none for a copy inside the server.
pub fn copy(
    w: &mut XdrWriter,
    r: &CopyRange,
    synchronous: bool,
    sources: &[&[u8]],
) -> XdrResult<()> {
    w.u32(OP_COPY)?;
    copy_range(w, r)?;
    w.bool(true)?;
    w.bool(synchronous)?;
    w.u32(sources.len() as u32)?;
    for name in sources {
        w.u32(1)?; // NL4_NAME
        w.opaque_var(name)?;
    }
    Ok(())
}

/// COPY_NOTIFY (§15.3): the source's stateid and one destination (NL4_NAME).
pub fn copy_notify(w: &mut XdrWriter, stateid: &[u8; 16], name: &[u8]) -> XdrResult<()> {
    w.u32(OP_COPY_NOTIFY)?;
    w.opaque_fixed(stateid)?;
    w.u32(1)?; // NL4_NAME
    w.opaque_var(name)
}

/// CLONE (§15.13).
pub fn clone(w: &mut XdrWriter, r: &CopyRange) -> XdrResult<()> {
    w.u32(OP_CLONE)?;
    copy_range(w, r)
}

fn copy_range(w: &mut XdrWriter, r: &CopyRange) -> XdrResult<()> {
    w.opaque_fixed(&r.src_stateid)?;
    w.opaque_fixed(&r.dst_stateid)?;
    w.u64(r.src_offset)?;
    w.u64(r.dst_offset)?;
    w.u64(r.count)
}

/// GETXATTR (RFC 8276 §8.4.2) or REMOVEXATTR (§8.4.5): `op` with the name.
pub fn xattr_named(w: &mut XdrWriter, op: u32, name: &[u8]) -> XdrResult<()> {
    w.u32(op)?;
    w.opaque_var(name)
}

/// SETXATTR (§8.4.3): `option` is setxattr_option4 (0 either, 1 create, 2 replace).
pub fn setxattr(w: &mut XdrWriter, option: u32, name: &[u8], value: &[u8]) -> XdrResult<()> {
    w.u32(OP_SETXATTR)?;
    w.u32(option)?;
    w.opaque_var(name)?;
    w.opaque_var(value)
}

/// LISTXATTRS (§8.4.4).
pub fn listxattrs(w: &mut XdrWriter, cookie: u64, maxcount: u32) -> XdrResult<()> {
    w.u32(OP_LISTXATTRS)?;
    w.u64(cookie)?;
    w.u32(maxcount)
}
