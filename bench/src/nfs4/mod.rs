//! NFSv4.1 (RFC 8881) as bench speaks it: COMPOUND calls (encoding, this module, each
//! operation written by nfs-wire's `v4op` straight into the send buffer),
//! their replies (decoding, [`reply`]), the session slot table ([`slots`]) and the
//! blocking session client for setup and teardown ([`session`]).
//!
//! Every load call is one COMPOUND of SEQUENCE + PUTFH + the op (RFC 8881 §2.10.6:
//! SEQUENCE first, one slot per request in flight, the slot's sequence id advancing by
//! one per request the server processed). The v3 [`Call`] values are translated, so the
//! load driver picks ops the same way for both versions.

pub mod backchannel;
pub mod reply;
pub mod session;
pub mod setup;
pub mod slots;

use engine::rpc::Cred;
use engine::xdr::{XdrResult, XdrWriter};
use nfs_wire::nfs4args::{
    BENCH_IMPL_DOMAIN, BENCH_IMPL_NAME, FILE_SYNC4, LAYOUT4_FLEX_FILES, OPEN4_SHARE_ACCESS_BOTH,
    OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_DENY_NONE, UNCHECKED4, UNSTABLE4,
};
use nfs_wire::rpccall;
use nfs_wire::v3call::Call;
use nfs_wire::v4op::{self, Bitmap, Channel, Claim, Fattr, How};

use nfs_wire::nfs4::NFSPROC4_NULL;
/// NFSv4 program version (RFC 8881 §16; its procedures NULL and COMPOUND below).
pub use nfs_wire::NFS_V4 as VERSION;
/// The COMPOUND minor version of this process's NFSv4 calls: 1, or 2 with `--nfs 4.2`
/// ([`set_minor`], once at start, before any call).
static MINOR: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

/// Sets the minor version every later COMPOUND carries.
pub fn set_minor(minor: u32) {
    MINOR.store(minor, std::sync::atomic::Ordering::Relaxed);
}

/// The minor version COMPOUNDs carry.
pub fn minor() -> u32 {
    MINOR.load(std::sync::atomic::Ordering::Relaxed)
}

/// Reads as READ_PLUS (RFC 7862 §15.10, minor version 2) instead of READ.
static READ_PLUS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sets whether load reads are READ_PLUS (`--read-plus`).
pub fn set_read_plus(on: bool) {
    READ_PLUS.store(on, std::sync::atomic::Ordering::Relaxed);
}

fn read_plus() -> bool {
    READ_PLUS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Operation numbers (RFC 8881 §16.2.1, nfs_opnum4).
pub mod op {
    pub use nfs_wire::nfs4::{
        OP_CLOSE as CLOSE, OP_COMMIT as COMMIT, OP_COPY as COPY, OP_CREATE as CREATE,
        OP_CREATE_SESSION as CREATE_SESSION, OP_DELEGRETURN as DELEGRETURN,
        OP_DESTROY_CLIENTID as DESTROY_CLIENTID, OP_DESTROY_SESSION as DESTROY_SESSION,
        OP_EXCHANGE_ID as EXCHANGE_ID, OP_GETATTR as GETATTR, OP_GETFH as GETFH,
        OP_LOOKUP as LOOKUP, OP_OPEN as OPEN, OP_PUTFH as PUTFH, OP_PUTROOTFH as PUTROOTFH,
        OP_READ as READ, OP_READDIR as READDIR, OP_READ_PLUS as READ_PLUS,
        OP_RECLAIM_COMPLETE as RECLAIM_COMPLETE, OP_REMOVE as REMOVE, OP_SAVEFH as SAVEFH,
        OP_SEQUENCE as SEQUENCE, OP_WRITE as WRITE,
    };
}

/// nfsstat4 values bench reacts to (RFC 8881 §15.1).
pub mod status {
    pub const OK: u32 = 0;
    pub const DELAY: u32 = 10008;
    pub const GRACE: u32 = 10013;
    pub const COMPLETE_ALREADY: u32 = 10054;
}

/// Attribute numbers (RFC 8881 §5.8): type, size and mode.
pub use nfs_wire::nfs4args::{FATTR4_MODE, FATTR4_SIZE, FATTR4_TYPE};

/// Longest NFSv4 file handle (RFC 8881 NFS4_FHSIZE).
pub const FHSIZE: usize = 128;

/// A stateid4 (RFC 8881 §8.2): seqid and 12 opaque bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stateid {
    pub seqid: u32,
    pub other: [u8; 12],
}

impl Stateid {
    /// The same stateid with seqid 0: "the most recent" (RFC 8881 §8.2.2), so READ and
    /// WRITE need not track OPEN seqid changes.
    pub fn latest(self) -> Stateid {
        Stateid { seqid: 0, ..self }
    }

    /// The current stateid (RFC 8881 §16.2.3.1.2: seqid 1, other all zero): the one the
    /// previous op of the same COMPOUND produced.
    pub const CURRENT: Stateid = Stateid {
        seqid: 1,
        other: [0; 12],
    };

    /// stateid4 on the wire: seqid, then `other`.
    pub fn bytes(&self) -> [u8; 16] {
        let mut b = [0; 16];
        b[..4].copy_from_slice(&self.seqid.to_be_bytes());
        b[4..].copy_from_slice(&self.other);
        b
    }
}

pub type SessionId = [u8; 16];

/// SEQUENCE arguments (RFC 8881 §18.46): the session, the slot and its next seqid.
#[derive(Clone, Copy, Debug)]
pub struct Seq {
    pub session: SessionId,
    pub slot: u32,
    pub seqid: u32,
    /// sa_highest_slotid: the highest slot this client may use in the session.
    pub highest: u32,
}

/// The back channel CREATE_SESSION asks for (RFC 8881 §18.36; RFC 8267 §6.5.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackChannel {
    /// ca_maxrequests: the reverse credits granted on the connection.
    pub slots: u32,
    /// ca_maxrequestsize = ca_maxresponsesize: the inline threshold less the 28-byte
    /// transport header, as Linux does, so every callback is a Short message
    /// (R8267-30).
    pub max_msg: u32,
}

/// CREATE_SESSION4_FLAG_CONN_BACK_CHAN (RFC 8881 §18.36.1).
pub use nfs_wire::nfs4args::CREATE_SESSION4_FLAG_CONN_BACK_CHAN as CONN_BACK_CHAN;
/// OPEN4_SHARE_ACCESS_WANT_NO_DELEG (RFC 8881 §18.16.1): bench never holds
/// delegations, so a recall never has anything to return.
pub use nfs_wire::nfs4args::OPEN4_SHARE_ACCESS_WANT_NO_DELEG as WANT_NO_DELEG;

/// One operation of a COMPOUND, with its arguments.
#[derive(Clone, Copy, Debug)]
pub enum Op4<'a> {
    Sequence(Seq),
    Putfh(&'a [u8]),
    Putrootfh,
    Getfh,
    /// GETATTR of the given attribute numbers (each < 64).
    Getattr(&'a [u32]),
    Lookup(&'a str),
    Read(Stateid, u64, u32),
    /// READ_PLUS (RFC 7862 §15.10): READ's arguments, the data as segments.
    ReadPlus(Stateid, u64, u32),
    /// UNSTABLE4 write.
    Write(Stateid, u64, &'a [u8]),
    Commit,
    Remove(&'a str),
    /// READDIR from cookie 0 (dircount 4 KiB, maxcount 32 KiB), asking type and size.
    Readdir,
    /// OPEN, CLAIM_NULL, share access BOTH, deny NONE, OPEN4_CREATE UNCHECKED4 with
    /// mode 0644 (an existing file is opened as it is), by the open owner given.
    OpenCreate {
        clientid: u64,
        owner: &'a [u8],
        name: &'a str,
    },
    Close(Stateid),
    /// FILE_SYNC4 write: durable when answered (RFC 8881 §18.32.3).
    WriteSync(Stateid, u64, &'a [u8]),
    /// OPEN for reading, OPEN4_NOCREATE, CLAIM_NULL, no delegation wanted.
    OpenRead {
        clientid: u64,
        owner: &'a [u8],
        name: &'a str,
    },
    /// CREATE of a directory (NF4DIR) with mode 0755 (RFC 8881 §18.4).
    Mkdir(&'a str),
    /// READDIR from `cookie` with the verifier of the previous page (zero at first),
    /// asking type and size (RFC 8881 §18.23).
    ReaddirAt(u64, [u8; 8]),
    Delegreturn(Stateid),
    /// SAVEFH (RFC 8881 §18.27): COPY's source is the saved filehandle.
    Savefh,
    /// COPY (RFC 7862 §15.2) inside the server, consecutive and synchronous, from the
    /// saved filehandle (`src` stateid, offset) to the current one (`dst`, offset), of
    /// `count` bytes (0: to the source's end).
    Copy {
        src: Stateid,
        dst: Stateid,
        src_off: u64,
        dst_off: u64,
        count: u64,
    },
    ReclaimComplete,
    DestroySession(SessionId),
    DestroyClientid(u64),
    ExchangeId {
        verifier: [u8; 8],
        owner: &'a [u8],
    },
    CreateSession {
        clientid: u64,
        sequence: u32,
        /// Fore-channel slots asked for.
        slots: u32,
        /// Largest request and reply asked for.
        max_msg: u32,
        /// Ask CONN_BACK_CHAN with a back channel of this many slots whose requests
        /// and replies are at most `back_msg` bytes (RFC 8167 over RDMA); `None`: no
        /// back channel.
        back: Option<BackChannel>,
    },
    /// pNFS (`--pnfs`, RFC 8881 §18.40–§18.44, flexfiles RFC 8435): LAYOUTGET as given.
    LayoutGet(nfs_wire::v4pnfs::LayoutGet),
    /// GETDEVICEINFO of a flexfiles device.
    GetDeviceInfo([u8; 16]),
    LayoutCommit(nfs_wire::v4pnfs::LayoutCommit),
    /// LAYOUTRETURN of a flexfiles layout of the iomode given.
    LayoutReturn(u32, nfs_wire::v4pnfs::Return),
}

/// READDIR's sizes (RFC 8881 §18.23.1): 4 KiB of names, 32 KiB of reply.
const READDIR_COUNTS: (u32, u32) = (4096, 32 << 10);

/// A channel_attrs4 (RFC 8881 §18.36.1).
fn channel(max_msg: u32, cached: u32, ops: u32, reqs: u32) -> Channel {
    Channel {
        headerpad: 0,
        max_request: max_msg,
        max_response: max_msg,
        max_response_cached: cached,
        max_ops: ops,
        max_requests: reqs,
    }
}

/// fattr4 of a mode alone (attribute 33, RFC 8881 §5.8), for OPEN and CREATE.
fn write_mode_attrs<R>(mode: u32, f: impl FnOnce(&Fattr) -> R) -> R {
    let (bits, value) = (Bitmap::of(&[FATTR4_MODE]), mode.to_be_bytes());
    f(&Fattr {
        bitmap: bits.words(),
        values: &value,
    })
}

impl Op4<'_> {
    pub fn num(&self) -> u32 {
        match self {
            Op4::Sequence(_) => op::SEQUENCE,
            Op4::Putfh(_) => op::PUTFH,
            Op4::Putrootfh => op::PUTROOTFH,
            Op4::Getfh => op::GETFH,
            Op4::Getattr(_) => op::GETATTR,
            Op4::Lookup(_) => op::LOOKUP,
            Op4::Read(..) => op::READ,
            Op4::ReadPlus(..) => op::READ_PLUS,
            Op4::Write(..) => op::WRITE,
            Op4::Commit => op::COMMIT,
            Op4::Remove(_) => op::REMOVE,
            Op4::Readdir => op::READDIR,
            Op4::OpenCreate { .. } => op::OPEN,
            Op4::Close(_) => op::CLOSE,
            Op4::WriteSync(..) => op::WRITE,
            Op4::OpenRead { .. } => op::OPEN,
            Op4::Mkdir(_) => op::CREATE,
            Op4::ReaddirAt(..) => op::READDIR,
            Op4::Delegreturn(_) => op::DELEGRETURN,
            Op4::Savefh => op::SAVEFH,
            Op4::Copy { .. } => op::COPY,
            Op4::ReclaimComplete => op::RECLAIM_COMPLETE,
            Op4::DestroySession(_) => op::DESTROY_SESSION,
            Op4::DestroyClientid(_) => op::DESTROY_CLIENTID,
            Op4::ExchangeId { .. } => op::EXCHANGE_ID,
            Op4::CreateSession { .. } => op::CREATE_SESSION,
            Op4::LayoutGet(_) => nfs_wire::nfs4::OP_LAYOUTGET,
            Op4::GetDeviceInfo(_) => nfs_wire::nfs4::OP_GETDEVICEINFO,
            Op4::LayoutCommit(_) => nfs_wire::nfs4::OP_LAYOUTCOMMIT,
            Op4::LayoutReturn(..) => nfs_wire::nfs4::OP_LAYOUTRETURN,
        }
    }

    /// Writes the operation through nfs-wire's encoder ([`v4op`]), into the caller's
    /// buffer.
    fn put(&self, w: &mut XdrWriter) -> XdrResult<()> {
        match *self {
            Op4::Sequence(s) => v4op::sequence(w, &s.session, s.seqid, s.slot, s.highest, false),
            Op4::Putfh(fh) => v4op::putfh(w, fh),
            Op4::Putrootfh | Op4::Getfh | Op4::Savefh => v4op::bare(w, self.num()),
            Op4::Copy {
                src,
                dst,
                src_off,
                dst_off,
                count,
            } => {
                let range = v4op::CopyRange {
                    src_stateid: src.bytes(),
                    dst_stateid: dst.bytes(),
                    src_offset: src_off,
                    dst_offset: dst_off,
                    count,
                };
                // ca_synchronous: the reply is the copy done (§15.2.3); no source
                // server: a copy inside this one.
                v4op::copy(w, &range, true, &[])
            }
            Op4::ReclaimComplete => v4op::reclaim_complete(w, false),
            Op4::Getattr(attrs) => v4op::getattr(w, Bitmap::of(attrs).words()),
            Op4::Lookup(name) | Op4::Remove(name) => v4op::named(w, self.num(), name.as_bytes()),
            Op4::Read(sid, off, count) => v4op::read(w, &sid.bytes(), off, count),
            Op4::ReadPlus(sid, off, count) => v4op::read_plus(w, &sid.bytes(), off, count),
            Op4::Write(sid, off, data) => v4op::write(w, &sid.bytes(), off, UNSTABLE4, data),
            Op4::WriteSync(sid, off, data) => v4op::write(w, &sid.bytes(), off, FILE_SYNC4, data),
            Op4::Commit => v4op::commit(w, 0, 0),
            Op4::Readdir => readdir(w, 0, [0; 8]),
            Op4::ReaddirAt(cookie, verf) => readdir(w, cookie, verf),
            Op4::OpenRead {
                clientid,
                owner,
                name,
            } => {
                let share = (
                    OPEN4_SHARE_ACCESS_READ | WANT_NO_DELEG,
                    OPEN4_SHARE_DENY_NONE,
                );
                let claim = Claim::Null(name.as_bytes());
                v4op::open(w, clientid, owner, share, &How::NoCreate, &claim)
            }
            Op4::OpenCreate {
                clientid,
                owner,
                name,
            } => write_mode_attrs(0o644, |attrs| {
                // UNCHECKED4: an existing file is opened as it is (RFC 8881 §18.16.3).
                let how = How::WithAttrs {
                    mode: UNCHECKED4,
                    attrs: *attrs,
                };
                let share = (
                    OPEN4_SHARE_ACCESS_BOTH | WANT_NO_DELEG,
                    OPEN4_SHARE_DENY_NONE,
                );
                v4op::open(
                    w,
                    clientid,
                    owner,
                    share,
                    &how,
                    &Claim::Null(name.as_bytes()),
                )
            }),
            Op4::Mkdir(name) => {
                write_mode_attrs(0o755, |attrs| v4op::create(w, name.as_bytes(), None, attrs))
            }
            Op4::Close(sid) => v4op::close(w, &sid.bytes()),
            Op4::Delegreturn(sid) => v4op::with_stateid(w, self.num(), &sid.bytes()),
            Op4::DestroySession(s) => v4op::destroy_session(w, &s),
            // flags 0: the server picks its pNFS role. bench names itself
            // (eia_client_impl_id, RFC 8881 §18.35.1): a gateway stripes layouts
            // for the implementations its `pnfs.stripe_clients` names.
            Op4::ExchangeId { verifier, owner } => v4op::exchange_id_as(
                w,
                &verifier,
                owner,
                0,
                Some((BENCH_IMPL_DOMAIN, BENCH_IMPL_NAME)),
            ),
            Op4::DestroyClientid(c) => v4op::destroy_clientid(w, c),
            Op4::CreateSession {
                clientid,
                sequence,
                slots,
                max_msg,
                back,
            } => {
                let fore = channel(max_msg, 4096, 8, slots);
                // No persistence; CONN_BACK_CHAN over RDMA (RFC 8167). Linux's back
                // channel: max_ops 2, nothing cached (nfsv41-linux-notes.md); without
                // one it is still described (RFC 8881 §18.36), with the values the
                // Linux client sends over TCP.
                let (flags, back) = match back {
                    Some(b) => (CONN_BACK_CHAN, channel(b.max_msg, 0, 2, b.slots)),
                    None => (0, channel(4096, 0, 2, 1)),
                };
                // One callback security parameter: AUTH_NONE.
                v4op::create_session(w, clientid, sequence, flags, [&fore, &back], 1)
            }
            Op4::LayoutGet(a) => nfs_wire::v4pnfs::layoutget(w, &a),
            // gdia_maxcount 0: no limit asked; no notifications wanted.
            Op4::GetDeviceInfo(id) => {
                nfs_wire::v4pnfs::getdeviceinfo(w, &id, LAYOUT4_FLEX_FILES, 0, &[])
            }
            Op4::LayoutCommit(a) => nfs_wire::v4pnfs::layoutcommit(w, &a),
            Op4::LayoutReturn(iomode, r) => {
                nfs_wire::v4pnfs::layoutreturn(w, LAYOUT4_FLEX_FILES, iomode, &r)
            }
        }
    }
}

/// READDIR4args (RFC 8881 §18.23.1) from `cookie`, asking type and size.
fn readdir(w: &mut XdrWriter, cookie: u64, verf: [u8; 8]) -> XdrResult<()> {
    let bits = Bitmap::of(&[FATTR4_TYPE, FATTR4_SIZE]);
    v4op::readdir(w, cookie, &verf, READDIR_COUNTS, bits.words())
}

/// Encodes an RPC call of COMPOUND (minor version [`minor`]) with `ops` into `out[4..]` (room
/// for the record mark); returns the end (RFC 8881 §16.2.1).
pub fn encode_compound(
    out: &mut [u8],
    xid: u32,
    cred: &Cred,
    ops: &[Op4],
) -> anyhow::Result<usize> {
    let mut w = XdrWriter::at(out, 4);
    v4op::compound_header(&mut w, xid, cred, b"", minor(), u32::try_from(ops.len())?)?;
    for o in ops {
        o.put(&mut w)?;
    }
    Ok(w.position())
}

/// Encodes the NFSv4 NULL procedure.
pub fn encode_null(out: &mut [u8], xid: u32, cred: &Cred) -> anyhow::Result<usize> {
    let mut w = XdrWriter::at(out, 4);
    rpccall::header(
        &mut w,
        xid,
        nfs_wire::NFS_PROGRAM,
        VERSION,
        NFSPROC4_NULL,
        cred,
    )?;
    Ok(w.position())
}

/// What a load call needs beyond the v3 [`Call`]: the SEQUENCE, the file's open
/// stateid (READ, WRITE) and the open owner (CREATE).
pub struct Ctx<'a> {
    pub seq: Seq,
    pub stateid: Stateid,
    pub clientid: u64,
    pub owner: &'a [u8],
}

/// Encodes a load call as SEQUENCE + PUTFH + the op (RFC 8881 §2.10.6): READ, WRITE,
/// GETATTR (size), COMMIT, LOOKUP (+GETFH), READDIR, REMOVE; CREATE becomes OPEN
/// (create) + CLOSE of the current stateid, MKDIR a CREATE (NF4DIR) and RMDIR a
/// REMOVE. NULL is the NULL procedure.
pub fn encode_call(
    out: &mut [u8],
    xid: u32,
    cred: &Cred,
    x: &Ctx,
    call: &Call,
) -> anyhow::Result<usize> {
    let seq = Op4::Sequence(x.seq);
    let sid = x.stateid.latest();
    match *call {
        Call::Null => encode_null(out, xid, cred),
        Call::Mount(_) => anyhow::bail!("NFSv4 has no MOUNT"),
        Call::Getattr(fh) => encode_compound(
            out,
            xid,
            cred,
            &[seq, Op4::Putfh(fh), Op4::Getattr(&[FATTR4_SIZE])],
        ),
        // A stat of a name as the Linux client sends it (RFC 8881 §18.15, §18.8,
        // §18.7): the handle and the attributes with it.
        Call::Lookup(dir, name) => encode_compound(
            out,
            xid,
            cred,
            &[
                seq,
                Op4::Putfh(dir),
                Op4::Lookup(name),
                Op4::Getfh,
                Op4::Getattr(&[FATTR4_SIZE]),
            ],
        ),
        Call::Read(fh, off, n) => encode_compound(
            out,
            xid,
            cred,
            &[
                seq,
                Op4::Putfh(fh),
                if read_plus() {
                    Op4::ReadPlus(sid, off, n)
                } else {
                    Op4::Read(sid, off, n)
                },
            ],
        ),
        Call::Write(fh, off, data) => encode_compound(
            out,
            xid,
            cred,
            &[seq, Op4::Putfh(fh), Op4::Write(sid, off, data)],
        ),
        Call::Create(dir, name) => encode_compound(
            out,
            xid,
            cred,
            &[
                seq,
                Op4::Putfh(dir),
                Op4::OpenCreate {
                    clientid: x.clientid,
                    owner: x.owner,
                    name,
                },
                Op4::Close(Stateid::CURRENT),
            ],
        ),
        Call::Remove(dir, name) => {
            encode_compound(out, xid, cred, &[seq, Op4::Putfh(dir), Op4::Remove(name)])
        }
        Call::Readdirplus(dir) => {
            encode_compound(out, xid, cred, &[seq, Op4::Putfh(dir), Op4::Readdir])
        }
        Call::Commit(fh) => encode_compound(out, xid, cred, &[seq, Op4::Putfh(fh), Op4::Commit]),
        // `mkdirrmdir`: CREATE of an NF4DIR, then REMOVE (RFC 8881 §18.4, §18.25).
        Call::Mkdir(dir, name) => {
            encode_compound(out, xid, cred, &[seq, Op4::Putfh(dir), Op4::Mkdir(name)])
        }
        Call::Rmdir(dir, name) => {
            encode_compound(out, xid, cred, &[seq, Op4::Putfh(dir), Op4::Remove(name)])
        }
        // The metadata run (`md`) builds its own compounds.
        Call::WriteSync(..) | Call::ReaddirplusAt(..) => {
            anyhow::bail!("{} is not a load call", call.name())
        }
    }
}

#[cfg(test)]
mod tests;
