//! Backend workers: run NFS and MOUNT procedures against the file model, off the
//! reactors. Every storage call happens here; a reactor never blocks on storage.
//!
//! A worker pops jobs from the shared job ring, encodes the reply into a buffer from
//! the owning reactor's pools, and pushes it on that reactor's completion ring. Idle
//! workers spin briefly, then sleep on their doorbell.

use super::dispatch::{Job, MARK};
use super::transport::Link;
use super::Shared;
use crate::cache::{self, FhKey, Fill, FillData, Stamp};
use crate::call::{Ctx, Learned, Outcome};
use crate::fs::{FileKind, FileModel};
use engine::mem::{Buf, Pools};
use engine::ring::{Doorbell, Ring};
use engine::rpc::{self, Accept};
use engine::rpcrdma::responder::DdpList;
use engine::tcp::Charge;
use engine::xdr::{XdrReader, XdrWriter};
use nfs_wire::nfs3::NFSPROC3_WRITE;
use nfs_wire::NFS_PROGRAM;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A finished call for a reactor: the reply (`None`: nothing is sent), and what the
/// reactor's read cache may learn from it. A message with no reply but a fill is a
/// read-ahead result, not an answer to a call.
pub(crate) struct Done {
    pub conn: Link,
    pub reply: Option<Buf>,
    /// The call's TCP reply charge, given back as the reply is handed over.
    pub charge: Option<Charge>,
    /// Where the reply's READ-class results lie in `reply`, as the encoders noted
    /// them (`crate::ddp`: an NFSv3 READ or READLINK, RFC 8267 §4; an NFSv4
    /// COMPOUND's, §6.4.1; positions count the record-mark slot); `None` when
    /// none was noted.
    pub located: Option<DdpList>,
    pub fill: Option<Fill>,
    /// A regular file this call authenticated, for the reactor's io_uring READ path
    /// (`server::direct`; only with `backend.io = "uring"` in force).
    pub opened: Option<crate::uring::files::Opened>,
    /// The call's arrival time and slot (the reactor records its latency).
    pub stat: crate::stats::CallStat,
}

impl Done {
    /// A message that only teaches the reactor (`fill`): no reply, nothing to give
    /// back; `stat` is the call's own, for its connection's bookkeeping.
    fn fill_only(conn: Link, stat: crate::stats::CallStat, fill: Fill) -> Done {
        Done {
            conn,
            reply: None,
            charge: None,
            located: None,
            fill: Some(fill),
            opened: None,
            stat,
        }
    }
}

/// One doorbell per worker, rung by reactors after queueing a job.
pub(crate) type WorkerBells = Arc<Vec<Arc<Doorbell>>>;

/// Room for the RPC accepted-reply header.
const RPC_HEADER: usize = 32;
/// Smallest reply buffer worth trying when the preferred class is exhausted.
const MIN_REPLY: usize = 4096;
/// How long a worker waits for a reply buffer before dropping the call (the client
/// retransmits); only reachable when every pool class is exhausted.
const BUFFER_WAIT: Duration = Duration::from_secs(1);

pub(crate) fn spawn_workers(
    n: usize,
    spin: Duration,
    shared: &Arc<Shared>,
    jobs: &Arc<Ring<Job>>,
    stop: &Arc<AtomicBool>,
) -> std::io::Result<(Vec<JoinHandle<()>>, WorkerBells)> {
    let mut handles = Vec::with_capacity(n);
    let mut bells = Vec::with_capacity(n);
    for i in 0..n {
        let (tx, rx) = std::sync::mpsc::channel::<Arc<Doorbell>>();
        let shared = shared.clone();
        let jobs = jobs.clone();
        let stop = stop.clone();
        let h = crate::supervise::spawn(format!("worker-{i}"), None, move || {
            let bell = rx.recv().expect("doorbell sent at spawn");
            worker_loop(&shared, &jobs, &stop, &bell, spin);
        })?;
        let bell = Doorbell::new(Box::new(h.thread().clone()));
        tx.send(bell.clone()).expect("worker alive");
        bells.push(bell);
        handles.push(h);
    }
    Ok((handles, Arc::new(bells)))
}

/// Pops and runs jobs; when the ring is empty, spins for at most `spin` (so a job
/// arriving right behind the last one skips the sleep/wake), then sleeps on the
/// doorbell. On a small machine every spinning worker takes a core from the client
/// and the reactor, so the default spin is zero.
fn worker_loop(
    shared: &Shared,
    jobs: &Ring<Job>,
    stop: &AtomicBool,
    bell: &Doorbell,
    spin: Duration,
) {
    let mut idle_since: Option<Instant> = None;
    loop {
        if let Some(job) = jobs.pop() {
            run_job(shared, job);
            idle_since = None;
            continue;
        }
        if stop.load(Ordering::Relaxed) {
            return;
        }
        if !spin.is_zero() {
            let since = *idle_since.get_or_insert_with(Instant::now);
            if since.elapsed() < spin {
                std::hint::spin_loop();
                continue;
            }
        }
        bell.prepare_sleep();
        if let Some(job) = jobs.pop() {
            bell.woke();
            run_job(shared, job);
            idle_since = None;
            continue;
        }
        std::thread::park_timeout(Duration::from_millis(50));
        bell.woke();
    }
}

/// Gets a reply buffer of `want` bytes, or the largest smaller one (procedures clamp
/// their results to the room they are given), waiting while every class is empty.
fn reply_buffer(pools: &Pools, want: usize) -> Option<Buf> {
    let start = Instant::now();
    loop {
        if let Some(b) = pools.alloc(want) {
            return Some(b);
        }
        let mut size = want / 2;
        while size >= MIN_REPLY {
            if let Some(b) = pools.alloc(size) {
                return Some(b);
            }
            size /= 2;
        }
        if let Some(b) = pools.alloc(MIN_REPLY) {
            return Some(b);
        }
        if start.elapsed() > BUFFER_WAIT {
            return None;
        }
        std::thread::yield_now();
    }
}

fn run_job(shared: &Shared, mut job: Job) {
    // Counted in by the reactor that pushed it when it may change a name
    // (`backend::pending`, `Job::changes`).
    let _finished = crate::backend::pending::Finished::begin(job.changes);
    // Travels to the reply (or is dropped with an unanswered call).
    let charge = job.charge.take();
    if job.header.proc_ == 0 {
        use crate::supervise::hooks::{self, Hook};
        match hooks::of_xid(job.header.xid) {
            Some(Hook::WorkerThread) => {
                panic!("test hook: worker thread killed outside any request")
            }
            Some(Hook::WorkerSlow) => std::thread::sleep(Duration::from_millis(500)),
            _ => {}
        }
    }
    let link = &shared.reactors[job.reactor];
    let moves_data = match &job.plan {
        Some(plan) => plan.moves_data(),
        None => crate::stats::data_jobs::is_data_job(&job.header, &job.record[job.args_at..]),
    };
    if moves_data {
        crate::stats::data_jobs::count();
    }
    // What a call changes is reported by the file model as it runs (write, SETATTR,
    // COMMIT, namespace changes: `fs::ChangeObserver`, bumping `shared.gens` before
    // and after each), so here only what a read may teach the caches is decided.
    let effect = CacheEffect::of(shared, &job);
    // An NFSv3 WRITE's stamp before the model's bumps: its reply teaches the reactor
    // the file's new attributes when no other change raced (`learned_write`).
    let write_from = v3_write_stamp(shared, &job);
    // A LOOKUP, CREATE or MKDIR: the name's and the directory's stamps before it
    // runs, for the reactor's names (`learned_entry`).
    let entry = entry_seen(shared, &job);
    // Before the call reads the file: its attributes are the file's as long as the
    // file's ctime stays older than this (`uring::files::unchanged`).
    let since_ns = shared.direct_io.then(wall_ns);
    // What the front end notes as it encodes (`call::note_learned`; an NFSv4.1 READ
    // or GETATTR as it runs): only this call's.
    let _ = crate::call::take_learned();
    let _ = crate::call::take_listing();
    let _ = crate::call::take_named();
    crate::call::set_behind_reply(job.revalidate);
    let reply = execute(shared, &link.pools, &job);
    let note = crate::call::take_learned();
    let listed = crate::call::take_listing();
    let named = crate::call::take_named();
    // Where the encoders put READ-class data (`crate::ddp::note`), for an RDMA
    // reply's write chunks; always taken, so no note outlives its call on this thread.
    let located = crate::ddp::take();
    let fill = match (&effect, &reply) {
        (
            CacheEffect::Observe {
                fh,
                export,
                stamp,
                is_read,
                read,
                v4,
                listing,
            },
            Some(_),
        ) => {
            let seen = Seen {
                fh: *fh,
                export: *export,
                stamp: *stamp,
                is_read: *is_read,
                read: *read,
                listing: listing.zip(listed),
            };
            learned(note, seen, shared.cache_pages, *v4)
        }
        _ => None,
    };
    // What a WRITE's reply teaches (`learned_write`): the file's attributes after
    // it, when no other change raced with it.
    let written = match (write_from, &reply) {
        (Some((id, before)), Some(_)) => learned_write(shared, &job, note, id, before),
        _ => None,
    };
    let made_v4 = entry.as_ref().is_some_and(|e| e.made_v4());
    let fill = match (fill, entry, &reply) {
        (Some(f), _, _) => Some(f),
        (None, Some(e), Some(_)) => e.learned(&shared.gens, named),
        _ => written.as_ref().map(|w| Fill {
            fh: w.fh,
            export: w.export,
            attr: w.attr,
            stamp: w.stamp,
            data: None,
            exact: false,
        }),
    };
    if job.revalidate {
        // The call was answered from the cache: only what was learned goes back (a
        // message with a fill and no reply); a failure sends nothing.
        if fill.is_some() {
            push_done(
                link,
                Done {
                    conn: job.conn,
                    reply: None,
                    charge: None,
                    located,
                    fill,
                    opened: None,
                    stat: job.stat,
                },
            );
        }
        return;
    }
    let opened = match (&effect, &fill) {
        (CacheEffect::Observe { .. }, Some(f)) if shared.direct_io => opened(shared, f, since_ns),
        (CacheEffect::None, _) if shared.direct_io && job.header.vers == crate::nfs4::NFS_V4 => {
            learned_io_v4(shared, &job, since_ns)
        }
        _ => written.and_then(|w| {
            let io = shared.direct_io;
            // A WRITE's own change moves the ctime past any start time: not revalidated.
            io.then(|| opened_as(shared, w.fh, w.export, w.attr, w.stamp, None))
                .flatten()
        }),
    };
    // What a create that taught its name made: (handle, export, file id, kind).
    let made_obj = match &fill {
        Some(Fill {
            data: Some(FillData::Name(n)),
            export,
            ..
        }) => n
            .made
            .as_ref()
            .map(|m| (n.obj, *export, n.obj_id, m.attr.kind)),
        _ => None,
    };
    // The file an NFSv4.1 OPEN created: its attributes after the COMPOUND, read once
    // the reply is on its way (`learned_made`).
    let made = made_obj
        .filter(|m| made_v4 && m.3 == FileKind::Reg)
        .map(|(fh, export, id, _)| (fh, export, id));
    // A directory a MKDIR or an NFSv4.1 CREATE made: its empty listing's start
    // (`learned_empty`), sent to the reactor before the reply: the client's first
    // create in it follows the reply, so its fill finds the run (a fill that came
    // first would leave the run's count of the directory's changes short for good).
    let made_dir = made_obj
        .filter(|m| m.3 == FileKind::Dir)
        .map(|(fh, export, id, _)| (fh, export, id));
    if let Some(fill) = made_dir.and_then(|m| learned_empty(shared, m)) {
        tell_other_reactors(shared, &job, &fill);
        push_done(link, Done::fill_only(job.conn, job.stat, fill));
    }
    let ahead = match (&effect, &fill) {
        (
            CacheEffect::Observe {
                read: Some(off), ..
            },
            Some(f),
        ) if shared.cache_pages && job.read_ahead => {
            Some((*off, f.fh, f.export, f.attr, f.stamp, f.exact))
        }
        _ => None,
    };
    if let Some(f) = fill.as_ref().filter(|_| made_obj.is_some()) {
        tell_other_reactors(shared, &job, f);
    }
    push_done(
        link,
        Done {
            conn: job.conn,
            reply,
            charge,
            located,
            fill,
            opened,
            stat: job.stat,
        },
    );
    if let Some(fill) = made.and_then(|m| learned_made(shared, m)) {
        tell_other_reactors(shared, &job, &fill);
        push_done(link, Done::fill_only(job.conn, job.stat, fill));
    }
    // Read-ahead after the reply is on its way: the block around a small READ goes
    // into the reactor's page cache, so neighbouring reads are answered there.
    if let Some((off, fh, export, attr, stamp, exact)) = ahead {
        if let Some(data) = read_block(shared, &link.pools, &fh, off) {
            let fill = Fill {
                fh,
                export,
                attr,
                stamp,
                data: Some(FillData::Block(data.0, data.1)),
                exact,
            };
            push_done(link, Done::fill_only(job.conn, job.stat, fill));
        }
    }
}

/// The open file behind a regular file a GETATTR/READ just answered for (`f`), for
/// the reactor's direct READ path. Resolving again costs a table lookup on this
/// worker, once per GETATTR/READ a worker still runs.
fn opened(shared: &Shared, f: &Fill, since_ns: Option<i64>) -> Option<crate::uring::files::Opened> {
    if f.attr.kind != crate::fs::FileKind::Reg {
        return None;
    }
    opened_as(shared, f.fh, f.export, f.attr, f.stamp, since_ns)
}

/// The wall clock in ns since 1970 (file timestamps' clock).
fn wall_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

fn opened_as(
    shared: &Shared,
    fh: FhKey,
    export: u16,
    attr: crate::fs::Attr,
    stamp: Stamp,
    since_ns: Option<i64>,
) -> Option<crate::uring::files::Opened> {
    use std::os::unix::fs::MetadataExt;
    let node = shared.model.resolve(fh.bytes()).ok()?;
    if node.fileid != attr.fileid {
        return None;
    }
    let data = shared.model.data_file(&node)?;
    // The inode held open, for the reactor's revalidation (one fstat per learning).
    let validator = since_ns.and_then(|since_ns| {
        let m = data.file.metadata().ok()?;
        Some(crate::uring::files::Validator {
            since_ns,
            dev: m.dev(),
            ino: m.ino(),
        })
    });
    Some(crate::uring::files::Opened {
        fh,
        export,
        attr,
        stamp,
        data,
        key: node.key,
        validator,
    })
}

/// An NFSv3 WRITE's file and its stamp before it runs, when the reactor may learn
/// from its reply (`learned_write`: its read cache's attributes, and with the
/// io_uring data path in force its file table).
fn v3_write_stamp(shared: &Shared, job: &Job) -> Option<(u64, Stamp)> {
    let h = &job.header;
    if !crate::front::is_v3(h.prog, h.vers) || h.proc_ != NFSPROC3_WRITE {
        return None;
    }
    let fh = XdrReader::new(&job.record[job.args_at..])
        .opaque_var(crate::fs::FH_MAX)
        .ok()?;
    let (_, fileid) = FileModel::peek_handle(fh)?;
    Some((fileid, shared.gens.stamp(fileid)))
}

/// What a successful NFSv3 WRITE teaches the reactor: the post-operation attributes
/// in its reply, valid under the stamp after the file model's two bumps around the
/// write (`fs::ChangeObserver`) when the stamp is exactly that (no other change to
/// the file raced with it, nor a SETATTR clearing set-id bits before the write).
fn learned_write(
    shared: &Shared,
    job: &Job,
    note: Option<Learned>,
    fileid: u64,
    before: Stamp,
) -> Option<Written> {
    let now = before.after_bumps(2);
    if shared.gens.stamp(fileid) != now {
        return None;
    }
    let fh = XdrReader::new(&job.record[job.args_at..])
        .opaque_var(crate::fs::FH_MAX)
        .ok()?;
    let (export, id) = FileModel::peek_handle(fh)?;
    let attr = note?.attr;
    if attr.fileid != id || id != fileid || attr.kind != crate::fs::FileKind::Reg {
        return None;
    }
    Some(Written {
        fh: FhKey::new(fh)?,
        export,
        attr,
        stamp: now,
    })
}

/// The attributes of a file an NFSv4.1 OPEN created (handle, export, file id), read
/// now, valid under the stamp taken before reading them (a change in flight then
/// bumps after, a later one bumps too), as the model's own (NFSv4 answers them): so
/// the stat that follows a v4 create (bench md, `ls -l` after `tar x`) is the
/// reactor's (`nfs4::fast_names`).
fn learned_made(shared: &Shared, (fh, export, fileid): (FhKey, u16, u64)) -> Option<Fill> {
    let stamp = shared.gens.stamp(fileid);
    let node = shared.model.resolve(fh.bytes()).ok()?;
    let attr = shared.model.getattr(&node).ok()?;
    if node.fileid != fileid || attr.fileid != fileid || attr.kind != crate::fs::FileKind::Reg {
        return None;
    }
    Some(Fill {
        fh,
        export,
        attr,
        stamp,
        data: None,
        exact: true,
    })
}

/// The start of the listing of a directory a MKDIR made (handle, export, file id),
/// for the reactor's run of it (`cache_dirs::Listings::start_empty`): its stamp read
/// first, then the directory seen empty. Any create in it bumps its stamp before it
/// makes the name, so one that was made before the look is seen by it, and one made
/// after moved the stamp past the one read: the run counts it only through its fill
/// (`cache_dirs::Listings::made`). One more listing of an empty directory per MKDIR,
/// before the reply.
fn learned_empty(shared: &Shared, (fh, export, fileid): (FhKey, u16, u64)) -> Option<Fill> {
    let stamp = shared.gens.stamp(fileid);
    let model = &shared.model;
    let node = model.resolve(fh.bytes()).ok()?;
    if node.fileid != fileid {
        return None;
    }
    let (verf, parent) = model.empty_start(&node).ok()??;
    let attr = model.getattr(&node).ok()?;
    if attr.fileid != fileid || attr.kind != crate::fs::FileKind::Dir {
        return None;
    }
    let empty = cache::EmptyFill {
        verf,
        dot: model.handle(&node),
        parent: (parent.fileid, model.handle(&parent)),
    };
    Some(Fill {
        fh,
        export,
        attr,
        stamp,
        data: Some(FillData::Empty(Box::new(empty))),
        exact: true,
    })
}

/// What a WRITE's reply taught (`learned_write`).
struct Written {
    fh: FhKey,
    export: u16,
    attr: crate::fs::Attr,
    stamp: Stamp,
}

/// The entry a LOOKUP, CREATE or MKDIR names, with the stamps its answer will be
/// judged by (`cache::names::EntrySeen`).
fn entry_seen(shared: &Shared, job: &Job) -> Option<cache::names::EntrySeen> {
    let h = &job.header;
    if h.prog == NFS_PROGRAM && h.vers == crate::nfs4::NFS_V4 {
        // `SEQUENCE, PUTFH, LOOKUP[, GETFH], GETATTR` (`nfs4::fast_names`).
        // `SEQUENCE, PUTFH, OPEN` creating by name, as an NFSv3 CREATE, and
        // `SEQUENCE, PUTFH, CREATE` of a directory, as an NFSv3 MKDIR.
        let plan = job.plan.as_ref()?;
        let args = job.record.get(job.args_at..)?;
        let v4 = &crate::front::V4_PATHS;
        let ((dir, name), makes) = match (v4.looked_up)(args, plan) {
            Some(found) => (found, false),
            None => ((v4.made)(args, plan)?, true),
        };
        if !cache::names::cacheable(name) {
            return None;
        }
        let ask = crate::outcome::EntryAsk { dir, name, makes };
        return cache::names::EntrySeen::before(&shared.gens, &ask).map(|e| e.v4());
    }
    if !crate::front::is_v3(h.prog, h.vers) {
        return None;
    }
    let ask = (crate::front::V3_CACHE.parse_entry)(h.proc_, &job.record[job.args_at..])?;
    cache::names::EntrySeen::before(&shared.gens, &ask)
}

/// The file behind an NFSv4.1 WRITE or COMMIT COMPOUND of the shapes the reactor runs
/// on its ring (`nfs4::fast_io`) that a worker ran (its file was not in the reactor's
/// table yet): its attributes read now, valid under the stamp taken before reading
/// them (a change in flight then bumps after, a later one bumps too). So a v4 write
/// workload, whose COMPOUNDs never have a shape the read cache observes, moves to
/// the ring after its first WRITE.
fn learned_io_v4(
    shared: &Shared,
    job: &Job,
    since_ns: Option<i64>,
) -> Option<crate::uring::files::Opened> {
    use crate::front::V4IoOp as IoOp;
    let args = job.record.get(job.args_at..)?;
    let c = (crate::front::V4_PATHS.io_call)(args, job.plan.as_ref()?)?;
    if matches!(c.op, IoOp::Read { .. }) {
        // A READ shape the read cache did not observe (a large one): not learned here.
        return None;
    }
    let fh = args.get(c.fh.clone())?;
    let (export, fileid) = FileModel::peek_handle(fh)?;
    let stamp = shared.gens.stamp(fileid);
    let node = shared.model.resolve(fh).ok()?;
    let attr = shared.model.getattr(&node).ok()?;
    if node.fileid != fileid || attr.fileid != fileid || attr.kind != crate::fs::FileKind::Reg {
        return None;
    }
    // A WRITE's own change moves the ctime past `since_ns`: such an entry is not
    // renewed by revalidation (dropped at its TTL), a COMMIT's may be.
    opened_as(shared, FhKey::new(fh)?, export, attr, stamp, since_ns)
}

/// Tells every other reactor what a create taught (`cache::Fill::for_other_reactors`):
/// connections on different reactors fill one directory (several clients, or one
/// client's `nconnect` connections), and a reactor's run of it that misses one create
/// never answers again (`cache_dirs::Listings::made` counts them), so the workers list
/// it page by page (tests/listing_made.rs, "filled from both reactors"). Before the
/// reply, as the fill for its own reactor: a new directory's start reaches every
/// reactor ahead of the creates the client makes in it. A hint: no sleeping reactor is
/// woken for it (it drains its ring on its next pass), and it is dropped when the ring
/// is full (that reactor's run then stops answering and the workers list, as before).
fn tell_other_reactors(shared: &Shared, job: &Job, fill: &Fill) {
    for (i, link) in shared.reactors.iter().enumerate() {
        if i == job.reactor || !link.alive.load(Ordering::Acquire) {
            continue;
        }
        let Some(copy) = fill.for_other_reactors() else {
            return;
        };
        // A fill without a reply: the reactor fills its cache and touches no
        // connection (`Reactor::drain_done`), so `conn` is not read there.
        let _ = link.done.push(Done::fill_only(job.conn, job.stat, copy));
    }
}

/// Hands a message to the reactor. The reactor drains its ring every pass; a full
/// ring only means a short wait. A reactor that has stopped (shutdown, or its thread
/// died) drains nothing: the message is dropped (its buffers go back to their pool)
/// instead of spinning forever on a full ring.
fn push_done(link: &super::ReactorLink, mut done: Done) {
    loop {
        if !link.alive.load(Ordering::Acquire) {
            tracing::debug!("reactor gone; dropping a finished call");
            return;
        }
        match link.done.push(done) {
            Ok(()) => break,
            Err(d) => {
                done = d;
                link.bell.ring();
                std::thread::yield_now();
            }
        }
    }
    link.bell.ring();
}

/// What a call may teach the reactors' read caches. What a call changes is not
/// decided here: the file model reports each change it executes, whichever
/// operation of whichever COMPOUND or procedure ran it (`fs::ChangeObserver`).
enum CacheEffect {
    None,
    /// GETATTR/READ: snapshot the stamp first; the result may be cached.
    Observe {
        fh: FhKey,
        export: u16,
        stamp: Stamp,
        /// READ (true) or GETATTR (false).
        is_read: bool,
        /// READ offset when the read is small enough to cache its data.
        read: Option<u64>,
        /// An NFSv4.1 `SEQUENCE, PUTFH, GETATTR|READ` COMPOUND (`nfs4::fast`).
        v4: bool,
        /// A listing page: the change counter before it ran (`CacheEffect::listing`).
        listing: Option<u64>,
    },
}

impl CacheEffect {
    fn of(shared: &Shared, job: &Job) -> CacheEffect {
        let h = &job.header;
        if h.prog != NFS_PROGRAM {
            return CacheEffect::None;
        }
        if h.vers == crate::nfs4::NFS_V4 {
            return job
                .plan
                .as_ref()
                .and_then(|plan| observe_v4(shared, &job.record[job.args_at..], plan))
                .unwrap_or(CacheEffect::None);
        }
        let args = &job.record[job.args_at..];
        if let Some(ask) = (crate::front::V3_CACHE.parse_listing)(h.proc_, args) {
            return CacheEffect::listing(shared, ask.fh);
        }
        // A GETATTR or READ, as the front end decodes it.
        let Some(ask) = (crate::front::V3_CACHE.parse)(h.proc_, args) else {
            return CacheEffect::None;
        };
        let (Some((export, fileid)), Some(key)) =
            (FileModel::peek_handle(ask.fh), FhKey::new(ask.fh))
        else {
            return CacheEffect::None;
        };
        CacheEffect::Observe {
            fh: key,
            export,
            stamp: shared.gens.stamp(fileid),
            is_read: ask.read.is_some(),
            read: ask
                .read
                .filter(|(_, count)| (*count as usize) <= cache::MAX_CACHED_READ)
                .map(|(off, _)| off),
            v4: false,
            listing: None,
        }
    }

    /// A listing page of directory `fh` (READDIRPLUS): its attributes are observed
    /// like a GETATTR's, and the page is kept if no file changed while it was listed
    /// (`cache_dirs`), judged from the change counter read now.
    fn listing(shared: &Shared, fh: &[u8]) -> CacheEffect {
        let (Some((export, fileid)), Some(key)) = (FileModel::peek_handle(fh), FhKey::new(fh))
        else {
            return CacheEffect::None;
        };
        // Before the stamp: `cache_dirs` reads stamps, then the counter.
        let changes = shared.gens.changes();
        CacheEffect::Observe {
            fh: key,
            export,
            stamp: shared.gens.stamp(fileid),
            is_read: false,
            read: None,
            v4: false,
            listing: Some(changes),
        }
    }
}

/// A `SEQUENCE, PUTFH, GETATTR|READ` COMPOUND (the shapes the reactor answers from
/// its cache, `nfs4::fast`): observed like an NFSv3 GETATTR or READ of its handle, so
/// a v4-only workload warms the cache. It changes nothing.
fn observe_v4(shared: &Shared, args: &[u8], plan: &crate::front::Plan) -> Option<CacheEffect> {
    let (fh, read) = (crate::front::V4_PATHS.observe)(args, plan)?;
    let (export, fileid) = FileModel::peek_handle(fh)?;
    // A READDIR page may teach the listings (`nfs4::fast_dirs`), as NFSv3's
    // (`CacheEffect::listing`): the counter before the stamp.
    let listing = plan.lists().then(|| shared.gens.changes());
    // A held file teaches the cache only for its holder (one session lookup then).
    let client = match shared.gens.held(fileid) {
        true => (crate::front::V4_PATHS.client)(&shared.state, args, plan),
        false => 0,
    };
    Some(CacheEffect::Observe {
        fh: FhKey::new(fh)?,
        export,
        stamp: shared.gens.stamp_as(fileid, client),
        is_read: read.is_some(),
        read: read
            .filter(|(_, count)| (*count as usize) <= cache::MAX_CACHED_READ)
            .map(|(off, _)| off),
        v4: true,
        listing,
    })
}

/// What the worker saw of a GETATTR or READ before running it.
#[derive(Clone)]
struct Seen {
    fh: FhKey,
    export: u16,
    stamp: Stamp,
    is_read: bool,
    read: Option<u64>,
    /// A listing: the change counter before it ran, and the page it noted.
    listing: Option<(u64, cache::ListedPage)>,
}

/// What a successful GETATTR or READ noted as it ran or was encoded
/// (`call::note_learned`): its attributes and, for a small READ, where its data sits
/// in the reply. `read` is the READ offset when the read is small enough to cache
/// its data. `exact`: NFSv4.1's attributes are the file model's as fetched (no
/// wire rounding), NFSv3's come from its post-op attributes.
fn learned(note: Option<Learned>, seen: Seen, pages: bool, exact: bool) -> Option<Fill> {
    let Seen {
        fh,
        export,
        stamp,
        is_read,
        read,
        listing,
    } = seen;
    let Learned { attr, data } = note?;
    // The stamp was taken for the handle's file id; attributes of anything else
    // must never be cached under this handle.
    if FileModel::peek_handle(fh.bytes()).map(|(_, id)| id) != Some(attr.fileid) {
        return None;
    }
    let data = match (read, listing) {
        (Some(offset), _) if pages && is_read => {
            let (at, len) = data?;
            Some(FillData::InReply { offset, at, len })
        }
        (_, Some((changes, page))) => Some(FillData::Listing(Box::new(cache::ListingFill {
            changes,
            page,
        }))),
        _ => None,
    };
    Some(Fill {
        fh,
        export,
        attr,
        stamp,
        data,
        exact,
    })
}

/// Reads the cache-aligned block around `off` for the reactor's page cache.
fn read_block(shared: &Shared, pools: &Pools, fh: &FhKey, off: u64) -> Option<(u64, Buf)> {
    let block = cache::MAX_CACHED_READ as u64;
    let start = off / block * block;
    let node = shared.model.resolve(fh.bytes()).ok()?;
    let mut buf = pools.alloc(block as usize)?;
    let (n, _) = shared
        .model
        .read(&node, start, &mut buf.spare_mut()[..block as usize])
        .ok()?;
    buf.set_len(n);
    Some((start, buf))
}

/// Bytes of reply buffer a call may need, record-mark slot and RPC header included:
/// what a worker asks the pools for, and what the reactor reserves of a TCP
/// connection's reply budget while the call is being answered (`Router::route`).
pub(crate) fn reply_want(job: &Job) -> usize {
    let (h, args) = (&job.header, &job.record[job.args_at..]);
    // An NFSv4.1 COMPOUND's bound is in its plan (made by the reactor).
    let capacity = match &job.plan {
        Some(plan) => plan.reply,
        None => {
            crate::front::of(h.prog, h.vers).map_or(8192, |fe| (fe.reply_capacity)(h.proc_, args))
        }
    };
    MARK + RPC_HEADER + capacity
}

/// Runs one call and returns its encoded reply (record-mark slot included).
fn execute(shared: &Shared, pools: &Pools, job: &Job) -> Option<Buf> {
    let h = &job.header;
    let args = &job.record[job.args_at..];
    let want = reply_want(job);
    let Some(mut buf) = reply_buffer(pools, want) else {
        tracing::error!(peer = %job.peer, xid = h.xid, "no reply buffer for 1 s; dropping the call (client will retransmit)");
        return None;
    };
    // The export table as of this call (SIGHUP reload publishes a new one).
    let exports = shared.exports.load();
    let ctx = Ctx {
        model: &shared.model,
        exports: &exports,
        mounts: &shared.mounts,
        client: job.peer,
        cred: h.cred,
        conn: Some(job.conn.conn_ref(job.reactor)),
        fence: shared.fence.as_deref(),
    };
    #[cfg(test)]
    if let Some(c) = ctx.conn {
        super::callbacks_tests::note_conn(job.peer, c);
    }
    // The audit log's view of this call (nothing while `[audit]` is off).
    let audit = crate::audit::begin(job.peer, h, args, &exports);
    let results_at;
    let outcome = {
        let mut w = XdrWriter::at(buf.spare_mut(), MARK);
        rpc::write_accepted(&mut w, h.xid, Accept::Success).expect("reply buffer holds a header");
        results_at = w.position();
        // Supervision policy: a procedure that panics answers SYSTEM_ERR for its call.
        let run = crate::supervise::request("worker: running a procedure", || {
            if h.proc_ == 0
                && crate::supervise::hooks::of_xid(h.xid)
                    == Some(crate::supervise::hooks::Hook::WorkerRequest)
            {
                panic!("test hook: panic while running a procedure");
            }
            let Some(fe) = crate::front::of(h.prog, h.vers) else {
                return Outcome::ProcUnavail;
            };
            let touches = || (fe.touches)(h.proc_, args);
            if super::v3_recall::must_wait(shared, touches, job.peer.ip(), &h.cred) {
                // A v4.1 delegation is being recalled: the client retries later.
                return match (fe.fail)(&mut w, h.proc_, crate::fs::Status::Jukebox) {
                    Ok(()) => Outcome::Done,
                    Err(_) => Outcome::GarbageArgs,
                };
            }
            (fe.serve)(&ctx, &shared.state, h.proc_, args, &mut w)
        });
        match run {
            Ok(Outcome::Done) => Ok(w.position()),
            Ok(Outcome::GarbageArgs) => Err(Accept::GarbageArgs),
            Ok(Outcome::ProcUnavail) => Err(Accept::ProcUnavail),
            Err(crate::supervise::Panicked) => {
                tracing::error!(peer = %job.peer, prog = h.prog, proc_ = h.proc_, xid = h.xid,
                    "procedure panicked; answering SYSTEM_ERR");
                Err(Accept::SystemErr)
            }
        }
    };
    let outcome_ok = outcome.is_ok();
    // A non-OK status the front end noted as it encoded (`nfsgw_nfs_errors_total`);
    // a revalidation's reply is not sent (the cache answered the call).
    crate::stats::status::answered(h.proc_, outcome_ok && !job.revalidate);
    let len = match outcome {
        Ok(n) => n,
        Err(stat) => {
            // Results a COMPOUND or procedure noted before it failed are not in
            // this reply.
            let _ = crate::ddp::take();
            let _ = crate::call::take_learned();
            tracing::debug!(peer = %job.peer, prog = h.prog, proc_ = h.proc_, ?stat, "call rejected");
            let mut w = XdrWriter::at(buf.spare_mut(), MARK);
            rpc::write_accepted(&mut w, h.xid, stat).expect("reply buffer holds a header");
            w.position()
        }
    };
    buf.set_len(len);
    if let Some(scope) = audit {
        // The results' first word is the procedure's status (RFC 1813, RFC 8881 §16.2).
        let status = (len >= results_at + 4 && outcome_ok)
            .then(|| u32::from_be_bytes(buf[results_at..results_at + 4].try_into().unwrap()));
        scope.end(status);
    }
    Some(buf)
}
