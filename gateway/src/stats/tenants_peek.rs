//! What the per-client and per-export tables and QoS need from a call record,
//! peeked once per call at fixed places without decoding it: the call's class (read,
//! write, metadata), the export its file handle names and, for a READ or WRITE, its
//! byte count (QoS charges it: `qos::Cost`).
//!
//! Every offset is checked (a hostile record gives `metadata` and no export, never a
//! panic). The export id is read from the handle as the file model lays it out
//! (`fs::FileModel::peek_handle`); the handle is not authenticated here (its MAC is
//! checked by whoever answers the call), so a forged handle can only name an export
//! the export table holds (`Tenants::export`) and is answered with the protocol's error.

use crate::front::Plan;
use crate::fs::FileModel;
use nfs_wire::nfs3::{NFSPROC3_COMMIT, NFSPROC3_READ, NFSPROC3_WRITE};
use nfs_wire::nfs4::{OP_COMMIT, OP_PUTFH, OP_READ, OP_SEQUENCE, OP_WRITE};
use nfs_wire::{NFS_PROGRAM, NFS_V3, NFS_V4};

/// Label values of the `class` label, by [`Class`].
pub const CLASSES: [&str; 3] = ["read", "write", "metadata"];

/// What a call does, as the per-client series count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Class {
    /// NFSv3 READ; a COMPOUND whose main operation is READ.
    Read = 0,
    /// NFSv3 WRITE and COMMIT; a COMPOUND whose main operation is WRITE or COMMIT.
    Write = 1,
    /// Everything else (MOUNT, NULL, namespace and attribute calls, other programs).
    Meta = 2,
}

/// A call's class, the export id its file handle names, and the bytes a READ asks
/// for or a WRITE carries (capped at `limits::MAX_IO`, the largest transfer the
/// gateway makes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peek {
    pub class: Class,
    pub export: Option<u16>,
    pub read: u32,
    pub write: u32,
}

impl Peek {
    /// What a record that is no NFSv3 call or data COMPOUND gives.
    pub const NONE: Peek = Peek {
        class: Class::Meta,
        export: None,
        read: 0,
        write: 0,
    };
}

const NONE: Peek = Peek::NONE;

/// What the per-client tables count of a call, taken from what `classify` decoded
/// anyway (`server::dispatch::Hot::seen`): the RPC header it checked, the arguments'
/// offset and, for a COMPOUND, its plan (`nfs4::plan`, the one walk over the
/// arguments). Nothing here walks a record: the only reads are the handle's length and
/// `FileModel::peek_handle`, each checked (a hostile handle names no export).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub class: Class,
    pub export: Option<u16>,
}

impl Seen {
    /// A call `classify` answered before decoding a handle: NULL, MOUNT, rejections,
    /// records that are no call.
    pub const NONE: Seen = Seen {
        class: Class::Meta,
        export: None,
    };

    /// An NFSv3 call of procedure `proc_` (not NULL) whose arguments are `args`: every
    /// procedure but NULL starts with the handle (RFC 1813 §3.3).
    #[inline]
    pub fn v3(proc_: u32, args: &[u8]) -> Seen {
        let class = match proc_ {
            NFSPROC3_READ => Class::Read,
            NFSPROC3_WRITE | NFSPROC3_COMMIT => Class::Write,
            _ => Class::Meta,
        };
        Seen {
            class,
            export: Words(args).handle_export(0),
        }
    }

    /// A call whose handle `fh` `classify` decoded: a READ (`read`) or a metadata
    /// call (NFSv3 GETATTR; a COMPOUND `SEQUENCE, PUTFH, GETATTR`).
    #[inline]
    pub fn handle(read: bool, fh: &[u8]) -> Seen {
        Seen {
            class: if read { Class::Read } else { Class::Meta },
            export: FileModel::peek_handle(fh).map(|(export, _)| export),
        }
    }

    /// A COMPOUND whose arguments are `args` and whose plan is `plan`: as `peek` reads
    /// it (`SEQUENCE, PUTFH` and the operation after them, RFC 8881 §2.10.6.1), from the
    /// plan's operation numbers and offsets instead of a second walk.
    #[inline]
    pub fn v4(args: &[u8], plan: &Plan) -> Seen {
        let (Some(seq), Some(putfh)) = (plan.op(0), plan.op(1)) else {
            return Seen::NONE;
        };
        if seq.code != OP_SEQUENCE || putfh.code != OP_PUTFH {
            return Seen::NONE;
        }
        let class = match plan.op(2).map(|o| o.code) {
            Some(OP_READ) => Class::Read,
            Some(OP_WRITE | OP_COMMIT) => Class::Write,
            _ => Class::Meta,
        };
        Seen {
            class,
            export: Words(args).handle_export(putfh.at as usize),
        }
    }
}

/// A client's byte count, capped.
#[inline]
fn cap(n: u32) -> u32 {
    n.min(crate::limits::MAX_IO as u32)
}

/// Big-endian words of a record, each read checked.
struct Words<'a>(&'a [u8]);

impl Words<'_> {
    #[inline]
    fn at(&self, at: usize) -> Option<u32> {
        let b = self.0.get(at..at.checked_add(4)?)?;
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// The offset just past the XDR opaque<> that starts at `at`.
    #[inline]
    fn skip_opaque(&self, at: usize) -> Option<usize> {
        let len = self.at(at)? as usize;
        at.checked_add(4)?.checked_add(len.checked_add(3)? & !3)
    }

    /// The export id of the nfs_fh3 / nfs_fh4 (opaque<>) at `at`.
    #[inline]
    fn handle_export(&self, at: usize) -> Option<u16> {
        let len = self.at(at)? as usize;
        let start = at.checked_add(4)?;
        let fh = self.0.get(start..start.checked_add(len)?)?;
        FileModel::peek_handle(fh).map(|(export, _)| export)
    }
}

/// RFC 5531 §8.2: an `opaque_auth` body is at most 400 bytes (a longer one is not
/// a call `classify` answers with data; the peek gives up on it).
const MAX_AUTH: usize = 400;

/// Peeks at an RPC call record (starting at its XID; RFC 5531 §9): NFSv3 calls by
/// procedure and the handle every procedure but NULL starts with (RFC 1813 §3.3);
/// NFSv4.1 COMPOUNDs that start `SEQUENCE, PUTFH` (RFC 8881 §2.10.6.1: every
/// COMPOUND of a session starts with SEQUENCE) by the PUTFH's handle and the
/// operation after it, the COMPOUND's main one; anything else is `metadata` with
/// no export.
#[inline]
pub fn peek(record: &[u8]) -> Peek {
    // The fixed header up to the credential's length, checked once (no call is
    // shorter): xid, mtype, rpcvers, prog, vers, proc, cred flavor, cred length.
    let Some(h) = record.first_chunk::<32>() else {
        return NONE;
    };
    let word = |i: usize| u32::from_be_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
    let (vers, proc_) = (word(16), word(20));
    if word(4) != 0 || word(12) != NFS_PROGRAM {
        return NONE;
    }
    match (vers, proc_) {
        (NFS_V3, p) => peek_v3(record, p),
        (NFS_V4, 1) => {
            let w = Words(record);
            args_at(&w)
                .and_then(|args| compound(&w, args))
                .unwrap_or(NONE)
        }
        _ => NONE,
    }
}

/// `peek` of a record whose header the caller already checked is an NFSv3 call of
/// procedure `proc_` (`stats::slot_of`: the reactor reads the header once).
#[inline]
pub fn peek_v3(record: &[u8], proc_: u32) -> Peek {
    let w = Words(record);
    match args_at(&w) {
        Some(args) if proc_ != 0 => v3(&w, proc_, args),
        _ => NONE,
    }
}

/// Where a call's arguments start: past the credential and the verifier (flavor,
/// then opaque body, each). Bounded lengths, so the sums cannot overflow.
#[inline]
fn args_at(w: &Words) -> Option<usize> {
    let cred = w.at(28)? as usize;
    if cred > MAX_AUTH {
        return None;
    }
    let verf = 36 + ((cred + 3) & !3);
    let len = w.at(verf)? as usize;
    if len > MAX_AUTH {
        return None;
    }
    Some(verf + 4 + ((len + 3) & !3))
}

/// An NFSv3 call: every procedure but NULL starts with the handle (RFC 1813 §3.3);
/// READ3args and WRITE3args go on with offset and count (§3.3.6, §3.3.7).
#[inline]
fn v3(w: &Words, proc_: u32, args: usize) -> Peek {
    let count = || {
        let at = w.skip_opaque(args)?.checked_add(8)?;
        w.at(at).map(cap)
    };
    let mut p = Peek {
        export: w.handle_export(args),
        ..NONE
    };
    match proc_ {
        NFSPROC3_READ => {
            p.class = Class::Read;
            p.read = count().unwrap_or(0);
        }
        NFSPROC3_WRITE => {
            p.class = Class::Write;
            p.write = count().unwrap_or(0);
        }
        NFSPROC3_COMMIT => p.class = Class::Write,
        _ => {}
    }
    p
}

/// COMPOUND4args: tag, minorversion, the operation count, then `SEQUENCE` (its
/// arguments are 32 bytes: session id, sequence id, slot id, highest slot id,
/// cachethis; RFC 8881 §18.46.1) and `PUTFH`; a READ after them is charged its
/// count (READ4args: stateid, offset, count; §18.22.1), a WRITE its data's length
/// (WRITE4args: stateid, offset, stable, data; §18.32.1).
fn compound(w: &Words, args: usize) -> Option<Peek> {
    let count_at = w.skip_opaque(args)?.checked_add(4)?;
    let n = w.at(count_at)?;
    let ops = count_at + 4;
    if n < 2 || w.at(ops)? != OP_SEQUENCE || w.at(ops + 36)? != OP_PUTFH {
        return None;
    }
    let fh = ops + 40;
    let mut p = Peek {
        export: w.handle_export(fh),
        ..NONE
    };
    let next = w.skip_opaque(fh)?;
    if n < 3 {
        return Some(p);
    }
    match w.at(next) {
        Some(OP_READ) => {
            p.class = Class::Read;
            p.read = w.at(next + 4 + 24).map_or(0, cap);
        }
        Some(OP_WRITE) => {
            p.class = Class::Write;
            p.write = w.at(next + 4 + 28).map_or(0, cap);
        }
        Some(OP_COMMIT) => p.class = Class::Write,
        _ => {}
    }
    Some(p)
}
