//! NFSv3 (RFC 1813): argument decoding, permission checks, and result encoding around
//! the file model.
//!
//! `serve` runs on a backend worker thread (the file model blocks). It decodes the
//! whole argument first, so a call is either garbage (nothing done) or executed; it
//! then writes only the procedure's results after the RPC header the caller wrote.

mod dirpage;
pub mod fast;
mod names;
pub mod outcome;
mod procs;
pub mod proto;
pub mod recall;
pub mod status;

use engine::xdr::{XdrReader, XdrWriter};

pub use nfs_wire::{NFS_PROGRAM, NFS_V3};

pub use crate::call::{Ctx, Outcome};
pub use crate::limits::{MAX_DIR_REPLY, MAX_IO};

/// Decodes the args of `proc_` from `args`, runs it, and writes only the procedure
/// results into `out`.
pub fn serve(ctx: &Ctx, proc_: u32, args: &[u8], out: &mut XdrWriter) -> Outcome {
    if proc_ > 21 {
        return Outcome::ProcUnavail;
    }
    let start = out.position();
    let status = match procs::dispatch(ctx, proc_, args, out) {
        Ok(()) => return Outcome::Done,
        Err(procs::Fail::Garbage) => {
            out.rewind(start);
            return Outcome::GarbageArgs;
        }
        Err(procs::Fail::St(s)) => s,
        Err(procs::Fail::Full) => {
            tracing::warn!(proc_, "NFSv3 reply did not fit its buffer");
            crate::fs::Status::ServerFault
        }
    };
    // A failure without attributes: rewind whatever was started and send the
    // procedure's bare resfail.
    out.rewind(start);
    if proto::put_fail(out, proc_, status::nfsstat3(status)).is_err() {
        tracing::error!(proc_, "NFSv3 reply buffer too small even for a status");
    }
    Outcome::Done
}

/// Bytes of reply buffer this call needs. Never fails: garbage gets a small size (it
/// will be answered with GARBAGE_ARGS).
pub fn reply_capacity(proc_: u32, args: &[u8]) -> usize {
    const SMALL: usize = 1024;
    let mut r = XdrReader::new(args);
    let fh_ok = proto::get_fh(&mut r).is_ok();
    match proc_ {
        // READ: fh, offset, count.
        6 if fh_ok => match (r.u64(), r.u32()) {
            (Ok(_), Ok(count)) => (count as usize).min(MAX_IO) + 512,
            _ => SMALL,
        },
        // READDIR: fh, cookie, cookieverf, count.
        16 if fh_ok => match (r.u64(), r.skip(8), r.u32()) {
            (Ok(_), Ok(()), Ok(count)) => (count as usize).min(MAX_DIR_REPLY) + 512,
            _ => SMALL,
        },
        // READDIRPLUS: fh, cookie, cookieverf, dircount, maxcount.
        17 if fh_ok => match (r.u64(), r.skip(8), r.u32(), r.u32()) {
            (Ok(_), Ok(()), Ok(_), Ok(max)) => (max as usize).min(MAX_DIR_REPLY) + 512,
            _ => SMALL,
        },
        // READLINK: up to a 4 KiB path.
        5 => proto::PATH_MAX + 512,
        _ => SMALL,
    }
}

#[cfg(test)]
mod tests;
