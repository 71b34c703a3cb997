//! The wire pieces the fuzzer needs: a growable XDR encoder (RFC 4506) small on
//! purpose so it can also write what a correct encoder never would, ONC RPC call
//! records (RFC 5531, AUTH_NONE/AUTH_SYS, record marking §11) from nfs-wire's call
//! encoder, and reading replies back with a deadline.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use nfs_wire::rpccall::{self, Auth, AuthSysBody};
pub use nfs_wire::{MOUNT_PROGRAM as MOUNT_PROG, NFS_PROGRAM as NFS_PROG};

/// Last-fragment bit of a record mark (RFC 5531 §11).
pub use nfs_wire::rpccall::LAST_FRAG;
/// Largest reply record the fuzzer accepts (a 1 MiB READ plus headers, with room).
pub const MAX_REPLY: usize = 4 << 20;

/// An XDR encoder over a growable buffer.
#[derive(Debug, Default, Clone)]
pub struct Enc(pub Vec<u8>);

impl Enc {
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.u32(v as u32)
    }
    /// Fixed-length opaque: the bytes and their padding to 4.
    pub fn fixed(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        let pad = (4 - b.len() % 4) % 4;
        self.0.extend_from_slice(&[0u8; 3][..pad]);
        self
    }
    /// Variable-length opaque or string: length, bytes, padding.
    pub fn var(&mut self, b: &[u8]) -> &mut Self {
        self.u32(b.len() as u32).fixed(b)
    }
}

/// An RPC credential as the fuzzer sends it.
#[derive(Debug, Clone)]
pub enum Cred {
    None,
    /// AUTH_SYS: stamp, machine name, uid, gid, gids (any count: >16 is hostile).
    Sys {
        machine: Vec<u8>,
        uid: u32,
        gid: u32,
        gids: Vec<u32>,
    },
}

impl Cred {
    /// The well-behaved clients' credential: root, so setup and checks reach everything.
    pub fn root() -> Cred {
        Cred::Sys {
            machine: b"fuzz".to_vec(),
            uid: 0,
            gid: 0,
            gids: vec![0],
        }
    }

    /// As nfs-wire's call encoder takes it (any name length and group count).
    fn auth(&self) -> Auth<'_> {
        match self {
            Cred::None => Auth::None,
            Cred::Sys {
                machine,
                uid,
                gid,
                gids,
            } => Auth::Sys(AuthSysBody {
                stamp: 0x5eed,
                machine,
                uid: *uid,
                gid: *gid,
                gids,
            }),
        }
    }
}

/// A whole record: record mark (one last fragment) + call header + `args`, written
/// by nfs-wire's call encoder (`nfs_wire::rpccall`).
pub fn call_record(
    xid: u32,
    prog: u32,
    vers: u32,
    proc_: u32,
    cred: &Cred,
    args: &[u8],
) -> Vec<u8> {
    let call = rpccall::call_with(xid, prog, vers, proc_, &cred.auth(), args)
        .expect("a fuzz call encodes");
    rpccall::record(&call).expect("a fuzz call fits one fragment")
}

/// How a read of one reply ended.
#[derive(Debug)]
pub enum Got {
    /// A whole reply record (fragments joined).
    Reply(Vec<u8>),
    /// The server closed (or reset) the connection.
    Closed,
    /// Nothing complete before the deadline.
    Timeout,
}

/// Reads exactly `buf.len()` bytes before `deadline`; `Ok(false)` on close.
fn read_full(
    s: &mut TcpStream,
    buf: &mut [u8],
    deadline: Instant,
) -> std::io::Result<Option<bool>> {
    let mut got = 0;
    while got < buf.len() {
        let now = Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        s.set_read_timeout(Some((deadline - now).max(Duration::from_millis(1))))?;
        match s.read(&mut buf[got..]) {
            Ok(0) => return Ok(Some(false)),
            Ok(n) => got += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Ok(None)
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::ConnectionReset
                        | ErrorKind::ConnectionAborted
                        | ErrorKind::BrokenPipe
                ) =>
            {
                return Ok(Some(false))
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Some(true))
}

/// Reads one record-marked reply. A record larger than [`MAX_REPLY`] is an error (a
/// server bug worth reporting, not something to allocate for).
pub fn read_record(s: &mut TcpStream, deadline: Instant) -> anyhow::Result<Got> {
    let mut rec = Vec::new();
    loop {
        let mut hdr = [0u8; 4];
        match read_full(s, &mut hdr, deadline)? {
            None => return Ok(Got::Timeout),
            Some(false) => return Ok(Got::Closed),
            Some(true) => {}
        }
        let h = u32::from_be_bytes(hdr);
        let len = (h & !LAST_FRAG) as usize;
        anyhow::ensure!(
            rec.len().saturating_add(len) <= MAX_REPLY,
            "server sent a reply record over {MAX_REPLY} bytes (fragment of {len})"
        );
        let at = rec.len();
        rec.resize(at + len, 0);
        match read_full(s, &mut rec[at..], deadline)? {
            None => return Ok(Got::Timeout),
            Some(false) => return Ok(Got::Closed),
            Some(true) => {}
        }
        if h & LAST_FRAG != 0 {
            return Ok(Got::Reply(rec));
        }
    }
}

/// Sends `bytes`; a reset or broken pipe (the server gave up on us) is not an error.
pub fn send(s: &mut TcpStream, bytes: &[u8]) -> anyhow::Result<bool> {
    match s.write_all(bytes) {
        Ok(()) => Ok(true),
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::ConnectionReset | ErrorKind::BrokenPipe | ErrorKind::ConnectionAborted
            ) =>
        {
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

/// A cursor over reply bytes; every read is bounds-checked (the server is under test).
pub struct Dec<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Dec<'a> {
    pub fn new(b: &'a [u8]) -> Dec<'a> {
        Dec { b, pos: 0 }
    }
    pub fn u32(&mut self) -> Option<u32> {
        let w = self.b.get(self.pos..self.pos.checked_add(4)?)?;
        self.pos += 4;
        Some(u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
    }
    pub fn skip(&mut self, n: usize) -> Option<()> {
        let end = self.pos.checked_add(n)?;
        (end <= self.b.len()).then(|| self.pos = end)
    }
    /// A variable-length opaque of at most `max` bytes.
    pub fn var(&mut self, max: usize) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        if n > max {
            return None;
        }
        let v = self.b.get(self.pos..self.pos.checked_add(n)?)?;
        self.skip(n.div_ceil(4) * 4)?;
        Some(v)
    }
    pub fn rest(&self) -> &'a [u8] {
        self.b.get(self.pos..).unwrap_or_default()
    }
}

/// A parsed reply header.
#[derive(Debug, PartialEq, Eq)]
pub struct Reply<'a> {
    pub xid: u32,
    /// `Some(accept_stat)` for MSG_ACCEPTED, `None` for MSG_DENIED.
    pub accept: Option<u32>,
    /// The procedure results (empty unless accepted).
    pub body: &'a [u8],
}

/// Parses an RPC reply record; `None` if it is not a well-formed reply (a server bug).
pub fn parse_reply(rec: &[u8]) -> Option<Reply<'_>> {
    let mut d = Dec::new(rec);
    let xid = d.u32()?;
    if d.u32()? != 1 {
        return None; // not a REPLY
    }
    match d.u32()? {
        0 => {
            let _flavor = d.u32()?;
            d.var(400)?; // verifier body
            let stat = d.u32()?;
            if stat == 2 {
                d.skip(8)?; // PROG_MISMATCH low/high
            }
            Some(Reply {
                xid,
                accept: Some(stat),
                body: d.rest(),
            })
        }
        1 => Some(Reply {
            xid,
            accept: None,
            body: &[],
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_record_frames_and_pads() {
        let r = call_record(9, NFS_PROG, 3, 1, &Cred::root(), &[1, 2, 3, 4]);
        let mark = u32::from_be_bytes([r[0], r[1], r[2], r[3]]);
        assert_eq!(mark & LAST_FRAG, LAST_FRAG);
        assert_eq!((mark & !LAST_FRAG) as usize, r.len() - 4);
        assert_eq!(&r[4..8], &9u32.to_be_bytes());
        let mut e = Enc::default();
        e.var(b"abcde");
        assert_eq!(e.0.len(), 4 + 8);
    }

    #[test]
    fn replies_parse_and_garbage_does_not() {
        let mut e = Enc::default();
        e.u32(5).u32(1).u32(0).u32(0).u32(0).u32(0).u32(77);
        let r = parse_reply(&e.0).unwrap();
        assert_eq!(
            (r.xid, r.accept, r.body),
            (5, Some(0), &77u32.to_be_bytes()[..])
        );
        assert!(parse_reply(&[0, 0, 0, 5, 0, 0, 0, 0]).is_none());
        assert!(parse_reply(&[0, 0]).is_none());
        let mut d = Dec::new(&[0, 0, 0, 9, 1]);
        assert!(d.var(64).is_none());
    }
}
