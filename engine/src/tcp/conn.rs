//! One TCP connection: its receive side (staging, record assembly, buffer growth) and
//! its send side (the queue of replies and its byte budget).
//!
//! Receive buffers grow with the bytes that actually arrived, never with what a record
//! mark announces (a mark costs the sender 4 bytes, a pool buffer costs the
//! gateway up to 1 MiB). A record's body first collects in the connection's staging
//! buffer (the connection's own mapping, not pool memory); a record that completes
//! there is copied once into a pool buffer of its exact size. A record that outgrows
//! the staging buffer moves into a pool buffer of at most [`GROW_STEP`] bytes unless
//! the socket already holds more of it, and into a buffer of the record's full length
//! once more than [`GROW_STEP`] bytes of it have arrived. Bodies that are large and
//! already arriving are read from the socket straight into that buffer (no copy).

use super::charge::{Budget, Reserved};
use super::ext::{Out, Released};
use super::record::{Event, FrameError, RecordDecoder};
use super::{ConnId, TcpStats, DIRECT_MIN, MAX_IOV, READ_BUDGET, STAGE_SIZE};
use crate::mem::{Buf, Pools};
use memmap2::MmapMut;
use mio::net::TcpStream;
use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::SocketAddr;
use std::time::Instant;

/// A partial record holds at most this much pool memory until more than this many of
/// its bytes have arrived (the gateway's medium buffer class).
pub const GROW_STEP: usize = 64 * 1024;

/// Send-side reclaim (see `TcpTransport::sweep`): queued replies holding at least this
/// much shared memory (pool buffers, cache pages, pipe pages: `Out::held`) make a
/// connection worth closing when it stops draining while buffers are short; less is
/// not worth a client's connection (one small reply).
pub const RECLAIM_HELD: usize = GROW_STEP;

/// Send-side reclaim: progress counts once the peer has taken (acknowledged) this many
/// more reply bytes since the last mark, so a client that opens its receive window a
/// few bytes at a time cannot keep its replies' buffers: a connection keeps them while
/// starved only by draining at least this much per `tcp.stall_reclaim_ms`.
pub const RECLAIM_PROGRESS: usize = GROW_STEP;

/// Why a connection is not being read although it may have input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stall {
    None,
    /// No pool buffer for the next bytes or record: retried every poll.
    Parked,
    /// `max_inflight` records unanswered: resumed by `send`/`no_reply`.
    Backpressure,
    /// Queued replies plus replies still being produced (`reserved`) reach
    /// `max_queued` bytes: resumed when they drain or the charges are dropped.
    Output,
}

/// What one pump of a connection left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pump {
    /// Read to `WouldBlock`; wait for the next readiness event.
    Idle,
    /// Read budget used up with input possibly left: pump again next poll.
    Again,
    Stalled(Stall),
}

/// Why a connection is closed.
pub(super) enum Close {
    Eof,
    Io(io::Error),
    Frame(FrameError),
}

/// Shared context a connection needs while pumping (disjoint from the slot table).
pub(super) struct Cx<'a> {
    pub pools: &'a Pools,
    pub max_inflight: usize,
    pub max_queued: usize,
    pub stats: &'a mut TcpStats,
    /// The transport's pass clock (read once per poll, not per event).
    pub now: Instant,
}

pub(super) struct Conn {
    pub sock: TcpStream,
    pub peer: SocketAddr,
    pub id: ConnId,
    dec: RecordDecoder,
    pub stage: MmapMut,
    /// Unconsumed staged bytes are `stage[pos..end]`.
    pos: usize,
    end: usize,
    /// Body bytes of the current record kept in staging (while `rec` is `None`) are
    /// `stage[bs..be]`, always before `pos`.
    bs: usize,
    be: usize,
    /// The record being assembled, once it outgrew staging.
    pub rec: Option<Buf>,
    /// The decoder finished a record that still waits for a buffer to be delivered in.
    complete: bool,
    /// Records delivered and not yet answered.
    pub inflight: usize,
    pub out: VecDeque<Out>,
    /// Bytes of `out[0]` already written.
    out_off: usize,
    /// Memory held by `out` (see `Out::held`).
    pub out_bytes: usize,
    /// Reply bytes reserved for delivered records whose replies are still being
    /// produced: the sum of the live `Charge`s the caller made (through the `Budget`
    /// `on_record` gets, or `TcpTransport::charge`), each given back when dropped.
    /// Counted with `out_bytes` against `max_queued`, so a client that pipelines large
    /// READs and reads nothing holds at most its budget of reply buffers, not one per
    /// call in flight (Standards: a client must not pin shared buffers by reading
    /// nothing).
    pub reserved: Reserved,
    /// Since when `out` has been non-empty without any write progress.
    pub out_since: Option<Instant>,
    /// Bytes written to the socket over the connection's life.
    written: u64,
    /// The send-side reclaim's clock, kept by `note_drain` while the queue holds
    /// `RECLAIM_HELD` bytes: since when, and from how many bytes the peer had taken,
    /// it has not taken `RECLAIM_PROGRESS` more. Measured at the peer (bytes written
    /// minus the kernel's unacknowledged send queue), not by our writes: the kernel's
    /// send buffer (megabytes, autotuned) takes our writes in bursts, half a buffer
    /// apart, so a slow but steady reader can go seconds without a write of ours.
    /// `out_since` (any written byte) stays the `send_timeout` clock.
    drain_mark: Option<(Instant, u64)>,
    pub write_blocked: bool,
    /// The socket may hold unread bytes (edge-triggered: set by events, cleared by
    /// `WouldBlock`).
    pub readable: bool,
    /// The peer closed or reset the connection (a poll event said so); the next read
    /// will report it. Lets the transport free the slot before refusing a newcomer.
    pub hung_up: bool,
    /// In the transport's ready list.
    pub queued: bool,
    /// In the transport's deferred-flush list.
    pub dirty: bool,
    pub stall: Stall,
    /// When the current partial record was first seen while we were reading.
    pub partial_since: Option<Instant>,
    /// When bytes last arrived from the peer.
    pub last_input: Instant,
}

impl Conn {
    pub fn new(
        sock: TcpStream,
        peer: SocketAddr,
        id: ConnId,
        stage: MmapMut,
        max_record: usize,
        max_inflight: usize,
    ) -> Conn {
        Conn {
            sock,
            peer,
            id,
            dec: RecordDecoder::new(max_record),
            stage,
            pos: 0,
            end: 0,
            bs: 0,
            be: 0,
            rec: None,
            complete: false,
            inflight: 0,
            out: VecDeque::with_capacity(max_inflight),
            out_off: 0,
            out_bytes: 0,
            reserved: Reserved::default(),
            out_since: None,
            written: 0,
            drain_mark: None,
            write_blocked: false,
            readable: true,
            hung_up: false,
            queued: false,
            dirty: false,
            stall: Stall::None,
            partial_since: None,
            last_input: Instant::now(),
        }
    }

    /// Bytes of the `max_queued` budget in use: replies queued plus replies reserved.
    pub fn budget_used(&self) -> usize {
        self.out_bytes.saturating_add(self.reserved.get())
    }

    /// Whether this connection holds pool memory for a record it has not finished
    /// sending (what stall reclaim may take back).
    pub fn holds_partial(&self) -> bool {
        self.rec.is_some() && !self.complete
    }

    /// Whether nothing is in progress on this connection: no record being received
    /// (at a record boundary, nothing staged), none being answered, no reply queued
    /// or reserved. Such a connection may give its slot to a newcomer at
    /// `max_connections` (`TcpTransport::evict_for`).
    pub fn is_idle(&self) -> bool {
        self.dec.at_boundary()
            && self.pos == self.end
            && self.rec.is_none()
            && !self.complete
            && self.inflight == 0
            && self.out.is_empty()
            && self.reserved.get() == 0
    }

    /// Whether the peer has sent part of a record and not the rest.
    pub fn mid_record(&self) -> bool {
        !self.dec.at_boundary()
    }

    /// Whether this connection's queued replies hold enough shared memory, with too
    /// little taken by the peer since `since`, for the send-side reclaim to take back.
    pub fn holds_undrained(&self, since: Instant) -> bool {
        self.out_bytes >= RECLAIM_HELD && self.drain_mark.is_some_and(|(t, _)| t < since)
    }

    /// Since when the peer has taken too little of a queue worth reclaiming (logs).
    pub fn undrained_since(&self) -> Option<Instant> {
        self.drain_mark.map(|(t, _)| t)
    }

    /// Rule: a record that gets no reply (a callback's REPLY, a dropped call) is
    /// acknowledged now (TCP_QUICKACK), not after the delayed-ACK timer (40 ms and up
    /// on Linux once a connection is interactive): no reply carries the ACK, and a peer
    /// with Nagle's algorithm on holds its next small call until it comes (RFC 1122
    /// §4.2.3.4, §4.2.3.2). Best effort: a failure only costs that delay.
    pub fn ack_now(&self) {
        use std::os::fd::AsRawFd;
        let one: libc::c_int = 1;
        // SAFETY: TCP_QUICKACK reads one c_int from the pointer, which points at `one`
        // for the given length; the fd is this connection's open socket.
        let rc = unsafe {
            libc::setsockopt(
                self.sock.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_QUICKACK,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            tracing::debug!("tcp: TCP_QUICKACK failed: {}", io::Error::last_os_error());
        }
    }

    /// Rule (send-side reclaim's clock, called every sweep): while the queue holds
    /// `RECLAIM_HELD` bytes, the mark moves to `now` whenever the peer has taken
    /// `RECLAIM_PROGRESS` more bytes since it was set; below that, there is no mark.
    /// One `SIOCOUTQ` per backlogged connection per sweep, none for the others.
    pub fn note_drain(&mut self, now: Instant) {
        if self.out_bytes < RECLAIM_HELD {
            self.drain_mark = None;
            return;
        }
        let taken = self.taken();
        match self.drain_mark {
            Some((_, from)) if taken < from.saturating_add(RECLAIM_PROGRESS as u64) => {}
            _ => self.drain_mark = Some((now, taken)),
        }
    }

    /// Bytes the peer has acknowledged: written minus the kernel's send queue
    /// (`SIOCOUTQ`: bytes not yet acknowledged). If the kernel cannot tell, every
    /// written byte counts as taken (progress is then our own writes).
    fn taken(&self) -> u64 {
        use std::os::fd::AsRawFd;
        let mut n: libc::c_int = 0;
        // SAFETY: SIOCOUTQ (TIOCOUTQ) writes one c_int to the pointer, which points at
        // `n`; the fd is this connection's open socket.
        let rc = unsafe { libc::ioctl(self.sock.as_raw_fd(), libc::TIOCOUTQ, &mut n) };
        let queued = if rc == 0 {
            u64::try_from(n).unwrap_or(0)
        } else {
            0
        };
        self.written.saturating_sub(queued)
    }

    /// Rule: read until `WouldBlock` (edge-triggered), at most `READ_BUDGET` reads per
    /// poll, delivering each complete record. Returns the state and units of work.
    pub fn pump(
        &mut self,
        cx: &mut Cx,
        on_record: &mut dyn FnMut(ConnId, SocketAddr, Buf, &Budget),
    ) -> Result<(Pump, usize), Close> {
        self.resume(cx.now);
        let mut work = 0;
        for _ in 0..READ_BUDGET {
            if let Some(stall) = self.drain(cx, on_record, &mut work)? {
                return Ok((self.stalled(cx, stall), work));
            }
            if !self.readable {
                return Ok((Pump::Idle, work));
            }
            if !self.prepare_read(cx.pools) {
                return Ok((self.stalled(cx, Stall::Parked), work));
            }
            work += self.read_some(cx)?;
        }
        if let Some(stall) = self.drain(cx, on_record, &mut work)? {
            return Ok((self.stalled(cx, stall), work));
        }
        Ok((
            if self.readable {
                Pump::Again
            } else {
                Pump::Idle
            },
            work,
        ))
    }

    /// Rule: time spent stalled by us does not count against the peer's
    /// `record_timeout`: the clock restarts when reading resumes.
    fn resume(&mut self, now: Instant) {
        if self.stall != Stall::None {
            self.stall = Stall::None;
            self.partial_since = None;
            self.last_input = now;
        }
    }

    fn stalled(&mut self, cx: &mut Cx, stall: Stall) -> Pump {
        match stall {
            Stall::Parked => cx.stats.parks += 1,
            Stall::Backpressure => cx.stats.backpressured += 1,
            // Which part of the budget held it: queued replies alone, or replies
            // still being produced (an operator tells a slow reader from a pipeliner).
            Stall::Output if self.out_bytes >= cx.max_queued => cx.stats.output_stalls += 1,
            Stall::Output => cx.stats.reply_budget_stalls += 1,
            Stall::None => {}
        }
        self.stall = stall;
        Pump::Stalled(stall)
    }

    /// Rule: decode all staged bytes into records; before starting a record stop when
    /// `max_inflight` are unanswered or queued plus reserved reply bytes reach
    /// `max_queued` (`budget_used`); stop before
    /// placing body bytes (or delivering a record) when no pool buffer is free.
    /// Returns the stall, or `None` when the stage is consumed.
    fn drain(
        &mut self,
        cx: &mut Cx,
        on_record: &mut dyn FnMut(ConnId, SocketAddr, Buf, &Budget),
        work: &mut usize,
    ) -> Result<Option<Stall>, Close> {
        loop {
            if self.complete {
                if !self.deliver(cx, on_record) {
                    return Ok(Some(Stall::Parked));
                }
                *work += 1;
            }
            if self.dec.at_boundary() {
                if self.inflight >= cx.max_inflight {
                    return Ok(Some(Stall::Backpressure));
                }
                if self.budget_used() >= cx.max_queued {
                    return Ok(Some(Stall::Output));
                }
            }
            let k = self.dec.body_left().min(self.end - self.pos);
            if k > 0 && !self.room_for(cx.pools, k) {
                return Ok(Some(Stall::Parked));
            }
            let (n, ev) = self
                .dec
                .decode(&self.stage[self.pos..self.end])
                .map_err(Close::Frame)?;
            self.pos += n;
            match ev {
                None if n == 0 => break,
                None | Some(Event::Fragment { .. }) => {}
                Some(Event::Body(k)) => self.place_staged(k),
                Some(Event::Record) => self.complete = true,
            }
        }
        // Everything staged is consumed; body kept in staging stays where it is.
        if self.bs == self.be {
            self.bs = 0;
            self.be = 0;
        }
        self.pos = self.be;
        self.end = self.be;
        if !self.dec.at_boundary() && self.partial_since.is_none() {
            self.partial_since = Some(cx.now);
        }
        Ok(None)
    }

    /// Rule: `k` more body bytes fit the record buffer, growing it if needed; body
    /// still kept in staging needs no pool memory. No buffer free → false (park).
    fn room_for(&mut self, pools: &Pools, k: usize) -> bool {
        match &self.rec {
            None => true,
            Some(r) if r.capacity() - r.len() >= k => true,
            Some(r) => {
                let needed = r.len().saturating_add(k);
                self.grow(pools, needed)
            }
        }
    }

    /// Places the `k` body bytes just decoded at `stage[pos-k..pos]`: into the record
    /// buffer (room ensured by `room_for`), or next to the body kept in staging.
    fn place_staged(&mut self, k: usize) {
        let at = self.pos - k;
        match self.rec.as_mut() {
            Some(rec) => {
                let l = rec.len();
                rec.spare_mut()[l..l + k].copy_from_slice(&self.stage[at..self.pos]);
                rec.set_len(l + k);
            }
            None if self.bs == self.be => {
                self.bs = at;
                self.be = self.pos;
            }
            None => {
                if self.be != at {
                    self.stage.copy_within(at..self.pos, self.be);
                }
                self.be += k;
            }
        }
    }

    /// Rule: a complete record goes to the caller and counts as in flight until
    /// answered, and the reply bytes the caller charges for it (through the
    /// `Budget` lent with it) count as reserved until the charge is dropped; a record completed in staging is first copied into a pool
    /// buffer of its size. No buffer free → false (the record waits, `complete` stays
    /// set).
    fn deliver(
        &mut self,
        cx: &mut Cx,
        on_record: &mut dyn FnMut(ConnId, SocketAddr, Buf, &Budget),
    ) -> bool {
        let rec = match self.rec.take() {
            Some(r) => r,
            None => {
                let held = self.be - self.bs;
                let Some(mut b) = cx.pools.alloc(held) else {
                    return false;
                };
                b.spare_mut()[..held].copy_from_slice(&self.stage[self.bs..self.be]);
                b.set_len(held);
                self.bs = 0;
                self.be = 0;
                b
            }
        };
        self.complete = false;
        self.inflight += 1;
        self.partial_since = None;
        cx.stats.records_in += 1;
        on_record(self.id, self.peer, rec, &Budget(&self.reserved));
        true
    }

    /// Rule: before a read there is room for it. Body kept in staging stays there
    /// (compacted to the front) while the staging buffer has `DIRECT_MIN` bytes of
    /// room or the fragment's rest fits; otherwise it moves into a pool buffer. A
    /// direct read needs room in the record buffer. No buffer free → false (park).
    fn prepare_read(&mut self, pools: &Pools) -> bool {
        debug_assert_eq!(self.pos, self.end);
        let left = self.dec.body_left();
        match &self.rec {
            Some(r) => {
                if left >= DIRECT_MIN && r.capacity() == r.len() {
                    let needed = r.len().saturating_add(1);
                    return self.grow(pools, needed);
                }
                true
            }
            None => {
                let held = self.be - self.bs;
                let room = STAGE_SIZE - held;
                if held > 0 && room < DIRECT_MIN && left >= room {
                    return self.grow(pools, held.saturating_add(left.min(1)));
                }
                if self.bs > 0 {
                    self.stage.copy_within(self.bs..self.be, 0);
                    self.bs = 0;
                    self.be = held;
                    self.pos = held;
                    self.end = held;
                }
                true
            }
        }
    }

    /// Rule: a record's pool buffer is sized by the bytes that arrived, not
    /// by its mark: at most `GROW_STEP` until more than `GROW_STEP` bytes of the record
    /// were received or are waiting in the socket, then the record's announced length
    /// (so a well-behaved large record moves at most once). The body so far is copied
    /// into the new buffer. Called with every staged byte consumed. No buffer → false.
    fn grow(&mut self, pools: &Pools, needed: usize) -> bool {
        let have = self.rec.as_ref().map_or(self.be - self.bs, |r| r.len());
        let announced = self.dec.record_len().max(needed);
        let staged = self.end - self.pos;
        let sent = have.saturating_add(staged).saturating_add(self.unread());
        let step = if sent > GROW_STEP {
            announced
        } else {
            announced.min(GROW_STEP)
        };
        let Some(mut b) = pools.alloc(step.max(needed)) else {
            return false;
        };
        match self.rec.take() {
            Some(old) => b.spare_mut()[..old.len()].copy_from_slice(&old),
            None => {
                b.spare_mut()[..have].copy_from_slice(&self.stage[self.bs..self.be]);
                debug_assert_eq!(self.pos, self.end);
                self.bs = 0;
                self.be = 0;
                self.pos = 0;
                self.end = 0;
            }
        }
        b.set_len(have);
        self.rec = Some(b);
        true
    }

    /// Bytes waiting in the socket's receive queue (FIONREAD); 0 if unknown.
    fn unread(&self) -> usize {
        use std::os::fd::AsRawFd;
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes one c_int to the pointer, which points at `n`; the
        // fd is this connection's open socket.
        let rc = unsafe { libc::ioctl(self.sock.as_raw_fd(), libc::FIONREAD, &mut n) };
        if rc == 0 {
            usize::try_from(n).unwrap_or(0)
        } else {
            0
        }
    }

    /// Rule: a large outstanding body with a record buffer is read straight into it
    /// (no staging copy), only up to the fragment's end so the next header lands in
    /// staging. Everything else is read into staging after what is kept there.
    /// Returns 1 if bytes came.
    fn read_some(&mut self, cx: &mut Cx) -> Result<usize, Close> {
        let left = self.dec.body_left();
        let direct = left >= DIRECT_MIN && self.rec.is_some();
        let (res, asked) = match (&mut self.rec, direct) {
            (Some(rec), true) => {
                let l = rec.len();
                let ask = left.min(rec.capacity() - l);
                (self.sock.read(&mut rec.spare_mut()[l..l + ask]), ask)
            }
            _ => (
                self.sock.read(&mut self.stage[self.end..]),
                STAGE_SIZE - self.end,
            ),
        };
        match res {
            Ok(0) => Err(Close::Eof),
            Ok(n) => {
                // A short read emptied the socket's receive queue; new data raises a
                // fresh edge, so skip the read that would only say WouldBlock.
                if n < asked {
                    self.readable = false;
                }
                self.last_input = cx.now;
                cx.stats.bytes_in += n as u64;
                if direct {
                    cx.stats.bytes_direct += n as u64;
                }
                self.placed(direct, n);
                Ok(1)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.readable = false;
                Ok(0)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
            Err(e) => Err(Close::Io(e)),
        }
    }

    /// Accounts `n` bytes just read, either into the record or into staging.
    fn placed(&mut self, direct: bool, n: usize) {
        match (&mut self.rec, direct) {
            (Some(rec), true) => {
                rec.set_len(rec.len() + n);
                self.dec.body_read(n);
            }
            _ => self.end += n,
        }
    }

    /// Rule: a reply joins the queue in order; the memory it holds counts against the
    /// connection's `max_queued` budget, and the send clock starts if it was idle.
    pub fn push_reply(&mut self, reply: Out, now: Instant) {
        if self.out.is_empty() {
            self.out_since = Some(now);
        }
        self.out_bytes = self.out_bytes.saturating_add(reply.held());
        self.out.push_back(reply);
    }

    /// Rule: replies leave in queue order, up to `MAX_IOV` slices per vectored write
    /// (a reply with borrowed data is several slices: header, pieces, padding); a
    /// partial write keeps the offset into the front reply; `WouldBlock` waits for
    /// writability. Borrowed pieces of written replies go to `released`.
    pub fn flush(
        &mut self,
        stats: &mut TcpStats,
        now: Instant,
        released: &mut Released,
    ) -> io::Result<()> {
        while !self.out.is_empty() {
            if let Some(n) = self.splice_front(stats)? {
                if n == 0 {
                    return Ok(());
                }
                self.advance(n, now, released);
                continue;
            }
            let mut more = false;
            let res = {
                let mut iov = [IoSlice::new(&[]); MAX_IOV];
                let mut k = 0;
                for (i, r) in self.out.iter().enumerate() {
                    if k == MAX_IOV {
                        break;
                    }
                    let from = if i == 0 { self.out_off } else { 0 };
                    match r {
                        // The common case inline: one slice per reply.
                        Out::Buf(b) => {
                            iov[k] = IoSlice::new(&b[from..]);
                            k += 1;
                        }
                        ext => k += ext.slices(from, &mut iov[k..]),
                    }
                    if r.ends_gather(from) {
                        // Spliced data follows the header: hold the segment back.
                        more = true;
                        break;
                    }
                }
                stats.writes += 1;
                if more {
                    send_more(&self.sock, &iov[..k])
                } else {
                    self.sock.write_vectored(&iov[..k])
                }
            };
            match res {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    stats.bytes_out += n as u64;
                    self.advance(n, now, released);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    stats.write_blocks += 1;
                    self.write_blocked = true;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Rule: when the front record is a pipe record whose header is sent and whose
    /// data is not, its data goes next, spliced from the pipe into the socket (no
    /// copy), as much as the socket takes. `None`: the front is not at spliced data;
    /// `Some(0)`: the socket is full (wait for writability); `Some(n)`: bytes sent.
    fn splice_front(&mut self, stats: &mut TcpStats) -> io::Result<Option<usize>> {
        use std::os::fd::AsRawFd;
        let Some(Out::Pipe {
            head,
            data_len,
            pad,
            ..
        }) = self.out.front()
        else {
            return Ok(None);
        };
        let (h, d) = (head.len(), *data_len);
        if self.out_off < h || self.out_off >= h + d {
            return Ok(None);
        }
        let left = h + d - self.out_off;
        let more = *pad > 0 || self.out.len() > 1;
        loop {
            stats.writes += 1;
            match pipe_of(&mut self.out).splice_to(self.sock.as_raw_fd(), left, more) {
                // The pipe holds less than the record says: never queued so (the
                // transport takes `data_len` from the pipe), so a broken record.
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    stats.bytes_out += n as u64;
                    stats.bytes_spliced += n as u64;
                    return Ok(Some(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    stats.write_blocks += 1;
                    self.write_blocked = true;
                    return Ok(Some(0));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Drops fully written replies (buffers back to their pool, borrowed pieces to
    /// `released`), keeps the partial offset and restarts the send clock (progress was
    /// made).
    fn advance(&mut self, mut n: usize, now: Instant, released: &mut Released) {
        self.out_since = Some(now);
        self.written = self.written.saturating_add(n as u64);
        while n > 0 {
            let Some(front) = self.out.front() else {
                break;
            };
            let left = front.len() - self.out_off;
            if n < left {
                self.out_off += n;
                return;
            }
            n -= left;
            self.out_bytes = self.out_bytes.saturating_sub(front.held());
            if let Some(r) = self.out.pop_front() {
                released.take(r);
            }
            self.out_off = 0;
        }
        if self.out.is_empty() {
            self.out_since = None;
            self.drain_mark = None;
        }
    }

    /// Empties the send queue of a closing connection: borrowed pieces go to
    /// `released` (their memory is no longer read), buffers back to their pools.
    pub fn drop_output(&mut self, released: &mut Released) {
        for r in self.out.drain(..) {
            released.take(r);
        }
        self.out_off = 0;
        self.out_bytes = 0;
        self.out_since = None;
        self.drain_mark = None;
    }
}

/// The pipe of the front record (a pipe record: checked by the caller).
fn pipe_of(out: &mut VecDeque<Out>) -> &mut super::pipe::Pipe {
    match out.front_mut() {
        Some(Out::Pipe { pipe, .. }) => pipe,
        _ => unreachable!("the front record is a pipe record"),
    }
}

/// A vectored write with `MSG_MORE`: a header whose data follows by splice is held
/// back to join it in full segments rather than leave as a small one of its own.
fn send_more(sock: &TcpStream, iov: &[IoSlice]) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    // SAFETY: `msghdr` is plain old data; all-zero is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // `IoSlice` is ABI-compatible with `iovec` (documented); the kernel only reads.
    msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = iov.len() as _;
    // SAFETY: `msg` points at `iov.len()` valid iovecs that outlive the call; the
    // socket is this connection's open descriptor.
    let n = unsafe {
        libc::sendmsg(
            sock.as_raw_fd(),
            &msg,
            libc::MSG_MORE | libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}
