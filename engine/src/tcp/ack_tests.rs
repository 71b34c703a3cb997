//! A record answered with `no_reply` is acknowledged at once (TCP_QUICKACK), not after
//! the kernel's delayed-ACK timer: a peer with Nagle's algorithm on (no TCP_NODELAY:
//! pynfs, many libtirpc programs) holds its next small call until that ACK comes.
//! Seen as 40 ms per NFSv4.1 client in pynfs REBT2c: each CB_NULL reply (answered by
//! nothing) delayed the client's next call by the delayed-ACK timeout.

use super::tests::{body, encode, pools, read_reply, Server};
use super::*;
use std::io::Write;
use std::net::TcpStream as StdStream;

/// The client sends a record the server answers with `no_reply` (a callback's REPLY,
/// to the gateway), then at once a call; the call's reply comes back promptly. The
/// connection first exchanges calls and replies, which puts the server's socket in
/// the kernel's interactive ("pingpong") mode, where ACKs are delayed.
#[test]
fn a_call_after_a_record_with_no_reply_is_not_held_by_nagle() {
    let p = pools(16, 0, 0);
    let p2 = p.clone();
    let srv = Server::start(super::tests::opts(), p.clone(), move |t, held| {
        for (c, b, _) in held.drain(..) {
            if b.first() == Some(&0) {
                t.no_reply(c);
            } else {
                t.send(c, super::tests::echo_reply(&p2, b));
            }
        }
    });
    let mut s = StdStream::connect(srv.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // Nagle on, as pynfs' sockets.
    s.set_nodelay(false).unwrap();
    let call = |s: &mut StdStream, id: u32| {
        let b = body(id, 16);
        s.write_all(&encode(&b, 1)).unwrap();
        assert_eq!(read_reply(s).unwrap(), b);
    };
    for i in 0..20 {
        call(&mut s, 0x0100_0000 + i);
    }
    let mut took = Vec::new();
    for i in 0..15 {
        let mut silent = body(i, 12);
        silent[0] = 0;
        let t0 = Instant::now();
        s.write_all(&encode(&silent, 1)).unwrap();
        call(&mut s, 0x0200_0000 + i);
        took.push(t0.elapsed());
    }
    took.sort();
    let median = took[took.len() / 2];
    // Delayed ACKs take 40 ms (Linux's TCP_DELACK_MIN) and more; a prompt ACK a
    // poll or two (2 ms each here).
    assert!(
        median < Duration::from_millis(20),
        "call after a record with no reply: median {median:?} (all {took:?})"
    );
    drop(s);
    srv.finish();
}
