//! `nfs-floor`: the floor — the least an NFSv3 server can do on this machine, as a
//! reference for the gateway's benchmarks (docs/performance.md, "Floor and peers").
//!
//! **Not a server anyone should run.** It serves one flat directory of files held in
//! memory to anyone who connects: no credential, export or permission check, no
//! persistence, constant times, one thread per connection, blocking I/O. It answers
//! only what fio's libnfs engine and `bench` send to mount, open, read and write a
//! file (MOUNT v3 MNT/EXPORT; NFSv3 NULL, GETATTR, SETATTR, LOOKUP, ACCESS, READ,
//! WRITE, CREATE, REMOVE, FSSTAT, FSINFO, PATHCONF, COMMIT); anything else is
//! PROC_UNAVAIL. What it still checks keeps the machine safe, not the data: a record is
//! at most `MAX_RECORD` bytes and a file at most 16 GiB, and a malformed call is
//! GARBAGE_ARGS (RFC 5531 §9) or closes the connection.
//!
//! Usage: `nfs-floor [--listen ADDR]` (default 127.0.0.1:2049; port 0 picks one). It
//! prints `listening on ADDR` when ready. NFS and MOUNT share the port, so libnfs takes
//! `nfs://127.0.0.1/?version=3&nfsport=P&mountport=P`. tools/perf/compare.sh runs it
//! beside the gateway and nfs-ganesha (TARGETS="floor gateway ganesha").

mod nfs;
mod store;

use std::io::{self, BufReader, IoSlice, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;

/// A WRITE of 1 MiB plus its headers fits with room to spare.
const MAX_RECORD: usize = 4 << 20;

fn main() -> std::process::ExitCode {
    let mut args = std::env::args().skip(1);
    let mut listen = "127.0.0.1:2049".to_string();
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--listen", Some(v)) => listen = v,
            _ => {
                eprintln!("usage: nfs-floor [--listen ADDR]");
                return std::process::ExitCode::from(2);
            }
        }
    }
    match serve(&listen) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nfs-floor: {listen}: {e}");
            std::process::ExitCode::from(1)
        }
    }
}

fn serve(listen: &str) -> io::Result<()> {
    let l = TcpListener::bind(listen)?;
    println!("listening on {}", l.local_addr()?);
    io::stdout().flush()?;
    let store = Arc::new(store::Store::default());
    for s in l.incoming() {
        let Ok(s) = s else { continue };
        let store = store.clone();
        std::thread::spawn(move || {
            // A connection's end, clean or not, only ends its thread.
            let _ = connection(s, &store);
        });
    }
    Ok(())
}

/// Calls in order, one at a time: read a record, answer it, send the reply.
fn connection(s: TcpStream, store: &store::Store) -> io::Result<()> {
    s.set_nodelay(true)?;
    let mut rd = BufReader::with_capacity(256 << 10, s.try_clone()?);
    let mut wr = s;
    let mut rec = Vec::new();
    let mut out = nfs::Out(Vec::with_capacity(4096));
    while let Some(n) = read_record(&mut rd, &mut rec)? {
        out.0.clear();
        out.u32(0); // the record mark, set in `send`
        let tail = nfs::answer(&rec[..n], store, &mut out)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        send(&mut wr, &mut out.0, tail)?;
    }
    Ok(())
}

/// One RPC record (RFC 5531 §11: fragments until the last-fragment bit) into `rec`,
/// which only grows (no zero-fill per call); its length, or None at a clean end.
fn read_record(rd: &mut impl Read, rec: &mut Vec<u8>) -> io::Result<Option<usize>> {
    let mut used = 0;
    loop {
        let mut m = [0u8; 4];
        match rd.read_exact(&mut m) {
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && used == 0 => return Ok(None),
            r => r?,
        }
        let mark = u32::from_be_bytes(m);
        let end = used + (mark & 0x7fff_ffff) as usize;
        if end > MAX_RECORD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "record too long",
            ));
        }
        if rec.len() < end {
            rec.resize(end, 0);
        }
        rd.read_exact(&mut rec[used..end])?;
        used = end;
        if mark & 0x8000_0000 != 0 {
            return Ok(Some(used));
        }
    }
}

/// The reply in one record: the encoded part, then a READ's data straight from the file
/// (under its read lock) and the XDR padding, in one writev.
fn send(w: &mut TcpStream, out: &mut [u8], tail: Option<nfs::Tail>) -> io::Result<()> {
    let tail_len = tail.as_ref().map_or(0, |t| t.len);
    let pad = engine::xdr::pad_len(tail_len);
    let len = (out.len() - 4 + tail_len + pad) as u32;
    out[..4].copy_from_slice(&(0x8000_0000 | len).to_be_bytes());
    let Some(t) = tail else {
        return w.write_all(out);
    };
    let guard = t.data.read().unwrap_or_else(|e| e.into_inner());
    // The file may have shrunk since the READ sized its reply: send zeros for the rest.
    let zeros;
    let data = match guard.get(t.off..t.off + t.len) {
        Some(d) => d,
        None => {
            zeros = vec![0u8; t.len];
            &zeros
        }
    };
    let mut bufs = [
        IoSlice::new(out),
        IoSlice::new(data),
        IoSlice::new(&[0; 3][..pad]),
    ];
    let mut bufs = &mut bufs[..];
    while !bufs.is_empty() {
        let n = w.write_vectored(bufs)?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut bufs, n);
    }
    Ok(())
}
