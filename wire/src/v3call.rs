//! The workspace's NFSv3 and MOUNT v3 call encoder (RFC 1813 §3.3, §5.2) and the
//! parts of replies a load generator or test client looks at. Encoding writes into a
//! caller's buffer through engine's bounds-checked XDR cursor and never allocates;
//! decoding checks every length against its RFC limit before using it.
//!
//! Used by `bench` (its blocking setup connection and load driver).

use crate::mount3::MOUNTPROC3_MNT;
use crate::nfs3::*;
use crate::{MOUNT_PROGRAM, MOUNT_V3, NFS_PROGRAM, NFS_V3};
use engine::rpc::{self, Accept, Cred, ReplyStatus};
use engine::xdr::{XdrError, XdrReader, XdrResult, XdrWriter};

/// READDIRPLUS sizes: one reply of at most 32 KiB (fits any transport's reply chunk).
const READDIRPLUS_DIRCOUNT: u32 = 4096;
const READDIRPLUS_MAXCOUNT: u32 = 32 << 10;
/// Largest READ data accepted in a reply: a 2 MiB READ (RFC 1813 §3.3.6 leaves the
/// bound to FSINFO rtmax; no server this talks to offers more).
const MAX_READ_DATA: usize = 2 << 20;
/// fattr3 on the wire (RFC 1813 §2.6): 21 words.
const FATTR3_LEN: usize = 84;

/// One call and its arguments.
#[derive(Debug, Clone, Copy)]
pub enum Call<'a> {
    Null,
    /// MOUNT v3 MNT of an export path.
    Mount(&'a str),
    Getattr(&'a [u8]),
    Lookup(&'a [u8], &'a str),
    Read(&'a [u8], u64, u32),
    /// UNSTABLE write (data is made durable by a later COMMIT).
    Write(&'a [u8], u64, &'a [u8]),
    /// CREATE UNCHECKED mode 0644 size 0 (truncates an existing file).
    Create(&'a [u8], &'a str),
    Remove(&'a [u8], &'a str),
    /// READDIRPLUS from the start of the directory (one reply's worth of entries).
    Readdirplus(&'a [u8]),
    /// COMMIT of the whole file.
    Commit(&'a [u8]),
    /// FILE_SYNC write: durable when answered, no COMMIT needed (RFC 1813 §3.3.7).
    WriteSync(&'a [u8], u64, &'a [u8]),
    /// MKDIR mode 0755 (RFC 1813 §3.3.9).
    Mkdir(&'a [u8], &'a str),
    Rmdir(&'a [u8], &'a str),
    /// READDIRPLUS from a cookie, with the verifier the previous page returned (zero for
    /// the first page, RFC 1813 §3.3.17).
    ReaddirplusAt(&'a [u8], u64, [u8; 8]),
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
            Call::WriteSync(..) => "WRITE",
            Call::Mkdir(..) => "MKDIR",
            Call::Rmdir(..) => "RMDIR",
            Call::ReaddirplusAt(..) => "READDIRPLUS",
        }
    }

    /// Program, version and procedure this call is sent to.
    pub fn prog_vers_proc(&self) -> (u32, u32, u32) {
        let nfs = |p| (NFS_PROGRAM, NFS_V3, p);
        match self {
            Call::Null => nfs(NFSPROC3_NULL),
            Call::Mount(_) => (MOUNT_PROGRAM, MOUNT_V3, MOUNTPROC3_MNT),
            Call::Getattr(_) => nfs(NFSPROC3_GETATTR),
            Call::Lookup(..) => nfs(NFSPROC3_LOOKUP),
            Call::Read(..) => nfs(NFSPROC3_READ),
            Call::Write(..) => nfs(NFSPROC3_WRITE),
            Call::Create(..) => nfs(NFSPROC3_CREATE),
            Call::Remove(..) => nfs(NFSPROC3_REMOVE),
            Call::Readdirplus(_) => nfs(NFSPROC3_READDIRPLUS),
            Call::Commit(_) => nfs(NFSPROC3_COMMIT),
            Call::WriteSync(..) => nfs(NFSPROC3_WRITE),
            Call::Mkdir(..) => nfs(NFSPROC3_MKDIR),
            Call::Rmdir(..) => nfs(NFSPROC3_RMDIR),
            Call::ReaddirplusAt(..) => nfs(NFSPROC3_READDIRPLUS),
        }
    }

    /// The procedure's arguments (RFC 1813 §3.3.x ARGUMENTS, §5.2.1 for MNT).
    pub fn args(&self, w: &mut XdrWriter) -> XdrResult<()> {
        match *self {
            Call::Null => Ok(()),
            Call::Mount(path) => w.string(path.as_bytes()),
            Call::Getattr(fh) => w.opaque_var(fh),
            Call::Lookup(dir, name) | Call::Remove(dir, name) | Call::Rmdir(dir, name) => {
                w.opaque_var(dir)?;
                w.string(name.as_bytes())
            }
            Call::Read(fh, off, count) => {
                w.opaque_var(fh)?;
                w.u64(off)?;
                w.u32(count)
            }
            Call::Write(fh, off, data) => write_args(w, fh, off, data, UNSTABLE),
            Call::WriteSync(fh, off, data) => write_args(w, fh, off, data, FILE_SYNC),
            Call::Create(dir, name) => create_args(w, dir, name),
            Call::Mkdir(dir, name) => mkdir_args(w, dir, name),
            Call::Readdirplus(dir) => readdirplus_args(w, dir, 0, [0; 8]),
            Call::ReaddirplusAt(dir, cookie, verf) => readdirplus_args(w, dir, cookie, verf),
            Call::Commit(fh) => {
                w.opaque_var(fh)?;
                w.u64(0)?;
                w.u32(0)
            }
        }
    }
}

/// WRITE3args (RFC 1813 §3.3.7). `count` is the data's length, which the caller keeps
/// below 4 GiB (a longer slice is refused, never truncated).
fn write_args(w: &mut XdrWriter, fh: &[u8], off: u64, data: &[u8], stable: u32) -> XdrResult<()> {
    let count = u32::try_from(data.len()).map_err(|_| XdrError::Overflow)?;
    w.opaque_var(fh)?;
    w.u64(off)?;
    w.u32(count)?;
    w.u32(stable)?;
    w.opaque_var(data)
}

/// READDIRPLUS3args (RFC 1813 §3.3.17).
fn readdirplus_args(w: &mut XdrWriter, dir: &[u8], cookie: u64, verf: [u8; 8]) -> XdrResult<()> {
    w.opaque_var(dir)?;
    w.u64(cookie)?;
    w.opaque_fixed(&verf)?;
    w.u32(READDIRPLUS_DIRCOUNT)?;
    w.u32(READDIRPLUS_MAXCOUNT)
}

/// MKDIR3args (RFC 1813 §3.3.9): sattr3 setting mode 0755 only.
fn mkdir_args(w: &mut XdrWriter, dir: &[u8], name: &str) -> XdrResult<()> {
    w.opaque_var(dir)?;
    w.string(name.as_bytes())?;
    w.u32(1)?; // set mode
    w.u32(0o755)?;
    for _ in 0..5 {
        w.u32(0)?; // uid, gid, size, atime, mtime: don't set
    }
    Ok(())
}

/// CREATE3args (RFC 1813 §3.3.8): UNCHECKED, sattr3 setting mode 0644 and size 0.
fn create_args(w: &mut XdrWriter, dir: &[u8], name: &str) -> XdrResult<()> {
    w.opaque_var(dir)?;
    w.string(name.as_bytes())?;
    w.u32(UNCHECKED)?;
    w.u32(1)?; // set mode
    w.u32(0o644)?;
    w.u32(0)?; // uid: don't set
    w.u32(0)?; // gid: don't set
    w.u32(1)?; // set size
    w.u64(0)?;
    w.u32(0)?; // atime: don't change
    w.u32(0) // mtime: don't change
}

/// Encodes `call` into `out[4..]` (the first four bytes are left for a record mark)
/// and returns the end of the message.
pub fn encode(out: &mut [u8], xid: u32, cred: &Cred, call: &Call) -> XdrResult<usize> {
    let (prog, vers, proc_) = call.prog_vers_proc();
    let mut w = XdrWriter::at(out, 4);
    rpc::write_call(&mut w, xid, prog, vers, proc_, cred)?;
    call.args(&mut w)?;
    Ok(w.position())
}

/// Encodes, like [`encode`], a WRITE of `count` bytes whose data is not in the
/// message: the arguments end with the data's length word, and the data travels in
/// an RPC-over-RDMA read chunk at that position (RFC 8166 §3.4.5 XDR reduction,
/// RFC 8267 §4.2: WRITE3args' data is DDP-eligible).
pub fn encode_write_reduced(
    out: &mut [u8],
    xid: u32,
    cred: &Cred,
    (fh, off, count): (&[u8], u64, u32),
    stable: u32,
) -> XdrResult<usize> {
    let mut w = XdrWriter::at(out, 4);
    rpc::write_call(&mut w, xid, NFS_PROGRAM, NFS_V3, NFSPROC3_WRITE, cred)?;
    w.opaque_var(fh)?;
    w.u64(off)?;
    w.u32(count)?;
    w.u32(stable)?;
    w.u32(count)?; // the data's length; the data is the read chunk
    Ok(w.position())
}

/// Why a reply did not yield what its parser looks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyError {
    /// The procedure failed with this nfsstat3 / mountstat3.
    Status(&'static str, u32),
    /// The reply does not decode.
    Xdr(XdrError),
    /// CREATE or MKDIR succeeded but returned no handle (post_op_fh3 absent).
    NoHandle,
}

impl std::fmt::Display for ReplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplyError::Status("MNT", st) => write!(f, "MNT failed: mountstat3 {st}"),
            ReplyError::Status(p, st) => write!(f, "{p} failed: nfsstat3 {st}"),
            ReplyError::Xdr(e) => write!(f, "bad reply: {e}"),
            ReplyError::NoHandle => f.write_str("CREATE/MKDIR returned no handle"),
        }
    }
}

impl std::error::Error for ReplyError {}

impl From<XdrError> for ReplyError {
    fn from(e: XdrError) -> Self {
        ReplyError::Xdr(e)
    }
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

/// The status word, `Ok` only for NFS3_OK (MNT3_OK is also 0).
fn ok(r: &mut XdrReader, proc_: &'static str) -> Result<(), ReplyError> {
    match r.u32()? {
        NFS3_OK => Ok(()),
        st => Err(ReplyError::Status(proc_, st)),
    }
}

fn skip_post_op_attr(r: &mut XdrReader) -> XdrResult<()> {
    if r.bool()? {
        r.skip(FATTR3_LEN)?;
    }
    Ok(())
}

/// The data of a READ3resok (RFC 1813 §3.3.6).
pub fn parse_read(body: &[u8]) -> Result<&[u8], ReplyError> {
    let mut r = XdrReader::new(body);
    ok(&mut r, "READ")?;
    skip_post_op_attr(&mut r)?;
    let _count = r.u32()?;
    let _eof = r.bool()?;
    Ok(r.opaque_var(MAX_READ_DATA)?)
}

/// The file size in a GETATTR3resok (RFC 1813 §3.3.1: fattr3 `size` after type, mode,
/// nlink, uid, gid).
pub fn parse_getattr_size(body: &[u8]) -> Result<u64, ReplyError> {
    let mut r = XdrReader::new(body);
    ok(&mut r, "GETATTR")?;
    r.skip(4 * 5)?;
    Ok(r.u64()?)
}

/// The handle in a LOOKUP3resok (RFC 1813 §3.3.3); `None` for NFS3ERR_NOENT.
pub fn parse_lookup(body: &[u8]) -> Result<Option<Vec<u8>>, ReplyError> {
    let mut r = XdrReader::new(body);
    match r.u32()? {
        NFS3_OK => Ok(Some(r.opaque_var(NFS3_FHSIZE)?.to_vec())),
        NFS3ERR_NOENT => Ok(None),
        st => Err(ReplyError::Status("LOOKUP", st)),
    }
}

/// The handle in a CREATE3resok (RFC 1813 §3.3.8).
pub fn parse_create(body: &[u8]) -> Result<Vec<u8>, ReplyError> {
    new_handle(body, "CREATE")
}

/// The handle in a MKDIR3resok (RFC 1813 §3.3.9, laid out as CREATE3resok).
pub fn parse_mkdir(body: &[u8]) -> Result<Vec<u8>, ReplyError> {
    new_handle(body, "MKDIR")
}

fn new_handle(body: &[u8], proc_: &'static str) -> Result<Vec<u8>, ReplyError> {
    let mut r = XdrReader::new(body);
    ok(&mut r, proc_)?;
    if !r.bool()? {
        return Err(ReplyError::NoHandle);
    }
    Ok(r.opaque_var(NFS3_FHSIZE)?.to_vec())
}

/// The file size in a post_op_attr, if it is there (fattr3 `size` after type, mode,
/// nlink, uid, gid: RFC 1813 §2.6).
fn post_op_size(r: &mut XdrReader) -> XdrResult<Option<u64>> {
    if !r.bool()? {
        return Ok(None);
    }
    let a = r.opaque_fixed(FATTR3_LEN)?;
    XdrReader::new(&a[20..]).u64().map(Some)
}

/// A handle and, when the server sent the object's attributes, its size.
pub type HandleSize = (Vec<u8>, Option<u64>);

/// A LOOKUP3resok's handle and, when the server sent the object's attributes, its
/// size (RFC 1813 §3.3.3); `None` for NFS3ERR_NOENT.
pub fn parse_lookup_size(body: &[u8]) -> Result<Option<HandleSize>, ReplyError> {
    let mut r = XdrReader::new(body);
    match r.u32()? {
        NFS3_OK => {
            let fh = r.opaque_var(NFS3_FHSIZE)?.to_vec();
            Ok(Some((fh, post_op_size(&mut r)?)))
        }
        NFS3ERR_NOENT => Ok(None),
        st => Err(ReplyError::Status("LOOKUP", st)),
    }
}

/// Longest name accepted in a directory listing (NFSv3 leaves it to PATHCONF
/// name_max; no server this talks to allows more than 255 bytes).
const MAX_NAME: usize = 1024;

/// One entry of a directory listing page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub cookie: u64,
    /// The entry's size, when its attributes came with it.
    pub size: Option<u64>,
}

/// One page of a directory listing: the entries, the cookie verifier to send with the
/// next page's cookie, and whether the listing ends here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DirPage {
    pub entries: Vec<DirEntry>,
    pub verf: [u8; 8],
    pub eof: bool,
}

/// A READDIRPLUS3resok (RFC 1813 §3.3.17): entryplus3 list and eof.
pub fn parse_readdirplus(body: &[u8]) -> Result<DirPage, ReplyError> {
    let mut r = XdrReader::new(body);
    ok(&mut r, "READDIRPLUS")?;
    skip_post_op_attr(&mut r)?;
    let mut page = DirPage::default();
    page.verf.copy_from_slice(r.opaque_fixed(8)?);
    while r.bool()? {
        let _fileid = r.u64()?;
        let name = r.string(MAX_NAME)?.to_vec();
        let cookie = r.u64()?;
        let size = post_op_size(&mut r)?;
        if r.bool()? {
            r.opaque_var(NFS3_FHSIZE)?;
        }
        page.entries.push(DirEntry { name, cookie, size });
    }
    page.eof = r.bool()?;
    Ok(page)
}

/// The root handle in a mountres3_ok (RFC 1813 §5.2.1).
pub fn parse_mount(body: &[u8]) -> Result<Vec<u8>, ReplyError> {
    let mut r = XdrReader::new(body);
    ok(&mut r, "MNT")?;
    Ok(r.opaque_var(NFS3_FHSIZE)?.to_vec())
}

#[cfg(test)]
mod tests;
