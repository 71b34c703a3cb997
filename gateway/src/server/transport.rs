//! The transport seam (docs/architecture.md §3 "Transports"): the one place that knows
//! which transport a call came on. The rest of the server — the reactor's pass,
//! dispatch, the io_uring executor, the workers — holds a [`Link`] (an opaque name of
//! the call) and hands replies to [`Transports`]: accept and receive are the
//! transports' polls, a reply is an owned buffer plus, for a zero-copy READ, the
//! cache pages it pins, and close ends a connection. The dispatch is one `match`
//! per operation here (static, no vtable: two transports, known at compile time),
//! not one per call site.
//!
//! Ownership: a reply's buffer and its pinned pages move into the transport, which
//! gives the pages back when it no longer reads them — the TCP transport once the
//! kernel holds every byte (`TcpTransport::take_released`), the RDMA server once the
//! RDMA Writes from them completed (`RdmaServer::take_released`, the way Linux svcrdma
//! releases pages by Send completion) — or when the connection died first.

use super::dispatch::MARK;
use crate::cache::{PageRead, ReadCache};
use crate::conn::{ConnKind, ConnRef};
use crate::stats::{ReactorStats, Transport};
use crate::ulb::ReplyItem;
use engine::mem::Buf;
use engine::rdma::server::{CallRef, RdmaServer};
use engine::rpcrdma::responder::DdpList;
use engine::tcp::{ConnId, Pipe, TcpTransport};

/// Where a call came from and its reply goes. Opaque outside this module: the
/// server asks it questions (`conn_ref`, `zero_copy`) instead of matching on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Link(Kind);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A TCP call, and the reply bytes reserved for it in its connection's budget
    /// (`tcp.max_queued_mib`), given back just before it is answered (`settle`).
    Tcp(ConnId, u32),
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
        Link(Kind::Tcp(c, 0))
    }

    /// A call received on RPC-over-RDMA, whose reply may carry `item` in chunks.
    pub fn rdma(call: CallRef, item: ReplyItem) -> Link {
        Link(Kind::Rdma(call, item))
    }

    /// The connection, for NFSv4.1 back-channel binding (RFC 8881 §2.10.3.1).
    pub fn conn_ref(self, reactor: usize) -> ConnRef {
        let kind = match self.0 {
            Kind::Tcp(id, _) => ConnKind::Tcp(id),
            Kind::Rdma(call, _) => ConnKind::Rdma(call.conn()),
        };
        ConnRef { reactor, kind }
    }

    /// The TCP connection, for a reply that only TCP can carry (a spliced READ).
    pub fn tcp_conn(self) -> Option<ConnId> {
        match self.0 {
            Kind::Tcp(c, _) => Some(c),
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

    /// For a job its reactor hands on: the reply bytes it reserves in its TCP
    /// connection's budget (`want` of them; RDMA calls reserve nothing here, their
    /// credits and `engine::rdma::reply_budget` bound them). Returns what to reserve.
    pub fn charge(&mut self, want: usize) -> u32 {
        match &mut self.0 {
            Kind::Tcp(_, charge) => {
                *charge = u32::try_from(want).unwrap_or(u32::MAX);
                *charge
            }
            Kind::Rdma(..) => 0,
        }
    }
}

/// A reply leaving the reactor (None: release the call without one), with the cache
/// pages holding its data for a zero-copy READ. Moved by value on every call: a
/// worker COMPOUND's DDP list is not in it (`Transports::send_done` takes it), which
/// kept every cached answer's reply 44 bytes larger.
pub(crate) struct Reply {
    pub buf: Option<Buf>,
    pub pages: Option<Box<PageRead>>,
}

impl Reply {
    pub fn none() -> Reply {
        Reply {
            buf: None,
            pages: None,
        }
    }

    pub fn of(buf: Buf) -> Reply {
        Reply {
            buf: Some(buf),
            pages: None,
        }
    }
}

/// A reactor's transports: TCP always, RPC-over-RDMA when a fabric is configured.
pub(crate) struct Transports {
    pub tcp: TcpTransport,
    pub rdma: Option<RdmaServer>,
}

impl Transports {
    /// Sends `reply` (or releases the call) on the transport `link` came from; the
    /// TCP reply joins its connection's queue for this pass's `flush`, the RDMA one
    /// is posted by the server's next pump (`flush_rdma`, same pass). Pinned pages the
    /// transport copied out of the reply's list go back to `cache`.
    pub fn send(&mut self, link: Link, reply: Reply, stats: &ReactorStats, cache: &mut ReadCache) {
        self.send_located(link, reply, None, stats, cache)
    }

    /// `send` for a worker's reply, with where its COMPOUND noted its DDP-eligible
    /// results (RFC 8267 §6.4.1; RDMA only).
    pub fn send_done(
        &mut self,
        link: Link,
        buf: Option<Buf>,
        located: Option<DdpList>,
        stats: &ReactorStats,
        cache: &mut ReadCache,
    ) {
        let reply = Reply { buf, pages: None };
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
            Kind::Tcp(c, charge) => self.send_tcp(c, charge, reply, stats),
            Kind::Rdma(call, item) => {
                if let Some(pages) = self.send_rdma(call, item, reply, located, stats) {
                    cache.recycle(pages);
                }
            }
        }
    }

    fn send_tcp(&mut self, c: ConnId, charge: u32, reply: Reply, stats: &ReactorStats) {
        settle(&mut self.tcp, c, charge);
        match (reply.buf, reply.pages) {
            (Some(b), Some(pages)) => {
                let data = pages.data_len();
                stats.bytes_out(Transport::Tcp, b.len() + data + (4 - data % 4) % 4);
                // SAFETY: the pages were pinned by the cache when this reply was
                // answered (`ReadCache::pin_read`): a pinned page is never written
                // (fills take fresh pages) nor returned to its pool (evicted or
                // replaced, it waits in the cache's zombies) until `ReadCache::release`
                // unpins it, which happens only for lists `take_released` handed back;
                // so the pages stay mapped and unchanged while the transport may read
                // them. The transport reads them only in its `flush`/`poll`, which run
                // on this reactor while both live; dropping it reads nothing, so the
                // order in which `ReactorState` drops the two does not matter.
                unsafe { self.tcp.send_external(c, b, pages) };
            }
            (Some(b), None) => {
                stats.bytes_out(Transport::Tcp, b.len());
                self.tcp.send_deferred(c, b)
            }
            (None, _) => self.tcp.no_reply(c),
        }
    }

    /// Hands the reply to the RDMA server; returns the page list to recycle (its
    /// pieces were copied into the call's slot, their pins come back by tag).
    fn send_rdma(
        &mut self,
        call: CallRef,
        item: ReplyItem,
        reply: Reply,
        located: Option<DdpList>,
        stats: &ReactorStats,
    ) -> Option<Box<PageRead>> {
        stats.rdma_answered();
        let Some(mut b) = reply.buf else {
            if let Some(r) = self.rdma.as_mut() {
                r.no_reply(call);
            }
            return reply.pages;
        };
        // Counted without the record-mark slot, which RDMA does not send.
        let data: usize = reply.pages.as_ref().map_or(0, |p| p.data_len());
        stats.bytes_out(Transport::Rdma, b.len().saturating_sub(MARK) + data);
        let Some(r) = self.rdma.as_mut() else {
            return reply.pages;
        };
        b.advance(MARK);
        match &reply.pages {
            Some(pages) => r.reply_external(call, b, pages.as_slice()),
            None => {
                let ddp = ddp_of(item, located, &b);
                r.reply(call, b, ddp);
            }
        }
        reply.pages
    }

    /// Sends a READ reply whose data waits in a pipe (`server::direct`); only TCP
    /// splices, so any other link gets the pipe back (and its call is released).
    pub fn send_pipe(
        &mut self,
        link: Link,
        head: Buf,
        pipe: Pipe,
        stats: &ReactorStats,
    ) -> Result<(), Pipe> {
        match link.0 {
            Kind::Tcp(c, charge) => {
                settle(&mut self.tcp, c, charge);
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

    /// A call classified outside its transport's poll (a parked record): reserves its
    /// TCP charge now (inside the poll the charge is the poll callback's result).
    pub fn reserve(&mut self, link: Link, charge: u32) {
        if let (Kind::Tcp(c, _), true) = (link.0, charge > 0) {
            self.tcp.reserve(c, charge as usize);
        }
    }

    /// Closes the connection `link` came on (its call panicked while classified).
    pub fn close(&mut self, link: Link, reactor: usize) {
        match link.0 {
            Kind::Tcp(c, _) => {
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

/// Gives back the reply bytes a TCP call reserved (`Router::route`) just before it
/// is answered: from here on its reply (if any) counts as queued instead.
#[inline]
fn settle(tcp: &mut TcpTransport, c: ConnId, charge: u32) {
    if charge > 0 {
        tcp.release(c, charge as usize);
    }
}

/// Where the DDP-eligible results of an RDMA reply (from its XID on) lie: NFSv3's one
/// item (RFC 8267 §4), the results a COMPOUND noted while it ran (their positions
/// counted the record-mark slot), or a fast-path or replayed READ/READLINK's data
/// (§6.4.1).
fn ddp_of(item: ReplyItem, located: Option<DdpList>, reply: &[u8]) -> DdpList {
    match (item, located) {
        (ReplyItem::Compound, Some(list)) => list.shifted_down(MARK),
        (ReplyItem::Compound, None) => crate::ulb::v4::fast_read_data(reply),
        _ => crate::ulb::reply_data(item, reply).into(),
    }
}
