//! RFC 8167 responder rules from bytes: direction by `msg_type`, callback headers,
//! the callback table and reverse credits.

use super::*;

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

/// A 7-word RDMA_MSG header then an RPC message starting `xid, msg_type`.
fn msg(rdma_xid: u32, vers: u32, credit: u32, rpc_xid: u32, msg_type: u32) -> Vec<u8> {
    words(&[
        rdma_xid, vers, credit, 0, 0, 0, 0, rpc_xid, msg_type, 0, 0, 0,
    ])
}

#[test]
fn r8167_20_call_is_forward_and_reply_is_matched_by_msg_type() {
    assert_eq!(classify(&msg(7, 1, 32, 7, 0)), Inbound::Forward);
    assert_eq!(
        classify(&msg(7, 1, 3, 7, 1)),
        Inbound::Reply {
            xid: 7,
            credit: 3,
            payload_at: 28
        }
    );
    // A forward call with a read list is still forward (the lists are walked).
    let mut m = words(&[9, 1, 8, 0, 1, 40, 1, 100, 0, 0, 0, 0, 0]);
    m.extend(words(&[9, 0, 2, 100003, 3, 7]));
    assert_eq!(classify(&m), Inbound::Forward);
    // The same lists around a REPLY: no reverse chunks, so it answers nothing.
    let mut m = words(&[9, 1, 8, 0, 0, 1, 1, 5, 100, 0, 0, 0, 0]);
    m.extend(words(&[9, 1, 0, 0]));
    assert!(matches!(classify(&m), Inbound::Stray(_)));
}

#[test]
fn r8167_20_short_or_undecodable_messages_stay_with_the_forward_responder() {
    assert_eq!(classify(&[0u8; 12]), Inbound::Forward);
    // A REPLY msg_type beyond the end, or lists running past it.
    assert_eq!(
        classify(&words(&[1, 1, 1, 0, 0, 0, 0, 1])),
        Inbound::Forward
    );
    assert_eq!(classify(&words(&[1, 1, 1, 0, 1, 0, 0])), Inbound::Forward);
    assert_eq!(
        classify(&words(&[1, 1, 1, 0, 0, 1, u32::MAX])),
        Inbound::Forward
    );
    // NOMSG at the server is a Long forward call.
    assert_eq!(
        classify(&words(&[1, 1, 1, 1, 0, 0, 0, 1, 1])),
        Inbound::Forward
    );
}

#[test]
fn r8167_11_a_reply_with_another_version_or_rpc_xid_is_stray() {
    assert!(matches!(classify(&msg(7, 2, 1, 7, 1)), Inbound::Stray(_)));
    assert!(matches!(classify(&msg(7, 1, 1, 8, 1)), Inbound::Stray(_)));
}

#[test]
fn r8167_16_rdma_error_is_classified_for_callback_matching() {
    assert_eq!(
        classify(&words(&[5, 1, 1, wire::RDMA_ERROR, wire::ERR_CHUNK])),
        Inbound::Error { xid: 5 }
    );
    assert_eq!(
        classify(&words(&[5, 1, 1, wire::RDMA_ERROR])),
        Inbound::Forward,
        "16 bytes: nothing trusted"
    );
    let mut t = Table::new(2);
    let i = t.begin(5).unwrap();
    assert_eq!(t.on_error(6), None, "R8166-14: unmatched is dropped");
    assert_eq!(t.on_error(5), Some(i));
    assert_eq!(t.outstanding(), 0);
    assert_eq!(t.grant(), 1, "an error carries no reverse grant");
}

#[test]
fn r8167_09_r8167_10_r8167_14_callback_header_bytes() {
    let mut out = [0xffu8; 40];
    let n = encode_call_header(&mut out, 0xdead_beef, 2);
    assert_eq!(n, 28);
    assert_eq!(
        &out[..28],
        &words(&[0xdead_beef, 1, 2, wire::RDMA_MSG, 0, 0, 0])[..]
    );
    assert_eq!(out[28], 0xff, "nothing past the header");
    encode_call_header(&mut out, 1, 0);
    assert_eq!(&out[8..12], &1u32.to_be_bytes(), "rdma_credit never 0");
    assert_eq!(call_xid(&words(&[0x1234, 0, 2])), Some(0x1234));
    assert_eq!(
        call_xid(&words(&[0x1234, 1, 2])),
        None,
        "a REPLY is no callback"
    );
    assert_eq!(call_xid(&[0u8; 7]), None);
}

#[test]
fn r8167_02_reverse_grant_is_one_until_the_first_reply() {
    let mut t = Table::new(MAX_CALLBACKS);
    assert_eq!(t.requested(), 2);
    let a = t.begin(1).unwrap();
    assert_eq!(t.begin(2), Err(Refused::NoCredit));
    t.sent(a);
    assert_eq!(t.on_reply(1, 2), Some(a));
    assert_eq!(t.grant(), 2);
    let a = t.begin(2).unwrap();
    let b = t.begin(3).unwrap();
    assert_ne!(a, b);
    assert_eq!(t.begin(4), Err(Refused::NoCredit));
    assert_eq!(t.outstanding(), 2);
}

#[test]
fn r8167_03_grant_is_clamped_to_what_we_requested_and_never_zero() {
    let mut t = Table::new(2);
    let a = t.begin(1).unwrap();
    t.on_reply(1, 100);
    assert_eq!(t.grant(), 2);
    t.sent(a);
    t.begin(2).unwrap();
    t.on_reply(2, 0);
    assert_eq!(t.grant(), 1);
}

#[test]
fn r8167_04_unmatched_reply_changes_no_credit_state() {
    let mut t = Table::new(2);
    t.begin(1).unwrap();
    assert_eq!(t.on_reply(99, 2), None);
    assert_eq!((t.grant(), t.outstanding()), (1, 1));
}

#[test]
fn r8167_01_duplicate_xid_on_one_connection_is_refused_not_ambiguous() {
    let mut t = Table::new(2);
    let a = t.begin(1).unwrap();
    t.sent(a);
    t.on_reply(1, 2);
    t.begin(1).unwrap();
    assert_eq!(t.begin(1), Err(Refused::Busy));
}

#[test]
fn a_slot_whose_send_has_not_completed_is_not_reused() {
    let mut t = Table::new(2);
    let a = t.begin(1).unwrap();
    t.on_reply(1, 2);
    let b = t.begin(2).unwrap();
    t.on_reply(2, 2);
    assert_eq!(t.outstanding(), 0);
    assert_eq!(
        t.begin(3),
        Err(Refused::Busy),
        "both send buffers still held"
    );
    t.sent(b);
    assert_eq!(t.begin(3), Ok(b));
    t.sent(a);
    assert_eq!(t.begin(4), Ok(a));
}

#[test]
fn r8167_17_drain_lost_reports_every_outstanding_callback_once() {
    let mut t = Table::new(2);
    let a = t.begin(1).unwrap();
    t.on_reply(1, 2);
    t.sent(a);
    t.begin(2).unwrap();
    t.begin(3).unwrap();
    let mut lost = Vec::new();
    t.drain_lost(&mut |x| lost.push(x));
    lost.sort();
    assert_eq!(lost, [2, 3]);
    t.drain_lost(&mut |x| panic!("{x} twice"));
    assert_eq!(t.outstanding(), 0);
}

#[test]
fn classify_never_panics_and_only_trusts_what_is_there() {
    // xorshift: deterministic pseudo-random headers, biased towards RDMA_MSG/ERROR
    // and small list counts so every branch is reached.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut seen = [0u32; 4];
    for _ in 0..20_000 {
        let n = (next() % 20) as usize;
        let mut ws: Vec<u32> = (0..n)
            .map(|i| {
                let r = next() as u32;
                match i {
                    1 => [1, 1, 1, r][(r % 4) as usize],
                    3 => [0, 4, 1, r][(r % 4) as usize],
                    4..=6 | 8 => r % 3,
                    _ => r,
                }
            })
            .collect();
        if n > 7 && next() % 2 == 0 {
            ws[7] = ws[0];
        }
        let mut m = words(&ws);
        m.truncate(m.len().saturating_sub((next() % 4) as usize));
        let k = match classify(&m) {
            Inbound::Forward => 0,
            Inbound::Reply { payload_at, .. } => {
                assert!(payload_at + 8 <= m.len());
                1
            }
            Inbound::Error { .. } => {
                assert!(m.len() >= 20);
                2
            }
            Inbound::Stray(_) => 3,
        };
        seen[k] += 1;
    }
    assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
}
