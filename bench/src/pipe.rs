//! Non-blocking, pipelined RPC connections ([`Pipe`]) and record marking
//! ([`RecordReader`], [`push_record`]): the pieces the bridge and the RDMA transport
//! share.

use engine::rpc::{self, Accept};
use engine::xdr::XdrWriter;
use std::io::{self, Read, Write};
use std::net::TcpStream;

/// Largest RPC record accepted from a peer (a 1 MiB WRITE plus headers fits easily).
pub const MAX_RECORD: usize = 8 << 20;

/// Why a call could not be submitted.
#[derive(Debug)]
pub enum SubmitFail {
    /// This call cannot be sent (it is not a valid RPC message, or too large); the
    /// connection is fine.
    Call(String),
    /// The connection is broken.
    Conn(io::Error),
}

/// Receives one reply: the caller's XID and the whole RPC reply record, or why the call
/// failed. The record's own first word may be a transport-assigned XID: use the one
/// given.
pub type OnReply<'a> = dyn FnMut(u32, Result<&[u8], String>) + 'a;

/// One non-blocking, pipelined RPC connection to a server.
pub trait Pipe: Send {
    /// Sends one call (an encoded RPC call starting at its XID). `Ok(false)`: no room
    /// (out of credits); poll and try again.
    fn try_submit(&mut self, call: &[u8]) -> Result<bool, SubmitFail>;

    /// Delivers the replies that are complete: the call's XID (as submitted) and the
    /// whole RPC reply record (whose first word may differ, see [`OnReply`]), or why
    /// that call failed. Returns how many. An error means
    /// the connection is broken.
    fn poll(&mut self, on_reply: &mut OnReply) -> io::Result<usize>;

    /// Calls submitted and not yet answered.
    fn in_flight(&self) -> usize;

    /// A file descriptor an idle caller may block on (poll(2)) instead of spinning, and
    /// whether the pipe waits for it to become writable (output is queued). `None`: the
    /// pipe must be polled (RDMA completion queues).
    fn wait_fd(&self) -> Option<(std::os::fd::RawFd, bool)> {
        None
    }

    /// Hands over the server's callbacks (RFC 8167 reverse calls on this connection)
    /// received since the last call, when the pipe forwards them (the bridge) instead
    /// of answering them itself: XID and RPC call record.
    fn take_callbacks(&mut self, _f: &mut dyn FnMut(u32, &[u8])) {}

    /// Answers a callback handed over by [`Pipe::take_callbacks`] with an RPC reply
    /// record (from its XID).
    fn reply_callback(&mut self, _xid: u32, _reply: &[u8]) -> io::Result<()> {
        Err(io::ErrorKind::Unsupported.into())
    }
}

/// The XID (word 0) of an RPC message.
pub fn xid_of(msg: &[u8]) -> Option<u32> {
    msg.get(..4)
        .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

/// Appends `rec` to `out` as one last fragment.
pub fn push_record(out: &mut Vec<u8>, rec: &[u8]) {
    out.extend_from_slice(&(0x8000_0000u32 | rec.len() as u32).to_be_bytes());
    out.extend_from_slice(rec);
}

/// Appends `rec` to `out` as one last fragment, with its first word (the XID)
/// replaced by `xid`.
pub fn push_record_as(out: &mut Vec<u8>, xid: u32, rec: &[u8]) {
    out.extend_from_slice(&(0x8000_0000u32 | rec.len() as u32).to_be_bytes());
    out.extend_from_slice(&xid.to_be_bytes());
    out.extend_from_slice(rec.get(4..).unwrap_or_default());
}

/// An accepted reply with SYSTEM_ERR for `xid` (for calls the bridge could not
/// forward), without record mark.
pub fn system_err_reply(xid: u32) -> Vec<u8> {
    let mut buf = [0u8; 64];
    let mut w = XdrWriter::new(&mut buf);
    rpc::write_accepted(&mut w, xid, Accept::SystemErr).expect("64 bytes hold a reply header");
    let n = w.position();
    buf[..n].to_vec()
}

/// Reassembles record-marked RPC messages (RFC 5531 §11) from a byte stream, any
/// number of fragments per record, split anywhere.
#[derive(Debug, Default)]
pub struct RecordReader {
    mark: [u8; 4],
    mark_have: usize,
    /// Bytes of the current fragment still to come.
    frag_left: usize,
    last: bool,
    in_fragment: bool,
    rec: Vec<u8>,
}

impl RecordReader {
    pub fn new() -> RecordReader {
        RecordReader::default()
    }

    /// Consumes `data`, calling `emit` with every completed record. Errors on a record
    /// larger than [`MAX_RECORD`] (the stream cannot be resynchronised then).
    pub fn feed(&mut self, mut data: &[u8], emit: &mut dyn FnMut(Vec<u8>)) -> io::Result<()> {
        while !data.is_empty() {
            if !self.in_fragment {
                let n = (4 - self.mark_have).min(data.len());
                self.mark[self.mark_have..self.mark_have + n].copy_from_slice(&data[..n]);
                self.mark_have += n;
                data = &data[n..];
                if self.mark_have < 4 {
                    break;
                }
                self.mark_have = 0;
                let m = u32::from_be_bytes(self.mark);
                self.last = m & 0x8000_0000 != 0;
                self.frag_left = (m & 0x7fff_ffff) as usize;
                if self.rec.len() + self.frag_left > MAX_RECORD {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "RPC record larger than {MAX_RECORD} bytes ({} + {})",
                            self.rec.len(),
                            self.frag_left
                        ),
                    ));
                }
                self.rec.reserve(self.frag_left);
                self.in_fragment = true;
            }
            let n = self.frag_left.min(data.len());
            self.rec.extend_from_slice(&data[..n]);
            self.frag_left -= n;
            data = &data[n..];
            if self.frag_left == 0 {
                self.in_fragment = false;
                if self.last {
                    emit(std::mem::take(&mut self.rec));
                }
            }
        }
        Ok(())
    }

    /// Whether a record is partly received.
    pub fn partial(&self) -> bool {
        self.mark_have > 0 || self.in_fragment || !self.rec.is_empty()
    }
}

/// A [`Pipe`] over record-marked TCP (for comparisons and for testing the bridge
/// without RDMA). At most `max_in_flight` calls are outstanding.
pub struct TcpPipe {
    s: TcpStream,
    out: Vec<u8>,
    out_at: usize,
    reader: RecordReader,
    buf: Vec<u8>,
    in_flight: usize,
    max_in_flight: usize,
}

impl TcpPipe {
    pub fn connect(addr: &str, max_in_flight: usize) -> io::Result<TcpPipe> {
        let s = crate::transport::tcp_connect(addr)?;
        s.set_nodelay(true)?;
        s.set_nonblocking(true)?;
        Ok(TcpPipe {
            s,
            out: Vec::new(),
            out_at: 0,
            reader: RecordReader::new(),
            buf: vec![0u8; 256 << 10],
            in_flight: 0,
            max_in_flight: max_in_flight.max(1),
        })
    }

    fn flush(&mut self) -> io::Result<()> {
        while self.out_at < self.out.len() {
            match self.s.write(&self.out[self.out_at..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.out_at += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.out_at == self.out.len() {
            self.out.clear();
            self.out_at = 0;
        }
        Ok(())
    }
}

impl Pipe for TcpPipe {
    fn try_submit(&mut self, call: &[u8]) -> Result<bool, SubmitFail> {
        if call.len() < 4 {
            return Err(SubmitFail::Call("call shorter than an XID".into()));
        }
        if self.in_flight >= self.max_in_flight || self.out.len() - self.out_at > MAX_RECORD {
            return Ok(false);
        }
        push_record(&mut self.out, call);
        self.in_flight += 1;
        self.flush().map_err(SubmitFail::Conn)?;
        Ok(true)
    }

    fn poll(&mut self, on_reply: &mut OnReply) -> io::Result<usize> {
        self.flush()?;
        let mut got = 0;
        loop {
            match self.s.read(&mut self.buf) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    let in_flight = &mut self.in_flight;
                    self.reader.feed(&self.buf[..n], &mut |rec| {
                        if let Some(xid) = xid_of(&rec) {
                            *in_flight = in_flight.saturating_sub(1);
                            got += 1;
                            on_reply(xid, Ok(&rec));
                        }
                    })?;
                    if n < self.buf.len() {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(got)
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }

    fn wait_fd(&self) -> Option<(std::os::fd::RawFd, bool)> {
        use std::os::fd::AsRawFd;
        Some((self.s.as_raw_fd(), self.out_at < self.out.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(r: &mut RecordReader, data: &[u8]) -> Vec<Vec<u8>> {
        let mut v = Vec::new();
        r.feed(data, &mut |rec| v.push(rec)).unwrap();
        v
    }

    #[test]
    fn records_reassemble_across_fragments_and_splits() {
        // Record A in three fragments (one empty), record B in one.
        let mut s = Vec::new();
        s.extend_from_slice(&3u32.to_be_bytes());
        s.extend_from_slice(b"abc");
        s.extend_from_slice(&0u32.to_be_bytes());
        s.extend_from_slice(&(0x8000_0000u32 | 2).to_be_bytes());
        s.extend_from_slice(b"de");
        push_record(&mut s, b"xyzw");
        for split in 0..=s.len() {
            let mut r = RecordReader::new();
            let mut got = collect(&mut r, &s[..split]);
            got.extend(collect(&mut r, &s[split..]));
            assert_eq!(
                got,
                vec![b"abcde".to_vec(), b"xyzw".to_vec()],
                "split {split}"
            );
            assert!(!r.partial());
        }
        // Byte by byte.
        let mut r = RecordReader::new();
        let mut got = Vec::new();
        for b in &s {
            got.extend(collect(&mut r, std::slice::from_ref(b)));
        }
        assert_eq!(got.len(), 2);
    }

    #[test]
    fn oversized_records_are_refused() {
        let mut r = RecordReader::new();
        let mark = (0x8000_0000u32 | (MAX_RECORD as u32 + 1)).to_be_bytes();
        assert!(r.feed(&mark, &mut |_| {}).is_err());
    }

    #[test]
    fn system_err_reply_decodes() {
        let r = system_err_reply(42);
        let (xid, st, _) = rpc::decode_reply(&r).unwrap();
        assert_eq!(xid, 42);
        assert_eq!(st, rpc::ReplyStatus::Accepted(Accept::SystemErr));
    }
}
