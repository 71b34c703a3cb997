//! A quick pass over a COMPOUND's arguments for the worker, before it runs: what the
//! COMPOUND may change (so the reactors' read caches are invalidated as for NFSv3) and
//! how large its reply can be. Nothing is executed; an argument this pass cannot skip
//! makes the answer conservative (every file may change, large reply).
//!
//! Namespace operations (CREATE, REMOVE, RENAME, OPEN with create; LINK is refused)
//! are not this pass's business: the file model bumps exactly the files each one
//! touches (`fs::ChangeObserver`), and a truncating OPEN its file (`state_ops::open`).
//! So a client that creates files, or opens existing ones with O_CREAT as Linux does
//! for `>>` and loggers (OPEN4_CREATE, UNCHECKED4), no longer invalidates every file
//! the reactors cache. What remains here: WRITE, SETATTR and COMMIT, by the file the
//! COMPOUND's last PUTFH named; after anything that moves the current filehandle to a
//! file not named by handle (LOOKUP, OPEN, CREATE, RESTOREFH, ...) such a change is
//! `Unnamed`.

use super::ops::*;
use super::skip::{self, STATEID};
use crate::fs::FileModel;
use engine::xdr::XdrReader;

/// What a COMPOUND may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Only reads.
    None,
    /// WRITE, SETATTR or COMMIT on this one file (reached by PUTFH).
    File(u64),
    /// Changes files the scan cannot name (or arguments it cannot follow): every
    /// cached file is dropped.
    Unnamed,
}

/// The scan's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scan {
    pub effect: Effect,
    /// Bytes of COMPOUND4res this call may need.
    pub reply: usize,
}

/// Reply room for everything but READ data and READDIR entries.
const BASE_REPLY: usize = 8192;
/// Headers around READ data or READDIR entries (SEQUENCE, PUTFH, READ results).
const DATA_OVERHEAD: usize = 2048;
/// Reply room when the scan stopped early.
const UNKNOWN_REPLY: usize = 64 << 10;
/// Largest reply (a session's ca_maxresponsesize bound).
pub const MAX_REPLY: usize = super::session_ops::MAX_RESPONSE as usize;

/// Scans COMPOUND4args (RFC 8881 §16.2.1).
pub fn scan(args: &[u8]) -> Scan {
    let mut r = XdrReader::new(args);
    let (Ok(_tag), Ok(_minor), Ok(n)) = (r.opaque_var(1024), r.u32(), r.u32()) else {
        return Scan {
            effect: Effect::None,
            reply: BASE_REPLY,
        };
    };
    let mut s = Scanner {
        cur: None,
        file: None,
        reply: 0,
    };
    for _ in 0..n.min(256) {
        let Ok(op) = r.u32() else { break };
        match s.op(op, &mut r) {
            Ok(()) => {}
            Err(Stop::End) => break,
            Err(Stop::Unknown) => {
                // The rest is unknown: it may change anything. Its reply size is not
                // guessed (READ and READDIR clamp their results to the buffer).
                return Scan {
                    effect: Effect::Unnamed,
                    reply: s.reply_size().max(UNKNOWN_REPLY),
                };
            }
        }
    }
    let effect = match s.file {
        Some(Some(id)) => Effect::File(id),
        Some(None) => Effect::Unnamed,
        None => Effect::None,
    };
    Scan {
        effect,
        reply: s.reply_size(),
    }
}

struct Scanner {
    /// File id of the current filehandle when a PUTFH named it.
    cur: Option<u64>,
    /// A file changed: `Some(Some(id))` one known file, `Some(None)` several or unknown.
    file: Option<Option<u64>>,
    /// READ data and READDIR entries asked for.
    reply: usize,
}

/// Why the scan stops early.
enum Stop {
    /// Unknown operation or arguments: assume the worst.
    Unknown,
    /// Nothing after this operation can matter.
    End,
}

impl From<engine::xdr::XdrError> for Stop {
    fn from(_: engine::xdr::XdrError) -> Stop {
        Stop::Unknown
    }
}

impl Scanner {
    /// Room for the data asked for plus headers, or a small reply without data. A
    /// 1 MiB READ fits the pools' 1 MiB + 4 KiB class.
    fn reply_size(&self) -> usize {
        if self.reply == 0 {
            BASE_REPLY
        } else {
            self.reply.saturating_add(DATA_OVERHEAD).min(MAX_REPLY)
        }
    }

    fn changed(&mut self) {
        self.file = match (self.file, self.cur) {
            (None, Some(id)) => Some(Some(id)),
            (Some(Some(a)), Some(b)) if a == b => Some(Some(a)),
            _ => Some(None),
        };
    }

    /// One operation: its arguments are skipped by `super::skip`, then the few that
    /// matter here are read again from their start.
    fn op(&mut self, op: u32, r: &mut XdrReader) -> Result<(), Stop> {
        match op {
            // Session and client operations change no file; their arguments are not
            // needed (the rest of the COMPOUND is scanned no further).
            OP_EXCHANGE_ID
            | OP_CREATE_SESSION
            | OP_DESTROY_SESSION
            | OP_DESTROY_CLIENTID
            | OP_BIND_CONN_TO_SESSION
            | OP_BACKCHANNEL_CTL => return Err(Stop::End),
            _ => {}
        }
        let mut a = r.clone();
        skip::op_args(op, r, &mut |_| Ok(()))?;
        match op {
            OP_PUTFH => {
                let fh = a.opaque_var(usize::MAX)?;
                self.cur = FileModel::peek_handle(fh).map(|(_, id)| id);
            }
            // The current filehandle becomes a file reached otherwise than by PUTFH
            // (CREATE: the new object; OPEN: the opened file, whether or not created).
            OP_PUTROOTFH | OP_PUTPUBFH | OP_LOOKUPP | OP_RESTOREFH | OP_LOOKUP | OP_SECINFO
            | OP_SECINFO_NO_NAME | OP_CREATE | OP_OPEN => self.cur = None,
            OP_READ => {
                a.skip(STATEID + 8)?;
                let count = a.u32()? as usize;
                self.reply = self.reply.saturating_add(count.min(MAX_REPLY));
            }
            OP_READDIR => {
                a.skip(8 + 8 + 4)?;
                let max = a.u32()? as usize;
                self.reply = self.reply.saturating_add(max.min(MAX_REPLY));
            }
            OP_WRITE | OP_COMMIT | OP_SETATTR => self.changed(),
            // REMOVE, RENAME (and LINK, refused) keep the current filehandle (the
            // directory); what they change the file model reports.
            _ => {}
        }
        Ok(())
    }
}
