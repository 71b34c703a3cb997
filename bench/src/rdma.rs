//! RPC-over-RDMA connections for `bench` and the bridge: a [`Pipe`] over
//! `engine::rdma::client::RdmaClient` on the chosen fabric provider, with every call
//! shaped by the NFS upper-layer binding (`crate::ulb`).
//!
//! The RDMA client assigns its own XIDs (they name its buffer slots), so the pipe keeps
//! a map from the client's XID back to the caller's and reports replies under the
//! caller's XID (the reply bytes still start with the transport's XID: consumers must
//! use the XID they are given).
//!
//! Every connection offers an RFC 8167 back channel ([`BACKCHANNEL_CREDITS`] reverse
//! credits, their Receives posted at connect): callbacks the server sends on it (NFSv4.1
//! sessions bound with CONN_BACK_CHAN) are answered in [`Pipe::poll`] by
//! `crate::nfs4::backchannel`. An NFSv4 reply that cannot be sized from its call is
//! bounded by the session's `ca_maxresponsesize` ([`set_v4_max_response`], R8267-15).

use crate::pipe::{OnReply, Pipe, SubmitFail};
use crate::transport::Provider;
use crate::ulb;
use engine::fabric::soft::SoftFabric;
use engine::fabric::Fabric;
use engine::rdma::client::{ClientOptions, RdmaClient, RpcRdmaError, SubmitError};
use engine::xdr::padded;
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Credits requested per connection (the gateway grants 128 by default).
pub const DEFAULT_CREDITS: u32 = 128;
/// Largest READ/WRITE payload per call (the gateway's rtmax/wtmax).
pub const MAX_IO: usize = 1 << 20;
/// Largest Reply chunk per call (long READDIR/READDIRPLUS and MOUNT replies).
pub const MAX_REPLY_CHUNK: usize = 256 << 10;

/// Reverse credits each connection grants (RFC 8167; knfsd uses 2 backchannel
/// requests): the Receives posted for callbacks and the `ca_maxrequests` of the back
/// channel bench asks for in CREATE_SESSION.
pub const BACKCHANNEL_CREDITS: u32 = 2;

/// The smallest fore-channel `ca_maxresponsesize` of the sessions made (0: none yet).
static V4_MAX_RESPONSE: AtomicUsize = AtomicUsize::new(0);

/// Records a session's fore-channel `ca_maxresponsesize`: unpredictable NFSv4 replies
/// get a Reply chunk of that size (capped by this client's buffers), R8267-15.
pub fn set_v4_max_response(n: u32) {
    let n = n as usize;
    let _ = V4_MAX_RESPONSE.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |cur| {
        Some(if cur == 0 { n } else { cur.min(n) })
    });
}

/// The bound of an unpredictable NFSv4 reply: the session's `ca_maxresponsesize`, or
/// before any session [`ulb::V4_UNPREDICTABLE`]; never above [`MAX_REPLY_CHUNK`].
pub fn v4_unpredictable() -> usize {
    match V4_MAX_RESPONSE.load(Ordering::Relaxed) {
        0 => ulb::V4_UNPREDICTABLE,
        n => n,
    }
    .min(MAX_REPLY_CHUNK)
}

/// The RPC-over-RDMA counters of every connection closed so far in this process.
static TOTALS: Mutex<Option<RdmaTotals>> = Mutex::new(None);
/// Connections whose counters are in [`TOTALS`].
static CLOSED: AtomicU64 = AtomicU64::new(0);

/// What the RPC-over-RDMA connections of a run did (the `rdma` object of the JSON
/// output): message classes sent (RFC 8166 §3.5), chunks offered, RDMA_ERRORs, and
/// the callbacks taken and answered (RFC 8167).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RdmaTotals {
    pub connections: u64,
    pub short_calls: u64,
    pub chunked_calls: u64,
    pub long_calls: u64,
    pub write_chunks: u64,
    pub reply_chunks: u64,
    pub rdma_errors: u64,
    pub callbacks: u64,
    pub callback_replies: u64,
    pub callbacks_dropped: u64,
}

/// The totals of every RDMA connection closed so far.
pub fn totals() -> RdmaTotals {
    let t = TOTALS
        .lock()
        .map(|g| g.unwrap_or_default())
        .unwrap_or_default();
    RdmaTotals {
        connections: CLOSED.load(Ordering::Relaxed),
        ..t
    }
}

/// A fabric instance of `provider` (one per connection: a fabric is one polled device
/// context).
pub fn open_fabric(provider: Provider) -> io::Result<Box<dyn Fabric>> {
    match provider {
        Provider::Soft => Ok(Box::new(SoftFabric::new()?)),
        // A wildcard bind: the device is the first one (the route is checked to be on it).
        #[cfg(feature = "rdma")]
        Provider::Verbs => Ok(Box::new(engine::fabric::verbs::VerbsFabric::open(
            None,
            SocketAddr::from(([0, 0, 0, 0], 0)),
        )?)),
        #[cfg(not(feature = "rdma"))]
        Provider::Verbs => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the verbs provider is not available in this build; rebuild bench with \
             `--features rdma` (needs libibverbs-dev, librdmacm-dev, libclang-dev)",
        )),
    }
}

/// One RPC-over-RDMA connection as a [`Pipe`].
pub struct RdmaPipe {
    c: RdmaClient,
    /// Transport XID → caller's XID of every call in flight.
    xids: HashMap<u32, u32>,
    /// Callbacks are answered here (bench's own NFSv4.1 back channel); else they are
    /// left for [`Pipe::take_callbacks`] (the bridge forwards them to its client).
    answer: bool,
}

impl RdmaPipe {
    /// A connection whose callbacks bench answers itself (`crate::nfs4::backchannel`).
    pub fn connect(addr: SocketAddr, provider: Provider, credits: u32) -> io::Result<RdmaPipe> {
        RdmaPipe::connect_with(addr, provider, credits, true)
    }

    /// `answer`: answer callbacks here; else leave them to [`Pipe::take_callbacks`].
    pub fn connect_with(
        addr: SocketAddr,
        provider: Provider,
        credits: u32,
        answer: bool,
    ) -> io::Result<RdmaPipe> {
        let fabric = open_fabric(provider)?;
        let opts = ClientOptions {
            credits,
            max_io: MAX_IO,
            max_reply_chunk: MAX_REPLY_CHUNK,
            // Remote invalidation (RFC 8797 R bit) only works on registrations a peer
            // may invalidate (fast-registered MRs, memory windows); verbs registrations
            // here are plain ibv_reg_mr ones, which a Send-With-Invalidate breaks the
            // connection on (rxe: remote invalid request). The soft provider models it.
            remote_invalidate: provider == Provider::Soft,
            backchannel_credits: BACKCHANNEL_CREDITS,
            ..ClientOptions::default()
        };
        let c = RdmaClient::connect(fabric, addr, opts).map_err(|e| {
            io::Error::new(e.kind(), format!("RPC-over-RDMA connect to {addr}: {e}"))
        })?;
        Ok(RdmaPipe {
            c,
            xids: HashMap::with_capacity(credits as usize),
            answer,
        })
    }

    /// Answers the callbacks received (RFC 8167 reverse calls; rare: allocates). One
    /// that is not a decodable RPC call gets GARBAGE_ARGS, so it does not hold one of
    /// our reverse credits for ever.
    fn answer_callbacks(&mut self) {
        let mut got: Vec<(u32, Vec<u8>)> = Vec::new();
        self.c.take_callbacks(&mut |xid, call| {
            let reply = crate::nfs4::backchannel::answer(call)
                .unwrap_or_else(|| crate::nfs4::backchannel::garbage_args(xid));
            got.push((xid, reply));
        });
        for (xid, reply) in got {
            if let Err(e) = self.c.reply_callback(xid, &reply) {
                eprintln!("bench: answering callback {xid:#x}: {e}");
            }
        }
    }
}

impl Drop for RdmaPipe {
    fn drop(&mut self) {
        let s = self.c.stats();
        if let Ok(mut g) = TOTALS.lock() {
            let t = g.get_or_insert_with(RdmaTotals::default);
            t.short_calls += s.short_calls;
            t.chunked_calls += s.chunked_calls;
            t.long_calls += s.long_calls;
            t.write_chunks += s.write_chunks;
            t.reply_chunks += s.reply_chunks;
            t.rdma_errors += s.rdma_errors;
            t.callbacks += s.callbacks;
            t.callback_replies += s.callback_replies;
            t.callbacks_dropped += s.callbacks_dropped;
        }
        CLOSED.fetch_add(1, Ordering::Relaxed);
    }
}

impl Pipe for RdmaPipe {
    fn try_submit(&mut self, call: &[u8]) -> Result<bool, SubmitFail> {
        let Some(xid) = crate::pipe::xid_of(call) else {
            return Err(SubmitFail::Call("call shorter than an XID".into()));
        };
        let mut shape = ulb::call_shape_with(call, v4_unpredictable());
        // Stay within this client's buffers: a server never returns more than its
        // rtmax (= MAX_IO for the gateway) or its directory reply cap.
        if let Some(w) = shape.write_chunk.as_mut() {
            *w = (*w).min(MAX_IO as u32);
        }
        let w = padded(shape.write_chunk.unwrap_or(0) as usize);
        shape.max_reply = shape.max_reply.min(MAX_REPLY_CHUNK + w);
        match self.c.submit(call, &shape) {
            Ok(tx) => {
                self.xids.insert(tx, xid);
                Ok(true)
            }
            Err(SubmitError::Busy) => Ok(false),
            Err(e @ (SubmitError::TooLarge | SubmitError::Plan(_))) => {
                Err(SubmitFail::Call(e.to_string()))
            }
            Err(e) => Err(SubmitFail::Conn(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                e.to_string(),
            ))),
        }
    }

    fn poll(&mut self, on_reply: &mut OnReply) -> io::Result<usize> {
        let xids = &mut self.xids;
        let mut lost = false;
        let mut n = 0;
        self.c.poll(&mut |tx, r| {
            let Some(xid) = xids.remove(&tx) else {
                return;
            };
            match r {
                Ok(rep) => on_reply(xid, Ok(rep)),
                Err(RpcRdmaError::Disconnected) => lost = true,
                Err(e) => on_reply(xid, Err(format!("RPC-over-RDMA: {e}"))),
            }
            n += 1;
        })?;
        if self.answer {
            self.answer_callbacks();
        }
        if lost || !self.c.is_connected() {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "RPC-over-RDMA connection lost",
            ));
        }
        Ok(n)
    }

    fn in_flight(&self) -> usize {
        self.xids.len()
    }

    fn take_callbacks(&mut self, f: &mut dyn FnMut(u32, &[u8])) {
        self.c.take_callbacks(f);
    }

    fn reply_callback(&mut self, xid: u32, reply: &[u8]) -> io::Result<()> {
        self.c
            .reply_callback(xid, reply)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))
    }
}
