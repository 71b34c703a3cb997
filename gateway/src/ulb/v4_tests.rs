//! RFC 8267 §6.1 call walking and §6.4.1 result notes. Names carry checklist IDs.

use super::*;
use crate::nfs4::ops::*;
use crate::nfs4::plan::Plan;
use crate::nfs4::skip::STATEID;
use engine::rpc::{write_accepted, write_call, Cred};
use engine::xdr::XdrWriter;

/// NFS4_OK as the reply word the oracle compares.
const NFS4_OK: u32 = crate::nfs4::status::NFS4_OK.as_u32();

/// The reactor's check: the COMPOUND walked by its front end's plan.
fn check_call(rec: &[u8], reduced: &[Reduced]) -> Result<ReplyItem, Violation> {
    check_compound(rec, reduced, Plan::with_ddp)
}

/// createtype4 NF4LNK.
const NF4LNK: u32 = 5;

/// A COMPOUND call under construction: the RPC header, then COMPOUND4args.
struct C {
    b: Vec<u8>,
    nops_at: usize,
    nops: u32,
}

impl C {
    fn new() -> C {
        let mut b = vec![0u8; 256];
        let mut w = XdrWriter::new(&mut b);
        write_call(&mut w, 0x99, 100003, 4, 1, &Cred::None).unwrap();
        let n = w.position();
        b.truncate(n);
        b.extend(0u32.to_be_bytes()); // tag
        b.extend(1u32.to_be_bytes()); // minorversion
        let nops_at = b.len();
        b.extend(0u32.to_be_bytes());
        C {
            b,
            nops_at,
            nops: 0,
        }
    }
    fn w(&mut self, v: u32) -> &mut Self {
        self.b.extend(v.to_be_bytes());
        self
    }
    fn raw(&mut self, n: usize) -> &mut Self {
        self.b.extend(std::iter::repeat_n(0x11u8, n));
        self
    }
    /// An opaque; returns the data position.
    fn opaque(&mut self, d: &[u8]) -> u32 {
        self.w(d.len() as u32);
        let at = self.b.len() as u32;
        self.b.extend_from_slice(d);
        self.b.resize(self.b.len() + padded(d.len()) - d.len(), 0);
        at
    }
    fn op(&mut self, op: u32) -> &mut Self {
        self.nops += 1;
        self.w(op)
    }
    fn sequence(&mut self) -> &mut Self {
        self.op(OP_SEQUENCE).raw(16).w(1).w(0).w(0).w(0)
    }
    fn putfh(&mut self) -> u32 {
        self.op(OP_PUTFH);
        self.opaque(&[7u8; 24])
    }
    fn write(&mut self, data: &[u8]) -> u32 {
        self.op(OP_WRITE).raw(STATEID).raw(8).w(2);
        self.opaque(data)
    }
    fn getattr(&mut self) -> &mut Self {
        self.op(OP_GETATTR).w(2).w(0x10).w(0x20)
    }
    fn done(&mut self) -> Vec<u8> {
        let mut b = self.b.clone();
        b[self.nops_at..self.nops_at + 4].copy_from_slice(&self.nops.to_be_bytes());
        b
    }
}

fn red(position: u32, len: usize) -> Reduced {
    Reduced {
        position,
        len: len as u32,
    }
}

#[test]
fn r8267_12_write_data_from_a_read_chunk_is_accepted_with_or_without_pad() {
    let mut c = C::new();
    c.sequence();
    c.putfh();
    let at = c.write(&[5u8; 5001]);
    c.getattr();
    let rec = c.done();
    for (len, ok) in [(5001, true), (5004, true), (5000, false), (5002, false)] {
        let got = check_call(&rec, &[red(at, len)]);
        assert_eq!(got.is_ok(), ok, "{len}");
    }
    assert_eq!(check_call(&rec, &[red(at, 5001)]), Ok(ReplyItem::Compound));
    assert_eq!(check_call(&rec, &[]), Ok(ReplyItem::Compound));
}

/// One walk per RPC-over-RDMA COMPOUND: the chunk check hands `classify` the plan its
/// reduced items were matched against — the plan `classify` would make — and no plan
/// when nothing was walked (no reduced items) or the call broke the binding.
#[test]
fn the_chunk_checks_plan_is_the_one_classify_takes() {
    use crate::nfs4::plan::Kind;
    let check_call_planned = |rec: &[u8], reduced: &[Reduced]| {
        crate::ulb::check_call_planned(rec, reduced, Plan::with_ddp)
    };
    let mut c = C::new();
    c.sequence();
    c.putfh();
    let at = c.write(&[5u8; 300]);
    c.getattr();
    let rec = c.done();
    let (_, args_at) = engine::rpc::decode_call(&rec).unwrap();
    let (item, plan) = check_call_planned(&rec, &[red(at, 300)]).unwrap();
    assert_eq!(item, ReplyItem::Compound);
    let plan = plan.expect("planned by the check");
    assert_eq!(plan, Plan::of(&rec[args_at..]));
    assert_eq!(plan.kind, Kind::WriteGetattr);
    assert_eq!(
        check_call_planned(&rec, &[]),
        Ok((ReplyItem::Compound, None))
    );
    assert!(check_call_planned(&rec, &[red(at + 4, 296)]).is_err());
}

#[test]
fn r8267_12_two_writes_each_from_its_own_chunk_are_accepted() {
    let mut c = C::new();
    c.sequence();
    c.putfh();
    let a = c.write(&[1u8; 100]);
    let b = c.write(&[2u8; 9]);
    let rec = c.done();
    assert!(check_call(&rec, &[red(a, 100), red(b, 9)]).is_ok());
}

#[test]
fn r8267_13_create_nf4lnk_linkdata_is_eligible_its_objname_is_not() {
    let mut c = C::new();
    c.sequence();
    c.putfh();
    c.op(OP_CREATE).w(NF4LNK);
    let link = c.opaque(b"../some/target");
    let name = c.opaque(b"lnk");
    c.w(1).w(0).w(0); // createattrs: bitmap [0], no values
    c.getattr();
    let rec = c.done();
    assert!(check_call(&rec, &[red(link, 14)]).is_ok());
    assert!(check_call(&rec, &[red(link, 16)]).is_ok());
    assert_eq!(
        check_call(&rec, &[red(name, 3)]),
        Err(Violation { xid: 0x99 })
    );
    // A directory CREATE has no linkdata: its name is not eligible either.
    let mut c = C::new();
    c.sequence();
    c.putfh();
    c.op(OP_CREATE).w(2);
    let name = c.opaque(b"dir");
    c.w(0).w(0);
    let rec = c.done();
    assert!(check_call(&rec, &[red(name, 3)]).is_err());
}

#[test]
fn r8267_12_non_eligible_items_in_a_chunk_are_garbage_args() {
    // PUTFH's handle, LOOKUP's name, SETATTR values, a READ_PLUS (68) argument.
    let mut c = C::new();
    c.sequence();
    let fh = c.putfh();
    c.op(OP_LOOKUP);
    let name = c.opaque(b"name");
    c.op(OP_SETATTR).raw(STATEID).w(1).w(0x8);
    let vals = c.opaque(&[0u8; 8]);
    let rec = c.done();
    for (pos, len) in [(fh, 24), (name, 4), (vals, 8)] {
        assert!(check_call(&rec, &[red(pos, len)]).is_err(), "{pos}");
    }
    let mut c = C::new();
    c.sequence();
    c.putfh();
    c.op(68).raw(STATEID).raw(8).w(4096);
    let rec = c.done();
    let at = (rec.len() - 4) as u32;
    assert!(check_call(&rec, &[red(at, 4)]).is_err());
}

#[test]
fn r8267_26_an_operation_the_walk_cannot_skip_before_the_item_is_garbage_args() {
    let mut c = C::new();
    c.op(OP_EXCHANGE_ID).raw(40);
    let at = c.write(&[1u8; 64]);
    let rec = c.done();
    assert!(check_call(&rec, &[red(at, 64)]).is_err());
    // After the item anything may follow.
    let mut c = C::new();
    c.sequence();
    c.putfh();
    let at = c.write(&[1u8; 64]);
    c.op(OP_EXCHANGE_ID).raw(40);
    let rec = c.done();
    assert!(check_call(&rec, &[red(at, 64)]).is_ok());
}

#[test]
fn hostile_compounds_never_panic_and_never_accept_an_unwalked_item() {
    // A huge op count over a few bytes.
    let mut c = C::new();
    c.sequence();
    let at = c.write(&[1u8; 8]);
    let mut rec = c.done();
    let n_at = c.nops_at;
    rec[n_at..n_at + 4].copy_from_slice(&u32::MAX.to_be_bytes());
    assert!(
        check_call(&rec, &[red(at, 8)]).is_ok(),
        "the walk stops at the item"
    );
    let mut junk = rec.clone();
    junk.truncate(at as usize - 4);
    junk.extend(u32::MAX.to_be_bytes()); // WRITE data length near 2^32
    junk.extend([0u8; 8]);
    assert!(check_call(&junk, &[red(at, 8)]).is_err());
    // Truncated at every length: no panic, and an item past the end is never accepted.
    for k in 0..rec.len() {
        let cut = &rec[..k];
        if let Ok(item) = check_call(cut, &[red(at, 8)]) {
            assert_eq!(item, ReplyItem::Compound);
            assert!(k >= at as usize + 8);
        }
    }
    // Bitmaps and TEST_STATEID counts near 2^32.
    for op in [OP_GETATTR, OP_TEST_STATEID] {
        let mut c = C::new();
        c.op(op).w(0x4000_0001).raw(64);
        let at = c.write(&[1u8; 8]);
        let rec = c.done();
        assert!(check_call(&rec, &[red(at, 8)]).is_err());
    }
}

#[test]
fn fast_path_read_reply_locates_its_data() {
    let mut b = vec![0u8; 256];
    let mut w = XdrWriter::new(&mut b);
    write_accepted(&mut w, 3, rpc::Accept::Success).unwrap();
    w.u32(NFS4_OK).unwrap();
    w.opaque_var(b"").unwrap();
    w.u32(3).unwrap();
    w.u32(OP_SEQUENCE).unwrap();
    w.u32(NFS4_OK).unwrap();
    w.opaque_fixed(&[0u8; 16 + 20]).unwrap();
    w.u32(OP_PUTFH).unwrap();
    w.u32(NFS4_OK).unwrap();
    w.u32(OP_READ).unwrap();
    w.u32(NFS4_OK).unwrap();
    w.bool(false).unwrap();
    w.opaque_var(b"data!").unwrap();
    let n = w.position();
    let at = n - 8;
    assert_eq!(fast_read_data(&b[..n]), Some(at..at + 5).into());
    for k in 0..n {
        if let Some(Some(r)) = fast_read_data(&b[..k]).get(0) {
            assert!(r.end <= k);
        }
    }
    // A replayed READLINK, and a failed READ (its chunk must come back empty).
    let body = n - 24;
    b[body..body + 4].copy_from_slice(&OP_READLINK.to_be_bytes());
    b[body + 8..body + 12].copy_from_slice(&4u32.to_be_bytes());
    b[body + 12..body + 16].copy_from_slice(b"link");
    let l = fast_read_data(&b[..body + 16]);
    assert_eq!(l.get(0), Some(Some(body + 12..body + 16)));
    b[body..body + 4].copy_from_slice(&OP_READ.to_be_bytes());
    b[body + 4..body + 8].copy_from_slice(&10036u32.to_be_bytes());
    assert_eq!(fast_read_data(&b[..body + 8]).get(0), Some(None));
}
