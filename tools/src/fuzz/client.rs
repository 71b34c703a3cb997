//! The well-behaved client: sets up the work area and the canary before a campaign and
//! checks the gateway after it. One blocking call at a time, AUTH_SYS root.

use super::wire::{self, call_record, Cred, Dec, Enc, Got, MOUNT_PROG, NFS_PROG};
use anyhow::{bail, ensure, Context};
use std::net::TcpStream;
use std::time::{Duration, Instant};

pub struct Client {
    s: TcpStream,
    xid: u32,
    timeout: Duration,
}

/// Canary file size: several cache pages and READs, not page-aligned.
pub const CANARY_LEN: usize = 256 * 1024 + 123;
pub const CANARY_DIR: &[u8] = b"zz-canary";
pub const CANARY_FILE: &[u8] = b"canary.dat";
const CHUNK: usize = 64 * 1024;

/// The canary's bytes for a seed: a pattern no fuzz WRITE produces.
pub fn canary_bytes(seed: u64) -> Vec<u8> {
    let mut r = super::rng::Rng::new(seed ^ 0xC0FF_EE00);
    r.bytes(CANARY_LEN)
}

impl Client {
    pub fn connect(addr: &str, timeout: Duration) -> anyhow::Result<Client> {
        let s = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
        s.set_nodelay(true)?;
        Ok(Client {
            s,
            xid: 0x1000_0000,
            timeout,
        })
    }

    /// One call; the procedure's result body, or why there is none.
    pub fn call(&mut self, prog: u32, proc_: u32, args: &[u8]) -> anyhow::Result<Vec<u8>> {
        self.xid = self.xid.wrapping_add(1);
        let rec = call_record(self.xid, prog, 3, proc_, &Cred::root(), args);
        ensure!(
            wire::send(&mut self.s, &rec)?,
            "connection reset while sending"
        );
        let deadline = Instant::now() + self.timeout;
        match wire::read_record(&mut self.s, deadline)? {
            Got::Reply(r) => {
                let rep = wire::parse_reply(&r).context("malformed reply")?;
                ensure!(
                    rep.xid == self.xid,
                    "reply xid {:#x}, expected {:#x}",
                    rep.xid,
                    self.xid
                );
                ensure!(rep.accept == Some(0), "call not accepted: {:?}", rep.accept);
                Ok(rep.body.to_vec())
            }
            Got::Closed => bail!("server closed the connection"),
            Got::Timeout => bail!("no reply within {:?}", self.timeout),
        }
    }

    /// A call whose result must start with status 0.
    fn ok(&mut self, prog: u32, proc_: u32, args: &[u8], what: &str) -> anyhow::Result<Vec<u8>> {
        let b = self
            .call(prog, proc_, args)
            .with_context(|| what.to_string())?;
        let st = Dec::new(&b).u32().unwrap_or(u32::MAX);
        ensure!(st == 0, "{what}: status {st}");
        Ok(b)
    }

    pub fn null(&mut self) -> anyhow::Result<()> {
        self.call(NFS_PROG, 0, &[]).map(drop)
    }

    pub fn mount(&mut self) -> anyhow::Result<Vec<u8>> {
        let mut e = Enc::default();
        e.var(b"/");
        let b = self.ok(MOUNT_PROG, 1, &e.0, "MNT /")?;
        let mut d = Dec::new(&b);
        d.u32();
        Ok(d.var(64).context("MNT reply without a handle")?.to_vec())
    }

    pub fn getattr(&mut self, fh: &[u8]) -> anyhow::Result<()> {
        let mut e = Enc::default();
        e.var(fh);
        self.ok(NFS_PROG, 1, &e.0, "GETATTR").map(drop)
    }

    pub fn lookup(&mut self, dir: &[u8], name: &[u8]) -> anyhow::Result<Vec<u8>> {
        let mut e = Enc::default();
        e.var(dir).var(name);
        let b = self.ok(NFS_PROG, 3, &e.0, "LOOKUP")?;
        let mut d = Dec::new(&b);
        d.u32();
        Ok(d.var(64).context("LOOKUP reply without a handle")?.to_vec())
    }

    /// CREATE (UNCHECKED, mode 0644), MKDIR (0755) or SYMLINK; the new handle.
    fn make(
        &mut self,
        proc_: u32,
        dir: &[u8],
        name: &[u8],
        target: &[u8],
    ) -> anyhow::Result<Vec<u8>> {
        let mut e = Enc::default();
        e.var(dir).var(name);
        if proc_ == 8 {
            e.u32(0);
        }
        let mode = if proc_ == 9 { 0o755 } else { 0o644 };
        e.u32(1).u32(mode).u32(0).u32(0).u32(0).u32(0).u32(0);
        if proc_ == 10 {
            e.var(target);
        }
        let b = self.ok(NFS_PROG, proc_, &e.0, "CREATE/MKDIR/SYMLINK")?;
        super::structured::returned_handle(proc_, &b).context("no handle in the reply")
    }

    pub fn create(&mut self, dir: &[u8], name: &[u8]) -> anyhow::Result<Vec<u8>> {
        self.make(8, dir, name, b"")
    }
    pub fn mkdir(&mut self, dir: &[u8], name: &[u8]) -> anyhow::Result<Vec<u8>> {
        self.make(9, dir, name, b"")
    }
    pub fn symlink(&mut self, dir: &[u8], name: &[u8], to: &[u8]) -> anyhow::Result<Vec<u8>> {
        self.make(10, dir, name, to)
    }

    pub fn remove(&mut self, dir: &[u8], name: &[u8]) -> anyhow::Result<()> {
        let mut e = Enc::default();
        e.var(dir).var(name);
        self.ok(NFS_PROG, 12, &e.0, "REMOVE").map(drop)
    }

    /// One UNSTABLE WRITE.
    pub fn write(&mut self, fh: &[u8], offset: u64, data: &[u8]) -> anyhow::Result<()> {
        let mut e = Enc::default();
        e.var(fh)
            .u64(offset)
            .u32(data.len() as u32)
            .u32(0)
            .var(data);
        self.ok(NFS_PROG, 7, &e.0, "WRITE").map(drop)
    }

    /// UNSTABLE writes of `data` in 64 KiB chunks, then COMMIT of the whole file.
    pub fn write_commit(&mut self, fh: &[u8], data: &[u8]) -> anyhow::Result<()> {
        for (i, chunk) in data.chunks(CHUNK).enumerate() {
            self.write(fh, (i * CHUNK) as u64, chunk)?;
        }
        let mut e = Enc::default();
        e.var(fh).u64(0).u32(0);
        self.ok(NFS_PROG, 21, &e.0, "COMMIT").map(drop)
    }

    /// The whole file, read in 64 KiB READs until EOF.
    pub fn read_all(&mut self, fh: &[u8]) -> anyhow::Result<Vec<u8>> {
        let mut out = Vec::new();
        loop {
            let mut e = Enc::default();
            e.var(fh).u64(out.len() as u64).u32(CHUNK as u32);
            let b = self.ok(NFS_PROG, 6, &e.0, "READ")?;
            let mut d = Dec::new(&b);
            d.u32();
            if d.u32() == Some(1) {
                d.skip(84).context("short attributes")?;
            }
            let _count = d.u32().context("no count")?;
            let eof = d.u32().context("no eof")? != 0;
            let data = d.var(CHUNK).context("bad data")?;
            out.extend_from_slice(data);
            ensure!(out.len() <= 64 << 20, "file larger than 64 MiB");
            if eof || data.is_empty() {
                return Ok(out);
            }
        }
    }
}
