//! A reactor's gate: admits a call whose rules' buckets allow it, holds the others in
//! arrival order until they do (never rejects one), and hands them back as their
//! buckets refill. Generic over what a held call is (a TCP record, an RDMA call), so
//! the reactor keeps the transport knowledge and this is tested without one.
//!
//! Owned by one reactor thread. Allocation: the queue and the per-rule marks are
//! sized when the rules change; holding a call pushes onto a `VecDeque` that grows
//! only past its high-water mark.

use super::{now_ns, Cost, Matched, Rules, Table};
use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

struct Held<T> {
    item: T,
    peer: IpAddr,
    cost: Cost,
    m: Matched,
    /// When it was held (`now_ns`).
    since: u64,
}

pub struct Gate<T> {
    table: Arc<Table>,
    epoch: u64,
    pub(super) rules: Arc<Rules>,
    /// Some rule is configured: the one branch an unlimited gateway pays per call.
    pub on: bool,
    held: VecDeque<Held<T>>,
    /// Calls held per rule: a new call under a rule that holds calls queues behind
    /// them (first come, first served), whatever its bucket says.
    waiting: Vec<u32>,
    /// Rules a release scan found still empty (scratch of `release`).
    blocked: Vec<bool>,
    /// Earliest `now_ns` at which a held call may start (a sleeping reactor's bound).
    next_at: u64,
}

/// Held calls kept without growing the queue (it grows past this, rarely: a held
/// TCP call stays in flight, so a connection holds at most `tcp.max_inflight`).
const HELD_START: usize = 1024;

impl<T> Gate<T> {
    pub fn new(table: Arc<Table>) -> Gate<T> {
        let epoch = table.epoch();
        let rules = table.load();
        let mut g = Gate {
            table,
            epoch,
            on: false,
            rules: Arc::new(Rules::default()),
            held: VecDeque::new(),
            waiting: Vec::new(),
            blocked: Vec::new(),
            next_at: 0,
        };
        g.adopt(rules);
        g
    }

    /// Picks up rules a reload published (one atomic load; called once per pass).
    #[inline]
    pub fn refresh(&mut self) {
        let e = self.table.epoch();
        if e != self.epoch {
            self.epoch = e;
            let rules = self.table.load();
            self.adopt(rules);
        }
    }

    #[cold]
    fn adopt(&mut self, rules: Arc<Rules>) {
        let n = rules.all.len();
        self.on = n > 0;
        self.rules = rules;
        self.waiting = vec![0; n];
        self.blocked = vec![false; n];
        if self.on && self.held.capacity() < HELD_START {
            self.held.reserve(HELD_START);
        }
        // Held calls fall under the new rules (or none: then they go at the next
        // release, in order).
        for h in &mut self.held {
            h.m = self.rules.matched(h.peer, h.cost.export);
            for i in h.m.each() {
                self.waiting[i] += 1;
            }
        }
        self.next_at = 0;
    }

    /// Whether calls are held (the reactor releases them each pass, and bounds its
    /// sleep by `sleep_ns`).
    pub fn holding(&self) -> bool {
        !self.held.is_empty()
    }

    /// How long a sleeping reactor may wait before a held call may start.
    pub fn sleep_ns(&self) -> u64 {
        self.next_at.saturating_sub(now_ns())
    }

    /// A call from `peer` costing `cost`: handed back to run now, or held (`None`).
    /// The call `offer` held last (to attach what holding it takes, e.g. a TCP
    /// record's reply-budget charge).
    pub fn last_held(&mut self) -> Option<&mut T> {
        self.held.back_mut().map(|h| &mut h.item)
    }

    pub fn offer(&mut self, peer: IpAddr, cost: Cost, item: T) -> Option<T> {
        let m = self.rules.matched(peer, cost.export);
        if !m.any() {
            return Some(item);
        }
        let now = now_ns();
        let queued = m.each().any(|i| self.waiting[i] > 0);
        let wait = if queued {
            0
        } else {
            self.rules.wait(m, now, &cost)
        };
        if !queued && wait == 0 {
            self.rules.charge(m, now, &cost);
            return Some(item);
        }
        for i in m.each() {
            self.waiting[i] += 1;
            self.rules.all[i].delayed.fetch_add(1, Ordering::Relaxed);
        }
        if wait > 0 && (self.next_at == 0 || now + wait < self.next_at) {
            self.next_at = now + wait;
        }
        self.held.push_back(Held {
            item,
            peer,
            cost,
            m,
            since: now,
        });
        None
    }

    /// Hands `run` every held call whose buckets now allow it, oldest first; a call
    /// whose rule is still empty keeps every later call of that rule behind it.
    /// Returns how many it handed.
    pub fn release(&mut self, run: &mut dyn FnMut(T)) -> usize {
        let now = now_ns();
        self.blocked.iter_mut().for_each(|b| *b = false);
        self.next_at = 0;
        let mut n = 0;
        for _ in 0..self.held.len() {
            let Some(h) = self.held.pop_front() else {
                break;
            };
            if h.m.each().any(|i| self.blocked[i]) {
                self.held.push_back(h);
                continue;
            }
            let wait = self.rules.wait(h.m, now, &h.cost);
            if wait > 0 {
                h.m.each().for_each(|i| self.blocked[i] = true);
                if self.next_at == 0 || now + wait < self.next_at {
                    self.next_at = now + wait;
                }
                self.held.push_back(h);
                continue;
            }
            self.rules.charge(h.m, now, &h.cost);
            let waited = now.saturating_sub(h.since);
            for i in h.m.each() {
                self.waiting[i] = self.waiting[i].saturating_sub(1);
                self.rules.all[i]
                    .delay_ns
                    .fetch_add(waited, Ordering::Relaxed);
            }
            run(h.item);
            n += 1;
        }
        n
    }
}
