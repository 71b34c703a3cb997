//! A quick pass over a COMPOUND's arguments before a worker runs it: how large its
//! reply can be, so the reply buffer (and the connection's reply budget) is sized
//! before anything executes. Nothing is executed; an argument this pass cannot skip
//! makes the answer conservative (`UNKNOWN_REPLY`).
//!
//! What a COMPOUND changes is not this pass's business: the file model reports every
//! change it executes (data, attributes, namespace) to the reactors' caches itself
//! (`fs::ChangeObserver`), whichever operation ran it and whatever came before it in
//! the COMPOUND, so no guess made here from the arguments can leave a cache stale.

use super::ops::*;
use super::skip::{self, STATEID};
use engine::xdr::XdrReader;

/// The scan's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scan {
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
        return Scan { reply: BASE_REPLY };
    };
    let mut s = Scanner { reply: 0 };
    for _ in 0..n.min(256) {
        let Ok(op) = r.u32() else { break };
        match s.op(op, &mut r) {
            Ok(()) => {}
            Err(Stop::End) => break,
            Err(Stop::Unknown) => {
                // The rest is unknown: its reply size is not guessed (READ and
                // READDIR clamp their results to the buffer).
                return Scan {
                    reply: s.reply_size().max(UNKNOWN_REPLY),
                };
            }
        }
    }
    Scan {
        reply: s.reply_size(),
    }
}

struct Scanner {
    /// READ data and READDIR entries asked for.
    reply: usize,
}

/// Why the scan stops early.
enum Stop {
    /// Unknown operation or arguments: assume the worst.
    Unknown,
    /// The operations after this one are not sized (their results clamp).
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

    /// One operation: its arguments are skipped by `super::skip`, then the few that
    /// matter here are read again from their start.
    fn op(&mut self, op: u32, r: &mut XdrReader) -> Result<(), Stop> {
        match op {
            // Session and client operations: `skip` does not follow their arguments,
            // so the rest of the COMPOUND is not sized (its READ and READDIR results
            // clamp to the buffer).
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
            _ => {}
        }
        Ok(())
    }
}
