//! The workspace's NFSv4.1 COMPOUND encoder (RFC 8881 §16.2, each operation's
//! arguments in §18): [`Ops`] collects encoded operations and writes COMPOUND4args;
//! [`compound_call`] puts them behind an RPC call header ([`crate::rpccall`]).
//! Every argument is written as given — a stateid, a sequence id, a count — so tests
//! and fuzzers can also send what a server must refuse.

use crate::nfs4::*;
use crate::nfs4args::*;
use crate::rpccall;
use crate::{NFS_PROGRAM, NFS_V4};
use engine::rpc::Cred;
use engine::xdr::{XdrResult, XdrWriter};

/// The minor version this encoder speaks (RFC 8881 §16.2.3).
pub const MINOR_VERSION: u32 = 1;

/// Room for an operation's fixed-size parts; variable parts are added to it.
const OP_ROOM: usize = 512;

/// One COMPOUND's operations, encoded as they are added.
#[derive(Debug, Clone, Default)]
pub struct Ops {
    buf: Vec<u8>,
    /// Operations so far (the COMPOUND's `argarray` count).
    pub n: u32,
}

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
        write_bitmap(w, self.bitmap)?;
        w.opaque_var(self.values)
    }

    fn len(&self) -> usize {
        4 * self.bitmap.len() + self.values.len()
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

    fn len(&self) -> usize {
        match self {
            How::WithAttrs { attrs, .. } => attrs.len(),
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

    fn len(&self) -> usize {
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

impl Ops {
    pub fn new() -> Ops {
        Ops::default()
    }

    /// The operations encoded so far, without the COMPOUND header.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Any operation written by `f` (a test's own, or a deliberately broken one):
    /// counted as one. `f` may run more than once (on a larger buffer).
    pub fn raw(mut self, f: impl Fn(&mut XdrWriter) -> XdrResult<()>) -> Ops {
        let b = rpccall::encode(OP_ROOM, f).expect("an operation's XDR encodes");
        self.buf.extend_from_slice(&b);
        self.n += 1;
        self
    }

    /// An operation with `extra` variable bytes beyond [`OP_ROOM`].
    fn op(self, extra: usize, f: impl Fn(&mut XdrWriter) -> XdrResult<()>) -> Ops {
        let mut o = self;
        let b = rpccall::encode(OP_ROOM + extra, f).expect("an operation's XDR encodes");
        o.buf.extend_from_slice(&b);
        o.n += 1;
        o
    }

    /// An operation that is only its number.
    fn bare(self, op: u32) -> Ops {
        self.op(0, |w| w.u32(op))
    }

    /// `n` operations already encoded back to back in `bytes` (a test's own).
    pub fn encoded(mut self, n: u32, bytes: &[u8]) -> Ops {
        self.buf.extend_from_slice(bytes);
        self.n += n;
        self
    }

    /// `self`'s operations followed by `more`'s.
    pub fn append(mut self, more: Ops) -> Ops {
        self.buf.extend_from_slice(&more.buf);
        self.n += more.n;
        self
    }

    /// COMPOUND4args (RFC 8881 §16.2.1): empty tag, minor version 1, the operations.
    pub fn args(&self) -> Vec<u8> {
        self.args_with(b"", MINOR_VERSION)
    }

    /// COMPOUND4args with any tag and minor version.
    pub fn args_with(&self, tag: &[u8], minor: u32) -> Vec<u8> {
        let mut a = rpccall::encode(16 + tag.len(), |w| {
            w.opaque_var(tag)?;
            w.u32(minor)?;
            w.u32(self.n)
        })
        .expect("a COMPOUND header encodes");
        a.extend_from_slice(&self.buf);
        a
    }
}

/// Session operations (RFC 8881 §18.35–§18.37, §18.46, §18.50–§18.51).
impl Ops {
    /// EXCHANGE_ID (§18.35): `verifier`, `owner`, no flags, SP4_NONE, no
    /// implementation id.
    pub fn exchange_id(self, verifier: [u8; 8], owner: &[u8]) -> Ops {
        self.exchange_id_flags(verifier, owner, 0)
    }

    /// EXCHANGE_ID with `flags` (EXCHGID4_FLAG_*).
    pub fn exchange_id_flags(self, verifier: [u8; 8], owner: &[u8], flags: u32) -> Ops {
        self.op(owner.len(), |w| {
            w.u32(OP_EXCHANGE_ID)?;
            w.opaque_fixed(&verifier)?;
            w.opaque_var(owner)?;
            w.u32(flags)?;
            w.u32(SP4_NONE)?;
            w.u32(0) // eia_client_impl_id<1>: none
        })
    }

    /// CREATE_SESSION (§18.36): the channels asked for, callback program
    /// [`NFS4_CALLBACK`] and `cb_auth_none` AUTH_NONE entries in csa_sec_parms.
    pub fn create_session(
        self,
        clientid: u64,
        seq: u32,
        flags: u32,
        fore: &Channel,
        back: &Channel,
        cb_auth_none: u32,
    ) -> Ops {
        self.op(4 * cb_auth_none as usize, |w| {
            w.u32(OP_CREATE_SESSION)?;
            w.u64(clientid)?;
            w.u32(seq)?;
            w.u32(flags)?;
            fore.write(w)?;
            back.write(w)?;
            w.u32(NFS4_CALLBACK)?;
            w.u32(cb_auth_none)?;
            for _ in 0..cb_auth_none {
                w.u32(engine::rpc::AUTH_NONE)?;
            }
            Ok(())
        })
    }

    /// SEQUENCE (§18.46) on slot 0 with sa_highest_slotid 0, not cached.
    pub fn sequence(self, sid: [u8; 16], seq: u32) -> Ops {
        self.sequence_at(sid, seq, 0, false)
    }

    /// SEQUENCE on any slot, with sa_highest_slotid = slot and sa_cachethis.
    pub fn sequence_at(self, sid: [u8; 16], seq: u32, slot: u32, cachethis: bool) -> Ops {
        self.op(0, |w| {
            w.u32(OP_SEQUENCE)?;
            w.opaque_fixed(&sid)?;
            w.u32(seq)?;
            w.u32(slot)?;
            w.u32(slot)?;
            w.bool(cachethis)
        })
    }

    /// RECLAIM_COMPLETE (§18.51) for all file systems (rca_one_fs false), as Linux
    /// sends it after CREATE_SESSION.
    pub fn reclaim_complete(self) -> Ops {
        self.reclaim_complete_fs(false)
    }

    /// RECLAIM_COMPLETE with rca_one_fs.
    pub fn reclaim_complete_fs(self, one_fs: bool) -> Ops {
        self.op(0, |w| {
            w.u32(OP_RECLAIM_COMPLETE)?;
            w.bool(one_fs)
        })
    }

    /// BIND_CONN_TO_SESSION (§18.34) in direction `dir` (CDFC4_*), no RDMA mode.
    pub fn bind_conn(self, sid: [u8; 16], dir: u32) -> Ops {
        self.op(0, |w| {
            w.u32(OP_BIND_CONN_TO_SESSION)?;
            w.opaque_fixed(&sid)?;
            w.u32(dir)?;
            w.bool(false)
        })
    }

    /// BACKCHANNEL_CTL (§18.33): program [`NFS4_CALLBACK`], one AUTH_NONE entry.
    pub fn backchannel_ctl(self) -> Ops {
        self.op(0, |w| {
            w.u32(OP_BACKCHANNEL_CTL)?;
            w.u32(NFS4_CALLBACK)?;
            w.u32(1)?;
            w.u32(engine::rpc::AUTH_NONE)
        })
    }

    /// DESTROY_SESSION (§18.37).
    pub fn destroy_session(self, sid: [u8; 16]) -> Ops {
        self.op(0, |w| {
            w.u32(OP_DESTROY_SESSION)?;
            w.opaque_fixed(&sid)
        })
    }

    /// DESTROY_CLIENTID (§18.50).
    pub fn destroy_clientid(self, clientid: u64) -> Ops {
        self.op(0, |w| {
            w.u32(OP_DESTROY_CLIENTID)?;
            w.u64(clientid)
        })
    }
}

/// File handle and namespace operations (RFC 8881 §18.3–§18.26).
impl Ops {
    pub fn putrootfh(self) -> Ops {
        self.bare(OP_PUTROOTFH)
    }

    pub fn putfh(self, fh: &[u8]) -> Ops {
        self.op(fh.len(), |w| {
            w.u32(OP_PUTFH)?;
            w.opaque_var(fh)
        })
    }

    pub fn getfh(self) -> Ops {
        self.bare(OP_GETFH)
    }

    pub fn savefh(self) -> Ops {
        self.bare(OP_SAVEFH)
    }

    pub fn restorefh(self) -> Ops {
        self.bare(OP_RESTOREFH)
    }

    pub fn lookup(self, name: &[u8]) -> Ops {
        self.op(name.len(), |w| {
            w.u32(OP_LOOKUP)?;
            w.opaque_var(name)
        })
    }

    /// GETATTR (§18.7) of the attributes in `bitmap` (bitmap4 words).
    pub fn getattr(self, bitmap: &[u32]) -> Ops {
        self.op(4 * bitmap.len(), |w| {
            w.u32(OP_GETATTR)?;
            write_bitmap(w, bitmap)
        })
    }

    /// SETATTR (§18.30): `stateid`, then fattr4 of `bitmap` and the encoded `values`.
    pub fn setattr(self, stateid: &[u8; 16], bitmap: &[u32], values: &[u8]) -> Ops {
        let attrs = Fattr { bitmap, values };
        self.op(attrs.len(), |w| {
            w.u32(OP_SETATTR)?;
            w.opaque_fixed(stateid)?;
            attrs.write(w)
        })
    }

    /// CREATE (§18.4) of a directory (NF4DIR) or, with `target`, a symlink (NF4LNK),
    /// no attributes.
    pub fn create_obj(self, name: &[u8], target: Option<&[u8]>) -> Ops {
        self.create_with(name, target, Fattr::EMPTY)
    }

    /// CREATE of a directory or symlink with `attrs` (createattrs).
    pub fn create_with(self, name: &[u8], target: Option<&[u8]>, attrs: Fattr) -> Ops {
        let extra = name.len() + target.map_or(0, <[u8]>::len) + attrs.len();
        self.op(extra, |w| {
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
        })
    }

    pub fn remove(self, name: &[u8]) -> Ops {
        self.op(name.len(), |w| {
            w.u32(OP_REMOVE)?;
            w.opaque_var(name)
        })
    }

    /// RENAME (§18.26) of `from` in the saved directory to `to` in the current one.
    pub fn rename(self, from: &[u8], to: &[u8]) -> Ops {
        self.op(from.len() + to.len(), |w| {
            w.u32(OP_RENAME)?;
            w.opaque_var(from)?;
            w.opaque_var(to)
        })
    }

    /// READDIR (§18.23) from `cookie` with `verifier`, `dircount`/`maxcount`, the
    /// attributes in `bitmap`.
    pub fn readdir(
        self,
        cookie: u64,
        verifier: [u8; 8],
        dircount: u32,
        maxcount: u32,
        bitmap: &[u32],
    ) -> Ops {
        self.op(4 * bitmap.len(), |w| {
            w.u32(OP_READDIR)?;
            w.u64(cookie)?;
            w.opaque_fixed(&verifier)?;
            w.u32(dircount)?;
            w.u32(maxcount)?;
            write_bitmap(w, bitmap)
        })
    }
}

/// bitmap4 (RFC 8881 §3.3.7): count and words.
fn write_bitmap(w: &mut XdrWriter, bitmap: &[u32]) -> XdrResult<()> {
    w.u32(u32::try_from(bitmap.len()).map_err(|_| engine::xdr::XdrError::Overflow)?)?;
    for v in bitmap {
        w.u32(*v)?;
    }
    Ok(())
}

/// Open and lock state (RFC 8881 §18.2, §18.10–§18.18, §18.48–§18.49).
impl Ops {
    /// OPEN (§18.16.1): seqid 0 (ignored in 4.1), `access` (want flags included),
    /// `deny`, the open owner, `how`, `claim`.
    pub fn open(
        self,
        clientid: u64,
        owner: &[u8],
        access: u32,
        deny: u32,
        how: How,
        claim: Claim,
    ) -> Ops {
        self.op(owner.len() + how.len() + claim.len(), |w| {
            w.u32(OP_OPEN)?;
            w.u32(0)?;
            w.u32(access)?;
            w.u32(deny)?;
            w.u64(clientid)?;
            w.opaque_var(owner)?;
            how.write(w)?;
            claim.write(w)
        })
    }

    pub fn open_downgrade(self, stateid: &[u8; 16], access: u32, deny: u32) -> Ops {
        self.op(0, |w| {
            w.u32(OP_OPEN_DOWNGRADE)?;
            w.opaque_fixed(stateid)?;
            w.u32(0)?;
            w.u32(access)?;
            w.u32(deny)
        })
    }

    pub fn close(self, stateid: &[u8; 16]) -> Ops {
        self.op(0, |w| {
            w.u32(OP_CLOSE)?;
            w.u32(0)?;
            w.opaque_fixed(stateid)
        })
    }

    pub fn delegreturn(self, stateid: &[u8; 16]) -> Ops {
        self.op(0, |w| {
            w.u32(OP_DELEGRETURN)?;
            w.opaque_fixed(stateid)
        })
    }

    /// LOCK (§18.10) of `kind` (nfs_lock_type4) over `offset`/`length` by `locker`.
    pub fn lock(self, kind: u32, reclaim: bool, offset: u64, length: u64, locker: Locker) -> Ops {
        let extra = match locker {
            Locker::New { owner, .. } => owner.len(),
            Locker::Existing { .. } => 0,
        };
        self.op(extra, |w| {
            w.u32(OP_LOCK)?;
            w.u32(kind)?;
            w.bool(reclaim)?;
            w.u64(offset)?;
            w.u64(length)?;
            match locker {
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
        })
    }

    pub fn lockt(self, kind: u32, offset: u64, length: u64, clientid: u64, owner: &[u8]) -> Ops {
        self.op(owner.len(), |w| {
            w.u32(OP_LOCKT)?;
            w.u32(kind)?;
            w.u64(offset)?;
            w.u64(length)?;
            w.u64(clientid)?;
            w.opaque_var(owner)
        })
    }

    pub fn locku(self, kind: u32, lock_sid: &[u8; 16], offset: u64, length: u64) -> Ops {
        self.op(0, |w| {
            w.u32(OP_LOCKU)?;
            w.u32(kind)?;
            w.u32(0)?;
            w.opaque_fixed(lock_sid)?;
            w.u64(offset)?;
            w.u64(length)
        })
    }

    /// RELEASE_LOCKOWNER: NFSv4.0 only; a 4.1 server answers NFS4ERR_NOTSUPP
    /// (RFC 8881 §18.52), which is what a test sends it for.
    pub fn release_lockowner(self, clientid: u64, owner: &[u8]) -> Ops {
        self.op(owner.len(), |w| {
            w.u32(OP_RELEASE_LOCKOWNER)?;
            w.u64(clientid)?;
            w.opaque_var(owner)
        })
    }

    pub fn test_stateid(self, sids: &[[u8; 16]]) -> Ops {
        self.op(16 * sids.len(), |w| {
            w.u32(OP_TEST_STATEID)?;
            w.u32(u32::try_from(sids.len()).map_err(|_| engine::xdr::XdrError::Overflow)?)?;
            for s in sids {
                w.opaque_fixed(s)?;
            }
            Ok(())
        })
    }

    pub fn free_stateid(self, sid: &[u8; 16]) -> Ops {
        self.op(0, |w| {
            w.u32(OP_FREE_STATEID)?;
            w.opaque_fixed(sid)
        })
    }
}

/// Data operations (RFC 8881 §18.3, §18.22, §18.32).
impl Ops {
    pub fn read(self, stateid: &[u8; 16], offset: u64, count: u32) -> Ops {
        self.op(0, |w| {
            w.u32(OP_READ)?;
            w.opaque_fixed(stateid)?;
            w.u64(offset)?;
            w.u32(count)
        })
    }

    /// WRITE (§18.32) FILE_SYNC4.
    pub fn write(self, stateid: &[u8; 16], offset: u64, data: &[u8]) -> Ops {
        self.write_stable(stateid, offset, FILE_SYNC4, data)
    }

    /// WRITE with `stable` (stable_how4).
    pub fn write_stable(self, stateid: &[u8; 16], offset: u64, stable: u32, data: &[u8]) -> Ops {
        self.op(data.len(), |w| {
            w.u32(OP_WRITE)?;
            w.opaque_fixed(stateid)?;
            w.u64(offset)?;
            w.u32(stable)?;
            w.opaque_var(data)
        })
    }

    pub fn commit(self, offset: u64, count: u32) -> Ops {
        self.op(0, |w| {
            w.u32(OP_COMMIT)?;
            w.u64(offset)?;
            w.u32(count)
        })
    }
}

/// A COMPOUND call message: RPC header (program NFS, version 4, COMPOUND) with
/// `cred`, then `ops`' COMPOUND4args.
pub fn compound_call(xid: u32, cred: &Cred, ops: &Ops) -> Vec<u8> {
    rpccall::call(
        xid,
        NFS_PROGRAM,
        NFS_V4,
        NFSPROC4_COMPOUND,
        cred,
        &ops.args(),
    )
}

/// A stateid with its seqid replaced (RFC 8881 §8.2.2).
pub fn with_seqid(sid: &[u8; 16], seqid: u32) -> [u8; 16] {
    let mut s = *sid;
    s[..4].copy_from_slice(&seqid.to_be_bytes());
    s
}

/// A stateid's seqid (RFC 8881 §8.2.2).
pub fn seqid_of(sid: &[u8; 16]) -> u32 {
    u32::from_be_bytes([sid[0], sid[1], sid[2], sid[3]])
}
