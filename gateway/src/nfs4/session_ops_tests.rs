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
    call_from(h, conn, "127.0.0.1:700", ops, n)
}

/// `call` from the client address `from`.
fn call_from(
    h: &H,
    conn: ConnRef,
    from: &str,
    ops: &dyn Fn(&mut XdrWriter) -> XdrResult<()>,
    n: u32,
) -> Vec<u8> {
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
        client: from.parse().unwrap(),
        cred: Cred::Sys(AuthSys::new(0, 0, &[])),
        conn: Some(conn),
        fence: None,
    };
    let mut out = vec![0u8; 1 << 16];
    let mut w = XdrWriter::new(&mut out);
    assert_eq!(serve(&ctx, &h.state, 1, &args, &mut w), Outcome::Done);
    let len = w.position();
    out.truncate(len);
    out
}

/// The first result's status and a reader after it.
fn first(rep: &[u8]) -> (Nfsstat4, XdrReader<'_>) {
    let mut r = XdrReader::new(rep);
    r.u32().unwrap();
    r.opaque_var(64).unwrap();
    r.u32().unwrap();
    r.u32().unwrap();
    let st = Nfsstat4::decode(&mut r).unwrap();
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
) -> (Nfsstat4, [u8; 16], u32) {
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

fn bind_back(h: &H, conn: ConnRef, sid: [u8; 16]) -> Nfsstat4 {
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

/// EXCHANGE_ID of `owner` from `from`; the client id.
fn exchange_from(h: &H, from: &str, owner: &[u8]) -> u64 {
    let rep = call_from(
        h,
        rdma(1),
        from,
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

/// A fore channel as the Linux client asks it (64 slots).
const LINUX: [u32; 6] = [0, 1 << 20, 1 << 20, 4096, 16, 64];
/// Every fore-channel value at 2^32-1.
const GREEDY: [u32; 6] = [u32::MAX; 6];

/// CREATE_SESSION (sequence 1) from `from` with fore channel `fore`; the status
/// and, on success, the session id and ca_maxrequests granted.
fn create_from(h: &H, from: &str, clientid: u64, fore: [u32; 6]) -> (Nfsstat4, [u8; 16], u32) {
    let rep = call_from(
        h,
        rdma(1),
        from,
        &|w| {
            w.u32(OP_CREATE_SESSION)?;
            w.u64(clientid)?;
            w.u32(1)?;
            w.u32(0)?;
            for v in fore {
                w.u32(v)?;
            }
            w.u32(0)?; // no ca_rdma_ird
            for v in [0, 4068, 4068, 0, 2, 1, 0] {
                w.u32(v)?;
            }
            w.u32(0x4000_0000)?;
            w.u32(1)?;
            w.u32(0)
        },
        1,
    );
    let (st, mut r) = first(&rep);
    if st != NFS4_OK {
        return (st, [0; 16], 0);
    }
    let mut sid = [0u8; 16];
    sid.copy_from_slice(r.opaque_fixed(16).unwrap());
    r.skip(8 + 5 * 4).unwrap();
    (st, sid, r.u32().unwrap())
}

/// SEQUENCE alone on `slot`; its status.
fn sequence_status(h: &H, sid: [u8; 16], seq: u32, slot: u32) -> Nfsstat4 {
    let rep = call(
        h,
        rdma(1),
        &|w| {
            w.u32(OP_SEQUENCE)?;
            w.opaque_fixed(&sid)?;
            w.u32(seq)?;
            w.u32(slot)?;
            w.u32(slot)?;
            w.bool(false)
        },
        1,
    );
    first(&rep).0
}

/// RFC 8881 §18.36.3: 130 client owners asking every fore-channel value at 2^32-1
/// and never coming back, from one address or from 130, do not lock new clients
/// out: a fresh client gets a session with slots at once and uses it, and a client
/// that was there before keeps working.
#[test]
fn r8881_abandoned_greedy_sessions_do_not_lock_out_new_clients() {
    for spread in [false, true] {
        let h = harness();
        let old = exchange_from(&h, "127.0.2.1:800", b"old");
        let (st, old_sid, _) = create_from(&h, "127.0.2.1:800", old, LINUX);
        assert_eq!(st, NFS4_OK);
        for n in 0..130u32 {
            let from = if spread {
                format!("127.1.{}.{}:900", n / 256, n % 256 + 1)
            } else {
                "127.1.0.1:900".to_string()
            };
            let id = exchange_from(&h, &from, format!("greedy-{n}").as_bytes());
            let (st, _, slots) = create_from(&h, &from, id, GREEDY);
            assert_eq!(st, NFS4_OK, "attacker {n}");
            assert!((1..=MAX_SLOTS).contains(&slots));
        }
        let fresh = exchange_from(&h, "127.0.2.2:800", b"fresh");
        let (st, sid, slots) = create_from(&h, "127.0.2.2:800", fresh, LINUX);
        assert_eq!(st, NFS4_OK, "a new client starts (spread {spread})");
        assert!(slots >= 8, "with room to work: {slots} slots");
        for seq in 1..=3 {
            assert_eq!(sequence_status(&h, sid, seq, slots - 1), NFS4_OK);
            assert_eq!(sequence_status(&h, old_sid, seq, 0), NFS4_OK);
        }
    }
}

/// RFC 8881 §2.4, §2.10.3: client ids and session ids come from a CSPRNG: not a
/// counter (consecutive ids far apart, high halves differ, every byte of a session
/// id varies), and the session id another client would have under the old layout
/// (client id, boot, counter, each one off one's own) names no session:
/// NFS4ERR_BADSESSION.
#[test]
fn r8881_client_and_session_ids_are_unguessable() {
    let h = harness();
    let mut ids = Vec::new();
    let mut sids = Vec::new();
    for n in 0..32u32 {
        let id = exchange_from(&h, "127.0.2.3:800", format!("c{n}").as_bytes());
        let (st, sid, _) = create_from(&h, "127.0.2.3:800", id, LINUX);
        assert_eq!(st, NFS4_OK);
        ids.push(id);
        sids.push(sid);
    }
    for w in ids.windows(2) {
        let gap = w[1].wrapping_sub(w[0]).min(w[0].wrapping_sub(w[1]));
        assert!(gap > 1 << 32, "{:x} then {:x}", w[0], w[1]);
    }
    let highs: std::collections::HashSet<u32> = ids.iter().map(|i| (i >> 32) as u32).collect();
    assert_eq!(highs.len(), ids.len(), "high halves all differ");
    for b in 0..16 {
        let vals: std::collections::HashSet<u8> = sids.iter().map(|s| s[b]).collect();
        assert!(vals.len() > 1, "session id byte {b} never changes");
    }
    // Victim then attacker, as a sequential server would number them.
    let victim = exchange_from(&h, "127.0.2.4:800", b"victim");
    let attacker = exchange_from(&h, "127.0.2.5:800", b"attacker");
    let (_, vsid, _) = create_from(&h, "127.0.2.4:800", victim, LINUX);
    let (_, asid, _) = create_from(&h, "127.0.2.5:800", attacker, LINUX);
    assert_eq!(sequence_status(&h, vsid, 1, 0), NFS4_OK);
    let mut guesses = Vec::new();
    for d in 1..=4u32 {
        let mut g = asid;
        let id = u64::from_be_bytes(asid[..8].try_into().unwrap()).wrapping_sub(1);
        g[..8].copy_from_slice(&id.to_be_bytes());
        let n = u32::from_be_bytes(asid[12..].try_into().unwrap()).wrapping_sub(d);
        g[12..].copy_from_slice(&n.to_be_bytes());
        guesses.push(g);
        let mut g = asid;
        g[15] = g[15].wrapping_sub(d as u8);
        guesses.push(g);
        let mut g = vsid;
        g[15] = g[15].wrapping_add(d as u8);
        guesses.push(g);
    }
    for g in guesses {
        assert_ne!(g, vsid, "a guess found the victim's session");
        assert_eq!(sequence_status(&h, g, 1, 0), NFS4ERR_BADSESSION);
    }
    assert_eq!(sequence_status(&h, vsid, 2, 0), NFS4_OK, "the victim's own");
}
