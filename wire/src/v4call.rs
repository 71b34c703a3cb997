//! The workspace's NFSv4.1 COMPOUND encoder (RFC 8881 §16.2, each operation's
//! arguments in §18): [`Ops`] collects encoded operations and writes COMPOUND4args;
//! [`compound_call`] puts them behind an RPC call header ([`crate::rpccall`]). Each
//! operation is written by [`crate::v4op`], which a caller encoding into its own
//! buffer (bench's load loop) uses directly.
//! Every argument is written as given — a stateid, a sequence id, a count — so tests
//! and fuzzers can also send what a server must refuse.

use crate::nfs4::*;
use crate::nfs4args::*;
use crate::rpccall;
use crate::v4op;
use crate::{NFS_PROGRAM, NFS_V4};
use engine::rpc::Cred;
use engine::xdr::{XdrError, XdrResult, XdrWriter};

/// The minor version this encoder speaks (RFC 8881 §16.2.3).
pub const MINOR_VERSION: u32 = 1;

/// Room for an operation's fixed-size parts; variable parts are added to it.
const OP_ROOM: usize = 512;
/// Largest operation [`Ops`] makes room for before it gives up.
const MAX_OP: usize = 64 << 20;

pub use crate::v4op::{Bitmap, Channel, Claim, Fattr, How, Locker};

/// One COMPOUND's operations, encoded as they are added.
#[derive(Debug, Clone, Default)]
pub struct Ops {
    buf: Vec<u8>,
    /// Operations so far (the COMPOUND's `argarray` count).
    pub n: u32,
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
    pub fn raw(self, f: impl Fn(&mut XdrWriter) -> XdrResult<()>) -> Ops {
        self.op(0, f)
    }

    /// An operation with `extra` variable bytes beyond [`OP_ROOM`], written by `f`
    /// straight into the operations' buffer (no vector per operation): into room for
    /// `OP_ROOM + extra` bytes, and on overflow again into twice as much.
    pub(crate) fn op(mut self, extra: usize, f: impl Fn(&mut XdrWriter) -> XdrResult<()>) -> Ops {
        let start = self.buf.len();
        let mut room = OP_ROOM + extra;
        loop {
            self.buf.resize(start + room, 0);
            let mut w = XdrWriter::at(&mut self.buf, start);
            match f(&mut w) {
                Ok(()) => {
                    let end = w.position();
                    self.buf.truncate(end);
                    self.n += 1;
                    return self;
                }
                Err(XdrError::Overflow) if room < MAX_OP => room *= 2,
                Err(e) => panic!("an operation's XDR encodes: {e}"),
            }
        }
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
            v4op::exchange_id(w, &verifier, owner, flags)
        })
    }

    /// EXCHANGE_ID naming the client's implementation (eia_client_impl_id:
    /// nii_domain, nii_name).
    pub fn exchange_id_as(
        self,
        verifier: [u8; 8],
        owner: &[u8],
        (domain, name): (&str, &str),
    ) -> Ops {
        self.op(owner.len() + domain.len() + name.len(), |w| {
            v4op::exchange_id_as(w, &verifier, owner, 0, Some((domain, name)))
        })
    }

    /// CREATE_SESSION (§18.36): the channels asked for, callback program
    /// `NFS4_CALLBACK` and `cb_auth_none` AUTH_NONE entries in csa_sec_parms.
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
            v4op::create_session(w, clientid, seq, flags, [fore, back], cb_auth_none)
        })
    }

    /// SEQUENCE (§18.46) on slot 0 with sa_highest_slotid 0, not cached.
    pub fn sequence(self, sid: [u8; 16], seq: u32) -> Ops {
        self.sequence_at(sid, seq, 0, false)
    }

    /// SEQUENCE on any slot, with sa_highest_slotid = slot and sa_cachethis.
    pub fn sequence_at(self, sid: [u8; 16], seq: u32, slot: u32, cachethis: bool) -> Ops {
        self.op(0, |w| v4op::sequence(w, &sid, seq, slot, slot, cachethis))
    }

    /// RECLAIM_COMPLETE (§18.51) for all file systems (rca_one_fs false), as Linux
    /// sends it after CREATE_SESSION.
    pub fn reclaim_complete(self) -> Ops {
        self.reclaim_complete_fs(false)
    }

    /// RECLAIM_COMPLETE with rca_one_fs.
    pub fn reclaim_complete_fs(self, one_fs: bool) -> Ops {
        self.op(0, |w| v4op::reclaim_complete(w, one_fs))
    }

    /// BIND_CONN_TO_SESSION (§18.34) in direction `dir` (CDFC4_*), no RDMA mode.
    pub fn bind_conn(self, sid: [u8; 16], dir: u32) -> Ops {
        self.op(0, |w| v4op::bind_conn(w, &sid, dir))
    }

    /// BACKCHANNEL_CTL (§18.33): program `NFS4_CALLBACK`, one AUTH_NONE entry.
    pub fn backchannel_ctl(self) -> Ops {
        self.op(0, v4op::backchannel_ctl)
    }

    /// DESTROY_SESSION (§18.37).
    pub fn destroy_session(self, sid: [u8; 16]) -> Ops {
        self.op(0, |w| v4op::destroy_session(w, &sid))
    }

    /// DESTROY_CLIENTID (§18.50).
    pub fn destroy_clientid(self, clientid: u64) -> Ops {
        self.op(0, |w| v4op::destroy_clientid(w, clientid))
    }
}

/// File handle and namespace operations (RFC 8881 §18.3–§18.26).
impl Ops {
    pub fn putrootfh(self) -> Ops {
        self.bare(OP_PUTROOTFH)
    }

    pub fn putfh(self, fh: &[u8]) -> Ops {
        self.op(fh.len(), |w| v4op::putfh(w, fh))
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
        self.op(name.len(), |w| v4op::named(w, OP_LOOKUP, name))
    }

    /// GETATTR (§18.7) of the attributes in `bitmap` (bitmap4 words).
    pub fn getattr(self, bitmap: &[u32]) -> Ops {
        self.op(4 * bitmap.len(), |w| v4op::getattr(w, bitmap))
    }

    /// SETATTR (§18.30): `stateid`, then fattr4 of `bitmap` and the encoded `values`.
    pub fn setattr(self, stateid: &[u8; 16], bitmap: &[u32], values: &[u8]) -> Ops {
        let attrs = Fattr { bitmap, values };
        self.op(attrs.variable_len(), |w| v4op::setattr(w, stateid, &attrs))
    }

    /// CREATE (§18.4) of a directory (NF4DIR) or, with `target`, a symlink (NF4LNK),
    /// no attributes.
    pub fn create_obj(self, name: &[u8], target: Option<&[u8]>) -> Ops {
        self.create_with(name, target, Fattr::EMPTY)
    }

    /// CREATE of a directory or symlink with `attrs` (createattrs).
    pub fn create_with(self, name: &[u8], target: Option<&[u8]>, attrs: Fattr) -> Ops {
        let extra = name.len() + target.map_or(0, <[u8]>::len) + attrs.variable_len();
        self.op(extra, |w| v4op::create(w, name, target, &attrs))
    }

    pub fn remove(self, name: &[u8]) -> Ops {
        self.op(name.len(), |w| v4op::named(w, OP_REMOVE, name))
    }

    /// LINK (§18.9): the saved filehandle's file gets the name `name` in the current
    /// filehandle's directory.
    pub fn link(self, name: &[u8]) -> Ops {
        self.op(name.len(), |w| v4op::named(w, OP_LINK, name))
    }

    /// RENAME (§18.26) of `from` in the saved directory to `to` in the current one.
    pub fn rename(self, from: &[u8], to: &[u8]) -> Ops {
        self.op(from.len() + to.len(), |w| v4op::rename(w, from, to))
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
            v4op::readdir(w, cookie, &verifier, (dircount, maxcount), bitmap)
        })
    }
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
        self.op(
            owner.len() + how.variable_len() + claim.variable_len(),
            |w| v4op::open(w, clientid, owner, (access, deny), &how, &claim),
        )
    }

    pub fn open_downgrade(self, stateid: &[u8; 16], access: u32, deny: u32) -> Ops {
        self.op(0, |w| v4op::open_downgrade(w, stateid, access, deny))
    }

    pub fn close(self, stateid: &[u8; 16]) -> Ops {
        self.op(0, |w| v4op::close(w, stateid))
    }

    pub fn delegreturn(self, stateid: &[u8; 16]) -> Ops {
        self.op(0, |w| v4op::with_stateid(w, OP_DELEGRETURN, stateid))
    }

    /// LOCK (§18.10) of `kind` (nfs_lock_type4) over `offset`/`length` by `locker`.
    pub fn lock(self, kind: u32, reclaim: bool, offset: u64, length: u64, locker: Locker) -> Ops {
        let extra = match locker {
            Locker::New { owner, .. } => owner.len(),
            Locker::Existing { .. } => 0,
        };
        self.op(extra, |w| {
            v4op::lock(w, kind, reclaim, (offset, length), &locker)
        })
    }

    pub fn lockt(self, kind: u32, offset: u64, length: u64, clientid: u64, owner: &[u8]) -> Ops {
        self.op(owner.len(), |w| {
            v4op::lockt(w, kind, (offset, length), clientid, owner)
        })
    }

    pub fn locku(self, kind: u32, lock_sid: &[u8; 16], offset: u64, length: u64) -> Ops {
        self.op(0, |w| v4op::locku(w, kind, lock_sid, (offset, length)))
    }

    /// RELEASE_LOCKOWNER: NFSv4.0 only; a 4.1 server answers NFS4ERR_NOTSUPP
    /// (RFC 8881 §18.52), which is what a test sends it for.
    pub fn release_lockowner(self, clientid: u64, owner: &[u8]) -> Ops {
        self.op(owner.len(), |w| v4op::release_lockowner(w, clientid, owner))
    }

    pub fn test_stateid(self, sids: &[[u8; 16]]) -> Ops {
        self.op(16 * sids.len(), |w| v4op::test_stateid(w, sids))
    }

    pub fn free_stateid(self, sid: &[u8; 16]) -> Ops {
        self.op(0, |w| v4op::with_stateid(w, OP_FREE_STATEID, sid))
    }
}

/// Data operations (RFC 8881 §18.3, §18.22, §18.32).
impl Ops {
    pub fn read(self, stateid: &[u8; 16], offset: u64, count: u32) -> Ops {
        self.op(0, |w| v4op::read(w, stateid, offset, count))
    }

    /// WRITE (§18.32) FILE_SYNC4.
    pub fn write(self, stateid: &[u8; 16], offset: u64, data: &[u8]) -> Ops {
        self.write_stable(stateid, offset, FILE_SYNC4, data)
    }

    /// WRITE with `stable` (stable_how4).
    pub fn write_stable(self, stateid: &[u8; 16], offset: u64, stable: u32, data: &[u8]) -> Ops {
        self.op(data.len(), |w| {
            v4op::write(w, stateid, offset, stable, data)
        })
    }

    pub fn commit(self, offset: u64, count: u32) -> Ops {
        self.op(0, |w| v4op::commit(w, offset, count))
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

/// NFSv4.2's operations (RFC 7862 §15, RFC 8276 §8.4): send them with
/// [`compound_call_minor`] and minor version 2.
impl Ops {
    pub fn allocate(self, stateid: &[u8; 16], offset: u64, len: u64) -> Ops {
        self.op(0, |w| v4op::space(w, OP_ALLOCATE, stateid, offset, len))
    }

    pub fn deallocate(self, stateid: &[u8; 16], offset: u64, len: u64) -> Ops {
        self.op(0, |w| v4op::space(w, OP_DEALLOCATE, stateid, offset, len))
    }

    /// SEEK: `what` 0 data, 1 hole.
    pub fn seek(self, stateid: &[u8; 16], offset: u64, what: u32) -> Ops {
        self.op(0, |w| v4op::seek(w, stateid, offset, what))
    }

    pub fn read_plus(self, stateid: &[u8; 16], offset: u64, count: u32) -> Ops {
        self.op(0, |w| v4op::read_plus(w, stateid, offset, count))
    }

    /// COPY from the saved to the current filehandle.
    pub fn copy(self, r: &v4op::CopyRange, synchronous: bool) -> Ops {
        self.op(0, |w| v4op::copy(w, r, synchronous, &[]))
    }

    /// COPY from a source server (an inter-server copy, RFC 7862 §15.2.3).
    pub fn copy_from(self, r: &v4op::CopyRange, sources: &[&[u8]]) -> Ops {
        let extra = sources.iter().map(|s| 8 + s.len()).sum();
        self.op(extra, |w| v4op::copy(w, r, true, sources))
    }

    /// COPY_NOTIFY (§15.3) of `stateid` for one destination server named `name`
    /// (NL4_NAME).
    pub fn copy_notify(self, stateid: &[u8; 16], name: &[u8]) -> Ops {
        self.op(8 + name.len(), |w| v4op::copy_notify(w, stateid, name))
    }

    /// OFFLOAD_STATUS (§15.9) or OFFLOAD_CANCEL (§15.8) of `stateid`: `op` is either.
    pub fn offload(self, op: u32, stateid: &[u8; 16]) -> Ops {
        self.op(0, |w| v4op::with_stateid(w, op, stateid))
    }

    /// CLONE from the saved to the current filehandle.
    pub fn clone_range(self, r: &v4op::CopyRange) -> Ops {
        self.op(0, |w| v4op::clone(w, r))
    }

    pub fn getxattr(self, name: &[u8]) -> Ops {
        self.op(name.len(), |w| v4op::xattr_named(w, OP_GETXATTR, name))
    }

    pub fn setxattr(self, option: u32, name: &[u8], value: &[u8]) -> Ops {
        self.op(name.len() + value.len(), |w| {
            v4op::setxattr(w, option, name, value)
        })
    }

    pub fn listxattrs(self, cookie: u64, maxcount: u32) -> Ops {
        self.op(0, |w| v4op::listxattrs(w, cookie, maxcount))
    }

    pub fn removexattr(self, name: &[u8]) -> Ops {
        self.op(name.len(), |w| v4op::xattr_named(w, OP_REMOVEXATTR, name))
    }
}

/// An RPC call of a COMPOUND of minor version `minor` (2 for NFSv4.2's operations).
pub fn compound_call_minor(xid: u32, cred: &Cred, ops: &Ops, minor: u32) -> Vec<u8> {
    rpccall::call(
        xid,
        NFS_PROGRAM,
        NFS_V4,
        NFSPROC4_COMPOUND,
        cred,
        &ops.args_with(b"", minor),
    )
}
