//! NFSv4.1 READDIR on the reactor: `SEQUENCE, PUTFH, READDIR` (RFC 8881 §18.23)
//! answered from the reactor's listings (`cache_dirs`, docs/architecture.md §5
//! "Listings"), the same neutral entries NFSv3 READDIRPLUS is answered from.
//!
//! A worker's READDIR of that shape asking attributes notes the page it listed
//! (`dir_ops::readdir`, `call::note_listing`, with "." and ".." as the file model
//! lists them from cookie 0, which NFSv4 does not show; listed ahead of the reply,
//! `FileModel::plus_count`, so a first listing's later pages are answered here) and
//! the directory's attributes; the reactor keeps it
//! under the run rules of `cache_dirs` (invalidated by what executed: the directory's
//! and each shown entry's generation stamp). A run a NFSv3 page started is not
//! used here: only a NFSv4.1 page checked its entries for other exports' roots
//! (RFC 8881 §7.7: such an entry shows the export's root attributes, `ListingHit::v4`).
//! A run the gateway's own changes keep complete (a directory a MKDIR or an NFSv4.1
//! CREATE made, filled by CREATE, MKDIR or a creating OPEN: `cache_dirs::Listings::
//! start_empty`, `made`) answers here too, so bench md's first listing of each
//! directory is the reactor's: its created entries' attributes come from the
//! attribute table under their current stamps and must be the model's own
//! (`Fill::exact`: an NFSv4.1 OPEN's, read after its COMPOUND, `server::worker::
//! learned_made`; never an NFSv3 reply's fattr3), else the worker answers; and since
//! nothing checked a created name against other exports' roots, only on a server
//! with one export (`Listings::lookup`).
//!
//! Only the ordinary case is answered (as `fast`'s GETATTR: a new request on an idle
//! slot, no sa_cachethis, attributes `fast::FAST_ATTRS` encodes from `fs::Attr` and
//! the handle, every shown entry with its attributes); everything else — cookies 1
//! and 2 (NFS4ERR_BAD_COOKIE), a cookie or verifier the run does not know (the
//! worker answers NFS4ERR_NOT_SAME for a stale one), a count too small
//! (NFS4ERR_TOOSMALL), a run that ends before the reply is full — goes to a worker.
//! Cookies and the verifier are the file model's, so a listing resumes exactly on
//! either executor. The slot bookkeeping is `fast`'s (RFC 8881 §2.10.6.1): the seqid
//! advanced through `Session::use_slot`, the lease renewed, the reply kept in the
//! slot's reply cache when it fits ca_maxresponsesize_cached.

use super::attrs::{self, Bitmap, Env, Obj};
use super::fast::{Shape, View, FAST_ATTRS};
use super::ops::{OP_PUTFH, OP_READDIR, OP_SEQUENCE};
use super::session_ops;
use super::status::NFS4_OK;
use crate::cache::dirs::Listings;
use crate::cache::{self, ListingHit};
use crate::fs::access::is_dot;
use crate::state::sessions::{Session, SlotUse};
use engine::rpc::Cred;
use engine::xdr::{XdrReader, XdrResult, XdrWriter};
use std::net::IpAddr;

/// READDIR4args (RFC 8881 §18.23.1): the fields the reactor answers from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirAsk {
    pub cookie: u64,
    pub verf: [u8; 8],
    pub dircount: u32,
    pub maxcount: u32,
    pub want: Bitmap,
}

impl DirAsk {
    /// READDIR4args at the start of `args`; `None` when they do not decode or the
    /// bitmap asks for an attribute past the third word (the worker answers).
    pub(super) fn decode(args: &[u8]) -> Option<DirAsk> {
        let mut r = XdrReader::new(args);
        let cookie = r.u64().ok()?;
        let verf = r.opaque_fixed(8).ok()?.try_into().ok()?;
        let dircount = r.u32().ok()?;
        let maxcount = r.u32().ok()?;
        match attrs::get_bitmap(&mut r).ok()? {
            (want, false) => Some(DirAsk {
                cookie,
                verf,
                dircount,
                maxcount,
                want,
            }),
            _ => None,
        }
    }
}

/// Bytes of READDIR4resok besides its entries: verifier, list end, eof (as
/// `dir_ops::readdir` bounds them).
const FIXED: usize = 8 + 4 + 4;

/// Whether the reactor may encode `want` for listed entries: as `fast`'s GETATTR
/// (RFC 8881 §18.7.3: unsupported attributes are left out by both executors).
fn encodable(v: &View, minor: u32, want: &Bitmap) -> bool {
    if want.is_empty()
        || !want
            .and(&attrs::SUPPORTED_ANY)
            .minus(&FAST_ATTRS)
            .is_empty()
    {
        return false;
    }
    let more = minor >= 2 || v.state.layouts.devices().is_some();
    !(more && want.has(attrs::SUPPORTED_ATTRS))
}

/// Answers `SEQUENCE, PUTFH, READDIR` from the listings into `w` (after the RPC
/// header); `None` with no slot touched otherwise (a worker answers).
pub(super) fn answer(
    v: &mut View,
    client: IpAddr,
    cred: &Cred,
    a: &Shape,
    ask: &DirAsk,
    args_len: usize,
    w: &mut XdrWriter,
) -> Option<()> {
    if a.cachethis || a.minor > v.state.clients.limits.max_minor {
        return None;
    }
    // Reserved cookies (RFC 8881 §18.23.3) are the worker's NFS4ERR_BAD_COOKIE.
    if ask.cookie == 1 || ask.cookie == 2 || !encodable(v, a.minor, &ask.want) {
        return None;
    }
    let (s, nslots) = super::fast::sequence_checks(v, a, args_len, 3)?;
    let req = cache::Request {
        fh: a.fh,
        client,
        cred,
    };
    let start = w.position();
    let done = (|| {
        // More entries than maxcount holds (an entry4 takes 28 bytes at least:
        // marker, cookie, a one-byte name, an empty bitmap and attribute list),
        // beside "." and "..", which are not shown.
        let max = ask.maxcount as usize / 28 + 3;
        let hit = v
            .cache
            .listing_v4(v.gens, v.exports, &req, (ask.cookie, ask.verf, max))?;
        if !hit.v4 {
            return None;
        }
        let flags = v.state.clients.renew_if_live(&s)?;
        let flags = session_ops::status_flags(v.state, &s, flags);
        let used = encode(w, a, &s, nslots, flags, ask, &hit).ok()??;
        Listings::current_shown(v.gens, &hit.entries[..used]).then_some(hit.revalidate)
    })();
    let len = w.position() - start;
    let revalidate = done == Some(true);
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
    // Answered from a run past its TTL: a worker lists the directory's first page
    // behind the reply (`cache_dirs::ListingHit::revalidate`,
    // `dispatch::listing_revalidation`).
    if revalidate {
        v.cache.revalidate_listing(a.fh);
    }
    v.cache.answered_listing();
    Some(())
}

/// COMPOUND4res of `SEQUENCE, PUTFH, READDIR` from `hit`: `Ok(Some(n))` when the
/// reply shows the entries of `hit.entries[..n]` (dots left out) — as many as
/// `maxcount` allows, which the run must hold unless it reaches the directory's end;
/// `Ok(None)` when the worker must answer (an entry without attributes, a count too
/// small, a run too short).
#[allow(clippy::too_many_arguments)]
fn encode(
    w: &mut XdrWriter,
    a: &Shape,
    s: &Session,
    nslots: u32,
    flags: u32,
    ask: &DirAsk,
    hit: &ListingHit,
) -> XdrResult<Option<usize>> {
    NFS4_OK.put(w)?;
    w.opaque_var(a.tag)?;
    w.u32(3)?;
    w.u32(OP_SEQUENCE)?;
    session_ops::put_sequence_ok(w, s, a.seqid, a.slot, nslots, flags)?;
    w.u32(OP_PUTFH)?;
    NFS4_OK.put(w)?;
    w.u32(OP_READDIR)?;
    // The bound `dir_ops::readdir` cuts a page at: maxcount, within the buffer.
    let limit = (ask.maxcount as usize).min(w.remaining().saturating_sub(4));
    if limit < FIXED {
        return Ok(None);
    }
    NFS4_OK.put(w)?;
    w.opaque_fixed(&hit.verf)?;
    let body = w.position();
    let env = Env {
        lease_s: 0,
        max_file_size: 0,
        fsstat: None,
        v42: None,
        pnfs_blksize: None,
    };
    // Each entry's handle is copied only when FILEHANDLE is asked (as the worker's).
    let handles = ask.want.has(attrs::FILEHANDLE);
    let (mut used, mut shown) = (0, 0);
    for (i, (e, _)) in hit.entries.iter().enumerate() {
        if is_dot(&e.name) {
            used = i + 1;
            continue;
        }
        // Gone since it was listed: the worker's RDATTR_ERROR or failure.
        let Some((attr, fh)) = &e.plus else {
            return Ok(None);
        };
        let at = w.position();
        let fh = if handles {
            fh.as_bytes().to_vec()
        } else {
            Vec::new()
        };
        let o = Obj::from_attr(attr, fh);
        let put = (|| {
            w.bool(true)?;
            w.u64(e.cookie)?;
            w.string(&e.name)?;
            attrs::put_fattr(w, &ask.want, &o, &env)
        })();
        if put.is_err() || w.position() - body + FIXED > limit {
            w.rewind(at);
            break;
        }
        used = i + 1;
        shown += 1;
    }
    let all = used == hit.entries.len();
    if (shown == 0 && !all) || (all && !hit.eof) {
        return Ok(None);
    }
    w.bool(false)?;
    w.bool(all && hit.eof)?;
    Ok(Some(used))
}
