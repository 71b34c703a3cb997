//! Resource exhaustion over TCP against the real gateway (in process, one reactor, memory
//! backend): record marks that announce more than is sent, stalled partial records
//! holding large buffers, and 1,000 concurrent connections. Every test ends by checking
//! that every pool buffer came back.

mod common;

use common::{raise_nofile, rpc_call, xdr_opaque, Gw, GwOpts, MOUNT, NFS};
use engine::rpc;
use engine::xdr::XdrReader;
use nfs_wire::{v3call, v3more};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;

/// One reactor, TCP only, memory backend; `large` 1 MiB buffers; `tcp_extra` lines go
/// into `[tcp]`.
fn start(large: usize, tcp_extra: &str) -> Gw {
    raise_nofile(u64::MAX);
    Gw::start(&GwOpts {
        small: 1024,
        medium: 128,
        large,
        tcp_max_connections: 1100,
        tcp_extra: tcp_extra.to_string(),
        rdma: false,
        ..GwOpts::default()
    })
}

fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn send_call(s: &mut TcpStream, call: &[u8]) {
    let mut rec = (0x8000_0000u32 | call.len() as u32).to_be_bytes().to_vec();
    rec.extend_from_slice(call);
    s.write_all(&rec).unwrap();
}

/// Reads one reply record and returns the procedure results after checking the xid
/// and an accepted-success header.
fn recv_reply(s: &mut TcpStream, xid: u32) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let mut mark = [0u8; 4];
        s.read_exact(&mut mark).unwrap();
        let m = u32::from_be_bytes(mark);
        let at = out.len();
        out.resize(at + (m & 0x7fff_ffff) as usize, 0);
        s.read_exact(&mut out[at..]).unwrap();
        if m & 0x8000_0000 != 0 {
            break;
        }
    }
    let (rx, st, at) = rpc::decode_reply(&out).unwrap();
    assert_eq!(
        (rx, st),
        (xid, rpc::ReplyStatus::Accepted(rpc::Accept::Success))
    );
    out[at..].to_vec()
}

fn call(s: &mut TcpStream, xid: u32, prog: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
    send_call(s, &rpc_call(xid, prog, proc_, args));
    recv_reply(s, xid)
}

fn mount(s: &mut TcpStream) -> Vec<u8> {
    let res = call(s, 1, MOUNT, 1, &v3more::mnt_args(b"/"));
    v3call::parse_mount(&res).expect("MNT ok")
}

fn create(s: &mut TcpStream, dir: &[u8], name: &str) -> Vec<u8> {
    let res = call(s, 2, NFS, 8, &v3more::create_args(dir, name.as_bytes()));
    v3call::parse_create(&res).expect("CREATE ok")
}

fn write_call(xid: u32, fh: &[u8], offset: u64, data: &[u8]) -> Vec<u8> {
    let args = v3more::write_args(fh, offset, nfs_wire::nfs3::FILE_SYNC, data);
    rpc_call(xid, NFS, 7, &args)
}

fn write(s: &mut TcpStream, xid: u32, fh: &[u8], offset: u64, data: &[u8]) {
    send_call(s, &write_call(xid, fh, offset, data));
    let res = recv_reply(s, xid);
    assert_eq!(XdrReader::new(&res).u32().unwrap(), 0, "WRITE ok");
}

fn read_args(fh: &[u8], offset: u64, count: u32) -> Vec<u8> {
    v3more::read_args(fh, offset, count)
}

/// The data of a READ3resok (status, post-op attributes, count, eof, data).
fn read_data(res: &[u8]) -> Vec<u8> {
    let mut r = XdrReader::new(res);
    assert_eq!(r.u32().unwrap(), 0, "READ ok");
    if r.bool().unwrap() {
        r.skip(84).unwrap(); // fattr3
    }
    let _count = r.u32().unwrap();
    let _eof = r.bool().unwrap();
    r.opaque_var(MIB).unwrap().to_vec()
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(131).wrapping_add(seed as u32) as u8)
        .collect()
}

/// A 1 MiB record mark followed by `n` bytes: a record that is never finished.
fn partial_1mib(n: usize) -> Vec<u8> {
    let mut w = (0x8000_0000u32 | MIB as u32).to_be_bytes().to_vec();
    w.extend(vec![0u8; n]);
    w
}

/// A good client mounts, creates a file and writes then reads back `n` 1 MiB blocks.
fn good_client_writes_1mib(gw: &Gw, n: u64) {
    let mut s = gw.connect_tcp();
    let root = mount(&mut s);
    let fh = create(&mut s, &root, "big");
    for i in 0..n {
        let data = pattern(MIB, i as u8);
        write(&mut s, 10 + i as u32, &fh, i * MIB as u64, &data);
        let res = call(
            &mut s,
            100 + i as u32,
            NFS,
            6,
            &read_args(&fh, i * MIB as u64, MIB as u32),
        );
        assert!(read_data(&res) == data, "block {i} read back");
    }
}

/// The slowloris measurement: 200 connections each announce a 1 MiB record and send
/// 4 bytes of it; another client's 1 MiB WRITEs must be answered at once (they used to
/// time out: each announcement pinned one of the large buffers).
#[test]
fn record_marks_do_not_block_another_clients_1mib_writes() {
    let gw = start(48, "");
    let mut attackers: Vec<TcpStream> = (0..200)
        .map(|_| {
            let mut s = gw.connect_tcp();
            s.write_all(&partial_1mib(4)).unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(gw.in_use(), 0, "record marks pinned pool buffers");
    good_client_writes_1mib(&gw, 3);
    attackers.clear();
    gw.assert_buffers_back(Duration::from_secs(10));
}

/// Twelve connections each send 100 KiB of a 1 MiB record and stop, holding all 8
/// large buffers; a good client's 1 MiB WRITE needs one: the stalled holders are
/// closed after tcp.stall_reclaim_ms and the WRITE is answered.
#[test]
fn stalled_partial_records_give_their_buffers_to_a_starved_client() {
    let gw = start(8, "stall_reclaim_ms = 200");
    let mut attackers: Vec<TcpStream> = (0..12)
        .map(|_| {
            let mut s = gw.connect_tcp();
            s.write_all(&partial_1mib(100 << 10)).unwrap();
            s
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(5);
    while gw.in_use() < 8 {
        assert!(Instant::now() < deadline, "attackers hold {}", gw.in_use());
        std::thread::sleep(Duration::from_millis(10));
    }
    good_client_writes_1mib(&gw, 2);
    attackers.clear();
    gw.assert_buffers_back(Duration::from_secs(10));
}

/// 1,000 concurrent connections on one reactor each do NULL, GETATTR, a 16 KiB WRITE
/// and a 32 KiB READ; then all close. Pool buffers return to their baseline and the
/// process RSS to near its baseline (per-connection memory is released, not kept).
#[test]
fn a_thousand_connections_do_work_and_leave_nothing_behind() {
    let gw = start(16, "");
    let mut s = gw.connect_tcp();
    let root = mount(&mut s);
    let fh = create(&mut s, &root, "shared");
    let blocks: Vec<Vec<u8>> = (0..4).map(|i| pattern(16 << 10, i)).collect();
    for (i, b) in blocks.iter().enumerate() {
        write(&mut s, 3 + i as u32, &fh, (i * (16 << 10)) as u64, b);
    }
    let whole: Vec<u8> = blocks.concat();
    drop(s);
    gw.assert_buffers_back(Duration::from_secs(10));
    let base = rss();

    let mut fhx = Vec::new();
    xdr_opaque(&mut fhx, &fh);
    let mut conns: Vec<TcpStream> = (0..1000).map(|_| gw.connect_tcp()).collect();
    // Each round goes out on every connection before any reply is read.
    for c in conns.iter_mut() {
        send_call(c, &rpc_call(1, NFS, 0, &[]));
    }
    for c in conns.iter_mut() {
        assert!(recv_reply(c, 1).is_empty(), "NULL");
    }
    for c in conns.iter_mut() {
        send_call(c, &rpc_call(2, NFS, 1, &fhx));
    }
    for c in conns.iter_mut() {
        assert_eq!(
            XdrReader::new(&recv_reply(c, 2)).u32().unwrap(),
            0,
            "GETATTR"
        );
    }
    for (i, c) in conns.iter_mut().enumerate() {
        let k = i % 4;
        send_call(c, &write_call(3, &fh, (k * (16 << 10)) as u64, &blocks[k]));
    }
    for c in conns.iter_mut() {
        assert_eq!(XdrReader::new(&recv_reply(c, 3)).u32().unwrap(), 0, "WRITE");
    }
    for c in conns.iter_mut() {
        send_call(c, &rpc_call(4, NFS, 6, &read_args(&fh, 8 << 10, 32 << 10)));
    }
    for c in conns.iter_mut() {
        let got = read_data(&recv_reply(c, 4));
        // Under buffer pressure a READ may be short (RFC 1813 allows it): a prefix.
        assert!(
            !got.is_empty() && whole[8 << 10..40 << 10].starts_with(&got),
            "READ"
        );
    }
    let peak = rss();
    conns.clear();
    gw.assert_buffers_back(Duration::from_secs(10));
    // The reactor notices the closes on its next passes; give it a moment.
    std::thread::sleep(Duration::from_millis(300));
    let after = rss();
    eprintln!(
        "rss: base {} MiB, with 1000 connections {} MiB, after close {} MiB",
        base >> 20,
        peak >> 20,
        after >> 20
    );
    assert!(
        after < base + (12 << 20),
        "RSS stayed {} KiB above its baseline after every connection closed",
        (after - base) >> 10
    );
    // And the gateway still serves.
    let mut s = gw.connect_tcp();
    assert!(call(&mut s, 9, NFS, 0, &[]).is_empty());
}

/// A client pipelines READs and never reads a reply. Its replies stop the reading of
/// its calls at tcp.max_queued_mib, and with no write progress for tcp.send_timeout_s
/// the gateway closes it and every reply buffer comes back, while the client still
/// holds its socket open.
#[test]
fn a_client_that_never_reads_is_closed_and_its_replies_freed() {
    let gw = start(16, "send_timeout_s = 1\nmax_queued_mib = 1");
    let mut s = gw.connect_tcp();
    let root = mount(&mut s);
    let fh = create(&mut s, &root, "f");
    write(&mut s, 3, &fh, 0, &pattern(32 << 10, 1));
    let mut w = s.try_clone().unwrap();
    w.set_write_timeout(Some(Duration::from_secs(3))).unwrap();
    let writer = std::thread::spawn(move || {
        let call = rpc_call(4, NFS, 6, &read_args(&fh, 0, 32 << 10));
        let mut rec = (0x8000_0000u32 | call.len() as u32).to_be_bytes().to_vec();
        rec.extend_from_slice(&call);
        let batch: Vec<u8> = rec.repeat(100);
        for _ in 0..100 {
            if w.write_all(&batch).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while gw.in_use() == 0 {
        assert!(Instant::now() < deadline, "no replies ever queued");
        std::thread::sleep(Duration::from_millis(5));
    }
    let held = Instant::now();
    gw.assert_buffers_back(Duration::from_secs(10));
    assert!(
        held.elapsed() >= Duration::from_millis(500),
        "freed before the send timeout"
    );
    writer.join().unwrap();
    // The gateway closed the connection: after the replies already sent, EOF or reset.
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("expected the gateway to close the connection: {e}"),
        }
    }
    good_client_writes_1mib(&gw, 1);
    gw.assert_buffers_back(Duration::from_secs(10));
}
