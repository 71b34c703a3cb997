//! The back-channel parts of the session operations over RPC-over-RDMA (RFC 8267 §6,
//! RFC 8167): CREATE_SESSION with CONN_BACK_CHAN and BIND_CONN_TO_SESSION bind an
//! RDMA connection; a session offered no back channel gets none (and no delegations);
//! a back channel too small for CB_RECALL is refused; a closed back channel is
//! forgotten and reported with SEQ4_STATUS_CB_PATH_DOWN until the client binds again.

use super::*;
use crate::backend::memory::MemoryBackend;
use crate::config::{Access, Cidr, Squash};
use crate::export::{Export, Exports};
use crate::fs::{ExportRoot, FileModel};
use crate::mount::MountTable;
use crate::nfs3::{Ctx, Outcome};
use crate::nfs4::callback::{self, recall_record_len};
use crate::nfs4::ops::*;
use crate::nfs4::{serve, ConnKind, ConnRef};
use crate::state::recall::Job;
use crate::state::State;
use engine::rpc::{AuthSys, Cred};
use engine::xdr::{XdrReader, XdrResult, XdrWriter};
use std::sync::Arc;

struct H {
    model: FileModel,
    exports: Exports,
    mounts: MountTable,
    state: State,
    _dir: tempfile::TempDir,
}

fn harness() -> H {
    let dir = tempfile::tempdir().unwrap();
    let export = Export {
        id: 0,
        path: "/".into(),
        prefix: String::new(),
        clients: vec![Cidr::parse("127.0.0.0/8").unwrap()],
        access: Access::Rw,
        squash: Squash::None,
        anon_uid: 65534,
        anon_gid: 65534,
    };
    let roots = [ExportRoot {
        id: 0,
        prefix: String::new(),
    }];
    let model = FileModel::open(Arc::new(MemoryBackend::new()), dir.path(), &roots).unwrap();
    H {
        model,
        exports: Exports::new(vec![export]),
        mounts: MountTable::new(),
        state: State::new(),
        _dir: dir,
    }
}

fn rdma(slot: u32) -> ConnRef {
    ConnRef {
        reactor: 0,
        kind: ConnKind::Rdma(engine::rdma::server::ConnId::from_raw(slot, 1)),
    }
}

/// Runs a COMPOUND of `ops` (encoded after the header) arriving on `conn`; returns
/// the COMPOUND status and a reader at the first result.
fn call(h: &H, conn: ConnRef, ops: &dyn Fn(&mut XdrWriter) -> XdrResult<()>, n: u32) -> Vec<u8> {
    let mut args = vec![0u8; 4096];
    let mut w = XdrWriter::new(&mut args);
    w.opaque_var(b"t").unwrap();
    w.u32(1).unwrap();
    w.u32(n).unwrap();
    ops(&mut w).unwrap();
    let len = w.position();
    args.truncate(len);
    let ctx = Ctx {
        model: &h.model,
        exports: &h.exports,
        mounts: &h.mounts,
        client: "127.0.0.1:700".parse().unwrap(),
        cred: Cred::Sys(AuthSys::new(0, 0, &[])),
        conn: Some(conn),
    };
    let mut out = vec![0u8; 1 << 16];
    let mut w = XdrWriter::new(&mut out);
    assert_eq!(serve(&ctx, &h.state, 1, &args, &mut w), Outcome::Done);
    let len = w.position();
    out.truncate(len);
    out
}

/// The first result's status and a reader after it.
fn first(rep: &[u8]) -> (u32, XdrReader<'_>) {
    let mut r = XdrReader::new(rep);
    r.u32().unwrap();
    r.opaque_var(64).unwrap();
    r.u32().unwrap();
    r.u32().unwrap();
    let st = r.u32().unwrap();
    (st, r)
}

fn exchange_id(h: &H, conn: ConnRef, owner: &'static [u8]) -> u64 {
    let rep = call(
        h,
        conn,
        &|w| {
            w.u32(OP_EXCHANGE_ID)?;
            w.opaque_fixed(&[1; 8])?;
            w.opaque_var(owner)?;
            w.u32(0)?;
            w.u32(0)?;
            w.u32(0)
        },
        1,
    );
    let (st, mut r) = first(&rep);
    assert_eq!(st, NFS4_OK);
    r.u64().unwrap()
}

/// CREATE_SESSION with `flags` and a back channel of `back_req` bytes (Linux over
/// RDMA: the inline threshold − 28), AUTH_NONE callbacks. Returns the status and,
/// on success, the session id and csr_flags.
fn create_session(
    h: &H,
    conn: ConnRef,
    clientid: u64,
    seq: u32,
    flags: u32,
    back_req: u32,
) -> (u32, [u8; 16], u32) {
    let rep = call(
        h,
        conn,
        &|w| {
            w.u32(OP_CREATE_SESSION)?;
            w.u64(clientid)?;
            w.u32(seq)?;
            w.u32(flags)?;
            for v in [0, 1 << 20, 1 << 20, 4096, 16, 8, 0] {
                w.u32(v)?;
            }
            for v in [0, back_req, 4068, 0, 2, 1, 0] {
                w.u32(v)?;
            }
            w.u32(0x4000_0000)?;
            w.u32(1)?;
            w.u32(0) // AUTH_NONE
        },
        1,
    );
    let (st, mut r) = first(&rep);
    if st != NFS4_OK {
        return (st, [0; 16], 0);
    }
    let mut sid = [0u8; 16];
    sid.copy_from_slice(r.opaque_fixed(16).unwrap());
    r.u32().unwrap();
    let flags = r.u32().unwrap();
    // The back channel attributes are the client's, echoed.
    r.skip(7 * 4).unwrap();
    assert_eq!(r.u32().unwrap(), 0, "back header pad");
    assert_eq!(r.u32().unwrap(), back_req, "back ca_maxrequestsize echoed");
    (st, sid, flags)
}

/// SEQUENCE alone; returns sr_status_flags.
fn sequence_flags(h: &H, conn: ConnRef, sid: [u8; 16], seq: u32) -> u32 {
    let rep = call(
        h,
        conn,
        &|w| {
            w.u32(OP_SEQUENCE)?;
            w.opaque_fixed(&sid)?;
            w.u32(seq)?;
            w.u32(0)?;
            w.u32(0)?;
            w.bool(false)
        },
        1,
    );
    let (st, mut r) = first(&rep);
    assert_eq!(st, NFS4_OK);
    r.skip(16 + 16).unwrap();
    r.u32().unwrap()
}

fn bind_back(h: &H, conn: ConnRef, sid: [u8; 16]) -> u32 {
    let rep = call(
        h,
        conn,
        &|w| {
            w.u32(OP_BIND_CONN_TO_SESSION)?;
            w.opaque_fixed(&sid)?;
            w.u32(0x7)?; // CDFC4_BACK_OR_BOTH
            w.bool(false)
        },
        1,
    );
    first(&rep).0
}

fn probes(h: &H) -> Vec<ConnRef> {
    std::iter::from_fn(|| h.state.delegations.inbox.pop())
        .filter_map(|j| match j {
            Job::Probe(_, info, _) => Some(info.conn),
            _ => None,
        })
        .collect()
}

/// R8167-19 / RFC 8267 §6: CREATE_SESSION with CONN_BACK_CHAN on an RDMA
/// connection binds that connection as the back channel and probes it there.
#[test]
fn r8167_19_create_session_binds_the_rdma_connection() {
    let h = harness();
    let c = rdma(3);
    let id = exchange_id(&h, c, b"rdma-client");
    let (st, sid, flags) = create_session(&h, c, id, 1, CREATE_SESSION4_FLAG_CONN_BACK_CHAN, 4068);
    assert_eq!(st, NFS4_OK);
    assert_eq!(
        flags, CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
        "back channel granted"
    );
    let info = h.state.clients.lookup_backchannel(id).expect("bound");
    assert_eq!((info.session, info.conn, info.max_request), (sid, c, 4068));
    assert_eq!(probes(&h), vec![c], "CB_NULL probe on the RDMA connection");
    assert_eq!(sequence_flags(&h, c, sid, 1) & SEQ4_STATUS_CB_PATH_DOWN, 0);
}

/// R8167-21: a client that offers no back channel (no CONN_BACK_CHAN) gets the flag
/// cleared, no binding, no probe, and so never a delegation on that session.
#[test]
fn r8167_21_no_back_channel_offered_means_no_delegations() {
    let h = harness();
    let c = rdma(4);
    let id = exchange_id(&h, c, b"no-back");
    let (st, _, flags) = create_session(&h, c, id, 1, 0, 4068);
    assert_eq!(st, NFS4_OK);
    assert_eq!(flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN, 0);
    assert!(h.state.clients.lookup_backchannel(id).is_none());
    assert!(probes(&h).is_empty(), "nothing to probe");
    assert_eq!(
        h.state.delegations.try_grant_fh(id, 1, b"fh", false),
        None,
        "no delegation without a back channel that answered"
    );
}

/// R8267-30: every callback must fit the client's back-channel ca_maxrequestsize; a
/// back channel that cannot carry our CB_RECALL is refused with NFS4ERR_TOOSMALL.
#[test]
fn r8267_30_back_channel_too_small_for_cb_recall_is_refused() {
    let h = harness();
    let c = rdma(5);
    let id = exchange_id(&h, c, b"small-back");
    let need = recall_record_len(crate::fs::FH_MAX, Some(&callback::CbSec::None)) as u32;
    assert!(need > 128 && need < 4068, "a CB_RECALL is {need} bytes");
    let flag = CREATE_SESSION4_FLAG_CONN_BACK_CHAN;
    let (st, _, _) = create_session(&h, c, id, 1, flag, need - 1);
    assert_eq!(st, NFS4ERR_TOOSMALL);
    let (st, _, _) = create_session(&h, c, id, 1, flag, need);
    assert_eq!(st, NFS4_OK, "exactly one CB_RECALL fits");
}

/// R8167-17 (the client reconnects, the server never does): the RDMA back channel
/// closes → the session forgets it and SEQUENCE reports CB_PATH_DOWN; the client's
/// BIND_CONN_TO_SESSION on its new connection binds it, clears the flag and probes.
#[test]
fn r8167_17_closed_back_channel_is_forgotten_until_rebound() {
    let h = harness();
    let (old, new) = (rdma(6), rdma(7));
    let id = exchange_id(&h, old, b"reconnects");
    let (_, sid, _) = create_session(&h, old, id, 1, CREATE_SESSION4_FLAG_CONN_BACK_CHAN, 4068);
    probes(&h);
    // Another connection closing changes nothing.
    assert!(h.state.clients.forget_conn(&rdma(99)).is_empty());
    assert_eq!(h.state.clients.forget_conn(&old), vec![id]);
    assert!(h.state.clients.lookup_backchannel(id).is_none());
    assert_ne!(
        sequence_flags(&h, new, sid, 1) & SEQ4_STATUS_CB_PATH_DOWN,
        0
    );
    assert_eq!(bind_back(&h, new, sid), NFS4_OK);
    assert_eq!(h.state.clients.lookup_backchannel(id).unwrap().conn, new);
    assert_eq!(probes(&h), vec![new]);
    assert_eq!(
        sequence_flags(&h, new, sid, 2) & SEQ4_STATUS_CB_PATH_DOWN,
        0
    );
}
