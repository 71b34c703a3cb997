//! `bench stall`: a hostile RPC-over-RDMA peer, to check the gateway's send timeout
//! (`rdma.send_timeout_s`) and its starvation reclaim (`rdma.stall_reclaim_ms`) on a
//! real fabric. It connects with the provider's defaults (on verbs its CM REQ asks for
//! `rnr_retry_count` 7, which makes the gateway's QP retry RNR NAKs for ever), posts no
//! Receive at all, sends `--calls` calls as RDMA_MSGs (within the initial credit the
//! gateway's posted Receives allow) and then only watches the connection: the
//! gateway's reply Sends meet RNR NAKs and never complete. The calls are NULLs, or:
//!
//! - `--read FILE`: 1 MiB READs of that file, each offering a 1 MiB write chunk (RFC
//!   8267 §4.3: READ data is placed by the responder's RDMA Writes, then the reply is
//!   Sent). The Writes land in our memory at the HCA (they need no Receive), but the
//!   gateway keeps each reply's 1 MiB pool buffer until the reply's Send completes, so
//!   a few such peers hold every large buffer of a reactor.
//! - `--write FILE`: 1 MiB FILE_SYNC WRITEs whose data is a 1 MiB read chunk (RFC 8267
//!   §4.4), to see what the gateway's RDMA Reads meet on a real fabric from a peer
//!   whose process does nothing more (on verbs its HCA answers them); with
//!   `--deregister` the area is deregistered once the calls are posted, so the Reads
//!   meet an invalid key.
//!
//! Exits 0 once the gateway closes the connection within `--wait-s` (printing how long
//! that took after the calls were sent), 1 otherwise.

use crate::client::{bench_cred, Conn};
use crate::rdma::open_fabric;
use crate::transport::{Provider, Target};
use anyhow::{bail, Context};
use engine::fabric::{
    access, CmEvent, Completion, Op, Qp, QpCaps, SendWr, Sge, WcOpcode, WcStatus,
};
use engine::rpcrdma::wire::{self, Chunks, Fixed, ReadSegment, Segment};
use engine::xdr::XdrWriter;
use nfs_wire::nfs3::FILE_SYNC;
use nfs_wire::v3call::{self, Call};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct StallArgs {
    /// The gateway: rdma://HOST:PORT.
    #[arg(long)]
    pub target: String,
    #[arg(long, value_enum, default_value = "soft")]
    pub provider: Provider,
    /// Calls sent before stalling (1..=32).
    #[arg(long, default_value_t = 8)]
    pub calls: u32,
    /// Seconds to wait for the gateway to close the connection.
    #[arg(long, default_value_t = 60)]
    pub wait_s: u64,
    /// Send 1 MiB READs (write chunk of 1 MiB) of this file of `--export`, at least
    /// 1 MiB long, instead of NULLs. Found by MOUNT and LOOKUP over a separate,
    /// well-behaved connection first.
    #[arg(long, value_name = "FILE")]
    pub read: Option<String>,
    /// Send 1 MiB FILE_SYNC WRITEs (data in a read chunk of 1 MiB) to this file of
    /// `--export` instead (it must exist).
    #[arg(long, value_name = "FILE", conflicts_with = "read")]
    pub write: Option<String>,
    /// With `--write`: deregister the memory the read chunks point at once the calls
    /// are posted.
    #[arg(long, requires = "write")]
    pub deregister: bool,
    /// The export `--read` and `--write` look the file up in; default: the server's
    /// only export (MOUNT EXPORT).
    #[arg(long)]
    pub export: Option<String>,
}

/// Bytes per message slot in the registered area.
const SLOT: usize = 512;
const MAX_CALLS: u32 = 32;
/// READ and WRITE size, and the chunk every such call offers (one area shared by all:
/// its contents do not matter, only that the gateway's Writes and Reads have one).
const MIB: usize = 1 << 20;

/// A NULL call of the NFS program: the 7-word RDMA_MSG header (three empty chunk
/// lists), then the RPC CALL with AUTH_NONE.
fn null_call(xid: u32) -> Vec<u8> {
    [xid, 1, 8, 0, 0, 0, 0, xid, 0, 2, 100_003, 3, 0, 0, 0, 0, 0]
        .iter()
        .flat_map(|w: &u32| w.to_be_bytes())
        .collect()
}

/// What the calls are.
#[derive(Clone, Copy)]
enum Kind {
    Null,
    Read,
    Write,
}

/// A 1 MiB NFSv3 READ (`Kind::Read`) or FILE_SYNC WRITE (`Kind::Write`) at `off` as an
/// RDMA_MSG whose chunk points at `MIB` bytes at `addr` (`rkey`). READ: a write list
/// of one chunk of one segment (RFC 8267 §4.3: the READ data goes in a write chunk, the
/// rest of the reply inline). WRITE: one read chunk at the position of the data item,
/// after its length word (RFC 8267 §4.4, RFC 8166 §3.5.3: the data is removed from
/// the inline stream).
fn io_call(
    kind: Kind,
    xid: u32,
    fh: &[u8],
    off: u64,
    rkey: u32,
    addr: u64,
) -> anyhow::Result<Vec<u8>> {
    let seg = Segment {
        handle: rkey,
        length: MIB as u32,
        offset: addr,
    };
    let mut rpc = vec![0u8; SLOT];
    let end = match kind {
        Kind::Read => v3call::encode(
            &mut rpc,
            xid,
            &bench_cred(),
            &Call::Read(fh, off, MIB as u32),
        )?,
        _ => v3call::encode_write_reduced(
            &mut rpc,
            xid,
            &bench_cred(),
            (fh, off, MIB as u32),
            FILE_SYNC,
        )?,
    };
    // `rpc` starts with 4 bytes left for a record mark.
    let rpc = &rpc[4..end];
    let mut c = Chunks::default();
    match kind {
        Kind::Read => c.push_write_chunk(&[seg]),
        _ => c.reads.push(ReadSegment {
            position: rpc.len() as u32,
            seg,
        }),
    }
    let mut out = vec![0u8; SLOT];
    let fixed = Fixed {
        xid,
        vers: wire::VERSION,
        credit: MAX_CALLS,
        proc_: wire::RDMA_MSG,
    };
    let hdr = wire::encode_msg(&mut XdrWriter::new(&mut out), fixed, &c)?;
    anyhow::ensure!(hdr + rpc.len() <= SLOT, "call longer than a slot");
    out[hdr..hdr + rpc.len()].copy_from_slice(rpc);
    out.truncate(hdr + rpc.len());
    Ok(out)
}

/// MOUNT `export` and LOOKUP `name` over a separate, ordinary connection; the file
/// handle and its size.
fn find_file(target: &Target, export: Option<&str>, name: &str) -> anyhow::Result<(Vec<u8>, u64)> {
    let mut c = Conn::connect(target).context("the lookup connection")?;
    let export = crate::exports::choose(export, || c.exports())?;
    let root = c.mount(&export)?;
    let fh = c
        .lookup(&root, name)?
        .with_context(|| format!("{name}: no such file in {export}"))?;
    let size = c.size(&fh)?;
    Ok((fh, size))
}

pub fn main(a: StallArgs) -> anyhow::Result<()> {
    if !(1..=MAX_CALLS).contains(&a.calls) {
        bail!("--calls must be 1..={MAX_CALLS}");
    }
    let target = Target::parse(&a.target, a.provider)?;
    let Target::Rdma { addr, provider } = target else {
        bail!("--target must be rdma://HOST:PORT");
    };
    let (kind, name) = match (&a.read, &a.write) {
        (Some(n), _) => (Kind::Read, Some(n)),
        (_, Some(n)) => (Kind::Write, Some(n)),
        _ => (Kind::Null, None),
    };
    let file = match name {
        Some(name) => {
            let (fh, size) = find_file(&target, a.export.as_deref(), name)?;
            if size < MIB as u64 && matches!(kind, Kind::Read) {
                bail!("{name} is {size} bytes: --read needs a file of at least 1 MiB");
            }
            Some((fh, (size / MIB as u64).max(1)))
        }
        None => None,
    };
    // Declared before the fabric, so dropped after it (reverse declaration order).
    // Message slots, and apart (so `--deregister` leaves our Sends' memory alone) the
    // 1 MiB every call's chunk points at.
    let mut mem = vec![0u8; MAX_CALLS as usize * SLOT];
    let mut data = vec![0u8; MIB];
    let mut f = open_fabric(provider).context("opening the RDMA provider")?;
    // SAFETY: `mem` and `data` outlive every use of their registrations: the fabric
    // (and with it the QP) is dropped before them, and they are never resized.
    let mr = unsafe { f.register(mem.as_mut_ptr(), mem.len(), access::LOCAL_WRITE)? };
    // SAFETY: as above, for `data`.
    let dmr = unsafe {
        f.register(
            data.as_mut_ptr(),
            data.len(),
            access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
        )?
    };
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
        let xid = 0x5a11_0000 + k;
        let msg = match &file {
            None => null_call(xid),
            // Spread over the file's whole MiBs (the data is never looked at).
            Some((fh, mibs)) => io_call(
                kind,
                xid,
                fh,
                (u64::from(k) % mibs) << 20,
                dmr.rkey,
                dmr.addr,
            )?,
        };
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
        "stall: {} {} sent to {addr} over {}, no Receive posted; waiting up to {} s for the gateway to close",
        a.calls,
        match (kind, name) {
            (Kind::Read, Some(n)) => format!("1 MiB READs of {n} (1 MiB write chunks)"),
            (Kind::Write, Some(n)) => format!("1 MiB WRITEs to {n} (1 MiB read chunks)"),
            _ => "NULL calls".into(),
        },
        f.name(),
        a.wait_s
    );
    let mut registered = true;
    if a.deregister {
        // Our Sends are posted; the calls may not even have arrived. The gateway's
        // Reads of the chunks now meet an invalid key.
        f.deregister(&dmr);
        registered = false;
        println!("stall: the read chunks' memory deregistered");
    }
    let deadline = sent + Duration::from_secs(a.wait_s);
    let mut cq = [Completion {
        wr_id: 0,
        qp: Qp(0),
        status: WcStatus::Success,
        opcode: WcOpcode::Recv,
        byte_len: 0,
        invalidated: None,
        vendor_err: 0,
    }; 16];
    while Instant::now() < deadline {
        if let Some(CmEvent::Disconnected { .. }) = f.poll_cm() {
            println!(
                "stall: the gateway closed the connection {:.1} s after the calls",
                sent.elapsed().as_secs_f64()
            );
            f.release(qp);
            f.deregister(&mr);
            if registered {
                f.deregister(&dmr);
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use engine::rpcrdma::wire::{decode, Header, Limits};
    use engine::xdr::XdrReader;

    /// Decodes one of our messages as the gateway does: the header's chunk lists and
    /// the RPC call (procedure, then the arguments' file handle, offset and count).
    fn parse(msg: &[u8]) -> (Chunks, u32, Vec<u8>, u64, u32, usize) {
        let mut c = Chunks::with_limits(&Limits::default());
        let Ok(Header::Msg { payload_at, .. }) = decode(msg, &Limits::default(), &mut c) else {
            panic!("not an RDMA_MSG");
        };
        let rpc = &msg[payload_at..];
        let (call, at) = engine::rpc::decode_call(rpc).expect("an RPC call");
        let mut r = XdrReader::new(&rpc[at..]);
        let fh = r.opaque_var(64).unwrap().to_vec();
        let (off, count) = (r.u64().unwrap(), r.u32().unwrap());
        (c, call.proc_, fh, off, count, rpc.len())
    }

    #[test]
    fn a_read_offers_one_write_chunk_of_a_mib() {
        let m = io_call(Kind::Read, 7, &[9u8; 28], 3 << 20, 0x1234, 0x7000).unwrap();
        let (c, proc_, fh, off, count, _) = parse(&m);
        assert_eq!(
            (proc_, fh, off, count),
            (6, vec![9u8; 28], 3 << 20, MIB as u32)
        );
        assert!(c.reads.is_empty() && c.reply_chunk().is_none());
        let seg = Segment {
            handle: 0x1234,
            length: MIB as u32,
            offset: 0x7000,
        };
        assert_eq!((c.write_chunks.len(), c.write_chunk(0)), (1, &[seg][..]));
    }

    #[test]
    fn a_write_carries_its_data_as_a_read_chunk_at_the_end_of_the_call() {
        let m = io_call(Kind::Write, 8, &[5u8; 28], 1 << 20, 0x99, 0x8000).unwrap();
        let (c, proc_, _, off, count, len) = parse(&m);
        assert_eq!((proc_, off, count), (7, 1 << 20, MIB as u32));
        assert!(c.write_chunks.is_empty());
        let seg = Segment {
            handle: 0x99,
            length: MIB as u32,
            offset: 0x8000,
        };
        // RFC 8166 §3.5.3: the position is where the data item was removed (after its
        // length word), which is the end of the inline call.
        assert_eq!(c.reads.len(), 1);
        assert_eq!((c.reads[0].position as usize, c.reads[0].seg), (len, seg));
        assert_eq!(
            &m[m.len() - 4..],
            &(MIB as u32).to_be_bytes(),
            "the data's length"
        );
    }
}
