//! NFSv3 and MOUNT v3 calls as bench sends them (encoding) and the parts of their
//! replies it looks at (decoding). Shared by the blocking setup connection
//! ([`crate::client::Conn`]) and the load driver.

use engine::rpc::{self, Accept, Cred, ReplyStatus};
use engine::xdr::{XdrReader, XdrResult, XdrWriter};

pub const NFS: u32 = 100003;
pub const MOUNT: u32 = 100005;

/// Longest NFSv3 file handle (RFC 1813 NFS3_FHSIZE).
pub const FHSIZE: usize = 64;

/// READDIRPLUS sizes: one reply of at most 32 KiB (fits any transport's reply chunk).
const READDIRPLUS_DIRCOUNT: u32 = 4096;
const READDIRPLUS_MAXCOUNT: u32 = 32 << 10;

/// One call and its arguments.
#[derive(Debug, Clone, Copy)]
pub enum Call<'a> {
    Null,
    Mount(&'a str),
    Getattr(&'a [u8]),
    Lookup(&'a [u8], &'a str),
    Read(&'a [u8], u64, u32),
    /// UNSTABLE write (data is made durable by a COMMIT at the end of the run).
    Write(&'a [u8], u64, &'a [u8]),
    /// CREATE UNCHECKED mode 0644 size 0 (truncates an existing file).
    Create(&'a [u8], &'a str),
    Remove(&'a [u8], &'a str),
    /// READDIRPLUS from the start of the directory (one reply's worth of entries).
    Readdirplus(&'a [u8]),
    Commit(&'a [u8]),
}

impl Call<'_> {
    /// The procedure's name, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Call::Null => "NULL",
            Call::Mount(_) => "MOUNT",
            Call::Getattr(_) => "GETATTR",
            Call::Lookup(..) => "LOOKUP",
            Call::Read(..) => "READ",
            Call::Write(..) => "WRITE",
            Call::Create(..) => "CREATE",
            Call::Remove(..) => "REMOVE",
            Call::Readdirplus(_) => "READDIRPLUS",
            Call::Commit(_) => "COMMIT",
        }
    }

    fn prog_proc(&self) -> (u32, u32) {
        match self {
            Call::Null => (NFS, 0),
            Call::Mount(_) => (MOUNT, 1),
            Call::Getattr(_) => (NFS, 1),
            Call::Lookup(..) => (NFS, 3),
            Call::Read(..) => (NFS, 6),
            Call::Write(..) => (NFS, 7),
            Call::Create(..) => (NFS, 8),
            Call::Remove(..) => (NFS, 12),
            Call::Readdirplus(_) => (NFS, 17),
            Call::Commit(_) => (NFS, 21),
        }
    }

    fn args(&self, w: &mut XdrWriter) -> XdrResult<()> {
        match *self {
            Call::Null => Ok(()),
            Call::Mount(path) => w.string(path.as_bytes()),
            Call::Getattr(fh) => w.opaque_var(fh),
            Call::Lookup(dir, name) | Call::Remove(dir, name) => {
                w.opaque_var(dir)?;
                w.string(name.as_bytes())
            }
            Call::Read(fh, off, count) => {
                w.opaque_var(fh)?;
                w.u64(off)?;
                w.u32(count)
            }
            Call::Write(fh, off, data) => {
                w.opaque_var(fh)?;
                w.u64(off)?;
                w.u32(data.len() as u32)?;
                w.u32(0)?; // UNSTABLE
                w.opaque_var(data)
            }
            Call::Create(dir, name) => {
                w.opaque_var(dir)?;
                w.string(name.as_bytes())?;
                w.u32(0)?; // UNCHECKED
                w.u32(1)?; // set mode
                w.u32(0o644)?;
                w.u32(0)?; // uid: don't set
                w.u32(0)?; // gid: don't set
                w.u32(1)?; // set size
                w.u64(0)?;
                w.u32(0)?; // atime: don't change
                w.u32(0) // mtime: don't change
            }
            Call::Readdirplus(dir) => {
                w.opaque_var(dir)?;
                w.u64(0)?; // cookie
                w.opaque_fixed(&[0u8; 8])?; // cookieverf
                w.u32(READDIRPLUS_DIRCOUNT)?;
                w.u32(READDIRPLUS_MAXCOUNT)
            }
            Call::Commit(fh) => {
                w.opaque_var(fh)?;
                w.u64(0)?;
                w.u32(0)
            }
        }
    }
}

/// Encodes `call` into `out[4..]` (the first four bytes are left for a record mark) and
/// returns the end of the message.
pub fn encode(out: &mut [u8], xid: u32, cred: &Cred, call: &Call) -> anyhow::Result<usize> {
    let (prog, proc_) = call.prog_proc();
    let mut w = XdrWriter::at(out, 4);
    rpc::write_call(&mut w, xid, prog, 3, proc_, cred)?;
    call.args(&mut w)?;
    Ok(w.position())
}

/// The procedure results of a whole RPC reply record, or why the call failed at the
/// RPC level.
pub fn results(rec: &[u8]) -> Result<&[u8], String> {
    match rpc::decode_reply(rec) {
        Err(e) => Err(format!("bad reply: {e}")),
        Ok((_, st, _)) if st != ReplyStatus::Accepted(Accept::Success) => {
            Err(format!("rejected: {st:?}"))
        }
        Ok((_, _, off)) => Ok(&rec[off..]),
    }
}

/// nfsstat3 of a reply body (0 = OK; `u32::MAX` for an empty body).
pub fn status(body: &[u8]) -> u32 {
    XdrReader::new(body).u32().unwrap_or(u32::MAX)
}

fn skip_post_op_attr(r: &mut XdrReader) -> XdrResult<()> {
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

/// The file size in a GETATTR3resok.
pub fn parse_getattr_size(body: &[u8]) -> anyhow::Result<u64> {
    let mut r = XdrReader::new(body);
    let st = r.u32()?;
    anyhow::ensure!(st == 0, "GETATTR failed: nfsstat3 {st}");
    r.skip(4 * 5)?; // type, mode, nlink, uid, gid
    Ok(r.u64()?)
}

/// The handle in a LOOKUP3resok; `None` for NFS3ERR_NOENT.
pub fn parse_lookup(body: &[u8]) -> anyhow::Result<Option<Vec<u8>>> {
    let mut r = XdrReader::new(body);
    match r.u32()? {
        0 => Ok(Some(r.opaque_var(FHSIZE)?.to_vec())),
        2 => Ok(None),
        st => anyhow::bail!("LOOKUP failed: nfsstat3 {st}"),
    }
}

/// The handle in a CREATE3resok.
pub fn parse_create(body: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut r = XdrReader::new(body);
    let st = r.u32()?;
    anyhow::ensure!(st == 0, "CREATE failed: nfsstat3 {st}");
    anyhow::ensure!(r.bool()?, "CREATE returned no handle");
    Ok(r.opaque_var(FHSIZE)?.to_vec())
}

/// The root handle in a MOUNT reply.
pub fn parse_mount(body: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut r = XdrReader::new(body);
    let st = r.u32()?;
    anyhow::ensure!(st == 0, "MNT failed: mountstat3 {st}");
    Ok(r.opaque_var(FHSIZE)?.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn calls_encode_after_room_for_a_record_mark() {
        let mut buf = vec![0u8; 4096];
        let cred = Cred::None;
        let fh = [7u8; 32];
        let n = encode(&mut buf, 0x1234, &cred, &Call::Readdirplus(&fh)).unwrap();
        // xid, CALL, rpcvers 2, prog, vers 3, proc 17
        assert_eq!(&buf[4..8], &0x1234u32.to_be_bytes());
        assert_eq!(&buf[16..20], &NFS.to_be_bytes());
        assert_eq!(&buf[24..28], &17u32.to_be_bytes());
        // header (6 words + 2 auth pairs) + fh (4 + 32) + cookie 8 + verf 8 + 2 counts
        assert_eq!(n - 4, 40 + 36 + 8 + 8 + 8);
        let n = encode(&mut buf, 1, &cred, &Call::Remove(&fh, "abc")).unwrap();
        assert_eq!(n - 4, 40 + 36 + 8);
    }

    #[test]
    fn lookup_and_create_replies_parse() {
        let mut b = vec![0, 0, 0, 0, 0, 0, 0, 2, 9, 9, 0, 0];
        assert_eq!(parse_lookup(&b).unwrap(), Some(vec![9, 9]));
        assert_eq!(parse_lookup(&[0, 0, 0, 2]).unwrap(), None);
        assert!(parse_lookup(&[0, 0, 0, 13]).is_err());
        b.splice(4..4, [0, 0, 0, 1]);
        assert_eq!(parse_create(&b).unwrap(), vec![9, 9]);
        assert!(parse_create(&[0, 0, 0, 0, 0, 0, 0, 0]).is_err());
    }
}
