//! Replies whose data is spliced from a pipe (`send_pipe`): byte order and padding
//! across partial sends to a slow reader, pipes handed back empty once sent, and
//! handed back at once (still holding data) when the connection closes mid-reply.

use super::tests::{body, encode, opts, pools, read_reply, Held, Server};
use super::*;
use std::io::Write;
use std::net::TcpStream as StdStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Pipes the test server owns: at most this many replies in the transport at once.
const PIPES: usize = 6;

/// The data of the spliced reply to record `id`: lengths of every residue mod 4, so
/// some replies need 1, 2 or 3 bytes of XDR padding.
fn pipe_data(id: u32) -> Vec<u8> {
    let len = 50_000 + (id as usize * 7919) % 40_000;
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2654435761).wrapping_add(id) as u8 ^ (i >> 9) as u8)
        .collect()
}

fn fill(p: &mut Pipe, data: &[u8]) {
    // SAFETY: writes `data` (readable, `data.len()` bytes) to our pipe's write end.
    let n = unsafe { libc::write(p.write_fd(), data.as_ptr().cast(), data.len()) };
    assert_eq!(n, data.len() as isize, "the pipe takes the whole reply");
    p.set_filled(data.len());
}

/// Even ids are echoed; odd ids go out as a header (id, length word) plus their data
/// spliced from one of `PIPES` pipes, and wait (held) while none is free. Handed-back
/// pipes are counted: `empty` when every byte left, `full` when they still held data.
#[derive(Default)]
struct Counts {
    empty: AtomicUsize,
    full: AtomicUsize,
    /// Pipes in the transport now.
    out: AtomicUsize,
}

fn pipe_server(p: Pools, counts: Arc<Counts>) -> impl FnMut(&mut TcpTransport, &mut Held) + Send {
    let mut free: Vec<Pipe> = (0..PIPES as u32)
        .map(|i| Pipe::new(128 * 1024, i).unwrap())
        .collect();
    move |t, held| {
        t.take_released_pipes(&mut |pipe| {
            counts.out.fetch_sub(1, Ordering::SeqCst);
            // What the pipe says it holds is what the kernel says.
            assert_eq!(pipe.queued(), pipe.filled());
            if pipe.is_empty() {
                counts.empty.fetch_add(1, Ordering::SeqCst);
                free.push(pipe);
            } else {
                // Its pages must not reach another reply: replaced.
                counts.full.fetch_add(1, Ordering::SeqCst);
                free.push(Pipe::new(128 * 1024, pipe.id).unwrap());
            }
        });
        let mut keep = Vec::new();
        for (c, b, at) in held.drain(..) {
            let id = u32::from_be_bytes(b[..4].try_into().unwrap());
            if !keep.is_empty() {
                // Replies in order (the client checks them so): after one waits, all do.
                keep.push((c, b, at));
                continue;
            }
            if id.is_multiple_of(2) {
                t.send_deferred(c, super::tests::echo_reply(&p, b));
                continue;
            }
            let Some(mut pipe) = free.pop() else {
                keep.push((c, b, at));
                continue;
            };
            let data = pipe_data(id);
            fill(&mut pipe, &data);
            let mut head = p.alloc(12).unwrap();
            head.spare_mut()[4..8].copy_from_slice(&id.to_be_bytes());
            head.spare_mut()[8..12].copy_from_slice(&(data.len() as u32).to_be_bytes());
            head.set_len(12);
            drop(b);
            counts.out.fetch_add(1, Ordering::SeqCst);
            t.send_pipe(c, head, pipe);
        }
        *held = keep;
    }
}

fn pipe_expected(id: u32) -> Vec<u8> {
    if id.is_multiple_of(2) {
        return body(id, 8);
    }
    let data = pipe_data(id);
    let mut v = id.to_be_bytes().to_vec();
    v.extend((data.len() as u32).to_be_bytes());
    v.extend(&data);
    v.resize(v.len() + (4 - data.len() % 4) % 4, 0);
    v
}

fn slow_client(addr: std::net::SocketAddr) -> StdStream {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(16 * 1024).unwrap();
    sock.connect(&addr.into()).unwrap();
    let s: StdStream = sock.into();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

#[test]
fn spliced_replies_survive_partial_sends_and_pipes_come_back_empty() {
    // 200 replies, half spliced (~70 KiB each), to a client with a 16 KiB receive
    // buffer that starts reading late: sends end mid-header, mid-data and mid-pad.
    let p = pools(1024, 0, 0);
    let counts = Arc::new(Counts::default());
    let mut o = opts();
    o.max_inflight = 1024;
    o.max_queued = 64 << 20;
    let srv = Server::start(o, p.clone(), pipe_server(p.clone(), counts.clone()));
    let mut s = slow_client(srv.addr);
    let n = 200u32;
    let mut wire = Vec::new();
    for id in 0..n {
        wire.extend(encode(&body(id, 8), 1));
    }
    s.write_all(&wire).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // Nothing read yet: pipes come back as the socket's send queue takes their
    // pages, not before; the queue cannot hold 7 MB, so most have not.
    assert!(
        counts.empty.load(Ordering::SeqCst) < (n / 2) as usize - PIPES,
        "pipes back before sent"
    );
    assert_eq!(counts.out.load(Ordering::SeqCst), PIPES);
    for id in 0..n {
        let r = read_reply(&mut s).unwrap();
        let want = pipe_expected(id);
        let at = r.iter().zip(&want).position(|(a, b)| a != b);
        assert!(
            r == want,
            "reply {id} differs: {} vs {} bytes, first at {at:?}",
            r.len(),
            want.len()
        );
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while counts.empty.load(Ordering::SeqCst) < (n / 2) as usize {
        assert!(Instant::now() < deadline, "pipes not handed back");
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(counts.full.load(Ordering::SeqCst), 0);
    drop(s);
    let st = srv.finish();
    assert!(st.write_blocks > 0, "{st:?}");
    let spliced: u64 = (0..n)
        .filter(|i| i % 2 == 1)
        .map(|i| pipe_data(i).len() as u64)
        .sum();
    assert_eq!(st.bytes_spliced, spliced, "{st:?}");
}

#[test]
fn a_connection_closed_mid_reply_hands_its_pipes_back_at_once() {
    let p = pools(1024, 0, 0);
    let counts = Arc::new(Counts::default());
    let mut o = opts();
    o.max_inflight = 1024;
    o.max_queued = 64 << 20;
    let srv = Server::start(o, p.clone(), pipe_server(p.clone(), counts.clone()));
    let mut s = slow_client(srv.addr);
    let mut wire = Vec::new();
    for id in 0..200u32 {
        wire.extend(encode(&body(id * 2 + 1, 8), 1));
    }
    s.write_all(&wire).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // Reads a little (the first reply stops mid-way), then goes away.
    let mut part = [0u8; 30_000];
    std::io::Read::read_exact(&mut s, &mut part).unwrap();
    drop(s);
    srv.wait_conns(0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while counts.out.load(Ordering::SeqCst) > 0 {
        assert!(
            Instant::now() < deadline,
            "pipes of a closed connection kept"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    // The reply cut mid-data (and those not started) still held pages.
    assert!(
        counts.full.load(Ordering::SeqCst) >= 1,
        "no pipe was cut mid-reply"
    );
    srv.finish();
}
