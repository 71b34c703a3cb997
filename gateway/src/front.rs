//! The front ends by RPC program and version: what an executor calls to decode and
//! encode, so `server/` (dispatch, the io_uring executor, the workers) names no front
//! end (docs/architecture.md §2 "Layering rules"). Each table is looked up once per
//! call (`of`); adding a protocol is a new table here, not an edit of the executors.

use crate::cache::{Generations, PageRead, ReadCache, Request};
use crate::call::{Ctx, Outcome, Touches};
use crate::export::Exports;
use crate::fs::{Attr, Status};
use crate::outcome::{Ask, CommitDone, EntryAsk, ListAsk, ReadSlots, WriteDone};
use crate::state::State;
use engine::rpc::Cred;
use engine::xdr::{XdrResult, XdrWriter};
use nfs_wire::{MOUNT_PROGRAM, NFS_PROGRAM, NFS_V3};
use std::net::IpAddr;
use std::ops::Range;

/// One RPC program version as the workers run it.
pub struct FrontEnd {
    /// Bytes of reply a call of this procedure with these arguments may need after
    /// the RPC header (never fails: garbage gets a small size).
    pub reply_capacity: fn(u32, &[u8]) -> usize,
    /// Decodes a call, runs it against the file model and writes its results.
    pub serve: fn(&Ctx, &State, u32, &[u8], &mut XdrWriter) -> Outcome,
    /// The procedure's failure reply with status `Status` (a call that must wait for
    /// a delegation recall answers `Jukebox`).
    pub fail: fn(&mut XdrWriter, u32, Status) -> XdrResult<()>,
    /// The files a call changes that another client's delegation may cover (RFC 8881
    /// §10.2); `None` when it changes none (NFSv4.1 recalls in its own operations).
    pub touches: for<'a> fn(u32, &'a [u8]) -> Option<Touches<'a>>,
}

/// NFSv3 (RFC 1813).
pub static NFS3: FrontEnd = FrontEnd {
    reply_capacity: crate::nfs3::reply_capacity,
    serve: |ctx, _, proc_, args, out| crate::nfs3::serve(ctx, proc_, args, out),
    fail: |w, proc_, st| crate::nfs3::proto::put_fail(w, proc_, crate::nfs3::status::nfsstat3(st)),
    touches: crate::nfs3::recall::touches,
};

/// NFSv4.1 (RFC 8881): COMPOUND.
pub static NFS4: FrontEnd = FrontEnd {
    reply_capacity: |_, args| Plan::of(args).reply,
    serve: crate::nfs4::serve,
    fail: |_, _, _| Err(engine::xdr::XdrError::BadValue),
    touches: |_, _| None,
};

/// MOUNT v3 (RFC 1813 Appendix I).
pub static MOUNT3: FrontEnd = FrontEnd {
    reply_capacity: |_, _| 8192,
    serve: |ctx, _, proc_, args, out| crate::mount::serve(ctx, proc_, args, out),
    fail: |_, _, _| Err(engine::xdr::XdrError::BadValue),
    touches: |_, _| None,
};

/// The front end of a call (dispatch admits only the versions it serves: NFSv3,
/// NFSv4.1, MOUNT v3).
pub fn of(prog: u32, vers: u32) -> Option<&'static FrontEnd> {
    match prog {
        NFS_PROGRAM if vers == crate::nfs4::NFS_V4 => Some(&NFS4),
        NFS_PROGRAM => Some(&NFS3),
        MOUNT_PROGRAM => Some(&MOUNT3),
        _ => None,
    }
}

/// Whether a call is NFSv3 (the version the reactor's cache and io_uring executor
/// answer through `V3_CACHE` and `V3_REPLIES`).
pub fn is_v3(prog: u32, vers: u32) -> bool {
    prog == NFS_PROGRAM && vers == NFS_V3
}

/// A front end's answers from the reactor's read cache (`nfs3::fast`).
#[allow(clippy::type_complexity)]
pub struct CacheAnswers {
    /// What a GETATTR or READ call asks; `None` for other procedures.
    pub parse: for<'a> fn(u32, &'a [u8]) -> Option<Ask<'a>>,
    pub getattr: fn(&mut ReadCache, &Generations, &Exports, &Request, &mut XdrWriter) -> bool,
    /// A READ answered with its data copied into the reply: where the data went in
    /// the writer's buffer (RFC 8267 §4's one DDP item); `None` on a miss.
    pub read: fn(
        &mut ReadCache,
        &Generations,
        &Exports,
        &Request,
        (u64, u32),
        &mut XdrWriter,
    ) -> Option<Range<usize>>,
    pub read_pages: fn(
        &mut ReadCache,
        &Generations,
        &Exports,
        &Request,
        (u64, u32),
        u32,
        &mut XdrWriter,
    ) -> Option<Box<PageRead>>,
    /// What a listing call asks (`None`: not one the cache's listings answer).
    pub parse_listing: for<'a> fn(u32, &'a [u8]) -> Option<ListAsk<'a>>,
    pub listing:
        fn(&mut ReadCache, &Generations, &Exports, &Request, &ListAsk, &mut XdrWriter) -> bool,
    /// The directory entry a LOOKUP, CREATE or MKDIR names, when its answer may teach
    /// the cache's names (`cache_names`); `None` for other calls.
    pub parse_entry: for<'a> fn(u32, &'a [u8]) -> Option<EntryAsk<'a>>,
    /// A LOOKUP (`EntryAsk` with `makes` false) answered from the cache's names.
    pub lookup: fn(&mut ReadCache, &Generations, &Exports, &Request, &[u8], &mut XdrWriter) -> bool,
    /// The arguments of a call listing a directory's first page (its handle), and the
    /// procedure: the revalidation of a run past its TTL that another version's call
    /// was answered from (`dispatch::listing_revalidation`).
    pub first_page: fn(&[u8], &mut XdrWriter) -> XdrResult<u32>,
}

/// NFSv3 GETATTR and READ from the cache, READDIRPLUS from its listings, LOOKUP
/// from its names.
pub static V3_CACHE: CacheAnswers = CacheAnswers {
    parse: crate::nfs3::fast::parse,
    getattr: crate::nfs3::fast::getattr,
    read: crate::nfs3::fast::read,
    read_pages: crate::nfs3::fast::read_pages,
    parse_listing: crate::nfs3::fast::parse_listing,
    listing: crate::nfs3::fast::readdirplus,
    parse_entry: crate::nfs3::fast::parse_entry,
    lookup: crate::nfs3::fast::lookup,
    first_page: crate::nfs3::fast::first_page,
};

/// A front end's encoders of the outcomes the reactor's io_uring executor returns
/// (`server::direct`), each after the RPC header.
pub struct Replies {
    pub getattr_ok: fn(&mut XdrWriter, &Attr) -> XdrResult<()>,
    /// A READ's head, its count, eof and length left to `patch_read`.
    pub read_slots: fn(&mut XdrWriter, &Attr) -> XdrResult<ReadSlots>,
    pub patch_read: fn(&mut XdrWriter, &ReadSlots, usize, bool),
    pub write_ok: fn(&mut XdrWriter, &WriteDone) -> XdrResult<()>,
    pub commit_ok: fn(&mut XdrWriter, &CommitDone) -> XdrResult<()>,
}

/// NFSv3 replies (`nfs3::outcome`).
pub static V3_REPLIES: Replies = Replies {
    getattr_ok: crate::nfs3::outcome::put_getattr_ok,
    read_slots: crate::nfs3::outcome::put_read_slots,
    patch_read: crate::nfs3::outcome::patch_read,
    write_ok: crate::nfs3::outcome::put_write_ok,
    commit_ok: crate::nfs3::outcome::put_commit_ok,
};

/// The shapes of the reactor's NFSv4.1 paths and what they are answered with.
pub use crate::nfs4::fast::{Last as V4Last, Shape as V4Shape, View as V4View};
pub use crate::nfs4::fast_io::{
    Bitmap as V4Bitmap, IoCall as V4IoCall, IoOp as V4IoOp, Started as V4Started,
    Target as V4Target,
};
/// Bounds of the io_uring executor's NFSv4.1 replies (`nfs4::fast_io`): the
/// COMPOUND4res up to the data operation's status, and a trailing GETATTR's result.
pub use crate::nfs4::fast_io::{GETATTR_MAX as V4_IO_GETATTR_MAX, HEAD_MAX as V4_IO_HEAD_MAX};
/// An NFSv4.1 COMPOUND's plan (`nfs4::plan`): made once by the reactor, carried with
/// the call (`Job::plan`).
pub use crate::nfs4::plan::Plan;

/// NFSv4.1's reactor-side paths, reached through the COMPOUND's plan: the read-cache
/// answers (`nfs4::fast`), the io_uring shapes (`nfs4::fast_io`, run by
/// `server::direct::v4`) and what a worker's COMPOUND may teach the cache.
#[allow(clippy::type_complexity)]
pub struct V4Paths {
    /// The one walk over COMPOUND4args (RFC 8881 §16.2.1), with the cache shape
    /// (`SEQUENCE, PUTFH, GETATTR|READ`) decoded by the same pass.
    pub plan: for<'a> fn(&'a [u8]) -> (Plan, Option<V4Shape<'a>>),
    /// The same walk with the DDP-eligible call items it passed (RFC 8267 §6.1), for
    /// the RPC-over-RDMA binding's check of reduced chunks (`ulb::check_call_planned`,
    /// which names no front end).
    pub plan_ddp: fn(&[u8]) -> (Plan, crate::ddp::Eligibles),
    /// `SEQUENCE, PUTFH, GETATTR|READ`, decoded at the plan's offsets (a plan made
    /// without its shape: `Plan::with_ddp`).
    pub cache_shape: for<'a> fn(&'a [u8], &Plan) -> Option<V4Shape<'a>>,
    /// Answers a shape from the cache into the writer (after the RPC header): `Some`
    /// when answered, with where a READ's data lies in the writer's buffer.
    pub answer: fn(
        &mut V4View,
        IpAddr,
        &Cred,
        &V4Shape,
        usize,
        &mut XdrWriter,
    ) -> Option<Option<std::ops::Range<usize>>>,
    /// `answer` for a READ whose data goes from the cache pages (lkey).
    pub answer_pages: fn(
        &mut V4View,
        IpAddr,
        &Cred,
        &V4Shape,
        usize,
        u32,
        &mut XdrWriter,
    ) -> Option<Option<Box<PageRead>>>,
    /// Counts a COMPOUND a reactor answered (reactor index).
    pub count_answer: fn(usize),
    /// The handle (and READ offset, count) a worker's COMPOUND of a cache shape
    /// observes.
    pub observe: for<'a> fn(&'a [u8], &Plan) -> Option<(&'a [u8], Option<(u64, u32)>)>,
    /// The directory handle and component of a worker's `SEQUENCE, PUTFH, LOOKUP[,
    /// GETFH], GETATTR` COMPOUND: the entry it may teach the reactor's names.
    pub looked_up: for<'a> fn(&'a [u8], &Plan) -> Option<(&'a [u8], &'a [u8])>,
    /// The directory handle and component a worker's `SEQUENCE, PUTFH, OPEN ...`
    /// COMPOUND creates by name (or its `SEQUENCE, PUTFH, CREATE ...` makes a
    /// directory with): the entry it may teach the names and the listings.
    pub made: for<'a> fn(&'a [u8], &Plan) -> Option<(&'a [u8], &'a [u8])>,
    /// The client of a worker's COMPOUND's session (0: none), whose write
    /// delegation's file it may still teach the cache (`cache::Generations::stamp_as`).
    pub client: fn(&State, &[u8], &Plan) -> u64,
    /// `SEQUENCE, PUTFH, READ|WRITE[, GETATTR]|COMMIT`, decoded at the plan's offsets.
    pub io_call: fn(&[u8], &Plan) -> Option<V4IoCall>,
    /// The io_uring call's checks and its reply up to the data operation's status,
    /// the slot claimed (`None`: nothing claimed, a worker answers).
    pub io_start: fn(&State, &V4IoCall, &[u8], &V4Target, &mut XdrWriter) -> Option<V4Started>,
    /// Ends an io_uring call: its COMPOUND4res kept in the slot (with where a READ's
    /// data lie in it, for a replay over RDMA), the slot free again.
    pub io_finish: fn(V4Started, &[u8], Option<Range<usize>>),
    /// WRITE4resok after its status: count, committed, verifier.
    pub put_write_ok: fn(&mut XdrWriter, u32, u32, &[u8; 8]) -> XdrResult<()>,
    /// A trailing GETATTR's result from the attributes after the write.
    pub put_getattr: fn(&mut XdrWriter, &V4Bitmap, &Attr, &[u8]) -> XdrResult<()>,
}

/// NFSv4.1 (RFC 8881).
pub static V4_PATHS: V4Paths = V4Paths {
    plan: Plan::with_shape,
    plan_ddp: Plan::with_ddp,
    cache_shape: crate::nfs4::fast::shape,
    answer: crate::nfs4::fast::answer_parsed,
    answer_pages: crate::nfs4::fast::answer_pages,
    count_answer: crate::nfs4::fast::count_answer,
    observe: crate::nfs4::fast::observe,
    looked_up: crate::nfs4::fast::looked_up,
    made: crate::nfs4::fast_names::made,
    client: crate::nfs4::fast::client,
    io_call: crate::nfs4::fast_io::call,
    io_start: crate::nfs4::fast_io::start,
    io_finish: crate::nfs4::fast_io::finish,
    put_write_ok: crate::nfs4::fast_io::put_write_ok,
    put_getattr: crate::nfs4::fast_io::put_getattr,
};
