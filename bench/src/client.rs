//! A small blocking NFSv3/MOUNT requester for bench's setup and check phases (mount,
//! preparing the file set, committing, reading written blocks back), over any
//! [`Transport`]. Calls may be pipelined: `send` returns the xid, `recv` the next reply
//! in arrival order. The load itself is driven by [`crate::driver`].

use crate::jukebox::{Policy, Tries, JUKEBOX};
use crate::pattern::Pattern;
use crate::transport::{Target, Transport};
use engine::rpc::{AuthSys, Cred};
use nfs_wire::v3call::{self, Call};
use nfs_wire::v3mount::{self, ExportNode};
use std::collections::HashMap;

pub struct Conn {
    t: Box<dyn Transport>,
    xid: u32,
    cred: Cred,
    out: Vec<u8>,
    /// NFSv3 calls answered NFS3ERR_JUKEBOX are resent by this policy...
    pub retry: Policy,
    /// ... and counted here.
    pub jukebox: u64,
}

/// The credential every bench call carries: AUTH_SYS root (exports under test use
/// `squash = "none"` or accept root squashed to the anonymous user).
pub fn bench_cred() -> Cred {
    Cred::Sys(AuthSys::new(0, 0, &[]))
}

/// A random first XID: a server's duplicate request cache must not take a new run's
/// calls for retransmissions of an old one.
pub fn first_xid() -> u32 {
    rand::random()
}

impl Conn {
    pub fn connect(target: &Target) -> anyhow::Result<Conn> {
        Ok(Conn {
            t: target.connect()?,
            xid: first_xid(),
            cred: bench_cred(),
            out: vec![0u8; (1 << 20) + 4096],
            retry: Policy::default(),
            jukebox: 0,
        })
    }

    /// The credential of the calls that follow (`--pnfs`: a layout's ids at its data
    /// server).
    pub fn set_cred(&mut self, cred: Cred) {
        self.cred = cred;
    }

    /// Sends one call; returns its xid.
    pub fn send(&mut self, call: &Call) -> anyhow::Result<u32> {
        self.xid = self.xid.wrapping_add(1);
        let n = v3call::encode(&mut self.out, self.xid, &self.cred, call)?;
        self.t.send(&mut self.out[..n])?;
        Ok(self.xid)
    }

    /// Reads the next reply; returns its xid and the procedure results, or why the call
    /// failed (rejected by the server, or lost by the transport).
    pub fn recv(&mut self) -> anyhow::Result<(u32, anyhow::Result<Vec<u8>>)> {
        let (xid, rec) = self.t.recv()?;
        let body = match rec {
            Err(e) => Err(anyhow::anyhow!("call {xid}: {e}")),
            Ok(rec) => v3call::results(&rec)
                .map(|b| b.to_vec())
                .map_err(|e| anyhow::anyhow!("call {xid}: {e}")),
        };
        Ok((xid, body))
    }

    /// Sends one call `enc` encodes into `out[4..]` (given the xid and credential; it
    /// returns the end, as [`v3call::encode`]); returns its xid.
    pub fn send_with(
        &mut self,
        enc: impl FnOnce(&mut [u8], u32, &Cred) -> anyhow::Result<usize>,
    ) -> anyhow::Result<u32> {
        self.xid = self.xid.wrapping_add(1);
        let n = enc(&mut self.out, self.xid, &self.cred)?;
        self.t.send(&mut self.out[..n])?;
        Ok(self.xid)
    }

    /// One call encoded by `enc`, and its procedure results.
    pub fn call_with(
        &mut self,
        enc: impl FnOnce(&mut [u8], u32, &Cred) -> anyhow::Result<usize>,
    ) -> anyhow::Result<Vec<u8>> {
        let xid = self.send_with(enc)?;
        let (rx, body) = self.recv()?;
        anyhow::ensure!(rx == xid, "reply xid {rx} for call {xid}");
        body
    }

    /// One call and its results; NFS3ERR_JUKEBOX answers are waited out and resent.
    fn call(&mut self, call: &Call) -> anyhow::Result<Vec<u8>> {
        let mut tries = Tries::default();
        loop {
            let xid = self.send(call)?;
            let (rx, body) = self.recv()?;
            anyhow::ensure!(rx == xid, "reply xid {rx} for call {xid}");
            let body = body?;
            if matches!(call, Call::Null | Call::Mount(_)) || v3call::status(&body) != JUKEBOX {
                return Ok(body);
            }
            self.wait_out(&mut tries, call)?;
        }
    }

    /// After a JUKEBOX: counts it and sleeps its pause, or fails when time is up.
    fn wait_out(&mut self, tries: &mut Tries, call: &Call) -> anyhow::Result<()> {
        let pause = tries
            .next(&self.retry, std::time::Instant::now())
            .ok_or_else(|| anyhow::anyhow!(self.retry.gave_up(call.name())))?;
        self.jukebox += 1;
        std::thread::sleep(pause);
        Ok(())
    }

    pub fn mount(&mut self, path: &str) -> anyhow::Result<Vec<u8>> {
        let body = self.call(&Call::Mount(path))?;
        v3call::parse_mount(&body).map_err(|e| anyhow::anyhow!("mounting {path}: {e}"))
    }

    /// The server's exports (MOUNT EXPORT, RFC 1813 Appendix I, §5.2.5).
    pub fn exports(&mut self) -> anyhow::Result<Vec<ExportNode>> {
        let body = self.call_with(|out, xid, cred| Ok(v3mount::encode_export(out, xid, cred)?))?;
        Ok(v3mount::parse_exports(&body)?)
    }

    pub fn lookup(&mut self, dir: &[u8], name: &str) -> anyhow::Result<Option<Vec<u8>>> {
        let body = self.call(&Call::Lookup(dir, name))?;
        v3call::parse_lookup(&body).map_err(|e| anyhow::anyhow!("{name}: {e}"))
    }

    pub fn size(&mut self, fh: &[u8]) -> anyhow::Result<u64> {
        Ok(v3call::parse_getattr_size(&self.call(&Call::Getattr(fh))?)?)
    }

    /// CREATE UNCHECKED (truncating to zero).
    pub fn create(&mut self, dir: &[u8], name: &str) -> anyhow::Result<Vec<u8>> {
        let body = self.call(&Call::Create(dir, name))?;
        v3call::parse_create(&body).map_err(|e| anyhow::anyhow!("{name}: {e}"))
    }

    pub fn commit(&mut self, fh: &[u8]) -> anyhow::Result<()> {
        let body = self.call(&Call::Commit(fh))?;
        let st = v3call::status(&body);
        anyhow::ensure!(st == 0, "COMMIT failed: nfsstat3 {st}");
        Ok(())
    }

    /// Writes `size` bytes of `pat` into `fh` (1 MiB WRITEs, `depth` in flight), then
    /// commits.
    pub fn write_pattern(
        &mut self,
        fh: &[u8],
        size: u64,
        pat: &Pattern,
        depth: usize,
    ) -> anyhow::Result<()> {
        self.write_pattern_in(fh, size, pat, depth, 1 << 20)
    }

    /// [`Conn::write_pattern`] in WRITEs of at most `chunk` bytes (`--pnfs`: the data
    /// server's wsize, RFC 8435 §5.1 ffdv_wsize).
    pub fn write_pattern_in(
        &mut self,
        fh: &[u8],
        size: u64,
        pat: &Pattern,
        depth: usize,
        chunk: u32,
    ) -> anyhow::Result<()> {
        let chunk = u64::from(chunk.clamp(1, 1 << 20));
        let mut pieces = (0..size)
            .step_by(chunk as usize)
            .map(|o| (o, chunk.min(size - o) as u32));
        self.write_pattern_at(fh, &mut pieces, pat, depth)
    }

    /// Writes the pattern into every `(offset, length)` of `fh` (each at most 1 MiB;
    /// `depth` WRITEs in flight), then COMMITs (`--pnfs`: a striped layout's data
    /// server its stripe units, RFC 8435 §6).
    pub fn write_pattern_at(
        &mut self,
        fh: &[u8],
        pieces: &mut dyn Iterator<Item = (u64, u32)>,
        pat: &Pattern,
        depth: usize,
    ) -> anyhow::Result<()> {
        let mut buf = vec![0u8; 1 << 20];
        // xid -> (offset, length, resend state) of the WRITEs in flight.
        let mut inflight = HashMap::<u32, (u64, u32, Tries)>::new();
        let mut again: Option<(u64, u32, Tries)> = None;
        let mut next = pieces.next();
        while next.is_some() || !inflight.is_empty() || again.is_some() {
            while inflight.len() < depth.max(1) && (again.is_some() || next.is_some()) {
                let (at, len, tries) = match again.take() {
                    Some(a) => a,
                    None => {
                        let (at, len) = next.expect("checked");
                        next = pieces.next();
                        (at, len.min(1 << 20), Tries::default())
                    }
                };
                let n = len as usize;
                pat.fill(at, &mut buf[..n]);
                let xid = self.send(&Call::Write(fh, at, &buf[..n]))?;
                inflight.insert(xid, (at, len, tries));
            }
            let (xid, body) = self.recv()?;
            let Some((at, len, mut tries)) = inflight.remove(&xid) else {
                anyhow::bail!("reply with unknown xid {xid}");
            };
            match v3call::status(&body?) {
                0 => {}
                JUKEBOX => {
                    self.wait_out(&mut tries, &Call::Write(fh, at, &[]))?;
                    again = Some((at, len, tries));
                }
                st => anyhow::bail!("WRITE failed: nfsstat3 {st}"),
            }
        }
        self.commit(fh)
    }

    /// Reads every `(offset, length)` of `fh` back (`depth` reads in flight) and
    /// checks it against `pat`. Returns the bytes that matched and the blocks that did
    /// not (each reported on stderr, the first few in full).
    pub fn read_back(
        &mut self,
        fh: &[u8],
        blocks: &mut dyn Iterator<Item = (u64, u32)>,
        pat: &Pattern,
        depth: usize,
        name: &str,
    ) -> anyhow::Result<(u64, u64)> {
        let mut inflight = HashMap::<u32, (u64, u32, Tries)>::new();
        let mut again: Option<(u64, u32, Tries)> = None;
        let (mut good, mut bad) = (0u64, 0u64);
        loop {
            while inflight.len() < depth.max(1) {
                let Some((off, len, tries)) = again
                    .take()
                    .or_else(|| blocks.next().map(|(o, l)| (o, l, Tries::default())))
                else {
                    break;
                };
                let xid = self.send(&Call::Read(fh, off, len))?;
                inflight.insert(xid, (off, len, tries));
            }
            if inflight.is_empty() {
                return Ok((good, bad));
            }
            let (xid, body) = self.recv()?;
            let Some((off, len, mut tries)) = inflight.remove(&xid) else {
                anyhow::bail!("reply with unknown xid {xid}");
            };
            let body = body?;
            if v3call::status(&body) == JUKEBOX {
                self.wait_out(&mut tries, &Call::Read(fh, off, len))?;
                again = Some((off, len, tries));
                continue;
            }
            let data = v3call::parse_read(&body)?;
            match pat.first_mismatch(off, data) {
                None if data.len() == len as usize => good += len as u64,
                at => {
                    if bad < 5 {
                        eprintln!(
                            "bench: read-back of {name} at {off}+{len} does not match: {}",
                            match at {
                                Some(at) => format!("first bad byte at offset {at}"),
                                None => format!("{} bytes returned", data.len()),
                            }
                        );
                    }
                    bad += 1;
                }
            }
        }
    }
}
