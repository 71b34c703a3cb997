//! The reply-cache shares (`clients/budget.rs`): fraction of what is left, per client,
//! per source address, one slot while one fits, NFS4ERR_DELAY (never NOSPC) when none
//! does, idle sessions shrunk and grown back.

use super::super::{Clients, Limits, Principal};
use crate::state::error::StateError;
use crate::state::sessions::{ChannelAttrs, Session, SlotUse};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// What a greedy client asks: 64 slots (the cap) of the largest cached reply.
fn greedy() -> ChannelAttrs {
    ChannelAttrs {
        max_requests: 64,
        max_response_cached: 4096,
        ..Default::default()
    }
}

/// A table whose budget holds `slots` greedy slots.
fn table(slots: u64, idle: Duration) -> Clients {
    Clients::new(
        Limits {
            reply_cache_bytes: slots * Session::slot_bytes(&greedy()),
            session_idle: idle,
            max_sessions_per_client: 64,
            ..Default::default()
        },
        None,
    )
}

fn client(cl: &Clients, owner: &[u8]) -> u64 {
    cl.with(|t| {
        let id = t.insert(owner, [1; 8], Principal::None).unwrap();
        t.confirm(id);
        id
    })
}

fn ip(n: u32) -> IpAddr {
    IpAddr::from((0x0a00_0000u32 + n).to_be_bytes())
}

/// CREATE_SESSION's budget steps for `id` from `addr`.
fn open(cl: &Clients, id: u64, addr: IpAddr) -> Result<Arc<Session>, StateError> {
    cl.with(|t| {
        let f = t.grant_slots(greedy(), id, Some(addr))?;
        let sid = t.new_session_id();
        let s = Arc::new(Session::new(sid, id, f, f, 0, 0, None).from_addr(addr));
        t.add_session(s.clone()).map(|_| s)
    })
}

/// Runs one request on `slot` of `s` (the next sequence id) and caches its reply.
fn run(s: &Arc<Session>, slot: u32, seqid: u32) -> Result<(), StateError> {
    match s.use_slot(slot, seqid, Default::default())? {
        SlotUse::New(c) => {
            c.finish(Some(vec![1; 100]));
            Ok(())
        }
        SlotUse::Replay(_) => panic!("a new request"),
    }
}

/// Each share in turn bounds a session: 1/8 of what is left, 1/16 of the budget per
/// client, 1/4 per address; past its shares a session still gets one slot.
#[test]
fn shares_bound_each_session_client_and_address() {
    let cl = table(4096, Duration::from_secs(60));
    let a = client(&cl, b"a");
    // 1/16 of 4096 slots per client: 256, more than one session's 64.
    let sa: Vec<_> = (0..5).map(|_| open(&cl, a, ip(1)).unwrap()).collect();
    let got: Vec<u32> = sa.iter().map(|s| s.slots()).collect();
    assert_eq!(got, [64, 64, 64, 64, 1], "the client's share is used up");
    // One address: 1/4 = 1024 slots, then one slot per session.
    let mut held = 257;
    for n in 0..40 {
        let c = client(&cl, format!("nat-{n}").as_bytes());
        held += open(&cl, c, ip(2)).unwrap().slots();
    }
    assert_eq!(
        held,
        257 + 1024 + 24,
        "16 full sessions, then one slot each"
    );
    // Another address still gets a full session at once.
    let fresh = client(&cl, b"fresh");
    assert_eq!(open(&cl, fresh, ip(3)).unwrap().slots(), 64);
}

/// RFC 8881 §18.36.3 and knfsd's fraction: from many addresses, greedy sessions get
/// 1/8 of what is left each, so the budget is never gone after a few; when not one
/// slot fits the answer is NFS4ERR_DELAY, and a destroyed session's share is back.
#[test]
fn a_full_budget_answers_delay_and_comes_back() {
    let cl = table(512, Duration::from_secs(60));
    let mut sessions = Vec::new();
    let mut n = 0;
    let err = loop {
        let c = client(&cl, format!("o{n}").as_bytes());
        match open(&cl, c, ip(100 + n)) {
            Ok(s) => {
                assert!(s.slots() <= 64);
                sessions.push(s);
            }
            Err(e) => break e,
        }
        n += 1;
        assert!(n < 600, "never refused");
    };
    assert_eq!(err, StateError::Delay, "not SessionLimit (NFS4ERR_NOSPC)");
    assert!(sessions.len() > 8, "the first sessions did not take it all");
    // The first session got its client's share, 1/16 of 512 slots.
    assert_eq!(sessions[0].slots(), 32);
    let first = sessions[0].id;
    assert!(cl.with(|t| t.remove_session(&first)));
    let c = client(&cl, b"after");
    assert_eq!(
        open(&cl, c, ip(999)).unwrap().slots(),
        4,
        "1/8 of the 32 back"
    );
}

/// RFC 8881 §2.10.6.1: sessions idle for `session_idle` give back all but one slot
/// when a new session needs the budget; the target drops to slot 0, slot 0's cached
/// reply stays, a shrunk slot's does not; the session takes its budget back on its
/// next request when there is room, and until then a request on a shrunk slot gets
/// NFS4ERR_DELAY (its sequence id unchanged).
#[test]
fn idle_sessions_are_shrunk_for_a_new_client_and_grow_back() {
    let cl = table(128, Duration::from_millis(100));
    let mut idle = Vec::new();
    for n in 0..40 {
        let c = client(&cl, format!("idle{n}").as_bytes());
        if let Ok(s) = open(&cl, c, ip(n)) {
            idle.push(s);
        }
    }
    for s in &idle {
        run(s, 0, 1).unwrap();
        if s.slots() > 1 {
            run(s, 1, 1).unwrap();
        }
    }
    let c = client(&cl, b"new");
    assert_eq!(open(&cl, c, ip(500)).unwrap_err(), StateError::Delay);
    std::thread::sleep(Duration::from_millis(150));
    let fresh = open(&cl, c, ip(500)).unwrap();
    assert!(fresh.slots() >= 8, "got {}", fresh.slots());
    let big = idle.iter().find(|s| s.is_shrunk()).expect("one was shrunk");
    assert_eq!(big.granted(), 1);
    // Slot 0 keeps its reply; slot 1's is gone; slot 1's next request waits.
    assert!(matches!(
        big.use_slot(0, 1, Default::default()),
        Ok(SlotUse::Replay(_))
    ));
    assert_eq!(
        big.use_slot(1, 1, Default::default()).unwrap_err(),
        StateError::RetryUncached
    );
    assert_eq!(
        big.use_slot(1, 2, Default::default()).unwrap_err(),
        StateError::Delay
    );
    // Room again (the fresh session goes): the next request regrows it.
    assert!(cl.with(|t| t.remove_session(&fresh.id)));
    cl.regrow(big);
    assert!(big.granted() > 1);
    run(big, 1, 2).unwrap();
}
