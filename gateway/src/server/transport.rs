//! The transport seam (docs/architecture.md §3 "Transports"): the one place that knows
//! which transport a call came on. The rest of the server — the reactor's pass,
//! dispatch, the io_uring executor, the workers — holds a [`Link`] (an opaque name of
//! the call) and hands replies to [`Transports`]: accept and receive are the
//! transports' polls, a reply is an owned buffer plus, for a zero-copy READ, the
//! cache pages it pins, and close ends a connection. The dispatch is one `match`
//! per operation here (static, no vtable: two transports, known at compile time),
//! not one per call site.
//!
//! Ownership: a reply is a value — its buffer, the cache pages a zero-copy READ pinned
//! ([`Pinned`]) and the TCP reply bytes its call reserved ([`Charge`]) — and each part
//! is given back by its owner's `Drop` or by the transport's completion, never by a
//! call paired by hand. The charge goes back as the reply is handed over (its bytes
//! then count as queued), or wherever the call is dropped unanswered (a worker
//! thread included). The pages move into the transport, which gives them back when it
//! no longer reads them — the TCP transport once the kernel holds every byte
//! (`TcpTransport::take_released`), the RDMA server once the RDMA Writes from them
//! completed (`RdmaServer::take_released`, the way Linux svcrdma releases pages by
//! Send completion) — or when the connection died first; a reply dropped before
//! reaching a transport gives its pages back through [`PinHome`].

use super::dispatch::MARK;
use crate::cache::{PageRead, ReadCache};
use crate::conn::{ConnKind, ConnRef};
use crate::stats::{ReactorStats, Transport};
use crate::ulb::ReplyItem;
use engine::mem::Buf;
use engine::rdma::server::{CallRef, RdmaServer};
use engine::rpcrdma::responder::DdpList;
use engine::tcp::{Budget, Charge, ConnId, Pipe, TcpTransport};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Where a call came from and its reply goes. Opaque outside this module: the
/// server asks it questions (`conn_ref`, `zero_copy`) instead of matching on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Link(Kind);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A TCP call (its reply charge travels with the call as a `Charge`).
    Tcp(ConnId),
    /// An RPC-over-RDMA call, and the DDP-eligible item its reply may carry.
    Rdma(CallRef, ReplyItem),
}

/// How a cached READ's data may leave without a copy (see [`Link::zero_copy`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PagesOut {
    /// Largest data the reply may carry this way (an RDMA write chunk's room).
    pub room: u64,
    /// The registration key of the cache pages (RDMA), 0 on TCP.
    pub lkey: u32,
    /// Whether the data goes on a TCP socket (which sends only large reads this way).
    pub tcp: bool,
}

impl Link {
    /// A call received on TCP connection `c` (nothing reserved yet).
    pub fn tcp(c: ConnId) -> Link {
        Link(Kind::Tcp(c))
    }

    /// A call received on RPC-over-RDMA, whose reply may carry `item` in chunks.
    pub fn rdma(call: CallRef, item: ReplyItem) -> Link {
        Link(Kind::Rdma(call, item))
    }

    /// The connection, for NFSv4.1 back-channel binding (RFC 8881 §2.10.3.1).
    pub fn conn_ref(self, reactor: usize) -> ConnRef {
        let kind = match self.0 {
            Kind::Tcp(id) => ConnKind::Tcp(id),
            Kind::Rdma(call, _) => ConnKind::Rdma(call.conn()),
        };
        ConnRef { reactor, kind }
    }

    /// The TCP connection, for a reply that only TCP can carry (a spliced READ).
    pub fn tcp_conn(self) -> Option<ConnId> {
        match self.0 {
            Kind::Tcp(c) => Some(c),
            Kind::Rdma(..) => None,
        }
    }

    /// Whether a cached READ's reply may be sent from the cache pages: over RDMA when
    /// the pages are registered (`pages_lkey`) and the call offered a write chunk
    /// (`write_room`, RFC 8267 §4.2); over TCP when the cache has pages.
    pub fn zero_copy(
        self,
        write_room: Option<u64>,
        pages_lkey: Option<u32>,
        tcp_pages: bool,
    ) -> Option<PagesOut> {
        match (self.0, write_room, pages_lkey) {
            (Kind::Rdma(..), Some(room), Some(lkey)) => Some(PagesOut {
                room,
                lkey,
                tcp: false,
            }),
            (Kind::Tcp(..), _, _) if tcp_pages => Some(PagesOut {
                room: u64::MAX,
                lkey: 0,
                tcp: true,
            }),
            _ => None,
        }
    }

    /// For a job its reactor hands on: the reply bytes (`want`) it reserves in its
    /// TCP connection's budget until the charge is dropped. RDMA calls reserve
    /// nothing here: their credits and `engine::rdma::reply_budget` bound them.
    pub fn charge(self, want: usize, from: Reserve) -> Option<Charge> {
        match (self.0, from) {
            (Kind::Tcp(_), Reserve::Polled(budget)) => budget.charge(want),
            (Kind::Tcp(c), Reserve::Later(tcp)) => tcp.charge(c, want),
            (Kind::Rdma(..), _) | (_, Reserve::Never) => None,
        }
    }
}

/// Where a call's reply charge is taken from (`Link::charge`).
pub(crate) enum Reserve<'a, 'b> {
    /// A TCP record being lent by the transport's poll: its connection's budget,
    /// charged before the connection's next record is read.
    Polled(&'a Budget<'b>),
    /// A record classified after the poll that delivered it (a parked record).
    Later(&'a mut TcpTransport),
    /// An RPC-over-RDMA call.
    Never,
}

/// The cache pages a zero-copy READ's reply pinned (`ReadCache::pin_read`). The pin
/// travels with the reply: the transport that sends it gives the pages back by
/// completion; dropped before that (a reply never handed over), the list goes to its
/// [`PinHome`] for the reactor to unpin.
pub(crate) struct Pinned {
    list: Option<Box<PageRead>>,
    home: PinHome,
}

impl Pinned {
    pub fn new(list: Box<PageRead>, home: &PinHome) -> Pinned {
        Pinned {
            list: Some(list),
            home: home.clone(),
        }
    }

    /// Bytes of file data the pinned pages hold (the reply's data part).
    pub fn data_len(&self) -> usize {
        self.list.as_ref().map_or(0, |l| l.data_len())
    }

    /// The page list, for the transport that now owns the pins.
    fn take(mut self) -> Box<PageRead> {
        self.list.take().expect("a pin's list is taken once")
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Some(list) = self.list.take() {
            self.home.put(list);
        }
    }
}

/// Where pinned page lists dropped before any transport took them wait for their
/// reactor (`Transports::take_unsent`). Shared by the reactor's replies, which are
/// `Send` (a reply could be dropped on another thread): a mutex taken only when a
/// reply was dropped unsent, never on the path of a sent one; the reactor's pass
/// looks at a flag first.
#[derive(Clone, Default)]
pub(crate) struct PinHome(Arc<Unsent>);

#[derive(Default)]
struct Unsent {
    /// Set after a list is pushed; cleared by the reactor before it takes them.
    waiting: AtomicBool,
    /// Boxed on purpose: the lists go back to the cache's spares as they are.
    #[allow(clippy::vec_box)]
    lists: Mutex<Vec<Box<PageRead>>>,
}

impl PinHome {
    fn put(&self, list: Box<PageRead>) {
        // A poisoned lock only means another drop panicked while pushing.
        let mut v = self.0.lists.lock().unwrap_or_else(|e| e.into_inner());
        v.push(list);
        drop(v);
        self.0.waiting.store(true, Ordering::Release);
    }

    /// Runs once per reactor pass: a relaxed load unless a reply was dropped unsent.
    #[inline]
    fn take_all(&self, f: &mut dyn FnMut(Box<PageRead>)) {
        if self.0.waiting.load(Ordering::Relaxed) {
            self.take_waiting(f);
        }
    }

    #[cold]
    fn take_waiting(&self, f: &mut dyn FnMut(Box<PageRead>)) {
        if !self.0.waiting.swap(false, Ordering::Acquire) {
            return;
        }
        let mut v = self.0.lists.lock().unwrap_or_else(|e| e.into_inner());
        for list in v.drain(..) {
            f(list);
        }
    }
}

/// A reply leaving the reactor (None: release the call without one), with the cache
/// pages holding its data for a zero-copy READ and the TCP reply bytes its call
/// reserved. Each part is given back when dropped (module docs). Moved by value on
/// every call: a worker COMPOUND's DDP list is not in it (`Transports::send_done`
/// takes it), which kept every cached answer's reply 44 bytes larger.
pub(crate) struct Reply {
    pub buf: Option<Buf>,
    pub pages: Option<Pinned>,
    pub charge: Option<Charge>,
}

impl Reply {
    pub fn none() -> Reply {
        Reply {
            buf: None,
            pages: None,
            charge: None,
        }
    }

    pub fn of(buf: Buf) -> Reply {
        Reply {
            buf: Some(buf),
            pages: None,
            charge: None,
        }
    }
}

/// A page list after an RDMA reply: the server took its pins (its pieces were copied
/// into the call's slot; they come back by tag, `RdmaServer::take_released`), or no
/// reply was sent and they are still held.
enum PagesBack {
    Taken(Box<PageRead>),
    Unsent(Box<PageRead>),
}

/// A reactor's transports: TCP always, RPC-over-RDMA when a fabric is configured.
pub(crate) struct Transports {
    pub tcp: TcpTransport,
    pub rdma: Option<RdmaServer>,
    /// Page lists of replies dropped before any transport took them.
    pub pins: PinHome,
}

impl Transports {
    /// Unpins, through `f`, the pages of replies dropped before they were sent.
    #[inline]
    pub fn take_unsent(&mut self, f: &mut dyn FnMut(Box<PageRead>)) {
        self.pins.take_all(f)
    }

    /// Sends `reply` (or releases the call) on the transport `link` came from; the
    /// TCP reply joins its connection's queue for this pass's `flush`, the RDMA one
    /// is posted by the server's next pump (`flush_rdma`, same pass). Pinned pages the
    /// transport copied out of the reply's list go back to `cache`.
    pub fn send(&mut self, link: Link, reply: Reply, stats: &ReactorStats, cache: &mut ReadCache) {
        self.send_located(link, reply, None, stats, cache)
    }

    /// `send` for a reply with where its encoder noted its DDP-eligible results
    /// (RFC 8267 §4, §6.4.1; RDMA only): a worker's, an io_uring READ's, a cached
    /// answer's.
    pub fn send_done(
        &mut self,
        link: Link,
        buf: Option<Buf>,
        charge: Option<Charge>,
        located: Option<DdpList>,
        stats: &ReactorStats,
        cache: &mut ReadCache,
    ) {
        let reply = Reply {
            buf,
            pages: None,
            charge,
        };
        self.send_located(link, reply, located, stats, cache)
    }

    fn send_located(
        &mut self,
        link: Link,
        reply: Reply,
        located: Option<DdpList>,
        stats: &ReactorStats,
        cache: &mut ReadCache,
    ) {
        match link.0 {
            Kind::Tcp(c) => self.send_tcp(c, reply, stats),
            Kind::Rdma(call, item) => match self.send_rdma(call, item, reply, located, stats) {
                Some(PagesBack::Taken(list)) => cache.recycle(list),
                Some(PagesBack::Unsent(list)) => cache.release(list),
                None => {}
            },
        }
    }

    fn send_tcp(&mut self, c: ConnId, reply: Reply, stats: &ReactorStats) {
        let Reply { buf, pages, charge } = reply;
        // From here the reply's bytes count as queued, not reserved.
        drop(charge);
        match (buf, pages) {
            (Some(b), Some(pages)) => {
                let pages = pages.take();
                let data = pages.data_len();
                stats.bytes_out(Transport::Tcp, b.len() + data + (4 - data % 4) % 4);
                // The cache's page pools are lent to the transport (`lend_pages`), and
                // the pin keeps these pages unchanged until `take_released` hands the
                // list back (`ReadCache::release` unpins it then).
                self.tcp.send_external(c, b, pages);
            }
            (Some(b), None) => {
                stats.bytes_out(Transport::Tcp, b.len());
                self.tcp.send_deferred(c, b)
            }
            (None, _) => self.tcp.no_reply(c),
        }
    }

    /// Hands the reply to the RDMA server; returns its page list, if any, and whether
    /// the server took its pins.
    fn send_rdma(
        &mut self,
        call: CallRef,
        item: ReplyItem,
        reply: Reply,
        located: Option<DdpList>,
        stats: &ReactorStats,
    ) -> Option<PagesBack> {
        stats.rdma_answered();
        // RDMA calls reserve nothing (`Link::charge`); the pin is the server's now.
        let pages = reply.pages.map(Pinned::take);
        let Some(mut b) = reply.buf else {
            if let Some(r) = self.rdma.as_mut() {
                r.no_reply(call);
            }
            return pages.map(PagesBack::Unsent);
        };
        // Counted without the record-mark slot, which RDMA does not send.
        let data: usize = pages.as_ref().map_or(0, |p| p.data_len());
        stats.bytes_out(Transport::Rdma, b.len().saturating_sub(MARK) + data);
        let Some(r) = self.rdma.as_mut() else {
            return pages.map(PagesBack::Unsent);
        };
        b.advance(MARK);
        match &pages {
            Some(pages) => r.reply_external(call, b, pages.as_slice()),
            None => {
                let ddp = ddp_of(item, located);
                r.reply(call, b, ddp);
            }
        }
        pages.map(PagesBack::Taken)
    }

    /// Sends a READ reply whose data waits in a pipe (`server::direct`); only TCP
    /// splices, so any other link gets the pipe back (and its call is released).
    pub fn send_pipe(
        &mut self,
        link: Link,
        head: Buf,
        pipe: Pipe,
        charge: Option<Charge>,
        stats: &ReactorStats,
    ) -> Result<(), Pipe> {
        // From here the reply's bytes count as queued, not reserved.
        drop(charge);
        match link.0 {
            Kind::Tcp(c) => {
                let data = pipe.filled();
                stats.bytes_out(Transport::Tcp, head.len() + data + (4 - data % 4) % 4);
                crate::uring::pipes::count_spliced(data);
                self.tcp.send_pipe(c, head, pipe);
                Ok(())
            }
            Kind::Rdma(call, _) => {
                stats.rdma_answered();
                if let Some(r) = self.rdma.as_mut() {
                    r.no_reply(call);
                }
                Err(pipe)
            }
        }
    }

    /// Closes the connection `link` came on (its call panicked while classified).
    pub fn close(&mut self, link: Link, reactor: usize) {
        match link.0 {
            Kind::Tcp(c) => {
                tracing::warn!(reactor, "closing a TCP connection whose call panicked");
                self.tcp.no_reply(c);
                self.tcp.close(c);
            }
            Kind::Rdma(call, _) => {
                tracing::warn!(reactor, "closing an RDMA connection whose call panicked");
                if let Some(r) = self.rdma.as_mut() {
                    r.close_call_conn(call);
                }
            }
        }
    }
}

/// Where the DDP-eligible results of an RDMA reply lie, as the executor that answered
/// passed them (positions counting the record-mark slot): the READ-class results an
/// NFSv3 READ or READLINK or a COMPOUND noted as it was encoded (`crate::ddp`) or its
/// slot's cache replayed, a cached or io_uring READ's outcome (RFC 8267 §4, §6.4.1).
/// A reply that passed none carries none (an error arm, a GETATTR, a COMPOUND that
/// failed before a READ): its write chunks come back unused (RFC 8166 §4.3.2). The
/// reply's bytes are never read to find them.
fn ddp_of(item: ReplyItem, located: Option<DdpList>) -> DdpList {
    match (item, located) {
        (ReplyItem::None, _) | (_, None) => DdpList::new(),
        (_, Some(list)) => list.shifted_down(MARK),
    }
}

#[cfg(test)]
#[path = "transport_tests.rs"]
mod tests;
