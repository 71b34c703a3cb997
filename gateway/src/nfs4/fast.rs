//! The reactor's NFSv4.1 fast path: the two COMPOUNDs clients send most,
//! `SEQUENCE, PUTFH, GETATTR` and `SEQUENCE, PUTFH, READ`, answered from the reactor's
//! read cache when — and only when — everything is ordinary (a new request on an idle
//! slot of a live session, no sa_cachethis, the file cached and the caller admitted,
//! attributes that come from the cached `fs::Attr`, a READ stateid the state tables
//! accept, the whole range cached). Anything else returns `false` and the call goes to
//! a worker, which owns every error case.
//!
//! The reply is the one the worker would write, byte for byte (same encoders:
//! `session_ops::put_sequence_ok`, `attrs::put_fattr`), and the slot bookkeeping is the
//! worker's (RFC 8881 §2.10.6.1): the slot's seqid advances through
//! `Session::use_slot`, the lease is renewed (`Clients::renew`), and the reply is kept
//! in the slot's reply cache when it fits ca_maxresponsesize_cached, as
//! `compound::compound` keeps it, so a retransmission gets the same bytes.
//!
//! Workers fill the cache from the same shapes (`observe`, and what the executing
//! GETATTR or READ noted: `note_attr`, `note_read_data`).

use super::attrs::{self, Bitmap, Env, Obj};
use super::ops::{OP_GETATTR, OP_PUTFH, OP_READ, OP_READ_PLUS, OP_SEQUENCE};
use super::plan::{Kind, Plan};
use super::session_ops;
use super::status::NFS4_OK;
use super::v42_ops::NFS4_CONTENT_DATA;
use crate::cache::{self, Generations, ReadCache};
use crate::export::Exports;
use crate::fs::Attr;
use crate::state::sessions::{ReqPrint, SlotUse};
use crate::state::stateid::Stateid;
use crate::state::State;
use engine::rpc::Cred;
use engine::xdr::{XdrReader, XdrResult, XdrWriter};
use std::net::IpAddr;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

/// A counter on its own cache line (reactors never share one).
#[repr(align(64))]
struct Padded(AtomicU64);

/// Counter shards (reactor index modulo this).
const SHARDS: usize = 16;

/// COMPOUNDs answered by the fast path, per reactor shard (diagnostics and tests; the
/// per-reactor cache hit counters count them too).
static ANSWERED: [Padded; SHARDS] = [const { Padded(AtomicU64::new(0)) }; SHARDS];

/// Counts a COMPOUND reactor `reactor` answered by the fast path.
pub fn count_answer(reactor: usize) {
    ANSWERED[reactor % SHARDS].0.fetch_add(1, Ordering::Relaxed);
}

/// COMPOUNDs answered by the fast path since start, all reactors.
pub fn answered() -> u64 {
    ANSWERED.iter().map(|c| c.0.load(Ordering::Relaxed)).sum()
}

/// Longest tag the fast path takes (longer ones are legal: the worker answers them).
pub const TAG_MAX: usize = super::plan::TAG_MAX;

/// Attributes the fast path answers: those encoded from the cached `fs::Attr` and the
/// handle, and constants. Not LEASE_TIME or MAXFILESIZE (server settings the reactor
/// does not hold) nor the FSSTAT ones (storage calls).
pub const FAST_ATTRS: Bitmap = Bitmap::of(&[
    attrs::SUPPORTED_ATTRS,
    attrs::TYPE,
    attrs::FH_EXPIRE_TYPE,
    attrs::CHANGE,
    attrs::SIZE,
    attrs::LINK_SUPPORT,
    attrs::SYMLINK_SUPPORT,
    attrs::NAMED_ATTR,
    attrs::FSID,
    attrs::UNIQUE_HANDLES,
    attrs::RDATTR_ERROR,
    attrs::ACLSUPPORT,
    attrs::CANSETTIME,
    attrs::CASE_INSENSITIVE,
    attrs::CASE_PRESERVING,
    attrs::CHOWN_RESTRICTED,
    attrs::FILEHANDLE,
    attrs::FILEID,
    attrs::HOMOGENEOUS,
    attrs::MAXLINK,
    attrs::MAXNAME,
    attrs::MAXREAD,
    attrs::MAXWRITE,
    attrs::MODE,
    attrs::NO_TRUNC,
    attrs::NUMLINKS,
    attrs::OWNER,
    attrs::OWNER_GROUP,
    attrs::RAWDEV,
    attrs::SPACE_USED,
    attrs::TIME_ACCESS,
    attrs::TIME_DELTA,
    attrs::TIME_METADATA,
    attrs::TIME_MODIFY,
    attrs::MOUNTED_ON_FILEID,
    attrs::FS_LAYOUT_TYPES,
    attrs::SUPPATTR_EXCLCREAT,
]);

/// The last operation of a recognised COMPOUND.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Last<'a> {
    Getattr(Bitmap),
    Read {
        stateid: Stateid,
        offset: u64,
        count: u32,
        /// READ_PLUS (RFC 7862 §15.10): the data as one read_plus_content4 segment.
        plus: bool,
    },
    /// READDIR4args (RFC 8881 §18.23.1), answered from the listings (`fast_dirs`).
    Readdir(super::fast_dirs::DirAsk),
    /// `LOOKUP [, GETFH], GETATTR` (RFC 8881 §18.15, §18.8, §18.7), answered from
    /// the names (`fast_names`): the component (at most `cache::names::NAME_MAX`
    /// bytes as decoded; the checks are `fast_names`'), whether GETFH is asked, and
    /// the GETATTR bitmap (no word past the third).
    Lookup {
        name: &'a [u8],
        getfh: bool,
        want: Bitmap,
    },
}

/// A `SEQUENCE, PUTFH, GETATTR|READ` COMPOUND (minor version 1 or 2).
#[derive(Debug, Clone, Copy)]
pub struct Shape<'a> {
    pub tag: &'a [u8],
    pub sessionid: [u8; 16],
    pub seqid: u32,
    pub slot: u32,
    pub cachethis: bool,
    pub fh: &'a [u8],
    pub last: Last<'a>,
    /// The false-retry print (`state::sessions::ReqPrint`).
    pub print: ReqPrint,
    /// The COMPOUND's minor version (1 or 2, `nfs4::fast_minor`).
    pub minor: u32,
}

/// A bounds-checked big-endian cursor over COMPOUND4args (the XDR rules of
/// `engine::xdr::XdrReader`, inlined: the fast path parses every call it sees).
pub(super) struct Cur<'a> {
    pub(super) b: &'a [u8],
    pub(super) at: usize,
}

impl<'a> Cur<'a> {
    #[inline(always)]
    pub(super) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let s = self.b.get(self.at..end)?;
        self.at = end;
        Some(s)
    }

    #[inline(always)]
    pub(super) fn u32(&mut self) -> Option<u32> {
        let s = self.take(4)?;
        Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }

    #[inline(always)]
    pub(super) fn u64(&mut self) -> Option<u64> {
        Some((u64::from(self.u32()?) << 32) | u64::from(self.u32()?))
    }

    /// An XDR bool: exactly 0 or 1.
    #[inline(always)]
    pub(super) fn bool(&mut self) -> Option<bool> {
        match self.u32()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }

    /// Fixed-length opaque of `n` bytes and its padding.
    #[inline(always)]
    pub(super) fn fixed(&mut self, n: usize) -> Option<&'a [u8]> {
        let data = self.take(n)?;
        self.take((4 - n % 4) % 4)?;
        Some(data)
    }

    /// Variable-length opaque of at most `max` bytes.
    #[inline(always)]
    pub(super) fn var(&mut self, max: usize) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        if n > max {
            return None;
        }
        self.fixed(n)
    }
}

/// Recognises the shape in arguments not planned yet (tests, tools): `shape` of
/// their plan, decoded by the plan's walk (`Plan::with_shape`).
pub fn parse(args: &[u8]) -> Option<Shape<'_>> {
    Plan::with_shape(args).1
}

/// The shape of a COMPOUND whose plan (`plan::Plan`, RFC 8881 §16.2.1) is
/// `SEQUENCE, PUTFH, GETATTR|READ` exactly (tag up to `TAG_MAX`, minor version 1 or 2,
/// nothing after): its fields, decoded at the offsets the plan keeps — a handle up to
/// `FH4_MAX`, an XDR bool sa_cachethis, a GETATTR bitmap with no word beyond the
/// third. Anything else is `None`.
pub fn shape<'a>(args: &'a [u8], plan: &Plan) -> Option<Shape<'a>> {
    let [seq, putfh, last] = match plan.kind {
        Kind::Getattr
        | Kind::Read
        | Kind::ReadPlus
        | Kind::Readdir
        | Kind::Lookup
        | Kind::LookupFh => [plan.at(0), plan.at(1), plan.at(2)],
        _ => return None,
    };
    let mut r = Cur { b: args, at: 0 };
    let tag = r.var(TAG_MAX)?;
    let minor = r.u32()?;
    r.at = seq;
    let mut sessionid = [0u8; 16];
    sessionid.copy_from_slice(r.take(16)?);
    let (seqid, slot, _highest) = (r.u32()?, r.u32()?, r.u32()?);
    let cachethis = r.bool()?;
    let print = ReqPrint::of(args.len(), args.get(r.at..)?);
    r.at = putfh;
    let fh = r.var(super::FH4_MAX)?;
    r.at = last;
    let last = match plan.kind {
        Kind::Getattr => {
            let mut x = XdrReader::new(args.get(r.at..)?);
            match attrs::get_bitmap(&mut x).ok()? {
                (b, false) => Last::Getattr(b),
                _ => return None,
            }
        }
        Kind::Readdir => Last::Readdir(super::fast_dirs::DirAsk::decode(args.get(r.at..)?)?),
        Kind::Lookup | Kind::LookupFh => {
            let name = r.var(crate::cache::names::NAME_MAX)?;
            let getfh = plan.kind == Kind::LookupFh;
            let at = plan.at(if getfh { 4 } else { 3 });
            let mut x = XdrReader::new(args.get(at..)?);
            match attrs::get_bitmap(&mut x).ok()? {
                (want, false) => Last::Lookup { name, getfh, want },
                _ => return None,
            }
        }
        _ => {
            let seqid = r.u32()?;
            let mut other = [0u8; 12];
            other.copy_from_slice(r.take(12)?);
            Last::Read {
                stateid: Stateid { seqid, other },
                offset: r.u64()?,
                count: r.u32()?,
                plus: plan.kind == Kind::ReadPlus,
            }
        }
    };
    Some(Shape {
        tag,
        sessionid,
        seqid,
        slot,
        cachethis,
        fh,
        last,
        print,
        minor,
    })
}

/// What the reactor needs to answer from its cache.
pub struct View<'a> {
    pub cache: &'a mut ReadCache,
    pub gens: &'a Generations,
    pub exports: &'a Exports,
    pub state: &'a State,
}

/// Answers the COMPOUND in `args` (COMPOUND4args) into `w` (COMPOUND4res, after the
/// RPC header the caller wrote) when everything is ordinary; `false` otherwise, with
/// no slot touched (the caller drops `w`'s buffer and hands the call to a worker).
pub fn answer(v: &mut View, client: IpAddr, cred: &Cred, args: &[u8], w: &mut XdrWriter) -> bool {
    match parse(args) {
        Some(a) => answer_parsed(v, client, cred, &a, args.len(), w).is_some(),
        None => false,
    }
}

/// `answer` for a COMPOUND the caller already parsed (`args_len`: the length of its
/// COMPOUND4args, for ca_maxrequestsize): the reactor parses once. `Some` when
/// answered, with where the READ's data lies in `w`'s buffer (the READ's outcome,
/// for the RPC-over-RDMA write chunk, RFC 8267 §6.4.1; `None` for GETATTR).
pub fn answer_parsed(
    v: &mut View,
    client: IpAddr,
    cred: &Cred,
    a: &Shape,
    args_len: usize,
    w: &mut XdrWriter,
) -> Option<Option<Range<usize>>> {
    if let Last::Readdir(ask) = &a.last {
        return super::fast_dirs::answer(v, client, cred, a, ask, args_len, w).map(|_| None);
    }
    if let Last::Lookup { name, getfh, want } = a.last {
        return super::fast_names::answer(v, client, cred, a, (name, getfh, &want), args_len, w)
            .map(|_| None);
    }
    answer_into(v, client, cred, a, args_len, None, w).map(|(_, data)| data)
}

/// `answer_parsed` for a READ over RPC-over-RDMA whose first write chunk has room
/// for the data (RFC 8267 §6.4.1): `w` gets the COMPOUND4res up to the READ data's
/// length word and the data stays in the returned cache pages (registered under
/// `lkey`, pinned), to go by RDMA Write. The slot reply cache keeps the whole
/// COMPOUND4res, data inline, as the worker's. `None` → a worker; `Some(None)`: no
/// data to send (a READ at or past the end), `w` holds the whole reply.
pub fn answer_pages(
    v: &mut View,
    client: IpAddr,
    cred: &Cred,
    a: &Shape,
    args_len: usize,
    lkey: u32,
    w: &mut XdrWriter,
) -> Option<Option<Box<crate::cache::PageRead>>> {
    // A READ_PLUS comes here over TCP only (its data is no DDP-eligible item, RFC
    // 8267 §4.2): the caller, which knows the transport, checks that.
    if !matches!(a.last, Last::Read { .. }) {
        return None;
    }
    answer_into(v, client, cred, a, args_len, Some(lkey), w).map(|(pages, _)| pages)
}

/// SEQUENCE's checks (RFC 8881 §18.46.3), as `session_ops::sequence_first`, for
/// every COMPOUND the reactor answers (`answer_into`, `fast_dirs`, `fast_names`):
/// the session and its slot count when the call is the slot's next and within the
/// fore channel's limits (`nops` operations: more than ca_maxoperations is the
/// worker's NFS4ERR_TOO_MANY_OPS); `None` → a worker answers.
pub(super) fn sequence_checks(
    v: &View,
    a: &Shape,
    args_len: usize,
    nops: u32,
) -> Option<(std::sync::Arc<crate::state::sessions::Session>, u32)> {
    let s = v.state.clients.session(&a.sessionid)?;
    let nslots = s.slots();
    if a.slot >= nslots
        || s.fore.max_ops < nops
        || args_len > s.fore.max_request as usize
        || !s.is_next(a.slot, a.seqid)
    {
        return None;
    }
    Some((s, nslots))
}

/// The fast path proper; `pages`: the lkey when the READ data is to stay in the
/// cache pages. `Some((page list or None, where READ data copied into `w` lies))`
/// when answered.
#[allow(clippy::type_complexity)]
fn answer_into(
    v: &mut View,
    client: IpAddr,
    cred: &Cred,
    a: &Shape,
    args_len: usize,
    pages: Option<u32>,
    w: &mut XdrWriter,
) -> Option<(Option<Box<crate::cache::PageRead>>, Option<Range<usize>>)> {
    if a.cachethis {
        return None;
    }
    if a.minor > v.state.clients.limits.max_minor {
        return None; // not served: the worker answers NFS4ERR_MINOR_VERS_MISMATCH
    }
    // READ_PLUS is NFSv4.2's: under minor version 1 the worker answers OP_ILLEGAL.
    let plus = matches!(a.last, Last::Read { plus: true, .. });
    if plus && a.minor < 2 {
        return None;
    }
    let (s, nslots) = sequence_checks(v, a, args_len, 3)?;
    let req = cache::Request {
        fh: a.fh,
        client,
        cred,
    };
    if let Last::Getattr(want) = a.last {
        // Unsupported attributes are left out by both paths (RFC 8881 §18.7.3);
        // write-only ones (NFS4ERR_INVAL) are not in FAST_ATTRS.
        if !want
            .and(&attrs::SUPPORTED_ANY)
            .minus(&FAST_ATTRS)
            .is_empty()
        {
            return None;
        }
        // The reactor encodes 4.1's supported_attrs: a 4.2 client's, or any when the
        // pNFS attributes are supported too, goes to a worker.
        let more = a.minor >= 2 || v.state.layouts.devices().is_some();
        if more && want.has(attrs::SUPPORTED_ATTRS) {
            return None;
        }
    }
    let read = matches!(a.last, Last::Read { .. });
    let hit = v
        .cache
        .admit_v4(v.gens, v.exports, &req, read, s.clientid)?;
    let attr = hit.attr;
    if let Last::Read { stateid, .. } = a.last {
        // READ's stateid rules (RFC 8881 §18.22.3, §8.2), as `io_ops::read`: the
        // CURRENT stateid is unset after PUTFH (the worker answers BAD_STATEID).
        if stateid == Stateid::CURRENT {
            return None;
        }
        let st = v
            .state
            .delegations
            .check_io(s.clientid, &stateid, attr.fileid, false)
            .unwrap_or_else(|| {
                v.state
                    .opens
                    .check_io(s.clientid, &stateid, attr.fileid, false)
            });
        if st.is_err() {
            return None;
        }
    }
    // Lease renewal (RFC 8881 §8.3); an expired client goes to the worker, which
    // purges it (state dir I/O) and answers BADSESSION.
    let flags = v.state.clients.renew_if_live(&s)?;
    let flags = session_ops::status_flags(v.state, &s, flags);
    let start = w.position();
    // `ext`: READ data bytes left in the cache pages (zero copy), 0 when inline.
    let (ext, read) = match encode(v, a, &hit, &s, nslots, flags, pages.is_some(), w) {
        Ok(Some(got)) => got,
        _ => return None,
    };
    let head = w.position() - start;
    let len = head.checked_add(ext)?.checked_add((4 - ext % 4) % 4)?;
    if len > s.fore.max_response as usize {
        // The worker answers NFS4ERR_REP_TOO_BIG.
        return None;
    }
    // Claim the slot now; a worker that took it meanwhile wins (the call goes to a
    // worker, which sees a retransmission or a busy slot).
    let mut claim = match s.use_slot(a.slot, a.seqid, a.print) {
        Ok(SlotUse::New(c)) => c,
        _ => return None,
    };
    // Where the READ's data lie from the COMPOUND4res's first byte: copied data is
    // the last item written (`put_read_result`), then its XDR pad; a zero-copy READ's
    // follows its length word in the slot's copy (`append_read`).
    // READ_PLUS's data is inline and no READ result: nothing to locate.
    let res_data = read.as_ref().filter(|_| !plus).map(|r| {
        let (n, head) = (r.done.n, w.position() - start);
        let at = if ext == 0 {
            head - (4 - n % 4) % 4 - n
        } else {
            head
        };
        at..at + n
    });
    if let Some(r) = &res_data {
        claim.set_data(Some(r.clone()).into());
    }
    // Kept in the slot's reply cache (RFC 8881 §2.10.6.1.3) by refilling the slot's
    // previous buffer: no allocation per reply. A zero-copy READ's data is copied
    // there from the pages: the cache holds the whole COMPOUND4res.
    if len > s.fore.max_response_cached as usize {
        claim.finish(None);
    } else if ext == 0 {
        claim.finish_copy(&w.written()[start..]);
    } else if let Some(r) = &read {
        let (cache, written) = (&*v.cache, w.written());
        claim.finish_with(|buf| {
            buf.extend_from_slice(&written[start..]);
            append_read(cache, r, buf);
        });
    }
    if matches!(a.last, Last::Getattr(_)) {
        v.cache.note_hit();
    }
    // Copied data lies in the reply buffer (zero-copy data leaves from the pages).
    let data = match (res_data, ext) {
        (Some(r), 0) => Some(r.start + start..r.end + start),
        _ => None,
    };
    let pinned = match pages {
        Some(lkey) if ext > 0 => read.as_ref().map(|r| v.cache.pin_read(r, lkey)),
        _ => None,
    };
    Some((pinned, data))
}

/// COMPOUND4res of a recognised COMPOUND: `Ok(Some((bytes of READ data not written,
/// the READ's cache hit)))` (0 unless `zero_copy`, when `w` ends at the data's length
/// word); `Ok(None)` when the READ range is not cached.
#[allow(clippy::too_many_arguments)]
fn encode(
    v: &mut View,
    a: &Shape,
    hit: &cache::V4Hit,
    s: &crate::state::sessions::Session,
    nslots: u32,
    flags: u32,
    zero_copy: bool,
    w: &mut XdrWriter,
) -> XdrResult<Option<(usize, Option<cache::ReadHit>)>> {
    NFS4_OK.put(w)?;
    w.opaque_var(a.tag)?;
    w.u32(3)?;
    w.u32(OP_SEQUENCE)?;
    session_ops::put_sequence_ok(w, s, a.seqid, a.slot, nslots, flags)?;
    w.u32(OP_PUTFH)?;
    NFS4_OK.put(w)?;
    match a.last {
        Last::Getattr(want) => {
            w.u32(OP_GETATTR)?;
            NFS4_OK.put(w)?;
            let env = Env {
                lease_s: 0,
                max_file_size: 0,
                fsstat: None,
                v42: None,
                pnfs_blksize: None,
            };
            attrs::put_fattr(w, &want, &Obj::from_attr(&hit.attr, a.fh), &env)?;
            Ok(Some((0, None)))
        }
        Last::Read {
            offset,
            count,
            plus,
            ..
        } => {
            w.u32(if plus { OP_READ_PLUS } else { OP_READ })?;
            NFS4_OK.put(w)?;
            // Counted as a hit or a miss here, answered or not (the slot claim
            // may still send the call to a worker).
            let got = v.cache.read_admitted(hit, offset, count).filter(|r| {
                put_read_result(w, v.cache, r, plus.then_some(offset), zero_copy).is_ok()
            });
            match got {
                Some(r) => {
                    v.cache.note_hit();
                    Ok(Some((if zero_copy { r.done.n } else { 0 }, Some(r))))
                }
                None => {
                    v.cache.missed();
                    Ok(None)
                }
            }
        }
        // Answered by `fast_dirs` and `fast_names` (`answer_parsed`), never here.
        Last::Readdir(_) | Last::Lookup { .. } => Ok(None),
    }
}

/// READ4resok (RFC 8881 §18.22.2) after its status: eof, then the data; or, when
/// `plus` holds the READ_PLUS offset, READ_PLUS4resok (RFC 7862 §15.10.2): eof, then
/// the range as one data segment at that offset (none past the end). The data is
/// copied from the cache pages or, when `zero_copy`, only its length is written (the
/// data then goes from the pages). The cache keeps bytes, not extents: a hole in a
/// READ_PLUS range goes as zeros in the data, which §15.10.3 allows (the worker's
/// READ_PLUS, which asks the file model for extents, reports it as a hole). Nothing
/// written (`w` rewound) when it does not fit.
fn put_read_result(
    w: &mut XdrWriter,
    cache: &ReadCache,
    r: &cache::ReadHit,
    plus: Option<u64>,
    zero_copy: bool,
) -> XdrResult<()> {
    let start = w.position();
    let ok = (|| {
        w.bool(r.done.eof)?;
        if let Some(offset) = plus {
            if r.done.n == 0 {
                return w.u32(0);
            }
            w.u32(1)?;
            w.u32(NFS4_CONTENT_DATA)?;
            w.u64(offset)?;
        }
        w.u32(r.done.n as u32)?;
        if zero_copy {
            return Ok(());
        }
        let dst = w.reserve_opaque_fixed(r.done.n)?;
        cache.copy_read(r, dst);
        Ok(())
    })();
    if ok.is_err() {
        w.rewind(start);
    }
    ok
}

/// Appends the data of `r` and its XDR padding to `dst` (a slot's reply cache).
fn append_read(cache: &ReadCache, r: &cache::ReadHit, dst: &mut Vec<u8>) {
    let (at, n) = (dst.len(), r.done.n);
    dst.resize(at + n + (4 - n % 4) % 4, 0);
    cache.copy_read(r, &mut dst[at..at + n]);
}

/// The handle of a recognised COMPOUND, and its READ's offset and count.
pub type Observed<'a> = (&'a [u8], Option<(u64, u32)>);

/// What a worker's COMPOUND of a recognised shape (by its plan) may teach the reactor
/// cache: the handle, and for a READ its offset and count.
pub fn observe<'a>(args: &'a [u8], plan: &Plan) -> Option<Observed<'a>> {
    let a = shape(args, plan)?;
    // A worker's READ_PLUS notes its data only when the reply is one data segment
    // (`v42_ops::read_plus`).
    let read = match a.last {
        Last::Getattr(_) | Last::Readdir(_) => None,
        Last::Read { offset, count, .. } => Some((offset, count)),
        // A LOOKUP teaches the names (`looked_up`), not its directory's attributes.
        Last::Lookup { .. } => return None,
    };
    Some((a.fh, read))
}

/// The directory handle and component of a worker's `SEQUENCE, PUTFH, LOOKUP[,
/// GETFH], GETATTR` COMPOUND (by its plan): the entry its LOOKUP may teach the
/// reactor's names (`fast_names`, as an NFSv3 LOOKUP teaches them).
pub fn looked_up<'a>(args: &'a [u8], plan: &Plan) -> Option<(&'a [u8], &'a [u8])> {
    if !plan.looks_up() {
        return None;
    }
    match shape(args, plan)? {
        Shape {
            fh,
            last: Last::Lookup { name, .. },
            ..
        } => Some((fh, name)),
        _ => None,
    }
}

/// The client whose session a worker's COMPOUND of a recognised shape runs in (0:
/// none or unknown), so the holder of a write delegation on its file still teaches
/// the cache what only it is answered from (`cache::Generations::stamp_as`).
pub fn client(state: &crate::state::State, args: &[u8], plan: &Plan) -> u64 {
    shape(args, plan)
        .and_then(|a| state.clients.session(&a.sessionid))
        .map_or(0, |s| s.clientid)
}

/// Notes, for the reactor cache fill, the attributes a GETATTR or READ fetched from
/// the file model (`call::note_learned`, as NFSv3's procedures do; the READ's data is
/// added by the COMPOUND loop once the READ succeeded, `note_read_data`).
pub(super) fn note_attr(a: &Attr) {
    crate::call::note_learned(crate::call::Learned {
        attr: *a,
        data: None,
    });
}

/// Adds to this thread's note where a successful READ's data lies in the reply
/// buffer (`at`, `len` bytes).
pub(super) fn note_read_data(at: usize, len: usize) {
    if let Some(mut l) = crate::call::take_learned() {
        l.data = Some((at, len));
        crate::call::note_learned(l);
    }
}

/// Drops this thread's note: the COMPOUND failed, its reply teaches nothing.
pub(super) fn forget() {
    let _ = crate::call::take_learned();
}
