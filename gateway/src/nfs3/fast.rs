//! NFSv3 GETATTR, READ, READDIRPLUS and LOOKUP answered on the reactor from its read
//! cache (docs/architecture.md §5): the arguments are decoded here, the cache answers
//! with a neutral outcome (`cache::AttrHit`, `cache::ReadHit`, `cache::LookupHit`) and
//! `outcome` encodes it.
//! A call the cache cannot answer leaves nothing written and goes to a worker.

use super::dirpage::{plus_fit, put_plus_ok, MIN_ENTRY};
use super::outcome::{put_getattr_ok, put_read_head, put_read_ok};
use super::proto::put_post_op_attr;
use super::MAX_DIR_REPLY;
use crate::cache::dirs::Listings;
use crate::cache::{Generations, PageRead, ReadCache, Request};
use crate::export::Exports;
use crate::outcome::Ask;
use crate::outcome::{EntryAsk, ListAsk};
use engine::xdr::{XdrReader, XdrResult, XdrWriter};
use nfs_wire::nfs3::{
    NFSPROC3_CREATE as CREATE, NFSPROC3_GETATTR as GETATTR, NFSPROC3_LOOKUP as LOOKUP,
    NFSPROC3_MKDIR as MKDIR, NFSPROC3_READ as READ, NFSPROC3_READDIRPLUS as READDIRPLUS,
};
use std::ops::Range;

/// The arguments of a GETATTR (RFC 1813 §3.3.1) or READ (§3.3.6) call; `None` for
/// any other procedure or arguments that do not decode (a worker answers them).
pub fn parse(proc_: u32, args: &[u8]) -> Option<Ask<'_>> {
    let mut r = XdrReader::new(args);
    let fh = r.opaque_var(crate::fs::FH_MAX).ok()?;
    let read = match proc_ {
        GETATTR => None,
        READ => Some((r.u64().ok()?, r.u32().ok()?)),
        _ => return None,
    };
    Some(Ask { fh, read })
}

/// GETATTR3res from the cache; false (nothing written) on a miss.
pub fn getattr(
    cache: &mut ReadCache,
    gens: &Generations,
    exports: &Exports,
    req: &Request,
    out: &mut XdrWriter,
) -> bool {
    let Some(hit) = cache.attrs(gens, exports, req) else {
        cache.missed();
        return false;
    };
    let start = out.position();
    if put_getattr_ok(out, &hit.attr).is_err() {
        out.rewind(start);
        return false;
    }
    cache.answered(req.fh, hit.stale);
    true
}

/// READ3res from the cache, the data copied from its pages: where the data went in
/// the writer's buffer (the reply's DDP item, RFC 8267 §4); `None` (nothing
/// written) unless every page of the range is cached.
pub fn read(
    cache: &mut ReadCache,
    gens: &Generations,
    exports: &Exports,
    req: &Request,
    (offset, count): (u64, u32),
    out: &mut XdrWriter,
) -> Option<Range<usize>> {
    let Some(hit) = cache.read(gens, exports, req, offset, count) else {
        cache.missed();
        return None;
    };
    let Ok(data) = put_read_ok(out, &hit.done, |dst| cache.copy_read(&hit, dst)) else {
        cache.missed();
        return None;
    };
    cache.answered(req.fh, hit.stale);
    Some(data)
}

/// `read` without the copy: `out` gets READ3res up to the data's length word, and the
/// result names the cache pages holding the data (registered under `lkey`), each
/// pinned until `ReadCache::unpin` of its tag.
pub fn read_pages(
    cache: &mut ReadCache,
    gens: &Generations,
    exports: &Exports,
    req: &Request,
    (offset, count): (u64, u32),
    lkey: u32,
    out: &mut XdrWriter,
) -> Option<Box<PageRead>> {
    let Some(hit) = cache.read(gens, exports, req, offset, count) else {
        cache.missed();
        return None;
    };
    let start = out.position();
    if put_read_head(out, &hit.done).is_err() {
        out.rewind(start);
        cache.missed();
        return None;
    }
    cache.answered(req.fh, hit.stale);
    Some(cache.pin_read(&hit, lkey))
}

/// The arguments of a READDIRPLUS call (RFC 1813 §3.3.17) the reactor's listings
/// may answer; `None` for any other procedure or arguments that do not decode.
pub fn parse_listing(proc_: u32, args: &[u8]) -> Option<ListAsk<'_>> {
    if proc_ != READDIRPLUS {
        return None;
    }
    let mut r = XdrReader::new(args);
    let fh = r.opaque_var(crate::fs::FH_MAX).ok()?;
    let cookie = r.u64().ok()?;
    let verf = r.opaque_fixed(8).ok()?.try_into().ok()?;
    let dircount = r.u32().ok()? as usize;
    let maxcount = r.u32().ok()? as usize;
    Some(ListAsk {
        fh,
        cookie,
        verf,
        dircount,
        maxcount,
    })
}

/// READDIRPLUS3res from the reactor's listings (`cache_dirs`): the page a worker
/// would answer — as many entries after the cookie as maxcount allows, which the
/// listing must hold unless it reaches the directory's end — with every entry shown
/// unchanged since it was listed; false (nothing written) otherwise, and errors
/// (a bad cookie or verifier, a count too small) are the worker's to answer.
pub fn readdirplus(
    cache: &mut ReadCache,
    gens: &Generations,
    exports: &Exports,
    req: &Request,
    ask: &ListAsk,
    out: &mut XdrWriter,
) -> bool {
    let start = out.position();
    let done = (|| {
        let limit = ask.maxcount.min(MAX_DIR_REPLY).min(out.remaining());
        // More entries than `limit` holds (`dirpage::MIN_ENTRY` each at least), so
        // a reply that shows them all reaches the run's end.
        let max = limit / MIN_ENTRY + 1;
        let hit = cache.listing(gens, exports, req, ask.cookie, ask.verf, max)?;
        let (fit, used) = plus_fit(hit.entries.iter().map(|(e, _)| e), limit);
        let all = fit == hit.entries.len();
        if used > limit || (fit == 0 && !all) || (all && !hit.eof) {
            return None;
        }
        let used = &hit.entries[..fit];
        if !Listings::current(gens, used) {
            return None;
        }
        let eof = all && hit.eof;
        let revalidate = hit.revalidate;
        put_plus_ok(out, hit.dir, &hit.verf, used.iter().map(|(e, _)| e), eof).ok()?;
        Some(revalidate)
    })();
    let Some(revalidate) = done else {
        out.rewind(start);
        cache.missed();
        return false;
    };
    if revalidate {
        cache.revalidate_listing(req.fh);
    }
    cache.answered_listing();
    true
}

/// READDIRPLUS3args (RFC 1813 §3.3.17) of directory `dir`'s first page into `w`, and
/// READDIRPLUS: cookie 0, a zero verifier, the largest reply a worker encodes. A
/// revalidation of the reactor's run behind an NFSv4.1 READDIR it answered (the runs
/// are shared by both versions, and an NFSv3 call takes no session slot).
pub fn first_page(dir: &[u8], w: &mut XdrWriter) -> XdrResult<u32> {
    w.opaque_var(dir)?;
    w.u64(0)?;
    w.opaque_fixed(&[0; 8])?;
    let max = MAX_DIR_REPLY as u32;
    w.u32(max)?;
    w.u32(max)?;
    Ok(READDIRPLUS)
}

/// The directory entry (diropargs3, RFC 1813 §3.3.3) a LOOKUP, CREATE (§3.3.8) or
/// MKDIR (§3.3.9) names; `None` for any other procedure, arguments that do not
/// decode, or a name the cache never holds (`cache::names::cacheable`).
pub fn parse_entry(proc_: u32, args: &[u8]) -> Option<EntryAsk<'_>> {
    let makes = match proc_ {
        LOOKUP => false,
        CREATE | MKDIR => true,
        _ => return None,
    };
    let mut r = XdrReader::new(args);
    let dir = r.opaque_var(crate::fs::FH_MAX).ok()?;
    let name = r.opaque_var(crate::cache::names::NAME_MAX).ok()?;
    crate::cache::names::cacheable(name).then_some(EntryAsk { dir, name, makes })
}

/// LOOKUP3res (RFC 1813 §3.3.3) from the cache's names: the object's handle and
/// attributes, and the directory's attributes, when the cache answers (the caller
/// may search the directory, the name's entry and both attributes current); false
/// (nothing written) otherwise: the worker answers, with its errors (NOENT, ACCES,
/// NAMETOOLONG...).
pub fn lookup(
    cache: &mut ReadCache,
    gens: &Generations,
    exports: &Exports,
    req: &Request,
    name: &[u8],
    out: &mut XdrWriter,
) -> bool {
    let Some(hit) = cache.lookup(gens, exports, req, name) else {
        cache.missed();
        return false;
    };
    let start = out.position();
    let put = (|| {
        out.u32(0)?;
        out.opaque_var(hit.obj.bytes())?;
        put_post_op_attr(out, Some(&hit.attr))?;
        put_post_op_attr(out, Some(&hit.dir))
    })();
    if put.is_err() {
        out.rewind(start);
        cache.missed();
        return false;
    }
    cache.answered_lookup(hit.obj.bytes(), hit.stale);
    true
}
