//! One reactor's state and poll pass: completions from workers go out first, jobs held
//! back by a full ring go next, then sockets are polled for new records.
//!
//! Everything here is owned by the reactor thread. Backpressure: when the job ring is
//! full, jobs wait in `backlog` (in arrival order) and the transport's per-connection
//! in-flight limit stops reading, so the backlog is bounded by connections × in-flight.

use super::direct::{Direct, Finished};
use super::dispatch::{self, Hot, Job, Verdict, MARK};
use super::transport::{Link, PinHome, Pinned, Reply, Reserve, Transports};
use super::Shared;
use crate::cache::ReadCache;
use crate::nfs4::{ConnKind, ConnRef};
use crate::stats::histogram::bucket_of;
use crate::stats::tenants::{conn_key, Seen};
use crate::stats::{slot_of, CallStat, Clock, ReactorStats, Tenants, Transport};
use crate::supervise;
use engine::mem::Buf;
use engine::rdma::server::{
    CallbackError, CallbackOutcome, ConnId as RdmaConnId, Delivered, RdmaServer,
};
use engine::reactor::{Counters, Poller};
use engine::ring::{Doorbell, Ring};
use engine::rpcrdma::responder::DdpList;
use engine::tcp::{Budget, ConnId, TcpTransport};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub(crate) struct ReactorState {
    id: usize,
    /// TCP and RPC-over-RDMA behind one seam (`super::transport`).
    pub(super) net: Transports,
    /// lkey of the cache pages when registered with the RDMA fabric (zero-copy READ).
    pages_lkey: Option<u32>,
    /// Cached TCP READs are sent straight from the cache pages (the cache has pages).
    tcp_pages: bool,
    cache: ReadCache,
    /// This reactor's view of the export table (refreshed after a SIGHUP reload).
    exports: crate::export::LocalExports,
    shared: Arc<Shared>,
    router: Router,
    /// The learned idle spin (`super::spin`).
    spin: super::spin::SpinWindows,
    /// Passes since the TCP sockets were last polled (see `poll`).
    tcp_skipped: u32,
    /// Whether the last TCP poll found work.
    tcp_busy: bool,
    /// Passes counted for the periodic refresh of the connection gauges.
    gauge_passes: u32,
    /// Whether the last pass that did work was bulk TCP transfer (see `note_bulk`).
    tcp_bulk: bool,
    /// TCP (bytes, messages) moved up to the last pass that did work.
    tcp_mark: (u64, u64),
    /// Revalidation GETATTRs made while classifying (see `dispatch::revalidation`),
    /// handed to workers at the end of the pass.
    reval: Vec<Job>,
    /// RDMA callbacks waiting for a reverse credit or transport room (see
    /// `send_calls`), oldest first.
    cb_wait: VecDeque<(RdmaConnId, Buf, std::time::Instant)>,
    /// RDMA calls of the current round (kept: no allocation per pass).
    rdma_calls: Vec<Delivered>,
    /// Calls QoS rules hold back until their buckets refill (`super::held`).
    pub(super) qos: super::held::Gate,
    /// Held calls released this pass (kept: no allocation per pass).
    pub(super) held_ready: Vec<super::held::Held>,
}

/// RDMA callbacks kept waiting per reactor, at most (callbacks are rare; a full queue
/// drops the record: it times out and the RecallDriver resends it).
const CB_WAIT: usize = 64;
/// A waiting callback older than this is dropped: the callback thread's timeout
/// (`state::recall::CB_TIMEOUT`, 5 s) resends it anyway.
const CB_WAIT_MAX: Duration = Duration::from_secs(4);

/// Where a classified call goes: an inline reply into the outbox, a job onto the job
/// ring (or the backlog when it is full), a record to retry. Shared by every transport
/// the reactor polls.
struct Router {
    jobs: Arc<Ring<Job>>,
    worker_bells: Arc<Vec<Arc<Doorbell>>>,
    counters: Arc<Counters>,
    /// This reactor's statistics (it is their only writer) and the clock for latencies.
    stats: Arc<ReactorStats>,
    /// Per-client and per-export counters, and the lookups that pick a call's slots.
    tenants: Tenants,
    clock: Clock,
    /// Jobs the full job ring handed back, oldest first.
    backlog: VecDeque<Job>,
    /// Records waiting for a buffer to answer inline.
    retry: VecDeque<(Link, SocketAddr, Buf, CallStat)>,
    /// Inline TCP replies produced while the TCP transport lent a record from its
    /// `poll` (which borrows the transport: the replies join their connections'
    /// queues right after it, and leave at this pass's `flush` like every TCP reply).
    /// RDMA calls come as events (`RdmaServer::poll_calls`) and are answered at once.
    outbox: Vec<Outgoing>,
    /// Connections to close after this pass: a call on them panicked while being
    /// classified (supervision policy: a bad request costs at most its connection).
    closing: Vec<Link>,
    /// Callback replies (xid, record) to hand to the callback table after this pass.
    cb_replies: Vec<(u32, Buf)>,
    /// This reactor's io_uring READ path (`backend.io = "uring"`), and its pools
    /// (reply buffers for the reads it submits).
    direct: Option<Direct>,
    pools: engine::mem::Pools,
    /// Completions `direct` turned into replies this pass (kept: no allocation).
    finished: Vec<Finished>,
    /// Where the page lists of zero-copy replies dropped unsent go (the transports'
    /// `PinHome`).
    pins: PinHome,
}

/// A TCP reply produced while the TCP transport was lending the record (`poll_sockets`).
type Outgoing = (Link, Reply);

/// With an RDMA transport busy, TCP sockets are polled every this many passes (each
/// TCP poll is an epoll_wait system call), and on every pass while TCP has work.
const TCP_POLL_EVERY: u32 = 32;
/// Idle passes between refreshes of the connection gauges on a reactor that never
/// sleeps (a power of two, so the check compiles to a mask).
const GAUGE_EVERY: u32 = 1024;

/// What a reactor does with its RDMA server before serving on it, at start or when
/// adopted late: the connection gauge, and the read cache's pages registered so
/// cached READs leave from them (the server keeps a handle on the page pools: no
/// drop-order contract). Returns the pages' lkey.
fn prepare_rdma(
    mut r: RdmaServer,
    stats: &Arc<ReactorStats>,
    cache: &ReadCache,
) -> (RdmaServer, Option<u32>) {
    // The RDMA gauge is stored by the transport at each accept and close: exact
    // at any time, whichever passes the reactor publishes the others on.
    let gauge = stats.clone();
    r.publish_connections(Box::new(move |n| gauge.set_rdma_connections(n)));
    let lkey = cache
        .page_pools()
        .and_then(|pages| match r.register_pools(pages) {
            Ok(lkey) => Some(lkey),
            Err(e) => {
                tracing::warn!(
                    "rdma: registering the read cache failed ({e}); cached READs are copied"
                );
                None
            }
        });
    (r, lkey)
}

impl ReactorState {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: usize,
        tcp: TcpTransport,
        rdma: Option<RdmaServer>,
        cache: ReadCache,
        shared: Arc<Shared>,
        jobs: Arc<Ring<Job>>,
        worker_bells: Arc<Vec<Arc<Doorbell>>>,
        counters: Arc<Counters>,
        stats: Arc<ReactorStats>,
        tenants: Tenants,
        direct: Option<Direct>,
    ) -> ReactorState {
        let (rdma, pages_lkey) = match rdma {
            Some(r) => {
                let (r, lkey) = prepare_rdma(r, &stats, &cache);
                (Some(r), lkey)
            }
            None => (None, None),
        };
        let pools = shared.reactors[id].pools.clone();
        let mut tcp = tcp;
        if let Some(pages) = cache.page_pools() {
            // Cached READs leave from these pages (`TcpTransport::send_external`).
            tcp.lend_pages(pages);
        }
        let pins = PinHome::default();
        ReactorState {
            id,
            net: Transports {
                tcp,
                rdma,
                pins: pins.clone(),
            },
            pages_lkey,
            tcp_pages: cache.page_region().is_some(),
            cache,
            exports: crate::export::LocalExports::new(shared.exports.clone()),
            qos: super::held::Gate::new(shared.qos.clone()),
            held_ready: Vec::with_capacity(256),
            shared,
            router: Router {
                jobs,
                worker_bells,
                counters,
                stats,
                tenants,
                clock: Clock::get(),
                backlog: VecDeque::with_capacity(1024),
                retry: VecDeque::with_capacity(64),
                outbox: Vec::with_capacity(256),
                closing: Vec::new(),
                cb_replies: Vec::new(),
                direct,
                pools,
                finished: Vec::with_capacity(crate::uring::ENTRIES as usize),
                pins,
            },
            reval: Vec::with_capacity(64),
            tcp_skipped: 0,
            tcp_busy: true,
            gauge_passes: 0,
            tcp_bulk: false,
            spin: super::spin::SpinWindows::new(),
            tcp_mark: (0, 0),
            cb_wait: VecDeque::new(),
            rdma_calls: Vec::with_capacity(256),
        }
    }

    /// Adopts the RDMA server the `rdma_late` thread made once the listener could
    /// bind (`[ha]`: the service address arrived): from here on as if made at start.
    /// Called on idle passes and every GAUGE_EVERY passes, only while there is none.
    fn adopt_late_rdma(&mut self) {
        let Some(r) = self.shared.reactors[self.id].late_rdma.take() else {
            return;
        };
        if let Some(fd) = r.wait_fd() {
            if let Err(e) = self.net.tcp.register_external(fd) {
                tracing::error!(
                    reactor = self.id,
                    "rdma: registering the fabric's wait fd failed ({e}); RPC-over-RDMA stays off on this reactor"
                );
                return;
            }
        }
        let (r, lkey) = prepare_rdma(r, &self.router.stats, &self.cache);
        self.pages_lkey = lkey;
        self.net.rdma = Some(r);
    }

    pub fn cache_stats(&self) -> crate::cache::CacheStats {
        self.cache.stats()
    }

    /// Publishes the TCP connection count to the stats endpoint (the RDMA one is
    /// published by the transport itself, see `new`).
    fn refresh_gauges(&self) {
        self.router
            .stats
            .set_tcp_connections(self.net.tcp.connections());
    }

    /// Publishes the transports' protective counters (refusals, timeouts, reclaims):
    /// rare events, so only every GAUGE_EVERY passes and before sleeping.
    fn refresh_guards(&self) {
        let t = self.net.tcp.stats();
        let r = self
            .net
            .rdma
            .as_ref()
            .map(|r| r.stats())
            .unwrap_or_default();
        self.router.stats.set_guards([
            t.refused,
            t.evicted,
            t.oversize,
            t.timeouts,
            t.send_timeouts,
            t.reclaimed,
            t.send_reclaimed,
            t.output_stalls,
            t.reply_budget_stalls,
            r.refused_full,
            r.refused_no_buffers,
            r.credits_reduced,
            r.read_timeouts,
            r.rejected,
            r.reply_budget_holds,
            r.send_timeouts,
            r.send_reclaimed,
            r.read_reclaimed,
        ]);
        let c = self.cache.stats();
        self.router
            .stats
            .set_cache(c.hits, c.misses, c.pages as u64);
    }

    /// Sends every reply workers have finished for this reactor.
    fn drain_done(&mut self) -> usize {
        let done = &self.shared.reactors[self.id].done;
        let mut n = 0;
        // One clock reading per batch: replies leave in this pass.
        let mut now = None;
        while let Some(d) = done.pop() {
            if let (Some(o), Some(direct)) = (d.opened, self.router.direct.as_mut()) {
                direct.learn(o);
            }
            let read_ahead = d.reply.is_none() && d.fill.is_some();
            if let Some(fill) = d.fill {
                let (cache, gens) = (&mut self.cache, &self.shared.gens);
                let reply = d.reply.as_deref();
                if supervise::request("reactor: filling the read cache", || {
                    cache.fill(gens, fill, reply)
                })
                .is_err()
                {
                    // The cache may be half-updated: make every cached entry stale.
                    self.shared.gens.bump_all();
                }
            }
            if read_ahead {
                continue;
            }
            let router = &self.router;
            let clock = &router.clock;
            router.stats.from_worker();
            let t = *now.get_or_insert_with(|| clock.now());
            let ns = clock.ns_between(d.stat.t0, t);
            let head = d.reply.as_ref().map_or(0, |b| b.len());
            let out = if d.stat.transport == Transport::Rdma as u8 {
                head.saturating_sub(MARK)
            } else {
                head
            };
            router.finished_bytes(d.stat, ns, out);
            self.net.send_done(
                d.conn,
                d.reply,
                d.charge,
                d.located,
                &router.stats,
                &mut self.cache,
            );
            n += 1;
        }
        n
    }

    /// Polls sockets (waiting up to `timeout`) and classifies every record received.
    fn poll_sockets(&mut self, timeout: Duration) -> usize {
        self.take_sockets(Some(timeout))
    }

    /// `poll_sockets`; with no `wait`, only the connections `TcpTransport::wait_input`
    /// queued are read.
    fn take_sockets(&mut self, wait: Option<Duration>) -> usize {
        let retries = self.router.retry.len();
        for _ in 0..retries {
            let (conn, peer, rec, st) = self.router.retry.pop_front().expect("counted");
            self.take_record(conn, peer, rec, st);
        }
        let ReactorState {
            id,
            net,
            pages_lkey,
            tcp_pages,
            cache,
            exports,
            shared,
            router,
            reval,
            qos,
            ..
        } = self;
        let pools = &shared.reactors[*id].pools;
        let mut hot = Hot {
            cache,
            pages_lkey: *pages_lkey,
            tcp_pages: *tcp_pages,
            gens: &shared.gens,
            exports,
            state: &shared.state,
            revalidate: reval,
            seen: Seen::NONE,
            count: router.tenants.counting(),
            rdma: false,
        };
        // A job charges its reply bytes to `budget` (`route`) before the connection's
        // next record is read.
        let mut handle = |conn: ConnId, peer: SocketAddr, rec: Buf, budget: &Budget| {
            let (key, len) = (conn_key(&conn), rec.len());
            let mut st = router.count_in(&rec, Transport::Tcp);
            let conn = Link::tcp(conn);
            // QoS: a held call stays in flight, its record's bytes charged to `budget`.
            let rec = if qos.on {
                let cost = router.qos_cost(&rec, &mut st, key, &peer);
                match super::held::tcp(qos, conn, peer, rec, st, cost, budget) {
                    Some(rec) => rec,
                    None => return,
                }
            } else {
                rec
            };
            let mut work = None;
            match supervise::request("reactor: classifying a TCP call", || {
                dispatch::classify(*id, conn, peer, rec, pools, &mut hot, None, None, &mut work)
            }) {
                Ok(v) => {
                    router.classified(&mut st, key, false, &peer, hot.seen, len);
                    let from = Reserve::Polled(budget);
                    if let Some(reply) = router.route(v, &mut work, conn, peer, st, from) {
                        router.outbox.push((conn, reply));
                    }
                }
                Err(supervise::Panicked) => router.closing.push(conn),
            }
        };
        let n = match wait {
            Some(t) => net.tcp.poll(Some(t), &mut handle),
            None => net.tcp.poll_queued(&mut handle),
        };
        self.flush_outbox();
        n + retries
    }

    /// Polls the RPC-over-RDMA transport for its calls (events, not a callback: the
    /// server is free while they are classified) and answers them in this pass: inline
    /// replies go to the server as each call is classified, and `flush_calls` posts
    /// them (RDMA Writes and Sends) before the pass moves on. Bounded: each round
    /// answers only calls the connections' credits admitted.
    fn poll_rdma(&mut self) -> usize {
        let Some(rdma) = self.net.rdma.as_mut() else {
            return 0;
        };
        // Cache pages whose RDMA Writes are done may be reused again.
        let cache = &mut self.cache;
        rdma.take_released(&mut |tag| cache.unpin(tag));
        let mut calls = std::mem::take(&mut self.rdma_calls);
        let mut n = rdma.poll_calls(&mut calls);
        while !calls.is_empty() {
            for d in calls.drain(..) {
                let mut st = self.router.count_in(&d.record, Transport::Rdma);
                // QoS: a held call keeps its credit until it is answered.
                let d = if self.qos.on {
                    let key = conn_key(&d.call.conn());
                    let cost = self.router.qos_cost(&d.record, &mut st, key, &d.peer);
                    match super::held::rdma(&mut self.qos, d, st, cost) {
                        Some(d) => d,
                        None => continue,
                    }
                } else {
                    d
                };
                self.take_rdma_call(d, st);
            }
            self.end_of_round();
            let Some(rdma) = self.net.rdma.as_mut() else {
                break;
            };
            n += rdma.flush_calls(&mut calls);
        }
        self.rdma_calls = calls;
        n
    }

    /// One RDMA call: a call whose reduced items break the NFS binding gets
    /// GARBAGE_ARGS (RFC 8166 §6.1); the rest are classified like TCP records.
    /// `st`: the call as `Router::count_in` counted it on arrival.
    pub(super) fn take_rdma_call(&mut self, d: Delivered, mut st: CallStat) {
        let Delivered {
            call,
            peer,
            record: rec,
            write_room: room,
        } = d;
        let ReactorState {
            id,
            net,
            pages_lkey,
            tcp_pages,
            cache,
            exports,
            shared,
            router,
            reval,
            ..
        } = self;
        let Some(rdma) = net.rdma.as_ref() else {
            return;
        };
        let reduced = rdma.reduced(call);
        let (key, len) = (conn_key(&call.conn()), rec.len());
        let pools = &shared.reactors[*id].pools;
        let mut hot = Hot {
            cache,
            pages_lkey: *pages_lkey,
            tcp_pages: *tcp_pages,
            gens: &shared.gens,
            exports,
            state: &shared.state,
            revalidate: reval,
            seen: Seen::NONE,
            count: router.tenants.counting(),
            rdma: true,
        };
        let mut work = None;
        let classified = supervise::request("reactor: classifying an RDMA call", || {
            match crate::ulb::check_call_planned(&rec, reduced, crate::front::V4_PATHS.plan_ddp) {
                Ok((item, plan)) => {
                    let conn = Link::rdma(call, item);
                    // NFSv3 READ's data item, or an NFSv4 COMPOUND's (the v4 fast
                    // path answers `SEQUENCE, PUTFH, READ` from the cache pages).
                    let room = room.filter(|_| {
                        matches!(
                            item,
                            crate::ulb::ReplyItem::ReadData | crate::ulb::ReplyItem::Compound
                        )
                    });
                    (
                        conn,
                        dispatch::classify(
                            *id, conn, peer, rec, pools, &mut hot, room, plan, &mut work,
                        ),
                    )
                }
                Err(v) => {
                    tracing::debug!(%peer, xid = v.xid, "rdma: reduced item not DDP-eligible; GARBAGE_ARGS");
                    let conn = Link::rdma(call, crate::ulb::ReplyItem::None);
                    (conn, dispatch::garbage_args(v.xid, rec, pools))
                }
            }
        });
        match classified {
            Ok((conn, v)) => {
                router.classified(&mut st, key, true, &peer, hot.seen, len);
                // A cached NFSv4 answer with its READ's outcome: the transport places
                // the data in the write chunk from it (RFC 8267 §6.4.1), not by
                // reading the reply.
                if let Verdict::ReplyLocated(b, located) = v {
                    let ns = router.clock.ns_between(st.t0, router.clock.now());
                    router.finished_bytes(st, ns, b.len().saturating_sub(MARK));
                    net.send_done(conn, Some(b), None, Some(located), &router.stats, cache);
                    return;
                }
                // RDMA calls reserve nothing: credits bound them (see `route`).
                if let Some(reply) = router.route(v, &mut work, conn, peer, st, Reserve::Never) {
                    net.send(conn, reply, &router.stats, cache);
                }
            }
            Err(supervise::Panicked) => router
                .closing
                .push(Link::rdma(call, crate::ulb::ReplyItem::None)),
        }
    }

    pub(super) fn take_record(&mut self, conn: Link, peer: SocketAddr, rec: Buf, st: CallStat) {
        let pools = &self.shared.reactors[self.id].pools;
        let mut hot = Hot {
            cache: &mut self.cache,
            pages_lkey: None,
            tcp_pages: self.tcp_pages,
            gens: &self.shared.gens,
            exports: &mut self.exports,
            state: &self.shared.state,
            revalidate: &mut self.reval,
            seen: Seen::NONE,
            count: self.router.tenants.counting(),
            rdma: conn.tcp_conn().is_none(),
        };
        let mut work = None;
        match supervise::request("reactor: classifying a parked call", || {
            dispatch::classify(
                self.id, conn, peer, rec, pools, &mut hot, None, None, &mut work,
            )
        }) {
            Ok(v) => {
                // Classified outside the transport's poll: charged now.
                let from = Reserve::Later(&mut self.net.tcp);
                if let Some(reply) = self.router.route(v, &mut work, conn, peer, st, from) {
                    self.net
                        .send(conn, reply, &self.router.stats, &mut self.cache);
                }
            }
            Err(supervise::Panicked) => self.router.closing.push(conn),
        }
    }

    /// Sends the TCP replies of this poll (they join their connections' queues and
    /// leave at this pass's `flush`), after the round's bookkeeping.
    fn flush_outbox(&mut self) {
        self.end_of_round();
        // Most passes answered nothing: an empty `drain` still costs its iterator
        // and its drop on every pass.
        if self.router.outbox.is_empty() {
            return;
        }
        for (conn, reply) in self.router.outbox.drain(..) {
            self.net
                .send(conn, reply, &self.router.stats, &mut self.cache);
        }
    }

    /// After a round of classified calls: closes the connections whose call panicked,
    /// hands revalidations to workers, and callback replies to the callback table.
    pub(super) fn end_of_round(&mut self) {
        if !self.router.closing.is_empty() {
            self.close_panicked();
        }
        if !self.reval.is_empty() {
            self.start_revalidations();
        }
        if !self.router.cb_replies.is_empty() {
            self.hand_callback_replies();
        }
    }

    #[cold]
    fn hand_callback_replies(&mut self) {
        for (xid, rec) in self.router.cb_replies.drain(..) {
            self.shared.state.delegations.callback_reply(xid, &rec);
        }
    }
}

impl ReactorState {
    /// Hands the revalidation GETATTRs of this pass to workers. They answer no call
    /// (not counted as calls at workers); with the job ring full one is dropped, and
    /// its entry is served stale until `cache::STALE_MAX`, then goes to workers.
    #[cold]
    fn start_revalidations(&mut self) {
        let mut pushed = false;
        let mut reval = std::mem::take(&mut self.reval);
        for job in reval.drain(..) {
            // A file the reactor holds open is revalidated on its ring (a statx).
            let job = match self.router.direct.as_mut() {
                Some(d) => match d.try_take(job, &self.router.pools) {
                    Ok(()) => continue,
                    Err(job) => job,
                },
                None => job,
            };
            // A revalidation GETATTR changes nothing: never counted (`Job::changes`).
            pushed |= self.router.jobs.push(job).is_ok();
        }
        self.reval = reval;
        if pushed {
            wake_worker(&self.router.worker_bells);
        }
    }

    /// Unpins the cache pages of TCP replies the kernel now holds (or whose
    /// connection closed), so eviction may reuse them; takes back the pipes of
    /// spliced replies likewise.
    fn release_tcp_pages(&mut self) {
        let cache = &mut self.cache;
        self.net.tcp.take_released(&mut |list| cache.release(list));
        self.net.take_unsent(&mut |list| cache.release(list));
        if let Some(d) = self.router.direct.as_mut() {
            self.net.tcp.take_released_pipes(&mut |p| d.put_pipe(p));
        }
    }

    /// Sends a READ reply whose data waits in a pipe (`server::direct`, TCP only).
    fn send_spliced(
        &mut self,
        job: super::dispatch::Job,
        head: engine::mem::Buf,
        pipe: engine::tcp::Pipe,
    ) {
        let router = &self.router;
        let clock = &router.clock;
        let ns = clock.ns_between(job.stat.t0, clock.now());
        let data = pipe.filled();
        router.finished_bytes(job.stat, ns, head.len() + data.next_multiple_of(4));
        let mut job = job;
        let charge = job.charge.take();
        if let Err(pipe) = self
            .net
            .send_pipe(job.conn, head, pipe, charge, &router.stats)
        {
            // Never made (`read_spliced` takes TCP calls only); dropped safely.
            tracing::error!("a spliced READ reply for a call not on TCP; dropped");
            if let Some(d) = self.router.direct.as_mut() {
                d.put_pipe(pipe);
            }
        }
    }

    /// Closes the connections whose call panicked while being classified (their
    /// buffers come back through the transports' close paths), and makes every cached
    /// entry stale, since the panic may have left the cache half-updated.
    #[cold]
    fn close_panicked(&mut self) {
        self.shared.gens.bump_all();
        for conn in std::mem::take(&mut self.router.closing) {
            self.net.close(conn, self.id);
        }
    }
}

impl Router {
    /// Counts a received call for the reactor and notes when it arrived: all a call
    /// pays when no QoS rule exists (the per-client pair is found later, from what
    /// `classify` decoded: `classified`). Inlined into both transports' loops: it is
    /// on every call's path (docs/performance.md, "the architecture's per-call budget").
    #[inline(always)]
    fn count_in(&self, rec: &[u8], transport: Transport) -> CallStat {
        let slot = slot_of(rec);
        self.stats.call_in(transport, slot, rec.len());
        CallStat {
            t0: self.clock.now(),
            slot,
            transport: transport as u8,
            pair: crate::stats::tenants::UNCOUNTED,
        }
    }

    /// When a QoS rule exists: what the call (on connection `conn`, a `conn_key`, from
    /// `peer`) costs QoS, from the one peek at the record, which counts it for its
    /// client and export too (`stats::Tenants::call_in`, the pair kept in `st`).
    #[inline(never)]
    fn qos_cost(
        &mut self,
        rec: &[u8],
        st: &mut CallStat,
        conn: u64,
        peer: &SocketAddr,
    ) -> crate::qos::Cost {
        let rdma = st.transport == Transport::Rdma as u8;
        let (pair, peek) = self.tenants.call_in(conn, rdma, peer, rec, st.slot, true);
        st.pair = pair;
        peek.into()
    }

    /// Counts a call classified from `seen` (`dispatch::Hot::seen`) for its client and
    /// export, unless `count_in` counted it on arrival (`stats::Tenants::classified`).
    /// `rdma` is the caller's transport, a constant at each call site (not read back
    /// from `st`: a per-call load and compare on the per-client budget).
    #[inline]
    fn classified(
        &mut self,
        st: &mut CallStat,
        conn: u64,
        rdma: bool,
        peer: &SocketAddr,
        seen: Seen,
        len: usize,
    ) {
        debug_assert_eq!(rdma, st.transport == Transport::Rdma as u8);
        self.tenants
            .classified(&mut st.pair, conn, rdma, peer, seen, len);
    }

    /// Records a call's latency `ns` and its reply for the reactor's and the
    /// per-client and per-export statistics.
    /// Reply bytes as `nfsgw_bytes_out_total` counts them (`Transports::send`).
    #[inline]
    fn finished(&self, st: CallStat, ns: u64, reply: &Reply) {
        let data = reply.pages.as_ref().map_or(0, |p| p.data_len());
        let head = reply.buf.as_ref().map_or(0, |b| b.len());
        let out = if st.transport == Transport::Rdma as u8 {
            head.saturating_sub(MARK) + data
        } else {
            head + data.next_multiple_of(4)
        };
        self.finished_bytes(st, ns, out);
    }

    #[inline]
    fn finished_bytes(&self, st: CallStat, ns: u64, out: usize) {
        let bucket = bucket_of(ns);
        self.stats.call_done_at(st, bucket, ns);
        self.tenants.answered(st.pair, bucket, ns, out);
    }

    /// Acts on a verdict: hands back a reply to send now, or queues a job or a retry.
    /// A job reserves the reply bytes it may need in its TCP connection's budget
    /// (`Job::charge`, taken `from` the budget the poll lent or the transport, given
    /// back when dropped): a call a worker or the ring answers later reserves the reply
    /// buffer it may need (`worker::reply_want`), so a client that pipelines large
    /// READs and reads nothing is stopped at `tcp.max_queued_mib` of replies in
    /// production or queued, instead of holding a large buffer per call in flight
    /// (Standards: no pinned shared buffers). Inline replies reserve nothing (they
    /// leave in this pass). RDMA calls reserve nothing either: the client's credits
    /// bound them.
    fn route(
        &mut self,
        v: Verdict,
        work: &mut Option<Job>,
        conn: Link,
        peer: SocketAddr,
        st: CallStat,
        from: Reserve,
    ) -> Option<Reply> {
        let reply = match v {
            Verdict::Drop => Reply::none(),
            Verdict::Reply(b) => Reply::of(b),
            // Over TCP nothing needs the READ's location (RDMA takes it in
            // `take_rdma_call`, before routing).
            Verdict::ReplyLocated(b, _) => Reply::of(b),
            Verdict::ReplyPages(b, pages) => Reply {
                buf: Some(b),
                pages: Some(Pinned::new(pages, &self.pins)),
                charge: None,
            },
            Verdict::CallbackReply(xid, rec) => {
                // The record answers nothing: release it like a dropped call.
                self.cb_replies.push((xid, rec));
                Reply::none()
            }
            Verdict::Retry(rec) => {
                Counters::add(&self.counters.parked, 1);
                self.retry.push_back((conn, peer, rec, st));
                return None;
            }
            Verdict::Work => {
                let Some(mut job) = work.take() else {
                    debug_assert!(false, "a Work verdict without its job");
                    return None;
                };
                job.stat = st;
                let want = super::worker::reply_want(&job);
                job.charge = job.conn.charge(want, from);
                let job = match self.direct.as_mut() {
                    Some(d) => match d.try_take(job, &self.pools) {
                        Ok(()) => return None,
                        Err(job) => job,
                    },
                    None => job,
                };
                self.queue_job(job);
                return None;
            }
        };
        self.finished(st, self.clock.ns_between(st.t0, self.clock.now()), &reply);
        Some(reply)
    }

    /// Queues a job for the workers (the job ring, or the backlog when it is full).
    fn queue_job(&mut self, job: Job) {
        self.stats.to_worker();
        if !self.backlog.is_empty() {
            self.backlog.push_back(job);
            Counters::add(&self.counters.parked, 1);
            return;
        }
        // Counted in before the push: the worker may finish it before push returns.
        let changes = job.changes;
        if changes {
            crate::backend::pending::queued(1);
        }
        match self.jobs.push(job) {
            Ok(()) => wake_worker(&self.worker_bells),
            Err(job) => {
                if changes {
                    crate::backend::pending::unqueued();
                }
                Counters::add(&self.counters.parked, 1);
                self.backlog.push_back(job);
            }
        }
    }

    /// Moves backlogged jobs onto the ring until it is full again.
    fn flush_backlog(&mut self) -> usize {
        let mut n = 0;
        while let Some(job) = self.backlog.pop_front() {
            let changes = job.changes;
            if changes {
                crate::backend::pending::queued(1);
            }
            if let Err(job) = self.jobs.push(job) {
                if changes {
                    crate::backend::pending::unqueued();
                }
                self.backlog.push_front(job);
                break;
            }
            n += 1;
        }
        if n > 0 {
            wake_worker(&self.worker_bells);
        }
        n
    }
}

/// Wakes one sleeping worker, if any sleeps (awake workers find the job themselves):
/// the lowest-numbered one, so that a light load keeps landing on the same few
/// threads (their caches and malloc arenas warm) and the rest of `backend.workers`
/// (32 by default, sized for flush waits) stays asleep until concurrency needs it.
/// A round robin spread even one client's calls over every worker: each thread's
/// arena then held its share of a big listing (`test_big_dirs.py`'s RSS bound).
fn wake_worker(bells: &[Arc<Doorbell>]) {
    for bell in bells {
        if bell.ring() {
            return;
        }
    }
}

impl ReactorState {
    /// Sends the callback records the callback thread queued for this reactor's
    /// connections (NFSv4.1 back channel; a closed connection drops its record and
    /// the callback times out and is retried on the client's next binding). TCP
    /// records go with their record mark; RDMA ones as RFC 8167 reverse calls.
    fn send_calls(&mut self) -> usize {
        let calls = self.shared.reactors[self.id].calls.clone();
        let mut n = 0;
        while let Some((conn, buf)) = calls.pop() {
            match conn {
                ConnKind::Tcp(c) => {
                    self.router.stats.bytes_out(Transport::Tcp, buf.len());
                    let xid = call_xid(&buf);
                    if !self.net.tcp.send_call(c, buf) {
                        // Closed meanwhile: retry on the next binding after the backoff.
                        self.shared.state.delegations.callback_failed(xid);
                    }
                }
                ConnKind::Rdma(c) => self.send_rdma_call(c, buf, std::time::Instant::now()),
            }
            n += 1;
        }
        n
    }

    /// One callback on an RPC-over-RDMA connection (RFC 8167; the record without its
    /// record-mark room). `NoCredit` (the client's reverse credits are all in use,
    /// R8167-02) and `Busy` keep it in `cb_wait` for a later pass, bounded by `CB_WAIT`
    /// and `CB_WAIT_MAX`; `TooLarge` (over the client's inline threshold: callbacks
    /// are Short only, R8167-05/13) is logged and dropped; `Gone` is dropped (the
    /// recall is resent on the connection the client binds next, R8167-17).
    fn send_rdma_call(&mut self, conn: RdmaConnId, buf: Buf, queued: std::time::Instant) {
        let Some(r) = self.net.rdma.as_mut() else {
            return;
        };
        let rec = buf.get(MARK..).unwrap_or_default();
        match r.send_callback(conn, rec) {
            Ok(()) => self.router.stats.bytes_out(Transport::Rdma, rec.len()),
            Err(CallbackError::NoCredit | CallbackError::Busy) => {
                if self.cb_wait.len() < CB_WAIT {
                    self.cb_wait.push_back((conn, buf, queued));
                } else {
                    tracing::debug!("rdma: callback wait queue full; the callback will be resent");
                    self.shared
                        .state
                        .delegations
                        .callback_failed(call_xid(&buf));
                }
            }
            Err(CallbackError::TooLarge) => tracing::warn!(
                len = rec.len(),
                "rdma: callback larger than the client's inline threshold; dropped"
            ),
            Err(CallbackError::Gone) => {
                // Resent after the backoff on the connection the client binds next.
                tracing::debug!("rdma: callback for a closed connection; dropped");
                self.shared
                    .state
                    .delegations
                    .callback_failed(call_xid(&buf));
            }
        }
    }

    /// Back-channel bookkeeping of one pass (called from `poll`, never from inside a
    /// transport's poll): retries RDMA callbacks that waited for a credit, hands
    /// RDMA callback outcomes to the callback table (a REPLY as TCP's are; RDMA_ERROR
    /// and loss as failures the RecallDriver retries, R8167-16/17), and makes the
    /// sessions bound to connections that closed (TCP or RDMA) forget them (they then
    /// report SEQ4_STATUS_CB_PATH_DOWN until the client binds another).
    fn back_channel_events(&mut self) -> usize {
        let mut work = 0;
        let reactor = self.id;
        let state = &self.shared.state;
        let cb_wait = &mut self.cb_wait;
        let mut closed = |kind: ConnKind| {
            if let ConnKind::Rdma(c) = kind {
                cb_wait.retain(|(w, _, _)| *w != c);
            }
            // Clients left without a back channel get no new delegations until the
            // probe of the next binding is answered.
            for id in state.clients.forget_conn(&ConnRef { reactor, kind }) {
                state.delegations.set_callback_up(id, false);
            }
        };
        self.net.tcp.take_closed(&mut |c| closed(ConnKind::Tcp(c)));
        if let Some(r) = self.net.rdma.as_mut() {
            r.take_closed(&mut |c| closed(ConnKind::Rdma(c)));
            let dl = &self.shared.state.delegations;
            r.take_callback_events(&mut |_conn, xid, outcome| {
                work += 1;
                match outcome {
                    CallbackOutcome::Reply(rec) => dl.callback_reply_via(Transport::Rdma, xid, rec),
                    CallbackOutcome::Error | CallbackOutcome::Lost => dl.callback_failed(xid),
                }
            });
        }
        if !self.cb_wait.is_empty() {
            let now = std::time::Instant::now();
            for _ in 0..self.cb_wait.len() {
                let Some((c, buf, queued)) = self.cb_wait.pop_front() else {
                    break;
                };
                if now.saturating_duration_since(queued) < CB_WAIT_MAX {
                    self.send_rdma_call(c, buf, queued);
                } else {
                    self.shared
                        .state
                        .delegations
                        .callback_failed(call_xid(&buf));
                }
            }
        }
        work
    }
}

/// The XID of a callback record queued with its record-mark room (0 if too short: it
/// then matches no callback and the report is ignored).
fn call_xid(buf: &[u8]) -> u32 {
    buf.get(MARK..MARK + 4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_be_bytes)
}

impl ReactorState {
    /// The io_uring READ path's share of a pass: submits the reads this pass queued
    /// (one system call), reaps what completed (reads of cached pages often complete
    /// during the submit itself) and sends their replies, after learning small ones
    /// into the read cache as a worker's READ would be; a failed read goes to a worker.
    fn direct_io(&mut self) -> usize {
        let Some(direct) = self.router.direct.as_mut() else {
            return 0;
        };
        let mut finished = std::mem::take(&mut self.router.finished);
        let n = direct.poll(&mut finished, &self.router.pools);
        // Most passes complete nothing: skip the empty `drain` (its drop runs anyway).
        if finished.is_empty() {
            self.router.finished = finished;
            return n;
        }
        let mut now = None;
        for f in finished.drain(..) {
            match f {
                Finished::Reply(mut job, reply, fill, data) => {
                    if let Some(fill) = fill {
                        let (cache, gens) = (&mut self.cache, &self.shared.gens);
                        if supervise::request("reactor: filling the read cache", || {
                            cache.fill(gens, fill, Some(&reply))
                        })
                        .is_err()
                        {
                            self.shared.gens.bump_all();
                        }
                    }
                    let router = &self.router;
                    let clock = &router.clock;
                    let t = *now.get_or_insert_with(|| clock.now());
                    let ns = clock.ns_between(job.stat.t0, t);
                    let out = match job.stat.transport {
                        t if t == Transport::Rdma as u8 => reply.len().saturating_sub(MARK),
                        _ => reply.len(),
                    };
                    router.finished_bytes(job.stat, ns, out);
                    // A READ's outcome places its data (RDMA only).
                    let (charge, located) =
                        (job.charge.take(), data.map(|d| DdpList::from(Some(d))));
                    let (stats, cache) = (&router.stats, &mut self.cache);
                    self.net
                        .send_done(job.conn, Some(reply), charge, located, stats, cache);
                }
                // A revalidation GETATTR is not a call in flight (its call was
                // answered): it goes the way such jobs go.
                Finished::Fallback(job) if job.revalidate => self.reval.push(job),
                Finished::Fallback(job) => self.router.queue_job(job),
                Finished::Learned(fill) => {
                    let (cache, gens) = (&mut self.cache, &self.shared.gens);
                    if supervise::request("reactor: filling the read cache", || {
                        cache.fill(gens, fill, None)
                    })
                    .is_err()
                    {
                        self.shared.gens.bump_all();
                    }
                }
                Finished::ReplyPipe(job, head, pipe) => self.send_spliced(job, head, pipe),
            }
        }
        self.router.finished = finished;
        if !self.reval.is_empty() {
            self.start_revalidations();
        }
        n
    }
}

impl ReactorState {
    /// After a pass that did work: was it bulk transfer? Yes when the TCP bytes it
    /// moved (in and out) average `BULK_BYTES` or more per record or reply — a
    /// large WRITE record arriving in pieces (no message completes until the last),
    /// or large READ replies — and no when small calls dominate, so a QD32 burst of
    /// 4 KiB READs (many messages) still spins for the next call.
    fn note_bulk(&mut self) {
        let t = self.net.tcp.stats();
        let bytes = t.bytes_in + t.bytes_out + t.bytes_spliced;
        let msgs = t.records_in + t.replies_out;
        let (b0, m0) = self.tcp_mark;
        self.tcp_mark = (bytes, msgs);
        let moved = bytes.wrapping_sub(b0);
        self.tcp_bulk = moved >= u64::from(crate::uring::BULK_BYTES) * msgs.wrapping_sub(m0).max(1);
    }
}

impl Poller for ReactorState {
    fn poll(&mut self) -> usize {
        let mut work = self.drain_done();
        if !self.shared.reactors[self.id].calls.is_empty() {
            work += self.send_calls();
        }
        if !self.router.backlog.is_empty() {
            work += self.router.flush_backlog();
        }
        self.qos.refresh();
        if self.qos.holding() {
            work += self.release_held();
        }
        let rdma_work = self.poll_rdma();
        work += rdma_work;
        // Rule: TCP is polled on every pass unless RDMA is doing the work; then every
        // TCP_POLL_EVERY passes (or at once when TCP was busy), so a busy RDMA reactor
        // does not pay a system call per pass. A sleeping reactor waits on both.
        self.tcp_skipped += 1;
        if rdma_work == 0 || self.tcp_busy || self.tcp_skipped >= TCP_POLL_EVERY {
            let n = self.poll_sockets(Duration::ZERO);
            self.tcp_busy = n > 0;
            self.tcp_skipped = 0;
            work += n;
        }
        // TCP connection gauge: refreshed on passes that did work (accepts and new
        // connections' first calls are work), before sleeping (closes), and every
        // GAUGE_EVERY passes (a busy reactor that never sleeps) — not on every empty
        // pass, which would add stores to the tightest loop.
        self.gauge_passes = self.gauge_passes.wrapping_add(1);
        if work > 0 || self.gauge_passes.is_multiple_of(GAUGE_EVERY) {
            self.refresh_gauges();
        }
        if self.net.rdma.is_none()
            && (work == 0 || self.gauge_passes.is_multiple_of(GAUGE_EVERY))
            && self.shared.reactors[self.id].late_rdma.pending()
        {
            self.adopt_late_rdma();
        }
        if self.gauge_passes.is_multiple_of(GAUGE_EVERY) {
            self.refresh_guards();
            if let Some(d) = self.router.direct.as_mut() {
                d.sweep();
            }
        }
        work += self.back_channel_events();
        if self.router.direct.is_some() {
            work += self.direct_io();
        }
        // One vectored write per connection for everything answered in this pass.
        self.net.tcp.flush();
        self.release_tcp_pages();
        if crate::supervise::hooks::kill_pending() {
            panic!("test hook: reactor thread killed outside any request");
        }
        if work > 0 {
            self.note_bulk();
            self.spin.busy();
        }
        work
    }

    /// Rule (engine.idle_bulk_spin_us): bulk TCP transfer in the last busy pass, or
    /// a large copy in flight on the ring.
    fn bulk(&self) -> bool {
        self.tcp_bulk || self.router.direct.as_ref().is_some_and(|d| d.bulk())
    }

    fn spin(&mut self, spin: Duration, bulk_spin: Duration) -> Duration {
        use super::spin::Wait;
        let bulk = self.bulk();
        let at_workers = self.router.stats.at_workers() > 0;
        let (spin, wait) = match (bulk, at_workers) {
            (true, _) => (bulk_spin, Wait::Bulk),
            (false, true) => (spin, Wait::Workers),
            (false, false) => (spin, Wait::Clients),
        };
        self.spin.idle(spin, || wait)
    }

    fn sleep(&mut self, max: Duration) {
        self.refresh_gauges();
        self.refresh_guards();
        let bell = self.shared.reactors[self.id].bell.clone();
        bell.prepare_sleep();
        let rdma_idle = self.net.rdma.as_mut().is_none_or(|r| r.arm());
        if let Some(d) = self.router.direct.as_mut() {
            d.sweep();
        }
        let uring_idle = self.router.direct.as_mut().is_none_or(|d| d.may_sleep());
        if !uring_idle
            || !self.shared.reactors[self.id].done.is_empty()
            || !self.shared.reactors[self.id].calls.is_empty()
            || !self.router.backlog.is_empty()
            || !self.router.retry.is_empty()
            || !rdma_idle
        {
            bell.woke();
            return;
        }
        // Held calls: wake when the first may start.
        let max = if self.qos.holding() {
            max.min(Duration::from_nanos(self.qos.sleep_ns()))
        } else {
            max
        };
        // Woken: what workers sent meanwhile is taken before the calls that woke it.
        // Their fills may be what those calls are answered from: another reactor's
        // creates in a directory this one lists (`worker::tell_other_reactors`, sent
        // without waking a sleeping reactor).
        self.net.tcp.wait_input(Some(max));
        self.drain_done();
        self.take_sockets(None);
        self.net.tcp.flush();
        self.release_tcp_pages();
        bell.woke();
    }
}
