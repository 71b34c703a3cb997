//! A minimal synchronous NFSv3/MOUNT requester for `bench` (over any [`Transport`]), built on the
//! engine's XDR and RPC codecs. Calls are pipelined: `send_*` returns the xid, `recv`
//! returns the next reply in arrival order.

use crate::transport::{Target, Transport};
use engine::rpc::{self, Accept, AuthSys, Cred, ReplyStatus};
use engine::xdr::{XdrReader, XdrWriter};

const NFS: u32 = 100003;
const MOUNT: u32 = 100005;

pub struct Conn {
    t: Box<dyn Transport>,
    xid: u32,
    cred: Cred,
    out: Vec<u8>,
}

/// The deterministic content bench writes, so reads can be verified.
pub struct Pattern {
    seed: u64,
}

impl Pattern {
    pub fn new(name: &str) -> Pattern {
        let seed = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        });
        Pattern { seed }
    }

    fn byte(&self, off: u64) -> u8 {
        let x = (off / 8).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ self.seed;
        (x >> ((off % 8) * 8)) as u8
    }

    /// The eight pattern bytes of the aligned word holding `off`.
    fn word(&self, off: u64) -> [u8; 8] {
        ((off / 8).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ self.seed).to_le_bytes()
    }

    pub fn fill(&self, off: u64, dst: &mut [u8]) {
        let head = ((8 - off % 8) % 8).min(dst.len() as u64) as usize;
        let (a, rest) = dst.split_at_mut(head);
        for (i, b) in a.iter_mut().enumerate() {
            *b = self.byte(off + i as u64);
        }
        let mut at = off + head as u64;
        let mut words = rest.chunks_exact_mut(8);
        for w in &mut words {
            w.copy_from_slice(&self.word(at));
            at += 8;
        }
        for (i, b) in words.into_remainder().iter_mut().enumerate() {
            *b = self.byte(at + i as u64);
        }
    }

    pub fn check(&self, off: u64, data: &[u8]) -> bool {
        let head = ((8 - off % 8) % 8).min(data.len() as u64) as usize;
        let (a, rest) = data.split_at(head);
        if !a
            .iter()
            .enumerate()
            .all(|(i, &b)| b == self.byte(off + i as u64))
        {
            return false;
        }
        let at = off + head as u64;
        let words = rest.chunks_exact(8);
        let tail = words.remainder();
        let mut w_at = at;
        for w in words {
            if w != self.word(w_at) {
                return false;
            }
            w_at += 8;
        }
        tail.iter()
            .enumerate()
            .all(|(i, &b)| b == self.byte(w_at + i as u64))
    }
}

/// nfsstat3 of a reply body (0 = OK).
pub fn status(body: &[u8]) -> u32 {
    XdrReader::new(body).u32().unwrap_or(u32::MAX)
}

fn skip_post_op_attr(r: &mut XdrReader) -> anyhow::Result<()> {
    if r.bool()? {
        r.skip(84)?;
    }
    Ok(())
}

/// The data of a READ3resok.
pub fn parse_read(body: &[u8]) -> anyhow::Result<&[u8]> {
    let mut r = XdrReader::new(body);
    let st = r.u32()?;
    if st != 0 {
        anyhow::bail!("READ failed: nfsstat3 {st}");
    }
    skip_post_op_attr(&mut r)?;
    let _count = r.u32()?;
    let _eof = r.bool()?;
    Ok(r.opaque_var(1 << 21)?)
}

impl Conn {
    pub fn connect(target: &Target) -> anyhow::Result<Conn> {
        Ok(Conn {
            t: target.connect()?,
            // A random first XID: a server's duplicate request cache must not take a
            // new run's calls for retransmissions of an old one.
            xid: rand::random(),
            cred: Cred::Sys(AuthSys::new(0, 0, &[])),
            out: vec![0u8; (1 << 20) + 4096],
        })
    }

    fn send(
        &mut self,
        prog: u32,
        proc_: u32,
        args: impl FnOnce(&mut XdrWriter) -> engine::xdr::XdrResult<()>,
    ) -> anyhow::Result<u32> {
        self.xid = self.xid.wrapping_add(1);
        let xid = self.xid;
        let mut w = XdrWriter::at(&mut self.out, 4);
        rpc::write_call(&mut w, xid, prog, 3, proc_, &self.cred)?;
        args(&mut w)?;
        let n = w.position();
        self.t.send(&mut self.out[..n])?;
        Ok(xid)
    }

    /// Reads the next reply; returns its xid and the procedure results, or why the call
    /// failed (rejected by the server, or lost by the transport).
    pub fn recv(&mut self) -> anyhow::Result<(u32, anyhow::Result<Vec<u8>>)> {
        let (xid, rec) = self.t.recv()?;
        let body = match rec {
            Err(e) => Err(anyhow::anyhow!("call {xid}: {e}")),
            Ok(rec) => match rpc::decode_reply(&rec) {
                Err(e) => Err(anyhow::anyhow!("call {xid}: bad reply: {e}")),
                Ok((_, st, _)) if st != ReplyStatus::Accepted(Accept::Success) => {
                    Err(anyhow::anyhow!("call {xid} rejected: {st:?}"))
                }
                Ok((_, _, off)) => {
                    let mut rec = rec;
                    rec.drain(..off);
                    Ok(rec)
                }
            },
        };
        Ok((xid, body))
    }

    fn call(
        &mut self,
        prog: u32,
        proc_: u32,
        args: impl FnOnce(&mut XdrWriter) -> engine::xdr::XdrResult<()>,
    ) -> anyhow::Result<Vec<u8>> {
        let xid = self.send(prog, proc_, args)?;
        let (rx, body) = self.recv()?;
        anyhow::ensure!(rx == xid, "reply xid {rx} for call {xid}");
        body
    }

    pub fn mount(&mut self, path: &str) -> anyhow::Result<Vec<u8>> {
        let body = self.call(MOUNT, 1, |w| w.string(path.as_bytes()))?;
        let mut r = XdrReader::new(&body);
        let st = r.u32()?;
        anyhow::ensure!(st == 0, "MNT {path} failed: mountstat3 {st}");
        Ok(r.opaque_var(64)?.to_vec())
    }

    fn lookup(&mut self, dir: &[u8], name: &str) -> anyhow::Result<Option<Vec<u8>>> {
        let body = self.call(NFS, 3, |w| {
            w.opaque_var(dir)?;
            w.string(name.as_bytes())
        })?;
        let mut r = XdrReader::new(&body);
        match r.u32()? {
            0 => Ok(Some(r.opaque_var(64)?.to_vec())),
            2 => Ok(None),
            st => anyhow::bail!("LOOKUP {name} failed: nfsstat3 {st}"),
        }
    }

    /// The handle of `name`, created (empty) if missing; existing data is kept.
    pub fn lookup_or_create(&mut self, dir: &[u8], name: &str) -> anyhow::Result<Vec<u8>> {
        match self.lookup(dir, name)? {
            Some(fh) => Ok(fh),
            None => self.create(dir, name),
        }
    }

    /// CREATE UNCHECKED (truncating to zero).
    pub fn create(&mut self, dir: &[u8], name: &str) -> anyhow::Result<Vec<u8>> {
        let body = self.call(NFS, 8, |w| {
            w.opaque_var(dir)?;
            w.string(name.as_bytes())?;
            w.u32(0)?; // UNCHECKED
            w.u32(1)?; // mode
            w.u32(0o644)?;
            w.u32(0)?; // uid
            w.u32(0)?; // gid
            w.u32(1)?; // size
            w.u64(0)?;
            w.u32(0)?; // atime
            w.u32(0) // mtime
        })?;
        let mut r = XdrReader::new(&body);
        let st = r.u32()?;
        anyhow::ensure!(st == 0, "CREATE {name} failed: nfsstat3 {st}");
        anyhow::ensure!(r.bool()?, "CREATE returned no handle");
        Ok(r.opaque_var(64)?.to_vec())
    }

    /// Returns a handle to `name` holding `size` bytes of the pattern, writing it if
    /// the file is missing or shorter.
    pub fn prepare(
        &mut self,
        dir: &[u8],
        name: &str,
        size: u64,
        pat: &Pattern,
    ) -> anyhow::Result<Vec<u8>> {
        if let Some(fh) = self.lookup(dir, name)? {
            let body = self.call(NFS, 1, |w| w.opaque_var(&fh))?;
            let mut r = XdrReader::new(&body);
            if r.u32()? == 0 {
                r.skip(4 * 5)?;
                if r.u64()? >= size {
                    return Ok(fh);
                }
            }
        }
        let fh = self.create(dir, name)?;
        let chunk = 1u64 << 20;
        let mut buf = vec![0u8; chunk as usize];
        let mut off = 0;
        while off < size {
            let n = chunk.min(size - off) as usize;
            pat.fill(off, &mut buf[..n]);
            self.send_write(&fh, off, &buf[..n])?;
            let (_, body) = self.recv()?;
            let body = body?;
            anyhow::ensure!(
                status(&body) == 0,
                "WRITE failed: nfsstat3 {}",
                status(&body)
            );
            off += n as u64;
        }
        self.commit(&fh)?;
        Ok(fh)
    }

    pub fn commit(&mut self, fh: &[u8]) -> anyhow::Result<()> {
        let body = self.call(NFS, 21, |w| {
            w.opaque_var(fh)?;
            w.u64(0)?;
            w.u32(0)
        })?;
        anyhow::ensure!(
            status(&body) == 0,
            "COMMIT failed: nfsstat3 {}",
            status(&body)
        );
        Ok(())
    }

    pub fn send_null(&mut self) -> anyhow::Result<u32> {
        self.send(NFS, 0, |_| Ok(()))
    }

    pub fn send_getattr(&mut self, fh: &[u8]) -> anyhow::Result<u32> {
        self.send(NFS, 1, |w| w.opaque_var(fh))
    }

    pub fn send_read(&mut self, fh: &[u8], off: u64, count: u32) -> anyhow::Result<u32> {
        self.send(NFS, 6, |w| {
            w.opaque_var(fh)?;
            w.u64(off)?;
            w.u32(count)
        })
    }

    pub fn send_write(&mut self, fh: &[u8], off: u64, data: &[u8]) -> anyhow::Result<u32> {
        self.send(NFS, 7, |w| {
            w.opaque_var(fh)?;
            w.u64(off)?;
            w.u32(data.len() as u32)?;
            w.u32(0)?; // UNSTABLE
            w.opaque_var(data)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_is_deterministic_and_position_dependent() {
        let p = Pattern::new("f");
        let mut a = [0u8; 64];
        p.fill(100, &mut a);
        assert!(p.check(100, &a));
        assert!(!p.check(101, &a));
        let mut b = [0u8; 32];
        p.fill(132, &mut b);
        assert_eq!(&a[32..], &b[..]);
    }

    #[test]
    fn parse_read_rejects_errors_and_truncation() {
        assert!(parse_read(&[0, 0, 0, 2]).is_err());
        assert!(parse_read(&[0, 0, 0, 0, 0, 0, 0, 0]).is_err());
        let mut ok = vec![0u8; 4 + 4 + 4 + 4 + 4 + 4];
        ok[15] = 1; // eof
        ok[19] = 3; // len
        ok.truncate(20);
        ok.extend_from_slice(&[1, 2, 3, 0]);
        assert_eq!(parse_read(&ok).unwrap(), &[1, 2, 3]);
    }
}
