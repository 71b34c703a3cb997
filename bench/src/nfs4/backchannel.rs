//! bench's NFSv4.1 back channel (RFC 8881 §20, the callback program): the answers to
//! the callbacks a server sends on an RPC-over-RDMA connection bound as back channel
//! (RFC 8167; `crate::rdma::RdmaPipe` hands them here).
//!
//! - CB_NULL (procedure 0): an empty success (the server's probe after CREATE_SESSION
//!   with CONN_BACK_CHAN).
//! - CB_COMPOUND (procedure 1): CB_SEQUENCE is answered NFS4_OK echoing its session,
//!   sequence id and slot; CB_RECALL NFS4_OK (bench asks OPEN for no delegation,
//!   OPEN4_SHARE_ACCESS_WANT_NO_DELEG, so it never holds one to return); other known
//!   callback ops NFS4ERR_NOTSUPP, unknown ones NFS4ERR_OP_ILLEGAL (RFC 8881 §20.1),
//!   stopping there.
//! - Another program or procedure: PROG_UNAVAIL / PROC_UNAVAIL; undecodable
//!   arguments: GARBAGE_ARGS. Nothing here panics on any input.

use engine::rpc::{self, Accept};
use engine::xdr::{XdrReader, XdrResult, XdrWriter};

/// The callback program number bench's CREATE_SESSION names (csa_cb_program).
pub use nfs_wire::nfs4::NFS4_CALLBACK as CB_PROGRAM;
// Highest callback op number RFC 8881 defines (CB_NOTIFY_DEVICEID).
use nfs_wire::nfs4::OP_CB_NOTIFY_DEVICEID as CB_LAST_OP;
use nfs_wire::nfs4::{OP_CB_ILLEGAL, OP_CB_RECALL as CB_RECALL, OP_CB_SEQUENCE as CB_SEQUENCE};
const NFS4ERR_NOTSUPP: u32 = 10004;
const NFS4ERR_OP_ILLEGAL: u32 = 10044;
const NFS4ERR_MINOR_VERS_MISMATCH: u32 = 10021;
/// Callback ops answered per CB_COMPOUND at most.
const MAX_OPS: u32 = 16;

/// The RPC reply (from its XID) to the callback `call` (from its XID); `None` when
/// `call` is not an RPC call at all (dropped).
pub fn answer(call: &[u8]) -> Option<Vec<u8>> {
    let (h, at) = rpc::decode_call(call).ok()?;
    let (stat, body) = match (h.prog, h.proc_) {
        (CB_PROGRAM, 0) => (Accept::Success, Vec::new()),
        (CB_PROGRAM, 1) => match compound(&mut XdrReader::new(call.get(at..)?)) {
            Ok(b) => (Accept::Success, b),
            Err(_) => (Accept::GarbageArgs, Vec::new()),
        },
        (CB_PROGRAM, _) => (Accept::ProcUnavail, Vec::new()),
        _ => (Accept::ProgUnavail, Vec::new()),
    };
    let mut out = vec![0u8; 64];
    let mut w = XdrWriter::new(&mut out);
    rpc::write_accepted(&mut w, h.xid, stat).ok()?;
    let n = w.position();
    out.truncate(n);
    out.extend_from_slice(&body);
    Some(out)
}

/// An RPC GARBAGE_ARGS reply to callback `xid` (its record did not decode).
pub fn garbage_args(xid: u32) -> Vec<u8> {
    let mut out = vec![0u8; 64];
    let mut w = XdrWriter::new(&mut out);
    let n = rpc::write_accepted(&mut w, xid, Accept::GarbageArgs)
        .map(|()| w.position())
        .unwrap_or(0);
    out.truncate(n);
    out
}

fn put(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// CB_COMPOUND4args → CB_COMPOUND4res (RFC 8881 §20.2).
fn compound(r: &mut XdrReader) -> XdrResult<Vec<u8>> {
    let tag = r.opaque_var(64)?;
    let minor = r.u32()?;
    r.u32()?; // callback_ident
    let n = r.u32()?;
    if n > MAX_OPS {
        return Err(engine::xdr::XdrError::BadValue);
    }
    let mut res = Vec::new();
    let mut done = 0u32;
    let mut status = 0;
    if minor != 1 {
        status = NFS4ERR_MINOR_VERS_MISMATCH;
    }
    for _ in 0..if status == 0 { n } else { 0 } {
        let opnum = r.u32()?;
        done += 1;
        match opnum {
            CB_SEQUENCE => {
                let sid = r.opaque_fixed(16)?;
                let seq = r.u32()?;
                let slot = r.u32()?;
                let highest = r.u32()?;
                r.bool()?; // cachethis
                referring_lists(r)?;
                put(&mut res, CB_SEQUENCE);
                put(&mut res, 0);
                res.extend_from_slice(sid);
                for v in [seq, slot, highest, highest] {
                    put(&mut res, v); // ..., target highest slot
                }
            }
            CB_RECALL => {
                r.skip(16)?; // stateid
                r.bool()?; // truncate
                r.opaque_var(128)?; // fh
                put(&mut res, CB_RECALL);
                put(&mut res, 0);
            }
            3..=CB_LAST_OP => {
                put(&mut res, opnum);
                put(&mut res, NFS4ERR_NOTSUPP);
                status = NFS4ERR_NOTSUPP;
                break;
            }
            _ => {
                put(&mut res, OP_CB_ILLEGAL);
                put(&mut res, NFS4ERR_OP_ILLEGAL);
                status = NFS4ERR_OP_ILLEGAL;
                break;
            }
        }
    }
    let mut out = Vec::with_capacity(res.len() + 16 + tag.len());
    put(&mut out, status);
    put(&mut out, tag.len() as u32);
    out.extend_from_slice(tag);
    out.resize(out.len() + engine::xdr::pad_len(tag.len()), 0);
    put(&mut out, done);
    out.extend_from_slice(&res);
    Ok(out)
}

/// Skips csa_referring_call_lists (RFC 8881 §20.9.1).
fn referring_lists(r: &mut XdrReader) -> XdrResult<()> {
    let n = r.u32()?;
    if n > MAX_OPS {
        return Err(engine::xdr::XdrError::BadValue);
    }
    for _ in 0..n {
        r.skip(16)?;
        let calls = r.u32()?;
        if calls > 1024 {
            return Err(engine::xdr::XdrError::BadValue);
        }
        r.skip(8 * calls as usize)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::rpc::{AuthSys, Cred};

    fn cb_call(proc_: u32, prog: u32, args: &[u8]) -> Vec<u8> {
        nfs_wire::rpccall::call(
            0x55,
            prog,
            1,
            proc_,
            &Cred::Sys(AuthSys::new(0, 0, &[])),
            args,
        )
    }

    fn words(ws: &[u32]) -> Vec<u8> {
        ws.iter().flat_map(|w| w.to_be_bytes()).collect()
    }

    fn results(reply: &[u8]) -> (Accept, Vec<u32>) {
        let (_, st, at) = rpc::decode_reply(reply).unwrap();
        let rpc::ReplyStatus::Accepted(a) = st else {
            panic!("{st:?}")
        };
        let w = reply[at..]
            .chunks(4)
            .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
            .collect();
        (a, w)
    }

    #[test]
    fn cb_null_succeeds_and_other_programs_are_unavailable() {
        let (a, w) = results(&answer(&cb_call(0, CB_PROGRAM, &[])).unwrap());
        assert!(matches!(a, Accept::Success) && w.is_empty());
        let (a, _) = results(&answer(&cb_call(0, 100003, &[])).unwrap());
        assert!(matches!(a, Accept::ProgUnavail));
        let (a, _) = results(&answer(&cb_call(7, CB_PROGRAM, &[])).unwrap());
        assert!(matches!(a, Accept::ProcUnavail));
        assert!(answer(&[0, 0, 0, 1]).is_none());
        let g = garbage_args(0x1234);
        assert_eq!(
            rpc::decode_reply(&g).unwrap().1,
            rpc::ReplyStatus::Accepted(Accept::GarbageArgs)
        );
        assert_eq!(rpc::decode_reply(&g).unwrap().0, 0x1234);
    }

    #[test]
    fn cb_sequence_and_cb_recall_are_answered_ok() {
        let mut args = words(&[0, 1, 0, 2]); // tag "", minor 1, ident 0, 2 ops
        args.extend(words(&[CB_SEQUENCE]));
        args.extend([9u8; 16]);
        args.extend(words(&[5, 1, 1, 0, 0])); // seq 5, slot 1, highest 1, no cache, []
        args.extend(words(&[CB_RECALL]));
        args.extend([3u8; 16]);
        args.extend(words(&[0, 8]));
        args.extend([7u8; 8]);
        let (a, w) = results(&answer(&cb_call(1, CB_PROGRAM, &args)).unwrap());
        assert!(matches!(a, Accept::Success));
        let sid = u32::from_be_bytes([9; 4]);
        assert_eq!(
            w,
            vec![
                0,
                0,
                2,
                CB_SEQUENCE,
                0,
                sid,
                sid,
                sid,
                sid,
                5,
                1,
                1,
                1,
                CB_RECALL,
                0
            ]
        );
    }

    #[test]
    fn unsupported_ops_stop_the_compound_and_garbage_is_garbage_args() {
        let mut args = words(&[0, 1, 0, 2, 3]); // CB_GETATTR
        args.extend([0u8; 64]);
        let (_, w) = results(&answer(&cb_call(1, CB_PROGRAM, &args)).unwrap());
        assert_eq!(w, vec![NFS4ERR_NOTSUPP, 0, 1, 3, NFS4ERR_NOTSUPP]);
        let (_, w) = results(&answer(&cb_call(1, CB_PROGRAM, &words(&[0, 1, 0, 1, 99]))).unwrap());
        assert_eq!(
            w,
            vec![NFS4ERR_OP_ILLEGAL, 0, 1, OP_CB_ILLEGAL, NFS4ERR_OP_ILLEGAL]
        );
        let (_, w) = results(&answer(&cb_call(1, CB_PROGRAM, &words(&[0, 2, 0, 0]))).unwrap());
        assert_eq!(w, vec![NFS4ERR_MINOR_VERS_MISMATCH, 0, 0]);
        let (a, _) = results(&answer(&cb_call(1, CB_PROGRAM, &words(&[0, 1, 0, 99]))).unwrap());
        assert!(matches!(a, Accept::GarbageArgs));
        let (a, _) = results(&answer(&cb_call(1, CB_PROGRAM, &words(&[0, 1]))).unwrap());
        assert!(matches!(a, Accept::GarbageArgs));
    }
}
