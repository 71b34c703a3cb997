//! The passes the plan (`nfs4::plan`) replaced, kept as test oracles: the reply-size
//! scan (`scan::scan`), the RFC 8267 §6.1 walk of `ulb::v4` and the io_uring shape
//! parser (`fast_io::parse`), as they were before the one walk. The plan must agree
//! with them on every corpus (`skip_prop_tests`, `fast_io_tests`).

use crate::nfs4::attrs::{self, Bitmap};
use crate::nfs4::fast_io::{IoCall, IoOp, FILE_SYNC4};
use crate::nfs4::ops::*;
use crate::nfs4::plan::{BASE_REPLY, MAX_REPLY, UNKNOWN_REPLY};
use crate::nfs4::skip::{self, opaque, STATEID};
use crate::state::sessions::ReqPrint;
use crate::state::stateid::Stateid;
use engine::rpcrdma::responder::Reduced;
use engine::xdr::{padded, XdrError, XdrReader};

const DATA_OVERHEAD: usize = 2048;

/// The old `scan::scan(args).reply`.
pub fn scan(args: &[u8]) -> usize {
    let mut r = XdrReader::new(args);
    let (Ok(_tag), Ok(_minor), Ok(n)) = (r.opaque_var(1024), r.u32(), r.u32()) else {
        return BASE_REPLY;
    };
    let mut asked = 0usize;
    let size = |asked: usize| {
        if asked == 0 {
            BASE_REPLY
        } else {
            asked.saturating_add(DATA_OVERHEAD).min(MAX_REPLY)
        }
    };
    for _ in 0..n.min(256) {
        let Ok(op) = r.u32() else { break };
        if matches!(
            op,
            OP_EXCHANGE_ID
                | OP_CREATE_SESSION
                | OP_DESTROY_SESSION
                | OP_DESTROY_CLIENTID
                | OP_BIND_CONN_TO_SESSION
                | OP_BACKCHANNEL_CTL
        ) {
            break;
        }
        let mut a = r.clone();
        if skip::op_args(op, &mut r, &mut |_| Ok(())).is_err() {
            return size(asked).max(UNKNOWN_REPLY);
        }
        let count = match op {
            OP_READ => a.skip(STATEID + 8).and_then(|_| a.u32()),
            OP_READDIR => a.skip(8 + 8 + 4).and_then(|_| a.u32()),
            // Issue 31: NFSv4.2's sized replies, as the plan gained them (the old scan
            // predates 4.2): READ_PLUS like READ, an xattr value, a page of names.
            OP_READ_PLUS => a.skip(STATEID + 8).and_then(|_| a.u32()),
            OP_GETXATTR => Ok(crate::fs::v42::XATTR_MAX_VALUE as u32),
            OP_LISTXATTRS => a.skip(8).and_then(|_| a.u32()),
            // pNFS's layouts and device addresses, as the plan gained them.
            OP_LAYOUTGET | OP_GETDEVICEINFO => Ok(crate::nfs4::plan::PNFS_REPLY as u32),
            _ => continue,
        };
        match count {
            Ok(c) => asked = asked.saturating_add((c as usize).min(MAX_REPLY)),
            Err(_) => return size(asked).max(UNKNOWN_REPLY),
        }
    }
    size(asked)
}

/// The old `ulb::v4` walk: whether the reduced items of the record `rec` (arguments
/// at `at`) are exactly eligible items.
pub fn ddp_walk(rec: &[u8], at: usize, reduced: &[Reduced]) -> bool {
    let mut r = XdrReader::new(rec);
    if r.skip(at).is_err() {
        return false;
    }
    let (Ok(()), Ok(_), Ok(n)) = (opaque(&mut r), r.u32(), r.u32()) else {
        return false;
    };
    let n = (n as usize).min(r.remaining() / 4);
    let mut next = 0;
    for _ in 0..n {
        if next >= reduced.len() {
            return true;
        }
        let Ok(op) = r.u32() else { return false };
        let ok = skip::op_args(op, &mut r, &mut |r| {
            let data_at = r.position() + 4;
            let declared = r.clone().u32()? as usize;
            if let Some(red) = reduced.get(next) {
                if red.position as usize == data_at {
                    let sent = red.len as usize;
                    if sent != declared && sent != padded(declared) {
                        return Err(XdrError::Short);
                    }
                    next += 1;
                }
            }
            Ok(())
        });
        if ok.is_err() {
            return false;
        }
        if next < reduced.len() && (reduced[next].position as usize) < r.position() {
            return false;
        }
    }
    next >= reduced.len()
}

/// The old `fast_io::parse`.
pub fn io_parse(args: &[u8]) -> Option<IoCall> {
    let mut r = XdrReader::new(args);
    let at = |r: &XdrReader| args.len() - r.remaining();
    let tag_len = r.u32().ok()? as usize;
    if tag_len > crate::nfs4::fast::TAG_MAX {
        return None;
    }
    let tag = at(&r)..at(&r) + tag_len;
    r.skip(tag_len.next_multiple_of(4)).ok()?;
    let minor = r.u32().ok()?;
    let nops = r.u32().ok()?;
    if !crate::nfs4::fast_minor(minor) || !(3..=4).contains(&nops) || r.u32().ok()? != OP_SEQUENCE {
        return None;
    }
    let mut sessionid = [0u8; 16];
    sessionid.copy_from_slice(r.opaque_fixed(16).ok()?);
    let (seqid, slot, _highest) = (r.u32().ok()?, r.u32().ok()?, r.u32().ok()?);
    let cachethis = r.bool().ok()?;
    let print = ReqPrint::of(args.len(), r.rest());
    if r.u32().ok()? != OP_PUTFH {
        return None;
    }
    let fh_len = r.u32().ok()? as usize;
    if fh_len > crate::nfs4::FH4_MAX {
        return None;
    }
    let fh = at(&r)..at(&r) + fh_len;
    r.skip(fh_len.next_multiple_of(4)).ok()?;
    let op = match (r.u32().ok()?, nops) {
        (OP_READ, 3) => IoOp::Read {
            stateid: Stateid::decode(&mut r).ok()?,
            offset: r.u64().ok()?,
            count: r.u32().ok()?,
        },
        (OP_WRITE, _) => {
            let stateid = Stateid::decode(&mut r).ok()?;
            let offset = r.u64().ok()?;
            let stable = r.u32().ok()?;
            if stable > FILE_SYNC4 {
                return None;
            }
            let len = r.u32().ok()?;
            if len == 0 || len as usize > crate::limits::MAX_IO {
                return None;
            }
            let data = (at(&r), len);
            r.skip((len as usize).next_multiple_of(4)).ok()?;
            let getattr: Option<Bitmap> = if nops == 4 {
                if r.u32().ok()? != OP_GETATTR {
                    return None;
                }
                match attrs::get_bitmap(&mut r).ok()? {
                    (b, false) => Some(b),
                    _ => return None,
                }
            } else {
                None
            };
            IoOp::Write {
                stateid,
                offset,
                stable,
                data,
                getattr,
            }
        }
        (OP_COMMIT, 3) => IoOp::Commit {
            offset: r.u64().ok()?,
            count: r.u32().ok()?,
        },
        _ => return None,
    };
    (r.remaining() == 0).then_some(IoCall {
        tag,
        sessionid,
        seqid,
        slot,
        cachethis,
        fh,
        op,
        nops,
        print,
        minor,
    })
}

/// The plan's fast lane (`plan::lane`) against the general walk it stands in for:
/// the same plan (`of`, `with_ddp`, `with_shape`), the same eligible items, and the
/// cache shape `fast::shape` decodes at the general plan's offsets. Returns whether
/// the lane answered (rather than handing the COMPOUND to the general walk).
pub fn lane_agrees(args: &[u8]) -> bool {
    use crate::nfs4::plan::{self, Plan, ELIGIBLE_MAX};
    let mut items = vec![];
    let general = plan::general(args, &mut |e| items.push(e));
    assert_eq!(Plan::of(args), general, "Plan::of against the general walk");
    let (p, ddp) = Plan::with_ddp(args);
    assert_eq!(p, general, "Plan::with_ddp against the general walk");
    let kept = items.len().min(ELIGIBLE_MAX);
    assert_eq!(ddp.eligible(), &items[..kept], "eligible items");
    assert_eq!(ddp.cut(), items.len() > ELIGIBLE_MAX);
    let (p, shape) = Plan::with_shape(args);
    assert_eq!(p, general, "Plan::with_shape against the general walk");
    let at_offsets = crate::nfs4::fast::shape(args, &general);
    assert_eq!(
        format!("{shape:?}"),
        format!("{at_offsets:?}"),
        "cache shape"
    );
    plan::lane_takes(args)
}
