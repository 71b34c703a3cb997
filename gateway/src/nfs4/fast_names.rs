//! NFSv4.1 stat of a name on the reactor: `SEQUENCE, PUTFH, LOOKUP, GETATTR` (bench
//! md's stat) and `SEQUENCE, PUTFH, LOOKUP, GETFH, GETATTR` (the Linux client's stat
//! of a name it has not cached), RFC 8881 §18.15, §18.8, §18.7, answered from the
//! reactor's names (`cache_names`, docs/architecture.md §5 "Names") and attribute
//! table, the entries NFSv3's LOOKUP is answered from.
//!
//! A hit is the worker's reply byte for byte for the same state (same encoders:
//! `session_ops::put_sequence_ok`, `attrs::put_fattr`) and only the ordinary case is
//! answered, as `fast`'s GETATTR: a new request on an idle slot of a live session,
//! no sa_cachethis, a GETATTR bitmap `fast::FAST_ATTRS` encodes from `fs::Attr` and
//! the handle. The LOOKUP is answered under the checks the worker's LOOKUP makes
//! (`file_ops::lookup`): export admission and squashing (loaded per call), the
//! directory a directory the caller may search (X, `fs::access`), the component
//! valid (`check_component`: not empty, at most `NAME_MAX` bytes, UTF-8, not "." or
//! "..", no '/' or NUL; the worker answers NFS4ERR_INVAL, NAMETOOLONG, BADNAME), and
//! the entry no other export's root (RFC 8881 §7.7: the worker's LOOKUP crosses
//! there): the entry was taught by an NFSv4.1 LOOKUP, which notes no crossing, or
//! the server has a single export. The entry is current under its name's stamp
//! (`ChangeObserver::name`: a REMOVE, RENAME or LINK of the name, from either
//! protocol, sends the next LOOKUP to a worker), the object's attributes current
//! under its stamp, fresh (no stale-while-revalidate: NFSv4 GETATTR never serves
//! expired attributes here) and the model's own (`Fill::exact`). Anything else —
//! NOENT included, there are no negative entries — goes to a worker with no slot
//! touched. The slot bookkeeping is `fast`'s (RFC 8881 §2.10.6.1).

use super::attrs::{self, Bitmap, Env, Obj};
use super::fast::{sequence_checks, Shape, View, FAST_ATTRS};
use super::ops::{
    OP_ACCESS, OP_CLOSE, OP_COMMIT, OP_CREATE, OP_GETATTR, OP_GETFH, OP_LOOKUP, OP_OPEN, OP_PUTFH,
    OP_SEQUENCE, OP_WRITE,
};
use super::plan::Plan;
use super::session_ops;
use super::status::NFS4_OK;
use crate::cache::{self, LookupHit};
use crate::state::sessions::{Session, SlotUse};
use engine::rpc::Cred;
use engine::xdr::{XdrReader, XdrResult, XdrWriter};
use std::net::IpAddr;

/// The directory handle and component of a worker's `SEQUENCE, PUTFH, OPEN ...`
/// COMPOUND whose OPEN creates by name (CLAIM_NULL, RFC 8881 §18.16), or of its
/// `SEQUENCE, PUTFH, CREATE[, GETFH][, GETATTR]` making a directory (NF4DIR, §18.4):
/// the entry it may teach the names when it creates the file (bench md's and the
/// Linux client's create: a v4-only workload's stat then finds the name), as NFSv3's
/// CREATE and MKDIR; a directory's listing then starts empty on the reactor
/// (`server::worker::learned_empty`) and its parent's run takes the name.
pub fn made<'a>(args: &'a [u8], plan: &Plan) -> Option<(&'a [u8], &'a [u8])> {
    let code = |i| plan.op(i).map(|o| o.code);
    if (code(0), code(1)) != (Some(OP_SEQUENCE), Some(OP_PUTFH)) {
        return None;
    }
    // Every operation walked, and none after the OPEN or CREATE that could name or
    // change another entry: the worker's note (`call::take_named`) carries no name,
    // so a REMOVE of this name and a second OPEN creating another one in the same
    // COMPOUND would otherwise pair this name with that file.
    let all_walked = plan.ops().len() == plan.nops as usize;
    let after = |ok: fn(u32) -> bool| plan.ops().skip(3).all(|o| ok(o.code));
    let mut r = XdrReader::new(args.get(plan.op(2)?.at as usize..)?);
    let name = match code(2)? {
        OP_OPEN if all_walked && after(opens_quietly) => super::state_ops::creates_name(&mut r)?,
        OP_CREATE if all_walked && after(|c| matches!(c, OP_GETFH | OP_GETATTR)) => {
            super::dir_ops::creates_dir_name(&mut r)?
        }
        _ => return None,
    };
    let fh = XdrReader::new(args.get(plan.op(1)?.at as usize..)?)
        .opaque_var(super::FH4_MAX)
        .ok()?;
    crate::cache::names::cacheable(name).then_some((fh, name))
}

/// The operations a creating OPEN may be followed by in a COMPOUND that teaches its
/// name (`made`): none names or changes another entry.
fn opens_quietly(code: u32) -> bool {
    matches!(
        code,
        OP_GETFH | OP_GETATTR | OP_ACCESS | OP_WRITE | OP_CLOSE | OP_COMMIT
    )
}

/// Whether the worker's LOOKUP would take `name` as a component of the directory
/// (`file_ops::check_component`, RFC 8881 §14.5) and the names may hold it
/// (`cache::names::cacheable`).
fn valid(name: &[u8]) -> bool {
    crate::cache::names::cacheable(name) && std::str::from_utf8(name).is_ok()
}

/// Whether the reactor may encode `want` for the object (as `fast`'s GETATTR: RFC
/// 8881 §18.7.3, unsupported attributes are left out by both executors; 4.1's
/// supported_attrs only).
fn encodable(v: &View, minor: u32, want: &Bitmap) -> bool {
    if !want
        .and(&attrs::SUPPORTED_ANY)
        .minus(&FAST_ATTRS)
        .is_empty()
    {
        return false;
    }
    let more = minor >= 2 || v.state.layouts.devices().is_some();
    !(more && want.has(attrs::SUPPORTED_ATTRS))
}

/// Answers `SEQUENCE, PUTFH, LOOKUP[, GETFH], GETATTR` from the names into `w`
/// (after the RPC header); `None` with nothing written and no slot touched
/// otherwise (a worker answers).
pub(super) fn answer(
    v: &mut View,
    client: IpAddr,
    cred: &Cred,
    a: &Shape,
    (name, getfh, want): (&[u8], bool, &Bitmap),
    args_len: usize,
    w: &mut XdrWriter,
) -> Option<()> {
    if a.cachethis || a.minor > v.state.clients.limits.max_minor {
        return None;
    }
    if !valid(name) || !encodable(v, a.minor, want) {
        return None;
    }
    let nops = if getfh { 5 } else { 4 };
    let (s, nslots) = sequence_checks(v, a, args_len, nops)?;
    let req = cache::Request {
        fh: a.fh,
        client,
        cred,
    };
    let start = w.position();
    let done = (|| {
        let hit = v.cache.lookup(v.gens, v.exports, &req, name)?;
        // Another export's root is the worker's crossing (RFC 8881 §7.7), and which
        // export a client crosses into depends on its address (`pseudo::visible`):
        // a name another client's LOOKUP taught may be an export root this one
        // would cross into, and a reload may add an export. So NFSv4 answers from
        // the names only on a server with one export.
        if hit.stale || !hit.exact || v.exports.all().len() >= 2 {
            return None;
        }
        let flags = v.state.clients.renew_if_live(&s)?;
        let flags = session_ops::status_flags(v.state, &s, flags);
        encode(w, a, &s, (nslots, flags), nops, getfh, want, &hit).ok()
    })();
    let len = w.position() - start;
    if done.is_none() || len > s.fore.max_response as usize {
        w.rewind(start);
        v.cache.missed();
        return None;
    }
    // Claim the slot now; a worker that took it meanwhile wins.
    let claim = match s.use_slot(a.slot, a.seqid, a.print) {
        Ok(SlotUse::New(c)) => c,
        _ => {
            w.rewind(start);
            v.cache.missed();
            return None;
        }
    };
    // Kept in the slot's reply cache (RFC 8881 §2.10.6.1.3), as `fast` keeps it.
    if len > s.fore.max_response_cached as usize {
        claim.finish(None);
    } else {
        claim.finish_copy(&w.written()[start..]);
    }
    v.cache.answered_lookup(&[], false);
    Some(())
}

/// COMPOUND4res of `SEQUENCE, PUTFH, LOOKUP[, GETFH], GETATTR` from `hit`.
#[allow(clippy::too_many_arguments)]
fn encode(
    w: &mut XdrWriter,
    a: &Shape,
    s: &Session,
    (nslots, flags): (u32, u32),
    nops: u32,
    getfh: bool,
    want: &Bitmap,
    hit: &LookupHit,
) -> XdrResult<()> {
    NFS4_OK.put(w)?;
    w.opaque_var(a.tag)?;
    w.u32(nops)?;
    w.u32(OP_SEQUENCE)?;
    session_ops::put_sequence_ok(w, s, a.seqid, a.slot, nslots, flags)?;
    w.u32(OP_PUTFH)?;
    NFS4_OK.put(w)?;
    w.u32(OP_LOOKUP)?;
    NFS4_OK.put(w)?;
    let fh = hit.obj.bytes();
    if getfh {
        w.u32(OP_GETFH)?;
        NFS4_OK.put(w)?;
        w.opaque_var(fh)?;
    }
    w.u32(OP_GETATTR)?;
    NFS4_OK.put(w)?;
    let env = Env {
        lease_s: 0,
        max_file_size: 0,
        fsstat: None,
        v42: None,
        pnfs_blksize: None,
    };
    attrs::put_fattr(w, want, &Obj::from_attr(&hit.attr, fh), &env).map(|_| ())
}
