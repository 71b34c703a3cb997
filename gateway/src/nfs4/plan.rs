//! A COMPOUND's plan: ONE walk over COMPOUND4args (RFC 8881 §16.2.1) before anything
//! runs, made by the reactor and carried with the call to the worker (`Job::plan`),
//! so nothing walks the arguments again before execution:
//!
//! - the reply bound (how large COMPOUND4res may get: the reply buffer and the TCP
//!   connection's reply budget are sized from it);
//! - the operations (number and argument offset of the first `OPS_MAX`) and the
//!   fast-path shape they make (`Kind`: the COMPOUNDs the reactor answers from its
//!   cache, `fast`, or runs on its io_uring, `fast_io`, which then decode only the
//!   fields at those offsets — or, for the cache shapes, take them from the walk
//!   itself, `Plan::with_shape`);
//! - the positions of the DDP-eligible call items (WRITE data, CREATE NF4LNK
//!   linkdata, RFC 8267 §6.1), as the neutral `ddp::Eligibles` that the RPC-over-RDMA
//!   binding (`ulb::v4`) matches with the reduced chunks; the binding gets them from
//!   its caller (`front::V4_PATHS.plan_ddp`), the plan names no binding.
//!
//! The common shapes take a fast lane (`lane`: one cursor pass, no table lookup per
//! operation), which answers only where the general walk would answer the same;
//! everything else takes the general walk over `skip::op_args`.
//!
//! Nothing is executed; an argument the walk cannot skip (`skip::op_args`) ends it and
//! makes the reply bound conservative (`UNKNOWN_REPLY`). What a COMPOUND changes is
//! not the plan's business: the file model reports every change it executes to the
//! reactors' caches (`fs::ChangeObserver`), whatever the arguments said.
//!
//! Every count and length in the arguments is hostile: the walk is bounded by the
//! bytes present (each operation takes at least its 4-byte number), the plan is fixed
//! size (no allocation), and a truncated or absurd COMPOUND gets a plan whose shape is
//! `Kind::Other` and whose reply bound is at most `MAX_REPLY`.

use super::fast::Shape;
use super::ops::*;
use super::skip::{self, STATEID};
pub use crate::ddp::{Eligible, Eligibles, ELIGIBLE_MAX};
use engine::xdr::XdrReader;

mod lane;

/// Operations whose number and offset the plan keeps (the fast shapes need 5: the
/// Linux client's stat, `SEQUENCE, PUTFH, LOOKUP, GETFH, GETATTR`).
pub const OPS_MAX: usize = 5;
/// Longest tag a fast shape takes (longer ones are legal: the worker answers them).
pub const TAG_MAX: usize = 64;
/// Longest tag COMPOUND accepts (NFS4_OPAQUE_LIMIT, `compound::TAG_MAX`).
const TAG_LIMIT: usize = 1024;
/// Operations the reply bound looks at.
const SIZED_MAX: u32 = 256;

/// Reply room for everything but READ data and READDIR entries.
pub const BASE_REPLY: usize = 8192;
/// Headers around READ data or READDIR entries (SEQUENCE, PUTFH, READ results).
const DATA_OVERHEAD: usize = 2048;
/// Reply room a LAYOUTGET, GETDEVICEINFO or GETDEVICELIST asks for: its result (at
/// most `layout_ops::LAYOUT_MAX`, or `config::MAX_DATA_SERVERS` device ids) and room
/// for the other results, as `BASE_REPLY`.
pub const PNFS_REPLY: usize = BASE_REPLY;
/// Reply room when the walk stopped at an operation it cannot skip.
pub const UNKNOWN_REPLY: usize = 64 << 10;
/// Largest reply (a session's ca_maxresponsesize bound).
pub const MAX_REPLY: usize = super::session_ops::MAX_RESPONSE as usize;

/// One operation: its number and where its arguments start in COMPOUND4args.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Op {
    pub code: u32,
    pub at: u32,
}

/// The fast-path shape (minor version 1 or 2, tag up to `TAG_MAX`, nothing after the last
/// operation): `SEQUENCE, PUTFH` then the operation(s) named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Other,
    Getattr,
    Read,
    /// `SEQUENCE, PUTFH, READ_PLUS` (RFC 7862 §15.10; minor version 2, which the
    /// answering path checks).
    ReadPlus,
    Write,
    WriteGetattr,
    Commit,
    /// `SEQUENCE, PUTFH, READDIR` (RFC 8881 §18.23): answered from the reactor's
    /// listings (`fast_dirs`), taken by the general walk (not the lane).
    Readdir,
    /// `SEQUENCE, PUTFH, LOOKUP, GETATTR` (RFC 8881 §18.15, §18.7; bench md's stat):
    /// answered from the reactor's names (`fast_names`), taken by the general walk.
    Lookup,
    /// `SEQUENCE, PUTFH, LOOKUP, GETFH, GETATTR` (the Linux client's stat of a name
    /// it has not cached), as `Lookup`.
    LookupFh,
}

/// The plan of one COMPOUND (see the module comment): what travels with the call.
/// Fixed size (at most 48 bytes: it is moved with every `Job`), `Copy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Bytes of COMPOUND4res this call may need (≤ `MAX_REPLY`).
    pub reply: usize,
    /// The operation count the COMPOUND declares.
    pub nops: u32,
    /// Argument offsets of the first `OPS_MAX` operations walked.
    at: [u32; OPS_MAX],
    /// Their numbers (every operation `skip` knows is below 2^16, RFC 8881 §16.2.1).
    code: [u16; OPS_MAX],
    /// Operations walked (all skipped), saturating: only `≤ OPS_MAX` is asked.
    walked: u8,
    pub kind: Kind,
    /// A READ, WRITE or COMMIT is among the first `DATA_OPS` operations.
    moves_data: bool,
}

const _: () = assert!(std::mem::size_of::<Plan>() <= 48);
// The numbers `Plan::code` keeps: OP_ILLEGAL is the largest RFC 8881 defines.
const _: () = assert!(OP_ILLEGAL <= u16::MAX as u32);

/// Operations `moves_data` looks at (as `stats::data_jobs`).
const DATA_OPS: usize = 64;

impl Plan {
    /// Walks COMPOUND4args once (RFC 8881 §16.2.1).
    pub fn of(args: &[u8]) -> Plan {
        walk(args, &mut |_| {})
    }

    /// `of`, with the DDP-eligible items the walk passed (RFC 8267 §6.1), for the
    /// reactor's RPC-over-RDMA check of a call's reduced chunks.
    pub fn with_ddp(args: &[u8]) -> (Plan, Eligibles) {
        let mut ddp = Eligibles::default();
        let plan = walk(args, &mut |e| ddp.push(e));
        (plan, ddp)
    }

    /// `of`, with the cache shape (`SEQUENCE, PUTFH, GETATTR|READ`) decoded by the
    /// same pass: `fast::shape` of the plan, without a second decode.
    pub fn with_shape(args: &[u8]) -> (Plan, Option<Shape<'_>>) {
        match lane::walk::<true>(args, &mut |_| {}) {
            Some(got) => got,
            None => {
                let plan = general(args, &mut |_| {});
                (plan, super::fast::shape(args, &plan))
            }
        }
    }

    fn empty() -> Plan {
        Plan {
            reply: BASE_REPLY,
            nops: 0,
            at: [0; OPS_MAX],
            code: [0; OPS_MAX],
            walked: 0,
            kind: Kind::Other,
            moves_data: false,
        }
    }

    /// The fast shape of an exactly walked COMPOUND.
    fn shape(&self) -> Kind {
        let code = |i: usize| u32::from(self.code[i]);
        if self.nops < 3 || code(0) != OP_SEQUENCE || code(1) != OP_PUTFH {
            return Kind::Other;
        }
        match (self.nops, code(2)) {
            (3, OP_GETATTR) => Kind::Getattr,
            (3, OP_READ) => Kind::Read,
            (3, OP_READ_PLUS) => Kind::ReadPlus,
            (3, OP_WRITE) => Kind::Write,
            (3, OP_COMMIT) => Kind::Commit,
            (4, OP_WRITE) if code(3) == OP_GETATTR => Kind::WriteGetattr,
            (3, OP_READDIR) => Kind::Readdir,
            (4, OP_LOOKUP) if code(3) == OP_GETATTR => Kind::Lookup,
            (5, OP_LOOKUP) if code(3) == OP_GETFH && code(4) == OP_GETATTR => Kind::LookupFh,
            _ => Kind::Other,
        }
    }

    /// Operation `i` of those whose offsets are kept (`None` past `ops().len()`).
    pub fn op(&self, i: usize) -> Option<Op> {
        (i < (self.walked as usize).min(OPS_MAX)).then(|| Op {
            code: u32::from(self.code[i]),
            at: self.at[i],
        })
    }

    /// The operations walked whose offsets are kept (at most `OPS_MAX`).
    pub fn ops(&self) -> impl ExactSizeIterator<Item = Op> + '_ {
        (0..(self.walked as usize).min(OPS_MAX)).map(|i| Op {
            code: u32::from(self.code[i]),
            at: self.at[i],
        })
    }

    /// The argument offset of kept operation `i` (the fast shapes' decoders, which
    /// know from `kind` how many there are).
    pub(super) fn at(&self, i: usize) -> usize {
        self.at[i] as usize
    }

    /// Whether the COMPOUND is `SEQUENCE, PUTFH, READDIR`: a worker's page may teach
    /// the reactor's listings (`fast_dirs`).
    pub fn lists(&self) -> bool {
        self.kind == Kind::Readdir
    }

    /// Whether the COMPOUND is `SEQUENCE, PUTFH, LOOKUP[, GETFH], GETATTR`: a
    /// worker's LOOKUP may teach the reactor's names (`fast_names`).
    pub fn looks_up(&self) -> bool {
        matches!(self.kind, Kind::Lookup | Kind::LookupFh)
    }

    /// Whether more operations were walked than the plan keeps.
    pub fn long(&self) -> bool {
        self.walked as usize > OPS_MAX
    }

    /// Whether a READ, WRITE or COMMIT is among the first `DATA_OPS` operations (up
    /// to the first one the walk cannot skip, included).
    pub fn moves_data(&self) -> bool {
        self.moves_data
    }

    /// Keeps operation `i` (walked, skipped whole).
    fn keep(&mut self, i: usize, op: u32, at: u32) {
        if i < OPS_MAX {
            self.code[i] = op as u16;
            self.at[i] = at;
        }
        self.walked = self.walked.saturating_add(1);
    }
}

/// The walk: the plan, each eligible item given to `ddp` as it is passed. The
/// common shapes take the fast lane (`lane`: one cursor pass, nothing looked up per
/// operation); anything else, or anything the lane is not sure of, the general walk.
#[inline(always)]
fn walk(args: &[u8], ddp: &mut impl FnMut(Eligible)) -> Plan {
    match lane::walk::<false>(args, ddp) {
        Some((plan, _)) => plan,
        None => general(args, ddp),
    }
}

/// Whether the fast lane answers for `args` (tests: the lane is not silently idle).
#[cfg(test)]
pub(super) fn lane_takes(args: &[u8]) -> bool {
    lane::walk::<true>(args, &mut |_| {}).is_some()
}

/// The general walk: every operation through `skip::op_args`.
pub(super) fn general(args: &[u8], ddp: &mut impl FnMut(Eligible)) -> Plan {
    let mut p = Plan::empty();
    let mut r = XdrReader::new(args);
    let Ok(tag_len) = r.u32() else { return p };
    let tag_len = tag_len as usize;
    if tag_len > TAG_LIMIT || r.skip(tag_len.next_multiple_of(4)).is_err() {
        return p;
    }
    let (Ok(minor), Ok(n)) = (r.u32(), r.u32()) else {
        return p;
    };
    p.nops = n;
    let mut size = Sizing::new();
    let mut walked = 0usize;
    // Every operation takes at least its 4-byte number: the count cannot exceed
    // the bytes left, whatever the peer claims.
    let n = (n as usize).min(r.remaining() / 4);
    for i in 0..n {
        let Ok(op) = r.u32() else { break };
        let (at, start) = (r.position() as u32, r.clone());
        let sized = size.sizes(op, i as u32);
        p.moves_data |= i < DATA_OPS && matches!(op, OP_READ | OP_WRITE | OP_COMMIT);
        // An operation has at most one eligible item; it counts once the operation's
        // arguments are all there (an item in a cut operation is not reachable).
        let mut item = None;
        let skipped = skip::op_args(op, &mut r, &mut |r| {
            let len = r.clone().u32()?;
            item = Some(Eligible {
                data_at: (r.position() + 4) as u32,
                len,
            });
            Ok(())
        });
        if skipped.is_err() {
            // The rest is unknown: its reply size is not guessed (READ and READDIR
            // results clamp to the buffer).
            size.unknown |= sized;
            break;
        }
        if sized {
            size.ask(op, start);
        }
        if let Some(e) = item {
            ddp(e);
        }
        p.keep(i, op, at);
        walked += 1;
    }
    p.reply = size.reply();
    let exact = walked == p.nops as usize && r.remaining() == 0;
    if exact && super::fast_minor(minor) && tag_len <= TAG_MAX {
        p.kind = p.shape();
    }
    p
}

/// The reply bound, accumulated operation by operation.
struct Sizing {
    /// READ data and READDIR entries asked for.
    asked: usize,
    /// No later operation is sized (a session operation, or past `SIZED_MAX`).
    done: bool,
    /// An operation the walk could not skip while sizing.
    unknown: bool,
}

impl Sizing {
    fn new() -> Sizing {
        Sizing {
            asked: 0,
            done: false,
            unknown: false,
        }
    }

    /// Whether operation number `i` is sized (then its arguments must be skipped for
    /// the bound to be known).
    fn sizes(&mut self, op: u32, i: u32) -> bool {
        if i >= SIZED_MAX {
            self.done = true;
        }
        if matches!(
            op,
            // Session and client operations: the rest of the COMPOUND is not sized
            // (its READ and READDIR results clamp to the buffer).
            OP_EXCHANGE_ID
                | OP_CREATE_SESSION
                | OP_DESTROY_SESSION
                | OP_DESTROY_CLIENTID
                | OP_BIND_CONN_TO_SESSION
                | OP_BACKCHANNEL_CTL
        ) {
            self.done = true;
        }
        !self.done
    }

    /// Adds what a skipped READ or READDIR (arguments at `a`) asks for.
    fn ask(&mut self, op: u32, mut a: XdrReader) {
        let asked = match op {
            OP_READ | OP_READ_PLUS => a.skip(STATEID + 8).and_then(|_| a.u32()),
            OP_READDIR => a.skip(8 + 8 + 4).and_then(|_| a.u32()),
            // NFSv4.2: an xattr value (RFC 8276 §8.4.2) or a page of names (§8.4.4).
            OP_GETXATTR => Ok(crate::fs::v42::XATTR_MAX_VALUE as u32),
            OP_LISTXATTRS => a.skip(8).and_then(|_| a.u32()),
            // pNFS: a layout or a device address (bounded by `[pnfs]`'s limits,
            // `layout_ops::LAYOUT_MAX`), without shrinking the room other results have.
            OP_LAYOUTGET | OP_GETDEVICEINFO | OP_GETDEVICELIST => Ok(PNFS_REPLY as u32),
            _ => return,
        };
        // Skipped already: the count is there.
        if let Ok(n) = asked {
            self.asked = self.asked.saturating_add((n as usize).min(MAX_REPLY));
        }
    }

    /// Room for the data asked for plus headers, or a small reply without data; at
    /// least `UNKNOWN_REPLY` when an operation could not be skipped. A 1 MiB READ fits
    /// the pools' 1 MiB + 4 KiB class.
    fn reply(&self) -> usize {
        let known = if self.asked == 0 {
            BASE_REPLY
        } else {
            self.asked.saturating_add(DATA_OVERHEAD).min(MAX_REPLY)
        };
        if self.unknown {
            known.max(UNKNOWN_REPLY)
        } else {
            known
        }
    }
}
