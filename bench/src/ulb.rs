//! The requester side of the NFS upper-layer binding for RPC-over-RDMA (RFC 8267 §3,
//! §4): for an encoded RPC call, the [`CallShape`] that tells the
//! requester what may be reduced into a read chunk, how large a write chunk to offer
//! for a DDP-eligible result, and how large the whole reply can get (so a Reply chunk
//! is offered when it may not fit inline).
//!
//! NFSv3 (program 100003, version 3):
//! - WRITE (7): `WRITE3args.data` is reducible (the range after its length word);
//! - SYMLINK (10): `symlinkdata3.symlink_data` is reducible;
//! - READ (6): a write chunk of the call's `count` bytes for `READ3resok.data`;
//! - READLINK (5): a write chunk of [`MAX_PATH`] bytes for `READLINK3resok.data`;
//! - READDIR (16) / READDIRPLUS (17): no DDP, the reply is sized from the call's
//!   `count` / `maxcount` (a Reply chunk when it can exceed the inline threshold);
//! - everything else: [`SMALL_REPLY`].
//!
//! NFSv4 (version 4) COMPOUNDs: see [`crate::ulb4`] (RFC 8267 §6).
//!
//! Other programs get [`OTHER_REPLY`], except MOUNT DUMP and EXPORT whose lists can be
//! long ([`MOUNT_LIST_REPLY`]). Calls that do not decode get [`OTHER_REPLY`] without
//! any chunk: the server will answer them with a small error.

use engine::rpc;
use engine::rpcrdma::requester::{CallShape, ResultAt};
use engine::xdr::{padded, XdrReader, XdrResult};
use std::ops::Range;

pub use nfs_wire::{MOUNT_PROGRAM, NFS_PROGRAM};

/// Largest reply of an NFSv3 procedure without a variable-size result: RPC reply header
/// with a verifier, status and at most two wcc_data / post_op_attr + a handle.
pub const SMALL_REPLY: usize = 1024;
/// Replies of calls this module knows nothing about.
pub const OTHER_REPLY: usize = 8192;
/// MOUNT DUMP / EXPORT replies (lists of mounts / exports with their groups).
pub const MOUNT_LIST_REPLY: usize = 64 * 1024;
/// READLINK write chunk: the longest path we expect (NFS3_MAXPATHLEN-ish).
pub const MAX_PATH: u32 = 4096;
/// Largest READ `count` honoured for the write chunk (servers cap at their rtmax,
/// 1 MiB for the gateway; the RPC-over-RDMA chunk limit is a little above 2 MiB).
pub const MAX_READ: u32 = 2 << 20;
/// Largest READDIR `count` / READDIRPLUS `maxcount` used for sizing.
pub const MAX_DIR: u32 = 1 << 20;
/// Room for everything but the directory entries / read data in those replies.
pub const DIR_SLACK: usize = 512;

const NFS_FHSIZE3: usize = 64;
const MAX_NAME: usize = 4096;

/// The prog/vers/proc of a call and the offset of its arguments.
fn header(call: &[u8]) -> Option<(u32, u32, u32, usize)> {
    if let Ok((h, off)) = rpc::decode_call(call) {
        return Some((h.prog, h.vers, h.proc_, off));
    }
    // Lenient fallback: any credential / verifier flavor (RPCSEC_GSS, AUTH_DH...).
    let mut r = XdrReader::new(call);
    let lenient = |r: &mut XdrReader| -> XdrResult<(u32, u32, u32)> {
        r.u32()?; // xid
        if r.u32()? != rpc::MSG_CALL || r.u32()? != rpc::RPC_VERSION {
            return Err(engine::xdr::XdrError::BadValue);
        }
        let (prog, vers, proc_) = (r.u32()?, r.u32()?, r.u32()?);
        for _ in 0..2 {
            r.u32()?;
            r.opaque_var(rpc::MAX_AUTH_BYTES)?;
        }
        Ok((prog, vers, proc_))
    };
    let (prog, vers, proc_) = lenient(&mut r).ok()?;
    Some((prog, vers, proc_, r.position()))
}

/// The shape of one encoded RPC call (starting at its XID, no record mark); an NFSv4
/// reply that cannot be sized from its call is bounded by [`V4_UNPREDICTABLE`].
#[cfg(test)]
pub fn call_shape(call: &[u8]) -> CallShape {
    call_shape_with(call, V4_UNPREDICTABLE)
}

/// Bound of an NFSv4 reply that cannot be sized from the call when no session told
/// its `ca_maxresponsesize` yet (EXCHANGE_ID, CREATE_SESSION).
pub const V4_UNPREDICTABLE: usize = 64 << 10;

/// [`call_shape`] with the bound of an unpredictable NFSv4 reply: the session's
/// fore-channel `ca_maxresponsesize` (RFC 8267 §6.2.2, R8267-15).
pub fn call_shape_with(call: &[u8], v4_unpredictable: usize) -> CallShape {
    let Some((prog, vers, proc_, args_at)) = header(call) else {
        return CallShape::new(OTHER_REPLY);
    };
    match (prog, vers) {
        (NFS_PROGRAM, 3) => nfs3_shape(proc_, call, args_at),
        (NFS_PROGRAM, 4) => crate::ulb4::shape(call, proc_, args_at, v4_unpredictable),
        (MOUNT_PROGRAM, _) if proc_ == 2 || proc_ == 5 => CallShape::new(MOUNT_LIST_REPLY),
        _ => CallShape::new(OTHER_REPLY),
    }
}

fn nfs3_shape(proc_: u32, call: &[u8], args_at: usize) -> CallShape {
    let mut r = XdrReader::new(&call[args_at..]);
    let shape = match proc_ {
        0..=4 | 8 | 9 | 11..=15 | 18..=21 => Some(CallShape::new(SMALL_REPLY)),
        5 => Some(
            CallShape::new(SMALL_REPLY + padded(MAX_PATH as usize))
                .with_write_chunk(MAX_PATH)
                .with_result(ResultAt::Locate(locate_readlink)),
        ),
        6 => read_count(&mut r).ok().map(|count| {
            let count = count.min(MAX_READ);
            CallShape::new(SMALL_REPLY + padded(count as usize))
                .with_write_chunk(count)
                .with_result(ResultAt::Locate(locate_read))
        }),
        7 => write_data(&mut r)
            .ok()
            .map(|d| CallShape::new(SMALL_REPLY).with_reduce(d.start + args_at..d.end + args_at)),
        10 => symlink_data(&mut r)
            .ok()
            .map(|d| CallShape::new(SMALL_REPLY).with_reduce(d.start + args_at..d.end + args_at)),
        16 => readdir_count(&mut r, false)
            .ok()
            .map(|c| CallShape::new(c.min(MAX_DIR) as usize + DIR_SLACK)),
        17 => readdir_count(&mut r, true)
            .ok()
            .map(|c| CallShape::new(c.min(MAX_DIR) as usize + DIR_SLACK)),
        _ => None,
    };
    // Garbage arguments get a small error; unknown procedures PROC_UNAVAIL.
    shape.unwrap_or_else(|| CallShape::new(SMALL_REPLY))
}

fn fh(r: &mut XdrReader) -> XdrResult<()> {
    r.opaque_var(NFS_FHSIZE3).map(|_| ())
}

/// The range (in `r`'s buffer) of the data of a variable opaque whose length word is
/// next; the data (not necessarily its pad) must be present.
fn opaque_range(r: &mut XdrReader) -> XdrResult<Range<usize>> {
    let len = r.u32()? as usize;
    let start = r.position();
    if len > r.remaining() {
        return Err(engine::xdr::XdrError::Short);
    }
    Ok(start..start + len)
}

/// READ3args: file, offset, count.
fn read_count(r: &mut XdrReader) -> XdrResult<u32> {
    fh(r)?;
    r.u64()?;
    r.u32()
}

/// WRITE3args: file, offset, count, stable, data.
fn write_data(r: &mut XdrReader) -> XdrResult<Range<usize>> {
    fh(r)?;
    r.u64()?;
    r.u32()?;
    r.u32()?;
    opaque_range(r)
}

/// SYMLINK3args: where (diropargs3), symlinkdata3 { sattr3, nfspath3 }.
fn symlink_data(r: &mut XdrReader) -> XdrResult<Range<usize>> {
    fh(r)?;
    r.string(MAX_NAME)?;
    // sattr3: mode, uid, gid (bool + u32), size (bool + u64), atime, mtime (time_how
    // with an nfstime3 for SET_TO_CLIENT_TIME).
    for _ in 0..3 {
        if r.bool()? {
            r.u32()?;
        }
    }
    if r.bool()? {
        r.u64()?;
    }
    for _ in 0..2 {
        match r.u32()? {
            0 | 1 => {}
            2 => r.skip(8)?,
            _ => return Err(engine::xdr::XdrError::BadValue),
        }
    }
    opaque_range(r)
}

/// READDIR3args: dir, cookie, cookieverf, count; READDIRPLUS3args: dir, cookie,
/// cookieverf, dircount, maxcount. Returns count / maxcount.
fn readdir_count(r: &mut XdrReader, plus: bool) -> XdrResult<u32> {
    fh(r)?;
    r.u64()?;
    r.skip(8)?;
    let count = r.u32()?;
    if plus {
        r.u32()
    } else {
        Ok(count)
    }
}

/// Offset of the procedure results in an accepted, successful RPC reply.
pub(crate) fn results_at(reply: &[u8]) -> Option<usize> {
    match rpc::decode_reply(reply) {
        Ok((_, rpc::ReplyStatus::Accepted(rpc::Accept::Success), at)) => Some(at),
        _ => None,
    }
}

fn skip_post_op_attr(r: &mut XdrReader) -> XdrResult<()> {
    if r.bool()? {
        r.skip(84)?;
    }
    Ok(())
}

/// [`ResultAt::Locate`] for READ: the offset of `READ3resok.data`'s length word in the
/// reduced reply, `None` for an error arm (or anything undecodable).
pub fn locate_read(reply: &[u8]) -> Option<usize> {
    let at = results_at(reply)?;
    let mut r = XdrReader::new(reply.get(at..)?);
    if r.u32().ok()? != 0 {
        return None;
    }
    skip_post_op_attr(&mut r).ok()?;
    r.u32().ok()?; // count
    r.bool().ok()?; // eof
    (r.remaining() >= 4).then(|| at + r.position())
}

/// [`ResultAt::Locate`] for READLINK: the offset of `READLINK3resok.data`'s length
/// word, `None` for an error arm.
pub fn locate_readlink(reply: &[u8]) -> Option<usize> {
    let at = results_at(reply)?;
    let mut r = XdrReader::new(reply.get(at..)?);
    if r.u32().ok()? != 0 {
        return None;
    }
    skip_post_op_attr(&mut r).ok()?;
    (r.remaining() >= 4).then(|| at + r.position())
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::rpc::{AuthSys, Cred};
    use engine::xdr::XdrWriter;
    use nfs_wire::rpccall;

    fn call(
        prog: u32,
        vers: u32,
        proc_: u32,
        args: impl FnOnce(&mut XdrWriter) -> XdrResult<()>,
    ) -> Vec<u8> {
        let mut buf = vec![0u8; (1 << 20) + 4096];
        let mut w = XdrWriter::new(&mut buf);
        rpccall::header(
            &mut w,
            77,
            prog,
            vers,
            proc_,
            &Cred::Sys(AuthSys::new(1, 2, &[3])),
        )
        .unwrap();
        args(&mut w).unwrap();
        let n = w.position();
        buf.truncate(n);
        buf
    }

    const FH: &[u8] = &[7u8; 28];

    fn write_call(data: &[u8]) -> Vec<u8> {
        call(NFS_PROGRAM, 3, 7, |w| {
            w.opaque_var(FH)?;
            w.u64(4096)?;
            w.u32(data.len() as u32)?;
            w.u32(0)?;
            w.opaque_var(data)
        })
    }

    #[test]
    fn write_reduces_exactly_the_data() {
        for len in [0usize, 1, 3, 4, 5, 4096, 65536, 1 << 20] {
            let data: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
            let c = write_call(&data);
            let s = call_shape(&c);
            let r = s.reduce.clone().expect("reduce");
            assert_eq!(&c[r.clone()], &data[..], "len {len}");
            assert_eq!(r.end - r.start, len);
            assert_eq!(r.start % 4, 0);
            // The length word precedes the data and the pad ends the call.
            let lw = u32::from_be_bytes(c[r.start - 4..r.start].try_into().unwrap());
            assert_eq!(lw as usize, len);
            assert_eq!(padded(r.end), c.len());
            assert_eq!(s.write_chunk, None);
            assert_eq!(s.max_reply, SMALL_REPLY);
        }
    }

    #[test]
    fn write_with_other_credentials_still_reduces() {
        // AUTH_NONE credential.
        let data = vec![9u8; 100];
        let mut buf = vec![0u8; 4096];
        let mut w = XdrWriter::new(&mut buf);
        rpccall::header(&mut w, 5, NFS_PROGRAM, 3, 7, &Cred::None).unwrap();
        w.opaque_var(FH).unwrap();
        w.u64(0).unwrap();
        w.u32(100).unwrap();
        w.u32(2).unwrap();
        w.opaque_var(&data).unwrap();
        let n = w.position();
        let r = call_shape(&buf[..n]).reduce.unwrap();
        assert_eq!(&buf[r], &data[..]);
        // An unknown (e.g. RPCSEC_GSS) credential: the lenient header parse.
        let mut c = write_call(&data);
        c[6 * 4..7 * 4].copy_from_slice(&6u32.to_be_bytes()); // cred flavor
        let r = call_shape(&c).reduce.unwrap();
        assert_eq!(&c[r], &data[..]);
    }

    #[test]
    fn truncated_write_is_not_reduced() {
        let c = write_call(&[1u8; 64]);
        let cut = &c[..c.len() - 8];
        let s = call_shape(cut);
        assert!(s.reduce.is_none());
        assert_eq!(s.max_reply, SMALL_REPLY);
    }

    #[test]
    fn read_offers_a_write_chunk_of_count() {
        for count in [0u32, 1, 4096, 65536, 1 << 20] {
            let c = call(NFS_PROGRAM, 3, 6, |w| {
                w.opaque_var(FH)?;
                w.u64(123)?;
                w.u32(count)
            });
            let s = call_shape(&c);
            assert_eq!(s.write_chunk, Some(count));
            assert!(s.reduce.is_none());
            assert_eq!(s.max_reply, SMALL_REPLY + padded(count as usize));
            assert!(matches!(s.result, ResultAt::Locate(_)));
        }
        let huge = call(NFS_PROGRAM, 3, 6, |w| {
            w.opaque_var(FH)?;
            w.u64(0)?;
            w.u32(u32::MAX)
        });
        assert_eq!(call_shape(&huge).write_chunk, Some(MAX_READ));
    }

    #[test]
    fn readlink_offers_a_path_sized_write_chunk() {
        let c = call(NFS_PROGRAM, 3, 5, |w| w.opaque_var(FH));
        let s = call_shape(&c);
        assert_eq!(s.write_chunk, Some(MAX_PATH));
        assert_eq!(s.max_reply, SMALL_REPLY + MAX_PATH as usize);
    }

    #[test]
    fn readdir_replies_are_sized_from_the_call() {
        let c = call(NFS_PROGRAM, 3, 16, |w| {
            w.opaque_var(FH)?;
            w.u64(0)?;
            w.opaque_fixed(&[0; 8])?;
            w.u32(32768)
        });
        let s = call_shape(&c);
        assert_eq!(s.max_reply, 32768 + DIR_SLACK);
        assert_eq!(s.write_chunk, None);
        assert!(s.reduce.is_none());
        let c = call(NFS_PROGRAM, 3, 17, |w| {
            w.opaque_var(FH)?;
            w.u64(0)?;
            w.opaque_fixed(&[0; 8])?;
            w.u32(4096)?;
            w.u32(65536)
        });
        assert_eq!(call_shape(&c).max_reply, 65536 + DIR_SLACK);
    }

    #[test]
    fn symlink_reduces_the_path() {
        let path = b"../some/where/else";
        for atime in [0u32, 2] {
            let c = call(NFS_PROGRAM, 3, 10, |w| {
                w.opaque_var(FH)?;
                w.string(b"link")?;
                w.bool(true)?;
                w.u32(0o777)?;
                w.bool(false)?;
                w.bool(true)?;
                w.u32(5)?;
                w.bool(true)?;
                w.u64(0)?;
                w.u32(atime)?;
                if atime == 2 {
                    w.u32(1)?;
                    w.u32(2)?;
                }
                w.u32(1)?;
                w.string(path)
            });
            let r = call_shape(&c).reduce.unwrap();
            assert_eq!(&c[r.clone()], path);
            assert_eq!(padded(r.end), c.len());
        }
    }

    #[test]
    fn other_calls_are_conservative() {
        let getattr = call(NFS_PROGRAM, 3, 1, |w| w.opaque_var(FH));
        let s = call_shape(&getattr);
        assert_eq!(s.max_reply, SMALL_REPLY);
        assert!(s.reduce.is_none() && s.write_chunk.is_none());
        assert_eq!(
            call_shape(&call(NFS_PROGRAM, 3, 0, |_| Ok(()))).max_reply,
            SMALL_REPLY
        );
        let mnt = call(MOUNT_PROGRAM, 3, 1, |w| w.string(b"/"));
        assert_eq!(call_shape(&mnt).max_reply, OTHER_REPLY);
        let export = call(MOUNT_PROGRAM, 3, 5, |_| Ok(()));
        assert_eq!(call_shape(&export).max_reply, MOUNT_LIST_REPLY);
        // An NFSv4 COMPOUND that does not decode: unpredictable (crate::ulb4).
        let v4 = call(NFS_PROGRAM, 4, 1, |w| w.u32(0));
        assert_eq!(call_shape(&v4).max_reply, V4_UNPREDICTABLE);
        assert_eq!(call_shape(&[0, 0, 0, 1]).max_reply, OTHER_REPLY);
        assert_eq!(call_shape(&[]).max_reply, OTHER_REPLY);
    }

    /// R8166-58 / R8267-01 / R8267-10 (client side), over every NFSv3 procedure and the
    /// other programs and versions the bridge may forward: only NFSv3 WRITE data and
    /// SYMLINK path are ever reduced into a read chunk (exactly the item's bytes), and
    /// only NFSv3 READ and READLINK get a write chunk. The arguments are WRITE-shaped for
    /// every procedure (a trailing opaque a careless parser would reduce), SYMLINK's are
    /// its own.
    #[test]
    fn r8166_58_r8267_01_10_only_eligible_items_ever_go_into_chunks() {
        let data = [0x5au8; 3000];
        let write_like = |w: &mut XdrWriter| -> XdrResult<()> {
            w.opaque_var(FH)?;
            w.u64(0)?;
            w.u32(data.len() as u32)?;
            w.u32(0)?;
            w.opaque_var(&data)
        };
        let symlink = |w: &mut XdrWriter| -> XdrResult<()> {
            w.opaque_var(FH)?;
            w.string(b"link")?;
            w.opaque_fixed(&[0; 24])?; // sattr3: nothing set
            w.opaque_var(&data)
        };
        let mut calls = vec![];
        for proc_ in 0..=21 {
            calls.push((NFS_PROGRAM, 3, proc_));
        }
        for proc_ in 0..=18 {
            calls.push((NFS_PROGRAM, 2, proc_));
        }
        for proc_ in 0..=5 {
            calls.push((MOUNT_PROGRAM, 3, proc_));
        }
        calls.extend([
            (NFS_PROGRAM, 4, 1),
            (100227, 3, 1),
            (100227, 3, 2),
            (100021, 4, 7),
        ]);
        for (prog, vers, proc_) in calls {
            let nfs3 = prog == NFS_PROGRAM && vers == 3;
            let c = if nfs3 && proc_ == 10 {
                call(prog, vers, proc_, symlink)
            } else {
                call(prog, vers, proc_, write_like)
            };
            let s = call_shape(&c);
            let what = format!("prog {prog} v{vers} proc {proc_}");
            match &s.reduce {
                Some(r) if !r.is_empty() => {
                    assert!(nfs3 && (proc_ == 7 || proc_ == 10), "{what} reduced");
                    assert_eq!(&c[r.clone()], &data[..], "{what}: exactly the item");
                    assert_eq!(padded(r.end), c.len(), "{what}: the last item");
                }
                _ => assert!(!(nfs3 && (proc_ == 7 || proc_ == 10)), "{what} not reduced"),
            }
            let wants_chunk = s.write_chunk.is_some_and(|n| n > 0);
            assert_eq!(wants_chunk, nfs3 && (proc_ == 5 || proc_ == 6), "{what}");
        }
    }

    fn reply(results: impl FnOnce(&mut XdrWriter) -> XdrResult<()>) -> Vec<u8> {
        let mut buf = vec![0u8; 8192];
        let mut w = XdrWriter::new(&mut buf);
        rpc::write_accepted(&mut w, 77, rpc::Accept::Success).unwrap();
        results(&mut w).unwrap();
        let n = w.position();
        buf.truncate(n);
        buf
    }

    #[test]
    fn locate_finds_the_read_and_readlink_items() {
        // READ3resok with attributes, reduced (length word last).
        let r = reply(|w| {
            w.u32(0)?;
            w.bool(true)?;
            w.opaque_fixed(&[0; 84])?;
            w.u32(4096)?;
            w.bool(false)?;
            w.u32(4096)
        });
        assert_eq!(locate_read(&r), Some(r.len() - 4));
        // Error arm: no item.
        let e = reply(|w| {
            w.u32(70)?;
            w.bool(false)
        });
        assert_eq!(locate_read(&e), None);
        assert_eq!(locate_readlink(&e), None);
        let l = reply(|w| {
            w.u32(0)?;
            w.bool(false)?;
            w.u32(5)
        });
        assert_eq!(locate_readlink(&l), Some(l.len() - 4));
        // Never panics on junk.
        for n in 0..40 {
            let junk: Vec<u8> = (0..n).map(|i| (i * 37) as u8).collect();
            let _ = locate_read(&junk);
            let _ = locate_readlink(&junk);
        }
    }
}
