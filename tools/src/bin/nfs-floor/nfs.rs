//! The floor's RPC programs: NFSv3 (RFC 1813) and MOUNT v3 (RFC 1813 Appendix I),
//! only the procedures fio's libnfs engine and `bench` send to mount, open, read and
//! write a file. No credential, export or access check on purpose (see main.rs).

use crate::store::{Data, Store, ROOT};
use engine::xdr::{pad_len, XdrReader, XdrResult};
use nfs_wire::mount3::*;
use nfs_wire::nfs3::*;
use nfs_wire::{MOUNT_PROGRAM, MOUNT_V3, NFS_PROGRAM, NFS_V3};

/// Largest READ or WRITE, announced in FSINFO (rtmax, wtmax).
const MAX_IO: u32 = 1 << 20;
/// Files grow no further: a WRITE past it is NFS3ERR_FBIG, so a client cannot make the
/// floor allocate the machine's memory with one offset.
const MAX_FILE: u64 = 16 << 30;
const NFS3ERR_EXIST: u32 = 17;
const NFS3ERR_NOTDIR: u32 = 20;
const NFS3ERR_ISDIR: u32 = 21;
const NFS3ERR_FBIG: u32 = 27;
const NFS3ERR_STALE: u32 = 70;
const NFS3ERR_BADHANDLE: u32 = 10001;
/// The write verifier: one boot of the floor, never restarted under a client.
const VERF: [u8; 8] = *b"nfsfloor";

/// The reply under construction (XDR, RFC 4506), after a 4-byte record mark slot.
pub struct Out(pub Vec<u8>);

impl Out {
    pub fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn bool(&mut self, v: bool) {
        self.u32(v as u32);
    }
    fn opaque(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
        self.0.extend_from_slice(&[0; 3][..pad_len(b.len())]);
    }
}

/// A READ's data, written to the socket from the file after the encoded reply.
pub struct Tail {
    pub data: Data,
    pub off: usize,
    pub len: usize,
}

/// Why a call gets no procedure result (RFC 5531 §9, accept_stat).
pub enum Reject {
    ProcUnavail,
    Garbage,
}

impl From<engine::xdr::XdrError> for Reject {
    fn from(_: engine::xdr::XdrError) -> Self {
        Reject::Garbage
    }
}

type Answer = Result<Option<Tail>, Reject>;

/// One RPC call (RFC 5531 §9) into `out`; an unreadable call header is an error (the
/// connection is closed: there is no xid to answer).
pub fn answer(call: &[u8], store: &Store, out: &mut Out) -> XdrResult<Option<Tail>> {
    let mut r = XdrReader::new(call);
    let xid = r.u32()?;
    let _msg_type = r.u32()?;
    let _rpcvers = r.u32()?;
    let (prog, vers, proc_) = (r.u32()?, r.u32()?, r.u32()?);
    for _ in 0..2 {
        let _flavor = r.u32()?;
        r.opaque_var(400)?; // cred, then verf (RFC 5531 §8.2: at most 400 bytes)
    }
    for v in [xid, 1, 0, 0, 0] {
        out.u32(v); // REPLY, MSG_ACCEPTED, verifier AUTH_NONE with no body
    }
    let stat_at = out.0.len();
    out.u32(0); // SUCCESS
    let res = match (prog, vers) {
        (NFS_PROGRAM, NFS_V3) => nfs3(proc_, &mut r, store, out),
        (MOUNT_PROGRAM, MOUNT_V3) => Ok(mount3(proc_, out)),
        (NFS_PROGRAM, _) | (MOUNT_PROGRAM, _) => {
            mismatch(out, stat_at);
            return Ok(None);
        }
        _ => Err(Reject::ProcUnavail),
    };
    match res {
        Ok(tail) => Ok(tail),
        Err(e) => {
            out.0.truncate(stat_at);
            let stat = match (prog == NFS_PROGRAM || prog == MOUNT_PROGRAM, e) {
                (false, _) => 1, // PROG_UNAVAIL
                (true, Reject::ProcUnavail) => 3,
                (true, Reject::Garbage) => 4,
            };
            out.u32(stat);
            Ok(None)
        }
    }
}

fn mismatch(out: &mut Out, stat_at: usize) {
    out.0.truncate(stat_at);
    for v in [2, 3, 3] {
        out.u32(v); // PROG_MISMATCH, low 3, high 3
    }
}

/// MOUNT v3: MNT answers the root's handle for any path; EXPORT lists "/" (libnfs asks
/// it right after MNT, bench to find the export).
fn mount3(proc_: u32, out: &mut Out) -> Option<Tail> {
    match proc_ {
        MOUNTPROC3_MNT => {
            out.u32(0);
            out.opaque(&ROOT.to_be_bytes());
            out.u32(1);
            out.u32(1); // auth_flavors: AUTH_UNIX
        }
        MOUNTPROC3_EXPORT => {
            out.bool(true);
            out.opaque(b"/");
            out.bool(false); // no groups
            out.bool(false); // no next export
        }
        MOUNTPROC3_DUMP => out.bool(false),
        _ => {} // NULL, UMNT, UMNTALL: void
    }
    None
}

fn nfs3(proc_: u32, r: &mut XdrReader, store: &Store, out: &mut Out) -> Answer {
    match proc_ {
        NFSPROC3_NULL => Ok(None),
        NFSPROC3_GETATTR => getattr(r, store, out),
        NFSPROC3_SETATTR => setattr(r, store, out),
        NFSPROC3_LOOKUP => lookup(r, store, out),
        NFSPROC3_ACCESS => access(r, store, out),
        NFSPROC3_READ => read(r, store, out),
        NFSPROC3_WRITE => write(r, store, out),
        NFSPROC3_CREATE => create(r, store, out),
        NFSPROC3_REMOVE => remove(r, store, out),
        NFSPROC3_FSSTAT => fsstat(r, store, out),
        NFSPROC3_FSINFO => fsinfo(r, store, out),
        NFSPROC3_PATHCONF => pathconf(r, store, out),
        NFSPROC3_COMMIT => commit(r, store, out),
        _ => Err(Reject::ProcUnavail),
    }
}

/// What fattr3 needs of an object.
#[derive(Clone, Copy)]
struct Attr {
    id: u64,
    dir: bool,
    size: u64,
}

fn handle(r: &mut XdrReader) -> XdrResult<Option<u64>> {
    let fh = r.opaque_var(NFS3_FHSIZE)?;
    Ok(<[u8; 8]>::try_from(fh).ok().map(u64::from_be_bytes))
}

/// The object of a handle, or the status that says why there is none.
fn object(r: &mut XdrReader, store: &Store) -> Result<Result<Attr, u32>, Reject> {
    Ok(match handle(r)? {
        None => Err(NFS3ERR_BADHANDLE),
        Some(id) => attr(store, id).ok_or(NFS3ERR_STALE),
    })
}

fn attr(store: &Store, id: u64) -> Option<Attr> {
    if id == ROOT {
        return Some(Attr {
            id,
            dir: true,
            size: 4096,
        });
    }
    let size = store
        .file(id)?
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .len() as u64;
    Some(Attr {
        id,
        dir: false,
        size,
    })
}

/// fattr3 (RFC 1813 §2.6). Times are constant: the floor's clients cache nothing.
fn fattr(out: &mut Out, a: Attr) {
    out.u32(if a.dir { 2 } else { 1 }); // NF3DIR, NF3REG
    out.u32(if a.dir { 0o777 } else { 0o666 });
    out.u32(if a.dir { 2 } else { 1 }); // nlink
    out.u32(0); // uid
    out.u32(0); // gid
    out.u64(a.size);
    out.u64(a.size); // used
    out.u64(0); // rdev
    out.u64(1); // fsid
    out.u64(a.id);
    for _ in 0..3 {
        out.u64(1_700_000_000 << 32); // atime, mtime, ctime: seconds, 0 ns
    }
}

fn post_op(out: &mut Out, a: Option<Attr>) {
    out.bool(a.is_some());
    if let Some(a) = a {
        fattr(out, a);
    }
}

/// wcc_data without pre-operation attributes (RFC 1813 §2.6 allows it).
fn wcc(out: &mut Out, a: Option<Attr>) {
    out.bool(false);
    post_op(out, a);
}

fn fail(out: &mut Out, status: u32) -> Answer {
    out.u32(status);
    out.bool(false); // no attributes (post_op_attr or the wcc_data's post part)
    Ok(None)
}

fn getattr(r: &mut XdrReader, store: &Store, out: &mut Out) -> Answer {
    match object(r, store)? {
        Ok(a) => {
            out.u32(NFS3_OK);
            fattr(out, a);
            Ok(None)
        }
        Err(s) => {
            out.u32(s);
            Ok(None)
        }
    }
}

/// SETATTR: only the size is applied (open with O_TRUNC); the rest is accepted and
/// ignored.
fn setattr(r: &mut XdrReader, store: &Store, out: &mut Out) -> Answer {
    let obj = object(r, store)?;
    let size = sattr_size(r)?;
    let a = match obj {
        Err(s) => return fail(out, s).and(more_wcc(out)),
        Ok(a) if a.dir && size.is_some() => return fail(out, NFS3ERR_ISDIR).and(more_wcc(out)),
        Ok(a) => a,
    };
    if let (Some(sz), Some(d)) = (size, store.file(a.id)) {
        if sz > MAX_FILE {
            return fail(out, NFS3ERR_FBIG).and(more_wcc(out));
        }
        d.write()
            .unwrap_or_else(|e| e.into_inner())
            .resize(sz as usize, 0);
    }
    out.u32(NFS3_OK);
    wcc(out, attr(store, a.id));
    Ok(None)
}

/// The size of a sattr3 (RFC 1813 §2.6), skipping the other fields.
fn sattr_size(r: &mut XdrReader) -> XdrResult<Option<u64>> {
    for _ in 0..3 {
        if r.bool()? {
            r.u32()?; // mode, uid, gid
        }
    }
    let size = if r.bool()? { Some(r.u64()?) } else { None };
    for _ in 0..2 {
        if r.u32()? == 2 {
            r.u64()?; // SET_TO_CLIENT_TIME: an nfstime3
        }
    }
    Ok(size)
}

fn lookup(r: &mut XdrReader, store: &Store, out: &mut Out) -> Answer {
    let dir = handle(r)?;
    let name = r.string(255)?;
    if dir != Some(ROOT) {
        return fail(out, NFS3ERR_NOTDIR);
    }
    match store.lookup(name).and_then(|id| attr(store, id)) {
        None => fail(out, NFS3ERR_NOENT),
        Some(a) => {
            out.u32(NFS3_OK);
            out.opaque(&a.id.to_be_bytes());
            post_op(out, Some(a));
            post_op(out, attr(store, ROOT));
            Ok(None)
        }
    }
}

/// ACCESS grants whatever is asked (RFC 1813 §3.3.4).
fn access(r: &mut XdrReader, store: &Store, out: &mut Out) -> Answer {
    let obj = object(r, store)?;
    let want = r.u32()?;
    match obj {
        Err(s) => fail(out, s),
        Ok(a) => {
            out.u32(NFS3_OK);
            post_op(out, Some(a));
            out.u32(want);
            Ok(None)
        }
    }
}

fn read(r: &mut XdrReader, store: &Store, out: &mut Out) -> Answer {
    let id = handle(r)?;
    let (off, count) = (r.u64()?, r.u32()?.min(MAX_IO));
    let Some(data) = id.and_then(|id| store.file(id)) else {
        return fail(
            out,
            if id == Some(ROOT) {
                NFS3ERR_ISDIR
            } else {
                NFS3ERR_STALE
            },
        );
    };
    let len = data.read().unwrap_or_else(|e| e.into_inner()).len() as u64;
    let off = off.min(len);
    let n = (count as u64).min(len - off);
    out.u32(NFS3_OK);
    post_op(
        out,
        Some(Attr {
            id: id.unwrap_or(0),
            dir: false,
            size: len,
        }),
    );
    out.u32(n as u32);
    out.bool(off + n >= len);
    out.u32(n as u32); // the opaque's length; the bytes follow from the file
    Ok(Some(Tail {
        data,
        off: off as usize,
        len: n as usize,
    }))
}

/// WRITE: the data goes to memory, so every write is FILE_SYNC (RFC 1813 §3.3.7).
fn write(r: &mut XdrReader, store: &Store, out: &mut Out) -> Answer {
    let id = handle(r)?;
    let (off, _count, _stable) = (r.u64()?, r.u32()?, r.u32()?);
    let bytes = r.opaque_var(MAX_IO as usize)?;
    let Some(data) = id.and_then(|id| store.file(id)) else {
        return fail(
            out,
            if id == Some(ROOT) {
                NFS3ERR_ISDIR
            } else {
                NFS3ERR_STALE
            },
        )
        .and(more_wcc(out));
    };
    let end = off.saturating_add(bytes.len() as u64);
    if end > MAX_FILE {
        return fail(out, NFS3ERR_FBIG).and(more_wcc(out));
    }
    let size = {
        let mut d = data.write().unwrap_or_else(|e| e.into_inner());
        if off == d.len() as u64 {
            d.extend_from_slice(bytes); // appending (a sequential writer): no zero-fill first
        } else {
            if (d.len() as u64) < end {
                d.resize(end as usize, 0);
            }
            d[off as usize..end as usize].copy_from_slice(bytes);
        }
        d.len() as u64
    };
    out.u32(NFS3_OK);
    wcc(
        out,
        Some(Attr {
            id: id.unwrap_or(0),
            dir: false,
            size,
        }),
    );
    out.u32(bytes.len() as u32);
    out.u32(FILE_SYNC);
    out.0.extend_from_slice(&VERF);
    Ok(None)
}

/// A wcc_data after `fail`: its post-attributes' `false` (fail wrote the pre `false`).
fn more_wcc(out: &mut Out) -> Answer {
    out.bool(false);
    Ok(None)
}

fn create(r: &mut XdrReader, store: &Store, out: &mut Out) -> Answer {
    let dir = handle(r)?;
    let name = r.string(255)?;
    let how = r.u32()?;
    let truncate = match how {
        0 | 1 => sattr_size(r)? == Some(0),
        _ => r.opaque_fixed(8).map(|_| false)?, // EXCLUSIVE: a verifier
    };
    if dir != Some(ROOT) {
        return fail(out, NFS3ERR_NOTDIR).and(more_wcc(out));
    }
    if how == 1 && store.lookup(name).is_some() {
        return fail(out, NFS3ERR_EXIST).and(more_wcc(out));
    }
    let id = store.create(name, truncate);
    out.u32(NFS3_OK);
    out.bool(true);
    out.opaque(&id.to_be_bytes());
    post_op(out, attr(store, id));
    wcc(out, attr(store, ROOT));
    Ok(None)
}

fn remove(r: &mut XdrReader, store: &Store, out: &mut Out) -> Answer {
    let dir = handle(r)?;
    let name = r.string(255)?;
    let status = if dir != Some(ROOT) {
        NFS3ERR_NOTDIR
    } else if store.remove(name) {
        NFS3_OK
    } else {
        NFS3ERR_NOENT
    };
    out.u32(status);
    wcc(out, attr(store, ROOT));
    Ok(None)
}

fn fsstat(r: &mut XdrReader, store: &Store, out: &mut Out) -> Answer {
    let a = match object(r, store)? {
        Ok(a) => a,
        Err(s) => return fail(out, s),
    };
    out.u32(NFS3_OK);
    post_op(out, Some(a));
    for v in [1u64 << 40, 1 << 39, 1 << 39, 1 << 20, 1 << 19, 1 << 19] {
        out.u64(v); // tbytes, fbytes, abytes, tfiles, ffiles, afiles
    }
    out.u32(0); // invarsec
    Ok(None)
}

fn fsinfo(r: &mut XdrReader, store: &Store, out: &mut Out) -> Answer {
    let a = match object(r, store)? {
        Ok(a) => a,
        Err(s) => return fail(out, s),
    };
    out.u32(NFS3_OK);
    post_op(out, Some(a));
    for v in [MAX_IO, MAX_IO, 4096, MAX_IO, MAX_IO, 4096, 65536] {
        out.u32(v); // rtmax, rtpref, rtmult, wtmax, wtpref, wtmult, dtpref
    }
    out.u64(MAX_FILE);
    out.u64(1); // time_delta: 0 s, 1 ns
    out.u32(0x18); // FSF3_HOMOGENEOUS | FSF3_CANSETTIME
    Ok(None)
}

fn pathconf(r: &mut XdrReader, store: &Store, out: &mut Out) -> Answer {
    let a = match object(r, store)? {
        Ok(a) => a,
        Err(s) => return fail(out, s),
    };
    out.u32(NFS3_OK);
    post_op(out, Some(a));
    out.u32(1); // linkmax
    out.u32(255); // name_max
    for v in [true, true, false, true] {
        out.bool(v); // no_trunc, chown_restricted, case_insensitive, case_preserving
    }
    Ok(None)
}

fn commit(r: &mut XdrReader, store: &Store, out: &mut Out) -> Answer {
    let a = object(r, store)?;
    let (_off, _count) = (r.u64()?, r.u32()?);
    match a {
        Err(s) => fail(out, s).and(more_wcc(out)),
        Ok(a) => {
            out.u32(NFS3_OK);
            wcc(out, Some(a));
            out.0.extend_from_slice(&VERF);
            Ok(None)
        }
    }
}
