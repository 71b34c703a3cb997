//! One reactor's state and poll pass: completions from workers go out first, jobs held
//! back by a full ring go next, then sockets are polled for new records.
//!
//! Everything here is owned by the reactor thread. Backpressure: when the job ring is
//! full, jobs wait in `backlog` (in arrival order) and the transport's per-connection
//! in-flight limit stops reading, so the backlog is bounded by connections × in-flight.

use super::dispatch::{self, Hot, Job, Verdict};
use super::Shared;
use crate::cache::ReadCache;
use engine::mem::Buf;
use engine::reactor::{Counters, Poller};
use engine::ring::{Doorbell, Ring};
use engine::tcp::{ConnId, TcpTransport};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

pub(crate) struct ReactorState {
    id: usize,
    tcp: TcpTransport,
    cache: ReadCache,
    shared: Arc<Shared>,
    jobs: Arc<Ring<Job>>,
    worker_bells: Arc<Vec<Arc<Doorbell>>>,
    counters: Arc<Counters>,
    /// Jobs the full job ring handed back, oldest first.
    backlog: VecDeque<Job>,
    /// Records waiting for a buffer to answer inline.
    retry: VecDeque<(ConnId, SocketAddr, Buf)>,
    /// Inline replies produced while the transport was borrowed by `poll`.
    outbox: Vec<(ConnId, Option<Buf>)>,
    next_bell: usize,
}

impl ReactorState {
    pub fn new(
        id: usize,
        tcp: TcpTransport,
        cache: ReadCache,
        shared: Arc<Shared>,
        jobs: Arc<Ring<Job>>,
        worker_bells: Arc<Vec<Arc<Doorbell>>>,
        counters: Arc<Counters>,
    ) -> ReactorState {
        ReactorState {
            id,
            tcp,
            cache,
            shared,
            jobs,
            worker_bells,
            counters,
            backlog: VecDeque::with_capacity(1024),
            retry: VecDeque::with_capacity(64),
            outbox: Vec::with_capacity(256),
            next_bell: 0,
        }
    }

    pub fn cache_stats(&self) -> crate::cache::CacheStats {
        self.cache.stats()
    }

    /// Sends every reply workers have finished for this reactor.
    fn drain_done(&mut self) -> usize {
        let done = &self.shared.reactors[self.id].done;
        let mut n = 0;
        while let Some(d) = done.pop() {
            let read_ahead = d.reply.is_none() && d.fill.is_some();
            if let Some(fill) = d.fill {
                self.cache.fill(&self.shared.gens, fill, d.reply.as_deref());
            }
            if read_ahead {
                continue;
            }
            match d.reply {
                Some(b) => {
                    self.counters
                        .bytes_out
                        .fetch_add(b.len() as u64, Ordering::Relaxed);
                    self.tcp.send_deferred(d.conn, b);
                }
                None => self.tcp.no_reply(d.conn),
            }
            n += 1;
        }
        n
    }

    /// Moves backlogged jobs onto the ring until it is full again.
    fn flush_backlog(&mut self) -> usize {
        let mut n = 0;
        while let Some(job) = self.backlog.pop_front() {
            if let Err(job) = self.jobs.push(job) {
                self.backlog.push_front(job);
                break;
            }
            n += 1;
        }
        if n > 0 {
            wake_worker(&self.worker_bells, &mut self.next_bell);
        }
        n
    }

    /// Polls sockets (waiting up to `timeout`) and classifies every record received.
    fn poll_sockets(&mut self, timeout: Duration) -> usize {
        let retries = self.retry.len();
        for _ in 0..retries {
            let (conn, peer, rec) = self.retry.pop_front().expect("counted");
            self.take_record(conn, peer, rec);
        }
        let ReactorState {
            id,
            tcp,
            cache,
            shared,
            jobs,
            worker_bells,
            counters,
            backlog,
            retry,
            outbox,
            next_bell,
        } = self;
        let pools = &shared.reactors[*id].pools;
        let mut hot = Hot {
            cache,
            gens: &shared.gens,
            exports: &shared.exports,
        };
        let mut handle = |conn: ConnId, peer: SocketAddr, rec: Buf| {
            counters.ops.fetch_add(1, Ordering::Relaxed);
            counters
                .bytes_in
                .fetch_add(rec.len() as u64, Ordering::Relaxed);
            route(
                dispatch::classify(*id, conn, peer, rec, pools, &mut hot),
                conn,
                peer,
                jobs,
                backlog,
                retry,
                outbox,
                worker_bells,
                next_bell,
                counters,
            );
        };
        let n = tcp.poll(Some(timeout), &mut handle);
        self.flush_outbox();
        n + retries
    }

    fn take_record(&mut self, conn: ConnId, peer: SocketAddr, rec: Buf) {
        let pools = &self.shared.reactors[self.id].pools;
        let mut hot = Hot {
            cache: &mut self.cache,
            gens: &self.shared.gens,
            exports: &self.shared.exports,
        };
        let v = dispatch::classify(self.id, conn, peer, rec, pools, &mut hot);
        route(
            v,
            conn,
            peer,
            &self.jobs,
            &mut self.backlog,
            &mut self.retry,
            &mut self.outbox,
            &self.worker_bells,
            &mut self.next_bell,
            &self.counters,
        );
    }

    fn flush_outbox(&mut self) {
        for (conn, reply) in self.outbox.drain(..) {
            match reply {
                Some(b) => {
                    self.counters
                        .bytes_out
                        .fetch_add(b.len() as u64, Ordering::Relaxed);
                    self.tcp.send_deferred(conn, b)
                }
                None => self.tcp.no_reply(conn),
            }
        }
    }
}

/// Acts on a verdict: queue a reply, a job, or a retry.
#[allow(clippy::too_many_arguments)]
fn route(
    v: Verdict,
    conn: ConnId,
    peer: SocketAddr,
    jobs: &Ring<Job>,
    backlog: &mut VecDeque<Job>,
    retry: &mut VecDeque<(ConnId, SocketAddr, Buf)>,
    outbox: &mut Vec<(ConnId, Option<Buf>)>,
    bells: &[Arc<Doorbell>],
    next_bell: &mut usize,
    counters: &Counters,
) {
    match v {
        Verdict::Drop => outbox.push((conn, None)),
        Verdict::Reply(b) => outbox.push((conn, Some(b))),
        Verdict::Retry(rec) => {
            counters.parked.fetch_add(1, Ordering::Relaxed);
            retry.push_back((conn, peer, rec));
        }
        Verdict::Work(job) => {
            if !backlog.is_empty() {
                backlog.push_back(job);
                counters.parked.fetch_add(1, Ordering::Relaxed);
                return;
            }
            match jobs.push(job) {
                Ok(()) => wake_worker(bells, next_bell),
                Err(job) => {
                    counters.parked.fetch_add(1, Ordering::Relaxed);
                    backlog.push_back(job);
                }
            }
        }
    }
}

/// Wakes one sleeping worker, if any sleeps (awake workers find the job themselves).
fn wake_worker(bells: &[Arc<Doorbell>], next: &mut usize) {
    let n = bells.len();
    for i in 0..n {
        let k = (*next + i) % n;
        if bells[k].ring() {
            *next = (k + 1) % n;
            return;
        }
    }
}

impl Poller for ReactorState {
    fn poll(&mut self) -> usize {
        let mut work = self.drain_done();
        if !self.backlog.is_empty() {
            work += self.flush_backlog();
        }
        work += self.poll_sockets(Duration::ZERO);
        // One vectored write per connection for everything answered in this pass.
        self.tcp.flush();
        work
    }

    fn sleep(&mut self, max: Duration) {
        let bell = self.shared.reactors[self.id].bell.clone();
        bell.prepare_sleep();
        if !self.shared.reactors[self.id].done.is_empty()
            || !self.backlog.is_empty()
            || !self.retry.is_empty()
        {
            bell.woke();
            return;
        }
        self.poll_sockets(max);
        self.tcp.flush();
        bell.woke();
    }
}
