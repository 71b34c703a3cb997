//! The plan's fast lane: the COMPOUNDs clients send most — `SEQUENCE, PUTFH` then
//! `GETATTR`, `READ`, `READ_PLUS`, `WRITE [, GETATTR]` or `COMMIT` (RFC 8881 §16.2.1, minor
//! version 1, tag up to `TAG_MAX`, nothing after the last operation) — walked in one
//! cursor pass that fills the plan and, for the cache shapes, decodes the fields
//! `fast` answers from, so nothing decodes them again at the plan's offsets.
//!
//! The lane is an optimisation of the general walk, never a second opinion: it
//! answers only when the general walk would make the same plan (same skipping rules,
//! `skip::op_args`, same reply bound, same kind) and the same shape as `fast::shape`
//! decodes at that plan's offsets; anything else — another operation, a count other
//! than 3 or 4, a handle past `FH4_MAX`, a cut or trailing byte — is `None` and the
//! general walk runs from the start. The tests check both on every generated
//! COMPOUND and mutation (`skip_prop_tests`, `fast_io_tests`).

use super::{Eligible, Kind, Plan, Sizing, OPS_MAX, TAG_MAX};

const _: () = assert!(OPS_MAX == 5, "the lane fills exactly five operations");
use crate::nfs4::attrs::Bitmap;
use crate::nfs4::fast::{Cur, Last, Shape};
use crate::nfs4::ops::{
    OP_COMMIT, OP_GETATTR, OP_PUTFH, OP_READ, OP_READ_PLUS, OP_SEQUENCE, OP_WRITE,
};
use crate::nfs4::skip::STATEID;
use crate::nfs4::FH4_MAX;
use crate::state::sessions::ReqPrint;
use crate::state::stateid::Stateid;

/// Longest bitmap4 `skip` accepts (words), as `attrs::get_bitmap`.
const BITMAP_MAX: u32 = 8;

/// The plan of a common shape (and, when `SHAPE`, its cache shape: `fast::shape` of
/// that plan); `None`: not a common shape, the general walk decides. The eligible
/// item (WRITE data, RFC 8267 §6.1) goes to `ddp` only once the whole COMPOUND was
/// walked, as the general walk gives it.
#[inline(always)]
pub(super) fn walk<'a, const SHAPE: bool>(
    args: &'a [u8],
    ddp: &mut impl FnMut(Eligible),
) -> Option<(Plan, Option<Shape<'a>>)> {
    let mut r = Cur { b: args, at: 0 };
    let tag = r.var(TAG_MAX)?;
    let minor = r.u32()?;
    if !crate::nfs4::fast_minor(minor) {
        return None;
    }
    let nops = r.u32()?;
    if !(3..=4).contains(&nops) || r.u32()? != OP_SEQUENCE {
        return None;
    }
    let seq_at = r.at;
    let head = Seq::decode(&mut r)?;
    let after_seq = r.at;
    if r.u32()? != OP_PUTFH {
        return None;
    }
    let fh_at = r.at;
    let fh = r.var(FH4_MAX)?;
    let op = r.u32()?;
    let op_at = r.at;
    let mut p = Plan::empty();
    p.nops = nops;
    p.walked = nops as u8;
    // As the general walk: READ_PLUS is not among the data operations it counts.
    p.moves_data = matches!(op, OP_READ | OP_WRITE | OP_COMMIT);
    let mut size = Sizing::new();
    let mut item = None;
    let mut last = None;
    // The fourth operation (WRITE's GETATTR), when there is one.
    let mut fourth = (0, 0);
    p.kind = match (op, nops) {
        (OP_GETATTR, 3) => {
            let (b, extra) = bitmap(&mut r)?;
            last = (!extra).then_some(Last::Getattr(b));
            Kind::Getattr
        }
        (OP_READ | OP_READ_PLUS, 3) => {
            let (stateid, offset, count) = (stateid(&mut r)?, r.u64()?, r.u32()?);
            size.asked = (count as usize).min(super::MAX_REPLY);
            let plus = op == OP_READ_PLUS;
            last = Some(Last::Read {
                stateid,
                offset,
                count,
                plus,
            });
            if plus {
                Kind::ReadPlus
            } else {
                Kind::Read
            }
        }
        (OP_COMMIT, 3) => {
            r.take(8 + 4)?;
            Kind::Commit
        }
        (OP_WRITE, _) => {
            r.take(STATEID + 8 + 4)?;
            let len_at = r.at;
            let len = r.u32()?;
            r.fixed(len as usize)?;
            item = Some(Eligible {
                data_at: (len_at + 4) as u32,
                len,
            });
            if nops == 3 {
                Kind::Write
            } else if r.u32()? == OP_GETATTR {
                fourth = (OP_GETATTR, r.at);
                bitmap(&mut r)?;
                Kind::WriteGetattr
            } else {
                return None;
            }
        }
        _ => return None,
    };
    if r.at != args.len() {
        return None;
    }
    // As `Plan::keep` does for each operation; the plan keeps them all (`OPS_MAX`:
    // the lane's shapes have at most four, the fifth stays as `Plan::empty` left it).
    p.code = [
        OP_SEQUENCE as u16,
        OP_PUTFH as u16,
        op as u16,
        fourth.0 as u16,
        0,
    ];
    p.at = [
        seq_at as u32,
        fh_at as u32,
        op_at as u32,
        fourth.1 as u32,
        0,
    ];
    p.reply = size.reply();
    if let Some(e) = item {
        ddp(e);
    }
    let shape = match (SHAPE, head.cachethis, last) {
        (true, Some(cachethis), Some(last)) => Some(Shape {
            tag,
            sessionid: head.sessionid,
            seqid: head.seqid,
            slot: head.slot,
            cachethis,
            fh,
            last,
            print: ReqPrint::of(args.len(), &args[after_seq..]),
            minor,
        }),
        _ => None,
    };
    Some((p, shape))
}

/// SEQUENCE4args (RFC 8881 §18.46.1); `cachethis` is `None` when sa_cachethis is no
/// XDR bool (the plan does not care, the cache shape is then refused).
struct Seq {
    sessionid: [u8; 16],
    seqid: u32,
    slot: u32,
    cachethis: Option<bool>,
}

impl Seq {
    #[inline(always)]
    fn decode(r: &mut Cur) -> Option<Seq> {
        let mut sessionid = [0u8; 16];
        sessionid.copy_from_slice(r.take(16)?);
        let (seqid, slot, _highest) = (r.u32()?, r.u32()?, r.u32()?);
        let cachethis = match r.u32()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        };
        Some(Seq {
            sessionid,
            seqid,
            slot,
            cachethis,
        })
    }
}

/// stateid4 (RFC 8881 §3.3.12).
#[inline(always)]
fn stateid(r: &mut Cur) -> Option<Stateid> {
    let seqid = r.u32()?;
    let mut other = [0u8; 12];
    other.copy_from_slice(r.take(12)?);
    Some(Stateid { seqid, other })
}

/// bitmap4 as `attrs::get_bitmap` reads it: the first three words, and whether a
/// later one is not zero; more than `BITMAP_MAX` words is `None` (`skip` refuses it).
#[inline(always)]
fn bitmap(r: &mut Cur) -> Option<(Bitmap, bool)> {
    let n = r.u32()?;
    if n > BITMAP_MAX {
        return None;
    }
    let mut b = Bitmap::default();
    let mut extra = false;
    for i in 0..n as usize {
        let v = r.u32()?;
        match b.0.get_mut(i) {
            Some(w) => *w = v,
            None => extra |= v != 0,
        }
    }
    Some((b, extra))
}
