//! NFSv3 and MOUNT v3 arguments beyond [`crate::v3call`]'s load-generator set, as
//! whole byte strings for tests (RFC 1813 §3.3, §5.2): CREATE with an empty sattr3,
//! WRITE with any stable_how, SYMLINK, READLINK, and the call message of either
//! program (both are version 3).

use crate::nfs3::*;
use crate::rpccall;
use crate::v3call::ReplyError;
use engine::rpc::Cred;
use engine::xdr::{XdrReader, XdrResult, XdrWriter};

/// Longest symlink target accepted back (MAXPATHLEN as RFC 1813 §3.3.5 leaves it).
const MAX_PATH: usize = 4096;
/// fattr3 on the wire (RFC 1813 §2.6): 21 words.
const FATTR3_LEN: usize = 84;

/// A call message to NFS or MOUNT (`prog`) version 3, procedure `proc_`.
pub fn call(xid: u32, prog: u32, proc_: u32, cred: &Cred, args: &[u8]) -> Vec<u8> {
    rpccall::call(xid, prog, 3, proc_, cred, args)
}

fn enc(extra: usize, f: impl Fn(&mut XdrWriter) -> XdrResult<()>) -> Vec<u8> {
    rpccall::encode(256 + extra, f).expect("NFSv3 arguments encode")
}

/// sattr3 setting nothing (RFC 1813 §2.6): four absent values, two DONT_CHANGE times.
fn no_sattr(w: &mut XdrWriter) -> XdrResult<()> {
    for _ in 0..6 {
        w.u32(0)?;
    }
    Ok(())
}

/// A file handle alone: GETATTR3args, READLINK3args, FSINFO3args, ...
pub fn fh_args(fh: &[u8]) -> Vec<u8> {
    enc(fh.len(), |w| w.opaque_var(fh))
}

/// diropargs3 (RFC 1813 §2.6): LOOKUP3args, REMOVE3args, RMDIR3args.
pub fn dirop_args(dir: &[u8], name: &[u8]) -> Vec<u8> {
    enc(dir.len() + name.len(), |w| {
        w.opaque_var(dir)?;
        w.string(name)
    })
}

/// MNT's dirpath (RFC 1813 §5.2.1).
pub fn mnt_args(path: &[u8]) -> Vec<u8> {
    enc(path.len(), |w| w.string(path))
}

/// CREATE3args UNCHECKED with an empty sattr3 (RFC 1813 §3.3.8).
pub fn create_args(dir: &[u8], name: &[u8]) -> Vec<u8> {
    enc(dir.len() + name.len(), |w| {
        w.opaque_var(dir)?;
        w.string(name)?;
        w.u32(UNCHECKED)?;
        no_sattr(w)
    })
}

/// WRITE3args (RFC 1813 §3.3.7) with `stable` (UNSTABLE, DATA_SYNC, FILE_SYNC).
pub fn write_args(fh: &[u8], offset: u64, stable: u32, data: &[u8]) -> Vec<u8> {
    enc(fh.len() + data.len(), |w| {
        w.opaque_var(fh)?;
        w.u64(offset)?;
        w.u32(u32::try_from(data.len()).map_err(|_| engine::xdr::XdrError::Overflow)?)?;
        w.u32(stable)?;
        w.opaque_var(data)
    })
}

/// READ3args (RFC 1813 §3.3.6).
pub fn read_args(fh: &[u8], offset: u64, count: u32) -> Vec<u8> {
    enc(fh.len(), |w| {
        w.opaque_var(fh)?;
        w.u64(offset)?;
        w.u32(count)
    })
}

/// SYMLINK3args (RFC 1813 §3.3.10): empty sattr3.
pub fn symlink_args(dir: &[u8], name: &[u8], target: &[u8]) -> Vec<u8> {
    enc(dir.len() + name.len() + target.len(), |w| {
        w.opaque_var(dir)?;
        w.string(name)?;
        no_sattr(w)?;
        w.string(target)
    })
}

/// The target in a READLINK3resok (RFC 1813 §3.3.5).
pub fn parse_readlink(body: &[u8]) -> Result<Vec<u8>, ReplyError> {
    let mut r = XdrReader::new(body);
    match r.u32()? {
        NFS3_OK => {}
        st => return Err(ReplyError::Status("READLINK", st)),
    }
    if r.bool()? {
        r.skip(FATTR3_LEN)?;
    }
    Ok(r.opaque_var(MAX_PATH)?.to_vec())
}
