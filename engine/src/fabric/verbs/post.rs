//! Work requests and completions: `ibv_post_send`/`ibv_post_recv` chains built from
//! the trait's types, and `ibv_wc` entries mapped back.

use crate::fabric::{Completion, Op, PostError, Qp, SendWr, Sge, WcOpcode, WcStatus};
use rdma_sys::*;
use std::ptr;

/// Reusable buffers for one `ibv_post_send` chain (no allocation once warmed up).
#[derive(Default)]
pub(super) struct Chain {
    wrs: Vec<ibv_send_wr>,
    sges: Vec<ibv_sge>,
}

// SAFETY: the raw pointers inside are only meaningful during one `post` call, which
// rebuilds them; between calls they are dangling and never read.
unsafe impl Send for Chain {}

fn sge(s: &Sge) -> ibv_sge {
    ibv_sge {
        addr: s.addr,
        length: s.len,
        lkey: s.lkey,
    }
}

fn errno_post(rc: i32) -> PostError {
    match rc {
        libc::ENOMEM => PostError::QueueFull,
        libc::EINVAL => PostError::Invalid,
        _ => PostError::NotConnected,
    }
}

impl Chain {
    /// Posts `wrs` on `qp` with one doorbell. `max_sge` is the QP's limit (checked
    /// before anything is posted).
    ///
    /// A provider may post a prefix of the chain before failing (`bad_wr`); the
    /// prefix's completions then arrive as usual. Validations that libibverbs' RC
    /// providers do (SGE count, queue space) are made here first so that in practice
    /// nothing of a refused chain was posted.
    pub fn post(&mut self, qp: *mut ibv_qp, wrs: &[SendWr], max_sge: u32) -> Result<(), PostError> {
        if wrs.is_empty() {
            return Ok(());
        }
        if wrs.iter().any(|w| w.sges.len() > max_sge as usize) {
            return Err(PostError::Invalid);
        }
        self.sges.clear();
        for w in wrs {
            self.sges.extend(w.sges.iter().map(sge));
        }
        self.wrs.clear();
        let mut at = 0usize;
        for w in wrs {
            // SAFETY: ibv_send_wr is plain data (integers, pointers, unions of them);
            // all-zero is a valid "empty" request.
            let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
            wr.wr_id = w.wr_id;
            wr.num_sge = w.sges.len() as i32;
            wr.sg_list = if w.sges.is_empty() {
                ptr::null_mut()
            } else {
                // SAFETY: `at..at+len` lies inside `self.sges`, which is not resized
                // again before the post below.
                unsafe { self.sges.as_mut_ptr().add(at) }
            };
            at += w.sges.len();
            wr.send_flags = if w.signaled {
                ibv_send_flags::IBV_SEND_SIGNALED.0
            } else {
                0
            };
            match w.op {
                Op::Send => wr.opcode = ibv_wr_opcode::IBV_WR_SEND,
                Op::SendWithInv { rkey } => {
                    wr.opcode = ibv_wr_opcode::IBV_WR_SEND_WITH_INV;
                    wr.imm_data_invalidated_rkey_union.invalidated_rkey = rkey;
                }
                Op::Write { remote_addr, rkey } => {
                    wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE;
                    wr.wr.rdma = rdma_t { remote_addr, rkey };
                }
                Op::Read { remote_addr, rkey } => {
                    wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_READ;
                    wr.wr.rdma = rdma_t { remote_addr, rkey };
                }
            }
            self.wrs.push(wr);
        }
        let n = self.wrs.len();
        let base = self.wrs.as_mut_ptr();
        for i in 0..n - 1 {
            // SAFETY: i and i+1 are < n, inside `self.wrs`.
            unsafe { (*base.add(i)).next = base.add(i + 1) };
        }
        let mut bad = ptr::null_mut();
        // SAFETY: `qp` is a live QP of this fabric; the chain and its SGE lists live in
        // `self` for the call (the provider copies them into its queue).
        let rc = unsafe { ibv_post_send(qp, base, &mut bad) };
        if rc != 0 {
            return Err(errno_post(rc));
        }
        Ok(())
    }
}

/// Posts one Receive (`sge` may be `None` for a zero-length marker).
pub(super) fn post_recv(qp: *mut ibv_qp, wr_id: u64, sge_in: Option<Sge>) -> Result<(), PostError> {
    let mut s = sge_in.as_ref().map(sge).unwrap_or(ibv_sge {
        addr: 0,
        length: 0,
        lkey: 0,
    });
    let mut wr = ibv_recv_wr {
        wr_id,
        next: ptr::null_mut(),
        sg_list: if sge_in.is_some() {
            &mut s
        } else {
            ptr::null_mut()
        },
        num_sge: sge_in.is_some() as i32,
    };
    let mut bad = ptr::null_mut();
    // SAFETY: `qp` is a live QP of this fabric; `wr` and `s` live for the call.
    let rc = unsafe { ibv_post_recv(qp, &mut wr, &mut bad) };
    if rc != 0 {
        return Err(errno_post(rc));
    }
    Ok(())
}

/// A zero-length, signaled Send (the send-queue drain marker).
pub(super) fn post_marker_send(qp: *mut ibv_qp, wr_id: u64) -> Result<(), PostError> {
    // SAFETY: all-zero ibv_send_wr is a valid empty request.
    let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
    wr.wr_id = wr_id;
    wr.opcode = ibv_wr_opcode::IBV_WR_SEND;
    wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
    let mut bad = ptr::null_mut();
    // SAFETY: `qp` is live; `wr` lives for the call.
    let rc = unsafe { ibv_post_send(qp, &mut wr, &mut bad) };
    if rc != 0 {
        return Err(errno_post(rc));
    }
    Ok(())
}

pub(super) fn status(s: ibv_wc_status::Type) -> WcStatus {
    use ibv_wc_status::*;
    match s {
        IBV_WC_SUCCESS => WcStatus::Success,
        IBV_WC_LOC_LEN_ERR => WcStatus::LocalLength,
        IBV_WC_LOC_PROT_ERR => WcStatus::LocalProtection,
        IBV_WC_REM_ACCESS_ERR => WcStatus::RemoteAccess,
        IBV_WC_REM_INV_REQ_ERR => WcStatus::RemoteInvalidRequest,
        IBV_WC_RNR_RETRY_EXC_ERR => WcStatus::ReceiverNotReady,
        IBV_WC_WR_FLUSH_ERR => WcStatus::Flushed,
        _ => WcStatus::Fatal,
    }
}

/// Maps one completion (`qp` already resolved from `qp_num`). The opcode of an error
/// completion is not defined by verbs; receive-side entries still carry the RECV bit
/// on the providers we know, anything else is reported as `Send`.
pub(super) fn completion(wc: &ibv_wc, qp: Qp) -> Completion {
    use ibv_wc_opcode::*;
    let opcode = match wc.opcode {
        IBV_WC_RDMA_WRITE => WcOpcode::Write,
        IBV_WC_RDMA_READ => WcOpcode::Read,
        o if o & IBV_WC_RECV != 0 => WcOpcode::Recv,
        _ => WcOpcode::Send,
    };
    let invalidated = if wc.wc_flags & ibv_wc_flags::IBV_WC_WITH_INV.0 != 0 {
        // SAFETY: with IBV_WC_WITH_INV the union holds the invalidated rkey.
        Some(unsafe { wc.imm_data_invalidated_rkey_union.invalidated_rkey })
    } else {
        None
    };
    Completion {
        wr_id: wc.wr_id,
        qp,
        status: status(wc.status),
        opcode,
        byte_len: wc.byte_len,
        invalidated,
        vendor_err: wc.vendor_err,
    }
}
