//! `bench stall`: a hostile RPC-over-RDMA peer, to check the gateway's send timeout
//! (`rdma.send_timeout_s`) on a real fabric. It connects with the provider's defaults
//! (on verbs its CM REQ asks for `rnr_retry_count` 7, which makes the gateway's QP
//! retry RNR NAKs for ever), posts no Receive at all, sends `--calls` NULL calls as
//! Short RDMA_MSGs (within the initial credit the gateway's posted Receives allow) and
//! then only watches the connection: the gateway's reply Sends meet RNR NAKs and never
//! complete. Exits 0 once the gateway closes the connection within `--wait-s`
//! (printing how long that took after the calls were sent), 1 otherwise.

use crate::rdma::open_fabric;
use crate::transport::{Provider, Target};
use anyhow::{bail, Context};
use engine::fabric::{
    access, CmEvent, Completion, Op, Qp, QpCaps, SendWr, Sge, WcOpcode, WcStatus,
};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct StallArgs {
    /// The gateway: rdma://HOST:PORT.
    #[arg(long)]
    pub target: String,
    #[arg(long, value_enum, default_value = "soft")]
    pub provider: Provider,
    /// NULL calls sent before stalling (1..=32).
    #[arg(long, default_value_t = 8)]
    pub calls: u32,
    /// Seconds to wait for the gateway to close the connection.
    #[arg(long, default_value_t = 60)]
    pub wait_s: u64,
}

/// Bytes per message slot in the registered area.
const SLOT: usize = 256;
const MAX_CALLS: u32 = 32;

/// A NULL call of the NFS program: the 7-word RDMA_MSG header (three empty chunk
/// lists), then the RPC CALL with AUTH_NONE.
fn null_call(xid: u32) -> Vec<u8> {
    [xid, 1, 8, 0, 0, 0, 0, xid, 0, 2, 100_003, 3, 0, 0, 0, 0, 0]
        .iter()
        .flat_map(|w: &u32| w.to_be_bytes())
        .collect()
}

pub fn main(a: StallArgs) -> anyhow::Result<()> {
    if !(1..=MAX_CALLS).contains(&a.calls) {
        bail!("--calls must be 1..={MAX_CALLS}");
    }
    let Target::Rdma { addr, provider } = Target::parse(&a.target, a.provider)? else {
        bail!("--target must be rdma://HOST:PORT");
    };
    // Declared before the fabric, so dropped after it (reverse declaration order).
    let mut mem = vec![0u8; MAX_CALLS as usize * SLOT];
    let mut f = open_fabric(provider).context("opening the RDMA provider")?;
    // SAFETY: `mem` outlives every use of the registration: the fabric (and with it the
    // QP) is dropped before `mem`, and the area is never resized.
    let mr = unsafe { f.register(mem.as_mut_ptr(), mem.len(), access::LOCAL_WRITE)? };
    let qp = f.connect(addr, &QpCaps::default(), &[])?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match f.poll_cm() {
            Some(CmEvent::Established { .. }) => break,
            Some(CmEvent::Rejected { .. }) => bail!("the gateway rejected the connection"),
            Some(CmEvent::Disconnected { .. }) => bail!("disconnected while connecting"),
            _ if Instant::now() > deadline => bail!("connect to {addr}: timed out"),
            _ => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    for k in 0..a.calls {
        let msg = null_call(0x5a11_0000 + k);
        let at = k as usize * SLOT;
        mem[at..at + msg.len()].copy_from_slice(&msg);
        let sge = Sge {
            addr: mr.addr + at as u64,
            len: msg.len() as u32,
            lkey: mr.lkey,
        };
        let wr = SendWr {
            wr_id: u64::from(k),
            op: Op::Send,
            sges: std::slice::from_ref(&sge),
            signaled: true,
        };
        f.post_send(qp, &[wr])
            .map_err(|e| anyhow::anyhow!("posting call {k}: {e}"))?;
    }
    let sent = Instant::now();
    println!(
        "stall: {} NULL calls sent to {addr} over {}, no Receive posted; waiting up to {} s for the gateway to close",
        a.calls,
        f.name(),
        a.wait_s
    );
    let deadline = sent + Duration::from_secs(a.wait_s);
    let mut cq = [Completion {
        wr_id: 0,
        qp: Qp(0),
        status: WcStatus::Success,
        opcode: WcOpcode::Recv,
        byte_len: 0,
        invalidated: None,
    }; 16];
    while Instant::now() < deadline {
        if let Some(CmEvent::Disconnected { .. }) = f.poll_cm() {
            println!(
                "stall: the gateway closed the connection {:.1} s after the calls",
                sent.elapsed().as_secs_f64()
            );
            f.release(qp);
            f.deregister(&mr);
            return Ok(());
        }
        // Our own Sends' completions only (verbs): no Receive is ever posted. On
        // `soft` this also does the "remote NIC" work, which fails the gateway's
        // Sends for want of a Receive instead of leaving them outstanding.
        if provider == Provider::Verbs {
            f.poll_cq(&mut cq);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    bail!("the gateway kept the connection for {} s", a.wait_s)
}
