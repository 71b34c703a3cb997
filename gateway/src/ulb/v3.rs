//! NFSv3 (RFC 8267 §4): which NFSv3 items are DDP-eligible, checked on calls and
//! located in replies.
//!
//! Calls: only WRITE data (proc 7) and SYMLINK path (proc 10) may be reduced; both are
//! the last item of their arguments, so a valid reduction is exactly one read chunk
//! that ends the call and whose length word matches the chunk (with or without the
//! XDR pad, RFC 8166 §3.4.5.2). Anything else is GARBAGE_ARGS (RFC 8166 §6.1, R8166-59).
//!
//! Replies: READ data (proc 6) and READLINK path (proc 5), each the last item of the
//! OK arm; error arms carry none (the write chunk then comes back unused). Where the
//! item went is noted by the NFSv3 encoder that wrote it (`crate::ddp::note`) or
//! passed by the executor that answered (the read cache's and the io_uring READ's
//! outcome); nothing here reads a reply, except the test oracle [`reply_data`].

use super::{ReplyItem, Violation};
use crate::ddp::Eligibles;
use engine::rpc;
use engine::rpcrdma::responder::Reduced;
use engine::xdr::padded;
use nfs_wire::nfs3::{
    NFSPROC3_READ as READ, NFSPROC3_READLINK as READLINK, NFSPROC3_SYMLINK as SYMLINK,
    NFSPROC3_WRITE as WRITE,
};
use nfs_wire::{NFS_PROGRAM, NFS_V3};

/// Checks the reduced items of a reassembled call and says which DDP item its reply
/// may carry; an NFSv4 COMPOUND's go to [`super::v4`], matched against the eligible
/// items `walk` finds in its arguments (the front end's one walk over them, given by
/// the caller: `front::V4_PATHS.plan_ddp`). Returns what that walk made besides (the
/// COMPOUND's plan, opaque here: classify takes it instead of walking again); `None`
/// for every other call, and for a COMPOUND without reduced items (nothing was
/// walked).
pub fn check_call_planned<P>(
    rec: &[u8],
    reduced: &[Reduced],
    walk: impl FnOnce(&[u8]) -> (P, Eligibles),
) -> Result<(ReplyItem, Option<P>), Violation> {
    let word = |at: usize| {
        rec.get(at..at + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    let xid = word(0).unwrap_or(0);
    if reduced.is_empty() {
        // Hot path: prog, vers and proc sit at fixed offsets of every call header
        // (RFC 5531 §9); the full decode (credentials) is the RPC layer's, once.
        let item = match (word(12), word(16), word(20)) {
            (Some(NFS_PROGRAM), Some(NFS_V3), Some(READ)) => ReplyItem::ReadData,
            (Some(NFS_PROGRAM), Some(NFS_V3), Some(READLINK)) => ReplyItem::ReadlinkPath,
            (Some(NFS_PROGRAM), Some(super::v4::NFS_V4), Some(super::v4::COMPOUND)) => {
                ReplyItem::Compound
            }
            _ => ReplyItem::None,
        };
        return Ok((item, None));
    }
    let Ok((h, _)) = rpc::decode_call(rec) else {
        // A reduced item in an undecodable call can only be a violation.
        return Err(Violation { xid });
    };
    if h.prog == NFS_PROGRAM && h.vers == super::v4::NFS_V4 && h.proc_ == super::v4::COMPOUND {
        return super::v4::check_planned(rec, reduced, walk);
    }
    let nfs3 = h.prog == NFS_PROGRAM && h.vers == NFS_V3;
    let eligible = nfs3 && (h.proc_ == WRITE || h.proc_ == SYMLINK);
    if !eligible || reduced.len() != 1 || !ends_call(rec, reduced[0]) {
        return Err(Violation { xid });
    }
    Ok((ReplyItem::None, None))
}

/// The reduced item is the call's last: it starts right after a length word that
/// matches it and, with its pad, ends the record (R8166-52, R8166-54).
fn ends_call(rec: &[u8], r: Reduced) -> bool {
    let pos = r.position as usize;
    let Some(word) = pos.checked_sub(4).and_then(|at| rec.get(at..pos)) else {
        return false;
    };
    let declared = u32::from_be_bytes([word[0], word[1], word[2], word[3]]) as usize;
    let sent = r.len as usize;
    let len_ok = sent == declared || sent == padded(declared);
    len_ok && pos + padded(declared) == rec.len()
}

/// `check_call_planned` of a call that is not a COMPOUND with reduced items (tests:
/// a COMPOUND's reduced items then match nothing).
#[cfg(test)]
pub fn check_call(rec: &[u8], reduced: &[Reduced]) -> Result<ReplyItem, Violation> {
    check_call_planned(rec, reduced, |_| ((), Eligibles::default())).map(|(item, _)| item)
}

/// fattr3 on the wire (RFC 1813 §2.6).
#[cfg(test)]
const FATTR3_LEN: usize = 84;

/// Test oracle: where the DDP-eligible result's data lies in an encoded reply
/// (starting at the XID), or `None` when the reply has no such item (an error arm),
/// found by reading the reply. The server never does this: the encoder notes it
/// (`crate::ddp::note`), and the tests hold the note to what this walk finds.
#[cfg(test)]
pub fn reply_data(item: ReplyItem, reply: &[u8]) -> Option<std::ops::Range<usize>> {
    use engine::rpc::{Accept, ReplyStatus};
    use engine::xdr::XdrReader;
    if !matches!(item, ReplyItem::ReadData | ReplyItem::ReadlinkPath) {
        return None;
    }
    let (_, status, at) = rpc::decode_reply(reply).ok()?;
    if status != ReplyStatus::Accepted(Accept::Success) {
        return None;
    }
    let mut r = XdrReader::new(reply);
    r.skip(at).ok()?;
    if r.u32().ok()? != 0 {
        return None; // NFS error: no data arm
    }
    if r.bool().ok()? {
        r.skip(FATTR3_LEN).ok()?;
    }
    if item == ReplyItem::ReadData {
        r.u32().ok()?; // count
        r.u32().ok()?; // eof
    }
    let len = r.u32().ok()? as usize;
    let start = r.position();
    (start + len <= reply.len()).then_some(start..start + len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::rpc::{write_accepted, write_call, Accept, Cred};
    use engine::xdr::XdrWriter;

    fn call(proc_: u32, args: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 256 + args.len()];
        let mut w = XdrWriter::new(&mut b);
        write_call(&mut w, 9, NFS_PROGRAM, NFS_V3, proc_, &Cred::None).unwrap();
        let n = w.position();
        b.truncate(n);
        b.extend_from_slice(args);
        b
    }

    /// WRITE args with `len` data bytes (plus pad) at the end; returns the record and
    /// the data position.
    fn write_args(len: usize) -> (Vec<u8>, u32) {
        let mut a = Vec::new();
        a.extend(8u32.to_be_bytes());
        a.extend([1u8; 8]);
        a.extend(0u64.to_be_bytes());
        a.extend((len as u32).to_be_bytes());
        a.extend(0u32.to_be_bytes());
        a.extend((len as u32).to_be_bytes());
        let rec = call(WRITE, &a);
        let pos = rec.len() as u32;
        let mut rec = rec;
        rec.resize(rec.len() + padded(len), 7);
        (rec, pos)
    }

    #[test]
    fn r8166_52_write_chunk_of_item_length_or_item_plus_pad_is_accepted_others_not() {
        let (rec, position) = write_args(5001);
        for (len, ok) in [(5001u32, true), (5004, true), (5002, false), (5000, false)] {
            let got = check_call(&rec, &[Reduced { position, len }]);
            assert_eq!(got.is_ok(), ok, "{len}");
        }
    }

    #[test]
    fn r8166_59_r8267_01_reducing_a_lookup_name_is_garbage_args() {
        let mut a = Vec::new();
        a.extend(8u32.to_be_bytes());
        a.extend([1u8; 8]);
        a.extend(4u32.to_be_bytes());
        a.extend(*b"name");
        let rec = call(3, &a);
        let position = (rec.len() - 4) as u32;
        assert_eq!(
            check_call(&rec, &[Reduced { position, len: 4 }]),
            Err(Violation { xid: 9 })
        );
    }

    #[test]
    fn r8267_10_other_programs_never_take_chunks() {
        let mut b = vec![0u8; 256];
        let mut w = XdrWriter::new(&mut b);
        write_call(&mut w, 5, 100227, 3, 1, &Cred::None).unwrap();
        let n = w.position();
        b.truncate(n);
        b.extend(4u32.to_be_bytes());
        b.extend([0u8; 4]);
        let position = (b.len() - 4) as u32;
        assert!(check_call(&b, &[Reduced { position, len: 4 }]).is_err());
    }

    /// R8166-58 / R8267-01 (server side), over every NFSv3 procedure and the other
    /// programs and versions a client may send: a reduced argument is accepted only for
    /// NFSv3 WRITE and SYMLINK, and only READ and READLINK replies may use a write chunk.
    #[test]
    fn r8166_58_r8267_01_only_eligible_items_are_ever_taken_from_or_put_in_chunks() {
        let rpc_call = |prog: u32, vers: u32, proc_: u32| {
            let mut b = vec![0u8; 256];
            let mut w = XdrWriter::new(&mut b);
            write_call(&mut w, 9, prog, vers, proc_, &Cred::None).unwrap();
            let n = w.position();
            b.truncate(n);
            // Whatever the procedure: a trailing opaque that looks reducible.
            b.extend(8u32.to_be_bytes());
            b.extend([b'x'; 8]);
            b
        };
        let mut calls = vec![];
        for proc_ in 0..=21 {
            calls.push((NFS_PROGRAM, NFS_V3, proc_));
        }
        for proc_ in 0..=18 {
            calls.push((NFS_PROGRAM, 2, proc_)); // NFSv2: not served
        }
        for proc_ in 0..=5 {
            calls.push((100005, 3, proc_)); // MOUNT
        }
        calls.extend([
            (100003, 4, 1),
            (100227, 3, 1),
            (100227, 3, 2),
            (100021, 4, 7),
        ]);
        for (prog, vers, proc_) in calls {
            let rec = rpc_call(prog, vers, proc_);
            let position = (rec.len() - 8) as u32;
            let eligible_arg = prog == NFS_PROGRAM && vers == 3 && (proc_ == 7 || proc_ == 10);
            let got = check_call(&rec, &[Reduced { position, len: 8 }]);
            assert_eq!(got.is_ok(), eligible_arg, "{prog} v{vers} proc {proc_}");
            let item = check_call(&rec, &[]).unwrap();
            let want = match (prog, vers, proc_) {
                (NFS_PROGRAM, 3, 6) => ReplyItem::ReadData,
                (NFS_PROGRAM, 3, 5) => ReplyItem::ReadlinkPath,
                // RFC 8267 §6.4.1: a COMPOUND's READ/READLINK results are located
                // when it has run (see `ulb::v4`).
                (NFS_PROGRAM, 4, 1) => ReplyItem::Compound,
                _ => ReplyItem::None,
            };
            assert_eq!(item, want, "{prog} v{vers} proc {proc_}");
        }
    }

    #[test]
    fn a_chunk_not_at_the_end_or_two_chunks_are_violations() {
        let (rec, position) = write_args(8);
        assert!(check_call(
            &rec,
            &[Reduced {
                position: position - 4,
                len: 8
            }]
        )
        .is_err());
        let two = [Reduced { position, len: 8 }, Reduced { position, len: 8 }];
        assert!(check_call(&rec, &two).is_err());
    }

    #[test]
    fn read_and_readlink_replies_locate_their_data() {
        assert_eq!(check_call(&call(READ, &[]), &[]), Ok(ReplyItem::ReadData));
        assert_eq!(
            check_call(&call(READLINK, &[]), &[]),
            Ok(ReplyItem::ReadlinkPath)
        );
        assert_eq!(check_call(&call(1, &[]), &[]), Ok(ReplyItem::None));
        let mut b = vec![0u8; 512];
        let mut w = XdrWriter::new(&mut b);
        write_accepted(&mut w, 3, Accept::Success).unwrap();
        w.u32(0).unwrap();
        w.bool(true).unwrap();
        w.opaque_fixed(&[0u8; FATTR3_LEN]).unwrap();
        w.u32(5).unwrap();
        w.bool(true).unwrap();
        w.opaque_var(b"hello").unwrap();
        let n = w.position();
        let at = n - 8;
        assert_eq!(reply_data(ReplyItem::ReadData, &b[..n]), Some(at..at + 5));
        // An error arm carries nothing.
        let mut e = vec![0u8; 64];
        let mut w = XdrWriter::new(&mut e);
        write_accepted(&mut w, 3, Accept::Success).unwrap();
        w.u32(70).unwrap();
        w.bool(false).unwrap();
        let n = w.position();
        assert_eq!(reply_data(ReplyItem::ReadData, &e[..n]), None);
        // Truncated replies never produce an out-of-range item.
        for k in 0..b.len().min(200) {
            if let Some(r) = reply_data(ReplyItem::ReadData, &b[..k]) {
                assert!(r.end <= k);
            }
        }
    }
}
