//! Reactor-side RPC dispatch: decide, from the call header alone, whether a record is
//! dropped, rejected, answered inline, or handed to a backend worker.
//!
//! Rules (RFC 5531 §9): unparseable → drop; rpcvers ≠ 2 → MSG_DENIED RPC_MISMATCH;
//! bad credential → MSG_DENIED AUTH_ERROR; unknown program → PROG_UNAVAIL; a known
//! program at an unsupported version → PROG_MISMATCH with the supported range; NULL
//! answered inline. Procedure numbers and arguments are checked by the worker
//! (PROC_UNAVAIL, GARBAGE_ARGS), which owns the procedure tables.

use super::transport::Link;
use crate::cache::{self, ReadCache};
use crate::front::{Plan, V4Last, V4Shape, V4View, V4_PATHS as V4};
use crate::mount::{MOUNT_PROGRAM, MOUNT_V3};
use crate::stats::tenants::Seen;
use engine::mem::{Buf, Pools};
use engine::rpc::{self, Accept, CallError, CallHeader};
use engine::rpcrdma::responder::DdpList;
use engine::xdr::XdrWriter;
use nfs_wire::{NFS_PROGRAM, NFS_V3};
use std::net::SocketAddr;

/// Room reserved at the front of every reply for the TCP record mark.
pub const MARK: usize = 4;
/// Largest inline reply (rejections, NULL).
const INLINE_REPLY: usize = 64;

/// A call for a backend worker. Owns its record so WRITE payloads are used in place.
pub(crate) struct Job {
    pub reactor: usize,
    pub conn: Link,
    pub peer: SocketAddr,
    pub header: CallHeader,
    pub record: Buf,
    pub args_at: usize,
    /// A READ that continues the previous one on its file: read ahead for the cache.
    pub read_ahead: bool,
    /// A GETATTR the reactor made to revalidate expired cached attributes (see
    /// `revalidation`): only its cache fill goes back, never a reply.
    pub revalidate: bool,
    /// A call that may change a name or force the log (`backend::pending::changes`):
    /// counted in flight while queued or running, so a log force's leader waits for
    /// it to join (`DirSync::sync_gathered`). Decided once, here: the reactor counts
    /// in and the worker counts out the same calls.
    pub changes: bool,
    /// Arrival time and slot, for the reactor's statistics (set by the router).
    pub stat: crate::stats::CallStat,
    /// An NFSv4.1 COMPOUND's plan, made once here (`nfs4::plan`): its reply bound,
    /// fast-path shape and operations, so neither the io_uring executor nor the worker
    /// walks the arguments again.
    pub plan: Option<crate::front::Plan>,
    /// The reply bytes this call reserves in its TCP connection's budget while it is
    /// answered (`Router::route`), given back when dropped: as its reply is handed to
    /// the transport, or wherever the job is dropped unanswered.
    pub charge: Option<engine::tcp::Charge>,
}

/// What the reactor does with a record: a few words, moved by value on every call.
/// The `Job` of `Work` is not in it: `classify` builds it in the caller's slot, since
/// a `Job` (credential, COMPOUND plan: ~300 bytes) carried in the verdict was copied
/// on every call, cached answers included (+35 Ir per cached NFSv3 GETATTR,
/// docs/performance.md "Transport seam, second pass"), and boxing it would allocate.
pub(crate) enum Verdict {
    /// Nothing to answer.
    Drop,
    /// Send this reply now.
    Reply(Buf),
    /// Send this reply now; where its READ-class results' data lie (an NFSv3 READ's
    /// one, RFC 8267 §4; an NFSv4 COMPOUND's, §6.4.1), as the answer encoded them.
    ReplyLocated(Buf, DdpList),
    /// No buffer for an inline reply right now: retry the record later.
    Retry(Buf),
    /// Hand to a worker (or the io_uring executor) the `Job` `classify` left in its
    /// slot.
    Work,
    /// A REPLY record (msg_type 1): for the callback table (RFC 8881 §2.10.3.1).
    CallbackReply(u32, Buf),
    /// Send this READ reply (which ends at the data's length word) with its data
    /// written straight from these cache pages (RPC-over-RDMA write chunk, or TCP
    /// vectored send followed by the XDR padding).
    ReplyPages(Buf, Box<crate::cache::PageRead>),
}

/// Classifies one received record; a `Work` verdict leaves its job in `work`.
/// `write_room`: for an RPC-over-RDMA call, the room of its first write chunk (a
/// cached READ that fits is answered from the cache pages without a copy). Over TCP a
/// cached READ of at least `TCP_PAGES_MIN` bytes is sent from the cache pages too.
/// `planned`: the NFSv4 COMPOUND's plan when the RPC-over-RDMA check of its reduced
/// items made it (`ulb::check_call_planned`): the arguments are not walked again.
#[allow(clippy::too_many_arguments)]
pub(crate) fn classify(
    reactor: usize,
    conn: Link,
    peer: SocketAddr,
    record: Buf,
    pools: &Pools,
    hot: &mut Hot,
    write_room: Option<u64>,
    planned: Option<Plan>,
    work: &mut Option<Job>,
) -> Verdict {
    let zc = conn
        .zero_copy(write_room, hot.pages_lkey, hot.tcp_pages)
        .map(|p| ZeroCopy {
            room: p.room,
            lkey: p.lkey,
            min: if p.tcp { TCP_PAGES_MIN } else { 0 },
            tcp: p.tcp,
        });
    hot.seen = Seen::NONE;
    let (header, args_at) = match rpc::decode_call(&record) {
        Ok(h) => h,
        Err(CallError::Drop) => {
            tracing::debug!(%peer, len = record.len(), "dropping undecodable RPC record");
            return Verdict::Drop;
        }
        Err(CallError::NotACall { xid }) => {
            // msg_type REPLY: an answer to one of our callbacks (NFSv4.1 back
            // channel), matched by XID in the callback table, or dropped and counted.
            return Verdict::CallbackReply(xid, record);
        }
        Err(CallError::Deny { xid, why }) => {
            tracing::debug!(%peer, xid, ?why, "denying RPC call");
            return inline(record, pools, |w| rpc::write_denied(w, xid, why));
        }
    };
    let supported = match header.prog {
        NFS_PROGRAM => NFS_V3..=crate::nfs4::NFS_V4,
        MOUNT_PROGRAM => MOUNT_V3..=MOUNT_V3,
        _ => {
            tracing::debug!(%peer, prog = header.prog, "program unavailable");
            return inline(record, pools, |w| {
                rpc::write_accepted(w, header.xid, Accept::ProgUnavail)
            });
        }
    };
    if !supported.contains(&header.vers) {
        return inline(record, pools, |w| {
            rpc::write_accepted(
                w,
                header.xid,
                Accept::ProgMismatch {
                    low: *supported.start(),
                    high: *supported.end(),
                },
            )
        });
    }
    // NULL is answered here, unless a test hook sends it to a worker.
    if header.proc_ == 0 && !crate::supervise::hooks::on_reactor_null(header.xid) {
        return inline(record, pools, |w| {
            rpc::write_accepted(w, header.xid, Accept::Success)
        });
    }
    let mut read_ahead = false;
    let v3 = crate::front::is_v3(header.prog, header.vers);
    if v3 {
        if let Some(v) = from_cache(
            &header,
            &record[args_at..],
            peer,
            pools,
            hot,
            &mut read_ahead,
            zc,
        ) {
            // Answered from attributes past their TTL: one GETATTR refreshes them
            // behind the reply (stale-while-revalidate, `cache::STALE_MAX`).
            if let Some(fh) = hot.cache.take_revalidation() {
                if let Some(job) =
                    revalidation(reactor, conn, peer, &header, &record, args_at, &fh, pools)
                {
                    hot.revalidate.push(job);
                }
            }
            // Answered from a listing past its TTL: the directory's first page is
            // listed again behind the reply (`cache_dirs::ListingHit::revalidate`).
            if let Some(fh) = hot.cache.take_listing_revalidation() {
                if let Some(job) = listing_revalidation(reactor, conn, peer, &header, &fh, pools) {
                    hot.revalidate.push(job);
                }
            }
            return v;
        }
    }
    let planned =
        (header.prog == NFS_PROGRAM && header.vers == crate::nfs4::NFS_V4 && header.proc_ == 1)
            .then(|| match planned {
                Some(plan) => (plan, (V4.cache_shape)(&record[args_at..], &plan)),
                None => (V4.plan)(&record[args_at..]),
            });
    let plan = planned.as_ref().map(|p| p.0);
    if hot.count {
        hot.seen = match &planned {
            Some((_, Some(s))) => Seen::handle(matches!(s.last, V4Last::Read { .. }), s.fh),
            Some((plan, None)) => Seen::v4(&record[args_at..], plan),
            // `from_cache` saw the handle of a GETATTR or READ it parsed.
            None if v3 && hot.seen == Seen::NONE => Seen::v3(header.proc_, &record[args_at..]),
            None => hot.seen,
        };
    }
    if let Some((_, Some(shape))) = &planned {
        if let Some(v) = from_cache_v4(
            reactor,
            &header,
            &record[args_at..],
            shape,
            peer,
            pools,
            hot,
            &mut read_ahead,
            zc,
        ) {
            // Answered from a listing past its TTL: its first page is listed again
            // behind the reply, as for NFSv3.
            if let Some(fh) = hot.cache.take_listing_revalidation() {
                if let Some(job) = listing_revalidation(reactor, conn, peer, &header, &fh, pools) {
                    hot.revalidate.push(job);
                }
            }
            return v;
        }
    }
    let changes = crate::backend::pending::changes(&header, &record[args_at..], plan.as_ref());
    *work = Some(Job {
        plan,
        stat: crate::stats::CallStat::default(),
        read_ahead,
        revalidate: false,
        changes,
        reactor,
        conn,
        peer,
        header,
        record,
        args_at,
        charge: None,
    });
    Verdict::Work
}

/// A READDIRPLUS (RFC 1813 §3.3.17) of the directory's first page for a worker, made
/// for a listing call the reactor's run answered past its TTL: an NFSv3 READDIRPLUS
/// or an NFSv4.1 READDIR (`nfs4::fast_dirs`), one run serving both. Built, not the
/// client's call copied: cookie 0, a zero verifier and the largest reply, so the page
/// is the whole directory more often (a renewal that needs no digest,
/// `cache_dirs::Listings::renew`), and it lists ahead (`call::behind_reply`); an
/// NFSv3 call takes no session slot, where an NFSv4.1 COMPOUND would need one of the
/// client's (RFC 8881 §2.10.6). With the caller's credential and address, so the
/// worker checks the same export admission and read permission; only its fill goes
/// back, and a run whose names it proves unchanged stays NFSv4.1's. `None` when no
/// buffer is free (the run then answers until `cache::STALE_MAX`, after which calls
/// go to workers again).
fn listing_revalidation(
    reactor: usize,
    conn: Link,
    peer: SocketAddr,
    h: &CallHeader,
    dir: &cache::FhKey,
    pools: &Pools,
) -> Option<Job> {
    let mut buf = pools.alloc(crate::fs::FH_MAX + 32)?;
    let mut w = XdrWriter::new(buf.spare_mut());
    let proc_ = (crate::front::V3_CACHE.first_page)(dir.bytes(), &mut w).ok()?;
    let len = w.position();
    buf.set_len(len);
    Some(Job {
        reactor,
        conn,
        peer,
        header: CallHeader {
            prog: NFS_PROGRAM,
            vers: NFS_V3,
            proc_,
            ..*h
        },
        record: buf,
        args_at: 0,
        read_ahead: false,
        revalidate: true,
        changes: false,
        stat: crate::stats::CallStat::default(),
        plan: None,
        charge: None,
    })
}

/// A cached READ whose data may stay in the cache pages: over RDMA, written from them
/// into the call's write chunk (`room` bytes, pages registered under `lkey`); over TCP,
/// sent from them by the transport's vectored writes (`TcpTransport::send_external`).
/// Reads of fewer than `min` bytes are copied instead (pinning costs more than the
/// copy of a few hundred bytes).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ZeroCopy {
    room: u64,
    lkey: u32,
    min: u32,
    /// Over TCP: the pages go out in the connection's vectored write, whatever the
    /// operation (over RDMA only a DDP-eligible READ's data may, RFC 8267 §4.2).
    tcp: bool,
}

/// Smallest cached TCP READ sent straight from the cache pages (smaller ones are copied
/// into the reply: the pin bookkeeping costs more than a copy that short).
const TCP_PAGES_MIN: u32 = 1024;

impl ZeroCopy {
    /// Whether a READ of `count` bytes goes from the pages.
    fn takes(&self, count: u32) -> bool {
        count >= self.min && u64::from(count) <= self.room
    }
}

/// A GETATTR of `fh` for a worker, made from the NFSv3 call that was answered from
/// expired attributes: the same RPC header (so the same credential and client, and
/// the same export admission) with the procedure set to GETATTR and the handle as its
/// arguments. `None` when no buffer is free (the entry then stays stale until
/// `STALE_MAX`, after which calls go to workers again).
#[allow(clippy::too_many_arguments)]
fn revalidation(
    reactor: usize,
    conn: Link,
    peer: SocketAddr,
    h: &CallHeader,
    record: &[u8],
    args_at: usize,
    fh: &cache::FhKey,
    pools: &Pools,
) -> Option<Job> {
    use nfs_wire::nfs3::NFSPROC3_GETATTR as GETATTR;
    // The procedure number's place in an RPC call (RFC 5531 §9: xid, msg_type,
    // rpcvers, prog, vers, proc).
    const PROC_AT: usize = 20;
    let fh = fh.bytes();
    let len = args_at + 4 + fh.len().next_multiple_of(4);
    let mut buf = pools.alloc(len)?;
    let out = buf.spare_mut();
    out[..args_at].copy_from_slice(record.get(..args_at)?);
    out[PROC_AT..PROC_AT + 4].copy_from_slice(&GETATTR.to_be_bytes());
    let mut w = XdrWriter::at(&mut out[..len], args_at);
    w.opaque_var(fh).ok()?;
    buf.set_len(len);
    Some(Job {
        reactor,
        conn,
        peer,
        header: CallHeader {
            proc_: GETATTR,
            ..*h
        },
        record: buf,
        args_at,
        read_ahead: false,
        revalidate: true,
        changes: false,
        stat: crate::stats::CallStat::default(),
        plan: None,
        charge: None,
    })
}

/// What the reactor needs to answer from its cache.
pub(crate) struct Hot<'a> {
    pub cache: &'a mut ReadCache,
    /// The cache pages' lkey when they are registered with the RDMA fabric.
    pub pages_lkey: Option<u32>,
    /// Cached TCP READs are sent from the cache pages (the cache has pages).
    pub tcp_pages: bool,
    pub gens: &'a cache::Generations,
    /// Checked once per cached answer (one atomic load, no lock), so a SIGHUP reload is
    /// seen by the very next call, even one read while the reactor slept in poll.
    pub exports: &'a mut crate::export::LocalExports,
    /// The NFSv4.1 state (sessions, opens, delegations) for the v4 fast path.
    pub state: &'a crate::state::State,
    /// Revalidation GETATTRs to hand to workers after this pass (`revalidation`).
    pub revalidate: &'a mut Vec<Job>,
    /// What `classify` decoded of its call's class and export, for the per-client
    /// counters (`stats::Tenants::classified`), so they never read the record again;
    /// set only while `count` (`stats.per_client`: off, a call pays one branch).
    pub seen: Seen,
    pub count: bool,
    /// The calls come over RPC-over-RDMA (cached READ answers then say where their
    /// data lie: `located`).
    pub rdma: bool,
}

/// NFSv4.1 COMPOUNDs `SEQUENCE, PUTFH, GETATTR|READ` answered from the cache
/// (`front::V4_PATHS`, over `nfs4::fast`: every check and the slot bookkeeping are
/// there), recognised from the COMPOUND's plan. Over RPC-over-RDMA
/// the reply's READ data, located by the answer itself (its outcome), is
/// written into the call's first write chunk (RFC 8267 §6.4.1); when that chunk has room for the
/// data (`write_room`) and the cache pages are registered, the data goes by RDMA
/// Write straight from the pages (`fast::answer_pages`, no copy into the reply).
/// `None` → a worker.
#[allow(clippy::too_many_arguments)]
fn from_cache_v4(
    reactor: usize,
    h: &CallHeader,
    args: &[u8],
    shape: &V4Shape,
    peer: SocketAddr,
    pools: &Pools,
    hot: &mut Hot,
    read_ahead: &mut bool,
    zc: Option<ZeroCopy>,
) -> Option<Verdict> {
    let want = match shape.last {
        V4Last::Read { offset, count, .. } => {
            if let Some((_, fileid)) = crate::fs::FileModel::peek_handle(shape.fh) {
                *read_ahead = hot.cache.note_read(shape.fh, fileid, offset, count);
            }
            if count as usize > cache::MAX_CACHED_READ {
                return None;
            }
            count as usize + 512
        }
        V4Last::Getattr(_) => 1024,
        V4Last::Readdir(ask) => (ask.maxcount as usize).min(crate::limits::MAX_DIR_REPLY) + 1024,
        // SEQUENCE, PUTFH, LOOKUP, GETFH (a handle), GETATTR (`fast::FAST_ATTRS`).
        V4Last::Lookup { .. } => 1024,
    };
    if let (V4Last::Read { count, plus, .. }, Some(zc)) = (shape.last, zc) {
        // READ_PLUS data is no DDP-eligible item: from the pages over TCP only.
        if zc.takes(count) && (!plus || zc.tcp) {
            let lkey = zc.lkey;
            let mut buf = pools.alloc(MARK + 512)?;
            let mut w = XdrWriter::at(buf.spare_mut(), MARK);
            rpc::write_accepted(&mut w, h.xid, Accept::Success).ok()?;
            let exports = hot.exports.current();
            let mut view = V4View {
                cache: hot.cache,
                gens: hot.gens,
                exports,
                state: hot.state,
            };
            let pages = (V4.answer_pages)(
                &mut view,
                peer.ip(),
                &h.cred,
                shape,
                args.len(),
                lkey,
                &mut w,
            )?;
            (V4.count_answer)(reactor);
            let n = w.position();
            buf.set_len(n);
            return Some(match pages {
                Some(p) => Verdict::ReplyPages(buf, p),
                None => Verdict::Reply(buf),
            });
        }
    }
    let mut buf = pools.alloc(MARK + want)?;
    let mut w = XdrWriter::at(buf.spare_mut(), MARK);
    rpc::write_accepted(&mut w, h.xid, Accept::Success).ok()?;
    let exports = hot.exports.current();
    let mut view = V4View {
        cache: hot.cache,
        gens: hot.gens,
        exports,
        state: hot.state,
    };
    let data = (V4.answer)(&mut view, peer.ip(), &h.cred, shape, args.len(), &mut w)?;
    (V4.count_answer)(reactor);
    let n = w.position();
    buf.set_len(n);
    // The READ's outcome locates its data for an RPC-over-RDMA write chunk: the
    // transport does not read the reply to find it.
    Some(located(buf, data, hot.rdma))
}

/// Answers GETATTR and small READs from the reactor's cache (run to completion, no
/// worker round trip). `None` on a miss, or when no buffer is free right now.
fn from_cache(
    h: &CallHeader,
    args: &[u8],
    peer: SocketAddr,
    pools: &Pools,
    hot: &mut Hot,
    read_ahead: &mut bool,
    zc: Option<ZeroCopy>,
) -> Option<Verdict> {
    let v3 = &crate::front::V3_CACHE;
    // The procedure is tested here, not in the table's parser: every cached GETATTR
    // and READ passes this test, and a call through the table is not inlined.
    if h.proc_ == nfs_wire::nfs3::NFSPROC3_READDIRPLUS {
        if let Some(ask) = (v3.parse_listing)(h.proc_, args) {
            return listing_from_cache(h, &ask, peer, pools, hot);
        }
    }
    if h.proc_ == nfs_wire::nfs3::NFSPROC3_LOOKUP {
        return lookup_from_cache(h, args, peer, pools, hot);
    }
    let ask = (v3.parse)(h.proc_, args)?;
    let (fh, read_args) = (ask.fh, ask.read);
    if hot.count {
        hot.seen = Seen::handle(read_args.is_some(), fh);
    }
    let req = cache::Request {
        fh,
        client: peer.ip(),
        cred: &h.cred,
    };
    if let (Some((offset, count)), Some((_, fileid))) =
        (read_args, crate::fs::FileModel::peek_handle(fh))
    {
        *read_ahead = hot.cache.note_read(fh, fileid, offset, count);
    }
    // RPC-over-RDMA with a write chunk that fits, or TCP: the data goes by RDMA Write
    // or vectored send straight from the cache pages; only the header is encoded (no
    // copy of the data).
    if let (Some((offset, count)), Some(zc)) = (read_args, zc) {
        let lkey = zc.lkey;
        if zc.takes(count) && count as usize <= cache::MAX_CACHED_READ {
            let mut buf = pools.alloc(MARK + 256)?;
            let mut w = XdrWriter::at(buf.spare_mut(), MARK);
            rpc::write_accepted(&mut w, h.xid, Accept::Success).ok()?;
            let exports = hot.exports.current();
            let pages = (v3.read_pages)(
                hot.cache,
                hot.gens,
                exports,
                &req,
                (offset, count),
                lkey,
                &mut w,
            )?;
            let n = w.position();
            buf.set_len(n);
            return Some(Verdict::ReplyPages(buf, pages));
        }
    }
    let want = read_args.map_or(0, |(_, c)| c as usize) + 256;
    if want > cache::MAX_CACHED_READ + 256 {
        return None;
    }
    let mut buf = pools.alloc(MARK + want)?;
    let mut w = XdrWriter::at(buf.spare_mut(), MARK);
    rpc::write_accepted(&mut w, h.xid, Accept::Success).ok()?;
    let exports = hot.exports.current();
    // A READ's answer says where its data went (RFC 8267 §4: the one item an
    // RPC-over-RDMA write chunk takes), so the transport does not read the reply.
    let data = match read_args {
        None => (v3.getattr)(hot.cache, hot.gens, exports, &req, &mut w).then_some(None),
        Some(read) => (v3.read)(hot.cache, hot.gens, exports, &req, read, &mut w).map(Some),
    }?;
    let n = w.position();
    buf.set_len(n);
    Some(located(buf, data, hot.rdma))
}

/// A cached answer's verdict: where a READ's data lie matters only to an
/// RPC-over-RDMA write chunk (RFC 8267 §4, §6.4.1); over TCP, or with no data, the
/// reply is plain (the location list is not built and moved on every call).
#[inline]
fn located(buf: Buf, data: Option<std::ops::Range<usize>>, rdma: bool) -> Verdict {
    match data {
        Some(at) if rdma => Verdict::ReplyLocated(buf, DdpList::from(Some(at))),
        _ => Verdict::Reply(buf),
    }
}

/// Answers a listing page from the reactor's listings (`cache_dirs`). `None` on a
/// miss, or when no buffer is free right now.
fn listing_from_cache(
    h: &CallHeader,
    ask: &crate::outcome::ListAsk,
    peer: SocketAddr,
    pools: &Pools,
    hot: &mut Hot,
) -> Option<Verdict> {
    let v3 = &crate::front::V3_CACHE;
    let req = cache::Request {
        fh: ask.fh,
        client: peer.ip(),
        cred: &h.cred,
    };
    let want = ask.maxcount.min(crate::limits::MAX_DIR_REPLY) + 256;
    let mut buf = pools.alloc(MARK + want)?;
    let mut w = XdrWriter::at(buf.spare_mut(), MARK);
    rpc::write_accepted(&mut w, h.xid, Accept::Success).ok()?;
    let exports = hot.exports.current();
    if !(v3.listing)(hot.cache, hot.gens, exports, &req, ask, &mut w) {
        return None;
    }
    let n = w.position();
    buf.set_len(n);
    Some(Verdict::Reply(buf))
}

/// Answers a LOOKUP from the reactor's names (`cache_names`). `None` on a miss, or
/// when no buffer is free right now.
fn lookup_from_cache(
    h: &CallHeader,
    args: &[u8],
    peer: SocketAddr,
    pools: &Pools,
    hot: &mut Hot,
) -> Option<Verdict> {
    let v3 = &crate::front::V3_CACHE;
    let ask = (v3.parse_entry)(h.proc_, args)?;
    if hot.count {
        hot.seen = Seen::handle(false, ask.dir);
    }
    let req = cache::Request {
        fh: ask.dir,
        client: peer.ip(),
        cred: &h.cred,
    };
    // Status, handle, two post_op_attr3 (RFC 1813 §3.3.3).
    let mut buf = pools.alloc(MARK + 512)?;
    let mut w = XdrWriter::at(buf.spare_mut(), MARK);
    rpc::write_accepted(&mut w, h.xid, Accept::Success).ok()?;
    let exports = hot.exports.current();
    if !(v3.lookup)(hot.cache, hot.gens, exports, &req, ask.name, &mut w) {
        return None;
    }
    let n = w.position();
    buf.set_len(n);
    Some(Verdict::Reply(buf))
}

/// A GARBAGE_ARGS reply (RPC-over-RDMA calls whose reduced items break the binding).
/// Never `Retry`: a retried record would be classified without its chunk check, so
/// with every buffer taken the call is dropped (the client retransmits on reconnect).
pub(crate) fn garbage_args(xid: u32, record: Buf, pools: &Pools) -> Verdict {
    match inline(record, pools, |w| {
        rpc::write_accepted(w, xid, Accept::GarbageArgs)
    }) {
        Verdict::Retry(_) => Verdict::Drop,
        v => v,
    }
}

/// Encodes a small reply into a fresh buffer after the record-mark slot.
fn inline(
    record: Buf,
    pools: &Pools,
    encode: impl FnOnce(&mut XdrWriter) -> engine::xdr::XdrResult<()>,
) -> Verdict {
    let Some(mut buf) = pools.alloc(INLINE_REPLY) else {
        return Verdict::Retry(record);
    };
    let mut w = XdrWriter::at(buf.spare_mut(), MARK);
    encode(&mut w).expect("inline replies fit in INLINE_REPLY bytes");
    let n = w.position();
    buf.set_len(n);
    Verdict::Reply(buf)
}
